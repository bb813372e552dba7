/*
 * elem.c — flat elementwise kernels on contiguous f32 (sampler updates).
 */
#include "../tensor_impl.h"

struct lc_job {
    float *y;
    int n_in;
    const float *coef;
    const float *const *in;
};

static void lc_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct lc_job *j = ctx;
    float *y = j->y;
    float c0 = j->coef[0];
    const float *x0 = j->in[0];
    /* The first input initialises y, so y may alias any input (read before write,
     * element by element). */
    for (int64_t i = b; i < e; i++) {
        float acc = c0 * x0[i];
        for (int k = 1; k < j->n_in; k++)
            acc += j->coef[k] * j->in[k][i];
        y[i] = acc;
    }
}

void cpu_lincomb(float *y, int n_in, const float *coef, const float *const *in, int64_t n)
{
    struct lc_job j = {y, n_in, coef, in};
    if (n < 16384)
        lc_task(&j, 0, n, 0);
    else
        tensor__pool_for(n, lc_task, &j);
}
