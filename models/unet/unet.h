/*
 * unet — the diffusion UNet forward pass (ComfyUI's openaimodel.UNetModel; sd15.md §3)
 * on tensor/ ops, reading every weight through the patcher (memory/patcher.h), with
 * its memory plan and FLOP count.
 *
 * Weights: each block is one patcher layer; the code acquires a layer, runs the
 * block, and releases it before acquiring the next, so streamed models work with a
 * ring of one slot in use at a time. All activations live on patcher_device(p);
 * the model must be loaded (mm_load_models) before these calls.
 *
 * Numerics follow sd15.md §8 (f32 statistics, exact GELU, eps per §3.8).
 *
 * Threads: executor thread only (the planning figures: any thread).
 */
#ifndef LATENTD_MODELS_UNET_H
#define LATENTD_MODELS_UNET_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "model_config.h"
#include "patcher.h"
#include "tensor.h"

/*
 * eps = UNet(x, t, ctx, y) (sd15.md §3.7, sdxl.md §6.4). x [B, in_ch, h, w] and ctx
 * [B, T, ctx_dim] (T a multiple of 77 in practice) on patcher_device(unet); t: B host
 * floats (timesteps, §3.9); y: the ADM vector [B, adm_in] on the same device when the
 * arch has one (SDXL), else NULL; eps: a caller-allocated [B, out_ch, h, w] tensor on
 * the same device. Any h, w >= 1 (odd sizes use size-matched upsampling, §3.5).
 * `probe` (NULL in production) gets t_emb, time_embed, each input/middle/output block
 * and eps.
 */
int unet_eval(struct patcher *unet, const struct unet_arch *a, const struct tensor *x,
              const float *t, const struct tensor *ctx, const struct tensor *y, struct tensor *eps,
              struct model_probe *probe, struct err *e);

/*
 * ControlNet residuals for one eval (ComfyUI's control dict, openaimodel's apply_control):
 * output[i] is added to the i-th skip connection (input block i's output, in the order
 * the input side pushes them) when the output side pops it, middle to the middle block's
 * output. input[i] (a T2I-Adapter's features) is added to input block i's output itself,
 * before it is pushed: the next blocks see it and so does the skip. NULL entries (and
 * i >= n_output / n_input) add nothing. Each tensor has the shape of what it is added to;
 * borrowed for the call.
 */
struct unet_control {
    const struct tensor *output[UNET_MAX_BLOCKS];
    int n_output;
    const struct tensor *input[UNET_MAX_BLOCKS];
    int n_input;
    const struct tensor *middle;
};

/* unet_eval with ControlNet residuals (control may be NULL: the same as unet_eval). */
int unet_eval_control(struct patcher *unet, const struct unet_arch *a, const struct tensor *x,
                      const float *t, const struct tensor *ctx, const struct tensor *y,
                      const struct unet_control *control, struct tensor *eps, struct err *e);

/*
 * Where a self-attention (attn1) sits, as ComfyUI's transformer_options name it: block
 * ("input" / "middle" / "output", its index in that list), block_index (the transformer
 * block within the SpatialTransformer), the tokens and heads of the attention and the
 * original_shape (x's height and width of this eval).
 */
enum unet_site_kind { UNET_SITE_INPUT, UNET_SITE_MIDDLE, UNET_SITE_OUTPUT };

struct unet_attn1_site {
    enum unet_site_kind kind;
    int block;       /* index in input_blocks / output_blocks; 0 for the middle */
    int block_index; /* transformer block within the SpatialTransformer */
    int64_t batch, tokens;
    int heads;
    int64_t orig_h, orig_w; /* the eval's x [B, C, orig_h, orig_w] */
};

/*
 * A self-attention's query tiling (HyperTile): the token sequence read as rows x cols
 * (row-major) is cut into nh x nw tiles of (rows/nh) x (cols/nw); each tile's queries
 * attend over the contiguous token chunk of the same index (ComfyUI's attention views
 * the untiled keys as (b·nh·nw) batches of T/(nh·nw) tokens). rows·cols must equal
 * the tokens and nh, nw divide rows, cols.
 */
struct unet_attn1_tiles {
    int nh, nw;
    int64_t rows, cols;
};

/*
 * Model patches for one eval (ComfyUI's transformer_options["patches"]), each optional:
 * output_block is the output_block_patch (FreeU): called on the output side before
 * output block i's concat with h (the hidden state) and hsp (the skip just popped, its
 * control residual added), both [B, C, h, w] on the device, which it may change in
 * place. Returns 0 or <0 with e set (the eval fails with it).
 */
struct unet_patches {
    int (*output_block)(void *user, int i, struct tensor *h, struct tensor *hsp, struct err *e);
    /*
     * attn1_tiles (HyperTile's attn1_patch + attn1_output_patch): before a self-attention,
     * may ask for its queries to be cut into tiles (unet_attn1.h); NULL or 0 = no tiling.
     */
    int (*attn1_tiles)(void *user, const struct unet_attn1_site *s, struct unet_attn1_tiles *t,
                       struct err *e);
    /*
     * attn1_scores (SelfAttentionGuidance's attn1 replace on ("middle", 0, 0)): called
     * with the projected q and k [B, T, heads·d] of every self-attention; it reads what
     * it needs (unet_attn1_colsum) and must not change them. NULL = not called.
     */
    int (*attn1_scores)(void *user, const struct unet_attn1_site *s, const struct tensor *q,
                        const struct tensor *k, struct err *e);
    /*
     * middle (GLIGEN's middle_patch, models/gligen): called in every transformer block
     * after the self-attention's residual, before norm2, on its tokens x [B, T, C] (in
     * place); `st` counts the SpatialTransformers walked before this one (ComfyUI's
     * transformer_index: the same for every block of one). NULL = not called.
     */
    int (*middle)(void *user, int st, struct tensor *x, struct err *e);
    /*
     * attn_kv (an attn1_patch / attn2_patch that changes what keys and values are
     * projected from: HypernetworkLoader's): called in every attention before its key and
     * value projections with k_in and v_in [B, S, W], two copies of their input on the
     * device (the normed tokens for a self-attention, self_attn 1; the context for a
     * cross-attention), which it may change in place. NULL = not called.
     */
    int (*attn_kv)(void *user, int self_attn, struct tensor *k_in, struct tensor *v_in,
                   struct err *e);
    void *user;
};

/* unet_eval_control with model patches (patches may be NULL: the same as without). */
int unet_eval_patched(struct patcher *unet, const struct unet_arch *a, const struct tensor *x,
                      const float *t, const struct tensor *ctx, const struct tensor *y,
                      const struct unet_control *control, const struct unet_patches *patches,
                      struct tensor *eps, struct err *e);

/*
 * Activation bytes (f32) one eval allocates on the device at these shapes, from a walk
 * of the block list mirroring the code's allocations (checked against the measured
 * device peak in test_models_fwd; op workspaces such as attention scratch are not
 * included: they are the backend's, mm_request.workspace_bytes).
 */
size_t unet_plan_bytes(const struct unet_arch *a, int b, int h, int w, int t);

/* Multiply-adds x2 of one eval (for benchmarks: GFLOP/s). */
double unet_flops(const struct unet_arch *a, int b, int h, int w, int t);

#endif
