/*
 * samplers_impl — what the sampler families share behind sampling_run_sampler
 * (sampling.h): the run context, the model call with ComfyUI's inpaint wrapper,
 * the step report, per-step noise, scratch, and k-diffusion's small helpers.
 * Private to models/sampling: samplers.c holds the names, the checks and the
 * dispatch; each other samplers_*.c file one family of update rules.
 *
 * Every family is written in the operation order of ComfyUI's Python, one
 * float32 rounding per tensor op (samplers.c's header says why). Including
 * this header switches contraction into FMAs off for the rest of the file, so
 * that the order holds in every family.
 *
 * Thread safety: as sampling.h (the calling thread, one run at a time per ctx).
 */
#ifndef LATENTD_SAMPLERS_IMPL_H
#define LATENTD_SAMPLERS_IMPL_H

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <stddef.h>

#include "sampling.h"

/* One sampler run. */
struct sampling__ctx {
    const struct sampling_run *run; /* borrowed */
    struct sampling_options o;      /* run->opts or the defaults */
    size_t n;                       /* floats in the state */
    float *xin;                     /* [n] model input when inpainting (owned by the run) */
    float *nz;                      /* [n] per-step noise (owned by the run) */
};

/*
 * The model at (x, sigma) into den[0..n): the caller's denoiser wrapped in
 * ComfyUI's KSamplerX0Inpaint when the run has a mask. Returns 0 or the
 * denoiser's error.
 */
int sampling__model(struct sampling__ctx *c, const float *x, float sigma, float *den);

/* The step callback for step i; ERR_INTERRUPTED when it asks to stop. */
int sampling__report(struct sampling__ctx *c, int i, const float *den, const float *x);

/* The next per-step draw for (sigma, sigma_next), in c->nz (valid until the next draw). */
const float *sampling__noise(struct sampling__ctx *c, float sigma, float sigma_next);

/*
 * count·n floats of scratch for a family's own state into *out (caller frees
 * with xfree). Returns 0, or ERR_DEVICE_OOM: a run's scratch is latent-sized,
 * so it goes through the fallible allocator.
 */
int sampling__scratch(const struct sampling__ctx *c, int count, float **out);

/* k-diffusion's to_d: d = (x − den) / σ. */
void sampling__to_d(const float *x, const float *den, float sigma, float *d, size_t n);

/* k-diffusion's get_ancestral_step(σ, σn, eta) in float32; eta = 0 steps to σn without noise. */
void sampling__ancestral_step(float s, float sn, double eta, float *down, float *up);

/*
 * A step's opening, as every family writes it: s = σ_i and sn = σ_{i+1} of the run's
 * schedule, then the model at (x, s) into den, returning its error. Expects `sig`
 * (the schedule), `c`, `x`, `den` and `int rc` in scope.
 */
#define SAMPLING__STEP_BEGIN(i)                                                             \
    float s = sig[i], sn = sig[(i) + 1];                                                    \
    (void)sn;                                                                               \
    if ((rc = sampling__model(c, x, s, den)) < 0)                                           \
        return rc;

/* The largest lms order the options may ask for. */
#define SAMPLING__LMS_MAX_ORDER 128

/* ---- the families outside samplers.c (each returns 0 or a negative ERR_*) ---- */

/* lms with c->o.lms_order derivatives (samplers_lms.c). */
int sampling__run_lms(struct sampling__ctx *c, float *x);

/* uni_pc (bh2 = 0: variant bh1) and uni_pc_bh2 (samplers_unipc.c). */
int sampling__run_unipc(struct sampling__ctx *c, float *x, int bh2);

/* dpmpp_2s_ancestral_cfg_pp and dpmpp_2m_cfg_pp (samplers_cfgpp.c). */
int sampling__run_cfgpp(struct sampling__ctx *c, float *x, enum sampling_sampler s);

/* heunpp2 (samplers_heunpp2.c). */
int sampling__run_heunpp2(struct sampling__ctx *c, float *x);

/* dpm_fast (adaptive = 0) and dpm_adaptive (samplers_dpm.c). */
int sampling__run_dpm(struct sampling__ctx *c, float *x, int adaptive);

/* ipndm, ipndm_v and deis (samplers_multistep.c). */
int sampling__run_multistep(struct sampling__ctx *c, float *x, enum sampling_sampler s);

/* res_multistep (4 variants) and gradient_estimation (2) (samplers_res.c). */
int sampling__run_res(struct sampling__ctx *c, float *x, enum sampling_sampler s);

/* er_sde, seeds_2 and seeds_3 (samplers_seeds.c). */
int sampling__run_seeds(struct sampling__ctx *c, float *x, enum sampling_sampler s);

/* sa_solver (pece = 0) and sa_solver_pece (samplers_sa.c). */
int sampling__run_sa(struct sampling__ctx *c, float *x, int pece);

#endif
