/*
 * cuda_common.cuh — shared helpers of the CUDA backend (private to tensor/cuda/).
 *
 * Dtype handling: kernels read and write elements through ld()/st(), which
 * switch on the storage dtype at run time. The switch is uniform across a
 * launch (no divergence) and keeps one kernel per op instead of nine template
 * instances; the bandwidth-bound kernels do not notice. GEMMs go to cuBLAS
 * with the storage dtype in and f32 accumulation.
 */
#ifndef LATENTD_TENSOR_CUDA_COMMON_CUH
#define LATENTD_TENSOR_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "alloc.h"
#include "device.h"
#include "err.h"
#include "tensor.h"
}
#include "tensor_cuda.h"

/* A failed launch or sync is fatal (STYLE.md "Errors"); allocations return errors. */
#define CUDA_CHECK(x)                                                                     \
    do {                                                                                  \
        cudaError_t cc__ = (x);                                                           \
        if (cc__ != cudaSuccess)                                                          \
            err__panic(__FILE__, __LINE__, "%s: %s", #x, cudaGetErrorString(cc__));       \
    } while (0)

#define CUBLAS_CHECK(x)                                                                   \
    do {                                                                                  \
        cublasStatus_t cs__ = (x);                                                        \
        if (cs__ != CUBLAS_STATUS_SUCCESS)                                                \
            err__panic(__FILE__, __LINE__, "%s: cublas status %d", #x, (int)cs__);        \
    } while (0)

#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

static inline __device__ float ld(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case TENSOR_F32: return ((const float *)p)[i];
    case TENSOR_F16: return __half2float(((const __half *)p)[i]);
    default: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    }
}

static inline __device__ void st(void *p, int dt, int64_t i, float v)
{
    switch (dt) {
    case TENSOR_F32: ((float *)p)[i] = v; break;
    case TENSOR_F16: ((__half *)p)[i] = __float2half_rn(v); break;
    default: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
    }
}

/* A tensor's layout, right-aligned to 4 dims, passed to kernels by value. */
struct cu_lay {
    int64_t sh[4];
    int64_t st[4];
};

static inline cu_lay cu_layout(const struct tensor *t)
{
    cu_lay l;
    int pad = 4 - t->ndim;
    for (int i = 0; i < 4; i++) {
        l.sh[i] = i < pad ? 1 : t->shape[i - pad];
        l.st[i] = i < pad ? 0 : t->stride[i - pad];
    }
    return l;
}

/* Element offset of linear (row-major) index i in layout l. */
static inline __device__ int64_t cu_off(const cu_lay &l, int64_t i)
{
    int64_t i3 = i % l.sh[3];
    i /= l.sh[3];
    int64_t i2 = i % l.sh[2];
    i /= l.sh[2];
    int64_t i1 = i % l.sh[1];
    int64_t i0 = i / l.sh[1];
    return i0 * l.st[0] + i1 * l.st[1] + i2 * l.st[2] + i3 * l.st[3];
}

static inline unsigned cu_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 65535 * 32 ? 65535 * 32 : b);
}

/* Grid-stride loop over [0, n). */
#define CU_FOR(i, n)                                                                      \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);             \
         i += (int64_t)blockDim.x * gridDim.x)

/* The device's compute stream and cuBLAS handle (cuda/blas.cu). */
cudaStream_t cu_stream(const struct tensor *t);
cublasHandle_t cu_blas(const struct tensor *t);

/* t itself when contiguous with dtype dt, else a new contiguous device copy in *tmp
 * (caller frees *tmp with tensor_free; NULL when not needed). */
int cu_contig(const struct tensor *t, enum tensor_dtype dt, struct tensor **tmp,
              const struct tensor **out, struct err *e);

static inline cudaDataType_t cu_dtype(enum tensor_dtype dt)
{
    return dt == TENSOR_F32 ? CUDA_R_32F : dt == TENSOR_F16 ? CUDA_R_16F : CUDA_R_16BF;
}

#endif
