/*
 * sampling_sched — a discrete noise schedule (ComfyUI's
 * ModelSamplingDiscrete, with its prediction type), the sigma <-> timestep maps the
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

/*
 * What the model's output is, and so how it becomes the x0 prediction: ComfyUI's
 * model_sampling.py sampling types (EPS, V_PREDICTION, X0, IMG_TO_IMG), which
 * ModelSamplingDiscrete mixes into the schedule. sigma_data is 1 for all of them.
 */
enum sampling_prediction {
    SAMPLING_PREDICTION_EPS = 0,    /* x0 = x - out·σ (SD1.x, SDXL, SD2 512) */
    SAMPLING_PREDICTION_V,          /* x0 = x/(σ²+1) - out·σ/sqrt(σ²+1) (SD2 768-v) */
    SAMPLING_PREDICTION_X0,         /* x0 = out */
    SAMPLING_PREDICTION_IMG_TO_IMG, /* x0 = out, and the input is not scaled */
    SAMPLING_PREDICTION_LCM,        /* consistency boundary mix of EPS's x0 and x (LCM) */
    SAMPLING_PREDICTION_EDM,        /* x0 = x·σd²/(σ²+σd²) + out·σ·σd/sqrt(σ²+σd²) */
    SAMPLING_PREDICTION_COUNT
};

/*
 * A discrete-time model's sampling (ComfyUI's ModelSamplingDiscrete with its sampling
 * type): the noise table and what the model predicts. Caller-owned, ~8 KiB; a plain
 * value, copied whole when a MODEL is cloned (ModelSamplingDiscrete's object patch).
 */
struct sampling_discrete {
    float sigmas[SAMPLING_TIMESTEPS];     /* sigma[t], float32 from float64 math */
    float log_sigmas[SAMPLING_TIMESTEPS]; /* log of the float64 sigma, as float32 */
    float sigma_min;                      /* sigmas[0]   = 0.029167158 for SD1.5 */
    float sigma_max;                      /* sigmas[999] = 14.614641 for SD1.5 */
    int prediction;                       /* enum sampling_prediction; EPS after init */
    int zsnr;                             /* the table was rescaled to zero terminal SNR */
    int n;    /* entries in use: 1000, or 50 after sampling_discrete_distill */
    int skip; /* model timesteps per entry: 1, or 20 after sampling_discrete_distill */
    int kind; /* enum sampling_time: how sigma maps to the model's timestep */
    float sigma_data; /* 1; 0.5 for ModelSamplingContinuousEDM's edm */
};

/*
 * The sigma <-> timestep map: ModelSamplingDiscrete's table index, or a continuous
 * formula (ModelSamplingContinuousEDM: t = 0.25 ln σ; ModelSamplingContinuousV:
 * t = atan(σ)·2/π), whose table is then only what the schedulers read.
 */
enum sampling_time {
    SAMPLING_TIME_DISCRETE = 0,
    SAMPLING_TIME_EDM,
    SAMPLING_TIME_V,
};

/*
 * ModelSamplingContinuousEDM / ModelSamplingContinuousV's set_parameters: 1000 sigmas
 * exp(linspace(ln sigma_min, ln sigma_max)) in float32, the `kind` map, sigma_data, and
 * epsilon prediction (the caller sets another). sigma_min must be > 0 and below sigma_max.
 */
void sampling_continuous_init(struct sampling_discrete *ms, enum sampling_time kind,
                              double sigma_min, double sigma_max, double sigma_data);

/*
 * percent_to_sigma: 0 -> 999999999.9, 1 -> 0; else sigma((1 - p)·999) on a discrete
 * table, exp of the log-sigma range at 1 - p on a continuous one.
 */
double sampling_percent_to_sigma(const struct sampling_discrete *ms, double percent);

/*
 * Fill the table from scaled-linear betas linear_start .. linear_end (§5.1; SD1.x and
 * SDXL: 0.00085 .. 0.012, the family's struct family_sampling), epsilon prediction.
 */
void sampling_discrete_init(struct sampling_discrete *ms, double linear_start, double linear_end);

/*
 * The same with zsnr: ComfyUI's rescale_zero_terminal_snr_sigmas applied to the float64
 * sigmas before they are rounded (sqrt(alpha_bar) shifted so the last is 0, scaled so
 * the first is unchanged, the last alpha_bar then set to 4.8973451890853435e-08:
 * sigma_max becomes ~4500).
 */
void sampling_discrete_init_zsnr(struct sampling_discrete *ms, double linear_start,
                                 double linear_end, int zsnr);

/*
 * ModelSamplingDiscreteDistilled (LCM, comfy_extras/nodes_model_advanced.py): keep 50 of
 * the 1000 entries, every 20th counted from the last (entry 49 - x = sigma[999 - 20x]);
 * timestep() then maps to entry * 20 + 19 and sigma() back, and the schedulers see the
 * 50-entry table as ComfyUI's do. Log-sigmas are recomputed from the float32 sigmas.
 */
void sampling_discrete_distill(struct sampling_discrete *ms);

/* "eps", "v_prediction", "lcm", "x0", "img_to_img", "edm" -> *out; 0, or ERR_NOT_FOUND. */
int sampling_prediction_from_name(const char *name, enum sampling_prediction *out);

/*
 * The model input for state x at sigma: calculate_input of ms's sampling type
 * (x / sqrt(σ²+1), divided as EPS does; x itself for IMG_TO_IMG). out may be x.
 */
void sampling_model_input(const struct sampling_discrete *ms, const float *x, float sigma,
                          float *out, size_t n);

/*
 * calculate_denoised's coefficients at one sigma, so that a caller mixing per element
 * (KSampler's area/mask accumulation) can do without a second buffer.
 */
struct sampling_denoiser {
    int prediction; /* enum sampling_prediction */
    float sigma;
    float var;  /* σ² + σ_data² */
    float sd;   /* sqrt(var) */
    float c_skip, c_out; /* LCM: at the scaled timestep 10·t, σ_data 0.5 */
    float sd2, sdat;     /* σ_data², σ_data */
};

/* The coefficients of ms's sampling type at sigma. */
void sampling_denoiser_at(const struct sampling_discrete *ms, float sigma,
                          struct sampling_denoiser *d);

/*
 * x0 from the model's output `out` for state value x, with ComfyUI's operation order
 * (EPS: x - out·σ, bit-identical to sampling_eps_to_x0).
 */
static inline float sampling_denoised(const struct sampling_denoiser *d, float x, float out)
{
    switch (d->prediction) {
    case SAMPLING_PREDICTION_V:
        /* model_input·σ_data²/(σ²+σ_data²) − model_output·σ·σ_data/sqrt(σ²+σ_data²) */
        return x * d->sd2 / d->var - out * d->sigma * d->sdat / d->sd;
    case SAMPLING_PREDICTION_EDM:
        return x * d->sd2 / d->var + out * d->sigma * d->sdat / d->sd;
    case SAMPLING_PREDICTION_X0:
    case SAMPLING_PREDICTION_IMG_TO_IMG: return out;
    case SAMPLING_PREDICTION_LCM: return d->c_out * (x - out * d->sigma) + d->c_skip * x;
    default: return x - out * d->sigma;
    }
}

/*
 * sigma -> timestep for the UNet: the index of the nearest table entry in
 * log space (first index on ties; a distilled table's entry e is timestep 20e + 19),
 * an integer value; a continuous kind's formula (enum sampling_time) otherwise. ComfyUI does not interpolate in this
 * direction, so the UNet always sees an integer t (§5.2).
 */
float sampling_discrete_timestep(const struct sampling_discrete *ms, float sigma);

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
