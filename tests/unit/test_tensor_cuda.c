/*
 * test_tensor_cuda — every op on the CUDA backend against the same op on the CPU
 * backend (itself tested against naive references in test_tensor_cpu), with a
 * per-dtype tolerance on normalised error (max |gpu - cpu| / max(1, max |cpu|)),
 * in the spirit of ggml's test-backend-ops. Skips (77) without a usable GPU.
 */
#include <math.h>

#include "alloc.h"
#include "device.h"
#include "harness.h"
#include "tensor.h"

static struct dev *C, *G;
static const enum tensor_dtype DTS[3] = {TENSOR_F32, TENSOR_F16, TENSOR_BF16};
static uint64_t rng = 0x2545F4914F6CDD1Dull;

static float frand(void)
{
    return harness_frand(&rng);
}

static struct tensor *mk(enum tensor_dtype dt, int nd, const int64_t *sh, float a)
{
    struct tensor *t;
    if (tensor_new(C, dt, nd, sh, &t, NULL) < 0)
        PANIC("alloc");
    int64_t n = tensor_numel(t);
    float *v = xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        v[i] = frand() * a;
    tensor_write_f32(t, v, n, NULL);
    xfree(v);
    return t;
}

/* A copy of host tensor t on the GPU. */
static struct tensor *up(const struct tensor *t)
{
    struct tensor *g;
    if (!t)
        return NULL;
    if (tensor_new(G, t->dtype, t->ndim, t->shape, &g, NULL) < 0)
        PANIC("gpu alloc");
    if (tensor_copy(g, t, NULL) < 0)
        PANIC("upload");
    return g;
}

static struct tensor *like(const struct tensor *t, struct dev *d)
{
    struct tensor *o;
    if (tensor_new(d, t->dtype, t->ndim, t->shape, &o, NULL) < 0)
        PANIC("alloc");
    return o;
}

static double tol_of(enum tensor_dtype dt)
{
    return dt == TENSOR_F32 ? 1e-4 : dt == TENSOR_F16 ? 1e-2 : 5e-2;
}

static void cmp(const char *what, const struct tensor *cpu, const struct tensor *gpu)
{
    int64_t n = tensor_numel(cpu);
    float *a = xmalloc((size_t)n * sizeof(float)), *b = xmalloc((size_t)n * sizeof(float));
    tensor_read_f32(cpu, a, n, NULL);
    tensor_read_f32(gpu, b, n, NULL);
    double md = 0, mr = 1;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        md = d > md || isnan(d) ? (isnan(d) ? INFINITY : d) : md;
        mr = fabs(a[i]) > mr ? fabs(a[i]) : mr;
    }
    ok(md / mr <= tol_of(cpu->dtype), "%s [%s]: normalised error %.3g (tol %.3g)", what,
       tensor_dtype_name(cpu->dtype), md / mr, tol_of(cpu->dtype));
    xfree(a);
    xfree(b);
}

#define FREE(...)                                                                          \
    do {                                                                                   \
        struct tensor *fr__[] = {__VA_ARGS__};                                             \
        for (size_t i__ = 0; i__ < sizeof(fr__) / sizeof(fr__[0]); i__++)                  \
            tensor_free(fr__[i__]);                                                        \
    } while (0)

static void test_dt(enum tensor_dtype dt)
{
    struct err e = {0};
    /* copy with a permuted view, and conversion to another dtype on the device */
    {
        struct tensor *x = mk(dt, 3, (int64_t[]){3, 5, 7}, 2), *gx = up(x), *pv, *gpv, *o, *go;
        tensor_permute(x, (int[]){2, 0, 1}, &pv, NULL);
        tensor_permute(gx, (int[]){2, 0, 1}, &gpv, NULL);
        tensor_new(C, TENSOR_F32, 3, (int64_t[]){7, 3, 5}, &o, NULL);
        tensor_new(G, TENSOR_F32, 3, (int64_t[]){7, 3, 5}, &go, NULL);
        EXPECT_OK(tensor_copy(o, pv, &e));
        EXPECT_OK(tensor_copy(go, gpv, &e));
        cmp("copy permuted + convert", o, go);
        FREE(x, gx, pv, gpv, o, go);
    }
    /* matmul with broadcast batch and transposes */
    for (int tr = 0; tr < 4; tr++) {
        int ta = tr & 1, tb = tr >> 1;
        struct tensor *a = mk(dt, 4, ta ? (int64_t[]){2, 3, 33, 17} : (int64_t[]){2, 3, 17, 33}, 1);
        struct tensor *b = mk(dt, 3, tb ? (int64_t[]){3, 9, 33} : (int64_t[]){3, 33, 9}, 1);
        struct tensor *ga = up(a), *gb = up(b), *o, *go;
        tensor_new(C, dt, 4, (int64_t[]){2, 3, 17, 9}, &o, NULL);
        go = like(o, G);
        EXPECT_OK(tensor_matmul(o, a, b, ta, tb, 0.7f, &e));
        EXPECT_OK(tensor_matmul(go, ga, gb, ta, tb, 0.7f, &e));
        cmp(ta ? (tb ? "matmul a^T b^T" : "matmul a^T") : (tb ? "matmul b^T" : "matmul"), o, go);
        FREE(a, b, ga, gb, o, go);
    }
    /* linear */
    {
        struct tensor *x = mk(dt, 3, (int64_t[]){2, 11, 40}, 1), *w = mk(dt, 2, (int64_t[]){24, 40}, 1);
        struct tensor *b = mk(dt, 1, (int64_t[]){24}, 1), *o, *go;
        struct tensor *gx = up(x), *gw = up(w), *gb = up(b);
        tensor_new(C, dt, 3, (int64_t[]){2, 11, 24}, &o, NULL);
        go = like(o, G);
        EXPECT_OK(tensor_linear(o, x, w, b, &e));
        EXPECT_OK(tensor_linear(go, gx, gw, gb, &e));
        cmp("linear", o, go);
        FREE(x, w, b, o, go, gx, gw, gb);
    }
    /* conv2d: 3x3 pad 1, stride 2 (unet), stride 2 pad br (vae), 1x1 */
    {
        struct tensor_conv2d_opts opts[4] = {{1, 1, 1, 1, 1}, {2, 1, 1, 1, 1}, {2, 0, 1, 0, 1},
                                             {1, 0, 0, 0, 0}};
        const char *names[4] = {"conv 3x3", "conv 3x3 s2", "conv vae down", "conv 1x1"};
        for (int i = 0; i < 4; i++) {
            int64_t k = i == 3 ? 1 : 3, ho, wo;
            tensor_conv2d_out_hw(&opts[i], 13, 10, k, k, &ho, &wo);
            struct tensor *x = mk(dt, 4, (int64_t[]){2, 6, 13, 10}, 1);
            struct tensor *w = mk(dt, 4, (int64_t[]){8, 6, k, k}, 0.5f), *b = mk(dt, 1, (int64_t[]){8}, 1);
            struct tensor *gx = up(x), *gw = up(w), *gb = up(b), *o, *go;
            tensor_new(C, dt, 4, (int64_t[]){2, 8, ho, wo}, &o, NULL);
            go = like(o, G);
            EXPECT_OK(tensor_conv2d(o, x, w, b, &opts[i], &e));
            EXPECT_OK(tensor_conv2d(go, gx, gw, gb, &opts[i], &e));
            cmp(names[i], o, go);
            FREE(x, w, b, gx, gw, gb, o, go);
        }
    }
    /* norms (stats in f32 on the GPU) */
    for (int silu = 0; silu < 2; silu++) {
        struct tensor *x = mk(dt, 4, (int64_t[]){2, 64, 9, 7}, 3), *g = mk(TENSOR_F32, 1, (int64_t[]){64}, 1);
        struct tensor *b = mk(TENSOR_F32, 1, (int64_t[]){64}, 1), *gx = up(x), *gg = up(g), *gb = up(b);
        struct tensor *o = like(x, C), *go = like(x, G);
        EXPECT_OK(tensor_group_norm(o, x, 32, g, b, 1e-6f, silu, &e));
        EXPECT_OK(tensor_group_norm(go, gx, 32, gg, gb, 1e-6f, silu, &e));
        cmp(silu ? "group_norm + silu" : "group_norm", o, go);
        FREE(x, g, b, gx, gg, gb, o, go);
    }
    {
        struct tensor *x = mk(dt, 3, (int64_t[]){2, 77, 96}, 2), *g = mk(dt, 1, (int64_t[]){96}, 1);
        struct tensor *b = mk(dt, 1, (int64_t[]){96}, 1), *gx = up(x), *gg = up(g), *gb = up(b);
        struct tensor *o = like(x, C), *go = like(x, G);
        EXPECT_OK(tensor_layer_norm(o, x, g, b, 1e-5f, &e));
        EXPECT_OK(tensor_layer_norm(go, gx, gg, gb, 1e-5f, &e));
        cmp("layer_norm", o, go);
        FREE(x, g, b, gx, gg, gb, o, go);
    }
    /* activations, softmax, geglu */
    {
        struct tensor *x = mk(dt, 2, (int64_t[]){13, 71}, 6), *gx = up(x);
        struct tensor *o = like(x, C), *go = like(x, G);
        EXPECT_OK(tensor_silu(o, x, &e));
        EXPECT_OK(tensor_silu(go, gx, &e));
        cmp("silu", o, go);
        EXPECT_OK(tensor_gelu(o, x, &e));
        EXPECT_OK(tensor_gelu(go, gx, &e));
        cmp("gelu", o, go);
        EXPECT_OK(tensor_quick_gelu(o, x, &e));
        EXPECT_OK(tensor_quick_gelu(go, gx, &e));
        cmp("quick_gelu", o, go);
        EXPECT_OK(tensor_softmax(o, x, &e));
        EXPECT_OK(tensor_softmax(go, gx, &e));
        cmp("softmax", o, go);
        EXPECT_OK(tensor_scale(o, x, -0.3f, &e));
        EXPECT_OK(tensor_scale(go, gx, -0.3f, &e));
        cmp("scale", o, go);
        EXPECT_OK(tensor_clamp(o, x, -1.0f, 0.5f, &e));
        EXPECT_OK(tensor_clamp(go, gx, -1.0f, 0.5f, &e));
        cmp("clamp", o, go);
        FREE(x, gx, o, go);
        struct tensor *x2 = mk(dt, 3, (int64_t[]){1, 9, 40}, 3), *gx2 = up(x2), *o2, *go2;
        tensor_new(C, dt, 3, (int64_t[]){1, 9, 20}, &o2, NULL);
        go2 = like(o2, G);
        EXPECT_OK(tensor_geglu(o2, x2, &e));
        EXPECT_OK(tensor_geglu(go2, gx2, &e));
        cmp("geglu", o2, go2);
        FREE(x2, gx2, o2, go2);
    }
    /* attention: self (several query chunks are not forced here, but heads and odd T are),
     * cross, causal */
    for (int kind = 0; kind < 3; kind++) {
        int64_t tq = 67, tk = kind == 1 ? 77 : 67, c = 64;
        struct tensor *q = mk(dt, 3, (int64_t[]){2, tq, c}, 1), *k = mk(dt, 3, (int64_t[]){2, tk, c}, 1);
        struct tensor *v = mk(dt, 3, (int64_t[]){2, tk, c}, 1), *o = like(q, C), *go = like(q, G);
        struct tensor *gq = up(q), *gk = up(k), *gv = up(v);
        unsigned fl = kind == 2 ? TENSOR_ATTN_CAUSAL : 0;
        EXPECT_OK(tensor_attention(o, q, k, v, 8, 0.0f, fl, &e));
        EXPECT_OK(tensor_attention(go, gq, gk, gv, 8, 0.0f, fl, &e));
        cmp(kind == 0 ? "attention self" : kind == 1 ? "attention cross" : "attention causal", o, go);
        FREE(q, k, v, o, go, gq, gk, gv);
    }
    /* elementwise with broadcasting, lincomb, concat, upsample, embedding, timestep */
    {
        struct tensor *a = mk(dt, 4, (int64_t[]){2, 6, 5, 3}, 2), *b = mk(dt, 4, (int64_t[]){2, 6, 1, 1}, 2);
        struct tensor *ga = up(a), *gb = up(b), *o = like(a, C), *go = like(a, G);
        EXPECT_OK(tensor_add(o, a, b, &e));
        EXPECT_OK(tensor_add(go, ga, gb, &e));
        cmp("add broadcast", o, go);
        EXPECT_OK(tensor_mul(o, a, b, &e));
        EXPECT_OK(tensor_mul(go, ga, gb, &e));
        cmp("mul broadcast", o, go);
        const struct tensor *in[3] = {a, o, a}, *gin[3] = {ga, go, ga};
        float coef[3] = {0.5f, -1.5f, 2.0f};
        EXPECT_OK(tensor_lincomb(o, 3, coef, in, &e));
        EXPECT_OK(tensor_lincomb(go, 3, coef, gin, &e));
        cmp("lincomb (aliasing)", o, go);
        struct tensor *cc, *gcc;
        tensor_new(C, dt, 4, (int64_t[]){2, 12, 5, 3}, &cc, NULL);
        gcc = like(cc, G);
        EXPECT_OK(tensor_concat(cc, a, o, 1, &e));
        EXPECT_OK(tensor_concat(gcc, ga, go, 1, &e));
        cmp("concat", cc, gcc);
        struct tensor *u, *gu;
        tensor_new(C, dt, 4, (int64_t[]){2, 6, 9, 7}, &u, NULL);
        gu = like(u, G);
        EXPECT_OK(tensor_upsample_nearest(u, a, &e));
        EXPECT_OK(tensor_upsample_nearest(gu, ga, &e));
        cmp("upsample nearest 5x3 -> 9x7", u, gu);
        FREE(a, b, ga, gb, o, go, cc, gcc, u, gu);
        struct tensor *tab = mk(dt, 2, (int64_t[]){50, 16}, 1), *gtab = up(tab), *eo, *geo;
        int32_t ids[7] = {0, 49, 3, 3, 17, 8, 1};
        tensor_new(C, dt, 2, (int64_t[]){7, 16}, &eo, NULL);
        geo = like(eo, G);
        EXPECT_OK(tensor_embedding(eo, tab, ids, 7, &e));
        EXPECT_OK(tensor_embedding(geo, gtab, ids, 7, &e));
        cmp("embedding", eo, geo);
        float ts[2] = {1.0f, 981.0f};
        struct tensor *te, *gte;
        tensor_new(C, dt, 2, (int64_t[]){2, 320}, &te, NULL);
        gte = like(te, G);
        EXPECT_OK(tensor_timestep_embedding(te, ts, 2, &e));
        EXPECT_OK(tensor_timestep_embedding(gte, ts, 2, &e));
        cmp("timestep embedding", te, gte);
        FREE(tab, gtab, eo, geo, te, gte);
    }
    /* the upscale models' ops: leaky_relu, prelu, pixel (un)shuffle (reflect-padded) */
    {
        struct tensor *a = mk(dt, 4, (int64_t[]){2, 8, 5, 3}, 2), *sl = mk(dt, 1, (int64_t[]){8}, 1);
        struct tensor *ga = up(a), *gsl = up(sl), *o = like(a, C), *go = like(a, G);
        EXPECT_OK(tensor_leaky_relu(o, a, 0.2f, &e));
        EXPECT_OK(tensor_leaky_relu(go, ga, 0.2f, &e));
        cmp("leaky_relu", o, go);
        EXPECT_OK(tensor_prelu(o, a, sl, &e));
        EXPECT_OK(tensor_prelu(go, ga, gsl, &e));
        cmp("prelu", o, go);
        struct tensor *ps, *gps, *us, *gus;
        tensor_new(C, dt, 4, (int64_t[]){2, 2, 10, 6}, &ps, NULL);
        gps = like(ps, G);
        EXPECT_OK(tensor_pixel_shuffle(ps, a, 2, &e));
        EXPECT_OK(tensor_pixel_shuffle(gps, ga, 2, &e));
        cmp("pixel_shuffle x2", ps, gps);
        tensor_new(C, dt, 4, (int64_t[]){2, 32, 2, 1}, &us, NULL);
        gus = like(us, G);
        EXPECT_OK(tensor_pixel_unshuffle(us, a, 4, &e)); /* 5x3 reflect-padded to 8x4 */
        EXPECT_OK(tensor_pixel_unshuffle(gus, ga, 4, &e));
        cmp("pixel_unshuffle x4 (reflect pad)", us, gus);
        FREE(a, sl, ga, gsl, o, go, ps, gps, us, gus);
    }
}

int main(void)
{
    struct err e = {0};
    if (dev_cuda_count() <= 0)
        SKIP("no CUDA device");
    if (dev_open("cuda", 0, &G, &e) < 0)
        SKIP("cannot open a CUDA device: %s", e.msg);
    if (dev_open("cpu", 0, &C, &e) < 0) {
        ok(0, "open cpu: %s", e.msg);
        return harness_done();
    }
    long live0 = alloc_live_count();
    for (int i = 0; i < 3; i++)
        test_dt(DTS[i]);
    EXPECT_EQ(dev_bytes_used(C), 0);
    EXPECT_EQ(dev_bytes_used(G), 0);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    dev_close(G);
    dev_close(C);
    return harness_done();
}
