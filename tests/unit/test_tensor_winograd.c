/*
 * test_tensor_winograd — 3x3 stride-1 convolution by Winograd F(2x2, 3x3) and F(4x4, 3x3)
 * (tensor/cpu/winograd.c, wino43.c), forced on (cpu_conv_winograd = 2), against a direct
 * convolution in float64 written here and against the im2col + GEMM reference path
 * (cpu_conv_winograd = 0): max |err| / max |ref| <= 1e-5, on odd sizes (ragged tiles
 * at the right and bottom edges), padding 1, 0 and asymmetric, 4 to 1280 channels,
 * batch 2, with and without bias, f16 weights (widened before the transform), small
 * per-task chunks (several tile-row blocks per image), and the rule that picks it.
 *
 * Every Winograd case runs with both tiles: F(2,3) and F(4,3) (wino43.c), the latter
 * where cpu_wino_tile allows it (<= 512 input channels).
 *
 * tensor_conv2d_up2 (a nearest-2x upsample, then the conv; wino_up2.c fuses them into
 * one F(2,3) or F(4,3) Winograd per output phase on the low-resolution input) against the same
 * float64 direct convolution of the upsampled input and against the unfused reference
 * (upsample, then im2col + GEMM), with the same bound, on odd sizes, 1x1 images, 512
 * channels, small chunks and f16 weights; shapes it does not fuse (pad 0) and bad
 * shapes go through or fail like tensor_conv2d.
 *
 * tensor_conv2d_gn (GroupNorm + SiLU applied as the Winograd input transform reads x)
 * against a float64 GroupNorm + direct conv, the unfused reference, and bit for bit
 * against group_norm then the Winograd conv where rows are whole vectors.
 *
 * f16 and bf16 weights, read as stored (widened a channel at a time), give the f32
 * weight's bits on all three.
 */
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "device.h"
#include "harness.h"
#include "tensor.h"
#include "tensor_impl.h"
#include "cpu/winograd_impl.h"

#define TOL 1e-5

static struct dev *D;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(void)
{
    return harness_frand(&rng);
}

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
    tensor_read_f32(t, v, n, NULL); /* the values as stored (f16 rounds) */
    *vals = v;
    return t;
}

/* Direct 3x3 stride-1 convolution in double. */
static void conv_ref(double *out, const float *x, const float *w, const float *b, int64_t n,
                     int64_t ci, int64_t h, int64_t wd, int64_t co, int pt, int pl, int64_t ho,
                     int64_t wo)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < co; o++)
            for (int64_t y = 0; y < ho; y++)
                for (int64_t xx = 0; xx < wo; xx++) {
                    double acc = b ? b[o] : 0.0;
                    for (int64_t c = 0; c < ci; c++)
                        for (int ky = 0; ky < 3; ky++) {
                            int64_t iy = y - pt + ky;
                            if (iy < 0 || iy >= h)
                                continue;
                            for (int kx = 0; kx < 3; kx++) {
                                int64_t ix = xx - pl + kx;
                                if (ix < 0 || ix >= wd)
                                    continue;
                                acc += (double)x[((i * ci + c) * h + iy) * wd + ix] *
                                       w[((o * ci + c) * 3 + ky) * 3 + kx];
                            }
                        }
                    out[((i * co + o) * ho + y) * wo + xx] = acc;
                }
}

static double rel_err(const float *got, const double *ref, int64_t n)
{
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= md))
            md = isnan(d) ? INFINITY : d;
        mr = fmax(mr, fabs(ref[i]));
    }
    return mr > 0 ? md / mr : md;
}

static float *run(int mode, struct tensor *o, const struct tensor *x, const struct tensor *w,
                  const struct tensor *b, const struct tensor_conv2d_opts *op)
{
    struct err e = {0};
    int saved = cpu_conv_winograd;
    cpu_conv_winograd = mode;
    tensor_fill(o, NAN, NULL); /* every output pixel must be written */
    int rc = tensor_conv2d(o, x, w, b, op, &e);
    cpu_conv_winograd = saved;
    ok(rc == 0, "conv runs (%s): %s", mode ? "winograd" : "im2col", e.msg);
    float *r = xmalloc((size_t)tensor_numel(o) * sizeof(float));
    tensor_read_f32(o, r, tensor_numel(o), NULL);
    return r;
}

struct wcase {
    const char *what;
    int64_t n, ci, h, w, co;
    int pt, pb, pl, pr, bias;
    enum tensor_dtype wdt;
    size_t chunk; /* 0: default */
};

static void check_case(const struct wcase *c)
{
    struct tensor_conv2d_opts op = {1, c->pt, c->pb, c->pl, c->pr};
    int64_t ho, wo;
    tensor_conv2d_out_hw(&op, c->h, c->w, 3, 3, &ho, &wo);
    float *vx, *vw, *vb = NULL;
    /* weights ~ 1/sqrt(9 ci), as trained convs are, so outputs stay O(1) */
    float ws = 1.0f / sqrtf(9.0f * (float)c->ci);
    struct tensor *x = mk(TENSOR_F32, 4, (int64_t[]){c->n, c->ci, c->h, c->w}, 1.0f, &vx);
    struct tensor *w = mk(c->wdt, 4, (int64_t[]){c->co, c->ci, 3, 3}, ws, &vw);
    struct tensor *b = c->bias ? mk(TENSOR_F32, 1, (int64_t[]){c->co}, 0.5f, &vb) : NULL;
    struct tensor *o;
    tensor_new(D, TENSOR_F32, 4, (int64_t[]){c->n, c->co, ho, wo}, &o, NULL);
    size_t saved = cpu_wino_chunk_bytes;
    float *ic = run(0, o, x, w, b, &op);
    int64_t n = tensor_numel(o);
    double *ref = xmalloc((size_t)n * sizeof(double)), *icd = xmalloc((size_t)n * sizeof(double));
    conv_ref(ref, vx, vw, vb, c->n, c->ci, c->h, c->w, c->co, c->pt, c->pl, ho, wo);
    double e2 = rel_err(ic, ref, n);
    ok(e2 <= TOL, "%s: im2col vs float64 direct %.3g", c->what, e2);
    for (int64_t i = 0; i < n; i++)
        icd[i] = ic[i];
    /* both tiles: F(2,3) everywhere, F(4,3) where its bound allows (cpu_wino_tile) */
    for (int f43 = 0; f43 <= 2; f43 += 2) {
        int saved43 = cpu_wino_f43;
        cpu_wino_f43 = f43;
        int tile = cpu_wino_tile(c->ci, c->co, ho, wo);
        if (c->chunk)
            cpu_wino_chunk_bytes = c->chunk;
        float *wg = run(2, o, x, w, b, &op);
        cpu_wino_chunk_bytes = saved;
        cpu_wino_f43 = saved43;
        if (f43 && tile == 2) { /* above the channels F(4,3) keeps the bound for */
            ok(c->ci > 512, "%s: F(4,3) refused only above 512 input channels", c->what);
            xfree(wg);
            continue;
        }
        double e1 = rel_err(wg, ref, n), e3 = rel_err(wg, icd, n);
        ok(e1 <= TOL, "%s: F(%d,3) vs float64 direct %.3g", c->what, tile, e1);
        ok(e3 <= TOL, "%s: F(%d,3) vs im2col %.3g", c->what, tile, e3);
        xfree(wg);
    }
    xfree(icd);
    xfree(ref);
    xfree(ic);
    xfree(vx);
    xfree(vw);
    xfree(vb);
    tensor_free(x);
    tensor_free(w);
    tensor_free(b);
    tensor_free(o);
}

/* x [n, c, h, w] upsampled 2x nearest, in float. */
static float *up2_ref(const float *x, int64_t n, int64_t c, int64_t h, int64_t w)
{
    float *u = xmalloc((size_t)(n * c * 4 * h * w) * sizeof(float));
    for (int64_t p = 0; p < n * c; p++)
        for (int64_t y = 0; y < 2 * h; y++)
            for (int64_t xx = 0; xx < 2 * w; xx++)
                u[(p * 2 * h + y) * 2 * w + xx] = x[(p * h + y / 2) * w + xx / 2];
    return u;
}

static float *run_up2(int mode, struct tensor *o, const struct tensor *x, const struct tensor *w,
                      const struct tensor *b, const struct tensor_conv2d_opts *op)
{
    struct err e = {0};
    int saved = cpu_conv_winograd;
    cpu_conv_winograd = mode;
    tensor_fill(o, NAN, NULL);
    int rc = tensor_conv2d_up2(o, x, w, b, op, &e);
    cpu_conv_winograd = saved;
    ok(rc == 0, "conv2d_up2 runs (%s): %s", mode ? "fused" : "reference", e.msg);
    float *r = xmalloc((size_t)tensor_numel(o) * sizeof(float));
    tensor_read_f32(o, r, tensor_numel(o), NULL);
    return r;
}

static void check_up2(const struct wcase *c)
{
    struct tensor_conv2d_opts op = {1, c->pt, c->pb, c->pl, c->pr};
    int64_t ho, wo, h2 = 2 * c->h, w2 = 2 * c->w;
    tensor_conv2d_out_hw(&op, h2, w2, 3, 3, &ho, &wo);
    float *vx, *vw, *vb = NULL;
    float ws = 1.0f / sqrtf(9.0f * (float)c->ci);
    struct tensor *x = mk(TENSOR_F32, 4, (int64_t[]){c->n, c->ci, c->h, c->w}, 1.0f, &vx);
    struct tensor *w = mk(c->wdt, 4, (int64_t[]){c->co, c->ci, 3, 3}, ws, &vw);
    struct tensor *b = c->bias ? mk(TENSOR_F32, 1, (int64_t[]){c->co}, 0.5f, &vb) : NULL;
    struct tensor *o;
    tensor_new(D, TENSOR_F32, 4, (int64_t[]){c->n, c->co, ho, wo}, &o, NULL);
    size_t saved = cpu_wino_chunk_bytes;
    float *rf = run_up2(0, o, x, w, b, &op);
    int64_t n = tensor_numel(o);
    double *ref = xmalloc((size_t)n * sizeof(double)), *rfd = xmalloc((size_t)n * sizeof(double));
    float *ux = up2_ref(vx, c->n, c->ci, c->h, c->w);
    conv_ref(ref, ux, vw, vb, c->n, c->ci, h2, w2, c->co, c->pt, c->pl, ho, wo);
    double e2 = rel_err(rf, ref, n);
    ok(e2 <= TOL, "up2 %s: reference vs float64 direct %.3g", c->what, e2);
    for (int64_t i = 0; i < n; i++)
        rfd[i] = rf[i];
    for (int f43 = 0; f43 <= 2; f43 += 2) { /* F(2,3), then F(4,3) where the bound allows */
        int saved43 = cpu_wino_f43;
        cpu_wino_f43 = f43;
        int tile = cpu_wino_tile(c->ci, c->co, c->h, c->w);
        if (c->chunk)
            cpu_wino_chunk_bytes = c->chunk;
        float *fu = run_up2(2, o, x, w, b, &op);
        cpu_wino_chunk_bytes = saved;
        cpu_wino_f43 = saved43;
        double e1 = rel_err(fu, ref, n), e3 = rel_err(fu, rfd, n);
        ok(e1 <= TOL, "up2 %s: fused F(%d,3) vs float64 direct %.3g", c->what, tile, e1);
        ok(e3 <= TOL, "up2 %s: fused F(%d,3) vs reference %.3g", c->what, tile, e3);
        xfree(fu);
    }
    xfree(rfd);
    xfree(ux);
    xfree(ref);
    xfree(rf);
    xfree(vx);
    xfree(vw);
    xfree(vb);
    tensor_free(x);
    tensor_free(w);
    tensor_free(b);
    tensor_free(o);
}

/*
 * The vector transforms give the scalar loops' bits: AVX2 (wino_avx2.c, wino43_avx2.c;
 * 8 tiles per vector) and AVX-512 (wino_avx512.c, wino43_avx512.c; 16), each on a plain
 * and a fused-upsample conv, against the scalar loops. The shapes give rows of whole
 * vectors with ragged scalar tails, rows that end exactly on a vector (the up2 output's
 * read-blend-write windows then reach the row's last pixel), and input channel counts
 * that leave a weight-transform tail. A path the CPU lacks is skipped with a message.
 */
static void check_vec_same(int64_t n, int64_t ci, int64_t h, int64_t wd, int64_t co)
{
    struct tensor_conv2d_opts op = {1, 1, 1, 1, 1};
    float *vx, *vw, *vb;
    struct tensor *x = mk(TENSOR_F32, 4, (int64_t[]){n, ci, h, wd}, 1.0f, &vx);
    struct tensor *w = mk(TENSOR_F32, 4, (int64_t[]){co, ci, 3, 3}, 0.05f, &vw);
    struct tensor *b = mk(TENSOR_F32, 1, (int64_t[]){co}, 0.5f, &vb);
    struct tensor *o1, *o2;
    tensor_new(D, TENSOR_F32, 4, (int64_t[]){n, co, h, wd}, &o1, NULL);
    tensor_new(D, TENSOR_F32, 4, (int64_t[]){n, co, 2 * h, 2 * wd}, &o2, NULL);
    __builtin_cpu_init();
    static const char *const name[3] = {"scalar", "AVX2", "AVX-512"};
    static const int width[3] = {0, 8, 16}; /* wino__vec() on each path */
    int has[3] = {1, __builtin_cpu_supports("avx2"), __builtin_cpu_supports("avx512f")};
    int s512 = cpu_wino_avx512, s2 = cpu_wino_avx2, tile = cpu_wino_tile(ci, co, h, wd);
    float *r[3][2] = {{NULL}};
    for (int p = 0; p < 3; p++) {
        if (!has[p])
            continue;
        cpu_wino_avx512 = p == 2;
        cpu_wino_avx2 = p == 1;
        ok(wino__vec() == width[p], "%s path selected (wino__vec %d)", name[p], wino__vec());
        r[p][0] = run(2, o1, x, w, b, &op);
        r[p][1] = run_up2(2, o2, x, w, b, &op);
    }
    cpu_wino_avx512 = s512;
    cpu_wino_avx2 = s2;
    for (int p = 1; p < 3; p++) {
        if (!has[p]) {
            printf("# skip: no %s on this CPU, its Winograd transforms not compared\n", name[p]);
            continue;
        }
        ok(memcmp(r[0][0], r[p][0], (size_t)tensor_numel(o1) * sizeof(float)) == 0,
           "winograd F(%d,3) %lldx%lld, %lld channels: %s transforms == scalar, bit for bit", tile,
           (long long)h, (long long)wd, (long long)ci, name[p]);
        ok(memcmp(r[0][1], r[p][1], (size_t)tensor_numel(o2) * sizeof(float)) == 0,
           "up2 F(%d,3) %lldx%lld, %lld channels: %s transforms == scalar, bit for bit", tile,
           (long long)h, (long long)wd, (long long)ci, name[p]);
    }
    for (int k = 0; k < 6; k++)
        xfree(r[k / 2][k % 2]);
    xfree(vx);
    xfree(vw);
    xfree(vb);
    tensor_free(x);
    tensor_free(w);
    tensor_free(b);
    tensor_free(o1);
    tensor_free(o2);
}

/* GroupNorm (+ SiLU) in float64 of x [n, c, hw] into float. */
static float *gn_ref(const float *x, int64_t n, int64_t c, int64_t hw, int groups,
                     const float *g, const float *b, double eps, int silu)
{
    float *y = xmalloc((size_t)(n * c * hw) * sizeof(float));
    int64_t cg = c / groups;
    for (int64_t i = 0; i < n * groups; i++) {
        const float *xg = x + i * cg * hw;
        double s = 0, q = 0;
        for (int64_t k = 0; k < cg * hw; k++)
            s += xg[k];
        double m = s / (double)(cg * hw);
        for (int64_t k = 0; k < cg * hw; k++)
            q += (xg[k] - m) * (xg[k] - m);
        double r = 1.0 / sqrt(q / (double)(cg * hw) + eps);
        for (int64_t k = 0; k < cg * hw; k++) {
            int64_t ch = i % groups * cg + k / hw;
            double v = (xg[k] - m) * r * g[ch] + b[ch];
            y[i * cg * hw + k] = (float)(silu ? v / (1.0 + exp(-v)) : v);
        }
    }
    return y;
}

/* tensor_conv2d_gn fused (Winograd forced) against the float64 GroupNorm + direct conv,
 * against the unfused reference (group_norm, then im2col), and, where rows are whole
 * vectors (w % 16 == 0), bit for bit against group_norm then the same Winograd conv. */
static void check_gn(const char *what, int64_t n, int64_t ci, int64_t h, int64_t w, int64_t co,
                     int silu, int bits)
{
    struct tensor_conv2d_opts op = {1, 1, 1, 1, 1};
    float *vx, *vw, *vb, *vg, *vbe;
    struct tensor *x = mk(TENSOR_F32, 4, (int64_t[]){n, ci, h, w}, 2.0f, &vx);
    struct tensor *wt = mk(TENSOR_F16, 4, (int64_t[]){co, ci, 3, 3},
                           1.0f / sqrtf(9.0f * (float)ci), &vw);
    struct tensor *b = mk(TENSOR_F32, 1, (int64_t[]){co}, 0.5f, &vb);
    struct tensor *g = mk(TENSOR_F32, 1, (int64_t[]){ci}, 1.0f, &vg);
    struct tensor *be = mk(TENSOR_F32, 1, (int64_t[]){ci}, 0.5f, &vbe);
    struct tensor_gn_opts gn = {8, g, be, 1e-6f, silu};
    struct tensor *o, *gx;
    tensor_new(D, TENSOR_F32, 4, (int64_t[]){n, co, h, w}, &o, NULL);
    tensor_new(D, TENSOR_F32, 4, (int64_t[]){n, ci, h, w}, &gx, NULL);
    float *r[3];
    for (int k = 0; k < 3; k++) {
        struct err e = {0};
        int saved = cpu_conv_winograd, rc;
        cpu_conv_winograd = k == 1 ? 0 : 2;
        tensor_fill(o, NAN, NULL);
        if (k < 2) {
            rc = tensor_conv2d_gn(o, x, &gn, wt, b, &op, &e);
        } else {
            rc = tensor_group_norm(gx, x, gn.groups, g, be, gn.eps, silu, &e);
            rc = rc < 0 ? rc : tensor_conv2d(o, gx, wt, b, &op, &e);
        }
        cpu_conv_winograd = saved;
        ok(rc == 0, "%s: run %d: %s", what, k, e.msg);
        r[k] = xmalloc((size_t)tensor_numel(o) * sizeof(float));
        tensor_read_f32(o, r[k], tensor_numel(o), NULL);
    }
    int64_t no = tensor_numel(o);
    float *gr = gn_ref(vx, n, ci, h * w, gn.groups, vg, vbe, 1e-6, silu);
    double *ref = xmalloc((size_t)no * sizeof(double));
    conv_ref(ref, gr, vw, vb, n, ci, h, w, co, 1, 1, h, w);
    double e1 = rel_err(r[0], ref, no), e2 = rel_err(r[1], ref, no);
    ok(e1 <= TOL, "%s: fused vs float64 %.3g", what, e1);
    ok(e2 <= TOL, "%s: unfused reference vs float64 %.3g", what, e2);
    if (bits)
        ok(memcmp(r[0], r[2], (size_t)no * sizeof(float)) == 0,
           "%s: fused == group_norm + winograd, bit for bit", what);
    for (int k = 0; k < 3; k++)
        xfree(r[k]);
    xfree(gr);
    xfree(ref);
    xfree(vx);
    xfree(vw);
    xfree(vb);
    xfree(vg);
    xfree(vbe);
    tensor_free(x);
    tensor_free(wt);
    tensor_free(b);
    tensor_free(g);
    tensor_free(be);
    tensor_free(o);
    tensor_free(gx);
}

/* cpu_wino_tile: F(4,3) only up to 512 input channels, never when switched off; images
 * of 64x64 pixels and more by default (cpu_wino_f43 = 1). */
/* One of the three fused-or-plain Winograd ops on x with weight w into a new tensor;
 * returns its values (malloc'd). */
static float *run_op(int op, const struct tensor *x, const struct tensor *w, const struct tensor *b,
                     const struct tensor_gn_opts *gn)
{
    static const char *const name[3] = {"conv2d", "conv2d_up2", "conv2d_gn"};
    struct tensor_conv2d_opts po = {1, 1, 1, 1, 1};
    int64_t up = op == 1 ? 2 : 1;
    struct tensor *o;
    struct err e = {0};
    tensor_new(D, TENSOR_F32, 4,
               (int64_t[]){x->shape[0], w->shape[0], up * x->shape[2], up * x->shape[3]}, &o, NULL);
    int rc = op == 0   ? tensor_conv2d(o, x, w, b, &po, &e)
             : op == 1 ? tensor_conv2d_up2(o, x, w, b, &po, &e)
                       : tensor_conv2d_gn(o, x, gn, w, b, &po, &e);
    ok(rc == 0, "%s (%s weight): %s", name[op], tensor_dtype_name(w->dtype), e.msg);
    float *v = xmalloc((size_t)tensor_numel(o) * sizeof(float));
    tensor_read_f32(o, v, tensor_numel(o), NULL);
    tensor_free(o);
    return v;
}

/* Winograd reads an f16 or bf16 weight as stored, widening one output channel's kernels
 * at a time (op_linalg.c's wino_weight): bit for bit what the f32 weight holding the same
 * values gives, for the plain conv, the fused upsample and the fused GroupNorm. */
static void check_dtype_same(enum tensor_dtype dt, int64_t ci, int64_t h, int64_t w, int64_t co)
{
    float *vx, *vw, *vb, *vg, *vbe;
    struct tensor *x = mk(TENSOR_F32, 4, (int64_t[]){2, ci, h, w}, 1.0f, &vx);
    struct tensor *wn = mk(dt, 4, (int64_t[]){co, ci, 3, 3}, 1.0f / sqrtf(9.0f * (float)ci), &vw);
    struct tensor *b = mk(TENSOR_F32, 1, (int64_t[]){co}, 0.5f, &vb);
    struct tensor *g = mk(TENSOR_F32, 1, (int64_t[]){ci}, 1.0f, &vg);
    struct tensor *be = mk(TENSOR_F32, 1, (int64_t[]){ci}, 0.5f, &vbe);
    struct tensor *w32;
    tensor_new(D, TENSOR_F32, 4, (int64_t[]){co, ci, 3, 3}, &w32, NULL);
    tensor_write_f32(w32, vw, co * ci * 9, NULL); /* the stored values, exactly */
    struct tensor_gn_opts gn = {8, g, be, 1e-6f, 1};
    int saved = cpu_conv_winograd;
    cpu_conv_winograd = 2;
    for (int op = 0; op < 3; op++) {
        int64_t no = 2 * co * h * w * (op == 1 ? 4 : 1);
        float *a = run_op(op, x, wn, b, &gn), *r = run_op(op, x, w32, b, &gn);
        int64_t bad = 0;
        for (int64_t i = 0; i < no; i++)
            bad += memcmp(&a[i], &r[i], sizeof(float)) != 0;
        ok(bad == 0,
           "op %d, %s weight %lld -> %lld, %lldx%lld: %lld values differ from the f32 "
           "weight's",
           op, tensor_dtype_name(dt), (long long)ci, (long long)co, (long long)h, (long long)w,
           (long long)bad);
        xfree(a);
        xfree(r);
    }
    cpu_conv_winograd = saved;
    tensor_free(x);
    tensor_free(wn);
    tensor_free(w32);
    tensor_free(b);
    tensor_free(g);
    tensor_free(be);
    xfree(vx);
    xfree(vw);
    xfree(vb);
    xfree(vg);
    xfree(vbe);
}

static void check_tile_rule(void)
{
    int saved = cpu_wino_f43;
    cpu_wino_f43 = 1;
    ok(cpu_wino_tile(512, 512, 64, 64) == 4 && cpu_wino_tile(128, 128, 512, 512) == 4 &&
           cpu_wino_tile(320, 320, 64, 64) == 4,
       "F(4,3) by default at the VAE's and the UNet's first level's shapes");
    ok(cpu_wino_tile(640, 640, 64, 64) == 2 && cpu_wino_tile(1280, 1280, 64, 64) == 2,
       "F(2,3) above 512 input channels");
    ok(cpu_wino_tile(320, 320, 32, 32) == 2, "F(2,3) below 64x64 pixels by default");
    cpu_wino_f43 = 0;
    ok(cpu_wino_tile(512, 512, 64, 64) == 2, "cpu_wino_f43 = 0: F(2,3) only");
    cpu_wino_f43 = 2;
    ok(cpu_wino_tile(512, 512, 4, 4) == 4 && cpu_wino_tile(513, 8, 64, 64) == 2,
       "cpu_wino_f43 = 2: F(4,3) wherever the bound allows");
    cpu_wino_f43 = saved;
}

/* A wrong output size is refused with conv2d's message, named conv2d_up2. */
static void check_up2_bad(void)
{
    struct tensor *x, *w, *o;
    struct err e = {0};
    struct tensor_conv2d_opts op = {1, 1, 1, 1, 1};
    tensor_new(D, TENSOR_F32, 4, (int64_t[]){1, 8, 4, 4}, &x, NULL);
    tensor_new(D, TENSOR_F32, 4, (int64_t[]){8, 8, 3, 3}, &w, NULL);
    tensor_new(D, TENSOR_F32, 4, (int64_t[]){1, 8, 4, 4}, &o, NULL); /* should be 8x8 */
    int rc = tensor_conv2d_up2(o, x, w, NULL, &op, &e);
    ok(rc == ERR_INVALID && strstr(e.msg, "conv2d_up2: x [1,8,4,4]"), "bad up2 shape: %s",
       e.msg);
    tensor_free(x);
    tensor_free(w);
    tensor_free(o);
}

int main(void)
{
    struct err e = {0};
    if (dev_open("cpu", 0, &D, &e) < 0)
        PANIC("dev_open: %s", e.msg);
    static const struct wcase cases[] = {
        /* what, n, ci, h, w, co, pt, pb, pl, pr, bias, wdt, chunk */
        {"4 -> 4 channels, 9x11, pad 1", 2, 4, 9, 11, 4, 1, 1, 1, 1, 1, TENSOR_F32, 0},
        {"4 -> 320 (conv_in-like), 33x31, pad 1", 1, 4, 33, 31, 320, 1, 1, 1, 1, 1, TENSOR_F32,
         0},
        {"64 -> 64, 35x37, pad 1, 3 tile rows per task", 2, 64, 35, 37, 64, 1, 1, 1, 1, 1,
         TENSOR_F32, 16 * 128 * 19 * 4 * 3},
        {"320 -> 320, 17x15, pad 1, no bias", 1, 320, 17, 15, 320, 1, 1, 1, 1, 0, TENSOR_F32, 0},
        {"640 -> 96, 11x13, pad 1, f16 weights", 1, 640, 11, 13, 96, 1, 1, 1, 1, 1, TENSOR_F16,
         0},
        {"1280 -> 160, 5x7, pad 1", 1, 1280, 5, 7, 160, 1, 1, 1, 1, 1, TENSOR_F32, 0},
        {"1280 -> 64, 9x9, pad 1", 2, 1280, 9, 9, 64, 1, 1, 1, 1, 1, TENSOR_F32, 0},
        {"32 -> 24, 12x10, pad 0 (valid)", 1, 32, 12, 10, 24, 0, 0, 0, 0, 1, TENSOR_F32, 0},
        {"32 -> 24, 13x14, pad top/left 2, bottom/right 0", 1, 32, 13, 14, 24, 2, 0, 2, 0, 1,
         TENSOR_F32, 0},
        {"8 -> 8, 1x1 image, pad 1", 2, 8, 1, 1, 8, 1, 1, 1, 1, 1, TENSOR_F32, 0},
        /* the channel counts F(4,3) is enabled for (<= 512), images not a multiple of 4 */
        {"128 -> 128, 2x 30x29, pad 1", 2, 128, 30, 29, 128, 1, 1, 1, 1, 1, TENSOR_F32, 0},
        {"256 -> 64, 23x18, pad 1, no bias, f16 weights", 1, 256, 23, 18, 64, 1, 1, 1, 1, 0,
         TENSOR_F16, 0},
        {"512 -> 64, 2x 26x22, pad 1", 2, 512, 26, 22, 64, 1, 1, 1, 1, 1, TENSOR_F32, 0},
        {"512 -> 512, 10x7, pad 1, f16 weights", 1, 512, 10, 7, 512, 1, 1, 1, 1, 1, TENSOR_F16,
         0},
        {"64 -> 64, 2x 70x45, pad 1, several tile-row blocks", 2, 64, 70, 45, 64, 1, 1, 1, 1, 1,
         TENSOR_F32, 1 << 20},
        {"48 -> 32, 7x6, pad 0 (valid)", 1, 48, 7, 6, 32, 0, 0, 0, 0, 1, TENSOR_F32, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check_case(&cases[i]);
    static const struct wcase up2[] = {
        {"64 -> 64, 34x37 (16-tile vectors and a tail), pad 1", 1, 64, 34, 37, 64, 1, 1, 1, 1,
         1, TENSOR_F32, 0},
        /* what, n, ci, h, w, co, pt, pb, pl, pr, bias, wdt, chunk (x's h, w: out is 2x) */
        {"32 -> 40, 9x11 (ragged tiles), pad 1", 2, 32, 9, 11, 40, 1, 1, 1, 1, 1, TENSOR_F32, 0},
        {"512 -> 48, 7x6, pad 1, f16 weights", 1, 512, 7, 6, 48, 1, 1, 1, 1, 1, TENSOR_F16, 0},
        {"64 -> 64, 21x17, pad 1, no bias, 2 tile rows per task", 2, 64, 21, 17, 64, 1, 1, 1, 1,
         0, TENSOR_F32, (16 * 64 + 36 * 64) * 9 * 4 * 2},
        {"256 -> 32, 16x16, pad 1", 1, 256, 16, 16, 32, 1, 1, 1, 1, 1, TENSOR_F32, 0},
        {"8 -> 8, 1x1 image, pad 1", 2, 8, 1, 1, 8, 1, 1, 1, 1, 1, TENSOR_F32, 0},
        {"512 -> 64, 2x 17x13, pad 1", 2, 512, 17, 13, 64, 1, 1, 1, 1, 1, TENSOR_F32, 0},
        {"256 -> 48, 21x19, pad 1, f16 weights, several tile-row blocks", 1, 256, 21, 19, 48, 1,
         1, 1, 1, 1, TENSOR_F16, 1 << 20},
        {"32 -> 24, 6x5, pad 0 (not fused: the unfused path)", 1, 32, 6, 5, 24, 0, 0, 0, 0, 1,
         TENSOR_F32, 0},
    };
    for (size_t i = 0; i < sizeof(up2) / sizeof(up2[0]); i++)
        check_up2(&up2[i]);
    check_up2_bad();
    int saved43 = cpu_wino_f43;
    for (int f43 = 0; f43 <= 2; f43 += 2) { /* F(2,3), then F(4,3) (all <= 512 channels) */
        cpu_wino_f43 = f43;
        printf("# tile: F(%d,3)\n", f43 ? 4 : 2);
        /* F(2,3) tiles per row: 21 (16 + 5), 16, 35 (32 + 3); F(4,3): 11 (8 + 3), 8, 18 */
        check_vec_same(2, 40, 37, 41, 48);
        check_vec_same(1, 13, 19, 32, 24);
        check_vec_same(1, 24, 11, 70, 16);
        check_gn("gn+silu 64 -> 48, 2x 32x32", 2, 64, 32, 32, 48, 1, 1);
        check_gn("gn 128 -> 64, 19x23 (ragged)", 1, 128, 19, 23, 64, 0, 0);
        check_gn("gn+silu 32 -> 32, 17x33", 1, 32, 17, 33, 32, 1, 0);
        check_gn("gn+silu 320 -> 64, 2x 21x27 (ragged)", 2, 320, 21, 27, 64, 1, 0);
        check_dtype_same(TENSOR_F16, 64, 13, 11, 40);
        check_dtype_same(TENSOR_BF16, 40, 9, 16, 24);
    }
    cpu_wino_f43 = saved43;
    check_tile_rule();
    dev_close(D);
    tensor_shutdown();
    return harness_done();
}
