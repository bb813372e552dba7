/*
 * SD1.x VAE (AutoencoderKL) decoder and encoder (sd15.md §4). See sd15_models.h.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "nn.h"
#include "vae.h"

struct vae_ctx {
    struct nn_w w;
    struct dev *d;
    struct err *e;
    struct model_probe *probe;
    struct tensor *spare[2]; /* owned: dead activations kept for the next of their shape */
};

/*
 * Activations of one level have one shape, and a ResnetBlock's input and conv1 output
 * are dead when it returns: they become the next block's conv outputs instead of being
 * freed and allocated again. Each fresh 128 MiB tensor of the 512^2 decoder's last level
 * was page-faulted in anew (~32k faults; the kernel's share of a decode was ~20 % of its
 * CPU time). Nothing is kept across a change of shape, so the peak is unchanged.
 */
static int vae_new(struct vae_ctx *v, struct tensor **out, int64_t B, int64_t C, int64_t H,
                   int64_t W)
{
    for (int i = 0; i < 2; i++) {
        struct tensor *t = v->spare[i];
        if (t && t->shape[0] == B && t->shape[1] == C && t->shape[2] == H && t->shape[3] == W) {
            *out = t;
            v->spare[i] = NULL;
            return 0;
        }
    }
    for (int i = 0; i < 2; i++) { /* a new shape: the kept ones are dead weight now */
        tensor_free(v->spare[i]);
        v->spare[i] = NULL;
    }
    return nn__new(v->d, out, v->e, 4, B, C, H, W);
}

/* t (from vae_new or nn__new, no other references) is dead: keep it, or free it. */
static void vae_keep(struct vae_ctx *v, struct tensor *t)
{
    for (int i = 0; i < 2 && t; i++)
        if (!v->spare[i]) {
            v->spare[i] = t;
            return;
        }
    tensor_free(t);
}

static void vae_spares_free(struct vae_ctx *v)
{
    for (int i = 0; i < 2; i++) {
        tensor_free(v->spare[i]);
        v->spare[i] = NULL;
    }
}

/* ResnetBlock (§4.2): x [B,Ci,H,W] -> *out [B,Co,H,W]. */
static int resnet(struct vae_ctx *v, const char *p, const struct tensor *x, struct tensor **out)
{
    struct err *e = v->e;
    const struct tensor *n1w, *n1b, *c1w, *c1b, *n2w, *n2b, *c2w, *c2b;
    struct tensor *h = NULL, *h2 = NULL, *sc = NULL;
    int rc;
    int64_t B = x->shape[0], Ci = x->shape[1], H = x->shape[2], W = x->shape[3];
    *out = NULL;
    NN_W(n1w, &v->w, "%s.norm1.weight", p);
    NN_W(n1b, &v->w, "%s.norm1.bias", p);
    NN_W(c1w, &v->w, "%s.conv1.weight", p);
    NN_W(c1b, &v->w, "%s.conv1.bias", p);
    NN_W(n2w, &v->w, "%s.norm2.weight", p);
    NN_W(n2b, &v->w, "%s.norm2.bias", p);
    NN_W(c2w, &v->w, "%s.conv2.weight", p);
    NN_W(c2b, &v->w, "%s.conv2.bias", p);
    int64_t Co = c1w->shape[0];
    /* norm, SiLU and conv as one op each time: on the CPU the normalised tensor is never
     * made (tensor_conv2d_gn) */
    struct tensor_conv2d_opts o3 = {.stride = 1, .pad_top = 1, .pad_bottom = 1, .pad_left = 1,
                                    .pad_right = 1};
    struct tensor_gn_opts g1 = {32, n1w, n1b, 1e-6f, 1}, g2 = {32, n2w, n2b, 1e-6f, 1};
    NN_TRY(vae_new(v, &h, B, Co, H, W));
    NN_TRY(tensor_conv2d_gn(h, x, &g1, c1w, c1b, &o3, e));
    NN_TRY(vae_new(v, &h2, B, Co, H, W));
    NN_TRY(tensor_conv2d_gn(h2, h, &g2, c2w, c2b, &o3, e));
    vae_keep(v, h);
    h = NULL;
    if (Ci != Co) {
        const struct tensor *sw, *sb;
        NN_W(sw, &v->w, "%s.nin_shortcut.weight", p);
        NN_W(sb, &v->w, "%s.nin_shortcut.bias", p);
        /* into conv1's output, dead by now (vae_new takes it back from the spares):
         * a fourth tensor here was the decoder's peak (x 256 + h, h2, sc 3 x 128 MiB at
         * 512^2) */
        NN_TRY(vae_new(v, &sc, B, Co, H, W));
        NN_TRY(nn__conv1(sc, x, sw, sb, e));
        NN_TRY(tensor_add(h2, h2, sc, e));
        vae_keep(v, sc);
        sc = NULL;
    } else {
        NN_TRY(tensor_add(h2, h2, x, e));
    }
    *out = h2;
    h2 = NULL;
fail:
    tensor_free(h);
    tensor_free(h2);
    tensor_free(sc);
    return rc;
}

/* Single-head attention over pixels (§4.2), in place on x. */
static int attn(struct vae_ctx *v, const char *p, struct tensor *x)
{
    struct err *e = v->e;
    const struct tensor *nw, *nb, *qw, *qb, *kw, *kb, *vw, *vb, *pw, *pb;
    struct tensor *g = NULL, *t = NULL, *q = NULL, *k = NULL, *vv = NULL, *a = NULL, *back = NULL;
    int rc;
    int64_t B = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3], T = H * W;
    NN_W(nw, &v->w, "%s.norm.weight", p);
    NN_W(nb, &v->w, "%s.norm.bias", p);
    NN_W(qw, &v->w, "%s.q.weight", p);
    NN_W(qb, &v->w, "%s.q.bias", p);
    NN_W(kw, &v->w, "%s.k.weight", p);
    NN_W(kb, &v->w, "%s.k.bias", p);
    NN_W(vw, &v->w, "%s.v.weight", p);
    NN_W(vb, &v->w, "%s.v.bias", p);
    NN_W(pw, &v->w, "%s.proj_out.weight", p);
    NN_W(pb, &v->w, "%s.proj_out.bias", p);
    NN_TRY(nn__new(v->d, &g, e, 4, B, C, H, W));
    NN_TRY(tensor_group_norm(g, x, 32, nw, nb, 1e-6f, 0, e));
    NN_TRY(nn__to_tokens(g, &t, e));
    NN_TRY(nn__new(v->d, &q, e, 3, B, T, C));
    NN_TRY(nn__new(v->d, &k, e, 3, B, T, C));
    NN_TRY(nn__new(v->d, &vv, e, 3, B, T, C));
    NN_TRY(nn__linear(q, t, qw, qb, e));
    NN_TRY(nn__linear(k, t, kw, kb, e));
    NN_TRY(nn__linear(vv, t, vw, vb, e));
    NN_TRY(nn__new(v->d, &a, e, 3, B, T, C));
    NN_TRY(tensor_attention(a, q, k, vv, 1, 0.0f, 0, e));
    NN_TRY(nn__linear(t, a, pw, pb, e));
    NN_TRY(nn__from_tokens(t, g, e));
    NN_TRY(tensor_add(x, x, g, e));
fail:
    tensor_free(g);
    tensor_free(t);
    tensor_free(q);
    tensor_free(k);
    tensor_free(vv);
    tensor_free(a);
    tensor_free(back);
    return rc;
}

/* mid: block_1, attn_1, block_2; consumes *x (replaced). */
static int mid(struct vae_ctx *v, const char *side, struct tensor **x)
{
    char p[64];
    struct tensor *h = NULL;
    int rc;
    snprintf(p, sizeof(p), "%s.mid.block_1", side);
    NN_TRY(resnet(v, p, *x, &h));
    tensor_free(*x);
    *x = h;
    snprintf(p, sizeof(p), "%s.mid.attn_1", side);
    NN_TRY(attn(v, p, *x));
    snprintf(p, sizeof(p), "%s.mid.block_2", side);
    NN_TRY(resnet(v, p, *x, &h));
    tensor_free(*x);
    *x = h;
    return 0;
fail:
    return rc;
}

static int norm_out_conv(struct vae_ctx *v, const char *side, const struct tensor *x,
                         struct tensor *out)
{
    const struct tensor *nw, *nb, *cw, *cb;
    struct tensor *g = NULL;
    int rc;
    NN_W(nw, &v->w, "%s.norm_out.weight", side);
    NN_W(nb, &v->w, "%s.norm_out.bias", side);
    NN_W(cw, &v->w, "%s.conv_out.weight", side);
    NN_W(cb, &v->w, "%s.conv_out.bias", side);
    NN_TRY(tensor_new_like(x, TENSOR_F32, &g, v->e));
    NN_TRY(tensor_group_norm(g, x, 32, nw, nb, 1e-6f, 1, v->e));
    NN_TRY(nn__conv3(out, g, cw, cb, v->e));
fail:
    tensor_free(g);
    return rc;
}

int vae_decode(struct patcher *vae, const struct vae_arch *cfg, const struct tensor *z,
               struct tensor *img, struct model_probe *probe, struct err *e)
{
    struct vae_ctx v = {.d = patcher_device(vae), .e = e, .probe = probe};
    struct tensor *h = NULL, *nh = NULL, *zz = NULL;
    int rc;
    char p[64];
    if (!v.d)
        return err_set(e, ERR_INVALID, "vae: model is not loaded (call mm_load_models first)");
    if (z->ndim != 4 || z->shape[1] != cfg->embed || img->ndim != 4 || img->shape[1] != 3 ||
        img->shape[0] != z->shape[0] || img->shape[2] != 8 * z->shape[2] ||
        img->shape[3] != 8 * z->shape[3])
        return err_set(e, ERR_INVALID, "vae decode: bad shapes (z [B,%d,h,w] -> img [B,3,8h,8w])",
                       cfg->embed);
    tensor_profile_reset();
    nn__w_init(&v.w, vae, MODEL_PREFIX_VAE, e);
    int64_t B = z->shape[0], H = z->shape[2], W = z->shape[3];
    const struct tensor *pw, *pb, *cw, *cb;
    NN_W(pw, &v.w, "post_quant_conv.weight");
    NN_W(pb, &v.w, "post_quant_conv.bias");
    NN_TRY(nn__new(v.d, &zz, e, 4, B, (int64_t)cfg->z, H, W));
    NN_TRY(nn__conv1(zz, z, pw, pb, e));
    NN_W(cw, &v.w, "decoder.conv_in.weight");
    NN_W(cb, &v.w, "decoder.conv_in.bias");
    NN_TRY(nn__new(v.d, &h, e, 4, B, (int64_t)cw->shape[0], H, W));
    NN_TRY(nn__conv3(h, zz, cw, cb, e));
    NN_TRY(mid(&v, "decoder", &h));
    nn__probe(probe, "decoder.mid", h);
    for (int l = 3; l >= 0; l--) {
        for (int b = 0; b < 3; b++) {
            snprintf(p, sizeof(p), "decoder.up.%d.block.%d", l, b);
            NN_TRY(resnet(&v, p, h, &nh));
            vae_keep(&v, h);
            h = nh;
            nh = NULL;
        }
        if (l > 0) {
            const struct tensor *uw, *ub;
            NN_W(uw, &v.w, "decoder.up.%d.upsample.conv.weight", l);
            NN_W(ub, &v.w, "decoder.up.%d.upsample.conv.bias", l);
            vae_spares_free(&v); /* dead at 4x fewer pixels: not held through the peak */
            /* one op: the CPU never builds the upsampled tensor (wino_up2.c) */
            struct tensor_conv2d_opts o = {.stride = 1, .pad_top = 1, .pad_bottom = 1,
                                           .pad_left = 1, .pad_right = 1};
            NN_TRY(nn__new(v.d, &nh, e, 4, B, uw->shape[0], 2 * h->shape[2], 2 * h->shape[3]));
            NN_TRY(tensor_conv2d_up2(nh, h, uw, ub, &o, e));
            tensor_free(h);
            h = nh;
            nh = NULL;
        }
        snprintf(p, sizeof(p), "decoder.up.%d", l);
        nn__probe(probe, p, h);
    }
    NN_TRY(norm_out_conv(&v, "decoder", h, img));
    nn__probe(probe, "decoder.out", img);
    tensor_profile_print("vae decode");
fail:
    nn__w_release(&v.w);
    vae_spares_free(&v);
    tensor_free(h);
    tensor_free(nh);
    tensor_free(zz);
    return rc;
}

int vae_encode(struct patcher *vae, const struct vae_arch *cfg, const struct tensor *img,
               struct tensor *mean, struct model_probe *probe, struct err *e)
{
    struct vae_ctx v = {.d = patcher_device(vae), .e = e, .probe = probe};
    struct tensor *h = NULL, *nh = NULL, *mo = NULL, *q = NULL, *sl = NULL;
    int rc;
    char p[64];
    if (!v.d)
        return err_set(e, ERR_INVALID, "vae: model is not loaded (call mm_load_models first)");
    if (img->ndim != 4 || img->shape[1] != 3 || img->shape[2] % 8 || img->shape[3] % 8 ||
        mean->ndim != 4 || mean->shape[0] != img->shape[0] || mean->shape[1] != cfg->embed ||
        mean->shape[2] * 8 != img->shape[2] || mean->shape[3] * 8 != img->shape[3])
        return err_set(e, ERR_INVALID,
                       "vae encode: bad shapes (img [B,3,H,W] with H, W multiples of 8 -> "
                       "mean [B,%d,H/8,W/8])",
                       cfg->embed);
    nn__w_init(&v.w, vae, MODEL_PREFIX_VAE, e);
    int64_t B = img->shape[0];
    const struct tensor *cw, *cb;
    NN_W(cw, &v.w, "encoder.conv_in.weight");
    NN_W(cb, &v.w, "encoder.conv_in.bias");
    NN_TRY(nn__new(v.d, &h, e, 4, B, (int64_t)cw->shape[0], img->shape[2], img->shape[3]));
    NN_TRY(nn__conv3(h, img, cw, cb, e));
    for (int l = 0; l < 4; l++) {
        for (int b = 0; b < 2; b++) {
            snprintf(p, sizeof(p), "encoder.down.%d.block.%d", l, b);
            NN_TRY(resnet(&v, p, h, &nh));
            vae_keep(&v, h);
            h = nh;
            nh = NULL;
        }
        if (l < 3) {
            /* Pad right and bottom by one, then stride 2 without padding (§4.2). */
            const struct tensor *dw, *db;
            NN_W(dw, &v.w, "encoder.down.%d.downsample.conv.weight", l);
            NN_W(db, &v.w, "encoder.down.%d.downsample.conv.bias", l);
            struct tensor_conv2d_opts o = {.stride = 2, .pad_bottom = 1, .pad_right = 1};
            int64_t ho, wo;
            tensor_conv2d_out_hw(&o, h->shape[2], h->shape[3], 3, 3, &ho, &wo);
            vae_spares_free(&v); /* this level's shape ends here */
            NN_TRY(nn__new(v.d, &nh, e, 4, B, h->shape[1], ho, wo));
            NN_TRY(tensor_conv2d(nh, h, dw, db, &o, e));
            tensor_free(h);
            h = nh;
            nh = NULL;
        }
        snprintf(p, sizeof(p), "encoder.down.%d", l);
        nn__probe(probe, p, h);
    }
    NN_TRY(mid(&v, "encoder", &h));
    nn__probe(probe, "encoder.mid", h);
    NN_TRY(nn__new(v.d, &mo, e, 4, B, (int64_t)(2 * cfg->z), h->shape[2], h->shape[3]));
    NN_TRY(norm_out_conv(&v, "encoder", h, mo));
    const struct tensor *qw, *qb;
    NN_W(qw, &v.w, "quant_conv.weight");
    NN_W(qb, &v.w, "quant_conv.bias");
    NN_TRY(nn__new(v.d, &q, e, 4, B, (int64_t)(2 * cfg->embed), h->shape[2], h->shape[3]));
    NN_TRY(nn__conv1(q, mo, qw, qb, e));
    nn__probe(probe, "moments", q);
    /* ComfyUI's VAEEncode returns the distribution's mean: channels 0..embed-1 (§4.4). */
    NN_TRY(tensor_slice(q, 1, 0, cfg->embed, &sl, e));
    NN_TRY(tensor_copy(mean, sl, e));
fail:
    nn__w_release(&v.w);
    vae_spares_free(&v);
    tensor_free(h);
    tensor_free(nh);
    tensor_free(mo);
    tensor_free(q);
    tensor_free(sl);
    return rc;
}

/*
 * The activation peak of vae_decode / encode, by walking the levels as the code
 * allocates (floats): a ResnetBlock holds its input, GN(input), conv1 out, then
 * GN(h) and conv2 out (the shortcut reuses conv1 out's tensor; on the CPU the fused
 * GN + conv makes no GN tensor, elsewhere it may): max(2 in + out, in + 3 out), an
 * over-estimate on the CPU by one out; an upsample holds
 * its input, the resized tensor and the conv output (tensor_conv2d_up2 makes no
 * resized tensor on the CPU, but other backends do); the mid attention ~7 C per
 * pixel. Encode is bounded by the same walk at the same resolutions.
 */
size_t vae_plan_bytes(const struct vae_arch *c, int b, int h, int w)
{
    double px = (double)h * w, cin = (double)c->ch * c->mult[3], peak = 7 * cin * px;
    for (int l = 3; l >= 0; l--) {
        double co = (double)c->ch * c->mult[l];
        for (int k = 0; k < 3; k++) {
            peak = fmax(peak, fmax(2 * cin + co, cin + 3 * co) * px);
            cin = co;
        }
        if (l > 0) {
            peak = fmax(peak, co * px + 2 * co * 4 * px);
            px *= 4;
        }
    }
    peak = fmax(peak, 2 * cin * px);
    return (size_t)(peak * b * 4.0) + ((size_t)1 << 20);
}

double vae_decode_flops(const struct vae_arch *c, int b, int h, int w)
{
    double fl = 0, px = (double)h * w, ch = (double)c->ch * c->mult[3];
#define CONV(ci, co, k, p) (2.0 * (ci) * (co) * (k) * (k) * (p))
#define RES(ci, co, p) (CONV(ci, co, 3, p) + CONV(co, co, 3, p) + ((ci) != (co) ? CONV(ci, co, 1, p) : 0))
    fl +=
        CONV(c->z, ch, 3, px) + 2 * RES(ch, ch, px) + 4 * CONV(ch, ch, 1, px) + 4.0 * px * px * ch;
    for (int l = 3; l >= 0; l--) {
        double co = (double)c->ch * c->mult[l];
        for (int k = 0; k < 3; k++) {
            fl += RES(ch, co, px);
            ch = co;
        }
        if (l > 0) {
            px *= 4;
            fl += CONV(ch, ch, 3, px);
        }
    }
    fl += CONV(ch, 3, 3, px);
    return fl * b;
#undef CONV
#undef RES
}
