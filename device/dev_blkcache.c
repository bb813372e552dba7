/*
 * dev_blkcache.c — the cpu device's cache of freed large blocks.
 *
 * Why: every tensor op output is a fresh dev_alloc, and glibc serves blocks of
 * 1 MiB and more with mmap/munmap, so each large activation costs its pages
 * faulting in again (VAE decode 512² spent ~1.3 s of ~9.7 s in the kernel).
 * Activations repeat the same sizes every layer and step, so a freed block is
 * kept keyed by its exact accounted size and handed back to the next dev_alloc
 * of that size, with its pages already mapped.
 *
 * Blocks are dev__host_mem blocks (size in their header). The cache holds at most
 * BLKCACHE_SLOTS blocks and `limit` bytes, or, when more, the `room` the caller passes
 * with a freed block: the gap between the device's peak of live bytes since the node
 * began (the planner resets it) and what stays live after this free. Memory in that
 * gap was resident at the node's peak anyway, so holding it does not raise the peak
 * RSS of the node, and a node that repeats itself (a sampler's steps) finds every
 * block again. Why not the planner's limit alone: it is 3/4 of the node's estimated
 * activations, and the estimate runs low (SD1.5 UNet at 512^2, batch 2: 102 MiB
 * planned, while the feed-forward's 80 MiB blocks alone did not fit), so each step
 * faulted ~300 MB of blocks in again (73k faults, ~0.4 s of a 6 s step here).
 * When over, the oldest go first.
 * Reused memory is not zeroed (dev_alloc never promised zeroed memory).
 *
 * Threads: a tensor may be freed on whichever thread drops its last reference,
 * so the list is under a mutex; it is taken only for blocks >= the threshold.
 */
#include "dev_backend.h"

#include <stdlib.h>
#include <unistd.h>

#include "alloc.h"

#define BLKCACHE_SLOTS 128

struct blk {
    void *ptr;    /* user pointer of a dev__host_mem block */
    size_t bytes; /* its accounted size */
    uint64_t seq; /* when it was put: smaller is older */
};

struct dev__blkcache {
    pthread_mutex_t mu;
    size_t limit;  /* bytes; 0 = caching off */
    size_t cap;    /* the limit fixed at open: dev__blkcache_fit never goes above */
    size_t held;   /* bytes in blk[] */
    int n;
    uint64_t seq;
    struct blk blk[BLKCACHE_SLOTS];
};

size_t dev__blkcache_default_limit(void)
{
    /* LATENTD_CPU_BLKCACHE_MB overrides (0 turns caching off: before/after benchmarks). */
    const char *env = getenv("LATENTD_CPU_BLKCACHE_MB");
    if (env && *env) {
        char *end;
        unsigned long long mb = strtoull(env, &end, 10);
        if (!*end)
            return (size_t)mb << 20;
    }
    size_t lim = (size_t)2 << 30;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0 && (size_t)pages * (size_t)psz / 8 < lim)
        lim = (size_t)pages * (size_t)psz / 8;
    return lim;
}

struct dev__blkcache *dev__blkcache_new(size_t limit)
{
    struct dev__blkcache *c = xcalloc(1, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    c->limit = limit;
    c->cap = limit;
    return c;
}

/* Drop slot i (caller holds mu); returns the block's pointer for freeing outside. */
static void *take_slot(struct dev__blkcache *c, int i)
{
    void *p = c->blk[i].ptr;
    c->held -= c->blk[i].bytes;
    c->blk[i] = c->blk[--c->n];
    return p;
}

static int oldest(const struct dev__blkcache *c)
{
    int o = 0;
    for (int i = 1; i < c->n; i++)
        if (c->blk[i].seq < c->blk[o].seq)
            o = i;
    return o;
}

void *dev__blkcache_take(struct dev__blkcache *c, size_t bytes)
{
    if (bytes < DEV_BLKCACHE_MIN)
        return NULL;
    void *p = NULL;
    pthread_mutex_lock(&c->mu);
    int best = -1;
    for (int i = 0; i < c->n; i++) /* the newest of that size: its pages are warmest */
        if (c->blk[i].bytes == bytes && (best < 0 || c->blk[i].seq > c->blk[best].seq))
            best = i;
    if (best >= 0)
        p = take_slot(c, best);
    pthread_mutex_unlock(&c->mu);
    return p;
}

int dev__blkcache_put(struct dev__blkcache *c, void *ptr, size_t bytes, size_t room)
{
    if (bytes < DEV_BLKCACHE_MIN)
        return 0;
    void *evict[BLKCACHE_SLOTS];
    int ne = 0, kept = 0;
    pthread_mutex_lock(&c->mu);
    /* limit 0 is "caching off"; otherwise the node's room under its peak may hold more */
    size_t lim = c->limit && room > c->limit ? room : c->limit;
    if (bytes <= lim) {
        while (c->n > 0 && (c->n == BLKCACHE_SLOTS || c->held > lim - bytes))
            evict[ne++] = take_slot(c, oldest(c));
        c->blk[c->n++] = (struct blk){ .ptr = ptr, .bytes = bytes, .seq = ++c->seq };
        c->held += bytes;
        kept = 1;
    }
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < ne; i++) /* munmap outside the lock */
        dev__host_mem_free(evict[i]);
    return kept;
}

/*
 * Why assemble: sizes change between nodes and inside one (the VAE's blocks at 512^2
 * run from 2 to 256 MiB), so exact sizes alone left the cold 512^2 decode faulting in
 * ~1.2 GiB of fresh pages while the UNet's freed blocks sat unused, and a fresh page
 * costs its zeroing and a fault (on the VMs here, where freed memory goes back to the
 * host, far more than the write that follows). A miss takes cached blocks, newest
 * first, and moves their pages under the new block (mremap): page tables move, no
 * byte is copied or faulted. Only mapped blocks take part, and those are whole huge
 * pages (dev_hostq.c maps from ALLOC_HUGE up, xmap_len rounds to it), so every move
 * keeps huge pages whole and a split donor's rest is again a block of whole huge pages,
 * which goes back to the cache. What the donors
 * do not cover is the new mapping's own fresh pages. A failed move frees that donor.
 */
void *dev__blkcache_assemble(struct dev__blkcache *c, size_t bytes)
{
    size_t span = dev__host_mem_span(bytes); /* 0: a malloc'd block */
    if (!span)
        return NULL;
    void *got[BLKCACHE_SLOTS];
    int ng = 0;
    size_t have = 0;
    pthread_mutex_lock(&c->mu);
    while (have < span) {
        int best = -1;
        for (int i = 0; i < c->n; i++)
            if (dev__host_mem_span(c->blk[i].bytes) &&
                (best < 0 || c->blk[i].seq > c->blk[best].seq))
                best = i;
        if (best < 0)
            break;
        have += dev__host_mem_span(c->blk[best].bytes);
        got[ng++] = take_slot(c, best);
    }
    pthread_mutex_unlock(&c->mu);
    if (!ng)
        return NULL;
    void *p = NULL;
    if (dev__host_mem_alloc(bytes, &p) < 0) {
        for (int i = 0; i < ng; i++)
            dev__host_mem_free(got[i]);
        return NULL;
    }
    unsigned char *dst = dev__host_mem_base(p);
    size_t off = 0;
    for (int i = 0; i < ng; i++) {
        size_t dbytes = dev__host_mem_size(got[i]), dspan = dev__host_mem_span(dbytes);
        size_t part = span - off < dspan ? span - off : dspan;
        unsigned char *src = dev__host_mem_base(got[i]);
        if (xmap_move(dst + off, src, part, part == dspan) < 0) {
            dev__host_mem_free(got[i]);
            continue;
        }
        off += part;
        if (part < dspan) { /* the rest: a block of whole huge pages of its own */
            size_t rb = dspan - part - DEV_HOST_MEM_HDR;
            void *rest = dev__host_mem_adopt(src + part, rb);
            if (!dev__blkcache_put(c, rest, rb, 0))
                dev__host_mem_free(rest);
        }
    }
    return dev__host_mem_adopt(dst, bytes);
}

void dev__blkcache_set_limit(struct dev__blkcache *c, size_t limit)
{
    void *evict[BLKCACHE_SLOTS];
    int ne = 0;
    pthread_mutex_lock(&c->mu);
    c->limit = limit;
    while (c->n > 0 && c->held > limit)
        evict[ne++] = take_slot(c, oldest(c));
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < ne; i++)
        dev__host_mem_free(evict[i]);
}

/*
 * Why the planner sizes the cache: what a node reuses is at most its activation peak
 * (every block it frees and takes again was live at once with the rest of that peak).
 * Holding more only keeps an earlier node's sizes resident: with the default cap
 * (2 GiB) an f16 SD1.5 txt2img at 256^2 kept ~210 MiB of blocks that no later
 * allocation matched, 8 % of its peak RSS (issue 15). mm_plan.c says which share of
 * the peak it passes, and what that was measured to cost.
 */
void dev__blkcache_fit(struct dev__blkcache *c, size_t bytes)
{
    pthread_mutex_lock(&c->mu);
    size_t cap = c->cap;
    pthread_mutex_unlock(&c->mu);
    dev__blkcache_set_limit(c, bytes < cap ? bytes : cap);
}

void dev__blkcache_settle(struct dev__blkcache *c)
{
    pthread_mutex_lock(&c->mu);
    size_t lim = c->limit;
    pthread_mutex_unlock(&c->mu);
    dev__blkcache_set_limit(c, lim);
}

void dev__blkcache_trim(struct dev__blkcache *c)
{
    size_t lim;
    pthread_mutex_lock(&c->mu);
    lim = c->limit;
    pthread_mutex_unlock(&c->mu);
    dev__blkcache_set_limit(c, 0);
    pthread_mutex_lock(&c->mu);
    c->limit = lim;
    pthread_mutex_unlock(&c->mu);
}

size_t dev__blkcache_bytes(struct dev__blkcache *c)
{
    pthread_mutex_lock(&c->mu);
    size_t h = c->held;
    pthread_mutex_unlock(&c->mu);
    return h;
}

void dev__blkcache_free(struct dev__blkcache *c)
{
    if (!c)
        return;
    dev__blkcache_trim(c);
    pthread_mutex_destroy(&c->mu);
    xfree(c);
}
