/*
 * sd_upscale — ComfyUI's common_upscale for latents (LatentUpscale,
 * LatentUpscaleBy): optional center crop to the target aspect, then
 * torch.nn.functional.interpolate in mode nearest-exact, bilinear, area or
 * bicubic (align_corners = False, no antialias), or ComfyUI's bislerp
 * (spherical interpolation of the channel vectors, first along w then h).
 *
 * Pure functions over caller buffers; any thread.
 */
#ifndef LATENTD_NODES_SD_UPSCALE_H
#define LATENTD_NODES_SD_UPSCALE_H

#include <stdint.h>

#include "err.h"

/* The methods LatentUpscale offers, in ComfyUI's order, NULL-terminated. */
extern const char *const sd_upscale_methods[];

/* Python's round() (half to even) of a double. */
double sd_round_half_even(double x);

/*
 * Resize src [b, c, h, w] to dst [b, c, oh, ow] with `method` (one of
 * sd_upscale_methods); crop_center crops src to the target aspect first
 * (ComfyUI's crop = "center"). Returns 0 or ERR_INVALID (unknown method, bad
 * size) with a message.
 */
int sd_upscale(const float *src, int64_t b, int64_t c, int64_t h, int64_t w, const char *method,
               int crop_center, float *dst, int64_t oh, int64_t ow, struct err *e);

#endif
