/*
 * samplers_sa — SA-Solver (Xue et al., NeurIPS 2023, "Stochastic Adams Solver")
 * as ComfyUI's sa_solver and sa_solver_pece run it from KSampler: a stochastic
 * Adams predictor of order 3 and corrector of order 4 in the half-logSNR
 * λ = −ln σ (eps and v models), data prediction, noise τ = eta inside the
 * run's sigma interval [tau_sigma_end, tau_sigma_start] (the MODEL's
 * percent_to_sigma(0.8) and (0.2)) and τ = 0 (an ODE step) outside it.
 *
 * Step i evaluates the model at the predicted state, corrects the previous
 * step with the new evaluation (not on step 0, nor on a last step to σ = 0
 * unless PECE), then predicts the next state; PECE re-evaluates the model at
 * the corrected state and replaces the newest evaluation with it. The noise of
 * a predictor step is added to its prediction and again to the corrected
 * state. Orders drop near a schedule that ends at 0, as the source does.
 *
 * The b coefficients are weights of Lagrange interpolants integrated against
 * e^{(1+τ²)(λ−λt)}: ComfyUI solves a float32 Vandermonde system with torch's
 * LAPACK; here the same system is solved in double (at most 4×4) and each
 * coefficient rounded once to float32 — LAPACK's own float32 rounding is not
 * reproducible outside it. The state updates are ComfyUI's float32 tensor ops
 * in its order. simple_order_2 (a SamplerSASolver option KSampler never sets)
 * is not here.
 */
#include "samplers_impl.h"

#include <math.h>
#include <string.h>

#include "alloc.h"

#define SA_PREDICTOR_ORDER 3
#define SA_CORRECTOR_ORDER 4
#define SA_MAX_ORDER 4

/* get_tau_interval_func: eta inside [end, start] (σ as a double), 0 outside or for eta ≤ 0. */
static double sa_tau(const struct sampling__ctx *c, float sigma)
{
    if (c->o.eta <= 0.0)
        return 0.0;
    double s = sigma;
    return c->run->tau_sigma_start >= s && s >= c->run->tau_sigma_end ? c->o.eta : 0.0;
}

/*
 * compute_stochastic_adams_b_coeffs (general branch) for the k nodes lam[0..k)
 * from λs to λt: b_j = σt·e^{λt} · l_j with l solving Σ_j λ_j^p l_j = e_p, e_p the
 * (1+τ²)-scaled ∫ e^{(1+τ²)(x−λt)} x^p dx by parts. Written to b[0..k) (float32).
 * Returns 0, or ERR_INVALID for repeated nodes (a schedule with two equal sigmas:
 * the system is singular, and torch.linalg.solve raises there too).
 */
static int sa_b_coeffs(float sigma_t, const float *lam, int k, float ls, float lt, double tau,
                        float *b)
{
    const double tm = 1.0 + tau * tau;
    const double s = ls, t = lt, decay = exp(-tm * (double)(lt - ls));
    double prod[SA_MAX_ORDER], rhs[SA_MAX_ORDER], a[SA_MAX_ORDER][SA_MAX_ORDER + 1];
    for (int p = 0; p < k; p++)
        prod[p] = pow(t, p) - pow(s, p) * decay;
    for (int p = 0; p < k; p++) {
        /* Σ_{q ≤ p} (−1)^{p−q} · p!/q! / tm^{p−q} · prod[q] */
        double acc = 0.0, w = 1.0;
        for (int q = p; q >= 0; q--) {
            acc += w * prod[q];
            w = -w * (double)q / tm;
        }
        rhs[p] = acc;
    }
    for (int p = 0; p < k; p++) {
        for (int j = 0; j < k; j++)
            a[p][j] = pow((double)lam[j], p);
        a[p][k] = rhs[p];
    }
    /* Gaussian elimination with partial pivoting. */
    for (int col = 0; col < k; col++) {
        int piv = col;
        for (int r = col + 1; r < k; r++)
            if (fabs(a[r][col]) > fabs(a[piv][col]))
                piv = r;
        if (a[piv][col] == 0.0)
            return ERR_INVALID;
        if (piv != col) {
            for (int q = 0; q <= k; q++) {
                double tmp = a[col][q];
                a[col][q] = a[piv][q];
                a[piv][q] = tmp;
            }
        }
        for (int r = col + 1; r < k; r++) {
            double f = a[r][col] / a[col][col];
            for (int q = col; q <= k; q++)
                a[r][q] -= f * a[col][q];
        }
    }
    double l[SA_MAX_ORDER];
    for (int r = k - 1; r >= 0; r--) {
        double v = a[r][k];
        for (int q = r + 1; q < k; q++)
            v -= a[r][q] * l[q];
        l[r] = v / a[r][r];
    }
    float alpha = sigma_t * expf(lt);
    for (int j = 0; j < k; j++)
        b[j] = alpha * (float)l[j];
    return 0;
}

/* out = Σ_j hist[j]·b[j] over the k newest evaluations (oldest first), in float32. */
static void sa_combine(float *const *hist, int have, int k, const float *b, float *out, size_t n)
{
    const float *const *h = (const float *const *)hist + (have - k);
    for (size_t q = 0; q < n; q++) {
        float acc = h[0][q] * b[0];
        for (int j = 1; j < k; j++)
            acc = acc + h[j][q] * b[j];
        out[q] = acc;
    }
}

static int imin(int a, int b)
{
    return a < b ? a : b;
}

int sampling__run_sa(struct sampling__ctx *c, float *x, int pece)
{
    const float *sig = c->run->sigmas;
    const int ns = c->run->n_sigmas;
    const size_t n = c->n;
    const float sno = (float)c->o.s_noise;
    float *buf = NULL, *lam = NULL;
    int rc = sampling__scratch(c, SA_MAX_ORDER + 3, &buf);
    if (rc < 0)
        return rc;
    if ((rc = xtry_malloc((size_t)ns * sizeof *lam, (void **)&lam, NULL)) < 0) {
        xfree(buf);
        return rc;
    }
    float *hist[SA_MAX_ORDER]; /* pred_list, oldest first */
    for (int j = 0; j < SA_MAX_ORDER; j++)
        hist[j] = buf + (size_t)j * n;
    float *xp = buf + SA_MAX_ORDER * n, *noise = xp + n, *res = noise + n;
    int have = 0;
    for (int i = 0; i < ns; i++) /* sigma_to_half_log_snr: −log σ */
        lam[i] = -logf(sig[i]);
    memcpy(xp, x, n * sizeof *xp);
    float h = 0.0f;
    double tau = 0.0;
    const int to_end = sig[ns - 1] == 0.0f;
    for (int i = 0; i < ns - 1; i++) {
        float s = sig[i], sn = sig[i + 1];
        /* Evaluation into a fresh slot (the oldest drops out of a full list). */
        if (have == SA_MAX_ORDER) {
            float *oldest = hist[0];
            memmove(hist, hist + 1, (SA_MAX_ORDER - 1) * sizeof *hist);
            hist[SA_MAX_ORDER - 1] = oldest;
            have--;
        }
        float *den = hist[have];
        if ((rc = sampling__model(c, xp, s, den)) < 0)
            goto out;
        have++;
        if ((rc = sampling__report(c, i, den, xp)) < 0)
            goto out;
        int kp = imin(SA_PREDICTOR_ORDER, have);
        int kc = i == 0 || (sn == 0.0f && !pece) ? 0 : imin(SA_CORRECTOR_ORDER, have);
        if (to_end) {
            kp = imin(kp, ns - 2 - i);
            kc = imin(kc, ns - 1 - i);
        }
        if (kc == 0) {
            memcpy(x, xp, n * sizeof *x);
        } else {
            float b[SA_MAX_ORDER];
            if ((rc = sa_b_coeffs(s, lam + i - kc + 1, kc, lam[i - 1], lam[i], tau, b)) < 0)
                goto out;
            sa_combine(hist, have, kc, b, res, n);
            float ratio = s / sig[i - 1];
            float damp = expf((float)(-(tau * tau)) * h);
            float f = ratio * damp;
            for (size_t q = 0; q < n; q++)
                x[q] = f * x[q] + res[q];
            if (tau > 0.0 && c->o.s_noise > 0.0) {
                for (size_t q = 0; q < n; q++)
                    x[q] = x[q] + noise[q];
            }
            if (pece && (rc = sampling__model(c, x, s, hist[have - 1])) < 0)
                goto out;
        }
        if (sn == 0.0f) { /* the denoising step: the newest evaluation */
            memcpy(x, hist[have - 1], n * sizeof *x);
            continue;
        }
        tau = sa_tau(c, sn);
        float b[SA_MAX_ORDER];
        if ((rc = sa_b_coeffs(sn, lam + i - kp + 1, kp, lam[i], lam[i + 1], tau, b)) < 0)
            goto out;
        sa_combine(hist, have, kp, b, res, n);
        h = lam[i + 1] - lam[i];
        float ratio = sn / s;
        float damp = expf((float)(-(tau * tau)) * h);
        float f = ratio * damp;
        for (size_t q = 0; q < n; q++)
            xp[q] = f * x[q] + res[q];
        if (tau > 0.0 && c->o.s_noise > 0.0) {
            float sd = sqrtf(-expm1f((float)(-2.0 * tau * tau) * h));
            const float *z = sampling__noise(c, s, sn);
            for (size_t q = 0; q < n; q++) {
                float v = z[q] * sn;
                v = v * sd;
                noise[q] = v * sno;
                xp[q] = xp[q] + noise[q];
            }
        }
    }
    rc = 0;
out:
    xfree(lam);
    xfree(buf);
    return rc;
}
