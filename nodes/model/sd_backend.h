/*
 * sd_backend — the models behind the MODEL, CLIP and VAE link types, and the
 * runs the model nodes make with them (models/ unet.h, text_encoder.h, vae.h,
 * through the memory manager).
 *
 *   MODEL  an sd_model (sd_types.h) whose ops run unet_eval on a UNet
 *          patcher; prepare() asks the planner for the exact plan of the
 *          largest call, finish() closes the node's memory report.
 *   CLIP   struct sd_clip: a text-encoder patcher, its config, the tokenizer
 *          (shared between clones) and the "stop at layer" setting.
 *   VAE    struct sd_vae: a VAE patcher and its config.
 *
 * Every run takes the node's memory manager (node_env.mm); each model call is
 * preceded by mm_load_models() with the call's exact activation bytes
 * (unet/text/vae *_plan_bytes plus the input and output tensors) and followed by
 * mm_node_end(). Weights are stored f32 (sd15.md §8.5's CPU policy; the CUDA
 * fp16 UNet policy is the models layer's to add).
 *
 * Threads: executor thread only. The values may be released on any thread.
 */
#ifndef LATENTD_NODES_SD_BACKEND_H
#define LATENTD_NODES_SD_BACKEND_H

#include "err.h"
#include "node_value.h"
#include "patcher.h"
#include "model_config.h"
#include "sd_types.h"
#include "unet_freeu.h"

struct mm;
struct clip_tokenizer;
struct sd_clip_shared;

struct sd_clip {
    struct patcher *p;  /* owned reference: the (first) text encoder */
    struct patcher *p2; /* owned reference: SDXL's bigG, or NULL */
    struct model_config cfg;
    int clip_skip;                 /* -1 = last layer, -2 = penultimate, ... */
    int clip_skip_set;             /* CLIPSetLastLayer ran (else the family's default) */
    struct sd_clip_shared *_shared; /* refcounted tokenizer */
};

struct sd_vae {
    struct patcher *p;             /* owned reference */
    struct model_config cfg;
};

/*
 * A MODEL over a UNet patcher (takes over the caller's reference to `unet`).
 * Free with sd_model_free (through the value).
 */
struct sd_model *sd_unet_model_new(struct patcher *unet, const struct model_config *cfg);

/*
 * The UNet patcher (borrowed) and config of a MODEL made by sd_unet_model_new,
 * for LoRA nodes that clone and patch it; NULL when `m` is another backend.
 */
struct patcher *sd_model_unet_patcher(const struct sd_model *m, struct model_config *cfg);

/*
 * ComfyUI's model.clone() for the model patch nodes: a new MODEL over the same UNet
 * (a new patcher reference) with m's max_batch and patches (RescaleCFG's cfg function,
 * FreeU). NULL when `m` is another backend. Free with sd_model_free (through the value).
 */
struct sd_model *sd_model_clone(const struct sd_model *m);

/*
 * Add FreeU / FreeU_V2 (unet_freeu.h; f copied) to a MODEL made by sd_unet_model_new
 * or sd_model_clone. Like ComfyUI's set_model_output_block_patch it appends: patches
 * run in the order added, at most SD_MODEL_MAX_FREEU. ERR_INVALID when `m` is another
 * backend or already has that many.
 */
#define SD_MODEL_MAX_FREEU 4
int sd_model_set_freeu(struct sd_model *m, const struct unet_freeu *f);

/* Copy src's patches (cfg function, FreeU, the attention patches) onto dst, a new UNet
 * MODEL (LoRA nodes). */
void sd_model_copy_patches(struct sd_model *dst, const struct sd_model *src);

struct sd_model_patches; /* sd_model_patches.h */
struct sd_call;

/*
 * The attention patches (HyperTile, SelfAttentionGuidance, PerpNeg) of a UNet MODEL:
 * _of borrows them (NULL: none, or another backend); _mut makes them on a MODEL from
 * sd_model_clone for a patch node (NULL for another backend).
 */
const struct sd_model_patches *sd_model_patches_of(const struct sd_model *m);
struct sd_model_patches *sd_model_patches_mut(struct sd_model *m);

/*
 * The transformer options of m's next model calls (borrowed until the next call of this;
 * NULL clears). No-op for other backends. Executor thread.
 */
void sd_model_set_call(const struct sd_model *m, const struct sd_call *call);

/*
 * A CLIP over a text-encoder patcher (takes over the reference) with a
 * tokenizer loaded from the default search path (clip_tokenizer.h).
 * Returns 0 or the tokenizer's error.
 */
int sd_clip_new(struct patcher *clip, const struct model_config *cfg, struct sd_clip **out,
                struct err *e);

/* Textual-inversion embeddings ("embedding:NAME" in prompts) load from
 * <models_dir>/embeddings; models_dir NULL leaves them unset (warned and ignored). */
void sd_clip_set_embedding_dir(struct sd_clip *c, const char *models_dir);
/* A copy sharing the patcher and tokenizer (CLIPSetLastLayer). */
/* Give a CLIP its second text encoder (SDXL's bigG; takes the reference). */
void sd_clip_set_second(struct sd_clip *c, struct patcher *p2);

struct sd_clip *sd_clip_clone(const struct sd_clip *c);
void sd_clip_free(struct sd_clip *c); /* NULL-safe */
struct value *sd_clip_value(struct sd_clip *c);           /* "CLIP", takes c */
const struct sd_clip *sd_clip_of(const struct value *v);  /* NULL if not one */

struct sd_vae *sd_vae_new(struct patcher *vae, const struct model_config *cfg); /* takes p */
void sd_vae_free(struct sd_vae *v); /* NULL-safe */
struct value *sd_vae_value(struct sd_vae *v);             /* "VAE", takes v */
const struct sd_vae *sd_vae_of(const struct value *v);    /* NULL if not one */

/*
 * CLIPTextEncode: tokenize `text` (ComfyUI prompt syntax), encode it with the
 * CLIP's layer setting, and return a one-entry conditioning [1, 77·chunks,
 * width] with its pooled vector (caller frees with sd_cond_free).
 */
/*
 * CLIPTextEncodeSDXL (sdxl.md §4.7): text_g through bigG (and the pooled vector), text_l
 * through CLIP-L, the shorter token list evened out with empty-prompt chunks; the entry
 * carries `sizes` for the ADM vector. ERR_INVALID for a CLIP without bigG.
 */
int sd_clip_encode_sdxl(const struct sd_clip *clip, struct mm *mm, const char *text_g,
                        const char *text_l, const struct adm_sizes *sizes, struct sd_cond **out,
                        struct err *e);

/*
 * CLIPTextEncodeSDXLRefiner: `text` through the CLIP's encoders as CLIPTextEncode does; the
 * entry carries the aesthetic score and size (crops 0, targets = size) for the ADM vector.
 * ERR_INVALID for a CLIP of neither SDXL family.
 */
int sd_clip_encode_sdxl_refiner(const struct sd_clip *clip, struct mm *mm, const char *text,
                                double ascore, int width, int height, struct sd_cond **out,
                                struct err *e);

int sd_clip_encode_text(const struct sd_clip *clip, struct mm *mm, const char *text,
                        struct sd_cond **out, struct err *e);

/*
 * VAEDecode / VAEDecodeTiled: decode every sample of `lat` one at a time into
 * a new IMAGE value [B, 8h, 8w, 3] in 0..1. tile > 0 decodes in tiles of
 * tile × tile latent pixels with `overlap` (vae_decode_tiled: overlap
 * below tile / 2); otherwise whole, falling back to 64/16 tiles when the
 * device runs out of memory (as ComfyUI does).
 */
int sd_vae_decode_latent(const struct sd_vae *vae, struct mm *mm, const struct sd_latent *lat,
                         int tile, int overlap, struct value **image, struct err *e);

/*
 * VAEEncode / VAEEncodeTiled: IMAGE [B, H, W, C] (first 3 channels; H and W
 * cropped to multiples of 8 around the centre as ComfyUI does) into a new
 * latent of the encoder mean [B, 4, H/8, W/8] (caller frees with
 * sd_latent_free). tile > 0 encodes in tiles of tile × tile pixels with
 * `overlap` pixels (vae_encode_tiled: tile a multiple of 16, overlap of
 * 8 and below tile / 2); otherwise whole with the 512/64 tiled retry on OOM.
 */
int sd_vae_encode_image(const struct sd_vae *vae, struct mm *mm, const struct value *image,
                        int tile, int overlap, struct sd_latent **out, struct err *e);

#endif
