/*
 * sd_custom_types — SIGMAS, SAMPLER, NOISE and GUIDER payloads (see the header).
 * Each type is recognised by its destructor, as sd_types.c does: a value's type
 * string alone could be forged by another node family.
 */
#include "sd_custom_types.h"

#include <string.h>

#include "alloc.h"

/* ---- SIGMAS ---- */

struct sd_sigmas *sd_sigmas_new(const float *v, int n)
{
    struct sd_sigmas *s = xcalloc(1, sizeof *s);
    if (n > 0) {
        s->v = xmalloc((size_t)n * sizeof *s->v);
        memcpy(s->v, v, (size_t)n * sizeof *s->v);
        s->n = n;
    }
    return s;
}

static void sigmas_free(void *p)
{
    struct sd_sigmas *s = p;
    xfree(s->v);
    xfree(s);
}

struct value *sd_sigmas_value(struct sd_sigmas *s)
{
    return value_new_object("SIGMAS", s, sigmas_free);
}

const struct sd_sigmas *sd_sigmas_of(const struct value *v)
{
    if (!v || v->kind != VALUE_OBJECT || v->obj_free != sigmas_free)
        return NULL;
    return v->obj;
}

/* ---- SAMPLER ---- */

static void sampler_free(void *p)
{
    xfree(p);
}

struct value *sd_sampler_value_opts(enum sampling_sampler s, const struct sampling_options *opts)
{
    struct sd_sampler *o = xcalloc(1, sizeof *o);
    o->sampler = s;
    o->opts = *opts;
    return value_new_object("SAMPLER", o, sampler_free);
}

struct value *sd_sampler_value(enum sampling_sampler s)
{
    const struct sampling_options def = SAMPLING_OPTIONS_DEFAULT;
    return sd_sampler_value_opts(s, &def);
}

const struct sd_sampler *sd_sampler_of(const struct value *v)
{
    if (!v || v->kind != VALUE_OBJECT || v->obj_free != sampler_free)
        return NULL;
    return v->obj;
}

/* ---- NOISE ---- */

static void noise_free(void *p)
{
    xfree(p);
}

struct value *sd_noise_value(int disabled, uint64_t seed)
{
    struct sd_noise *o = xcalloc(1, sizeof *o);
    o->disabled = disabled;
    o->seed = disabled ? 0 : seed;
    return value_new_object("NOISE", o, noise_free);
}

const struct sd_noise *sd_noise_of(const struct value *v)
{
    if (!v || v->kind != VALUE_OBJECT || v->obj_free != noise_free)
        return NULL;
    return v->obj;
}

/* ---- GUIDER ---- */

static void guider_free(void *p)
{
    struct sd_guider *g = p;
    value_unref(g->model);
    value_unref(g->pos);
    value_unref(g->neg);
    value_unref(g->third);
    xfree(g);
}

struct value *sd_guider_value(struct value *model, struct value *pos, struct value *neg,
                              double cfg)
{
    struct sd_guider *g = xcalloc(1, sizeof *g);
    g->model = value_ref(model);
    g->pos = value_ref(pos);
    g->neg = value_ref(neg);
    g->cfg = cfg;
    return value_new_object("GUIDER", g, guider_free);
}

struct value *sd_guider_value_full(const struct sd_guider *src)
{
    struct sd_guider *g = xcalloc(1, sizeof *g);
    *g = *src;
    g->model = value_ref(src->model);
    g->pos = value_ref(src->pos);
    g->neg = value_ref(src->neg);
    g->third = value_ref(src->third);
    return value_new_object("GUIDER", g, guider_free);
}

const struct sd_guider *sd_guider_of(const struct value *v)
{
    if (!v || v->kind != VALUE_OBJECT || v->obj_free != guider_free)
        return NULL;
    return v->obj;
}
