/*
 * linear_avx512bf16.c — Linear and Linear + GEGLU under bf16 precision on AVX-512 BF16
 * (vdpbf16ps), for CPUs without AMX (AMD Zen 4/5), on many rows (linear.h).
 *
 * Why not cpu_sgemm's bf16 path (gemm.c, oneDNN's matmul), which these ops take
 * otherwise: there a Linear converts its weight into a bf16 copy (a pass), writes the
 * bias into all of y (a pass), rounds x per panel into a copy (a pass) and has oneDNN
 * read y back (beta 1); the GEGLU's tiles do the same per tile. On a Zen 5 the 8192 x 320
 * -> 320 Linears of a 512^2 step ran no faster in bf16 than in fp32 (~360 GFLOP/s
 * against a vdpbf16ps peak of ~700). Here, as linear_amx.c does on tiles: W goes from its
 * stored dtype into the kernel's layout once per op, x's rows are rounded once per row
 * band into the thread's scratch (L2), the bias is the accumulators' first value and the
 * GEGLU runs on each tile of [a | g] while it is in L1.
 *
 * The micro-kernel: 6 rows x 64 columns in 24 accumulators. vdpbf16ps adds
 * a[2i] b[2i] + a[2i+1] b[2i+1] into f32 lane i, so B is packed as column groups of 64,
 * each [k/2][64] pairs (W[col][2p], W[col][2p + 1]), and a row's pair of x is one 32-bit
 * broadcast from the rounded band. Per pair of K: 4 loads, 6 broadcasts, 24 products.
 * K runs in blocks of K_BLOCK (a group's block of B, 128 KiB, stays in L2 while every
 * 6-row tile of the band meets it); y itself is the accumulator between blocks. The GEGLU
 * takes K whole (SD's is at most 1280).
 *
 * Only for many rows (>= CPU_LINEAR_T_ROWS, the UNet's 64^2 and 32^2 levels), where W is
 * small beside x and packing it once per op is cheap; fewer rows keep cpu_sgemm's path
 * (at 512 rows this kernel measured no faster: packing W per op cost what it gained).
 *
 * The same GEMM serves conv.c's small images (cpu_bf16v_gemm): there A is the weight, as
 * stored (f16 rows rounded per band and K block like x's), and B the im2col columns.
 *
 * Numerics: bf16 operands rounded to nearest even, fp32 sums, as every bf16 GEMM here;
 * only the order of the sums over K differs from the other paths.
 *
 * Threads: the executor calls cpu_linear_bf16v; the packing and the row bands run on the
 * pool; scratch is the calling / pool thread's, kept (cpu_linear_bf16v_release).
 */
#include <string.h>

#include <immintrin.h>

#include "adapt.h"
#include "gemm_amx.h" /* cpu_amx_vnni_pair: AVX-512 BF16 only */
#include "gemm_bf16.h"
#include "linear.h"
#include "../tensor_impl.h"
#include "../tensor_precision.h"

#define MR 6         /* rows per micro-tile */
#define NG 64        /* columns per group (four 16-lane vectors) */
#define K_BLOCK 1024 /* K per block (512 pairs: a group's block of B is 128 KiB) */
#define BAND_ROWS 96 /* rows per task (a multiple of MR) */
#define GEGLU_KMAX 2048

/* The calling thread's packed W (+ bias), and a pool thread's band scratch. */
static _Thread_local struct cpu_scratch op_w, task_s;

struct lv_job {
    const void *a; /* A [rows, k] (lda apart) at adt: x for a Linear, W for a conv */
    enum tensor_dtype adt;
    int64_t lda;
    float *y; /* [rows, n] (ldy apart), or the GEGLU's [rows, h] */
    int64_t ldy;
    const uint32_t *bp;        /* B packed: group g at bp + g * kp * NG */
    const float *bias;         /* per column, padded to the groups' width, or NULL */
    int64_t rows, k, kp, n, h; /* kp: pairs of K (k rounded up to even, halved); h: GEGLU */
    enum tensor_dtype wdt;     /* a Linear's W [n, k] (pack_w_task) */
    const void *w;
};

int cpu_linear_bf16v_ok(const struct tensor *w, int64_t rows, int geglu)
{
    if (tensor_precision_get() != TENSOR_PRECISION_BF16 || !cpu_linear_use_t(rows) ||
        cpu_bf16_amx() || !cpu_avx512bf16_usable())
        return 0;
    if (w->ndim != 2 || !tensor_is_contiguous(w))
        return 0;
    if (w->dtype != TENSOR_F32 && w->dtype != TENSOR_F16 && w->dtype != TENSOR_BF16)
        return 0;
    /* the GEGLU's g columns start a group of their own, and its K is taken whole */
    return !geglu || (w->shape[0] % (2 * NG) == 0 && w->shape[1] <= GEGLU_KMAX);
}

/* n values stored at dt (f32, f16 or bf16) as bf16 into dst, then a zero when n is odd
 * (the last pair made whole). */
static void bf16_row(uint16_t *dst, const void *src, enum tensor_dtype dt, int64_t n)
{
    if (dt == TENSOR_F16)
        cpu_bf16_from_f16(dst, src, n);
    else if (dt == TENSOR_BF16)
        memcpy(dst, src, (size_t)n * 2);
    else
        cpu_bf16_round(dst, src, n);
    if (n % 2)
        dst[n] = 0;
}

/* Row `col` of W as bf16 pairs into dst (kp pairs; zero past W's last row). */
static void w_row(uint16_t *dst, const struct lv_job *j, int64_t col)
{
    if (col >= j->n)
        memset(dst, 0, (size_t)j->kp * 4);
    else
        bf16_row(dst, (const char *)j->w + (size_t)(col * j->k) * tensor_dtype_size(j->wdt), j->wdt,
                 j->k);
}

static void pack_w_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const struct lv_job *j = ctx;
    uint32_t *row = (uint32_t *)cpu_scratch_grow(&task_s, (size_t)j->kp + 16);
    for (int64_t g = b; g < e; g++) {
        uint32_t *dst = (uint32_t *)j->bp + g * j->kp * NG;
        for (int64_t c = 0; c < NG; c++) {
            w_row((uint16_t *)row, j, g * NG + c);
            for (int64_t p = 0; p < j->kp; p++)
                dst[p * NG + c] = row[p];
        }
    }
}

#if defined(__clang__) /* clang ignores GCC target pragmas */
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma"))),  \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,fma")
#endif

#define INLINE static inline __attribute__((always_inline))

/*
 * c [mr][ldc] (+)= a [mr rows, lda pairs apart] x b [np pairs][NG] over np pairs, for the
 * first `cols` columns (<= NG). init: 0 load c (accumulate), 1 start from bias (NULL: 0).
 */
INLINE void tile(const int mr, const uint32_t *a, int64_t lda, const uint32_t *b, int64_t np,
                 float *c, int64_t ldc, int cols, int init, const float *bias)
{
    __m512 acc[MR][4];
    __mmask16 m[4];
    for (int v = 0; v < 4; v++) {
        int left = cols - 16 * v;
        m[v] = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
    }
    for (int v = 0; v < 4; v++) {
        __m512 b0 = init && bias ? _mm512_maskz_loadu_ps(m[v], bias + 16 * v) : _mm512_setzero_ps();
        for (int r = 0; r < mr; r++)
            acc[r][v] = init ? b0 : _mm512_maskz_loadu_ps(m[v], c + r * ldc + 16 * v);
    }
    for (int64_t p = 0; p < np; p++) {
        __m512i bv[4];
        for (int v = 0; v < 4; v++)
            bv[v] = _mm512_load_si512(b + p * NG + 16 * v);
        for (int r = 0; r < mr; r++) {
            __m512i av = _mm512_set1_epi32((int)a[r * lda + p]);
            for (int v = 0; v < 4; v++)
                acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)av, (__m512bh)bv[v]);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < 4; v++)
            _mm512_mask_storeu_ps(c + r * ldc + 16 * v, m[v], acc[r][v]);
}

static void tile_mr(int mr, const uint32_t *a, int64_t lda, const uint32_t *b, int64_t np, float *c,
                    int64_t ldc, int cols, int init, const float *bias)
{
    switch (mr) {
    case 6:
        tile(6, a, lda, b, np, c, ldc, cols, init, bias);
        break;
    case 5:
        tile(5, a, lda, b, np, c, ldc, cols, init, bias);
        break;
    case 4:
        tile(4, a, lda, b, np, c, ldc, cols, init, bias);
        break;
    case 3:
        tile(3, a, lda, b, np, c, ldc, cols, init, bias);
        break;
    case 2:
        tile(2, a, lda, b, np, c, ldc, cols, init, bias);
        break;
    default:
        tile(1, a, lda, b, np, c, ldc, cols, init, bias);
        break;
    }
}

/* B [k, n] f32 (ldb apart) into groups of 64 columns as K pairs, pairs [p0, p1). */
struct bcols_job {
    uint32_t *bp;
    const float *b;
    int64_t ldb, k, kp, n;
};

static void pack_cols_task(void *ctx, int64_t p0, int64_t p1, int tid)
{
    (void)tid;
    const struct bcols_job *j = ctx;
    int64_t groups = (j->n + NG - 1) / NG;
    for (int64_t p = p0; p < p1; p++) {
        const float *lo = j->b + 2 * p * j->ldb;
        const float *hi = 2 * p + 1 < j->k ? lo + j->ldb : NULL;
        for (int64_t c = 0; c < groups * NG; c += 16) {
            int64_t left = j->n - c;
            __mmask16 m = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
            __m512 x0 = _mm512_maskz_loadu_ps(m, lo + c);
            __m512 x1 = hi ? _mm512_maskz_loadu_ps(m, hi + c) : _mm512_setzero_ps();
            _mm512_store_si512(j->bp + (c / NG) * j->kp * NG + p * NG + c % NG,
                               cpu_amx_vnni_pair(x0, x1));
        }
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

/* Rows [r0, r0 + rn) of A, columns [k0, k0 + kk), as bf16 pairs at dst (lp pairs per
 * row; an odd kk's last pair half zero). */
static void a_slice(uint32_t *dst, int64_t lp, const struct lv_job *j, int64_t r0, int64_t rn,
                    int64_t k0, int64_t kk)
{
    size_t es = tensor_dtype_size(j->adt);
    for (int64_t r = 0; r < rn; r++)
        bf16_row((uint16_t *)(dst + r * lp),
                 (const char *)j->a + ((size_t)((r0 + r) * j->lda + k0)) * es, j->adt, kk);
}

/* Rows [r0, r0 + rn) of y: per K block, the band's A slice rounded at a, then every
 * group's tiles over it. */
static void band_linear(const struct lv_job *j, uint32_t *a, int64_t r0, int64_t rn)
{
    int64_t groups = (j->n + NG - 1) / NG, kbp = K_BLOCK / 2;
    for (int64_t p0 = 0; p0 < j->kp; p0 += kbp) {
        int64_t np = j->kp - p0 < kbp ? j->kp - p0 : kbp;
        int64_t kk = j->k - 2 * p0 < 2 * np ? j->k - 2 * p0 : 2 * np;
        a_slice(a, np, j, r0, rn, 2 * p0, kk);
        for (int64_t g = 0; g < groups; g++) {
            const uint32_t *b = j->bp + g * j->kp * NG + p0 * NG;
            int cols = j->n - g * NG < NG ? (int)(j->n - g * NG) : NG;
            const float *bias = j->bias ? j->bias + g * NG : NULL;
            for (int64_t i = 0; i < rn; i += MR)
                tile_mr(rn - i < MR ? (int)(rn - i) : MR, a + i * np, np, b, np,
                        j->y + (r0 + i) * j->ldy + g * NG, j->ldy, cols, p0 == 0, bias);
        }
    }
}

/* The GEGLU's rows [r0, r0 + rn) (K whole): per group of a's columns, [a | g] of a tile
 * into blk (MR x 2 NG), then y = a * gelu(g). */
static void band_geglu(const struct lv_job *j, uint32_t *a, int64_t r0, int64_t rn, float *blk)
{
    int64_t groups = j->h / NG;
    a_slice(a, j->kp, j, r0, rn, 0, j->k);
    for (int64_t g = 0; g < groups; g++) {
        const uint32_t *ba = j->bp + g * j->kp * NG, *bg = j->bp + (groups + g) * j->kp * NG;
        const float *bias_a = j->bias ? j->bias + g * NG : NULL;
        const float *bias_g = j->bias ? j->bias + j->h + g * NG : NULL;
        for (int64_t i = 0; i < rn; i += MR) {
            int mr = rn - i < MR ? (int)(rn - i) : MR;
            tile_mr(mr, a + i * j->kp, j->kp, ba, j->kp, blk, 2 * NG, NG, 1, bias_a);
            tile_mr(mr, a + i * j->kp, j->kp, bg, j->kp, blk + NG, 2 * NG, NG, 1, bias_g);
            for (int r = 0; r < mr; r++)
                cpu_vec_geglu(j->y + (r0 + i + r) * j->ldy + g * NG, blk + r * 2 * NG,
                              blk + r * 2 * NG + NG, NG);
        }
    }
}

static void row_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const struct lv_job *j = ctx;
    /* the band's rounded A (a K block, or all of K for the GEGLU), then the GEGLU's block */
    int64_t lp = j->h ? j->kp : K_BLOCK / 2;
    size_t a_floats = (size_t)(BAND_ROWS * lp);
    float *s = cpu_scratch_grow(&task_s, a_floats + MR * 2 * NG + 16);
    for (int64_t t = b; t < e; t++) {
        int64_t r0 = t * BAND_ROWS, rn = j->rows - r0 < BAND_ROWS ? j->rows - r0 : BAND_ROWS;
        if (j->h)
            band_geglu(j, (uint32_t *)s, r0, rn, s + a_floats);
        else
            band_linear(j, (uint32_t *)s, r0, rn);
    }
}

void cpu_linear_bf16v(float *y, const float *x, const struct tensor *w, const float *bias,
                      int64_t rows, int64_t k, int64_t n, int geglu)
{
    struct lv_job j = {.a = x,
                       .adt = TENSOR_F32,
                       .lda = k,
                       .y = y,
                       .ldy = geglu ? n / 2 : n,
                       .rows = rows,
                       .k = k,
                       .kp = (k + 1) / 2,
                       .n = n,
                       .h = geglu ? n / 2 : 0,
                       .wdt = w->dtype,
                       .w = tensor__ptr(w)};
    int64_t groups = (n + NG - 1) / NG;
    size_t b_floats = (size_t)(groups * j.kp * NG);
    float *s = cpu_scratch_grow(&op_w, b_floats + (size_t)(groups * NG) + 16);
    j.bp = (const uint32_t *)s;
    if (bias) {
        float *bp = s + b_floats;
        memcpy(bp, bias, (size_t)n * sizeof(float));
        memset(bp + n, 0, (size_t)(groups * NG - n) * sizeof(float));
        j.bias = bp;
    }
    tensor__pool_for(groups, pack_w_task, &j);
    tensor__pool_for((rows + BAND_ROWS - 1) / BAND_ROWS, row_task, &j);
}

size_t cpu_linear_bf16v_release(void)
{
    return cpu_scratch_drop(&op_w) + cpu_scratch_drop(&task_s);
}

void cpu_bf16v_gemm(float *c, int64_t ldc, const void *a, enum tensor_dtype adt, int64_t lda,
                    const float *b, int64_t ldb, int64_t rows, int64_t n, int64_t k)
{
    struct lv_job j = {.a = a,
                       .adt = adt,
                       .lda = lda,
                       .y = c,
                       .ldy = ldc,
                       .rows = rows,
                       .k = k,
                       .kp = (k + 1) / 2,
                       .n = n};
    int64_t groups = (n + NG - 1) / NG;
    uint32_t *bp = (uint32_t *)cpu_scratch_grow(&op_w, (size_t)(groups * j.kp * NG) + 16);
    struct bcols_job bj = {bp, b, ldb, k, j.kp, n};
    tensor__pool_for(j.kp, pack_cols_task, &bj);
    j.bp = bp;
    tensor__pool_for((rows + BAND_ROWS - 1) / BAND_ROWS, row_task, &j);
}
