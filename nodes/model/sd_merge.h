/*
 * sd_merge — private to nodes/model: the block-ratio merge that ModelMergeBlocks
 * (sd_merge_nodes.c) and the model-specific merges (sd_merge_model_specific.c:
 * ModelMergeSD1, ModelMergeSD2, ModelMergeSDXL) share, as ComfyUI's model-specific
 * classes subclass ModelMergeBlocks.
 *
 * Threads: executor thread (a node's run).
 */
#ifndef LATENTD_NODES_SD_MERGE_H
#define LATENTD_NODES_SD_MERGE_H

#include "node_run.h"

#define SD_MERGE_MAX_BLOCKS 64

/*
 * ModelMergeBlocks.merge on the node's inputs: model1 and model2 are inputs 0 and 1,
 * the ratios of block names names[0..n) are the FLOAT inputs first .. first + n - 1.
 * model1 is cloned and every UNet weight of model2 patched in with (1 - ratio, ratio),
 * ratio the one of the longest name that prefixes the UNet-relative key, else names[0]'s.
 * Sets output 0 (MODEL) and returns 0, or fails the node (two families, ...).
 * `names` is borrowed for the call; n <= SD_MERGE_MAX_BLOCKS.
 */
int sd__model_merge_blocks(struct node_ctx *c, const char *const *names, int first, int n);

#endif
