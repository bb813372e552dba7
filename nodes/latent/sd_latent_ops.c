/*
 * sd_latent_ops — the latent nodes of ComfyUI's nodes.py beyond the basics:
 * LatentFromBatch, RepeatLatentBatch, LatentComposite, LatentBlend,
 * LatentRotate, LatentFlip and LatentCrop. Each output is ComfyUI's
 * samples.copy() with new samples: noise_mask and batch_index carry over
 * unchanged unless the node says otherwise (the batch nodes rewrite them; the
 * transforms do not rotate or crop the mask, as in ComfyUI).
 */
#include <string.h>

#include "alloc.h"
#include "node_registry.h"
#include "sd_latent_ops.h"
#include "sd_latent_util.h"
#include "sd_upscale.h"

#define MAX_RESOLUTION 16384

static const struct node_output_def latent_out[] = {{.type = "LATENT"}, NODE_OUTPUTS_END};

static size_t img_numel(const struct sd_latent *l)
{
    return (size_t)(l->c * l->h * l->w);
}

static void set_batch_index(struct sd_latent *l, const int64_t *v, int n)
{
    xfree(l->batch_index);
    l->batch_index = xmalloc((size_t)(n ? n : 1) * sizeof *v);
    memcpy(l->batch_index, v, (size_t)n * sizeof *v);
    l->n_batch_index = n;
}

/* ---- LatentFromBatch ---- */

/* The noise mask of images [bi, bi+len) (masks cycled to the batch first). */
static void from_batch_mask(struct sd_latent *out, const struct sd_latent *in, int64_t bi, int64_t len)
{
    if (!in->noise_mask || in->mb == 1)
        return; /* a single mask is cloned as it is */
    size_t m = (size_t)(in->mh * in->mw);
    int64_t nb = in->mb < in->b ? in->b : in->mb, a, b;
    int64_t n = sd__pyslice(bi, bi + len, nb, &a, &b);
    float *nm = xmalloc((size_t)(n ? n : 1) * m * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        memcpy(nm + (size_t)i * m, in->noise_mask + (size_t)((a + i) % in->mb) * m, m * sizeof(float));
    xfree(out->noise_mask);
    out->noise_mask = nm;
    out->mb = n;
}

enum { FROM_BATCH_SAMPLES, FROM_BATCH_BATCH_INDEX, FROM_BATCH_LENGTH, FROM_BATCH_N };
static const struct node_input_def from_batch_in[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "batch_index", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(63)},
    {.name = "length", .type = "INT", .def = NODE_I(1), .min = NODE_I(1), .max = NODE_I(64)},
    NODE_INPUTS_END};

static int from_batch_run(struct node_ctx *c)
{
    const struct sd_latent *in = sd__latent_in_at(c, FROM_BATCH_SAMPLES);
    if (!in)
        return ERR_INVALID;
    int64_t bi = node_in_int_at(c, FROM_BATCH_BATCH_INDEX);
    int64_t len = node_in_int_at(c, FROM_BATCH_LENGTH);
    bi = bi < in->b - 1 ? bi : in->b - 1;
    len = len < in->b - bi ? len : in->b - bi;
    if (bi < 0 || len < 1)
        return node_fail(c, "ValueError", "batch_index %lld and length %lld select no latent",
                         (long long)bi, (long long)len);
    struct sd_latent *out = sd__latent_like(c, in, len, in->c, in->h, in->w);
    if (!out)
        return ERR_DEVICE_OOM;
    memcpy(out->samples, in->samples + (size_t)bi * img_numel(in), (size_t)len * img_numel(in) * sizeof(float));
    from_batch_mask(out, in, bi, len);
    int64_t idx[64];
    int64_t a, b, n = len;
    if (in->batch_index) {
        n = sd__pyslice(bi, bi + len, in->n_batch_index, &a, &b);
        memcpy(idx, in->batch_index + a, (size_t)n * sizeof *idx);
    } else {
        for (int64_t i = 0; i < len; i++)
            idx[i] = bi + i;
    }
    set_batch_index(out, idx, (int)n);
    node_set_output(c, 0, sd_latent_value(out));
    return 0;
}

const struct node_class sd_latent_from_batch = {
    .name = "LatentFromBatch", .display_name = "Latent From Batch", .category = "latent/batch",
    .inputs = from_batch_in, .n_inputs = FROM_BATCH_N, .outputs = latent_out,
    .run = from_batch_run};

/* ---- RepeatLatentBatch ---- */

enum { REPEAT_SAMPLES, REPEAT_AMOUNT, REPEAT_N };
static const struct node_input_def repeat_in[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "amount", .type = "INT", .def = NODE_I(1), .min = NODE_I(1), .max = NODE_I(64)},
    NODE_INPUTS_END};

static int repeat_run(struct node_ctx *c)
{
    const struct sd_latent *in = sd__latent_in_at(c, REPEAT_SAMPLES);
    if (!in)
        return ERR_INVALID;
    int64_t amount = node_in_int_at(c, REPEAT_AMOUNT);
    if (amount < 1)
        return node_fail(c, "RuntimeError", "amount must be at least 1, got %lld", (long long)amount);
    /* amount x batch is request-sized: sd__latent_like allocates fallibly. */
    struct sd_latent *out = sd__latent_like(c, in, in->b * amount, in->c, in->h, in->w);
    if (!out)
        return ERR_DEVICE_OOM;
    size_t blk = (size_t)in->b * img_numel(in);
    for (int64_t i = 0; i < amount; i++)
        memcpy(out->samples + (size_t)i * blk, in->samples, blk * sizeof(float));
    if (in->noise_mask && in->mb > 1) {
        /* ComfyUI repeats the original masks (its batch-sized copy goes unused). */
        size_t mblk = (size_t)(in->mb * in->mh * in->mw);
        xfree(out->noise_mask);
        out->noise_mask = xmalloc((size_t)amount * mblk * sizeof(float));
        for (int64_t i = 0; i < amount; i++)
            memcpy(out->noise_mask + (size_t)i * mblk, in->noise_mask, mblk * sizeof(float));
        out->mb = in->mb * amount;
    }
    if (in->batch_index) {
        int n = in->n_batch_index;
        int64_t lo = in->batch_index[0], hi = lo;
        for (int k = 0; k < n; k++) {
            lo = in->batch_index[k] < lo ? in->batch_index[k] : lo;
            hi = in->batch_index[k] > hi ? in->batch_index[k] : hi;
        }
        int64_t *idx = xmalloc((size_t)n * (size_t)amount * sizeof *idx);
        for (int64_t i = 0; i < amount; i++)
            for (int k = 0; k < n; k++)
                idx[i * n + k] = in->batch_index[k] + i * (hi - lo + 1);
        set_batch_index(out, idx, (int)(n * amount));
        xfree(idx);
    }
    node_set_output(c, 0, sd_latent_value(out));
    return 0;
}

const struct node_class sd_repeat_latent_batch = {
    .name = "RepeatLatentBatch", .display_name = "Repeat Latent Batch", .category = "latent/batch",
    .inputs = repeat_in, .n_inputs = REPEAT_N, .outputs = latent_out, .run = repeat_run};

/* ---- LatentRotate / LatentFlip ---- */

static const char *const rotations[] = {"none", "90 degrees", "180 degrees", "270 degrees", NULL};
static const char *const flips[] = {"x-axis: vertically", "y-axis: horizontally", NULL};

/* torch.rot90(x, k, dims=[3, 2]) on one [h, w] plane: k = 1 turns it clockwise. */
static void rot_plane(const float *s, int64_t h, int64_t w, int k, float *d)
{
    for (int64_t i = 0; i < (k % 2 ? w : h); i++)
        for (int64_t j = 0; j < (k % 2 ? h : w); j++) {
            int64_t si = k == 1 ? h - 1 - j : k == 2 ? h - 1 - i : k == 3 ? j : i;
            int64_t sj = k == 1 ? i : k == 2 ? w - 1 - j : k == 3 ? w - 1 - i : j;
            *d++ = s[si * w + sj];
        }
}

enum { ROTATE_SAMPLES, ROTATE_ROTATION, ROTATE_N };
static const struct node_input_def rotate_in[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "rotation", .type = NODE_COMBO, .options = rotations}, NODE_INPUTS_END};

/* transform reads the latent at ROTATE_SAMPLES for both. */
enum { FLIP_SAMPLES = ROTATE_SAMPLES, FLIP_FLIP_METHOD, FLIP_N };
static const struct node_input_def flip_in[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "flip_method", .type = NODE_COMBO, .options = flips}, NODE_INPUTS_END};

static int transform(struct node_ctx *c, int rot, int flip)
{
    const struct sd_latent *in = sd__latent_in_at(c, ROTATE_SAMPLES);
    if (!in)
        return ERR_INVALID;
    int odd = rot % 2;
    struct sd_latent *out = sd__latent_like(c, in, in->b, in->c, odd ? in->w : in->h, odd ? in->h : in->w);
    if (!out)
        return ERR_DEVICE_OOM;
    size_t plane = (size_t)(in->h * in->w);
    for (int64_t p = 0; p < in->b * in->c; p++) {
        const float *s = in->samples + p * plane;
        float *d = out->samples + p * plane;
        if (flip == 0)
            rot_plane(s, in->h, in->w, rot, d);
        for (int64_t i = 0; flip && i < in->h; i++)
            for (int64_t j = 0; j < in->w; j++)
                d[i * in->w + j] = flip == 1 ? s[(in->h - 1 - i) * in->w + j] : s[i * in->w + in->w - 1 - j];
    }
    node_set_output(c, 0, sd_latent_value(out));
    return 0;
}

static int rotate_run(struct node_ctx *c)
{
    const char *r = node_in_str_at(c, ROTATE_ROTATION);
    int k = !strncmp(r, "90", 2) ? 1 : !strncmp(r, "180", 3) ? 2 : !strncmp(r, "270", 3) ? 3 : 0;
    return transform(c, k, 0);
}

static int flip_run(struct node_ctx *c)
{
    const char *m = node_in_str_at(c, FLIP_FLIP_METHOD);
    return transform(c, 0, m[0] == 'x' ? 1 : m[0] == 'y' ? 2 : 0);
}

const struct node_class sd_latent_rotate = {
    .name = "LatentRotate", .display_name = "Rotate Latent", .category = "latent/transform",
    .inputs = rotate_in, .n_inputs = ROTATE_N, .outputs = latent_out, .run = rotate_run};
const struct node_class sd_latent_flip = {
    .name = "LatentFlip", .display_name = "Flip Latent", .category = "latent/transform",
    .inputs = flip_in, .n_inputs = FLIP_N, .outputs = latent_out, .run = flip_run};

/* ---- LatentCrop ---- */

enum { CROP_SAMPLES, CROP_WIDTH, CROP_HEIGHT, CROP_X, CROP_Y, CROP_N };
static const struct node_input_def crop_in[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "width", .type = "INT", .def = NODE_I(512), .min = NODE_I(64), .max = NODE_I(MAX_RESOLUTION), .step = NODE_I(8)},
    {.name = "height", .type = "INT", .def = NODE_I(512), .min = NODE_I(64), .max = NODE_I(MAX_RESOLUTION), .step = NODE_I(8)},
    {.name = "x", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(MAX_RESOLUTION), .step = NODE_I(8)},
    {.name = "y", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(MAX_RESOLUTION), .step = NODE_I(8)},
    NODE_INPUTS_END};

static int crop_run(struct node_ctx *c)
{
    const struct sd_latent *in = sd__latent_in_at(c, CROP_SAMPLES);
    if (!in)
        return ERR_INVALID;
    int64_t x = node_in_int_at(c, CROP_X) / 8, y = node_in_int_at(c, CROP_Y) / 8;
    /* ComfyUI keeps at least 8 latent pixels (64 px) by moving x, y back. */
    x = x > in->w - 8 ? in->w - 8 : x;
    y = y > in->h - 8 ? in->h - 8 : y;
    int64_t x0, x1, y0, y1;
    int64_t nw = sd__pyslice(x, x + node_in_int_at(c, CROP_WIDTH) / 8, in->w, &x0, &x1);
    int64_t nh = sd__pyslice(y, y + node_in_int_at(c, CROP_HEIGHT) / 8, in->h, &y0, &y1);
    if (nw < 1 || nh < 1)
        return node_fail(c, "ValueError", "cropping the %lldx%lld latent leaves nothing",
                         (long long)in->w * 8, (long long)in->h * 8);
    struct sd_latent *out = sd__latent_like(c, in, in->b, in->c, nh, nw);
    if (!out)
        return ERR_DEVICE_OOM;
    for (int64_t p = 0; p < in->b * in->c; p++)
        for (int64_t i = 0; i < nh; i++)
            memcpy(out->samples + (p * nh + i) * nw, in->samples + (p * in->h + y0 + i) * in->w + x0,
                   (size_t)nw * sizeof(float));
    node_set_output(c, 0, sd_latent_value(out));
    return 0;
}

const struct node_class sd_latent_crop = {
    .name = "LatentCrop", .display_name = "Crop Latent", .category = "latent/transform",
    .inputs = crop_in, .n_inputs = CROP_N, .outputs = latent_out, .run = crop_run};

/* ---- registration (sd_latent_ops.h) ---- */

/* NODE_CLASS_MAPPINGS order of nodes.py and of nodes_latent.py's node list. */
static const struct node_class *const core_classes[] = {
    &sd_latent_from_batch, &sd_repeat_latent_batch, &sd_latent_rotate, &sd_latent_flip,
    &sd_latent_composite,  &sd_latent_blend,        &sd_latent_crop,
    &sd_save_latent,       &sd_load_latent /* sd_latent_io.c */};
static const struct node_class *const extras_classes[] = {
    &sd_latent_add,   &sd_latent_subtract, &sd_latent_multiply, &sd_latent_interpolate,
    &sd_latent_batch, &sd_latent_batch_seed_behavior};

void nodes_sd_latent_core_register(struct node_registry *r)
{
    node_registry_add_all(r, core_classes, sizeof(core_classes) / sizeof(core_classes[0]));
}

void nodes_sd_latent_extras_register(struct node_registry *r)
{
    node_registry_add_all(r, extras_classes, sizeof(extras_classes) / sizeof(extras_classes[0]));
}
