/*
 * tensor_cuda — the CUDA backend's entry points, reached only through its table
 * (cuda/backend.c) and copy.c's host <-> device staging (private to tensor/).
 * C and C++ (nvcc) both include it.
 *
 * Each function has the contract of the public op of the same name (tensor.h) with
 * arguments already checked and every operand on the same CUDA device. Work is
 * queued on the device's compute stream (dev_stream_native) and not waited for.
 * Compute: storage dtype in, f32 accumulation (cuBLAS compute 32F), f32 for norm
 * statistics and softmax. Temporaries are device tensors (can fail with
 * ERR_DEVICE_OOM).
 *
 * Threads: the executor thread only.
 */
#ifndef LATENTD_TENSOR_CUDA_H
#define LATENTD_TENSOR_CUDA_H

#include "backend_impl.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Same contracts as the public ops; arguments are already checked, every operand is on
 * the same CUDA device. */
int tensor__cuda_copy(struct tensor *dst, const struct tensor *src, struct err *e);
int tensor__cuda_fill(struct tensor *t, float value, struct err *e);
int tensor__cuda_matmul(struct tensor *out, const struct tensor *a, const struct tensor *b,
                        int trans_a, int trans_b, float alpha, struct err *e);
int tensor__cuda_linear(struct tensor *out, const struct tensor *x, const struct tensor *w,
                        const struct tensor *bias, struct err *e);
int tensor__cuda_conv2d(struct tensor *out, const struct tensor *x, const struct tensor *w,
                        const struct tensor *bias, const struct tensor_conv2d_opts *o,
                        struct err *e);
int tensor__cuda_group_norm(struct tensor *out, const struct tensor *x, int groups,
                            const struct tensor *gamma, const struct tensor *beta, float eps,
                            int fuse_silu, struct err *e);
int tensor__cuda_layer_norm(struct tensor *out, const struct tensor *x,
                            const struct tensor *gamma, const struct tensor *beta, float eps,
                            struct err *e);
int tensor__cuda_unary(struct tensor *out, const struct tensor *x, enum tensor__unary kind,
                       float p0, float p1, struct err *e);
int tensor__cuda_geglu(struct tensor *out, const struct tensor *x, struct err *e);
int tensor__cuda_softmax(struct tensor *out, const struct tensor *x, struct err *e);
int tensor__cuda_attention(struct tensor *out, const struct tensor *q, const struct tensor *k,
                           const struct tensor *v, int heads, float scale, unsigned flags,
                           struct err *e);
int tensor__cuda_binary(struct tensor *out, const struct tensor *a, const struct tensor *b,
                        int mul, struct err *e);
int tensor__cuda_lincomb(struct tensor *out, int n, const float *coef,
                         const struct tensor *const *in, struct err *e);
int tensor__cuda_upsample(struct tensor *out, const struct tensor *x, struct err *e);
int tensor__cuda_embedding(struct tensor *out, const struct tensor *table, const int32_t *ids,
                           int64_t n, struct err *e);
int tensor__cuda_prelu(struct tensor *out, const struct tensor *x, const struct tensor *slope,
                       struct err *e);
int tensor__cuda_pixel_shuffle(struct tensor *out, const struct tensor *x, int r, int inverse,
                               struct err *e);
void tensor__cuda_shutdown(void);

/* Attention score buffer cap and the query chunk it implies (shared with the
 * workspace estimate in workspace.c, so the planner's numbers match what runs). */
#define TENSOR__CUDA_ATTN_SCORE_BYTES ((size_t)64 << 20)
static inline int64_t tensor__cuda_attn_chunk(int heads, int64_t tq, int64_t tk)
{
    int64_t chunk = (int64_t)(TENSOR__CUDA_ATTN_SCORE_BYTES / ((size_t)heads * (size_t)tk * 4));
    return chunk < 1 ? 1 : chunk > tq ? tq : chunk;
}

/* PyTorch nearest index map (also used by the CPU path, defined in ops_elem.c). */
void tensor__nearest_map(int64_t *map, int64_t in, int64_t out);

#ifdef __cplusplus
}
#endif

#endif
