/*
 * sd_latent_blend — nodes.py's LatentComposite (paste one latent into another
 * at x, y with an optional linear feather) and LatentBlend (a weighted mix;
 * samples2 resized to samples1 with bicubic and a center crop when their
 * shapes differ). Arithmetic is float32 as in torch; the output keeps the
 * first latent's noise_mask and batch_index.
 */
#include <string.h>

#include "alloc.h"
#include "node_registry.h"
#include "sd_latent_ops.h"
#include "sd_latent_util.h"
#include "sd_upscale.h"

#define MAX_RESOLUTION 16384

static const struct node_output_def latent_out[] = {{.type = "LATENT"}, NODE_OUTPUTS_END};

/* torch's broadcast of batches in `a op b`: equal, or one of them 1. */
static int batch_check(struct node_ctx *c, int64_t ba, int64_t bb)
{
    if (ba == bb || bb == 1)
        return 0;
    return node_fail(c, "RuntimeError",
                     "The size of tensor a (%lld) must match the size of tensor b (%lld) at "
                     "non-singleton dimension 0",
                     (long long)ba, (long long)bb);
}

/* ---- LatentComposite ---- */

/* The feather weights of LatentComposite: a [lh, lw] plane (rows x cols factors). */
static void feather_plane(float *m, int64_t lh, int64_t lw, int64_t feather, int top, int bottom,
                          int left, int right)
{
    for (int64_t k = 0; k < lh * lw; k++)
        m[k] = 1.0f;
    for (int64_t t = 0; t < feather; t++) {
        float f = (float)((1.0 / (double)feather) * (double)(t + 1));
        int64_t a, b;
        /* Each edge is a Python slice, so out-of-range rows wrap as torch's would. */
        if (top && sd__pyslice(t, t + 1, lh, &a, &b))
            for (int64_t j = 0; j < lw; j++)
                m[a * lw + j] *= f;
        if (bottom && sd__pyslice(lh - 1 - t, lh - t, lh, &a, &b))
            for (int64_t j = 0; j < lw; j++)
                m[a * lw + j] *= f;
        if (left && sd__pyslice(t, t + 1, lw, &a, &b))
            for (int64_t i = 0; i < lh; i++)
                m[i * lw + a] *= f;
        if (right && sd__pyslice(lw - 1 - t, lw - t, lw, &a, &b))
            for (int64_t i = 0; i < lh; i++)
                m[i * lw + a] *= f;
    }
}

enum {
    COMPOSITE_SAMPLES_TO, COMPOSITE_SAMPLES_FROM, COMPOSITE_X, COMPOSITE_Y, COMPOSITE_FEATHER,
    COMPOSITE_N
};
static const struct node_input_def composite_in[] = {
    {.name = "samples_to", .type = "LATENT"},
    {.name = "samples_from", .type = "LATENT"},
    {.name = "x", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(MAX_RESOLUTION), .step = NODE_I(8)},
    {.name = "y", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(MAX_RESOLUTION), .step = NODE_I(8)},
    {.name = "feather", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(MAX_RESOLUTION), .step = NODE_I(8)},
    NODE_INPUTS_END};

static int composite_run(struct node_ctx *c)
{
    const struct sd_latent *to = sd__latent_in_at(c, COMPOSITE_SAMPLES_TO);
    const struct sd_latent *from = to ? sd__latent_in_at(c, COMPOSITE_SAMPLES_FROM) : NULL;
    if (!from)
        return ERR_INVALID;
    int64_t x = node_in_int_at(c, COMPOSITE_X) / 8, y = node_in_int_at(c, COMPOSITE_Y) / 8;
    int64_t feather = node_in_int_at(c, COMPOSITE_FEATHER) / 8;
    int rc;
    if ((rc = batch_check(c, to->b, from->b)) < 0)
        return rc;
    if (from->c != to->c)
        return node_fail(c, "RuntimeError", "cannot composite a %lld-channel latent into a %lld-channel one",
                         (long long)from->c, (long long)to->c);
    /* s[:, :, y:y+fh, x:x+fw] = from[:, :, :H-y, :W-x] */
    int64_t ty0, ty1, tx0, tx1, sy0, sy1, sx0, sx1;
    int64_t lh = sd__pyslice(y, y + from->h, to->h, &ty0, &ty1);
    int64_t lw = sd__pyslice(x, x + from->w, to->w, &tx0, &tx1);
    int64_t sh = sd__pyslice(0, to->h - y, from->h, &sy0, &sy1);
    int64_t sw = sd__pyslice(0, to->w - x, from->w, &sx0, &sx1);
    if (lh != sh || lw != sw)
        return node_fail(c, "RuntimeError",
                         "The expanded size of the tensor (%lld) must match the existing size (%lld) "
                         "at non-singleton dimension %d",
                         (long long)(lh != sh ? lh : lw), (long long)(lh != sh ? sh : sw), lh != sh ? 2 : 3);
    struct sd_latent *out = sd__latent_like(c, to, to->b, to->c, to->h, to->w);
    if (!out)
        return ERR_DEVICE_OOM;
    memcpy(out->samples, to->samples, (size_t)(to->b * to->c * to->h * to->w) * sizeof(float));
    float *m = xmalloc((size_t)(lh * lw + 1) * sizeof(float));
    feather_plane(m, lh, lw, feather, y != 0, y + lh < to->h, x != 0, x + lw < to->w);
    for (int64_t b = 0; b < to->b; b++)
        for (int64_t ch = 0; ch < to->c; ch++) {
            const float *s = from->samples + ((from->b == 1 ? 0 : b) * from->c + ch) * from->h * from->w;
            float *d = out->samples + (b * to->c + ch) * to->h * to->w;
            for (int64_t i = 0; i < lh; i++)
                for (int64_t j = 0; j < lw; j++) {
                    float mk = m[i * lw + j], *p = &d[(ty0 + i) * to->w + tx0 + j];
                    float v = s[i * from->w + j];
                    /* feather 0 assigns; otherwise from * mask + to * (1 - mask) */
                    *p = feather == 0 ? v : v * mk + *p * (1.0f - mk);
                }
        }
    xfree(m);
    node_set_output(c, 0, sd_latent_value(out));
    return 0;
}

const struct node_class sd_latent_composite = {
    .name = "LatentComposite", .display_name = "Latent Composite", .category = "latent",
    .inputs = composite_in, .n_inputs = COMPOSITE_N, .outputs = latent_out, .run = composite_run};

/* ---- LatentBlend ---- */

enum { BLEND_SAMPLES1, BLEND_SAMPLES2, BLEND_BLEND_FACTOR, BLEND_N };
static const struct node_input_def blend_in[] = {
    {.name = "samples1", .type = "LATENT"},
    {.name = "samples2", .type = "LATENT"},
    {.name = "blend_factor", .type = "FLOAT", .def = NODE_F(0.5), .min = NODE_F(0), .max = NODE_F(1),
     .step = NODE_F(0.01)},
    NODE_INPUTS_END};

static int blend_run(struct node_ctx *c)
{
    const struct sd_latent *s1 = sd__latent_in_at(c, BLEND_SAMPLES1);
    const struct sd_latent *s2 = s1 ? sd__latent_in_at(c, BLEND_SAMPLES2) : NULL;
    if (!s2)
        return ERR_INVALID;
    double bf = node_in_float_at(c, BLEND_BLEND_FACTOR);
    struct err e = {0};
    int rc;
    const float *src2 = s2->samples;
    float *resized = NULL;
    if (s2->c != s1->c)
        return node_fail(c, "RuntimeError",
                         "The size of tensor a (%lld) must match the size of tensor b (%lld) at "
                         "non-singleton dimension 1",
                         (long long)s1->c, (long long)s2->c);
    if ((rc = batch_check(c, s1->b, s2->b)) < 0)
        return rc;
    size_t img = (size_t)(s1->c * s1->h * s1->w);
    if (s2->h != s1->h || s2->w != s1->w) {
        if ((rc = xtry_malloc((size_t)s2->b * img * sizeof(float), (void **)&resized, &e)) < 0)
            return node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
        if (sd_upscale(s2->samples, s2->b, s2->c, s2->h, s2->w, "bicubic", 1, resized, s1->h, s1->w, &e) < 0) {
            xfree(resized);
            return node_fail(c, "ValueError", "%s", e.msg);
        }
        src2 = resized;
    }
    struct sd_latent *out = sd__latent_like(c, s1, s1->b, s1->c, s1->h, s1->w);
    if (!out) {
        xfree(resized);
        return ERR_DEVICE_OOM;
    }
    float f1 = (float)bf, f2 = (float)(1.0 - bf);
    for (int64_t b = 0; b < s1->b; b++) {
        const float *a = s1->samples + (size_t)b * img, *o = src2 + (size_t)(s2->b == 1 ? 0 : b) * img;
        for (size_t k = 0; k < img; k++)
            out->samples[(size_t)b * img + k] = a[k] * f1 + o[k] * f2;
    }
    xfree(resized);
    node_set_output(c, 0, sd_latent_value(out));
    return 0;
}

const struct node_class sd_latent_blend = {
    .name = "LatentBlend", .display_name = "Latent Blend", .category = "_for_testing",
    .inputs = blend_in, .n_inputs = BLEND_N, .outputs = latent_out, .run = blend_run};
