/*
 * sampling_sag — Self-Attention Guidance's image-side arithmetic (ComfyUI's
 * comfy_extras/nodes_sag.py): the adversarially blurred x0 and the guided result.
 *
 *   create_blur_map: per sample, the attention map's column sums (mean over heads,
 *   summed over queries; unet_attn1_colsum) above the threshold mark the key tokens to
 *   blur. The T tokens become a rows x cols mask, rows the divisor of T nearest
 *   round(sqrt(T·h/w)) (searched x + i, max(1, x − i) for i < floor(sqrt(T)/2)), upsampled
 *   nearest to the latent's h x w; x0 is Gaussian-blurred (9 taps, sigma, reflect padding,
 *   each channel apart) and mixed: blurred·mask + x0·(1 − mask).
 *   post_cfg: degraded_noised = degraded + x − uncond_x0 goes through the model's uncond
 *   conditioning again (the caller), and out = cfg_result + (degraded − sag_x0)·scale.
 *
 * float32 arithmetic in PyTorch's order, the blur's sums accumulated in double. Latents
 * with a side of 4 or less are skipped (the reflect padding needs 5): the caller checks
 * sampling_sag_applies first. Pure functions: any thread.
 */
#ifndef LATENTD_SAMPLING_SAG_H
#define LATENTD_SAMPLING_SAG_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* SAG runs on latents of h x w (min(h, w) > 4). */
int sampling_sag_applies(int h, int w);

/*
 * create_blur_map(x0, attn, sigma, threshold) into out [b, c, h, w], from colsum
 * [b, tokens] (doubles). Returns 0, or ERR_INVALID with e set when no rows x cols
 * factorisation of tokens is found (ComfyUI fails there too).
 */
int sampling_sag_blur_map(const float *x0, int b, int c, int h, int w, const double *colsum,
                          int64_t tokens, double sigma, double threshold, float *out,
                          struct err *e);

/* degraded_noised = degraded + x − uncond_x0, n values. */
void sampling_sag_noised(const float *degraded, const float *x, const float *uncond_x0, size_t n,
                         float *out);

/* cfg_result += (degraded − sag_x0)·scale, n values, in place. */
void sampling_sag_apply(float *cfg_result, const float *degraded, const float *sag_x0,
                        double scale, size_t n);

#endif
