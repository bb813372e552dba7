/*
 * cublas_lazy — cuBLAS, loaded on the first GEMM instead of at process start.
 *
 * Why: linking libcublas pulls in libcublasLt (540 MB on CUDA 13), whose load-time
 * relocations and initialisers alone cost ~150 MiB of RSS and tens of ms before
 * main() (bench/http: idle RSS 167 MiB, exec -> first 200 126 ms in the CUDA build,
 * even with --cpu). Only the CUDA backend's GEMMs need it, so it is dlopen-ed then,
 * and a server that never runs a CUDA GEMM (--cpu, no GPU, the API-only process)
 * never maps it. The five entry points blas.cu calls are resolved once.
 *
 * Invariant: nothing else in the tree links or calls cuBLAS directly; the build
 * links the CUDA runtime only (tensor/CMakeLists.txt), so a direct call would fail
 * to link rather than silently load the library at start.
 *
 * Threads: cu__cublas() may be called from any thread (pthread_once); the returned
 * table is immutable and lives until exit.
 */
#ifndef LATENTD_TENSOR_CUDA_CUBLAS_LAZY_H
#define LATENTD_TENSOR_CUDA_CUBLAS_LAZY_H

#include <cublas_v2.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The C signatures of cublas_api.h, spelled out: in C++ the header overloads GemmEx with
 * compatibility wrappers, so decltype cannot name them. cublas_lazy.c checks each type
 * against the header's declaration at compile time. */
typedef cublasStatus_t (*cu__gemm_ex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                         int, int, int, const void *, const void *,
                                         cudaDataType, int, const void *, cudaDataType, int,
                                         const void *, void *, cudaDataType, int,
                                         cublasComputeType_t, cublasGemmAlgo_t);
typedef cublasStatus_t (*cu__gemm_sb_ex_fn)(cublasHandle_t, cublasOperation_t,
                                            cublasOperation_t, int, int, int, const void *,
                                            const void *, cudaDataType, int, long long int,
                                            const void *, cudaDataType, int, long long int,
                                            const void *, void *, cudaDataType, int,
                                            long long int, int, cublasComputeType_t,
                                            cublasGemmAlgo_t);

struct cu__cublas_api {
    cublasStatus_t (*create)(cublasHandle_t *handle);
    cublasStatus_t (*destroy)(cublasHandle_t handle);
    cublasStatus_t (*set_stream)(cublasHandle_t handle, cudaStream_t stream);
    cu__gemm_ex_fn gemm_ex;
    cu__gemm_sb_ex_fn gemm_strided_batched_ex;
};

/*
 * The cuBLAS entry points, loading the library on the first call (LATENTD_CUBLAS_SONAME,
 * the build's major version, then the unversioned name). A missing or incomplete
 * library is fatal (PANIC with dlerror's text): a CUDA device opened, so the install is
 * broken, and there is no CPU fallback for a GEMM already placed on the GPU.
 */
const struct cu__cublas_api *cu__cublas(void);

#ifdef __cplusplus
}
#endif

#endif
