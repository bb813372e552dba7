/*
 * sd15_layout — the SD1.5 architecture knobs and the exact tensor-name layout
 * they imply (sd15.md §1.2, §2.9, §3, §4, §9.1).
 *
 * One function, sd15_layout_build(), enumerates every tensor (full name with
 * its component prefix, shape, and an init "kind") for a given configuration.
 * It is the single source of truth for both the checkpoint generator
 * (tools/gen_ckpt) and the loader's missing/extra/wrong-shape checks, so the
 * two can never disagree. With sd15_config_canonical() the list equals
 * shared/data/sd15_keys.tsv (checked by test_models).
 *
 * Fixed structure (not knobs): 4 UNet levels with 2 ResBlocks each, attention
 * at levels 0..2, middle block ResBlock/ST/ResBlock, 4 VAE levels with 2
 * (encoder) / 3 (decoder) ResnetBlocks, one mid attention each.
 *
 * Pure functions; any thread.
 */
#ifndef LATENTD_MODELS_SD15_LAYOUT_H
#define LATENTD_MODELS_SD15_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#define SD15_PREFIX_UNET "model.diffusion_model."
#define SD15_PREFIX_VAE "first_stage_model."
#define SD15_PREFIX_CLIP "cond_stage_model.transformer.text_model."

struct sd15_config {
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

enum sd15_component {
    SD15_UNET = 0,
    SD15_VAE = 1,
    SD15_CLIP = 2,
    SD15_COMPONENT_COUNT = 3,
};

/* How a tensor is initialised by the generator (sd15.md §9.1). */
enum sd15_init {
    SD15_INIT_WEIGHT, /* conv / linear: N(0,1) / sqrt(fan_in) */
    SD15_INIT_NORM,   /* norm gamma: 1 + 0.1 N(0,1) */
    SD15_INIT_BIAS,   /* bias / norm beta: 0.1 N(0,1) */
    SD15_INIT_EMBED,  /* embedding table: N(0,1) */
};

struct sd15_key {
    char name[160];           /* full name, with the component prefix */
    enum sd15_component comp;
    enum sd15_init init;
    int ndim;
    int64_t shape[4];
};

/* The real SD1.5 numbers. */
void sd15_config_canonical(struct sd15_config *c);
/* The tiny test config of sd15.md §9.1: UNet MC 32 mult 1,2,3,3; CLIP 64/3/256 with
 * 2 heads; VAE 32 mult 1,2,3,3; same key set as SD1.5. */
void sd15_config_tiny(struct sd15_config *c);
/* 1 if every knob equals SD1.5's. */
int sd15_config_is_canonical(const struct sd15_config *c);

/* Component name for messages: "unet", "vae", "clip". */
const char *sd15_component_name(enum sd15_component comp);

/*
 * Enumerate every tensor of `c`: calls fn(user, key) once per tensor, in a fixed
 * order (CLIP, UNet, VAE, each in forward order). Returns the count.
 */
size_t sd15_layout_build(const struct sd15_config *c,
                         void (*fn)(void *user, const struct sd15_key *k), void *user);

#endif
