/*
 * guidance — RescaleCFG, DualCFG and PerpNeg mixes (see sampling_guide.h).
 */
#include "sampling_guide.h"

#include <math.h>

#include "alloc.h"
#include "sampling.h"

/* torch.std(v, unbiased): accumulated in double, rounded to float32 once. */
static float std_unbiased(const float *v, size_t n)
{
    double mean = 0, ss = 0;
    for (size_t i = 0; i < n; i++)
        mean += v[i];
    mean /= (double)n;
    for (size_t i = 0; i < n; i++)
        ss += (v[i] - mean) * (v[i] - mean);
    return (float)sqrt(ss / (double)(n - 1));
}

void sampling_cfg_rescale(const float *x, float sigma, const float *cond, const float *uncond,
                          double cfg, double multiplier, int batch, size_t per, float *out)
{
    float s1 = sigma * sigma + 1.0f, sq = sqrtf(sigma * sigma + 1.0f);
    float scale = (float)cfg, m = (float)multiplier, m1 = (float)(1.0 - multiplier);
    float *vc = xmalloc(per * sizeof *vc);
    for (int b = 0; b < batch; b++) {
        const float *xi = x + b * per, *c = cond + b * per, *u = uncond + b * per;
        float *o = out + b * per;
        /* args["cond"] is x − cond_pred, so the v value reads x − (x − (x − cond_pred)). */
        for (size_t i = 0; i < per; i++) {
            float xs = xi[i] / s1;
            float vcond = ((xs - (xi[i] - (xi[i] - c[i]))) * sq) / sigma;
            float vun = ((xs - (xi[i] - (xi[i] - u[i]))) * sq) / sigma;
            vc[i] = vcond;
            o[i] = vun + scale * (vcond - vun); /* x_cfg, kept in out for now */
        }
        float ratio = std_unbiased(vc, per) / std_unbiased(o, per);
        for (size_t i = 0; i < per; i++) {
            float xs = xi[i] / s1;
            float fin = m * (o[i] * ratio) + m1 * o[i];
            float r = xi[i] - (xs - fin * sigma / sq);
            o[i] = xi[i] - r; /* cfg_function returns x − sampler_cfg_function(args) */
        }
    }
    xfree(vc);
}

void sampling_cfg_apply(const struct sampling_cfg_fn *fn, const float *x, float sigma,
                        const float *cond, const float *uncond, double cfg, int batch, size_t per,
                        float *out)
{
    if (fn && fn->rescale)
        sampling_cfg_rescale(x, sigma, cond, uncond, cfg, fn->multiplier, batch, per, out);
    else
        sampling_cfg_combine(cond, uncond, cfg, out, (size_t)batch * per);
}

void sampling_dual_cfg(const struct sampling_cfg_fn *fn, const float *x, float sigma,
                       const float *pos, const float *middle, const float *neg, double cfg_conds,
                       double cfg_cond2_negative, int nested, int batch, size_t per, float *out)
{
    size_t n = (size_t)batch * per;
    if (nested) {
        float *text = xmalloc(n * sizeof *text);
        sampling_cfg_apply(fn, x, sigma, pos, middle, cfg_conds, batch, per, text);
        /* out[0] + cfg2·(pred_text − out[0]): CFG's arithmetic with the negative as base */
        sampling_cfg_combine(text, neg, cfg_cond2_negative, out, n);
        xfree(text);
        return;
    }
    sampling_cfg_apply(fn, x, sigma, middle, neg, cfg_cond2_negative, batch, per, out);
    float c1 = (float)cfg_conds;
    for (size_t i = 0; i < n; i++)
        out[i] = out[i] + (pos[i] - middle[i]) * c1;
}

void sampling_perp_neg(const float *pos, const float *neg, const float *empty, double cfg,
                       double neg_scale, size_t n, float *out)
{
    double dot = 0, sq = 0;
    for (size_t i = 0; i < n; i++) {
        float p = pos[i] - empty[i], q = neg[i] - empty[i];
        dot += (float)(q * p);
        sq += (double)p * p;
    }
    float norm = (float)sqrt(sq);
    float coef = (float)dot / (norm * norm);
    float ns = (float)neg_scale, c = (float)cfg;
    for (size_t i = 0; i < n; i++) {
        float p = pos[i] - empty[i], q = neg[i] - empty[i];
        float perp = q - coef * p;
        out[i] = empty[i] + c * (p - perp * ns);
    }
}
