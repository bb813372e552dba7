/*
 * sd_inpaint_pixels — the pixel-side preparation that VAEEncodeForInpaint and
 * InpaintModelConditioning share (ComfyUI's nodes.py does it in both): a MASK resized to
 * the IMAGE (bilinear, align_corners False), both cropped to multiples of 8 around the
 * centre, and a copy of the cropped image with the masked pixels (round(mask) = 1) set
 * to grey 0.5 for the VAE to encode.
 *
 * Threads: the executor thread, inside a node's run().
 */
#ifndef LATENTD_NODES_SD_INPAINT_PIXELS_H
#define LATENTD_NODES_SD_INPAINT_PIXELS_H

#include <stdint.h>

#include "err.h"
#include "node_value.h"

struct sd_inpaint_pixels {
    float *mask;        /* owned: [mb, h, w] the resized, cropped mask (not rounded) */
    int64_t mb, h, w;   /* mask batch; the cropped size (multiples of 8) */
    struct value *grey; /* owned reference: IMAGE [B, h, w, 3], masked pixels grey */
};

/*
 * Fill *p from pixels (IMAGE [B, H, W, C >= 3]) and mask (MASK [.., mh, mw]; sample b
 * of the image uses mask b % mb). Returns 0, or ERR_INVALID (not an image or mask, an
 * image under 8 x 8) / ERR_DEVICE_OOM (the request-sized buffers) with e set and *p
 * empty. Release with sd_inpaint_pixels_release.
 */
int sd_inpaint_pixels_make(const struct value *pixels, const struct value *mask,
                           struct sd_inpaint_pixels *p, struct err *e);
void sd_inpaint_pixels_release(struct sd_inpaint_pixels *p);

#endif
