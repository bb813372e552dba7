/*
 * srv_queue — the in-memory prompt queue: pending jobs ordered by (number, prompt_id),
 * at most one running job, and the priority counter (comfy-api.md §3.1, §3.3).
 *
 * The queue mirrors the job store's pending/running rows; the store is the durable copy
 * and rebuilds the queue at start. A job here is immutable once pushed, except that the
 * executor moves it from pending to running.
 * Threads: any thread; one mutex (a leaf lock) plus a condition variable the executor
 * waits on.
 */
#ifndef LATENTD_SERVER_SRV_QUEUE_H
#define LATENTD_SERVER_SRV_QUEUE_H

#include <pthread.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "graph.h"

struct srv_job {
    int64_t row_id;     /* job store row */
    char *prompt_id;    /* owned */
    double number;      /* sort key */
    char *number_text;  /* owned: JSON literal, "3" or "7.0" */
    cJSON *prompt;      /* owned: coerced prompt */
    struct graph_prompt *native; /* owned: `prompt` in native form (borrows it) */
    cJSON *extra_data;  /* owned: object, includes client_id */
    cJSON *outputs;     /* owned: array of output node ids */
    char *client_id;    /* owned or NULL */
};

void srv_job_free(struct srv_job *j);

struct srv_queue {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct srv_job **pending; /* owned; sorted by (number, prompt_id) */
    int n_pending, cap_pending;
    struct srv_job *running;  /* owned by the executor while running; listed here for /queue */
    int64_t counter;          /* next priority number */
    int stopping;             /* set by srv_queue_stop */
    int wake;                 /* a wake-up without a job (e.g. deferred /free) */
};

void srv_queue_init(struct srv_queue *q, int64_t counter);
void srv_queue_release(struct srv_queue *q);

/* Take the next priority number (counter++) or its negation for `front`. */
int64_t srv_queue_take_number(struct srv_queue *q, int front);

/*
 * Push a job (ownership passes to the queue). Returns queue_remaining after the push.
 * `notify` (may be NULL) is called with that count while the queue lock is still held,
 * before the executor can pop the job: POST /prompt uses it to queue its status broadcast
 * so that it cannot arrive after the executor's messages for the same job (ComfyUI calls
 * queue_updated() under its queue mutex too). The callback may only take leaf locks that
 * are never held while taking the queue lock (the WS inbox lock).
 */
int srv_queue_push(struct srv_queue *q, struct srv_job *j, void (*notify)(void *user, int remaining),
                   void *user);

/*
 * Executor thread: wait until a job is pending, the queue stops, or srv_queue_wake is
 * called. Returns the job (now running; still owned by the queue until
 * srv_queue_finish_running) or NULL on stop/wake.
 */
struct srv_job *srv_queue_wait_pop(struct srv_queue *q);
/* Executor thread: the running job leaves the queue; returns it (caller frees). */
struct srv_job *srv_queue_finish_running(struct srv_queue *q);

void srv_queue_wake(struct srv_queue *q);

/*
 * Executor thread, shared store (the queue is in the database; this one only lists the
 * job this process runs): wait up to timeout_ms for srv_queue_wake or srv_queue_stop.
 * Returns 1 when woken (the wake is consumed), 0 on timeout, -1 when stopping.
 */
int srv_queue_wait_wake(struct srv_queue *q, int timeout_ms);
/* Executor thread, shared store: `j` (claimed from the store) runs now; the queue owns
 * it until srv_queue_finish_running. */
void srv_queue_set_running(struct srv_queue *q, struct srv_job *j);
/* Row id of the running job, 0 when none. */
int64_t srv_queue_running_row(struct srv_queue *q);
void srv_queue_stop(struct srv_queue *q);

/* pending + running */
int srv_queue_remaining(struct srv_queue *q);

/* Copy of the running job's prompt_id (caller frees with xfree) or NULL. */
char *srv_queue_running_id(struct srv_queue *q);

/*
 * Remove pending jobs: all (clear) and/or those whose prompt_id is in `ids` (array of
 * strings; may be NULL). Row ids of removed jobs go to *rows (caller frees with xfree).
 * Returns the number removed.
 */
int srv_queue_remove(struct srv_queue *q, int clear, const cJSON *ids, int64_t **rows);

/* {"queue_running": [...], "queue_pending": [...]} with 5-element items. */
cJSON *srv_queue_json(struct srv_queue *q);

/* The 5-element positional item for a job. */
cJSON *srv_job_item_json(const struct srv_job *j);

#endif
