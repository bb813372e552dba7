/* Double-precision reference samplers for test_sampling (see test_sampling_ref.c). */
#ifndef LATENTD_TEST_SAMPLING_REF_H
#define LATENTD_TEST_SAMPLING_REF_H

#include <stddef.h>

struct sampling_noise;

typedef void (*ref_denoise_fn)(void *user, const double *x, double sigma, double *out, size_t n);

/* Run sampler `name` (ComfyUI name) in place on x over sig[0..ns_count). */
void ref_sample(const char *name, double *x, size_t n, const float *sig, int ns_count,
                ref_denoise_fn D, void *user, struct sampling_noise *noise);

/* The Sampler* nodes' options (k-diffusion's keyword arguments). */
struct ref_opts {
    double eta, s_noise, r;
    int order; /* lms, at most REF_MAX_ORDER */
};
#define REF_MAX_ORDER 16

/* ref_sample with options other than KSampler's (eta 1, s_noise 1, r 1/2, order 4). */
void ref_sample_opts(const char *name, double *x, size_t n, const float *sig, int ns_count,
                     ref_denoise_fn D, void *user, struct sampling_noise *noise,
                     const struct ref_opts *o);

/*
 * The samplers added after §5.7 (test_sampling_ref_ext.c): run `name` as
 * ref_sample_opts does and return 1, or 0 when it is not one of them.
 */
int ref_sample_ext(const char *name, double *x, size_t n, const float *sig, int ns_count,
                   ref_denoise_fn D, void *user, struct sampling_noise *noise,
                   const struct ref_opts *o);

/*
 * ∫_a^b of the Lagrange basis polynomial j over the nodes hist_s[0..order), by
 * exact polynomial expansion (lms; the variable-step Adams–Bashforth weights).
 */
double ref_lagrange_integral(const double *hist_s, int order, int j, double a, double b);

/*
 * sa_solver's noise interval [end, start] in σ (the model's percent_to_sigma of
 * 0.2 and 0.8): the reference has no model, so the test sets it once.
 */
void ref_set_sa_interval(double start, double end);

/* The uncond prediction U(x, σ) the CFG++ samplers read (with the same `user` as D). */
void ref_set_uncond(ref_denoise_fn U);

/* Evaluate the uncond prediction set with ref_set_uncond. */
void ref_eval_uncond(void *user, const double *x, double sigma, double *out, size_t n);

#endif
