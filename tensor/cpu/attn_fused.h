/*
 * attn_fused.h — what the fused attention kernels (attn_avx512.c, attn_avx2.c) share:
 * the subtile state, the arguments of one key-block step, and the driver that splits
 * the work into (head, query block) tasks and walks each block's keys (attn_fused.c).
 * A kernel brings only its ISA's parts: the step over one key block and the packing of
 * Q into / unpacking of O out of its query-lane layout. Private to tensor/cpu/.
 */
#ifndef LATENTD_TENSOR_CPU_ATTN_FUSED_H
#define LATENTD_TENSOR_CPU_ATTN_FUSED_H

#include <stdint.h>

#define FA_QSUB_MAX 8 /* subtiles per task, at most */

/* One subtile's state in the thread's scratch (qt queries in the lanes). */
struct fa_sub {
    float *qt; /* [d][qt], scaled by scale * log2(e), lanes past the real queries zero */
    float *ot; /* [dv][qt] */
    float *m;  /* [qt] running max (log2 domain) */
    float *l;  /* [qt] running sum */
};

struct fa_args {
    const float *k, *v;  /* this head's slice of key 0 / value 0 */
    const void *kp, *vp; /* this head's packed K / V (struct fa_packed), else NULL */
    int64_t k_rs, v_rs, d, dv;
    int mask;
    int64_t qi0, jj; /* first query of the subtile, first key of the block */
};

struct fa_kernel {
    int qt;     /* queries per subtile */
    int qsub;   /* subtiles per task (<= FA_QSUB_MAX): they share each key/value block */
    int lanes;  /* floats per vector: a subtile of n queries takes (n + lanes - 1) / lanes */
    int bk_min; /* keys per block, at least (the kernel's widest key tile) */
    /* one key block (nk keys) for one subtile of nv vectors */
    void (*step)(int nv, const struct fa_args *a, struct fa_sub *s, float *st, int64_t nk);
    /* qt [d][qt] = q's n rows (q_rs apart) x scale2, lanes n.. zero */
    void (*load_q)(float *qt, const float *q, int64_t q_rs, int64_t n, int64_t d, float scale2);
    /* out's n rows (o_rs apart) [c] = ot[c][i] / l[i] (0 where l[i] is 0) */
    void (*store_o)(float *out, int64_t o_rs, const float *ot, const float *l, int64_t n,
                    int64_t dv);
};

/* store_o of the AVX-512 kernels (attn_avx512.c, attn_avx512bf16.c), whose O^T is the
 * same f32 [dv][48] (attn_avx512.c). */
void cpu_fattn_store_o48(float *out, int64_t o_rs, const float *ot, const float *l, int64_t n,
                         int64_t dv);

/* K and V in a kernel's own layout, packed once per call for every head (the bf16
 * kernel's): head h's slices start at k + h * k_hs and v + h * v_hs bytes. */
struct fa_packed {
    const char *k, *v;
    int64_t k_hs, v_hs;
};

/* cpu_attention's contract (tensor_impl.h) on kernel kn; cpu_fattn_bk keys per block
 * (rounded up to even); pk: the kernel's packed K and V, or NULL. */
void cpu_fattn_run(const struct fa_kernel *kn, const struct fa_packed *pk, float *out, int64_t o_rs,
                   const float *q, int64_t q_rs, const float *k, int64_t k_rs, const float *v,
                   int64_t v_rs, int64_t tq, int64_t tk, int heads, int64_t d, int64_t dv,
                   float scale, int causal);

#endif
