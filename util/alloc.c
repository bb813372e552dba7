#include "alloc.h"
#include "err.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

static atomic_long live;

static void *check(void *p, size_t n)
{
    if (!p && n)
        PANIC("out of host memory allocating %zu bytes", n);
    return p;
}

void *xmalloc(size_t n)
{
    void *p = check(malloc(n ? n : 1), n);
    atomic_fetch_add(&live, 1);
    return p;
}

void *xcalloc(size_t count, size_t size)
{
    void *p = check(calloc(count ? count : 1, size ? size : 1), count * size);
    atomic_fetch_add(&live, 1);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    if (!p)
        return xmalloc(n);
    return check(realloc(p, n ? n : 1), n);
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *d = xmalloc(len + 1);
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

void xfree(void *p)
{
    if (!p)
        return;
    atomic_fetch_sub(&live, 1);
    free(p);
}

void *xmalloc_aligned(size_t align, size_t n)
{
    void *p = NULL;
    n = (n + align - 1) & ~(align - 1);
    if (posix_memalign(&p, align, n ? n : align) != 0)
        PANIC("out of host memory allocating %zu bytes aligned to %zu", n, align);
    atomic_fetch_add(&live, 1);
    return p;
}

void xfree_aligned(void *p)
{
    xfree(p);
}

/* ---- fallible allocation for request-sized buffers ------------------------------- */

/* The first unsigned number after `key` in a small text file, or -1. */
static long long read_number(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[256];
    long long v = -1;
    size_t klen = key ? strlen(key) : 0;
    while (v < 0 && fgets(line, sizeof(line), f))
        if (!key || strncmp(line, key, klen) == 0)
            if (sscanf(line + klen, " %lld", &v) != 1)
                v = -1; /* "max" (no cgroup limit) or a line we do not know */
    fclose(f);
    return v;
}

/* Room left under the cgroup v2 memory limit, or SIZE_MAX (no limit, or cgroup v1). */
static size_t cgroup_room(void)
{
    char rel[512] = "", path[600];
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f) {
        char line[600];
        while (fgets(line, sizeof(line), f))
            if (strncmp(line, "0::", 3) == 0 && sscanf(line + 3, "%511s", rel) == 1)
                break;
        fclose(f);
    }
    snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.max", strcmp(rel, "/") ? rel : "");
    long long max = read_number(path, NULL);
    if (max < 0)
        max = read_number("/sys/fs/cgroup/memory.max", NULL); /* a namespaced container */
    if (max < 0)
        return SIZE_MAX;
    snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.current", strcmp(rel, "/") ? rel : "");
    long long cur = read_number(path, NULL);
    if (cur < 0)
        cur = read_number("/sys/fs/cgroup/memory.current", NULL);
    return cur >= 0 && cur < max ? (size_t)(max - cur) : 0;
}

/* Room left under RLIMIT_AS, or SIZE_MAX when unlimited. */
static size_t rlimit_room(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return SIZE_MAX;
    long long pages = read_number("/proc/self/statm", NULL);
    long psz = sysconf(_SC_PAGESIZE);
    size_t used = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : 0;
    return rl.rlim_cur > used ? (size_t)(rl.rlim_cur - used) : 0;
}

size_t alloc_host_available(void)
{
    long long kb = read_number("/proc/meminfo", "MemAvailable:");
    size_t avail = kb >= 0 ? (size_t)kb * 1024 : SIZE_MAX;
    size_t cg = cgroup_room(), as = rlimit_room();
    avail = cg < avail ? cg : avail;
    return as < avail ? as : avail;
}

const char *alloc_fmt_bytes(char out[32], size_t bytes)
{
    if (bytes >= ((size_t)1 << 30))
        snprintf(out, 32, "%.2f GiB", (double)bytes / (1 << 30));
    else
        snprintf(out, 32, "%.2f MiB", (double)bytes / (1 << 20));
    return out;
}

static int oom(size_t bytes, size_t avail, struct err *e)
{
    char want[32], have[32];
    if (avail == SIZE_MAX)
        return err_set(e, ERR_DEVICE_OOM,
                       "Allocation on device cpu failed (out of memory): tried to allocate %s "
                       "(%zu bytes)",
                       alloc_fmt_bytes(want, bytes), bytes);
    return err_set(e, ERR_DEVICE_OOM,
                   "Allocation on device cpu would exceed available memory: tried to allocate "
                   "%s (%zu bytes) with %s available",
                   alloc_fmt_bytes(want, bytes), bytes, alloc_fmt_bytes(have, avail));
}

int alloc_host_check(size_t bytes, struct err *e)
{
    if (bytes < ALLOC_CHECK_MIN)
        return 0;
    size_t avail = alloc_host_available();
    if (avail == SIZE_MAX)
        return bytes <= SIZE_MAX / 2 ? 0 : oom(bytes, avail, e);
    if (avail < ALLOC_HOST_MARGIN || bytes > avail - ALLOC_HOST_MARGIN)
        return oom(bytes, avail, e);
    return 0;
}

int alloc_host_check_n(size_t count, size_t size, struct err *e)
{
    if (size && count > SIZE_MAX / size)
        return oom(SIZE_MAX, alloc_host_available(), e);
    return alloc_host_check(count * size, e);
}

int xtry_malloc(size_t n, void **out, struct err *e)
{
    int rc;
    *out = NULL;
    if ((rc = alloc_host_check(n, e)) < 0)
        return rc;
    if (!(*out = malloc(n ? n : 1)))
        return oom(n, SIZE_MAX, e);
    atomic_fetch_add(&live, 1);
    return 0;
}

int xtry_calloc(size_t count, size_t size, void **out, struct err *e)
{
    int rc;
    *out = NULL;
    if ((rc = alloc_host_check_n(count, size, e)) < 0)
        return rc;
    if (!(*out = calloc(count ? count : 1, size ? size : 1)))
        return oom(count * size, SIZE_MAX, e);
    atomic_fetch_add(&live, 1);
    return 0;
}

int xtry_malloc_aligned(size_t align, size_t n, void **out, struct err *e)
{
    int rc;
    *out = NULL;
    if (n > SIZE_MAX - align)
        return oom(n, SIZE_MAX, e);
    n = (n + align - 1) & ~(align - 1);
    if ((rc = alloc_host_check(n, e)) < 0)
        return rc;
    if (posix_memalign(out, align, n ? n : align) != 0) {
        *out = NULL;
        return oom(n, SIZE_MAX, e);
    }
    atomic_fetch_add(&live, 1);
    return 0;
}

/* What xtry_map maps for n bytes: whole huge pages from ALLOC_HUGE up, else whole pages. */
size_t xmap_len(size_t n)
{
    size_t a = n >= ALLOC_HUGE ? ALLOC_HUGE : (size_t)sysconf(_SC_PAGESIZE);
    return (n + a - 1) & ~(a - 1);
}

int xtry_map(size_t n, void **out, struct err *e)
{
    int rc;
    *out = NULL;
    if (n > SIZE_MAX / 2)
        return oom(n, SIZE_MAX, e);
    if ((rc = alloc_host_check(n, e)) < 0)
        return rc;
    size_t len = xmap_len(n ? n : 1), slack = n >= ALLOC_HUGE ? ALLOC_HUGE : 0;
    unsigned char *m = mmap(NULL, len + slack, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return oom(n, SIZE_MAX, e);
    unsigned char *p = m;
    if (slack) { /* keep the aligned len bytes, unmap the ends */
        p = (unsigned char *)(((uintptr_t)m + ALLOC_HUGE - 1) & ~(uintptr_t)(ALLOC_HUGE - 1));
        if (p > m)
            munmap(m, (size_t)(p - m));
        if (p + len < m + len + slack)
            munmap(p + len, (size_t)(m + len + slack - (p + len)));
#ifdef MADV_HUGEPAGE
        madvise(p, len, MADV_HUGEPAGE); /* advice only: failure leaves small pages */
#endif
    }
    *out = p;
    atomic_fetch_add(&live, 1);
    return 0;
}

void xunmap(void *p, size_t n)
{
    if (!p)
        return;
    if (munmap(p, xmap_len(n ? n : 1)) != 0)
        PANIC("munmap(%p, %zu) failed", p, n);
    atomic_fetch_sub(&live, 1);
}

int xmap_move(void *dst, void *src, size_t len, int whole)
{
    if (mremap(src, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, dst) == MAP_FAILED)
        return -1;
    if (whole)
        atomic_fetch_sub(&live, 1);
    return 0;
}

int xmap_grow(void **p, size_t *n, size_t want, struct err *e)
{
    void *q;
    int rc = xtry_map(want, &q, e);
    if (rc < 0)
        return rc;
    if (*p) {
        size_t old = xmap_len(*n); /* page-aligned; want > *n keeps it within q's span */
        if (old > xmap_len(want) || xmap_move(q, *p, old, 1) < 0)
            xunmap(*p, *n);
    }
    *p = q;
    *n = want;
    return 0;
}

long alloc_live_count(void)
{
    return atomic_load(&live);
}
