/*
 * model_sampling — ComfyUI's ModelSamplingDiscrete (sd15.md §5.1, §5.2): the sigma
 * table (optionally zero-terminal-SNR), the sigma <-> timestep maps, and the sampling
 * type's calculate_input / calculate_denoised (comfy/model_sampling.py).
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "sampling_sched.h"

#include <math.h>
#include <string.h>

/* torch.linspace in float64: the first half counts up from a, the rest down from b. */
static double linspace64(double a, double b, int n, int i)
{
    if (n == 1)
        return a;
    double step = (b - a) / (double)(n - 1);
    if (i < n / 2)
        return a + step * (double)i;
    return b - step * (double)(n - 1 - i);
}

/*
 * rescale_zero_terminal_snr_sigmas on the float64 sigmas: sqrt(alpha_bar) shifted so
 * the last is 0 and scaled so the first keeps its value; the last alpha_bar is then
 * ComfyUI's 4.8973451890853435e-08 (an exact 0 would make sigma_max infinite).
 */
static void zsnr_rescale(double *sig, int n)
{
    double a0 = sqrt(1.0 / (sig[0] * sig[0] + 1.0));
    double aT = sqrt(1.0 / (sig[n - 1] * sig[n - 1] + 1.0));
    double scale = a0 / (a0 - aT);
    for (int i = 0; i < n; i++) {
        double a = sqrt(1.0 / (sig[i] * sig[i] + 1.0));
        a -= aT;
        a *= scale;
        double bar = a * a;
        if (i == n - 1)
            bar = 4.8973451890853435e-08;
        sig[i] = pow((1.0 - bar) / bar, 0.5);
    }
}

void sampling_discrete_init_zsnr(struct sampling_discrete *ms, double linear_start,
                                 double linear_end, int zsnr)
{
    const double lo = sqrt(linear_start), hi = sqrt(linear_end);
    double cumprod = 1.0;
    double sig[SAMPLING_TIMESTEPS]; /* 8 KiB of stack */
    for (int i = 0; i < SAMPLING_TIMESTEPS; i++) {
        double s = linspace64(lo, hi, SAMPLING_TIMESTEPS, i);
        double beta = s * s;
        cumprod *= 1.0 - beta;
        sig[i] = sqrt((1.0 - cumprod) / cumprod);
    }
    if (zsnr)
        zsnr_rescale(sig, SAMPLING_TIMESTEPS);
    for (int i = 0; i < SAMPLING_TIMESTEPS; i++) {
        ms->sigmas[i] = (float)sig[i];
        ms->log_sigmas[i] = (float)log(sig[i]); /* log of the float64 sigma, as set_sigmas */
    }
    ms->sigma_min = ms->sigmas[0];
    ms->sigma_max = ms->sigmas[SAMPLING_TIMESTEPS - 1];
    ms->prediction = SAMPLING_PREDICTION_EPS;
    ms->zsnr = zsnr != 0;
    ms->n = SAMPLING_TIMESTEPS;
    ms->skip = 1;
    ms->kind = SAMPLING_TIME_DISCRETE;
    ms->sigma_data = 1.0f;
}

void sampling_continuous_init(struct sampling_discrete *ms, enum sampling_time kind,
                              double sigma_min, double sigma_max, double sigma_data)
{
    double lo = log(sigma_min), hi = log(sigma_max);
    for (int i = 0; i < SAMPLING_TIMESTEPS; i++) {
        /* torch.linspace in float32, then .exp() and .log() of float32 tensors */
        ms->sigmas[i] = expf((float)linspace64(lo, hi, SAMPLING_TIMESTEPS, i));
        ms->log_sigmas[i] = logf(ms->sigmas[i]);
    }
    ms->sigma_min = ms->sigmas[0];
    ms->sigma_max = ms->sigmas[SAMPLING_TIMESTEPS - 1];
    ms->prediction = SAMPLING_PREDICTION_EPS;
    ms->zsnr = 0;
    ms->n = SAMPLING_TIMESTEPS;
    ms->skip = 1;
    ms->kind = kind;
    ms->sigma_data = (float)sigma_data;
}

double sampling_percent_to_sigma(const struct sampling_discrete *ms, double percent)
{
    if (percent <= 0.0)
        return 999999999.9;
    if (percent >= 1.0)
        return 0.0;
    percent = 1.0 - percent;
    if (ms->kind == SAMPLING_TIME_DISCRETE)
        return (double)sampling_discrete_sigma(ms, (float)(percent * 999.0));
    double lmin = log((double)ms->sigma_min);
    return exp((log((double)ms->sigma_max) - lmin) * percent + lmin);
}

void sampling_discrete_distill(struct sampling_discrete *ms)
{
    enum { ORIGINAL = 50 };
    int skip = ms->n / ORIGINAL;
    float v[ORIGINAL];
    for (int x = 0; x < ORIGINAL; x++)
        v[ORIGINAL - 1 - x] = ms->sigmas[ms->n - 1 - x * skip];
    for (int i = 0; i < ORIGINAL; i++) {
        ms->sigmas[i] = v[i];
        ms->log_sigmas[i] = logf(v[i]); /* set_sigmas on a float32 tensor */
    }
    ms->n = ORIGINAL;
    ms->skip = skip;
    ms->sigma_min = ms->sigmas[0];
    ms->sigma_max = ms->sigmas[ORIGINAL - 1];
}

void sampling_discrete_init(struct sampling_discrete *ms, double linear_start, double linear_end)
{
    sampling_discrete_init_zsnr(ms, linear_start, linear_end, 0);
}

int sampling_prediction_from_name(const char *name, enum sampling_prediction *out)
{
    static const char *const names[SAMPLING_PREDICTION_COUNT] = {"eps", "v_prediction", "x0",
                                                                 "img_to_img", "lcm", "edm"};
    for (int i = 0; i < SAMPLING_PREDICTION_COUNT; i++)
        if (strcmp(name, names[i]) == 0) {
            *out = (enum sampling_prediction)i;
            return 0;
        }
    return ERR_NOT_FOUND;
}

void sampling_model_input(const struct sampling_discrete *ms, const float *x, float sigma,
                          float *out, size_t n)
{
    if (ms->prediction == SAMPLING_PREDICTION_IMG_TO_IMG) {
        if (out != x)
            memmove(out, x, n * sizeof *x);
        return;
    }
    if (ms->sigma_data == 1.0f) {
        sampling_scale_input(x, sigma, out, n);
        return;
    }
    float d = sqrtf(sigma * sigma + ms->sigma_data * ms->sigma_data);
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] / d;
}

void sampling_denoiser_at(const struct sampling_discrete *ms, float sigma,
                          struct sampling_denoiser *d)
{
    d->prediction = ms->prediction;
    d->sigma = sigma;
    d->sdat = ms->sigma_data;
    d->sd2 = ms->sigma_data * ms->sigma_data;
    d->var = sigma * sigma + d->sd2;
    d->sd = sqrtf(d->var);
    d->c_skip = d->c_out = 0.0f;
    if (ms->prediction == SAMPLING_PREDICTION_LCM) {
        float st = (float)sampling_discrete_timestep(ms, sigma) * 10.0f; /* timestep_scaling */
        d->c_skip = 0.25f / (st * st + 0.25f);
        d->c_out = st / sqrtf(st * st + 0.25f);
    }
}

float sampling_discrete_timestep(const struct sampling_discrete *ms, float sigma)
{
    if (ms->kind == SAMPLING_TIME_EDM)
        return 0.25f * logf(sigma);
    if (ms->kind == SAMPLING_TIME_V)
        return (float)(atan((double)sigma) / M_PI * 2.0);
    float ls = logf(sigma);
    int best = 0;
    float best_d = fabsf(ls - ms->log_sigmas[0]);
    for (int i = 1; i < ms->n; i++) {
        float d = fabsf(ls - ms->log_sigmas[i]);
        if (d < best_d) { /* strict: the first index wins ties, as argmin does */
            best_d = d;
            best = i;
        }
    }
    return (float)(best * ms->skip + (ms->skip - 1)); /* distilled: entry -> model timestep */
}

float sampling_discrete_sigma(const struct sampling_discrete *ms, float t)
{
    if (ms->kind == SAMPLING_TIME_EDM)
        return expf(t / 0.25f);
    if (ms->kind == SAMPLING_TIME_V)
        return (float)tan((double)t * M_PI / 2.0);
    if (!(t >= 0.0f)) /* also maps NaN to 0 */
        t = 0.0f;
    if (ms->skip > 1) /* distilled: model timestep -> table entry */
        t = (t - (float)(ms->skip - 1)) / (float)ms->skip;
    if (!(t >= 0.0f))
        t = 0.0f;
    if (t > (float)(ms->n - 1))
        t = (float)(ms->n - 1);
    int lo = (int)floorf(t), hi = (int)ceilf(t);
    float w = t - truncf(t);
    float a = (1.0f - w) * ms->log_sigmas[lo];
    float b = w * ms->log_sigmas[hi];
    return expf(a + b);
}

float sampling_c_in(float sigma)
{
    float s2 = sigma * sigma;
    return 1.0f / sqrtf(s2 + 1.0f);
}

void sampling_scale_input(const float *x, float sigma, float *out, size_t n)
{
    /* EPS.calculate_input divides by (sigma^2 + 1)^0.5; keep the division. */
    float d = sqrtf(sigma * sigma + 1.0f);
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] / d;
}

void sampling_eps_to_x0(const float *x, const float *eps, float sigma, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] - eps[i] * sigma;
}
