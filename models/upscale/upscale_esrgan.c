/*
 * ESRGAN's RRDBNet forward (see upscale.h). The dense blocks never concatenate: one
 * buffer `cat` [B, nf + 4gc, h, w] holds the block input in its first nf channels and
 * each conv's output is written straight into the next gc channels, so every conv
 * reads a channel prefix of it (a contiguous view for B = 1, the tiled case).
 */
#include "upscale_impl.h"

#define LRELU 0.2f /* LeakyReLU slope, and the residual scale of RDB and RRDB */

static int slice(struct tensor *t, int64_t c0, int64_t n, struct tensor **out, struct err *e)
{
    return tensor_slice(t, 1, c0, n, out, e);
}

/* One dense block on cat[:, :nf] in place (x5 * 0.2 + x); t5 [B, nf, h, w] is scratch. */
static int rdb(struct nn_w *w, const struct ups_arch *a, int blk, int j, struct tensor *cat,
               struct tensor *t5, struct err *e)
{
    struct tensor *in = NULL, *o = NULL, *x0 = NULL;
    const struct tensor *cw, *cb;
    int rc;
    NN_TRY(slice(cat, 0, a->nf, &x0, e));
    for (int k = 1; k <= 5; k++) {
        int64_t ci = a->nf + (int64_t)(k - 1) * a->gc;
        UPS_W(cw, w, a, UPS_W_RDB, blk, j, k, 0);
        UPS_W(cb, w, a, UPS_W_RDB, blk, j, k, 1);
        NN_TRY(slice(cat, 0, ci, &in, e));
        if (k < 5) {
            NN_TRY(slice(cat, ci, a->gc, &o, e));
            NN_TRY(nn__conv3(o, in, cw, cb, e));
            NN_TRY(tensor_leaky_relu(o, o, LRELU, e));
        } else {
            NN_TRY(nn__conv3(t5, in, cw, cb, e));
            NN_TRY(tensor_axpby(x0, LRELU, t5, 1.0f, x0, e));
        }
        tensor_free(in);
        tensor_free(o);
        in = o = NULL;
    }
fail:
    tensor_free(in);
    tensor_free(o);
    tensor_free(x0);
    return rc;
}

/* The trunk: fea += conv_body(RRDB^nb(fea)). */
static int trunk(struct nn_w *w, const struct ups_arch *a, struct dev *d, struct tensor *fea,
                 struct err *e)
{
    int64_t B = fea->shape[0], H = fea->shape[2], W = fea->shape[3];
    struct tensor *cat = NULL, *t5 = NULL, *h = NULL, *x0 = NULL;
    const struct tensor *cw, *cb;
    int rc;
    NN_TRY(nn__new(d, &cat, e, 4, B, (int64_t)(a->nf + 4 * a->gc), H, W));
    NN_TRY(nn__new(d, &t5, e, 4, B, (int64_t)a->nf, H, W));
    NN_TRY(nn__new(d, &h, e, 4, B, (int64_t)a->nf, H, W));
    NN_TRY(slice(cat, 0, a->nf, &x0, e));
    NN_TRY(tensor_copy(h, fea, e));
    for (int b = 0; b < a->nb; b++) {
        NN_TRY(tensor_copy(x0, h, e));
        for (int j = 1; j <= 3; j++)
            NN_TRY(rdb(w, a, b, j, cat, t5, e));
        NN_TRY(tensor_axpby(h, LRELU, x0, 1.0f, h, e)); /* RRDB: out * 0.2 + x */
    }
    UPS_W(cw, w, a, UPS_W_BODY, 0, 0, 0, 0);
    UPS_W(cb, w, a, UPS_W_BODY, 0, 0, 0, 1);
    NN_TRY(nn__conv3(t5, h, cw, cb, e));
    NN_TRY(tensor_add(fea, fea, t5, e));
fail:
    tensor_free(cat);
    tensor_free(t5);
    tensor_free(h);
    tensor_free(x0);
    return rc;
}

/* conv (role i) then LeakyReLU, into a new tensor *out. */
static int conv_lrelu(struct nn_w *w, const struct ups_arch *a, struct dev *d, enum ups_role r,
                      int i, const struct tensor *x, int64_t co, struct tensor **out,
                      struct err *e)
{
    const struct tensor *cw, *cb;
    int rc;
    *out = NULL;
    UPS_W(cw, w, a, r, i, 0, 0, 0);
    UPS_W(cb, w, a, r, i, 0, 0, 1);
    NN_TRY(nn__new(d, out, e, 4, x->shape[0], co, x->shape[2], x->shape[3]));
    NN_TRY(nn__conv3(*out, x, cw, cb, e));
    NN_TRY(tensor_leaky_relu(*out, *out, LRELU, e));
    return 0;
fail:
    tensor_free(*out);
    *out = NULL;
    return rc;
}

int ups__esrgan_forward(struct nn_w *w, const struct ups_arch *a, struct dev *d,
                        const struct tensor *x, struct tensor *out, struct err *e)
{
    int64_t B = x->shape[0], H = x->shape[2], W = x->shape[3], s = a->shuffle;
    int64_t hs = (H + s - 1) / s, ws = (W + s - 1) / s;
    struct tensor *xu = NULL, *fea = NULL, *up = NULL, *nx = NULL, *full = NULL, *crop = NULL;
    const struct tensor *cw, *cb, *src = x;
    int rc;
    if (s > 1) {
        NN_TRY(nn__new(d, &xu, e, 4, B, x->shape[1] * s * s, hs, ws));
        NN_TRY(tensor_pixel_unshuffle(xu, x, (int)s, e));
        src = xu;
    }
    UPS_W(cw, w, a, UPS_W_FIRST, 0, 0, 0, 0);
    UPS_W(cb, w, a, UPS_W_FIRST, 0, 0, 0, 1);
    NN_TRY(nn__new(d, &fea, e, 4, B, (int64_t)a->nf, hs, ws));
    NN_TRY(nn__conv3(fea, src, cw, cb, e));
    tensor_free(xu);
    xu = NULL;
    NN_TRY(trunk(w, a, d, fea, e));
    for (int u = 0; u < a->n_up; u++) {
        NN_TRY(nn__new(d, &up, e, 4, B, (int64_t)a->nf, 2 * fea->shape[2], 2 * fea->shape[3]));
        NN_TRY(tensor_upsample_nearest(up, fea, e));
        tensor_free(fea);
        fea = NULL;
        NN_TRY(conv_lrelu(w, a, d, UPS_W_UP, u, up, a->nf, &fea, e));
        tensor_free(up);
        up = NULL;
    }
    NN_TRY(conv_lrelu(w, a, d, UPS_W_HR, 0, fea, a->nf, &nx, e));
    tensor_free(fea);
    fea = NULL;
    UPS_W(cw, w, a, UPS_W_LAST, 0, 0, 0, 0);
    UPS_W(cb, w, a, UPS_W_LAST, 0, 0, 0, 1);
    if (nx->shape[2] == out->shape[2] && nx->shape[3] == out->shape[3]) {
        NN_TRY(nn__conv3(out, nx, cw, cb, e));
    } else {
        /* Reflect-padded to multiples of the unshuffle: crop back to scale x input. */
        struct tensor *r1 = NULL;
        NN_TRY(nn__new(d, &full, e, 4, B, (int64_t)a->out_ch, nx->shape[2], nx->shape[3]));
        NN_TRY(nn__conv3(full, nx, cw, cb, e));
        NN_TRY(tensor_slice(full, 2, 0, out->shape[2], &r1, e));
        rc = tensor_slice(r1, 3, 0, out->shape[3], &crop, e);
        tensor_free(r1);
        NN_TRY(rc);
        NN_TRY(tensor_copy(out, crop, e));
    }
fail:
    tensor_free(xu);
    tensor_free(fea);
    tensor_free(up);
    tensor_free(nx);
    tensor_free(full);
    tensor_free(crop);
    return rc;
}
