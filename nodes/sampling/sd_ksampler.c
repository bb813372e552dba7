/*
 * sd_ksampler — KSampler and KSamplerAdvanced (comfy-api.md §7.3, sd15.md
 * §5.3–§5.6, §7): ComfyUI's common_ksampler over models/sampling.
 *
 * The denoiser given to the sampler runs the MODEL's epsilon backend for the
 * positive entries and, unless cfg is 1, the negative ones, batched into as
 * few calls as the token counts, area sizes and the model's max_batch allow
 * (cond and uncond in one call when their token counts match), turns eps into
 * x0, averages each side's entries by strength and area feathering as
 * ComfyUI's calc_cond_batch does, and mixes the sides with CFG (the MODEL's RescaleCFG
 * cfg function when patched) or, for the DualCFG and PerpNeg guiders, a third side
 * (cond2 / the empty prompt) as their predict_noise does (guide_combine). The MODEL's
 * attention patches (sd_model_patches.h) add PerpNeg's empty-prompt side to CFG, run
 * SelfAttentionGuidance's post-cfg pass over the negative side, and hand each model call
 * the options HyperTile and SAG read (which samples are uncond, the generator).
 * Each step reports progress (step + 1 of the steps actually run) with a
 * Latent2RGB preview of x0, and stops on /interrupt.
 */
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "node_registry.h"
#include "pynum.h"
#include "resample.h"
#include "sampling.h"
#include "sampling_preview.h"
#include "sampling_sag.h"
#include "sampling_sched.h"
#include "sd_backend.h"
#include "sd_concat.h"
#include "sd_control.h"
#include "sd_gligen.h"
#include "sd_model_patches.h"
#include "sd_nodes.h"
#include "sd_progress.h"
#include "sd_sample.h"
#include "sd_types.h"

/*
 * Latent-sized host buffers one sampling run holds at its peak: noise, mask, x_in,
 * x, acc[3] and the output here, scaled, x and inpaint noise in the pipeline, and up
 * to 15 in the sampler's own state (models/sampling/samplers*.c: 6 shared, 9 more for
 * uni_pc and dpm_*), rounded up.
 */
#define KS_HOST_COPIES 27

/* ComfyUI's SAMPLER_NAMES in its order (tests compare with models/sampling). */
static const char *const sampler_options[] = {
    "euler", "euler_cfg_pp", "euler_ancestral", "euler_ancestral_cfg_pp", "heun", "heunpp2",
    "dpm_2", "dpm_2_ancestral", "lms", "dpm_fast", "dpm_adaptive", "dpmpp_2s_ancestral",
    "dpmpp_2s_ancestral_cfg_pp", "dpmpp_sde", "dpmpp_sde_gpu", "dpmpp_2m", "dpmpp_2m_cfg_pp",
    "dpmpp_2m_sde", "dpmpp_2m_sde_gpu", "dpmpp_2m_sde_heun", "dpmpp_2m_sde_heun_gpu",
    "dpmpp_3m_sde", "dpmpp_3m_sde_gpu", "ddpm", "lcm", "ipndm", "ipndm_v", "deis", "res_multistep",
    "res_multistep_cfg_pp", "res_multistep_ancestral", "res_multistep_ancestral_cfg_pp",
    "gradient_estimation", "gradient_estimation_cfg_pp", "er_sde", "seeds_2", "seeds_3",
    "sa_solver", "sa_solver_pece", "ddim", "uni_pc", "uni_pc_bh2", NULL};
static const char *const scheduler_options[] = {
    "simple", "sgm_uniform", "karras", "exponential", "ddim_uniform", "beta", "normal",
    "linear_quadratic", "kl_optimal", NULL};

/*
 * One evaluation job: a conditioning entry on one side of CFG, with the latent
 * rectangle it sees and its weight there (ComfyUI get_area_and_mult).
 */
struct job {
    const struct sd_cond_entry *entry;
    const struct sd_control *control; /* the entry's, or a positive's (apply_to_uncond) */
    const struct sd_gligen *gligen;   /* the entry's, or a positive's (gligen_to_side) */
    int side;           /* SD_SIDE_*: which prediction it adds to */
    int adm_negative;   /* encoded as a negative prompt (prompt_type; a twin's text source's) */
    int has_area;       /* an area of any kind: pixel, percentage or mask bounds */
    int area[4];        /* that area as resolved (h, w, y, x), before clipping */
    int y0, x0, rh, rw; /* region in latent pixels, clipped to the latent */
    float *mult;        /* owned, [mult_b · rh · rw]: strength with area feathering or mask */
    int mult_b;         /* planes of mult: sample s uses plane s % mult_b */
    int has_range;      /* ConditioningSetTimestepRange: runs while sig_end <= σ <= sig_start */
    float sig_start, sig_end;
    int active;         /* takes part in the current model evaluation */
    float *concat;      /* owned or NULL: c_concat [batch, cc, h, w] (sd_concat.h) */
};

struct kctx {
    struct node_ctx *node;
    const struct sd_model *model;
    struct job *jobs;
    int n_jobs, n_side[SD_SIDES], cap_jobs;
    double cfg;
    const struct sd_sample_args *args; /* the guide: kind, cfg2, nested, neg_scale */
    int batch, h, w;
    size_t per;      /* floats per sample: 4·h·w */
    int cc;          /* c_concat channels of a concat-conditioned model (family.h), else 0 */
    const float *latent_in;  /* [batch · per] the latent x scale (ComfyUI's latent_image) */
    const float *noise_mask; /* [batch · per] the prepared noise mask, or NULL */
    float *x_in;     /* [batch · per] the state divided by sqrt(σ² + 1) */
    float *x;        /* [batch · per] copy of the state being denoised */
    float *acc[SD_SIDES];   /* [batch · per] Σ x0·mult per side (SD_SIDE_*) */
    float *count[SD_SIDES]; /* [batch · h · w] 1e-37 + Σ mult (per sample: masks may differ) */
    struct err err;
    int preview;
    struct sd_progress bar;
    float *x0_last;  /* [batch · per] or NULL: the last step's x0 (denoised_output) */
    int steps_seen;  /* steps whose x0 was reported */
    const struct sd_model_patches *patches; /* the MODEL's attention patches, or NULL */
    struct sd_sag_capture sag;  /* SelfAttentionGuidance's recorded attention map */
    struct sampling_rng ht_rng; /* HyperTile's draws: PyTorch's global generator */
    float *sag_degraded;        /* [batch · per] SAG's blurred uncond x0, or NULL */
    float *sag_x0;              /* [batch · per] SAG's second uncond pass, or NULL */
};

/* Python's a[start:stop] on a length-len axis: the clamped [*lo, *hi). */
static void py_slice(int start, int stop, int len, int *lo, int *hi)
{
    if (start < 0)
        start += len;
    if (stop < 0)
        stop += len;
    *lo = start < 0 ? 0 : start > len ? len : start;
    *hi = stop < 0 ? 0 : stop > len ? len : stop;
}

/* Multiply rows [lo, hi) (or columns when cols) of mult [rh, rw] by f. */
static void scale_slice(float *mult, int rh, int rw, int cols, int start, int stop, float f)
{
    int lo, hi;
    py_slice(start, stop, cols ? rw : rh, &lo, &hi);
    for (int i = lo; i < hi; i++) {
        if (cols)
            for (int y = 0; y < rh; y++)
                mult[y * rw + i] *= f;
        else
            for (int x = 0; x < rw; x++)
                mult[i * rw + x] *= f;
    }
}

/*
 * The entry's mask resized to the latent (ComfyUI's resolve_areas_and_cond_masks:
 * bilinear, no crop, when the size differs) into *out [mask_b, h, w]. Returns 0 or
 * ERR_INVALID or the out-of-memory error in k->err.
 */
static int entry_mask(struct kctx *k, const struct sd_cond_entry *e, float **out)
{
    size_t n = (size_t)e->mask_b * k->h * k->w;
    int rc = xtry_malloc(n * sizeof **out, (void **)out, &k->err); /* mask batch x latent: request-sized */
    if (rc < 0)
        return rc;
    if (e->mask_h == k->h && e->mask_w == k->w) {
        memcpy(*out, e->mask, n * sizeof **out);
        return 0;
    }
    rc = resample(e->mask, e->mask_b, 1, e->mask_h, e->mask_w, RESAMPLE_BCHW, "bilinear", 0, *out, k->h,
                  k->w, &k->err);
    if (rc < 0) {
        xfree(*out);
        *out = NULL;
    }
    return rc;
}

/*
 * set_area_to_bounds (ConditioningSetMask "mask bounds"): the bounding box of
 * max |mask| over the batch, at least 8 x 8, or (8, 8, 0, 0) for an all-zero mask.
 */
static void mask_bounds(const float *m, int mb, int h, int w, int *ah, int *aw, int *ay, int *ax)
{
    int x0 = w, y0 = h, x1 = -1, y1 = -1;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            int any = 0;
            for (int b = 0; b < mb && !any; b++)
                any = m[((size_t)b * h + y) * w + x] != 0.0f;
            if (!any)
                continue;
            x0 = x < x0 ? x : x0;
            y0 = y < y0 ? y : y0;
            x1 = x > x1 ? x : x1;
            y1 = y > y1 ? y : y1;
        }
    if (x1 < 0) {
        *ah = *aw = 8;
        *ay = *ax = 0;
        return;
    }
    *ah = y1 - y0 + 1 > 8 ? y1 - y0 + 1 : 8;
    *aw = x1 - x0 + 1 > 8 ? x1 - x0 + 1 : 8;
    *ay = y0;
    *ax = x0;
}

/* Feather the area borders that are not latent borders (no mask): min(8, side / 4) steps. */
static void job_feather(struct job *j, int h, int w)
{
    const int fuzz = 8;
    int rry = j->rh / 4 < fuzz ? j->rh / 4 : fuzz, rrx = j->rw / 4 < fuzz ? j->rw / 4 : fuzz;
    for (int t = 0; t < rry && j->y0 != 0; t++)
        scale_slice(j->mult, j->rh, j->rw, 0, t, t + 1, (float)((1.0 / rry) * (t + 1)));
    for (int t = 0; t < rry && j->rh + j->y0 < h; t++)
        scale_slice(j->mult, j->rh, j->rw, 0, j->rh - 1 - t, j->rh - t, (float)((1.0 / rry) * (t + 1)));
    for (int t = 0; t < rrx && j->x0 != 0; t++)
        scale_slice(j->mult, j->rh, j->rw, 1, t, t + 1, (float)((1.0 / rrx) * (t + 1)));
    for (int t = 0; t < rrx && j->rw + j->x0 < w; t++)
        scale_slice(j->mult, j->rh, j->rw, 1, j->rw - 1 - t, j->rw - t, (float)((1.0 / rrx) * (t + 1)));
}

/*
 * The region and weights of an entry (ComfyUI get_area_and_mult): the area slice of
 * the latent (pixel area, fractions of the latent rounded as Python does, or the
 * mask's bounds), strength everywhere times the mask (times mask_strength) when there
 * is one, else feathered area borders; a timestep range as sigmas. Returns 1, 0 when
 * the region is empty (the entry does not take part), or <0 with k->err set.
 */
static int job_setup(struct kctx *k, struct job *j)
{
    const struct sd_cond_entry *e = j->entry;
    int h = k->h, w = k->w;
    int ah = h, aw = w, ay = 0, ax = 0, has_area = 0;
    if (e->has_area) {
        ah = e->area_h;
        aw = e->area_w;
        ay = e->area_y;
        ax = e->area_x;
        has_area = 1;
    } else if (e->has_area_pct) {
        ah = (int)pynum_round_half_even(e->area_pct_h * h);
        aw = (int)pynum_round_half_even(e->area_pct_w * w);
        ah = ah > 1 ? ah : 1;
        aw = aw > 1 ? aw : 1;
        ay = (int)pynum_round_half_even(e->area_pct_y * h);
        ax = (int)pynum_round_half_even(e->area_pct_x * w);
        has_area = 1;
    }
    float *mask = NULL;
    int rc;
    if (e->mask) {
        if ((rc = entry_mask(k, e, &mask)) < 0)
            return rc;
        if (e->set_area_to_bounds) {
            mask_bounds(mask, e->mask_b, h, w, &ah, &aw, &ay, &ax);
            has_area = 1;
        }
    }
    j->has_area = has_area;
    j->area[0] = ah;
    j->area[1] = aw;
    j->area[2] = ay;
    j->area[3] = ax;
    int y1, x1;
    py_slice(ay, ay + ah, h, &j->y0, &y1);
    py_slice(ax, ax + aw, w, &j->x0, &x1);
    j->rh = y1 - j->y0;
    j->rw = x1 - j->x0;
    if (j->rh <= 0 || j->rw <= 0) {
        xfree(mask);
        return 0;
    }
    /* mask[:batch], repeated over the batch */
    j->mult_b = mask ? (e->mask_b < k->batch ? e->mask_b : k->batch) : 1;
    size_t plane = (size_t)j->rh * j->rw;
    j->mult = xmalloc((size_t)j->mult_b * plane * sizeof *j->mult);
    for (int b = 0; b < j->mult_b; b++)
        for (int y = 0; y < j->rh; y++)
            for (int x = 0; x < j->rw; x++) {
                float m = 1.0f;
                if (mask)
                    m = mask[((size_t)b * h + j->y0 + y) * w + j->x0 + x] * e->mask_strength;
                j->mult[b * plane + (size_t)y * j->rw + x] = m * e->strength;
            }
    xfree(mask);
    if (has_area && !e->mask)
        job_feather(j, h, w);
    if (e->has_timestep_range) {
        /* calculate_start_end_timesteps: percent_to_sigma of each end */
        j->has_range = 1;
        j->sig_start = (float)sd_control_percent_to_sigma(&k->model->ms, e->start_percent);
        j->sig_end = (float)sd_control_percent_to_sigma(&k->model->ms, e->end_percent);
    }
    if (k->cc) { /* encode_model_conds: the entry's c_concat, at the whole latent's size */
        if ((rc = xtry_malloc((size_t)k->batch * k->cc * h * w * sizeof *j->concat,
                              (void **)&j->concat, &k->err)) < 0 ||
            (rc = sd_concat_build(k->model->concat, e, k->latent_in, k->noise_mask,
                                  k->model->latent->scale_factor, k->batch, h, w, j->concat,
                                  &k->err)) < 0)
            return rc;
    }
    return 1;
}

/* context for sample k of a batch from an entry (repeat_to_batch_size semantics) */
static const float *entry_context(const struct sd_cond_entry *e, int k)
{
    return e->cond + (size_t)(k % e->batch) * e->tokens * e->dim;
}

/*
 * The ADM vector of sample k from an entry (SDXL, sdxl.md §5.2): its pooled output and
 * the sizes ComfyUI's encode_model_conds fills in, the noise's pixel size (latent x 8)
 * for width, height and the targets, crops 0. An entry without a pooled vector of the
 * width the model wants (an SD1.x CLIP's conditioning) is an error naming both.
 */
static int entry_adm(struct kctx *k, const struct sd_cond_entry *en, int negative, int smp,
                     float *y)
{
    const struct sd_model *m = k->model;
    int pooled_dim = m->adm_dim - m->family->adm_embeds * SDXL_ADM_EMBED;
    if (!m->family->encode_adm || !en->pooled || en->pooled_dim != pooled_dim)
        return err_set(&k->err, ERR_INVALID,
                       "this %s model needs conditioning with a %d-wide pooled output (got %d): "
                       "use the CLIP of an %s checkpoint",
                       m->family->name, pooled_dim, en->pooled ? en->pooled_dim : 0,
                       m->family->name);
    struct adm_sizes s = {.width = 8 * k->w, .height = 8 * k->h};
    s.target_width = s.width;
    s.target_height = s.height;
    s.aesthetic_score = negative ? 2.5 : 6.0; /* the refiner's defaults (sdxl.md §5.2) */
    if (en->has_adm_sizes) { /* CLIPTextEncodeSDXL: no aesthetic score of its own */
        double a = s.aesthetic_score;
        s = en->adm;
        if (!en->has_ascore)
            s.aesthetic_score = a;
    }
    m->family->encode_adm(en->pooled + (size_t)(smp % en->batch) * pooled_dim, pooled_dim, &s, y);
    return 0;
}

/*
 * The call's transformer options for SelfAttentionGuidance (ComfyUI's cond_or_uncond):
 * the first negative-side job among call samples [s0, s0 + nb) of the group idx, whose
 * samples are consecutive; nothing to record without SAG.
 */
static void call_uncond(struct kctx *k, const int *idx, int s0, int nb, struct sd_call *c)
{
    if (!k->patches || !k->patches->sag_on)
        return;
    for (int i = 0; i < nb; i++) {
        int g = s0 + i, job = g / k->batch, n = 0;
        if (k->jobs[idx[job]].side != SD_SIDE_NEG)
            continue;
        while (i + n < nb && (s0 + i + n) / k->batch == job)
            n++;
        c->cap = &k->sag;
        c->cap_first = i;
        c->cap_n = n;
        c->cap_smp0 = g % k->batch;
        return;
    }
}

/*
 * Run the jobs idx[0..count) (same token count, width and region size) in
 * batched calls of at most max_batch samples, adding each job's x0·mult into
 * its side's accumulator.
 */
static int run_group(struct kctx *k, const int *idx, int count, float sigma)
{
    const struct sd_model *m = k->model;
    const struct job *j0 = &k->jobs[idx[0]];
    int tokens = j0->entry->tokens, dim = j0->entry->dim, rh = j0->rh, rw = j0->rw;
    int total = count * k->batch;
    int chunk = m->max_batch > 0 ? m->max_batch : total;
    if (m->ctx_dim && dim != m->ctx_dim) /* a CLIP of another model type */
        return err_set(&k->err, ERR_INVALID,
                       "this %s model needs %d-wide conditioning, got %d (from the CLIP of "
                       "another model type?)",
                       m->family->name, m->ctx_dim, dim);
    float t = (float)sampling_discrete_timestep(&m->ms, sigma);
    struct sampling_denoiser dn; /* the MODEL's sampling type (calculate_denoised) */
    sampling_denoiser_at(&m->ms, sigma, &dn);
    size_t ctx_per = (size_t)tokens * dim, rper = (size_t)4 * rh * rw;
    size_t xper = (size_t)(4 + k->cc) * rh * rw; /* the model input, then c_concat */
    float *xin = xmalloc((size_t)chunk * xper * sizeof *xin);
    float *ctx = xmalloc((size_t)chunk * ctx_per * sizeof *ctx);
    float *eps = xmalloc((size_t)chunk * rper * sizeof *eps);
    float *ts = xmalloc((size_t)chunk * sizeof *ts);
    float *ybuf = m->adm_dim ? xmalloc((size_t)chunk * m->adm_dim * sizeof *ybuf) : NULL;
    int rc = 0;
    for (int s0 = 0; s0 < total && rc == 0; s0 += chunk) {
        int nb = total - s0 < chunk ? total - s0 : chunk;
        for (int i = 0; i < nb; i++) {
            int g = s0 + i, smp = g % k->batch;
            const struct job *jb = &k->jobs[idx[g / k->batch]];
            for (int c = 0; c < 4; c++)
                for (int y = 0; y < rh; y++)
                    memcpy(xin + i * xper + ((size_t)c * rh + y) * rw,
                           k->x_in + smp * k->per + ((size_t)c * k->h + jb->y0 + y) * k->w + jb->x0,
                           (size_t)rw * sizeof *xin);
            /* CONDNoiseShape.process_cond: the area's slice of c_concat, joined along
             * channels after the model input (_apply_model's torch.cat). */
            for (int c = 0; c < k->cc; c++)
                for (int y = 0; y < rh; y++)
                    memcpy(xin + i * xper + ((size_t)(4 + c) * rh + y) * rw,
                           jb->concat + ((size_t)smp * k->cc + c) * k->h * k->w +
                               (size_t)(jb->y0 + y) * k->w + jb->x0,
                           (size_t)rw * sizeof *xin);
            memcpy(ctx + (size_t)i * ctx_per, entry_context(jb->entry, smp),
                   ctx_per * sizeof *ctx);
            ts[i] = t;
            if (ybuf && (rc = entry_adm(k, jb->entry, jb->adm_negative, smp,
                                        ybuf + (size_t)i * m->adm_dim)) < 0)
                break;
        }
        if (rc < 0)
            break;
        struct sd_call call = {.patches = k->patches, .rng = &k->ht_rng};
        call_uncond(k, idx, s0, nb, &call);
        sd_model_set_call(m, k->patches ? &call : NULL);
        if (j0->control || j0->gligen)
            rc = m->ops->apply_eps_control(m->impl, xin, nb, rh, rw, ts, ctx, tokens, dim, ybuf,
                                           m->adm_dim, j0->control, j0->gligen, sigma, k->batch,
                                           eps, &k->err);
        else if (ybuf)
            rc = m->ops->apply_eps_y(m->impl, xin, nb, rh, rw, ts, ctx, tokens, dim, ybuf,
                                     m->adm_dim, eps, &k->err);
        else
            rc = m->ops->apply_eps(m->impl, xin, nb, rh, rw, ts, ctx, tokens, dim, eps, &k->err);
        sd_model_set_call(m, NULL);
        if (rc < 0)
            break;
        for (int i = 0; i < nb; i++) {
            int g = s0 + i, smp = g % k->batch;
            const struct job *jb = &k->jobs[idx[g / k->batch]];
            float *acc = k->acc[jb->side] + smp * k->per;
            for (int c = 0; c < 4; c++) {
                for (int y = 0; y < rh; y++) {
                    for (int x = 0; x < rw; x++) {
                        size_t li = ((size_t)c * k->h + jb->y0 + y) * k->w + jb->x0 + x;
                        /* x0 = calculate_denoised(model output), then ·mult */
                        float x0 = sampling_denoised(&dn, k->x[smp * k->per + li],
                                                     eps[i * rper + ((size_t)c * rh + y) * rw + x]);
                        acc[li] = acc[li] + x0 * jb->mult[(size_t)(smp % jb->mult_b) * rh * rw + y * rw + x];
                    }
                }
            }
        }
    }
    xfree(xin);
    xfree(ctx);
    xfree(eps);
    xfree(ts);
    xfree(ybuf);
    return rc;
}

/*
 * The guider's mix of the sides' x0 predictions (a side not evaluated reads 0, as
 * calc_cond_batch's None conds): CFGGuider's cfg_function (the MODEL's RescaleCFG
 * when patched), DualCFGGuider's or PerpNegGuider's predict_noise (sampling_guide.h).
 */
static void guide_combine(struct kctx *k, const float *x, float sigma, float *out, size_t n)
{
    const struct sd_sample_args *a = k->args;
    const float *pos = k->acc[SD_SIDE_POS], *neg = k->acc[SD_SIDE_NEG];
    const float *third = k->acc[SD_SIDE_THIRD];
    const struct sampling_cfg_fn *fn = &k->model->cfg_fn;
    switch (a->guide) {
    case SD_GUIDE_DUAL_CFG:
        sampling_dual_cfg(fn, x, sigma, pos, third, neg, a->cfg, a->cfg2, a->nested, k->batch,
                          k->per, out);
        return;
    case SD_GUIDE_PERP_NEG:
        sampling_perp_neg(pos, neg, third, a->cfg, a->neg_scale, n, out);
        return;
    case SD_GUIDE_CFG:
        break;
    }
    if (a->third) { /* the PerpNeg patch's cfg function: x - (x - perp_neg(...)) */
        sampling_perp_neg(pos, neg, third, k->cfg, k->patches->perp_neg_scale, n, out);
        for (size_t i = 0; i < n; i++)
            out[i] = x[i] - (x[i] - out[i]);
        return;
    }
    if (k->n_side[SD_SIDE_NEG] == 0 && !fn->rescale)
        memcpy(out, pos, n * sizeof *out);
    else
        sampling_cfg_apply(fn, x, sigma, pos, neg, k->cfg, k->batch, k->per, out);
}

/*
 * calc_cond_batch at x for the jobs of the sides in the mask `sides` (bit per SD_SIDE_*):
 * each of those sides' x0 prediction in k->acc.
 */
static int eval_sides(struct kctx *k, const float *x, float sigma, size_t n, unsigned sides)
{
    size_t plane = (size_t)k->h * k->w;
    /* A UNet call can take seconds on a CPU: honour /interrupt before each. */
    if (node_interrupted(k->node))
        return ERR_INTERRUPTED;
    sampling_model_input(&k->model->ms, x, sigma, k->x_in, n);
    memcpy(k->x, x, n * sizeof *x);
    int *done = xcalloc((size_t)k->n_jobs, sizeof *done);
    int *idx = xmalloc((size_t)k->n_jobs * sizeof *idx);
    int rc = 0;
    for (int side = 0; side < SD_SIDES; side++) {
        if (!(sides & (1u << side)))
            continue;
        memset(k->acc[side], 0, n * sizeof *k->acc[side]);
        /* ComfyUI starts the counts at 1e-37: uncovered pixels come out as 0. */
        for (size_t p = 0; p < plane * k->batch; p++)
            k->count[side][p] = 1e-37f;
    }
    /* get_area_and_mult's timestep test: σ above the start or below the end skips it. */
    for (int j = 0; j < k->n_jobs; j++) {
        struct job *jb = &k->jobs[j];
        jb->active = !jb->has_range || !(sigma > jb->sig_start || sigma < jb->sig_end);
        jb->active = jb->active && (sides & (1u << jb->side));
        done[j] = !jb->active;
    }
    /* Group jobs by (tokens, dim, region size): one batched model call per group. A job
     * with GLIGEN boxes runs alone, as in ComfyUI (each gets its own patches dict, which
     * can_concat_cond never joins): a batched call's sums may round differently. */
    for (int j = 0; j < k->n_jobs && rc == 0; j++) {
        if (done[j])
            continue;
        int cnt = 0;
        const struct job *a = &k->jobs[j];
        for (int q = j; q < k->n_jobs; q++) {
            const struct job *b = &k->jobs[q];
            int joins = b->entry->tokens == a->entry->tokens && b->entry->dim == a->entry->dim &&
                        b->rh == a->rh && b->rw == a->rw && b->control == a->control &&
                        !b->gligen && !a->gligen;
            if (!done[q] && (joins || q == j)) {
                done[q] = 1;
                idx[cnt++] = q;
            }
        }
        rc = run_group(k, idx, cnt, sigma);
    }
    if (rc == 0) {
        for (int j = 0; j < k->n_jobs; j++) {
            const struct job *jb = &k->jobs[j];
            if (!jb->active)
                continue;
            for (int smp = 0; smp < k->batch; smp++) {
                float *cnt = k->count[jb->side] + (size_t)smp * plane;
                const float *m = jb->mult + (size_t)(smp % jb->mult_b) * jb->rh * jb->rw;
                for (int y = 0; y < jb->rh; y++)
                    for (int xx = 0; xx < jb->rw; xx++)
                        cnt[(size_t)(jb->y0 + y) * k->w + jb->x0 + xx] += m[y * jb->rw + xx];
            }
        }
        for (int side = 0; side < SD_SIDES; side++)
            for (size_t p = 0; sides & (1u << side) && p < n; p++)
                k->acc[side][p] = k->acc[side][p] / k->count[side][(p / k->per) * plane + p % plane];
    }
    xfree(done);
    xfree(idx);
    return rc;
}

/*
 * SelfAttentionGuidance's post_cfg_function on the cfg result `out`: blur the uncond x0
 * where the recorded map says, run the negative side on it again (into sag_x0: acc keeps
 * the uncond x0, the CFG++ samplers' uncond_denoised) and add (degraded − sag)·scale.
 */
static int sag_post_cfg(struct kctx *k, const float *x, float sigma, float *out, size_t n)
{
    if (!sampling_sag_applies(k->h, k->w)) /* too small to pad: cfg_result as it is */
        return 0;
    if (!k->sag.have)
        return err_set(&k->err, ERR_INVALID,
                       "SelfAttentionGuidance: no attention map was recorded (the negative "
                       "conditioning did not run at this step)");
    float *uncond = k->acc[SD_SIDE_NEG];
    int rc = sampling_sag_blur_map(uncond, k->batch, 4, k->h, k->w, k->sag.colsum,
                                   k->sag.tokens, k->patches->sag_blur_sigma, 1.0,
                                   k->sag_degraded, &k->err);
    if (rc < 0)
        return rc;
    sampling_sag_noised(k->sag_degraded, x, uncond, n, k->sag_x0);
    k->acc[SD_SIDE_NEG] = k->sag_x0; /* eval_sides reads its x before writing acc */
    rc = eval_sides(k, k->sag_x0, sigma, n, 1u << SD_SIDE_NEG);
    k->acc[SD_SIDE_NEG] = uncond;
    memcpy(k->x, x, n * sizeof *x);
    if (rc == 0)
        sampling_sag_apply(out, k->sag_degraded, k->sag_x0, k->patches->sag_scale, n);
    return rc;
}

static int denoise(void *user, const float *x, float sigma, float *out, size_t n)
{
    struct kctx *k = user;
    int rc = eval_sides(k, x, sigma, n, (1u << SD_SIDES) - 1);
    if (rc < 0)
        return rc;
    guide_combine(k, x, sigma, out, n);
    if (k->sag_degraded)
        rc = sag_post_cfg(k, x, sigma, out, n);
    return rc;
}

static int on_step(void *user, int step, int total, const float *x0, const float *x, size_t n)
{
    struct kctx *k = user;
    uint8_t *rgb = NULL;
    int pw = 0, ph = 0;
    if (k->x0_last)
        memcpy(k->x0_last, x0, n * sizeof *x0);
    k->steps_seen++;
    if (k->preview)
        sampling_preview_make(x0, k->h, k->w, k->node->env->preview_size, &k->model->latent->rgb,
                              &rgb, &pw, &ph, NULL);
    /* ComfyUI's ProgressBar clamps to the total: dpm_adaptive takes its own step count. */
    int value = step + 1 < total ? step + 1 : total;
    int rc = node_progress(k->node, value, total, rgb, pw, ph);
    xfree(rgb);
    sd_progress_update(&k->bar, value);
    return rc < 0 || node_interrupted(k->node);
}

/* Add the entries of one side; entries whose area misses the latent are dropped.
 * Returns 0, or <0 with k->err set (a mask that cannot be resized). */
static int add_jobs(struct kctx *k, const struct sd_cond *cond, int side)
{
    for (int i = 0; i < cond->n; i++) {
        struct job *j = &k->jobs[k->n_jobs];
        memset(j, 0, sizeof *j);
        j->entry = &cond->entries[i];
        j->control = j->entry->control;
        j->gligen = j->entry->gligen;
        j->side = side;
        j->adm_negative = side != SD_SIDE_POS; /* negative, middle, empty_negative_prompt */
        if (j->entry->batch < 1 || j->entry->tokens < 1)
            continue;
        int rc = job_setup(k, j);
        if (rc < 0)
            return rc;
        k->n_jobs += rc;
        k->n_side[side] += rc;
    }
    return 0;
}

/* Area a (h, w, y, x) lies inside area b. */
static int area_inside(const int *a, const int *b)
{
    for (int i = 0; i < 2; i++)
        if (a[2 + i] < b[2 + i] || a[2 + i] + a[i] > b[2 + i] + b[i])
            return 0;
    return 1;
}

/*
 * ComfyUI's create_cond_with_same_area_if_none: an entry with an area gets a twin on
 * side `side`, with its area, weights, timestep range and control but the text (and
 * ADM) of that side's smallest entry containing that area (or its first entry
 * without one), unless that entry has exactly this area.
 */
static void same_area_twin(struct kctx *k, int src, int side)
{
    const struct job *c = &k->jobs[src];
    if (!c->has_area)
        return;
    int best = -1;
    for (int q = 0; q < k->n_jobs; q++) {
        const struct job *x = &k->jobs[q];
        if (x->side != side)
            continue;
        if (!x->has_area) {
            if (best < 0)
                best = q;
        } else if (area_inside(c->area, x->area)) {
            const struct job *b = best >= 0 ? &k->jobs[best] : NULL;
            if (!b || !b->has_area || (int64_t)b->area[0] * b->area[1] > (int64_t)x->area[0] * x->area[1])
                best = q;
        }
    }
    if (best < 0 || (k->jobs[best].has_area && !memcmp(k->jobs[best].area, c->area, sizeof c->area)))
        return;
    ASSERT(k->n_jobs < k->cap_jobs);
    struct job *t = &k->jobs[k->n_jobs++];
    *t = *c;
    t->entry = k->jobs[best].entry;
    t->adm_negative = k->jobs[best].adm_negative;
    t->side = side;
    size_t n = (size_t)c->mult_b * c->rh * c->rw;
    t->mult = xmalloc(n * sizeof *t->mult);
    memcpy(t->mult, c->mult, n * sizeof *t->mult);
    t->concat = NULL; /* the model_conds of the entry it takes the text of */
    if (k->jobs[best].concat) {
        size_t m = (size_t)k->batch * k->cc * k->h * k->w;
        t->concat = xmalloc(m * sizeof *t->concat);
        memcpy(t->concat, k->jobs[best].concat, m * sizeof *t->concat);
    }
    k->n_side[side]++;
}

/*
 * process_conds' "each cond area has an opposite one with the same area": side by side
 * in the guider's conds order (order[0..n)), every entry of the side, twins added
 * so far included, gets its twin on each other side. Then the sides the guider skips
 * (`skip` bit per side: ComfyUI's cfg1 optimisations) are not evaluated at all, their
 * jobs dropped.
 */
static void same_area_twins(struct kctx *k, const int *order, int n, unsigned skip)
{
    for (int o = 0; o < n; o++) {
        int n0 = k->n_jobs;
        for (int j = 0; j < n0; j++)
            for (int q = 0; k->jobs[j].side == order[o] && q < n; q++)
                if (order[q] != order[o])
                    same_area_twin(k, j, order[q]);
    }
    if (!skip)
        return;
    int w = 0;
    for (int j = 0; j < k->n_jobs; j++) {
        if (skip & (1u << k->jobs[j].side)) {
            xfree(k->jobs[j].mult);
            xfree(k->jobs[j].concat);
            continue;
        }
        k->jobs[w++] = k->jobs[j];
    }
    for (int j = w; j < k->n_jobs; j++)
        memset(&k->jobs[j], 0, sizeof k->jobs[j]);
    k->n_jobs = w;
    for (int side = 0; side < SD_SIDES; side++)
        if (skip & (1u << side))
            k->n_side[side] = 0;
}

/*
 * ControlNetApply (OLD)'s controls also steer the other sides (ComfyUI's
 * apply_empty_x_to_equal_area, for each key but "positive"): unless an entry of the
 * side without an area has a control, the x-th such positive control goes to that
 * side's entry x modulo their count.
 */
static void controls_to_side(struct kctx *k, int side)
{
    int n_other = 0, other[64], x = 0;
    for (int j = 0; j < k->n_jobs; j++) {
        if (k->jobs[j].side != side || k->jobs[j].has_area)
            continue;
        if (k->jobs[j].control)
            return;
        if (n_other < 64)
            other[n_other++] = j;
    }
    for (int j = 0; j < k->n_jobs && n_other > 0; j++) {
        const struct sd_control *c = k->jobs[j].control;
        if (k->jobs[j].side == SD_SIDE_POS && !k->jobs[j].has_area && c && c->apply_to_uncond)
            k->jobs[other[x++ % n_other]].control = c;
    }
}

/*
 * The positive entries' GLIGEN boxes also go to the other sides (apply_empty_x_to_equal_area
 * for "gligen", every positive without an area): unless an entry of the side without an
 * area has boxes, the x-th such positive's go to that side's entry x modulo their count.
 */
static void gligen_to_side(struct kctx *k, int side)
{
    int n_other = 0, other[64], x = 0;
    for (int j = 0; j < k->n_jobs; j++) {
        if (k->jobs[j].side != side || k->jobs[j].has_area)
            continue;
        if (k->jobs[j].gligen)
            return;
        if (n_other < 64)
            other[n_other++] = j;
    }
    for (int j = 0; j < k->n_jobs && n_other > 0; j++) {
        const struct job *p = &k->jobs[j];
        if (p->side == SD_SIDE_POS && !p->has_area && p->gligen)
            k->jobs[other[x++ % n_other]].gligen = p->gligen;
    }
}

/* Distinct GLIGEN entries of the jobs into out[] (at most max); returns the count. */
static int job_gligens(const struct kctx *k, struct sd_gligen **out, int max)
{
    int n = 0;
    for (int j = 0; j < k->n_jobs; j++) {
        const struct sd_gligen *g = k->jobs[j].gligen;
        int seen = 0;
        for (int i = 0; g && i < n; i++)
            seen |= out[i] == g;
        if (g && !seen && n < max)
            out[n++] = (struct sd_gligen *)g;
    }
    return n;
}

/* Distinct controls of the jobs into out[] (at most max); returns the count. */
static int job_controls(const struct kctx *k, struct sd_control **out, int max)
{
    int n = 0;
    for (int j = 0; j < k->n_jobs; j++) {
        const struct sd_control *c = k->jobs[j].control;
        int seen = 0;
        for (int i = 0; c && i < n; i++)
            seen |= out[i] == c;
        if (c && !seen && n < max)
            out[n++] = (struct sd_control *)c;
    }
    return n;
}

struct ksampler_args {
    const struct value *model, *positive, *negative, *latent_image; /* borrowed inputs */
    uint64_t seed;
    int steps;
    double cfg;
    const char *sampler_name, *scheduler;
    double denoise;
    int disable_noise;
    int start_step, last_step; /* -1 = none */
    int force_full_denoise;
};

/* Report a failed sampling run the way ComfyUI's exceptions read. */
static int sample_fail(struct node_ctx *c, int rc, const struct err *e)
{
    if (rc == ERR_INTERRUPTED)
        return node_fail_code(c, ERR_INTERRUPTED, "InterruptProcessingException",
                              "processing interrupted");
    return node_fail_err(c, rc, e);
}

/* The last step's x0 (scaled latent space) as a LATENT: process_latent_out. */
static int denoised_latent(const struct sd_latent *lat, const float *x0, size_t n, float scale,
                           struct sd_latent **out, struct err *e)
{
    int rc = sd_latent_try_new_like(lat, lat->b, lat->c, lat->h, lat->w, out, e);
    for (size_t i = 0; rc == 0 && i < n; i++)
        (*out)->samples[i] = x0[i] / scale;
    return rc;
}

/*
 * The guider's conds in ComfyUI's dict order (process_conds walks them so): CFGGuider
 * {positive, negative}, Guider_DualCFG {positive, middle, negative}, Guider_PerpNeg
 * {positive, empty_negative_prompt, negative}. Returns the count.
 */
static int guide_order(const struct sd_sample_args *a, int *order)
{
    order[0] = SD_SIDE_POS;
    if (a->guide == SD_GUIDE_CFG) {
        order[1] = SD_SIDE_NEG;
        return a->neg ? 2 : 1;
    }
    order[1] = SD_SIDE_THIRD;
    order[2] = SD_SIDE_NEG;
    return 3;
}

/*
 * The sides the guider leaves out (bit per side), ComfyUI's cfg1 optimisations:
 * CFG drops the negative at cfg 1; DualCFG (regular) the negative at
 * cfg_cond2_negative 1, and the middle too when cfg_conds is 1 as well; PerpNeg the
 * negative at neg_scale 0 (math.isclose(x, 0) is x == 0), the empty one too at cfg 1.
 */
static unsigned guide_skipped(const struct sd_sample_args *a)
{
    const unsigned neg = 1u << SD_SIDE_NEG, third = 1u << SD_SIDE_THIRD;
    switch (a->guide) {
    case SD_GUIDE_DUAL_CFG:
        if (a->nested || !sampling_cfg_is_one(a->cfg2))
            return 0;
        return neg | (sampling_cfg_is_one(a->cfg) ? third : 0);
    case SD_GUIDE_PERP_NEG:
        if (a->neg_scale != 0.0)
            return 0;
        return neg | (sampling_cfg_is_one(a->cfg) ? third : 0);
    case SD_GUIDE_CFG:
        break;
    }
    /* The CFG++ samplers read the uncond prediction: disable_cfg1_optimization. */
    if (a->neg && sampling_sampler_needs_uncond(a->sampler))
        return 0;
    return !a->neg || sampling_cfg_is_one(a->cfg) ? neg : 0;
}

/* ComfyUI's CFGGuider.sample with the noise of its RandomNoise / DisableNoise. */
/*
 * The MODEL's attention patches against the guider: SelfAttentionGuidance and PerpNeg
 * (sd_model_patches.h) run in CFGGuider's sampling_function here (KSampler,
 * KSamplerAdvanced, SamplerCustom, CFGGuider); SAG needs a negative side (ComfyUI fails
 * without one too). Returns 0 or the node_fail() code.
 */
static int patches_check(struct node_ctx *c, const struct sd_model_patches *mp,
                         const struct sd_sample_args *a)
{
    if (!mp || !(mp->sag_on || mp->perp_neg_empty))
        return 0;
    const char *what = mp->sag_on ? "SelfAttentionGuidance" : "PerpNeg";
    if (a->guide != SD_GUIDE_CFG)
        return node_fail(c, "RuntimeError",
                         "a MODEL patched with %s samples with CFG guidance here (KSampler, "
                         "CFGGuider); not with DualCFGGuider or PerpNegGuider",
                         what);
    if (mp->sag_on && !a->neg)
        return node_fail(c, "RuntimeError",
                         "SelfAttentionGuidance needs a negative conditioning (BasicGuider has "
                         "none)");
    if (mp->perp_neg_empty && !sd_cond_of(mp->perp_neg_empty))
        return node_fail(c, "RuntimeError", "PerpNeg: empty_conditioning is not a CONDITIONING");
    return 0;
}

int sd__sample(struct node_ctx *c, const struct sd_sample_args *a, struct sd_latent **outp,
               struct sd_latent **denoisedp)
{
    int rc;
    const struct sd_model *model = a->model;
    const struct sd_cond *pos = a->pos, *neg = a->neg;
    const struct sd_latent *lat = a->latent;
    *outp = NULL;
    if (denoisedp)
        *denoisedp = NULL;
    if (lat->c != 4)
        return node_fail(c, "RuntimeError",
                         "the latent has %lld channels; SD1.5 models expect 4", (long long)lat->c);
    struct sd_sample_args pa;
    const struct sd_model_patches *mp = sd_model_patches_of(model);
    if ((rc = patches_check(c, mp, a)) < 0)
        return rc;
    if (mp && mp->perp_neg_empty) { /* PerpNeg's empty conditioning: a third side of CFG */
        pa = *a;
        pa.third = sd_cond_of(mp->perp_neg_empty);
        a = &pa;
    }

    struct err e = {0};
    float *noise = NULL, *mask = NULL, *latent_in = NULL;
    int n_sigmas = a->n_sigmas;
    int n_neg = neg ? neg->n : 0, n_third = a->third ? a->third->n : 0;
    size_t per = (size_t)(4 * lat->h * lat->w), n = per * (size_t)lat->b;
    struct kctx k = {.node = c, .model = model, .cfg = a->cfg, .args = a, .batch = (int)lat->b,
                     .h = (int)lat->h, .w = (int)lat->w, .per = per};
    int order[SD_SIDES], n_order = guide_order(a, order);
    struct sd_latent *out = NULL;
    int prepared = 0;

    /* The latent came from the request; sampling keeps several copies of it. */
    if ((rc = alloc_host_check_n(n, (KS_HOST_COPIES + (denoisedp ? 1 : 0)) * sizeof(float),
                                 &e)) < 0)
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
    k.cc = model_concat_channels(model->concat);
    k.noise_mask = mask;
    if (model->concat == MODEL_CONCAT_INPAINT) { /* process_latent_in(latent_image) */
        latent_in = xmalloc(n * sizeof *latent_in);
        for (size_t i = 0; i < n; i++)
            latent_in[i] = lat->samples[i] * model->latent->scale_factor;
        k.latent_in = latent_in;
    }
    /* Each entry and its same-area twins: one per other side for every entry and twin
     * of the sides processed before (two sides: 3 per entry at most; three: 10). */
    k.cap_jobs = (n_order == 3 ? 10 : 3) * (pos->n + n_neg + n_third);
    k.jobs = xcalloc((size_t)k.cap_jobs, sizeof *k.jobs);
    if ((rc = add_jobs(&k, pos, SD_SIDE_POS)) < 0 ||
        (neg && (rc = add_jobs(&k, neg, SD_SIDE_NEG)) < 0) ||
        (a->third && (rc = add_jobs(&k, a->third, SD_SIDE_THIRD)) < 0)) {
        e = k.err;
        goto fail;
    }
    unsigned skip = guide_skipped(a);
    if (mp && mp->sag_on) /* set_model_sampler_post_cfg_function(disable_cfg1_optimization) */
        skip &= ~(1u << SD_SIDE_NEG);
    same_area_twins(&k, order, n_order, skip);
    for (int o = 1; o < n_order; o++) {
        controls_to_side(&k, order[o]);
        gligen_to_side(&k, order[o]);
    }
    k.x_in = xmalloc(n * sizeof *k.x_in);
    k.x = xmalloc(n * sizeof *k.x);
    if (denoisedp)
        k.x0_last = xmalloc(n * sizeof *k.x0_last);
    for (int side = 0; side < SD_SIDES; side++) {
        k.acc[side] = xmalloc(n * sizeof *k.acc[side]);
        k.count[side] = xmalloc((size_t)(lat->b * lat->h * lat->w) * sizeof *k.count[side]);
    }
    k.preview = c->env && c->env->preview_size > 0 && c->hooks && c->hooks->progress;
    k.patches = mp;
    if (mp && mp->hypertile_on &&
        (rc = sd_model_patches_noise_rng(a->seed, a->disable_noise, lat, &k.ht_rng, &e)) < 0)
        goto fail;
    if (mp && mp->sag_on) {
        k.sag.batch = k.batch;
        k.sag_degraded = xmalloc(n * sizeof *k.sag_degraded);
        k.sag_x0 = xmalloc(n * sizeof *k.sag_x0);
    }

    struct sd_control *ctl[16];
    int n_ctl = job_controls(&k, ctl, 16);
    struct sd_gligen *gl[16];
    int n_gl = job_gligens(&k, gl, 16);
    if ((n_ctl > 0 || n_gl > 0) &&
        (!model->ops->prepare_control || !model->ops->apply_eps_control)) {
        rc = err_set(&e, ERR_INVALID, "this MODEL cannot take a %s",
                     n_ctl > 0 ? "ControlNet" : "GLIGEN model");
        goto fail;
    }
    if (model->ops->prepare && n_sigmas > 1) {
        /* The largest call: every job of the biggest group at once, capped by max_batch. */
        int max_tokens = 0, biggest = 0;
        for (int j = 0; j < k.n_jobs; j++) {
            int same = 0;
            for (int q = 0; q < k.n_jobs; q++)
                same += k.jobs[q].rh == k.jobs[j].rh && k.jobs[q].rw == k.jobs[j].rw &&
                        k.jobs[q].entry->tokens == k.jobs[j].entry->tokens &&
                        k.jobs[q].entry->dim == k.jobs[j].entry->dim;
            biggest = same > biggest ? same : biggest;
            max_tokens = k.jobs[j].entry->tokens > max_tokens ? k.jobs[j].entry->tokens : max_tokens;
        }
        int mb = biggest * k.batch;
        if (model->max_batch > 0 && mb > model->max_batch)
            mb = model->max_batch;
        if (n_ctl > 0 || n_gl > 0)
            rc = model->ops->prepare_control(model->impl, c->env ? c->env->mm : NULL, mb, k.h,
                                             k.w, max_tokens, ctl, n_ctl, gl, n_gl, &k.err);
        else
            rc = model->ops->prepare(model->impl, c->env ? c->env->mm : NULL, mb, k.h, k.w,
                                     max_tokens, &k.err);
        if (rc < 0) {
            e = k.err;
            goto fail;
        }
        prepared = 1;
    }
    if ((rc = sd_latent_try_new_like(lat, lat->b, lat->c, lat->h, lat->w, &out, &e)) < 0)
        goto fail;
    struct sampling_request req = {
        .sampler = a->sampler, .opts = a->opts, .sigmas = a->sigmas, .n_sigmas = n_sigmas,
        .noise = noise,
        .seed = a->seed, .variant = SAMPLING_RANDN_V2, .noise_mask = mask,
        .sigma_max = model->ms.sigma_max, .latent_scale = model->latent->scale_factor,
        .denoise = denoise, .denoise_user = &k,
        .step = on_step, .step_user = &k,
        /* The negative side's x0, which denoise() leaves in acc: post_cfg_function's
         * uncond_denoised. */
        .uncond_x0 = k.acc[SD_SIDE_NEG]};
    /* sample_sa_solver's default tau interval, from the MODEL's sampling. */
    sampling_sa_tau_interval(&model->ms, &req.tau_sigma_start, &req.tau_sigma_end);
    sd_progress_begin(&k.bar, n_sigmas > 0 ? n_sigmas - 1 : 0);
    rc = sampling_sample_latent(&req, lat->samples, out->samples, n, &e);
    sd_progress_end(&k.bar);
    if (rc < 0 && k.err.code != 0)
        e = k.err; /* the model's own message is the useful one */
    if (rc < 0)
        goto fail;
    if (denoisedp && k.steps_seen > 0 &&
        (rc = denoised_latent(lat, k.x0_last, n, model->latent->scale_factor, denoisedp, &e)) < 0)
        goto fail;
    *outp = out;
    out = NULL;
fail:
    if (prepared && model->ops->finish)
        model->ops->finish(model->impl, c->env ? c->env->mm : NULL);
    sd_latent_free(out);
    for (int j = 0; k.jobs && j < k.cap_jobs; j++) {
        xfree(k.jobs[j].mult);
        xfree(k.jobs[j].concat);
    }
    xfree(k.jobs);
    xfree(k.x_in);
    xfree(k.x);
    xfree(k.x0_last);
    for (int side = 0; side < SD_SIDES; side++) {
        xfree(k.acc[side]);
        xfree(k.count[side]);
    }
    xfree(mask);
    xfree(noise);
    xfree(latent_in);
    sd_sag_capture_release(&k.sag);
    xfree(k.sag_degraded);
    xfree(k.sag_x0);
    return rc < 0 ? sample_fail(c, rc, &e) : 0;
}

/* ComfyUI's common_ksampler: KSampler's sigma list, then the shared core. */
static int common_ksampler(struct node_ctx *c, const struct ksampler_args *a)
{
    const struct sd_model *model = sd_model_of(a->model);
    const struct sd_cond *pos = sd_cond_of(a->positive);
    const struct sd_cond *neg = sd_cond_of(a->negative);
    const struct sd_latent *lat = sd_latent_of(a->latent_image);
    if (!model || !model->ops || !model->ops->apply_eps)
        return node_fail(c, "RuntimeError", "input 'model' is not a MODEL");
    if (!pos || !neg || pos->n < 1 || neg->n < 1)
        return node_fail(c, "RuntimeError", "conditioning is missing or empty");
    if (!lat)
        return node_fail(c, "RuntimeError", "input 'latent_image' is not a LATENT");
    enum sampling_sampler smp;
    enum sampling_scheduler sch;
    if (sampling_sampler_from_name(a->sampler_name, &smp) < 0)
        return node_fail(c, "ValueError", "sampler '%s' is not supported", a->sampler_name);
    if (sampling_scheduler_from_name(a->scheduler, &sch) < 0)
        return node_fail(c, "ValueError", "scheduler '%s' is not supported", a->scheduler);

    struct err e = {0};
    float *sigmas = NULL;
    int n_sigmas = 0, rc;
    if ((rc = sampling_sigmas_for_ksampler(&model->ms, sch,
                                           sampling_sampler_discards_penultimate(smp), a->steps,
                                           a->denoise, a->start_step, a->last_step,
                                           a->force_full_denoise, &sigmas, &n_sigmas, &e)) < 0)
        return sample_fail(c, rc, &e);
    struct sd_sample_args s = {
        .model = model, .pos = pos, .neg = neg, .cfg = a->cfg, .sampler = smp,
        .sigmas = sigmas, .n_sigmas = n_sigmas, .latent = lat,
        .disable_noise = a->disable_noise, .seed = a->seed};
    struct sd_latent *out = NULL;
    rc = sd__sample(c, &s, &out, NULL);
    xfree(sigmas);
    if (rc < 0)
        return rc;
    node_set_output(c, 0, sd_latent_value(out));
    return 0;
}

/* ---- KSampler ---- */

enum {
    KS_MODEL, KS_SEED, KS_STEPS, KS_CFG, KS_SAMPLER_NAME, KS_SCHEDULER, KS_POSITIVE, KS_NEGATIVE,
    KS_LATENT_IMAGE, KS_DENOISE, KS_N
};
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
        .model = node_in_at(c, KS_MODEL),
        .positive = node_in_at(c, KS_POSITIVE),
        .negative = node_in_at(c, KS_NEGATIVE),
        .latent_image = node_in_at(c, KS_LATENT_IMAGE),
        .seed = value_u64(node_in_at(c, KS_SEED)),
        .steps = (int)node_in_int_at(c, KS_STEPS),
        .cfg = node_in_float_at(c, KS_CFG),
        .sampler_name = node_in_str_at(c, KS_SAMPLER_NAME),
        .scheduler = node_in_str_at(c, KS_SCHEDULER),
        .denoise = node_in_float_at(c, KS_DENOISE),
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
    .n_inputs = KS_N,
    .outputs = ksampler_outputs,
    .run = ksampler_run,
};

/* ---- KSamplerAdvanced ---- */

static const char *const enable_disable[] = {"enable", "disable", NULL};
static const char *const disable_enable[] = {"disable", "enable", NULL};

enum {
    KSA_MODEL, KSA_ADD_NOISE, KSA_NOISE_SEED, KSA_STEPS, KSA_CFG, KSA_SAMPLER_NAME, KSA_SCHEDULER,
    KSA_POSITIVE, KSA_NEGATIVE, KSA_LATENT_IMAGE, KSA_START_AT_STEP, KSA_END_AT_STEP,
    KSA_RETURN_WITH_LEFTOVER_NOISE, KSA_N
};
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
        .model = node_in_at(c, KSA_MODEL),
        .positive = node_in_at(c, KSA_POSITIVE),
        .negative = node_in_at(c, KSA_NEGATIVE),
        .latent_image = node_in_at(c, KSA_LATENT_IMAGE),
        .seed = value_u64(node_in_at(c, KSA_NOISE_SEED)),
        .steps = (int)node_in_int_at(c, KSA_STEPS),
        .cfg = node_in_float_at(c, KSA_CFG),
        .sampler_name = node_in_str_at(c, KSA_SAMPLER_NAME),
        .scheduler = node_in_str_at(c, KSA_SCHEDULER),
        .denoise = 1.0,
        .disable_noise = strcmp(node_in_str_at(c, KSA_ADD_NOISE), "disable") == 0,
        .start_step = (int)node_in_int_at(c, KSA_START_AT_STEP),
        .last_step = (int)node_in_int_at(c, KSA_END_AT_STEP),
        .force_full_denoise =
            strcmp(node_in_str_at(c, KSA_RETURN_WITH_LEFTOVER_NOISE), "enable") != 0,
    };
    return common_ksampler(c, &a);
}

const struct node_class sd_ksampler_advanced = {
    .name = "KSamplerAdvanced",
    .display_name = "KSampler (Advanced)",
    .category = "sampling",
    .inputs = advanced_inputs,
    .n_inputs = KSA_N,
    .outputs = advanced_outputs,
    .run = advanced_run,
};
