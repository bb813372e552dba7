/*
 * noise — initial noise (ComfyUI prepare_noise) and the per-run noise source
 * (sd15.md §6.1, §6.8, §6.9).
 */
#include "sampling_noise.h"

#include <string.h>

#include "alloc.h"
#include "sampling_brownian.h"

/* A bound on max(batch_index): each index below it costs one discarded draw. */
#define NOISE_MAX_BATCH_INDEX 65536

int sampling_prepare_noise(uint64_t seed, const int64_t *batch_index, int n_index, int batch,
                           size_t per_sample, enum sampling_randn_variant variant, float *out,
                           struct err *e)
{
    if (batch < 1 || per_sample == 0)
        return err_set(e, ERR_INVALID, "invalid latent shape for noise (batch %d, %zu values)",
                       batch, per_sample);
    struct sampling_rng rng;
    sampling_rng_seed(&rng, seed);
    if (!batch_index) {
        sampling_rng_randn(&rng, out, (size_t)batch * per_sample, variant);
        return 0;
    }
    if (n_index != batch)
        return err_set(e, ERR_INVALID, "batch_index has %d entries for a batch of %d", n_index,
                       batch);
    int64_t max_index = 0;
    for (int k = 0; k < n_index; k++) {
        if (batch_index[k] < 0 || batch_index[k] >= NOISE_MAX_BATCH_INDEX)
            return err_set(e, ERR_INVALID, "invalid batch_index %lld",
                           (long long)batch_index[k]);
        if (batch_index[k] > max_index)
            max_index = batch_index[k];
    }
    float *draw = xmalloc(per_sample * sizeof *draw);
    for (int64_t i = 0; i <= max_index; i++) {
        /* Every index up to the largest is drawn, used or not: that fixes the stream. */
        sampling_rng_randn(&rng, draw, per_sample, variant);
        for (int k = 0; k < n_index; k++) {
            if (batch_index[k] == i)
                memcpy(out + (size_t)k * per_sample, draw, per_sample * sizeof *draw);
        }
    }
    xfree(draw);
    return 0;
}

void sampling_noise_init(struct sampling_noise *ns, uint64_t seed,
                         enum sampling_randn_variant variant)
{
    ns->seed = seed;
    ns->variant = variant;
    ns->draws = 0;
    ns->_tree = NULL;
    sampling_rng_seed(&ns->_rng, seed);
}

void sampling_noise_draw(struct sampling_noise *ns, float sigma, float sigma_next, float *out,
                         size_t n)
{
    if (ns->_tree)
        sampling_brownian_noise(ns->_tree, sigma, sigma_next, out);
    else
        sampling_rng_randn(&ns->_rng, out, n, ns->variant);
    ns->draws++;
}

int sampling_noise_brownian_begin(struct sampling_noise *ns, const float *sigmas, int n_sigmas,
                                  size_t n, struct err *e)
{
    sampling_noise_brownian_end(ns);
    /* sigmas[sigmas > 0].min(), sigmas.max() */
    float lo = 0.0f, hi = 0.0f;
    for (int i = 0; i < n_sigmas; i++) {
        if (sigmas[i] > 0.0f && (lo == 0.0f || sigmas[i] < lo))
            lo = sigmas[i];
        if (sigmas[i] > hi)
            hi = sigmas[i];
    }
    if (!(lo > 0.0f && lo < hi))
        return 0;
    return sampling_brownian_new(ns->seed, lo, hi, n, ns->variant, &ns->_tree, e);
}

void sampling_noise_brownian_end(struct sampling_noise *ns)
{
    sampling_brownian_free(ns->_tree);
    ns->_tree = NULL;
}
