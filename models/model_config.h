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

#define MODEL_PREFIX_UNET "model.diffusion_model."
#define MODEL_PREFIX_VAE "first_stage_model."

struct model_config {
    /* UNet */
    int unet_in_ch;       /* 4 */
    int unet_out_ch;      /* 4 */
    int unet_mc;          /* model_channels: 320 */
    int unet_mult[4];     /* channel_mult: 1,2,4,4 */
    int unet_depth;       /* transformer blocks per SpatialTransformer: 1 */
    int unet_heads;       /* attention heads at every level: 8 (not stored in files) */
    int ctx_dim;          /* cross-attention context width = clip_width: 768 */
    /* CLIP text encoder */
    int clip_width;       /* 768 */
    int clip_layers;      /* 12 */
    int clip_mlp;         /* 3072 */
    int clip_heads;       /* 12 (not stored in files) */
    int clip_vocab;       /* 49408 */
    int clip_pos;         /* 77 */
    /* VAE */
    int vae_ch;           /* 128 */
    int vae_mult[4];      /* 1,2,4,4 */
    int vae_z;            /* z_channels: 4 */
    int vae_embed;        /* embed_dim: 4 */
};

enum model_component {
    MODEL_UNET = 0,
    MODEL_VAE = 1,
    MODEL_CLIP = 2,
    MODEL_COMPONENT_COUNT = 3,
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
    enum model_component comp;
    enum model_init init;
    int ndim;
    int64_t shape[4];
};

/* Component name for messages: "unet", "vae", "clip". */
const char *model_component_name(enum model_component comp);

/*
 * Enumerate every tensor of `c`: calls fn(user, key) once per tensor, in a fixed
 * order (CLIP, UNet, VAE, each in forward order). Returns the count.
 */
size_t model_layout_build(const struct model_config *c,
                         void (*fn)(void *user, const struct model_key *k), void *user);

/*
 * Named intermediates of a forward pass, for the reference comparisons in tests
 * (NULL in production): fn receives the tensor, borrowed for the call only.
 */
struct model_probe {
    void (*fn)(void *user, const char *name, const struct tensor *t);
    void *user;
};

#endif
