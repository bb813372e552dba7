/*
 * test_tensor_cpu — every tensor op on the CPU backend against a plain, obviously
 * correct reference written here (naive loops in double), on odd shapes, for
 * f32/f16/bf16 storage, strided views, every SIMD level, and tiles forced small
 * so that blocked code paths (conv chunks, attention key blocks) really run.
 */
#include <math.h>
#include <pthread.h>

#include "alloc.h"
#include "device.h"
#include "harness.h"
#include "tensor.h"
#include "tensor_impl.h"

static struct dev *D;
static const enum tensor_dtype DTS[3] = {TENSOR_F32, TENSOR_F16, TENSOR_BF16};
static uint64_t rng = 88172645463325252ull;

static float frand(void)
{
    return harness_frand(&rng);
}

/* A tensor of random values in [-a, a]; *vals (xmalloc) gets the values as stored. */
static struct tensor *mk(enum tensor_dtype dt, int nd, const int64_t *sh, float a, float **vals)
{
    struct tensor *t;
    if (tensor_new(D, dt, nd, sh, &t, NULL) < 0)
        PANIC("tensor_new failed");
    int64_t n = tensor_numel(t);
    float *v = xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        v[i] = frand() * a;
    tensor_write_f32(t, v, n, NULL);
    tensor_read_f32(t, v, n, NULL); /* the rounded values the op will see */
    if (vals)
        *vals = v;
    else
        xfree(v);
    return t;
}

static float *rd(const struct tensor *t)
{
    float *v = xmalloc((size_t)tensor_numel(t) * sizeof(float));
    tensor_read_f32(t, v, tensor_numel(t), NULL);
    return v;
}

/* Tolerance for results stored in dt (rounding of the output dominates). */
static double tol_of(enum tensor_dtype dt, double f32tol)
{
    return dt == TENSOR_F32 ? f32tol : dt == TENSOR_F16 ? 2e-3 : 1.6e-2;
}

/* max |got - ref| / max(1, max |ref|) <= tol */
static void close_enough(const char *what, enum tensor_dtype dt, const float *got,
                         const double *ref, int64_t n, double tol)
{
    double md = 0, mr = 1;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= md)) { /* also catches NaN */
            md = isnan(d) ? INFINITY : d;
            at = i;
        }
        if (fabs(ref[i]) > mr)
            mr = fabs(ref[i]);
    }
    ok(md / mr <= tol, "%s [%s]: max err %.3g (at %lld, got %g want %g), tol %.3g", what,
       tensor_dtype_name(dt), md / mr, (long long)at, n ? got[at] : 0.0, n ? ref[at] : 0.0, tol);
}

static void check(const char *what, const struct tensor *out, const double *ref, double f32tol)
{
    float *g = rd(out);
    close_enough(what, out->dtype, g, ref, tensor_numel(out), tol_of(out->dtype, f32tol));
    xfree(g);
}

/* ---- conversions, views, lifetime -------------------------------------------------------- */

static void test_convert(void)
{
    EXPECT_EQ(tensor_f32_to_f16(1.0f), 0x3c00);
    EXPECT_EQ(tensor_f32_to_f16(65504.0f), 0x7bff);
    EXPECT_EQ(tensor_f32_to_f16(65520.0f), 0x7c00);
    EXPECT_EQ(tensor_f32_to_f16(-2.0f), 0xc000);
    EXPECT_EQ(tensor_f32_to_f16(5.9604645e-8f), 0x0001); /* smallest subnormal */
    EXPECT_EQ(tensor_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie rounds to even */
    EXPECT_EQ(tensor_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);
    EXPECT_NEAR(tensor_f16_to_f32(0x3555), 0.33325195, 1e-8);
    EXPECT_NEAR(tensor_f16_to_f32(0x0001), 5.9604645e-8, 1e-15);
    EXPECT_EQ(tensor_f32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(tensor_f32_to_bf16(1.0f + 1.0f / 256), 0x3f80); /* tie to even */
    EXPECT_EQ(tensor_f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
    ok(isnan(tensor_f16_to_f32(tensor_f32_to_f16(NAN))), "f16 keeps NaN");
    ok(isnan(tensor_bf16_to_f32(tensor_f32_to_bf16(NAN))), "bf16 keeps NaN");
    /* bulk (F16C) path equals the scalar path on many values */
    enum { N = 1003 };
    float src[N], back[N];
    uint16_t h[N];
    int same = 1;
    for (int i = 0; i < N; i++)
        src[i] = frand() * (i % 7 == 0 ? 70000.0f : i % 5 == 0 ? 1e-6f : 3.0f);
    tensor_convert_host(h, TENSOR_F16, src, TENSOR_F32, N);
    for (int i = 0; i < N; i++)
        same &= h[i] == tensor_f32_to_f16(src[i]);
    ok(same, "bulk f32->f16 matches scalar rounding");
    tensor_convert_host(back, TENSOR_F32, h, TENSOR_F16, N);
    same = 1;
    for (int i = 0; i < N; i++)
        same &= back[i] == tensor_f16_to_f32(h[i]) || (isinf(back[i]) && isinf(tensor_f16_to_f32(h[i])));
    ok(same, "bulk f16->f32 matches scalar");
}

static void test_views(void)
{
    struct err e = {0};
    struct tensor *t, *r = NULL, *s = NULL, *p = NULL, *c = NULL;
    float *v;
    t = mk(TENSOR_F32, 3, (int64_t[]){2, 3, 4}, 1, &v);
    EXPECT_OK(tensor_reshape(t, 2, (int64_t[]){-1, 4}, &r, &e));
    EXPECT_EQ(r->shape[0], 6);
    EXPECT_OK(tensor_slice(t, 1, 1, 2, &s, &e)); /* [2,2,4] */
    EXPECT_OK(tensor_permute(t, (int[]){2, 0, 1}, &p, &e)); /* [4,2,3] */
    ok(!tensor_is_contiguous(p), "permuted view is not contiguous");
    EXPECT_EQ(tensor_reshape(p, 1, (int64_t[]){24}, &c, &e), ERR_INVALID);
    ok(e.msg[0] != 0, "reshape of a strided view explains: %s", e.msg);
    tensor_free(t); /* views keep the storage alive */
    float *sv = rd(s), *pv = rd(p);
    int good = 1;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 4; k++)
                good &= sv[(i * 2 + j) * 4 + k] == v[(i * 3 + j + 1) * 4 + k];
    ok(good, "slice reads the right elements");
    good = 1;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 2; b++)
            for (int cc = 0; cc < 3; cc++)
                good &= pv[(a * 2 + b) * 3 + cc] == v[(b * 3 + cc) * 4 + a];
    ok(good, "permute reads the right elements");
    /* copy a permuted f32 view into a contiguous bf16 and f16 tensor */
    for (int d = 1; d < 3; d++) {
        struct tensor *dst = NULL;
        tensor_new(D, DTS[d], 3, (int64_t[]){4, 2, 3}, &dst, NULL);
        EXPECT_OK(tensor_copy(dst, p, &e));
        double *ref = xmalloc(24 * sizeof(double));
        for (int i = 0; i < 24; i++)
            ref[i] = pv[i];
        check("copy permuted view", dst, ref, 0);
        xfree(ref);
        tensor_free(dst);
    }
    /* large permuted copies take the blocked-transpose path: [B, C, HW] -> [B, HW, C]
     * and a 4-D [2, 3, 67, 45] with its last two dims swapped */
    {
        float *bv;
        struct tensor *big = mk(TENSOR_F32, 3, (int64_t[]){2, 37, 301}, 1, &bv), *bp, *bo;
        tensor_permute(big, (int[]){0, 2, 1}, &bp, NULL);
        tensor_new(D, TENSOR_F32, 3, (int64_t[]){2, 301, 37}, &bo, NULL);
        EXPECT_OK(tensor_copy(bo, bp, &e));
        float *g = rd(bo);
        int same = 1;
        for (int b = 0; b < 2; b++)
            for (int i = 0; i < 301; i++)
                for (int ch = 0; ch < 37; ch++)
                    same &= g[(b * 301 + i) * 37 + ch] == bv[(b * 37 + ch) * 301 + i];
        ok(same, "blocked transpose [2,37,301] -> [2,301,37]");
        xfree(g);
        xfree(bv);
        tensor_free(big);
        tensor_free(bp);
        tensor_free(bo);
        big = mk(TENSOR_F32, 4, (int64_t[]){2, 3, 45, 67}, 1, &bv);
        tensor_permute(big, (int[]){0, 1, 3, 2}, &bp, NULL);
        tensor_new(D, TENSOR_F32, 4, (int64_t[]){2, 3, 67, 45}, &bo, NULL);
        EXPECT_OK(tensor_copy(bo, bp, &e));
        g = rd(bo);
        same = 1;
        for (int b = 0; b < 6; b++)
            for (int i = 0; i < 67; i++)
                for (int ch = 0; ch < 45; ch++)
                    same &= g[(b * 67 + i) * 45 + ch] == bv[(b * 45 + ch) * 67 + i];
        ok(same, "blocked transpose 4-D, last two dims");
        xfree(g);
        xfree(bv);
        tensor_free(big);
        tensor_free(bp);
        tensor_free(bo);
    }
    struct tensor *bad = NULL;
    EXPECT_EQ(tensor_slice(r, 0, 5, 2, &bad, &e), ERR_INVALID);
    EXPECT_EQ(tensor_new(D, TENSOR_F32, 5, (int64_t[]){1, 1, 1, 1, 1}, &bad, &e), ERR_INVALID);
    EXPECT_EQ(tensor_view(r, 1, (int64_t[]){25}, (int64_t[]){1}, 0, &bad, &e), ERR_INVALID);
    xfree(sv);
    xfree(pv);
    xfree(v);
    tensor_free(r);
    tensor_free(s);
    tensor_free(p);
}

static int released;

static void on_release(void *user, void *data)
{
    released += user == (void *)&released && data != NULL;
}

/* External memory (an mmap'd checkpoint): used in place, released once, after the last
 * view goes; and a copy from it to another (sim) device converts f16 -> f32. */
static void test_external(void)
{
    struct err e = {0};
    uint16_t raw[6];
    for (int i = 0; i < 6; i++)
        raw[i] = tensor_f32_to_f16((float)i - 2.5f);
    struct tensor *t = NULL, *v = NULL, *dst = NULL;
    struct dev *sim = NULL;
    EXPECT_OK(tensor_new_external(D, TENSOR_F16, 2, (int64_t[]){2, 3}, raw, on_release, &released,
                                  &t, &e));
    ok(tensor_data(t) == (void *)raw, "external tensor uses the caller's memory");
    EXPECT_OK(tensor_slice(t, 1, 1, 2, &v, &e));
    tensor_free(t);
    EXPECT_EQ(released, 0);
    dev_open("sim:1M", 0, &sim, &e);
    tensor_new(sim, TENSOR_F32, 2, (int64_t[]){2, 2}, &dst, &e);
    EXPECT_OK(tensor_copy(dst, v, &e));
    float got[4];
    tensor_read_f32(dst, got, 4, &e);
    ok(got[0] == -1.5f && got[1] == -0.5f && got[2] == 1.5f && got[3] == 2.5f,
       "copy of an f16 view to a sim f32 tensor (%g %g %g %g)", got[0], got[1], got[2], got[3]);
    tensor_free(v);
    EXPECT_EQ(released, 1);
    tensor_free(dst);
    EXPECT_EQ(dev_bytes_used(sim), 0);
    dev_close(sim);
}

static void test_budget(void)
{
    struct dev *sim = NULL;
    struct err e = {0};
    struct tensor *a = NULL, *b = NULL;
    if (dev_open("sim:4096", 0, &sim, &e) < 0) {
        ok(0, "open sim device: %s", e.msg);
        return;
    }
    EXPECT_OK(tensor_new(sim, TENSOR_F32, 1, (int64_t[]){768}, &a, &e));
    EXPECT_EQ(tensor_new(sim, TENSOR_F32, 1, (int64_t[]){512}, &b, &e), ERR_DEVICE_OOM);
    ok(b == NULL, "no tensor on OOM");
    tensor_free(a);
    EXPECT_EQ(dev_bytes_used(sim), 0);
    dev_close(sim);
}

/* ---- linear algebra ------------------------------------------------------------------ */

static void test_matmul(void)
{
    struct err e = {0};
    /* a [2,3,M,K] (or transposed), b [3,K,N] broadcast over dim 0 */
    const int64_t M = 7, K = 13, N = 5;
    for (int di = 0; di < 3; di++)
        for (int tr = 0; tr < 4; tr++) {
            int ta = tr & 1, tb = tr >> 1;
            float *va, *vb;
            struct tensor *a = mk(DTS[di], 4, ta ? (int64_t[]){2, 3, K, M} : (int64_t[]){2, 3, M, K}, 1, &va);
            struct tensor *b = mk(DTS[(di + 1) % 3], 3, tb ? (int64_t[]){3, N, K} : (int64_t[]){3, K, N}, 1, &vb);
            struct tensor *o;
            tensor_new(D, DTS[di], 4, (int64_t[]){2, 3, M, N}, &o, NULL);
            EXPECT_OK(tensor_matmul(o, a, b, ta, tb, 0.5f, &e));
            double *ref = xcalloc((size_t)(6 * M * N), sizeof(double));
            for (int bb = 0; bb < 6; bb++)
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        double s = 0;
                        for (int64_t k = 0; k < K; k++) {
                            double x = ta ? va[bb * K * M + k * M + i] : va[bb * M * K + i * K + k];
                            int bi = bb % 3;
                            double y = tb ? vb[bi * N * K + j * K + k] : vb[bi * K * N + k * N + j];
                            s += x * y;
                        }
                        ref[(bb * M + i) * N + j] = 0.5 * s;
                    }
            char what[64];
            snprintf(what, sizeof(what), "matmul ta=%d tb=%d", ta, tb);
            check(what, o, ref, 1e-5);
            xfree(ref);
            xfree(va);
            xfree(vb);
            tensor_free(a);
            tensor_free(b);
            tensor_free(o);
        }
    /* big enough (>= 4e6 flops) to be split into panels over the pool: by columns
     * (wide C) and by rows (tall C), with both transposes */
    for (int tall = 0; tall < 2; tall++)
        for (int tr = 0; tr < 4; tr += 3) {
            int ta = tr & 1, tb = tr >> 1;
            int64_t m2 = tall ? 611 : 37, n2 = tall ? 29 : 517, k2 = tall ? 230 : 260;
            float *va2, *vb2;
            struct tensor *a2 = mk(TENSOR_F32, 2, ta ? (int64_t[]){k2, m2} : (int64_t[]){m2, k2}, 1, &va2);
            struct tensor *b2 = mk(TENSOR_F32, 2, tb ? (int64_t[]){n2, k2} : (int64_t[]){k2, n2}, 1, &vb2);
            struct tensor *o3;
            tensor_new(D, TENSOR_F32, 2, (int64_t[]){m2, n2}, &o3, NULL);
            EXPECT_OK(tensor_matmul(o3, a2, b2, ta, tb, 1.0f, &e));
            double *ref = xmalloc((size_t)(m2 * n2) * sizeof(double));
            for (int64_t i = 0; i < m2; i++)
                for (int64_t j = 0; j < n2; j++) {
                    double s = 0;
                    for (int64_t k = 0; k < k2; k++)
                        s += (double)(ta ? va2[k * m2 + i] : va2[i * k2 + k]) *
                             (tb ? vb2[j * k2 + k] : vb2[k * n2 + j]);
                    ref[i * n2 + j] = s;
                }
            check(tall ? "matmul split by rows" : "matmul split by columns", o3, ref, 1e-5);
            xfree(ref);
            xfree(va2);
            xfree(vb2);
            tensor_free(a2);
            tensor_free(b2);
            tensor_free(o3);
        }
    /* a transposed *view* (stride trick) must match the explicit transpose flag */
    float *va;
    struct tensor *a = mk(TENSOR_F32, 2, (int64_t[]){K, M}, 1, &va), *at = NULL, *o, *o2;
    struct tensor *b = mk(TENSOR_F32, 2, (int64_t[]){K, N}, 1, NULL);
    tensor_permute(a, (int[]){1, 0}, &at, NULL);
    tensor_new(D, TENSOR_F32, 2, (int64_t[]){M, N}, &o, NULL);
    tensor_new(D, TENSOR_F32, 2, (int64_t[]){M, N}, &o2, NULL);
    EXPECT_OK(tensor_matmul(o, at, b, 0, 0, 1.0f, &e));
    EXPECT_OK(tensor_matmul(o2, a, b, 1, 0, 1.0f, &e));
    float *g1 = rd(o), *g2 = rd(o2);
    ok(memcmp(g1, g2, (size_t)(M * N) * sizeof(float)) == 0, "transposed view == trans flag");
    EXPECT_EQ(tensor_matmul(o, a, b, 0, 0, 1.0f, &e), ERR_INVALID);
    xfree(g1);
    xfree(g2);
    xfree(va);
    tensor_free(a);
    tensor_free(at);
    tensor_free(b);
    tensor_free(o);
    tensor_free(o2);
}

static void test_linear(void)
{
    struct err e = {0};
    const int64_t R = 11, K = 37, N = 19;
    for (int di = 0; di < 3; di++) {
        float *vx, *vw, *vb;
        struct tensor *x = mk(DTS[di], 3, (int64_t[]){1, R, K}, 1, &vx);
        struct tensor *w = mk(DTS[(di + 2) % 3], 2, (int64_t[]){N, K}, 1, &vw);
        struct tensor *b = mk(DTS[di], 1, (int64_t[]){N}, 1, &vb);
        struct tensor *o;
        tensor_new(D, DTS[di], 3, (int64_t[]){1, R, N}, &o, NULL);
        EXPECT_OK(tensor_linear(o, x, w, b, &e));
        double *ref = xmalloc((size_t)(R * N) * sizeof(double));
        for (int64_t r = 0; r < R; r++)
            for (int64_t j = 0; j < N; j++) {
                double s = vb[j];
                for (int64_t k = 0; k < K; k++)
                    s += (double)vx[r * K + k] * vw[j * K + k];
                ref[r * N + j] = s;
            }
        check("linear", o, ref, 1e-5);
        EXPECT_EQ(tensor_linear(o, x, b, NULL, &e), ERR_INVALID);
        EXPECT_EQ(tensor_linear(o, NULL, w, b, &e), ERR_INVALID); /* never a crash */
        EXPECT_EQ(tensor_conv2d(o, x, w, b, NULL, &e), ERR_INVALID);
        xfree(ref);
        xfree(vx);
        xfree(vw);
        xfree(vb);
        tensor_free(x);
        tensor_free(w);
        tensor_free(b);
        tensor_free(o);
    }
}

static void conv_case(enum tensor_dtype dt, int64_t n, int64_t ci, int64_t h, int64_t w,
                      int64_t co, int64_t k, struct tensor_conv2d_opts o, int w2d,
                      const char *what)
{
    struct err e = {0};
    float *vx, *vw, *vb;
    int64_t ho, wo;
    tensor_conv2d_out_hw(&o, h, w, k, k, &ho, &wo);
    struct tensor *x = mk(dt, 4, (int64_t[]){n, ci, h, w}, 1, &vx);
    struct tensor *wt = w2d ? mk(dt, 2, (int64_t[]){co, ci}, 1, &vw)
                            : mk(dt, 4, (int64_t[]){co, ci, k, k}, 1, &vw);
    struct tensor *b = mk(dt, 1, (int64_t[]){co}, 1, &vb);
    struct tensor *out;
    tensor_new(D, dt, 4, (int64_t[]){n, co, ho, wo}, &out, NULL);
    int rc = tensor_conv2d(out, x, wt, b, &o, &e);
    ok(rc == 0, "%s runs (%s)", what, e.msg);
    double *ref = xmalloc((size_t)(n * co * ho * wo) * sizeof(double));
    for (int64_t b0 = 0; b0 < n; b0++)
        for (int64_t c = 0; c < co; c++)
            for (int64_t y = 0; y < ho; y++)
                for (int64_t xx = 0; xx < wo; xx++) {
                    double s = vb[c];
                    for (int64_t cc = 0; cc < ci; cc++)
                        for (int64_t ky = 0; ky < k; ky++)
                            for (int64_t kx = 0; kx < k; kx++) {
                                int64_t iy = y * o.stride - o.pad_top + ky;
                                int64_t ix = xx * o.stride - o.pad_left + kx;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= w)
                                    continue;
                                s += (double)vx[((b0 * ci + cc) * h + iy) * w + ix] *
                                     vw[((c * ci + cc) * k + ky) * k + kx];
                            }
                    ref[((b0 * co + c) * ho + y) * wo + xx] = s;
                }
    check(what, out, ref, 1e-5);
    xfree(ref);
    xfree(vx);
    xfree(vw);
    xfree(vb);
    tensor_free(x);
    tensor_free(wt);
    tensor_free(b);
    tensor_free(out);
}

static void test_conv(void)
{
    struct tensor_conv2d_opts p1 = {1, 1, 1, 1, 1}, s2 = {2, 1, 1, 1, 1},
                              vae = {2, 0, 1, 0, 1}, none = {1, 0, 0, 0, 0};
    for (int di = 0; di < 3; di++) {
        conv_case(DTS[di], 2, 3, 9, 7, 5, 3, p1, 0, "conv 3x3 pad 1");
        conv_case(DTS[di], 1, 4, 9, 7, 6, 3, s2, 0, "conv 3x3 stride 2 pad 1 (unet down)");
        conv_case(DTS[di], 2, 3, 8, 10, 4, 3, vae, 0, "conv 3x3 stride 2 pad br (vae down)");
        conv_case(DTS[di], 2, 5, 6, 3, 7, 1, none, 0, "conv 1x1");
        conv_case(DTS[di], 1, 5, 4, 5, 3, 1, none, 1, "conv 1x1, 2-D weight");
    }
    size_t saved = cpu_conv_cols_bytes;
    cpu_conv_cols_bytes = 3 * 9 * 7 * 4 * 2; /* two output rows per chunk, ragged last */
    conv_case(TENSOR_F32, 2, 3, 11, 7, 5, 3, p1, 0, "conv 3x3 in row chunks");
    /* a 1x1 conv over images large enough for column chunks per pool task (conv.c's
     * pw_task): 256 columns each (the minimum), ragged last, both images */
    cpu_conv_cols_bytes = 16;
    conv_case(TENSOR_F32, 2, 6, 27, 25, 5, 1, none, 0, "conv 1x1 in column chunks");
    cpu_conv_cols_bytes = saved;
    /* oneDNN's convolution primitive, switched on (with a oneDNN build; else these run im2col),
     * forced for small shapes, then the default choice at 20x20 = 400 px per image */
    int64_t saved_px = cpu_conv_dnnl_min_px;
    int saved_on = cpu_conv_dnnl_on;
    cpu_conv_dnnl_on = 1;
    cpu_conv_dnnl_min_px = 0;
    conv_case(TENSOR_F32, 2, 3, 9, 7, 5, 3, p1, 0, "conv 3x3 pad 1 (onednn conv)");
    conv_case(TENSOR_F32, 1, 4, 9, 7, 6, 3, s2, 0, "conv 3x3 stride 2 pad 1 (onednn conv)");
    conv_case(TENSOR_F32, 2, 3, 8, 10, 4, 3, vae, 0, "conv 3x3 stride 2 pad br (onednn conv)");
    cpu_conv_dnnl_min_px = saved_px;
    conv_case(TENSOR_F32, 2, 4, 20, 20, 6, 3, p1, 0, "conv 3x3 20x20 (onednn at the default size)");
    cpu_conv_dnnl_min_px = INT64_MAX;
    conv_case(TENSOR_F32, 2, 4, 20, 20, 6, 3, p1, 0, "conv 3x3 20x20 (im2col)");
    cpu_conv_dnnl_min_px = saved_px;
    cpu_conv_dnnl_on = saved_on;
    struct err e = {0};
    struct tensor *x = mk(TENSOR_F32, 4, (int64_t[]){1, 3, 4, 4}, 1, NULL);
    struct tensor *w = mk(TENSOR_F32, 4, (int64_t[]){2, 4, 3, 3}, 1, NULL), *o;
    tensor_new(D, TENSOR_F32, 4, (int64_t[]){1, 2, 4, 4}, &o, NULL);
    EXPECT_EQ(tensor_conv2d(o, x, w, NULL, &p1, &e), ERR_INVALID);
    ok(strstr(e.msg, "conv2d") != NULL, "conv error names the op: %s", e.msg);
    tensor_free(x);
    tensor_free(w);
    tensor_free(o);
}

/* ---- norms, activations ---------------------------------------------------------------- */

static void test_norms(int isa)
{
    struct err e = {0};
    for (int di = 0; di < 3; di++)
        for (int silu = 0; silu < 2; silu++) {
            const int64_t N = 2, C = 12, HW = 35;
            const int G = 4;
            float *vx, *vg, *vb;
            struct tensor *x = mk(DTS[di], 4, (int64_t[]){N, C, 5, 7}, 3, &vx);
            for (int64_t i = 0; i < N * C * HW; i++) /* an offset mean tests the shift */
                vx[i] += 10.0f;
            tensor_write_f32(x, vx, N * C * HW, NULL);
            tensor_read_f32(x, vx, N * C * HW, NULL);
            struct tensor *g = mk(TENSOR_F32, 1, (int64_t[]){C}, 1, &vg);
            struct tensor *b = mk(TENSOR_F32, 1, (int64_t[]){C}, 1, &vb);
            struct tensor *o;
            tensor_new(D, DTS[di], 4, (int64_t[]){N, C, 5, 7}, &o, NULL);
            EXPECT_OK(tensor_group_norm(o, x, G, g, b, 1e-5f, silu, &e));
            double *ref = xmalloc((size_t)(N * C * HW) * sizeof(double));
            for (int64_t n = 0; n < N; n++)
                for (int gi = 0; gi < G; gi++) {
                    int64_t c0 = gi * (C / G), cnt = (C / G) * HW;
                    const float *p = vx + (n * C + c0) * HW;
                    double m = 0, v = 0;
                    for (int64_t i = 0; i < cnt; i++)
                        m += p[i];
                    m /= cnt;
                    for (int64_t i = 0; i < cnt; i++)
                        v += (p[i] - m) * (p[i] - m);
                    v /= cnt;
                    for (int64_t i = 0; i < cnt; i++) {
                        int64_t c = c0 + i / HW;
                        double y = (p[i] - m) / sqrt(v + 1e-5) * vg[c] + vb[c];
                        if (silu)
                            y = y / (1 + exp(-y));
                        ref[(n * C + c0) * HW + i] = y;
                    }
                }
            char what[64];
            snprintf(what, sizeof(what), "group_norm%s isa %d", silu ? "+silu" : "", isa);
            check(what, o, ref, 1e-5);
            xfree(ref);
            xfree(vx);
            xfree(vg);
            xfree(vb);
            tensor_free(x);
            tensor_free(g);
            tensor_free(b);
            tensor_free(o);
        }
    for (int di = 0; di < 3; di++) {
        const int64_t R = 9, C = 77;
        float *vx, *vg, *vb;
        struct tensor *x = mk(DTS[di], 2, (int64_t[]){R, C}, 2, &vx);
        struct tensor *g = mk(DTS[di], 1, (int64_t[]){C}, 1, &vg);
        struct tensor *b = mk(DTS[di], 1, (int64_t[]){C}, 1, &vb);
        EXPECT_OK(tensor_layer_norm(x, x, g, b, 1e-5f, &e)); /* in place */
        double *ref = xmalloc((size_t)(R * C) * sizeof(double));
        for (int64_t r = 0; r < R; r++) {
            double m = 0, v = 0;
            for (int64_t i = 0; i < C; i++)
                m += vx[r * C + i];
            m /= C;
            for (int64_t i = 0; i < C; i++)
                v += (vx[r * C + i] - m) * (vx[r * C + i] - m);
            v /= C;
            for (int64_t i = 0; i < C; i++)
                ref[r * C + i] = (vx[r * C + i] - m) / sqrt(v + 1e-5) * vg[i] + vb[i];
        }
        check("layer_norm in place", x, ref, 1e-5);
        xfree(ref);
        xfree(vx);
        xfree(vg);
        xfree(vb);
        tensor_free(x);
        tensor_free(g);
        tensor_free(b);
    }
}

static double ref_act(double x, int k)
{
    switch (k) {
    case 0: return x / (1 + exp(-x));
    case 1: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    default: return x / (1 + exp(-1.702 * x));
    }
}

/* Fused Linear + GEGLU against a naive double reference: few rows (column tiles, ragged
 * last tile), many rows (row tiles of 128 and 256, ragged), with and without bias. */
static void test_linear_geglu(void)
{
    struct err e = {0};
    static const int64_t cases[][3] = {{7, 29, 45}, {1030, 24, 40}, {700, 16, 24}, {13, 8, 6}};
    for (int ci = 0; ci < 4; ci++) {
        cpu_linear_geglu_fused = ci != 3; /* the other backends' path: 8 row chunks */
        int64_t R = cases[ci][0], K = cases[ci][1], H = cases[ci][2];
        int with_bias = ci != 1;
        float *vx, *vw, *vb = NULL;
        struct tensor *x = mk(TENSOR_F32, 2, (int64_t[]){R, K}, 1, &vx);
        struct tensor *w = mk(TENSOR_F32, 2, (int64_t[]){2 * H, K}, 1, &vw);
        struct tensor *b = with_bias ? mk(TENSOR_F32, 1, (int64_t[]){2 * H}, 1, &vb) : NULL;
        struct tensor *o;
        tensor_new(D, TENSOR_F32, 2, (int64_t[]){R, H}, &o, NULL);
        EXPECT_OK(tensor_linear_geglu(o, x, w, b, &e));
        double *ref = xmalloc((size_t)(R * H) * sizeof(double));
        for (int64_t r = 0; r < R; r++)
            for (int64_t j = 0; j < H; j++) {
                double a = vb ? vb[j] : 0, g = vb ? vb[H + j] : 0;
                for (int64_t k = 0; k < K; k++) {
                    a += (double)vx[r * K + k] * vw[j * K + k];
                    g += (double)vx[r * K + k] * vw[(H + j) * K + k];
                }
                ref[r * H + j] = a * 0.5 * g * (1 + erf(g / sqrt(2.0)));
            }
        char what[64];
        snprintf(what, sizeof(what), "linear_geglu %lldx%lld -> %lld%s%s", (long long)R,
                 (long long)K, (long long)H, with_bias ? "" : " (no bias)",
                 cpu_linear_geglu_fused ? "" : " (chunked, unfused)");
        check(what, o, ref, 1e-5);
        EXPECT_EQ(tensor_linear_geglu(o, x, x, b, &e), ERR_INVALID);
        xfree(ref);
        xfree(vx);
        xfree(vw);
        xfree(vb);
        tensor_free(x);
        tensor_free(w);
        tensor_free(b);
        tensor_free(o);
    }
    cpu_linear_geglu_fused = 1;
}

static void test_activations(int isa)
{
    struct err e = {0};
    static const char *names[3] = {"silu", "gelu", "quick_gelu"};
    for (int di = 0; di < 3; di++)
        for (int k = 0; k < 3; k++) {
            float *vx;
            struct tensor *x = mk(DTS[di], 2, (int64_t[]){3, 37}, 9, &vx), *o;
            vx[0] = -100.0f; /* saturating ends */
            vx[1] = 100.0f;
            tensor_write_f32(x, vx, 111, NULL);
            tensor_new(D, DTS[di], 2, (int64_t[]){3, 37}, &o, NULL);
            int rc = k == 0 ? tensor_silu(o, x, &e) : k == 1 ? tensor_gelu(o, x, &e)
                                                             : tensor_quick_gelu(o, x, &e);
            EXPECT_OK(rc);
            double ref[111];
            for (int i = 0; i < 111; i++)
                ref[i] = ref_act(vx[i], k);
            char what[64];
            snprintf(what, sizeof(what), "%s isa %d", names[k], isa);
            check(what, o, ref, 2e-6);
            xfree(vx);
            tensor_free(x);
            tensor_free(o);
        }
    for (int di = 0; di < 3; di++) {
        const int64_t R = 5, C = 21;
        float *vx;
        struct tensor *x = mk(DTS[di], 3, (int64_t[]){1, R, 2 * C}, 4, &vx), *o;
        tensor_new(D, DTS[di], 3, (int64_t[]){1, R, C}, &o, NULL);
        EXPECT_OK(tensor_geglu(o, x, &e));
        double ref[5 * 21];
        for (int64_t r = 0; r < R; r++)
            for (int64_t i = 0; i < C; i++)
                ref[r * C + i] = vx[r * 2 * C + i] * ref_act(vx[r * 2 * C + C + i], 1);
        check("geglu (value first, gate second)", o, ref, 2e-6);
        xfree(vx);
        tensor_free(x);
        tensor_free(o);
    }
    for (int di = 0; di < 3; di++) {
        const int64_t R = 4, C = 53;
        float *vx;
        struct tensor *x = mk(DTS[di], 2, (int64_t[]){R, C}, 30, &vx), *o;
        tensor_new(D, DTS[di], 2, (int64_t[]){R, C}, &o, NULL);
        EXPECT_OK(tensor_softmax(o, x, &e));
        double ref[4 * 53];
        for (int64_t r = 0; r < R; r++) {
            double m = -INFINITY, s = 0;
            for (int64_t i = 0; i < C; i++)
                m = fmax(m, vx[r * C + i]);
            for (int64_t i = 0; i < C; i++)
                s += exp(vx[r * C + i] - m);
            for (int64_t i = 0; i < C; i++)
                ref[r * C + i] = exp(vx[r * C + i] - m) / s;
        }
        check("softmax", o, ref, 1e-6);
        xfree(vx);
        tensor_free(x);
        tensor_free(o);
    }
}

/* ---- attention ---------------------------------------------------------------------------- */

static void attn_ref(double *out, const float *q, const float *k, const float *v, int64_t B,
                     int64_t tq, int64_t tk, int H, int64_t d, int64_t dv, int64_t qrs,
                     int64_t krs, int64_t vrs, int causal)
{
    double *s = xmalloc((size_t)tk * sizeof(double));
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int64_t i = 0; i < tq; i++) {
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < tk; j++) {
                    double acc = 0;
                    for (int64_t c = 0; c < d; c++)
                        acc += (double)q[(b * tq + i) * qrs + h * d + c] *
                               k[(b * tk + j) * krs + h * d + c];
                    s[j] = causal && j > i ? -INFINITY : acc / sqrt((double)d);
                    m = fmax(m, s[j]);
                }
                for (int64_t j = 0; j < tk; j++)
                    sum += s[j] = exp(s[j] - m);
                for (int64_t c = 0; c < dv; c++) {
                    double acc = 0;
                    for (int64_t j = 0; j < tk; j++)
                        acc += s[j] * v[(b * tk + j) * vrs + h * dv + c];
                    out[(b * tq + i) * H * dv + h * dv + c] = acc / sum;
                }
            }
    xfree(s);
}

static void test_attention(void)
{
    struct err e = {0};
    int bq = cpu_attn_bq, bk = cpu_attn_bk;
    cpu_attn_bq = 8; /* several query and key blocks, ragged ends */
    cpu_attn_bk = 16;
    for (int di = 0; di < 3; di++) {
        const int64_t B = 2, TQ = 37, TK = 53, d = 5, dv = 4;
        const int H = 3;
        float *vq, *vk, *vv;
        struct tensor *q = mk(DTS[di], 3, (int64_t[]){B, TQ, H * d}, 2, &vq);
        struct tensor *k = mk(DTS[di], 3, (int64_t[]){B, TK, H * d}, 2, &vk);
        struct tensor *v = mk(DTS[di], 3, (int64_t[]){B, TK, H * dv}, 1, &vv);
        struct tensor *o;
        tensor_new(D, DTS[di], 3, (int64_t[]){B, TQ, H * dv}, &o, NULL);
        EXPECT_OK(tensor_attention(o, q, k, v, H, 0.0f, 0, &e));
        double *ref = xmalloc((size_t)(B * TQ * H * dv) * sizeof(double));
        attn_ref(ref, vq, vk, vv, B, TQ, TK, H, d, dv, H * d, H * d, H * dv, 0);
        check("attention cross (Tq 37, Tk 53, 3 heads)", o, ref, 2e-6);
        cpu_attn_bk = 64; /* more keys per tile than Tk: the query tile grows instead */
        EXPECT_OK(tensor_attention(o, q, k, v, H, 0.0f, 0, &e));
        check("attention cross, grown query tile", o, ref, 2e-6);
        cpu_attn_bk = 16;
        xfree(ref);
        xfree(vq);
        xfree(vk);
        xfree(vv);
        tensor_free(q);
        tensor_free(k);
        tensor_free(v);
        tensor_free(o);
    }
    /* causal self-attention from a fused qkv projection [B, T, 3C] via slice views */
    {
        const int64_t B = 2, T = 29, d = 6;
        const int H = 2;
        const int64_t C = H * d;
        float *vqkv;
        struct tensor *qkv = mk(TENSOR_F32, 3, (int64_t[]){B, T, 3 * C}, 2, &vqkv);
        struct tensor *q, *k, *v, *o;
        tensor_slice(qkv, 2, 0, C, &q, NULL);
        tensor_slice(qkv, 2, C, C, &k, NULL);
        tensor_slice(qkv, 2, 2 * C, C, &v, NULL);
        tensor_new(D, TENSOR_F32, 3, (int64_t[]){B, T, C}, &o, NULL);
        EXPECT_OK(tensor_attention(o, q, k, v, H, 0.0f, TENSOR_ATTN_CAUSAL, &e));
        double *ref = xmalloc((size_t)(B * T * C) * sizeof(double));
        attn_ref(ref, vqkv, vqkv + C, vqkv + 2 * C, B, T, T, H, d, d, 3 * C, 3 * C, 3 * C, 1);
        check("attention causal, strided q/k/v views", o, ref, 2e-6);
        EXPECT_EQ(tensor_attention(o, q, k, v, 5, 0.0f, 0, &e), ERR_INVALID);
        xfree(ref);
        xfree(vqkv);
        tensor_free(qkv);
        tensor_free(q);
        tensor_free(k);
        tensor_free(v);
        tensor_free(o);
    }
    cpu_attn_bq = bq;
    cpu_attn_bk = bk;
}

/* ---- elementwise and shape ops -------------------------------------------------------- */

static void test_elementwise(void)
{
    struct err e = {0};
    for (int di = 0; di < 3; di++) {
        float *va, *vb, *vc;
        struct tensor *a = mk(DTS[di], 4, (int64_t[]){2, 3, 4, 5}, 2, &va);
        struct tensor *b = mk(DTS[(di + 1) % 3], 3, (int64_t[]){3, 1, 1}, 2, &vb);
        struct tensor *c = mk(DTS[di], 4, (int64_t[]){2, 1, 4, 1}, 2, &vc);
        struct tensor *o;
        tensor_new(D, DTS[di], 4, (int64_t[]){2, 3, 4, 5}, &o, NULL);
        double ref[120], ref2[120];
        for (int i = 0; i < 120; i++) {
            int n = i / 60, ch = i / 20 % 3, y = i / 5 % 4;
            ref[i] = (double)va[i] + vb[ch];
            ref2[i] = (double)va[i] * vc[n * 4 + y];
        }
        EXPECT_OK(tensor_add(o, a, b, &e));
        check("add, per-channel broadcast", o, ref, 1e-6);
        EXPECT_OK(tensor_mul(o, a, c, &e));
        check("mul, [2,1,4,1] broadcast", o, ref2, 1e-6);
        EXPECT_OK(tensor_add(a, a, b, &e)); /* in place */
        check("add in place", a, ref, 1e-6);
        EXPECT_EQ(tensor_add(o, a, c, &e) == 0, 1);
        struct tensor *bad;
        tensor_new(D, DTS[di], 1, (int64_t[]){4}, &bad, NULL);
        EXPECT_EQ(tensor_add(o, a, bad, &e), ERR_INVALID);
        tensor_free(bad);
        for (int i = 0; i < 120; i++)
            ref2[i] = 0.25 * ref[i];
        float *cur = rd(a);
        EXPECT_OK(tensor_scale(o, a, 0.25f, &e));
        check("scale", o, ref2, 1e-6);
        for (int i = 0; i < 120; i++)
            ref2[i] = fmin(fmax(cur[i], -0.5), 0.75);
        EXPECT_OK(tensor_clamp(o, a, -0.5f, 0.75f, &e));
        check("clamp", o, ref2, 1e-6);
        float *ov = rd(o);
        for (int i = 0; i < 120; i++)
            ref2[i] = 1.5 * cur[i] - 2.0 * ov[i];
        EXPECT_OK(tensor_axpby(o, 1.5f, a, -2.0f, o, &e)); /* out aliases y */
        check("axpby (aliasing y)", o, ref2, 1e-6);
        xfree(ov);
        ov = rd(o);
        const struct tensor *in[3] = {a, o, a};
        float coef[3] = {0.5f, -1.0f, 0.25f};
        for (int i = 0; i < 120; i++)
            ref2[i] = 0.75 * cur[i] - ov[i];
        EXPECT_OK(tensor_lincomb(o, 3, coef, in, &e));
        check("lincomb of 3", o, ref2, 1e-6);
        xfree(ov);
        xfree(cur);
        xfree(va);
        xfree(vb);
        xfree(vc);
        tensor_free(a);
        tensor_free(b);
        tensor_free(c);
        tensor_free(o);
    }
}

static void test_shape_ops(void)
{
    struct err e = {0};
    for (int di = 0; di < 3; di++) {
        float *va, *vb;
        struct tensor *a = mk(DTS[di], 4, (int64_t[]){2, 3, 2, 3}, 1, &va);
        struct tensor *b = mk(DTS[di], 4, (int64_t[]){2, 2, 2, 3}, 1, &vb);
        struct tensor *o;
        tensor_new(D, DTS[di], 4, (int64_t[]){2, 5, 2, 3}, &o, NULL);
        EXPECT_OK(tensor_concat(o, a, b, 1, &e));
        double ref[60];
        for (int n = 0; n < 2; n++)
            for (int c = 0; c < 5; c++)
                for (int i = 0; i < 6; i++)
                    ref[(n * 5 + c) * 6 + i] = c < 3 ? va[(n * 3 + c) * 6 + i]
                                                     : vb[(n * 2 + c - 3) * 6 + i];
        check("concat channels (h first, then skip)", o, ref, 0);
        EXPECT_EQ(tensor_concat(o, a, a, 1, &e), ERR_INVALID);
        xfree(va);
        xfree(vb);
        tensor_free(a);
        tensor_free(b);
        tensor_free(o);
    }
    /* nearest: exact 2x and the 9 -> 17 rule of sd15.md §3.5 */
    int64_t map[17];
    tensor__nearest_map(map, 9, 17);
    static const int64_t want[17] = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8};
    ok(memcmp(map, want, sizeof(want)) == 0, "nearest map 9 -> 17 matches PyTorch");
    for (int di = 0; di < 3; di++) {
        float *vx;
        struct tensor *x = mk(DTS[di], 4, (int64_t[]){1, 2, 3, 5}, 1, &vx), *o;
        tensor_new(D, DTS[di], 4, (int64_t[]){1, 2, 6, 10}, &o, NULL);
        EXPECT_OK(tensor_upsample_nearest(o, x, &e));
        double ref[120];
        for (int c = 0; c < 2; c++)
            for (int y = 0; y < 6; y++)
                for (int xx = 0; xx < 10; xx++)
                    ref[(c * 6 + y) * 10 + xx] = vx[(c * 3 + y / 2) * 5 + xx / 2];
        check("upsample nearest 2x", o, ref, 0);
        xfree(vx);
        tensor_free(x);
        tensor_free(o);
    }
    /* embedding from an f16 table */
    {
        float *vt;
        struct tensor *t = mk(TENSOR_F16, 2, (int64_t[]){11, 6}, 1, &vt), *o;
        int32_t ids[5] = {3, 0, 10, 3, 7};
        tensor_new(D, TENSOR_F32, 3, (int64_t[]){1, 5, 6}, &o, NULL);
        EXPECT_OK(tensor_embedding(o, t, ids, 5, &e));
        double ref[30];
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 6; j++)
                ref[i * 6 + j] = vt[ids[i] * 6 + j];
        check("embedding (f16 table)", o, ref, 0);
        ids[2] = 11;
        err_clear(&e);
        EXPECT_EQ(tensor_embedding(o, t, ids, 5, &e), ERR_INVALID);
        ok(strstr(e.msg, "11") != NULL, "bad id is reported: %s", e.msg);
        xfree(vt);
        tensor_free(t);
        tensor_free(o);
    }
    /* timestep embedding (sd15.md §3.2): cos half first, then sin */
    {
        struct tensor *o;
        float ts[3] = {0.0f, 1.0f, 999.0f};
        tensor_new(D, TENSOR_F32, 2, (int64_t[]){3, 320}, &o, NULL);
        EXPECT_OK(tensor_timestep_embedding(o, ts, 3, &e));
        float *g = rd(o);
        EXPECT_NEAR(g[0], 1.0, 0);      /* cos(0) */
        EXPECT_NEAR(g[160], 0.0, 0);    /* sin(0) */
        EXPECT_NEAR(g[320 + 1], cos(0.94406086), 1e-6); /* freq[1] = 0.94406086 */
        EXPECT_NEAR(g[320 + 161], sin(0.94406086), 1e-6);
        EXPECT_NEAR(g[640 + 159], cos(999.0 * 1.0592537e-4), 1e-6);
        EXPECT_NEAR(g[640 + 319], sin(999.0 * 1.0592537e-4), 1e-6);
        double ref[960];
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < 160; k++) {
                double f = exp(-log(10000.0) * k / 160.0), a = ts[i] * f;
                ref[i * 320 + k] = cos(a);
                ref[i * 320 + 160 + k] = sin(a);
            }
        close_enough("timestep embedding", TENSOR_F32, g, ref, 960, 1e-4);
        xfree(g);
        tensor_free(o);
    }
}

/* Two threads running ops at once must both get right results (the second one's pool
 * jobs degrade to single-threaded instead of corrupting the pool). */
struct conc {
    struct tensor *x, *o;
    int bad;
};

static void *conc_run(void *arg)
{
    struct conc *c = arg;
    int64_t n = tensor_numel(c->x);
    float *xv = xmalloc((size_t)n * sizeof(float)), *ov = xmalloc((size_t)n * sizeof(float));
    tensor_read_f32(c->x, xv, n, NULL);
    for (int r = 0; r < 20; r++) {
        if (tensor_silu(c->o, c->x, NULL) < 0) {
            c->bad++;
            continue;
        }
        tensor_read_f32(c->o, ov, n, NULL);
        for (int64_t i = 0; i < n; i += 97)
            if (fabs(ov[i] - xv[i] / (1 + exp(-(double)xv[i]))) > 1e-5)
                c->bad++;
    }
    xfree(xv);
    xfree(ov);
    return NULL;
}

static void test_concurrent(void)
{
    struct conc a = {mk(TENSOR_F32, 1, (int64_t[]){300001}, 5, NULL), NULL, 0};
    struct conc b = {mk(TENSOR_F32, 1, (int64_t[]){300001}, 5, NULL), NULL, 0};
    tensor_new(D, TENSOR_F32, 1, (int64_t[]){300001}, &a.o, NULL);
    tensor_new(D, TENSOR_F32, 1, (int64_t[]){300001}, &b.o, NULL);
    pthread_t th;
    pthread_create(&th, NULL, conc_run, &a);
    conc_run(&b);
    pthread_join(th, NULL);
    ok(a.bad == 0 && b.bad == 0, "ops from two threads at once are correct (%d, %d bad)", a.bad,
       b.bad);
    tensor_free(a.x);
    tensor_free(a.o);
    tensor_free(b.x);
    tensor_free(b.o);
}

static void test_workspace(void)
{
    struct tensor_conv2d_opts p1 = {1, 1, 1, 1, 1}, none = {1, 0, 0, 0, 0};
    EXPECT_EQ(tensor_conv2d_workspace_bytes(DEV_KIND_CPU, TENSOR_F32, 320, 3, 3, 64, 64, &p1), 0);
    EXPECT_EQ(tensor_conv2d_workspace_bytes(DEV_KIND_CUDA, TENSOR_F16, 320, 3, 3, 64, 64, &p1),
              320 * 9 * 4096 * 2);
    EXPECT_EQ(tensor_conv2d_workspace_bytes(DEV_KIND_CUDA, TENSOR_F16, 320, 1, 1, 64, 64, &none), 0);
    /* 8 heads x 4096 keys: chunks of 512 queries, f32 scores + f16 probabilities */
    EXPECT_EQ(tensor_attention_workspace_bytes(DEV_KIND_CUDA, TENSOR_F16, 8, 4096, 4096),
              (size_t)8 * 512 * 4096 * 6);
    EXPECT_EQ(tensor_attention_workspace_bytes(DEV_KIND_SIM, TENSOR_F16, 8, 4096, 4096), 0);
}

int main(void)
{
    struct err e = {0};
    long live0 = alloc_live_count();
    if (dev_open("cpu", 0, &D, &e) < 0) {
        ok(0, "open cpu device: %s", e.msg);
        return harness_done();
    }
    tensor_threads_set(2); /* exercise the pool even on a 1-core runner */
    test_convert();
    test_views();
    test_budget();
    test_external();
    test_matmul();
    test_linear();
    test_linear_geglu();
    test_conv();
    for (int isa = 2; isa >= 0; isa--) {
        cpu_vec_force_isa(isa); /* only lowers: a machine without AVX-512 tests less */
        test_norms(isa);
        test_activations(isa);
    }
    cpu_vec_force_isa(2);
    test_attention();
    test_elementwise();
    test_shape_ops();
    test_workspace();
    test_concurrent();
    EXPECT_EQ(dev_bytes_used(D), 0);
    dev_close(D);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
