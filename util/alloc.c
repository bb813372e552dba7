#include "alloc.h"
#include "err.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

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

long alloc_live_count(void)
{
    return atomic_load(&live);
}
