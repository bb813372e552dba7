/*
 * srv_store — the job store: every accepted job from the moment POST /prompt answers, its
 * status, and its history entry once finished. One interface, two backends chosen at run
 * time by --database-url (srv_store_open):
 *
 *   sqlite:///PATH or PATH   srv_store_sqlite.c — one process owns the file (srv_dblock);
 *                            the queue lives in memory (srv_queue) and is rebuilt from the
 *                            pending rows at start.
 *   postgresql://… (postgres://…)
 *                            srv_store_pg*.c — any number of processes share one database;
 *                            the queue IS the table: workers claim rows, fronts read it.
 *
 * A job row goes pending -> running -> success|error|interrupted. Finished rows are the
 * history, ordered by completion (history_seq). A prompt_id may repeat (ComfyUI does not
 * check uniqueness); finishing a job drops older finished rows with the same prompt_id,
 * which is ComfyUI's "reusing an id overwrites that history entry". History is capped at
 * SRV_STORE_HISTORY_MAX entries, oldest dropped.
 *
 * Crash safety (both backends): rows are committed before /prompt answers, and each start
 * of a job is counted (attempts) and committed before it runs. A job left running by a
 * dead process goes back to pending, in its place, unless it has started
 * SRV_STORE_MAX_ATTEMPTS times: a job that was running at every one of those deaths is the
 * likely cause, so it becomes a failed history entry whose execution_error says so, and
 * nothing crash-loops. SQLite detects the death at the next start; PostgreSQL by lease
 * expiry (a worker renews its job's lease every lease/3 while it runs; any live process
 * recovers a row whose lease has run out).
 *
 * Threads: any thread, unless a member says otherwise.
 */
#ifndef LATENTD_SERVER_SRV_STORE_H
#define LATENTD_SERVER_SRV_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "err.h"

#define SRV_STORE_HISTORY_MAX 10000
#define SRV_STORE_MAX_ATTEMPTS 2 /* starts before a job is given up */
#define SRV_STORE_LEASE_S 30     /* default job lease of a shared store (--lease-seconds) */
#define SRV_STORE_AFFINITY_S 10  /* default --affinity-wait (model affinity), seconds */

/* A job as stored; strings are JSON text unless noted. */
struct srv_store_job {
    int64_t id;               /* row id, set by srv_store_add */
    char *prompt_id;          /* plain string */
    double number;            /* sort key */
    char *number_text;        /* JSON literal as clients see it: "3" or "7.0" */
    char *prompt;             /* JSON object (coerced) */
    char *extra_data;         /* JSON object */
    char *outputs_to_execute; /* JSON array */
    char *client_id;          /* plain string or NULL */
    char *models;             /* graph_prompt_model_files; NULL = none (shared stores:
                                 model affinity; SQLite ignores it) */
};

void srv_store_job_release(struct srv_store_job *j);

/*
 * What a shared store tells the process from its watch thread. Each callback runs on that
 * thread and must not block for long (hand over and return).
 */
struct srv_store_hooks {
    void *user;
    const char *device; /* borrowed: this process's device, for the workers list */
    /* An event for WebSocket clients (sid NULL = everyone): JSON `data` text, or for a
     * "preview" a JSON header {image_type, node_id, prompt_id} plus the image bytes.
     * Delivered in the order they were published, cluster-wide. */
    void (*event)(void *user, const char *sid, const char *type, const char *data,
                  const void *bytes, size_t n);
    /* Someone asked to interrupt the job in row `id` (maybe not ours: check). */
    void (*interrupt)(void *user, int64_t id);
    /* New pending jobs may be there: wake the worker. */
    void (*jobs)(void *user);
};

/*
 * A backend. Members above the line are required; those below it are NULL for a store
 * that one process owns (its queue is srv_queue in memory) and all set for a shared one.
 */
struct srv_store_ops {
    const char *name; /* "sqlite", "postgresql" */
    void (*close)(void *ctx);
    int (*add)(void *ctx, struct srv_store_job *j, struct err *e);
    /* Optional (NULL: the queue is not rebuilt in memory): see srv_store_load_pending. */
    int (*load_pending)(void *ctx, void (*fn)(void *user, struct srv_store_job *j), void *user);
    int64_t (*next_counter)(void *ctx);
    int (*mark_running)(void *ctx, int64_t id);
    int (*finish)(void *ctx, int64_t id, const char *status_str, const char *outputs,
                  const char *messages, const char *meta);
    int (*delete_pending)(void *ctx, int64_t id);
    cJSON *(*history)(void *ctx, long max_items, long offset);
    cJSON *(*history_one)(void *ctx, const char *prompt_id);
    int (*history_clear)(void *ctx);
    int (*history_delete)(void *ctx, const char *prompt_id);
    long (*history_count)(void *ctx);
    /* ---- shared stores only ---- */
    int64_t (*take_number)(void *ctx, int front);
    int (*claim)(void *ctx, struct srv_store_job *out);
    int (*remove_pending)(void *ctx, int clear, const cJSON *ids);
    cJSON *(*queue_json)(void *ctx);
    int (*remaining)(void *ctx);
    int (*interrupt)(void *ctx, const char *prompt_id);
    int (*publish)(void *ctx, const char *sid, const char *type, const char *data,
                   const void *bytes, size_t n);
    cJSON *(*workers)(void *ctx);
    int (*watch)(void *ctx, const struct srv_store_hooks *h, struct err *e);
    void (*unwatch)(void *ctx); /* stop the watch thread; no hook runs after it returns */
    int (*file_put)(void *ctx, const char *type, const char *subfolder, const char *name,
                    const void *bytes, size_t n);
    int (*file_get)(void *ctx, const char *type, const char *subfolder, const char *name,
                    void **bytes, size_t *n);
};

struct srv_store {
    const struct srv_store_ops *ops; /* static table of the backend */
    void *ctx;                       /* owned: the backend's state */
};

struct srv_store_options {
    int worker;           /* this process runs jobs (--no-worker clears it); shared stores */
    int lease_s;          /* job lease (--lease-seconds); 0 = SRV_STORE_LEASE_S */
    int affinity_s;       /* --affinity-wait: how long a pending job may wait for a live
                             worker that holds its models (0: plain FIFO); < 0 = default */
};

/* 1 when `url` names a PostgreSQL database (postgresql:// or postgres://). */
int srv_store_url_is_pg(const char *url);

/*
 * Open (creating or migrating the schema) the store `url` names. NULL + message on
 * failure. SQLite recovers jobs left running by a previous process at once; PostgreSQL
 * sweeps expired leases at open and then from its watch thread. Main thread.
 * srv_store_open uses default options (a worker, default lease).
 */
struct srv_store *srv_store_open_opts(const char *url, const struct srv_store_options *o,
                                      struct err *e);
struct srv_store *srv_store_open(const char *url, struct err *e);
void srv_store_close(struct srv_store *st);

/* 1 when several processes share this store (the queue is in the database). */
int srv_store_shared(const struct srv_store *st);

/* Insert a pending job; sets j->id. A shared store also publishes the new queue count as
 * a "status" event in the same transaction, so no worker's events for the job can come
 * before it. */
int srv_store_add(struct srv_store *st, struct srv_store_job *j, struct err *e);

/* Call fn for every pending job in (number, prompt_id) order; fn takes ownership of the
 * job's strings (it may move them out and zero the fields). A shared store has no
 * in-memory queue to rebuild: returns 0 at once. */
int srv_store_load_pending(struct srv_store *st, void (*fn)(void *user, struct srv_store_job *j),
                           void *user);

/* Largest integral non-negative number among all rows + 1 (the priority counter). */
int64_t srv_store_next_counter(struct srv_store *st);

/* The job starts now: status running, attempts + 1 (committed on return). A shared
 * store did this when the job was claimed: no-op. */
int srv_store_mark_running(struct srv_store *st, int64_t id);

/* Finish a job: status_str "success"/"error"/"interrupted"; JSON texts are borrowed. A
 * shared store only finishes a job this worker still holds (ERR_BUSY otherwise: its lease
 * ran out and another process took it over). */
int srv_store_finish(struct srv_store *st, int64_t id, const char *status_str,
                     const char *outputs, const char *messages, const char *meta);

/* Remove a pending row (queue delete/clear). */
int srv_store_delete_pending(struct srv_store *st, int64_t id);

/*
 * History as ComfyUI's object {prompt_id: entry}, oldest first. max_items < 0 = no limit,
 * offset < 0 = none (then max_items takes the newest). Caller frees with cJSON_Delete.
 */
cJSON *srv_store_history(struct srv_store *st, long max_items, long offset);
/* {prompt_id: entry} or {} when unknown. */
cJSON *srv_store_history_one(struct srv_store *st, const char *prompt_id);
int srv_store_history_clear(struct srv_store *st);
int srv_store_history_delete(struct srv_store *st, const char *prompt_id);

/* Number of history entries. */
long srv_store_history_count(struct srv_store *st);

/* ---- internal to the backends (srv_store*.c) ---- */

/* ComfyUI's history messages for a job that never finished: execution_start, then an
 * execution_error without a node saying `why`. Caller frees with cJSON_free. */
char *srv_store__stopped_messages(const char *prompt_id, int64_t started_ms, const char *why);
/* extra_data without the API-node secrets, which never go into history (comfy-api
 * §3.5); NULL when `extra` is not JSON. Caller frees with xfree. */
char *srv_store__strip_secrets(const char *extra);
/* Add ComfyUI's history entry for one row to obj {prompt_id: entry}, replacing an older
 * one with that id. col: prompt_id, number_text, prompt, extra_data, outputs_to_execute,
 * status, outputs, messages, meta (texts, borrowed; NULL allowed but for prompt_id). */
void srv_store__history_entry(cJSON *obj, const char *const col[9]);

extern const struct srv_store_ops srv_store__sqlite_ops;
void *srv_store__sqlite_open(const char *path, struct err *e);
extern const struct srv_store_ops srv_store__pg_ops;
void *srv_store__pg_open(const char *url, const struct srv_store_options *o, struct err *e);

#endif
