/*
 * test_sd_guidance — comfy_extras sampling nodes beyond nodes_custom_sampler.py:
 *   - AlignYourStepsScheduler against a float64 log-linear interpolation written
 *     here from nodes_align_your_steps.py (every model type, step counts on and
 *     off the 10-step table, denoise slices, denoise 0);
 *   - RescaleCFG's cfg function, DualCFGGuider's regular and nested mixes and
 *     PerpNegGuider's perp_neg against float64 transcriptions of the Python;
 *   - FreeU's Fourier_filter against a float64 full 2-D DFT (fftshift, the Python
 *     slice of the box, inverse DFT, real part) and its backbone scaling (FreeU and
 *     FreeU_V2) against float64;
 *   - on a generated tiny checkpoint, one euler step from sigma 2 to 0 without noise,
 *     whose denoised_output is the guider's mixed x0: DualCFGGuider (regular, nested,
 *     cfg_cond2_negative 1), PerpNegGuider and RescaleCFG (also under DualCFG) against
 *     the float64 mix of each conditioning's own x0 (BasicGuider runs), PerpNegGuider at
 *     neg_scale 0 equal to CFGGuider(positive, empty) bit for bit;
 *   - FreeU / FreeU_V2 / RescaleCFG nodes clone the
 *     MODEL (the input samples as before), FreeU at b = s = 1 keeps KSampler's bits,
 *     b2 / s2 change them, b1 / s1 do not on a UNet without a 4·model_ch level, and a MODEL that is not a UNet is a node error.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "ckpt_gen.h"
#include "memmgr.h"
#include "sd_backend.h"
#include "sd_nodes.h"
#include "sd_types.h"
#include "tensor.h"
#include "unet_freeu.h"
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"
#include "node_registry.h"
#include "node_run.h"
#include "sampling_ays.h"
#include "sampling_guide.h"
#include "sd_custom_types.h"
#include "sd_custom_nodes.h"
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

/* ---- FreeU ---- */

/* Full DFT (sign −1 forward, +1 inverse without scaling) of a complex h x w plane. */
static void dft2(const double *re, const double *im, int h, int w, int sign, double *ore,
                 double *oim)
{
    for (int ky = 0; ky < h; ky++)
        for (int kx = 0; kx < w; kx++) {
            double sr = 0, si = 0;
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                    double t = sign * 2.0 * M_PI * ((double)ky * y / h + (double)kx * x / w);
                    sr += re[y * w + x] * cos(t) - im[y * w + x] * sin(t);
                    si += re[y * w + x] * sin(t) + im[y * w + x] * cos(t);
                }
            ore[ky * w + kx] = sr;
            oim[ky * w + kx] = si;
        }
}

/* Python a[start:stop] bounds. */
static void pyslice(int start, int stop, int len, int *lo, int *hi)
{
    start = start < 0 ? start + len : start;
    stop = stop < 0 ? stop + len : stop;
    *lo = start < 0 ? 0 : start > len ? len : start;
    *hi = stop < 0 ? 0 : stop > len ? len : stop;
}

/* Fourier_filter in float64: the mask built in shifted coordinates, ifftshift-ed. */
static void ref_fourier(const float *x, int h, int w, int t, double scale, double *out)
{
    int n = h * w;
    double *re = calloc(n, sizeof *re), *im = calloc(n, sizeof *im);
    double *fr = calloc(n, sizeof *fr), *fi = calloc(n, sizeof *fi);
    double *mask = malloc(n * sizeof *mask);
    for (int i = 0; i < n; i++) {
        re[i] = x[i];
        mask[i] = 1.0;
    }
    dft2(re, im, h, w, -1, fr, fi);
    int y0, y1, x0, x1;
    pyslice(h / 2 - t, h / 2 + t, h, &y0, &y1);
    pyslice(w / 2 - t, w / 2 + t, w, &x0, &x1);
    /* shifted (sy, sx) is unshifted ((sy + h - h/2) % h, ...): ifftshift rolls back */
    for (int sy = y0; sy < y1; sy++)
        for (int sx = x0; sx < x1; sx++)
            mask[((sy + h - h / 2) % h) * w + (sx + w - w / 2) % w] = scale;
    for (int i = 0; i < n; i++) {
        fr[i] *= mask[i];
        fi[i] *= mask[i];
    }
    dft2(fr, fi, h, w, +1, re, im);
    for (int i = 0; i < n; i++)
        out[i] = re[i] / n;
    free(re);
    free(im);
    free(fr);
    free(fi);
    free(mask);
}

static void test_fourier(void)
{
    static const int sizes[][2] = {{8, 8}, {5, 7}, {6, 3}, {1, 4}, {4, 1}, {1, 1}, {2, 2}, {3, 3}};
    double worst = 0;
    int bad = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        int h = sizes[k][0], w = sizes[k][1];
        for (int t = 1; t <= 2; t++) {
            float x[2 * 64];
            double want[64];
            for (int i = 0; i < 2 * h * w; i++)
                x[i] = frand();
            float orig[2 * 64];
            memcpy(orig, x, sizeof x);
            unet_fourier_filter(x, 2, h, w, t, 0.2);
            for (int p = 0; p < 2; p++) {
                ref_fourier(orig + p * h * w, h, w, t, 0.2, want);
                for (int i = 0; i < h * w; i++) {
                    double d = fabs(x[p * h * w + i] - want[i]);
                    worst = fmax(worst, d);
                    bad += d > 1e-6;
                }
            }
        }
    }
    ok(bad == 0, "Fourier_filter: the low-frequency box against a float64 full DFT "
       "(8x8, 5x7, 6x3, 1x4, 4x1, 1x1, 2x2, 3x3; threshold 1 and 2; worst %.2g)", worst);
}

static void test_freeu_scale(void)
{
    enum { B = 2, C = 6, H = 3, W = 4, N = B * C * H * W };
    float h[N], g[N];
    for (int i = 0; i < N; i++)
        h[i] = frand();
    for (int v2 = 0; v2 < 2; v2++) {
        struct unet_freeu f = {.v2 = v2};
        memcpy(g, h, sizeof h);
        unet_freeu_scale(&f, g, B, C, H, W, 1.3);
        double worst = 0;
        for (int b = 0; b < B; b++) {
            double mean[H * W], lo = 1e300, hi = -1e300;
            for (int p = 0; p < H * W; p++) {
                mean[p] = 0;
                for (int c = 0; c < C; c++)
                    mean[p] += h[(b * C + c) * H * W + p] / (double)C;
                lo = fmin(lo, mean[p]);
                hi = fmax(hi, mean[p]);
            }
            for (int c = 0; c < C; c++)
                for (int p = 0; p < H * W; p++) {
                    int i = (b * C + c) * H * W + p;
                    double f1 = v2 ? (1.3 - 1.0) * (mean[p] - lo) / (hi - lo) + 1.0 : 1.3;
                    double want = c < C / 2 ? h[i] * f1 : h[i];
                    worst = fmax(worst, fabs(g[i] - want));
                }
        }
        ok(worst < 2e-6, "%s: h[:, :C/2] scaled as the float64 reference (worst %.2g)",
           v2 ? "FreeU_V2" : "FreeU", worst);
    }
}

/* ---- nodes on a tiny checkpoint ---- */

struct setup {
    struct value *model, *pos, *neg, *mid, *lat;
};

static struct value *run1(const struct node_class *cls, const char *const *names,
                          struct value **vals, int n)
{
    struct value *out[4] = {0};
    if (run_node(cls, names, vals, n, out) < 0)
        return NULL;
    value_unref(out[1]);
    return out[0];
}

static struct value *ksampler_with(const struct setup *s, struct value *model, double cfg)
{
    const char *names[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                           "positive", "negative", "latent_image", "denoise"};
    struct value *v[] = {value_ref(model), value_new_u64(7), value_new_int(3),
                         value_new_float(cfg), value_new_string("euler"),
                         value_new_string("normal"), value_ref(s->pos), value_ref(s->neg),
                         value_ref(s->lat), value_new_float(1.0)};
    return run1(&sd_ksampler, names, v, 10);
}

static int latent_eq(const struct value *a, const struct value *b)
{
    const struct sd_latent *x = sd_latent_of(a), *y = sd_latent_of(b);
    return x && y && x->b == y->b && x->c == y->c && x->h == y->h && x->w == y->w &&
           memcmp(x->samples, y->samples, (size_t)(x->b * x->c * x->h * x->w) * sizeof(float)) == 0;
}

static struct value *freeu_node(const struct node_class *cls, struct value *model, double b1,
                                double b2, double s1, double s2)
{
    const char *names[] = {"model", "b1", "b2", "s1", "s2"};
    struct value *v[] = {value_ref(model), value_new_float(b1), value_new_float(b2),
                         value_new_float(s1), value_new_float(s2)};
    return run1(cls, names, v, 5);
}

static int fake_eps(void *impl, const float *x_in, int batch, int h, int w, const float *ts,
                    const float *ctx, int tokens, int dim, float *eps_out, struct err *e)
{
    (void)impl, (void)x_in, (void)ts, (void)ctx, (void)tokens, (void)dim, (void)e;
    memset(eps_out, 0, (size_t)batch * 4 * h * w * sizeof *eps_out);
    return 0;
}
static const struct sd_model_ops fake_ops = {.apply_eps = fake_eps};

/* ---- guiders: one step's mixed x0 against the float64 mix ---- */

static struct value *sigma_step;

static struct value *run_advanced(struct value *guider, const struct setup *s)
{
    const char *sn[] = {"sampler_name"};
    struct value *sv[] = {value_new_string("euler")};
    struct value *smp = run1(&sd_ksampler_select, sn, sv, 1);
    struct value *noise = run1(&sd_disable_noise, NULL, NULL, 0);
    const char *names[] = {"noise", "guider", "sampler", "sigmas", "latent_image"};
    struct value *v[] = {noise, guider, smp, value_ref(sigma_step), value_ref(s->lat)};
    struct value *out[4] = {0};
    int rc = run_node(&sd_sampler_custom_advanced, names, v, 5, out);
    value_unref(out[0]);
    return rc < 0 ? NULL : out[1]; /* denoised_output */
}

/* One cond's own x0 (BasicGuider), in the sampler's space (·scale_factor), as doubles. */
static double *own_x0(const struct setup *s, struct value *model, struct value *cond, size_t *n)
{
    const char *names[] = {"model", "conditioning"};
    struct value *v[] = {value_ref(model), value_ref(cond)};
    struct value *g = run1(&sd_basic_guider, names, v, 2);
    struct value *d = g ? run_advanced(g, s) : NULL;
    const struct sd_latent *l = sd_latent_of(d);
    if (!l)
        return NULL;
    float sf = sd_model_of(model)->latent->scale_factor;
    *n = (size_t)(l->b * l->c * l->h * l->w);
    double *x = malloc(*n * sizeof *x);
    for (size_t i = 0; i < *n; i++)
        x[i] = (double)l->samples[i] * sf;
    value_unref(d);
    return x;
}

/* max |guided·sf − want| / max |want| */
static double mix_err(struct value *d, const double *want, size_t n, float sf)
{
    const struct sd_latent *l = sd_latent_of(d);
    if (!l || (size_t)(l->b * l->c * l->h * l->w) != n)
        return INFINITY;
    double m = 0, w = 0;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs((double)l->samples[i] * sf - want[i]));
        w = fmax(w, fabs(want[i]));
    }
    return m / w;
}

static struct value *dual_guider(struct value *model, const struct setup *s, double c1,
                                 double c2, const char *style)
{
    const char *names[] = {"model", "cond1", "cond2", "negative", "cfg_conds",
                           "cfg_cond2_negative", "style"};
    struct value *v[] = {value_ref(model), value_ref(s->pos), value_ref(s->mid),
                         value_ref(s->neg), value_new_float(c1), value_new_float(c2),
                         value_new_string(style)};
    return run1(&sd_dual_cfg_guider, names, v, 7);
}

static struct value *perp_guider(struct value *model, const struct setup *s, double cfg,
                                 double ns)
{
    const char *names[] = {"model", "positive", "negative", "empty_conditioning", "cfg",
                           "neg_scale"};
    struct value *v[] = {value_ref(model), value_ref(s->pos), value_ref(s->neg),
                         value_ref(s->mid), value_new_float(cfg), value_new_float(ns)};
    return run1(&sd_perp_neg_guider, names, v, 6);
}

static struct value *cfg_guider(struct value *model, struct value *pos, struct value *neg,
                                double cfg)
{
    const char *names[] = {"model", "positive", "negative", "cfg"};
    struct value *v[] = {value_ref(model), value_ref(pos), value_ref(neg), value_new_float(cfg)};
    return run1(&sd_cfg_guider, names, v, 4);
}

/* RescaleCFG's mix in float64 at x (the sampler's input) and sigma, into out. */
static void ref_rescale_d(const double *x, double sigma, const double *c, const double *u,
                          double cfg, double mult, size_t n, double *out)
{
    double s1 = sigma * sigma + 1.0, *vc = malloc(n * sizeof *vc), *vx = malloc(n * sizeof *vx);
    double mc = 0, mx = 0, sc = 0, sx = 0;
    for (size_t i = 0; i < n; i++) {
        vc[i] = (x[i] / s1 - c[i]) * sqrt(s1) / sigma;
        double vu = (x[i] / s1 - u[i]) * sqrt(s1) / sigma;
        vx[i] = vu + cfg * (vc[i] - vu);
        mc += vc[i] / n;
        mx += vx[i] / n;
    }
    for (size_t i = 0; i < n; i++) {
        sc += (vc[i] - mc) * (vc[i] - mc);
        sx += (vx[i] - mx) * (vx[i] - mx);
    }
    double ratio = sqrt(sc) / sqrt(sx);
    for (size_t i = 0; i < n; i++) {
        double fin = mult * vx[i] * ratio + (1 - mult) * vx[i];
        out[i] = x[i] - (x[i] - (x[i] / s1 - fin * sigma / sqrt(s1)));
    }
    free(vc);
    free(vx);
}

static void test_guiders(const struct setup *s)
{
    float sg[] = {2.0f, 0.0f};
    sigma_step = sd_sigmas_value(sd_sigmas_new(sg, 2));
    float sf = sd_model_of(s->model)->latent->scale_factor;
    size_t n = 0, n2 = 0, n3 = 0;
    double *p = own_x0(s, s->model, s->pos, &n), *m = own_x0(s, s->model, s->mid, &n2);
    double *g = own_x0(s, s->model, s->neg, &n3);
    ok(p && m && g && n == n2 && n == n3, "each conditioning's own x0 (BasicGuider, one step)");
    if (!p || !m || !g || n != n2 || n != n3)
        goto out;
    double *want = malloc(n * sizeof *want), *tmp = malloc(n * sizeof *tmp);
    double *x = malloc(n * sizeof *x);
    const struct sd_latent *lat = sd_latent_of(s->lat);
    for (size_t i = 0; i < n; i++)
        x[i] = (double)(lat->samples[i] * sf); /* process_latent_in, float32 */

    /* regular: (middle − neg)·cfg2 + neg + (pos − middle)·cfg1 */
    struct value *gd = dual_guider(s->model, s, 5.0, 3.0, "regular");
    struct value *d = gd ? run_advanced(gd, s) : NULL;
    for (size_t i = 0; i < n; i++)
        want[i] = g[i] + (m[i] - g[i]) * 3.0 + (p[i] - m[i]) * 5.0;
    double r = mix_err(d, want, n, sf);
    ok(r < 1e-5, "DualCFGGuider regular: one step's x0 is the float64 mix (rel %.2g)", r);
    value_unref(d);
    gd = dual_guider(s->model, s, 5.0, 3.0, "nested");
    d = gd ? run_advanced(gd, s) : NULL;
    for (size_t i = 0; i < n; i++)
        want[i] = g[i] + 3.0 * ((m[i] + (p[i] - m[i]) * 5.0) - g[i]);
    r = mix_err(d, want, n, sf);
    ok(r < 1e-5, "DualCFGGuider nested: one step's x0 is the float64 mix (rel %.2g)", r);
    value_unref(d);
    /* cfg_cond2_negative 1: the negative is not evaluated (reads 0), middle·1 + (pos − middle)·cfg1 */
    gd = dual_guider(s->model, s, 5.0, 1.0, "regular");
    d = gd ? run_advanced(gd, s) : NULL;
    for (size_t i = 0; i < n; i++)
        want[i] = m[i] + (p[i] - m[i]) * 5.0;
    r = mix_err(d, want, n, sf);
    ok(r < 1e-5, "DualCFGGuider at cfg_cond2_negative 1 skips the negative (rel %.2g)", r);
    value_unref(d);

    /* PerpNeg with s->mid as the empty conditioning */
    for (int k = 0; k < 2; k++) {
        double ns = k ? 0.6 : 1.5, dot = 0, nn = 0;
        for (size_t i = 0; i < n; i++) {
            dot += (p[i] - m[i]) * (g[i] - m[i]);
            nn += (p[i] - m[i]) * (p[i] - m[i]);
        }
        for (size_t i = 0; i < n; i++) {
            double a = p[i] - m[i], b = g[i] - m[i];
            want[i] = m[i] + 6.0 * (a - (b - dot / nn * a) * ns);
        }
        struct value *gp = perp_guider(s->model, s, 6.0, ns);
        d = gp ? run_advanced(gp, s) : NULL;
        r = mix_err(d, want, n, sf);
        ok(r < 1e-5, "PerpNegGuider neg_scale %g: one step's x0 is the float64 mix (rel %.2g)",
           ns, r);
        value_unref(d);
    }
    struct value *gp = perp_guider(s->model, s, 6.0, 0.0);
    struct value *gc = cfg_guider(s->model, s->pos, s->mid, 6.0);
    d = gp ? run_advanced(gp, s) : NULL;
    struct value *dc = gc ? run_advanced(gc, s) : NULL;
    ok(d && dc && latent_eq(d, dc), "PerpNegGuider at neg_scale 0 is CFGGuider(positive, empty) "
       "bit for bit");
    value_unref(d);
    value_unref(dc);

    /* RescaleCFG under CFGGuider and under DualCFGGuider (its cfg_function) */
    const char *rn[] = {"model", "multiplier"};
    struct value *rv[] = {value_ref(s->model), value_new_float(0.7)};
    struct value *rm = run1(&sd_rescale_cfg, rn, rv, 2);
    ok(rm != NULL, "RescaleCFG patches a clone (%s)", rm ? "ok" : last_msg);
    if (rm) {
        gc = cfg_guider(rm, s->pos, s->neg, 6.0);
        d = gc ? run_advanced(gc, s) : NULL;
        ref_rescale_d(x, 2.0, p, g, 6.0, 0.7, n, want);
        r = mix_err(d, want, n, sf);
        ok(r < 1e-5, "RescaleCFG (0.7) under CFGGuider: one step's x0 is the float64 mix "
           "(rel %.2g)", r);
        value_unref(d);
        gd = dual_guider(rm, s, 5.0, 3.0, "regular");
        d = gd ? run_advanced(gd, s) : NULL;
        ref_rescale_d(x, 2.0, m, g, 3.0, 0.7, n, tmp);
        for (size_t i = 0; i < n; i++)
            want[i] = tmp[i] + (p[i] - m[i]) * 5.0;
        r = mix_err(d, want, n, sf);
        ok(r < 1e-5, "RescaleCFG under DualCFGGuider regular (rel %.2g)", r);
        value_unref(d);
        struct value *a = ksampler_with(s, rm, 6.0), *b = ksampler_with(s, s->model, 6.0);
        ok(a && b && !latent_eq(a, b), "KSampler honours RescaleCFG");
        value_unref(a);
        value_unref(b);
        value_unref(rm);
    }
    free(want);
    free(tmp);
    free(x);
out:
    free(p);
    free(m);
    free(g);
    value_unref(sigma_step);
}

static void test_model_patches(const struct setup *s)
{
    struct value *plain = ksampler_with(s, s->model, 6.0);
    ok(plain != NULL, "KSampler runs on the tiny checkpoint (%s)", plain ? "ok" : last_msg);

    struct value *id = freeu_node(&sd_freeu, s->model, 1.0, 1.0, 1.0, 1.0);
    struct value *a = id ? ksampler_with(s, id, 6.0) : NULL;
    ok(a && latent_eq(a, plain), "FreeU at b = s = 1 keeps KSampler's bits");
    value_unref(a);
    value_unref(id);

    static const double knobs[4][4] = {
        {1.1, 1.0, 1.0, 1.0}, {1.0, 1.2, 1.0, 1.0}, {1.0, 1.0, 0.9, 1.0}, {1.0, 1.0, 1.0, 0.2}};
    static const char *const kn[] = {"b1", "b2", "s1", "s2"};
    for (int k = 0; k < 4; k++) {
        for (int v2 = 0; v2 < 2; v2++) {
            struct value *m = freeu_node(v2 ? &sd_freeu_v2 : &sd_freeu, s->model, knobs[k][0],
                                         knobs[k][1], knobs[k][2], knobs[k][3]);
            struct value *r = m ? ksampler_with(s, m, 6.0) : NULL;
            /* The tiny UNet's widths are 32·{1, 2, 3, 3}: h never has 4·model_ch channels,
             * so (b1, s1) match no output block, as ComfyUI's scale_dict lookup. */
            if (k == 0 || k == 2)
                ok(r && latent_eq(r, plain), "%s: %s alone keeps the bits (no 4*model_ch level)",
                   v2 ? "FreeU_V2" : "FreeU", kn[k]);
            else
                ok(r && !latent_eq(r, plain), "%s: %s alone changes the sample",
                   v2 ? "FreeU_V2" : "FreeU", kn[k]);
            value_unref(r);
            value_unref(m);
        }
    }
    /* the patched model is a clone: the input MODEL samples as before */
    struct value *m = freeu_node(&sd_freeu, s->model, 1.1, 1.2, 0.9, 0.2);
    value_unref(m);
    struct value *again = ksampler_with(s, s->model, 6.0);
    ok(again && latent_eq(again, plain), "FreeU leaves its input MODEL unpatched");
    value_unref(again);

    struct value *fake = sd_model_value(sd_model_new(&fake_ops, NULL));
    struct value *r = freeu_node(&sd_freeu, fake, 1.1, 1.2, 0.9, 0.2);
    ok(r == NULL && strstr(last_msg, "cannot be patched"), "FreeU on a MODEL that is not a "
       "checkpoint's UNet is a node error (%s)", last_msg);
    value_unref(fake);
    value_unref(plain);
}

static struct value *encode(struct value *clip, const char *text)
{
    const char *names[] = {"text", "clip"};
    struct value *v[] = {value_new_string(text), value_ref(clip)};
    return run1(&sd_clip_text_encode, names, v, 2);
}

static void test_with_checkpoint(void)
{
    char dir[] = "/tmp/test_sd_guidance.XXXXXX", sub[320], path[400];
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
        const char *en[] = {"width", "height", "batch_size"};
        struct value *ev[] = {value_new_int(64), value_new_int(64), value_new_int(1)};
        s.lat = run1(&sd_empty_latent_image, en, ev, 3);
        s.mid = encode(mcv[1], "a painting of a dog");
        test_model_patches(&s);
        /* the guiders step from a non-zero latent: KSampler's own output */
        struct value *empty = s.lat;
        s.lat = ksampler_with(&s, s.model, 6.0);
        value_unref(empty);
        test_guiders(&s);
        value_unref(s.mid);
        value_unref(s.lat);
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
}

int main(void)
{
    long live0 = alloc_live_count();
    test_ays();
    test_mixes();
    test_fourier();
    test_freeu_scale();
    test_with_checkpoint();
    ok(alloc_live_count() == live0, "no allocation left live (%ld)", alloc_live_count() - live0);
    return harness_done();
}
