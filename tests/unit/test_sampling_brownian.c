/*
 * test_sampling_brownian — the Brownian-tree noise of the SDE samplers
 * (models/sampling/brownian.c) against torchsde itself: brownian_fixture.h holds
 * numpy's SeedSequence states and, for three (seed, latent size, schedule) cases,
 * the noise ComfyUI's BrownianTreeNoiseSampler returned for dpmpp_sde's queries
 * (sigma -> its midpoint, sigma -> sigma_next: overlapping intervals), written
 * once by tools/brownian_reference.py running torchsde's BrownianTree with torch
 * 1.13 and numpy 1.24. The comparison is bit for bit, in the samplers' query order
 * and reversed (the tree's values must not depend on the order of the queries).
 */
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "harness.h"
#include "sampling_brownian.h"

struct seedseq_case {
    uint64_t entropy;
    int has_key;
    uint64_t key;
    int depth;
    uint32_t want[4];
};

struct brownian_case {
    uint64_t seed;
    int n;
    const float *sigmas;
    int n_sigmas;
    const float (*queries)[2];
    const float *noise; /* [n_queries][n] */
    size_t n_queries;
};

#include "brownian_fixture.h"

static void check_seedseq(void)
{
    for (size_t i = 0; i < sizeof seedseq_cases / sizeof seedseq_cases[0]; i++) {
        const struct seedseq_case *k = &seedseq_cases[i];
        uint32_t got[4];
        sampling_seedseq_state(k->entropy, k->has_key, k->key, (uint64_t)k->depth, 24, got, 4);
        ok(!memcmp(got, k->want, sizeof got), "SeedSequence(%llu, key (%llu, %d)): %08x %08x (want %08x %08x)",
           (unsigned long long)k->entropy, (unsigned long long)k->key, k->depth, got[0], got[1], k->want[0],
           k->want[1]);
    }
}

/* Queries in the order given, then again in reverse: the values must not depend on it. */
static void check_case(const struct brownian_case *k, int reverse)
{
    float smin = INFINITY, smax = 0.0f;
    for (int i = 0; i < k->n_sigmas; i++) {
        if (k->sigmas[i] > 0.0f && k->sigmas[i] < smin)
            smin = k->sigmas[i];
        if (k->sigmas[i] > smax)
            smax = k->sigmas[i];
    }
    struct sampling_brownian *bt = NULL;
    struct err e = {0};
    int rc = sampling_brownian_new(k->seed, smin, smax, (size_t)k->n, SAMPLING_RANDN_V2, &bt, &e);
    ok(rc == 0, "tree for seed %llu, n %d: %s", (unsigned long long)k->seed, k->n, e.msg);
    if (rc < 0)
        return;
    float *got = xmalloc((size_t)k->n * sizeof *got);
    size_t exact = 0, total = 0;
    double worst = 0.0;
    for (size_t qi = 0; qi < k->n_queries; qi++) {
        size_t q = reverse ? k->n_queries - 1 - qi : qi;
        sampling_brownian_noise(bt, k->queries[q][0], k->queries[q][1], got);
        const float *want = k->noise + q * (size_t)k->n;
        for (int i = 0; i < k->n; i++) {
            total++;
            if (got[i] == want[i]) {
                exact++;
                continue;
            }
            double d = fabs((double)got[i] - want[i]);
            if (d > worst)
                worst = d;
        }
    }
    ok(exact == total, "seed %llu n %d (%s order): %zu of %zu bit-exact, worst |diff| %.3g",
       (unsigned long long)k->seed, k->n, reverse ? "reverse" : "sampler", exact, total, worst);
    xfree(got);
    sampling_brownian_free(bt);
}

static void check_bad(void)
{
    struct sampling_brownian *bt = (void *)1;
    struct err e = {0};
    ok(sampling_brownian_new(1, 2.0f, 1.0f, 16, SAMPLING_RANDN_V2, &bt, &e) == ERR_INVALID && !bt,
       "an empty interval is refused: %s", e.msg);
    sampling_brownian_free(NULL);
}

int main(void)
{
    long live = alloc_live_count();
    check_seedseq();
    for (size_t i = 0; i < sizeof brownian_cases / sizeof brownian_cases[0]; i++) {
        check_case(&brownian_cases[i], 0);
        check_case(&brownian_cases[i], 1);
    }
    check_bad();
    ok(alloc_live_count() == live, "no allocation left live (%ld)", alloc_live_count() - live);
    return harness_done();
}
