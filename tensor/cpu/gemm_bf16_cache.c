/*
 * gemm_bf16_cache.c — bf16 copies of weights, made per op or kept across ops, and the
 * registry that binds an op's f32 weight pointer to its copy for the op's duration
 * (gemm_bf16.h).
 *
 * Per op by default (LATENTD_BF16_CACHE_MB=0): each op rounds its weight into the
 * calling thread's reused scratch (cpu_bf16_from_f16: one pass at memory speed, f16 read
 * and bf16 written), so bf16 holds no second copy of the model. The kept copies it
 * replaced doubled the weights' memory (peak RSS 4308 vs 2439 MiB for a 256^2 SD1.5
 * txt2img) and their first fill (1.7 GB of fresh pages) cost more CPU than four steps
 * saved. The per-op pass is still cheaper than the fp32 path's own per-op widening
 * (f16 -> f32 writes twice the bytes, and the GEMM reads them back).
 *
 * Kept (LATENTD_BF16_CACHE_MB > 0, up to that many MiB): a weight is rounded once and
 * its copy reused, for machines with memory to spare.
 *
 * Keyed by the weight's address, dtype and element count, plus a fingerprint of 32
 * sampled elements re-checked on every hit: host weights are borrowed from the file
 * mapping and never written (patcher.h), but device copies on the cpu device are
 * rewritten in place when a different LoRA/merge patch set is baked, and a freed
 * model's addresses can be reused. The patcher invalidates those ranges explicitly
 * (tensor_bf16_cache_invalidate); the fingerprint is a second guard, not the
 * mechanism.
 *
 * Bounded: LATENTD_BF16_CACHE_MB (default 0: nothing kept; 2048 holds an SD1.5 UNet +
 * VAE). Past the bound a weight is rounded per op as above; the cache is not counted by
 * the planner (tensor_bf16_cache_bytes reports it).
 *
 * Threads: one lock over entries and bindings (a leaf); an entry bound by an op is
 * reference-counted so that an invalidation from another thread frees it only after.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "alloc.h"
#include "adapt.h"
#include "gemm_amx.h"
#include "gemm_bf16.h"
#include "../tensor_precision.h"

#define CACHE_DEFAULT_MB 0
#define BIND_MAX 32          /* ops in flight x weights per op; past it: fp32 */
#define FP_SAMPLES 32
#define CONV_PIECE ((int64_t)1 << 15)
#define HUGE_BYTES ((size_t)2 << 20)

/*
 * A copy's memory: 2 MiB-aligned and marked for transparent huge pages when it is at
 * least that big. Filling 1.7 GB of fresh 4 KiB pages is ~440 000 page faults, and on
 * this project's VMs the faults were the whole cost of a cold bf16 run's conversion
 * (perf: the stores of the rounding loop at 18 % of a 256^2 txt2img, plus the kernel's
 * fault path); huge pages take 512 times fewer.
 */
static uint16_t *copy_alloc(size_t bytes)
{
    size_t sz = (bytes + HUGE_BYTES - 1) / HUGE_BYTES * HUGE_BYTES;
    if (bytes < HUGE_BYTES || sz - bytes > bytes / 8) /* a huge page's tail is resident too */
        return xmalloc_aligned(64, bytes + 64);
    uint16_t *p = xmalloc_aligned(HUGE_BYTES, sz);
    (void)madvise(p, sz, MADV_HUGEPAGE); /* advice: EINVAL without THP is fine */
    return p;
}

struct entry {
    const char *src;         /* borrowed: the weight's memory */
    size_t src_bytes;
    enum tensor_dtype dt;
    int64_t n;
    uint64_t fp;             /* fingerprint of the source when converted */
    uint16_t *data;          /* owned (xmalloc_aligned), n elements */
    int refs;                /* bindings using it */
    int cached;              /* 1: on the list and counted; 0: a temporary or invalidated */
    int slot;                /* >= 0: data is the binding thread's scratch `slot` (a temporary) */
    int filled;              /* 0: data not written yet (cpu_bf16_fill writes it on demand) */
    struct entry *next;
};

#define PACKED_MAX 4 /* AMX-packed A operands per binding (conv: the weight, row blocks) */

struct packed {
    const uint16_t *a16; /* the key: where in the copy, and the shape */
    int64_t m, k, lda;
    uint16_t *p; /* owned: cpu_amx_pack's layout */
    size_t cap;  /* p's elements */
};

/*
 * Packings outlive their op in two spare buffers (lock held), so the next op's costs no
 * allocation: fresh memory for each op's was 85 000 page faults per 512^2 step.
 */
static struct spare {
    uint16_t *p;
    size_t cap;
} spares[2];

static uint16_t *spare_take(size_t elems, size_t *cap)
{
    for (int i = 0; i < 2; i++)
        if (spares[i].p && spares[i].cap >= elems) {
            uint16_t *p = spares[i].p;
            *cap = spares[i].cap;
            spares[i] = (struct spare){0};
            return p;
        }
    *cap = elems;
    return xmalloc_aligned(64, elems * 2);
}

static void spare_put(uint16_t *p, size_t cap)
{
    if (!p)
        return;
    int at = spares[0].cap <= spares[1].cap ? 0 : 1; /* the smaller (or empty) one goes */
    if (spares[at].cap >= cap) {
        xfree_aligned(p);
        return;
    }
    xfree_aligned(spares[at].p);
    spares[at] = (struct spare){p, cap};
}

struct binding {
    const float *p32;        /* borrowed: the op's f32 image of the weight */
    int64_t n;
    struct entry *e;
    struct packed pk[PACKED_MAX];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct entry *head;
static size_t held;          /* bytes of cached entries */
static size_t cap;           /* bytes; 0 = not read yet */
static struct binding binds[BIND_MAX];
atomic_int cpu_bf16_nbound;

static size_t cache_cap(void)
{
    if (!cap) {
        const char *s = getenv("LATENTD_BF16_CACHE_MB");
        long mb = s && *s ? strtol(s, NULL, 10) : CACHE_DEFAULT_MB;
        cap = mb > 0 ? (size_t)mb << 20 : 1; /* 0 MiB: cache nothing */
    }
    return cap;
}

static uint64_t fingerprint(const char *p, size_t es, int64_t n)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)n;
    for (int i = 0; i < FP_SAMPLES; i++) {
        int64_t at = n > 1 ? (int64_t)((double)i * (double)(n - 1) / (FP_SAMPLES - 1)) : 0;
        uint32_t v = 0;
        memcpy(&v, p + (size_t)at * es, es);
        h = (h ^ v) * 1099511628211ull;
    }
    return h;
}

/*
 * Per-op copies go into the binding thread's scratch (two slots: a matmul binds both
 * operands), grown to the largest weight rounded and kept mapped, so a per-op copy
 * costs no allocation and no page faults. A temporary is unbound on the thread that
 * bound it (cpu_widen_done; never on the list, so no other thread frees it).
 */
#define TMP_SLOTS 2

static _Thread_local struct tmp16 {
    uint16_t *p;  /* owned */
    size_t cap;   /* elements */
    int busy;
} tmp16[TMP_SLOTS];
/* A free scratch slot of at least n elements (-1: none free; then the heap). */
static int tmp_take(int64_t n)
{
    for (int i = 0; i < TMP_SLOTS; i++) {
        struct tmp16 *t = &tmp16[i];
        if (t->busy)
            continue;
        if ((size_t)n > t->cap) {
            cpu_scratch_free_at_exit();
            xfree_aligned(t->p);
            t->p = copy_alloc((size_t)n * 2);
            t->cap = (size_t)n;
        }
        t->busy = 1;
        return i;
    }
    return -1;
}

size_t cpu_bf16_tmp_release(void)
{
    size_t n = 0;
    for (int i = 0; i < TMP_SLOTS; i++)
        if (!tmp16[i].busy && tmp16[i].p) {
            n += tmp16[i].cap * 2;
            xfree_aligned(tmp16[i].p);
            tmp16[i].p = NULL;
            tmp16[i].cap = 0;
        }
    return n;
}

static void entry_free(struct entry *e)
{
    if (e->slot >= 0)
        tmp16[e->slot].busy = 0;
    else
        xfree_aligned(e->data);
    xfree(e);
}

/* Unlink a cached entry (lock held); freed now or by its last unbind. */
static void entry_drop(struct entry **link)
{
    struct entry *e = *link;
    *link = e->next;
    held -= (size_t)e->n * 2;
    e->cached = 0;
    if (!e->refs)
        entry_free(e);
}

struct conv_job {
    uint16_t *dst;
    const char *src;
    enum tensor_dtype dt;
    int64_t n;
};

static void conv_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    struct conv_job *j = ctx;
    for (int64_t i = b; i < e; i++) {
        int64_t lo = i * CONV_PIECE, hi = lo + CONV_PIECE < j->n ? lo + CONV_PIECE : j->n;
        if (j->dt == TENSOR_BF16) {
            memcpy(j->dst + lo, j->src + (size_t)lo * 2, (size_t)(hi - lo) * 2);
            continue;
        }
        if (j->dt == TENSOR_F32)
            cpu_bf16_round(j->dst + lo, (const float *)j->src + lo, hi - lo);
        else /* f16 -> bf16 can round: 10 vs 7 mantissa bits */
            cpu_bf16_from_f16(j->dst + lo, (const uint16_t *)j->src + lo, hi - lo);
    }
}

/* A row-major m x k matrix at dtype dt packed for AMX, one 32-row block per piece. */
struct pack_job {
    uint16_t *dst;
    const char *a;
    enum tensor_dtype dt;
    int64_t m, k;
};

static void pack_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    struct pack_job *j = ctx;
    size_t blk = cpu_amx_packed_elems(32, j->k), es = tensor_dtype_size(j->dt);
    for (int64_t i = b; i < e; i++) {
        int64_t r0 = i * 32, r = j->m - r0 < 32 ? j->m - r0 : 32;
        cpu_amx_pack_a_rows(j->dst + (size_t)i * blk, j->dt, j->a + (size_t)(r0 * j->k) * es, j->k,
                            r, j->k);
    }
}

/* e's copy, written now if it was left for later (lock held; the caller's thread alone:
 * the paths that need it are the rare ones, cpu_bf16_bind says which). */
static void fill_locked(struct entry *e)
{
    if (e->filled)
        return;
    struct conv_job j = {e->data, e->src, e->dt, e->n};
    conv_task(&j, 0, (e->n + CONV_PIECE - 1) / CONV_PIECE, 0);
    e->filled = 1;
}

void cpu_bf16_bind(const struct tensor *t, const float *p32)
{
    if (!t || !p32 || !tensor_is_contiguous(t))
        return;
    if (t->dtype != TENSOR_F32 && t->dtype != TENSOR_F16 && t->dtype != TENSOR_BF16)
        return;
    int64_t n = tensor_numel(t);
    const char *src = tensor__ptr(t);
    size_t es = tensor_dtype_size(t->dtype);
    uint64_t fp = fingerprint(src, es, n);
    struct entry *hit = NULL;
    pthread_mutex_lock(&mu);
    for (struct entry **l = &head; *l;) {
        struct entry *e = *l;
        if (e->src == src && e->dt == t->dtype && e->n == n) {
            if (e->fp == fp) {
                hit = e;
                break;
            }
            entry_drop(l); /* the memory changed under us: stale */
            continue;
        }
        l = &e->next;
    }
    if (hit)
        hit->refs++;
    pthread_mutex_unlock(&mu);
    /* A conv weight [co, ci, kh, kw] is the A of every GEMM of its op (co x ci*kh*kw):
     * on AMX it is packed for them here, on every pool thread, instead of by the first
     * GEMM under the lock while the other threads wait (the 1280-channel convs at 8^2
     * and 16^2 ran at 250-800 GFLOP/s so), and packed from the weight as stored: the
     * per-op copy is then written only if a GEMM asks for it unpacked (cpu_bf16_fill),
     * which saves a pass of writes and one of reads over the weight (29 MB at 1280
     * channels) per op. */
    int pack = t->ndim == 4 && t->shape[0] >= 32 && cpu_bf16_amx();
    if (!hit) {
        hit = xcalloc(1, sizeof(*hit));
        *hit = (struct entry){src, (size_t)n * es, t->dtype, n, fp, NULL, 1, 0, -1, 1, NULL};
        pthread_mutex_lock(&mu);
        int keep = held + (size_t)n * 2 <= cache_cap();
        if (keep) /* counted now, so a concurrent miss sees the room taken */
            held += (size_t)n * 2;
        pthread_mutex_unlock(&mu);
        if (!keep)
            hit->slot = tmp_take(n);
        hit->data = hit->slot >= 0 ? tmp16[hit->slot].p : copy_alloc((size_t)n * 2);
        hit->filled = keep || !pack;
        struct conv_job j = {hit->data, src, t->dtype, n};
        if (hit->filled)
            tensor__pool_for((n + CONV_PIECE - 1) / CONV_PIECE, conv_task, &j);
        if (keep) {
            pthread_mutex_lock(&mu);
            hit->cached = 1;
            hit->next = head;
            head = hit;
            pthread_mutex_unlock(&mu);
        }
    }
    struct packed pk0 = {0};
    if (pack) {
        int64_t m = t->shape[0], k = n / m;
        size_t got;
        uint16_t *p = NULL;
        pthread_mutex_lock(&mu);
        p = spare_take(cpu_amx_packed_elems(m, k), &got);
        pthread_mutex_unlock(&mu);
        struct pack_job pj = {p, hit->filled ? (const char *)hit->data : src,
                              hit->filled ? TENSOR_BF16 : t->dtype, m, k};
        tensor__pool_for((m + 31) / 32, pack_task, &pj);
        pk0 = (struct packed){hit->data, m, k, k, p, got};
    }
    pthread_mutex_lock(&mu);
    for (int i = 0; i < BIND_MAX; i++)
        if (!binds[i].p32) {
            binds[i] = (struct binding){p32, n, hit, {pk0}};
            pk0.p = NULL;
            atomic_fetch_add(&cpu_bf16_nbound, 1);
            hit = NULL;
            break;
        }
    if (hit && --hit->refs == 0 && !hit->cached) /* no free slot: this op stays fp32 */
        entry_free(hit);
    spare_put(pk0.p, pk0.cap);
    pthread_mutex_unlock(&mu);
}

void cpu_bf16_unbind(const float *p32)
{
    if (!p32 || atomic_load(&cpu_bf16_nbound) == 0)
        return;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < BIND_MAX; i++)
        if (binds[i].p32 == p32) {
            struct entry *e = binds[i].e;
            for (int q = 0; q < PACKED_MAX; q++)
                spare_put(binds[i].pk[q].p, binds[i].pk[q].cap);
            binds[i] = (struct binding){0};
            atomic_fetch_sub(&cpu_bf16_nbound, 1);
            if (--e->refs == 0 && !e->cached)
                entry_free(e);
            break;
        }
    pthread_mutex_unlock(&mu);
}

const uint16_t *cpu_bf16_shadow_of(const float *p)
{
    const uint16_t *r = NULL;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < BIND_MAX; i++)
        if (binds[i].p32 && p >= binds[i].p32 && p < binds[i].p32 + binds[i].n) {
            r = binds[i].e->data + (p - binds[i].p32);
            break;
        }
    pthread_mutex_unlock(&mu);
    return r;
}

void cpu_bf16_fill(const uint16_t *p16)
{
    pthread_mutex_lock(&mu);
    for (int i = 0; i < BIND_MAX; i++)
        if (binds[i].p32 && p16 >= binds[i].e->data && p16 < binds[i].e->data + binds[i].n) {
            fill_locked(binds[i].e);
            break;
        }
    pthread_mutex_unlock(&mu);
}

/*
 * The GEMMs of one op (a conv's chunks on every pool thread) use its weight as the same
 * A again and again; AMX wants A packed into tiles, so it is packed once per binding
 * here (by the first GEMM to ask, under the lock: the others would wait for it anyway)
 * instead of once per GEMM (a 512^2 bf16 UNet step spent 14 % of its time repacking).
 */
const uint16_t *cpu_bf16_packed_a(const uint16_t *a16, int64_t m, int64_t k, int64_t lda)
{
    const uint16_t *r = NULL;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < BIND_MAX && !r; i++) {
        struct binding *b = &binds[i];
        if (!b->p32 || a16 < b->e->data || a16 >= b->e->data + b->n)
            continue;
        struct packed *free_pk = NULL;
        for (int q = 0; q < PACKED_MAX && !r; q++) {
            struct packed *pk = &b->pk[q];
            /* elements from the packed matrix's start: a16 may be its rows r0.. */
            intptr_t off = ((intptr_t)a16 - (intptr_t)pk->a16) / 2;
            int64_t r0 = lda > 0 ? (int64_t)off / lda : -1;
            if (pk->p && pk->k == k && pk->lda == lda && off >= 0 && off % lda == 0 &&
                r0 % 32 == 0 && r0 + m <= pk->m) /* whole 32-row blocks */
                r = pk->p + (size_t)(r0 / 32) * cpu_amx_packed_elems(32, k);
            else if (!pk->p && !free_pk)
                free_pk = pk;
        }
        if (!r && free_pk) {
            fill_locked(b->e);
            size_t got;
            uint16_t *p = spare_take(cpu_amx_packed_elems(m, k), &got);
            cpu_amx_pack(p, a16, lda, m, k);
            *free_pk = (struct packed){a16, m, k, lda, p, got};
            r = p;
        }
        break;
    }
    pthread_mutex_unlock(&mu);
    return r;
}

void tensor_bf16_cache_invalidate(const void *p, size_t bytes)
{
    /* as integers: (NULL, SIZE_MAX) means every range, and pointer arithmetic on
     * NULL or past the address space is undefined (UBSan stops the test on it) */
    uintptr_t lo = (uintptr_t)p, hi = bytes > UINTPTR_MAX - lo ? UINTPTR_MAX : lo + bytes;
    pthread_mutex_lock(&mu);
    for (struct entry **l = &head; *l;) {
        struct entry *e = *l;
        uintptr_t s = (uintptr_t)e->src;
        if (s < hi && lo < s + e->src_bytes)
            entry_drop(l);
        else
            l = &e->next;
    }
    pthread_mutex_unlock(&mu);
}

size_t tensor_bf16_cache_bytes(void)
{
    pthread_mutex_lock(&mu);
    size_t n = held;
    pthread_mutex_unlock(&mu);
    return n;
}

void cpu_bf16_cache_clear(void)
{
    pthread_mutex_lock(&mu);
    while (head)
        entry_drop(&head);
    for (int i = 0; i < 2; i++) {
        xfree_aligned(spares[i].p);
        spares[i] = (struct spare){0};
    }
    pthread_mutex_unlock(&mu);
}
