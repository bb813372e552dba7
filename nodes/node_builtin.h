/*
 * node_builtin — the list of node families shipped in latentd.
 *
 * node_registry_add_builtins() calls each family's register function. To add a
 * family, declare its `void nodes_<family>_register(struct node_registry *r);`
 * here and call it from node_builtin.c (see node_registry.h for a full example).
 *
 * Threads: call once, before the registry is shared.
 */
#ifndef LATENTD_NODES_NODE_BUILTIN_H
#define LATENTD_NODES_NODE_BUILTIN_H

#include "node_registry.h"

void node_registry_add_builtins(struct node_registry *r);

/* Families (one file each). */
void nodes_image_register(struct node_registry *r);     /* nodes_image.c */
void nodes_image_extras_register(struct node_registry *r); /* nodes_image_extras.c: nodes_images.py */
void nodes_image_post_register(struct node_registry *r);   /* nodes_image_post.c: nodes_post_processing.py */
void nodes_image_compositing_register(struct node_registry *r); /* nodes_image_compositing.c */
void nodes_primitive_register(struct node_registry *r); /* nodes_primitive.c */
void nodes_sd_register(struct node_registry *r);        /* sd_nodes.c: SD1.5 models, sampling */
void nodes_mask_register(struct node_registry *r);      /* nodes_mask.c: comfy_extras.nodes_mask */
void nodes_string_register(struct node_registry *r);    /* nodes_string.c: comfy_extras.nodes_string */
void nodes_string_regex_register(struct node_registry *r); /* nodes_string_regex.c: its regex nodes */
void nodes_rebatch_register(struct node_registry *r);  /* nodes_rebatch.c: comfy_extras.nodes_rebatch */
void nodes_sd_loaders_register(struct node_registry *r); /* sd_loader_nodes.c: CheckpointLoader */
void nodes_upscale_model_register(struct node_registry *r); /* nodes_upscale_model.c */
void nodes_websocket_register(struct node_registry *r); /* nodes_websocket.c: SaveImageWebsocket */

#endif
