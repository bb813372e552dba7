/*
 * bench_peaks.h — peak arithmetic rates of this CPU, measured (bench_peaks.c), so that
 * benchmarks print fractions of the peak of the path that ran (issue 15): bench_ops's
 * bf16 section, bench_txt2img's tables.
 */
#ifndef LATENTD_BENCH_PEAKS_H
#define LATENTD_BENCH_PEAKS_H

enum bench_peak {
    BENCH_PEAK_FMA,  /* fp32 FMA: AVX-512 zmm, else AVX2 ymm */
    BENCH_PEAK_BF16, /* AVX-512 BF16 vdpbf16ps zmm */
    BENCH_PEAK_AMX,  /* AMX-BF16 tdpbf16ps */
};

/* Whether this CPU has the unit (AMX: and the kernel lends this process the tile state). */
int bench_peak_available(enum bench_peak k);
/* The instruction timed. */
const char *bench_peak_name(enum bench_peak k);
/* nt threads (<= 64) run the unit's loop at once, best of reps (~10-15 ms each): their
 * GFLOP/s together (wall); *per_core (may be NULL) the best GFLOP per CPU-second of one
 * thread. 0 where the unit is absent. */
double bench_peak_measure(enum bench_peak k, int nt, int reps, double *per_core);

#endif
