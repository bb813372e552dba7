/*
 * ops_elem.c — elementwise, shape, embedding ops; workspace estimates; runtime.
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

struct bin_job {
    float *o;
    const float *a, *b;
    int64_t sh[4], sa[4], sb[4];
    int mul;
};

static void bin_task(void *ctx, int64_t beg, int64_t end, int tid)
{
    struct bin_job *j = ctx;
    int64_t n3 = j->sh[3];
    for (int64_t r = beg; r < end; r++) {
        int64_t i2 = r % j->sh[2], i1 = r / j->sh[2] % j->sh[1], i0 = r / (j->sh[2] * j->sh[1]);
        const float *a = j->a + i0 * j->sa[0] + i1 * j->sa[1] + i2 * j->sa[2];
        const float *b = j->b + i0 * j->sb[0] + i1 * j->sb[1] + i2 * j->sb[2];
        float *o = j->o + r * n3;
        int64_t a3 = j->sa[3], b3 = j->sb[3];
        if (j->mul) {
            if (a3 && b3)
                for (int64_t i = 0; i < n3; i++) o[i] = a[i] * b[i];
            else
                for (int64_t i = 0; i < n3; i++) o[i] = a[i * a3] * b[i * b3];
        } else {
            if (a3 && b3)
                for (int64_t i = 0; i < n3; i++) o[i] = a[i] + b[i];
            else if (a3)
                for (int64_t i = 0; i < n3; i++) o[i] = a[i] + b[0];
            else
                for (int64_t i = 0; i < n3; i++) o[i] = a[i * a3] + b[i * b3];
        }
    }
}

static int binary(const char *op, struct tensor *out, const struct tensor *a,
                  const struct tensor *b, int mul, struct err *e)
{
    char b1[96], b2[96], b3[96];
    int cuda, rc;
    int64_t osh[4], ost[4], sa[4], sb[4];
    if ((rc = check_devs(op, e, &cuda, 3, 3, out, a, b)) < 0)
        return rc;
    tensor__as4d(out, osh, ost);
    if (bcast_strides(a, osh, out->ndim, sa) < 0 || bcast_strides(b, osh, out->ndim, sb) < 0)
        return err_set(e, ERR_INVALID, "%s: cannot broadcast %s and %s to %s", op, shp(a, b1),
                       shp(b, b2), shp(out, b3));
    if (cuda)
        CUDA_OR(tensor__cuda_binary(out, a, b, mul, e));
    double pt0 = tensor__prof_t0();
    struct hbuf ha, hb, ho;
    const float *pa = hin(a, &ha), *pb = hin(b, &hb);
    float *po = hout(out, &ho);
    struct bin_job j = {po, pa, pb, {osh[0], osh[1], osh[2], osh[3]},
                        {sa[0], sa[1], sa[2], sa[3]}, {sb[0], sb[1], sb[2], sb[3]}, mul};
    int64_t rows = osh[0] * osh[1] * osh[2];
    if (tensor_numel(out) < 16384)
        bin_task(&j, 0, rows, 0);
    else
        tensor__pool_for(rows, bin_task, &j);
    hfree(&ha);
    hfree(&hb);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_BIN, pt0, 0);
    return 0;
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
    int cuda = 0, rc;
    if (n < 1 || n > 8 || !coef || !in)
        return err_set(e, ERR_INVALID, "lincomb: %d inputs (1..8)", n);
    for (int i = 0; i < n; i++) {
        if ((rc = check_devs("lincomb", e, &cuda, 2, 2, out, in[i])) < 0)
            return rc;
        if (!tensor_same_shape(out, in[i]))
            return err_set(e, ERR_INVALID, "lincomb: input %d %s into %s", i, shp(in[i], b1),
                           shp(out, b2));
    }
    if (cuda)
        CUDA_OR(tensor__cuda_lincomb(out, n, coef, in, e));
    struct hbuf h[8], ho;
    const float *p[8];
    for (int i = 0; i < n; i++)
        p[i] = hin(in[i], &h[i]);
    float *po = hout(out, &ho);
    cpu_lincomb(po, n, coef, p, tensor_numel(out));
    for (int i = 0; i < n; i++)
        hfree(&h[i]);
    hout_done(out, &ho);
    return 0;
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
    int cuda, rc;
    if ((rc = check_devs("concat", e, &cuda, 3, 3, out, a, b)) < 0)
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
    int cuda, rc;
    if ((rc = check_devs("upsample", e, &cuda, 2, 2, out, x)) < 0)
        return rc;
    if (x->ndim != 4 || out->ndim != 4 || out->shape[0] != x->shape[0] ||
        out->shape[1] != x->shape[1])
        return err_set(e, ERR_INVALID, "upsample: %s into %s", shp(x, b1), shp(out, b2));
    if (cuda)
        CUDA_OR(tensor__cuda_upsample(out, x, e));
    double pt0 = tensor__prof_t0();
    int64_t planes = x->shape[0] * x->shape[1];
    int64_t h = x->shape[2], w = x->shape[3], ho = out->shape[2], wo = out->shape[3];
    int64_t *sy = xmalloc((size_t)ho * sizeof(int64_t)), *sx = xmalloc((size_t)wo * sizeof(int64_t));
    tensor__nearest_map(sy, h, ho);
    tensor__nearest_map(sx, w, wo);
    struct hbuf hx, hO;
    const float *px = hin(x, &hx);
    float *po = hout(out, &hO);
    for (int64_t p = 0; p < planes; p++)
        for (int64_t y = 0; y < ho; y++) {
            const float *src = px + (p * h + sy[y]) * w;
            float *dst = po + (p * ho + y) * wo;
            for (int64_t i = 0; i < wo; i++)
                dst[i] = src[sx[i]];
        }
    xfree(sy);
    xfree(sx);
    hfree(&hx);
    hout_done(out, &hO);
    tensor__prof_end(TENSOR__PROF_UPSAMPLE, pt0, 0);
    return 0;
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
    int cuda, rc;
    if ((rc = check_devs("embedding", e, &cuda, 2, 2, out, table)) < 0)
        return rc;
    if (!ids || table->ndim != 2 || out->shape[out->ndim - 1] != table->shape[1] ||
        tensor_numel(out) != n * table->shape[1] || !tensor_is_contiguous(table))
        return err_set(e, ERR_INVALID, "embedding: %lld ids from table %s into %s",
                       (long long)n, shp(table, b1), shp(out, b2));
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= table->shape[0])
            return err_set(e, ERR_INVALID, "embedding: id %d outside the table (%lld rows)",
                           (int)ids[i], (long long)table->shape[0]);
    if (cuda)
        CUDA_OR(tensor__cuda_embedding(out, table, ids, n, e));
    int64_t dim = table->shape[1];
    size_t es = tensor_dtype_size(table->dtype);
    struct hbuf ho;
    float *po = hout(out, &ho);
    /* Convert only the rows used: the CLIP table is 49408 x 768, often f16. */
    for (int64_t i = 0; i < n; i++)
        tensor_convert_host(po + i * dim, TENSOR_F32,
                            tensor__ptr(table) + (size_t)ids[i] * (size_t)dim * es, table->dtype,
                            (size_t)dim);
    hout_done(out, &ho);
    return 0;
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

/* ---- workspace ---------------------------------------------------------------------------- */

size_t tensor_conv2d_workspace_bytes(enum dev_kind kind, enum tensor_dtype dt, int64_t ci,
                                     int64_t kh, int64_t kw, int64_t out_h, int64_t out_w,
                                     const struct tensor_conv2d_opts *o)
{
    if (kind != DEV_KIND_CUDA || !o)
        return 0;
    if (kh == 1 && kw == 1 && o->stride == 1 && !o->pad_top && !o->pad_left && !o->pad_bottom &&
        !o->pad_right)
        return 0;
    return (size_t)(ci * kh * kw * out_h * out_w) * tensor_dtype_size(dt);
}

size_t tensor_attention_workspace_bytes(enum dev_kind kind, enum tensor_dtype dt, int heads,
                                        int64_t tq, int64_t tk)
{
    if (kind != DEV_KIND_CUDA || heads < 1 || tq < 1 || tk < 1)
        return 0;
    int64_t chunk = tensor__cuda_attn_chunk(heads, tq, tk);
    return (size_t)(heads * chunk * tk) * (4 + tensor_dtype_size(dt));
}

/* ---- runtime ------------------------------------------------------------------------------ */

void tensor_shutdown(void)
{
    tensor__pool_shutdown();
    cpu_conv_dnnl_release();
#ifdef TENSOR_HAVE_CUDA
    tensor__cuda_shutdown();
#endif
}
