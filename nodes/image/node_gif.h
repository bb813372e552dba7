/*
 * node_gif — GIF decoding for node_imageio (private to nodes/; use
 * node_image_load). Threads: any.
 */
#ifndef LATENTD_NODES_NODE_GIF_H
#define LATENTD_NODES_NODE_GIF_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "node_imageio.h"

/* Decode every frame of the GIF in `data` (RGBA frames of the screen size).
 * `path` is for messages. Returns 0 or ERR_INVALID with a message. */
int node__gif_load(const uint8_t *data, size_t n, const char *path, struct node_image_file *out,
                   struct err *e);

#endif
