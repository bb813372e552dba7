/*
 * test_tensor_amx — the AMX bf16 GEMM (tensor/cpu/gemm_amx.c) against a float64 GEMM of
 * the same bf16 values, on shapes that exercise every edge: rows, columns and K that are
 * not multiples of the 32-wide tiles, both transposes of each operand, leading
 * dimensions wider than the matrix, alpha/beta as the kernel's two ways to write C
 * (C itself as the accumulator where alpha = 1 and beta is 0 or 1, a buffer otherwise),
 * and B chunks and K slices of more than one (K up to 1200, n up to 700; 500 x 1200 is
 * two chunks). Its attention kernel is test_tensor_attn_bf16's.
 * Exits 77 (skipped) where the CPU or kernel gives no AMX.
 *
 * The bound: products of bf16 values are exact in f32 and AMX accumulates them in f32,
 * so |C - ref| <= gamma(k) * sum |a||b| (+ the beta term's rounding): checked at
 * 2 k 2^-24 sum|a||b| + 2^-22 |ref|, far below what a wrong element would give (the
 * values are O(1), so a swapped or missing product is off by ~1).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "device.h"
#include "harness.h"
#include "tensor.h"
#include "tensor_impl.h"
#include "tensor_precision.h"
#include "cpu/adapt.h"
#include "cpu/gemm_amx.h"

static uint64_t rng = 0x243f6a8885a308d3ull;

static float frand(void)
{
    return harness_frand(&rng);
}

static uint16_t bf16(float v)
{
    return tensor_f32_to_bf16(v);
}
static double wide(uint16_t h)
{
    return (double)tensor_bf16_to_f32(h);
}

static void one(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, float beta)
{
    /* stored shapes and leading dims (a pad of 3 beyond each row) */
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    int64_t lda = ac + 3, ldb = bc + 3, ldc = n + 5;
    uint16_t *a = xmalloc((size_t)(ar * lda) * 2), *b = xmalloc((size_t)(br * ldb) * 2);
    float *c = xmalloc((size_t)(m * ldc) * 4), *c0 = xmalloc((size_t)(m * ldc) * 4);
    for (int64_t i = 0; i < ar * lda; i++)
        a[i] = bf16(frand());
    for (int64_t i = 0; i < br * ldb; i++)
        b[i] = bf16(frand());
    for (int64_t i = 0; i < m * ldc; i++)
        c[i] = c0[i] = beta == 0.0f ? NAN : frand(); /* beta 0 must not read C */
    cpu_gemm_amx(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    double worst = 0;
    int pad_ok = 1;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double s = 0, mag = 0;
            for (int64_t p = 0; p < k; p++) {
                double x = wide(ta ? a[p * lda + i] : a[i * lda + p]);
                double y = wide(tb ? b[j * ldb + p] : b[p * ldb + j]);
                s += x * y;
                mag += fabs(x * y);
            }
            double ref = alpha * s + (beta == 0.0f ? 0.0 : beta * (double)c0[i * ldc + j]);
            double bound =
                fabs(alpha) * 2.0 * (double)k * 0x1p-24 * mag + 0x1p-22 * fabs(ref) + 1e-30;
            double r = fabs((double)c[i * ldc + j] - ref) / bound;
            worst = r > worst || isnan(r) ? r : worst;
        }
        for (int64_t j = n; j < ldc; j++) /* beyond n: untouched */
            if (memcmp(&c[i * ldc + j], &c0[i * ldc + j], 4) != 0)
                pad_ok = 0;
    }
    ok(worst <= 1.0 && pad_ok,
       "ta %d tb %d %lldx%lldx%lld alpha %g beta %g: worst error / bound %.3f, C beyond n %s", ta,
       tb, (long long)m, (long long)n, (long long)k, alpha, beta, worst,
       pad_ok ? "untouched" : "WRITTEN");
    xfree(a);
    xfree(b);
    xfree(c);
    xfree(c0);
}

/* cpu_amx_pack / cpu_amx_pack_b (by column groups of 32) / cpu_gemm_amx_packed_ab, as
 * gemm.c's row panels use them: rows r0.. of a packed A (r0 a multiple of 32). */
static void packed_one(int tb, int64_t m, int64_t n, int64_t k, int64_t r0)
{
    int64_t ldb = tb ? k + 1 : n + 1, br = tb ? n : k;
    uint16_t *a = xmalloc((size_t)(m * k) * 2), *b = xmalloc((size_t)(br * ldb) * 2);
    uint16_t *ap = xmalloc_aligned(64, cpu_amx_packed_elems(m, k) * 2);
    uint16_t *bp = xmalloc_aligned(64, cpu_amx_packed_b_elems(n, k) * 2);
    float *c = xmalloc((size_t)(m * n) * 4);
    for (int64_t i = 0; i < m * k; i++)
        a[i] = bf16(frand());
    for (int64_t i = 0; i < br * ldb; i++)
        b[i] = bf16(frand());
    cpu_amx_pack(ap, a, k, m, k);
    for (int64_t j0 = 0; j0 < n; j0 += 32)
        cpu_amx_pack_b(bp, tb, b, ldb, n, k, j0, 32);
    int64_t rows = m - r0;
    cpu_gemm_amx_packed_ab(rows, n, k, 1.0f, ap + (size_t)(r0 / 32) * cpu_amx_packed_elems(32, k),
                           bp, 0.0f, c, n);
    double worst = 0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0, mag = 0;
            for (int64_t p = 0; p < k; p++) {
                double x = wide(a[(r0 + i) * k + p]),
                       y = wide(tb ? b[j * ldb + p] : b[p * ldb + j]);
                s += x * y;
                mag += fabs(x * y);
            }
            double r = fabs((double)c[i * n + j] - s) / (2.0 * (double)k * 0x1p-24 * mag + 1e-30);
            worst = r > worst || isnan(r) ? r : worst;
        }
    ok(worst <= 1.0,
       "packed A rows %lld.. x packed B (tb %d) %lldx%lldx%lld: worst error / bound %.3f",
       (long long)r0, tb, (long long)rows, (long long)n, (long long)k, worst);
    xfree(a);
    xfree(b);
    xfree_aligned(ap);
    xfree_aligned(bp);
    xfree(c);
}

/*
 * The packers that convert as they pack lay out exactly what the bf16 packers do on the
 * rounded matrix: cpu_amx_pack_w (W [n, k] at f16/f32/bf16) == cpu_amx_pack_b (tb) on
 * W rounded; cpu_amx_pack_a_rows == cpu_amx_pack on it; cpu_amx_pack_b_f32 (and its
 * step form) == cpu_amx_pack_b (not tb) on B rounded. Ragged n, k, rows.
 */
static void packers_one(enum tensor_dtype dt, int64_t n, int64_t k)
{
    size_t es = tensor_dtype_size(dt);
    float *f = xmalloc((size_t)(n * k) * 4);
    uint16_t *r16 = xmalloc((size_t)(n * k) * 2);
    void *raw = xmalloc((size_t)(n * k) * es);
    for (int64_t i = 0; i < n * k; i++) {
        float v = frand() * 3.0f;
        if (dt == TENSOR_F16)
            v = tensor_f16_to_f32(tensor_f32_to_f16(v)); /* what the f16 file holds */
        f[i] = v;
        r16[i] = bf16(v);
    }
    tensor_convert_host(raw, dt, f, TENSOR_F32, (size_t)(n * k));
    size_t be = cpu_amx_packed_b_elems(n, k), ae = cpu_amx_packed_elems(n, k);
    uint16_t *want = xcalloc(be > ae ? be : ae, 2), *got = xcalloc(be > ae ? be : ae, 2);
    for (int64_t j0 = 0; j0 < n; j0 += 32) {
        cpu_amx_pack_b(want, 1, r16, k, n, k, j0, 32);
        cpu_amx_pack_w(got, dt, raw, n, k, j0, 32);
    }
    ok(memcmp(want, got, be * 2) == 0, "cpu_amx_pack_w (%s) %lldx%lld lays out the rounded W",
       tensor_dtype_name(dt), (long long)n, (long long)k);
    cpu_amx_pack(want, r16, k, n, k);
    for (int64_t i = 0; i < n; i += 32)
        cpu_amx_pack_a_rows(got + (size_t)(i / 32) * cpu_amx_packed_elems(32, k), dt,
                            (const char *)raw + (size_t)(i * k) * es, k, n - i < 32 ? n - i : 32,
                            k);
    ok(memcmp(want, got, ae * 2) == 0, "cpu_amx_pack_a_rows (%s) %lldx%lld lays out the rounded A",
       tensor_dtype_name(dt), (long long)n, (long long)k);
    if (dt == TENSOR_F32) { /* f as a k x n B, not transposed */
        int64_t bn = k, bk = n, ks = (bk + 31) / 32;
        size_t bbe = cpu_amx_packed_b_elems(bn, bk);
        memset(want, 0, bbe * 2);
        memset(got, 0, bbe * 2);
        for (int64_t j0 = 0; j0 < bn; j0 += 32)
            cpu_amx_pack_b(want, 0, r16, bn, bn, bk, j0, 32);
        cpu_amx_pack_b_f32(got, f, bn, bn, bk, 0, (bn + 31) / 32 * 32);
        ok(memcmp(want, got, bbe * 2) == 0, "cpu_amx_pack_b_f32 %lldx%lld lays out the rounded B",
           (long long)bk, (long long)bn);
        memset(got, 0xff, bbe * 2);
        for (int64_t s = ks - 1; s >= 0; s--)
            cpu_amx_pack_b_f32_step(got, ks, s, f + s * 32 * bn, bn, bn,
                                    bk - s * 32 < 32 ? bk - s * 32 : 32, 0, (bn + 31) / 32 * 32);
        ok(memcmp(want, got, bbe * 2) == 0, "cpu_amx_pack_b_f32_step, step by step, the same");
    }
    xfree(f);
    xfree(r16);
    xfree(raw);
    xfree(want);
    xfree(got);
}

/*
 * A conv weight bound on AMX is packed from its f16 data at bind and its bf16 copy left
 * unwritten; a GEMM that reads the copy unpacked (here: op(A) = W^T, which no packing
 * serves) must find it written (cpu_bf16_fill), else it multiplies whatever the scratch
 * held.
 */
static void bound_copy_read(struct dev *dv)
{
    struct err e = {0};
    int64_t co = 64, ci = 8, k = ci * 9, n = 40, shape[4] = {co, ci, 3, 3};
    struct tensor *w = NULL;
    if (tensor_new(dv, TENSOR_F16, 4, shape, &w, &e) < 0)
        PANIC("tensor_new: %s", e.msg);
    float *wv = xmalloc((size_t)(co * k) * 4), *bv = xmalloc((size_t)(co * n) * 4);
    float *c = xmalloc((size_t)(k * n) * 4);
    for (int64_t i = 0; i < co * k; i++)
        wv[i] = frand();
    for (int64_t i = 0; i < co * n; i++)
        bv[i] = frand();
    tensor_write_f32(w, wv, co * k, &e);
    tensor_read_f32(w, wv, co * k, &e);
    enum tensor_precision old = tensor_precision_set(TENSOR_PRECISION_BF16);
    struct hbuf hw = {0};
    const float *p32 = cpu_widen_in_gemm(w, &hw);
    /* C [k, n] = W^T [k, co] x B [co, n] */
    cpu_sgemm(1, 0, k, n, co, 1.0f, p32, k, bv, n, 0.0f, c, n, 0);
    cpu_widen_done(&hw);
    tensor_precision_set(old);
    double worst = 0;
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0, mag = 0;
            for (int64_t q = 0; q < co; q++) {
                double x = wide(bf16(wv[q * k + i])), y = wide(bf16(bv[q * n + j]));
                s += x * y;
                mag += fabs(x * y);
            }
            double r = fabs((double)c[i * n + j] - s) / (2.0 * (double)co * 0x1p-24 * mag + 1e-30);
            worst = r > worst || isnan(r) ? r : worst;
        }
    ok(worst <= 1.0,
       "a bound conv weight read transposed (its copy written on demand): worst "
       "error / bound %.3f",
       worst);
    tensor_free(w);
    xfree(wv);
    xfree(bv);
    xfree(c);
}

int main(void)
{
    if (!cpu_amx_usable())
        SKIP("no AMX-BF16 on this CPU (or the kernel refused the tile state)");
    struct dev *dv;
    struct err e = {0};
    if (dev_open("cpu", 0, &dv, &e) < 0) /* the pool the attention's tasks run on */
        PANIC("dev_open: %s", e.msg);
    static const int64_t shapes[][3] = {
        {1, 1, 1},      {32, 32, 32},   {33, 17, 31},    {64, 64, 64},
        {5, 100, 40},   {77, 320, 768}, {96, 48, 1200},  {40, 700, 96},
        {130, 70, 320}, {16, 16, 2},    {40, 500, 1200}, /* two chunks of B (416 columns at this K),
                                                            A packed once */
    };
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                one(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], 1.0f, 0.0f);
    one(0, 1, 70, 90, 100, 1.0f, 1.0f);   /* C is the accumulator, loaded */
    one(0, 0, 64, 64, 64, 0.5f, 0.0f);    /* through the buffer */
    one(1, 0, 33, 65, 130, -2.0f, 0.75f); /* through the buffer, beta read */
    one(0, 1, 64, 96, 448, 1.0f, 1.0f);   /* whole blocks, two K slices, loaded */
    packed_one(0, 100, 70, 1000, 0);      /* two K blocks, ragged n and m */
    packed_one(0, 130, 64, 200, 64);      /* rows 64.. of A */
    packed_one(1, 64, 96, 96, 32);
    packers_one(TENSOR_F16, 70, 100);
    packers_one(TENSOR_F32, 33, 45);
    packers_one(TENSOR_BF16, 64, 64);
    bound_copy_read(dv);
    dev_close(dv);
    return harness_done();
}
