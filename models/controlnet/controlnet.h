/*
 * controlnet — ComfyUI's classic ControlNet (comfy/cldm/cldm.py ControlNet, loaded as
 * comfy/controlnet.py load_controlnet_state_dict does) for the UNet families of
 * family.h: the residuals it adds to a UNet's skip connections and middle block.
 *
 * The network is the UNet's trunk (time embedding, [label embedding,] input blocks
 * and middle block: the same block list, unet_arch.h, and the same code, unet_impl.h)
 * plus three things of its own: input_hint_block (eight 3x3 convs, three of them
 * stride 2, SiLU between, from the hint image at 8x the latent size down to
 * model_channels), added to h after input_blocks.0; zero_convs.N.0 (1x1 convs) on
 * each input block's output; middle_block_out.0 (1x1) on the middle block's. The
 * outputs, times the strength, are unet_control's output[] and middle (unet.h).
 *
 * Files: the original ldm names, with or without the "control_model." prefix, and
 * diffusers' ControlNetModel names (controlnet_cond_embedding.*, down_blocks.*, ...;
 * the family and every width are derived from the shapes, as for a checkpoint's UNet:
 * a shrunk test file is detected like a shrunk checkpoint), and the "difference"
 * ControlNets (a tensor named "difference": the weights are deltas to the UNet of
 * the model given at load). Weights are keyed by their UNet names
 * (model.diffusion_model.*), so that a diff ControlNet finds the UNet's weight of the
 * same key.
 *
 * Union ControlNets (xinsir's controlnet-union / ProMax for SDXL, diffusers files with
 * control_add_embedding.*: cldm.py's union_controlnet_num_control_type) add two things:
 * a control-type embedding (the one-hot type vector through timestep_embedding(256),
 * linear, SiLU, linear) added to the time embedding, and, when a type is set, the
 * guided hint merged as union_controlnet_merge does: its spatial mean plus the type's
 * task_embedding row through one pre-norm transformer layer (transformer_layes.0) and
 * spatial_ch_projs, added back per channel. Without a type ("auto") only the embedding
 * of the all-zero type vector is added.
 *
 * Threads: loading and evaluation on the executor thread; controlnet_ref/unref any.
 */
#ifndef LATENTD_MODELS_CONTROLNET_H
#define LATENTD_MODELS_CONTROLNET_H

#include <stdatomic.h>
#include <stddef.h>

#include "err.h"
#include "model_config.h"
#include "patcher.h"
#include "tensor.h"
#include "unet.h"

/* The hint encoder's conv widths (cldm.py: fixed, whatever the model's width). */
#define CONTROLNET_HINT_CONVS 8
extern const int controlnet_hint_widths[CONTROLNET_HINT_CONVS - 1]; /* 16 16 32 32 96 96 256 */

/* ComfyUI's UNION_CONTROLNET_TYPES (comfy/cldm/control_types.py), by type number; the
 * options list is SetUnionControlNetType's combo: "auto", the names, NULL. */
#define CONTROLNET_UNION_TYPES 8
extern const char *const controlnet_union_type_options[CONTROLNET_UNION_TYPES + 2];
extern const char *const *const controlnet_union_type_names; /* options + 1 */

struct controlnet {
    struct patcher *p;       /* owned reference: the weights, one layer per block */
    struct model_config cfg; /* family and trunk knobs (cfg.unet; out_ch unused) */
    int hint_ch;             /* input channels of the hint encoder (3: an RGB image) */
    int union_types;         /* a Union's task_embedding rows (6, ProMax 8); 0: not one */
    atomic_int _refs;        /* controlnet_ref / controlnet_unref */
};

/*
 * Load a ControlNet file. `diff_base` (may be NULL) is the UNet patcher of the model
 * DiffControlNetLoader was given: a file with a "difference" tensor gets that UNet's
 * weights added to its own (without one it is loaded as it is, as ComfyUI does, with a
 * warning). Weights are stored as `dt`. Errors (ERR_INVALID / ERR_UNSUPPORTED with a
 * message naming the file): not a ControlNet (a checkpoint, LoRA, T2I adapter or
 * diffusers-format ControlNet is named as such), a trunk of no known family, a missing,
 * unexpected, misshapen, non-float or non-finite tensor. *out has one reference.
 */
int controlnet_load(const char *path, struct patcher *diff_base, enum tensor_dtype dt,
                    struct controlnet **out, struct err *e);

/* What ControlNetLoader's file holds, told apart as load_controlnet_state_dict does:
 * "lora_controlnet" a Control-LoRA (control_lora.h); no ControlNet keys (zero_convs,
 * control_model.*, diffusers') but a T2I-Adapter's (conv_in, body.0.in_conv, diffusers'
 * adapter.body.0.resnets.0) a T2I-Adapter (t2i_adapter.h); anything else, unreadable
 * files included, goes to controlnet_load, which says what it is. */
enum controlnet_kind {
    CONTROLNET_KIND_CONTROLNET,
    CONTROLNET_KIND_T2I,
    CONTROLNET_KIND_LORA,
};
enum controlnet_kind controlnet_file_kind(const char *path);

/*
 * The diffusers name of a ControlNet tensor given in ldm naming without prefix
 * ("zero_convs.3.0.weight" -> "controlnet_down_blocks.3.weight"), for the generator and
 * tests. 0, or -1 when `ldm` is no ControlNet tensor name.
 */
int controlnet_name_to_diffusers(const char *ldm, char *out, size_t size);
/* The reverse (private to models/controlnet: the loader's renaming). */
int controlnet__name_from_diffusers(const char *name, char *out, size_t size);

void controlnet_ref(struct controlnet *cn);
void controlnet_unref(struct controlnet *cn); /* NULL is a no-op */

/*
 * Every tensor of a ControlNet of trunk `cfg` with a `hint_ch`-channel hint encoder,
 * in forward order, named model.diffusion_model.* (k->rel skips that prefix), each
 * with its patcher layer: for the loader's checks and the generator (tools/).
 */
size_t controlnet_layout(const struct model_config *cfg, int hint_ch,
                         void (*fn)(void *user, const struct model_key *k), void *user);
/* The same for a Union ControlNet of `union_types` control types (0: controlnet_layout):
 * its own tensors follow the hint encoder's, in ComfyUI's internal naming
 * (transformer_layes.0.attn.in_proj.weight; diffusers files say in_proj_weight). */
size_t controlnet_layout_union(const struct model_config *cfg, int hint_ch, int union_types,
                               void (*fn)(void *user, const struct model_key *k), void *user);

/* The residuals of one evaluation: owned tensors on the model's device. */
struct controlnet_out {
    struct tensor *output[UNET_MAX_BLOCKS]; /* zero_convs.i's, one per input block */
    int n_output;
    struct tensor *input[UNET_MAX_BLOCKS]; /* a T2I-Adapter's features (t2i_adapter.h) */
    int n_input;
    struct tensor *middle; /* middle_block_out's */
};

/*
 * The residuals for x [B, in_ch, h, w], t (B host timesteps), ctx [B, T, ctx_dim],
 * y [B, adm_in] (families with an ADM input, else NULL) and hint [B, hint_ch, 8h, 8w]
 * (already resized), all on patcher_device(cn->p), each multiplied by `strength`.
 * The model must be loaded (mm_load_models). *out is filled (release with
 * controlnet_out_release, also after a failure).
 */
int controlnet_eval(struct controlnet *cn, const struct tensor *x, const float *t,
                    const struct tensor *ctx, const struct tensor *y, const struct tensor *hint,
                    float strength, struct controlnet_out *out, struct err *e);

/*
 * controlnet_eval with a Union's control type (SetUnionControlNetType: 0..7, or -1 for
 * "auto", no type); a classic ControlNet ignores it. A type past the model's
 * task_embedding (tile or repaint on a non-ProMax Union) is ERR_INVALID with ComfyUI's
 * message.
 */
int controlnet_eval_type(struct controlnet *cn, const struct tensor *x, const float *t,
                         const struct tensor *ctx, const struct tensor *y,
                         const struct tensor *hint, int control_type, float strength,
                         struct controlnet_out *out, struct err *e);

/* Chain two ControlNets' residuals as ComfyUI's control_merge: each of *cur becomes
 * prev + cur (a slot only one of them has is taken as is, moved out of prev). */
int controlnet_out_merge(struct controlnet_out *cur, struct controlnet_out *prev, struct err *e);

/* The residuals as the UNet takes them (borrowed from `o`). */
void controlnet_out_view(const struct controlnet_out *o, struct unet_control *c);

void controlnet_out_release(struct controlnet_out *o);

/* Activation bytes of one controlnet_eval at these shapes (plan for mm_load_models):
 * the trunk's peak, the hint encoder's and the residuals it returns. */
size_t controlnet_plan_bytes(const struct controlnet *cn, int b, int h, int w, int t);

/* Bytes of the residuals of one eval (what the UNet call holds besides its own). */
size_t controlnet_out_bytes(const struct unet_arch *a, int b, int h, int w);

#endif
