/*
 * dispatch_impl — what every op entry point shares (private to tensor/): the
 * argument/device check that picks the backend (check_devs: the one place where
 * the storage device's kind decides between CPU kernels and the CUDA backend),
 * and the adapters that turn tensors into the CPU kernels' contract
 * (contiguous f32 host buffers).
 *
 * CPU side: an operand that already is contiguous f32 is used in place, anything
 * else (f16/bf16, strided views) goes through a temporary f32 copy, and a result
 * that cannot be written in place is computed into a temporary and scattered
 * back. Temporaries are host memory (xmalloc): on the sim device they are not
 * counted against its budget (they are workspace, like cuBLAS's).
 *
 * Threads: as tensor.h.
 */
#ifndef LATENTD_TENSOR_DISPATCH_IMPL_H
#define LATENTD_TENSOR_DISPATCH_IMPL_H

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "alloc.h"
#include "tensor_impl.h"

static inline int is_host(const struct tensor *t)
{
    struct dev *d = t->_storage->dev;
    return !d || dev_is_host(d);
}

static inline int is_f32_contig(const struct tensor *t)
{
    return t->dtype == TENSOR_F32 && tensor_is_contiguous(t);
}

struct hbuf {
    float *p;
    int owned;
};

/* A contiguous f32 copy of t (or t's own memory when it already is one). */
static inline const float *hin(const struct tensor *t, struct hbuf *h)
{
    if (!t) {
        h->p = NULL;
        h->owned = 0;
        return NULL;
    }
    if (is_f32_contig(t)) {
        h->p = (float *)tensor__ptr(t);
        h->owned = 0;
        return h->p;
    }
    h->p = xmalloc_aligned(64, (size_t)tensor_numel(t) * sizeof(float) + 64);
    h->owned = 1;
    tensor__gather_f32(h->p, t);
    return h->p;
}

/* Where to write t's f32 result; hout_done stores it back. */
static inline float *hout(struct tensor *t, struct hbuf *h)
{
    if (is_f32_contig(t)) {
        h->p = (float *)tensor__ptr(t);
        h->owned = 0;
    } else {
        h->p = xmalloc_aligned(64, (size_t)tensor_numel(t) * sizeof(float) + 64);
        h->owned = 1; /* every op writes every element, so no need to load t first */
    }
    return h->p;
}

static inline void hfree(struct hbuf *h)
{
    if (h->owned)
        xfree_aligned(h->p);
    h->p = NULL;
    h->owned = 0;
}

static inline void hout_done(struct tensor *t, struct hbuf *h)
{
    if (h->owned)
        tensor__scatter_f32(t, h->p);
    hfree(h);
}

static inline const char *shp(const struct tensor *t, char *buf)
{
    return t ? tensor_shape_str(t, buf, 96) : "(null)";
}

/* The first nreq of the n tensors must be present; all present ones must be on one
 * device, whose kind is returned via *cuda. */
static inline int check_devs(const char *op, struct err *e, int *cuda, int nreq, int n, ...)
{
    va_list ap;
    struct dev *d = NULL;
    int first = 1;
    int host = 1;
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
            host = is_host(t);
            first = 0;
        } else if (t->_storage->dev != d) {
            va_end(ap);
            return err_set(e, ERR_INVALID, "%s: operands live on different devices", op);
        }
    }
    va_end(ap);
    *cuda = !host;
#ifndef TENSOR_HAVE_CUDA
    if (!host)
        return err_set(e, ERR_UNSUPPORTED, "%s: this build has no CUDA backend", op);
#endif
    return 0;
}

#ifdef TENSOR_HAVE_CUDA
#define CUDA_OR(call) return (call)
#else
#define CUDA_OR(call) return err_set(e, ERR_UNSUPPORTED, "no CUDA backend in this build")
#endif

static inline int64_t rows_of(const struct tensor *t)
{
    return tensor_numel(t) / t->shape[t->ndim - 1];
}

#endif
