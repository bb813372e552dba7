/*
 * vae_arch — the AutoencoderKL's knobs (sd15.md §4): 4 levels of 2 (encoder) / 3
 * (decoder) ResnetBlocks with one mid attention each. SD1.x and SDXL share it.
 */
#ifndef LATENTD_MODELS_VAE_ARCH_H
#define LATENTD_MODELS_VAE_ARCH_H

struct vae_arch {
    int ch;      /* base channels: 128 */
    int mult[4]; /* per level: 1,2,4,4 */
    int z;       /* z_channels: 4 */
    int embed;   /* embed_dim (latent channels): 4 */
};

#endif
