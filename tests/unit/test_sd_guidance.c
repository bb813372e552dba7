/*
 * test_sd_guidance — comfy_extras sampling nodes beyond nodes_custom_sampler.py:
 *   - AlignYourStepsScheduler against a float64 log-linear interpolation written
 *     here from nodes_align_your_steps.py (every model type, step counts on and
 *     off the 10-step table, denoise slices, denoise 0);
 *   - RescaleCFG's cfg function, DualCFGGuider's regular and nested mixes and
 *     PerpNegGuider's perp_neg against float64 transcriptions of the Python.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "harness.h"
#include "node_registry.h"
#include "node_run.h"
#include "sampling_ays.h"
#include "sampling_guide.h"
#include "sd_custom_types.h"
#include "sd_extra_nodes.h"

static struct node_env env;
static char last_msg[512];

/* Run `cls` with named inputs (references taken over); outputs in out[] (or dropped). */
static int run_node(const struct node_class *cls, const char *const *names, struct value **vals,
                    int n, struct value **out)
{
    struct value *in[16] = {0};
    struct value *outs[4] = {0};
    for (int i = 0; i < n; i++) {
        int k = node_class_input_index(cls, names[i]);
        ASSERT(k >= 0);
        in[k] = vals[i];
    }
    struct node_ctx c;
    node_ctx_init(&c, cls, "1", &env, in, outs);
    int rc = cls->run(&c);
    snprintf(last_msg, sizeof last_msg, "%s: %s", c.exc_type,
             c.exc_message.ptr ? c.exc_message.ptr : "");
    node_ctx_release(&c);
    for (int i = 0; i < 16; i++)
        value_unref(in[i]);
    for (int i = 0; i < 4; i++) {
        if (out)
            out[i] = outs[i];
        else
            value_unref(outs[i]);
    }
    return rc;
}

/* ---- AlignYourStepsScheduler ---- */

static const double ref_levels[3][11] = {
    {14.6146412293, 6.4745760956, 3.8636745985, 2.6946151520, 1.8841921177, 1.3943805092,
     0.9642583904, 0.6523686016, 0.3977456272, 0.1515232662, 0.0291671582},
    {14.6146412293, 6.3184485287, 3.7681790315, 2.1811480769, 1.3405244945, 0.8620721141,
     0.5550693289, 0.3798540708, 0.2332364134, 0.1114188177, 0.0291671582},
    {700.00, 54.5, 15.886, 7.977, 4.248, 1.789, 0.981, 0.403, 0.173, 0.034, 0.002},
};

/*
 * The reference: n points evenly spaced over [0, 1] placed on the 11-point grid of
 * the reversed levels, log-sigma interpolated linearly inside its interval, exp,
 * reversed back; then the last round(steps·denoise) + 1 kept, the final one 0.
 */
static int ref_ays(int type, int steps, double denoise, double *out)
{
    int total = steps;
    if (denoise < 1.0) {
        if (denoise <= 0.0)
            return 0;
        total = (int)nearbyint(steps * denoise); /* half to even, as Python's round */
    }
    int n = steps + 1;
    double *s = malloc((size_t)n * sizeof *s);
    for (int i = 0; i < n; i++) {
        double x = (double)i / (n - 1), pos = x * 10.0;
        int j = (int)floor(pos);
        if (j >= 10)
            j = 9;
        double f = pos - j;
        double a = log(ref_levels[type][10 - j]), b = log(ref_levels[type][9 - j]);
        s[n - 1 - i] = exp(a + (b - a) * f);
    }
    if (n == 11)
        memcpy(s, ref_levels[type], sizeof ref_levels[type]);
    int keep = total + 1 < n ? total + 1 : n;
    for (int i = 0; i < keep; i++)
        out[i] = s[n - keep + i];
    out[keep - 1] = 0.0;
    free(s);
    return keep;
}

static struct value *ays_node(const char *type, int steps, double denoise)
{
    const char *names[] = {"model_type", "steps", "denoise"};
    struct value *vals[] = {value_new_string(type), value_new_int(steps),
                            value_new_float(denoise)};
    struct value *out[4] = {0};
    if (run_node(&sd_align_your_steps_scheduler, names, vals, 3, out) < 0)
        return NULL;
    return out[0];
}

static void test_ays(void)
{
    static const char *const types[] = {"SD1", "SDXL", "SVD"};
    static const int steps[] = {1, 2, 3, 5, 9, 10, 11, 17, 40, 200};
    static const double dn[] = {1.0, 0.75, 0.5, 0.35, 0.05, 0.0};
    double want[256];
    int bad = 0, cases = 0;
    double worst = 0;
    for (int t = 0; t < 3; t++)
        for (size_t si = 0; si < sizeof steps / sizeof *steps; si++)
            for (size_t di = 0; di < sizeof dn / sizeof *dn; di++) {
                struct value *v = ays_node(types[t], steps[si], dn[di]);
                const struct sd_sigmas *g = sd_sigmas_of(v);
                int n = ref_ays(t, steps[si], dn[di], want);
                cases++;
                if (!g || g->n != n) {
                    bad++;
                    fprintf(stderr, "# %s steps %d denoise %g: %d sigmas, want %d\n", types[t],
                            steps[si], dn[di], g ? g->n : -1, n);
                } else {
                    for (int i = 0; i < n; i++) {
                        double d = want[i] == 0.0 ? fabs(g->v[i])
                                                  : fabs(g->v[i] - want[i]) / want[i];
                        worst = fmax(worst, d);
                        bad += d > 3e-7;
                    }
                }
                value_unref(v);
            }
    ok(bad == 0, "AlignYourStepsScheduler: %d cases match the float64 log-linear schedule "
       "(worst rel %.2g)", cases, worst);

    /* The 10-step table is used as is: each level rounded to float32 once. */
    struct value *v = ays_node("SDXL", 10, 1.0);
    const struct sd_sigmas *g = sd_sigmas_of(v);
    int same = g && g->n == 11;
    for (int i = 0; same && i < 10; i++)
        same = g->v[i] == (float)ref_levels[1][i];
    ok(same && g->v[10] == 0.0f, "AlignYourStepsScheduler: SDXL at 10 steps is NOISE_LEVELS");
    value_unref(v);

    /* steps 10, denoise 0.04: round(0.4) = 0 steps, so sigmas[-1:] = [0] */
    v = ays_node("SD1", 10, 0.04);
    g = sd_sigmas_of(v);
    ok(g && g->n == 1 && g->v[0] == 0.0f, "AlignYourStepsScheduler: 0 rounded steps gives [0]");
    value_unref(v);
    v = ays_node("SD1", 10, 0.0);
    g = sd_sigmas_of(v);
    ok(g && g->n == 0, "AlignYourStepsScheduler: denoise 0 gives no sigmas");
    value_unref(v);
    v = ays_node("SD3", 10, 1.0);
    ok(v == NULL && strstr(last_msg, "KeyError"), "AlignYourStepsScheduler: an unknown model "
       "type is a node error (%s)", last_msg);
    value_unref(v);
}

/* ---- the guidance mixes ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 4.0 - 2.0);
}

/* RescaleCFG's rescale_cfg then cfg_function's x − result, in float64. */
static void ref_rescale(const float *x, double sigma, const float *c, const float *u, double cfg,
                        double mult, int batch, size_t per, double *out)
{
    double *vc = malloc(per * sizeof *vc), *vx = malloc(per * sizeof *vx);
    for (int b = 0; b < batch; b++) {
        const float *xb = x + b * per;
        double s1 = sigma * sigma + 1.0;
        for (size_t i = 0; i < per; i++) {
            double xs = xb[i] / s1;
            double cond = xb[i] - c[b * per + i], uncond = xb[i] - u[b * per + i];
            double vcond = (xs - (xb[i] - cond)) * sqrt(s1) / sigma;
            double vun = (xs - (xb[i] - uncond)) * sqrt(s1) / sigma;
            vc[i] = vcond;
            vx[i] = vun + cfg * (vcond - vun);
        }
        double mc = 0, mx = 0, sc = 0, sx = 0;
        for (size_t i = 0; i < per; i++) {
            mc += vc[i] / per;
            mx += vx[i] / per;
        }
        for (size_t i = 0; i < per; i++) {
            sc += (vc[i] - mc) * (vc[i] - mc);
            sx += (vx[i] - mx) * (vx[i] - mx);
        }
        double ratio = sqrt(sc / (per - 1)) / sqrt(sx / (per - 1));
        for (size_t i = 0; i < per; i++) {
            double fin = mult * vx[i] * ratio + (1.0 - mult) * vx[i];
            double xs = xb[i] / s1;
            double r = xb[i] - (xs - fin * sigma / sqrt(s1));
            out[b * per + i] = xb[i] - r;
        }
    }
    free(vc);
    free(vx);
}

static void ref_cfg(const float *x, double sigma, const float *c, const float *u, double cfg,
                    double mult, int rescale, int batch, size_t per, double *out)
{
    if (rescale) {
        ref_rescale(x, sigma, c, u, cfg, mult, batch, per, out);
        return;
    }
    for (size_t i = 0; i < (size_t)batch * per; i++)
        out[i] = u[i] + ((double)c[i] - u[i]) * cfg;
}

/* max |got − want| / max |want| */
static double rel_err(const float *got, const double *want, size_t n)
{
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs(got[i] - want[i]));
        m = fmax(m, fabs(want[i]));
    }
    return d / fmax(m, 1e-30);
}

static void test_mixes(void)
{
    enum { B = 2, PER = 4 * 6 * 5, N = B * PER };
    float x[N], p[N], mid[N], ng[N], out[N], tmp[N];
    double want[N], w2[N];
    for (int i = 0; i < N; i++) {
        x[i] = 3.0f * frand();
        p[i] = frand();
        mid[i] = frand();
        ng[i] = frand() * 0.5f;
    }
    static const double sigmas[] = {14.6, 1.0, 0.03};
    for (int s = 0; s < 3; s++) {
        for (int mi = 0; mi < 3; mi++) {
            double mult = mi * 0.35, cfg = 7.5;
            sampling_cfg_rescale(x, (float)sigmas[s], p, ng, cfg, mult, B, PER, out);
            ref_rescale(x, (float)sigmas[s], p, ng, cfg, mult, B, PER, want);
            double r = rel_err(out, want, N);
            ok(r < 2e-5, "RescaleCFG: sigma %g multiplier %g vs float64 (rel %.2g)", sigmas[s],
               mult, r);
        }
    }
    /* multiplier 0 is plain CFG once the v round trip is undone */
    sampling_cfg_rescale(x, 1.0f, p, ng, 5.0, 0.0, B, PER, out);
    sampling_cfg_combine(p, ng, 5.0, tmp, N);
    for (int i = 0; i < N; i++)
        want[i] = tmp[i];
    ok(rel_err(out, want, N) < 1e-5, "RescaleCFG: multiplier 0 gives CFG (rel %.2g)",
       rel_err(out, want, N));

    for (int rescale = 0; rescale < 2; rescale++) {
        struct sampling_cfg_fn fn = {.rescale = rescale, .multiplier = 0.7};
        float sg = 2.5f;
        /* regular: cfg_fn(middle, negative, cfg2) + (positive − middle)·cfg1 */
        sampling_dual_cfg(&fn, x, sg, p, mid, ng, 6.0, 3.0, 0, B, PER, out);
        ref_cfg(x, sg, mid, ng, 3.0, 0.7, rescale, B, PER, want);
        for (int i = 0; i < N; i++)
            want[i] += ((double)p[i] - mid[i]) * 6.0;
        double r = rel_err(out, want, N);
        ok(r < 2e-5, "DualCFGGuider regular%s vs float64 (rel %.2g)",
           rescale ? " with RescaleCFG" : "", r);
        /* nested: negative + cfg2·(cfg_fn(positive, middle, cfg1) − negative) */
        sampling_dual_cfg(&fn, x, sg, p, mid, ng, 6.0, 3.0, 1, B, PER, out);
        ref_cfg(x, sg, p, mid, 6.0, 0.7, rescale, B, PER, w2);
        for (int i = 0; i < N; i++)
            want[i] = ng[i] + 3.0 * (w2[i] - ng[i]);
        r = rel_err(out, want, N);
        ok(r < 2e-5, "DualCFGGuider nested%s vs float64 (rel %.2g)",
           rescale ? " with RescaleCFG" : "", r);
    }

    /* perp_neg over the whole batch tensor */
    static const double scales[] = {0.0, 1.0, 2.5};
    for (int s = 0; s < 3; s++) {
        sampling_perp_neg(p, ng, mid, 7.0, scales[s], N, out);
        double dot = 0, nn = 0;
        for (int i = 0; i < N; i++) {
            double a = (double)p[i] - mid[i], b = (double)ng[i] - mid[i];
            dot += a * b;
            nn += a * a;
        }
        for (int i = 0; i < N; i++) {
            double a = (double)p[i] - mid[i], b = (double)ng[i] - mid[i];
            double perp = b - dot / nn * a;
            want[i] = mid[i] + 7.0 * (a - perp * scales[s]);
        }
        double r = rel_err(out, want, N);
        ok(r < 2e-5, "PerpNegGuider: neg_scale %g vs float64 (rel %.2g)", scales[s], r);
    }
}

int main(void)
{
    long live0 = alloc_live_count();
    test_ays();
    test_mixes();
    ok(alloc_live_count() == live0, "no allocation left live (%ld)", alloc_live_count() - live0);
    return harness_done();
}
