/*
 * op_attn.c — the CPU backend's attention: rows used in place when they are f32 and
 * evenly strided (views into a fused projection), else through f32 temporaries.
 */
#include "adapt.h"
#include "cpu_backend.h"

/* Usable as [B, T, C] rows directly: f32, features contiguous, rows evenly strided. */
static int attn_direct(const struct tensor *t)
{
    return t->dtype == TENSOR_F32 && t->ndim == 3 && t->stride[2] == 1 &&
           t->stride[1] >= t->shape[2];
}

int tensor__cpu_attention(struct tensor *out, const struct tensor *q, const struct tensor *k,
                          const struct tensor *v, int heads, float scale, unsigned flags,
                          struct err *e)
{
    int64_t bsz = q->shape[0], tq = q->shape[1], tk = k->shape[1];
    int64_t d = q->shape[2] / heads, dv = v->shape[2] / heads;
    double pt0 = tensor__prof_t0();
    struct hbuf hq, hk, hv, ho;
    const float *pq, *pk, *pv;
    int64_t qs[2], ks[2], vs[2], os[2]; /* batch stride, row stride */
#define ATTN_IN(T, P, H, S)                                                                 \
    do {                                                                                    \
        if (attn_direct(T)) {                                                               \
            P = (const float *)tensor__ptr(T);                                              \
            H.owned = 0;                                                                    \
            S[0] = T->stride[0];                                                            \
            S[1] = T->stride[1];                                                            \
        } else {                                                                            \
            P = hin(T, &H);                                                                 \
            S[0] = T->shape[1] * T->shape[2];                                               \
            S[1] = T->shape[2];                                                             \
        }                                                                                   \
    } while (0)
    ATTN_IN(q, pq, hq, qs);
    ATTN_IN(k, pk, hk, ks);
    ATTN_IN(v, pv, hv, vs);
#undef ATTN_IN
    float *po;
    if (attn_direct(out)) {
        po = (float *)tensor__ptr(out);
        ho.owned = 0;
        ho.p = po;
        os[0] = out->stride[0];
        os[1] = out->stride[1];
    } else {
        po = hout(out, &ho);
        os[0] = tq * out->shape[2];
        os[1] = out->shape[2];
    }
    for (int64_t b = 0; b < bsz; b++)
        cpu_attention(po + b * os[0], os[1], pq + b * qs[0], qs[1], pk + b * ks[0], ks[1],
                      pv + b * vs[0], vs[1], tq, tk, heads, d, dv, scale,
                      !!(flags & TENSOR_ATTN_CAUSAL));
    hfree(&hq);
    hfree(&hk);
    hfree(&hv);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_ATTN, pt0,
                     2.0 * (double)bsz * heads * (double)tq * (double)tk * (double)(d + dv));
    return 0;
}
