/*
 * node_quant — colour quantization as Pillow does it for ImageQuantize
 * (comfy_extras/nodes_post_processing.py): a palette from Pillow's median cut
 * (Image.quantize(colors), libImaging/Quant.c with method 0 and no k-means), and the
 * mapping of RGB pixels onto a palette (Image.quantize(palette=..., dither=...),
 * libImaging/Convert.c's topalette with Palette.c's colour cache), with Pillow's own
 * Floyd-Steinberg error diffusion, plus ComfyUI's ordered (Bayer) pre-dither.
 *
 * Results are Pillow's bit for bit (tests/unit/test_image_quantize.c holds them against
 * fixtures written by Pillow). Where Pillow versions differ this follows Pillow >= 10.1:
 * the palette has exactly the median cut's colours; 9.x padded it to 256 with black
 * entries that the mapping could pick (a caller can pass such a palette to reproduce it).
 *
 * Pixels are 8-bit RGB, 3 bytes each, row-major. Threads: any; no shared state.
 */
#ifndef LATENTD_NODES_NODE_QUANT_H
#define LATENTD_NODES_NODE_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/*
 * Median cut of n_px pixels into at most `colors` (1..256) colours: pal[0..*n_pal) in
 * Pillow's palette order. Fewer colours come back when the image has fewer distinct
 * (scaled) colours. Working memory is about 40 bytes a pixel, asked for with the
 * fallible allocator: returns 0, or ERR_TOO_LARGE with a message in `e`.
 */
int node_quant_median_cut(const uint8_t *rgb, size_t n_px, int colors, uint8_t pal[256][3],
                          int *n_pal, struct err *e);

/*
 * Map w x h pixels to indices into pal[0..n_pal) (1..256 entries) as Pillow's
 * convert("P", dither, palette) does: each colour goes to the entry nearest (squared
 * RGB distance, lowest index on ties) to its 4x4x4 cache cell's low corner, i.e. to
 * (r & ~3, g & ~3, b & ~3). `dither` 1 diffuses the error Floyd-Steinberg style with
 * Pillow's integer arithmetic (and its end-of-row carry); 0 maps each pixel alone.
 * Writes idx[w * h].
 */
void node_quant_map(const uint8_t *rgb, int w, int h, const uint8_t pal[][3], int n_pal,
                    int dither, uint8_t *idx);

/*
 * ComfyUI's ordered dither before the mapping (Quantize.bayer): adds to every pixel its
 * entry of the order x order Bayer matrix scaled by 2 * 256 / n_colors, plus 0.5 (in
 * float64, as numpy computes it), rounded to float32 (torch's in-place add), clamps to
 * 0..255 and truncates. `order` is 2, 4, 8
 * or 16. Writes out[w * h * 3] (may not alias rgb).
 */
void node_quant_bayer(const uint8_t *rgb, int w, int h, int order, int n_colors, uint8_t *out);

#endif
