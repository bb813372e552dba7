/*
 * comfy_extras/nodes_compositing.py (V3 nodes): PorterDuffImageComposite,
 * SplitImageWithAlpha, JoinImageWithAlpha. A MASK is 1 - alpha, as in ComfyUI; the
 * composites work on alpha-premultiplied float32 pixels in ComfyUI's operation order.
 */
#include <string.h>

#include "alloc.h"
#include "node_builtin.h"
#include "node_imgops.h"
#include "node_registry.h"
#include "nodes_image.h"
#include "nodes_mask.h"

#define MODULE "comfy_extras.nodes_compositing"
#define CATEGORY "mask/compositing"

/* PorterDuffMode, in its enum order (the combo lists the names). */
enum pd_mode {
    PD_ADD, PD_CLEAR, PD_DARKEN, PD_DST, PD_DST_ATOP, PD_DST_IN, PD_DST_OUT, PD_DST_OVER, PD_LIGHTEN,
    PD_MULTIPLY, PD_OVERLAY, PD_SCREEN, PD_SRC, PD_SRC_ATOP, PD_SRC_IN, PD_SRC_OUT, PD_SRC_OVER, PD_XOR,
};
static const char *const pd_modes[] = {"ADD", "CLEAR", "DARKEN", "DST", "DST_ATOP", "DST_IN", "DST_OUT",
                                       "DST_OVER", "LIGHTEN", "MULTIPLY", "OVERLAY", "SCREEN", "SRC",
                                       "SRC_ATOP", "SRC_IN", "SRC_OUT", "SRC_OVER", "XOR", NULL};

static float clamp01(float v)
{
    return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
}

/* porter_duff_composite for one pixel channel: premultiplied s, d with alphas sa, da. */
static void pd_pixel(enum pd_mode m, float s, float sa, float d, float da, float *oi, float *oa)
{
    *oi = *oa = 0.0f;
    switch (m) {
    case PD_ADD: *oa = clamp01(sa + da); *oi = clamp01(s + d); break;
    case PD_CLEAR: *oa = 0.0f; *oi = 0.0f; break;
    case PD_DARKEN:
    case PD_LIGHTEN:
        *oa = sa + da - sa * da;
        *oi = (1.0f - da) * s + (1.0f - sa) * d + (m == PD_DARKEN ? (s < d ? s : d) : (s > d ? s : d));
        break;
    case PD_DST: *oa = da; *oi = d; break;
    case PD_DST_ATOP: *oa = sa; *oi = sa * d + (1.0f - da) * s; break;
    case PD_DST_IN: *oa = sa * da; *oi = d * sa; break;
    case PD_DST_OUT: *oa = (1.0f - sa) * da; *oi = (1.0f - sa) * d; break;
    case PD_DST_OVER: *oa = da + (1.0f - da) * sa; *oi = d + (1.0f - da) * s; break;
    case PD_MULTIPLY: *oa = sa * da; *oi = s * d; break;
    case PD_OVERLAY:
        *oa = sa + da - sa * da;
        *oi = 2.0f * d < da ? 2.0f * s * d : sa * da - 2.0f * (da - s) * (sa - d);
        break;
    case PD_SCREEN: *oa = sa + da - sa * da; *oi = s + d - s * d; break;
    case PD_SRC: *oa = sa; *oi = s; break;
    case PD_SRC_ATOP: *oa = da; *oi = da * s + (1.0f - sa) * d; break;
    case PD_SRC_IN: *oa = sa * da; *oi = s * da; break;
    case PD_SRC_OUT: *oa = (1.0f - da) * sa; *oi = (1.0f - da) * s; break;
    case PD_SRC_OVER: *oa = sa + (1.0f - sa) * da; *oi = s + (1.0f - sa) * d; break;
    case PD_XOR: *oa = (1.0f - da) * sa + (1.0f - sa) * da; *oi = (1.0f - da) * s + (1.0f - sa) * d; break;
    }
}

/* common_upscale(bicubic, center) of one [h, w, c] plane to [oh, ow, c] into a new buffer. */
static float *bicubic_to(const float *src, int64_t h, int64_t w, int64_t c, int64_t oh, int64_t ow,
                         struct err *e)
{
    float *out = xmalloc((size_t)(oh * ow * c) * sizeof *out);
    if (resample(src, 1, c, h, w, RESAMPLE_BHWC, "bicubic", 1, out, oh, ow, e) < 0) {
        xfree(out);
        return NULL;
    }
    return out;
}

enum { PD_SOURCE, PD_SOURCE_ALPHA, PD_DESTINATION, PD_DESTINATION_ALPHA, PD_MODE, PD_N };
static const struct node_input_def porter_duff_in[] = {
    {.name = "source", .type = "IMAGE"},
    {.name = "source_alpha", .type = "MASK"},
    {.name = "destination", .type = "IMAGE"},
    {.name = "destination_alpha", .type = "MASK"},
    {.name = "mode", .type = NODE_COMBO, .options = pd_modes, .def_str = "DST"},
    NODE_INPUTS_END};

static int porter_duff_run(struct node_ctx *c)
{
    const struct value *src, *dst, *sm, *dm;
    int64_t sb, sh, sw, db, dh, dw;
    int rc;
    if ((rc = nodes__image_in_at(c, PD_SOURCE, &src)) < 0 ||
        (rc = nodes__image_in_at(c, PD_DESTINATION, &dst)) < 0 ||
        (rc = nodes__mask_in_at(c, PD_SOURCE_ALPHA, &sm, &sb, &sh, &sw)) < 0 ||
        (rc = nodes__mask_in_at(c, PD_DESTINATION_ALPHA, &dm, &db, &dh, &dw)) < 0)
        return rc;
    const char *mode_name = node_in_str_at(c, PD_MODE);
    int mode = -1;
    for (int i = 0; pd_modes[i]; i++)
        if (!strcmp(mode_name, pd_modes[i]))
            mode = i;
    if (mode < 0)
        return node_fail(c, "KeyError", "'%s'", mode_name);
    int64_t C = dst->shape[3], H = dst->shape[1], W = dst->shape[2];
    if (src->shape[3] != C)
        return node_fail(c, "AssertionError", "source has %lld channels, destination %lld",
                         (long long)src->shape[3], (long long)C);
    int64_t n = src->shape[0];
    n = sb < n ? sb : n;
    n = dst->shape[0] < n ? dst->shape[0] : n;
    n = db < n ? db : n;
    struct value *oimg = node_new_image(c, n, H, W, C);
    struct value *omask = oimg ? node_new_mask(c, n, H, W) : NULL;
    if (!omask) {
        value_unref(oimg);
        return ERR_TOO_LARGE;
    }
    struct err e = {0};
    rc = 0;
    for (int64_t i = 0; i < n && rc == 0; i++) {
        const float *si = src->data + (size_t)(i * src->shape[1] * src->shape[2] * C);
        const float *di = dst->data + (size_t)(i * H * W * C);
        const float *sa = sm->data + (size_t)(i * sh * sw), *da = dm->data + (size_t)(i * dh * dw);
        float *sir = NULL, *sar = NULL, *dar = NULL;
        int64_t ah = dh, aw = dw; /* dst_alpha's size after its resize */
        if (dh != H || dw != W) {
            if (!(dar = bicubic_to(da, dh, dw, 1, H, W, &e)))
                rc = -1;
            da = dar;
            ah = H;
            aw = W;
        }
        if (rc == 0 && (src->shape[1] != H || src->shape[2] != W)) {
            if (!(sir = bicubic_to(si, src->shape[1], src->shape[2], C, H, W, &e)))
                rc = -1;
            si = sir;
        }
        if (rc == 0 && (sh != ah || sw != aw)) {
            if (!(sar = bicubic_to(sa, sh, sw, 1, ah, aw, &e)))
                rc = -1;
            sa = sar;
        }
        if (rc == 0 && (ah != H || aw != W)) { /* cannot happen: dst_alpha was resized */
            rc = -1;
            err_set(&e, ERR_INVALID, "alpha size mismatch");
        }
        for (int64_t p = 0; rc == 0 && p < H * W; p++) {
            float a_s = 1.0f - sa[p], a_d = 1.0f - da[p], oa = 0.0f;
            for (int64_t k = 0; k < C; k++) {
                float oi = 0.0f;
                pd_pixel((enum pd_mode)mode, si[p * C + k] * a_s, a_s, di[p * C + k] * a_d, a_d, &oi, &oa);
                oi = oa > 1e-5f ? oi / oa : 0.0f;
                oimg->data[(size_t)((i * H * W + p) * C + k)] = clamp01(oi);
            }
            omask->data[(size_t)(i * H * W + p)] = 1.0f - oa;
        }
        xfree(sir);
        xfree(sar);
        xfree(dar);
    }
    if (rc < 0) {
        value_unref(oimg);
        value_unref(omask);
        return node_fail(c, "RuntimeError", "%s", e.msg);
    }
    node_set_output(c, 0, oimg);
    node_set_output(c, 1, omask);
    return 0;
}

enum { SPLIT_IMAGE, SPLIT_N };
static const struct node_input_def split_in[] = {{.name = "image", .type = "IMAGE"}, NODE_INPUTS_END};

static int split_run(struct node_ctx *c)
{
    const struct value *img;
    int rc;
    if ((rc = nodes__image_in_at(c, SPLIT_IMAGE, &img)) < 0)
        return rc;
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    int64_t oc = C < 3 ? C : 3;
    struct value *oimg = node_new_image(c, B, H, W, oc);
    struct value *omask = oimg ? node_new_mask(c, B, H, W) : NULL;
    if (!omask) {
        value_unref(oimg);
        return ERR_TOO_LARGE;
    }
    for (int64_t p = 0; p < B * H * W; p++) {
        memcpy(oimg->data + p * oc, img->data + p * C, (size_t)oc * sizeof(float));
        omask->data[p] = 1.0f - (C > 3 ? img->data[p * C + 3] : 1.0f);
    }
    node_set_output(c, 0, oimg);
    node_set_output(c, 1, omask);
    return 0;
}

enum { JOIN_IMAGE, JOIN_ALPHA, JOIN_N };
static const struct node_input_def join_in[] = {
    {.name = "image", .type = "IMAGE"}, {.name = "alpha", .type = "MASK"}, NODE_INPUTS_END};

static int join_run(struct node_ctx *c)
{
    const struct value *img, *m;
    int64_t mb, mh, mw;
    int rc;
    if ((rc = nodes__image_in_at(c, JOIN_IMAGE, &img)) < 0 ||
        (rc = nodes__mask_in_at(c, JOIN_ALPHA, &m, &mb, &mh, &mw)) < 0)
        return rc;
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    int64_t ic = C < 3 ? C : 3, n = B < mb ? B : mb;
    /* resize_mask: interpolate(bilinear) to the image size, always */
    float *alpha = NULL;
    struct err e = {0};
    if ((rc = xtry_malloc((size_t)(mb * H * W) * sizeof *alpha, (void **)&alpha, &e)) < 0)
        return node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
    if (resample(m->data, mb, 1, mh, mw, RESAMPLE_BCHW, "bilinear", 0, alpha, H, W, &e) < 0) {
        xfree(alpha);
        return node_fail(c, "RuntimeError", "%s", e.msg);
    }
    struct value *out = node_new_image(c, n, H, W, ic + 1);
    if (!out) {
        xfree(alpha);
        return ERR_TOO_LARGE;
    }
    for (int64_t p = 0; p < n * H * W; p++) {
        memcpy(out->data + p * (ic + 1), img->data + p * C, (size_t)ic * sizeof(float));
        out->data[p * (ic + 1) + ic] = 1.0f - alpha[p];
    }
    xfree(alpha);
    node_set_output(c, 0, out);
    return 0;
}

static const struct node_output_def image_mask_out[] = {{.type = "IMAGE"}, {.type = "MASK"}, NODE_OUTPUTS_END};
static const struct node_output_def image_out[] = {{.type = "IMAGE"}, NODE_OUTPUTS_END};

const struct node_class nodes_porter_duff_image_composite = {
    .name = "PorterDuffImageComposite", .display_name = "Porter-Duff Image Composite", .category = CATEGORY,
    .python_module = MODULE, .flags = NODE_CLASS_V3, .inputs = porter_duff_in, .n_inputs = PD_N,
    .outputs = image_mask_out, .run = porter_duff_run};
const struct node_class nodes_split_image_with_alpha = {
    .name = "SplitImageWithAlpha", .display_name = "Split Image with Alpha", .category = CATEGORY,
    .python_module = MODULE, .flags = NODE_CLASS_V3, .inputs = split_in, .n_inputs = SPLIT_N,
    .outputs = image_mask_out, .run = split_run};
const struct node_class nodes_join_image_with_alpha = {
    .name = "JoinImageWithAlpha", .display_name = "Join Image with Alpha", .category = CATEGORY,
    .python_module = MODULE, .flags = NODE_CLASS_V3, .inputs = join_in, .n_inputs = JOIN_N,
    .outputs = image_out, .run = join_run};

/* get_node_list order. */
static const struct node_class *const compositing_classes[] = {
    &nodes_porter_duff_image_composite, &nodes_split_image_with_alpha, &nodes_join_image_with_alpha};

void nodes_image_compositing_register(struct node_registry *r)
{
    node_registry_add_all(r, compositing_classes, sizeof(compositing_classes) / sizeof(compositing_classes[0]));
}
