/*
 * comfy_extras/nodes_post_processing.py (V3 nodes): ImageBlend, ImageBlur,
 * ImageSharpen, ImageScaleToTotalPixels; ImageQuantize (Pillow's median cut and
 * palette mapping) is in nodes_image_quantize.c and registered here in ComfyUI's order.
 *
 * Blur and sharpen: ComfyUI pads reflectively by the radius, convolves with a
 * (2r+1)^2 Gaussian g(x, y) = exp(-(x^2 + y^2) / (2 sigma^2)) over linspace(-1, 1)
 * (normalised to sum 1) and crops the padding away again, i.e. a correlation
 * with reflected borders. That kernel is the outer product of two 1-d ones, so it
 * runs as two 1-d passes; the sharpen kernel is -10a * g plus (1 + 10a) at the
 * centre, i.e. (1 + 10a) * image - 10a * blur(image). Both agree with the 2-d
 * float32 convolution to rounding.
 */
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "node_imgops.h"
#include "node_builtin.h"
#include "node_registry.h"
#include "nodes_image.h"
#include "pynum.h"

#define MODULE "comfy_extras.nodes_post_processing"
#define MAX_RESOLUTION NODES_IMAGE_MAX_RESOLUTION

/* ---- ImageBlend ---------------------------------------------------------------------- */

static const char *const blend_modes[] = {"normal", "multiply", "screen", "overlay",
                                          "soft_light", "difference", NULL};

static float blend_g(float x)
{
    return x <= 0.25f ? ((16.0f * x - 12.0f) * x + 4.0f) * x : sqrtf(x);
}

static float blend_px(int mode, float a, float b)
{
    switch (mode) {
    case 1:
        return a * b;
    case 2:
        return 1.0f - (1.0f - a) * (1.0f - b);
    case 3:
        return a <= 0.5f ? 2.0f * a * b : 1.0f - 2.0f * (1.0f - a) * (1.0f - b);
    case 4:
        return b <= 0.5f ? a - (1.0f - 2.0f * b) * a * (1.0f - a)
                         : a + (2.0f * b - 1.0f) * (blend_g(a) - a);
    case 5:
        return a - b;
    default:
        return b;
    }
}

enum { BLEND_IMAGE1, BLEND_IMAGE2, BLEND_BLEND_FACTOR, BLEND_BLEND_MODE, BLEND_N };
static const struct node_input_def blend_in[] = {
    {.name = "image1", .type = "IMAGE"},
    {.name = "image2", .type = "IMAGE"},
    {.name = "blend_factor", .type = "FLOAT", .def = NODE_F(0.5), .min = NODE_F(0.0), .max = NODE_F(1.0),
     .step = NODE_F(0.01)},
    {.name = "blend_mode", .type = NODE_COMBO, .options = blend_modes},
    NODE_INPUTS_END};

static int blend_run(struct node_ctx *c)
{
    const struct value *a, *b;
    int rc = nodes__image_in_at(c, BLEND_IMAGE1, &a);
    if (rc == 0)
        rc = nodes__image_in_at(c, BLEND_IMAGE2, &b);
    if (rc < 0)
        return rc;
    const char *mode_name = node_in_str_at(c, BLEND_BLEND_MODE);
    int mode = -1;
    for (int i = 0; blend_modes[i]; i++)
        if (!strcmp(mode_name, blend_modes[i]))
            mode = i;
    if (mode < 0)
        return node_fail(c, "ValueError", "Unsupported blend mode: %s", mode_name);
    int64_t B1 = a->shape[0], H = a->shape[1], W = a->shape[2], C = a->shape[3];
    int64_t B2 = b->shape[0], C2 = b->shape[3];
    /* node_helpers.image_alpha_fix: a source with more channels loses the extra ones; a
     * destination with more would gain an alpha channel that cannot broadcast. */
    if (C2 < C)
        return node_fail(c, "RuntimeError", "image2 has %lld channels, image1 %lld",
                         (long long)C2, (long long)C);
    if (B1 != B2 && B1 != 1 && B2 != 1)
        return node_fail(c, "RuntimeError",
                         "The size of tensor a (%lld) must match the size of tensor b (%lld) at "
                         "non-singleton dimension 0",
                         (long long)B1, (long long)B2);
    /* A source of another size is resized to the destination's (bicubic, center crop). */
    float *src = b->data, *resized = NULL;
    if (b->shape[1] != H || b->shape[2] != W) {
        size_t n = (size_t)(B2 * H * W * C2);
        struct err e = {0};
        if ((rc = xtry_malloc(n * sizeof(float), (void **)&resized, &e)) < 0)
            return node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
        if (node_img_resize(b->data, B2, b->shape[1], b->shape[2], C2, resized, H, W, "bicubic", 1, &e) < 0) {
            xfree(resized);
            return node_fail(c, "RuntimeError", "%s", e.msg);
        }
        src = resized;
    }
    int64_t B = B1 > B2 ? B1 : B2;
    struct value *out = node_new_image(c, B, H, W, C);
    if (!out) {
        xfree(resized);
        return ERR_TOO_LARGE;
    }
    double f = node_in_float_at(c, BLEND_BLEND_FACTOR);
    float keep = (float)(1.0 - f), mix = (float)f;
    for (int64_t n = 0; n < B; n++) {
        const float *p1 = a->data + (size_t)(B1 == 1 ? 0 : n) * H * W * C;
        const float *p2 = src + (size_t)(B2 == 1 ? 0 : n) * H * W * C2;
        float *o = out->data + (size_t)n * H * W * C;
        for (int64_t k = 0; k < H * W; k++)
            for (int64_t ch = 0; ch < C; ch++) {
                float x = p1[k * C + ch], y = p2[k * C2 + ch];
                float v = x * keep + blend_px(mode, x, y) * mix;
                o[k * C + ch] = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
            }
    }
    xfree(resized);
    node_set_output(c, 0, out);
    return 0;
}

/* ---- ImageBlur / ImageSharpen ------------------------------------------------------------ */

/*
 * The 1-d factor of gaussian_kernel(2r + 1, sigma): exp(-x^2 / (2 sigma^2)) over
 * torch.linspace(-1, 1, 2r + 1), normalised to sum 1 (so the outer product sums to 1).
 */
static void gauss_1d(int64_t r, double sigma, float *k)
{
    int64_t n = 2 * r + 1;
    double sum = 0, *t = xmalloc((size_t)n * sizeof *t);
    for (int64_t i = 0; i < n; i++) {
        double x = -1.0 + 2.0 * (double)i / (double)(n - 1);
        t[i] = exp(-(x * x) / (2.0 * sigma * sigma));
        sum += t[i];
    }
    for (int64_t i = 0; i < n; i++)
        k[i] = (float)(t[i] / sum);
    xfree(t);
}

static int64_t reflect(int64_t p, int64_t n)
{
    return p < 0 ? -p : p >= n ? 2 * (n - 1) - p : p;
}

/* out = blur(in) for one [H, W, C] image, with reflected borders (r < H and r < W). */
static void blur_image(const float *in, int64_t H, int64_t W, int64_t C, const float *k, int64_t r,
                       float *tmp, float *out)
{
    for (int64_t y = 0; y < H; y++) /* along the rows: [H, W] -> tmp */
        for (int64_t x = 0; x < W; x++)
            for (int64_t ch = 0; ch < C; ch++) {
                float acc = 0.0f;
                for (int64_t j = -r; j <= r; j++)
                    acc += k[j + r] * in[(y * W + reflect(x + j, W)) * C + ch];
                tmp[(y * W + x) * C + ch] = acc;
            }
    for (int64_t y = 0; y < H; y++) /* along the columns: tmp -> out */
        for (int64_t x = 0; x < W; x++)
            for (int64_t ch = 0; ch < C; ch++) {
                float acc = 0.0f;
                for (int64_t i = -r; i <= r; i++)
                    acc += k[i + r] * tmp[(reflect(y + i, H) * W + x) * C + ch];
                out[(y * W + x) * C + ch] = acc;
            }
}

enum { BLUR_IMAGE, BLUR_BLUR_RADIUS, BLUR_SIGMA, BLUR_N };
static const struct node_input_def blur_in[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "blur_radius", .type = "INT", .def = NODE_I(1), .min = NODE_I(1), .max = NODE_I(31),
     .step = NODE_I(1)},
    {.name = "sigma", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.1), .max = NODE_F(10.0),
     .step = NODE_F(0.1)},
    NODE_INPUTS_END};

/* gauss_run reads the image at BLUR_IMAGE for both. */
enum {
    SHARPEN_IMAGE = BLUR_IMAGE, SHARPEN_SHARPEN_RADIUS, SHARPEN_SIGMA, SHARPEN_ALPHA, SHARPEN_N
};
static const struct node_input_def sharpen_in[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "sharpen_radius", .type = "INT", .def = NODE_I(1), .min = NODE_I(1), .max = NODE_I(31),
     .step = NODE_I(1)},
    {.name = "sigma", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.1), .max = NODE_F(10.0),
     .step = NODE_F(0.01)},
    {.name = "alpha", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0), .max = NODE_F(5.0),
     .step = NODE_F(0.01)},
    NODE_INPUTS_END};

/* Blur `img` by radius r into a new IMAGE; sharpen (alpha >= 0) mixes it as above. */
static int gauss_run(struct node_ctx *c, int64_t r, double sigma, int sharpen, double alpha)
{
    const struct value *img;
    int rc = nodes__image_in_at(c, BLUR_IMAGE, &img);
    if (rc < 0)
        return rc;
    if (r == 0) { /* ComfyUI returns the input as is */
        node_set_output(c, 0, value_ref((struct value *)img));
        return 0;
    }
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    if (r < 0 || r >= H || r >= W)
        return node_fail(c, "RuntimeError",
                         "Argument #4: Padding size should be less than the corresponding input "
                         "dimension, but got: padding (%lld, %lld) at dimension %d of input [%lld, %lld, %lld, %lld]",
                         (long long)r, (long long)r, r >= W ? 3 : 2, (long long)B, (long long)C,
                         (long long)H, (long long)W);
    if (!(sigma > 0))
        return node_fail(c, "ValueError", "sigma must be positive, got %g", sigma);
    struct value *out = node_new_image(c, B, H, W, C);
    if (!out)
        return ERR_TOO_LARGE;
    float *tmp = NULL;
    struct err e = {0};
    if ((rc = xtry_malloc((size_t)(H * W * C) * sizeof *tmp, (void **)&tmp, &e)) < 0) {
        value_unref(out);
        return node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
    }
    float *k = xmalloc((size_t)(2 * r + 1) * sizeof *k);
    gauss_1d(r, sigma, k);
    float a10 = (float)(alpha * 10.0), keep = 1.0f + a10;
    for (int64_t n = 0; n < B; n++) {
        const float *in = img->data + (size_t)(n * H * W * C);
        float *o = out->data + (size_t)(n * H * W * C);
        blur_image(in, H, W, C, k, r, tmp, o);
        if (!sharpen)
            continue;
        for (int64_t i = 0; i < H * W * C; i++) {
            float v = keep * in[i] - a10 * o[i];
            o[i] = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
        }
    }
    xfree(tmp);
    xfree(k);
    node_set_output(c, 0, out);
    return 0;
}

static int blur_run(struct node_ctx *c)
{
    return gauss_run(c, node_in_int_at(c, BLUR_BLUR_RADIUS), node_in_float_at(c, BLUR_SIGMA), 0,
                     0.0);
}

static int sharpen_run(struct node_ctx *c)
{
    return gauss_run(c, node_in_int_at(c, SHARPEN_SHARPEN_RADIUS),
                     node_in_float_at(c, SHARPEN_SIGMA), 1, node_in_float_at(c, SHARPEN_ALPHA));
}

/* ---- ImageScaleToTotalPixels ------------------------------------------------------------- */

enum { TOTAL_IMAGE, TOTAL_UPSCALE_METHOD, TOTAL_MEGAPIXELS, TOTAL_N };
static const struct node_input_def total_pixels_in[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "upscale_method", .type = NODE_COMBO, .options = node_img_upscale_methods},
    {.name = "megapixels", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.01), .max = NODE_F(16.0),
     .step = NODE_F(0.01)},
    NODE_INPUTS_END};

static int total_pixels_run(struct node_ctx *c)
{
    const struct value *img;
    int rc = nodes__image_in_at(c, TOTAL_IMAGE, &img);
    if (rc < 0)
        return rc;
    int64_t h = img->shape[1], w = img->shape[2];
    if (h < 1 || w < 1)
        return node_fail(c, "ZeroDivisionError", "division by zero");
    double total = (double)(int64_t)(node_in_float_at(c, TOTAL_MEGAPIXELS) * 1024 * 1024);
    double s = sqrt(total / (double)(w * h));
    return nodes__image_scale_to(c, img, (int64_t)pynum_round_half_even((double)w * s),
                                 (int64_t)pynum_round_half_even((double)h * s),
                                 node_in_str_at(c, TOTAL_UPSCALE_METHOD), 0);
}

/* ---- declarations ------------------------------------------------------------------------ */

static const struct node_output_def image_out[] = {{.type = "IMAGE"}, NODE_OUTPUTS_END};

#define POST_CLASS(var, id, cat, in, n_in, fn)                                                    \
    const struct node_class var = {.name = id, .category = cat, .python_module = MODULE,        \
                                   .flags = NODE_CLASS_V3, .inputs = in, .n_inputs = n_in,       \
                                   .outputs = image_out, .run = fn}

POST_CLASS(nodes_image_blend, "ImageBlend", "image/postprocessing", blend_in, BLEND_N, blend_run);
POST_CLASS(nodes_image_blur, "ImageBlur", "image/postprocessing", blur_in, BLUR_N, blur_run);
POST_CLASS(nodes_image_sharpen, "ImageSharpen", "image/postprocessing", sharpen_in, SHARPEN_N,
           sharpen_run);
POST_CLASS(nodes_image_scale_to_total_pixels, "ImageScaleToTotalPixels", "image/upscaling",
           total_pixels_in, TOTAL_N, total_pixels_run);

/* get_node_list order. */
static const struct node_class *const post_classes[] = {
    &nodes_image_blend, &nodes_image_blur, &nodes_image_quantize, &nodes_image_sharpen,
    &nodes_image_scale_to_total_pixels};

void nodes_image_post_register(struct node_registry *r)
{
    node_registry_add_all(r, post_classes, sizeof(post_classes) / sizeof(post_classes[0]));
}
