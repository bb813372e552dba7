/*
 * node_apng_read — the frames of an animated PNG as Pillow reads them (private to
 * nodes/; node_image_load uses it). Each frame's data is decoded by libpng as a PNG of
 * its fcTL size (node_image_decode_rgba), then composited as PngImagePlugin does: the
 * previous frame's dispose op applied to its region (none; background: cleared to zero,
 * opaque black without alpha; previous: restored, background for the first frame), then
 * the region replaced (blend source) or pasted with its alpha as the mask using Pillow's
 * integer blend (blend over, from the second frame on). A default image (IDAT before the
 * first fcTL) is frame 0, as Pillow counts it.
 *
 * Threads: any; no shared state.
 */
#ifndef LATENTD_NODES_NODE_APNG_READ_H
#define LATENTD_NODES_NODE_APNG_READ_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "node_imageio.h"

/* 1 when the PNG bytes have an acTL chunk before their first IDAT. */
int node__apng_is_animated(const uint8_t *p, size_t n);

/*
 * Every frame, composited, into `out` (c = 4 when the file has alpha or tRNS, else 3).
 * `subject` names the file in messages. Returns 0, or ERR_INVALID / ERR_TOO_LARGE with
 * a message (a frame outside the canvas, undecodable frame data, too many pixels).
 */
int node__apng_load(const uint8_t *p, size_t n, const char *subject, struct node_image_file *out,
                    struct err *e);

#endif
