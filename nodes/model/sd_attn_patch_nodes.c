/*
 * sd_attn_patch_nodes — comfy_extras model patches that work inside the attention and
 * the sampling step (sd_model_patches.h): HypernetworkLoader (nodes_hypernetwork.py),
 * HyperTile (nodes_hypertile.py), SelfAttentionGuidance (nodes_sag.py) and the old PerpNeg
 * model patch (nodes_perpneg.py; PerpNegGuider is sd_guider_nodes.c's).
 *
 * Each clones the MODEL (sd_model_clone) and sets its patch on the clone, as ComfyUI's
 * m = model.clone() does, so they stack with LoRA (the clone keeps the UNet patcher's
 * weight patches) and with each other.
 */
#include "buf.h"
#include "hypernetwork.h"
#include "log.h"
#include "node_files.h"
#include "node_registry.h"
#include "sd_backend.h"
#include "sd_nodes.h"
#include "sd_extra_nodes.h"
#include "sd_model_patches.h"
#include "sd_types.h"

static const struct node_output_def model_output[] = {{.type = "MODEL"}, NODE_OUTPUTS_END};

/* Every class here takes its MODEL first: the clone and its patches, or NULL after
 * node_fail. */
static struct sd_model *clone_input(struct node_ctx *c, struct sd_model_patches **mp)
{
    const struct sd_model *m = sd_model_of(node_in_at(c, 0));
    if (!m)
        return node_fail(c, "RuntimeError", "input 'model' is not a MODEL"), NULL;
    struct sd_model *m2 = sd_model_clone(m);
    if (!m2 || !(*mp = sd_model_patches_mut(m2))) {
        sd_model_free(m2);
        node_fail(c, "RuntimeError", "this MODEL cannot be patched (not a checkpoint's UNet)");
        return NULL;
    }
    return m2;
}

/* ---- HypernetworkLoader ---- */

enum { HN_MODEL, HN_NAME, HN_STRENGTH, HN_N };
static const struct node_input_def hypernetwork_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "hypernetwork_name", .type = NODE_COMBO, .options_folder = "hypernetworks"},
    {.name = "strength", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(-10.0),
     .max = NODE_F(10.0), .step = NODE_F(0.01)},
    NODE_INPUTS_END};

static int hypernetwork_is_changed(struct node_ctx *c, struct buf *out)
{
    return sd__model_file_is_changed_at(c, "hypernetworks", HN_NAME, out);
}

/*
 * set_model_attn1_patch + set_model_attn2_patch of one hypernetwork_patch (appended after
 * the MODEL's earlier ones). Like ComfyUI, a file whose activation it does not know, or
 * a .safetensors file (no width-keyed modules), patches nothing and says so in the log;
 * a malformed .pt is a node error.
 */
static int hypernetwork_run(struct node_ctx *c)
{
    const char *name = node_in_str_at(c, HN_NAME);
    struct buf path;
    buf_init(&path);
    if (node_files_find_model(c->env, "hypernetworks", name, &path) < 0) {
        buf_release(&path);
        return node_fail_code(c, ERR_NOT_FOUND, "FileNotFoundError",
                              "Model in folder 'hypernetworks' with filename '%s' not found.",
                              name);
    }
    struct hypernetwork *h = NULL;
    struct err e = {0};
    int rc = hypernetwork_load(path.ptr, &h, &e);
    buf_release(&path);
    if (rc < 0)
        return node_fail_code(c, rc, "RuntimeError", "ERROR: could not load hypernetwork '%s': %s",
                              name, e.msg);
    if (!h)
        log_error("hypernetwork '%s' not applied: %s", name, e.msg);
    struct sd_model_patches *mp;
    struct sd_model *m = clone_input(c, &mp);
    if (!m) {
        hypernetwork_free(h);
        return ERR_INVALID;
    }
    if (h && mp->n_hn == SD_MODEL_MAX_HYPERNETWORKS) {
        hypernetwork_free(h);
        sd_model_free(m);
        return node_fail(c, "RuntimeError", "HypernetworkLoader: this MODEL already has %d "
                         "hypernetworks", SD_MODEL_MAX_HYPERNETWORKS);
    }
    if (h) {
        mp->hn[mp->n_hn] = h; /* the clone's patches own it */
        mp->hn_strength[mp->n_hn++] = (float)node_in_float_at(c, HN_STRENGTH);
    }
    node_set_output(c, 0, sd_model_value(m));
    return 0;
}

const struct node_class sd_hypernetwork_loader = {
    .name = "HypernetworkLoader", .category = "loaders",
    .python_module = "comfy_extras.nodes_hypernetwork", .inputs = hypernetwork_inputs,
    .n_inputs = HN_N, .outputs = model_output, .run = hypernetwork_run,
    .is_changed = hypernetwork_is_changed};

/* ---- HyperTile ---- */

enum { HT_MODEL, HT_TILE_SIZE, HT_SWAP_SIZE, HT_MAX_DEPTH, HT_SCALE_DEPTH, HT_N };
static const struct node_input_def hypertile_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "tile_size", .type = "INT", .def = NODE_I(256), .min = NODE_I(1), .max = NODE_I(2048)},
    {.name = "swap_size", .type = "INT", .def = NODE_I(2), .min = NODE_I(1), .max = NODE_I(128)},
    {.name = "max_depth", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(10)},
    {.name = "scale_depth", .type = "BOOLEAN", .has_def_bool = 1, .def_bool = 0},
    NODE_INPUTS_END};

/*
 * set_model_attn1_patch(hypertile_in) + set_model_attn1_output_patch(hypertile_out).
 * ComfyUI appends; a second HyperTile would tile already tiled queries, which we do
 * not reproduce: it is refused.
 */
static int hypertile_run(struct node_ctx *c)
{
    struct sd_model_patches *mp;
    struct sd_model *m = clone_input(c, &mp);
    if (!m)
        return ERR_INVALID;
    if (mp->hypertile_on) {
        sd_model_free(m);
        return node_fail(c, "RuntimeError", "HyperTile: this MODEL already has a HyperTile patch");
    }
    mp->hypertile_on = 1;
    mp->hypertile = (struct unet_hypertile){
        .tile_size = (int)node_in_int_at(c, HT_TILE_SIZE),
        .swap_size = (int)node_in_int_at(c, HT_SWAP_SIZE),
        .max_depth = (int)node_in_int_at(c, HT_MAX_DEPTH),
        .scale_depth = node_in_bool_at(c, HT_SCALE_DEPTH)};
    node_set_output(c, 0, sd_model_value(m));
    return 0;
}

const struct node_class sd_hypertile = {
    .name = "HyperTile", .category = "model_patches/unet",
    .python_module = "comfy_extras.nodes_hypertile", .flags = NODE_CLASS_V3,
    .inputs = hypertile_inputs, .n_inputs = HT_N, .outputs = model_output, .run = hypertile_run};

/* ---- SelfAttentionGuidance ---- */

enum { SAG_MODEL, SAG_SCALE, SAG_BLUR_SIGMA, SAG_N };
static const struct node_input_def sag_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "scale", .type = "FLOAT", .def = NODE_F(0.5), .min = NODE_F(-2.0),
     .max = NODE_F(5.0), .step = NODE_F(0.01)},
    {.name = "blur_sigma", .type = "FLOAT", .def = NODE_F(2.0), .min = NODE_F(0.0),
     .max = NODE_F(10.0), .step = NODE_F(0.1)},
    NODE_INPUTS_END};

/*
 * set_model_sampler_post_cfg_function(post_cfg_function, disable_cfg1_optimization) and
 * set_model_attn1_replace(attn_and_record, "middle", 0, 0). A second SAG replaces the
 * first's attention recording (one replace per block) while its post-cfg function stays
 * and reads the same map; we keep one: the last one's settings.
 */
static int sag_run(struct node_ctx *c)
{
    struct sd_model_patches *mp;
    struct sd_model *m = clone_input(c, &mp);
    if (!m)
        return ERR_INVALID;
    mp->sag_on = 1;
    mp->sag_scale = node_in_float_at(c, SAG_SCALE);
    mp->sag_blur_sigma = node_in_float_at(c, SAG_BLUR_SIGMA);
    node_set_output(c, 0, sd_model_value(m));
    return 0;
}

const struct node_class sd_self_attention_guidance = {
    .name = "SelfAttentionGuidance", .display_name = "Self-Attention Guidance",
    .category = "_for_testing", .python_module = "comfy_extras.nodes_sag",
    .flags = NODE_CLASS_V3 | NODE_CLASS_EXPERIMENTAL, .inputs = sag_inputs, .n_inputs = SAG_N,
    .outputs = model_output, .run = sag_run};

/* ---- PerpNeg ---- */

enum { PN_MODEL, PN_EMPTY_CONDITIONING, PN_NEG_SCALE, PN_N };
static const struct node_input_def perp_neg_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "empty_conditioning", .type = "CONDITIONING"},
    {.name = "neg_scale", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0),
     .max = NODE_F(100.0), .step = NODE_F(0.01)},
    NODE_INPUTS_END};

/* set_model_sampler_cfg_function(cfg_function): replaces RescaleCFG's, as ComfyUI's
 * replaces any earlier cfg function. */
static int perp_neg_run(struct node_ctx *c)
{
    struct value *empty = node_in_at(c, PN_EMPTY_CONDITIONING);
    const struct sd_cond *ec = sd_cond_of(empty);
    if (!ec || ec->n < 1)
        return node_fail(c, "RuntimeError", "PerpNeg: empty_conditioning is missing or empty");
    struct sd_model_patches *mp;
    struct sd_model *m = clone_input(c, &mp);
    if (!m)
        return ERR_INVALID;
    value_unref(mp->perp_neg_empty);
    mp->perp_neg_empty = value_ref(empty);
    mp->perp_neg_scale = node_in_float_at(c, PN_NEG_SCALE);
    m->cfg_fn.rescale = 0;
    node_set_output(c, 0, sd_model_value(m));
    return 0;
}

const struct node_class sd_perp_neg = {
    .name = "PerpNeg", .display_name = "Perp-Neg (DEPRECATED by PerpNegGuider)",
    .category = "_for_testing", .python_module = "comfy_extras.nodes_perpneg",
    .flags = NODE_CLASS_V3 | NODE_CLASS_EXPERIMENTAL | NODE_CLASS_DEPRECATED,
    .inputs = perp_neg_inputs, .n_inputs = PN_N, .outputs = model_output, .run = perp_neg_run};
