/*
 * The SDXL refiner family entry (see family.h; sdxl.md §1.2, §6.6): 4 UNet levels
 * (384/768/1536/1536) with transformer depth 0, 4, 4, 0 (middle 4) of 64-wide heads,
 * context 1280 from OpenCLIP bigG alone (conditioner.embedders.0, OpenCLIP names),
 * Linear projections, ADM input 2560: pooled 1280 + 5 x 256 (sizes, crop and the
 * aesthetic score instead of the target size). VAE, latent format and schedule: SDXL's.
 */
#include "family.h"

#include <string.h>

/* ComfyUI's SDXLRefiner unet_config: linear, ADM, transformer depth [0,0,4,4,4,4,0,0]. */
static int refiner_match(const struct unet_arch *u)
{
    static const int depth[4] = {0, 4, 4, 0};
    if (u->levels != 4 || !u->adm_in || !u->linear_proj)
        return 0;
    for (int l = 0; l < 4; l++)
        if (u->depth[l] != depth[l] || u->res_blocks[l] != 2)
            return 0;
    return 1;
}

static void refiner_config(struct model_config *c, int mc, int wg, int layers)
{
    memset(c, 0, sizeof(*c));
    c->family = MODEL_FAMILY_SDXL_REFINER;
    c->unet = (struct unet_arch){
        .in_ch = 4,
        .out_ch = 4,
        .model_ch = mc,
        .levels = 4,
        .mult = {1, 2, 4, 4},
        .res_blocks = {2, 2, 2, 2},
        .depth = {0, 4, 4, 0},
        .depth_mid = 4,
        .head_dim = 64,
        .ctx_dim = wg,
        .adm_in = wg + 5 * SDXL_ADM_EMBED,
        .linear_proj = 1,
    };
    c->text[0] = (struct text_arch){.width = wg,
                                    .layers = layers,
                                    .mlp = 4 * wg,
                                    .heads = family_text_heads_w64(&(struct text_arch){.width = wg}),
                                    .vocab = 49408,
                                    .pos = 77,
                                    .act = TEXT_ACT_GELU,
                                    .naming = TEXT_NAMING_OPENCLIP,
                                    .proj_dim = wg};
}

void sdxl_refiner_config_canonical(struct model_config *c)
{
    refiner_config(c, 384, 1280, 32);
    c->vae = (struct vae_arch){.ch = 128, .mult = {1, 2, 4, 4}, .z = 4, .embed = 4};
}

void sdxl_refiner_config_tiny(struct model_config *c)
{
    refiner_config(c, 32, 64, 3); /* transformer levels 64 and 128 wide: 64-wide heads */
    c->vae = (struct vae_arch){.ch = 32, .mult = {1, 2, 3, 3}, .z = 4, .embed = 4};
}

/* y = pooled | E(height) | E(width) | E(crop_h) | E(crop_w) | E(aesthetic score). */
static void refiner_adm(const float *pooled, int pooled_dim, const struct adm_sizes *s, float *y)
{
    const float v[5] = {(float)s->height, (float)s->width, (float)s->crop_h, (float)s->crop_w,
                        (float)s->aesthetic_score};
    memcpy(y, pooled, (size_t)pooled_dim * sizeof(float));
    for (int i = 0; i < 5; i++)
        sdxl_adm_embed(v[i], y + pooled_dim + i * SDXL_ADM_EMBED);
}

const struct model_family family_sdxl_refiner = {
    .id = MODEL_FAMILY_SDXL_REFINER,
    .name = "SDXL refiner",
    .prefix = {[MODEL_UNET] = MODEL_PREFIX_UNET,
               [MODEL_VAE] = MODEL_PREFIX_VAE,
               [MODEL_CLIP] = "conditioner.embedders.0.model."},
    .text_naming = {TEXT_NAMING_OPENCLIP, TEXT_NAMING_HF},
    .latent = {.channels = 4,
               .scale_factor = 0.13025f,
               .rgb = {.factors = {{0.3651f, 0.4232f, 0.4341f},
                                   {-0.2533f, -0.0042f, 0.1068f},
                                   {0.1076f, 0.1111f, -0.0362f},
                                   {-0.3165f, -0.2492f, -0.2188f}},
                       .bias = {0.1084f, -0.0175f, -0.0011f},
                       .has_bias = 1}},
    .sampling = {.linear_start = 0.00085, .linear_end = 0.012, .eps = 1},
    .match = refiner_match,
    .canonical = sdxl_refiner_config_canonical,
    .text_heads = family_text_heads_w64,
    .text_layer = -2,
    .text_norm_hidden = 0,
    .text_pad_zero = {1, 0},
    .encode_adm = refiner_adm,
    .adm_embeds = 5,
};
