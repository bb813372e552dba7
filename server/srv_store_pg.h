/*
 * srv_store_pg — the PostgreSQL backend's private state, shared by its files:
 *   srv_store_pg.c        connections, schema, submit/claim/finish, the queue view;
 *   srv_store_pg_hist.c   history;
 *   srv_store_pg_watch.c  the watch thread: LISTEN/NOTIFY, event delivery, lease
 *                         renewal, expired-lease recovery, worker heartbeats.
 *
 * DESIGN
 * The queue is the latentd_jobs table. A worker claims the first pending row in ComfyUI's
 * order (number, prompt_id bytewise, then insertion) with FOR UPDATE SKIP LOCKED, which
 * makes it running, counts the start (attempts) and gives it a lease (lease_until, on the
 * database's clock so machines need not agree on time). The watch thread renews the lease
 * every lease/3; a renewal that finds the row no longer ours, or no renewal for 2/3 of a
 * lease, interrupts the job, so a worker cut off from the database stops before anyone
 * else may take the job over. Finishing is fenced on (id, worker): a worker whose job was
 * taken over cannot overwrite the new run's history.
 * Events go through latentd_events: ids are taken from a sequence under a transaction-level
 * advisory lock, so id order is commit order and a reader that fetches "id > last seen"
 * never skips a row that commits later. NOTIFY only says "look"; payloads (previews
 * included) stay in the table, since NOTIFY payloads are limited to 8000 bytes.
 *
 * Threads: HTTP handlers and the executor take connections from a small pool (a leaf
 * mutex + condition); the watch thread has a connection of its own (LISTEN needs it).
 */
#ifndef LATENTD_SERVER_SRV_STORE_PG_H
#define LATENTD_SERVER_SRV_STORE_PG_H

#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "srv_store.h"

#define PG_POOL 4 /* connections for HTTP handlers and the executor */

struct pg_store {
    char *url;                 /* owned */
    char worker_id[96];        /* host:pid:random, unique per process */
    int worker;                /* this process claims jobs */
    int lease_s;
    int affinity_s;            /* --affinity-wait (see pg_claim) */
    char *device;              /* owned: for the workers list */

    pthread_mutex_t pool_lock; /* leaf: guards conns' busy flags */
    pthread_cond_t pool_cond;
    PGconn *conns[PG_POOL];    /* owned */
    int busy[PG_POOL];

    atomic_llong running_id;   /* row this worker runs (0: none); the watch thread renews it */
    atomic_llong renewed_ms;   /* monotonic ms of the last successful renewal */

    pthread_t watch_thread;
    int watching;
    atomic_int stop;
    struct srv_store_hooks hooks;
    int64_t last_event;        /* watch thread only: highest event id delivered */
};

/* Take a connection from the pool (reconnecting a broken one); give it back after. */
PGconn *pg__take(struct pg_store *st);
void pg__give(struct pg_store *st, PGconn *c);

/* PQexecParams with text parameters; NULL params allowed. Logs and returns NULL unless
 * the result is TUPLES_OK or COMMAND_OK. Caller PQclear()s. */
PGresult *pg__exec(PGconn *c, const char *sql, int n, const char *const *vals);
/* One command; 0 or ERR_IO. */
int pg__cmd(PGconn *c, const char *sql, int n, const char *const *vals);

/* Publish an event on connection c (inside or outside a transaction). */
int pg__publish(PGconn *c, const char *sid, const char *type, const char *data,
                const void *bytes, size_t n);
/* Publish the cluster-wide queue count as a "status" event. */
int pg__publish_status(PGconn *c);

/* Recover running jobs whose lease ran out (the attempts rule); returns how many. */
int pg__recover_expired(struct pg_store *st, PGconn *c);

/* History (srv_store_pg_hist.c). */
cJSON *pg__history(void *ctx, long max_items, long offset);
cJSON *pg__history_one(void *ctx, const char *prompt_id);
int pg__history_clear(void *ctx);
int pg__history_delete(void *ctx, const char *prompt_id);
long pg__history_count(void *ctx);
/* Finish row id on connection c inside the caller's transaction (no fence). */
int pg__finish_row(PGconn *c, int64_t id, const char *status_str, const char *outputs,
                   const char *messages, const char *meta);

/* Watch thread (srv_store_pg_watch.c). */
int pg__watch(void *ctx, const struct srv_store_hooks *h, struct err *e);
void pg__watch_stop(void *ctx);
cJSON *pg__workers(void *ctx);

#endif
