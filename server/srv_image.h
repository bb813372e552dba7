/*
 * srv_image — the little image work the file routes need: decode PNG/JPEG to 8-bit
 * pixels, encode PNG/JPEG, and alpha-channel edits (/view channel=, preview=,
 * /upload/mask). libpng's simplified API and libjpeg-turbo do the codec work.
 * Threads: any thread; no shared state.
 */
#ifndef LATENTD_SERVER_SRV_IMAGE_H
#define LATENTD_SERVER_SRV_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

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

/* PNG text chunks (tEXt/zTXt/iTXt) as key/value pairs. */
struct srv_png_text {
    char *key;  /* owned */
    char *text; /* owned */
};

/* Read the text chunks of PNG bytes (none for other formats). *out owned by the caller:
 * free with srv_png_text_free. Returns the count. */
int srv_png_text_read(const void *p, size_t n, struct srv_png_text **out);
void srv_png_text_free(struct srv_png_text *t, int count);

/* Encode RGBA/RGB as PNG with zlib `level` and the given tEXt chunks (written before
 * IDAT, like ComfyUI's). *out is xmalloc'ed or NULL on failure. */
void srv_image_png_ex(const struct srv_image *img, int level, const struct srv_png_text *t,
                      int count, void **out, size_t *n);

/* Encode; *out is xmalloc'ed (caller frees with xfree) or NULL on failure. png: channels
 * as in img (3 or 4; `want_channels` is a hint ignored when img has 3). */
void srv_image_png(const struct srv_image *img, int want_channels, void **out, size_t *n);
void srv_image_jpeg(const struct srv_image *img, int quality, void **out, size_t *n);

#endif
