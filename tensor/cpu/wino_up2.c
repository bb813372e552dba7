/*
 * wino_up2.c — a nearest-2x upsample followed by a 3x3 stride-1 pad-1 convolution, as
 * Winograd F(2x2, 3x3) on the low-resolution input (tensor_conv2d_up2's CPU kernel).
 *
 * Output pixel (2i + a, 2j + b) of conv(up(x)) reads up(x)'s rows 2i + a - 1 .. 2i + a
 * + 1, which are x's rows i - 1, i, i (a = 0) or i, i, i + 1 (a = 1), and the same for
 * columns. So each of the four output phases (a, b) is a 3x3 pad-1 convolution of x
 * itself whose kernel has its rows folded to (w0, w1 + w2, 0) or (0, w0 + w1, w2), and
 * its columns likewise: one zero row and one zero column. All four read the same 4x4
 * patches of x, so one F(2,3) input transform V of x serves them, and F(2,3)'s G maps
 * a kernel column (g0, g1, 0) to a vector whose point 3 is zero and (0, g1, g2) to one
 * whose point 0 is zero: phase (a, b) uses 3 x 3 of the 16 points. Per 2x2 tile of x
 * (16 output pixels) and channel pair that is 36 GEMM products, against 64 for
 * Winograd on the upsampled image and 144 for im2col; the input transform covers a
 * quarter of the pixels; and the upsampled tensor (N x Ci x 2H x 2W floats, 256 MiB at
 * the 512^2 VAE decoder's last upsample) is never written or page-faulted in.
 *
 * Layout: for each point xi, the U planes of the phases that use it are stacked,
 * [np(xi) * co][ci], so a point is one GEMM [np * co, ci] x V[xi] [ci, T] into M rows
 * stacked the same way; the output transform of a phase reads a plane of zeros for the
 * points it does not use, then writes every other pixel of every other row.
 *
 * Numerics: the folded taps (w1 + w2) are rounded once in f32, then the transforms are
 * winograd.c's; test_tensor_winograd bounds the error against the float64 upsample +
 * direct convolution and against the unfused reference (upsample, then im2col + GEMM).
 *
 * fp32 only: under bf16 precision the op runs unfused (the upsample, then winograd.c's
 * bf16 path). Threads: executor only; -1 (out untouched) when the buffers cannot be
 * allocated, and the caller runs the two ops.
 */
#include <string.h>

#include "alloc.h"
#include "../tensor_impl.h"
#include "winograd_impl.h"

#define UP2_PH 4 /* output phases (a, b): ph = 2a + b */

struct up2_layout {
    int np[WG_XI];            /* phases that use point xi */
    int slot[WG_XI][UP2_PH];  /* a phase's block in xi's stack, -1: unused */
    int64_t off[WG_XI];       /* blocks (of co rows) stacked before xi's */
    int64_t blocks;           /* all of them: 36 */
};

/* Points of one axis that phase a uses: 0..2 (a = 0) or 1..3 (a = 1). */
static int up2_uses(int a, int p)
{
    return a == 0 ? p <= 2 : p >= 1;
}

static void up2_layout_init(struct up2_layout *l)
{
    int64_t acc = 0;
    for (int xi = 0; xi < WG_XI; xi++) {
        l->np[xi] = 0;
        l->off[xi] = acc;
        for (int ph = 0; ph < UP2_PH; ph++)
            l->slot[xi][ph] =
                up2_uses(ph >> 1, xi / 4) && up2_uses(ph & 1, xi % 4) ? l->np[xi]++ : -1;
        acc += l->np[xi];
    }
    l->blocks = acc;
}

/* Three taps along one axis as phase a sees them on x (see the top of the file). */
static void up2_fold(int a, const float g[3], float f[3])
{
    f[0] = a ? 0.0f : g[0];
    f[1] = a ? g[0] + g[1] : g[1] + g[2];
    f[2] = a ? g[2] : 0.0f;
}

/* G f, with winograd.c's G and its order of operations. */
static void up2_g(const float f[3], float r[4])
{
    r[0] = f[0];
    r[1] = 0.5f * (f[0] + f[1] + f[2]);
    r[2] = 0.5f * (f[0] - f[1] + f[2]);
    r[3] = f[2];
}

struct up2_wt_job {
    float *u;
    const float *w;
    int64_t co, ci;
    const struct up2_layout *l;
};

/* U for output channels b .. e: each channel's 36 rows in a row buffer, then copied. */
static void up2_wt_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const struct up2_wt_job *j = ctx;
    const struct up2_layout *l = j->l;
    float *row = xmalloc_aligned(64, (size_t)(l->blocks * j->ci) * sizeof(float));
    for (int64_t o = b; o < e; o++) {
        for (int64_t c = 0; c < j->ci; c++) {
            const float *g = j->w + (o * j->ci + c) * 9;
            for (int ph = 0; ph < UP2_PH; ph++) {
                float k[3][3], t[4][3], col[3], fc[3], gc[4];
                for (int r = 0; r < 3; r++) /* columns folded (phase b) */
                    up2_fold(ph & 1, g + 3 * r, k[r]);
                for (int x = 0; x < 3; x++) { /* rows folded (phase a), then G */
                    for (int r = 0; r < 3; r++)
                        col[r] = k[r][x];
                    up2_fold(ph >> 1, col, fc);
                    up2_g(fc, gc);
                    for (int r = 0; r < 4; r++)
                        t[r][x] = gc[r];
                }
                for (int r = 0; r < 4; r++) { /* (G k) G^T */
                    float u[4];
                    up2_g(t[r], u);
                    for (int p = 0; p < 4; p++) {
                        int xi = 4 * r + p, s = l->slot[xi][ph];
                        if (s >= 0)
                            row[(l->off[xi] + s) * j->ci + c] = u[p];
                    }
                }
            }
        }
        for (int64_t blk = 0; blk < l->blocks; blk++)
            memcpy(j->u + (blk * j->co + o) * j->ci, row + blk * j->ci,
                   (size_t)j->ci * sizeof(float));
    }
    xfree_aligned(row);
}

struct up2_job {
    struct wg_job j;
    const struct up2_layout *l;
};

static void up2_task(void *ctx, int64_t b, int64_t e, int tid)
{
    const struct up2_job *uj = ctx;
    const struct wg_job *j = &uj->j;
    const struct up2_layout *l = uj->l;
    int64_t tmax = j->rows * j->tw, pw = 2 * j->tw + 2, co = j->co, ci = j->ci;
    float *v = j->buf[tid], *m = v + WG_XI * ci * tmax;
    float *patch = m + l->blocks * co * tmax + WG_XI * WG_MPAD;
    float *tr = patch + (2 * j->rows + 2) * pw, *zero = tr + 4 * pw;
    memset(zero, 0, (size_t)tmax * sizeof(float));
    for (int64_t t = b; t < e; t++) {
        int64_t img = t / j->nchk, r0 = t % j->nchk * j->rows;
        int64_t nr = j->th - r0 < j->rows ? j->th - r0 : j->rows, T = nr * j->tw;
        wino__input_tf(j, img, r0, nr, v, T, patch, tr, NULL, NULL);
        for (int xi = 0; xi < WG_XI; xi++)
            cpu_sgemm(0, 0, l->np[xi] * co, T, ci, 1.0f, j->u + l->off[xi] * co * ci, ci,
                      v + xi * ci * T, T, 0.0f, m + l->off[xi] * co * T + xi * WG_MPAD, T, 1);
        float *oi = j->out + img * co * 4 * j->ho * j->wo;
        for (int ph = 0; ph < UP2_PH; ph++) {
            const float *mq[WG_XI];
            int64_t mcs[WG_XI];
            for (int xi = 0; xi < WG_XI; xi++) {
                int s = l->slot[xi][ph];
                /* xi's blocks are one GEMM's rows; WG_MPAD apart per point */
                mq[xi] = s < 0 ? zero : m + (l->off[xi] + s) * co * T + xi * WG_MPAD;
                mcs[xi] = s < 0 ? 0 : T;
            }
            wino__output_tf(j, oi, r0, nr, mq, mcs, ph >> 1, ph & 1);
        }
    }
}

int cpu_conv2d_up2_winograd(float *out, const float *x, const float *w, const float *bias,
                            int64_t n, int64_t ci, int64_t h, int64_t wd, int64_t co)
{
    struct up2_layout l;
    up2_layout_init(&l);
    int nt = tensor__pool_threads();
    /* the tile grid is x's own h x wd pixels, padded 1: each phase is a pad-1 conv of x */
    struct up2_job uj = {{out, x, NULL, bias, NULL, ci, h, wd, co, h, wd, 1, 1, 2, (wd + 1) / 2,
                          (h + 1) / 2, 0, 0, NULL, NULL, NULL, 0, 2},
                         &l};
    struct wg_job *j = &uj.j;
    wino__plan_rows(j, n, (WG_XI * ci + l.blocks * co) * j->tw * (int64_t)sizeof(float));
    /* U; per thread: V, M, patch, row transforms, a plane of zeros */
    size_t ub = ((size_t)(l.blocks * co * ci) * sizeof(float) + 63) / 64 * 64;
    size_t tmax = (size_t)(j->rows * j->tw), pw = (size_t)(2 * j->tw + 2);
    size_t per = ((WG_XI * (size_t)ci + (size_t)l.blocks * (size_t)co) * tmax + WG_XI * WG_MPAD +
                  (2 * (size_t)j->rows + 2) * pw + 4 * pw + tmax) *
                 sizeof(float);
    per = (per + 63) / 64 * 64;
    char *base = wino__mem_get(ub + (size_t)nt * per);
    if (!base)
        return -1;
    float *bufs[64], **heap = wino__set_bufs(j, base + ub, per, bufs, 64);
    j->u = (float *)base;
    struct up2_wt_job wj = {(float *)base, w, co, ci, &l};
    tensor__pool_for(co, up2_wt_task, &wj);
    cpu_gemm_pool_enter();
    tensor__pool_for(n * j->nchk, up2_task, &uj);
    cpu_gemm_pool_leave();
    xfree(heap);
    return 0;
}
