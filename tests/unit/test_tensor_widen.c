/*
 * test_tensor_widen — CPU linear, linear+GEGLU, matmul and conv2d with f16/bf16 weights
 * (kept at their file dtype since issue 15, widened inside the op into a reused
 * scratch, tensor/cpu/widen.c): bit-identical to the same op on the weight widened
 * to f32 up front, near a float64 reference written here, and the scratch is reused,
 * shared correctly by two half-precision operands, and freed by
 * tensor_cpu_scratch_release. Weights are large enough (>= 64 Ki elements) to take
 * the scratch path. Convs on few pixels take gemm_wn.c's GEMM instead, which reads the
 * weight as stored (same checks, with ragged rows, columns and k chunks).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "device.h"
#include "harness.h"
#include "tensor.h"
#include "tensor_check.h"
#include "tensor_impl.h"
#include "cpu/gemm_wn.h"

static struct dev *d;

static void test_linear(enum tensor_dtype dt)
{
    const char *dn = tensor_dtype_name(dt);
    int64_t rows = 37, k = 320, n = 640; /* w: 204800 elements */
    int64_t xs[2] = {rows, k}, ws[2] = {n, k}, bs[1] = {n}, ys[2] = {rows, n};
    float *xv, *wv, *bv;
    struct tensor *x = tcheck_rand(d, TENSOR_F32, 2, xs, 1.0f, &xv);
    struct tensor *w = tcheck_rand(d, dt, 2, ws, 0.05f, &wv);
    struct tensor *b = tcheck_rand(d, dt, 1, bs, 0.1f, &bv);
    struct tensor *w32 = tcheck_f32(d, 2, ws, wv), *b32 = tcheck_f32(d, 1, bs, bv);
    struct tensor *y = tcheck_f32(d, 2, ys, NULL), *y32 = tcheck_f32(d, 2, ys, NULL);
    struct err e = {0};
    tensor_cpu_scratch_release(); /* what earlier cases left */
    EXPECT_OK(tensor_linear(y, x, w, b, &e));
    EXPECT_OK(tensor_linear(y32, x, w32, b32, &e));
    ok(tcheck_same_bits(y, y32), "linear, %s weight: bit-identical to the f32-widened weight", dn);
    double *ref = tcheck_ref_linear(xv, wv, bv, rows, k, n);
    double re = tcheck_rel_err(y, ref);
    ok(re < 1e-5, "linear, %s weight: within 1e-5 of float64 (%.2e)", dn, re);
    /* The scratch holds what the largest weight needed so far (w, 640 x 320; the bias
     * was too small to need any): on few rows linear.c widens W slice by slice, at most
     * the whole weight between the threads. Released, it is gone; the next op regrows it. */
    size_t held = tensor_cpu_scratch_release();
    ok(held > 0 && held < (size_t)(n * k) * 4 + 4096,
       "scratch: %zu bytes, at most the weight's f32 size", held);
    EXPECT_EQ(tensor_cpu_scratch_release(), (size_t)0);
    xfree(ref);

    /* GEGLU: w [2h, k], y [rows, h] = a * gelu(g). */
    int64_t gs[2] = {2 * n, k}, gb[1] = {2 * n}, go[2] = {rows, n};
    float *gwv, *gbv;
    struct tensor *gw = tcheck_rand(d, dt, 2, gs, 0.05f, &gwv),
                  *gbias = tcheck_rand(d, dt, 1, gb, 0.1f, &gbv);
    struct tensor *gw32 = tcheck_f32(d, 2, gs, gwv), *gb32 = tcheck_f32(d, 1, gb, gbv);
    struct tensor *g = tcheck_f32(d, 2, go, NULL), *g32 = tcheck_f32(d, 2, go, NULL);
    EXPECT_OK(tensor_linear_geglu(g, x, gw, gbias, &e));
    EXPECT_OK(tensor_linear_geglu(g32, x, gw32, gb32, &e));
    ok(tcheck_same_bits(g, g32), "linear+geglu, %s weight: bit-identical", dn);
    double *ag = tcheck_ref_linear(xv, gwv, gbv, rows, k, 2 * n);
    double *gref = xmalloc((size_t)(rows * n) * sizeof(double));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) {
            double a = ag[r * 2 * n + j], gt = ag[r * 2 * n + n + j];
            gref[r * n + j] = a * 0.5 * gt * (1 + erf(gt / sqrt(2.0)));
        }
    re = tcheck_rel_err(g, gref);
    ok(re < 1e-5, "linear+geglu, %s weight: within 1e-5 of float64 (%.2e)", dn, re);
    xfree(ag);
    xfree(gref);

    /* matmul with both operands half precision: one takes the scratch, the other
     * adapt.h's temporary; the result must not mix them up. */
    float *av;
    int64_t as[2] = {rows, k};
    struct tensor *a = tcheck_rand(d, dt, 2, as, 1.0f, &av), *a32 = tcheck_f32(d, 2, as, av);
    int64_t bigs[2] = {k, n * 2}; /* b: k x 1280 = 409600 elements */
    float *bbv;
    struct tensor *bb = tcheck_rand(d, dt, 2, bigs, 0.05f, &bbv),
                  *bb32 = tcheck_f32(d, 2, bigs, bbv);
    int64_t ms[2] = {rows, 2 * n};
    struct tensor *m = tcheck_f32(d, 2, ms, NULL), *m32 = tcheck_f32(d, 2, ms, NULL);
    EXPECT_OK(tensor_matmul(m, a, bb, 0, 0, 1.0f, &e));
    EXPECT_OK(tensor_matmul(m32, a32, bb32, 0, 0, 1.0f, &e));
    ok(tcheck_same_bits(m, m32), "matmul, both operands %s: bit-identical", dn);
    tensor_free(m);
    tensor_free(m32);
    tensor_free(bb);
    tensor_free(bb32);
    tensor_free(a);
    tensor_free(a32);
    xfree(av);
    xfree(bbv);
    tensor_free(g);
    tensor_free(g32);
    tensor_free(gw);
    tensor_free(gbias);
    tensor_free(gw32);
    tensor_free(gb32);
    xfree(gwv);
    xfree(gbv);
    tensor_free(y);
    tensor_free(y32);
    tensor_free(w32);
    tensor_free(b32);
    tensor_free(w);
    tensor_free(b);
    tensor_free(x);
    xfree(xv);
    xfree(wv);
    xfree(bv);
}

/* 3x3 conv, padding 1, stride s, float64. */
static double *ref_conv(const float *x, const float *w, const float *b, int64_t n, int64_t ci,
                        int64_t h, int64_t wd, int64_t co, int s, int64_t ho, int64_t wo)
{
    double *y = xmalloc((size_t)(n * co * ho * wo) * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < co; o++)
            for (int64_t oy = 0; oy < ho; oy++)
                for (int64_t ox = 0; ox < wo; ox++) {
                    double acc = b[o];
                    for (int64_t c = 0; c < ci; c++)
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++) {
                                int64_t iy = oy * s - 1 + ky, ix = ox * s - 1 + kx;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= wd)
                                    continue;
                                acc += (double)x[((i * ci + c) * h + iy) * wd + ix] *
                                       w[((o * ci + c) * 3 + ky) * 3 + kx];
                            }
                    y[((i * co + o) * ho + oy) * wo + ox] = acc;
                }
    return y;
}

static void test_conv(enum tensor_dtype dt, int64_t h, int stride)
{
    const char *dn = tensor_dtype_name(dt);
    int64_t n = 2, ci = 96, co = 128; /* w: 110592 elements */
    int64_t ho = (h + 2 - 3) / stride + 1;
    int64_t xs[4] = {n, ci, h, h}, ws[4] = {co, ci, 3, 3}, bs[1] = {co}, ys[4] = {n, co, ho, ho};
    float *xv, *wv, *bv;
    struct tensor *x = tcheck_rand(d, TENSOR_F32, 4, xs, 1.0f, &xv);
    struct tensor *w = tcheck_rand(d, dt, 4, ws, 0.05f, &wv),
                  *b = tcheck_rand(d, dt, 1, bs, 0.1f, &bv);
    struct tensor *w32 = tcheck_f32(d, 4, ws, wv), *b32 = tcheck_f32(d, 1, bs, bv);
    struct tensor *y = tcheck_f32(d, 4, ys, NULL), *y32 = tcheck_f32(d, 4, ys, NULL);
    struct tensor_conv2d_opts o = {.stride = stride, .pad_top = 1, .pad_bottom = 1,
                                   .pad_left = 1, .pad_right = 1};
    struct err e = {0};
    int wn = cpu_gemm_wn_usable();
    if (n * ho * ho <= CPU_GEMM_WN_MAX_N)
        ok(cpu_conv2d_is_wn(n, ci, co, 3, 3, ho, ho, &o) == wn,
           "conv %lldx%lld stride %d takes gemm_wn.c's GEMM on a CPU with AVX2 (%s, %s kernel)",
           (long long)h, (long long)h, stride, wn ? "this one" : "not this one: not tested",
           cpu_gemm_wn_avx512 ? "AVX-512" : "AVX2");
    EXPECT_OK(tensor_conv2d(y, x, w, b, &o, &e));
    EXPECT_OK(tensor_conv2d(y32, x, w32, b32, &o, &e));
    ok(tcheck_same_bits(y, y32), "conv 3x3 %lldx%lld stride %d, %s weight: bit-identical",
       (long long)h, (long long)h, stride, dn);
    double *ref = ref_conv(xv, wv, bv, n, ci, h, h, co, stride, ho, ho);
    double re = tcheck_rel_err(y, ref);
    ok(re < 1e-5, "conv, %s weight: within 1e-5 of float64 (%.2e)", dn, re);
    xfree(ref);
    tensor_free(y);
    tensor_free(y32);
    tensor_free(w);
    tensor_free(b);
    tensor_free(w32);
    tensor_free(b32);
    tensor_free(x);
    xfree(xv);
    xfree(wv);
    xfree(bv);
}

int main(void)
{
    long live0 = alloc_live_count();
    struct err e = {0};
    tensor_threads_set(2);
    if (dev_open("cpu", 0, &d, &e) < 0) {
        ok(0, "dev_open: %s", e.msg);
        return harness_done();
    }
    static const enum tensor_dtype dts[2] = {TENSOR_F16, TENSOR_BF16};
    /* gemm_wn.c's AVX2 kernel; then its AVX-512 one where the CPU has it */
    if (__builtin_cpu_supports("avx512f")) {
        cpu_gemm_wn_avx512 = 1;
        for (int i = 0; i < 2; i++) {
            test_conv(dts[i], 8, 1);
            test_conv(dts[i], 5, 1);
            test_conv(dts[i], 9, 2);
        }
    }
    cpu_gemm_wn_avx512 = 0;
    for (int i = 0; i < 2; i++) {
        test_linear(dts[i]);
        test_conv(dts[i], 8, 1);   /* small images: gemm_wn.c (AVX2), else the batched path */
        test_conv(dts[i], 5, 1);   /* the same, 50 columns (a ragged 2), 128 rows (6 x 21 + 2) */
        test_conv(dts[i], 9, 2);   /* the same, stride 2 */
        test_conv(dts[i], 24, 1);  /* chunked im2col path */
        test_conv(dts[i], 24, 2);
    }
    tensor_cpu_scratch_release();
    dev_close(d);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
