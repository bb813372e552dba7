/*
 * linear.c — Linear and fused Linear + GEGLU (the transformer feed-forward's first half).
 *
 * Linear (cpu_linear): y = x @ W^T + bias as tiles over the pool, each one single-threaded
 * no-trans GEMM on W^T (gemm_wt.c says why W^T) with beta 0, then its bias, added while
 * the tile is in cache. Many rows: row tiles over one W^T built for the call
 * (cpu_widen_in_t). Few rows: column tiles, each widening and transposing its own slice
 * of W into the thread's scratch right before its GEMM reads it (the weight dominates:
 * one pass over it, in cache, instead of a widened copy written out and read back).
 * The reference path (op_linalg.c, cpu_linear_fast = 0) wrote the bias into all of y on
 * the executor alone, then ran cpu_sgemm with beta 1 over the widened W (trans B), split
 * into column panels each re-packing all of x (4 x 10 MB at 8192 x 320 -> 320).
 *
 * GEGLU: y = a * gelu(g) with [a | g] = x @ w^T + bias, w [2h, k]. Done as tiles of
 * (R rows x Nc output columns): a tile's GEMMs write the a columns j0.. and the g columns
 * h + j0.. into a per-thread scratch, the bias is added there and only the h-wide result
 * is written. So the 2h-wide product (84 MB at 4096 tokens x 2 images x 2560) is never
 * written to memory and read back, and no separate GEGLU pass runs. Tiles are row blocks
 * of the whole width when there are many rows (W^T built once), and column blocks of all
 * rows when there are few (the UNet's deep levels: 128..512 rows, where splitting rows
 * would re-pack a 52 MB W per small block; each tile widens its two slices of W).
 * cpu_linear_geglu (tensor_impl.h) is the same on an f32 W, trans-B GEMMs (bf16 precision:
 * cpu_sgemm finds the weight's bound bf16 copy; and the reference path).
 *
 * The scratch (tiles, slices) is the calling thread's, kept between calls (the GEGLU's
 * 2 x 2.6-5.2 MB were allocated per call before), except for small models' few floats.
 */
#include "alloc.h"
#include "adapt.h"
#include "linear.h"
#include "../tensor_impl.h"

#define LG_ROWS 256  /* GEGLU: rows per tile when rows are plentiful */
#define LG_COLS 128  /* GEGLU, few rows: output columns per tile (a GEMM 2 x this wide) */
#define LIN_ROWS 256 /* Linear: rows per row tile (the pool shares them out) */
#define LIN_TINY 16  /* Linear: below this many rows, slices of W are not transposed */

int cpu_linear_geglu_fused = 1;
int cpu_linear_fast = 1;

/* ---- the calling thread's tile scratch ------------------------------------------------- */

static _Thread_local struct cpu_scratch tiles;

/* Scratch of `floats` for one call: the kept buffer, or below TILES_MIN a malloc of its
 * own (small models keep nothing between ops; tiles_put frees it). */
#define TILES_MIN ((size_t)1 << 16)

static float *tiles_get(size_t floats)
{
    if (floats < TILES_MIN)
        return xmalloc_aligned(64, floats * sizeof(float) + 64);
    return cpu_scratch_grow(&tiles, floats);
}

static void tiles_put(float *p)
{
    if (p != tiles.p)
        xfree_aligned(p);
}

size_t cpu_linear_release(void)
{
    return cpu_scratch_drop(&tiles);
}

/* y [r, c] = x [r, k] @ (columns c0.. of W^T), single-threaded; ldw: W^T's leading
 * dimension (w_t), else W [.., k] (trans B, rows c0..). */
static void gemm_b(int w_t, int64_t r, int64_t c, int64_t k, const float *x, const float *w,
                   int64_t ldw, int64_t c0, float *y, int64_t ldy)
{
    if (w_t)
        cpu_sgemm(0, 0, r, c, k, 1.0f, x, k, w + c0, ldw, 0.0f, y, ldy, 1);
    else
        cpu_sgemm(0, 1, r, c, k, 1.0f, x, k, w + c0 * k, k, 0.0f, y, ldy, 1);
}

/* The weight as the tiles read it: one W^T for all (row tiles), or W's raw rows, of which
 * each column tile widens its own slice. */
struct lin_w {
    const float *wt; /* W^T [k, n], rows ldw apart; NULL: raw */
    const char *raw; /* W [n, k] of dtype dt */
    enum tensor_dtype dt;
    int64_t ldw;
};

/* Columns [0, c) of s (k rows, ld apart) = W^T's columns q0.. (W's rows q0..q0 + c). */
static void slice(float *s, int64_t ld, const struct lin_w *w, int64_t k, int64_t q0, int64_t c)
{
    cpu_wt_rows(s, ld, w->raw + (size_t)(q0 * k) * tensor_dtype_size(w->dt), w->dt, c, k, 0, k);
}

/* W's rows q0..q0 + c widened as they are ([c, k]): for a GEMV-like Linear (rows <
 * LIN_TINY) the transposing pass would cost more than the GEMM gains from it. */
static void slice_plain(float *s, const struct lin_w *w, int64_t k, int64_t q0, int64_t c)
{
    tensor_convert_host(s, TENSOR_F32, w->raw + (size_t)(q0 * k) * tensor_dtype_size(w->dt),
                        w->dt, (size_t)(c * k));
}

/* The thread's slice scratch (k x ld floats) and after it its GEGLU tile. */
static float *task_scratch(float *base, size_t per, int tid)
{
    return base + (size_t)tid * per;
}

/* ---- Linear --------------------------------------------------------------------------- */

struct lin_job {
    float *y;
    const float *x, *bias;
    struct lin_w w;
    int by_rows;
    int64_t rows, k, n, tile, lds; /* lds: a column tile's slice leading dimension */
    float *scr;
    size_t per; /* scratch floats per thread */
};

static void lin_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct lin_job *j = ctx;
    for (int64_t i = b; i < e; i++) {
        int64_t r0 = 0, c0 = 0, r = j->rows, c = j->n;
        float *y;
        if (j->by_rows) {
            r0 = i * j->tile;
            r = j->rows - r0 < j->tile ? j->rows - r0 : j->tile;
            y = j->y + r0 * j->n;
            gemm_b(1, r, c, j->k, j->x + r0 * j->k, j->w.wt, j->w.ldw, 0, y, j->n);
        } else {
            c0 = i * j->tile;
            c = j->n - c0 < j->tile ? j->n - c0 : j->tile;
            y = j->y + c0;
            float *s = task_scratch(j->scr, j->per, tid);
            int w_t = j->rows >= LIN_TINY;
            if (w_t)
                slice(s, j->lds, &j->w, j->k, c0, c);
            else
                slice_plain(s, &j->w, j->k, c0, c);
            gemm_b(w_t, r, c, j->k, j->x, s, j->lds, 0, y, j->n);
        }
        if (j->bias) {
            const float *bs = j->bias + c0;
            for (int64_t q = 0; q < r; q++)
                for (int64_t p = 0; p < c; p++)
                    y[q * j->n + p] += bs[p];
        }
    }
}

void cpu_linear(float *y, const float *x, const struct tensor *w, const float *bias,
                int64_t rows, int64_t k, int64_t n)
{
    int nt = tensor__pool_threads();
    struct lin_job j = {.y = y, .x = x, .bias = bias, .w = {NULL, tensor__ptr(w), w->dtype, 0},
                        .by_rows = cpu_linear_use_t(rows), .rows = rows, .k = k, .n = n};
    struct hbuf hw = {0};
    int64_t tiles_n;
    if (j.by_rows) {
        j.w.wt = cpu_widen_in_t(w, &hw);
        j.w.ldw = cpu_wt_ld(n);
        /* LIN_ROWS, or fewer so that every thread gets two tiles */
        int64_t t = (rows + 2 * nt - 1) / (2 * nt);
        j.tile = t < LIN_ROWS ? (t + 15) / 16 * 16 : LIN_ROWS;
        tiles_n = (rows + j.tile - 1) / j.tile;
    } else {
        /* columns: two panels per thread, widths a multiple of 16 (the kernels' vectors);
         * one panel when the product is small (not worth waking the pool) */
        int parts = nt == 1 || (double)rows * (double)n * (double)k < 4e6 ? 1 : 2 * nt;
        j.tile = ((n + parts - 1) / parts + 15) / 16 * 16;
        j.tile = j.tile < n ? j.tile : n;
        tiles_n = (n + j.tile - 1) / j.tile;
        j.lds = cpu_wt_ld(j.tile);
        j.per = (size_t)(k * j.lds) + 16;
        j.scr = tiles_get(j.per * (size_t)nt);
    }
    cpu_gemm_pool_enter();
    if (tiles_n == 1)
        lin_task(&j, 0, 1, 0);
    else
        tensor__pool_for(tiles_n, lin_task, &j);
    cpu_gemm_pool_leave();
    if (j.by_rows)
        cpu_widen_done(&hw);
    else
        tiles_put(j.scr);
}

/* ---- Linear + GEGLU -------------------------------------------------------------------- */

struct lg_job {
    float *y;
    const float *x, *bias;
    struct lin_w w;
    int w_t;
    int64_t rows, k, h;
    int64_t r_tile, c_tile, n_ct; /* rows and columns per tile, column tiles */
    int64_t lds;                  /* raw: the [k, 2 c_tile] slice's leading dimension */
    float *scr;                   /* per thread: the slice (raw), then r_tile x 2 c_tile */
    size_t per, tmp_at;
};

static void lg_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct lg_job *j = ctx;
    float *s = task_scratch(j->scr, j->per, tid), *t = s + j->tmp_at;
    for (int64_t i = b; i < e; i++) {
        int64_t r0 = i / j->n_ct * j->r_tile, c0 = i % j->n_ct * j->c_tile;
        int64_t r = j->rows - r0 < j->r_tile ? j->rows - r0 : j->r_tile;
        int64_t c = j->h - c0 < j->c_tile ? j->h - c0 : j->c_tile;
        int64_t ld = 2 * c;
        const float *xr = j->x + r0 * j->k;
        if (j->w.raw) { /* [a | g] slices side by side: one GEMM 2c wide */
            slice(s, j->lds, &j->w, j->k, c0, c);
            slice(s + c, j->lds, &j->w, j->k, j->h + c0, c);
            gemm_b(1, r, 2 * c, j->k, xr, s, j->lds, 0, t, ld);
        } else {
            gemm_b(j->w_t, r, c, j->k, xr, j->w.wt, j->w.ldw, c0, t, ld);
            gemm_b(j->w_t, r, c, j->k, xr, j->w.wt, j->w.ldw, j->h + c0, t + c, ld);
        }
        for (int64_t q = 0; q < r; q++) {
            float *row = t + q * ld;
            if (j->bias) {
                const float *ba = j->bias + c0, *bg = j->bias + j->h + c0;
                for (int64_t p = 0; p < c; p++) {
                    row[p] += ba[p];
                    row[c + p] += bg[p];
                }
            }
            cpu_geglu(j->y + (r0 + q) * j->h + c0, row, 1, c);
        }
    }
}

static void lg_run(struct lg_job *j)
{
    int nt = tensor__pool_threads();
    int64_t want = 4 * (int64_t)nt; /* tiles, so a descheduled thread's share moves */
    j->r_tile = j->rows;
    j->c_tile = j->h;
    j->n_ct = 1;
    if (j->w.raw) {
        /* few rows: all of them in each tile, columns split (multiples of 16) */
        int64_t c = (j->h + want - 1) / want;
        c = (c + 15) / 16 * 16;
        c = c < LG_COLS ? c : LG_COLS;
        j->c_tile = c < j->h ? c : j->h;
        j->n_ct = (j->h + j->c_tile - 1) / j->c_tile;
        j->lds = cpu_wt_ld(2 * j->c_tile);
        j->tmp_at = (size_t)(j->k * j->lds);
    } else {
        j->r_tile = j->rows >= want * 128 ? LG_ROWS : 128;
        j->tmp_at = 0;
    }
    int64_t n_rt = (j->rows + j->r_tile - 1) / j->r_tile;
    j->per = j->tmp_at + (size_t)(j->r_tile * 2 * j->c_tile) + 16;
    j->scr = tiles_get((size_t)nt * j->per);
    cpu_gemm_pool_enter();
    tensor__pool_for(n_rt * j->n_ct, lg_task, j);
    cpu_gemm_pool_leave();
    tiles_put(j->scr);
}

void cpu_linear_geglu_w(float *y, const float *x, const struct tensor *w, const float *bias,
                        int64_t rows, int64_t k, int64_t h)
{
    struct lg_job j = {.y = y, .x = x, .bias = bias, .w = {NULL, NULL, w->dtype, 0}, .w_t = 1,
                       .rows = rows, .k = k, .h = h};
    struct hbuf hw = {0};
    if (cpu_linear_use_t(rows)) {
        j.w.wt = cpu_widen_in_t(w, &hw);
        j.w.ldw = cpu_wt_ld(2 * h);
    } else {
        j.w.raw = tensor__ptr(w);
    }
    lg_run(&j);
    if (j.w.wt)
        cpu_widen_done(&hw);
}

void cpu_linear_geglu(float *y, const float *x, const float *w, const float *bias, int64_t rows,
                      int64_t k, int64_t h)
{
    struct lg_job j = {.y = y, .x = x, .bias = bias, .w = {w, NULL, TENSOR_F32, k}, .w_t = 0,
                       .rows = rows, .k = k, .h = h};
    int nt = tensor__pool_threads();
    /* few rows: column tiles of all rows over the untransposed W (the shape this path
     * had before W^T: each tile reads its slices of W in place) */
    if (rows < 2 * 128 * nt) {
        int64_t want = 4 * (int64_t)nt, c = ((h + want - 1) / want + 15) / 16 * 16;
        j.r_tile = rows;
        j.c_tile = c < h ? c : h;
        j.n_ct = (h + j.c_tile - 1) / j.c_tile;
        j.tmp_at = 0;
        j.per = (size_t)(rows * 2 * j.c_tile) + 16;
        j.scr = tiles_get((size_t)nt * j.per);
        cpu_gemm_pool_enter();
        tensor__pool_for(j.n_ct, lg_task, &j);
        cpu_gemm_pool_leave();
        tiles_put(j.scr);
        return;
    }
    lg_run(&j);
}
