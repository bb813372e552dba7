/*
 * wino43_avx512.c — the row loops of wino43.c's F(4x4, 3x3) transforms, 16 tiles per
 * AVX-512 vector (when wino__avx512(): the scalar loops stay for other CPUs, the tail
 * tiles of a row, and tests).
 *
 * The input's tiles start every 4 floats and overlap by 2, and the output's tiles are
 * 4 pixels wide: a 4-way de-interleave (and its inverse) of 64 floats in two rounds of
 * two-source permutes, the same shape as wino_avx512.c's 2-way one.
 *
 * Every value is computed with wino43.c's operations in its order (its multipliers are
 * powers of two, so contracting a multiply-add cannot change a bit): both paths give
 * the same bits (test_tensor_winograd compares them).
 *
 * Threads: any (pure functions over the caller's buffers).
 */
#include <immintrin.h>

#include "winograd_impl.h"

#if defined(__clang__) /* clang ignores GCC target pragmas */
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f")
#endif

#define VT __m512
#define ADD _mm512_add_ps
#define SUB _mm512_sub_ps
#define MUL _mm512_mul_ps
#define SET1 _mm512_set1_ps
#define VD __m512d
#define ADDD _mm512_add_pd
#define SUBD _mm512_sub_pd
#define MULD _mm512_mul_pd
#define SET1D _mm512_set1_pd
#include "wino43_tf_tmpl.h"

int64_t wino43__in_rows_avx512(const float *const p[6], float *const t[6], int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 d[6], v[6];
        for (int k = 0; k < 6; k++)
            d[k] = _mm512_loadu_ps(p[k] + i);
        bt6_v(d, v);
        for (int k = 0; k < 6; k++)
            _mm512_storeu_ps(t[k] + i, v[k]);
    }
    return i;
}

int64_t wino43__in_cols_avx512(const float *s, float *const v[6], int64_t tw)
{
    /* round 1: of 32 floats (8 tiles), elements 0, 2 of each tile / 1, 3; round 2: of
     * two such vectors (16 tiles), the first / second of each pair */
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28,
                                         30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29,
                                         31);
    int64_t tx = 0;
    for (; tx + 16 <= tw; tx += 16) {
        /* s[4 tx .. 4 tx + 65]: the row holds 4 tw + 2 floats */
        const float *r = s + 4 * tx;
        __m512 l0 = _mm512_loadu_ps(r), l1 = _mm512_loadu_ps(r + 16);
        __m512 l2 = _mm512_loadu_ps(r + 32), l3 = _mm512_loadu_ps(r + 48);
        __m512 a02 = _mm512_permutex2var_ps(l0, ev, l1), a13 = _mm512_permutex2var_ps(l0, od, l1);
        __m512 b02 = _mm512_permutex2var_ps(l2, ev, l3), b13 = _mm512_permutex2var_ps(l2, od, l3);
        __m512 d[6], o[6];
        d[0] = _mm512_permutex2var_ps(a02, ev, b02);
        d[2] = _mm512_permutex2var_ps(a02, od, b02);
        d[1] = _mm512_permutex2var_ps(a13, ev, b13);
        d[3] = _mm512_permutex2var_ps(a13, od, b13);
        /* elements 4, 5 of tile t are elements 0, 1 of tile t + 1; the last tile's are
         * r[64], r[65] */
        __m512i e0 = _mm512_castps_si512(_mm512_maskz_loadu_ps(1, r + 64));
        __m512i e1 = _mm512_castps_si512(_mm512_maskz_loadu_ps(1, r + 65));
        d[4] = _mm512_castsi512_ps(_mm512_alignr_epi32(e0, _mm512_castps_si512(d[0]), 1));
        d[5] = _mm512_castsi512_ps(_mm512_alignr_epi32(e1, _mm512_castps_si512(d[1]), 1));
        bt6_v(d, o);
        for (int q = 0; q < 6; q++)
            _mm512_storeu_ps(v[q] + tx, o[q]);
    }
    return tx;
}

/* y[0 .. 63] = e[0][0], e[1][0], e[2][0], e[3][0], e[0][1], ... (4-way interleave; up
 * 1), or those 64 values at every other float of y[0 .. 127], the others untouched (up
 * 2: another phase's pixels, as wino_avx512.c's store_pairs) */
static inline void store_quads(float *y, const __m512 e[4], int64_t up)
{
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7,
                                         23);
    const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30,
                                         15, 31);
    /* (e0, e2) and (e1, e3) pairs, then the pairs of pairs */
    __m512 a0 = _mm512_permutex2var_ps(e[0], lo, e[2]), a1 = _mm512_permutex2var_ps(e[0], hi, e[2]);
    __m512 b0 = _mm512_permutex2var_ps(e[1], lo, e[3]), b1 = _mm512_permutex2var_ps(e[1], hi, e[3]);
    __m512 v[4] = {_mm512_permutex2var_ps(a0, lo, b0), _mm512_permutex2var_ps(a0, hi, b0),
                   _mm512_permutex2var_ps(a1, lo, b1), _mm512_permutex2var_ps(a1, hi, b1)};
    if (up == 1) {
        for (int k = 0; k < 4; k++)
            _mm512_storeu_ps(y + 16 * k, v[k]);
        return;
    }
    const __mmask16 even = 0x5555;
    for (int k = 0; k < 4; k++) {
        __m512 h = _mm512_shuffle_f32x4(v[k], v[k], _MM_SHUFFLE(3, 2, 3, 2));
        _mm512_mask_storeu_ps(y + 32 * k, even, _mm512_maskz_expand_ps(even, v[k]));
        _mm512_mask_storeu_ps(y + 32 * k + 16, even, _mm512_maskz_expand_ps(even, h));
    }
}

int64_t wino43__out_row_avx512(const float *const pq[W43_XI], float bv, float *const y[4],
                               int64_t full, int64_t up)
{
    const __m512 bb = _mm512_set1_ps(bv);
    int64_t tx = 0;
    for (; tx + 16 <= full; tx += 16) {
        __m512 s[4][6];
        for (int c = 0; c < 6; c++) { /* A^T down each column of points */
            __m512 m[6], col[4];
            for (int r = 0; r < 6; r++)
                m[r] = _mm512_loadu_ps(pq[6 * r + c] + tx);
            at6_v(m, col);
            for (int i = 0; i < 4; i++)
                s[i][c] = col[i];
        }
        for (int i = 0; i < 4; i++) {
            if (!y[i])
                continue;
            __m512 px[4];
            at6_v(s[i], px);
            for (int k = 0; k < 4; k++)
                px[k] = ADD(px[k], bb);
            store_quads(y[i] + up * 4 * tx, px, up);
        }
    }
    return tx;
}

int64_t wino43__tf_weights_avx512(const float *g, float *u, int64_t stride, int64_t n)
{
    /* kernel i's tap k at g[9 i + k]: one gather per tap for 8 kernels */
    const __m256i idx = _mm256_setr_epi32(0, 9, 18, 27, 36, 45, 54, 63);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m512d k[9], t[3][6];
        for (int q = 0; q < 9; q++)
            k[q] = _mm512_cvtps_pd(_mm256_i32gather_ps(g + 9 * i + q, idx, 4));
        for (int c = 0; c < 3; c++)
            g6_v(k[c], k[3 + c], k[6 + c], t[c]);
        for (int a = 0; a < 6; a++) {
            __m512d r[6];
            g6_v(t[0][a], t[1][a], t[2][a], r);
            for (int b = 0; b < 6; b++)
                _mm256_storeu_ps(u + (6 * a + b) * stride + i, _mm512_cvtpd_ps(r[b]));
        }
    }
    return i;
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
