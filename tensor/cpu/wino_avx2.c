/*
 * wino_avx2.c — the row loops of winograd.c's F(2x2, 3x3) input and output transforms, 8
 * tiles per AVX2 vector, for CPUs with AVX2 but no AVX-512F (wino_avx512.c's loops are
 * taken when the CPU has that; the scalar loops stay for older CPUs, the tail tiles of a
 * row, and tests).
 *
 * Why: on an AVX2-only CPU (Zen 3 here) the scalar transforms were ~4.5 % of a cold
 * 256^2 txt2img's samples (perf: wino43__output_tf 1.4 %, wino43__input_tf 1.3 %,
 * wino43__tf_weights 0.6 %, wino__input_tf 0.6 %, wino__output_tf 0.4 %), more in the
 * VAE decode (perf of bench_sd15 --vae-only, 256^2 and 512^2: the scalar transforms
 * 23 % of the samples, these 9 %). The stride-2 tile reads and interleaved pixel writes
 * become in-lane shuffles and one lane-crossing permute per vector.
 *
 * Every value is computed with the scalar code's operations in the scalar code's order,
 * so all paths give the same bits (test_tensor_winograd compares them). The target is
 * "avx2" alone, not "avx2,fma": nothing here needs FMA, and without it GCC (whose
 * default for gnu11 is -ffp-contract=fast) cannot fuse a multiply and an add that the
 * scalar code rounds twice (wino43_avx2.c's multipliers are powers of two, but a
 * subnormal halved is not exact).
 *
 * Threads: any (pure functions over the caller's buffers).
 */
#include <immintrin.h>

#include "winograd_impl.h"

int cpu_wino_avx2 = -1; /* -1: use AVX2 when the CPU has it; 0: never (tests, A/B runs) */

int wino__avx2(void)
{
    if (cpu_wino_avx2 < 0) {
        __builtin_cpu_init();
        cpu_wino_avx2 = __builtin_cpu_supports("avx2") != 0;
    }
    return cpu_wino_avx2;
}

int wino__vec(void)
{
    return wino__avx512() ? 16 : wino__avx2() ? 8 : 0;
}

#if defined(__clang__) /* clang ignores GCC target pragmas */
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif

int64_t wino__in_rows_avx2(const float *p0, const float *p1, const float *p2, const float *p3,
                           float *t0, float *t1, float *t2, float *t3, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_loadu_ps(p0 + i), b = _mm256_loadu_ps(p1 + i);
        __m256 c = _mm256_loadu_ps(p2 + i), d = _mm256_loadu_ps(p3 + i);
        _mm256_storeu_ps(t0 + i, _mm256_sub_ps(a, c));
        _mm256_storeu_ps(t1 + i, _mm256_add_ps(b, c));
        _mm256_storeu_ps(t2 + i, _mm256_sub_ps(c, b));
        _mm256_storeu_ps(t3 + i, _mm256_sub_ps(b, d));
    }
    return i;
}

/* The even (*e) and odd (*o) floats of r[0 .. 15], in order. The in-lane shuffle leaves
 * the 64-bit pairs as (0, 2, 1, 3) of the wanted order; one permute puts them back. */
static inline void split2(const float *r, __m256 *e, __m256 *o)
{
    __m256 l0 = _mm256_loadu_ps(r), l1 = _mm256_loadu_ps(r + 8);
    __m256 ev = _mm256_shuffle_ps(l0, l1, _MM_SHUFFLE(2, 0, 2, 0));
    __m256 od = _mm256_shuffle_ps(l0, l1, _MM_SHUFFLE(3, 1, 3, 1));
    *e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), _MM_SHUFFLE(3, 1, 2, 0)));
    *o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), _MM_SHUFFLE(3, 1, 2, 0)));
}

int64_t wino__in_cols_avx2(const float *s, float *v0, float *v1, float *v2, float *v3, int64_t tw)
{
    int64_t tx = 0;
    for (; tx + 8 <= tw; tx += 8) {
        /* s[2tx .. 2tx + 15] and s[2tx + 2 .. 2tx + 17]: the row holds 2 tw + 2 values */
        const float *r = s + 2 * tx;
        __m256 a, b, c, d;
        split2(r, &a, &b);
        split2(r + 2, &c, &d);
        _mm256_storeu_ps(v0 + tx, _mm256_sub_ps(a, c));
        _mm256_storeu_ps(v1 + tx, _mm256_add_ps(b, c));
        _mm256_storeu_ps(v2 + tx, _mm256_sub_ps(c, b));
        _mm256_storeu_ps(v3 + tx, _mm256_sub_ps(b, d));
    }
    return tx;
}

/*
 * Pixels 2t and 2t + 1 (e0[t], e1[t], t < 8) of one output row from y. up 1: y[0 .. 15]
 * in order. up 2: y[0], y[2], ..., y[30]; AVX2's masked store (vmaskmovps) is known to
 * be slow on AMD's Zen cores (not measured here), so each 8 floats of the row from y - b
 * (b: y's column phase, so the window starts on the row's even column) are read,
 * blended and written back, rewriting the other phase's pixels with what they held.
 * The caller guarantees the window stays in the row, and the row is written only by
 * this thread (wino_up2.c: all four phases of a tile row are one task's).
 */
static inline void store_pairs(float *y, __m256 e0, __m256 e1, int64_t up, int b)
{
    /* (e0[t], e1[t]) pairs of tiles t = 0 1 | 4 5 and 2 3 | 6 7 */
    __m256 lo = _mm256_unpacklo_ps(e0, e1), hi = _mm256_unpackhi_ps(e0, e1);
    if (up == 1) {
        _mm256_storeu_ps(y, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(y + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
        return;
    }
    const __m256i d01 = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    const __m256i d23 = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
    /* lanes of phase b: even lanes for b = 0, odd for b = 1 (sign bit set: take new) */
    const __m256 ours = b ? _mm256_castsi256_ps(_mm256_setr_epi32(0, -1, 0, -1, 0, -1, 0, -1))
                          : _mm256_castsi256_ps(_mm256_setr_epi32(-1, 0, -1, 0, -1, 0, -1, 0));
    /* window k (8 floats) holds tiles 2k and 2k + 1, each value twice */
    __m256 w[4] = {_mm256_permutevar8x32_ps(lo, d01), _mm256_permutevar8x32_ps(hi, d01),
                   _mm256_permutevar8x32_ps(lo, d23), _mm256_permutevar8x32_ps(hi, d23)};
    float *base = y - b;
    for (int k = 0; k < 4; k++) {
        __m256 old = _mm256_loadu_ps(base + 8 * k);
        _mm256_storeu_ps(base + 8 * k, _mm256_blendv_ps(old, w[k], ours));
    }
}

int64_t wino__out_row_avx2(const float *const pq[WG_XI], float bv, float *y0, float *y1,
                           int64_t pairs, int64_t up, int b)
{
    const __m256 bb = _mm256_set1_ps(bv);
    int64_t tx = 0;
    for (; tx + 8 <= pairs; tx += 8) {
        __m256 m[WG_XI], s0[4], s1[4];
        for (int q = 0; q < WG_XI; q++)
            m[q] = _mm256_loadu_ps(pq[q] + tx);
        for (int c = 0; c < 4; c++) {
            s0[c] = _mm256_add_ps(_mm256_add_ps(m[c], m[4 + c]), m[8 + c]);
            s1[c] = _mm256_sub_ps(_mm256_sub_ps(m[4 + c], m[8 + c]), m[12 + c]);
        }
        __m256 e0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s0[0], s0[1]), s0[2]), bb);
        __m256 e1 = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(s0[1], s0[2]), s0[3]), bb);
        /* up 2, b 1: the last window ends at row column 4 (tx + 8) <= 4 pairs <= 2 wo */
        store_pairs(y0 + up * 2 * tx, e0, e1, up, b);
        if (y1) {
            __m256 f0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s1[0], s1[1]), s1[2]), bb);
            __m256 f1 = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(s1[1], s1[2]), s1[3]), bb);
            store_pairs(y1 + up * 2 * tx, f0, f1, up, b);
        }
    }
    return tx;
}

int64_t wino__tf_weights_avx2(const float *g9, float *u, int64_t n)
{
    /* kernel c's tap k at g9[9 c + k]: one gather per tap for 8 kernels */
    const __m256i idx = _mm256_setr_epi32(0, 9, 18, 27, 36, 45, 54, 63);
    const __m256 half = _mm256_set1_ps(0.5f);
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) {
        __m256 g[9], t[4][3];
        for (int q = 0; q < 9; q++)
            g[q] = _mm256_i32gather_ps(g9 + 9 * c + q, idx, 4);
        for (int k = 0; k < 3; k++) { /* G g */
            t[0][k] = g[k];
            t[1][k] = _mm256_mul_ps(half, _mm256_add_ps(_mm256_add_ps(g[k], g[3 + k]), g[6 + k]));
            t[2][k] = _mm256_mul_ps(half, _mm256_add_ps(_mm256_sub_ps(g[k], g[3 + k]), g[6 + k]));
            t[3][k] = g[6 + k];
        }
        for (int r = 0; r < 4; r++) { /* (G g) G^T */
            __m256 s = _mm256_add_ps(_mm256_add_ps(t[r][0], t[r][1]), t[r][2]);
            __m256 d = _mm256_add_ps(_mm256_sub_ps(t[r][0], t[r][1]), t[r][2]);
            _mm256_storeu_ps(u + (4 * r + 0) * n + c, t[r][0]);
            _mm256_storeu_ps(u + (4 * r + 1) * n + c, _mm256_mul_ps(half, s));
            _mm256_storeu_ps(u + (4 * r + 2) * n + c, _mm256_mul_ps(half, d));
            _mm256_storeu_ps(u + (4 * r + 3) * n + c, t[r][2]);
        }
    }
    return c;
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
