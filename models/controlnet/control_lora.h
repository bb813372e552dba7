/*
 * control_lora — Stability's Control-LoRAs (comfy/controlnet.py ControlLora): a ControlNet
 * stored as low-rank deltas to the UNet it is used with. The file ("lora_controlnet"
 * marks it) holds the hint encoder, the zero convs and some full weights (norms, biases)
 * by their ControlNet names, and name.up / name.down pairs for the trunk's linear and
 * conv weights. The ControlNet exists only next to a model (ControlLora.pre_run): every
 * trunk weight is the file's, or else the UNet's of the same name, plus
 * up.flatten(1) @ down.flatten(1) reshaped when the file has the pair.
 *
 * Here that ControlNet is made on the host in f32 from the UNet's clean host weights
 * (its LoRA patches are not folded in, where ComfyUI's state_dict() holds the patched
 * weights of a loaded model) and is then a classic struct controlnet.
 *
 * Threads: the executor thread; control_lora_ref / unref any thread.
 */
#ifndef LATENTD_MODELS_CONTROL_LORA_H
#define LATENTD_MODELS_CONTROL_LORA_H

#include <stdatomic.h>

#include "controlnet.h"
#include "safetensors.h"

struct control_lora {
    struct st_file *f; /* owned: the file, read at each control_lora_make */
    int hint_ch;       /* input_hint_block.0.weight's input channels */
    atomic_int _refs;
};

/* Open a Control-LoRA file (ERR_UNSUPPORTED without "lora_controlnet", ERR_INVALID without
 * a hint encoder; messages name the file). *out has one reference. */
int control_lora_load(const char *path, struct control_lora **out, struct err *e);
void control_lora_ref(struct control_lora *cl);
void control_lora_unref(struct control_lora *cl); /* NULL is a no-op */

/*
 * The ControlNet of `cl` for the UNet `unet` of config `cfg` (its trunk, family and
 * widths), weights stored as dt. ERR_INVALID naming the file for a tensor of the wrong
 * shape, an up/down pair that does not multiply to its weight's shape, a tensor the
 * layout has no place for, or a weight neither the file nor the UNet has. *out has one
 * reference.
 */
int control_lora_make(const struct control_lora *cl, const struct patcher_model *unet,
                      const struct model_config *cfg, enum tensor_dtype dt,
                      struct controlnet **out, struct err *e);

#endif
