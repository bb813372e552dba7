/*
 * family — the model families latentd knows: per family its detection, components
 * and their key prefixes, canonical configuration, latent format and model sampling
 * (ComfyUI's supported_models.py over model_detection.py).
 *
 * Pure data and functions; any thread.
 */
#ifndef LATENTD_MODELS_FAMILY_H
#define LATENTD_MODELS_FAMILY_H

#include "model_config.h"

#define SD15_PREFIX_CLIP "cond_stage_model.transformer.text_model."

/* The real SD1.5 numbers. */
void sd15_config_canonical(struct model_config *c);
/* The tiny test config of sd15.md §9.1: UNet MC 32 mult 1,2,3,3; CLIP 64/3/256 with
 * 2 heads; VAE 32 mult 1,2,3,3; same key set as SD1.5. */
void sd15_config_tiny(struct model_config *c);
/* 1 if every knob equals SD1.5's. */
int sd15_config_is_canonical(const struct model_config *c);

#endif
