/*
 * bench_ops — GFLOP/s of the tensor ops on SD1.5's real shapes, each as a fraction
 * of a plain sgemm measured in the same process (these machines are shared and
 * noisy: only ratios from one run mean anything).
 *
 * Prints one line per case: "case <name> <gflops> <ms> <checksum>", then the
 * ratios to two reference sgemms (OpenBLAS's and ours, 1024^3) that are timed
 * between the repetitions of each case, so both sides of a ratio see the same
 * load. bench/ops/run.sh runs it several times, interleaving the environment
 * as given with OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset, checks that the
 * checksums agree and prints medians.
 *
 * dispatch_64f_x20000 times the op entry points themselves (add, mul, scale, axpby
 * on 64 floats): its "GFLOP/s" is M calls/s.
 *
 * Options: --reps N (default 3, median taken), --bq N --bk N (attention tiles),
 * --fbk N (keys per block of the fused attention, AVX-512 or AVX2), --attn-ref (the
 * blocked-sgemm attention, not a fused kernel), --conv-ref (im2col + GEMM for every conv),
 * --conv-wino (Winograd for every 3x3 stride-1 conv), --wchunk BYTES (Winograd's
 * per-task V + M), --threads N,
 * --cols BYTES (im2col chunk), --only SUBSTR, --linear (only bench_ops_linear.c's table:
 * the SD1.5 UNet's Linear shapes against sgemm), --conv SIZE (only bench_ops_conv.c's
 * table: the UNet's 3x3 convs at SIZE^2 on each conv path), --bf16 (those two tables at
 * bf16 precision, as --bf16-unet runs them), --gpu (also the CUDA cases: f16 GEMM,
 * conv and attention as a fraction of cuBLAS's f16 GEMM rate, and pinned vs pageable
 * host-to-device GB/s; "none" without a GPU).
 *
 * Last, the bf16 section (bench_ops_bf16.c, issue 15): vdpbf16ps and fp32 FMA peaks
 * measured here, and bf16 GEMM ops beside fp32 as fractions of them (--only bf16).
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "bench_stats.h"
#include "clock.h"
#include "device.h"
#include "tensor.h"
#include "tensor_impl.h"
#include "tensor_precision.h"
#include "cpu/gemm_wn.h"

void bench_ops_bf16(struct dev *d, int reps, const char *only);   /* bench_ops_bf16.c */
void bench_ops_linear(struct dev *d, int reps, const char *only); /* bench_ops_linear.c */
void bench_ops_conv(struct dev *d, int reps, int size, const char *only); /* bench_ops_conv.c */

static struct dev *D;
static struct dev *G; /* CUDA device when present */
static int reps = 3;
static const char *only;


static struct tensor *rnd(int nd, const int64_t *sh)
{
    struct tensor *t;
    if (tensor_new(D, TENSOR_F32, nd, sh, &t, NULL) < 0)
        PANIC("alloc");
    float *p = tensor_data(t);
    uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t)tensor_numel(t);
    for (int64_t i = 0; i < tensor_numel(t); i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((double)(s >> 40) / 16777216.0 - 0.5);
    }
    return t;
}

static double checksum(const struct tensor *t)
{
    const float *p = tensor_data(t);
    double s = 0;
    for (int64_t i = 0; i < tensor_numel(t); i++)
        s += fabs((double)p[i]);
    return s;
}

struct result {
    char name[64];
    double gflops;
    double ob, ours; /* reference sgemm rates measured interleaved with this case */
    double cpu_gf, ours_cpu; /* the same per CPU-second (ours only) */
};
static struct result res[32];
static int nres;

typedef void (*run_fn)(void *ctx);

/* Reference GEMMs (1024^3) timed between the repetitions of every case, so that each
 * ratio compares rates measured within the same second on this noisy machine. */
#define REF_N 1024
static float *ref_a, *ref_b, *ref_c;

static double ref_cpu_rate; /* the last ref_rate(1) per CPU-second */

static double ref_rate(int ours)
{
    double t0 = clock_mono_sec(), c0 = clock_process_cpu_sec();
    if (ours)
        cpu_sgemm(0, 0, REF_N, REF_N, REF_N, 1.0f, ref_a, REF_N, ref_b, REF_N, 0.0f, ref_c, REF_N, 0);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, REF_N, REF_N, REF_N, 1.0f, ref_a,
                    REF_N, ref_b, REF_N, 0.0f, ref_c, REF_N);
    if (ours)
        ref_cpu_rate = 2.0 * REF_N * REF_N * REF_N / (clock_process_cpu_sec() - c0) / 1e9;
    return 2.0 * REF_N * REF_N * REF_N / (clock_mono_sec() - t0) / 1e9;
}


static double bench(const char *name, double flops, run_fn fn, void *ctx, const struct tensor *out)
{
    if (only && !strstr(name, only))
        return 0;
    double t[16], ob[16], ours[16], ct[16], ocpu[16];
    fn(ctx); /* warm-up: page faults, pool start, JIT */
    for (int r = 0; r < reps; r++) {
        double t0 = clock_mono_sec(), c0 = clock_process_cpu_sec();
        fn(ctx);
        t[r] = clock_mono_sec() - t0;
        ct[r] = clock_process_cpu_sec() - c0;
        ours[r] = ref_rate(1);
        ocpu[r] = ref_cpu_rate;
        ob[r] = ref_rate(0);
    }
    double med = bench_median(t, reps);
    double gf = flops / med / 1e9, cgf = flops / bench_median(ct, reps) / 1e9;
    printf("case %-34s %8.1f GFLOP/s %9.2f ms %8.1f GF/cpu-s  sum %.6e\n", name, gf, med * 1e3,
           cgf, out ? checksum(out) : 0.0);
    fflush(stdout);
    snprintf(res[nres].name, sizeof(res[nres].name), "%s", name);
    res[nres].gflops = gf;
    res[nres].ob = bench_median(ob, reps);
    res[nres].cpu_gf = cgf;
    res[nres].ours_cpu = bench_median(ocpu, reps);
    res[nres++].ours = bench_median(ours, reps);
    return gf;
}

/* ---- cases ------------------------------------------------------------------------- */

struct gemm_ctx {
    int n;
    float *a, *b, *c;
    int ours;
};

static void run_gemm(void *p)
{
    struct gemm_ctx *g = p;
    if (g->ours)
        cpu_sgemm(0, 0, g->n, g->n, g->n, 1.0f, g->a, g->n, g->b, g->n, 0.0f, g->c, g->n, 0);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->n, g->n, g->n, 1.0f, g->a,
                    g->n, g->b, g->n, 0.0f, g->c, g->n);
}

struct conv_ctx {
    struct tensor *x, *w, *b, *o;
    struct tensor_conv2d_opts opt;
};

static void run_conv(void *p)
{
    struct conv_ctx *c = p;
    struct err e = {0};
    if (tensor_conv2d(c->o, c->x, c->w, c->b, &c->opt, &e) < 0)
        PANIC("conv: %s", e.msg);
}

static double conv_case(const char *name, int64_t c, int64_t hw, int64_t co)
{
    struct conv_ctx x = {0};
    x.opt = (struct tensor_conv2d_opts){1, 1, 1, 1, 1};
    x.x = rnd(4, (int64_t[]){1, c, hw, hw});
    x.w = rnd(4, (int64_t[]){co, c, 3, 3});
    x.b = rnd(1, (int64_t[]){co});
    tensor_new(D, TENSOR_F32, 4, (int64_t[]){1, co, hw, hw}, &x.o, NULL);
    double gf = bench(name, 2.0 * (double)(co * c * 9 * hw * hw), run_conv, &x, x.o);
    tensor_free(x.x);
    tensor_free(x.w);
    tensor_free(x.b);
    tensor_free(x.o);
    return gf;
}

struct attn_ctx {
    struct tensor *q, *k, *v, *o;
    int heads;
};

static void run_attn(void *p)
{
    struct attn_ctx *a = p;
    struct err e = {0};
    if (tensor_attention(a->o, a->q, a->k, a->v, a->heads, 0.0f, 0, &e) < 0)
        PANIC("attention: %s", e.msg);
}

static double attn_case(const char *name, int64_t b, int64_t tq, int64_t tk, int64_t c)
{
    struct attn_ctx a = {0};
    a.heads = 8;
    a.q = rnd(3, (int64_t[]){b, tq, c});
    a.k = rnd(3, (int64_t[]){b, tk, c});
    a.v = rnd(3, (int64_t[]){b, tk, c});
    tensor_new(D, TENSOR_F32, 3, (int64_t[]){b, tq, c}, &a.o, NULL);
    double gf = bench(name, 4.0 * (double)(b * tq * tk * c), run_attn, &a, a.o);
    tensor_free(a.q);
    tensor_free(a.k);
    tensor_free(a.v);
    tensor_free(a.o);
    return gf;
}

struct lin_ctx {
    struct tensor *x, *w, *b, *o;
};

static void run_lin(void *p)
{
    struct lin_ctx *l = p;
    struct err e = {0};
    if (tensor_linear(l->o, l->x, l->w, l->b, &e) < 0)
        PANIC("linear: %s", e.msg);
}

static double lin_case(const char *name, int64_t rows, int64_t k, int64_t n)
{
    struct lin_ctx l;
    l.x = rnd(2, (int64_t[]){rows, k});
    l.w = rnd(2, (int64_t[]){n, k});
    l.b = rnd(1, (int64_t[]){n});
    tensor_new(D, TENSOR_F32, 2, (int64_t[]){rows, n}, &l.o, NULL);
    double gf = bench(name, 2.0 * (double)(rows * k * n), run_lin, &l, l.o);
    tensor_free(l.x);
    tensor_free(l.w);
    tensor_free(l.b);
    tensor_free(l.o);
    return gf;
}

/* Op dispatch cost: ops on 64 floats, so the entry points (checks, backend choice,
 * adapters) dominate, not the kernels. 1000 "flops" per op call, so GFLOP/s reads as
 * M calls/s, and ms * 50 is ns per call. */
#define DISPATCH_CALLS 20000
struct disp_ctx {
    struct tensor *a, *b, *o;
};

static void run_dispatch(void *p)
{
    struct disp_ctx *d = p;
    struct err e = {0};
    for (int i = 0; i < DISPATCH_CALLS / 4; i++)
        if (tensor_add(d->o, d->a, d->b, &e) < 0 || tensor_mul(d->o, d->o, d->b, &e) < 0 ||
            tensor_scale(d->o, d->o, 0.5f, &e) < 0 || tensor_axpby(d->o, 0.5f, d->o, 0.5f, d->a, &e) < 0)
            PANIC("dispatch: %s", e.msg);
}

struct gn_ctx {
    struct tensor *x, *g, *b;
};

static void run_gn(void *p)
{
    struct gn_ctx *g = p;
    struct err e = {0};
    if (tensor_group_norm(g->x, g->x, 32, g->g, g->b, 1e-5f, 1, &e) < 0)
        PANIC("gn: %s", e.msg);
}


/* ---- GPU (only when a CUDA device is usable) ---------------------------------------- */

struct gpu_ctx {
    int kind; /* 0 matmul, 1 conv, 2 attention */
    struct tensor *a, *b, *c, *o;
    struct tensor_conv2d_opts opt;
};

static void run_gpu(void *p)
{
    struct gpu_ctx *g = p;
    struct err e = {0};
    int rc = g->kind == 0 ? tensor_matmul(g->o, g->a, g->b, 0, 0, 1.0f, &e)
             : g->kind == 1 ? tensor_conv2d(g->o, g->a, g->b, g->c, &g->opt, &e)
                            : tensor_attention(g->o, g->a, g->b, g->c, 8, 0.0f, 0, &e);
    if (rc < 0)
        PANIC("gpu op: %s", e.msg);
    dev_stream_sync(dev_compute_stream(G));
}

static struct tensor *gnew(int nd, const int64_t *sh)
{
    struct tensor *t;
    if (tensor_new(G, TENSOR_F16, nd, sh, &t, NULL) < 0)
        PANIC("gpu alloc");
    tensor_fill(t, 0.01f, NULL);
    return t;
}

static void gpu_section(void)
{
    struct err e = {0};
    if (dev_cuda_count() <= 0 || dev_open("cuda", 0, &G, &e) < 0) {
        printf("# gpu: none (%s)\n", e.msg[0] ? e.msg : "no CUDA device");
        return;
    }
    printf("# gpu: %s, f16 storage, f32 accumulation\n", dev_name(G));
    int saved = nres;
    struct gpu_ctx g = {0};
    g.kind = 0;
    g.a = gnew(2, (int64_t[]){8192, 8192});
    g.b = gnew(2, (int64_t[]){8192, 8192});
    g.o = gnew(2, (int64_t[]){8192, 8192});
    double peak = bench("gpu_cublas_gemm_8192_f16", 2.0 * 8192.0 * 8192.0 * 8192.0, run_gpu, &g, NULL);
    tensor_free(g.a);
    tensor_free(g.b);
    tensor_free(g.o);
    g.kind = 1;
    g.opt = (struct tensor_conv2d_opts){1, 1, 1, 1, 1};
    g.a = gnew(4, (int64_t[]){2, 320, 64, 64});
    g.b = gnew(4, (int64_t[]){320, 320, 3, 3});
    g.c = gnew(1, (int64_t[]){320});
    g.o = gnew(4, (int64_t[]){2, 320, 64, 64});
    bench("gpu_conv3x3_64x64x320_b2", 2.0 * 2 * 320 * 320 * 9 * 64 * 64, run_gpu, &g, NULL);
    tensor_free(g.a);
    tensor_free(g.b);
    tensor_free(g.c);
    tensor_free(g.o);
    g.kind = 2;
    g.a = gnew(3, (int64_t[]){2, 4096, 320});
    g.b = gnew(3, (int64_t[]){2, 4096, 320});
    g.c = gnew(3, (int64_t[]){2, 4096, 320});
    g.o = gnew(3, (int64_t[]){2, 4096, 320});
    bench("gpu_attn_self_4096tok_8x40_b2", 4.0 * 2 * 4096.0 * 4096.0 * 320, run_gpu, &g, NULL);
    tensor_free(g.a);
    tensor_free(g.b);
    tensor_free(g.c);
    tensor_free(g.o);
    for (int i = saved + 1; i < nres; i++)
        printf("ratio %-34s %6.2f (of cuBLAS f16 GEMM)\n", res[i].name, res[i].gflops / peak);
    /* host -> device bandwidth, pinned vs pageable, 256 MiB */
    size_t bytes = (size_t)256 << 20;
    void *dmem = NULL, *pinned = NULL;
    int is_pinned = 0;
    char *pageable = xmalloc(bytes);
    memset(pageable, 1, bytes);
    if (dev_alloc(G, bytes, &dmem) == 0 && dev_host_alloc(G, bytes, &pinned, &is_pinned) == 0) {
        memset(pinned, 1, bytes);
        for (int w = 0; w < 2; w++) {
            double t0 = clock_mono_sec();
            for (int r = 0; r < 3; r++)
                dev_copy(G, DEV_COPY_H2D, dmem, w ? pinned : pageable, bytes);
            double gbs = 3.0 * (double)bytes / (clock_mono_sec() - t0) / 1e9;
            printf("case %-34s %8.1f GB/s\n", w ? "gpu_h2d_pinned" : "gpu_h2d_pageable", gbs);
        }
        printf("# pinned allocation really pinned: %s\n", is_pinned ? "yes" : "no");
    }
    dev_host_free(G, pinned);
    dev_free(G, dmem);
    xfree(pageable);
    dev_close(G);
}

int main(int argc, char **argv)
{
    struct err e = {0};
    int do_gpu = 0, do_linear = 0, conv_size = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bq") && i + 1 < argc)
            cpu_attn_bq = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bk") && i + 1 < argc)
            cpu_attn_bk = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--fbk") && i + 1 < argc)
            cpu_fattn_bk = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--attn-ref"))
            cpu_attn_fused = 0;
        else if (!strcmp(argv[i], "--conv-ref"))
            cpu_conv_winograd = 0;
        else if (!strcmp(argv[i], "--conv-wino"))
            cpu_conv_winograd = 2;
        else if (!strcmp(argv[i], "--wchunk") && i + 1 < argc)
            cpu_wino_chunk_bytes = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            tensor_threads_set(atoi(argv[++i]));
        else if (!strcmp(argv[i], "--cols") && i + 1 < argc)
            cpu_conv_cols_bytes = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--gpu"))
            do_gpu = 1;
        else if (!strcmp(argv[i], "--linear"))
            do_linear = 1;
        else if (!strcmp(argv[i], "--conv") && i + 1 < argc)
            conv_size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--wn-avx2")) /* gemm_wn.c's AVX2 kernel on AVX-512 CPUs */
            cpu_gemm_wn_avx512 = 0;
        else if (!strcmp(argv[i], "--bf16v-px") && i + 1 < argc) /* conv.c's small-image */
            cpu_conv_bf16v_max_px = atoi(argv[++i]);             /* AVX-512 BF16 path (0: off) */
        else if (!strcmp(argv[i], "--bf16")) /* the --linear / --conv tables at bf16 */
            tensor_precision_set(TENSOR_PRECISION_BF16);
        else {
            fprintf(stderr, "usage: bench_ops [--reps N] [--bq N] [--bk N] [--fbk N] [--attn-ref] "
                            "[--conv-ref] [--conv-wino] [--wchunk B] [--threads N] [--cols B] "
                            "[--only S] [--gpu] [--linear] [--conv 256|512] [--bf16] [--wn-avx2] "
                            "[--bf16v-px N]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 15)
        reps = 3;
    if (dev_open("cpu", 0, &D, &e) < 0) {
        fprintf(stderr, "bench_ops: %s\n", e.msg);
        return 1;
    }
    const char *ct = getenv("OPENBLAS_CORETYPE"), *l2 = getenv("OPENBLAS_L2_SIZE");
    printf("# threads %d, gemm backend %s, openblas core %s (OPENBLAS_CORETYPE=%s "
           "OPENBLAS_L2_SIZE=%s), attention %s (tiles %dx%d, fused key block %d), im2col chunk "
           "%zu bytes, conv winograd %s (chunk %zu bytes)\n",
           tensor_threads_get(), cpu_gemm_backend(), openblas_get_corename(), ct ? ct : "(unset)",
           l2 ? l2 : "(unset)",
           cpu_attn_fused == 1 && cpu_attention_avx512_usable() ? "avx512 fused"
           : cpu_attn_fused && cpu_attention_avx2_usable()      ? "avx2 fused"
                                                                : "blocked sgemm",
           cpu_attn_bq, cpu_attn_bk, cpu_fattn_bk, cpu_conv_cols_bytes,
           cpu_conv_winograd == 0 ? "off" : cpu_conv_winograd == 2 ? "always" : "where it pays",
           cpu_wino_chunk_bytes);
    if (do_linear || conv_size) { /* only the UNet's Linear or conv shapes (--only filters) */
        if (do_linear)
            bench_ops_linear(D, reps, only);
        if (conv_size)
            bench_ops_conv(D, reps, conv_size, only);
        dev_close(D);
        tensor_shutdown();
        return 0;
    }

    ref_a = xmalloc_aligned(64, REF_N * REF_N * 4);
    ref_b = xmalloc_aligned(64, REF_N * REF_N * 4);
    ref_c = xmalloc_aligned(64, REF_N * REF_N * 4);
    for (int i = 0; i < REF_N * REF_N; i++) {
        ref_a[i] = (float)(i % 17) * 0.05f - 0.4f;
        ref_b[i] = (float)(i % 19) * 0.05f - 0.45f;
    }
    struct gemm_ctx g = {2048, NULL, NULL, NULL, 0};
    g.a = xmalloc_aligned(64, 2048u * 2048u * 4u);
    g.b = xmalloc_aligned(64, 2048u * 2048u * 4u);
    g.c = xmalloc_aligned(64, 2048u * 2048u * 4u);
    for (int i = 0; i < 2048 * 2048; i++) {
        g.a[i] = (float)((i * 7) % 13) * 0.1f - 0.6f;
        g.b[i] = (float)((i * 5) % 11) * 0.1f - 0.5f;
    }
    double flops = 2.0 * 2048.0 * 2048.0 * 2048.0;
    const char *so = only;
    only = NULL;
    double ob = bench("sgemm_openblas_2048", flops, run_gemm, &g, NULL);
    g.ours = 1;
    double ours = bench("sgemm_ours_2048", flops, run_gemm, &g, NULL);
    only = so;
    xfree_aligned(g.a);
    xfree_aligned(g.b);
    xfree_aligned(g.c);

    conv_case("conv3x3_64x64x320", 320, 64, 320);
    conv_case("conv3x3_32x32x640", 640, 32, 640);
    conv_case("conv3x3_16x16x1280", 1280, 16, 1280);
    attn_case("attn_self_4096tok_8x40", 1, 4096, 4096, 320);
    attn_case("attn_self_4096tok_8x40_b2", 2, 4096, 4096, 320);
    attn_case("attn_self_1024tok_8x80", 1, 1024, 1024, 640);
    attn_case("attn_self_256tok_8x160", 1, 256, 256, 1280);
    attn_case("attn_cross_4096x77_8x40", 1, 4096, 77, 320);
    lin_case("clip_linear_77x768to3072", 77, 768, 3072);
    lin_case("clip_linear_77x3072to768", 77, 3072, 768);
    if (!only || strstr("groupnorm_silu_64x64x320", only)) {
        struct gn_ctx gn = {rnd(4, (int64_t[]){1, 320, 64, 64}), rnd(1, (int64_t[]){320}),
                            rnd(1, (int64_t[]){320})};
        /* ~8 flops per element (two passes + affine + silu): reported for scale only */
        bench("groupnorm_silu_64x64x320", 8.0 * 320 * 64 * 64, run_gn, &gn, NULL);
        tensor_free(gn.x);
        tensor_free(gn.g);
        tensor_free(gn.b);
    }

    if (!only || strstr("dispatch_64f_x20000", only)) {
        struct disp_ctx d = {rnd(2, (int64_t[]){4, 16}), rnd(2, (int64_t[]){4, 16}),
                             rnd(2, (int64_t[]){4, 16})};
        bench("dispatch_64f_x20000", 1e3 * DISPATCH_CALLS, run_dispatch, &d, d.o);
        tensor_free(d.a);
        tensor_free(d.b);
        tensor_free(d.o);
    }

    (void)ob;
    (void)ours;
    printf("# ratios: case / OpenBLAS sgemm, case / best sgemm (max of OpenBLAS and ours), both\n"
           "# at 1024^3 and timed between this case's repetitions; last: GFLOP per CPU-second\n"
           "# against our sgemm's, the figure to trust on a loaded machine\n");
    for (int i = 2; i < nres; i++) {
        double best = res[i].ob > res[i].ours ? res[i].ob : res[i].ours;
        printf("ratio %-34s %6.2f %6.2f   (ref openblas %.1f, ours %.1f GFLOP/s; per CPU-s: "
               "%.2f of ours)\n",
               res[i].name, res[i].gflops / res[i].ob, res[i].gflops / best, res[i].ob,
               res[i].ours, res[i].cpu_gf / res[i].ours_cpu);
    }
    if (do_gpu)
        gpu_section();
    bench_ops_bf16(D, reps, only);
    xfree_aligned(ref_a);
    xfree_aligned(ref_b);
    xfree_aligned(ref_c);
    dev_close(D);
    tensor_shutdown();
    return 0;
}
