/*
 * backend.c — the CUDA backend's table over the entry points of blas.cu and
 * kernels.cu (tensor_cuda.h). linear_geglu is left to the chunked fallback, as before.
 */
#include "tensor_cuda.h"

/* The kernel works out broadcasting from the tensors itself. */
static int cuda_binary(struct tensor *out, const struct tensor *a, const struct tensor *b,
                       const struct tensor__bcast *bc, int mul, struct err *e)
{
    return tensor__cuda_binary(out, a, b, mul, e);
}

const struct tensor__backend tensor__cuda_backend = {
    .name = "CUDA",
    .dev_kinds = 1u << DEV_KIND_CUDA,
    .copy = tensor__cuda_copy,
    .fill = tensor__cuda_fill,
    .matmul = tensor__cuda_matmul,
    .linear = tensor__cuda_linear,
    .conv2d = tensor__cuda_conv2d,
    .group_norm = tensor__cuda_group_norm,
    .layer_norm = tensor__cuda_layer_norm,
    .unary = tensor__cuda_unary,
    .geglu = tensor__cuda_geglu,
    .softmax = tensor__cuda_softmax,
    .attention = tensor__cuda_attention,
    .binary = cuda_binary,
    .lincomb = tensor__cuda_lincomb,
    .upsample = tensor__cuda_upsample,
    .embedding = tensor__cuda_embedding,
    .prelu = tensor__cuda_prelu,
    .pixel_shuffle = tensor__cuda_pixel_shuffle,
    .shutdown = tensor__cuda_shutdown,
};
