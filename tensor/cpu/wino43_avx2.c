/*
 * wino43_avx2.c — the row loops of wino43.c's F(4x4, 3x3) transforms, 8 tiles per AVX2
 * vector, for CPUs with AVX2 but no AVX-512F (wino43_avx512.c's when the CPU has that;
 * the scalar loops stay for older CPUs, the tail tiles of a row, and tests).
 *
 * The input's tiles start every 4 floats and overlap by 2, and the output's tiles are 4
 * pixels wide: a 4 x 8 transpose (and its inverse) of 32 floats, one 128-bit lane swap
 * and two rounds of in-lane shuffles.
 *
 * Every value is computed with wino43.c's operations in its order (same bits:
 * test_tensor_winograd compares them); the target is "avx2" alone so that no multiply
 * and add are fused (wino_avx2.c says why).
 *
 * Threads: any (pure functions over the caller's buffers).
 */
#include <immintrin.h>

#include "winograd_impl.h"

#if defined(__clang__) /* clang ignores GCC target pragmas */
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif

#define VT __m256
#define ADD _mm256_add_ps
#define SUB _mm256_sub_ps
#define MUL _mm256_mul_ps
#define SET1 _mm256_set1_ps
#define VD __m256d
#define ADDD _mm256_add_pd
#define SUBD _mm256_sub_pd
#define MULD _mm256_mul_pd
#define SET1D _mm256_set1_pd
#include "wino43_tf_tmpl.h"

int64_t wino43__in_rows_avx2(const float *const p[6], float *const t[6], int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 d[6], v[6];
        for (int k = 0; k < 6; k++)
            d[k] = _mm256_loadu_ps(p[k] + i);
        bt6_v(d, v);
        for (int k = 0; k < 6; k++)
            _mm256_storeu_ps(t[k] + i, v[k]);
    }
    return i;
}

/*
 * 4 x 8 transpose: d[k][t] = r[4 t + k] for k < 4, t < 8. The lane swap pairs tile t
 * with tile t + 4 (one per 128-bit lane), then the 4 x 4 transpose in each lane.
 */
static inline void split4(const float *r, __m256 d[4])
{
    __m256 l0 = _mm256_loadu_ps(r), l1 = _mm256_loadu_ps(r + 8);
    __m256 l2 = _mm256_loadu_ps(r + 16), l3 = _mm256_loadu_ps(r + 24);
    __m256 x0 = _mm256_permute2f128_ps(l0, l2, 0x20), x1 = _mm256_permute2f128_ps(l0, l2, 0x31);
    __m256 x2 = _mm256_permute2f128_ps(l1, l3, 0x20), x3 = _mm256_permute2f128_ps(l1, l3, 0x31);
    /* x0: tiles 0 | 4, x1: 1 | 5, x2: 2 | 6, x3: 3 | 7 */
    __m256 a = _mm256_unpacklo_ps(x0, x1), b = _mm256_unpackhi_ps(x0, x1);
    __m256 c = _mm256_unpacklo_ps(x2, x3), e = _mm256_unpackhi_ps(x2, x3);
    d[0] = _mm256_shuffle_ps(a, c, _MM_SHUFFLE(1, 0, 1, 0));
    d[1] = _mm256_shuffle_ps(a, c, _MM_SHUFFLE(3, 2, 3, 2));
    d[2] = _mm256_shuffle_ps(b, e, _MM_SHUFFLE(1, 0, 1, 0));
    d[3] = _mm256_shuffle_ps(b, e, _MM_SHUFFLE(3, 2, 3, 2));
}

/* v[1 .. 7] then x: element k + 4 of tile t is element k of tile t + 1 */
static inline __m256 next_tile(__m256 v, const float *x)
{
    const __m256i up1 = _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 7);
    return _mm256_blend_ps(_mm256_permutevar8x32_ps(v, up1), _mm256_broadcast_ss(x), 0x80);
}

int64_t wino43__in_cols_avx2(const float *s, float *const v[6], int64_t tw)
{
    int64_t tx = 0;
    for (; tx + 8 <= tw; tx += 8) {
        /* s[4 tx .. 4 tx + 33]: the row holds 4 tw + 2 floats */
        const float *r = s + 4 * tx;
        __m256 d[6], o[6];
        split4(r, d);
        d[4] = next_tile(d[0], r + 32);
        d[5] = next_tile(d[1], r + 33);
        bt6_v(d, o);
        for (int q = 0; q < 6; q++)
            _mm256_storeu_ps(v[q] + tx, o[q]);
    }
    return tx;
}

/*
 * y[4 t + k] = e[k][t] (t < 8, k < 4; up 1), or y[2 (4 t + k)] (up 2) through
 * read-blend-write windows of 8 floats from y - b, as wino_avx2.c's store_pairs (its
 * comment says why, and what the caller guarantees).
 */
static inline void store_quads(float *y, const __m256 e[4], int64_t up, int b)
{
    /* the inverse of split4: in each lane the 4 x 4 transpose gives tiles t | t + 4 */
    __m256 a = _mm256_unpacklo_ps(e[0], e[1]), c = _mm256_unpackhi_ps(e[0], e[1]);
    __m256 p = _mm256_unpacklo_ps(e[2], e[3]), q = _mm256_unpackhi_ps(e[2], e[3]);
    __m256 t[4] = {_mm256_shuffle_ps(a, p, _MM_SHUFFLE(1, 0, 1, 0)),  /* tiles 0 | 4 */
                   _mm256_shuffle_ps(a, p, _MM_SHUFFLE(3, 2, 3, 2)),  /* 1 | 5 */
                   _mm256_shuffle_ps(c, q, _MM_SHUFFLE(1, 0, 1, 0)),  /* 2 | 6 */
                   _mm256_shuffle_ps(c, q, _MM_SHUFFLE(3, 2, 3, 2))}; /* 3 | 7 */
    if (up == 1) {
        for (int k = 0; k < 2; k++) {
            _mm256_storeu_ps(y + 8 * k, _mm256_permute2f128_ps(t[2 * k], t[2 * k + 1], 0x20));
            _mm256_storeu_ps(y + 8 * k + 16, _mm256_permute2f128_ps(t[2 * k], t[2 * k + 1], 0x31));
        }
        return;
    }
    const __m256 ours = b ? _mm256_castsi256_ps(_mm256_setr_epi32(0, -1, 0, -1, 0, -1, 0, -1))
                          : _mm256_castsi256_ps(_mm256_setr_epi32(-1, 0, -1, 0, -1, 0, -1, 0));
    float *base = y - b;
    for (int k = 0; k < 4; k++) { /* window of tile k, then of tile k + 4 */
        __m256 lo = _mm256_unpacklo_ps(t[k], t[k]), hi = _mm256_unpackhi_ps(t[k], t[k]);
        __m256 w0 = _mm256_permute2f128_ps(lo, hi, 0x20), w1 = _mm256_permute2f128_ps(lo, hi, 0x31);
        __m256 o0 = _mm256_loadu_ps(base + 8 * k), o1 = _mm256_loadu_ps(base + 8 * k + 32);
        _mm256_storeu_ps(base + 8 * k, _mm256_blendv_ps(o0, w0, ours));
        _mm256_storeu_ps(base + 8 * k + 32, _mm256_blendv_ps(o1, w1, ours));
    }
}

int64_t wino43__out_row_avx2(const float *const pq[W43_XI], float bv, float *const y[4],
                             int64_t full, int64_t up, int b)
{
    const __m256 bb = _mm256_set1_ps(bv);
    int64_t tx = 0;
    for (; tx + 8 <= full; tx += 8) {
        __m256 s[4][6];
        for (int c = 0; c < 6; c++) { /* A^T down each column of points */
            __m256 m[6], col[4];
            for (int r = 0; r < 6; r++)
                m[r] = _mm256_loadu_ps(pq[6 * r + c] + tx);
            at6_v(m, col);
            for (int i = 0; i < 4; i++)
                s[i][c] = col[i];
        }
        for (int i = 0; i < 4; i++) {
            if (!y[i])
                continue;
            __m256 px[4];
            at6_v(s[i], px);
            for (int k = 0; k < 4; k++)
                px[k] = ADD(px[k], bb);
            /* up 2: the last window ends at row column 8 (tx + 8) <= 8 full <= 2 wo */
            store_quads(y[i] + up * 4 * tx, px, up, b);
        }
    }
    return tx;
}

int64_t wino43__tf_weights_avx2(const float *g, float *u, int64_t stride, int64_t n)
{
    /* kernel i's tap k at g[9 i + k]: one gather per tap for 4 kernels (4 doubles) */
    const __m128i idx = _mm_setr_epi32(0, 9, 18, 27);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m256d k[9], t[3][6];
        for (int q = 0; q < 9; q++)
            k[q] = _mm256_cvtps_pd(_mm_i32gather_ps(g + 9 * i + q, idx, 4));
        for (int c = 0; c < 3; c++)
            g6_v(k[c], k[3 + c], k[6 + c], t[c]);
        for (int a = 0; a < 6; a++) {
            __m256d r[6];
            g6_v(t[0][a], t[1][a], t[2][a], r);
            for (int bq = 0; bq < 6; bq++)
                _mm_storeu_ps(u + (6 * a + bq) * stride + i, _mm256_cvtpd_ps(r[bq]));
        }
    }
    return i;
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
