/*
 * alloc — the project's host allocation wrappers.
 *
 * Host malloc failure is fatal (redis zmalloc, git xmalloc): these never return
 * NULL for a non-zero size. Every host allocation in latentd goes through them
 * so that tests can assert that nothing is left live (alloc_live_count()).
 *
 * Thread safety: all functions may be called from any thread.
 */
#ifndef LATENTD_UTIL_ALLOC_H
#define LATENTD_UTIL_ALLOC_H

#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);       /* xrealloc(NULL, n) == xmalloc(n) */
char *xstrdup(const char *s);            /* caller frees with xfree */
char *xstrndup(const char *s, size_t n); /* at most n bytes, always NUL-terminated */
void xfree(void *p);                     /* xfree(NULL) is a no-op */

/* Aligned allocation (align: power of two >= sizeof(void *)); free with xfree_aligned. */
void *xmalloc_aligned(size_t align, size_t n);
void xfree_aligned(void *p);

/* Number of blocks allocated through these wrappers and not yet freed. */
long alloc_live_count(void);

#endif
