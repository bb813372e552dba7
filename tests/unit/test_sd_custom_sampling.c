/*
 * test_sd_custom_sampling — ComfyUI's custom-sampling nodes
 * (comfy_extras/nodes_custom_sampler.py) run directly through node_ctx:
 *   - Karras / exponential / polyexponential / VP / Laplace schedulers against
 *     float64 transcriptions of k-diffusion's formulas, and BasicScheduler,
 *     SDTurbo and BetaSampling against the model's noise table;
 *   - SplitSigmas, SplitSigmasDenoise (Python slicing, round half to even, the
 *     [:-0] quirk), FlipSigmas, SetFirstSigma, and Python's errors;
 *   - on a generated tiny checkpoint: SamplerCustomAdvanced(CFGGuider,
 *     BasicScheduler, RandomNoise, KSamplerSelect) and SamplerCustom give KSampler's
 *     latent bit for bit (also img2img denoise, an inpaint mask, add_noise off vs
 *     DisableNoise), denoised_output is the last x0, and sigma lists of length 0
 *     and 1 behave as ComfyUI's guider does.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "ckpt_gen.h"
#include "harness.h"
#include "memmgr.h"
#include "node_registry.h"
#include "node_run.h"
#include "sampling.h"
#include "sd_backend.h"
#include "sd_custom_nodes.h"
#include "sd_custom_types.h"
#include "sd_nodes.h"
#include "sd_types.h"
#include "tensor.h"

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

/* One-output helper: the output, or NULL on failure (message in last_msg). */
static struct value *run1(const struct node_class *cls, const char *const *names,
                          struct value **vals, int n)
{
    struct value *out[4] = {0};
    if (run_node(cls, names, vals, n, out) < 0)
        return NULL;
    value_unref(out[1]);
    return out[0];
}

static struct value *sigmas_of(const float *v, int n)
{
    return sd_sigmas_value(sd_sigmas_new(v, n));
}

/* Largest relative difference between a SIGMAS value and float64 expectations. */
static double rel_diff(const struct value *s, const double *want, int n)
{
    const struct sd_sigmas *g = sd_sigmas_of(s);
    if (!g || g->n != n)
        return INFINITY;
    double m = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs(g->v[i] - want[i]) / fmax(fabs(want[i]), 1e-30);
        m = fmax(m, want[i] == 0.0 ? fabs(g->v[i]) : d);
    }
    return m;
}

static int sigmas_eq(const struct value *s, const float *want, int n)
{
    const struct sd_sigmas *g = sd_sigmas_of(s);
    return g && g->n == n && (n == 0 || memcmp(g->v, want, (size_t)n * sizeof *want) == 0);
}

/* ---- closed-form schedulers ---- */

static double lin(double a, double b, int n, int i)
{
    return n == 1 ? a : a + (b - a) * i / (n - 1);
}

static void test_formulas(void)
{
    const int n = 10;
    const double smax = 14.614642, smin = 0.0291675;
    double want[32];

    const char *kn[] = {"steps", "sigma_max", "sigma_min", "rho"};
    struct value *kv[] = {value_new_int(n), value_new_float(smax), value_new_float(smin),
                          value_new_float(7.0)};
    struct value *k = run1(&sd_karras_scheduler, kn, kv, 4);
    for (int i = 0; i < n; i++) {
        double a = pow(smax, 1 / 7.0), b = pow(smin, 1 / 7.0);
        want[i] = pow(a + lin(0, 1, n, i) * (b - a), 7.0);
    }
    want[n] = 0;
    ok(rel_diff(k, want, n + 1) < 1e-5, "KarrasScheduler: k-diffusion's formula (rel %.2g)",
       rel_diff(k, want, n + 1));
    value_unref(k);

    struct value *ev[] = {value_new_int(n), value_new_float(smax), value_new_float(smin)};
    struct value *ex = run1(&sd_exponential_scheduler, kn, ev, 3);
    for (int i = 0; i < n; i++)
        want[i] = exp(lin(log(smax), log(smin), n, i));
    ok(rel_diff(ex, want, n + 1) < 1e-5, "ExponentialScheduler (rel %.2g)", rel_diff(ex, want, n + 1));
    value_unref(ex);

    struct value *pv[] = {value_new_int(n), value_new_float(smax), value_new_float(smin),
                          value_new_float(2.5)};
    struct value *pe = run1(&sd_polyexponential_scheduler, kn, pv, 4);
    for (int i = 0; i < n; i++)
        want[i] = exp(pow(lin(1, 0, n, i), 2.5) * (log(smax) - log(smin)) + log(smin));
    ok(rel_diff(pe, want, n + 1) < 1e-5, "PolyexponentialScheduler rho 2.5 (rel %.2g)",
       rel_diff(pe, want, n + 1));
    value_unref(pe);

    const char *vn[] = {"steps", "beta_d", "beta_min", "eps_s"};
    struct value *vv[] = {value_new_int(n), value_new_float(19.9), value_new_float(0.1),
                          value_new_float(0.001)};
    struct value *vp = run1(&sd_vp_scheduler, vn, vv, 4);
    for (int i = 0; i < n; i++) {
        double t = lin(1, 0.001, n, i);
        want[i] = sqrt(expm1(19.9 * t * t / 2 + 0.1 * t));
    }
    ok(rel_diff(vp, want, n + 1) < 1e-5, "VPScheduler (rel %.2g)", rel_diff(vp, want, n + 1));
    value_unref(vp);

    const char *ln[] = {"steps", "sigma_max", "sigma_min", "mu", "beta"};
    struct value *lv[] = {value_new_int(n), value_new_float(smax), value_new_float(smin),
                          value_new_float(0.0), value_new_float(0.5)};
    struct value *lp = run1(&sd_laplace_scheduler, ln, lv, 5);
    for (int i = 0; i < n; i++) {
        double x = lin(0, 1, n, i), c = 0.5 - x, sg = (c > 0) - (c < 0);
        double s = exp(0.0 - 0.5 * sg * log(1 - 2 * fabs(c) + 1e-5));
        want[i] = fmin(fmax(s, smin), smax);
    }
    ok(rel_diff(lp, want, n) < 1e-5 && want[0] == smax && want[n - 1] == smin,
       "LaplaceScheduler: n sigmas clamped to [min, max], no trailing 0 (rel %.2g)",
       rel_diff(lp, want, n));
    value_unref(lp);

    /* Python's errors for parameters it cannot take. */
    struct value *zv[] = {value_new_int(n), value_new_float(smax), value_new_float(smin),
                          value_new_float(0.0)};
    ok(run1(&sd_karras_scheduler, kn, zv, 4) == NULL &&
           strcmp(last_msg, "ZeroDivisionError: float division by zero") == 0,
       "KarrasScheduler rho 0: %s", last_msg);
    struct value *z2[] = {value_new_int(n), value_new_float(smax), value_new_float(0.0)};
    ok(run1(&sd_exponential_scheduler, kn, z2, 3) == NULL &&
           strcmp(last_msg, "ValueError: math domain error") == 0,
       "ExponentialScheduler sigma_min 0: %s", last_msg);
}

/* ---- sigma-list edits ---- */

static void split(const struct node_class *cls, const char *knob, struct value *kv,
                  const float *v, int n, struct value **hi, struct value **lo)
{
    const char *names[] = {"sigmas", knob};
    struct value *vals[] = {sigmas_of(v, n), kv};
    struct value *out[4] = {0};
    run_node(cls, names, vals, 2, out);
    *hi = out[0];
    *lo = out[1];
}

static void test_sigma_edits(void)
{
    const float s[] = {10, 5, 2, 1, 0.5f, 0};
    struct value *hi, *lo;

    split(&sd_split_sigmas, "step", value_new_int(2), s, 6, &hi, &lo);
    ok(sigmas_eq(hi, s, 3) && sigmas_eq(lo, s + 2, 4), "SplitSigmas 2: [:3] and [2:]");
    value_unref(hi);
    value_unref(lo);
    split(&sd_split_sigmas, "step", value_new_int(9), s, 6, &hi, &lo);
    ok(sigmas_eq(hi, s, 6) && sigmas_eq(lo, NULL, 0), "SplitSigmas past the end: all, empty");
    value_unref(hi);
    value_unref(lo);

    /* 5 steps · 0.5 = 2.5 rounds to 2 (half to even): [:-2] and [-3:]. */
    split(&sd_split_sigmas_denoise, "denoise", value_new_float(0.5), s, 6, &hi, &lo);
    ok(sigmas_eq(hi, s, 4) && sigmas_eq(lo, s + 3, 3), "SplitSigmasDenoise 0.5 of 5 steps");
    value_unref(hi);
    value_unref(lo);
    split(&sd_split_sigmas_denoise, "denoise", value_new_float(0.0), s, 6, &hi, &lo);
    ok(sigmas_eq(hi, NULL, 0) && sigmas_eq(lo, s + 5, 1),
       "SplitSigmasDenoise 0: [:-0] is empty, low is the last sigma");
    value_unref(hi);
    value_unref(lo);
    split(&sd_split_sigmas_denoise, "denoise", value_new_float(1.0), s, 6, &hi, &lo);
    ok(sigmas_eq(hi, s, 1) && sigmas_eq(lo, s, 6), "SplitSigmasDenoise 1: [:-5] is the first, all");
    value_unref(hi);
    value_unref(lo);

    const char *fn[] = {"sigmas"};
    struct value *fv[] = {sigmas_of(s, 6)};
    struct value *f = run1(&sd_flip_sigmas, fn, fv, 1);
    const float flipped[] = {0.0001f, 0.5f, 1, 2, 5, 10};
    ok(sigmas_eq(f, flipped, 6), "FlipSigmas: reversed, a leading 0 becomes 0.0001");
    value_unref(f);
    struct value *fe[] = {sigmas_of(NULL, 0)};
    f = run1(&sd_flip_sigmas, fn, fe, 1);
    ok(sigmas_eq(f, NULL, 0), "FlipSigmas of an empty list: empty");
    value_unref(f);

    const char *sn[] = {"sigmas", "sigma"};
    struct value *input = sigmas_of(s, 6);
    struct value *sv[] = {value_ref(input), value_new_float(136.0)};
    f = run1(&sd_set_first_sigma, sn, sv, 2);
    const float first[] = {136, 5, 2, 1, 0.5f, 0};
    ok(sigmas_eq(f, first, 6) && sigmas_eq(input, s, 6),
       "SetFirstSigma: a new list, the input untouched");
    value_unref(f);
    value_unref(input);
    struct value *se[] = {sigmas_of(NULL, 0), value_new_float(1.0)};
    ok(run1(&sd_set_first_sigma, sn, se, 2) == NULL &&
           strstr(last_msg, "IndexError: index 0 is out of bounds"),
       "SetFirstSigma on an empty list: %s", last_msg);
}

/* ---- model-table schedulers ---- */

static struct value *basic_sched(struct value *model, const char *sched, int steps, double dn)
{
    const char *names[] = {"model", "scheduler", "steps", "denoise"};
    struct value *v[] = {value_ref(model), value_new_string(sched), value_new_int(steps),
                         value_new_float(dn)};
    return run1(&sd_basic_scheduler, names, v, 4);
}

static void test_model_schedulers(struct value *model)
{
    const struct sd_model *m = sd_model_of(model);
    float *v;
    int n;
    struct err e = {0};
    sampling_schedule(&m->ms, SAMPLING_SCHEDULER_KARRAS, 8, &v, &n, &e);
    struct value *b = basic_sched(model, "karras", 4, 0.5);
    ok(sigmas_eq(b, v + 4, 5), "BasicScheduler denoise 0.5: the last 5 of an 8-step schedule");
    value_unref(b);
    xfree(v);
    b = basic_sched(model, "normal", 4, 0.0);
    ok(sigmas_eq(b, NULL, 0), "BasicScheduler denoise 0: an empty list");
    value_unref(b);

    const char *tn[] = {"model", "steps", "denoise"};
    struct value *tv[] = {value_ref(model), value_new_int(2), value_new_float(0.5)};
    b = run1(&sd_sdturbo_scheduler, tn, tv, 3);
    const float turbo[] = {sampling_discrete_sigma(&m->ms, 499), sampling_discrete_sigma(&m->ms, 399), 0};
    ok(sigmas_eq(b, turbo, 3), "SDTurboScheduler 2 steps at 0.5: timesteps 499, 399, then 0");
    value_unref(b);

    /* At ComfyUI's defaults (0.6, 0.6) it is the "beta" scheduler. */
    sampling_schedule(&m->ms, SAMPLING_SCHEDULER_BETA, 10, &v, &n, &e);
    const char *bn[] = {"model", "steps", "alpha", "beta"};
    struct value *bv[] = {value_ref(model), value_new_int(10), value_new_float(0.6),
                          value_new_float(0.6)};
    b = run1(&sd_beta_sampling_scheduler, bn, bv, 4);
    ok(sigmas_eq(b, v, n), "BetaSamplingScheduler 0.6/0.6 equals the beta scheduler");
    value_unref(b);
    xfree(v);

    /* SamplingPercentToSigma: sigma(float32((1 − p)·999)); the ends are sentinels unless asked. */
    const char *pn[] = {"model", "sampling_percent", "return_actual_sigma"};
    const double ps[] = {0.25, 0.0, 0.0, 1.0, 1.0};
    const int actual[] = {0, 0, 1, 0, 1};
    const double want[] = {sampling_discrete_sigma(&m->ms, (float)(0.75 * 999.0)), 999999999.9,
                           m->ms.sigma_max, 0.0, m->ms.sigma_min};
    int good = 1;
    for (int i = 0; i < 5; i++) {
        struct value *pv[] = {value_ref(model), value_new_float(ps[i]), value_new_bool(actual[i])};
        struct value *f = run1(&sd_sampling_percent_to_sigma, pn, pv, 3);
        good &= f && f->kind == VALUE_FLOAT && f->f == want[i];
        value_unref(f);
    }
    ok(good, "SamplingPercentToSigma: 0.25 -> sigma(749.25), 0/1 sentinels or sigma_max/min");
}

/* ---- SamplerCustom(Advanced) against KSampler ---- */

struct setup {
    struct value *model, *pos, *neg;
};

static struct value *ksampler(const struct setup *s, struct value *lat, uint64_t seed,
                              const char *smp, const char *sch, double cfg, double dn)
{
    const char *names[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                           "positive", "negative", "latent_image", "denoise"};
    struct value *v[] = {value_ref(s->model), value_new_u64(seed), value_new_int(3),
                         value_new_float(cfg), value_new_string(smp), value_new_string(sch),
                         value_ref(s->pos), value_ref(s->neg), value_ref(lat),
                         value_new_float(dn)};
    return run1(&sd_ksampler, names, v, 10);
}

static struct value *select_sampler(const char *name)
{
    const char *n[] = {"sampler_name"};
    struct value *v[] = {value_new_string(name)};
    return run1(&sd_ksampler_select, n, v, 1);
}

static struct value *cfg_guider(const struct setup *s, double cfg)
{
    const char *n[] = {"model", "positive", "negative", "cfg"};
    struct value *v[] = {value_ref(s->model), value_ref(s->pos), value_ref(s->neg),
                         value_new_float(cfg)};
    return run1(&sd_cfg_guider, n, v, 4);
}

static struct value *noise_node(int disabled, uint64_t seed)
{
    if (disabled)
        return run1(&sd_disable_noise, NULL, NULL, 0);
    const char *n[] = {"noise_seed"};
    struct value *v[] = {value_new_u64(seed)};
    return run1(&sd_random_noise, n, v, 1);
}

/* SamplerCustomAdvanced; takes the references; out[0] output, out[1] denoised_output. */
static int advanced(struct value *noise, struct value *guider, struct value *sampler,
                    struct value *sigmas, struct value *lat, struct value **out)
{
    const char *n[] = {"noise", "guider", "sampler", "sigmas", "latent_image"};
    struct value *v[] = {noise, guider, sampler, sigmas, value_ref(lat)};
    return run_node(&sd_sampler_custom_advanced, n, v, 5, out);
}

static int latent_eq(const struct value *a, const struct value *b)
{
    const struct sd_latent *x = sd_latent_of(a), *y = sd_latent_of(b);
    return x && y && x->b == y->b && x->h == y->h && x->w == y->w &&
           memcmp(x->samples, y->samples, (size_t)(x->b * 4 * x->h * x->w) * sizeof(float)) == 0;
}

static void drop(struct value **out)
{
    for (int i = 0; i < 4; i++)
        value_unref(out[i]);
}

/* SamplerCustomAdvanced with the pieces of a KSampler call == that KSampler. */
static void check_equiv(const struct setup *s, struct value *lat, const char *smp,
                        const char *sch, double cfg, double dn, const char *what)
{
    struct value *ks = ksampler(s, lat, 77, smp, sch, cfg, dn);
    struct value *out[4] = {0};
    int rc = advanced(noise_node(0, 77), cfg_guider(s, cfg), select_sampler(smp),
                      basic_sched(s->model, sch, 3, dn), lat, out);
    ok(rc == 0 && ks && latent_eq(out[0], ks), "SamplerCustomAdvanced == KSampler bit for bit: %s",
       what);
    drop(out);
    value_unref(ks);
}

static void test_equivalence(const struct setup *s, struct value *empty, struct value *img_lat)
{
    check_equiv(s, empty, "euler", "normal", 7.0, 1.0, "euler/normal cfg 7");
    check_equiv(s, empty, "euler_ancestral", "karras", 7.0, 1.0, "euler_ancestral/karras");
    check_equiv(s, empty, "dpmpp_2m", "simple", 1.0, 1.0, "dpmpp_2m cfg 1");
    check_equiv(s, img_lat, "euler", "normal", 7.0, 0.6, "img2img denoise 0.6");
    /* Issue 14's samplers: CFG++ (the uncond x0 through the guider), ancestral noise, stages. */
    check_equiv(s, empty, "dpmpp_2m_cfg_pp", "karras", 7.0, 1.0, "dpmpp_2m_cfg_pp");
    check_equiv(s, empty, "res_multistep_ancestral", "normal", 7.0, 1.0, "res_multistep_ancestral");
    check_equiv(s, empty, "seeds_3", "karras", 7.0, 1.0, "seeds_3");
    check_equiv(s, empty, "deis", "simple", 7.0, 1.0, "deis");
    /* sa_solver's noise interval comes from the MODEL in both graphs. */
    check_equiv(s, empty, "sa_solver", "normal", 7.0, 1.0, "sa_solver");
    check_equiv(s, empty, "sa_solver_pece", "karras", 7.0, 1.0, "sa_solver_pece");

    /* KSamplerSelect takes every name of ComfyUI's list (all implemented); others are refused. */
    int all = 1;
    for (int i = 0; i < SAMPLING_SAMPLER_COUNT; i++) {
        struct value *v = select_sampler(sampling_sampler_name((enum sampling_sampler)i));
        all &= v != NULL;
        value_unref(v);
    }
    struct value *missing = select_sampler("sa_solver_bh2");
    ok(all && !missing && SAMPLING_SAMPLER_COUNT == 42,
       "KSamplerSelect accepts all %d samplers, refuses sa_solver_bh2", SAMPLING_SAMPLER_COUNT);
    value_unref(missing);

    /* An inpaint mask on the latent: honoured the same way by both. */
    const struct sd_latent *il = sd_latent_of(img_lat);
    struct sd_latent *ml = sd_latent_new_like(il, il->b, 4, il->h, il->w);
    memcpy(ml->samples, il->samples, (size_t)(4 * il->h * il->w) * sizeof(float));
    ml->noise_mask = xcalloc(64 * 64, sizeof(float));
    ml->mb = 1, ml->mh = 64, ml->mw = 64;
    for (int i = 0; i < 64 * 64; i++)
        ml->noise_mask[i] = (i % 64) >= 32;
    struct value *masked = sd_latent_value(ml);
    check_equiv(s, masked, "dpmpp_2m", "karras", 7.0, 1.0, "noise_mask, dpmpp_2m");

    /* SamplerCustom: KSampler's inputs with a SAMPLER and SIGMAS. */
    struct value *ks = ksampler(s, empty, 77, "euler", "normal", 7.0, 1.0);
    const char *cn[] = {"model", "add_noise", "noise_seed", "cfg", "positive", "negative",
                        "sampler", "sigmas", "latent_image"};
    struct value *cv[] = {value_ref(s->model), value_new_bool(1), value_new_u64(77),
                          value_new_float(7.0), value_ref(s->pos), value_ref(s->neg),
                          select_sampler("euler"), basic_sched(s->model, "normal", 3, 1.0),
                          value_ref(empty)};
    struct value *out[4] = {0};
    int rc = run_node(&sd_sampler_custom, cn, cv, 9, out);
    const struct sd_latent *o = sd_latent_of(out[0]), *d = sd_latent_of(out[1]);
    double dd = 0;
    for (int i = 0; o && d && i < 4 * 8 * 8; i++)
        dd = fmax(dd, fabs(o->samples[i] - d->samples[i]));
    ok(rc == 0 && latent_eq(out[0], ks), "SamplerCustom == KSampler bit for bit");
    /* euler's last step to σ = 0 lands on its x0: the two agree. */
    ok(d && out[1] != out[0] && dd < 1e-4, "denoised_output: the last x0 (max diff %.2g)", dd);
    drop(out);
    /*
     * One euler step of three (SplitSigmas' high part, σ0 -> σ1): x1 = x + (x − x0)/σ0·(σ1 − σ0)
     * with x = noise·sqrt(1 + σ0²), so denoised_output must be x − (x1 − x)·σ0/(σ1 − σ0).
     */
    struct value *full = basic_sched(s->model, "normal", 3, 1.0), *hl[4] = {0};
    const struct sd_sigmas *fs = sd_sigmas_of(full);
    double s0 = fs->v[0], s1 = fs->v[1];
    const char *sn[] = {"sigmas", "step"};
    struct value *sv[] = {full, value_new_int(1)};
    run_node(&sd_split_sigmas, sn, sv, 2, hl);
    rc = advanced(noise_node(0, 77), cfg_guider(s, 7.0), select_sampler("euler"), hl[0], empty,
                  out);
    value_unref(hl[1]);
    float nz[256];
    sampling_prepare_noise(77, NULL, 0, 1, 256, SAMPLING_RANDN_V2, nz, NULL);
    o = sd_latent_of(out[0]);
    d = sd_latent_of(out[1]);
    double worst = 0, rms = 0;
    for (int i = 0; rc == 0 && o && d && i < 256; i++) {
        double x = nz[i] * sqrt(1 + s0 * s0), x1 = o->samples[i] * 0.18215;
        double want = x - (x1 - x) * s0 / (s1 - s0);
        worst = fmax(worst, fabs(d->samples[i] * 0.18215 - want));
        rms += want * want;
    }
    rms = sqrt(rms / 256);
    ok(rc == 0 && d && worst < 1e-3 * rms,
       "one euler step: denoised_output is that step's x0 (max err %.2g of rms %.3g)", worst, rms);
    drop(out);

    /* add_noise off keeps noise_seed for the per-step noise; DisableNoise uses seed 0. */
    struct value *cv2[] = {value_ref(s->model), value_new_bool(0), value_new_u64(0),
                           value_new_float(7.0), value_ref(s->pos), value_ref(s->neg),
                           select_sampler("euler_ancestral"),
                           basic_sched(s->model, "normal", 3, 1.0), value_ref(img_lat)};
    run_node(&sd_sampler_custom, cn, cv2, 9, out);
    struct value *adv[4] = {0};
    advanced(noise_node(1, 0), cfg_guider(s, 7.0), select_sampler("euler_ancestral"),
             basic_sched(s->model, "normal", 3, 1.0), img_lat, adv);
    ok(out[0] && latent_eq(out[0], adv[0]),
       "SamplerCustom add_noise off, seed 0 == SamplerCustomAdvanced with DisableNoise");
    drop(out);
    drop(adv);

    /* BasicGuider is CFGGuider at cfg 1 (the positive prediction alone). */
    const char *bn[] = {"model", "conditioning"};
    struct value *bv[] = {value_ref(s->model), value_ref(s->pos)};
    struct value *bg = run1(&sd_basic_guider, bn, bv, 2);
    advanced(noise_node(0, 3), bg, select_sampler("euler"), basic_sched(s->model, "normal", 3, 1.0),
             empty, out);
    advanced(noise_node(0, 3), cfg_guider(s, 1.0), select_sampler("euler"),
             basic_sched(s->model, "normal", 3, 1.0), empty, adv);
    ok(bg && latent_eq(out[0], adv[0]), "BasicGuider == CFGGuider at cfg 1");
    drop(out);
    drop(adv);

    /* Sigma lists of length 0 and 1 (ComfyUI: the latent as is; noise·σ0 + latent, no step). */
    advanced(noise_node(0, 3), cfg_guider(s, 7.0), select_sampler("euler"), sigmas_of(NULL, 0),
             img_lat, out);
    ok(latent_eq(out[0], img_lat) && out[1] == out[0], "empty SIGMAS: the latent passes through");
    drop(out);
    const float zero[] = {0.0f};
    rc = advanced(noise_node(0, 3), cfg_guider(s, 7.0), select_sampler("euler"),
                  sigmas_of(zero, 1), img_lat, out);
    double zd = 0;
    for (int i = 0; rc == 0 && i < 4 * 8 * 8; i++)
        zd = fmax(zd, fabs(sd_latent_of(out[0])->samples[i] - il->samples[i]));
    ok(rc == 0 && zd < 1e-5 && out[1] == out[0],
       "SIGMAS [0]: no step, the latent back (%.2g), denoised_output = output", zd);
    drop(out);

    /* AddNoise: (noise·|σ0 − σlast| + L·0.18215) / 0.18215; DisableNoise leaves L. */
    const float sg[] = {3.0f, 1.0f, 0.5f};
    const char *an[] = {"model", "noise", "sigmas", "latent_image"};
    struct value *av[] = {value_ref(s->model), noise_node(0, 9), sigmas_of(sg, 3), value_ref(img_lat)};
    struct value *noisy = run1(&sd_add_noise, an, av, 4);
    sampling_prepare_noise(9, NULL, 0, 1, 256, SAMPLING_RANDN_V2, nz, NULL);
    double ad = 0;
    for (int i = 0; noisy && i < 256; i++) {
        double want = (nz[i] * 2.5 + il->samples[i] * 0.18215) / 0.18215;
        ad = fmax(ad, fabs(sd_latent_of(noisy)->samples[i] - want) / fmax(1.0, fabs(want)));
    }
    ok(noisy && ad < 1e-5, "AddNoise: noise·|σ0 − σlast| in the model's latent space (%.2g)", ad);
    value_unref(noisy);
    struct value *dv[] = {value_ref(s->model), noise_node(1, 0), sigmas_of(sg, 3), value_ref(img_lat)};
    noisy = run1(&sd_add_noise, an, dv, 4);
    ad = 0;
    for (int i = 0; noisy && i < 256; i++)
        ad = fmax(ad, fabs(sd_latent_of(noisy)->samples[i] - il->samples[i]));
    ok(noisy && ad < 1e-5, "AddNoise with DisableNoise: the latent (%.2g)", ad);
    value_unref(noisy);

    value_unref(masked);
    value_unref(ks);
}

/* ---- the Sampler* option nodes ---- */

/* SamplerCustomAdvanced with `sampler` (taken over) on the pieces of a karras/cfg 7 run. */
static struct value *advanced_with(const struct setup *s, struct value *lat, struct value *sampler)
{
    struct value *out[4] = {0};
    int rc = advanced(noise_node(0, 77), cfg_guider(s, 7.0), sampler, basic_sched(s->model, "karras", 3, 1.0),
                      lat, out);
    value_unref(out[1]);
    if (rc < 0) {
        value_unref(out[0]);
        return NULL;
    }
    return out[0];
}

static void test_sampler_options(const struct setup *s, struct value *lat)
{
    /* The payloads: sampler and options as ComfyUI's get_sampler picks them. */
    const char *n2m[] = {"solver_type", "eta", "s_noise", "noise_device"};
    struct value *v2m[] = {value_new_string("heun"), value_new_float(0.25), value_new_float(1.5),
                           value_new_string("cpu")};
    struct value *smp = run1(&sd_sampler_dpmpp_2m_sde, n2m, v2m, 4);
    const struct sd_sampler *p = sd_sampler_of(smp);
    ok(p && p->sampler == SAMPLING_SAMPLER_DPMPP_2M_SDE_HEUN && p->opts.eta == 0.25 && p->opts.s_noise == 1.5,
       "SamplerDPMPP_2M_SDE heun/cpu: dpmpp_2m_sde_heun, eta 0.25, s_noise 1.5");
    value_unref(smp);
    const char *nsde[] = {"eta", "s_noise", "r", "noise_device"};
    struct value *vsde[] = {value_new_float(1.0), value_new_float(1.0), value_new_float(0.0),
                            value_new_string("gpu")};
    ok(run1(&sd_sampler_dpmpp_sde, nsde, vsde, 4) == NULL && strstr(last_msg, "ZeroDivisionError"),
       "SamplerDPMPP_SDE r = 0 is a node error (%s)", last_msg);

    /* Defaults through the option nodes give KSamplerSelect's bits. */
    static const struct {
        const struct node_class *cls;
        const char *select;
    } same[] = {{&sd_sampler_euler_ancestral, "euler_ancestral"},
                {&sd_sampler_dpmpp_2s_ancestral, "dpmpp_2s_ancestral"},
                {&sd_sampler_lms, "lms"},
                {&sd_sampler_dpmpp_sde, "dpmpp_sde_gpu"},
                {&sd_sampler_dpmpp_2m_sde, "dpmpp_2m_sde_gpu"},
                {&sd_sampler_dpmpp_3m_sde, "dpmpp_3m_sde_gpu"}};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        const char *names[4];
        struct value *vals[4];
        int n = 0;
        for (const struct node_input_def *in = same[i].cls->inputs; in->name; in++) {
            names[n] = in->name;
            vals[n++] = !strcmp(in->type, "FLOAT")  ? value_new_float(in->def.f)
                        : !strcmp(in->type, "INT") ? value_new_int(in->def.i)
                                                   : value_new_string(in->options[0]);
        }
        struct value *a = advanced_with(s, lat, run1(same[i].cls, names, vals, n));
        struct value *b = advanced_with(s, lat, select_sampler(same[i].select));
        ok(a && b && latent_eq(a, b), "%s at its defaults == KSamplerSelect %s bit for bit", same[i].cls->name,
           same[i].select);
        value_unref(a);
        value_unref(b);
    }
    /* Options reach the sampler: eta 0 (no noise) and order 2 change the result. */
    const char *nea[] = {"eta", "s_noise"};
    struct value *vea[] = {value_new_float(0.0), value_new_float(1.0)};
    struct value *a = advanced_with(s, lat, run1(&sd_sampler_euler_ancestral, nea, vea, 2));
    struct value *b = advanced_with(s, lat, select_sampler("euler_ancestral"));
    ok(a && b && !latent_eq(a, b), "SamplerEulerAncestral eta 0 differs from eta 1");
    value_unref(a);
    value_unref(b);
    const char *nl[] = {"order"};
    struct value *vl[] = {value_new_int(1)};
    a = advanced_with(s, lat, run1(&sd_sampler_lms, nl, vl, 1));
    b = advanced_with(s, lat, select_sampler("lms"));
    ok(a && b && !latent_eq(a, b), "SamplerLMS order 1 differs from order 4 (the second step uses two derivatives)");
    value_unref(a);
    value_unref(b);
}

static struct value *encode(struct value *clip, const char *text)
{
    const char *names[] = {"text", "clip"};
    struct value *v[] = {value_new_string(text), value_ref(clip)};
    return run1(&sd_clip_text_encode, names, v, 2);
}

int main(void)
{
    long live0 = alloc_live_count();
    test_formulas();
    test_sigma_edits();

    char dir[] = "/tmp/test_sd_custom.XXXXXX", sub[320], path[400];
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    mkdir(sub, 0755);
    snprintf(path, sizeof path, "%s/tiny.safetensors", sub);
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    struct err e = {0};
    EXPECT_OK(ckpt_gen_write(&o, path, &e));
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    EXPECT_OK(mm_new(&mc, &mm, &e));
    env.models_dir = dir;
    env.mm = mm;

    const char *cn[] = {"ckpt_name"};
    struct value *cv[] = {value_new_string("tiny.safetensors")};
    struct value *mcv[4] = {0};
    int rc = run_node(&sd_checkpoint_loader_simple, cn, cv, 1, mcv);
    ok(rc == 0, "tiny checkpoint loads (%s)", rc ? last_msg : "ok");
    if (rc == 0) {
        struct setup s = {.model = mcv[0]};
        s.pos = encode(mcv[1], "a photo of a cat");
        s.neg = encode(mcv[1], "blurry");
        test_model_schedulers(s.model);
        const char *en[] = {"width", "height", "batch_size"};
        struct value *ev[] = {value_new_int(64), value_new_int(64), value_new_int(1)};
        struct value *empty = run1(&sd_empty_latent_image, en, ev, 3);
        /* A non-zero latent for img2img: KSampler's own output. */
        struct value *img_lat = ksampler(&s, empty, 5, "euler", "normal", 7.0, 1.0);
        test_equivalence(&s, empty, img_lat);
        test_sampler_options(&s, empty);
        value_unref(img_lat);
        value_unref(empty);
        value_unref(s.pos);
        value_unref(s.neg);
    }
    for (int i = 0; i < 4; i++)
        value_unref(mcv[i]);
    mm_unload_all(mm);
    mm_free(mm);
    unlink(path);
    rmdir(sub);
    rmdir(dir);
    tensor_shutdown();
    ok(alloc_live_count() == live0, "no allocation left live (%ld)", alloc_live_count() - live0);
    return harness_done();
}
