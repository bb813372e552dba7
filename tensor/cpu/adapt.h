/*
 * adapt — turning tensors into the CPU kernels' contract, contiguous f32 host
 * buffers (private to tensor/cpu/).
 *
 * An operand that already is contiguous f32 is used in place, anything else (f16/bf16,
 * strided views) goes through a temporary f32 copy, and a result that cannot be
 * written in place is computed into a temporary and scattered back. Temporaries are
 * host memory (xmalloc): on the sim device they are not counted against its budget
 * (they are workspace, like cuBLAS's).
 *
 * Threads: as tensor.h.
 */
#ifndef LATENTD_TENSOR_CPU_ADAPT_H
#define LATENTD_TENSOR_CPU_ADAPT_H

#include "alloc.h"
#include "../tensor_impl.h"

static inline int is_f32_contig(const struct tensor *t)
{
    return t->dtype == TENSOR_F32 && tensor_is_contiguous(t);
}

struct hbuf {
    float *p;
    int owned; /* 0 borrowed, 1 xmalloc_aligned, HBUF_SCRATCH widen.c's scratch */
};

#define HBUF_SCRATCH 2

/* A contiguous f32 copy of t (or t's own memory when it already is one). */
static inline const float *hin(const struct tensor *t, struct hbuf *h)
{
    if (!t) {
        h->p = NULL;
        h->owned = 0;
        return NULL;
    }
    if (is_f32_contig(t)) {
        h->p = (float *)tensor__ptr(t);
        h->owned = 0;
        return h->p;
    }
    h->p = xmalloc_aligned(64, (size_t)tensor_numel(t) * sizeof(float) + 64);
    h->owned = 1;
    tensor__gather_f32(h->p, t);
    return h->p;
}

/* Where to write t's f32 result; hout_done stores it back. */
static inline float *hout(struct tensor *t, struct hbuf *h)
{
    if (is_f32_contig(t)) {
        h->p = (float *)tensor__ptr(t);
        h->owned = 0;
    } else {
        h->p = xmalloc_aligned(64, (size_t)tensor_numel(t) * sizeof(float) + 64);
        h->owned = 1; /* every op writes every element, so no need to load t first */
    }
    return h->p;
}

static inline void hfree(struct hbuf *h)
{
    if (h->owned)
        xfree_aligned(h->p);
    h->p = NULL;
    h->owned = 0;
}

static inline void hout_done(struct tensor *t, struct hbuf *h)
{
    if (h->owned)
        tensor__scatter_f32(t, h->p);
    hfree(h);
}

/*
 * widen.c: a weight operand as contiguous f32. An f16/bf16 weight (kept at its file
 * dtype, issue 15) is widened into the calling thread's reused scratch, split over the
 * pool; anything else is hin(). At most one operand holds the scratch at a time (a
 * second gets hin's temporary). Give it back with cpu_widen_done, not hfree.
 */
const float *cpu_widen_in(const struct tensor *t, struct hbuf *h);
/* The f32 image only, never bound to a bf16 copy whatever the precision (for a kernel
 * that transforms the weight itself: winograd.c). Give it back with cpu_widen_done. */
const float *cpu_widen_in_f32(const struct tensor *t, struct hbuf *h);
/* The same for a weight the op hands only to cpu_sgemm: in bf16 it may return an address
 * that must not be read (widen.c). */
const float *cpu_widen_in_gemm(const struct tensor *t, struct hbuf *h);
/* A 2-D contiguous weight W [n, k] of any dtype as W^T [k, n] f32, rows cpu_wt_ld(n)
 * floats apart (linear.c, fp32 only: never bound to a bf16 copy). Give it back with
 * cpu_widen_done. */
const float *cpu_widen_in_t(const struct tensor *t, struct hbuf *h);
/* W^T's leading dimension for n columns (gemm_wt.c says why it is not always n). */
int64_t cpu_wt_ld(int64_t n);
/* Rows [q0, q1) of wt [k, n] = w^T (leading dimension ld), w [n, k] of dtype dt, widened
 * (gemm_wt.c; any thread, a pool task body). */
void cpu_wt_rows(float *wt, int64_t ld, const void *w, enum tensor_dtype dt, int64_t n,
                 int64_t k, int64_t q0, int64_t q1);
/* cpu_wt_rows' vector width: 16 (AVX-512), 8 (AVX2 + F16C), 0 (scalar); < 0 (the
 * default): chosen by the CPU on first use. Tests set it to compare the paths. */
extern int cpu_wt_vec;
void cpu_widen_done(struct hbuf *h);
/* The calling thread's scratch: its size in bytes, and freeing it (a no-op while an
 * op holds it). tensor_cpu_scratch_release (tensor.h) is the public door. */
size_t cpu_widen_scratch_bytes(void);
void cpu_widen_release(void);
/* Arm the calling thread's exit to free all its CPU scratch (widen.c, the bf16
 * temporaries, Winograd's buffers): call when a thread first allocates one. */
void cpu_scratch_free_at_exit(void);
/* A thread's kept float buffer (widen.c's weight scratch, linear.c's tiles; widen.c):
 * cpu_scratch_grow makes it hold at least `floats` (64-byte aligned, 64 bytes of slack
 * after them), dropping the old contents when it grows and arming the thread-exit free;
 * cpu_scratch_drop frees it and returns the bytes it held. From 2 MiB it is a mapping of
 * its own in transparent huge pages (util/alloc's xtry_map), as Winograd's buffers are:
 * these buffers are first touched in a cold process's first step. */
struct cpu_scratch {
    float *p;
    size_t cap; /* floats */
    size_t map; /* bytes given to xtry_map, or 0: p is from xmalloc_aligned */
};
float *cpu_scratch_grow(struct cpu_scratch *s, size_t floats);
size_t cpu_scratch_drop(struct cpu_scratch *s);

static inline int64_t cpu_rows_of(const struct tensor *t)
{
    return tensor_numel(t) / t->shape[t->ndim - 1];
}

#endif
