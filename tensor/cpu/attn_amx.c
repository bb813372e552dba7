/*
 * attn_amx.c — attention with its two products on AMX tiles, for bf16 models (the op's
 * precision is bf16, tensor_precision.h) on CPUs with AMX: flash style (online
 * softmax), as attn_avx512.c, but S = Q K^T and O += P V run as tdpbf16ps on bf16 Q,
 * K, V and P with f32 sums, and only the softmax stays in AVX-512 registers.
 *
 * Why: under --bf16-unet the GEMMs ran on AMX and attention, fp32 on AVX-512, became
 * the largest part of a 512^2 step (0.82 of 2.5 s, perf: 3/4 of it the two products).
 *
 * Layout: a task is one head's block of 32 queries, and the queries are the columns of
 * both products: S^T = K Q^T and O^T += V^T P^T, so that each query's max, sum and
 * correction are one lane of a vector (a first version with S = Q K^T spent a third of
 * its time in per-row reductions and scalar updates, perf; 0.41 -> 0.35 s per step).
 * Per call, every head's K and V are rounded and packed once, for all tasks:
 *   - K as A squares (32 keys x 32 channels per step of the head dim, padded to 32);
 *   - V^T as A tiles (16 channels x 32 keys), V rounded and transposed per key block.
 * Per task, Q^T as B tiles (channel pairs of 16 queries: gemm_amx.h's
 * cpu_amx_vnni_cols). Per step of 64 keys (two packed 32-key blocks): S^T (2 x 2 tiles
 * per block) goes to memory; the softmax updates each query's max m and sum l in the
 * log2 domain (Q is pre-scaled by scale * log2(e)), rescales O^T's columns when the max
 * moves (lazily, LAZY_LOG2) and writes P^T as B tiles (key pairs interleaved, rounded to
 * bf16); then O^T's tiles are loaded, V^T P^T of both blocks added in the tiles and
 * stored back. Keys past tk score nothing (P = 0; their K and V are zero).
 *
 * Numerics: Q, K, V and P are rounded to bf16 (nearest even), sums f32. The result is
 * within ~1e-2 relative of a float64 attention of the unrounded inputs (test_tensor_amx
 * checks the bound), the same order as the bf16 GEMMs around it.
 *
 * Threads: the executor calls cpu_attention_amx; the packing and the tasks run on the
 * pool, each task with its thread's scratch.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <immintrin.h>

#include "adapt.h"
#include "alloc.h"
#include "exp2_avx512.h"
#include "gemm_amx.h"
#include "gemm_bf16.h"
#include "../tensor_impl.h"

#define QB 32 /* queries per task */
/* how far (log2 units) a query's score may pass its running max before O^T is rescaled:
 * P then stays <= 256, a range bf16 and the f32 sums hold exactly as well as [0, 1] */
#define LAZY_LOG2 8.0f

/* The calling thread's packed K and V, kept between calls: 7 MiB of fresh pages per call
 * (a 512^2 self-attention) were 4 % of a bf16 step in page faults. */
static _Thread_local struct cpu_scratch kv;
#define KB 32 /* keys per block */

struct amx_attn {
    float *out;
    const float *q, *k, *v;
    int64_t o_rs, q_rs, k_rs, v_rs;
    int64_t tq, tk, d, dv;
    int64_t ds, nct, nkb, nqb; /* head-dim steps of 32, value tiles of 16, key/query blocks */
    float scale2;
    uint16_t *kp, *vp; /* packed K, V of every head */
    void **ws;         /* per thread scratch */
};

#define TGT __attribute__((target("avx512f,fma,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))
#define INLINE static inline __attribute__((always_inline))

/* 32 floats (n valid, the rest 0) x scale -> 32 bf16, round to nearest even. */
TGT INLINE __m512i round32(const float *src, int64_t n, float scale)
{
    __mmask16 m0 = n >= 16 ? 0xffff : n > 0 ? (__mmask16)((1u << n) - 1) : 0;
    __mmask16 m1 = n >= 32 ? 0xffff : n > 16 ? (__mmask16)((1u << (n - 16)) - 1) : 0;
    __m512 s = _mm512_set1_ps(scale);
    __m512 lo = _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, src), s);
    __m512 hi = _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, src + 16), s);
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* Head h's keys and values, block kb, into their tiles. */
TGT static void pack_kv(const struct amx_attn *j, int64_t h, int64_t kb)
{
    int64_t key0 = kb * KB, nk = j->tk - key0 < KB ? j->tk - key0 : KB;
    /* K: A squares, row = key, 32 channels per step */
    uint16_t *kt = j->kp + ((h * j->nkb + kb) * j->ds) * 1024;
    for (int64_t s = 0; s < j->ds; s++)
        for (int r = 0; r < KB; r++) {
            __m512i x = r < nk ? round32(j->k + (key0 + r) * j->k_rs + h * j->d + s * 32,
                                         j->d - s * 32, 1.0f)
                               : _mm512_setzero_si512();
            _mm512_store_si512(kt + s * 1024 + r * 32, x);
        }
    /* V^T: A tiles of 16 channels x 32 keys, rounded then transposed */
    uint16_t *vt = j->vp + (h * j->nkb + kb) * j->nct * 512;
    _Alignas(64) uint16_t rows[KB * 16];
    for (int64_t c = 0; c < j->nct; c++) {
        int64_t left = j->dv - c * 16;
        __mmask16 mc = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
        for (int r = 0; r < KB; r += 2) {
            __m512 x0 = _mm512_setzero_ps(), x1 = _mm512_setzero_ps();
            if (r < nk)
                x0 = _mm512_maskz_loadu_ps(mc, j->v + (key0 + r) * j->v_rs + h * j->dv + c * 16);
            if (r + 1 < nk)
                x1 =
                    _mm512_maskz_loadu_ps(mc, j->v + (key0 + r + 1) * j->v_rs + h * j->dv + c * 16);
            _mm512_store_si512(rows + r * 16, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
        }
        uint16_t *t = vt + c * 512;
        for (int ch = 0; ch < 16; ch++)
            for (int r = 0; r < KB; r++)
                t[ch * 32 + r] = rows[r * 16 + ch];
    }
}

static void pack_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const struct amx_attn *j = ctx;
    for (int64_t t = b; t < e; t++)
        pack_kv(j, t / j->nkb, t % j->nkb);
}

/* O^T's channel tiles (16 x 16 queries, rows 128 bytes apart) += V^T's tiles x P^T (tile
 * 5), and, with vt2 (a second 32-key sub-block), + its V^T tiles x P^T in tile 7: each
 * O^T tile is loaded and stored once per 64 keys, not per 32 (the loads and stores were
 * twice the products' time at head dim 40). Groups of four accumulators; V^T's tiles take
 * turns in tmm4 and tmm6. */
#define PV_ONE(T, A0, A1)                                                                          \
    do {                                                                                           \
        _tile_loadd(T, ot + (c0 + T) * 16 * QB, QB * 4);                                           \
        _tile_loadd(A0, vt + (c0 + T) * 512, 64);                                                  \
        _tile_dpbf16ps(T, A0, 5);                                                                  \
        if (vt2) {                                                                                 \
            _tile_loadd(A1, vt2 + (c0 + T) * 512, 64);                                             \
            _tile_dpbf16ps(T, A1, 7);                                                              \
        }                                                                                          \
        _tile_stored(T, ot + (c0 + T) * 16 * QB, QB * 4);                                          \
    } while (0)

TGT static void pv_half(float *ot, const uint16_t *vt, const uint16_t *vt2, int64_t nct)
{
    for (int64_t c0 = 0; c0 < nct; c0 += 4) {
        int64_t g = nct - c0;
        PV_ONE(0, 4, 6);
        if (g > 1)
            PV_ONE(1, 6, 4);
        if (g > 2)
            PV_ONE(2, 4, 6);
        if (g > 3)
            PV_ONE(3, 6, 4);
    }
}

/*
 * One head's 32 queries (i0..) over all keys. Queries are in the columns of S^T = K Q^T
 * and of O^T = V^T P^T, so each query's max, sum and correction are one lane of a
 * vector: no horizontal reductions (an S = Q K^T layout spent a third of its time in
 * per-row reductions and scalar updates, perf).
 */
TGT static void attn_block(const struct amx_attn *j, int64_t h, int64_t i0, char *ws)
{
    int64_t nq = j->tq - i0 < QB ? j->tq - i0 : QB, dvp = j->nct * 16;
    uint16_t *qb = (uint16_t *)ws;       /* Q^T: [half][ds] B tiles */
    uint16_t *pb = qb + 2 * j->ds * 512; /* P^T: [half][2 sub-blocks] B tiles */
    float *st = (float *)(pb + 4 * 512); /* S^T: [64 keys][32 queries] */
    float *ot = st + 2 * KB * QB;        /* O^T: [dvp][32 queries] */
    _Alignas(64) uint16_t rows[16 * 32];
    for (int half = 0; half < 2; half++)
        for (int64_t s = 0; s < j->ds; s++) {
            for (int r = 0; r < 16; r++) {
                int64_t qi = half * 16 + r;
                __m512i x = qi < nq ? round32(j->q + (i0 + qi) * j->q_rs + h * j->d + s * 32,
                                              j->d - s * 32, j->scale2)
                                    : _mm512_setzero_si512();
                _mm512_store_si512(rows + r * 32, x);
            }
            cpu_amx_vnni_cols(qb + (half * j->ds + s) * 512, rows, 32);
        }
    memset(ot, 0, (size_t)(dvp * QB) * sizeof(float));
    __m512 m[2] = {_mm512_set1_ps(-INFINITY), _mm512_set1_ps(-INFINITY)};
    __m512 l[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    /* keys in steps of two packed 32-key sub-blocks: one softmax update and one pass of
     * O^T's tiles per 64 keys */
    for (int64_t kb = 0; kb < j->nkb; kb += 2) {
        int two = kb + 1 < j->nkb;
        const uint16_t *vt = j->vp + (h * j->nkb + kb) * j->nct * 512;
        int nk = (int)(j->tk - kb * KB < 2 * KB ? j->tk - kb * KB : 2 * KB);
        for (int sb = 0; sb < 1 + two; sb++) {
            const uint16_t *kt = j->kp + ((h * j->nkb + kb + sb) * j->ds) * 1024;
            float *ss = st + sb * KB * QB;
            /* S^T: keys 0-15 / 16-31 x queries 0-15 / 16-31 */
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int64_t s = 0; s < j->ds; s++) {
                _tile_loadd(4, kt + s * 1024, 64);
                _tile_loadd(5, kt + s * 1024 + 512, 64);
                _tile_loadd(6, qb + s * 512, 64);
                _tile_loadd(7, qb + (j->ds + s) * 512, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, ss, QB * 4);
            _tile_stored(1, ss + 16, QB * 4);
            _tile_stored(2, ss + 16 * QB, QB * 4);
            _tile_stored(3, ss + 16 * QB + 16, QB * 4);
        }
        /* the online softmax, 16 queries per vector; P^T as VNNI rows (key pairs) */
        for (int half = 0; half < 2; half++) {
            const float *sc = st + half * 16;
            /* four chains: one max after another is 4 cycles each */
            __m512 mx4[4] = {m[half], m[half], m[half], m[half]};
            int r = 0;
            for (; r + 4 <= nk; r += 4)
                for (int u = 0; u < 4; u++)
                    mx4[u] = _mm512_max_ps(mx4[u], _mm512_load_ps(sc + (r + u) * QB));
            for (; r < nk; r++)
                mx4[0] = _mm512_max_ps(mx4[0], _mm512_load_ps(sc + r * QB));
            __m512 mx = _mm512_max_ps(_mm512_max_ps(mx4[0], mx4[1]), _mm512_max_ps(mx4[2], mx4[3]));
            /* the running max moves only when a query's block max passes it by more than
             * LAZY_LOG2 (then for all 16): P = 2^(s - m) <= 2^LAZY_LOG2 meanwhile, and O^T
             * and l skip the rescale (the first block always moves it from -inf) */
            __mmask16 up = _mm512_cmp_ps_mask(mx, _mm512_add_ps(m[half], _mm512_set1_ps(LAZY_LOG2)),
                                              _CMP_GT_OQ);
            if (up) {
                __m512 mn = _mm512_max_ps(m[half], mx);
                /* O^T and l take the same factor: its error cancels in O / l */
                __m512 alpha = cpu_exp2_p3(_mm512_sub_ps(m[half], mn)); /* m = -inf: ~0, all 0 */
                m[half] = mn;
                l[half] = _mm512_mul_ps(l[half], alpha);
                float *oc = ot + half * 16;
                for (int64_t c = 0; c < dvp; c++)
                    _mm512_store_ps(oc + c * QB, _mm512_mul_ps(alpha, _mm512_load_ps(oc + c * QB)));
            }
            __m512 mn = m[half];
            /* four pairs of keys per step, four partial sums: one chain of adds was a
             * fifth of this function (perf); rows past the sub-blocks run are not written
             * (no tile reads them) */
            __m512 sum[4];
            uint16_t *prow = pb + half * 1024; /* key r's pair row: prow + r * 16 */
            for (int u = 0; u < 4; u++)
                sum[u] = _mm512_setzero_ps();
            for (r = 0; r < (1 + two) * KB; r += 8) {
                for (int u = 0; u < 4; u++) {
                    int rr = r + 2 * u;
                    __m512 p0 = _mm512_setzero_ps(), p1 = _mm512_setzero_ps();
                    if (nk == 2 * KB || rr < nk)
                        p0 = cpu_exp2_p3(_mm512_sub_ps(_mm512_load_ps(sc + rr * QB), mn));
                    if (nk == 2 * KB || rr + 1 < nk)
                        p1 = cpu_exp2_p3(_mm512_sub_ps(_mm512_load_ps(sc + (rr + 1) * QB), mn));
                    sum[u] = _mm512_add_ps(sum[u], _mm512_add_ps(p0, p1));
                    _mm512_store_si512(prow + rr * 16, cpu_amx_vnni_pair(p0, p1));
                }
            }
            l[half] = _mm512_add_ps(l[half], _mm512_add_ps(_mm512_add_ps(sum[0], sum[1]),
                                                           _mm512_add_ps(sum[2], sum[3])));
        }
        /* O^T += V^T P^T, queries 0-15 then 16-31 */
        for (int half = 0; half < 2; half++) {
            _tile_loadd(5, pb + half * 1024, 64);
            if (two)
                _tile_loadd(7, pb + half * 1024 + 512, 64);
            pv_half(ot + half * 16, vt, two ? vt + j->nct * 512 : NULL, j->nct);
        }
    }
    _Alignas(64) float inv[QB];
    for (int half = 0; half < 2; half++) {
        __mmask16 pos = _mm512_cmp_ps_mask(l[half], _mm512_setzero_ps(), _CMP_GT_OQ);
        _mm512_store_ps(inv + half * 16, _mm512_maskz_div_ps(pos, _mm512_set1_ps(1.0f), l[half]));
    }
    for (int64_t r = 0; r < nq; r++) {
        float *dst = j->out + (i0 + r) * j->o_rs + h * j->dv;
        for (int64_t c = 0; c < j->dv; c++)
            dst[c] = ot[c * QB + r] * inv[r];
    }
}

static void attn_task(void *ctx, int64_t b, int64_t e, int tid)
{
    const struct amx_attn *j = ctx;
    cpu_amx_tiles_begin();
    for (int64_t t = b; t < e; t++)
        attn_block(j, t / j->nqb, t % j->nqb * QB, j->ws[tid]);
    cpu_amx_tiles_end();
}

int cpu_attention_amx(float *out, int64_t o_rs, const float *q, int64_t q_rs, const float *k,
                      int64_t k_rs, const float *v, int64_t v_rs, int64_t tq, int64_t tk, int heads,
                      int64_t d, int64_t dv, float scale)
{
    if (!cpu_bf16_amx() || tq <= 0 || tk <= 0 || d <= 0 || dv <= 0 || d > 512 || dv > 512)
        return -1;
    struct amx_attn j = {out,
                         q,
                         k,
                         v,
                         o_rs,
                         q_rs,
                         k_rs,
                         v_rs,
                         tq,
                         tk,
                         d,
                         dv,
                         (d + 31) / 32,
                         (dv + 15) / 16,
                         (tk + KB - 1) / KB,
                         (tq + QB - 1) / QB,
                         scale * 1.44269504088896341f,
                         NULL,
                         NULL,
                         NULL};
    size_t kb = (size_t)(heads * j.nkb * j.ds) * 1024 * 2,
           vb = (size_t)(heads * j.nkb * j.nct) * 512 * 2;
    j.kp = (uint16_t *)cpu_scratch_grow(&kv, (kb + vb) / 4 + 16);
    j.vp = j.kp + kb / 2;
    tensor__pool_for(heads * j.nkb, pack_task, &j);
    size_t per =
        (size_t)(2 * j.ds * 512 + 4 * 512) * 2 + (size_t)(2 * KB * QB + j.nct * 16 * QB) * 4;
    j.ws = tensor__pool_scratch_new(per);
    tensor__pool_for((int64_t)heads * j.nqb, attn_task, &j);
    tensor__pool_scratch_free(j.ws);
    return 0;
}

size_t cpu_attn_amx_release(void)
{
    return cpu_scratch_drop(&kv);
}
