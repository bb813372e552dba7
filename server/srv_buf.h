/*
 * srv_buf — server-side helper around util/buf.h.
 * buf_detach() re-initialises the buf, which allocates a fresh 64-byte block; callers
 * that are done with the buf must release it too. srv_buf_take does both.
 * Threads: any (a buf belongs to one thread at a time).
 */
#ifndef LATENTD_SERVER_SRV_BUF_H
#define LATENTD_SERVER_SRV_BUF_H

#include "buf.h"

/* Hand b's string to the caller (xfree it) and release b. */
static inline char *srv_buf_take(struct buf *b)
{
    char *s = buf_detach(b, NULL);
    buf_release(b);
    return s;
}

#endif
