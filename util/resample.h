/*
 * resample — the one image resampler: ComfyUI's comfy.utils.common_upscale on float
 * data (ImageScale and friends, LatentUpscale, the masks and latents composites and
 * the sampler resize), and PIL's Image.resize on 8-bit pixels (the lanczos method,
 * sampler previews).
 *
 * What resample() reproduces:
 *   - crop "center": the source is first narrowed to the target aspect, with
 *     Python's round() of the margin, as common_upscale does;
 *   - "nearest-exact", "bilinear", "area", "bicubic": torch.nn.functional.interpolate
 *     (align_corners = False, no antialias) as PyTorch's CPU kernels compute it:
 *     source coordinates in float32, (dst + 0.5) * scale - 0.5, bicubic A = -0.75,
 *     area = adaptive average pooling;
 *   - "lanczos": comfy.utils.lanczos, i.e. the float image truncated to 8 bits
 *     (np.clip(255 * x).astype(uint8)), resample_pil8(LANCZOS), then / 255;
 *   - "bislerp": ComfyUI's spherical interpolation of the channel vectors, first
 *     along the width, then along the height.
 * resample_pil8() is PIL's ImagingResample in its 8-bit fixed-point arithmetic
 * (22-bit weights, horizontal pass first, a pass skipped when that size is
 * unchanged) with the BILINEAR or LANCZOS filter.
 *
 * Layouts: planar [B, C, H, W] (latents, masks as C = 1) or channels-last
 * [B, H, W, C] (IMAGE), so that images are never transposed to be resized.
 *
 * Threads: any; pure functions over caller buffers.
 */
#ifndef LATENTD_UTIL_RESAMPLE_H
#define LATENTD_UTIL_RESAMPLE_H

#include <stdint.h>

#include "err.h"

enum resample_layout {
    RESAMPLE_BCHW = 0, /* planar: latents, masks */
    RESAMPLE_BHWC,     /* channels last: IMAGE */
};

/* The largest side resample() accepts (ComfyUI's MAX_RESOLUTION * 4). */
#define RESAMPLE_MAX_SIDE 65536

/*
 * Resize src (b x c x h x w floats in `layout`) to dst (b x c x oh x ow floats, same
 * layout) with `method` (see above); crop_center narrows the source to the target
 * aspect first. Returns 0, or ERR_INVALID with a message in `e` (unknown method,
 * empty or oversized shape, a center crop that leaves nothing). Callers that offer
 * only some methods check their own list first.
 */
int resample(const float *src, int64_t b, int64_t c, int64_t h, int64_t w,
             enum resample_layout layout, const char *method, int crop_center, float *dst,
             int64_t oh, int64_t ow, struct err *e);

enum resample_pil_filter {
    RESAMPLE_PIL_BILINEAR = 0, /* triangle, support 1 */
    RESAMPLE_PIL_LANCZOS,      /* sinc windowed by sinc(x / 3), support 3 */
};

/*
 * PIL's Image.resize(filter) of an 8-bit image of c interleaved channels (each
 * channel on its own, as PIL treats RGB): src iw x ih to dst ow x oh (sizes >= 1).
 */
void resample_pil8(const uint8_t *src, int iw, int ih, int c, uint8_t *dst, int ow, int oh,
                   enum resample_pil_filter filter);

#endif
