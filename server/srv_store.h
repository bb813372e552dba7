/*
 * srv_store — the SQLite job store (WAL mode): every accepted job from the moment
 * POST /prompt answers, its status, and its history entry once finished.
 *
 * A job row goes pending -> running -> success|error|interrupted. Finished rows are the
 * history, ordered by completion (history_seq). A prompt_id may repeat (ComfyUI does not
 * check uniqueness); finishing a job drops older finished rows with the same prompt_id,
 * which is ComfyUI's "reusing an id overwrites that history entry". History is capped at
 * SRV_STORE_HISTORY_MAX entries, oldest dropped.
 *
 * Crash safety: rows are committed before /prompt answers, and each start of a job is
 * counted (attempts) and committed before it runs. At open, a row left "running" by a
 * dead process goes back to pending, in its place, unless it has started
 * SRV_STORE_MAX_ATTEMPTS times: a job that was running at every one of those crashes is
 * the likely cause, so it becomes a failed history entry whose execution_error says so,
 * and nothing crash-loops.
 *
 * Threads: any thread; one connection behind one mutex (a leaf lock).
 */
#ifndef LATENTD_SERVER_SRV_STORE_H
#define LATENTD_SERVER_SRV_STORE_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "err.h"

#define SRV_STORE_HISTORY_MAX 10000
#define SRV_STORE_MAX_ATTEMPTS 2 /* starts before a job is given up at open */

struct srv_store;

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
};

void srv_store_job_release(struct srv_store_job *j);

/* Open (creating) the database at path. NULL + message on failure. Recovers jobs left
 * running by a previous process (see above). */
struct srv_store *srv_store_open(const char *path, struct err *e);
void srv_store_close(struct srv_store *st);

/* Insert a pending job; sets j->id. */
int srv_store_add(struct srv_store *st, struct srv_store_job *j, struct err *e);

/* Call fn for every pending job in (number, prompt_id) order; fn takes ownership of the
 * job's strings (it may move them out and zero the fields). */
int srv_store_load_pending(struct srv_store *st, void (*fn)(void *user, struct srv_store_job *j),
                           void *user);

/* Largest integral non-negative number among all rows + 1 (the priority counter). */
int64_t srv_store_next_counter(struct srv_store *st);

/* The job starts now: status running, attempts + 1 (committed on return). */
int srv_store_mark_running(struct srv_store *st, int64_t id);

/* Finish a job: status_str "success"/"error"/"interrupted"; JSON texts are borrowed. */
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

#endif
