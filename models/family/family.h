/*
 * family — the model families latentd knows, one table entry each: how a checkpoint
 * is recognised, its components and their key prefixes, its canonical knobs, latent
 * format and model sampling (ComfyUI's supported_models.py over model_detection.py).
 * A family is an entry plus code of its own only where it really differs; the UNet,
 * text encoders and VAE are shared and configured by model_config.
 *
 * Detection follows ComfyUI: the UNet knobs are derived from shapes
 * (checkpoint.c), then the entries are tried in table order and the first whose
 * match() accepts them wins. Shrunk test checkpoints (sd15.md §9.1) match their
 * family by structure and are reported as not canonical.
 *
 * Pure data and functions; any thread.
 */
#ifndef LATENTD_MODELS_FAMILY_H
#define LATENTD_MODELS_FAMILY_H

#include "model_config.h"
#include "sampling_preview.h"

/* A latent space (ComfyUI's latent_formats.py). */
struct latent_format {
    int channels;       /* 4 */
    float scale_factor; /* the sampler works on latent * scale_factor: 0.18215 */
    struct sampling_latent_rgb rgb; /* Latent2RGB previews (sd15.md §7, sdxl.md §7) */
};

/* ModelSamplingDiscrete's schedule (sd15.md §5.1). */
struct family_sampling {
    double linear_start; /* 0.00085 */
    double linear_end;   /* 0.012 */
    int eps;             /* 1: epsilon prediction unless the weights say v (vpred_probe) */
};

/* The ADM vector's size inputs (sdxl.md §5.2: the sampler fills width/height from the
 * latent x 8 and target_* from them unless CLIPTextEncodeSDXL set them). */
struct adm_sizes {
    int width, height;               /* pixels */
    int crop_w, crop_h;              /* 0 by default */
    int target_width, target_height; /* default: width, height */
    double aesthetic_score;          /* refiner: 6 positive, 2.5 negative by default */
};

struct model_family {
    int id;                                    /* enum model_family_id */
    const char *name;                          /* "SD1.5", for messages and logs */
    const char *prefix[MODEL_COMPONENT_COUNT]; /* key prefix per component, NULL = none */
    int text_naming[2]; /* enum text_naming of MODEL_CLIP, MODEL_CLIP2 in files */
    struct latent_format latent;
    struct family_sampling sampling;
    /*
     * 1 when UNet knobs derived from shapes belong to this family (the checks of
     * ComfyUI's unet_config for it, by structure rather than exact widths so that
     * shrunk test files match too).
     */
    int (*match)(const struct unet_arch *u);
    /* The real model's knobs (every component). */
    void (*canonical)(struct model_config *c);
    /* Text encoders' heads when a file does not say (heads are not stored). */
    int (*text_heads)(const struct text_arch *t);
    /*
     * The conditioning builder's settings (ComfyUI's sd1_clip / sdxl_clip options): the
     * layer when CLIPSetLastLayer was not used (-1 last; SDXL -2), whether a selected
     * layer gets the final norm, and per encoder whether it pads with id 0. The
     * encoders' outputs are concatenated per token; the pooled vector is the last
     * encoder's.
     */
    int text_layer;
    int text_norm_hidden;
    int text_pad_zero[2];
    /* y [adm_in] from the pooled vector and sizes, for a UNet with an ADM input; NULL
     * for families without one. */
    void (*encode_adm)(const float *pooled, int pooled_dim, const struct adm_sizes *s, float *y);
    int adm_embeds; /* 256-wide embeddings after the pooled vector in y (SDXL 6, refiner 5) */
    /*
     * Optional (NULL: none): a key prefix only this family's checkpoints have (SD2's
     * OpenCLIP-H text encoder). A shrunk file whose UNet structure also fits an earlier
     * entry is this family when the prefix is present (ComfyUI's required_keys; its real
     * files are told apart by context width alone).
     */
    const char *marker;
    /*
     * Optional (NULL: always epsilon): ComfyUI's SD20.model_type. A 4-channel UNet whose
     * tensor `vpred_probe` (UNet-relative) has a population std above 0.09 predicts v.
     */
    const char *vpred_probe;
    /*
     * Optional (NULL: none): ComfyUI's SDXL.model_type. A top-level key whose presence
     * marks v-prediction ("v_pred", as CheckpointSave writes it for such a model); with a
     * "ztsnr" key too the schedule is zero-terminal-SNR.
     */
    const char *vpred_key;
    /* The concat kinds this family has models of: bit 1 << MODEL_CONCAT_* (NONE implied). */
    unsigned concat_kinds;
};

/*
 * What a UNet's input channels beyond the latent's 4 carry (ComfyUI's concat_cond, joined
 * to the model input along channels before every call: _apply_model's torch.cat):
 * inpainting UNets (9 channels; BaseModel.set_inpaint) take the noise mask and the masked
 * image's latent, instruct-pix2pix ones (8; IP2P.concat_cond) the image's latent.
 */
enum model_concat {
    MODEL_CONCAT_NONE = 0, /* in_ch 4 */
    MODEL_CONCAT_INPAINT,  /* in_ch 9: mask (1) | masked image latent x scale (4) */
    MODEL_CONCAT_IP2P,     /* in_ch 8: image latent, unscaled (4) */
    MODEL_CONCAT_COUNT,
};

/* Channels of c_concat for kind k (0, 5, 4). */
int model_concat_channels(enum model_concat k);

/*
 * The concat kind of a UNet of family f with in_ch input channels, or -1 when the family
 * has no such model (ComfyUI's list: SD1.x and SDXL inpainting and instruct-pix2pix,
 * SD2.x 512-inpainting; the SDXL refiner none).
 */
int model_family_concat(const struct model_family *f, int in_ch);

#define FAMILY_VPRED_STD 0.09 /* SD20.model_type's threshold on vpred_probe's std */

/* SD1.x's latent space (latent_formats.SD15), which SD2.x shares. */
#define LATENT_FORMAT_SD15                                                                    \
    {                                                                                         \
        .channels = 4, .scale_factor = 0.18215f,                                              \
        .rgb = {.factors = {{0.3512f, 0.2297f, 0.3227f},                                      \
                            {0.3250f, 0.4974f, 0.2350f},                                      \
                            {-0.2829f, 0.1762f, 0.2721f},                                     \
                            {-0.2120f, -0.2616f, -0.7177f}}}                                  \
    }

/* The entry for `id`, or NULL. */
const struct model_family *model_family_get(int id);

/*
 * The family of UNet u, or NULL: first an entry with a marker that has_prefix(user,
 * marker) reports present and whose match() accepts u, else the first entry whose
 * match() accepts u. has_prefix may be NULL (no file to ask).
 */
const struct model_family *model_family_detect(const struct unet_arch *u,
                                               int (*has_prefix)(void *user, const char *prefix),
                                               void *user);

/* 1 if c equals its family's canonical knobs. */
int model_config_is_canonical(const struct model_config *c);

/* ---- Shared by the entries (family.c) ---- */

/* Heads of a text encoder with 64-wide heads (CLIP-L, bigG, ViT-H); 1 below that. */
int family_text_heads_w64(const struct text_arch *t);
/* SD1.x's UNet structure, which SD2.x shares: 4 levels of 2 ResBlocks, transformers at
 * levels 0-2 and the middle, no ADM input. Widths and context are not compared. */
int family_unet_is_sd1x_structure(const struct unet_arch *u);
/* That structure with model channels `mc`, level multipliers `mult`, context `ctx`
 * and 8 heads (SD1.5's; SD2.x then sets 64-wide heads and Linear projections). */
void family_unet_sd1x(struct unet_arch *u, int mc, const int mult[4], int ctx);

/* ---- SD1.5 (family_sd15.c) ---- */

#define SD15_PREFIX_CLIP "cond_stage_model.transformer.text_model."

extern const struct model_family family_sd15;

/* The real SD1.5 numbers. */
void sd15_config_canonical(struct model_config *c);
/* The tiny test config of sd15.md §9.1: UNet MC 32 mult 1,2,3,3; CLIP 64/3/256 with
 * 2 heads; VAE 32 mult 1,2,3,3; same key set as SD1.5. */
void sd15_config_tiny(struct model_config *c);
/* Transformer depth `depth` in every SpatialTransformer (levels 0-2 and the middle). */
void sd15_config_set_depth(struct model_config *c, int depth);
/* 1 if every knob equals SD1.5's. */
int sd15_config_is_canonical(const struct model_config *c);

/* ---- SDXL base (family_sdxl.c) ---- */

extern const struct model_family family_sdxl;

/* The real SDXL base numbers (sdxl.md §6). */
void sdxl_config_canonical(struct model_config *c);
/* A tiny SDXL (sdxl.md §12): UNet MC 32, 3 levels, depth 0,2,10 of 64-wide heads;
 * CLIP-L and bigG 64 wide, 3 layers; context 128; ADM 64 + 1536; VAE as SD1.5's tiny. */
void sdxl_config_tiny(struct model_config *c);

#define SDXL_ADM_EMBED 256 /* width of one size embedding (Timestep(256)) */

/* E(v): [cos(v f_0..127), sin(v f_0..127)], f_k = exp(-ln(10000) k / 128), in float32. */
void sdxl_adm_embed(float v, float out[SDXL_ADM_EMBED]);

/* y [pooled_dim + 6 * 256] = pooled | E(height) | E(width) | E(crop_h) | E(crop_w) |
 * E(target_height) | E(target_width) (sdxl.md §5.1; 2816 for the base). */
void sdxl_adm_vector(const float *pooled, int pooled_dim, const struct adm_sizes *s, float *y);

/* ---- SDXL refiner (family_sdxl_refiner.c) ---- */

extern const struct model_family family_sdxl_refiner;

void sdxl_refiner_config_canonical(struct model_config *c);
/* Tiny: UNet MC 32, 4 levels, depth 0,4,4,0; bigG 64 wide, 3 layers; ADM 64 + 1280. */
void sdxl_refiner_config_tiny(struct model_config *c);

/* ---- SD2.x (family_sd2.c) ---- */

#define SD2_PREFIX_CLIP "cond_stage_model.model."

extern const struct model_family family_sd2;

/* The real SD2.x numbers (512 base, eps); prediction 1 for 768-v. */
void sd2_config_canonical(struct model_config *c);
/* A tiny SD2: UNet MC 64 mult 1,1,2,2 with 64-wide heads, linear projections; OpenCLIP
 * text encoder 64 wide, 3 layers, projection 64; context 64; VAE as SD1.5's tiny. */
void sd2_config_tiny(struct model_config *c);

#endif
