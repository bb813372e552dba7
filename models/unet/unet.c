/*
 * SD1.x UNet forward pass (sd15.md §3). See sd15_models.h.
 *
 * Each block (ResBlock, SpatialTransformer, down/upsampler) is one patcher layer;
 * a block's weights are fetched, used, and released before the next block's.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "nn.h"
#include "unet.h"

struct unet_ctx {
    const struct model_config *cfg;
    struct nn_w w;
    struct dev *d;
    struct err *e;
    struct tensor *temb_silu; /* SiLU(temb) [B, TE]: every ResBlock adds a projection of it */
    const struct tensor *ctx; /* [B, T, ctx_dim] */
    struct model_probe *probe;
};

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

/* Multi-head attention sub-block: h += to_out(attn(q(n), k(src), v(src))). */
static int attn_block(struct unet_ctx *u, const char *p, struct tensor *h, const struct tensor *n,
                      const struct tensor *src)
{
    struct err *e = u->e;
    const struct tensor *wq, *wk, *wv, *wo, *bo;
    struct tensor *q = NULL, *k = NULL, *v = NULL, *a = NULL, *o = NULL;
    int rc;
    int64_t B = n->shape[0], T = n->shape[1], C = n->shape[2], S = src->shape[1];
    NN_W(wq, &u->w, "%s.to_q.weight", p);
    NN_W(wk, &u->w, "%s.to_k.weight", p);
    NN_W(wv, &u->w, "%s.to_v.weight", p);
    NN_W(wo, &u->w, "%s.to_out.0.weight", p);
    NN_W(bo, &u->w, "%s.to_out.0.bias", p);
    NN_TRY(nn__new(u->d, &q, e, 3, B, T, C));
    NN_TRY(nn__new(u->d, &k, e, 3, B, S, C));
    NN_TRY(nn__new(u->d, &v, e, 3, B, S, C));
    NN_TRY(tensor_linear(q, n, wq, NULL, e));
    NN_TRY(tensor_linear(k, src, wk, NULL, e));
    NN_TRY(tensor_linear(v, src, wv, NULL, e));
    NN_TRY(nn__new(u->d, &a, e, 3, B, T, C));
    NN_TRY(tensor_attention(a, q, k, v, u->cfg->unet_heads, 0.0f, 0, e));
    NN_TRY(nn__new(u->d, &o, e, 3, B, T, C));
    NN_TRY(tensor_linear(o, a, wo, bo, e));
    NN_TRY(tensor_add(h, h, o, e));
fail:
    tensor_free(q);
    tensor_free(k);
    tensor_free(v);
    tensor_free(a);
    tensor_free(o);
    return rc;
}

/* SpatialTransformer (§3.4), in place on x [B,C,H,W]. */
static int transformer(struct unet_ctx *u, const char *p, struct tensor *x)
{
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
    for (int d = 0; d < u->cfg->unet_depth; d++) {
        const struct tensor *lw, *lb, *f0w, *f0b, *f2w, *f2b;
        NN_W(lw, &u->w, "%s.transformer_blocks.%d.norm1.weight", p, d);
        NN_W(lb, &u->w, "%s.transformer_blocks.%d.norm1.bias", p, d);
        NN_TRY(tensor_layer_norm(n, h, lw, lb, 1e-5f, e));
        snprintf(q, sizeof(q), "%s.transformer_blocks.%d.attn1", p, d);
        NN_TRY(attn_block(u, q, h, n, n));
        NN_W(lw, &u->w, "%s.transformer_blocks.%d.norm2.weight", p, d);
        NN_W(lb, &u->w, "%s.transformer_blocks.%d.norm2.bias", p, d);
        NN_TRY(tensor_layer_norm(n, h, lw, lb, 1e-5f, e));
        snprintf(q, sizeof(q), "%s.transformer_blocks.%d.attn2", p, d);
        NN_TRY(attn_block(u, q, h, n, u->ctx));
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
    int64_t mc = u->cfg->unet_mc, te = 4 * mc;
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
    NN_TRY(tensor_silu(u->temb_silu, u->temb_silu, e));
fail:
    tensor_free(emb);
    tensor_free(h);
    return rc;
}

int unet_eval(struct patcher *unet, const struct model_config *cfg, const struct tensor *x,
                   const float *t, const struct tensor *ctx, struct tensor *eps,
                   struct model_probe *probe, struct err *e)
{
    struct unet_ctx u = {.cfg = cfg, .d = patcher_device(unet), .e = e, .ctx = ctx, .probe = probe};
    struct tensor *skips[12] = {0}, *h = NULL, *nh = NULL, *cat = NULL;
    int ns = 0, rc;
    char p[64], name[64];
    if (!u.d)
        return err_set(e, ERR_INVALID, "unet: model is not loaded (call mm_load_models first)");
    if (x->ndim != 4 || x->shape[1] != cfg->unet_in_ch || ctx->ndim != 3 ||
        ctx->shape[0] != x->shape[0] || ctx->shape[2] != cfg->ctx_dim || !tensor_same_shape(x, eps))
        return err_set(e, ERR_INVALID,
                       "unet: bad shapes (x [B,%d,h,w], context [B,T,%d], eps like x expected)",
                       cfg->unet_in_ch, cfg->ctx_dim);
    tensor_profile_reset();
    nn__w_init(&u.w, unet, MODEL_PREFIX_UNET, e);
    int64_t B = x->shape[0];
    NN_TRY(time_embed(&u, t, B));

    /* Input blocks: conv_in, then per level 2x (ResBlock [+ ST]) and a downsample. */
    const struct tensor *cw, *cb;
    NN_W(cw, &u.w, "input_blocks.0.0.weight");
    NN_W(cb, &u.w, "input_blocks.0.0.bias");
    NN_TRY(nn__new(u.d, &h, e, 4, B, (int64_t)cfg->unet_mc, x->shape[2], x->shape[3]));
    NN_TRY(nn__conv3(h, x, cw, cb, e));
    nn__probe(probe, "input_blocks.0", h);
    skips[ns++] = h;
    int idx = 1;
    for (int l = 0; l < 4; l++) {
        for (int r = 0; r < 2; r++, idx++) {
            snprintf(p, sizeof(p), "input_blocks.%d.0", idx);
            NN_TRY(resblock(&u, p, h, &nh));
            h = nh;
            nh = NULL;
            skips[ns++] = h;
            if (l < 3) {
                snprintf(p, sizeof(p), "input_blocks.%d.1", idx);
                NN_TRY(transformer(&u, p, h));
            }
            snprintf(name, sizeof(name), "input_blocks.%d", idx);
            nn__probe(probe, name, h);
        }
        if (l < 3) {
            snprintf(p, sizeof(p), "input_blocks.%d.0", idx);
            NN_TRY(downsample(&u, p, h, &nh));
            h = nh;
            nh = NULL;
            skips[ns++] = h;
            snprintf(name, sizeof(name), "input_blocks.%d", idx);
            nn__probe(probe, name, h);
            idx++;
        }
    }
    /* h aliases skips[ns-1]; the middle block works on its own copy. */
    NN_TRY(resblock(&u, "middle_block.0", h, &nh));
    h = nh;
    nh = NULL;
    NN_TRY(transformer(&u, "middle_block.1", h));
    NN_TRY(resblock(&u, "middle_block.2", h, &nh));
    tensor_free(h);
    h = nh;
    nh = NULL;
    nn__probe(probe, "middle_block", h);

    idx = 0;
    for (int l = 3; l >= 0; l--) {
        for (int r = 0; r < 3; r++, idx++) {
            struct tensor *s = skips[--ns];
            skips[ns] = NULL;
            NN_TRY(nn__new(u.d, &cat, e, 4, B, h->shape[1] + s->shape[1], h->shape[2], h->shape[3]));
            rc = tensor_concat(cat, h, s, 1, e);
            tensor_free(s);
            if (rc < 0)
                goto fail;
            tensor_free(h);
            h = NULL;
            snprintf(p, sizeof(p), "output_blocks.%d.0", idx);
            NN_TRY(resblock(&u, p, cat, &h));
            tensor_free(cat);
            cat = NULL;
            int sub = 1;
            if (l < 3) {
                snprintf(p, sizeof(p), "output_blocks.%d.1", idx);
                NN_TRY(transformer(&u, p, h));
                sub = 2;
            }
            if (l > 0 && r == 2) {
                /* Resize to the spatial size of the skip popped next (§3.5). */
                const struct tensor *nxt = skips[ns - 1];
                snprintf(p, sizeof(p), "output_blocks.%d.%d", idx, sub);
                NN_TRY(upsample(&u, p, h, nxt->shape[2], nxt->shape[3], &nh));
                tensor_free(h);
                h = nh;
                nh = NULL;
            }
            snprintf(name, sizeof(name), "output_blocks.%d", idx);
            nn__probe(probe, name, h);
        }
    }
    const struct tensor *ow, *ob, *cw2, *cb2;
    NN_W(ow, &u.w, "out.0.weight");
    NN_W(ob, &u.w, "out.0.bias");
    NN_W(cw2, &u.w, "out.2.weight");
    NN_W(cb2, &u.w, "out.2.bias");
    NN_TRY(tensor_new_like(h, TENSOR_F32, &nh, e));
    NN_TRY(tensor_group_norm(nh, h, 32, ow, ob, 1e-5f, 1, e));
    NN_TRY(nn__conv3(eps, nh, cw2, cb2, e));
    nn__probe(probe, "eps", eps);
    tensor_profile_print("unet");
fail:
    nn__w_release(&u.w);
    for (int i = 0; i < 12; i++)
        if (skips[i] != h)
            tensor_free(skips[i]);
    tensor_free(h);
    tensor_free(nh);
    tensor_free(cat);
    tensor_free(u.temb_silu);
    return rc;
}

/* ---- planning figures ------------------------------------------------------------------------ */

/*
 * The activation peak of unet_eval, by walking the block sequence as the code
 * allocates: `base` is what is alive between blocks (the skip stack and the current
 * h), each block adds its own temporaries (ResBlock: max(GN(in) + out, 3 out);
 * SpatialTransformer: 7 C per token for the FF (h, n, 4C, and the 8C / 8 temporary of
 * tensor_linear_geglu's chunks on backends without the fused kernel) plus k, v over the
 * context; up/downsample: their outputs). Floats; x, ctx and eps are the caller's.
 */
size_t unet_plan_bytes(const struct model_config *c, int b, int h, int w, int t)
{
    double mc = c->unet_mc, hh = h, ww = w, peak = 0, base = 0;
    double skip_c[16], skip_px[16];
    int ns = 0;
#define PEAK(extra) peak = fmax(peak, base + (extra))
    double px = hh * ww, ch = mc;
    base = mc * px; /* conv_in output */
    PEAK(0);
    skip_c[ns] = mc;
    skip_px[ns++] = px;
    double lv_px[4];
    for (int l = 0; l < 4; l++) {
        lv_px[l] = hh * ww;
        px = lv_px[l];
        for (int r = 0; r < 2; r++) {
            double co = c->unet_mult[l] * mc;
            PEAK(fmax(ch + co, 3 * co) * px);
            base += co * px; /* the new h; the old one stays on the skip stack */
            ch = co;
            if (l < 3)
                PEAK(7 * ch * px + 2 * ch * t);
            skip_c[ns] = ch;
            skip_px[ns++] = px;
        }
        if (l < 3) {
            hh = ceil(hh / 2);
            ww = ceil(ww / 2);
            base += ch * hh * ww;
            PEAK(0);
            skip_c[ns] = ch;
            skip_px[ns++] = hh * ww;
        }
    }
    px = hh * ww;
    /* Middle: its own h beside the stack. */
    PEAK(fmax(2 * ch, 3 * ch) * px + ch * px);
    PEAK(ch * px + 7 * ch * px + 2 * ch * t);
    base += ch * px;
    for (int l = 3; l >= 0; l--) {
        px = lv_px[l];
        for (int r = 0; r < 3; r++) {
            double s = skip_c[--ns], cat = ch + s, co = c->unet_mult[l] * mc;
            base -= s * skip_px[ns]; /* popped ... */
            base -= ch * px;         /* ... and h, both folded into cat */
            base += cat * px;
            PEAK(fmax(cat + co, 3 * co) * px);
            base += co * px - cat * px;
            ch = co;
            if (l < 3)
                PEAK(7 * ch * px + 2 * ch * t);
            if (l > 0 && r == 2) {
                double up = lv_px[l - 1];
                PEAK(2 * ch * up);
                base += ch * up - ch * px;
            }
        }
    }
    PEAK(ch * px); /* GN before out.2 */
#undef PEAK
    return (size_t)(peak * b * 4.0) + ((size_t)1 << 20);
}

double unet_flops(const struct model_config *c, int b, int h, int w, int t)
{
    double fl = 0, mc = c->unet_mc, te = 4 * mc, hh = h, ww = w, ctx = c->ctx_dim;
    double ch = mc;
    double widths[12];
    int n = 0;
#define CONV(ci, co, k, px) (2.0 * (ci) * (co) * (k) * (k) * (px))
#define RES(ci, co, px) (CONV(ci, co, 3, px) + CONV(co, co, 3, px) + ((ci) != (co) ? CONV(ci, co, 1, px) : 0) + 2.0 * te * (co))
#define ST(cc, px) (2.0 * (px) * (cc) * (cc) * 2 /* proj */ + 2.0 * (px) * (cc) * (cc) * 4 /* attn1 qkvo */ + \
                    4.0 * (px) * (px) * (cc) /* attn1 */ + 2.0 * (px) * (cc) * (cc) * 2 + 2.0 * t * ctx * (cc) * 2 + \
                    4.0 * (px) * t * (cc) + 2.0 * (px) * (cc) * 12 * (cc) /* FF */)
    fl += CONV(c->unet_in_ch, mc, 3, hh * ww);
    widths[n++] = mc;
    double res[4][2];
    for (int l = 0; l < 4; l++) {
        double co = c->unet_mult[l] * mc, px = hh * ww;
        res[l][0] = hh;
        res[l][1] = ww;
        for (int r = 0; r < 2; r++) {
            fl += RES(ch, co, px) + (l < 3 ? ST(co, px) * c->unet_depth : 0);
            ch = co;
            widths[n++] = ch;
        }
        if (l < 3) {
            hh = ceil(hh / 2);
            ww = ceil(ww / 2);
            fl += CONV(ch, ch, 3, hh * ww);
            widths[n++] = ch;
        }
    }
    double px = hh * ww;
    fl += 2 * RES(ch, ch, px) + ST(ch, px) * c->unet_depth;
    for (int l = 3; l >= 0; l--) {
        double co = c->unet_mult[l] * mc;
        px = res[l][0] * res[l][1];
        for (int r = 0; r < 3; r++) {
            double s = widths[--n];
            fl += RES(ch + s, co, px) + (l < 3 ? ST(co, px) * c->unet_depth : 0);
            ch = co;
            if (l > 0 && r == 2)
                fl += CONV(ch, ch, 3, res[l - 1][0] * res[l - 1][1]);
        }
    }
    fl += CONV(mc, c->unet_out_ch, 3, px);
    return fl * b;
#undef CONV
#undef RES
#undef ST
}
