/*
 * sd_latent_nodes — EmptyLatentImage, LatentUpscale, LatentUpscaleBy and
 * SetLatentNoiseMask (comfy-api.md §7.3). A LATENT is an sd_latent
 * (sd_types.h); nodes never modify their input, they build a new latent that
 * keeps the input's noise_mask and batch_index as ComfyUI's dict copy does.
 */
#include <string.h>

#include "alloc.h"
#include "node_registry.h"
#include "pynum.h"
#include "sd_nodes.h"
#include "sd_latent_util.h"
#include "sd_types.h"
#include "sd_upscale.h"

/* ---- EmptyLatentImage ---- */

enum { EMPTY_WIDTH, EMPTY_HEIGHT, EMPTY_BATCH_SIZE, EMPTY_N };
static const struct node_input_def empty_inputs[] = {
    {.name = "width", .type = "INT", .def = NODE_I(512), .min = NODE_I(16),
     .max = NODE_I(16384), .step = NODE_I(8),
     .tooltip = "The width of the latent images in pixels."},
    {.name = "height", .type = "INT", .def = NODE_I(512), .min = NODE_I(16),
     .max = NODE_I(16384), .step = NODE_I(8),
     .tooltip = "The height of the latent images in pixels."},
    {.name = "batch_size", .type = "INT", .def = NODE_I(1), .min = NODE_I(1),
     .max = NODE_I(4096), .tooltip = "The number of latent images in the batch."},
    NODE_INPUTS_END};
static const struct node_output_def empty_outputs[] = {
    {.type = "LATENT", .tooltip = "The empty latent image batch."}, NODE_OUTPUTS_END};

static int empty_run(struct node_ctx *c)
{
    int64_t w = node_in_int_at(c, EMPTY_WIDTH), h = node_in_int_at(c, EMPTY_HEIGHT);
    int64_t b = node_in_int_at(c, EMPTY_BATCH_SIZE);
    if (w < 8 || h < 8 || b < 1 || w > 16384 || h > 16384 || b > 4096)
        return node_fail(c, "ValueError", "invalid latent size %lldx%lld, batch %lld",
                         (long long)w, (long long)h, (long long)b);
    /* Valid inputs can ask for 256 GiB (16384 x 16384, batch 4096): fallible. */
    struct sd_latent *l;
    struct err e = {0};
    int rc = sd_latent_try_new(b, 4, h / 8, w / 8, &l, &e);
    if (rc < 0)
        return node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
    node_set_output(c, 0, sd_latent_value(l));
    return 0;
}

const struct node_class sd_empty_latent_image = {
    .name = "EmptyLatentImage",
    .display_name = "Empty Latent Image",
    .description = "Create a new batch of empty latent images to be denoised via sampling.",
    .category = "latent",
    .inputs = empty_inputs,
    .n_inputs = EMPTY_N,
    .outputs = empty_outputs,
    .run = empty_run,
};

/* ---- LatentUpscale / LatentUpscaleBy ---- */

static const char *const crop_options[] = {"disabled", "center", NULL};

enum {
    UPSCALE_SAMPLES, UPSCALE_UPSCALE_METHOD, UPSCALE_WIDTH, UPSCALE_HEIGHT, UPSCALE_CROP,
    UPSCALE_N
};
static const struct node_input_def upscale_inputs[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "upscale_method", .type = NODE_COMBO, .options = sd_upscale_methods},
    {.name = "width", .type = "INT", .def = NODE_I(512), .min = NODE_I(0),
     .max = NODE_I(16384), .step = NODE_I(8)},
    {.name = "height", .type = "INT", .def = NODE_I(512), .min = NODE_I(0),
     .max = NODE_I(16384), .step = NODE_I(8)},
    {.name = "crop", .type = NODE_COMBO, .options = crop_options},
    NODE_INPUTS_END};
static const struct node_output_def latent_outputs[] = {{.type = "LATENT"}, NODE_OUTPUTS_END};

static int resize_latent(struct node_ctx *c, const struct sd_latent *in, const char *method,
                         int crop, int64_t oh, int64_t ow)
{
    struct err e = {0};
    struct sd_latent *out;
    int rc = sd_latent_try_new_like(in, in->b, in->c, oh, ow, &out, &e);
    if (rc < 0)
        return node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
    if (sd_upscale(in->samples, in->b, in->c, in->h, in->w, method, crop, out->samples, oh, ow,
                   &e) < 0) {
        sd_latent_free(out);
        return node_fail(c, "ValueError", "%s", e.msg);
    }
    node_set_output(c, 0, sd_latent_value(out));
    return 0;
}

static int upscale_run(struct node_ctx *c)
{
    const struct sd_latent *in = sd__latent_in_at(c, UPSCALE_SAMPLES);
    if (!in)
        return ERR_INVALID;
    int64_t w = node_in_int_at(c, UPSCALE_WIDTH), h = node_in_int_at(c, UPSCALE_HEIGHT);
    if (w == 0 && h == 0) {
        node_set_output(c, 0, value_ref(node_in_at(c, UPSCALE_SAMPLES)));
        return 0;
    }
    /* Pixel sizes, at least 64; one of them 0 keeps the aspect ratio. */
    if (w == 0) {
        h = h < 64 ? 64 : h;
        w = (int64_t)pynum_round_half_even((double)in->w * (double)h / (double)in->h);
        w = w < 64 ? 64 : w;
    } else if (h == 0) {
        w = w < 64 ? 64 : w;
        h = (int64_t)pynum_round_half_even((double)in->h * (double)w / (double)in->w);
        h = h < 64 ? 64 : h;
    } else {
        w = w < 64 ? 64 : w;
        h = h < 64 ? 64 : h;
    }
    int crop = strcmp(node_in_str_at(c, UPSCALE_CROP), "center") == 0;
    return resize_latent(c, in, node_in_str_at(c, UPSCALE_UPSCALE_METHOD), crop, h / 8, w / 8);
}

const struct node_class sd_latent_upscale = {
    .name = "LatentUpscale",
    .display_name = "Upscale Latent",
    .category = "latent",
    .inputs = upscale_inputs,
    .n_inputs = UPSCALE_N,
    .outputs = latent_outputs,
    .run = upscale_run,
};

enum { UPSCALE_BY_SAMPLES, UPSCALE_BY_UPSCALE_METHOD, UPSCALE_BY_SCALE_BY, UPSCALE_BY_N };
static const struct node_input_def upscale_by_inputs[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "upscale_method", .type = NODE_COMBO, .options = sd_upscale_methods},
    {.name = "scale_by", .type = "FLOAT", .def = NODE_F(1.5), .min = NODE_F(0.01),
     .max = NODE_F(8.0), .step = NODE_F(0.01)},
    NODE_INPUTS_END};

static int upscale_by_run(struct node_ctx *c)
{
    const struct sd_latent *in = sd__latent_in_at(c, UPSCALE_BY_SAMPLES);
    if (!in)
        return ERR_INVALID;
    double s = node_in_float_at(c, UPSCALE_BY_SCALE_BY);
    int64_t w = (int64_t)pynum_round_half_even((double)in->w * s);
    int64_t h = (int64_t)pynum_round_half_even((double)in->h * s);
    if (w < 1 || h < 1)
        return node_fail(c, "RuntimeError",
                         "scale_by %g makes the %lldx%lld latent empty", s, (long long)in->w,
                         (long long)in->h);
    return resize_latent(c, in, node_in_str_at(c, UPSCALE_BY_UPSCALE_METHOD), 0, h, w);
}

const struct node_class sd_latent_upscale_by = {
    .name = "LatentUpscaleBy",
    .display_name = "Upscale Latent By",
    .category = "latent",
    .inputs = upscale_by_inputs,
    .n_inputs = UPSCALE_BY_N,
    .outputs = latent_outputs,
    .run = upscale_by_run,
};

/* ---- SetLatentNoiseMask ---- */

enum { NOISE_MASK_SAMPLES, NOISE_MASK_MASK, NOISE_MASK_N };
static const struct node_input_def mask_inputs[] = {
    {.name = "samples", .type = "LATENT"}, {.name = "mask", .type = "MASK"}, NODE_INPUTS_END};

static int set_mask_run(struct node_ctx *c)
{
    const struct sd_latent *in = sd__latent_in_at(c, NOISE_MASK_SAMPLES);
    const struct value *m = node_in_at(c, NOISE_MASK_MASK);
    if (!in)
        return ERR_INVALID;
    if (!m || m->kind != VALUE_TENSOR || m->ndim < 2 || m->ndim > 4)
        return node_fail(c, "RuntimeError", "input 'mask' is not a MASK");
    /* mask.reshape((-1, 1, H, W)) */
    int64_t mh = m->shape[m->ndim - 2], mw = m->shape[m->ndim - 1];
    int64_t mb = (int64_t)m->numel / (mh * mw);
    struct sd_latent *out;
    struct err e = {0};
    int rc = sd_latent_try_new_like(in, in->b, in->c, in->h, in->w, &out, &e);
    if (rc < 0)
        return node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
    memcpy(out->samples, in->samples, (size_t)(in->b * in->c * in->h * in->w) * sizeof(float));
    xfree(out->noise_mask);
    out->noise_mask = xmalloc(m->numel * sizeof *out->noise_mask);
    memcpy(out->noise_mask, m->data, m->numel * sizeof *out->noise_mask);
    out->mb = mb;
    out->mh = mh;
    out->mw = mw;
    node_set_output(c, 0, sd_latent_value(out));
    return 0;
}

const struct node_class sd_set_latent_noise_mask = {
    .name = "SetLatentNoiseMask",
    .display_name = "Set Latent Noise Mask",
    .category = "latent/inpaint",
    .inputs = mask_inputs,
    .n_inputs = NOISE_MASK_N,
    .outputs = latent_outputs,
    .run = set_mask_run,
};
