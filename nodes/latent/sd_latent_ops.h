/*
 * sd_latent_ops — ComfyUI's latent batch, transform and arithmetic nodes:
 * nodes.py's LatentFromBatch, RepeatLatentBatch, LatentRotate, LatentFlip,
 * LatentCrop (sd_latent_ops.c), LatentComposite, LatentBlend
 * (sd_latent_blend.c), and comfy_extras/nodes_latent.py's LatentAdd,
 * LatentSubtract, LatentMultiply, LatentInterpolate, LatentBatch,
 * LatentBatchSeedBehavior (sd_latent_math.c, V3 nodes), and nodes.py's
 * SaveLatent, LoadLatent (sd_latent_io.c).
 *
 * nodes_sd_register() calls the two register functions: the nodes.py classes
 * with the core ones, the comfy_extras ones after the custom-sampling family.
 * Threads: register before the registry is shared; nodes run on the executor.
 */
#ifndef LATENTD_NODES_SD_LATENT_OPS_H
#define LATENTD_NODES_SD_LATENT_OPS_H

#include "node_registry.h"

/* Number of classes the two register functions add together. */
#define SD_LATENT_OPS_N_CLASSES 15

void nodes_sd_latent_core_register(struct node_registry *r);
void nodes_sd_latent_extras_register(struct node_registry *r);

/* The classes, for tests that run a node directly. */
extern const struct node_class sd_latent_from_batch;
extern const struct node_class sd_repeat_latent_batch;
extern const struct node_class sd_latent_composite;
extern const struct node_class sd_latent_blend;
extern const struct node_class sd_latent_rotate;
extern const struct node_class sd_latent_flip;
extern const struct node_class sd_latent_crop;
extern const struct node_class sd_latent_add;
extern const struct node_class sd_latent_subtract;
extern const struct node_class sd_latent_multiply;
extern const struct node_class sd_latent_interpolate;
extern const struct node_class sd_latent_batch;
extern const struct node_class sd_latent_batch_seed_behavior;
extern const struct node_class sd_save_latent; /* sd_latent_io.c */
extern const struct node_class sd_load_latent;

#endif
