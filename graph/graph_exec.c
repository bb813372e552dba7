/*
 * The executor (comfy-api.md §6): runs one prompt on the executor thread. It
 * computes signatures and applies the cache policy (graph_sig.c), builds the
 * pending set and picks nodes in ComfyUI's order (graph_order.c), runs each node
 * or serves it from the cache, and reports through graph_events.c. Interrupts are
 * checked before each node starts and at every progress call.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
            r->ev->preview(r->ev->user, 1, jpg, nb, r->p.nodes[n].id, r->job->prompt_id);
            xfree(jpg);
        }
    }
    if (graph__want_events(r)) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddNumberToObject(d, "value", value);
        cJSON_AddNumberToObject(d, "max", max);
        cJSON_AddStringToObject(d, "prompt_id", r->job->prompt_id);
        cJSON_AddStringToObject(d, "node", r->p.nodes[n].id);
        graph__send_ev(r, "progress", d, 0);
    }
    return 0;
}

static void fill_hidden(struct run *r, struct node_ctx *c, int n)
{
    const struct node_class *cls = r->p.nodes[n].cls;
    for (int k = 0; cls->inputs && cls->inputs[k].name; k++) {
        const struct node_input_def *in = &cls->inputs[k];
        if (in->group != NODE_INPUT_HIDDEN)
            continue;
        if (!strcmp(in->type, "PROMPT") && r->job->prompt) {
            if (!r->prompt_json)
                r->prompt_json = gjson_print_ascii(r->job->prompt);
            c->prompt_json = r->prompt_json;
        } else if (!strcmp(in->type, "EXTRA_PNGINFO")) {
            if (!r->pnginfo_done) {
                r->pnginfo_done = 1;
                cJSON *info = r->job->extra_data
                                  ? cJSON_GetObjectItemCaseSensitive(r->job->extra_data, "extra_pnginfo")
                                  : NULL;
                if (cJSON_IsObject(info)) {
                    int cnt = cJSON_GetArraySize(info);
                    r->pnginfo = xcalloc((size_t)(cnt ? cnt : 1), sizeof(*r->pnginfo));
                    r->pnginfo_vals = xcalloc((size_t)(cnt ? cnt : 1), sizeof(char *));
                    for (cJSON *it = info->child; it; it = it->next) {
                        r->pnginfo_vals[r->n_pnginfo] = gjson_print_ascii(it);
                        r->pnginfo[r->n_pnginfo].key = it->string ? it->string : "";
                        r->pnginfo[r->n_pnginfo].value = r->pnginfo_vals[r->n_pnginfo];
                        r->n_pnginfo++;
                    }
                }
            }
            c->pnginfo = r->pnginfo;
            c->n_pnginfo = r->n_pnginfo;
        }
    }
}

/* The per-(node id, class) state slot (PreviewImage's suffix). */
struct ginstance {
    char *id;
    const struct node_class *cls;
    void *state;
    uint64_t gen;
};

static void **instance_slot(struct graph_ctx *g, const struct gnode *gn)
{
    for (int i = 0; i < g->n_inst; i++)
        if (g->inst[i].cls == gn->cls && !strcmp(g->inst[i].id, gn->id)) {
            g->inst[i].gen = g->gen;
            return &g->inst[i].state;
        }
    if (g->n_inst == g->cap_inst) {
        g->cap_inst = g->cap_inst ? 2 * g->cap_inst : 8;
        g->inst = xrealloc(g->inst, (size_t)g->cap_inst * sizeof(*g->inst));
    }
    struct ginstance *in = &g->inst[g->n_inst++];
    in->id = xstrdup(gn->id);
    in->cls = gn->cls;
    in->state = NULL;
    in->gen = g->gen;
    return &in->state;
}

/* Drop instance state of (id, class) pairs absent from the new prompt. */
static void instances_retain(struct run *r)
{
    struct graph_ctx *g = r->g;
    int w = 0;
    for (int i = 0; i < g->n_inst; i++) {
        struct ginstance *in = &g->inst[i];
        int n = gprompt_find(&r->p, in->id);
        if (n >= 0 && r->p.nodes[n].cls == in->cls) {
            g->inst[w++] = *in;
            continue;
        }
        if (in->cls->instance_free && in->state)
            in->cls->instance_free(in->state);
        xfree(in->id);
    }
    g->n_inst = w;
}

void graph__instances_free(struct graph_ctx *g)
{
    for (int i = 0; i < g->n_inst; i++) {
        if (g->inst[i].cls->instance_free && g->inst[i].state)
            g->inst[i].cls->instance_free(g->inst[i].state);
        xfree(g->inst[i].id);
    }
    xfree(g->inst);
    g->inst = NULL;
    g->n_inst = g->cap_inst = 0;
}

static cJSON *ui_json(const struct node_ctx *c)
{
    cJSON *ui = cJSON_CreateObject();
    cJSON *imgs = cJSON_AddArrayToObject(ui, "images");
    for (int i = 0; i < c->n_ui_images; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "filename", c->ui_images[i].filename);
        cJSON_AddStringToObject(o, "subfolder", c->ui_images[i].subfolder);
        cJSON_AddStringToObject(o, "type", c->ui_images[i].type);
        cJSON_AddItemToArray(imgs, o);
    }
    return ui;
}

/* Outputs of source s for this run (from this run, or the cache). */
static struct value *source_value(struct run *r, int s, int slot)
{
    struct xnode *x = &r->x[s];
    if (!x->out) {
        struct gcache_entry *e = graph__cached(r, s);
        if (!e)
            return NULL;
        x->out = xcalloc((size_t)e->n_out, sizeof(*x->out));
        for (int i = 0; i < e->n_out; i++)
            x->out[i] = value_ref(e->out[i]);
    }
    return x->out[slot];
}

/* Run node n. Returns 0 on success, 1 when the prompt must stop. */
static int execute_node(struct run *r, int n)
{
    const struct gnode *gn = &r->p.nodes[n];
    struct xnode *x = &r->x[n];
    struct gcache_entry *e = graph__cached(r, n);
    if (e) {
        /* Served from cache: executed (with the old UI output) but no executing. */
        if (!x->out) {
            x->out = xcalloc((size_t)(e->n_out ? e->n_out : 1), sizeof(*x->out));
            for (int i = 0; i < e->n_out; i++)
                x->out[i] = value_ref(e->out[i]);
        }
        x->ui = e->ui;
        graph__send_executed(r, n, e->ui);
        graph__pstate_set(r, n, X_FINISHED, 1.0, 1.0);
        return 0;
    }
    graph__pstate_set(r, n, X_RUNNING, 0.0, 1.0);
    if (graph__want_events(r)) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "node", gn->id);
        cJSON_AddStringToObject(d, "display_node", gn->id);
        cJSON_AddStringToObject(d, "prompt_id", r->job->prompt_id);
        graph__send_ev(r, "executing", d, 0);
    }
    struct value *in_small[8], *out_small[8];
    struct value **in = gn->n_in <= 8 ? in_small : xmalloc((size_t)gn->n_in * sizeof(*in));
    struct value **out = gn->n_out <= 8 ? out_small : xmalloc((size_t)gn->n_out * sizeof(*out));
    memset(in, 0, (size_t)gn->n_in * sizeof(*in));
    memset(out, 0, (size_t)gn->n_out * sizeof(*out));
    struct node_ctx c;
    node_ctx_init(&c, gn->cls, gn->id, &r->g->env, in, out);
    c.prompt_id = r->job->prompt_id;
    c.hooks = &r->hooks;
    int stop = 0, rc = 0;
    const char *bad_input = NULL, *bad_why = "";
    for (int k = 0; k < gn->n_in; k++) {
        const struct node_input_def *d = &gn->cls->inputs[k];
        const cJSON *v = gn->in[k].json;
        if (d->group == NODE_INPUT_HIDDEN) {
            if (!strcmp(d->type, "UNIQUE_ID"))
                in[k] = value_new_string(gn->id);
            continue;
        }
        if (!v) {
            /* Validation guarantees required inputs; an unvalidated prompt may not. */
            if (d->group == NODE_INPUT_REQUIRED && !bad_input) {
                bad_input = d->name;
                bad_why = "is missing";
            }
            continue;
        }
        if (gjson_is_link(v)) {
            in[k] = gn->in[k].src >= 0 ? value_ref(source_value(r, gn->in[k].src, gn->in[k].slot)) : NULL;
            if (!in[k] && !bad_input) {
                bad_input = d->name;
                bad_why = "is linked to a missing output";
            }
        } else {
            in[k] = graph__const_value(d, v);
            if (!in[k] && !bad_input) {
                bad_input = d->name;
                bad_why = "needs a link, not a constant";
            }
        }
    }
    fill_hidden(r, &c, n);
    void *no_state = NULL; /* classes without instance state get a scratch slot */
    c.instance = gn->cls->instance_free ? instance_slot(r->g, gn) : &no_state;
    if (atomic_exchange(&r->g->interrupt, 0)) {
        graph__send_failure(r, n, 1, NULL, NULL, NULL);
        stop = 1;
        goto out;
    }
    if (bad_input) {
        node_fail(&c, "RuntimeError", "input '%s' (%s) of node %s (%s) %s", bad_input,
                  gn->cls->inputs[node_class_input_index(gn->cls, bad_input)].type, gn->id, gn->cls->name,
                  bad_why);
        rc = ERR_INVALID;
    } else {
        r->cur = n;
        r->last_progress_ms = 0;
        r->last_preview_ms = 0;
        rc = gn->cls->run(&c);
        r->cur = -1;
    }
    if (rc == ERR_INTERRUPTED || (rc < 0 && atomic_load(&r->g->interrupt))) {
        atomic_store(&r->g->interrupt, 0);
        graph__send_failure(r, n, 1, NULL, NULL, NULL);
        stop = 1;
        goto out;
    }
    for (int i = 0; rc >= 0 && i < gn->n_out; i++)
        if (!out[i])
            rc = node_fail(&c, "RuntimeError", "node %s (%s) produced no value for output %d", gn->id,
                           gn->cls->name, i);
    if (rc < 0) {
        if (!c.exc_message.ptr)
            buf_init(&c.exc_message);
        if (!c.exc_message.len)
            buf_printf(&c.exc_message, "node %s (%s) failed: %s", gn->id, gn->cls->name, err_str(rc));
        if (rc == ERR_DEVICE_OOM) {
            /* As ComfyUI: free every model and add its hint (§6.4). The code, not the
             * exception name, decides: every allocation path (device, xtry_*,
             * alloc_host_check) returns ERR_DEVICE_OOM, and nodes pass it on. */
            if (!c.exc_type[0] || !strcmp(c.exc_type, "RuntimeError"))
                snprintf(c.exc_type, sizeof(c.exc_type), "torch.OutOfMemoryError");
            mm_unload_all(r->g->mm);
            buf_adds(&c.exc_message, "\nThis error means you ran out of memory on your GPU.\n\nTIPS: If the "
                                     "workflow worked before you might have accidentally set the batch_size to "
                                     "a large number.");
        }
        graph__send_failure(r, n, 0, c.exc_type[0] ? c.exc_type : "RuntimeError", c.exc_message.ptr, in);
        stop = 1;
        goto out;
    }
    /* Success: keep the outputs for this run and in the cache. */
    x->out = xcalloc((size_t)(gn->n_out ? gn->n_out : 1), sizeof(*x->out));
    for (int i = 0; i < gn->n_out; i++)
        x->out[i] = out[i], out[i] = NULL;
    cJSON *ui = c.has_ui ? ui_json(&c) : NULL;
    if (x->has_sig) {
        struct value **co = xcalloc((size_t)(gn->n_out ? gn->n_out : 1), sizeof(*co));
        for (int i = 0; i < gn->n_out; i++)
            co[i] = value_ref(x->out[i]);
        struct gcache_entry *ne = gcache_put(&r->g->cache, x->sig, gn->n_out, co, ui);
        ne->gen = ne->used_now = r->g->gen;
        x->ui = ui;
    } else {
        x->ui = ui;
        x->ui_owned = 1;
    }
    if (ui)
        graph__send_executed(r, n, ui);
    /* ComfyUI's finish_progress keeps the last max and sets value = max (a 3-step
     * sampler ends at 3/3, a node without progress at 1/1). */
    graph__pstate_set(r, n, X_FINISHED, x->pmax, x->pmax);
    r->executed[r->n_executed++] = n;
out:
    for (int k = 0; k < gn->n_in; k++)
        value_unref(in[k]);
    for (int i = 0; i < gn->n_out; i++)
        value_unref(out[i]);
    if (in != in_small)
        xfree(in);
    if (out != out_small)
        xfree(out);
    node_ctx_release(&c);
    return stop;
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
    for (int i = 0; i < r->p.n; i++) {
        const char *id = r->p.nodes[i].id;
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

    if (gprompt_parse(&r.p, g->reg, job->prompt) < 0) {
        /* Not reachable for validated prompts; report it as a node-less error. */
        cJSON *e = graph__base_data(&r);
        cJSON_AddStringToObject(e, "exception_message", "prompt is not an object\n");
        cJSON_AddStringToObject(e, "exception_type", "RuntimeError");
        graph__send_ev(&r, "execution_error", e, 1);
        out->status = GRAPH_STATUS_ERROR;
        return 0;
    }
    int n = r.p.n;
    r.x = xcalloc((size_t)(n ? n : 1), sizeof(*r.x));
    r.started = xmalloc((size_t)(n ? n : 1) * sizeof(*r.started));
    r.executed = xmalloc((size_t)(n ? n : 1) * sizeof(*r.executed));
    for (int i = 0; i < n; i++)
        if (!r.p.nodes[i].cls)
            r.x[i].sig_state = 2; /* unknown class: no signature (validation prevents it) */
    graph__compute_sigs(&r);
    graph__policy_start(&r);
    instances_retain(&r);

    d = graph__base_data(&r);
    cJSON *nodes = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        if (graph__cached(&r, i))
            cJSON_AddItemToArray(nodes, cJSON_CreateString(r.p.nodes[i].id));
    cJSON *dd = cJSON_CreateObject();
    cJSON_AddItemToObject(dd, "nodes", nodes);
    cJSON_AddStringToObject(dd, "prompt_id", job->prompt_id);
    cJSON_AddNumberToObject(dd, "timestamp", (double)clock_wall_ms());
    cJSON_Delete(d);
    graph__send_ev(&r, "execution_cached", dd, 1);

    int n_pending = graph__build_pending(&r), n_done = 0, stopped = 0;
    int next;
    while ((next = graph__pick_next(&r)) >= 0) {
        stopped = execute_node(&r, next);
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
            int no = r.p.nodes[i].n_out;
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
    xfree(r.deps);
    xfree(r.started);
    xfree(r.x);
    xfree(r.executed);
    gprompt_release(&r.p);
    return 0;
}

void graph_result_release(struct graph_result *res)
{
    cJSON_Delete(res->outputs);
    cJSON_Delete(res->messages);
    cJSON_Delete(res->meta);
    memset(res, 0, sizeof(*res));
}
