/*
 * op_linalg.c — the CPU backend's matmul, linear and conv2d: adapters to the GEMM
 * (gemm.c), the Linear and fused linear+geglu kernels (linear.c) and im2col/oneDNN conv
 * (conv.c).
 */
#include "adapt.h"
#include "cpu_backend.h"
#include "linear.h"
#include "../tensor_precision.h"

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
        cpu_widen_in(t, &m->h); /* an f16 weight, or hin() */
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

int tensor__cpu_matmul(struct tensor *out, const struct tensor *a, const struct tensor *b,
                       int trans_a, int trans_b, float alpha, struct err *e)
{
    int64_t m = trans_a ? a->shape[a->ndim - 1] : a->shape[a->ndim - 2];
    int64_t k = trans_a ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    int64_t n = trans_b ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
    int64_t on[2];
    for (int i = 0; i < 2; i++) {
        int d = out->ndim - 4 + i;
        on[i] = d >= 0 ? out->shape[d] : 1;
    }
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
    cpu_widen_done(&ma.h);
    cpu_widen_done(&mb.h);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_MATMUL, pt0, 2.0 * (double)m * (double)n * (double)k *
                                                   (double)on[0] * (double)on[1]);
    return 0;
}

struct bias_fill {
    float *y;
    const float *bias; /* NULL: zeros */
    int64_t n;
};

static void bias_fill_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    struct bias_fill *f = ctx;
    for (int64_t r = b; r < e; r++)
        for (int64_t j = 0; j < f->n; j++)
            f->y[r * f->n + j] = f->bias ? f->bias[j] : 0.0f;
}

/* Linear's fast path (linear.h): fp32 precision (bf16 finds its weight copy through
 * cpu_widen_in_gemm and cpu_sgemm), a 2-D contiguous weight, not switched off. */
static int linear_fast(const struct tensor *w)
{
    return cpu_linear_fast && tensor_precision_get() != TENSOR_PRECISION_BF16 && w->ndim == 2 &&
           tensor_is_contiguous(w);
}

int tensor__cpu_linear(struct tensor *out, const struct tensor *x, const struct tensor *w,
                       const struct tensor *bias, struct err *e)
{
    int64_t k = x->shape[x->ndim - 1];
    double pt0 = tensor__prof_t0();
    int64_t rows = cpu_rows_of(x), n = w->shape[0];
    struct hbuf hx, hw = {0}, hb, ho;
    const float *px = hin(x, &hx), *pb = hin(bias, &hb);
    float *po = hout(out, &ho);
    if (linear_fast(w)) {
        cpu_linear(po, px, w, pb, rows, k, n);
    } else if (cpu_linear_amx_ok(w, rows, 0)) {
        cpu_linear_amx(po, px, w, pb, rows, k, n, 0);
    } else if (cpu_linear_bf16v_ok(w, rows, 0)) {
        cpu_linear_bf16v(po, px, w, pb, rows, k, n, 0);
    } else { /* the reference (and bf16: cpu_sgemm finds the bound copy) */
        const float *pw = cpu_widen_in_gemm(w, &hw);
        /* the bias into y on every thread, not the executor alone (a pass over all of y,
         * 42 MB at 8192 x 1280; bench_ops --linear --bf16 showed no measurable change) */
        struct bias_fill bf = {po, pb, n};
        tensor__pool_for(rows, bias_fill_task, &bf);
        cpu_sgemm(0, 1, rows, n, k, 1.0f, px, k, pw, k, 1.0f, po, n, 0);
        cpu_widen_done(&hw);
    }
    hfree(&hx);
    hfree(&hb);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_LINEAR, pt0, 2.0 * (double)rows * (double)n * (double)k);
    return 0;
}

int tensor__cpu_linear_geglu(struct tensor *out, const struct tensor *x, const struct tensor *w,
                             const struct tensor *bias, struct err *e)
{
    if (!cpu_linear_geglu_fused)
        return tensor__linear_geglu_chunked(out, x, w, bias, e);
    int64_t k = x->shape[x->ndim - 1];
    double pt0 = tensor__prof_t0();
    int64_t rows = cpu_rows_of(x), h = w->shape[0] / 2;
    struct hbuf hx, hw = {0}, hb, ho;
    const float *px = hin(x, &hx), *pb = hin(bias, &hb);
    float *po = hout(out, &ho);
    if (linear_fast(w)) {
        cpu_linear_geglu_w(po, px, w, pb, rows, k, h);
    } else if (cpu_linear_amx_ok(w, rows, 1)) {
        cpu_linear_amx(po, px, w, pb, rows, k, 2 * h, 1);
    } else if (cpu_linear_bf16v_ok(w, rows, 1)) {
        cpu_linear_bf16v(po, px, w, pb, rows, k, 2 * h, 1);
    } else {
        cpu_linear_geglu(po, px, cpu_widen_in_gemm(w, &hw), pb, rows, k, h);
        cpu_widen_done(&hw);
    }
    hfree(&hx);
    hfree(&hb);
    hout_done(out, &ho);
    tensor__prof_end(TENSOR__PROF_LINEAR, pt0, 4.0 * (double)rows * (double)h * (double)k);
    return 0;
}

/* The weight as the Winograd kernels take it: in place at its stored dtype when it is
 * contiguous (they widen one output channel's kernels at a time), else an f32 image. */
static const void *wino_weight(const struct tensor *w, struct hbuf *h, enum tensor_dtype *dt)
{
    *h = (struct hbuf){0};
    if (tensor_is_contiguous(w)) {
        *dt = w->dtype;
        return tensor__ptr(w);
    }
    *dt = TENSOR_F32;
    return hin(w, h);
}

int tensor__cpu_conv2d(struct tensor *out, const struct tensor *x, const struct tensor *w,
                       const struct tensor *bias, const struct tensor_conv2d_opts *o,
                       struct err *e)
{
    int64_t co = w->shape[0], ci = w->shape[1];
    int64_t kh = w->ndim == 4 ? w->shape[2] : 1, kw = w->ndim == 4 ? w->shape[3] : 1;
    int64_t ho = out->shape[2], wo = out->shape[3];
    double pt0 = tensor__prof_t0();
    struct hbuf hx, hw, hb, ho_;
    const float *px = hin(x, &hx), *pb = hin(bias, &hb);
    float *po = hout(out, &ho_);
    int wino = cpu_conv2d_is_winograd(ci, co, kh, kw, ho, wo, o), done = 0;
    if (wino) {
        /* any precision: under bf16 Winograd rounds U itself (cpu_wino_bf16) */
        enum tensor_dtype wdt;
        const void *rw = wino_weight(w, &hw, &wdt);
        done = cpu_conv2d_winograd_gn(po, px, rw, wdt, pb, x->shape[0], ci, x->shape[2],
                                      x->shape[3], co, o, NULL, NULL, 0) == 0;
        hfree(&hw);
    }
    if (!done && tensor_is_contiguous(w) &&
        cpu_conv2d_amx_small(po, px, tensor__ptr(w), w->dtype, pb, x->shape[0], ci, x->shape[2],
                             x->shape[3], co, kh, kw, o) == 0)
        done = 1;
    if (!done && tensor_is_contiguous(w) &&
        cpu_conv2d_bf16v_small(po, px, tensor__ptr(w), w->dtype, pb, x->shape[0], ci, x->shape[2],
                               x->shape[3], co, kh, kw, o) == 0)
        done = 1;
    if (!done && tensor_precision_get() != TENSOR_PRECISION_BF16 && tensor_is_contiguous(w) &&
        cpu_conv2d_is_wn(x->shape[0], ci, co, kh, kw, ho, wo, o)) {
        cpu_conv2d_wn(po, px, tensor__ptr(w), w->dtype, pb, x->shape[0], ci, x->shape[2],
                      x->shape[3], co, kh, kw, o);
        done = 1;
    }
    if (!done) {
        /* bf16: every path but Winograd reads w only through cpu_sgemm, which finds the
         * weight's bf16 copy; Winograd (again, when it could not allocate above) reads
         * the f32 image */
        const float *pw = tensor_precision_get() != TENSOR_PRECISION_BF16 || wino
                              ? cpu_widen_in(w, &hw)
                              : cpu_widen_in_gemm(w, &hw);
        cpu_conv2d(po, px, pw, pb, x->shape[0], ci, x->shape[2], x->shape[3], co, kh, kw, o);
        cpu_widen_done(&hw);
    }
    hfree(&hx);
    hfree(&hb);
    hout_done(out, &ho_);
    tensor__prof_end(kh * kw == 1 ? TENSOR__PROF_CONV1 : TENSOR__PROF_CONV3, pt0,
                     2.0 * (double)x->shape[0] * (double)co * (double)ci * (double)(kh * kw) *
                         (double)(ho * wo));
    return 0;
}

/* Fused only where tensor__cpu_conv2d would take Winograd on the upsampled image (the
 * shapes it pays for; cpu_conv_winograd = 0 keeps the reference path), 3x3 pad 1: fp32
 * by wino_up2.c's phase form, bf16 by the bf16 Winograd reading x upsampled
 * (cpu_conv2d_winograd_up2x: the same numbers as the two ops, without the 2x tensor). */
int tensor__cpu_conv2d_up2(struct tensor *out, const struct tensor *x, const struct tensor *w,
                           const struct tensor *bias, const struct tensor_conv2d_opts *o,
                           struct err *e)
{
    int64_t co = w->shape[0], ci = w->shape[1];
    int64_t kh = w->ndim == 4 ? w->shape[2] : 1, kw = w->ndim == 4 ? w->shape[3] : 1;
    int64_t ho = out->shape[2], wo = out->shape[3];
    int pad1 = o->pad_top == 1 && o->pad_bottom == 1 && o->pad_left == 1 && o->pad_right == 1;
    if (!pad1 || !cpu_conv2d_is_winograd(ci, co, kh, kw, ho, wo, o))
        return tensor__conv2d_up2_unfused(out, x, w, bias, o, e);
    double pt0 = tensor__prof_t0();
    struct hbuf hx, hw, hb, ho_;
    enum tensor_dtype wdt;
    const float *px = hin(x, &hx), *pb = hin(bias, &hb);
    const void *rw = wino_weight(w, &hw, &wdt);
    float *po = hout(out, &ho_);
    int64_t n = x->shape[0], h = x->shape[2], wd = x->shape[3];
    int rc = tensor_precision_get() == TENSOR_PRECISION_BF16
                 ? cpu_conv2d_winograd_up2x(po, px, rw, wdt, pb, n, ci, h, wd, co)
                 : cpu_conv2d_up2_winograd(po, px, rw, wdt, pb, n, ci, h, wd, co);
    hfree(&hx);
    hfree(&hw);
    hfree(&hb);
    hout_done(out, &ho_);
    if (rc < 0)
        return tensor__conv2d_up2_unfused(out, x, w, bias, o, e);
    /* the direct form's FLOPs on the upsampled image, comparable with conv2d's */
    tensor__prof_end(TENSOR__PROF_CONV3, pt0,
                     2.0 * (double)x->shape[0] * (double)co * (double)ci * 9.0 *
                         (double)(ho * wo));
    return 0;
}

/* Fused where tensor__cpu_conv2d takes Winograd (3x3 stride 1, shapes that pay), fp32
 * and bf16 alike: the per-(image, channel) affine of cpu_group_norm_coefs is applied as
 * the Winograd input transform copies x, so the normalised tensor (128 MiB at the 512^2
 * decoder's last level) is never written, read back or page-faulted in. The values the
 * transform sees are the unfused GroupNorm's, bit for bit, in either precision (bf16
 * rounds V after the transform either way). */
int tensor__cpu_conv2d_gn(struct tensor *out, const struct tensor *x,
                          const struct tensor_gn_opts *gn, const struct tensor *w,
                          const struct tensor *bias, const struct tensor_conv2d_opts *o,
                          struct err *e)
{
    int64_t n = x->shape[0], co = w->shape[0], ci = w->shape[1];
    int64_t kh = w->ndim == 4 ? w->shape[2] : 1, kw = w->ndim == 4 ? w->shape[3] : 1;
    int64_t ho = out->shape[2], wo = out->shape[3], hw = x->shape[2] * x->shape[3];
    if (!cpu_conv2d_is_winograd(ci, co, kh, kw, ho, wo, o))
        return tensor__conv2d_gn_unfused(out, x, gn, w, bias, o, e);
    double pt0 = tensor__prof_t0();
    struct hbuf hx, hg, hbe, hw_, hb, ho_;
    const float *px = hin(x, &hx), *pg = hin(gn->gamma, &hg), *pbe = hin(gn->beta, &hbe);
    float *ab = xmalloc((size_t)(2 * n * ci) * sizeof(float));
    cpu_group_norm_coefs(ab, ab + n * ci, px, n, ci, hw, gn->groups, pg, pbe, gn->eps);
    enum tensor_dtype wdt;
    const void *rw = wino_weight(w, &hw_, &wdt);
    const float *pb = hin(bias, &hb);
    float *po = hout(out, &ho_);
    int rc = cpu_conv2d_winograd_gn(po, px, rw, wdt, pb, n, ci, x->shape[2], x->shape[3], co, o, ab,
                                    ab + n * ci, gn->silu);
    xfree(ab);
    hfree(&hx);
    hfree(&hg);
    hfree(&hbe);
    hfree(&hw_);
    hfree(&hb);
    hout_done(out, &ho_);
    if (rc < 0)
        return tensor__conv2d_gn_unfused(out, x, gn, w, bias, o, e);
    tensor__prof_end(TENSOR__PROF_CONV3, pt0,
                     2.0 * (double)n * (double)co * (double)ci * (double)(kh * kw) *
                         (double)(ho * wo));
    return 0;
}
