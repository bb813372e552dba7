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
    float *ca, *cb; /* set: cpu_group_norm_coefs (no y) */
};

/* Mean and 1 / sqrt(var + eps) of cnt floats (f32 data, double sums about x[0]). */
static void gn_stats(const float *x, int64_t cnt, float eps, float *mean, float *rstd)
{
    double s, q;
    float shift = x[0];
    cpu_vec_moments(x, cnt, shift, &s, &q);
    double m = s / (double)cnt;
    double var = q / (double)cnt - m * m;
    if (var < 0)
        var = 0;
    *rstd = (float)(1.0 / sqrt(var + (double)eps));
    *mean = (float)(m + shift);
}

/* Tasks are (image, group): the group's statistics, then per channel y = x * a + b
 * (with a, b the channel's affine), or only a and b into the job's arrays (coefs). */
static void gn_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct gn_job *j = ctx;
    int64_t cg = j->c / j->groups; /* channels per group */
    for (int64_t ng = b; ng < e; ng++) {
        int64_t n = ng / j->groups, g = ng % j->groups;
        const float *x = j->x + (n * j->c + g * cg) * j->hw;
        float m, rstd;
        gn_stats(x, cg * j->hw, j->eps, &m, &rstd);
        for (int64_t ci = 0; ci < cg; ci++) {
            int64_t c = g * cg + ci;
            float ga = j->gamma ? j->gamma[c] : 1.0f, be = j->beta ? j->beta[c] : 0.0f;
            float a = rstd * ga;
            if (j->ca) {
                j->ca[n * j->c + c] = a;
                j->cb[n * j->c + c] = be - m * a;
            } else {
                cpu_vec_affine(j->y + (n * j->c + c) * j->hw, x + ci * j->hw, j->hw, a,
                               be - m * a, j->silu);
            }
        }
    }
}

void cpu_group_norm(float *y, const float *x, int64_t n, int64_t c, int64_t hw, int groups,
                    const float *gamma, const float *beta, float eps, int silu)
{
    struct gn_job j = {y, x, c, hw, groups, gamma, beta, eps, silu, NULL, NULL};
    tensor__pool_for(n * groups, gn_task, &j);
}

void cpu_group_norm_coefs(float *a, float *b, const float *x, int64_t n, int64_t c, int64_t hw,
                          int groups, const float *gamma, const float *beta, float eps)
{
    struct gn_job j = {NULL, x, c, hw, groups, gamma, beta, eps, 0, a, b};
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
