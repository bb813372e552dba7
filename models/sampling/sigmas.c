/*
 * sigmas — k-diffusion's closed-form schedules with user parameters (see
 * sampling_sigmas.h). Float32 steps in PyTorch's operation order; contraction
 * into FMAs is off so that each op rounds once, as a tensor op does.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "sampling_sigmas.h"

#include <math.h>

/* torch.linspace(a, b, n)[i] in float32: from both ends towards the middle. */
static float linspace32(double a, double b, int n, int i)
{
    float fa = (float)a, fb = (float)b;
    if (n == 1)
        return fa;
    float step = (fb - fa) / (float)(n - 1);
    if (i < n / 2)
        return fa + step * (float)i;
    return fb - step * (float)(n - 1 - i);
}

/* tensor ** python_float: PyTorch's special exponents, else powf. */
static float pow_scalar(float x, double e)
{
    if (e == 2.0)
        return x * x;
    if (e == 3.0)
        return x * x * x;
    if (e == 0.5)
        return sqrtf(x);
    if (e == -1.0)
        return 1.0f / x;
    return powf(x, (float)e);
}

int sampling_sigmas_karras(int n, double sigma_min, double sigma_max, double rho, float *out)
{
    double min_inv = pow(sigma_min, 1.0 / rho), max_inv = pow(sigma_max, 1.0 / rho);
    float diff = (float)(min_inv - max_inv), maxf = (float)max_inv;
    for (int k = 0; k < n; k++) {
        float b = linspace32(0.0, 1.0, n, k) * diff;
        out[k] = pow_scalar(b + maxf, rho);
    }
    out[n] = 0.0f;
    return n + 1;
}

int sampling_sigmas_exponential(int n, double sigma_min, double sigma_max, float *out)
{
    for (int k = 0; k < n; k++)
        out[k] = expf(linspace32(log(sigma_max), log(sigma_min), n, k));
    out[n] = 0.0f;
    return n + 1;
}

int sampling_sigmas_polyexponential(int n, double sigma_min, double sigma_max, double rho,
                                    float *out)
{
    float span = (float)(log(sigma_max) - log(sigma_min)), lmin = (float)log(sigma_min);
    for (int k = 0; k < n; k++) {
        float ramp = pow_scalar(linspace32(1.0, 0.0, n, k), rho);
        float v = ramp * span;
        out[k] = expf(v + lmin);
    }
    out[n] = 0.0f;
    return n + 1;
}

int sampling_sigmas_vp(int n, double beta_d, double beta_min, double eps_s, float *out)
{
    for (int k = 0; k < n; k++) {
        float t = linspace32(1.0, eps_s, n, k);
        float a = (float)beta_d * (t * t);
        a = a / 2.0f;
        float b = (float)beta_min * t;
        out[k] = sqrtf(expm1f(a + b));
    }
    out[n] = 0.0f;
    return n + 1;
}

int sampling_sigmas_laplace(int n, double sigma_min, double sigma_max, double mu, double beta,
                            float *out)
{
    for (int k = 0; k < n; k++) {
        float x = linspace32(0.0, 1.0, n, k);
        float c = 0.5f - x;
        float sign = (float)((c > 0.0f) - (c < 0.0f));
        float l = 2.0f * fabsf(c);
        l = 1.0f - l;
        l = logf(l + 1e-5f);
        float bs = (float)beta * sign;
        float lmb = (float)mu - bs * l;
        float s = expf(lmb);
        /* torch.clamp(min, max): max(x, min) first, then min(·, max). */
        s = s < (float)sigma_min ? (float)sigma_min : s;
        out[k] = s > (float)sigma_max ? (float)sigma_max : s;
    }
    return n;
}

int sampling_sigmas_sdturbo(const struct sampling_discrete *ms, int steps, double denoise,
                            float *out)
{
    int start = 10 - (int)(10.0 * denoise), n = 0;
    for (int i = start; i >= 0 && i < 10 && n < steps; i++)
        out[n++] = sampling_discrete_sigma(ms, (float)((10 - i) * 100 - 1));
    out[n++] = 0.0f;
    return n;
}
