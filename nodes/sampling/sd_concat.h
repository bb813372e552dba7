/*
 * sd_concat — private to nodes/sampling: the c_concat of one conditioning entry for a
 * concat-conditioned MODEL (an inpainting or instruct-pix2pix UNet, family.h's
 * enum model_concat), built once per sampling at the sampled latent's size as ComfyUI's
 * encode_model_conds does with model_base's concat_cond:
 *
 *   inpainting (BaseModel.set_inpaint, concat keys "mask", "masked_image"):
 *     the mask is the entry's concat_mask, else the latent's noise mask (the sampler's
 *     denoise_mask); resized (bilinear, center crop) to the latent when its size differs,
 *     rounded (half to even) and resized to the batch (resize_to_batch_size). The image
 *     is the entry's concat_latent_image x the latent scale (process_latent_in), else
 *     the sampled latent itself (already scaled), resized and batched the same way.
 *     c_concat = mask (1) | image (4); without any mask: ones (1) | the latent of a black
 *     image (0.8223, -0.6876, 0.6364, 0.1380 per channel: blank_inpaint_image_like),
 *     whatever the image.
 *   instruct-pix2pix (IP2P.concat_cond): the entry's concat_latent_image as stored
 *     (unscaled: SD15_instructpix2pix's identity process_ip2p_image_in), else zeros;
 *     resized and batched as above. c_concat = image (4).
 *
 * The sampler then takes each job's area slice of it and joins it to the model input
 * (CONDNoiseShape.process_cond, _apply_model's torch.cat along channels).
 *
 * Threads: the executor thread (pure functions over caller buffers).
 */
#ifndef LATENTD_NODES_SD_CONCAT_H
#define LATENTD_NODES_SD_CONCAT_H

#include "err.h"
#include "family.h"
#include "sd_types.h"

/*
 * c_concat of entry `en` for a model of kind `kind` into out [batch, cc, h, w]
 * (cc = model_concat_channels(kind)). latent: the sampled latent, scaled
 * (process_latent_in) [batch, 4, h, w]; noise_mask: the latent's prepared noise mask
 * [batch, 4, h, w] (sampling_mask_prepare) or NULL; scale: the latent format's scale
 * factor. Returns 0, or ERR_INVALID / ERR_DEVICE_OOM with e set (a resize that cannot
 * be done, or request-sized scratch that does not fit).
 */
int sd_concat_build(enum model_concat kind, const struct sd_cond_entry *en, const float *latent,
                    const float *noise_mask, float scale, int batch, int h, int w, float *out,
                    struct err *e);

/*
 * ComfyUI's utils.resize_to_batch_size of src [in_b, per floats each] into out
 * [out_b, per]: the same batch is copied, fewer samples pick round(i (in_b - 1) /
 * (out_b - 1)), more pick floor((i + 0.5) in_b / out_b).
 */
void sd_concat_resize_batch(const float *src, int in_b, size_t per, float *out, int out_b);

#endif
