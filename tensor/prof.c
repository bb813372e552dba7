/*
 * prof.c — per-op-class wall time and GFLOP/s of the CPU ops (LATENTD_PROFILE=1).
 *
 * Off by default: every instrumented op then pays one load and one branch
 * (tensor__prof_t0 returns 0). When on, each op adds its wall time (and the
 * FLOPs of the GEMM-like ops) to its class; a forward pass brackets itself with
 * tensor_profile_reset / tensor_profile_print so the table is one model eval.
 * Time that no op claims (weight fetch, allocation, glue) shows as "other".
 *
 * Threads: the executor's thread only, as every op (tensor.h); no locking.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "clock.h"
#include "tensor_impl.h"

int tensor__prof_on = -1;

static const char *const names[TENSOR__PROF_N] = {
    [TENSOR__PROF_CONV3] = "conv kxk (im2col+gemm)",
    [TENSOR__PROF_IM2COL] = "  of which im2col",
    [TENSOR__PROF_CONV1] = "conv 1x1",
    [TENSOR__PROF_LINEAR] = "linear",
    [TENSOR__PROF_MATMUL] = "matmul",
    [TENSOR__PROF_ATTN] = "attention",
    [TENSOR__PROF_GN] = "group_norm (+silu)",
    [TENSOR__PROF_LN] = "layer_norm",
    [TENSOR__PROF_BIN] = "add/mul",
    [TENSOR__PROF_ACT] = "silu/gelu/geglu/softmax",
    [TENSOR__PROF_COPY] = "copy/permute/concat",
    [TENSOR__PROF_UPSAMPLE] = "upsample",
};

static struct {
    double t, cpu, flops;
    long calls;
} acc[TENSOR__PROF_N];
static double t_begin, cpu_begin, sys_begin;
static long faults_begin;

/* Kernel CPU seconds and page faults so far: first touches of fresh activation buffers
 * (large blocks come from mmap each time) show up here, not in any op's GFLOP/s. */
static double sys_now(long *faults)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *faults = ru.ru_minflt + ru.ru_majflt;
    return (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}
static double cpu_at_t0[8]; /* CPU clock at each open tensor__prof_t0 (im2col nests in conv) */
static int depth;

double tensor__prof_now(void)
{
    return clock_mono_sec();
}

double tensor__prof_start(void)
{
    if (depth < 8)
        cpu_at_t0[depth] = clock_process_cpu_sec();
    depth++;
    return tensor__prof_now();
}

int tensor__prof_init(void)
{
    const char *v = getenv("LATENTD_PROFILE");
    tensor__prof_on = v && *v && strcmp(v, "0") != 0;
    return tensor__prof_on;
}

void tensor__prof_add(int cls, double t0, double flops)
{
    acc[cls].t += tensor__prof_now() - t0;
    depth--;
    if (depth >= 0 && depth < 8)
        acc[cls].cpu += clock_process_cpu_sec() - cpu_at_t0[depth];
    acc[cls].flops += flops;
    acc[cls].calls++;
}

int tensor_profile_enabled(void)
{
    return tensor__prof_on < 0 ? tensor__prof_init() : tensor__prof_on;
}

void tensor_profile_reset(void)
{
    if (!tensor_profile_enabled())
        return;
    memset(acc, 0, sizeof(acc));
    depth = 0;
    t_begin = tensor__prof_now();
    cpu_begin = clock_process_cpu_sec();
    sys_begin = sys_now(&faults_begin);
}

void tensor_profile_print(const char *label)
{
    if (!tensor_profile_enabled())
        return;
    double wall = tensor__prof_now() - t_begin, cpu = clock_process_cpu_sec() - cpu_begin,
           claimed = 0, fl = 0;
    long faults;
    double sys = sys_now(&faults) - sys_begin;
    fprintf(stderr,
            "# profile %s: %.3f s wall, %.3f s CPU (%.3f s in the kernel, %ld page faults), %d "
            "threads\n",
            label, wall, cpu, sys, faults - faults_begin, tensor__pool_threads());
    for (int c = 0; c < TENSOR__PROF_N; c++) {
        if (!acc[c].calls)
            continue;
        if (c != TENSOR__PROF_IM2COL) {
            claimed += acc[c].t;
            fl += acc[c].flops;
        }
        fprintf(stderr, "#   %-26s %5ld calls %8.3f s %5.1f %%", names[c], acc[c].calls, acc[c].t,
                100.0 * acc[c].t / wall);
        if (acc[c].flops > 0)
            fprintf(stderr, " %7.1f GFLOP/s %7.1f GFLOP/CPU-s", acc[c].flops / acc[c].t / 1e9,
                    acc[c].flops / acc[c].cpu / 1e9);
        fputc('\n', stderr);
    }
    fprintf(stderr, "#   %-26s       %8.3f s %5.1f %%\n", "other (unclaimed)", wall - claimed,
            100.0 * (wall - claimed) / wall);
    fprintf(stderr, "#   %-26s       %8.3f s        %7.1f GFLOP/s, %.1f GFLOP per CPU s\n", "total",
            wall, fl / wall / 1e9, fl / cpu / 1e9);
}
