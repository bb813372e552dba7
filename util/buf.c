#include "buf.h"
#include "alloc.h"

#include <stdio.h>
#include <string.h>

void buf_init(struct buf *b)
{
    b->cap = 64;
    b->ptr = xmalloc(b->cap);
    b->ptr[0] = '\0';
    b->len = 0;
}

void buf_release(struct buf *b)
{
    xfree(b->ptr);
    b->ptr = NULL;
    b->len = b->cap = 0;
}

void buf_reset(struct buf *b)
{
    b->len = 0;
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
    b->ptr = xrealloc(b->ptr, cap);
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
    char *s = b->ptr;
    if (len_out)
        *len_out = b->len;
    buf_init(b);
    return s;
}
