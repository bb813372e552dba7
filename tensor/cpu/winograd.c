/*
 * winograd.c — 3x3 stride-1 convolution by Winograd's F(2x2, 3x3) or F(4x4, 3x3).
 *
 * Each 2x2 block of output pixels (a tile) comes from a 4x4 input patch d:
 *   Y = A^T [ (G g G^T) .* (B^T d B) ] A
 * so per tile and channel pair the 36 multiplies of the direct form become 16, and
 * summed over input channels the 16 elementwise products are 16 GEMMs:
 *   M[xi] [co, T] = U[xi] [co, ci] x V[xi] [ci, T],   xi = 0..15, T tiles,
 * 2.25x fewer flops than im2col + GEMM, done by the same sgemm.
 *
 * F(4x4, 3x3) (wino43.c: 36 points per 16 output pixels, 4x fewer products than
 * direct) where its error keeps the bound: 1e-5 relative against a direct convolution
 * (pixels must stay within 1/255 of ComfyUI's). With the textbook points 0, +-1, +-2 it
 * measured 1.5e-5 at 1280 input channels and 5e-6 at 320; with wino43.c's points
 * (0, -1, 1, 1/2, -2) it stays <= 6.3e-6 up to 512 channels (its table), so
 * cpu_wino_tile takes it there, fp32 only, and F(2,3) (points 0, +-1, entries 0, +-1,
 * 1/2: 1.6e-6 at 1280, twice a direct fp32 conv's own error) everywhere else. The
 * job, tasks, buffers and GEMMs below are the same for both tile sizes (j->m).
 *
 * Work: the weights are transformed once per call (U, 16/9 of the f32 weight, in the
 * thread's reused buffer: they are not cached, so a LoRA patch of the weight needs no
 * invalidation), split over the pool by output channel. Then pool tasks are
 * (image, block of tile rows), sized so that the block's V and M (16 x (ci + co) x T
 * floats) are about cpu_wino_chunk_bytes: a thread transforms its block's input into
 * its own V, runs the 16 single-threaded GEMMs into its own M and transforms M into
 * the output with the bias, so V and M are still in its caches when read back (the
 * same shape of work as conv.c's im2col chunks).
 *
 * Borders: each channel's rows of the block are first copied into a zero-padded patch
 * buffer, so the transforms never test bounds; output tiles past an odd edge write
 * only their pixels inside the image.
 *
 * bf16 (the calling thread's precision is bf16, tensor_precision.h): U is rounded to
 * bf16 as it is transformed (from the f32 image of the weight: the rounding comes after
 * the transform, as a bf16 direct convolution rounds its weight and not G g G^T's
 * inputs), each task rounds its V once after the input transform (in cache), and the
 * 16 (F(4,3): 36) GEMMs are bf16 x bf16 -> f32 (gemm_bf16.h); the output transform stays
 * f32. So U and the GEMMs' reads of it are half the bytes, and the GEMM runs at the bf16
 * rate.
 * Before this, a bf16 model's Winograd convolutions ran fp32: the convolutions that
 * dominate a VAE decode gained nothing from --bf16-vae. cpu_wino_bf16 = 0 restores
 * that (comparisons). Which tile under bf16: cpu_wino_tile_bf16 below.
 *
 * Shared (winograd_impl.h): wino_up2.c runs these transforms on a nearest-2x upsample's
 * low-resolution input, one output phase at a time; wino_avx512.c does the transforms'
 * row loops 16 tiles at a time with the same bits, wino_avx2.c 8 at a time on CPUs with
 * AVX2 but not AVX-512F.
 *
 * Threads: executor only (it runs pool jobs); returns -1 without touching `out` when
 * the transformed weights cannot be allocated (the caller falls back to im2col).
 */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "gemm_amx.h"
#include "gemm_bf16.h"
#include "../tensor_impl.h"
#include "../tensor_precision.h"
#include "adapt.h"
#include "winograd_impl.h"

#define WG_MIN_TILES 64 /* tiles per task, at least (when the image has them) */

/* V + M per task. 2 MiB measured best at 2x320x64^2 (2.6-2.9x im2col per CPU-second,
 * against 2.1x at 4 MiB and 1.5-1.7x at 8 MiB: the block must stay in L2 + L3 share). */
size_t cpu_wino_chunk_bytes = 2u << 20;

int cpu_wino_bf16 = 1; /* 0: Winograd stays fp32 under bf16 precision (as before) */

/* U[xi][o][c] = (G g G^T)[xi] for g = w[o][c] (3x3), G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1];
 * into u (f32) or, when u16 is set, rounded to bf16 into u16. m = 4: F(4,3)'s 36 points
 * (wino43__tf_weights), f32 only. */
struct wt_job {
    float *u;
    uint16_t *u16;
    const void *w;
    enum tensor_dtype wdt;
    int64_t co, ci;
    int m;
};

const float *wino__w_row(const void *w, enum tensor_dtype dt, int64_t o, int64_t n, float *buf)
{
    if (dt == TENSOR_F32)
        return (const float *)w + o * n;
    tensor_convert_host(buf, TENSOR_F32, (const char *)w + (size_t)(o * n) * tensor_dtype_size(dt),
                        dt, (size_t)n);
    return buf;
}

/* The vector loops (wino_avx512.c, wino_avx2.c) take 16 or 8 kernels per step with these
 * operations in this order (same bits). It runs on every call (weights stay at their file
 * dtype), so its scalar form cost a UNet step's convs ~3 %. */
void wino__tf_weights23(const float *g9, float *u, int64_t n)
{
    int vec = wino__vec();
    int64_t c0 = vec == 16  ? wino__tf_weights_avx512(g9, u, n)
                 : vec == 8 ? wino__tf_weights_avx2(g9, u, n)
                            : 0;
    for (int64_t c = c0; c < n; c++) {
        const float *g = g9 + c * 9;
        float t[4][3]; /* G g */
        for (int k = 0; k < 3; k++) {
            t[0][k] = g[k];
            t[1][k] = 0.5f * (g[k] + g[3 + k] + g[6 + k]);
            t[2][k] = 0.5f * (g[k] - g[3 + k] + g[6 + k]);
            t[3][k] = g[6 + k];
        }
        float *uc = u + c;
        for (int r = 0; r < 4; r++) { /* (G g) G^T */
            uc[(4 * r + 0) * n] = t[r][0];
            uc[(4 * r + 1) * n] = 0.5f * (t[r][0] + t[r][1] + t[r][2]);
            uc[(4 * r + 2) * n] = 0.5f * (t[r][0] - t[r][1] + t[r][2]);
            uc[(4 * r + 3) * n] = t[r][2];
        }
    }
}

static void wt_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    struct wt_job *j = ctx;
    int64_t plane = j->co * j->ci;
    int nxi = j->m == 4 ? W43_XI : WG_XI;
    /* one output channel's 16 rows of U first, then each row to its plane: writing U in
     * place scattered every (o, c)'s 16 values 1 MiB apart at 512 channels (perf of a
     * 256^2 VAE decode: this task at ~5 % of the samples) */
    float *row = xmalloc_aligned(64, (size_t)((nxi + 9) * j->ci) * sizeof(float));
    float *wide = row + nxi * j->ci; /* channel o's kernels widened, when not f32 */
    for (int64_t o = b; o < e; o++) {
        const float *g = wino__w_row(j->w, j->wdt, o, 9 * j->ci, wide);
        /* f32 too for F(2,3): its gathers ran 5-7 % slower from the weight itself (F(4,3)'s,
         * measured staged, gained nothing) */
        if (g != wide && j->m != 4) {
            memcpy(wide, g, (size_t)(9 * j->ci) * sizeof(float));
            g = wide;
        }
        if (j->m == 4)
            wino43__tf_weights(g, row, j->ci, j->ci);
        else
            wino__tf_weights23(g, row, j->ci);
        for (int xi = 0; xi < nxi; xi++) {
            if (j->u16)
                cpu_bf16_round(j->u16 + xi * plane + o * j->ci, row + xi * j->ci, j->ci);
            else
                memcpy(j->u + xi * plane + o * j->ci, row + xi * j->ci,
                       (size_t)j->ci * sizeof(float));
        }
    }
    xfree_aligned(row);
}

/* U's planes (row-major co x ci bf16) packed for the AMX kernel, one plane per task. */
struct pk_job {
    uint16_t *dst;
    const uint16_t *u16;
    int64_t co, ci, plane;
};

static void pk_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    struct pk_job *j = ctx;
    for (int64_t xi = b; xi < e; xi++)
        cpu_amx_pack(j->dst + xi * j->plane, j->u16 + xi * j->co * j->ci, j->ci, j->co, j->ci);
}

void wino__patch_fill(const struct wg_job *j, int64_t img, int64_t c, int64_t y0, int64_t prow,
                      int64_t pw, float *patch)
{
    int up = j->in_up > 1 ? 2 : 1;
    int64_t xw = j->w / up; /* x's own row length */
    const float *xc = j->x + (img * j->ci + c) * (j->h / up) * xw;
    /* columns of the patch that hold image pixels: xx = ix + pl for 0 <= ix < w */
    int64_t xa = j->pl, xb = j->pl + j->w < pw ? j->pl + j->w : pw;
    for (int64_t yy = 0; yy < prow; yy++) {
        float *pr = patch + yy * pw;
        int64_t iy = y0 + yy;
        if (iy < 0 || iy >= j->h || xb <= xa) {
            memset(pr, 0, (size_t)pw * sizeof(float));
            continue;
        }
        memset(pr, 0, (size_t)xa * sizeof(float));
        /* upsampled: x's half row goes to the end of the span, then spreads forward
         * (each value read before the two slots it fills, which never pass it) */
        int64_t nv = xb - xa, nx = up == 2 ? (nv + 1) / 2 : nv;
        float *dst = pr + xa + (nv - nx);
        const float *src = xc + iy / up * xw;
        if (j->na) /* GroupNorm's affine (+ SiLU) on the way in; the padding stays 0 */
            cpu_vec_affine(dst, src, nx, j->na[img * j->ci + c], j->nb[img * j->ci + c], j->nsilu);
        else
            memcpy(dst, src, (size_t)nx * sizeof(float));
        if (up == 2)
            for (int64_t i = 0; i < nx; i++) {
                float v = dst[i];
                pr[xa + 2 * i] = v;
                if (2 * i + 1 < nv)
                    pr[xa + 2 * i + 1] = v;
            }
        memset(pr + xb, 0, (size_t)(pw - xb) * sizeof(float));
    }
}

/* One tile row's B^T d B, with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], rows
 * first, then columns: patch rows p0, p0 + pw, .. (4 of them) -> the 16 tile elements'
 * rows of tw values, element 4k + q at dst[k] + q * ds. tr: 4 x pw floats of scratch. */
static void tf_tile_row(const float *p0, int64_t pw, int64_t tw, float *tr, float *const dst[4],
                        int64_t ds, int vec)
{
    const float *p1 = p0 + pw, *p2 = p1 + pw, *p3 = p2 + pw;
    float *t0 = tr, *t1 = tr + pw, *t2 = tr + 2 * pw, *t3 = tr + 3 * pw;
    int64_t i0 = vec == 16  ? wino__in_rows_avx512(p0, p1, p2, p3, t0, t1, t2, t3, pw)
                 : vec == 8 ? wino__in_rows_avx2(p0, p1, p2, p3, t0, t1, t2, t3, pw)
                            : 0;
    for (int64_t i = i0; i < pw; i++) {
        t0[i] = p0[i] - p2[i];
        t1[i] = p1[i] + p2[i];
        t2[i] = p2[i] - p1[i];
        t3[i] = p1[i] - p3[i];
    }
    const float *tk[4] = {t0, t1, t2, t3};
    for (int k = 0; k < 4; k++) {
        const float *s = tk[k];
        float *v0 = dst[k], *v1 = v0 + ds, *v2 = v1 + ds, *v3 = v2 + ds;
        int64_t tx0 = vec == 16  ? wino__in_cols_avx512(s, v0, v1, v2, v3, tw)
                      : vec == 8 ? wino__in_cols_avx2(s, v0, v1, v2, v3, tw)
                                 : 0;
        for (int64_t tx = tx0; tx < tw; tx++) {
            float a = s[2 * tx], b = s[2 * tx + 1], cc = s[2 * tx + 2], d = s[2 * tx + 3];
            v0[tx] = a - cc;
            v1[tx] = b + cc;
            v2[tx] = cc - b;
            v3[tx] = b - d;
        }
    }
}

/* V[xi][c][t] for the tile rows r0 .. r0 + nr of one image. With v16 set (bf16), a tile
 * row's 16 V rows go through tq (16 x tw floats, in L1) and are rounded into v16
 * instead: V is never written in f32. */
void wino__input_tf(const struct wg_job *j, int64_t img, int64_t r0, int64_t nr, float *v,
                    int64_t T, float *patch, float *tr, uint16_t *v16, float *tq)
{
    int64_t pw = 2 * j->tw + 2, prow = 2 * nr + 2, y0 = 2 * r0 - j->pt;
    int vec = wino__vec(); /* 16 AVX-512, 8 AVX2, 0 scalar */
    for (int64_t c = 0; c < j->ci; c++) {
        wino__patch_fill(j, img, c, y0, prow, pw, patch);
        for (int64_t r = 0; r < nr; r++) {
            float *dst[4];
            for (int k = 0; k < 4; k++)
                dst[k] = v16 ? tq + 4 * k * j->tw : v + ((4 * k) * j->ci + c) * T + r * j->tw;
            tf_tile_row(patch + 2 * r * pw, pw, j->tw, tr, dst, v16 ? j->tw : j->ci * T, vec);
            for (int xi = 0; v16 && xi < WG_XI; xi++)
                cpu_bf16_round(v16 + (xi * j->ci + c) * T + r * j->tw, tq + xi * j->tw, j->tw);
        }
    }
}

/*
 * bf16 on AMX (j->vpk): V for the tile rows r0 .. r0 + nr straight into B's tiles, two
 * channels at a time: each channel's 16 transformed rows go to tq (16 x tw floats per
 * channel, in L1), and the pair is rounded and interleaved into the tile rows it makes
 * (cpu_amx_vnni_pair). Before, V was rounded row by row into a plain bf16 matrix that
 * each of the 16 GEMMs then packed into tiles (perf: packing and rounding ~14 % of a
 * 64^2 x 320 conv). patch holds two channels' patches, tq 32 x tw floats.
 */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void
input_tf_packed(const struct wg_job *j, int64_t img, int64_t r0, int64_t nr, float *patch,
                float *tr, float *tq, uint16_t *vp)
{
    int64_t tw = j->tw, pw = 2 * tw + 2, prow = 2 * nr + 2, y0 = 2 * r0 - j->pt, ks = j->ci / 32;
    int vec = wino__vec();
    for (int64_t c = 0; c < j->ci; c += 2) {
        wino__patch_fill(j, img, c, y0, prow, pw, patch);
        wino__patch_fill(j, img, c + 1, y0, prow, pw, patch + prow * pw);
        for (int64_t r = 0; r < nr; r++) {
            for (int h = 0; h < 2; h++) {
                float *dst[4];
                for (int k = 0; k < 4; k++)
                    dst[k] = tq + (h * WG_XI + 4 * k) * tw;
                tf_tile_row(patch + h * prow * pw + 2 * r * pw, pw, tw, tr, dst, tw, vec);
            }
            /* tile row (c % 32) / 2 of step c / 32 in the 16-column tiles of this row's
             * tiles (tw a multiple of 16, so they start a tile) */
            size_t off = (size_t)(c / 32) * 512 + (size_t)(c % 32 / 2) * 32;
            for (int xi = 0; xi < WG_XI; xi++) {
                const float *a = tq + xi * tw, *b = tq + (WG_XI + xi) * tw;
                uint16_t *plane = vp + xi * j->vplane;
                for (int64_t tx = 0; tx < tw; tx += 16) {
                    int64_t jb = (r * tw + tx) / 16;
                    _mm512_storeu_si512(
                        plane + (size_t)(jb * ks) * 512 + off,
                        cpu_amx_vnni_pair(_mm512_loadu_ps(a + tx), _mm512_loadu_ps(b + tx)));
                }
            }
        }
    }
    /* columns past T in the last 32-column block: left as they are, the GEMM computes
     * but never stores them */
}

void wino__output_tf(const struct wg_job *j, float *out, int64_t r0, int64_t nr,
                     const float *const mq[WG_XI], const int64_t mcs[WG_XI], int a, int b)
{
    int64_t pairs = j->wo / 2, odd = j->wo & 1, up = j->up;
    int64_t ow = up * j->wo, oh = up * j->ho; /* out's width and height */
    int vec = wino__vec();
    for (int64_t o = 0; o < j->co; o++) {
        float bv = j->bias ? j->bias[o] : 0.0f;
        for (int64_t r = 0; r < nr; r++) {
            int64_t oy = 2 * (r0 + r), rt = r * j->tw;
            float *y0 = out + (o * oh + up * oy + a) * ow + b;
            float *y1 = oy + 1 < j->ho ? y0 + up * ow : NULL;
            const float *pq[WG_XI];
            for (int q = 0; q < WG_XI; q++)
                pq[q] = mq[q] + o * mcs[q] + rt;
            int64_t tx0 = vec == 16  ? wino__out_row_avx512(pq, bv, y0, y1, pairs, up)
                          : vec == 8 ? wino__out_row_avx2(pq, bv, y0, y1, pairs, up, b)
                                     : 0;
            for (int64_t tx = tx0; tx < pairs + odd; tx++) {
                float mm[16];
                for (int q = 0; q < 16; q++)
                    mm[q] = pq[q][tx];
                float s0[4], s1[4];
                for (int c = 0; c < 4; c++) {
                    s0[c] = mm[c] + mm[4 + c] + mm[8 + c];
                    s1[c] = mm[4 + c] - mm[8 + c] - mm[12 + c];
                }
                y0[up * 2 * tx] = s0[0] + s0[1] + s0[2] + bv;
                if (tx < pairs)
                    y0[up * (2 * tx + 1)] = s0[1] - s0[2] - s0[3] + bv;
                if (y1) {
                    y1[up * 2 * tx] = s1[0] + s1[1] + s1[2] + bv;
                    if (tx < pairs)
                        y1[up * (2 * tx + 1)] = s1[1] - s1[2] - s1[3] + bv;
                }
            }
        }
    }
}

/* Per-thread block of a task of j: V (f32; unused in bf16), M (planes WG_MPAD floats
 * apart), the padded patch, the row transforms, and in bf16 tq and V rounded: its bytes
 * (rounded up to 64) and, with at set, where each starts. */
struct wg_bufs {
    float *v, *m, *patch, *tr, *tq;
    uint16_t *v16;
};

static size_t wg_layout(const struct wg_job *j, int bf16, char *at, struct wg_bufs *b)
{
    int64_t nxi = j->m == 4 ? W43_XI : WG_XI, tmax = j->rows * j->tw, pw = j->m * j->tw + 2;
    int64_t f = 0; /* floats so far */
    int64_t v = f, m = (f += nxi * j->ci * tmax), patch = (f += nxi * (j->co * tmax + WG_MPAD));
    /* packed V: two channels' patches and transformed rows (input_tf_packed) */
    int64_t np = j->vpk ? 2 : 1, tqn = (j->vpk ? 2 : 1) * WG_XI * j->tw;
    int64_t tr = (f += np * (j->m * j->rows + 2) * pw), tq = (f += (j->m + 2) * pw);
    f += bf16 ? tqn : 0;
    f = (f + 15) / 16 * 16; /* V's tiles 64-byte aligned */
    size_t bytes = (size_t)f * sizeof(float);
    if (bf16)
        bytes += (size_t)(j->vpk ? nxi * j->vplane : nxi * j->ci * tmax) * 2;
    if (at) {
        float *p = (float *)at;
        *b = (struct wg_bufs){p + v,  p + m,  p + patch,
                              p + tr, p + tq, bf16 ? (uint16_t *)(p + f) : NULL};
    }
    return (bytes + 63) / 64 * 64;
}

static void wg_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct wg_job *j = ctx;
    struct wg_bufs bf = {0};
    wg_layout(j, j->u16 != NULL, (char *)j->buf[tid], &bf);
    float *v = bf.v, *m = bf.m;
    int nxi = j->m == 4 ? W43_XI : WG_XI;
    for (int64_t t = b; t < e; t++) {
        int64_t img = t / j->nchk, r0 = t % j->nchk * j->rows;
        int64_t nr = j->th - r0 < j->rows ? j->th - r0 : j->rows, T = nr * j->tw;
        float *out = j->out + img * j->co * j->ho * j->wo;
        if (j->m == 4)
            wino43__input_tf(j, img, r0, nr, v, T, bf.patch, bf.tr, bf.v16, bf.tq);
        else if (j->vpk)
            input_tf_packed(j, img, r0, nr, bf.patch, bf.tr, bf.tq, bf.v16);
        else
            wino__input_tf(j, img, r0, nr, v, T, bf.patch, bf.tr, bf.v16, bf.tq);
        if (j->vpk) {
            for (int xi = 0; xi < nxi; xi++)
                cpu_gemm_amx_packed_ab(j->co, T, j->ci, 1.0f, j->u16p + xi * j->u16p_plane,
                                       bf.v16 + xi * j->vplane, 0.0f,
                                       m + xi * (j->co * T + WG_MPAD), T);
        } else if (j->u16p) {
            for (int xi = 0; xi < nxi; xi++)
                cpu_gemm_amx_packed(0, j->co, T, j->ci, 1.0f, j->u16p + xi * j->u16p_plane,
                                    bf.v16 + xi * j->ci * T, T, 0.0f,
                                    m + xi * (j->co * T + WG_MPAD), T);
        } else if (j->u16) {
            for (int xi = 0; xi < nxi; xi++)
                cpu_gemm_bf16_1(0, 0, j->co, T, j->ci, 1.0f, j->u16 + xi * j->co * j->ci, j->ci,
                                bf.v16 + xi * j->ci * T, T, 0.0f,
                                m + xi * (j->co * T + WG_MPAD), T);
        } else {
            for (int xi = 0; xi < nxi; xi++)
                cpu_sgemm(0, 0, j->co, T, j->ci, 1.0f, j->u + xi * j->co * j->ci, j->ci,
                          v + xi * j->ci * T, T, 0.0f, m + xi * (j->co * T + WG_MPAD), T,
                          1);
        }
        const float *mq[W43_XI];
        int64_t mcs[W43_XI];
        for (int xi = 0; xi < nxi; xi++) {
            mq[xi] = m + xi * (j->co * T + WG_MPAD);
            mcs[xi] = T;
        }
        if (j->m == 4)
            wino43__output_tf(j, out, r0, nr, mq, mcs, 0, 0);
        else
            wino__output_tf(j, out, r0, nr, mq, mcs, 0, 0);
    }
}

/*
 * The calling (executor) thread's buffers: U, then one block per pool thread. Kept and
 * grown, not allocated per call: fresh multi-MiB buffers on every convolution were
 * page-faulted in again each time (perf of a 256^2 VAE decode: faults under wg_task at
 * ~4 % of the samples). A mapping of its own (util/alloc's xtry_map: transparent huge
 * pages from 2 MiB): U reaches 105 MB at 1280 channels, and in 4 KiB pages its growth
 * was a quarter of a cold 256^2 txt2img's page faults (perf, wt_task's stores).
 * cpu_wino_release frees them (tensor_cpu_scratch_release, and the thread's exit:
 * cpu_scratch_free_at_exit).
 */
static _Thread_local struct {
    char *p;    /* owned (xtry_map) */
    size_t cap; /* bytes */
} mem;

size_t cpu_wino_release(void)
{
    size_t n = mem.cap;
    if (mem.p)
        xunmap(mem.p, mem.cap);
    mem.p = NULL;
    mem.cap = 0;
    return n;
}

void wino__plan_rows(struct wg_job *j, int64_t n, int64_t per_row)
{
    int nt = tensor__pool_threads();
    /* tile rows per task: V + M near the chunk size, at least two tasks per thread */
    int64_t rows = (int64_t)cpu_wino_chunk_bytes / per_row;
    /* but at least WG_MIN_TILES tiles per task: every task's GEMMs read (and re-pack) all
     * of U, 16 tiles at 640 channels (one tile row at 32^2) ran at 0.65x im2col */
    if (rows * j->tw < WG_MIN_TILES)
        rows = (WG_MIN_TILES + j->tw - 1) / j->tw;
    rows = rows < 1 ? 1 : rows > j->th ? j->th : rows;
    int64_t want = (2 * nt + n - 1) / n; /* tasks per image */
    if ((j->th + rows - 1) / rows < want)
        rows = (j->th + want - 1) / want;
    j->rows = rows < 1 ? 1 : rows;
    j->nchk = (j->th + j->rows - 1) / j->rows;
}

float **wino__set_bufs(struct wg_job *j, char *at, size_t per, float **stack, int nstack)
{
    int nt = tensor__pool_threads();
    float **heap = nt > nstack ? xmalloc((size_t)nt * sizeof(float *)) : NULL;
    j->buf = heap ? heap : stack;
    for (int i = 0; i < nt; i++)
        j->buf[i] = (float *)(at + (size_t)i * per);
    return heap;
}

char *wino__mem_get(size_t bytes)
{
    if (bytes > mem.cap) { /* grown with its pages moved, not faulted in again */
        cpu_scratch_free_at_exit();
        void *p = mem.p;
        if (xmap_grow(&p, &mem.cap, bytes, NULL) < 0)
            return NULL;
        mem.p = p;
    }
    return mem.p;
}

/*
 * F(4,3) only up to this many input channels: its error against a float64 direct conv
 * grows with them (wino43.c's table: 6.3e-6 at 512, 9.9e-6 at 640, over the 1e-5 bound
 * at 1280), F(2,3)'s stays under 2e-6.
 */
#define W43_MAX_CI 512

int cpu_wino_f43 = -1;

int cpu_wino_tile(int64_t ci, int64_t co, int64_t ho, int64_t wo)
{
    if (cpu_wino_f43 < 0) { /* once, on the executor thread */
        const char *e = getenv("LATENTD_WINO");
        cpu_wino_f43 = e && strcmp(e, "f23") == 0 ? 0 : 1;
    }
    if (cpu_wino_f43 == 0 || ci > W43_MAX_CI)
        return 2;
    if (cpu_wino_f43 == 2)
        return 4;
    /* F(4,3) / F(2,3), CPU-seconds per conv, 2 threads, f16 weights, interleaved (load
     * 4.3): 1x512x64^2 1.46x, 1x512x128^2 1.38x, 1x256x256^2 1.43x, 1x128x512^2 1.60x,
     * 2x320x64^2 1.38x, 2x128x64^2 1.26x; but 2x320x32^2 0.91x and 1x512x32^2 0.73x:
     * 64 tiles per image are one or two tasks per thread, each re-reading all of U
     * (36/9 of the weight) for 16 to 32 tiles */
    (void)co;
    return ho * wo >= 64 * 64 ? 4 : 2;
}

/*
 * The tile under bf16. F(4,3) on images of 64^2 output pixels and more, at any channel
 * count: under bf16 the error is the rounding of U and V, amplified by F(4,3)'s
 * transforms ~5-10x over F(2,3)'s (test_tensor_bf16: max |y - ref| / max sum|xw| 1.3e-3
 * to 3.7e-3 against 2.4e-4 to 6.8e-4, ~10x bf16 im2col's, flat in the channel count),
 * not fp32's 1e-5 bound that caps W43_MAX_CI; a full-size SD1.5 512^2 txt2img decoded
 * 40.8 dB PSNR off fp32 with it against 43.5 with F(2,3) (the bound is 35).
 * What it buys on an AVX-512 BF16 CPU (Zen 5, 2 threads, bench_ops --conv 512 --bf16):
 * 320x320 at 64^2 11.8 -> 7.6 ms, 640x640 42.9 -> 28-33 ms, the VAE decode at 512^2
 * 2.24 -> 1.75 s. Smaller images keep F(2,3), as in fp32 (at 32^2 F(4,3) was slower at
 * 640 channels, at 16^2 everywhere). On AMX F(2,3) stays, unmeasured there: its V goes
 * straight into tiles (input_tf_packed, F(2,3) only); F(4,3) would take the plain-V path
 * (wino43__input_tf into v16, cpu_gemm_amx_packed), which handles either tile.
 * LATENTD_WINO=f23 keeps F(2,3) everywhere (comparisons).
 */
int cpu_wino_tile_bf16(int64_t ci, int64_t co, int64_t ho, int64_t wo)
{
    int m = cpu_wino_tile(ci, co, ho, wo); /* also reads LATENTD_WINO, once */
    if (cpu_bf16_amx() || cpu_wino_f43 == 0)
        return 2;
    return m == 4 || ho * wo >= 64 * 64 ? 4 : 2;
}

int cpu_conv2d_winograd(float *out, const float *x, const float *w, const float *bias, int64_t n,
                        int64_t ci, int64_t h, int64_t wd, int64_t co,
                        const struct tensor_conv2d_opts *o)
{
    return cpu_conv2d_winograd_gn(out, x, w, TENSOR_F32, bias, n, ci, h, wd, co, o, NULL, NULL, 0);
}

static int winograd(float *out, const float *x, const void *w, enum tensor_dtype wdt,
                    const float *bias, int64_t n, int64_t ci, int64_t h, int64_t wd, int64_t co,
                    const struct tensor_conv2d_opts *o, const float *na, const float *nb, int silu,
                    int in_up);

int cpu_conv2d_winograd_gn(float *out, const float *x, const void *w, enum tensor_dtype wdt,
                           const float *bias, int64_t n, int64_t ci, int64_t h, int64_t wd,
                           int64_t co, const struct tensor_conv2d_opts *o, const float *na,
                           const float *nb, int silu)
{
    return winograd(out, x, w, wdt, bias, n, ci, h, wd, co, o, na, nb, silu, 1);
}

int cpu_conv2d_winograd_up2x(float *out, const float *x, const void *w, enum tensor_dtype wdt,
                             const float *bias, int64_t n, int64_t ci, int64_t h, int64_t wd,
                             int64_t co)
{
    struct tensor_conv2d_opts o = {1, 1, 1, 1, 1};
    return winograd(out, x, w, wdt, bias, n, ci, 2 * h, 2 * wd, co, &o, NULL, NULL, 0, 2);
}

static int winograd(float *out, const float *x, const void *w, enum tensor_dtype wdt,
                    const float *bias, int64_t n, int64_t ci, int64_t h, int64_t wd, int64_t co,
                    const struct tensor_conv2d_opts *o, const float *na, const float *nb, int silu,
                    int in_up)
{
    int64_t ho, wo;
    tensor_conv2d_out_hw(o, h, wd, 3, 3, &ho, &wo);
    if (o->stride != 1 || ho <= 0 || wo <= 0)
        return -1;
    int nt = tensor__pool_threads();
    int bf16 = cpu_wino_bf16 && tensor_precision_get() == TENSOR_PRECISION_BF16;
    int m = bf16 ? cpu_wino_tile_bf16(ci, co, ho, wo) : cpu_wino_tile(ci, co, ho, wo);
    int nxi = m == 4 ? W43_XI : WG_XI;
    struct wg_job j = {out,
                       x,
                       NULL,
                       bias,
                       NULL,
                       ci,
                       h,
                       wd,
                       co,
                       ho,
                       wo,
                       o->pad_top,
                       o->pad_left,
                       1,
                       (wo + m - 1) / m,
                       (ho + m - 1) / m,
                       0,
                       0,
                       NULL,
                       na,
                       nb,
                       silu,
                       m,
                       NULL,
                       0,
                       0,
                       0,
                       in_up};
    wino__plan_rows(&j, n, nxi * (ci + co) * j.tw * (int64_t)sizeof(float));
    if (bf16 && cpu_bf16_amx() && m == 2 && ci % 32 == 0 && j.tw % 16 == 0) {
        j.vpk = 1;
        j.vplane = (int64_t)cpu_amx_packed_b_elems(j.rows * j.tw, ci);
    }

    /* U: f32, or bf16 (half the bytes), and on AMX U's planes packed for its tiles (each
     * chunk's GEMMs would pack them again: perf had that at 17 % of a 512^2 bf16 step);
     * per thread: wg_layout's block */
    size_t ub = ((size_t)(nxi * co * ci) * (bf16 ? 2 : sizeof(float)) + 63) / 64 * 64;
    int amx = bf16 && cpu_bf16_amx();
    int64_t pplane = amx ? (int64_t)cpu_amx_packed_elems(co, ci) : 0;
    size_t ub0 = ub;
    ub += (size_t)(nxi * pplane) * 2;
    size_t per = wg_layout(&j, bf16, NULL, NULL);
    char *base = wino__mem_get(ub + (size_t)nt * per);
    if (!base)
        return -1;
    float *u = (float *)base;
    float *bufs[64], **heap = wino__set_bufs(&j, base + ub, per, bufs, 64);
    struct wt_job wj = {bf16 ? NULL : u, bf16 ? (uint16_t *)u : NULL, w, wdt, co, ci, m};
    tensor__pool_for(co, wt_task, &wj);
    j.u = bf16 ? NULL : u;
    j.u16 = bf16 ? (uint16_t *)u : NULL;
    if (amx) {
        struct pk_job pk = {(uint16_t *)(base + ub0), j.u16, co, ci, pplane};
        tensor__pool_for(nxi, pk_task, &pk);
        j.u16p = pk.dst;
        j.u16p_plane = pplane;
    }
    cpu_gemm_pool_enter();
    tensor__pool_for(n * j.nchk, wg_task, &j);
    cpu_gemm_pool_leave();
    xfree(heap);
    return 0;
}
