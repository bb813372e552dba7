/*
 * The inpaint nodes' mask and greyed image (see sd_inpaint_pixels.h).
 */
#include "sd_inpaint_pixels.h"

#include <math.h>
#include <string.h>

#include "alloc.h"
#include "sampling.h"

int sd_inpaint_pixels_make(const struct value *px, const struct value *mk,
                           struct sd_inpaint_pixels *p, struct err *e)
{
    memset(p, 0, sizeof *p);
    if (!px || px->kind != VALUE_TENSOR || px->ndim != 4 || px->shape[3] < 3)
        return err_set(e, ERR_INVALID, "pixels must be an IMAGE [B, H, W, 3]");
    if (!mk || mk->kind != VALUE_TENSOR || mk->ndim < 2 || mk->ndim > 4)
        return err_set(e, ERR_INVALID, "input 'mask' is not a MASK");
    int64_t B = px->shape[0], H0 = px->shape[1], W0 = px->shape[2], C = px->shape[3];
    int64_t mh = mk->shape[mk->ndim - 2], mw = mk->shape[mk->ndim - 1];
    int64_t mb = mh * mw > 0 ? (int64_t)mk->numel / (mh * mw) : 0;
    int64_t H = H0 / 8 * 8, W = W0 / 8 * 8, oy = (H0 % 8) / 2, ox = (W0 % 8) / 2;
    if (H < 8 || W < 8)
        return err_set(e, ERR_INVALID, "image %lldx%lld is too small to encode", (long long)W0,
                       (long long)H0);
    if (mb < 1)
        return err_set(e, ERR_INVALID, "the mask is empty");
    /* A mask batch times the image size can be far more than either input: checked, with
     * the cropped mask and the greyed image that follow. */
    int rc = alloc_host_check_n((size_t)(mb * H0 * W0) * 2 + (size_t)(B * H * W * 3),
                                sizeof(float), e);
    if (rc < 0)
        return rc;
    float *full = xmalloc((size_t)(mb * H0 * W0) * sizeof *full);
    for (int64_t b = 0; b < mb && rc == 0; b++)
        rc = sampling_mask_prepare(mk->data + b * mh * mw, 1, (int)mh, (int)mw, 1, 1, (int)H0,
                                   (int)W0, full + b * H0 * W0, e);
    if (rc < 0) {
        xfree(full);
        return rc;
    }
    p->mask = xmalloc((size_t)(mb * H * W) * sizeof *p->mask);
    p->mb = mb;
    p->h = H;
    p->w = W;
    for (int64_t b = 0; b < mb; b++)
        for (int64_t y = 0; y < H; y++)
            memcpy(p->mask + (b * H + y) * W, full + (b * H0 + y + oy) * W0 + ox,
                   (size_t)W * sizeof *full);
    xfree(full);
    /* Grey out the masked pixels: (p - 0.5) * (1 - round(m)) + 0.5 (torch.round). */
    p->grey = value_new_image(B, H, W, 3);
    for (int64_t b = 0; b < B; b++)
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++) {
                float keep = 1.0f - nearbyintf(p->mask[((b % mb) * H + y) * W + x]);
                for (int64_t k = 0; k < 3; k++) {
                    float v = px->data[((b * H0 + y + oy) * W0 + x + ox) * C + k] - 0.5f;
                    v = v * keep;
                    p->grey->data[((b * H + y) * W + x) * 3 + k] = v + 0.5f;
                }
            }
    return 0;
}

void sd_inpaint_pixels_release(struct sd_inpaint_pixels *p)
{
    xfree(p->mask);
    value_unref(p->grey);
    memset(p, 0, sizeof *p);
}
