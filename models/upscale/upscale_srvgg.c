/*
 * Real-ESRGAN's SRVGGNetCompact forward (see upscale.h): a plain conv + PReLU stack at
 * input resolution, pixel shuffle, plus the nearest-upsampled input.
 */
#include "upscale_impl.h"

int ups__srvgg_forward(struct nn_w *w, const struct ups_arch *a, struct dev *d,
                       const struct tensor *x, struct tensor *out, struct err *e)
{
    int64_t B = x->shape[0], H = x->shape[2], W = x->shape[3];
    struct tensor *h = NULL, *t = NULL, *base = NULL;
    const struct tensor *cw, *cb, *slope;
    int rc;
    NN_TRY(nn__new(d, &h, e, 4, B, (int64_t)a->nf, H, W));
    NN_TRY(nn__new(d, &t, e, 4, B, (int64_t)a->nf, H, W));
    for (int i = 0; i <= a->nb; i++) {
        UPS_W(cw, w, a, UPS_W_VGG, i, 0, 0, 0);
        UPS_W(cb, w, a, UPS_W_VGG, i, 0, 0, 1);
        UPS_W(slope, w, a, UPS_W_PRELU, i, 0, 0, 0);
        NN_TRY(nn__conv3(t, i == 0 ? x : h, cw, cb, e));
        NN_TRY(tensor_prelu(h, t, slope, e));
    }
    tensor_free(t);
    t = NULL;
    int64_t s = a->scale;
    UPS_W(cw, w, a, UPS_W_VGG, a->nb + 1, 0, 0, 0);
    UPS_W(cb, w, a, UPS_W_VGG, a->nb + 1, 0, 0, 1);
    NN_TRY(nn__new(d, &t, e, 4, B, (int64_t)a->out_ch * s * s, H, W));
    NN_TRY(nn__conv3(t, h, cw, cb, e));
    tensor_free(h);
    h = NULL;
    NN_TRY(tensor_pixel_shuffle(out, t, (int)s, e));
    tensor_free(t);
    t = NULL;
    NN_TRY(nn__new(d, &base, e, 4, B, x->shape[1], H * s, W * s));
    NN_TRY(tensor_upsample_nearest(base, x, e));
    NN_TRY(tensor_add(out, out, base, e));
fail:
    tensor_free(h);
    tensor_free(t);
    tensor_free(base);
    return rc;
}
