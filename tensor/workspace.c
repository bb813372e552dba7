/*
 * workspace.c — device memory an op allocates while it runs, for the memory planner.
 *
 * Keyed by device kind rather than by the compiled backends: the planner sizes plans
 * for a kind of device, and the figures must not change with what this build
 * compiled (test_tensor_cpu checks the CUDA ones on machines without CUDA). The CUDA
 * figures follow what tensor/cuda/ allocates (im2col buffer, attention score chunks).
 */
#include "tensor_impl.h"
#include "cuda/tensor_cuda.h"

size_t tensor_conv2d_workspace_bytes(enum dev_kind kind, enum tensor_dtype dt, int64_t ci,
                                     int64_t kh, int64_t kw, int64_t out_h, int64_t out_w,
                                     const struct tensor_conv2d_opts *o)
{
    if (kind != DEV_KIND_CUDA || !o)
        return 0;
    if (kh == 1 && kw == 1 && o->stride == 1 && !o->pad_top && !o->pad_left && !o->pad_bottom &&
        !o->pad_right)
        return 0;
    return (size_t)(ci * kh * kw * out_h * out_w) * tensor_dtype_size(dt);
}

size_t tensor_attention_workspace_bytes(enum dev_kind kind, enum tensor_dtype dt, int heads,
                                        int64_t tq, int64_t tk)
{
    if (kind != DEV_KIND_CUDA || heads < 1 || tq < 1 || tk < 1)
        return 0;
    int64_t chunk = tensor__cuda_attn_chunk(heads, tq, tk);
    return (size_t)(heads * chunk * tk) * (4 + tensor_dtype_size(dt));
}
