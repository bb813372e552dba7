/*
 * ops_linalg.c — matmul, linear, conv2d and attention entry points: check, then the
 * backend's member; and the chunked linear+geglu fallback.
 */
#include "dispatch_impl.h"

/* ---- matmul / linear --------------------------------------------------------------------- */

int tensor_matmul(struct tensor *out, const struct tensor *a, const struct tensor *b,
                  int trans_a, int trans_b, float alpha, struct err *e)
{
    char b1[96], b2[96], b3[96];
    const struct tensor__backend *be;
    int rc;
    if ((rc = check_devs("matmul", e, &be, 3, 3, out, a, b)) < 0)
        return rc;
    if (a->ndim < 2 || b->ndim < 2 || out->ndim < 2)
        goto bad;
    int64_t m = trans_a ? a->shape[a->ndim - 1] : a->shape[a->ndim - 2];
    int64_t k = trans_a ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    int64_t kb = trans_b ? b->shape[b->ndim - 1] : b->shape[b->ndim - 2];
    int64_t n = trans_b ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
    if (k != kb || out->shape[out->ndim - 2] != m || out->shape[out->ndim - 1] != n)
        goto bad;
    int64_t on[2];
    for (int i = 0; i < 2; i++) {
        int d = out->ndim - 4 + i;
        on[i] = d >= 0 ? out->shape[d] : 1;
        int da = a->ndim - 4 + i, db = b->ndim - 4 + i;
        int64_t an = da >= 0 ? a->shape[da] : 1, bn = db >= 0 ? b->shape[db] : 1;
        if ((an != 1 && an != on[i]) || (bn != 1 && bn != on[i]))
            goto bad;
    }
    if ((rc = tensor__backend_check(be, !!be->matmul, TENSOR__OP_MATMUL, out->dtype, e)) < 0)
        return rc;
    return be->matmul(out, a, b, trans_a, trans_b, alpha, e);
bad:
    return err_set(e, ERR_INVALID, "matmul: %s x %s%s%s into %s", shp(a, b1), shp(b, b2),
                   trans_a ? " (a^T)" : "", trans_b ? " (b^T)" : "", shp(out, b3));
}

int tensor_linear(struct tensor *out, const struct tensor *x, const struct tensor *w,
                  const struct tensor *bias, struct err *e)
{
    char b1[96], b2[96], b3[96];
    const struct tensor__backend *be;
    int rc;
    if ((rc = check_devs("linear", e, &be, 3, 4, out, x, w, bias)) < 0)
        return rc;
    int64_t k = x->shape[x->ndim - 1];
    if (w->ndim != 2 || w->shape[1] != k || out->shape[out->ndim - 1] != w->shape[0] ||
        rows_of(out) != rows_of(x) || (bias && tensor_numel(bias) != w->shape[0]))
        return err_set(e, ERR_INVALID, "linear: x %s, weight %s into %s", shp(x, b1),
                       shp(w, b2), shp(out, b3));
    if ((rc = tensor__backend_check(be, !!be->linear, TENSOR__OP_LINEAR, out->dtype, e)) < 0)
        return rc;
    return be->linear(out, x, w, bias, e);
}

/*
 * Backends without a fused kernel: tensor_linear then tensor_geglu through a device
 * temporary, in LINEAR_GEGLU_CHUNKS row chunks so that the temporary is 2N/8 = N/4
 * floats per row, not 2N (sd15_unet_plan_bytes counts on that).
 */
#define LINEAR_GEGLU_CHUNKS 8
int tensor__linear_geglu_chunked(struct tensor *out, const struct tensor *x,
                                 const struct tensor *w, const struct tensor *bias,
                                 struct err *e)
{
    int64_t rows = rows_of(x), k = x->shape[x->ndim - 1], n2 = w->shape[0];
    int64_t step = (rows + LINEAR_GEGLU_CHUNKS - 1) / LINEAR_GEGLU_CHUNKS;
    struct tensor *x2 = NULL, *o2 = NULL, *t = NULL;
    int rc;
    if ((rc = tensor_reshape(x, 2, (const int64_t[]){rows, k}, &x2, e)) < 0)
        goto out;
    if ((rc = tensor_reshape(out, 2, (const int64_t[]){rows, n2 / 2}, &o2, e)) < 0)
        goto out;
    if ((rc = tensor_new(out->_storage->dev, out->dtype, 2, (const int64_t[]){step, n2}, &t, e)) < 0)
        goto out;
    for (int64_t r0 = 0; r0 < rows && rc == 0; r0 += step) {
        int64_t r = rows - r0 < step ? rows - r0 : step;
        struct tensor *xs = NULL, *os = NULL, *ts = NULL;
        rc = tensor_slice(x2, 0, r0, r, &xs, e);
        if (rc == 0)
            rc = tensor_slice(o2, 0, r0, r, &os, e);
        if (rc == 0)
            rc = tensor_slice(t, 0, 0, r, &ts, e);
        if (rc == 0)
            rc = tensor_linear(ts, xs, w, bias, e);
        if (rc == 0)
            rc = tensor_geglu(os, ts, e);
        tensor_free(xs);
        tensor_free(os);
        tensor_free(ts);
    }
out:
    tensor_free(x2);
    tensor_free(o2);
    tensor_free(t);
    return rc;
}

int tensor_linear_geglu(struct tensor *out, const struct tensor *x, const struct tensor *w,
                        const struct tensor *bias, struct err *e)
{
    char b1[96], b2[96], b3[96];
    const struct tensor__backend *be;
    int rc;
    if ((rc = check_devs("linear_geglu", e, &be, 3, 4, out, x, w, bias)) < 0)
        return rc;
    int64_t k = x->shape[x->ndim - 1];
    if (w->ndim != 2 || w->shape[1] != k || w->shape[0] % 2 ||
        out->shape[out->ndim - 1] != w->shape[0] / 2 || rows_of(out) != rows_of(x) ||
        (bias && tensor_numel(bias) != w->shape[0]))
        return err_set(e, ERR_INVALID, "linear_geglu: x %s, weight %s into %s", shp(x, b1),
                       shp(w, b2), shp(out, b3));
    if (!be->linear_geglu)
        return tensor__linear_geglu_chunked(out, x, w, bias, e);
    if ((rc = tensor__backend_check(be, 1, TENSOR__OP_LINEAR_GEGLU, out->dtype, e)) < 0)
        return rc;
    return be->linear_geglu(out, x, w, bias, e);
}

void tensor_conv2d_out_hw(const struct tensor_conv2d_opts *o, int64_t h, int64_t w, int64_t kh,
                          int64_t kw, int64_t *out_h, int64_t *out_w)
{
    int s = o->stride < 1 ? 1 : o->stride;
    int64_t hh = h + o->pad_top + o->pad_bottom - kh, ww = w + o->pad_left + o->pad_right - kw;
    *out_h = hh < 0 ? 0 : hh / s + 1;
    *out_w = ww < 0 ? 0 : ww / s + 1;
}

/* The shape checks of conv2d and conv2d_up2: x's H x W times `up` is what the conv sees. */
static int conv2d_check(const char *op, struct tensor *out, const struct tensor *x,
                        const struct tensor *w, const struct tensor *bias,
                        const struct tensor_conv2d_opts *o, int64_t up,
                        const struct tensor__backend **be, struct err *e)
{
    char b1[96], b2[96], b3[96];
    int rc;
    if ((rc = check_devs(op, e, be, 3, 4, out, x, w, bias)) < 0)
        return rc;
    if (!o)
        return err_set(e, ERR_INVALID, "%s: no options", op);
    if (o->stride < 1 || o->stride > 8 || o->pad_top < 0 || o->pad_bottom < 0 ||
        o->pad_left < 0 || o->pad_right < 0)
        return err_set(e, ERR_INVALID, "%s: stride %d or negative padding", op, o->stride);
    if (x->ndim != 4 || out->ndim != 4 || (w->ndim != 4 && w->ndim != 2))
        goto bad;
    int64_t co = w->shape[0], ci = w->shape[1];
    int64_t kh = w->ndim == 4 ? w->shape[2] : 1, kw = w->ndim == 4 ? w->shape[3] : 1;
    int64_t ho, wo;
    tensor_conv2d_out_hw(o, up * x->shape[2], up * x->shape[3], kh, kw, &ho, &wo);
    if (x->shape[1] != ci || out->shape[0] != x->shape[0] || out->shape[1] != co ||
        out->shape[2] != ho || out->shape[3] != wo || ho < 1 || wo < 1 ||
        (bias && tensor_numel(bias) != co))
        goto bad;
    return 0;
bad:
    return err_set(e, ERR_INVALID, "%s: x %s, weight %s into %s", op, shp(x, b1), shp(w, b2),
                   shp(out, b3));
}

int tensor_conv2d(struct tensor *out, const struct tensor *x, const struct tensor *w,
                  const struct tensor *bias, const struct tensor_conv2d_opts *o, struct err *e)
{
    const struct tensor__backend *be;
    int rc;
    if ((rc = conv2d_check("conv2d", out, x, w, bias, o, 1, &be, e)) < 0)
        return rc;
    if ((rc = tensor__backend_check(be, !!be->conv2d, TENSOR__OP_CONV2D, out->dtype, e)) < 0)
        return rc;
    return be->conv2d(out, x, w, bias, o, e);
}

int tensor_conv2d_up2(struct tensor *out, const struct tensor *x, const struct tensor *w,
                      const struct tensor *bias, const struct tensor_conv2d_opts *o,
                      struct err *e)
{
    const struct tensor__backend *be;
    int rc;
    if ((rc = conv2d_check("conv2d_up2", out, x, w, bias, o, 2, &be, e)) < 0)
        return rc;
    if (!be->conv2d_up2)
        return tensor__conv2d_up2_unfused(out, x, w, bias, o, e);
    if ((rc = tensor__backend_check(be, 1, TENSOR__OP_CONV2D, out->dtype, e)) < 0)
        return rc;
    return be->conv2d_up2(out, x, w, bias, o, e);
}

int tensor__conv2d_up2_unfused(struct tensor *out, const struct tensor *x,
                               const struct tensor *w, const struct tensor *bias,
                               const struct tensor_conv2d_opts *o, struct err *e)
{
    struct tensor *u = NULL;
    int64_t us[4] = {x->shape[0], x->shape[1], 2 * x->shape[2], 2 * x->shape[3]};
    int rc;
    if ((rc = tensor_new(out->_storage->dev, x->dtype, 4, us, &u, e)) < 0)
        return rc;
    if ((rc = tensor_upsample_nearest(u, x, e)) >= 0)
        rc = tensor_conv2d(out, u, w, bias, o, e);
    tensor_free(u);
    return rc;
}

int tensor_conv2d_gn(struct tensor *out, const struct tensor *x, const struct tensor_gn_opts *gn,
                     const struct tensor *w, const struct tensor *bias,
                     const struct tensor_conv2d_opts *o, struct err *e)
{
    char b1[96];
    const struct tensor__backend *be;
    int rc;
    if ((rc = conv2d_check("conv2d_gn", out, x, w, bias, o, 1, &be, e)) < 0)
        return rc;
    if (!gn)
        return err_set(e, ERR_INVALID, "conv2d_gn: no group norm options");
    if ((rc = check_devs("conv2d_gn", e, &be, 2, 4, out, x, gn->gamma, gn->beta)) < 0)
        return rc;
    int64_t c = x->shape[1];
    if (gn->groups < 1 || c % gn->groups || (gn->gamma && tensor_numel(gn->gamma) != c) ||
        (gn->beta && tensor_numel(gn->beta) != c) || !(gn->eps >= 0))
        return err_set(e, ERR_INVALID, "conv2d_gn: %d groups over %s", gn->groups, shp(x, b1));
    if (!be->conv2d_gn)
        return tensor__conv2d_gn_unfused(out, x, gn, w, bias, o, e);
    if ((rc = tensor__backend_check(be, 1, TENSOR__OP_CONV2D, out->dtype, e)) < 0)
        return rc;
    return be->conv2d_gn(out, x, gn, w, bias, o, e);
}

int tensor__conv2d_gn_unfused(struct tensor *out, const struct tensor *x,
                              const struct tensor_gn_opts *gn, const struct tensor *w,
                              const struct tensor *bias, const struct tensor_conv2d_opts *o,
                              struct err *e)
{
    struct tensor *g = NULL;
    int rc;
    if ((rc = tensor_new(out->_storage->dev, x->dtype, x->ndim, x->shape, &g, e)) < 0)
        return rc;
    if ((rc = tensor_group_norm(g, x, gn->groups, gn->gamma, gn->beta, gn->eps, gn->silu, e)) >=
        0)
        rc = tensor_conv2d(out, g, w, bias, o, e);
    tensor_free(g);
    return rc;
}

/* ---- attention ---------------------------------------------------------------------------- */

int tensor_attention(struct tensor *out, const struct tensor *q, const struct tensor *k,
                     const struct tensor *v, int heads, float scale, unsigned flags,
                     struct err *e)
{
    char b1[96], b2[96], b3[96], b4[96];
    const struct tensor__backend *be;
    int rc;
    if ((rc = check_devs("attention", e, &be, 4, 4, out, q, k, v)) < 0)
        return rc;
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || out->ndim != 3 || heads < 1)
        goto bad;
    int64_t bsz = q->shape[0], tq = q->shape[1], tk = k->shape[1];
    if (k->shape[0] != bsz || v->shape[0] != bsz || out->shape[0] != bsz ||
        v->shape[1] != tk || out->shape[1] != tq || q->shape[2] % heads ||
        k->shape[2] != q->shape[2] || v->shape[2] % heads || out->shape[2] != v->shape[2])
        goto bad;
    if ((flags & TENSOR_ATTN_CAUSAL) && tk != tq)
        goto bad;
    int64_t d = q->shape[2] / heads;
    if (scale == 0.0f)
        scale = 1.0f / sqrtf((float)d);
    if ((rc = tensor__backend_check(be, !!be->attention, TENSOR__OP_ATTENTION, out->dtype, e)) < 0)
        return rc;
    return be->attention(out, q, k, v, heads, scale, flags, e);
bad:
    return err_set(e, ERR_INVALID, "attention: q %s, k %s, v %s (%d heads) into %s",
                   shp(q, b1), shp(k, b2), shp(v, b3), heads, shp(out, b4));
}
