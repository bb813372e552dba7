/*
 * wino_avx512.c — the row loops of winograd.c's input and output transforms, 16 tiles
 * per AVX-512 vector (used when the CPU has AVX-512F, checked once; the scalar loops
 * stay for other CPUs, the tail tiles of a row, and tests).
 *
 * Why: the transforms are a few adds per value, but in scalar form, with the input's
 * stride-2 tile reads and the output's interleaved pixel writes, they were ~a third of
 * the GEMMs' time (perf of a 256^2 VAE decode: wg_task's own code 14 % of the samples,
 * the JIT GEMM 26 %). Stride-2 reads and interleaved writes become permutes here.
 *
 * Every value is computed with the scalar code's operations in the scalar code's
 * order, so both paths give the same bits (test_tensor_winograd compares them).
 *
 * Threads: any (pure functions over the caller's buffers).
 */
#include <immintrin.h>

#include "winograd_impl.h"

int cpu_wino_avx512 = -1; /* -1: use AVX-512 when the CPU has it; 0: never (tests) */

int wino__avx512(void)
{
    if (cpu_wino_avx512 < 0) {
        __builtin_cpu_init();
        cpu_wino_avx512 = __builtin_cpu_supports("avx512f") != 0;
    }
    return cpu_wino_avx512;
}

#if defined(__clang__) /* clang ignores GCC target pragmas */
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f")
#endif

int64_t wino__in_rows_avx512(const float *p0, const float *p1, const float *p2,
                             const float *p3, float *t0, float *t1, float *t2, float *t3,
                             int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 a = _mm512_loadu_ps(p0 + i), b = _mm512_loadu_ps(p1 + i);
        __m512 c = _mm512_loadu_ps(p2 + i), d = _mm512_loadu_ps(p3 + i);
        _mm512_storeu_ps(t0 + i, _mm512_sub_ps(a, c));
        _mm512_storeu_ps(t1 + i, _mm512_add_ps(b, c));
        _mm512_storeu_ps(t2 + i, _mm512_sub_ps(c, b));
        _mm512_storeu_ps(t3 + i, _mm512_sub_ps(b, d));
    }
    return i;
}

int64_t wino__in_cols_avx512(const float *s, float *v0, float *v1, float *v2, float *v3,
                             int64_t tw)
{
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28,
                                         30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29,
                                         31);
    int64_t tx = 0;
    for (; tx + 16 <= tw; tx += 16) {
        /* s[2tx .. 2tx + 31] and s[2tx + 2 .. 2tx + 33]: the row holds 2 tw + 2 values */
        const float *r = s + 2 * tx;
        __m512 l0 = _mm512_loadu_ps(r), l1 = _mm512_loadu_ps(r + 16);
        __m512 m0 = _mm512_loadu_ps(r + 2), m1 = _mm512_loadu_ps(r + 18);
        __m512 a = _mm512_permutex2var_ps(l0, ev, l1), b = _mm512_permutex2var_ps(l0, od, l1);
        __m512 c = _mm512_permutex2var_ps(m0, ev, m1), d = _mm512_permutex2var_ps(m0, od, m1);
        _mm512_storeu_ps(v0 + tx, _mm512_sub_ps(a, c));
        _mm512_storeu_ps(v1 + tx, _mm512_add_ps(b, c));
        _mm512_storeu_ps(v2 + tx, _mm512_sub_ps(c, b));
        _mm512_storeu_ps(v3 + tx, _mm512_sub_ps(b, d));
    }
    return tx;
}

/* y[0 .. 31] = e0[0], e1[0], e0[1], e1[1], ... (up 1), or those 32 values at every
 * other float of y[0 .. 63], the others untouched (up 2: another phase's pixels). */
static inline void store_pairs(float *y, __m512 e0, __m512 e1, int64_t up)
{
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7,
                                         23);
    const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30,
                                         15, 31);
    __m512 a = _mm512_permutex2var_ps(e0, lo, e1), b = _mm512_permutex2var_ps(e0, hi, e1);
    if (up == 1) {
        _mm512_storeu_ps(y, a);
        _mm512_storeu_ps(y + 16, b);
        return;
    }
    const __mmask16 even = 0x5555;
    __m512 v[4] = {a, _mm512_shuffle_f32x4(a, a, _MM_SHUFFLE(3, 2, 3, 2)), b,
                   _mm512_shuffle_f32x4(b, b, _MM_SHUFFLE(3, 2, 3, 2))};
    for (int k = 0; k < 4; k++)
        _mm512_mask_storeu_ps(y + 16 * k, even, _mm512_maskz_expand_ps(even, v[k]));
}

int64_t wino__out_row_avx512(const float *const pq[WG_XI], float bv, float *y0, float *y1,
                             int64_t pairs, int64_t up)
{
    const __m512 bb = _mm512_set1_ps(bv);
    int64_t tx = 0;
    for (; tx + 16 <= pairs; tx += 16) {
        __m512 m[WG_XI], s0[4], s1[4];
        for (int q = 0; q < WG_XI; q++)
            m[q] = _mm512_loadu_ps(pq[q] + tx);
        for (int c = 0; c < 4; c++) {
            s0[c] = _mm512_add_ps(_mm512_add_ps(m[c], m[4 + c]), m[8 + c]);
            s1[c] = _mm512_sub_ps(_mm512_sub_ps(m[4 + c], m[8 + c]), m[12 + c]);
        }
        __m512 e0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s0[0], s0[1]), s0[2]), bb);
        __m512 e1 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(s0[1], s0[2]), s0[3]), bb);
        store_pairs(y0 + up * 2 * tx, e0, e1, up);
        if (y1) {
            __m512 f0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s1[0], s1[1]), s1[2]), bb);
            __m512 f1 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(s1[1], s1[2]), s1[3]), bb);
            store_pairs(y1 + up * 2 * tx, f0, f1, up);
        }
    }
    return tx;
}

int64_t wino__tf_weights_avx512(const float *g9, float *u, int64_t n)
{
    /* kernel c's tap k at g9[9 c + k]: one gather per tap for 16 kernels */
    const __m512i idx =
        _mm512_setr_epi32(0, 9, 18, 27, 36, 45, 54, 63, 72, 81, 90, 99, 108, 117, 126, 135);
    const __m512 half = _mm512_set1_ps(0.5f);
    int64_t c = 0;
    for (; c + 16 <= n; c += 16) {
        __m512 g[9], t[4][3];
        for (int q = 0; q < 9; q++)
            g[q] = _mm512_i32gather_ps(idx, g9 + 9 * c + q, 4);
        for (int k = 0; k < 3; k++) { /* G g */
            t[0][k] = g[k];
            t[1][k] = _mm512_mul_ps(half, _mm512_add_ps(_mm512_add_ps(g[k], g[3 + k]), g[6 + k]));
            t[2][k] = _mm512_mul_ps(half, _mm512_add_ps(_mm512_sub_ps(g[k], g[3 + k]), g[6 + k]));
            t[3][k] = g[6 + k];
        }
        for (int r = 0; r < 4; r++) { /* (G g) G^T */
            __m512 s = _mm512_add_ps(_mm512_add_ps(t[r][0], t[r][1]), t[r][2]);
            __m512 d = _mm512_add_ps(_mm512_sub_ps(t[r][0], t[r][1]), t[r][2]);
            _mm512_storeu_ps(u + (4 * r + 0) * n + c, t[r][0]);
            _mm512_storeu_ps(u + (4 * r + 1) * n + c, _mm512_mul_ps(half, s));
            _mm512_storeu_ps(u + (4 * r + 2) * n + c, _mm512_mul_ps(half, d));
            _mm512_storeu_ps(u + (4 * r + 3) * n + c, t[r][2]);
        }
    }
    return c;
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
