/*
 * The Sampler* option nodes of comfy_extras/nodes_custom_sampler.py:
 * SamplerEulerAncestral, SamplerLMS, SamplerDPMPP_3M_SDE, SamplerDPMPP_2M_SDE,
 * SamplerDPMPP_SDE, SamplerDPMPP_2S_Ancestral. Each makes a SAMPLER carrying its
 * options (models/sampling's struct sampling_options), which SamplerCustom and
 * SamplerCustomAdvanced pass to the sampler. noise_device "gpu" picks the *_gpu
 * sampler, as ComfyUI does (the same numbers here: our per-step noise is drawn on
 * the CPU either way). SamplerEulerAncestralCFGPP ("SamplerEulerAncestralCFG++")
 * makes euler_ancestral_cfg_pp, whose denoiser also hands back the unconditional
 * prediction (sampling_run.uncond_x0).
 */
#include <string.h>

#include "node_registry.h"
#include "sd_custom_nodes.h"
#include "sd_custom_types.h"

#define MODULE "comfy_extras.nodes_custom_sampler"
#define CATEGORY "sampling/custom_sampling/samplers"

static const char *const noise_devices[] = {"gpu", "cpu", NULL};
static const char *const solver_types[] = {"midpoint", "heun", NULL};

#define OPT_FLOAT(n, d)                                                                           \
    {.name = n, .type = "FLOAT", .def = NODE_F(d), .min = NODE_F(0.0), .max = NODE_F(100.0),     \
     .step = NODE_F(0.01), .round_false = 1}
#define ETA OPT_FLOAT("eta", 1.0)
#define S_NOISE OPT_FLOAT("s_noise", 1.0)
#define NOISE_DEVICE {.name = "noise_device", .type = NODE_COMBO, .options = noise_devices}

enum { ETA_NOISE_ETA, ETA_NOISE_S_NOISE, ETA_NOISE_N };
static const struct node_input_def eta_noise_in[] = {ETA, S_NOISE, NODE_INPUTS_END};
enum { LMS_ORDER, LMS_N };
static const struct node_input_def lms_in[] = {
    {.name = "order", .type = "INT", .def = NODE_I(4), .min = NODE_I(1), .max = NODE_I(100)},
    NODE_INPUTS_END};
enum { DPMPP_3M_ETA, DPMPP_3M_S_NOISE, DPMPP_3M_NOISE_DEVICE, DPMPP_3M_N };
static const struct node_input_def dpmpp_3m_sde_in[] = {ETA, S_NOISE, NOISE_DEVICE, NODE_INPUTS_END};
enum { DPMPP_2M_SOLVER_TYPE, DPMPP_2M_ETA, DPMPP_2M_S_NOISE, DPMPP_2M_NOISE_DEVICE, DPMPP_2M_N };
static const struct node_input_def dpmpp_2m_sde_in[] = {
    {.name = "solver_type", .type = NODE_COMBO, .options = solver_types}, ETA, S_NOISE, NOISE_DEVICE,
    NODE_INPUTS_END};
enum { DPMPP_SDE_ETA, DPMPP_SDE_S_NOISE, DPMPP_SDE_R, DPMPP_SDE_NOISE_DEVICE, DPMPP_SDE_N };
static const struct node_input_def dpmpp_sde_in[] = {ETA, S_NOISE, OPT_FLOAT("r", 0.5), NOISE_DEVICE,
                                                     NODE_INPUTS_END};
enum { CFG_PP_ETA, CFG_PP_S_NOISE, CFG_PP_N };
static const struct node_input_def cfg_pp_in[] = {
    {.name = "eta", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0), .max = NODE_F(1.0),
     .step = NODE_F(0.01), .round_false = 1},
    {.name = "s_noise", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0), .max = NODE_F(10.0),
     .step = NODE_F(0.01), .round_false = 1},
    NODE_INPUTS_END};

/* Where each option input sits in a sampler's declaration; -1: not declared (the option
 * keeps KSampler's default). */
struct option_inputs {
    int eta, s_noise, r, order, noise_device;
};
static const struct option_inputs eta_noise_opts = {ETA_NOISE_ETA, ETA_NOISE_S_NOISE, -1, -1, -1};
static const struct option_inputs lms_opts = {-1, -1, -1, LMS_ORDER, -1};
static const struct option_inputs dpmpp_3m_opts = {DPMPP_3M_ETA, DPMPP_3M_S_NOISE, -1, -1,
                                                   DPMPP_3M_NOISE_DEVICE};
static const struct option_inputs dpmpp_2m_opts = {DPMPP_2M_ETA, DPMPP_2M_S_NOISE, -1, -1,
                                                   DPMPP_2M_NOISE_DEVICE};
static const struct option_inputs dpmpp_sde_opts = {DPMPP_SDE_ETA, DPMPP_SDE_S_NOISE, DPMPP_SDE_R,
                                                    -1, DPMPP_SDE_NOISE_DEVICE};
static const struct option_inputs cfg_pp_opts = {CFG_PP_ETA, CFG_PP_S_NOISE, -1, -1, -1};

/* Options from the inputs this node has; the rest keep KSampler's defaults. */
static struct sampling_options read_options(struct node_ctx *c, const struct option_inputs *in)
{
    struct sampling_options o = SAMPLING_OPTIONS_DEFAULT;
    if (in->eta >= 0)
        o.eta = node_in_float_at(c, in->eta);
    if (in->s_noise >= 0)
        o.s_noise = node_in_float_at(c, in->s_noise);
    if (in->r >= 0)
        o.r = node_in_float_at(c, in->r);
    if (in->order >= 0)
        o.lms_order = (int)node_in_int_at(c, in->order);
    return o;
}

/* Publish sampler `cpu` (or its _gpu twin when noise_device says "gpu"). */
static int publish(struct node_ctx *c, const struct option_inputs *in, enum sampling_sampler cpu,
                   enum sampling_sampler gpu)
{
    struct sampling_options o = read_options(c, in);
    if (!(o.eta >= 0 && o.s_noise >= 0 && o.r >= 0) || o.lms_order < 1 || o.lms_order > 100)
        return node_fail(c, "ValueError", "sampler options out of range (eta %g, s_noise %g, r %g, order %d)",
                         o.eta, o.s_noise, o.r, o.lms_order);
    if (o.r == 0) /* fac = 1 / (2 * r) */
        return node_fail(c, "ZeroDivisionError", "float division by zero");
    enum sampling_sampler s = cpu;
    if (in->noise_device >= 0 && strcmp(node_in_str_at(c, in->noise_device), "cpu"))
        s = gpu;
    node_set_output(c, 0, sd_sampler_value_opts(s, &o));
    return 0;
}

static int euler_ancestral_run(struct node_ctx *c)
{
    return publish(c, &eta_noise_opts, SAMPLING_SAMPLER_EULER_ANCESTRAL,
                   SAMPLING_SAMPLER_EULER_ANCESTRAL);
}

static int lms_run(struct node_ctx *c)
{
    return publish(c, &lms_opts, SAMPLING_SAMPLER_LMS, SAMPLING_SAMPLER_LMS);
}

static int dpmpp_3m_sde_run(struct node_ctx *c)
{
    return publish(c, &dpmpp_3m_opts, SAMPLING_SAMPLER_DPMPP_3M_SDE,
                   SAMPLING_SAMPLER_DPMPP_3M_SDE_GPU);
}

/* solver_type "heun" is dpmpp_2m_sde_heun's rule (ComfyUI passes it as an option). */
static int dpmpp_2m_sde_run(struct node_ctx *c)
{
    if (!strcmp(node_in_str_at(c, DPMPP_2M_SOLVER_TYPE), "heun"))
        return publish(c, &dpmpp_2m_opts, SAMPLING_SAMPLER_DPMPP_2M_SDE_HEUN,
                       SAMPLING_SAMPLER_DPMPP_2M_SDE_HEUN_GPU);
    return publish(c, &dpmpp_2m_opts, SAMPLING_SAMPLER_DPMPP_2M_SDE,
                   SAMPLING_SAMPLER_DPMPP_2M_SDE_GPU);
}

static int dpmpp_sde_run(struct node_ctx *c)
{
    return publish(c, &dpmpp_sde_opts, SAMPLING_SAMPLER_DPMPP_SDE, SAMPLING_SAMPLER_DPMPP_SDE_GPU);
}

static int dpmpp_2s_ancestral_run(struct node_ctx *c)
{
    return publish(c, &eta_noise_opts, SAMPLING_SAMPLER_DPMPP_2S_ANCESTRAL,
                   SAMPLING_SAMPLER_DPMPP_2S_ANCESTRAL);
}

static const struct node_output_def sampler_out[] = {{.type = "SAMPLER"}, NODE_OUTPUTS_END};

#define SAMPLER_CLASS(var, id, in, n_in, fn)                                                      \
    const struct node_class var = {.name = id, .category = CATEGORY, .python_module = MODULE,     \
                                   .inputs = in, .n_inputs = n_in, .outputs = sampler_out,        \
                                   .run = fn}

SAMPLER_CLASS(sd_sampler_euler_ancestral, "SamplerEulerAncestral", eta_noise_in, ETA_NOISE_N,
              euler_ancestral_run);
SAMPLER_CLASS(sd_sampler_lms, "SamplerLMS", lms_in, LMS_N, lms_run);
SAMPLER_CLASS(sd_sampler_dpmpp_3m_sde, "SamplerDPMPP_3M_SDE", dpmpp_3m_sde_in, DPMPP_3M_N,
              dpmpp_3m_sde_run);
SAMPLER_CLASS(sd_sampler_dpmpp_2m_sde, "SamplerDPMPP_2M_SDE", dpmpp_2m_sde_in, DPMPP_2M_N,
              dpmpp_2m_sde_run);
SAMPLER_CLASS(sd_sampler_dpmpp_sde, "SamplerDPMPP_SDE", dpmpp_sde_in, DPMPP_SDE_N, dpmpp_sde_run);
SAMPLER_CLASS(sd_sampler_dpmpp_2s_ancestral, "SamplerDPMPP_2S_Ancestral", eta_noise_in, ETA_NOISE_N,
              dpmpp_2s_ancestral_run);

/* ---- SamplerEulerAncestralCFGPP ---- */

static int euler_ancestral_cfg_pp_run(struct node_ctx *c)
{
    return publish(c, &cfg_pp_opts, SAMPLING_SAMPLER_EULER_ANCESTRAL_CFG_PP,
                   SAMPLING_SAMPLER_EULER_ANCESTRAL_CFG_PP);
}

const struct node_class sd_sampler_euler_ancestral_cfg_pp = {
    .name = "SamplerEulerAncestralCFGPP", .display_name = "SamplerEulerAncestralCFG++",
    .category = CATEGORY, .python_module = MODULE, .inputs = cfg_pp_in, .n_inputs = CFG_PP_N,
    .outputs = sampler_out, .run = euler_ancestral_cfg_pp_run};
