#include "buf.h"
#include "alloc.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* An empty buf points here until it first grows (git's strbuf_slopbuf), so that
 * buf_init and buf_detach allocate nothing and a detached buf needs no release. */
static char buf__slop[1];

void buf_init(struct buf *b)
{
    b->ptr = buf__slop;
    b->len = b->cap = 0;
}

void buf_release(struct buf *b)
{
    if (b->cap)
        xfree(b->ptr);
    buf_init(b);
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    if (b->cap)
        b->ptr[0] = '\0';
}

void buf_grow(struct buf *b, size_t extra)
{
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap * 2;
    if (b->cap) {
        b->ptr = xrealloc(b->ptr, cap);
    } else {
        b->ptr = xmalloc(cap);
        b->ptr[0] = '\0';
    }
    b->cap = cap;
}

void buf_add(struct buf *b, const void *data, size_t n)
{
    buf_grow(b, n);
    memcpy(b->ptr + b->len, data, n);
    b->len += n;
    b->ptr[b->len] = '\0';
}

void buf_adds(struct buf *b, const char *s)
{
    buf_add(b, s, strlen(s));
}

void buf_addc(struct buf *b, char c)
{
    buf_add(b, &c, 1);
}

void buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    va_list cp;
    buf_grow(b, 64); /* never format into the shared empty string */
    va_copy(cp, ap);
    int n = vsnprintf(b->ptr + b->len, b->cap - b->len, fmt, cp);
    va_end(cp);
    if (n < 0)
        return;
    if ((size_t)n >= b->cap - b->len) {
        buf_grow(b, (size_t)n);
        vsnprintf(b->ptr + b->len, b->cap - b->len, fmt, ap);
    }
    b->len += (size_t)n;
}

void buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    buf_vprintf(b, fmt, ap);
    va_end(ap);
}

char *buf_detach(struct buf *b, size_t *len_out)
{
    if (!b->cap)
        buf_grow(b, 0); /* the caller always gets memory it can xfree */
    char *s = b->ptr;
    if (len_out)
        *len_out = b->len;
    buf_init(b);
    return s;
}

int buf_read_file(struct buf *b, const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return -1;
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), fp)) > 0)
        buf_add(b, chunk, n);
    int failed = ferror(fp);
    fclose(fp);
    if (failed) {
        errno = EIO;
        return -1;
    }
    return 0;
}
