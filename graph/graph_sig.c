/*
 * Node signatures (the cache key, comfy-api.md §6.5) and the cache policy per
 * mode (classic, LRU, none).
 */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "graph_run.h"

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

/* IS_CHANGED: the node's fingerprint of outside state, from its constant inputs. */
static int node_fingerprint(struct run *r, int n, struct buf *out)
{
    const struct gnode *gn = &r->p->nodes[n];
    struct value **in = xcalloc((size_t)(gn->n_in ? gn->n_in : 1), sizeof(*in));
    for (int k = 0; k < gn->n_in; k++)
        if (gn->in[k].json && !gjson_is_link(gn->in[k].json))
            in[k] = gin_const_value(&gn->in[k], &gn->cls->inputs[k]);
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

/* Whether the class sees the node id, which then joins the key (§6.5). */
static int class_sees_id(const struct node_class *cls, int n_in)
{
    if (cls->flags & NODE_CLASS_NOT_IDEMPOTENT)
        return 1;
    for (int k = 0; k < n_in; k++)
        if (cls->inputs[k].group == NODE_INPUT_HIDDEN && !strcmp(cls->inputs[k].type, "UNIQUE_ID"))
            return 1;
    return 0;
}

#define SIG_LINK 8 /* an input's mark in sig_base: a link (its source joins at run time) */

/*
 * The signature's prompt-only part. Inputs go in declared order, each as its index
 * and then its constant or SIG_LINK: the class fixes which name an index is, so
 * two nodes' keys are equal exactly when ComfyUI's (inputs sorted by name) are.
 * Hashing this once per prompt, not per run, keeps a cached run off the prompt's
 * JSON (scattered objects: the all-cached chain spent most of its signature time
 * waiting on them).
 */
void gprompt_hash_inputs(struct gprompt *p)
{
    /* What depends on the class alone (its name hashed, whether it sees the id),
     * for the few classes a prompt repeats: a quarter of this function's work. */
    struct {
        const struct node_class *cls;
        struct ghash h;
        int sees_id;
    } memo[16] = {{0}};
    for (int i = 0; i < p->n; i++) {
        struct gnode *gn = &p->nodes[i];
        if (!gn->cls)
            continue;
        size_t m = ((uintptr_t)gn->cls >> 4) % 16;
        if (memo[m].cls != gn->cls) {
            memo[m].cls = gn->cls;
            ghash_init(&memo[m].h);
            ghash_str(&memo[m].h, gn->cls->name);
            memo[m].sees_id = class_sees_id(gn->cls, gn->n_in);
        }
        gn->sig_base = memo[m].h;
        if (memo[m].sees_id)
            ghash_str(&gn->sig_base, gn->id);
        gn->sig_open = 0;
        for (int k = 0; k < gn->n_in; k++) {
            const struct gin *in = &gn->in[k];
            if (!in->json || gn->cls->inputs[k].group == NODE_INPUT_HIDDEN)
                continue;
            ghash_u64(&gn->sig_base, (uint64_t)k);
            if (!gjson_is_link(in->json))
                hash_json(&gn->sig_base, in->json);
            else if (in->src >= 0)
                ghash_u64(&gn->sig_base, SIG_LINK);
            else
                gn->sig_open = 1;
        }
    }
}

/* Compute node n's signature once its sources have theirs: the prompt-only part,
 * IS_CHANGED's fingerprint, then each link's source signature and slot. */
static void sig_one(struct run *r, int n)
{
    const struct gnode *gn = &r->p->nodes[n];
    struct xnode *x = &r->x[n];
    x->has_sig = 0;
    if (gn->sig_open)
        return;
    struct ghash h = gn->sig_base;
    if (gn->cls->is_changed) {
        struct buf fp;
        buf_init(&fp);
        if (node_fingerprint(r, n, &fp) < 0) {
            buf_release(&fp);
            return; /* ComfyUI's NaN: never equal, always re-run */
        }
        ghash_str(&h, fp.ptr);
        buf_release(&fp);
    }
    for (int k = 0; k < gn->n_in; k++) {
        const struct gin *in = &gn->in[k];
        if (in->src < 0)
            continue;
        if (!r->x[in->src].has_sig)
            return;
        ghash_u64(&h, (uint64_t)k);
        ghash_u64(&h, r->x[in->src].sig.a);
        ghash_u64(&h, r->x[in->src].sig.b);
        ghash_u64(&h, (uint64_t)in->slot);
    }
    x->has_sig = 1;
    x->sig = ghash_final(&h);
}

/* Signatures for every node (iterative post-order; nodes in cycles get none). */
void graph__compute_sigs(struct run *r)
{
    int n = r->p->n;
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
            const struct gnode *gn = &r->p->nodes[node];
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

struct gcache_entry *graph__cached(struct run *r, int n)
{
    return r->x[n].has_sig ? gcache_get(&r->g->cache, r->x[n].sig) : NULL;
}

/* ---- cache policy ------------------------------------------------------------------- */

static int drop_unused(struct gcache_entry *e, void *u)
{
    return e->used_now != *(uint64_t *)u;
}

void graph__policy_start(struct run *r)
{
    struct graph_ctx *g = r->g;
    if (g->cfg.cache_mode == GRAPH_CACHE_NONE) {
        gcache_clear(&g->cache);
        return;
    }
    for (int i = 0; i < r->p->n; i++) {
        struct gcache_entry *e = graph__cached(r, i);
        if (e) {
            e->used_now = g->gen;
            e->gen = g->gen;
            r->x[i].cached_at_start = 1; /* kept by the filter below: used_now is this gen */
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

void graph__policy_end(struct run *r)
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
