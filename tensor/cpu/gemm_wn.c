/*
 * gemm_wn.c — C [m, n] = W [m, k] x B [k, n] for few columns (n <= CPU_GEMM_WN_MAX_N), with
 * W as the checkpoint stores it (f16, bf16 or f32) and widened in the kernel, for CPUs
 * with AVX2 + FMA + F16C (gemm_wn.h), with an AVX-512 micro-kernel where the CPU has it.
 *
 * Why: the UNet's convolutions at 8x8 and 4x4 pixels (im2col + GEMM, Winograd does not pay
 * there) have a big weight and few columns: 1280 x 11520 against 2 x 64 or 2 x 16 pixels.
 * The op widened the whole f16 weight (a 59 MB f32 image written and read back) and then
 * oneDNN re-packed that image for its GEMM; with so few columns the passes over the
 * weight are the cost (bench_ops --conv 256 on a Zen 3: f16 weight 40 ms against 36 ms on
 * an f32 weight at 8x8, 14.1 against 8.3 ms at 4x4). Here each weight element is read
 * once, as stored, into a small f32 buffer that the micro-kernel broadcasts from.
 *
 * Blocking: rows of W are split over the pool in blocks of the micro-kernel's mr (AVX2:
 * 6, AVX-512: 12). A task walks k in chunks of KC: it widens its mr rows' chunk (mr x KC
 * floats, L1) and, for every 2 vectors of columns (16 or 32), adds W_chunk x B_chunk into
 * that tile of C (12 or 24 accumulators; the B chunk, KC x n floats, stays in L2 across
 * the row blocks of the task). C is read and written once per chunk: with n <= 128 a
 * task's C rows stay in L2.
 *
 * Numerics: fp32 FMAs, k summed in order within a chunk and chunk after chunk; not
 * oneDNN's order, so not its bits, but the same for every dtype of W (widening is exact).
 *
 * Threads: the executor (calls tensor__pool_for); no state.
 */
#include <immintrin.h>
#include <string.h>

#include "gemm_wn.h"
#include "../tensor_impl.h"

#define MR 6   /* rows of W per micro-tile */
#define NR 16  /* columns per micro-tile: two 8-float vectors */
#define KC 256 /* k per chunk: a 6 x KC widened block is 6 KiB */

int cpu_gemm_wn_usable(void)
{
    static int have = -1;
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    }
    return have;
}

#if defined(__clang__) /* clang ignores GCC target pragmas */
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#define INLINE static inline __attribute__((always_inline))

/* rows r of w (dtype dt, row length k), columns k0 .. k0 + kc, into wb [r][KC] */
INLINE void widen_rows(float *wb, const char *w, enum tensor_dtype dt, int64_t k, int r, int64_t k0,
                       int64_t kc)
{
    size_t es = tensor_dtype_size(dt);
    for (int i = 0; i < r; i++) {
        const char *src = w + ((size_t)i * (size_t)k + (size_t)k0) * es;
        float *d = wb + i * KC;
        int64_t q = 0;
        if (dt == TENSOR_F16)
            for (; q + 8 <= kc; q += 8)
                _mm256_storeu_ps(d + q, _mm256_cvtph_ps(_mm_loadu_si128(
                                            (const __m128i *)(src + (size_t)q * 2))));
        else if (dt == TENSOR_BF16)
            for (; q + 8 <= kc; q += 8)
                _mm256_storeu_ps(d + q, _mm256_castsi256_ps(_mm256_slli_epi32(
                                            _mm256_cvtepu16_epi32(_mm_loadu_si128(
                                                (const __m128i *)(src + (size_t)q * 2))),
                                            16)));
        if (q < kc)
            tensor_convert_host(d + q, TENSOR_F32, src + (size_t)q * es, dt, (size_t)(kc - q));
    }
}

/* C[r rows][nv vectors] += wb [r][kc] x b [kc][.] (rows ldb apart); r <= MR, nv <= 2 */
INLINE void tile(const int r, const int nv, float *c, int64_t ldc, const float *wb, const float *b,
                 int64_t ldb, int64_t kc)
{
    __m256 acc[MR][2];
    for (int i = 0; i < r; i++)
        for (int v = 0; v < nv; v++)
            acc[i][v] = _mm256_loadu_ps(c + i * ldc + 8 * v);
    for (int64_t q = 0; q < kc; q++) {
        __m256 bv[2];
        for (int v = 0; v < nv; v++)
            bv[v] = _mm256_loadu_ps(b + q * ldb + 8 * v);
        for (int i = 0; i < r; i++) {
            __m256 a = _mm256_broadcast_ss(wb + i * KC + q);
            for (int v = 0; v < nv; v++)
                acc[i][v] = _mm256_fmadd_ps(a, bv[v], acc[i][v]);
        }
    }
    for (int i = 0; i < r; i++)
        for (int v = 0; v < nv; v++)
            _mm256_storeu_ps(c + i * ldc + 8 * v, acc[i][v]);
}

/* Compile-time instances of a tile function FN: r rows (the case), nv = 1 or 2 vectors. */
#define WN_CASE(FN, R)                                                                             \
    case R:                                                                                        \
        if (nv == 2)                                                                               \
            FN(R, 2, c, ldc, wb, b, ldb, kc);                                                      \
        else                                                                                       \
            FN(R, 1, c, ldc, wb, b, ldb, kc);                                                      \
        break;

static void tile_any(int r, int nv, float *c, int64_t ldc, const float *wb, const float *b,
                     int64_t ldb, int64_t kc)
{
    switch (r) {
        WN_CASE(tile, 1)
        WN_CASE(tile, 2)
        WN_CASE(tile, 3)
        WN_CASE(tile, 4)
        WN_CASE(tile, 5)
        WN_CASE(tile, 6)
    }
}

/* A micro-kernel: tiles of up to mr rows x 2 vectors of vw floats (tile(r, nv, ...)). */
typedef void (*wn_tile_fn)(int r, int nv, float *c, int64_t ldc, const float *wb, const float *b,
                           int64_t ldb, int64_t kc);
struct wn_kernel {
    int mr, vw;
    wn_tile_fn tile;
};

#define MR_MAX 12 /* the largest mr (the AVX-512 kernel's) */

struct wn_job {
    float *c;
    const char *w;
    enum tensor_dtype dt;
    const float *b;
    int64_t m, n, k, rows; /* rows of W per task, a multiple of the kernel's mr */
    const struct wn_kernel *kn;
};

static void wn_task(void *ctx, int64_t t0, int64_t t1, int tid)
{
    (void)tid;
    const struct wn_job *j = ctx;
    const int mr = j->kn->mr, vw = j->kn->vw;
    size_t es = tensor_dtype_size(j->dt);
    int64_t nv = j->n / vw * vw;
    float wb[MR_MAX * KC] __attribute__((aligned(64)));
    float ct[MR_MAX * 16]; /* a ragged column tail (n % vw) goes through this */
    for (int64_t t = t0; t < t1; t++) {
        int64_t r0 = t * j->rows, r1 = r0 + j->rows < j->m ? r0 + j->rows : j->m;
        for (int64_t i = r0; i < r1; i++)
            memset(j->c + i * j->n, 0, (size_t)j->n * sizeof(float));
        for (int64_t k0 = 0; k0 < j->k; k0 += KC) {
            int64_t kc = j->k - k0 < KC ? j->k - k0 : KC;
            const float *bk = j->b + k0 * j->n;
            for (int64_t i = r0; i < r1; i += mr) {
                int r = r1 - i < mr ? (int)(r1 - i) : mr;
                widen_rows(wb, j->w + (size_t)(i * j->k) * es, j->dt, j->k, r, k0, kc);
                float *ci = j->c + i * j->n;
                int64_t q = 0;
                for (; q + 2 * vw <= nv; q += 2 * vw)
                    j->kn->tile(r, 2, ci + q, j->n, wb, bk + q, j->n, kc);
                for (; q < nv; q += vw)
                    j->kn->tile(r, 1, ci + q, j->n, wb, bk + q, j->n, kc);
                if (q < j->n) { /* the last n % vw columns, scalar */
                    int64_t nt = j->n - q;
                    memset(ct, 0, sizeof(ct));
                    for (int a = 0; a < r; a++)
                        for (int64_t p = 0; p < kc; p++)
                            for (int64_t x = 0; x < nt; x++)
                                ct[a * 16 + x] += wb[a * KC + p] * bk[p * j->n + q + x];
                    for (int a = 0; a < r; a++)
                        for (int64_t x = 0; x < nt; x++)
                            ci[a * j->n + q + x] += ct[a * 16 + x];
                }
            }
        }
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

/*
 * The same micro-tile on AVX-512 (cpu_gemm_wn picks it on CPUs with AVX-512F): MR512 x 32
 * columns in 2 x MR512 zmm accumulators (24 of the 32 registers), so a k step is 24 FMAs
 * on 2 loads of B and 12 broadcasts of W. Widening is the AVX2 one above (F16C).
 */
#define MR512 12
#define NR512 32

__attribute__((target("avx512f"), always_inline)) static inline void
tile512(const int r, const int nv, float *c, int64_t ldc, const float *wb, const float *b,
        int64_t ldb, int64_t kc)
{
    __m512 acc[MR512][2];
    for (int i = 0; i < r; i++)
        for (int v = 0; v < nv; v++)
            acc[i][v] = _mm512_loadu_ps(c + i * ldc + 16 * v);
    for (int64_t q = 0; q < kc; q++) {
        __m512 bv[2];
        for (int v = 0; v < nv; v++)
            bv[v] = _mm512_loadu_ps(b + q * ldb + 16 * v);
        for (int i = 0; i < r; i++) {
            __m512 a = _mm512_set1_ps(wb[i * KC + q]);
            for (int v = 0; v < nv; v++)
                acc[i][v] = _mm512_fmadd_ps(a, bv[v], acc[i][v]);
        }
    }
    for (int i = 0; i < r; i++)
        for (int v = 0; v < nv; v++)
            _mm512_storeu_ps(c + i * ldc + 16 * v, acc[i][v]);
}

__attribute__((target("avx512f"))) static void tile512_any(int r, int nv, float *c, int64_t ldc,
                                                           const float *wb, const float *b,
                                                           int64_t ldb, int64_t kc)
{
    switch (r) {
        WN_CASE(tile512, 1)
        WN_CASE(tile512, 2)
        WN_CASE(tile512, 3)
        WN_CASE(tile512, 4)
        WN_CASE(tile512, 5)
        WN_CASE(tile512, 6)
        WN_CASE(tile512, 7)
        WN_CASE(tile512, 8)
        WN_CASE(tile512, 9)
        WN_CASE(tile512, 10)
        WN_CASE(tile512, 11)
        WN_CASE(tile512, 12)
    }
}

int cpu_gemm_wn_avx512 = -1; /* < 0: by the CPU; 0/1 force (tests compare the kernels) */

void cpu_gemm_wn(float *c, const void *w, enum tensor_dtype dt, const float *b, int64_t m,
                 int64_t n, int64_t k)
{
    int nt = tensor__pool_threads();
    if (cpu_gemm_wn_avx512 < 0)
        cpu_gemm_wn_avx512 = __builtin_cpu_supports("avx512f") != 0;
    static const struct wn_kernel avx2 = {MR, 8, tile_any}, avx512 = {MR512, 16, tile512_any};
    const struct wn_kernel *kn = cpu_gemm_wn_avx512 ? &avx512 : &avx2;
    /* two tasks per thread, in whole micro-tiles */
    int64_t rows = (m + 2 * nt - 1) / (2 * nt);
    rows = (rows + kn->mr - 1) / kn->mr * kn->mr;
    struct wn_job j = {c, w, dt, b, m, n, k, rows, kn};
    tensor__pool_for((m + rows - 1) / rows, wn_task, &j);
}
