/*
 * sd_backend — MODEL / CLIP / VAE payloads over models/ (unet.h, text_encoder.h, vae.h) and the
 * memory manager (see sd_backend.h).
 */
#include "sd_backend.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "alloc.h"
#include "buf.h"
#include "clip_tokenizer.h"
#include "hypernetwork.h"
#include "memmgr.h"
#include "sd_control.h"
#include "sd_model_patches.h"
#include "sd_gligen.h"
#include "text_encoder.h"
#include "unet.h"
#include "vae.h"
#include "tensor.h"

static int no_mm(struct err *e)
{
    return err_set(e, ERR_INVALID, "no memory manager: models cannot run here");
}

/* A new device tensor filled from host floats (data NULL: left undefined). */
static int dev_tensor(struct dev *d, int ndim, const int64_t *shape, const float *data,
                      struct tensor **out, struct err *e)
{
    int rc = tensor_new(d, TENSOR_F32, ndim, shape, out, e);
    if (rc < 0)
        return rc;
    if (data && (rc = tensor_write_f32(*out, data, tensor_numel(*out), e)) < 0) {
        tensor_free(*out);
        *out = NULL;
    }
    return rc;
}

/*
 * After a model call: its weights were checked at each layer's acquire, but on the
 * CPU the last layers compute straight from the mapped file after that. A file
 * rewritten or truncated meanwhile must fail the node, not return its numbers.
 */
static int vouch(const struct patcher *p, struct err *e)
{
    return patcher_model_check(patcher_model_of(p), e);
}

/* Load one model for a node with `activation` bytes of activations. */
static int load_one(struct mm *mm, struct patcher *p, size_t activation, struct mm_report *rep,
                    struct err *e)
{
    struct mm_request req = {.n_models = 1, .activation_bytes = activation};
    req.models[0] = p;
    return mm_load_models(mm, &req, rep, e);
}

/* ---- MODEL: the UNet ---- */

struct unet_impl {
    struct patcher *p;          /* owned reference */
    struct model_config cfg;
    struct mm_report rep;       /* of the current sampling node */
    const struct sampling_discrete *ms; /* borrowed from the sd_model that owns this */
    struct unet_freeu freeu[SD_MODEL_MAX_FREEU]; /* output-block patches, in order */
    int n_freeu;
    struct sd_gligen_run *gligen_run; /* the current call's GLIGEN objects, or NULL */
    struct sd_model_patches *patches; /* owned or NULL: attention patches */
    const struct sd_call *call;       /* borrowed: the sampler's options for this call */
};

static int unet_attn1_tiles(void *user, const struct unet_attn1_site *s,
                            struct unet_attn1_tiles *t, struct err *e)
{
    return sd_call_attn1_tiles(((struct unet_impl *)user)->call, s, t, e);
}

static int unet_attn1_scores(void *user, const struct unet_attn1_site *s, const struct tensor *q,
                             const struct tensor *k, struct err *e)
{
    return sd_call_attn1_scores(((struct unet_impl *)user)->call, s, q, k, e);
}

/* The output_block_patch list: each FreeU in the order the nodes added them. */
static int unet_output_patches(void *user, int i, struct tensor *h, struct tensor *hsp,
                               struct err *e)
{
    struct unet_impl *u = user;
    int rc = 0;
    for (int k = 0; k < u->n_freeu && rc == 0; k++)
        rc = unet_freeu_output_block(&u->freeu[k], i, h, hsp, e);
    return rc;
}

/*
 * The hypernetworks' attn1 / attn2 patch (ComfyUI's hypernetwork_patch, in the order the
 * nodes added them): k_in += m0(k_in) * strength, v_in += m1(v_in) * strength for the
 * hypernetworks with modules of this width, on host copies of the rows (the modules are
 * a few small Linears per token).
 */
static int unet_attn_kv(void *user, int self_attn, struct tensor *k_in, struct tensor *v_in,
                        struct err *e)
{
    (void)self_attn; /* the same patch on both, keyed by width */
    const struct sd_model_patches *mp = ((struct unet_impl *)user)->patches;
    int64_t rows = k_in->shape[0] * k_in->shape[1], width = k_in->shape[2], n = rows * width;
    int any = 0;
    for (int i = 0; i < mp->n_hn; i++) {
        int nd = 0;
        const int *dims = hypernetwork_dims(mp->hn[i], &nd);
        for (int j = 0; j < nd; j++)
            any |= dims[j] == width;
    }
    if (!any)
        return 0;
    float *buf;
    int rc = xtry_malloc((size_t)n * 2 * sizeof(float), (void **)&buf, e);
    if (rc < 0)
        return rc;
    float *kb = buf, *vb = buf + n;
    if ((rc = tensor_read_f32(k_in, kb, n, e)) == 0 && (rc = tensor_read_f32(v_in, vb, n, e)) == 0) {
        for (int i = 0; i < mp->n_hn; i++) {
            hypernetwork_apply(mp->hn[i], (int)width, 0, mp->hn_strength[i], kb, rows, kb);
            hypernetwork_apply(mp->hn[i], (int)width, 1, mp->hn_strength[i], vb, rows, vb);
        }
        if ((rc = tensor_write_f32(k_in, kb, n, e)) == 0)
            rc = tensor_write_f32(v_in, vb, n, e);
    }
    xfree(buf);
    return rc;
}

/* The middle_patch of the current call: GLIGEN's fuser of transformer st. */
static int unet_middle_patch(void *user, int st, struct tensor *x, struct err *e)
{
    struct unet_impl *u = user;
    return sd_gligen_run_middle(u->gligen_run, st, x, e);
}

/*
 * The ControlNets' x: a concat-conditioned UNet's input without its c_concat (ComfyUI
 * gives a ControlNet x_noisy, the 4 latent channels). x itself otherwise, borrowed;
 * *own is what the caller frees.
 */
static int control_x(const struct tensor *x, const float *x_in, int latent_ch,
                     const struct tensor **out, struct tensor **own, struct err *e)
{
    int64_t B = x->shape[0], C = x->shape[1], plane = x->shape[2] * x->shape[3];
    *out = x;
    *own = NULL;
    if (C == latent_ch)
        return 0;
    float *v = xmalloc((size_t)(B * latent_ch * plane) * sizeof *v);
    for (int64_t b = 0; b < B; b++)
        memcpy(v + b * latent_ch * plane, x_in + b * C * plane,
               (size_t)(latent_ch * plane) * sizeof *v);
    int rc = dev_tensor(tensor_dev(x), 4,
                        (const int64_t[]){B, latent_ch, x->shape[2], x->shape[3]}, v, own, e);
    xfree(v);
    *out = *own;
    return rc;
}

/* The residuals of `control` for this call, then the UNet with them. */
static int unet_eval_with(struct unet_impl *u, const struct tensor *x,
                          const struct tensor *x_control, const float *ts,
                          const struct tensor *c, const struct tensor *y,
                          const struct sd_control *control, float sigma, int per_batch,
                          struct tensor *eps, struct err *e)
{
    struct controlnet_out co;
    struct unet_control uc;
    int rc = 0;
    memset(&co, 0, sizeof(co));
    if (control && (rc = sd_control_eval(control, u->ms, sigma, x_control, ts, c, y,
                                         per_batch, &co, e)) < 0)
        goto out;
    controlnet_out_view(&co, &uc);
    for (const struct sd_control *k = control; k && rc == 0; k = k->prev)
        rc = vouch(sd_control_patcher(k), e);
    struct unet_patches up = {.output_block = unet_output_patches, .user = u};
    if (u->gligen_run)
        up.middle = unet_middle_patch;
    int attn1 = u->call && u->call->patches == u->patches && sd_call_has_attn1(u->call);
    if (attn1) {
        up.attn1_tiles = unet_attn1_tiles;
        up.attn1_scores = unet_attn1_scores;
    }
    int kv = u->patches && u->patches->n_hn > 0; /* a MODEL patch: every call */
    if (kv)
        up.attn_kv = unet_attn_kv;
    if (rc == 0 && (rc = unet_eval_patched(u->p, &u->cfg.unet, x, ts, c, y,
                                           control ? &uc : NULL,
                                           u->n_freeu || u->gligen_run || attn1 || kv ? &up
                                                                                      : NULL,
                                           eps, e)) == 0)
        rc = vouch(u->p, e);
out:
    controlnet_out_release(&co);
    return rc;
}

static int unet_apply_control(void *impl, const float *x_in, int batch, int h, int w,
                              const float *ts, const float *ctx, int tokens, int dim,
                              const float *y_in, int adm_dim, const struct sd_control *control,
                              const struct sd_gligen *gligen, float sigma, int per_batch,
                              float *eps_out, struct err *e)
{
    struct unet_impl *u = impl;
    struct sd_gligen_run run = {0};
    struct dev *d = patcher_device(u->p);
    struct tensor *x = NULL, *c = NULL, *y = NULL, *eps = NULL, *xc = NULL;
    const struct tensor *xcn = NULL;
    /* x_in carries the c_concat channels of an inpainting / ip2p UNet (sd_types.h) */
    int64_t xs[4] = {batch, u->cfg.unet.in_ch, h, w}, es[4] = {batch, u->cfg.unet.out_ch, h, w};
    int64_t cs[3] = {batch, tokens, dim}, ys[2] = {batch, adm_dim};
    int rc;
    if ((rc = dev_tensor(d, 4, xs, x_in, &x, e)) < 0 ||
        (rc = dev_tensor(d, 3, cs, ctx, &c, e)) < 0 ||
        (y_in && (rc = dev_tensor(d, 2, ys, y_in, &y, e)) < 0) ||
        (rc = dev_tensor(d, 4, es, NULL, &eps, e)) < 0 ||
        (control && (rc = control_x(x, x_in, u->cfg.unet.out_ch, &xcn, &xc, e)) < 0))
        goto out;
    /* Gligen.set_position for this call's x: its size (an area's crop) and batch */
    if (gligen && ((rc = sd_gligen_run_begin(gligen, batch, h, w, &run, e)) < 0 ||
                   (rc = vouch(gligen->g->p, e)) < 0))
        goto out;
    u->gligen_run = gligen ? &run : NULL;
    rc = unet_eval_with(u, x, xcn, ts, c, y, control, sigma, per_batch, eps, e);
    u->gligen_run = NULL;
    if (rc < 0 || (gligen && (rc = vouch(gligen->g->p, e)) < 0))
        goto out;
    rc = tensor_read_f32(eps, eps_out, tensor_numel(eps), e);
out:
    sd_gligen_run_release(&run);
    tensor_free(xc);
    tensor_free(x);
    tensor_free(c);
    tensor_free(y);
    tensor_free(eps);
    return rc;
}

static int unet_apply_y(void *impl, const float *x_in, int batch, int h, int w, const float *ts,
                        const float *ctx, int tokens, int dim, const float *y_in, int adm_dim,
                        float *eps_out, struct err *e)
{
    return unet_apply_control(impl, x_in, batch, h, w, ts, ctx, tokens, dim, y_in, adm_dim, NULL,
                              NULL, 0.0f, batch, eps_out, e);
}

static int unet_apply(void *impl, const float *x_in, int batch, int h, int w, const float *ts,
                      const float *ctx, int tokens, int dim, float *eps_out, struct err *e)
{
    return unet_apply_y(impl, x_in, batch, h, w, ts, ctx, tokens, dim, NULL, 0, eps_out, e);
}

/* The UNet's own peak plus the x, context and eps tensors of one call. */
static size_t unet_call_bytes(const struct unet_impl *u, int max_batch, int h, int w,
                              int max_tokens)
{
    size_t io =
        (size_t)max_batch *
        ((size_t)(u->cfg.unet.in_ch + u->cfg.unet.out_ch) * h * w +
         (size_t)max_tokens * u->cfg.unet.ctx_dim + u->cfg.unet.adm_in) * 4;
    return unet_plan_bytes(&u->cfg.unet, max_batch, h, w, max_tokens) + io;
}

static int unet_prepare(void *impl, struct mm *mm, int max_batch, int h, int w, int max_tokens,
                        struct err *e)
{
    struct unet_impl *u = impl;
    if (!mm)
        return no_mm(e);
    return load_one(mm, u->p, unet_call_bytes(u, max_batch, h, w, max_tokens), &u->rep, e);
}

/*
 * Add the GLIGEN models of the entries to req (ComfyUI's get_additional_models: the
 * conds' "gligen" models load with the UNet), each checked against the UNet; *bytes
 * gets the largest one's work in a call (position net, the widest fuser step).
 */
static int gligen_models(const struct unet_impl *u, struct mm_request *req, int max_batch,
                         int h, int w, struct sd_gligen *const *gligens, int n, size_t *bytes,
                         struct err *e)
{
    *bytes = 0;
    for (int i = 0; i < n; i++) {
        struct gligen *g = gligens[i]->g;
        int rc, seen = 0;
        if ((rc = gligen_fits(g, &u->cfg.unet, 0, e)) < 0)
            return rc;
        for (int j = 0; j < req->n_models; j++)
            seen |= req->models[j] == g->p;
        if (seen)
            continue;
        if (req->n_models == MM_MAX_MODELS)
            return err_set(e, ERR_INVALID,
                           "too many ControlNet and GLIGEN models in one sampling (at most %d)",
                           MM_MAX_MODELS - 1);
        req->models[req->n_models++] = g->p;
        /* the first level's transformers have the most tokens x width */
        size_t b = gligen_plan_bytes(g, max_batch, h * w, u->cfg.unet.model_ch * u->cfg.unet.mult[0]);
        *bytes = b > *bytes ? b : *bytes;
    }
    return 0;
}

/*
 * Load the UNet and every ControlNet of the chains together (ComfyUI's get_models):
 * the plan holds the UNet's call, the residuals it is given and the largest
 * ControlNet's own peak (they run one after the other), and the GLIGEN models' work.
 */
static int unet_prepare_control(void *impl, struct mm *mm, int max_batch, int h, int w,
                                int max_tokens, struct sd_control *const *controls,
                                int n_controls, struct sd_gligen *const *gligens, int n_gligens,
                                struct err *e)
{
    struct unet_impl *u = impl;
    struct mm_request req = {.n_models = 1};
    size_t cn_peak = 0;
    int rc;
    if (!mm)
        return no_mm(e);
    req.models[0] = u->p;
    for (int i = 0; i < n_controls; i++) {
        for (const struct sd_control *k = controls[i]; k; k = k->prev) {
            int seen = 0;
            if ((rc = sd_control_prepare(k, u->p, &u->cfg, e)) < 0 ||
                (rc = sd_control_fits(k, &u->cfg, e)) < 0)
                return rc;
            for (int j = 0; j < req.n_models; j++)
                seen |= req.models[j] == sd_control_patcher(k);
            if (seen)
                continue;
            if (req.n_models == MM_MAX_MODELS)
                return err_set(e, ERR_INVALID, "too many ControlNets in one sampling (at most %d)",
                               MM_MAX_MODELS - 1);
            req.models[req.n_models++] = sd_control_patcher(k);
            size_t pb = sd_control_plan_bytes(k, max_batch, h, w, max_tokens);
            cn_peak = pb > cn_peak ? pb : cn_peak;
        }
    }
    /* two sets of residuals live while a chain merges; one while the UNet runs */
    size_t res = n_controls ? 2 * controlnet_out_bytes(&u->cfg.unet, max_batch, h, w) : 0;
    size_t unet = unet_call_bytes(u, max_batch, h, w, max_tokens), gl = 0;
    if ((rc = gligen_models(u, &req, max_batch, h, w, gligens, n_gligens, &gl, e)) < 0)
        return rc;
    req.activation_bytes = (unet > cn_peak ? unet : cn_peak) + res + gl;
    return mm_load_models(mm, &req, &u->rep, e);
}

static void unet_finish(void *impl, struct mm *mm)
{
    struct unet_impl *u = impl;
    if (mm)
        mm_node_end(mm, &u->rep);
}

static void unet_free(void *impl)
{
    struct unet_impl *u = impl;
    patcher_unref(u->p);
    sd_model_patches_free(u->patches);
    xfree(u);
}

static const struct sd_model_ops unet_ops = {
    .apply_eps = unet_apply,
    .apply_eps_y = unet_apply_y,
    .apply_eps_control = unet_apply_control,
    .prepare = unet_prepare,
    .prepare_control = unet_prepare_control,
    .finish = unet_finish,
    .free = unet_free,
};

struct sd_model *sd_unet_model_new(struct patcher *unet, const struct model_config *cfg)
{
    struct unet_impl *u = xcalloc(1, sizeof *u);
    u->p = unet;
    u->cfg = *cfg;
    struct sd_model *m = sd_model_new(&unet_ops, u);
    sd_model_set_family(m, model_family_get(cfg->family));
    if (cfg->zsnr) /* an SDXL v-pred file's "ztsnr" key */
        sampling_discrete_init_zsnr(&m->ms, m->family->sampling.linear_start,
                                    m->family->sampling.linear_end, 1);
    m->ms.prediction = cfg->prediction; /* SD2 768-v, SDXL "v_pred": v (family.h) */
    u->ms = &m->ms; /* the model owns u: it outlives this pointer */
    m->adm_dim = cfg->unet.adm_in;
    m->ctx_dim = cfg->unet.ctx_dim;
    int concat = model_family_concat(m->family, cfg->unet.in_ch);
    ASSERT(concat >= 0); /* checkpoint detection refused the others */
    m->concat = concat;
    return m;
}

struct patcher *sd_model_unet_patcher(const struct sd_model *m, struct model_config *cfg)
{
    if (!m || m->ops != &unet_ops)
        return NULL;
    const struct unet_impl *u = m->impl;
    if (cfg)
        *cfg = u->cfg;
    return u->p;
}

void sd_model_copy_patches(struct sd_model *dst, const struct sd_model *src)
{
    dst->cfg_fn = src->cfg_fn;
    dst->ms = src->ms; /* ModelSamplingDiscrete's object patch: schedule and type */
    if (dst->ops == &unet_ops && src->ops == &unet_ops) {
        struct unet_impl *d = dst->impl;
        const struct unet_impl *s = src->impl;
        memcpy(d->freeu, s->freeu, sizeof d->freeu);
        d->n_freeu = s->n_freeu;
        sd_model_patches_free(d->patches);
        d->patches = sd_model_patches_clone(s->patches);
    }
}

const struct sd_model_patches *sd_model_patches_of(const struct sd_model *m)
{
    if (!m || m->ops != &unet_ops)
        return NULL;
    return ((const struct unet_impl *)m->impl)->patches;
}

struct sd_model_patches *sd_model_patches_mut(struct sd_model *m)
{
    if (!m || m->ops != &unet_ops)
        return NULL;
    struct unet_impl *u = m->impl;
    if (!u->patches)
        u->patches = xcalloc(1, sizeof *u->patches);
    return u->patches;
}

void sd_model_set_call(const struct sd_model *m, const struct sd_call *call)
{
    if (m && m->ops == &unet_ops)
        ((struct unet_impl *)m->impl)->call = call;
}

struct sd_model *sd_model_clone(const struct sd_model *m)
{
    struct model_config cfg;
    struct patcher *p = sd_model_unet_patcher(m, &cfg);
    if (!p)
        return NULL;
    patcher_ref(p);
    struct sd_model *c = sd_unet_model_new(p, &cfg);
    c->max_batch = m->max_batch;
    sd_model_copy_patches(c, m);
    return c;
}

int sd_model_set_freeu(struct sd_model *m, const struct unet_freeu *f)
{
    if (!m || m->ops != &unet_ops)
        return ERR_INVALID;
    struct unet_impl *u = m->impl;
    if (u->n_freeu >= SD_MODEL_MAX_FREEU)
        return ERR_INVALID;
    u->freeu[u->n_freeu++] = *f;
    return 0;
}

/* ---- CLIP ---- */

struct sd_clip_shared {
    atomic_int refs;
    struct clip_tokenizer *tok; /* owned */
};

int sd_clip_new(struct patcher *clip, const struct model_config *cfg, struct sd_clip **out,
                struct err *e)
{
    struct clip_tokenizer *tok = NULL;
    int rc = clip_tokenizer_load(NULL, &tok, e);
    if (rc < 0) {
        patcher_unref(clip);
        return rc;
    }
    struct sd_clip *c = xcalloc(1, sizeof *c);
    c->p = clip;
    c->cfg = *cfg;
    c->clip_skip = -1;
    c->_shared = xcalloc(1, sizeof *c->_shared);
    atomic_init(&c->_shared->refs, 1);
    c->_shared->tok = tok;
    *out = c;
    return 0;
}

void sd_clip_set_embedding_dir(struct sd_clip *c, const char *models_dir)
{
    if (!models_dir)
        return;
    struct buf dir;
    buf_init(&dir);
    buf_printf(&dir, "%s/embeddings", models_dir);
    clip_tokenizer_set_embedding_dir(c->_shared->tok, dir.ptr);
    buf_release(&dir);
}

void sd_clip_set_second(struct sd_clip *c, struct patcher *p2)
{
    patcher_unref(c->p2);
    c->p2 = p2;
}

struct sd_clip *sd_clip_clone(const struct sd_clip *src)
{
    struct sd_clip *c = xcalloc(1, sizeof *c);
    *c = *src;
    patcher_ref(c->p);
    if (c->p2)
        patcher_ref(c->p2);
    atomic_fetch_add(&c->_shared->refs, 1);
    return c;
}

void sd_clip_free(struct sd_clip *c)
{
    if (!c)
        return;
    patcher_unref(c->p);
    patcher_unref(c->p2);
    if (atomic_fetch_sub(&c->_shared->refs, 1) == 1) {
        clip_tokenizer_free(c->_shared->tok);
        xfree(c->_shared);
    }
    xfree(c);
}

static void clip_obj_free(void *p)
{
    sd_clip_free(p);
}

struct value *sd_clip_value(struct sd_clip *c)
{
    return value_new_object("CLIP", c, clip_obj_free);
}

const struct sd_clip *sd_clip_of(const struct value *v)
{
    if (!v || v->kind != VALUE_OBJECT || v->obj_free != clip_obj_free)
        return NULL;
    return v->obj;
}

/* Encoder i's output for tk, with the family's conditioning-builder settings. */
static int text_encode_one(const struct sd_clip *clip, int i, const struct clip_tokens *tk,
                           float **cond, float **pooled, struct err *e)
{
    const struct model_family *f = model_family_get(clip->cfg.family);
    struct text_encode_opts o = {.layer = clip->clip_skip_set ? clip->clip_skip : f->text_layer,
                                 .norm_hidden = f->text_norm_hidden,
                                 .pad_zero = f->text_pad_zero[i]};
    struct patcher *p = i ? clip->p2 : clip->p;
    int rc = text_encode(p, &clip->cfg.text[i], model_prefix(&clip->cfg, MODEL_CLIP + i), tk, &o,
                         cond, pooled, NULL, e);
    return rc < 0 ? rc : vouch(p, e);
}

/*
 * cond [rows, w0 + w1] = the encoders' outputs side by side per token (CLIP-L's
 * features first, sdxl.md §4.5); both have the same rows for one token list.
 */
static float *concat_features(const float *a, int wa, const float *b, int wb, size_t rows)
{
    float *out = xmalloc(rows * (size_t)(wa + wb) * sizeof(float));
    for (size_t r = 0; r < rows; r++) {
        memcpy(out + r * (wa + wb), a + r * wa, (size_t)wa * sizeof(float));
        memcpy(out + r * (wa + wb) + wa, b + r * wb, (size_t)wb * sizeof(float));
    }
    return out;
}

/* Encode tk[i] with encoder i (one or two) into one conditioning entry (see
 * sd_clip_encode_text). The lists have the same chunk count. */
static int encode_tokens(const struct sd_clip *clip, struct mm *mm, const struct clip_tokens *tk[2],
                         struct sd_cond **out, struct err *e)
{
    struct mm_report rep;
    float *cond[2] = {NULL, NULL}, *pooled[2] = {NULL, NULL};
    int n_enc = clip->p2 ? 2 : 1, last = n_enc - 1;
    /* A weighted prompt also encodes the empty prompt (sd15.md §2.12): one more sequence. */
    struct mm_request req = {.n_models = n_enc};
    for (int i = 0; i < n_enc; i++) {
        req.models[i] = i ? clip->p2 : clip->p;
        size_t b = text_plan_bytes(&clip->cfg.text[i], tk[i]->n_chunks + tk[i]->has_weights);
        req.activation_bytes = b > req.activation_bytes ? b : req.activation_bytes;
    }
    int rc = mm_load_models(mm, &req, &rep, e);
    if (rc >= 0) {
        for (int i = 0; i < n_enc && rc >= 0; i++)
            rc = text_encode_one(clip, i, tk[i], &cond[i], i == last ? &pooled[i] : NULL, e);
        mm_node_end(mm, &rep);
    }
    if (rc >= 0) {
        size_t rows = (size_t)tk[0]->n_chunks * CLIP_CHUNK_LEN;
        int w0 = clip->cfg.text[0].width, w1 = n_enc > 1 ? clip->cfg.text[1].width : 0;
        const struct text_arch *pt = &clip->cfg.text[last];
        int pw = pt->proj_dim ? pt->proj_dim : pt->width;
        float *c = n_enc > 1 ? concat_features(cond[0], w0, cond[1], w1, rows) : cond[0];
        *out = sd_cond_new(c, 1, (int)rows, w0 + w1, pooled[last], pw);
        if (c != cond[0])
            xfree(c);
    }
    for (int i = 0; i < 2; i++) {
        xfree(cond[i]);
        xfree(pooled[i]);
    }
    return rc;
}

int sd_clip_encode_text(const struct sd_clip *clip, struct mm *mm, const char *text,
                        struct sd_cond **out, struct err *e)
{
    if (!mm)
        return no_mm(e);
    struct clip_tokens tk;
    clip_tokenize_prompt(clip->_shared->tok, text ? text : "", &tk);
    const struct clip_tokens *both[2] = {&tk, &tk};
    int rc = encode_tokens(clip, mm, both, out, e);
    clip_tokens_release(&tk);
    return rc;
}

int sd_clip_encode_sdxl(const struct sd_clip *clip, struct mm *mm, const char *text_g,
                        const char *text_l, const struct adm_sizes *sizes, struct sd_cond **out,
                        struct err *e)
{
    if (!mm)
        return no_mm(e);
    int refiner = clip->cfg.family == MODEL_FAMILY_SDXL_REFINER && !clip->p2;
    if (!refiner && (clip->cfg.family != MODEL_FAMILY_SDXL || !clip->p2))
        return err_set(e, ERR_INVALID,
                       "CLIPTextEncodeSDXL needs an SDXL CLIP (CLIP-L and bigG, or the refiner's "
                       "bigG); this one is %s's",
                       model_family_get(clip->cfg.family)->name);
    struct clip_tokens g, l;
    clip_tokenize_prompt(clip->_shared->tok, text_g ? text_g : "", &g);
    int rc;
    if (refiner) {
        /* ComfyUI's refiner CLIP has only clip_g: text_l is tokenized there and unused. */
        const struct clip_tokens *one[2] = {&g, &g};
        rc = encode_tokens(clip, mm, one, out, e);
    } else {
        clip_tokenize_prompt(clip->_shared->tok, text_l ? text_l : "", &l);
        /* The shorter list gets empty-prompt chunks (bigG's pads become 0 in the encoder). */
        int n = g.n_chunks > l.n_chunks ? g.n_chunks : l.n_chunks;
        clip_tokens_pad_chunks(&g, n);
        clip_tokens_pad_chunks(&l, n);
        const struct clip_tokens *both[2] = {&l, &g};
        rc = encode_tokens(clip, mm, both, out, e);
        clip_tokens_release(&l);
    }
    if (rc >= 0) {
        (*out)->entries[0].has_adm_sizes = 1;
        (*out)->entries[0].adm = *sizes;
    }
    clip_tokens_release(&g);
    return rc;
}

int sd_clip_encode_sdxl_refiner(const struct sd_clip *clip, struct mm *mm, const char *text,
                                double ascore, int width, int height, struct sd_cond **out,
                                struct err *e)
{
    if (!mm)
        return no_mm(e);
    if (clip->cfg.family != MODEL_FAMILY_SDXL && clip->cfg.family != MODEL_FAMILY_SDXL_REFINER)
        return err_set(e, ERR_INVALID,
                       "CLIPTextEncodeSDXLRefiner needs an SDXL refiner or SDXL CLIP (bigG); "
                       "this one is %s's",
                       model_family_get(clip->cfg.family)->name);
    int rc = sd_clip_encode_text(clip, mm, text, out, e);
    if (rc >= 0) {
        /* add_dict {aesthetic_score, width, height}: crops 0, targets = the size. */
        struct sd_cond_entry *en = &(*out)->entries[0];
        en->has_adm_sizes = 1;
        en->has_ascore = 1;
        en->adm = (struct adm_sizes){.width = width,
                                     .height = height,
                                     .target_width = width,
                                     .target_height = height,
                                     .aesthetic_score = ascore};
    }
    return rc;
}

/* ---- VAE ---- */

struct sd_vae *sd_vae_new(struct patcher *p, const struct model_config *cfg)
{
    struct sd_vae *v = xcalloc(1, sizeof *v);
    v->p = p;
    v->cfg = *cfg;
    return v;
}

void sd_vae_free(struct sd_vae *v)
{
    if (!v)
        return;
    patcher_unref(v->p);
    xfree(v);
}

static void vae_obj_free(void *p)
{
    sd_vae_free(p);
}

struct value *sd_vae_value(struct sd_vae *v)
{
    return value_new_object("VAE", v, vae_obj_free);
}

const struct sd_vae *sd_vae_of(const struct value *v)
{
    if (!v || v->kind != VALUE_OBJECT || v->obj_free != vae_obj_free)
        return NULL;
    return v->obj;
}

/*
 * Up-front check of a VAE call's host memory: `host_floats` of output and staging,
 * plus the activation plan when the model computes on a host device (cpu), where
 * activations take the same memory. Allocating does not touch pages (calloc) and
 * Linux overcommits, so each buffer alone passing is not enough: the sum must fit.
 */
static int host_check(struct mm *mm, size_t act_bytes, size_t host_floats, struct err *e)
{
    size_t bytes = host_floats > SIZE_MAX / 4 ? SIZE_MAX : host_floats * 4;
    if (dev_is_host(mm_device(mm)))
        bytes = bytes > SIZE_MAX - act_bytes ? SIZE_MAX : bytes + act_bytes;
    return alloc_host_check(bytes, e);
}

/*
 * Decode z [1, c, h, w] (host) into out [3, 8h, 8w] (host): tiled with tile /
 * overlap latent pixels when tile > 0, else whole with ComfyUI's 64/16 tiled
 * retry on device OOM (models/vae/vae.h does both).
 */
static int decode_one(const struct sd_vae *vae, const float *z, int64_t c, int64_t h, int64_t w,
                      int tile, int overlap, float *out, struct err *e)
{
    struct dev *d = patcher_device(vae->p);
    struct tensor *zt = NULL, *o = NULL;
    int64_t zs[4] = {1, c, h, w}, os[4] = {1, 3, 8 * h, 8 * w};
    int rc;
    if ((rc = dev_tensor(d, 4, zs, z, &zt, e)) >= 0 && (rc = dev_tensor(d, 4, os, NULL, &o, e)) >= 0) {
        if (tile > 0)
            rc = vae_decode_tiled(vae->p, &vae->cfg.vae, zt, o, tile, overlap, e);
        else
            rc = vae_decode_auto(vae->p, &vae->cfg.vae, zt, o, 64, 16, e);
        if (rc >= 0)
            rc = vouch(vae->p, e);
        if (rc >= 0)
            rc = tensor_read_f32(o, out, 3 * 64 * h * w, e);
    }
    tensor_free(zt);
    tensor_free(o);
    return rc;
}

int sd_vae_decode_latent(const struct sd_vae *vae, struct mm *mm, const struct sd_latent *lat,
                         int tile, int overlap, struct value **image, struct err *e)
{
    *image = NULL;
    if (!mm)
        return no_mm(e);
    if (lat->c != vae->cfg.vae.embed)
        return err_set(e, ERR_INVALID, "the latent has %lld channels; this VAE expects %d",
                       (long long)lat->c, vae->cfg.vae.embed);
    int64_t h = lat->h, w = lat->w, H = 8 * h, W = 8 * w;
    size_t per = (size_t)(lat->c * h * w), px = (size_t)(3 * H * W);
    size_t act = vae_plan_bytes(&vae->cfg.vae, 1, (int)h, (int)w) + (per + px) * 4;
    int64_t ishape[4] = {lat->b, H, W, 3};
    struct value *img = NULL;
    float *host = NULL;
    int rc;
    /* The image is 48 times the latent: check it, the staging copy and (on the cpu,
     * where they share the host) the activations together before loading anything. */
    if ((rc = host_check(mm, act, (size_t)lat->b * px + px, e)) < 0 ||
        (rc = value_try_new_tensor("IMAGE", 4, ishape, &img, e)) < 0 ||
        (rc = xtry_malloc(px * sizeof *host, (void **)&host, e)) < 0) {
        value_unref(img);
        return rc;
    }
    struct mm_report rep;
    if ((rc = load_one(mm, vae->p, act, &rep, e)) < 0) {
        value_unref(img);
        xfree(host);
        return rc;
    }
    for (int64_t b = 0; b < lat->b && rc >= 0; b++) {
        rc = decode_one(vae, lat->samples + b * per, lat->c, h, w, tile, overlap, host, e);
        if (rc >= 0) {
            /* [3, H, W] in ~[-1, 1] -> [H, W, 3] = clamp((v + 1) / 2, 0, 1) */
            float *dst = img->data + (size_t)b * px;
            for (int64_t c = 0; c < 3; c++)
                for (int64_t p = 0; p < H * W; p++) {
                    float v = (host[c * H * W + p] + 1.0f) / 2.0f;
                    v = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
                    if (isnan(v))
                        v = 0.0f;
                    dst[p * 3 + c] = v;
                }
        }
    }
    mm_node_end(mm, &rep);
    xfree(host);
    if (rc < 0) {
        value_unref(img);
        return rc;
    }
    *image = img;
    return 0;
}

/*
 * Encode img [3, H, W] in [-1, 1] (host; H, W multiples of 8) into out
 * [z, H/8, W/8]: tiled with tile / overlap pixels when tile > 0, else whole
 * with ComfyUI's 512/64 tiled retry on device OOM.
 */
static int encode_one(const struct sd_vae *vae, const float *img, int64_t H, int64_t W, int tile,
                      int overlap, float *out, struct err *e)
{
    struct dev *d = patcher_device(vae->p);
    int64_t zc = vae->cfg.vae.embed, is[4] = {1, 3, H, W}, ms[4] = {1, zc, H / 8, W / 8};
    struct tensor *t = NULL, *m = NULL;
    int rc;
    if ((rc = dev_tensor(d, 4, is, img, &t, e)) >= 0 && (rc = dev_tensor(d, 4, ms, NULL, &m, e)) >= 0) {
        if (tile > 0)
            rc = vae_encode_tiled(vae->p, &vae->cfg.vae, t, m, tile, overlap, e);
        else
            rc = vae_encode_auto(vae->p, &vae->cfg.vae, t, m, 512, 64, e);
        if (rc >= 0)
            rc = vouch(vae->p, e);
        if (rc >= 0)
            rc = tensor_read_f32(m, out, zc * (H / 8) * (W / 8), e);
    }
    tensor_free(t);
    tensor_free(m);
    return rc;
}

int sd_vae_encode_image(const struct sd_vae *vae, struct mm *mm, const struct value *image,
                        int tile, int overlap, struct sd_latent **out, struct err *e)
{
    *out = NULL;
    if (!mm)
        return no_mm(e);
    if (!image || image->kind != VALUE_TENSOR || image->ndim != 4 || image->shape[3] < 3)
        return err_set(e, ERR_INVALID, "pixels must be an IMAGE [B, H, W, 3]");
    int64_t B = image->shape[0], H0 = image->shape[1], W0 = image->shape[2], C = image->shape[3];
    /* vae_encode_crop_pixels: multiples of 8, offset (remainder) / 2 */
    int64_t H = H0 / 8 * 8, W = W0 / 8 * 8, oy = (H0 % 8) / 2, ox = (W0 % 8) / 2;
    if (H < 8 || W < 8)
        return err_set(e, ERR_INVALID, "image %lldx%lld is too small to encode", (long long)W0,
                       (long long)H0);
    int64_t h = H / 8, w = W / 8;
    size_t px = (size_t)(3 * H * W), per = (size_t)(vae->cfg.vae.embed * h * w);
    size_t act = vae_plan_bytes(&vae->cfg.vae, 1, (int)h, (int)w) + (px + per) * 4;
    struct sd_latent *lat = NULL;
    float *host = NULL;
    int rc;
    if ((rc = host_check(mm, act, (size_t)B * per + px, e)) < 0 ||
        (rc = sd_latent_try_new(B, vae->cfg.vae.embed, h, w, &lat, e)) < 0 ||
        (rc = xtry_malloc(px * sizeof *host, (void **)&host, e)) < 0) {
        sd_latent_free(lat);
        return rc;
    }
    struct mm_report rep;
    if ((rc = load_one(mm, vae->p, act, &rep, e)) < 0) {
        sd_latent_free(lat);
        xfree(host);
        return rc;
    }
    for (int64_t b = 0; b < B && rc >= 0; b++) {
        const float *src = image->data + (size_t)b * H0 * W0 * C;
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++)
                for (int64_t c = 0; c < 3; c++) {
                    float v = src[((y + oy) * W0 + (x + ox)) * C + c];
                    host[(c * H + y) * W + x] = v * 2.0f - 1.0f; /* process_input */
                }
        float *dst = lat->samples + (size_t)b * per;
        rc = encode_one(vae, host, H, W, tile, overlap, dst, e);
    }
    mm_node_end(mm, &rep);
    xfree(host);
    if (rc < 0) {
        sd_latent_free(lat);
        return rc;
    }
    *out = lat;
    return 0;
}
