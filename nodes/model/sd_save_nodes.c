/*
 * sd_save_nodes — comfy_extras.nodes_model_merging's save nodes: CheckpointSave,
 * CLIPSave, VAESave and ModelSave, over models/checkpoint_save.h.
 *
 * Files go where ComfyUI puts them: "<output>/<subfolder>/<name>_<counter:05d>_
 * .safetensors" from filename_prefix (folder_paths.get_save_image_path; a prefix
 * climbing out of the output folder is refused and nothing is written). CLIPSave
 * writes one file per text encoder, "<prefix>_clip_l" / "<prefix>_clip_g", each with
 * its own counter. The weights are the patched ones (merges and LoRAs baked).
 *
 * __metadata__ as ComfyUI writes it: the modelspec keys of save_checkpoint
 * (CheckpointSave, ModelSave; written even with --disable-metadata, as ComfyUI does),
 * "format": "pt" (CLIPSave), then unless --disable-metadata the prompt JSON and each
 * extra_pnginfo entry (the workflow).
 *
 * Output nodes without a UI result, as in ComfyUI (no "executed" message).
 *
 * Threads: executor thread.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "checkpoint_save.h"
#include "node_files.h"
#include "node_registry.h"
#include "sd_backend.h"
#include "sd_nodes.h"

#define MERGE_MODULE "comfy_extras.nodes_model_merging"
#define MERGE_CATEGORY "advanced/model_merging"

/* What one file holds. */
struct save_job {
    struct ckpt_save_part parts[4];
    int n_parts;
    const struct model_config *cfg; /* borrowed: prefixes and namings */
    enum ckpt_save_naming naming;
    int modelspec;                  /* save_checkpoint's modelspec keys */
    int format_pt;                  /* CLIPSave's "format": "pt" */
};

/* The metadata pairs for `job` into a new array (caller xfrees); *n their count. */
static struct ckpt_save_meta *job_meta(const struct node_ctx *c, const struct save_job *job,
                                       const char *title, int *n)
{
    struct ckpt_save_meta *m = xcalloc((size_t)(8 + c->n_pnginfo), sizeof(*m));
    int k = job->modelspec ? ckpt_save_modelspec(job->cfg, title, m) : 0;
    if (!c->env->disable_metadata) {
        if (job->format_pt)
            m[k++] = (struct ckpt_save_meta){"format", "pt"};
        /* ComfyUI writes json.dumps(prompt), "" when the run had none. */
        m[k++] = (struct ckpt_save_meta){"prompt", c->prompt_json ? c->prompt_json : ""};
        for (int i = 0; i < c->n_pnginfo; i++)
            m[k++] = (struct ckpt_save_meta){c->pnginfo[i].key, c->pnginfo[i].value};
    }
    *n = k;
    return m;
}

/* Write `job` under `prefix` (a filename_prefix) with the next counter. */
static int save_file(struct node_ctx *c, const struct save_job *job, const char *prefix)
{
    struct node_save_path sp;
    int rc = node_files_save_path(c->env, prefix, &sp);
    if (rc == ERR_DENIED) {
        node_save_path_release(&sp);
        return node_fail_code(c, rc, "Exception",
                              "Saving image outside the output folder is not allowed.");
    }
    if (rc < 0) {
        node_save_path_release(&sp);
        return node_fail_code(c, rc, "OSError", "cannot create folder '%s' in the output folder",
                              prefix);
    }
    struct buf path, title, name;
    buf_init(&path);
    buf_init(&title);
    buf_init(&name);
    buf_printf(&name, "%s_%05d_.safetensors", sp.filename.ptr, sp.counter);
    buf_printf(&path, "%s/%s", sp.dir.ptr, name.ptr);
    buf_printf(&title, "%s %d", sp.filename.ptr, sp.counter);
    int n_meta;
    struct ckpt_save_meta *meta = job_meta(c, job, title.ptr, &n_meta);
    struct err e = {0};
    errno = 0;
    rc = ckpt_save(c->env->mm, path.ptr, job->cfg, job->parts, job->n_parts, job->naming, meta,
                   n_meta, &e);
    if (rc < 0) {
        /* Named relative to the output folder: clients never see the server's paths. */
        if (rc == ERR_IO)
            node_fail_code(c, rc, "OSError", "cannot save '%s%s%s': %s", sp.subfolder.ptr,
                           sp.subfolder.len ? "/" : "", name.ptr,
                           errno ? strerror(errno) : "write failed");
        else
            node_fail_code(c, rc, "RuntimeError", "cannot save '%s%s%s': %s", sp.subfolder.ptr,
                           sp.subfolder.len ? "/" : "", name.ptr, e.msg);
    }
    xfree(meta);
    buf_release(&path);
    buf_release(&title);
    buf_release(&name);
    node_save_path_release(&sp);
    return rc;
}

#define HIDDEN_INPUTS                                                                          \
    {.name = "prompt", .type = "PROMPT", .group = NODE_INPUT_HIDDEN},                          \
    {.name = "extra_pnginfo", .type = "EXTRA_PNGINFO", .group = NODE_INPUT_HIDDEN}

static int need_mm(struct node_ctx *c)
{
    if (c->env->mm)
        return 0;
    return node_fail_code(c, ERR_INVALID, "RuntimeError",
                          "no compute device: this server runs no models");
}

/* The UNet part of the MODEL at input `index`; fails the node when it is not a
 * checkpoint's model. */
static struct patcher *model_part(struct node_ctx *c, int index, struct model_config *cfg)
{
    const struct sd_model *m = sd_model_of(node_in_at(c, index));
    struct patcher *p = m ? sd_model_unet_patcher(m, cfg) : NULL;
    if (!p)
        node_fail_code(c, ERR_INVALID, "RuntimeError",
                       "this MODEL cannot be saved (not a checkpoint's)");
    return p;
}

static const char *family_name(const struct model_config *cfg)
{
    const struct model_family *f = model_family_get(cfg->family);
    return f ? f->name : "?";
}

/* ---- CheckpointSave, ModelSave ---- */

enum {
    SAVE_CKPT_MODEL, SAVE_CKPT_CLIP, SAVE_CKPT_VAE, SAVE_CKPT_FILENAME_PREFIX,
    SAVE_CKPT_PROMPT, SAVE_CKPT_EXTRA_PNGINFO, SAVE_CKPT_N
};
static const struct node_input_def checkpoint_in[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "clip", .type = "CLIP"},
    {.name = "vae", .type = "VAE"},
    {.name = "filename_prefix", .type = "STRING", .def_str = "checkpoints/ComfyUI"},
    HIDDEN_INPUTS,
    NODE_INPUTS_END};

static int checkpoint_save_run(struct node_ctx *c)
{
    struct model_config cfg;
    struct patcher *unet = model_part(c, SAVE_CKPT_MODEL, &cfg);
    const struct sd_clip *clip = sd_clip_of(node_in_at(c, SAVE_CKPT_CLIP));
    const struct sd_vae *vae = sd_vae_of(node_in_at(c, SAVE_CKPT_VAE));
    if (!unet)
        return ERR_INVALID;
    if (!clip || !vae)
        return node_fail(c, "RuntimeError", "input 'clip' or 'vae' is not a CLIP or VAE");
    if (need_mm(c) < 0)
        return ERR_INVALID;
    if (clip->cfg.family != cfg.family || vae->cfg.family != cfg.family)
        return node_fail_code(c, ERR_INVALID, "RuntimeError",
                              "cannot save a checkpoint of a %s model with a %s CLIP and a %s "
                              "VAE", family_name(&cfg), family_name(&clip->cfg),
                              family_name(&vae->cfg));
    struct save_job job = {.cfg = &cfg, .naming = CKPT_SAVE_CHECKPOINT, .modelspec = 1};
    job.parts[job.n_parts++] = (struct ckpt_save_part){unet, MODEL_UNET};
    job.parts[job.n_parts++] = (struct ckpt_save_part){clip->p, MODEL_CLIP};
    if (clip->p2)
        job.parts[job.n_parts++] = (struct ckpt_save_part){clip->p2, MODEL_CLIP2};
    job.parts[job.n_parts++] = (struct ckpt_save_part){vae->p, MODEL_VAE};
    return save_file(c, &job, node_in_str_at(c, SAVE_CKPT_FILENAME_PREFIX));
}

enum {
    SAVE_MODEL_MODEL, SAVE_MODEL_FILENAME_PREFIX, SAVE_MODEL_PROMPT, SAVE_MODEL_EXTRA_PNGINFO,
    SAVE_MODEL_N
};
static const struct node_input_def model_in[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "filename_prefix", .type = "STRING", .def_str = "diffusion_models/ComfyUI"},
    HIDDEN_INPUTS,
    NODE_INPUTS_END};

static int model_save_run(struct node_ctx *c)
{
    struct model_config cfg;
    struct patcher *unet = model_part(c, SAVE_MODEL_MODEL, &cfg);
    if (!unet)
        return ERR_INVALID;
    if (need_mm(c) < 0)
        return ERR_INVALID;
    struct save_job job = {.cfg = &cfg, .naming = CKPT_SAVE_CHECKPOINT, .modelspec = 1};
    job.parts[job.n_parts++] = (struct ckpt_save_part){unet, MODEL_UNET};
    return save_file(c, &job, node_in_str_at(c, SAVE_MODEL_FILENAME_PREFIX));
}

/* ---- CLIPSave, VAESave ---- */

enum {
    SAVE_CLIP_CLIP, SAVE_CLIP_FILENAME_PREFIX, SAVE_CLIP_PROMPT, SAVE_CLIP_EXTRA_PNGINFO,
    SAVE_CLIP_N
};
static const struct node_input_def clip_in[] = {
    {.name = "clip", .type = "CLIP"},
    {.name = "filename_prefix", .type = "STRING", .def_str = "clip/ComfyUI"},
    HIDDEN_INPUTS,
    NODE_INPUTS_END};

static int clip_save_run(struct node_ctx *c)
{
    const struct sd_clip *clip = sd_clip_of(node_in_at(c, SAVE_CLIP_CLIP));
    if (!clip)
        return node_fail(c, "RuntimeError", "input 'clip' is not a CLIP");
    if (need_mm(c) < 0)
        return ERR_INVALID;
    const struct model_family *f = model_family_get(clip->cfg.family);
    const char *prefix = node_in_str_at(c, SAVE_CLIP_FILENAME_PREFIX);
    struct patcher *enc[2] = {clip->p, clip->p2};
    /* ComfyUI's file per encoder prefix, clip_l before clip_g (its prefix list order). */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 2; i++) {
            int openclip = f && f->text_naming[i] == TEXT_NAMING_OPENCLIP;
            if (!enc[i] || openclip != pass)
                continue;
            struct save_job job = {.cfg = &clip->cfg, .naming = CKPT_SAVE_CLIP, .format_pt = 1};
            job.parts[job.n_parts++] =
                (struct ckpt_save_part){enc[i], i ? MODEL_CLIP2 : MODEL_CLIP};
            struct buf pre;
            buf_init(&pre);
            buf_printf(&pre, "%s_%s", prefix, openclip ? "clip_g" : "clip_l");
            int rc = save_file(c, &job, pre.ptr);
            buf_release(&pre);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

enum {
    SAVE_VAE_VAE, SAVE_VAE_FILENAME_PREFIX, SAVE_VAE_PROMPT, SAVE_VAE_EXTRA_PNGINFO, SAVE_VAE_N
};
static const struct node_input_def vae_in[] = {
    {.name = "vae", .type = "VAE"},
    {.name = "filename_prefix", .type = "STRING", .def_str = "vae/ComfyUI_vae"},
    HIDDEN_INPUTS,
    NODE_INPUTS_END};

static int vae_save_run(struct node_ctx *c)
{
    const struct sd_vae *vae = sd_vae_of(node_in_at(c, SAVE_VAE_VAE));
    if (!vae)
        return node_fail(c, "RuntimeError", "input 'vae' is not a VAE");
    if (need_mm(c) < 0)
        return ERR_INVALID;
    struct save_job job = {.cfg = &vae->cfg, .naming = CKPT_SAVE_BARE};
    job.parts[job.n_parts++] = (struct ckpt_save_part){vae->p, MODEL_VAE};
    return save_file(c, &job, node_in_str_at(c, SAVE_VAE_FILENAME_PREFIX));
}

/* ---- classes ---- */

static const struct node_output_def no_outputs[] = {NODE_OUTPUTS_END};

const struct node_class sd_checkpoint_save = {
    .name = "CheckpointSave", .display_name = "Save Checkpoint", .category = MERGE_CATEGORY,
    .python_module = MERGE_MODULE, .flags = NODE_CLASS_OUTPUT, .inputs = checkpoint_in,
    .n_inputs = SAVE_CKPT_N, .outputs = no_outputs, .run = checkpoint_save_run};
const struct node_class sd_clip_save = {
    .name = "CLIPSave", .category = MERGE_CATEGORY, .python_module = MERGE_MODULE,
    .flags = NODE_CLASS_OUTPUT, .inputs = clip_in,
    .n_inputs = SAVE_CLIP_N, .outputs = no_outputs, .run = clip_save_run};
const struct node_class sd_vae_save = {
    .name = "VAESave", .category = MERGE_CATEGORY, .python_module = MERGE_MODULE,
    .flags = NODE_CLASS_OUTPUT, .inputs = vae_in,
    .n_inputs = SAVE_VAE_N, .outputs = no_outputs, .run = vae_save_run};
const struct node_class sd_model_save = {
    .name = "ModelSave", .category = MERGE_CATEGORY, .python_module = MERGE_MODULE,
    .flags = NODE_CLASS_OUTPUT, .inputs = model_in, .n_inputs = SAVE_MODEL_N, .outputs = no_outputs,
    .run = model_save_run};
