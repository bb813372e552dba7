/*
 * nodes_rebatch — comfy_extras/nodes_rebatch.py: RebatchLatents and RebatchImages, list
 * nodes (NODE_CLASS_INPUT_IS_LIST in, is_list out; node_value.h's lists).
 * nodes_rebatch_register() is declared in node_builtin.h.
 *
 * Threads: register before the registry is shared; nodes run on the executor.
 */
#ifndef LATENTD_NODES_NODES_REBATCH_H
#define LATENTD_NODES_NODES_REBATCH_H

#include "node_registry.h"

/* The classes, for tests that run a node directly. */
extern const struct node_class nodes_rebatch_latents;
extern const struct node_class nodes_rebatch_images;

#endif
