/*
 * err — error codes and user-facing error messages.
 *
 * Two channels, kept apart (STYLE.md "Errors"):
 *   - expected failures return an int: 0 on success or a negative ERR_* code;
 *     when the cause is user input or a file, a `struct err` carries a message
 *     written in git's style (lowercase, subject quoted, no full stop);
 *   - broken invariants call ASSERT / PANIC, which log and abort.
 *
 * Thread safety: every function here may be called from any thread.
 */
#ifndef LATENTD_UTIL_ERR_H
#define LATENTD_UTIL_ERR_H

#include <stddef.h>

enum err_code {
    ERR_OK = 0,
    ERR_INVALID = -1,      /* bad argument or malformed input */
    ERR_NOT_FOUND = -2,    /* file, key or id does not exist */
    ERR_IO = -3,           /* read/write/mmap failed */
    ERR_DEVICE_OOM = -4,   /* device allocation over budget: a normal result */
    ERR_BUSY = -5,         /* resource in use, try later */
    ERR_INTERRUPTED = -6,  /* the user asked us to stop */
    ERR_UNSUPPORTED = -7,  /* valid but not something we implement */
    ERR_TOO_LARGE = -8,    /* size limit exceeded */
    ERR_EXISTS = -9,       /* already present */
    ERR_DENIED = -10,      /* forbidden (path escapes its root, ...) */
    ERR_INTERNAL = -11,    /* unexpected failure of a library we call */
};

#define ERR_MSG_MAX 512

/* A message for the user, filled by the function that failed first. */
struct err {
    int code;               /* ERR_* (0 while unset) */
    char msg[ERR_MSG_MAX];  /* NUL-terminated, empty while unset */
};

/* Name of a code ("ERR_INVALID"); never NULL. */
const char *err_str(int code);

/*
 * Record a failure in `e` (which may be NULL) and return `code`, so that call
 * sites read `return err_set(e, ERR_IO, "cannot open '%s'", path);`.
 * The first message set wins: callers higher up may only add context with
 * err_prefix().
 */
int err_set(struct err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepend "ctx: " to the message already in `e`. Returns e->code. */
int err_prefix(struct err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reset to the "no error" state. */
void err_clear(struct err *e);

/* Log "assertion failed" with the location and abort. Never for user input. */
#define ASSERT(x)                                                                  \
    do {                                                                           \
        if (!(x))                                                                  \
            err__panic(__FILE__, __LINE__, "assertion failed: %s", #x);           \
    } while (0)
#define PANIC(...) err__panic(__FILE__, __LINE__, __VA_ARGS__)

void err__panic(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));

#endif
