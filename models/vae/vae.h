/*
 * vae — the AutoencoderKL decoder and encoder (sd15.md §4) on tensor/ ops, reading
 * every weight through the patcher, whole or tiled (§4.5).
 *
 * Threads: executor thread only (the planning figures: any thread).
 */
#ifndef LATENTD_MODELS_VAE_H
#define LATENTD_MODELS_VAE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "model_config.h"
#include "vae_arch.h"
#include "patcher.h"
#include "tensor.h"

/* ---- VAE ------------------------------------------------------------------------------- */

/*
 * Decode latents z [B, 4, h, w] (unscaled, as in a ComfyUI LATENT) into the decoder
 * output img [B, 3, 8h, 8w] (caller-allocated; values ~[-1, 1], not clamped: the
 * IMAGE conversion is clamp((img + 1) / 2, 0, 1), §4.4).
 */
int vae_decode(struct patcher *vae, const struct vae_arch *cfg, const struct tensor *z,
               struct tensor *img, struct model_probe *probe, struct err *e);

/*
 * Encode img [B, 3, H, W] in [-1, 1] (H, W multiples of 8; the crop is the caller's,
 * §4.4) into the latent mean [B, 4, H/8, W/8] (caller-allocated).
 */
int vae_encode(struct patcher *vae, const struct vae_arch *cfg, const struct tensor *img,
               struct tensor *mean, struct model_probe *probe, struct err *e);

/*
 * Tiled decode as ComfyUI's (§4.5): tile and overlap in latent pixels (OOM fallback
 * 64/16; VAEDecodeTiled 512/64 px -> 64/8). Same output contract as vae_decode.
 */
int vae_decode_tiled(struct patcher *vae, const struct vae_arch *cfg, const struct tensor *z,
                     struct tensor *img, int tile, int overlap, struct err *e);

/*
 * Tiled encode as ComfyUI's encode_tiled_ (§4.5 applied to the encoder): tile and
 * overlap in pixels (defaults 512 / 64; tile a multiple of 16, overlap of 8). Same
 * contract as vae_encode.
 */
int vae_encode_tiled(struct patcher *vae, const struct vae_arch *cfg, const struct tensor *img,
                     struct tensor *mean, int tile, int overlap, struct err *e);

/*
 * Decode / encode whole, and when that runs out of device memory (ERR_DEVICE_OOM from
 * an activation), log a warning and retry tiled, as ComfyUI does (its fallback tiles are
 * 64 / 16 latent px for decode and 512 / 64 px for encode; pass those, or smaller for a
 * tight budget). Other errors are returned as they are.
 */
int vae_decode_auto(struct patcher *vae, const struct vae_arch *cfg, const struct tensor *z,
                    struct tensor *img, int tile, int overlap, struct err *e);
int vae_encode_auto(struct patcher *vae, const struct vae_arch *cfg, const struct tensor *img,
                    struct tensor *mean, int tile, int overlap, struct err *e);

/* Activation bytes (f32) of a whole-image decode / encode at latent size h x w (same
 * method and test as unet_plan_bytes). */
size_t vae_plan_bytes(const struct vae_arch *cfg, int b, int h, int w);
double vae_decode_flops(const struct vae_arch *cfg, int b, int h, int w);

#endif
