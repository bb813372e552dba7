/*
 * linear.c — fused Linear + GEGLU (the transformer feed-forward's first half).
 *
 * y = a * gelu(g) with [a | g] = x @ w^T + bias, w [2h, k]. Done as tiles of
 * (R rows x Nc output columns): a tile runs two single-threaded GEMMs into a
 * per-thread scratch (the a columns j0.. and the g columns h + j0..), adds the
 * bias there and writes only the h-wide result. So the 2h-wide product (84 MB at
 * 4096 tokens x 2 images x 2560) is never written to memory and read back, and
 * no separate GEGLU pass runs. Tiles are full-width row blocks when there are
 * many rows (W is re-packed once per block: R >= 128 keeps that small), and
 * column blocks when there are few (the UNet's deep levels: 32..128 rows, where
 * splitting rows would re-pack a 52 MB W per tiny block).
 */
#include "alloc.h"
#include "../tensor_impl.h"

#define LG_ROWS 256 /* rows per tile when rows are plentiful */

int cpu_linear_geglu_fused = 1;

struct lg_job {
    float *y;
    const float *x, *w, *bias;
    int64_t rows, k, h;
    int64_t r_tile, c_tile, n_ct; /* rows and columns per tile, column tiles */
    float **tmp;                  /* per thread: r_tile x 2 c_tile */
};

static void lg_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct lg_job *j = ctx;
    float *t = j->tmp[tid];
    for (int64_t i = b; i < e; i++) {
        int64_t r0 = i / j->n_ct * j->r_tile, c0 = i % j->n_ct * j->c_tile;
        int64_t r = j->rows - r0 < j->r_tile ? j->rows - r0 : j->r_tile;
        int64_t c = j->h - c0 < j->c_tile ? j->h - c0 : j->c_tile;
        int64_t ld = 2 * c;
        const float *xr = j->x + r0 * j->k;
        cpu_sgemm(0, 1, r, c, j->k, 1.0f, xr, j->k, j->w + c0 * j->k, j->k, 0.0f, t, ld, 1);
        cpu_sgemm(0, 1, r, c, j->k, 1.0f, xr, j->k, j->w + (j->h + c0) * j->k, j->k, 0.0f, t + c,
                  ld, 1);
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

void cpu_linear_geglu(float *y, const float *x, const float *w, const float *bias, int64_t rows,
                      int64_t k, int64_t h)
{
    int nt = tensor__pool_threads();
    int64_t want = 4 * (int64_t)nt; /* tiles, so a descheduled thread's share moves */
    struct lg_job j = {y, x, w, bias, rows, k, h, rows, h, 1, NULL};
    if (rows >= want * 128) {
        j.r_tile = LG_ROWS;
    } else if (rows >= 2 * 128 * nt) {
        j.r_tile = 128;
    } else {
        /* few rows: all of them in each tile, columns split (multiples of 16) */
        int64_t c = (h + want - 1) / want;
        c = (c + 15) / 16 * 16;
        j.c_tile = c < h ? c : h;
        j.n_ct = (h + j.c_tile - 1) / j.c_tile;
    }
    int64_t n_rt = (rows + j.r_tile - 1) / j.r_tile;
    j.tmp = xmalloc((size_t)nt * sizeof(float *));
    for (int i = 0; i < nt; i++)
        j.tmp[i] = xmalloc_aligned(64, (size_t)(j.r_tile * 2 * j.c_tile) * sizeof(float));
    cpu_gemm_pool_enter();
    tensor__pool_for(n_rt * j.n_ct, lg_task, &j);
    cpu_gemm_pool_leave();
    for (int i = 0; i < nt; i++)
        xfree_aligned(j.tmp[i]);
    xfree(j.tmp);
}
