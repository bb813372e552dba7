/*
 * samplers_seeds — the stochastic exponential-integrator samplers in the
 * half-logSNR λ = −ln σ (eps and v models; ComfyUI's flow-model branch, λ =
 * logit, is not ours):
 *
 *   - er_sde: ER-SDE-Solver-3 (Cui et al. 2023, VP data prediction), noise scaler
 *     x·(e^{x^0.3} + 10) on er_λ = exp(−λ), its integrals as the source's
 *     200-point sums (in double here: torch's float32 sum order is its own);
 *   - seeds_2, seeds_3: SEEDS-2/3 (Gonzalez et al. 2023), stages at r = 1/2 and
 *     r = 1/3, 2/3 of the step in λ, the noise of each stage carried into the next.
 *
 * All draw from the run's stream (k-diffusion's default noise sampler), seeds
 * twice or three times per step. KSampler's options: eta 1, s_noise 1.
 */
#include "samplers_impl.h"

#include <math.h>
#include <string.h>

#include "alloc.h"

#define ER_POINTS 200

/* default_er_sde_noise_scaler: x·(exp(x^0.3) + 10), in float32. */
static float er_scale(float v)
{
    return v * (expf(powf(v, 0.3f)) + 10.0f);
}

/* torch.lerp(a, b, w) with a scalar weight, as its CPU kernel branches. */
static float lerp(float a, float b, float w)
{
    float diff = b - a;
    return w < 0.5f ? a + w * diff : b - diff * (1.0f - w);
}

static int run_er_sde(struct sampling__ctx *c, float *x, float *den, float *old, float *dd,
                      float *old_dd, float *lam)
{
    const float *sig = c->run->sigmas;
    const int ns = c->run->n_sigmas;
    const float sno = (float)c->o.s_noise;
    size_t n = c->n;
    int rc;
    for (int i = 0; i < ns; i++) /* er_lambdas = exp(−(−log σ)) */
        lam[i] = expf(-(-logf(sig[i])));
    for (int i = 0; i < ns - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        int stage = i + 1 < 3 ? i + 1 : 3;
        if (sn == 0.0f) {
            memcpy(x, den, n * sizeof *x);
            memcpy(old, den, n * sizeof *old);
            continue;
        }
        float ls = lam[i], lt = lam[i + 1];
        float alpha_s = s / ls, alpha_t = sn / lt;
        float r_alpha = alpha_t / alpha_s;
        float r = er_scale(lt) / er_scale(ls);
        float a = r_alpha * r, b = alpha_t * (1.0f - r);
        for (size_t k = 0; k < n; k++) {
            float p = a * x[k];
            x[k] = p + b * den[k];
        }
        if (stage >= 2) {
            float dt = lt - ls;
            float step = -dt / (float)ER_POINTS;
            double s1 = 0.0, su = 0.0;
            for (int q = 0; q < ER_POINTS; q++) {
                float pos = lt + (float)q * step;
                float sc = er_scale(pos);
                s1 += (double)(1.0f / sc);
                su += (double)((pos - ls) / sc);
            }
            float sum1 = (float)s1 * step, sum_u = (float)su * step;
            float dl = ls - lam[i - 1];
            float c2 = alpha_t * (dt + sum1 * er_scale(lt));
            for (size_t k = 0; k < n; k++) {
                float d = (den[k] - old[k]) / dl;
                dd[k] = d;
                x[k] = x[k] + c2 * d;
            }
            if (stage >= 3) {
                float half = (ls - lam[i - 2]) / 2.0f;
                float dt2 = dt * dt;
                float c3 = alpha_t * (dt2 / 2.0f + sum_u * er_scale(lt));
                for (size_t k = 0; k < n; k++) {
                    float u = (dd[k] - old_dd[k]) / half;
                    x[k] = x[k] + c3 * u;
                }
            }
            memcpy(old_dd, dd, n * sizeof *old_dd);
        }
        if (c->o.s_noise > 0.0) {
            float v = lt * lt - (ls * ls) * (r * r);
            float sq = sqrtf(v);
            if (isnan(sq))
                sq = 0.0f;
            const float *z = sampling__noise(c, s, sn);
            for (size_t k = 0; k < n; k++) {
                float e = alpha_t * z[k];
                e = e * sno;
                x[k] = x[k] + e * sq;
            }
        }
        memcpy(old, den, n * sizeof *old);
    }
    return 0;
}

/* sqrt(−expm1(v)): the std of a noise segment. */
static float seg_std(float v)
{
    return sqrtf(-expm1f(v));
}

/* ei_h_phi_2(h) = (expm1(h) − h)/h. */
static float phi2(float h)
{
    return (expm1f(h) - h) / h;
}

/*
 * seeds_2 (three = 0, r = 1/2) and seeds_3 (three = 1, r1 = 1/3, r2 = 2/3). The
 * Python floats −r, −2r, r − 1, ... meet float32 tensors as float32.
 */
static int run_seeds(struct sampling__ctx *c, float *x, int three, float *den, float *x2,
                     float *den2, float *sde)
{
    const float *sig = c->run->sigmas;
    const float eta = (float)c->o.eta, eta1 = (float)(c->o.eta + 1.0), sno = (float)c->o.s_noise;
    const int inject = c->o.eta > 0.0 && c->o.s_noise > 0.0;
    const double r1 = three ? 1.0 / 3.0 : 0.5, r2 = 2.0 / 3.0;
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
        float ls = -logf(s), lt = -logf(sn);
        float h = lt - ls, h_eta = h * eta1;
        float l1 = lerp(ls, lt, (float)r1);
        float s1 = expf(-l1);
        float a1 = s1 * expf(l1), at = sn * expf(lt);

        /* Stage 1, to σ_s1. */
        float k1 = (s1 / s) * expf(((float)-r1 * h) * eta);
        float e1 = a1 * expm1f((float)-r1 * h_eta);
        for (size_t k = 0; k < n; k++) {
            float p = k1 * x[k];
            x2[k] = p - e1 * den[k];
        }
        if (inject) {
            float st = seg_std(((float)(-2.0 * r1) * h) * eta);
            const float *z = sampling__noise(c, s, s1);
            for (size_t k = 0; k < n; k++) {
                sde[k] = st * z[k];
                float v = sde[k] * s1;
                x2[k] = x2[k] + v * sno;
            }
        }
        if ((rc = sampling__model(c, x2, s1, den2)) < 0)
            return rc;

        float s_prev = s1; /* the noise segment's start */
        const float *dlast = den2;
        float b1 = 0.0f, b3 = 0.0f;
        if (three) {
            /* Stage 2, to σ_s2, from den and den2; den3 lands in x2's model output. */
            float l2 = lerp(ls, lt, (float)r2);
            float s2 = expf(-l2);
            float a2 = s2 * expf(l2);
            float a32 = (float)(r2 / r1) * phi2((float)-r2 * h_eta);
            float a31 = expm1f((float)-r2 * h_eta) - a32;
            float k2 = (s2 / s) * expf(((float)-r2 * h) * eta);
            for (size_t k = 0; k < n; k++) {
                float m = a31 * den[k];
                m = m + a32 * den2[k];
                float p = k2 * x[k];
                x2[k] = p - a2 * m;
            }
            if (inject) {
                float sf = ((float)(r1 - r2) * h) * eta;
                float ef = expf(sf), st = seg_std(sf * 2.0f);
                const float *z = sampling__noise(c, s1, s2);
                for (size_t k = 0; k < n; k++) {
                    sde[k] = sde[k] * ef;
                    sde[k] = sde[k] + st * z[k];
                    float v = sde[k] * s2;
                    x2[k] = x2[k] + v * sno;
                }
            }
            if ((rc = sampling__model(c, x2, s2, den2)) < 0)
                return rc;
            s_prev = s2;
            b3 = phi2(-h_eta) / (float)r2;
            b1 = expm1f(-h_eta) - b3;
        }

        /* Last stage, to σn. */
        float kt = (sn / s) * expf((-h) * eta);
        float et = at * expm1f(-h_eta);
        for (size_t k = 0; k < n; k++) {
            float m;
            if (three) {
                m = b1 * den[k];
                m = m + b3 * dlast[k];
                x[k] = kt * x[k] - at * m;
            } else {
                m = lerp(den[k], dlast[k], (float)(1.0 / (2.0 * r1)));
                x[k] = kt * x[k] - et * m;
            }
        }
        if (inject) {
            float sf = ((float)((three ? r2 : r1) - 1.0) * h) * eta;
            float ef = expf(sf), st = seg_std(sf * 2.0f);
            const float *z = sampling__noise(c, s_prev, sn);
            for (size_t k = 0; k < n; k++) {
                sde[k] = sde[k] * ef;
                sde[k] = sde[k] + st * z[k];
                float v = sde[k] * sn;
                x[k] = x[k] + v * sno;
            }
        }
    }
    return 0;
}

int sampling__run_seeds(struct sampling__ctx *c, float *x, enum sampling_sampler s)
{
    float *buf = NULL, *lam = NULL;
    int rc = sampling__scratch(c, 4, &buf);
    if (rc < 0)
        return rc;
    size_t n = c->n;
    if (s == SAMPLING_SAMPLER_ER_SDE) {
        if ((rc = xtry_malloc((size_t)c->run->n_sigmas * sizeof *lam, (void **)&lam, NULL)) == 0)
            rc = run_er_sde(c, x, buf, buf + n, buf + 2 * n, buf + 3 * n, lam);
    } else {
        rc = run_seeds(c, x, s == SAMPLING_SAMPLER_SEEDS_3, buf, buf + n, buf + 2 * n, buf + 3 * n);
    }
    xfree(lam);
    xfree(buf);
    return rc;
}
