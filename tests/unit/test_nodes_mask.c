/*
 * test_nodes_mask — ComfyUI's nodes_mask.py nodes (nodes/nodes_mask*.c) run
 * directly on small hand-checked masks and images, including its quirks
 * (FeatherMask's right edge starting at column 0, half-to-even rounding in
 * the boolean MaskComposite operations, masks of another size resized), and
 * MaskPreview's saved preview.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "harness.h"
#include "node_registry.h"
#include "node_imageio.h"
#include "node_run.h"
#include "nodes_mask.h"
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

static struct value *mask_of(int64_t b, int64_t h, int64_t w, const float *v)
{
    struct value *m = value_new_mask(b, h, w);
    for (size_t k = 0; k < m->numel; k++)
        m->data[k] = v ? v[k] : 1.0f;
    return m;
}

static struct value *image_fill(int64_t b, int64_t h, int64_t w, int64_t c, float v)
{
    struct value *m = value_new_image(b, h, w, c);
    for (size_t k = 0; k < m->numel; k++)
        m->data[k] = v;
    return m;
}

static const struct value *go(struct run *r, const struct node_class *cls)
{
    node_ctx_init(&r->c, cls, "1", &env, r->in, r->out);
    r->rc = cls->run(&r->c);
    return r->rc == 0 ? r->out[0] : NULL;
}

static void done(struct run *r)
{
    node_ctx_release(&r->c);
    for (int i = 0; i < 8; i++)
        value_unref(r->in[i]);
    value_unref(r->out[0]);
    memset(r, 0, sizeof *r);
}

static int same(const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fabsf(got[i] - want[i]) > 1e-6f)
            return 0;
    return 1;
}

static void test_convert(void)
{
    struct run r = {0};
    set_in(&r, &nodes_mask_to_image, "mask", mask_of(1, 1, 2, (float[]){0.25f, 1}));
    const struct value *o = go(&r, &nodes_mask_to_image);
    ok(o && o->ndim == 4 && o->shape[3] == 3 && same(o->data, (float[]){0.25f, 0.25f, 0.25f, 1, 1, 1}, 6),
       "MaskToImage repeats the mask in R, G and B");
    done(&r);

    set_in(&r, &nodes_image_to_mask, "image", image_fill(1, 1, 1, 3, 0.5f));
    set_in(&r, &nodes_image_to_mask, "channel", value_new_string("alpha"));
    go(&r, &nodes_image_to_mask);
    ok(r.rc < 0 && !strcmp(r.c.exc_type, "IndexError"), "alpha of an RGB image: %s", r.c.exc_message.ptr);
    done(&r);

    /* (0.2, 0.4, 0.6) rounds to (51, 102, 153) = 0x336699; 0.201 * 255 = 51.255 rounds to 51 too. */
    struct value *img = value_new_image(1, 1, 3, 3);
    memcpy(img->data, (float[]){0.2f, 0.4f, 0.6f, 0.201f, 0.4f, 0.6f, 0.21f, 0.4f, 0.6f}, sizeof(float[9]));
    set_in(&r, &nodes_image_color_to_mask, "image", img);
    set_in(&r, &nodes_image_color_to_mask, "color", value_new_int(0x336699));
    o = go(&r, &nodes_image_color_to_mask);
    ok(o && same(o->data, (float[]){1, 1, 0}, 3), "ImageColorToMask matches the rounded color");
    done(&r);
}

static void test_simple(void)
{
    struct run r = {0};
    set_in(&r, &nodes_solid_mask, "value", value_new_float(0.5));
    set_in(&r, &nodes_solid_mask, "width", value_new_int(3));
    set_in(&r, &nodes_solid_mask, "height", value_new_int(2));
    const struct value *o = go(&r, &nodes_solid_mask);
    ok(o && o->ndim == 3 && o->shape[0] == 1 && o->shape[1] == 2 && o->shape[2] == 3 && o->data[5] == 0.5f,
       "SolidMask [1, 2, 3] of 0.5");
    done(&r);

    set_in(&r, &nodes_invert_mask, "mask", mask_of(1, 1, 2, (float[]){0.25f, 1}));
    o = go(&r, &nodes_invert_mask);
    ok(o && same(o->data, (float[]){0.75f, 0}, 2), "InvertMask");
    done(&r);

    set_in(&r, &nodes_threshold_mask, "mask", mask_of(1, 1, 3, (float[]){0.4f, 0.5f, 0.6f}));
    set_in(&r, &nodes_threshold_mask, "value", value_new_float(0.5));
    o = go(&r, &nodes_threshold_mask);
    ok(o && same(o->data, (float[]){0, 0, 1}, 3), "ThresholdMask is strictly greater");
    done(&r);

    set_in(&r, &nodes_crop_mask, "mask", mask_of(1, 3, 3, (float[]){0, 1, 2, 3, 4, 5, 6, 7, 8}));
    set_in(&r, &nodes_crop_mask, "x", value_new_int(1));
    set_in(&r, &nodes_crop_mask, "y", value_new_int(1));
    set_in(&r, &nodes_crop_mask, "width", value_new_int(512));
    set_in(&r, &nodes_crop_mask, "height", value_new_int(1));
    o = go(&r, &nodes_crop_mask);
    ok(o && o->shape[1] == 1 && o->shape[2] == 2 && same(o->data, (float[]){4, 5}, 2), "CropMask clamps the width");
    done(&r);

    set_in(&r, &nodes_crop_mask, "mask", mask_of(1, 3, 3, NULL));
    set_in(&r, &nodes_crop_mask, "x", value_new_int(5));
    set_in(&r, &nodes_crop_mask, "y", value_new_int(0));
    set_in(&r, &nodes_crop_mask, "width", value_new_int(2));
    set_in(&r, &nodes_crop_mask, "height", value_new_int(2));
    go(&r, &nodes_crop_mask);
    ok(r.rc < 0 && !strcmp(r.c.exc_type, "ValueError"), "an empty crop is a clear error: %s", r.c.exc_message.ptr);
    done(&r);
}

static void test_mask_composite(void)
{
    struct run r = {0};
    static const char *const op[] = {"add", "and"};
    static const float want[2][4] = {{0.7f, 0.7f, 0.7f, 1.0f}, {0.7f, 0.7f, 0.7f, 0.0f}};
    for (int k = 0; k < 2; k++) {
        set_in(&r, &nodes_mask_composite, "destination", mask_of(1, 2, 2, (float[]){0.7f, 0.7f, 0.7f, 0.7f}));
        /* 0.5 rounds (half to even) to 0: "and" clears the pixel. */
        set_in(&r, &nodes_mask_composite, "source", mask_of(1, 1, 1, (float[]){k ? 0.5f : 0.6f}));
        set_in(&r, &nodes_mask_composite, "x", value_new_int(1));
        set_in(&r, &nodes_mask_composite, "y", value_new_int(1));
        set_in(&r, &nodes_mask_composite, "operation", value_new_string(op[k]));
        const struct value *o = go(&r, &nodes_mask_composite);
        ok(o && same(o->data, want[k], 4), "MaskComposite %s", op[k]);
        done(&r);
    }
}

static void test_feather_grow(void)
{
    struct run r = {0};
    static const char *const side[] = {"left", "right"};
    /* left 2: column 0 x 1/2, column 1 x 2/2. right 2: ComfyUI's output[:, :, -0] is column 0. */
    for (int k = 0; k < 2; k++) {
        set_in(&r, &nodes_feather_mask, "mask", mask_of(1, 1, 3, NULL));
        set_in(&r, &nodes_feather_mask, "left", value_new_int(k ? 0 : 2));
        set_in(&r, &nodes_feather_mask, "top", value_new_int(0));
        set_in(&r, &nodes_feather_mask, "right", value_new_int(k ? 2 : 0));
        set_in(&r, &nodes_feather_mask, "bottom", value_new_int(0));
        const struct value *o = go(&r, &nodes_feather_mask);
        ok(o && same(o->data, (float[]){0.5f, 1, 1}, 3), "FeatherMask %s 2", side[k]);
        done(&r);
    }
    float dot[9] = {0, 0, 0, 0, 1, 0, 0, 0, 0}, cross[9] = {0, 1, 0, 1, 1, 1, 0, 1, 0};
    for (int tapered = 0; tapered < 2; tapered++) {
        set_in(&r, &nodes_grow_mask, "mask", mask_of(1, 3, 3, dot));
        set_in(&r, &nodes_grow_mask, "expand", value_new_int(1));
        set_in(&r, &nodes_grow_mask, "tapered_corners", value_new_bool(tapered));
        const struct value *o = go(&r, &nodes_grow_mask);
        ok(o && same(o->data, tapered ? cross : (float[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, 9),
           "GrowMask +1 %s", tapered ? "tapered (cross)" : "square");
        done(&r);
    }
    set_in(&r, &nodes_grow_mask, "mask", mask_of(1, 3, 3, cross));
    set_in(&r, &nodes_grow_mask, "expand", value_new_int(-1));
    set_in(&r, &nodes_grow_mask, "tapered_corners", value_new_bool(1));
    const struct value *o = go(&r, &nodes_grow_mask);
    ok(o && same(o->data, dot, 9), "GrowMask -1 erodes the cross to its center");
    done(&r);
}

static void test_composites(void)
{
    struct run r = {0};
    /* A 4x4 mask of 0.5 for a 1x1 source: resized, as ComfyUI interpolates it. */
    set_in(&r, &nodes_image_composite_masked, "destination", image_fill(1, 2, 2, 3, 0));
    set_in(&r, &nodes_image_composite_masked, "source", image_fill(1, 1, 1, 3, 1));
    set_in(&r, &nodes_image_composite_masked, "x", value_new_int(1));
    set_in(&r, &nodes_image_composite_masked, "y", value_new_int(0));
    set_in(&r, &nodes_image_composite_masked, "resize_source", value_new_bool(0));
    struct value *m = mask_of(1, 4, 4, NULL);
    for (int k = 0; k < 16; k++)
        m->data[k] = 0.5f;
    set_in(&r, &nodes_image_composite_masked, "mask", m);
    const struct value *o = go(&r, &nodes_image_composite_masked);
    ok(o && same(o->data, (float[]){0, 0, 0, 0.5f, 0.5f, 0.5f, 0, 0, 0, 0, 0, 0}, 12),
       "ImageCompositeMasked blends through a mask of another size");
    done(&r);

    struct sd_latent *d = sd_latent_new(1, 4, 2, 2), *s = sd_latent_new(1, 4, 1, 1);
    for (int k = 0; k < 4; k++)
        s->samples[k] = (float)(k + 1);
    int64_t bi = 3;
    d->batch_index = xmalloc(sizeof bi);
    d->batch_index[0] = bi;
    d->n_batch_index = 1;
    set_in(&r, &nodes_latent_composite_masked, "destination", sd_latent_value(d));
    set_in(&r, &nodes_latent_composite_masked, "source", sd_latent_value(s));
    set_in(&r, &nodes_latent_composite_masked, "x", value_new_int(8));
    set_in(&r, &nodes_latent_composite_masked, "y", value_new_int(8));
    set_in(&r, &nodes_latent_composite_masked, "resize_source", value_new_bool(0));
    const struct sd_latent *l = sd_latent_of(go(&r, &nodes_latent_composite_masked));
    ok(l && l->samples[3] == 1 && l->samples[7] == 2 && l->samples[15] == 4 && l->samples[0] == 0 &&
           l->n_batch_index == 1 && l->batch_index[0] == 3,
       "LatentCompositeMasked pastes at x/8, y/8 and keeps the destination's batch_index");
    done(&r);
}

/* MaskPreview: the mask as grey RGB, PreviewImage's PNG (255·v truncated) in the temp folder. */
static void test_mask_preview(void)
{
    char dir[] = "/tmp/test_mask_preview.XXXXXX";
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    env.temp_dir = dir;
    const float v[2 * 2 * 3] = {0, 0.25f, 0.5f, 0.75f, 1.0f, 0.999f, 1, 1, 0, 0, 0.1f, 0.2f};
    struct run r = {0};
    set_in(&r, &nodes_mask_preview, "mask", mask_of(2, 2, 3, v));
    void *slot = NULL; /* the executor's per-instance slot */
    node_ctx_init(&r.c, &nodes_mask_preview, "1", &env, r.in, r.out);
    r.c.instance = &slot;
    r.rc = nodes_mask_preview.run(&r.c);
    int good = r.rc == 0 && r.c.n_ui_images == 2;
    for (int b = 0; good && b < 2; b++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, r.c.ui_images[b].filename);
        struct node_image_file f = {0};
        struct err e = {0};
        good = node_image_load(path, &f, &e) == 0 && f.frames[0].w == 3 && f.frames[0].h == 2 &&
               f.frames[0].c == 3 && !strcmp(r.c.ui_images[b].type, "temp") &&
               !strncmp(r.c.ui_images[b].filename, "ComfyUI_temp_", 13);
        for (int k = 0; good && k < 6; k++)
            for (int ch = 0; ch < 3; ch++)
                good &= f.frames[0].px[3 * k + ch] == (uint8_t)(int)(255.0f * v[b * 6 + k]);
        node_image_file_release(&f);
        unlink(path);
    }
    ok(good, "MaskPreview saves each mask as a grey PNG preview (temp, ComfyUI_temp_ prefix)");
    done(&r);
    xfree(slot);
    rmdir(dir);
    env.temp_dir = NULL;
}

int main(void)
{
    long live = alloc_live_count();
    test_convert();
    test_simple();
    test_mask_composite();
    test_feather_grow();
    test_composites();
    test_mask_preview();
    ok(alloc_live_count() == live, "no allocation left live (%ld)", alloc_live_count() - live);
    return harness_done();
}
