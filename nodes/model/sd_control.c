/*
 * sd_control — the CONTROL_NET value and the control chain of a conditioning entry
 * (see sd_control.h).
 */
#include "sd_control.h"

#include <string.h>

#include "alloc.h"
#include "sd_upscale.h"

int sd_control_new(struct controlnet *cn, const struct value *image, float strength,
                   double start, double end, struct sd_control *prev, struct sd_control **out,
                   struct err *e)
{
    *out = NULL;
    if (!image || image->kind != VALUE_TENSOR || image->ndim != 4)
        return err_set(e, ERR_INVALID, "the ControlNet hint must be an IMAGE");
    int64_t b = image->shape[0], h = image->shape[1], w = image->shape[2], c = image->shape[3];
    if (b < 1 || h < 1 || w < 1 || c < cn->hint_ch)
        return err_set(e, ERR_INVALID,
                       "the ControlNet hint has %lld channels; this ControlNet takes %d",
                       (long long)c, cn->hint_ch);
    size_t plane = (size_t)h * (size_t)w, n = (size_t)b * (size_t)cn->hint_ch * plane;
    float *hint;
    int rc = xtry_malloc(n * sizeof *hint, (void **)&hint, e);
    if (rc < 0)
        return rc;
    /* image.movedim(-1, 1): channels first, keeping the ones the hint encoder takes */
    for (int64_t i = 0; i < b; i++)
        for (int ch = 0; ch < cn->hint_ch; ch++)
            for (size_t p = 0; p < plane; p++)
                hint[((size_t)i * cn->hint_ch + ch) * plane + p] =
                    image->data[((size_t)i * plane + p) * (size_t)c + ch];
    struct sd_control *s = xcalloc(1, sizeof *s);
    controlnet_ref(cn);
    s->cn = cn;
    s->hint = hint;
    s->hb = (int)b;
    s->hc = cn->hint_ch;
    s->hh = (int)h;
    s->hw = (int)w;
    s->strength = strength;
    s->start = start;
    s->end = end;
    if (prev)
        sd_control_ref(prev);
    s->prev = prev;
    atomic_init(&s->_refs, 1);
    *out = s;
    return 0;
}

void sd_control_ref(struct sd_control *c)
{
    atomic_fetch_add(&c->_refs, 1);
}

void sd_control_unref(struct sd_control *c)
{
    while (c && atomic_fetch_sub(&c->_refs, 1) == 1) { /* the chain, without recursion */
        struct sd_control *prev = c->prev;
        controlnet_unref(c->cn);
        xfree(c->hint);
        xfree(c);
        c = prev;
    }
}

double sd_control_percent_to_sigma(const struct sampling_discrete *ms, double percent)
{
    if (percent <= 0.0)
        return 999999999.9;
    if (percent >= 1.0)
        return 0.0;
    /* torch.tensor(percent * 999.0) is float32; .item() gives its double */
    return (double)sampling_discrete_sigma(ms, (float)((1.0 - percent) * 999.0));
}

int sd_control_active(const struct sd_control *c, const struct sampling_discrete *ms,
                      float sigma)
{
    /* t[0] > range[0] or t[0] < range[1], compared in float32 as torch does */
    float hi = (float)sd_control_percent_to_sigma(ms, c->start);
    float lo = (float)sd_control_percent_to_sigma(ms, c->end);
    return !(sigma > hi || sigma < lo);
}

/* The hint at the latent's 8x size (common_upscale nearest-exact, center crop), one
 * image per sample (broadcast_image_to), as a tensor on d. */
static int hint_tensor(const struct sd_control *c, struct dev *d, int64_t batch, int64_t h8,
                       int64_t w8, int per_batch, struct tensor **out, struct err *e)
{
    size_t img = (size_t)c->hc * (size_t)h8 * (size_t)w8;
    float *rs = NULL, *all = NULL;
    int rc;
    *out = NULL;
    if ((rc = xtry_malloc((size_t)c->hb * img * sizeof *rs, (void **)&rs, e)) < 0 ||
        (rc = xtry_malloc((size_t)batch * img * sizeof *all, (void **)&all, e)) < 0)
        goto out;
    if ((rc = sd_upscale(c->hint, c->hb, c->hc, c->hh, c->hw, "nearest-exact", 1, rs, h8, w8,
                         e)) < 0)
        goto out;
    for (int64_t i = 0; i < batch; i++) {
        int src = (int)((i % (per_batch > 0 ? per_batch : batch)) % c->hb);
        memcpy(all + (size_t)i * img, rs + (size_t)src * img, img * sizeof *all);
    }
    int64_t shape[4] = {batch, c->hc, h8, w8};
    if ((rc = tensor_new(d, TENSOR_F32, 4, shape, out, e)) < 0)
        goto out;
    if ((rc = tensor_write_f32(*out, all, (int64_t)((size_t)batch * img), e)) < 0) {
        tensor_free(*out);
        *out = NULL;
    }
out:
    xfree(rs);
    xfree(all);
    return rc;
}

int sd_control_eval(const struct sd_control *c, const struct sampling_discrete *ms, float sigma,
                    const struct tensor *x, const float *t, const struct tensor *ctx,
                    const struct tensor *y, int per_batch, struct controlnet_out *out,
                    struct err *e)
{
    struct controlnet_out prev;
    struct tensor *hint = NULL;
    int rc = 0;
    memset(out, 0, sizeof(*out));
    memset(&prev, 0, sizeof(prev));
    if (c->prev && (rc = sd_control_eval(c->prev, ms, sigma, x, t, ctx, y, per_batch, &prev,
                                         e)) < 0)
        goto out;
    if (!sd_control_active(c, ms, sigma)) { /* the previous ones' residuals, as they are */
        *out = prev;
        return 0;
    }
    if ((rc = hint_tensor(c, patcher_device(c->cn->p), x->shape[0], 8 * x->shape[2],
                          8 * x->shape[3], per_batch, &hint, e)) < 0)
        goto out;
    if ((rc = controlnet_eval(c->cn, x, t, ctx, c->cn->cfg.unet.adm_in ? y : NULL, hint,
                              c->strength, out, e)) < 0)
        goto out;
    rc = controlnet_out_merge(out, &prev, e);
out:
    controlnet_out_release(&prev);
    tensor_free(hint);
    return rc;
}

static void controlnet_obj_free(void *p)
{
    controlnet_unref(p);
}

struct value *sd_controlnet_value(struct controlnet *cn)
{
    return value_new_object("CONTROL_NET", cn, controlnet_obj_free);
}

struct controlnet *sd_controlnet_of(const struct value *v)
{
    if (!v || v->kind != VALUE_OBJECT || v->obj_free != controlnet_obj_free)
        return NULL;
    return v->obj;
}
