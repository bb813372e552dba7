/*
 * dispatch_impl — what every op entry point shares (private to tensor/): the operand
 * check that finds the compute backend (check_devs: every operand on one device, whose
 * backend is returned) and small helpers for shape messages.
 *
 * The entry points validate once and call through the backend's table
 * (backend_impl.h); they never name a backend.
 *
 * Threads: as tensor.h.
 */
#ifndef LATENTD_TENSOR_DISPATCH_IMPL_H
#define LATENTD_TENSOR_DISPATCH_IMPL_H

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "alloc.h"
#include "backend_impl.h"
#include "tensor_impl.h"

static inline int is_host(const struct tensor *t)
{
    struct dev *d = t->_storage->dev;
    return !d || dev_is_host(d);
}

static inline const char *shp(const struct tensor *t, char *buf)
{
    return t ? tensor_shape_str(t, buf, 96) : "(null)";
}

/* The first nreq of the n tensors must be present; all present ones must be on one
 * device, whose compute backend is returned via *b. */
static inline int check_devs(const char *op, struct err *e, const struct tensor__backend **b,
                             int nreq, int n, ...)
{
    va_list ap;
    struct dev *d = NULL;
    int first = 1;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        const struct tensor *t = va_arg(ap, const struct tensor *);
        if (!t && i < nreq) {
            va_end(ap);
            return err_set(e, ERR_INVALID, "%s: operand %d is missing", op, i);
        }
        if (!t)
            continue;
        if (first) {
            d = t->_storage->dev;
            first = 0;
        } else if (t->_storage->dev != d) {
            va_end(ap);
            return err_set(e, ERR_INVALID, "%s: operands live on different devices", op);
        }
    }
    va_end(ap);
    if (!(*b = tensor__backend_for(d)))
        return err_set(e, ERR_UNSUPPORTED, "%s: this build has no compute backend for '%s'", op,
                       dev_name(d));
    return 0;
}

static inline int64_t rows_of(const struct tensor *t)
{
    return tensor_numel(t) / t->shape[t->ndim - 1];
}

#endif
