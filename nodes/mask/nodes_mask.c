/*
 * nodes_mask — ComfyUI's comfy_extras/nodes_mask.py mask operations:
 * MaskToImage, ImageToMask, ImageColorToMask, SolidMask, InvertMask, CropMask,
 * MaskComposite, FeatherMask, GrowMask and ThresholdMask (the two composites
 * are in nodes_mask_composite.c). A MASK is float32 [B, H, W] (node_value.h);
 * like ComfyUI, nodes read any mask as reshape(-1, H, W). Arithmetic is
 * float32, as torch's.
 */
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "node_builtin.h"
#include "node_registry.h"
#include "nodes_mask.h"
#include "node_preview.h"
#include "sd_latent_util.h"

#define MAX_RESOLUTION 16384

static const struct node_output_def mask_out[] = {{.type = "MASK"}, NODE_OUTPUTS_END};
static const struct node_output_def image_out[] = {{.type = "IMAGE"}, NODE_OUTPUTS_END};

#define XY_INPUTS                                                                                   \
    {.name = "x", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(MAX_RESOLUTION), \
     .step = NODE_I(1)},                                                                            \
    {.name = "y", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(MAX_RESOLUTION), \
     .step = NODE_I(1)}
#define SIDE(n)                                                                                     \
    {.name = n, .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(MAX_RESOLUTION), \
     .step = NODE_I(1)}
#define SIZE(n)                                                                                       \
    {.name = n, .type = "INT", .def = NODE_I(512), .min = NODE_I(1), .max = NODE_I(MAX_RESOLUTION), \
     .step = NODE_I(1)}

int nodes__mask_in_at(struct node_ctx *c, int index, const struct value **m, int64_t *b,
                      int64_t *h, int64_t *w)
{
    const struct value *v = node_in_at(c, index);
    if (!v || v->kind != VALUE_TENSOR || v->ndim < 2)
        return node_fail(c, "ValueError", "input '%s' is not a MASK", node_in_name(c, index));
    *m = v;
    *h = v->shape[v->ndim - 2];
    *w = v->shape[v->ndim - 1];
    *b = (int64_t)v->numel / (*h * *w);
    return 0;
}

/* A MASK [b, h, w] copy of m (reshape(-1, H, W).clone()); NULL after node_fail. */
static struct value *mask_copy(struct node_ctx *c, const struct value *m, int64_t b, int64_t h, int64_t w)
{
    struct value *o = node_new_mask(c, b, h, w);
    if (o)
        memcpy(o->data, m->data, m->numel * sizeof(float));
    return o;
}

#define MASK_OR_FAIL(index)                                                      \
    const struct value *m;                                                       \
    int64_t b, h, w;                                                             \
    int rc = nodes__mask_in_at(c, index, &m, &b, &h, &w);                        \
    if (rc < 0)                                                                  \
        return rc

/* ---- MaskToImage / ImageToMask / ImageColorToMask ---- */

/* MaskToImage's and InvertMask's. */
enum { MASK_MASK, MASK_N };
static const struct node_input_def mask_in[] = {{.name = "mask", .type = "MASK"}, NODE_INPUTS_END};

static int mask_to_image_run(struct node_ctx *c)
{
    MASK_OR_FAIL(MASK_MASK);
    struct value *o = node_new_image(c, b, h, w, 3);
    if (!o)
        return ERR_TOO_LARGE;
    for (size_t k = 0; k < m->numel; k++)
        o->data[3 * k] = o->data[3 * k + 1] = o->data[3 * k + 2] = m->data[k];
    node_set_output(c, 0, o);
    return 0;
}

static const char *const channels[] = {"red", "green", "blue", "alpha", NULL};

/* Both image-reading nodes take the image first (image_in reads index 0). */
enum { IMAGE_TO_MASK_IMAGE, IMAGE_TO_MASK_CHANNEL, IMAGE_TO_MASK_N };
static const struct node_input_def image_to_mask_in[] = {
    {.name = "image", .type = "IMAGE"}, {.name = "channel", .type = NODE_COMBO, .options = channels},
    NODE_INPUTS_END};
enum { COLOR_IMAGE = IMAGE_TO_MASK_IMAGE, COLOR_COLOR, COLOR_N };
static const struct node_input_def color_in[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "color", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(0xFFFFFF),
     .step = NODE_I(1), .display = "color"},
    NODE_INPUTS_END};

static const struct value *image_in(struct node_ctx *c)
{
    const struct value *img = node_in_at(c, IMAGE_TO_MASK_IMAGE);
    if (!img || img->kind != VALUE_TENSOR || img->ndim != 4) {
        node_fail(c, "ValueError", "input 'image' is not an IMAGE [B,H,W,C]");
        return NULL;
    }
    return img;
}

static int image_to_mask_run(struct node_ctx *c)
{
    const struct value *img = image_in(c);
    if (!img)
        return ERR_INVALID;
    const char *ch = node_in_str_at(c, IMAGE_TO_MASK_CHANNEL);
    int64_t k = 0, nc = img->shape[3];
    while (channels[k] && strcmp(channels[k], ch))
        k++;
    if (k >= nc)
        return node_fail(c, "IndexError", "index %lld is out of bounds for dimension 3 with size %lld",
                         (long long)k, (long long)nc);
    size_t n = (size_t)(img->shape[0] * img->shape[1] * img->shape[2]);
    struct value *o = node_new_mask(c, img->shape[0], img->shape[1], img->shape[2]);
    if (!o)
        return ERR_TOO_LARGE;
    for (size_t p = 0; p < n; p++)
        o->data[p] = img->data[p * (size_t)nc + (size_t)k];
    node_set_output(c, 0, o);
    return 0;
}

/* round(clamp(v, 0, 1) * 255) with torch's round half to even. */
static int to_byte(float v)
{
    v = v < 0 ? 0 : v > 1 ? 1 : v;
    return (int)rintf(v * 255.0f);
}

static int color_to_mask_run(struct node_ctx *c)
{
    const struct value *img = image_in(c);
    if (!img)
        return ERR_INVALID;
    int64_t color = node_in_int_at(c, COLOR_COLOR), nc = img->shape[3];
    if (nc < 3)
        return node_fail(c, "IndexError", "index %lld is out of bounds for dimension 3 with size %lld",
                         (long long)nc, (long long)nc);
    size_t n = (size_t)(img->shape[0] * img->shape[1] * img->shape[2]);
    struct value *o = node_new_mask(c, img->shape[0], img->shape[1], img->shape[2]);
    if (!o)
        return ERR_TOO_LARGE;
    for (size_t p = 0; p < n; p++) {
        const float *px = img->data + p * (size_t)nc;
        int64_t v = ((int64_t)to_byte(px[0]) << 16) + (to_byte(px[1]) << 8) + to_byte(px[2]);
        o->data[p] = v == color ? 1.0f : 0.0f;
    }
    node_set_output(c, 0, o);
    return 0;
}

/* ---- SolidMask / InvertMask / ThresholdMask ---- */

enum { SOLID_VALUE, SOLID_WIDTH, SOLID_HEIGHT, SOLID_N };
static const struct node_input_def solid_in[] = {
    {.name = "value", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0), .max = NODE_F(1.0),
     .step = NODE_F(0.01)},
    SIZE("width"), SIZE("height"), NODE_INPUTS_END};

static int solid_run(struct node_ctx *c)
{
    float v = (float)node_in_float_at(c, SOLID_VALUE);
    struct value *o = node_new_mask(c, 1, node_in_int_at(c, SOLID_HEIGHT), node_in_int_at(c, SOLID_WIDTH));
    if (!o)
        return ERR_TOO_LARGE;
    for (size_t k = 0; k < o->numel; k++)
        o->data[k] = v;
    node_set_output(c, 0, o);
    return 0;
}

enum { THRESHOLD_MASK = MASK_MASK, THRESHOLD_VALUE, THRESHOLD_N };
static const struct node_input_def threshold_in[] = {
    {.name = "mask", .type = "MASK"},
    {.name = "value", .type = "FLOAT", .def = NODE_F(0.5), .min = NODE_F(0.0), .max = NODE_F(1.0),
     .step = NODE_F(0.01)},
    NODE_INPUTS_END};

/* 1.0 - mask and (mask > value).float() keep the input's shape. */
static int pointwise(struct node_ctx *c, int threshold)
{
    MASK_OR_FAIL(MASK_MASK);
    (void)b;
    struct value *o = node_new_tensor(c, m->type, m->ndim, m->shape);
    if (!o)
        return ERR_TOO_LARGE;
    float t = threshold ? (float)node_in_float_at(c, THRESHOLD_VALUE) : 0;
    for (size_t k = 0; k < m->numel; k++)
        o->data[k] = threshold ? (m->data[k] > t ? 1.0f : 0.0f) : 1.0f - m->data[k];
    node_set_output(c, 0, o);
    return 0;
}

static int invert_run(struct node_ctx *c)
{
    return pointwise(c, 0);
}

static int threshold_run(struct node_ctx *c)
{
    return pointwise(c, 1);
}

/* ---- CropMask ---- */

enum { CROP_MASK, CROP_X, CROP_Y, CROP_WIDTH, CROP_HEIGHT, CROP_N };
static const struct node_input_def crop_in[] = {
    {.name = "mask", .type = "MASK"}, XY_INPUTS, SIZE("width"), SIZE("height"), NODE_INPUTS_END};

static int crop_run(struct node_ctx *c)
{
    MASK_OR_FAIL(CROP_MASK);
    int64_t x = node_in_int_at(c, CROP_X), y = node_in_int_at(c, CROP_Y), x0, x1, y0, y1;
    int64_t nw = sd__pyslice(x, x + node_in_int_at(c, CROP_WIDTH), w, &x0, &x1);
    int64_t nh = sd__pyslice(y, y + node_in_int_at(c, CROP_HEIGHT), h, &y0, &y1);
    if (nw < 1 || nh < 1)
        return node_fail(c, "ValueError", "cropping the %lldx%lld mask at %lld, %lld leaves nothing",
                         (long long)w, (long long)h, (long long)x, (long long)y);
    struct value *o = node_new_mask(c, b, nh, nw);
    if (!o)
        return ERR_TOO_LARGE;
    for (int64_t i = 0; i < b; i++)
        for (int64_t r = 0; r < nh; r++)
            memcpy(o->data + (i * nh + r) * nw, m->data + (i * h + y0 + r) * w + x0, (size_t)nw * sizeof(float));
    node_set_output(c, 0, o);
    return 0;
}

/* ---- MaskComposite ---- */

static const char *const mask_ops[] = {"multiply", "add", "subtract", "and", "or", "xor", NULL};

/* torch's round() is half to even, so bool(round(v)) is |v| > 0.5. */
static int on(float v)
{
    return fabsf(v) > 0.5f;
}

static float mask_op(int op, float d, float s)
{
    switch (op) {
    case 0: return d * s;
    case 1: return d + s;
    case 2: return d - s;
    case 3: return (float)(on(d) & on(s));
    case 4: return (float)(on(d) | on(s));
    default: return (float)(on(d) ^ on(s));
    }
}

enum { COMPOSITE_DESTINATION, COMPOSITE_SOURCE, COMPOSITE_X, COMPOSITE_Y, COMPOSITE_OPERATION, COMPOSITE_N };
static const struct node_input_def mask_composite_in[] = {
    {.name = "destination", .type = "MASK"}, {.name = "source", .type = "MASK"}, XY_INPUTS,
    {.name = "operation", .type = NODE_COMBO, .options = mask_ops}, NODE_INPUTS_END};

static int mask_composite_run(struct node_ctx *c)
{
    const struct value *d, *s;
    int64_t db, dh, dw, sb, sh, sw;
    int rc;
    if ((rc = nodes__mask_in_at(c, COMPOSITE_DESTINATION, &d, &db, &dh, &dw)) < 0 ||
        (rc = nodes__mask_in_at(c, COMPOSITE_SOURCE, &s, &sb, &sh, &sw)) < 0)
        return rc;
    if (sb != db && sb != 1)
        return node_fail(c, "RuntimeError",
                         "The size of tensor a (%lld) must match the size of tensor b (%lld) at "
                         "non-singleton dimension 0",
                         (long long)db, (long long)sb);
    int op = 0;
    while (mask_ops[op] && strcmp(mask_ops[op], node_in_str_at(c, COMPOSITE_OPERATION)))
        op++;
    struct value *o = mask_copy(c, d, db, dh, dw);
    if (!o)
        return ERR_TOO_LARGE;
    int64_t left = node_in_int_at(c, COMPOSITE_X), top = node_in_int_at(c, COMPOSITE_Y);
    int64_t vw = (left + sw < dw ? left + sw : dw) - left, vh = (top + sh < dh ? top + sh : dh) - top;
    /* A source placed past the edge changes nothing (ComfyUI's slices are empty there). */
    for (int64_t i = 0; i < db; i++)
        for (int64_t r = 0; r < vh; r++)
            for (int64_t k = 0; k < vw; k++) {
                float *p = &o->data[(i * dh + top + r) * dw + left + k];
                *p = mask_op(op, *p, s->data[((sb == 1 ? 0 : i) * sh + r) * sw + k]);
            }
    for (size_t k = 0; k < o->numel; k++)
        o->data[k] = o->data[k] < 0 ? 0 : o->data[k] > 1 ? 1 : o->data[k];
    node_set_output(c, 0, o);
    return 0;
}

/* ---- FeatherMask ---- */

static void scale_col(struct value *o, int64_t b, int64_t h, int64_t w, int64_t col, float f)
{
    for (int64_t i = 0; i < b * h; i++)
        o->data[i * w + col] *= f;
}

static void scale_row(struct value *o, int64_t b, int64_t h, int64_t w, int64_t row, float f)
{
    for (int64_t i = 0; i < b; i++)
        for (int64_t k = 0; k < w; k++)
            o->data[(i * h + row) * w + k] *= f;
}

enum { FEATHER_MASK, FEATHER_LEFT, FEATHER_TOP, FEATHER_RIGHT, FEATHER_BOTTOM, FEATHER_N };
static const struct node_input_def feather_in[] = {
    {.name = "mask", .type = "MASK"}, SIDE("left"), SIDE("top"), SIDE("right"), SIDE("bottom"),
    NODE_INPUTS_END};

static int feather_run(struct node_ctx *c)
{
    MASK_OR_FAIL(FEATHER_MASK);
    struct value *o = mask_copy(c, m, b, h, w);
    if (!o)
        return ERR_TOO_LARGE;
    int64_t l = node_in_int_at(c, FEATHER_LEFT), r = node_in_int_at(c, FEATHER_RIGHT);
    int64_t t = node_in_int_at(c, FEATHER_TOP), bo = node_in_int_at(c, FEATHER_BOTTOM);
    l = l < w ? l : w;
    r = r < w ? r : w;
    t = t < h ? t : h;
    bo = bo < h ? bo : h;
    /* output[:, :, -x] for x = 0 is column 0: ComfyUI's right and bottom edges start
     * with the first column/row, then wrap to the last ones. */
    for (int64_t x = 0; x < l; x++)
        scale_col(o, b, h, w, x, (float)((x + 1.0) / (double)l));
    for (int64_t x = 0; x < r; x++)
        scale_col(o, b, h, w, (w - x) % w, (float)((x + 1.0) / (double)r));
    for (int64_t y = 0; y < t; y++)
        scale_row(o, b, h, w, y, (float)((y + 1.0) / (double)t));
    for (int64_t y = 0; y < bo; y++)
        scale_row(o, b, h, w, (h - y) % h, (float)((y + 1.0) / (double)bo));
    node_set_output(c, 0, o);
    return 0;
}

/* ---- GrowMask ---- */

/*
 * One scipy grey_dilation (grow) or grey_erosion of a plane with the 3x3
 * footprint (the corners only when !tapered). scipy's default 'reflect' border
 * mirrors the edge pixel, which is already in the footprint, so neighbours
 * outside the plane can be skipped.
 */
static void grow_once(const float *s, float *d, int64_t h, int64_t w, int grow, int tapered)
{
    for (int64_t i = 0; i < h; i++)
        for (int64_t j = 0; j < w; j++) {
            float v = s[i * w + j];
            for (int di = -1; di <= 1; di++)
                for (int dj = -1; dj <= 1; dj++) {
                    int64_t y = i + di, x = j + dj;
                    if ((di && dj && tapered) || y < 0 || y >= h || x < 0 || x >= w)
                        continue;
                    float u = s[y * w + x];
                    v = grow ? (u > v ? u : v) : (u < v ? u : v);
                }
            d[i * w + j] = v;
        }
}

enum { GROW_MASK, GROW_EXPAND, GROW_TAPERED_CORNERS, GROW_N };
static const struct node_input_def grow_in[] = {
    {.name = "mask", .type = "MASK"},
    {.name = "expand", .type = "INT", .def = NODE_I(0), .min = NODE_I(-MAX_RESOLUTION),
     .max = NODE_I(MAX_RESOLUTION), .step = NODE_I(1)},
    {.name = "tapered_corners", .type = "BOOLEAN", .def_bool = 1, .has_def_bool = 1}, NODE_INPUTS_END};

static int grow_run(struct node_ctx *c)
{
    MASK_OR_FAIL(GROW_MASK);
    int64_t expand = node_in_int_at(c, GROW_EXPAND);
    int tapered = node_in_bool_at(c, GROW_TAPERED_CORNERS);
    struct value *o = mask_copy(c, m, b, h, w);
    if (!o)
        return ERR_TOO_LARGE;
    float *tmp = xmalloc((size_t)(h * w) * sizeof(float));
    for (int64_t i = 0; i < b; i++) {
        float *p = o->data + i * h * w;
        for (int64_t n = 0; n < (expand < 0 ? -expand : expand); n++) {
            if (node_interrupted(c)) {
                xfree(tmp);
                value_unref(o);
                return ERR_INTERRUPTED;
            }
            grow_once(p, tmp, h, w, expand > 0, tapered);
            memcpy(p, tmp, (size_t)(h * w) * sizeof(float));
        }
    }
    xfree(tmp);
    node_set_output(c, 0, o);
    return 0;
}

/* ---- declarations ---- */


#define MASK_NODE(sym, cname, title, in, n_in, out, fn)                                            \
    const struct node_class sym = {.name = cname, .display_name = title, .category = "mask",      \
                                   .python_module = NODES_MASK_MODULE, .inputs = in,               \
                                   .n_inputs = n_in, .outputs = out, .run = fn}

MASK_NODE(nodes_mask_to_image, "MaskToImage", "Convert Mask to Image", mask_in, MASK_N, image_out, mask_to_image_run);
MASK_NODE(nodes_image_to_mask, "ImageToMask", "Convert Image to Mask", image_to_mask_in, IMAGE_TO_MASK_N, mask_out, image_to_mask_run);
MASK_NODE(nodes_image_color_to_mask, "ImageColorToMask", NULL, color_in, COLOR_N, mask_out, color_to_mask_run);
MASK_NODE(nodes_solid_mask, "SolidMask", NULL, solid_in, SOLID_N, mask_out, solid_run);
MASK_NODE(nodes_invert_mask, "InvertMask", NULL, mask_in, MASK_N, mask_out, invert_run);
MASK_NODE(nodes_crop_mask, "CropMask", NULL, crop_in, CROP_N, mask_out, crop_run);
MASK_NODE(nodes_mask_composite, "MaskComposite", NULL, mask_composite_in, COMPOSITE_N, mask_out, mask_composite_run);
MASK_NODE(nodes_feather_mask, "FeatherMask", NULL, feather_in, FEATHER_N, mask_out, feather_run);
MASK_NODE(nodes_grow_mask, "GrowMask", NULL, grow_in, GROW_N, mask_out, grow_run);
MASK_NODE(nodes_threshold_mask, "ThresholdMask", NULL, threshold_in, THRESHOLD_N, mask_out, threshold_run);

/* ---- MaskPreview ---- */

/* MaskPreview (a SaveImage subclass): the mask as a grey 3-channel image, previewed. */
enum { PREVIEW_MASK, PREVIEW_PROMPT, PREVIEW_EXTRA_PNGINFO, PREVIEW_N };
static const struct node_input_def mask_preview_in[] = {
    {.name = "mask", .type = "MASK"},
    {.name = "prompt", .type = "PROMPT", .group = NODE_INPUT_HIDDEN},
    {.name = "extra_pnginfo", .type = "EXTRA_PNGINFO", .group = NODE_INPUT_HIDDEN},
    NODE_INPUTS_END};

static int mask_preview_run(struct node_ctx *c)
{
    MASK_OR_FAIL(PREVIEW_MASK);
    /* reshape(-1, 1, H, W).movedim(1, -1).expand(-1, -1, -1, 3) */
    struct value *img = node_new_image(c, b, h, w, 3);
    if (!img)
        return ERR_TOO_LARGE;
    for (size_t k = 0; k < m->numel; k++)
        img->data[3 * k] = img->data[3 * k + 1] = img->data[3 * k + 2] = m->data[k];
    rc = nodes__preview_images(c, img);
    value_unref(img);
    return rc;
}

static const struct node_output_def no_outputs[] = {NODE_OUTPUTS_END};

const struct node_class nodes_mask_preview = {
    .name = "MaskPreview", .category = "mask", .python_module = NODES_MASK_MODULE,
    .description = "Saves the input images to your ComfyUI output directory.",
    .flags = NODE_CLASS_OUTPUT, .inputs = mask_preview_in, .n_inputs = PREVIEW_N, .outputs = no_outputs,
    .run = mask_preview_run, .instance_free = xfree};

/* NODE_CLASS_MAPPINGS order of nodes_mask.py. */
static const struct node_class *const mask_classes[] = {
    &nodes_latent_composite_masked, &nodes_image_composite_masked, &nodes_mask_to_image,
    &nodes_image_to_mask,           &nodes_image_color_to_mask,    &nodes_solid_mask,
    &nodes_invert_mask,             &nodes_crop_mask,              &nodes_mask_composite,
    &nodes_feather_mask,            &nodes_grow_mask,              &nodes_threshold_mask,
    &nodes_mask_preview};

void nodes_mask_register(struct node_registry *r)
{
    node_registry_add_all(r, mask_classes, sizeof(mask_classes) / sizeof(mask_classes[0]));
}
