/*
 * sd_upscale — LatentUpscale's methods over the one resampler (util/resample.c).
 */
#include "sd_upscale.h"

#include <string.h>

#include "resample.h"

const char *const sd_upscale_methods[] = {"nearest-exact", "bilinear", "area", "bicubic",
                                          "bislerp", NULL};

int sd_upscale(const float *src, int64_t b, int64_t c, int64_t h, int64_t w, const char *method,
               int crop_center, float *dst, int64_t oh, int64_t ow, struct err *e)
{
    /* lanczos goes through 8-bit pixels: meaningless for latents, and not offered. */
    int known = 0;
    for (int i = 0; method && sd_upscale_methods[i] && !known; i++)
        known = !strcmp(method, sd_upscale_methods[i]);
    if (!known)
        return err_set(e, ERR_INVALID, "unknown upscale method '%s'", method ? method : "");
    if (b < 1)
        return err_set(e, ERR_INVALID, "cannot resize an empty latent batch");
    return resample(src, b, c, h, w, RESAMPLE_BCHW, method, crop_center, dst, oh, ow, e);
}
