/*
 * graph_run — the state of one prompt's execution, shared by the executor's files:
 * graph_exec.c (the prompt loop, progress hooks), graph_node.c (one node's turn),
 * graph_order.c (which nodes run and
 * in what order), graph_sig.c (signatures and the cache policy) and
 * graph_events.c (the events and history messages). Private to graph/.
 *
 * Threads: executor thread only.
 */
#ifndef LATENTD_GRAPH_GRAPH_RUN_H
#define LATENTD_GRAPH_GRAPH_RUN_H

#include "graph_internal.h"

enum xstate { X_IDLE = 0, X_RUNNING, X_FINISHED };

struct xnode {
    struct gsig sig;
    uint8_t has_sig;
    uint8_t sig_state; /* 0 not computed, 1 computing, 2 done */
    uint8_t pending, done, rank, pstate;
    uint8_t cached_at_start; /* had a cache entry after the policy ran (execution_cached) */
    int32_t order;      /* pending insertion index */
    int32_t block;      /* pending sources not yet done */
    int32_t dep_off, n_dep; /* dependents in run.deps */
    int32_t remaining;      /* dependents not yet run (--cache-none frees at 0) */
    struct value **out; /* refs held for this run, [n_out] */
    cJSON *ui;          /* borrowed from the cache entry, or owned when ui_owned */
    uint8_t ui_owned;
    struct mm_report *mem; /* owned (xmalloc): the memory manager's plans for this node */
    int n_mem;
    double pv, pmax;
};

struct heap {
    int32_t *v; /* node indices ordered by xnode.order */
    int n, cap;
};

struct run {
    struct graph_ctx *g;
    const struct graph_job *job;
    const struct graph_events *ev;
    struct graph_result *res;
    const struct gprompt *p;     /* borrowed from job->native, or from parsed */
    struct graph_prompt *parsed; /* owned: job->prompt parsed here when job->native is NULL */
    struct xnode *x;
    int32_t *deps;
    struct heap heaps[4];
    int32_t *started; /* nodes in start order (progress_state) */
    int n_started;
    int32_t *executed; /* nodes that really ran, in order (execution_error's "executed") */
    int n_executed;
    char *prompt_json; /* lazily printed PROMPT hidden input */
    struct node_text_chunk *pnginfo;
    char **pnginfo_vals;
    int n_pnginfo, pnginfo_done;
    int cur;          /* node running now, -1 none */
    int64_t last_progress_ms, last_preview_ms;
    struct node_hooks hooks; /* user = this run */
};

/* graph_events.c: events (dropped when the sink has no send) and history messages. */
int graph__want_events(const struct run *r);
/* Send {type, data} (takes `data`); `record` also appends it to the history messages. */
void graph__send_ev(struct run *r, const char *type, cJSON *data, int record);
/* Set node n's progress state and send progress_state. */
void graph__pstate_set(struct run *r, int n, enum xstate st, double v, double max);
cJSON *graph__base_data(struct run *r); /* {"prompt_id": ...} */
void graph__send_executed(struct run *r, int n, const cJSON *ui);
/* execution_error (with the node's inputs `in`, may be NULL) or execution_interrupted;
 * sets the result status. */
void graph__send_failure(struct run *r, int n, int interrupted, const char *exc_type, const char *msg,
                         struct value **in);
/* The node_hooks.image hook (user = the run): progress with a PNG for the client. */
int graph__hook_image(void *user, double value, double max, const uint8_t *px, int w, int h,
                      int c);

/* graph_sig.c: signatures and the cache policy. */
void graph__compute_sigs(struct run *r);
struct gcache_entry *graph__cached(struct run *r, int n); /* node n's cache entry or NULL */
/* Apply the cache mode before a run and set xnode.cached_at_start. */
void graph__policy_start(struct run *r);
void graph__policy_end(struct run *r);

/* graph_node.c: one node's turn (cache, bind, run, publish or failure). Returns 1
 * when the prompt must stop. */
int graph__execute_node(struct run *r, int n);
/* Drop instance state of (id, class) pairs absent from this run's prompt. */
void graph__instances_retain(struct run *r);

/* graph_order.c: the pending set and ComfyUI's order. */
int graph__build_pending(struct run *r); /* returns the number of pending nodes */
int graph__pick_next(struct run *r);     /* -1 when nothing is ready */
void graph__mark_done(struct run *r, int n);

#endif
