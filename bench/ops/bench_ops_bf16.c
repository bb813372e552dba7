/*
 * bench_ops_bf16 — bench_ops's bf16 section (issue 15): the peak of this CPU's bf16 dot
 * instruction and of its fp32 FMA, measured here on every pool thread at once, and the
 * bf16 GEMM ops (tensor_precision.h) beside the same ops in fp32, as GFLOP/s and as
 * fractions of those peaks.
 *
 * The peaks are bench/common/bench_peaks.c's register-only loops (fp32 FMA, vdpbf16ps,
 * AMX tdpbf16ps), re-measured after every case. Where AMX runs, the bf16 fractions are
 * of its peak; without AVX-512 BF16 the bf16 peak is "none" and the fractions are of the
 * fp32 peak only (an AVX-512 FMA loop, or an AVX2 one on CPUs without AVX-512).
 *
 * The cases: Linear 2048 -> 2048 on 2048 rows (square GEMM), SD1.5's feed-forward
 * Linear 320 -> 1280 on 2 x 4096 tokens, and the 3x3 conv at 64x64x320; bf16 with its
 * weight already cached (the steady state of a sampling loop: the op still rounds its
 * activation operand every call).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "bench_peaks.h"
#include "bench_stats.h"
#include "clock.h"
#include "device.h"
#include "tensor.h"
#include "tensor_precision.h"

void bench_ops_bf16(struct dev *d, int reps, const char *only);

static struct tensor *rnd(struct dev *d, int nd, const int64_t *sh, float scale)
{
    struct tensor *t;
    if (tensor_new(d, TENSOR_F32, nd, sh, &t, NULL) < 0)
        PANIC("alloc");
    float *p = tensor_data(t);
    uint64_t s = 0x2545f4914f6cdd1dull ^ (uint64_t)tensor_numel(t);
    for (int64_t i = 0; i < tensor_numel(t); i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = scale * (float)((double)(s >> 40) / 16777216.0 - 0.5);
    }
    return t;
}

struct op {
    struct tensor *x, *w, *b, *o;
    int conv;
};

static void run_op(const struct op *op)
{
    struct err e = {0};
    struct tensor_conv2d_opts c = {1, 1, 1, 1, 1};
    int rc = op->conv ? tensor_conv2d(op->o, op->x, op->w, op->b, &c, &e)
                      : tensor_linear(op->o, op->x, op->w, op->b, &e);
    if (rc < 0)
        PANIC("bench_ops_bf16: %s", e.msg);
}


/* Median wall seconds of reps runs at precision p (after one warm-up run); *cpu the
 * median process CPU seconds. */
static double time_op(const struct op *op, enum tensor_precision p, int reps, double *cpu)
{
    enum tensor_precision old = tensor_precision_set(p);
    run_op(op);
    double t[16], c[16];
    for (int r = 0; r < reps; r++) {
        double t0 = clock_mono_sec(), c0 = clock_process_cpu_sec();
        run_op(op);
        t[r] = clock_mono_sec() - t0;
        c[r] = clock_process_cpu_sec() - c0;
    }
    tensor_precision_set(old);
    *cpu = bench_median(c, reps);
    return bench_median(t, reps);
}

/* The pool's threads' peaks together (wall GFLOP/s), the best seen so far in this run: a
 * peak is what the cores can do, so the least disturbed measurement is the truest
 * (re-measured after every case, so the fractions compare figures from the same
 * minutes). Per CPU-second figures are printed too but not used for fractions: these
 * 2 vCPUs may share a physical core (SMT), which halves a register-only loop's rate
 * per CPU-second but not a GEMM's as much. */
static double best16, best32, bestamx;
static int has16, hasfma, hasamx; /* AVX-512 BF16; an fp32 FMA loop (AVX-512 or AVX2); AMX */

static void peaks_update(int nt)
{
    double w;
    if (hasfma) {
        w = bench_peak_measure(BENCH_PEAK_FMA, nt, 3, NULL);
        best32 = w > best32 ? w : best32;
    }
    if (has16) {
        w = bench_peak_measure(BENCH_PEAK_BF16, nt, 3, NULL);
        best16 = w > best16 ? w : best16;
    }
    if (hasamx) {
        w = bench_peak_measure(BENCH_PEAK_AMX, nt, 3, NULL);
        bestamx = w > bestamx ? w : bestamx;
    }
}

static void one_case(struct dev *d, const char *name, int conv, int64_t rows, int64_t k,
                     int64_t n, int reps)
{
    struct op op = {0};
    op.conv = conv;
    double flops;
    if (conv) { /* rows = side, k = ci, n = co */
        op.x = rnd(d, 4, (int64_t[]){1, k, rows, rows}, 1.0f);
        op.w = rnd(d, 4, (int64_t[]){n, k, 3, 3}, 0.1f);
        tensor_new(d, TENSOR_F32, 4, (int64_t[]){1, n, rows, rows}, &op.o, NULL);
        flops = 2.0 * (double)n * (double)k * 9.0 * (double)(rows * rows);
    } else {
        op.x = rnd(d, 2, (int64_t[]){rows, k}, 1.0f);
        op.w = rnd(d, 2, (int64_t[]){n, k}, 0.1f);
        tensor_new(d, TENSOR_F32, 2, (int64_t[]){rows, n}, &op.o, NULL);
        flops = 2.0 * (double)rows * (double)k * (double)n;
    }
    op.b = rnd(d, 1, (int64_t[]){n}, 0.1f);
    int nt = tensor_threads_get();
    /* interleaved: fp32, bf16, fp32, bf16 ... so both see the same load */
    double t32[2], t16[2], c32[2], c16[2];
    for (int r = 0; r < 2; r++) {
        t32[r] = time_op(&op, TENSOR_PRECISION_F32, reps, &c32[r]);
        t16[r] = time_op(&op, TENSOR_PRECISION_BF16, reps, &c16[r]);
    }
    peaks_update(nt);
    double pk16 = best16, pk32 = hasfma ? best32 : 1e30;
    double g32 = flops / fmin(t32[0], t32[1]) / 1e9, g16 = flops / fmin(t16[0], t16[1]) / 1e9;
    double k32 = flops / fmin(c32[0], c32[1]) / 1e9, k16 = flops / fmin(c16[0], c16[1]) / 1e9;
    printf("bf16 %-24s fp32 %6.1f GFLOP/s (%.2f of FMA peak) %6.1f GF/cpu-s  bf16 %6.1f GFLOP/s",
           name, g32, g32 / pk32, k32, g16);
    /* oneDNN runs AMX tiles where it can (gemm_bf16.c): the fraction is of that unit */
    if (bestamx > 0)
        printf(" (%.2f of AMX peak)", g16 / bestamx);
    else if (pk16 > 0)
        printf(" (%.2f of bf16 peak)", g16 / pk16);
    printf(" %6.1f GF/cpu-s", k16);
    printf("  speed-up %.2fx wall, %.2fx cpu\n", g16 / g32, k16 / k32);
    fflush(stdout);
    tensor_free(op.x);
    tensor_free(op.w);
    tensor_free(op.b);
    tensor_free(op.o);
}

void bench_ops_bf16(struct dev *d, int reps, const char *only)
{
    if (only && !strstr("bf16", only))
        return;
    int nt = tensor_threads_get();
    has16 = bench_peak_available(BENCH_PEAK_BF16);
    hasfma = bench_peak_available(BENCH_PEAK_FMA);
    hasamx = bench_peak_available(BENCH_PEAK_AMX);
    double c32 = 0, c16 = 0, camx = 0; /* GFLOP per CPU-second of one thread */
    double w32 = bench_peak_measure(BENCH_PEAK_FMA, nt, 3, &c32);
    double w16 = bench_peak_measure(BENCH_PEAK_BF16, nt, 3, &c16);
    double wamx = bench_peak_measure(BENCH_PEAK_AMX, nt, 3, &camx);
    best32 = w32;
    best16 = w16;
    bestamx = wamx;
    double loadavg[3] = {0};
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &loadavg[0], &loadavg[1], &loadavg[2]) != 3)
            loadavg[0] = 0;
        fclose(f);
    }
    printf("# bf16: GEMM path %s; load average %.2f %.2f %.2f\n", tensor_bf16_path(), loadavg[0],
           loadavg[1], loadavg[2]);
    if (has16)
        printf("bf16 peak vdpbf16ps  %d threads %8.1f GFLOP/s wall, %7.1f GF per core-cpu-s\n",
               nt, w16, c16);
    else
        printf("bf16 peak vdpbf16ps none (no AVX-512 BF16)\n");
    if (hasamx)
        printf("bf16 peak AMX tdpbf16ps %d threads %8.1f GFLOP/s wall, %7.1f GF per "
               "core-cpu-s\n",
               nt, wamx, camx);
    else
        printf("bf16 peak AMX none (no AMX-BF16, or the kernel refused the tile state)\n");
    if (hasfma)
        printf("bf16 peak %s %d threads %8.1f GFLOP/s wall, %7.1f GF per core-cpu-s\n",
               bench_peak_name(BENCH_PEAK_FMA), nt, w32, c32);
    printf("# fractions: the op's wall GFLOP/s over the %d threads' wall peak (the best of the\n"
           "# peaks re-measured after every case); conv3x3_64x64x320 fp32 may run Winograd\n"
           "# (fewer real flops than the nominal 2*MACs counted here)\n", nt);
    one_case(d, "linear_2048x2048x2048", 0, 2048, 2048, 2048, reps);
    one_case(d, "linear_8192x320to1280", 0, 8192, 320, 1280, reps);
    one_case(d, "conv3x3_64x64x320", 1, 64, 320, 320, reps);
    one_case(d, "conv3x3_16x16x1280", 1, 16, 1280, 1280, reps);
    one_case(d, "conv3x3_64x64x512", 1, 64, 512, 512, reps); /* the VAE decoder's */
}

