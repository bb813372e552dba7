/*
 * nodes_mask — ComfyUI's comfy_extras/nodes_mask.py: the mask operations
 * (nodes_mask.c) and LatentCompositeMasked / ImageCompositeMasked
 * (nodes_mask_composite.c). nodes_mask_register() adds them in ComfyUI's
 * NODE_CLASS_MAPPINGS order (MaskPreview is not implemented); it is called from
 * node_registry_add_builtins().
 *
 * Threads: register before the registry is shared; nodes run on the executor.
 */
#ifndef LATENTD_NODES_NODES_MASK_H
#define LATENTD_NODES_NODES_MASK_H

#include <stdint.h>

#include "node_registry.h"

#define NODES_MASK_MODULE "comfy_extras.nodes_mask"

/*
 * Input `index` (the class's declared order) as a mask reshape(-1, H, W): *m
 * borrowed, its batch, height and width. Returns 0, or <0 after node_fail when it
 * is not a tensor of 2+ dims.
 */
int nodes__mask_in_at(struct node_ctx *c, int index, const struct value **m, int64_t *b,
                      int64_t *h, int64_t *w);

/* The classes, for tests that run a node directly. */
extern const struct node_class nodes_latent_composite_masked;
extern const struct node_class nodes_image_composite_masked;
extern const struct node_class nodes_mask_to_image;
extern const struct node_class nodes_image_to_mask;
extern const struct node_class nodes_image_color_to_mask;
extern const struct node_class nodes_solid_mask;
extern const struct node_class nodes_invert_mask;
extern const struct node_class nodes_crop_mask;
extern const struct node_class nodes_mask_composite;
extern const struct node_class nodes_feather_mask;
extern const struct node_class nodes_grow_mask;
extern const struct node_class nodes_threshold_mask;
extern const struct node_class nodes_mask_preview;

#endif
