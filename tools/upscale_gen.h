/*
 * upscale_gen — deterministic random-weight upscale model files with the real key
 * layouts (models/upscale/upscale.h): ESRGAN RRDBNet in its old (model.N...) or new
 * (conv_first, body.N.rdbK...) naming at scale 1/2/4/8, and SRVGGNetCompact, for
 * tests, e2e fixtures and the benchmark.
 *
 * Values come from ckpt_gen_fill (per tensor name, counter-based): conv weights
 * N(0,1)/sqrt(fan_in), biases 0.1 N(0,1), PReLU slopes 0.25 + 0.1 N(0,1). A tensor's
 * values depend on (seed, role, indices), not on the naming, so the two namings of one
 * ESRGAN config hold the same weights.
 *
 * Not thread-safe per call; calls are independent.
 */
#ifndef LATENTD_TOOLS_UPSCALE_GEN_H
#define LATENTD_TOOLS_UPSCALE_GEN_H

#include <stdint.h>

#include "err.h"
#include "safetensors.h"
#include "upscale.h"

struct upscale_gen_opts {
    struct ups_arch arch;  /* kind, naming, scale, nf, nb, gc, in/out channels */
    enum st_dtype dtype;   /* F32, F16 or BF16 */
    uint64_t seed;
};

/* A tiny config of `kind` at `scale` (ESRGAN: nf 8, nb 2, gc 4, new naming; SRVGG:
 * nf 8, 2 convs), 3 channels, F32, seed 7. Derived fields (shuffle, n_up) are set. */
void upscale_gen_opts_tiny(struct upscale_gen_opts *o, enum ups_kind kind, int scale);

/* Derive shuffle and n_up of an ESRGAN arch from its scale (1: unshuffle 4, 2:
 * unshuffle 2, both with two up convs; 4, 8: two / three up convs). */
void upscale_gen_arch_fix(struct ups_arch *a);

/* The value of every element of one weight (as written before dtype rounding), into
 * dst[numel]; for tests that build their own reference. */
void upscale_gen_fill(const struct upscale_gen_opts *o, const struct ups_weight *w, float *dst);

/* Write the file. Returns 0 or a negative ERR_* with a message. */
int upscale_gen_write(const struct upscale_gen_opts *o, const char *path, struct err *e);

#endif
