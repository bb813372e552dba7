/*
 * sd_control — the CONTROL_NET value and the control chain of a conditioning entry
 * (see sd_control.h).
 */
#include "sd_control.h"

#include <string.h>

#include "alloc.h"
#include "family.h"
#include "log.h"
#include "sd_upscale.h"

/* ---- CONTROL_NET ---- */

struct sd_cnet *sd_cnet_new(struct controlnet *cn, struct t2i_adapter *t2i,
                            struct control_lora *lora, int control_type)
{
    struct sd_cnet *n = xcalloc(1, sizeof *n);
    if (cn)
        controlnet_ref(cn);
    if (t2i)
        t2i_adapter_ref(t2i);
    if (lora)
        control_lora_ref(lora);
    n->cn = cn;
    n->t2i = t2i;
    n->lora = lora;
    n->control_type = control_type;
    atomic_init(&n->_refs, 1);
    pthread_mutex_init(&n->_lock, NULL);
    return n;
}

static void cnet_ref(struct sd_cnet *n)
{
    atomic_fetch_add(&n->_refs, 1);
}

void sd_cnet_unref(struct sd_cnet *n)
{
    if (!n || atomic_fetch_sub(&n->_refs, 1) != 1)
        return;
    controlnet_unref(n->cn);
    t2i_adapter_unref(n->t2i);
    control_lora_unref(n->lora);
    controlnet_unref(n->_made);
    patcher_model_unref(n->_made_for);
    pthread_mutex_destroy(&n->_lock);
    xfree(n);
}

static void cnet_obj_free(void *p)
{
    sd_cnet_unref(p);
}

struct value *sd_cnet_value(struct sd_cnet *n)
{
    return value_new_object("CONTROL_NET", n, cnet_obj_free);
}

const struct sd_cnet *sd_cnet_of(const struct value *v)
{
    if (!v || v->kind != VALUE_OBJECT || v->obj_free != cnet_obj_free)
        return NULL;
    return v->obj;
}

static int hint_channels(const struct sd_cnet *n)
{
    return n->t2i ? n->t2i->a.hint_ch : n->lora ? n->lora->hint_ch : n->cn->hint_ch;
}

/* The image channels a control keeps: the hint encoder's, or all of them for a
 * 1-channel T2I-Adapter (it takes their mean after the resize). */
static int kept_channels(const struct sd_cnet *n, int c)
{
    if (n->t2i && n->t2i->a.hint_ch == 1)
        return c;
    return hint_channels(n);
}

/* The ControlNet a control runs: its own, or the one its Control-LoRA made (NULL before
 * sd_control_prepare). */
static struct controlnet *control_cn(const struct sd_control *c)
{
    struct sd_cnet *n = c->net;
    if (!n->lora)
        return n->cn;
    pthread_mutex_lock(&n->_lock);
    struct controlnet *cn = n->_made;
    pthread_mutex_unlock(&n->_lock);
    return cn;
}

/* ---- the control ---- */

int sd_control_new(const struct sd_cnet *net, const struct value *image, float strength,
                   double start, double end, struct sd_control *prev, struct sd_control **out,
                   struct err *e)
{
    *out = NULL;
    if (!image || image->kind != VALUE_TENSOR || image->ndim != 4)
        return err_set(e, ERR_INVALID, "the ControlNet hint must be an IMAGE");
    int64_t b = image->shape[0], h = image->shape[1], w = image->shape[2], c = image->shape[3];
    if (b < 1 || h < 1 || w < 1 || c < hint_channels(net))
        return err_set(e, ERR_INVALID,
                       "the ControlNet hint has %lld channels; this %s takes %d",
                       (long long)c, net->t2i ? "T2I-Adapter" : "ControlNet",
                       hint_channels(net));
    int hc = kept_channels(net, (int)c);
    size_t plane = (size_t)h * (size_t)w, n = (size_t)b * (size_t)hc * plane;
    float *hint;
    int rc = xtry_malloc(n * sizeof *hint, (void **)&hint, e);
    if (rc < 0)
        return rc;
    /* image.movedim(-1, 1): channels first, keeping the ones the model takes */
    for (int64_t i = 0; i < b; i++)
        for (int ch = 0; ch < hc; ch++)
            for (size_t p = 0; p < plane; p++)
                hint[((size_t)i * hc + ch) * plane + p] =
                    image->data[((size_t)i * plane + p) * (size_t)c + ch];
    struct sd_control *s = xcalloc(1, sizeof *s);
    cnet_ref((struct sd_cnet *)net); /* the refcount is not the value's content */
    s->net = (struct sd_cnet *)net;
    s->hint = hint;
    s->hb = (int)b;
    s->hc = hc;
    s->hh = (int)h;
    s->hw = (int)w;
    s->strength = strength;
    s->start = start;
    s->end = end;
    if (prev)
        sd_control_ref(prev);
    s->prev = prev;
    atomic_init(&s->_refs, 1);
    pthread_mutex_init(&s->_lock, NULL);
    *out = s;
    return 0;
}

void sd_control_ref(struct sd_control *c)
{
    atomic_fetch_add(&c->_refs, 1);
}

static void feats_release(struct sd_t2i_feats *f)
{
    for (int i = 0; i < f->n_input; i++)
        xfree(f->input[i]);
    xfree(f->middle);
    memset(f, 0, sizeof(*f));
}

void sd_control_unref(struct sd_control *c)
{
    while (c && atomic_fetch_sub(&c->_refs, 1) == 1) { /* the chain, without recursion */
        struct sd_control *prev = c->prev;
        sd_cnet_unref(c->net);
        xfree(c->hint);
        xfree(c->_resized);
        feats_release(&c->_feats);
        pthread_mutex_destroy(&c->_lock);
        xfree(c);
        c = prev;
    }
}

double sd_control_percent_to_sigma(const struct sampling_discrete *ms, double percent)
{
    return sampling_percent_to_sigma(ms, percent); /* discrete or continuous model sampling */
}

int sd_control_active(const struct sd_control *c, const struct sampling_discrete *ms,
                      float sigma)
{
    /* t[0] > range[0] or t[0] < range[1], compared in float32 as torch does */
    float hi = (float)sd_control_percent_to_sigma(ms, c->start);
    float lo = (float)sd_control_percent_to_sigma(ms, c->end);
    return !(sigma > hi || sigma < lo);
}

static atomic_long resize_count;

long sd_control_resize_count(void)
{
    return atomic_load(&resize_count);
}

/*
 * The hint resized to rh x rw (common_upscale, the control's method, center crop), and
 * for a 1-channel T2I-Adapter averaged over the channels (torch.mean(cond_hint, 1)):
 * c->_resized, made when the size changes (the caller holds c->_lock). Returns its
 * channel count, or < 0.
 */
static int resized_hint(struct sd_control *c, int rh, int rw, struct err *e)
{
    int oc = c->net->t2i && c->net->t2i->a.hint_ch == 1 ? 1 : c->hc;
    if (c->_resized && c->_rh == rh && c->_rw == rw)
        return oc;
    size_t plane = (size_t)rh * (size_t)rw, img = (size_t)c->hc * plane;
    float *rs = NULL;
    int rc;
    if ((rc = xtry_malloc((size_t)c->hb * img * sizeof *rs, (void **)&rs, e)) < 0)
        return rc;
    if ((rc = sd_upscale(c->hint, c->hb, c->hc, c->hh, c->hw, "nearest-exact", 1, rs, rh, rw,
                         e)) < 0) {
        xfree(rs);
        return rc;
    }
    if (oc == 1 && c->hc > 1) /* in place: image i's mean lands before its planes are read */
        for (int i = 0; i < c->hb; i++)
            for (size_t p = 0; p < plane; p++) {
                float s = 0;
                for (int ch = 0; ch < c->hc; ch++)
                    s += rs[(size_t)i * img + (size_t)ch * plane + p];
                rs[(size_t)i * plane + p] = s / (float)c->hc;
            }
    xfree(c->_resized);
    c->_resized = rs;
    c->_rh = rh;
    c->_rw = rw;
    c->_have_feats = 0; /* features of another size */
    feats_release(&c->_feats);
    atomic_fetch_add(&resize_count, 1);
    return oc;
}

/* Sample i of a batch takes hint image (i % per_batch) % hb (broadcast_image_to). */
static int hint_index(const struct sd_control *c, int64_t i, int64_t batch, int per_batch)
{
    return (int)((i % (per_batch > 0 ? per_batch : batch)) % c->hb);
}

/* rows [hb, n] of src -> a new [batch, shape...] tensor on d, times `scale`. */
static int batch_tensor(const struct sd_control *c, struct dev *d, const float *src,
                        const int64_t shape[4], int64_t batch, int per_batch, float scale,
                        struct tensor **out, struct err *e)
{
    size_t n = (size_t)shape[1] * (size_t)shape[2] * (size_t)shape[3];
    float *all = NULL;
    int rc;
    *out = NULL;
    if ((rc = xtry_malloc((size_t)batch * n * sizeof *all, (void **)&all, e)) < 0)
        return rc;
    for (int64_t i = 0; i < batch; i++) {
        const float *s = src + (size_t)hint_index(c, i, batch, per_batch) * n;
        float *o = all + (size_t)i * n;
        if (scale == 1.0f)
            memcpy(o, s, n * sizeof *o);
        else
            for (size_t k = 0; k < n; k++) /* control_merge's x *= strength, in f32 */
                o[k] = s[k] * scale;
    }
    int64_t sh[4] = {batch, shape[1], shape[2], shape[3]};
    if ((rc = tensor_new(d, TENSOR_F32, 4, sh, out, e)) == 0 &&
        (rc = tensor_write_f32(*out, all, (int64_t)((size_t)batch * n), e)) < 0) {
        tensor_free(*out);
        *out = NULL;
    }
    xfree(all);
    return rc;
}

/* control_merge's global_average_pooling: t [B, C, h, w] becomes
 * mean(t, dims (2, 3)) repeated over h x w (on the host: the residuals are small). */
static int spatial_mean(struct tensor *t, struct err *e)
{
    if (!t)
        return 0;
    size_t n = (size_t)tensor_numel(t), hw = (size_t)(t->shape[2] * t->shape[3]);
    float *v = NULL;
    int rc;
    if ((rc = xtry_malloc(n * sizeof *v, (void **)&v, e)) < 0)
        return rc;
    if ((rc = tensor_read_f32(t, v, (int64_t)n, e)) == 0) {
        for (size_t p = 0; p < n; p += hw) {
            double s = 0;
            for (size_t i = 0; i < hw; i++)
                s += v[p + i];
            for (size_t i = 0; i < hw; i++)
                v[p + i] = (float)(s / (double)hw);
        }
        rc = tensor_write_f32(t, v, (int64_t)n, e);
    }
    xfree(v);
    return rc;
}

/* A ControlNet's residuals: the hint at the latent's 8x size, one image per sample. */
static int eval_controlnet(struct sd_control *c, const struct tensor *x, const float *t,
                           const struct tensor *ctx, const struct tensor *y, int per_batch,
                           struct controlnet_out *out, struct err *e)
{
    struct controlnet *cn = control_cn(c);
    struct tensor *hint = NULL;
    int64_t h8 = 8 * x->shape[2], w8 = 8 * x->shape[3];
    int rc;
    if (!cn) /* a Control-LoRA the sampler did not prepare (sd_control_prepare) */
        return err_set(e, ERR_INVALID, "a Control-LoRA not made for this model");
    pthread_mutex_lock(&c->_lock);
    if ((rc = resized_hint(c, (int)h8, (int)w8, e)) >= 0)
        rc = batch_tensor(c, patcher_device(cn->p), c->_resized,
                          (const int64_t[]){c->hb, c->hc, h8, w8}, x->shape[0], per_batch,
                          1.0f, &hint, e);
    pthread_mutex_unlock(&c->_lock);
    if (rc < 0)
        return rc;
    rc = controlnet_eval_type(cn, x, t, ctx, cn->cfg.unet.adm_in ? y : NULL, hint,
                              c->net->control_type, c->strength, out, e);
    tensor_free(hint);
    if (rc == 0 && c->net->global_average_pooling) {
        for (int i = 0; rc == 0 && i < out->n_output; i++)
            rc = spatial_mean(out->output[i], e);
        if (rc == 0)
            rc = spatial_mean(out->middle, e);
    }
    return rc;
}

/* One feature tensor to host: *dst owned, shape copied. */
static int feat_to_host(const struct tensor *t, float **dst, int64_t shape[4], struct err *e)
{
    int rc;
    if ((rc = xtry_malloc((size_t)tensor_numel(t) * sizeof **dst, (void **)dst, e)) < 0)
        return rc;
    memcpy(shape, t->shape, 4 * sizeof *shape);
    return tensor_read_f32(t, *dst, tensor_numel(t), e);
}

/* The adapter's features for the hb hint images at the latent's size, once per size
 * (the caller holds c->_lock). */
static int t2i_features(struct sd_control *c, int64_t lh, int64_t lw, struct err *e)
{
    struct t2i_adapter *ta = c->net->t2i;
    struct controlnet_out fo;
    struct tensor *hint = NULL;
    int iw, ih, oc, rc;
    t2i_adapter_image_size(ta, (int)(8 * lw), (int)(8 * lh), &iw, &ih);
    if ((oc = resized_hint(c, ih, iw, e)) < 0)
        return oc;
    if (c->_have_feats)
        return 0;
    memset(&fo, 0, sizeof(fo));
    int64_t shape[4] = {c->hb, oc, ih, iw};
    if ((rc = tensor_new(patcher_device(ta->p), TENSOR_F32, 4, shape, &hint, e)) < 0 ||
        (rc = tensor_write_f32(hint, c->_resized, (int64_t)c->hb * oc * ih * iw, e)) < 0 ||
        (rc = t2i_adapter_eval(ta, hint, &fo, e)) < 0)
        goto out;
    struct sd_t2i_feats *f = &c->_feats;
    f->n_input = fo.n_input;
    for (int i = 0; i < fo.n_input && rc == 0; i++)
        if (fo.input[i])
            rc = feat_to_host(fo.input[i], &f->input[i], f->shape[i], e);
    if (rc == 0 && fo.middle)
        rc = feat_to_host(fo.middle, &f->middle, f->mshape, e);
    if (rc < 0)
        feats_release(f);
    else
        c->_have_feats = 1;
out:
    controlnet_out_release(&fo);
    tensor_free(hint);
    return rc;
}

/* A T2I-Adapter's residuals: its cached features, per sample, times the strength. */
static int eval_t2i(struct sd_control *c, const struct tensor *x, int per_batch,
                    struct controlnet_out *out, struct err *e)
{
    struct dev *d = patcher_device(c->net->t2i->p); /* loaded with the UNet */
    int rc;
    pthread_mutex_lock(&c->_lock);
    rc = t2i_features(c, x->shape[2], x->shape[3], e);
    const struct sd_t2i_feats *f = &c->_feats;
    for (int i = 0; rc == 0 && i < f->n_input; i++)
        if (f->input[i])
            rc = batch_tensor(c, d, f->input[i], f->shape[i], x->shape[0], per_batch,
                              c->strength, &out->input[i], e);
    if (rc == 0)
        out->n_input = f->n_input;
    if (rc == 0 && f->middle)
        rc = batch_tensor(c, d, f->middle, f->mshape, x->shape[0], per_batch, c->strength,
                          &out->middle, e);
    pthread_mutex_unlock(&c->_lock);
    return rc;
}

int sd_control_eval(const struct sd_control *cc, const struct sampling_discrete *ms,
                    float sigma, const struct tensor *x, const float *t,
                    const struct tensor *ctx, const struct tensor *y, int per_batch,
                    struct controlnet_out *out, struct err *e)
{
    /* the caches are the only state an eval changes, under the control's lock */
    struct sd_control *c = (struct sd_control *)cc;
    struct controlnet_out prev;
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
    rc = c->net->t2i ? eval_t2i(c, x, per_batch, out, e)
                     : eval_controlnet(c, x, t, ctx, y, per_batch, out, e);
    if (rc == 0)
        rc = controlnet_out_merge(out, &prev, e);
out:
    controlnet_out_release(&prev);
    return rc;
}

static int prepare_one(struct sd_cnet *n, struct patcher *unet, const struct model_config *cfg,
                       struct err *e)
{
    struct patcher_model *um = patcher_model_of(unet);
    struct controlnet *made = NULL;
    int rc = 0;
    pthread_mutex_lock(&n->_lock);
    if (n->_made_for != um) {
        if ((rc = control_lora_make(n->lora, um, cfg, TENSOR_F32, &made, e)) == 0) {
            controlnet_unref(n->_made);
            patcher_model_unref(n->_made_for);
            patcher_model_ref(um);
            n->_made = made;
            n->_made_for = um;
        }
    }
    pthread_mutex_unlock(&n->_lock);
    return rc;
}

int sd_control_prepare(const struct sd_control *c, struct patcher *unet,
                       const struct model_config *cfg, struct err *e)
{
    int rc = 0;
    for (; c && rc == 0; c = c->prev)
        if (c->net->lora)
            rc = prepare_one(c->net, unet, cfg, e);
    return rc;
}

struct patcher *sd_control_patcher(const struct sd_control *c)
{
    struct controlnet *cn = control_cn(c);
    return c->net->t2i ? c->net->t2i->p : cn ? cn->p : NULL;
}

/* A T2I-Adapter's features fit the UNet's input blocks: SDXL's for an ADM model with
 * three levels, SD's for four, at the level widths. */
static int t2i_fits(const struct t2i_adapter *t, const struct model_config *cfg,
                    struct err *e)
{
    const struct unet_arch *a = &cfg->unet;
    const char *mf = model_family_get(cfg->family)->name;
    int levels = t->a.xl ? 3 : 4, same = a->levels == levels;
    for (int l = 0; same && l < levels; l++)
        same = t->a.channels[l] == a->model_ch * a->mult[l];
    if (same && t->a.xl) /* the middle's feature */
        same = t->a.channels[3] == a->model_ch * a->mult[2];
    if (!same)
        return err_set(e, ERR_INVALID,
                       "this T2I-Adapter (%s, widths %d..%d) does not fit the %s model "
                       "(width %d, %d levels)",
                       t->a.xl ? "SDXL" : "SD1.5", t->a.channels[0], t->a.channels[3], mf,
                       a->model_ch, a->levels);
    return 0;
}

int sd_control_fits(const struct sd_control *c, const struct model_config *cfg,
                    struct err *e)
{
    if (c->net->t2i)
        return t2i_fits(c->net->t2i, cfg, e);
    const struct controlnet *cn = control_cn(c);
    if (!cn)
        return err_set(e, ERR_INVALID, "a Control-LoRA not made for this model");
    const struct unet_arch *a = &cfg->unet, *b = &cn->cfg.unet;
    const char *mf = model_family_get(cfg->family)->name;
    if (cn->cfg.family != cfg->family)
        return err_set(e, ERR_INVALID, "this ControlNet is for %s, the model is %s",
                       model_family_get(cn->cfg.family)->name, mf);
    int same = a->model_ch == b->model_ch && a->levels == b->levels &&
               b->in_ch == a->out_ch /* x_noisy: an inpaint UNet's concat is not its */ &&
               a->ctx_dim == b->ctx_dim && a->adm_in == b->adm_in;
    for (int l = 0; same && l < a->levels; l++)
        same = a->mult[l] == b->mult[l] && a->res_blocks[l] == b->res_blocks[l];
    if (!same)
        return err_set(e, ERR_INVALID,
                       "this ControlNet's widths (%d, context %d) differ from the %s model's "
                       "(%d, context %d)",
                       b->model_ch, b->ctx_dim, mf, a->model_ch, a->ctx_dim);
    return 0;
}

size_t sd_control_plan_bytes(const struct sd_control *c, int b, int h, int w, int t)
{
    if (c->net->t2i) /* the features of the hint images, or of the batch copies made */
        return t2i_adapter_plan_bytes(c->net->t2i, c->hb > b ? c->hb : b, 8 * h, 8 * w);
    return controlnet_plan_bytes(control_cn(c), b, h, w, t);
}
