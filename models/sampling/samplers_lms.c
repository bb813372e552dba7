/*
 * samplers_lms — lms: k-diffusion's linear multistep sampler (variable-step
 * Adams–Bashforth in σ over the last `order` derivatives), with ComfyUI's
 * coefficients: SciPy's quad of the Lagrange basis, exact here by Gauss–Legendre.
 */
#include "samplers_impl.h"

#include <math.h>
#include <string.h>

#include "alloc.h"

/*
 * Nodes and weights of m-point Gauss–Legendre on [-1, 1] (m <= LMS_MAX_GAUSS), by
 * Newton's method on P_m from the usual cosine guesses.
 */
#define LMS_MAX_GAUSS (SAMPLING__LMS_MAX_ORDER / 2)

static void gauss_legendre(int m, double *x, double *w)
{
    for (int i = 0; i < m; i++) {
        double z = cos(M_PI * (i + 0.75) / (m + 0.5)), dp = 1.0;
        for (int it = 0; it < 100; it++) {
            double p0 = 1.0, p1 = z;
            for (int k = 2; k <= m; k++) {
                double p2 = ((2.0 * k - 1.0) * z * p1 - (k - 1.0) * p0) / k;
                p0 = p1;
                p1 = p2;
            }
            dp = m * (z * p1 - p0) / (z * z - 1.0);
            double dz = p1 / dp;
            z -= dz;
            if (fabs(dz) < 1e-15)
                break;
        }
        x[i] = z;
        w[i] = 2.0 / ((1.0 - z * z) * dp * dp);
    }
}

/*
 * ∫_{t[i]}^{t[i+1]} Π_{k≠j} (τ − t[i−k]) / (t[i−j] − t[i−k]) dτ: a polynomial
 * of degree order − 1, integrated exactly by Gauss–Legendre in double
 * (ComfyUI uses SciPy's quad, exact here to ~1e-12): the fixed 3-point rule up to
 * order 6, ceil(order / 2) points above. As in NumPy, the denominators are
 * float32 differences of the float32 sigmas.
 */
static double lms_coeff(int order, const float *t, int i, int j)
{
    static const double g3x[3] = {-0.7745966692414834, 0.0, 0.7745966692414834};
    static const double g3w[3] = {5.0 / 9.0, 8.0 / 9.0, 5.0 / 9.0};
    double gxb[LMS_MAX_GAUSS], gwb[LMS_MAX_GAUSS];
    const double *gx = g3x, *gw = g3w;
    int m = 3;
    if (order > 6) {
        m = (order + 1) / 2;
        gauss_legendre(m, gxb, gwb);
        gx = gxb;
        gw = gwb;
    }
    double a = t[i], b = t[i + 1];
    double mid = 0.5 * (a + b), half = 0.5 * (b - a), sum = 0.0;
    for (int q = 0; q < m; q++) {
        double tau = mid + half * gx[q], prod = 1.0;
        for (int k = 0; k < order; k++) {
            if (k == j)
                continue;
            float den = t[i - j] - t[i - k];
            prod *= (tau - (double)t[i - k]) / (double)den;
        }
        sum += gw[q] * prod;
    }
    return sum * half;
}

/* lms with ds[0..order) as the history ring (ds[have - 1] the newest), coeff[order] scratch. */
static int run_lms(struct sampling__ctx *c, float *x, float *den, float **ds, float *coeff)
{
    const float *sig = c->run->sigmas;
    const int order = c->o.lms_order;
    size_t n = c->n;
    int rc, have = 0;
    for (int i = 0; i < c->run->n_sigmas - 1; i++) {
        SAMPLING__STEP_BEGIN(i);
        /* ds.append(d); if len(ds) > order: ds.pop(0) */
        if (have == order) {
            float *oldest = ds[0];
            memmove(ds, ds + 1, (size_t)(order - 1) * sizeof *ds);
            ds[order - 1] = oldest;
            have = order - 1;
        }
        sampling__to_d(x, den, s, ds[have], n);
        have++;
        if ((rc = sampling__report(c, i, den, x)) < 0)
            return rc;
        if (sn == 0.0f) {
            memcpy(x, den, n * sizeof *x);
            continue;
        }
        int cur = i + 1 < order ? i + 1 : order;
        for (int j = 0; j < cur; j++)
            coeff[j] = (float)lms_coeff(cur, sig, i, j);
        for (size_t k = 0; k < n; k++) {
            /* sum(coeff_j · d_j, newest first), then x + sum. */
            float acc = coeff[0] * ds[have - 1][k];
            for (int j = 1; j < cur; j++)
                acc = acc + coeff[j] * ds[have - 1 - j][k];
            x[k] = x[k] + acc;
        }
    }
    return 0;
}

int sampling__run_lms(struct sampling__ctx *c, float *x)
{
    const int order = c->o.lms_order;
    float *buf = NULL, **ds = NULL, *coeff = NULL;
    int rc = sampling__scratch(c, 1 + order, &buf);
    if (rc < 0)
        return rc;
    ds = xmalloc((size_t)order * sizeof *ds);
    coeff = xmalloc((size_t)order * sizeof *coeff);
    for (int j = 0; j < order; j++)
        ds[j] = buf + (size_t)(1 + j) * c->n;
    rc = run_lms(c, x, buf, ds, coeff);
    xfree(coeff);
    xfree(ds);
    xfree(buf);
    return rc;
}
