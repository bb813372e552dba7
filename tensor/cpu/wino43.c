/*
 * wino43.c — the transforms of Winograd F(4x4, 3x3), in fp32 (winograd.c runs the job:
 * weights, tasks, buffers and GEMMs are shared with F(2x2, 3x3); under bf16 V is rounded
 * row by row as the input transform writes it).
 *
 * Each 4x4 output tile comes from a 6x6 input patch: 36 GEMM products per tile and
 * channel pair instead of F(2,3)'s 64 for the same 16 pixels (144 direct), and 36/16 of
 * the tiles' input transform for a quarter of the tiles.
 *
 * Points: 0, -1, 1, 1/2, -2 and infinity, the set Barabasz et al. ("Error analysis and
 * improving the accuracy of Winograd convolution for deep neural networks", 2020) found
 * most accurate for F(4,3). Measured (float32 transforms and a K-sequential float32
 * GEMM, max |err| / max |ref| against a float64 direct conv, 2x16^2 images, 32 output
 * channels, worst of 3 seeds; /tmp harness, not committed):
 *   ci          128     256     320     512     640     1280
 *   0,+-1,+-2   6.9e-6  -       8.0e-6  -       2.0e-5  1.9e-5   (the textbook set)
 *   0,+-1,+-1/2 7.7e-6  -       8.8e-6  -       1.7e-5  2.7e-5
 *   this set    3.5e-6  5.2e-6  5.7e-6  6.3e-6  9.9e-6  1.2e-5
 *   F(2,3)      4.6e-7  -       6.6e-7  -       1.1e-6  1.6e-6
 * (The K-sequential GEMM is the pessimistic model: it gives F(2,3) 1.6e-6 at 1280, as
 * measured with the real sgemm; test_tensor_winograd's F(4,3) cases with the real sgemm
 * read 3.3e-6 at 128, 4.2e-6 at 256, 5.6e-6 at 320, 3.3e-6 at 512 channels.)
 * The bound is 1e-5 (pixels within 1/255 of ComfyUI's), so winograd.c takes F(4,3) only
 * up to 512 input channels, where it keeps a margin (<= 7e-6); test_tensor_winograd
 * checks it there against its float64 direct conv.
 *
 *   B^T = [1 -3/2 -2  3/2  1   0]   G = [  1      0     0  ]   A^T = [1  1 1  1    1  0]
 *         [0  1  -5/2 1/2  1   0]       [-1/3   1/3  -1/3 ]         [0 -1 1 1/2  -2  0]
 *         [0 -1   1/2 5/2  1   0]       [ 1/3   1/3   1/3 ]         [0  1 1 1/4   4  0]
 *         [0 -2  -1   2    1   0]       [-16/15 -8/15 -4/15]        [0 -1 1 1/8  -8  1]
 *         [0  1/2 -1 -1/2  1   0]       [ 1/15 -2/15  4/15]
 *         [0  1  -3/2 -2  3/2  1]       [  0      0     1  ]
 * B^T and A^T are applied as adds and multiplies by powers of two (exact, so an FMA
 * contraction gives the same bits and the AVX-512 and AVX2 loops match these); G's
 * thirds and fifteenths are not exact in float, so U is computed in double and rounded
 * once.
 *
 * Threads: any (pure functions over the job's inputs and the caller's buffers).
 */
#include "gemm_bf16.h"
#include "winograd_impl.h"

/* d[0..5] (stride ds) -> B^T d into v[0..5] (stride vs) */
static inline void bt6(const float *d, int64_t ds, float *v, int64_t vs)
{
    float d0 = d[0], d1 = d[ds], d2 = d[2 * ds], d3 = d[3 * ds], d4 = d[4 * ds], d5 = d[5 * ds];
    float e13 = d3 - d1, e42 = d4 - d2;
    v[0] = ((d0 + d4) - 2.0f * d2) + (e13 + 0.5f * e13);
    v[vs] = ((d1 + d4) - 2.0f * d2) + 0.5f * (d3 - d2);
    v[2 * vs] = ((d4 - d1) + 2.0f * d3) + 0.5f * (d3 + d2);
    v[3 * vs] = e42 + 2.0f * e13;
    v[4 * vs] = e42 - 0.5f * e13;
    v[5 * vs] = ((d1 + d5) - 2.0f * d3) + (e42 + 0.5f * e42);
}

/* m[0..5] (stride ms) -> A^T m into y[0..3] */
static inline void at6(const float *m, int64_t ms, float y[4])
{
    float m0 = m[0], m1 = m[ms], m2 = m[2 * ms], m3 = m[3 * ms], m4 = m[4 * ms], m5 = m[5 * ms];
    float a = m1 + m2, b = m2 - m1;
    y[0] = ((m0 + a) + m3) + m4;
    y[1] = (b + 0.5f * m3) - 2.0f * m4;
    y[2] = (a + 0.25f * m3) + 4.0f * m4;
    y[3] = ((b + 0.125f * m3) - 8.0f * m4) + m5;
}

/* G (a, b, c), in double: G's rows 1..4 have thirds and fifteenths */
static inline void g6(double a, double b, double c, double r[6])
{
    double p = a + c;
    r[0] = a;
    r[1] = (b - p) * (1.0 / 3);
    r[2] = (p + b) * (1.0 / 3);
    r[3] = ((4 * a + 2 * b) + c) * (-4.0 / 15);
    r[4] = ((a + 4 * c) - 2 * b) * (1.0 / 15);
    r[5] = c;
}

static void tf_weight(const float g[9], float *u, int64_t stride)
{
    double t[3][6]; /* G g, column k of g to t[k] */
    for (int k = 0; k < 3; k++)
        g6(g[k], g[3 + k], g[6 + k], t[k]);
    for (int a = 0; a < 6; a++) { /* (G g) G^T: row a of G g, times G^T */
        double r[6];
        g6(t[0][a], t[1][a], t[2][a], r);
        for (int b = 0; b < 6; b++)
            u[(6 * a + b) * stride] = (float)r[b];
    }
}

void wino43__tf_weights(const float *g, float *u, int64_t stride, int64_t n)
{
    int vec = wino__vec();
    int64_t i0 = vec == 16  ? wino43__tf_weights_avx512(g, u, stride, n)
                 : vec == 8 ? wino43__tf_weights_avx2(g, u, stride, n)
                            : 0;
    for (int64_t i = i0; i < n; i++)
        tf_weight(g + 9 * i, u + i, stride);
}

void wino43__input_tf(const struct wg_job *j, int64_t img, int64_t r0, int64_t nr, float *v,
                      int64_t T, float *patch, float *tr, uint16_t *v16, float *tq)
{
    int64_t pw = 4 * j->tw + 2, prow = 4 * nr + 2, plane = j->ci * T;
    float *t[6];
    for (int k = 0; k < 6; k++)
        t[k] = tr + k * pw;
    int vec = wino__vec(); /* 16 AVX-512, 8 AVX2, 0 scalar */
    for (int64_t c = 0; c < j->ci; c++) {
        wino__patch_fill(j, img, c, 4 * r0 - j->pt, prow, pw, patch);
        for (int64_t r = 0; r < nr; r++) {
            const float *p[6];
            for (int k = 0; k < 6; k++)
                p[k] = patch + (4 * r + k) * pw;
            int64_t i0 = vec == 16  ? wino43__in_rows_avx512(p, t, pw)
                         : vec == 8 ? wino43__in_rows_avx2(p, t, pw)
                                    : 0;
            for (int64_t i = i0; i < pw; i++) /* B^T down the columns: t[k][i] */
                bt6(p[0] + i, pw, t[0] + i, pw);
            for (int k = 0; k < 6; k++) { /* then along each row: planes 6 k .. 6 k + 5 */
                float *vk[6];
                for (int q = 0; q < 6; q++)
                    vk[q] = v16 ? tq + q * j->tw : v + (6 * k + q) * plane + c * T + r * j->tw;
                int64_t tx0 = vec == 16  ? wino43__in_cols_avx512(t[k], vk, j->tw)
                              : vec == 8 ? wino43__in_cols_avx2(t[k], vk, j->tw)
                                         : 0;
                for (int64_t tx = tx0; tx < j->tw; tx++) {
                    float o[6];
                    bt6(t[k] + 4 * tx, 1, o, 1);
                    for (int q = 0; q < 6; q++)
                        vk[q][tx] = o[q];
                }
                for (int q = 0; v16 && q < 6; q++)
                    cpu_bf16_round(v16 + (6 * k + q) * plane + c * T + r * j->tw, vk[q], j->tw);
            }
        }
    }
}

void wino43__output_tf(const struct wg_job *j, float *out, int64_t r0, int64_t nr,
                       const float *const mq[W43_XI], const int64_t mcs[W43_XI], int a, int b)
{
    int64_t full = j->wo / 4, up = j->up;
    int64_t ow = up * j->wo, oh = up * j->ho; /* out's width and height */
    int vec = wino__vec();
    for (int64_t o = 0; o < j->co; o++) {
        float bv = j->bias ? j->bias[o] : 0.0f;
        for (int64_t r = 0; r < nr; r++) {
            int64_t oy = 4 * (r0 + r), rt = r * j->tw;
            float *y[4];
            for (int i = 0; i < 4; i++)
                y[i] = oy + i < j->ho ? out + (o * oh + up * (oy + i) + a) * ow + b : NULL;
            const float *pq[W43_XI];
            for (int q = 0; q < W43_XI; q++)
                pq[q] = mq[q] + o * mcs[q] + rt;
            int64_t tx0 = vec == 16  ? wino43__out_row_avx512(pq, bv, y, full, up)
                          : vec == 8 ? wino43__out_row_avx2(pq, bv, y, full, up, b)
                                     : 0;
            for (int64_t tx = tx0; tx < j->tw; tx++) {
                float mm[W43_XI], s[4][6], px[4];
                for (int q = 0; q < W43_XI; q++)
                    mm[q] = pq[q][tx];
                for (int c = 0; c < 6; c++) { /* A^T down each column of points */
                    float col[4];
                    at6(mm + c, 6, col);
                    for (int i = 0; i < 4; i++)
                        s[i][c] = col[i];
                }
                int64_t nx = j->wo - 4 * tx < 4 ? j->wo - 4 * tx : 4;
                for (int i = 0; i < 4; i++) {
                    if (!y[i])
                        continue;
                    at6(s[i], 1, px);
                    for (int64_t k = 0; k < nx; k++)
                        y[i][up * (4 * tx + k)] = px[k] + bv;
                }
            }
        }
    }
}
