/*
 * tensor_precision — the compute precision of the GEMM-based ops (matmul, linear,
 * linear+GEGLU, convolution) on the CPU backend: fp32 (the default) or bf16.
 *
 * DESIGN
 *
 * bf16 here means ComfyUI's --bf16-unet/--bf16-vae/--bf16-text-enc on a CPU: the GEMM
 * inputs, weight and activation, are rounded to bf16 (round to nearest even), products
 * are accumulated in fp32 and results are fp32. Everything else (norms, softmax,
 * attention, adds) stays fp32. Only a GEMM whose weight operand went through the op's
 * weight adapter (the `w` of linear/conv, an f16/bf16 operand of matmul) is affected;
 * GEMMs of two activations (attention's) stay fp32.
 *
 * The choice is a scope on the calling thread, set by whoever knows which model is
 * computing (memory/'s patcher sets it from the model a layer belongs to when the layer
 * is acquired): tensor/ knows nothing of models. The CPU backend picks how to run it
 * at run time (tensor_bf16_path): oneDNN's matmul primitive on AMX or AVX-512 BF16
 * where the CPU has them, else the operands rounded to bf16 and multiplied by the fp32
 * GEMM (same numbers, no speed-up). The CUDA backend ignores the scope (it computes in
 * the storage dtype).
 *
 * Weights: by default each op rounds its weight to bf16 into a reused per-thread
 * scratch (one pass from the f16 file weights, cheaper than the fp32 path's widening),
 * so bf16 holds no second copy of the model. LATENTD_BF16_CACHE_MB > 0 keeps up to that
 * many MiB of bf16 copies instead (keyed by the weight's address, dtype, size and a
 * sampled fingerprint; not counted by the memory planner). Whoever rewrites weight
 * memory in place (a LoRA or merge patch baked into a device copy, a model freed and
 * its mapping reused) calls tensor_bf16_cache_invalidate first.
 *
 * Winograd convolutions (cpu/winograd.c) run bf16 too: transformed weights and inputs
 * rounded, bf16 GEMMs, fp32 transforms.
 *
 * Threads: the precision scope is per thread (the executor's); the cache is shared
 * and locked (any thread).
 */
#ifndef LATENTD_TENSOR_PRECISION_H
#define LATENTD_TENSOR_PRECISION_H

#include <stddef.h>

enum tensor_precision {
    TENSOR_PRECISION_F32 = 0, /* default: bit-identical to the fp32 path */
    TENSOR_PRECISION_BF16,    /* bf16 GEMM inputs, fp32 accumulation and output */
};

/* Set the calling thread's GEMM precision; returns the previous one (restore it). */
enum tensor_precision tensor_precision_set(enum tensor_precision p);
enum tensor_precision tensor_precision_get(void);
/* "fp32" or "bf16" (static strings). */
const char *tensor_precision_name(enum tensor_precision p);

/* How bf16 GEMMs run on this CPU, e.g. "oneDNN brg:avx512_core_bf16 (AVX-512 BF16)" or
 * "emulated: operands rounded to bf16, fp32 GEMM (no AVX-512 BF16/AMX)". Decided once
 * (it may JIT a probe primitive); static string; any thread. */
const char *tensor_bf16_path(void);

/* Drop cached bf16 copies of any weight overlapping [p, p + bytes). Any thread; an
 * op in flight that uses such a copy keeps it until the op ends. */
void tensor_bf16_cache_invalidate(const void *p, size_t bytes);
/* Bytes the cache holds now (for logs and benchmarks). */
size_t tensor_bf16_cache_bytes(void);

#endif
