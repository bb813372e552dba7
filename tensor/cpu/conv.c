/*
 * conv.c — 2-D convolution as im2col + one GEMM per chunk of output rows.
 *
 * out[n] [co, P] = W [co, K] x cols [K, P] + bias, K = ci*kh*kw, P = output
 * pixels. A 1x1 stride-1 unpadded conv needs no im2col: x[n] is already
 * [ci, h*w]. Otherwise the output rows are cut into chunks so that the
 * column buffer stays around CONV_COLS_BYTES (it is written, then read once by
 * the GEMM while still in cache, instead of a 47 MB buffer for a 64x64x320
 * 3x3 conv); the im2col of each chunk runs on the pool, the GEMM on the BLAS
 * library's threads.
 */
#include <string.h>

#include "alloc.h"
#include "../tensor_impl.h"

#ifndef CONV_COLS_BYTES
#define CONV_COLS_BYTES (8u << 20)
#endif

size_t cpu_conv_cols_bytes = CONV_COLS_BYTES; /* tunable by the benchmark */

struct im2col_job {
    float *cols;
    const float *x;
    int64_t ci, h, w, kh, kw, ho, wo;
    int64_t oy0, rows; /* output rows of this chunk */
    const struct tensor_conv2d_opts *o;
};

static void im2col_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct im2col_job *j = ctx;
    int s = j->o->stride;
    int64_t p = j->rows * j->wo; /* columns in the chunk */
    for (int64_t r = b; r < e; r++) { /* r = (c, ky, kx) */
        int64_t c = r / (j->kh * j->kw), ky = r / j->kw % j->kh, kx = r % j->kw;
        const float *xc = j->x + c * j->h * j->w;
        float *dst = j->cols + r * p;
        for (int64_t oy = j->oy0; oy < j->oy0 + j->rows; oy++) {
            int64_t iy = oy * s - j->o->pad_top + ky;
            float *d = dst + (oy - j->oy0) * j->wo;
            if (iy < 0 || iy >= j->h) {
                memset(d, 0, (size_t)j->wo * sizeof(float));
                continue;
            }
            const float *xr = xc + iy * j->w;
            /* valid ox: 0 <= ox*s - pad_left + kx < w */
            int64_t off = kx - j->o->pad_left;
            int64_t lo = off >= 0 ? 0 : (-off + s - 1) / s;
            int64_t hi = (j->w - 1 - off) < 0 ? 0 : (j->w - 1 - off) / s + 1;
            if (hi > j->wo)
                hi = j->wo;
            if (lo > hi)
                lo = hi;
            for (int64_t ox = 0; ox < lo; ox++)
                d[ox] = 0.0f;
            if (s == 1) {
                memcpy(d + lo, xr + lo + off, (size_t)(hi - lo) * sizeof(float));
            } else {
                for (int64_t ox = lo; ox < hi; ox++)
                    d[ox] = xr[ox * s + off];
            }
            for (int64_t ox = hi; ox < j->wo; ox++)
                d[ox] = 0.0f;
        }
    }
}

static void fill_bias(float *out, const float *bias, int64_t co, int64_t p, int64_t ldo)
{
    for (int64_t c = 0; c < co; c++) {
        float v = bias ? bias[c] : 0.0f;
        float *o = out + c * ldo;
        for (int64_t i = 0; i < p; i++)
            o[i] = v;
    }
}

void cpu_conv2d(float *out, const float *x, const float *w, const float *bias, int64_t n,
                int64_t ci, int64_t h, int64_t wd, int64_t co, int64_t kh, int64_t kw,
                const struct tensor_conv2d_opts *o)
{
    int64_t ho, wo;
    tensor_conv2d_out_hw(o, h, wd, kh, kw, &ho, &wo);
    int64_t k = ci * kh * kw, p = ho * wo;
    int direct = kh == 1 && kw == 1 && o->stride == 1 && !o->pad_top && !o->pad_left &&
                 !o->pad_bottom && !o->pad_right;
    if (direct) {
        for (int64_t b = 0; b < n; b++) {
            float *ob = out + b * co * p;
            fill_bias(ob, bias, co, p, p);
            cpu_sgemm(0, 0, co, p, k, 1.0f, w, k, x + b * ci * h * wd, p, 1.0f, ob, p, 0);
        }
        return;
    }
    int64_t rows = (int64_t)(cpu_conv_cols_bytes / sizeof(float)) / (k * wo);
    if (rows < 1)
        rows = 1;
    if (rows > ho)
        rows = ho;
    float *cols = xmalloc_aligned(64, (size_t)(k * rows * wo) * sizeof(float));
    for (int64_t b = 0; b < n; b++) {
        float *ob = out + b * co * p;
        fill_bias(ob, bias, co, p, p);
        for (int64_t oy0 = 0; oy0 < ho; oy0 += rows) {
            int64_t r = ho - oy0 < rows ? ho - oy0 : rows;
            struct im2col_job j = {cols, x + b * ci * h * wd, ci, h, wd, kh, kw, ho, wo,
                                   oy0, r, o};
            tensor__pool_for(k, im2col_task, &j);
            cpu_sgemm(0, 0, co, r * wo, k, 1.0f, w, k, cols, r * wo, 1.0f, ob + oy0 * wo, p, 0);
        }
    }
    xfree_aligned(cols);
}
