/*
 * sd_latent_io — nodes.py's SaveLatent and LoadLatent.
 *
 * SaveLatent writes "<output>/<subfolder>/<name>_<counter:05d>_.latent": a
 * safetensors file holding "latent_tensor" (the samples, contiguous float32
 * [b, c, h, w]) and "latent_format_version_0" (an empty float32 tensor that
 * marks latents saved unscaled), with the prompt and the extra_pnginfo entries
 * as "__metadata__" JSON strings unless --disable-metadata. The file is written
 * to a hidden temporary and renamed over the name, so a reader never sees half
 * a file. The UI result is {"latents": [{filename, subfolder, type}]}.
 *
 * LoadLatent lists the .latent files of the input folder (sorted), reads
 * latent_tensor as float32 and multiplies it by 1/0.18215 when the version
 * marker is absent (latents from before the marker were saved scaled), as
 * ComfyUI does. IS_CHANGED is the file's SHA-256; VALIDATE_INPUTS accepts any
 * existing file of the input folder (annotated names included).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "buf.h"
#include "node_files.h"
#include "node_registry.h"
#include "safetensors.h"
#include "sd_latent_ops.h"
#include "sd_latent_util.h"
#include "sd_types.h"

/* ---- SaveLatent ---- */

/* Write `l` to `dir`/`name` (the writer goes through a temporary and a rename). */
static int write_latent(const struct node_ctx *c, const struct sd_latent *l, const char *dir,
                        const char *name, struct err *e)
{
    struct buf path;
    buf_init(&path);
    buf_printf(&path, "%s/%s", dir, name);
    struct st_writer *w = st_writer_new();
    int64_t shape[4] = {l->b, l->c, l->h, l->w}, empty[1] = {0};
    st_writer_add(w, "latent_tensor", ST_DTYPE_F32, 4, shape);
    st_writer_add(w, "latent_format_version_0", ST_DTYPE_F32, 1, empty);
    if (!c->env->disable_metadata) {
        if (c->prompt_json)
            st_writer_meta(w, "prompt", c->prompt_json);
        for (int i = 0; i < c->n_pnginfo; i++)
            st_writer_meta(w, c->pnginfo[i].key, c->pnginfo[i].value);
    }
    uint64_t nbytes = (uint64_t)(l->b * l->c * l->h * l->w) * sizeof(float);
    int rc = st_writer_begin(w, path.ptr, e);
    if (rc == 0)
        rc = st_writer_write(w, l->samples, nbytes, e);
    if (rc == 0)
        rc = st_writer_write(w, NULL, 0, e);
    if (rc == 0)
        rc = st_writer_finish(w, e);
    st_writer_free(w); /* unfinished: removes the temporary */
    buf_release(&path);
    return rc;
}

enum { SAVE_SAMPLES, SAVE_FILENAME_PREFIX, SAVE_PROMPT, SAVE_EXTRA_PNGINFO, SAVE_N };
static const struct node_input_def save_latent_in[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "filename_prefix", .type = "STRING", .def_str = "latents/ComfyUI"},
    {.name = "prompt", .type = "PROMPT", .group = NODE_INPUT_HIDDEN},
    {.name = "extra_pnginfo", .type = "EXTRA_PNGINFO", .group = NODE_INPUT_HIDDEN},
    NODE_INPUTS_END};

static int save_latent_run(struct node_ctx *c)
{
    const struct sd_latent *l = sd__latent_in_at(c, SAVE_SAMPLES);
    if (!l)
        return ERR_INVALID;
    struct node_save_path sp;
    struct buf name;
    buf_init(&name);
    int rc = node_files_save_path(c->env, node_in_str_at(c, SAVE_FILENAME_PREFIX), &sp);
    if (rc == ERR_DENIED) {
        rc = node_fail(c, "Exception", "Saving image outside the output folder is not allowed.");
        goto out;
    }
    if (rc < 0) {
        rc = node_fail(c, "OSError", "cannot create folder '%s' in the output folder",
                       sp.subfolder.ptr);
        goto out;
    }
    buf_printf(&name, "%s_%05d_.latent", sp.filename.ptr, sp.counter);
    struct err e = {0};
    errno = 0;
    if (write_latent(c, l, sp.dir.ptr, name.ptr, &e) < 0) {
        /* Named relative to the output folder: clients never see the server's paths. */
        rc = node_fail(c, "OSError", "cannot save '%s%s%s': %s", sp.subfolder.ptr,
                       sp.subfolder.len ? "/" : "", name.ptr,
                       errno ? strerror(errno) : "write failed");
        goto out;
    }
    c->ui_key = "latents";
    node_ui_add_image(c, name.ptr, sp.subfolder.ptr, "output");
out:
    node_save_path_release(&sp);
    buf_release(&name);
    return rc;
}

static const struct node_output_def no_outputs[] = {NODE_OUTPUTS_END};

const struct node_class sd_save_latent = {
    .name = "SaveLatent", .category = "_for_testing", .flags = NODE_CLASS_OUTPUT,
    .inputs = save_latent_in, .n_inputs = SAVE_N, .outputs = no_outputs, .run = save_latent_run};

/* ---- LoadLatent ---- */

static void input_latents(const struct node_env *env, struct node_strlist *out)
{
    static const char *const exts[] = {".latent", NULL};
    node_files_list_input(env, exts, 0, out);
}

static int validate_latent_name(const struct node_env *env, const char *value, struct buf *reason)
{
    return node_files_validate_input(env, value, "latent", reason);
}

enum { LOAD_LATENT, LOAD_N };
static const struct node_input_def load_latent_in[] = {
    {.name = "latent", .type = NODE_COMBO, .options_fn = input_latents,
     .validate = validate_latent_name},
    NODE_INPUTS_END};

static int latent_is_changed(struct node_ctx *c, struct buf *out)
{
    const struct value *v = node_in_at(c, LOAD_LATENT);
    if (!v || v->kind != VALUE_STRING)
        return ERR_INVALID;
    return node_files_input_sha256_hex(c->env, v->s, out);
}

static int load_latent_file(struct node_ctx *c, const char *name, const char *path)
{
    struct err e = {0};
    struct st_file *f = NULL;
    int rc = st_open(path, &f, &e);
    if (rc < 0)
        return node_fail_code(c, rc, "safetensors_rust.SafetensorError",
                              "'%s' is not a latent file (safetensors): %s", name, e.msg);
    const struct st_tensor *t = st_find(f, "latent_tensor");
    if (!t) {
        st_close(f);
        return node_fail(c, "KeyError", "'latent_tensor' (%s has no latent_tensor)", name);
    }
    if (t->ndim != 4 || t->shape[0] < 1 || t->shape[1] < 1 || t->shape[2] < 1 || t->shape[3] < 1) {
        char shp[128];
        st_shape_str(t, shp, sizeof shp);
        st_close(f);
        return node_fail(c, "ValueError", "%s: latent_tensor has shape %s, expected [b,c,h,w]",
                         name, shp);
    }
    struct sd_latent *l = NULL;
    rc = sd_latent_try_new(t->shape[0], t->shape[1], t->shape[2], t->shape[3], &l, &e);
    if (rc < 0) {
        st_close(f);
        return node_fail_code(c, rc, "torch.OutOfMemoryError", "%s", e.msg);
    }
    rc = st_tensor_to_f32(f, t, l->samples, &e);
    if (rc == 0)
        rc = st_check(f, &e);
    int versioned = st_find(f, "latent_format_version_0") != NULL;
    st_close(f);
    if (rc < 0) {
        sd_latent_free(l);
        return node_fail_code(c, rc, "safetensors_rust.SafetensorError", "%s: %s", name, e.msg);
    }
    if (!versioned) {
        float m = 1.0f / 0.18215f;
        size_t n = (size_t)(l->b * l->c * l->h * l->w);
        for (size_t k = 0; k < n; k++)
            l->samples[k] *= m;
    }
    node_set_output(c, 0, sd_latent_value(l));
    return 0;
}

static int load_latent_run(struct node_ctx *c)
{
    const char *name = node_in_str_at(c, LOAD_LATENT);
    struct buf path;
    buf_init(&path);
    int rc = node_files_resolve_input(c->env, name, &path);
    if (rc < 0) {
        buf_release(&path);
        return node_fail_code(c, ERR_NOT_FOUND, "FileNotFoundError",
                              "[Errno 2] No such file or directory: '%s'", name);
    }
    rc = load_latent_file(c, name, path.ptr);
    buf_release(&path);
    return rc;
}

static const struct node_output_def latent_out[] = {{.type = "LATENT"}, NODE_OUTPUTS_END};

const struct node_class sd_load_latent = {
    .name = "LoadLatent", .category = "_for_testing", .inputs = load_latent_in, .n_inputs = LOAD_N,
    .outputs = latent_out, .run = load_latent_run, .is_changed = latent_is_changed};
