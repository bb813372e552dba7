/*
 * samplers_heunpp2 — heunpp2 (ComfyUI's sample_heunpp2, from
 * sd-webui-samplers-scheduler): Heun's method whose correction also looks one
 * sigma further ahead, with weights from the sigmas over the first one. The
 * last step is euler, the one before it Heun's. KSampler runs it with s_churn
 * = 0, so its per-step randn (from torch's global generator, scaled by a churn
 * of 0) never reaches the state and is not drawn here.
 */
#include "samplers_impl.h"

#include "alloc.h"

static int run(struct sampling__ctx *c, float *x, float *den, float *d, float *x2, float *d2,
               float *d3)
{
    const float *sig = c->run->sigmas;
    const int ns = c->run->n_sigmas;
    const float s_end = sig[ns - 1];
    size_t n = c->n;
    int rc;
    for (int i = 0; i < ns - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        sampling__to_d(x, den, s, d, n);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        float dt = sn - s;
        if (sn == s_end) { /* euler */
            for (size_t k = 0; k < n; k++)
                x[k] = x[k] + d[k] * dt;
            continue;
        }
        for (size_t k = 0; k < n; k++)
            x2[k] = x[k] + d[k] * dt;
        if ((rc = sampling__model(c, x2, sn, den)) < 0)
            return rc;
        sampling__to_d(x2, den, sn, d2, n);
        float s2 = sig[i + 2];
        if (s2 == s_end) { /* Heun's method, weights σn / (2·σ0) */
            float w = 2.0f * sig[0];
            float w2 = sn / w, w1 = 1.0f - w2;
            for (size_t k = 0; k < n; k++) {
                float dp = d[k] * w1;
                dp = dp + d2[k] * w2;
                x[k] = x[k] + dp * dt;
            }
            continue;
        }
        /* Heun++: a third point at σ_{i+2}, weights σ / (3·σ0). */
        float dt2 = s2 - sn;
        for (size_t k = 0; k < n; k++)
            x2[k] = x2[k] + d2[k] * dt2; /* x_3 (x_2 is not needed again) */
        if ((rc = sampling__model(c, x2, s2, den)) < 0)
            return rc;
        sampling__to_d(x2, den, s2, d3, n);
        float w = 3.0f * sig[0];
        float w2 = sn / w, w3 = s2 / w;
        float w1 = 1.0f - w2;
        w1 = w1 - w3;
        for (size_t k = 0; k < n; k++) {
            float dp = w1 * d[k];
            dp = dp + w2 * d2[k];
            dp = dp + w3 * d3[k];
            x[k] = x[k] + dp * dt;
        }
    }
    return 0;
}

int sampling__run_heunpp2(struct sampling__ctx *c, float *x)
{
    float *buf = NULL;
    int rc = sampling__scratch(c, 5, &buf);
    if (rc < 0)
        return rc;
    size_t n = c->n;
    rc = run(c, x, buf, buf + n, buf + 2 * n, buf + 3 * n, buf + 4 * n);
    xfree(buf);
    return rc;
}
