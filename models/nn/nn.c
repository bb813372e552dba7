/*
 * Shared helpers of the SD forward passes (see sd_nn.h).
 */
#include "nn.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void nn__w_init(struct nn_w *w, struct patcher *p, const char *prefix, struct err *e)
{
    w->p = p;
    w->prefix = prefix;
    w->layer = -1;
    w->w = NULL;
    w->e = e;
}

void nn__w_release(struct nn_w *w)
{
    if (w->layer >= 0)
        patcher_release(w->p, w->layer);
    w->layer = -1;
    w->w = NULL;
}

const struct tensor *nn__w_get(struct nn_w *w, const char *fmt, ...)
{
    char key[256];
    int n = snprintf(key, sizeof(key), "%s", w->prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(key + n, sizeof(key) - (size_t)n, fmt, ap);
    va_end(ap);
    int layer, index;
    if (patcher_model_find(patcher_model_of(w->p), key, &layer, &index) < 0) {
        err_set(w->e, ERR_NOT_FOUND, "model has no weight '%s'", key);
        return NULL;
    }
    if (layer != w->layer) {
        nn__w_release(w);
        if (patcher_acquire(w->p, layer, &w->w, w->e) < 0)
            return NULL;
        w->layer = layer;
    }
    return w->w[index];
}

int nn__new(struct dev *d, struct tensor **out, struct err *e, int ndim, ...)
{
    int64_t shape[TENSOR_MAX_DIMS];
    va_list ap;
    va_start(ap, ndim);
    for (int i = 0; i < ndim; i++)
        shape[i] = va_arg(ap, int64_t);
    va_end(ap);
    return tensor_new(d, TENSOR_F32, ndim, shape, out, e);
}

int nn__to_tokens(const struct tensor *x, struct tensor **out, struct err *e)
{
    struct tensor *v = NULL, *p = NULL;
    int rc;
    int64_t b = x->shape[0], c = x->shape[1], hw = x->shape[2] * x->shape[3];
    *out = NULL;
    NN_TRY(tensor_reshape(x, 3, (const int64_t[]){b, c, hw}, &v, e));
    NN_TRY(tensor_permute(v, (const int[]){0, 2, 1}, &p, e));
    NN_TRY(nn__new(tensor_dev(x), out, e, 3, b, hw, c));
    NN_TRY(tensor_copy(*out, p, e));
    tensor_free(v);
    tensor_free(p);
    return 0;
fail:
    tensor_free(v);
    tensor_free(p);
    tensor_free(*out);
    *out = NULL;
    return rc;
}

int nn__from_tokens(const struct tensor *tok, struct tensor *out, struct err *e)
{
    struct tensor *v = NULL, *p = NULL;
    int rc;
    int64_t b = out->shape[0], c = out->shape[1], h = out->shape[2], w = out->shape[3];
    NN_TRY(tensor_reshape(tok, 4, (const int64_t[]){b, h, w, c}, &v, e));
    NN_TRY(tensor_permute(v, (const int[]){0, 3, 1, 2}, &p, e));
    NN_TRY(tensor_copy(out, p, e));
fail:
    tensor_free(v);
    tensor_free(p);
    return rc;
}

int nn__linear(struct tensor *out, const struct tensor *x, const struct tensor *w,
              const struct tensor *b, struct err *e)
{
    if (w->ndim == 2)
        return tensor_linear(out, x, w, b, e);
    struct tensor *w2 = NULL;
    int rc = tensor_reshape(w, 2, (const int64_t[]){w->shape[0], w->shape[1]}, &w2, e);
    if (rc == 0)
        rc = tensor_linear(out, x, w2, b, e);
    tensor_free(w2);
    return rc;
}

int nn__conv3(struct tensor *out, const struct tensor *x, const struct tensor *w,
             const struct tensor *b, struct err *e)
{
    struct tensor_conv2d_opts o = {.stride = 1, .pad_top = 1, .pad_bottom = 1, .pad_left = 1,
                                   .pad_right = 1};
    return tensor_conv2d(out, x, w, b, &o, e);
}

int nn__conv1(struct tensor *out, const struct tensor *x, const struct tensor *w,
             const struct tensor *b, struct err *e)
{
    struct tensor_conv2d_opts o = {.stride = 1};
    return tensor_conv2d(out, x, w, b, &o, e);
}

void nn__probe(struct model_probe *p, const char *name, const struct tensor *t)
{
    if (p && p->fn)
        p->fn(p->user, name, t);
}
