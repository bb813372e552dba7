/*
 * sd_model_patches — the MODEL patches that reach into a sampling step beyond a cfg
 * function (ComfyUI's model_options: attn1 patches, attn1 replace, sampler_cfg_function,
 * sampler_post_cfg_function), set by comfy_extras nodes on a MODEL's clone:
 *
 *   HyperTile              attn1 queries tiled (unet_hypertile.h, unet_attn1.h)
 *   SelfAttentionGuidance  the middle block's attn1 map of the uncond pass recorded
 *                          (unet_attn1_colsum), then a post-cfg step that blurs the uncond
 *                          x0 where the map says and runs the uncond conditioning on it
 *                          again (sampling_sag.h); disables the cfg-1 optimisation
 *   PerpNeg                a sampler_cfg_function that also runs an empty conditioning
 *                          (sampling_perp_neg), replacing any earlier cfg function
 *   HypernetworkLoader     attn1 and attn2 patches on the key and value inputs
 *                          (models/hypernetwork.h), every call (unet.h attn_kv)
 *
 * The settings (struct sd_model_patches) belong to the MODEL (sd_backend.h owns them
 * beside FreeU's: a clone copies them, LoRA and merge nodes keep them). What changes
 * during a run (the recorded attention map, the generator HyperTile draws from, which
 * samples of a call are uncond) is the sampler's, handed to the model for each call as
 * a struct sd_call (ComfyUI's transformer_options), so a MODEL value stays immutable.
 *
 * Where we differ from ComfyUI (edges): SAG's map is read from the untiled queries (ComfyUI's
 * replace sees HyperTile's tiled ones; the two meet only with max_depth >= 3 and tiles
 * smaller than the middle block); PerpNeg's empty prompt runs in the same model call as
 * the positive and negative (ComfyUI: a call of its own), so with HyperTile and more than
 * two candidates the draws are made once per step where ComfyUI makes two sets; with
 * DisableNoise / add_noise off ComfyUI's generator holds whatever earlier work left, ours
 * is seeded with the seed. A second HyperTile on one MODEL is refused (ComfyUI would tile
 * tiled queries); a second SAG keeps one set of settings, the last.
 *
 * Threads: executor thread.
 */
#ifndef LATENTD_NODES_SD_MODEL_PATCHES_H
#define LATENTD_NODES_SD_MODEL_PATCHES_H

#include <stdint.h>

#include "err.h"
#include "node_value.h"
#include "sampling_rng.h"
#include "sd_types.h"
#include "unet.h"
#include "unet_hypertile.h"

struct hypernetwork; /* models/hypernetwork.h */

#define SD_MODEL_MAX_HYPERNETWORKS 8

struct sd_model_patches {
    /* HypernetworkLoader: attn1 and attn2 key/value input patches, applied in the order
     * added (ComfyUI appends to both lists); owned references. */
    struct hypernetwork *hn[SD_MODEL_MAX_HYPERNETWORKS];
    float hn_strength[SD_MODEL_MAX_HYPERNETWORKS];
    int n_hn;
    int hypertile_on;
    struct unet_hypertile hypertile;
    int sag_on;
    double sag_scale, sag_blur_sigma;
    struct value *perp_neg_empty; /* owned reference to a CONDITIONING, or NULL */
    double perp_neg_scale;
};

/* A deep copy (the conditioning shared by reference); NULL for NULL. */
struct sd_model_patches *sd_model_patches_clone(const struct sd_model_patches *p);
void sd_model_patches_free(struct sd_model_patches *p); /* NULL-safe */

/* What SelfAttentionGuidance recorded: per latent sample, the map's column sums. */
struct sd_sag_capture {
    double *colsum;  /* owned, [batch · tokens] */
    int batch;       /* the latent's samples */
    int64_t tokens;  /* the middle block's attention tokens (0: nothing yet) */
    int have;        /* some call recorded it */
};

void sd_sag_capture_release(struct sd_sag_capture *c);

/*
 * One model call's transformer options. cap_n > 0: samples [cap_first, cap_first + cap_n)
 * of the call are the first uncond chunk (cond_or_uncond.index(1)), latent samples
 * cap_smp0.. ; SAG records their map into cap.
 */
struct sd_call {
    const struct sd_model_patches *patches; /* borrowed; NULL: nothing to do */
    struct sampling_rng *rng;               /* HyperTile's generator, or NULL */
    struct sd_sag_capture *cap;             /* NULL: SAG records nothing */
    int64_t cap_first, cap_n;
    int cap_smp0;
};

/* The UNet hooks of a call (unet.h struct unet_patches' attn1 members), for the backend. */
int sd_call_attn1_tiles(const struct sd_call *c, const struct unet_attn1_site *s,
                        struct unet_attn1_tiles *t, struct err *e);
int sd_call_attn1_scores(const struct sd_call *c, const struct unet_attn1_site *s,
                         const struct tensor *q, const struct tensor *k, struct err *e);
/* Whether a call with these patches needs the attn1 hooks at all. */
int sd_call_has_attn1(const struct sd_call *c);

/*
 * PyTorch's global generator as ComfyUI leaves it after prepare_noise for `lat` with
 * `seed` (torch.manual_seed, then the noise draws), into rng. With disable_noise ComfyUI
 * draws nothing and the generator holds whatever earlier work left: we seed it with
 * `seed` and draw nothing (documented difference). Returns 0 or <0 with e set.
 */
int sd_model_patches_noise_rng(uint64_t seed, int disable_noise, const struct sd_latent *lat,
                               struct sampling_rng *rng, struct err *e);

#endif
