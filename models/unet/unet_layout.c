/*
 * The UNet's tensors, one patcher layer per block of the list (unet_arch.h), in
 * ComfyUI/LDM openaimodel names (sd15.md §3, sdxl.md §6).
 */
#include "unet_arch.h"

#include "model_layout_impl.h"
#include "unet_impl.h"

const char *const unet__res_diffusers[UNET_RES_MODULES][2] = {
    {"in_layers.0", "norm1"},   {"in_layers.2", "conv1"},  {"emb_layers.1", "time_emb_proj"},
    {"out_layers.0", "norm2"},  {"out_layers.3", "conv2"}, {"skip_connection", "conv_shortcut"},
};

static void res_keys(struct key_walk *w, const char *p, int64_t ci, int64_t co, int64_t te)
{
    char n[128];
    key__name(n, sizeof(n), "%s.in_layers.0", p);
    key__norm(w, n, ci);
    key__name(n, sizeof(n), "%s.in_layers.2", p);
    key__wb(w, n, KEY_SHAPE(co, ci, 3, 3));
    key__name(n, sizeof(n), "%s.emb_layers.1", p);
    key__wb(w, n, KEY_SHAPE(co, te));
    key__name(n, sizeof(n), "%s.out_layers.0", p);
    key__norm(w, n, co);
    key__name(n, sizeof(n), "%s.out_layers.3", p);
    key__wb(w, n, KEY_SHAPE(co, co, 3, 3));
    if (ci != co) {
        key__name(n, sizeof(n), "%s.skip_connection", p);
        key__wb(w, n, KEY_SHAPE(co, ci, 1, 1));
    }
}

/* proj_in / proj_out: a 1x1 conv [ch, ch, 1, 1], or a Linear [ch, ch] (linear_proj). */
static void proj_keys(struct key_walk *w, const char *p, const char *which, int64_t ch, int linear)
{
    char n[128];
    key__name(n, sizeof(n), "%s.%s", p, which);
    if (linear)
        key__wb(w, n, KEY_SHAPE(ch, ch));
    else
        key__wb(w, n, KEY_SHAPE(ch, ch, 1, 1));
}

static void st_keys(struct key_walk *w, const char *p, int64_t ch, int depth,
                    const struct unet_arch *a)
{
    char n[160], o[180];
    key__name(n, sizeof(n), "%s.norm", p);
    key__norm(w, n, ch);
    proj_keys(w, p, "proj_in", ch, a->linear_proj);
    for (int d = 0; d < depth; d++) {
        /* One patcher layer per transformer block (proj_out goes with the last): a
         * whole depth-10 SDXL transformer is 1.4 GB at f32, so a streaming ring of
         * k+1 such slots would not fit a small budget, and the planner fell back to
         * one slot with no prefetch (issue 13). Keys stay in execution order. */
        key__layer(w, "%s.transformer_blocks.%d", p, d);
        for (int k = 1; k <= 2; k++) {
            key__name(n, sizeof(n), "%s.transformer_blocks.%d.attn%d", p, d, k);
            int64_t kin = k == 1 ? ch : a->ctx_dim;
            key__emit(w, MODEL_INIT_WEIGHT, KEY_SHAPE(ch, ch), "%s.to_q.weight", n);
            key__emit(w, MODEL_INIT_WEIGHT, KEY_SHAPE(ch, kin), "%s.to_k.weight", n);
            key__emit(w, MODEL_INIT_WEIGHT, KEY_SHAPE(ch, kin), "%s.to_v.weight", n);
            key__name(o, sizeof(o), "%s.to_out.0", n);
            key__wb(w, o, KEY_SHAPE(ch, ch));
        }
        key__name(n, sizeof(n), "%s.transformer_blocks.%d.ff.net.0.proj", p, d);
        key__wb(w, n, KEY_SHAPE(8 * ch, ch));
        key__name(n, sizeof(n), "%s.transformer_blocks.%d.ff.net.2", p, d);
        key__wb(w, n, KEY_SHAPE(ch, 4 * ch));
        for (int k = 1; k <= 3; k++) {
            key__name(n, sizeof(n), "%s.transformer_blocks.%d.norm%d", p, d, k);
            key__norm(w, n, ch);
        }
    }
    proj_keys(w, p, "proj_out", ch, a->linear_proj);
}

static void block_keys(struct key_walk *w, const struct unet_arch *a, const struct unet_block *b)
{
    int64_t te = 4 * (int64_t)a->model_ch, ci = b->ci, co = b->co;
    char n[64];
    key__layer(w, "%s", b->name);
    switch (b->op) {
    case UNET_OP_TIME_EMBED:
        key__wb(w, "time_embed.0", KEY_SHAPE(te, ci));
        key__wb(w, "time_embed.2", KEY_SHAPE(te, te));
        break;
    case UNET_OP_LABEL_EMB:
        key__wb(w, "label_emb.0.0", KEY_SHAPE(te, ci));
        key__wb(w, "label_emb.0.2", KEY_SHAPE(te, te));
        break;
    case UNET_OP_CONV_IN:
        key__wb(w, b->name, KEY_SHAPE(co, ci, 3, 3));
        break;
    case UNET_OP_RES:
        res_keys(w, b->name, ci, co, te);
        break;
    case UNET_OP_ST:
        st_keys(w, b->name, co, b->depth, a);
        break;
    case UNET_OP_DOWN:
        key__name(n, sizeof(n), "%s.op", b->name);
        key__wb(w, n, KEY_SHAPE(co, co, 3, 3));
        break;
    case UNET_OP_UP:
        key__name(n, sizeof(n), "%s.conv", b->name);
        key__wb(w, n, KEY_SHAPE(co, co, 3, 3));
        break;
    case UNET_OP_OUT:
        key__norm(w, "out.0", ci);
        key__wb(w, "out.2", KEY_SHAPE(co, ci, 3, 3));
        break;
    }
}

void unet__walk(struct key_walk *w, const struct unet_arch *a)
{
    struct unet_blocks bl;
    unet_blocks_build(a, &bl);
    for (int i = 0; i < bl.n; i++)
        block_keys(w, a, &bl.v[i]);
}

void unet__walk_trunk(struct key_walk *w, const struct unet_arch *a,
                      void (*after)(struct key_walk *w, const struct unet_block *b, int skip,
                                    void *user),
                      void *user)
{
    struct unet_blocks bl;
    int skip = 0;
    unet_blocks_build(a, &bl);
    for (int i = 0; i < bl.n; i++) {
        block_keys(w, a, &bl.v[i]);
        if (bl.v[i].flags & UNET_BLOCK_IN_END)
            after(w, &bl.v[i], skip++, user);
        if (bl.v[i].flags & UNET_BLOCK_MID_END) {
            after(w, &bl.v[i], -1, user);
            break;
        }
    }
}
