/*
 * dev_cuda.c — the CUDA device through cudart (built only with HAVE_CUDA).
 *
 * Memory: we cudaMalloc large blocks (256 MiB, or one exact block for a bigger
 * request) and sub-allocate from them best-fit with coalescing, so "free" means
 * free: a block that becomes empty goes back to the driver at once, and the bytes
 * we report as used are exactly the live allocations (memory.md §9 item 4: ComfyUI
 * counted the caching allocator's idle blocks as free, then hit OOM on fragments).
 *
 * Ordering: the compute stream is a non-blocking stream we create; synchronous
 * copies are queued on it and waited for, so they see every kernel queued before
 * them (tensor ops launch on dev_stream_native(dev_compute_stream(d))).
 *
 * Errors: allocation failures are results (ERR_DEVICE_OOM); a failed copy, record
 * or sync means the context is broken, which is fatal (STYLE.md, CUDA_CHECK).
 * Any cudart error while probing means "no GPU".
 */
#include "dev_backend.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "log.h"

#define CUDA_CHECK(stmt)                                                                  \
    do {                                                                                  \
        cudaError_t cc__ = (stmt);                                                        \
        if (cc__ != cudaSuccess)                                                          \
            PANIC("CUDA error %s at %s: %s", cudaGetErrorName(cc__), #stmt,               \
                  cudaGetErrorString(cc__));                                              \
    } while (0)

#define CUDA_BLOCK_BYTES ((size_t)256 << 20)
#define CUDA_ALIGN ((size_t)256)

struct cuda_seg {
    size_t off, size;        /* bytes, rounded to CUDA_ALIGN */
    size_t asked;            /* bytes the caller asked for (what device.c accounted) */
    int free;
    struct cuda_seg *prev, *next; /* address order within the block */
};

struct cuda_block {
    char *base;
    size_t size;
    size_t free_bytes;
    struct cuda_seg *segs; /* owned list */
    struct cuda_block *next;
};

struct cuda_dev {
    int ordinal;
    struct cuda_block *blocks; /* owned */
    size_t block_bytes;        /* bytes held from the driver */
    size_t idle_bytes;         /* free bytes inside our blocks */
};

static int pinned_warned;

int dev__cuda_count(void)
{
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky probe error */
        return 0;
    }
    return n;
}

static void cuda_set(struct dev *d)
{
    struct cuda_dev *cd = d->impl;
    CUDA_CHECK(cudaSetDevice(cd->ordinal));
}

/* ---- sub-allocator ------------------------------------------------------------------ */

static struct cuda_block *block_new(struct cuda_dev *cd, size_t size)
{
    void *p = NULL;
    if (cudaMalloc(&p, size) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    struct cuda_block *b = xcalloc(1, sizeof(*b));
    b->base = p;
    b->size = size;
    b->free_bytes = size;
    b->segs = xcalloc(1, sizeof(*b->segs));
    b->segs->size = size;
    b->segs->free = 1;
    b->next = cd->blocks;
    cd->blocks = b;
    cd->block_bytes += size;
    cd->idle_bytes += size;
    return b;
}

static void block_release(struct cuda_dev *cd, struct cuda_block *b)
{
    for (struct cuda_block **pp = &cd->blocks; *pp; pp = &(*pp)->next)
        if (*pp == b) {
            *pp = b->next;
            break;
        }
    cudaFree(b->base);
    cd->block_bytes -= b->size;
    cd->idle_bytes -= b->size;
    xfree(b->segs);
    xfree(b);
}

static int cuda_alloc(struct dev *d, size_t bytes, void **out)
{
    struct cuda_dev *cd = d->impl;
    size_t need = (bytes + CUDA_ALIGN - 1) & ~(CUDA_ALIGN - 1);
    if (need == 0)
        need = CUDA_ALIGN;
    cuda_set(d);
    struct cuda_block *best_b = NULL;
    struct cuda_seg *best = NULL;
    for (struct cuda_block *b = cd->blocks; b; b = b->next) {
        if (b->free_bytes < need)
            continue;
        for (struct cuda_seg *s = b->segs; s; s = s->next)
            if (s->free && s->size >= need && (!best || s->size < best->size)) {
                best = s;
                best_b = b;
            }
    }
    if (!best) {
        size_t bs = need > CUDA_BLOCK_BYTES ? (need + ((size_t)2 << 20) - 1) &
                                                  ~(((size_t)2 << 20) - 1)
                                            : CUDA_BLOCK_BYTES;
        best_b = block_new(cd, bs);
        if (!best_b && bs != need)
            best_b = block_new(cd, need); /* a smaller exact block may still fit */
        if (!best_b)
            return ERR_DEVICE_OOM;
        best = best_b->segs;
    }
    if (best->size > need) {
        struct cuda_seg *rest = xcalloc(1, sizeof(*rest));
        rest->off = best->off + need;
        rest->size = best->size - need;
        rest->free = 1;
        rest->prev = best;
        rest->next = best->next;
        if (best->next)
            best->next->prev = rest;
        best->next = rest;
        best->size = need;
    }
    best->free = 0;
    best->asked = bytes;
    best_b->free_bytes -= need;
    cd->idle_bytes -= need;
    /* The accounted size (bytes) is what device.c added; we keep the rounded one. */
    *out = best_b->base + best->off;
    return 0;
}

static size_t cuda_free(struct dev *d, void *ptr)
{
    struct cuda_dev *cd = d->impl;
    char *p = ptr;
    for (struct cuda_block *b = cd->blocks; b; b = b->next) {
        if (p < b->base || p >= b->base + b->size)
            continue;
        size_t off = (size_t)(p - b->base);
        for (struct cuda_seg *s = b->segs; s; s = s->next) {
            if (s->off != off || s->free)
                continue;
            size_t size = s->size, asked = s->asked;
            s->free = 1;
            b->free_bytes += size;
            cd->idle_bytes += size;
            /* Coalesce with free neighbours. */
            if (s->next && s->next->free) {
                struct cuda_seg *n = s->next;
                s->size += n->size;
                s->next = n->next;
                if (n->next)
                    n->next->prev = s;
                xfree(n);
            }
            if (s->prev && s->prev->free) {
                struct cuda_seg *pv = s->prev;
                pv->size += s->size;
                pv->next = s->next;
                if (s->next)
                    s->next->prev = pv;
                xfree(s);
            }
            if (b->free_bytes == b->size) {
                cuda_set(d);
                /* Work queued on the compute stream may still read it. */
                CUDA_CHECK(cudaDeviceSynchronize());
                block_release(cd, b);
            }
            return asked;
        }
        break;
    }
    PANIC("dev_free: %p is not a live allocation of %s", ptr, d->name);
}

/* ---- device --------------------------------------------------------------------------- */

static void cuda_close(struct dev *d)
{
    struct cuda_dev *cd = d->impl;
    cuda_set(d);
    cudaDeviceSynchronize();
    while (cd->blocks) {
        struct cuda_block *b = cd->blocks;
        cd->blocks = b->next;
        for (struct cuda_seg *s = b->segs, *n; s; s = n) {
            n = s->next;
            xfree(s);
        }
        cudaFree(b->base);
        xfree(b);
    }
    xfree(cd);
}

static int cuda_mem_info(struct dev *d, size_t *free_bytes, size_t *total_bytes)
{
    struct cuda_dev *cd = d->impl;
    size_t f = 0, t = 0;
    cuda_set(d);
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
        cudaGetLastError();
        return ERR_INTERNAL;
    }
    *free_bytes = f + cd->idle_bytes; /* idle bytes in our blocks are free to us */
    *total_bytes = t;
    return 0;
}

static enum cudaMemcpyKind copy_kind(enum dev_copy_kind k)
{
    switch (k) {
    case DEV_COPY_H2D: return cudaMemcpyHostToDevice;
    case DEV_COPY_D2H: return cudaMemcpyDeviceToHost;
    case DEV_COPY_D2D: return cudaMemcpyDeviceToDevice;
    }
    return cudaMemcpyDefault;
}

static cudaStream_t native(struct dev_stream *s) { return (cudaStream_t)s->impl; }

static int cuda_copy(struct dev *d, enum dev_copy_kind kind, void *dst, const void *src,
                     size_t n)
{
    cuda_set(d);
    cudaStream_t cs = native(&d->compute);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, copy_kind(kind), cs));
    CUDA_CHECK(cudaStreamSynchronize(cs));
    return 0;
}

static int cuda_copy_async(struct dev_stream *s, enum dev_copy_kind kind, void *dst,
                           const void *src, size_t n)
{
    cuda_set(s->dev);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, copy_kind(kind), native(s)));
    return 0;
}

static int cuda_stream_init(struct dev_stream *s)
{
    cudaStream_t cs;
    cuda_set(s->dev);
    if (cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) != cudaSuccess) {
        cudaGetLastError();
        return ERR_INTERNAL;
    }
    s->impl = cs;
    return 0;
}

static void cuda_stream_release(struct dev_stream *s)
{
    if (!s->impl)
        return;
    cuda_set(s->dev);
    CUDA_CHECK(cudaStreamSynchronize(native(s)));
    cudaStreamDestroy(native(s));
    s->impl = NULL;
}

static int cuda_stream_sync(struct dev_stream *s)
{
    cuda_set(s->dev);
    CUDA_CHECK(cudaStreamSynchronize(native(s)));
    return 0;
}

static int cuda_event_init(struct dev_event *ev)
{
    cudaEvent_t ce;
    cuda_set(ev->dev);
    if (cudaEventCreateWithFlags(&ce, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        return ERR_INTERNAL;
    }
    ev->impl = ce;
    return 0;
}

static void cuda_event_release(struct dev_event *ev)
{
    cuda_set(ev->dev);
    cudaEventDestroy((cudaEvent_t)ev->impl);
}

static int cuda_event_record(struct dev_event *ev, struct dev_stream *s)
{
    cuda_set(s->dev);
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)ev->impl, native(s)));
    return 0;
}

static int cuda_stream_wait_event(struct dev_stream *s, struct dev_event *ev)
{
    cuda_set(s->dev);
    CUDA_CHECK(cudaStreamWaitEvent(native(s), (cudaEvent_t)ev->impl, 0));
    return 0;
}

static int cuda_event_sync(struct dev_event *ev)
{
    CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)ev->impl));
    return 0;
}

static int cuda_event_query(struct dev_event *ev)
{
    cudaError_t rc = cudaEventQuery((cudaEvent_t)ev->impl);
    if (rc == cudaSuccess)
        return 1;
    if (rc == cudaErrorNotReady)
        return 0;
    PANIC("CUDA error %s in cudaEventQuery: %s", cudaGetErrorName(rc), cudaGetErrorString(rc));
}

/* ---- pinned host memory ---------------------------------------------------------------- */

static void warn_pinned_once(const char *what, cudaError_t rc)
{
    if (!pinned_warned) {
        pinned_warned = 1;
        log_warn("%s failed (%s): using pageable host memory (slower transfers)", what,
                 cudaGetErrorName(rc));
    }
}

static int cuda_host_alloc(struct dev *d, size_t bytes, void **out, int *pinned)
{
    cuda_set(d);
    cudaError_t rc = cudaHostAlloc(out, bytes ? bytes : 1, cudaHostAllocPortable);
    if (rc == cudaSuccess) {
        *pinned = 1;
        return 0;
    }
    cudaGetLastError();
    warn_pinned_once("cudaHostAlloc", rc);
    *out = xmalloc_aligned(4096, bytes ? bytes : 1);
    *pinned = 0;
    return 0;
}

static void cuda_host_free(struct dev *d, void *ptr)
{
    struct cudaPointerAttributes at;
    cuda_set(d);
    if (cudaPointerGetAttributes(&at, ptr) == cudaSuccess && at.type == cudaMemoryTypeHost) {
        CUDA_CHECK(cudaFreeHost(ptr));
        return;
    }
    cudaGetLastError();
    xfree_aligned(ptr);
}

static int cuda_host_register(struct dev *d, void *ptr, size_t bytes)
{
    cuda_set(d);
    cudaError_t rc = cudaHostRegister(ptr, bytes, cudaHostRegisterPortable);
    if (rc == cudaSuccess)
        return 0;
    cudaGetLastError(); /* do not leave it for an unrelated later call */
    warn_pinned_once("cudaHostRegister", rc);
    return ERR_UNSUPPORTED;
}

static void cuda_host_unregister(struct dev *d, void *ptr)
{
    cuda_set(d);
    if (cudaHostUnregister(ptr) != cudaSuccess)
        cudaGetLastError();
}

static void *cuda_stream_native(struct dev_stream *s) { return s->impl; }

static const struct dev_ops cuda_ops = {
    .close = cuda_close,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .mem_info = cuda_mem_info,
    .copy = cuda_copy,
    .copy_async = cuda_copy_async,
    .stream_init = cuda_stream_init,
    .stream_release = cuda_stream_release,
    .stream_sync = cuda_stream_sync,
    .event_init = cuda_event_init,
    .event_release = cuda_event_release,
    .event_record = cuda_event_record,
    .stream_wait_event = cuda_stream_wait_event,
    .event_sync = cuda_event_sync,
    .event_query = cuda_event_query,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .stream_native = cuda_stream_native,
};

int dev__cuda_open(struct dev *d, int ordinal, struct err *e)
{
    struct cudaDeviceProp prop;
    size_t f = 0, t = 0;
    if (cudaSetDevice(ordinal) != cudaSuccess ||
        cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess ||
        cudaMemGetInfo(&f, &t) != cudaSuccess) {
        cudaError_t rc = cudaGetLastError();
        return err_set(e, ERR_NOT_FOUND, "cannot open device 'cuda:%d': %s", ordinal,
                       cudaGetErrorString(rc));
    }
    struct cuda_dev *cd = xcalloc(1, sizeof(*cd));
    cd->ordinal = ordinal;
    d->ops = &cuda_ops;
    d->kind = DEV_KIND_CUDA;
    d->impl = cd;
    snprintf(d->name, sizeof(d->name), "cuda:%d %.100s", ordinal, prop.name);
    if (t < d->budget)
        d->budget = t;
    return 0;
}
