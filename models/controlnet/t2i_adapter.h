/*
 * t2i_adapter — ComfyUI's T2I-Adapters (comfy/t2i_adapter/adapter.py Adapter and
 * Adapter_light, loaded as comfy/controlnet.py load_t2i_adapter does): a small conv net
 * on the hint image whose four feature maps are added to the UNet's input blocks
 * (apply_control 'input', and 'middle' for the SDXL one), not through zero convs.
 *
 *   full (Adapter, sk=True, 2 ResnetBlocks a level): PixelUnshuffle(8; SDXL 16), conv_in,
 *        then per level a block that may downsample (avg pool, or a stride-2 conv when
 *        the file has down_opt.op) and change width (in_conv), and a plain one; a
 *        ResnetBlock is x + block2(relu(block1(x))). SDXL files (conv_in taking 256 or 768
 *        channels: 16x16-unshuffled 1- or 3-channel hints) downsample only at level 2.
 *   light (Adapter_light, 4 ResnetBlock_light a level): per level avg pool (not the
 *        first), a 1x1 conv to a quarter width, the blocks, a 1x1 conv out.
 *
 * Features are the levels' outputs, placed as ComfyUI lists them: level l's map goes to
 * input block 3 l + 2 (SD1.5), or blocks 3, 5, 8 and the middle (SDXL). Files: the
 * original names (conv_in, body.N.*) and diffusers' (adapter.body.I.resnets.J.*).
 *
 * Threads: loading and evaluation on the executor thread; t2i_adapter_ref/unref any.
 */
#ifndef LATENTD_MODELS_T2I_ADAPTER_H
#define LATENTD_MODELS_T2I_ADAPTER_H

#include <stdatomic.h>

#include "controlnet.h"
#include "safetensors.h"

#define T2I_LEVELS 4

enum t2i_kind {
    T2I_FULL,  /* Adapter */
    T2I_LIGHT, /* Adapter_light */
};

/* The architecture, from the file's shapes (t2i_adapter_layout's input). */
struct t2i_arch {
    enum t2i_kind kind;
    int xl;                  /* full: the SDXL variant (unshuffle 16) */
    int hint_ch;             /* image channels taken: cin / unshuffle^2 (1 or 3) */
    int unshuffle;           /* 8, SDXL 16 */
    int channels[T2I_LEVELS]; /* feature widths per level (c, 2c, 4c, 4c) */
    int nums_rb;             /* blocks per level: full 2, light 4 */
    int ksize;               /* full: in_conv / block2 kernel (1 or 3) */
    int use_conv;            /* full: stride-2 conv downsampling (down_opt.op) */
};

struct t2i_adapter {
    struct patcher *p;  /* owned reference: the weights, a layer per block */
    struct t2i_arch a;
    atomic_int _refs;
};

/*
 * Load a T2I-Adapter file, stored as dt. ERR_UNSUPPORTED when it is no T2I-Adapter this
 * loads (Stable Cascade's controlnets, style adapters), ERR_INVALID for a missing,
 * unexpected or misshapen tensor; messages name the file. *out has one reference.
 */
int t2i_adapter_load(const char *path, enum tensor_dtype dt, struct t2i_adapter **out,
                     struct err *e);

void t2i_adapter_ref(struct t2i_adapter *t);
void t2i_adapter_unref(struct t2i_adapter *t); /* NULL is a no-op */

/* Every tensor of an adapter of arch `a` in forward order (names as ComfyUI's modules),
 * with its layer: for the loader and the generator. */
size_t t2i_adapter_layout(const struct t2i_arch *a,
                          void (*fn)(void *user, const struct model_key *k), void *user);

/* The diffusers name of a tensor named as ComfyUI's (body.3.block1.weight ->
 * adapter.body.1.resnets.1.block1.weight), for the generator; 0, or -1 for a light
 * adapter's or an unknown name. */
int t2i_adapter_name_to_diffusers(const char *name, char *out, size_t size);

/* The image size the adapter is fed for a w x h target: each rounded up to a multiple
 * of the unshuffle (scale_image_to). */
void t2i_adapter_image_size(const struct t2i_adapter *t, int w, int h, int *wo, int *ho);

/*
 * The features for hint [B, hint_ch, H, W] (H, W multiples of the unshuffle; on the
 * adapter's device, which must be loaded): out->input[i] per input block (n_input set,
 * NULL where ComfyUI's list has None) and out->middle (SDXL), owned, unscaled.
 */
int t2i_adapter_eval(struct t2i_adapter *t, const struct tensor *hint,
                     struct controlnet_out *out, struct err *e);

/* Activation bytes of one t2i_adapter_eval of a b x h x w image (plan). */
size_t t2i_adapter_plan_bytes(const struct t2i_adapter *t, int b, int h, int w);

#endif
