/*
 * The ControlNet's tensors (see controlnet.h): the UNet trunk's walk
 * (unet__walk_trunk) with the hint encoder after input_blocks.0 and a zero conv after
 * every input block and the middle block, each its own patcher layer, in the order
 * controlnet_eval acquires them.
 */
#include "controlnet_impl.h"

const int controlnet_hint_widths[CONTROLNET_HINT_CONVS - 1] = {16, 16, 32, 32, 96, 96, 256};

struct cn_walk {
    int hint_ch, model_ch, union_types;
};

static void hint_keys(struct key_walk *w, int hint_ch, int model_ch)
{
    char n[48];
    int ci = hint_ch;
    key__layer(w, "input_hint_block");
    for (int i = 0; i < CONTROLNET_HINT_CONVS; i++) {
        int co = i < CONTROLNET_HINT_CONVS - 1 ? controlnet_hint_widths[i] : model_ch;
        key__name(n, sizeof(n), "input_hint_block.%d", 2 * i);
        key__wb(w, n, KEY_SHAPE(co, ci, 3, 3));
        ci = co;
    }
}

static void after_block(struct key_walk *w, const struct unet_block *b, int skip, void *user)
{
    const struct cn_walk *c = user;
    char n[48];
    if (skip == 0)
        hint_keys(w, c->hint_ch, c->model_ch);
    if (skip == 0 && c->union_types) /* used next to the hint encoder (controlnet.c) */
        controlnet__union_keys(w, c->model_ch, c->union_types);
    if (skip >= 0) {
        key__layer(w, "zero_convs.%d", skip);
        key__name(n, sizeof(n), "zero_convs.%d.0", skip);
    } else {
        key__layer(w, "middle_block_out");
        key__name(n, sizeof(n), "middle_block_out.0");
    }
    key__wb(w, n, KEY_SHAPE(b->co, b->co, 1, 1));
}

size_t controlnet_layout_union(const struct model_config *cfg, int hint_ch, int union_types,
                               void (*fn)(void *user, const struct model_key *k), void *user)
{
    struct key_walk w = {.fn = fn, .user = user, .comp = MODEL_UNET, .prefix = MODEL_PREFIX_UNET};
    struct cn_walk c = {.hint_ch = hint_ch, .model_ch = cfg->unet.model_ch,
                        .union_types = union_types};
    unet__walk_trunk(&w, &cfg->unet, after_block, &c);
    return w.n;
}

size_t controlnet_layout(const struct model_config *cfg, int hint_ch,
                         void (*fn)(void *user, const struct model_key *k), void *user)
{
    return controlnet_layout_union(cfg, hint_ch, 0, fn, user);
}
