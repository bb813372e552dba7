/*
 * samplers_res — two samplers that correct an euler-like step with the
 * previous step's prediction, each with a CFG++ twin reading the uncond x0:
 *
 *   - res_multistep (_cfg_pp, _ancestral, _ancestral_cfg_pp): the second-order
 *     exponential multistep of RES (Zhang et al. 2023, arXiv 2308.02157) in
 *     λ = −ln σ, towards σ_down of get_ancestral_step (eta 0 for the plain
 *     ones, 1 for the ancestral ones, then noise·s_noise·σ_up);
 *   - gradient_estimation (_cfg_pp): euler plus (γ − 1)·(d − d_prev)·dt, γ = 2
 *     (Permenter & Yuan, "Interpreting and improving diffusion models from an
 *     optimization perspective").
 *
 * ComfyUI draws the per-step noise of res_multistep even with eta = 0 (it is
 * then multiplied by σ_up = 0); the draws of a run are its own, so the plain
 * ones draw nothing here.
 */
#include "samplers_impl.h"

#include <math.h>
#include <string.h>

#include "alloc.h"

/* torch.nan_to_num(v, nan=0.0): NaN to 0, ±inf to ±FLT_MAX. */
static float nan_to_num(float v)
{
    if (isnan(v))
        return 0.0f;
    if (isinf(v))
        return v > 0 ? 3.40282347e+38f : -3.40282347e+38f;
    return v;
}

static int run_res(struct sampling__ctx *c, float *x, float *den, float *old, double eta,
                   int cfg_pp)
{
    const float *sig = c->run->sigmas, *unc = c->run->uncond_x0;
    const float sno = (float)c->o.s_noise;
    size_t n = c->n;
    int rc, have_old = 0;
    float old_sd = 0.0f;
    for (int i = 0; i < c->run->n_sigmas - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        float sd, su;
        sampling__ancestral_step(s, sn, eta, &sd, &su);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        const float *pred = cfg_pp ? unc : den; /* the prediction the step follows */
        if (sd == 0.0f || !have_old) {
            if (cfg_pp) { /* x = denoised + d·σ_down, d from the uncond x0 */
                for (size_t k = 0; k < n; k++) {
                    float d = (x[k] - unc[k]) / s;
                    x[k] = den[k] + d * sd;
                }
            } else {
                float dt = sd - s;
                for (size_t k = 0; k < n; k++) {
                    float d = (x[k] - den[k]) / s;
                    x[k] = x[k] + d * dt;
                }
            }
        } else {
            float t = -logf(s), t_old = -logf(old_sd), t_next = -logf(sd);
            float t_prev = -logf(sig[i - 1]);
            float h = t_next - t;
            float c2 = (t_prev - t_old) / h;
            float mh = -h;
            float phi1 = expm1f(mh) / mh;
            float phi2 = (phi1 - 1.0f) / mh;
            float b1 = nan_to_num(phi1 - phi2 / c2), b2 = nan_to_num(phi2 / c2);
            float e = expf(-h);
            for (size_t k = 0; k < n; k++) {
                float xk = x[k];
                if (cfg_pp)
                    xk = xk + (den[k] - unc[k]);
                float m = b1 * pred[k];
                m = m + b2 * old[k];
                float a = e * xk;
                x[k] = a + h * m;
            }
        }
        if (sn > 0.0f && su != 0.0f) {
            const float *z = sampling__noise(c, s, sn);
            for (size_t k = 0; k < n; k++) {
                float b = z[k] * sno;
                x[k] = x[k] + b * su;
            }
        }
        memcpy(old, pred, n * sizeof *old);
        have_old = 1;
        old_sd = sd;
    }
    return 0;
}

static int run_ge(struct sampling__ctx *c, float *x, float *den, float *d, float *old_d,
                  int cfg_pp)
{
    const float *sig = c->run->sigmas, *unc = c->run->uncond_x0;
    const float g1 = (float)(2.0 - 1.0); /* ge_gamma − 1, a Python float */
    size_t n = c->n;
    int rc;
    for (int i = 0; i < c->run->n_sigmas - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        sampling__to_d(x, cfg_pp ? unc : den, s, d, n);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        float dt = sn - s;
        if (sn == 0.0f) {
            memcpy(x, den, n * sizeof *x);
        } else {
            for (size_t k = 0; k < n; k++) {
                float v = cfg_pp ? den[k] + d[k] * sn : x[k] + d[k] * dt;
                if (i >= 1) {
                    float bar = g1 * (d[k] - old_d[k]);
                    v = v + bar * dt;
                }
                x[k] = v;
            }
        }
        memcpy(old_d, d, n * sizeof *old_d);
    }
    return 0;
}

int sampling__run_res(struct sampling__ctx *c, float *x, enum sampling_sampler s)
{
    float *buf = NULL;
    int rc = sampling__scratch(c, 3, &buf);
    if (rc < 0)
        return rc;
    size_t n = c->n;
    switch (s) {
    case SAMPLING_SAMPLER_RES_MULTISTEP: rc = run_res(c, x, buf, buf + n, 0.0, 0); break;
    case SAMPLING_SAMPLER_RES_MULTISTEP_CFG_PP: rc = run_res(c, x, buf, buf + n, 0.0, 1); break;
    case SAMPLING_SAMPLER_RES_MULTISTEP_ANCESTRAL:
        rc = run_res(c, x, buf, buf + n, c->o.eta, 0);
        break;
    case SAMPLING_SAMPLER_RES_MULTISTEP_ANCESTRAL_CFG_PP:
        rc = run_res(c, x, buf, buf + n, c->o.eta, 1);
        break;
    case SAMPLING_SAMPLER_GRADIENT_ESTIMATION: rc = run_ge(c, x, buf, buf + n, buf + 2 * n, 0); break;
    default: rc = run_ge(c, x, buf, buf + n, buf + 2 * n, 1); break;
    }
    xfree(buf);
    return rc;
}
