/*
 * sd_sample — private to nodes/sd_*.c: the sampling core that KSampler,
 * KSamplerAdvanced, SamplerCustom and SamplerCustomAdvanced share.
 *
 * ComfyUI builds KSampler from the same pieces as the custom-sampling nodes
 * (a CFGGuider, a noise source, a sampler object and a sigma list), so one
 * function runs all of them: a SamplerCustomAdvanced graph equivalent to a
 * KSampler one gives the same bits because it executes the same code.
 *
 * Threads: the executor thread, inside a node's run().
 */
#ifndef LATENTD_NODES_SD_SAMPLE_H
#define LATENTD_NODES_SD_SAMPLE_H

#include <stdint.h>

#include "node_run.h"
#include "sampling.h"
#include "sd_custom_types.h"
#include "sd_types.h"

/* The predictions a guider mixes (struct sd_sample_args). */
enum sd_side { SD_SIDE_POS, SD_SIDE_NEG, SD_SIDE_THIRD, SD_SIDES };

struct sd_sample_args {
    const struct sd_model *model;  /* borrowed */
    const struct sd_cond *pos;     /* borrowed, at least one entry */
    const struct sd_cond *neg;     /* borrowed; NULL = no negative side (BasicGuider) */
    double cfg;                    /* ignored without neg (ComfyUI's cfg 1.0); DualCFG's cfg_conds */
    enum sd_guide guide;           /* how the sides mix (sd_custom_types.h); 0 = CFG */
    const struct sd_cond *third;   /* borrowed: DualCFG's middle (cond2), PerpNeg's empty
                                    * conditioning; NULL for CFG */
    double cfg2;                   /* DualCFG: cfg_cond2_negative */
    int nested;                    /* DualCFG: style "nested" */
    double neg_scale;              /* PerpNeg */
    enum sampling_sampler sampler;
    const struct sampling_options *opts; /* borrowed; NULL = KSampler's defaults */
    const float *sigmas;           /* borrowed, [n_sigmas]; empty = latent passes through */
    int n_sigmas;
    const struct sd_latent *latent; /* borrowed */
    int disable_noise;             /* zeros as initial noise (DisableNoise, add_noise off) */
    uint64_t seed;                 /* initial noise (unless disabled) and per-step noise */
};

/*
 * Sample `a->latent` over `a->sigmas` as ComfyUI's CFGGuider.sample does (or
 * Guider_DualCFG's / Guider_PerpNeg's, per a->guide).
 * On success returns 0 with *out set to the sampled LATENT (a copy of the
 * input latent's mask and batch_index with new samples) and, when `denoised`
 * is not NULL, *denoised set to the last step's x0 prediction as a LATENT
 * (ComfyUI's denoised_output), or NULL when no step ran. Both are owned by
 * the caller (sd_latent_free). On failure returns the node_fail() code.
 */
int sd__sample(struct node_ctx *c, const struct sd_sample_args *a, struct sd_latent **out,
               struct sd_latent **denoised);

#endif
