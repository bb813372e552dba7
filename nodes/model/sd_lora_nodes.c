/*
 * sd_lora_nodes — LoraLoader and LoraLoaderModelOnly (comfy-api.md §7.3):
 * clone the UNet / text-encoder patchers and add the file's patches
 * (models/lora/lora.h), so the unpatched model stays available to other
 * branches of the graph. Both strengths 0 passes the inputs through.
 */
#include <string.h>

#include "buf.h"
#include "node_files.h"
#include "node_registry.h"
#include "lora.h"
#include "sd_backend.h"
#include "sd_nodes.h"

#define LORA_DESC                                                                              \
    "LoRAs are used to modify diffusion and CLIP models, altering the way in which latents "  \
    "are denoised such as applying styles. Multiple LoRA nodes can be linked together."

enum { LORA_MODEL, LORA_CLIP, LORA_LORA_NAME, LORA_STRENGTH_MODEL, LORA_STRENGTH_CLIP, LORA_N };
static const struct node_input_def lora_inputs[] = {
    {.name = "model", .type = "MODEL", .tooltip = "The diffusion model the LoRA will be applied to."},
    {.name = "clip", .type = "CLIP", .tooltip = "The CLIP model the LoRA will be applied to."},
    {.name = "lora_name", .type = NODE_COMBO, .options_folder = "loras",
     .tooltip = "The name of the LoRA."},
    {.name = "strength_model", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(-100.0),
     .max = NODE_F(100.0), .step = NODE_F(0.01),
     .tooltip = "How strongly to modify the diffusion model. This value can be negative."},
    {.name = "strength_clip", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(-100.0),
     .max = NODE_F(100.0), .step = NODE_F(0.01),
     .tooltip = "How strongly to modify the CLIP model. This value can be negative."},
    NODE_INPUTS_END};
static const struct node_output_def lora_outputs[] = {
    {.type = "MODEL", .tooltip = "The modified diffusion model."},
    {.type = "CLIP", .tooltip = "The modified CLIP model."},
    NODE_OUTPUTS_END};

enum { MODEL_ONLY_MODEL, MODEL_ONLY_LORA_NAME, MODEL_ONLY_STRENGTH_MODEL, MODEL_ONLY_N };
static const struct node_input_def lora_model_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "lora_name", .type = NODE_COMBO, .options_folder = "loras"},
    {.name = "strength_model", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(-100.0),
     .max = NODE_F(100.0), .step = NODE_F(0.01)},
    NODE_INPUTS_END};
/* QUIRK kept from ComfyUI: the class inherits LoraLoader's two output tooltips. */
static const struct node_output_def lora_model_outputs[] = {
    {.type = "MODEL", .tooltip = "The modified diffusion model."}, NODE_OUTPUTS_END};

/* Where lora_common finds each input in the two declarations (-1: not declared). */
struct lora_layout {
    int model, clip, lora_name, strength_model, strength_clip;
};
static const struct lora_layout lora_layout = {LORA_MODEL, LORA_CLIP, LORA_LORA_NAME,
                                               LORA_STRENGTH_MODEL, LORA_STRENGTH_CLIP};
static const struct lora_layout model_only_layout = {MODEL_ONLY_MODEL, -1, MODEL_ONLY_LORA_NAME,
                                                     MODEL_ONLY_STRENGTH_MODEL, -1};

/* Patch copies of model (and clip, when declared); outputs set on success. */
static int lora_common(struct node_ctx *c, const struct lora_layout *in)
{
    int with_clip = in->clip >= 0;
    struct value *mv = node_in_at(c, in->model), *cv = with_clip ? node_in_at(c, in->clip) : NULL;
    const struct sd_model *model = sd_model_of(mv);
    const struct sd_clip *clip = with_clip ? sd_clip_of(cv) : NULL;
    double sm = node_in_float_at(c, in->strength_model);
    double sc = with_clip ? node_in_float_at(c, in->strength_clip) : 0.0;
    const char *name = node_in_str_at(c, in->lora_name);
    if (!model)
        return node_fail(c, "RuntimeError", "input 'model' is not a MODEL");
    if (with_clip && !clip)
        return node_fail(c, "RuntimeError", "input 'clip' is not a CLIP");
    if (sm == 0.0 && sc == 0.0) {
        node_set_output(c, 0, value_ref(mv));
        if (with_clip)
            node_set_output(c, 1, value_ref(cv));
        return 0;
    }
    struct model_config cfg;
    struct patcher *up = sd_model_unet_patcher(model, &cfg);
    if (!up)
        return node_fail(c, "RuntimeError", "this MODEL cannot take a LoRA");
    struct buf path;
    buf_init(&path);
    if (node_files_find_model(c->env, "loras", name, &path) < 0) {
        buf_release(&path);
        return node_fail_code(c, ERR_NOT_FOUND, "FileNotFoundError",
                              "Model in folder 'loras' with filename '%s' not found.", name);
    }
    struct patcher *u2 = patcher_clone(up), *c2 = clip ? patcher_clone(clip->p) : NULL;
    struct patcher *g2 = clip && clip->p2 ? patcher_clone(clip->p2) : NULL; /* SDXL's bigG */
    struct err e = {0};
    int rc = lora_apply(path.ptr, &cfg, u2, (float)sm, c2, (float)sc, g2, NULL, &e);
    buf_release(&path);
    if (rc < 0) {
        patcher_unref(u2);
        patcher_unref(c2);
        patcher_unref(g2);
        return node_fail_code(c, rc, "RuntimeError", "%s", e.msg);
    }
    struct sd_model *m2 = sd_unet_model_new(u2, &cfg);
    m2->max_batch = model->max_batch;
    sd_model_copy_patches(m2, model); /* model.clone() keeps the model patches */
    node_set_output(c, 0, sd_model_value(m2));
    if (clip) {
        struct sd_clip *cl = sd_clip_clone(clip);
        patcher_unref(cl->p);
        cl->p = c2;
        if (g2) {
            patcher_unref(cl->p2);
            cl->p2 = g2;
        }
        node_set_output(c, 1, sd_clip_value(cl));
    }
    return 0;
}

static int lora_is_changed(struct node_ctx *c, struct buf *out)
{
    return sd__model_file_is_changed_at(c, "loras", LORA_LORA_NAME, out);
}

static int lora_run(struct node_ctx *c)
{
    return lora_common(c, &lora_layout);
}

const struct node_class sd_lora_loader = {
    .name = "LoraLoader",
    .display_name = "Load LoRA",
    .description = LORA_DESC,
    .category = "loaders",
    .inputs = lora_inputs,
    .n_inputs = LORA_N,
    .outputs = lora_outputs,
    .run = lora_run,
    .is_changed = lora_is_changed,
};

static int model_only_is_changed(struct node_ctx *c, struct buf *out)
{
    return sd__model_file_is_changed_at(c, "loras", MODEL_ONLY_LORA_NAME, out);
}

static int lora_model_run(struct node_ctx *c)
{
    return lora_common(c, &model_only_layout);
}

const struct node_class sd_lora_loader_model_only = {
    .name = "LoraLoaderModelOnly",
    .description = LORA_DESC,
    .category = "loaders",
    .inputs = lora_model_inputs,
    .n_inputs = MODEL_ONLY_N,
    .outputs = lora_model_outputs,
    .run = lora_model_run,
    .is_changed = model_only_is_changed,
};
