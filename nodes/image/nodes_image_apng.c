/*
 * SaveAnimatedPNG (comfy_extras/nodes_images.py): the batch as one animated PNG in
 * the output folder, named "<prefix>_<counter:05>_.png" as get_save_image_path names
 * it, each frame shown int(1000 / fps) ms, written the way Pillow's save_all writes it
 * (node_apng.h). The metadata is ComfyUI's: not tEXt chunks but private "comf" chunks
 * after the image data, "prompt\0<json>" and one "<key>\0<json>" per extra_pnginfo
 * entry. The UI result is the file plus "animated": [true].
 */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "node_apng.h"
#include "node_files.h"
#include "node_registry.h"
#include "nodes_image.h"

enum { APNG_IMAGES, APNG_FILENAME_PREFIX, APNG_FPS, APNG_COMPRESS_LEVEL, APNG_PROMPT,
       APNG_EXTRA_PNGINFO, APNG_N };
static const struct node_input_def apng_in[] = {
    {.name = "images", .type = "IMAGE"},
    {.name = "filename_prefix", .type = "STRING", .def_str = "ComfyUI"},
    {.name = "fps", .type = "FLOAT", .def = NODE_F(6.0), .min = NODE_F(0.01), .max = NODE_F(1000.0),
     .step = NODE_F(0.01)},
    {.name = "compress_level", .type = "INT", .def = NODE_I(4), .min = NODE_I(0), .max = NODE_I(9)},
    {.name = "prompt", .type = "PROMPT", .group = NODE_INPUT_HIDDEN},
    {.name = "extra_pnginfo", .type = "EXTRA_PNGINFO", .group = NODE_INPUT_HIDDEN},
    NODE_INPUTS_END};

/* "key\0value" chunk payloads; `store` owns them. */
static int comf_chunks(struct node_ctx *c, struct buf *store, struct node_png_chunk **out)
{
    int n = 0;
    *out = xcalloc((size_t)c->n_pnginfo + 1, sizeof **out);
    if (c->env->disable_metadata)
        return 0;
    const char *keys[1 + 64], *vals[1 + 64];
    if (c->prompt_json) {
        keys[n] = "prompt";
        vals[n++] = c->prompt_json;
    }
    for (int i = 0; i < c->n_pnginfo && n < 1 + 64; i++) {
        keys[n] = c->pnginfo[i].key;
        vals[n++] = c->pnginfo[i].value;
    }
    for (int i = 0; i < n; i++) {
        buf_init(&store[i]);
        buf_adds(&store[i], keys[i]);
        buf_addc(&store[i], '\0');
        buf_adds(&store[i], vals[i]);
        memcpy((*out)[i].type, "comf", 5);
        (*out)[i].data = store[i].ptr;
        (*out)[i].len = store[i].len;
    }
    return n;
}

/* np.clip(255 * x, 0, 255).astype(uint8) of image b into px. */
static void to_bytes(const float *s, size_t n, uint8_t *px)
{
    for (size_t k = 0; k < n; k++) {
        float v = 255.0f * s[k];
        px[k] = (uint8_t)(v <= 0 || v != v ? 0 : v >= 255 ? 255 : (int)v);
    }
}

static int apng_save(struct node_ctx *c, const struct value *img, const struct node_save_path *sp)
{
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    double fps = node_in_float_at(c, APNG_FPS);
    if (!(fps > 0))
        return node_fail(c, "ZeroDivisionError", "float division by zero");
    double d = 1000.0 / fps; /* int(): truncation */
    if (d > 2147483647.0)
        return node_fail(c, "ValueError", "cannot write duration");
    size_t frame = (size_t)H * W * C;
    uint8_t *px = NULL;
    struct err e = {0};
    if (xtry_malloc(frame * (size_t)B, (void **)&px, &e) < 0)
        return node_fail_code(c, ERR_TOO_LARGE, "torch.OutOfMemoryError", "%s", e.msg);
    const uint8_t **frames = xcalloc((size_t)B, sizeof *frames);
    for (int64_t b = 0; b < B; b++) {
        to_bytes(img->data + (size_t)b * frame, frame, px + (size_t)b * frame);
        frames[b] = px + (size_t)b * frame;
    }
    struct buf store[1 + 64], file, name, path;
    struct node_png_chunk *chunks;
    int n_chunks = comf_chunks(c, store, &chunks);
    buf_init(&file);
    buf_init(&name);
    buf_init(&path);
    int rc = node_apng_encode(frames, (int)B, (int)W, (int)H, (int)C,
                              (int)node_in_int_at(c, APNG_COMPRESS_LEVEL), (int)d, chunks, n_chunks,
                              &file, &e);
    if (rc < 0) {
        rc = node_fail(c, rc == ERR_INVALID ? "ValueError" : "OSError", "%s", e.msg);
        goto out;
    }
    buf_printf(&name, "%s_%05d_.png", sp->filename.ptr, sp->counter);
    buf_printf(&path, "%s/%s", sp->dir.ptr, name.ptr);
    FILE *f = fopen(path.ptr, "wb");
    int wrote = f && fwrite(file.ptr, 1, file.len, f) == file.len;
    if (f && fclose(f) != 0)
        wrote = 0;
    if (!wrote) {
        /* Named relative to the output folder: clients never see the server's paths. */
        rc = node_fail(c, "OSError", "cannot save '%s%s%s'", sp->subfolder.ptr,
                       sp->subfolder.len ? "/" : "", name.ptr);
        goto out;
    }
    node_ui_add_image(c, name.ptr, sp->subfolder.ptr, "output");
    c->ui_animated = 1;
out:
    for (int i = 0; i < n_chunks; i++)
        buf_release(&store[i]);
    xfree(chunks);
    buf_release(&file);
    buf_release(&name);
    buf_release(&path);
    xfree(frames);
    xfree(px);
    return rc;
}

static int apng_run(struct node_ctx *c)
{
    const struct value *img;
    int rc = nodes__image_in_at(c, APNG_IMAGES, &img);
    if (rc < 0)
        return rc;
    if (img->shape[0] == 0)
        return node_fail(c, "IndexError", "index 0 is out of bounds for dimension 0 with size 0");
    int64_t C = img->shape[3];
    if (C != 3 && C != 4)
        return node_fail(c, "TypeError", "Cannot handle this data type: (1, 1, %lld), |u1",
                         (long long)C);
    struct buf prefix;
    buf_init(&prefix);
    nodes__image_expand_prefix(node_in_str_at(c, APNG_FILENAME_PREFIX), (int)img->shape[2],
                               (int)img->shape[1], &prefix);
    struct node_save_path sp;
    rc = node_files_save_path(c->env, prefix.ptr, &sp);
    buf_release(&prefix);
    if (rc == ERR_DENIED)
        rc = node_fail(c, "Exception", "Saving image outside the output folder is not allowed.");
    else if (rc < 0)
        rc = node_fail(c, "OSError", "cannot create folder '%s' in the output folder",
                       sp.subfolder.ptr);
    else
        rc = apng_save(c, img, &sp);
    node_save_path_release(&sp);
    return rc;
}

static const struct node_output_def no_outputs[] = {NODE_OUTPUTS_END};

const struct node_class nodes_save_animated_png = {
    .name = "SaveAnimatedPNG", .category = "image/animation",
    .python_module = "comfy_extras.nodes_images", .flags = NODE_CLASS_OUTPUT, .inputs = apng_in,
    .n_inputs = APNG_N, .outputs = no_outputs, .run = apng_run};
