/*
 * cublas_lazy.c — dlopen of cuBLAS on first use (cublas_lazy.h says why).
 */
#include "cublas_lazy.h"

#include <dlfcn.h>
#include <pthread.h>

#include "err.h"

#ifndef LATENTD_CUBLAS_SONAME
#define LATENTD_CUBLAS_SONAME "libcublas.so"
#endif

/* The table's types are the header's (a signature change in a new cuBLAS fails here). */
#define CU__SAME(a, b) _Static_assert(__builtin_types_compatible_p(__typeof__(a), b), #a)
CU__SAME(&cublasCreate_v2, cublasStatus_t (*)(cublasHandle_t *));
CU__SAME(&cublasDestroy_v2, cublasStatus_t (*)(cublasHandle_t));
CU__SAME(&cublasSetStream_v2, cublasStatus_t (*)(cublasHandle_t, cudaStream_t));
CU__SAME(&cublasGemmEx, cu__gemm_ex_fn);
CU__SAME(&cublasGemmStridedBatchedEx, cu__gemm_sb_ex_fn);

static struct cu__cublas_api api;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p)
        PANIC("cuBLAS: no symbol '%s': %s", name, dlerror());
    return p;
}

static void load(void)
{
    /* RTLD_LOCAL: its symbols stay out of the global namespace (nothing else binds to
     * them); RTLD_NOW: a missing symbol fails here, not mid-GEMM. */
    void *lib = dlopen(LATENTD_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        lib = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        PANIC("cannot load cuBLAS ('%s'): %s", LATENTD_CUBLAS_SONAME, dlerror());
    /* The _v2 names are what cublas_v2.h's cublasCreate etc. expand to. */
    *(void **)&api.create = sym(lib, "cublasCreate_v2");
    *(void **)&api.destroy = sym(lib, "cublasDestroy_v2");
    *(void **)&api.set_stream = sym(lib, "cublasSetStream_v2");
    *(void **)&api.gemm_ex = sym(lib, "cublasGemmEx");
    *(void **)&api.gemm_strided_batched_ex = sym(lib, "cublasGemmStridedBatchedEx");
}

const struct cu__cublas_api *cu__cublas(void)
{
    pthread_once(&once, load);
    return &api;
}
