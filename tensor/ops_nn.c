/*
 * ops_nn.c — norm and activation entry points.
 */
#include "dispatch_impl.h"

/* ---- norms and activations ---------------------------------------------------------------- */

int tensor_group_norm(struct tensor *out, const struct tensor *x, int groups,
                      const struct tensor *gamma, const struct tensor *beta, float eps,
                      int fuse_silu, struct err *e)
{
    char b1[96], b2[96];
    int cuda, rc;
    if ((rc = check_devs("group_norm", e, &cuda, 2, 4, out, x, gamma, beta)) < 0)
        return rc;
    int64_t c = x->ndim >= 2 ? x->shape[1] : 0;
    if (x->ndim < 2 || !tensor_same_shape(out, x) || groups < 1 || c % groups ||
        (gamma && tensor_numel(gamma) != c) || (beta && tensor_numel(beta) != c) || !(eps >= 0))
        return err_set(e, ERR_INVALID, "group_norm: %d groups over %s into %s", groups,
                       shp(x, b1), shp(out, b2));
    if (cuda)
        CUDA_OR(tensor__cuda_group_norm(out, x, groups, gamma, beta, eps, fuse_silu, e));
    double pt0 = tensor__prof_t0();
    int64_t n = x->shape[0], hw = tensor_numel(x) / (n * c);
    struct hbuf hx, hg, hb, ho;
    const float *px = hin(x, &hx), *pg = hin(gamma, &hg), *pb = hin(beta, &hb);
    float *po = hout(out, &ho);
    cpu_group_norm(po, px, n, c, hw, groups, pg, pb, eps, fuse_silu);
    hfree(&hx);
    hfree(&hg);
    hfree(&hb);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_GN, pt0, 0);
    return 0;
}

int tensor_layer_norm(struct tensor *out, const struct tensor *x, const struct tensor *gamma,
                      const struct tensor *beta, float eps, struct err *e)
{
    char b1[96], b2[96];
    int cuda, rc;
    if ((rc = check_devs("layer_norm", e, &cuda, 2, 4, out, x, gamma, beta)) < 0)
        return rc;
    int64_t c = x->shape[x->ndim - 1];
    if (!tensor_same_shape(out, x) || (gamma && tensor_numel(gamma) != c) ||
        (beta && tensor_numel(beta) != c) || !(eps >= 0))
        return err_set(e, ERR_INVALID, "layer_norm: %s into %s", shp(x, b1), shp(out, b2));
    if (cuda)
        CUDA_OR(tensor__cuda_layer_norm(out, x, gamma, beta, eps, e));
    double pt0 = tensor__prof_t0();
    struct hbuf hx, hg, hb, ho;
    const float *px = hin(x, &hx), *pg = hin(gamma, &hg), *pb = hin(beta, &hb);
    float *po = hout(out, &ho);
    cpu_layer_norm(po, px, rows_of(x), c, pg, pb, eps);
    hfree(&hx);
    hfree(&hg);
    hfree(&hb);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_LN, pt0, 0);
    return 0;
}

static int unary(const char *op, struct tensor *out, const struct tensor *x,
                 enum tensor__unary kind, float p0, float p1, struct err *e)
{
    char b1[96], b2[96];
    int cuda, rc;
    if ((rc = check_devs(op, e, &cuda, 2, 2, out, x)) < 0)
        return rc;
    if (!tensor_same_shape(out, x))
        return err_set(e, ERR_INVALID, "%s: %s into %s", op, shp(x, b1), shp(out, b2));
    if (cuda)
        CUDA_OR(tensor__cuda_unary(out, x, kind, p0, p1, e));
    double pt0 = tensor__prof_t0();
    struct hbuf hx, ho;
    const float *px = hin(x, &hx);
    float *po = hout(out, &ho);
    int64_t n = tensor_numel(x);
    switch (kind) {
    case TENSOR__SILU: cpu_activation(po, px, n, CPU_ACT_SILU); break;
    case TENSOR__GELU: cpu_activation(po, px, n, CPU_ACT_GELU); break;
    case TENSOR__QUICK_GELU: cpu_activation(po, px, n, CPU_ACT_QUICK_GELU); break;
    case TENSOR__SCALE: cpu_vec_scale(po, px, p0, n); break;
    case TENSOR__CLAMP:
        for (int64_t i = 0; i < n; i++)
            po[i] = px[i] < p0 ? p0 : px[i] > p1 ? p1 : px[i];
        break;
    }
    hfree(&hx);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_ACT, pt0, 0);
    return 0;
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

int tensor_geglu(struct tensor *out, const struct tensor *x, struct err *e)
{
    char b1[96], b2[96];
    int cuda, rc;
    if ((rc = check_devs("geglu", e, &cuda, 2, 2, out, x)) < 0)
        return rc;
    int64_t c2 = x->shape[x->ndim - 1];
    int ok = out->ndim == x->ndim && c2 % 2 == 0 && out->shape[out->ndim - 1] == c2 / 2 &&
             rows_of(out) == rows_of(x);
    for (int i = 0; ok && i < x->ndim - 1; i++)
        ok = out->shape[i] == x->shape[i];
    if (!ok)
        return err_set(e, ERR_INVALID, "geglu: %s into %s", shp(x, b1), shp(out, b2));
    if (cuda)
        CUDA_OR(tensor__cuda_geglu(out, x, e));
    double pt0 = tensor__prof_t0();
    struct hbuf hx, ho;
    const float *px = hin(x, &hx);
    float *po = hout(out, &ho);
    cpu_geglu(po, px, rows_of(x), c2 / 2);
    hfree(&hx);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_ACT, pt0, 0);
    return 0;
}

int tensor_softmax(struct tensor *out, const struct tensor *x, struct err *e)
{
    char b1[96], b2[96];
    int cuda, rc;
    if ((rc = check_devs("softmax", e, &cuda, 2, 2, out, x)) < 0)
        return rc;
    if (!tensor_same_shape(out, x))
        return err_set(e, ERR_INVALID, "softmax: %s into %s", shp(x, b1), shp(out, b2));
    if (cuda)
        CUDA_OR(tensor__cuda_softmax(out, x, e));
    struct hbuf hx, ho;
    const float *px = hin(x, &hx);
    float *po = hout(out, &ho);
    cpu_softmax(po, px, rows_of(x), x->shape[x->ndim - 1]);
    hfree(&hx);
    hout_done(out, &ho);
    return 0;
}
