/*
 * The ControlNet forward pass (see controlnet.h): the UNet's trunk walk
 * (unet_impl.h) with hooks for the hint, the zero convs and the middle block's conv;
 * the residuals' chaining and their planning figures.
 */
#include "controlnet.h"

#include <stdio.h>
#include <string.h>

#include "controlnet_impl.h"
#include "unet_impl.h"

struct cn_run {
    const struct controlnet *cn;
    const struct tensor *hint;
    int control_type; /* a Union's, or -1 */
    float strength;
    struct controlnet_out *out;
    struct dev *d;
};

/* input_hint_block: conv, SiLU, ..., conv (cldm.py); the 3rd, 5th and 7th stride 2. */
static int hint_encode(struct cn_run *r, struct nn_w *w, struct tensor **out, struct err *e)
{
    const struct tensor *h = r->hint;
    struct tensor *prev = NULL, *next = NULL;
    int rc = 0;
    for (int i = 0; i < CONTROLNET_HINT_CONVS; i++) {
        const struct tensor *cw, *cb;
        NN_W(cw, w, "input_hint_block.%d.weight", 2 * i);
        NN_W(cb, w, "input_hint_block.%d.bias", 2 * i);
        int s = i == 2 || i == 4 || i == 6 ? 2 : 1;
        struct tensor_conv2d_opts o = {
            .stride = s, .pad_top = 1, .pad_bottom = 1, .pad_left = 1, .pad_right = 1};
        int64_t ho, wo;
        tensor_conv2d_out_hw(&o, h->shape[2], h->shape[3], 3, 3, &ho, &wo);
        NN_TRY(nn__new(r->d, &next, e, 4, h->shape[0], cw->shape[0], ho, wo));
        NN_TRY(tensor_conv2d(next, h, cw, cb, &o, e));
        if (i < CONTROLNET_HINT_CONVS - 1)
            NN_TRY(tensor_silu(next, next, e));
        tensor_free(prev);
        prev = next;
        h = next;
        next = NULL;
    }
    *out = prev;
    return 0;
fail:
    tensor_free(prev);
    tensor_free(next);
    return rc;
}

/* A 1x1 zero conv of h, times the strength, into a new tensor. */
static int zero_conv(struct cn_run *r, struct nn_w *w, const char *name, const struct tensor *h,
                     struct tensor **out, struct err *e)
{
    const struct tensor *cw, *cb;
    int rc;
    *out = NULL;
    NN_W(cw, w, "%s.weight", name);
    NN_W(cb, w, "%s.bias", name);
    NN_TRY(tensor_new_like(h, TENSOR_F32, out, e));
    NN_TRY(nn__conv1(*out, h, cw, cb, e));
    /* control_merge's x *= strength, in f32 */
    NN_TRY(tensor_scale(*out, *out, r->strength, e));
    return 0;
fail:
    tensor_free(*out);
    *out = NULL;
    return rc;
}

static int on_skip(void *user, struct nn_w *w, int i, struct tensor *h, struct err *e)
{
    struct cn_run *r = user;
    char name[32];
    int rc;
    if (i >= UNET_MAX_BLOCKS)
        return err_set(e, ERR_INVALID, "controlnet: too many input blocks");
    if (i == 0) { /* h += guided_hint, before its zero conv and the next block */
        struct tensor *g = NULL;
        if ((rc = hint_encode(r, w, &g, e)) < 0)
            return rc;
        if (r->cn->union_types && r->control_type >= 0 &&
            (rc = controlnet__union_merge(w, r->d, r->control_type, g, e)) < 0) {
            tensor_free(g);
            return rc;
        }
        if (!tensor_same_shape(g, h))
            rc = err_set(e, ERR_INVALID,
                         "controlnet: the hint encodes to %lldx%lld, the latent is %lldx%lld",
                         (long long)g->shape[2], (long long)g->shape[3], (long long)h->shape[2],
                         (long long)h->shape[3]);
        else
            rc = tensor_add(h, h, g, e);
        tensor_free(g);
        if (rc < 0)
            return rc;
    }
    snprintf(name, sizeof(name), "zero_convs.%d.0", i);
    if ((rc = zero_conv(r, w, name, h, &r->out->output[i], e)) < 0)
        return rc;
    r->out->n_output = i + 1;
    return 0;
}

static int on_middle(void *user, struct nn_w *w, struct tensor *h, struct err *e)
{
    struct cn_run *r = user;
    return zero_conv(r, w, "middle_block_out.0", h, &r->out->middle, e);
}

static int on_temb(void *user, struct nn_w *w, struct tensor *temb, struct err *e)
{
    struct cn_run *r = user;
    return controlnet__union_add_embedding(w, r->d, r->cn->union_types, r->control_type, temb,
                                           e);
}

int controlnet_eval_type(struct controlnet *cn, const struct tensor *x, const float *t,
                         const struct tensor *ctx, const struct tensor *y,
                         const struct tensor *hint, int control_type, float strength,
                         struct controlnet_out *out, struct err *e)
{
    int rc;
    memset(out, 0, sizeof(*out));
    if (hint->ndim != 4 || hint->shape[0] != x->shape[0] || hint->shape[1] != cn->hint_ch)
        return err_set(e, ERR_INVALID, "controlnet: the hint must be [%lld, %d, H, W]",
                       (long long)x->shape[0], cn->hint_ch);
    if (!cn->union_types)
        control_type = -1; /* a classic ControlNet takes no control_type argument */
    else if ((rc = controlnet__union_check_type(cn, control_type, e)) < 0)
        return rc;
    struct cn_run r = {.cn = cn, .hint = hint, .control_type = control_type,
                       .strength = strength, .out = out, .d = patcher_device(cn->p)};
    struct unet_hooks hooks = {.on_skip = on_skip, .on_middle = on_middle,
                               .on_temb = cn->union_types ? on_temb : NULL, .user = &r};
    return unet__eval(cn->p, &cn->cfg.unet, x, t, ctx, y, NULL, NULL, &hooks, NULL, NULL, e);
}

int controlnet_eval(struct controlnet *cn, const struct tensor *x, const float *t,
                    const struct tensor *ctx, const struct tensor *y, const struct tensor *hint,
                    float strength, struct controlnet_out *out, struct err *e)
{
    return controlnet_eval_type(cn, x, t, ctx, y, hint, -1, strength, out, e);
}

/* *cur = prev + *cur, or prev's tensor when cur has none (taken from prev). */
static int merge_one(struct tensor **cur, struct tensor **prev, struct err *e)
{
    if (!*prev)
        return 0;
    if (!*cur) {
        *cur = *prev;
        *prev = NULL;
        return 0;
    }
    if (!tensor_same_shape(*cur, *prev))
        return err_set(e, ERR_INVALID, "controlnet: chained ControlNets of different models");
    return tensor_add(*cur, *prev, *cur, e);
}

int controlnet_out_merge(struct controlnet_out *cur, struct controlnet_out *prev, struct err *e)
{
    int rc = merge_one(&cur->middle, &prev->middle, e);
    for (int i = 0; rc == 0 && i < prev->n_output; i++)
        rc = merge_one(&cur->output[i], &prev->output[i], e);
    for (int i = 0; rc == 0 && i < prev->n_input; i++)
        rc = merge_one(&cur->input[i], &prev->input[i], e);
    if (prev->n_output > cur->n_output)
        cur->n_output = prev->n_output;
    if (prev->n_input > cur->n_input)
        cur->n_input = prev->n_input;
    return rc;
}

void controlnet_out_view(const struct controlnet_out *o, struct unet_control *c)
{
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < o->n_output; i++)
        c->output[i] = o->output[i];
    c->n_output = o->n_output;
    for (int i = 0; i < o->n_input; i++)
        c->input[i] = o->input[i];
    c->n_input = o->n_input;
    c->middle = o->middle;
}

void controlnet_out_release(struct controlnet_out *o)
{
    for (int i = 0; i < o->n_output; i++)
        tensor_free(o->output[i]);
    for (int i = 0; i < o->n_input; i++)
        tensor_free(o->input[i]);
    tensor_free(o->middle);
    memset(o, 0, sizeof(*o));
}

size_t controlnet_out_bytes(const struct unet_arch *a, int b, int h, int w)
{
    struct unet_blocks bl;
    double px[UNET_MAX_LEVELS], sum = 0;
    int64_t hh = h, ww = w;
    unet_blocks_build(a, &bl);
    for (int l = 0; l < a->levels; l++) { /* halved, rounded up, per downsampler */
        px[l] = (double)hh * (double)ww;
        hh = (hh + 1) / 2;
        ww = (ww + 1) / 2;
    }
    for (int i = 0; i < bl.n; i++)
        if (bl.v[i].flags & (UNET_BLOCK_IN_END | UNET_BLOCK_MID_END))
            sum += (double)bl.v[i].co * px[bl.v[i].level];
    return (size_t)(sum * b * 4.0);
}

size_t controlnet_plan_bytes(const struct controlnet *cn, int b, int h, int w, int t)
{
    /* The hint encoder's peak: two neighbouring convs' outputs at 8x (16 channels each)
     * next to the hint itself; then the guided hint at the latent size. */
    size_t px8 = (size_t)64 * h * w;
    size_t hint = (size_t)b * 4 * (px8 * (size_t)(cn->hint_ch + 2 * controlnet_hint_widths[0]));
    return unet_plan_bytes(&cn->cfg.unet, b, h, w, t) + hint +
           controlnet_out_bytes(&cn->cfg.unet, b, h, w);
}
