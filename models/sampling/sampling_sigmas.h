/*
 * sampling_sigmas — the closed-form sigma schedules of k-diffusion that
 * ComfyUI's custom-sampling scheduler nodes expose with their own parameters
 * (KarrasScheduler, ExponentialScheduler, PolyexponentialScheduler,
 * VPScheduler, LaplaceScheduler, SDTurboScheduler, BetaSamplingScheduler).
 *
 * Each keeps PyTorch's dtypes: the parameters are Python floats (double), the
 * tensors float32, and a Python float meeting a float32 tensor is rounded to
 * float32 first. Results agree with ComfyUI to a few float32 ulps (PyTorch's
 * vectorised pow/exp may differ from libm by one ulp).
 *
 * Every function writes into a caller buffer `out` of at least n + 1 floats
 * (SDTurbo: steps + 1; beta: steps + 1) and returns the count written. The
 * parameters are not checked (callers validate what Python would reject).
 * Pure and reentrant: any thread.
 */
#ifndef LATENTD_SAMPLING_SIGMAS_H
#define LATENTD_SAMPLING_SIGMAS_H

#include "sampling_sched.h"

/* get_sigmas_karras: (max^(1/rho) + ramp·(min^(1/rho) − max^(1/rho)))^rho, then 0. n + 1. */
int sampling_sigmas_karras(int n, double sigma_min, double sigma_max, double rho, float *out);

/* get_sigmas_exponential: exp(linspace(ln max, ln min, n)), then 0. n + 1. */
int sampling_sigmas_exponential(int n, double sigma_min, double sigma_max, float *out);

/* get_sigmas_polyexponential: exp(linspace(1, 0, n)^rho·(ln max − ln min) + ln min), then 0. */
int sampling_sigmas_polyexponential(int n, double sigma_min, double sigma_max, double rho,
                                    float *out);

/* get_sigmas_vp: sqrt(expm1(beta_d·t²/2 + beta_min·t)), t = linspace(1, eps_s, n), then 0. */
int sampling_sigmas_vp(int n, double beta_d, double beta_min, double eps_s, float *out);

/*
 * get_sigmas_laplace: exp(mu − beta·sign(0.5 − x)·ln(1 − 2|0.5 − x| + 1e-5)), x =
 * linspace(0, 1, n), clamped to [sigma_min, sigma_max]; no trailing 0. Returns n.
 */
int sampling_sigmas_laplace(int n, double sigma_min, double sigma_max, double mu, double beta,
                            float *out);

/*
 * SDTurboScheduler: the model sigmas at timesteps 999, 899, ..., 99 from
 * index 10 − int(10·denoise), at most `steps` of them, then 0.
 */
int sampling_sigmas_sdturbo(const struct sampling_discrete *ms, int steps, double denoise,
                            float *out);

/*
 * comfy.samplers.beta_scheduler: model sigmas at rint(beta.ppf(1 − k/steps, alpha,
 * beta)·999) for k < steps, repeats dropped, then 0. At most steps + 1.
 */
int sampling_sigmas_beta(const struct sampling_discrete *ms, int steps, double alpha,
                         double beta, float *out);

#endif
