/*
 * ops_elem.c — elementwise, shape and embedding entry points (check, then the backend's
 * member); tensor_shutdown.
 */
#include "dispatch_impl.h"

/* ---- elementwise -------------------------------------------------------------------------- */

/* Broadcast strides of t (contiguous, its own shape) against out's 4-D shape, or -1. */
static int bcast_strides(const struct tensor *t, const int64_t *osh, int ond, int64_t *st)
{
    int64_t sh[4], cs[4];
    if (t->ndim > ond)
        return -1;
    int pad = 4 - t->ndim;
    for (int i = 0; i < 4; i++)
        sh[i] = i < pad ? 1 : t->shape[i - pad];
    tensor__contig_strides(4, sh, cs);
    for (int i = 0; i < 4; i++) {
        if (sh[i] == osh[i])
            st[i] = sh[i] == 1 ? 0 : cs[i];
        else if (sh[i] == 1)
            st[i] = 0;
        else
            return -1;
    }
    return 0;
}

static int binary(const char *op, struct tensor *out, const struct tensor *a,
                  const struct tensor *b, int mul, struct err *e)
{
    char b1[96], b2[96], b3[96];
    const struct tensor__backend *be;
    int rc;
    struct tensor__bcast bc;
    int64_t ost[4];
    if ((rc = check_devs(op, e, &be, 3, 3, out, a, b)) < 0)
        return rc;
    tensor__as4d(out, bc.shape, ost);
    if (bcast_strides(a, bc.shape, out->ndim, bc.stride_a) < 0 ||
        bcast_strides(b, bc.shape, out->ndim, bc.stride_b) < 0)
        return err_set(e, ERR_INVALID, "%s: cannot broadcast %s and %s to %s", op, shp(a, b1),
                       shp(b, b2), shp(out, b3));
    if ((rc = tensor__backend_check(be, !!be->binary, TENSOR__OP_BINARY, out->dtype, e)) < 0)
        return rc;
    return be->binary(out, a, b, &bc, mul, e);
}

int tensor_add(struct tensor *out, const struct tensor *a, const struct tensor *b, struct err *e)
{
    return binary("add", out, a, b, 0, e);
}

int tensor_mul(struct tensor *out, const struct tensor *a, const struct tensor *b, struct err *e)
{
    return binary("mul", out, a, b, 1, e);
}

int tensor_lincomb(struct tensor *out, int n, const float *coef, const struct tensor *const *in,
                   struct err *e)
{
    char b1[96], b2[96];
    const struct tensor__backend *be = NULL;
    int rc;
    if (n < 1 || n > 8 || !coef || !in)
        return err_set(e, ERR_INVALID, "lincomb: %d inputs (1..8)", n);
    for (int i = 0; i < n; i++) {
        if ((rc = check_devs("lincomb", e, &be, 2, 2, out, in[i])) < 0)
            return rc;
        if (!tensor_same_shape(out, in[i]))
            return err_set(e, ERR_INVALID, "lincomb: input %d %s into %s", i, shp(in[i], b1),
                           shp(out, b2));
    }
    if ((rc = tensor__backend_check(be, !!be->lincomb, TENSOR__OP_LINCOMB, out->dtype, e)) < 0)
        return rc;
    return be->lincomb(out, n, coef, in, e);
}

int tensor_axpby(struct tensor *out, float alpha, const struct tensor *x, float beta,
                 const struct tensor *y, struct err *e)
{
    const struct tensor *in[2] = {x, y};
    float coef[2] = {alpha, beta};
    return tensor_lincomb(out, 2, coef, in, e);
}

/* ---- shape ops ---------------------------------------------------------------------------- */

int tensor_concat(struct tensor *out, const struct tensor *a, const struct tensor *b, int dim,
                  struct err *e)
{
    char b1[96], b2[96], b3[96];
    const struct tensor__backend *be;
    int rc;
    if ((rc = check_devs("concat", e, &be, 3, 3, out, a, b)) < 0)
        return rc;
    int ok = a->ndim == b->ndim && a->ndim == out->ndim && dim >= 0 && dim < a->ndim;
    for (int i = 0; ok && i < a->ndim; i++)
        ok = i == dim ? out->shape[i] == a->shape[i] + b->shape[i]
                      : (a->shape[i] == b->shape[i] && out->shape[i] == a->shape[i]);
    if (!ok)
        return err_set(e, ERR_INVALID, "concat: %s and %s along dim %d into %s", shp(a, b1),
                       shp(b, b2), dim, shp(out, b3));
    /* Two slice views of out and two copies: works on every backend and dtype. */
    struct tensor *va = NULL, *vb = NULL;
    if ((rc = tensor_slice(out, dim, 0, a->shape[dim], &va, e)) < 0)
        goto out;
    if ((rc = tensor_slice(out, dim, a->shape[dim], b->shape[dim], &vb, e)) < 0)
        goto out;
    if ((rc = tensor_copy(va, a, e)) < 0)
        goto out;
    rc = tensor_copy(vb, b, e);
out:
    tensor_free(va);
    tensor_free(vb);
    return rc;
}

int tensor_upsample_nearest(struct tensor *out, const struct tensor *x, struct err *e)
{
    char b1[96], b2[96];
    const struct tensor__backend *be;
    int rc;
    if ((rc = check_devs("upsample", e, &be, 2, 2, out, x)) < 0)
        return rc;
    if (x->ndim != 4 || out->ndim != 4 || out->shape[0] != x->shape[0] ||
        out->shape[1] != x->shape[1])
        return err_set(e, ERR_INVALID, "upsample: %s into %s", shp(x, b1), shp(out, b2));
    if ((rc = tensor__backend_check(be, !!be->upsample, TENSOR__OP_UPSAMPLE, out->dtype, e)) < 0)
        return rc;
    return be->upsample(out, x, e);
}

static int pixel_shuffle(const char *op, struct tensor *out, const struct tensor *x, int r,
                         int inverse, struct err *e)
{
    char b1[96], b2[96];
    const struct tensor__backend *be;
    int rc;
    if ((rc = check_devs(op, e, &be, 2, 2, out, x)) < 0)
        return rc;
    /* (big, small): the r x r side and the side with r*r times the channels. */
    const struct tensor *big = inverse ? x : out, *small = inverse ? out : x;
    int ok = r >= 1 && r <= 64 && x->ndim == 4 && out->ndim == 4 &&
             out->shape[0] == x->shape[0] && small->shape[1] == big->shape[1] * r * r;
    if (ok && inverse)
        ok = out->shape[2] == (x->shape[2] + r - 1) / r && out->shape[3] == (x->shape[3] + r - 1) / r;
    else if (ok)
        ok = out->shape[2] == x->shape[2] * r && out->shape[3] == x->shape[3] * r;
    if (!ok)
        return err_set(e, ERR_INVALID, "%s: factor %d, %s into %s", op, r, shp(x, b1),
                       shp(out, b2));
    if ((rc = tensor__backend_check(be, !!be->pixel_shuffle, TENSOR__OP_PIXEL_SHUFFLE,
                                    out->dtype, e)) < 0)
        return rc;
    return be->pixel_shuffle(out, x, r, inverse, e);
}

int tensor_pixel_shuffle(struct tensor *out, const struct tensor *x, int r, struct err *e)
{
    return pixel_shuffle("pixel_shuffle", out, x, r, 0, e);
}

int tensor_pixel_unshuffle(struct tensor *out, const struct tensor *x, int r, struct err *e)
{
    return pixel_shuffle("pixel_unshuffle", out, x, r, 1, e);
}

void tensor__nearest_map(int64_t *map, int64_t in, int64_t out)
{
    /* PyTorch's 'nearest': scale computed in float32, src = min(floor(dst * scale), in-1). */
    float scale = (float)in / (float)out;
    for (int64_t d = 0; d < out; d++) {
        int64_t s = (int64_t)floorf((float)d * scale);
        map[d] = s < in - 1 ? s : in - 1;
    }
}

/* ---- embeddings --------------------------------------------------------------------------- */

int tensor_embedding(struct tensor *out, const struct tensor *table, const int32_t *ids,
                     int64_t n, struct err *e)
{
    char b1[96], b2[96];
    const struct tensor__backend *be;
    int rc;
    if ((rc = check_devs("embedding", e, &be, 2, 2, out, table)) < 0)
        return rc;
    if (!ids || table->ndim != 2 || out->shape[out->ndim - 1] != table->shape[1] ||
        tensor_numel(out) != n * table->shape[1] || !tensor_is_contiguous(table))
        return err_set(e, ERR_INVALID, "embedding: %lld ids from table %s into %s",
                       (long long)n, shp(table, b1), shp(out, b2));
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= table->shape[0])
            return err_set(e, ERR_INVALID, "embedding: id %d outside the table (%lld rows)",
                           (int)ids[i], (long long)table->shape[0]);
    if ((rc = tensor__backend_check(be, !!be->embedding, TENSOR__OP_EMBEDDING, out->dtype, e)) < 0)
        return rc;
    return be->embedding(out, table, ids, n, e);
}

int tensor_timestep_embedding(struct tensor *out, const float *t, int64_t b, struct err *e)
{
    char b1[96];
    if (!out || !t || out->ndim != 2 || out->shape[0] != b || out->shape[1] % 2)
        return err_set(e, ERR_INVALID, "timestep_embedding: %lld steps into %s", (long long)b,
                       shp(out, b1));
    int64_t dim = out->shape[1], half = dim / 2;
    float *buf = xmalloc((size_t)(b * dim) * sizeof(float));
    /* sd15.md §3.2, computed in f32 like PyTorch: freq = exp(-ln(10000) * k / half). */
    for (int64_t k = 0; k < half; k++) {
        float freq = expf(-(float)log(10000.0) * (float)k / (float)half);
        for (int64_t i = 0; i < b; i++) {
            float a = t[i] * freq;
            buf[i * dim + k] = cosf(a);
            buf[i * dim + half + k] = sinf(a);
        }
    }
    int rc = tensor_write_f32(out, buf, b * dim, e);
    xfree(buf);
    return rc;
}

/* ---- runtime ------------------------------------------------------------------------------ */

void tensor_shutdown(void)
{
    tensor__backends_shutdown();
}
