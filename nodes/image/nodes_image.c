/*
 * Image nodes that need no model (comfy-api.md §7.3, §8): LoadImage,
 * LoadImageMask, LoadImageOutput, SaveImage, PreviewImage, ImageScale, ImageScaleBy,
 * ImageInvert, EmptyImage, ImageBatch, ImageCrop, ImagePadForOutpaint. Inputs, outputs,
 * titles and categories are ComfyUI's.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "node_builtin.h"
#include "node_files.h"
#include "node_imageio.h"
#include "node_imgops.h"
#include "node_registry.h"
#include "nodes_image.h"
#include "node_preview.h"
#include "pynum.h"

#define MAX_RESOLUTION NODES_IMAGE_MAX_RESOLUTION

static const char *const crop_methods[] = {"disabled", "center", NULL};
static const char *const mask_channels[] = {"alpha", "red", "green", "blue", NULL};

static int check_image(struct node_ctx *c, const struct value *v, const char *name)
{
    if (!v || v->kind != VALUE_TENSOR || v->ndim != 4)
        return node_fail(c, "ValueError", "input '%s' is not an IMAGE [B,H,W,C]", name);
    return 0;
}

int nodes__image_in_at(struct node_ctx *c, int index, const struct value **img)
{
    *img = node_in_at(c, index);
    return check_image(c, *img, node_in_name(c, index));
}

/* ---- LoadImage / LoadImageMask ------------------------------------------------------ */

static void input_images(const struct node_env *env, struct node_strlist *out)
{
    node_files_list_input_images(env, out);
}

static int validate_image_name(const struct node_env *env, const char *value, struct buf *reason)
{
    return node_files_validate_input(env, value, "image", reason);
}

enum { LOAD_IMAGE, LOAD_N };
static const struct node_input_def load_image_in[] = {
    {.name = "image", .type = NODE_COMBO, .options_fn = input_images, .image_upload = 1,
     .validate = validate_image_name},
    NODE_INPUTS_END};

/* image_is_changed and load_file read both classes' image at LOAD_IMAGE. */
enum { LOAD_MASK_IMAGE = LOAD_IMAGE, LOAD_MASK_CHANNEL, LOAD_MASK_N };
static const struct node_input_def load_mask_in[] = {
    {.name = "image", .type = NODE_COMBO, .options_fn = input_images, .image_upload = 1,
     .validate = validate_image_name},
    {.name = "channel", .type = NODE_COMBO, .options = mask_channels},
    NODE_INPUTS_END};

/* IS_CHANGED: the SHA-256 of the file, so a replaced file re-runs the node. */
static int image_is_changed(struct node_ctx *c, struct buf *out)
{
    const struct value *v = node_in_at(c, LOAD_IMAGE);
    if (!v || v->kind != VALUE_STRING)
        return ERR_INVALID;
    return node_files_input_sha256_hex(c->env, v->s, out);
}

static int load_file(struct node_ctx *c, struct node_image_file *f)
{
    const char *name = node_in_str_at(c, LOAD_IMAGE);
    struct buf path;
    buf_init(&path);
    int rc = node_files_resolve_input(c->env, name, &path);
    if (rc < 0) {
        buf_release(&path);
        return node_fail_code(c, ERR_NOT_FOUND, "FileNotFoundError",
                              "[Errno 2] No such file or directory: '%s'", name);
    }
    struct err e = {0};
    rc = node_image_load(path.ptr, f, &e);
    buf_release(&path);
    if (rc < 0)
        return node_fail_code(c, rc,
                              rc == ERR_IO          ? "OSError"
                              : rc == ERR_TOO_LARGE ? "PIL.Image.DecompressionBombError"
                                                    : "PIL.UnidentifiedImageError",
                              "%s", e.msg);
    return 0;
}

static int load_image_run(struct node_ctx *c)
{
    struct node_image_file f;
    int rc = load_file(c, &f);
    if (rc < 0)
        return rc;
    /* Frames of a different size than the first are skipped, as ComfyUI does. */
    int w = f.frames[0].w, h = f.frames[0].h, n = 0;
    for (int i = 0; i < f.n_frames; i++)
        n += f.frames[i].w == w && f.frames[i].h == h;
    int has_alpha = f.frames[0].c == 2 || f.frames[0].c == 4;
    struct value *img = node_new_image(c, n, h, w, 3);
    struct value *mask = img ? (has_alpha ? node_new_mask(c, n, h, w) : node_new_mask(c, n, 64, 64)) : NULL;
    if (!mask) {
        value_unref(img);
        node_image_file_release(&f);
        return ERR_TOO_LARGE;
    }
    int b = 0;
    for (int i = 0; i < f.n_frames; i++) {
        const struct node_pixels *p = &f.frames[i];
        if (p->w != w || p->h != h)
            continue;
        float *dst = img->data + (size_t)b * h * w * 3;
        float *m = mask->data + (size_t)b * (has_alpha ? (size_t)h * w : 64 * 64);
        for (size_t k = 0; k < (size_t)w * h; k++) {
            const uint8_t *s = p->px + k * p->c;
            if (p->c <= 2) {
                dst[3 * k] = dst[3 * k + 1] = dst[3 * k + 2] = s[0] / 255.0f;
            } else {
                dst[3 * k] = s[0] / 255.0f;
                dst[3 * k + 1] = s[1] / 255.0f;
                dst[3 * k + 2] = s[2] / 255.0f;
            }
            if (has_alpha)
                m[k] = 1.0f - s[p->c - 1] / 255.0f;
        }
        b++;
    }
    node_image_file_release(&f);
    node_set_output(c, 0, img);
    node_set_output(c, 1, mask);
    return 0;
}

static int load_mask_run(struct node_ctx *c)
{
    struct node_image_file f;
    int rc = load_file(c, &f);
    if (rc < 0)
        return rc;
    const struct node_pixels *p = &f.frames[0];
    const char *ch = node_in_str_at(c, LOAD_MASK_CHANNEL);
    /* After PIL's convert("RGBA"): gray fills R, G and B; missing alpha is 255. */
    int idx = !strcmp(ch, "red") ? 0 : !strcmp(ch, "green") ? 1 : !strcmp(ch, "blue") ? 2 : 3;
    struct value *mask = node_new_mask(c, 1, p->h, p->w);
    if (!mask) {
        node_image_file_release(&f);
        return ERR_TOO_LARGE;
    }
    for (size_t k = 0; k < (size_t)p->w * p->h; k++) {
        const uint8_t *s = p->px + k * p->c;
        uint8_t v;
        if (idx == 3)
            v = (p->c == 2 || p->c == 4) ? s[p->c - 1] : 255;
        else
            v = p->c <= 2 ? s[0] : s[idx];
        mask->data[k] = idx == 3 ? 1.0f - v / 255.0f : v / 255.0f;
    }
    node_image_file_release(&f);
    node_set_output(c, 0, mask);
    return 0;
}

static const struct node_output_def load_image_out[] = {{.type = "IMAGE"}, {.type = "MASK"}, NODE_OUTPUTS_END};

static const struct node_output_def mask_out[] = {{.type = "MASK"}, NODE_OUTPUTS_END};

static const struct node_class load_image = {
    .name = "LoadImage", .display_name = "Load Image", .category = "image",
    .inputs = load_image_in, .n_inputs = LOAD_N, .outputs = load_image_out, .run = load_image_run,
    .is_changed = image_is_changed};
/*
 * LoadImageOutput: LoadImage whose combo the client fills from the output folder
 * (/internal/files/output) with names annotated " [output]"; node_files_resolve_input
 * reads the annotation, so a plain name still means the input folder, as in ComfyUI.
 */
static const struct node_input_def load_output_in[] = {
    {.name = "image", .type = NODE_COMBO, .image_upload = 1, .image_folder = "output",
     .remote_route = "/internal/files/output", .validate = validate_image_name},
    NODE_INPUTS_END};

static const struct node_class load_image_output = {
    .name = "LoadImageOutput", .display_name = "Load Image (from Outputs)", .category = "image",
    .description = "Load an image from the output folder. When the refresh button is clicked, "
                   "the node will update the image list and automatically select the first "
                   "image, allowing for easy iteration.",
    .flags = NODE_CLASS_EXPERIMENTAL, .inputs = load_output_in, .n_inputs = LOAD_N,
    .outputs = load_image_out, .run = load_image_run, .is_changed = image_is_changed};
static const struct node_class load_image_mask = {
    .name = "LoadImageMask", .display_name = "Load Image (as Mask)", .category = "mask",
    .inputs = load_mask_in, .n_inputs = LOAD_MASK_N, .outputs = mask_out, .run = load_mask_run,
    .is_changed = image_is_changed};

/* ---- SaveImage / PreviewImage ------------------------------------------------------- */

void nodes__image_expand_prefix(const char *prefix, int w, int h, struct buf *out)
{
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    for (const char *p = prefix; *p;) {
        struct {
            const char *tok;
            int val, pad;
        } vars[] = {{"%width%", w, 0},           {"%height%", h, 0},
                    {"%year%", tm.tm_year + 1900, 0}, {"%month%", tm.tm_mon + 1, 2},
                    {"%day%", tm.tm_mday, 2},    {"%hour%", tm.tm_hour, 2},
                    {"%minute%", tm.tm_min, 2},  {"%second%", tm.tm_sec, 2}};
        int hit = 0;
        if (*p == '%') {
            for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]) && !hit; i++) {
                size_t n = strlen(vars[i].tok);
                if (!strncmp(p, vars[i].tok, n)) {
                    buf_printf(out, "%0*d", vars[i].pad, vars[i].val);
                    p += n;
                    hit = 1;
                }
            }
        }
        if (!hit)
            buf_addc(out, *p++);
    }
}

static const char batch_tok[] = "%batch_num%";

static int save_images(struct node_ctx *c, const struct value *img, const char *base,
                       const char *prefix, const char *type, int level)
{
    int rc = check_image(c, img, "images");
    if (rc < 0)
        return rc;
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    if (C != 1 && C != 3 && C != 4)
        return node_fail(c, "TypeError", "Cannot handle this data type: (1, 1, %lld), |u1", (long long)C);
    struct buf pre, norm, sub, fname, dir, path;
    buf_init(&pre);
    buf_init(&norm);
    buf_init(&sub);
    buf_init(&fname);
    buf_init(&dir);
    buf_init(&path);
    nodes__image_expand_prefix(prefix, (int)W, (int)H, &pre);
    if (node_files_normalize_rel(pre.ptr, &norm) < 0) {
        rc = node_fail(c, "Exception", "Saving image outside the output folder is not allowed.");
        goto out;
    }
    const char *slash = strrchr(norm.ptr, '/');
    if (slash) {
        buf_add(&sub, norm.ptr, (size_t)(slash - norm.ptr));
        buf_adds(&fname, slash + 1);
    } else {
        buf_adds(&fname, norm.ptr);
    }
    buf_printf(&dir, "%s%s%s", base, sub.len ? "/" : "", sub.ptr);
    if (node_files_mkdirs(dir.ptr) < 0) {
        rc = node_fail(c, "OSError", "cannot create folder '%s' in the output folder",
                       sub.ptr);
        goto out;
    }
    int counter = node_files_next_counter(dir.ptr, fname.ptr);
    struct node_text_chunk *text = NULL;
    int n_text = 0;
    if (!c->env->disable_metadata) {
        text = xcalloc((size_t)(1 + c->n_pnginfo), sizeof(*text));
        if (c->prompt_json)
            text[n_text++] = (struct node_text_chunk){"prompt", c->prompt_json};
        for (int i = 0; i < c->n_pnginfo; i++)
            text[n_text++] = c->pnginfo[i];
    }
    uint8_t *px = xmalloc((size_t)H * W * C);
    for (int64_t b = 0; b < B && rc == 0; b++, counter++) {
        const float *s = img->data + (size_t)b * H * W * C;
        for (size_t k = 0; k < (size_t)H * W * C; k++) {
            float v = 255.0f * s[k];
            px[k] = (uint8_t)(v <= 0 || v != v ? 0 : v >= 255 ? 255 : (int)v); /* truncates */
        }
        /* %batch_num% -> batch index, then "<name>_<counter:05d>_.png" */
        struct buf name;
        buf_init(&name);
        for (const char *p = fname.ptr; *p;) {
            if (!strncmp(p, batch_tok, sizeof(batch_tok) - 1)) {
                buf_printf(&name, "%lld", (long long)b);
                p += sizeof(batch_tok) - 1;
            } else {
                buf_addc(&name, *p++);
            }
        }
        buf_printf(&name, "_%05d_.png", counter);
        buf_reset(&path);
        buf_printf(&path, "%s/%s", dir.ptr, name.ptr);
        struct err e = {0};
        errno = 0;
        if (node_png_write(path.ptr, px, (int)W, (int)H, (int)C, level, text, n_text, &e) < 0)
            /* Named relative to the output folder: clients never see the server's paths. */
            rc = node_fail(c, "OSError", "cannot save '%s%s%s': %s", sub.ptr, sub.len ? "/" : "",
                           name.ptr, errno ? strerror(errno) : "the image could not be written");
        else
            node_ui_add_image(c, name.ptr, sub.ptr, type);
        buf_release(&name);
    }
    xfree(px);
    xfree(text);
    if (rc == 0 && B == 0)
        c->has_ui = 1;
out:
    buf_release(&pre);
    buf_release(&norm);
    buf_release(&sub);
    buf_release(&fname);
    buf_release(&dir);
    buf_release(&path);
    return rc;
}

enum { SAVE_IMAGES, SAVE_FILENAME_PREFIX, SAVE_PROMPT, SAVE_EXTRA_PNGINFO, SAVE_N };
static const struct node_input_def save_image_in[] = {
    {.name = "images", .type = "IMAGE", .tooltip = "The images to save."},
    {.name = "filename_prefix", .type = "STRING", .def_str = "ComfyUI",
     .tooltip = "The prefix for the file to save. This may include formatting information such as "
                "%date:yyyy-MM-dd% or %Empty Latent Image.width% to include values from nodes."},
    {.name = "prompt", .type = "PROMPT", .group = NODE_INPUT_HIDDEN},
    {.name = "extra_pnginfo", .type = "EXTRA_PNGINFO", .group = NODE_INPUT_HIDDEN},
    NODE_INPUTS_END};

static int save_image_run(struct node_ctx *c)
{
    return save_images(c, node_in_at(c, SAVE_IMAGES), c->env->output_dir,
                       node_in_str_at(c, SAVE_FILENAME_PREFIX), "output", 4);
}

/* ComfyUI's alphabet has no 'w' and two 'p's (a quirk kept for fidelity). */
static const char preview_alphabet[] = "abcdefghijklmnopqrstupvxyz";

int nodes__preview_images(struct node_ctx *c, const struct value *img)
{
    void **slot = node_instance(c);
    if (!*slot) {
        char *suffix = xmalloc(6);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)(uintptr_t)c;
        for (int i = 0; i < 5; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            suffix[i] = preview_alphabet[(s >> 33) % (sizeof(preview_alphabet) - 1)];
        }
        suffix[5] = '\0';
        *slot = suffix;
    }
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "ComfyUI_temp_%s", (const char *)*slot);
    return save_images(c, img, c->env->temp_dir, prefix, "temp", 1);
}

enum { PREVIEW_IMAGES, PREVIEW_PROMPT, PREVIEW_EXTRA_PNGINFO, PREVIEW_N };
static const struct node_input_def preview_image_in[] = {
    {.name = "images", .type = "IMAGE"},
    {.name = "prompt", .type = "PROMPT", .group = NODE_INPUT_HIDDEN},
    {.name = "extra_pnginfo", .type = "EXTRA_PNGINFO", .group = NODE_INPUT_HIDDEN},
    NODE_INPUTS_END};

static int preview_image_run(struct node_ctx *c)
{
    return nodes__preview_images(c, node_in_at(c, PREVIEW_IMAGES));
}

static const struct node_output_def no_outputs[] = {NODE_OUTPUTS_END};

#define SAVE_DESC "Saves the input images to your ComfyUI output directory."

static const struct node_class save_image = {
    .name = "SaveImage", .display_name = "Save Image", .description = SAVE_DESC,
    .category = "image", .flags = NODE_CLASS_OUTPUT, .inputs = save_image_in,
    .n_inputs = SAVE_N, .outputs = no_outputs, .run = save_image_run};
static const struct node_class preview_image = {
    .name = "PreviewImage", .display_name = "Preview Image", .description = SAVE_DESC,
    .category = "image", .flags = NODE_CLASS_OUTPUT, .inputs = preview_image_in,
    .n_inputs = PREVIEW_N, .outputs = no_outputs, .run = preview_image_run, .instance_free = xfree};

/* ---- ImageScale / ImageScaleBy ------------------------------------------------------ */

int nodes__image_scale_to(struct node_ctx *c, const struct value *img, int64_t w, int64_t h,
                          const char *method, int crop)
{
    if (w > MAX_RESOLUTION * 4 || h > MAX_RESOLUTION * 4 || w < 1 || h < 1)
        return node_fail(c, "ValueError", "target size %lldx%lld is out of range", (long long)w, (long long)h);
    struct value *out = node_new_image(c, img->shape[0], h, w, img->shape[3]);
    if (!out)
        return ERR_TOO_LARGE;
    struct err e = {0};
    if (node_img_resize(img->data, img->shape[0], img->shape[1], img->shape[2], img->shape[3],
                        out->data, h, w, method, crop, &e) < 0) {
        value_unref(out);
        return node_fail(c, "ValueError", "%s", e.msg);
    }
    node_set_output(c, 0, out);
    return 0;
}

enum { SCALE_IMAGE, SCALE_UPSCALE_METHOD, SCALE_WIDTH, SCALE_HEIGHT, SCALE_CROP, SCALE_N };
static const struct node_input_def image_scale_in[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "upscale_method", .type = NODE_COMBO, .options = node_img_upscale_methods},
    {.name = "width", .type = "INT", .def = NODE_I(512), .min = NODE_I(0), .max = NODE_I(MAX_RESOLUTION),
     .step = NODE_I(1)},
    {.name = "height", .type = "INT", .def = NODE_I(512), .min = NODE_I(0), .max = NODE_I(MAX_RESOLUTION),
     .step = NODE_I(1)},
    {.name = "crop", .type = NODE_COMBO, .options = crop_methods},
    NODE_INPUTS_END};

static int image_scale_run(struct node_ctx *c)
{
    const struct value *img;
    int rc = nodes__image_in_at(c, SCALE_IMAGE, &img);
    if (rc < 0)
        return rc;
    int64_t w = node_in_int_at(c, SCALE_WIDTH), h = node_in_int_at(c, SCALE_HEIGHT);
    if (w == 0 && h == 0) {
        node_set_output(c, 0, value_ref((struct value *)img));
        return 0;
    }
    int64_t ih = img->shape[1], iw = img->shape[2];
    if (w == 0) {
        w = (int64_t)pynum_round_half_even((double)iw * (double)h / (double)ih);
        if (w < 1)
            w = 1;
    } else if (h == 0) {
        h = (int64_t)pynum_round_half_even((double)ih * (double)w / (double)iw);
        if (h < 1)
            h = 1;
    }
    return nodes__image_scale_to(c, img, w, h, node_in_str_at(c, SCALE_UPSCALE_METHOD),
                    !strcmp(node_in_str_at(c, SCALE_CROP), "center"));
}

enum { SCALE_BY_IMAGE, SCALE_BY_UPSCALE_METHOD, SCALE_BY_SCALE_BY, SCALE_BY_N };
static const struct node_input_def image_scale_by_in[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "upscale_method", .type = NODE_COMBO, .options = node_img_upscale_methods},
    {.name = "scale_by", .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.01), .max = NODE_F(8.0),
     .step = NODE_F(0.01)},
    NODE_INPUTS_END};

static int image_scale_by_run(struct node_ctx *c)
{
    const struct value *img;
    int rc = nodes__image_in_at(c, SCALE_BY_IMAGE, &img);
    if (rc < 0)
        return rc;
    double s = node_in_float_at(c, SCALE_BY_SCALE_BY);
    int64_t w = (int64_t)pynum_round_half_even((double)img->shape[2] * s);
    int64_t h = (int64_t)pynum_round_half_even((double)img->shape[1] * s);
    return nodes__image_scale_to(c, img, w, h, node_in_str_at(c, SCALE_BY_UPSCALE_METHOD), 0);
}

static const struct node_output_def image_out[] = {{.type = "IMAGE"}, NODE_OUTPUTS_END};

static const struct node_class image_scale = {
    .name = "ImageScale", .display_name = "Upscale Image", .category = "image/upscaling",
    .inputs = image_scale_in, .n_inputs = SCALE_N, .outputs = image_out, .run = image_scale_run};
static const struct node_class image_scale_by = {
    .name = "ImageScaleBy", .display_name = "Upscale Image By", .category = "image/upscaling",
    .inputs = image_scale_by_in, .n_inputs = SCALE_BY_N, .outputs = image_out,
    .run = image_scale_by_run};

/* ---- ImageInvert / EmptyImage / ImageBatch / ImageCrop -------------------------------- */

enum { INVERT_IMAGE, INVERT_N };
static const struct node_input_def image_invert_in[] = {{.name = "image", .type = "IMAGE"}, NODE_INPUTS_END};

static int image_invert_run(struct node_ctx *c)
{
    const struct value *img;
    int rc = nodes__image_in_at(c, INVERT_IMAGE, &img);
    if (rc < 0)
        return rc;
    struct value *out = node_new_tensor(c, "IMAGE", 4, img->shape);
    if (!out)
        return ERR_TOO_LARGE;
    for (size_t i = 0; i < img->numel; i++)
        out->data[i] = 1.0f - img->data[i];
    node_set_output(c, 0, out);
    return 0;
}

enum { EMPTY_WIDTH, EMPTY_HEIGHT, EMPTY_BATCH_SIZE, EMPTY_COLOR, EMPTY_N };
static const struct node_input_def empty_image_in[] = {
    {.name = "width", .type = "INT", .def = NODE_I(512), .min = NODE_I(1), .max = NODE_I(MAX_RESOLUTION),
     .step = NODE_I(1)},
    {.name = "height", .type = "INT", .def = NODE_I(512), .min = NODE_I(1), .max = NODE_I(MAX_RESOLUTION),
     .step = NODE_I(1)},
    {.name = "batch_size", .type = "INT", .def = NODE_I(1), .min = NODE_I(1), .max = NODE_I(4096)},
    {.name = "color", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(0xFFFFFF),
     .step = NODE_I(1), .display = "color"},
    NODE_INPUTS_END};

static int empty_image_run(struct node_ctx *c)
{
    int64_t w = node_in_int_at(c, EMPTY_WIDTH), h = node_in_int_at(c, EMPTY_HEIGHT);
    int64_t b = node_in_int_at(c, EMPTY_BATCH_SIZE), color = node_in_int_at(c, EMPTY_COLOR);
    struct value *out = node_new_image(c, b, h, w, 3);
    if (!out)
        return ERR_TOO_LARGE;
    float rgb[3] = {((color >> 16) & 0xff) / 255.0f, ((color >> 8) & 0xff) / 255.0f, (color & 0xff) / 255.0f};
    for (size_t i = 0; i < out->numel; i++)
        out->data[i] = rgb[i % 3];
    node_set_output(c, 0, out);
    return 0;
}

enum { BATCH_IMAGE1, BATCH_IMAGE2, BATCH_N };
static const struct node_input_def image_batch_in[] = {
    {.name = "image1", .type = "IMAGE"}, {.name = "image2", .type = "IMAGE"}, NODE_INPUTS_END};

static int image_batch_run(struct node_ctx *c)
{
    const struct value *a, *b;
    int rc;
    if ((rc = nodes__image_in_at(c, BATCH_IMAGE1, &a)) < 0 ||
        (rc = nodes__image_in_at(c, BATCH_IMAGE2, &b)) < 0)
        return rc;
    if (a->shape[3] != b->shape[3])
        return node_fail(c, "RuntimeError", "images have %lld and %lld channels", (long long)a->shape[3],
                         (long long)b->shape[3]);
    int64_t H = a->shape[1], W = a->shape[2], C = a->shape[3];
    struct value *out = node_new_image(c, a->shape[0] + b->shape[0], H, W, C);
    if (!out)
        return ERR_TOO_LARGE;
    struct err e = {0};
    memcpy(out->data, a->data, a->numel * sizeof(float));
    float *dst = out->data + a->numel;
    if (b->shape[1] == H && b->shape[2] == W)
        memcpy(dst, b->data, b->numel * sizeof(float));
    else if (node_img_resize(b->data, b->shape[0], b->shape[1], b->shape[2], C, dst, H, W, "bilinear", 1,
                             &e) < 0) {
        value_unref(out);
        return node_fail(c, "RuntimeError", "%s", e.msg);
    }
    node_set_output(c, 0, out);
    return 0;
}

enum { CROP_IMAGE, CROP_WIDTH, CROP_HEIGHT, CROP_X, CROP_Y, CROP_N };
static const struct node_input_def image_crop_in[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "width", .type = "INT", .def = NODE_I(512), .min = NODE_I(1), .max = NODE_I(MAX_RESOLUTION),
     .step = NODE_I(1)},
    {.name = "height", .type = "INT", .def = NODE_I(512), .min = NODE_I(1), .max = NODE_I(MAX_RESOLUTION),
     .step = NODE_I(1)},
    {.name = "x", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(MAX_RESOLUTION),
     .step = NODE_I(1)},
    {.name = "y", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(MAX_RESOLUTION),
     .step = NODE_I(1)},
    NODE_INPUTS_END};

static int image_crop_run(struct node_ctx *c)
{
    const struct value *img;
    int rc = nodes__image_in_at(c, CROP_IMAGE, &img);
    if (rc < 0)
        return rc;
    int64_t H = img->shape[1], W = img->shape[2], C = img->shape[3];
    int64_t x = node_in_int_at(c, CROP_X), y = node_in_int_at(c, CROP_Y);
    int64_t w = node_in_int_at(c, CROP_WIDTH), h = node_in_int_at(c, CROP_HEIGHT);
    x = x < 0 ? 0 : x; /* validation enforces min 0; unvalidated prompts may not */
    y = y < 0 ? 0 : y;
    if (x > W - 1)
        x = W - 1;
    if (y > H - 1)
        y = H - 1;
    int64_t tx = x + w > W ? W : x + w, ty = y + h > H ? H : y + h;
    struct value *out = node_new_image(c, img->shape[0], ty - y, tx - x, C);
    if (!out)
        return ERR_TOO_LARGE;
    for (int64_t b = 0; b < img->shape[0]; b++)
        for (int64_t r = y; r < ty; r++)
            memcpy(out->data + ((size_t)(b * (ty - y) + (r - y)) * (tx - x)) * C,
                   img->data + ((size_t)(b * H + r) * W + x) * C, (size_t)(tx - x) * C * sizeof(float));
    node_set_output(c, 0, out);
    return 0;
}

enum { PAD_IMAGE, PAD_LEFT, PAD_TOP, PAD_RIGHT, PAD_BOTTOM, PAD_FEATHERING, PAD_N };
static const struct node_input_def pad_in[] = {
    {.name = "image", .type = "IMAGE"},
    {.name = "left", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(MAX_RESOLUTION),
     .step = NODE_I(8)},
    {.name = "top", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(MAX_RESOLUTION),
     .step = NODE_I(8)},
    {.name = "right", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(MAX_RESOLUTION),
     .step = NODE_I(8)},
    {.name = "bottom", .type = "INT", .def = NODE_I(0), .min = NODE_I(0), .max = NODE_I(MAX_RESOLUTION),
     .step = NODE_I(8)},
    {.name = "feathering", .type = "INT", .def = NODE_I(40), .min = NODE_I(0), .max = NODE_I(MAX_RESOLUTION),
     .step = NODE_I(1)},
    NODE_INPUTS_END};

static int pad_outpaint_run(struct node_ctx *c)
{
    const struct value *img;
    int rc = nodes__image_in_at(c, PAD_IMAGE, &img);
    if (rc < 0)
        return rc;
    int64_t l = node_in_int_at(c, PAD_LEFT), t = node_in_int_at(c, PAD_TOP);
    int64_t r = node_in_int_at(c, PAD_RIGHT), bo = node_in_int_at(c, PAD_BOTTOM);
    int64_t f = node_in_int_at(c, PAD_FEATHERING);
    if (l < 0 || t < 0 || r < 0 || bo < 0 || l > MAX_RESOLUTION || t > MAX_RESOLUTION || r > MAX_RESOLUTION ||
        bo > MAX_RESOLUTION)
        return node_fail(c, "ValueError", "padding must be within 0..%d", MAX_RESOLUTION);
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    int64_t NH = H + t + bo, NW = W + l + r;
    struct value *out = node_new_image(c, B, NH, NW, C);
    if (!out)
        return ERR_TOO_LARGE;
    for (size_t i = 0; i < out->numel; i++)
        out->data[i] = 0.5f;
    for (int64_t b = 0; b < B; b++)
        for (int64_t y = 0; y < H; y++)
            memcpy(out->data + ((size_t)(b * NH + y + t) * NW + l) * C, img->data + ((size_t)(b * H + y) * W) * C,
                   (size_t)W * C * sizeof(float));
    struct value *mask = node_new_mask(c, 1, NH, NW);
    if (!mask) {
        value_unref(out);
        return ERR_TOO_LARGE;
    }
    for (size_t i = 0; i < mask->numel; i++)
        mask->data[i] = 1.0f;
    for (int64_t i = 0; i < H; i++) {
        for (int64_t j = 0; j < W; j++) {
            float v = 0;
            if (f > 0 && f * 2 < H && f * 2 < W) {
                int64_t dt = t ? i : H, db = bo ? H - i : H, dl = l ? j : W, dr = r ? W - j : W;
                int64_t d = dt < db ? dt : db;
                d = d < dl ? d : dl;
                d = d < dr ? d : dr;
                if (d < f) {
                    float q = (float)(f - d) / (float)f;
                    v = q * q;
                }
            }
            mask->data[(size_t)(i + t) * NW + j + l] = v;
        }
    }
    node_set_output(c, 0, out);
    node_set_output(c, 1, mask);
    return 0;
}

static const struct node_output_def image_mask_out[] = {{.type = "IMAGE"}, {.type = "MASK"}, NODE_OUTPUTS_END};

static const struct node_class image_invert = {
    .name = "ImageInvert", .display_name = "Invert Image", .category = "image",
    .inputs = image_invert_in, .n_inputs = INVERT_N, .outputs = image_out, .run = image_invert_run};
static const struct node_class empty_image = {
    .name = "EmptyImage", .display_name = "EmptyImage", .category = "image",
    .inputs = empty_image_in, .n_inputs = EMPTY_N, .outputs = image_out, .run = empty_image_run};
static const struct node_class image_batch = {
    .name = "ImageBatch", .display_name = "Batch Images", .category = "image",
    .inputs = image_batch_in, .n_inputs = BATCH_N, .outputs = image_out, .run = image_batch_run};
static const struct node_class image_crop = {
    .name = "ImageCrop", .display_name = "Image Crop", .category = "image/transform",
    .python_module = "comfy_extras.nodes_images", .inputs = image_crop_in, .n_inputs = CROP_N,
    .outputs = image_out, .run = image_crop_run};
static const struct node_class pad_outpaint = {
    .name = "ImagePadForOutpaint", .display_name = "Pad Image for Outpainting", .category = "image",
    .inputs = pad_in, .n_inputs = PAD_N, .outputs = image_mask_out, .run = pad_outpaint_run};

static const struct node_class *const image_classes[] = {
    &load_image,  &load_image_mask, &load_image_output, &save_image,  &preview_image,
    &image_scale, &image_scale_by,  &image_invert,      &empty_image, &image_batch,
    &image_crop,  &pad_outpaint};

void nodes_image_register(struct node_registry *r)
{
    node_registry_add_all(r, image_classes, sizeof(image_classes) / sizeof(image_classes[0]));
}
