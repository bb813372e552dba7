#include "node_imgops.h"

#include <math.h>
#include <string.h>

#include "alloc.h"
#include "err.h"

double node_round_half_even(double x)
{
    double r = floor(x + 0.5);
    if (r - x == 0.5 && fmod(r, 2.0) != 0.0)
        r -= 1.0;
    return r;
}

/* One output position's taps on one axis. */
struct taps {
    int32_t *start; /* [n_out] first source index */
    int32_t *count; /* [n_out] */
    float *w;       /* [n_out * max] weights */
    int max;
};

static void taps_alloc(struct taps *t, int64_t n_out, int max)
{
    t->start = xcalloc((size_t)n_out, sizeof(int32_t));
    t->count = xcalloc((size_t)n_out, sizeof(int32_t));
    t->w = xcalloc((size_t)n_out * max, sizeof(float));
    t->max = max;
}

static void taps_release(struct taps *t)
{
    xfree(t->start);
    xfree(t->count);
    xfree(t->w);
}

/* Taps as explicit (index, weight) pairs; indices are consecutive from start,
 * so clamped duplicates are merged into the edge weight. */
static void taps_set(struct taps *t, int64_t i, int64_t n_in, const int64_t *idx, const double *wt, int n)
{
    int64_t lo = n_in, hi = -1;
    for (int k = 0; k < n; k++) {
        int64_t j = idx[k] < 0 ? 0 : idx[k] >= n_in ? n_in - 1 : idx[k];
        if (j < lo)
            lo = j;
        if (j > hi)
            hi = j;
    }
    t->start[i] = (int32_t)lo;
    t->count[i] = (int32_t)(hi - lo + 1);
    float *w = t->w + i * t->max;
    for (int k = 0; k < n; k++) {
        int64_t j = idx[k] < 0 ? 0 : idx[k] >= n_in ? n_in - 1 : idx[k];
        w[j - lo] += (float)wt[k];
    }
}

static double cubic(double x)
{
    const double A = -0.75;
    x = fabs(x);
    if (x <= 1)
        return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < 2)
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return 0;
}

static double sinc(double x)
{
    if (x == 0)
        return 1;
    x *= M_PI;
    return sin(x) / x;
}

static double lanczos3(double x)
{
    return (x > -3 && x < 3) ? sinc(x) * sinc(x / 3) : 0;
}

static int make_taps(struct taps *t, int64_t n_in, int64_t n_out, const char *m)
{
    double scale = (double)n_in / (double)n_out;
    if (!strcmp(m, "nearest-exact") || !strcmp(m, "nearest")) {
        taps_alloc(t, n_out, 1);
        for (int64_t i = 0; i < n_out; i++) {
            int64_t j = (int64_t)floor(!strcmp(m, "nearest") ? i * scale : (i + 0.5) * scale);
            double one = 1;
            taps_set(t, i, n_in, &j, &one, 1);
        }
    } else if (!strcmp(m, "bilinear")) {
        taps_alloc(t, n_out, 2);
        for (int64_t i = 0; i < n_out; i++) {
            double x = (i + 0.5) * scale - 0.5;
            if (x < 0)
                x = 0;
            int64_t j[2] = {(int64_t)floor(x), (int64_t)floor(x) + 1};
            double l = x - (double)j[0];
            double w[2] = {1 - l, l};
            taps_set(t, i, n_in, j, w, 2);
        }
    } else if (!strcmp(m, "bicubic")) {
        taps_alloc(t, n_out, 4);
        for (int64_t i = 0; i < n_out; i++) {
            double x = (i + 0.5) * scale - 0.5;
            int64_t f = (int64_t)floor(x);
            double tt = x - (double)f;
            int64_t j[4] = {f - 1, f, f + 1, f + 2};
            double w[4] = {cubic(tt + 1), cubic(tt), cubic(1 - tt), cubic(2 - tt)};
            taps_set(t, i, n_in, j, w, 4);
        }
    } else if (!strcmp(m, "area")) {
        int max = (int)(n_in / n_out) + 2;
        taps_alloc(t, n_out, max);
        for (int64_t i = 0; i < n_out; i++) {
            int64_t s = (i * n_in) / n_out, e = ((i + 1) * n_in + n_out - 1) / n_out;
            t->start[i] = (int32_t)s;
            t->count[i] = (int32_t)(e - s);
            for (int64_t k = 0; k < e - s; k++)
                t->w[i * max + k] = (float)(1.0 / (double)(e - s));
        }
    } else if (!strcmp(m, "lanczos")) {
        /* PIL's ImagingResample: support grows with the downscale factor. */
        double fs = scale > 1 ? scale : 1;
        double support = 3 * fs;
        int max = (int)ceil(support) * 2 + 2;
        taps_alloc(t, n_out, max);
        for (int64_t i = 0; i < n_out; i++) {
            double center = (i + 0.5) * scale;
            int64_t xmin = (int64_t)(center - support + 0.5);
            if (xmin < 0)
                xmin = 0;
            int64_t xmax = (int64_t)(center + support + 0.5);
            if (xmax > n_in)
                xmax = n_in;
            xmax -= xmin;
            if (xmax > max)
                xmax = max;
            double sum = 0;
            for (int64_t k = 0; k < xmax; k++) {
                double w = lanczos3((k + xmin - center + 0.5) / fs);
                t->w[i * max + k] = (float)w;
                sum += w;
            }
            for (int64_t k = 0; k < xmax && sum != 0; k++)
                t->w[i * max + k] = (float)(t->w[i * max + k] / sum);
            t->start[i] = (int32_t)xmin;
            t->count[i] = (int32_t)xmax;
        }
    } else {
        return ERR_INVALID;
    }
    return 0;
}

static float q8(float v)
{
    /* PIL works on uint8: round and clamp after each pass. */
    float r = floorf(v * 255.0f + 0.5f);
    return (r < 0 ? 0 : r > 255 ? 255 : r) / 255.0f;
}

int node_img_resize(const float *src, int64_t b, int64_t sh, int64_t sw, int64_t c, float *dst,
                    int64_t h, int64_t w, const char *method, int crop_center)
{
    int64_t x0 = 0, y0 = 0, cw = sw, ch = sh;
    if (crop_center) {
        double old_aspect = (double)sw / (double)sh, new_aspect = (double)w / (double)h;
        if (old_aspect > new_aspect)
            x0 = (int64_t)node_round_half_even((sw - sw * (new_aspect / old_aspect)) / 2);
        else if (old_aspect < new_aspect)
            y0 = (int64_t)node_round_half_even((sh - sh * (old_aspect / new_aspect)) / 2);
        cw = sw - 2 * x0;
        ch = sh - 2 * y0;
        if (cw < 1 || ch < 1) {
            x0 = y0 = 0;
            cw = sw;
            ch = sh;
        }
    }
    struct taps tx, ty;
    if (make_taps(&tx, cw, w, method) < 0)
        return ERR_INVALID;
    make_taps(&ty, ch, h, method);
    int lanczos = !strcmp(method, "lanczos");
    float *tmp = xmalloc((size_t)ch * w * c * sizeof(float));
    for (int64_t bi = 0; bi < b; bi++) {
        const float *s = src + (size_t)bi * sh * sw * c;
        /* horizontal: [ch, cw] -> [ch, w] */
        for (int64_t y = 0; y < ch; y++) {
            const float *row = s + ((size_t)(y + y0) * sw + x0) * c;
            for (int64_t x = 0; x < w; x++) {
                const float *wt = tx.w + x * tx.max;
                for (int64_t k = 0; k < c; k++) {
                    float acc = 0;
                    for (int j = 0; j < tx.count[x]; j++) {
                        float v = row[(size_t)(tx.start[x] + j) * c + k];
                        if (lanczos)
                            v = fminf(fmaxf(floorf(v * 255.0f), 0.0f), 255.0f) / 255.0f;
                        acc += wt[j] * v;
                    }
                    tmp[((size_t)y * w + x) * c + k] = (lanczos && cw != w) ? q8(acc) : acc;
                }
            }
        }
        /* vertical: [ch, w] -> [h, w] */
        float *d = dst + (size_t)bi * h * w * c;
        for (int64_t y = 0; y < h; y++) {
            const float *wt = ty.w + y * ty.max;
            for (int64_t x = 0; x < w * c; x++) {
                float acc = 0;
                for (int j = 0; j < ty.count[y]; j++)
                    acc += wt[j] * tmp[(size_t)(ty.start[y] + j) * w * c + x];
                d[(size_t)y * w * c + x] = lanczos ? q8(acc) : acc;
            }
        }
    }
    xfree(tmp);
    taps_release(&tx);
    taps_release(&ty);
    return 0;
}
