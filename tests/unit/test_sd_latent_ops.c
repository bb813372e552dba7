/*
 * test_sd_latent_ops — the latent batch, transform and arithmetic nodes
 * (nodes/sd_latent_ops.c, sd_latent_blend.c, sd_latent_math.c) run directly
 * through node_ctx on small hand-checked latents: values, shapes, and how
 * noise_mask and batch_index travel (ComfyUI's nodes.py / nodes_latent.py).
 */
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "harness.h"
#include "node_registry.h"
#include "node_run.h"
#include "sd_latent_ops.h"
#include "sd_types.h"

struct run {
    struct value *in[8];
    struct value *out[1];
    struct node_ctx c;
    int rc;
};

static struct node_env env = {.preview_size = 512};

static void set_in(struct run *r, const struct node_class *cls, const char *name, struct value *v)
{
    int i = node_class_input_index(cls, name);
    ASSERT(i >= 0);
    r->in[i] = v;
}

/* A latent [b, c, h, w] whose element k is k + base. */
static struct value *ramp(int64_t b, int64_t c, int64_t h, int64_t w, float base)
{
    struct sd_latent *l = sd_latent_new(b, c, h, w);
    for (int64_t k = 0; k < b * c * h * w; k++)
        l->samples[k] = (float)k + base;
    return sd_latent_value(l);
}

static struct value *filled(int64_t b, int64_t c, int64_t h, int64_t w, float v)
{
    struct sd_latent *l = sd_latent_new(b, c, h, w);
    for (int64_t k = 0; k < b * c * h * w; k++)
        l->samples[k] = v;
    return sd_latent_value(l);
}

static void with_index(struct value *v, const int64_t *idx, int n)
{
    struct sd_latent *l = v->obj;
    l->batch_index = xmalloc((size_t)n * sizeof *idx);
    memcpy(l->batch_index, idx, (size_t)n * sizeof *idx);
    l->n_batch_index = n;
}

/* Masks [mb, 1, 1, 1] with mask i = values[i]. */
static void with_masks(struct value *v, const float *values, int mb)
{
    struct sd_latent *l = v->obj;
    l->noise_mask = xmalloc((size_t)mb * sizeof(float));
    memcpy(l->noise_mask, values, (size_t)mb * sizeof(float));
    l->mb = mb;
    l->mh = l->mw = 1;
}

static const struct sd_latent *go(struct run *r, const struct node_class *cls)
{
    node_ctx_init(&r->c, cls, "1", &env, r->in, r->out);
    r->rc = cls->run(&r->c);
    return r->rc == 0 ? sd_latent_of(r->out[0]) : NULL;
}

static void done(struct run *r)
{
    node_ctx_release(&r->c);
    for (int i = 0; i < 8; i++)
        value_unref(r->in[i]);
    value_unref(r->out[0]);
    memset(r, 0, sizeof *r);
}

static int same(const float *got, const float *want, int n)
{
    for (int i = 0; i < n; i++)
        if (fabsf(got[i] - want[i]) > 1e-6f * (1.0f + fabsf(want[i])))
            return 0;
    return 1;
}

static int same_idx(const struct sd_latent *l, const int64_t *want, int n)
{
    if (l->n_batch_index != n || (n && !l->batch_index))
        return 0;
    for (int i = 0; i < n; i++)
        if (l->batch_index[i] != want[i])
            return 0;
    return 1;
}

static void test_from_batch(void)
{
    struct run r = {0};
    /* 3 images of 2 values; 2 masks for 3 images are cycled: m0 m1 m0. */
    struct value *s = ramp(3, 1, 1, 2, 0);
    with_masks(s, (float[]){0.25f, 0.75f}, 2);
    set_in(&r, &sd_latent_from_batch, "samples", s);
    set_in(&r, &sd_latent_from_batch, "batch_index", value_new_int(1));
    set_in(&r, &sd_latent_from_batch, "length", value_new_int(5));
    const struct sd_latent *o = go(&r, &sd_latent_from_batch);
    ok(o && o->b == 2 && same(o->samples, (float[]){2, 3, 4, 5}, 4), "LatentFromBatch: images 1..2 (length clamped)");
    ok(o && o->mb == 2 && same(o->noise_mask, (float[]){0.75f, 0.25f}, 2), "masks cycled to the batch, then sliced");
    ok(o && same_idx(o, (int64_t[]){1, 2}, 2), "batch_index = range(1, 3)");
    done(&r);

    s = ramp(3, 1, 1, 2, 0);
    with_index(s, (int64_t[]){7, 8, 9}, 3);
    with_masks(s, (float[]){0.5f}, 1);
    set_in(&r, &sd_latent_from_batch, "samples", s);
    set_in(&r, &sd_latent_from_batch, "batch_index", value_new_int(63));
    set_in(&r, &sd_latent_from_batch, "length", value_new_int(1));
    o = go(&r, &sd_latent_from_batch);
    ok(o && o->b == 1 && same(o->samples, (float[]){4, 5}, 2), "an index past the batch takes the last image");
    ok(o && same_idx(o, (int64_t[]){9}, 1), "batch_index sliced from the input's");
    ok(o && o->mb == 1 && o->noise_mask[0] == 0.5f, "a single mask is kept");
    done(&r);
}

static void test_repeat(void)
{
    struct run r = {0};
    struct value *s = ramp(2, 1, 1, 1, 10);
    with_index(s, (int64_t[]){3, 5}, 2);
    with_masks(s, (float[]){0.1f, 0.9f}, 2);
    set_in(&r, &sd_repeat_latent_batch, "samples", s);
    set_in(&r, &sd_repeat_latent_batch, "amount", value_new_int(3));
    const struct sd_latent *o = go(&r, &sd_repeat_latent_batch);
    ok(o && o->b == 6 && same(o->samples, (float[]){10, 11, 10, 11, 10, 11}, 6), "RepeatLatentBatch repeats the batch");
    /* offset = max - min + 1 = 3 */
    ok(o && same_idx(o, (int64_t[]){3, 5, 6, 8, 9, 11}, 6), "batch_index shifted by the span per copy");
    ok(o && o->mb == 6 && same(o->noise_mask, (float[]){0.1f, 0.9f, 0.1f, 0.9f, 0.1f, 0.9f}, 6), "masks repeated");
    done(&r);
}

static void test_transforms(void)
{
    /* One 2x3 plane [[0,1,2],[3,4,5]]. */
    static const char *const rot[] = {"90 degrees", "180 degrees", "270 degrees", "none"};
    static const float want_rot[4][6] = {{3, 0, 4, 1, 5, 2}, {5, 4, 3, 2, 1, 0}, {2, 5, 1, 4, 0, 3}, {0, 1, 2, 3, 4, 5}};
    for (int k = 0; k < 4; k++) {
        struct run r = {0};
        set_in(&r, &sd_latent_rotate, "samples", ramp(1, 1, 2, 3, 0));
        set_in(&r, &sd_latent_rotate, "rotation", value_new_string(rot[k]));
        const struct sd_latent *o = go(&r, &sd_latent_rotate);
        int odd = k == 0 || k == 2;
        ok(o && o->h == (odd ? 3 : 2) && o->w == (odd ? 2 : 3) && same(o->samples, want_rot[k], 6),
           "LatentRotate %s (torch.rot90 dims [3, 2])", rot[k]);
        done(&r);
    }
    static const char *const flip[] = {"x-axis: vertically", "y-axis: horizontally"};
    static const float want_flip[2][6] = {{3, 4, 5, 0, 1, 2}, {2, 1, 0, 5, 4, 3}};
    for (int k = 0; k < 2; k++) {
        struct run r = {0};
        set_in(&r, &sd_latent_flip, "samples", ramp(1, 1, 2, 3, 0));
        set_in(&r, &sd_latent_flip, "flip_method", value_new_string(flip[k]));
        const struct sd_latent *o = go(&r, &sd_latent_flip);
        ok(o && same(o->samples, want_flip[k], 6), "LatentFlip %s", flip[k]);
        done(&r);
    }
    /* LatentCrop on a 10x10 latent: x = 24 px -> 3, moved back to 10 - 8 = 2. */
    struct run r = {0};
    set_in(&r, &sd_latent_crop, "samples", ramp(1, 1, 10, 10, 0));
    set_in(&r, &sd_latent_crop, "width", value_new_int(64));
    set_in(&r, &sd_latent_crop, "height", value_new_int(64));
    set_in(&r, &sd_latent_crop, "x", value_new_int(24));
    set_in(&r, &sd_latent_crop, "y", value_new_int(8));
    const struct sd_latent *o = go(&r, &sd_latent_crop);
    ok(o && o->h == 8 && o->w == 8 && o->samples[0] == 12 && o->samples[63] == 89,
       "LatentCrop keeps 8x8 from row 1, column 2");
    done(&r);
}

static void test_composite_blend(void)
{
    struct run r = {0};
    set_in(&r, &sd_latent_composite, "samples_to", filled(1, 1, 4, 4, 0));
    set_in(&r, &sd_latent_composite, "samples_from", filled(1, 1, 2, 2, 1));
    set_in(&r, &sd_latent_composite, "x", value_new_int(8));
    set_in(&r, &sd_latent_composite, "y", value_new_int(8));
    set_in(&r, &sd_latent_composite, "feather", value_new_int(16));
    const struct sd_latent *o = go(&r, &sd_latent_composite);
    /* feather 2 on a 2x2 paste with room on every side: each cell is 0.5 (row) x 0.5 (col). */
    float want[16] = {0, 0, 0, 0, 0, 0.25f, 0.25f, 0, 0, 0.25f, 0.25f, 0, 0, 0, 0, 0};
    ok(o && same(o->samples, want, 16), "LatentComposite feathers every edge away from the border");
    done(&r);

    set_in(&r, &sd_latent_composite, "samples_to", filled(2, 1, 2, 4, -1));
    set_in(&r, &sd_latent_composite, "samples_from", ramp(1, 1, 3, 3, 1));
    set_in(&r, &sd_latent_composite, "x", value_new_int(16));
    set_in(&r, &sd_latent_composite, "y", value_new_int(0));
    set_in(&r, &sd_latent_composite, "feather", value_new_int(0));
    o = go(&r, &sd_latent_composite);
    float want2[8] = {-1, -1, 1, 2, -1, -1, 4, 5};
    ok(o && o->b == 2 && same(o->samples, want2, 8) && same(o->samples + 8, want2, 8),
       "LatentComposite clips at the border and broadcasts a batch of 1");
    done(&r);

    set_in(&r, &sd_latent_composite, "samples_to", filled(2, 1, 2, 2, 0));
    set_in(&r, &sd_latent_composite, "samples_from", filled(3, 1, 2, 2, 0));
    set_in(&r, &sd_latent_composite, "x", value_new_int(0));
    set_in(&r, &sd_latent_composite, "y", value_new_int(0));
    set_in(&r, &sd_latent_composite, "feather", value_new_int(0));
    go(&r, &sd_latent_composite);
    ok(r.rc < 0 && !strcmp(r.c.exc_type, "RuntimeError"), "batches 2 and 3 do not broadcast: %s", r.c.exc_message.ptr);
    done(&r);

    struct value *s1 = filled(1, 4, 2, 2, 2);
    with_index(s1, (int64_t[]){4}, 1);
    set_in(&r, &sd_latent_blend, "samples1", s1);
    set_in(&r, &sd_latent_blend, "samples2", filled(1, 4, 2, 2, 4));
    set_in(&r, &sd_latent_blend, "blend_factor", value_new_float(0.25));
    o = go(&r, &sd_latent_blend);
    ok(o && fabsf(o->samples[5] - 3.5f) < 1e-6f && same_idx(o, (int64_t[]){4}, 1),
       "LatentBlend: s1 * 0.25 + s2 * 0.75, samples1's batch_index kept");
    done(&r);
}

static void test_math(void)
{
    struct run r = {0};
    /* s2 is 4x4 and batch 1: resized (a constant stays constant) and repeated to batch 2. */
    set_in(&r, &sd_latent_add, "samples1", ramp(2, 1, 2, 2, 0));
    set_in(&r, &sd_latent_add, "samples2", filled(1, 1, 4, 4, 3));
    const struct sd_latent *o = go(&r, &sd_latent_add);
    ok(o && o->b == 2 && same(o->samples, (float[]){3, 4, 5, 6, 7, 8, 9, 10}, 8), "LatentAdd reshapes samples2");
    done(&r);

    set_in(&r, &sd_latent_subtract, "samples1", ramp(1, 1, 1, 2, 0));
    set_in(&r, &sd_latent_subtract, "samples2", ramp(1, 1, 1, 2, 5));
    o = go(&r, &sd_latent_subtract);
    ok(o && same(o->samples, (float[]){-5, -5}, 2), "LatentSubtract");
    done(&r);

    set_in(&r, &sd_latent_multiply, "samples", ramp(1, 1, 1, 2, 1));
    set_in(&r, &sd_latent_multiply, "multiplier", value_new_float(-2.5));
    o = go(&r, &sd_latent_multiply);
    ok(o && same(o->samples, (float[]){-2.5f, -5}, 2), "LatentMultiply");
    done(&r);

    /* One latent of 2 channels, 2 pixels: (3, 4) and (0, 0) against (0, 2) and (1, 0). */
    struct sd_latent *a = sd_latent_new(1, 2, 1, 2), *b = sd_latent_new(1, 2, 1, 2);
    memcpy(a->samples, (float[]){3, 0, 4, 0}, sizeof(float[4]));
    memcpy(b->samples, (float[]){0, 1, 2, 0}, sizeof(float[4]));
    set_in(&r, &sd_latent_interpolate, "samples1", sd_latent_value(a));
    set_in(&r, &sd_latent_interpolate, "samples2", sd_latent_value(b));
    set_in(&r, &sd_latent_interpolate, "ratio", value_new_float(0.5));
    o = go(&r, &sd_latent_interpolate);
    /* pixel 0: t = 0.5 (0.6, 0.8) + 0.5 (0, 1) = (0.3, 0.9); out = t / |t| * (5 + 2) / 2.
     * pixel 1: s1 is zero, so its direction is nan_to_num(0 / 0) = 0: t = (0.5, 0), out = (1, 0) * 0.5. */
    double n0 = sqrt(0.3 * 0.3 + 0.9 * 0.9);
    float want[4] = {(float)(0.3 / n0 * 3.5), 0.5f, (float)(0.9 / n0 * 3.5), 0};
    ok(o && same(o->samples, want, 4), "LatentInterpolate (%g %g %g %g)", o ? o->samples[0] : 0,
       o ? o->samples[1] : 0, o ? o->samples[2] : 0, o ? o->samples[3] : 0);
    done(&r);

    set_in(&r, &sd_latent_interpolate, "samples1", filled(3, 4, 1, 1, 1));
    set_in(&r, &sd_latent_interpolate, "samples2", filled(3, 4, 1, 1, 1));
    set_in(&r, &sd_latent_interpolate, "ratio", value_new_float(0.5));
    go(&r, &sd_latent_interpolate);
    ok(r.rc < 0 && !strcmp(r.c.exc_type, "RuntimeError"), "LatentInterpolate batch 3 is torch's size error");
    done(&r);
}

static void test_batch_seed(void)
{
    struct run r = {0};
    struct value *s2 = ramp(1, 1, 1, 1, 9);
    with_index(s2, (int64_t[]){7}, 1);
    set_in(&r, &sd_latent_batch, "samples1", ramp(2, 1, 1, 1, 0));
    set_in(&r, &sd_latent_batch, "samples2", s2);
    const struct sd_latent *o = go(&r, &sd_latent_batch);
    ok(o && o->b == 3 && same(o->samples, (float[]){0, 1, 9}, 3) && same_idx(o, (int64_t[]){0, 1, 7}, 3),
       "LatentBatch concatenates samples and batch_index (range for none)");
    done(&r);

    struct value *s = ramp(3, 1, 1, 1, 0);
    with_index(s, (int64_t[]){4, 5, 6}, 3);
    set_in(&r, &sd_latent_batch_seed_behavior, "samples", s);
    set_in(&r, &sd_latent_batch_seed_behavior, "seed_behavior", value_new_string("fixed"));
    o = go(&r, &sd_latent_batch_seed_behavior);
    ok(o && same_idx(o, (int64_t[]){4, 4, 4}, 3), "fixed: every image gets batch_index[0]");
    done(&r);

    s = ramp(2, 1, 1, 1, 0);
    with_index(s, (int64_t[]){4, 5}, 2);
    set_in(&r, &sd_latent_batch_seed_behavior, "samples", s);
    set_in(&r, &sd_latent_batch_seed_behavior, "seed_behavior", value_new_string("random"));
    o = go(&r, &sd_latent_batch_seed_behavior);
    ok(o && !o->batch_index && o->n_batch_index == 0, "random: batch_index removed");
    done(&r);
}

int main(void)
{
    long live = alloc_live_count();
    test_from_batch();
    test_repeat();
    test_transforms();
    test_composite_blend();
    test_math();
    test_batch_seed();
    ok(alloc_live_count() == live, "no allocation left live (%ld)", alloc_live_count() - live);
    return harness_done();
}
