/*
 * hypernetwork — the A1111 hypernetwork files ComfyUI's HypernetworkLoader reads
 * (comfy_extras/nodes_hypernetwork.py, load_hypernetwork_patch) and the patch they make.
 *
 * A file (torch.save'd .pt, read by the restricted unpickler: pt_load_doc) is a dict of
 * options (activation_func, is_layer_norm, use_dropout, activate_output,
 * last_layer_dropout, ...) and, per context width (an int key: 768, 320, 640, 1280 for
 * SD1.x), a list of two module state dicts: one for the attention's key input, one for
 * its value input. A module is its ".weight" entries in the dict's order: Linear layers,
 * each followed by a LayerNorm when is_layer_norm; an activation follows a Linear unless
 * that Linear is the module's last ".weight" entry (the LayerNorms count, so with layer
 * norm every Linear gets one) and activate_output is off. Dropout is inference-inert.
 * The patch (ComfyUI sets it as both the attn1 and the attn2 patch): for an attention
 * whose key input k has width d with a module pair for d,
 *     k' = k + m0(k) * strength,   v' = v + m1(v) * strength
 * (q unchanged); other widths pass through.
 *
 * A .safetensors file gives nothing: load_torch_file reads it as a flat dict with no int
 * keys, so ComfyUI finds no module in it and patches nothing; likewise an activation it
 * does not know (it logs "Unsupported Hypernetwork format" and patches nothing).
 *
 * Weights are host float32 (converted from the file's f32/f16/bf16); the patch runs on
 * host rows in float32 with LayerNorm statistics in double.
 *
 * Threads: any thread; a loaded hypernetwork is read-only.
 */
#ifndef LATENTD_MODELS_HYPERNETWORK_H
#define LATENTD_MODELS_HYPERNETWORK_H

#include <stdint.h>

#include "err.h"

enum hn_act {
    HN_ACT_LINEAR, /* Identity */
    HN_ACT_RELU,
    HN_ACT_LEAKYRELU, /* slope 0.01 */
    HN_ACT_ELU,       /* alpha 1 */
    HN_ACT_SWISH,     /* torch.nn.Hardswish, as ComfyUI maps "swish" */
    HN_ACT_TANH,
    HN_ACT_SIGMOID,
    HN_ACT_SOFTSIGN,
    HN_ACT_MISH,
};

struct hypernetwork; /* opaque, refcounted (MODEL clones share one) */

/*
 * Load the hypernetwork file `path`. Returns 0 and *out (free with hypernetwork_free); 0
 * and *out NULL with the reason in e->msg (e->code 0) for a file ComfyUI patches nothing
 * with (above); ERR_INVALID for a malformed file (no width-keyed modules, a module that is
 * not two state dicts, a Linear without its bias, shapes that do not chain, a LayerNorm
 * missing, not a .pt or .safetensors at all), the unpickler's errors for what it refuses
 * (ERR_UNSUPPORTED for a legacy pickle); message in e.
 */
int hypernetwork_load(const char *path, struct hypernetwork **out, struct err *e);
/* Another reference (returns h); hypernetwork_free drops one and frees with the last
 * (NULL-safe). Any thread. */
struct hypernetwork *hypernetwork_ref(struct hypernetwork *h);
void hypernetwork_free(struct hypernetwork *h);

/* The context widths it patches (ascending), n of them; borrowed. */
const int *hypernetwork_dims(const struct hypernetwork *h, int *n);
enum hn_act hypernetwork_activation(const struct hypernetwork *h);

/*
 * out[r] = x[r] + m(x[r]) * strength for the rows x [rows, dim] (host floats; out may be
 * x), m the key (which 0) or value (which 1) module of width dim. Returns 1 when applied,
 * 0 when the hypernetwork has no module for dim (out untouched).
 */
int hypernetwork_apply(const struct hypernetwork *h, int dim, int which, float strength,
                       const float *x, int64_t rows, float *out);

#endif
