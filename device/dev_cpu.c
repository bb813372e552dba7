/*
 * dev_cpu.c — the cpu device: plain host memory, no budget beyond the machine
 * (unless the caller gives one), synchronous streams (dev_hostq.c, inline).
 *
 * The host-memory helpers here are shared with dev_sim.c, which differs only in
 * its budget and in serving copy streams from threads.
 */
#include "dev_backend.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"

static void cpu_close(struct dev *d)
{
    dev__blkcache_free(d->cache);
    d->cache = NULL;
    dev__hostq_free(d->impl);
}

/*
 * cpu only: large blocks come from and go back to the block cache (dev_blkcache.c):
 * a cached block of the same size, else one assembled from cached blocks' pages.
 * Cached blocks are resident memory the host counts as taken, so when a new block
 * does not fit, the cache is emptied and the allocation tried once more.
 */
static int cpu_alloc_mem(struct dev *d, size_t bytes, void **out)
{
    void *p = d->cache ? dev__blkcache_take(d->cache, bytes) : NULL;
    if (!p && d->cache)
        p = dev__blkcache_assemble(d->cache, bytes);
    if (p) {
        *out = p;
        return 0;
    }
    int rc = dev__host_mem_alloc(bytes, out);
    if (rc == ERR_DEVICE_OOM && d->cache && dev__blkcache_bytes(d->cache)) {
        dev__blkcache_trim(d->cache);
        rc = dev__host_mem_alloc(bytes, out);
    }
    return rc;
}

static size_t cpu_free_mem(struct dev *d, void *ptr)
{
    size_t bytes = dev__host_mem_size(ptr);
    /* used still counts this block (dev_free subtracts after): room = peak - (used - bytes) */
    size_t used = atomic_load(&d->used), peak = atomic_load(&d->peak);
    size_t room = peak + bytes > used ? peak + bytes - used : 0;
    if (d->cache && dev__blkcache_put(d->cache, ptr, bytes, room))
        return bytes;
    return dev__host_mem_free(ptr);
}

static int host_alloc_mem(struct dev *d, size_t bytes, void **out)
{
    (void)d;
    return dev__host_mem_alloc(bytes, out);
}

static size_t host_free_mem(struct dev *d, void *ptr)
{
    (void)d;
    return dev__host_mem_free(ptr);
}

static int cpu_mem_info(struct dev *d, size_t *free_bytes, size_t *total_bytes)
{
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
    long psz = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || psz <= 0)
        return ERR_INTERNAL;
    *total_bytes = (size_t)pages * (size_t)psz;
    /* What an allocation can take (MemAvailable, cgroup, RLIMIT_AS), as ComfyUI's
     * psutil "available": MemFree alone misses reclaimable page cache. */
    size_t host = alloc_host_available();
    *free_bytes = host != SIZE_MAX ? host : avail > 0 ? (size_t)avail * (size_t)psz : 0;
    if (*free_bytes > *total_bytes)
        *free_bytes = *total_bytes;
    /* Cached free blocks are ours to give back: count them as free (cpu only). */
    if (d->cache) {
        size_t c = dev__blkcache_bytes(d->cache);
        *free_bytes = *free_bytes + c < *total_bytes ? *free_bytes + c : *total_bytes;
    }
    return 0;
}

static int host_copy(struct dev *d, enum dev_copy_kind kind, void *dst, const void *src,
                     size_t n)
{
    (void)d;
    (void)kind;
    memmove(dst, src, n);
    return 0;
}

/* "Pinned" host memory on a host device is plain aligned memory: every copy is a memcpy. */
static int host_pinned_alloc(struct dev *d, size_t bytes, void **out, int *pinned)
{
    (void)d;
    *out = xmalloc_aligned(4096, bytes ? bytes : 1);
    *pinned = 1;
    return 0;
}

static void host_pinned_free(struct dev *d, void *ptr)
{
    (void)d;
    xfree_aligned(ptr);
}

/* What every host-memory device shares: copies are memcpy, streams and events are the
 * copy-thread queues of dev_hostq.c, "pinned" memory is plain aligned memory. */
#define HOST_OPS_COMMON                                                                   \
    .close = cpu_close, .mem_info = cpu_mem_info, .copy = host_copy,                      \
    .copy_async = dev__hostq_copy_async, .stream_init = dev__hostq_stream_init,           \
    .stream_release = dev__hostq_stream_release, .stream_sync = dev__hostq_stream_sync,   \
    .event_init = dev__hostq_event_init, .event_release = dev__hostq_event_release,       \
    .event_record = dev__hostq_event_record,                                              \
    .stream_wait_event = dev__hostq_stream_wait_event, .event_sync = dev__hostq_event_sync, \
    .event_query = dev__hostq_event_query, .host_alloc = host_pinned_alloc,               \
    .host_free = host_pinned_free

const struct dev_ops dev__host_ops = {
    HOST_OPS_COMMON,
    .alloc = host_alloc_mem,
    .free = host_free_mem,
};

/* The cpu device's ops: the host ops (which sim copies) with the cached alloc/free. */
static const struct dev_ops cpu_ops = {
    HOST_OPS_COMMON,
    .alloc = cpu_alloc_mem,
    .free = cpu_free_mem,
};

int dev__cpu_open(struct dev *d, struct err *e)
{
    (void)e;
    d->ops = &cpu_ops;
    d->kind = DEV_KIND_CPU;
    snprintf(d->name, sizeof(d->name), "cpu");
    d->impl = dev__hostq_new(0);
    d->cache = dev__blkcache_new(dev__blkcache_default_limit());
    return 0;
}
