/*
 * attn.c — multi-head scaled-dot-product attention, flash style.
 *
 * For each (batch, head, block of ATTN_BQ queries) a worker walks the keys in
 * blocks of ATTN_BK: S = scale * Q_blk K_blk^T (one sgemm), then the online
 * softmax update per row (running max m, running sum l, accumulator rescaled
 * by exp(m_old - m_new)), then acc += P V_blk (a second sgemm). Only a
 * BQ x BK score tile per thread ever exists, never the Tq x Tk matrix
 * (4096 x 4096 x 8 heads would be 512 MiB).
 *
 * Score rows are stored with a stride rounded up to 16 floats and, without a causal
 * mask, the ragged end of a key block is padded with -inf up to that stride, so the
 * max and exp-sum passes run whole vectors only: with 77 context keys the 13-float
 * tail went through scalar expf and cost more than the other 64 (exp(-inf - m)
 * clamps to ~1e-38, nothing next to the row's maximum term 1; P V reads only the
 * real keys).
 *
 * Parallelism: tasks are (batch, head, q-block), cut into contiguous runs per
 * thread so a thread keeps one head's K and V hot in cache; every sgemm is
 * single-threaded (the pool owns the cores for the whole op).
 *
 * On a CPU with AVX-512F, cpu_attention hands the work to attn_avx512.c's fused
 * kernel instead (1.3-1.4x per CPU-second at 4096 tokens x head dim 40 and over 77
 * context keys, level at 1024 x 80 and 256 x 160), else with AVX2 and FMA to
 * attn_avx2.c's port of it; this path stays as the reference (cpu_attn_fused = 0
 * forces it) and as the fallback everywhere else.
 */
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "../tensor_impl.h"
#include "../tensor_precision.h"

int cpu_attn_bq = 256; /* query rows per tile (tunable; 256 measured best at 4096x40) */
int cpu_attn_bk = 512; /* keys per tile */
/* 0: always this file's path (tests, benchmarks); 1: the widest fused kernel the CPU has;
 * 2: the AVX2 kernel even on an AVX-512F CPU (tests) */
int cpu_attn_fused = 1;

struct attn_job {
    float *out;
    const float *q, *k, *v;
    int64_t o_rs, q_rs, k_rs, v_rs;
    int64_t tq, tk, d, dv, nqb;
    int heads, causal, bq, bk, ldS; /* ldS: score row stride, bk rounded up to 16 */
    float scale;
    float **s_buf, **acc_buf, **ml_buf; /* per thread scratch */
};

static void attn_tile(struct attn_job *j, int h, int64_t i0, int tid)
{
    int64_t bq = j->tq - i0 < j->bq ? j->tq - i0 : j->bq;
    float *S = j->s_buf[tid], *acc = j->acc_buf[tid];
    float *m = j->ml_buf[tid], *l = m + j->bq;
    const float *q = j->q + i0 * j->q_rs + h * j->d;
    const float *k = j->k + h * j->d;
    const float *v = j->v + h * j->dv;
    int64_t kend = j->causal ? (i0 + bq < j->tk ? i0 + bq : j->tk) : j->tk;

    for (int64_t r = 0; r < bq; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    memset(acc, 0, (size_t)(bq * j->dv) * sizeof(float));

    for (int64_t j0 = 0; j0 < kend; j0 += j->bk) {
        int64_t bk = kend - j0 < j->bk ? kend - j0 : j->bk;
        int64_t ldS = j->ldS, padded = j->causal ? bk : (bk + 15) & ~(int64_t)15;
        cpu_sgemm(0, 1, bq, bk, j->d, j->scale, q, j->q_rs, k + j0 * j->k_rs, j->k_rs, 0.0f, S,
                  ldS, 1);
        for (int64_t r = 0; r < bq; r++) {
            float *s = S + r * ldS;
            /* causal: query i0 + r sees keys <= i0 + r, i.e. the first nv of this block */
            int64_t nv = padded;
            for (int64_t c = bk; c < padded; c++)
                s[c] = -INFINITY;
            if (j->causal) {
                nv = i0 + r - j0 + 1;
                nv = nv < 0 ? 0 : nv > bk ? bk : nv;
            }
            if (nv == 0) {
                memset(s, 0, (size_t)bk * sizeof(float));
                continue;
            }
            float bm = cpu_vec_max(s, nv);
            float mn = bm > m[r] ? bm : m[r];
            /* first block of the row: acc is still zero, nothing to rescale */
            float corr = m[r] == -INFINITY ? 1.0f : expf(m[r] - mn);
            float sum = cpu_vec_exp_sum(s, s, nv, mn);
            if (nv < bk)
                memset(s + nv, 0, (size_t)(bk - nv) * sizeof(float));
            l[r] = l[r] * corr + sum;
            m[r] = mn;
            if (corr != 1.0f)
                cpu_vec_scale(acc + r * j->dv, acc + r * j->dv, corr, j->dv);
        }
        cpu_sgemm(0, 0, bq, j->dv, bk, 1.0f, S, ldS, v + j0 * j->v_rs, j->v_rs, 1.0f, acc, j->dv,
                  1);
    }
    float *o = j->out + i0 * j->o_rs + h * j->dv;
    for (int64_t r = 0; r < bq; r++)
        cpu_vec_scale(o + r * j->o_rs, acc + r * j->dv, l[r] > 0 ? 1.0f / l[r] : 0.0f, j->dv);
}

static void attn_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct attn_job *j = ctx;
    for (int64_t t = b; t < e; t++) {
        int h = (int)(t / j->nqb);
        int64_t qb = t % j->nqb;
        attn_tile(j, h, qb * j->bq, tid);
    }
}

void cpu_attention(float *out, int64_t o_rs, const float *q, int64_t q_rs, const float *k,
                   int64_t k_rs, const float *v, int64_t v_rs, int64_t tq, int64_t tk,
                   int heads, int64_t d, int64_t dv, float scale, int causal)
{
    /* a bf16 model's attention runs bf16 too: on AMX tiles, else on AVX-512 BF16 */
    if (cpu_attn_fused && !causal && tensor_precision_get() == TENSOR_PRECISION_BF16 &&
        (cpu_attention_amx(out, o_rs, q, q_rs, k, k_rs, v, v_rs, tq, tk, heads, d, dv, scale) ==
             0 ||
         cpu_attention_avx512bf16(out, o_rs, q, q_rs, k, k_rs, v, v_rs, tq, tk, heads, d, dv,
                                  scale) == 0))
        return;
    if (cpu_attn_fused == 1 && cpu_attention_avx512_usable()) {
        cpu_attention_avx512(out, o_rs, q, q_rs, k, k_rs, v, v_rs, tq, tk, heads, d, dv, scale,
                             causal);
        return;
    }
    if (cpu_attn_fused && cpu_attention_avx2_usable()) {
        cpu_attention_avx2(out, o_rs, q, q_rs, k, k_rs, v, v_rs, tq, tk, heads, d, dv, scale,
                           causal);
        return;
    }
    int nt = tensor__pool_threads();
    int bq = cpu_attn_bq, bk = cpu_attn_bk;
    if (bk > tk) {
        /* Few keys (cross-attention: 77): grow the query tile instead, so that each
         * sgemm call still has a worthwhile amount of work, while keeping at least two
         * tiles per thread. */
        int64_t grow = (int64_t)bq * bk / tk, cap = (tq * heads) / (2 * nt) / heads;
        if (grow > cap)
            grow = cap;
        if (grow > bq)
            bq = (int)(grow > 4096 ? 4096 : grow);
        bk = (int)tk;
    }
    struct attn_job j = {out, q, k, v, o_rs, q_rs, k_rs, v_rs, tq, tk, d, dv,
                         (tq + bq - 1) / bq, heads, causal, bq, bk, (bk + 15) & ~15, scale,
                         NULL, NULL, NULL};
    j.s_buf = xcalloc((size_t)nt, sizeof(float *));
    j.acc_buf = xcalloc((size_t)nt, sizeof(float *));
    j.ml_buf = xcalloc((size_t)nt, sizeof(float *));
    for (int i = 0; i < nt; i++) {
        j.s_buf[i] = xmalloc_aligned(64, (size_t)bq * (size_t)j.ldS * sizeof(float));
        j.acc_buf[i] = xmalloc_aligned(64, (size_t)bq * (size_t)dv * sizeof(float));
        j.ml_buf[i] = xmalloc_aligned(64, 2 * (size_t)bq * sizeof(float));
    }
    cpu_gemm_pool_enter();
    tensor__pool_for((int64_t)heads * j.nqb, attn_task, &j);
    cpu_gemm_pool_leave();
    for (int i = 0; i < nt; i++) {
        xfree_aligned(j.s_buf[i]);
        xfree_aligned(j.acc_buf[i]);
        xfree_aligned(j.ml_buf[i]);
    }
    xfree(j.s_buf);
    xfree(j.acc_buf);
    xfree(j.ml_buf);
}
