/*
 * winograd_impl — what winograd.c (3x3 convolution by F(2x2, 3x3)) shares with
 * wino_up2.c (the same transforms for a nearest-2x upsample followed by a 3x3 conv);
 * private to tensor/cpu/.
 *
 * A job covers one call: tiles of m x m output pixels of the tile grid (ho x wo, tw x th
 * tiles) are computed from (m + 2) x (m + 2) input patches of x (ci x h x w, padded
 * pt/pl at the top and left): m = 2 is F(2x2, 3x3) (winograd.c's transforms, 16
 * points), m = 4 is F(4x4, 3x3) (wino43.c's, 36 points, fp32 only). Pool
 * tasks are (image, block of `rows` tile rows); each has its own block of buf (V, M,
 * the padded patch and row transforms) so its data stays in its caches.
 *
 * Threads: executor only (the pool's tasks run the per-block functions).
 */
#ifndef LATENTD_TENSOR_CPU_WINOGRAD_IMPL_H
#define LATENTD_TENSOR_CPU_WINOGRAD_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "../tensor.h"

#define WG_XI 16 /* transformed tile elements of F(2,3) (4 x 4) */
#define W43_XI 36 /* of F(4,3) (6 x 6) */
/*
 * Floats between consecutive planes of M beyond their co x T values. Without it the
 * output transform's 16 streams (one per point) were co * T * 4 bytes apart, 128 KiB at
 * 512 channels and 64 tiles: all in one set of the 8-way L1 and L2, so every load
 * missed (perf: the output transform's row loop 20 % of a decode's samples, the JIT
 * GEMMs 36 %). 64 bytes more per plane (per point in wino_up2.c, whose stacked blocks
 * of a point are one GEMM's rows) puts each stream in its own set.
 */
#define WG_MPAD 16

struct wg_job {
    float *out;
    const float *x, *u, *bias;
    const uint16_t *u16; /* set: the bf16 GEMMs (U rounded; V rounded per task) */
    int64_t ci, h, w, co, ho, wo; /* wo x ho: the tile grid's pixels (before `up`) */
    int pt, pl;
    int64_t up;         /* 1; 2: pixel (y, x) of the grid is out's (2y + a, 2x + b) */
    int64_t tw, th;     /* tiles per row, tile rows */
    int64_t rows, nchk; /* tile rows per task, tasks per image */
    float **buf;        /* per thread: V, M, patch, row transforms */
    const float *na, *nb; /* set: x is read as silu?(x * na + nb), [n, ci] (GroupNorm) */
    int nsilu;
    int m; /* output tile size: 2 (F(2,3)) or 4 (F(4,3)) */
    /* set (bf16 on AMX): U's planes packed for cpu_gemm_amx_packed, u16p_plane apart */
    const uint16_t *u16p;
    int64_t u16p_plane;
    /* set (bf16 on AMX, ci a multiple of 32, tw of 16): V written straight into B's
     * tiles (cpu_amx_pack_b's layout), planes vplane elements apart */
    int vpk;
    int64_t vplane;
    /* 2: x is h/2 x w/2 and read as its nearest 2x upsample (h, w: the upsampled size);
     * 0 or 1: as it is */
    int in_up;
};

/*
 * Output channel o's n weights (ci x 9) of w ([co, ci, 3, 3], dtype dt) as f32: in place
 * for f32, else widened into buf (n floats). The weight transforms read them through
 * this, so an f16 weight is widened a channel at a time, in cache.
 */
const float *wino__w_row(const void *w, enum tensor_dtype dt, int64_t o, int64_t n, float *buf);

/*
 * Rows y0 .. y0 + prow of channel c of image img into patch (prow x pw floats, column
 * xx holding x's column xx - pl): zeros outside the image, x read through j->na, nb
 * (GroupNorm's affine, + SiLU) when set. Both tile sizes' input transforms start here.
 */
void wino__patch_fill(const struct wg_job *j, int64_t img, int64_t c, int64_t y0, int64_t prow,
                      int64_t pw, float *patch);

/*
 * V[xi][c][t] (plane xi at v + xi * ci * T) for the tile rows r0 .. r0 + nr of image img
 * of x: B^T d B (d read through j->na, nb when set). patch ((2 nr + 2) x (2 tw + 2) floats) and tr (4 x (2 tw + 2)) are scratch.
 * With v16 set (bf16) V is rounded into v16 instead, through tq (16 x tw floats).
 */
void wino__input_tf(const struct wg_job *j, int64_t img, int64_t r0, int64_t nr, float *v,
                    int64_t T, float *patch, float *tr, uint16_t *v16, float *tq);

/*
 * Output tiles of rows r0 .. r0 + nr into one image's out: A^T m A + bias, where m's
 * element xi for channel o and tile t is mq[xi][o * mcs[xi] + t] (mcs 0: a plane of
 * zeros, for points a phase of wino_up2.c does not use). Pixel (y, x) of the tile grid
 * goes to out's (up * y + a, up * x + b); out is (up * ho) x (up * wo) per channel.
 */
void wino__output_tf(const struct wg_job *j, float *out, int64_t r0, int64_t nr,
                     const float *const mq[WG_XI], const int64_t mcs[WG_XI], int a, int b);

/* U = G g G^T for the 3x3 kernels c < n at g9 + 9 c (G = [1 0 0; .5 .5 .5; .5 -.5 .5;
 * 0 0 1]): F(2,3)'s 16 values to u[xi * n + c], xi = 4 row + column. */
void wino__tf_weights23(const float *g9, float *u, int64_t n);

/*
 * wino_avx512.c: the transforms' row loops 16 tiles at a time, same operations in the
 * same order as the scalar loops (so the same bits). Each returns how many it did (a
 * multiple of 16); the caller finishes the row in scalar code. Call them only when
 * wino__avx512() is 1 (the CPU has AVX-512F and cpu_wino_avx512, tensor_impl.h, allows
 * it).
 *   in_rows: t0 = p0 - p2, t1 = p1 + p2, t2 = p2 - p1, t3 = p1 - p3 over n values;
 *   in_cols: v0..v3[tx] from s[2 tx .. 2 tx + 3] (B^T on the row), tx < tw;
 *   out_row: the tiles tx < pairs of one tile row of one channel, point q of tile tx at
 *   pq[q][tx]: pixels 2 tx and 2 tx + 1 (times up) of rows y0 and y1 (NULL: none);
 *   tf_weights: U's 16 values for the 3x3 kernels c < n at g9 + 9 c, (G g G^T)[xi] to
 *   u[xi * n + c] (for wino__tf_weights23).
 */
int wino__avx512(void);
int64_t wino__in_rows_avx512(const float *p0, const float *p1, const float *p2,
                             const float *p3, float *t0, float *t1, float *t2, float *t3,
                             int64_t n);
int64_t wino__in_cols_avx512(const float *s, float *v0, float *v1, float *v2, float *v3,
                             int64_t tw);
int64_t wino__out_row_avx512(const float *const pq[WG_XI], float bv, float *y0, float *y1,
                             int64_t pairs, int64_t up);
int64_t wino__tf_weights_avx512(const float *g9, float *u, int64_t n);

/*
 * wino43.c: F(4x4, 3x3) with points 0, -1, 1, 1/2, -2 and infinity (why those: the top
 * of wino43.c). Every multiplier of the input and output transforms is a power of two,
 * so a compiler's FMA contraction cannot change their bits.
 *   tf_weights: U's 36 values for the 3x3 kernels i < n at g + 9 i, (G g G^T)[xi] to
 *   u[xi * stride + i];
 *   input_tf: as wino__input_tf, 36 planes, patch (4 nr + 2) x (4 tw + 2), tr 6 rows
 *   of it (with v16 set, V rounded into v16 through tq, 6 x tw floats); output_tf: as
 *   wino__output_tf, 36 points.
 */
void wino43__tf_weights(const float *g, float *u, int64_t stride, int64_t n);
void wino43__input_tf(const struct wg_job *j, int64_t img, int64_t r0, int64_t nr, float *v,
                      int64_t T, float *patch, float *tr, uint16_t *v16, float *tq);
void wino43__output_tf(const struct wg_job *j, float *out, int64_t r0, int64_t nr,
                       const float *const mq[W43_XI], const int64_t mcs[W43_XI], int a, int b);

/*
 * wino43_avx512.c: F(4,3)'s row loops 16 tiles at a time, the scalar loops' operations
 * in their order (same bits); each returns how many it did. Only when wino__avx512().
 *   in_rows: t[q][i] = (B^T (p[0..5][i]))[q], i < n;
 *   in_cols: v[q][tx] = (B^T s[4 tx .. 4 tx + 5])[q], tx < tw (s holds 4 tw + 2);
 *   out_row: the full tiles tx < full of one tile row of one channel, point xi of tile
 *   tx at pq[xi][tx]: pixels 4 tx .. 4 tx + 3 (times up) of the rows y[0..3] (NULL:
 *   none);
 *   tf_weights: wino43__tf_weights, 8 kernels at a time (in double as there).
 */
int64_t wino43__in_rows_avx512(const float *const p[6], float *const t[6], int64_t n);
int64_t wino43__in_cols_avx512(const float *s, float *const v[6], int64_t tw);
int64_t wino43__out_row_avx512(const float *const pq[W43_XI], float bv, float *const y[4],
                               int64_t full, int64_t up);
int64_t wino43__tf_weights_avx512(const float *g, float *u, int64_t stride, int64_t n);

/*
 * wino_avx2.c, wino43_avx2.c: the same row loops 8 tiles at a time, for CPUs with AVX2
 * but no AVX-512F, with the same contract (same bits; each returns how many it did, a
 * multiple of 8, of 4 for tf_weights; the caller finishes in scalar code). Call them only
 * when wino__avx2() is 1 (the CPU has AVX2 and cpu_wino_avx2, tensor_impl.h, allows it).
 * The out_rows take b, y's column in out's row (wino__output_tf's b; 0 when up is 1):
 * AVX2 has no cheap masked store, so for up 2 they read and rewrite whole 8-float
 * windows of the row from y - b, the other column phase's pixels included; the row must
 * be written by the calling thread alone (wino_up2.c: one task writes all phases of its
 * rows), and the windows stay in the row (they end at 4 pairs or 8 full columns past the
 * row's start, <= 2 wo).
 * wino__vec(): 16 when the AVX-512 loops are to run, 8 the AVX2 ones, 0 none.
 */
int wino__avx2(void);
int wino__vec(void);
int64_t wino__in_rows_avx2(const float *p0, const float *p1, const float *p2, const float *p3,
                           float *t0, float *t1, float *t2, float *t3, int64_t n);
int64_t wino__in_cols_avx2(const float *s, float *v0, float *v1, float *v2, float *v3, int64_t tw);
int64_t wino__out_row_avx2(const float *const pq[WG_XI], float bv, float *y0, float *y1,
                           int64_t pairs, int64_t up, int b);
int64_t wino__tf_weights_avx2(const float *g9, float *u, int64_t n);
int64_t wino43__in_rows_avx2(const float *const p[6], float *const t[6], int64_t n);
int64_t wino43__in_cols_avx2(const float *s, float *const v[6], int64_t tw);
int64_t wino43__out_row_avx2(const float *const pq[W43_XI], float bv, float *const y[4],
                             int64_t full, int64_t up, int b);
int64_t wino43__tf_weights_avx2(const float *g, float *u, int64_t stride, int64_t n);

/* j->rows and j->nchk for n images, per_row bytes of V + M per tile row: blocks near
 * cpu_wino_chunk_bytes, at least WG_MIN_TILES tiles, at least two tasks per thread. */
void wino__plan_rows(struct wg_job *j, int64_t n, int64_t per_row);

/* j->buf: one block of `per` bytes per pool thread from `at`; in stack when nstack
 * pointers hold them, else on the heap (returned: the caller xfrees it; NULL if none). */
float **wino__set_bufs(struct wg_job *j, char *at, size_t per, float **stack, int nstack);

/* The calling thread's kept Winograd buffer, grown to `bytes` (contents undefined), or
 * NULL when that cannot be allocated. Freed by cpu_wino_release. */
char *wino__mem_get(size_t bytes);

#endif
