/*
 * sd_ksampler — KSampler and KSamplerAdvanced (comfy-api.md §7.3, sd15.md
 * §5.3–§5.6, §7): ComfyUI's common_ksampler over models/sampling.
 *
 * The denoiser given to the sampler runs the MODEL's epsilon backend for the
 * positive entries and, unless cfg is 1, the negative ones, batched into as
 * few calls as the token counts and the model's max_batch allow (cond and
 * uncond in one call when their token counts match), turns eps into x0,
 * averages each side's entries by strength and mixes them with CFG.
 * Each step reports progress (step + 1 of the steps actually run) with a
 * Latent2RGB preview of x0, and stops on /interrupt.
 */
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "node_registry.h"
#include "sampling.h"
#include "sampling_preview.h"
#include "sampling_sched.h"
#include "sd_nodes.h"
#include "sd_types.h"

/* Exactly the implemented subset, in ComfyUI's order (tests compare with models/sampling). */
static const char *const sampler_options[] = {
    "euler", "euler_ancestral", "heun", "dpm_2", "dpm_2_ancestral", "lms",
    "dpmpp_2s_ancestral", "dpmpp_sde", "dpmpp_sde_gpu", "dpmpp_2m", "dpmpp_2m_sde",
    "dpmpp_2m_sde_gpu", "dpmpp_2m_sde_heun", "dpmpp_2m_sde_heun_gpu", "lcm", "ddim", NULL};
static const char *const scheduler_options[] = {
    "simple", "sgm_uniform", "karras", "exponential", "ddim_uniform", "beta", "normal",
    "linear_quadratic", "kl_optimal", NULL};

/* One evaluation job: a conditioning entry on one side of CFG. */
struct job {
    const struct sd_cond_entry *entry;
    int negative;
};

struct kctx {
    struct node_ctx *node;
    const struct sd_model *model;
    struct job *jobs;
    int n_jobs, n_pos;
    double cfg;
    int batch, h, w;
    size_t per;      /* floats per sample: 4·h·w */
    float *x_in;     /* [batch · per] */
    float *x;        /* [batch · per] copy of the state being denoised */
    float *pos, *neg;
    struct err err;
    int preview;
};

/* context for sample k of a batch from an entry (repeat_to_batch_size semantics) */
static const float *entry_context(const struct sd_cond_entry *e, int k)
{
    return e->cond + (size_t)(k % e->batch) * e->tokens * e->dim;
}

/*
 * Run the jobs idx[0..count) (same token count and width) in batched calls
 * of at most max_batch samples, writing job idx[q]'s x0 into outs[q]
 * (batch · per floats each).
 */
static int run_group(struct kctx *k, const int *idx, int count, float sigma, float **outs)
{
    const struct sd_model *m = k->model;
    int tokens = k->jobs[idx[0]].entry->tokens, dim = k->jobs[idx[0]].entry->dim;
    int total = count * k->batch;
    int chunk = m->max_batch > 0 ? m->max_batch : total;
    float t = (float)sampling_discrete_timestep(&m->ms, sigma);
    size_t ctx_per = (size_t)tokens * dim;
    float *xin = xmalloc((size_t)chunk * k->per * sizeof *xin);
    float *ctx = xmalloc((size_t)chunk * ctx_per * sizeof *ctx);
    float *eps = xmalloc((size_t)chunk * k->per * sizeof *eps);
    float *ts = xmalloc((size_t)chunk * sizeof *ts);
    int rc = 0;
    for (int s0 = 0; s0 < total && rc == 0; s0 += chunk) {
        int nb = total - s0 < chunk ? total - s0 : chunk;
        for (int i = 0; i < nb; i++) {
            int g = s0 + i, job = idx[g / k->batch], smp = g % k->batch;
            memcpy(xin + (size_t)i * k->per, k->x_in + (size_t)smp * k->per,
                   k->per * sizeof *xin);
            memcpy(ctx + (size_t)i * ctx_per, entry_context(k->jobs[job].entry, smp),
                   ctx_per * sizeof *ctx);
            ts[i] = t;
        }
        rc = m->ops->apply_eps(m->impl, xin, nb, k->h, k->w, ts, ctx, tokens, dim, eps,
                               &k->err);
        if (rc < 0)
            break;
        for (int i = 0; i < nb; i++) {
            int g = s0 + i, smp = g % k->batch;
            /* x0 = x − eps·σ on the state x (EPS.calculate_denoised). */
            float *o = outs[g / k->batch] + (size_t)smp * k->per;
            const float *e = eps + (size_t)i * k->per;
            const float *xs = k->x + (size_t)smp * k->per;
            for (size_t p = 0; p < k->per; p++)
                o[p] = xs[p] - e[p] * sigma;
        }
    }
    xfree(xin);
    xfree(ctx);
    xfree(eps);
    xfree(ts);
    return rc;
}

static int denoise(void *user, const float *x, float sigma, float *out, size_t n)
{
    struct kctx *k = user;
    sampling_scale_input(x, sigma, k->x_in, n);
    memcpy(k->x, x, n * sizeof *x);
    float **outs = xmalloc((size_t)k->n_jobs * sizeof *outs);
    int *done = xcalloc((size_t)k->n_jobs, sizeof *done);
    int *idx = xmalloc((size_t)k->n_jobs * sizeof *idx);
    int rc = 0;
    for (int j = 0; j < k->n_jobs; j++)
        outs[j] = xmalloc(n * sizeof **outs);
    /* Group jobs by (tokens, dim): each group is one batched model call (or chunks). */
    for (int j = 0; j < k->n_jobs && rc == 0; j++) {
        if (done[j])
            continue;
        int cnt = 0;
        float **gouts = xmalloc((size_t)k->n_jobs * sizeof *gouts);
        for (int q = j; q < k->n_jobs; q++) {
            if (!done[q] && k->jobs[q].entry->tokens == k->jobs[j].entry->tokens &&
                k->jobs[q].entry->dim == k->jobs[j].entry->dim) {
                done[q] = 1;
                gouts[cnt] = outs[q];
                idx[cnt++] = q;
            }
        }
        rc = run_group(k, idx, cnt, sigma, gouts);
        xfree(gouts);
    }
    if (rc == 0) {
        /* Each side: Σ strength·x0 / Σ strength (ComfyUI's out_cond / out_count). */
        for (int side = 0; side < 2; side++) {
            float *acc = side ? k->neg : k->pos;
            float count = 0.0f;
            int any = 0;
            for (int j = 0; j < k->n_jobs; j++) {
                if (k->jobs[j].negative != side)
                    continue;
                float s = k->jobs[j].entry->strength;
                for (size_t p = 0; p < n; p++)
                    acc[p] = (any ? acc[p] : 0.0f) + outs[j][p] * s;
                count += s;
                any = 1;
            }
            if (any)
                for (size_t p = 0; p < n; p++)
                    acc[p] = acc[p] / count;
        }
        if (k->n_jobs == k->n_pos)
            memcpy(out, k->pos, n * sizeof *out);
        else
            sampling_cfg_combine(k->pos, k->neg, k->cfg, out, n);
    }
    for (int j = 0; j < k->n_jobs; j++)
        xfree(outs[j]);
    xfree(outs);
    xfree(done);
    xfree(idx);
    return rc;
}

static int on_step(void *user, int step, int total, const float *x0, const float *x, size_t n)
{
    struct kctx *k = user;
    uint8_t *rgb = NULL;
    int pw = 0, ph = 0;
    if (k->preview)
        sampling_preview_make(x0, k->h, k->w, k->node->env->preview_size, &rgb, &pw, &ph, NULL);
    int rc = node_progress(k->node, step + 1, total, rgb, pw, ph);
    xfree(rgb);
    return rc < 0 || node_interrupted(k->node);
}

static int add_jobs(struct kctx *k, const struct sd_cond *cond, int negative, int cap)
{
    for (int i = 0; i < cond->n; i++) {
        if (k->n_jobs >= cap)
            return -1;
        k->jobs[k->n_jobs].entry = &cond->entries[i];
        k->jobs[k->n_jobs].negative = negative;
        k->n_jobs++;
    }
    return 0;
}

struct ksampler_args {
    uint64_t seed;
    int steps;
    double cfg;
    const char *sampler_name, *scheduler;
    double denoise;
    int disable_noise;
    int start_step, last_step; /* -1 = none */
    int force_full_denoise;
};

/* ComfyUI's common_ksampler. */
static int common_ksampler(struct node_ctx *c, const struct ksampler_args *a)
{
    const struct sd_model *model = sd_model_of(node_in(c, "model"));
    const struct sd_cond *pos = sd_cond_of(node_in(c, "positive"));
    const struct sd_cond *neg = sd_cond_of(node_in(c, "negative"));
    const struct sd_latent *lat = sd_latent_of(node_in(c, "latent_image"));
    if (!model || !model->ops || !model->ops->apply_eps)
        return node_fail(c, "RuntimeError", "input 'model' is not a MODEL");
    if (!pos || !neg || pos->n < 1 || neg->n < 1)
        return node_fail(c, "RuntimeError", "conditioning is missing or empty");
    if (!lat)
        return node_fail(c, "RuntimeError", "input 'latent_image' is not a LATENT");
    if (lat->c != 4)
        return node_fail(c, "RuntimeError",
                         "the latent has %lld channels; SD1.5 models expect 4", (long long)lat->c);
    enum sampling_sampler smp;
    enum sampling_scheduler sch;
    if (sampling_sampler_from_name(a->sampler_name, &smp) < 0)
        return node_fail(c, "ValueError", "sampler '%s' is not supported", a->sampler_name);
    if (sampling_scheduler_from_name(a->scheduler, &sch) < 0)
        return node_fail(c, "ValueError", "scheduler '%s' is not supported", a->scheduler);

    struct err e = {0};
    float *sigmas = NULL, *noise = NULL, *mask = NULL;
    int n_sigmas = 0, rc;
    size_t per = (size_t)(4 * lat->h * lat->w), n = per * (size_t)lat->b;
    struct kctx k = {.node = c, .model = model, .cfg = a->cfg, .batch = (int)lat->b,
                     .h = (int)lat->h, .w = (int)lat->w, .per = per};
    struct sd_latent *out = NULL;

    if ((rc = sampling_sigmas_for_ksampler(&model->ms, sch,
                                           sampling_sampler_discards_penultimate(smp), a->steps,
                                           a->denoise, a->start_step, a->last_step,
                                           a->force_full_denoise, &sigmas, &n_sigmas, &e)) < 0)
        goto fail;
    noise = xcalloc(n, sizeof *noise);
    if (!a->disable_noise &&
        (rc = sampling_prepare_noise(a->seed, lat->batch_index, lat->n_batch_index,
                                     (int)lat->b, per, SAMPLING_RANDN_V2, noise, &e)) < 0)
        goto fail;
    if (lat->noise_mask) {
        mask = xmalloc(n * sizeof *mask);
        if ((rc = sampling_mask_prepare(lat->noise_mask, (int)lat->mb, (int)lat->mh,
                                        (int)lat->mw, (int)lat->b, 4, (int)lat->h, (int)lat->w,
                                        mask, &e)) < 0)
            goto fail;
    }
    int cap = pos->n + neg->n;
    k.jobs = xmalloc((size_t)cap * sizeof *k.jobs);
    add_jobs(&k, pos, 0, cap);
    k.n_pos = k.n_jobs;
    if (!sampling_cfg_is_one(a->cfg))
        add_jobs(&k, neg, 1, cap);
    for (int j = 0; j < k.n_jobs; j++) {
        if (k.jobs[j].entry->batch < 1 || k.jobs[j].entry->tokens < 1) {
            rc = err_set(&e, ERR_INVALID, "empty conditioning entry");
            goto fail;
        }
    }
    k.x_in = xmalloc(n * sizeof *k.x_in);
    k.x = xmalloc(n * sizeof *k.x);
    k.pos = xmalloc(n * sizeof *k.pos);
    k.neg = xmalloc(n * sizeof *k.neg);
    k.preview = c->env && c->env->preview_size > 0 && c->hooks && c->hooks->progress;

    out = sd_latent_new_like(lat, lat->b, lat->c, lat->h, lat->w);
    struct sampling_request req = {
        .sampler = smp, .sigmas = sigmas, .n_sigmas = n_sigmas, .noise = noise,
        .seed = a->seed, .variant = SAMPLING_RANDN_V2, .noise_mask = mask,
        .sigma_max = model->ms.sigma_max, .denoise = denoise, .denoise_user = &k,
        .step = on_step, .step_user = &k};
    rc = sampling_sample_latent(&req, lat->samples, out->samples, n, &e);
    if (rc < 0 && k.err.code != 0)
        e = k.err; /* the model's own message is the useful one */
    if (rc < 0)
        goto fail;
    node_set_output(c, 0, sd_latent_value(out));
    out = NULL;
fail:
    sd_latent_free(out);
    xfree(k.jobs);
    xfree(k.x_in);
    xfree(k.x);
    xfree(k.pos);
    xfree(k.neg);
    xfree(mask);
    xfree(noise);
    xfree(sigmas);
    if (rc == ERR_INTERRUPTED)
        return node_fail_code(c, ERR_INTERRUPTED, "InterruptProcessingException",
                              "processing interrupted");
    if (rc == ERR_DEVICE_OOM)
        return node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
    if (rc < 0)
        return node_fail_code(c, rc, "RuntimeError", "%s", e.msg[0] ? e.msg : err_str(rc));
    return 0;
}

/* ---- KSampler ---- */

static const struct node_input_def ksampler_inputs[] = {
    {.name = "model", .type = "MODEL", .tooltip = "The model used for denoising the input latent."},
    {.name = "seed", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_U64_MAX,
     .control_after_generate = 1,
     .tooltip = "The random seed used for creating the noise."},
    {.name = "steps", .type = "INT", .def = NODE_I(20), .min = NODE_I(1), .max = NODE_I(10000),
     .tooltip = "The number of steps used in the denoising process."},
    {.name = "cfg", .type = "FLOAT", .def = NODE_F(8.0), .min = NODE_F(0.0), .max = NODE_F(100.0),
     .step = NODE_F(0.1), .round = NODE_F(0.01),
     .tooltip = "The Classifier-Free Guidance scale balances creativity and adherence to the "
                "prompt."},
    {.name = "sampler_name", .type = NODE_COMBO, .options = sampler_options,
     .tooltip = "The algorithm used when sampling."},
    {.name = "scheduler", .type = NODE_COMBO, .options = scheduler_options,
     .tooltip = "The scheduler controls how noise is gradually removed to form the image."},
    {.name = "positive", .type = "CONDITIONING",
     .tooltip = "The conditioning describing the attributes you want to include in the image."},
    {.name = "negative", .type = "CONDITIONING",
     .tooltip = "The conditioning describing the attributes you want to exclude from the image."},
    {.name = "latent_image", .type = "LATENT", .tooltip = "The latent image to denoise."},
    {.name = "denoise", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0),
     .max = NODE_F(1.0), .step = NODE_F(0.01),
     .tooltip = "The amount of denoising applied."},
    NODE_INPUTS_END};
static const struct node_output_def ksampler_outputs[] = {
    {.type = "LATENT", .tooltip = "The denoised latent."}, NODE_OUTPUTS_END};

static int ksampler_run(struct node_ctx *c)
{
    struct ksampler_args a = {
        .seed = value_u64(node_in(c, "seed")),
        .steps = (int)node_in_int(c, "steps"),
        .cfg = node_in_float(c, "cfg"),
        .sampler_name = node_in_str(c, "sampler_name"),
        .scheduler = node_in_str(c, "scheduler"),
        .denoise = node_in_float(c, "denoise"),
        .start_step = -1,
        .last_step = -1,
    };
    return common_ksampler(c, &a);
}

const struct node_class sd_ksampler = {
    .name = "KSampler",
    .display_name = "KSampler",
    .description = "Uses the provided model, positive and negative conditioning to denoise the "
                   "latent image.",
    .category = "sampling",
    .inputs = ksampler_inputs,
    .outputs = ksampler_outputs,
    .run = ksampler_run,
};

/* ---- KSamplerAdvanced ---- */

static const char *const enable_disable[] = {"enable", "disable", NULL};
static const char *const disable_enable[] = {"disable", "enable", NULL};

static const struct node_input_def advanced_inputs[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "add_noise", .type = NODE_COMBO, .options = enable_disable},
    {.name = "noise_seed", .type = "INT", .def = NODE_I(0), .min = NODE_I(0),
     .max = NODE_U64_MAX, .control_after_generate = 1},
    {.name = "steps", .type = "INT", .def = NODE_I(20), .min = NODE_I(1), .max = NODE_I(10000)},
    {.name = "cfg", .type = "FLOAT", .def = NODE_F(8.0), .min = NODE_F(0.0), .max = NODE_F(100.0),
     .step = NODE_F(0.1), .round = NODE_F(0.01)},
    {.name = "sampler_name", .type = NODE_COMBO, .options = sampler_options},
    {.name = "scheduler", .type = NODE_COMBO, .options = scheduler_options},
    {.name = "positive", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"},
    {.name = "latent_image", .type = "LATENT"},
    {.name = "start_at_step", .type = "INT", .def = NODE_I(0), .min = NODE_I(0),
     .max = NODE_I(10000)},
    {.name = "end_at_step", .type = "INT", .def = NODE_I(10000), .min = NODE_I(0),
     .max = NODE_I(10000)},
    {.name = "return_with_leftover_noise", .type = NODE_COMBO, .options = disable_enable},
    NODE_INPUTS_END};
static const struct node_output_def advanced_outputs[] = {{.type = "LATENT"}, NODE_OUTPUTS_END};

static int advanced_run(struct node_ctx *c)
{
    struct ksampler_args a = {
        .seed = value_u64(node_in(c, "noise_seed")),
        .steps = (int)node_in_int(c, "steps"),
        .cfg = node_in_float(c, "cfg"),
        .sampler_name = node_in_str(c, "sampler_name"),
        .scheduler = node_in_str(c, "scheduler"),
        .denoise = 1.0,
        .disable_noise = strcmp(node_in_str(c, "add_noise"), "disable") == 0,
        .start_step = (int)node_in_int(c, "start_at_step"),
        .last_step = (int)node_in_int(c, "end_at_step"),
        .force_full_denoise = strcmp(node_in_str(c, "return_with_leftover_noise"), "enable") != 0,
    };
    return common_ksampler(c, &a);
}

const struct node_class sd_ksampler_advanced = {
    .name = "KSamplerAdvanced",
    .display_name = "KSampler (Advanced)",
    .category = "sampling",
    .inputs = advanced_inputs,
    .outputs = advanced_outputs,
    .run = advanced_run,
};
