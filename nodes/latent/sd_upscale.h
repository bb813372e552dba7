/*
 * sd_upscale — ComfyUI's common_upscale for latents (LatentUpscale,
 * LatentUpscaleBy): the methods LatentUpscale offers (nearest-exact, bilinear,
 * area, bicubic, bislerp) on planar [b, c, h, w] data, through the one resampler
 * (resample.h, which holds the numerics).
 *
 * Pure functions over caller buffers; any thread.
 */
#ifndef LATENTD_NODES_SD_UPSCALE_H
#define LATENTD_NODES_SD_UPSCALE_H

#include <stdint.h>

#include "err.h"

/* The methods LatentUpscale offers, in ComfyUI's order, NULL-terminated. */
extern const char *const sd_upscale_methods[];

/*
 * Resize src [b, c, h, w] to dst [b, c, oh, ow] with `method` (one of
 * sd_upscale_methods); crop_center crops src to the target aspect first
 * (ComfyUI's crop = "center"). Returns 0 or ERR_INVALID (unknown method, bad
 * size) with a message.
 */
int sd_upscale(const float *src, int64_t b, int64_t c, int64_t h, int64_t w, const char *method,
               int crop_center, float *dst, int64_t oh, int64_t ow, struct err *e);

#endif
