/*
 * attn_avx2.c — attn_avx512.c's fused attention (flash style, online softmax, queries
 * in the vector lanes) for CPUs with AVX2 and FMA but not AVX-512F (Zen 2/3, Haswell
 * to Alder Lake); attn.c's blocked-sgemm attention stays the reference and the
 * fallback. Read attn_avx512.c's header first: the algorithm, layout, blocking and
 * numerics are the same; this comment says only what differs.
 *
 * Register blocking (16 ymm registers, not 32): a subtile is QT = 24 queries (three
 * 8-lane vectors);
 *   - S^T = K Q^T: 4 keys x 24 queries in 12 accumulators, plus three qt loads and
 *     one broadcast K scalar: all 16 registers, no spills;
 *   - O^T += V^T P^T: 4 channels x 24 queries in 12 accumulators, the same way.
 * Each step is 12 FMAs for 3 vector loads + 4 broadcasts, which Zen 3's three load
 * ports issue in fewer cycles than its two FMA pipes take for the FMAs. Ragged ends
 * use the 4-2-1 decomposition of keys and channels and 3-2-1 query vectors.
 *
 * Blocking: a task is one head's FA_QSUB subtiles (8 x 24 = 192 queries, as many as
 * the AVX-512 kernel's 4 x 48), so each key/value block is read once per 192
 * queries; the keys per block are cpu_fattn_bk (attn_fused.c, the driver both kernels share).
 *
 * exp2: AVX2 has no vscalefps, so p * 2^n is done in the exponent field: n << 23 added
 * as an integer to p's bits (the same as multiplying by the float (n + 127) << 23, but
 * off the FMA pipes). The -100 clamp keeps n in [-100, 0], so with p in [0.7, 1.5] the
 * result stays a normal float (no denormal or zero to special-case); the clamp also
 * maps the NaN of -inf - -inf to -100 (vmaxps returns its second operand on NaN).
 * Causal mask: an integer compare of lane query index against the key index, then a
 * blend with -inf (no mask registers).
 *
 * Q is packed and O unpacked through 8 x 8 register transposes: with 77 context keys
 * the scalar gather/scatter of 40 channels per query was a few percent of the op.
 *
 * Measured on a 2-core Zen 3 (AVX2 + FMA, 2 threads, best of 7): 1.2x the blocked
 * path at 4096 tokens x head dim 40 (147 vs 121 GFLOP/s, ~0.8 of sgemm), 1.15x at
 * 1024 x 80, 1.08x at 256 x 160, 1.2x over 77 context keys (single thread ~0.8 of
 * the FMA peak at head dim 40). Where the rest goes: per key and 8 queries the two
 * dot products are d + dv FMAs (80 at head dim 40, 40 cycles on the two FMA pipes);
 * exp2 (~15 operations, 5 of them FMAs), the S tiles' stores and max, and the O
 * tiles' reload and rescale of 12 accumulators per 4 channels add about a fifth.
 */
#include <math.h>

#include <immintrin.h>

#include "attn_fused.h"
#include "../tensor_impl.h"

#define QT 24     /* queries per subtile: three 8-lane vectors */
#define FA_QSUB 8 /* subtiles per task: 192 queries share each key/value block */

long cpu_attn_avx2_runs; /* calls of cpu_attention_avx2 (tests check that the kernel ran) */

int cpu_attention_avx2_usable(void)
{
    static int have = -1;
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return have;
}

#if defined(__clang__) /* clang ignores GCC target pragmas */
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

#define INLINE static inline __attribute__((always_inline))

/* 2^x for x <= 0 (see the header comment for the clamp). */
INLINE __m256 exp2_neg(__m256 x)
{
    x = _mm256_max_ps(x, _mm256_set1_ps(-100.0f));
    __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(x, n);
    /* attn_avx512.c's polynomial: 2^f on [-1/2, 1/2], max relative error 2.3e-7 */
    __m256 p = _mm256_set1_ps(0.001327647129073739f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.009675540961325169f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.05550713092088699f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.24022120237350464f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.6931469440460205f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0000001192092896f));
    /* p * 2^n as n added to p's exponent field: an integer add, not a multiply on the
     * FMA pipes that the dot products need (p in [0.7, 1.5] and n >= -100: p * 2^n
     * stays normal, so the two are bit-identical) */
    __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
}

/*
 * S^T rows for nk keys (kr: the first key's head slice, rows k_rs apart) against the
 * subtile's nv query vectors, stored at st (rows QT apart), folded into bmax. With
 * `mask`, lane i (query qi0 + i) hides keys jj > qi0 + i (causal).
 */
INLINE void s_tile(const int nv, const int nk, const float *qt, int64_t d, const float *kr,
                   int64_t k_rs, float *st, __m256 *bmax, int mask, int64_t qi0, int64_t jj)
{
    __m256 acc[4][3];
    const float *kp[4];
    for (int r = 0; r < nk; r++) {
        kp[r] = kr + r * k_rs;
        for (int v = 0; v < nv; v++)
            acc[r][v] = _mm256_setzero_ps();
    }
    for (int64_t c = 0; c < d; c++) {
        __m256 q[3];
        for (int v = 0; v < nv; v++)
            q[v] = _mm256_load_ps(qt + c * QT + 8 * v);
        for (int r = 0; r < nk; r++) {
            __m256 b = _mm256_broadcast_ss(kp[r] + c);
            for (int v = 0; v < nv; v++)
                acc[r][v] = _mm256_fmadd_ps(b, q[v], acc[r][v]);
        }
    }
    if (mask) {
        const __m256i iota = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
        const __m256 ninf = _mm256_set1_ps(-INFINITY);
        for (int r = 0; r < nk; r++)
            for (int v = 0; v < nv; v++) {
                __m256i qi = _mm256_add_epi32(iota, _mm256_set1_epi32((int)(qi0 + 8 * v)));
                /* hide where key > query: all-ones lanes select -inf */
                __m256i hide = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(jj + r)), qi);
                acc[r][v] = _mm256_blendv_ps(acc[r][v], ninf, _mm256_castsi256_ps(hide));
            }
    }
    for (int r = 0; r < nk; r++)
        for (int v = 0; v < nv; v++) {
            _mm256_store_ps(st + r * QT + 8 * v, acc[r][v]);
            bmax[v] = _mm256_max_ps(bmax[v], acc[r][v]);
        }
}

/*
 * ot[c][.] = ot[c][.] * corr + sum_j P^T[j][.] V[j][c] for nc channels (vr: the first
 * key's row at the first channel, rows v_rs apart), nk keys of P^T at pt.
 */
INLINE void pv_tile(const int nv, const int nc, const float *pt, int64_t nk, const float *vr,
                    int64_t v_rs, float *ot, const __m256 *corr)
{
    __m256 acc[4][3];
    for (int c = 0; c < nc; c++)
        for (int v = 0; v < nv; v++)
            acc[c][v] = _mm256_mul_ps(_mm256_load_ps(ot + c * QT + 8 * v), corr[v]);
    for (int64_t j = 0; j < nk; j++) {
        __m256 p[3];
        const float *vj = vr + j * v_rs;
        for (int v = 0; v < nv; v++)
            p[v] = _mm256_load_ps(pt + j * QT + 8 * v);
        for (int c = 0; c < nc; c++) {
            __m256 b = _mm256_broadcast_ss(vj + c);
            for (int v = 0; v < nv; v++)
                acc[c][v] = _mm256_fmadd_ps(b, p[v], acc[c][v]);
        }
    }
    for (int c = 0; c < nc; c++)
        for (int v = 0; v < nv; v++)
            _mm256_store_ps(ot + c * QT + 8 * v, acc[c][v]);
}

/* One key block (nk keys) for one subtile of nv vectors. */
INLINE void fa_step(const int nv, const struct fa_args *a, struct fa_sub *s, float *st, int64_t nk)
{
    __m256 bmax[3], corr[3], lsum[3];
    for (int v = 0; v < nv; v++)
        bmax[v] = _mm256_set1_ps(-INFINITY);
    const float *kr = a->k + a->jj * a->k_rs;
    int64_t r = 0;
    for (; r + 4 <= nk; r += 4)
        s_tile(nv, 4, s->qt, a->d, kr + r * a->k_rs, a->k_rs, st + r * QT, bmax,
               a->mask && a->jj + r + 3 > a->qi0, a->qi0, a->jj + r);
#define S_REST(n)                                                                                  \
    if (nk - r >= (n)) {                                                                           \
        s_tile(nv, n, s->qt, a->d, kr + r * a->k_rs, a->k_rs, st + r * QT, bmax,                   \
               a->mask && a->jj + r + (n)-1 > a->qi0, a->qi0, a->jj + r);                          \
        r += (n);                                                                                  \
    }
    S_REST(2)
    S_REST(1)
#undef S_REST
    for (int v = 0; v < nv; v++) {
        __m256 mo = _mm256_load_ps(s->m + 8 * v);
        __m256 mn = _mm256_max_ps(mo, bmax[v]);
        corr[v] = exp2_neg(_mm256_sub_ps(mo, mn));
        lsum[v] = _mm256_mul_ps(_mm256_load_ps(s->l + 8 * v), corr[v]);
        _mm256_store_ps(s->m + 8 * v, mn);
        bmax[v] = mn;
    }
    for (int64_t j = 0; j < nk; j++)
        for (int v = 0; v < nv; v++) {
            __m256 p = exp2_neg(_mm256_sub_ps(_mm256_load_ps(st + j * QT + 8 * v), bmax[v]));
            _mm256_store_ps(st + j * QT + 8 * v, p);
            lsum[v] = _mm256_add_ps(lsum[v], p);
        }
    for (int v = 0; v < nv; v++)
        _mm256_store_ps(s->l + 8 * v, lsum[v]);
    const float *vr = a->v + a->jj * a->v_rs;
    int64_t c = 0;
    for (; c + 4 <= a->dv; c += 4)
        pv_tile(nv, 4, st, nk, vr + c, a->v_rs, s->ot + c * QT, corr);
#define PV_REST(n)                                                                                 \
    if (a->dv - c >= (n)) {                                                                        \
        pv_tile(nv, n, st, nk, vr + c, a->v_rs, s->ot + c * QT, corr);                             \
        c += (n);                                                                                  \
    }
    PV_REST(2)
    PV_REST(1)
#undef PV_REST
}

/* r[0..7] := its transpose (r[i] lane j <- r[j] lane i). */
INLINE void transpose8(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/*
 * qt[c][i] = q[i][c] * scale2 for n <= QT queries (rows q_rs apart) and d channels,
 * lanes i >= n zero. Whole 8 x 8 blocks go through transpose8: with few keys (77 context
 * tokens) or few tokens the scalar gather was a tenth of the work.
 */
static void load_q(float *qt, const float *q, int64_t q_rs, int64_t n, int64_t d, float scale2)
{
    const __m256 sc = _mm256_set1_ps(scale2);
    int64_t n8 = n / 8 * 8, d8 = d / 8 * 8;
    for (int64_t i = 0; i < n8; i += 8) {
        for (int64_t c = 0; c < d8; c += 8) {
            __m256 r[8];
            for (int t = 0; t < 8; t++)
                r[t] = _mm256_loadu_ps(q + (i + t) * q_rs + c);
            transpose8(r);
            for (int t = 0; t < 8; t++)
                _mm256_store_ps(qt + (c + t) * QT + i, _mm256_mul_ps(r[t], sc));
        }
        for (int64_t c = d8; c < d; c++)
            for (int64_t t = i; t < i + 8; t++)
                qt[c * QT + t] = q[t * q_rs + c] * scale2;
    }
    for (int64_t c = 0; c < d; c++)
        for (int64_t t = n8; t < QT; t++)
            qt[c * QT + t] = t < n ? q[t * q_rs + c] * scale2 : 0.0f;
}

/* out[i][c] = ot[c][i] / l[i] (0 where l[i] is 0) for n queries and dv channels. */
static void store_o(float *out, int64_t o_rs, const float *ot, const float *l, int64_t n,
                    int64_t dv)
{
    float inv[QT];
    for (int64_t i = 0; i < n; i++)
        inv[i] = l[i] > 0 ? 1.0f / l[i] : 0.0f;
    int64_t n8 = n / 8 * 8, d8 = dv / 8 * 8;
    for (int64_t i = 0; i < n8; i += 8) {
        for (int64_t c = 0; c < d8; c += 8) {
            __m256 r[8];
            for (int t = 0; t < 8; t++)
                r[t] = _mm256_load_ps(ot + (c + t) * QT + i);
            transpose8(r);
            for (int t = 0; t < 8; t++)
                _mm256_storeu_ps(out + (i + t) * o_rs + c,
                                 _mm256_mul_ps(r[t], _mm256_set1_ps(inv[i + t])));
        }
        for (int64_t t = i; t < i + 8; t++)
            for (int64_t c = d8; c < dv; c++)
                out[t * o_rs + c] = ot[c * QT + t] * inv[t];
    }
    for (int64_t t = n8; t < n; t++)
        for (int64_t c = 0; c < dv; c++)
            out[t * o_rs + c] = ot[c * QT + t] * inv[t];
}

static void fa_step_nv(int nv, const struct fa_args *a, struct fa_sub *s, float *st, int64_t nk)
{
    switch (nv) {
    case 1:
        fa_step(1, a, s, st, nk);
        break;
    case 2:
        fa_step(2, a, s, st, nk);
        break;
    default:
        fa_step(3, a, s, st, nk);
        break;
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

static const struct fa_kernel kernel = {QT, FA_QSUB, 8, 4, fa_step_nv, load_q, store_o};

void cpu_attention_avx2(float *out, int64_t o_rs, const float *q, int64_t q_rs, const float *k,
                        int64_t k_rs, const float *v, int64_t v_rs, int64_t tq, int64_t tk,
                        int heads, int64_t d, int64_t dv, float scale, int causal)
{
    __atomic_fetch_add(&cpu_attn_avx2_runs, 1, __ATOMIC_RELAXED);
    cpu_fattn_run(&kernel, NULL, out, o_rs, q, q_rs, k, k_rs, v, v_rs, tq, tk, heads, d, dv, scale,
                  causal);
}
