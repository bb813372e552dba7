/*
 * model_config — what a loaded checkpoint is: the architecture knobs of its
 * components, the components themselves (UNet, VAE, text encoders) and the exact
 * tensor-name layout the knobs imply (sd15.md §1.2, §2.9, §3, §4, §9.1).
 *
 * One function, model_layout_build(), enumerates every tensor (full name with
 * its component prefix, shape, and an init "kind") for a given configuration.
 * It is the single source of truth for both the checkpoint generator
 * (tools/gen_ckpt) and the loader's missing/extra/wrong-shape checks, so the
 * two can never disagree. For the canonical SD1.5 config the list equals
 * shared/data/sd15_keys.tsv (checked by test_models_io).
 *
 * Pure functions; any thread.
 */
#ifndef LATENTD_MODELS_MODEL_CONFIG_H
#define LATENTD_MODELS_MODEL_CONFIG_H

#include <stddef.h>
#include <stdint.h>

struct tensor;

#include "text_arch.h"
#include "unet_arch.h"
#include "vae_arch.h"

#define MODEL_PREFIX_UNET "model.diffusion_model."
#define MODEL_PREFIX_VAE "first_stage_model."

enum model_component {
    MODEL_UNET = 0,
    MODEL_VAE = 1,
    MODEL_CLIP = 2,  /* the (first) text encoder: CLIP-L for SD1.x and SDXL, OpenCLIP-H for SD2 */
    MODEL_CLIP2 = 3, /* a second text encoder: OpenCLIP bigG for SDXL */
    MODEL_COMPONENT_COUNT = 4,
};

/* Families (family.h has their table). */
enum model_family_id {
    MODEL_FAMILY_SD15 = 0,
    MODEL_FAMILY_SDXL = 1,
    MODEL_FAMILY_SDXL_REFINER = 2,
    MODEL_FAMILY_SD2 = 3,
    MODEL_FAMILY_COUNT,
};

/*
 * A model's architecture: the family it belongs to and the knobs of each component,
 * derived from tensor shapes at load (tests shrink them). Plain ints only, so two
 * configs compare with memcmp.
 */
struct model_config {
    int family; /* enum model_family_id: prefixes, latent format, ... */
    struct unet_arch unet;
    struct text_arch text[2]; /* MODEL_CLIP, MODEL_CLIP2 (width 0 = absent) */
    struct vae_arch vae;
    /*
     * What the UNet was trained to predict (enum sampling_prediction: 0 epsilon, 1 v).
     * Not a shape: SD2's 768-v is told from its 512 twin by its weights (family.h,
     * vpred_probe), as ComfyUI's SD20.model_type does.
     */
    int prediction;
    /* The schedule is rescaled to zero terminal SNR (an SDXL v-pred file's "ztsnr" key). */
    int zsnr;
};

/* How a tensor is initialised by the generator (sd15.md §9.1). */
enum model_init {
    MODEL_INIT_WEIGHT, /* conv / linear: N(0,1) / sqrt(fan_in) */
    MODEL_INIT_NORM,   /* norm gamma: 1 + 0.1 N(0,1) */
    MODEL_INIT_BIAS,   /* bias / norm beta: 0.1 N(0,1) */
    MODEL_INIT_EMBED,  /* embedding table: N(0,1) */
};

struct model_key {
    char name[160];           /* full name, with the component prefix */
    char layer[48];           /* the patcher layer (block) it is streamed with */
    int rel;                  /* name + rel: the name without the component prefix */
    enum model_component comp;
    enum model_init init;
    int ndim;
    int64_t shape[4];
};

/* Component name for messages: "unet", "vae", "clip", "clip2". */
const char *model_component_name(enum model_component comp);

/*
 * Enumerate every tensor of `c`: calls fn(user, key) once per tensor, in a fixed
 * order (text encoders, UNet, VAE, each in forward order, each with its family's
 * prefix). Returns the count.
 */
size_t model_layout_build(const struct model_config *c,
                         void (*fn)(void *user, const struct model_key *k), void *user);

/* The key prefix of component `comp` in `c`'s family ("model.diffusion_model.", ...),
 * or NULL when the family has no such component. */
const char *model_prefix(const struct model_config *c, enum model_component comp);

/*
 * Named intermediates of a forward pass, for the reference comparisons in tests
 * (NULL in production): fn receives the tensor, borrowed for the call only.
 */
struct model_probe {
    void (*fn)(void *user, const char *name, const struct tensor *t);
    void *user;
};

#endif
