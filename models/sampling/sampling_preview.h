/*
 * sampling_preview — live previews of a sampling run the way ComfyUI's
 * Latent2RGB previewer makes them (sd15.md §7): batch element 0 of the
 * step's x0 (scaled latent space) mapped to RGB with the model family's 4×3
 * factors and bias (family.h's latent_format; SD1.5 has no bias),
 * then resized to fit a max_size box (default 512, --preview-size) keeping
 * the aspect ratio — enlarging small latents — with PIL's bilinear resize.
 *
 * The result is an RGB8 buffer; JPEG encoding (quality 95) belongs to the
 * nodes layer, which links libjpeg-turbo; models/ stays free of it.
 *
 * Thread safety: pure functions over caller buffers; any thread.
 */
#ifndef LATENTD_SAMPLING_PREVIEW_H
#define LATENTD_SAMPLING_PREVIEW_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* A latent format's Latent2RGB map: rows are latent channels, columns R, G, B. */
struct sampling_latent_rgb {
    float factors[4][3];
    float bias[3];   /* added after the product */
    int has_bias;    /* 0: no bias term at all (SD1.5), not even + 0 */
};

/* The preview size for an image of w × h fitting a max_size box (ImageOps.contain). */
void sampling_preview_size(int w, int h, int max_size, int *out_w, int *out_h);

/*
 * Latent2RGB at latent resolution: x0 is one sample [4, h, w] (channel-major),
 * rgb receives h·w·3 bytes, row-major RGB: byte = trunc(clamp((v + 1)/2, 0, 1)·255).
 */
void sampling_preview_latent2rgb(const float *x0, int h, int w,
                                 const struct sampling_latent_rgb *f, uint8_t *rgb);

/*
 * PIL's Image.resize(..., BILINEAR) of an RGB8 image: triangle filter widened
 * by the scale when shrinking, 22-bit fixed-point weights, horizontal pass
 * then vertical, each rounded to 8 bits. dst has ow·oh·3 bytes.
 */
void sampling_preview_resize(const uint8_t *src, int iw, int ih, uint8_t *dst, int ow, int oh);

/*
 * Both steps: the preview of sample 0 of x0 ([>=1, 4, h, w]) fitted into
 * max_size. On success *out is ow·oh·3 bytes the caller frees with xfree.
 * Returns 0 or ERR_INVALID (bad sizes).
 */
int sampling_preview_make(const float *x0, int h, int w, int max_size,
                          const struct sampling_latent_rgb *f, uint8_t **out, int *ow, int *oh,
                          struct err *e);

#endif
