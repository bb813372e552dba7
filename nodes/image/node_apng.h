/*
 * node_apng — animated PNG (APNG) files as Pillow's PNG writer makes them with
 * save_all=True (PngImagePlugin._write_multiple_frames, Pillow >= 10), for
 * SaveAnimatedPNG. Compression is libpng's (node_png_encode, one PNG per frame); this
 * module only re-frames the compressed data into APNG chunks (acTL, fcTL, fdAT) with
 * zlib's CRC-32, so no deflate is written here.
 *
 * What Pillow decides and this keeps: a frame identical to the previous kept one is
 * dropped and its duration added to that one's; every later frame is cropped to the
 * bounding box of its changes from the previous kept frame and placed with fcTL's
 * offsets (dispose none, blend source); the delay is duration / 1000 s as a reduced
 * fraction (a numerator above 65535 is Pillow's "cannot write duration"); loops
 * forever (num_plays 0); and when a single frame is left the file is a plain PNG.
 * Extra chunks (ComfyUI's "comf" metadata) go after the image data, before IEND.
 *
 * Threads: any; no shared state.
 */
#ifndef LATENTD_NODES_NODE_APNG_H
#define LATENTD_NODES_NODE_APNG_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"

/* A chunk to write verbatim: 4-letter type and its data (borrowed). */
struct node_png_chunk {
    char type[5];
    const void *data;
    size_t len;
};

/*
 * Encode n >= 1 frames of w x h pixels, c = 3 (RGB) or 4 (RGBA) 8-bit channels each
 * (frames[i] borrowed), at zlib `level` 0..9, each shown duration_ms, appending the file
 * to `out`. `after` (n_after chunks) follow the last frame's data. Returns 0, or
 * ERR_INVALID with Pillow's message in `e` (a duration it cannot write), or
 * ERR_INTERNAL (libpng failed).
 */
int node_apng_encode(const uint8_t *const *frames, int n, int w, int h, int c, int level,
                     int duration_ms, const struct node_png_chunk *after, int n_after,
                     struct buf *out, struct err *e);

#endif
