/*
 * gemm_wn.h — a GEMM for a big weight against few columns, reading the weight as stored
 * (gemm_wn.c says why); private to tensor/cpu/ (conv.c's small images).
 */
#ifndef LATENTD_TENSOR_CPU_GEMM_WN_H
#define LATENTD_TENSOR_CPU_GEMM_WN_H

#include <stdint.h>

#include "../tensor.h"

/* The most columns cpu_gemm_wn is meant for: beyond, the weight's passes are small beside
 * the GEMM and oneDNN's kernels win. */
#define CPU_GEMM_WN_MAX_N 128
/* The same on CPUs with AVX-512, where oneDNN's GEMM on the widened weight runs twice as
 * wide as this AVX2 kernel (bench_ops --conv 256 [--conv-wn], 2 threads, Xeon, ms per call
 * auto -> gemm_wn): 1280x1280 4^2 (32 columns) 10.1-10.4 -> 7.3-7.7, 2560x1280 4^2
 * 19.3-20.0 -> 14.9-15.4; but 8^2 (128) 22.8-23.1 -> 22.7-22.8 and 640x1280 8^2 8.7-9.0
 * -> 11.1-11.2. */
#define CPU_GEMM_WN_MAX_N_AVX512 64

/* 1 when the CPU has AVX2, FMA and F16C (checked once). */
int cpu_gemm_wn_usable(void);

/* c [m, n] = w [m, k] x b [k, n], all row-major and dense; w f32, f16 or bf16 (widened
 * exactly as read). Call only when cpu_gemm_wn_usable(); executor thread. */
void cpu_gemm_wn(float *c, const void *w, enum tensor_dtype dt, const float *b, int64_t m,
                 int64_t n, int64_t k);

#endif
