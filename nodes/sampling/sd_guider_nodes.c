/*
 * sd_guider_nodes — the guiders beyond CFGGuider: DualCFGGuider
 * (comfy_extras/nodes_custom_sampler.py, Guider_DualCFG) and PerpNegGuider
 * (comfy_extras/nodes_perpneg.py, Guider_PerpNeg, a V3 node). Each makes a GUIDER
 * value (sd_custom_types.h) that SamplerCustomAdvanced runs through the shared
 * sampling core, which mixes the predictions as the guider's predict_noise does
 * (models/sampling/sampling_guide.h).
 */
#include <string.h>

#include "node_registry.h"
#include "sd_custom_nodes.h"
#include "sd_custom_types.h"
#include "sd_extra_nodes.h"
#include "sd_types.h"

static const struct node_output_def guider_output[] = {{.type = "GUIDER"}, NODE_OUTPUTS_END};

/* ---- DualCFGGuider ---- */

static const char *const dual_styles[] = {"regular", "nested", NULL};

enum {
    DUAL_MODEL, DUAL_COND1, DUAL_COND2, DUAL_NEGATIVE, DUAL_CFG_CONDS, DUAL_CFG_COND2_NEGATIVE,
    DUAL_STYLE, DUAL_N
};
static const struct node_input_def dual_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "cond1", .type = "CONDITIONING"},
    {.name = "cond2", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"},
    {.name = "cfg_conds", .type = "FLOAT", .def = NODE_F(8.0), .min = NODE_F(0.0),
     .max = NODE_F(100.0), .step = NODE_F(0.1), .round = NODE_F(0.01)},
    {.name = "cfg_cond2_negative", .type = "FLOAT", .def = NODE_F(8.0), .min = NODE_F(0.0),
     .max = NODE_F(100.0), .step = NODE_F(0.1), .round = NODE_F(0.01)},
    {.name = "style", .type = NODE_COMBO, .options = dual_styles},
    NODE_INPUTS_END};

static int dual_run(struct node_ctx *c)
{
    struct value *m = node_in_at(c, DUAL_MODEL), *c1 = node_in_at(c, DUAL_COND1);
    struct value *c2 = node_in_at(c, DUAL_COND2), *n = node_in_at(c, DUAL_NEGATIVE);
    if (sd__check_guider_inputs(c, m, c1, n) < 0 || sd__check_guider_inputs(c, m, c2, NULL) < 0)
        return ERR_INVALID;
    const char *style = node_in_str_at(c, DUAL_STYLE);
    struct sd_guider g = {.model = m, .pos = c1, .neg = n, .third = c2,
                          .guide = SD_GUIDE_DUAL_CFG, .cfg = node_in_float_at(c, DUAL_CFG_CONDS),
                          .cfg2 = node_in_float_at(c, DUAL_CFG_COND2_NEGATIVE),
                          .nested = style && strcmp(style, "nested") == 0};
    node_set_output(c, 0, sd_guider_value_full(&g));
    return 0;
}

const struct node_class sd_dual_cfg_guider = {
    .name = "DualCFGGuider", .category = "sampling/custom_sampling/guiders",
    .python_module = "comfy_extras.nodes_custom_sampler", .inputs = dual_inputs, .n_inputs = DUAL_N,
    .outputs = guider_output, .run = dual_run};

/* ---- PerpNegGuider ---- */

enum {
    PERP_MODEL, PERP_POSITIVE, PERP_NEGATIVE, PERP_EMPTY_CONDITIONING, PERP_CFG, PERP_NEG_SCALE,
    PERP_N
};
static const struct node_input_def perp_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "positive", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"},
    {.name = "empty_conditioning", .type = "CONDITIONING"},
    {.name = "cfg", .type = "FLOAT", .def = NODE_F(8.0), .min = NODE_F(0.0), .max = NODE_F(100.0),
     .step = NODE_F(0.1), .round = NODE_F(0.01)},
    {.name = "neg_scale", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0),
     .max = NODE_F(100.0), .step = NODE_F(0.01)},
    NODE_INPUTS_END};

static int perp_run(struct node_ctx *c)
{
    struct value *m = node_in_at(c, PERP_MODEL), *p = node_in_at(c, PERP_POSITIVE);
    struct value *n = node_in_at(c, PERP_NEGATIVE), *em = node_in_at(c, PERP_EMPTY_CONDITIONING);
    if (sd__check_guider_inputs(c, m, p, n) < 0 || sd__check_guider_inputs(c, m, em, NULL) < 0)
        return ERR_INVALID;
    struct sd_guider g = {.model = m, .pos = p, .neg = n, .third = em,
                          .guide = SD_GUIDE_PERP_NEG, .cfg = node_in_float_at(c, PERP_CFG),
                          .neg_scale = node_in_float_at(c, PERP_NEG_SCALE)};
    node_set_output(c, 0, sd_guider_value_full(&g));
    return 0;
}

const struct node_class sd_perp_neg_guider = {
    .name = "PerpNegGuider", .category = "_for_testing",
    .python_module = "comfy_extras.nodes_perpneg", .flags = NODE_CLASS_V3 | NODE_CLASS_EXPERIMENTAL,
    .inputs = perp_inputs, .n_inputs = PERP_N, .outputs = guider_output, .run = perp_run};
