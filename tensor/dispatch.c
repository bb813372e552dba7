/*
 * dispatch.c — every public op: argument checks, then the one place where the
 * storage device's kind picks the backend (CPU kernels on host memory, i.e.
 * the cpu and sim devices; the CUDA backend on cuda devices).
 *
 * The CPU side adapts tensors to the kernels' contract (contiguous f32 host
 * buffers): an operand that already is one is used in place, anything else
 * (f16/bf16, strided views) goes through a temporary f32 copy, and a result
 * that cannot be written in place is computed into a temporary and scattered
 * back. Temporaries are host memory (xmalloc): on the sim device they are not
 * counted against its budget (they are workspace, like cuBLAS's).
 */
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "alloc.h"
#include "tensor_impl.h"

/* ---- helpers ------------------------------------------------------------------------- */

static int is_host(const struct tensor *t)
{
    struct dev *d = t->_storage->dev;
    return !d || dev_is_host(d);
}

static int is_f32_contig(const struct tensor *t)
{
    return t->dtype == TENSOR_F32 && tensor_is_contiguous(t);
}

struct hbuf {
    float *p;
    int owned;
};

/* A contiguous f32 copy of t (or t's own memory when it already is one). */
static const float *hin(const struct tensor *t, struct hbuf *h)
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
static float *hout(struct tensor *t, struct hbuf *h)
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

static void hfree(struct hbuf *h)
{
    if (h->owned)
        xfree_aligned(h->p);
    h->p = NULL;
    h->owned = 0;
}

static void hout_done(struct tensor *t, struct hbuf *h)
{
    if (h->owned)
        tensor__scatter_f32(t, h->p);
    hfree(h);
}

static const char *shp(const struct tensor *t, char *buf)
{
    return t ? tensor_shape_str(t, buf, 96) : "(null)";
}

/* The first nreq of the n tensors must be present; all present ones must be on one
 * device, whose kind is returned via *cuda. */
static int check_devs(const char *op, struct err *e, int *cuda, int nreq, int n, ...)
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

static int64_t rows_of(const struct tensor *t)
{
    return tensor_numel(t) / t->shape[t->ndim - 1];
}

/* ---- data movement --------------------------------------------------------------------- */

int tensor_copy(struct tensor *dst, const struct tensor *src, struct err *e)
{
    char b1[96], b2[96];
    int rc = 0;
    if (!dst || !src)
        return err_set(e, ERR_INVALID, "copy: missing tensor");
    if (tensor_numel(dst) != tensor_numel(src) || !tensor_same_shape(dst, src))
        return err_set(e, ERR_INVALID, "copy: shape %s into %s", shp(src, b1), shp(dst, b2));
    int hs = is_host(src), hd = is_host(dst);
    if (hs && hd) {
        if (src->dtype == dst->dtype && tensor_is_contiguous(src) && tensor_is_contiguous(dst)) {
            memmove(tensor__ptr(dst), tensor__ptr(src), tensor_nbytes(dst));
            return 0;
        }
        struct hbuf h;
        const float *p = hin(src, &h);
        tensor__scatter_f32(dst, p);
        hfree(&h);
        return 0;
    }
#ifdef TENSOR_HAVE_CUDA
    if (!hs && !hd) {
        if (src->_storage->dev != dst->_storage->dev)
            return err_set(e, ERR_UNSUPPORTED, "copy: between two CUDA devices");
        return tensor__cuda_copy(dst, src, e);
    }
    /* Host <-> device: move bytes of a contiguous tensor in the device-side dtype,
     * converting and re-laying out on whichever side is cheaper to stage. The compute
     * stream is drained first: dev_copy need not be ordered after the kernels queued
     * there (a non-blocking stream), and they may still read or write these bytes. */
    struct tensor *stage = NULL;
    {
        struct dev *cd = hd ? src->_storage->dev : dst->_storage->dev;
        if ((rc = dev_stream_sync(dev_compute_stream(cd))) < 0)
            return err_set(e, rc, "copy: cannot synchronise '%s'", dev_name(cd));
    }
    if (hd) { /* device -> host */
        const struct tensor *s = src;
        struct tensor *tmp = NULL;
        if (!tensor_is_contiguous(src)) {
            if ((rc = tensor_new_like(src, src->dtype, &tmp, e)) < 0)
                return rc;
            if ((rc = tensor__cuda_copy(tmp, src, e)) < 0)
                goto out_d2h;
            s = tmp;
        }
        if (dst->dtype == s->dtype && tensor_is_contiguous(dst)) {
            rc = dev_copy(s->_storage->dev, DEV_COPY_D2H, tensor__ptr(dst), tensor__ptr(s),
                          tensor_nbytes(s));
        } else {
            if ((rc = tensor__host_new(s->dtype, s->ndim, s->shape, &stage)) < 0)
                goto out_d2h;
            rc = dev_copy(s->_storage->dev, DEV_COPY_D2H, tensor__ptr(stage), tensor__ptr(s),
                          tensor_nbytes(s));
            if (rc >= 0)
                rc = tensor_copy(dst, stage, e);
        }
        if (rc < 0 && e && !e->code)
            err_set(e, rc, "copy: device to host failed");
    out_d2h:
        tensor_free(stage);
        tensor_free(tmp);
        return rc;
    }
    /* host -> device */
    struct tensor *tmp = NULL;
    struct tensor *d = dst;
    if (!tensor_is_contiguous(dst)) {
        if ((rc = tensor_new_like(dst, dst->dtype, &tmp, e)) < 0)
            return rc;
        d = tmp;
    }
    if (src->dtype == d->dtype && tensor_is_contiguous(src)) {
        rc = dev_copy(d->_storage->dev, DEV_COPY_H2D, tensor__ptr(d), tensor__ptr(src),
                      tensor_nbytes(src));
    } else {
        if ((rc = tensor__host_new(d->dtype, d->ndim, d->shape, &stage)) < 0)
            goto out_h2d;
        if ((rc = tensor_copy(stage, src, e)) < 0)
            goto out_h2d;
        rc = dev_copy(d->_storage->dev, DEV_COPY_H2D, tensor__ptr(d), tensor__ptr(stage),
                      tensor_nbytes(stage));
    }
    if (rc < 0) {
        err_set(e, rc, "copy: host to device failed");
        goto out_h2d;
    }
    if (tmp)
        rc = tensor__cuda_copy(dst, tmp, e);
out_h2d:
    tensor_free(stage);
    tensor_free(tmp);
    return rc;
#else
    (void)rc;
    return err_set(e, ERR_UNSUPPORTED, "copy: no CUDA backend in this build");
#endif
}

int tensor_write_f32(struct tensor *t, const float *src, int64_t n, struct err *e)
{
    if (!t || !src)
        return err_set(e, ERR_INVALID, "write: missing tensor or buffer");
    if (n != tensor_numel(t))
        return err_set(e, ERR_INVALID, "write: %lld values for %lld elements", (long long)n,
                       (long long)tensor_numel(t));
    if (is_host(t)) {
        tensor__scatter_f32(t, src);
        return 0;
    }
    struct tensor h;
    tensor__host_wrap(&h, (float *)src, t->ndim, t->shape);
    int rc = tensor_copy(t, &h, e);
    tensor__host_unwrap(&h);
    return rc;
}

int tensor_read_f32(const struct tensor *t, float *dst, int64_t n, struct err *e)
{
    if (!t || !dst)
        return err_set(e, ERR_INVALID, "read: missing tensor or buffer");
    if (n != tensor_numel(t))
        return err_set(e, ERR_INVALID, "read: %lld values for %lld elements", (long long)n,
                       (long long)tensor_numel(t));
    if (is_host(t)) {
        tensor__gather_f32(dst, t);
        return 0;
    }
    struct tensor h;
    tensor__host_wrap(&h, dst, t->ndim, t->shape);
    int rc = tensor_copy(&h, t, e);
    tensor__host_unwrap(&h);
    return rc;
}

int tensor_fill(struct tensor *t, float value, struct err *e)
{
    int cuda, rc;
    if ((rc = check_devs("fill", e, &cuda, 1, 1, t)) < 0)
        return rc;
    if (cuda)
        CUDA_OR(tensor__cuda_fill(t, value, e));
    struct hbuf h;
    float *p = hout(t, &h);
    int64_t n = tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        p[i] = value;
    hout_done(t, &h);
    return 0;
}

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
    struct hbuf hx, hw, hb, ho_;
    const float *px = hin(x, &hx), *pw = hin(w, &hw), *pb = hin(bias, &hb);
    float *po = hout(out, &ho_);
    cpu_conv2d(po, px, pw, pb, x->shape[0], ci, x->shape[2], x->shape[3], co, kh, kw, o);
    hfree(&hx);
    hfree(&hw);
    hfree(&hb);
    hout_done(out, &ho_);
    return 0;
bad:
    return err_set(e, ERR_INVALID, "conv2d: x %s, weight %s into %s", shp(x, b1), shp(w, b2),
                   shp(out, b3));
}

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
    int64_t n = x->shape[0], hw = tensor_numel(x) / (n * c);
    struct hbuf hx, hg, hb, ho;
    const float *px = hin(x, &hx), *pg = hin(gamma, &hg), *pb = hin(beta, &hb);
    float *po = hout(out, &ho);
    cpu_group_norm(po, px, n, c, hw, groups, pg, pb, eps, fuse_silu);
    hfree(&hx);
    hfree(&hg);
    hfree(&hb);
    hout_done(out, &ho);
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
    struct hbuf hx, hg, hb, ho;
    const float *px = hin(x, &hx), *pg = hin(gamma, &hg), *pb = hin(beta, &hb);
    float *po = hout(out, &ho);
    cpu_layer_norm(po, px, rows_of(x), c, pg, pb, eps);
    hfree(&hx);
    hfree(&hg);
    hfree(&hb);
    hout_done(out, &ho);
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
    struct hbuf hx, ho;
    const float *px = hin(x, &hx);
    float *po = hout(out, &ho);
    cpu_geglu(po, px, rows_of(x), c2 / 2);
    hfree(&hx);
    hout_done(out, &ho);
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
    return 0;
bad:
    return err_set(e, ERR_INVALID, "attention: q %s, k %s, v %s (%d heads) into %s",
                   shp(q, b1), shp(k, b2), shp(v, b3), heads, shp(out, b4));
}

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
#ifdef TENSOR_HAVE_CUDA
    tensor__cuda_shutdown();
#endif
}
