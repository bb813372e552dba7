/*
 * ref_fixture — the float64 reference fixtures of the model tests (tools/reference_sd15.py,
 * tools/reference_sdxl.py): one line per tensor, "name ndim shape... mean|x| sum nsamples
 * (index value)...", and the checks against them: every sampled value within
 * tol * mean|ref|, and mean|x| within tol relative. Also the deterministic inputs both
 * sides build, wave(i) = (float)sin(a * i + b), and a model_probe that compares named
 * intermediates as they go by.
 *
 * Header-only (static functions, one fixture per test program); test thread only.
 */
#ifndef LATENTD_TESTS_REF_FIXTURE_H
#define LATENTD_TESTS_REF_FIXTURE_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "harness.h"
#include "tensor.h"

struct ref {
    char name[64];
    int ndim;
    int64_t shape[4];
    double mean_abs, sum;
    int ns;
    long idx[32];
    double val[32];
};

static struct ref *ref__v;
static int ref__n;

/* Read `dir`/`file`; an unreadable file is a failed check (and every compare then fails). */
static inline void ref_fixture_load(const char *dir, const char *file)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    FILE *fp = fopen(path, "r");
    ok(fp != NULL, "open %s", path);
    if (!fp)
        return;
    char line[8192];
    while (fgets(line, sizeof(line), fp)) {
        if (line[0] == '#')
            continue;
        ref__v = xrealloc(ref__v, (size_t)(ref__n + 1) * sizeof(*ref__v));
        struct ref *r = &ref__v[ref__n];
        memset(r, 0, sizeof(*r));
        char *p = line;
        int k;
        sscanf(p, "%63s %d%n", r->name, &r->ndim, &k);
        p += k;
        for (int i = 0; i < r->ndim && i < 4; i++) {
            sscanf(p, "%ld%n", &r->shape[i], &k);
            p += k;
        }
        sscanf(p, "%lf %lf %d%n", &r->mean_abs, &r->sum, &r->ns, &k);
        p += k;
        if (r->ns > 32)
            r->ns = 32;
        for (int i = 0; i < r->ns; i++) {
            sscanf(p, "%ld %lf%n", &r->idx[i], &r->val[i], &k);
            p += k;
        }
        ref__n++;
    }
    fclose(fp);
}

static inline void ref_fixture_free(void)
{
    xfree(ref__v);
    ref__v = NULL;
    ref__n = 0;
}

static inline const struct ref *ref_find(const char *name)
{
    for (int i = 0; i < ref__n; i++)
        if (!strcmp(ref__v[i].name, name))
            return &ref__v[i];
    return NULL;
}

/* Compare host values of shape (ndim, shape) with the reference `name`. */
static inline void ref_compare(const char *name, const float *v, int ndim, const int64_t *shape,
                               double tol)
{
    const struct ref *r = ref_find(name);
    if (!r) {
        ok(0, "%s: no reference line", name);
        return;
    }
    int same_shape = r->ndim == ndim;
    long n = 1;
    for (int i = 0; same_shape && i < ndim; i++) {
        same_shape = r->shape[i] == shape[i];
        n *= (long)shape[i];
    }
    if (!same_shape) {
        ok(0, "%s: shape differs from the reference", name);
        return;
    }
    double ma = 0, worst = 0;
    for (long i = 0; i < n; i++)
        ma += fabs(v[i]);
    ma /= (double)n;
    double scale = r->mean_abs > 1e-12 ? r->mean_abs : 1e-12;
    for (int i = 0; i < r->ns; i++)
        worst = fmax(worst, fabs(v[r->idx[i]] - r->val[i]) / scale);
    double mrel = fabs(ma - r->mean_abs) / scale;
    ok(worst <= tol && mrel <= tol,
       "%s matches the reference (max err %.2e, mean|x| err %.2e of "
       "scale %.3g, tol %.0e)",
       name, worst, mrel, scale, tol);
}

static inline void ref_compare_tensor(const char *name, const struct tensor *t, double tol)
{
    int64_t n = tensor_numel(t);
    float *v = xmalloc((size_t)n * sizeof(float));
    struct err e = {0};
    if (tensor_read_f32(t, v, n, &e) < 0)
        ok(0, "%s: read: %s", name, e.msg);
    else
        ref_compare(name, v, t->ndim, t->shape, tol);
    xfree(v);
}

/* A model_probe's user: compares the intermediates in `names` as "prefix.name". */
struct ref_probe {
    const char *prefix;
    const char *const *names;
    double tol;
};

static inline void ref_on_probe(void *user, const char *name, const struct tensor *t)
{
    struct ref_probe *p = user;
    for (int i = 0; p->names[i]; i++) {
        if (!strcmp(p->names[i], name)) {
            char full[128];
            snprintf(full, sizeof(full), "%s.%s", p->prefix, name);
            ref_compare_tensor(full, t, p->tol);
        }
    }
}

static inline void ref_wave(float *v, long n, double a, double b)
{
    for (long i = 0; i < n; i++)
        v[i] = (float)sin(a * (double)i + b);
}

static inline struct tensor *ref_new_wave(struct dev *d, int ndim, const int64_t *shape, double a,
                                          double b)
{
    struct tensor *t = NULL;
    struct err e = {0};
    if (tensor_new(d, TENSOR_F32, ndim, shape, &t, &e) < 0)
        PANIC("tensor_new: %s", e.msg);
    int64_t n = tensor_numel(t);
    float *v = xmalloc((size_t)n * sizeof(float));
    ref_wave(v, n, a, b);
    tensor_write_f32(t, v, n, &e);
    xfree(v);
    return t;
}

#endif
