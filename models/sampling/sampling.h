/*
 * sampling — ComfyUI's k-diffusion samplers over plain float arrays, and the
 * KSampler pipeline around them (sd15.md §5.3, §5.4, §5.7).
 *
 * The samplers know nothing about tensors or models: the caller supplies a
 * denoiser callback that returns the model's x0 prediction for a state x at
 * noise level sigma (UNet + CFG, done by the caller with the helpers below),
 * and a step callback for progress, previews and interrupts. A latent batch
 * is one flat array of n = B·4·h·w floats; the denoiser sees the whole batch.
 *
 * A KSampler node does, with the headers of this directory:
 *   sampling_discrete_init(&ms, 0.00085, 0.012);                          (once)
 *   sampling_sigmas_for_ksampler(&ms, sched, sampling_sampler_discards_penultimate(s),
 *                                steps, denoise, -1, -1, 0, &sigmas, &n_sigmas, e);
 *   sampling_prepare_noise(seed, batch_index, ..., noise, e);   (zeros if add_noise off)
 *   sampling_mask_prepare(...)                                  (if the LATENT has noise_mask)
 *   sampling_sample_latent(&req, latent, out, n, e);
 * where req.denoise runs the UNet: t = sampling_discrete_timestep(&ms, sigma),
 * input = sampling_model_input(&ms, x, sigma), out = UNet(...) for cond (and uncond
 * unless sampling_cfg_is_one(cfg)), x0 = sampling_denoised() per element with the
 * coefficients of sampling_denoiser_at(&ms, sigma) (the MODEL's sampling type: eps,
 * v, x0, lcm, edm), then sampling_cfg_combine(x0_cond, x0_uncond, cfg).
 *
 * Thread safety: a run is confined to the calling thread (the executor);
 * callbacks are invoked synchronously on it. Functions are reentrant.
 */
#ifndef LATENTD_SAMPLING_H
#define LATENTD_SAMPLING_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "sampling_noise.h"
#include "sampling_rng.h"
#include "sampling_sched.h"

/*
 * Every sampler, in the order of ComfyUI's SAMPLER_NAMES (KSAMPLER_NAMES,
 * then ddim, uni_pc, uni_pc_bh2; comfy-api.md §7.2). sa_solver and
 * sa_solver_pece take their noise interval from the model's percent_to_sigma,
 * which the caller puts in the run (tau_sigma_start/end). The *_gpu names
 * differ from their CPU twins in ComfyUI only in where the Brownian tree lives
 * (torch's CUDA generator); ours is always the CPU tree (sampling_brownian.h), so
 * they are identical to them. The samplers after sd15.md §5.7 (uni_pc, the CFG++,
 * multistep and SEEDS families, ...) assume eps or v models: λ = −ln σ, not the
 * logit ComfyUI uses for flow models.
 */
enum sampling_sampler {
    SAMPLING_SAMPLER_EULER = 0,
    SAMPLING_SAMPLER_EULER_CFG_PP, /* euler_ancestral_cfg_pp with eta = s_noise = 0 */
    SAMPLING_SAMPLER_EULER_ANCESTRAL,
    SAMPLING_SAMPLER_EULER_ANCESTRAL_CFG_PP, /* CFG++: needs the uncond x0 (sampling_run) */
    SAMPLING_SAMPLER_HEUN,
    SAMPLING_SAMPLER_HEUNPP2,
    SAMPLING_SAMPLER_DPM_2,
    SAMPLING_SAMPLER_DPM_2_ANCESTRAL,
    SAMPLING_SAMPLER_LMS,
    SAMPLING_SAMPLER_DPM_FAST,     /* reports once per solver step, not per sigma */
    SAMPLING_SAMPLER_DPM_ADAPTIVE, /* its own step count: reports every attempt */
    SAMPLING_SAMPLER_DPMPP_2S_ANCESTRAL,
    SAMPLING_SAMPLER_DPMPP_2S_ANCESTRAL_CFG_PP,
    SAMPLING_SAMPLER_DPMPP_SDE,
    SAMPLING_SAMPLER_DPMPP_SDE_GPU,
    SAMPLING_SAMPLER_DPMPP_2M,
    SAMPLING_SAMPLER_DPMPP_2M_CFG_PP,
    SAMPLING_SAMPLER_DPMPP_2M_SDE,
    SAMPLING_SAMPLER_DPMPP_2M_SDE_GPU,
    SAMPLING_SAMPLER_DPMPP_2M_SDE_HEUN,
    SAMPLING_SAMPLER_DPMPP_2M_SDE_HEUN_GPU,
    SAMPLING_SAMPLER_DPMPP_3M_SDE,
    SAMPLING_SAMPLER_DPMPP_3M_SDE_GPU,
    SAMPLING_SAMPLER_DDPM,
    SAMPLING_SAMPLER_LCM,
    SAMPLING_SAMPLER_IPNDM,
    SAMPLING_SAMPLER_IPNDM_V,
    SAMPLING_SAMPLER_DEIS,
    SAMPLING_SAMPLER_RES_MULTISTEP,
    SAMPLING_SAMPLER_RES_MULTISTEP_CFG_PP,
    SAMPLING_SAMPLER_RES_MULTISTEP_ANCESTRAL,
    SAMPLING_SAMPLER_RES_MULTISTEP_ANCESTRAL_CFG_PP,
    SAMPLING_SAMPLER_GRADIENT_ESTIMATION,
    SAMPLING_SAMPLER_GRADIENT_ESTIMATION_CFG_PP,
    SAMPLING_SAMPLER_ER_SDE,
    SAMPLING_SAMPLER_SEEDS_2,
    SAMPLING_SAMPLER_SEEDS_3,
    SAMPLING_SAMPLER_SA_SOLVER,      /* needs the run's tau interval */
    SAMPLING_SAMPLER_SA_SOLVER_PECE, /* sa_solver re-evaluating each corrected state */
    SAMPLING_SAMPLER_DDIM, /* ComfyUI runs euler, with fresh noise for the inpaint blend */
    SAMPLING_SAMPLER_UNI_PC, /* UniPC (bh1), multistep order min(3, steps - 1) */
    SAMPLING_SAMPLER_UNI_PC_BH2,
    SAMPLING_SAMPLER_COUNT
};

/* ComfyUI's name of `s` ("dpmpp_2m"); NULL when out of range. */
const char *sampling_sampler_name(enum sampling_sampler s);

/* Look a sampler up by its exact ComfyUI name. 0, or ERR_NOT_FOUND. */
int sampling_sampler_from_name(const char *name, enum sampling_sampler *out);

/*
 * Whether KSampler asks the scheduler for steps+1 and drops the penultimate
 * sigma for this sampler (dpm_2, dpm_2_ancestral; §5.6).
 */
int sampling_sampler_discards_penultimate(enum sampling_sampler s);

/*
 * The denoiser: write the model's x0 prediction for state x[0..n) at noise
 * level sigma into out_x0[0..n) (scaled latent space, CFG already applied).
 * x is borrowed for the call only. Return 0, or a negative ERR_* code that
 * ends the run and is passed through (ERR_INTERRUPTED included).
 */
typedef int (*sampling_denoise_fn)(void *user, const float *x, float sigma, float *out_x0,
                                   size_t n);

/*
 * After the first model evaluation of step `step` (0-based) of `total`
 * (= n_sigmas - 1): x0 is that evaluation's prediction, x the state before
 * the step's update (both borrowed, scaled latent space). Return 0 to go on,
 * nonzero to stop the run with ERR_INTERRUPTED (the /interrupt flag).
 */
typedef int (*sampling_step_fn)(void *user, int step, int total, const float *x0,
                                const float *x, size_t n);

/*
 * Inpainting (ComfyUI's KSamplerX0Inpaint): where mask is 0 the model input
 * is replaced by latent + noise·sigma and its output by latent, so the kept
 * area converges on the original latent. Samplers whose last step is
 * x = x0 reproduce it exactly there; the others (euler's x + d·(0 − σ), ...)
 * to float rounding — as in ComfyUI, which does no final blend.
 */
struct sampling_inpaint {
    const float *mask;   /* [n] in [0,1]: 1 = resample, 0 = keep (borrowed) */
    const float *latent; /* [n] the original latent, scaled by 0.18215 (borrowed) */
    const float *noise;  /* [n] unscaled noise used to re-noise the kept area (borrowed) */
};

/*
 * A sampler's options: the extra_options ComfyUI's Sampler* nodes
 * (SamplerEulerAncestral, SamplerLMS, SamplerDPMPP_SDE, ...) pass to
 * k-diffusion. KSampler uses the defaults. A sampler reads only its own.
 */
struct sampling_options {
    double eta;     /* ancestral step size (get_ancestral_step), SDE noise amount; 1 */
    double s_noise; /* scale of the per-step noise; 1 */
    double r;       /* dpmpp_sde's intermediate step, as a fraction of h; 1/2 */
    int lms_order;  /* lms: derivatives kept (>= 1); 4 */
};

/* KSampler's options: eta 1, s_noise 1, r 1/2, lms_order 4. */
#define SAMPLING_OPTIONS_DEFAULT {.eta = 1.0, .s_noise = 1.0, .r = 0.5, .lms_order = 4}

/* Everything one sampler run needs besides the state. */
struct sampling_run {
    enum sampling_sampler sampler;
    const float *sigmas;            /* [n_sigmas] schedule, decreasing (borrowed) */
    int n_sigmas;                   /* steps run = n_sigmas - 1 */
    sampling_denoise_fn denoise;    /* required */
    void *denoise_user;
    sampling_step_fn step;          /* optional (NULL: no progress, no interrupt) */
    void *step_user;
    struct sampling_noise *noise;   /* per-step noise; required by the stochastic samplers */
    const struct sampling_inpaint *inpaint; /* optional (NULL: no mask) */
    const struct sampling_options *opts; /* optional (NULL: SAMPLING_OPTIONS_DEFAULT) */
    /* The uncond x0 of the latest denoise call (borrowed, [n]): the caller's denoiser
     * writes it on every call, always evaluating the negative (ComfyUI's
     * disable_cfg1_optimization). Required by the samplers that need it
     * (sampling_sampler_needs_uncond), read by no other. */
    const float *uncond_x0;
    /* sa_solver's noise interval: τ = eta where tau_sigma_end ≤ σ ≤ tau_sigma_start,
     * 0 elsewhere. ComfyUI's KSampler takes them from the MODEL's sampling:
     * percent_to_sigma(0.2) and percent_to_sigma(0.8). Required by the samplers of
     * sampling_sampler_needs_tau (start > 0, end ≥ 0, finite), read by no other. */
    double tau_sigma_start, tau_sigma_end;
};

/*
 * Whether sampler `s` draws per-step noise (and so needs run->noise).
 */
int sampling_sampler_is_stochastic(enum sampling_sampler s);

/*
 * Whether sampler `s` reads the uncond prediction (the CFG++ samplers, ComfyUI's
 * post_cfg_function with disable_cfg1_optimization): the caller must then fill
 * run->uncond_x0 on every denoise call.
 */
int sampling_sampler_needs_uncond(enum sampling_sampler s);

/*
 * Whether sampler `s` reads the run's tau interval (sa_solver, sa_solver_pece):
 * the caller must then set tau_sigma_start/end from the model (sampling_sa_tau_interval).
 */
int sampling_sampler_needs_tau(enum sampling_sampler s);

/*
 * The tau interval ComfyUI's sample_sa_solver uses by default: percent_to_sigma
 * of 0.2 (start, the larger σ) and 0.8 (end) of the model's sampling `ms`.
 */
void sampling_sa_tau_interval(const struct sampling_discrete *ms, double *start, double *end);

/*
 * Run the sampler in place on x[0..n) (the already noised, scaled latent)
 * over run->sigmas with run->opts (KSampler's defaults when NULL). On
 * success x holds the result (scaled latent). Allocates scratch of a few
 * times n floats for the run. Returns 0, ERR_INVALID (bad arguments),
 * ERR_INTERRUPTED (the step callback asked to stop; x is then partial), or
 * the denoiser's error. Options out of range (lms_order < 1, eta, s_noise or r
 * negative or not finite, r = 0 for dpmpp_sde) and a missing tau interval
 * (sampling_sampler_needs_tau) are ERR_INVALID.
 */
int sampling_run_sampler(const struct sampling_run *run, float *x, size_t n, struct err *e);

/* ---- the KSampler pipeline (§5.4) ---- */

struct sampling_request {
    enum sampling_sampler sampler;
    const float *sigmas;            /* from sampling_sigmas_for_ksampler (borrowed) */
    int n_sigmas;                   /* 0: return the latent unchanged */
    const float *noise;             /* [n] initial noise; all zeros for add_noise = disable */
    uint64_t seed;                  /* seeds the per-step noise (and ddim's inpaint noise) */
    enum sampling_randn_variant variant;
    const float *noise_mask;        /* optional [n] from sampling_mask_prepare (borrowed) */
    float sigma_max;                /* the model's sigma_max (max_denoise test) */
    float latent_scale;             /* the model's latent scale factor (SD1.5 0.18215) */
    sampling_denoise_fn denoise;
    void *denoise_user;
    sampling_step_fn step;          /* optional */
    void *step_user;
    const struct sampling_options *opts; /* optional (NULL: KSampler's defaults) */
    const float *uncond_x0;         /* as sampling_run's: the CFG++ samplers need it */
    double tau_sigma_start, tau_sigma_end; /* as sampling_run's: sa_solver needs them */
};

/*
 * ComfyUI's KSampler sampling of one LATENT: the latent (unscaled, as stored
 * in LATENT.samples) is scaled by req->latent_scale when not all zero, noised as
 * noise·sqrt(1 + s0²) + L when s0 is sigma_max (max_denoise) or noise·s0 + L
 * otherwise, sampled, and divided by the scale into out[0..n). out may alias
 * latent. With n_sigmas == 0 out is a copy of latent. With a noise mask,
 * the kept area is re-noised with req->noise, except for ddim, which (like
 * ComfyUI) uses a fresh randn seeded with seed + 1. Errors as
 * sampling_run_sampler.
 */
int sampling_sample_latent(const struct sampling_request *req, const float *latent, float *out,
                           size_t n, struct err *e);

/*
 * The max_denoise test of §5.4: s0 within relative 1e-5 of sigma_max, or above.
 */
int sampling_is_max_denoise(float sigma0, float sigma_max);

/* ---- CFG (§5.3) ---- */

/*
 * Whether cfg counts as 1 (Python math.isclose(cfg, 1.0)): the caller may
 * then skip the uncond evaluation and use the cond prediction as is.
 */
int sampling_cfg_is_one(double cfg);

/*
 * out = uncond + (cond - uncond) · cfg, in float32 in ComfyUI's order, on the
 * x0 predictions. out may alias either input.
 */
void sampling_cfg_combine(const float *cond, const float *uncond, double cfg, float *out,
                          size_t n);

/* ---- noise masks ---- */

/*
 * ComfyUI's prepare_mask: resize a mask of mb × mh × mw (any batch, e.g. the
 * pixel-size MASK from SetLatentNoiseMask) to h × w with bilinear
 * interpolation (align_corners = False), repeat it over `channels`, and
 * repeat or cut it to `batch` samples, into out[batch · channels · h · w].
 * Returns 0 or ERR_INVALID.
 */
int sampling_mask_prepare(const float *mask, int mb, int mh, int mw, int batch, int channels,
                          int h, int w, float *out, struct err *e);

#endif
