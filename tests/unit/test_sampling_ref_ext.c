/*
 * Double-precision references for the samplers added after sd15.md §5.7
 * (uni_pc, the CFG++ and multistep families, ...), written from the papers'
 * and ComfyUI's algebra in double precision, sharing nothing with
 * models/sampling but the noise stream (sampling_noise_draw). test_sampling_ref.c
 * hands every name it does not know to ref_sample_ext.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampling_noise.h"
#include "test_sampling_ref.h"

/*
 * SigmaConvert's α, σ_vp and λ at σ. ComfyUI holds α² = 1/(σ² + 1) as a float32
 * (0.5·log, then exp(2·...) gives it back exactly), and 1 − α² near σ = 0.001 keeps
 * only a few bits of it: that quantisation is what ComfyUI computes, so the
 * reference takes α² from float32 and does the rest in double.
 */
static void vp_quantised(double s, double *alpha, double *std, double *lambda)
{
    float sf = (float)s;
    float q = sf * sf;
    q = q + 1.0f;
    double a2 = (float)(1.0f / q);
    *alpha = sqrt(a2);
    *std = sqrt(1.0 - a2);
    *lambda = 0.5 * log(a2) - 0.5 * log(1.0 - a2);
}

/* x0 of the UniPC data-prediction model at VP state xv, time t (eps model through D). */
static void unipc_x0(ref_denoise_fn D, void *user, const double *xv, double t, double *out,
                     double *tmp, size_t n)
{
    double al, sd, la;
    vp_quantised(t, &al, &sd, &la);
    double k = sqrt(1.0 + (double)((float)t * (float)t));
    for (size_t i = 0; i < n; i++)
        tmp[i] = xv[i] * k;
    D(user, tmp, t, out, n);
    for (size_t i = 0; i < n; i++) {
        double eps = (tmp[i] - out[i]) / t;
        out[i] = (xv[i] - sd * eps) / al;
    }
}

/* Cramer's rule for dim ≤ 3. */
static void cramer(int dim, double a[3][3], const double *b, double *x)
{
    if (dim == 1) {
        x[0] = b[0] / a[0][0];
        return;
    }
    if (dim == 2) {
        double det = a[0][0] * a[1][1] - a[0][1] * a[1][0];
        x[0] = (b[0] * a[1][1] - a[0][1] * b[1]) / det;
        x[1] = (a[0][0] * b[1] - b[0] * a[1][0]) / det;
        return;
    }
    double det = 0;
    for (int c = 0; c < 3; c++)
        det += a[0][c] * (a[1][(c + 1) % 3] * a[2][(c + 2) % 3] - a[1][(c + 2) % 3] * a[2][(c + 1) % 3]);
    for (int k = 0; k < 3; k++) {
        double m[3][3];
        memcpy(m, a, sizeof m);
        for (int r = 0; r < 3; r++)
            m[r][k] = b[r];
        double dk = 0;
        for (int c = 0; c < 3; c++)
            dk += m[0][c] * (m[1][(c + 1) % 3] * m[2][(c + 2) % 3] - m[1][(c + 2) % 3] * m[2][(c + 1) % 3]);
        x[k] = dk / det;
    }
}

/*
 * UniPC (Zhao et al. 2023, data prediction, B(h) = h or e^h − 1) as ComfyUI's
 * sample_unipc runs it: VP space, times = sigmas with a final 0 as 0.001,
 * order p = min(3, len − 2), step i (1..steps) of order min(p, i, steps + 1 − i)
 * using the model values at t_{i−1}, t_{i−2}, ...; the corrector (all but the last
 * step) re-evaluates the model at the predicted state, and that value is kept.
 */
static void ref_unipc(int bh2, double *x, size_t n, const float *sig, int ns, ref_denoise_fn D,
                      void *user)
{
    const int steps = ns - 1, p = ns - 2 < 3 ? ns - 2 : 3;
    double *t = malloc((size_t)ns * sizeof *t);
    for (int i = 0; i < ns; i++)
        t[i] = sig[i];
    if (sig[ns - 1] == 0.0f)
        t[ns - 1] = (float)0.001;
    double **M = malloc((size_t)ns * sizeof *M);
    for (int i = 0; i < ns; i++)
        M[i] = malloc(n * sizeof(double));
    double *tmp = malloc(n * sizeof *tmp), *xt = malloc(n * sizeof *xt);
    double s0 = sqrt(1.0 + (double)(sig[0] * sig[0]));
    for (size_t k = 0; k < n; k++)
        x[k] /= s0;
    unipc_x0(D, user, x, t[0], M[0], tmp, n);
    for (int i = 1; i <= steps; i++) {
        int o = p;
        if (i < o)
            o = i;
        if (steps + 1 - i < o)
            o = steps + 1 - i;
        if (o < 1)
            break;
        double as, ss, ls, at, st, lt;
        vp_quantised(t[i - 1], &as, &ss, &ls);
        vp_quantised(t[i], &at, &st, &lt);
        double h = lt - ls, hh = -h;
        double bh = bh2 ? expm1(hh) : hh;
        double r[3] = {1, 1, 1}, R[3][3], b[3], rp[3] = {0.5}, rc[3] = {0.5};
        for (int j = 1; j < o; j++) {
            double a_, s_, l_;
            vp_quantised(t[i - 1 - j], &a_, &s_, &l_);
            r[j - 1] = (l_ - ls) / h;
        }
        r[o - 1] = 1;
        /* g_k = φ_k-like terms: g_1 = (e^hh − 1)/hh − 1, g_{k+1} = g_k/hh − 1/(k+1)! */
        double g = expm1(hh) / hh - 1, fact = 1;
        for (int k = 0; k < o; k++) {
            for (int j = 0; j < o; j++)
                R[k][j] = pow(r[j], k);
            b[k] = g * fact / bh;
            fact *= k + 2;
            g = g / hh - 1 / fact;
        }
        if (o == 3)
            cramer(2, R, b, rp);
        if (o > 1)
            cramer(o, R, b, rc);
        for (size_t k = 0; k < n; k++) {
            double base = st / ss * x[k] - at * expm1(hh) * M[i - 1][k];
            double pred = 0, corr = 0;
            for (int j = 1; j < o; j++) {
                double d1 = (M[i - 1 - j][k] - M[i - 1][k]) / r[j - 1];
                pred += rp[j - 1] * d1;
                corr += rc[j - 1] * d1;
            }
            xt[k] = base - at * bh * pred;
            tmp[k] = base - at * bh * corr; /* the corrector's part without model_t */
        }
        if (i == steps) {
            memcpy(x, xt, n * sizeof *x);
            break;
        }
        double *keep = malloc(n * sizeof *keep);
        memcpy(keep, tmp, n * sizeof *keep);
        unipc_x0(D, user, xt, t[i], M[i], tmp, n);
        for (size_t k = 0; k < n; k++)
            x[k] = keep[k] - at * bh * rc[o - 1] * (M[i][k] - M[i - 1][k]);
        free(keep);
    }
    double ae, se, le;
    vp_quantised(t[ns - 1], &ae, &se, &le);
    for (size_t k = 0; k < n; k++)
        x[k] /= ae;
    for (int i = 0; i < ns; i++)
        free(M[i]);
    free(M);
    free(t);
    free(tmp);
    free(xt);
}

/* One per-step draw as doubles (the library's noise stream, tested on its own). */
static void draw(struct sampling_noise *ns, float s, float sn, double *z, size_t n)
{
    float *zf = malloc(n * sizeof *zf);
    sampling_noise_draw(ns, s, sn, zf, n);
    for (size_t k = 0; k < n; k++)
        z[k] = zf[k];
    free(zf);
}

static void anc(double s, double sn, double eta, double *down, double *up)
{
    double u = eta * sqrt(sn * sn * (s * s - sn * sn) / (s * s));
    if (eta == 0 || sn < u)
        u = eta == 0 ? 0 : sn;
    *up = u;
    *down = sqrt(sn * sn - u * u);
}

/*
 * The CFG++ multistep/2S samplers (eps models, α = 1): x̂ = x + (D − U) is the
 * state re-aimed at the guided prediction; the exponential-integrator step then
 * runs on the uncond prediction U. 2S's second update uses the U of the midpoint call.
 */
static void ref_cfgpp(int two_m, double *x, size_t n, const float *sig, int ns, ref_denoise_fn D,
                      void *user, struct sampling_noise *noise, const struct ref_opts *o)
{
    double *d0 = malloc(n * sizeof *d0), *u0 = malloc(n * sizeof *u0), *x2 = malloc(n * sizeof *x2);
    double *d2 = malloc(n * sizeof *d2), *u2 = malloc(n * sizeof *u2), *old = malloc(n * sizeof *old);
    double *z = malloc(n * sizeof *z);
    for (int i = 0; i + 1 < ns; i++) {
        double s = sig[i], sn = sig[i + 1];
        D(user, x, s, d0, n);
        ref_eval_uncond(user, x, s, u0, n);
        if (two_m) {
            if (sn == 0) {
                memcpy(x, d0, n * sizeof *x);
            } else {
                double h = log(s / sn), e = exp(-h), cq = 0;
                if (i > 0)
                    cq = expm1(-h) / (2 * (log(sig[i - 1] / s) / h));
                for (size_t k = 0; k < n; k++)
                    x[k] = d0[k] - e * u0[k] - cq * (d0[k] - old[k]) + e * x[k];
            }
            memcpy(old, u0, n * sizeof *old);
            continue;
        }
        double sd, su;
        anc(s, sn, o->eta, &sd, &su);
        if (sd == 0) {
            memcpy(x, d0, n * sizeof *x);
        } else {
            double h = log(s / sd), sm = sqrt(s * sd);
            for (size_t k = 0; k < n; k++)
                x2[k] = sm / s * (x[k] + d0[k] - u0[k]) - expm1(-h / 2) * d0[k];
            D(user, x2, sm, d2, n);
            ref_eval_uncond(user, x2, sm, u2, n);
            for (size_t k = 0; k < n; k++)
                x[k] = sd / s * (x[k] + d0[k] - u2[k]) - expm1(-h) * d2[k];
        }
        if (sn > 0) {
            draw(noise, sig[i], sig[i + 1], z, n);
            for (size_t k = 0; k < n; k++)
                x[k] += z[k] * o->s_noise * su;
        }
    }
    free(d0);
    free(u0);
    free(x2);
    free(d2);
    free(u2);
    free(old);
    free(z);
}

/* heunpp2: Heun with a third point at σ_{i+2}; euler last, plain Heun next to last. */
static void ref_heunpp2(double *x, size_t n, const float *sig, int ns, ref_denoise_fn D, void *user)
{
    double *d0 = malloc(n * sizeof *d0), *x2 = malloc(n * sizeof *x2), *d2 = malloc(n * sizeof *d2);
    double *x3 = malloc(n * sizeof *x3), *d3 = malloc(n * sizeof *d3);
    const double s_end = sig[ns - 1], s0 = sig[0];
    for (int i = 0; i + 1 < ns; i++) {
        double s = sig[i], sn = sig[i + 1], dt = sn - s;
        D(user, x, s, d0, n);
        for (size_t k = 0; k < n; k++)
            d0[k] = (x[k] - d0[k]) / s;
        if (sn == s_end) {
            for (size_t k = 0; k < n; k++)
                x[k] += d0[k] * dt;
            continue;
        }
        for (size_t k = 0; k < n; k++)
            x2[k] = x[k] + d0[k] * dt;
        D(user, x2, sn, d2, n);
        for (size_t k = 0; k < n; k++)
            d2[k] = (x2[k] - d2[k]) / sn;
        double s2 = sig[i + 2];
        if (s2 == s_end) {
            double w2 = sn / (2 * s0);
            for (size_t k = 0; k < n; k++)
                x[k] += ((1 - w2) * d0[k] + w2 * d2[k]) * dt;
            continue;
        }
        for (size_t k = 0; k < n; k++)
            x3[k] = x2[k] + d2[k] * (s2 - sn);
        D(user, x3, s2, d3, n);
        double w2 = sn / (3 * s0), w3 = s2 / (3 * s0);
        for (size_t k = 0; k < n; k++) {
            d3[k] = (x3[k] - d3[k]) / s2;
            x[k] += ((1 - w2 - w3) * d0[k] + w2 * d2[k] + w3 * d3[k]) * dt;
        }
    }
    free(d0);
    free(x2);
    free(d2);
    free(x3);
    free(d3);
}

/* DPM-Solver (Lu et al. 2022) in t = −ln σ with noise prediction ε(x, t). */
struct dpm_ref {
    ref_denoise_fn D;
    void *user;
    size_t n;
    double *e0, *e1, *e2, *u;
};

static void dpm_eps(struct dpm_ref *r, const double *x, double t, double *out)
{
    double s = exp(-t);
    r->D(r->user, x, s, out, r->n);
    for (size_t k = 0; k < r->n; k++)
        out[k] = (x[k] - out[k]) / s;
}

/* One DPM-Solver-k step from t to tn (e0 = ε(x, t) given); r1 is DPM-Solver-2's. */
static void dpm_step(struct dpm_ref *r, int order, double r1, const double *x, double t, double tn,
                     double *out)
{
    double h = tn - t, st = exp(-tn);
    size_t n = r->n;
    if (order == 1) {
        for (size_t k = 0; k < n; k++)
            out[k] = x[k] - st * expm1(h) * r->e0[k];
        return;
    }
    if (order == 3)
        r1 = 1.0 / 3;
    for (size_t k = 0; k < n; k++)
        r->u[k] = x[k] - exp(-(t + r1 * h)) * expm1(r1 * h) * r->e0[k];
    dpm_eps(r, r->u, t + r1 * h, r->e1);
    if (order == 2) {
        for (size_t k = 0; k < n; k++)
            out[k] = x[k] - st * expm1(h) * r->e0[k] - st / (2 * r1) * expm1(h) * (r->e1[k] - r->e0[k]);
        return;
    }
    const double r2 = 2.0 / 3;
    double s2 = t + r2 * h, phi = expm1(r2 * h) / (r2 * h) - 1;
    for (size_t k = 0; k < n; k++)
        r->u[k] = x[k] - exp(-s2) * expm1(r2 * h) * r->e0[k] -
                  exp(-s2) * (r2 / r1) * phi * (r->e1[k] - r->e0[k]);
    dpm_eps(r, r->u, s2, r->e2);
    for (size_t k = 0; k < n; k++)
        out[k] = x[k] - st * expm1(h) * r->e0[k] -
                 st / r2 * (expm1(h) / h - 1) * (r->e2[k] - r->e0[k]);
}

/*
 * dpm_fast: nfe = ns − 1 model calls over floor(nfe/3) + 1 equal steps in t of
 * orders 3, ..., then (2, 1) or nfe mod 3; dpm_adaptive: DPM-Solver-23 with the
 * error of the 2nd- against the 3rd-order step and an integral controller
 * (h ← h·(1 + atan(err^(−1/3) − 1)), accepted when that factor is ≥ 0.81).
 * Both from the first sigma to the last positive one.
 */
static void ref_dpm(int adaptive, double *x, size_t n, const float *sig, int ns, ref_denoise_fn D,
                    void *user)
{
    struct dpm_ref r = {D, user, n, malloc(n * sizeof(double)), malloc(n * sizeof(double)),
                        malloc(n * sizeof(double)), malloc(n * sizeof(double))};
    double *lo = malloc(n * sizeof *lo), *hi = malloc(n * sizeof *hi), *prev = malloc(n * sizeof *prev);
    double smin = sig[ns - 1] != 0 ? sig[ns - 1] : sig[ns - 2];
    double t0 = -log(sig[0]), t1 = -log(smin);
    if (!adaptive) {
        int nfe = ns - 1, m = nfe / 3 + 1;
        for (int i = 0; i < m; i++) {
            int order = nfe % 3 == 0 ? (i < m - 2 ? 3 : i == m - 2 ? 2 : 1) : (i < m - 1 ? 3 : nfe % 3);
            double t = t0 + (t1 - t0) * i / m, tn = t0 + (t1 - t0) * (i + 1) / m;
            dpm_eps(&r, x, t, r.e0);
            dpm_step(&r, order, 0.5, x, t, tn, hi);
            memcpy(x, hi, n * sizeof *x);
        }
    } else {
        double s = t0, h = 0.05;
        memcpy(prev, x, n * sizeof *prev);
        while (s < t1 - 1e-5) {
            double t = fmin(t1, s + h);
            dpm_eps(&r, x, s, r.e0);
            dpm_step(&r, 2, 1.0 / 3, x, s, t, lo);
            dpm_step(&r, 3, 1.0 / 3, x, s, t, hi);
            double sum = 0;
            for (size_t k = 0; k < n; k++) {
                double delta = fmax(0.0078, 0.05 * fmax(fabs(lo[k]), fabs(prev[k])));
                sum += pow((lo[k] - hi[k]) / delta, 2);
            }
            double inv = 1 / (sqrt(sum / n) + 1e-8);
            double f = 1 + atan(cbrt(inv) - 1);
            h *= f;
            if (f >= 0.81) {
                memcpy(prev, lo, n * sizeof *prev);
                memcpy(x, hi, n * sizeof *x);
                s = t;
            }
        }
    }
    free(r.e0);
    free(r.e1);
    free(r.e2);
    free(r.u);
    free(lo);
    free(hi);
    free(prev);
}

/*
 * The Adams–Bashforth family on dx/dσ = (x − D)/σ with derivatives d_i, d_{i−1}, ...
 * at σ_i, σ_{i−1}, ...: ipndm with the classic fixed-step weights (order ≤ 4),
 * ipndm_v with the exact variable-step ones (∫ of the Lagrange basis, as lms),
 * deis with the Lagrange basis in EDM's VP time integrated against
 * −½·(log α)'/sqrt(α(1 − α)) by the source's Riemann sum (10000 points of
 * linspace, each weighted Δ/10000), order ≤ 3. A step to σ = 0 is the x0
 * (ipndm, ipndm_v) or euler (deis).
 */
static void ref_ab(const char *name, double *x, size_t n, const float *sig, int ns, ref_denoise_fn D,
                   void *user)
{
    const int deis = !strcmp(name, "deis"), fixed = !strcmp(name, "ipndm");
    const int max_order = deis ? 3 : 4;
    double *den = malloc(n * sizeof *den), *hist[4], *t = malloc((size_t)ns * sizeof *t);
    for (int k = 0; k < 4; k++)
        hist[k] = malloc(n * sizeof(double)); /* hist[j]: derivative j steps back */
    double b0 = 0, b1 = 0;
    if (deis) {
        double bd = 2 * (log(0.002 * 0.002 + 1) / 1e-3 - log(80.0 * 80 + 1)) / (1e-3 - 1);
        double bmin = log(80.0 * 80 + 1) - 0.5 * bd;
        for (int i = 0; i < ns; i++)
            t[i] = (sqrt(bmin * bmin + 2 * bd * log((double)sig[i] * sig[i] + 1)) - bmin) / bd;
        b0 = bmin;
        b1 = bd + bmin;
    }
    for (int i = 0; i + 1 < ns; i++) {
        double s = sig[i], sn = sig[i + 1];
        D(user, x, s, den, n);
        for (int k = 3; k > 0; k--)
            memcpy(hist[k], hist[k - 1], n * sizeof(double));
        for (size_t k = 0; k < n; k++)
            hist[0][k] = (x[k] - den[k]) / s;
        int order = i + 1 < max_order ? i + 1 : max_order;
        if (deis && !(sn > 0))
            order = 1;
        if (!deis && sn == 0) {
            memcpy(x, den, n * sizeof *x);
            continue;
        }
        double w[4] = {sn - s};
        if (order > 1 && fixed) {
            static const double ab[5][4] = {{0}, {1}, {1.5, -0.5}, {23.0 / 12, -16.0 / 12, 5.0 / 12},
                                            {55.0 / 24, -59.0 / 24, 37.0 / 24, -9.0 / 24}};
            for (int j = 0; j < order; j++)
                w[j] = (sn - s) * ab[order][j];
        } else if (order == 2 && !deis) {
            /* exactly the variable-step Adams–Bashforth weights (∫ Lagrange basis) */
            double nodes[2] = {sig[i], sig[i - 1]};
            for (int j = 0; j < order; j++)
                w[j] = ref_lagrange_integral(nodes, order, j, s, sn);
        } else if (order > 2 && !deis) {
            /*
             * diff-solvers' iPNDM_v orders 3 and 4: AB2's weights plus corrections
             * t1 (and t2) built from step ratios, not the exact AB3/AB4 weights.
             */
            double h = sn - s, g1 = s - sig[i - 1], g2 = sig[i - 1] - sig[i - 2];
            double t1 = (1 - h * h * (h + g1) / (3 * (h + g1) * g1 * (g1 + g2))) / 2, t2 = 0;
            double X = 0;
            if (order == 4) {
                double g3 = sig[i - 2] - sig[i - 3];
                t2 = ((1 - h / (3 * (h + g1))) / 2 + (1 - h / (2 * (h + g1))) * h / (6 * (h + g1 + g2))) *
                     h * (h + g1) * (h + g1 + g2) / (g1 * (g1 + g2) * (g1 + g2 + g3));
                X = g1 * (g1 + g2) / (g2 * (g2 + g3));
                w[3] = -t2 * X * g1 / g2 * h;
                w[2] = (t1 * g1 / g2 + (g1 / g2 + X * (1 + g2 / g3)) * t2) * h;
            } else {
                w[2] = t1 * g1 / g2 * h;
            }
            w[0] = ((2 + h / g1) / 2 + t1 + t2) * h;
            w[1] = (-(h / g1) / 2 - (1 + g1 / g2) * t1 - (1 + g1 / g2 + X) * t2) * h;
        } else if (order > 1) {
            const int N = 10000;
            double a = t[i], b = t[i + 1], sum[4] = {0};
            for (int q = 0; q < N; q++) {
                double tau = a + (b - a) * q / (N - 1);
                double alpha = exp(-0.5 * tau * tau * (b1 - b0) - tau * b0);
                double f = 0.5 * (tau * (b1 - b0) + b0) / sqrt(alpha * (1 - alpha));
                for (int j = 0; j < order; j++) {
                    double p = 1;
                    for (int m = 0; m < order; m++)
                        if (m != j)
                            p *= (tau - t[i - m]) / (t[i - j] - t[i - m]);
                    sum[j] += f * p;
                }
            }
            for (int j = 0; j < order; j++)
                w[j] = sum[j] * (b - a) / N;
        }
        for (size_t k = 0; k < n; k++)
            for (int j = 0; j < order; j++)
                x[k] += w[j] * hist[j][k];
    }
    for (int k = 0; k < 4; k++)
        free(hist[k]);
    free(den);
    free(t);
}

/*
 * res_multistep: x ← e^{−h}·x̂ + h·(b1·P + b2·P_prev) towards σ_down, h = ln(σ/σ_down),
 * c2 = ln(σ_down,prev/σ_prev)/h, φ1 = (1 − e^{−h})/h, φ2 = (φ1 − 1)/(−h), b2 = φ2/c2,
 * b1 = φ1 − b2; euler first (and when σ_down = 0). P is the guided x0 (x̂ = x) or,
 * CFG++, the uncond one (x̂ = x + D − U). Then noise·s_noise·σ_up.
 * gradient_estimation: euler (CFG++: D + d·σn with d from U) plus (d − d_prev)·dt.
 */
static void ref_res(const char *name, double *x, size_t n, const float *sig, int ns,
                    ref_denoise_fn D, void *user, struct sampling_noise *noise,
                    const struct ref_opts *o)
{
    const int cfg_pp = strstr(name, "cfg_pp") != NULL, ge = !strncmp(name, "gradient", 8);
    const double eta = strstr(name, "ancestral") ? o->eta : 0;
    double *d0 = malloc(n * sizeof *d0), *u = malloc(n * sizeof *u), *old = malloc(n * sizeof *old);
    double *z = malloc(n * sizeof *z), *d = malloc(n * sizeof *d);
    double old_sd = 0;
    for (int i = 0; i + 1 < ns; i++) {
        double s = sig[i], sn = sig[i + 1];
        D(user, x, s, d0, n);
        ref_eval_uncond(user, x, s, u, n);
        const double *p = cfg_pp ? u : d0;
        if (ge) {
            for (size_t k = 0; k < n; k++) {
                double dk = (x[k] - p[k]) / s;
                if (sn == 0)
                    x[k] = d0[k];
                else
                    x[k] = (cfg_pp ? d0[k] + dk * sn : x[k] + dk * (sn - s)) +
                           (i >= 1 ? (dk - old[k]) * (sn - s) : 0);
                d[k] = dk;
            }
            memcpy(old, d, n * sizeof *old);
            continue;
        }
        double sd, su;
        anc(s, sn, eta, &sd, &su);
        if (sd == 0 || i == 0) {
            for (size_t k = 0; k < n; k++)
                x[k] = cfg_pp ? d0[k] + (x[k] - u[k]) / s * sd : x[k] + (x[k] - d0[k]) / s * (sd - s);
        } else {
            double h = log(s / sd), c2 = log(old_sd / sig[i - 1]) / h;
            double phi1 = -expm1(-h) / h, phi2 = (phi1 - 1) / -h, b2 = phi2 / c2, b1 = phi1 - b2;
            for (size_t k = 0; k < n; k++) {
                double xh = cfg_pp ? x[k] + d0[k] - u[k] : x[k];
                x[k] = exp(-h) * xh + h * (b1 * p[k] + b2 * old[k]);
            }
        }
        if (sn > 0 && su != 0) {
            draw(noise, sig[i], sig[i + 1], z, n);
            for (size_t k = 0; k < n; k++)
                x[k] += z[k] * o->s_noise * su;
        }
        memcpy(old, p, n * sizeof *old);
        old_sd = sd;
    }
    free(d0);
    free(u);
    free(old);
    free(z);
    free(d);
}

/* ER-SDE's noise scaler S(v) = v·(e^{v^0.3} + 10). */
static double er_s(double v)
{
    return v * (exp(pow(v, 0.3)) + 10);
}

/*
 * er_sde (ER-SDE-Solver-3, eps models: er_λ = σ, α = 1): x ← r·x + (1 − r)·D with
 * r = S(σn)/S(σ), plus the 2nd/3rd stage terms with divided differences of D and
 * the source's 200-point sums of 1/S and (λ − σ)/S, plus noise·sqrt(σn² − σ²r²).
 * seeds_2/3 (SEEDS, λ = −ln σ): stages at λ + r_k·h with e^{−r h η} damping,
 * −expm1(−r h (η + 1)) weights, φ2-corrections, and per-segment noise carried on.
 */
static void ref_seeds(const char *name, double *x, size_t n, const float *sig, int ns,
                      ref_denoise_fn D, void *user, struct sampling_noise *noise,
                      const struct ref_opts *o)
{
    double *d0 = malloc(n * sizeof *d0), *d2 = malloc(n * sizeof *d2), *d3 = malloc(n * sizeof *d3);
    double *x2 = malloc(n * sizeof *x2), *z = malloc(n * sizeof *z), *sde = malloc(n * sizeof *sde);
    double *old = malloc(n * sizeof *old), *dd = malloc(n * sizeof *dd), *odd = malloc(n * sizeof *odd);
    const double eta = o->eta, sno = o->s_noise;
    const int inject = eta > 0 && sno > 0;
    for (int i = 0; i + 1 < ns; i++) {
        double s = sig[i], sn = sig[i + 1];
        D(user, x, s, d0, n);
        if (sn == 0) {
            memcpy(x, d0, n * sizeof *x);
            memcpy(old, d0, n * sizeof *old);
            continue;
        }
        if (!strcmp(name, "er_sde")) {
            int stage = i + 1 < 3 ? i + 1 : 3;
            double r = er_s(sn) / er_s(s), dt = sn - s, step = -dt / 200, s1 = 0, su = 0;
            for (int q = 0; q < 200; q++) {
                double pos = sn + q * step;
                s1 += step / er_s(pos);
                su += step * (pos - s) / er_s(pos);
            }
            for (size_t k = 0; k < n; k++) {
                x[k] = r * x[k] + (1 - r) * d0[k];
                if (stage >= 2) {
                    dd[k] = (d0[k] - old[k]) / (s - sig[i - 1]);
                    x[k] += (dt + s1 * er_s(sn)) * dd[k];
                }
                if (stage >= 3)
                    x[k] += (dt * dt / 2 + su * er_s(sn)) * (dd[k] - odd[k]) / ((s - sig[i - 2]) / 2);
            }
            if (stage >= 2)
                memcpy(odd, dd, n * sizeof *odd);
            if (sno > 0) {
                double v = sn * sn - s * s * r * r, a = v > 0 ? sqrt(v) : 0;
                draw(noise, sig[i], sig[i + 1], z, n);
                for (size_t k = 0; k < n; k++)
                    x[k] += z[k] * sno * a;
            }
            memcpy(old, d0, n * sizeof *old);
            continue;
        }
        const int three = !strcmp(name, "seeds_3");
        const double r1 = three ? 1.0 / 3 : 0.5, r2 = 2.0 / 3;
        double h = log(s / sn), he = h * (eta + 1);
        double s1 = s * exp(-r1 * h), s2 = s * exp(-r2 * h);
        for (size_t k = 0; k < n; k++)
            x2[k] = s1 / s * exp(-r1 * h * eta) * x[k] - expm1(-r1 * he) * d0[k];
        if (inject) {
            draw(noise, sig[i], (float)s1, z, n);
            for (size_t k = 0; k < n; k++) {
                sde[k] = sqrt(-expm1(-2 * r1 * h * eta)) * z[k];
                x2[k] += sde[k] * s1 * sno;
            }
        }
        D(user, x2, s1, d2, n);
        double last_r = r1, last_s = s1;
        double w0 = 0, w1 = 0;
        if (three) {
            double p2 = (expm1(-r2 * he) + r2 * he) / (-r2 * he), a32 = r2 / r1 * p2;
            for (size_t k = 0; k < n; k++)
                x2[k] = s2 / s * exp(-r2 * h * eta) * x[k] -
                        ((expm1(-r2 * he) - a32) * d0[k] + a32 * d2[k]);
            if (inject) {
                double f = (r1 - r2) * h * eta;
                draw(noise, (float)s1, (float)s2, z, n);
                for (size_t k = 0; k < n; k++) {
                    sde[k] = sde[k] * exp(f) + sqrt(-expm1(2 * f)) * z[k];
                    x2[k] += sde[k] * s2 * sno;
                }
            }
            D(user, x2, s2, d3, n);
            double b3 = (expm1(-he) + he) / (-he) / r2;
            w0 = expm1(-he) - b3;
            w1 = b3;
            last_r = r2;
            last_s = s2;
        }
        for (size_t k = 0; k < n; k++) {
            double m = three ? w0 * d0[k] + w1 * d3[k] : expm1(-he) * d2[k];
            x[k] = sn / s * exp(-h * eta) * x[k] - m;
        }
        if (inject) {
            double f = (last_r - 1) * h * eta;
            draw(noise, (float)last_s, sig[i + 1], z, n);
            for (size_t k = 0; k < n; k++) {
                sde[k] = sde[k] * exp(f) + sqrt(-expm1(2 * f)) * z[k];
                x[k] += sde[k] * sn * sno;
            }
        }
    }
    free(d0);
    free(d2);
    free(d3);
    free(x2);
    free(z);
    free(sde);
    free(old);
    free(dd);
    free(odd);
}

/* sa_solver's noise interval (ref_set_sa_interval). */
static double sa_start, sa_end;

void ref_set_sa_interval(double start, double end)
{
    sa_start = start;
    sa_end = end;
}

/* ℓ_j(v): the Lagrange basis polynomial j over the nodes lam[0..k). */
static double lagrange(const double *lam, int k, int j, double v)
{
    double p = 1;
    for (int m = 0; m < k; m++)
        if (m != j)
            p *= (v - lam[m]) / (lam[j] - lam[m]);
    return p;
}

/*
 * The SA-Solver weight of node j for a step from λs to λt (eq. 15 of the paper,
 * data prediction): α_t·∫ (1+τ²)·e^{−(1+τ²)(λt − v)}·ℓ_j(v) dv, with α_t = σt·e^{λt},
 * by composite Simpson's rule (the integrand is smooth: 2000 panels are exact
 * to ~1e-13 here).
 */
static double sa_weight(double sigma_t, const double *lam, int k, int j, double ls, double lt,
                        double tau)
{
    const int panels = 2000;
    const double tm = 1 + tau * tau, w = (lt - ls) / panels;
    double sum = 0;
    for (int q = 0; q <= panels; q++) {
        double v = ls + q * w;
        double f = tm * exp(-tm * (lt - v)) * lagrange(lam, k, j, v);
        sum += f * (q == 0 || q == panels ? 1 : q % 2 ? 4 : 2);
    }
    return sigma_t * exp(lt) * sum * w / 3;
}

/*
 * sa_solver / sa_solver_pece (SA-Solver, λ = −ln σ): per step, evaluate D at the
 * prediction; correct the last step with up to 4 evaluations (the newest
 * included; none on step 0 nor, without PECE, on a last step to σ = 0), adding
 * that step's noise again; PECE re-evaluates D at the corrected state; predict
 * with up to 3 evaluations, x ← (σt/σs)·e^{−τ²h}·x + Σ b_j·D_j + σt·sqrt(1 − e^{−2τ²h})·ξ,
 * τ = eta on [end, start] of the interval. Orders drop to the steps left when the
 * schedule ends at 0.
 */
static void ref_sa(int pece, double *x, size_t n, const float *sig, int ns, ref_denoise_fn D,
                   void *user, struct sampling_noise *noise, const struct ref_opts *o)
{
    enum { K = 4 };
    double *dl[K], *xp = malloc(n * sizeof *xp), *nz = malloc(n * sizeof *nz);
    double *z = malloc(n * sizeof *z), *lam = malloc(ns * sizeof *lam);
    for (int j = 0; j < K; j++)
        dl[j] = malloc(n * sizeof(double));
    for (int i = 0; i < ns; i++)
        lam[i] = -log((double)sig[i]);
    memcpy(xp, x, n * sizeof *xp);
    int have = 0; /* evaluations kept, dl[have − 1] the newest */
    double tau = 0, h = 0;
    for (int i = 0; i + 1 < ns; i++) {
        double s = sig[i], sn = sig[i + 1];
        if (have == K) {
            double *t = dl[0];
            for (int j = 0; j + 1 < K; j++)
                dl[j] = dl[j + 1];
            dl[K - 1] = t;
            have--;
        }
        D(user, xp, s, dl[have++], n);
        int kp = have < 3 ? have : 3;
        int kc = i == 0 || (sn == 0 && !pece) ? 0 : have;
        if (sig[ns - 1] == 0) {
            kp = kp < ns - 2 - i ? kp : ns - 2 - i;
            kc = kc < ns - 1 - i ? kc : ns - 1 - i;
        }
        if (kc == 0) {
            memcpy(x, xp, n * sizeof *x);
        } else {
            double b[K];
            for (int j = 0; j < kc; j++)
                b[j] = sa_weight(s, lam + i - kc + 1, kc, j, lam[i - 1], lam[i], tau);
            double f = s / sig[i - 1] * exp(-tau * tau * h);
            for (size_t q = 0; q < n; q++) {
                double v = f * x[q];
                for (int j = 0; j < kc; j++)
                    v += b[j] * dl[have - kc + j][q];
                x[q] = v + (tau > 0 && o->s_noise > 0 ? nz[q] : 0);
            }
            if (pece)
                D(user, x, s, dl[have - 1], n);
        }
        if (sn == 0) {
            memcpy(x, dl[have - 1], n * sizeof *x);
            continue;
        }
        tau = o->eta > 0 && sa_start >= sn && sn >= sa_end ? o->eta : 0;
        double b[K];
        for (int j = 0; j < kp; j++)
            b[j] = sa_weight(sn, lam + i - kp + 1, kp, j, lam[i], lam[i + 1], tau);
        h = lam[i + 1] - lam[i];
        double f = sn / s * exp(-tau * tau * h);
        for (size_t q = 0; q < n; q++) {
            double v = f * x[q];
            for (int j = 0; j < kp; j++)
                v += b[j] * dl[have - kp + j][q];
            xp[q] = v;
        }
        if (tau > 0 && o->s_noise > 0) {
            draw(noise, sig[i], sig[i + 1], z, n);
            double a = sn * sqrt(1 - exp(-2 * tau * tau * h)) * o->s_noise;
            for (size_t q = 0; q < n; q++) {
                nz[q] = z[q] * a;
                xp[q] += nz[q];
            }
        }
    }
    for (int j = 0; j < K; j++)
        free(dl[j]);
    free(xp);
    free(nz);
    free(z);
    free(lam);
}

int ref_sample_ext(const char *name, double *x, size_t n, const float *sig, int ns,
                   ref_denoise_fn D, void *user, struct sampling_noise *noise,
                   const struct ref_opts *o)
{
    if (!strcmp(name, "euler_cfg_pp")) {
        struct ref_opts o0 = *o;
        o0.eta = 0;
        o0.s_noise = 0;
        ref_sample_opts("euler_ancestral_cfg_pp", x, n, sig, ns, D, user, noise, &o0);
        return 1;
    }
    if (!strcmp(name, "dpmpp_2s_ancestral_cfg_pp") || !strcmp(name, "dpmpp_2m_cfg_pp")) {
        ref_cfgpp(!strcmp(name, "dpmpp_2m_cfg_pp"), x, n, sig, ns, D, user, noise, o);
        return 1;
    }
    if (!strcmp(name, "heunpp2")) {
        ref_heunpp2(x, n, sig, ns, D, user);
        return 1;
    }
    if (!strcmp(name, "dpm_fast") || !strcmp(name, "dpm_adaptive")) {
        ref_dpm(!strcmp(name, "dpm_adaptive"), x, n, sig, ns, D, user);
        return 1;
    }
    if (!strcmp(name, "ipndm") || !strcmp(name, "ipndm_v") || !strcmp(name, "deis")) {
        ref_ab(name, x, n, sig, ns, D, user);
        return 1;
    }
    if (!strncmp(name, "res_multistep", 13) || !strncmp(name, "gradient_estimation", 19)) {
        ref_res(name, x, n, sig, ns, D, user, noise, o);
        return 1;
    }
    if (!strcmp(name, "er_sde") || !strncmp(name, "seeds_", 6)) {
        ref_seeds(name, x, n, sig, ns, D, user, noise, o);
        return 1;
    }
    if (!strcmp(name, "sa_solver") || !strcmp(name, "sa_solver_pece")) {
        ref_sa(!strcmp(name, "sa_solver_pece"), x, n, sig, ns, D, user, noise, o);
        return 1;
    }
    if (!strcmp(name, "uni_pc") || !strcmp(name, "uni_pc_bh2")) {
        ref_unipc(!strcmp(name, "uni_pc_bh2"), x, n, sig, ns, D, user);
        return 1;
    }
    return 0;
}
