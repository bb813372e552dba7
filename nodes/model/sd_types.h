/*
 * sd_types — the payloads of the SD1.5 link types LATENT, CONDITIONING and
 * MODEL (comfy-api.md §7.1), as carried in VALUE_OBJECT values.
 *
 *   LATENT        struct sd_latent: samples [B, 4, h, w] (unscaled, as
 *                 ComfyUI stores them), an optional pixel-space noise_mask
 *                 [mb, 1, mh, mw] and an optional batch_index list.
 *   CONDITIONING  struct sd_cond: entries of text-encoder output [b, tokens, dim]
 *                 with a strength and an optional latent-space area; the
 *                 sampler averages the entries' x0 predictions weighted by
 *                 strength and area feathering, as ComfyUI's calc_cond_batch,
 *                 with each entry's ControlNet residuals, masks (ConditioningSetMask)
 *                 and timestep ranges (ConditioningSetTimestepRange).
 *   MODEL         struct sd_model: the noise table plus a function-pointer
 *                 backend predicting epsilon. CheckpointLoaderSimple (models
 *                 side) fills `ops`/`impl` with the UNet; tests use an
 *                 analytic model. Everything else the sampler needs (c_in,
 *                 sigma -> t, x0 = x - eps·sigma, CFG) is done by KSampler with
 *                 models/sampling.
 *
 * Values are immutable once published (node_value.h): a node that changes a
 * LATENT makes a new one (sd_latent_clone copies what it keeps).
 *
 * Threads: the executor thread builds and reads these; refcounting of the
 * enclosing values is atomic, so any thread may drop the last reference.
 */
#ifndef LATENTD_NODES_SD_TYPES_H
#define LATENTD_NODES_SD_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "node_value.h"
#include "family.h"
#include "sampling_guide.h"
#include "sampling_sched.h"

struct mm;         /* memory/memmgr.h */
struct sd_control; /* sd_control.h */
struct sd_gligen;  /* sd_gligen.h */

/* ---- LATENT ---- */

struct sd_latent {
    float *samples;        /* owned, [b, c, h, w] float32 */
    int64_t b, c, h, w;    /* c is 4 for SD1.5 */
    float *noise_mask;     /* owned or NULL, [mb, 1, mh, mw] in 0..1 (1 = resample) */
    int64_t mb, mh, mw;
    int64_t *batch_index;  /* owned or NULL, [n_batch_index] */
    int n_batch_index;
};

/*
 * A zero-filled latent [b, c, h, w] without mask or batch_index: 0 and *out set
 * (free with sd_latent_free), or ERR_DEVICE_OOM with e in ComfyUI's out-of-memory
 * shape when the samples do not fit in host memory now (alloc.h). Nodes use this:
 * b, h and w come from the request.
 */
int sd_latent_try_new(int64_t b, int64_t c, int64_t h, int64_t w, struct sd_latent **out,
                      struct err *e);
/* As sd_latent_try_new, plus a deep copy of the mask and batch_index of `src`. */
int sd_latent_try_new_like(const struct sd_latent *src, int64_t b, int64_t c, int64_t h,
                           int64_t w, struct sd_latent **out, struct err *e);
/* The same for sizes no request controls (tests, fixed shapes): failure is fatal. */
struct sd_latent *sd_latent_new(int64_t b, int64_t c, int64_t h, int64_t w);
struct sd_latent *sd_latent_new_like(const struct sd_latent *src, int64_t b, int64_t c,
                                     int64_t h, int64_t w);
void sd_latent_free(struct sd_latent *l); /* NULL-safe */
/* Wrap as a "LATENT" value (transfers ownership of l). */
struct value *sd_latent_value(struct sd_latent *l);
/* The latent inside a LATENT value; NULL when v is not one. Borrowed. */
const struct sd_latent *sd_latent_of(const struct value *v);

/* ---- CONDITIONING ---- */

struct sd_cond_entry {
    float *cond;          /* owned, [batch, tokens, dim] */
    int batch, tokens, dim;
    float *pooled;        /* owned or NULL, [batch, pooled_dim] (unused by SD1.5's UNet) */
    int pooled_dim;
    float strength;       /* weight in the average of the entries' predictions (1) */
    int has_area;         /* ConditioningSetArea: only this latent rectangle */
    int area_h, area_w, area_y, area_x; /* latent units (pixels / 8) */
    int has_adm_sizes;    /* CLIPTextEncodeSDXL set the ADM sizes (else: the latent's) */
    struct adm_sizes adm; /* pixels (sdxl.md §5.2) */
    int has_ascore;       /* CLIPTextEncodeSDXLRefiner set adm.aesthetic_score */
    struct sd_control *control; /* owned reference or NULL: ControlNets (sd_control.h) */
    struct sd_gligen *gligen;   /* owned reference or NULL: GLIGEN boxes (sd_gligen.h) */
    /* ConditioningSetAreaPercentage: an area in fractions of the latent, resolved at
     * sampling time (ComfyUI's ("percentage", h, w, y, x)); used when has_area is 0. */
    int has_area_pct;
    double area_pct_h, area_pct_w, area_pct_y, area_pct_x;
    /* ConditioningSetTimestepRange: active while start_percent <= progress <= end_percent
     * (as sigmas: percent_to_sigma of each); absent = the whole schedule. */
    int has_timestep_range;
    double start_percent, end_percent;
    /* ConditioningSetMask: a weight map [mask_b, mask_h, mask_w] (resized to the latent
     * bilinearly at sampling time) times mask_strength, replacing the area feathering;
     * set_area_to_bounds narrows the area to the mask's bounding box. */
    float *mask; /* owned or NULL */
    int mask_b, mask_h, mask_w;
    float mask_strength;
    int set_area_to_bounds;
    /* InpaintModelConditioning / InstructPixToPixConditioning (ComfyUI's keys
     * "concat_latent_image" and "concat_mask"): the image's latent as VAEEncode gives it
     * (unscaled) [concat_b, 4, concat_h, concat_w], and the mask [concat_mask_b,
     * concat_mask_h, concat_mask_w] (pixels, 0..1) that an inpainting model's concat takes
     * instead of the latent's noise mask. A concat-conditioned MODEL's sampler builds
     * c_concat from them (sd_concat.h); other models ignore them, as ComfyUI's do. */
    float *concat_latent; /* owned or NULL */
    int concat_b, concat_h, concat_w;
    float *concat_mask; /* owned or NULL */
    int concat_mask_b, concat_mask_h, concat_mask_w;
};

struct sd_cond {
    struct sd_cond_entry *entries; /* owned, [n] */
    int n;
};

/*
 * A conditioning with one entry, copying `cond` [batch, tokens, dim] (and
 * `pooled` [batch, pooled_dim] when not NULL), strength 1.
 */
struct sd_cond *sd_cond_new(const float *cond, int batch, int tokens, int dim,
                            const float *pooled, int pooled_dim);
void sd_cond_free(struct sd_cond *c); /* NULL-safe */
/* A deep copy of `c` (nodes that change a CONDITIONING copy it first): every field,
 * the owned arrays duplicated, the control chain shared by reference. */
struct sd_cond *sd_cond_clone(const struct sd_cond *c);
/* Append deep copies of src's entries to dst. */
void sd_cond_append(struct sd_cond *dst, const struct sd_cond *src);
struct value *sd_cond_value(struct sd_cond *c);         /* "CONDITIONING", takes c */
const struct sd_cond *sd_cond_of(const struct value *v); /* NULL if not one */

/* ---- MODEL ---- */

struct sd_model_ops {
    /*
     * Epsilon for a batch. x_in: [batch, 4, h, w], already divided by
     * sqrt(sigma^2 + 1) (with sd_model.concat: [batch, 4 + concat channels, h, w]);
     * timesteps: [batch] integer-valued model timesteps;
     * context: [batch, tokens, dim]. Writes eps_out [batch, 4, h, w]. Returns 0
     * or a negative ERR_* (ERR_DEVICE_OOM, ERR_INTERRUPTED...) with e filled.
     * Called on the executor thread.
     */
    int (*apply_eps)(void *impl, const float *x_in, int batch, int h, int w,
                     const float *timesteps, const float *context, int tokens, int dim,
                     float *eps_out, struct err *e);
    /*
     * Optional (NULL = nothing to do): called once before sampling with the
     * node's memory manager (node_env.mm, may be NULL) and the largest batch,
     * latent size and token count apply_eps will see, so that the backend can
     * ask the planner for its plan and load the weights. Returns 0 or a
     * negative ERR_* (ERR_DEVICE_OOM) with e filled.
     */
    int (*prepare)(void *impl, struct mm *mm, int max_batch, int h, int w, int max_tokens,
                   struct err *e);
    /*
     * Required when the model has an ADM input (sd_model.adm_dim > 0, SDXL): apply_eps
     * with y [batch, adm_dim], one ADM vector per sample (the family's encode_adm).
     */
    int (*apply_eps_y)(void *impl, const float *x_in, int batch, int h, int w,
                       const float *timesteps, const float *context, int tokens, int dim,
                       const float *y, int adm_dim, float *eps_out, struct err *e);
    /*
     * Optional (NULL: the model takes no ControlNet nor GLIGEN, and a conditioning with
     * one fails): apply_eps_y (y NULL without an ADM input) plus the residuals of the
     * entries' control chain `control` (may be NULL) at noise level sigma
     * (sd_control_eval) and the entries' GLIGEN boxes `gligen` (may be NULL: ComfyUI's
     * middle_patch); per_batch is the latent batch (the hint's broadcast unit).
     */
    int (*apply_eps_control)(void *impl, const float *x_in, int batch, int h, int w,
                             const float *timesteps, const float *context, int tokens, int dim,
                             const float *y, int adm_dim, const struct sd_control *control,
                             const struct sd_gligen *gligen, float sigma, int per_batch,
                             float *eps_out, struct err *e);
    /*
     * Required with apply_eps_control: prepare() when the conditioning carries controls
     * (the chains' heads, n_controls > 0) or GLIGEN boxes (n_gligens > 0): the ControlNets
     * and GLIGEN models are checked against the model (family, widths) and loaded with
     * it, their residuals and fuser work in the plan.
     */
    int (*prepare_control)(void *impl, struct mm *mm, int max_batch, int h, int w,
                           int max_tokens, struct sd_control *const *controls, int n_controls,
                           struct sd_gligen *const *gligens, int n_gligens, struct err *e);
    /* Optional: sampling is over (after a successful prepare), e.g. mm_node_end. */
    void (*finish)(void *impl, struct mm *mm);
    /* Frees impl when the MODEL value goes (optional: NULL = nothing to free). */
    void (*free)(void *impl);
};

struct sd_model {
    const struct sd_model_ops *ops; /* borrowed, static */
    void *impl;                     /* owned through ops->free */
    struct sampling_discrete ms;    /* noise table (the family's schedule) */
    const struct latent_format *latent; /* borrowed, static: the family's latent space */
    const struct model_family *family;  /* borrowed, static */
    int adm_dim;                        /* y width per sample (SDXL 2816); 0 = none */
    int ctx_dim;                        /* conditioning width it takes; 0 = any (tests) */
    int max_batch;                  /* largest batch per apply_eps call; 0 = any */
    /* enum model_concat: what the UNet takes after the latent's 4 input channels (an
     * inpainting or instruct-pix2pix UNet; family.h). With one, x_in of every apply_eps*
     * call is [batch, 4 + model_concat_channels(concat), h, w]: the model input, then the
     * entry's c_concat (ComfyUI's _apply_model torch.cat); eps stays 4 channels. */
    int concat;
    struct sampling_cfg_fn cfg_fn;  /* RescaleCFG's cfg function; zero = plain CFG */
};

/* A model with the SD1.5 noise table and latent format around ops/impl (ownership of
 * impl passes); sd_model_set_family changes both to another family's. */
struct sd_model *sd_model_new(const struct sd_model_ops *ops, void *impl);
void sd_model_set_family(struct sd_model *m, const struct model_family *f);
void sd_model_free(struct sd_model *m); /* NULL-safe; calls ops->free(impl) */
struct value *sd_model_value(struct sd_model *m);         /* "MODEL", takes m */
const struct sd_model *sd_model_of(const struct value *v); /* NULL if not one */

#endif
