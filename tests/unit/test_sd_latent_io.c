/*
 * test_sd_latent_io — SaveLatent / LoadLatent (nodes/sd_latent_io.c) run directly:
 * a hand-made latent saved and loaded back bit-identically, a file without the
 * version marker scaled by 1/0.18215, and a file of another format refused clearly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "harness.h"
#include "node_registry.h"
#include "node_run.h"
#include "safetensors.h"
#include "sd_latent_ops.h"
#include "sd_types.h"

static char dir[256];
static struct node_env env;

static int run_node(const struct node_class *cls, struct value **in, struct value **out,
                    struct node_ctx *c)
{
    node_ctx_init(c, cls, "1", &env, in, out);
    return cls->run(c);
}

static struct sd_latent *load(const char *name, struct node_ctx *c, int *rc)
{
    struct value *in[1] = {value_new_string(name)}, *out[1] = {NULL};
    *rc = run_node(&sd_load_latent, in, out, c);
    value_unref(in[0]);
    if (*rc < 0)
        return NULL;
    const struct sd_latent *l = sd_latent_of(out[0]);
    struct sd_latent *copy = sd_latent_new(l->b, l->c, l->h, l->w);
    memcpy(copy->samples, l->samples, (size_t)(l->b * l->c * l->h * l->w) * sizeof(float));
    value_unref(out[0]);
    return copy;
}

int main(void)
{
    long live = alloc_live_count();
    snprintf(dir, sizeof dir, "/tmp/latentd-latent-io-%d", (int)getpid());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    ASSERT(system(cmd) == 0);
    env.output_dir = dir;
    env.input_dir = dir;
    env.temp_dir = dir;

    /* Save a [1,4,2,3] latent with awkward values. */
    struct sd_latent *l = sd_latent_new(1, 4, 2, 3);
    for (int k = 0; k < 24; k++)
        l->samples[k] = (float)k * 0.1f - 1.3f + (k == 5 ? 1e-30f : 0.0f);
    struct value *lv = sd_latent_value(l);
    struct value *in[2] = {lv, value_new_string("lat")};
    struct node_ctx c;
    int rc = run_node(&sd_save_latent, in, NULL, &c);
    ok(rc == 0 && c.n_ui_images == 1 && !strcmp(c.ui_images[0].filename, "lat_00001_.latent") &&
           c.ui_key && !strcmp(c.ui_key, "latents") && !strcmp(c.ui_images[0].type, "output"),
       "SaveLatent writes lat_00001_.latent with a latents UI entry");
    node_ctx_release(&c);
    rc = run_node(&sd_save_latent, in, NULL, &c);
    ok(rc == 0 && c.n_ui_images == 1 && !strcmp(c.ui_images[0].filename, "lat_00002_.latent"),
       "the counter advances");
    node_ctx_release(&c);
    value_unref(in[1]);

    /* The file's layout is ComfyUI's. */
    char path[512];
    snprintf(path, sizeof path, "%s/lat_00001_.latent", dir);
    struct st_file *f = NULL;
    struct err e = {0};
    ok(st_open(path, &f, &e) == 0, "a safetensors file: %s", e.msg);
    if (f) {
        const struct st_tensor *t = st_find(f, "latent_tensor");
        const struct st_tensor *m = st_find(f, "latent_format_version_0");
        ok(t && t->dtype == ST_DTYPE_F32 && t->ndim == 4 && t->shape[1] == 4 && t->shape[3] == 3,
           "latent_tensor is float32 [1,4,2,3]");
        ok(m && m->nbytes == 0, "latent_format_version_0 is an empty marker");
        st_close(f);
    }

    /* Load it back bit-identically. */
    struct sd_latent *back = load("lat_00001_.latent", &c, &rc);
    ok(rc == 0 && back && back->b == 1 && back->c == 4 && back->h == 2 && back->w == 3 &&
           memcmp(back->samples, l->samples, 24 * sizeof(float)) == 0,
       "LoadLatent reads the latent back bit-identically");
    node_ctx_release(&c);
    sd_latent_free(back);

    /* A file without the marker (an old ComfyUI latent) is scaled by 1/0.18215. */
    snprintf(path, sizeof path, "%s/old.latent", dir);
    struct st_writer *w = st_writer_new();
    int64_t shape[4] = {1, 4, 2, 3};
    st_writer_add(w, "latent_tensor", ST_DTYPE_F32, 4, shape);
    ASSERT(st_writer_begin(w, path, &e) == 0);
    ASSERT(st_writer_write(w, l->samples, 24 * sizeof(float), &e) == 0);
    ASSERT(st_writer_finish(w, &e) == 0);
    st_writer_free(w);
    back = load("old.latent", &c, &rc);
    int good = rc == 0 && back;
    for (int k = 0; good && k < 24; k++)
        good = back->samples[k] == l->samples[k] * (1.0f / 0.18215f);
    ok(good, "a latent without the version marker is multiplied by 1/0.18215");
    node_ctx_release(&c);
    sd_latent_free(back);

    /* A file of another format fails with a clear error. */
    snprintf(path, sizeof path, "%s/bad.latent", dir);
    FILE *fp = fopen(path, "wb");
    ASSERT(fp);
    fputs("this is not a safetensors file at all", fp);
    fclose(fp);
    back = load("bad.latent", &c, &rc);
    ok(rc < 0 && !back && c.exc_message.ptr && strstr(c.exc_message.ptr, "bad.latent") &&
           strstr(c.exc_message.ptr, "not a latent file"),
       "another format is refused: %s", c.exc_message.ptr ? c.exc_message.ptr : "(none)");
    node_ctx_release(&c);
    back = load("missing.latent", &c, &rc);
    ok(rc < 0 && !strcmp(c.exc_type, "FileNotFoundError"), "a missing file is FileNotFoundError");
    node_ctx_release(&c);

    /* Listing: the regular .latent files (the extension's case as written), sorted. */
    char mk[1024];
    snprintf(mk, sizeof mk, "mkdir %s/dir.latent && touch %s/x.LATENT %s/y.png", dir, dir, dir);
    ASSERT(system(mk) == 0);
    struct node_strlist opts;
    node_strlist_init(&opts);
    sd_load_latent.inputs[0].options_fn(&env, &opts);
    ok(opts.n == 4 && !strcmp(opts.items[0], "bad.latent") && !strcmp(opts.items[1], "lat_00001_.latent") &&
           !strcmp(opts.items[3], "old.latent"),
       "the input listing is the sorted .latent files (%zu)", opts.n);
    node_strlist_release(&opts);
    /* The combo's validator: any existing input file, else ComfyUI's message. */
    struct buf why;
    buf_init(&why);
    ok(sd_load_latent.inputs[0].validate(&env, "old.latent", &why) == 0 && why.len == 0,
       "an existing .latent validates");
    ok(sd_load_latent.inputs[0].validate(&env, "missing.latent", &why) < 0 &&
           !strcmp(why.ptr, "Invalid latent file: missing.latent"),
       "a missing one: %s", why.ptr ? why.ptr : "(none)");
    buf_release(&why);

    value_unref(lv);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ASSERT(system(cmd) == 0);
    ok(alloc_live_count() == live, "no allocation left live (%ld)", alloc_live_count() - live);
    return harness_done();
}
