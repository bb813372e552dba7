/*
 * linear_amx.c — Linear and Linear + GEGLU under bf16 precision on AMX tiles (linear.h).
 *
 * Why not cpu_sgemm's bf16 path (gemm.c), which these ops took before: there a Linear
 * rounded all of x into a bf16 copy (a pass of its own, into fresh pages), split y into
 * column panels each of which packed all of that copy into A tiles again, and read the
 * weight through a bf16 copy (a pass) that every GEMM re-laid out as B tiles; the GEGLU's
 * 256-row tiles re-laid out all of W once per tile. Here W goes from its stored dtype
 * straight into B's tiles once per op, x's rows are rounded while they are packed as A,
 * the bias is the accumulators' first value (a stride-0 tile load), and the GEGLU runs on
 * each 32-row block of [a | g] while it is in L1. The arithmetic is the same (bf16
 * operands rounded to nearest even, fp32 accumulation); only the order of the sums over
 * K can differ.
 *
 * Work split: many rows (x large, W small beside it): W packed once for the op, tasks of
 * row bands, each packing its own rows (sized so the band's packed A stays in L2) and
 * running all columns. Few rows (the UNet's deep levels, where W dominates): x packed
 * once for the call, tasks of column bands, each converting its share of W chunk by chunk
 * as it meets it (read once, never written packed: one 512^2 step's 16^2 and 8^2 levels
 * hold ~400 MB of f16 Linear weights).
 *
 * Blocking inside a task follows cpu_gemm_amx (gemm_amx.c): K in blocks whose B chunk
 * (~512 KiB) stays in L2 while every 32-row block of the band meets it; y itself is the
 * accumulator between K blocks. The GEGLU takes K whole (its K is at most 1280 in SD), so
 * a block's [a | g] is final when the GEGLU reads it.
 */
#include <string.h>

#include "adapt.h"
#include "alloc.h"
#include "gemm_amx.h"
#include "gemm_bf16.h"
#include "linear.h"
#include "../tensor_impl.h"
#include "../tensor_precision.h"

#define B_CHUNK_BYTES (512 * 1024) /* B's columns per chunk: this much of W in L2 */
#define K_BLOCK 24                 /* steps of 32 in K per block (plain Linear) */
#define BAND_A_BYTES (1u << 20)    /* a row band's packed A */
#define ROWS_SPLIT 1024            /* from this many rows: row bands, else column bands */
#define CHUNK_MAX 512              /* columns per chunk at most (the block buffer) */

/* The calling thread's scratch: the op's (W packed, x packed, bias) and a task's. */
static _Thread_local struct cpu_scratch op_w, op_x, task_s;

struct la_job {
    const float *x;      /* rows x k, row-major */
    const uint16_t *bpk; /* W as B tiles */
    const float *bias;   /* padded to the packed width, or NULL */
    float *y;
    int64_t rows, k, n, h; /* h: GEGLU's output width (n = 2 h); 0: a plain Linear */
    int64_t ks, kbs, nc;   /* steps of 32 in K, per K block; B chunk columns */
    int64_t width;         /* output columns: n, or h */
    const uint16_t *apk;   /* column bands: all of x packed (and W converted per chunk) */
    int64_t rstep, cstep, nct;
    enum tensor_dtype wdt;
    const void *w;
};

static size_t a_block_elems(int64_t ks)
{
    return (size_t)ks * 1024;
}

/* Elements of one B chunk as band() converts it (a GEGLU's a and g side by side). */
static size_t chunk_elems(const struct la_job *j)
{
    return (size_t)(j->nc / 16 * j->kbs) * 512 * (j->h ? 2 : 1);
}

/* Rows [r0, r0 + rn) x output columns [c0, c1) (multiples of 32 but the last) of y, A
 * packed at ap (the band's first 32-row block); blk: 32 x 2 * CHUNK_MAX floats. B from
 * the op's packing, or (column bands, bbuf set: chunk_elems) W's chunk converted into
 * bbuf as it is met, each chunk by the one task whose columns it holds: W is read once
 * and never written packed (the deep levels' W is most of their bytes). */
static void band(const struct la_job *j, const uint16_t *ap, int64_t r0, int64_t rn, int64_t c0,
                 int64_t c1, float *blk, uint16_t *bbuf)
{
    int64_t ks = j->ks;
    for (int64_t s0 = 0; s0 < ks; s0 += j->kbs) {
        int64_t ss = ks - s0 < j->kbs ? ks - s0 : j->kbs;
        int64_t kk = j->k - s0 * 32 < ss * 32 ? j->k - s0 * 32 : ss * 32;
        for (int64_t j0 = c0; j0 < c1; j0 += j->nc) {
            int64_t w = c1 - j0 < j->nc ? (c1 - j0 + 31) / 32 * 32 : j->nc;
            int64_t cols = j->width - j0 < w ? j->width - j0 : w;
            int64_t bjs = ks * 512;
            const uint16_t *b, *bg = NULL; /* W's a columns (all, plain), and g's */
            if (!bbuf) {
                b = j->bpk + (j0 / 16) * bjs + s0 * 512;
                if (j->h)
                    bg = j->bpk + ((j->h + j0) / 16) * bjs + s0 * 512;
            } else {
                bjs = ss * 512;
                cpu_amx_pack_w_block(bbuf, j->wdt, j->w, j->n, j->k, s0 * 32, kk, j0, w);
                b = bbuf;
                if (j->h) {
                    bg = bbuf + (w / 16) * bjs;
                    cpu_amx_pack_w_block((uint16_t *)bg, j->wdt, j->w, j->n, j->k, s0 * 32, kk,
                                         j->h + j0, w);
                }
            }
            for (int64_t i = 0; i < rn; i += 32) {
                int64_t rows = rn - i < 32 ? rn - i : 32;
                const uint16_t *a = ap + (size_t)(i / 32) * a_block_elems(ks) + s0 * 1024;
                if (j->h) { /* [a | g] of this block side by side, then a * gelu(g) */
                    cpu_amx_rows(a, b, bjs, ss, w, blk, 2 * w * 4, 0,
                                 j->bias ? j->bias + j0 : NULL);
                    cpu_amx_rows(a, bg, bjs, ss, w, blk + w, 2 * w * 4, 0,
                                 j->bias ? j->bias + j->h + j0 : NULL);
                    for (int64_t r = 0; r < rows; r++)
                        cpu_vec_geglu(j->y + (r0 + i + r) * j->h + j0, blk + r * 2 * w,
                                      blk + r * 2 * w + w, cols);
                    continue;
                }
                const float *bias = s0 == 0 && j->bias ? j->bias + j0 : NULL;
                float *c = j->y + (r0 + i) * j->n + j0;
                if (rows == 32 && cols == w) { /* y is the accumulator */
                    cpu_amx_rows(a, b, bjs, ss, w, c, j->n * 4, s0 > 0, bias);
                    continue;
                }
                cpu_amx_rows(a, b, bjs, ss, w, blk, w * 4, 0, bias);
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t q = 0; q < cols; q++)
                        c[r * j->n + q] = blk[r * w + q] + (s0 > 0 ? c[r * j->n + q] : 0.0f);
            }
        }
    }
}

static void pack_rows(uint16_t *dst, const struct la_job *j, int64_t r0, int64_t rn)
{
    for (int64_t i = 0; i < rn; i += 32)
        cpu_amx_pack_a_rows(dst + (size_t)(i / 32) * a_block_elems(j->ks), TENSOR_F32,
                            j->x + (r0 + i) * j->k, j->k, rn - i < 32 ? rn - i : 32, j->k);
}

static float *task_blk(size_t a_elems)
{
    return cpu_scratch_grow(&task_s, a_elems / 2 + 32 * 2 * CHUNK_MAX + 16);
}

static void row_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const struct la_job *j = ctx;
    size_t a_elems = (size_t)(j->rstep / 32) * a_block_elems(j->ks);
    float *s = task_blk(a_elems);
    uint16_t *ap = (uint16_t *)(s + 32 * 2 * CHUNK_MAX);
    cpu_amx_tiles_begin();
    for (int64_t t = b; t < e; t++) {
        int64_t r0 = t * j->rstep, rn = j->rows - r0 < j->rstep ? j->rows - r0 : j->rstep;
        pack_rows(ap, j, r0, rn);
        band(j, ap, r0, rn, 0, j->width, s, NULL);
    }
    cpu_amx_tiles_end();
}

static void col_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const struct la_job *j = ctx;
    float *s = task_blk(chunk_elems(j));
    uint16_t *bbuf = (uint16_t *)(s + 32 * 2 * CHUNK_MAX);
    cpu_amx_tiles_begin();
    for (int64_t t = b; t < e; t++) {
        int64_t c0 = t * j->cstep, c1 = j->width - c0 < j->cstep ? j->width : c0 + j->cstep;
        band(j, j->apk, 0, j->rows, c0, c1, s, bbuf);
    }
    cpu_amx_tiles_end();
}

static void pack_x_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    struct la_job *j = ctx;
    for (int64_t i = b; i < e; i++)
        pack_rows((uint16_t *)j->apk + (size_t)i * a_block_elems(j->ks), j, i * 32,
                  j->rows - i * 32 < 32 ? j->rows - i * 32 : 32);
}

static void pack_w_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    struct la_job *j = ctx;
    for (int64_t g = b; g < e; g++)
        cpu_amx_pack_w((uint16_t *)j->bpk, j->wdt, j->w, j->n, j->k, g * 32, 32);
}

int cpu_linear_amx_ok(const struct tensor *w, int64_t rows, int geglu)
{
    if (tensor_precision_get() != TENSOR_PRECISION_BF16 || !cpu_bf16_amx() || rows < 32)
        return 0;
    if (w->ndim != 2 || !tensor_is_contiguous(w))
        return 0;
    if (w->dtype != TENSOR_F32 && w->dtype != TENSOR_F16 && w->dtype != TENSOR_BF16)
        return 0;
    /* the GEGLU's g columns start a tile of their own, and its K is taken whole */
    return !geglu || (w->shape[0] % 64 == 0 && w->shape[1] <= 64 * 32);
}

void cpu_linear_amx(float *y, const float *x, const struct tensor *w, const float *bias,
                    int64_t rows, int64_t k, int64_t n, int geglu)
{
    int nt = tensor__pool_threads();
    struct la_job j = {.x = x,
                       .y = y,
                       .rows = rows,
                       .k = k,
                       .n = n,
                       .h = geglu ? n / 2 : 0,
                       .wdt = w->dtype,
                       .w = tensor__ptr(w)};
    j.ks = (k + 31) / 32;
    j.width = geglu ? j.h : n;
    j.kbs = geglu || j.ks < K_BLOCK ? j.ks : K_BLOCK;
    int64_t per_col = j.kbs * 32 * 2 * (geglu ? 2 : 1); /* B chunk bytes per output column */
    j.nc = B_CHUNK_BYTES / per_col / 32 * 32;
    j.nc = j.nc < 32 ? 32 : j.nc > CHUNK_MAX ? CHUNK_MAX : j.nc;
    if (geglu && j.nc > CHUNK_MAX / 2) /* the block buffer holds a and g */
        j.nc = CHUNK_MAX / 2;
    int64_t np = (n + 31) / 32 * 32;
    int rowwise = rows >= ROWS_SPLIT;
    size_t bel = rowwise ? cpu_amx_packed_b_elems(n, k) : 0; /* column bands convert W */
    uint16_t *bpk = (uint16_t *)cpu_scratch_grow(&op_w, bel / 2 + (size_t)np + 16);
    j.bpk = bpk;
    if (bias) {
        float *bp = (float *)(bpk + bel);
        memcpy(bp, bias, (size_t)n * sizeof(float));
        memset(bp + n, 0, (size_t)(np - n) * sizeof(float));
        j.bias = bp;
    }
    if (rowwise) {
        tensor__pool_for(np / 32, pack_w_task, &j);
        int64_t r = (int64_t)(BAND_A_BYTES / ((size_t)j.ks * 64)) / 32 * 32;
        int64_t even = ((rows + 2 * nt - 1) / (2 * nt) + 31) / 32 * 32; /* two per thread */
        j.rstep = r < 32 ? 32 : r < even ? r : even;
        tensor__pool_for((rows + j.rstep - 1) / j.rstep, row_task, &j);
        return;
    }
    int64_t mb = (rows + 31) / 32;
    j.apk = (uint16_t *)cpu_scratch_grow(&op_x, (size_t)mb * a_block_elems(j.ks) / 2 + 16);
    tensor__pool_for(mb, pack_x_task, &j);
    j.cstep = ((j.width + 2 * nt - 1) / (2 * nt) + 31) / 32 * 32;
    tensor__pool_for((j.width + j.cstep - 1) / j.cstep, col_task, &j);
}

size_t cpu_linear_amx_release(void)
{
    return cpu_scratch_drop(&op_w) + cpu_scratch_drop(&op_x) + cpu_scratch_drop(&task_s);
}
