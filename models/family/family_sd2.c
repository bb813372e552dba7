/*
 * The SD2.x family entry (see family.h; ComfyUI's supported_models.SD20): SD1.5's UNet
 * structure (4 levels, 2 ResBlocks, transformer depth 1,1,1,0) with 64-wide heads
 * (num_head_channels 64), Linear projections (use_linear_in_transformer) and context
 * 1024 from OpenCLIP ViT-H/14 (1024 wide, 24 layers, 16 heads, GELU; OpenCLIP names
 * under cond_stage_model.model., mapped at load as SDXL's bigG). The text encoder's
 * penultimate layer goes through the final norm, and prompts pad with token 0
 * (sd2_clip.py). SD1.5's VAE, latent format and schedule. 512 base and 768-v share all
 * of this: v-prediction is read from the weights (vpred_probe) as SD20.model_type
 * does; the 512-inpainting UNet (9 input channels, epsilon) takes the inpaint concat
 * (MODEL_CONCAT_INPAINT). ComfyUI has no SD2 instruct-pix2pix: 8 channels are refused.
 */
#include "family.h"

#include <string.h>

/*
 * SD20's unet_config: context 1024, Linear projections, no ADM input, over SD1.x's
 * structure. Widths are not compared (shrunk test files); a shrunk file's context is
 * not 1024, so it needs the family's marker (the OpenCLIP-H text encoder) to be taken
 * for SD2 rather than SD1.x with 2-D stored 1x1 convs.
 */
static int sd2_match(const struct unet_arch *u)
{
    return family_unet_is_sd1x_structure(u) && u->linear_proj && u->ctx_dim != 768 &&
           u->ctx_dim != 2048;
}

/* SD1.x's structure with 64-wide heads (num_head_channels) and Linear projections. */
static void unet_sd2(struct unet_arch *u, int mc, const int mult[4], int ctx)
{
    family_unet_sd1x(u, mc, mult, ctx);
    u->heads = 0;
    u->head_dim = 64;
    u->linear_proj = 1;
}

/* OpenCLIP-H: GELU, OpenCLIP names, the projection kept (return_projected_pooled). */
static void text_sd2(struct model_config *c, int width, int layers)
{
    c->text[0] = (struct text_arch){.width = width,
                                    .layers = layers,
                                    .mlp = 4 * width,
                                    .heads = family_text_heads_w64(&(struct text_arch){.width = width}),
                                    .vocab = 49408,
                                    .pos = 77,
                                    .act = TEXT_ACT_GELU,
                                    .naming = TEXT_NAMING_OPENCLIP,
                                    .proj_dim = width};
}

void sd2_config_canonical(struct model_config *c)
{
    memset(c, 0, sizeof(*c));
    c->family = MODEL_FAMILY_SD2;
    unet_sd2(&c->unet, 320, (const int[]){1, 2, 4, 4}, 1024);
    text_sd2(c, 1024, 24);
    c->vae = (struct vae_arch){.ch = 128, .mult = {1, 2, 4, 4}, .z = 4, .embed = 4};
}

void sd2_config_tiny(struct model_config *c)
{
    memset(c, 0, sizeof(*c));
    c->family = MODEL_FAMILY_SD2;
    /* Level widths 64, 64, 128, 128: every transformer level divides into 64-wide heads. */
    unet_sd2(&c->unet, 64, (const int[]){1, 1, 2, 2}, 64);
    text_sd2(c, 64, 3);
    c->vae = (struct vae_arch){.ch = 32, .mult = {1, 2, 3, 3}, .z = 4, .embed = 4};
}

const struct model_family family_sd2 = {
    .id = MODEL_FAMILY_SD2,
    .name = "SD2.x",
    .prefix = {[MODEL_UNET] = MODEL_PREFIX_UNET,
               [MODEL_VAE] = MODEL_PREFIX_VAE,
               [MODEL_CLIP] = SD2_PREFIX_CLIP},
    .text_naming = {TEXT_NAMING_OPENCLIP, TEXT_NAMING_HF},
    .latent = LATENT_FORMAT_SD15,
    .sampling = {.linear_start = 0.00085, .linear_end = 0.012, .eps = 1},
    .match = sd2_match,
    .canonical = sd2_config_canonical,
    .text_heads = family_text_heads_w64,
    .text_layer = -2,      /* SD2ClipHModel's "penultimate" = hidden -2 ... */
    .text_norm_hidden = 1, /* ... with the final norm (layer_norm_hidden_state default) */
    .text_pad_zero = {1, 0}, /* SD2ClipHTokenizer: pad_with_end=False, pad token 0 */
    .marker = SD2_PREFIX_CLIP,
    .vpred_probe = "output_blocks.11.1.transformer_blocks.0.norm1.bias",
    .concat_kinds = 1u << MODEL_CONCAT_INPAINT,
};
