/*
 * gemm_wt.c — a Linear weight W [n, k] (f32, f16 or bf16) as its f32 transpose W^T [k, n].
 *
 * Why: oneDNN's single-threaded sgemm runs x @ W^T given W^T stored [k, n] (no-trans B)
 * 4-17 % faster per CPU-second than given W [n, k] (trans B) on the SD1.5 UNet's Linear
 * shapes (bench_ops --linear: op vs its "nn" column; 128..4096 rows, k and n 320..5120).
 * An f16 weight is widened for every call anyway (widen.c), so writing the transpose
 * instead of the plain image costs the same pass; linear.c uses it where rows are many
 * enough that the pass is small beside the GEMM. Widening is exact, so the values are
 * those of the plain image, only placed transposed.
 *
 * The kernel moves 16 x 16 blocks: 16 rows of W (16 k each) are loaded, widened and
 * transposed in AVX-512 registers, and stored as 16 64-byte pieces of rows of W^T; a
 * call fills whole rows of W^T, block after block along them. CPUs with AVX2 but not
 * AVX-512 move 8 x 8 blocks the same way; edges and older CPUs take a scalar path
 * (tensor_convert_host per row piece).
 *
 * W^T's rows are cpu_wt_ld(n) floats apart: n, or n + 16 when n floats are a multiple of
 * 2 KiB (n = 2560, 5120, 10240: the GEGLU weights). At such strides the 16 stores of a
 * block, and oneDNN's reads of 16 rows of B, all fall in one or two sets of the 64-set
 * L1 and evict each other.
 *
 * Threads: cpu_wt_rows is a pool task body (any thread); no state.
 */
#include <immintrin.h>
#include <string.h>

#include "adapt.h"

/* Rows [j0, j1) x columns [q0, q1) of w (n x k, dtype dt) into wt (k x n, leading
 * dimension ld), scalar. */
static void wt_scalar(float *wt, int64_t ld, const char *w, enum tensor_dtype dt, int64_t k,
                      int64_t j0, int64_t j1, int64_t q0, int64_t q1)
{
    size_t es = tensor_dtype_size(dt);
    float buf[64];
    for (int64_t j = j0; j < j1; j++)
        for (int64_t q = q0; q < q1; q += 64) {
            int64_t len = q1 - q < 64 ? q1 - q : 64;
            tensor_convert_host(buf, TENSOR_F32, w + ((size_t)j * (size_t)k + (size_t)q) * es, dt,
                                (size_t)len);
            for (int64_t i = 0; i < len; i++)
                wt[(q + i) * ld + j] = buf[i];
        }
}

#if defined(__x86_64__)
#define WT_AVX512 __attribute__((target("avx512f")))

WT_AVX512 static inline __m512 wt_load(const char *p, enum tensor_dtype dt)
{
    if (dt == TENSOR_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    if (dt == TENSOR_BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
    return _mm512_loadu_ps((const float *)p);
}

/* r[i] = row i of a 16 x 16 block -> r[c] = column c. Lane (128-bit) L of every row holds
 * its columns 4L..4L+3: unpack and shuffle_ps gather, per lane, one column of four rows;
 * shuffle_f32x4 then gathers the four lanes of a column. */
WT_AVX512 static inline void wt_transpose16(__m512 r[16])
{
    __m512 t[16], u[16], v[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int g = 0; g < 4; g++) { /* rows 4g..4g+3; u[4g + c]: column 4L + c of each lane */
        __m512 a = t[4 * g], b = t[4 * g + 1], c = t[4 * g + 2], d = t[4 * g + 3];
        u[4 * g + 0] = _mm512_shuffle_ps(a, c, _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * g + 1] = _mm512_shuffle_ps(a, c, _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * g + 2] = _mm512_shuffle_ps(b, d, _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * g + 3] = _mm512_shuffle_ps(b, d, _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int c = 0; c < 4; c++) {
        v[c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);     /* lanes 0, 2 */
        v[4 + c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd); /* lanes 1, 3 */
        v[8 + c] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
        v[12 + c] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
    }
    for (int c = 0; c < 4; c++) {
        r[c] = _mm512_shuffle_f32x4(v[c], v[8 + c], 0x88);
        r[4 + c] = _mm512_shuffle_f32x4(v[4 + c], v[12 + c], 0x88);
        r[8 + c] = _mm512_shuffle_f32x4(v[c], v[8 + c], 0xdd);
        r[12 + c] = _mm512_shuffle_f32x4(v[4 + c], v[12 + c], 0xdd);
    }
}

/* Rows [j0, j0 + 16) x columns [q0, q0 + 16) of w -> the 16 x 16 block of wt. */
WT_AVX512 static inline void wt_block16(float *wt, int64_t ld, const char *w, enum tensor_dtype dt,
                                        int64_t k, int64_t j0, int64_t q0)
{
    size_t es = tensor_dtype_size(dt);
    __m512 r[16];
    for (int i = 0; i < 16; i++)
        r[i] = wt_load(w + ((size_t)(j0 + i) * (size_t)k + (size_t)q0) * es, dt);
    wt_transpose16(r);
    for (int c = 0; c < 16; c++)
        _mm512_storeu_ps(wt + (q0 + c) * ld + j0, r[c]);
}

/* Rows [q0, q1) of wt (q0, q1 multiples of 16), columns [0, n16) (n16 a multiple of 16):
 * each group of 16 rows of wt is written left to right, so the stores run as 16
 * sequential streams (a block at a time down the columns put 16 stores n floats apart,
 * one cache set each when n x 4 bytes is a multiple of 4 KiB: 0.7 ns per element). */
WT_AVX512 static void wt_rows16(float *wt, int64_t ld, const char *w, enum tensor_dtype dt,
                                int64_t k, int64_t q0, int64_t q1, int64_t n16)
{
    int64_t q = q0;
    for (; q + 32 <= q1; q += 32) /* two blocks per step: whole 64-byte lines of f16 rows */
        for (int64_t j = 0; j < n16; j += 16) {
            wt_block16(wt, ld, w, dt, k, j, q);
            wt_block16(wt, ld, w, dt, k, j, q + 16);
        }
    for (; q < q1; q += 16)
        for (int64_t j = 0; j < n16; j += 16)
            wt_block16(wt, ld, w, dt, k, j, q);
}

/* The same with 8 x 8 blocks in AVX registers, for CPUs with AVX2 (and F16C) but no
 * AVX-512: the scalar path cost 8 % of a cold 256^2 txt2img's CPU time on a Zen 3
 * (perf), twice the GEMMs' share of the same weights' reads. */
#define WT_AVX2 __attribute__((target("avx2,f16c")))

WT_AVX2 static inline __m256 wt_load8(const char *p, enum tensor_dtype dt)
{
    if (dt == TENSOR_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    if (dt == TENSOR_BF16)
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
    return _mm256_loadu_ps((const float *)p);
}

/* r[i] = row i of an 8 x 8 block -> r[c] = column c: unpack pairs of rows, gather four
 * rows' columns per 128-bit lane (shuffle_ps), then swap lanes between row quads. */
WT_AVX2 static inline void wt_transpose8(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int g = 0; g < 2; g++) { /* rows 4g..4g+3; u[4g + c]: column c (+4 in lane 1) */
        __m256 a = t[4 * g], b = t[4 * g + 1], c = t[4 * g + 2], d = t[4 * g + 3];
        u[4 * g + 0] = _mm256_shuffle_ps(a, c, _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * g + 1] = _mm256_shuffle_ps(a, c, _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * g + 2] = _mm256_shuffle_ps(b, d, _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * g + 3] = _mm256_shuffle_ps(b, d, _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
        r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
}

WT_AVX2 static inline void wt_block8(float *wt, int64_t ld, const char *w, enum tensor_dtype dt,
                                     int64_t k, int64_t j0, int64_t q0)
{
    size_t es = tensor_dtype_size(dt);
    __m256 r[8];
    for (int i = 0; i < 8; i++)
        r[i] = wt_load8(w + ((size_t)(j0 + i) * (size_t)k + (size_t)q0) * es, dt);
    wt_transpose8(r);
    for (int c = 0; c < 8; c++)
        _mm256_storeu_ps(wt + (q0 + c) * ld + j0, r[c]);
}

/* As wt_rows16, 8 x 8 blocks; four per step (whole 64-byte lines of f16 rows). */
WT_AVX2 static void wt_rows8(float *wt, int64_t ld, const char *w, enum tensor_dtype dt, int64_t k,
                             int64_t q0, int64_t q1, int64_t n8)
{
    int64_t q = q0;
    for (; q + 32 <= q1; q += 32)
        for (int64_t j = 0; j < n8; j += 8)
            for (int b = 0; b < 32; b += 8)
                wt_block8(wt, ld, w, dt, k, j, q + b);
    for (; q < q1; q += 8)
        for (int64_t j = 0; j < n8; j += 8)
            wt_block8(wt, ld, w, dt, k, j, q);
}

/* 16: AVX-512; 8: AVX2 with F16C; 0: scalar. cpu_wt_vec (adapt.h) < 0: decide by the
 * CPU, once; tests set it to compare the paths. */
int cpu_wt_vec = -1;

static int wt_vec(void)
{
    if (cpu_wt_vec < 0) {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f"))
            cpu_wt_vec = 16;
        else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"))
            cpu_wt_vec = 8;
        else
            cpu_wt_vec = 0;
    }
    return cpu_wt_vec;
}
#endif

int64_t cpu_wt_ld(int64_t n)
{
    return n * 4 % 2048 == 0 ? n + 16 : n;
}

void cpu_wt_rows(float *wt, int64_t ld, const void *w, enum tensor_dtype dt, int64_t n, int64_t k,
                 int64_t q0, int64_t q1)
{
    int64_t n16 = 0, q16 = q0;
#if defined(__x86_64__)
    int vec = wt_vec();
    if (vec && (dt == TENSOR_F32 || dt == TENSOR_F16 || dt == TENSOR_BF16)) {
        n16 = n / vec * vec;
        q16 = q0 + (q1 - q0) / vec * vec;
        if (vec == 16)
            wt_rows16(wt, ld, w, dt, k, q0, q16, n16);
        else
            wt_rows8(wt, ld, w, dt, k, q0, q16, n16);
        if (n16 < n) /* the ragged columns of the rows done above */
            wt_scalar(wt, ld, w, dt, k, n16, n, q0, q16);
    }
#endif
    wt_scalar(wt, ld, w, dt, k, 0, n, q16, q1);
}
