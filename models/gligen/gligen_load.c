/*
 * GLIGEN files (see gligen.h): the tensor list of the position net and of a fuser
 * module, the grouping of a file's fuser tensors by block as load_gligen does, the
 * checks, and the patcher (through the ControlNet loader's item list and patcher
 * building, controlnet_impl.h).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "controlnet_impl.h"
#include "gligen.h"
#include "log.h"

#define FUSER_MARK ".fuser."
#define POSNET "position_net."
#define GROUP_BLOCKS 20 /* load_gligen looks at blocks 0..19 of each kind */

static const char *const group_kinds[] = {"input_blocks", "middle_block", "output_blocks"};

/* A tensor of the layout: name relative to its module (or position_net.), init, shape. */
typedef void (*tensor_fn)(void *user, const char *rel, enum model_init init, int ndim,
                          const int64_t *shape);

#define S(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), ((const int64_t[]){__VA_ARGS__})

/* GatedSelfAttentionDense(query_dim C, context_dim K): CrossAttention (no q/k/v bias),
 * FeedForward(glu: GEGLU to 4C), two LayerNorms, two 0-d gates. */
static void module_tensors(int64_t C, int64_t K, tensor_fn fn, void *u)
{
    fn(u, "linear.weight", MODEL_INIT_WEIGHT, S(C, K));
    fn(u, "linear.bias", MODEL_INIT_BIAS, S(C));
    fn(u, "attn.to_q.weight", MODEL_INIT_WEIGHT, S(C, C));
    fn(u, "attn.to_k.weight", MODEL_INIT_WEIGHT, S(C, C));
    fn(u, "attn.to_v.weight", MODEL_INIT_WEIGHT, S(C, C));
    fn(u, "attn.to_out.0.weight", MODEL_INIT_WEIGHT, S(C, C));
    fn(u, "attn.to_out.0.bias", MODEL_INIT_BIAS, S(C));
    fn(u, "ff.net.0.proj.weight", MODEL_INIT_WEIGHT, S(8 * C, C));
    fn(u, "ff.net.0.proj.bias", MODEL_INIT_BIAS, S(8 * C));
    fn(u, "ff.net.2.weight", MODEL_INIT_WEIGHT, S(C, 4 * C));
    fn(u, "ff.net.2.bias", MODEL_INIT_BIAS, S(C));
    fn(u, "norm1.weight", MODEL_INIT_NORM, S(C));
    fn(u, "norm1.bias", MODEL_INIT_BIAS, S(C));
    fn(u, "norm2.weight", MODEL_INIT_NORM, S(C));
    fn(u, "norm2.bias", MODEL_INIT_BIAS, S(C));
    /* initialised to 0 (an identity) in training; NORM draws ~1: tests see them act */
    fn(u, "alpha_attn", MODEL_INIT_NORM, 0, NULL);
    fn(u, "alpha_dense", MODEL_INIT_NORM, 0, NULL);
}

/* PositionNet(in_dim, out_dim K), names without the position_net. prefix. */
static void posnet_tensors(int64_t in, int64_t K, tensor_fn fn, void *u)
{
    fn(u, "null_positive_feature", MODEL_INIT_BIAS, S(in));
    fn(u, "null_position_feature", MODEL_INIT_BIAS, S(GLIGEN_POS_DIM));
    fn(u, "linears.0.weight", MODEL_INIT_WEIGHT, S(GLIGEN_HIDDEN, in + GLIGEN_POS_DIM));
    fn(u, "linears.0.bias", MODEL_INIT_BIAS, S(GLIGEN_HIDDEN));
    fn(u, "linears.2.weight", MODEL_INIT_WEIGHT, S(GLIGEN_HIDDEN, GLIGEN_HIDDEN));
    fn(u, "linears.2.bias", MODEL_INIT_BIAS, S(GLIGEN_HIDDEN));
    fn(u, "linears.4.weight", MODEL_INIT_WEIGHT, S(K, GLIGEN_HIDDEN));
    fn(u, "linears.4.bias", MODEL_INIT_BIAS, S(K));
}

/* load_gligen's head split: 8 heads for SD1.x's 768-wide tokens, else 64-wide heads. */
static int heads_for(int query_dim, int key_dim)
{
    if (key_dim == 768)
        return query_dim % 8 == 0 ? 8 : 0;
    return query_dim % 64 == 0 ? query_dim / 64 : 0;
}

/* ---- layout (the generator's) ---- */

struct layout_walk {
    void (*fn)(void *user, const struct model_key *k);
    void *user;
    const char *prefix; /* file name prefix of the tensors emitted next */
    const char *layer;
    size_t n;
};

static void layout_emit(void *user, const char *rel, enum model_init init, int ndim,
                        const int64_t *shape)
{
    struct layout_walk *w = user;
    struct model_key k;
    memset(&k, 0, sizeof k);
    snprintf(k.name, sizeof k.name, "%s%s", w->prefix, rel);
    snprintf(k.layer, sizeof k.layer, "%s", w->layer);
    k.comp = MODEL_UNET;
    k.init = init;
    k.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        k.shape[i] = shape[i];
    w->fn(w->user, &k);
    w->n++;
}

size_t gligen_layout(const struct gligen_arch *a,
                     void (*fn)(void *user, const struct model_key *k), void *user)
{
    struct layout_walk w = {.fn = fn, .user = user, .prefix = POSNET, .layer = "position_net"};
    char prefix[96], layer[48];
    posnet_tensors(a->in_dim, a->key_dim, layout_emit, &w);
    for (int i = 0; i < a->n_modules; i++) {
        const struct gligen_module *m = &a->m[i];
        /* an input/output block's SpatialTransformer is its second module (".1") */
        int mid = strncmp(m->block, "middle_block.", 13) == 0;
        snprintf(prefix, sizeof prefix, "%s%s.transformer_blocks.0" FUSER_MARK, m->block,
                 mid ? "" : ".1");
        snprintf(layer, sizeof layer, "fuser.%d", i);
        w.prefix = prefix;
        w.layer = layer;
        module_tensors(m->query_dim, a->key_dim, layout_emit, &w);
    }
    return w.n;
}

void gligen_arch_for_unet(const struct unet_arch *u, int in_dim, int key_dim,
                          struct gligen_arch *out)
{
    struct unet_blocks bl;
    memset(out, 0, sizeof *out);
    out->in_dim = in_dim;
    out->key_dim = key_dim;
    unet_blocks_build(u, &bl);
    for (int i = 0; i < bl.n && out->n_modules < GLIGEN_MAX_MODULES; i++) {
        const struct unet_block *b = &bl.v[i];
        if (b->op != UNET_OP_ST)
            continue;
        struct gligen_module *m = &out->m[out->n_modules++];
        /* the group name: "input_blocks.1.1" -> "input_blocks.1"; "middle_block.1" stays */
        const char *dot = strrchr(b->name, '.');
        int mid = strncmp(b->name, "middle_block.", 13) == 0;
        snprintf(m->block, sizeof m->block, "%.*s", mid ? (int)strlen(b->name) : (int)(dot - b->name),
                 b->name);
        m->query_dim = b->co;
        m->heads = heads_for(b->co, key_dim);
    }
}

/* ---- the file ---- */

/* A fuser group: its file prefix (up to and including ".fuser.") and block name. */
struct group {
    char block[32];
    char prefix[192];
};

struct load {
    const struct st_file *f;
    struct err *e;
    int rc;
    char *used;                 /* [f->n_tensors]: taken by the layout */
    struct ckpt__items items;   /* owned */
    const char *file_prefix;    /* of the tensors checked next */
    const char *key_prefix;     /* their patcher key prefix ("fuser.3.", "position_net.") */
    const char *layer;
    float *gates[2];            /* a module's alpha_attn, alpha_dense (read here) */
};

static const struct st_tensor *find_tensor(const struct load *l, const char *name, size_t *idx)
{
    for (size_t i = 0; i < l->f->n_tensors; i++)
        if (strcmp(l->f->tensors[i].name, name) == 0) {
            *idx = i;
            return &l->f->tensors[i];
        }
    return NULL;
}

/* One expected tensor: present, its shape, a float dtype, finite; a 0-d gate is read,
 * the rest joins the patcher's items. */
static void check_tensor(void *user, const char *rel, enum model_init init, int ndim,
                         const int64_t *shape)
{
    struct load *l = user;
    char name[256];
    size_t idx = 0;
    if (l->rc < 0)
        return;
    snprintf(name, sizeof name, "%s%s", l->file_prefix, rel);
    const struct st_tensor *t = find_tensor(l, name, &idx);
    if (!t) {
        l->rc = err_set(l->e, ERR_INVALID, "'%s': GLIGEN tensor '%s' is missing", l->f->path,
                        name);
        return;
    }
    l->used[idx] = 1;
    struct model_key k;
    memset(&k, 0, sizeof k);
    snprintf(k.name, sizeof k.name, "%s%s", l->key_prefix, rel);
    snprintf(k.layer, sizeof k.layer, "%s", l->layer);
    k.comp = MODEL_UNET;
    k.init = init;
    k.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        k.shape[i] = shape[i];
    if ((l->rc = ckpt__check_tensor(l->f, t, &k, l->e)) < 0)
        return;
    if (ndim > 0) {
        ckpt__items_push(&l->items, &k, t);
        return;
    }
    enum tensor_dtype dt;
    ckpt__tensor_dtype(t, &dt); /* checked */
    float v;
    tensor_convert_host(&v, TENSOR_F32, st_tensor_data(l->f, t), dt, 1);
    *l->gates[strcmp(rel, "alpha_attn") == 0 ? 0 : 1] = tanhf(v);
}

/* What a file without a position net holds, for the error (a checkpoint first: it holds
 * a VAE too). */
static int not_gligen(const struct st_file *f, struct err *e)
{
    int ckpt = 0, cn = 0, lora = 0, vae = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const char *nm = f->tensors[i].name;
        ckpt |= strncmp(nm, "model.diffusion_model.", 22) == 0;
        cn |= strstr(nm, "zero_convs.") || strncmp(nm, "control_model.", 14) == 0 ||
              strncmp(nm, "controlnet_", 11) == 0;
        lora |= strstr(nm, "lora_up.") || strstr(nm, "lora_A") || strncmp(nm, "lora_", 5) == 0;
        vae |= strncmp(nm, "encoder.", 8) == 0 || strncmp(nm, "first_stage_model.", 18) == 0;
    }
    const char *what = ckpt ? "a checkpoint (model.diffusion_model.*), not a GLIGEN model"
                       : cn ? "a ControlNet, not a GLIGEN model"
                       : lora ? "a LoRA file, not a GLIGEN model"
                       : vae ? "a VAE, not a GLIGEN model"
                             : "no position_net.null_positive_feature";
    return err_set(e, ERR_UNSUPPORTED, "'%s' is not a supported GLIGEN model: %s", f->path,
                   what);
}

/* The group of a fuser tensor, in load_gligen's order (kind, then block 0..19): -1 none. */
static int group_of(const char *name)
{
    char pat[40];
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < GROUP_BLOCKS; b++) {
            snprintf(pat, sizeof pat, "%s.%d.", group_kinds[a], b);
            if (strstr(name, pat))
                return a * GROUP_BLOCKS + b;
        }
    return -1;
}

/* The last ".fuser." of name (Python's split(".fuser.")[-1]). */
static const char *fuser_at(const char *name)
{
    const char *p = strstr(name, FUSER_MARK), *q;
    while (p && (q = strstr(p + 1, FUSER_MARK)))
        p = q;
    return p;
}

/* The modules: groups with fuser tensors, in order, each with one file prefix. */
static int find_groups(const struct st_file *f, struct group *g, int *n, struct err *e)
{
    char seen[3 * GROUP_BLOCKS] = {0};
    struct group all[3 * GROUP_BLOCKS];
    for (size_t i = 0; i < f->n_tensors; i++) {
        const char *nm = f->tensors[i].name, *at = fuser_at(nm);
        int gi = at ? group_of(nm) : -1;
        if (gi < 0)
            continue;
        size_t plen = (size_t)(at - nm) + strlen(FUSER_MARK);
        if (plen >= sizeof all[0].prefix)
            return err_set(e, ERR_INVALID, "'%s': tensor name '%s' is too long", f->path, nm);
        if (!seen[gi]) {
            seen[gi] = 1;
            snprintf(all[gi].block, sizeof all[gi].block, "%s.%d", group_kinds[gi / GROUP_BLOCKS],
                     gi % GROUP_BLOCKS);
            snprintf(all[gi].prefix, sizeof all[gi].prefix, "%.*s", (int)plen, nm);
        } else if (strlen(all[gi].prefix) != plen || strncmp(all[gi].prefix, nm, plen) != 0) {
            /* load_gligen would merge them into one module's dict, one overwriting the other */
            return err_set(e, ERR_UNSUPPORTED,
                           "'%s': block '%s' has more than one GLIGEN fuser ('%s' and '%.*s')",
                           f->path, all[gi].block, all[gi].prefix, (int)plen, nm);
        }
    }
    *n = 0;
    for (int i = 0; i < 3 * GROUP_BLOCKS; i++)
        if (seen[i]) {
            if (*n == GLIGEN_MAX_MODULES)
                return err_set(e, ERR_UNSUPPORTED, "'%s': more than %d GLIGEN modules", f->path,
                               GLIGEN_MAX_MODULES);
            g[(*n)++] = all[i];
        }
    return 0;
}

/* Widths from the tensors that carry them (fuser linear, position net ends). */
static int module_dims(struct load *l, const struct group *g, int *C, int *K)
{
    char name[256];
    size_t idx;
    snprintf(name, sizeof name, "%slinear.weight", g->prefix);
    const struct st_tensor *t = find_tensor(l, name, &idx);
    if (!t || t->ndim != 2 || t->shape[0] < 1 || t->shape[1] < 1 || t->shape[0] > 1 << 16 ||
        t->shape[1] > 1 << 16)
        return err_set(l->e, ERR_INVALID, "'%s': GLIGEN module '%s' needs linear.weight [C, K]",
                       l->f->path, g->block);
    *C = (int)t->shape[0];
    *K = (int)t->shape[1];
    return 0;
}

static int check_all(struct load *l, struct gligen_arch *a, const struct group *groups, int n)
{
    char key[32], layer[48];
    size_t idx;
    int rc;
    const struct st_tensor *np = find_tensor(l, POSNET "null_positive_feature", &idx);
    const struct st_tensor *l4 = find_tensor(l, POSNET "linears.4.weight", &idx);
    if (!np || np->ndim != 1 || np->shape[0] < 1 || np->shape[0] > 1 << 16 || !l4 ||
        l4->ndim != 2)
        return err_set(l->e, ERR_INVALID,
                       "'%s': GLIGEN position net needs null_positive_feature [in] and "
                       "linears.4.weight [out, %d]",
                       l->f->path, GLIGEN_HIDDEN);
    a->in_dim = (int)np->shape[0];
    a->key_dim = (int)l4->shape[0];
    a->n_modules = n;
    for (int i = 0; i < n; i++) {
        struct gligen_module *m = &a->m[i];
        int C = 0, K = 0;
        if ((rc = module_dims(l, &groups[i], &C, &K)) < 0)
            return rc;
        if (K != a->key_dim) /* objs from the position net go through every fuser.linear */
            return err_set(l->e, ERR_INVALID,
                           "'%s': GLIGEN module '%s' takes %d-wide object tokens but the "
                           "position net makes %d",
                           l->f->path, groups[i].block, K, a->key_dim);
        snprintf(m->block, sizeof m->block, "%s", groups[i].block);
        m->query_dim = C;
        if (!(m->heads = heads_for(C, K)))
            return err_set(l->e, ERR_UNSUPPORTED,
                           "'%s': GLIGEN module '%s' is %d wide: no %s heads", l->f->path,
                           groups[i].block, C, K == 768 ? "8" : "64-wide");
        snprintf(key, sizeof key, "fuser.%d.", i);
        snprintf(layer, sizeof layer, "fuser.%d", i);
        l->file_prefix = groups[i].prefix;
        l->key_prefix = key;
        l->layer = layer;
        l->gates[0] = &m->gate_attn;
        l->gates[1] = &m->gate_dense;
        module_tensors(C, K, check_tensor, l);
        if (l->rc < 0)
            return l->rc;
    }
    l->file_prefix = l->key_prefix = POSNET;
    l->layer = "position_net";
    posnet_tensors(a->in_dim, a->key_dim, check_tensor, l);
    if (l->rc < 0)
        return l->rc;
    for (size_t i = 0; i < l->f->n_tensors; i++)
        if (!l->used[i])
            return err_set(l->e, ERR_INVALID,
                           "'%s': unexpected tensor '%s' (not part of the GLIGEN layout)",
                           l->f->path, l->f->tensors[i].name);
    return 0;
}

int gligen_load(const char *path, enum tensor_dtype dt, struct gligen **out, struct err *e)
{
    struct st_file *f = NULL;
    struct group *groups = NULL;
    struct gligen *g = NULL;
    struct load l = {.e = e};
    int rc, n = 0;
    *out = NULL;
    if ((rc = st_open(path, &f, e)) < 0)
        return rc;
    if (!st_find(f, POSNET "null_positive_feature")) {
        rc = not_gligen(f, e);
        goto fail;
    }
    groups = xcalloc(GLIGEN_MAX_MODULES, sizeof *groups);
    if ((rc = find_groups(f, groups, &n, e)) < 0)
        goto fail;
    if (n == 0) {
        rc = err_set(e, ERR_INVALID, "'%s': a GLIGEN position net without fuser modules", path);
        goto fail;
    }
    g = xcalloc(1, sizeof *g);
    l.f = f;
    l.used = xcalloc(f->n_tensors ? f->n_tensors : 1, 1);
    if ((rc = check_all(&l, &g->a, groups, n)) < 0)
        goto fail;
    if ((rc = controlnet__patcher_new(&f, &l.items, NULL, dt, "gligen", &g->p, e)) < 0)
        goto fail;
    atomic_init(&g->_refs, 1);
    log_info("loaded GLIGEN '%s': %d modules, %d-wide text, %d-wide object tokens, %zu tensors",
             path, n, g->a.in_dim, g->a.key_dim, l.items.n);
    xfree(l.items.v);
    xfree(l.used);
    xfree(groups);
    *out = g;
    return 0;
fail:
    xfree(l.items.v);
    xfree(l.used);
    xfree(groups);
    xfree(g);
    st_close(f);
    return rc;
}

void gligen_ref(struct gligen *g)
{
    atomic_fetch_add(&g->_refs, 1);
}

void gligen_unref(struct gligen *g)
{
    if (!g || atomic_fetch_sub(&g->_refs, 1) != 1)
        return;
    patcher_unref(g->p);
    xfree(g);
}

int gligen_fits(const struct gligen *g, const struct unet_arch *u, int pooled_dim,
                struct err *e)
{
    struct gligen_arch want;
    gligen_arch_for_unet(u, g->a.in_dim, g->a.key_dim, &want);
    if (want.n_modules != g->a.n_modules)
        return err_set(e, ERR_INVALID,
                       "this GLIGEN model has %d modules but the model's UNet has %d "
                       "transformers (a GLIGEN model for another model type?)",
                       g->a.n_modules, want.n_modules);
    for (int i = 0; i < want.n_modules; i++)
        if (want.m[i].query_dim != g->a.m[i].query_dim)
            return err_set(e, ERR_INVALID,
                           "GLIGEN module %d ('%s') is %d wide but the UNet's transformer %d is "
                           "%d (a GLIGEN model for another model type?)",
                           i, g->a.m[i].block, g->a.m[i].query_dim, i, want.m[i].query_dim);
    if (pooled_dim > 0 && pooled_dim != g->a.in_dim)
        return err_set(e, ERR_INVALID,
                       "this GLIGEN model takes %d-wide text embeddings, the CLIP gave %d (a "
                       "GLIGEN model for another model type?)",
                       g->a.in_dim, pooled_dim);
    return 0;
}
