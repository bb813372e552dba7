/*
 * The executor (comfy-api.md §6): runs one prompt on the executor thread. It
 * computes signatures and applies the cache policy (graph_sig.c), builds the
 * pending set and picks nodes in ComfyUI's order (graph_order.c), gives each node
 * its turn (graph_node.c: cache, bind, run, publish) and reports through
 * graph_events.c. It runs the native prompt validation made (graph_job.native).
 * Interrupts are checked before each node starts and at every progress call.
 */
#include <string.h>

#include "alloc.h"
#include "clock.h"
#include "graph_run.h"
#include "memmgr.h"
#include "node_imageio.h"

#define PROGRESS_ALL_STEPS 100      /* loops this long report every step */
#define PROGRESS_MIN_INTERVAL_MS 10 /* throttle for progress events of longer loops */
#define PREVIEW_MIN_INTERVAL_MS 100 /* throttle for preview images */

static int hook_interrupted(void *user)
{
    struct run *r = user;
    return atomic_load(&r->g->interrupt) != 0;
}

static int hook_progress(void *user, double value, double max, const uint8_t *rgb, int w, int h)
{
    struct run *r = user;
    if (atomic_load(&r->g->interrupt))
        return ERR_INTERRUPTED;
    int n = r->cur;
    if (n < 0)
        return 0;
    int64_t now = clock_mono_ms();
    int last = value >= max;
    /* Throttle: a fast loop must not flood the socket. Up to PROGRESS_ALL_STEPS
     * steps every one goes out, as ComfyUI sends them (samplers: clients may count
     * them); longer loops send the first, the last, and one per interval. */
    int all = max <= PROGRESS_ALL_STEPS;
    if (!all && !last && r->last_progress_ms && now - r->last_progress_ms < PROGRESS_MIN_INTERVAL_MS)
        return 0;
    r->last_progress_ms = now;
    /* ComfyUI's order: progress_state, then the preview, then progress. */
    graph__pstate_set(r, n, X_RUNNING, value, max);
    if (rgb && r->g->cfg.preview_method != GRAPH_PREVIEW_NONE && r->ev && r->ev->preview &&
        (all || last || !r->last_preview_ms || now - r->last_preview_ms >= PREVIEW_MIN_INTERVAL_MS)) {
        r->last_preview_ms = now;
        uint8_t *jpg = NULL;
        size_t nb = 0;
        if (node_imageio_preview_jpeg(rgb, w, h, r->g->cfg.preview_size, &jpg, &nb) == 0) {
            r->ev->preview(r->ev->user, 1, jpg, nb, r->p->nodes[n].id, r->job->prompt_id);
            xfree(jpg);
        }
    }
    if (graph__want_events(r)) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddNumberToObject(d, "value", value);
        cJSON_AddNumberToObject(d, "max", max);
        cJSON_AddStringToObject(d, "prompt_id", r->job->prompt_id);
        cJSON_AddStringToObject(d, "node", r->p->nodes[n].id);
        graph__send_ev(r, "progress", d, 0);
    }
    return 0;
}

/* ---- the prompt ---------------------------------------------------------------------- */

static cJSON *meta_entry(struct run *r, const char *id)
{
    cJSON *m = cJSON_GetObjectItemCaseSensitive(r->res->meta, id);
    if (m)
        return m;
    m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "node_id", id);
    cJSON_AddStringToObject(m, "display_node", id);
    cJSON_AddNullToObject(m, "parent_node");
    cJSON_AddStringToObject(m, "real_node_id", id);
    cJSON_AddItemToObject(r->res->meta, id, m);
    return m;
}

/* History "outputs" and "meta" as ComfyUI writes them, plus (our addition) a
 * "memory" array in the meta of each node that ran a model: the memory manager's
 * plan and outcome (resident/streamed bytes, activations, bytes copied, predicted
 * and measured time), so that a slow or failed run can be explained afterwards. */
static void build_history(struct run *r)
{
    for (int i = 0; i < r->p->n; i++) {
        const char *id = r->p->nodes[i].id;
        if (r->x[i].n_mem)
            cJSON_AddItemToObject(meta_entry(r, id), "memory",
                                  graph__mm_reports_json(r->x[i].mem, r->x[i].n_mem));
        const cJSON *ui = r->x[i].ui;
        if (!ui) {
            struct gcache_entry *e = graph__cached(r, i);
            ui = e ? e->ui : NULL;
        }
        if (!ui)
            continue;
        if (cJSON_GetObjectItemCaseSensitive(r->res->outputs, id))
            continue;
        cJSON_AddItemToObject(r->res->outputs, id, cJSON_Duplicate(ui, 1));
        meta_entry(r, id);
    }
}

/*
 * The run's per-node arrays (xnode, start and execution order), from the ones
 * the context keeps, grown when a prompt is larger. Allocated and freed per run,
 * a large prompt's arrays (a 10k-node chain's xnodes are 1 MB) were given back to
 * the kernel by malloc's trim and faulted in again by the next prompt: tens of
 * microseconds a page in this VM, more than the run's own work.
 */
static void run_arrays(struct graph_ctx *g, struct run *r, int n)
{
    size_t want = (size_t)(n ? n : 1);
    if (g->run_cap < want) {
        graph__run_arrays_free(g);
        g->run_x = xmalloc(want * sizeof(*g->run_x));
        g->run_started = xmalloc(want * sizeof(*g->run_started));
        g->run_executed = xmalloc(want * sizeof(*g->run_executed));
        g->run_cap = want;
    }
    memset(g->run_x, 0, want * sizeof(*g->run_x));
    r->x = g->run_x;
    r->started = g->run_started;
    r->executed = g->run_executed;
}

void graph__run_arrays_free(struct graph_ctx *g)
{
    xfree(g->run_x);
    xfree(g->run_started);
    xfree(g->run_executed);
    g->run_x = NULL;
    g->run_started = g->run_executed = NULL;
    g->run_cap = 0;
}

int graph_execute(struct graph_ctx *g, const struct graph_job *job, const struct graph_events *ev,
                  struct graph_result *out)
{
    memset(out, 0, sizeof(*out));
    out->status = GRAPH_STATUS_SUCCESS;
    out->outputs = cJSON_CreateObject();
    out->messages = cJSON_CreateArray();
    out->meta = cJSON_CreateObject();
    atomic_store(&g->interrupt, 0); /* an interrupt sent while idle is discarded */
    g->gen++;

    struct run r = {.g = g, .job = job, .ev = ev, .res = out, .cur = -1};
    r.hooks = (struct node_hooks){.user = &r, .progress = hook_progress, .interrupted = hook_interrupted,
                                .image = graph__hook_image};
    cJSON *d = graph__base_data(&r);
    cJSON_AddNumberToObject(d, "timestamp", (double)clock_wall_ms());
    graph__send_ev(&r, "execution_start", d, 1);

    if (!job->native)
        r.parsed = graph__prompt_parse_untyped(g, job->prompt);
    const struct graph_prompt *np = job->native ? job->native : r.parsed;
    if (!np) {
        /* Not reachable for validated prompts; report it as a node-less error. */
        cJSON *e = graph__base_data(&r);
        cJSON_AddStringToObject(e, "exception_message", "prompt is not an object\n");
        cJSON_AddStringToObject(e, "exception_type", "RuntimeError");
        graph__send_ev(&r, "execution_error", e, 1);
        out->status = GRAPH_STATUS_ERROR;
        return 0;
    }
    r.p = &np->p;
    int n = r.p->n;
    run_arrays(g, &r, n);
    for (int i = 0; i < n; i++)
        if (!r.p->nodes[i].cls)
            r.x[i].sig_state = 2; /* unknown class: no signature (validation prevents it) */
    graph__compute_sigs(&r);
    graph__policy_start(&r);
    graph__instances_retain(&r);

    d = graph__base_data(&r);
    cJSON *nodes = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        if (r.x[i].cached_at_start) /* the lookups policy_start made; nothing ran since */
            cJSON_AddItemToArray(nodes, cJSON_CreateString(r.p->nodes[i].id));
    cJSON *dd = cJSON_CreateObject();
    cJSON_AddItemToObject(dd, "nodes", nodes);
    cJSON_AddStringToObject(dd, "prompt_id", job->prompt_id);
    cJSON_AddNumberToObject(dd, "timestamp", (double)clock_wall_ms());
    cJSON_Delete(d);
    graph__send_ev(&r, "execution_cached", dd, 1);

    int n_pending = graph__build_pending(&r), n_done = 0, stopped = 0;
    int next;
    while ((next = graph__pick_next(&r)) >= 0) {
        stopped = graph__execute_node(&r, next);
        r.x[next].n_mem = mm_reports_take(g->mm, &r.x[next].mem);
        if (stopped)
            break;
        graph__mark_done(&r, next);
        n_done++;
    }
    if (!stopped && n_done < n_pending) {
        /* Only an unvalidated prompt gets here: nodes left blocked on each other. */
        for (int i = 0; i < n; i++)
            if (r.x[i].pending && !r.x[i].done) {
                graph__send_failure(&r, i, 0, "RuntimeError", "Dependency cycle detected", NULL);
                break;
            }
    }
    build_history(&r);
    graph__policy_end(&r);
    mm_prompt_end(g->mm);

    for (int i = 0; i < n; i++) {
        struct xnode *x = &r.x[i];
        if (x->out) {
            int no = r.p->nodes[i].n_out;
            for (int k = 0; k < no; k++)
                value_unref(x->out[k]);
            xfree(x->out);
        }
        if (x->ui_owned)
            cJSON_Delete(x->ui);
        xfree(x->mem);
    }
    for (int k = 0; k < 4; k++)
        xfree(r.heaps[k].v);
    for (int i = 0; i < r.n_pnginfo; i++)
        xfree(r.pnginfo_vals[i]);
    xfree(r.pnginfo_vals);
    xfree(r.pnginfo);
    xfree(r.prompt_json);
    xfree(r.deps); /* r.x, r.started and r.executed stay with g for the next run */
    graph_prompt_free(r.parsed);
    return 0;
}

void graph_result_release(struct graph_result *res)
{
    cJSON_Delete(res->outputs);
    cJSON_Delete(res->messages);
    cJSON_Delete(res->meta);
    memset(res, 0, sizeof(*res));
}
