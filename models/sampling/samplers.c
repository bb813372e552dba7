/*
 * samplers — the k-diffusion update rules ComfyUI's KSampler runs (sd15.md
 * §5.7), on flat float32 arrays, and the names, checks and dispatch of every
 * sampler (the other families live in samplers_*.c, behind samplers_impl.h).
 *
 * Each update is written in the operation order of ComfyUI's Python, one
 * float32 rounding per tensor op: scalars computed from the schedule are
 * 0-d float32 tensors there, and Python floats meet float32 tensors as
 * float32. Contraction into FMAs is switched off (samplers_impl.h) so that
 * the order holds.
 */
#include "samplers_impl.h"

#include <math.h>
#include <string.h>

#include "alloc.h"

/* What the dispatch and the callers need to know of each sampler. */
enum sampler_flags {
    SAMPLER_NOISE = 1 << 0,    /* draws per-step noise (sampling_sampler_is_stochastic) */
    SAMPLER_UNCOND = 1 << 1,   /* reads the uncond x0 (CFG++: sampling_sampler_needs_uncond) */
    SAMPLER_BROWNIAN = 1 << 2, /* its noise is ComfyUI's Brownian tree (sampling_brownian.h) */
    SAMPLER_DISCARD = 1 << 3,  /* KSampler drops the penultimate sigma */
    SAMPLER_TAU = 1 << 4,      /* reads the run's tau interval (sampling_sampler_needs_tau) */
};

static const struct {
    const char *name; /* ComfyUI's */
    unsigned flags;   /* enum sampler_flags */
} samplers[SAMPLING_SAMPLER_COUNT] = {
    [SAMPLING_SAMPLER_EULER] = {"euler", 0},
    [SAMPLING_SAMPLER_EULER_CFG_PP] = {"euler_cfg_pp", SAMPLER_UNCOND},
    [SAMPLING_SAMPLER_EULER_ANCESTRAL] = {"euler_ancestral", SAMPLER_NOISE},
    [SAMPLING_SAMPLER_EULER_ANCESTRAL_CFG_PP] = {"euler_ancestral_cfg_pp",
                                                 SAMPLER_NOISE | SAMPLER_UNCOND},
    [SAMPLING_SAMPLER_HEUN] = {"heun", 0},
    [SAMPLING_SAMPLER_HEUNPP2] = {"heunpp2", 0},
    [SAMPLING_SAMPLER_DPM_2] = {"dpm_2", SAMPLER_DISCARD},
    [SAMPLING_SAMPLER_DPM_2_ANCESTRAL] = {"dpm_2_ancestral", SAMPLER_NOISE | SAMPLER_DISCARD},
    [SAMPLING_SAMPLER_LMS] = {"lms", 0},
    [SAMPLING_SAMPLER_DPM_FAST] = {"dpm_fast", 0},
    [SAMPLING_SAMPLER_DPM_ADAPTIVE] = {"dpm_adaptive", 0},
    [SAMPLING_SAMPLER_DPMPP_2S_ANCESTRAL] = {"dpmpp_2s_ancestral", SAMPLER_NOISE},
    [SAMPLING_SAMPLER_DPMPP_2S_ANCESTRAL_CFG_PP] = {"dpmpp_2s_ancestral_cfg_pp",
                                                    SAMPLER_NOISE | SAMPLER_UNCOND},
    [SAMPLING_SAMPLER_DPMPP_SDE] = {"dpmpp_sde", SAMPLER_NOISE | SAMPLER_BROWNIAN},
    [SAMPLING_SAMPLER_DPMPP_SDE_GPU] = {"dpmpp_sde_gpu", SAMPLER_NOISE | SAMPLER_BROWNIAN},
    [SAMPLING_SAMPLER_DPMPP_2M] = {"dpmpp_2m", 0},
    [SAMPLING_SAMPLER_DPMPP_2M_CFG_PP] = {"dpmpp_2m_cfg_pp", SAMPLER_UNCOND},
    [SAMPLING_SAMPLER_DPMPP_2M_SDE] = {"dpmpp_2m_sde", SAMPLER_NOISE | SAMPLER_BROWNIAN},
    [SAMPLING_SAMPLER_DPMPP_2M_SDE_GPU] = {"dpmpp_2m_sde_gpu", SAMPLER_NOISE | SAMPLER_BROWNIAN},
    [SAMPLING_SAMPLER_DPMPP_2M_SDE_HEUN] = {"dpmpp_2m_sde_heun", SAMPLER_NOISE | SAMPLER_BROWNIAN},
    [SAMPLING_SAMPLER_DPMPP_2M_SDE_HEUN_GPU] = {"dpmpp_2m_sde_heun_gpu",
                                                SAMPLER_NOISE | SAMPLER_BROWNIAN},
    [SAMPLING_SAMPLER_DPMPP_3M_SDE] = {"dpmpp_3m_sde", SAMPLER_NOISE | SAMPLER_BROWNIAN},
    [SAMPLING_SAMPLER_DPMPP_3M_SDE_GPU] = {"dpmpp_3m_sde_gpu", SAMPLER_NOISE | SAMPLER_BROWNIAN},
    [SAMPLING_SAMPLER_DDPM] = {"ddpm", SAMPLER_NOISE},
    [SAMPLING_SAMPLER_LCM] = {"lcm", SAMPLER_NOISE},
    [SAMPLING_SAMPLER_IPNDM] = {"ipndm", 0},
    [SAMPLING_SAMPLER_IPNDM_V] = {"ipndm_v", 0},
    [SAMPLING_SAMPLER_DEIS] = {"deis", 0},
    [SAMPLING_SAMPLER_RES_MULTISTEP] = {"res_multistep", 0},
    [SAMPLING_SAMPLER_RES_MULTISTEP_CFG_PP] = {"res_multistep_cfg_pp", SAMPLER_UNCOND},
    [SAMPLING_SAMPLER_RES_MULTISTEP_ANCESTRAL] = {"res_multistep_ancestral", SAMPLER_NOISE},
    [SAMPLING_SAMPLER_RES_MULTISTEP_ANCESTRAL_CFG_PP] = {"res_multistep_ancestral_cfg_pp",
                                                         SAMPLER_NOISE | SAMPLER_UNCOND},
    [SAMPLING_SAMPLER_GRADIENT_ESTIMATION] = {"gradient_estimation", 0},
    [SAMPLING_SAMPLER_GRADIENT_ESTIMATION_CFG_PP] = {"gradient_estimation_cfg_pp", SAMPLER_UNCOND},
    [SAMPLING_SAMPLER_ER_SDE] = {"er_sde", SAMPLER_NOISE},
    [SAMPLING_SAMPLER_SEEDS_2] = {"seeds_2", SAMPLER_NOISE},
    [SAMPLING_SAMPLER_SEEDS_3] = {"seeds_3", SAMPLER_NOISE},
    [SAMPLING_SAMPLER_SA_SOLVER] = {"sa_solver", SAMPLER_NOISE | SAMPLER_TAU},
    [SAMPLING_SAMPLER_SA_SOLVER_PECE] = {"sa_solver_pece", SAMPLER_NOISE | SAMPLER_TAU},
    [SAMPLING_SAMPLER_DDIM] = {"ddim", 0},
    [SAMPLING_SAMPLER_UNI_PC] = {"uni_pc", SAMPLER_DISCARD},
    [SAMPLING_SAMPLER_UNI_PC_BH2] = {"uni_pc_bh2", SAMPLER_DISCARD},
};

static unsigned sampler_flags(enum sampling_sampler s)
{
    return (int)s >= 0 && s < SAMPLING_SAMPLER_COUNT ? samplers[s].flags : 0;
}

const char *sampling_sampler_name(enum sampling_sampler s)
{
    if ((int)s < 0 || s >= SAMPLING_SAMPLER_COUNT)
        return NULL;
    return samplers[s].name;
}

int sampling_sampler_from_name(const char *name, enum sampling_sampler *out)
{
    for (int i = 0; name && i < SAMPLING_SAMPLER_COUNT; i++) {
        if (strcmp(name, samplers[i].name) == 0) {
            *out = (enum sampling_sampler)i;
            return 0;
        }
    }
    return ERR_NOT_FOUND;
}

int sampling_sampler_discards_penultimate(enum sampling_sampler s)
{
    return (sampler_flags(s) & SAMPLER_DISCARD) != 0;
}

int sampling_sampler_needs_uncond(enum sampling_sampler s)
{
    return (sampler_flags(s) & SAMPLER_UNCOND) != 0;
}

int sampling_sampler_is_stochastic(enum sampling_sampler s)
{
    return (sampler_flags(s) & SAMPLER_NOISE) != 0;
}

int sampling_sampler_needs_tau(enum sampling_sampler s)
{
    return (sampler_flags(s) & SAMPLER_TAU) != 0;
}

void sampling_sa_tau_interval(const struct sampling_discrete *ms, double *start, double *end)
{
    *start = sampling_percent_to_sigma(ms, 0.2);
    *end = sampling_percent_to_sigma(ms, 0.8);
}

/* ---- the run context: model call with the inpaint wrapper, scratch ---- */

int sampling__model(struct sampling__ctx *c, const float *x, float sigma, float *den)
{
    const struct sampling_inpaint *ip = c->run->inpaint;
    size_t n = c->n;
    const float *in = x;
    if (ip) {
        /* KSamplerX0Inpaint: x·m + (noise·σ + latent)·(1 − m). */
        for (size_t i = 0; i < n; i++) {
            float lm = 1.0f - ip->mask[i];
            float kept = ip->noise[i] * sigma;
            kept = kept + ip->latent[i];
            c->xin[i] = x[i] * ip->mask[i] + kept * lm;
        }
        in = c->xin;
    }
    int rc = c->run->denoise(c->run->denoise_user, in, sigma, den, n);
    if (rc < 0)
        return rc;
    if (ip) {
        for (size_t i = 0; i < n; i++) {
            float lm = 1.0f - ip->mask[i];
            den[i] = den[i] * ip->mask[i] + ip->latent[i] * lm;
        }
    }
    return 0;
}

int sampling__report(struct sampling__ctx *c, int i, const float *den, const float *x)
{
    const struct sampling_run *r = c->run;
    if (r->step && r->step(r->step_user, i, r->n_sigmas - 1, den, x, c->n) != 0)
        return ERR_INTERRUPTED;
    return 0;
}

const float *sampling__noise(struct sampling__ctx *c, float sigma, float sigma_next)
{
    sampling_noise_draw(c->run->noise, sigma, sigma_next, c->nz, c->n);
    return c->nz;
}

int sampling__scratch(const struct sampling__ctx *c, int count, float **out)
{
    void *p = NULL;
    int rc = alloc_host_check_n((size_t)count, c->n * sizeof(float), NULL);
    if (rc < 0 || (rc = xtry_malloc((size_t)count * c->n * sizeof(float), &p, NULL)) < 0)
        return rc;
    *out = p;
    return 0;
}

/* to_d: d = (x − den) / σ. */
void sampling__to_d(const float *x, const float *den, float sigma, float *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = (x[i] - den[i]) / sigma;
}

/* get_ancestral_step(σ, σn, eta); eta = 0 steps to σn without noise. */
void sampling__ancestral_step(float s, float sn, double eta, float *down, float *up)
{
    if (eta == 0.0) {
        *down = sn;
        *up = 0.0f;
        return;
    }
    float sn2 = sn * sn, s2 = s * s;
    float v = sn2 * (s2 - sn2);
    v = v / s2;
    float u = (float)eta * sqrtf(v);
    if (!(u < sn)) /* Python min(sn, u) returns sn unless u < sn */
        u = sn;
    *up = u;
    *down = sqrtf(sn2 - u * u);
}

/* torch.lerp(a, b, 0.5) takes its "b − (b − a)·(1 − w)" branch. */
static float lerp_half(float a, float b)
{
    float diff = b - a;
    return b - diff * 0.5f;
}

/* ---- samplers ---- */

static int run_euler(struct sampling__ctx *c, float *x, float *den, float *d)
{
    const float *sig = c->run->sigmas;
    size_t n = c->n;
    int rc;
    for (int i = 0; i < c->run->n_sigmas - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        sampling__to_d(x, den, s, d, n);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        float dt = sn - s;
        for (size_t k = 0; k < n; k++)
            x[k] = x[k] + d[k] * dt;
    }
    return 0;
}

static int run_euler_ancestral(struct sampling__ctx *c, float *x, float *den, float *d)
{
    const float *sig = c->run->sigmas;
    size_t n = c->n;
    int rc;
    for (int i = 0; i < c->run->n_sigmas - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        float sd, su;
        sampling__ancestral_step(s, sn, c->o.eta, &sd, &su);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        if (sd == 0.0f) {
            memcpy(x, den, n * sizeof *x);
            continue;
        }
        sampling__to_d(x, den, s, d, n);
        float dt = sd - s;
        const float *z = sampling__noise(c, s, sn);
        for (size_t k = 0; k < n; k++) {
            float a = x[k] + d[k] * dt;
            float b = z[k] * (float)c->o.s_noise;
            x[k] = a + b * su;
        }
    }
    return 0;
}

/*
 * euler_ancestral_cfg_pp (ComfyUI's sample_euler_ancestral_cfg_pp, CFG++): the step's
 * direction comes from the uncond prediction, the landing point from the guided one.
 * alpha = σ·exp(λ(σ)) with λ = −ln σ (eps models) is 1 up to float32 rounding, computed
 * as torch does so the bits follow.
 */
static int run_euler_ancestral_cfg_pp(struct sampling__ctx *c, float *x, float *den, float *d)
{
    const float *sig = c->run->sigmas;
    const float *unc = c->run->uncond_x0;
    size_t n = c->n;
    int rc;
    for (int i = 0; i < c->run->n_sigmas - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        if (sn == 0.0f) {
            memcpy(x, den, n * sizeof *x);
            continue;
        }
        float alpha_s = s * expf(-logf(s)), alpha_t = sn * expf(-logf(sn));
        for (size_t k = 0; k < n; k++) {
            float u = alpha_s * unc[k];
            d[k] = (x[k] - u) / s;
        }
        float sd, su;
        sampling__ancestral_step(s / alpha_s, sn / alpha_t, c->o.eta, &sd, &su);
        sd = alpha_t * sd;
        for (size_t k = 0; k < n; k++) {
            float a = alpha_t * den[k];
            x[k] = a + sd * d[k];
        }
        if (c->o.eta > 0.0 && c->o.s_noise > 0.0) { /* k-diffusion's condition */
            const float *z = sampling__noise(c, s, sn);
            for (size_t k = 0; k < n; k++) {
                float v = alpha_t * z[k];
                v = v * (float)c->o.s_noise;
                x[k] = x[k] + v * su;
            }
        }
    }
    return 0;
}

static int run_heun(struct sampling__ctx *c, float *x, float *den, float *d, float *x2, float *d2)
{
    const float *sig = c->run->sigmas;
    size_t n = c->n;
    int rc;
    for (int i = 0; i < c->run->n_sigmas - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        sampling__to_d(x, den, s, d, n);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        float dt = sn - s;
        if (sn == 0.0f) {
            for (size_t k = 0; k < n; k++)
                x[k] = x[k] + d[k] * dt;
            continue;
        }
        for (size_t k = 0; k < n; k++)
            x2[k] = x[k] + d[k] * dt;
        if ((rc = sampling__model(c, x2, sn, den)) < 0)
            return rc;
        sampling__to_d(x2, den, sn, d2, n);
        for (size_t k = 0; k < n; k++) {
            float dp = (d[k] + d2[k]) / 2.0f;
            x[k] = x[k] + dp * dt;
        }
    }
    return 0;
}

/* dpm_2 (ancestral = 0) and dpm_2_ancestral (ancestral = 1). */
static int run_dpm_2(struct sampling__ctx *c, float *x, float *den, float *d, float *x2, float *d2,
                     int ancestral)
{
    const float *sig = c->run->sigmas;
    size_t n = c->n;
    int rc;
    for (int i = 0; i < c->run->n_sigmas - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        float target = sn, su = 0.0f;
        if (ancestral)
            sampling__ancestral_step(s, sn, c->o.eta, &target, &su);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        sampling__to_d(x, den, s, d, n);
        if (target == 0.0f) {
            float dt = target - s;
            for (size_t k = 0; k < n; k++)
                x[k] = x[k] + d[k] * dt;
            continue;
        }
        float sm = expf(lerp_half(logf(s), logf(target)));
        float dt1 = sm - s, dt2 = target - s;
        for (size_t k = 0; k < n; k++)
            x2[k] = x[k] + d[k] * dt1;
        if ((rc = sampling__model(c, x2, sm, den)) < 0)
            return rc;
        sampling__to_d(x2, den, sm, d2, n);
        for (size_t k = 0; k < n; k++)
            x[k] = x[k] + d2[k] * dt2;
        if (ancestral) {
            const float *z = sampling__noise(c, s, sn);
            for (size_t k = 0; k < n; k++) {
                float b = z[k] * (float)c->o.s_noise;
                x[k] = x[k] + b * su;
            }
        }
    }
    return 0;
}

static int run_dpmpp_2s_ancestral(struct sampling__ctx *c, float *x, float *den, float *d, float *x2)
{
    const float *sig = c->run->sigmas;
    size_t n = c->n;
    int rc;
    for (int i = 0; i < c->run->n_sigmas - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        float sd, su;
        sampling__ancestral_step(s, sn, c->o.eta, &sd, &su);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        if (sd == 0.0f) {
            sampling__to_d(x, den, s, d, n);
            float dt = sd - s;
            for (size_t k = 0; k < n; k++)
                x[k] = x[k] + d[k] * dt;
        } else {
            float t = -logf(s), tn = -logf(sd);
            float h = tn - t;
            float smid = t + 0.5f * h;
            float sig_s = expf(-smid), sig_t = expf(-t), sig_tn = expf(-tn);
            float a1 = sig_s / sig_t, b1 = expm1f((-h) * 0.5f);
            for (size_t k = 0; k < n; k++)
                x2[k] = a1 * x[k] - b1 * den[k];
            if ((rc = sampling__model(c, x2, sig_s, den)) < 0)
                return rc;
            float a2 = sig_tn / sig_t, b2 = expm1f(-h);
            for (size_t k = 0; k < n; k++)
                x[k] = a2 * x[k] - b2 * den[k];
        }
        if (sn > 0.0f) {
            const float *z = sampling__noise(c, s, sn);
            for (size_t k = 0; k < n; k++) {
                float b = z[k] * (float)c->o.s_noise;
                x[k] = x[k] + b * su;
            }
        }
    }
    return 0;
}

/* dpmpp_sde (eps model: λ = −ln σ); noise only with eta > 0 and s_noise > 0, as ComfyUI. */
static int run_dpmpp_sde(struct sampling__ctx *c, float *x, float *den, float *x2, float *den2)
{
    const float *sig = c->run->sigmas;
    size_t n = c->n;
    int rc;
    /* r and fac = 1 / (2r) are Python floats: fac and 1 - fac are rounded once each. */
    const double fac = 1.0 / (2.0 * c->o.r);
    const float r = (float)c->o.r, facf = (float)fac, omf = (float)(1.0 - fac);
    const float sno = (float)c->o.s_noise;
    const int noisy = c->o.eta > 0.0 && c->o.s_noise > 0.0;
    for (int i = 0; i < c->run->n_sigmas - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        if (sn == 0.0f) {
            memcpy(x, den, n * sizeof *x);
            continue;
        }
        float ls = -logf(s), lt = -logf(sn);
        float h = lt - ls;
        float ls1 = ls + r * h;
        float s1 = expf(-ls1);
        float alpha_s = s * expf(ls);
        float alpha_s1 = s1 * expf(ls1);
        float alpha_t = sn * expf(lt);

        /* Step 1. */
        float sd, su;
        sampling__ancestral_step(expf(-ls), expf(-ls1), c->o.eta, &sd, &su);
        float h_ = -logf(sd) - ls;
        float a = (alpha_s1 / alpha_s) * expf(-h_);
        float b = alpha_s1 * expm1f(-h_);
        for (size_t k = 0; k < n; k++)
            x2[k] = a * x[k] - b * den[k];
        if (noisy) {
            const float *z = sampling__noise(c, s, s1);
            for (size_t k = 0; k < n; k++) {
                float v = alpha_s1 * z[k];
                v = v * sno;
                x2[k] = x2[k] + v * su;
            }
        }
        if ((rc = sampling__model(c, x2, s1, den2)) < 0)
            return rc;

        /* Step 2. */
        sampling__ancestral_step(expf(-ls), expf(-lt), c->o.eta, &sd, &su);
        h_ = -logf(sd) - ls;
        a = (alpha_t / alpha_s) * expf(-h_);
        b = alpha_t * expm1f(-h_);
        for (size_t k = 0; k < n; k++) {
            float dd = omf * den[k];
            dd = dd + facf * den2[k];
            x[k] = a * x[k] - b * dd;
        }
        if (noisy) {
            const float *z = sampling__noise(c, s, sn);
            for (size_t k = 0; k < n; k++) {
                float v = alpha_t * z[k];
                v = v * sno;
                x[k] = x[k] + v * su;
            }
        }
    }
    return 0;
}

/* dpmpp_2m_sde, solver "midpoint" (heun = 0) or "heun" (heun = 1). */
static int run_dpmpp_2m_sde(struct sampling__ctx *c, float *x, float *den, float *old, int heun)
{
    const float *sig = c->run->sigmas;
    size_t n = c->n;
    int rc, have_old = 0;
    /* eta + 1 is a Python float: rounded to float32 once, after the addition. */
    const float eta = (float)c->o.eta, eta1 = (float)(c->o.eta + 1.0), sno = (float)c->o.s_noise;
    const int noisy = c->o.eta > 0.0 && c->o.s_noise > 0.0;
    float h = 0.0f, h_last = 0.0f;
    for (int i = 0; i < c->run->n_sigmas - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        if (sn == 0.0f) {
            memcpy(x, den, n * sizeof *x);
        } else {
            float ls = -logf(s), lt = -logf(sn);
            h = lt - ls;
            float h_eta = h * eta1;
            float alpha_t = sn * expf(lt);
            float a = (sn / s) * expf((-h) * eta);
            float nem = -expm1f(-h_eta);
            float b = alpha_t * nem;
            for (size_t k = 0; k < n; k++) {
                float p = a * x[k];
                x[k] = p + b * den[k];
            }
            if (have_old) {
                float rr = h_last / h;
                float inv_r = 1.0f / rr;
                float coef;
                if (heun) {
                    float q = nem / (-h_eta);
                    coef = (alpha_t * (q + 1.0f)) * inv_r;
                } else {
                    coef = ((0.5f * alpha_t) * nem) * inv_r;
                }
                for (size_t k = 0; k < n; k++)
                    x[k] = x[k] + coef * (den[k] - old[k]);
            }
            if (noisy) {
                float sq = sqrtf(-expm1f(((-2.0f) * h) * eta));
                const float *z = sampling__noise(c, s, sn);
                for (size_t k = 0; k < n; k++) {
                    float v = z[k] * sn;
                    v = v * sq;
                    v = v * sno;
                    x[k] = x[k] + v;
                }
            }
        }
        memcpy(old, den, n * sizeof *old);
        have_old = 1;
        h_last = h;
    }
    return 0;
}

/*
 * dpmpp_3m_sde (ComfyUI's sample_dpmpp_3m_sde; sd15.md does not
 * spell it out): the 2M SDE step with a third-order correction from the last
 * two predictions once both exist. d1, d2 hold the previous two x0.
 */
static int run_dpmpp_3m_sde(struct sampling__ctx *c, float *x, float *den, float *d1s, float *d2s)
{
    const float *sig = c->run->sigmas;
    size_t n = c->n;
    int rc, have1 = 0, have2 = 0;
    const float eta = (float)c->o.eta, eta1 = (float)(c->o.eta + 1.0), sno = (float)c->o.s_noise;
    const int noisy = c->o.eta > 0.0 && c->o.s_noise > 0.0;
    float h = 0.0f, h1 = 0.0f, h2 = 0.0f;
    for (int i = 0; i < c->run->n_sigmas - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        if (sn == 0.0f) {
            memcpy(x, den, n * sizeof *x);
        } else {
            float ls = -logf(s), lt = -logf(sn);
            h = lt - ls;
            float h_eta = h * eta1;
            float alpha_t = sn * expf(lt);
            float a = (sn / s) * expf((-h) * eta);
            float b = alpha_t * -expm1f(-h_eta);
            for (size_t k = 0; k < n; k++) {
                float p = a * x[k];
                x[k] = p + b * den[k];
            }
            if (have2) {
                float r0 = h1 / h, r1 = h2 / h;
                float phi2 = expm1f(-h_eta) / h_eta + 1.0f;
                float phi3 = phi2 / h_eta - 0.5f;
                float c2 = alpha_t * phi2, c3 = alpha_t * phi3;
                float rs = r0 + r1;
                for (size_t k = 0; k < n; k++) {
                    float d10 = (den[k] - d1s[k]) / r0;
                    float d11 = (d1s[k] - d2s[k]) / r1;
                    float dd = d10 - d11;
                    float e1 = d10 + dd * r0 / rs;
                    float e2 = dd / rs;
                    x[k] = x[k] + c2 * e1 - c3 * e2;
                }
            } else if (have1) {
                float r = h1 / h;
                float phi2 = expm1f(-h_eta) / h_eta + 1.0f;
                float c2 = alpha_t * phi2;
                for (size_t k = 0; k < n; k++) {
                    float d = (den[k] - d1s[k]) / r;
                    x[k] = x[k] + c2 * d;
                }
            }
            if (noisy) {
                float sq = sqrtf(-expm1f(((-2.0f) * h) * eta));
                const float *z = sampling__noise(c, s, sn);
                for (size_t k = 0; k < n; k++) {
                    float v = z[k] * sn;
                    v = v * sq;
                    v = v * sno;
                    x[k] = x[k] + v;
                }
            }
        }
        /* denoised_1, denoised_2 = denoised, denoised_1; h_1, h_2 = h, h_1 */
        memcpy(d2s, d1s, n * sizeof *d2s);
        memcpy(d1s, den, n * sizeof *d1s);
        have2 = have1;
        have1 = 1;
        h2 = h1;
        h1 = h;
    }
    return 0;
}

/*
 * ddpm (ComfyUI's generic_step_sampler + DDPMSampler_step): ancestral steps
 * of the discrete VP process on x / sqrt(1 + σ²), with ᾱ = 1 / (σ² + 1).
 */
static int run_ddpm(struct sampling__ctx *c, float *x, float *den)
{
    const float *sig = c->run->sigmas;
    size_t n = c->n;
    int rc;
    for (int i = 0; i < c->run->n_sigmas - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        float in_scale = sqrtf(1.0f + s * s);
        float ac = 1.0f / (s * s + 1.0f), acp = 1.0f / (sn * sn + 1.0f);
        float alpha = ac / acp;
        float k1 = sqrtf(1.0f / alpha), oma = 1.0f - alpha, sq = sqrtf(1.0f - ac);
        float kn = sqrtf(oma * (1.0f - acp) / (1.0f - ac));
        const float *z = sn > 0.0f ? sampling__noise(c, s, sn) : NULL;
        float out_scale = sqrtf(1.0f + sn * sn);
        for (size_t k = 0; k < n; k++) {
            float eps = (x[k] - den[k]) / s;
            float xs = x[k] / in_scale;
            float t = oma * eps;
            t = t / sq;
            float mu = k1 * (xs - t);
            if (z)
                mu = mu + kn * z[k];
            x[k] = sn != 0.0f ? mu * out_scale : mu;
        }
    }
    return 0;
}

static int run_dpmpp_2m(struct sampling__ctx *c, float *x, float *den, float *old)
{
    const float *sig = c->run->sigmas;
    size_t n = c->n;
    int rc, have_old = 0;
    for (int i = 0; i < c->run->n_sigmas - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        if (sn == 0.0f) {
            /* (σn/σ)·x − expm1(−∞)·den is exactly den; avoid log(0). */
            memcpy(x, den, n * sizeof *x);
        } else {
            float t = -logf(s), tn = -logf(sn);
            float h = tn - t;
            float a = expf(-tn) / expf(-t);
            float b = expm1f(-h);
            if (!have_old) {
                for (size_t k = 0; k < n; k++)
                    x[k] = a * x[k] - b * den[k];
            } else {
                float h_last = t - (-logf(sig[i - 1]));
                float r = h_last / h;
                float q = 1.0f / (2.0f * r);
                float p = 1.0f + q;
                for (size_t k = 0; k < n; k++) {
                    float dd = p * den[k] - q * old[k];
                    x[k] = a * x[k] - b * dd;
                }
            }
        }
        memcpy(old, den, n * sizeof *old);
        have_old = 1;
    }
    return 0;
}

static int run_lcm(struct sampling__ctx *c, float *x, float *den)
{
    const float *sig = c->run->sigmas;
    size_t n = c->n;
    int rc;
    for (int i = 0; i < c->run->n_sigmas - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        memcpy(x, den, n * sizeof *x);
        if (sn > 0.0f) {
            /* noise_scaling(σn, noise, x): noise·σn + x. */
            const float *z = sampling__noise(c, s, sn);
            for (size_t k = 0; k < n; k++) {
                float v = z[k] * sn;
                x[k] = v + x[k];
            }
        }
    }
    return 0;
}

int sampling_run_sampler(const struct sampling_run *run, float *x, size_t n, struct err *e)
{
    if (!run || !x || n == 0 || !run->denoise || (run->n_sigmas > 0 && !run->sigmas) ||
        run->n_sigmas < 0)
        return err_set(e, ERR_INVALID, "invalid sampler run");
    if ((int)run->sampler < 0 || run->sampler >= SAMPLING_SAMPLER_COUNT)
        return err_set(e, ERR_INVALID, "unknown sampler %d", (int)run->sampler);
    const char *name = sampling_sampler_name(run->sampler);
    if (sampling_sampler_is_stochastic(run->sampler) && !run->noise)
        return err_set(e, ERR_INVALID, "sampler '%s' needs a noise source", name);
    if (sampling_sampler_needs_uncond(run->sampler) && !run->uncond_x0)
        return err_set(e, ERR_INVALID, "sampler '%s' needs the uncond prediction", name);
    if (sampling_sampler_needs_tau(run->sampler) &&
        !(run->tau_sigma_start > 0.0 && isfinite(run->tau_sigma_start) &&
          run->tau_sigma_end >= 0.0 && isfinite(run->tau_sigma_end)))
        return err_set(e, ERR_INVALID,
                       "sampler '%s' needs the model's noise interval (start %g, end %g)", name,
                       run->tau_sigma_start, run->tau_sigma_end);
    if (run->inpaint && (!run->inpaint->mask || !run->inpaint->latent || !run->inpaint->noise))
        return err_set(e, ERR_INVALID, "incomplete inpaint mask for sampler '%s'", name);
    for (int i = 0; i < run->n_sigmas; i++) {
        if (!isfinite(run->sigmas[i]) || run->sigmas[i] < 0.0f)
            return err_set(e, ERR_INVALID, "invalid sigma %g at index %d", run->sigmas[i], i);
    }
    for (int i = 0; i + 1 < run->n_sigmas; i++) {
        /* A zero sigma may only end the schedule: every update divides by σ. */
        if (run->sigmas[i] == 0.0f)
            return err_set(e, ERR_INVALID, "sigma 0 before the last step (index %d)", i);
    }
    struct sampling_options o = SAMPLING_OPTIONS_DEFAULT;
    if (run->opts)
        o = *run->opts;
    if (!(o.eta >= 0.0 && o.eta <= 1e6) || !(o.s_noise >= 0.0 && o.s_noise <= 1e6) ||
        !(o.r > 0.0 && o.r <= 1e6) || o.lms_order < 1 || o.lms_order > SAMPLING__LMS_MAX_ORDER)
        return err_set(e, ERR_INVALID,
                       "invalid options for sampler '%s' (eta %g, s_noise %g, r %g, order %d)", name,
                       o.eta, o.s_noise, o.r, o.lms_order);
    if (run->n_sigmas <= 1)
        return 0;

    struct sampling__ctx c = {.run = run, .o = o, .n = n};
    /* den, d, x2, d2/den2/old, inpaint input, noise (families in other files add their own) */
    float *buf = NULL;
    int rc = sampling__scratch(&c, 6, &buf);
    if (rc < 0)
        return err_set(e, rc, "cannot allocate the state of sampler '%s'", name);
    float *den = buf, *d = buf + n, *x2 = buf + 2 * n, *d2 = buf + 3 * n;
    c.xin = buf + 4 * n;
    c.nz = buf + 5 * n;
    /* ComfyUI's SDE samplers build their BrownianTreeNoiseSampler before the first step. */
    int brownian = run->noise && (sampler_flags(run->sampler) & SAMPLER_BROWNIAN);
    if (brownian && (rc = sampling_noise_brownian_begin(run->noise, run->sigmas, run->n_sigmas, n,
                                                        e)) < 0)
        goto done;
    switch (run->sampler) {
    case SAMPLING_SAMPLER_EULER:
    case SAMPLING_SAMPLER_DDIM: rc = run_euler(&c, x, den, d); break;
    case SAMPLING_SAMPLER_EULER_CFG_PP: {
        /* sample_euler_cfg_pp: the ancestral CFG++ step with eta = 0, s_noise = 0. */
        struct sampling__ctx c0 = c;
        c0.o.eta = 0.0;
        c0.o.s_noise = 0.0;
        rc = run_euler_ancestral_cfg_pp(&c0, x, den, d);
        break;
    }
    case SAMPLING_SAMPLER_EULER_ANCESTRAL: rc = run_euler_ancestral(&c, x, den, d); break;
    case SAMPLING_SAMPLER_EULER_ANCESTRAL_CFG_PP:
        rc = run_euler_ancestral_cfg_pp(&c, x, den, d);
        break;
    case SAMPLING_SAMPLER_HEUN: rc = run_heun(&c, x, den, d, x2, d2); break;
    case SAMPLING_SAMPLER_DPM_2: rc = run_dpm_2(&c, x, den, d, x2, d2, 0); break;
    case SAMPLING_SAMPLER_DPM_2_ANCESTRAL: rc = run_dpm_2(&c, x, den, d, x2, d2, 1); break;
    case SAMPLING_SAMPLER_LMS: rc = sampling__run_lms(&c, x); break;
    case SAMPLING_SAMPLER_DPMPP_2S_ANCESTRAL: rc = run_dpmpp_2s_ancestral(&c, x, den, d, x2); break;
    case SAMPLING_SAMPLER_DPMPP_SDE:
    case SAMPLING_SAMPLER_DPMPP_SDE_GPU: rc = run_dpmpp_sde(&c, x, den, x2, d2); break;
    case SAMPLING_SAMPLER_DPMPP_2M: rc = run_dpmpp_2m(&c, x, den, d); break;
    case SAMPLING_SAMPLER_DPMPP_2M_SDE:
    case SAMPLING_SAMPLER_DPMPP_2M_SDE_GPU: rc = run_dpmpp_2m_sde(&c, x, den, d, 0); break;
    case SAMPLING_SAMPLER_DPMPP_2M_SDE_HEUN:
    case SAMPLING_SAMPLER_DPMPP_2M_SDE_HEUN_GPU: rc = run_dpmpp_2m_sde(&c, x, den, d, 1); break;
    case SAMPLING_SAMPLER_DPMPP_3M_SDE:
    case SAMPLING_SAMPLER_DPMPP_3M_SDE_GPU: rc = run_dpmpp_3m_sde(&c, x, den, d, x2); break;
    case SAMPLING_SAMPLER_DDPM: rc = run_ddpm(&c, x, den); break;
    case SAMPLING_SAMPLER_LCM: rc = run_lcm(&c, x, den); break;
    case SAMPLING_SAMPLER_HEUNPP2: rc = sampling__run_heunpp2(&c, x); break;
    case SAMPLING_SAMPLER_DPM_FAST: rc = sampling__run_dpm(&c, x, 0); break;
    case SAMPLING_SAMPLER_DPM_ADAPTIVE: rc = sampling__run_dpm(&c, x, 1); break;
    case SAMPLING_SAMPLER_DPMPP_2S_ANCESTRAL_CFG_PP:
    case SAMPLING_SAMPLER_DPMPP_2M_CFG_PP: rc = sampling__run_cfgpp(&c, x, run->sampler); break;
    case SAMPLING_SAMPLER_IPNDM:
    case SAMPLING_SAMPLER_IPNDM_V:
    case SAMPLING_SAMPLER_DEIS: rc = sampling__run_multistep(&c, x, run->sampler); break;
    case SAMPLING_SAMPLER_RES_MULTISTEP:
    case SAMPLING_SAMPLER_RES_MULTISTEP_CFG_PP:
    case SAMPLING_SAMPLER_RES_MULTISTEP_ANCESTRAL:
    case SAMPLING_SAMPLER_RES_MULTISTEP_ANCESTRAL_CFG_PP:
    case SAMPLING_SAMPLER_GRADIENT_ESTIMATION:
    case SAMPLING_SAMPLER_GRADIENT_ESTIMATION_CFG_PP: rc = sampling__run_res(&c, x, run->sampler); break;
    case SAMPLING_SAMPLER_ER_SDE:
    case SAMPLING_SAMPLER_SEEDS_2:
    case SAMPLING_SAMPLER_SEEDS_3: rc = sampling__run_seeds(&c, x, run->sampler); break;
    case SAMPLING_SAMPLER_SA_SOLVER: rc = sampling__run_sa(&c, x, 0); break;
    case SAMPLING_SAMPLER_SA_SOLVER_PECE: rc = sampling__run_sa(&c, x, 1); break;
    case SAMPLING_SAMPLER_UNI_PC: rc = sampling__run_unipc(&c, x, 0); break;
    case SAMPLING_SAMPLER_UNI_PC_BH2: rc = sampling__run_unipc(&c, x, 1); break;
    default: rc = ERR_INVALID; break;
    }
    if (brownian)
        sampling_noise_brownian_end(run->noise);
done:
    xfree(buf);
    if (rc == ERR_INTERRUPTED)
        return err_set(e, ERR_INTERRUPTED, "sampling interrupted");
    if (rc < 0 && e && e->code == 0)
        err_set(e, rc, "sampler '%s' failed: %s", name, err_str(rc));
    return rc;
}
