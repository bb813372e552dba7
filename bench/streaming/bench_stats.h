/*
 * bench_stats — the clock and the median shared by bench_streaming's two modes
 * (synthetic model, bench_streaming.c; SD1.5 UNet, bench_streaming_sd15.c).
 */
#ifndef LATENTD_BENCH_STREAMING_STATS_H
#define LATENTD_BENCH_STREAMING_STATS_H

#include <stdlib.h>
#include <time.h>

static inline double bench_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static inline int bench__cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of v[0..n) (n >= 1); sorts v in place. */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), bench__cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
