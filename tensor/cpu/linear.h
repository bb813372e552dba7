/*
 * linear.h — the CPU backend's Linear and fused Linear+GEGLU kernels (linear.c), private
 * to tensor/cpu/ (op_linalg.c is the op; cpu_linear_geglu in tensor_impl.h is the GEGLU
 * on an untransposed weight).
 *
 * A Linear is y [rows, n] = x [rows, k] @ W^T + bias with W [n, k]. The kernels take the
 * weight tensor itself (f32, f16 or bf16) and run no-trans GEMMs on W^T (gemm_wt.c: faster
 * per CPU-second than trans-B on W), widened and transposed by the kernel: all of it
 * once for many rows, slice by slice for few (linear.c). Every dtype takes the same
 * GEMMs, chosen from the shape alone, so an f16 weight and its exact f32 widening give
 * bit-identical results.
 *
 * The work is split over the pool as tiles each running single-threaded GEMMs, with the
 * bias added to a tile right after its GEMM (while it is in cache), not as a pass of its
 * own before.
 *
 * Threads: the executor (calls tensor__pool_for); the tile scratch is the calling
 * thread's, kept between calls, freed by cpu_linear_release (tensor_cpu_scratch_release)
 * and at the thread's exit.
 */
#ifndef LATENTD_TENSOR_CPU_LINEAR_H
#define LATENTD_TENSOR_CPU_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "../tensor.h" /* enum tensor_dtype */

/* 1 (default): op_linalg.c runs Linear through cpu_linear; 0: the reference path (bias
 * written first, one cpu_sgemm over the untransposed weight; tests, bench_ops --linear). */
extern int cpu_linear_fast;

/* 1 when a Linear on this many rows runs row tiles over one W^T made for the call
 * (cpu_widen_in_t); below, column tiles each widen their own slice of W. From
 * CPU_LINEAR_T_ROWS rows the pass over the weight is small beside the GEMM. */
#define CPU_LINEAR_T_ROWS 1024
static inline int cpu_linear_use_t(int64_t rows) { return rows >= CPU_LINEAR_T_ROWS; }

struct tensor;

/* y = x @ W^T + bias (bias [n] or NULL); w: W [n, k], 2-D contiguous, f32, f16 or bf16. */
void cpu_linear(float *y, const float *x, const struct tensor *w, const float *bias,
                int64_t rows, int64_t k, int64_t n);

/* y [rows, h] = geglu(x @ W^T + bias), w: W [2h, k] as for cpu_linear. */
void cpu_linear_geglu_w(float *y, const float *x, const struct tensor *w, const float *bias,
                        int64_t rows, int64_t k, int64_t h);

/* Free the calling thread's tile scratch; returns the bytes freed. */
size_t cpu_linear_release(void);

/*
 * bf16 precision on AMX (linear_amx.c): whether the calling thread's precision is bf16,
 * the CPU lends AMX tiles, and w (W [n, k], or [2h, k] for the GEGLU) is a contiguous
 * f32/f16/bf16 matrix the kernel takes; then cpu_linear_amx computes y = x @ W^T + bias
 * (geglu: y [rows, h] = geglu(x @ W^T + bias)) with bf16 operands and fp32 sums.
 * Executor only; cpu_linear_amx_release frees the calling thread's scratch.
 */
int cpu_linear_amx_ok(const struct tensor *w, int64_t rows, int geglu);
void cpu_linear_amx(float *y, const float *x, const struct tensor *w, const float *bias,
                    int64_t rows, int64_t k, int64_t n, int geglu);
size_t cpu_linear_amx_release(void);

/*
 * The same on AVX-512 BF16 (linear_avx512bf16.c) where the CPU has it but no AMX, for
 * many rows (cpu_linear_use_t); cpu_linear_bf16v_ok says when, as cpu_linear_amx_ok.
 */
int cpu_linear_bf16v_ok(const struct tensor *w, int64_t rows, int geglu);
void cpu_linear_bf16v(float *y, const float *x, const struct tensor *w, const float *bias,
                      int64_t rows, int64_t k, int64_t n, int geglu);
size_t cpu_linear_bf16v_release(void);
/* Its GEMM for other ops (conv.c's small images): c [rows, n] (ldc apart) = A [rows, k]
 * (stored at adt: f32, f16 or bf16; lda apart) x B [k, n] (f32, ldb apart), bf16
 * operands rounded to nearest even, fp32 sums. Only where cpu_avx512bf16_usable(). */
void cpu_bf16v_gemm(float *c, int64_t ldc, const void *a, enum tensor_dtype adt, int64_t lda,
                    const float *b, int64_t ldb, int64_t rows, int64_t n, int64_t k);

#endif
