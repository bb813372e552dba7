/*
 * nn_tiled — ComfyUI's tiled_scale (comfy/utils.py tiled_scale_multidim) for 2-D models
 * that map an image to a scaled image: the VAE (sd15.md §4.5) and the upscale models.
 * Tiles of (ty, tx) input pixels start every tile - overlap pixels (the last one pulled
 * back inside), each tile's output is feathered over round(overlap * scale) pixels at its
 * edges and accumulated with its mask, and the sum is divided by the mask sum. A sample
 * that fits in one tile runs once, unmasked. Accumulation is in host memory; only one
 * tile is on the device at a time, which is the point: the activation peak is one tile's.
 *
 * Not a public header (models/ only). Threads: the executor thread, as the models.
 */
#ifndef LATENTD_MODELS_NN_TILED_H
#define LATENTD_MODELS_NN_TILED_H

#include <stdint.h>

#include "err.h"
#include "tensor.h"

/* Run the model on in [1, C, h, w] into out [1, out_ch, h*num/den, w*num/den] (both on
 * the tiler's device, out caller-allocated). Returns 0 or a negative ERR_*. */
typedef int (*nn_tile_fn)(void *ctx, const struct tensor *in, struct tensor *out, struct err *e);

struct nn_tiler {
    struct dev *d;   /* borrowed: where tiles are computed */
    nn_tile_fn fn;
    void *ctx;
    int out_ch;
    int num, den;    /* output size = input size * num / den (8/1 decode, 1/8 encode) */
    /* Optional (NULL: none): called after each tile; a negative return stops the pass
     * with that code (ERR_INTERRUPTED from a progress hook). */
    int (*tile_done)(void *user);
    void *user;
};

/* Tiles one pass over an h x w sample takes (comfy.utils.get_tiled_scale_steps). */
int64_t nn__tiled_steps(int64_t h, int64_t w, int64_t ty, int64_t tx, int64_t overlap);

/*
 * One tiled_scale pass over sample s [1, C, H, W] with tile (ty, tx) and overlap o (input
 * pixels); adds the pass result (sum / weight) into acc [out_ch, OH, OW] (host floats,
 * OH = round(H * num / den)). Returns 0 or the first failing tile's error.
 */
int nn__tiled_pass(const struct nn_tiler *t, const struct tensor *s, int64_t ty, int64_t tx,
                   int64_t o, float *acc, struct err *e);

#endif
