/*
 * The T2I-Adapter forward pass (see t2i_adapter.h): pixel unshuffle, the levels' blocks,
 * and the features placed in ComfyUI's input/middle lists. A level's output is both its
 * feature and the next level's input, so it is kept (not freed) once made.
 */
#include "t2i_adapter.h"

#include <stdio.h>
#include <string.h>

#include "nn.h"

struct t2i_run {
    struct t2i_adapter *t;
    struct nn_w w;
    struct dev *d;
    struct tensor *pool_w; /* [1, 1, 2, 2] of 1/4: average pooling as a conv */
    struct err *e;
};

/* out = conv k x k (stride s, padding k / 2) of x with name.weight / name.bias. */
static int conv(struct t2i_run *r, const char *name, const struct tensor *x, int s,
                struct tensor **out)
{
    const struct tensor *cw, *cb;
    struct err *e = r->e;
    int rc;
    *out = NULL;
    NN_W(cw, &r->w, "%s.weight", name);
    NN_W(cb, &r->w, "%s.bias", name);
    int k = (int)cw->shape[2];
    struct tensor_conv2d_opts o = {.stride = s, .pad_top = k / 2, .pad_bottom = k / 2,
                                   .pad_left = k / 2, .pad_right = k / 2};
    int64_t ho, wo;
    tensor_conv2d_out_hw(&o, x->shape[2], x->shape[3], k, k, &ho, &wo);
    NN_TRY(nn__new(r->d, out, e, 4, x->shape[0], cw->shape[0], ho, wo));
    NN_TRY(tensor_conv2d(*out, x, cw, cb, &o, e));
    return 0;
fail:
    tensor_free(*out);
    *out = NULL;
    return rc;
}

/*
 * adapter.py's Downsample without a conv: AvgPool2d(2, 2) with padding [h % 2, w % 2] on
 * both sides and count_include_pad (the padded zeros count in the mean). That is a 2x2
 * conv of weight 1/4 over each channel alone: the channels are folded into the batch.
 */
static int avg_pool(struct t2i_run *r, const struct tensor *x, struct tensor **out)
{
    struct err *e = r->e;
    struct tensor *x1 = NULL, *o1 = NULL;
    int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], w = x->shape[3], ho, wo;
    int ph = (int)(h % 2), pw = (int)(w % 2), rc;
    struct tensor_conv2d_opts o = {.stride = 2, .pad_top = ph, .pad_bottom = ph,
                                   .pad_left = pw, .pad_right = pw};
    *out = NULL;
    if (!r->pool_w) {
        NN_TRY(nn__new(r->d, &r->pool_w, e, 4, (int64_t)1, (int64_t)1, (int64_t)2, (int64_t)2));
        NN_TRY(tensor_fill(r->pool_w, 0.25f, e));
    }
    tensor_conv2d_out_hw(&o, h, w, 2, 2, &ho, &wo);
    NN_TRY(tensor_reshape(x, 4, (const int64_t[]){n * c, 1, h, w}, &x1, e));
    NN_TRY(nn__new(r->d, &o1, e, 4, n * c, (int64_t)1, ho, wo));
    NN_TRY(tensor_conv2d(o1, x1, r->pool_w, NULL, &o, e));
    NN_TRY(tensor_reshape(o1, 4, (const int64_t[]){n, c, ho, wo}, out, e));
fail:
    tensor_free(x1);
    tensor_free(o1); /* the view in *out keeps the storage */
    return rc;
}

/* x + block2(relu(block1(x))) (ResnetBlock's tail, ResnetBlock_light whole). */
static int res_tail(struct t2i_run *r, const char *p, const struct tensor *x,
                    struct tensor **out)
{
    char n[64];
    struct tensor *h = NULL;
    struct err *e = r->e;
    int rc;
    *out = NULL;
    snprintf(n, sizeof(n), "%s.block1", p);
    NN_TRY(conv(r, n, x, 1, &h));
    NN_TRY(tensor_leaky_relu(h, h, 0.0f, e)); /* nn.ReLU */
    snprintf(n, sizeof(n), "%s.block2", p);
    NN_TRY(conv(r, n, h, 1, out));
    NN_TRY(tensor_add(*out, *out, x, e));
fail:
    tensor_free(h);
    if (rc < 0) {
        tensor_free(*out);
        *out = NULL;
    }
    return rc;
}

/* *x = f(*x): the old one freed unless it is a kept feature (`keep`). */
static void step(struct tensor **x, struct tensor *next, const struct tensor *keep)
{
    if (*x != keep)
        tensor_free(*x);
    *x = next;
}

/* One full-adapter block: [downsample], [in_conv], the residual tail. */
static int full_block(struct t2i_run *r, int idx, int down, int width_change,
                      struct tensor **x, const struct tensor *keep)
{
    char n[48];
    struct tensor *y = NULL;
    int rc = 0;
    if (down) {
        snprintf(n, sizeof(n), "body.%d.down_opt.op", idx);
        rc = r->t->a.use_conv ? conv(r, n, *x, 2, &y) : avg_pool(r, *x, &y);
        if (rc < 0)
            return rc;
        step(x, y, keep);
    }
    if (width_change) {
        snprintf(n, sizeof(n), "body.%d.in_conv", idx);
        if ((rc = conv(r, n, *x, 1, &y)) < 0)
            return rc;
        step(x, y, keep);
    }
    snprintf(n, sizeof(n), "body.%d", idx);
    if ((rc = res_tail(r, n, *x, &y)) < 0)
        return rc;
    step(x, y, keep);
    return 0;
}

static int light_level(struct t2i_run *r, int i, struct tensor **x, const struct tensor *keep)
{
    char n[48];
    struct tensor *y = NULL;
    int rc;
    if (i > 0) {
        if ((rc = avg_pool(r, *x, &y)) < 0)
            return rc;
        step(x, y, keep);
    }
    snprintf(n, sizeof(n), "body.%d.in_conv", i);
    if ((rc = conv(r, n, *x, 1, &y)) < 0)
        return rc;
    step(x, y, keep);
    for (int k = 0; k < r->t->a.nums_rb; k++) {
        snprintf(n, sizeof(n), "body.%d.body.%d", i, k);
        if ((rc = res_tail(r, n, *x, &y)) < 0)
            return rc;
        step(x, y, NULL);
    }
    snprintf(n, sizeof(n), "body.%d.out_conv", i);
    if ((rc = conv(r, n, *x, 1, &y)) < 0)
        return rc;
    step(x, y, NULL);
    return 0;
}

/* Adapter.forward's list: per level [None, None, x] (SDXL: 3 Nones before level 0's,
 * 1 before level 1's and 3's, 2 before level 2's), then reversed and popped per input
 * block: block k gets entry k; SDXL's last entry is the middle's. */
static void place(const struct t2i_arch *a, struct tensor *feat[T2I_LEVELS],
                  struct controlnet_out *out)
{
    static const int sd[T2I_LEVELS] = {2, 5, 8, 11}, xl[T2I_LEVELS] = {3, 5, 8, 10};
    const int *at = a->xl ? xl : sd;
    out->n_input = a->xl ? 10 : 12;
    for (int l = 0; l < T2I_LEVELS; l++) {
        if (a->xl && l == T2I_LEVELS - 1)
            out->middle = feat[l];
        else
            out->input[at[l]] = feat[l];
        feat[l] = NULL;
    }
}

int t2i_adapter_eval(struct t2i_adapter *t, const struct tensor *hint,
                     struct controlnet_out *out, struct err *e)
{
    const struct t2i_arch *a = &t->a;
    struct t2i_run r = {.t = t, .d = patcher_device(t->p), .e = e};
    struct tensor *x = NULL, *y = NULL, *feat[T2I_LEVELS] = {NULL};
    int rc = 0, u = a->unshuffle;
    memset(out, 0, sizeof(*out));
    if (!r.d)
        return err_set(e, ERR_INVALID, "t2i adapter: model is not loaded");
    if (hint->ndim != 4 || hint->shape[1] != a->hint_ch || hint->shape[2] % u ||
        hint->shape[3] % u)
        return err_set(e, ERR_INVALID, "t2i adapter: the hint must be [B, %d, H, W] with H "
                       "and W multiples of %d", a->hint_ch, u);
    nn__w_init(&r.w, t->p, "", e);
    NN_TRY(nn__new(r.d, &x, e, 4, hint->shape[0], hint->shape[1] * u * u, hint->shape[2] / u,
                   hint->shape[3] / u));
    NN_TRY(tensor_pixel_unshuffle(x, hint, u, e));
    if (a->kind == T2I_FULL) {
        NN_TRY(conv(&r, "conv_in", x, 1, &y));
        step(&x, y, NULL);
    }
    for (int i = 0; i < T2I_LEVELS; i++) {
        const struct tensor *keep = i ? feat[i - 1] : NULL;
        if (a->kind == T2I_LIGHT) {
            NN_TRY(light_level(&r, i, &x, keep));
        } else {
            for (int j = 0; j < a->nums_rb; j++) {
                int first = j == 0 && i > 0;
                int down = a->xl ? first && i == 2 : first;
                int wide = (a->xl ? first && (i == 1 || i == 2) : first) &&
                           a->channels[i - 1] != a->channels[i];
                NN_TRY(full_block(&r, i * a->nums_rb + j, down, wide, &x, j ? NULL : keep));
            }
        }
        feat[i] = x; /* kept: the next level reads it as its input */
    }
    x = NULL;
    place(a, feat, out);
fail:
    nn__w_release(&r.w);
    if (x) { /* a failure: x may still be the last kept feature */
        int kept = 0;
        for (int l = 0; l < T2I_LEVELS; l++)
            kept |= feat[l] == x;
        if (!kept)
            tensor_free(x);
    }
    for (int l = 0; l < T2I_LEVELS; l++)
        tensor_free(feat[l]);
    tensor_free(r.pool_w);
    if (rc < 0)
        controlnet_out_release(out);
    return rc;
}

size_t t2i_adapter_plan_bytes(const struct t2i_adapter *t, int b, int h, int w)
{
    const struct t2i_arch *a = &t->a;
    double px = (double)(h / a->unshuffle + 1) * (double)(w / a->unshuffle + 1), sum = 0;
    /* the unshuffled input, three level-0-wide maps alive in a block, and the features
     * (each level at most the first's size) */
    sum += px * a->hint_ch * a->unshuffle * a->unshuffle + 3.0 * px * a->channels[0];
    for (int l = 0; l < T2I_LEVELS; l++)
        sum += px * a->channels[l];
    return (size_t)(sum * b * 4.0);
}
