/*
 * sd_custom_types — the payloads of the custom-sampling link types (ComfyUI's
 * comfy_extras/nodes_custom_sampler.py), carried in VALUE_OBJECT values:
 *
 *   SIGMAS   struct sd_sigmas: a float32 sigma list, possibly empty (BasicScheduler
 *            at denoise 0 gives one; the sampler then returns its latent as is).
 *   SAMPLER  struct sd_sampler: which models/sampling sampler runs, with which options
 *            (KSamplerSelect: KSampler's; the Sampler* nodes: their own).
 *   NOISE    struct sd_noise: RandomNoise(seed) or DisableNoise (zeros, seed 0).
 *   GUIDER   struct sd_guider: the MODEL and CONDITIONING values it was built from
 *            (references held), and cfg; BasicGuider has no negative side.
 *
 * Values are immutable once published (node_value.h): nodes that change a list
 * make a new one. Threads: built and read on the executor thread; any thread may
 * drop the last reference.
 */
#ifndef LATENTD_NODES_SD_CUSTOM_TYPES_H
#define LATENTD_NODES_SD_CUSTOM_TYPES_H

#include <stdint.h>

#include "node_value.h"
#include "sampling.h"

/* ---- SIGMAS ---- */

struct sd_sigmas {
    float *v; /* owned, [n]; NULL when n == 0 */
    int n;
};

/* A list of n sigmas copied from v (v may be NULL when n == 0); xfree-owned. */
struct sd_sigmas *sd_sigmas_new(const float *v, int n);
/* Wrap as a "SIGMAS" value (transfers ownership of s). */
struct value *sd_sigmas_value(struct sd_sigmas *s);
/* The list inside a SIGMAS value; NULL when v is not one. Borrowed. */
const struct sd_sigmas *sd_sigmas_of(const struct value *v);

/* ---- SAMPLER ---- */

struct sd_sampler {
    enum sampling_sampler sampler;
    struct sampling_options opts; /* eta, s_noise, r, lms order */
};

/* A "SAMPLER" value for sampler s with KSampler's options. */
struct value *sd_sampler_value(enum sampling_sampler s);
/* A "SAMPLER" value for sampler s with options `opts` (copied). */
struct value *sd_sampler_value_opts(enum sampling_sampler s, const struct sampling_options *opts);
const struct sd_sampler *sd_sampler_of(const struct value *v); /* NULL if not one */

/* ---- NOISE ---- */

struct sd_noise {
    int disabled;  /* DisableNoise: zeros */
    uint64_t seed; /* RandomNoise's noise_seed; 0 for DisableNoise (ComfyUI's Noise_EmptyNoise) */
};

/* A "NOISE" value: disabled, or random from seed. */
struct value *sd_noise_value(int disabled, uint64_t seed);
const struct sd_noise *sd_noise_of(const struct value *v); /* NULL if not one */

/* ---- GUIDER ---- */

/* How a guider mixes its predictions (ComfyUI's guider classes). */
enum sd_guide {
    SD_GUIDE_CFG,      /* CFGGuider / BasicGuider: cfg_function */
    SD_GUIDE_DUAL_CFG, /* Guider_DualCFG (DualCFGGuider) */
    SD_GUIDE_PERP_NEG, /* Guider_PerpNeg (PerpNegGuider) */
};

struct sd_guider {
    struct value *model; /* reference held: a MODEL value */
    struct value *pos;   /* reference held: CONDITIONING (DualCFG's cond1) */
    struct value *neg;   /* reference held, or NULL (BasicGuider) */
    double cfg;          /* 1.0 for BasicGuider; DualCFG's cfg_conds */
    enum sd_guide guide;
    struct value *third; /* reference held or NULL: DualCFG's cond2, PerpNeg's empty */
    double cfg2;         /* DualCFG's cfg_cond2_negative */
    int nested;          /* DualCFG's style "nested" */
    double neg_scale;    /* PerpNeg's */
};

/* A "GUIDER" value taking new references to model, pos and neg (neg may be NULL). */
struct value *sd_guider_value(struct value *model, struct value *pos, struct value *neg,
                              double cfg);

/*
 * A "GUIDER" value copying `g` with new references to its model, pos, neg and third
 * values (the DualCFG and PerpNeg guiders).
 */
struct value *sd_guider_value_full(const struct sd_guider *g);
const struct sd_guider *sd_guider_of(const struct value *v); /* NULL if not one */

#endif
