/*
 * sampling_rng — PyTorch's CPU random generator reproduced bit for bit
 * (sd15.md §6.2–§6.5): MT19937 seeded the way torch.manual_seed seeds it,
 * the 24-bit float / 53-bit double uniforms, and torch.randn for a contiguous
 * float32 tensor.
 *
 * torch.randn takes two paths by size (and we must take the same ones, since
 * they consume the twister differently):
 *   - n >= 16: float Box–Muller over blocks of 16 uniforms, with the last
 *     (partial) block recomputed from 16 fresh uniforms (§6.4). How log, sin
 *     and cos are evaluated depends on the PyTorch build; the variant is a
 *     parameter (V2, the AVX2 Cephes polynomials with FMAs, is the default,
 *     and uses no libm, so it gives the same bits on every platform).
 *   - n < 16: double Box–Muller per element with a one-value cache kept in
 *     the generator; the cache survives between calls until reseeding (§6.5).
 *
 * A generator is plain caller-owned state (no allocation): `struct
 * sampling_rng` may live on the stack. Not thread-safe: one generator per
 * thread (the executor thread in practice).
 */
#ifndef LATENTD_SAMPLING_RNG_H
#define LATENTD_SAMPLING_RNG_H

#include <stddef.h>
#include <stdint.h>

/* How the float Box–Muller of the n >= 16 path evaluates log/sin/cos (§6.4). */
enum sampling_randn_variant {
    SAMPLING_RANDN_V2 = 0, /* AVX2 Cephes polynomials with FMA (GCC-built PyTorch, AVX2 CPU); default */
    SAMPLING_RANDN_V1 = 1, /* scalar libm logf/cosf/sinf (PyTorch without AVX2, ARM) */
    SAMPLING_RANDN_V3 = 2, /* Cephes polynomials without FMA (MSVC-built PyTorch); untested upstream */
};

struct sampling_rng {
    uint32_t _state[624];
    int _left;                /* outputs left before the next twist */
    int _index;               /* next word of _state to temper */
    int _has_cached_normal;   /* the < 16 path's cached double normal is valid */
    double _cached_normal;
};

/*
 * Seed like torch.manual_seed(seed): only the low 32 bits reach the twister
 * (seed 2^32+5 equals seed 5); clears the cached normal.
 */
void sampling_rng_seed(struct sampling_rng *rng, uint64_t seed);

/* Next tempered 32-bit output of the twister. */
uint32_t sampling_rng_u32(struct sampling_rng *rng);

/* Float uniform in [0, 1): low 24 bits of one output times 2^-24. */
float sampling_rng_uniform_float(struct sampling_rng *rng);

/* Double uniform in [0, 1): two outputs (high word first), low 53 bits times 2^-53. */
double sampling_rng_uniform_double(struct sampling_rng *rng);

/*
 * torch.randn(n, generator=rng) for a contiguous float32 tensor: fills
 * out[0..n) with standard normals, choosing the path by n as PyTorch does.
 * `variant` matters only when n >= 16. n == 0 draws nothing.
 */
void sampling_rng_randn(struct sampling_rng *rng, float *out, size_t n,
                        enum sampling_randn_variant variant);

/*
 * The normal-transform helpers, exposed for tests: log and sincos exactly as
 * the variant computes them (V1 uses libm, V2/V3 the Cephes polynomials).
 */
float sampling_rng__log(float x, enum sampling_randn_variant variant);
void sampling_rng__sincos(float x, float *s, float *c, enum sampling_randn_variant variant);

#endif
