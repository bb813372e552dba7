/*
 * ckpt_gen — deterministic random-weight SD1.5 checkpoints with the real key
 * layout (sd15.md §9.1), for tests, e2e fixtures and benchmarks.
 *
 * Weights depend only on (seed, tensor name, shape): the fp32, fp16 and bf16
 * variants of one config hold the same values up to rounding, and a tensor's
 * values do not change when other tensors are added or removed (variants).
 * Each tensor is drawn from its own counter-based stream (splitmix64 seeded by
 * a hash of the name), Box-Muller normals, scaled per model_init.
 *
 * A VAE tensor's values depend on its checkpoint name (first_stage_model.*)
 * whatever naming it is written in, so a standalone VAE of seed S holds the
 * same weights as the VAE of a checkpoint of seed S.
 *
 * Used by tools/gen_ckpt.c (the CLI) and linked into tests. Not thread-safe
 * per call; calls are independent.
 */
#ifndef LATENTD_TOOLS_CKPT_GEN_H
#define LATENTD_TOOLS_CKPT_GEN_H

#include <stdint.h>

#include "err.h"
#include "safetensors.h"
#include "model_config.h"

enum ckpt_gen_flags {
    CKPT_GEN_EXTRAS = 1 << 0,        /* model_ema.*, schedule buffers, position_ids I64 */
    CKPT_GEN_OLD_CLIP = 1 << 1,      /* cond_stage_model.transformer.<no text_model.> */
    CKPT_GEN_CONV_2D = 1 << 2,       /* 1x1 conv weights (proj_in/out, VAE attn) stored 2-D */
    CKPT_GEN_METADATA = 1 << 3,      /* a __metadata__ block with a few entries */
    CKPT_GEN_SDXL_MARK = 1 << 4,     /* add label_emb.0.0.weight (an SDXL/unCLIP marker) */
    CKPT_GEN_OPENCLIP = 1 << 5,      /* SD2-style text encoder keys cond_stage_model.model.* */
    CKPT_GEN_NO_VAE = 1 << 6,        /* leave the VAE out */
    CKPT_GEN_EMBED_F16 = 1 << 7,     /* store the token embedding table as F16 regardless */
    CKPT_GEN_NO_CLIP = 1 << 8,       /* leave out the text encoder */
    CKPT_GEN_VAE_ONLY = 1 << 9,      /* only the VAE: a standalone VAE file */
    CKPT_GEN_VAE_BARE = 1 << 10,     /* VAE keys without first_stage_model. */
    CKPT_GEN_VAE_DIFFUSERS = 1 << 11, /* VAE keys in diffusers naming (implies bare, 2-D attn) */
    /* A ControlNet (models/controlnet/controlnet.h) of cfg's UNet instead of a checkpoint:
     * control_model.* names; values depend on the control_model.* name whatever naming. */
    CKPT_GEN_CONTROLNET = 1 << 12,
    CKPT_GEN_CN_BARE = 1 << 13, /* with CONTROLNET: names without control_model. */
    CKPT_GEN_CN_DIFF = 1 << 14, /* with CONTROLNET: add the "difference" marker tensor */
    CKPT_GEN_CN_DIFFUSERS = 1 << 15, /* with CONTROLNET: diffusers ControlNetModel names */
};

struct ckpt_gen_opts {
    struct model_config cfg;
    enum st_dtype dtype;       /* F32, F16 or BF16 */
    uint64_t seed;
    unsigned flags;            /* enum ckpt_gen_flags */
    const char *nan_tensor;    /* full name of a tensor to poison with a NaN, or NULL */
    const char *drop_tensor;   /* full name (internal or as written) to leave out, or NULL */
    const char *extra_tensor;  /* full name of an extra (unknown) tensor to add, or NULL */
    int cn_union_types;        /* with CONTROLNET: a Union ControlNet of this many control
                                * types (6, ProMax 8; diffusers names as xinsir's), or 0 */
    int cn_lora_rank;          /* with CONTROLNET: a Control-LoRA of this rank (bare names,
                                * "lora_controlnet"; the trunk's linear and conv weights as
                                * name.up / name.down, the rest whole), or 0 */
    int text_file;             /* enum ckpt_gen_text: one text encoder alone, or none */
    int text_slot;             /* with text_file: cfg's first (0) or second (1) encoder */
    int t2i;                   /* enum ckpt_gen_t2i: a T2I-Adapter instead of a checkpoint */
    int t2i_hint_ch;           /* its hint channels (1 or 3; 0: 3) */
    int gligen;                /* a GLIGEN model (models/gligen/gligen.h) for cfg's UNet
                                * instead of a checkpoint: text embeddings cfg.text[0].width
                                * wide (CLIP-L's pooled output), ComfyUI's file names */
    int gligen_key_dim;        /* its object token width (0: 768, SD1.x's: 8 heads) */
};

/*
 * A standalone text encoder (CLIPLoader / DualCLIPLoader files) of cfg's encoder
 * text_slot, holding the same values as that encoder in a checkpoint of the same seed.
 * A shrunk one says its kind and heads in __metadata__ (latentd.clip_kind, clip_heads).
 */
enum ckpt_gen_text {
    CKPT_GEN_TEXT_NONE,
    CKPT_GEN_TEXT_HF,       /* text_model.* (an OpenCLIP encoder split: q/k/v from in_proj,
                             * text_projection.weight = P transposed) */
    CKPT_GEN_TEXT_OPENCLIP, /* bare OpenCLIP names (only for an OpenCLIP encoder) */
    CKPT_GEN_TEXT_PREFIXED, /* the checkpoint's own names, prefix included */
};

/* T2I-Adapters (models/controlnet/t2i_adapter.h) with widths model_ch x {1, 2, 4, 4} of
 * cfg's UNet, 1x1 kernels, avg-pool downsampling; CKPT_GEN_CN_DIFFUSERS: diffusers names
 * (full ones only). Values depend on the ComfyUI name whatever the naming. */
enum ckpt_gen_t2i {
    CKPT_GEN_T2I_NONE,
    CKPT_GEN_T2I_FULL,  /* Adapter, SD1.5 */
    CKPT_GEN_T2I_LIGHT, /* Adapter_light */
    CKPT_GEN_T2I_XL,    /* Adapter for SDXL (16x unshuffle) */
};

/* Defaults: tiny config, F32, seed 42, no flags. */
void ckpt_gen_opts_default(struct ckpt_gen_opts *o);

/* Write the checkpoint to `path`. Returns 0 or a negative ERR_* with a message. */
int ckpt_gen_write(const struct ckpt_gen_opts *o, const char *path, struct err *e);

/*
 * The benchmarks' full-size random checkpoint (SD1.5 widths, f16, default seed):
 * `path`, or when NULL $LATENTD_BENCH_DIR (else ".") + "/sd15_full_random_f16.safetensors"
 * written into buf[n]. Generated (~2 GiB, a line on stdout) only when missing.
 * Returns the path used, or NULL with a message in `e`.
 */
const char *ckpt_gen_bench_full(const char *path, char *buf, size_t n, struct err *e);

/* The same for `family` (MODEL_FAMILY_SD15 or MODEL_FAMILY_SDXL: SDXL base widths,
 * ~6.5 GiB as f16, "sdxl_full_random_f16.safetensors"; the same file gen_ckpt --arch sdxl
 * --full --dtype f16 writes). */
const char *ckpt_gen_bench_full_family(int family, const char *path, char *buf, size_t n,
                                       struct err *e);

/* Fill dst[n] with the deterministic values of tensor `name` (fp32, before storage
 * rounding). Exposed so tests can predict exact weights. */
void ckpt_gen_fill(uint64_t seed, const char *name, enum model_init init, int ndim,
                   const int64_t *shape, float *dst, uint64_t n);

#endif
