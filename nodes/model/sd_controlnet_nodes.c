/*
 * sd_controlnet_nodes — ControlNetLoader, DiffControlNetLoader, ControlNetApply (OLD,
 * deprecated), ControlNetApplyAdvanced (ComfyUI nodes.py) and SetUnionControlNetType
 * (comfy_extras/nodes_controlnet.py): load a CONTROL_NET (a ControlNet, Union or not,
 * models/controlnet/controlnet.h, a T2I-Adapter, t2i_adapter.h, or a Control-LoRA,
 * control_lora.h, as ComfyUI's load_controlnet tells them apart) and put it, with a hint image, a strength and a
 * start/end percent, on every entry of a conditioning (sd_control.h), chained to the
 * control the entry had. KSampler runs it (sd_ksampler.c, sd_backend.c).
 */
#include <string.h>

#include "buf.h"
#include "node_files.h"
#include "node_registry.h"
#include "sd_backend.h"
#include "sd_control.h"
#include "sd_nodes.h"

/* ---- loaders ---- */

/* The file's model, of the kind controlnet_file_kind says (diff_base:
 * DiffControlNetLoader's UNet, for a diff ControlNet). */
static int load_model(const char *path, struct patcher *diff_base, struct sd_cnet **out,
                      struct err *e)
{
    struct controlnet *cn = NULL;
    struct t2i_adapter *t2i = NULL;
    struct control_lora *lora = NULL;
    int rc;
    /* f32 storage, as the checkpoint loader's (sd15.md §8.5's CPU policy) */
    switch (controlnet_file_kind(path)) {
    case CONTROLNET_KIND_T2I:
        rc = t2i_adapter_load(path, TENSOR_F32, &t2i, e);
        break;
    case CONTROLNET_KIND_LORA: /* its ControlNet is made at sampling, with the model */
        rc = control_lora_load(path, &lora, e);
        break;
    default:
        rc = controlnet_load(path, diff_base, TENSOR_F32, &cn, e);
    }
    if (rc < 0)
        return rc;
    *out = sd_cnet_new(cn, t2i, lora, -1);
    controlnet_unref(cn);
    t2i_adapter_unref(t2i);
    control_lora_unref(lora);
    return 0;
}

/* load_controlnet: a file named *_shuffle(_fp16).ext gets global_average_pooling. */
static int shuffle_name(const char *path)
{
    const char *base = strrchr(path, '/'), *dot;
    base = base ? base + 1 : path;
    dot = strrchr(base, '.');
    size_t n = dot ? (size_t)(dot - base) : strlen(base);
    static const char *const ends[] = {"_shuffle", "_shuffle_fp16"};
    for (int i = 0; i < 2; i++) {
        size_t l = strlen(ends[i]);
        if (n >= l && strncmp(base + n - l, ends[i], l) == 0)
            return 1;
    }
    return 0;
}

/* `name_at`: the control_net_name input's index in the class's declaration. */
static int load_common(struct node_ctx *c, int name_at, struct patcher *diff_base)
{
    const char *name = node_in_str_at(c, name_at);
    struct buf path;
    buf_init(&path);
    if (node_files_find_model(c->env, "controlnet", name, &path) < 0) {
        buf_release(&path);
        return node_fail_code(c, ERR_NOT_FOUND, "FileNotFoundError",
                              "Model in folder 'controlnet' with filename '%s' not found.", name);
    }
    struct sd_cnet *net = NULL;
    struct err e = {0};
    int rc = load_model(path.ptr, diff_base, &net, &e);
    if (rc == 0 && net->cn)
        net->global_average_pooling = shuffle_name(path.ptr);
    buf_release(&path);
    if (rc < 0)
        return node_fail_code(c, rc, "RuntimeError",
                              "ERROR: controlnet file is invalid and does not contain a valid "
                              "controlnet model: %s",
                              e.msg);
    node_set_output(c, 0, sd_cnet_value(net));
    return 0;
}

enum { LOADER_CONTROL_NET_NAME, LOADER_N };
static const struct node_input_def loader_inputs[] = {
    {.name = "control_net_name", .type = NODE_COMBO, .options_folder = "controlnet"},
    NODE_INPUTS_END};
static const struct node_output_def cn_outputs[] = {{.type = "CONTROL_NET"}, NODE_OUTPUTS_END};

static int loader_run(struct node_ctx *c)
{
    return load_common(c, LOADER_CONTROL_NET_NAME, NULL);
}

static int loader_is_changed(struct node_ctx *c, struct buf *out)
{
    return sd__model_file_is_changed_at(c, "controlnet", LOADER_CONTROL_NET_NAME, out);
}

const struct node_class sd_controlnet_loader = {
    .name = "ControlNetLoader",
    .display_name = "Load ControlNet Model",
    .category = "loaders",
    .inputs = loader_inputs,
    .n_inputs = LOADER_N,
    .outputs = cn_outputs,
    .run = loader_run,
    .is_changed = loader_is_changed,
};

enum { DIFF_MODEL, DIFF_CONTROL_NET_NAME, DIFF_N };
static const struct node_input_def diff_loader_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "control_net_name", .type = NODE_COMBO, .options_folder = "controlnet"},
    NODE_INPUTS_END};

static int diff_loader_run(struct node_ctx *c)
{
    const struct sd_model *model = sd_model_of(node_in_at(c, DIFF_MODEL));
    if (!model)
        return node_fail(c, "RuntimeError", "input 'model' is not a MODEL");
    struct patcher *unet = sd_model_unet_patcher(model, NULL);
    if (!unet)
        return node_fail(c, "RuntimeError", "this MODEL has no UNet weights to add to");
    return load_common(c, DIFF_CONTROL_NET_NAME, unet);
}

static int diff_loader_is_changed(struct node_ctx *c, struct buf *out)
{
    return sd__model_file_is_changed_at(c, "controlnet", DIFF_CONTROL_NET_NAME, out);
}

const struct node_class sd_diff_controlnet_loader = {
    .name = "DiffControlNetLoader",
    .display_name = "Load ControlNet Model (diff)",
    .category = "loaders",
    .inputs = diff_loader_inputs,
    .n_inputs = DIFF_N,
    .outputs = cn_outputs,
    .run = diff_loader_run,
    .is_changed = diff_loader_is_changed,
};

/* ---- applying ---- */

/* A control per distinct previous control (ComfyUI's cnets dict), shared by the
 * entries that had the same one, positive and negative alike. */
struct control_map {
    struct sd_control *prev[64], *made[64];
    int n;
};

static void control_map_release(struct control_map *m)
{
    for (int i = 0; i < m->n; i++)
        sd_control_unref(m->made[i]);
    m->n = 0;
}

struct apply_args {
    const struct sd_cnet *net;
    const struct value *image;
    float strength;
    double start, end;
    int to_uncond; /* ControlNetApply (OLD) */
};

/* A copy of `in` whose entries carry a control over their previous one. */
static int apply_to(const struct apply_args *a, const struct sd_cond *in, struct control_map *m,
                    struct sd_cond **out, struct err *e)
{
    struct sd_cond *c = sd_cond_clone(in);
    int rc = 0;
    for (int i = 0; i < c->n && rc == 0; i++) {
        struct sd_cond_entry *en = &c->entries[i];
        struct sd_control *made = NULL;
        for (int k = 0; k < m->n && !made; k++)
            if (m->prev[k] == en->control)
                made = m->made[k];
        if (!made) {
            if (m->n == 64) {
                rc = err_set(e, ERR_INVALID, "too many distinct ControlNet chains");
                break;
            }
            if ((rc = sd_control_new(a->net, a->image, a->strength, a->start, a->end,
                                     en->control, &made, e)) < 0)
                break;
            made->apply_to_uncond = a->to_uncond;
            m->prev[m->n] = en->control;
            m->made[m->n++] = made;
        }
        sd_control_ref(made);
        sd_control_unref(en->control);
        en->control = made;
    }
    if (rc < 0) {
        sd_cond_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* Where an apply class declares its inputs: its n conditionings come first (outputs in
 * that order), then the control net, the image and the strength. */
struct apply_slots {
    int n, net, image, strength;
};

static int apply_common(struct node_ctx *c, const struct apply_slots *at, double start,
                        double end, int to_uncond)
{
    const struct sd_cnet *net = sd_cnet_of(node_in_at(c, at->net));
    const struct value *image = node_in_at(c, at->image);
    double strength = node_in_float_at(c, at->strength);
    int n = at->n;
    if (!net)
        return node_fail(c, "RuntimeError", "input 'control_net' is not a CONTROL_NET");
    for (int i = 0; i < n; i++)
        if (!sd_cond_of(node_in_at(c, i)))
            return node_fail(c, "RuntimeError", "input '%s' is not a CONDITIONING",
                             node_in_name(c, i));
    if (strength == 0.0) { /* ComfyUI returns its inputs as they are */
        for (int i = 0; i < n; i++)
            node_set_output(c, i, value_ref(node_in_at(c, i)));
        return 0;
    }
    if (!(start >= 0.0 && start <= 1.0 && end >= 0.0 && end <= 1.0))
        return node_fail(c, "ValueError", "start_percent and end_percent must be in [0, 1]");
    struct apply_args a = {.net = net, .image = image, .strength = (float)strength, .start = start,
                           .end = end, .to_uncond = to_uncond};
    struct control_map m = {.n = 0};
    struct sd_cond *outs[2] = {NULL, NULL};
    struct err e = {0};
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        rc = apply_to(&a, sd_cond_of(node_in_at(c, i)), &m, &outs[i], &e);
    control_map_release(&m);
    if (rc < 0) {
        sd_cond_free(outs[0]);
        sd_cond_free(outs[1]);
        return node_fail_code(c, rc, "RuntimeError", "%s", e.msg);
    }
    for (int i = 0; i < n; i++)
        node_set_output(c, i, sd_cond_value(outs[i]));
    return 0;
}

enum { APPLY_CONDITIONING, APPLY_CONTROL_NET, APPLY_IMAGE, APPLY_STRENGTH, APPLY_N };
static const struct node_input_def apply_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"},
    {.name = "control_net", .type = "CONTROL_NET"},
    {.name = "image", .type = "IMAGE"},
    {.name = "strength", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0),
     .max = NODE_F(10.0), .step = NODE_F(0.01)},
    NODE_INPUTS_END};
static const struct node_output_def apply_outputs[] = {{.type = "CONDITIONING"},
                                                       NODE_OUTPUTS_END};

static int apply_run(struct node_ctx *c)
{
    static const struct apply_slots at = {
        .n = 1, .net = APPLY_CONTROL_NET, .image = APPLY_IMAGE, .strength = APPLY_STRENGTH};
    return apply_common(c, &at, 0.0, 1.0, 1);
}

const struct node_class sd_controlnet_apply = {
    .name = "ControlNetApply",
    .display_name = "Apply ControlNet (OLD)",
    .category = "conditioning/controlnet",
    .flags = NODE_CLASS_DEPRECATED,
    .inputs = apply_inputs,
    .n_inputs = APPLY_N,
    .outputs = apply_outputs,
    .run = apply_run,
};

enum {
    ADV_POSITIVE, ADV_NEGATIVE, ADV_CONTROL_NET, ADV_IMAGE, ADV_STRENGTH, ADV_START_PERCENT,
    ADV_END_PERCENT, ADV_VAE, ADV_N
};
static const struct node_input_def advanced_inputs[] = {
    {.name = "positive", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"},
    {.name = "control_net", .type = "CONTROL_NET"},
    {.name = "image", .type = "IMAGE"},
    {.name = "strength", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0),
     .max = NODE_F(10.0), .step = NODE_F(0.01)},
    {.name = "start_percent", .type = "FLOAT", .def = NODE_F(0.0), .min = NODE_F(0.0),
     .max = NODE_F(1.0), .step = NODE_F(0.001)},
    {.name = "end_percent", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0),
     .max = NODE_F(1.0), .step = NODE_F(0.001)},
    /* Classic ControlNets take the hint in pixels: the VAE is for latent-space ones
     * (SD3, Flux ...), which we do not load; accepted and unused. */
    {.name = "vae", .type = "VAE", .group = NODE_INPUT_OPTIONAL},
    NODE_INPUTS_END};
static const struct node_output_def advanced_outputs[] = {
    {.type = "CONDITIONING", .name = "positive"},
    {.type = "CONDITIONING", .name = "negative"},
    NODE_OUTPUTS_END};

static int advanced_run(struct node_ctx *c)
{
    static const struct apply_slots at = {
        .n = 2, .net = ADV_CONTROL_NET, .image = ADV_IMAGE, .strength = ADV_STRENGTH};
    return apply_common(c, &at, node_in_float_at(c, ADV_START_PERCENT),
                        node_in_float_at(c, ADV_END_PERCENT), 0);
}

const struct node_class sd_controlnet_apply_advanced = {
    .name = "ControlNetApplyAdvanced",
    .display_name = "Apply ControlNet",
    .category = "conditioning/controlnet",
    .inputs = advanced_inputs,
    .n_inputs = ADV_N,
    .outputs = advanced_outputs,
    .run = advanced_run,
};

/* ---- SetUnionControlNetType ---- */

enum { UNION_CONTROL_NET, UNION_TYPE, UNION_N };

static int union_type_run(struct node_ctx *c)
{
    const struct sd_cnet *net = sd_cnet_of(node_in_at(c, UNION_CONTROL_NET));
    const char *type = node_in_str_at(c, UNION_TYPE);
    if (!net)
        return node_fail(c, "RuntimeError", "input 'control_net' is not a CONTROL_NET");
    int n = -1; /* UNION_CONTROLNET_TYPES.get(type, -1): "auto" and anything else: none */
    for (int i = 0; i < CONTROLNET_UNION_TYPES; i++)
        if (type && strcmp(type, controlnet_union_type_names[i]) == 0)
            n = i;
    /* control_net.copy() with control_type set: the model is shared */
    struct sd_cnet *copy = sd_cnet_new(net->cn, net->t2i, net->lora, n);
    copy->global_average_pooling = net->global_average_pooling;
    node_set_output(c, 0, sd_cnet_value(copy));
    return 0;
}

static const struct node_input_def union_type_inputs[] = {
    {.name = "control_net", .type = "CONTROL_NET"},
    {.name = "type", .type = NODE_COMBO, .options = controlnet_union_type_options},
    NODE_INPUTS_END};

const struct node_class sd_set_union_controlnet_type = {
    .name = "SetUnionControlNetType",
    .display_name = "SetUnionControlNetType",
    .category = "conditioning/controlnet",
    .python_module = "comfy_extras.nodes_controlnet",
    .inputs = union_type_inputs,
    .n_inputs = UNION_N,
    .outputs = cn_outputs,
    .run = union_type_run,
};
