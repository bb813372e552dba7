/*
 * sd_cond_nodes — ConditioningCombine, ConditioningSetArea and
 * ConditioningZeroOut (comfy-api.md §7.3): pure edits of a CONDITIONING
 * (sd_types.h). Inputs are never modified; each node returns a deep copy.
 * The sampler honours what they set (KSampler's calc_cond_batch averaging).
 */
#include <string.h>

#include "node_registry.h"
#include "sd_nodes.h"
#include "sd_types.h"

static const struct node_output_def cond_outputs[] = {{.type = "CONDITIONING"},
                                                      NODE_OUTPUTS_END};

static int cond_input(struct node_ctx *c, const char *name, const struct sd_cond **out)
{
    *out = sd_cond_of(node_in(c, name));
    if (!*out)
        return node_fail(c, "RuntimeError", "input '%s' is not a CONDITIONING", name);
    return 0;
}

/* ---- ConditioningCombine: list concatenation ---- */

static const struct node_input_def combine_inputs[] = {
    {.name = "conditioning_1", .type = "CONDITIONING"},
    {.name = "conditioning_2", .type = "CONDITIONING"},
    NODE_INPUTS_END};

static int combine_run(struct node_ctx *c)
{
    const struct sd_cond *a, *b;
    int rc;
    if ((rc = cond_input(c, "conditioning_1", &a)) < 0 ||
        (rc = cond_input(c, "conditioning_2", &b)) < 0)
        return rc;
    struct sd_cond *out = sd_cond_clone(a);
    sd_cond_append(out, b);
    node_set_output(c, 0, sd_cond_value(out));
    return 0;
}

const struct node_class sd_conditioning_combine = {
    .name = "ConditioningCombine",
    .display_name = "Conditioning (Combine)",
    .category = "conditioning",
    .inputs = combine_inputs,
    .outputs = cond_outputs,
    .run = combine_run,
};

/* ---- ConditioningSetArea ---- */

static const struct node_input_def area_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"},
    {.name = "width", .type = "INT", .def = NODE_I(64), .min = NODE_I(64), .max = NODE_I(16384),
     .step = NODE_I(8)},
    {.name = "height", .type = "INT", .def = NODE_I(64), .min = NODE_I(64), .max = NODE_I(16384),
     .step = NODE_I(8)},
    {.name = "x", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(16384),
     .step = NODE_I(8)},
    {.name = "y", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(16384),
     .step = NODE_I(8)},
    {.name = "strength", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0),
     .max = NODE_F(10.0), .step = NODE_F(0.01)},
    NODE_INPUTS_END};

static int area_run(struct node_ctx *c)
{
    const struct sd_cond *in;
    int rc;
    if ((rc = cond_input(c, "conditioning", &in)) < 0)
        return rc;
    int64_t w = node_in_int(c, "width"), h = node_in_int(c, "height");
    int64_t x = node_in_int(c, "x"), y = node_in_int(c, "y");
    if (w < 0 || h < 0 || x < 0 || y < 0 || w > 16384 || h > 16384 || x > 16384 || y > 16384)
        return node_fail(c, "ValueError", "invalid area %lldx%lld at %lld,%lld", (long long)w,
                         (long long)h, (long long)x, (long long)y);
    struct sd_cond *out = sd_cond_clone(in);
    for (int i = 0; i < out->n; i++) {
        /* area = (h // 8, w // 8, y // 8, x // 8) in latent units; set_area_to_bounds off */
        struct sd_cond_entry *e = &out->entries[i];
        e->has_area = 1;
        e->area_h = (int)(h / 8);
        e->area_w = (int)(w / 8);
        e->area_y = (int)(y / 8);
        e->area_x = (int)(x / 8);
        e->strength = (float)node_in_float(c, "strength");
    }
    node_set_output(c, 0, sd_cond_value(out));
    return 0;
}

const struct node_class sd_conditioning_set_area = {
    .name = "ConditioningSetArea",
    .display_name = "Conditioning (Set Area)",
    .category = "conditioning",
    .inputs = area_inputs,
    .outputs = cond_outputs,
    .run = area_run,
};

/* ---- ConditioningZeroOut ---- */

static const struct node_input_def zero_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"}, NODE_INPUTS_END};

static int zero_run(struct node_ctx *c)
{
    const struct sd_cond *in;
    int rc;
    if ((rc = cond_input(c, "conditioning", &in)) < 0)
        return rc;
    struct sd_cond *out = sd_cond_clone(in);
    for (int i = 0; i < out->n; i++) {
        struct sd_cond_entry *e = &out->entries[i];
        memset(e->cond, 0, (size_t)e->batch * e->tokens * e->dim * sizeof *e->cond);
        if (e->pooled)
            memset(e->pooled, 0, (size_t)e->batch * e->pooled_dim * sizeof *e->pooled);
    }
    node_set_output(c, 0, sd_cond_value(out));
    return 0;
}

const struct node_class sd_conditioning_zero_out = {
    .name = "ConditioningZeroOut",
    .category = "advanced/conditioning",
    .inputs = zero_inputs,
    .outputs = cond_outputs,
    .run = zero_run,
};
