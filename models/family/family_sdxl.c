/*
 * The SDXL base family entry (see family.h; sdxl.md): 3 UNet levels (320/640/1280)
 * with transformer depth 0, 2, 10 (middle 10), 64-wide heads, context 2048 = CLIP-L
 * (768, Hugging Face names) + OpenCLIP bigG (1280, OpenCLIP names in the file),
 * Linear projections, ADM input 2816 (pooled bigG 1280 + 6 x 256 size embeddings);
 * the SD1.5 VAE; latent scale 0.13025 with a preview bias; the SD1.5 schedule.
 */
#include "family.h"

#include <string.h>

/*
 * ComfyUI's SDXL unet_config: linear projections, an ADM input and transformer depth
 * [0,0,2,2,10,10] (0, 2, 10 per level here). Widths are not compared so that shrunk
 * test files match (model_config_is_canonical tells); the depth pattern tells SDXL from
 * SSD-1B, Vega and KOALA, which share the rest.
 */
static int sdxl_match(const struct unet_arch *u)
{
    static const int depth[3] = {0, 2, 10};
    if (u->levels != 3 || !u->adm_in || !u->linear_proj)
        return 0;
    for (int l = 0; l < 3; l++)
        if (u->depth[l] != depth[l] || u->res_blocks[l] != 2)
            return 0;
    return 1;
}

/* The text encoders: CLIP-L (quick_gelu, HF names) and bigG (gelu, OpenCLIP, P). */
static void text_sdxl(struct model_config *c, int wl, int wg, int layers_l, int layers_g)
{
    c->text[0] = (struct text_arch){.width = wl,
                                    .layers = layers_l,
                                    .mlp = 4 * wl,
                                    .heads = family_text_heads_w64(&(struct text_arch){.width = wl}),
                                    .vocab = 49408,
                                    .pos = 77};
    c->text[1] = (struct text_arch){.width = wg,
                                    .layers = layers_g,
                                    .mlp = 4 * wg,
                                    .heads = family_text_heads_w64(&(struct text_arch){.width = wg}),
                                    .vocab = 49408,
                                    .pos = 77,
                                    .act = TEXT_ACT_GELU,
                                    .naming = TEXT_NAMING_OPENCLIP,
                                    .proj_dim = wg};
}

static void unet_sdxl(struct unet_arch *u, int mc, int ctx, int pooled)
{
    *u = (struct unet_arch){
        .in_ch = 4,
        .out_ch = 4,
        .model_ch = mc,
        .levels = 3,
        .mult = {1, 2, 4},
        .res_blocks = {2, 2, 2},
        .depth = {0, 2, 10},
        .depth_mid = 10,
        .head_dim = 64,
        .ctx_dim = ctx,
        .adm_in = pooled + 6 * 256,
        .linear_proj = 1,
    };
}

void sdxl_config_canonical(struct model_config *c)
{
    memset(c, 0, sizeof(*c));
    c->family = MODEL_FAMILY_SDXL;
    unet_sdxl(&c->unet, 320, 2048, 1280);
    text_sdxl(c, 768, 1280, 12, 32);
    c->vae = (struct vae_arch){.ch = 128, .mult = {1, 2, 4, 4}, .z = 4, .embed = 4};
}

void sdxl_config_tiny(struct model_config *c)
{
    memset(c, 0, sizeof(*c));
    c->family = MODEL_FAMILY_SDXL;
    /* Level widths 32, 64, 128: the transformer levels divide into 64-wide heads. */
    unet_sdxl(&c->unet, 32, 64 + 64, 64);
    text_sdxl(c, 64, 64, 3, 3);
    c->vae = (struct vae_arch){.ch = 32, .mult = {1, 2, 3, 3}, .z = 4, .embed = 4};
}

const struct model_family family_sdxl = {
    .id = MODEL_FAMILY_SDXL,
    .name = "SDXL",
    .prefix = {[MODEL_UNET] = MODEL_PREFIX_UNET,
               [MODEL_VAE] = MODEL_PREFIX_VAE,
               [MODEL_CLIP] = "conditioner.embedders.0.transformer.text_model.",
               [MODEL_CLIP2] = "conditioner.embedders.1.model."},
    .text_naming = {TEXT_NAMING_HF, TEXT_NAMING_OPENCLIP},
    .latent = {.channels = 4,
               .scale_factor = 0.13025f,
               .rgb = {.factors = {{0.3651f, 0.4232f, 0.4341f},
                                   {-0.2533f, -0.0042f, 0.1068f},
                                   {0.1076f, 0.1111f, -0.0362f},
                                   {-0.3165f, -0.2492f, -0.2188f}},
                       .bias = {0.1084f, -0.0175f, -0.0011f},
                       .has_bias = 1}},
    .sampling = {.linear_start = 0.00085, .linear_end = 0.012, .eps = 1},
    .match = sdxl_match,
    .canonical = sdxl_config_canonical,
    .text_heads = family_text_heads_w64,
    .text_layer = -2, /* CLIP-L "hidden" -2, bigG "penultimate" (sdxl.md §4.2, §4.3) */
    .text_norm_hidden = 0,
    .text_pad_zero = {0, 1},
    .encode_adm = sdxl_adm_vector,
    .adm_embeds = 6,
    .vpred_key = "v_pred",
    .concat_kinds = (1u << MODEL_CONCAT_INPAINT) | (1u << MODEL_CONCAT_IP2P),
};
