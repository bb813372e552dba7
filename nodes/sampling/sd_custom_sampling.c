/*
 * sd_custom_sampling — ComfyUI's custom-sampling nodes besides the schedulers:
 * KSamplerSelect, RandomNoise, DisableNoise, BasicGuider, CFGGuider, AddNoise,
 * SamplerCustom and SamplerCustomAdvanced, and the family's registration.
 *
 * SamplerCustom and SamplerCustomAdvanced run sd__sample (sd_sample.h), the
 * code KSampler runs, so equivalent graphs give the same bits. Like ComfyUI's,
 * they return the sampled latent and the last step's x0 prediction
 * ("denoised_output", the sampled latent itself when no step ran).
 */
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "node_registry.h"
#include "sd_custom_nodes.h"
#include "sd_custom_types.h"
#include "sd_sample.h"
#include "sd_types.h"

#define MODULE "comfy_extras.nodes_custom_sampler"

void sd__sampler_options(const struct node_env *env, struct node_strlist *out)
{
    (void)env;
    for (int i = 0; i < SAMPLING_SAMPLER_COUNT; i++)
        node_strlist_add(out, sampling_sampler_name((enum sampling_sampler)i));
}

/* ---- KSamplerSelect ---- */

enum { SELECT_SAMPLER_NAME, SELECT_N };
static const struct node_input_def select_inputs[] = {
    {.name = "sampler_name", .type = NODE_COMBO, .options_fn = sd__sampler_options},
    NODE_INPUTS_END};
static const struct node_output_def sampler_output[] = {{.type = "SAMPLER"}, NODE_OUTPUTS_END};

static int select_run(struct node_ctx *c)
{
    const char *name = node_in_str_at(c, SELECT_SAMPLER_NAME);
    enum sampling_sampler s;
    if (sampling_sampler_from_name(name, &s) < 0)
        return node_fail(c, "ValueError", "sampler '%s' is not supported", name);
    node_set_output(c, 0, sd_sampler_value(s));
    return 0;
}

const struct node_class sd_ksampler_select = {
    .name = "KSamplerSelect", .category = "sampling/custom_sampling/samplers",
    .python_module = MODULE, .inputs = select_inputs, .n_inputs = SELECT_N,
    .outputs = sampler_output, .run = select_run};

/* ---- RandomNoise, DisableNoise ---- */

enum { RANDOM_NOISE_NOISE_SEED, RANDOM_NOISE_N };
static const struct node_input_def random_noise_inputs[] = {
    {.name = "noise_seed", .type = "INT", .def = NODE_I(0), .min = NODE_I(0),
     .max = NODE_U64_MAX, .control_after_generate = 1},
    NODE_INPUTS_END};
static const struct node_output_def noise_output[] = {{.type = "NOISE"}, NODE_OUTPUTS_END};

static int random_noise_run(struct node_ctx *c)
{
    node_set_output(c, 0, sd_noise_value(0, value_u64(node_in_at(c, RANDOM_NOISE_NOISE_SEED))));
    return 0;
}

static int disable_noise_run(struct node_ctx *c)
{
    node_set_output(c, 0, sd_noise_value(1, 0));
    return 0;
}

const struct node_class sd_random_noise = {
    .name = "RandomNoise", .category = "sampling/custom_sampling/noise", .python_module = MODULE,
    .inputs = random_noise_inputs, .n_inputs = RANDOM_NOISE_N, .outputs = noise_output,
    .run = random_noise_run};
const struct node_class sd_disable_noise = {
    .name = "DisableNoise", .category = "sampling/custom_sampling/noise", .python_module = MODULE,
    .outputs = noise_output, .run = disable_noise_run};

/* ---- BasicGuider, CFGGuider ---- */

static const struct node_output_def guider_output[] = {{.type = "GUIDER"}, NODE_OUTPUTS_END};

int sd__check_guider_inputs(struct node_ctx *c, struct value *model, struct value *pos,
                            struct value *neg)
{
    const struct sd_model *m = sd_model_of(model);
    const struct sd_cond *p = sd_cond_of(pos), *n = sd_cond_of(neg);
    if (!m || !m->ops || !m->ops->apply_eps)
        return node_fail(c, "RuntimeError", "input 'model' is not a MODEL");
    if (!p || p->n < 1 || (neg && (!n || n->n < 1)))
        return node_fail(c, "RuntimeError", "conditioning is missing or empty");
    return 0;
}

enum { BASIC_GUIDER_MODEL, BASIC_GUIDER_CONDITIONING, BASIC_GUIDER_N };
static const struct node_input_def basic_guider_inputs[] = {
    {.name = "model", .type = "MODEL"}, {.name = "conditioning", .type = "CONDITIONING"},
    NODE_INPUTS_END};

static int basic_guider_run(struct node_ctx *c)
{
    struct value *m = node_in_at(c, BASIC_GUIDER_MODEL);
    struct value *p = node_in_at(c, BASIC_GUIDER_CONDITIONING);
    if (sd__check_guider_inputs(c, m, p, NULL) < 0)
        return ERR_INVALID;
    /* Guider_Basic keeps CFGGuider's cfg of 1.0: the positive prediction as is. */
    node_set_output(c, 0, sd_guider_value(m, p, NULL, 1.0));
    return 0;
}

enum { CFG_GUIDER_MODEL, CFG_GUIDER_POSITIVE, CFG_GUIDER_NEGATIVE, CFG_GUIDER_CFG, CFG_GUIDER_N };
static const struct node_input_def cfg_guider_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "positive", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"},
    {.name = "cfg", .type = "FLOAT", .def = NODE_F(8.0), .min = NODE_F(0.0), .max = NODE_F(100.0),
     .step = NODE_F(0.1), .round = NODE_F(0.01)},
    NODE_INPUTS_END};

static int cfg_guider_run(struct node_ctx *c)
{
    struct value *m = node_in_at(c, CFG_GUIDER_MODEL), *p = node_in_at(c, CFG_GUIDER_POSITIVE);
    struct value *n = node_in_at(c, CFG_GUIDER_NEGATIVE);
    if (sd__check_guider_inputs(c, m, p, n) < 0)
        return ERR_INVALID;
    node_set_output(c, 0, sd_guider_value(m, p, n, node_in_float_at(c, CFG_GUIDER_CFG)));
    return 0;
}

const struct node_class sd_basic_guider = {
    .name = "BasicGuider", .category = "sampling/custom_sampling/guiders", .python_module = MODULE,
    .inputs = basic_guider_inputs, .n_inputs = BASIC_GUIDER_N, .outputs = guider_output,
    .run = basic_guider_run};
const struct node_class sd_cfg_guider = {
    .name = "CFGGuider", .category = "sampling/custom_sampling/guiders", .python_module = MODULE,
    .inputs = cfg_guider_inputs, .n_inputs = CFG_GUIDER_N, .outputs = guider_output,
    .run = cfg_guider_run};

/* ---- SamplerCustom, SamplerCustomAdvanced ---- */

static const struct node_output_def custom_outputs[] = {
    {.type = "LATENT", .name = "output"}, {.type = "LATENT", .name = "denoised_output"},
    NODE_OUTPUTS_END};

/* Run the core and publish output and denoised_output (the output again when no step ran). */
static int sample_and_publish(struct node_ctx *c, const struct sd_sample_args *a)
{
    struct sd_latent *out = NULL, *den = NULL;
    int rc = sd__sample(c, a, &out, &den);
    if (rc < 0)
        return rc;
    struct value *ov = sd_latent_value(out);
    node_set_output(c, 0, value_ref(ov));
    node_set_output(c, 1, den ? sd_latent_value(den) : value_ref(ov));
    value_unref(ov);
    return 0;
}

/* The SAMPLER, SIGMAS and LATENT inputs both custom samplers take, at these indices. */
static int common_inputs(struct node_ctx *c, int sampler, int sigmas, int latent_image,
                         struct sd_sample_args *a)
{
    const struct sd_sampler *smp = sd_sampler_of(node_in_at(c, sampler));
    const struct sd_sigmas *sig = sd_sigmas_of(node_in_at(c, sigmas));
    const struct sd_latent *lat = sd_latent_of(node_in_at(c, latent_image));
    if (!smp)
        return node_fail(c, "RuntimeError", "input 'sampler' is not a SAMPLER");
    if (!sig)
        return node_fail(c, "RuntimeError", "input 'sigmas' is not a SIGMAS");
    if (!lat)
        return node_fail(c, "RuntimeError", "input 'latent_image' is not a LATENT");
    a->sampler = smp->sampler;
    a->opts = &smp->opts; /* the SAMPLER value outlives the run: the node holds its input */
    a->sigmas = sig->v;
    a->n_sigmas = sig->n;
    a->latent = lat;
    return 0;
}

enum {
    CUSTOM_MODEL, CUSTOM_ADD_NOISE, CUSTOM_NOISE_SEED, CUSTOM_CFG, CUSTOM_POSITIVE,
    CUSTOM_NEGATIVE, CUSTOM_SAMPLER, CUSTOM_SIGMAS, CUSTOM_LATENT_IMAGE, CUSTOM_N
};
static const struct node_input_def custom_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "add_noise", .type = "BOOLEAN", .def_bool = 1, .has_def_bool = 1},
    {.name = "noise_seed", .type = "INT", .def = NODE_I(0), .min = NODE_I(0),
     .max = NODE_U64_MAX, .control_after_generate = 1},
    {.name = "cfg", .type = "FLOAT", .def = NODE_F(8.0), .min = NODE_F(0.0), .max = NODE_F(100.0),
     .step = NODE_F(0.1), .round = NODE_F(0.01)},
    {.name = "positive", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"},
    {.name = "sampler", .type = "SAMPLER"},
    {.name = "sigmas", .type = "SIGMAS"},
    {.name = "latent_image", .type = "LATENT"},
    NODE_INPUTS_END};

static int custom_run(struct node_ctx *c)
{
    struct value *m = node_in_at(c, CUSTOM_MODEL), *p = node_in_at(c, CUSTOM_POSITIVE);
    struct value *n = node_in_at(c, CUSTOM_NEGATIVE);
    struct sd_sample_args a = {0};
    if (sd__check_guider_inputs(c, m, p, n) < 0 ||
        common_inputs(c, CUSTOM_SAMPLER, CUSTOM_SIGMAS, CUSTOM_LATENT_IMAGE, &a) < 0)
        return ERR_INVALID;
    a.model = sd_model_of(m);
    a.pos = sd_cond_of(p);
    a.neg = sd_cond_of(n);
    a.cfg = node_in_float_at(c, CUSTOM_CFG);
    /* add_noise off: zeros, but the per-step noise keeps noise_seed (sample_custom's seed). */
    a.disable_noise = !node_in_bool_at(c, CUSTOM_ADD_NOISE);
    a.seed = value_u64(node_in_at(c, CUSTOM_NOISE_SEED));
    return sample_and_publish(c, &a);
}

const struct node_class sd_sampler_custom = {
    .name = "SamplerCustom", .category = "sampling/custom_sampling", .python_module = MODULE,
    .inputs = custom_inputs, .n_inputs = CUSTOM_N, .outputs = custom_outputs, .run = custom_run};

enum {
    ADVANCED_NOISE, ADVANCED_GUIDER, ADVANCED_SAMPLER, ADVANCED_SIGMAS, ADVANCED_LATENT_IMAGE,
    ADVANCED_N
};
static const struct node_input_def advanced_inputs[] = {
    {.name = "noise", .type = "NOISE"},
    {.name = "guider", .type = "GUIDER"},
    {.name = "sampler", .type = "SAMPLER"},
    {.name = "sigmas", .type = "SIGMAS"},
    {.name = "latent_image", .type = "LATENT"},
    NODE_INPUTS_END};

static int advanced_run(struct node_ctx *c)
{
    const struct sd_noise *nz = sd_noise_of(node_in_at(c, ADVANCED_NOISE));
    const struct sd_guider *g = sd_guider_of(node_in_at(c, ADVANCED_GUIDER));
    struct sd_sample_args a = {0};
    if (!nz)
        return node_fail(c, "RuntimeError", "input 'noise' is not a NOISE");
    if (!g)
        return node_fail(c, "RuntimeError", "input 'guider' is not a GUIDER");
    if (common_inputs(c, ADVANCED_SAMPLER, ADVANCED_SIGMAS, ADVANCED_LATENT_IMAGE, &a) < 0)
        return ERR_INVALID;
    a.model = sd_model_of(g->model);
    a.pos = sd_cond_of(g->pos);
    a.neg = g->neg ? sd_cond_of(g->neg) : NULL;
    a.cfg = g->cfg;
    a.guide = g->guide;
    a.third = g->third ? sd_cond_of(g->third) : NULL;
    a.cfg2 = g->cfg2;
    a.nested = g->nested;
    a.neg_scale = g->neg_scale;
    a.disable_noise = nz->disabled;
    a.seed = nz->seed; /* guider.sample(..., seed=noise.seed) */
    return sample_and_publish(c, &a);
}

const struct node_class sd_sampler_custom_advanced = {
    .name = "SamplerCustomAdvanced", .category = "sampling/custom_sampling",
    .python_module = MODULE, .inputs = advanced_inputs, .n_inputs = ADVANCED_N,
    .outputs = custom_outputs, .run = advanced_run};

/* ---- AddNoise ---- */

enum { ADD_NOISE_MODEL, ADD_NOISE_NOISE, ADD_NOISE_SIGMAS, ADD_NOISE_LATENT_IMAGE, ADD_NOISE_N };
static const struct node_input_def add_noise_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "noise", .type = "NOISE"},
    {.name = "sigmas", .type = "SIGMAS"},
    {.name = "latent_image", .type = "LATENT"},
    NODE_INPUTS_END};
static const struct node_output_def latent_output[] = {{.type = "LATENT"}, NODE_OUTPUTS_END};

/*
 * ComfyUI's AddNoise: noise·scale + latent in the model's latent space, scale =
 * |σ0 − σlast| (σ0 for one sigma), back out, NaN/inf as 0. The empty latent
 * is not scaled in (ComfyUI's count_nonzero test); empty sigmas pass it through.
 */
static int add_noise_run(struct node_ctx *c)
{
    const struct sd_noise *nz = sd_noise_of(node_in_at(c, ADD_NOISE_NOISE));
    const struct sd_sigmas *sig = sd_sigmas_of(node_in_at(c, ADD_NOISE_SIGMAS));
    struct value *lv = node_in_at(c, ADD_NOISE_LATENT_IMAGE);
    const struct sd_latent *lat = sd_latent_of(lv);
    const struct sd_model *m = sd_model_of(node_in_at(c, ADD_NOISE_MODEL));
    if (!m || !nz || !sig || !lat)
        return node_fail(c, "RuntimeError", "AddNoise needs a MODEL, NOISE, SIGMAS and LATENT");
    if (sig->n == 0) {
        node_set_output(c, 0, value_ref(lv));
        return 0;
    }
    struct err e = {0};
    struct sd_latent *out = NULL;
    size_t per = (size_t)(lat->c * lat->h * lat->w), n = per * (size_t)lat->b;
    int rc = sd_latent_try_new_like(lat, lat->b, lat->c, lat->h, lat->w, &out, &e);
    if (rc == 0 && !nz->disabled)
        rc = sampling_prepare_noise(nz->seed, lat->batch_index, lat->n_batch_index, (int)lat->b,
                                    per, SAMPLING_RANDN_V2, out->samples, &e);
    if (rc < 0) {
        sd_latent_free(out);
        return node_fail_err(c, rc, &e);
    }
    float scale = sig->n > 1 ? fabsf(sig->v[0] - sig->v[sig->n - 1]) : sig->v[0];
    int nonzero = 0;
    for (size_t i = 0; i < n && !nonzero; i++)
        nonzero = lat->samples[i] != 0.0f;
    for (size_t i = 0; i < n; i++) {
        float l = nonzero ? lat->samples[i] * m->latent->scale_factor : lat->samples[i];
        float v = out->samples[i] * scale;
        v = (v + l) / m->latent->scale_factor;
        out->samples[i] = isfinite(v) ? v : 0.0f;
    }
    node_set_output(c, 0, sd_latent_value(out));
    return 0;
}

const struct node_class sd_add_noise = {
    .name = "AddNoise", .category = "_for_testing/custom_sampling/noise", .python_module = MODULE,
    .inputs = add_noise_inputs, .n_inputs = ADD_NOISE_N, .outputs = latent_output,
    .run = add_noise_run};

/* ---- registration ---- */

/* ComfyUI's NODE_CLASS_MAPPINGS order (nodes_custom_sampler.py), implemented classes only. */
static const struct node_class *const custom_classes[] = {
    &sd_sampler_custom,
    &sd_basic_scheduler,
    &sd_karras_scheduler,
    &sd_exponential_scheduler,
    &sd_polyexponential_scheduler,
    &sd_laplace_scheduler,
    &sd_vp_scheduler,
    &sd_beta_sampling_scheduler,
    &sd_sdturbo_scheduler,
    &sd_ksampler_select,
    &sd_sampler_euler_ancestral,
    &sd_sampler_euler_ancestral_cfg_pp,
    &sd_sampler_lms,
    &sd_sampler_dpmpp_3m_sde,
    &sd_sampler_dpmpp_2m_sde,
    &sd_sampler_dpmpp_sde,
    &sd_sampler_dpmpp_2s_ancestral,
    &sd_split_sigmas,
    &sd_split_sigmas_denoise,
    &sd_flip_sigmas,
    &sd_set_first_sigma,
    &sd_extend_intermediate_sigmas,
    &sd_sampling_percent_to_sigma,
    &sd_cfg_guider,
    &sd_basic_guider,
    &sd_random_noise,
    &sd_disable_noise,
    &sd_add_noise,
    &sd_sampler_custom_advanced,
};

_Static_assert(sizeof custom_classes / sizeof custom_classes[0] == SD_CUSTOM_N_CLASSES,
               "SD_CUSTOM_N_CLASSES is the length of custom_classes");

void nodes_sd_custom_register(struct node_registry *r)
{
    node_registry_add_all(r, custom_classes, SD_CUSTOM_N_CLASSES);
}
