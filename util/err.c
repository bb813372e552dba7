#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *err_str(int code)
{
    switch (code) {
    case ERR_OK: return "OK";
    case ERR_INVALID: return "ERR_INVALID";
    case ERR_NOT_FOUND: return "ERR_NOT_FOUND";
    case ERR_IO: return "ERR_IO";
    case ERR_DEVICE_OOM: return "ERR_DEVICE_OOM";
    case ERR_BUSY: return "ERR_BUSY";
    case ERR_INTERRUPTED: return "ERR_INTERRUPTED";
    case ERR_UNSUPPORTED: return "ERR_UNSUPPORTED";
    case ERR_TOO_LARGE: return "ERR_TOO_LARGE";
    case ERR_EXISTS: return "ERR_EXISTS";
    case ERR_DENIED: return "ERR_DENIED";
    case ERR_INTERNAL: return "ERR_INTERNAL";
    }
    return "ERR_UNKNOWN";
}

int err_set(struct err *e, int code, const char *fmt, ...)
{
    if (!e || e->msg[0])
        return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    e->code = code;
    return code;
}

int err_prefix(struct err *e, const char *fmt, ...)
{
    if (!e)
        return ERR_INVALID;
    char ctx[ERR_MSG_MAX], old[ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof(ctx), fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof(old));
    /* Both parts may be long; keep as much of the context as fits, then the cause. */
    size_t n = strnlen(ctx, sizeof(e->msg) - 1);
    memcpy(e->msg, ctx, n);
    if (n + 2 < sizeof(e->msg)) {
        memcpy(e->msg + n, ": ", 2);
        n += 2;
    }
    size_t rest = strnlen(old, sizeof(old));
    if (rest > sizeof(e->msg) - 1 - n)
        rest = sizeof(e->msg) - 1 - n;
    memcpy(e->msg + n, old, rest);
    e->msg[n + rest] = '\0';
    return e->code;
}

void err_clear(struct err *e)
{
    if (e) {
        e->code = 0;
        e->msg[0] = '\0';
    }
}

void err__panic(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "PANIC %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}
