/*
 * sampling_noise — the noise a sampling run uses, drawn on the CPU so that
 * every backend gets the same numbers (sd15.md §6.1, §6.8, §6.9).
 *
 *   - Initial noise: ComfyUI's prepare_noise — torch.manual_seed(seed), then
 *     one randn of the whole latent, or one randn per sample when the LATENT
 *     carries a batch_index.
 *   - Per-step noise (ancestral samplers, ddpm, lcm, the SDE samplers): a separate
 *     generator seeded with the same seed, one full-latent randn per request,
 *     in request order. This equals ComfyUI sampling on the CPU for the
 *     ancestral samplers and lcm (§6.8: the first per-step draw equals the
 *     initial noise when there is no batch_index).
 *   - dpmpp_sde / dpmpp_2m_sde / dpmpp_3m_sde (and their _gpu, _heun
 *     variants): ComfyUI asks a torchsde Brownian tree for the increment
 *     over (sigma, sigma_next), seeded with the same seed. The sampler run
 *     attaches one (sampling_noise_brownian_begin, sampling_brownian.h) for
 *     its schedule, and draws then come from it, bit for bit what ComfyUI's
 *     CPU tree gives; without a tree a draw is the stream's next randn.
 *
 * Caller-owned state; only an attached tree allocates (and is freed by
 * sampling_noise_brownian_end). Not thread-safe: one source per sampling run
 * (the executor thread).
 */
#ifndef LATENTD_SAMPLING_NOISE_H
#define LATENTD_SAMPLING_NOISE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "sampling_rng.h"

struct sampling_brownian; /* sampling_brownian.h */

/*
 * ComfyUI's prepare_noise for a latent of `batch` samples of `per_sample`
 * floats each (4·h·w), into out[batch · per_sample].
 *   - batch_index == NULL: one randn of batch · per_sample values.
 *   - batch_index (n_index == batch entries, each >= 0): draws of one sample
 *     each for i = 0 .. max(batch_index); output sample k is draw
 *     batch_index[k] (duplicates allowed). Per-sample draws differ from
 *     slices of one big draw whenever per_sample is not a multiple of 16.
 * Only the low 32 bits of `seed` matter (as in PyTorch).
 * Returns 0, or ERR_INVALID (bad index or sizes) with a message in e.
 */
int sampling_prepare_noise(uint64_t seed, const int64_t *batch_index, int n_index, int batch,
                           size_t per_sample, enum sampling_randn_variant variant, float *out,
                           struct err *e);

/* The per-step noise source of one sampling run. */
struct sampling_noise {
    uint64_t seed;                         /* as given to sampling_noise_init */
    enum sampling_randn_variant variant;   /* transform of the >= 16 path */
    long draws;                            /* number of draws so far (for tests and logs) */
    struct sampling_rng _rng;
    struct sampling_brownian *_tree;       /* owned while attached; NULL = the stream */
};

/* Seed a per-run source (same seed as the KSampler's initial noise, §6.8). */
void sampling_noise_init(struct sampling_noise *ns, uint64_t seed,
                         enum sampling_randn_variant variant);

/*
 * One standard-normal draw of n values (the whole latent batch) for the
 * interval (sigma, sigma_next): from the attached Brownian tree (n must be the
 * tree's), else the stream's next randn, which ignores the interval.
 */
void sampling_noise_draw(struct sampling_noise *ns, float sigma, float sigma_next, float *out,
                         size_t n);

/*
 * Attach a Brownian tree for a run over sigmas[0..n_sigmas) of n values per draw,
 * as ComfyUI's SDE samplers build one: over [smallest positive sigma, largest
 * sigma], entropy ns->seed. A schedule without two distinct positive sigmas gets
 * none (the stream stays). Returns 0, or the allocation's ERR_DEVICE_OOM with e
 * filled. Detach and free it with sampling_noise_brownian_end (NULL-safe, idempotent).
 */
int sampling_noise_brownian_begin(struct sampling_noise *ns, const float *sigmas, int n_sigmas,
                                  size_t n, struct err *e);
void sampling_noise_brownian_end(struct sampling_noise *ns);

#endif
