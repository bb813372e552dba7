#include "node_value.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "err.h"
#include "pynum.h"

/* The refcount is declared as a plain int in the public struct (so the header
 * needs no <stdatomic.h>); every access goes through these casts. */
#define REFS(v) ((_Atomic int *)&(v)->_refs)

static struct value *value_alloc(enum value_kind kind, const char *type)
{
    struct value *v = xcalloc(1, sizeof(*v));
    v->kind = kind;
    v->type = type;
    atomic_init(REFS(v), 1);
    return v;
}

struct value *value_new_int(int64_t x)
{
    struct value *v = value_alloc(VALUE_INT, "INT");
    v->i = x;
    return v;
}

struct value *value_new_u64(uint64_t x)
{
    struct value *v = value_alloc(VALUE_INT, "INT");
    v->i = (int64_t)x;
    v->big = x > (uint64_t)INT64_MAX;
    return v;
}

struct value *value_new_float(double x)
{
    struct value *v = value_alloc(VALUE_FLOAT, "FLOAT");
    v->f = x;
    return v;
}

struct value *value_new_bool(int x)
{
    struct value *v = value_alloc(VALUE_BOOLEAN, "BOOLEAN");
    v->i = x ? 1 : 0;
    return v;
}

struct value *value_new_string(const char *s)
{
    struct value *v = value_alloc(VALUE_STRING, "STRING");
    v->s = xstrdup(s ? s : "");
    return v;
}

/* A tensor value over `data` (owned, numel n). */
static struct value *tensor_value(const char *type, int ndim, const int64_t *shape, size_t n,
                                  float *data)
{
    struct value *v = value_alloc(VALUE_TENSOR, type);
    for (int d = 0; d < ndim; d++)
        v->shape[d] = shape[d];
    v->ndim = ndim;
    v->numel = n;
    v->data = data;
    return v;
}

struct value *value_new_tensor(const char *type, int ndim, const int64_t *shape)
{
    ASSERT(ndim >= 1 && ndim <= VALUE_MAX_DIMS);
    size_t n = 1;
    for (int d = 0; d < ndim; d++) {
        ASSERT(shape[d] > 0);
        ASSERT((uint64_t)shape[d] <= SIZE_MAX / sizeof(float) / n);
        n *= (size_t)shape[d];
    }
    return tensor_value(type, ndim, shape, n, xcalloc(n, sizeof(float)));
}

int value_try_new_tensor(const char *type, int ndim, const int64_t *shape, struct value **out,
                         struct err *e)
{
    size_t n = 1;
    void *data;
    int rc;
    *out = NULL;
    if (ndim < 1 || ndim > VALUE_MAX_DIMS)
        return err_set(e, ERR_INVALID, "invalid %s shape: %d dimensions", type, ndim);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] <= 0)
            return err_set(e, ERR_INVALID, "invalid %s shape: dimension %d is %lld", type, d,
                           (long long)shape[d]);
        /* An overflowing count stays SIZE_MAX / 4: too large, reported with its size. */
        n = (uint64_t)shape[d] > SIZE_MAX / sizeof(float) / n ? SIZE_MAX / sizeof(float)
                                                             : n * (size_t)shape[d];
    }
    if ((rc = xtry_calloc(n, sizeof(float), &data, e)) < 0)
        return rc;
    *out = tensor_value(type, ndim, shape, n, data);
    return 0;
}

struct value *value_new_image(int64_t b, int64_t h, int64_t w, int64_t c)
{
    int64_t shape[4] = {b, h, w, c};
    return value_new_tensor("IMAGE", 4, shape);
}

struct value *value_new_mask(int64_t b, int64_t h, int64_t w)
{
    int64_t shape[3] = {b, h, w};
    return value_new_tensor("MASK", 3, shape);
}

struct value *value_new_object(const char *type, void *obj, void (*obj_free)(void *obj))
{
    struct value *v = value_alloc(VALUE_OBJECT, type);
    v->obj = obj;
    v->obj_free = obj_free;
    return v;
}

struct value *value_ref(struct value *v)
{
    if (v)
        atomic_fetch_add_explicit(REFS(v), 1, memory_order_relaxed);
    return v;
}

void value_unref(struct value *v)
{
    if (!v)
        return;
    int prev = atomic_fetch_sub_explicit(REFS(v), 1, memory_order_acq_rel);
    ASSERT(prev > 0);
    if (prev != 1)
        return;
    xfree(v->s);
    xfree(v->data);
    if (v->obj_free)
        v->obj_free(v->obj);
    xfree(v);
}

int value_refcount(const struct value *v)
{
    return atomic_load(REFS((struct value *)v));
}

int64_t value_i64(const struct value *v)
{
    if (v->kind == VALUE_FLOAT)
        return (int64_t)v->f;
    return v->big ? INT64_MAX : v->i;
}

uint64_t value_u64(const struct value *v)
{
    return (uint64_t)v->i;
}

void value_describe(const struct value *v, struct buf *out)
{
    switch (v->kind) {
    case VALUE_INT:
        if (v->big)
            buf_printf(out, "%llu", (unsigned long long)(uint64_t)v->i);
        else
            buf_printf(out, "%lld", (long long)v->i);
        break;
    case VALUE_FLOAT:
        pynum_format_float(v->f, out);
        break;
    case VALUE_BOOLEAN:
        buf_adds(out, v->i ? "True" : "False");
        break;
    case VALUE_STRING:
        buf_adds(out, v->s);
        break;
    case VALUE_TENSOR:
        buf_printf(out, "<%s [", v->type);
        for (int d = 0; d < v->ndim; d++)
            buf_printf(out, "%s%lld", d ? ", " : "", (long long)v->shape[d]);
        buf_adds(out, "]>");
        break;
    case VALUE_OBJECT:
        buf_printf(out, "<%s object>", v->type);
        break;
    }
}

/* ---- lists ----------------------------------------------------------------------------- */

struct value_list {
    int n;
    struct value **items; /* owned references */
};

/* The destructor doubles as the list marker: a VALUE_OBJECT freed by it is a list. */
static void value_list_free(void *obj)
{
    struct value_list *l = obj;
    for (int i = 0; i < l->n; i++)
        value_unref(l->items[i]);
    xfree(l->items);
    xfree(l);
}

struct value *value_new_list(const char *type, struct value **items, int n)
{
    ASSERT(n >= 0);
    struct value_list *l = xcalloc(1, sizeof *l);
    l->n = n;
    l->items = xmalloc((size_t)(n ? n : 1) * sizeof *l->items);
    if (n)
        memcpy(l->items, items, (size_t)n * sizeof *l->items);
    return value_new_object(type, l, value_list_free);
}

int value_is_list(const struct value *v)
{
    return v && v->kind == VALUE_OBJECT && v->obj_free == value_list_free;
}

int value_list_len(const struct value *v)
{
    if (!v)
        return 0;
    return value_is_list(v) ? ((const struct value_list *)v->obj)->n : 1;
}

struct value *value_list_at(const struct value *v, int i)
{
    if (!value_is_list(v)) {
        ASSERT(v && i == 0);
        return (struct value *)v;
    }
    const struct value_list *l = v->obj;
    ASSERT(i >= 0 && i < l->n);
    return l->items[i];
}
