/*
 * node_preview — private to nodes/: PreviewImage's save, shared with the nodes that
 * subclass it in ComfyUI (MaskPreview, comfy_extras/nodes_mask.py).
 *
 * Threads: the executor thread, inside a node's run().
 */
#ifndef LATENTD_NODES_NODE_PREVIEW_H
#define LATENTD_NODES_NODE_PREVIEW_H

#include "node_run.h"

/*
 * Save `img` (IMAGE [B, H, W, C], C 1/3/4; borrowed) as PreviewImage does: PNGs at
 * compress level 1 in the temp folder named ComfyUI_temp_<5 random letters, fixed
 * per node instance>_<counter>_.png, added to the node's UI results as "temp".
 * The class must set .instance_free = xfree (the letters live in the instance slot).
 * Returns 0 or node_fail's code.
 */
int nodes__preview_images(struct node_ctx *c, const struct value *img);

#endif
