/*
 * unet_hypertile — ComfyUI's HyperTile (comfy_extras/nodes_hypertile.py): the choice of
 * how a self-attention's queries are tiled (unet.h struct unet_attn1_tiles; the tiled
 * attention itself is unet_attn1.h's).
 *
 * hypertile_in, per self-attention: with T tokens and the eval's x of H x W, it applies
 * when T equals (H/2^i)·(W/2^i) for some depth i in 0..max_depth (float equality, as
 * Python compares); the grid is rows = round(sqrt(T·W/H)), cols = round(sqrt(T·H/W))
 * (ComfyUI's h and w, with its aspect ratio W/H: on a non-square latent "rows" is the
 * latent's width; kept as is), and nh = random_divisor(rows, tile, swap_size), nw
 * likewise for cols, tile = max(32, tile_size)/8 latent pixels (times 2^i with
 * scale_depth). random_divisor lists the divisors d of v with min(tile, v) <= d <= v,
 * keeps the first swap_size, and picks v/d of one of them: index torch.randint(0, n − 1)
 * of n candidates, so the last candidate is never taken and with one or two candidates
 * the choice is fixed; a draw is made whenever n > 1.
 *
 * The draws come from PyTorch's global CPU generator, which in ComfyUI is the one
 * prepare_noise seeded with the sampler's seed (torch.manual_seed) and then used for the
 * initial noise. randint(0, n) on it is one 32-bit output modulo n. The caller passes
 * that generator's state (sampling_rng.h), advanced the same way.
 *
 * Threads: executor thread (the generator is the caller's).
 */
#ifndef LATENTD_MODELS_UNET_HYPERTILE_H
#define LATENTD_MODELS_UNET_HYPERTILE_H

#include "err.h"
#include "sampling_rng.h"
#include "unet.h"

struct unet_hypertile {
    int tile_size; /* pixels, 1..2048 */
    int swap_size; /* candidates kept, 1..128 */
    int max_depth; /* 0..10 */
    int scale_depth;
};

/*
 * random_divisor(value, min_value, max_options) with draws from rng (NULL: index 0,
 * no draw; the choice differs from ComfyUI's only when more than two candidates exist).
 */
int unet_hypertile_divisor(int64_t value, int64_t min_value, int max_options,
                           struct sampling_rng *rng);

/*
 * hypertile_in's decision for the self-attention at s: 0 with t filled (t->nh·t->nw = 1
 * or zeroed: no tiling), or ERR_INVALID with e set when ComfyUI's rearrange would fail
 * (a rows x cols grid that is not the token count).
 */
int unet_hypertile_choose(const struct unet_hypertile *h, struct sampling_rng *rng,
                          const struct unet_attn1_site *s, struct unet_attn1_tiles *t,
                          struct err *e);

#endif
