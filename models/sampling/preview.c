/*
 * preview — Latent2RGB and PIL's bilinear resize (sd15.md §7).
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

/* Python round(): half to even. */
static double round_half_even(double x)
{
    double r = floor(x), f = x - r;
    if (f > 0.5 || (f == 0.5 && fmod(r, 2.0) != 0.0))
        r += 1.0;
    return r;
}

void sampling_preview_size(int w, int h, int max_size, int *out_w, int *out_h)
{
    int sw = max_size, sh = max_size;
    double im_ratio = (double)w / (double)h, dest_ratio = 1.0;
    if (im_ratio != dest_ratio) {
        if (im_ratio > dest_ratio)
            sh = (int)round_half_even((double)h / (double)w * (double)max_size);
        else
            sw = (int)round_half_even((double)w / (double)h * (double)max_size);
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

#define PRECISION_BITS (32 - 8 - 2)

struct coeffs {
    int ksize;
    int *bounds; /* [out] pairs: first input index, count */
    int *k;      /* [out · ksize] fixed-point weights */
};

static void coeffs_compute(struct coeffs *c, int in_size, int out_size)
{
    double scale = (double)in_size / (double)out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale;
    c->ksize = (int)ceil(support) * 2 + 1;
    c->bounds = xmalloc((size_t)out_size * 2 * sizeof *c->bounds);
    c->k = xcalloc((size_t)out_size * c->ksize, sizeof *c->k);
    double *pk = xmalloc((size_t)c->ksize * sizeof *pk);
    for (int xx = 0; xx < out_size; xx++) {
        double center = ((double)xx + 0.5) * scale;
        double ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0)
            xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size)
            xmax = in_size;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) {
            double t = fabs(((double)(x + xmin) - center + 0.5) * ss);
            double wgt = t < 1.0 ? 1.0 - t : 0.0;
            pk[x] = wgt;
            ww += wgt;
        }
        for (int x = 0; x < xmax; x++) {
            double v = ww != 0.0 ? pk[x] / ww : pk[x];
            c->k[xx * c->ksize + x] =
                v < 0 ? (int)(-0.5 + v * (1 << PRECISION_BITS)) : (int)(0.5 + v * (1 << PRECISION_BITS));
        }
        c->bounds[xx * 2] = xmin;
        c->bounds[xx * 2 + 1] = xmax;
    }
    xfree(pk);
}

static void coeffs_release(struct coeffs *c)
{
    xfree(c->bounds);
    xfree(c->k);
}

static uint8_t clip8(int64_t v)
{
    if (v >= ((int64_t)1 << PRECISION_BITS) * 256)
        return 255;
    if (v <= 0)
        return 0;
    return (uint8_t)(v >> PRECISION_BITS);
}

void sampling_preview_resize(const uint8_t *src, int iw, int ih, uint8_t *dst, int ow, int oh)
{
    uint8_t *tmp = xmalloc((size_t)ow * ih * 3);
    if (ow == iw) {
        memcpy(tmp, src, (size_t)iw * ih * 3);
    } else {
        struct coeffs c;
        coeffs_compute(&c, iw, ow);
        for (int y = 0; y < ih; y++) {
            for (int x = 0; x < ow; x++) {
                int xmin = c.bounds[x * 2], xn = c.bounds[x * 2 + 1];
                const int *k = c.k + x * c.ksize;
                for (int ch = 0; ch < 3; ch++) {
                    int64_t ss = (int64_t)1 << (PRECISION_BITS - 1);
                    for (int i = 0; i < xn; i++)
                        ss += (int64_t)src[((size_t)y * iw + xmin + i) * 3 + ch] * k[i];
                    tmp[((size_t)y * ow + x) * 3 + ch] = clip8(ss);
                }
            }
        }
        coeffs_release(&c);
    }
    if (oh == ih) {
        memcpy(dst, tmp, (size_t)ow * oh * 3);
    } else {
        struct coeffs c;
        coeffs_compute(&c, ih, oh);
        for (int y = 0; y < oh; y++) {
            int ymin = c.bounds[y * 2], yn = c.bounds[y * 2 + 1];
            const int *k = c.k + y * c.ksize;
            for (int x = 0; x < ow; x++) {
                for (int ch = 0; ch < 3; ch++) {
                    int64_t ss = (int64_t)1 << (PRECISION_BITS - 1);
                    for (int i = 0; i < yn; i++)
                        ss += (int64_t)tmp[((size_t)(ymin + i) * ow + x) * 3 + ch] * k[i];
                    dst[((size_t)y * ow + x) * 3 + ch] = clip8(ss);
                }
            }
        }
        coeffs_release(&c);
    }
    xfree(tmp);
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
