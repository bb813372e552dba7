/*
 * nn — private helpers shared by the CLIP, UNet and VAE forward passes:
 * weight access through the patcher (one layer held at a time), activation
 * allocation, and small composite ops. Not a public header (models/ only).
 */
#ifndef LATENTD_MODELS_NN_H
#define LATENTD_MODELS_NN_H

#include "err.h"
#include "patcher.h"
#include "model_config.h"
#include "tensor.h"

/*
 * Weight scope: nn__w_get(w, "input_blocks.1.0.in_layers.0.weight") finds the key
 * (prefix + name), acquires its layer (releasing the layer held before, whose
 * tensors become invalid), and returns the tensor (borrowed until the layer is
 * released). NULL with `e` set when the key is unknown or acquiring fails.
 */
struct nn_w {
    struct patcher *p;
    const char *prefix;      /* "model.diffusion_model." ... */
    int layer;               /* held layer, or -1 */
    struct tensor *const *w; /* its weights */
    struct err *e;
};

void nn__w_init(struct nn_w *w, struct patcher *p, const char *prefix, struct err *e);
const struct tensor *nn__w_get(struct nn_w *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void nn__w_release(struct nn_w *w);

/* Fail-fast helpers: on error they return a negative code and leave `e` set. */
#define NN_TRY(x)                                                                  \
    do {                                                                           \
        if ((rc = (x)) < 0)                                                        \
            goto fail;                                                             \
    } while (0)
#define NN_W(var, w, ...)                                                          \
    do {                                                                           \
        if (!((var) = nn__w_get((w), __VA_ARGS__))) {                                \
            rc = (w)->e->code ? (w)->e->code : ERR_INVALID;                        \
            goto fail;                                                             \
        }                                                                          \
    } while (0)

/* New f32 tensor on d with the given dims. */
int nn__new(struct dev *d, struct tensor **out, struct err *e, int ndim, ...);

/* x [B,C,H,W] -> new contiguous tokens [B,H*W,C], and back into out [B,C,H,W]. */
int nn__to_tokens(const struct tensor *x, struct tensor **out, struct err *e);
int nn__from_tokens(const struct tensor *tok, struct tensor *out, struct err *e);

/* Linear whose weight may be a 1x1 conv [o,i,1,1]. */
int nn__linear(struct tensor *out, const struct tensor *x, const struct tensor *w,
              const struct tensor *b, struct err *e);

/* 3x3 conv, padding 1, stride 1. */
int nn__conv3(struct tensor *out, const struct tensor *x, const struct tensor *w,
             const struct tensor *b, struct err *e);
int nn__conv1(struct tensor *out, const struct tensor *x, const struct tensor *w,
             const struct tensor *b, struct err *e);

void nn__probe(struct model_probe *p, const char *name, const struct tensor *t);

#endif
