/*
 * The UNet forward pass (sd15.md §3, sdxl.md §6): a walk of the block list (unet_arch.h).
 *
 * Each block (ResBlock, SpatialTransformer, down/upsampler) is one patcher layer;
 * a block's weights are fetched, used, and released before the next block's.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "nn.h"
#include "unet_attn1.h"
#include "unet_impl.h"

struct unet_ctx {
    const struct unet_arch *a;
    const struct tensor *y; /* ADM vector [B, adm_in], or NULL */
    struct nn_w w;
    struct dev *d;
    struct err *e;
    struct tensor *temb_silu; /* SiLU(temb) [B, TE]: every ResBlock adds a projection of it */
    const struct tensor *ctx; /* [B, T, ctx_dim] */
    struct model_probe *probe;
    const struct unet_control *control; /* residuals, or NULL */
    const struct unet_patches *patches; /* model patches, or NULL */
    const struct unet_hooks *hooks;     /* a ControlNet trunk's hooks, or NULL */
    int out_idx;                        /* output blocks entered so far */
    int in_idx;                         /* input blocks done so far */
    int st_idx;                         /* SpatialTransformers done so far */
    int64_t orig_h, orig_w;             /* x's size: the patches' original_shape */
};

/* h += a control residual (apply_control), after checking it fits. */
static int add_control(struct unet_ctx *u, struct tensor *h, const struct tensor *r,
                       const char *what, int i)
{
    if (!r)
        return 0;
    if (!tensor_same_shape(h, r))
        return err_set(u->e, ERR_INVALID,
                       "controlnet: %s residual %d is [%lld,%lld,%lld,%lld] but the unet's is "
                       "[%lld,%lld,%lld,%lld] (a ControlNet for another model?)",
                       what, i, (long long)r->shape[0], (long long)r->shape[1],
                       (long long)r->shape[2], (long long)r->shape[3], (long long)h->shape[0],
                       (long long)h->shape[1], (long long)h->shape[2], (long long)h->shape[3]);
    return tensor_add(h, h, r, u->e);
}

/* ResBlock (§3.3): x [B,Ci,H,W] -> *out [B,Co,H,W]. */
static int resblock(struct unet_ctx *u, const char *p, const struct tensor *x, struct tensor **out)
{
    struct err *e = u->e;
    const struct tensor *gn_w, *gn_b, *c1_w, *c1_b, *em_w, *em_b, *g2_w, *g2_b, *c2_w, *c2_b;
    struct tensor *h = NULL, *h2 = NULL, *emb = NULL, *emb4 = NULL, *skip = NULL;
    int rc;
    int64_t B = x->shape[0], Ci = x->shape[1], H = x->shape[2], W = x->shape[3];
    *out = NULL;
    NN_W(gn_w, &u->w, "%s.in_layers.0.weight", p);
    NN_W(gn_b, &u->w, "%s.in_layers.0.bias", p);
    NN_W(c1_w, &u->w, "%s.in_layers.2.weight", p);
    NN_W(c1_b, &u->w, "%s.in_layers.2.bias", p);
    NN_W(em_w, &u->w, "%s.emb_layers.1.weight", p);
    NN_W(em_b, &u->w, "%s.emb_layers.1.bias", p);
    NN_W(g2_w, &u->w, "%s.out_layers.0.weight", p);
    NN_W(g2_b, &u->w, "%s.out_layers.0.bias", p);
    NN_W(c2_w, &u->w, "%s.out_layers.3.weight", p);
    NN_W(c2_b, &u->w, "%s.out_layers.3.bias", p);
    int64_t Co = c1_w->shape[0];
    NN_TRY(nn__new(u->d, &h, e, 4, B, Ci, H, W));
    NN_TRY(tensor_group_norm(h, x, 32, gn_w, gn_b, 1e-5f, 1, e));
    NN_TRY(nn__new(u->d, &h2, e, 4, B, Co, H, W));
    NN_TRY(nn__conv3(h2, h, c1_w, c1_b, e));
    tensor_free(h);
    h = NULL;
    NN_TRY(nn__new(u->d, &emb, e, 2, B, Co));
    NN_TRY(tensor_linear(emb, u->temb_silu, em_w, em_b, e));
    NN_TRY(tensor_reshape(emb, 4, (const int64_t[]){B, Co, 1, 1}, &emb4, e));
    NN_TRY(tensor_add(h2, h2, emb4, e));
    NN_TRY(nn__new(u->d, &h, e, 4, B, Co, H, W));
    NN_TRY(tensor_group_norm(h, h2, 32, g2_w, g2_b, 1e-5f, 1, e));
    NN_TRY(nn__conv3(h2, h, c2_w, c2_b, e));
    if (Ci != Co) {
        const struct tensor *sk_w, *sk_b;
        NN_W(sk_w, &u->w, "%s.skip_connection.weight", p);
        NN_W(sk_b, &u->w, "%s.skip_connection.bias", p);
        NN_TRY(nn__new(u->d, &skip, e, 4, B, Co, H, W));
        NN_TRY(nn__conv1(skip, x, sk_w, sk_b, e));
        NN_TRY(tensor_add(h2, h2, skip, e));
    } else {
        NN_TRY(tensor_add(h2, h2, x, e));
    }
    *out = h2;
    h2 = NULL;
fail:
    tensor_free(h);
    tensor_free(h2);
    tensor_free(emb);
    tensor_free(emb4);
    tensor_free(skip);
    return rc;
}

/*
 * The attention itself: attn1's patches (site non-NULL) see q and k first and may tile
 * the queries; otherwise a plain multi-head attention.
 */
static int attn_core(struct unet_ctx *u, const struct unet_attn1_site *site, struct tensor *a,
                     const struct tensor *q, const struct tensor *k, const struct tensor *v,
                     int heads)
{
    const struct unet_patches *pt = site ? u->patches : NULL;
    struct unet_attn1_tiles t = {0};
    int rc;
    if (pt && pt->attn1_scores && (rc = pt->attn1_scores(pt->user, site, q, k, u->e)) < 0)
        return rc;
    if (pt && pt->attn1_tiles && (rc = pt->attn1_tiles(pt->user, site, &t, u->e)) < 0)
        return rc;
    if (t.nh * t.nw > 1)
        return unet_attn1_tiled(a, q, k, v, heads, &t, u->e);
    return tensor_attention(a, q, k, v, heads, 0.0f, 0, u->e);
}

/* Multi-head attention sub-block: h += to_out(attn(q(n), k(src), v(src))); site names a
 * self-attention for the patches (NULL: a cross-attention). */
static int attn_block(struct unet_ctx *u, const char *p, int heads, struct tensor *h,
                      const struct tensor *n, const struct tensor *src,
                      const struct unet_attn1_site *site)
{
    struct err *e = u->e;
    const struct tensor *wq, *wk, *wv, *wo, *bo, *ksrc = src, *vsrc = src;
    struct tensor *q = NULL, *k = NULL, *v = NULL, *a = NULL, *o = NULL, *kin = NULL,
                  *vin = NULL;
    int rc;
    int64_t B = n->shape[0], T = n->shape[1], C = n->shape[2], S = src->shape[1];
    NN_W(wq, &u->w, "%s.to_q.weight", p);
    NN_W(wk, &u->w, "%s.to_k.weight", p);
    NN_W(wv, &u->w, "%s.to_v.weight", p);
    NN_W(wo, &u->w, "%s.to_out.0.weight", p);
    NN_W(bo, &u->w, "%s.to_out.0.bias", p);
    if (u->patches && u->patches->attn_kv) { /* the patch changes copies, not n or ctx */
        NN_TRY(nn__new(u->d, &kin, e, 3, B, S, src->shape[2]));
        NN_TRY(nn__new(u->d, &vin, e, 3, B, S, src->shape[2]));
        NN_TRY(tensor_copy(kin, src, e));
        NN_TRY(tensor_copy(vin, src, e));
        NN_TRY(u->patches->attn_kv(u->patches->user, src == n, kin, vin, e));
        ksrc = kin;
        vsrc = vin;
    }
    NN_TRY(nn__new(u->d, &q, e, 3, B, T, C));
    NN_TRY(nn__new(u->d, &k, e, 3, B, S, C));
    NN_TRY(nn__new(u->d, &v, e, 3, B, S, C));
    NN_TRY(tensor_linear(q, n, wq, NULL, e));
    NN_TRY(tensor_linear(k, ksrc, wk, NULL, e));
    NN_TRY(tensor_linear(v, vsrc, wv, NULL, e));
    NN_TRY(nn__new(u->d, &a, e, 3, B, T, C));
    NN_TRY(attn_core(u, site, a, q, k, v, heads));
    NN_TRY(nn__new(u->d, &o, e, 3, B, T, C));
    NN_TRY(tensor_linear(o, a, wo, bo, e));
    NN_TRY(tensor_add(h, h, o, e));
fail:
    tensor_free(kin);
    tensor_free(vin);
    tensor_free(q);
    tensor_free(k);
    tensor_free(v);
    tensor_free(a);
    tensor_free(o);
    return rc;
}

/* The patches' name of the transformer at block name p ("input_blocks.4.1" -> input 4). */
static void attn1_site(const struct unet_ctx *u, const char *p, const struct tensor *x,
                       struct unet_attn1_site *s)
{
    int idx = 0;
    memset(s, 0, sizeof *s);
    if (sscanf(p, "input_blocks.%d", &idx) == 1)
        s->kind = UNET_SITE_INPUT;
    else if (sscanf(p, "output_blocks.%d", &idx) == 1)
        s->kind = UNET_SITE_OUTPUT;
    else
        s->kind = UNET_SITE_MIDDLE;
    s->block = idx;
    s->batch = x->shape[0];
    s->tokens = x->shape[2] * x->shape[3];
    s->orig_h = u->orig_h;
    s->orig_w = u->orig_w;
}

/* SpatialTransformer (§3.4) of `depth` blocks, in place on x [B,C,H,W]. proj_in and
 * proj_out run on tokens: the same for a 1x1 conv (SD1.x) and a Linear (SDXL). */
static int transformer(struct unet_ctx *u, const char *p, int depth, int heads, struct tensor *x)
{
    struct unet_attn1_site site;
    struct err *e = u->e;
    const struct tensor *gn_w, *gn_b, *pi_w, *pi_b, *po_w, *po_b;
    struct tensor *g = NULL, *tok = NULL, *h = NULL, *n = NULL, *f = NULL, *gg = NULL, *o = NULL,
                  *back = NULL;
    int rc;
    int64_t B = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3], T = H * W;
    char q[160];
    NN_W(gn_w, &u->w, "%s.norm.weight", p);
    NN_W(gn_b, &u->w, "%s.norm.bias", p);
    NN_W(pi_w, &u->w, "%s.proj_in.weight", p);
    NN_W(pi_b, &u->w, "%s.proj_in.bias", p);
    NN_TRY(nn__new(u->d, &g, e, 4, B, C, H, W));
    NN_TRY(tensor_group_norm(g, x, 32, gn_w, gn_b, 1e-6f, 0, e));
    NN_TRY(nn__to_tokens(g, &tok, e));
    tensor_free(g);
    g = NULL;
    NN_TRY(nn__new(u->d, &h, e, 3, B, T, C));
    NN_TRY(nn__linear(h, tok, pi_w, pi_b, e)); /* a 1x1 conv is a Linear over channels */
    tensor_free(tok); /* early: the FF below is the block's peak */
    tok = NULL;
    NN_TRY(nn__new(u->d, &n, e, 3, B, T, C));
    attn1_site(u, p, x, &site);
    site.heads = heads;
    for (int d = 0; d < depth; d++) {
        const struct tensor *lw, *lb, *f0w, *f0b, *f2w, *f2b;
        NN_W(lw, &u->w, "%s.transformer_blocks.%d.norm1.weight", p, d);
        NN_W(lb, &u->w, "%s.transformer_blocks.%d.norm1.bias", p, d);
        NN_TRY(tensor_layer_norm(n, h, lw, lb, 1e-5f, e));
        snprintf(q, sizeof(q), "%s.transformer_blocks.%d.attn1", p, d);
        site.block_index = d;
        NN_TRY(attn_block(u, q, heads, h, n, n, u->patches ? &site : NULL));
        if (u->patches && u->patches->middle) /* BasicTransformerBlock's middle_patch */
            NN_TRY(u->patches->middle(u->patches->user, u->st_idx, h, e));
        NN_W(lw, &u->w, "%s.transformer_blocks.%d.norm2.weight", p, d);
        NN_W(lb, &u->w, "%s.transformer_blocks.%d.norm2.bias", p, d);
        NN_TRY(tensor_layer_norm(n, h, lw, lb, 1e-5f, e));
        snprintf(q, sizeof(q), "%s.transformer_blocks.%d.attn2", p, d);
        NN_TRY(attn_block(u, q, heads, h, n, u->ctx, NULL));
        NN_W(lw, &u->w, "%s.transformer_blocks.%d.norm3.weight", p, d);
        NN_W(lb, &u->w, "%s.transformer_blocks.%d.norm3.bias", p, d);
        NN_TRY(tensor_layer_norm(n, h, lw, lb, 1e-5f, e));
        NN_W(f0w, &u->w, "%s.transformer_blocks.%d.ff.net.0.proj.weight", p, d);
        NN_W(f0b, &u->w, "%s.transformer_blocks.%d.ff.net.0.proj.bias", p, d);
        NN_W(f2w, &u->w, "%s.transformer_blocks.%d.ff.net.2.weight", p, d);
        NN_W(f2b, &u->w, "%s.transformer_blocks.%d.ff.net.2.bias", p, d);
        NN_TRY(nn__new(u->d, &gg, e, 3, B, T, 4 * C));
        NN_TRY(tensor_linear_geglu(gg, n, f0w, f0b, e)); /* no [B, T, 8C] product on the CPU */
        NN_TRY(tensor_linear(n, gg, f2w, f2b, e));
        tensor_free(gg);
        gg = NULL;
        NN_TRY(tensor_add(h, h, n, e));
    }
    NN_W(po_w, &u->w, "%s.proj_out.weight", p);
    NN_W(po_b, &u->w, "%s.proj_out.bias", p);
    NN_TRY(nn__linear(n, h, po_w, po_b, e));
    NN_TRY(nn__new(u->d, &back, e, 4, B, C, H, W));
    NN_TRY(nn__from_tokens(n, back, e));
    NN_TRY(tensor_add(x, x, back, e));
    u->st_idx++; /* forward_timestep_embed: transformer_index += 1 */
fail:
    tensor_free(g);
    tensor_free(tok);
    tensor_free(h);
    tensor_free(n);
    tensor_free(f);
    tensor_free(gg);
    tensor_free(o);
    tensor_free(back);
    return rc;
}

static int downsample(struct unet_ctx *u, const char *p, const struct tensor *x, struct tensor **out)
{
    const struct tensor *w, *b;
    int rc;
    *out = NULL;
    NN_W(w, &u->w, "%s.op.weight", p);
    NN_W(b, &u->w, "%s.op.bias", p);
    struct tensor_conv2d_opts o = {.stride = 2, .pad_top = 1, .pad_bottom = 1, .pad_left = 1,
                                   .pad_right = 1};
    int64_t ho, wo;
    tensor_conv2d_out_hw(&o, x->shape[2], x->shape[3], 3, 3, &ho, &wo);
    NN_TRY(nn__new(u->d, out, u->e, 4, x->shape[0], x->shape[1], ho, wo));
    NN_TRY(tensor_conv2d(*out, x, w, b, &o, u->e));
    return 0;
fail:
    tensor_free(*out);
    *out = NULL;
    return rc;
}

/* Nearest resize to (th, tw), then conv 3x3 (§3.5). */
static int upsample(struct unet_ctx *u, const char *p, const struct tensor *x, int64_t th,
                    int64_t tw, struct tensor **out)
{
    const struct tensor *w, *b;
    struct tensor *up = NULL;
    int rc;
    *out = NULL;
    NN_W(w, &u->w, "%s.conv.weight", p);
    NN_W(b, &u->w, "%s.conv.bias", p);
    NN_TRY(nn__new(u->d, &up, u->e, 4, x->shape[0], x->shape[1], th, tw));
    NN_TRY(tensor_upsample_nearest(up, x, u->e));
    NN_TRY(nn__new(u->d, out, u->e, 4, x->shape[0], x->shape[1], th, tw));
    NN_TRY(nn__conv3(*out, up, w, b, u->e));
    tensor_free(up);
    return 0;
fail:
    tensor_free(up);
    tensor_free(*out);
    *out = NULL;
    return rc;
}

static int time_embed(struct unet_ctx *u, const float *t, int64_t B)
{
    struct err *e = u->e;
    const struct tensor *w0, *b0, *w2, *b2;
    struct tensor *emb = NULL, *h = NULL;
    int rc;
    int64_t mc = u->a->model_ch, te = 4 * mc;
    NN_TRY(nn__new(u->d, &emb, e, 2, B, mc));
    NN_TRY(tensor_timestep_embedding(emb, t, B, e));
    nn__probe(u->probe, "t_emb", emb);
    NN_W(w0, &u->w, "time_embed.0.weight");
    NN_W(b0, &u->w, "time_embed.0.bias");
    NN_W(w2, &u->w, "time_embed.2.weight");
    NN_W(b2, &u->w, "time_embed.2.bias");
    NN_TRY(nn__new(u->d, &h, e, 2, B, te));
    NN_TRY(tensor_linear(h, emb, w0, b0, e));
    NN_TRY(tensor_silu(h, h, e));
    NN_TRY(nn__new(u->d, &u->temb_silu, e, 2, B, te));
    NN_TRY(tensor_linear(u->temb_silu, h, w2, b2, e));
    nn__probe(u->probe, "time_embed", u->temb_silu);
    if (u->hooks && u->hooks->on_temb)
        NN_TRY(u->hooks->on_temb(u->hooks->user, &u->w, u->temb_silu, e));
    if (!u->a->adm_in) /* else label_emb adds its part first */
        NN_TRY(tensor_silu(u->temb_silu, u->temb_silu, e));
fail:
    tensor_free(emb);
    tensor_free(h);
    return rc;
}

/* emb += label_emb(y) (sdxl.md §6.4), then the SiLU every ResBlock's emb_layers take. */
static int label_embed(struct unet_ctx *u, int64_t B)
{
    struct err *e = u->e;
    const struct tensor *w0, *b0, *w2, *b2;
    struct tensor *h = NULL, *l = NULL;
    int rc;
    int64_t te = 4 * (int64_t)u->a->model_ch;
    NN_W(w0, &u->w, "label_emb.0.0.weight");
    NN_W(b0, &u->w, "label_emb.0.0.bias");
    NN_W(w2, &u->w, "label_emb.0.2.weight");
    NN_W(b2, &u->w, "label_emb.0.2.bias");
    NN_TRY(nn__new(u->d, &h, e, 2, B, te));
    NN_TRY(tensor_linear(h, u->y, w0, b0, e));
    NN_TRY(tensor_silu(h, h, e));
    NN_TRY(nn__new(u->d, &l, e, 2, B, te));
    NN_TRY(tensor_linear(l, h, w2, b2, e));
    NN_TRY(tensor_add(u->temb_silu, u->temb_silu, l, e));
    NN_TRY(tensor_silu(u->temb_silu, u->temb_silu, e));
fail:
    tensor_free(h);
    tensor_free(l);
    return rc;
}

/*
 * The walk's state between blocks: h, the skip stack, and whether h is the stack's
 * top (then a block that replaces h must not free it).
 */
struct walk {
    struct tensor *h;
    struct tensor *skips[UNET_MAX_BLOCKS];
    int ns;
    int h_on_stack;
};

/* h = new, freeing the old h unless the skip stack holds it. */
static void walk_set_h(struct walk *s, struct tensor *nh)
{
    if (!s->h_on_stack)
        tensor_free(s->h);
    s->h = nh;
    s->h_on_stack = 0;
}

/* Output side: h becomes cat(h, popped skip) (sd15.md §3.6), both freed. */
static int walk_pop(struct unet_ctx *u, struct walk *s)
{
    struct tensor *sk = s->skips[--s->ns], *cat = NULL, *h = s->h;
    const struct unet_control *c = u->control;
    s->skips[s->ns] = NULL;
    int rc = c && s->ns < c->n_output ? add_control(u, sk, c->output[s->ns], "output", s->ns) : 0;
    /* openaimodel: output_block_patch after apply_control, before the concat */
    if (rc == 0 && u->patches && u->patches->output_block)
        rc = u->patches->output_block(u->patches->user, u->out_idx, h, sk, u->e);
    u->out_idx++;
    if (rc == 0)
        rc = nn__new(u->d, &cat, u->e, 4, h->shape[0], h->shape[1] + sk->shape[1], h->shape[2],
                     h->shape[3]);
    if (rc == 0)
        rc = tensor_concat(cat, h, sk, 1, u->e);
    tensor_free(sk);
    if (rc < 0) {
        tensor_free(cat);
        return rc;
    }
    walk_set_h(s, cat);
    return 0;
}

static int out_block(struct unet_ctx *u, struct walk *s, struct tensor *eps)
{
    const struct tensor *ow, *ob, *cw, *cb;
    struct tensor *g = NULL;
    int rc;
    NN_W(ow, &u->w, "out.0.weight");
    NN_W(ob, &u->w, "out.0.bias");
    NN_W(cw, &u->w, "out.2.weight");
    NN_W(cb, &u->w, "out.2.bias");
    NN_TRY(tensor_new_like(s->h, TENSOR_F32, &g, u->e));
    NN_TRY(tensor_group_norm(g, s->h, 32, ow, ob, 1e-5f, 1, u->e));
    NN_TRY(nn__conv3(eps, g, cw, cb, u->e));
fail:
    tensor_free(g);
    return rc;
}

static int conv_in(struct unet_ctx *u, const struct tensor *x, struct tensor **out)
{
    const struct tensor *cw, *cb;
    int rc;
    *out = NULL;
    NN_W(cw, &u->w, "input_blocks.0.0.weight");
    NN_W(cb, &u->w, "input_blocks.0.0.bias");
    NN_TRY(nn__new(u->d, out, u->e, 4, x->shape[0], (int64_t)u->a->model_ch, x->shape[2],
                   x->shape[3]));
    NN_TRY(nn__conv3(*out, x, cw, cb, u->e));
    return 0;
fail:
    tensor_free(*out);
    *out = NULL;
    return rc;
}

/* One block of the list; h and the skip stack as in unet_blocks_build's flags. */
static int run_block(struct unet_ctx *u, const struct unet_block *b, struct walk *s,
                     const struct tensor *x, const float *t, struct tensor *eps)
{
    struct tensor *nh = NULL;
    int rc = 0;
    switch (b->op) {
    case UNET_OP_TIME_EMBED:
        return time_embed(u, t, x->shape[0]);
    case UNET_OP_LABEL_EMB:
        return label_embed(u, x->shape[0]);
    case UNET_OP_CONV_IN:
        rc = conv_in(u, x, &nh);
        break;
    case UNET_OP_RES:
        if ((b->flags & UNET_BLOCK_POP) && (rc = walk_pop(u, s)) < 0)
            return rc;
        rc = resblock(u, b->name, s->h, &nh);
        break;
    case UNET_OP_ST:
        return transformer(u, b->name, b->depth, b->heads, s->h);
    case UNET_OP_DOWN:
        rc = downsample(u, b->name, s->h, &nh);
        break;
    case UNET_OP_UP: {
        /* Resize to the spatial size of the skip popped next (§3.5). */
        const struct tensor *nxt = s->skips[s->ns - 1];
        rc = upsample(u, b->name, s->h, nxt->shape[2], nxt->shape[3], &nh);
        break;
    }
    case UNET_OP_OUT:
        return out_block(u, s, eps);
    }
    if (rc < 0)
        return rc;
    walk_set_h(s, nh);
    if (b->flags & UNET_BLOCK_PUSH) {
        s->skips[s->ns++] = nh;
        s->h_on_stack = 1;
    }
    return 0;
}

/* "input_blocks.4.1" -> "input_blocks.4": the probe names of the reference fixtures. */
static void probe_block(struct unet_ctx *u, const struct unet_block *b, const struct tensor *h)
{
    char name[32];
    const char *dot = strrchr(b->name, '.');
    snprintf(name, sizeof(name), "%.*s", dot ? (int)(dot - b->name) : (int)strlen(b->name),
             b->name);
    nn__probe(u->probe, name, h);
}

static int check_shapes(const struct unet_arch *a, const struct tensor *x, const struct tensor *ctx,
                        const struct tensor *y, const struct tensor *eps, struct err *e)
{
    /* eps has out_ch channels: an inpainting / ip2p UNet's x also carries c_concat */
    if (x->ndim != 4 || x->shape[1] != a->in_ch || ctx->ndim != 3 || ctx->shape[0] != x->shape[0] ||
        ctx->shape[2] != a->ctx_dim || eps->ndim != 4 || eps->shape[0] != x->shape[0] ||
        eps->shape[1] != a->out_ch || eps->shape[2] != x->shape[2] || eps->shape[3] != x->shape[3])
        return err_set(e, ERR_INVALID,
                       "unet: bad shapes (x [B,%d,h,w], context [B,T,%d], eps [B,%d,h,w] "
                       "expected)",
                       a->in_ch, a->ctx_dim, a->out_ch);
    if (a->adm_in && (!y || y->ndim != 2 || y->shape[0] != x->shape[0] || y->shape[1] != a->adm_in))
        return err_set(e, ERR_INVALID, "unet: this model needs an ADM vector y [B,%d]", a->adm_in);
    return 0;
}

/* After block b: the hooks' and the control's part. Returns 1 when the walk ends here. */
static int after_block(struct unet_ctx *u, const struct unet_block *b, struct walk *s,
                       const struct unet_hooks *hooks, int *skip_idx)
{
    int rc = 0;
    if ((b->flags & UNET_BLOCK_IN_END) && u->control) { /* apply_control(h, 'input') */
        int i = u->in_idx++;
        if (i < u->control->n_input)
            rc = add_control(u, s->h, u->control->input[i], "input", i);
    }
    if (rc == 0 && (b->flags & UNET_BLOCK_IN_END) && hooks && hooks->on_skip)
        rc = hooks->on_skip(hooks->user, &u->w, (*skip_idx)++, s->h, u->e);
    if (rc == 0 && (b->flags & UNET_BLOCK_MID_END) && u->control)
        rc = add_control(u, s->h, u->control->middle, "middle", 0);
    if (rc == 0 && (b->flags & UNET_BLOCK_MID_END) && hooks && hooks->on_middle) {
        if ((rc = hooks->on_middle(hooks->user, &u->w, s->h, u->e)) == 0)
            return 1;
    }
    return rc;
}

int unet__eval(struct patcher *unet, const struct unet_arch *a, const struct tensor *x,
               const float *t, const struct tensor *ctx, const struct tensor *y,
               const struct unet_control *control, const struct unet_patches *patches,
               const struct unet_hooks *hooks, struct tensor *eps, struct model_probe *probe,
               struct err *e)
{
    struct unet_ctx u = {.a = a, .y = y, .d = patcher_device(unet), .e = e, .ctx = ctx,
                         .probe = probe, .control = control, .patches = patches,
                         .hooks = hooks, .orig_h = x->shape[2], .orig_w = x->shape[3]};
    struct walk s = {0};
    struct unet_blocks bl;
    int rc, skip_idx = 0;
    if (!u.d)
        return err_set(e, ERR_INVALID, "unet: model is not loaded (call mm_load_models first)");
    if ((rc = check_shapes(a, x, ctx, y, hooks ? x : eps, e)) < 0)
        return rc;
    unet_blocks_build(a, &bl);
    tensor_profile_reset();
    nn__w_init(&u.w, unet, hooks && hooks->prefix ? hooks->prefix : MODEL_PREFIX_UNET, e);
    for (int i = 0; i < bl.n; i++) {
        NN_TRY(run_block(&u, &bl.v[i], &s, x, t, eps));
        if (bl.v[i].flags & UNET_BLOCK_PROBE)
            probe_block(&u, &bl.v[i], s.h);
        NN_TRY(after_block(&u, &bl.v[i], &s, hooks, &skip_idx));
        if (rc == 1) {
            rc = 0;
            break;
        }
    }
    if (!hooks)
        nn__probe(probe, "eps", eps);
    tensor_profile_print(hooks ? "controlnet" : "unet");
fail:
    nn__w_release(&u.w);
    for (int i = 0; i < s.ns; i++)
        if (s.skips[i] != s.h)
            tensor_free(s.skips[i]);
    tensor_free(s.h);
    tensor_free(u.temb_silu);
    return rc;
}

int unet_eval(struct patcher *unet, const struct unet_arch *a, const struct tensor *x,
              const float *t, const struct tensor *ctx, const struct tensor *y, struct tensor *eps,
              struct model_probe *probe, struct err *e)
{
    return unet__eval(unet, a, x, t, ctx, y, NULL, NULL, NULL, eps, probe, e);
}

int unet_eval_control(struct patcher *unet, const struct unet_arch *a, const struct tensor *x,
                      const float *t, const struct tensor *ctx, const struct tensor *y,
                      const struct unet_control *control, struct tensor *eps, struct err *e)
{
    return unet__eval(unet, a, x, t, ctx, y, control, NULL, NULL, eps, NULL, e);
}

int unet_eval_patched(struct patcher *unet, const struct unet_arch *a, const struct tensor *x,
                      const float *t, const struct tensor *ctx, const struct tensor *y,
                      const struct unet_control *control, const struct unet_patches *patches,
                      struct tensor *eps, struct err *e)
{
    return unet__eval(unet, a, x, t, ctx, y, control, patches, NULL, eps, NULL, e);
}
