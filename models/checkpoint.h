/*
 * checkpoint — load a single-file checkpoint into patcher models (UNet, VAE, text
 * encoders), after checking what it is (sd15.md §1, sdxl.md §1, §3).
 *
 * Loading:
 *   1. st_open() validates the container (safetensors.h).
 *   2. Names are normalised (§1.3: the old CLIP naming without `text_model.`
 *      gains it); EMA copies (`model_ema.*`), training buffers (betas, ...),
 *      `position_ids`, `text_projection` and `first_stage_model.loss.*` are
 *      skipped.
 *   3. Detection (§1.5, checkpoint_detect.c) derives every width and count from
 *      shapes, the family table (family.h) says which family that is, and other
 *      model types are refused with ERR_UNSUPPORTED and "unsupported model type:
 *      ..." naming what was found (SD2.x, SDXL, inpainting, no UNet, ...).
 *   4. The full expected tensor list for the derived config (model_config.h) is
 *      checked against the file: a missing tensor, an unexpected tensor under a
 *      component prefix, a wrong shape, a non-float dtype or a NaN/Inf value is
 *      an error naming the file and the tensor.
 *   5. Each component becomes a `struct patcher_model` (memory/patcher.h) whose
 *      layers are the forward-order blocks (a ResBlock, a SpatialTransformer, an
 *      encoder layer, ...), with the checkpoint names as weight keys (LoRA
 *      patches name them). Weights whose file dtype equals the compute dtype are
 *      borrowed from the read-only mapping (no copy); the mapping lives until the
 *      last model that borrows from it is freed (and is closed right after the load
 *      when none does). A model that borrows fails patcher_acquire once its file is
 *      rewritten in place or truncated (st_check), instead of reading other bytes.
 *
 * Heads are not stored in checkpoints: the family says (SD1.5: 8 UNet heads; SDXL:
 * 64-wide heads; text encoders 64-wide heads). A shrunk test file may say otherwise in
 * its __metadata__ ("latentd.unet_heads", "latentd.clip_heads"), which the generator
 * writes. Text encoders stored in OpenCLIP naming (SDXL's bigG) are renamed to the
 * internal Hugging Face names at step 2 (text_arch.h).
 *
 * Threads: the executor thread (it builds patcher models).
 */
#ifndef LATENTD_MODELS_CHECKPOINT_H
#define LATENTD_MODELS_CHECKPOINT_H

#include "err.h"
#include "patcher.h"
#include "safetensors.h"
#include "model_config.h"
#include "tensor.h"

enum model_load_flags {
    MODEL_LOAD_UNET = 1 << 0,
    MODEL_LOAD_VAE = 1 << 1,
    MODEL_LOAD_CLIP = 1 << 2,
    MODEL_LOAD_ALL = 7,
    /* With MODEL_LOAD_VAE: the file is a standalone VAE (see model_vae_load). */
    MODEL_LOAD_VAE_FILE = 1 << 3,
    /* Convert every weight to its dt[] at load (an owned copy; the file is closed
     * after) instead of keeping f16/bf16 file weights of an f32 model at the file
     * dtype (patcher_model_set_convert): the pre-issue-15 behaviour, for comparisons. */
    MODEL_LOAD_CONVERT = 1 << 4,
    /* Bits 5 and up are checkpoint_text.c's (checkpoint_impl.h). */
};

struct model_ckpt {
    struct model_config cfg;            /* derived from shapes */
    int canonical;                      /* 1 if cfg is its family's real model (not shrunk) */
    struct patcher_model *model[MODEL_COMPONENT_COUNT]; /* owned refs; NULL if not loaded */
    size_t bytes[MODEL_COMPONENT_COUNT];                /* weight bytes per component */
    int tensors[MODEL_COMPONENT_COUNT];                 /* tensors per component */
    int skipped;                       /* tensors ignored (EMA, buffers, ...) */
};

/*
 * Open `path` and build the components named in `flags` (a component asked for
 * but absent is an error). `dt[c]` is the compute dtype wanted for component c
 * (TENSOR_F32 on the CPU; sd15.md §8.5); f16/bf16 file weights of an f32 component
 * stay at the file dtype, borrowed from the mapping, unless MODEL_LOAD_CONVERT (see
 * patcher.h). ck->bytes counts weights at dt. Fills *ck; release with
 * model_ckpt_release. Returns 0 or a negative ERR_* with a message in `e`.
 */
int model_ckpt_load(const char *path, unsigned flags, const enum tensor_dtype dt[3],
                   struct model_ckpt *ck, struct err *e);

/*
 * Load a standalone VAE file (ComfyUI's VAELoader) into ck->model[MODEL_VAE] only,
 * stored as `dt`. Accepted namings, mapped to the checkpoint's first_stage_model.*
 * names (the patcher's weight keys are the same as for a checkpoint's VAE):
 *   - bare LDM keys (encoder.conv_in.weight, decoder.*, quant_conv.*,
 *     post_quant_conv.*), as in vae-ft-mse-840000-ema-pruned.safetensors;
 *   - the same under first_stage_model.; a full checkpoint gives its VAE part;
 *   - diffusers AutoencoderKL keys (encoder.down_blocks.0.resnets.0.conv1.weight,
 *     decoder.up_blocks.*, mid_block.attentions.0.to_q / query, ...).
 * A file holding no VAE (a LoRA, a UNet, ...) fails with ERR_INVALID naming the
 * file and what it holds; the other errors are model_ckpt_load's.
 */
int model_vae_load(const char *path, enum tensor_dtype dt, struct model_ckpt *ck, struct err *e);

/*
 * The diffusers name of a VAE tensor given without its first_stage_model. prefix
 * ("decoder.up.3.block.0.nin_shortcut.weight" -> "decoder.up_blocks.0.resnets.0.
 * conv_shortcut.weight"); names that do not change are copied. For the generator
 * (tools/ckpt_gen) and tests. Returns 0, or -1 if `ldm` is not a VAE name.
 */
int vae_name_to_diffusers(const char *ldm, char *out, size_t size);

/* The text encoder a standalone file holds (ComfyUI's TEModel, the CLIP kinds). */
enum model_text_kind {
    MODEL_TEXT_NONE = 0,
    MODEL_TEXT_CLIP_L,  /* OpenAI CLIP ViT-L/14: SD1.x, SDXL's first */
    MODEL_TEXT_CLIP_H,  /* OpenCLIP ViT-H/14: SD2.x */
    MODEL_TEXT_CLIP_G,  /* OpenCLIP ViT-bigG/14: SDXL's second, the refiner's */
};

/*
 * Which encoder the text-encoder file `path` holds (CLIPLoader / DualCLIPLoader; the
 * namings accepted are checkpoint_text.c's): ComfyUI's detect_te_model by layer count,
 * unless a checkpoint prefix or the test files' "latentd.clip_kind" metadata names it.
 * 0 and *kind set, or ERR_INVALID naming what the file holds instead (a T5, a VAE, ...),
 * ERR_UNSUPPORTED for a file with two encoders, or st_open's errors; message in e.
 */
int model_text_probe(const char *path, enum model_text_kind *kind, struct err *e);

/*
 * Load the text-encoder file `path` as text encoder `comp` (MODEL_CLIP or MODEL_CLIP2) of
 * `family` into ck->model[comp], stored as `dt`; ck->cfg is the family's canonical config
 * with the file's encoder knobs in that slot and the other slot's width 0. The weight
 * keys are the family's checkpoint names, so the model is the one a checkpoint of the
 * same weights gives. Errors as model_ckpt_load's (a missing tensor, a wrong shape, ...).
 */
int model_text_load(const char *path, int family, enum model_component comp,
                    enum tensor_dtype dt, struct model_ckpt *ck, struct err *e);

/*
 * The __metadata__ a shrunk config's text encoder `comp` needs when written alone (heads
 * are not stored; its kind cannot be told from a shrunk layer count): fn(user, key, value)
 * for "latentd.clip_heads" and "latentd.clip_kind"; nothing for a canonical config. For
 * writers: the generator and CLIPSave.
 */
void model_text_file_meta(const struct model_config *cfg, enum model_component comp,
                          void (*fn)(void *user, const char *key, const char *val), void *user);

/* "CLIP-L", "OpenCLIP ViT-H", ... for messages. */
const char *model_text_kind_name(enum model_text_kind k);

/* Drop the model references (the models stay alive while patchers hold them). */
void model_ckpt_release(struct model_ckpt *ck);

/*
 * Only detection and validation (steps 1-4), no models: fills *cfg. Useful for
 * tools and tests. Same errors as model_ckpt_load.
 */
int model_ckpt_probe(const char *path, struct model_config *cfg, struct err *e);

/* The index into a load's dtype array (unet, vae, text encoders) of component c: every
 * text encoder takes the text encoders' dtype, as ComfyUI's text_encoder_dtype. */
static inline int model_dtype_slot(enum model_component c)
{
    return c >= MODEL_CLIP ? MODEL_CLIP : (int)c;
}

#endif
