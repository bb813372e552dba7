/*
 * The SD1.5 family entry (see family.h; sd15.md): 4 UNet levels with 2 ResBlocks
 * each, transformer depth 1 at levels 0-2, 8 heads, context 768 from CLIP-L
 * (Hugging Face names), 1x1 conv projections, no ADM input; latent scale 0.18215.
 */
#include "family.h"

#include <string.h>

/*
 * The structure ComfyUI's SD15 unet_config implies. It compares context width 768 and
 * model_channels 320; we take any width so that shrunk test files match
 * (model_config_is_canonical tells), except SD2.x's 1024 and SDXL's 2048, whose
 * look-alikes with this structure are those models, not SD1.x. A 2-D proj_in is a
 * converted file's 1x1 conv here (sd15.md §1.3), not SD2's linear transformer.
 */
static int sd15_match(const struct unet_arch *u)
{
    return family_unet_is_sd1x_structure(u) && u->ctx_dim != 1024 && u->ctx_dim != 2048;
}

void sd15_config_canonical(struct model_config *c)
{
    memset(c, 0, sizeof(*c));
    c->family = MODEL_FAMILY_SD15;
    family_unet_sd1x(&c->unet, 320, (const int[]){1, 2, 4, 4}, 768);
    c->text[0] = (struct text_arch){
        .width = 768, .layers = 12, .mlp = 3072, .heads = 12, .vocab = 49408, .pos = 77};
    c->vae = (struct vae_arch){.ch = 128, .mult = {1, 2, 4, 4}, .z = 4, .embed = 4};
}

void sd15_config_tiny(struct model_config *c)
{
    memset(c, 0, sizeof(*c));
    c->family = MODEL_FAMILY_SD15;
    family_unet_sd1x(&c->unet, 32, (const int[]){1, 2, 3, 3}, 64);
    c->text[0] = (struct text_arch){
        .width = 64, .layers = 3, .mlp = 256, .heads = 2, .vocab = 49408, .pos = 77};
    c->vae = (struct vae_arch){.ch = 32, .mult = {1, 2, 3, 3}, .z = 4, .embed = 4};
}

void sd15_config_set_depth(struct model_config *c, int depth)
{
    for (int l = 0; l < 3; l++)
        c->unet.depth[l] = depth;
    c->unet.depth_mid = depth;
}

int sd15_config_is_canonical(const struct model_config *c)
{
    return c->family == MODEL_FAMILY_SD15 && model_config_is_canonical(c);
}

const struct model_family family_sd15 = {
    .id = MODEL_FAMILY_SD15,
    .name = "SD1.5",
    .prefix = {[MODEL_UNET] = MODEL_PREFIX_UNET,
               [MODEL_VAE] = MODEL_PREFIX_VAE,
               [MODEL_CLIP] = SD15_PREFIX_CLIP},
    .text_naming = {TEXT_NAMING_HF, TEXT_NAMING_HF},
    .latent = LATENT_FORMAT_SD15,
    .sampling = {.linear_start = 0.00085, .linear_end = 0.012, .eps = 1},
    .match = sd15_match,
    .canonical = sd15_config_canonical,
    .text_heads = family_text_heads_w64,
    .text_layer = -1,
    .text_norm_hidden = 1,
    .concat_kinds = (1u << MODEL_CONCAT_INPAINT) | (1u << MODEL_CONCAT_IP2P),
};
