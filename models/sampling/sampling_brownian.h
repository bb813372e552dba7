/*
 * sampling_brownian — the Brownian-tree noise of ComfyUI's SDE samplers
 * (k_diffusion/sampling.py BrownianTreeNoiseSampler over BatchedBrownianTree over
 * torchsde's BrownianTree), reproduced bit for bit on the CPU.
 *
 * The process (torchsde/_brownian/brownian_interval.py, halfway_tree=True, tol 1e-6,
 * pool_size 24, no Lévy area):
 *   - the interval [sigma_min, sigma_max] (the run's smallest positive and largest
 *     sigma, ends rounded as Python's round(x, 6)) carries W ~ N(0, t1 - t0), drawn
 *     by torch.randn from a generator seeded with numpy's
 *     SeedSequence(seed, pool_size=24).generate_state(3)[0];
 *   - a query [ta, tb] (rounded the same way) is located in a binary tree of
 *     intervals that are split at their (rounded) midpoints, recursively, until the
 *     query's ends are interval ends; the answer is the sum of the covering
 *     intervals' increments;
 *   - a child's increment is the Brownian bridge of its parent's:
 *     left = W·l/h + sqrt(l·r/h)·z, right = W − left, where z = torch.randn from a
 *     generator seeded by SeedSequence(seed, spawn_key=(key, depth)) of the parent
 *     (the root is key 0 depth 0, a child 2·key + {0 left, 1 right}), all float32
 *     arithmetic in torch's order;
 *   - the noise is that increment, negated when the query runs backwards (sigma
 *     decreasing), divided by sqrt|sigma_next − sigma| in float32.
 * So the noise depends only on the seed and the queried sigmas, never on the query
 * order, and two overlapping queries (dpmpp_sde's half step and full step) are
 * correlated as Brownian motion is.
 *
 * ComfyUI's *_gpu samplers build the same tree on the GPU, where torch.randn is
 * another generator (Philox); here every sampler uses the CPU tree, so the _gpu
 * names match ComfyUI run on a CPU. Where torchsde would recurse without end (an
 * interval narrower than 1e-6 whose rounded midpoint is one of its ends) it raises
 * RecursionError; here the split stops at depth log2(width / 1e-6) + 3 (at most 60)
 * and the coarser interval is used.
 *
 * Ownership: a tree is created and freed by one sampling run; not thread-safe
 * (the executor thread).
 */
#ifndef LATENTD_SAMPLING_BROWNIAN_H
#define LATENTD_SAMPLING_BROWNIAN_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "sampling_rng.h"

struct sampling_brownian; /* opaque */

/*
 * A tree for `n` values per draw over [sigma_min, sigma_max] (sigma_min <
 * sigma_max, both finite and > 0 as a sampler's schedule gives them) with entropy
 * `seed` (the full 64-bit KSampler seed). Its buffers, n floats per tree level
 * (about 30 for a sampler's schedule) plus 3, are allocated here with the fallible
 * helpers: 0 and *out (free with
 * sampling_brownian_free), ERR_DEVICE_OOM when they do not fit, or ERR_INVALID for a
 * bad interval, with e filled.
 */
int sampling_brownian_new(uint64_t seed, float sigma_min, float sigma_max, size_t n,
                          enum sampling_randn_variant variant, struct sampling_brownian **out,
                          struct err *e);
void sampling_brownian_free(struct sampling_brownian *bt); /* NULL is a no-op */

/*
 * BrownianTreeNoiseSampler(sigma, sigma_next) into out[0..n): the increment over the
 * interval divided by sqrt|sigma_next − sigma|. sigma == sigma_next gives zeros
 * divided by zero, as torch does (NaN).
 */
void sampling_brownian_noise(struct sampling_brownian *bt, float sigma, float sigma_next,
                             float *out);

/*
 * numpy.random.SeedSequence(entropy, spawn_key=(key, depth) when has_key,
 * pool_size=pool).generate_state(n_out) into out (exposed for tests). pool <= 64.
 */
void sampling_seedseq_state(uint64_t entropy, int has_key, uint64_t key, uint64_t depth, int pool,
                            uint32_t *out, int n_out);

#endif
