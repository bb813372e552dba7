/*
 * bench_peaks.c — the peak rate of this CPU's arithmetic units, measured in the benchmark
 * that reports fractions of it (bench_peaks.h): fp32 FMA, AVX-512 BF16's vdpbf16ps and
 * AMX's tdpbf16ps, each a register-only loop on every thread at once.
 *
 * The FMA and vdpbf16ps loops keep 12 independent accumulators (latency hidden):
 * vdpbf16ps zmm is 64 flops (16 lanes x 2 products x mul+add), vfmadd231ps zmm 32 (ymm
 * 16, on CPUs without AVX-512). AMX: tdpbf16ps multiplies a 16x32 bf16 tile by a 32x16
 * one (stored as 16 rows of 16 bf16 pairs) into 16x16 f32, 16 * 16 * 32 * 2 = 16384 flops
 * per instruction; four accumulator tiles (tmm0-3) fed by two A and two B tiles, as a GEMM
 * micro-kernel would be, loaded once: the unit's rate, not a memory-bound one. On a shared
 * machine the peaks drop with the load like everything else, so a fraction of a peak
 * measured in the same run tells a busy machine from slow code.
 */
#include <pthread.h>
#include <stdint.h>

#include <immintrin.h>

#include "bench_peaks.h"
#include "clock.h"
#include "cpu/gemm_amx.h"

#define PEAK_ITERS 36000000L /* per thread: ~10 ms at these peaks */

/* Twelve named accumulators, written out: an array indexed in a loop is not promoted to
 * registers at -O2 (no unrolling), and the loop would measure the store-forwarding. */
#define ACC12(OP)                                                                                  \
    do {                                                                                           \
        OP(a0);                                                                                    \
        OP(a1);                                                                                    \
        OP(a2);                                                                                    \
        OP(a3);                                                                                    \
        OP(a4);                                                                                    \
        OP(a5);                                                                                    \
        OP(a6);                                                                                    \
        OP(a7);                                                                                    \
        OP(a8);                                                                                    \
        OP(a9);                                                                                    \
        OP(a10);                                                                                   \
        OP(a11);                                                                                   \
    } while (0)
/* distinct starting values: identical chains would be merged into one by the compiler */
#define DECL12                                                                                     \
    __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2),                 \
           a3 = _mm512_set1_ps(3), a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5),                 \
           a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7), a8 = _mm512_set1_ps(8),                 \
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
#define DECL12_256                                                                                 \
    __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2),                 \
           a3 = _mm256_set1_ps(3), a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5),                 \
           a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7), a8 = _mm256_set1_ps(8),                 \
           a9 = _mm256_set1_ps(9), a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11)
#define SUM256(v)                                                                                  \
    do {                                                                                           \
        float t_[8];                                                                               \
        _mm256_storeu_ps(t_, v);                                                                   \
        for (int i_ = 0; i_ < 8; i_++)                                                             \
            s += t_[i_];                                                                           \
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

static int has512 = -1; /* the fp32 peak's loop: AVX-512 (16 floats per FMA), else AVX2 (8) */

struct peak_arg {
    enum bench_peak kind;
    double sink;
    double cpu; /* the thread's CPU seconds in the loop */
};

static void *peak_thread(void *p)
{
    struct peak_arg *a = p;
    double c0 = clock_thread_cpu_sec();
    a->sink = a->kind == BENCH_PEAK_AMX    ? amx_loop()
              : a->kind == BENCH_PEAK_BF16 ? bf16_loop()
              : has512                     ? fma_loop()
                                           : fma_loop_avx2();
    a->cpu = clock_thread_cpu_sec() - c0;
    return NULL;
}

int bench_peak_available(enum bench_peak k)
{
    if (has512 < 0)
        has512 = __builtin_cpu_supports("avx512f") != 0;
    switch (k) {
    case BENCH_PEAK_FMA:
        return has512 || (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
    case BENCH_PEAK_BF16:
        return __builtin_cpu_supports("avx512bf16") != 0;
    case BENCH_PEAK_AMX:
        return cpu_amx_usable(); /* asks the kernel for the tile state */
    }
    return 0;
}

const char *bench_peak_name(enum bench_peak k)
{
    if (has512 < 0)
        has512 = __builtin_cpu_supports("avx512f") != 0;
    return k == BENCH_PEAK_AMX    ? "AMX tdpbf16ps"
           : k == BENCH_PEAK_BF16 ? "vdpbf16ps zmm"
           : has512               ? "vfmadd231ps zmm"
                                  : "vfmadd231ps ymm";
}

double bench_peak_measure(enum bench_peak kind, int nt, int reps, double *per_core)
{
    double best = 0, best_wall = 0;
    if (!bench_peak_available(kind) || nt < 1) {
        if (per_core)
            *per_core = 0;
        return 0;
    }
    nt = nt > 64 ? 64 : nt;
    double flops = kind == BENCH_PEAK_AMX
                       ? (double)AMX_ITERS * 4 * AMX_FLOPS_PER_OP
                       : (double)(PEAK_ITERS / 12 * 12) * (kind == BENCH_PEAK_BF16 ? 64.0
                                                           : has512                ? 32.0
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
        double gw = (double)nt * flops / (clock_mono_sec() - t0) / 1e9;
        double gc = flops / (cpu / nt) / 1e9;
        best_wall = gw > best_wall ? gw : best_wall;
        best = gc > best ? gc : best;
    }
    if (per_core)
        *per_core = best;
    return best_wall;
}
