/*
 * Which nodes run and in what order (comfy-api.md §6.2-6.3).
 *
 * Pending nodes are found by ComfyUI's LIFO DFS from the outputs; only links whose
 * source is not cached are followed. A node is ready when all its distinct pending
 * sources are done; among ready nodes ComfyUI takes the first (in
 * pending-insertion order) that is an output node, else the first that feeds an
 * output, else the first that feeds a node feeding an output, else the first. The
 * "feeds" relations only involve nodes that stay pending while the candidate is
 * ready, so each node's rank (0..3) is fixed once the pending set is built, and
 * the choice becomes "lowest rank, then earliest insertion": four binary heaps
 * instead of ComfyUI's scan of the ready list, O(log n) per node.
 */
#include <string.h>

#include "alloc.h"
#include "graph_run.h"

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
int graph__build_pending(struct run *r)
{
    int n = r->p->n, order = 0;
    size_t n_edges = 0, cap_edges = 0;
    int32_t *esrc = NULL, *edst = NULL;
    int32_t *stack = NULL;
    size_t sp = 0, cap_stack = 0;
    const cJSON *outs = r->job->outputs_to_execute;
    for (const cJSON *o = outs ? outs->child : NULL; o; o = o->next) {
        int root = cJSON_IsString(o) ? gprompt_find(r->p, o->valuestring) : -1;
        if (root < 0 || !r->p->nodes[root].cls)
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
            const struct gnode *gn = &r->p->nodes[u];
            size_t first_edge = n_edges;
            for (int j = 0; j < gn->n_keys; j++) {
                int s = gn->in[gn->key_order[j]].src;
                if (s < 0 || graph__cached(r, s))
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
        if (node_class_is_output(r->p->nodes[i].cls)) {
            rank = 0;
        } else {
            for (int d = 0; d < x->n_dep && rank > 1; d++) {
                const struct xnode *y = &r->x[r->deps[x->dep_off + d]];
                if (node_class_is_output(r->p->nodes[r->deps[x->dep_off + d]].cls)) {
                    rank = 1;
                    break;
                }
                for (int e = 0; e < y->n_dep && rank > 2; e++)
                    if (node_class_is_output(r->p->nodes[r->deps[y->dep_off + e]].cls))
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

int graph__pick_next(struct run *r)
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
    const struct gnode *gn = &r->p->nodes[n];
    for (int k = 0; k < gn->n_in; k++) {
        int s = gn->in[k].src;
        if (s < 0 || !r->x[s].pending)
            continue;
        int dup = 0;
        for (int j = 0; j < k && !dup; j++)
            dup = gn->in[j].src == s;
        struct xnode *x = &r->x[s];
        if (dup || --x->remaining > 0 || x->ui || node_class_is_output(r->p->nodes[s].cls) || !x->out)
            continue;
        for (int o = 0; o < r->p->nodes[s].n_out; o++)
            value_unref(x->out[o]);
        xfree(x->out);
        x->out = NULL;
        if (x->has_sig)
            gcache_remove(&r->g->cache, x->sig);
    }
}

void graph__mark_done(struct run *r, int n)
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
