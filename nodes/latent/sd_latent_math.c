/*
 * sd_latent_math — ComfyUI's comfy_extras/nodes_latent.py (V3 nodes):
 * LatentAdd, LatentSubtract, LatentMultiply, LatentInterpolate, LatentBatch and
 * LatentBatchSeedBehavior. The second latent is first brought to the first's
 * shape by reshape_latent_to (bilinear with a center crop, then cycled to the
 * batch). Arithmetic is float32 as in torch; outputs keep samples1's
 * noise_mask, and batch_index unless the node rewrites it.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "node_registry.h"
#include "sd_latent_ops.h"
#include "sd_latent_util.h"

#define MODULE "comfy_extras.nodes_latent"

static const struct node_output_def latent_out[] = {{.type = "LATENT"}, NODE_OUTPUTS_END};

static size_t numel(const struct sd_latent *l)
{
    return (size_t)(l->b * l->c * l->h * l->w);
}

enum { TWO_SAMPLES1, TWO_SAMPLES2, TWO_N };
static const struct node_input_def two_in[] = {
    {.name = "samples1", .type = "LATENT"}, {.name = "samples2", .type = "LATENT"}, NODE_INPUTS_END};

/* samples1 and samples2 with samples2 reshaped to samples1 (batch repeated). */
static int two_latents(struct node_ctx *c, const struct sd_latent **s1, float **s2, struct sd_latent **out)
{
    const struct sd_latent *a = sd__latent_in_at(c, TWO_SAMPLES1);
    const struct sd_latent *b = a ? sd__latent_in_at(c, TWO_SAMPLES2) : NULL;
    int64_t ob;
    int rc;
    if (!b)
        return ERR_INVALID;
    if ((rc = sd__reshape_latent_to(c, b, a->b, a->c, a->h, a->w, 1, s2, &ob)) < 0)
        return rc;
    if (!(*out = sd__latent_like(c, a, a->b, a->c, a->h, a->w))) {
        xfree(*s2);
        return ERR_DEVICE_OOM;
    }
    *s1 = a;
    return 0;
}

static int add_sub(struct node_ctx *c, float sign)
{
    const struct sd_latent *s1;
    float *s2;
    struct sd_latent *out;
    int rc = two_latents(c, &s1, &s2, &out);
    if (rc < 0)
        return rc;
    for (size_t k = 0; k < numel(s1); k++)
        out->samples[k] = sign > 0 ? s1->samples[k] + s2[k] : s1->samples[k] - s2[k];
    xfree(s2);
    node_set_output(c, 0, sd_latent_value(out));
    return 0;
}

static int add_run(struct node_ctx *c)
{
    return add_sub(c, 1.0f);
}

static int subtract_run(struct node_ctx *c)
{
    return add_sub(c, -1.0f);
}

enum { MULTIPLY_SAMPLES, MULTIPLY_MULTIPLIER, MULTIPLY_N };
static const struct node_input_def multiply_in[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "multiplier", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(-10.0), .max = NODE_F(10.0),
     .step = NODE_F(0.01)},
    NODE_INPUTS_END};

static int multiply_run(struct node_ctx *c)
{
    const struct sd_latent *in = sd__latent_in_at(c, MULTIPLY_SAMPLES);
    if (!in)
        return ERR_INVALID;
    float m = (float)node_in_float_at(c, MULTIPLY_MULTIPLIER);
    struct sd_latent *out = sd__latent_like(c, in, in->b, in->c, in->h, in->w);
    if (!out)
        return ERR_DEVICE_OOM;
    for (size_t k = 0; k < numel(in); k++)
        out->samples[k] = in->samples[k] * m;
    node_set_output(c, 0, sd_latent_value(out));
    return 0;
}

/* ---- LatentInterpolate ---- */

static float nan_to_num(float v)
{
    return isnan(v) ? 0.0f : isinf(v) ? (v > 0 ? FLT_MAX : -FLT_MAX) : v;
}

/* torch.linalg.vector_norm(x, dim=1): [b, h, w] */
static void channel_norm(const float *x, int64_t b, int64_t ch, int64_t hw, float *out)
{
    for (int64_t i = 0; i < b; i++)
        for (int64_t p = 0; p < hw; p++) {
            float s = 0;
            for (int64_t k = 0; k < ch; k++) {
                float v = x[(i * ch + k) * hw + p];
                s += v * v;
            }
            out[i * hw + p] = sqrtf(s);
        }
}

/* two_latents reads the first two (TWO_*). */
enum { INTERP_SAMPLES1 = TWO_SAMPLES1, INTERP_SAMPLES2 = TWO_SAMPLES2, INTERP_RATIO, INTERP_N };
static const struct node_input_def interpolate_in[] = {
    {.name = "samples1", .type = "LATENT"},
    {.name = "samples2", .type = "LATENT"},
    {.name = "ratio", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0), .max = NODE_F(1.0),
     .step = NODE_F(0.01)},
    NODE_INPUTS_END};

/*
 * ComfyUI divides [B, C, H, W] by the [B, H, W] norm, which torch broadcasts as
 * [1, B, H, W]: element (b, c) uses norm plane c (or 0 when B is 1). That is the
 * per-pixel norm for one latent and what ComfyUI computes for B == C; any other
 * batch is torch's size error.
 */
static int interpolate_run(struct node_ctx *c)
{
    const struct sd_latent *s1;
    float *s2;
    struct sd_latent *out;
    int rc = two_latents(c, &s1, &s2, &out);
    if (rc < 0)
        return rc;
    int64_t B = s1->b, C = s1->c, hw = s1->h * s1->w;
    if (B != 1 && (B != C || C == 1)) {
        xfree(s2);
        sd_latent_free(out);
        return node_fail(c, "RuntimeError",
                         "The size of tensor a (%lld) must match the size of tensor b (%lld) at "
                         "non-singleton dimension 1",
                         (long long)C, (long long)B);
    }
    double ratio = node_in_float_at(c, INTERP_RATIO);
    float r = (float)ratio, q = (float)(1.0 - ratio);
    float *m1 = xmalloc((size_t)(B * hw) * 3 * sizeof(float)), *m2 = m1 + B * hw, *mt = m2 + B * hw;
    float *t = out->samples;
    channel_norm(s1->samples, B, C, hw, m1);
    channel_norm(s2, B, C, hw, m2);
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < C; k++)
            for (int64_t p = 0; p < hw; p++) {
                int64_t e = (b * C + k) * hw + p, n = (B == 1 ? 0 : k) * hw + p;
                t[e] = nan_to_num(s1->samples[e] / m1[n]) * r + nan_to_num(s2[e] / m2[n]) * q;
            }
    channel_norm(t, B, C, hw, mt);
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < C; k++)
            for (int64_t p = 0; p < hw; p++) {
                int64_t e = (b * C + k) * hw + p, n = (B == 1 ? 0 : k) * hw + p;
                t[e] = nan_to_num(t[e] / mt[n]) * (m1[n] * r + m2[n] * q);
            }
    xfree(m1);
    xfree(s2);
    node_set_output(c, 0, sd_latent_value(out));
    return 0;
}

/* ---- LatentBatch / LatentBatchSeedBehavior ---- */

static void index_or_range(const struct sd_latent *l, int64_t *dst)
{
    for (int64_t i = 0; i < l->b; i++)
        dst[i] = l->batch_index ? l->batch_index[i < l->n_batch_index ? i : 0] : i;
}

static int batch_run(struct node_ctx *c)
{
    const struct sd_latent *s1 = sd__latent_in_at(c, TWO_SAMPLES1);
    const struct sd_latent *s2 = s1 ? sd__latent_in_at(c, TWO_SAMPLES2) : NULL;
    float *r2;
    int64_t b2;
    int rc;
    if (!s2)
        return ERR_INVALID;
    if ((rc = sd__reshape_latent_to(c, s2, s1->b, s1->c, s1->h, s1->w, 0, &r2, &b2)) < 0)
        return rc;
    struct sd_latent *out = sd__latent_like(c, s1, s1->b + b2, s1->c, s1->h, s1->w);
    if (!out) {
        xfree(r2);
        return ERR_DEVICE_OOM;
    }
    memcpy(out->samples, s1->samples, numel(s1) * sizeof(float));
    memcpy(out->samples + numel(s1), r2, (size_t)b2 * (size_t)(s1->c * s1->h * s1->w) * sizeof(float));
    xfree(r2);
    /* samples1.get("batch_index", range(b1)) + samples2.get("batch_index", range(b2)) */
    int n1 = s1->batch_index ? s1->n_batch_index : (int)s1->b;
    int n2 = s2->batch_index ? s2->n_batch_index : (int)s2->b;
    xfree(out->batch_index);
    out->batch_index = xmalloc((size_t)(n1 + n2) * sizeof(int64_t));
    out->n_batch_index = n1 + n2;
    if (s1->batch_index)
        memcpy(out->batch_index, s1->batch_index, (size_t)n1 * sizeof(int64_t));
    else
        index_or_range(s1, out->batch_index);
    if (s2->batch_index)
        memcpy(out->batch_index + n1, s2->batch_index, (size_t)n2 * sizeof(int64_t));
    else
        index_or_range(s2, out->batch_index + n1);
    node_set_output(c, 0, sd_latent_value(out));
    return 0;
}

static const char *const seed_behaviors[] = {"random", "fixed", NULL};

enum { SEED_SAMPLES, SEED_SEED_BEHAVIOR, SEED_N };
static const struct node_input_def seed_behavior_in[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "seed_behavior", .type = NODE_COMBO, .options = seed_behaviors, .def_str = "fixed"},
    NODE_INPUTS_END};

static int seed_behavior_run(struct node_ctx *c)
{
    const struct sd_latent *in = sd__latent_in_at(c, SEED_SAMPLES);
    if (!in)
        return ERR_INVALID;
    struct sd_latent *out = sd__latent_like(c, in, in->b, in->c, in->h, in->w);
    if (!out)
        return ERR_DEVICE_OOM;
    memcpy(out->samples, in->samples, numel(in) * sizeof(float));
    const char *mode = node_in_str_at(c, SEED_SEED_BEHAVIOR);
    if (!strcmp(mode, "random")) {
        xfree(out->batch_index);
        out->batch_index = NULL;
        out->n_batch_index = 0;
    } else if (!strcmp(mode, "fixed")) {
        /* Every image gets the first one's noise: [batch_index[0] or 0] * batch. */
        int64_t first = in->batch_index && in->n_batch_index ? in->batch_index[0] : 0;
        xfree(out->batch_index);
        out->batch_index = xmalloc((size_t)in->b * sizeof(int64_t));
        out->n_batch_index = (int)in->b;
        for (int64_t i = 0; i < in->b; i++)
            out->batch_index[i] = first;
    }
    node_set_output(c, 0, sd_latent_value(out));
    return 0;
}

#define V3_LATENT(sym, cname, cat, in, n_in, fn)                                               \
    const struct node_class sym = {.name = cname, .category = cat, .python_module = MODULE,    \
                                   .flags = NODE_CLASS_V3, .inputs = in, .n_inputs = n_in,     \
                                   .outputs = latent_out, .run = fn}

V3_LATENT(sd_latent_add, "LatentAdd", "latent/advanced", two_in, TWO_N, add_run);
V3_LATENT(sd_latent_subtract, "LatentSubtract", "latent/advanced", two_in, TWO_N, subtract_run);
V3_LATENT(sd_latent_multiply, "LatentMultiply", "latent/advanced", multiply_in, MULTIPLY_N,
          multiply_run);
V3_LATENT(sd_latent_interpolate, "LatentInterpolate", "latent/advanced", interpolate_in, INTERP_N,
          interpolate_run);
V3_LATENT(sd_latent_batch, "LatentBatch", "latent/batch", two_in, TWO_N, batch_run);
V3_LATENT(sd_latent_batch_seed_behavior, "LatentBatchSeedBehavior", "latent/advanced", seed_behavior_in,
          SEED_N, seed_behavior_run);
