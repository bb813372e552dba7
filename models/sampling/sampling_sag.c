/*
 * Self-Attention Guidance's blur map and mix (see sampling_sag.h).
 */
#include "sampling_sag.h"

#include <math.h>
#include <string.h>

#include "alloc.h"
#include "pynum.h"

#define SAG_K 9 /* gaussian_blur_2d's kernel_size */

int sampling_sag_applies(int h, int w)
{
    return (h < w ? h : w) > 4;
}

/* The mask's rows for `tokens` at an h x w latent, or 0 when the search finds none. */
static int64_t mask_rows(int64_t tokens, int h, int w)
{
    int64_t x = (int64_t)pynum_round_half_even(sqrt(((double)h / (double)w) * (double)tokens));
    int64_t lim = (int64_t)floor(sqrt((double)tokens) / 2.0);
    for (int64_t i = 0; i < lim; i++) {
        int64_t cand[2] = {x + i, x - i > 1 ? x - i : 1};
        for (int k = 0; k < 2; k++)
            if (cand[k] > 0 && tokens % cand[k] == 0)
                return cand[k];
    }
    return 0;
}

/* gaussian_blur_2d's 1-D kernel in float32: pdf = exp(−0.5·(x/sigma)²), pdf/sum(pdf). */
static void blur_kernel(double sigma, float *k)
{
    float s = (float)sigma, sum = 0.0f;
    for (int i = 0; i < SAG_K; i++) {
        float x = (float)(i - (SAG_K - 1) / 2) / s;
        k[i] = expf(-0.5f * (x * x));
        sum += k[i];
    }
    for (int i = 0; i < SAG_K; i++)
        k[i] = k[i] / sum;
}

/* F.pad(mode="reflect") index: -1 -> 1, n -> n − 2. */
static int reflect(int i, int n)
{
    if (i < 0)
        return -i;
    if (i >= n)
        return 2 * (n - 1) - i;
    return i;
}

/* One plane [h, w] blurred with the 9x9 kernel kx[i]·kx[j] (float32 products). */
static void blur_plane(const float *src, int h, int w, const float *k, float *dst)
{
    const int r = (SAG_K - 1) / 2;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double acc = 0.0;
            for (int i = 0; i < SAG_K; i++) {
                const float *row = src + (size_t)reflect(y + i - r, h) * w;
                for (int j = 0; j < SAG_K; j++)
                    acc += (double)(k[i] * k[j]) * row[reflect(x + j - r, w)];
            }
            dst[(size_t)y * w + x] = (float)acc;
        }
}

int sampling_sag_blur_map(const float *x0, int b, int c, int h, int w, const double *colsum,
                          int64_t tokens, double sigma, double threshold, float *out,
                          struct err *e)
{
    int64_t rows = mask_rows(tokens, h, w);
    if (rows == 0)
        return err_set(e, ERR_INVALID,
                       "SelfAttentionGuidance: the middle block's %lld attention tokens have no "
                       "grid for a %dx%d latent",
                       (long long)tokens, h, w);
    int64_t cols = tokens / rows;
    float k[SAG_K];
    blur_kernel(sigma, k);
    /* F.interpolate(mode="nearest"): source index floor(dst · in/out), scale in float */
    float sy = (float)rows / (float)h, sx = (float)cols / (float)w;
    size_t plane = (size_t)h * w;
    float *mask = xmalloc(plane * sizeof *mask);
    for (int s = 0; s < b; s++) {
        const double *cs = colsum + (size_t)s * tokens;
        for (int y = 0; y < h; y++) {
            int64_t my = (int64_t)floorf((float)y * sy);
            my = my < rows - 1 ? my : rows - 1;
            for (int x = 0; x < w; x++) {
                int64_t mx = (int64_t)floorf((float)x * sx);
                mx = mx < cols - 1 ? mx : cols - 1;
                mask[(size_t)y * w + x] = cs[my * cols + mx] > threshold ? 1.0f : 0.0f;
            }
        }
        for (int ch = 0; ch < c; ch++) {
            const float *src = x0 + ((size_t)s * c + ch) * plane;
            float *dst = out + ((size_t)s * c + ch) * plane;
            blur_plane(src, h, w, k, dst);
            for (size_t p = 0; p < plane; p++) /* blurred * mask + x0 * (1 - mask) */
                dst[p] = dst[p] * mask[p] + src[p] * (1.0f - mask[p]);
        }
    }
    xfree(mask);
    return 0;
}

void sampling_sag_noised(const float *degraded, const float *x, const float *uncond_x0, size_t n,
                         float *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = (degraded[i] + x[i]) - uncond_x0[i];
}

void sampling_sag_apply(float *cfg_result, const float *degraded, const float *sag_x0,
                        double scale, size_t n)
{
    float s = (float)scale;
    for (size_t i = 0; i < n; i++)
        cfg_result[i] = cfg_result[i] + (degraded[i] - sag_x0[i]) * s;
}
