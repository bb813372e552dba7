/*
 * model_sampling — ComfyUI's ModelSamplingDiscrete for SD1.5 (sd15.md §5.1,
 * §5.2): the sigma table and the sigma <-> timestep maps.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "sampling_sched.h"

#include <math.h>

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

void sampling_discrete_init(struct sampling_discrete *ms, double linear_start, double linear_end)
{
    const double lo = sqrt(linear_start), hi = sqrt(linear_end);
    double cumprod = 1.0;
    for (int i = 0; i < SAMPLING_TIMESTEPS; i++) {
        double s = linspace64(lo, hi, SAMPLING_TIMESTEPS, i);
        double beta = s * s;
        cumprod *= 1.0 - beta;
        double sigma = sqrt((1.0 - cumprod) / cumprod);
        ms->sigmas[i] = (float)sigma;
        ms->log_sigmas[i] = (float)log(sigma);
    }
    ms->sigma_min = ms->sigmas[0];
    ms->sigma_max = ms->sigmas[SAMPLING_TIMESTEPS - 1];
}

int sampling_discrete_timestep(const struct sampling_discrete *ms, float sigma)
{
    float ls = logf(sigma);
    int best = 0;
    float best_d = fabsf(ls - ms->log_sigmas[0]);
    for (int i = 1; i < SAMPLING_TIMESTEPS; i++) {
        float d = fabsf(ls - ms->log_sigmas[i]);
        if (d < best_d) { /* strict: the first index wins ties, as argmin does */
            best_d = d;
            best = i;
        }
    }
    return best;
}

float sampling_discrete_sigma(const struct sampling_discrete *ms, float t)
{
    if (!(t >= 0.0f)) /* also maps NaN to 0 */
        t = 0.0f;
    if (t > (float)(SAMPLING_TIMESTEPS - 1))
        t = (float)(SAMPLING_TIMESTEPS - 1);
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
