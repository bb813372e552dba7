/*
 * memory_synth — a synthetic model for the memory tests and bench/streaming: a stack
 * of linear (D x D) and 3x3 conv (C -> C on a 2x2 map, C * 4 = D) layers with biases,
 * random weights from a fixed seed, and a residual forward pass
 *     x <- x + 0.5 * silu(layer_i(x))
 * written against the patcher's weight access API, exactly as model code would be.
 *
 * Header-only (static functions) so the unit test and the benchmark share it.
 */
#ifndef LATENTD_TESTS_MEMORY_SYNTH_H
#define LATENTD_TESTS_MEMORY_SYNTH_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "memmgr.h"
#include "patcher.h"
#include "tensor.h"

struct synth {
    int d;       /* features (linear in/out) */
    int c;       /* conv channels; c * 4 == d */
    int layers;
    int conv_every; /* layer i is a conv when i % conv_every == conv_every / 2 */
    float *blob; /* owned host weights (the "file"); freed by the model's keep */
};

static inline uint32_t synth__rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

static inline float synth__uniform(uint64_t *s) /* [-1, 1) */
{
    return (float)synth__rng(s) / 2147483648.0f - 1.0f;
}

static inline void synth__free_blob(void *user) { xfree(user); }

static inline int synth_is_conv(const struct synth *s, int i)
{
    return s->conv_every > 0 && i % s->conv_every == s->conv_every / 2;
}

/*
 * Build the model: `layers` layers, D = 4 * c. The weights live in one host blob
 * borrowed by the model (as an mmap would be) and freed by its keep callback.
 * When `merge` is not NULL it is called for every weight before registration, so a
 * test can build a reference with LoRA merged on the host.
 */
static inline struct patcher_model *
synth_build(struct synth *s, const char *name, int c, int layers, int conv_every,
            uint64_t seed, void (*merge)(void *u, const char *key, float *w, int64_t out,
                                         int64_t in),
            void *mu)
{
    s->c = c;
    s->d = 4 * c;
    s->layers = layers;
    s->conv_every = conv_every;
    size_t total = 0;
    for (int i = 0; i < layers; i++)
        total += synth_is_conv(s, i) ? (size_t)c * c * 9 + c : (size_t)s->d * s->d + s->d;
    s->blob = xmalloc(total * sizeof(float));
    struct patcher_model *m = patcher_model_new(name, PATCHER_ROLE_UNET);
    patcher_model_keep(m, synth__free_blob, s->blob);
    uint64_t st = seed;
    float *p = s->blob;
    for (int i = 0; i < layers; i++) {
        char lname[32], key[64];
        snprintf(lname, sizeof(lname), "block%d", i);
        int conv = synth_is_conv(s, i);
        int64_t out = conv ? c : s->d, in = conv ? (int64_t)c * 9 : s->d;
        double flops = 2.0 * 8 * (conv ? (double)c * 4 * c * 9 : (double)s->d * s->d);
        int l = patcher_model_add_layer(m, lname, flops);
        float scale = sqrtf(3.0f / (float)in);
        for (int64_t k = 0; k < out * in; k++)
            p[k] = synth__uniform(&st) * scale;
        snprintf(key, sizeof(key), "block%d.weight", i);
        if (merge)
            merge(mu, key, p, out, in);
        int64_t wshape[4] = {out, conv ? c : in, 3, 3};
        patcher_model_add_weight(m, l, key, TENSOR_F32, conv ? 4 : 2, wshape, p, TENSOR_F32,
                                 NULL);
        p += out * in;
        for (int64_t k = 0; k < out; k++)
            p[k] = synth__uniform(&st) * 0.1f;
        snprintf(key, sizeof(key), "block%d.bias", i);
        patcher_model_add_weight(m, l, key, TENSOR_F32, 1, &out, p, TENSOR_F32, NULL);
        p += out;
    }
    return m;
}

/* Device bytes of the activations synth_forward allocates for batch b. */
static inline size_t synth_activation_bytes(const struct synth *s, int b)
{
    return 2 * (size_t)b * (size_t)s->d * sizeof(float);
}

/* One forward pass over every layer on `d` (where the patcher is loaded). */
static inline int synth_forward(const struct synth *s, struct patcher *p, struct dev *d,
                                const float *in, float *out, int b, struct err *e)
{
    int64_t xs[2] = {b, s->d}, cs[4] = {b, s->c, 2, 2};
    struct tensor *x = NULL, *y = NULL, *xc = NULL, *yc = NULL;
    int rc;
    if ((rc = tensor_new(d, TENSOR_F32, 2, xs, &x, e)) < 0 ||
        (rc = tensor_new(d, TENSOR_F32, 2, xs, &y, e)) < 0 ||
        (rc = tensor_reshape(x, 4, cs, &xc, e)) < 0 ||
        (rc = tensor_reshape(y, 4, cs, &yc, e)) < 0 ||
        (rc = tensor_write_f32(x, in, (int64_t)b * s->d, e)) < 0)
        goto out;
    struct tensor_conv2d_opts o = {.stride = 1, .pad_top = 1, .pad_bottom = 1,
                                   .pad_left = 1, .pad_right = 1};
    for (int i = 0; i < s->layers; i++) {
        struct tensor *const *w;
        if ((rc = patcher_acquire(p, i, &w, e)) < 0)
            goto out;
        if (synth_is_conv(s, i))
            rc = tensor_conv2d(yc, xc, w[0], w[1], &o, e);
        else
            rc = tensor_linear(y, x, w[0], w[1], e);
        if (rc >= 0)
            rc = tensor_silu(y, y, e);
        if (rc >= 0)
            rc = tensor_axpby(x, 1.0f, x, 0.5f, y, e);
        patcher_release(p, i);
        if (rc < 0)
            goto out;
    }
    rc = tensor_read_f32(x, out, (int64_t)b * s->d, e);
out:
    tensor_free(yc);
    tensor_free(xc);
    tensor_free(y);
    tensor_free(x);
    return rc;
}

static inline void synth_input(const struct synth *s, float *in, int b, uint64_t seed)
{
    for (int64_t k = 0; k < (int64_t)b * s->d; k++)
        in[k] = synth__uniform(&seed);
}

#endif
