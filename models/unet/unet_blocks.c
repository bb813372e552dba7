/*
 * The UNet block list from its knobs (see unet_arch.h), in ComfyUI's
 * openaimodel.UNetModel order: input blocks (conv_in, per level ResBlock [+ ST] and a
 * downsampler), the middle block, output blocks (per level one more ResBlock than on
 * the input side, each eating a skip, [+ ST], and an upsampler), out.
 */
#include "unet_arch.h"

#include <stdarg.h>
#include <stdio.h>

int unet_arch_heads(const struct unet_arch *a, int ch)
{
    return a->heads ? a->heads : ch / a->head_dim;
}

static struct unet_block *add(struct unet_blocks *l, enum unet_op op, int ci, int co, int level,
                              unsigned flags, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
static struct unet_block *add(struct unet_blocks *l, enum unet_op op, int ci, int co, int level,
                              unsigned flags, const char *fmt, ...)
{
    if (l->n >= UNET_MAX_BLOCKS)
        return &l->v[UNET_MAX_BLOCKS - 1]; /* unreachable for UNET_MAX_LEVELS levels */
    struct unet_block *b = &l->v[l->n++];
    *b = (struct unet_block){.op = op, .ci = ci, .co = co, .level = level, .flags = flags};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->name, sizeof(b->name), fmt, ap);
    va_end(ap);
    return b;
}

static void add_st(struct unet_blocks *l, const struct unet_arch *a, int ch, int level, int depth,
                   unsigned flags, const char *name)
{
    struct unet_block *b = add(l, UNET_OP_ST, ch, ch, level, flags, "%s", name);
    b->depth = depth;
    b->heads = unet_arch_heads(a, ch);
}

static void build_input(const struct unet_arch *a, struct unet_blocks *l, int *skips, int *ns,
                        int *ch_io)
{
    int mc = a->model_ch, ch = mc, idx = 1;
    char n[32];
    add(l, UNET_OP_CONV_IN, a->in_ch, mc, 0, UNET_BLOCK_PUSH | UNET_BLOCK_PROBE | UNET_BLOCK_IN_END,
        "input_blocks.0.0");
    skips[(*ns)++] = ch;
    for (int lv = 0; lv < a->levels; lv++) {
        int st = a->depth[lv] > 0;
        for (int r = 0; r < a->res_blocks[lv]; r++, idx++) {
            int co = a->mult[lv] * mc;
            add(l, UNET_OP_RES, ch, co, lv,
                UNET_BLOCK_PUSH | (st ? 0 : UNET_BLOCK_PROBE | UNET_BLOCK_IN_END),
                "input_blocks.%d.0", idx);
            ch = co;
            if (st) {
                snprintf(n, sizeof(n), "input_blocks.%d.1", idx);
                add_st(l, a, ch, lv, a->depth[lv], UNET_BLOCK_PROBE | UNET_BLOCK_IN_END, n);
            }
            skips[(*ns)++] = ch;
        }
        if (lv < a->levels - 1) {
            add(l, UNET_OP_DOWN, ch, ch, lv + 1,
                UNET_BLOCK_PUSH | UNET_BLOCK_PROBE | UNET_BLOCK_IN_END, "input_blocks.%d.0",
                idx++);
            skips[(*ns)++] = ch;
        }
    }
    *ch_io = ch;
}

static void build_output(const struct unet_arch *a, struct unet_blocks *l, const int *skips, int ns,
                         int ch)
{
    int mc = a->model_ch, idx = 0;
    char n[32];
    for (int lv = a->levels - 1; lv >= 0; lv--) {
        for (int r = 0; r <= a->res_blocks[lv]; r++, idx++) {
            int co = a->mult[lv] * mc, sub = 1;
            add(l, UNET_OP_RES, ch + skips[--ns], co, lv, UNET_BLOCK_POP, "output_blocks.%d.0",
                idx);
            ch = co;
            if (a->depth[lv] > 0) {
                snprintf(n, sizeof(n), "output_blocks.%d.1", idx);
                add_st(l, a, ch, lv, a->depth[lv], 0, n);
                sub = 2;
            }
            if (lv > 0 && r == a->res_blocks[lv])
                add(l, UNET_OP_UP, ch, ch, lv, 0, "output_blocks.%d.%d", idx, sub);
            l->v[l->n - 1].flags |= UNET_BLOCK_PROBE;
        }
    }
    add(l, UNET_OP_OUT, ch, a->out_ch, 0, 0, "out");
}

void unet_blocks_build(const struct unet_arch *a, struct unet_blocks *l)
{
    int skips[UNET_MAX_BLOCKS], ns = 0, ch, te = 4 * a->model_ch;
    l->n = 0;
    add(l, UNET_OP_TIME_EMBED, a->model_ch, te, 0, 0, "time_embed");
    if (a->adm_in > 0)
        add(l, UNET_OP_LABEL_EMB, a->adm_in, te, 0, 0, "label_emb");
    build_input(a, l, skips, &ns, &ch);
    int lv = a->levels - 1;
    add(l, UNET_OP_RES, ch, ch, lv, 0, "middle_block.0");
    add_st(l, a, ch, lv, a->depth_mid, 0, "middle_block.1");
    add(l, UNET_OP_RES, ch, ch, lv, UNET_BLOCK_PROBE | UNET_BLOCK_MID_END, "middle_block.2");
    build_output(a, l, skips, ns, ch);
}
