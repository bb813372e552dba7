/*
 * The executor (comfy-api.md §6): which nodes run, in ComfyUI's order, with the
 * cross-run cache, events, interrupts and errors.
 *
 * Order (§6.3). Pending nodes are found by ComfyUI's LIFO DFS from the outputs;
 * only links whose source is not cached are followed. A node is ready when all
 * its distinct pending sources are done; among ready nodes ComfyUI takes the
 * first (in pending-insertion order) that is an output node, else the first that
 * feeds an output, else the first that feeds a node feeding an output, else the
 * first. The "feeds" relations only involve nodes that stay pending while the
 * candidate is ready, so each node's rank (0..3) is fixed once the pending set is
 * built, and the choice becomes "lowest rank, then earliest insertion": four
 * binary heaps instead of ComfyUI's scan of the ready list, O(log n) per node.
 *
 * Events: progress_state carries a snapshot of every started node, as ComfyUI
 * sends it. That is quadratic in the number of nodes, so above
 * PROGRESS_SNAPSHOT_MAX started nodes we send only the node that changed, which
 * is the running one (a decision: ComfyUI has no answer for huge graphs, and the
 * frontend only draws running nodes' bars).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "graph_internal.h"
#include "memmgr.h"
#include "node_imageio.h"

#define PROGRESS_SNAPSHOT_MAX 100
#define PROGRESS_MIN_INTERVAL_MS 10 /* throttle for progress events */
#define PREVIEW_MIN_INTERVAL_MS 100 /* throttle for preview images */

enum xstate { X_IDLE = 0, X_RUNNING, X_FINISHED };

struct xnode {
    struct gsig sig;
    uint8_t has_sig;
    uint8_t sig_state; /* 0 not computed, 1 computing, 2 done */
    uint8_t pending, done, rank, pstate;
    int32_t order;      /* pending insertion index */
    int32_t block;      /* pending sources not yet done */
    int32_t dep_off, n_dep; /* dependents in run.deps */
    int32_t remaining;      /* dependents not yet run (--cache-none frees at 0) */
    struct value **out; /* refs held for this run, [n_out] */
    cJSON *ui;          /* borrowed from the cache entry, or owned when ui_owned */
    uint8_t ui_owned;
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
    struct gprompt p;
    struct xnode *x;
    int32_t *deps;
    struct heap heaps[4];
    int32_t *started; /* nodes in start order (progress_state) */
    int n_started;
    cJSON *executed;  /* ids that really ran */
    char *prompt_json; /* lazily printed PROMPT hidden input */
    struct node_text_chunk *pnginfo;
    char **pnginfo_vals;
    int n_pnginfo, pnginfo_done;
    int cur;          /* node running now, -1 none */
    int64_t last_progress_ms, last_preview_ms;
    struct node_hooks hooks; /* user = this run */
};

int64_t graph__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- events ------------------------------------------------------------------------- */

static int hook_progress(void *user, double value, double max, const uint8_t *rgb, int w, int h);
static int hook_interrupted(void *user);

static int want_events(const struct run *r)
{
    return r->ev && r->ev->send;
}

static void send_ev(struct run *r, const char *type, cJSON *data, int record)
{
    if (record) {
        cJSON *m = cJSON_CreateArray();
        cJSON_AddItemToArray(m, cJSON_CreateString(type));
        cJSON_AddItemToArray(m, cJSON_Duplicate(data, 1));
        cJSON_AddItemToArray(r->res->messages, m);
    }
    if (want_events(r))
        r->ev->send(r->ev->user, type, data);
    else
        cJSON_Delete(data);
}

static cJSON *pstate_entry(struct run *r, int n)
{
    const struct xnode *x = &r->x[n];
    const char *id = r->p.nodes[n].id;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "value", x->pv);
    cJSON_AddNumberToObject(e, "max", x->pmax);
    cJSON_AddStringToObject(e, "state", x->pstate == X_FINISHED ? "finished" : "running");
    cJSON_AddStringToObject(e, "node_id", id);
    cJSON_AddStringToObject(e, "prompt_id", r->job->prompt_id);
    cJSON_AddStringToObject(e, "display_node_id", id);
    cJSON_AddNullToObject(e, "parent_node_id");
    cJSON_AddStringToObject(e, "real_node_id", id);
    return e;
}

static void send_progress_state(struct run *r, int changed)
{
    if (!want_events(r))
        return;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "prompt_id", r->job->prompt_id);
    cJSON *nodes = cJSON_AddObjectToObject(d, "nodes");
    if (r->n_started <= PROGRESS_SNAPSHOT_MAX) {
        for (int i = 0; i < r->n_started; i++)
            cJSON_AddItemToObject(nodes, r->p.nodes[r->started[i]].id, pstate_entry(r, r->started[i]));
    } else {
        /* Nodes run one at a time, so the changed node is the only running one. */
        cJSON_AddItemToObject(nodes, r->p.nodes[changed].id, pstate_entry(r, changed));
    }
    send_ev(r, "progress_state", d, 0);
}

static void pstate_set(struct run *r, int n, enum xstate st, double v, double max)
{
    struct xnode *x = &r->x[n];
    if (x->pstate == X_IDLE)
        r->started[r->n_started++] = n;
    x->pstate = (uint8_t)st;
    x->pv = v;
    x->pmax = max;
    send_progress_state(r, n);
}

static cJSON *base_data(struct run *r)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "prompt_id", r->job->prompt_id);
    return d;
}

static void send_executed(struct run *r, int n, const cJSON *ui)
{
    if (!want_events(r))
        return;
    const char *id = r->p.nodes[n].id;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "node", id);
    cJSON_AddStringToObject(d, "display_node", id);
    cJSON_AddItemToObject(d, "output", ui ? cJSON_Duplicate(ui, 1) : cJSON_CreateNull());
    cJSON_AddStringToObject(d, "prompt_id", r->job->prompt_id);
    send_ev(r, "executed", d, 0);
}

/* ---- signatures ---------------------------------------------------------------------- */

static void hash_json(struct ghash *h, const cJSON *v)
{
    if (cJSON_IsString(v)) {
        ghash_u64(h, 1);
        ghash_str(h, v->valuestring);
    } else if (cJSON_IsRaw(v)) {
        ghash_u64(h, 2);
        ghash_str(h, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        uint64_t bits;
        double d = v->valuedouble;
        memcpy(&bits, &d, 8);
        ghash_u64(h, 3);
        ghash_u64(h, bits);
    } else if (cJSON_IsBool(v)) {
        ghash_u64(h, cJSON_IsTrue(v) ? 4 : 5);
    } else if (cJSON_IsNull(v)) {
        ghash_u64(h, 6);
    } else {
        char *s = cJSON_PrintUnformatted(v);
        ghash_u64(h, 7);
        ghash_str(h, s ? s : "");
        cJSON_free(s);
    }
}

static struct value *const_value(const struct node_input_def *in, const cJSON *v);
static void fill_hidden(struct run *r, struct node_ctx *c, int n);

/* IS_CHANGED: the node's fingerprint of outside state, from its constant inputs. */
static int node_fingerprint(struct run *r, int n, struct buf *out)
{
    const struct gnode *gn = &r->p.nodes[n];
    struct value **in = xcalloc((size_t)(gn->n_in ? gn->n_in : 1), sizeof(*in));
    for (int k = 0; k < gn->n_in; k++)
        if (gn->in[k].json && !cJSON_IsArray(gn->in[k].json))
            in[k] = const_value(&gn->cls->inputs[k], gn->in[k].json);
    struct node_ctx c;
    node_ctx_init(&c, gn->cls, gn->id, &r->g->env, in, NULL);
    c.prompt_id = r->job->prompt_id;
    int rc = gn->cls->is_changed(&c, out);
    node_ctx_release(&c);
    for (int k = 0; k < gn->n_in; k++)
        value_unref(in[k]);
    xfree(in);
    return rc;
}

static void sort_inputs(const struct gnode *gn, int *idx)
{
    for (int k = 0; k < gn->n_in; k++) {
        int j = k;
        while (j > 0 && strcmp(gn->cls->inputs[idx[j - 1]].name, gn->cls->inputs[k].name) > 0) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = k;
    }
}

/* Compute node n's signature once its sources have theirs. */
static void sig_one(struct run *r, int n)
{
    const struct gnode *gn = &r->p.nodes[n];
    struct xnode *x = &r->x[n];
    struct ghash h;
    ghash_init(&h);
    ghash_str(&h, gn->cls->name);
    if (gn->cls->is_changed) {
        struct buf fp;
        buf_init(&fp);
        if (node_fingerprint(r, n, &fp) < 0) {
            buf_release(&fp);
            x->has_sig = 0; /* ComfyUI's NaN: never equal, always re-run */
            return;
        }
        ghash_str(&h, fp.ptr);
        buf_release(&fp);
    }
    /* The node id joins the key only for classes that see it (§6.5). */
    int sees_id = (gn->cls->flags & NODE_CLASS_NOT_IDEMPOTENT) != 0;
    for (int k = 0; k < gn->n_in && !sees_id; k++)
        sees_id = gn->cls->inputs[k].group == NODE_INPUT_HIDDEN && !strcmp(gn->cls->inputs[k].type, "UNIQUE_ID");
    if (sees_id)
        ghash_str(&h, gn->id);
    int idx_small[16];
    int *idx = gn->n_in <= 16 ? idx_small : xmalloc((size_t)gn->n_in * sizeof(int));
    sort_inputs(gn, idx);
    int ok = 1;
    for (int j = 0; j < gn->n_in && ok; j++) {
        int k = idx[j];
        const struct gin *in = &gn->in[k];
        if (!in->json || gn->cls->inputs[k].group == NODE_INPUT_HIDDEN)
            continue;
        ghash_str(&h, gn->cls->inputs[k].name);
        if (cJSON_IsArray(in->json)) {
            if (in->src < 0 || !r->x[in->src].has_sig) {
                ok = 0;
                break;
            }
            ghash_u64(&h, r->x[in->src].sig.a);
            ghash_u64(&h, r->x[in->src].sig.b);
            ghash_u64(&h, (uint64_t)in->slot);
        } else {
            hash_json(&h, in->json);
        }
    }
    if (idx != idx_small)
        xfree(idx);
    x->has_sig = (uint8_t)ok;
    if (ok)
        x->sig = ghash_final(&h);
}

/* Signatures for every node (iterative post-order; nodes in cycles get none). */
static void compute_sigs(struct run *r)
{
    int n = r->p.n;
    int32_t *st = xmalloc((size_t)(n ? n : 1) * 2 * sizeof(int32_t));
    for (int root = 0; root < n; root++) {
        if (r->x[root].sig_state)
            continue;
        int sp = 0;
        st[sp++] = root;
        st[sp++] = 0;
        r->x[root].sig_state = 1;
        while (sp > 0) {
            int node = st[sp - 2], k = st[sp - 1];
            const struct gnode *gn = &r->p.nodes[node];
            int pushed = 0;
            while (k < gn->n_in) {
                int s = gn->in[k++].src;
                if (s >= 0 && r->x[s].sig_state == 0) {
                    st[sp - 1] = k;
                    r->x[s].sig_state = 1;
                    st[sp++] = s;
                    st[sp++] = 0;
                    pushed = 1;
                    break;
                }
            }
            if (pushed)
                continue;
            sp -= 2;
            sig_one(r, node); /* a source still "computing" is in a cycle: no sig */
            r->x[node].sig_state = 2;
        }
    }
    /* Sources that were still computing when read left has_sig = 0: correct. */
    xfree(st);
}

static struct gcache_entry *cached(struct run *r, int n)
{
    return r->x[n].has_sig ? gcache_get(&r->g->cache, r->x[n].sig) : NULL;
}

/* ---- cache policy ------------------------------------------------------------------- */

static int drop_unused(struct gcache_entry *e, void *u)
{
    return e->used_now != *(uint64_t *)u;
}

static void apply_policy_start(struct run *r)
{
    struct graph_ctx *g = r->g;
    if (g->cfg.cache_mode == GRAPH_CACHE_NONE) {
        gcache_clear(&g->cache);
        return;
    }
    for (int i = 0; i < r->p.n; i++) {
        struct gcache_entry *e = cached(r, i);
        if (e) {
            e->used_now = g->gen;
            e->gen = g->gen;
        }
    }
    if (g->cfg.cache_mode == GRAPH_CACHE_CLASSIC)
        gcache_filter(&g->cache, drop_unused, &g->gen);
}

struct lru_arg {
    uint64_t min_gen;
};

static int drop_gen(struct gcache_entry *e, void *u)
{
    return e->gen <= ((struct lru_arg *)u)->min_gen;
}

static int find_min_gen(struct gcache_entry *e, void *u)
{
    uint64_t *m = u;
    if (e->gen < *m)
        *m = e->gen;
    return 0;
}

static void apply_policy_end(struct run *r)
{
    struct graph_ctx *g = r->g;
    if (g->cfg.cache_mode == GRAPH_CACHE_NONE) {
        gcache_clear(&g->cache);
    } else if (g->cfg.cache_mode == GRAPH_CACHE_LRU) {
        size_t max = g->cfg.cache_lru_size > 0 ? (size_t)g->cfg.cache_lru_size : 1;
        /* Drop whole generations, oldest first, but never the current prompt's. */
        while (g->cache.count > max) {
            uint64_t m = UINT64_MAX;
            gcache_filter(&g->cache, find_min_gen, &m);
            if (m >= g->gen)
                break;
            struct lru_arg a = {m};
            gcache_filter(&g->cache, drop_gen, &a);
        }
    }
}

/* ---- ordering ---------------------------------------------------------------------- */

static int heap_less(const struct run *r, int32_t a, int32_t b)
{
    return r->x[a].order < r->x[b].order;
}

static void heap_push(struct run *r, struct heap *h, int32_t n)
{
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 64;
        h->v = xrealloc(h->v, (size_t)h->cap * sizeof(*h->v));
    }
    int i = h->n++;
    while (i > 0 && heap_less(r, n, h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = n;
}

static int32_t heap_pop(struct run *r, struct heap *h)
{
    int32_t top = h->v[0], last = h->v[--h->n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && heap_less(r, h->v[c + 1], h->v[c]))
            c++;
        if (!heap_less(r, h->v[c], last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0)
        h->v[i] = last;
    return top;
}

/* Build the pending set, edges, block counts and ranks (§6.3). Returns the number
 * of pending nodes. */
static int build_pending(struct run *r)
{
    int n = r->p.n, order = 0;
    size_t n_edges = 0, cap_edges = 0;
    int32_t *esrc = NULL, *edst = NULL;
    int32_t *stack = NULL;
    size_t sp = 0, cap_stack = 0;
    const cJSON *outs = r->job->outputs_to_execute;
    for (const cJSON *o = outs ? outs->child : NULL; o; o = o->next) {
        int root = cJSON_IsString(o) ? gprompt_find(&r->p, o->valuestring) : -1;
        if (root < 0 || !r->p.nodes[root].cls)
            continue;
        sp = 0;
        if (cap_stack == 0) {
            cap_stack = 64;
            stack = xmalloc(cap_stack * sizeof(*stack));
        }
        stack[sp++] = root;
        while (sp > 0) {
            int u = stack[--sp];
            if (r->x[u].pending)
                continue;
            r->x[u].pending = 1;
            r->x[u].order = order++;
            const struct gnode *gn = &r->p.nodes[u];
            size_t first_edge = n_edges;
            for (int j = 0; j < gn->n_keys; j++) {
                int s = gn->in[gn->key_order[j]].src;
                if (s < 0 || cached(r, s))
                    continue;
                if (sp == cap_stack) {
                    cap_stack *= 2;
                    stack = xrealloc(stack, cap_stack * sizeof(*stack));
                }
                stack[sp++] = s;
                int dup = 0;
                for (size_t e = first_edge; e < n_edges && !dup; e++)
                    dup = esrc[e] == s;
                if (dup)
                    continue;
                if (n_edges == cap_edges) {
                    cap_edges = cap_edges ? 2 * cap_edges : 64;
                    esrc = xrealloc(esrc, cap_edges * sizeof(*esrc));
                    edst = xrealloc(edst, cap_edges * sizeof(*edst));
                }
                esrc[n_edges] = s;
                edst[n_edges] = u;
                n_edges++;
                r->x[u].block++;
            }
        }
    }
    /* CSR of dependents. */
    for (size_t e = 0; e < n_edges; e++)
        r->x[esrc[e]].n_dep++;
    int32_t off = 0;
    for (int i = 0; i < n; i++) {
        r->x[i].dep_off = off;
        off += r->x[i].n_dep;
        r->x[i].n_dep = 0;
    }
    r->deps = xmalloc((size_t)(off ? off : 1) * sizeof(*r->deps));
    for (size_t e = 0; e < n_edges; e++) {
        struct xnode *s = &r->x[esrc[e]];
        r->deps[s->dep_off + s->n_dep++] = edst[e];
        s->remaining++;
    }
    xfree(esrc);
    xfree(edst);
    xfree(stack);
    /* Ranks and the initial ready set. */
    for (int i = 0; i < n; i++) {
        struct xnode *x = &r->x[i];
        if (!x->pending)
            continue;
        int rank = 3;
        if (node_class_is_output(r->p.nodes[i].cls)) {
            rank = 0;
        } else {
            for (int d = 0; d < x->n_dep && rank > 1; d++) {
                const struct xnode *y = &r->x[r->deps[x->dep_off + d]];
                if (node_class_is_output(r->p.nodes[r->deps[x->dep_off + d]].cls)) {
                    rank = 1;
                    break;
                }
                for (int e = 0; e < y->n_dep && rank > 2; e++)
                    if (node_class_is_output(r->p.nodes[r->deps[y->dep_off + e]].cls))
                        rank = 2;
            }
        }
        x->rank = (uint8_t)rank;
    }
    /* Push ready nodes in insertion order (heap order makes this irrelevant). */
    for (int i = 0; i < n; i++)
        if (r->x[i].pending && r->x[i].block == 0)
            heap_push(r, &r->heaps[r->x[i].rank], i);
    return order;
}

static int pick_next(struct run *r)
{
    for (int k = 0; k < 4; k++)
        if (r->heaps[k].n > 0)
            return heap_pop(r, &r->heaps[k]);
    return -1;
}

/*
 * --cache-none: a result is freed as soon as every consumer in this prompt has
 * run (§6.5), so a long graph does not hold every intermediate at once. Output
 * nodes and nodes with a UI result are kept for the history.
 */
static void release_sources(struct run *r, int n)
{
    const struct gnode *gn = &r->p.nodes[n];
    for (int k = 0; k < gn->n_in; k++) {
        int s = gn->in[k].src;
        if (s < 0 || !r->x[s].pending)
            continue;
        int dup = 0;
        for (int j = 0; j < k && !dup; j++)
            dup = gn->in[j].src == s;
        struct xnode *x = &r->x[s];
        if (dup || --x->remaining > 0 || x->ui || node_class_is_output(r->p.nodes[s].cls) || !x->out)
            continue;
        for (int o = 0; o < r->p.nodes[s].n_out; o++)
            value_unref(x->out[o]);
        xfree(x->out);
        x->out = NULL;
        if (x->has_sig)
            gcache_remove(&r->g->cache, x->sig);
    }
}

static void mark_done(struct run *r, int n)
{
    struct xnode *x = &r->x[n];
    x->done = 1;
    if (r->g->cfg.cache_mode == GRAPH_CACHE_NONE)
        release_sources(r, n);
    for (int d = 0; d < x->n_dep; d++) {
        int m = r->deps[x->dep_off + d];
        if (--r->x[m].block == 0)
            heap_push(r, &r->heaps[r->x[m].rank], m);
    }
}

/* ---- running one node ---------------------------------------------------------------- */

/* A validated constant as a value of the input's declared type. */
static struct value *const_value(const struct node_input_def *in, const cJSON *v)
{
    const char *t = in->type;
    if (!strcmp(t, "INT")) {
        int64_t i;
        int big;
        double d;
        if (cJSON_IsBool(v))
            return value_new_int(cJSON_IsTrue(v));
        if (gjson_get_int(v, &i, &big, &d))
            return big ? value_new_u64((uint64_t)i) : value_new_int(i);
        return value_new_int((int64_t)d);
    }
    if (!strcmp(t, "FLOAT")) {
        if (cJSON_IsString(v))
            return value_new_float(strtod(v->valuestring, NULL));
        return value_new_float(cJSON_IsBool(v) ? cJSON_IsTrue(v) : gjson_number(v));
    }
    if (!strcmp(t, "BOOLEAN"))
        return value_new_bool(cJSON_IsTrue(v) || (gjson_is_number(v) && gjson_number(v) != 0));
    if (cJSON_IsString(v))
        return value_new_string(v->valuestring);
    if (!strcmp(t, "STRING") || !strcmp(t, NODE_COMBO)) {
        struct buf b;
        buf_init(&b);
        gjson_py(v, 1, &b);
        struct value *r = value_new_string(b.ptr);
        buf_release(&b);
        return r;
    }
    return NULL; /* a constant on a socket input: the caller reports it */
}

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
    int64_t now = mono_ms();
    int last = value >= max;
    /* Throttle: a fast loop must not flood the socket. The first and the last
     * step always go out. */
    if (!last && r->last_progress_ms && now - r->last_progress_ms < PROGRESS_MIN_INTERVAL_MS)
        return 0;
    r->last_progress_ms = now;
    /* ComfyUI's order: progress_state, then the preview, then progress. */
    pstate_set(r, n, X_RUNNING, value, max);
    if (rgb && r->g->cfg.preview_method != GRAPH_PREVIEW_NONE && r->ev && r->ev->preview &&
        (last || !r->last_preview_ms || now - r->last_preview_ms >= PREVIEW_MIN_INTERVAL_MS)) {
        r->last_preview_ms = now;
        uint8_t *jpg = NULL;
        size_t nb = 0;
        if (node_imageio_preview_jpeg(rgb, w, h, r->g->cfg.preview_size, &jpg, &nb) == 0) {
            r->ev->preview(r->ev->user, 1, jpg, nb, r->p.nodes[n].id, r->job->prompt_id);
            xfree(jpg);
        }
    }
    if (want_events(r)) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddNumberToObject(d, "value", value);
        cJSON_AddNumberToObject(d, "max", max);
        cJSON_AddStringToObject(d, "prompt_id", r->job->prompt_id);
        cJSON_AddStringToObject(d, "node", r->p.nodes[n].id);
        send_ev(r, "progress", d, 0);
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

static cJSON *current_inputs(struct run *r, int n, struct value **in)
{
    const struct gnode *gn = &r->p.nodes[n];
    cJSON *o = cJSON_CreateObject();
    for (int k = 0; k < gn->n_in; k++) {
        const struct value *v = in[k];
        if (!v)
            continue;
        cJSON *item;
        if (v->kind == VALUE_INT)
            item = gjson_int(v->i, v->big);
        else if (v->kind == VALUE_FLOAT)
            item = isfinite(v->f) ? cJSON_CreateNumber(v->f) : cJSON_CreateNull();
        else if (v->kind == VALUE_BOOLEAN)
            item = cJSON_CreateBool((int)v->i);
        else if (v->kind == VALUE_STRING)
            item = cJSON_CreateString(v->s);
        else {
            struct buf b;
            buf_init(&b);
            value_describe(v, &b);
            item = cJSON_CreateString(b.ptr);
            buf_release(&b);
        }
        cJSON *arr = cJSON_CreateArray();
        cJSON_AddItemToArray(arr, item);
        cJSON_AddItemToObject(o, gn->cls->inputs[k].name, arr);
    }
    return o;
}

static void send_failure(struct run *r, int n, int interrupted, const char *exc_type,
                         const char *msg, struct value **in)
{
    const struct gnode *gn = &r->p.nodes[n];
    cJSON *d = base_data(r);
    cJSON_AddStringToObject(d, "node_id", gn->id);
    cJSON_AddStringToObject(d, "node_type", gn->cls->name);
    cJSON_AddItemToObject(d, "executed", cJSON_Duplicate(r->executed, 1));
    if (!interrupted) {
        struct buf m;
        buf_init(&m);
        buf_printf(&m, "%s\n", msg);
        cJSON_AddStringToObject(d, "exception_message", m.ptr);
        buf_release(&m);
        cJSON_AddStringToObject(d, "exception_type", exc_type);
        cJSON_AddItemToObject(d, "traceback", cJSON_CreateArray());
        cJSON_AddItemToObject(d, "current_inputs", in ? current_inputs(r, n, in) : cJSON_CreateObject());
        cJSON *cur = cJSON_AddArrayToObject(d, "current_outputs");
        for (int i = 0; i < r->p.n; i++)
            cJSON_AddItemToArray(cur, cJSON_CreateString(r->p.nodes[i].id));
    }
    cJSON_AddNumberToObject(d, "timestamp", (double)graph__now_ms());
    send_ev(r, interrupted ? "execution_interrupted" : "execution_error", d, 1);
    r->res->status = interrupted ? GRAPH_STATUS_INTERRUPTED : GRAPH_STATUS_ERROR;
}

/* Outputs of source s for this run (from this run, or the cache). */
static struct value *source_value(struct run *r, int s, int slot)
{
    struct xnode *x = &r->x[s];
    if (!x->out) {
        struct gcache_entry *e = cached(r, s);
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
    struct gcache_entry *e = cached(r, n);
    if (e) {
        /* Served from cache: executed (with the old UI output) but no executing. */
        if (!x->out) {
            x->out = xcalloc((size_t)(e->n_out ? e->n_out : 1), sizeof(*x->out));
            for (int i = 0; i < e->n_out; i++)
                x->out[i] = value_ref(e->out[i]);
        }
        x->ui = e->ui;
        send_executed(r, n, e->ui);
        pstate_set(r, n, X_FINISHED, 1.0, 1.0);
        return 0;
    }
    pstate_set(r, n, X_RUNNING, 0.0, 1.0);
    if (want_events(r)) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "node", gn->id);
        cJSON_AddStringToObject(d, "display_node", gn->id);
        cJSON_AddStringToObject(d, "prompt_id", r->job->prompt_id);
        send_ev(r, "executing", d, 0);
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
    const char *bad_input = NULL;
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
            if (d->group == NODE_INPUT_REQUIRED && !bad_input)
                bad_input = d->name;
            continue;
        }
        if (cJSON_IsArray(v)) {
            in[k] = gn->in[k].src >= 0 ? value_ref(source_value(r, gn->in[k].src, gn->in[k].slot)) : NULL;
            if (!in[k] && !bad_input)
                bad_input = d->name;
        } else {
            in[k] = const_value(d, v);
            if (!in[k] && !bad_input)
                bad_input = d->name;
        }
    }
    fill_hidden(r, &c, n);
    void *no_state = NULL; /* classes without instance state get a scratch slot */
    c.instance = gn->cls->instance_free ? instance_slot(r->g, gn) : &no_state;
    if (atomic_exchange(&r->g->interrupt, 0)) {
        send_failure(r, n, 1, NULL, NULL, NULL);
        stop = 1;
        goto out;
    }
    if (bad_input) {
        node_fail(&c, "RuntimeError", "input '%s' of node %s (%s) has no value of type %s", bad_input,
                  gn->id, gn->cls->name, gn->cls->inputs[node_class_input_index(gn->cls, bad_input)].type);
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
        send_failure(r, n, 1, NULL, NULL, NULL);
        stop = 1;
        goto out;
    }
    for (int i = 0; rc >= 0 && i < gn->n_out; i++)
        if (!out[i])
            rc = node_fail(&c, "RuntimeError", "node %s (%s) produced no value for output %d", gn->id,
                           gn->cls->name, i);
    if (rc < 0) {
        if (!c.exc_message.len)
            buf_printf(&c.exc_message, "node %s (%s) failed: %s", gn->id, gn->cls->name, err_str(rc));
        if (rc == ERR_DEVICE_OOM || !strcmp(c.exc_type, "torch.OutOfMemoryError")) {
            /* As ComfyUI: free every model and add its hint (§6.4). */
            if (!c.exc_type[0] || !strcmp(c.exc_type, "RuntimeError"))
                snprintf(c.exc_type, sizeof(c.exc_type), "torch.OutOfMemoryError");
            mm_unload_all(r->g->mm);
            buf_adds(&c.exc_message, "\nThis error means you ran out of memory on your GPU.\n\nTIPS: If the "
                                     "workflow worked before you might have accidentally set the batch_size to "
                                     "a large number.");
        }
        send_failure(r, n, 0, c.exc_type[0] ? c.exc_type : "RuntimeError", c.exc_message.ptr, in);
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
        send_executed(r, n, ui);
    pstate_set(r, n, X_FINISHED, 1.0, 1.0);
    cJSON_AddItemToArray(r->executed, cJSON_CreateString(gn->id));
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

static void build_history(struct run *r)
{
    for (int i = 0; i < r->p.n; i++) {
        const cJSON *ui = r->x[i].ui;
        if (!ui) {
            struct gcache_entry *e = cached(r, i);
            ui = e ? e->ui : NULL;
        }
        if (!ui)
            continue;
        const char *id = r->p.nodes[i].id;
        if (cJSON_GetObjectItemCaseSensitive(r->res->outputs, id))
            continue;
        cJSON_AddItemToObject(r->res->outputs, id, cJSON_Duplicate(ui, 1));
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "node_id", id);
        cJSON_AddStringToObject(m, "display_node", id);
        cJSON_AddNullToObject(m, "parent_node");
        cJSON_AddStringToObject(m, "real_node_id", id);
        cJSON_AddItemToObject(r->res->meta, id, m);
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
    r.executed = cJSON_CreateArray();
    r.hooks = (struct node_hooks){.user = &r, .progress = hook_progress, .interrupted = hook_interrupted};
    cJSON *d = base_data(&r);
    cJSON_AddNumberToObject(d, "timestamp", (double)graph__now_ms());
    send_ev(&r, "execution_start", d, 1);

    if (gprompt_parse(&r.p, g->reg, job->prompt) < 0) {
        /* Not reachable for validated prompts; report it as a node-less error. */
        cJSON *e = base_data(&r);
        cJSON_AddStringToObject(e, "exception_message", "prompt is not an object\n");
        cJSON_AddStringToObject(e, "exception_type", "RuntimeError");
        send_ev(&r, "execution_error", e, 1);
        out->status = GRAPH_STATUS_ERROR;
        cJSON_Delete(r.executed);
        return 0;
    }
    int n = r.p.n;
    r.x = xcalloc((size_t)(n ? n : 1), sizeof(*r.x));
    r.started = xmalloc((size_t)(n ? n : 1) * sizeof(*r.started));
    for (int i = 0; i < n; i++)
        if (!r.p.nodes[i].cls)
            r.x[i].sig_state = 2; /* unknown class: no signature (validation prevents it) */
    compute_sigs(&r);
    apply_policy_start(&r);
    instances_retain(&r);

    d = base_data(&r);
    cJSON *nodes = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        if (cached(&r, i))
            cJSON_AddItemToArray(nodes, cJSON_CreateString(r.p.nodes[i].id));
    cJSON *dd = cJSON_CreateObject();
    cJSON_AddItemToObject(dd, "nodes", nodes);
    cJSON_AddStringToObject(dd, "prompt_id", job->prompt_id);
    cJSON_AddNumberToObject(dd, "timestamp", (double)graph__now_ms());
    cJSON_Delete(d);
    send_ev(&r, "execution_cached", dd, 1);

    int n_pending = build_pending(&r), n_done = 0, stopped = 0;
    int next;
    while ((next = pick_next(&r)) >= 0) {
        if ((stopped = execute_node(&r, next)))
            break;
        mark_done(&r, next);
        n_done++;
    }
    if (!stopped && n_done < n_pending) {
        /* Only an unvalidated prompt gets here: nodes left blocked on each other. */
        for (int i = 0; i < n; i++)
            if (r.x[i].pending && !r.x[i].done) {
                send_failure(&r, i, 0, "RuntimeError", "Dependency cycle detected", NULL);
                break;
            }
    }
    build_history(&r);
    apply_policy_end(&r);
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
    cJSON_Delete(r.executed);
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
