/*
 * attn_avx512.c — fused attention (flash style, online softmax) in AVX-512F
 * registers, for the CPUs that have it; attn.c's blocked-sgemm attention is the
 * reference and the fallback.
 *
 * Why not two sgemms per key block (attn.c): with SD's head dims the GEMMs are
 * skinny (S = Q K^T has k = 40, P V has n = 40), each call re-packs its operands,
 * and the softmax between them walks the scores twice more; at 4096 tokens x head
 * dim 40 that path ran at ~0.6 of the sgemm rate.
 *
 * Layout: queries are in the vector lanes. A subtile is QT = 48 queries (three
 * 16-lane vectors) of one head; Q is packed transposed (qt [d][48], pre-scaled by
 * scale * log2(e) so that the softmax is exp2) and the accumulator is O^T
 * (ot [dv][48]). Then
 *   - S^T = K Q^T: 8 keys x 48 queries in 24 accumulators; each step is three
 *     loads of qt and eight K scalars broadcast straight from K's rows (no packing
 *     of K, any d);
 *   - the softmax's running max, correction and sum are per lane, i.e. vertical:
 *     no horizontal reductions at all;
 *   - O^T += V^T P^T: 8 channels x 48 queries in 24 accumulators, V scalars
 *     broadcast from V's rows, so dv need not be a multiple of 16 (40, 80 waste
 *     nothing, where a keys-in-lanes kernel would pad 40 to 48).
 * Ragged ends use the same kernels with fewer keys / channels / vectors (8-4-2-1
 * decomposition), all compile-time instances of one inline body.
 *
 * Blocking: a task is one head's block of FA_QSUB subtiles; it walks the keys in
 * blocks of cpu_fattn_bk and runs every subtile over a block before moving on, so a
 * key/value block (bk x (d + dv) floats: 40 KiB at bk 128, d 40) is read from memory
 * once per FA_QSUB * 48 queries and stays in L1/L2 meanwhile; the subtiles' state
 * (qt, ot, m, l) lives in the thread's scratch (L2). That driver is attn_fused.c, shared
 * with attn_avx2.c; this file brings the AVX-512 step and the Q/O layout.
 *
 * Numerics: fp32 throughout. exp2 (exp2_avx512.h) is a degree-5 polynomial on [-1/2, 1/2] with
 * scalef (relative error 2.3e-7); the argument is clamped at -100 (2^-100 is
 * nothing next to the row's maximum term 1, and the clamp also maps a NaN from
 * -inf - -inf to it, as vmaxps returns its second operand for NaN), which also
 * keeps denormals out of the accumulators. Against the reference path the error
 * is ~1e-6 relative (test_tensor_attn).
 *
 * Threads: like attn.c; pool tasks are (head, query block), every kernel runs on
 * one thread with its own scratch.
 */
#include <math.h>

#include <immintrin.h>

#include "attn_fused.h"
#include "exp2_avx512.h"
#include "../tensor_impl.h"

#define QT 48     /* queries per subtile: three 16-lane vectors */
#define FA_QSUB 4 /* subtiles per task: 192 queries share each key/value block */

int cpu_attention_avx512_usable(void)
{
    static int have = -1;
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx512f") != 0;
    }
    return have;
}

#if defined(__clang__) /* clang ignores GCC target pragmas */
#pragma clang attribute push(__attribute__((target("avx512f,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,fma")
#endif

#define INLINE static inline __attribute__((always_inline))

/*
 * S^T rows for nk keys (kr: the first key's head slice, rows k_rs apart) against the
 * subtile's nv query vectors, stored at st (rows QT apart), folded into bmax. With
 * `mask`, lane i (query qi0 + i) hides keys jj > qi0 + i (causal).
 */
INLINE void s_tile(const int nv, const int nk, const float *qt, int64_t d, const float *kr,
                   int64_t k_rs, float *st, __m512 *bmax, int mask, int64_t qi0, int64_t jj)
{
    __m512 acc[8][3];
    const float *kp[8];
    for (int r = 0; r < nk; r++) {
        kp[r] = kr + r * k_rs;
        for (int v = 0; v < nv; v++)
            acc[r][v] = _mm512_setzero_ps();
    }
    for (int64_t c = 0; c < d; c++) {
        __m512 q[3];
        for (int v = 0; v < nv; v++)
            q[v] = _mm512_load_ps(qt + c * QT + 16 * v);
        for (int r = 0; r < nk; r++) {
            __m512 b = _mm512_set1_ps(kp[r][c]);
            for (int v = 0; v < nv; v++)
                acc[r][v] = _mm512_fmadd_ps(b, q[v], acc[r][v]);
        }
    }
    if (mask) {
        const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2,
                                              1, 0);
        for (int r = 0; r < nk; r++)
            for (int v = 0; v < nv; v++) {
                __m512i qi = _mm512_add_epi32(iota, _mm512_set1_epi32((int)(qi0 + 16 * v)));
                __mmask16 hide = _mm512_cmplt_epi32_mask(qi, _mm512_set1_epi32((int)(jj + r)));
                acc[r][v] = _mm512_mask_mov_ps(acc[r][v], hide, _mm512_set1_ps(-INFINITY));
            }
    }
    for (int r = 0; r < nk; r++)
        for (int v = 0; v < nv; v++) {
            _mm512_store_ps(st + r * QT + 16 * v, acc[r][v]);
            bmax[v] = _mm512_max_ps(bmax[v], acc[r][v]);
        }
}

/*
 * ot[c][.] = ot[c][.] * corr + sum_j P^T[j][.] V[j][c] for nc channels (vr: the first
 * key's row at the first channel, rows v_rs apart), nk keys of P^T at pt.
 */
INLINE void pv_tile(const int nv, const int nc, const float *pt, int64_t nk, const float *vr,
                    int64_t v_rs, float *ot, const __m512 *corr)
{
    __m512 acc[8][3];
    for (int c = 0; c < nc; c++)
        for (int v = 0; v < nv; v++)
            acc[c][v] = _mm512_mul_ps(_mm512_load_ps(ot + c * QT + 16 * v), corr[v]);
    for (int64_t j = 0; j < nk; j++) {
        __m512 p[3];
        const float *vj = vr + j * v_rs;
        for (int v = 0; v < nv; v++)
            p[v] = _mm512_load_ps(pt + j * QT + 16 * v);
        for (int c = 0; c < nc; c++) {
            __m512 b = _mm512_set1_ps(vj[c]);
            for (int v = 0; v < nv; v++)
                acc[c][v] = _mm512_fmadd_ps(b, p[v], acc[c][v]);
        }
    }
    for (int c = 0; c < nc; c++)
        for (int v = 0; v < nv; v++)
            _mm512_store_ps(ot + c * QT + 16 * v, acc[c][v]);
}

/* One key block (nk keys) for one subtile of nv vectors. */
INLINE void fa_step(const int nv, const struct fa_args *a, struct fa_sub *s, float *st,
                    int64_t nk)
{
    __m512 bmax[3], corr[3], lsum[3];
    for (int v = 0; v < nv; v++)
        bmax[v] = _mm512_set1_ps(-INFINITY);
    const float *kr = a->k + a->jj * a->k_rs;
    int64_t r = 0;
    for (; r + 8 <= nk; r += 8)
        s_tile(nv, 8, s->qt, a->d, kr + r * a->k_rs, a->k_rs, st + r * QT, bmax,
               a->mask && a->jj + r + 7 > a->qi0, a->qi0, a->jj + r);
#define S_REST(n)                                                                           \
    if (nk - r >= (n)) {                                                                    \
        s_tile(nv, n, s->qt, a->d, kr + r * a->k_rs, a->k_rs, st + r * QT, bmax,            \
               a->mask && a->jj + r + (n) - 1 > a->qi0, a->qi0, a->jj + r);                 \
        r += (n);                                                                           \
    }
    S_REST(4)
    S_REST(2)
    S_REST(1)
#undef S_REST
    for (int v = 0; v < nv; v++) {
        __m512 mo = _mm512_load_ps(s->m + 16 * v);
        __m512 mn = _mm512_max_ps(mo, bmax[v]);
        corr[v] = cpu_exp2_neg16(_mm512_sub_ps(mo, mn));
        lsum[v] = _mm512_mul_ps(_mm512_load_ps(s->l + 16 * v), corr[v]);
        _mm512_store_ps(s->m + 16 * v, mn);
        bmax[v] = mn;
    }
    for (int64_t j = 0; j < nk; j++)
        for (int v = 0; v < nv; v++) {
            __m512 p = cpu_exp2_neg16(_mm512_sub_ps(_mm512_load_ps(st + j * QT + 16 * v), bmax[v]));
            _mm512_store_ps(st + j * QT + 16 * v, p);
            lsum[v] = _mm512_add_ps(lsum[v], p);
        }
    for (int v = 0; v < nv; v++)
        _mm512_store_ps(s->l + 16 * v, lsum[v]);
    const float *vr = a->v + a->jj * a->v_rs;
    int64_t c = 0;
    for (; c + 8 <= a->dv; c += 8)
        pv_tile(nv, 8, st, nk, vr + c, a->v_rs, s->ot + c * QT, corr);
#define PV_REST(n)                                                                          \
    if (a->dv - c >= (n)) {                                                                 \
        pv_tile(nv, n, st, nk, vr + c, a->v_rs, s->ot + c * QT, corr);                      \
        c += (n);                                                                           \
    }
    PV_REST(4)
    PV_REST(2)
    PV_REST(1)
#undef PV_REST
}

static void fa_step_nv(int nv, const struct fa_args *a, struct fa_sub *s, float *st, int64_t nk)
{
    switch (nv) {
    case 1: fa_step(1, a, s, st, nk); break;
    case 2: fa_step(2, a, s, st, nk); break;
    default: fa_step(3, a, s, st, nk); break;
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

/* Q in and O out of the query-lane layout, scalar (plain C: no target needed). */
static void load_q(float *qt, const float *q, int64_t q_rs, int64_t n, int64_t d, float scale2)
{
    for (int64_t c = 0; c < d; c++) {
        float *row = qt + c * QT;
        for (int64_t i = 0; i < n; i++)
            row[i] = q[i * q_rs + c] * scale2;
        for (int64_t i = n; i < QT; i++)
            row[i] = 0.0f;
    }
}

void cpu_fattn_store_o48(float *out, int64_t o_rs, const float *ot, const float *l, int64_t n,
                         int64_t dv)
{
    for (int64_t i = 0; i < n; i++) {
        float inv = l[i] > 0 ? 1.0f / l[i] : 0.0f;
        for (int64_t c = 0; c < dv; c++)
            out[i * o_rs + c] = ot[c * QT + i] * inv;
    }
}

static const struct fa_kernel kernel = {
    QT, FA_QSUB, 16, 8, fa_step_nv, load_q, cpu_fattn_store_o48};

void cpu_attention_avx512(float *out, int64_t o_rs, const float *q, int64_t q_rs,
                          const float *k, int64_t k_rs, const float *v, int64_t v_rs, int64_t tq,
                          int64_t tk, int heads, int64_t d, int64_t dv, float scale, int causal)
{
    cpu_fattn_run(&kernel, NULL, out, o_rs, q, q_rs, k, k_rs, v, v_rs, tq, tk, heads, d, dv, scale,
                  causal);
}
