/*
 * bench_ops_bf16 — bench_ops's bf16 section (issue 15): the peak of this CPU's bf16 dot
 * instruction and of its fp32 FMA, measured here on every pool thread at once, and the
 * bf16 GEMM ops (tensor_precision.h) beside the same ops in fp32, as GFLOP/s and as
 * fractions of those peaks.
 *
 * The peaks are register-only loops (12 independent accumulators, so latency is
 * hidden): vdpbf16ps zmm is 64 flops (16 lanes x 2 products x mul+add), vfmadd231ps zmm
 * 32. On a shared machine they drop with the load like everything else, so a fraction
 * of a peak measured in the same run tells a busy machine from slow code. Without
 * AVX-512 BF16 the bf16 peak is "none" and the fractions are of the fp32 peak only (an
 * AVX-512 FMA loop, or an AVX2 one on CPUs without AVX-512).
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
#include "bench_stats.h"
#include "clock.h"
#include "device.h"
#include "tensor.h"
#include "tensor_precision.h"
#include "cpu/gemm_amx.h"

#include <immintrin.h>

void bench_ops_bf16(struct dev *d, int reps, const char *only);


#define PEAK_ITERS 36000000L /* per thread: ~10 ms at these peaks */

/* Twelve named accumulators, written out: an array indexed in a loop is not promoted to
 * registers at -O2 (no unrolling), and the loop would measure the store-forwarding. */
#define ACC12(OP)                                                                         \
    do {                                                                                  \
        OP(a0); OP(a1); OP(a2); OP(a3); OP(a4); OP(a5);                                   \
        OP(a6); OP(a7); OP(a8); OP(a9); OP(a10); OP(a11);                                 \
    } while (0)
/* distinct starting values: identical chains would be merged into one by the compiler */
#define DECL12                                                                            \
    __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2),         \
           a3 = _mm512_set1_ps(3), a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5),         \
           a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7), a8 = _mm512_set1_ps(8),         \
           a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11)
#define SUM(v) s += _mm512_reduce_add_ps(v)

__attribute__((target("avx512f,avx512bf16"))) static double bf16_loop(void)
{
    DECL12;
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3c00);
#define DP(v) v = _mm512_dpbf16_ps(v, x, y)
    for (long it = 0; it < PEAK_ITERS / 12; it++) {
        ACC12(DP);
        __asm__ volatile("" : "+v"(x)); /* keep the loop */
    }
    float s = 0;
    ACC12(SUM);
    return s;
}

__attribute__((target("avx512f"))) static double fma_loop(void)
{
    DECL12;
    __m512 x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(1e-7f);
#define FMA(v) v = _mm512_fmadd_ps(x, y, v)
    for (long it = 0; it < PEAK_ITERS / 12; it++) {
        ACC12(FMA);
        __asm__ volatile("" : "+v"(x));
    }
    float s = 0;
    ACC12(SUM);
    return s;
}

/* The same on 8-float AVX2 vectors, for CPUs without AVX-512 (12 accumulators cover the
 * FMA latency x 2 pipes of Zen 3 and the Intel cores alike). */
#define DECL12_256                                                                        \
    __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2),         \
           a3 = _mm256_set1_ps(3), a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5),         \
           a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7), a8 = _mm256_set1_ps(8),         \
           a9 = _mm256_set1_ps(9), a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11)
#define SUM256(v)                                                                         \
    do {                                                                                  \
        float t_[8];                                                                      \
        _mm256_storeu_ps(t_, v);                                                          \
        for (int i_ = 0; i_ < 8; i_++)                                                    \
            s += t_[i_];                                                                  \
    } while (0)

__attribute__((target("avx2,fma"))) static double fma_loop_avx2(void)
{
    DECL12_256;
    __m256 x = _mm256_set1_ps(1.0f), y = _mm256_set1_ps(1e-7f);
#define FMA256(v) v = _mm256_fmadd_ps(x, y, v)
    for (long it = 0; it < PEAK_ITERS / 12; it++) {
        ACC12(FMA256);
        __asm__ volatile("" : "+x"(x));
    }
    float s = 0;
    ACC12(SUM256);
    return s;
}

/*
 * AMX: tdpbf16ps multiplies a 16x32 bf16 tile by a 32x16 one (stored as 16 rows of 16
 * bf16 pairs) into 16x16 f32: 16 * 16 * 32 * 2 = 16384 flops per instruction. Four
 * accumulator tiles (tmm0-3) fed by two A and two B tiles, as a GEMM micro-kernel would
 * be, so consecutive instructions do not wait on one accumulator. The tiles are loaded
 * once: this is the unit's rate, not a memory-bound one.
 */
#define AMX_FLOPS_PER_OP 16384.0
#define AMX_ITERS (PEAK_ITERS / 64) /* x4 ops: ~2 TFLOP/s per core -> ~15 ms */

__attribute__((target("amx-tile,amx-bf16"))) static double amx_loop(void)
{
    static const uint16_t zeros[16 * 32] = {0}; /* the rate does not depend on data */
    cpu_amx_tiles_begin(); /* every tile 16 x 64 bytes (gemm_amx.c's configuration) */
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, zeros, 64);
    _tile_loadd(5, zeros, 64);
    _tile_loadd(6, zeros, 64);
    _tile_loadd(7, zeros, 64);
    for (long it = 0; it < AMX_ITERS; it++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    float out[16 * 16];
    _tile_stored(0, out, 64);
    cpu_amx_tiles_end();
    return out[0];
}

static int has512; /* the fp32 peak's loop: AVX-512 (16 floats per FMA), else AVX2 (8) */

enum peak_kind { PEAK_FMA, PEAK_BF16, PEAK_AMX };

struct peak_arg {
    enum peak_kind kind;
    double sink;
    double cpu;  /* the thread's CPU seconds in the loop */
};

static void *peak_thread(void *p)
{
    struct peak_arg *a = p;
    double c0 = clock_thread_cpu_sec();
    a->sink = a->kind == PEAK_AMX    ? amx_loop()
              : a->kind == PEAK_BF16 ? bf16_loop()
              : has512               ? fma_loop()
                                     : fma_loop_avx2();
    a->cpu = clock_thread_cpu_sec() - c0;
    return NULL;
}

/*
 * `nt` threads run the loop at once (best of reps): *wall gets their GFLOP/s together,
 * the return value one core's GFLOP per CPU-second (what a core does while it runs: a
 * load-proof figure on a shared machine).
 */
static double peak(enum peak_kind kind, int nt, int reps, double *wall)
{
    double best = 0, best_wall = 0;
    double flops = kind == PEAK_AMX ? (double)AMX_ITERS * 4 * AMX_FLOPS_PER_OP
                                    : (double)(PEAK_ITERS / 12 * 12) * (kind == PEAK_BF16 ? 64.0
                                                                        : has512          ? 32.0
                                                                                          : 16.0);
    for (int r = 0; r < reps; r++) {
        pthread_t th[64];
        struct peak_arg args[64];
        double t0 = clock_mono_sec();
        for (int i = 0; i < nt; i++) {
            args[i].kind = kind;
            pthread_create(&th[i], NULL, peak_thread, &args[i]);
        }
        double cpu = 0;
        for (int i = 0; i < nt; i++) {
            pthread_join(th[i], NULL);
            cpu += args[i].cpu;
        }
        double gw = (double)nt * flops / (clock_mono_sec() - t0) / 1e9, gc = (double)nt * flops / cpu / 1e9;
        best_wall = gw > best_wall ? gw : best_wall;
        best = gc > best ? gc : best;
    }
    *wall = best_wall;
    return best;
}

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
        peak(PEAK_FMA, nt, 3, &w);
        best32 = w > best32 ? w : best32;
    }
    if (has16) {
        peak(PEAK_BF16, nt, 3, &w);
        best16 = w > best16 ? w : best16;
    }
    if (hasamx) {
        peak(PEAK_AMX, nt, 3, &w);
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
    has16 = __builtin_cpu_supports("avx512bf16");
    has512 = __builtin_cpu_supports("avx512f");
    hasfma = has512 || (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
    hasamx = cpu_amx_usable(); /* asks the kernel for the tile state */
    double w32 = 0, w16 = 0, wamx = 0;
    double c32 = hasfma ? peak(PEAK_FMA, nt, 3, &w32) / nt : 0;
    double c16 = has16 ? peak(PEAK_BF16, nt, 3, &w16) / nt : 0;
    double camx = hasamx ? peak(PEAK_AMX, nt, 3, &wamx) / nt : 0;
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
        printf("bf16 peak vfmadd231ps %s %d threads %8.1f GFLOP/s wall, %7.1f GF per "
               "core-cpu-s\n",
               has512 ? "zmm" : "ymm", nt, w32, c32);
    printf("# fractions: the op's wall GFLOP/s over the %d threads' wall peak (the best of the\n"
           "# peaks re-measured after every case); conv3x3_64x64x320 fp32 may run Winograd\n"
           "# (fewer real flops than the nominal 2*MACs counted here)\n", nt);
    one_case(d, "linear_2048x2048x2048", 0, 2048, 2048, 2048, reps);
    one_case(d, "linear_8192x320to1280", 0, 8192, 320, 1280, reps);
    one_case(d, "conv3x3_64x64x320", 1, 64, 320, 320, reps);
    one_case(d, "conv3x3_16x16x1280", 1, 16, 1280, 1280, reps);
    one_case(d, "conv3x3_64x64x512", 1, 64, 512, 512, reps); /* the VAE decoder's */
}

