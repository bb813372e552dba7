/*
 * vae_image — ComfyUI's pixel conventions around the VAE (sd15.md §4.4), so that
 * nodes do not re-derive them:
 *   - IMAGE values are [B, H, W, 3] float32 in [0, 1], channels last;
 *   - VAEDecode: image = clamp((decoder_output + 1) / 2, 0, 1), then channels last;
 *   - VAEEncode: crop H and W down to multiples of 8 around the centre (offset
 *     (dim % 8) / 2), then x = 2 * pixel - 1, channels first;
 *   - SaveImage: 8-bit value = trunc(clamp(255 * v, 0, 255)) (truncation).
 *
 * Threads: any (pure functions over caller memory), except the tensor ones, which
 * follow tensor.h (executor thread).
 */
#ifndef LATENTD_MODELS_VAE_IMAGE_H
#define LATENTD_MODELS_VAE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "tensor.h"

/*
 * Decoder output img [B, 3, H, W] (any device) -> out [B, H, W, 3] host floats in [0, 1]
 * (caller-allocated, B*H*W*3). Returns 0 or a negative ERR_*.
 */
int vae_image_from_decoder(const struct tensor *img, float *out, struct err *e);

/*
 * IMAGE pixels [B, H, W, 3] (host, [0, 1]) -> a new tensor [B, 3, H8, W8] on `d` with
 * values 2p - 1, H8 = H / 8 * 8 (centre crop as ComfyUI). Fails with ERR_INVALID when
 * H or W is below 8. Caller frees *out with tensor_free.
 */
int vae_image_to_encoder(struct dev *d, const float *pix, int b, int h, int w,
                          struct tensor **out, struct err *e);

/* n floats in [0, 1] -> bytes as SaveImage does (truncation). */
void vae_image_to_u8(const float *v, size_t n, uint8_t *out);

#endif
