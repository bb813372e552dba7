/*
 * sd_ays_nodes — ComfyUI's AlignYourStepsScheduler
 * (comfy_extras/nodes_align_your_steps.py, a V3 node): the SIGMAS of
 * models/sampling/sampling_ays.h for a model type, step count and denoise.
 */
#include "alloc.h"
#include "node_registry.h"
#include "sampling_ays.h"
#include "sd_extra_nodes.h"
#include "sd_custom_types.h"

static const char *const ays_model_types[] = {"SD1", "SDXL", "SVD", NULL};

enum { AYS_MODEL_TYPE, AYS_STEPS, AYS_DENOISE, AYS_N };
static const struct node_input_def ays_inputs[] = {
    {.name = "model_type", .type = NODE_COMBO, .options = ays_model_types},
    {.name = "steps", .type = "INT", .def = NODE_I(10), .min = NODE_I(1), .max = NODE_I(10000)},
    {.name = "denoise", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0),
     .max = NODE_F(1.0), .step = NODE_F(0.01)},
    NODE_INPUTS_END};
static const struct node_output_def ays_outputs[] = {{.type = "SIGMAS"}, NODE_OUTPUTS_END};

static int ays_run(struct node_ctx *c)
{
    const char *name = node_in_str_at(c, AYS_MODEL_TYPE);
    int steps = (int)node_in_int_at(c, AYS_STEPS);
    enum sampling_ays_model m;
    if (sampling_ays_model_from_name(name, &m) < 0)
        return node_fail(c, "KeyError", "'%s'", name ? name : "");
    if (steps < 1)
        return node_fail(c, "ValueError", "steps must be at least 1");
    float *v = xmalloc((size_t)(steps + 1) * sizeof *v);
    int n = sampling_sigmas_ays(m, steps, node_in_float_at(c, AYS_DENOISE), v);
    node_set_output(c, 0, sd_sigmas_value(sd_sigmas_new(v, n)));
    xfree(v);
    return 0;
}

const struct node_class sd_align_your_steps_scheduler = {
    .name = "AlignYourStepsScheduler", .category = "sampling/custom_sampling/schedulers",
    .python_module = "comfy_extras.nodes_align_your_steps", .flags = NODE_CLASS_V3, .inputs = ays_inputs,
    .n_inputs = AYS_N, .outputs = ays_outputs, .run = ays_run};
