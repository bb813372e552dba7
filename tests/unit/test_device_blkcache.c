/*
 * test_device_blkcache — the cpu device's cache of freed large blocks: equal sizes
 * reuse the block, other sizes and small blocks do not, the byte limit holds (oldest
 * evicted) except for the room under the peak, which a settle gives back, dev_trim empties it, accounting (used, peak, live count) ignores cached
 * blocks, sim never caches, nothing leaks at close, and concurrent alloc/free from
 * several threads hands a block to one owner at a time.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "device.h"
#include "harness.h"
#include "pages.h"

#define MIB ((size_t)1 << 20)

static struct dev *open_cpu(size_t limit)
{
    struct dev *d = NULL;
    struct err e = {0};
    if (dev_open("cpu", 0, &d, &e) < 0) {
        ok(0, "open cpu: %s", e.msg);
        exit(1);
    }
    dev_set_cache_limit(d, limit);
    return d;
}

static void test_reuse(void)
{
    struct dev *d = open_cpu(64 * MIB);
    void *a = NULL, *b = NULL, *c = NULL, *s = NULL;
    EXPECT_OK(dev_alloc(d, 2 * MIB, &a));
    memset(a, 0x5a, 2 * MIB);
    dev_free(d, a);
    EXPECT_EQ(dev_bytes_cached(d), 2 * MIB);
    EXPECT_EQ(dev_bytes_used(d), 0);
    EXPECT_EQ(dev_alloc_count(d), 0);
    /* another size under a huge page does not take it (test_assemble: larger ones do) */
    EXPECT_OK(dev_alloc(d, 3 * MIB / 2, &c));
    ok(c != a, "1.5 MiB alloc does not get the cached 2 MiB block");
    EXPECT_EQ(dev_bytes_cached(d), 2 * MIB);
    /* the same size does, with its pages (contents are not cleared) */
    EXPECT_OK(dev_alloc(d, 2 * MIB, &b));
    ok(b == a, "2 MiB alloc reuses the cached block");
    ok(((unsigned char *)b)[12345] == 0x5a, "reused block is the same memory");
    EXPECT_EQ(dev_bytes_cached(d), 0);
    EXPECT_EQ(dev_bytes_used(d), 7 * MIB / 2);
    EXPECT_EQ(dev_bytes_peak(d), 7 * MIB / 2);
    EXPECT_EQ(dev_alloc_count(d), 2);
    /* small blocks are never cached */
    EXPECT_OK(dev_alloc(d, 4096, &s));
    dev_free(d, s);
    EXPECT_EQ(dev_bytes_cached(d), 0);
    dev_free(d, b);
    dev_free(d, c);
    EXPECT_EQ(dev_bytes_used(d), 0);
    EXPECT_EQ(dev_bytes_cached(d), 7 * MIB / 2);
    EXPECT_EQ(dev_bytes_peak(d), 7 * MIB / 2 + 4096); /* cached blocks never counted */
    dev_close(d); /* frees the cached blocks: checked by alloc_live_count in main */
}

static void test_cap(void)
{
    struct dev *d = open_cpu(5 * MIB);
    void *p[3], *q = NULL, *big = NULL;
    for (int i = 0; i < 3; i++)
        EXPECT_OK(dev_alloc(d, 2 * MIB, &p[i]));
    /* all three were live at the peak (6 MiB): the room under it holds them all,
     * above the 5 MiB limit, and live + cached never passes the peak */
    for (int i = 0; i < 3; i++) {
        dev_free(d, p[i]);
        ok(dev_bytes_used(d) + dev_bytes_cached(d) <= dev_bytes_peak(d),
           "live + cached within the peak after free %d (%zu)", i, dev_bytes_cached(d));
    }
    EXPECT_EQ(dev_bytes_cached(d), 6 * MIB);
    /* settling (a prompt's end) evicts down to the limit, oldest first */
    dev_settle_cache(d);
    EXPECT_EQ(dev_bytes_cached(d), 4 * MIB); /* p[0], the oldest, was evicted */
    EXPECT_EQ(dev_bytes_peak(d), 0);
    EXPECT_OK(dev_alloc(d, 2 * MIB, &q));
    ok(q == p[2], "newest cached block is handed out first");
    dev_free(d, q);
    EXPECT_EQ(dev_bytes_cached(d), 4 * MIB);
    /* a 6 MiB block makes a 6 MiB peak: freed, it is kept and the older blocks go, so
     * the cache holds no more than the peak */
    EXPECT_OK(dev_alloc(d, 6 * MIB, &big));
    dev_free(d, big);
    EXPECT_EQ(dev_bytes_cached(d), 6 * MIB);
    /* after a settle, the limit alone; then a peak reset with 6 MiB live: each free
     * adds its block to the room, and the cache stays within the 6 MiB that were live */
    dev_settle_cache(d);
    EXPECT_EQ(dev_bytes_cached(d), 0);
    EXPECT_OK(dev_alloc(d, 2 * MIB, &p[0]));
    EXPECT_OK(dev_alloc(d, 2 * MIB, &p[1]));
    EXPECT_OK(dev_alloc(d, 2 * MIB, &p[2]));
    dev_peak_reset(d);                 /* peak = live: no room beyond each freed block */
    for (int i = 0; i < 3; i++) {
        dev_free(d, p[i]);
        ok(dev_bytes_cached(d) <= 6 * MIB, "held after free %d (%zu)", i, dev_bytes_cached(d));
    }
    /* lowering the limit evicts down to it */
    dev_set_cache_limit(d, 3 * MIB);
    EXPECT_EQ(dev_bytes_cached(d), 2 * MIB);
    dev_set_cache_limit(d, 0);
    EXPECT_EQ(dev_bytes_cached(d), 0);
    EXPECT_OK(dev_alloc(d, 2 * MIB, &q));
    dev_free(d, q);
    EXPECT_EQ(dev_bytes_cached(d), 0); /* limit 0: caching off, whatever the room */
    dev_close(d);
}

/* A miss takes the pages of cached blocks of other sizes (moved, not copied): the new
 * block's first pages are the old block's, resident before the new block is touched;
 * a donor larger than needed is split and its rest stays cached; the live count holds. */
static void test_assemble(void)
{
    long live0 = alloc_live_count();
    struct dev *d = open_cpu(64 * MIB);
    long live1 = alloc_live_count();
    unsigned char *a = NULL, *b = NULL, *c = NULL, *r = NULL;
    EXPECT_OK(dev_alloc(d, 4 * MIB, (void **)&a));
    memset(a, 0x77, 4 * MIB);
    dev_free(d, a);
    EXPECT_EQ(dev_bytes_cached(d), 4 * MIB);
    /* 6 MiB: no cached block of that size; the 4 MiB block's pages make its start */
    EXPECT_OK(dev_alloc(d, 6 * MIB, (void **)&b));
    EXPECT_EQ(dev_bytes_cached(d), 0);
    size_t res = pages_mapped_bytes(b, 3 * MIB);
    ok(res == (size_t)-1 || res >= 3 * MIB, "the donor's pages are mapped under the new block "
       "before it is touched (%zu of %zu bytes)", res, 3 * MIB);
    ok(b[MIB] == 0x77 && b[3 * MIB] == 0x77, "the new block holds the donor's pages");
    memset(b, 1, 6 * MIB); /* the rest is fresh, writable memory */
    EXPECT_EQ(alloc_live_count(), live1 + 1);
    dev_free(d, b);
    /* a 3 MiB block takes 4 MiB of the cached 6 (+ header) block; the rest stays cached
     * as a block of its own, which a request of its exact size gets */
    EXPECT_OK(dev_alloc(d, 3 * MIB, (void **)&c));
    ok(c[100] == 1, "split donor's pages");
    size_t rest = dev_bytes_cached(d);
    ok(rest > 0 && rest < 4 * MIB, "the donor's rest is cached (%zu bytes)", rest);
    EXPECT_EQ(alloc_live_count(), live1 + 2);
    EXPECT_OK(dev_alloc(d, rest, (void **)&r));
    EXPECT_EQ(dev_bytes_cached(d), 0);
    ok(r[0] == 1, "the rest is the donor's memory");
    dev_free(d, r);
    dev_free(d, c);
    /* blocks under a huge page never take part: a 1.5 MiB block is not a donor */
    dev_trim(d);
    EXPECT_OK(dev_alloc(d, 3 * MIB / 2, (void **)&a));
    dev_free(d, a);
    EXPECT_OK(dev_alloc(d, 4 * MIB, (void **)&b));
    EXPECT_EQ(dev_bytes_cached(d), 3 * MIB / 2);
    dev_free(d, b);
    EXPECT_EQ(dev_bytes_used(d), 0);
    dev_close(d);
    EXPECT_EQ(alloc_live_count(), live0);
}

static void test_trim(void)
{
    struct dev *d = open_cpu(64 * MIB);
    long live0 = alloc_live_count();
    void *p[4];
    for (int i = 0; i < 4; i++)
        EXPECT_OK(dev_alloc(d, (size_t)(i + 1) * MIB, &p[i]));
    for (int i = 0; i < 4; i++)
        dev_free(d, p[i]);
    EXPECT_EQ(dev_bytes_cached(d), 10 * MIB);
    ok(alloc_live_count() == live0 + 4, "cached blocks are still host allocations");
    dev_trim(d);
    EXPECT_EQ(dev_bytes_cached(d), 0);
    EXPECT_EQ(alloc_live_count(), live0);
    /* caching still works after a trim */
    EXPECT_OK(dev_alloc(d, MIB, &p[0]));
    dev_free(d, p[0]);
    EXPECT_EQ(dev_bytes_cached(d), MIB);
    dev_trim(NULL);
    dev_close(d);
}

static void test_sim_never_caches(void)
{
    struct dev *d = NULL;
    struct err e = {0};
    EXPECT_OK(dev_open("sim:16M", 0, &d, &e));
    void *p = NULL;
    EXPECT_OK(dev_alloc(d, 8 * MIB, &p));
    dev_free(d, p);
    EXPECT_EQ(dev_bytes_cached(d), 0);
    EXPECT_EQ(dev_bytes_used(d), 0);
    dev_trim(d);
    dev_set_cache_limit(d, 8 * MIB);
    EXPECT_OK(dev_alloc(d, 16 * MIB, &p)); /* whole budget: nothing held back */
    dev_free(d, p);
    EXPECT_EQ(dev_bytes_cached(d), 0);
    dev_close(d);
}

static void test_env_off(void)
{
    setenv("LATENTD_CPU_BLKCACHE_MB", "0", 1);
    struct dev *d = NULL;
    struct err e = {0};
    EXPECT_OK(dev_open("cpu", 0, &d, &e));
    unsetenv("LATENTD_CPU_BLKCACHE_MB");
    void *p = NULL;
    EXPECT_OK(dev_alloc(d, 2 * MIB, &p));
    dev_free(d, p);
    EXPECT_EQ(dev_bytes_cached(d), 0);
    dev_close(d);
}

/* Threads: each block is stamped with its owner and checked before freeing, so a
 * block handed to two threads at once shows up as a wrong stamp. */
struct worker {
    struct dev *d;
    int id, bad, fails;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < 400; i++) {
        size_t n = (size_t)(1 + (i + w->id) % 3) * MIB;
        void *p = NULL;
        if (dev_alloc(w->d, n, &p) < 0) {
            w->fails++;
            continue;
        }
        int *v = p;
        for (size_t k = 0; k < n / sizeof(int); k += 1024)
            v[k] = w->id;
        for (size_t k = 0; k < n / sizeof(int); k += 1024)
            if (v[k] != w->id)
                w->bad++;
        dev_free(w->d, p);
    }
    return NULL;
}

static void test_threads(void)
{
    struct dev *d = open_cpu(8 * MIB);
    struct worker w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){ .d = d, .id = i + 1 };
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    }
    int bad = 0, fails = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        bad += w[i].bad;
        fails += w[i].fails;
    }
    ok(bad == 0 && fails == 0, "4 threads alloc/free: %d wrong stamps, %d failures", bad, fails);
    EXPECT_EQ(dev_bytes_used(d), 0);
    EXPECT_EQ(dev_alloc_count(d), 0);
    size_t pk = dev_bytes_peak(d) > 8 * MIB ? dev_bytes_peak(d) : 8 * MIB;
    ok(dev_bytes_cached(d) <= pk, "limit or peak held under threads (%zu, peak %zu)",
       dev_bytes_cached(d), dev_bytes_peak(d));
    dev_close(d);
}

int main(void)
{
    long live0 = alloc_live_count();
    test_reuse();
    EXPECT_EQ(alloc_live_count(), live0);
    test_cap();
    test_assemble();
    test_trim();
    test_sim_never_caches();
    test_env_off();
    test_threads();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
