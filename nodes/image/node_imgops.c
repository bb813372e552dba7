#include "node_imgops.h"

#include <string.h>

const char *const node_img_upscale_methods[] = {"nearest-exact", "bilinear", "area", "bicubic",
                                                "lanczos", NULL};

int node_img_resize(const float *src, int64_t b, int64_t sh, int64_t sw, int64_t c, float *dst,
                    int64_t h, int64_t w, const char *method, int crop_center, struct err *e)
{
    struct err scratch = {0};
    if (!e)
        e = &scratch;
    int known = 0;
    for (int i = 0; method && node_img_upscale_methods[i] && !known; i++)
        known = !strcmp(method, node_img_upscale_methods[i]);
    if (!known)
        return err_set(e, ERR_INVALID, "unknown upscale method '%s'", method ? method : "");
    return resample(src, b, c, sh, sw, RESAMPLE_BHWC, method, crop_center, dst, h, w, e);
}
