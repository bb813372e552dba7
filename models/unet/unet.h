/*
 * sd15_models — SD1.x forward passes on tensor/ ops, reading every weight through
 * the patcher (memory/patcher.h): CLIP text encoder (sd15.md §2.10-2.13), UNet
 * (§3), VAE decoder and encoder (§4), with tiled VAE decode/encode (§4.5).
 *
 * Typical node sequence (executor thread):
 *     sd15_ckpt_load(path, SD15_LOAD_ALL, dts, &ck, &e);     // sd15_ckpt.h
 *     struct patcher *clip = patcher_new(ck.model[SD15_CLIP]), ...
 *     mm_load_models(mm, {clip}, activation bytes from sd15_clip_plan_bytes(), ...)
 *     clip_tokenize_prompt(tok, text, &tk);                  // clip_tokenizer.h
 *     sd15_clip_encode(clip, &ck.cfg, &tk, -1, &cond, &pooled, &e);
 *     mm_load_models(mm, {unet}, sd15_unet_plan_bytes(...))
 *     sd15_unet_eval(unet, &ck.cfg, x, t, ctx, eps, NULL, &e);  // per sampler call
 *     mm_load_models(mm, {vae}, sd15_vae_plan_bytes(...))
 *     sd15_vae_decode(vae, &ck.cfg, z, img, NULL, &e);
 *
 * Weights: each block is one patcher layer; the code acquires a layer, runs the
 * block, and releases it before acquiring the next, so streamed models work with a
 * ring of one slot in use at a time. All activations live on patcher_device(p);
 * the model must be loaded (mm_load_models) before these calls.
 *
 * Numerics follow sd15.md §8 (f32 statistics, exact GELU, eps per §3.8).
 *
 * `probe` (optional, NULL in production) receives named intermediates, for the
 * reference comparisons in tests: the tensor is borrowed for the call only.
 *
 * Threads: executor thread only.
 */
#ifndef LATENTD_MODELS_SD15_MODELS_H
#define LATENTD_MODELS_SD15_MODELS_H

#include <stddef.h>
#include <stdint.h>

#include "clip_tokenizer.h"
#include "err.h"
#include "patcher.h"
#include "sd15_layout.h"
#include "tensor.h"

struct sd15_probe {
    void (*fn)(void *user, const char *name, const struct tensor *t);
    void *user;
};

/* ---- CLIP ------------------------------------------------------------------------------ */

/*
 * Encode a tokenized prompt (clip_tokenize_prompt). clip_skip: -1 (or 0) = last layer,
 * -2 = penultimate, ... (CLIPSetLastLayer; below -layers falls back to last, §2.11).
 * Emphasis is applied to the output (§2.12). Outputs are new host arrays (caller frees
 * with xfree): *cond [tk->n_chunks * 77 * width] (= [1, 77n, width]), *pooled [width]
 * (chunk 0's final-LN output at its first end token, §2.13). *width_out may be NULL.
 */
int sd15_clip_encode(struct patcher *clip, const struct sd15_config *cfg,
                     const struct clip_tokens *tk, int clip_skip, float **cond, float **pooled,
                     struct sd15_probe *probe, struct err *e);

/* Activation bytes the encode needs on the device for n_seq sequences (plan input). */
size_t sd15_clip_plan_bytes(const struct sd15_config *cfg, int n_seq);

/* ---- UNet ------------------------------------------------------------------------------ */

/*
 * eps = UNet(x, t, ctx) (§3.7). x [B, 4, h, w] and ctx [B, T, ctx_dim] (T a multiple
 * of 77 in practice) on patcher_device(unet); t: B host floats (timesteps, §3.9);
 * eps: a caller-allocated [B, 4, h, w] tensor on the same device. Any h, w >= 1
 * (odd sizes use size-matched upsampling, §3.5).
 */
int sd15_unet_eval(struct patcher *unet, const struct sd15_config *cfg, const struct tensor *x,
                   const float *t, const struct tensor *ctx, struct tensor *eps,
                   struct sd15_probe *probe, struct err *e);

/*
 * Activation bytes (f32) one eval allocates on the device at these shapes, from a walk
 * of the block sequence mirroring the code's allocations (checked against the measured
 * device peak in test_models_fwd; op workspaces such as attention scratch are not
 * included: they are the backend's, mm_request.workspace_bytes).
 */
size_t sd15_unet_plan_bytes(const struct sd15_config *cfg, int b, int h, int w, int t);

/* Multiply-adds x2 of one eval (for benchmarks: GFLOP/s). */
double sd15_unet_flops(const struct sd15_config *cfg, int b, int h, int w, int t);

/* ---- VAE ------------------------------------------------------------------------------- */

/*
 * Decode latents z [B, 4, h, w] (unscaled, as in a ComfyUI LATENT) into the decoder
 * output img [B, 3, 8h, 8w] (caller-allocated; values ~[-1, 1], not clamped: the
 * IMAGE conversion is clamp((img + 1) / 2, 0, 1), §4.4).
 */
int sd15_vae_decode(struct patcher *vae, const struct sd15_config *cfg, const struct tensor *z,
                    struct tensor *img, struct sd15_probe *probe, struct err *e);

/*
 * Encode img [B, 3, H, W] in [-1, 1] (H, W multiples of 8; the crop is the caller's,
 * §4.4) into the latent mean [B, 4, H/8, W/8] (caller-allocated).
 */
int sd15_vae_encode(struct patcher *vae, const struct sd15_config *cfg, const struct tensor *img,
                    struct tensor *mean, struct sd15_probe *probe, struct err *e);

/*
 * Tiled decode as ComfyUI's (§4.5): tile and overlap in latent pixels (OOM fallback
 * 64/16; VAEDecodeTiled 512/64 px -> 64/8). Same output contract as sd15_vae_decode.
 */
int sd15_vae_decode_tiled(struct patcher *vae, const struct sd15_config *cfg,
                          const struct tensor *z, struct tensor *img, int tile, int overlap,
                          struct err *e);

/*
 * Tiled encode as ComfyUI's encode_tiled_ (§4.5 applied to the encoder): tile and
 * overlap in pixels (defaults 512 / 64; tile a multiple of 16, overlap of 8). Same
 * contract as sd15_vae_encode.
 */
int sd15_vae_encode_tiled(struct patcher *vae, const struct sd15_config *cfg,
                          const struct tensor *img, struct tensor *mean, int tile, int overlap,
                          struct err *e);

/*
 * Decode / encode whole, and when that runs out of device memory (ERR_DEVICE_OOM from
 * an activation), log a warning and retry tiled, as ComfyUI does (its fallback tiles are
 * 64 / 16 latent px for decode and 512 / 64 px for encode; pass those, or smaller for a
 * tight budget). Other errors are returned as they are.
 */
int sd15_vae_decode_auto(struct patcher *vae, const struct sd15_config *cfg,
                         const struct tensor *z, struct tensor *img, int tile, int overlap,
                         struct err *e);
int sd15_vae_encode_auto(struct patcher *vae, const struct sd15_config *cfg,
                         const struct tensor *img, struct tensor *mean, int tile, int overlap,
                         struct err *e);

/* Activation bytes (f32) of a whole-image decode / encode at latent size h x w (same
 * method and test as sd15_unet_plan_bytes). */
size_t sd15_vae_plan_bytes(const struct sd15_config *cfg, int b, int h, int w);
double sd15_vae_decode_flops(const struct sd15_config *cfg, int b, int h, int w);

#endif
