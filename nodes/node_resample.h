/*
 * node_resample — the one resampler behind every resize in nodes/ (ImageScale and
 * friends, LatentUpscale, the masks and latents that composites resize): ComfyUI's
 * comfy.utils.common_upscale.
 *
 * What it reproduces:
 *   - crop "center": the source is first narrowed to the target aspect, with
 *     Python's round() of the margin, as common_upscale does;
 *   - "nearest-exact", "bilinear", "area", "bicubic": torch.nn.functional.interpolate
 *     (align_corners = False, no antialias) as PyTorch's CPU kernels compute it:
 *     source coordinates in float32, (dst + 0.5) * scale - 0.5, bicubic A = -0.75,
 *     area = adaptive average pooling;
 *   - "lanczos": comfy.utils.lanczos, i.e. the float image truncated to 8 bits
 *     (np.clip(255 * x).astype(uint8)), PIL's Image.resize(LANCZOS) in its 8-bit
 *     fixed-point arithmetic (horizontal pass first, a pass skipped when that
 *     size is unchanged), then / 255;
 *   - "bislerp": ComfyUI's spherical interpolation of the channel vectors, first
 *     along the width, then along the height.
 *
 * Layouts: planar [B, C, H, W] (latents, masks as C = 1) or channels-last
 * [B, H, W, C] (IMAGE), so that images are never transposed to be resized.
 *
 * Threads: any; pure functions over caller buffers.
 */
#ifndef LATENTD_NODES_NODE_RESAMPLE_H
#define LATENTD_NODES_NODE_RESAMPLE_H

#include <stdint.h>

#include "err.h"

enum node_resample_layout {
    NODE_RESAMPLE_BCHW = 0, /* planar: latents, masks */
    NODE_RESAMPLE_BHWC,     /* channels last: IMAGE */
};

/* The largest side node_resample accepts (ComfyUI's MAX_RESOLUTION * 4). */
#define NODE_RESAMPLE_MAX_SIDE 65536

/*
 * Resize src (b x c x h x w floats in `layout`) to dst (b x c x oh x ow floats, same
 * layout) with `method` (see above); crop_center narrows the source to the target
 * aspect first. Returns 0, or ERR_INVALID with a message in `e` (unknown method,
 * empty or oversized shape, a center crop that leaves nothing). Callers that offer
 * only some methods check their own list first.
 */
int node_resample(const float *src, int64_t b, int64_t c, int64_t h, int64_t w,
                  enum node_resample_layout layout, const char *method, int crop_center,
                  float *dst, int64_t oh, int64_t ow, struct err *e);

/* Python's round() of a double: half to even. */
double node_round_half_even(double x);

#endif
