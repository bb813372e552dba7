/*
 * dev_backend — the private contract between device.c (registry, accounting,
 * argument checks) and the backends dev_cpu.c, dev_sim.c and dev_cuda.c.
 *
 * Not for use outside device/: everything here may change. device.c does
 * the byte accounting and the budget check before calling a backend's alloc, so
 * backends only hand out memory; a backend's free returns how many bytes the
 * allocation was accounted with (what the caller asked for).
 *
 * Threads: as device.h (the executor thread owns a device).
 */
#ifndef LATENTD_DEVICE_DEV_BACKEND_H
#define LATENTD_DEVICE_DEV_BACKEND_H

#include <pthread.h>
#include <stdatomic.h>

#include "device.h"

struct dev_stream {
    struct dev *dev;      /* borrowed: the owning device */
    int is_compute;       /* the device's compute stream (never freed by the user) */
    void *impl;           /* owned by the backend */
    struct dev_stream *next; /* device's list of user streams, freed at dev_close */
};

struct dev_event {
    struct dev *dev; /* borrowed */
    void *impl;      /* owned by the backend */
};

/* A backend: every member is required unless marked optional. */
struct dev_ops {
    void (*close)(struct dev *d);
    int (*alloc)(struct dev *d, size_t bytes, void **out);
    size_t (*free)(struct dev *d, void *ptr); /* returns the bytes ptr was allocated with */
    int (*mem_info)(struct dev *d, size_t *free_bytes, size_t *total_bytes);
    int (*copy)(struct dev *d, enum dev_copy_kind kind, void *dst, const void *src, size_t n);
    int (*copy_async)(struct dev_stream *s, enum dev_copy_kind kind, void *dst,
                      const void *src, size_t n);
    int (*stream_init)(struct dev_stream *s); /* fills s->impl; compute stream too */
    void (*stream_release)(struct dev_stream *s);
    int (*stream_sync)(struct dev_stream *s);
    int (*event_init)(struct dev_event *ev);
    void (*event_release)(struct dev_event *ev);
    int (*event_record)(struct dev_event *ev, struct dev_stream *s);
    int (*stream_wait_event)(struct dev_stream *s, struct dev_event *ev);
    int (*event_sync)(struct dev_event *ev);
    int (*event_query)(struct dev_event *ev);
    int (*host_alloc)(struct dev *d, size_t bytes, void **out, int *pinned);
    void (*host_free)(struct dev *d, void *ptr);
    int (*host_register)(struct dev *d, void *ptr, size_t bytes);   /* optional: no-op */
    void (*host_unregister)(struct dev *d, void *ptr);              /* optional: no-op */
    void *(*stream_native)(struct dev_stream *s);                    /* optional: NULL */
};

struct dev {
    const struct dev_ops *ops; /* borrowed (static) */
    enum dev_kind kind;
    char name[128];
    size_t budget;             /* bytes, SIZE_MAX = none */
    atomic_size_t used;        /* bytes, live allocations */
    atomic_size_t peak;        /* bytes */
    atomic_long n_allocs;      /* live allocations */
    int inject_skip, inject_count; /* dev_inject_oom */
    struct dev_stream compute; /* the compute stream */
    struct dev_stream *streams; /* owned: user streams not yet freed */
    void *impl;                /* owned by the backend */
    struct dev__blkcache *cache; /* owned by the cpu backend; NULL on sim and cuda */
};

/* Backend constructors: fill d->ops, d->kind, d->name, d->impl (and may lower
 * d->budget to what the device has). device.c has set d->budget from the caller. */
int dev__cpu_open(struct dev *d, struct err *e);
int dev__sim_open(struct dev *d, size_t sim_bytes, struct err *e);
#ifdef HAVE_CUDA
int dev__cuda_open(struct dev *d, int ordinal, struct err *e);
int dev__cuda_count(void);
#endif

/*
 * Host streams and events, shared by cpu and sim (dev_hostq.c). A host device runs
 * compute on the calling thread, so its compute stream is always idle; a copy
 * stream is a FIFO of copies, event signals and event waits, served by its own
 * thread when `threaded` (sim) or run inline at enqueue (cpu).
 */
struct dev__hostq;
struct dev__hostq *dev__hostq_new(int threaded);
void dev__hostq_free(struct dev__hostq *q);
int dev__hostq_copy_async(struct dev_stream *s, enum dev_copy_kind kind, void *dst,
                          const void *src, size_t n);
int dev__hostq_stream_init(struct dev_stream *s);
void dev__hostq_stream_release(struct dev_stream *s);
int dev__hostq_stream_sync(struct dev_stream *s);
int dev__hostq_event_init(struct dev_event *ev);
void dev__hostq_event_release(struct dev_event *ev);
int dev__hostq_event_record(struct dev_event *ev, struct dev_stream *s);
int dev__hostq_stream_wait_event(struct dev_stream *s, struct dev_event *ev);
int dev__hostq_event_sync(struct dev_event *ev);
int dev__hostq_event_query(struct dev_event *ev);
/* dev_inject_copy_delay's backend: every copy run by a copy thread sleeps first. */
void dev__hostq_set_copy_delay(struct dev__hostq *q, unsigned delay_us);

/*
 * The cpu device's cache of freed blocks of DEV_BLKCACHE_MIN bytes or more, keyed
 * by exact size (dev_blkcache.c). take returns a cached block of exactly `bytes`
 * or NULL; put keeps a dev__host_mem block (1) or declines (0: caller frees it);
 * `room` (bytes under the device's peak once this block is freed) lets the cache
 * hold more than its limit (dev_blkcache.c says why).
 * Thread-safe (own mutex).
 */
#define DEV_BLKCACHE_MIN ((size_t)1 << 20)
struct dev__blkcache;
size_t dev__blkcache_default_limit(void);
struct dev__blkcache *dev__blkcache_new(size_t limit);
void dev__blkcache_free(struct dev__blkcache *c); /* frees cached blocks; NULL ok */
void *dev__blkcache_take(struct dev__blkcache *c, size_t bytes);
int dev__blkcache_put(struct dev__blkcache *c, void *ptr, size_t bytes, size_t room);
void dev__blkcache_set_limit(struct dev__blkcache *c, size_t limit);
void dev__blkcache_fit(struct dev__blkcache *c, size_t bytes); /* min(bytes, open cap) */
void dev__blkcache_trim(struct dev__blkcache *c);
void dev__blkcache_settle(struct dev__blkcache *c); /* evict down to the limit */
/* A new block of `bytes` whose pages are cached blocks' (moved, not copied), when no
 * cached block has that size; NULL when the cache has none to give (dev_blkcache.c). */
void *dev__blkcache_assemble(struct dev__blkcache *c, size_t bytes);
size_t dev__blkcache_bytes(struct dev__blkcache *c);

/* Host memory with the accounted size kept in a header in front (cpu and sim). */
#define DEV_HOST_MEM_HDR 256 /* keeps the user pointer 256-byte aligned */
int dev__host_mem_alloc(size_t bytes, void **out);
size_t dev__host_mem_free(void *ptr);
size_t dev__host_mem_size(const void *ptr); /* the accounted size, without freeing */
/* Blocks of ALLOC_HUGE (2 MiB) and more are whole xtry_map mappings (util/alloc.h),
 * header first: span is the mapping's length for a block of `bytes` (0: a malloc'd
 * block), base the mapping's start for a user pointer, and adopt writes the header of
 * a `bytes` block into a mapping of that span at base and returns its user pointer. */
size_t dev__host_mem_span(size_t bytes);
void *dev__host_mem_base(void *ptr);
void *dev__host_mem_adopt(void *base, size_t bytes);

#endif
