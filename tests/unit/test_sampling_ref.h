/* Double-precision reference samplers for test_sampling (see test_sampling_ref.c). */
#ifndef LATENTD_TEST_SAMPLING_REF_H
#define LATENTD_TEST_SAMPLING_REF_H

#include <stddef.h>

struct sampling_noise;

typedef void (*ref_denoise_fn)(void *user, const double *x, double sigma, double *out, size_t n);

/* Run sampler `name` (ComfyUI name) in place on x over sig[0..ns_count). */
void ref_sample(const char *name, double *x, size_t n, const float *sig, int ns_count,
                ref_denoise_fn D, void *user, struct sampling_noise *noise);

#endif
