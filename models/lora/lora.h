/*
 * lora — map a LoRA file's tensor names to SD1.x / SDXL checkpoint weights and add
 * them as patches to the UNet / text-encoder patchers (memory.md §5.1-5.3, sdxl.md §9).
 *
 * Like ComfyUI, names are never parsed back into dotted paths: a forward map is
 * built from every checkpoint weight of the config to all the module prefixes that
 * address it (kohya `lora_unet_<ldm or diffusers path>`, `lycoris_`, diffusers
 * processor style `…processor.to_q`, `unet.`, `diffusion_model.`; text encoder
 * `lora_te_` / `lora_te1_text_model_…`, `text_encoder.text_model.…`,
 * `text_encoders.clip_l.transformer.text_model.…`; SDXL's bigG `lora_te2_…`,
 * `text_encoder_2.…`, `text_encoders.clip_g.…`, its q/k/v modules addressing row blocks
 * of the fused OpenCLIP in_proj), and file prefixes are looked up.
 *
 * Accepted factor names per module prefix P: P.lora_up/.lora_down.weight (kohya,
 * LoCon: a conv down [r, in, kh, kw] with up [out, r, 1, 1]), P_lora.up/.down.weight,
 * P.lora_B/.lora_A.weight, P.lora.up/.down.weight, P.lora_linear_layer.up/.down.weight,
 * with optional P.alpha (scale alpha / rank). Other adapter parts (LoHa `hada_*`,
 * LoKr `lokr_*`, Tucker `lora_mid`, DoRA `dora_scale`, `diff`) are not supported and
 * their keys are listed as not loaded.
 *
 * Errors: a file that matches no weight ("for another model type?"), factors whose
 * shapes do not fit the weight, or non-float factors fail with a message naming the
 * file and the tensor; keys that match nothing are listed in one warning.
 *
 * Threads: executor thread (it touches patchers).
 */
#ifndef LATENTD_MODELS_LORA_H
#define LATENTD_MODELS_LORA_H

#include "err.h"
#include "patcher.h"
#include "model_config.h"

struct lora_stats {
    int modules;      /* module prefixes found in the file */
    int unet_patched; /* patches added to the UNet patcher */
    int clip_patched; /* patches added to the text-encoder patcher */
    int unmatched;    /* file keys not loaded (unknown prefix or unsupported part) */
};

/*
 * Read `path` and add its patches: UNet modules to `unet` with strength_model, text
 * encoder modules to `clip` (the first encoder) and `clip2` (SDXL's bigG) with
 * strength_clip (any patcher may be NULL: its modules are then skipped silently, as a
 * LoRA loaded for one model only). Pass clones (patcher_clone) so that the unpatched
 * model stays available. `stats` may be NULL. Returns 0 or a negative ERR_* with a
 * message in `e`.
 */
int lora_apply(const char *path, const struct model_config *cfg, struct patcher *unet,
               float strength_model, struct patcher *clip, float strength_clip,
               struct patcher *clip2, struct lora_stats *stats, struct err *e);

/*
 * The checkpoint key that LoRA module prefix `prefix` addresses for `cfg`, written to
 * out; returns the component (MODEL_UNET or MODEL_CLIP) or -1 if none. For tests and
 * tools; builds the map on each call.
 */
int lora_map_prefix(const struct model_config *cfg, const char *prefix, char *out,
                         size_t size);

#endif
