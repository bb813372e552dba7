/*
 * brownian — torchsde's BrownianTree as ComfyUI's SDE samplers use it
 * (sampling_brownian.h describes the process and its one deviation).
 *
 * The tree's shape is kept (a few dozen small nodes per query). A node's increment
 * comes from its parent's, so the increments of the last path computed are kept,
 * one buffer per depth: the next interval (a sibling, or a query next to the last)
 * shares most of that path and costs a randn per new level. torchsde's LRU cache of
 * 45 entries does the same job; the values do not depend on either. The depth is
 * bounded by the interval: log2(width / 1e-6) levels (+3) before the rounded
 * midpoints stop moving, and at most BT_MAX_DEPTH.
 */
#include "sampling_brownian.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

#define BT_POOL 24          /* BrownianTree's pool_size */
#define BT_MAX_DEPTH 60     /* where torchsde would hit RecursionError, we stop splitting (keys fit 64 bits) */

/* ---- numpy's SeedSequence (numpy/random/bit_generator.pyx) ---------------------------- */

#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_MULT_L 0xca01f9ddu
#define SS_MIX_MULT_R 0x4973f715u
#define SS_XSHIFT 16

static uint32_t ss_hashmix(uint32_t v, uint32_t *hc)
{
    v ^= *hc;
    *hc *= SS_MULT_A;
    v *= *hc;
    v ^= v >> SS_XSHIFT;
    return v;
}

static uint32_t ss_mix(uint32_t x, uint32_t y)
{
    uint32_t r = SS_MIX_MULT_L * x - SS_MIX_MULT_R * y;
    r ^= r >> SS_XSHIFT;
    return r;
}

/* _int_to_uint32_array: little-endian 32-bit words, [0] for 0. */
static int ss_words(uint64_t v, uint32_t *w)
{
    if (v == 0) {
        w[0] = 0;
        return 1;
    }
    int n = 0;
    while (v) {
        w[n++] = (uint32_t)v;
        v >>= 32;
    }
    return n;
}

void sampling_seedseq_state(uint64_t entropy, int has_key, uint64_t key, uint64_t depth, int pool,
                            uint32_t *out, int n_out)
{
    uint32_t ent[64 + 6], mixer[64];
    ASSERT(pool > 0 && pool <= 64);
    int n = ss_words(entropy, ent);
    if (has_key) {
        /* With a spawn key the run entropy is padded to the pool size (numpy >= 1.19). */
        while (n < pool)
            ent[n++] = 0;
        n += ss_words(key, ent + n);
        n += ss_words(depth, ent + n);
    }
    uint32_t hc = SS_INIT_A;
    for (int i = 0; i < pool; i++)
        mixer[i] = ss_hashmix(i < n ? ent[i] : 0, &hc);
    for (int s = 0; s < pool; s++)
        for (int d = 0; d < pool; d++)
            if (s != d)
                mixer[d] = ss_mix(mixer[d], ss_hashmix(mixer[s], &hc));
    for (int s = pool; s < n; s++)
        for (int d = 0; d < pool; d++)
            mixer[d] = ss_mix(mixer[d], ss_hashmix(ent[s], &hc));
    uint32_t hb = SS_INIT_B;
    for (int i = 0; i < n_out; i++) {
        uint32_t v = mixer[i % pool];
        v ^= hb;
        hb *= SS_MULT_B;
        v *= hb;
        v ^= v >> SS_XSHIFT;
        out[i] = v;
    }
}

/* ---- the interval tree ----------------------------------------------------------------- */

struct bnode {
    double start, end; /* rounded ends */
    double mid;        /* rounded split point, when split */
    int split;
    int is_left;
    int depth;         /* the spawn key's depth (root 0) */
    uint64_t key;      /* spawn key (root 0; < 2^BT_MAX_DEPTH) */
    uint32_t w_seed;   /* the bridge noise of this node's children */
    struct bnode *parent, *left, *right; /* owned: left, right */
};

struct sampling_brownian {
    uint64_t seed;
    enum sampling_randn_variant variant;
    size_t n;
    int max_depth;  /* splits stop here (<= BT_MAX_DEPTH) */
    struct bnode root;
    float *buf;     /* owned: all the buffers below */
    float *w_a;     /* [n] one interval's increment */
    float *z;       /* [n] bridge noise */
    float *acc;     /* [n] sum over the covering intervals */
    float *path_w;  /* [(max_depth + 1) * n] increments of path_node[d]; level 0 the root's */
    const struct bnode *path_node[BT_MAX_DEPTH + 1];
    int path_len;   /* valid levels of path_w (>= 1) */
    struct bnode **found; /* covering intervals of the current query; owned */
    int n_found, cap_found;
};

/* Python's round(x, 6): correctly rounded to 6 decimals, ties to even, back to double. */
static double round6(double x)
{
    char s[64];
    snprintf(s, sizeof s, "%.6f", x);
    return strtod(s, NULL);
}

static void randn_seeded(struct sampling_brownian *bt, uint32_t seed, float *out)
{
    struct sampling_rng rng;
    sampling_rng_seed(&rng, seed);
    sampling_rng_randn(&rng, out, bt->n, bt->variant);
}

static struct bnode *node_new(struct bnode *parent, double start, double end, int is_left)
{
    struct bnode *c = xcalloc(1, sizeof *c);
    c->parent = parent;
    c->start = round6(start);
    c->end = round6(end);
    c->is_left = is_left;
    /* _set_spawn_key_and_depth (torchsde sets them at the split; the values are these). */
    c->key = 2 * parent->key + (is_left ? 0 : 1);
    c->depth = parent->depth + 1;
    return c;
}

static void node_free_children(struct bnode *b)
{
    if (!b->split)
        return;
    node_free_children(b->left);
    node_free_children(b->right);
    xfree(b->left);
    xfree(b->right);
}

/* _split_exact: children at `midway`, and this node's seed from its spawn key. */
static void split_exact(struct sampling_brownian *bt, struct bnode *b, double midway)
{
    b->mid = round6(midway);
    uint32_t st[1];
    sampling_seedseq_state(bt->seed, 1, b->key, (uint64_t)b->depth, BT_POOL, st, 1);
    b->w_seed = st[0];
    b->left = node_new(b, b->start, midway, 1);
    b->right = node_new(b, midway, b->end, 0);
    b->split = 1;
}

/* _split with halfway_tree: halve, then halve the side holding q until q is a midpoint. */
static void split_halfway(struct sampling_brownian *bt, struct bnode *b, double q)
{
    while (b->depth < bt->max_depth) {
        split_exact(bt, b, 0.5 * (b->end + b->start));
        if (q > b->mid)
            b = b->right;
        else if (q < b->mid)
            b = b->left;
        else
            return;
    }
}

static void found_add(struct sampling_brownian *bt, struct bnode *b)
{
    if (bt->n_found == bt->cap_found) {
        bt->cap_found = bt->cap_found ? 2 * bt->cap_found : 16;
        bt->found = xrealloc(bt->found, (size_t)bt->cap_found * sizeof *bt->found);
    }
    bt->found[bt->n_found++] = b;
}

/*
 * _loc_inner from the root: the intervals covering [ta, tb] in order, splitting
 * where needed. Starting at the root instead of the last interval gives the same
 * intervals: the search only climbs to the first ancestor that holds the query.
 */
static void locate(struct sampling_brownian *bt, struct bnode *b, double ta, double tb)
{
    for (;;) {
        if ((ta == b->start && tb == b->end) || b->depth >= bt->max_depth) {
            found_add(bt, b);
            return;
        }
        if (!b->split) {
            split_halfway(bt, b, ta == b->start ? tb : ta);
            if (!b->split) { /* at the depth limit */
                found_add(bt, b);
                return;
            }
        }
        if (tb <= b->mid) {
            b = b->left;
        } else if (ta >= b->mid) {
            b = b->right;
        } else {
            locate(bt, b->left, ta, b->mid);
            ta = b->mid;
            b = b->right;
        }
    }
}

/*
 * The increment of `b` into out: the root's, then each child's Brownian bridge
 * down the path (_increment_and_space_time_levy_area without H), float32 as torch,
 * starting below the levels the last path shares with this one.
 */
static void increment(struct sampling_brownian *bt, const struct bnode *b, float *out)
{
    const struct bnode *path[BT_MAX_DEPTH + 1];
    for (const struct bnode *p = b; p; p = p->parent)
        path[p->depth] = p;
    int depth = b->depth, k = 1; /* level 0 is always the root */
    size_t n = bt->n;
    while (k <= depth && k < bt->path_len && bt->path_node[k] == path[k])
        k++;
    for (; k <= depth; k++) {
        const struct bnode *c = path[k], *p = path[k - 1];
        const float *wp = bt->path_w + (size_t)(k - 1) * n;
        float *wc = bt->path_w + (size_t)k * n;
        double h_recip = 1.0 / (p->end - p->start);
        double left_diff = p->mid - p->start, right_diff = p->end - p->mid;
        /* mean = left_diff * W * h_reciprocal: two float32 products, scalars as float. */
        float fl = (float)left_diff, fh = (float)h_recip;
        double var = left_diff * right_diff * h_recip;
        float sd = (float)sqrt(var);
        randn_seeded(bt, p->w_seed, bt->z);
        for (size_t i = 0; i < n; i++) {
            float mean = wp[i] * fl;
            mean = mean * fh;
            float dev = bt->z[i] * sd;
            float left_w = mean + dev;
            wc[i] = c->is_left ? left_w : wp[i] - left_w;
        }
        bt->path_node[k] = c;
    }
    bt->path_len = depth + 1;
    memcpy(out, bt->path_w + (size_t)depth * n, n * sizeof *out);
}

int sampling_brownian_new(uint64_t seed, float sigma_min, float sigma_max, size_t n,
                          enum sampling_randn_variant variant, struct sampling_brownian **out,
                          struct err *e)
{
    *out = NULL;
    if (!(sigma_min < sigma_max) || !isfinite(sigma_min) || !isfinite(sigma_max) || n == 0)
        return err_set(e, ERR_INVALID, "invalid Brownian tree interval [%g, %g]", sigma_min,
                       sigma_max);
    double t0 = sigma_min, t1 = sigma_max;
    int max_depth = (int)ceil(log2((t1 - t0) / 1e-6 + 1.0)) + 3;
    if (max_depth > BT_MAX_DEPTH)
        max_depth = BT_MAX_DEPTH;
    size_t bufs = 3 + (size_t)(max_depth + 1);
    int rc = alloc_host_check_n(bufs * n, sizeof(float), e);
    if (rc < 0)
        return rc;
    float *buf = NULL;
    if ((rc = xtry_malloc(bufs * n * sizeof(float), (void **)&buf, e)) < 0)
        return rc;
    struct sampling_brownian *bt = xcalloc(1, sizeof *bt);
    bt->seed = seed;
    bt->variant = variant;
    bt->n = n;
    bt->max_depth = max_depth;
    bt->buf = buf;
    bt->w_a = buf;
    bt->z = buf + n;
    bt->acc = buf + 2 * n;
    bt->path_w = buf + 3 * n;
    /* BrownianInterval.__init__: ends rounded, W from the unrounded ends. */
    bt->root.start = round6(t0);
    bt->root.end = round6(t1);
    uint32_t st[3];
    sampling_seedseq_state(seed, 0, 0, 0, BT_POOL, st, 3);
    float *w_root = bt->path_w;
    randn_seeded(bt, st[0], w_root);
    float scale = (float)sqrt(t1 - t0);
    for (size_t i = 0; i < n; i++)
        w_root[i] = w_root[i] * scale;
    bt->path_node[0] = &bt->root;
    bt->path_len = 1;
    *out = bt;
    return 0;
}

void sampling_brownian_free(struct sampling_brownian *bt)
{
    if (!bt)
        return;
    node_free_children(&bt->root);
    xfree(bt->found);
    xfree(bt->buf);
    xfree(bt);
}

void sampling_brownian_noise(struct sampling_brownian *bt, float sigma, float sigma_next,
                             float *out)
{
    size_t n = bt->n;
    /* BatchedBrownianTree: the query sorted, the sign kept. */
    float lo = sigma < sigma_next ? sigma : sigma_next, hi = sigma < sigma_next ? sigma_next : sigma;
    float sign = sigma < sigma_next ? 1.0f : -1.0f;
    /* BrownianInterval.__call__: clamped to the (rounded) ends before the ta == tb test. */
    double ta = lo, tb = hi;
    if (ta < bt->root.start)
        ta = bt->root.start;
    if (tb < bt->root.start)
        tb = bt->root.start;
    if (ta > bt->root.end)
        ta = bt->root.end;
    if (tb > bt->root.end)
        tb = bt->root.end;
    if (ta == tb) {
        memset(bt->acc, 0, n * sizeof *bt->acc);
    } else {
        bt->n_found = 0;
        locate(bt, &bt->root, round6(ta), round6(tb));
        increment(bt, bt->found[0], bt->acc);
        for (int k = 1; k < bt->n_found; k++) {
            increment(bt, bt->found[k], bt->w_a);
            for (size_t i = 0; i < n; i++)
                bt->acc[i] = bt->acc[i] + bt->w_a[i];
        }
    }
    /* BrownianTreeNoiseSampler: / (t1 - t0).abs().sqrt(), float32 0-d tensors. */
    float d = sqrtf(fabsf(sigma_next - sigma));
    for (size_t i = 0; i < n; i++) {
        float w = bt->acc[i] * sign;
        out[i] = w / d;
    }
}
