/*
 * ops_linalg.c — matmul, linear, conv2d and attention entry points (checks, then the CPU GEMM
 * path or the CUDA backend).
 */
#include "dispatch_impl.h"

/* ---- matmul / linear --------------------------------------------------------------------- */

/* A matrix operand for sgemm: pointer, leading dim, transposed flag, batch strides. */
struct mat {
    const float *p;
    int64_t ld;
    int trans;
    int64_t bs[2], bn[2]; /* batch strides and sizes (right-aligned to 2 batch dims) */
    struct hbuf h;
};

static void mat_setup(struct mat *m, const struct tensor *t, int trans)
{
    int nd = t->ndim;
    int64_t r = t->shape[nd - 2], c = t->shape[nd - 1];
    int64_t sr = t->stride[nd - 2], sc = t->stride[nd - 1];
    int usable = t->dtype == TENSOR_F32 &&
                 ((sc == 1 && (sr >= c || r == 1)) || (sr == 1 && (sc >= r || c == 1)));
    int64_t st[TENSOR_MAX_DIMS];
    if (usable) {
        m->h.p = (float *)tensor__ptr(t);
        m->h.owned = 0;
        for (int i = 0; i < nd; i++)
            st[i] = t->stride[i];
        if (sc == 1 && (sr >= c || r == 1)) {
            m->ld = r == 1 ? c : sr;
            m->trans = trans;
        } else {
            m->ld = c == 1 ? r : sc;
            m->trans = !trans;
        }
    } else {
        hin(t, &m->h);
        tensor__contig_strides(nd, t->shape, st);
        m->ld = c;
        m->trans = trans;
    }
    if (m->ld < 1)
        m->ld = 1;
    m->p = m->h.p;
    for (int i = 0; i < 2; i++) {
        int d = nd - 4 + i; /* batch dim i of 2, right-aligned */
        m->bn[i] = d >= 0 ? t->shape[d] : 1;
        m->bs[i] = d >= 0 ? st[d] : 0;
    }
}

int tensor_matmul(struct tensor *out, const struct tensor *a, const struct tensor *b,
                  int trans_a, int trans_b, float alpha, struct err *e)
{
    char b1[96], b2[96], b3[96];
    int cuda, rc;
    if ((rc = check_devs("matmul", e, &cuda, 3, 3, out, a, b)) < 0)
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
    if (cuda)
        CUDA_OR(tensor__cuda_matmul(out, a, b, trans_a, trans_b, alpha, e));
    double pt0 = tensor__prof_t0();
    struct mat ma, mb;
    mat_setup(&ma, a, trans_a);
    mat_setup(&mb, b, trans_b);
    struct hbuf ho;
    float *po;
    int64_t ldo, os[2];
    /* The result is written in place when contiguous f32, else via a temporary. */
    po = hout(out, &ho);
    ldo = n;
    os[1] = m * n;
    os[0] = on[1] * m * n;
    for (int64_t i0 = 0; i0 < on[0]; i0++)
        for (int64_t i1 = 0; i1 < on[1]; i1++) {
            const float *pa = ma.p + (ma.bn[0] > 1 ? i0 * ma.bs[0] : 0) +
                              (ma.bn[1] > 1 ? i1 * ma.bs[1] : 0);
            const float *pb = mb.p + (mb.bn[0] > 1 ? i0 * mb.bs[0] : 0) +
                              (mb.bn[1] > 1 ? i1 * mb.bs[1] : 0);
            cpu_sgemm(ma.trans, mb.trans, m, n, k, alpha, pa, ma.ld, pb, mb.ld, 0.0f,
                      po + i0 * os[0] + i1 * os[1], ldo, 0);
        }
    hfree(&ma.h);
    hfree(&mb.h);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_MATMUL, pt0, 2.0 * (double)m * (double)n * (double)k *
                                                   (double)on[0] * (double)on[1]);
    return 0;
bad:
    return err_set(e, ERR_INVALID, "matmul: %s x %s%s%s into %s", shp(a, b1), shp(b, b2),
                   trans_a ? " (a^T)" : "", trans_b ? " (b^T)" : "", shp(out, b3));
}

int tensor_linear(struct tensor *out, const struct tensor *x, const struct tensor *w,
                  const struct tensor *bias, struct err *e)
{
    char b1[96], b2[96], b3[96];
    int cuda, rc;
    if ((rc = check_devs("linear", e, &cuda, 3, 4, out, x, w, bias)) < 0)
        return rc;
    int64_t k = x->shape[x->ndim - 1];
    if (w->ndim != 2 || w->shape[1] != k || out->shape[out->ndim - 1] != w->shape[0] ||
        rows_of(out) != rows_of(x) || (bias && tensor_numel(bias) != w->shape[0]))
        return err_set(e, ERR_INVALID, "linear: x %s, weight %s into %s", shp(x, b1),
                       shp(w, b2), shp(out, b3));
    if (cuda)
        CUDA_OR(tensor__cuda_linear(out, x, w, bias, e));
    double pt0 = tensor__prof_t0();
    int64_t rows = rows_of(x), n = w->shape[0];
    struct hbuf hx, hw, hb, ho;
    const float *px = hin(x, &hx), *pw = hin(w, &hw), *pb = hin(bias, &hb);
    float *po = hout(out, &ho);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++)
            po[r * n + j] = pb ? pb[j] : 0.0f;
    cpu_sgemm(0, 1, rows, n, k, 1.0f, px, k, pw, k, 1.0f, po, n, 0);
    hfree(&hx);
    hfree(&hw);
    hfree(&hb);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_LINEAR, pt0, 2.0 * (double)rows * (double)n * (double)k);
    return 0;
}

/*
 * Backends without a fused kernel: tensor_linear then tensor_geglu through a device
 * temporary, in LINEAR_GEGLU_CHUNKS row chunks so that the temporary is 2N/8 = N/4
 * floats per row, not 2N (sd15_unet_plan_bytes counts on that).
 */
#define LINEAR_GEGLU_CHUNKS 8
static int linear_geglu_chunked(struct tensor *out, const struct tensor *x, const struct tensor *w,
                                const struct tensor *bias, struct err *e)
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
    int cuda, rc;
    if ((rc = check_devs("linear_geglu", e, &cuda, 3, 4, out, x, w, bias)) < 0)
        return rc;
    int64_t k = x->shape[x->ndim - 1];
    if (w->ndim != 2 || w->shape[1] != k || w->shape[0] % 2 ||
        out->shape[out->ndim - 1] != w->shape[0] / 2 || rows_of(out) != rows_of(x) ||
        (bias && tensor_numel(bias) != w->shape[0]))
        return err_set(e, ERR_INVALID, "linear_geglu: x %s, weight %s into %s", shp(x, b1),
                       shp(w, b2), shp(out, b3));
    if (cuda || !cpu_linear_geglu_fused)
        return linear_geglu_chunked(out, x, w, bias, e);
    double pt0 = tensor__prof_t0();
    int64_t rows = rows_of(x), h = w->shape[0] / 2;
    struct hbuf hx, hw, hb, ho;
    const float *px = hin(x, &hx), *pw = hin(w, &hw), *pb = hin(bias, &hb);
    float *po = hout(out, &ho);
    cpu_linear_geglu(po, px, pw, pb, rows, k, h);
    hfree(&hx);
    hfree(&hw);
    hfree(&hb);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_LINEAR, pt0, 4.0 * (double)rows * (double)h * (double)k);
    return 0;
}

void tensor_conv2d_out_hw(const struct tensor_conv2d_opts *o, int64_t h, int64_t w, int64_t kh,
                          int64_t kw, int64_t *out_h, int64_t *out_w)
{
    int s = o->stride < 1 ? 1 : o->stride;
    int64_t hh = h + o->pad_top + o->pad_bottom - kh, ww = w + o->pad_left + o->pad_right - kw;
    *out_h = hh < 0 ? 0 : hh / s + 1;
    *out_w = ww < 0 ? 0 : ww / s + 1;
}

int tensor_conv2d(struct tensor *out, const struct tensor *x, const struct tensor *w,
                  const struct tensor *bias, const struct tensor_conv2d_opts *o, struct err *e)
{
    char b1[96], b2[96], b3[96];
    int cuda, rc;
    if ((rc = check_devs("conv2d", e, &cuda, 3, 4, out, x, w, bias)) < 0)
        return rc;
    if (!o)
        return err_set(e, ERR_INVALID, "conv2d: no options");
    if (o->stride < 1 || o->stride > 8 || o->pad_top < 0 || o->pad_bottom < 0 ||
        o->pad_left < 0 || o->pad_right < 0)
        return err_set(e, ERR_INVALID, "conv2d: stride %d or negative padding", o->stride);
    if (x->ndim != 4 || out->ndim != 4 || (w->ndim != 4 && w->ndim != 2))
        goto bad;
    int64_t co = w->shape[0], ci = w->shape[1];
    int64_t kh = w->ndim == 4 ? w->shape[2] : 1, kw = w->ndim == 4 ? w->shape[3] : 1;
    int64_t ho, wo;
    tensor_conv2d_out_hw(o, x->shape[2], x->shape[3], kh, kw, &ho, &wo);
    if (x->shape[1] != ci || out->shape[0] != x->shape[0] || out->shape[1] != co ||
        out->shape[2] != ho || out->shape[3] != wo || ho < 1 || wo < 1 ||
        (bias && tensor_numel(bias) != co))
        goto bad;
    if (cuda)
        CUDA_OR(tensor__cuda_conv2d(out, x, w, bias, o, e));
    double pt0 = tensor__prof_t0();
    struct hbuf hx, hw, hb, ho_;
    const float *px = hin(x, &hx), *pw = hin(w, &hw), *pb = hin(bias, &hb);
    float *po = hout(out, &ho_);
    cpu_conv2d(po, px, pw, pb, x->shape[0], ci, x->shape[2], x->shape[3], co, kh, kw, o);
    hfree(&hx);
    hfree(&hw);
    hfree(&hb);
    hout_done(out, &ho_);
    tensor__prof_end(kh * kw == 1 ? TENSOR__PROF_CONV1 : TENSOR__PROF_CONV3, pt0,
                     2.0 * (double)x->shape[0] * (double)co * (double)ci * (double)(kh * kw) *
                         (double)(ho * wo));
    return 0;
bad:
    return err_set(e, ERR_INVALID, "conv2d: x %s, weight %s into %s", shp(x, b1), shp(w, b2),
                   shp(out, b3));
}

/* ---- attention ---------------------------------------------------------------------------- */

/* Usable as [B, T, C] rows directly: f32, features contiguous, rows evenly strided. */
static int attn_direct(const struct tensor *t)
{
    return t->dtype == TENSOR_F32 && t->ndim == 3 && t->stride[2] == 1 &&
           t->stride[1] >= t->shape[2];
}

int tensor_attention(struct tensor *out, const struct tensor *q, const struct tensor *k,
                     const struct tensor *v, int heads, float scale, unsigned flags,
                     struct err *e)
{
    char b1[96], b2[96], b3[96], b4[96];
    int cuda, rc;
    if ((rc = check_devs("attention", e, &cuda, 4, 4, out, q, k, v)) < 0)
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
    int64_t d = q->shape[2] / heads, dv = v->shape[2] / heads;
    if (scale == 0.0f)
        scale = 1.0f / sqrtf((float)d);
    if (cuda)
        CUDA_OR(tensor__cuda_attention(out, q, k, v, heads, scale, flags, e));
    double pt0 = tensor__prof_t0();
    struct hbuf hq, hk, hv, ho;
    const float *pq, *pk, *pv;
    int64_t qs[2], ks[2], vs[2], os[2]; /* batch stride, row stride */
#define ATTN_IN(T, P, H, S)                                                                 \
    do {                                                                                    \
        if (attn_direct(T)) {                                                               \
            P = (const float *)tensor__ptr(T);                                              \
            H.owned = 0;                                                                    \
            S[0] = T->stride[0];                                                            \
            S[1] = T->stride[1];                                                            \
        } else {                                                                            \
            P = hin(T, &H);                                                                 \
            S[0] = T->shape[1] * T->shape[2];                                               \
            S[1] = T->shape[2];                                                             \
        }                                                                                   \
    } while (0)
    ATTN_IN(q, pq, hq, qs);
    ATTN_IN(k, pk, hk, ks);
    ATTN_IN(v, pv, hv, vs);
#undef ATTN_IN
    float *po;
    if (attn_direct(out)) {
        po = (float *)tensor__ptr(out);
        ho.owned = 0;
        ho.p = po;
        os[0] = out->stride[0];
        os[1] = out->stride[1];
    } else {
        po = hout(out, &ho);
        os[0] = tq * out->shape[2];
        os[1] = out->shape[2];
    }
    for (int64_t b = 0; b < bsz; b++)
        cpu_attention(po + b * os[0], os[1], pq + b * qs[0], qs[1], pk + b * ks[0], ks[1],
                      pv + b * vs[0], vs[1], tq, tk, heads, d, dv, scale,
                      !!(flags & TENSOR_ATTN_CAUSAL));
    hfree(&hq);
    hfree(&hk);
    hfree(&hv);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_ATTN, pt0,
                     2.0 * (double)bsz * heads * (double)tq * (double)tk * (double)(d + dv));
    return 0;
bad:
    return err_set(e, ERR_INVALID, "attention: q %s, k %s, v %s (%d heads) into %s",
                   shp(q, b1), shp(k, b2), shp(v, b3), heads, shp(out, b4));
}
