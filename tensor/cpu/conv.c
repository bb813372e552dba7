/*
 * conv.c — 2-D convolution as im2col + GEMM.
 *
 * out[n] [co, P] = W [co, K] x cols [K, P] + bias, K = ci*kh*kw, P = output
 * pixels. A 1x1 stride-1 unpadded conv needs no im2col: x[n] is already
 * [ci, h*w]. Otherwise two shapes of work:
 *
 * - Large images: the output rows of every image are cut into chunks whose
 *   column buffer is about cpu_conv_cols_bytes, and each pool thread takes whole
 *   chunks: its own im2col into its own buffer, then a single-threaded GEMM with
 *   all of W over the chunk. No barrier between im2col and GEMM, the columns are
 *   still in the thread's cache when the GEMM reads them, and each GEMM is as
 *   wide as the chunk (splitting one chunk's GEMM four ways gave panels of ~100
 *   columns, where oneDNN re-packs all of W for every panel: ~30 % slower at
 *   K = 4608).
 * - Small images (the UNet's 8x8 and 4x4 levels): the columns of all images
 *   go side by side into one buffer, so W (up to 59 MB at 1280 channels) is
 *   read once per batch instead of once per image, and one pool-split GEMM
 *   writes [co, n*P], scattered into the images with the bias.
 *
 * A 3x3 stride-1 conv goes to winograd.c instead where that measured faster (wino_pays
 * below; winograd.c's cpu_wino_tile then picks F(2x2, 3x3) or F(4x4, 3x3)); im2col +
 * GEMM stays the reference (cpu_conv_winograd = 0).
 */
#include <string.h>

#include "alloc.h"
#include "gemm_amx.h"
#include "gemm_bf16.h"
#include "gemm_wn.h"
#include "linear.h" /* cpu_bf16v_gemm */
#include "../tensor_impl.h"
#include "../tensor_precision.h"

/*
 * The im2col chunk. 2 MiB since issue 15 (was 8): forced-im2col GFLOP per CPU-second
 * at 1 / 2 / 4 / 8 MiB (2 threads, loaded machine, f16 weights): 2x4->320 64^2 41 / 56 /
 * 55 / 36; stride-2 2x320 64^2 94 / 103 / 82 / 79; 2x640 32^2 s2 124 / 141 / 148 / 142;
 * 2x1280 16^2 89 / 133 / 120 / 127; 1x64 256^2 and 1x128 128^2 equal within noise
 * (145-164). A deep K made small chunks narrow: 2x2560->1280 16^2 (K = 23040) ran 92 /
 * 95 / 142 / 155, one 16-column row per GEMM at 2 MiB; hence CONV_MIN_COLS below.
 */
#ifndef CONV_COLS_BYTES
#define CONV_COLS_BYTES (2u << 20)
#endif
#define CONV_MIN_COLS 256 /* output columns per chunk GEMM, at least (if the image has them) */

#define CONV_AMX_B_BYTES ((size_t)64 << 20) /* bf16 on AMX: small images' packed columns */

size_t cpu_conv_cols_bytes = CONV_COLS_BYTES; /* tunable by the benchmark */
/* cpu_conv2d_bf16v_small: output pixels per image at most (tunable), columns at most */
int cpu_conv_bf16v_max_px = 64;
#define CONV_BF16V_COLS_MAX ((size_t)64 << 20)
/* With LATENTD_CONV=onednn (conv_dnnl.c: opt-in, not reliably faster here), images from
 * 16x16 up; below, reordering W (59 MB at 1280 channels) costs more than the conv gains. */
int64_t cpu_conv_dnnl_min_px = 256;
int cpu_conv_winograd = 1; /* 0 never (the reference path), 1 where it pays, 2 always */

/*
 * Whether Winograd beats im2col + GEMM for this 3x3 stride-1 shape. On AVX-512 (Zen 5),
 * measured
 * (2 threads, loaded machine, f16 weights, GFLOP per CPU-second of the direct form,
 * im2col -> Winograd): 2x320x64^2 97 -> 278 (2.9x), 1x512x128^2 163 -> 281 (1.7x),
 * 1x256x128^2 178 -> 303 (1.7x), 1x128x256^2 141 -> 208 (1.5x), 2x320x32^2 158 -> 231
 * (1.5x), 2x640x32^2 162 -> 229 (1.4x; 1x: 1.05x), 2x64x64^2 1.15x, 2x128x32^2 1.0x; but
 * 2x640x16^2 0.5-0.8x and 2x1280x16^2 0.14x: with few tiles per task every task re-reads
 * all of U (16/9 of the weight) and the GEMM re-packs it; and 4 input channels (conv_in)
 * 0.1-0.4x, 3-4 output channels ~0.95x (the transforms dominate).
 * On AVX2 + FMA (Zen 3; bench_ops --conv 256 and --conv 512, 2 threads, f16 weights,
 * batch 2, ms per call im2col -> F(2,3)): 640x640 16^2 21.8 -> 14.4, 1280x1280 16^2
 * 86.3 -> 55.0, 2560x1280 16^2 174 -> 112, 1280x1280 32^2 353 -> 172; but 1280x1280 8^2
 * 25.5 -> 31.0 and 4^2 9.3 -> 31.0. There Winograd pays from 16^2 at any width.
 * And on AVX-512 now too (a Xeon, bench_ops --conv 512, 2 threads, ms per call, f16
 * weights, im2col + oneDNN -> F(2,3)): 1920x640 32^2 154.7 -> 76.8, 1280x1280 32^2 199.4
 * -> 106.2, 1280x1280 16^2 55.7 -> 38.3, 2560x1280 16^2 109.3 -> 79.0, 640x1280 16^2 28.6
 * -> 24.5; a 512^2 step's 3x3 convs ~2076 -> ~1600 ms. The Zen 5 figures above predate
 * Winograd reading f16 as stored, its kept buffer and the AVX-512 transforms; they have
 * not been measured again.
 */
static int wino_pays(int64_t ci, int64_t co, int64_t ho, int64_t wo)
{
    if (cpu_conv_winograd != 1)
        return cpu_conv_winograd == 2;
    if (ci < 32)
        return 0;
    /* bf16 on AMX (bench_ops --conv 512 --bf16, 2 threads, ms per call, im2col + tile
     * GEMM -> F(2,3)): 1920x640 32^2 53.8 -> 32.7, 1280x1280 32^2 47.1 -> 40.7, 960x640
     * 32^2 20.8 -> 15.8, and conv_out's 320x4 64^2 7.1 -> 2.7; but 1280x1280 16^2 15.5
     * -> 24.9. The GEMMs are fast there, so the multiplies Winograd saves weigh less
     * than its transforms on small images, and more on large ones at any width. */
    if (tensor_precision_get() == TENSOR_PRECISION_BF16 && cpu_bf16_amx())
        return ho * wo >= 32 * 32;
    if (co < 32)
        return 0;
    return ho * wo >= 16 * 16;
}

int cpu_conv2d_is_winograd(int64_t ci, int64_t co, int64_t kh, int64_t kw, int64_t ho,
                           int64_t wo, const struct tensor_conv2d_opts *o)
{
    return kh == 3 && kw == 3 && o->stride == 1 && wino_pays(ci, co, ho, wo);
}

struct im2col_job {
    float *cols;
    int64_t ld; /* row stride of cols (the chunk's column count, or more when batched) */
    const float *x;
    int64_t ci, h, w, kh, kw, ho, wo;
    int64_t oy0, rows; /* output rows of this chunk */
    const struct tensor_conv2d_opts *o;
    int64_t row0; /* row r of the columns goes to cols + (r - row0) * ld */
};

static void im2col_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct im2col_job *j = ctx;
    int s = j->o->stride;
    int64_t p = j->ld;
    for (int64_t r = b; r < e; r++) { /* r = (c, ky, kx) */
        int64_t c = r / (j->kh * j->kw), ky = r / j->kw % j->kh, kx = r % j->kw;
        const float *xc = j->x + c * j->h * j->w;
        float *dst = j->cols + (r - j->row0) * p;
        for (int64_t oy = j->oy0; oy < j->oy0 + j->rows; oy++) {
            int64_t iy = oy * s - j->o->pad_top + ky;
            float *d = dst + (oy - j->oy0) * j->wo;
            if (iy < 0 || iy >= j->h) {
                memset(d, 0, (size_t)j->wo * sizeof(float));
                continue;
            }
            const float *xr = xc + iy * j->w;
            /* valid ox: 0 <= ox*s - pad_left + kx < w */
            int64_t off = kx - j->o->pad_left;
            int64_t lo = off >= 0 ? 0 : (-off + s - 1) / s;
            int64_t hi = (j->w - 1 - off) < 0 ? 0 : (j->w - 1 - off) / s + 1;
            if (hi > j->wo)
                hi = j->wo;
            if (lo > hi)
                lo = hi;
            for (int64_t ox = 0; ox < lo; ox++)
                d[ox] = 0.0f;
            if (s == 1) {
                memcpy(d + lo, xr + lo + off, (size_t)(hi - lo) * sizeof(float));
            } else {
                for (int64_t ox = lo; ox < hi; ox++)
                    d[ox] = xr[ox * s + off];
            }
            for (int64_t ox = hi; ox < j->wo; ox++)
                d[ox] = 0.0f;
        }
    }
}

static void fill_bias(float *out, const float *bias, int64_t co, int64_t p, int64_t ldo)
{
    for (int64_t c = 0; c < co; c++) {
        float v = bias ? bias[c] : 0.0f;
        float *o = out + c * ldo;
        for (int64_t i = 0; i < p; i++)
            o[i] = v;
    }
}

struct conv_job {
    float *out;
    const float *x, *w, *bias;
    int64_t ci, h, wd, co, kh, kw, ho, wo, k, p;
    int64_t rows, nchunk; /* output rows per chunk, chunks per image */
    const struct tensor_conv2d_opts *o;
    void **cols;          /* per thread */
    float *tmp;           /* batched: [co, n*p] */
};

/* One chunk of output rows of one image, entirely on this thread. */
static void chunk_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct conv_job *j = ctx;
    for (int64_t t = b; t < e; t++) {
        int64_t img = t / j->nchunk, oy0 = t % j->nchunk * j->rows;
        int64_t r = j->ho - oy0 < j->rows ? j->ho - oy0 : j->rows;
        struct im2col_job ij = {j->cols[tid], r * j->wo, j->x + img * j->ci * j->h * j->wd,
                                j->ci,        j->h,      j->wd,
                                j->kh,        j->kw,     j->ho,
                                j->wo,        oy0,       r,
                                j->o,         0};
        im2col_task(&ij, 0, j->k, tid);
        float *ob = j->out + img * j->co * j->p + oy0 * j->wo;
        fill_bias(ob, j->bias, j->co, r * j->wo, j->p);
        cpu_sgemm(0, 0, j->co, r * j->wo, j->k, 1.0f, j->w, j->k, j->cols[tid], r * j->wo, 1.0f,
                  ob, j->p, 1);
    }
}

/*
 * A 1x1 stride-1 unpadded conv over large images: pool tasks are (image, column chunk),
 * each filling its chunk's bias and running a single-threaded GEMM on it, so a thread
 * first touches (page-faults) the output it computes, while those rows are in its
 * cache. Before, the whole output was filled with the bias on the executor thread and
 * then one pool-split GEMM read it back: the VAE decoder's shortcuts at 512^2 (512 ->
 * 256 at 256^2, 256 -> 128 at 512^2; 128-256 MiB fresh outputs) ran at ~25 GFLOP per
 * CPU-second, a sixth of the 3x3 convs'.
 */
struct pw_job {
    float *out;
    const float *x, *w, *bias;
    int64_t ci, co, p, cols, nchunk; /* cols per chunk, chunks per image */
};

static void pw_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    struct pw_job *j = ctx;
    for (int64_t t = b; t < e; t++) {
        int64_t img = t / j->nchunk, c0 = t % j->nchunk * j->cols;
        int64_t nc = j->p - c0 < j->cols ? j->p - c0 : j->cols;
        float *ob = j->out + img * j->co * j->p + c0;
        fill_bias(ob, j->bias, j->co, nc, j->p);
        cpu_sgemm(0, 0, j->co, nc, j->ci, 1.0f, j->w, j->ci, j->x + img * j->ci * j->p + c0,
                  j->p, 1.0f, ob, j->p, 1);
    }
}

/* Columns per pw_task chunk (x's chunk near cpu_conv_cols_bytes, CONV_MIN_COLS at least,
 * a multiple of 16), or 0 when the images are too small to give every thread two chunks
 * of that size (the UNet's low levels): those keep one pool-split GEMM per image. */
static int64_t pw_cols(int64_t k, int64_t n, int64_t p, int64_t nt)
{
    int64_t cols = (int64_t)(cpu_conv_cols_bytes / sizeof(float)) / k;
    cols = cols < CONV_MIN_COLS ? CONV_MIN_COLS : cols / 16 * 16;
    if (n * p < 2 * nt * CONV_MIN_COLS)
        return 0;
    while (cols > CONV_MIN_COLS && n * ((p + cols - 1) / cols) < 2 * nt)
        cols /= 2;
    return cols;
}

/* Batched: tmp [co, n*p] -> out [n][co][p], plus bias. Tasks are (image, channel). */
static void scatter_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct conv_job *j = ctx;
    int64_t n = j->nchunk; /* images, in this mode */
    for (int64_t t = b; t < e; t++) {
        int64_t img = t / j->co, c = t % j->co;
        const float *src = j->tmp + c * n * j->p + img * j->p;
        float *dst = j->out + (img * j->co + c) * j->p;
        float v = j->bias ? j->bias[c] : 0.0f;
        for (int64_t i = 0; i < j->p; i++)
            dst[i] = src[i] + v;
    }
}

/* Batched GEMM split by rows of W: with co >> n*p (1280 x 128 at 8x8) a column split
 * would make every panel re-pack all of W (59 MB). */
struct wrows_job {
    const float *w, *cols;
    float *tmp;
    int64_t co, k, np, step;
};

static void wrows_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct wrows_job *j = ctx;
    for (int64_t t = b; t < e; t++) {
        int64_t r0 = t * j->step, r = j->co - r0 < j->step ? j->co - r0 : j->step;
        if (r > 0)
            cpu_sgemm(0, 0, r, j->np, j->k, 1.0f, j->w + r0 * j->k, j->k, j->cols, j->np, 0.0f,
                      j->tmp + r0 * j->np, j->np, 1);
    }
}

struct im2col_batch {
    struct im2col_job *imgs;
    int64_t n;
};

static void im2col_batch_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct im2col_batch *ib = ctx;
    for (int64_t i = 0; i < ib->n; i++)
        im2col_task(&ib->imgs[i], b, e, tid);
}

/* The columns of all n images side by side: [k, n * p] (free with xfree_aligned). */
static float *im2col_batched(const float *x, int64_t n, int64_t ci, int64_t h, int64_t wd,
                             int64_t kh, int64_t kw, int64_t ho, int64_t wo,
                             const struct tensor_conv2d_opts *o)
{
    int64_t k = ci * kh * kw, p = ho * wo;
    float *cols = xmalloc_aligned(64, (size_t)(n * p * k) * sizeof(float));
    struct im2col_job *imgs = xmalloc((size_t)n * sizeof(*imgs));
    for (int64_t b = 0; b < n; b++)
        imgs[b] = (struct im2col_job){
            cols + b * p, n * p, x + b * ci * h * wd, ci, h, wd, kh, kw, ho, wo, 0, ho, o, 0};
    struct im2col_batch ib = {imgs, n};
    double pt0 = tensor__prof_t0();
    tensor__pool_for(k, im2col_batch_task, &ib);
    tensor__prof_end(TENSOR__PROF_IM2COL, pt0, 0);
    xfree(imgs);
    return cols;
}

int cpu_conv_wn = 1;

int cpu_conv2d_is_wn(int64_t n, int64_t ci, int64_t co, int64_t kh, int64_t kw, int64_t ho,
                     int64_t wo, const struct tensor_conv2d_opts *o)
{
    int direct = kh == 1 && kw == 1 && o->stride == 1 && !o->pad_top && !o->pad_left &&
                 !o->pad_bottom && !o->pad_right;
    /* measured on AVX2 (Zen 3) and AVX-512 (Xeon) CPUs: gemm_wn.h */
    return cpu_conv_wn && !direct && n * ho * wo <= CPU_GEMM_WN_MAX_N &&
           !cpu_conv2d_is_winograd(ci, co, kh, kw, ho, wo, o) && cpu_gemm_wn_usable();
}

void cpu_conv2d_wn(float *out, const float *x, const void *w, enum tensor_dtype wdt,
                   const float *bias, int64_t n, int64_t ci, int64_t h, int64_t wd, int64_t co,
                   int64_t kh, int64_t kw, const struct tensor_conv2d_opts *o)
{
    int64_t ho, wo;
    tensor_conv2d_out_hw(o, h, wd, kh, kw, &ho, &wo);
    int64_t k = ci * kh * kw, p = ho * wo;
    float *cols = im2col_batched(x, n, ci, h, wd, kh, kw, ho, wo, o);
    struct conv_job j = {out, x,  NULL, bias, ci, h, wd, co,   kh,  kw,
                         ho,  wo, k,    p,    0,  n, o,  NULL, NULL};
    j.tmp = xmalloc_aligned(64, (size_t)(co * n * p) * sizeof(float));
    cpu_gemm_wn(j.tmp, w, wdt, cols, co, n * p, k);
    tensor__pool_for(n * co, scatter_task, &j);
    xfree_aligned(j.tmp);
    xfree_aligned(cols);
}

/*
 * bf16 on AMX, small images (up to 16^2): all images' columns go straight into B's tiles,
 * 32 rows of K at a time through a per-thread f32 stage (32 x n*p, in L2), so there is no
 * f32 im2col of all of them (47 MB at 16^2 x 2560 channels, fresh pages per call) and no
 * rounding pass; then W's rows split over the pool, W read as stored (f16) and converted
 * 32 rows x one K block at a time as the GEMM meets it (cpu_gemm_amx_raw_a), each block
 * meeting all of B: W (29 MB at 1280 x 11520) is read once and never written back
 * converted or packed.
 */
struct amx_conv_job {
    const struct im2col_job *imgs; /* per image; cols set per task */
    int64_t n, p, np, k, ks, co, step;
    void **stage;
    uint16_t *bpk;
    const void *w;
    enum tensor_dtype wdt;
    float *tmp;
};

static void amx_cols_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct amx_conv_job *j = ctx;
    float *st = j->stage[tid];
    for (int64_t s = b; s < e; s++) {
        int64_t r0 = s * 32, r1 = r0 + 32 < j->k ? r0 + 32 : j->k;
        for (int64_t i = 0; i < j->n; i++) {
            struct im2col_job ij = j->imgs[i];
            ij.cols = st + i * j->p;
            ij.row0 = r0;
            im2col_task(&ij, r0, r1, tid);
        }
        cpu_amx_pack_b_f32_step(j->bpk, j->ks, s, st, j->np, j->np, r1 - r0, 0,
                                (j->np + 31) / 32 * 32);
    }
}

static void amx_rows_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    struct amx_conv_job *j = ctx;
    size_t es = tensor_dtype_size(j->wdt);
    for (int64_t t = b; t < e; t++) {
        int64_t r0 = t * j->step, r = j->co - r0 < j->step ? j->co - r0 : j->step;
        if (r > 0)
            cpu_gemm_amx_raw_a(r, j->np, j->k, j->wdt,
                               (const char *)j->w + (size_t)(r0 * j->k) * es, j->k, j->bpk,
                               j->tmp + r0 * j->np, j->np);
    }
}

int cpu_conv2d_amx_small(float *out, const float *x, const void *w, enum tensor_dtype wdt,
                         const float *bias, int64_t n, int64_t ci, int64_t h, int64_t wd,
                         int64_t co, int64_t kh, int64_t kw, const struct tensor_conv2d_opts *o)
{
    int64_t ho, wo;
    tensor_conv2d_out_hw(o, h, wd, kh, kw, &ho, &wo);
    int64_t k = ci * kh * kw, p = ho * wo, np = n * p;
    if (tensor_precision_get() != TENSOR_PRECISION_BF16 || !cpu_bf16_amx() || p > 256 ||
        cpu_amx_packed_b_elems(np, k) * 2 > CONV_AMX_B_BYTES ||
        (wdt != TENSOR_F32 && wdt != TENSOR_F16 && wdt != TENSOR_BF16))
        return -1;
    int nt = tensor__pool_threads();
    struct conv_job cj = {out, x,  NULL, bias, ci, h, wd, co,   kh,  kw,
                          ho,  wo, k,    p,    0,  n, o,  NULL, NULL};
    struct im2col_job *imgs = xmalloc((size_t)n * sizeof(*imgs));
    for (int64_t b = 0; b < n; b++)
        imgs[b] = (struct im2col_job){
            NULL, np, x + b * ci * h * wd, ci, h, wd, kh, kw, ho, wo, 0, ho, o, 0};
    struct amx_conv_job j = {imgs, n, p, np, k, (k + 31) / 32, co, 0, NULL, NULL, w, wdt, NULL};
    j.bpk = cpu_gemm_amx_bscratch(cpu_amx_packed_b_elems(np, k));
    j.stage = tensor__pool_scratch_new((size_t)(32 * np) * sizeof(float));
    double pt0 = tensor__prof_t0();
    tensor__pool_for(j.ks, amx_cols_task, &j);
    tensor__prof_end(TENSOR__PROF_IM2COL, pt0, 0);
    tensor__pool_scratch_free(j.stage);
    cj.tmp = j.tmp = xmalloc_aligned(64, (size_t)(co * np) * sizeof(float));
    j.step = ((co + 2 * nt - 1) / (2 * nt) + 31) / 32 * 32; /* two panels per thread */
    tensor__pool_for((co + j.step - 1) / j.step, amx_rows_task, &j);
    tensor__pool_for(n * co, scatter_task, &cj);
    xfree_aligned(cj.tmp);
    xfree(imgs);
    return 0;
}

/*
 * Small images under bf16 on AVX-512 BF16 without AMX: the batched im2col's columns times
 * W as stored, on linear_avx512bf16.c's vdpbf16ps GEMM (W's rows rounded per band as its
 * A, the columns packed once as its B), instead of cpu_sgemm's row panels over a bf16
 * copy of W (oneDNN). -1 (nothing done) where it does not apply.
 */
int cpu_conv2d_bf16v_small(float *out, const float *x, const void *w, enum tensor_dtype wdt,
                           const float *bias, int64_t n, int64_t ci, int64_t h, int64_t wd,
                           int64_t co, int64_t kh, int64_t kw, const struct tensor_conv2d_opts *o)
{
    int64_t ho, wo;
    tensor_conv2d_out_hw(o, h, wd, kh, kw, &ho, &wo);
    int64_t k = ci * kh * kw, p = ho * wo;
    if (tensor_precision_get() != TENSOR_PRECISION_BF16 || cpu_bf16_amx() ||
        !cpu_avx512bf16_usable() || p > cpu_conv_bf16v_max_px ||
        (size_t)(n * p * k) * sizeof(float) > CONV_BF16V_COLS_MAX ||
        (wdt != TENSOR_F32 && wdt != TENSOR_F16 && wdt != TENSOR_BF16))
        return -1;
    float *cols = im2col_batched(x, n, ci, h, wd, kh, kw, ho, wo, o);
    struct conv_job j = {out, x,  NULL, bias, ci, h, wd, co,   kh,  kw,
                         ho,  wo, k,    p,    0,  n, o,  NULL, NULL};
    j.tmp = xmalloc_aligned(64, (size_t)(co * n * p) * sizeof(float));
    cpu_bf16v_gemm(j.tmp, n * p, w, wdt, k, cols, n * p, co, n * p, k);
    tensor__pool_for(n * co, scatter_task, &j);
    xfree_aligned(j.tmp);
    xfree_aligned(cols);
    return 0;
}

void cpu_conv2d(float *out, const float *x, const float *w, const float *bias, int64_t n,
                int64_t ci, int64_t h, int64_t wd, int64_t co, int64_t kh, int64_t kw,
                const struct tensor_conv2d_opts *o)
{
    int64_t ho, wo;
    tensor_conv2d_out_hw(o, h, wd, kh, kw, &ho, &wo);
    int64_t k = ci * kh * kw, p = ho * wo;
    int direct = kh == 1 && kw == 1 && o->stride == 1 && !o->pad_top && !o->pad_left &&
                 !o->pad_bottom && !o->pad_right;
    if (direct) {
        int64_t nt = tensor__pool_threads(), cols = pw_cols(k, n, p, nt);
        if (cols > 0) {
            struct pw_job pj = {out, x, w, bias, k, co, p, cols, (p + cols - 1) / cols};
            cpu_gemm_pool_enter();
            tensor__pool_for(n * pj.nchunk, pw_task, &pj);
            cpu_gemm_pool_leave();
            return;
        }
        for (int64_t b = 0; b < n; b++) {
            float *ob = out + b * co * p;
            fill_bias(ob, bias, co, p, p);
            cpu_sgemm(0, 0, co, p, k, 1.0f, w, k, x + b * ci * h * wd, p, 1.0f, ob, p, 0);
        }
        return;
    }
    if (cpu_conv2d_is_winograd(ci, co, kh, kw, ho, wo, o) &&
        cpu_conv2d_winograd(out, x, w, bias, n, ci, h, wd, co, o) == 0)
        return;
    /* not under bf16: oneDNN's fp32 conv would read w itself, and a bf16 op's w may be
     * an inaccessible stand-in for the weight's bf16 copy (widen.c) */
    if (p >= cpu_conv_dnnl_min_px && tensor_precision_get() != TENSOR_PRECISION_BF16 &&
        strcmp(cpu_gemm_backend(), "onednn") == 0 &&
        cpu_conv2d_dnnl(out, x, w, bias, n, ci, h, wd, co, kh, kw, o) == 0)
        return;
    int nt = tensor__pool_threads();
    size_t all_cols = (size_t)(n * p * k) * sizeof(float);
    struct conv_job j = {out, x, w, bias, ci, h, wd, co, kh, kw, ho, wo, k, p, 0, 0, o, NULL, NULL};
    if (p < 256 && all_cols <= 2 * cpu_conv_cols_bytes) {
        /* Batched small images. */
        float *cols = im2col_batched(x, n, ci, h, wd, kh, kw, ho, wo, o);
        j.tmp = xmalloc_aligned(64, (size_t)(co * n * p) * sizeof(float));
        j.nchunk = n;
        if (co >= 2 * n * p && tensor_precision_get() == TENSOR_PRECISION_BF16 && cpu_bf16_amx()) {
            /* one GEMM: gemm.c packs the columns once and splits W's rows itself (the
             * panels below would each round and pack all the columns again) */
            cpu_sgemm(0, 0, co, n * p, k, 1.0f, w, k, cols, n * p, 0.0f, j.tmp, n * p, 0);
        } else if (co >= 2 * n * p) {
            /* two row panels per thread, multiples of 32 (AMX packs W in 32-row blocks) */
            struct wrows_job wj = {w, cols, j.tmp, co, k, n * p, 0};
            wj.step = ((co + 2 * nt - 1) / (2 * nt) + 31) / 32 * 32;
            cpu_gemm_pool_enter();
            tensor__pool_for((co + wj.step - 1) / wj.step, wrows_task, &wj);
            cpu_gemm_pool_leave();
        } else {
            cpu_sgemm(0, 0, co, n * p, k, 1.0f, w, k, cols, n * p, 0.0f, j.tmp, n * p, 0);
        }
        tensor__pool_for(n * co, scatter_task, &j);
        xfree_aligned(j.tmp);
        xfree_aligned(cols);
        return;
    }
    int64_t rows = (int64_t)(cpu_conv_cols_bytes / sizeof(float)) / (k * wo);
    /* but at least CONV_MIN_COLS output columns per GEMM: each chunk's GEMM re-packs
     * all of W, which with a deep K costs more than the chunk's columns earn */
    if (rows * wo < CONV_MIN_COLS)
        rows = (CONV_MIN_COLS + wo - 1) / wo;
    if (rows < 1)
        rows = 1;
    if (rows > ho)
        rows = ho;
    /* at least two chunks per thread, so a descheduled thread's share can be taken over */
    int64_t want = 2 * nt, per_img = (want + n - 1) / n;
    if ((ho + rows - 1) / rows < per_img) {
        rows = (ho + per_img - 1) / per_img;
        if (rows < 1)
            rows = 1;
    }
    j.rows = rows;
    j.nchunk = (ho + rows - 1) / rows;
    j.cols = tensor__pool_scratch_new((size_t)(k * rows * wo) * sizeof(float));
    cpu_gemm_pool_enter();
    tensor__pool_for(n * j.nchunk, chunk_task, &j);
    cpu_gemm_pool_leave();
    tensor__pool_scratch_free(j.cols);
}
