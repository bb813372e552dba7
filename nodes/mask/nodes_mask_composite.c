/*
 * nodes_mask_composite — LatentCompositeMasked and ImageCompositeMasked of
 * ComfyUI's nodes_mask.py, both built on its composite(): the source (resized
 * to the destination when resize_source, cycled to its batch) is pasted at
 * x, y (pixels; /8 for latents) through a mask resized bilinearly to the
 * source, so a mask of any size works as in ComfyUI. Float32 throughout.
 */
#include <string.h>

#include "alloc.h"
#include "node_registry.h"
#include "nodes_mask.h"
#include "sd_latent_util.h"
#include "sd_upscale.h"

#define MAX_RESOLUTION 16384

/* Both composites declare their inputs in this order. */
enum { IN_DESTINATION, IN_SOURCE, IN_X, IN_Y, IN_RESIZE_SOURCE, IN_MASK, IN_N };
#define COMPOSITE_INPUTS(ty, st)                                                                 \
    [IN_DESTINATION] = {.name = "destination", .type = ty},                                      \
    [IN_SOURCE] = {.name = "source", .type = ty},                                                \
    [IN_X] = {.name = "x", .type = "INT", .def = NODE_I(0), .min = NODE_I(0),                    \
              .max = NODE_I(MAX_RESOLUTION), .step = NODE_I(st)},                                \
    [IN_Y] = {.name = "y", .type = "INT", .def = NODE_I(0), .min = NODE_I(0),                    \
              .max = NODE_I(MAX_RESOLUTION), .step = NODE_I(st)},                                \
    [IN_RESIZE_SOURCE] = {.name = "resize_source", .type = "BOOLEAN", .def_bool = 0,             \
                          .has_def_bool = 1},                                                    \
    [IN_MASK] = {.name = "mask", .type = "MASK", .group = NODE_INPUT_OPTIONAL},                 \
    [IN_N] = NODE_INPUTS_END

static const struct node_input_def latent_in[] = {COMPOSITE_INPUTS("LATENT", 8)};
static const struct node_input_def image_in[] = {COMPOSITE_INPUTS("IMAGE", 1)};

struct planes {
    float *p;        /* [b, c, h, w] */
    int64_t b, c, h, w;
};

/* Bilinear resize (interpolate, align_corners=False) into a new xmalloc'd buffer. */
static int resize(struct node_ctx *c, const struct planes *in, int64_t oh, int64_t ow, float **out)
{
    struct err e = {0};
    int rc = xtry_malloc((size_t)(in->b * in->c * oh * ow) * sizeof(float), (void **)out, &e);
    if (rc < 0)
        return node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
    if (in->h == oh && in->w == ow) {
        memcpy(*out, in->p, (size_t)(in->b * in->c * oh * ow) * sizeof(float));
        return 0;
    }
    if (sd_upscale(in->p, in->b, in->c, in->h, in->w, "bilinear", 0, *out, oh, ow, &e) < 0) {
        xfree(*out);
        return node_fail(c, "ValueError", "%s", e.msg);
    }
    return 0;
}

static int64_t floordiv(int64_t a, int64_t b)
{
    return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

/* composite(destination, source, x, y, mask, multiplier, resize_source); dst in place. */
static int composite(struct node_ctx *c, struct planes *dst, struct planes src, int64_t x, int64_t y,
                     const struct value *mask, int mult, int resize_source)
{
    float *rs = NULL, *m = NULL;
    int rc;
    if (src.c != dst->c)
        return node_fail(c, "RuntimeError",
                         "The size of tensor a (%lld) must match the size of tensor b (%lld) at "
                         "non-singleton dimension 1",
                         (long long)src.c, (long long)dst->c);
    if (resize_source) {
        if ((rc = resize(c, &src, dst->h, dst->w, &rs)) < 0)
            return rc;
        src.p = rs, src.h = dst->h, src.w = dst->w;
    }
    x = x < src.w * -mult ? src.w * -mult : x > dst->w * mult ? dst->w * mult : x;
    y = y < src.h * -mult ? src.h * -mult : y > dst->h * mult ? dst->h * mult : y;
    int64_t left = floordiv(x, mult), top = floordiv(y, mult);
    int64_t mb = 1;
    if (mask) {
        int64_t mh, mw;
        const struct value *mv;
        if ((rc = nodes__mask_in_at(c, IN_MASK, &mv, &mb, &mh, &mw)) < 0 ||
            (rc = resize(c, &(struct planes){mv->data, mb, 1, mh, mw}, src.h, src.w, &m)) < 0) {
            xfree(rs);
            return rc;
        }
    }
    /* The visible part: rows [top, top + n) of dst take rows [0, n) of the source. */
    int64_t a0, a1, b0, b1;
    int64_t rows = sd__pyslice(0, dst->h - top + (y < 0 ? y : 0), src.h, &a0, &a1);
    int64_t cols = sd__pyslice(0, dst->w - left + (x < 0 ? x : 0), src.w, &b0, &b1);
    if (top < 0 || left < 0) {
        /* ComfyUI's negative slice starts wrap around; the inputs' min of 0 rules them out. */
        xfree(rs);
        xfree(m);
        return node_fail(c, "ValueError", "negative composite offsets are not supported");
    }
    for (int64_t i = 0; i < dst->b; i++)
        for (int64_t ch = 0; ch < dst->c; ch++)
            for (int64_t r = 0; r < rows; r++)
                for (int64_t k = 0; k < cols; k++) {
                    float mk = m ? m[((i % mb) * src.h + r) * src.w + k] : 1.0f;
                    float s = src.p[(((i % src.b) * src.c + ch) * src.h + r) * src.w + k];
                    float *d = &dst->p[((i * dst->c + ch) * dst->h + top + r) * dst->w + left + k];
                    *d = mk * s + (1.0f - mk) * *d;
                }
    xfree(rs);
    xfree(m);
    return 0;
}

/* ---- LatentCompositeMasked ---- */

static int latent_composite_run(struct node_ctx *c)
{
    const struct sd_latent *d = sd__latent_in_at(c, IN_DESTINATION);
    const struct sd_latent *s = d ? sd__latent_in_at(c, IN_SOURCE) : NULL;
    if (!s)
        return ERR_INVALID;
    struct sd_latent *out = sd__latent_like(c, d, d->b, d->c, d->h, d->w);
    if (!out)
        return ERR_DEVICE_OOM;
    memcpy(out->samples, d->samples, (size_t)(d->b * d->c * d->h * d->w) * sizeof(float));
    struct planes dst = {out->samples, d->b, d->c, d->h, d->w};
    int rc = composite(c, &dst, (struct planes){s->samples, s->b, s->c, s->h, s->w},
                       node_in_int_at(c, IN_X), node_in_int_at(c, IN_Y), node_in_at(c, IN_MASK), 8,
                       node_in_bool_at(c, IN_RESIZE_SOURCE));
    if (rc < 0) {
        sd_latent_free(out);
        return rc;
    }
    node_set_output(c, 0, sd_latent_value(out));
    return 0;
}

/* ---- ImageCompositeMasked ---- */

/* [b, h, w, ch] (the first `keep` channels, then `pad` channels of 1.0) -> [b, c, h, w] */
static float *to_planes(const struct value *img, int64_t keep, int64_t pad)
{
    int64_t b = img->shape[0], h = img->shape[1], w = img->shape[2], ch = img->shape[3], c = keep + pad;
    float *p = xmalloc((size_t)(b * c * h * w) * sizeof(float));
    for (int64_t i = 0; i < b; i++)
        for (int64_t k = 0; k < c; k++)
            for (int64_t q = 0; q < h * w; q++)
                p[(i * c + k) * h * w + q] = k < keep ? img->data[(i * h * w + q) * ch + k] : 1.0f;
    return p;
}

static int image_composite_run(struct node_ctx *c)
{
    const struct value *d = node_in_at(c, IN_DESTINATION), *s = node_in_at(c, IN_SOURCE);
    if (!d || d->kind != VALUE_TENSOR || d->ndim != 4 || !s || s->kind != VALUE_TENSOR || s->ndim != 4)
        return node_fail(c, "ValueError", "inputs 'destination' and 'source' must be IMAGEs [B,H,W,C]");
    /* node_helpers.image_alpha_fix: cut the source's extra channels, or give the
     * destination one more channel of 1.0 when the source has fewer. */
    int64_t dc = d->shape[3], sc = s->shape[3];
    int64_t dpad = dc > sc ? 1 : 0, skeep = sc > dc ? dc : sc;
    struct value *out = node_new_image(c, d->shape[0], d->shape[1], d->shape[2], dc + dpad);
    if (!out)
        return ERR_TOO_LARGE;
    struct planes dst = {to_planes(d, dc, dpad), d->shape[0], dc + dpad, d->shape[1], d->shape[2]};
    struct planes src = {to_planes(s, skeep, 0), s->shape[0], skeep, s->shape[1], s->shape[2]};
    int rc = composite(c, &dst, src, node_in_int_at(c, IN_X), node_in_int_at(c, IN_Y),
                       node_in_at(c, IN_MASK), 1, node_in_bool_at(c, IN_RESIZE_SOURCE));
    if (rc == 0) {
        int64_t hw = dst.h * dst.w;
        for (int64_t i = 0; i < dst.b; i++)
            for (int64_t k = 0; k < dst.c; k++)
                for (int64_t q = 0; q < hw; q++)
                    out->data[(i * hw + q) * dst.c + k] = dst.p[(i * dst.c + k) * hw + q];
        node_set_output(c, 0, out);
    } else {
        value_unref(out);
    }
    xfree(dst.p);
    xfree(src.p);
    return rc;
}

static const struct node_output_def latent_out[] = {{.type = "LATENT"}, NODE_OUTPUTS_END};
static const struct node_output_def image_out[] = {{.type = "IMAGE"}, NODE_OUTPUTS_END};

const struct node_class nodes_latent_composite_masked = {
    .name = "LatentCompositeMasked", .category = "latent", .python_module = NODES_MASK_MODULE,
    .inputs = latent_in, .n_inputs = IN_N, .outputs = latent_out, .run = latent_composite_run};
const struct node_class nodes_image_composite_masked = {
    .name = "ImageCompositeMasked", .category = "image", .python_module = NODES_MASK_MODULE,
    .inputs = image_in, .n_inputs = IN_N, .outputs = image_out, .run = image_composite_run};
