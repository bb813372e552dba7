/*
 * gemm.c — the CPU GEMM every matmul, linear and convolution goes through.
 *
 * Why oneDNN first: Debian's OpenBLAS 0.3.21 (DYNAMIC_ARCH) picks its kernel
 * from cpuid at load time, and on this project's machines it falls back to the
 * SSE3 "Prescott" kernel (~70 GFLOP/s on 2 cores) unless OPENBLAS_CORETYPE is
 * set, while oneDNN's JIT sgemm detects AVX-512 itself (~330 GFLOP/s, same
 * machine, n = 2048). We may not change the environment for the user, so we
 * use oneDNN when the build found it and OpenBLAS otherwise (or when
 * LATENTD_GEMM=openblas is set, for comparisons).
 *
 * Threads: with threads == 0 the library uses its own team (OpenMP for
 * oneDNN, OpenBLAS's pthreads), sized to the cores: the caller is the executor
 * and our pool sleeps meanwhile. With threads == 1 the call is
 * single-threaded, for pool workers that each run their own small GEMMs
 * (attention tiles); otherwise each worker would spawn a full team and the
 * cores would be oversubscribed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#ifdef LATENTD_HAVE_DNNL
#include <dnnl.h>
#include <omp.h>
#endif

#include "../tensor_impl.h"

static int use_dnnl = -1;

static void pick(void)
{
#ifdef LATENTD_HAVE_DNNL
    const char *g = getenv("LATENTD_GEMM");
    use_dnnl = !(g && strcmp(g, "openblas") == 0);
#else
    use_dnnl = 0;
#endif
}

const char *cpu_gemm_backend(void)
{
    static char buf[96];
    if (use_dnnl < 0)
        pick();
    if (use_dnnl)
        return "onednn";
    snprintf(buf, sizeof(buf), "openblas (%s)", openblas_get_corename());
    return buf;
}

static _Thread_local int blas_saved = -1;

void cpu_gemm_pool_enter(void)
{
    if (use_dnnl < 0)
        pick();
    if (!use_dnnl) {
        blas_saved = openblas_get_num_threads();
        openblas_set_num_threads(1);
    }
}

void cpu_gemm_pool_leave(void)
{
    if (!use_dnnl && blas_saved > 0) {
        openblas_set_num_threads(blas_saved);
        blas_saved = -1;
    }
}

void cpu_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
               int64_t ldc, int threads)
{
    if (use_dnnl < 0)
        pick();
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
        return;
    }
#ifdef LATENTD_HAVE_DNNL
    if (use_dnnl) {
        int saved = 0;
        if (threads == 1) {
            saved = omp_get_max_threads();
            omp_set_num_threads(1);
        }
        dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha,
                                      a, lda, b, ldb, beta, c, ldc);
        if (threads == 1)
            omp_set_num_threads(saved);
        if (st != dnnl_success)
            PANIC("dnnl_sgemm failed (%d) for %lldx%lldx%lld", (int)st, (long long)m,
                  (long long)n, (long long)k);
        return;
    }
#endif
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n, (blasint)k, alpha, a,
                (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
}
