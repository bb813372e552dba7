/*
 * ops_nn.c — norm and activation entry points: check, then the backend's member.
 */
#include "dispatch_impl.h"

int tensor_group_norm(struct tensor *out, const struct tensor *x, int groups,
                      const struct tensor *gamma, const struct tensor *beta, float eps,
                      int fuse_silu, struct err *e)
{
    char b1[96], b2[96];
    const struct tensor__backend *be;
    int rc;
    if ((rc = check_devs("group_norm", e, &be, 2, 4, out, x, gamma, beta)) < 0)
        return rc;
    int64_t c = x->ndim >= 2 ? x->shape[1] : 0;
    if (x->ndim < 2 || !tensor_same_shape(out, x) || groups < 1 || c % groups ||
        (gamma && tensor_numel(gamma) != c) || (beta && tensor_numel(beta) != c) || !(eps >= 0))
        return err_set(e, ERR_INVALID, "group_norm: %d groups over %s into %s", groups,
                       shp(x, b1), shp(out, b2));
    if ((rc = tensor__backend_check(be, !!be->group_norm, TENSOR__OP_GROUP_NORM, out->dtype, e)) < 0)
        return rc;
    return be->group_norm(out, x, groups, gamma, beta, eps, fuse_silu, e);
}

int tensor_layer_norm(struct tensor *out, const struct tensor *x, const struct tensor *gamma,
                      const struct tensor *beta, float eps, struct err *e)
{
    char b1[96], b2[96];
    const struct tensor__backend *be;
    int rc;
    if ((rc = check_devs("layer_norm", e, &be, 2, 4, out, x, gamma, beta)) < 0)
        return rc;
    int64_t c = x->shape[x->ndim - 1];
    if (!tensor_same_shape(out, x) || (gamma && tensor_numel(gamma) != c) ||
        (beta && tensor_numel(beta) != c) || !(eps >= 0))
        return err_set(e, ERR_INVALID, "layer_norm: %s into %s", shp(x, b1), shp(out, b2));
    if ((rc = tensor__backend_check(be, !!be->layer_norm, TENSOR__OP_LAYER_NORM, out->dtype, e)) < 0)
        return rc;
    return be->layer_norm(out, x, gamma, beta, eps, e);
}

static int unary(const char *op, struct tensor *out, const struct tensor *x,
                 enum tensor__unary kind, float p0, float p1, struct err *e)
{
    char b1[96], b2[96];
    const struct tensor__backend *be;
    int rc;
    if ((rc = check_devs(op, e, &be, 2, 2, out, x)) < 0)
        return rc;
    if (!tensor_same_shape(out, x))
        return err_set(e, ERR_INVALID, "%s: %s into %s", op, shp(x, b1), shp(out, b2));
    if ((rc = tensor__backend_check(be, !!be->unary, TENSOR__OP_UNARY, out->dtype, e)) < 0)
        return rc;
    return be->unary(out, x, kind, p0, p1, e);
}

int tensor_silu(struct tensor *out, const struct tensor *x, struct err *e)
{
    return unary("silu", out, x, TENSOR__SILU, 0, 0, e);
}

int tensor_gelu(struct tensor *out, const struct tensor *x, struct err *e)
{
    return unary("gelu", out, x, TENSOR__GELU, 0, 0, e);
}

int tensor_quick_gelu(struct tensor *out, const struct tensor *x, struct err *e)
{
    return unary("quick_gelu", out, x, TENSOR__QUICK_GELU, 0, 0, e);
}

int tensor_scale(struct tensor *out, const struct tensor *x, float s, struct err *e)
{
    return unary("scale", out, x, TENSOR__SCALE, s, 0, e);
}

int tensor_clamp(struct tensor *out, const struct tensor *x, float lo, float hi, struct err *e)
{
    if (!(lo <= hi))
        return err_set(e, ERR_INVALID, "clamp: lo %g > hi %g", (double)lo, (double)hi);
    return unary("clamp", out, x, TENSOR__CLAMP, lo, hi, e);
}

int tensor_leaky_relu(struct tensor *out, const struct tensor *x, float slope, struct err *e)
{
    return unary("leaky_relu", out, x, TENSOR__LEAKY_RELU, slope, 0, e);
}

int tensor_prelu(struct tensor *out, const struct tensor *x, const struct tensor *slope,
                 struct err *e)
{
    char b1[96], b2[96], b3[96];
    const struct tensor__backend *be;
    int rc;
    if ((rc = check_devs("prelu", e, &be, 3, 3, out, x, slope)) < 0)
        return rc;
    if (x->ndim < 2 || !tensor_same_shape(out, x) || tensor_numel(slope) != x->shape[1])
        return err_set(e, ERR_INVALID, "prelu: %s with slopes %s into %s", shp(x, b1),
                       shp(slope, b2), shp(out, b3));
    if ((rc = tensor__backend_check(be, !!be->prelu, TENSOR__OP_PRELU, out->dtype, e)) < 0)
        return rc;
    return be->prelu(out, x, slope, e);
}

int tensor_geglu(struct tensor *out, const struct tensor *x, struct err *e)
{
    char b1[96], b2[96];
    const struct tensor__backend *be;
    int rc;
    if ((rc = check_devs("geglu", e, &be, 2, 2, out, x)) < 0)
        return rc;
    int64_t c2 = x->shape[x->ndim - 1];
    int ok = out->ndim == x->ndim && c2 % 2 == 0 && out->shape[out->ndim - 1] == c2 / 2 &&
             rows_of(out) == rows_of(x);
    for (int i = 0; ok && i < x->ndim - 1; i++)
        ok = out->shape[i] == x->shape[i];
    if (!ok)
        return err_set(e, ERR_INVALID, "geglu: %s into %s", shp(x, b1), shp(out, b2));
    if ((rc = tensor__backend_check(be, !!be->geglu, TENSOR__OP_GEGLU, out->dtype, e)) < 0)
        return rc;
    return be->geglu(out, x, e);
}

int tensor_softmax(struct tensor *out, const struct tensor *x, struct err *e)
{
    char b1[96], b2[96];
    const struct tensor__backend *be;
    int rc;
    if ((rc = check_devs("softmax", e, &be, 2, 2, out, x)) < 0)
        return rc;
    if (!tensor_same_shape(out, x))
        return err_set(e, ERR_INVALID, "softmax: %s into %s", shp(x, b1), shp(out, b2));
    if ((rc = tensor__backend_check(be, !!be->softmax, TENSOR__OP_SOFTMAX, out->dtype, e)) < 0)
        return rc;
    return be->softmax(out, x, e);
}
