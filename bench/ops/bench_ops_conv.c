/*
 * bench_ops_conv — bench_ops --conv SIZE (issue 15): every 3x3 convolution shape of an
 * SD1.5 UNet step at SIZE^2 (256 or 512; latent SIZE/8), batch 2 as with CFG, f16
 * weights as the checkpoint stores them, each timed on the paths conv.c can take:
 *   auto    tensor_conv2d as the UNet runs it (conv.c's choice)
 *   auto32  the same on an f32 weight holding the same values (no per-call widening)
 *   im2col  cpu_conv_winograd = 0, cpu_conv_wn = 0: im2col + GEMM over the widened
 *           weight, the reference path
 *   f23     cpu_conv_winograd = 2, cpu_wino_f43 = 0: Winograd F(2x2, 3x3)
 *   f43     cpu_conv_winograd = 2, cpu_wino_f43 = 2: F(4x4, 3x3) (up to 512 input
 *           channels, where its error bound holds; "-" above)
 * Variants are interleaved within each repetition; ms are medians, GF/s are the direct
 * form's FLOPs over the median wall. "calls" is how many times one UNet step runs the
 * shape (the upsamplers' convs, fused with the nearest-2x upsample in the UNet, are
 * counted here as plain convs at their output size; the three stride-2 downsamplers are
 * left out: no Winograd for them). The closing line sums calls x ms per variant, and the
 * best variant per shape: what a perfect chooser among these paths would cost.
 */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "bench_stats.h"
#include "clock.h"
#include "device.h"
#include "tensor.h"
#include "tensor_impl.h"

void bench_ops_conv(struct dev *d, int reps, int size, const char *only);

enum { C_AUTO, C_AUTO32, C_IM2COL, C_F23, C_F43, C_N };
static const char *cname[C_N] = {"auto", "auto32", "im2col", "f23", "f43"};

struct conv_shape {
    int64_t ci, co;
    int div; /* spatial size = latent / div */
    int calls;
};

/* SD1.5's UNet (channels 320, 640, 1280, 1280; two ResBlocks down, three up per level,
 * skip concatenations feeding the up blocks' first convs): 49 stride-1 3x3 convs. */
static const struct conv_shape shapes[] = {
    {4, 320, 1, 1},      /* conv_in */
    {320, 320, 1, 7},    /* level 0: 2 down ResBlocks x 2, 3 up conv2 */
    {960, 320, 1, 1},    /* level 0 up conv1 (skip concat) */
    {640, 320, 1, 2},    /* level 0 up conv1 */
    {640, 640, 1, 1},    /* upsampler 1 -> 0 */
    {320, 4, 1, 1},      /* conv_out */
    {320, 640, 2, 1},    /* level 1 */
    {640, 640, 2, 6},    /* level 1: 3 down, 3 up conv2 */
    {1920, 640, 2, 1},   /* level 1 up conv1 */
    {1280, 640, 2, 1},   /* level 1 up conv1 */
    {960, 640, 2, 1},    /* level 1 up conv1 */
    {1280, 1280, 2, 1},  /* upsampler 2 -> 1 */
    {640, 1280, 4, 1},   /* level 2 */
    {1280, 1280, 4, 7},  /* level 2: 3 down, 3 up conv2; upsampler 3 -> 2 */
    {2560, 1280, 4, 2},  /* level 2 up conv1 */
    {1920, 1280, 4, 1},  /* level 2 up conv1 */
    {1280, 1280, 8, 11}, /* level 3: 4 down, middle 4, 3 up conv2 */
    {2560, 1280, 8, 3},  /* level 3 up conv1 */
};

static void fill(float *p, int64_t n, uint64_t s, float scale)
{
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = scale * (float)((double)(s >> 40) / 16777216.0 - 0.5);
    }
}

static struct tensor *mk(struct dev *d, enum tensor_dtype dt, int nd, const int64_t *sh)
{
    struct tensor *t;
    if (tensor_new(d, dt, nd, sh, &t, NULL) < 0)
        PANIC("alloc");
    return t;
}

struct conv_case {
    struct tensor *x, *w16, *w32, *b, *o;
};

static void run(const struct conv_case *c, int v)
{
    static const struct tensor_conv2d_opts opt = {1, 1, 1, 1, 1};
    int wino = cpu_conv_winograd, f43 = cpu_wino_f43, wn = cpu_conv_wn;
    if (v == C_IM2COL) {
        cpu_conv_winograd = 0;
        cpu_conv_wn = 0;
    }
    if (v == C_F23 || v == C_F43) {
        cpu_conv_winograd = 2;
        cpu_wino_f43 = v == C_F43 ? 2 : 0;
    }
    struct err e = {0};
    if (tensor_conv2d(c->o, c->x, v == C_AUTO32 ? c->w32 : c->w16, c->b, &opt, &e) < 0)
        PANIC("conv: %s", e.msg);
    cpu_conv_winograd = wino;
    cpu_wino_f43 = f43;
    cpu_conv_wn = wn;
}

void bench_ops_conv(struct dev *d, int reps, int size, const char *only)
{
    int64_t lat = size / 8;
    double tot[C_N] = {0}, best_tot = 0;
    if (reps > 16)
        reps = 16;
    cpu_wino_tile(64, 64, 64, 64); /* resolve LATENTD_WINO into cpu_wino_f43 first */
    printf("# conv: SD1.5 UNet 3x3 stride-1 shapes at %d^2 (latent %lld^2), batch 2, f16 "
           "weights, %d threads, %d reps interleaved; ms: medians, GF/s: direct-form FLOPs / "
           "median\n",
           size, (long long)lat, tensor__pool_threads(), reps);
    printf("%-22s %5s |", "shape", "calls");
    for (int v = 0; v < C_N; v++)
        printf(" %8s", cname[v]);
    printf(" |");
    for (int v = 0; v < C_N; v++)
        printf(" %6s", cname[v]);
    printf("  (GF/s)\n");
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        const struct conv_shape *s = &shapes[i];
        int64_t hw = lat / s->div;
        char name[64];
        snprintf(name, sizeof(name), "%lldx%lld_%lld^2", (long long)s->ci, (long long)s->co,
                 (long long)hw);
        if (only && !strstr(name, only))
            continue;
        struct conv_case c;
        c.x = mk(d, TENSOR_F32, 4, (int64_t[]){2, s->ci, hw, hw});
        c.w32 = mk(d, TENSOR_F32, 4, (int64_t[]){s->co, s->ci, 3, 3});
        c.w16 = mk(d, TENSOR_F16, 4, (int64_t[]){s->co, s->ci, 3, 3});
        c.b = mk(d, TENSOR_F32, 1, (int64_t[]){s->co});
        c.o = mk(d, TENSOR_F32, 4, (int64_t[]){2, s->co, hw, hw});
        int64_t nw = s->co * s->ci * 9;
        fill(tensor_data(c.x), 2 * s->ci * hw * hw, 1 + i, 1.0f);
        fill(tensor_data(c.w32), nw, 100 + i, 0.05f);
        fill(tensor_data(c.b), s->co, 200 + i, 0.1f);
        /* the same values in both weights */
        tensor_convert_host(tensor_data(c.w16), TENSOR_F16, tensor_data(c.w32), TENSOR_F32,
                            (size_t)nw);
        tensor_convert_host(tensor_data(c.w32), TENSOR_F32, tensor_data(c.w16), TENSOR_F16,
                            (size_t)nw);
        int has_f43 = s->ci <= 512;
        double flops = 2.0 * 2.0 * (double)(s->ci * s->co * 9 * hw * hw);
        int inner = flops < 1e9 ? (int)(1e9 / flops) : 1;
        inner = inner > 100 ? 100 : inner;
        double t[C_N][16];
        for (int v = 0; v < C_N; v++)
            if (v != C_F43 || has_f43)
                run(&c, v); /* warm-up: page faults, JIT, scratch growth */
        for (int r = 0; r < reps; r++)
            for (int v = 0; v < C_N; v++) {
                if (v == C_F43 && !has_f43)
                    continue;
                double t0 = clock_mono_sec();
                for (int q = 0; q < inner; q++)
                    run(&c, v);
                t[v][r] = (clock_mono_sec() - t0) / inner;
            }
        double ms[C_N], best = 0;
        for (int v = 0; v < C_N; v++) {
            ms[v] = v == C_F43 && !has_f43 ? -1 : bench_median(t[v], reps) * 1e3;
            if (ms[v] >= 0) {
                tot[v] += ms[v] * s->calls;
                if (v != C_AUTO32 && (best == 0 || ms[v] < best))
                    best = ms[v];
            }
        }
        if (!has_f43) /* a shape F(4,3) may not take costs what F(2,3) does in its sum */
            tot[C_F43] += ms[C_F23] * s->calls;
        best_tot += best * s->calls;
        printf("%-22s %5d |", name, s->calls);
        for (int v = 0; v < C_N; v++)
            if (ms[v] < 0)
                printf(" %8s", "-");
            else
                printf(" %8.2f", ms[v]);
        printf(" |");
        for (int v = 0; v < C_N; v++)
            if (ms[v] < 0)
                printf(" %6s", "-");
            else
                printf(" %6.1f", flops / (ms[v] * 1e-3) / 1e9);
        printf("\n");
        fflush(stdout);
        tensor_free(c.x);
        tensor_free(c.w32);
        tensor_free(c.w16);
        tensor_free(c.b);
        tensor_free(c.o);
    }
    printf("# one UNet step's 3x3 stride-1 convs (calls x median ms):");
    for (int v = 0; v < C_N; v++)
        printf(" %s %.1f", cname[v], tot[v]);
    printf("; best per shape (f16 weights) %.1f\n", best_tot);
}
