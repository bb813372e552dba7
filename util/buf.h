/*
 * buf — a growable byte/string buffer (git's strbuf).
 *
 * Invariant: ptr is never NULL and always NUL-terminated (ptr[len] == '\0'), so
 * a buf can be used as a C string at any time. An empty buf (after buf_init,
 * buf_release or buf_detach) holds no memory: it points at a shared empty string
 * until it first grows, so dropping it without buf_release leaks nothing.
 * Not thread-safe; a buf belongs to one thread at a time.
 */
#ifndef LATENTD_UTIL_BUF_H
#define LATENTD_UTIL_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct buf {
    char *ptr;   /* owned; never NULL after buf_init */
    size_t len;  /* bytes used, excluding the terminating NUL */
    size_t cap;  /* bytes allocated; 0 while ptr is the shared empty string */
};

void buf_init(struct buf *b);
void buf_release(struct buf *b);
void buf_reset(struct buf *b); /* len = 0, memory kept */
void buf_grow(struct buf *b, size_t extra);
void buf_add(struct buf *b, const void *data, size_t n);
void buf_adds(struct buf *b, const char *s);
void buf_addc(struct buf *b, char c);
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_vprintf(struct buf *b, const char *fmt, va_list ap);

/* Append the whole content of the file at `path` (git's strbuf_read_file). Returns 0,
 * or -1 with errno set when it cannot be opened or read (b keeps what was read). */
int buf_read_file(struct buf *b, const char *path);

/* Hand the string to the caller (who frees it with xfree) and leave b empty (no
 * memory held, so no buf_release is needed afterwards). */
char *buf_detach(struct buf *b, size_t *len_out);

#endif
