/*
 * preview — Latent2RGB and PIL's bilinear resize (sd15.md §7; util/resample does the resize).
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "sampling_preview.h"

#include <math.h>
#include <string.h>

#include "alloc.h"
#include "pynum.h"
#include "resample.h"

void sampling_preview_size(int w, int h, int max_size, int *out_w, int *out_h)
{
    int sw = max_size, sh = max_size;
    double im_ratio = (double)w / (double)h, dest_ratio = 1.0;
    if (im_ratio != dest_ratio) {
        if (im_ratio > dest_ratio)
            sh = (int)pynum_round_half_even((double)h / (double)w * (double)max_size);
        else
            sw = (int)pynum_round_half_even((double)w / (double)h * (double)max_size);
    }
    *out_w = sw < 1 ? 1 : sw;
    *out_h = sh < 1 ? 1 : sh;
}

void sampling_preview_latent2rgb(const float *x0, int h, int w,
                                 const struct sampling_latent_rgb *f, uint8_t *rgb)
{
    size_t plane = (size_t)h * w;
    for (size_t p = 0; p < plane; p++) {
        for (int c = 0; c < 3; c++) {
            float v = x0[p] * f->factors[0][c];
            for (int k = 1; k < 4; k++)
                v = v + x0[k * plane + p] * f->factors[k][c];
            if (f->has_bias)
                v = v + f->bias[c];
            v = (v + 1.0f) / 2.0f;
            if (!(v > 0.0f)) /* NaN too */
                v = 0.0f;
            if (v > 1.0f)
                v = 1.0f;
            rgb[p * 3 + c] = (uint8_t)(v * 255.0f);
        }
    }
}

void sampling_preview_resize(const uint8_t *src, int iw, int ih, uint8_t *dst, int ow, int oh)
{
    resample_pil8(src, iw, ih, 3, dst, ow, oh, RESAMPLE_PIL_BILINEAR);
}

int sampling_preview_make(const float *x0, int h, int w, int max_size,
                          const struct sampling_latent_rgb *f, uint8_t **out, int *ow, int *oh,
                          struct err *e)
{
    *out = NULL;
    if (!x0 || h < 1 || w < 1 || max_size < 1 || max_size > 16384)
        return err_set(e, ERR_INVALID, "invalid preview size %dx%d (max %d)", w, h, max_size);
    uint8_t *small = xmalloc((size_t)h * w * 3);
    sampling_preview_latent2rgb(x0, h, w, f, small);
    sampling_preview_size(w, h, max_size, ow, oh);
    uint8_t *big = xmalloc((size_t)*ow * *oh * 3);
    sampling_preview_resize(small, w, h, big, *ow, *oh);
    xfree(small);
    *out = big;
    return 0;
}
