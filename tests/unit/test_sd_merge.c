/*
 * test_sd_merge — the model merging and saving nodes (sd_merge_nodes.c, sd_save_nodes.c,
 * models/checkpoint_save.c) on tiny random-weight checkpoints, on the CPU:
 *   - ModelMergeSimple / Blocks / Subtract / Add and CLIPMergeSimple / Subtract / Add
 *     bake to ComfyUI's weighted sums of the two checkpoints' weights, against a float64
 *     reference computed from the generator's values (ckpt_gen_fill), including a merge
 *     of a merge (model2's own patches baked first) and a merge streamed layer by layer;
 *   - CheckpointSave writes the baked weights: the file holds exactly their bytes,
 *     reloads (CheckpointLoaderSimple, from output/checkpoints) to the same weights and
 *     is detected as the same family; an unpatched SD1.5 and SDXL checkpoint saves
 *     every tensor of the original file byte for byte (OpenCLIP names included);
 *   - metadata: prompt, workflow and modelspec keys, and only modelspec with
 *     --disable-metadata; counters; ModelSave, VAESave and CLIPSave key names;
 *   - ModelMergeSD1 / SD2 / SDXL (sd_merge_model_specific.c): a ratio per UNet block, each
 *     weight against the float64 sum with its block's ratio (blocks read off the names);
 *   - bad input: SD1.5 with SDXL, a ".." prefix: node errors, nothing written outside.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "checkpoint.h"
#include "ckpt_gen.h"
#include "family.h"
#include "harness.h"
#include "memmgr.h"
#include "node_registry.h"
#include "node_run.h"
#include "safetensors.h"
#include "sd_backend.h"
#include "sd_nodes.h"
#include "tensor.h"

static struct node_env env;
static const char *prompt_json;
static const struct node_text_chunk workflow = {"workflow", "{\"nodes\": []}"};

/* Run `cls` with named inputs (references taken over); outputs in out[] (may be NULL). */
static int run_node(const struct node_class *cls, const char *const *names, struct value **vals,
                    int n, struct value **out, char *msg, size_t msg_size)
{
    struct value *in[64] = {0};
    struct value *outs[4] = {0};
    for (int i = 0; i < n; i++) {
        int k = node_class_input_index(cls, names[i]);
        ASSERT(k >= 0);
        in[k] = vals[i];
    }
    struct node_ctx c;
    node_ctx_init(&c, cls, "1", &env, in, outs);
    c.prompt_json = prompt_json;
    c.pnginfo = &workflow;
    c.n_pnginfo = 1;
    int rc = cls->run(&c);
    if (msg)
        snprintf(msg, msg_size, "%s: %s", c.exc_type, c.exc_message.ptr ? c.exc_message.ptr : "");
    node_ctx_release(&c);
    for (int i = 0; i < 64; i++)
        value_unref(in[i]);
    for (int i = 0; i < 4; i++) {
        if (out)
            out[i] = outs[i];
        else
            value_unref(outs[i]);
    }
    return rc;
}

/* ---- the reference: every tensor of a config, with its generator values ---- */

struct ref {
    struct model_key *k; /* owned */
    size_t n, cap;
};

static void ref_add(void *user, const struct model_key *k)
{
    struct ref *r = user;
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 256;
        r->k = xrealloc(r->k, r->cap * sizeof(*r->k));
    }
    r->k[r->n++] = *k;
}

static const struct model_key *ref_find(const struct ref *r, const char *name)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->k[i].name, name) == 0)
            return &r->k[i];
    return NULL;
}

/* ---- baking: every weight of a patcher as the model sees it ---- */

struct baked {
    char key[160];
    float *v; /* owned */
    int64_t n;
};

struct bake_set {
    struct baked *w; /* owned */
    int n;
};

static int bake(struct patcher *p, struct bake_set *out)
{
    struct err e = {0};
    struct mm_request req = {.models = {p}, .n_models = 1};
    struct mm_report rep;
    memset(out, 0, sizeof(*out));
    if (mm_load_models(env.mm, &req, &rep, &e) < 0) {
        printf("# load: %s\n", e.msg);
        return -1;
    }
    const struct patcher_model *m = patcher_model_of(p);
    int total = 0;
    for (int l = 0; l < patcher_model_layer_count(m); l++)
        total += patcher_model_weight_count(m, l);
    out->w = xcalloc((size_t)total, sizeof(*out->w));
    int rc = 0;
    for (int l = 0; rc == 0 && l < patcher_model_layer_count(m); l++) {
        struct tensor *const *wt;
        if ((rc = patcher_acquire(p, l, &wt, &e)) < 0) {
            printf("# acquire: %s\n", e.msg);
            break;
        }
        for (int j = 0; j < patcher_model_weight_count(m, l); j++) {
            struct baked *b = &out->w[out->n++];
            snprintf(b->key, sizeof(b->key), "%s", patcher_model_weight_key(m, l, j));
            b->n = 1;
            for (int d = 0; d < wt[j]->ndim; d++)
                b->n *= wt[j]->shape[d];
            b->v = xmalloc((size_t)b->n * sizeof(float));
            if ((rc = tensor_read_f32(wt[j], b->v, b->n, &e)) < 0)
                break;
        }
        patcher_release(p, l);
    }
    mm_node_end(env.mm, &rep);
    return rc;
}

static void bake_free(struct bake_set *s)
{
    for (int i = 0; i < s->n; i++)
        xfree(s->w[i].v);
    xfree(s->w);
    memset(s, 0, sizeof(*s));
}

static const struct baked *bake_find(const struct bake_set *s, const char *key)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->w[i].key, key) == 0)
            return &s->w[i];
    return NULL;
}

/* Coefficients of checkpoint A and B in the expected weight `key`. */
typedef void (*coef_fn)(const char *key, double *ca, double *cb);

static double g_ratio;
static void coef_simple(const char *key, double *ca, double *cb)
{
    (void)key;
    *ca = g_ratio;
    *cb = 1.0 - g_ratio;
}
static void coef_sub(const char *key, double *ca, double *cb)
{
    (void)key;
    *ca = g_ratio;
    *cb = -g_ratio;
}
static void coef_add(const char *key, double *ca, double *cb)
{
    (void)key;
    *ca = 1.0;
    *cb = 1.0;
}
/* Add(Simple(a, b, 0.3), b): 0.3 a + 0.7 b + b. */
static void coef_nested(const char *key, double *ca, double *cb)
{
    (void)key;
    *ca = 0.3;
    *cb = 1.7;
}
/* ModelMergeBlocks input 0.2, middle 0.5, out 0.9 (the longest matching name). */
static void coef_blocks(const char *key, double *ca, double *cb)
{
    const char *k = key + strlen(MODEL_PREFIX_UNET);
    double r = 0.2;
    if (strncmp(k, "middle", 6) == 0)
        r = 0.5;
    else if (strncmp(k, "out", 3) == 0)
        r = 0.9;
    *ca = r;
    *cb = 1.0 - r;
}

/*
 * ModelMergeSD1 / SDXL: input i of the block list gets ratio (i + 1) / 64; the block of a
 * key is read off its name here (not by prefix matching, as the node does): time_embed 0,
 * label_emb 1, input_blocks.N 2 + N, middle_block.N after the inputs, output_blocks.N
 * after those, out. last; anything else takes the first ratio. n_in: input blocks.
 */
static int g_blocks_in; /* 12 for SD1, 9 for SDXL */
static double block_ratio(const char *key)
{
    const char *k = key + strlen(MODEL_PREFIX_UNET);
    int n = -1, idx = 0, in = g_blocks_in;
    if (strncmp(k, "label_emb.", 10) == 0)
        idx = 1;
    else if (sscanf(k, "input_blocks.%d.", &n) == 1)
        idx = 2 + n;
    else if (sscanf(k, "middle_block.%d.", &n) == 1)
        idx = 2 + in + n;
    else if (sscanf(k, "output_blocks.%d.", &n) == 1)
        idx = 2 + in + 3 + n;
    else if (strncmp(k, "out.", 4) == 0)
        idx = 2 + in + 3 + in;
    return (idx + 1) / 64.0;
}
static void coef_specific(const char *key, double *ca, double *cb)
{
    double r = block_ratio(key);
    *ca = r;
    *cb = 1.0 - r;
}

/*
 * Every baked weight of p equals ca * A + cb * B (float64 from the generator's values
 * of seeds 1 and 2) within float rounding. Returns the largest error relative to the
 * weights' scale, or -1 when a weight is missing or unknown.
 */
static double check_merge(struct patcher *p, const struct ref *r, coef_fn coef, int *checked)
{
    struct bake_set s;
    double worst = 0;
    *checked = 0;
    if (bake(p, &s) < 0) {
        bake_free(&s);
        return -1;
    }
    for (int i = 0; i < s.n && worst >= 0; i++) {
        const struct model_key *k = ref_find(r, s.w[i].key);
        if (!k) {
            worst = -1;
            break;
        }
        float *a = xmalloc((size_t)s.w[i].n * sizeof(float));
        float *b = xmalloc((size_t)s.w[i].n * sizeof(float));
        ckpt_gen_fill(1, k->name, k->init, k->ndim, k->shape, a, (uint64_t)s.w[i].n);
        ckpt_gen_fill(2, k->name, k->init, k->ndim, k->shape, b, (uint64_t)s.w[i].n);
        double ca, cb;
        coef(k->name, &ca, &cb);
        for (int64_t j = 0; j < s.w[i].n; j++) {
            double want = ca * (double)a[j] + cb * (double)b[j];
            double scale = fabs(ca * (double)a[j]) + fabs(cb * (double)b[j]) + 1e-6;
            double err = fabs((double)s.w[i].v[j] - want) / scale;
            if (err > worst)
                worst = err;
        }
        xfree(a);
        xfree(b);
        (*checked)++;
    }
    bake_free(&s);
    return worst;
}

/* ---- helpers over nodes ---- */

static int load_ckpt(const char *name, struct value *out[4], char *msg, size_t n)
{
    const char *cn[] = {"ckpt_name"};
    struct value *cv[] = {value_new_string(name)};
    return run_node(&sd_checkpoint_loader_simple, cn, cv, 1, out, msg, n);
}

static struct value *merge2(const struct node_class *cls, const char *a, const char *b,
                            struct value *va, struct value *vb, const char *knob, double x,
                            char *msg, size_t n)
{
    const char *names[] = {a, b, knob};
    struct value *v[] = {value_ref(va), value_ref(vb), knob ? value_new_float(x) : NULL};
    struct value *out[4] = {0};
    if (run_node(cls, names, v, knob ? 3 : 2, out, msg, n) < 0)
        return NULL;
    return out[0];
}

static struct patcher *unet_of(const struct value *v)
{
    struct model_config cfg;
    return sd_model_unet_patcher(sd_model_of(v), &cfg);
}

/* The tensors of file `a` all in `b` with equal dtype, shape and bytes; counts equal. */
static int same_tensors(const char *a, const char *b, char *why, size_t n)
{
    struct st_file *fa = NULL, *fb = NULL;
    struct err e = {0};
    int same = st_open(a, &fa, &e) == 0 && st_open(b, &fb, &e) == 0;
    if (!same)
        snprintf(why, n, "%s", e.msg);
    size_t used = 0;
    for (size_t i = 0; same && i < fa->n_tensors; i++) {
        const struct st_tensor *ta = &fa->tensors[i], *tb = st_find(fb, ta->name);
        /* Tensors the loader skips (a buffer, OpenCLIP's logit_scale): not in the model. */
        size_t len = strlen(ta->name);
        if ((len > 13 && strcmp(ta->name + len - 13, ".position_ids") == 0) ||
            (len > 12 && strcmp(ta->name + len - 12, ".logit_scale") == 0))
            continue;
        used++;
        same = tb && tb->dtype == ta->dtype && tb->nbytes == ta->nbytes &&
               memcmp(fa->data + ta->offset, fb->data + tb->offset, ta->nbytes) == 0;
        if (!same)
            snprintf(why, n, "'%s' %s", ta->name, tb ? "differs" : "missing");
    }
    if (same && used != fb->n_tensors) {
        snprintf(why, n, "%zu tensors vs %zu", used, fb->n_tensors);
        same = 0;
    }
    st_close(fa);
    st_close(fb);
    return same;
}

static int save(const struct node_class *cls, const char *const *names, struct value **v,
                int n, char *msg, size_t msz)
{
    return run_node(cls, names, v, n, NULL, msg, msz);
}

int main(void)
{
    long live0 = alloc_live_count();
    char dir[] = "/tmp/test_sd_merge.XXXXXX", sub[320], path[512], out_dir[400], cmd[600];
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    snprintf(out_dir, sizeof out_dir, "%s/output", dir);
    mkdir(sub, 0755);
    mkdir(out_dir, 0755);
    struct err e = {0};
    struct ckpt_gen_opts o;
    const char *files[] = {"a.safetensors", "b.safetensors", "xl.safetensors", "d2.safetensors",
                           "xa.safetensors", "xb.safetensors"};
    for (int i = 0; i < 6; i++) {
        ckpt_gen_opts_default(&o);
        o.seed = (uint64_t)(i < 4 ? i + 1 : i - 3); /* xa, xb: seeds 1, 2 as a, b */
        if (i == 2 || i >= 4)
            sdxl_config_tiny(&o.cfg);
        if (i == 3)
            sd15_config_set_depth(&o.cfg, 2); /* SD1.5 with other UNet shapes */
        snprintf(path, sizeof path, "%s/%s", sub, files[i]);
        EXPECT_OK(ckpt_gen_write(&o, path, &e));
    }
    struct ref ref = {0}, xref = {0};
    ckpt_gen_opts_default(&o);
    model_layout_build(&o.cfg, ref_add, &ref);
    sdxl_config_tiny(&o.cfg);
    model_layout_build(&o.cfg, ref_add, &xref);

    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    if (mm_new(&mc, &mm, &e) < 0) {
        ok(0, "mm_new: %s", e.msg);
        return harness_done();
    }
    env.models_dir = dir;
    env.output_dir = out_dir;
    env.mm = mm;
    env.preview_size = 512;
    prompt_json = "{\"1\": {\"class_type\": \"CheckpointSave\"}}";

    char msg[512];
    struct value *A[4] = {0}, *B[4] = {0}, *X[4] = {0}, *D[4] = {0}, *XA[4] = {0}, *XB[4] = {0};
    int rc = load_ckpt("a.safetensors", A, msg, sizeof msg);
    rc |= load_ckpt("b.safetensors", B, msg, sizeof msg);
    rc |= load_ckpt("xl.safetensors", X, msg, sizeof msg);
    rc |= load_ckpt("d2.safetensors", D, msg, sizeof msg);
    rc |= load_ckpt("xa.safetensors", XA, msg, sizeof msg);
    rc |= load_ckpt("xb.safetensors", XB, msg, sizeof msg);
    ok(rc == 0, "six tiny checkpoints load (%s)", rc ? msg : "ok");
    if (rc)
        goto done;

    /* ---- merges against the float64 reference ---- */
    int checked;
    double worst;
    struct value *m = NULL;
    g_ratio = 0.3;
    m = merge2(&sd_model_merge_simple, "model1", "model2", A[0], B[0], "ratio", 0.3, msg,
               sizeof msg);
    ok(m && patcher_patch_count(unet_of(m)) > 0 && patcher_patch_count(unet_of(A[0])) == 0,
       "ModelMergeSimple: patches on a clone, model1 untouched (%s)", m ? "ok" : msg);
    worst = m ? check_merge(unet_of(m), &ref, coef_simple, &checked) : -1;
    ok(worst >= 0 && worst < 1e-6 && checked > 100,
       "ModelMergeSimple 0.3 = 0.3*a + 0.7*b over %d UNet weights (rel err %.2e)", checked,
       worst);

    /* Streamed (sim device, --novram): every layer is baked in a ring slot, within the
     * patch workspace the plan reserved; the bytes equal the cpu device's. */
    if (m) {
        struct mm_config sc;
        mm_config_init(&sc);
        sc.device_spec = "sim:256M";
        sc.vram_state = MM_VRAM_NO_VRAM;
        struct mm *smm = NULL;
        struct bake_set bc = {0}, bs = {0};
        struct patcher_model *pm = patcher_model_of(unet_of(m));
        int good = mm_new(&sc, &smm, &e) == 0 && bake(unet_of(m), &bc) == 0;
        mm_unload(mm, pm);
        env.mm = smm;
        good = good && bake(unet_of(m), &bs) == 0 && bs.n == bc.n;
        env.mm = mm;
        for (int i = 0; good && i < bs.n; i++)
            good = strcmp(bs.w[i].key, bc.w[i].key) == 0 &&
                   memcmp(bs.w[i].v, bc.w[i].v, (size_t)bs.w[i].n * sizeof(float)) == 0;
        ok(good, "merged UNet streamed on a sim device (--novram) = the cpu device's bytes");
        if (smm) {
            mm_unload(smm, pm);
            mm_free(smm);
        }
        bake_free(&bc);
        bake_free(&bs);
    }

    struct value *nested = m ? merge2(&sd_model_merge_add, "model1", "model2", m, B[0], NULL, 0,
                                      msg, sizeof msg)
                             : NULL;
    worst = nested ? check_merge(unet_of(nested), &ref, coef_nested, &checked) : -1;
    ok(worst >= 0 && worst < 1e-6, "ModelMergeAdd of a merge = 0.3*a + 1.7*b (rel err %.2e)",
       worst);
    value_unref(nested);

    struct value *t = merge2(&sd_model_merge_subtract, "model1", "model2", A[0], B[0],
                             "multiplier", 0.5, msg, sizeof msg);
    g_ratio = 0.5;
    worst = t ? check_merge(unet_of(t), &ref, coef_sub, &checked) : -1;
    ok(worst >= 0 && worst < 1e-6, "ModelMergeSubtract 0.5 = 0.5*(a - b) (rel err %.2e)", worst);
    value_unref(t);
    t = merge2(&sd_model_merge_add, "model1", "model2", A[0], B[0], NULL, 0, msg, sizeof msg);
    worst = t ? check_merge(unet_of(t), &ref, coef_add, &checked) : -1;
    ok(worst >= 0 && worst < 1e-6, "ModelMergeAdd = a + b (rel err %.2e)", worst);
    value_unref(t);
    {
        const char *bn[] = {"model1", "model2", "input", "middle", "out"};
        struct value *bv[] = {value_ref(A[0]), value_ref(B[0]), value_new_float(0.2),
                              value_new_float(0.5), value_new_float(0.9)};
        struct value *bo[4] = {0};
        rc = run_node(&sd_model_merge_blocks, bn, bv, 5, bo, msg, sizeof msg);
        worst = rc == 0 ? check_merge(unet_of(bo[0]), &ref, coef_blocks, &checked) : -1;
        ok(worst >= 0 && worst < 1e-6,
           "ModelMergeBlocks 0.2/0.5/0.9 by block, time_embed by input (rel err %.2e)", worst);
        value_unref(bo[0]);
    }

    /* ---- ModelMergeSD1 / SD2 / SDXL: one ratio per UNet block ---- */
    for (int x = 0; x < 3; x++) {
        const struct node_class *cls = x == 0   ? &sd_model_merge_sd1
                                       : x == 1 ? &sd_model_merge_sd2
                                                : &sd_model_merge_sdxl;
        int n_in = cls->n_inputs;
        const char *bn[64];
        struct value *bv[64];
        bn[0] = "model1";
        bn[1] = "model2";
        bv[0] = value_ref(x == 2 ? XA[0] : A[0]);
        bv[1] = value_ref(x == 2 ? XB[0] : B[0]);
        for (int i = 2; i < n_in; i++) {
            bn[i] = cls->inputs[i].name;
            bv[i] = value_new_float((i - 1) / 64.0); /* block i - 2 */
        }
        struct value *bo[4] = {0};
        g_blocks_in = x == 2 ? 9 : 12;
        rc = run_node(cls, bn, bv, n_in, bo, msg, sizeof msg);
        worst = rc == 0 ? check_merge(unet_of(bo[0]), x == 2 ? &xref : &ref, coef_specific,
                                      &checked)
                        : -1;
        ok(worst >= 0 && worst < 1e-6 && checked > 100,
           "%s: %d block ratios, each UNet weight its block's weighted sum over %d weights "
           "(rel err %.2e)",
           cls->name, n_in - 2, checked, worst);
        value_unref(bo[0]);
    }

    g_ratio = 0.3;
    struct value *cm = merge2(&sd_clip_merge_simple, "clip1", "clip2", A[1], B[1], "ratio", 0.3,
                              msg, sizeof msg);
    worst = cm ? check_merge(sd_clip_of(cm)->p, &ref, coef_simple, &checked) : -1;
    ok(worst >= 0 && worst < 1e-6 && checked > 10,
       "CLIPMergeSimple 0.3 = 0.3*a + 0.7*b over %d CLIP weights (rel err %.2e)", checked, worst);
    t = merge2(&sd_clip_merge_subtract, "clip1", "clip2", A[1], B[1], "multiplier", 0.5, msg,
               sizeof msg);
    g_ratio = 0.5;
    worst = t ? check_merge(sd_clip_of(t)->p, &ref, coef_sub, &checked) : -1;
    ok(worst >= 0 && worst < 1e-6, "CLIPMergeSubtract 0.5 (rel err %.2e)", worst);
    value_unref(t);
    t = merge2(&sd_clip_merge_add, "clip1", "clip2", A[1], B[1], NULL, 0, msg, sizeof msg);
    worst = t ? check_merge(sd_clip_of(t)->p, &ref, coef_add, &checked) : -1;
    ok(worst >= 0 && worst < 1e-6, "CLIPMergeAdd (rel err %.2e)", worst);
    value_unref(t);

    /* ---- bad input: two families ---- */
    t = merge2(&sd_model_merge_simple, "model1", "model2", A[0], X[0], "ratio", 0.5, msg,
               sizeof msg);
    ok(!t && strstr(msg, "different families") && strstr(msg, "SD1.5") && strstr(msg, "SDXL"),
       "SD1.5 with SDXL: %s", msg);
    value_unref(t);
    t = merge2(&sd_clip_merge_simple, "clip1", "clip2", X[1], A[1], "ratio", 0.5, msg,
               sizeof msg);
    ok(!t && strstr(msg, "different families"), "CLIP of SDXL with SD1.5: %s", msg);
    value_unref(t);
    t = merge2(&sd_model_merge_add, "model1", "model2", A[0], D[0], NULL, 0, msg, sizeof msg);
    ok(!t && strstr(msg, "different architectures"), "SD1.5 UNets of other shapes: %s", msg);
    value_unref(t);

    /* ---- CheckpointSave of the merge: the baked bytes, reloadable ---- */
    const char *sn[] = {"model", "clip", "vae", "filename_prefix"};
    if (m && cm) {
        struct value *sv[] = {value_ref(m), value_ref(cm), value_ref(A[2]),
                              value_new_string("checkpoints/ComfyUI")};
        rc = save(&sd_checkpoint_save, sn, sv, 4, msg, sizeof msg);
        snprintf(path, sizeof path, "%s/checkpoints/ComfyUI_00001_.safetensors", out_dir);
        ok(rc == 0 && access(path, F_OK) == 0, "CheckpointSave writes ComfyUI_00001_ (%s)",
           rc ? msg : "ok");
        struct st_file *f = NULL;
        struct bake_set bu = {0}, bc = {0};
        int same = st_open(path, &f, &e) == 0 && bake(unet_of(m), &bu) == 0 &&
                   bake(sd_clip_of(cm)->p, &bc) == 0;
        int n_same = 0;
        for (int s = 0; same && s < 2; s++) {
            const struct bake_set *bs = s ? &bc : &bu;
            for (int i = 0; same && i < bs->n; i++) {
                const struct st_tensor *st = st_find(f, bs->w[i].key);
                same = st && st->dtype == ST_DTYPE_F32 &&
                       st->nbytes == (uint64_t)bs->w[i].n * 4 &&
                       memcmp(f->data + st->offset, bs->w[i].v, st->nbytes) == 0;
                n_same += same;
            }
        }
        ok(same && n_same > 100, "the file holds the merged weights' exact bytes (%d tensors)",
           n_same);
        const char *pr = f ? st_meta_get(f, "prompt") : NULL;
        const char *wf = f ? st_meta_get(f, "workflow") : NULL;
        const char *pk = f ? st_meta_get(f, "modelspec.predict_key") : NULL;
        ok(pr && strcmp(pr, prompt_json) == 0 && wf && strcmp(wf, workflow.value) == 0 && pk &&
               strcmp(pk, "epsilon") == 0 && !st_meta_get(f, "modelspec.architecture"),
           "metadata: prompt, workflow, modelspec.predict_key (no SD1.5 architecture)");
        st_close(f);

        struct model_config cfg, cfg0;
        char orig[512];
        snprintf(orig, sizeof orig, "%s/a.safetensors", sub);
        rc = model_ckpt_probe(path, &cfg, &e);
        rc = rc == 0 ? model_ckpt_probe(orig, &cfg0, &e) : rc;
        ok(rc == 0 && cfg.family == MODEL_FAMILY_SD15 && memcmp(&cfg, &cfg0, sizeof cfg) == 0,
           "the saved file is detected as the same SD1.5 config (%s)", rc ? e.msg : "ok");
        /* CheckpointLoaderSimple lists output/checkpoints as ComfyUI does. */
        struct value *R[4] = {0};
        rc = load_ckpt("ComfyUI_00001_.safetensors", R, msg, sizeof msg);
        struct bake_set ru = {0};
        same = rc == 0 && bake(unet_of(R[0]), &ru) == 0 && ru.n == bu.n;
        for (int i = 0; same && i < ru.n; i++) {
            const struct baked *w = bake_find(&bu, ru.w[i].key);
            same = w && w->n == ru.w[i].n &&
                   memcmp(w->v, ru.w[i].v, (size_t)w->n * sizeof(float)) == 0;
        }
        ok(same, "reloaded: every UNet weight bit-identical to the merged model (%s)",
           rc ? msg : "ok");
        bake_free(&ru);
        bake_free(&bu);
        bake_free(&bc);
        for (int i = 0; i < 4; i++)
            value_unref(R[i]);

        /* --disable-metadata: modelspec only; the counter moves on. */
        env.disable_metadata = 1;
        struct value *sv2[] = {value_ref(m), value_ref(cm), value_ref(A[2]),
                               value_new_string("checkpoints/ComfyUI")};
        rc = save(&sd_checkpoint_save, sn, sv2, 4, msg, sizeof msg);
        env.disable_metadata = 0;
        snprintf(path, sizeof path, "%s/checkpoints/ComfyUI_00002_.safetensors", out_dir);
        f = NULL;
        rc = rc == 0 ? st_open(path, &f, &e) : rc;
        ok(rc == 0 && !st_meta_get(f, "prompt") && !st_meta_get(f, "workflow") &&
               st_meta_get(f, "modelspec.predict_key"),
           "--disable-metadata: ComfyUI_00002_ without prompt or workflow");
        st_close(f);
    }

    /* ---- unpatched checkpoints save byte for byte (SD1.5, SDXL's OpenCLIP names) ---- */
    for (int x = 0; x < 2; x++) {
        struct value **S = x ? X : A;
        const char *pre = x ? "checkpoints/xl" : "checkpoints/plain";
        struct value *sv[] = {value_ref(S[0]), value_ref(S[1]), value_ref(S[2]),
                              value_new_string(pre)};
        rc = save(&sd_checkpoint_save, sn, sv, 4, msg, sizeof msg);
        char orig[512], why[700] = "";
        snprintf(orig, sizeof orig, "%s/%s", sub, files[x ? 2 : 0]);
        snprintf(path, sizeof path, "%s/%s_00001_.safetensors", out_dir, pre);
        ok(rc == 0 && same_tensors(orig, path, why, sizeof why),
           "%s: CheckpointSave of the loaded file = the file's tensors (%s)", x ? "SDXL" : "SD1.5",
           rc ? msg : why);
        struct st_file *f = NULL;
        struct model_config cfg;
        int prc = model_ckpt_probe(path, &cfg, &e);
        if (x && st_open(path, &f, &e) == 0) {
            const char *arch = st_meta_get(f, "modelspec.architecture");
            const char *title = st_meta_get(f, "modelspec.title");
            ok(prc == 0 && cfg.family == MODEL_FAMILY_SDXL && arch &&
                   strcmp(arch, "stable-diffusion-xl-v1-base") == 0 && title &&
                   strcmp(title, "xl 1") == 0 && st_meta_get(f, "modelspec.sai_model_spec"),
               "SDXL: detected as SDXL, modelspec architecture and title '%s'", title ? title : "");
        }
        st_close(f);
    }

    /* ---- ModelSave, VAESave, CLIPSave: ComfyUI's key names ---- */
    {
        const char *mn[] = {"model", "filename_prefix"};
        struct value *mv[] = {value_ref(A[0]), value_new_string("diffusion_models/ComfyUI")};
        rc = save(&sd_model_save, mn, mv, 2, msg, sizeof msg);
        snprintf(path, sizeof path, "%s/diffusion_models/ComfyUI_00001_.safetensors", out_dir);
        struct st_file *f = NULL;
        int good = rc == 0 && st_open(path, &f, &e) == 0;
        for (size_t i = 0; good && i < f->n_tensors; i++)
            good = strncmp(f->tensors[i].name, MODEL_PREFIX_UNET, strlen(MODEL_PREFIX_UNET)) == 0;
        ok(good && f->n_tensors > 100, "ModelSave: model.diffusion_model.* only (%s)",
           rc ? msg : "ok");
        st_close(f);

        const char *vn[] = {"vae", "filename_prefix"};
        struct value *vv[] = {value_ref(A[2]), value_new_string("vae/ComfyUI_vae")};
        rc = save(&sd_vae_save, vn, vv, 2, msg, sizeof msg);
        snprintf(path, sizeof path, "%s/vae/ComfyUI_vae_00001_.safetensors", out_dir);
        f = NULL;
        good = rc == 0 && st_open(path, &f, &e) == 0 && st_find(f, "encoder.conv_in.weight") &&
               st_find(f, "decoder.conv_out.bias") && !st_meta_get(f, "modelspec.predict_key") &&
               st_meta_get(f, "prompt");
        ok(good, "VAESave: bare encoder./decoder. names, prompt metadata (%s)", rc ? msg : "ok");
        st_close(f);
        /* A standalone VAE loads back (VAELoader's reader) to the same weights. */
        struct model_ckpt ck;
        rc = model_vae_load(path, TENSOR_F32, &ck, &e);
        ok(rc == 0, "VAESave's file loads as a VAE (%s)", rc ? e.msg : "ok");
        if (rc == 0)
            model_ckpt_release(&ck);

        const char *cn[] = {"clip", "filename_prefix"};
        struct value *cv[] = {value_ref(X[1]), value_new_string("clip/ComfyUI")};
        rc = save(&sd_clip_save, cn, cv, 2, msg, sizeof msg);
        char pl[512], pg[512];
        snprintf(pl, sizeof pl, "%s/clip/ComfyUI_clip_l_00001_.safetensors", out_dir);
        snprintf(pg, sizeof pg, "%s/clip/ComfyUI_clip_g_00001_.safetensors", out_dir);
        struct st_file *fl = NULL, *fg = NULL, *fx = NULL;
        snprintf(path, sizeof path, "%s/xl.safetensors", sub);
        good = rc == 0 && st_open(pl, &fl, &e) == 0 && st_open(pg, &fg, &e) == 0 &&
               st_open(path, &fx, &e) == 0;
        const struct st_tensor *q = good ? st_find(fg, "text_model.encoder.layers.0.self_attn.q_proj.weight") : NULL;
        const struct st_tensor *v = good ? st_find(fg, "text_model.encoder.layers.0.self_attn.v_proj.weight") : NULL;
        const struct st_tensor *in = good ? st_find(fx, "conditioner.embedders.1.model.transformer.resblocks.0.attn.in_proj_weight") : NULL;
        const struct st_tensor *tp = good ? st_find(fg, "text_projection.weight") : NULL;
        const struct st_tensor *tpx = good ? st_find(fx, "conditioner.embedders.1.model.text_projection") : NULL;
        good = good && st_find(fl, "text_model.embeddings.token_embedding.weight") && q && v &&
               in && q->nbytes * 3 == in->nbytes &&
               memcmp(fg->data + q->offset, fx->data + in->offset, q->nbytes) == 0 &&
               memcmp(fg->data + v->offset, fx->data + in->offset + 2 * q->nbytes, q->nbytes) == 0 &&
               st_meta_get(fg, "format") && strcmp(st_meta_get(fg, "format"), "pt") == 0;
        int tp_ok = tp && tpx && tp->shape[0] == tpx->shape[1] && tp->shape[1] == tpx->shape[0];
        const float *a = tp_ok ? (const float *)(fg->data + tp->offset) : NULL;
        const float *b = tp_ok ? (const float *)(fx->data + tpx->offset) : NULL;
        for (int64_t i = 0; tp_ok && i < tp->shape[0]; i++)
            for (int64_t k = 0; tp_ok && k < tp->shape[1]; k++)
                tp_ok = a[i * tp->shape[1] + k] == b[k * tp->shape[0] + i];
        ok(good && tp_ok, "CLIPSave (SDXL): _clip_l and _clip_g files, q/k/v split from "
                          "in_proj, text_projection.weight transposed, format pt (%s)",
           rc ? msg : "ok");
        st_close(fl);
        st_close(fg);
        st_close(fx);
    }

    /* ---- a prefix climbing out of output/: refused, nothing written ---- */
    {
        const char *vn[] = {"vae", "filename_prefix"};
        struct value *vv[] = {value_ref(A[2]), value_new_string("../escape")};
        rc = save(&sd_vae_save, vn, vv, 2, msg, sizeof msg);
        snprintf(path, sizeof path, "%s/escape_00001_.safetensors", dir);
        ok(rc < 0 && strstr(msg, "outside the output folder") && access(path, F_OK) != 0,
           "'../escape': %s", msg);
    }

    value_unref(m);
    value_unref(cm);
done:
    for (int i = 0; i < 4; i++) {
        value_unref(A[i]);
        value_unref(B[i]);
        value_unref(X[i]);
        value_unref(D[i]);
        value_unref(XA[i]);
        value_unref(XB[i]);
    }
    xfree(ref.k);
    xfree(xref.k);
    mm_unload_all(mm);
    mm_free(mm);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        printf("# could not remove %s\n", dir);
    tensor_shutdown();
    ok(alloc_live_count() == live0, "no allocation left live (%ld)", alloc_live_count() - live0);
    return harness_done();
}
