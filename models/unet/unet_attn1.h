/*
 * unet_attn1 — what the UNet's self-attention hooks (unet.h struct unet_patches:
 * attn1_tiles, attn1_scores) compute, apart from the walk:
 *
 *   - unet_attn1_tiled: attention with the queries cut into tiles (HyperTile). ComfyUI's
 *     hypertile_in rearranges only the queries "b (nh h nw w) c -> (b nh nw) (h w) c";
 *     the keys and values stay [b, T, c] and the attention kernels view them as
 *     (b·nh·nw) batches of T/(nh·nw) consecutive tokens. So tile t of a sample attends
 *     over token chunk t, not over its own spatial tile; we reproduce that.
 *   - unet_attn1_colsum: SelfAttentionGuidance's reading of the attention map, per sample
 *     the mean over heads of softmax(q kᵀ/√d), summed over the queries: one figure per
 *     key token (create_blur_map thresholds it at 1).
 *
 * The tiling moves rows with tensor views and copies (device side, any backend); the
 * score reduction reads q and k to the host and runs in double (the middle block is the
 * smallest attention in the UNet: 64 tokens at 512x512 for SD1.5).
 *
 * Threads: executor thread (device tensors of the eval).
 */
#ifndef LATENTD_MODELS_UNET_ATTN1_H
#define LATENTD_MODELS_UNET_ATTN1_H

#include <stdint.h>

#include "err.h"
#include "tensor.h"
#include "unet.h"

/*
 * out = attention(q, k, v) with q's tokens tiled per t (see above). q, k, v, out
 * [B, T, C] contiguous f32 on one device, T = t->rows·t->cols. Returns 0 or <0 with e set.
 */
int unet_attn1_tiled(struct tensor *out, const struct tensor *q, const struct tensor *k,
                     const struct tensor *v, int heads, const struct unet_attn1_tiles *t,
                     struct err *e);

/*
 * colsum[(b − b0)·T + j] = (1/heads)·Σ_h Σ_i softmax_j(q_bh k_bhᵀ/√d)[i, j] for the samples
 * b in [b0, b0 + nb) of q, k [B, T, heads·d] (host doubles, caller-owned, nb·T of them).
 * Returns 0 or <0 with e set (ERR_DEVICE_OOM in ComfyUI's shape when the host copy
 * does not fit).
 */
int unet_attn1_colsum(const struct tensor *q, const struct tensor *k, int heads, int64_t b0,
                      int64_t nb, double *colsum, struct err *e);

#endif
