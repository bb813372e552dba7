/*
 * test_tensor_bf16 — bf16 compute of the CPU GEMM ops (tensor_precision.h, issue 15)
 * against float64 references written here.
 *
 * Two bounds, for a K-length dot y = sum x_i w_i (u8 = 2^-8, bf16's unit roundoff;
 * u24 = 2^-24, f32's):
 *   (a) against the exact dot of the bf16-rounded inputs x~, w~ (what the hardware
 *       multiplies): |y - sum x~ w~| <= gamma(K) sum |x~ w~|, gamma(K) = K u24 / (1 - K u24),
 *       the fp32-accumulation bound. An fp32 GEMM of the unrounded inputs misses it by
 *       far (its error against x~ w~ is ~u8), so passing (a) proves the inputs were rounded.
 *   (b) against the exact dot of the unrounded inputs: |y - sum x w| <=
 *       ((1 + u8)^2 - 1 + gamma(K) (1 + u8)^2) sum |x w| ~= 2^-7 sum |x w|: the relative
 *       error of a K-length dot with bf16 inputs, whatever K.
 * Checked for linear (small: one GEMM; large: pool panels, the activation rounded per
 * panel or up front), matmul with an f16
 * operand, conv2d through each of its paths (1x1, batched small image, row chunks),
 * with f32/f16/bf16 weights. Also: round-to-nearest-even ties; fp32 stays the default
 * and bit-identical; by default nothing is kept (weights are rounded per op into a
 * scratch that tensor_cpu_scratch_release frees); with LATENTD_BF16_CACHE_MB set (the
 * test_tensor_bf16_cached run) the weight cache fills, and a weight rewritten in place
 * (with or without tensor_bf16_cache_invalidate) is not served stale; nothing leaks.
 *
 * bf16 Winograd (winograd.c: U and V rounded, bf16 GEMMs, f32 transforms) is checked
 * against a float64 direct convolution of the unrounded inputs with a normwise bound:
 * max |y - ref| <= 2^-5 max sum|x w| (8 u8; the bf16 GEMM's own bound (b) is ~2 u8 per
 * output, and F(2x2, 3x3)'s transforms add terms of up to 4 inputs and 9 products per
 * output), and within 4x of the bf16 im2col path's measured error on the same data.
 * F(4x4, 3x3), which bf16 takes from 64^2 pixels off AMX (cpu_wino_tile_bf16), amplifies
 * the rounding of U and V through larger transforms: it is held within 16x of im2col's
 * error (measured 9-11x at 128 to 1280 channels) and shown to have run (its output
 * differs from F(2,3)'s).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "device.h"
#include "harness.h"
#include "tensor.h"
#include "tensor_precision.h"
#include "tensor_impl.h" /* cpu_conv_winograd: the paths compared */

static struct dev *d;

static uint32_t rng = 777;
static float frand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* bf16 rounding written independently of tensor/: scale the value so that its 8-bit
 * significand is an integer, round half to even in double, scale back. */
static double bf16_round(double v)
{
    if (v == 0.0 || !isfinite(v))
        return v;
    int ex;
    frexp(v, &ex);                    /* |v| in [2^(ex-1), 2^ex) */
    double q = ldexp(v, 8 - ex);      /* 8 significant bits left of the point */
    double r = nearbyint(q);          /* default rounding mode: half to even */
    return ldexp(r, ex - 8);
}

static struct tensor *mk(enum tensor_dtype dt, int ndim, const int64_t *shape, float *vals,
                         float scale)
{
    struct err e = {0};
    struct tensor *t = NULL;
    if (tensor_new(d, dt, ndim, shape, &t, &e) < 0)
        PANIC("tensor_new: %s", e.msg);
    int64_t n = tensor_numel(t);
    if (vals) {
        if (scale != 0.0f)
            for (int64_t i = 0; i < n; i++)
                vals[i] = frand() * scale;
        tensor_write_f32(t, vals, n, &e);
        tensor_read_f32(t, vals, n, &e); /* what dt holds */
    }
    return t;
}

static double gamma_k(int64_t k) { return k * 0x1p-24 / (1.0 - k * 0x1p-24); }

/* Worst ratio of |y - ref| to its bound, (a) and (b), over a GEMM y[m][n] =
 * sum_k A(i,k) B(k,j) given by accessor strides. Returns max over outputs. */
struct gemm_ref {
    const float *a, *b;
    int64_t m, n, k;
    int64_t as_i, as_k, bs_k, bs_j; /* element strides */
    const float *bias;              /* [n] or NULL, exact */
};

static void check_gemm(const char *what, const struct gemm_ref *g, const float *y,
                       int64_t ys_i, int64_t ys_j, double *worst_a, double *worst_b)
{
    double wa = 0, wb = 0;
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            double sr = 0, sar = 0, s = 0, sa = 0;
            for (int64_t q = 0; q < g->k; q++) {
                double x = g->a[i * g->as_i + q * g->as_k], w = g->b[q * g->bs_k + j * g->bs_j];
                double xr = bf16_round(x), wr = bf16_round(w);
                sr += xr * wr;
                sar += fabs(xr * wr);
                s += x * w;
                sa += fabs(x * w);
            }
            double bias = g->bias ? g->bias[j] : 0.0;
            double v = y[i * ys_i + j * ys_j];
            /* the bias is added in fp32 to the fp32 sum: one more rounding */
            double ba = gamma_k(g->k + 1) * (sar + fabs(bias)) + 1e-30;
            double u8 = 0x1p-8, grow = (1 + u8) * (1 + u8);
            double bb = (grow - 1 + gamma_k(g->k + 1) * grow) * (sa + fabs(bias)) + 1e-30;
            double ra = fabs(v - (sr + bias)) / ba, rb = fabs(v - (s + bias)) / bb;
            wa = ra > wa ? ra : wa;
            wb = rb > wb ? rb : wb;
        }
    ok(wa <= 1.0, "%s: |y - x~w~| / (gamma(K) sum|x~w~|) = %.3g <= 1 (bf16 inputs, fp32 sum)",
       what, wa);
    ok(wb <= 1.0, "%s: |y - xw| / ((2u8+u8^2+...) sum|xw|) = %.3g <= 1", what, wb);
    if (worst_a)
        *worst_a = wa;
    if (worst_b)
        *worst_b = wb;
}

/* linear y[rows, n] = x w^T + b, w at dt, under bf16 */
static void t_linear(enum tensor_dtype wdt, int64_t rows, int64_t n, int64_t k, const char *what)
{
    struct err e = {0};
    int64_t xs[2] = {rows, k}, ws[2] = {n, k}, bs[1] = {n}, ys[2] = {rows, n};
    float *xv = xmalloc((size_t)(rows * k) * 4), *wv = xmalloc((size_t)(n * k) * 4);
    float *bv = xmalloc((size_t)n * 4), *yv = xmalloc((size_t)(rows * n) * 4);
    float *y32 = xmalloc((size_t)(rows * n) * 4);
    struct tensor *x = mk(TENSOR_F32, 2, xs, xv, 1.0f), *w = mk(wdt, 2, ws, wv, 0.5f);
    struct tensor *b = mk(TENSOR_F32, 1, bs, bv, 0.1f), *y = mk(TENSOR_F32, 2, ys, NULL, 0);
    enum tensor_precision old = tensor_precision_set(TENSOR_PRECISION_BF16);
    EXPECT_OK(tensor_linear(y, x, w, b, &e));
    tensor_precision_set(old);
    tensor_read_f32(y, yv, rows * n, &e);
    struct gemm_ref g = {xv, wv, rows, n, k, k, 1, 1, k, bv};
    check_gemm(what, &g, yv, n, 1, NULL, NULL);
    /* fp32 afterwards: the scope ended, and fp32 is not bf16 (else (a) proved nothing) */
    EXPECT_OK(tensor_linear(y, x, w, b, &e));
    tensor_read_f32(y, y32, rows * n, &e);
    ok(memcmp(y32, yv, (size_t)(rows * n) * 4) != 0, "%s: fp32 after the scope differs", what);
    tensor_free(x);
    tensor_free(w);
    tensor_free(b);
    tensor_free(y);
    xfree(xv);
    xfree(wv);
    xfree(bv);
    xfree(yv);
    xfree(y32);
}

/*
 * Linear + GEGLU under bf16: y [rows, h] = a * gelu(g), [a | g] = x w^T + b, w [2h, k] at
 * wdt. The bound carries (a)'s GEMM bound through the product: |dy| <= |gelu(g)| ea +
 * (|a| + ea) max|gelu'| eg with max|gelu'| < 1.13, plus the fp32 GELU's own error.
 */
static void t_geglu(enum tensor_dtype wdt, int64_t rows, int64_t h, int64_t k, const char *what)
{
    struct err e = {0};
    int64_t xs[2] = {rows, k}, ws[2] = {2 * h, k}, bs[1] = {2 * h}, ys[2] = {rows, h};
    float *xv = xmalloc((size_t)(rows * k) * 4), *wv = xmalloc((size_t)(2 * h * k) * 4);
    float *bv = xmalloc((size_t)(2 * h) * 4), *yv = xmalloc((size_t)(rows * h) * 4);
    struct tensor *x = mk(TENSOR_F32, 2, xs, xv, 1.0f), *w = mk(wdt, 2, ws, wv, 0.5f);
    struct tensor *b = mk(TENSOR_F32, 1, bs, bv, 0.1f), *y = mk(TENSOR_F32, 2, ys, NULL, 0);
    enum tensor_precision old = tensor_precision_set(TENSOR_PRECISION_BF16);
    EXPECT_OK(tensor_linear_geglu(y, x, w, b, &e));
    tensor_precision_set(old);
    tensor_read_f32(y, yv, rows * h, &e);
    double worst = 0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < h; j++) {
            double v[2], err[2];
            for (int half = 0; half < 2; half++) {
                int64_t c = half * h + j;
                double s = bv[c], sa = fabs(bv[c]);
                for (int64_t q = 0; q < k; q++) {
                    double p = bf16_round(xv[i * k + q]) * bf16_round(wv[c * k + q]);
                    s += p;
                    sa += fabs(p);
                }
                v[half] = s;
                err[half] = gamma_k(k + 1) * sa + 1e-30;
            }
            double g = v[1], gelu = 0.5 * g * (1.0 + erf(g * 0.70710678118654752));
            double want = v[0] * gelu;
            double bound = fabs(gelu) * err[0] + (fabs(v[0]) + err[0]) * 1.13 * err[1] +
                           1e-5 * fabs(want) + 1e-6;
            double r = fabs(yv[i * h + j] - want) / bound;
            worst = r > worst ? r : worst;
        }
    ok(worst <= 1.0, "%s: |y - a~ gelu(g~)| / bound = %.3g <= 1 (bf16 inputs, fp32 sums)", what,
       worst);
    tensor_free(x);
    tensor_free(w);
    tensor_free(b);
    tensor_free(y);
    xfree(xv);
    xfree(wv);
    xfree(bv);
    xfree(yv);
}

static void t_ties(void)
{
    struct err e = {0};
    /* x = 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even is 1. 1 + 3 2^-8: 1 + 2^-6.
     * -(1 + 2^-8) -> -1; 1 + 2^-8 + 2^-20 is above the tie -> 1 + 2^-7. */
    const int64_t k = 4;
    float xv[4] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -(1.0f + 0x1p-8f),
                   1.0f + 0x1p-8f + 0x1p-20f};
    float want[4] = {1.0f, 1.0f + 0x1p-6f, -1.0f, 1.0f + 0x1p-7f};
    float wv[16] = {0}, yv[4];
    for (int i = 0; i < 4; i++)
        wv[i * 4 + i] = 1.0f;
    int64_t xs[2] = {1, k}, ws[2] = {k, k};
    struct tensor *x = mk(TENSOR_F32, 2, xs, xv, 0), *w = mk(TENSOR_F32, 2, ws, wv, 0);
    struct tensor *y = mk(TENSOR_F32, 2, xs, NULL, 0);
    enum tensor_precision old = tensor_precision_set(TENSOR_PRECISION_BF16);
    EXPECT_OK(tensor_linear(y, x, w, NULL, &e));
    tensor_precision_set(old);
    tensor_read_f32(y, yv, 4, &e);
    ok(memcmp(yv, want, sizeof(want)) == 0,
       "round to nearest even: %.9g %.9g %.9g %.9g", yv[0], yv[1], yv[2], yv[3]);
    tensor_free(x);
    tensor_free(w);
    tensor_free(y);
}

/* matmul a [m,k] (f32) @ b^T, b [n,k] at f16: the f16 operand is the adapted one. */
static void t_matmul(void)
{
    struct err e = {0};
    int64_t m = 96, n = 300, k = 260;
    int64_t as[2] = {m, k}, bs[2] = {n, k}, ys[2] = {m, n};
    float *av = xmalloc((size_t)(m * k) * 4), *bv = xmalloc((size_t)(n * k) * 4);
    float *yv = xmalloc((size_t)(m * n) * 4);
    struct tensor *a = mk(TENSOR_F32, 2, as, av, 1.0f), *b = mk(TENSOR_F16, 2, bs, bv, 1.0f);
    struct tensor *y = mk(TENSOR_F32, 2, ys, NULL, 0);
    enum tensor_precision old = tensor_precision_set(TENSOR_PRECISION_BF16);
    EXPECT_OK(tensor_matmul(y, a, b, 0, 1, 1.0f, &e));
    tensor_precision_set(old);
    tensor_read_f32(y, yv, m * n, &e);
    struct gemm_ref g = {av, bv, m, n, k, k, 1, 1, k, NULL};
    check_gemm("matmul f32 x f16^T", &g, yv, n, 1, NULL, NULL);
    tensor_free(a);
    tensor_free(b);
    tensor_free(y);
    xfree(av);
    xfree(bv);
    xfree(yv);
}

/* conv2d n x ci x h x w, co x ci x kh x kw, stride/pad; im2col'ed reference. */
static void t_conv(enum tensor_dtype wdt, int64_t n, int64_t ci, int64_t h, int64_t wd,
                   int64_t co, int64_t kk, int stride, int pad, const char *what)
{
    struct err e = {0};
    struct tensor_conv2d_opts o = {stride, pad, pad, pad, pad};
    int64_t ho = (h + 2 * pad - kk) / stride + 1, wo = (wd + 2 * pad - kk) / stride + 1;
    int64_t xs[4] = {n, ci, h, wd}, ws[4] = {co, ci, kk, kk}, bs[1] = {co},
            ys[4] = {n, co, ho, wo};
    int64_t K = ci * kk * kk, P = ho * wo;
    float *xv = xmalloc((size_t)(n * ci * h * wd) * 4), *wv = xmalloc((size_t)(co * K) * 4);
    float *bv = xmalloc((size_t)co * 4), *yv = xmalloc((size_t)(n * co * P) * 4);
    struct tensor *x = mk(TENSOR_F32, 4, xs, xv, 1.0f), *w = mk(wdt, 4, ws, wv, 0.3f);
    struct tensor *b = mk(TENSOR_F32, 1, bs, bv, 0.1f), *y = mk(TENSOR_F32, 4, ys, NULL, 0);
    enum tensor_precision old = tensor_precision_set(TENSOR_PRECISION_BF16);
    EXPECT_OK(tensor_conv2d(y, x, w, b, &o, &e));
    tensor_precision_set(old);
    tensor_read_f32(y, yv, n * co * P, &e);
    /* per image: y[co, P] = W [co, K] cols [K, P] */
    float *cols = xcalloc((size_t)(K * P), 4);
    double wa = 0, wb = 0;
    for (int64_t img = 0; img < n; img++) {
        for (int64_t c = 0; c < ci; c++)
            for (int64_t ky = 0; ky < kk; ky++)
                for (int64_t kx = 0; kx < kk; kx++)
                    for (int64_t oy = 0; oy < ho; oy++)
                        for (int64_t ox = 0; ox < wo; ox++) {
                            int64_t iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
                            float v = iy >= 0 && iy < h && ix >= 0 && ix < wd
                                          ? xv[((img * ci + c) * h + iy) * wd + ix]
                                          : 0.0f;
                            cols[((c * kk + ky) * kk + kx) * P + oy * wo + ox] = v;
                        }
        struct gemm_ref g = {wv, cols, co, P, K, K, 1, P, 1, NULL};
        /* the bias is per output row here: fold it by checking y - bias */
        float *yi = yv + img * co * P;
        for (int64_t c = 0; c < co; c++)
            for (int64_t p = 0; p < P; p++)
                yi[c * P + p] -= bv[c];
        double a_, b_;
        check_gemm(what, &g, yi, P, 1, &a_, &b_);
        wa = a_ > wa ? a_ : wa;
        wb = b_ > wb ? b_ : wb;
    }
    (void)wa;
    (void)wb;
    xfree(cols);
    tensor_free(x);
    tensor_free(w);
    tensor_free(b);
    tensor_free(y);
    xfree(xv);
    xfree(wv);
    xfree(bv);
    xfree(yv);
}

/* The cache: filled by a bf16 op, follows a weight rewritten in place. */
static void t_cache_kept(void);

/* The default: nothing kept, the weight rounded per op into a released scratch. */
static void t_cache(void)
{
    const char *mb = getenv("LATENTD_BF16_CACHE_MB");
    if (mb && atoi(mb) > 0) {
        t_cache_kept();
        return;
    }
    struct err e = {0};
    int64_t rows = 8, n = 256, k = 512;
    int64_t xs[2] = {rows, k}, ws[2] = {n, k}, ys[2] = {rows, n};
    float *xv = xmalloc((size_t)(rows * k) * 4), *wv = xmalloc((size_t)(n * k) * 4);
    float *yv = xmalloc((size_t)(rows * n) * 4);
    struct tensor *x = mk(TENSOR_F32, 2, xs, xv, 1.0f), *w = mk(TENSOR_F16, 2, ws, wv, 0.5f);
    struct tensor *y = mk(TENSOR_F32, 2, ys, NULL, 0);
    struct gemm_ref g = {xv, wv, rows, n, k, k, 1, 1, k, NULL};
    tensor_cpu_scratch_release();
    enum tensor_precision old = tensor_precision_set(TENSOR_PRECISION_BF16);
    EXPECT_OK(tensor_linear(y, x, w, NULL, &e));
    ok(tensor_bf16_cache_bytes() == 0, "per op: no bf16 copy is kept (%zu bytes)",
       tensor_bf16_cache_bytes());
    /* rewritten in place: the next op rounds the new values */
    for (int64_t i = 0; i < n * k; i++)
        wv[i] = frand() * 0.5f;
    tensor_write_f32(w, wv, n * k, &e);
    tensor_read_f32(w, wv, n * k, &e);
    EXPECT_OK(tensor_linear(y, x, w, NULL, &e));
    tensor_precision_set(old);
    tensor_read_f32(y, yv, rows * n, &e);
    check_gemm("per op, weight rewritten in place", &g, yv, n, 1, NULL, NULL);
    size_t held = tensor_cpu_scratch_release();
    ok(held >= (size_t)(n * k) * 2, "the per-op scratch held the weight (%zu bytes), freed",
       held);
    tensor_free(x);
    tensor_free(w);
    tensor_free(y);
    xfree(xv);
    xfree(wv);
    xfree(yv);
}

static void t_cache_kept(void)
{
    struct err e = {0};
    int64_t rows = 8, n = 256, k = 512;
    int64_t xs[2] = {rows, k}, ws[2] = {n, k}, ys[2] = {rows, n};
    float *xv = xmalloc((size_t)(rows * k) * 4), *wv = xmalloc((size_t)(n * k) * 4);
    float *yv = xmalloc((size_t)(rows * n) * 4);
    struct tensor *x = mk(TENSOR_F32, 2, xs, xv, 1.0f), *w = mk(TENSOR_F16, 2, ws, wv, 0.5f);
    struct tensor *y = mk(TENSOR_F32, 2, ys, NULL, 0);
    struct gemm_ref g = {xv, wv, rows, n, k, k, 1, 1, k, NULL};
    size_t before = tensor_bf16_cache_bytes();
    enum tensor_precision old = tensor_precision_set(TENSOR_PRECISION_BF16);
    EXPECT_OK(tensor_linear(y, x, w, NULL, &e));
    ok(tensor_bf16_cache_bytes() == before + (size_t)(n * k) * 2,
       "the weight's bf16 copy is cached (%zu -> %zu bytes)", before, tensor_bf16_cache_bytes());
    /* rewritten in place, nobody told the cache: the fingerprint catches it */
    for (int64_t i = 0; i < n * k; i++)
        wv[i] = frand() * 0.5f;
    tensor_write_f32(w, wv, n * k, &e);
    tensor_read_f32(w, wv, n * k, &e);
    EXPECT_OK(tensor_linear(y, x, w, NULL, &e));
    tensor_read_f32(y, yv, rows * n, &e);
    check_gemm("weight rewritten in place, not invalidated", &g, yv, n, 1, NULL, NULL);
    /* rewritten and invalidated (what the patcher does) */
    for (int64_t i = 0; i < n * k; i++)
        wv[i] = frand() * 0.5f;
    tensor_write_f32(w, wv, n * k, &e);
    tensor_read_f32(w, wv, n * k, &e);
    tensor_bf16_cache_invalidate(NULL, SIZE_MAX);
    ok(tensor_bf16_cache_bytes() == 0, "invalidating every range empties the cache");
    EXPECT_OK(tensor_linear(y, x, w, NULL, &e));
    tensor_precision_set(old);
    tensor_read_f32(y, yv, rows * n, &e);
    check_gemm("weight rewritten in place, invalidated", &g, yv, n, 1, NULL, NULL);
    tensor_free(x);
    tensor_free(w);
    tensor_free(y);
    xfree(xv);
    xfree(wv);
    xfree(yv);
}

/* Direct 3x3 stride-1 pad-1 convolution in float64 of the unrounded inputs: ref, and
 * sum |x w| per output in mag. */
static void conv_ref64(const float *xv, const float *wv, const float *bv, int64_t n, int64_t ci,
                       int64_t h, int64_t wd, int64_t co, double *ref, double *mag)
{
    for (int64_t img = 0; img < n; img++)
        for (int64_t o = 0; o < co; o++)
            for (int64_t oy = 0; oy < h; oy++)
                for (int64_t ox = 0; ox < wd; ox++) {
                    double s = bv[o], sa = fabs(bv[o]);
                    for (int64_t c = 0; c < ci; c++)
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++) {
                                int64_t iy = oy - 1 + ky, ix = ox - 1 + kx;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= wd)
                                    continue;
                                double p = (double)xv[((img * ci + c) * h + iy) * wd + ix] *
                                           wv[((o * ci + c) * 3 + ky) * 3 + kx];
                                s += p;
                                sa += fabs(p);
                            }
                    size_t at = (size_t)(((img * co + o) * h + oy) * wd + ox);
                    ref[at] = s;
                    mag[at] = sa;
                }
}

/* bf16 Winograd against float64 (bound in the header) and against bf16 im2col. */
/* (2, 40, 33, 35, 48): odd sizes, ragged edge tiles; (2, 64, 29, 32, 40): on AMX, V
 * written straight into tiles (ci a multiple of 32, 16 tiles a row), 15 tile rows */
static void t_winograd(int64_t n, int64_t ci, int64_t h, int64_t wd, int64_t co)
{
    struct err e = {0};
    struct tensor_conv2d_opts o = {1, 1, 1, 1, 1};
    int64_t xs[4] = {n, ci, h, wd}, ws[4] = {co, ci, 3, 3}, bs[1] = {co}, ys[4] = {n, co, h, wd};
    size_t ny = (size_t)(n * co * h * wd);
    float *xv = xmalloc((size_t)(n * ci * h * wd) * 4), *wv = xmalloc((size_t)(co * ci * 9) * 4);
    float *bv = xmalloc((size_t)co * 4), *yw = xmalloc(ny * 4), *yi = xmalloc(ny * 4);
    float *yf = xmalloc(ny * 4);
    double *ref = xmalloc(ny * 8), *mag = xmalloc(ny * 8);
    struct tensor *x = mk(TENSOR_F32, 4, xs, xv, 1.0f), *w = mk(TENSOR_F16, 4, ws, wv, 0.3f);
    struct tensor *b = mk(TENSOR_F32, 1, bs, bv, 0.1f), *y = mk(TENSOR_F32, 4, ys, NULL, 0);
    int saved = cpu_conv_winograd;
    cpu_conv_winograd = 2; /* Winograd: bf16, then fp32 */
    enum tensor_precision old = tensor_precision_set(TENSOR_PRECISION_BF16);
    EXPECT_OK(tensor_conv2d(y, x, w, b, &o, &e));
    tensor_read_f32(y, yw, (int64_t)ny, &e);
    cpu_conv_winograd = 0; /* im2col + bf16 GEMM */
    EXPECT_OK(tensor_conv2d(y, x, w, b, &o, &e));
    tensor_read_f32(y, yi, (int64_t)ny, &e);
    tensor_precision_set(old);
    cpu_conv_winograd = 2;
    int f43 = cpu_wino_tile_bf16(ci, co, h, wd) == 4;
    if (f43) { /* F(2,3) under bf16 on the same data: a different result */
        int saved43 = cpu_wino_f43;
        cpu_wino_f43 = 0;
        tensor_precision_set(TENSOR_PRECISION_BF16);
        EXPECT_OK(tensor_conv2d(y, x, w, b, &o, &e));
        tensor_read_f32(y, yf, (int64_t)ny, &e);
        tensor_precision_set(old);
        cpu_wino_f43 = saved43;
        ok(memcmp(yf, yw, ny * 4) != 0, "bf16 winograd %lldx%lld took F(4,3)", (long long)h,
           (long long)wd);
    }
    EXPECT_OK(tensor_conv2d(y, x, w, b, &o, &e));
    tensor_read_f32(y, yf, (int64_t)ny, &e);
    cpu_conv_winograd = saved;
    conv_ref64(xv, wv, bv, n, ci, h, wd, co, ref, mag);
    double ew = 0, ei = 0, ef = 0, mm = 0;
    for (size_t i = 0; i < ny; i++) {
        ew = fmax(ew, fabs(yw[i] - ref[i]));
        ei = fmax(ei, fabs(yi[i] - ref[i]));
        ef = fmax(ef, fabs(yf[i] - ref[i]));
        mm = fmax(mm, mag[i]);
    }
    printf("# winograd %lldx%lldx%lldx%lld -> %lld: max err / max sum|xw|: bf16 winograd %.3g, "
           "bf16 im2col %.3g, fp32 winograd %.3g\n", (long long)n, (long long)ci, (long long)h,
           (long long)wd, (long long)co, ew / mm, ei / mm, ef / mm);
    ok(ew <= 0x1p-5 * mm, "bf16 winograd %lld channels: max|y - ref| / max sum|xw| = %.3g <= 2^-5",
       (long long)ci, ew / mm);
    ok(ew <= (f43 ? 16 : 4) * ei,
       "bf16 winograd F(%d,3) error %.3g within %dx of bf16 im2col's %.3g", f43 ? 4 : 2, ew,
       f43 ? 16 : 4, ei);
    ok(ew > 8 * ef, "bf16 winograd ran in bf16 (error %.3g, fp32 winograd %.3g)", ew, ef);
    tensor_free(x);
    tensor_free(w);
    tensor_free(b);
    tensor_free(y);
    xfree(xv);
    xfree(wv);
    xfree(bv);
    xfree(yw);
    xfree(yi);
    xfree(yf);
    xfree(ref);
    xfree(mag);
}

/*
 * bf16 conv2d_up2 on the Winograd path reads x upsampled as it fills its patches
 * (cpu_conv2d_winograd_up2x): the same numbers, bit for bit, as upsampling first and
 * running the bf16 Winograd conv on the result. Odd sizes (ragged edge tiles) and 64
 * channels (V straight into tiles on AMX).
 */
static void t_up2(int64_t ci, int64_t h, int64_t wd, int64_t co)
{
    struct err e = {0};
    struct tensor_conv2d_opts o = {1, 1, 1, 1, 1};
    int64_t n = 2, xs[4] = {n, ci, h, wd}, us[4] = {n, ci, 2 * h, 2 * wd}, ws[4] = {co, ci, 3, 3},
            bs[1] = {co}, ys[4] = {n, co, 2 * h, 2 * wd};
    size_t ny = (size_t)(n * co * 4 * h * wd);
    float *xv = xmalloc((size_t)(n * ci * h * wd) * 4), *wv = xmalloc((size_t)(co * ci * 9) * 4);
    float *bv = xmalloc((size_t)co * 4), *y1 = xmalloc(ny * 4), *y2 = xmalloc(ny * 4);
    struct tensor *x = mk(TENSOR_F32, 4, xs, xv, 1.0f), *w = mk(TENSOR_F16, 4, ws, wv, 0.3f);
    struct tensor *b = mk(TENSOR_F32, 1, bs, bv, 0.1f), *y = mk(TENSOR_F32, 4, ys, NULL, 0);
    struct tensor *u = mk(TENSOR_F32, 4, us, NULL, 0);
    int saved = cpu_conv_winograd;
    cpu_conv_winograd = 2;
    enum tensor_precision old = tensor_precision_set(TENSOR_PRECISION_BF16);
    EXPECT_OK(tensor_conv2d_up2(y, x, w, b, &o, &e));
    tensor_read_f32(y, y1, (int64_t)ny, &e);
    EXPECT_OK(tensor_upsample_nearest(u, x, &e));
    EXPECT_OK(tensor_conv2d(y, u, w, b, &o, &e));
    tensor_read_f32(y, y2, (int64_t)ny, &e);
    ok(memcmp(y1, y2, ny * 4) == 0,
       "bf16 conv2d_up2 %lldx%lldx%lld -> %lld: bit-identical to upsample + conv", (long long)ci,
       (long long)h, (long long)wd, (long long)co);
    /* and GroupNorm + SiLU fused into the bf16 Winograd conv (on the upsampled u): bit
     * for bit where rows are whole vectors (the SiLU's scalar tail, 1 ulp apart from the
     * vector form, falls on other elements when a row is not) */
    struct tensor_gn_opts gn = {ci / 8, NULL, NULL, 1e-6f, 1};
    if (2 * wd % 16 == 0) {
        EXPECT_OK(tensor_conv2d_gn(y, u, &gn, w, b, &o, &e));
        tensor_read_f32(y, y1, (int64_t)ny, &e);
        struct tensor *g = mk(TENSOR_F32, 4, us, NULL, 0);
        EXPECT_OK(tensor_group_norm(g, u, gn.groups, NULL, NULL, gn.eps, 1, &e));
        EXPECT_OK(tensor_conv2d(y, g, w, b, &o, &e));
        tensor_read_f32(y, y2, (int64_t)ny, &e);
        ok(memcmp(y1, y2, ny * 4) == 0,
           "bf16 conv2d_gn %lld channels: bit-identical to group_norm + silu + conv",
           (long long)ci);
        tensor_free(g);
    }
    tensor_precision_set(old);
    cpu_conv_winograd = saved;
    tensor_free(x);
    tensor_free(w);
    tensor_free(b);
    tensor_free(y);
    tensor_free(u);
    xfree(xv);
    xfree(wv);
    xfree(bv);
    xfree(y1);
    xfree(y2);
}

/* The default is fp32, and fp32 inside an explicit F32 scope is bit-identical. */
static void t_default(void)
{
    struct err e = {0};
    int64_t rows = 64, n = 128, k = 320;
    int64_t xs[2] = {rows, k}, ws[2] = {n, k}, ys[2] = {rows, n};
    float *xv = xmalloc((size_t)(rows * k) * 4), *wv = xmalloc((size_t)(n * k) * 4);
    float *y1 = xmalloc((size_t)(rows * n) * 4), *y2 = xmalloc((size_t)(rows * n) * 4);
    struct tensor *x = mk(TENSOR_F32, 2, xs, xv, 1.0f), *w = mk(TENSOR_F16, 2, ws, wv, 0.5f);
    struct tensor *y = mk(TENSOR_F32, 2, ys, NULL, 0);
    ok(tensor_precision_get() == TENSOR_PRECISION_F32, "the default precision is fp32");
    EXPECT_OK(tensor_linear(y, x, w, NULL, &e));
    tensor_read_f32(y, y1, rows * n, &e);
    enum tensor_precision old = tensor_precision_set(TENSOR_PRECISION_F32);
    EXPECT_OK(tensor_linear(y, x, w, NULL, &e));
    tensor_precision_set(old);
    tensor_read_f32(y, y2, rows * n, &e);
    ok(memcmp(y1, y2, (size_t)(rows * n) * 4) == 0, "fp32 scope: bit-identical to the default");
    tensor_free(x);
    tensor_free(w);
    tensor_free(y);
    xfree(xv);
    xfree(wv);
    xfree(y1);
    xfree(y2);
}

int main(void)
{
    struct err e = {0};
    long live0 = alloc_live_count();
    if (dev_open("cpu", 0, &d, &e) < 0) {
        ok(0, "dev_open: %s", e.msg);
        return harness_done();
    }
    printf("# bf16 GEMM path: %s\n", tensor_bf16_path());
    t_default();
    t_ties();
    t_linear(TENSOR_F32, 7, 33, 50, "linear f32 weight, one small GEMM");
    t_linear(TENSOR_F16, 200, 320, 640, "linear f16 weight, pool panels");
    t_linear(TENSOR_BF16, 130, 300, 1000, "linear bf16 weight, K = 1000");
    t_linear(TENSOR_F32, 2, 4096, 64, "linear f32 weight, wide n");
    t_linear(TENSOR_F16, 4096, 64, 64, "linear f16, row panels rounding x per panel");
    t_linear(TENSOR_F16, 1100, 96, 1000, "linear f16, 1100 rows, K = 1000 (row bands, K blocks)");
    t_linear(TENSOR_F32, 1040, 330, 40, "linear f32 weight, 1040 rows, n = 330");
    /* without AMX but with AVX-512 BF16 (linear_avx512bf16.c): a pair of K half padding,
     * three K blocks of 1024 accumulating in y, a last group of 6 columns, 4 ragged rows */
    t_linear(TENSOR_F16, 1030, 70, 2049, "linear f16, 1030 rows, K = 2049");
    t_geglu(TENSOR_F16, 70, 128, 320, "geglu f16 weight, 70 rows (column bands)");
    t_geglu(TENSOR_BF16, 1030, 64, 96, "geglu bf16 weight, 1030 rows (row bands)");
    t_geglu(TENSOR_F32, 40, 48, 72, "geglu f32 weight, h = 48 (the chunked path)");
    t_geglu(TENSOR_F32, 1100, 128, 77, "geglu f32 weight, 1100 rows, K = 77");
    t_matmul();
    t_conv(TENSOR_F32, 2, 64, 9, 9, 40, 1, 1, 0, "conv 1x1 (direct GEMM)");
    t_conv(TENSOR_F16, 1, 64, 96, 96, 40, 1, 1, 0, "conv 1x1 96^2 (x rounded per panel)");
    t_conv(TENSOR_F16, 2, 32, 8, 8, 64, 3, 1, 1, "conv 3x3 8x8 (batched small images)");
    t_conv(TENSOR_F16, 1, 16, 40, 36, 24, 3, 1, 1, "conv 3x3 40x36 (row chunks)");
    t_conv(TENSOR_BF16, 2, 8, 33, 31, 16, 3, 2, 1, "conv 3x3 stride 2");
    /* 200 x 576 by 60 columns: row panels read the weight's copy unpacked (on AMX, where
     * the bind packs from the f16 weight and leaves the copy to cpu_bf16_fill) */
    t_conv(TENSOR_F16, 1, 64, 6, 10, 200, 3, 1, 1, "conv 3x3 6x10 -> 200 (row panels)");
    t_conv(TENSOR_F16, 2, 96, 7, 6, 72, 3, 1, 1, "conv 3x3 7x6, K = 864 (two K blocks)");
    /* AVX-512 BF16 without AMX (conv.c's cpu_conv2d_bf16v_small): two K blocks of 1024,
     * 98 columns (a ragged group of 64), 70 rows of W (a ragged band) */
    t_conv(TENSOR_F16, 2, 130, 7, 7, 70, 3, 1, 1, "conv 3x3 7x7, K = 1170");
    /* 320 x 64 by 289 columns: on AMX gemm.c splits W's packed rows and rounds x into B's
     * tiles once (amx_rows) */
    t_conv(TENSOR_F16, 1, 64, 17, 17, 320, 1, 1, 0, "conv 1x1 17x17 -> 320 (W's rows split)");
    t_winograd(2, 40, 33, 35, 48);
    t_winograd(2, 64, 29, 32, 40);
    /* 64^2 and more: F(4,3) off AMX; 66x70: ragged 4x4 tiles; 960: past fp32's F(4,3) cap */
    t_winograd(1, 320, 64, 64, 32);
    t_winograd(1, 128, 66, 70, 16);
    t_winograd(1, 960, 64, 64, 8);
    t_up2(40, 17, 19, 24);
    t_up2(64, 16, 16, 32);
    t_up2(24, 33, 32, 16); /* 66x64 output: F(4,3) reading x upsampled, and GroupNorm fused */
    t_cache();
    dev_close(d);
    tensor_shutdown();
    ok(tensor_bf16_cache_bytes() == 0, "tensor_shutdown empties the bf16 cache");
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
