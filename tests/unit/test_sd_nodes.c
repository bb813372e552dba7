/*
 * test_sd_nodes — the SD1.5 latent and sampler nodes (nodes/sd_*.c), run
 * directly through node_ctx with an analytic MODEL backend. KSampler is
 * checked against the same pipeline written out with models/sampling calls,
 * so the test covers the node's plumbing: batching of cond/uncond, CFG, noise
 * and seeds, masks, KSamplerAdvanced cutting, progress, previews, interrupt.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "alloc.h"
#include "harness.h"
#include "node_registry.h"
#include "node_run.h"
#include "sampling.h"
#include "sampling_sched.h"
#include "sd_custom_nodes.h"
#include "sd_extra_nodes.h"
#include "sd_latent_ops.h"
#include "sd_nodes.h"
#include "sd_progress.h"
#include "sd_types.h"
#include "sd_upscale.h"

/* ---- running a node ---- */

struct run {
    struct value *in[16];
    struct value *out[4];
    struct node_ctx c;
    int rc;
};

static void set_in(struct run *r, const struct node_class *cls, const char *name, struct value *v)
{
    int i = node_class_input_index(cls, name);
    ASSERT(i >= 0);
    value_unref(r->in[i]);
    r->in[i] = v;
}

static struct node_env env = {.preview_size = 512};

struct hook_state {
    int progress_calls;
    double last_value, last_max;
    int previews, pw, ph;
    int interrupt_after; /* -1: never */
};

static int hook_progress(void *user, double value, double max, const uint8_t *rgb, int w, int h)
{
    struct hook_state *s = user;
    s->progress_calls++;
    s->last_value = value;
    s->last_max = max;
    if (rgb) {
        s->previews++;
        s->pw = w;
        s->ph = h;
    }
    return s->interrupt_after >= 0 && s->progress_calls > s->interrupt_after ? ERR_INTERRUPTED : 0;
}

static int interrupt_flag; /* what the executor's /interrupt flag would say */

static int hook_interrupted(void *user)
{
    (void)user;
    return interrupt_flag;
}

static void node_go(struct run *r, const struct node_class *cls, struct hook_state *hs)
{
    static struct node_hooks hooks;
    hooks.user = hs;
    hooks.progress = hook_progress;
    hooks.interrupted = hook_interrupted;
    node_ctx_init(&r->c, cls, "1", &env, r->in, r->out);
    r->c.hooks = hs ? &hooks : NULL;
    r->rc = cls->run(&r->c);
}

static void run_release(struct run *r)
{
    node_ctx_release(&r->c);
    for (int i = 0; i < 16; i++)
        value_unref(r->in[i]);
    for (int i = 0; i < 4; i++)
        value_unref(r->out[i]);
    memset(r, 0, sizeof *r);
}

/* ---- an analytic MODEL: eps = x_in · mean(context) + t/1000 ---- */

struct fake {
    int prepared, prep_batch, prep_tokens;
    int calls;
    int max_batch_seen;
    int total_batch;
};

static int fake_eps(void *impl, const float *x_in, int batch, int h, int w, const float *ts,
                    const float *ctx, int tokens, int dim, float *eps, struct err *e)
{
    struct fake *f = impl;
    f->calls++;
    f->total_batch += batch;
    if (batch > f->max_batch_seen)
        f->max_batch_seen = batch;
    size_t per = (size_t)4 * h * w;
    for (int b = 0; b < batch; b++) {
        double m = 0;
        for (int i = 0; i < tokens * dim; i++)
            m += ctx[(size_t)b * tokens * dim + i];
        m /= tokens * dim;
        for (size_t p = 0; p < per; p++)
            eps[b * per + p] = (float)(x_in[b * per + p] * m + ts[b] / 1000.0);
    }
    (void)e;
    return 0;
}

static int fake_prepare(void *impl, struct mm *mm, int max_batch, int h, int w, int max_tokens,
                        struct err *e)
{
    struct fake *f = impl;
    (void)mm;
    (void)h;
    (void)w;
    (void)e;
    f->prepared++;
    f->prep_batch = max_batch;
    f->prep_tokens = max_tokens;
    return 0;
}

static void fake_free(void *impl)
{
    xfree(impl);
}

static const struct sd_model_ops fake_ops = {.apply_eps = fake_eps, .prepare = fake_prepare,
                                             .free = fake_free};

/* The same model as a sampling denoiser, written against models/sampling only. */
struct direct {
    const struct sampling_discrete *ms;
    double mpos, mneg, cfg;
    float *uncond; /* [n] the uncond x0 of the latest call (CFG++ samplers) */
};

static int direct_denoise(void *user, const float *x, float sigma, float *out, size_t n)
{
    struct direct *d = user;
    float *xin = xmalloc(n * sizeof *xin), *p = xmalloc(n * sizeof *p), *q = xmalloc(n * sizeof *q);
    sampling_scale_input(x, sigma, xin, n);
    float t = (float)sampling_discrete_timestep(d->ms, sigma);
    for (size_t i = 0; i < n; i++) {
        float ep = (float)(xin[i] * d->mpos + t / 1000.0);
        float en = (float)(xin[i] * d->mneg + t / 1000.0);
        p[i] = x[i] - ep * sigma;
        q[i] = x[i] - en * sigma;
    }
    if (sampling_cfg_is_one(d->cfg))
        memcpy(out, p, n * sizeof *p);
    else
        sampling_cfg_combine(p, q, d->cfg, out, n);
    memcpy(d->uncond, q, n * sizeof *q);
    xfree(xin);
    xfree(p);
    xfree(q);
    return 0;
}

static struct value *const_cond(float v, int tokens, int dim)
{
    float *c = xmalloc((size_t)tokens * dim * sizeof *c);
    for (int i = 0; i < tokens * dim; i++)
        c[i] = v;
    struct sd_cond *cond = sd_cond_new(c, 1, tokens, dim, NULL, 0);
    xfree(c);
    return sd_cond_value(cond);
}

static struct value *make_latent(int b, int h, int w, float v)
{
    struct sd_latent *l = sd_latent_new(b, 4, h, w);
    for (int64_t i = 0; i < (int64_t)b * 4 * h * w; i++)
        l->samples[i] = v == 0.0f ? 0.0f : v * sinf((float)i);
    return sd_latent_value(l);
}

/* ---- tests ---- */

static void test_latent_nodes(void)
{
    struct run r = {0};
    set_in(&r, &sd_empty_latent_image, "width", value_new_int(64));
    set_in(&r, &sd_empty_latent_image, "height", value_new_int(48));
    set_in(&r, &sd_empty_latent_image, "batch_size", value_new_int(2));
    node_go(&r, &sd_empty_latent_image, NULL);
    const struct sd_latent *l = sd_latent_of(r.out[0]);
    int zero = l != NULL;
    for (int i = 0; zero && i < 2 * 4 * 6 * 8; i++)
        zero = l->samples[i] == 0.0f;
    ok(r.rc == 0 && l && l->b == 2 && l->c == 4 && l->h == 6 && l->w == 8 && zero,
       "EmptyLatentImage 64x48x2 -> zeros [2,4,6,8]");
    run_release(&r);

    /* Upscale every method: a constant latent stays constant, sizes follow ComfyUI. */
    for (int m = 0; sd_upscale_methods[m]; m++) {
        struct sd_latent *src = sd_latent_new(1, 4, 6, 8);
        for (int i = 0; i < 4 * 6 * 8; i++)
            src->samples[i] = (float)(1 + i / 48); /* channel k = k + 1 */
        memset(&r, 0, sizeof r);
        set_in(&r, &sd_latent_upscale, "samples", sd_latent_value(src));
        set_in(&r, &sd_latent_upscale, "upscale_method", value_new_string(sd_upscale_methods[m]));
        set_in(&r, &sd_latent_upscale, "width", value_new_int(128));
        set_in(&r, &sd_latent_upscale, "height", value_new_int(0));
        set_in(&r, &sd_latent_upscale, "crop", value_new_string("disabled"));
        node_go(&r, &sd_latent_upscale, NULL);
        const struct sd_latent *o = sd_latent_of(r.out[0]);
        int good = r.rc == 0 && o && o->h == 12 && o->w == 16; /* 96x128 px keeps 6:8 */
        for (int i = 0; good && i < 4 * 12 * 16; i++)
            good = fabsf(o->samples[i] - (float)(1 + i / 192)) < 1e-5f;
        ok(good, "LatentUpscale %s, width 128 height 0: 16x12 latent, constants kept",
           sd_upscale_methods[m]);
        run_release(&r);
    }
    /* Known values: bilinear 1x2 -> 1x4 row (align_corners=False), nearest-exact 2 -> 4. */
    float row[2] = {0.0f, 1.0f}, o4[4];
    struct err e = {0};
    sd_upscale(row, 1, 1, 1, 2, "bilinear", 0, o4, 1, 4, &e);
    ok(o4[0] == 0.0f && o4[1] == 0.25f && o4[2] == 0.75f && o4[3] == 1.0f,
       "bilinear 2->4: 0 .25 .75 1");
    sd_upscale(row, 1, 1, 1, 2, "nearest-exact", 0, o4, 1, 4, &e);
    ok(o4[0] == 0.0f && o4[1] == 0.0f && o4[2] == 1.0f && o4[3] == 1.0f, "nearest-exact 2->4");
    float area_in[4] = {1, 3, 5, 7}, a2[2];
    sd_upscale(area_in, 1, 1, 1, 4, "area", 0, a2, 1, 2, &e);
    ok(a2[0] == 2.0f && a2[1] == 6.0f, "area 4->2 averages pairs");
    /* bislerp keeps the norm of channel vectors that only rotate. */
    float vec[2 * 1 * 2] = {1, 0, 0, 1}; /* c=2, h=1, w=2: pixel0 (1,0), pixel1 (0,1) */
    float sl[2 * 1 * 3];
    EXPECT_OK(sd_upscale(vec, 1, 2, 1, 2, "bislerp", 0, sl, 1, 3, &e));
    double nmid = sqrt(sl[1] * sl[1] + sl[4] * sl[4]);
    ok(fabs(nmid - 1.0) < 1e-5 && fabsf(sl[1] - sl[4]) < 1e-5f,
       "bislerp midpoint of (1,0),(0,1) is on the unit circle (%.4f, %.4f)", sl[1], sl[4]);
    ok(sd_upscale(row, 1, 1, 1, 2, "lanczos", 0, o4, 1, 4, &e) == ERR_INVALID,
       "unknown method rejected: %s", e.msg);

    /* LatentUpscaleBy 1.5: 8x6 -> 12x9; the noise mask travels along. */
    struct sd_latent *src = sd_latent_new(1, 4, 6, 8);
    src->noise_mask = xcalloc(16, sizeof(float));
    src->mb = 1;
    src->mh = 4;
    src->mw = 4;
    memset(&r, 0, sizeof r);
    set_in(&r, &sd_latent_upscale_by, "samples", sd_latent_value(src));
    set_in(&r, &sd_latent_upscale_by, "upscale_method", value_new_string("nearest-exact"));
    set_in(&r, &sd_latent_upscale_by, "scale_by", value_new_float(1.5));
    node_go(&r, &sd_latent_upscale_by, NULL);
    const struct sd_latent *o = sd_latent_of(r.out[0]);
    ok(r.rc == 0 && o && o->w == 12 && o->h == 9 && o->noise_mask && o->mh == 4,
       "LatentUpscaleBy 1.5: 12x9, noise_mask kept");
    run_release(&r);

    /* SetLatentNoiseMask: MASK [1,16,16] -> noise_mask [1,1,16,16], samples copied. */
    memset(&r, 0, sizeof r);
    struct value *mask = value_new_mask(1, 16, 16);
    for (size_t i = 0; i < mask->numel; i++)
        mask->data[i] = (i % 16) < 8 ? 0.0f : 1.0f;
    struct value *lat = make_latent(1, 2, 2, 1.0f);
    set_in(&r, &sd_set_latent_noise_mask, "samples", lat);
    set_in(&r, &sd_set_latent_noise_mask, "mask", mask);
    node_go(&r, &sd_set_latent_noise_mask, NULL);
    o = sd_latent_of(r.out[0]);
    ok(r.rc == 0 && o && o->mb == 1 && o->mh == 16 && o->mw == 16 && o->noise_mask[9] == 1.0f &&
           memcmp(o->samples, sd_latent_of(lat)->samples, 16 * sizeof(float)) == 0,
       "SetLatentNoiseMask: mask [1,1,16,16] attached, samples copied");
    run_release(&r);
}

struct ks {
    const char *sampler, *scheduler;
    int steps;
    double cfg, denoise;
    uint64_t seed;
    int advanced, add_noise, start, end, leftover;
    int batch;
    int max_batch;
    int interrupt_after;
    int pos_tokens; /* 0 = 77 */
};

/* Run KSampler(Advanced) on the fake model; returns the node rc, fills out (n floats). */
static int run_ks(const struct ks *k, struct value *latent, float *out, struct fake **fk,
                  struct hook_state *hs)
{
    struct fake *f = xcalloc(1, sizeof *f);
    struct sd_model *m = sd_model_new(&fake_ops, f);
    m->max_batch = k->max_batch;
    const struct node_class *cls = k->advanced ? &sd_ksampler_advanced : &sd_ksampler;
    struct run r = {0};
    set_in(&r, cls, "model", sd_model_value(m));
    set_in(&r, cls, k->advanced ? "noise_seed" : "seed", value_new_u64(k->seed));
    set_in(&r, cls, "steps", value_new_int(k->steps));
    set_in(&r, cls, "cfg", value_new_float(k->cfg));
    set_in(&r, cls, "sampler_name", value_new_string(k->sampler));
    set_in(&r, cls, "scheduler", value_new_string(k->scheduler));
    set_in(&r, cls, "positive", const_cond(0.9f, k->pos_tokens ? k->pos_tokens : 77, 8));
    set_in(&r, cls, "negative", const_cond(0.5f, 77, 8));
    set_in(&r, cls, "latent_image", value_ref(latent));
    if (k->advanced) {
        set_in(&r, cls, "add_noise", value_new_string(k->add_noise ? "enable" : "disable"));
        set_in(&r, cls, "start_at_step", value_new_int(k->start));
        set_in(&r, cls, "end_at_step", value_new_int(k->end));
        set_in(&r, cls, "return_with_leftover_noise",
               value_new_string(k->leftover ? "enable" : "disable"));
    } else {
        set_in(&r, cls, "denoise", value_new_float(k->denoise));
    }
    node_go(&r, cls, hs);
    int rc = r.rc;
    const struct sd_latent *o = sd_latent_of(r.out[0]);
    if (rc == 0 && o)
        memcpy(out, o->samples, (size_t)(o->b * o->c * o->h * o->w) * sizeof *out);
    if (fk) {
        **fk = *f;
    }
    run_release(&r);
    return rc;
}

/* The same run through models/sampling directly. */
static int run_direct(const struct ks *k, const struct sd_latent *lat, float *out)
{
    struct sampling_discrete ms;
    sampling_discrete_init(&ms, 0.00085, 0.012);
    enum sampling_sampler s;
    enum sampling_scheduler sc;
    sampling_sampler_from_name(k->sampler, &s);
    sampling_scheduler_from_name(k->scheduler, &sc);
    float *sig;
    int ns;
    struct err e = {0};
    sampling_sigmas_for_ksampler(&ms, sc, sampling_sampler_discards_penultimate(s), k->steps,
                                 k->advanced ? 1.0 : k->denoise, k->advanced ? k->start : -1,
                                 k->advanced ? k->end : -1, k->advanced ? !k->leftover : 0, &sig,
                                 &ns, &e);
    size_t per = (size_t)(4 * lat->h * lat->w), n = per * lat->b;
    float *noise = xcalloc(n, sizeof *noise);
    if (!k->advanced || k->add_noise)
        sampling_prepare_noise(k->seed, lat->batch_index, lat->n_batch_index, (int)lat->b, per,
                               SAMPLING_RANDN_V2, noise, &e);
    float *mask = NULL;
    if (lat->noise_mask) {
        mask = xmalloc(n * sizeof *mask);
        sampling_mask_prepare(lat->noise_mask, (int)lat->mb, (int)lat->mh, (int)lat->mw,
                              (int)lat->b, 4, (int)lat->h, (int)lat->w, mask, &e);
    }
    struct direct d = {.ms = &ms, .mpos = 0.9f, .mneg = 0.5f, .cfg = k->cfg,
                       .uncond = xcalloc(n, sizeof(float))};
    struct sampling_request req = {.latent_scale = 0.18215f, .sampler = s, .sigmas = sig, .n_sigmas = ns, .noise = noise,
                                   .seed = k->seed, .variant = SAMPLING_RANDN_V2,
                                   .noise_mask = mask, .sigma_max = ms.sigma_max,
                                   .denoise = direct_denoise, .denoise_user = &d,
                                   .uncond_x0 = d.uncond,
                                   /* sample_sa_solver's default: percent 0.2 .. 0.8 */
                                   .tau_sigma_start = sampling_percent_to_sigma(&ms, 0.2),
                                   .tau_sigma_end = sampling_percent_to_sigma(&ms, 0.8)};
    int rc = sampling_sample_latent(&req, lat->samples, out, n, &e);
    xfree(d.uncond);
    xfree(sig);
    xfree(noise);
    xfree(mask);
    return rc;
}

static double maxdiff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void test_ksampler(void)
{
    const int h = 4, w = 4;
    size_t n1 = 4 * h * w;
    float *a = xmalloc(2 * n1 * sizeof *a), *b = xmalloc(2 * n1 * sizeof *b);
    struct value *zero = make_latent(2, h, w, 0.0f);
    struct value *img = make_latent(2, h, w, 0.8f);

    /* The combos list exactly models/sampling's samplers and schedulers. */
    int good = 1;
    const struct node_input_def *sn = &sd_ksampler.inputs[node_class_input_index(&sd_ksampler, "sampler_name")];
    const struct node_input_def *sc = &sd_ksampler.inputs[node_class_input_index(&sd_ksampler, "scheduler")];
    int i;
    for (i = 0; sn->options[i]; i++)
        good &= i < SAMPLING_SAMPLER_COUNT &&
                !strcmp(sn->options[i], sampling_sampler_name((enum sampling_sampler)i));
    good &= i == SAMPLING_SAMPLER_COUNT;
    for (i = 0; sc->options[i]; i++)
        good &= i < SAMPLING_SCHEDULER_COUNT &&
                !strcmp(sc->options[i], sampling_scheduler_name((enum sampling_scheduler)i));
    good &= i == SAMPLING_SCHEDULER_COUNT;
    ok(good, "KSampler combos = the implemented samplers and schedulers, in order");

    /* Every sampler, batch 2, cfg 6: node == direct pipeline; cond+uncond in one call. */
    for (int s = 0; s < SAMPLING_SAMPLER_COUNT; s++) {
        struct ks k = {.sampler = sampling_sampler_name((enum sampling_sampler)s),
                       .scheduler = "karras", .steps = 5, .cfg = 6.0, .denoise = 1.0,
                       .seed = 1234, .interrupt_after = -1};
        struct fake f, *fp = &f;
        struct hook_state hs = {.interrupt_after = -1};
        int rc = run_ks(&k, zero, a, &fp, &hs);
        run_direct(&k, sd_latent_of(zero), b);
        double d = maxdiff(a, b, 2 * n1);
        /* dpm_fast reports per solver step, dpm_adaptive per attempt (clamped to the total). */
        int own_steps = s == SAMPLING_SAMPLER_DPM_FAST || s == SAMPLING_SAMPLER_DPM_ADAPTIVE;
        ok(rc == 0 && d == 0.0 && f.max_batch_seen == 4 && f.prepared == 1 && f.prep_batch == 4 &&
               f.prep_tokens == 77 && (hs.progress_calls == hs.last_max || own_steps) &&
               hs.previews == hs.progress_calls && hs.pw == 512,
           "KSampler %s: equals the direct pipeline (diff %.3g), calls of batch 4 (%d), "
           "%d progress events with previews",
           k.sampler, d, f.max_batch_seen, hs.progress_calls);
    }
    /* cfg 1: only the positive side runs (batch 2). */
    struct ks k = {.sampler = "euler", .scheduler = "normal", .steps = 4, .cfg = 1.0,
                   .denoise = 1.0, .seed = 7, .interrupt_after = -1};
    struct fake f, *fp = &f;
    run_ks(&k, zero, a, &fp, NULL);
    run_direct(&k, sd_latent_of(zero), b);
    ok(f.max_batch_seen == 2 && f.calls == 4 && maxdiff(a, b, 2 * n1) == 0.0,
       "cfg 1: uncond skipped (4 calls of batch %d)", f.max_batch_seen);
    /* cfg 1 with CFG++: the negative still runs (disable_cfg1_optimization), and the
     * step reads its prediction. */
    struct ks kpp = {.sampler = "euler_ancestral_cfg_pp", .scheduler = "normal", .steps = 4,
                     .cfg = 1.0, .denoise = 1.0, .seed = 7, .interrupt_after = -1};
    struct fake fpp, *fpp_p = &fpp;
    run_ks(&kpp, zero, a, &fpp_p, NULL);
    run_direct(&kpp, sd_latent_of(zero), b);
    ok(fpp.max_batch_seen == 4 && maxdiff(a, b, 2 * n1) == 0.0,
       "KSampler euler_ancestral_cfg_pp at cfg 1: batch 4 (%d), equals the direct pipeline",
       fpp.max_batch_seen);
    /* 154-token positive, 77-token negative: two calls per step, same result. */
    k.pos_tokens = 154;
    k.cfg = 3.0;
    run_ks(&k, zero, a, &fp, NULL);
    run_direct(&k, sd_latent_of(zero), b);
    ok(f.calls == 8 && f.max_batch_seen == 2 && f.prep_tokens == 154 && maxdiff(a, b, 2 * n1) == 0.0,
       "154 vs 77 tokens: separate calls of batch 2 (%d calls), same result", f.calls);
    k.pos_tokens = 0;
    /* max_batch 3 splits the 4 evaluations of a step: same result. */
    k.cfg = 3.0;
    k.max_batch = 3;
    run_ks(&k, zero, a, &fp, NULL);
    run_direct(&k, sd_latent_of(zero), b);
    ok(f.max_batch_seen == 3 && f.calls == 8 && f.prep_batch == 3 && maxdiff(a, b, 2 * n1) == 0.0,
       "max_batch 3: prepared for 3, 2 calls per step, same result");
    k.max_batch = 0;
    /* img2img denoise 0.5, and seeds. */
    k.denoise = 0.5;
    run_ks(&k, img, a, NULL, NULL);
    run_direct(&k, sd_latent_of(img), b);
    ok(maxdiff(a, b, 2 * n1) == 0.0, "denoise 0.5 on an image latent equals the pipeline");
    k.seed = 8;
    run_ks(&k, img, b, NULL, NULL);
    ok(maxdiff(a, b, 2 * n1) > 0.01, "another seed gives another result");
    k.denoise = 0.0;
    run_ks(&k, img, a, NULL, NULL);
    ok(memcmp(a, sd_latent_of(img)->samples, 2 * n1 * sizeof *a) == 0,
       "denoise 0: the latent passes through");

    /* KSamplerAdvanced: add_noise disabled, steps 3..7 of 10 with leftover noise. */
    struct ks adv = {.sampler = "dpmpp_2m", .scheduler = "normal", .steps = 10, .cfg = 5.0,
                     .seed = 3, .advanced = 1, .add_noise = 0, .start = 3, .end = 7,
                     .leftover = 1, .interrupt_after = -1};
    struct hook_state hs = {.interrupt_after = -1};
    int rc = run_ks(&adv, img, a, NULL, &hs);
    run_direct(&adv, sd_latent_of(img), b);
    ok(rc == 0 && maxdiff(a, b, 2 * n1) == 0.0 && hs.last_max == 4 && hs.last_value == 4,
       "KSamplerAdvanced 3..7 of 10, no noise, leftover: equals the pipeline, progress 4/4");
    adv.add_noise = 1;
    adv.leftover = 0;
    adv.sampler = "euler_ancestral";
    run_ks(&adv, img, a, NULL, NULL);
    run_direct(&adv, sd_latent_of(img), b);
    ok(maxdiff(a, b, 2 * n1) == 0.0, "KSamplerAdvanced with noise, full denoise: equals the pipeline");

    /* Inpainting through SetLatentNoiseMask's LATENT: kept area unchanged. */
    struct sd_latent *ml = sd_latent_new_like(sd_latent_of(img), 2, 4, h, w);
    memcpy(ml->samples, sd_latent_of(img)->samples, 2 * n1 * sizeof(float));
    ml->noise_mask = xmalloc(32 * 32 * sizeof(float));
    for (int p = 0; p < 32 * 32; p++)
        ml->noise_mask[p] = (p % 32) < 16 ? 0.0f : 1.0f;
    ml->mb = 1;
    ml->mh = 32;
    ml->mw = 32;
    struct value *mv = sd_latent_value(ml);
    struct ks in = {.sampler = "dpmpp_2m", .scheduler = "karras", .steps = 6, .cfg = 4.0,
                    .denoise = 1.0, .seed = 9, .interrupt_after = -1};
    run_ks(&in, mv, a, NULL, NULL);
    run_direct(&in, ml, b);
    double kept = 0;
    for (int bb = 0; bb < 2; bb++)
        for (int c = 0; c < 4; c++)
            for (int y = 0; y < h; y++)
                for (int x = 0; x < 2; x++) {
                    size_t idx = ((size_t)(bb * 4 + c) * h + y) * w + x;
                    kept = fmax(kept, fabs(a[idx] - ml->samples[idx]));
                }
    ok(maxdiff(a, b, 2 * n1) == 0.0 && kept < 1e-6,
       "noise mask: equals the pipeline, unmasked half kept (max diff %.2g)", kept);
    value_unref(mv);

    /* Interrupt from the progress hook: the node fails with ERR_INTERRUPTED. */
    long live = alloc_live_count();
    struct ks it = {.sampler = "heun", .scheduler = "normal", .steps = 10, .cfg = 4.0,
                    .denoise = 1.0, .seed = 9};
    struct hook_state his = {.interrupt_after = 2};
    rc = run_ks(&it, zero, a, NULL, &his);
    ok(rc == ERR_INTERRUPTED && his.progress_calls == 3 && alloc_live_count() == live,
       "interrupt after 2 steps: ERR_INTERRUPTED at step 3, nothing leaked (rc %d)", rc);

    /* The /interrupt flag already set: no model call at all. */
    struct fake fi, *fip = &fi;
    struct hook_state his2 = {.interrupt_after = -1};
    interrupt_flag = 1;
    rc = run_ks(&it, zero, a, &fip, &his2);
    interrupt_flag = 0;
    ok(rc == ERR_INTERRUPTED && fi.calls == 0 && his2.progress_calls == 0,
       "interrupt flag set: stops before the first model call");

    /* Bad input: a latent with 3 channels. */
    struct sd_latent *bad = sd_latent_new(1, 3, 4, 4);
    struct value *bv = sd_latent_value(bad);
    rc = run_ks(&k, bv, a, NULL, NULL);
    ok(rc < 0, "3-channel latent: clear failure");
    value_unref(bv);

    value_unref(zero);
    value_unref(img);
    xfree(a);
    xfree(b);
}

static struct value *run_cond_node(const struct node_class *cls, const char **names,
                                   struct value **vals, int n)
{
    struct run r = {0};
    for (int i = 0; i < n; i++)
        set_in(&r, cls, names[i], vals[i]);
    node_go(&r, cls, NULL);
    struct value *out = r.rc == 0 ? value_ref(r.out[0]) : NULL;
    run_release(&r);
    return out;
}

static void test_conditioning(void)
{
    /* Combine and ZeroOut. */
    struct value *a = const_cond(0.9f, 77, 8), *b = const_cond(0.2f, 77, 8);
    const char *cn[] = {"conditioning_1", "conditioning_2"};
    struct value *cv[] = {value_ref(a), value_ref(b)};
    struct value *comb = run_cond_node(&sd_conditioning_combine, cn, cv, 2);
    const struct sd_cond *cc = sd_cond_of(comb);
    ok(cc && cc->n == 2 && cc->entries[0].cond[5] == 0.9f && cc->entries[1].cond[5] == 0.2f &&
           cc->entries[0].cond != sd_cond_of(a)->entries[0].cond,
       "ConditioningCombine: two entries, deep copies");
    const char *zn[] = {"conditioning"};
    struct value *zv[] = {value_ref(comb)};
    struct value *zero = run_cond_node(&sd_conditioning_zero_out, zn, zv, 1);
    const struct sd_cond *zc = sd_cond_of(zero);
    int allz = zc && zc->n == 2;
    for (int e = 0; allz && e < 2; e++)
        for (int i = 0; i < 77 * 8; i++)
            allz &= zc->entries[e].cond[i] == 0.0f;
    ok(allz && cc->entries[0].cond[0] == 0.9f, "ConditioningZeroOut zeros a copy");

    /* SetArea: 64x64 px at x 64 -> latent area (8, 8, 0, 8). */
    const char *an[] = {"conditioning", "width", "height", "x", "y", "strength"};
    struct value *av[] = {value_ref(b), value_new_int(64), value_new_int(64), value_new_int(64),
                          value_new_int(0), value_new_float(1.0)};
    struct value *area = run_cond_node(&sd_conditioning_set_area, an, av, 6);
    const struct sd_cond *ac = sd_cond_of(area);
    ok(ac && ac->entries[0].has_area && ac->entries[0].area_h == 8 && ac->entries[0].area_w == 8 &&
           ac->entries[0].area_y == 0 && ac->entries[0].area_x == 8 && !sd_cond_of(b)->entries[0].has_area,
       "ConditioningSetArea: area (8, 8, 0, 8) in latent units on a copy");
    struct value *cv2[] = {value_ref(a), value_ref(area)};
    struct value *pos = run_cond_node(&sd_conditioning_combine, cn, cv2, 2);

    /*
     * KSampler with full-area 0.9 + area 0.2 over columns 8..15 of a 16x8
     * latent: one euler step returns the denoiser's x0, which is
     * (x0_a + f·x0_b) / (1 + f) there with the left-border ramp f = (t+1)/rr over
     * rr = min(8, 8 // 4) = 2 columns (get_area_and_mult since ComfyUI f86c724e,
     * "Temporal area composition": the ramp is at most a quarter of the area).
     */
    const int h = 8, w = 16;
    size_t per = (size_t)4 * h * w;
    struct value *lat = make_latent(1, h, w, 0.0f);
    struct fake *f = xcalloc(1, sizeof *f);
    struct sd_model *m = sd_model_new(&fake_ops, f);
    struct run r = {0};
    set_in(&r, &sd_ksampler, "model", sd_model_value(m));
    set_in(&r, &sd_ksampler, "seed", value_new_int(21));
    set_in(&r, &sd_ksampler, "steps", value_new_int(1));
    set_in(&r, &sd_ksampler, "cfg", value_new_float(1.0));
    set_in(&r, &sd_ksampler, "sampler_name", value_new_string("euler"));
    set_in(&r, &sd_ksampler, "scheduler", value_new_string("karras"));
    set_in(&r, &sd_ksampler, "positive", value_ref(pos));
    set_in(&r, &sd_ksampler, "negative", value_ref(b));
    set_in(&r, &sd_ksampler, "latent_image", value_ref(lat));
    set_in(&r, &sd_ksampler, "denoise", value_new_float(1.0));
    node_go(&r, &sd_ksampler, NULL);
    const struct sd_latent *o = sd_latent_of(r.out[0]);
    struct sampling_discrete ms;
    sampling_discrete_init(&ms, 0.00085, 0.012);
    float *sig, *noise = xmalloc(per * sizeof *noise);
    int ns;
    struct err e = {0};
    sampling_sigmas_for_ksampler(&ms, SAMPLING_SCHEDULER_KARRAS, 0, 1, 1.0, -1, -1, 0, &sig, &ns, &e);
    sampling_prepare_noise(21, NULL, 0, 1, per, SAMPLING_RANDN_V2, noise, &e);
    double s0 = sig[0], t = sampling_discrete_timestep(&ms, sig[0]), worst = 0, scale = 0;
    double ma = (double)0.9f, mb = (double)0.2f;
    for (int c = 0; c < 4; c++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                size_t i = ((size_t)c * h + y) * w + x;
                double xt = noise[i] * (double)sqrtf(1.0f + sig[0] * sig[0]);
                double xin = xt / sqrt(s0 * s0 + 1);
                double x0a = xt - (xin * ma + t / 1000) * s0;
                double x0b = xt - (xin * mb + t / 1000) * s0;
                double den = x0a;
                if (x >= 8) {
                    double fr = x - 8 < 2 ? (x - 8 + 1) / 2.0 : 1.0;
                    den = (x0a + fr * x0b) / (1 + fr);
                }
                double want = den / 0.18215;
                scale = fmax(scale, fabs(want));
                if (o)
                    worst = fmax(worst, fabs(o->samples[i] - want));
            }
    ok(r.rc == 0 && o && worst < 1e-4 * fmax(scale, 1.0),
       "area conditioning: feathered average of the entries (max err %.3g of %.3g)", worst, scale);
    ok(f->max_batch_seen == 1 && f->calls == 2,
       "full and area entries run as separate calls (%d calls)", f->calls);
    run_release(&r);
    xfree(sig);
    xfree(noise);
    value_unref(lat);
    value_unref(pos);
    value_unref(area);
    value_unref(zero);
    value_unref(comb);
    value_unref(a);
    value_unref(b);
}

/* KSampler, one euler/karras step at `cfg` on a zero 8x16 latent; *fk (optional) gets the
 * fake model's call counts. Takes over the reference to pos; neg is borrowed. */
static struct value *ks_one_step_cfg(struct value *pos, struct value *neg, double cfg, struct fake *fk)
{
    struct run r = {0};
    struct fake *f = xcalloc(1, sizeof *f);
    set_in(&r, &sd_ksampler, "model", sd_model_value(sd_model_new(&fake_ops, f)));
    set_in(&r, &sd_ksampler, "seed", value_new_int(21));
    set_in(&r, &sd_ksampler, "steps", value_new_int(1));
    set_in(&r, &sd_ksampler, "cfg", value_new_float(cfg));
    set_in(&r, &sd_ksampler, "sampler_name", value_new_string("euler"));
    set_in(&r, &sd_ksampler, "scheduler", value_new_string("karras"));
    set_in(&r, &sd_ksampler, "positive", pos);
    set_in(&r, &sd_ksampler, "negative", value_ref(neg));
    set_in(&r, &sd_ksampler, "latent_image", make_latent(1, 8, 16, 0.0f));
    set_in(&r, &sd_ksampler, "denoise", value_new_float(1.0));
    node_go(&r, &sd_ksampler, NULL);
    struct value *out = r.rc == 0 ? value_ref(r.out[0]) : NULL;
    if (fk)
        *fk = *f;
    run_release(&r);
    return out;
}

/* The same at cfg 1: the denoiser's x0 / 0.18215. */
static struct value *ks_one_step(struct value *pos, struct value *neg)
{
    return ks_one_step_cfg(pos, neg, 1.0, NULL);
}

static int latents_equal(const struct value *a, const struct value *b)
{
    const struct sd_latent *x = sd_latent_of(a), *y = sd_latent_of(b);
    return x && y && !memcmp(x->samples, y->samples, (size_t)(4 * 8 * 16) * sizeof(float));
}

/*
 * The float64 reference of ks_one_step for two constant entries (0.9 and 0.2) with
 * weights wa, wb at each latent pixel: (x0_a·wa + x0_b·wb) / (wa + wb), as
 * calc_cond_batch averages them; the fake model's x0 is x − (x_in·m + t/1000)·σ.
 */
static double ref_two_entries(const struct value *got, double (*wb)(int y, int x))
{
    const int h = 8, w = 16;
    size_t per = (size_t)4 * h * w;
    struct sampling_discrete ms;
    sampling_discrete_init(&ms, 0.00085, 0.012);
    float *sig, *noise = xmalloc(per * sizeof *noise);
    int ns;
    struct err e = {0};
    sampling_sigmas_for_ksampler(&ms, SAMPLING_SCHEDULER_KARRAS, 0, 1, 1.0, -1, -1, 0, &sig, &ns, &e);
    sampling_prepare_noise(21, NULL, 0, 1, per, SAMPLING_RANDN_V2, noise, &e);
    double s0 = sig[0], t = sampling_discrete_timestep(&ms, sig[0]), worst = 0, scale = 0;
    const struct sd_latent *o = sd_latent_of(got);
    for (int c = 0; c < 4; c++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                size_t i = ((size_t)c * h + y) * w + x;
                double xt = noise[i] * (double)sqrtf(1.0f + sig[0] * sig[0]);
                double xin = xt / sqrt(s0 * s0 + 1);
                double x0a = xt - (xin * (double)0.9f + t / 1000) * s0;
                double x0b = xt - (xin * (double)0.2f + t / 1000) * s0;
                double b = wb(y, x), want = (x0a + x0b * b) / (1 + b) / 0.18215;
                scale = fmax(scale, fabs(want));
                worst = fmax(worst, o ? fabs(o->samples[i] - want) : INFINITY);
            }
    xfree(sig);
    xfree(noise);
    return worst / fmax(scale, 1.0);
}

static double half_mask_weight(int y, int x)
{
    (void)y;
    return x >= 8 ? 0.5 : 0.0;
}

static struct value *mask_value(int h, int w, int edge)
{
    struct value *m = value_new_mask(1, h, w);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            m->data[y * w + x] = x >= edge ? 1.0f : 0.0f;
    return m;
}

static struct value *set_mask(struct value *cond, struct value *mask, const char *area)
{
    const char *n[] = {"conditioning", "mask", "strength", "set_cond_area"};
    struct value *v[] = {value_ref(cond), mask, value_new_float(0.5), value_new_string(area)};
    return run_cond_node(&sd_conditioning_set_mask, n, v, 4);
}

static struct value *combine2(struct value *a, struct value *b)
{
    const char *n[] = {"conditioning_1", "conditioning_2"};
    struct value *v[] = {a, b};
    return run_cond_node(&sd_conditioning_combine, n, v, 2);
}

static struct value *set_range(struct value *cond, double start, double end)
{
    const char *n[] = {"conditioning", "start", "end"};
    struct value *v[] = {value_ref(cond), value_new_float(start), value_new_float(end)};
    return run_cond_node(&sd_conditioning_set_timestep_range, n, v, 3);
}

static void test_conditioning_utils(void)
{
    struct value *a = const_cond(0.9f, 77, 8), *b = const_cond(0.2f, 77, 8);
    struct value *b10 = const_cond(0.2f, 10, 8), *b154 = const_cond(0.2f, 154, 8);

    /* Average: t1·s + t0·(1 − s), t0 cut or zero-padded to t1's tokens. */
    const char *avn[] = {"conditioning_to", "conditioning_from", "conditioning_to_strength"};
    struct value *avv[] = {value_ref(a), value_ref(b154), value_new_float(0.25)};
    struct value *av = run_cond_node(&sd_conditioning_average, avn, avv, 3);
    struct value *avv2[] = {value_ref(a), value_ref(b10), value_new_float(0.25)};
    struct value *av2 = run_cond_node(&sd_conditioning_average, avn, avv2, 3);
    const struct sd_cond *c1 = sd_cond_of(av), *c2 = sd_cond_of(av2);
    ok(c1 && c2 && c1->entries[0].tokens == 77 &&
           fabs(c1->entries[0].cond[76 * 8] - (0.9 * 0.25 + 0.2 * 0.75)) < 1e-6 &&
           fabs(c2->entries[0].cond[9 * 8] - (0.9 * 0.25 + 0.2 * 0.75)) < 1e-6 &&
           fabs(c2->entries[0].cond[10 * 8] - 0.9 * 0.25) < 1e-6,
       "ConditioningAverage 0.25: cut to 77 tokens, zeros past a shorter source");
    /* Concat: the source's tokens after the entry's own. */
    const char *ccn[] = {"conditioning_to", "conditioning_from"};
    struct value *ccv[] = {value_ref(a), value_ref(b10)};
    struct value *cat = run_cond_node(&sd_conditioning_concat, ccn, ccv, 2);
    const struct sd_cond *c3 = sd_cond_of(cat);
    ok(c3 && c3->entries[0].tokens == 87 && c3->entries[0].cond[76 * 8] == 0.9f &&
           c3->entries[0].cond[77 * 8] == 0.2f && c3->entries[0].cond[86 * 8 + 7] == 0.2f,
       "ConditioningConcat: 77 + 10 tokens");
    const char *stn[] = {"conditioning", "strength"};
    struct value *stv[] = {value_ref(a), value_new_float(0.3)};
    struct value *st = run_cond_node(&sd_conditioning_set_area_strength, stn, stv, 2);
    ok(sd_cond_of(st) && sd_cond_of(st)->entries[0].strength == 0.3f && sd_cond_of(a)->entries[0].strength == 1.0f,
       "ConditioningSetAreaStrength sets the strength on a copy");

    /* Area percentage: x 0.5, width 0.5 of a 16-wide latent is the pixel area (8, 8, 0, 8). */
    const char *an[] = {"conditioning", "width", "height", "x", "y", "strength"};
    struct value *apv[] = {value_ref(b), value_new_float(0.5), value_new_float(1.0), value_new_float(0.5),
                           value_new_float(0.0), value_new_float(1.0)};
    struct value *pct = run_cond_node(&sd_conditioning_set_area_percentage, an, apv, 6);
    struct value *arv[] = {value_ref(b), value_new_int(64), value_new_int(64), value_new_int(64),
                           value_new_int(0), value_new_float(1.0)};
    struct value *px = run_cond_node(&sd_conditioning_set_area, an, arv, 6);
    struct value *o_pct = ks_one_step(combine2(value_ref(a), pct), a);
    struct value *o_px = ks_one_step(combine2(value_ref(a), value_ref(px)), a);
    ok(o_pct && latents_equal(o_pct, o_px),
       "ConditioningSetAreaPercentage (0.5, 1, 0.5, 0) samples as the area (8, 8, 0, 8)");

    /* Masks: weight mask·0.5 instead of feathering; another size is resized bilinearly. */
    struct value *o_mask = ks_one_step(combine2(value_ref(a), set_mask(b, mask_value(8, 16, 8), "default")), a);
    double rel = ref_two_entries(o_mask, half_mask_weight);
    ok(o_mask && rel < 1e-5, "ConditioningSetMask strength 0.5: (x0_a + 0.5 m x0_b) / (1 + 0.5 m) (rel err %.2g)",
       rel);
    struct value *o_big = ks_one_step(combine2(value_ref(a), set_mask(b, mask_value(64, 128, 64), "default")), a);
    ok(o_big && latents_equal(o_big, o_mask), "a 128x64 mask resizes to the latent's 16x8 (bilinear)");
    struct value *o_bounds =
        ks_one_step(combine2(value_ref(a), set_mask(b, mask_value(8, 16, 8), "mask bounds")), a);
    rel = ref_two_entries(o_bounds, half_mask_weight);
    ok(o_bounds && rel < 1e-5, "mask bounds: the entry runs on its 8x8 box, same average (rel err %.2g)", rel);

    /* Timestep ranges: at σ_max only the entry whose range starts at 0 runs. */
    struct value *o_range = ks_one_step(combine2(set_range(a, 0.0, 0.5), set_range(b, 0.5, 1.0)), a);
    struct value *o_a = ks_one_step(value_ref(a), a);
    struct value *o_both = ks_one_step(combine2(set_range(a, 0.0, 1.0), value_ref(b)), a);
    ok(o_range && latents_equal(o_range, o_a) && !latents_equal(o_both, o_a),
       "ConditioningSetTimestepRange: 0.5..1 is skipped at the first step, 0..1 is not");

    /* Same-area twins (process_conds): the negative side gets the positive area entry's
     * twin with its own text, run with the area entry in one call; at cfg 1 a negative
     * area gives the positive side a twin, though the negative side is never run. */
    struct fake fk = {0};
    struct value *o_tw = ks_one_step_cfg(combine2(value_ref(a), value_ref(px)), a, 7.5, &fk);
    ok(o_tw && fk.calls == 2 && fk.total_batch == 4,
       "cfg 7.5, a pixel-area positive: the negative gets its twin (%d calls, %d samples)", fk.calls,
       fk.total_batch);
    struct value *o_tw1 = ks_one_step_cfg(value_ref(a), px, 1.0, &fk);
    ok(o_tw1 && fk.calls == 2 && fk.total_batch == 2,
       "cfg 1, a pixel-area negative: the positive gets its twin, the negative is not run (%d calls)",
       fk.calls);

    struct value *all[] = {a, b, b10, b154, av, av2, cat, st, o_pct, o_px, o_mask, o_big, o_bounds, o_range, o_a, o_both, o_tw, o_tw1, px};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        value_unref(all[i]);
}

static void test_progress_bar(void)
{
    char b[256];
    sd_progress_format(b, sizeof b, 8, 20, 2.08);
    EXPECT_STR(b, " 40%|████      | 8/20 [00:02<00:03,  3.85it/s]");
    sd_progress_format(b, sizeof b, 0, 20, 0.0);
    EXPECT_STR(b, "  0%|          | 0/20 [00:00<?, ?it/s]");
    sd_progress_format(b, sizeof b, 3, 4, 6.0);
    EXPECT_STR(b, " 75%|███████▌  | 3/4 [00:06<00:02,  2.00s/it]");
    sd_progress_format(b, sizeof b, 20, 20, 3661.0);
    EXPECT_STR(b, "100%|██████████| 20/20 [1:01:01<00:00, 183.05s/it]");
}

static void test_register(void)
{
    struct node_registry *r = node_registry_new();
    nodes_sd_register(r);
    ok(node_registry_find(r, "KSampler") == &sd_ksampler &&
           node_registry_find(r, "KSamplerAdvanced") == &sd_ksampler_advanced &&
           node_registry_find(r, "EmptyLatentImage") && node_registry_find(r, "LatentUpscale") &&
           node_registry_find(r, "LatentUpscaleBy") && node_registry_find(r, "SetLatentNoiseMask") &&
           node_registry_find(r, "ConditioningCombine") &&
           node_registry_find(r, "ConditioningSetArea") &&
           node_registry_find(r, "ConditioningZeroOut") &&
           node_registry_find(r, "CheckpointLoaderSimple") && node_registry_find(r, "CLIPTextEncode") &&
           node_registry_find(r, "CLIPSetLastLayer") && node_registry_find(r, "VAEDecode") &&
           node_registry_find(r, "VAEDecodeTiled") && node_registry_find(r, "VAEEncode") &&
           node_registry_find(r, "LoraLoader") && node_registry_find(r, "LoraLoaderModelOnly") &&
           node_registry_find(r, "VAEEncodeForInpaint") && node_registry_find(r, "VAEEncodeTiled") &&
           node_registry_find(r, "VAELoader") == &sd_vae_loader &&
           node_registry_find(r, "SamplerCustomAdvanced") == &sd_sampler_custom_advanced &&
           node_registry_find(r, "LatentBatch") == &sd_latent_batch &&
           node_registry_find(r, "CLIPTextEncodeSDXL") == &sd_clip_text_encode_sdxl &&
           node_registry_find(r, "CLIPTextEncodeSDXLRefiner") == &sd_clip_text_encode_sdxl_refiner &&
           /* nodes.py 30 + GLIGENLoader and GLIGENTextBoxApply, nodes_model_merging 11,
            * nodes_clip_sdxl 2, nodes_controlnet 1, nodes_model_merging_model_specific 3 */
           node_registry_count(r) == 30 + 2 + 11 + 2 + 1 + 3 + SD_CUSTOM_N_CLASSES +
                                          SD_LATENT_OPS_N_CLASSES + SD_EXTRA_N_CLASSES +
                                          SD_CONCAT_COND_N_CLASSES,
       "nodes_sd_register adds the twenty classes, the custom-sampling and latent-op families "
       "and CLIPTextEncodeSDXL(Refiner)");
    EXPECT_EQ(node_class_input_index(&sd_ksampler, "denoise"), 9);
    EXPECT_EQ(node_class_input_index(&sd_ksampler_advanced, "return_with_leftover_noise"), 12);
    node_registry_free(r);
}

int main(void)
{
    long live = alloc_live_count();
    test_register();
    test_latent_nodes();
    test_ksampler();
    test_conditioning();
    test_conditioning_utils();
    test_progress_bar();
    ok(alloc_live_count() == live, "no allocation left live (%ld)", alloc_live_count() - live);
    return harness_done();
}
