/*
 * node_imageio — the image codec module: the only code that calls libpng and
 * libjpeg-turbo. PNG, JPEG (and GIF, node_gif.h) files <-> 8-bit interleaved pixels
 * with EXIF orientation; PNG and JPEG to memory (one PNG encoder, one JPEG encoder,
 * shared by files, previews, SaveImageWebsocket and the server's /view); and PNG/JPEG
 * bytes -> RGBA plus PNG text-chunk reading for the server's uploads (server/srv_image.h
 * keeps only the route-specific alpha edits on top).
 *
 * Pixels are 8-bit, row-major, interleaved, `c` channels: 1 (gray), 2 (gray +
 * alpha), 3 (RGB) or 4 (RGBA). 16-bit PNGs are reduced to 8 bits, palettes and
 * tRNS expanded (a tRNS chunk gives an alpha channel).
 *
 * Threads: any; functions share no state.
 */
#ifndef LATENTD_NODES_NODE_IMAGEIO_H
#define LATENTD_NODES_NODE_IMAGEIO_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"
#include "node_run.h"

/* Larger images are refused (PIL's decompression-bomb error threshold). */
#define NODE_IMAGE_MAX_PIXELS 178956970ull

struct node_pixels {
    int w, h, c;
    uint8_t *px; /* owned, w*h*c bytes */
};

/* One decoded file: one or more frames of equal size. */
struct node_image_file {
    struct node_pixels *frames; /* owned */
    int n_frames;
};
void node_image_file_release(struct node_image_file *f);

/*
 * Decode a PNG, JPEG or GIF file (sniffed by content, not by name) with its EXIF
 * orientation applied. GIF gives every frame (RGBA, composited as PIL does), and so
 * does an animated PNG (node_apng_read.h; its frames get no EXIF orientation).
 * Returns 0, or ERR_IO / ERR_UNSUPPORTED / ERR_INVALID with a message. MPO's extra
 * frames are dropped as ComfyUI drops them. WebP and TIFF are not supported.
 */
int node_image_load(const char *path, struct node_image_file *out, struct err *e);

/* Apply an EXIF orientation (1..8) in place (dimensions may swap). */
void node_pixels_orient(struct node_pixels *p, int orientation);

/*
 * Write a PNG: c = 1, 3 or 4; zlib `level` 0..9; tEXt chunks written after IHDR,
 * before IDAT, in order (values must be Latin-1; the graph passes ASCII JSON).
 * Returns 0 or ERR_IO with a message.
 */
int node_png_write(const char *path, const uint8_t *px, int w, int h, int c, int level,
                   const struct node_text_chunk *text, int n_text, struct err *e);

/*
 * The same PNG without text chunks, appended to `out` (SaveImageWebsocket sends it
 * over the socket). Returns 0 or ERR_INTERNAL (libpng failed; out may hold part of it).
 */
int node_png_encode(const uint8_t *px, int w, int h, int c, int level, struct buf *out);

/* node_png_encode with tEXt chunks (placed as node_png_write places them). */
int node_png_encode_text(const uint8_t *px, int w, int h, int c, int level,
                         const struct node_text_chunk *text, int n_text, struct buf *out);

/*
 * Encode a JPEG at `quality` (1..100) from c = 3 (RGB) or 4 (RGBA, alpha dropped)
 * pixels. *out is allocated with xmalloc; caller frees with xfree. Returns 0,
 * ERR_INVALID (bad size or c) or ERR_INTERNAL (libjpeg failed; *out NULL).
 */
int node_jpeg_encode(const uint8_t *px, int w, int h, int c, int quality, uint8_t **out,
                     size_t *n);

/*
 * Decode PNG or JPEG bytes (sniffed by content) into RGBA: out->c = 4, opaque alpha
 * where the source had none (*had_alpha says which), gray spread to R, G and B. The
 * decoders are node_image_load's (16-bit PNG samples cut to 8 bits, gAMA ignored, as
 * PIL reads them), without the EXIF orientation (the upload routes keep the bytes as
 * sent). Truncated JPEG data, chunks running past the end and
 * more than NODE_IMAGE_MAX_PIXELS are refused. Returns 0, or ERR_INVALID /
 * ERR_TOO_LARGE / ERR_UNSUPPORTED with a message (out->px NULL).
 */
int node_image_decode_rgba(const void *p, size_t n, struct node_pixels *out, int *had_alpha,
                           struct err *e);

/* A PNG text chunk (tEXt/zTXt/iTXt) as read back; both strings owned. */
struct node_png_text {
    char *key;
    char *text;
};

/* The text chunks before the first IDAT of PNG bytes (none for other formats, or when
 * the header is corrupt: those read so far). *out is freed with node_png_text_free.
 * Returns the count. */
int node_png_text_read(const void *p, size_t n, struct node_png_text **out);
void node_png_text_free(struct node_png_text *t, int count);

/*
 * A preview JPEG (quality 95) of an RGB image scaled to fit inside size x size
 * (up or down, aspect kept). *out is allocated with xmalloc; caller frees with
 * xfree. Returns 0 or ERR_INTERNAL.
 */
int node_imageio_preview_jpeg(const uint8_t *rgb, int w, int h, int size, uint8_t **out, size_t *n);

#endif
