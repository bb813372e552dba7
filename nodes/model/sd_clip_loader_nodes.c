/*
 * nodes.py's CLIPLoader ("Load CLIP") and DualCLIPLoader ("DualCLIPLoader"): standalone
 * text-encoder files from models/text_encoders and models/clip (ComfyUI's
 * text_encoders folder), read by models/checkpoint_text.c (model_text_probe,
 * model_text_load) into the same patcher models a checkpoint gives.
 *
 * What ComfyUI's load_text_encoder_state_dicts does for the encoders latentd has:
 *   CLIPLoader, type stable_diffusion: the file's encoder decides (detect_te_model):
 *     CLIP-L -> SD1.x's CLIP (SD1ClipModel), OpenCLIP ViT-H -> SD2.x's (SD2ClipModel),
 *     ViT-bigG -> the SDXL refiner's (SDXLRefinerClipModel);
 *   DualCLIPLoader, type sdxl: a CLIP-L and a bigG file, in either order (SDXLClipModel
 *     routes each by its keys), as SDXL's two encoders.
 * The other types of the combos name encoders latentd does not have (T5, Gemma, Llama,
 * Qwen, ...) or other families' uses of these (sd3, stable_cascade, flux, hidream); they
 * are listed, as ComfyUI lists them, and refused when run with an error naming what
 * latentd takes. `device` (ComfyUI's "cpu" placement) is accepted and has no effect: the
 * memory manager places the encoder as it places a checkpoint's.
 *
 * Threads: executor thread.
 */
#include <string.h>

#include "buf.h"
#include "checkpoint.h"
#include "family.h"
#include "memmgr.h"
#include "node_files.h"
#include "node_registry.h"
#include "sd_backend.h"
#include "sd_nodes.h"

/* ComfyUI's folder_names_and_paths["text_encoders"], in its search order. */
static const char *const te_folders[] = {"text_encoders", "clip"};
#define N_TE_FOLDERS (sizeof te_folders / sizeof te_folders[0])

static void te_names(const struct node_env *env, struct node_strlist *out)
{
    for (size_t i = 0; i < N_TE_FOLDERS; i++)
        node_files_list_models(env, te_folders[i], NULL, out);
    node_strlist_sort(out);
}

/* The path of text encoder `name`, or a FileNotFoundError on the node. */
static int te_find(struct node_ctx *c, const char *name, struct buf *path)
{
    for (size_t i = 0; i < N_TE_FOLDERS; i++) {
        buf_reset(path);
        if (node_files_find_model(c->env, te_folders[i], name, path) == 0)
            return 0;
    }
    return node_fail_code(c, ERR_NOT_FOUND, "FileNotFoundError",
                          "Model in folder 'text_encoders' with filename '%s' not found.", name);
}

/* IS_CHANGED: the stamps of the files that inputs [0, n) name. */
static int te_is_changed(struct node_ctx *c, int n, struct buf *out)
{
    for (int k = 0; k < n; k++) {
        int rc = ERR_NOT_FOUND;
        for (size_t i = 0; rc < 0 && i < N_TE_FOLDERS; i++)
            rc = sd__model_file_is_changed_at(c, te_folders[i], k, out);
        if (rc < 0)
            return rc; /* the run reports it */
        buf_printf(out, ";");
    }
    return 0;
}

/* Load the file `name` as encoder `comp` of `family` into *p (a new patcher), with the
 * --bf16-text-enc precision; *cfg gets the load's config. */
static int te_load(struct node_ctx *c, const char *name, const char *path, int family,
                   enum model_component comp, struct patcher **p, struct model_config *cfg)
{
    struct model_ckpt ck;
    struct err e = {0};
    /* f32 compute, as CheckpointLoaderSimple (file weights kept at their dtype). */
    int rc = model_text_load(path, family, comp, TENSOR_F32, &ck, &e);
    if (rc < 0)
        return node_fail_code(c, rc, "RuntimeError", "ERROR: could not load text encoder '%s': %s",
                              name, e.msg);
    patcher_model_set_precision(ck.model[comp],
                                mm_precision(c->env->mm, PATCHER_ROLE_TEXT_ENCODER));
    *p = patcher_new(ck.model[comp]);
    *cfg = ck.cfg;
    model_ckpt_release(&ck); /* the patcher holds the model now */
    return 0;
}

/* What encoder the file holds, or a node error. */
static int te_probe(struct node_ctx *c, const char *name, const char *path,
                    enum model_text_kind *kind)
{
    struct err e = {0};
    int rc = model_text_probe(path, kind, &e);
    return rc < 0 ? node_fail_code(c, rc, "RuntimeError",
                                   "ERROR: could not load text encoder '%s': %s", name, e.msg)
                  : 0;
}

/* The CLIP value over encoders p (and p2, SDXL's bigG, or NULL). */
static int te_output(struct node_ctx *c, struct patcher *p, struct patcher *p2,
                     const struct model_config *cfg)
{
    struct sd_clip *cl = NULL;
    struct err e = {0};
    int rc = sd_clip_new(p, cfg, &cl, &e); /* takes p */
    if (rc < 0) {
        patcher_unref(p2);
        return node_fail_code(c, rc, "RuntimeError", "%s", e.msg);
    }
    sd_clip_set_second(cl, p2);
    sd_clip_set_embedding_dir(cl, c->env->models_dir);
    node_set_output(c, 0, sd_clip_value(cl));
    return 0;
}

static const char *const devices[] = {"default", "cpu", NULL};
static const struct node_output_def clip_out[] = {{.type = "CLIP"}, NODE_OUTPUTS_END};

/* ---- CLIPLoader ---- */

enum { CLIPL_CLIP_NAME, CLIPL_TYPE, CLIPL_DEVICE, CLIPL_N };

static const char *const clip_types[] = {
    "stable_diffusion", "stable_cascade", "sd3",     "stable_audio", "mochi",    "ltxv",
    "pixart",           "cosmos",         "lumina2", "wan",          "hidream",  "chroma",
    "ace",              "omnigen2",       "qwen_image", "hunyuan_image", NULL};

static const struct node_input_def clipl_inputs[] = {
    {.name = "clip_name", .type = NODE_COMBO, .options_fn = te_names},
    {.name = "type", .type = NODE_COMBO, .options = clip_types},
    {.name = "device", .type = NODE_COMBO, .group = NODE_INPUT_OPTIONAL, .options = devices,
     .advanced = 1},
    NODE_INPUTS_END};

static int clipl_is_changed(struct node_ctx *c, struct buf *out)
{
    return te_is_changed(c, 1, out);
}

static int clipl_run(struct node_ctx *c)
{
    const char *name = node_in_str_at(c, CLIPL_CLIP_NAME), *type = node_in_str_at(c, CLIPL_TYPE);
    if (strcmp(type, "stable_diffusion") != 0)
        return node_fail_code(c, ERR_UNSUPPORTED, "RuntimeError",
                              "CLIPLoader type '%s' is not supported: latentd runs the CLIP-L, "
                              "OpenCLIP ViT-H and ViT-bigG text encoders of SD1.x, SD2.x and SDXL "
                              "(type stable_diffusion; DualCLIPLoader type sdxl for SDXL)",
                              type);
    struct buf path;
    buf_init(&path);
    enum model_text_kind kind;
    int rc = te_find(c, name, &path);
    if (rc == 0)
        rc = te_probe(c, name, path.ptr, &kind);
    if (rc < 0) {
        buf_release(&path);
        return rc;
    }
    /* load_text_encoder_state_dicts with one file: the encoder says which model. */
    int family = kind == MODEL_TEXT_CLIP_H   ? MODEL_FAMILY_SD2
                 : kind == MODEL_TEXT_CLIP_G ? MODEL_FAMILY_SDXL_REFINER
                                             : MODEL_FAMILY_SD15;
    struct patcher *p = NULL;
    struct model_config cfg;
    rc = te_load(c, name, path.ptr, family, MODEL_CLIP, &p, &cfg);
    buf_release(&path);
    return rc < 0 ? rc : te_output(c, p, NULL, &cfg);
}

const struct node_class sd_clip_loader = {
    .name = "CLIPLoader",
    .display_name = "Load CLIP",
    .description = "[Recipes]\n\nstable_diffusion: clip-l\nstable_cascade: clip-g\nsd3: t5 xxl/ "
                   "clip-g / clip-l\nstable_audio: t5 base\nmochi: t5 xxl\ncosmos: old t5 "
                   "xxl\nlumina2: gemma 2 2B\nwan: umt5 xxl\n hidream: llama-3.1 (Recommend) or "
                   "t5\nomnigen2: qwen vl 2.5 3B",
    .category = "advanced/loaders",
    .inputs = clipl_inputs,
    .n_inputs = CLIPL_N,
    .outputs = clip_out,
    .run = clipl_run,
    .is_changed = clipl_is_changed,
};

/* ---- DualCLIPLoader ---- */

enum { DUAL_CLIP_NAME1, DUAL_CLIP_NAME2, DUAL_TYPE, DUAL_DEVICE, DUAL_N };

static const char *const dual_types[] = {"sdxl",    "sd3",           "flux", "hunyuan_video",
                                         "hidream", "hunyuan_image", NULL};

static const struct node_input_def dual_inputs[] = {
    {.name = "clip_name1", .type = NODE_COMBO, .options_fn = te_names},
    {.name = "clip_name2", .type = NODE_COMBO, .options_fn = te_names},
    {.name = "type", .type = NODE_COMBO, .options = dual_types},
    {.name = "device", .type = NODE_COMBO, .group = NODE_INPUT_OPTIONAL, .options = devices,
     .advanced = 1},
    NODE_INPUTS_END};

static int dual_is_changed(struct node_ctx *c, struct buf *out)
{
    return te_is_changed(c, 2, out);
}

static int dual_run(struct node_ctx *c)
{
    const char *name[2] = {node_in_str_at(c, DUAL_CLIP_NAME1), node_in_str_at(c, DUAL_CLIP_NAME2)};
    const char *type = node_in_str_at(c, DUAL_TYPE);
    if (strcmp(type, "sdxl") != 0)
        return node_fail_code(c, ERR_UNSUPPORTED, "RuntimeError",
                              "DualCLIPLoader type '%s' is not supported: latentd runs SDXL's "
                              "text encoders (type sdxl: a CLIP-L and an OpenCLIP ViT-bigG file)",
                              type);
    struct buf path[2];
    enum model_text_kind kind[2] = {MODEL_TEXT_NONE, MODEL_TEXT_NONE};
    int rc = 0;
    for (int i = 0; i < 2; i++) {
        buf_init(&path[i]);
        if (rc == 0 && (rc = te_find(c, name[i], &path[i])) == 0)
            rc = te_probe(c, name[i], path[i].ptr, &kind[i]);
    }
    /* SDXLClipModel.load_sd routes a file by its keys: bigG's to clip_g, the rest to
     * clip_l. li: the CLIP-L file, gi: the bigG one. */
    int li = kind[0] == MODEL_TEXT_CLIP_G && kind[1] != MODEL_TEXT_CLIP_G, gi = 1 - li;
    if (rc == 0 && (kind[li] != MODEL_TEXT_CLIP_L || kind[gi] != MODEL_TEXT_CLIP_G))
        rc = node_fail_code(c, ERR_INVALID, "RuntimeError",
                            "DualCLIPLoader type 'sdxl' takes a CLIP-L and an OpenCLIP ViT-bigG "
                            "text encoder; '%s' is %s and '%s' is %s",
                            name[0], model_text_kind_name(kind[0]), name[1],
                            model_text_kind_name(kind[1]));
    struct patcher *pl = NULL, *pg = NULL;
    struct model_config cfg, cfg_g;
    if (rc == 0)
        rc = te_load(c, name[li], path[li].ptr, MODEL_FAMILY_SDXL, MODEL_CLIP, &pl, &cfg);
    if (rc == 0 &&
        (rc = te_load(c, name[gi], path[gi].ptr, MODEL_FAMILY_SDXL, MODEL_CLIP2, &pg,
                      &cfg_g)) < 0)
        patcher_unref(pl);
    for (int i = 0; i < 2; i++)
        buf_release(&path[i]);
    if (rc < 0)
        return rc;
    cfg.text[1] = cfg_g.text[1]; /* each load fills its own slot */
    return te_output(c, pl, pg, &cfg);
}

const struct node_class sd_dual_clip_loader = {
    .name = "DualCLIPLoader",
    .description = "[Recipes]\n\nsdxl: clip-l, clip-g\nsd3: clip-l, clip-g / clip-l, t5 / clip-g, "
                   "t5\nflux: clip-l, t5\nhidream: at least one of t5 or llama, recommended t5 "
                   "and llama\nhunyuan_image: qwen2.5vl 7b and byt5 small",
    .category = "advanced/loaders",
    .inputs = dual_inputs,
    .n_inputs = DUAL_N,
    .outputs = clip_out,
    .run = dual_run,
    .is_changed = dual_is_changed,
};
