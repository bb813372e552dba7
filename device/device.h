/*
 * device — compute devices, their memory, copies, streams and events.
 *
 * The layer below tensor/ (STYLE.md): tensor/ builds on it; the memory policy
 * (memory/: planner, patcher, streamer) builds on tensor/. It knows nothing of
 * models or eviction.
 *
 * Three kinds of device:
 *   - cpu:       host memory, no budget beyond the machine; compute by CPU kernels.
 *   - sim:SIZE:  host memory behind a hard byte budget, with a copy thread that
 *                performs async copies so they really overlap with compute. It
 *                makes every memory decision testable without a GPU. Its memory is
 *                host-addressable, so CPU kernels compute on it.
 *   - cuda:N:    a CUDA GPU through cudart (only in builds with HAVE_CUDA and a
 *                driver present; any cudart error at probe time means "no GPU").
 *
 * Accounting is exact: bytes_used is the sum of live allocations' sizes as the
 * caller asked for them (plus, on CUDA, nothing else: the sub-allocator's blocks
 * are reported separately by dev_mem_info). An allocation that would take
 * bytes_used above the budget returns ERR_DEVICE_OOM; it never crashes and never
 * overcommits.
 *
 * Streams and events follow CUDA's model: work on one stream runs in order; an
 * event recorded on a stream completes when the work queued before it has; a
 * stream made to wait on an event runs nothing queued after the wait until the
 * event completes. On cpu and sim, "compute" is synchronous on the calling thread,
 * so the compute stream is always idle when the caller looks; copy streams are
 * queues served by the device's copy thread.
 *
 * Threads: the executor thread owns every device (STYLE.md "Concurrency").
 * dev_bytes_* and dev_mem_info may be read from any thread (atomics).
 */
#ifndef LATENTD_DEVICE_DEVICE_H
#define LATENTD_DEVICE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

enum dev_kind {
    DEV_KIND_CPU,
    DEV_KIND_SIM,
    DEV_KIND_CUDA,
};

struct dev;        /* opaque */
struct dev_stream; /* opaque; owned by its device */
struct dev_event;  /* opaque */

/* ---- opening and describing ---------------------------------------------------- */

/*
 * Open a device from a spec: "cpu", "sim:SIZE" (SIZE like 512M, 2G, 1073741824),
 * "cuda" / "cuda:N", or "auto" (the first CUDA GPU if one works, else cpu).
 * Returns 0 and sets *out, or a negative ERR_* with a message in `e`.
 * `budget` (bytes, 0 = none) caps device memory below what the device has
 * (--vram-budget). The caller closes with dev_close.
 */
int dev_open(const char *spec, size_t budget, struct dev **out, struct err *e);
void dev_close(struct dev *d); /* dev_close(NULL) is a no-op */

enum dev_kind dev_kind(const struct dev *d);
const char *dev_name(const struct dev *d);  /* "cpu", "sim", "cuda:0 NVIDIA H200" */
int dev_is_host(const struct dev *d);       /* memory is CPU-addressable (cpu, sim) */

/* Number of CUDA devices usable now (0 without a driver, a GPU or a CUDA build). */
int dev_cuda_count(void);


/* ---- memory ------------------------------------------------------------------- */

/* Allocate `bytes` (aligned to at least 256 bytes). ERR_DEVICE_OOM over budget. */
int dev_alloc(struct dev *d, size_t bytes, void **out);
void dev_free(struct dev *d, void *ptr); /* ptr NULL is a no-op */

size_t dev_bytes_used(const struct dev *d);   /* live allocations, bytes */
size_t dev_bytes_peak(const struct dev *d);   /* max of used since open / last reset */
size_t dev_bytes_budget(const struct dev *d); /* hard cap, bytes (SIZE_MAX: none) */
void dev_peak_reset(struct dev *d);
long dev_alloc_count(const struct dev *d);    /* live allocations (leak checks) */

/*
 * Block cache (cpu only; no-ops returning 0 on sim and cuda): freed blocks of 1 MiB
 * or more are kept, keyed by exact size, and handed back to the next dev_alloc of
 * that size, so repeated activations do not fault their pages in again. Cached
 * blocks are not "used" (not in dev_bytes_used / peak / dev_alloc_count) and their
 * contents are not zeroed. Capped at min(2 GiB, RAM/8) by default, oldest evicted
 * first; env LATENTD_CPU_BLKCACHE_MB sets the cap at open (0 = off). Beyond its
 * limit the cache may hold what lies between the peak (dev_bytes_peak) and the live
 * bytes, so a node that repeats its allocations finds them all again without the
 * process holding more than the node's peak (dev_blkcache.c).
 * dev_trim frees every cached block (the memory manager calls it when it unloads
 * everything); dev_set_cache_limit changes the cap (evicting down to it).
 * Any thread (own mutex).
 */
size_t dev_bytes_cached(const struct dev *d);
void dev_trim(struct dev *d); /* NULL is a no-op */
void dev_set_cache_limit(struct dev *d, size_t bytes);
/* The planner's size for the cache: its limit becomes min(bytes, the cap fixed at
 * open), evicting down to it. The memory manager passes a share of each node's
 * activation and workspace bytes, so cached blocks track what the node can reuse, not
 * the model or an earlier node. No-op without a cache (NULL, sim, cuda). Any thread. */
void dev_fit_cache(struct dev *d, size_t bytes);
/* The end of a run (a prompt): evict the blocks held above the limit under the peak
 * and restart the peak from the live bytes, so an idle process keeps no more than the
 * limit. No-op without a cache. Any thread. */
void dev_settle_cache(struct dev *d);

/* Fault injection for tests (SQLite's test_control in spirit): after `skip` more
 * successful allocations, the next `count` dev_alloc calls fail with ERR_DEVICE_OOM
 * as if the device had run out (another process took the memory). count 0 disables. */
void dev_inject_oom(struct dev *d, int skip, int count);

/* Fault injection for tests: on sim, every copy its copy threads run first sleeps
 * `delay_us` microseconds (a slow copy engine), so a reader that does not wait on the
 * copy's event sees stale bytes. 0 disables. A no-op on cpu (copies run inline at
 * enqueue: already complete) and on CUDA. Executor thread. */
void dev_inject_copy_delay(struct dev *d, unsigned delay_us);

/* Free and total memory as the device reports it (cudaMemGetInfo on CUDA; budget on sim;
 * physical RAM on cpu), both in bytes. */
int dev_mem_info(struct dev *d, size_t *free_bytes, size_t *total_bytes);

/* ---- copies -------------------------------------------------------------------- */

enum dev_copy_kind {
    DEV_COPY_H2D,
    DEV_COPY_D2H,
    DEV_COPY_D2D,
};

/* Synchronous copy of n bytes. */
int dev_copy(struct dev *d, enum dev_copy_kind kind, void *dst, const void *src, size_t n);

/* Queue a copy on `s`; it runs after everything queued on `s` before it. src and dst
 * must stay valid until an event recorded after it completes. */
int dev_copy_async(struct dev *d, struct dev_stream *s, enum dev_copy_kind kind, void *dst,
                   const void *src, size_t n);

/* ---- streams and events ---------------------------------------------------------- */

/* The stream compute kernels run on (on cpu/sim: the calling thread, always in order). */
struct dev_stream *dev_compute_stream(struct dev *d);

/* A new copy stream, owned by the device and freed with dev_stream_free or dev_close. */
int dev_stream_new(struct dev *d, struct dev_stream **out);
void dev_stream_free(struct dev_stream *s);
int dev_stream_sync(struct dev_stream *s); /* wait until everything queued has run */

int dev_event_new(struct dev *d, struct dev_event **out);
void dev_event_free(struct dev_event *ev);
int dev_event_record(struct dev_event *ev, struct dev_stream *s);
int dev_stream_wait_event(struct dev_stream *s, struct dev_event *ev);
int dev_event_sync(struct dev_event *ev);  /* block the caller until it completes */
int dev_event_query(struct dev_event *ev); /* 1 completed, 0 pending, <0 error */

/* The backend's native stream handle (cudaStream_t on CUDA) for kernel launches;
 * NULL on cpu and sim. Borrowed: owned by the stream. */
void *dev_stream_native(struct dev_stream *s);

/* ---- pinned host memory ------------------------------------------------------------ */

/*
 * Host memory the device can copy from asynchronously (cudaHostAlloc on CUDA; plain
 * aligned memory on cpu/sim). If pinning fails, falls back to pageable memory, logs it
 * once, and sets *pinned to 0. Free with dev_host_free.
 */
int dev_host_alloc(struct dev *d, size_t bytes, void **out, int *pinned);
void dev_host_free(struct dev *d, void *ptr);

/* Pin (cudaHostRegister) / unpin existing host memory in place; no-ops off CUDA. */
int dev_host_register(struct dev *d, void *ptr, size_t bytes);
void dev_host_unregister(struct dev *d, void *ptr);

#endif
