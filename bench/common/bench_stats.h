/*
 * bench_stats — the median the benchmarks report (bench_streaming's two modes, bench_ops
 * and its bf16 and Linear tables). Clocks come from util/clock.h.
 */
#ifndef LATENTD_BENCH_COMMON_STATS_H
#define LATENTD_BENCH_COMMON_STATS_H

#include <stdlib.h>

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
