/*
 * Private to models/upscale/: the two forward passes behind ups_forward (shapes
 * already checked, model loaded) and the weight scope they share.
 */
#ifndef LATENTD_MODELS_UPSCALE_IMPL_H
#define LATENTD_MODELS_UPSCALE_IMPL_H

#include "nn.h"
#include "upscale.h"

/* Weight `role` (i, j, k as ups_key) .weight or .bias (is_bias) through the scope. */
const struct tensor *ups__w(struct nn_w *w, const struct ups_arch *a, enum ups_role r, int i,
                            int j, int k, int is_bias);

int ups__esrgan_forward(struct nn_w *w, const struct ups_arch *a, struct dev *d,
                        const struct tensor *x, struct tensor *out, struct err *e);
int ups__srvgg_forward(struct nn_w *w, const struct ups_arch *a, struct dev *d,
                       const struct tensor *x, struct tensor *out, struct err *e);

/* Fail-fast weight fetch in the NN_W style. */
#define UPS_W(var, w, a, r, i, j, k, b)                                                \
    do {                                                                           \
        if (!((var) = ups__w((w), (a), (r), (i), (j), (k), (b)))) {                \
            rc = (w)->e->code ? (w)->e->code : ERR_INVALID;                        \
            goto fail;                                                             \
        }                                                                          \
    } while (0)

#endif
