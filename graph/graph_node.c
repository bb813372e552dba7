/*
 * graph_node.c — one node's turn in the executor: served from the cache, or bound
 * (inputs by declared index from links and typed constants), run (the class's
 * run() with hooks), and published (outputs kept for the run and the cache, UI
 * result sent) or reported as a failure. Also the per-(node id, class) instance
 * state and the hidden inputs (PROMPT, EXTRA_PNGINFO, UNIQUE_ID).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "graph_run.h"
#include "memmgr.h"

static void fill_hidden(struct run *r, struct node_ctx *c, int n)
{
    const struct node_class *cls = r->p->nodes[n].cls;
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
void graph__instances_retain(struct run *r)
{
    struct graph_ctx *g = r->g;
    int w = 0;
    for (int i = 0; i < g->n_inst; i++) {
        struct ginstance *in = &g->inst[i];
        int n = gprompt_find(r->p, in->id);
        if (n >= 0 && r->p->nodes[n].cls == in->cls) {
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
    cJSON *imgs = cJSON_AddArrayToObject(ui, c->ui_key ? c->ui_key : "images");
    for (int i = 0; i < c->n_ui_images; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "filename", c->ui_images[i].filename);
        cJSON_AddStringToObject(o, "subfolder", c->ui_images[i].subfolder);
        cJSON_AddStringToObject(o, "type", c->ui_images[i].type);
        cJSON_AddItemToArray(imgs, o);
    }
    if (c->ui_animated)
        cJSON_AddItemToArray(cJSON_AddArrayToObject(ui, "animated"), cJSON_CreateTrue());
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

/* Served from the cache: executed (with the old UI output) but no executing. */
static void serve_cached(struct run *r, int n, const struct gcache_entry *e)
{
    struct xnode *x = &r->x[n];
    if (!x->out) {
        x->out = xcalloc((size_t)(e->n_out ? e->n_out : 1), sizeof(*x->out));
        for (int i = 0; i < e->n_out; i++)
            x->out[i] = value_ref(e->out[i]);
    }
    x->ui = e->ui;
    graph__send_executed(r, n, e->ui);
    graph__pstate_set(r, n, X_FINISHED, 1.0, 1.0);
}

static void announce(struct run *r, int n)
{
    graph__pstate_set(r, n, X_RUNNING, 0.0, 1.0);
    if (graph__want_events(r)) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "node", r->p->nodes[n].id);
        cJSON_AddStringToObject(d, "display_node", r->p->nodes[n].id);
        cJSON_AddStringToObject(d, "prompt_id", r->job->prompt_id);
        graph__send_ev(r, "executing", d, 0);
    }
}

/*
 * Bind: node n's inputs by declared index, from links (this run's outputs or the
 * cache) and from the constants validation typed (gin.konst; a raw prompt's, and
 * any without a scalar form, are made from their JSON here). Returns the first
 * input that cannot be bound, with why, or NULL when all could: validation rules
 * that out, but an unvalidated prompt may get here.
 */
static const struct node_input_def *bind_inputs(struct run *r, const struct gnode *gn,
                                                struct value **in, const char **why)
{
    const struct node_input_def *bad = NULL;
    for (int k = 0; k < gn->n_in; k++) {
        const struct node_input_def *d = &gn->cls->inputs[k];
        const struct gin *gi = &gn->in[k];
        const char *fail = NULL;
        if (d->group == NODE_INPUT_HIDDEN) {
            if (!strcmp(d->type, "UNIQUE_ID"))
                in[k] = value_new_string(gn->id);
            continue;
        }
        if (!gi->json) {
            if (d->group == NODE_INPUT_REQUIRED)
                fail = "is missing";
        } else if (gjson_is_link(gi->json)) {
            in[k] = gi->src >= 0 ? value_ref(source_value(r, gi->src, gi->slot)) : NULL;
            if (!in[k])
                fail = "is linked to a missing output";
        } else {
            in[k] = gin_const_value(gi, d);
            if (!in[k])
                fail = "needs a link, not a constant";
        }
        if (fail && !bad) {
            bad = d;
            *why = fail;
        }
    }
    return bad;
}

/* Run: the class's run() with the progress hooks pointed at node n, or the bind
 * failure reported as its RuntimeError. */
static int run_bound(struct run *r, int n, struct node_ctx *c, const struct node_input_def *bad,
                     const char *why)
{
    const struct gnode *gn = &r->p->nodes[n];
    if (bad) {
        node_fail(c, "RuntimeError", "input '%s' (%s) of node %s (%s) %s", bad->name, bad->type,
                  gn->id, gn->cls->name, why);
        return ERR_INVALID;
    }
    r->cur = n;
    r->last_progress_ms = 0;
    r->last_preview_ms = 0;
    int rc = gn->cls->run(c);
    r->cur = -1;
    return rc;
}

/* A growable list of value references (one output's items over the calls). */
struct vlist {
    struct value **v; /* owned references */
    int n, cap;
};

static void vlist_add(struct vlist *l, struct value *v)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 4;
        l->v = xrealloc(l->v, (size_t)l->cap * sizeof(*l->v));
    }
    l->v[l->n++] = v;
}

/*
 * ComfyUI's _map_node_over_list for a node that gets list inputs: the number of
 * calls is the longest input list (a shorter one repeats its last item), each call
 * sees item i of every input, and each output becomes the list of the calls'
 * values (an OUTPUT_IS_LIST output: the concatenation of the calls' lists, as
 * merge_result_data does). UI results accumulate in the one ctx, as ComfyUI merges
 * the calls' ui dicts. Returns run()'s code; out[] then holds list values.
 */
static int run_over_lists(struct run *r, int n, struct node_ctx *c, struct value **in,
                          struct value **out, int calls)
{
    const struct gnode *gn = &r->p->nodes[n];
    struct value **item_in = xcalloc((size_t)(gn->n_in ? gn->n_in : 1), sizeof(*item_in));
    struct value **item_out = xcalloc((size_t)(gn->n_out ? gn->n_out : 1), sizeof(*item_out));
    struct vlist *acc = xcalloc((size_t)(gn->n_out ? gn->n_out : 1), sizeof(*acc));
    int rc = 0;
    c->inputs = item_in;
    c->outputs = item_out;
    for (int i = 0; i < calls && rc >= 0; i++) {
        if (i && atomic_load(&r->g->interrupt)) {
            rc = ERR_INTERRUPTED;
            break;
        }
        for (int k = 0; k < gn->n_in; k++) {
            int len = value_list_len(in[k]);
            item_in[k] = len ? value_list_at(in[k], i < len ? i : len - 1) : NULL; /* borrowed */
        }
        rc = run_bound(r, n, c, NULL, NULL);
        for (int o = 0; o < gn->n_out; o++) {
            struct value *v = item_out[o];
            item_out[o] = NULL;
            if (rc >= 0 && !v)
                rc = node_fail(c, "RuntimeError", "node %s (%s) produced no value for output %d",
                               gn->id, gn->cls->name, o);
            if (rc < 0 || !v) {
                value_unref(v);
                continue;
            }
            if (gn->cls->outputs[o].is_list) {
                for (int j = 0; j < value_list_len(v); j++)
                    vlist_add(&acc[o], value_ref(value_list_at(v, j)));
                value_unref(v);
            } else {
                vlist_add(&acc[o], v);
            }
        }
    }
    c->inputs = in;
    c->outputs = out;
    for (int o = 0; o < gn->n_out; o++) {
        if (rc >= 0)
            out[o] = value_new_list(gn->cls->outputs[o].type, acc[o].v, acc[o].n);
        else
            for (int j = 0; j < acc[o].n; j++)
                value_unref(acc[o].v[j]);
        xfree(acc[o].v);
    }
    xfree(acc);
    xfree(item_out);
    xfree(item_in);
    return rc;
}

/*
 * Run node n once, or once per list item when a linked input is a list and the
 * class does not take lists (NODE_CLASS_INPUT_IS_LIST). An empty list is a
 * RuntimeError: ComfyUI fails on it too (IndexError or a missing argument).
 */
static int run_node(struct run *r, int n, struct node_ctx *c, struct value **in,
                    struct value **out, const struct node_input_def *bad, const char *why)
{
    const struct gnode *gn = &r->p->nodes[n];
    if (bad || (gn->cls->flags & NODE_CLASS_INPUT_IS_LIST))
        return run_bound(r, n, c, bad, why);
    int calls = 1, lists = 0;
    for (int k = 0; k < gn->n_in; k++) {
        if (!value_is_list(in[k]))
            continue;
        lists = 1;
        int len = value_list_len(in[k]);
        if (len == 0)
            return node_fail(c, "RuntimeError", "input '%s' of node %s (%s) is an empty list",
                             gn->cls->inputs[k].name, gn->id, gn->cls->name);
        if (len > calls)
            calls = len;
    }
    return lists ? run_over_lists(r, n, c, in, out, calls) : run_bound(r, n, c, bad, why);
}

/* A failed node: execution_error in ComfyUI's shape. Out of memory, known by its
 * code, frees every model and adds ComfyUI's hint (§6.4): every allocation path
 * (device, xtry_*, alloc_host_check) returns ERR_DEVICE_OOM, and nodes pass it on. */
static void report_failure(struct run *r, int n, struct node_ctx *c, int rc, struct value **in)
{
    const struct gnode *gn = &r->p->nodes[n];
    if (!c->exc_message.ptr)
        buf_init(&c->exc_message);
    if (!c->exc_message.len)
        buf_printf(&c->exc_message, "node %s (%s) failed: %s", gn->id, gn->cls->name, err_str(rc));
    if (rc == ERR_DEVICE_OOM) {
        if (!c->exc_type[0] || !strcmp(c->exc_type, "RuntimeError"))
            snprintf(c->exc_type, sizeof(c->exc_type), "torch.OutOfMemoryError");
        mm_unload_all(r->g->mm);
        buf_adds(&c->exc_message, "\nThis error means you ran out of memory on your GPU.\n\nTIPS: If the "
                                  "workflow worked before you might have accidentally set the batch_size to "
                                  "a large number.");
    }
    graph__send_failure(r, n, 0, c->exc_type[0] ? c->exc_type : "RuntimeError", c->exc_message.ptr, in);
}

/* Publish: keep the outputs (taken from `out`) for this run and in the cache, and
 * send executed when the node has a UI result. */
static void publish(struct run *r, int n, const struct node_ctx *c, struct value **out)
{
    const struct gnode *gn = &r->p->nodes[n];
    struct xnode *x = &r->x[n];
    x->out = xcalloc((size_t)(gn->n_out ? gn->n_out : 1), sizeof(*x->out));
    for (int i = 0; i < gn->n_out; i++)
        x->out[i] = out[i], out[i] = NULL;
    cJSON *ui = c->has_ui ? ui_json(c) : NULL;
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
}

/* Interrupted before or while node n ran: execution_interrupted; the prompt stops. */
static int stop_interrupted(struct run *r, int n)
{
    graph__send_failure(r, n, 1, NULL, NULL, NULL);
    return 1;
}

int graph__execute_node(struct run *r, int n)
{
    const struct gnode *gn = &r->p->nodes[n];
    struct gcache_entry *e = graph__cached(r, n);
    if (e) {
        serve_cached(r, n, e);
        return 0;
    }
    announce(r, n);
    struct value *in_small[8], *out_small[8];
    struct value **in = gn->n_in <= 8 ? in_small : xmalloc((size_t)gn->n_in * sizeof(*in));
    struct value **out = gn->n_out <= 8 ? out_small : xmalloc((size_t)gn->n_out * sizeof(*out));
    memset(in, 0, (size_t)gn->n_in * sizeof(*in));
    memset(out, 0, (size_t)gn->n_out * sizeof(*out));
    struct node_ctx c;
    node_ctx_init(&c, gn->cls, gn->id, &r->g->env, in, out);
    c.prompt_id = r->job->prompt_id;
    c.hooks = &r->hooks;
    const char *why = "";
    const struct node_input_def *bad = bind_inputs(r, gn, in, &why);
    fill_hidden(r, &c, n);
    void *no_state = NULL; /* classes without instance state get a scratch slot */
    c.instance = gn->cls->instance_free ? instance_slot(r->g, gn) : &no_state;
    int stop = 0, rc;
    if (atomic_exchange(&r->g->interrupt, 0)) {
        stop = stop_interrupted(r, n);
        goto out;
    }
    rc = run_node(r, n, &c, in, out, bad, why);
    if (rc == ERR_INTERRUPTED || (rc < 0 && atomic_load(&r->g->interrupt))) {
        atomic_store(&r->g->interrupt, 0);
        stop = stop_interrupted(r, n);
        goto out;
    }
    for (int i = 0; rc >= 0 && i < gn->n_out; i++)
        if (!out[i])
            rc = node_fail(&c, "RuntimeError", "node %s (%s) produced no value for output %d", gn->id,
                           gn->cls->name, i);
    if (rc < 0) {
        report_failure(r, n, &c, rc, in);
        stop = 1;
        goto out;
    }
    publish(r, n, &c, out);
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
