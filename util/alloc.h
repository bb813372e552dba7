/*
 * alloc — the project's host allocation wrappers.
 *
 * Host malloc failure is fatal (redis zmalloc, git xmalloc): the x* functions
 * never return NULL for a non-zero size. Every host allocation in latentd goes
 * through them so that tests can assert that nothing is left live
 * (alloc_live_count()).
 *
 * The one exception is memory whose size a request controls (latents, images,
 * activations: EmptyLatentImage 16384x16384 batch 4096 asks for 256 GiB). Such a
 * size must never end the process, so it goes through alloc_host_check or the
 * xtry_* functions, which fail with ERR_DEVICE_OOM (the host is the cpu device)
 * and a message in ComfyUI's out-of-memory shape naming the size asked for.
 * They check the size against the memory available *now* before calling malloc,
 * because Linux overcommits: a 20 GiB malloc on a 16 GiB machine succeeds and the
 * OOM killer ends the process when the pages are touched; and under ASan a huge
 * malloc aborts unless allocator_may_return_null is set.
 *
 * Thread safety: all functions may be called from any thread.
 */
#ifndef LATENTD_UTIL_ALLOC_H
#define LATENTD_UTIL_ALLOC_H

#include <stddef.h>

#include "err.h"

void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);       /* xrealloc(NULL, n) == xmalloc(n) */
char *xstrdup(const char *s);            /* caller frees with xfree */
char *xstrndup(const char *s, size_t n); /* at most n bytes, always NUL-terminated */
void xfree(void *p);                     /* xfree(NULL) is a no-op */

/* Aligned allocation (align: power of two >= sizeof(void *)); free with xfree_aligned. */
void *xmalloc_aligned(size_t align, size_t n);
void xfree_aligned(void *p);

/*
 * Host memory a new allocation can take now, in bytes: MemAvailable from
 * /proc/meminfo, capped by the cgroup v2 limit (memory.max - memory.current) and
 * by RLIMIT_AS less the address space in use. SIZE_MAX when none is known.
 * Reads /proc and /sys: a few microseconds, so callers use it for large sizes only.
 */
size_t alloc_host_available(void);

/*
 * 0 when `bytes` of host memory fit in alloc_host_available() less a margin
 * (ALLOC_HOST_MARGIN, room for the small allocations that follow); otherwise
 * ERR_DEVICE_OOM with e filled as "Allocation on device cpu would exceed
 * available memory: tried to allocate 256.00 GiB (274877906944 bytes), ...".
 * Sizes below ALLOC_CHECK_MIN always pass. Allocates nothing.
 */
#define ALLOC_HOST_MARGIN ((size_t)256 << 20)
#define ALLOC_CHECK_MIN ((size_t)64 << 20)
int alloc_host_check(size_t bytes, struct err *e);

/* As alloc_host_check, for count * size bytes (overflow counts as too large). */
int alloc_host_check_n(size_t count, size_t size, struct err *e);

/*
 * Fallible allocation for request-sized buffers: alloc_host_check, then malloc.
 * 0 and *out set (free with xfree / xfree_aligned), or ERR_DEVICE_OOM with e
 * filled and *out NULL. Never aborts.
 */
int xtry_malloc(size_t n, void **out, struct err *e);
int xtry_calloc(size_t count, size_t size, void **out, struct err *e);
int xtry_malloc_aligned(size_t align, size_t n, void **out, struct err *e);

/*
 * Large request-sized blocks as their own anonymous mappings (activations: the cpu
 * device's blocks of 2 MiB and more). 0 and *out set (page-aligned; free with
 * xunmap(p, n), the same n), or ERR_DEVICE_OOM with e filled. Never aborts.
 * Blocks of ALLOC_HUGE bytes or more are aligned to it and advised as transparent huge
 * pages (madvise(MADV_HUGEPAGE); a no-op where THP is off or "never"), as PyTorch's CPU
 * allocator does for the same sizes. Why: a fresh activation is written once per
 * page, and each 4 KiB fault costs far more than the write (the 512^2 VAE decode of a
 * cold run took 300k faults, ~18 % of its CPU time on the machines here; with huge
 * pages 7k, and the decode used 27 % less CPU). Contents start zeroed.
 */
#define ALLOC_HUGE ((size_t)2 << 20)
int xtry_map(size_t n, void **out, struct err *e);
void xunmap(void *p, size_t n);
size_t xmap_len(size_t n); /* bytes xtry_map(n) maps (what xunmap(p, n) unmaps) */
/*
 * Move the pages of [src, src + len) of an xtry_map block over [dst, dst + len) of
 * another (mremap: page tables move, no copy, no fault; what dst had there is
 * unmapped). len and both addresses page-aligned. `whole`: this is all that is left
 * of src's block, which stops counting as live. 0, or -1 with nothing moved.
 */
int xmap_move(void *dst, void *src, size_t len, int whole);
/*
 * Grow an xtry_map block *p of *n bytes (NULL/0: none yet) to `want` bytes: a new block,
 * with the old one's pages moved under its head (xmap_move), so a scratch buffer that
 * grows step by step through a cold run's first pass faults in and zeroes each page once
 * instead of all of them at every step. The old contents are kept, unless the move fails
 * or want is not more than *n (then the old block is unmapped and the new one starts
 * zeroed). On failure (xtry_map's negative error, e set) *p and *n are unchanged.
 */
int xmap_grow(void **p, size_t *n, size_t want, struct err *e);

/* Format bytes for a message as ComfyUI/torch do: "256.00 GiB", "12.50 MiB". */
const char *alloc_fmt_bytes(char out[32], size_t bytes);

/* Number of blocks allocated through these wrappers and not yet freed. */
long alloc_live_count(void);

#endif
