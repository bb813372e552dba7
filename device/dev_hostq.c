/*
 * dev_hostq.c — streams and events for the host-memory devices (cpu and sim).
 *
 * Compute on a host device runs on the calling thread, so the compute stream is
 * "inline": a copy queued on it runs at once, an event recorded on it completes at
 * once, and waiting on an event blocks the caller. A copy stream is a FIFO of ops
 * (copy, signal event, wait event). On sim each copy stream has its own thread
 * that drains its FIFO, so copies overlap with compute for real; on cpu copy
 * streams are inline too (nothing to overlap with, and no thread to own).
 *
 * One thread per copy stream, not one per device: a stream that waits on an event
 * recorded later on another stream would otherwise block the one thread that
 * could complete it.
 *
 * Events count records (rec) and completed signals (done); an event completes
 * when done >= rec, so an event never recorded counts as complete (as in CUDA).
 * One device-wide mutex and condition variable guard all of it; the condition is
 * broadcast on every completed op. Memcpy runs with the mutex released.
 */
#include "dev_backend.h"

#include <string.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "alloc.h"

struct dev__hostq {
    int threaded;
    atomic_uint copy_delay_us; /* dev_inject_copy_delay: sleep before each threaded copy */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* broadcast whenever an op completes or is queued */
};

enum hq_op_kind { HQ_COPY, HQ_SIGNAL, HQ_WAIT };

struct hq_event {
    uint64_t rec;  /* records so far */
    uint64_t done; /* highest record whose signal has run */
    int refs;      /* queued ops that point here; release waits for 0 */
};

struct hq_op {
    enum hq_op_kind kind;
    void *dst;
    const void *src;
    size_t n;
    struct hq_event *ev;
    uint64_t seq;
    struct hq_op *next;
};

struct hq_stream {
    struct dev__hostq *q; /* borrowed */
    int inline_;          /* runs ops at enqueue */
    pthread_t th;
    struct hq_op *head, *tail; /* owned FIFO */
    uint64_t enq, done;
    int stop;
};

struct dev__hostq *dev__hostq_new(int threaded)
{
    struct dev__hostq *q = xcalloc(1, sizeof(*q));
    q->threaded = threaded;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    return q;
}

void dev__hostq_free(struct dev__hostq *q)
{
    if (!q)
        return;
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    xfree(q);
}

static struct dev__hostq *hq_of(struct dev *d) { return d->impl; }

/*
 * The copy threads' memcpy. A GPU's copy engine costs the CPU nothing; ours shares
 * the memory bus and caches with compute, so large copies use non-temporal stores:
 * no read-for-ownership of the destination and no eviction of the compute thread's
 * cache lines (glibc switches to them only for copies larger than the LLC share,
 * and layers are smaller than that).
 */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void copy_nt_avx2(void *dst, const void *src, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    size_t head = (32 - ((uintptr_t)d & 31)) & 31;
    if (head > n)
        head = n;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t k = n / 32;
    for (size_t i = 0; i < k; i++)
        _mm256_stream_si256((__m256i *)(void *)(d + 32 * i),
                            _mm256_loadu_si256((const __m256i *)(const void *)(s + 32 * i)));
    _mm_sfence();
    memcpy(d + 32 * k, s + 32 * k, n - 32 * k);
}
#endif

static void copy_bulk(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__) && defined(__GNUC__)
    static int have_avx2 = -1;
    if (have_avx2 < 0)
        have_avx2 = __builtin_cpu_supports("avx2");
    if (n >= (256u << 10) && have_avx2) {
        copy_nt_avx2(dst, src, n);
        return;
    }
#endif
    memcpy(dst, src, n);
}

void dev__hostq_set_copy_delay(struct dev__hostq *q, unsigned delay_us)
{
    atomic_store(&q->copy_delay_us, delay_us);
}

/* Run one op; called with q->mu held, may drop it around memcpy. `threaded`: on a copy
 * thread (the injected delay applies there only: an inline copy has no one to race). */
static void run_op(struct dev__hostq *q, struct hq_op *op, int threaded)
{
    switch (op->kind) {
    case HQ_COPY:
        pthread_mutex_unlock(&q->mu);
        if (threaded && atomic_load(&q->copy_delay_us))
            usleep(atomic_load(&q->copy_delay_us));
        copy_bulk(op->dst, op->src, op->n);
        pthread_mutex_lock(&q->mu);
        break;
    case HQ_SIGNAL:
        if (op->seq > op->ev->done)
            op->ev->done = op->seq;
        break;
    case HQ_WAIT:
        while (op->ev->done < op->seq)
            pthread_cond_wait(&q->cv, &q->mu);
        break;
    }
}

static void *stream_main(void *arg)
{
    struct hq_stream *hs = arg;
    struct dev__hostq *q = hs->q;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!hs->head && !hs->stop)
            pthread_cond_wait(&q->cv, &q->mu);
        if (!hs->head)
            break;
        struct hq_op *op = hs->head;
        run_op(q, op, 1);
        hs->head = op->next;
        if (!hs->head)
            hs->tail = NULL;
        if (op->ev)
            op->ev->refs--;
        hs->done++;
        xfree(op);
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static void enqueue(struct dev_stream *s, struct hq_op *op)
{
    struct hq_stream *hs = s->impl;
    struct dev__hostq *q = hs->q;
    if (hs->inline_) {
        run_op(q, op, 0);
        pthread_cond_broadcast(&q->cv);
        return;
    }
    struct hq_op *heap = xmalloc(sizeof(*heap));
    *heap = *op;
    heap->next = NULL;
    if (heap->ev)
        heap->ev->refs++;
    if (hs->tail)
        hs->tail->next = heap;
    else
        hs->head = heap;
    hs->tail = heap;
    hs->enq++;
    pthread_cond_broadcast(&q->cv);
}

int dev__hostq_stream_init(struct dev_stream *s)
{
    struct dev__hostq *q = hq_of(s->dev);
    struct hq_stream *hs = xcalloc(1, sizeof(*hs));
    hs->q = q;
    hs->inline_ = s->is_compute || !q->threaded;
    if (!hs->inline_ && pthread_create(&hs->th, NULL, stream_main, hs) != 0) {
        xfree(hs);
        return ERR_INTERNAL;
    }
    s->impl = hs;
    return 0;
}

int dev__hostq_stream_sync(struct dev_stream *s)
{
    struct hq_stream *hs = s->impl;
    struct dev__hostq *q = hs->q;
    pthread_mutex_lock(&q->mu);
    while (hs->done < hs->enq)
        pthread_cond_wait(&q->cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
    return 0;
}

void dev__hostq_stream_release(struct dev_stream *s)
{
    struct hq_stream *hs = s->impl;
    if (!hs)
        return;
    struct dev__hostq *q = hs->q;
    if (!hs->inline_) {
        /* Drain first: the caller's buffers must not be touched after this returns. */
        dev__hostq_stream_sync(s);
        pthread_mutex_lock(&q->mu);
        hs->stop = 1;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
        pthread_join(hs->th, NULL);
    }
    xfree(hs);
    s->impl = NULL;
}

int dev__hostq_copy_async(struct dev_stream *s, enum dev_copy_kind kind, void *dst,
                          const void *src, size_t n)
{
    (void)kind;
    struct dev__hostq *q = hq_of(s->dev);
    struct hq_op op = {.kind = HQ_COPY, .dst = dst, .src = src, .n = n};
    pthread_mutex_lock(&q->mu);
    enqueue(s, &op);
    pthread_mutex_unlock(&q->mu);
    return 0;
}

int dev__hostq_event_init(struct dev_event *ev)
{
    ev->impl = xcalloc(1, sizeof(struct hq_event));
    return 0;
}

void dev__hostq_event_release(struct dev_event *ev)
{
    struct dev__hostq *q = hq_of(ev->dev);
    struct hq_event *he = ev->impl;
    /* A queued op still points here: wait for it rather than free under it. */
    pthread_mutex_lock(&q->mu);
    while (he->refs > 0)
        pthread_cond_wait(&q->cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
    xfree(he);
    ev->impl = NULL;
}

int dev__hostq_event_record(struct dev_event *ev, struct dev_stream *s)
{
    struct dev__hostq *q = hq_of(s->dev);
    struct hq_event *he = ev->impl;
    pthread_mutex_lock(&q->mu);
    struct hq_op op = {.kind = HQ_SIGNAL, .ev = he, .seq = ++he->rec};
    enqueue(s, &op);
    pthread_mutex_unlock(&q->mu);
    return 0;
}

int dev__hostq_stream_wait_event(struct dev_stream *s, struct dev_event *ev)
{
    struct dev__hostq *q = hq_of(s->dev);
    struct hq_event *he = ev->impl;
    pthread_mutex_lock(&q->mu);
    struct hq_op op = {.kind = HQ_WAIT, .ev = he, .seq = he->rec};
    enqueue(s, &op);
    pthread_mutex_unlock(&q->mu);
    return 0;
}

int dev__hostq_event_sync(struct dev_event *ev)
{
    struct dev__hostq *q = hq_of(ev->dev);
    struct hq_event *he = ev->impl;
    pthread_mutex_lock(&q->mu);
    while (he->done < he->rec)
        pthread_cond_wait(&q->cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
    return 0;
}

int dev__hostq_event_query(struct dev_event *ev)
{
    struct dev__hostq *q = hq_of(ev->dev);
    struct hq_event *he = ev->impl;
    pthread_mutex_lock(&q->mu);
    int r = he->done >= he->rec;
    pthread_mutex_unlock(&q->mu);
    return r;
}

/* ---- host memory with a size header --------------------------------------------------- */

/*
 * Blocks from a huge page up are their own mappings (xtry_map: transparent huge pages;
 * the block cache can assemble them from each other's pages). Smaller ones stay with
 * malloc: glibc serves them from its heap, which reuses freed memory of any size, so a
 * UNet step at 256^2 (its blocks of 1-2 MiB) faulted ~100 pages, against ~6000 when
 * they were mappings of their own that the cache (exact sizes only) did not keep.
 */
#define HOST_MEM_MAP ALLOC_HUGE

int dev__host_mem_alloc(size_t bytes, void **out)
{
    /* Activation sizes follow the request: fallible, and checked against the host
     * memory available now (alloc.h says why malloc alone is not enough). */
    void *v = NULL;
    *out = NULL;
    if (bytes > SIZE_MAX - DEV_HOST_MEM_HDR)
        return ERR_DEVICE_OOM;
    size_t n = DEV_HOST_MEM_HDR + bytes;
    if ((n >= HOST_MEM_MAP ? xtry_map(n, &v, NULL)
                           : xtry_malloc_aligned(DEV_HOST_MEM_HDR, n, &v, NULL)) < 0)
        return ERR_DEVICE_OOM;
    unsigned char *p = v;
    memcpy(p, &bytes, sizeof(bytes));
    *out = p + DEV_HOST_MEM_HDR;
    return 0;
}

size_t dev__host_mem_free(void *ptr)
{
    unsigned char *p = (unsigned char *)ptr - DEV_HOST_MEM_HDR;
    size_t bytes;
    memcpy(&bytes, p, sizeof(bytes));
    if (dev__host_mem_span(bytes))
        xunmap(p, DEV_HOST_MEM_HDR + bytes);
    else
        xfree_aligned(p);
    return bytes;
}

size_t dev__host_mem_span(size_t bytes)
{
    return DEV_HOST_MEM_HDR + bytes >= HOST_MEM_MAP ? xmap_len(DEV_HOST_MEM_HDR + bytes) : 0;
}

void *dev__host_mem_base(void *ptr)
{
    return (unsigned char *)ptr - DEV_HOST_MEM_HDR;
}

void *dev__host_mem_adopt(void *base, size_t bytes)
{
    memcpy(base, &bytes, sizeof(bytes));
    return (unsigned char *)base + DEV_HOST_MEM_HDR;
}

size_t dev__host_mem_size(const void *ptr)
{
    size_t bytes;
    memcpy(&bytes, (const unsigned char *)ptr - DEV_HOST_MEM_HDR, sizeof(bytes));
    return bytes;
}
