/*
 * checkpoint_save — write models as a safetensors file that latentd and ComfyUI both
 * load: the weights as the patchers give them to model code (patches baked, in each
 * weight's compute dtype: an f16 file loaded as an f32 model is saved f32, as ComfyUI
 * saves a model in the dtype it runs in), under ComfyUI's key names (comfy.sd.save_checkpoint, and
 * the CLIPSave / VAESave state dicts), with `__metadata__` string pairs.
 *
 * The weights are baked the way a forward pass sees them: each part's patcher is
 * loaded with mm_load_models, every layer is acquired, read back and written, one
 * layer at a time, so a checkpoint never sits whole in memory. Reading a weight back
 * through f32 is exact for every storage dtype (f32, f16, bf16), so the file holds
 * the very bytes model code computes with.
 *
 * The file is written through a temporary and renamed (st_writer, util/afile): a
 * reader never sees half a file and a failure leaves nothing behind.
 *
 * Threads: executor thread (it loads models).
 */
#ifndef LATENTD_MODELS_CHECKPOINT_SAVE_H
#define LATENTD_MODELS_CHECKPOINT_SAVE_H

#include "err.h"
#include "memmgr.h"
#include "model_config.h"
#include "patcher.h"

/* The key names written. */
enum ckpt_save_naming {
    /* Checkpoint names (model.diffusion_model.*, first_stage_model.*, the family's text
     * encoder prefixes, OpenCLIP encoders in OpenCLIP naming): CheckpointSave, ModelSave. */
    CKPT_SAVE_CHECKPOINT = 0,
    /* The component prefix removed (VAESave: encoder.*, decoder.*, quant_conv.*). */
    CKPT_SAVE_BARE,
    /* CLIPSave: Hugging Face names from text_model. (a fused q/k/v projection split into
     * q_proj, k_proj, v_proj; an OpenCLIP text_projection as text_projection.weight,
     * transposed), as ComfyUI's clip.get_sd() with the clip_x.transformer. prefix gone. */
    CKPT_SAVE_CLIP,
};

struct ckpt_save_part {
    struct patcher *p;          /* borrowed */
    enum model_component comp;  /* which component p is (its keys' prefix) */
};

struct ckpt_save_meta {
    const char *key, *value;    /* borrowed */
};

/*
 * Write `parts` (in order) of a model of config `cfg` to `path` with `naming` and the
 * metadata pairs. `mm` plans the loads (NULL: ERR_INVALID). Returns 0, or a negative
 * ERR_* with a message in `e`: ERR_IO for the file, the planner's errors, ERR_INVALID
 * for a weight the naming has no name for. Nothing is left at `path` on failure.
 */
int ckpt_save(struct mm *mm, const char *path, const struct model_config *cfg,
              const struct ckpt_save_part *parts, int n_parts, enum ckpt_save_naming naming,
              const struct ckpt_save_meta *meta, int n_meta, struct err *e);

/*
 * The pairs a shrunk (test) config needs to reload as itself, since head counts are
 * not stored in checkpoints: "latentd.clip_heads" and "latentd.unet_heads", which
 * checkpoint_detect.c reads (the generator tools/ckpt_gen.c writes the same). Calls
 * fn(user, key, value) per pair (value valid for the call); none for a family's real
 * config, so real checkpoints carry ComfyUI's metadata only. ckpt_save adds them for
 * CKPT_SAVE_CHECKPOINT.
 */
void ckpt_save_heads_meta(const struct model_config *cfg,
                          void (*fn)(void *user, const char *key, const char *val), void *user);

/*
 * The modelspec pairs ComfyUI's save_checkpoint writes for cfg's family, into out[]
 * (room for 5): SDXL base / refiner get modelspec.architecture, sai_model_spec,
 * implementation and title ("<title>"); every epsilon model gets
 * modelspec.predict_key "epsilon". Values are static strings except the title, which
 * is borrowed from `title`. Returns the count.
 */
int ckpt_save_modelspec(const struct model_config *cfg, const char *title,
                        struct ckpt_save_meta out[5]);

#endif
