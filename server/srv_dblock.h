/*
 * srv_dblock — one latentd per SQLite job database.
 *
 * Two servers on one database would both rebuild and run the queue (duplicate outputs after
 * a crash). The store takes a POSIX write lock on "<database>.lock" when it opens and
 * keeps it for its life; a second process finds the lock held and refuses to start, naming
 * the holder's pid (F_GETLK). The kernel drops the lock when the holder dies, so a crash
 * never leaves a stale lock behind. Several cooperating processes are the PostgreSQL
 * store's job, not this one's.
 *
 * POSIX locks belong to the process: a second open in the same process succeeds, and
 * closing any descriptor of the lock file releases it, so take it once per process (the
 * store does). Main thread, at start and exit.
 */
#ifndef LATENTD_SERVER_SRV_DBLOCK_H
#define LATENTD_SERVER_SRV_DBLOCK_H

#include "err.h"

/* Take the lock for `db_path` and keep its descriptor in *fd (-1 for an in-memory
 * database, which needs none). Returns 0, ERR_BUSY with a message naming the process that
 * holds it, or ERR_IO. */
int srv_dblock_take(const char *db_path, int *fd, struct err *e);

/* Drop the lock (close the descriptor); -1 is a no-op. */
void srv_dblock_release(int fd);

#endif
