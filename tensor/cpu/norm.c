/*
 * norm.c — GroupNorm and LayerNorm on contiguous f32.
 *
 * Statistics: one pass of shifted sums (shift = the first element of the
 * group/row, which keeps the variance accurate when |mean| >> std), lanes
 * accumulated in f32 and flushed to double (sd15.md §8.3: f32 or better).
 * Variance is biased (divide by the count), as PyTorch's norms do.
 */
#include <math.h>

#include "../tensor_impl.h"

struct gn_job {
    float *y;
    const float *x;
    int64_t c, hw;
    int groups;
    const float *gamma, *beta;
    float eps;
    int silu;
};

static void gn_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct gn_job *j = ctx;
    int64_t cg = j->c / j->groups; /* channels per group */
    int64_t cnt = cg * j->hw;
    for (int64_t ng = b; ng < e; ng++) {
        int64_t n = ng / j->groups, g = ng % j->groups;
        const float *x = j->x + (n * j->c + g * cg) * j->hw;
        float *y = j->y + (n * j->c + g * cg) * j->hw;
        double s, q;
        float shift = x[0];
        cpu_vec_moments(x, cnt, shift, &s, &q);
        double mean = s / (double)cnt;
        double var = q / (double)cnt - mean * mean;
        if (var < 0)
            var = 0;
        float rstd = (float)(1.0 / sqrt(var + (double)j->eps));
        float m = (float)(mean + shift);
        for (int64_t ci = 0; ci < cg; ci++) {
            int64_t c = g * cg + ci;
            float ga = j->gamma ? j->gamma[c] : 1.0f, be = j->beta ? j->beta[c] : 0.0f;
            float a = rstd * ga;
            cpu_vec_affine(y + ci * j->hw, x + ci * j->hw, j->hw, a, be - m * a, j->silu);
        }
    }
}

void cpu_group_norm(float *y, const float *x, int64_t n, int64_t c, int64_t hw, int groups,
                    const float *gamma, const float *beta, float eps, int silu)
{
    struct gn_job j = {y, x, c, hw, groups, gamma, beta, eps, silu};
    tensor__pool_for(n * groups, gn_task, &j);
}

struct ln_job {
    float *y;
    const float *x;
    int64_t c;
    const float *gamma, *beta;
    float eps;
};

static void ln_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct ln_job *j = ctx;
    for (int64_t r = b; r < e; r++) {
        const float *x = j->x + r * j->c;
        double s, q;
        float shift = x[0];
        cpu_vec_moments(x, j->c, shift, &s, &q);
        double mean = s / (double)j->c;
        double var = q / (double)j->c - mean * mean;
        if (var < 0)
            var = 0;
        float rstd = (float)(1.0 / sqrt(var + (double)j->eps));
        cpu_vec_ln_apply(j->y + r * j->c, x, j->c, (float)(mean + shift), rstd, j->gamma,
                         j->beta);
    }
}

void cpu_layer_norm(float *y, const float *x, int64_t rows, int64_t c, const float *gamma,
                    const float *beta, float eps)
{
    struct ln_job j = {y, x, c, gamma, beta, eps};
    tensor__pool_for(rows, ln_task, &j);
}
