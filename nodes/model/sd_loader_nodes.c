/*
 * nodes.py's CheckpointLoader ("Load Checkpoint With Config (DEPRECATED)"): a
 * checkpoint plus an LDM config YAML from models/configs.
 *
 * latentd reads a checkpoint's architecture from its weights (checkpoint detection),
 * not from a YAML, so the node loads exactly as CheckpointLoaderSimple does (it runs
 * that class on its ckpt_name). The config must still exist, as in ComfyUI, and is
 * read for the two settings of ComfyUI's shipped configs that the weights do not
 * carry: `parameterization: "v"` (v2-inference-v*.yaml) and a CLIP `layer_idx`
 * (v1-inference_clip_skip_2*.yaml). A config asking for either is refused with a
 * clear error naming the nodes that give the same result (ModelSamplingDiscrete,
 * CLIPSetLastLayer) rather than silently ignored; fp16 flags and the rest only
 * restate what detection finds.
 *
 * UNETLoader ("Load Diffusion Model"): models/unet and models/diffusion_models, as
 * ComfyUI's diffusion_models folder. It reads the UNet of a full checkpoint (which
 * ComfyUI's load_diffusion_model also accepts, stripping model.diffusion_model.);
 * a standalone UNet file (bare input_blocks.* keys) is refused with a clear error, as
 * are the fp8 weight dtypes (latentd stores no fp8).
 *
 * CLIPLoader and DualCLIPLoader are sd_clip_loader_nodes.c's; they register here, in
 * nodes.py's order. unCLIPCheckpointLoader is not registered: it needs a CLIP_VISION
 * model latentd has no type for.
 */
#include <string.h>

#include "buf.h"
#include "checkpoint.h"
#include "memmgr.h"
#include "node_builtin.h"
#include "node_files.h"
#include "node_registry.h"
#include "sd_backend.h"
#include "sd_nodes.h"

enum { CKPTCFG_CONFIG_NAME, CKPTCFG_CKPT_NAME, CKPTCFG_N };

static const char *const yaml_exts[] = {".yaml", NULL};

static const struct node_input_def ckptcfg_inputs[] = {
    {.name = "config_name", .type = NODE_COMBO, .options_folder = "configs",
     .options_exts = yaml_exts},
    {.name = "ckpt_name", .type = NODE_COMBO, .options_folder = "checkpoints"},
    NODE_INPUTS_END};
static const struct node_output_def ckptcfg_outputs[] = {
    {.type = "MODEL"}, {.type = "CLIP"}, {.type = "VAE"}, NODE_OUTPUTS_END};

/*
 * Run CheckpointLoaderSimple's run (out == NULL) or is_changed on this node as if it
 * were one: that class's one input is our second. Outputs are the same three.
 */
static int as_simple(struct node_ctx *c, struct buf *out)
{
    const struct node_class *own = c->cls;
    struct value **own_in = c->inputs;
    c->cls = &sd_checkpoint_loader_simple;
    c->inputs = own_in + CKPTCFG_CKPT_NAME;
    int rc = out ? c->cls->is_changed(c, out) : c->cls->run(c);
    c->cls = own;
    c->inputs = own_in;
    return rc;
}

static int ckptcfg_is_changed(struct node_ctx *c, struct buf *out)
{
    return as_simple(c, out);
}

/* The first setting of `yaml` that this loader cannot apply, or NULL. */
static const char *unapplied_setting(const char *yaml)
{
    for (const char *p = yaml; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[256];
        size_t k = len < sizeof line - 1 ? len : sizeof line - 1;
        memcpy(line, p, k);
        line[k] = 0;
        const char *t = line + strspn(line, " \t");
        if (!strncmp(t, "parameterization:", 17) && strstr(t, "\"v\""))
            return "parameterization \"v\" (use CheckpointLoaderSimple + ModelSamplingDiscrete "
                   "v_prediction)";
        if (!strncmp(t, "layer_idx:", 10))
            return "a CLIP layer_idx (use CheckpointLoaderSimple + CLIPSetLastLayer)";
        p = nl ? nl + 1 : NULL;
    }
    return NULL;
}

static int ckptcfg_run(struct node_ctx *c)
{
    const char *cfg = node_in_str_at(c, CKPTCFG_CONFIG_NAME);
    struct buf path, yaml;
    buf_init(&path);
    buf_init(&yaml);
    if (node_files_find_model(c->env, "configs", cfg, &path) < 0 || buf_read_file(&yaml, path.ptr) < 0) {
        buf_release(&path);
        buf_release(&yaml);
        return node_fail_code(c, ERR_NOT_FOUND, "FileNotFoundError",
                              "Config in folder 'configs' with filename '%s' not found.", cfg);
    }
    const char *why = unapplied_setting(yaml.ptr);
    buf_release(&path);
    buf_release(&yaml);
    if (why)
        return node_fail_code(c, ERR_UNSUPPORTED, "RuntimeError",
                              "config '%s' asks for %s, which latentd's CheckpointLoader does not "
                              "apply: the model is read from the checkpoint's weights",
                              cfg, why);
    return as_simple(c, NULL);
}

const struct node_class sd_checkpoint_loader_config = {
    .name = "CheckpointLoader",
    .display_name = "Load Checkpoint With Config (DEPRECATED)",
    .category = "advanced/loaders",
    .flags = NODE_CLASS_DEPRECATED,
    .inputs = ckptcfg_inputs,
    .n_inputs = CKPTCFG_N,
    .outputs = ckptcfg_outputs,
    .run = ckptcfg_run,
    .is_changed = ckptcfg_is_changed,
};

/* ---- UNETLoader ---- */

enum { UNET_UNET_NAME, UNET_WEIGHT_DTYPE, UNET_N };

/* ComfyUI's folder_names_and_paths["diffusion_models"], in its search order. */
static const char *const unet_folders[] = {"unet", "diffusion_models"};

static void unet_names(const struct node_env *env, struct node_strlist *out)
{
    for (size_t i = 0; i < sizeof unet_folders / sizeof unet_folders[0]; i++)
        node_files_list_models(env, unet_folders[i], NULL, out);
    node_strlist_sort(out);
}

static const char *const weight_dtypes[] = {"default", "fp8_e4m3fn", "fp8_e4m3fn_fast", "fp8_e5m2",
                                            NULL};

static const struct node_input_def unet_inputs[] = {
    {.name = "unet_name", .type = NODE_COMBO, .options_fn = unet_names},
    {.name = "weight_dtype", .type = NODE_COMBO, .options = weight_dtypes},
    NODE_INPUTS_END};
static const struct node_output_def unet_outputs[] = {{.type = "MODEL"}, NODE_OUTPUTS_END};

static int unet_run(struct node_ctx *c)
{
    const char *name = node_in_str_at(c, UNET_UNET_NAME), *wd = node_in_str_at(c, UNET_WEIGHT_DTYPE);
    if (strcmp(wd, "default") != 0)
        return node_fail_code(c, ERR_UNSUPPORTED, "RuntimeError",
                              "weight_dtype '%s' is not supported: latentd keeps the file's "
                              "dtype (use 'default')",
                              wd);
    struct buf path;
    buf_init(&path);
    int found = -1;
    for (size_t i = 0; found < 0 && i < sizeof unet_folders / sizeof unet_folders[0]; i++) {
        buf_reset(&path);
        found = node_files_find_model(c->env, unet_folders[i], name, &path);
    }
    if (found < 0) {
        buf_release(&path);
        return node_fail_code(c, ERR_NOT_FOUND, "FileNotFoundError",
                              "Model in folder 'diffusion_models' with filename '%s' not found.",
                              name);
    }
    /* f32 compute, as CheckpointLoaderSimple. */
    static const enum tensor_dtype dt[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct model_ckpt ck;
    struct err e = {0};
    int rc = model_ckpt_load(path.ptr, MODEL_LOAD_UNET, dt, &ck, &e);
    buf_release(&path);
    if (rc < 0)
        return node_fail_code(c, rc, "RuntimeError",
                              "ERROR: could not load '%s' as a diffusion model: %s (latentd reads "
                              "the UNet of a full checkpoint; standalone UNet files are not "
                              "supported yet)",
                              name, e.msg);
    patcher_model_set_precision(ck.model[MODEL_UNET], mm_precision(c->env->mm, PATCHER_ROLE_UNET));
    struct patcher *unet = patcher_new(ck.model[MODEL_UNET]);
    struct model_config cfg = ck.cfg;
    model_ckpt_release(&ck); /* the patcher holds the model now */
    node_set_output(c, 0, sd_model_value(sd_unet_model_new(unet, &cfg)));
    return 0;
}

const struct node_class sd_unet_loader = {
    .name = "UNETLoader",
    .display_name = "Load Diffusion Model",
    .category = "advanced/loaders",
    .inputs = unet_inputs,
    .n_inputs = UNET_N,
    .outputs = unet_outputs,
    .run = unet_run,
};

/* nodes.py's NODE_CLASS_MAPPINGS order. */
static const struct node_class *const loader_classes[] = {
    &sd_clip_loader, &sd_unet_loader, &sd_dual_clip_loader, &sd_checkpoint_loader_config};

void nodes_sd_loaders_register(struct node_registry *r)
{
    node_registry_add_all(r, loader_classes, sizeof(loader_classes) / sizeof(loader_classes[0]));
}
