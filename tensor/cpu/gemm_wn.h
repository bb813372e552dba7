/*
 * gemm_wn.h — a GEMM for a big weight against few columns, reading the weight as stored
 * (gemm_wn.c says why); private to tensor/cpu/ (conv.c's small images).
 */
#ifndef LATENTD_TENSOR_CPU_GEMM_WN_H
#define LATENTD_TENSOR_CPU_GEMM_WN_H

#include <stdint.h>

#include "../tensor.h"

/* The most columns cpu_gemm_wn is meant for: beyond, the weight's passes are small beside
 * the GEMM and oneDNN's kernels win. With AVX-512 (its 12 x 32 kernel; bench_ops --conv
 * 256, 2 threads, Xeon, ms per call oneDNN on the widened weight -> here): 1280x1280 8^2
 * (128 columns) 25.2 -> 16.0, 2560x1280 8^2 48.2 -> 32.9, 1280x1280 4^2 10.9 -> 6.2; a
 * step's 3x3 convs 804 -> 689 ms. (The AVX2 kernel on the same CPU: 8^2 no gain.) */
#define CPU_GEMM_WN_MAX_N 128
/* The micro-kernel: AVX-512 (12 x 32 tiles) where the CPU has it, else AVX2 (6 x 16);
 * < 0 (the default) chooses by the CPU on first use, 0/1 force (tests). */
extern int cpu_gemm_wn_avx512;

/* 1 when the CPU has AVX2, FMA and F16C (checked once). */
int cpu_gemm_wn_usable(void);

/* c [m, n] = w [m, k] x b [k, n], all row-major and dense; w f32, f16 or bf16 (widened
 * exactly as read). Call only when cpu_gemm_wn_usable(); executor thread. */
void cpu_gemm_wn(float *c, const void *w, enum tensor_dtype dt, const float *b, int64_t m,
                 int64_t n, int64_t k);

#endif
