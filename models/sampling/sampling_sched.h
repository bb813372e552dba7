/*
 * sampling_sched — a discrete noise schedule (ComfyUI's
 * ModelSamplingDiscrete, epsilon prediction), the sigma <-> timestep maps the
 * UNet needs, the schedulers, and the sigma list KSampler / KSamplerAdvanced
 * build from them (sd15.md §5.1, §5.2, §5.5, §5.6).
 *
 * Everything is plain float32/float64 math with the same rounding steps as
 * PyTorch; schedules agree with ComfyUI to about 1e-6 relative (PyTorch's
 * vectorised linspace can differ from the scalar formula by one ulp, §5.5).
 *
 * Thread safety: all functions are pure over caller-owned data and may be
 * called from any thread.
 */
#ifndef LATENTD_SAMPLING_SCHED_H
#define LATENTD_SAMPLING_SCHED_H

#include <stddef.h>

#include "err.h"

#define SAMPLING_TIMESTEPS 1000

/* The noise table of a discrete-time epsilon model (caller-owned, ~8 KiB). */
struct sampling_discrete {
    float sigmas[SAMPLING_TIMESTEPS];     /* sigma[t], float32 from float64 math */
    float log_sigmas[SAMPLING_TIMESTEPS]; /* log of the float64 sigma, as float32 */
    float sigma_min;                      /* sigmas[0]   = 0.029167158 for SD1.5 */
    float sigma_max;                      /* sigmas[999] = 14.614641 for SD1.5 */
};

/*
 * Fill the table from scaled-linear betas linear_start .. linear_end (§5.1; SD1.x and
 * SDXL: 0.00085 .. 0.012, the family's struct family_sampling).
 */
void sampling_discrete_init(struct sampling_discrete *ms, double linear_start, double linear_end);

/*
 * sigma -> timestep for the UNet: the index of the nearest table entry in
 * log space (first index on ties). ComfyUI does not interpolate in this
 * direction, so the UNet always sees an integer t (§5.2).
 */
int sampling_discrete_timestep(const struct sampling_discrete *ms, float sigma);

/*
 * timestep -> sigma: t clamped to [0, 999], log-sigma interpolated linearly
 * between floor(t) and ceil(t), in float32 (§5.2). Used by the schedulers.
 */
float sampling_discrete_sigma(const struct sampling_discrete *ms, float t);

/* The UNet input scale for epsilon models: 1 / sqrt(sigma^2 + 1) (float32). */
float sampling_c_in(float sigma);

/*
 * The UNet's input: out = x / sqrt(sigma^2 + 1), divided as ComfyUI's
 * EPS.calculate_input does (x * c_in can differ in the last bit). out may be x.
 */
void sampling_scale_input(const float *x, float sigma, float *out, size_t n);

/*
 * The denoised prediction from the UNet's epsilon: out = x - eps * sigma
 * (EPS.calculate_denoised). out may alias x or eps.
 */
void sampling_eps_to_x0(const float *x, const float *eps, float sigma, float *out, size_t n);

/* Schedulers, in ComfyUI's KSampler.SCHEDULERS order (comfy-api.md §7.2). */
enum sampling_scheduler {
    SAMPLING_SCHEDULER_SIMPLE = 0,
    SAMPLING_SCHEDULER_SGM_UNIFORM,
    SAMPLING_SCHEDULER_KARRAS,
    SAMPLING_SCHEDULER_EXPONENTIAL,
    SAMPLING_SCHEDULER_DDIM_UNIFORM,
    SAMPLING_SCHEDULER_BETA,
    SAMPLING_SCHEDULER_NORMAL,
    SAMPLING_SCHEDULER_LINEAR_QUADRATIC,
    SAMPLING_SCHEDULER_KL_OPTIMAL,
    SAMPLING_SCHEDULER_COUNT
};

/* ComfyUI's name of `s` ("karras"); NULL when out of range. */
const char *sampling_scheduler_name(enum sampling_scheduler s);

/* Look a scheduler up by its exact ComfyUI name. 0, or ERR_NOT_FOUND. */
int sampling_scheduler_from_name(const char *name, enum sampling_scheduler *out);

/*
 * The scheduler's sigma list for `steps` steps, usually steps + 1 entries
 * ending in 0. ddim_uniform and beta may return a different count (§5.5).
 * On success *out is an array of *n_out floats the caller frees with xfree.
 * Returns 0, or ERR_INVALID for steps < 1 or an unknown scheduler.
 */
int sampling_schedule(const struct sampling_discrete *ms, enum sampling_scheduler sched,
                      int steps, float **out, int *n_out, struct err *e);

/*
 * The sigma list KSampler / KSamplerAdvanced sample over (§5.6), i.e.
 * ComfyUI's KSampler.set_steps followed by the start/last-step cutting of
 * KSampler.sample:
 *   - discard_penultimate: the sampler drops the second-to-last sigma
 *     (sampling_sampler_discards_penultimate());
 *   - denoise > 0.9999 full schedule; <= 0 empty; else the last steps+1
 *     entries of a floor(steps/denoise)-step schedule (img2img);
 *   - last_step >= 0: keep the first last_step+1 entries when shorter, and
 *     set the new last entry to 0 when force_full_denoise;
 *   - start_step >= 0: drop the first start_step entries, or return an empty
 *     list when start_step >= len - 1.
 * KSampler passes start_step = last_step = -1, force_full_denoise = 0;
 * KSamplerAdvanced passes denoise 1, its start/end steps and
 * force_full_denoise = (return_with_leftover_noise == "disable").
 * An empty list (*n_out == 0, *out may be NULL) means "return the input
 * latent unchanged". *out is freed by the caller with xfree.
 */
int sampling_sigmas_for_ksampler(const struct sampling_discrete *ms,
                                 enum sampling_scheduler sched, int discard_penultimate,
                                 int steps, double denoise, int start_step, int last_step,
                                 int force_full_denoise, float **out, int *n_out,
                                 struct err *e);

/*
 * Inverse CDF of the Beta(a, b) distribution at p in [0, 1] (SciPy's
 * beta.ppf), in double; exposed for tests of the beta scheduler.
 */
double sampling__beta_ppf(double p, double a, double b);

#endif
