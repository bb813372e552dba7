/*
 * ImageQuantize (comfy_extras/nodes_post_processing.py, a V3 node): each image of the
 * batch is cut to 8 bits as torch's uint8 cast does, given a palette by Pillow's median
 * cut, and mapped onto it without dithering, with Pillow's Floyd-Steinberg, or after
 * ComfyUI's ordered Bayer pre-dither (node_quant.h has the numerics and the Pillow
 * version they follow). The result is palette colour / 255 in float32.
 *
 * ComfyUI hands the image to PIL as mode 'RGB', so only 3-channel images are taken.
 * Values outside 0..1 are clamped before the uint8 cast, where torch's cast is undefined.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "node_quant.h"
#include "node_registry.h"
#include "nodes_image.h"

static const char *const dither_modes[] = {"none", "floyd-steinberg", "bayer-2", "bayer-4",
                                           "bayer-8", "bayer-16", NULL};

enum { QUANT_IMAGE, QUANT_COLORS, QUANT_DITHER, QUANT_N };
static const struct node_input_def quantize_in[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "colors", .type = "INT", .def = NODE_I(256), .min = NODE_I(1), .max = NODE_I(256),
     .step = NODE_I(1)},
    {.name = "dither", .type = NODE_COMBO, .options = dither_modes},
    NODE_INPUTS_END};

/* One image: px (w*h*3 bytes, overwritten by the Bayer pass) -> dst floats. */
static int quantize_one(struct node_ctx *c, uint8_t *px, uint8_t *tmp, uint8_t *idx, int w, int h,
                        int colors, const char *dither, float *dst)
{
    uint8_t pal[256][3];
    int n_pal;
    struct err e = {0};
    int rc = node_quant_median_cut(px, (size_t)w * h, colors, pal, &n_pal, &e);
    if (rc < 0)
        return node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
    if (!strncmp(dither, "bayer-", 6)) {
        node_quant_bayer(px, w, h, atoi(dither + 6), n_pal, tmp);
        node_quant_map(tmp, w, h, (const uint8_t(*)[3])pal, n_pal, 0, idx);
    } else {
        node_quant_map(px, w, h, (const uint8_t(*)[3])pal, n_pal,
                       !strcmp(dither, "floyd-steinberg"), idx);
    }
    for (size_t i = 0; i < (size_t)w * h; i++)
        for (int k = 0; k < 3; k++)
            dst[3 * i + k] = (float)pal[idx[i]][k] / 255.0f;
    return 0;
}

static int quantize_run(struct node_ctx *c)
{
    const struct value *img;
    int rc = nodes__image_in_at(c, QUANT_IMAGE, &img);
    if (rc < 0)
        return rc;
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    if (C != 3)
        return node_fail(c, "ValueError",
                         "ImageQuantize needs RGB images (3 channels), got %lld channels",
                         (long long)C);
    int colors = (int)node_in_int_at(c, QUANT_COLORS);
    if (colors < 1 || colors > 256)
        return node_fail(c, "ValueError", "bad number of colors");
    const char *dither = node_in_str_at(c, QUANT_DITHER);
    struct value *out = node_new_tensor(c, "IMAGE", 4, img->shape);
    if (!out)
        return ERR_TOO_LARGE;
    size_t n = (size_t)H * W;
    uint8_t *buf = NULL;
    struct err e = {0};
    /* pixels, the Bayer copy and the indices of one image */
    if (xtry_malloc(n * 7, (void **)&buf, &e) < 0) {
        value_unref(out);
        return node_fail_code(c, ERR_TOO_LARGE, "torch.OutOfMemoryError", "%s", e.msg);
    }
    for (int64_t b = 0; b < B && rc == 0; b++) {
        const float *s = img->data + (size_t)b * n * 3;
        for (size_t i = 0; i < n * 3; i++) {
            float v = s[i] * 255.0f;
            buf[i] = (uint8_t)(v >= 255.0f ? 255 : v > 0.0f ? (int)v : 0); /* NaN -> 0 */
        }
        rc = quantize_one(c, buf, buf + n * 3, buf + n * 6, (int)W, (int)H, colors, dither,
                          out->data + (size_t)b * n * 3);
        if (rc == 0 && node_interrupted(c))
            rc = ERR_INTERRUPTED;
    }
    xfree(buf);
    if (rc < 0) {
        value_unref(out);
        return rc;
    }
    node_set_output(c, 0, out);
    return 0;
}

static const struct node_output_def image_out[] = {{.type = "IMAGE"}, NODE_OUTPUTS_END};

const struct node_class nodes_image_quantize = {
    .name = "ImageQuantize", .category = "image/postprocessing",
    .python_module = "comfy_extras.nodes_post_processing", .flags = NODE_CLASS_V3,
    .inputs = quantize_in, .n_inputs = QUANT_N, .outputs = image_out, .run = quantize_run};
