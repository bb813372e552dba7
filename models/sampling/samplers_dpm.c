/*
 * samplers_dpm — dpm_fast and dpm_adaptive: k-diffusion's DPM-Solver (Lu et
 * al. 2022, noise prediction in t = −ln σ) as ComfyUI's KSampler runs it: from
 * the first sigma to the last positive one (the schedule in between is not
 * used), eta = 0 (no noise), and for the adaptive solver order 3, rtol 0.05,
 * atol 0.0078, h_init 0.05 and the PID controller's integral term only.
 *
 *   - dpm_fast spends exactly n_sigmas − 1 model calls: floor(nfe/3) + 1 steps
 *     of orders 3, ..., 3 and then 2, 1 (nfe divisible by 3) or nfe mod 3, on
 *     torch.linspace(t_start, t_end). It reports once per step.
 *   - dpm_adaptive takes as many steps as its error control asks (three model
 *     calls each, rejected ones included) and reports every attempt. Its
 *     error norm is summed in double (torch's float32 reduction order is the
 *     library's), so a step whose error sits on the acceptance threshold
 *     could be decided differently.
 *
 * Both return the state at the last positive sigma, as ComfyUI does.
 */
#include "samplers_impl.h"

#include <math.h>
#include <string.h>

#include "alloc.h"

/* Stop a runaway adaptive run (a non-finite error would loop forever in ComfyUI). */
#define DPM_ADAPTIVE_MAX_STEPS 100000

struct dpm {
    struct sampling__ctx *c;
    float *den, *u;            /* model output; an intermediate state */
    float *eps, *eps1, *eps2;  /* the eps cache of one step: at t, at s1, at s2 */
    int have1, have2;          /* eps_r1 / eps_r2 are cached */
};

/* DPMSolver.eps: (x − model(x, σ(t))) / σ(t), σ(t) = exp(−t). */
static int eps_at(struct dpm *d, const float *x, float t, float *out)
{
    float sigma = expf(-t);
    int rc = sampling__model(d->c, x, sigma, d->den);
    if (rc < 0)
        return rc;
    for (size_t k = 0; k < d->c->n; k++)
        out[k] = (x[k] - d->den[k]) / sigma;
    return 0;
}

/* dpm_solver_1_step: x − σ(t_next)·expm1(h)·eps. */
static void step1(struct dpm *d, const float *x, float t, float tn, float *out)
{
    float h = tn - t;
    float a = expf(-tn) * expm1f(h);
    for (size_t k = 0; k < d->c->n; k++)
        out[k] = x[k] - a * d->eps[k];
}

/* u1 = x − σ(s1)·expm1(r1·h)·eps, and eps at it (cached as eps_r1). */
static int eps_r1(struct dpm *d, const float *x, float t, float h, float r1)
{
    if (d->have1)
        return 0;
    float rh = r1 * h;
    float s1 = t + rh;
    float a = expf(-s1) * expm1f(rh);
    for (size_t k = 0; k < d->c->n; k++)
        d->u[k] = x[k] - a * d->eps[k];
    int rc = eps_at(d, d->u, s1, d->eps1);
    d->have1 = rc == 0;
    return rc;
}

/* dpm_solver_2_step with r1 (a Python float: 1/2, or 1/3 for the adaptive low order). */
static int step2(struct dpm *d, const float *x, float t, float tn, double r1, float *out)
{
    float h = tn - t;
    int rc = eps_r1(d, x, t, h, (float)r1);
    if (rc < 0)
        return rc;
    float sn = expf(-tn), e = expm1f(h);
    float a = sn * e;
    float b = sn / (float)(2.0 * r1);
    b = b * e;
    for (size_t k = 0; k < d->c->n; k++) {
        float v = x[k] - a * d->eps[k];
        out[k] = v - b * (d->eps1[k] - d->eps[k]);
    }
    return 0;
}

/* dpm_solver_3_step, r1 = 1/3, r2 = 2/3 (r2 / r1 is exactly 2 in Python). */
static int step3(struct dpm *d, const float *x, float t, float tn, float *out)
{
    const float r1 = (float)(1.0 / 3.0), r2 = (float)(2.0 / 3.0);
    float h = tn - t;
    int rc = eps_r1(d, x, t, h, r1);
    if (rc < 0)
        return rc;
    float r2h = r2 * h;
    float s2 = t + r2h;
    float sig2 = expf(-s2), e2 = expm1f(r2h);
    float a2 = sig2 * e2;
    float b2 = sig2 * 2.0f;
    b2 = b2 * (e2 / r2h - 1.0f);
    for (size_t k = 0; k < d->c->n; k++) {
        float v = x[k] - a2 * d->eps[k];
        d->u[k] = v - b2 * (d->eps1[k] - d->eps[k]);
    }
    if (!d->have2) {
        if ((rc = eps_at(d, d->u, s2, d->eps2)) < 0)
            return rc;
        d->have2 = 1;
    }
    float sn = expf(-tn), e = expm1f(h);
    float a = sn * e;
    float b = sn / r2;
    b = b * (e / h - 1.0f);
    for (size_t k = 0; k < d->c->n; k++) {
        float v = x[k] - a * d->eps[k];
        out[k] = v - b * (d->eps2[k] - d->eps[k]);
    }
    return 0;
}

/* A new step: the eps cache starts empty, then eps at (x, t) and denoised = x − σ(t)·eps. */
static int begin(struct dpm *d, const float *x, float t, float *denoised)
{
    d->have1 = d->have2 = 0;
    int rc = eps_at(d, x, t, d->eps);
    if (rc < 0)
        return rc;
    float sigma = expf(-t);
    for (size_t k = 0; k < d->c->n; k++)
        denoised[k] = x[k] - sigma * d->eps[k];
    return 0;
}

/*
 * torch.linspace on the CPU in float32: step = (end − start)/(steps − 1), the first
 * half counted from start, the second from end. (Blocks of 16 and more points go
 * through torch's vectorised arange, which counts from the block start; that is
 * nfe ≥ 45 here, and moves a point by an ulp at most.)
 */
static void linspace(float start, float end, int steps, float *out)
{
    if (steps == 1) {
        out[0] = start;
        return;
    }
    float step = (end - start) / (float)(steps - 1);
    int halfway = steps / 2;
    for (int i = 0; i < steps; i++)
        out[i] = i < halfway ? start + step * (float)i : end - step * (float)(steps - i - 1);
}

static int run_fast(struct dpm *d, float *x, float t_start, float t_end, int nfe, float *tmp)
{
    const int m = nfe / 3 + 1;
    float ts_buf[64], *ts = ts_buf;
    int rc = 0;
    if (m + 1 > (int)(sizeof ts_buf / sizeof ts_buf[0]) &&
        (rc = xtry_malloc((size_t)(m + 1) * sizeof *ts, (void **)&ts, NULL)) < 0)
        return rc;
    linspace(t_start, t_end, m + 1, ts);
    for (int i = 0; i < m; i++) {
        int order = nfe % 3 == 0 ? (i < m - 2 ? 3 : i == m - 2 ? 2 : 1)
                                 : (i < m - 1 ? 3 : nfe % 3);
        float t = ts[i], tn = ts[i + 1];
        if ((rc = begin(d, x, t, tmp)) < 0 || (rc = sampling__report(d->c, i, tmp, x)) < 0)
            break;
        if (order == 1)
            step1(d, x, t, tn, tmp);
        else if (order == 2)
            rc = step2(d, x, t, tn, 0.5, tmp);
        else
            rc = step3(d, x, t, tn, tmp);
        if (rc < 0)
            break;
        memcpy(x, tmp, d->c->n * sizeof *x);
    }
    if (ts != ts_buf)
        xfree(ts);
    return rc;
}

/* PIDStepSizeController(h, 0, 1, 0, order 3, accept_safety 0.81, eps 1e-8), in double. */
struct pid {
    double h, errs[3];
    int started;
};

static int pid_propose(struct pid *p, float error)
{
    const double b1 = 1.0 / 3.0, b2 = -0.0 / 3.0, b3 = 0.0 / 3.0;
    double inv = 1.0 / ((double)error + 1e-8);
    if (!p->started) {
        p->errs[0] = p->errs[1] = p->errs[2] = inv;
        p->started = 1;
    }
    p->errs[0] = inv;
    double f = pow(p->errs[0], b1) * pow(p->errs[1], b2) * pow(p->errs[2], b3);
    f = 1.0 + atan(f - 1.0);
    int accept = f >= 0.81;
    if (accept) {
        p->errs[2] = p->errs[1];
        p->errs[1] = p->errs[0];
    }
    p->h *= f;
    return accept;
}

static int run_adaptive(struct dpm *d, float *x, float t_start, float t_end, float *lo,
                        float *hi, float *prev, float *denoised)
{
    const float atol = 0.0078f, rtol = 0.05f;
    const size_t n = d->c->n;
    const float norm_div = (float)sqrt((double)n);
    const float stop = t_end - 1e-5f;
    struct pid p = {.h = 0.05};
    float s = t_start;
    int rc;
    memcpy(prev, x, n * sizeof *prev);
    for (int step = 0; s < stop; step++) {
        if (step >= DPM_ADAPTIVE_MAX_STEPS || !isfinite(p.h))
            return ERR_INVALID;
        float t = s + (float)p.h;
        if (!(t <= t_end)) /* torch.minimum(t_end, s + h) */
            t = t_end;
        if ((rc = begin(d, x, s, denoised)) < 0 || (rc = step2(d, x, s, t, 1.0 / 3.0, lo)) < 0 ||
            (rc = step3(d, x, s, t, hi)) < 0)
            return rc;
        double sum = 0.0;
        for (size_t k = 0; k < n; k++) {
            float m = fabsf(lo[k]) > fabsf(prev[k]) ? fabsf(lo[k]) : fabsf(prev[k]);
            float delta = rtol * m;
            if (!(delta >= atol))
                delta = atol;
            float q = (lo[k] - hi[k]) / delta;
            sum += (double)q * q;
        }
        float error = (float)sqrt(sum) / norm_div;
        if (pid_propose(&p, error)) {
            float *tmp = prev; /* x_prev = x_low; x = x_high */
            prev = lo;
            lo = tmp;
            memcpy(x, hi, n * sizeof *x);
            s = t;
        }
        if ((rc = sampling__report(d->c, step, denoised, x)) < 0)
            return rc;
    }
    return 0;
}

int sampling__run_dpm(struct sampling__ctx *c, float *x, int adaptive)
{
    const float *sig = c->run->sigmas;
    const int ns = c->run->n_sigmas;
    float sigma_min = sig[ns - 1] != 0.0f ? sig[ns - 1] : sig[ns - 2];
    float t_start = -logf(sig[0]), t_end = -logf(sigma_min);
    float *buf = NULL;
    int rc = sampling__scratch(c, 9, &buf);
    if (rc < 0)
        return rc;
    size_t n = c->n;
    struct dpm d = {.c = c, .den = buf, .u = buf + n, .eps = buf + 2 * n, .eps1 = buf + 3 * n,
                    .eps2 = buf + 4 * n};
    if (adaptive)
        rc = run_adaptive(&d, x, t_start, t_end, buf + 5 * n, buf + 6 * n, buf + 7 * n,
                          buf + 8 * n);
    else
        rc = run_fast(&d, x, t_start, t_end, ns - 1, buf + 5 * n);
    xfree(buf);
    return rc;
}
