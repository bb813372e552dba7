/*
 * backend.c — the CPU backend's table: f32 kernels over host memory, for the cpu and
 * sim devices (and host tensors outside any device). Every op, every dtype (f16/bf16
 * operands are converted to f32 temporaries, adapt.h; f16/bf16 weights of the GEMM ops
 * into a reused scratch, widen.c).
 */
#include "adapt.h"
#include "cpu_backend.h"
#include "gemm_bf16.h"

/* The pool's threads, oneDNN's primitives, the calling thread's scratch (every kept
 * buffer tensor_cpu_scratch_release frees, and the bf16 GEMM's) and the bf16 weight
 * copies; all restart on the next op. */
static void cpu_shutdown(void)
{
    tensor__pool_shutdown();
    cpu_conv_dnnl_release();
    tensor_cpu_scratch_release();
    cpu_bf16_release();
    cpu_bf16_cache_clear();
}

const struct tensor__backend tensor__cpu_backend = {
    .name = "CPU",
    .dev_kinds = 1u << DEV_KIND_CPU | 1u << DEV_KIND_SIM,
    .copy = tensor__cpu_copy,
    .fill = tensor__cpu_fill,
    .matmul = tensor__cpu_matmul,
    .linear = tensor__cpu_linear,
    .linear_geglu = tensor__cpu_linear_geglu,
    .conv2d = tensor__cpu_conv2d,
    .conv2d_up2 = tensor__cpu_conv2d_up2,
    .conv2d_gn = tensor__cpu_conv2d_gn,
    .group_norm = tensor__cpu_group_norm,
    .layer_norm = tensor__cpu_layer_norm,
    .unary = tensor__cpu_unary,
    .geglu = tensor__cpu_geglu,
    .softmax = tensor__cpu_softmax,
    .attention = tensor__cpu_attention,
    .binary = tensor__cpu_binary,
    .lincomb = tensor__cpu_lincomb,
    .upsample = tensor__cpu_upsample,
    .embedding = tensor__cpu_embedding,
    .prelu = tensor__cpu_prelu,
    .pixel_shuffle = tensor__cpu_pixel_shuffle,
    .shutdown = cpu_shutdown,
};
