#include "node_run.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "node_registry.h"

void node_ctx_init(struct node_ctx *c, const struct node_class *cls, const char *node_id,
                   const struct node_env *env, struct value **inputs, struct value **outputs)
{
    memset(c, 0, sizeof(*c));
    c->cls = cls;
    c->node_id = node_id;
    c->env = env;
    c->inputs = inputs;
    c->outputs = outputs;
    /* exc_message stays unallocated (ptr NULL) until a failure: most nodes never
     * fail, and the executor's per-node cost is mostly allocation. */
}

void node_ctx_release(struct node_ctx *c)
{
    for (int i = 0; i < c->n_ui_images; i++) {
        xfree(c->ui_images[i].filename);
        xfree(c->ui_images[i].subfolder);
    }
    xfree(c->ui_images);
    c->ui_images = NULL;
    c->n_ui_images = c->cap_ui_images = 0;
    if (c->exc_message.ptr)
        buf_release(&c->exc_message);
}

/* The class's input count: its stated n_inputs, which registration checked against the
 * declaration, so a read does not walk the declaration (KSampler's last input: 40-70 ns
 * a read walking it, 14-15 ns not, 150-300 ns by name; loaded 2-core machine); counted
 * when not stated. */
static int n_declared(const struct node_class *cls)
{
    return cls->n_inputs ? cls->n_inputs : node_class_n_inputs(cls);
}

struct value *node_in_at(const struct node_ctx *c, int index)
{
    if (index < 0 || index >= n_declared(c->cls))
        return NULL;
    return c->inputs[index];
}

/* Widget readers over one declaration and its bound value (NULL when absent). */
static int64_t as_int(const struct node_input_def *d, const struct value *v)
{
    if (!v)
        return d->def.set ? d->def.i : 0;
    return value_i64(v);
}

static double as_float(const struct node_input_def *d, const struct value *v)
{
    if (!v)
        return d->def.set ? d->def.f : 0.0;
    if (v->kind == VALUE_FLOAT)
        return v->f;
    return (double)v->i;
}

static const char *as_str(const struct node_input_def *d, const struct value *v)
{
    if (!v || v->kind != VALUE_STRING)
        return d->def_str ? d->def_str : "";
    return v->s;
}

static int as_bool(const struct node_input_def *d, const struct value *v)
{
    if (!v)
        return d->has_def_bool ? d->def_bool : 0;
    if (v->kind == VALUE_FLOAT)
        return v->f != 0.0;
    if (v->kind == VALUE_STRING)
        return v->s[0] != '\0';
    return v->i != 0;
}

/* Asking for an undeclared input is a bug in the node. */
static int check_index(const struct node_ctx *c, int index)
{
    ASSERT(index >= 0 && index < n_declared(c->cls));
    return index;
}

#define READ(fn, c, i) fn(&(c)->cls->inputs[i], (c)->inputs[i])

int64_t node_in_int_at(const struct node_ctx *c, int i)
{
    return READ(as_int, c, check_index(c, i));
}

double node_in_float_at(const struct node_ctx *c, int i)
{
    return READ(as_float, c, check_index(c, i));
}

const char *node_in_str_at(const struct node_ctx *c, int i)
{
    return READ(as_str, c, check_index(c, i));
}

int node_in_bool_at(const struct node_ctx *c, int i)
{
    return READ(as_bool, c, check_index(c, i));
}

const char *node_in_name(const struct node_ctx *c, int i)
{
    return c->cls->inputs[check_index(c, i)].name;
}

#undef READ

void node_set_output(struct node_ctx *c, int index, struct value *v)
{
    ASSERT(index >= 0 && index < node_class_n_outputs(c->cls));
    value_unref(c->outputs[index]);
    c->outputs[index] = v;
}

void node_ui_add_image(struct node_ctx *c, const char *filename, const char *subfolder,
                       const char *type)
{
    if (c->n_ui_images == c->cap_ui_images) {
        c->cap_ui_images = c->cap_ui_images ? 2 * c->cap_ui_images : 4;
        c->ui_images = xrealloc(c->ui_images, c->cap_ui_images * sizeof(*c->ui_images));
    }
    struct node_ui_image *im = &c->ui_images[c->n_ui_images++];
    im->filename = xstrdup(filename);
    im->subfolder = xstrdup(subfolder ? subfolder : "");
    im->type = type;
    c->has_ui = 1;
}

int node_progress(struct node_ctx *c, double value, double max, const uint8_t *rgb, int w, int h)
{
    if (!c->hooks || !c->hooks->progress)
        return 0;
    return c->hooks->progress(c->hooks->user, value, max, rgb, w, h);
}

int node_progress_image(struct node_ctx *c, double value, double max, const uint8_t *px, int w,
                        int h, int ch)
{
    if (!c->hooks || !c->hooks->image)
        return node_progress(c, value, max, NULL, 0, 0);
    return c->hooks->image(c->hooks->user, value, max, px, w, h, ch);
}

int node_interrupted(struct node_ctx *c)
{
    if (!c->hooks || !c->hooks->interrupted)
        return 0;
    return c->hooks->interrupted(c->hooks->user);
}

/* Drop every "<dir>/" from msg, so "/srv/base/models/checkpoints/x" reads
 * "checkpoints/x". */
static void unpath(struct buf *msg, const char *dir)
{
    size_t n = dir ? strlen(dir) : 0;
    while (n > 1 && dir[n - 1] == '/')
        n--;
    if (!n || !msg->len)
        return;
    struct buf out;
    buf_init(&out);
    const char *s = msg->ptr;
    for (const char *hit; (hit = memmem(s, strlen(s), dir, n)) != NULL; s = hit) {
        buf_add(&out, s, (size_t)(hit - s));
        if (hit[n] == '/')
            hit += n + 1;
        else
            buf_add(&out, hit++, 1);
    }
    buf_adds(&out, s);
    buf_release(msg);
    *msg = out;
}

/*
 * Messages from below (file loaders, st_check) name files by the server's paths;
 * clients see them relative to their folder (models, input, output, temp), which
 * is also how they chose them, and learn nothing about the server's layout.
 */
static void unpath_env(struct buf *msg, const struct node_env *env)
{
    if (!env)
        return;
    unpath(msg, env->models_dir);
    unpath(msg, env->output_dir);
    unpath(msg, env->input_dir);
    unpath(msg, env->temp_dir);
}

static int fail_v(struct node_ctx *c, int code, const char *exc_type, const char *fmt,
                  va_list ap)
{
    if (!c->exc_message.ptr)
        buf_init(&c->exc_message);
    if (c->exc_message.len == 0) {
        snprintf(c->exc_type, sizeof(c->exc_type), "%s", exc_type ? exc_type : "RuntimeError");
        buf_vprintf(&c->exc_message, fmt, ap);
        unpath_env(&c->exc_message, c->env);
    }
    return code;
}

int node_fail(struct node_ctx *c, const char *exc_type, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = fail_v(c, ERR_INVALID, exc_type, fmt, ap);
    va_end(ap);
    return rc;
}

int node_fail_code(struct node_ctx *c, int code, const char *exc_type, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = fail_v(c, code, exc_type, fmt, ap);
    va_end(ap);
    return rc;
}

int node_fail_err(struct node_ctx *c, int rc, const struct err *e)
{
    return node_fail_code(c, rc, rc == ERR_DEVICE_OOM ? "torch.OutOfMemoryError" : "RuntimeError",
                          "%s", e->msg[0] ? e->msg : err_str(rc));
}

struct value *node_new_tensor(struct node_ctx *c, const char *type, int ndim, const int64_t *shape)
{
    struct value *v;
    struct err e = {0};
    int rc = value_try_new_tensor(type, ndim, shape, &v, &e);
    if (rc < 0)
        node_fail_err(c, rc, &e);
    return rc < 0 ? NULL : v;
}

struct value *node_new_image(struct node_ctx *c, int64_t b, int64_t h, int64_t w, int64_t ch)
{
    int64_t shape[4] = {b, h, w, ch};
    return node_new_tensor(c, "IMAGE", 4, shape);
}

struct value *node_new_mask(struct node_ctx *c, int64_t b, int64_t h, int64_t w)
{
    int64_t shape[3] = {b, h, w};
    return node_new_tensor(c, "MASK", 3, shape);
}
