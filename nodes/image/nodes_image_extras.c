/*
 * comfy_extras/nodes_images.py's nodes that need no file format of their own:
 * RepeatImageBatch, ImageFromBatch, ImageAddNoise, GetImageSize, ImageRotate,
 * ImageFlip, ImageScaleToMaxDimension, ResizeAndPadImage (ImageCrop is in nodes_image.c).
 * ImageStitch. Inputs, outputs, titles and categories are ComfyUI's; the animated
 * savers and SVG are not implemented.
 */
#include <string.h>

#include "alloc.h"
#include "node_builtin.h"
#include "node_imgops.h"
#include "node_registry.h"
#include "nodes_image.h"
#include "pynum.h"
#include "sampling_rng.h"

#define MODULE "comfy_extras.nodes_images"
#define MAX_RESOLUTION NODES_IMAGE_MAX_RESOLUTION

/* An IMAGE of the same shape as `img`, NULL when it cannot be allocated. */
static struct value *image_like(struct node_ctx *c, const struct value *img)
{
    return node_new_image(c, img->shape[0], img->shape[1], img->shape[2], img->shape[3]);
}

/* ---- RepeatImageBatch / ImageFromBatch ------------------------------------------------- */

enum { REPEAT_IMAGE, REPEAT_AMOUNT, REPEAT_N };
static const struct node_input_def repeat_in[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "amount", .type = "INT", .def = NODE_I(1), .min = NODE_I(1), .max = NODE_I(4096)},
    NODE_INPUTS_END};

static int repeat_run(struct node_ctx *c)
{
    const struct value *img;
    int rc = nodes__image_in_at(c, REPEAT_IMAGE, &img);
    if (rc < 0)
        return rc;
    int64_t amount = node_in_int_at(c, REPEAT_AMOUNT);
    if (amount < 1)
        return node_fail(c, "RuntimeError", "amount must be at least 1, got %lld", (long long)amount);
    /* image.repeat((amount, 1, 1, 1)): the whole batch, amount times over. */
    struct value *out = node_new_image(c, img->shape[0] * amount, img->shape[1], img->shape[2], img->shape[3]);
    if (!out)
        return ERR_TOO_LARGE;
    for (int64_t i = 0; i < amount; i++)
        memcpy(out->data + (size_t)i * img->numel, img->data, img->numel * sizeof(float));
    node_set_output(c, 0, out);
    return 0;
}

enum { FROM_BATCH_IMAGE, FROM_BATCH_BATCH_INDEX, FROM_BATCH_LENGTH, FROM_BATCH_N };
static const struct node_input_def from_batch_in[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "batch_index", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(4095)},
    {.name = "length", .type = "INT", .def = NODE_I(1), .min = NODE_I(1), .max = NODE_I(4096)},
    NODE_INPUTS_END};

static int from_batch_run(struct node_ctx *c)
{
    const struct value *img;
    int rc = nodes__image_in_at(c, FROM_BATCH_IMAGE, &img);
    if (rc < 0)
        return rc;
    int64_t n = img->shape[0], index = node_in_int_at(c, FROM_BATCH_BATCH_INDEX);
    int64_t length = node_in_int_at(c, FROM_BATCH_LENGTH);
    if (n < 1)
        return node_fail(c, "IndexError", "the image batch is empty");
    if (index < 0 || length < 1)
        return node_fail(c, "ValueError", "batch_index %lld, length %lld out of range",
                         (long long)index, (long long)length);
    index = index < n - 1 ? index : n - 1;
    length = length < n - index ? length : n - index;
    struct value *out = node_new_image(c, length, img->shape[1], img->shape[2], img->shape[3]);
    if (!out)
        return ERR_TOO_LARGE;
    size_t per = img->numel / (size_t)n;
    memcpy(out->data, img->data + (size_t)index * per, (size_t)length * per * sizeof(float));
    node_set_output(c, 0, out);
    return 0;
}

/* ---- ImageAddNoise ---------------------------------------------------------------------- */

enum { NOISE_IMAGE, NOISE_SEED, NOISE_STRENGTH, NOISE_N };
static const struct node_input_def add_noise_in[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "seed", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_U64_MAX,
     .control_after_generate = 1, .tooltip = "The random seed used for creating the noise."},
    {.name = "strength", .type = "FLOAT", .def = NODE_F(0.5), .min = NODE_F(0.0), .max = NODE_F(1.0),
     .step = NODE_F(0.01)},
    NODE_INPUTS_END};

static int add_noise_run(struct node_ctx *c)
{
    const struct value *img;
    int rc = nodes__image_in_at(c, NOISE_IMAGE, &img);
    if (rc < 0)
        return rc;
    struct value *out = image_like(c, img);
    if (!out)
        return ERR_TOO_LARGE;
    /* torch.manual_seed(seed); torch.randn(image.size()) on the CPU, in float32. */
    struct sampling_rng rng;
    sampling_rng_seed(&rng, value_u64(node_in_at(c, NOISE_SEED)));
    sampling_rng_randn(&rng, out->data, out->numel, SAMPLING_RANDN_V2);
    float strength = (float)node_in_float_at(c, NOISE_STRENGTH);
    for (size_t i = 0; i < out->numel; i++) {
        float v = img->data[i] + strength * out->data[i];
        out->data[i] = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
    }
    node_set_output(c, 0, out);
    return 0;
}

/* ---- GetImageSize ----------------------------------------------------------------------- */

enum { SIZE_IMAGE, SIZE_UNIQUE_ID, SIZE_N };
static const struct node_input_def get_size_in[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "unique_id", .type = "UNIQUE_ID", .group = NODE_INPUT_HIDDEN},
    NODE_INPUTS_END};

static int get_size_run(struct node_ctx *c)
{
    const struct value *img;
    int rc = nodes__image_in_at(c, SIZE_IMAGE, &img);
    if (rc < 0)
        return rc;
    /* ComfyUI also shows the size as the node's progress text; latentd has no such event. */
    node_set_output(c, 0, value_new_int(img->shape[2]));
    node_set_output(c, 1, value_new_int(img->shape[1]));
    node_set_output(c, 2, value_new_int(img->shape[0]));
    return 0;
}

/* ---- ImageRotate / ImageFlip ------------------------------------------------------------ */

static const char *const rotations[] = {"none", "90 degrees", "180 degrees", "270 degrees", NULL};
static const char *const flips[] = {"x-axis: vertically", "y-axis: horizontally", NULL};

enum { ROTATE_IMAGE, ROTATE_ROTATION, ROTATE_N };
static const struct node_input_def rotate_in[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "rotation", .type = NODE_COMBO, .options = rotations},
    NODE_INPUTS_END};

/*
 * torch.rot90(image, k, dims=[2, 1]): k = 1 is flip(H) then transpose, so
 * out[i][j] = in[H-1-j][i] (clockwise); k = 2 flips both; k = 3 is flip(W) then
 * transpose, out[i][j] = in[j][W-1-i].
 */
static int rotate_run(struct node_ctx *c)
{
    const struct value *img;
    int rc = nodes__image_in_at(c, ROTATE_IMAGE, &img);
    if (rc < 0)
        return rc;
    const char *r = node_in_str_at(c, ROTATE_ROTATION);
    int k = !strncmp(r, "90", 2) ? 1 : !strncmp(r, "180", 3) ? 2 : !strncmp(r, "270", 3) ? 3 : 0;
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    int64_t oh = k % 2 ? W : H, ow = k % 2 ? H : W;
    struct value *out = node_new_image(c, B, oh, ow, C);
    if (!out)
        return ERR_TOO_LARGE;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                int64_t y = k == 0 ? i : k == 1 ? H - 1 - j : k == 2 ? H - 1 - i : j;
                int64_t x = k == 0 ? j : k == 1 ? i : k == 2 ? W - 1 - j : W - 1 - i;
                memcpy(out->data + ((size_t)(b * oh + i) * ow + j) * C,
                       img->data + ((size_t)(b * H + y) * W + x) * C, (size_t)C * sizeof(float));
            }
    node_set_output(c, 0, out);
    return 0;
}

enum { FLIP_IMAGE, FLIP_FLIP_METHOD, FLIP_N };
static const struct node_input_def flip_in[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "flip_method", .type = NODE_COMBO, .options = flips},
    NODE_INPUTS_END};

static int flip_run(struct node_ctx *c)
{
    const struct value *img;
    int rc = nodes__image_in_at(c, FLIP_IMAGE, &img);
    if (rc < 0)
        return rc;
    const char *m = node_in_str_at(c, FLIP_FLIP_METHOD);
    int fy = m[0] == 'x', fx = m[0] == 'y'; /* x-axis: flip dim 1 (rows); y-axis: dim 2 */
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    struct value *out = image_like(c, img);
    if (!out)
        return ERR_TOO_LARGE;
    for (int64_t b = 0; b < B; b++)
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++)
                memcpy(out->data + ((size_t)(b * H + y) * W + x) * C,
                       img->data + ((size_t)(b * H + (fy ? H - 1 - y : y)) * W + (fx ? W - 1 - x : x)) * C,
                       (size_t)C * sizeof(float));
    node_set_output(c, 0, out);
    return 0;
}

/* ---- ImageScaleToMaxDimension ----------------------------------------------------------- */

/* ComfyUI's list, "bilinear" twice included. */
static const char *const max_dim_methods[] = {"area", "lanczos", "bilinear", "nearest-exact",
                                              "bilinear", "bicubic", NULL};

enum { MAX_DIM_IMAGE, MAX_DIM_UPSCALE_METHOD, MAX_DIM_LARGEST_SIZE, MAX_DIM_N };
static const struct node_input_def max_dim_in[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "upscale_method", .type = NODE_COMBO, .options = max_dim_methods},
    {.name = "largest_size", .type = "INT", .def = NODE_I(512), .min = NODE_I(0),
     .max = NODE_I(MAX_RESOLUTION), .step = NODE_I(1)},
    NODE_INPUTS_END};

static int max_dim_run(struct node_ctx *c)
{
    const struct value *img;
    int rc = nodes__image_in_at(c, MAX_DIM_IMAGE, &img);
    if (rc < 0)
        return rc;
    int64_t h = img->shape[1], w = img->shape[2], l = node_in_int_at(c, MAX_DIM_LARGEST_SIZE);
    if (h > w) {
        w = (int64_t)pynum_round_half_even(((double)w / (double)h) * (double)l);
        h = l;
    } else if (w > h) {
        h = (int64_t)pynum_round_half_even(((double)h / (double)w) * (double)l);
        w = l;
    } else {
        w = h = l;
    }
    return nodes__image_scale_to(c, img, w, h, node_in_str_at(c, MAX_DIM_UPSCALE_METHOD), 0);
}

/* ---- ResizeAndPadImage ------------------------------------------------------------------ */

static const char *const pad_colors[] = {"white", "black", NULL};
static const char *const pad_methods[] = {"area", "bicubic", "nearest-exact", "bilinear", "lanczos", NULL};

enum {
    PAD_IMAGE, PAD_TARGET_WIDTH, PAD_TARGET_HEIGHT, PAD_PADDING_COLOR, PAD_INTERPOLATION, PAD_N
};
static const struct node_input_def resize_pad_in[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "target_width", .type = "INT", .def = NODE_I(512), .min = NODE_I(1),
     .max = NODE_I(MAX_RESOLUTION), .step = NODE_I(1)},
    {.name = "target_height", .type = "INT", .def = NODE_I(512), .min = NODE_I(1),
     .max = NODE_I(MAX_RESOLUTION), .step = NODE_I(1)},
    {.name = "padding_color", .type = NODE_COMBO, .options = pad_colors},
    {.name = "interpolation", .type = NODE_COMBO, .options = pad_methods},
    NODE_INPUTS_END};

/* Fit inside the target keeping the aspect (int() of the scaled sides), centred on a
 * white or black canvas. */
static int resize_pad_run(struct node_ctx *c)
{
    const struct value *img;
    int rc = nodes__image_in_at(c, PAD_IMAGE, &img);
    if (rc < 0)
        return rc;
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    int64_t tw = node_in_int_at(c, PAD_TARGET_WIDTH), th = node_in_int_at(c, PAD_TARGET_HEIGHT);
    if (H < 1 || W < 1 || tw < 1 || th < 1 || tw > MAX_RESOLUTION || th > MAX_RESOLUTION)
        return node_fail(c, "ValueError", "cannot fit a %lldx%lld image into %lldx%lld", (long long)W,
                         (long long)H, (long long)tw, (long long)th);
    double sw = (double)tw / (double)W, sh = (double)th / (double)H, s = sw < sh ? sw : sh;
    int64_t nw = (int64_t)((double)W * s), nh = (int64_t)((double)H * s);
    struct value *out = node_new_image(c, B, th, tw, C);
    if (!out)
        return ERR_TOO_LARGE;
    float *resized = NULL;
    struct err e = {0};
    if ((rc = xtry_malloc((size_t)(B * (nh > 0 ? nh : 1) * (nw > 0 ? nw : 1) * C) * sizeof *resized,
                          (void **)&resized, &e)) < 0) {
        value_unref(out);
        return node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
    }
    const char *method = node_in_str_at(c, PAD_INTERPOLATION);
    if (node_img_resize(img->data, B, H, W, C, resized, nh, nw, method, 0, &e) < 0) {
        xfree(resized);
        value_unref(out);
        return node_fail(c, "RuntimeError", "%s", e.msg);
    }
    float pad = strcmp(node_in_str_at(c, PAD_PADDING_COLOR), "black") ? 1.0f : 0.0f;
    for (size_t i = 0; i < out->numel; i++)
        out->data[i] = pad;
    int64_t y0 = (th - nh) / 2, x0 = (tw - nw) / 2;
    for (int64_t b = 0; b < B; b++)
        for (int64_t y = 0; y < nh; y++)
            memcpy(out->data + ((size_t)(b * th + y0 + y) * tw + x0) * C,
                   resized + ((size_t)(b * nh + y) * nw) * C, (size_t)(nw * C) * sizeof(float));
    xfree(resized);
    node_set_output(c, 0, out);
    return 0;
}

/* ---- ImageStitch ------------------------------------------------------------------------ */

static const char *const stitch_dirs[] = {"right", "down", "left", "up", NULL};
static const char *const stitch_colors[] = {"white", "black", "red", "green", "blue", NULL};

/*
 * One stitched part as a [B, H, W, C] buffer: sample b of src is min(b, sb - 1) (the
 * last image repeats), placed at (y0, x0) on a canvas of `pad`, channels past the
 * source's filled with 1 (ComfyUI pads space first, then appends ones). NULL with e
 * set when the host cannot hold it.
 */
static float *stitch_part(const float *src, int64_t sb, int64_t h, int64_t w, int64_t c, int64_t B,
                          int64_t H, int64_t W, int64_t C, int64_t y0, int64_t x0, float pad,
                          struct err *e)
{
    float *out = NULL;
    if (xtry_malloc((size_t)(B * H * W * C) * sizeof *out, (void **)&out, e) < 0)
        return NULL;
    for (int64_t b = 0; b < B; b++) {
        const float *s = src + (size_t)((b < sb ? b : sb - 1) * h * w * c);
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++) {
                int inside = y >= y0 && y < y0 + h && x >= x0 && x < x0 + w;
                float *o = out + ((size_t)(b * H + y) * W + x) * C;
                for (int64_t k = 0; k < C; k++)
                    o[k] = k >= c ? 1.0f : inside ? s[((y - y0) * w + (x - x0)) * c + k] : pad;
            }
    }
    return out;
}

enum {
    STITCH_IMAGE1, STITCH_DIRECTION, STITCH_MATCH_IMAGE_SIZE, STITCH_SPACING_WIDTH,
    STITCH_SPACING_COLOR, STITCH_IMAGE2, STITCH_N
};
static const struct node_input_def stitch_in[] = {
    {.name = "image1", .type = "IMAGE"},
    {.name = "direction", .type = NODE_COMBO, .options = stitch_dirs, .def_str = "right"},
    {.name = "match_image_size", .type = "BOOLEAN", .def_bool = 1, .has_def_bool = 1},
    {.name = "spacing_width", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(1024),
     .step = NODE_I(2)},
    {.name = "spacing_color", .type = NODE_COMBO, .options = stitch_colors, .def_str = "white"},
    {.name = "image2", .type = "IMAGE", .group = NODE_INPUT_OPTIONAL},
    NODE_INPUTS_END};

static int stitch_run(struct node_ctx *c)
{
    const struct value *a, *b = node_in_at(c, STITCH_IMAGE2);
    int rc = nodes__image_in_at(c, STITCH_IMAGE1, &a);
    if (rc < 0)
        return rc;
    if (!b) {
        node_set_output(c, 0, value_ref((struct value *)a));
        return 0;
    }
    if ((rc = nodes__image_in_at(c, STITCH_IMAGE2, &b)) < 0)
        return rc;
    const char *dir = node_in_str_at(c, STITCH_DIRECTION);
    const char *color = node_in_str_at(c, STITCH_SPACING_COLOR);
    int horiz = !strcmp(dir, "left") || !strcmp(dir, "right"), second_first = !strcmp(dir, "left") || !strcmp(dir, "up");
    int64_t B = a->shape[0] > b->shape[0] ? a->shape[0] : b->shape[0];
    int64_t h1 = a->shape[1], w1 = a->shape[2], c1 = a->shape[3];
    int64_t h2 = b->shape[1], w2 = b->shape[2], c2 = b->shape[3];
    const float *d2 = b->data;
    float *resized = NULL;
    struct err e = {0};
    if (node_in_bool_at(c, STITCH_MATCH_IMAGE_SIZE)) {
        /* image2 to image1's height (or width), aspect kept with int(), lanczos */
        double aspect = (double)w2 / (double)h2;
        int64_t th = horiz ? h1 : (int64_t)((double)w1 / aspect), tw = horiz ? (int64_t)((double)h1 * aspect) : w1;
        if ((rc = xtry_malloc((size_t)(b->shape[0] * (th > 0 ? th : 1) * (tw > 0 ? tw : 1) * c2) * sizeof *resized,
                              (void **)&resized, &e)) < 0)
            return node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
        if (node_img_resize(b->data, b->shape[0], h2, w2, c2, resized, th, tw, "lanczos", 0, &e) < 0) {
            xfree(resized);
            return node_fail(c, "RuntimeError", "%s", e.msg);
        }
        d2 = resized;
        h2 = th;
        w2 = tw;
    }
    /* "white"/"black" pad with their value; the colours pad space with 0 */
    float pad = !strcmp(color, "white") ? 1.0f : 0.0f;
    int64_t C = c1 > c2 ? c1 : c2;
    int64_t H = horiz ? (h1 > h2 ? h1 : h2) : 0, W = horiz ? 0 : (w1 > w2 ? w1 : w2);
    int64_t ph1 = horiz ? H : h1, pw1 = horiz ? w1 : W, ph2 = horiz ? H : h2, pw2 = horiz ? w2 : W;
    float *p1 = stitch_part(a->data, a->shape[0], h1, w1, c1, B, ph1, pw1, C, (ph1 - h1) / 2, (pw1 - w1) / 2,
                            pad, &e);
    float *p2 = p1 ? stitch_part(d2, b->shape[0], h2, w2, c2, B, ph2, pw2, C, (ph2 - h2) / 2,
                                 (pw2 - w2) / 2, pad, &e)
                   : NULL;
    xfree(resized);
    if (!p2) {
        xfree(p1);
        return node_fail_code(c, e.code, "torch.OutOfMemoryError", "%s", e.msg);
    }
    int64_t sw = node_in_int_at(c, STITCH_SPACING_WIDTH);
    sw = sw < 0 ? 0 : sw + sw % 2;
    /* spacing: the colour in its channels (white/black in the first three), alpha 1 */
    float sp[4] = {0, 0, 0, 0};
    if (!strcmp(color, "red") || !strcmp(color, "green") || !strcmp(color, "blue"))
        sp[color[0] == 'r' ? 0 : color[0] == 'g' ? 1 : 2] = 1.0f;
    else
        sp[0] = sp[1] = sp[2] = pad;
    if (C == 4)
        sp[3] = 1.0f;
    int64_t OH = horiz ? H : h1 + sw + h2, OW = horiz ? w1 + sw + w2 : W;
    struct value *out = node_new_image(c, B, OH, OW, C);
    if (!out) {
        xfree(p1);
        xfree(p2);
        return ERR_TOO_LARGE;
    }
    const float *first = second_first ? p2 : p1, *second = second_first ? p1 : p2;
    int64_t fh = second_first ? ph2 : ph1, fw = second_first ? pw2 : pw1;
    int64_t shh = second_first ? ph1 : ph2, sww = second_first ? pw1 : pw2;
    for (int64_t n = 0; n < B; n++)
        for (int64_t y = 0; y < OH; y++)
            for (int64_t x = 0; x < OW; x++) {
                float *o = out->data + ((size_t)(n * OH + y) * OW + x) * C;
                int64_t t = horiz ? x : y; /* position along the concatenation */
                int64_t l1 = horiz ? fw : fh;
                if (t < l1) {
                    memcpy(o, first + ((size_t)(n * fh + y) * fw + x) * C, (size_t)C * sizeof(float));
                } else if (t < l1 + sw) {
                    for (int64_t k = 0; k < C; k++)
                        o[k] = k < 4 ? sp[k] : 0.0f;
                } else {
                    int64_t yy = horiz ? y : y - l1 - sw, xx = horiz ? x - l1 - sw : x;
                    memcpy(o, second + ((size_t)(n * shh + yy) * sww + xx) * C, (size_t)C * sizeof(float));
                }
            }
    xfree(p1);
    xfree(p2);
    node_set_output(c, 0, out);
    return 0;
}

/* ---- declarations ----------------------------------------------------------------------- */

static const struct node_output_def image_out[] = {{.type = "IMAGE"}, NODE_OUTPUTS_END};

static const struct node_output_def get_size_out[] = {
    {.type = "INT", .name = "width"}, {.type = "INT", .name = "height"},
    {.type = "INT", .name = "batch_size"}, NODE_OUTPUTS_END};

const struct node_class nodes_repeat_image_batch = {
    .name = "RepeatImageBatch", .category = "image/batch", .python_module = MODULE,
    .inputs = repeat_in, .n_inputs = REPEAT_N, .outputs = image_out, .run = repeat_run};
const struct node_class nodes_image_from_batch = {
    .name = "ImageFromBatch", .category = "image/batch", .python_module = MODULE,
    .inputs = from_batch_in, .n_inputs = FROM_BATCH_N, .outputs = image_out, .run = from_batch_run};
const struct node_class nodes_image_add_noise = {
    .name = "ImageAddNoise", .category = "image", .python_module = MODULE,
    .inputs = add_noise_in, .n_inputs = NOISE_N, .outputs = image_out, .run = add_noise_run};
const struct node_class nodes_image_stitch = {
    .name = "ImageStitch", .display_name = "Image Stitch", .category = "image/transform",
    .python_module = MODULE,
    .description = "\nStitches image2 to image1 in the specified direction.\nIf image2 is not provided, "
                   "returns image1 unchanged.\nOptional spacing can be added between images.\n",
    .inputs = stitch_in, .n_inputs = STITCH_N, .outputs = image_out, .run = stitch_run};
const struct node_class nodes_resize_and_pad_image = {
    .name = "ResizeAndPadImage", .category = "image/transform", .python_module = MODULE,
    .inputs = resize_pad_in, .n_inputs = PAD_N, .outputs = image_out, .run = resize_pad_run};
const struct node_class nodes_get_image_size = {
    .name = "GetImageSize", .display_name = "Get Image Size", .category = "image", .python_module = MODULE,
    .description = "Returns width and height of the image, and passes it through unchanged.",
    .inputs = get_size_in, .n_inputs = SIZE_N, .outputs = get_size_out, .run = get_size_run};
const struct node_class nodes_image_rotate = {
    .name = "ImageRotate", .category = "image/transform", .python_module = MODULE,
    .inputs = rotate_in, .n_inputs = ROTATE_N, .outputs = image_out, .run = rotate_run};
const struct node_class nodes_image_flip = {
    .name = "ImageFlip", .category = "image/transform", .python_module = MODULE,
    .inputs = flip_in, .n_inputs = FLIP_N, .outputs = image_out, .run = flip_run};
const struct node_class nodes_image_scale_to_max_dimension = {
    .name = "ImageScaleToMaxDimension", .category = "image/upscaling", .python_module = MODULE,
    .inputs = max_dim_in, .n_inputs = MAX_DIM_N, .outputs = image_out, .run = max_dim_run};

/* NODE_CLASS_MAPPINGS order. */
static const struct node_class *const extras_classes[] = {
    &nodes_repeat_image_batch, &nodes_image_from_batch, &nodes_image_add_noise,
    &nodes_save_animated_png, /* nodes_image_apng.c */
    &nodes_image_stitch,
    &nodes_resize_and_pad_image,
    &nodes_get_image_size,
    &nodes_image_rotate,       &nodes_image_flip,       &nodes_image_scale_to_max_dimension};

void nodes_image_extras_register(struct node_registry *r)
{
    node_registry_add_all(r, extras_classes, sizeof(extras_classes) / sizeof(extras_classes[0]));
}
