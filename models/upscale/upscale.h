/*
 * upscale — the image upscale models ComfyUI loads through spandrel
 * (comfy_extras/nodes_upscale_model.py): ESRGAN's RRDBNet, in both key namings, and
 * Real-ESRGAN's compact SRVGGNetCompact; their detection, loading into a patcher
 * model, forward pass on tensor/ ops and ComfyUI's tiling.
 *
 * RRDBNet (ESRGAN, Real-ESRGAN x4plus / x2plus):
 *     fea = conv_first(x')                  x' = pixel_unshuffle(x, s) for scale 1 / 2
 *     fea = fea + conv_body(RRDB^nb(fea))
 *     n_up times: fea = lrelu(conv_up(nearest_2x(fea)))
 *     out = conv_last(lrelu(conv_hr(fea)))
 *   RRDB(x) = x + 0.2 * RDB3(RDB2(RDB1(x))); RDB(x) = x + 0.2 * conv5([x, x1..x4]) with
 *   xk = lrelu(convk([x, x1..x(k-1)])), growth gc channels each, lrelu slope 0.2. The
 *   scale is 2^n_up / s; with s > 1 the input is reflect-padded to multiples of s and
 *   the output cropped back to scale x the input.
 *   Keys, new (BasicSR) naming: conv_first, body.N.rdb{1..3}.conv{1..5}, conv_body,
 *   conv_up{1..n_up}, conv_hr, conv_last. Old (ESRGAN repo) naming: model.0,
 *   model.1.sub.N.RDB{1..3}.conv{1..5}.0, model.1.sub.<nb>, model.<3k+3> (up k),
 *   model.<3n_up+2> (hr), model.<3n_up+4> (last). Each is .weight and .bias.
 *
 * SRVGGNetCompact (realesr-general-x4v3, ...): body.0 conv in->nf, then per stage a
 *   PReLU (body.<2i+1>.weight [nf]) and a conv (body.<2i+2>), the last conv nf ->
 *   out*s*s; out = pixel_shuffle(body(x), s) + nearest_upsample(x, s).
 *
 * Detection derives kind, naming, scale, widths and counts from key names and shapes;
 * every expected tensor must be present with its shape and a float dtype, and nothing
 * else may be (spandrel loads strictly). Other spandrel architectures (SwinIR, HAT,
 * DAT, ESRGAN+ "plus", 3x pixel-shuffle ESRGAN, ...) and non-upscale files (a
 * checkpoint, a LoRA) are refused with ERR_UNSUPPORTED and a message naming the file.
 *
 * Threads: loading and probing any thread; forward passes the executor thread.
 */
#ifndef LATENTD_MODELS_UPSCALE_H
#define LATENTD_MODELS_UPSCALE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "patcher.h"
#include "safetensors.h"
#include "tensor.h"

enum ups_kind {
    UPS_ESRGAN, /* RRDBNet */
    UPS_SRVGG,  /* SRVGGNetCompact */
};

enum ups_naming {
    UPS_NAMING_NEW, /* conv_first.*, body.N.rdb1.* (and always for SRVGG) */
    UPS_NAMING_OLD, /* model.0.*, model.1.sub.N.RDB1.conv1.0.* */
};

struct ups_arch {
    enum ups_kind kind;
    enum ups_naming naming;
    int scale;   /* output pixels per input pixel per axis: 1, 2, 4 or 8 */
    int in_ch;   /* image channels taken (before any unshuffle) */
    int out_ch;  /* image channels given */
    int nf;      /* feature channels */
    int nb;      /* ESRGAN: RRDB blocks; SRVGG: body convs between first and last */
    int gc;      /* ESRGAN: growth channels of a dense block (32) */
    int shuffle; /* ESRGAN: input pixel-unshuffle factor (1: none, 2, 4) */
    int n_up;    /* ESRGAN: nearest 2x + conv stages (0..3) */
};

/* Weight roles; i, j, k index as noted. */
enum ups_role {
    UPS_W_FIRST,   /* conv_first / model.0 */
    UPS_W_RDB,     /* block i, dense block j (1..3), conv k (1..5) */
    UPS_W_BODY,    /* conv_body / model.1.sub.<nb> */
    UPS_W_UP,      /* upsampling conv i (0-based) */
    UPS_W_HR,      /* conv_hr */
    UPS_W_LAST,    /* conv_last */
    UPS_W_VGG,     /* SRVGG conv i (0..nb+1) */
    UPS_W_PRELU,   /* SRVGG PReLU i (0..nb), its slopes (.weight only) */
};

/* The key prefix of a weight in a's naming ("model.1.sub.3.RDB2.conv4.0",
 * "body.7"); append ".weight" / ".bias". Into out[size]; returns out. */
const char *ups_key(const struct ups_arch *a, enum ups_role r, int i, int j, int k, char *out,
                    size_t size);

/* One tensor of a model, as ups_weights lists them. */
struct ups_weight {
    char key[96];        /* full name in the arch's naming */
    char layer[32];      /* the patcher layer it loads with */
    int ndim;
    int64_t shape[4];
    enum ups_role role;
    int i, j, k;         /* the role's indices (ups_key) */
    int is_bias;         /* a conv's bias (else a conv weight or PReLU slopes) */
    int fan_in;          /* conv: in channels x 3 x 3 (for random init) */
};

/* Call fn for each tensor a model of arch `a` holds, in forward order; returns the
 * count. The loader, the detection check and the generator all walk this list. */
int ups_weights(const struct ups_arch *a, void (*fn)(void *user, const struct ups_weight *w),
                void *user);

/* "ESRGAN 4x nf=64 nb=23 (old naming)" into out[size]; returns out. */
const char *ups_arch_str(const struct ups_arch *a, char *out, size_t size);

/* Detect and validate the model held by an open file (`what` names it in messages).
 * Returns 0 and fills *a, or ERR_UNSUPPORTED / ERR_INVALID with a message. */
int ups_detect(const struct st_file *f, const char *what, struct ups_arch *a, struct err *e);

/*
 * Open `path` (safetensors or torch zip, st_open), detect, and build a patcher model
 * (role OTHER, f32 storage: ComfyUI runs these models in fp32) whose layers are the
 * forward-order blocks (conv_first, each RRDB, conv_body, each up conv, conv_hr,
 * conv_last; SRVGG: each conv with the PReLU after it). Weights whose host copy keeps
 * the file's dtype (the patcher's rule) are borrowed from the mapping, which the model
 * then keeps (and re-checks) until freed.
 * *model: one reference, caller drops with patcher_model_unref.
 */
int ups_load(const char *path, struct ups_arch *a, struct patcher_model **model, struct err *e);

/*
 * One forward pass: x [B, in_ch, H, W] (values 0..1) -> out [B, out_ch, H*scale,
 * W*scale], both caller-allocated on the patcher's device, out not clamped. The model
 * must be loaded (mm_load_models). Returns 0 or a negative ERR_* (ERR_DEVICE_OOM when
 * an activation does not fit).
 */
int ups_forward(struct patcher *p, const struct ups_arch *a, const struct tensor *x,
                struct tensor *out, struct err *e);

/*
 * ComfyUI's ImageUpscaleWithModel pass over every sample of x [B, in_ch, H, W] (on the
 * patcher's device): tiles of tile x tile input pixels with `overlap`
 * (comfy.utils.tiled_scale, nn_tiled.h), the result into host floats out [B, out_ch,
 * H*scale, W*scale] (not clamped; output_device "cpu" as ComfyUI's). tile_done (may be
 * NULL) is called after each tile with `user`; a negative return stops with that code.
 * ERR_DEVICE_OOM from a tile is returned as is (the caller halves the tile).
 */
int ups_forward_tiled(struct patcher *p, const struct ups_arch *a, const struct tensor *x,
                      float *out, int tile, int overlap, int (*tile_done)(void *user),
                      void *user, struct err *e);

/* Tiles ups_forward_tiled runs for a B x H x W input. */
int64_t ups_tiled_steps(int64_t b, int64_t h, int64_t w, int tile, int overlap);

/* Device bytes (f32) of the activation peak of one forward of a 1 x in_ch x h x w
 * input, walked as ups_forward allocates; for mm_request.activation_bytes. */
size_t ups_plan_bytes(const struct ups_arch *a, int64_t h, int64_t w);

/* Multiply-adds x 2 of one forward at h x w (convs only). */
double ups_flops(const struct ups_arch *a, int64_t h, int64_t w);

#endif
