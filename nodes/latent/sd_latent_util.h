/*
 * sd_latent_util — helpers shared by the latent and mask node families
 * (sd_latent_ops.c, sd_latent_math.c, nodes_mask.c): Python slice bounds, the
 * LATENT input reader, and ComfyUI's repeat_to_batch_size and
 * reshape_latent_to. Private to nodes/.
 *
 * Threads: executor thread (inside a node's run).
 */
#ifndef LATENTD_NODES_SD_LATENT_UTIL_H
#define LATENTD_NODES_SD_LATENT_UTIL_H

#include <stdint.h>

#include "node_run.h"
#include "sd_types.h"

/*
 * Python's slice(start, stop) over a dimension of n: the half-open range
 * [*a, *b) it selects (negative indices count from the end, bounds clamp,
 * *b >= *a). Returns the length.
 */
static inline int64_t sd__pyslice(int64_t start, int64_t stop, int64_t n, int64_t *a, int64_t *b)
{
    if (start < 0)
        start = start + n < 0 ? 0 : start + n;
    if (stop < 0)
        stop = stop + n < 0 ? 0 : stop + n;
    *a = start > n ? n : start;
    *b = stop > n ? n : stop;
    if (*b < *a)
        *b = *a;
    return *b - *a;
}

/* The LATENT of input `index` (the class's declared order), or NULL after node_fail. */
const struct sd_latent *sd__latent_in_at(struct node_ctx *c, int index);

/*
 * A new latent [b, c, h, w] (zeros) that keeps src's noise_mask and batch_index,
 * as ComfyUI's samples.copy(); NULL after node_fail (torch.OutOfMemoryError)
 * when it does not fit in host memory.
 */
struct sd_latent *sd__latent_like(struct node_ctx *c, const struct sd_latent *src, int64_t b,
                                  int64_t ch, int64_t h, int64_t w);

/*
 * reshape_latent_to(target, s2, repeat_batch) of nodes_latent.py: s2's samples
 * resized (bilinear, center crop) to tb x tc x th x tw when its [c, h, w]
 * differ, then (repeat_batch) cycled or cut to tb images. *out is xmalloc'd
 * (caller frees), *ob its batch. Returns 0, or <0 after node_fail (channels
 * that differ: torch's size mismatch, or out of memory).
 */
int sd__reshape_latent_to(struct node_ctx *c, const struct sd_latent *s2, int64_t tb, int64_t tc,
                          int64_t th, int64_t tw, int repeat_batch, float **out, int64_t *ob);

#endif
