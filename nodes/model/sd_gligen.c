/*
 * sd_gligen — the GLIGEN value, the conditioning's gligen entry and its run in one UNet
 * call (see sd_gligen.h).
 */
#include "sd_gligen.h"

#include <string.h>

#include "alloc.h"

/* ---- the GLIGEN value ---- */

static void model_obj_free(void *p)
{
    gligen_unref(p);
}

struct value *sd_gligen_model_value(struct gligen *g)
{
    gligen_ref(g);
    return value_new_object("GLIGEN", g, model_obj_free);
}

struct gligen *sd_gligen_model_of(const struct value *v)
{
    if (!v || v->kind != VALUE_OBJECT || v->obj_free != model_obj_free)
        return NULL;
    return v->obj;
}

/* ---- the conditioning entry ---- */

int sd_gligen_append(const struct sd_gligen *prev, struct gligen *g, const float *pooled,
                     int h, int w, int y, int x, struct sd_gligen **out, struct err *e)
{
    int n = prev ? prev->n : 0, in = g->a.in_dim;
    *out = NULL;
    if (n >= GLIGEN_MAX_OBJS)
        return err_set(e, ERR_INVALID,
                       "GLIGEN takes at most %d text boxes per conditioning (Gligen.max_objs)",
                       GLIGEN_MAX_OBJS);
    if (prev && prev->g->a.in_dim != in)
        return err_set(e, ERR_INVALID,
                       "this GLIGEN model takes %d-wide text embeddings, the boxes already on "
                       "the conditioning are %d wide",
                       in, prev->g->a.in_dim);
    struct sd_gligen *s = xcalloc(1, sizeof *s);
    s->pooled = xmalloc((size_t)(n + 1) * in * sizeof *s->pooled);
    if (n)
        memcpy(s->pooled, prev->pooled, (size_t)n * in * sizeof *s->pooled);
    memcpy(s->pooled + (size_t)n * in, pooled, (size_t)in * sizeof *s->pooled);
    for (int i = 0; i < n; i++)
        s->box[i] = prev->box[i];
    s->box[n] = (struct gligen_box){.h = h, .w = w, .y = y, .x = x};
    s->n = n + 1;
    for (int i = 0; i < s->n; i++)
        s->box[i].pooled = s->pooled + (size_t)i * in;
    gligen_ref(g);
    s->g = g;
    atomic_init(&s->_refs, 1);
    *out = s;
    return 0;
}

void sd_gligen_ref(struct sd_gligen *s)
{
    atomic_fetch_add(&s->_refs, 1);
}

void sd_gligen_unref(struct sd_gligen *s)
{
    if (!s || atomic_fetch_sub(&s->_refs, 1) != 1)
        return;
    gligen_unref(s->g);
    xfree(s->pooled);
    xfree(s);
}

/* ---- one UNet call ---- */

int sd_gligen_run_begin(const struct sd_gligen *s, int batch, int h, int w,
                        struct sd_gligen_run *run, struct err *e)
{
    int64_t shape[3] = {batch, GLIGEN_MAX_OBJS, s->g->a.key_dim};
    int rc;
    run->g = s->g;
    run->objs = NULL;
    if (!patcher_device(s->g->p))
        return err_set(e, ERR_INVALID, "gligen: model is not loaded (call mm_load_models first)");
    if ((rc = tensor_new(patcher_device(s->g->p), TENSOR_F32, 3, shape, &run->objs, e)) < 0)
        return rc;
    return gligen_objs(s->g, s->box, s->n, h, w, run->objs, e);
}

void sd_gligen_run_release(struct sd_gligen_run *run)
{
    tensor_free(run->objs);
    run->objs = NULL;
}

int sd_gligen_run_middle(void *user, int st, struct tensor *x, struct err *e)
{
    struct sd_gligen_run *run = user;
    return gligen_fuse(run->g, st, run->objs, x, e);
}
