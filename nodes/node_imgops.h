/*
 * node_imgops — pixel operations on IMAGE/MASK values shared by image nodes (and
 * usable by others: VAEEncode's crop, LatentUpscale's kernels on host data).
 *
 * Resizing matches torch.nn.functional.interpolate (align_corners=False, no
 * antialias) for "nearest-exact", "bilinear", "bicubic" (A = -0.75) and "area"
 * (adaptive average pooling), and PIL's LANCZOS on 8-bit data for "lanczos", as
 * ComfyUI's comfy.utils.common_upscale does.
 *
 * Threads: any; pure functions.
 */
#ifndef LATENTD_NODES_NODE_IMGOPS_H
#define LATENTD_NODES_NODE_IMGOPS_H

#include <stdint.h>

#include "node_value.h"

/*
 * Resize a channels-last float tensor [B,H,W,C] (c may be 1 for masks given as
 * [B,H,W,1]) to h x w with `method`; `crop_center` first crops the source to the
 * target aspect ratio. Writes `dst` (b*h*w*c floats). Returns 0, or ERR_INVALID
 * for an unknown method.
 */
int node_img_resize(const float *src, int64_t b, int64_t sh, int64_t sw, int64_t c, float *dst,
                    int64_t h, int64_t w, const char *method, int crop_center);

/* Python's round(): half to even. */
double node_round_half_even(double x);

#endif
