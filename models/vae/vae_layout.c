/*
 * The VAE's tensors (sd15.md §4) and the patcher layers they stream in: a
 * ResnetBlock, the mid attention, a down/upsampler, conv_in, the norm_out +
 * conv_out pair and each quant conv.
 */
#include "vae_arch.h"

#include "model_layout_impl.h"

static void vae_res(struct key_walk *w, const char *p, int64_t ci, int64_t co)
{
    char n[128];
    key__layer(w, "%s", p);
    key__name(n, sizeof(n), "%s.norm1", p);
    key__norm(w, n, ci);
    key__name(n, sizeof(n), "%s.conv1", p);
    key__wb(w, n, KEY_SHAPE(co, ci, 3, 3));
    key__name(n, sizeof(n), "%s.norm2", p);
    key__norm(w, n, co);
    key__name(n, sizeof(n), "%s.conv2", p);
    key__wb(w, n, KEY_SHAPE(co, co, 3, 3));
    if (ci != co) {
        key__name(n, sizeof(n), "%s.nin_shortcut", p);
        key__wb(w, n, KEY_SHAPE(co, ci, 1, 1));
    }
}

static void vae_mid(struct key_walk *w, const char *p, int64_t ch)
{
    char n[128];
    key__name(n, sizeof(n), "%s.mid.block_1", p);
    vae_res(w, n, ch, ch);
    key__layer(w, "%s.mid.attn_1", p);
    key__name(n, sizeof(n), "%s.mid.attn_1.norm", p);
    key__norm(w, n, ch);
    static const char *const qkv[] = {"q", "k", "v", "proj_out"};
    for (int i = 0; i < 4; i++) {
        key__name(n, sizeof(n), "%s.mid.attn_1.%s", p, qkv[i]);
        key__wb(w, n, KEY_SHAPE(ch, ch, 1, 1));
    }
    key__name(n, sizeof(n), "%s.mid.block_2", p);
    vae_res(w, n, ch, ch);
}

static void walk_encoder(struct key_walk *w, const struct vae_arch *a)
{
    int64_t ch = a->ch, z = a->z, ci = ch;
    char n[128];
    key__layer(w, "encoder.conv_in");
    key__wb(w, "encoder.conv_in", KEY_SHAPE(ch, 3, 3, 3));
    for (int l = 0; l < 4; l++) {
        int64_t co = a->mult[l] * ch;
        for (int b = 0; b < 2; b++) {
            key__name(n, sizeof(n), "encoder.down.%d.block.%d", l, b);
            vae_res(w, n, ci, co);
            ci = co;
        }
        if (l < 3) {
            key__layer(w, "encoder.down.%d.downsample", l);
            key__name(n, sizeof(n), "encoder.down.%d.downsample.conv", l);
            key__wb(w, n, KEY_SHAPE(co, co, 3, 3));
        }
    }
    vae_mid(w, "encoder", ci);
    key__layer(w, "encoder.out");
    key__norm(w, "encoder.norm_out", ci);
    key__wb(w, "encoder.conv_out", KEY_SHAPE(2 * z, ci, 3, 3));
}

static void walk_decoder(struct key_walk *w, const struct vae_arch *a)
{
    int64_t ch = a->ch, ci = a->mult[3] * ch;
    char n[128];
    key__layer(w, "decoder.conv_in");
    key__wb(w, "decoder.conv_in", KEY_SHAPE(ci, a->z, 3, 3));
    vae_mid(w, "decoder", ci);
    for (int l = 3; l >= 0; l--) {
        int64_t co = a->mult[l] * ch;
        for (int b = 0; b < 3; b++) {
            key__name(n, sizeof(n), "decoder.up.%d.block.%d", l, b);
            vae_res(w, n, ci, co);
            ci = co;
        }
        if (l > 0) {
            key__layer(w, "decoder.up.%d.upsample", l);
            key__name(n, sizeof(n), "decoder.up.%d.upsample.conv", l);
            key__wb(w, n, KEY_SHAPE(co, co, 3, 3));
        }
    }
    key__layer(w, "decoder.out");
    key__norm(w, "decoder.norm_out", ci);
    key__wb(w, "decoder.conv_out", KEY_SHAPE(3, ci, 3, 3));
}

void vae__walk(struct key_walk *w, const struct vae_arch *a)
{
    walk_encoder(w, a);
    key__layer(w, "quant_conv");
    key__wb(w, "quant_conv", KEY_SHAPE(2 * a->embed, 2 * a->z, 1, 1));
    key__layer(w, "post_quant_conv");
    key__wb(w, "post_quant_conv", KEY_SHAPE(a->embed, a->embed, 1, 1));
    walk_decoder(w, a);
}
