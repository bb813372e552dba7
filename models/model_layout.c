/*
 * Tensor layout from the configuration knobs (see model_config.h).
 * The walk mirrors the forward passes of sd15.md §2.9, §3.6 and §4.3-4.4.
 */
#include "model_config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "family.h"

const char *model_component_name(enum model_component comp)
{
    switch (comp) {
    case MODEL_UNET: return "unet";
    case MODEL_VAE: return "vae";
    case MODEL_CLIP: return "clip";
    default: return "?";
    }
}

struct walk {
    void (*fn)(void *user, const struct model_key *k);
    void *user;
    size_t n;
    enum model_component comp;
    const char *prefix;
};

static void __attribute__((format(printf, 5, 6)))
emit(struct walk *w, enum model_init init, int ndim, const int64_t *shape, const char *fmt, ...)
{
    struct model_key k;
    memset(&k, 0, sizeof(k));
    int len = snprintf(k.name, sizeof(k.name), "%s", w->prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k.name + len, sizeof(k.name) - (size_t)len, fmt, ap);
    va_end(ap);
    k.comp = w->comp;
    k.init = init;
    k.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        k.shape[i] = shape[i];
    w->fn(w->user, &k);
    w->n++;
}

#define S(...) ((const int64_t[]){__VA_ARGS__})
#define NSHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), S(__VA_ARGS__)

/* A weight with its bias: W[shape], b[shape[0]]. */
static void wb(struct walk *w, const char *name, int ndim, const int64_t *shape)
{
    emit(w, MODEL_INIT_WEIGHT, ndim, shape, "%s.weight", name);
    emit(w, MODEL_INIT_BIAS, 1, shape, "%s.bias", name);
}

static void norm(struct walk *w, const char *name, int64_t c)
{
    emit(w, MODEL_INIT_NORM, 1, S(c), "%s.weight", name);
    emit(w, MODEL_INIT_BIAS, 1, S(c), "%s.bias", name);
}

static void nm(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void nm(char *out, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, size, fmt, ap);
    va_end(ap);
}

/* ---- CLIP -------------------------------------------------------------------------- */

static void walk_clip(struct walk *w, const struct model_config *c)
{
    int64_t d = c->clip_width, m = c->clip_mlp;
    char n[128];
    emit(w, MODEL_INIT_EMBED, NSHAPE(c->clip_vocab, d), "embeddings.token_embedding.weight");
    emit(w, MODEL_INIT_EMBED, NSHAPE(c->clip_pos, d), "embeddings.position_embedding.weight");
    static const char *const proj[] = {"q_proj", "k_proj", "v_proj", "out_proj"};
    for (int l = 0; l < c->clip_layers; l++) {
        for (int p = 0; p < 4; p++) {
            nm(n, sizeof(n), "encoder.layers.%d.self_attn.%s", l, proj[p]);
            wb(w, n, NSHAPE(d, d));
        }
        nm(n, sizeof(n), "encoder.layers.%d.layer_norm1", l);
        norm(w, n, d);
        nm(n, sizeof(n), "encoder.layers.%d.mlp.fc1", l);
        wb(w, n, NSHAPE(m, d));
        nm(n, sizeof(n), "encoder.layers.%d.mlp.fc2", l);
        wb(w, n, NSHAPE(d, m));
        nm(n, sizeof(n), "encoder.layers.%d.layer_norm2", l);
        norm(w, n, d);
    }
    norm(w, "final_layer_norm", d);
}

/* ---- UNet -------------------------------------------------------------------------- */

static void unet_res(struct walk *w, const char *p, int64_t ci, int64_t co, int64_t te)
{
    char n[128];
    nm(n, sizeof(n), "%s.in_layers.0", p);
    norm(w, n, ci);
    nm(n, sizeof(n), "%s.in_layers.2", p);
    wb(w, n, NSHAPE(co, ci, 3, 3));
    nm(n, sizeof(n), "%s.emb_layers.1", p);
    wb(w, n, NSHAPE(co, te));
    nm(n, sizeof(n), "%s.out_layers.0", p);
    norm(w, n, co);
    nm(n, sizeof(n), "%s.out_layers.3", p);
    wb(w, n, NSHAPE(co, co, 3, 3));
    if (ci != co) {
        nm(n, sizeof(n), "%s.skip_connection", p);
        wb(w, n, NSHAPE(co, ci, 1, 1));
    }
}

static void unet_st(struct walk *w, const char *p, int64_t ch, const struct model_config *c)
{
    char n[160];
    int64_t ctx = c->ctx_dim;
    nm(n, sizeof(n), "%s.norm", p);
    norm(w, n, ch);
    nm(n, sizeof(n), "%s.proj_in", p);
    wb(w, n, NSHAPE(ch, ch, 1, 1));
    for (int d = 0; d < c->unet_depth; d++) {
        for (int a = 1; a <= 2; a++) {
            nm(n, sizeof(n), "%s.transformer_blocks.%d.attn%d", p, d, a);
            int64_t kin = a == 1 ? ch : ctx;
            emit(w, MODEL_INIT_WEIGHT, NSHAPE(ch, ch), "%s.to_q.weight", n);
            emit(w, MODEL_INIT_WEIGHT, NSHAPE(ch, kin), "%s.to_k.weight", n);
            emit(w, MODEL_INIT_WEIGHT, NSHAPE(ch, kin), "%s.to_v.weight", n);
            char o[180];
            nm(o, sizeof(o), "%s.to_out.0", n);
            wb(w, o, NSHAPE(ch, ch));
        }
        nm(n, sizeof(n), "%s.transformer_blocks.%d.ff.net.0.proj", p, d);
        wb(w, n, NSHAPE(8 * ch, ch));
        nm(n, sizeof(n), "%s.transformer_blocks.%d.ff.net.2", p, d);
        wb(w, n, NSHAPE(ch, 4 * ch));
        for (int k = 1; k <= 3; k++) {
            nm(n, sizeof(n), "%s.transformer_blocks.%d.norm%d", p, d, k);
            norm(w, n, ch);
        }
    }
    nm(n, sizeof(n), "%s.proj_out", p);
    wb(w, n, NSHAPE(ch, ch, 1, 1));
}

static void walk_unet(struct walk *w, const struct model_config *c)
{
    int64_t mc = c->unet_mc, te = 4 * mc;
    char n[128];
    wb(w, "time_embed.0", NSHAPE(te, mc));
    wb(w, "time_embed.2", NSHAPE(te, te));
    wb(w, "input_blocks.0.0", NSHAPE(mc, c->unet_in_ch, 3, 3));
    int64_t skips[16];
    int ns = 0, idx = 1;
    int64_t ch = mc;
    skips[ns++] = ch;
    for (int l = 0; l < 4; l++) {
        for (int r = 0; r < 2; r++) {
            int64_t co = c->unet_mult[l] * mc;
            nm(n, sizeof(n), "input_blocks.%d.0", idx);
            unet_res(w, n, ch, co, te);
            ch = co;
            if (l < 3) {
                nm(n, sizeof(n), "input_blocks.%d.1", idx);
                unet_st(w, n, ch, c);
            }
            skips[ns++] = ch;
            idx++;
        }
        if (l < 3) {
            emit(w, MODEL_INIT_WEIGHT, NSHAPE(ch, ch, 3, 3), "input_blocks.%d.0.op.weight", idx);
            emit(w, MODEL_INIT_BIAS, NSHAPE(ch), "input_blocks.%d.0.op.bias", idx);
            skips[ns++] = ch;
            idx++;
        }
    }
    unet_res(w, "middle_block.0", ch, ch, te);
    unet_st(w, "middle_block.1", ch, c);
    unet_res(w, "middle_block.2", ch, ch, te);
    idx = 0;
    for (int l = 3; l >= 0; l--) {
        for (int r = 0; r < 3; r++) {
            int64_t skip = skips[--ns], co = c->unet_mult[l] * mc;
            nm(n, sizeof(n), "output_blocks.%d.0", idx);
            unet_res(w, n, ch + skip, co, te);
            ch = co;
            int sub = 1;
            if (l < 3) {
                nm(n, sizeof(n), "output_blocks.%d.1", idx);
                unet_st(w, n, ch, c);
                sub = 2;
            }
            if (l > 0 && r == 2) {
                emit(w, MODEL_INIT_WEIGHT, NSHAPE(ch, ch, 3, 3), "output_blocks.%d.%d.conv.weight",
                     idx, sub);
                emit(w, MODEL_INIT_BIAS, NSHAPE(ch), "output_blocks.%d.%d.conv.bias", idx, sub);
            }
            idx++;
        }
    }
    norm(w, "out.0", ch);
    wb(w, "out.2", NSHAPE(c->unet_out_ch, ch, 3, 3));
}

/* ---- VAE --------------------------------------------------------------------------- */

static void vae_res(struct walk *w, const char *p, int64_t ci, int64_t co)
{
    char n[128];
    nm(n, sizeof(n), "%s.norm1", p);
    norm(w, n, ci);
    nm(n, sizeof(n), "%s.conv1", p);
    wb(w, n, NSHAPE(co, ci, 3, 3));
    nm(n, sizeof(n), "%s.norm2", p);
    norm(w, n, co);
    nm(n, sizeof(n), "%s.conv2", p);
    wb(w, n, NSHAPE(co, co, 3, 3));
    if (ci != co) {
        nm(n, sizeof(n), "%s.nin_shortcut", p);
        wb(w, n, NSHAPE(co, ci, 1, 1));
    }
}

static void vae_mid(struct walk *w, const char *p, int64_t ch)
{
    char n[128];
    nm(n, sizeof(n), "%s.mid.block_1", p);
    vae_res(w, n, ch, ch);
    nm(n, sizeof(n), "%s.mid.attn_1.norm", p);
    norm(w, n, ch);
    static const char *const qkv[] = {"q", "k", "v", "proj_out"};
    for (int i = 0; i < 4; i++) {
        nm(n, sizeof(n), "%s.mid.attn_1.%s", p, qkv[i]);
        wb(w, n, NSHAPE(ch, ch, 1, 1));
    }
    nm(n, sizeof(n), "%s.mid.block_2", p);
    vae_res(w, n, ch, ch);
}

static void walk_vae(struct walk *w, const struct model_config *c)
{
    int64_t ch = c->vae_ch, z = c->vae_z;
    char n[128];
    wb(w, "encoder.conv_in", NSHAPE(ch, 3, 3, 3));
    int64_t ci = ch;
    for (int l = 0; l < 4; l++) {
        int64_t co = c->vae_mult[l] * ch;
        for (int b = 0; b < 2; b++) {
            nm(n, sizeof(n), "encoder.down.%d.block.%d", l, b);
            vae_res(w, n, ci, co);
            ci = co;
        }
        if (l < 3) {
            nm(n, sizeof(n), "encoder.down.%d.downsample.conv", l);
            wb(w, n, NSHAPE(co, co, 3, 3));
        }
    }
    vae_mid(w, "encoder", ci);
    norm(w, "encoder.norm_out", ci);
    wb(w, "encoder.conv_out", NSHAPE(2 * z, ci, 3, 3));
    wb(w, "quant_conv", NSHAPE(2 * c->vae_embed, 2 * z, 1, 1));
    wb(w, "post_quant_conv", NSHAPE(c->vae_embed, c->vae_embed, 1, 1));
    ci = c->vae_mult[3] * ch;
    wb(w, "decoder.conv_in", NSHAPE(ci, z, 3, 3));
    vae_mid(w, "decoder", ci);
    for (int l = 3; l >= 0; l--) {
        int64_t co = c->vae_mult[l] * ch;
        for (int b = 0; b < 3; b++) {
            nm(n, sizeof(n), "decoder.up.%d.block.%d", l, b);
            vae_res(w, n, ci, co);
            ci = co;
        }
        if (l > 0) {
            nm(n, sizeof(n), "decoder.up.%d.upsample.conv", l);
            wb(w, n, NSHAPE(co, co, 3, 3));
        }
    }
    norm(w, "decoder.norm_out", ci);
    wb(w, "decoder.conv_out", NSHAPE(3, ci, 3, 3));
}

size_t model_layout_build(const struct model_config *c,
                         void (*fn)(void *user, const struct model_key *k), void *user)
{
    struct walk w = {.fn = fn, .user = user};
    w.comp = MODEL_CLIP;
    w.prefix = SD15_PREFIX_CLIP;
    walk_clip(&w, c);
    w.comp = MODEL_UNET;
    w.prefix = MODEL_PREFIX_UNET;
    walk_unet(&w, c);
    w.comp = MODEL_VAE;
    w.prefix = MODEL_PREFIX_VAE;
    walk_vae(&w, c);
    return w.n;
}
