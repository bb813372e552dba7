/*
 * node_imgops — resizing IMAGE values ([B,H,W,C], channels last) as the image
 * nodes offer it: the methods of ImageScale's combo through the one resampler
 * (resample.h, which holds the numerics and says what each method matches).
 *
 * Threads: any; pure functions.
 */
#ifndef LATENTD_NODES_NODE_IMGOPS_H
#define LATENTD_NODES_NODE_IMGOPS_H

#include <stdint.h>

#include "err.h"
#include "resample.h"
#include "node_value.h"

/* ImageScale's upscale_method combo, in ComfyUI's order, NULL-terminated. */
extern const char *const node_img_upscale_methods[];

/*
 * Resize a channels-last float tensor [B,H,W,C] (c may be 1 for masks given as
 * [B,H,W,1]) to h x w with `method` (one of node_img_upscale_methods);
 * `crop_center` first crops the source to the target aspect ratio. Writes `dst`
 * (b*h*w*c floats). Returns 0, or ERR_INVALID with a message in `e` (may be NULL)
 * for an unknown method or a size the resampler refuses.
 */
int node_img_resize(const float *src, int64_t b, int64_t sh, int64_t sw, int64_t c, float *dst,
                    int64_t h, int64_t w, const char *method, int crop_center, struct err *e);

#endif
