/*
 * samplers_multistep — the linear multistep samplers on the Karras ODE
 * dx/dσ = (x − D)/σ that ComfyUI takes from zju-pi's diff-solvers: ipndm
 * (improved PNDM: fixed Adams–Bashforth weights up to order 4), ipndm_v (the
 * weights for variable steps) and deis (DEIS "tab": weights integrated over
 * the VP time of EDM's schedule). Each keeps the last three derivatives; a
 * step to σ = 0 is the model's x0 (ipndm, ipndm_v) or an euler step (deis).
 */
#include "samplers_impl.h"

#include <math.h>
#include <string.h>

#include "alloc.h"

#define MS_HISTORY 3 /* max_order − 1 derivatives kept (max_order 4; deis uses 3) */

struct hist {
    float *b[MS_HISTORY]; /* buffer_model, oldest first */
    int have;
    int cap; /* max_order − 1 */
};

/* Append d (copied) to the history, dropping the oldest when full. */
static void hist_push(struct hist *h, const float *d, size_t n)
{
    if (h->have == h->cap) {
        float *oldest = h->b[0];
        for (int k = 0; k + 1 < h->cap; k++)
            h->b[k] = h->b[k + 1];
        h->b[h->cap - 1] = oldest;
        h->have--;
    }
    memcpy(h->b[h->have++], d, n * sizeof *d);
}

/* buffer_model[-j] (j = 1: the newest). */
static const float *hist_back(const struct hist *h, int j)
{
    return h->b[h->have - j];
}

/* ipndm's fixed weights: x + dt·(Σ w_j·d_j)/den, the sum in the source's order. */
static void ipndm_update(float *x, const float *d, const struct hist *h, int order, float dt,
                         size_t n)
{
    for (size_t k = 0; k < n; k++) {
        float acc;
        if (order == 2) {
            acc = 3.0f * d[k] - hist_back(h, 1)[k];
            x[k] = x[k] + dt * acc / 2.0f;
        } else if (order == 3) {
            acc = 23.0f * d[k] - 16.0f * hist_back(h, 1)[k];
            acc = acc + 5.0f * hist_back(h, 2)[k];
            x[k] = x[k] + dt * acc / 12.0f;
        } else {
            acc = 55.0f * d[k] - 59.0f * hist_back(h, 1)[k];
            acc = acc + 37.0f * hist_back(h, 2)[k];
            acc = acc - 9.0f * hist_back(h, 3)[k];
            x[k] = x[k] + dt * acc / 24.0f;
        }
    }
}

/*
 * ipndm_v's weights for steps h_n (this one), h_n_1, h_n_2, h_n_3 (the previous
 * ones), as 0-d float32 tensors in the source's evaluation order.
 */
static void ipndm_v_coeffs(const float *t, int i, int order, float *c)
{
    float hn = t[i + 1] - t[i], h1 = t[i] - t[i - 1];
    float r = hn / h1;
    c[0] = (2.0f + r) / 2.0f;
    c[1] = -r / 2.0f;
    if (order == 2)
        return;
    float h2 = t[i - 1] - t[i - 2];
    float a = hn / (3.0f * (hn + h1));
    a = a * (hn * (hn + h1));
    a = a / (h1 * (h1 + h2));
    float temp1 = (1.0f - a) / 2.0f;
    float q = h1 / h2;
    if (order == 3) {
        c[0] = c[0] + temp1;
        c[1] = c[1] - (1.0f + q) * temp1;
        c[2] = temp1 * h1 / h2;
        return;
    }
    float h3 = t[i - 2] - t[i - 3];
    float p = (1.0f - hn / (3.0f * (hn + h1))) / 2.0f;
    float pb = (1.0f - hn / (2.0f * (hn + h1))) * hn;
    pb = pb / (6.0f * (hn + h1 + h2));
    float num = (hn * (hn + h1)) * (hn + h1 + h2);
    float den = (h1 * (h1 + h2)) * (h1 + h2 + h3);
    float temp2 = ((p + pb) * num) / den;
    float xx = (h1 * (h1 + h2)) / (h2 * (h2 + h3));
    c[0] = c[0] + temp1;
    c[0] = c[0] + temp2;
    c[1] = c[1] - (1.0f + q) * temp1;
    c[1] = c[1] - ((1.0f + q) + xx) * temp2;
    c[2] = temp1 * h1 / h2 + (q + xx * (1.0f + h2 / h3)) * temp2;
    c[3] = (-temp2 * xx) * h1 / h2;
}

/* x + dt·(c0·d + c1·b1 + ...), or (deis, dt = 0) x + c0·d + c1·b1 + ... */
static void weighted_update(float *x, const float *d, const struct hist *h, int order,
                            const float *c, float dt, int deis, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (deis) {
            float v = x[k] + c[0] * d[k];
            for (int j = 1; j < order; j++)
                v = v + c[j] * hist_back(h, j)[k];
            x[k] = v;
        } else {
            float acc = c[0] * d[k];
            for (int j = 1; j < order; j++)
                acc = acc + c[j] * hist_back(h, j)[k];
            x[k] = x[k] + dt * acc;
        }
    }
}

/*
 * DEIS "tab" coefficients (gits-main's get_deis_coeff_list, max_order 3): EDM's
 * σ ↦ VP time t with β from σ_min = 0.002, σ_max = 80, ε_s = 1e-3 (float32, as
 * torch computes them), and per step the integral of −½·(d log α/dτ)/sqrt(α(1 − α))
 * times the Lagrange basis over the step's times, as the source's Riemann sum:
 * N = 10000 points of torch.linspace(t, t_next, N), each weighted (t_next − t)/N.
 * Summed in double and rounded (torch's float32 sum order is its own).
 */
#define DEIS_N 10000

static void deis_times(const float *sig, int ns, float *t, float *beta0, float *beta1)
{
    float lmin = logf(0.002f * 0.002f + 1.0f), lmax = logf(80.0f * 80.0f + 1.0f);
    float bd = lmin / 1e-3f - lmax;
    bd = 2.0f * bd;
    bd = bd / (float)(1e-3 - 1.0);
    float bmin = lmax - 0.5f * bd;
    float two_bd = 2.0f * bd, bmin2 = bmin * bmin;
    for (int i = 0; i < ns; i++) {
        float l = logf(sig[i] * sig[i] + 1.0f);
        float v = sqrtf(bmin2 + two_bd * l);
        t[i] = (v - bmin) / bd;
    }
    *beta0 = bmin;
    *beta1 = bd + bmin;
}

static void deis_coeffs(const float *t, int i, int order, float beta0, float beta1, float *c)
{
    double a = t[i], b = t[i + 1], db = (double)beta1 - beta0;
    double step = (b - a) / (DEIS_N - 1), dtau = (b - a) / DEIS_N;
    double sum[MS_HISTORY] = {0};
    for (int q = 0; q < DEIS_N; q++) {
        double tau = q < DEIS_N / 2 ? a + step * q : b - step * (DEIS_N - 1 - q);
        double alpha = exp(-0.5 * tau * tau * db - tau * beta0);
        double dlog = -tau * db - beta0;
        double f = -0.5 * dlog / sqrt(alpha * (1.0 - alpha));
        for (int j = 0; j < order; j++) {
            double poly = 1.0;
            for (int k = 0; k < order; k++) {
                if (k != j)
                    poly *= (tau - t[i - k]) / ((double)t[i - j] - t[i - k]);
            }
            sum[j] += f * poly;
        }
    }
    for (int j = 0; j < order; j++)
        c[j] = (float)(sum[j] * dtau);
}

enum ms_kind { MS_IPNDM, MS_IPNDM_V, MS_DEIS };

static int run(struct sampling__ctx *c, float *x, enum ms_kind kind, float *den, float *d,
               struct hist *h, const float *deis_t, float beta0, float beta1)
{
    const float *sig = c->run->sigmas;
    const int max_order = kind == MS_DEIS ? 3 : 4;
    size_t n = c->n;
    int rc;
    for (int i = 0; i < c->run->n_sigmas - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        sampling__to_d(x, den, s, d, n); /* d_cur = (x_cur − denoised) / t_cur */
        int order = i + 1 < max_order ? i + 1 : max_order;
        float dt = sn - s, cf[4];
        if (kind == MS_DEIS && !(sn > 0.0f))
            order = 1;
        if (kind != MS_DEIS && sn == 0.0f) {
            memcpy(x, den, n * sizeof *x);
        } else if (order == 1) {
            for (size_t k = 0; k < n; k++)
                x[k] = x[k] + dt * d[k];
        } else if (kind == MS_IPNDM) {
            ipndm_update(x, d, h, order, dt, n);
        } else if (kind == MS_IPNDM_V) {
            ipndm_v_coeffs(sig, i, order, cf);
            weighted_update(x, d, h, order, cf, dt, 0, n);
        } else {
            deis_coeffs(deis_t, i, order, beta0, beta1, cf);
            weighted_update(x, d, h, order, cf, 0.0f, 1, n);
        }
        hist_push(h, d, n);
    }
    return 0;
}

int sampling__run_multistep(struct sampling__ctx *c, float *x, enum sampling_sampler s)
{
    enum ms_kind kind = s == SAMPLING_SAMPLER_IPNDM ? MS_IPNDM
                        : s == SAMPLING_SAMPLER_IPNDM_V ? MS_IPNDM_V
                                                         : MS_DEIS;
    const int ns = c->run->n_sigmas;
    float *buf = NULL, *t = NULL, beta0 = 0.0f, beta1 = 0.0f;
    int rc = sampling__scratch(c, 2 + MS_HISTORY, &buf);
    if (rc < 0)
        return rc;
    if (kind == MS_DEIS) {
        if ((rc = xtry_malloc((size_t)ns * sizeof *t, (void **)&t, NULL)) < 0)
            goto done;
        deis_times(c->run->sigmas, ns, t, &beta0, &beta1);
    }
    size_t n = c->n;
    struct hist h = {.cap = (kind == MS_DEIS ? 3 : 4) - 1};
    for (int k = 0; k < MS_HISTORY; k++)
        h.b[k] = buf + (size_t)(2 + k) * n;
    rc = run(c, x, kind, buf, buf + n, &h, t, beta0, beta1);
done:
    xfree(t);
    xfree(buf);
    return rc;
}
