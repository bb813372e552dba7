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

/* 1 when the CPU has AVX2, FMA and F16C (checked once). */
int cpu_gemm_wn_usable(void);

/* c [m, n] = w [m, k] x b [k, n], all row-major and dense; w f32, f16 or bf16 (widened
 * exactly as read). Call only when cpu_gemm_wn_usable(); executor thread. */
void cpu_gemm_wn(float *c, const void *w, enum tensor_dtype dt, const float *b, int64_t m,
                 int64_t n, int64_t k);

#endif
