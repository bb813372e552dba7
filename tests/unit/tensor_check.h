/*
 * tensor_check — what the CPU kernel tests share: random tensors of any dtype (with the
 * values the dtype holds, widened exactly to f32), f32 tensors from values, bit
 * equality of two tensors, the largest error against a float64 reference relative to
 * its largest magnitude, and Linear's float64 reference (y = x w^T + b).
 *
 * Header-only (static functions); test thread only. The random stream is one LCG per
 * test program, seeded with tcheck_seed.
 */
#ifndef LATENTD_TESTS_TENSOR_CHECK_H
#define LATENTD_TESTS_TENSOR_CHECK_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "alloc.h"
#include "harness.h"
#include "tensor.h"

static uint32_t tcheck__rng = 12345;

static inline void tcheck_seed(uint32_t s)
{
    tcheck__rng = s;
}

static inline float tcheck_frand(void) /* in [-1, 1) */
{
    tcheck__rng = tcheck__rng * 1664525u + 1013904223u;
    return (float)((tcheck__rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* A tensor of dt with values in [-scale, scale); *f32 gets the values dt holds (exact). */
static inline struct tensor *tcheck_rand(struct dev *d, enum tensor_dtype dt, int ndim,
                                         const int64_t *shape, float scale, float **f32)
{
    struct err e = {0};
    struct tensor *t = NULL;
    if (tensor_new(d, dt, ndim, shape, &t, &e) < 0)
        PANIC("tensor_new: %s", e.msg);
    int64_t n = tensor_numel(t);
    float *v = xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        v[i] = tcheck_frand() * scale;
    tensor_write_f32(t, v, n, &e); /* rounds to dt */
    tensor_read_f32(t, v, n, &e);  /* the values dt holds, as f32 */
    *f32 = v;
    return t;
}

/* An f32 tensor holding v, or uninitialised when v is NULL. */
static inline struct tensor *tcheck_f32(struct dev *d, int ndim, const int64_t *shape,
                                        const float *v)
{
    struct err e = {0};
    struct tensor *t = NULL;
    if (tensor_new(d, TENSOR_F32, ndim, shape, &t, &e) < 0)
        PANIC("tensor_new: %s", e.msg);
    if (v)
        tensor_write_f32(t, v, tensor_numel(t), &e);
    return t;
}

static inline int tcheck_same_bits(const struct tensor *a, const struct tensor *b)
{
    int64_t n = tensor_numel(a);
    float *x = xmalloc((size_t)n * 4), *y = xmalloc((size_t)n * 4);
    struct err e = {0};
    tensor_read_f32(a, x, n, &e);
    tensor_read_f32(b, y, n, &e);
    int same = memcmp(x, y, (size_t)n * 4) == 0;
    xfree(x);
    xfree(y);
    return same;
}

/* Largest |t - ref| relative to max |ref|. */
static inline double tcheck_rel_err(const struct tensor *t, const double *ref)
{
    int64_t n = tensor_numel(t);
    float *x = xmalloc((size_t)n * 4);
    struct err e = {0};
    tensor_read_f32(t, x, n, &e);
    double m = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        m = fmax(m, fabs((double)x[i] - ref[i]));
        r = fmax(r, fabs(ref[i]));
    }
    xfree(x);
    return m / (r > 0 ? r : 1);
}

/* y = x w^T + b over [rows, n] (b may be NULL), float64; caller frees with xfree. */
static inline double *tcheck_ref_linear(const float *x, const float *w, const float *b,
                                        int64_t rows, int64_t k, int64_t n)
{
    double *y = xmalloc((size_t)(rows * n) * sizeof(double));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) {
            double s = b ? b[j] : 0;
            for (int64_t i = 0; i < k; i++)
                s += (double)x[r * k + i] * w[j * k + i];
            y[r * n + j] = s;
        }
    return y;
}

#endif
