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
 * small beside x and packing it once per op is cheap; fewer rows keep cpu_sgemm's path.
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
    const float *x;
    float *y;
    const uint32_t *bp;        /* W packed: group g at bp + g * kp * NG */
    const float *bias;         /* padded to the groups' width, or NULL */
    int64_t rows, k, kp, n, h; /* kp: pairs of K (k rounded up to even, halved); h: GEGLU */
    enum tensor_dtype wdt;
    const void *w;
};

int cpu_linear_bf16v_usable(void)
{
    static int have = -1;
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512bf16");
    }
    return have;
}

int cpu_linear_bf16v_ok(const struct tensor *w, int64_t rows, int geglu)
{
    if (tensor_precision_get() != TENSOR_PRECISION_BF16 || !cpu_linear_use_t(rows) ||
        cpu_bf16_amx() || !cpu_linear_bf16v_usable())
        return 0;
    if (w->ndim != 2 || !tensor_is_contiguous(w))
        return 0;
    if (w->dtype != TENSOR_F32 && w->dtype != TENSOR_F16 && w->dtype != TENSOR_BF16)
        return 0;
    /* the GEGLU's g columns start a group of their own, and its K is taken whole */
    return !geglu || (w->shape[0] % (2 * NG) == 0 && w->shape[1] <= GEGLU_KMAX);
}

/* Row `col` of W as bf16 into dst (k elements, then a zero to make the pairs whole). */
static void w_row(uint16_t *dst, const struct lv_job *j, int64_t col)
{
    if (col >= j->n) {
        memset(dst, 0, (size_t)j->kp * 4);
        return;
    }
    if (j->wdt == TENSOR_F16)
        cpu_bf16_from_f16(dst, (const uint16_t *)j->w + col * j->k, j->k);
    else if (j->wdt == TENSOR_BF16)
        memcpy(dst, (const uint16_t *)j->w + col * j->k, (size_t)j->k * 2);
    else
        cpu_bf16_round(dst, (const float *)j->w + col * j->k, j->k);
    if (j->k % 2)
        dst[j->k] = 0;
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

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

/* Rows [r0, r0 + rn) of y, their x rounded at a (kp pairs per row). */
static void band_linear(const struct lv_job *j, const uint32_t *a, int64_t r0, int64_t rn)
{
    int64_t groups = (j->n + NG - 1) / NG, kbp = K_BLOCK / 2;
    for (int64_t p0 = 0; p0 < j->kp; p0 += kbp) {
        int64_t np = j->kp - p0 < kbp ? j->kp - p0 : kbp;
        for (int64_t g = 0; g < groups; g++) {
            const uint32_t *b = j->bp + g * j->kp * NG + p0 * NG;
            int cols = j->n - g * NG < NG ? (int)(j->n - g * NG) : NG;
            const float *bias = j->bias ? j->bias + g * NG : NULL;
            for (int64_t i = 0; i < rn; i += MR)
                tile_mr(rn - i < MR ? (int)(rn - i) : MR, a + i * j->kp + p0, j->kp, b, np,
                        j->y + (r0 + i) * j->n + g * NG, j->n, cols, p0 == 0, bias);
        }
    }
}

/* The GEGLU's rows [r0, r0 + rn): per group of a's columns, [a | g] of a tile into blk
 * (MR x 2 NG), then y = a * gelu(g). */
static void band_geglu(const struct lv_job *j, const uint32_t *a, int64_t r0, int64_t rn,
                       float *blk)
{
    int64_t groups = j->h / NG;
    for (int64_t g = 0; g < groups; g++) {
        const uint32_t *ba = j->bp + g * j->kp * NG, *bg = j->bp + (groups + g) * j->kp * NG;
        const float *bias_a = j->bias ? j->bias + g * NG : NULL;
        const float *bias_g = j->bias ? j->bias + j->h + g * NG : NULL;
        for (int64_t i = 0; i < rn; i += MR) {
            int mr = rn - i < MR ? (int)(rn - i) : MR;
            tile_mr(mr, a + i * j->kp, j->kp, ba, j->kp, blk, 2 * NG, NG, 1, bias_a);
            tile_mr(mr, a + i * j->kp, j->kp, bg, j->kp, blk + NG, 2 * NG, NG, 1, bias_g);
            for (int r = 0; r < mr; r++)
                cpu_vec_geglu(j->y + (r0 + i + r) * j->h + g * NG, blk + r * 2 * NG,
                              blk + r * 2 * NG + NG, NG);
        }
    }
}

static void row_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const struct lv_job *j = ctx;
    /* the band's rounded x, then the GEGLU's block */
    size_t a_floats = (size_t)(BAND_ROWS * j->kp);
    float *s = cpu_scratch_grow(&task_s, a_floats + MR * 2 * NG + 16);
    uint32_t *a = (uint32_t *)s;
    float *blk = s + a_floats;
    for (int64_t t = b; t < e; t++) {
        int64_t r0 = t * BAND_ROWS, rn = j->rows - r0 < BAND_ROWS ? j->rows - r0 : BAND_ROWS;
        for (int64_t r = 0; r < rn; r++) {
            uint16_t *ar = (uint16_t *)(a + r * j->kp);
            cpu_bf16_round(ar, j->x + (r0 + r) * j->k, j->k);
            if (j->k % 2)
                ar[j->k] = 0;
        }
        if (j->h)
            band_geglu(j, a, r0, rn, blk);
        else
            band_linear(j, a, r0, rn);
    }
}

void cpu_linear_bf16v(float *y, const float *x, const struct tensor *w, const float *bias,
                      int64_t rows, int64_t k, int64_t n, int geglu)
{
    struct lv_job j = {.x = x,
                       .y = y,
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
