/*
 * attn_fused.c — the fused attention kernels' driver (attn_fused.h): tasks are (head,
 * block of kn->qsub subtiles of kn->qt queries); a task walks the keys in blocks of
 * cpu_fattn_bk and runs every subtile over a block before moving on, so a key/value
 * block is read from memory once per task and stays in L1/L2 meanwhile; the subtiles'
 * state lives in the thread's scratch. attn_avx512.c's header says why.
 *
 * Threads: the executor calls cpu_fattn_run; its tasks run on the pool, each with its
 * thread's scratch.
 */
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "attn_fused.h"
#include "../tensor_impl.h"

int cpu_fattn_bk = 128; /* keys per block (tunable; the benchmark sets it) */

struct fa_job {
    const struct fa_kernel *kn;
    const struct fa_packed *pk;
    float *out;
    const float *q, *k, *v;
    int64_t o_rs, q_rs, k_rs, v_rs;
    int64_t tq, tk, d, dv;
    int causal;
    float scale2;    /* scale * log2(e) */
    int64_t nqb, bk; /* query blocks per head, keys per block */
    void **ws;       /* per thread scratch */
};

static void fa_block(struct fa_job *j, int h, int64_t i0, float *ws)
{
    const struct fa_kernel *kn = j->kn;
    int64_t qt = kn->qt;
    int64_t nq = j->tq - i0 < kn->qsub * qt ? j->tq - i0 : kn->qsub * qt;
    int nsub = (int)((nq + qt - 1) / qt);
    struct fa_sub sub[FA_QSUB_MAX];
    float *st = ws;
    ws += j->bk * qt;
    for (int s = 0; s < nsub; s++) {
        sub[s].qt = ws;
        sub[s].ot = ws + j->d * qt;
        sub[s].m = sub[s].ot + j->dv * qt;
        sub[s].l = sub[s].m + qt;
        ws = sub[s].l + qt;
        int64_t q0 = i0 + s * qt, n = nq - s * qt < qt ? nq - s * qt : qt;
        kn->load_q(sub[s].qt, j->q + q0 * j->q_rs + h * j->d, j->q_rs, n, j->d, j->scale2);
        memset(sub[s].ot, 0, (size_t)(j->dv * qt) * sizeof(float));
        for (int64_t i = 0; i < qt; i++) {
            sub[s].m[i] = -INFINITY;
            sub[s].l[i] = 0.0f;
        }
    }
    struct fa_args a = {j->k + h * j->d,
                        j->v + h * j->dv,
                        j->pk ? j->pk->k + h * j->pk->k_hs : NULL,
                        j->pk ? j->pk->v + h * j->pk->v_hs : NULL,
                        j->k_rs,
                        j->v_rs,
                        j->d,
                        j->dv,
                        0,
                        0,
                        0};
    /* causal: query i sees keys <= i, so this block's queries see keys < i0 + nq */
    int64_t kend = j->causal && i0 + nq < j->tk ? i0 + nq : j->tk;
    for (int64_t j0 = 0; j0 < kend; j0 += j->bk) {
        int64_t nk = kend - j0 < j->bk ? kend - j0 : j->bk;
        for (int s = 0; s < nsub; s++) {
            int64_t q0 = i0 + s * qt, n = nq - s * qt < qt ? nq - s * qt : qt, nks = nk;
            if (j->causal) {
                nks = q0 + n - j0 < nk ? q0 + n - j0 : nk; /* keys past the last query */
                if (nks <= 0)
                    continue;
            }
            a.mask = j->causal;
            a.qi0 = q0;
            a.jj = j0;
            kn->step((int)((n + kn->lanes - 1) / kn->lanes), &a, &sub[s], st, nks);
        }
    }
    for (int s = 0; s < nsub; s++) {
        int64_t q0 = i0 + s * qt, n = nq - s * qt < qt ? nq - s * qt : qt;
        kn->store_o(j->out + q0 * j->o_rs + h * j->dv, j->o_rs, sub[s].ot, sub[s].l, n, j->dv);
    }
}

static void fa_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct fa_job *j = ctx;
    int64_t per = (int64_t)j->kn->qsub * j->kn->qt;
    for (int64_t t = b; t < e; t++)
        fa_block(j, (int)(t / j->nqb), t % j->nqb * per, j->ws[tid]);
}

void cpu_fattn_run(const struct fa_kernel *kn, const struct fa_packed *pk, float *out, int64_t o_rs,
                   const float *q, int64_t q_rs, const float *k, int64_t k_rs, const float *v,
                   int64_t v_rs, int64_t tq, int64_t tk, int heads, int64_t d, int64_t dv,
                   float scale, int causal)
{
    int64_t qt = kn->qt, per_task = (int64_t)kn->qsub * qt;
    /* even: a kernel on key pairs (bf16) then starts every block on a pair */
    int64_t bk = cpu_fattn_bk < kn->bk_min ? kn->bk_min : cpu_fattn_bk;
    bk = (bk + 1) & ~(int64_t)1;
    struct fa_job j = {kn,
                       pk,
                       out,
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
                       causal,
                       scale * 1.44269504088896341f,
                       (tq + per_task - 1) / per_task,
                       bk,
                       NULL};
    size_t per = (size_t)(bk * qt + kn->qsub * (d + dv + 2) * qt) * sizeof(float);
    j.ws = tensor__pool_scratch_new(per);
    tensor__pool_for((int64_t)heads * j.nqb, fa_task, &j);
    tensor__pool_scratch_free(j.ws);
}
