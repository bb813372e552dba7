/*
 * samplers_unipc — uni_pc and uni_pc_bh2: ComfyUI's sample_unipc
 * (comfy/extra_samplers/uni_pc.py), the multistep UniPC predictor-corrector
 * with data prediction, B(h) = h (bh1) or e^h − 1 (bh2), order
 * min(3, n_sigmas − 2) and lower orders at the start and the end.
 *
 * ComfyUI runs it in VP space: the state is x / sqrt(1 + σ0²), the times are
 * the sigmas themselves (SigmaConvert: α = sqrt(1/(σ²+1)), σ_vp = sqrt(1 − α²),
 * λ = ln α − ln σ_vp), the model is asked for eps at x·sqrt(σ² + 1) and its
 * x0 recomputed from that eps, and the end is divided by α of the last time.
 * A last sigma of 0 becomes 0.001 (ComfyUI writes it into its sigmas through a
 * view; ours stay as given). All of it is kept in float32 in torch's order:
 * the schedule scalars lose most of their bits near σ = 0.001 (1 − α² there
 * is ~1e-6 next to 1), and that loss is part of what ComfyUI computes.
 *
 * The small linear systems (torch.linalg.solve, LAPACK) are solved in double
 * and rounded: LAPACK's own float32 rounding depends on the library build.
 */
#include "samplers_impl.h"

#include <math.h>
#include <string.h>

#include "alloc.h"

#define UNIPC_MAX_ORDER 3

/* SigmaConvert's quantities at time t, each as torch computes it in float32. */
struct vp {
    float lmc;    /* marginal_log_mean_coeff: 0.5·log(1 / (t·t + 1)) */
    float alpha;  /* exp(lmc) */
    float std;    /* sqrt(1 − exp(2·lmc)) */
    float lambda; /* lmc − 0.5·log(1 − exp(2·lmc)) */
};

static struct vp vp_at(float t)
{
    struct vp v;
    float q = t * t;
    q = q + 1.0f;
    v.lmc = 0.5f * logf(1.0f / q);
    v.alpha = expf(v.lmc);
    float one_minus = 1.0f - expf(2.0f * v.lmc);
    v.std = sqrtf(one_minus);
    v.lambda = v.lmc - 0.5f * logf(one_minus);
    return v;
}

struct unipc {
    struct sampling__ctx *c;
    int bh2;
    float *mprev[UNIPC_MAX_ORDER]; /* model_prev_list, oldest first */
    float tprev[UNIPC_MAX_ORDER];  /* t_prev_list */
    int have;                      /* entries in the lists */
    float *d1[UNIPC_MAX_ORDER - 1]; /* D1s */
    float *xt_;                    /* the update's x_t_ */
    float *mt;                     /* model_t of the corrector (then a free list slot) */
    float *in, *den;               /* model input (k-diffusion space) and its output */
};

/*
 * model_fn(x, t) of the data-prediction UniPC: predict_eps_sigma on the k-diffusion
 * model (input = x·(σ² + 1)^0.5, eps = (input − den)/σ), then x0 = (x − σ_vp·eps)/α.
 */
static int model_x0(struct unipc *u, const float *x, float t, float *out)
{
    size_t n = u->c->n;
    float scale = t * t;
    scale = sqrtf(scale + 1.0f);
    for (size_t k = 0; k < n; k++)
        u->in[k] = x[k] * scale;
    int rc = sampling__model(u->c, u->in, t, u->den);
    if (rc < 0)
        return rc;
    struct vp v = vp_at(t);
    for (size_t k = 0; k < n; k++) {
        float eps = (u->in[k] - u->den[k]) / t;
        float se = v.std * eps;
        out[k] = (x[k] - se) / v.alpha;
    }
    return 0;
}

/* Solve a·x = b (dim ≤ 3) by Gaussian elimination with partial pivoting in double. */
static void solve(int dim, double a[UNIPC_MAX_ORDER][UNIPC_MAX_ORDER], double *b, float *out)
{
    for (int col = 0; col < dim; col++) {
        int piv = col;
        for (int r = col + 1; r < dim; r++)
            if (fabs(a[r][col]) > fabs(a[piv][col]))
                piv = r;
        for (int j = 0; j < dim; j++) {
            double t = a[col][j];
            a[col][j] = a[piv][j];
            a[piv][j] = t;
        }
        double t = b[col];
        b[col] = b[piv];
        b[piv] = t;
        for (int r = col + 1; r < dim; r++) {
            double f = a[r][col] / a[col][col];
            for (int j = col; j < dim; j++)
                a[r][j] -= f * a[col][j];
            b[r] -= f * b[col];
        }
    }
    for (int r = dim - 1; r >= 0; r--) {
        double s = b[r];
        for (int j = r + 1; j < dim; j++)
            s -= a[r][j] * b[j]; /* b[j] holds x[j] for j > r */
        b[r] = s / a[r][r];
    }
    for (int r = 0; r < dim; r++)
        out[r] = (float)b[r];
}

/* Σ_j d1[j]·rho[j], j < m, in order (torch.tensordot over the K axis). */
static float dot_d1(const struct unipc *u, const float *rho, int m, size_t k)
{
    float acc = u->d1[0][k] * rho[0];
    for (int j = 1; j < m; j++)
        acc = acc + u->d1[j][k] * rho[j];
    return acc;
}

/*
 * multistep_uni_pc_bh_update with predict_x0: moves x from the newest t_prev to
 * t with the last `order` entries of the lists; with the corrector, evaluates
 * the model at the predicted state into u->mt (model_t) and corrects x.
 */
static int update(struct unipc *u, float *x, float t, int order, int use_corrector)
{
    size_t n = u->c->n;
    const float *m0 = u->mprev[u->have - 1];
    struct vp v0 = vp_at(u->tprev[u->have - 1]), vt = vp_at(t);
    float h = vt.lambda - v0.lambda;
    float rks[UNIPC_MAX_ORDER];
    for (int i = 1; i < order; i++) {
        const float *mi = u->mprev[u->have - 1 - i];
        float rk = (vp_at(u->tprev[u->have - 1 - i]).lambda - v0.lambda) / h;
        rks[i - 1] = rk;
        for (size_t k = 0; k < n; k++)
            u->d1[i - 1][k] = (mi[k] - m0[k]) / rk;
    }
    rks[order - 1] = 1.0f;

    float hh = -h;
    float h_phi_1 = expm1f(hh);
    float h_phi_k = h_phi_1 / hh - 1.0f;
    float b_h = u->bh2 ? expm1f(hh) : hh;
    double r[UNIPC_MAX_ORDER][UNIPC_MAX_ORDER], b[UNIPC_MAX_ORDER];
    int factorial = 1;
    for (int i = 1; i <= order; i++) {
        for (int j = 0; j < order; j++) /* torch.pow(rks, i − 1): 1, rks, rks·rks */
            r[i - 1][j] = i == 1 ? 1.0 : i == 2 ? rks[j] : (double)(rks[j] * rks[j]);
        b[i - 1] = (h_phi_k * (float)factorial) / b_h;
        factorial *= i + 1;
        h_phi_k = h_phi_k / hh - (float)(1.0 / factorial);
    }

    float rhos_p[UNIPC_MAX_ORDER] = {0.5f}, rhos_c[UNIPC_MAX_ORDER] = {0.5f};
    if (order > 2) {
        double rp[UNIPC_MAX_ORDER][UNIPC_MAX_ORDER], bp[UNIPC_MAX_ORDER];
        for (int i = 0; i < order - 1; i++) {
            for (int j = 0; j < order - 1; j++)
                rp[i][j] = r[i][j];
            bp[i] = b[i];
        }
        solve(order - 1, rp, bp, rhos_p);
    }
    if (use_corrector && order > 1)
        solve(order, r, b, rhos_c);

    float c_x = vt.std / v0.std, c_m = vt.alpha * h_phi_1, c_b = vt.alpha * b_h;
    for (size_t k = 0; k < n; k++) {
        float a = c_x * x[k];
        u->xt_[k] = a - c_m * m0[k];
        if (order > 1) /* x_t = x_t_ − (α_t·B_h)·pred_res */
            x[k] = u->xt_[k] - c_b * dot_d1(u, rhos_p, order - 1, k);
        else
            x[k] = u->xt_[k];
    }
    if (!use_corrector)
        return 0;
    int rc = model_x0(u, x, t, u->mt);
    if (rc < 0)
        return rc;
    for (size_t k = 0; k < n; k++) {
        float d1_t = u->mt[k] - m0[k];
        float corr = rhos_c[order - 1] * d1_t;
        if (order > 1)
            corr = dot_d1(u, rhos_c, order - 1, k) + corr;
        x[k] = u->xt_[k] - c_b * corr;
    }
    return 0;
}

/* Append model_t and t to the lists (the first `order` steps). */
static void push(struct unipc *u, float t)
{
    float *slot = u->mprev[u->have];
    u->mprev[u->have] = u->mt;
    u->mt = slot;
    u->tprev[u->have++] = t;
}

/*
 * Shift the full lists by one: t becomes the newest time and model_t its model.
 * Without a model (the final step) ComfyUI leaves model_prev_list[-1] as it was;
 * nothing reads the lists after it but the report of the newest model, so the
 * models stay where they are.
 */
static void shift(struct unipc *u, float t, int keep_model)
{
    float *oldest = u->mprev[0];
    for (int i = 0; i + 1 < u->have; i++) {
        u->tprev[i] = u->tprev[i + 1];
        if (keep_model)
            u->mprev[i] = u->mprev[i + 1];
    }
    u->tprev[u->have - 1] = t;
    if (keep_model) {
        u->mprev[u->have - 1] = u->mt;
        u->mt = oldest;
    }
}

static int unipc_sample(struct unipc *u, float *x, const float *ts, int steps, int order)
{
    int rc;
    for (int step_index = 0; step_index < steps; step_index++) {
        if (step_index == 0) {
            if ((rc = model_x0(u, x, ts[0], u->mt)) < 0)
                return rc;
            push(u, ts[0]);
        } else if (step_index < order) {
            /* Warm-up: the update of order step_index; its corrector's model is kept. */
            if ((rc = update(u, x, ts[step_index], step_index, 1)) < 0)
                return rc;
            push(u, ts[step_index]);
        } else {
            int last = step_index == steps - 1 ? step_index + 1 : step_index;
            for (int step = step_index; step <= last; step++) {
                int step_order = order < steps + 1 - step ? order : steps + 1 - step;
                int corrector = step != steps;
                if ((rc = update(u, x, ts[step], step_order, corrector)) < 0)
                    return rc;
                shift(u, ts[step], step < steps);
            }
        }
        if ((rc = sampling__report(u->c, step_index, u->mprev[u->have - 1], x)) < 0)
            return rc;
    }
    return 0;
}

int sampling__run_unipc(struct sampling__ctx *c, float *x, int bh2)
{
    const int ns = c->run->n_sigmas, steps = ns - 1;
    size_t n = c->n;
    /* timesteps: the sigmas with a last 0 replaced by 0.001 (as a float32 tensor holds it) */
    float ts_buf[64], *ts = ts_buf, *buf = NULL;
    int rc;
    if (ns > (int)(sizeof ts_buf / sizeof ts_buf[0]) &&
        (rc = xtry_malloc((size_t)ns * sizeof *ts, (void **)&ts, NULL)) < 0)
        return rc;
    memcpy(ts, c->run->sigmas, (size_t)ns * sizeof *ts);
    if (ts[ns - 1] == 0.0f)
        ts[ns - 1] = 0.001f;
    const int order = ns - 2 < UNIPC_MAX_ORDER ? ns - 2 : UNIPC_MAX_ORDER;

    /* mprev[3], mt, d1[2], xt_, in, den */
    if ((rc = sampling__scratch(c, 9, &buf)) < 0)
        goto done;
    struct unipc u = {.c = c, .bh2 = bh2, .mt = buf + 3 * n, .xt_ = buf + 6 * n,
                      .in = buf + 7 * n, .den = buf + 8 * n};
    for (int i = 0; i < UNIPC_MAX_ORDER; i++)
        u.mprev[i] = buf + (size_t)i * n;
    u.d1[0] = buf + 4 * n;
    u.d1[1] = buf + 5 * n;

    /* noise / sqrt(1.0 + t0 ** 2.0) */
    float q = ts[0] * ts[0];
    float s0 = sqrtf(1.0f + q);
    for (size_t k = 0; k < n; k++)
        x[k] = x[k] / s0;
    if ((rc = unipc_sample(&u, x, ts, steps, order)) < 0)
        goto done;
    float a_end = vp_at(ts[ns - 1]).alpha;
    for (size_t k = 0; k < n; k++)
        x[k] = x[k] / a_end;
done:
    xfree(buf);
    if (ts != ts_buf)
        xfree(ts);
    return rc;
}
