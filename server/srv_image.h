/*
 * srv_image — the image work the file routes need on top of the codec module
 * (node_imageio.h, the only code that calls libpng/libjpeg): decode PNG/JPEG bytes or
 * a file to RGBA, encode PNG/JPEG, and the route-specific alpha edits (/view channel=,
 * preview=, /upload/mask).
 * Invariant: a decoded srv_image is RGBA (channels 4) until srv_image_drop_alpha.
 * Threads: any thread; no shared state.
 */
#ifndef LATENTD_SERVER_SRV_IMAGE_H
#define LATENTD_SERVER_SRV_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "node_imageio.h"

struct srv_image {
    int w, h;
    int channels;    /* 4 (RGBA) after decode; 3 after srv_image_drop_alpha */
    int had_alpha;   /* the source carried an alpha channel */
    uint8_t *px;     /* owned (xmalloc), w*h*channels */
};

/* Decode PNG or JPEG bytes / a file into RGBA. <0 with a message on failure. */
int srv_image_decode(const void *p, size_t n, struct srv_image *out, struct err *e);
int srv_image_load(const char *path, struct srv_image *out, struct err *e);
void srv_image_release(struct srv_image *img);

/* RGB black, alpha kept (255 everywhere when the source had none). */
void srv_image_alpha_only(struct srv_image *img);
/* RGBA -> RGB in place; returns 3. */
int srv_image_drop_alpha(struct srv_image *img);
/* Replace img's alpha by mask's alpha (same size, both RGBA). */
void srv_image_set_alpha_from(struct srv_image *img, const struct srv_image *mask);

/* PNG text chunks: the codec module's reader under the routes' names. */
#define srv_png_text node_png_text
#define srv_png_text_read node_png_text_read
#define srv_png_text_free node_png_text_free

/* Encode RGBA/RGB as PNG with zlib `level` and the given tEXt chunks (written before
 * IDAT, like ComfyUI's). *out is xmalloc'ed or NULL on failure. */
void srv_image_png_ex(const struct srv_image *img, int level, const struct srv_png_text *t,
                      int count, void **out, size_t *n);

/* Encode; *out is xmalloc'ed (caller frees with xfree) or NULL on failure. png: channels
 * as in img (3 or 4; `want_channels` is a hint ignored when img has 3), zlib's default
 * level 6. jpeg: the alpha channel, if any, is dropped. */
void srv_image_png(const struct srv_image *img, int want_channels, void **out, size_t *n);
void srv_image_jpeg(const struct srv_image *img, int quality, void **out, size_t *n);

#endif
