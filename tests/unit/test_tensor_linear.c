/*
 * test_tensor_linear — the CPU Linear and Linear+GEGLU kernels (tensor/cpu/linear.c,
 * gemm_wt.c; issue 15): the W -> W^T widening against a scalar transpose for every
 * dtype, ragged sizes and padded leading dimensions; tensor_linear and
 * tensor_linear_geglu on each path (row tiles over one W^T from 1024 rows, column tiles
 * widening their own slices below, plain slices under 16 rows, one tile for small
 * products), with and without bias, against float64 references written here; f16 and
 * bf16 weights bit-identical to their exact f32 widening; the reference path
 * (cpu_linear_fast = 0) near the same references; the tile scratch's release.
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
#include "cpu/adapt.h"
#include "cpu/linear.h"

static struct dev *d;

/* cpu_wt_rows against an element-by-element transpose: every dtype, sizes on and off
 * the 16 x 16 and 8 x 8 blocks, row ranges that start and end mid-matrix, padded ld;
 * on each path this CPU has (cpu_wt_vec: scalar, AVX2, AVX-512). */
static void test_wt_path(int vec)
{
    cpu_wt_vec = vec;
    static const int64_t sizes[][2] = {{16, 16}, {8, 8},   {37, 53},   {48, 64},
                                       {64, 33}, {5, 200}, {2560, 20}, {24, 72}};
    static const enum tensor_dtype dts[3] = {TENSOR_F32, TENSOR_F16, TENSOR_BF16};
    for (int di = 0; di < 3; di++)
        for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
            int64_t n = sizes[si][0], k = sizes[si][1], ld = cpu_wt_ld(n);
            float *v;
            struct tensor *w = tcheck_rand(d, dts[di], 2, (int64_t[]){n, k}, 1.0f, &v);
            float *wt = xmalloc((size_t)(ld * k) * sizeof(float));
            for (int64_t i = 0; i < ld * k; i++)
                wt[i] = -7.0f;  /* the padding must stay untouched */
            int64_t q1 = k / 3; /* two calls: [0, q1) and [q1, k) */
            cpu_wt_rows(wt, ld, tensor_data(w), dts[di], n, k, 0, q1);
            cpu_wt_rows(wt, ld, tensor_data(w), dts[di], n, k, q1, k);
            int64_t bad = 0;
            for (int64_t q = 0; q < k; q++)
                for (int64_t j = 0; j < ld; j++) {
                    float want = j < n ? v[j * k + q] : -7.0f;
                    if (memcmp(&wt[q * ld + j], &want, 4) != 0)
                        bad++;
                }
            ok(bad == 0, "W^T of %s [%lld, %lld] (ld %lld), %d-wide path: %lld elements wrong",
               tensor_dtype_name(dts[di]), (long long)n, (long long)k, (long long)ld, vec,
               (long long)bad);
            xfree(wt);
            xfree(v);
            tensor_free(w);
        }
    cpu_wt_vec = -1;
}

static void test_wt(void)
{
    __builtin_cpu_init();
    test_wt_path(0);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"))
        test_wt_path(8);
    else
        printf("# no AVX2/F16C: the 8-wide W^T path not tested\n");
    if (__builtin_cpu_supports("avx512f"))
        test_wt_path(16);
    else
        printf("# no AVX-512F: the 16-wide W^T path not tested\n");
    EXPECT_EQ(cpu_wt_ld(2560), (int64_t)2576);
    EXPECT_EQ(cpu_wt_ld(1280), (int64_t)1280);
}

/* One Linear shape: fast path vs float64, f16/bf16 vs f32 bits, the reference path. */
static void linear_case(int64_t rows, int64_t k, int64_t n, int with_bias, const char *what)
{
    struct err e = {0};
    float *xv, *wv, *bv = NULL, *w2v;
    struct tensor *x = tcheck_rand(d, TENSOR_F32, 2, (int64_t[]){rows, k}, 1.0f, &xv);
    struct tensor *w16 = tcheck_rand(d, TENSOR_F16, 2, (int64_t[]){n, k}, 0.1f, &wv);
    struct tensor *w32 = tcheck_f32(d, 2, (int64_t[]){n, k}, wv);
    struct tensor *wb = tcheck_rand(d, TENSOR_BF16, 2, (int64_t[]){n, k}, 0.1f, &w2v);
    struct tensor *wb32 = tcheck_f32(d, 2, (int64_t[]){n, k}, w2v);
    struct tensor *b = with_bias ? tcheck_rand(d, TENSOR_F32, 1, (int64_t[]){n}, 0.5f, &bv) : NULL;
    struct tensor *y16 = tcheck_f32(d, 2, (int64_t[]){rows, n}, NULL),
                  *y32 = tcheck_f32(d, 2, (int64_t[]){rows, n}, NULL);
    struct tensor *yb = tcheck_f32(d, 2, (int64_t[]){rows, n}, NULL),
                  *yb32 = tcheck_f32(d, 2, (int64_t[]){rows, n}, NULL);
    EXPECT_OK(tensor_linear(y16, x, w16, b, &e));
    EXPECT_OK(tensor_linear(y32, x, w32, b, &e));
    EXPECT_OK(tensor_linear(yb, x, wb, b, &e));
    EXPECT_OK(tensor_linear(yb32, x, wb32, b, &e));
    ok(tcheck_same_bits(y16, y32), "linear %s: f16 weight bit-identical to its f32 widening", what);
    ok(tcheck_same_bits(yb, yb32), "linear %s: bf16 weight bit-identical to its f32 widening",
       what);
    double *ref = tcheck_ref_linear(xv, wv, bv, rows, k, n);
    double re = tcheck_rel_err(y16, ref);
    ok(re < 1e-5, "linear %s: within 1e-5 of float64 (%.2e)", what, re);
    cpu_linear_fast = 0;
    EXPECT_OK(tensor_linear(y32, x, w16, b, &e));
    cpu_linear_fast = 1;
    re = tcheck_rel_err(y32, ref);
    ok(re < 1e-5, "linear %s, reference path: within 1e-5 of float64 (%.2e)", what, re);
    xfree(ref);
    xfree(xv);
    xfree(wv);
    xfree(w2v);
    xfree(bv);
    tensor_free(x);
    tensor_free(w16);
    tensor_free(w32);
    tensor_free(wb);
    tensor_free(wb32);
    tensor_free(b);
    tensor_free(y16);
    tensor_free(y32);
    tensor_free(yb);
    tensor_free(yb32);
}

/* One Linear+GEGLU shape, as linear_case. */
static void geglu_case(int64_t rows, int64_t k, int64_t h, int with_bias, const char *what)
{
    struct err e = {0};
    float *xv, *wv, *bv = NULL;
    struct tensor *x = tcheck_rand(d, TENSOR_F32, 2, (int64_t[]){rows, k}, 1.0f, &xv);
    struct tensor *w16 = tcheck_rand(d, TENSOR_F16, 2, (int64_t[]){2 * h, k}, 0.1f, &wv);
    struct tensor *w32 = tcheck_f32(d, 2, (int64_t[]){2 * h, k}, wv);
    struct tensor *b =
        with_bias ? tcheck_rand(d, TENSOR_F32, 1, (int64_t[]){2 * h}, 0.5f, &bv) : NULL;
    struct tensor *y16 = tcheck_f32(d, 2, (int64_t[]){rows, h}, NULL),
                  *y32 = tcheck_f32(d, 2, (int64_t[]){rows, h}, NULL);
    EXPECT_OK(tensor_linear_geglu(y16, x, w16, b, &e));
    EXPECT_OK(tensor_linear_geglu(y32, x, w32, b, &e));
    ok(tcheck_same_bits(y16, y32), "geglu %s: f16 weight bit-identical to its f32 widening", what);
    double *ag = tcheck_ref_linear(xv, wv, bv, rows, k, 2 * h);
    double *ref = xmalloc((size_t)(rows * h) * sizeof(double));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < h; j++) {
            double a = ag[r * 2 * h + j], g = ag[r * 2 * h + h + j];
            ref[r * h + j] = a * 0.5 * g * (1 + erf(g / sqrt(2.0)));
        }
    double re = tcheck_rel_err(y16, ref);
    ok(re < 1e-5, "geglu %s: within 1e-5 of float64 (%.2e)", what, re);
    cpu_linear_fast = 0;
    EXPECT_OK(tensor_linear_geglu(y32, x, w16, b, &e));
    cpu_linear_fast = 1;
    re = tcheck_rel_err(y32, ref);
    ok(re < 1e-5, "geglu %s, reference path: within 1e-5 of float64 (%.2e)", what, re);
    xfree(ag);
    xfree(ref);
    xfree(xv);
    xfree(wv);
    xfree(bv);
    tensor_free(x);
    tensor_free(w16);
    tensor_free(w32);
    tensor_free(b);
    tensor_free(y16);
    tensor_free(y32);
}

int main(void)
{
    long live0 = alloc_live_count();
    struct err e = {0};
    tcheck_seed(777);
    tensor_threads_set(2);
    if (dev_open("cpu", 0, &d, &e) < 0) {
        ok(0, "dev_open: %s", e.msg);
        return harness_done();
    }
    test_wt();
    /* row tiles over one W^T: ragged last tile, k and n off the 16-blocks, n padded */
    linear_case(1100, 53, 70, 1, "1100x53 -> 70 (row tiles)");
    linear_case(1024, 32, 2560, 0, "1024x32 -> 2560 (row tiles, padded W^T, no bias)");
    /* column tiles, each widening its slice: ragged last tile */
    linear_case(154, 77, 330, 1, "154x77 -> 330 (column tiles)");
    linear_case(700, 64, 1000, 0, "700x64 -> 1000 (column tiles, no bias)");
    /* plain slices under 16 rows; one tile for a small product */
    linear_case(2, 300, 1290, 1, "2x300 -> 1290 (GEMV-like)");
    linear_case(9, 20, 40, 1, "9x20 -> 40 (one tile)");
    geglu_case(1030, 40, 70, 1, "1030x40 -> 70 (row tiles)");
    geglu_case(1024, 24, 1280, 0, "1024x24 -> 1280 (row tiles, padded W^T, no bias)");
    geglu_case(300, 50, 333, 1, "300x50 -> 333 (column tiles)");
    geglu_case(7, 29, 45, 0, "7x29 -> 45 (few rows, no bias)");
    size_t held = tensor_cpu_scratch_release();
    ok(held > 0, "the tile and W^T scratch were kept (%zu bytes) and released", held);
    EXPECT_EQ(tensor_cpu_scratch_release(), (size_t)0);
    dev_close(d);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
