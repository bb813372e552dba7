/*
 * sd_cond_nodes — ConditioningCombine, ConditioningSetArea, ConditioningZeroOut
 * (comfy-api.md §7.3), ConditioningAverage, ConditioningConcat,
 * ConditioningSetAreaPercentage, ConditioningSetAreaStrength, ConditioningSetMask
 * and ConditioningSetTimestepRange (nodes.py): pure edits of a CONDITIONING
 * (sd_types.h). Inputs are never modified; each node returns a deep copy (every
 * field kept, so what other nodes set travels along). The sampler honours what
 * they set (sd_ksampler.c: ComfyUI's get_area_and_mult and calc_cond_batch).
 */
#include <string.h>

#include "alloc.h"
#include "node_registry.h"
#include "nodes_mask.h"
#include "sd_nodes.h"
#include "sd_types.h"

static const struct node_output_def cond_outputs[] = {{.type = "CONDITIONING"},
                                                      NODE_OUTPUTS_END};

/* The CONDITIONING at input `index` (borrowed). Returns 0, or <0 after node_fail. */
static int cond_input(struct node_ctx *c, int index, const struct sd_cond **out)
{
    *out = sd_cond_of(node_in_at(c, index));
    if (!*out)
        return node_fail(c, "RuntimeError", "input '%s' is not a CONDITIONING", node_in_name(c, index));
    return 0;
}

/*
 * The start of every edit here: a deep copy of the CONDITIONING at input `index`
 * (ComfyUI copies each [cond, dict] pair before setting keys), owned by the caller
 * until set_cond hands it on. Returns 0, or <0 after node_fail.
 */
static int cond_copy(struct node_ctx *c, int index, struct sd_cond **out)
{
    const struct sd_cond *in;
    int rc = cond_input(c, index, &in);
    if (rc < 0)
        return rc;
    *out = sd_cond_clone(in);
    return 0;
}

/* The end of every edit: `out` becomes output 0 (transfers it). Returns 0. */
static int set_cond(struct node_ctx *c, struct sd_cond *out)
{
    node_set_output(c, 0, sd_cond_value(out));
    return 0;
}

/* ---- ConditioningCombine: list concatenation ---- */

enum { COMBINE_COND_1, COMBINE_COND_2, COMBINE_N };
static const struct node_input_def combine_inputs[] = {
    {.name = "conditioning_1", .type = "CONDITIONING"},
    {.name = "conditioning_2", .type = "CONDITIONING"},
    NODE_INPUTS_END};

static int combine_run(struct node_ctx *c)
{
    const struct sd_cond *a, *b;
    int rc;
    if ((rc = cond_input(c, COMBINE_COND_1, &a)) < 0 || (rc = cond_input(c, COMBINE_COND_2, &b)) < 0)
        return rc;
    struct sd_cond *out = sd_cond_clone(a);
    sd_cond_append(out, b);
    return set_cond(c, out);
}

const struct node_class sd_conditioning_combine = {
    .name = "ConditioningCombine",
    .display_name = "Conditioning (Combine)",
    .category = "conditioning",
    .inputs = combine_inputs,
    .n_inputs = COMBINE_N,
    .outputs = cond_outputs,
    .run = combine_run,
};

/* ---- ConditioningSetArea ---- */

enum { AREA_COND, AREA_WIDTH, AREA_HEIGHT, AREA_X, AREA_Y, AREA_STRENGTH, AREA_N };
static const struct node_input_def area_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"},
    {.name = "width", .type = "INT", .def = NODE_I(64), .min = NODE_I(64), .max = NODE_I(16384),
     .step = NODE_I(8)},
    {.name = "height", .type = "INT", .def = NODE_I(64), .min = NODE_I(64), .max = NODE_I(16384),
     .step = NODE_I(8)},
    {.name = "x", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(16384),
     .step = NODE_I(8)},
    {.name = "y", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(16384),
     .step = NODE_I(8)},
    {.name = "strength", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0),
     .max = NODE_F(10.0), .step = NODE_F(0.01)},
    NODE_INPUTS_END};

static int area_run(struct node_ctx *c)
{
    const struct sd_cond *in;
    int rc;
    if ((rc = cond_input(c, AREA_COND, &in)) < 0)
        return rc;
    int64_t w = node_in_int_at(c, AREA_WIDTH), h = node_in_int_at(c, AREA_HEIGHT);
    int64_t x = node_in_int_at(c, AREA_X), y = node_in_int_at(c, AREA_Y);
    if (w < 0 || h < 0 || x < 0 || y < 0 || w > 16384 || h > 16384 || x > 16384 || y > 16384)
        return node_fail(c, "ValueError", "invalid area %lldx%lld at %lld,%lld", (long long)w,
                         (long long)h, (long long)x, (long long)y);
    struct sd_cond *out = sd_cond_clone(in);
    for (int i = 0; i < out->n; i++) {
        /* area = (h // 8, w // 8, y // 8, x // 8) in latent units; set_area_to_bounds off */
        struct sd_cond_entry *e = &out->entries[i];
        e->has_area = 1;
        e->area_h = (int)(h / 8);
        e->area_w = (int)(w / 8);
        e->area_y = (int)(y / 8);
        e->area_x = (int)(x / 8);
        e->has_area_pct = 0;
        e->set_area_to_bounds = 0;
        e->strength = (float)node_in_float_at(c, AREA_STRENGTH);
    }
    return set_cond(c, out);
}

const struct node_class sd_conditioning_set_area = {
    .name = "ConditioningSetArea",
    .display_name = "Conditioning (Set Area)",
    .category = "conditioning",
    .inputs = area_inputs,
    .n_inputs = AREA_N,
    .outputs = cond_outputs,
    .run = area_run,
};

/* ---- ConditioningZeroOut ---- */

enum { ZERO_COND, ZERO_N };
static const struct node_input_def zero_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"}, NODE_INPUTS_END};

static int zero_run(struct node_ctx *c)
{
    struct sd_cond *out;
    int rc;
    if ((rc = cond_copy(c, ZERO_COND, &out)) < 0)
        return rc;
    for (int i = 0; i < out->n; i++) {
        struct sd_cond_entry *e = &out->entries[i];
        memset(e->cond, 0, (size_t)e->batch * e->tokens * e->dim * sizeof *e->cond);
        if (e->pooled)
            memset(e->pooled, 0, (size_t)e->batch * e->pooled_dim * sizeof *e->pooled);
    }
    return set_cond(c, out);
}

const struct node_class sd_conditioning_zero_out = {
    .name = "ConditioningZeroOut",
    .category = "advanced/conditioning",
    .inputs = zero_inputs,
    .n_inputs = ZERO_N,
    .outputs = cond_outputs,
    .run = zero_run,
};

/* ---- ConditioningAverage, ConditioningConcat ---- */

/* Both declare conditioning_to, conditioning_from first (from_input reads them). */
enum { AVERAGE_TO, AVERAGE_FROM, AVERAGE_TO_STRENGTH, AVERAGE_N };
static const struct node_input_def average_inputs[] = {
    {.name = "conditioning_to", .type = "CONDITIONING"},
    {.name = "conditioning_from", .type = "CONDITIONING"},
    {.name = "conditioning_to_strength", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0),
     .max = NODE_F(1.0), .step = NODE_F(0.01)},
    NODE_INPUTS_END};

/* conditioning_from's first entry (ComfyUI warns and ignores the others). */
static int from_input(struct node_ctx *c, const struct sd_cond **to, const struct sd_cond_entry **from)
{
    const struct sd_cond *f;
    int rc;
    if ((rc = cond_input(c, AVERAGE_TO, to)) < 0 || (rc = cond_input(c, AVERAGE_FROM, &f)) < 0)
        return rc;
    if (f->n < 1)
        return node_fail(c, "IndexError", "list index out of range");
    *from = &f->entries[0];
    return 0;
}

/*
 * t1 * s + t0 * (1 - s) per entry of conditioning_to, t0 being the first `from` entry
 * cut or zero-padded to t1's token count (batch broadcast as torch does); pooled
 * outputs mixed the same way when both sides have one, else the one there is.
 */
static int average_run(struct node_ctx *c)
{
    const struct sd_cond *to;
    const struct sd_cond_entry *f;
    int rc;
    if ((rc = from_input(c, &to, &f)) < 0)
        return rc;
    double s = node_in_float_at(c, AVERAGE_TO_STRENGTH);
    float ws = (float)s, wf = (float)(1.0 - s);
    for (int i = 0; i < to->n; i++) {
        const struct sd_cond_entry *t = &to->entries[i];
        if (t->dim != f->dim || (t->batch != f->batch && t->batch != 1 && f->batch != 1))
            return node_fail(c, "RuntimeError",
                             "The size of tensor a (%d) must match the size of tensor b (%d) at "
                             "non-singleton dimension %d",
                             t->dim != f->dim ? t->dim : t->batch, t->dim != f->dim ? f->dim : f->batch,
                             t->dim != f->dim ? 2 : 0);
        if (t->pooled && f->pooled && t->pooled_dim != f->pooled_dim)
            return node_fail(c, "RuntimeError", "pooled outputs of %d and %d values", t->pooled_dim,
                             f->pooled_dim);
    }
    struct sd_cond *out = sd_cond_clone(to);
    for (int i = 0; i < out->n; i++) {
        struct sd_cond_entry *e = &out->entries[i];
        int b = e->batch > f->batch ? e->batch : f->batch;
        float *mix = xmalloc((size_t)b * e->tokens * e->dim * sizeof *mix);
        for (int n = 0; n < b; n++)
            for (int k = 0; k < e->tokens; k++)
                for (int d = 0; d < e->dim; d++) {
                    float t1 = e->cond[((size_t)(n % e->batch) * e->tokens + k) * e->dim + d];
                    float t0 = k < f->tokens ? f->cond[((size_t)(n % f->batch) * f->tokens + k) * f->dim + d] : 0.0f;
                    mix[((size_t)n * e->tokens + k) * e->dim + d] = t1 * ws + t0 * wf;
                }
        xfree(e->cond);
        e->cond = mix;
        if (f->pooled) {
            int pb = e->pooled ? e->batch : f->batch;
            float *p = xmalloc((size_t)pb * f->pooled_dim * sizeof *p);
            for (size_t q = 0; q < (size_t)pb * f->pooled_dim; q++)
                p[q] = e->pooled ? e->pooled[q] * ws + f->pooled[q % ((size_t)f->batch * f->pooled_dim)] * wf
                                 : f->pooled[q];
            xfree(e->pooled);
            e->pooled = p;
            e->pooled_dim = f->pooled_dim;
        }
        e->batch = b;
    }
    return set_cond(c, out);
}

enum { CONCAT_TO = AVERAGE_TO, CONCAT_FROM = AVERAGE_FROM, CONCAT_N };
static const struct node_input_def concat_inputs[] = {
    {.name = "conditioning_to", .type = "CONDITIONING"},
    {.name = "conditioning_from", .type = "CONDITIONING"},
    NODE_INPUTS_END};

/* torch.cat((t1, from), 1): the first `from` entry's tokens after each entry's own. */
static int concat_run(struct node_ctx *c)
{
    const struct sd_cond *to;
    const struct sd_cond_entry *f;
    int rc;
    if ((rc = from_input(c, &to, &f)) < 0)
        return rc;
    for (int i = 0; i < to->n; i++)
        if (to->entries[i].dim != f->dim || to->entries[i].batch != f->batch)
            return node_fail(c, "RuntimeError",
                             "Sizes of tensors must match except in dimension 1. Expected size %d but "
                             "got size %d for tensor number 1 in the list.",
                             to->entries[i].dim != f->dim ? to->entries[i].dim : to->entries[i].batch,
                             to->entries[i].dim != f->dim ? f->dim : f->batch);
    struct sd_cond *out = sd_cond_clone(to);
    for (int i = 0; i < out->n; i++) {
        struct sd_cond_entry *e = &out->entries[i];
        int tokens = e->tokens + f->tokens;
        size_t row = (size_t)e->dim * sizeof(float);
        float *cat = xmalloc((size_t)e->batch * tokens * row);
        for (int n = 0; n < e->batch; n++) {
            memcpy(cat + (size_t)n * tokens * e->dim, e->cond + (size_t)n * e->tokens * e->dim,
                   (size_t)e->tokens * row);
            memcpy(cat + ((size_t)n * tokens + e->tokens) * e->dim, f->cond + (size_t)n * f->tokens * f->dim,
                   (size_t)f->tokens * row);
        }
        xfree(e->cond);
        e->cond = cat;
        e->tokens = tokens;
    }
    return set_cond(c, out);
}

/* nodes.py maps "ConditioningAverage " (a trailing space): the title stays the class name. */
const struct node_class sd_conditioning_average = {
    .name = "ConditioningAverage", .category = "conditioning", .inputs = average_inputs, .n_inputs = AVERAGE_N,
    .outputs = cond_outputs, .run = average_run};
const struct node_class sd_conditioning_concat = {
    .name = "ConditioningConcat", .display_name = "Conditioning (Concat)", .category = "conditioning", .inputs = concat_inputs, .n_inputs = CONCAT_N,
    .outputs = cond_outputs, .run = concat_run};

/* ---- ConditioningSetAreaPercentage, ConditioningSetAreaStrength ---- */

#define PCT_INPUT(n, d)                                                                           \
    {.name = n, .type = "FLOAT", .def = NODE_F(d), .min = NODE_I(0), .max = NODE_F(1.0),         \
     .step = NODE_F(0.01)}

enum { PCT_COND, PCT_WIDTH, PCT_HEIGHT, PCT_X, PCT_Y, PCT_STRENGTH, PCT_N };
static const struct node_input_def area_pct_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"},
    PCT_INPUT("width", 1.0),
    PCT_INPUT("height", 1.0),
    PCT_INPUT("x", 0),
    PCT_INPUT("y", 0),
    {.name = "strength", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0),
     .max = NODE_F(10.0), .step = NODE_F(0.01)},
    NODE_INPUTS_END};

/* area ("percentage", height, width, y, x), resolved against the latent by the sampler. */
static int area_pct_run(struct node_ctx *c)
{
    struct sd_cond *out;
    int rc;
    if ((rc = cond_copy(c, PCT_COND, &out)) < 0)
        return rc;
    for (int i = 0; i < out->n; i++) {
        struct sd_cond_entry *e = &out->entries[i];
        e->has_area = 0;
        e->has_area_pct = 1;
        e->area_pct_w = node_in_float_at(c, PCT_WIDTH);
        e->area_pct_h = node_in_float_at(c, PCT_HEIGHT);
        e->area_pct_x = node_in_float_at(c, PCT_X);
        e->area_pct_y = node_in_float_at(c, PCT_Y);
        e->strength = (float)node_in_float_at(c, PCT_STRENGTH);
        e->set_area_to_bounds = 0;
    }
    return set_cond(c, out);
}

enum { STRENGTH_COND, STRENGTH_STRENGTH, STRENGTH_N };
static const struct node_input_def strength_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"},
    {.name = "strength", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0),
     .max = NODE_F(10.0), .step = NODE_F(0.01)},
    NODE_INPUTS_END};

static int strength_run(struct node_ctx *c)
{
    struct sd_cond *out;
    int rc;
    if ((rc = cond_copy(c, STRENGTH_COND, &out)) < 0)
        return rc;
    for (int i = 0; i < out->n; i++)
        out->entries[i].strength = (float)node_in_float_at(c, STRENGTH_STRENGTH);
    return set_cond(c, out);
}

const struct node_class sd_conditioning_set_area_percentage = {
    .name = "ConditioningSetAreaPercentage",
    .display_name = "Conditioning (Set Area with Percentage)", .category = "conditioning", .inputs = area_pct_inputs, .n_inputs = PCT_N,
    .outputs = cond_outputs, .run = area_pct_run};
const struct node_class sd_conditioning_set_area_strength = {
    .name = "ConditioningSetAreaStrength", .category = "conditioning", .inputs = strength_inputs, .n_inputs = STRENGTH_N,
    .outputs = cond_outputs, .run = strength_run};

/* ---- ConditioningSetMask ---- */

static const char *const cond_area_options[] = {"default", "mask bounds", NULL};

enum { MASK_COND, MASK_MASK, MASK_STRENGTH, MASK_SET_COND_AREA, MASK_N };
static const struct node_input_def mask_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"},
    {.name = "mask", .type = "MASK"},
    {.name = "strength", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0),
     .max = NODE_F(10.0), .step = NODE_F(0.01)},
    {.name = "set_cond_area", .type = NODE_COMBO, .options = cond_area_options},
    NODE_INPUTS_END};

static int mask_run(struct node_ctx *c)
{
    const struct sd_cond *in;
    const struct value *m;
    int64_t mb, mh, mw;
    int rc;
    if ((rc = cond_input(c, MASK_COND, &in)) < 0 ||
        (rc = nodes__mask_in_at(c, MASK_MASK, &m, &mb, &mh, &mw)) < 0)
        return rc;
    if (mb < 1 || mh < 1 || mw < 1)
        return node_fail(c, "RuntimeError", "the mask is empty (%lldx%lldx%lld)", (long long)mb,
                         (long long)mh, (long long)mw);
    struct sd_cond *out = sd_cond_clone(in);
    size_t n = (size_t)(mb * mh * mw);
    for (int i = 0; i < out->n; i++) {
        struct sd_cond_entry *e = &out->entries[i];
        xfree(e->mask);
        e->mask = xmalloc(n * sizeof *e->mask);
        memcpy(e->mask, m->data, n * sizeof *e->mask);
        e->mask_b = (int)mb;
        e->mask_h = (int)mh;
        e->mask_w = (int)mw;
        e->mask_strength = (float)node_in_float_at(c, MASK_STRENGTH);
        e->set_area_to_bounds = strcmp(node_in_str_at(c, MASK_SET_COND_AREA), "default") != 0;
    }
    return set_cond(c, out);
}

const struct node_class sd_conditioning_set_mask = {
    .name = "ConditioningSetMask", .display_name = "Conditioning (Set Mask)", .category = "conditioning", .inputs = mask_inputs, .n_inputs = MASK_N,
    .outputs = cond_outputs, .run = mask_run};

/* ---- ConditioningSetTimestepRange ---- */

enum { RANGE_COND, RANGE_START, RANGE_END, RANGE_N };
static const struct node_input_def range_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"},
    {.name = "start", .type = "FLOAT", .def = NODE_F(0.0), .min = NODE_F(0.0), .max = NODE_F(1.0),
     .step = NODE_F(0.001)},
    {.name = "end", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0), .max = NODE_F(1.0),
     .step = NODE_F(0.001)},
    NODE_INPUTS_END};

static int range_run(struct node_ctx *c)
{
    struct sd_cond *out;
    int rc;
    if ((rc = cond_copy(c, RANGE_COND, &out)) < 0)
        return rc;
    for (int i = 0; i < out->n; i++) {
        struct sd_cond_entry *e = &out->entries[i];
        e->has_timestep_range = 1;
        e->start_percent = node_in_float_at(c, RANGE_START);
        e->end_percent = node_in_float_at(c, RANGE_END);
    }
    return set_cond(c, out);
}

const struct node_class sd_conditioning_set_timestep_range = {
    .name = "ConditioningSetTimestepRange", .category = "advanced/conditioning",
    .inputs = range_inputs, .n_inputs = RANGE_N, .outputs = cond_outputs, .run = range_run};
