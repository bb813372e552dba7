/*
 * nodes_upscale_model — comfy_extras.nodes_upscale_model (V3): UpscaleModelLoader and
 * ImageUpscaleWithModel over models/upscale (ESRGAN RRDBNet, SRVGGNetCompact).
 *
 * UPSCALE_MODEL is a patcher over the model's weights plus its arch; the graph's output
 * cache keeps it, so a cached loader never reads the file again. ImageUpscaleWithModel
 * runs ComfyUI's loop: tiles of 512 input pixels with overlap 32 (comfy.utils.tiled_scale);
 * when the device runs out of memory (planning the tile's activations, or a tile itself)
 * the tile is halved and the whole image redone, and below 128 the node fails with the
 * out-of-memory error. The result is clamped to [0, 1] (NaN reads as 0). Each tile is one
 * progress step (get_tiled_scale_steps x batch) and a point where /interrupt stops it.
 *
 * Threads: executor thread (runs); the value may be released on any thread.
 */
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "buf.h"
#include "log.h"
#include "memmgr.h"
#include "node_builtin.h"
#include "node_files.h"
#include "node_registry.h"
#include "node_run.h"
#include "sd_nodes.h"
#include "upscale.h"

#define UPS_TILE 512    /* ComfyUI's first tile, input pixels */
#define UPS_OVERLAP 32
#define UPS_TILE_MIN 128 /* halving below this raises the OOM */

struct ups_value {
    struct patcher *p; /* owned reference */
    struct ups_arch arch;
};

static void ups_value_free(void *obj)
{
    struct ups_value *u = obj;
    if (!u)
        return;
    patcher_unref(u->p);
    xfree(u);
}

static const struct ups_value *ups_value_of(const struct value *v)
{
    if (!v || v->kind != VALUE_OBJECT || v->obj_free != ups_value_free)
        return NULL;
    return v->obj;
}

/* ---- UpscaleModelLoader ---- */

enum { LOADER_MODEL_NAME, LOADER_N };
static const struct node_input_def loader_in[] = {
    {.name = "model_name", .type = NODE_COMBO, .options_folder = "upscale_models"},
    NODE_INPUTS_END};
static const struct node_output_def loader_out[] = {{.type = "UPSCALE_MODEL"}, NODE_OUTPUTS_END};

static int loader_is_changed(struct node_ctx *c, struct buf *out)
{
    return sd__model_file_is_changed_at(c, "upscale_models", LOADER_MODEL_NAME, out);
}

static int loader_run(struct node_ctx *c)
{
    const char *name = node_in_str_at(c, LOADER_MODEL_NAME);
    struct buf path;
    buf_init(&path);
    if (node_files_find_model(c->env, "upscale_models", name, &path) < 0) {
        buf_release(&path);
        return node_fail_code(c, ERR_NOT_FOUND, "FileNotFoundError",
                              "Model in folder 'upscale_models' with filename '%s' not found.",
                              name);
    }
    struct ups_arch a;
    struct patcher_model *m;
    struct err e = {0};
    int rc = ups_load(path.ptr, &a, &m, &e);
    buf_release(&path);
    if (rc < 0)
        /* spandrel's ModelLoader raises UnsupportedModelError for a state dict it does
         * not recognise (a checkpoint given as an upscale model). */
        return node_fail_code(c, rc, rc == ERR_UNSUPPORTED ? "UnsupportedModelError" : "RuntimeError",
                              "%s", e.msg);
    struct ups_value *u = xcalloc(1, sizeof(*u));
    u->p = patcher_new(m);
    u->arch = a;
    patcher_model_unref(m); /* the patcher holds it */
    node_set_output(c, 0, value_new_object("UPSCALE_MODEL", u, ups_value_free));
    return 0;
}

static const struct node_class upscale_model_loader = {
    .name = "UpscaleModelLoader",
    .display_name = "Load Upscale Model",
    .category = "loaders",
    .python_module = "comfy_extras.nodes_upscale_model",
    .flags = NODE_CLASS_V3,
    .inputs = loader_in,
    .n_inputs = LOADER_N,
    .outputs = loader_out,
    .run = loader_run,
    .is_changed = loader_is_changed,
};

/* ---- ImageUpscaleWithModel ---- */

struct progress {
    struct node_ctx *c;
    int64_t done, total;
};

static int tile_done(void *user)
{
    struct progress *p = user;
    return node_progress(p->c, (double)++p->done, (double)p->total, NULL, 0, 0);
}

/*
 * One attempt at `tile`: plan the tile's activations with the model, upload the image,
 * run every tile into res. ERR_DEVICE_OOM (from the plan or a tile) makes the caller
 * halve the tile.
 */
static int upscale_at(struct node_ctx *c, const struct ups_value *u, const float *x,
                      const int64_t xs[4], float *res, int tile, struct err *e)
{
    struct mm *mm = c->env->mm;
    int64_t th = xs[2] < tile ? xs[2] : tile, tw = xs[3] < tile ? xs[3] : tile;
    struct mm_request req = {.n_models = 1};
    struct mm_report rep;
    struct tensor *xt = NULL;
    struct progress pr = {.c = c, .total = ups_tiled_steps(xs[0], xs[2], xs[3], tile, UPS_OVERLAP)};
    req.models[0] = u->p;
    /* The tile's peak, and the whole input, which sits on the device throughout. */
    req.activation_bytes = ups_plan_bytes(&u->arch, th, tw) +
                           (size_t)(xs[0] * xs[1] * xs[2] * xs[3]) * sizeof(float);
    int rc = mm_load_models(mm, &req, &rep, e);
    if (rc < 0)
        return rc;
    rc = tensor_new(patcher_device(u->p), TENSOR_F32, 4, xs, &xt, e);
    if (rc >= 0)
        rc = tensor_write_f32(xt, x, tensor_numel(xt), e);
    if (rc >= 0 && (rc = node_progress(c, 0, (double)pr.total, NULL, 0, 0)) >= 0)
        rc = ups_forward_tiled(u->p, &u->arch, xt, res, tile, UPS_OVERLAP, tile_done, &pr, e);
    tensor_free(xt);
    /* On the CPU the last layers read the mapped file after their acquire's check. */
    if (rc >= 0)
        rc = patcher_model_check(patcher_model_of(u->p), e);
    mm_node_end(mm, &rep);
    return rc;
}

enum { UPSCALE_UPSCALE_MODEL, UPSCALE_IMAGE, UPSCALE_N };
static const struct node_input_def upscale_in[] = {
    {.name = "upscale_model", .type = "UPSCALE_MODEL"},
    {.name = "image", .type = "IMAGE"},
    NODE_INPUTS_END};

static int upscale_run(struct node_ctx *c)
{
    const struct ups_value *u = ups_value_of(node_in_at(c, UPSCALE_UPSCALE_MODEL));
    const struct value *img = node_in_at(c, UPSCALE_IMAGE);
    if (!u)
        return node_fail(c, "TypeError", "upscale_model is not an UPSCALE_MODEL");
    if (!img || img->kind != VALUE_TENSOR || img->ndim != 4)
        return node_fail(c, "TypeError", "image is not an IMAGE [B,H,W,C]");
    if (!c->env->mm)
        return node_fail(c, "RuntimeError", "no memory manager: models cannot run here");
    const struct ups_arch *a = &u->arch;
    int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    int64_t OH = H * a->scale, OW = W * a->scale, oc = a->out_ch;
    if (C != a->in_ch)
        return node_fail(c, "RuntimeError",
                         "the image has %lld channels; this upscale model takes %d",
                         (long long)C, a->in_ch);
    struct value *out = node_new_image(c, B, OH, OW, oc);
    if (!out)
        return ERR_TOO_LARGE;
    float *x = NULL, *res = NULL;
    struct err e = {0};
    int rc;
    if ((rc = xtry_malloc(img->numel * sizeof(float), (void **)&x, &e)) < 0 ||
        (rc = xtry_malloc(out->numel * sizeof(float), (void **)&res, &e)) < 0)
        goto fail;
    /* IMAGE [B,H,W,C] -> planar [B,C,H,W] (image.movedim(-1, -3)). */
    for (int64_t b = 0; b < B; b++)
        for (int64_t p = 0; p < H * W; p++)
            for (int64_t ch = 0; ch < C; ch++)
                x[(b * C + ch) * H * W + p] = img->data[(b * H * W + p) * C + ch];
    int64_t xs[4] = {B, C, H, W};
    for (int tile = UPS_TILE;; tile /= 2) {
        rc = upscale_at(c, u, x, xs, res, tile, &e);
        if (rc != ERR_DEVICE_OOM || tile / 2 < UPS_TILE_MIN)
            break;
        log_warn("upscale: out of memory with tile %d, retrying with tile %d", tile, tile / 2);
        err_clear(&e);
    }
    if (rc < 0)
        goto fail;
    /* [B,oc,OH,OW] -> [B,OH,OW,oc], clamped to [0, 1]. */
    for (int64_t b = 0; b < B; b++)
        for (int64_t p = 0; p < OH * OW; p++)
            for (int64_t ch = 0; ch < oc; ch++)
                out->data[(b * OH * OW + p) * oc + ch] =
                    fminf(fmaxf(res[(b * oc + ch) * OH * OW + p], 0.0f), 1.0f);
    xfree(x);
    xfree(res);
    node_set_output(c, 0, out);
    return 0;
fail:
    xfree(x);
    xfree(res);
    value_unref(out);
    if (rc == ERR_INTERRUPTED)
        return node_fail_code(c, rc, "InterruptProcessingException", "processing interrupted");
    return node_fail_err(c, rc, &e);
}

static const struct node_output_def upscale_out[] = {{.type = "IMAGE"}, NODE_OUTPUTS_END};

static const struct node_class image_upscale_with_model = {
    .name = "ImageUpscaleWithModel",
    .display_name = "Upscale Image (using Model)",
    .category = "image/upscaling",
    .python_module = "comfy_extras.nodes_upscale_model",
    .flags = NODE_CLASS_V3,
    .inputs = upscale_in,
    .n_inputs = UPSCALE_N,
    .outputs = upscale_out,
    .run = upscale_run,
};

void nodes_upscale_model_register(struct node_registry *r)
{
    node_registry_add(r, &upscale_model_loader);
    node_registry_add(r, &image_upscale_with_model);
}
