/*
 * An independent transcription of sd15.md §5.7's update rules, in double
 * precision and in the spec's own (simplified) algebra, to check
 * models/sampling/samplers.c against. It shares nothing with the library
 * except the noise stream (sampling_noise_draw, tested bit-exact on its own),
 * drawn here in the order the spec's rules ask for noise; the SDE samplers draw
 * from a Brownian tree (test_sampling_brownian checks it against torchsde), so
 * their draws name the interval, its ends as ComfyUI computes them (float32).
 */
#include "test_sampling_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampling_noise.h"

struct ref {
    ref_denoise_fn D;
    void *user;
    size_t n;
    struct sampling_noise *ns;
    float *zf;
    double *z;
};

static void den(struct ref *r, const double *x, double s, double *out)
{
    r->D(r->user, x, s, out, r->n);
}

static ref_denoise_fn ref_uncond;

void ref_set_uncond(ref_denoise_fn U)
{
    ref_uncond = U;
}

void ref_eval_uncond(void *user, const double *x, double sigma, double *out, size_t n)
{
    ref_uncond(user, x, sigma, out, n);
}

static const double *draw_at(struct ref *r, float s, float t)
{
    sampling_noise_draw(r->ns, s, t, r->zf, r->n);
    for (size_t k = 0; k < r->n; k++)
        r->z[k] = r->zf[k];
    return r->z;
}

static const double *draw(struct ref *r)
{
    return draw_at(r, 0, 0);
}

/* dpmpp_sde's first query end: sigma_fn(lambda_s + r h) in float32, as torch computes it. */
static float sde_mid(float s, float sn, double r)
{
    float ls = -logf(s), lt = -logf(sn);
    float h = lt - ls;
    float ls1 = ls + (float)r * h;
    return expf(-ls1);
}

static void anc(double s, double sn, double eta, double *down, double *up)
{
    if (eta == 0) {
        *down = sn;
        *up = 0;
        return;
    }
    double u = eta * sqrt(sn * sn * (s * s - sn * sn) / (s * s));
    if (sn < u)
        u = sn;
    *up = u;
    *down = sqrt(sn * sn - u * u);
}

/* ∫_{a}^{b} Π_{m≠j} (τ − t_m)/(t_j − t_m) dτ, by exact polynomial expansion. */
double ref_lagrange_integral(const double *hist_s, int order, int j, double a, double b)
{
    /* coefficients of the product polynomial, degree < order */
    double p[REF_MAX_ORDER] = {1};
    int deg = 0;
    for (int m = 0; m < order; m++) {
        if (m == j)
            continue;
        double den_ = hist_s[j] - hist_s[m];
        double q[REF_MAX_ORDER] = {0};
        for (int d = 0; d <= deg; d++) {
            q[d + 1] += p[d] / den_;
            q[d] -= p[d] * hist_s[m] / den_;
        }
        deg++;
        memcpy(p, q, sizeof p);
    }
    double sum = 0;
    for (int d = 0; d <= deg; d++)
        sum += p[d] * (pow(b, d + 1) - pow(a, d + 1)) / (d + 1);
    return sum;
}

void ref_sample(const char *name, double *x, size_t n, const float *sig, int ns_count,
                ref_denoise_fn D, void *user, struct sampling_noise *noise)
{
    const struct ref_opts o = {.eta = 1, .s_noise = 1, .r = 0.5, .order = 4};
    ref_sample_opts(name, x, n, sig, ns_count, D, user, noise, &o);
}

void ref_sample_opts(const char *name, double *x, size_t n, const float *sig, int ns_count,
                     ref_denoise_fn D, void *user, struct sampling_noise *noise,
                     const struct ref_opts *o)
{
    if (ref_sample_ext(name, x, n, sig, ns_count, D, user, noise, o))
        return;
    struct ref r = {D, user, n, noise, malloc(n * sizeof(float)), malloc(n * sizeof(double))};
    double *d0 = malloc(n * sizeof *d0), *x2 = malloc(n * sizeof *x2);
    double *d2 = malloc(n * sizeof *d2), *prev = malloc(n * sizeof *prev);
    double *hist[REF_MAX_ORDER];
    const double eta = o->eta, sno = o->s_noise;
    const int noisy = eta > 0 && sno > 0; /* the SDE samplers' "if eta > 0 and s_noise > 0" */
    for (int i = 0; i < REF_MAX_ORDER; i++)
        hist[i] = malloc(n * sizeof(double));
    int have_prev = 0, nh = 0;
    double h_last = 0, h_hist[2] = {0, 0};
    int sde = strstr(name, "_sde") != NULL;
    if (sde && noise && sampling_noise_brownian_begin(noise, sig, ns_count, n, NULL) < 0)
        abort();
    for (int i = 0; i + 1 < ns_count; i++) {
        double s = sig[i], sn = sig[i + 1];
        den(&r, x, s, d0); /* d0 = D(x, σ) */
        if (!strcmp(name, "euler") || !strcmp(name, "ddim")) {
            for (size_t k = 0; k < n; k++)
                x[k] += (x[k] - d0[k]) / s * (sn - s);
        } else if (!strcmp(name, "euler_ancestral")) {
            double sd, su;
            anc(s, sn, eta, &sd, &su);
            if (sd == 0) {
                memcpy(x, d0, n * sizeof *x);
            } else {
                const double *z = draw(&r);
                for (size_t k = 0; k < n; k++)
                    x[k] += (x[k] - d0[k]) / s * (sd - s) + z[k] * sno * su;
            }
        } else if (!strcmp(name, "euler_ancestral_cfg_pp")) {
            /* CFG++ (alpha = 1 for eps models): the direction from the uncond prediction,
             * x = D + σ_down·(x − U)/σ, plus the ancestral noise. */
            if (sn == 0) {
                memcpy(x, d0, n * sizeof *x);
            } else {
                double sd, su;
                anc(s, sn, eta, &sd, &su);
                ref_uncond(r.user, x, s, d2, n);
                const double *z = eta > 0 && sno > 0 ? draw(&r) : NULL;
                for (size_t k = 0; k < n; k++)
                    x[k] = d0[k] + sd * (x[k] - d2[k]) / s + (z ? z[k] * sno * su : 0);
            }
        } else if (!strcmp(name, "heun")) {
            double dt = sn - s;
            if (sn == 0) {
                for (size_t k = 0; k < n; k++)
                    x[k] += (x[k] - d0[k]) / s * dt;
            } else {
                for (size_t k = 0; k < n; k++)
                    x2[k] = x[k] + (x[k] - d0[k]) / s * dt;
                den(&r, x2, sn, d2);
                for (size_t k = 0; k < n; k++) {
                    double da = (x[k] - d0[k]) / s, db = (x2[k] - d2[k]) / sn;
                    x[k] += (da + db) / 2 * dt;
                }
            }
        } else if (!strcmp(name, "dpm_2") || !strcmp(name, "dpm_2_ancestral")) {
            int a = !strcmp(name, "dpm_2_ancestral");
            double tgt = sn, su = 0;
            if (a)
                anc(s, sn, eta, &tgt, &su);
            if (tgt == 0) {
                for (size_t k = 0; k < n; k++)
                    x[k] += (x[k] - d0[k]) / s * (tgt - s);
            } else {
                double sm = sqrt(s * tgt);
                for (size_t k = 0; k < n; k++)
                    x2[k] = x[k] + (x[k] - d0[k]) / s * (sm - s);
                den(&r, x2, sm, d2);
                for (size_t k = 0; k < n; k++)
                    x[k] += (x2[k] - d2[k]) / sm * (tgt - s);
                if (a) {
                    const double *z = draw(&r);
                    for (size_t k = 0; k < n; k++)
                        x[k] += z[k] * sno * su;
                }
            }
        } else if (!strcmp(name, "lms")) {
            double sh[REF_MAX_ORDER];
            if (nh == o->order) {
                double *t = hist[0];
                memmove(hist, hist + 1, (size_t)(o->order - 1) * sizeof *hist);
                hist[o->order - 1] = t;
                nh = o->order - 1;
            }
            for (size_t k = 0; k < n; k++)
                hist[nh][k] = (x[k] - d0[k]) / s;
            nh++;
            if (sn == 0) {
                memcpy(x, d0, n * sizeof *x);
            } else {
                int order = nh;
                for (int j = 0; j < order; j++)
                    sh[j] = sig[i - j];
                for (int j = 0; j < order; j++) {
                    double cj = ref_lagrange_integral(sh, order, j, s, sn);
                    for (size_t k = 0; k < n; k++)
                        x[k] += cj * hist[nh - 1 - j][k];
                }
            }
        } else if (!strcmp(name, "dpmpp_2m")) {
            if (sn == 0) {
                memcpy(x, d0, n * sizeof *x);
            } else {
                double h = log(s) - log(sn);
                for (size_t k = 0; k < n; k++) {
                    double dd = d0[k];
                    if (have_prev) {
                        double r_ = (log(sig[i - 1]) - log(s)) / h;
                        dd = (1 + 1 / (2 * r_)) * d0[k] - 1 / (2 * r_) * prev[k];
                    }
                    x[k] = sn / s * x[k] - expm1(-h) * dd;
                }
            }
            memcpy(prev, d0, n * sizeof *prev);
            have_prev = 1;
        } else if (!strcmp(name, "dpmpp_2s_ancestral")) {
            double sd, su;
            anc(s, sn, eta, &sd, &su);
            if (sd == 0) {
                for (size_t k = 0; k < n; k++)
                    x[k] += (x[k] - d0[k]) / s * (sd - s);
            } else {
                double h = log(s) - log(sd), ss = exp(log(s) - h / 2);
                for (size_t k = 0; k < n; k++)
                    x2[k] = ss / s * x[k] - expm1(-h / 2) * d0[k];
                den(&r, x2, ss, d2);
                for (size_t k = 0; k < n; k++)
                    x[k] = sd / s * x[k] - expm1(-h) * d2[k];
            }
            if (sn > 0) {
                const double *z = draw(&r);
                for (size_t k = 0; k < n; k++)
                    x[k] += z[k] * sno * su;
            }
        } else if (!strncmp(name, "dpmpp_sde", 9)) {
            if (sn == 0) {
                memcpy(x, d0, n * sizeof *x);
            } else {
                /* λ = −ln σ: σ at λ_s + r h is s^(1−r) sn^r; the second update mixes
                 * the two predictions with weight 1 / (2r) on the second. */
                double s1 = pow(s, 1 - o->r) * pow(sn, o->r), sd, su, fac = 1 / (2 * o->r);
                anc(s, s1, eta, &sd, &su);
                const double *z = noisy ? draw_at(&r, sig[i], sde_mid(sig[i], sig[i + 1], o->r)) : NULL;
                for (size_t k = 0; k < n; k++)
                    x2[k] = sd / s * x[k] + (1 - sd / s) * d0[k] + (z ? z[k] * sno * su : 0);
                den(&r, x2, s1, d2);
                anc(s, sn, eta, &sd, &su);
                z = noisy ? draw_at(&r, sig[i], sig[i + 1]) : NULL;
                for (size_t k = 0; k < n; k++)
                    x[k] = sd / s * x[k] + (1 - sd / s) * ((1 - fac) * d0[k] + fac * d2[k]) +
                           (z ? z[k] * sno * su : 0);
            }
        } else if (!strncmp(name, "dpmpp_2m_sde", 12)) {
            int heun = strstr(name, "heun") != NULL;
            double h = h_last;
            if (sn == 0) {
                memcpy(x, d0, n * sizeof *x);
            } else {
                h = log(s / sn);
                double he = (eta + 1) * h, e1 = -expm1(-he);
                for (size_t k = 0; k < n; k++)
                    x[k] = sn / s * exp(-h * eta) * x[k] + e1 * d0[k];
                if (have_prev) {
                    double r_ = h_last / h;
                    double cf = heun ? (e1 / -he + 1) : 0.5 * e1;
                    for (size_t k = 0; k < n; k++)
                        x[k] += cf / r_ * (d0[k] - prev[k]);
                }
                if (noisy) {
                    const double *z = draw_at(&r, sig[i], sig[i + 1]);
                    double a = sn * sqrt(-expm1(-2 * h * eta)) * sno;
                    for (size_t k = 0; k < n; k++)
                        x[k] += z[k] * a;
                }
            }
            memcpy(prev, d0, n * sizeof *prev);
            have_prev = 1;
            h_last = h;
        } else if (!strncmp(name, "dpmpp_3m_sde", 12)) {
            /* ComfyUI's sample_dpmpp_3m_sde for eps models (alpha = 1). */
            double h = h_last;
            if (sn == 0) {
                memcpy(x, d0, n * sizeof *x);
            } else {
                h = log(s / sn);
                double he = (eta + 1) * h, phi2 = expm1(-he) / he + 1, phi3 = phi2 / he - 0.5;
                for (size_t k = 0; k < n; k++)
                    x[k] = sn / s * exp(-h * eta) * x[k] - expm1(-he) * d0[k];
                if (nh >= 2) {
                    double r0 = h_hist[0] / h, r1 = h_hist[1] / h;
                    for (size_t k = 0; k < n; k++) {
                        double a = (d0[k] - hist[0][k]) / r0, b = (hist[0][k] - hist[1][k]) / r1;
                        double D1 = a + (a - b) * r0 / (r0 + r1), D2 = (a - b) / (r0 + r1);
                        x[k] += phi2 * D1 - phi3 * D2;
                    }
                } else if (nh == 1) {
                    double rr = h_hist[0] / h;
                    for (size_t k = 0; k < n; k++)
                        x[k] += phi2 * (d0[k] - hist[0][k]) / rr;
                }
                if (noisy) {
                    const double *z = draw_at(&r, sig[i], sig[i + 1]);
                    double a = sn * sqrt(-expm1(-2 * h * eta)) * sno;
                    for (size_t k = 0; k < n; k++)
                        x[k] += z[k] * a;
                }
            }
            memcpy(hist[1], hist[0], n * sizeof(double));
            memcpy(hist[0], d0, n * sizeof(double));
            nh = nh < 2 ? nh + 1 : 2;
            h_hist[1] = h_hist[0];
            h_hist[0] = h;
            h_last = h;
        } else if (!strcmp(name, "ddpm")) {
            double ac = 1 / (s * s + 1), acp = 1 / (sn * sn + 1), al = ac / acp;
            const double *z = sn > 0 ? draw(&r) : NULL;
            for (size_t k = 0; k < n; k++) {
                double eps = (x[k] - d0[k]) / s;
                double mu = sqrt(1 / al) * (x[k] / sqrt(1 + s * s) - (1 - al) * eps / sqrt(1 - ac));
                if (z)
                    mu += sqrt((1 - al) * (1 - acp) / (1 - ac)) * z[k];
                x[k] = sn != 0 ? mu * sqrt(1 + sn * sn) : mu;
            }
        } else if (!strcmp(name, "lcm")) {
            memcpy(x, d0, n * sizeof *x);
            if (sn > 0) {
                const double *z = draw(&r);
                for (size_t k = 0; k < n; k++)
                    x[k] += z[k] * sn;
            }
        } else {
            abort();
        }
    }
    for (int i = 0; i < REF_MAX_ORDER; i++)
        free(hist[i]);
    free(d0);
    free(x2);
    free(d2);
    free(prev);
    free(r.zf);
    free(r.z);
    if (sde && noise)
        sampling_noise_brownian_end(noise);
}
