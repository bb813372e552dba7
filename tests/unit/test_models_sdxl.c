/*
 * test_models_sdxl — the SDXL base family on the shared model layer (issue 13 step 2):
 * its canonical layout is exactly shared/data/sdxl_keys.tsv (ComfyUI's own key list,
 * OpenCLIP names for bigG), a tiny SDXL checkpoint written by the generator in that
 * naming is detected as SDXL and loads (OpenCLIP names mapped, position_ids and
 * logit_scale ignored), and its two text encoders and its UNet (with the ADM vector)
 * run on the cpu device with finite results. Numerics against the float64 reference:
 * test_models_sdxl_ref; the memory planner on the SDXL UNet: test_memory_sdxl.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "checkpoint.h"
#include "ckpt_gen.h"
#include "clip_tokenizer.h"
#include "family.h"
#include "harness.h"
#include "memmgr.h"
#include "tensor.h"
#include "text_encoder.h"
#include "unet.h"

/* ---- the canonical layout against the shipped key list ---- */

struct tsv_key {
    char name[192];
    char shape[64]; /* "[a,b]" as in the tsv */
    int seen;
};

struct tsv {
    struct tsv_key *v;
    int n, bad;
};

static int load_tsv(const char *path, struct tsv *t)
{
    FILE *f = fopen(path, "r");
    char line[512];
    if (!f)
        return -1;
    t->v = xcalloc(4096, sizeof(*t->v));
    while (fgets(line, sizeof(line), f) && t->n < 4096) {
        char dt[16];
        if (line[0] == '#' ||
            sscanf(line, "%191s %15s %63s", t->v[t->n].name, dt, t->v[t->n].shape) != 3)
            continue;
        t->n++;
    }
    fclose(f);
    return 0;
}

static void shape_str(int ndim, const int64_t *s, char *out, size_t size)
{
    size_t n = (size_t)snprintf(out, size, "[");
    for (int i = 0; i < ndim; i++)
        n += (size_t)snprintf(out + n, size - n, "%s%lld", i ? "," : "", (long long)s[i]);
    snprintf(out + n, size - n, "]");
}

static void check_key(struct tsv *t, const char *name, const char *shape)
{
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->v[i].name, name) == 0) {
            t->v[i].seen++;
            if (strcmp(t->v[i].shape, shape) != 0 && t->bad++ < 5)
                printf("# %s: layout %s, tsv %s\n", name, shape, t->v[i].shape);
            return;
        }
    if (t->bad++ < 5)
        printf("# layout key '%s' is not in the tsv\n", name);
}

struct layout_check {
    struct tsv t;
    const struct model_config *c;
};

static void on_canon_key(void *user, const struct model_key *k)
{
    struct layout_check *lc = user;
    char name[192], rel[160], shape[64];
    int naming = k->comp >= MODEL_CLIP ? lc->c->text[k->comp - MODEL_CLIP].naming : TEXT_NAMING_HF;
    text_name_to_file(naming, k->name + k->rel, rel, sizeof(rel));
    snprintf(name, sizeof(name), "%.*s%s", k->rel, k->name, rel);
    shape_str(k->ndim, k->shape, shape, sizeof(shape));
    check_key(&lc->t, name, shape);
}

/* The canonical layout of `c` (file names) plus `extra` non-parameters == the tsv. */
static void test_layout(const char *fixtures, const char *tsv, const struct model_config *c,
                        const char *const *extra, int n_keys)
{
    char path[512];
    struct layout_check lc = {.c = c};
    snprintf(path, sizeof(path), "%s/%s", fixtures, tsv);
    if (load_tsv(path, &lc.t) < 0) {
        ok(0, "read %s", path);
        return;
    }
    size_t n = model_layout_build(c, on_canon_key, &lc);
    /* The non-parameters real files carry (sdxl.md §1.1), which the loader skips. */
    int n_extra = 0;
    for (; extra[n_extra]; n_extra += 2)
        check_key(&lc.t, extra[n_extra], extra[n_extra + 1]);
    n_extra /= 2;
    int missing = 0;
    for (int i = 0; i < lc.t.n; i++)
        if (lc.t.v[i].seen != 1 && missing++ < 5)
            printf("# tsv key '%s' seen %d times\n", lc.t.v[i].name, lc.t.v[i].seen);
    ok(lc.t.n == n_keys && (int)n + n_extra == n_keys && lc.t.bad == 0 && missing == 0,
       "%s canonical layout == %s (%zu + %d keys, tsv %d, %d wrong, %d missing)",
       model_family_get(c->family)->name, tsv, n, n_extra, lc.t.n, lc.t.bad, missing);
    EXPECT_EQ(model_config_is_canonical(c), 1);
    xfree(lc.t.v);
}

static void test_layouts(const char *fixtures)
{
    struct model_config c;
    static const char *const base_extra[] = {
        "conditioner.embedders.0.transformer.text_model.embeddings.position_ids", "[1,77]",
        "conditioner.embedders.1.model.logit_scale", "[]", NULL};
    static const char *const refiner_extra[] = {"conditioner.embedders.0.model.logit_scale", "[]",
                                                NULL};
    sdxl_config_canonical(&c);
    test_layout(fixtures, "sdxl_keys.tsv", &c, base_extra, 2515);
    sdxl_refiner_config_canonical(&c);
    test_layout(fixtures, "sdxl_refiner_keys.tsv", &c, refiner_extra, 1858);
}

/* ---- a tiny SDXL checkpoint ---- */

static int all_finite(const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return 0;
    return 1;
}

static int load_all(struct mm *mm, struct patcher **p, int n, size_t act, struct mm_report *rep,
                    struct err *e)
{
    struct mm_request req = {.n_models = n, .activation_bytes = act};
    for (int i = 0; i < n; i++)
        req.models[i] = p[i];
    return mm_load_models(mm, &req, rep, e);
}

/* bigG's cond [77, width] with these options into out; 0 or an error. */
static int encode_g(struct patcher *p, const struct model_config *cfg, const struct clip_tokens *tk,
                    struct text_encode_opts o, float *out)
{
    struct err e = {0};
    float *cond = NULL;
    int rc = text_encode(p, &cfg->text[1], model_prefix(cfg, MODEL_CLIP2), tk, &o, &cond, NULL,
                         NULL, &e);
    if (rc == 0)
        memcpy(out, cond, (size_t)77 * cfg->text[1].width * sizeof(float));
    xfree(cond);
    return rc;
}

/* sdxl.md §4.1, §4.6: bigG's pad id matters; CLIPSetLastLayer(-1) is the last layer
 * without the final norm, unlike SD1.x's; -2 is the default. */
static void test_text_options(struct patcher *g, const struct model_config *cfg,
                              const struct clip_tokens *tk)
{
    size_t n = (size_t)77 * cfg->text[1].width, sz = n * sizeof(float);
    float *a = xmalloc(sz), *b = xmalloc(sz), *c = xmalloc(sz), *d = xmalloc(sz);
    int rc = encode_g(g, cfg, tk, (struct text_encode_opts){.layer = -2, .pad_zero = 1}, a);
    rc |= encode_g(g, cfg, tk, (struct text_encode_opts){.layer = -2}, b);
    rc |= encode_g(g, cfg, tk, (struct text_encode_opts){.layer = -1, .pad_zero = 1}, c);
    rc |= encode_g(g, cfg, tk,
                   (struct text_encode_opts){.layer = -1, .norm_hidden = 1, .pad_zero = 1}, d);
    ok(rc == 0 && memcmp(a, b, sz) != 0, "bigG: padding with 0 changes the conditioning");
    ok(rc == 0 && memcmp(a, c, sz) != 0 && memcmp(c, d, sz) != 0,
       "bigG: layer -1 without final norm differs from -2 and from the normalized last layer");
    xfree(a);
    xfree(b);
    xfree(c);
    xfree(d);
}

static void test_adm(void)
{
    float e0[SDXL_ADM_EMBED], e64[SDXL_ADM_EMBED], e1024[SDXL_ADM_EMBED];
    sdxl_adm_embed(0, e0);
    sdxl_adm_embed(64, e64);
    sdxl_adm_embed(1024, e1024);
    int zero_ok = 1;
    for (int k = 0; k < 128; k++)
        zero_ok &= e0[k] == 1.0f && e0[128 + k] == 0.0f;
    ok(zero_ok, "E(0) = [1 x 128, 0 x 128]");
    /* ComfyUI's values (sdxl.md §5.1); libm vs torch differ by up to 3.4e-6 / 6.1e-5. */
    const struct {
        const float *e;
        int i;
        float want, tol;
    } chk[] = {
        {e64, 0, 0.39185724f, 1e-5f},      {e64, 1, -0.99108207f, 1e-5f},
        {e64, 2, 0.42941359f, 1e-5f},      {e64, 128, 0.92002606f, 1e-5f},
        {e64, 129, 0.13325278f, 1e-5f},    {e64, 130, -0.90310794f, 1e-5f},
        {e64, 127, 0.99997634f, 1e-5f},    {e64, 255, 0.0068774344f, 1e-5f},
        {e1024, 0, 0.98735362f, 1e-4f},    {e1024, 1, -0.53761721f, 1e-4f},
        {e1024, 2, 0.68345720f, 1e-4f},    {e1024, 128, -0.15853338f, 1e-4f},
        {e1024, 129, -0.84318900f, 1e-4f}, {e1024, 130, 0.72999060f, 1e-4f},
        {e1024, 127, 0.99395174f, 1e-4f},  {e1024, 255, 0.10981788f, 1e-4f},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof(chk) / sizeof(chk[0]); i++)
        if (fabsf(chk[i].e[chk[i].i] - chk[i].want) > chk[i].tol && bad++ < 3)
            printf("# E[%d] = %.8f, ComfyUI %.8f\n", chk[i].i, chk[i].e[chk[i].i], chk[i].want);
    ok(bad == 0, "E(64), E(1024) match ComfyUI's check values within libm's difference");
    float pooled[4] = {1, 2, 3, 4}, y[4 + 6 * SDXL_ADM_EMBED];
    struct adm_sizes s = {.width = 1024,
                          .height = 64,
                          .crop_w = 0,
                          .crop_h = 0,
                          .target_width = 64,
                          .target_height = 1024};
    sdxl_adm_vector(pooled, 4, &s, y);
    ok(memcmp(y, pooled, sizeof(pooled)) == 0 && memcmp(y + 4, e64, sizeof(e64)) == 0 &&
           memcmp(y + 4 + 256, e1024, sizeof(e64)) == 0 &&
           memcmp(y + 4 + 512, e0, sizeof(e0)) == 0 &&
           memcmp(y + 4 + 1024, e1024, sizeof(e64)) == 0 &&
           memcmp(y + 4 + 1280, e64, sizeof(e64)) == 0,
       "y = pooled | E(height) | E(width) | E(crop_h) | E(crop_w) | E(target_h) | E(target_w)");
}

static void test_text(struct mm *mm, struct patcher *tp[2], const struct model_config *cfg,
                      const char *tokdir)
{
    struct err e = {0};
    struct clip_tokenizer *tok = NULL;
    struct clip_tokens tk;
    struct mm_report rep;
    if (clip_tokenizer_load(tokdir, &tok, &e) < 0) {
        ok(0, "tokenizer: %s", e.msg);
        return;
    }
    clip_tokenize_prompt(tok, "a (photo:1.2) of a cat", &tk);
    EXPECT_OK(load_all(mm, tp, 2, text_plan_bytes(&cfg->text[1], 2) * 2, &rep, &e));
    /* SDXL's builder: penultimate layer, no final norm on it (sdxl.md §4.2). */
    struct text_encode_opts o = {.layer = -2, .norm_hidden = 0};
    for (int i = 0; i < 2; i++) {
        float *cond = NULL, *pooled = NULL;
        err_clear(&e);
        int rc = text_encode(tp[i], &cfg->text[i], model_prefix(cfg, MODEL_CLIP + i), &tk, &o,
                             &cond, &pooled, NULL, &e);
        int w = cfg->text[i].width, pw = cfg->text[i].proj_dim ? cfg->text[i].proj_dim : w;
        ok(rc == 0 && all_finite(cond, (size_t)77 * w) && all_finite(pooled, (size_t)pw),
           "text encoder %d (%s) runs: cond [1,77,%d], pooled [%d] finite (%s)", i,
           i ? "bigG, OpenCLIP names, fused in_proj, gelu, projection" : "CLIP-L", w, pw, e.msg);
        xfree(cond);
        xfree(pooled);
    }
    test_text_options(tp[1], cfg, &tk);
    mm_node_end(mm, &rep);
    clip_tokens_release(&tk);
    clip_tokenizer_free(tok);
}

/* eps for y filled with `yv`; returns 0 and eps[0..n) on the host. */
enum { UB = 1, UH = 9, UW = 7, UT = 77 };

/* What one eval needs on the device beside the weights: the plan and x, ctx, y, eps. */
static size_t unet_act(const struct unet_arch *a)
{
    size_t io = (size_t)UB * (2 * 4 * UH * UW + (size_t)UT * a->ctx_dim + a->adm_in) * 4;
    return unet_plan_bytes(a, UB, UH, UW, UT) + io + (1u << 20);
}

static int unet_run(struct mm *mm, struct patcher *p, const struct model_config *cfg, float yv,
                    float *out, size_t n, struct err *e)
{
    const struct unet_arch *a = &cfg->unet;
    enum { B = UB, H = UH, W = UW, T = UT };
    struct mm_report rep;
    struct tensor *x = NULL, *c = NULL, *y = NULL, *eps = NULL;
    int rc = load_all(mm, &p, 1, unet_act(a), &rep, e);
    if (rc < 0)
        return rc;
    struct dev *d = mm_device(mm);
    int64_t xs[4] = {B, 4, H, W}, cs[3] = {B, T, a->ctx_dim}, ys[2] = {B, a->adm_in};
    const float ts[B] = {500.0f};
    if ((rc = tensor_new(d, TENSOR_F32, 4, xs, &x, e)) >= 0 &&
        (rc = tensor_new(d, TENSOR_F32, 3, cs, &c, e)) >= 0 &&
        (rc = tensor_new(d, TENSOR_F32, 2, ys, &y, e)) >= 0 &&
        (rc = tensor_new(d, TENSOR_F32, 4, xs, &eps, e)) >= 0 &&
        (rc = tensor_fill(x, 0.25f, e)) >= 0 && (rc = tensor_fill(c, 0.5f, e)) >= 0 &&
        (rc = tensor_fill(y, yv, e)) >= 0 && (rc = unet_eval(p, a, x, ts, c, y, eps, NULL, e)) >= 0)
        rc = tensor_read_f32(eps, out, (int64_t)n, e);
    if (rc >= 0 && unet_eval(p, a, x, ts, c, NULL, eps, NULL, e) != ERR_INVALID)
        rc = err_set(e, ERR_INVALID, "an eval without y was accepted");
    tensor_free(x);
    tensor_free(c);
    tensor_free(y);
    tensor_free(eps);
    mm_node_end(mm, &rep);
    return rc;
}

static void test_tiny(const char *tokdir, enum st_dtype dtype)
{
    char dir[] = "/tmp/test_models_sdxl.XXXXXX", path[64];
    struct err e = {0};
    struct ckpt_gen_opts o;
    struct model_ckpt ck;
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    snprintf(path, sizeof(path), "%s/sdxl.safetensors", dir);
    ckpt_gen_opts_default(&o);
    sdxl_config_tiny(&o.cfg);
    o.dtype = dtype;
    EXPECT_OK(ckpt_gen_write(&o, path, &e));
    if (model_ckpt_load(path, MODEL_LOAD_ALL, f32, &ck, &e) < 0) {
        ok(0, "load tiny SDXL (%s): %s", st_dtype_name(dtype), e.msg);
        return;
    }
    ok(ck.cfg.family == MODEL_FAMILY_SDXL && !ck.canonical &&
           memcmp(&ck.cfg, &o.cfg, sizeof(ck.cfg)) == 0 && ck.skipped == 2,
       "tiny SDXL (%s) detected as SDXL with the generator's knobs, position_ids and "
       "logit_scale skipped (%d)",
       st_dtype_name(dtype), ck.skipped);
    ok(ck.model[MODEL_CLIP] && ck.model[MODEL_CLIP2] && ck.model[MODEL_UNET] && ck.model[MODEL_VAE],
       "four components: unet %d tensors, vae %d, clip_l %d, clip_g %d", ck.tensors[MODEL_UNET],
       ck.tensors[MODEL_VAE], ck.tensors[MODEL_CLIP], ck.tensors[MODEL_CLIP2]);
    if (dtype == ST_DTYPE_F32) {
        struct mm_config mc;
        struct mm *mm = NULL;
        mm_config_init(&mc);
        mc.device_spec = "cpu";
        EXPECT_OK(mm_new(&mc, &mm, &e));
        struct patcher *tp[2] = {patcher_new(ck.model[MODEL_CLIP]),
                                 patcher_new(ck.model[MODEL_CLIP2])};
        struct patcher *unet = patcher_new(ck.model[MODEL_UNET]);
        test_text(mm, tp, &ck.cfg, tokdir);
        size_t n = 4 * 9 * 7;
        float *a = xmalloc(n * sizeof(float)), *b = xmalloc(n * sizeof(float));
        err_clear(&e);
        int rc = unet_run(mm, unet, &ck.cfg, 0.1f, a, n, &e);
        if (rc == 0)
            rc = unet_run(mm, unet, &ck.cfg, -0.3f, b, n, &e);
        ok(rc == 0 && all_finite(a, n) && all_finite(b, n) && memcmp(a, b, n * sizeof(float)) != 0,
           "SDXL UNet (9x7 latent, ADM y) runs, finite, and y changes eps (%s)", e.msg);
        xfree(a);
        xfree(b);
        patcher_unref(tp[0]);
        patcher_unref(tp[1]);
        patcher_unref(unet);
        mm_free(mm);
    }
    model_ckpt_release(&ck);
    unlink(path);
    rmdir(dir);
}

/* A tiny refiner: detected, bigG alone as the text encoder, its UNet (4 levels, depth
 * 0,4,4,0, ADM 64 + 5 x 256) runs with finite results. */
static void test_tiny_refiner(void)
{
    char dir[] = "/tmp/test_models_sdxl.XXXXXX", path[64];
    struct err e = {0};
    struct ckpt_gen_opts o;
    struct model_ckpt ck;
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    snprintf(path, sizeof(path), "%s/refiner.safetensors", dir);
    ckpt_gen_opts_default(&o);
    sdxl_refiner_config_tiny(&o.cfg);
    EXPECT_OK(ckpt_gen_write(&o, path, &e));
    if (model_ckpt_load(path, MODEL_LOAD_ALL, f32, &ck, &e) < 0) {
        ok(0, "load tiny refiner: %s", e.msg);
        return;
    }
    ok(ck.cfg.family == MODEL_FAMILY_SDXL_REFINER && !ck.canonical &&
           memcmp(&ck.cfg, &o.cfg, sizeof(ck.cfg)) == 0 && ck.model[MODEL_CLIP] &&
           !ck.model[MODEL_CLIP2] && ck.skipped == 1,
       "tiny refiner detected with the generator's knobs, bigG as its only text encoder");
    struct mm_config mc;
    struct mm *mm = NULL;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    EXPECT_OK(mm_new(&mc, &mm, &e));
    struct patcher *unet = patcher_new(ck.model[MODEL_UNET]);
    size_t n = 4 * UH * UW;
    float *a = xmalloc(n * sizeof(float));
    err_clear(&e);
    int rc = unet_run(mm, unet, &ck.cfg, 0.2f, a, n, &e);
    ok(rc == 0 && all_finite(a, n), "refiner UNet with its ADM vector runs, finite (%s)",
       rc ? e.msg : "ok");
    xfree(a);
    patcher_unref(unet);
    mm_free(mm);
    model_ckpt_release(&ck);
    unlink(path);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: test_models_sdxl FIXTURE_DIR TOKENIZER_DIR\n");
        return 2;
    }
    tensor_threads_set(2);
    long live0 = alloc_live_count();
    test_layouts(argv[1]);
    test_adm();
    test_tiny(argv[2], ST_DTYPE_F32);
    test_tiny(argv[2], ST_DTYPE_F16);
    test_tiny_refiner();
    tensor_cpu_scratch_release(); /* the executor's kept op scratch (tensor.h) */
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
