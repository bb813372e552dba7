/*
 * widen.c — f16/bf16 weights to f32 for the GEMM-based kernels, into a reused scratch.
 *
 * Since issue 15 an f16 checkpoint's weights stay f16 on the cpu device (borrowed from
 * the file mapping: half the resident memory of converting at load). The GEMM, the
 * fused linear+GEGLU and the convolutions consume f32, so each op widens its weight
 * when it runs. Widening is exact (every f16 and bf16 value is an f32 value), and the
 * kernels then make the very same library calls on the very same f32 values as with
 * weights converted at load, so results are bit-identical to that.
 *
 * Why a scratch and not adapt.h's malloc per call: a conv weight of the UNet's deepest
 * level is 59 MB as f32; a fresh allocation each call is an mmap whose 15 000 pages
 * fault in again every time (the cost dev_blkcache.c removed for activations). The
 * scratch is grown to the largest weight an op has widened (the largest weight of the
 * models in use: bounded by one weight, not by the model) and its pages stay mapped.
 * The conversion is split over the pool so that it runs at memory speed.
 *
 * bf16 compute (tensor_precision.h): when the calling thread's precision is bf16, the
 * f32 image handed out is also bound to the weight's cached bf16 copy until
 * cpu_widen_done, which is how cpu_sgemm finds it (gemm_bf16.h). For convolutions the
 * f32 image is still made (conv.c may read it directly). For an op whose weight only
 * ever reaches cpu_sgemm (linear, linear+GEGLU: cpu_widen_in_gemm) there is no f32
 * image at all: the pointer handed out is a reserved, inaccessible address range
 * (PROT_NONE, no memory behind it) bound to the bf16 copy, so an f16 checkpoint's
 * weights are not widened at every step only to be rounded again; a stray read would
 * fault, never read garbage.
 *
 * cpu_widen_in_t hands out the transpose W^T instead (gemm_wt.c; linear.c's no-trans
 * GEMMs), for f32 weights too, in the same scratch.
 *
 * Threads: one scratch per calling thread (thread-local, freed when the thread exits);
 * ops run on the executor thread, tests may run ops on several threads at once. Not
 * for pool tasks.
 */
#include <pthread.h>
#include <sys/mman.h>

#include "adapt.h"
#include "gemm_bf16.h"
#include "linear.h"
#include "../tensor_precision.h"

#define WIDEN_MIN_ELEMS ((int64_t)1 << 16) /* below: adapt.h's malloc is cheap enough */
#define WIDEN_PIECE ((int64_t)1 << 15)     /* elements per pool piece (64-128 KiB read) */

struct widen_scratch {
    struct cpu_scratch b; /* owned */
    int busy;             /* 1 while an op holds it */
};

static _Thread_local struct widen_scratch scratch;

/*
 * A thread that took any of the CPU scratch buffers (this file's, the bf16
 * temporaries of gemm_bf16_cache.c, Winograd's) frees them when it exits: an executor
 * thread ends with the server, and tests (and LeakSanitizer) count what is left.
 * One key for all three, so no buffer owner can forget its own.
 */
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static void scratch_at_exit(void *p)
{
    (void)p;
    tensor_cpu_scratch_release();
}

static void exit_key_init(void)
{
    if (pthread_key_create(&exit_key, scratch_at_exit) != 0)
        PANIC("pthread_key_create failed");
}

void cpu_scratch_free_at_exit(void)
{
    pthread_once(&exit_once, exit_key_init);
    if (!pthread_getspecific(exit_key))
        pthread_setspecific(exit_key, &exit_key); /* any non-NULL value arms it */
}

static void scratch_free(struct cpu_scratch *s)
{
    if (s->map)
        xunmap(s->p, s->map);
    else
        xfree_aligned(s->p);
    s->p = NULL;
    s->cap = 0;
    s->map = 0;
}

float *cpu_scratch_grow(struct cpu_scratch *s, size_t floats)
{
    if (floats > s->cap) {
        cpu_scratch_free_at_exit();
        size_t bytes = floats * sizeof(float) + 64, n = s->map;
        void *p = s->map ? s->p : NULL;
        struct err e = {0};
        /* a mapping grows with its pages moved, not faulted in again (xmap_grow) */
        if (bytes >= ALLOC_HUGE && xmap_grow(&p, &n, bytes, &e) == 0) {
            if (!s->map)
                scratch_free(s); /* a heap block, or none */
            s->map = bytes;
        } else { /* small, or no mapping to be had: the heap (which aborts when it fails) */
            scratch_free(s);
            p = xmalloc_aligned(64, bytes);
        }
        s->p = p;
        s->cap = floats;
    }
    return s->p;
}

size_t cpu_scratch_drop(struct cpu_scratch *s)
{
    size_t n = s->cap * sizeof(float);
    scratch_free(s);
    return n;
}

struct widen_job {
    float *dst;
    const char *src;
    enum tensor_dtype dt;
    int64_t n;
};

static void widen_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    struct widen_job *j = ctx;
    size_t es = tensor_dtype_size(j->dt);
    for (int64_t i = b; i < e; i++) {
        int64_t lo = i * WIDEN_PIECE, len = j->n - lo < WIDEN_PIECE ? j->n - lo : WIDEN_PIECE;
        tensor_convert_host(j->dst + lo, TENSOR_F32, j->src + (size_t)lo * es, j->dt,
                            (size_t)len);
    }
}

static const float *widen(const struct tensor *t, struct hbuf *h)
{
    int64_t n = t ? tensor_numel(t) : 0;
    if (!t || is_f32_contig(t) || !tensor_is_contiguous(t) ||
        (t->dtype != TENSOR_F16 && t->dtype != TENSOR_BF16) || n < WIDEN_MIN_ELEMS ||
        scratch.busy)
        return hin(t, h);
    struct widen_job j = {cpu_scratch_grow(&scratch.b, (size_t)n), tensor__ptr(t), t->dtype, n};
    tensor__pool_for((n + WIDEN_PIECE - 1) / WIDEN_PIECE, widen_task, &j);
    scratch.busy = 1;
    h->p = scratch.b.p;
    h->owned = HBUF_SCRATCH;
    return h->p;
}

const float *cpu_widen_in_f32(const struct tensor *t, struct hbuf *h) { return widen(t, h); }

/*
 * A 2-D weight W [n, k] as W^T [k, n] f32 (gemm_wt.c), for linear.c's no-trans GEMMs:
 * any dtype (an f32 weight is transposed too, so an f16 weight and its f32 widening take
 * the same GEMMs and give the same bits), into the same kept scratch, split over the
 * pool by blocks of 32 rows of W^T.
 */
struct wt_job {
    float *dst;
    const void *src;
    enum tensor_dtype dt;
    int64_t n, k, ld;
};

static void wt_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    struct wt_job *j = ctx;
    cpu_wt_rows(j->dst, j->ld, j->src, j->dt, j->n, j->k, b * 32, e * 32 < j->k ? e * 32 : j->k);
}

const float *cpu_widen_in_t(const struct tensor *t, struct hbuf *h)
{
    int64_t n = t->shape[0], k = t->shape[1], ld = cpu_wt_ld(n);
    size_t elems = (size_t)(ld * k);
    float *dst;
    if (scratch.busy || (int64_t)elems < WIDEN_MIN_ELEMS) { /* a buffer for this call */
        dst = xmalloc_aligned(64, elems * sizeof(float) + 64);
        h->owned = 1;
    } else {
        dst = cpu_scratch_grow(&scratch.b, elems);
        scratch.busy = 1;
        h->owned = HBUF_SCRATCH;
    }
    struct wt_job j = {dst, tensor__ptr(t), t->dtype, n, k, ld};
    tensor__pool_for((k + 31) / 32, wt_task, &j);
    h->p = dst;
    return dst;
}

const float *cpu_widen_in(const struct tensor *t, struct hbuf *h)
{
    const float *p = widen(t, h);
    if (p && tensor_precision_get() == TENSOR_PRECISION_BF16)
        cpu_bf16_bind(t, p);
    return p;
}

/* The calling thread's reserved range handed out by cpu_widen_in_gemm (one op at a
 * time holds one; a second gets the ordinary path). */
static _Thread_local struct {
    void *p;
    size_t bytes;
} ghost;

const float *cpu_widen_in_gemm(const struct tensor *t, struct hbuf *h)
{
    if (!t || tensor_precision_get() != TENSOR_PRECISION_BF16 || ghost.p ||
        !tensor_is_contiguous(t))
        return cpu_widen_in(t, h);
    size_t bytes = (size_t)tensor_numel(t) * sizeof(float);
    void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return cpu_widen_in(t, h);
    cpu_bf16_bind(t, p);
    if (!cpu_bf16_shadow_of(p)) { /* not bound (no free slot): the real image */
        munmap(p, bytes);
        return cpu_widen_in(t, h);
    }
    ghost.p = p;
    ghost.bytes = bytes;
    h->p = p;
    h->owned = 0;
    return p;
}

void cpu_widen_done(struct hbuf *h)
{
    cpu_bf16_unbind(h->p);
    if (h->p && h->p == ghost.p) {
        munmap(ghost.p, ghost.bytes);
        ghost.p = NULL;
        h->p = NULL;
        return;
    }
    if (h->owned == HBUF_SCRATCH) {
        scratch.busy = 0;
        h->p = NULL;
        h->owned = 0;
        return;
    }
    hfree(h);
}

size_t cpu_widen_scratch_bytes(void)
{
    return scratch.b.cap * sizeof(float);
}

size_t tensor_cpu_scratch_release(void)
{
    size_t n = scratch.busy ? 0 : cpu_widen_scratch_bytes();
    cpu_widen_release();
    /* and the bf16 per-op weight copies' scratch, Winograd's buffers, linear.c's tiles,
     * the bf16 attentions' K/V, the bf16 Linears' packings and
     * gemm.c's AMX row split's packed B */
    return n + cpu_bf16_tmp_release() + cpu_wino_release() + cpu_linear_release() +
           cpu_attn_amx_release() + cpu_attn_avx512bf16_release() + cpu_linear_amx_release() +
           cpu_linear_bf16v_release() + cpu_gemm_amx_rows_release();
}

void cpu_widen_release(void)
{
    if (!scratch.busy)
        cpu_scratch_drop(&scratch.b);
}
