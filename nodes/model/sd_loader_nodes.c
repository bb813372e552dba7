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
 * The other loaders of nodes.py's "advanced/loaders" are not registered: UNETLoader,
 * CLIPLoader and DualCLIPLoader take standalone UNet / text-encoder files (bare
 * input_blocks.* or text_model.* keys), which latentd's checkpoint reader does not
 * accept yet; unCLIPCheckpointLoader needs a CLIP_VISION model latentd has no type for.
 */
#include <string.h>

#include "buf.h"
#include "node_builtin.h"
#include "node_files.h"
#include "node_registry.h"
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

static const struct node_class *const loader_classes[] = {&sd_checkpoint_loader_config};

void nodes_sd_loaders_register(struct node_registry *r)
{
    node_registry_add_all(r, loader_classes, sizeof(loader_classes) / sizeof(loader_classes[0]));
}
