/*
 * schedulers — ComfyUI's sigma schedules (sd15.md §5.5) and the KSampler
 * sigma-list logic (§5.6). Each formula keeps PyTorch's dtypes: a Python
 * float is a double, a tensor op on float32 rounds to float32.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "sampling_sched.h"
#include "sampling_sigmas.h"

#include <math.h>
#include <string.h>

#include "alloc.h"

static const char *const scheduler_names[SAMPLING_SCHEDULER_COUNT] = {
    "simple", "sgm_uniform", "karras", "exponential", "ddim_uniform",
    "beta", "normal", "linear_quadratic", "kl_optimal",
};

const char *sampling_scheduler_name(enum sampling_scheduler s)
{
    if ((int)s < 0 || s >= SAMPLING_SCHEDULER_COUNT)
        return NULL;
    return scheduler_names[s];
}

int sampling_scheduler_from_name(const char *name, enum sampling_scheduler *out)
{
    for (int i = 0; name && i < SAMPLING_SCHEDULER_COUNT; i++) {
        if (strcmp(name, scheduler_names[i]) == 0) {
            *out = (enum sampling_scheduler)i;
            return 0;
        }
    }
    return ERR_NOT_FOUND;
}

/* torch.linspace(a, b, n) element i in float32 (scalar formula, §5.5). */
static float linspace32(float a, float b, int n, int i)
{
    if (n == 1)
        return a;
    float step = (b - a) / (float)(n - 1);
    if (i < n / 2)
        return a + step * (float)i;
    return b - step * (float)(n - 1 - i);
}

static int sched_normal(const struct sampling_discrete *ms, int steps, int sgm, float *v)
{
    float start = (float)sampling_discrete_timestep(ms, ms->sigma_max);
    float end = (float)sampling_discrete_timestep(ms, ms->sigma_min);
    int n = 0;
    if (sgm) {
        for (int k = 0; k < steps; k++)
            v[n++] = sampling_discrete_sigma(ms, linspace32(start, end, steps + 1, k));
        v[n++] = 0.0f;
        return n;
    }
    int append_zero = 1;
    if (fabsf(sampling_discrete_sigma(ms, end)) <= 1e-5f) {
        /* Never for SD1.5 (sigma_min = 0.029); kept for models whose table reaches 0. */
        steps += 1;
        append_zero = 0;
    }
    for (int k = 0; k < steps; k++)
        v[n++] = sampling_discrete_sigma(ms, linspace32(start, end, steps, k));
    if (append_zero)
        v[n++] = 0.0f;
    return n;
}

static int sched_simple(const struct sampling_discrete *ms, int steps, float *v)
{
    double ss = (double)ms->n / (double)steps; /* len(sigmas): 50 for a distilled table */
    int n = 0;
    for (int k = 0; k < steps; k++)
        v[n++] = ms->sigmas[ms->n - 1 - (int)((double)k * ss)];
    v[n++] = 0.0f;
    return n;
}

static int sched_ddim_uniform(const struct sampling_discrete *ms, int steps, float *v)
{
    /* Collected ascending, then reversed. sigma[1] is never ~0 for SD1.5. */
    int n = 0;
    if (fabs((double)ms->sigmas[1]) <= 1e-5)
        steps += 1;
    else
        v[n++] = 0.0f;
    int stride = ms->n / steps;
    if (stride < 1)
        stride = 1;
    for (int x = 1; x < ms->n; x += stride)
        v[n++] = ms->sigmas[x];
    for (int i = 0, j = n - 1; i < j; i++, j--) {
        float t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
    return n;
}

static int sched_karras(const struct sampling_discrete *ms, int steps, float *v)
{
    const double rho = 7.0;
    double min_inv = pow((double)ms->sigma_min, 1.0 / rho);
    double max_inv = pow((double)ms->sigma_max, 1.0 / rho);
    /* ramp (float32 tensor) * python float: the scalar is rounded to float. */
    float diff = (float)(min_inv - max_inv);
    float maxf = (float)max_inv;
    for (int k = 0; k < steps; k++) {
        float ramp = linspace32(0.0f, 1.0f, steps, k);
        float b = ramp * diff;
        b = b + maxf;
        v[k] = powf(b, 7.0f);
    }
    v[steps] = 0.0f;
    return steps + 1;
}

static int sched_exponential(const struct sampling_discrete *ms, int steps, float *v)
{
    float a = (float)log((double)ms->sigma_max);
    float b = (float)log((double)ms->sigma_min);
    for (int k = 0; k < steps; k++)
        v[k] = expf(linspace32(a, b, steps, k));
    v[steps] = 0.0f;
    return steps + 1;
}

/* numpy.rint: round half to even. */
static double rint_even(double x)
{
    double r = floor(x);
    double f = x - r;
    if (f > 0.5 || (f == 0.5 && fmod(r, 2.0) != 0.0))
        r += 1.0;
    return r;
}

int sampling_sigmas_beta(const struct sampling_discrete *ms, int steps, double alpha,
                         double beta, float *v)
{
    const double total = (double)(ms->n - 1);
    double step = 1.0 / (double)steps; /* numpy.linspace(0, 1, steps, endpoint=False) */
    double last_t = -1.0;
    int n = 0;
    for (int k = 0; k < steps; k++) {
        double u = 1.0 - (double)k * step;
        double t = rint_even(sampling__beta_ppf(u, alpha, beta) * total);
        if (t != last_t)
            v[n++] = ms->sigmas[(int)t];
        last_t = t;
    }
    v[n++] = 0.0f;
    return n;
}

static int sched_beta(const struct sampling_discrete *ms, int steps, float *v)
{
    return sampling_sigmas_beta(ms, steps, 0.6, 0.6, v);
}

static int sched_linear_quadratic(const struct sampling_discrete *ms, int steps, float *v)
{
    const double thr = 0.025;
    double *sch = xmalloc((size_t)(steps + 1) * sizeof *sch);
    if (steps == 1) {
        sch[0] = 1.0;
        sch[1] = 0.0;
    } else {
        int ls = steps / 2;
        double diff = (double)ls - thr * (double)steps;
        int qs = steps - ls;
        double qc = diff / ((double)ls * (double)qs * (double)qs);
        double lc = thr / (double)ls - 2.0 * diff / ((double)qs * (double)qs);
        double c = qc * ((double)ls * (double)ls);
        int n = 0;
        for (int i = 0; i < ls; i++)
            sch[n++] = (double)i * thr / (double)ls;
        for (int i = ls; i < steps; i++)
            sch[n++] = qc * ((double)i * (double)i) + lc * (double)i + c;
        sch[n++] = 1.0;
        for (int i = 0; i < n; i++)
            sch[i] = 1.0 - sch[i];
    }
    for (int i = 0; i <= steps; i++)
        v[i] = (float)sch[i] * ms->sigma_max;
    xfree(sch);
    return steps + 1;
}

static int sched_kl_optimal(const struct sampling_discrete *ms, int steps, float *v)
{
    float amin = (float)atan((double)ms->sigma_min);
    float amax = (float)atan((double)ms->sigma_max);
    for (int k = 0; k < steps; k++) {
        /*
         * ComfyUI divides by steps - 1, which is 0/0 = NaN for one step; we
         * take alpha = 0 there (a single step from sigma_max), a decision.
         */
        float a = steps > 1 ? (float)k / (float)(steps - 1) : 0.0f;
        float p = a * amin;
        float q = (1.0f - a) * amax;
        v[k] = tanf(p + q);
    }
    v[steps] = 0.0f;
    return steps + 1;
}

int sampling_schedule(const struct sampling_discrete *ms, enum sampling_scheduler sched,
                      int steps, float **out, int *n_out, struct err *e)
{
    *out = NULL;
    *n_out = 0;
    if (steps < 1 || steps > 1000000)
        return err_set(e, ERR_INVALID, "invalid step count %d", steps);
    /* ddim_uniform can return up to 1000 entries whatever `steps` is. */
    size_t cap = (size_t)(steps > SAMPLING_TIMESTEPS ? steps : SAMPLING_TIMESTEPS) + 2;
    float *v = xmalloc(cap * sizeof *v);
    int n;
    switch (sched) {
    case SAMPLING_SCHEDULER_SIMPLE: n = sched_simple(ms, steps, v); break;
    case SAMPLING_SCHEDULER_SGM_UNIFORM: n = sched_normal(ms, steps, 1, v); break;
    case SAMPLING_SCHEDULER_KARRAS: n = sched_karras(ms, steps, v); break;
    case SAMPLING_SCHEDULER_EXPONENTIAL: n = sched_exponential(ms, steps, v); break;
    case SAMPLING_SCHEDULER_DDIM_UNIFORM: n = sched_ddim_uniform(ms, steps, v); break;
    case SAMPLING_SCHEDULER_BETA: n = sched_beta(ms, steps, v); break;
    case SAMPLING_SCHEDULER_NORMAL: n = sched_normal(ms, steps, 0, v); break;
    case SAMPLING_SCHEDULER_LINEAR_QUADRATIC: n = sched_linear_quadratic(ms, steps, v); break;
    case SAMPLING_SCHEDULER_KL_OPTIMAL: n = sched_kl_optimal(ms, steps, v); break;
    default:
        xfree(v);
        return err_set(e, ERR_INVALID, "unknown scheduler %d", (int)sched);
    }
    *out = v;
    *n_out = n;
    return 0;
}

int sampling_sigmas_for_ksampler(const struct sampling_discrete *ms,
                                 enum sampling_scheduler sched, int discard_penultimate,
                                 int steps, double denoise, int start_step, int last_step,
                                 int force_full_denoise, float **out, int *n_out,
                                 struct err *e)
{
    *out = NULL;
    *n_out = 0;
    if (steps < 1)
        return err_set(e, ERR_INVALID, "invalid step count %d", steps);
    if (isnan(denoise))
        return err_set(e, ERR_INVALID, "invalid denoise 'nan'");
    if (denoise <= 0.0)
        return 0;
    int total = steps;
    if (denoise <= 0.9999) {
        double t = floor((double)steps / denoise);
        if (t > 1000000.0)
            return err_set(e, ERR_INVALID, "denoise %g too small for %d steps", denoise, steps);
        total = (int)t;
    }
    float *v;
    int n, rc;
    if ((rc = sampling_schedule(ms, sched, total + (discard_penultimate ? 1 : 0), &v, &n, e)) < 0)
        return rc;
    if (discard_penultimate && n >= 2) {
        v[n - 2] = v[n - 1];
        n--;
    }
    if (denoise <= 0.9999 && n > steps + 1) {
        /* Keep the last steps+1 entries (sigmas[-(steps + 1):]). */
        memmove(v, v + (n - (steps + 1)), (size_t)(steps + 1) * sizeof *v);
        n = steps + 1;
    }
    if (last_step >= 0 && last_step < n - 1) {
        n = last_step + 1;
        if (force_full_denoise)
            v[n - 1] = 0.0f;
    }
    if (start_step >= 0) {
        if (start_step < n - 1) {
            memmove(v, v + start_step, (size_t)(n - start_step) * sizeof *v);
            n -= start_step;
        } else {
            xfree(v);
            return 0; /* nothing to sample: the caller returns the latent as is */
        }
    }
    *out = v;
    *n_out = n;
    return 0;
}
