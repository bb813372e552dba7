/*
 * Running an upscale model (see upscale.h): the shape contract, ComfyUI's tiling and
 * the planner's figures.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"

#include "nn_tiled.h"
#include "upscale_impl.h"

const struct tensor *ups__w(struct nn_w *w, const struct ups_arch *a, enum ups_role r, int i,
                            int j, int k, int is_bias)
{
    char p[80];
    ups_key(a, r, i, j, k, p, sizeof(p));
    return nn__w_get(w, "%s.%s", p, is_bias ? "bias" : "weight");
}

int ups_forward(struct patcher *p, const struct ups_arch *a, const struct tensor *x,
                struct tensor *out, struct err *e)
{
    struct dev *d = patcher_device(p);
    struct nn_w w;
    if (!d)
        return err_set(e, ERR_INVALID, "upscale: model is not loaded (call mm_load_models first)");
    if (x->ndim != 4 || out->ndim != 4 || x->shape[1] != a->in_ch || out->shape[1] != a->out_ch ||
        out->shape[0] != x->shape[0] || out->shape[2] != x->shape[2] * a->scale ||
        out->shape[3] != x->shape[3] * a->scale)
        return err_set(e, ERR_INVALID,
                       "upscale: bad shapes (x [B,%d,H,W] -> out [B,%d,%dH,%dW])", a->in_ch,
                       a->out_ch, a->scale, a->scale);
    tensor_profile_reset(); /* LATENTD_PROFILE=1: a table per forward, as the VAE's */
    nn__w_init(&w, p, "", e);
    int rc = a->kind == UPS_SRVGG ? ups__srvgg_forward(&w, a, d, x, out, e)
                                  : ups__esrgan_forward(&w, a, d, x, out, e);
    nn__w_release(&w);
    tensor_profile_print("upscale");
    return rc;
}

struct tile_ctx {
    struct patcher *p;
    const struct ups_arch *a;
};

static int tile_fn(void *ctx, const struct tensor *in, struct tensor *out, struct err *e)
{
    struct tile_ctx *c = ctx;
    return ups_forward(c->p, c->a, in, out, e);
}

int64_t ups_tiled_steps(int64_t b, int64_t h, int64_t w, int tile, int overlap)
{
    return b * nn__tiled_steps(h, w, tile, tile, overlap);
}

int ups_forward_tiled(struct patcher *p, const struct ups_arch *a, const struct tensor *x,
                      float *out, int tile, int overlap, int (*tile_done)(void *user), void *user,
                      struct err *e)
{
    struct dev *d = patcher_device(p);
    struct tensor *xb = NULL;
    int rc = 0;
    if (!d)
        return err_set(e, ERR_INVALID, "upscale: model is not loaded (call mm_load_models first)");
    if (tile < 8 || overlap < 0 || overlap >= tile)
        return err_set(e, ERR_INVALID, "upscale: tile %d / overlap %d out of range", tile, overlap);
    if (x->ndim != 4 || x->shape[1] != a->in_ch)
        return err_set(e, ERR_INVALID, "upscale: the input must be [B,%d,H,W]", a->in_ch);
    struct tile_ctx c = {.p = p, .a = a};
    struct nn_tiler t = {.d = d, .fn = tile_fn, .ctx = &c, .out_ch = a->out_ch, .num = a->scale,
                         .den = 1, .tile_done = tile_done, .user = user};
    size_t per = (size_t)a->out_ch * (size_t)(x->shape[2] * a->scale) *
                 (size_t)(x->shape[3] * a->scale);
    for (int64_t b = 0; b < x->shape[0]; b++) {
        float *acc = out + per * (size_t)b;
        memset(acc, 0, per * sizeof(float));
        NN_TRY(tensor_slice(x, 0, b, 1, &xb, e));
        NN_TRY(nn__tiled_pass(&t, xb, tile, tile, overlap, acc, e));
        tensor_free(xb);
        xb = NULL;
    }
fail:
    tensor_free(xb);
    return rc;
}

/* Floats held at the peak of one forward, by walking the allocations of the passes. */
size_t ups_plan_bytes(const struct ups_arch *a, int64_t h, int64_t w)
{
    double px = (double)h * w, nf = a->nf, peak;
    double in = a->in_ch * px, outp = a->out_ch * px * a->scale * a->scale;
    if (a->kind == UPS_SRVGG) {
        double s2 = (double)a->scale * a->scale;
        /* (x and out throughout) h, t; then h, the last conv; then base. */
        peak = in + outp + fmax(2 * nf * px, fmax(nf * px + outp, a->in_ch * px * s2));
    } else {
        int64_t s = a->shuffle;
        double lp = (double)((h + s - 1) / s) * ((w + s - 1) / s);
        /* x, out, unshuffled x, fea; then fea, cat, t5, h (the trunk). */
        peak = in + outp + (double)a->in_ch * s * s * lp + nf * lp;
        peak = fmax(peak, in + outp + (nf + (nf + 4.0 * a->gc) + 2 * nf) * lp);
        for (int u = 0; u < a->n_up; u++) {
            peak = fmax(peak, in + outp + nf * lp * 9); /* fea, 4x upsampled, conv out */
            lp *= 4;
        }
        /* fea, hr out, (when cropping) the uncropped last conv. */
        peak = fmax(peak, in + outp + 2 * nf * lp + (s > 1 ? a->out_ch * lp : 0));
    }
    return (size_t)(peak * 4.0) + ((size_t)1 << 20);
}

double ups_flops(const struct ups_arch *a, int64_t h, int64_t w)
{
    double px = (double)h * w, nf = a->nf, c9 = 2.0 * 9.0, fl = 0;
    if (a->kind == UPS_SRVGG) {
        fl = c9 * a->in_ch * nf + a->nb * c9 * nf * nf + c9 * nf * a->out_ch * a->scale * a->scale;
        return fl * px;
    }
    int64_t s = a->shuffle;
    double lp = (double)((h + s - 1) / s) * ((w + s - 1) / s), rdb = 0;
    for (int k = 1; k <= 5; k++)
        rdb += c9 * (nf + (k - 1) * a->gc) * (k == 5 ? nf : a->gc);
    fl = lp * (c9 * a->in_ch * s * s * nf + 3.0 * a->nb * rdb + c9 * nf * nf);
    for (int u = 0; u < a->n_up; u++) {
        lp *= 4;
        fl += lp * c9 * nf * nf;
    }
    return fl + lp * (c9 * nf * nf + c9 * nf * a->out_ch);
}
