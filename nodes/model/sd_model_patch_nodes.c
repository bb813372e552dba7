/*
 * sd_model_patch_nodes — comfy_extras model patches: RescaleCFG
 * (nodes_model_advanced.py: a sampler_cfg_function, sampling_guide.h),
 * ModelSamplingDiscrete, ModelSamplingContinuousEDM and ModelSamplingContinuousV (the
 * same file: the MODEL's schedule and sampling type, sampling_sched.h) and FreeU /
 * FreeU_V2 (nodes_freelunch.py: a UNet output_block_patch, unet_freeu.h).
 *
 * Each clones the MODEL (sd_model_clone: the same UNet, a new reference) and sets
 * the patch on the clone, so the input MODEL value is unchanged as ComfyUI's
 * model.clone() leaves it.
 */
#include <string.h>

#include "node_registry.h"
#include "sd_backend.h"
#include "sd_extra_nodes.h"
#include "sd_model_patches.h"
#include "sd_types.h"

static const struct node_output_def model_output[] = {{.type = "MODEL"}, NODE_OUTPUTS_END};

/* Every class here takes its MODEL first. */
enum { PATCH_MODEL = 0 };

/* The input MODEL's clone, or NULL after node_fail. */
static struct sd_model *clone_input(struct node_ctx *c)
{
    const struct sd_model *m = sd_model_of(node_in_at(c, PATCH_MODEL));
    if (!m)
        return node_fail(c, "RuntimeError", "input 'model' is not a MODEL"), NULL;
    struct sd_model *m2 = sd_model_clone(m);
    if (!m2)
        node_fail(c, "RuntimeError", "this MODEL cannot be patched (not a checkpoint's UNet)");
    return m2;
}

/* ---- RescaleCFG ---- */

enum { RESCALE_MODEL, RESCALE_MULTIPLIER, RESCALE_N };
static const struct node_input_def rescale_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "multiplier", .type = "FLOAT", .def = NODE_F(0.7), .min = NODE_F(0.0),
     .max = NODE_F(1.0), .step = NODE_F(0.01)},
    NODE_INPUTS_END};

static int rescale_run(struct node_ctx *c)
{
    struct sd_model *m = clone_input(c);
    if (!m)
        return ERR_INVALID;
    /* set_model_sampler_cfg_function replaces any earlier cfg function (PerpNeg's) */
    m->cfg_fn.rescale = 1;
    struct sd_model_patches *mp = sd_model_patches_mut(m);
    if (mp) {
        value_unref(mp->perp_neg_empty);
        mp->perp_neg_empty = NULL;
    }
    m->cfg_fn.multiplier = node_in_float_at(c, RESCALE_MULTIPLIER);
    node_set_output(c, 0, sd_model_value(m));
    return 0;
}

const struct node_class sd_rescale_cfg = {
    .name = "RescaleCFG", .category = "advanced/model",
    .python_module = "comfy_extras.nodes_model_advanced", .inputs = rescale_inputs,
    .n_inputs = RESCALE_N, .outputs = model_output, .run = rescale_run};

/* ---- ModelSamplingDiscrete ---- */

static const char *const sampling_types[] = {"eps", "v_prediction", "lcm", "x0", "img_to_img",
                                             NULL};

enum { MSD_MODEL, MSD_SAMPLING, MSD_ZSNR, MSD_N };
static const struct node_input_def msd_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "sampling", .type = NODE_COMBO, .options = sampling_types},
    {.name = "zsnr", .type = "BOOLEAN", .has_def_bool = 1, .def_bool = 0},
    NODE_INPUTS_END};

/*
 * add_object_patch("model_sampling", ...): the clone gets a new schedule from the
 * family's betas (zsnr-rescaled when asked) and the chosen sampling type, replacing
 * whatever the checkpoint or an earlier patch set; lcm also distils the table to
 * ModelSamplingDiscreteDistilled's 50 entries.
 */
static int msd_run(struct node_ctx *c)
{
    const char *name = node_in_str_at(c, MSD_SAMPLING);
    enum sampling_prediction pred;
    if (sampling_prediction_from_name(name, &pred) < 0)
        return node_fail(c, "RuntimeError",
                         "ModelSamplingDiscrete: sampling '%s' is not supported yet", name);
    struct sd_model *m = clone_input(c);
    if (!m)
        return ERR_INVALID;
    const struct family_sampling *fs = &m->family->sampling;
    sampling_discrete_init_zsnr(&m->ms, fs->linear_start, fs->linear_end,
                                node_in_bool_at(c, MSD_ZSNR));
    if (pred == SAMPLING_PREDICTION_LCM)
        sampling_discrete_distill(&m->ms);
    m->ms.prediction = pred;
    node_set_output(c, 0, sd_model_value(m));
    return 0;
}

const struct node_class sd_model_sampling_discrete = {
    .name = "ModelSamplingDiscrete", .category = "advanced/model",
    .python_module = "comfy_extras.nodes_model_advanced", .inputs = msd_inputs,
    .n_inputs = MSD_N, .outputs = model_output, .run = msd_run};

/* ---- ModelSamplingContinuousEDM, ModelSamplingContinuousV ---- */

#define SIGMA_INPUT(nm, d)                                                                    \
    {.name = nm, .type = "FLOAT", .def = NODE_F(d), .min = NODE_F(0.0), .max = NODE_F(1000.0), \
     .step = NODE_F(0.001), .round_false = 1}

static const char *const edm_types[] = {"v_prediction", "edm", "edm_playground_v2.5", "eps",
                                        "cosmos_rflow", NULL};
static const char *const cv_types[] = {"v_prediction", NULL};

/* EDM and V declare the same inputs in the same order. */
enum { CONT_MODEL, CONT_SAMPLING, CONT_SIGMA_MAX, CONT_SIGMA_MIN, CONT_N };
static const struct node_input_def edm_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "sampling", .type = NODE_COMBO, .options = edm_types},
    SIGMA_INPUT("sigma_max", 120.0),
    SIGMA_INPUT("sigma_min", 0.002),
    NODE_INPUTS_END};

static const struct node_input_def cv_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "sampling", .type = NODE_COMBO, .options = cv_types},
    SIGMA_INPUT("sigma_max", 500.0),
    SIGMA_INPUT("sigma_min", 0.03),
    NODE_INPUTS_END};

/*
 * set_parameters(sigma_min, sigma_max, sigma_data) on a continuous model sampling of
 * `kind`. edm uses sigma_data 0.5; edm_playground_v2.5 (which also swaps the latent
 * format) and cosmos_rflow (another sampling base) are not supported yet.
 */
static int continuous_patch(struct node_ctx *c, enum sampling_time kind)
{
    const char *name = node_in_str_at(c, CONT_SAMPLING);
    double smax = node_in_float_at(c, CONT_SIGMA_MAX), smin = node_in_float_at(c, CONT_SIGMA_MIN);
    enum sampling_prediction pred;
    if (strcmp(name, "edm_playground_v2.5") == 0 || strcmp(name, "cosmos_rflow") == 0 ||
        sampling_prediction_from_name(name, &pred) < 0)
        return node_fail(c, "RuntimeError", "%s: sampling '%s' is not supported yet",
                         c->cls->name, name);
    if (!(smin > 0.0) || !(smax > smin))
        return node_fail(c, "ValueError",
                         "%s: sigma_min (%g) must be above 0 and below sigma_max (%g)",
                         c->cls->name, smin, smax);
    struct sd_model *m = clone_input(c);
    if (!m)
        return ERR_INVALID;
    sampling_continuous_init(&m->ms, kind, smin, smax,
                             pred == SAMPLING_PREDICTION_EDM ? 0.5 : 1.0);
    m->ms.prediction = pred;
    node_set_output(c, 0, sd_model_value(m));
    return 0;
}

static int edm_run(struct node_ctx *c)
{
    return continuous_patch(c, SAMPLING_TIME_EDM);
}

static int cv_run(struct node_ctx *c)
{
    return continuous_patch(c, SAMPLING_TIME_V);
}

const struct node_class sd_model_sampling_continuous_edm = {
    .name = "ModelSamplingContinuousEDM", .category = "advanced/model",
    .python_module = "comfy_extras.nodes_model_advanced", .inputs = edm_inputs,
    .n_inputs = CONT_N, .outputs = model_output, .run = edm_run};
const struct node_class sd_model_sampling_continuous_v = {
    .name = "ModelSamplingContinuousV", .category = "advanced/model",
    .python_module = "comfy_extras.nodes_model_advanced", .inputs = cv_inputs,
    .n_inputs = CONT_N, .outputs = model_output, .run = cv_run};

/* ---- FreeU, FreeU_V2 ---- */

enum { FREEU_MODEL, FREEU_B1, FREEU_B2, FREEU_S1, FREEU_S2, FREEU_N };
#define FREEU_INPUTS(b1, b2)                                                                  \
    {                                                                                         \
        {.name = "model", .type = "MODEL"},                                                   \
        {.name = "b1", .type = "FLOAT", .def = NODE_F(b1), .min = NODE_F(0.0),                \
         .max = NODE_F(10.0), .step = NODE_F(0.01)},                                          \
        {.name = "b2", .type = "FLOAT", .def = NODE_F(b2), .min = NODE_F(0.0),                \
         .max = NODE_F(10.0), .step = NODE_F(0.01)},                                          \
        {.name = "s1", .type = "FLOAT", .def = NODE_F(0.9), .min = NODE_F(0.0),               \
         .max = NODE_F(10.0), .step = NODE_F(0.01)},                                          \
        {.name = "s2", .type = "FLOAT", .def = NODE_F(0.2), .min = NODE_F(0.0),               \
         .max = NODE_F(10.0), .step = NODE_F(0.01)},                                          \
        NODE_INPUTS_END                                                                       \
    }

static const struct node_input_def freeu_inputs[] = FREEU_INPUTS(1.1, 1.2);
static const struct node_input_def freeu_v2_inputs[] = FREEU_INPUTS(1.3, 1.4);

static int freeu_patch(struct node_ctx *c, int v2)
{
    struct sd_model *m = clone_input(c);
    if (!m)
        return ERR_INVALID;
    struct model_config cfg;
    sd_model_unet_patcher(m, &cfg);
    struct unet_freeu f = {.v2 = v2, .model_ch = cfg.unet.model_ch,
                           .b1 = node_in_float_at(c, FREEU_B1),
                           .b2 = node_in_float_at(c, FREEU_B2),
                           .s1 = node_in_float_at(c, FREEU_S1),
                           .s2 = node_in_float_at(c, FREEU_S2)};
    if (sd_model_set_freeu(m, &f) < 0) {
        sd_model_free(m);
        return node_fail(c, "RuntimeError", "too many FreeU patches on one MODEL (at most %d)",
                         SD_MODEL_MAX_FREEU);
    }
    node_set_output(c, 0, sd_model_value(m));
    return 0;
}

static int freeu_run(struct node_ctx *c)
{
    return freeu_patch(c, 0);
}

static int freeu_v2_run(struct node_ctx *c)
{
    return freeu_patch(c, 1);
}

const struct node_class sd_freeu = {
    .name = "FreeU", .category = "model_patches/unet",
    .python_module = "comfy_extras.nodes_freelunch", .inputs = freeu_inputs,
    .n_inputs = FREEU_N, .outputs = model_output, .run = freeu_run};
const struct node_class sd_freeu_v2 = {
    .name = "FreeU_V2", .category = "model_patches/unet",
    .python_module = "comfy_extras.nodes_freelunch", .inputs = freeu_v2_inputs,
    .n_inputs = FREEU_N, .outputs = model_output, .run = freeu_v2_run};
