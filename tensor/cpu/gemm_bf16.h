/*
 * gemm_bf16 — the CPU backend's bf16 GEMM (private to tensor/cpu/): rounding f32 to
 * bf16, a single-threaded bf16 x bf16 -> f32 GEMM, and the "shadow" registry that lets
 * cpu_sgemm (gemm.c) find the cached bf16 copy of a weight it is handed as f32.
 *
 * How an op runs in bf16 (tensor_precision.h has the what): the op adapts its weight
 * with cpu_widen_in (widen.c), which, when the calling thread's precision is bf16,
 * binds the f32 pointer it returns to the weight's bf16 copy (gemm_bf16_cache.c).
 * Every cpu_sgemm whose A or B lies inside a bound range then runs in bf16 on any
 * thread (pool tasks included): the bound operand from the copy, the other operand
 * rounded per call. cpu_widen_done unbinds. So conv.c and linear.c need no change and
 * a GEMM of two activations is never affected.
 *
 * Threads: any; per-thread scratch (freed at thread exit, or by cpu_bf16_release for
 * the calling thread); the registry and oneDNN primitive table are locked.
 */
#ifndef LATENTD_TENSOR_CPU_GEMM_BF16_H
#define LATENTD_TENSOR_CPU_GEMM_BF16_H

#include <stdatomic.h>
#include <stdint.h>

#include "../tensor_impl.h"

/* f32 -> bf16, round to nearest even (NaN stays NaN), like tensor_f32_to_bf16. */
void cpu_bf16_round(uint16_t *dst, const float *src, int64_t n);
/* f16 -> bf16 (exact widening, then cpu_bf16_round's rounding). */
void cpu_bf16_from_f16(uint16_t *dst, const uint16_t *src, int64_t n);
/* A stored rows x cols f32 matrix (leading dim ld) -> compact bf16 (leading dim cols). */
void cpu_bf16_pack(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t ld);

/* Single-threaded C = alpha op(A) op(B) + beta C, A/B bf16, C f32, row-major with
 * leading dims in elements (cpu_sgemm's contract, threads = 1). */
void cpu_gemm_bf16_1(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb, float beta,
                     float *c, int64_t ldc);

/* Whether cpu_gemm_bf16_1 runs gemm_amx.c's kernel: then a caller with an A used by many
 * GEMMs may pack it once (cpu_amx_pack) and call cpu_gemm_amx_packed instead. */
int cpu_bf16_amx(void);
/* Whether the CPU has AVX-512 F, BW, VL and BF16 (vdpbf16ps) and FMA, what the bf16
 * kernels for CPUs without AMX (attn_avx512bf16.c, linear_avx512bf16.c) and the rounding
 * loops (cpu_bf16_round, cpu_bf16_from_f16) are compiled for. Checked once. */
int cpu_avx512bf16_usable(void);

/* The calling thread's bf16 scratch `slot` (0 or 1), grown to `elems`; owned by the
 * thread, valid until its next call with the same slot. */
uint16_t *cpu_bf16_scratch(int slot, size_t elems);

/* ---- shadow registry (gemm_bf16_cache.c) ---- */

extern atomic_int cpu_bf16_nbound; /* bound ranges now: 0 keeps cpu_sgemm's check free */

/* The bf16 element matching f32 address p, or NULL when p is in no bound range. */
const uint16_t *cpu_bf16_shadow_of(const float *p);
/* Bind p32 (t's contiguous f32 image, numel(t) floats) to t's cached bf16 copy,
 * converting t on a miss. No-op when t is not contiguous. Op level (not a pool task). */
void cpu_bf16_bind(const struct tensor *t, const float *p32);
/* On the AMX path: the bound A at a16 (row-major m x k, leading dim lda, inside a bound
 * copy) packed for cpu_gemm_amx_packed, made on first use and kept until the binding
 * goes; NULL when a16 is not bound or the binding holds too many packings already. */
const uint16_t *cpu_bf16_packed_a(const uint16_t *a16, int64_t m, int64_t k, int64_t lda);
/* Make sure the bound copy holding p16 is written (a conv weight packed at bind on AMX
 * leaves it for this): every reader of a shadow but cpu_bf16_packed_a's hits calls it
 * first. No-op for an address in no binding. */
void cpu_bf16_fill(const uint16_t *p16);
/* Undo cpu_bf16_bind for p32 (no-op when unbound). */
void cpu_bf16_unbind(const float *p32);

/* Free the calling thread's per-op copy scratch (slots not in use); returns the bytes
 * freed. tensor_cpu_scratch_release's and the backend shutdown's. */
size_t cpu_bf16_tmp_release(void);

/* Drop every cached copy not bound by an op in flight (backend shutdown). */
void cpu_bf16_cache_clear(void);

/* The calling (executor) thread's buffer for a packed B of `elems` (gemm.c's AMX row
 * split, conv.c's small images), kept between calls; cpu_gemm_amx_rows_release frees it
 * and returns the bytes. */
uint16_t *cpu_gemm_amx_bscratch(size_t elems);
size_t cpu_gemm_amx_rows_release(void);

/* Free the calling thread's scratch and per-thread oneDNN stream. */
void cpu_bf16_release(void);

#endif
