/*
 * unet_arch — a UNet (ComfyUI's openaimodel.UNetModel) described by its knobs, and
 * the one block list built from them.
 *
 * Everything that depends on the UNet's structure walks the list from
 * unet_blocks_build(): the forward pass (unet.c), the activation plan and the FLOP
 * count (unet_plan.c), the tensor-name layout (unet_layout.c) and with it the
 * patcher layers the weights are streamed by (one block = one layer, named by the
 * block). A family is then a set of knob values: SD1.5 is 4 levels of 2 ResBlocks
 * with transformer depth 1,1,1,0 and 8 heads; SDXL 3 levels with depth 0,2,10,
 * 64-wide heads, linear projections and an ADM input (sdxl.md §6).
 *
 * Pure functions; any thread.
 */
#ifndef LATENTD_MODELS_UNET_ARCH_H
#define LATENTD_MODELS_UNET_ARCH_H

#define UNET_MAX_LEVELS 4
#define UNET_MAX_BLOCKS 96

struct unet_arch {
    int in_ch;                       /* latent channels in: 4 */
    int out_ch;                      /* latent channels out: 4 */
    int model_ch;                    /* model_channels: 320 */
    int levels;                      /* resolution levels: 4 (SD1.5), 3 (SDXL) */
    int mult[UNET_MAX_LEVELS];       /* channel_mult: 1,2,4,4 / 1,2,4 */
    int res_blocks[UNET_MAX_LEVELS]; /* ResBlocks per level on the input side: 2 */
    int depth[UNET_MAX_LEVELS]; /* transformer blocks per SpatialTransformer: 1,1,1,0 / 0,2,10 */
    int depth_mid;              /* the middle block's: 1 / 10 */
    int heads;                  /* fixed head count (SD1.x: 8), or 0 ... */
    int head_dim;               /* ... fixed head width instead (SDXL: 64) */
    int ctx_dim;                /* cross-attention context width: 768 / 2048 */
    int adm_in;                 /* label_emb input width (SDXL 2816), 0 = none */
    int linear_proj;            /* proj_in/proj_out are Linear (SDXL), not 1x1 convs */
};

enum unet_op {
    UNET_OP_TIME_EMBED, /* time_embed.0/.2 on the sinusoidal timestep embedding */
    UNET_OP_LABEL_EMB,  /* label_emb.0.0/.0.2 on the ADM vector, added to it */
    UNET_OP_CONV_IN,    /* input_blocks.0.0 */
    UNET_OP_RES,        /* ResBlock (sd15.md §3.3) */
    UNET_OP_ST,         /* SpatialTransformer (§3.4), in place */
    UNET_OP_DOWN,       /* stride-2 conv (§3.5) */
    UNET_OP_UP,         /* nearest resize to the next skip's size, conv (§3.5) */
    UNET_OP_OUT,        /* out.0 GroupNorm, SiLU, out.2 conv */
};

enum unet_block_flags {
    UNET_BLOCK_PUSH = 1 << 0,  /* the output joins the skip stack */
    UNET_BLOCK_POP = 1 << 1,   /* the input is h concatenated with the popped skip */
    UNET_BLOCK_PROBE = 1 << 2, /* last block of an input/middle/output block: probe h */
    UNET_BLOCK_IN_END = 1 << 3,  /* last block of an input block: h is that skip's value */
    UNET_BLOCK_MID_END = 1 << 4, /* last block of the middle block (a ControlNet stops here) */
};

struct unet_block {
    enum unet_op op;
    char name[32];  /* weight prefix and patcher layer name: "input_blocks.4.1" */
    int ci, co;     /* channels in (RES with POP: h + skip) and out */
    int level;      /* resolution level the block runs at (UP: the one it comes from) */
    int depth;      /* ST: transformer blocks */
    int heads;      /* ST: attention heads */
    unsigned flags; /* enum unet_block_flags */
};

struct unet_blocks {
    struct unet_block v[UNET_MAX_BLOCKS];
    int n;
};

/* The forward-order block list of `a` into *out (no allocation). */
void unet_blocks_build(const struct unet_arch *a, struct unet_blocks *out);

/* Heads of a SpatialTransformer of width ch (a fixed count, or ch / head_dim). */
int unet_arch_heads(const struct unet_arch *a, int ch);

#endif
