/*
 * sd_merge_nodes — comfy_extras.nodes_model_merging's merge nodes: ModelMergeSimple,
 * ModelMergeBlocks, ModelMergeSubtract, ModelMergeAdd, CLIPMergeSimple,
 * CLIPMergeSubtract, CLIPMergeAdd.
 *
 * As in ComfyUI, a merge copies no weight: it clones model1's patcher and adds, per
 * weight of model2, a model patch (patcher_add_model_patch) with
 * (strength_patch, strength_model):
 *   MergeSimple   (1 - ratio, ratio)        W = ratio * W1 + (1 - ratio) * W2
 *   MergeBlocks   the same, ratio by the longest block name (input / middle / out;
 *                 the model-specific merges name more) that prefixes the UNet key,
 *                 else the first ratio argument's
 *   MergeSubtract (-multiplier, multiplier) W = multiplier * (W1 - W2)
 *   MergeAdd      (1, 1)                    W = W1 + W2
 * W2 is model2 as its patcher gives it (its own LoRAs and merges baked). The sum is
 * made when a layer is baked (on load or when streamed), in f32.
 *
 * Unlike ComfyUI, which merges whatever keys two models share and logs a warning for
 * shapes that differ, two models of different families or architectures are a node
 * error: the result would be neither model.
 *
 * Threads: executor thread.
 */
#include <math.h>
#include <string.h>

#include "node_registry.h"
#include "sd_backend.h"
#include "sd_merge.h"
#include "sd_nodes.h"

#define MERGE_MODULE "comfy_extras.nodes_model_merging"
#define MERGE_CATEGORY "advanced/model_merging"

/* Per-key strengths: fixed (sp, sm), or by UNet block when block names are set. */
struct merge_rule {
    float sp, sm;
    const char *const *block_names; /* ModelMergeBlocks and the model-specific merges */
    const double *block_ratio;      /* [n_blocks], block_names' order */
    int n_blocks;
};

/*
 * ModelMergeBlocks.merge: the ratio of the longest block name that prefixes the UNet
 * key, else the first argument's (the first of kwargs, whatever it names).
 */
static void rule_for(const struct merge_rule *r, const char *unet_key, float *sp, float *sm)
{
    if (!r->block_ratio) {
        *sp = r->sp;
        *sm = r->sm;
        return;
    }
    double ratio = r->block_ratio[0];
    size_t best = 0;
    for (int i = 0; i < r->n_blocks; i++) {
        size_t len = strlen(r->block_names[i]);
        if (strncmp(unet_key, r->block_names[i], len) == 0 && len > best) {
            ratio = r->block_ratio[i];
            best = len;
        }
    }
    *sp = (float)(1.0 - ratio);
    *sm = (float)ratio;
}

static int ends_with(const char *s, const char *t)
{
    size_t ls = strlen(s), lt = strlen(t);
    return ls >= lt && strcmp(s + ls - lt, t) == 0;
}

/*
 * Patch every weight of `dst` that `src` has (keys starting with `prefix`, which the
 * rule sees stripped) with src's weight. Returns 0 or an error in e.
 */
static int merge_patchers(struct patcher *dst, struct patcher *src, const char *prefix,
                          const struct merge_rule *r, struct err *e)
{
    const struct patcher_model *sm = patcher_model_of(src);
    size_t plen = strlen(prefix);
    for (int l = 0; l < patcher_model_layer_count(sm); l++) {
        for (int j = 0; j < patcher_model_weight_count(sm, l); j++) {
            const char *key = patcher_model_weight_key(sm, l, j);
            if (strncmp(key, prefix, plen) != 0 || ends_with(key, ".position_ids") ||
                ends_with(key, ".logit_scale"))
                continue;
            float sp, smod;
            rule_for(r, key + plen, &sp, &smod);
            int rc = patcher_add_model_patch(dst, key, src, key, sp, smod, e);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* Two models merge when they are one family and their merged parts (xa, xb: n bytes of
 * the configs' knobs) one architecture. */
static int check_same(struct node_ctx *c, const struct model_config *a,
                      const struct model_config *b, const void *xa, const void *xb, size_t n,
                      const char *what)
{
    const struct model_family *fa = model_family_get(a->family);
    const struct model_family *fb = model_family_get(b->family);
    if (a->family != b->family)
        return node_fail_code(c, ERR_INVALID, "RuntimeError",
                              "cannot merge %ss of different families: %s and %s", what,
                              fa ? fa->name : "?", fb ? fb->name : "?");
    if (memcmp(xa, xb, n) != 0)
        return node_fail_code(c, ERR_INVALID, "RuntimeError",
                              "cannot merge %ss of different architectures: both are %s but "
                              "their weight shapes differ", what, fa ? fa->name : "?");
    return 0;
}

/* ---- declarations ---- */

/*
 * Every merge declares its two models (or CLIPs) first, where model_merge and
 * clip_merge read them; the ratio, multiplier or block ratios follow.
 */
enum { MERGE_1, MERGE_2, MERGE_ADD_N };
enum { MERGE_RATIO = MERGE_ADD_N, MERGE_SIMPLE_N };
enum { MERGE_MULTIPLIER = MERGE_ADD_N, MERGE_SUBTRACT_N };
enum { MERGE_INPUT = MERGE_ADD_N, MERGE_MIDDLE, MERGE_OUT, MERGE_BLOCKS_N };

#define RATIO_INPUT(n)                                                                         \
    {.name = n, .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0), .max = NODE_F(1.0),   \
     .step = NODE_F(0.01)}
#define MULTIPLIER_INPUT                                                                       \
    {.name = "multiplier", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(-10.0),          \
     .max = NODE_F(10.0), .step = NODE_F(0.01)}

static const struct node_input_def simple_in[] = {
    {.name = "model1", .type = "MODEL"}, {.name = "model2", .type = "MODEL"},
    RATIO_INPUT("ratio"), NODE_INPUTS_END};
static const struct node_input_def blocks_in[] = {
    {.name = "model1", .type = "MODEL"}, {.name = "model2", .type = "MODEL"},
    RATIO_INPUT("input"), RATIO_INPUT("middle"), RATIO_INPUT("out"), NODE_INPUTS_END};
static const struct node_input_def subtract_in[] = {
    {.name = "model1", .type = "MODEL"}, {.name = "model2", .type = "MODEL"},
    MULTIPLIER_INPUT, NODE_INPUTS_END};
static const struct node_input_def add_in[] = {
    {.name = "model1", .type = "MODEL"}, {.name = "model2", .type = "MODEL"}, NODE_INPUTS_END};
static const struct node_output_def model_out[] = {{.type = "MODEL"}, NODE_OUTPUTS_END};

static const struct node_input_def clip_simple_in[] = {
    {.name = "clip1", .type = "CLIP"}, {.name = "clip2", .type = "CLIP"},
    RATIO_INPUT("ratio"), NODE_INPUTS_END};
static const struct node_input_def clip_subtract_in[] = {
    {.name = "clip1", .type = "CLIP"}, {.name = "clip2", .type = "CLIP"},
    MULTIPLIER_INPUT, NODE_INPUTS_END};
static const struct node_input_def clip_add_in[] = {
    {.name = "clip1", .type = "CLIP"}, {.name = "clip2", .type = "CLIP"}, NODE_INPUTS_END};
static const struct node_output_def clip_out[] = {{.type = "CLIP"}, NODE_OUTPUTS_END};

static int model_merge(struct node_ctx *c, const struct merge_rule *r)
{
    const struct sd_model *m1 = sd_model_of(node_in_at(c, MERGE_1));
    const struct sd_model *m2 = sd_model_of(node_in_at(c, MERGE_2));
    struct model_config cfg1, cfg2;
    struct patcher *p1 = m1 ? sd_model_unet_patcher(m1, &cfg1) : NULL;
    struct patcher *p2 = m2 ? sd_model_unet_patcher(m2, &cfg2) : NULL;
    if (!p1 || !p2)
        return node_fail(c, "RuntimeError", "this MODEL cannot be merged (not a checkpoint's)");
    int rc = check_same(c, &cfg1, &cfg2, &cfg1.unet, &cfg2.unet, sizeof(cfg1.unet), "model");
    if (rc < 0)
        return rc;
    struct patcher *out = patcher_clone(p1);
    struct err e = {0};
    if ((rc = merge_patchers(out, p2, MODEL_PREFIX_UNET, r, &e)) < 0) {
        patcher_unref(out);
        return node_fail_code(c, rc, "RuntimeError", "%s", e.msg);
    }
    struct sd_model *m = sd_unet_model_new(out, &cfg1);
    m->max_batch = m1->max_batch;
    sd_model_copy_patches(m, m1); /* model1.clone() keeps its model patches */
    node_set_output(c, 0, sd_model_value(m));
    return 0;
}

static int clip_merge(struct node_ctx *c, float sp, float sm)
{
    const struct sd_clip *c1 = sd_clip_of(node_in_at(c, MERGE_1));
    const struct sd_clip *c2 = sd_clip_of(node_in_at(c, MERGE_2));
    if (!c1 || !c2)
        return node_fail(c, "RuntimeError", "input 'clip1' or 'clip2' is not a CLIP");
    int rc = check_same(c, &c1->cfg, &c2->cfg, c1->cfg.text, c2->cfg.text, sizeof(c1->cfg.text),
                        "CLIP model");
    if (rc < 0)
        return rc;
    if (!c1->p2 != !c2->p2)
        return node_fail_code(c, ERR_INVALID, "RuntimeError",
                              "cannot merge CLIP models with different text encoders");
    const struct merge_rule r = {.sp = sp, .sm = sm};
    struct sd_clip *out = sd_clip_clone(c1);
    struct patcher *q1 = patcher_clone(c1->p), *q2 = c1->p2 ? patcher_clone(c1->p2) : NULL;
    patcher_unref(out->p);
    out->p = q1;
    if (q2) {
        patcher_unref(out->p2);
        out->p2 = q2;
    }
    struct err e = {0};
    rc = merge_patchers(q1, c2->p, "", &r, &e);
    if (rc == 0 && q2)
        rc = merge_patchers(q2, c2->p2, "", &r, &e);
    if (rc < 0) {
        sd_clip_free(out);
        return node_fail_code(c, rc, "RuntimeError", "%s", e.msg);
    }
    node_set_output(c, 0, sd_clip_value(out));
    return 0;
}

/* ---- models ---- */

static int merge_simple_run(struct node_ctx *c)
{
    double ratio = node_in_float_at(c, MERGE_RATIO);
    const struct merge_rule r = {.sp = (float)(1.0 - ratio), .sm = (float)ratio};
    return model_merge(c, &r);
}

int sd__model_merge_blocks(struct node_ctx *c, const char *const *names, int first, int n)
{
    double ratios[SD_MERGE_MAX_BLOCKS];
    ASSERT(n <= SD_MERGE_MAX_BLOCKS);
    for (int i = 0; i < n; i++)
        ratios[i] = node_in_float_at(c, first + i);
    const struct merge_rule r = {.block_names = names, .block_ratio = ratios, .n_blocks = n};
    return model_merge(c, &r);
}

static const char *const block_names[3] = {"input", "middle", "out"};

static int merge_blocks_run(struct node_ctx *c)
{
    return sd__model_merge_blocks(c, block_names, MERGE_INPUT, 3);
}

static int merge_subtract_run(struct node_ctx *c)
{
    double k = node_in_float_at(c, MERGE_MULTIPLIER);
    const struct merge_rule r = {.sp = (float)-k, .sm = (float)k};
    return model_merge(c, &r);
}

static int merge_add_run(struct node_ctx *c)
{
    const struct merge_rule r = {.sp = 1.0f, .sm = 1.0f};
    return model_merge(c, &r);
}


const struct node_class sd_model_merge_simple = {
    .name = "ModelMergeSimple", .category = MERGE_CATEGORY, .python_module = MERGE_MODULE,
    .inputs = simple_in, .n_inputs = MERGE_SIMPLE_N, .outputs = model_out, .run = merge_simple_run};
const struct node_class sd_model_merge_blocks = {
    .name = "ModelMergeBlocks", .category = MERGE_CATEGORY, .python_module = MERGE_MODULE,
    .inputs = blocks_in, .n_inputs = MERGE_BLOCKS_N, .outputs = model_out, .run = merge_blocks_run};
const struct node_class sd_model_merge_subtract = {
    .name = "ModelMergeSubtract", .category = MERGE_CATEGORY, .python_module = MERGE_MODULE,
    .inputs = subtract_in, .n_inputs = MERGE_SUBTRACT_N, .outputs = model_out,
    .run = merge_subtract_run};
const struct node_class sd_model_merge_add = {
    .name = "ModelMergeAdd", .category = MERGE_CATEGORY, .python_module = MERGE_MODULE,
    .inputs = add_in, .n_inputs = MERGE_ADD_N, .outputs = model_out, .run = merge_add_run};

/* ---- CLIP ---- */

static int clip_simple_run(struct node_ctx *c)
{
    double ratio = node_in_float_at(c, MERGE_RATIO);
    return clip_merge(c, (float)(1.0 - ratio), (float)ratio);
}

static int clip_subtract_run(struct node_ctx *c)
{
    double k = node_in_float_at(c, MERGE_MULTIPLIER);
    return clip_merge(c, (float)-k, (float)k);
}

static int clip_add_run(struct node_ctx *c)
{
    return clip_merge(c, 1.0f, 1.0f);
}

const struct node_class sd_clip_merge_simple = {
    .name = "CLIPMergeSimple", .category = MERGE_CATEGORY, .python_module = MERGE_MODULE,
    .inputs = clip_simple_in, .n_inputs = MERGE_SIMPLE_N, .outputs = clip_out,
    .run = clip_simple_run};
const struct node_class sd_clip_merge_subtract = {
    .name = "CLIPMergeSubtract", .category = MERGE_CATEGORY, .python_module = MERGE_MODULE,
    .inputs = clip_subtract_in, .n_inputs = MERGE_SUBTRACT_N, .outputs = clip_out,
    .run = clip_subtract_run};
const struct node_class sd_clip_merge_add = {
    .name = "CLIPMergeAdd", .category = MERGE_CATEGORY, .python_module = MERGE_MODULE,
    .inputs = clip_add_in, .n_inputs = MERGE_ADD_N, .outputs = clip_out, .run = clip_add_run};
