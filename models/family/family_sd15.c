/*
 * The SD1.5 family entry (see family.h): its canonical and tiny configurations.
 */
#include "family.h"

#include <string.h>

void sd15_config_canonical(struct model_config *c)
{
    *c = (struct model_config){
        .unet_in_ch = 4, .unet_out_ch = 4, .unet_mc = 320, .unet_mult = {1, 2, 4, 4},
        .unet_depth = 1, .unet_heads = 8, .ctx_dim = 768,
        .clip_width = 768, .clip_layers = 12, .clip_mlp = 3072, .clip_heads = 12,
        .clip_vocab = 49408, .clip_pos = 77,
        .vae_ch = 128, .vae_mult = {1, 2, 4, 4}, .vae_z = 4, .vae_embed = 4,
    };
}

void sd15_config_tiny(struct model_config *c)
{
    *c = (struct model_config){
        .unet_in_ch = 4, .unet_out_ch = 4, .unet_mc = 32, .unet_mult = {1, 2, 3, 3},
        .unet_depth = 1, .unet_heads = 8, .ctx_dim = 64,
        .clip_width = 64, .clip_layers = 3, .clip_mlp = 256, .clip_heads = 2,
        .clip_vocab = 49408, .clip_pos = 77,
        .vae_ch = 32, .vae_mult = {1, 2, 3, 3}, .vae_z = 4, .vae_embed = 4,
    };
}

int sd15_config_is_canonical(const struct model_config *c)
{
    struct model_config k;
    sd15_config_canonical(&k);
    return memcmp(c, &k, sizeof(k)) == 0;
}

