/*
 * wino_up2.c — a nearest-2x upsample followed by a 3x3 stride-1 pad-1 convolution, as
 * Winograd F(2x2, 3x3) or F(4x4, 3x3) on the low-resolution input (tensor_conv2d_up2's CPU
 * kernel).
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
 * F(4,3) (wino43.c; where up2_tile takes it for x's channels and size): its G
 * likewise gives (g0, g1, 0) a zero at infinity (point 5) and (0, g1, g2) a zero at
 * point 0, so a phase uses 5 x 5 of the 36 points: per 4x4 tile of x (64 output
 * pixels) 100 GEMM products, against 144 for F(2,3) here. Its weight transform takes
 * each phase's folded kernels through wino43's (double, then rounded).
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
    int m, n, nxi;                /* tile size (2, 4), points per axis, points */
    int np[W43_XI];               /* phases that use point xi */
    int slot[W43_XI][UP2_PH];     /* a phase's block in xi's stack, -1: unused */
    int64_t off[W43_XI];          /* blocks (of co rows) stacked before xi's */
    int64_t blocks;               /* all of them: 36 (F(2,3)), 100 (F(4,3)) */
};

/* Points of one axis (of n) that phase a uses: all but the last (a = 0: the folded
 * taps (g0, g1, 0) give 0 at infinity) or all but the first (a = 1: (0, g1, g2) give
 * 0 at 0). */
static int up2_uses(int n, int a, int p)
{
    return a == 0 ? p <= n - 2 : p >= 1;
}

static void up2_layout_init(struct up2_layout *l, int m)
{
    int64_t acc = 0;
    l->m = m;
    l->n = m + 2;
    l->nxi = l->n * l->n;
    for (int xi = 0; xi < l->nxi; xi++) {
        l->np[xi] = 0;
        l->off[xi] = acc;
        for (int ph = 0; ph < UP2_PH; ph++)
            l->slot[xi][ph] = up2_uses(l->n, ph >> 1, xi / l->n) &&
                                      up2_uses(l->n, ph & 1, xi % l->n)
                                  ? l->np[xi]++
                                  : -1;
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

struct up2_wt_job {
    float *u;
    const void *w;
    enum tensor_dtype wdt;
    int64_t co, ci;
    const struct up2_layout *l;
};

/* Kernel g as phase ph sees it on x: columns folded (phase b), then rows (phase a). */
static void up2_fold_kernel(int ph, const float *g, float kf[9])
{
    float k[3][3], col[3], fc[3];
    for (int r = 0; r < 3; r++)
        up2_fold(ph & 1, g + 3 * r, k[r]);
    for (int x = 0; x < 3; x++) {
        for (int r = 0; r < 3; r++)
            col[r] = k[r][x];
        up2_fold(ph >> 1, col, fc);
        for (int r = 0; r < 3; r++)
            kf[3 * r + x] = fc[r];
    }
}

/* Each phase's folded kernels of output channel o (kf, ci x 9) through the weight
 * transform (F(2,3)'s 16 or F(4,3)'s 36 planes of ci into tmp), then the phase's planes
 * into row. */
static void up2_wt(const struct up2_wt_job *j, const float *wo, float *row, float *kf, float *tmp)
{
    const struct up2_layout *l = j->l;
    for (int ph = 0; ph < UP2_PH; ph++) {
        for (int64_t c = 0; c < j->ci; c++)
            up2_fold_kernel(ph, wo + c * 9, kf + c * 9);
        if (l->m == 4)
            wino43__tf_weights(kf, tmp, j->ci, j->ci);
        else
            wino__tf_weights23(kf, tmp, j->ci);
        for (int xi = 0; xi < l->nxi; xi++) {
            int sl = l->slot[xi][ph];
            if (sl >= 0)
                memcpy(row + (l->off[xi] + sl) * j->ci, tmp + xi * j->ci,
                       (size_t)j->ci * sizeof(float));
        }
    }
}

/* U for output channels b .. e: each channel's rows (36 or 100) in a row buffer, then
 * copied to their planes. */
static void up2_wt_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const struct up2_wt_job *j = ctx;
    const struct up2_layout *l = j->l;
    /* the rows, then channel o's kernels widened (when not f32) */
    float *row = xmalloc_aligned(64, (size_t)((l->blocks + 9) * j->ci) * sizeof(float));
    float *wide = row + l->blocks * j->ci;
    /* folded kernels (9 per channel) and the 16 or 36 transformed planes */
    float *kf = xmalloc_aligned(64, (size_t)((9 + l->nxi) * j->ci) * sizeof(float));
    for (int64_t o = b; o < e; o++) {
        const float *wo = wino__w_row(j->w, j->wdt, o, 9 * j->ci, wide);
        up2_wt(j, wo, row, kf, kf + 9 * j->ci);
        for (int64_t blk = 0; blk < l->blocks; blk++)
            memcpy(j->u + (blk * j->co + o) * j->ci, row + blk * j->ci,
                   (size_t)j->ci * sizeof(float));
    }
    xfree_aligned(kf);
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
    int m4 = l->m == 4;
    int64_t tmax = j->rows * j->tw, pw = l->m * j->tw + 2, co = j->co, ci = j->ci;
    float *v = j->buf[tid], *m = v + l->nxi * ci * tmax;
    float *patch = m + l->blocks * co * tmax + l->nxi * WG_MPAD;
    float *tr = patch + (l->m * j->rows + 2) * pw, *zero = tr + l->n * pw;
    memset(zero, 0, (size_t)tmax * sizeof(float));
    for (int64_t t = b; t < e; t++) {
        int64_t img = t / j->nchk, r0 = t % j->nchk * j->rows;
        int64_t nr = j->th - r0 < j->rows ? j->th - r0 : j->rows, T = nr * j->tw;
        if (m4)
            wino43__input_tf(j, img, r0, nr, v, T, patch, tr, NULL, NULL);
        else
            wino__input_tf(j, img, r0, nr, v, T, patch, tr, NULL, NULL);
        for (int xi = 0; xi < l->nxi; xi++)
            cpu_sgemm(0, 0, l->np[xi] * co, T, ci, 1.0f, j->u + l->off[xi] * co * ci, ci,
                      v + xi * ci * T, T, 0.0f, m + l->off[xi] * co * T + xi * WG_MPAD, T, 1);
        float *oi = j->out + img * co * 4 * j->ho * j->wo;
        for (int ph = 0; ph < UP2_PH; ph++) {
            const float *mq[W43_XI];
            int64_t mcs[W43_XI];
            for (int xi = 0; xi < l->nxi; xi++) {
                int s = l->slot[xi][ph];
                /* xi's blocks are one GEMM's rows; WG_MPAD apart per point */
                mq[xi] = s < 0 ? zero : m + (l->off[xi] + s) * co * T + xi * WG_MPAD;
                mcs[xi] = s < 0 ? 0 : T;
            }
            if (m4)
                wino43__output_tf(j, oi, r0, nr, mq, mcs, ph >> 1, ph & 1);
            else
                wino__output_tf(j, oi, r0, nr, mq, mcs, ph >> 1, ph & 1);
        }
    }
}

/*
 * F(4,3) where cpu_wino_tile takes it, but only while its U (100 blocks of co x ci
 * floats) is no larger than a plain F(4,3) conv's at 512 channels (36 x 512 x 512): the
 * thread keeps its Winograd buffer at its largest, and at 512 -> 512 channels U alone
 * is 105 MB (the 512^2 VAE decode's peak RSS 836 -> 921 MiB, bench_txt2img --ab vae),
 * for ~1 % of the decode's CPU time (those two upsample convs ran 1.17x and 1.30x
 * faster). cpu_wino_f43 = 2 (tests) takes it wherever the bound allows.
 */
static int up2_tile(int64_t ci, int64_t co, int64_t h, int64_t wd)
{
    int m = cpu_wino_tile(ci, co, h, wd);
    if (m == 4 && cpu_wino_f43 != 2 && 100 * ci * co > 36 * 512 * 512)
        return 2;
    return m;
}

int cpu_conv2d_up2_winograd(float *out, const float *x, const void *w, enum tensor_dtype wdt,
                            const float *bias, int64_t n, int64_t ci, int64_t h, int64_t wd,
                            int64_t co)
{
    struct up2_layout l;
    up2_layout_init(&l, up2_tile(ci, co, h, wd));
    int nt = tensor__pool_threads(), m = l.m;
    /* the tile grid is x's own h x wd pixels, padded 1: each phase is a pad-1 conv of x */
    struct up2_job uj = {{out,
                          x,
                          NULL,
                          bias,
                          NULL,
                          ci,
                          h,
                          wd,
                          co,
                          h,
                          wd,
                          1,
                          1,
                          2,
                          (wd + m - 1) / m,
                          (h + m - 1) / m,
                          0,
                          0,
                          NULL,
                          NULL,
                          NULL,
                          0,
                          m,
                          NULL,
                          0,
                          0,
                          0,
                          0},
                         &l};
    struct wg_job *j = &uj.j;
    wino__plan_rows(j, n, (l.nxi * ci + l.blocks * co) * j->tw * (int64_t)sizeof(float));
    /* U; per thread: V, M, patch, row transforms, a plane of zeros */
    size_t ub = ((size_t)(l.blocks * co * ci) * sizeof(float) + 63) / 64 * 64;
    size_t tmax = (size_t)(j->rows * j->tw), pw = (size_t)(m * j->tw + 2);
    size_t per = (((size_t)l.nxi * (size_t)ci + (size_t)l.blocks * (size_t)co) * tmax +
                  (size_t)l.nxi * WG_MPAD + ((size_t)m * (size_t)j->rows + 2) * pw +
                  (size_t)l.n * pw + tmax) *
                 sizeof(float);
    per = (per + 63) / 64 * 64;
    char *base = wino__mem_get(ub + (size_t)nt * per);
    if (!base)
        return -1;
    float *bufs[64], **heap = wino__set_bufs(j, base + ub, per, bufs, 64);
    j->u = (float *)base;
    struct up2_wt_job wj = {(float *)base, w, wdt, co, ci, &l};
    tensor__pool_for(co, up2_wt_task, &wj);
    cpu_gemm_pool_enter();
    tensor__pool_for(n * j->nchk, up2_task, &uj);
    cpu_gemm_pool_leave();
    xfree(heap);
    return 0;
}
