/*
 * samplers_cfgpp — the CFG++ samplers (Chung et al. 2024) ComfyUI adds to
 * k-diffusion: dpmpp_2s_ancestral_cfg_pp and dpmpp_2m_cfg_pp (euler_cfg_pp is
 * euler_ancestral_cfg_pp with eta = s_noise = 0, in samplers.c). They read the
 * uncond x0 of the latest model call (run->uncond_x0, ComfyUI's post-CFG
 * "uncond_denoised"): the step's direction comes from it, the landing point
 * from the guided prediction. Eps models only (λ = −ln σ).
 */
#include "samplers_impl.h"

#include <math.h>
#include <string.h>

#include "alloc.h"

/*
 * sample_dpmpp_2s_ancestral_cfg_pp. Its second update reads the uncond x0 of the
 * midpoint evaluation (ComfyUI's temp[0] is overwritten by that call) next to the
 * first evaluation's guided x0: so does this one.
 */
static int run_2s_ancestral(struct sampling__ctx *c, float *x, float *den, float *x2,
                            float *den2)
{
    const float *sig = c->run->sigmas, *unc = c->run->uncond_x0;
    const float sno = (float)c->o.s_noise;
    size_t n = c->n;
    int rc;
    for (int i = 0; i < c->run->n_sigmas - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        float sd, su;
        sampling__ancestral_step(s, sn, c->o.eta, &sd, &su);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        if (sd == 0.0f) {
            for (size_t k = 0; k < n; k++) {
                float d = (x[k] - unc[k]) / s;
                x[k] = den[k] + d * sd;
            }
        } else {
            float t = -logf(s), tn = -logf(sd);
            float h = tn - t;
            float sm = t + 0.5f * h;
            float sig_s = expf(-sm), sig_t = expf(-t);
            float a1 = sig_s / sig_t, b1 = expm1f((-h) * 0.5f);
            for (size_t k = 0; k < n; k++) {
                float v = x[k] + (den[k] - unc[k]);
                x2[k] = a1 * v - b1 * den[k];
            }
            if ((rc = sampling__model(c, x2, sig_s, den2)) < 0)
                return rc;
            float a2 = expf(-tn) / sig_t, b2 = expm1f(-h);
            for (size_t k = 0; k < n; k++) {
                float v = x[k] + (den[k] - unc[k]);
                x[k] = a2 * v - b2 * den2[k];
            }
        }
        if (sn > 0.0f) {
            const float *z = sampling__noise(c, s, sn);
            for (size_t k = 0; k < n; k++) {
                float b = z[k] * sno;
                x[k] = x[k] + b * su;
            }
        }
    }
    return 0;
}

/* sample_dpmpp_2m_cfg_pp: dpmpp_2m whose history is the uncond x0. */
static int run_2m(struct sampling__ctx *c, float *x, float *den, float *old)
{
    const float *sig = c->run->sigmas, *unc = c->run->uncond_x0;
    size_t n = c->n;
    int rc, have_old = 0;
    for (int i = 0; i < c->run->n_sigmas - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        if (sn == 0.0f) {
            /* h = ∞: exp(−h) = 0 and x = denoised; avoid log(0). */
            memcpy(x, den, n * sizeof *x);
        } else {
            float t = -logf(s), tn = -logf(sn);
            float h = tn - t;
            float e = expf(-h), ne = -e;
            if (!have_old) {
                for (size_t k = 0; k < n; k++) {
                    float mix = ne * unc[k];
                    float v = den[k] + mix;
                    x[k] = v + e * x[k];
                }
            } else {
                float h_last = t - (-logf(sig[i - 1]));
                float r = h_last / h;
                float q = 1.0f / (2.0f * r);
                float cq = expm1f(-h) * q;
                for (size_t k = 0; k < n; k++) {
                    float a = ne * unc[k];
                    float mix = a - cq * (den[k] - old[k]);
                    float v = den[k] + mix;
                    x[k] = v + e * x[k];
                }
            }
        }
        memcpy(old, unc, n * sizeof *old);
        have_old = 1;
    }
    return 0;
}

int sampling__run_cfgpp(struct sampling__ctx *c, float *x, enum sampling_sampler s)
{
    float *buf = NULL;
    int rc = sampling__scratch(c, 3, &buf);
    if (rc < 0)
        return rc;
    size_t n = c->n;
    if (s == SAMPLING_SAMPLER_DPMPP_2S_ANCESTRAL_CFG_PP)
        rc = run_2s_ancestral(c, x, buf, buf + n, buf + 2 * n);
    else
        rc = run_2m(c, x, buf, buf + n);
    xfree(buf);
    return rc;
}
