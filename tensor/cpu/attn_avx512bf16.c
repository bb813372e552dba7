/*
 * attn_avx512bf16.c — attention with its two products in AVX-512 BF16 (vdpbf16ps), for
 * bf16 models (the op's precision is bf16, tensor_precision.h) on CPUs that have
 * AVX-512 BF16 but no AMX (AMD Zen 4/5, Cooper Lake): attn_avx512.c's kernel, with
 * S^T = K Q^T and O^T += V^T P^T on bf16 pairs instead of f32 FMAs.
 *
 * Why: under --bf16-unet on a Zen 5 the GEMMs ran bf16 and attention, fp32, was 0.82 s
 * of a 3.5 s 512^2 step; vdpbf16ps does two products per lane where vfmadd231ps does
 * one (peaks measured there: 720 against 382 GFLOP/s on two threads).
 *
 * Layout: attn_avx512.c's (its header says why queries are in the lanes), on pairs:
 * vdpbf16ps adds a[2i] b[2i] + a[2i+1] b[2i+1] into f32 lane i, so a lane holds one
 * query's (or key's) two consecutive elements of the summed dimension.
 *   - S^T: Q^T packed per subtile as [d/2][48] channel pairs (pre-scaled by
 *     scale * log2(e)); K packed once per call as bf16 rows [head][tk][d], so one
 *     32-bit broadcast is a key's channel pair. 8 keys x 48 queries in 24 accumulators.
 *   - O^T: P^T written as [nk/2][48] key pairs (rounded right after the exponential, in
 *     place over the scores); V packed once per call as [head][tk/2][dv] key pairs, so
 *     one broadcast is a channel's pair of keys. 8 channels x 48 queries.
 * The blocks of keys are even (attn_fused.c), so only the last pair of a head can be
 * half a key: its P is zero and its V was packed as zero. Needs d even (SD's 40, 64,
 * 80, 160 are); else, or causal, the caller runs the f32 kernel.
 *
 * Numerics: Q, K, V and P are rounded to bf16 (nearest even), sums f32, P from the
 * degree-3 exponential (exp2_avx512.h: its 7.5e-5 is far below P's rounding); the sum l of
 * each query is of the rounded P, so that O / l weighs exactly what O summed. Within
 * ~1e-2 relative of a float64 attention, as attn_amx.c (test_tensor_attn_bf16 checks
 * both against the same bound).
 *
 * Threads: the packing and the (head, query block) tasks run on the pool; the packed
 * K and V are the calling thread's kept scratch (7 MiB per call at 512^2 would be fresh
 * pages every time otherwise, as attn_amx.c measured).
 */
#include <math.h>
#include <string.h>

#include <immintrin.h>

#include "adapt.h"
#include "attn_fused.h"
#include "exp2_avx512.h"
#include "gemm_amx.h" /* cpu_amx_vnni_pair: AVX-512 BF16 only */
#include "gemm_bf16.h"
#include "../tensor_impl.h"

#define QT 48     /* queries per subtile: three 16-lane vectors */
#define FA_QSUB 4 /* subtiles per task: 192 queries share each key/value block */
_Static_assert(QT == 48, "O^T is attn_avx512.c's layout: cpu_fattn_store_o48 stores it");

static _Thread_local struct cpu_scratch kv;

#if defined(__clang__) /* clang ignores GCC target pragmas */
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma"))),  \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,fma")
#endif

#define INLINE static inline __attribute__((always_inline))

INLINE __m512 dp(__m512 acc, __m512i a, __m512i b)
{
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

/* S^T rows for nk keys (kr: the first key's bf16 row as pairs, d2 pairs per row) against
 * the subtile's nv query vectors, stored at st (rows QT apart), folded into bmax. */
INLINE void s_tile(const int nv, const int nk, const uint32_t *q2, int64_t d2, const uint32_t *kr,
                   float *st, __m512 *bmax)
{
    __m512 acc[8][3];
    for (int r = 0; r < nk; r++)
        for (int v = 0; v < nv; v++)
            acc[r][v] = _mm512_setzero_ps();
    for (int64_t c = 0; c < d2; c++) {
        __m512i q[3];
        for (int v = 0; v < nv; v++)
            q[v] = _mm512_load_si512(q2 + c * QT + 16 * v);
        for (int r = 0; r < nk; r++) {
            __m512i b = _mm512_set1_epi32((int)kr[r * d2 + c]);
            for (int v = 0; v < nv; v++)
                acc[r][v] = dp(acc[r][v], b, q[v]);
        }
    }
    for (int r = 0; r < nk; r++)
        for (int v = 0; v < nv; v++) {
            _mm512_store_ps(st + r * QT + 16 * v, acc[r][v]);
            bmax[v] = _mm512_max_ps(bmax[v], acc[r][v]);
        }
}

/* ot[c][.] = ot[c][.] * corr + sum over np key pairs of P^T V for nc channels (vr: the
 * first pair's packed V at the first channel, dv pairs per key pair). */
INLINE void pv_tile(const int nv, const int nc, const uint32_t *pt, int64_t np, const uint32_t *vr,
                    int64_t dv, float *ot, const __m512 *corr)
{
    __m512 acc[8][3];
    for (int c = 0; c < nc; c++)
        for (int v = 0; v < nv; v++)
            acc[c][v] = _mm512_mul_ps(_mm512_load_ps(ot + c * QT + 16 * v), corr[v]);
    for (int64_t j = 0; j < np; j++) {
        __m512i p[3];
        for (int v = 0; v < nv; v++)
            p[v] = _mm512_load_si512(pt + j * QT + 16 * v);
        for (int c = 0; c < nc; c++) {
            __m512i b = _mm512_set1_epi32((int)vr[j * dv + c]);
            for (int v = 0; v < nv; v++)
                acc[c][v] = dp(acc[c][v], b, p[v]);
        }
    }
    for (int c = 0; c < nc; c++)
        for (int v = 0; v < nv; v++)
            _mm512_store_ps(ot + c * QT + 16 * v, acc[c][v]);
}

/* One key block (nk keys, starting on a pair) for one subtile of nv vectors. */
INLINE void fa_step(const int nv, const struct fa_args *a, struct fa_sub *s, float *st, int64_t nk)
{
    __m512 bmax[3], corr[3], lsum[3];
    for (int v = 0; v < nv; v++)
        bmax[v] = _mm512_set1_ps(-INFINITY);
    int64_t d2 = a->d / 2;
    const uint32_t *q2 = (const uint32_t *)s->qt;
    const uint32_t *kr = (const uint32_t *)a->kp + a->jj * d2;
    int64_t r = 0;
    for (; r + 8 <= nk; r += 8)
        s_tile(nv, 8, q2, d2, kr + r * d2, st + r * QT, bmax);
#define S_REST(n)                                                                                  \
    if (nk - r >= (n)) {                                                                           \
        s_tile(nv, n, q2, d2, kr + r * d2, st + r * QT, bmax);                                     \
        r += (n);                                                                                  \
    }
    S_REST(4)
    S_REST(2)
    S_REST(1)
#undef S_REST
    for (int v = 0; v < nv; v++) {
        __m512 mo = _mm512_load_ps(s->m + 16 * v);
        __m512 mn = _mm512_max_ps(mo, bmax[v]);
        corr[v] = cpu_exp2_p3(_mm512_sub_ps(mo, mn)); /* O^T and l alike: its error cancels */
        lsum[v] = _mm512_mul_ps(_mm512_load_ps(s->l + 16 * v), corr[v]);
        _mm512_store_ps(s->m + 16 * v, mn);
        bmax[v] = mn;
    }
    /* P^T's key pairs over the scores: pair j (rows 2j, 2j + 1) goes to row j, which
     * rows before 2j no longer need */
    uint32_t *pt = (uint32_t *)st;
    int64_t np = (nk + 1) / 2;
    for (int64_t j = 0; j < np; j++)
        for (int v = 0; v < nv; v++) {
            __m512 mx = bmax[v];
            __m512 p0 = cpu_exp2_p3(_mm512_sub_ps(_mm512_load_ps(st + 2 * j * QT + 16 * v), mx));
            __m512 p1 =
                2 * j + 1 < nk
                    ? cpu_exp2_p3(_mm512_sub_ps(_mm512_load_ps(st + (2 * j + 1) * QT + 16 * v), mx))
                    : _mm512_setzero_ps();
            __m512i pp = cpu_amx_vnni_pair(p0, p1);
            /* the sum of what O^T adds: the rounded P (bf16 is f32's top half) */
            lsum[v] = _mm512_add_ps(lsum[v], _mm512_castsi512_ps(_mm512_slli_epi32(pp, 16)));
            lsum[v] = _mm512_add_ps(
                lsum[v], _mm512_castsi512_ps(_mm512_and_si512(pp, _mm512_set1_epi32(-65536))));
            _mm512_store_si512(pt + j * QT + 16 * v, pp);
        }
    for (int v = 0; v < nv; v++)
        _mm512_store_ps(s->l + 16 * v, lsum[v]);
    const uint32_t *vr = (const uint32_t *)a->vp + a->jj / 2 * a->dv;
    int64_t c = 0;
    for (; c + 8 <= a->dv; c += 8)
        pv_tile(nv, 8, pt, np, vr + c, a->dv, s->ot + c * QT, corr);
#define PV_REST(n)                                                                                 \
    if (a->dv - c >= (n)) {                                                                        \
        pv_tile(nv, n, pt, np, vr + c, a->dv, s->ot + c * QT, corr);                               \
        c += (n);                                                                                  \
    }
    PV_REST(4)
    PV_REST(2)
    PV_REST(1)
#undef PV_REST
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

/* Q^T's channel pairs: qt [d/2][QT] of pairs (q[i][2c], q[i][2c + 1]) x scale2. */
static void load_q(float *qt, const float *q, int64_t q_rs, int64_t n, int64_t d, float scale2)
{
    uint32_t *q2 = (uint32_t *)qt;
    __m512 s = _mm512_set1_ps(scale2);
    for (int64_t c = 0; c < d; c += 32) {
        int64_t left = d - c;
        __mmask16 m0 = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
        __mmask16 m1 = left >= 32 ? 0xffff : left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : 0;
        for (int64_t i = 0; i < QT; i++) {
            _Alignas(64) uint32_t row[16];
            __m512i r = _mm512_setzero_si512();
            if (i < n) {
                const float *qi = q + i * q_rs + c;
                __m512 lo = _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, qi), s);
                __m512 hi = _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, qi + 16), s);
                r = (__m512i)_mm512_cvtne2ps_pbh(hi, lo); /* bf16 in order: pairs */
            }
            _mm512_store_si512(row, r);
            for (int64_t p = 0; p < 16 && c + 2 * p < d; p++)
                q2[(c / 2 + p) * QT + i] = row[p];
        }
    }
}

/* Head h's K rows and V key pairs into the packed buffers. */
struct kv_pack {
    const float *k, *v;
    int64_t k_rs, v_rs, tk, d, dv;
    uint16_t *kp;
    uint32_t *vp;
    int64_t k_hs, v_hs; /* elements per head */
};

static void pack_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const struct kv_pack *j = ctx;
    for (int64_t h = b; h < e; h++) {
        uint16_t *kp = j->kp + h * j->k_hs;
        for (int64_t t = 0; t < j->tk; t++)
            cpu_bf16_round(kp + t * j->d, j->k + t * j->k_rs + h * j->d, j->d);
        uint32_t *vp = j->vp + h * j->v_hs;
        for (int64_t t = 0; t < j->tk; t += 2) {
            const float *v0 = j->v + t * j->v_rs + h * j->dv;
            const float *v1 = t + 1 < j->tk ? v0 + j->v_rs : NULL;
            uint32_t *o = vp + t / 2 * j->dv;
            int64_t c = 0;
            for (; c + 16 <= j->dv; c += 16) {
                __m512 x0 = _mm512_loadu_ps(v0 + c);
                __m512 x1 = v1 ? _mm512_loadu_ps(v1 + c) : _mm512_setzero_ps();
                _mm512_storeu_si512(o + c, cpu_amx_vnni_pair(x0, x1));
            }
            if (c < j->dv) {
                __mmask16 m = (__mmask16)((1u << (j->dv - c)) - 1);
                __m512 x0 = _mm512_maskz_loadu_ps(m, v0 + c);
                __m512 x1 = v1 ? _mm512_maskz_loadu_ps(m, v1 + c) : _mm512_setzero_ps();
                _mm512_mask_storeu_epi32(o + c, m, cpu_amx_vnni_pair(x0, x1));
            }
        }
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

static const struct fa_kernel kernel = {
    QT, FA_QSUB, 16, 8, fa_step_nv, load_q, cpu_fattn_store_o48};

int cpu_attention_avx512bf16(float *out, int64_t o_rs, const float *q, int64_t q_rs, const float *k,
                             int64_t k_rs, const float *v, int64_t v_rs, int64_t tq, int64_t tk,
                             int heads, int64_t d, int64_t dv, float scale)
{
    if (!cpu_avx512bf16_usable() || d % 2 || tq <= 0 || tk <= 0 || d <= 0 || dv <= 0)
        return -1;
    int64_t k_hs = tk * d, v_hs = (tk + 1) / 2 * dv; /* bf16 / pairs per head */
    size_t kb = (size_t)(heads * k_hs) * 2, vb = (size_t)(heads * v_hs) * 4;
    kb = (kb + 63) & ~(size_t)63;
    char *base = (char *)cpu_scratch_grow(&kv, (kb + vb) / 4 + 16);
    struct kv_pack pj = {
        k, v, k_rs, v_rs, tk, d, dv, (uint16_t *)base, (uint32_t *)(base + kb), k_hs, v_hs};
    tensor__pool_for(heads, pack_task, &pj);
    struct fa_packed pk = {base, base + kb, k_hs * 2, v_hs * 4};
    cpu_fattn_run(&kernel, &pk, out, o_rs, q, q_rs, k, k_rs, v, v_rs, tq, tk, heads, d, dv, scale,
                  0);
    return 0;
}

size_t cpu_attn_avx512bf16_release(void)
{
    return cpu_scratch_drop(&kv);
}
