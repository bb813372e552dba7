/*
 * attn_amx.c — attention with its two products on AMX tiles, for bf16 models (the op's
 * precision is bf16, tensor_precision.h) on CPUs with AMX: flash style (online
 * softmax), as attn_avx512.c, but S = Q K^T and O += P V run as tdpbf16ps on bf16 Q,
 * K, V and P with f32 sums, and only the softmax stays in AVX-512 registers.
 *
 * Why: under --bf16-unet the GEMMs ran on AMX and attention, fp32 on AVX-512, became
 * the largest part of a 512^2 step (0.82 of 2.5 s, perf: 3/4 of it the two products).
 *
 * Layout: a task is one head's block of 32 queries (two 16-row tiles). Per call, every
 * head's K and V are rounded and packed once, for all tasks:
 *   - K as B tiles of S (K-dim = the head dim, padded to 32): per block of 32 keys and
 *     step of 32 channels two tiles (keys 0-15, 16-31), row r = channel pair r of each
 *     key (gemm_amx.h's cpu_amx_vnni_cols);
 *   - V as B tiles of P V (K-dim = 32 keys): per key block and 16 value channels one
 *     tile, row r = keys 2r, 2r + 1 of each channel, interleaved.
 * Per key block: S (2 x 2 tiles) goes to memory; the softmax updates each query's max
 * m and sum l in the log2 domain (Q is pre-scaled by scale * log2(e)), rescales the
 * query's O row and writes P rounded to bf16; then O's tiles are loaded, P V added in
 * the tiles and stored back. Keys past tk score -inf (their packed K and V are zero).
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

#include "alloc.h"
#include "gemm_amx.h"
#include "gemm_bf16.h"
#include "../tensor_impl.h"

#define QB 32 /* queries per task */
#define KB 32 /* keys per block */

struct amx_attn {
    float *out;
    const float *q, *k, *v;
    int64_t o_rs, q_rs, k_rs, v_rs;
    int64_t tq, tk, d, dv;
    int64_t ds, nct, nkb, nqb; /* head-dim steps of 32, value tiles of 16, key/query blocks */
    float scale2;
    uint16_t *kp, *vp; /* packed K, V of every head */
    char **ws;         /* per thread scratch */
};

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))
#define INLINE static inline __attribute__((always_inline))

/* 2^x for x <= 0, clamped at -100 (attn_avx512.c's polynomial and reasons). */
TGT INLINE __m512 exp2_neg(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-100.0f));
    __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(0.001327647129073739f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.009675540961325169f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.05550713092088699f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24022120237350464f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931469440460205f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000001192092896f));
    return _mm512_scalef_ps(p, n);
}

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
    uint16_t *kt = j->kp + ((h * j->nkb + kb) * j->ds) * 1024;
    _Alignas(64) uint16_t rows[16 * 32];
    for (int64_t s = 0; s < j->ds; s++)
        for (int half = 0; half < 2; half++) {
            for (int r = 0; r < 16; r++) {
                int64_t key = half * 16 + r;
                __m512i x = key < nk ? round32(j->k + (key0 + key) * j->k_rs + h * j->d + s * 32,
                                               j->d - s * 32, 1.0f)
                                     : _mm512_setzero_si512();
                _mm512_store_si512(rows + r * 32, x);
            }
            cpu_amx_vnni_cols(kt + s * 1024 + half * 512, rows, 32);
        }
    /* V: keys 2r and 2r + 1 interleaved, 16 channels per tile */
    static const uint16_t zip[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                     8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    __m512i idx = _mm512_loadu_si512(zip);
    uint16_t *vt = j->vp + (h * j->nkb + kb) * j->nct * 512;
    for (int64_t c = 0; c < j->nct; c++) {
        int64_t left = j->dv - c * 16;
        __mmask16 mc = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
        for (int r = 0; r < 16; r++) {
            __m512 x0 = _mm512_setzero_ps(), x1 = _mm512_setzero_ps();
            if (2 * r < nk)
                x0 =
                    _mm512_maskz_loadu_ps(mc, j->v + (key0 + 2 * r) * j->v_rs + h * j->dv + c * 16);
            if (2 * r + 1 < nk)
                x1 = _mm512_maskz_loadu_ps(mc, j->v + (key0 + 2 * r + 1) * j->v_rs + h * j->dv +
                                                   c * 16);
            __m512i both = (__m512i)_mm512_cvtne2ps_pbh(x1, x0); /* x0 low, x1 high */
            _mm512_storeu_si512(vt + c * 512 + r * 32, _mm512_permutexvar_epi16(idx, both));
        }
    }
}

static void pack_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const struct amx_attn *j = ctx;
    for (int64_t t = b; t < e; t++)
        pack_kv(j, t / j->nkb, t % j->nkb);
}

/* O's value tiles c0.. (up to four) += P (tile 4) x V's tiles; O rows 16 x dvp floats. */
#define PV_ONE(T, BT)                                                                              \
    do {                                                                                           \
        _tile_loadd(T, o + (c0 + T) * 16, ld);                                                     \
        _tile_loadd(BT, vt + (c0 + T) * 512, 64);                                                  \
        _tile_dpbf16ps(T, 4, BT);                                                                  \
        _tile_stored(T, o + (c0 + T) * 16, ld);                                                    \
    } while (0)

TGT static void pv_half(float *o, int64_t ld, const uint16_t *vt, int64_t nct)
{
    for (int64_t c0 = 0; c0 < nct; c0 += 4) {
        int64_t g = nct - c0;
        PV_ONE(0, 5);
        if (g > 1)
            PV_ONE(1, 6);
        if (g > 2)
            PV_ONE(2, 7);
        if (g > 3)
            PV_ONE(3, 5);
    }
}

TGT static void attn_block(const struct amx_attn *j, int64_t h, int64_t i0, char *ws)
{
    int64_t nq = j->tq - i0 < QB ? j->tq - i0 : QB, dvp = j->nct * 16;
    uint16_t *qa = (uint16_t *)ws;    /* [ds][32 rows][32] */
    uint16_t *pa = qa + j->ds * 1024; /* P: [32 rows][32 keys] */
    float *st = (float *)(pa + 1024); /* S: [32][32] */
    float *o = st + 32 * 32;          /* O: [32][dvp] */
    _Alignas(64) float m[QB], l[QB];
    for (int64_t s = 0; s < j->ds; s++)
        for (int r = 0; r < QB; r++) {
            __m512i x = r < nq ? round32(j->q + (i0 + r) * j->q_rs + h * j->d + s * 32,
                                         j->d - s * 32, j->scale2)
                               : _mm512_setzero_si512();
            _mm512_store_si512(qa + s * 1024 + r * 32, x);
        }
    memset(o, 0, (size_t)(QB * dvp) * sizeof(float));
    for (int r = 0; r < QB; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    int64_t ldo = dvp * 4;
    for (int64_t kb = 0; kb < j->nkb; kb++) {
        const uint16_t *kt = j->kp + ((h * j->nkb + kb) * j->ds) * 1024;
        const uint16_t *vt = j->vp + (h * j->nkb + kb) * j->nct * 512;
        int64_t nk = j->tk - kb * KB < KB ? j->tk - kb * KB : KB;
        /* S = Q K^T: queries 0-15 / 16-31 x keys 0-15 / 16-31 */
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t s = 0; s < j->ds; s++) {
            _tile_loadd(4, qa + s * 1024, 64);
            _tile_loadd(5, qa + s * 1024 + 512, 64);
            _tile_loadd(6, kt + s * 1024, 64);
            _tile_loadd(7, kt + s * 1024 + 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, st, 128);
        _tile_stored(1, st + 16, 128);
        _tile_stored(2, st + 16 * 32, 128);
        _tile_stored(3, st + 16 * 32 + 16, 128);
        /* the online softmax: each query row's new max, then the 32 corrections
         * 2^(m - m') in two vectors, then each row's P, sum and rescaled O */
        __mmask16 k0 = nk >= 16 ? 0xffff : (__mmask16)((1u << nk) - 1);
        __mmask16 k1 = nk >= 32 ? 0xffff : nk > 16 ? (__mmask16)((1u << (nk - 16)) - 1) : 0;
        __m512 ninf = _mm512_set1_ps(-INFINITY);
        _Alignas(64) float mn[QB], alpha[QB];
        for (int r = 0; r < QB; r++) {
            __m512 s0 = _mm512_mask_loadu_ps(ninf, k0, st + r * 32);
            __m512 s1 = _mm512_mask_loadu_ps(ninf, k1, st + r * 32 + 16);
            float mx = _mm512_reduce_max_ps(_mm512_max_ps(s0, s1));
            mn[r] = mx > m[r] ? mx : m[r];
        }
        for (int h2 = 0; h2 < QB; h2 += 16) /* m = -inf (no key yet): 2^-100, O and l are 0 */
            _mm512_store_ps(alpha + h2, exp2_neg(_mm512_sub_ps(_mm512_load_ps(m + h2),
                                                               _mm512_load_ps(mn + h2))));
        for (int r = 0; r < QB; r++) {
            __m512 vm = _mm512_set1_ps(mn[r]);
            __m512 p0 = exp2_neg(_mm512_sub_ps(_mm512_loadu_ps(st + r * 32), vm));
            __m512 p1 = exp2_neg(_mm512_sub_ps(_mm512_loadu_ps(st + r * 32 + 16), vm));
            p0 = _mm512_maskz_mov_ps(k0, p0); /* keys past tk: exactly nothing */
            p1 = _mm512_maskz_mov_ps(k1, p1);
            l[r] = l[r] * alpha[r] + _mm512_reduce_add_ps(_mm512_add_ps(p0, p1));
            m[r] = mn[r];
            if (alpha[r] != 1.0f) {
                __m512 va = _mm512_set1_ps(alpha[r]);
                float *orow = o + r * dvp;
                for (int64_t c = 0; c < dvp; c += 16)
                    _mm512_store_ps(orow + c, _mm512_mul_ps(va, _mm512_load_ps(orow + c)));
            }
            _mm512_store_si512(pa + r * 32, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
        }
        /* O += P V, rows 0-15 then 16-31 */
        _tile_loadd(4, pa, 64);
        pv_half(o, ldo, vt, j->nct);
        _tile_loadd(4, pa + 16 * 32, 64);
        pv_half(o + 16 * dvp, ldo, vt, j->nct);
    }
    for (int64_t r = 0; r < nq; r++) {
        float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        float *dst = j->out + (i0 + r) * j->o_rs + h * j->dv;
        for (int64_t c = 0; c < j->dv; c++)
            dst[c] = o[r * dvp + c] * inv;
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
    j.kp = xmalloc_aligned(64, kb + vb);
    j.vp = j.kp + kb / 2;
    tensor__pool_for(heads * j.nkb, pack_task, &j);
    int nt = tensor__pool_threads();
    size_t per = (size_t)(j.ds * 1024 + 1024) * 2 + (size_t)(32 * 32 + QB * j.nct * 16) * 4;
    j.ws = xmalloc((size_t)nt * sizeof(char *));
    for (int i = 0; i < nt; i++)
        j.ws[i] = xmalloc_aligned(64, per);
    tensor__pool_for((int64_t)heads * j.nqb, attn_task, &j);
    for (int i = 0; i < nt; i++)
        xfree_aligned(j.ws[i]);
    xfree(j.ws);
    xfree_aligned(j.kp);
    return 0;
}
