/*
 * sd_types — LATENT, CONDITIONING and MODEL payloads (see sd_types.h).
 */
#include "sd_types.h"

#include <string.h>

#include "alloc.h"
#include "sd_control.h"
#include "sd_gligen.h"

/* ---- LATENT ---- */

int sd_latent_try_new(int64_t b, int64_t c, int64_t h, int64_t w, struct sd_latent **out,
                      struct err *e)
{
    ASSERT(b > 0 && c > 0 && h > 0 && w > 0);
    void *samples;
    int rc;
    *out = NULL;
    /* Each factor is at most a few thousand, so the product cannot overflow 64 bits. */
    if ((rc = xtry_calloc((size_t)(b * c * h * w), sizeof(float), &samples, e)) < 0)
        return rc;
    struct sd_latent *l = xcalloc(1, sizeof *l);
    l->b = b;
    l->c = c;
    l->h = h;
    l->w = w;
    l->samples = samples;
    *out = l;
    return 0;
}

struct sd_latent *sd_latent_new(int64_t b, int64_t c, int64_t h, int64_t w)
{
    struct sd_latent *l;
    struct err e = {0};
    if (sd_latent_try_new(b, c, h, w, &l, &e) < 0)
        PANIC("%s", e.msg);
    return l;
}

int sd_latent_try_new_like(const struct sd_latent *src, int64_t b, int64_t c, int64_t h,
                           int64_t w, struct sd_latent **out, struct err *e)
{
    int rc = sd_latent_try_new(b, c, h, w, out, e);
    if (rc < 0)
        return rc;
    struct sd_latent *l = *out;
    if (src->noise_mask) {
        size_t n = (size_t)(src->mb * src->mh * src->mw);
        l->noise_mask = xmalloc(n * sizeof *l->noise_mask);
        memcpy(l->noise_mask, src->noise_mask, n * sizeof *l->noise_mask);
        l->mb = src->mb;
        l->mh = src->mh;
        l->mw = src->mw;
    }
    if (src->batch_index) {
        l->batch_index = xmalloc((size_t)src->n_batch_index * sizeof *l->batch_index);
        memcpy(l->batch_index, src->batch_index,
               (size_t)src->n_batch_index * sizeof *l->batch_index);
        l->n_batch_index = src->n_batch_index;
    }
    return 0;
}

struct sd_latent *sd_latent_new_like(const struct sd_latent *src, int64_t b, int64_t c,
                                     int64_t h, int64_t w)
{
    struct sd_latent *l;
    struct err e = {0};
    if (sd_latent_try_new_like(src, b, c, h, w, &l, &e) < 0)
        PANIC("%s", e.msg);
    return l;
}

void sd_latent_free(struct sd_latent *l)
{
    if (!l)
        return;
    xfree(l->samples);
    xfree(l->noise_mask);
    xfree(l->batch_index);
    xfree(l);
}

static void latent_obj_free(void *p)
{
    sd_latent_free(p);
}

struct value *sd_latent_value(struct sd_latent *l)
{
    return value_new_object("LATENT", l, latent_obj_free);
}

const struct sd_latent *sd_latent_of(const struct value *v)
{
    if (!v || v->kind != VALUE_OBJECT || v->obj_free != latent_obj_free)
        return NULL;
    return v->obj;
}

/* ---- CONDITIONING ---- */

struct sd_cond *sd_cond_new(const float *cond, int batch, int tokens, int dim,
                            const float *pooled, int pooled_dim)
{
    ASSERT(batch > 0 && tokens > 0 && dim > 0);
    struct sd_cond *c = xcalloc(1, sizeof *c);
    c->n = 1;
    c->entries = xcalloc(1, sizeof *c->entries);
    struct sd_cond_entry *e = &c->entries[0];
    size_t n = (size_t)batch * tokens * dim;
    e->cond = xmalloc(n * sizeof *e->cond);
    memcpy(e->cond, cond, n * sizeof *e->cond);
    e->batch = batch;
    e->tokens = tokens;
    e->dim = dim;
    e->strength = 1.0f;
    if (pooled && pooled_dim > 0) {
        e->pooled = xmalloc((size_t)batch * pooled_dim * sizeof *e->pooled);
        memcpy(e->pooled, pooled, (size_t)batch * pooled_dim * sizeof *e->pooled);
        e->pooled_dim = pooled_dim;
    }
    return c;
}

void sd_cond_free(struct sd_cond *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        xfree(c->entries[i].cond);
        xfree(c->entries[i].pooled);
        xfree(c->entries[i].mask);
        xfree(c->entries[i].concat_latent);
        xfree(c->entries[i].concat_mask);
        sd_control_unref(c->entries[i].control);
        sd_gligen_unref(c->entries[i].gligen);
    }
    xfree(c->entries);
    xfree(c);
}

/* A heap copy of `bytes` bytes of floats. */
static float *floats_dup(const float *src, size_t bytes)
{
    float *d = xmalloc(bytes);
    memcpy(d, src, bytes);
    return d;
}

static void entry_copy(struct sd_cond_entry *d, const struct sd_cond_entry *s)
{
    *d = *s;
    size_t n = (size_t)s->batch * s->tokens * s->dim;
    d->cond = xmalloc(n * sizeof *d->cond);
    memcpy(d->cond, s->cond, n * sizeof *d->cond);
    if (s->pooled) {
        size_t m = (size_t)s->batch * s->pooled_dim;
        d->pooled = xmalloc(m * sizeof *d->pooled);
        memcpy(d->pooled, s->pooled, m * sizeof *d->pooled);
    }
    if (s->mask) {
        size_t m = (size_t)s->mask_b * s->mask_h * s->mask_w;
        d->mask = xmalloc(m * sizeof *d->mask);
        memcpy(d->mask, s->mask, m * sizeof *d->mask);
    }
    if (s->concat_latent)
        d->concat_latent = floats_dup(s->concat_latent, (size_t)s->concat_b * 4 * s->concat_h *
                                                         s->concat_w * sizeof *d->concat_latent);
    if (s->concat_mask)
        d->concat_mask = floats_dup(s->concat_mask, (size_t)s->concat_mask_b * s->concat_mask_h *
                                                     s->concat_mask_w * sizeof *d->concat_mask);
    if (s->control) /* shared: controls are immutable */
        sd_control_ref(s->control);
    if (s->gligen) /* shared: immutable too */
        sd_gligen_ref(s->gligen);
}

void sd_cond_append(struct sd_cond *dst, const struct sd_cond *src)
{
    if (src->n == 0)
        return;
    dst->entries = xrealloc(dst->entries, (size_t)(dst->n + src->n) * sizeof *dst->entries);
    for (int i = 0; i < src->n; i++)
        entry_copy(&dst->entries[dst->n + i], &src->entries[i]);
    dst->n += src->n;
}

struct sd_cond *sd_cond_clone(const struct sd_cond *c)
{
    struct sd_cond *d = xcalloc(1, sizeof *d);
    sd_cond_append(d, c);
    return d;
}

static void cond_obj_free(void *p)
{
    sd_cond_free(p);
}

struct value *sd_cond_value(struct sd_cond *c)
{
    return value_new_object("CONDITIONING", c, cond_obj_free);
}

const struct sd_cond *sd_cond_of(const struct value *v)
{
    if (!v || v->kind != VALUE_OBJECT || v->obj_free != cond_obj_free)
        return NULL;
    return v->obj;
}

/* ---- MODEL ---- */

struct sd_model *sd_model_new(const struct sd_model_ops *ops, void *impl)
{
    struct sd_model *m = xcalloc(1, sizeof *m);
    m->ops = ops;
    m->impl = impl;
    sd_model_set_family(m, &family_sd15);
    return m;
}

void sd_model_set_family(struct sd_model *m, const struct model_family *f)
{
    sampling_discrete_init(&m->ms, f->sampling.linear_start, f->sampling.linear_end);
    m->latent = &f->latent;
    m->family = f;
}

void sd_model_free(struct sd_model *m)
{
    if (!m)
        return;
    if (m->ops && m->ops->free)
        m->ops->free(m->impl);
    xfree(m);
}

static void model_obj_free(void *p)
{
    sd_model_free(p);
}

struct value *sd_model_value(struct sd_model *m)
{
    return value_new_object("MODEL", m, model_obj_free);
}

const struct sd_model *sd_model_of(const struct value *v)
{
    if (!v || v->kind != VALUE_OBJECT || v->obj_free != model_obj_free)
        return NULL;
    return v->obj;
}
