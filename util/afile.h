/*
 * afile — replace a file atomically: write a hidden temporary beside it, rename over it on
 * success, remove the temporary on failure. A reader (or /view) sees the old file or the
 * whole new one, never a 0-byte or half-written file, also when the disk fills up mid-way
 * (the write or the close fails and nothing is left behind).
 *
 *   struct afile af;
 *   if (afile_open(&af, path, e) < 0) return e->code;
 *   fwrite(..., af.fp);              (or hand af.fp to libpng)
 *   return afile_commit(&af, e);     (or afile_abort(&af) on your own error)
 *
 * The temporary is "<dir>/.<name>.tmp-<pid>-<n>": a dot name, so folder listings that skip
 * hidden files never show it. Not durable across power loss (no fsync): outputs are
 * reproducible, and a crash leaves at worst a stale dot file. Any thread.
 */
#ifndef LATENTD_UTIL_AFILE_H
#define LATENTD_UTIL_AFILE_H

#include <stddef.h>
#include <stdio.h>

#include "err.h"

struct afile {
    FILE *fp; /* open for writing ("wb") between afile_open and commit/abort */
    char *_tmp;
    char *_path;
};

/* Create the temporary. Returns 0, or ERR_IO with a message naming `path`. */
int afile_open(struct afile *af, const char *path, struct err *e);

/* Flush, close and rename over `path`. On any failure the temporary is removed and
 * ERR_IO returned with the reason (e.g. "No space left on device"). af is released either
 * way. */
int afile_commit(struct afile *af, struct err *e);

/* Close and remove the temporary; `path` is untouched. NULL-safe on a released afile. */
void afile_abort(struct afile *af);

/* afile_open + one fwrite + afile_commit. On failure errno holds the cause, for callers
 * that must not show `path` (an absolute server path) to API clients. */
int afile_write(const char *path, const void *data, size_t n, struct err *e);

#endif
