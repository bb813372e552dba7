/*
 * test_models_gligen — GLIGEN (models/gligen/gligen.h) against a float64 reference written
 * here from comfy/gligen.py, apart from the model code: a tiny random GLIGEN file from
 * tools/ckpt_gen (ComfyUI's key layout, one fuser per transformer of the tiny SD1.5 UNet,
 * 768-wide object tokens: 8 heads) is detected as load_gligen does; its position net's
 * object tokens for three boxes (Fourier embedding of the box corners, null features in
 * the 27 unused slots, three linears) equal the reference's for every sample of a batch;
 * the UNet with the fusers as its middle patch (unet_patches.middle) equals the float64
 * reference UNet (ref_unet64.c) with the reference fusers after each self-attention, and
 * differs from the UNet without. Bad files: a checkpoint, a ControlNet, a missing and an
 * unexpected tensor, too many boxes; a GLIGEN made for the SDXL UNet does not fit SD1.5's.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "checkpoint.h"
#include "ckpt_gen.h"
#include "family.h"
#include "gligen.h"
#include "harness.h"
#include "memmgr.h"
#include "ref_unet64.h"

enum { IN_DIM = 64, KEY_DIM = 768, NBOX = 3 };

static char dir[64];

/* ---- float64 reference ------------------------------------------------------------------ */

static const struct st_file *gl_file; /* the GLIGEN file */
static const double *gl_objs;         /* [30, KEY_DIM]: the reference position net's */
static char gl_prefix[16][80];        /* fuser file prefixes by transformer index */
static int gl_calls;

/* The tiny SD1.5 UNet's transformers in walk order (depth 1, 1, 1, 0 over 4 levels). */
static void gl_prefixes(void)
{
    static const int in[6] = {1, 2, 4, 5, 7, 8};
    int k = 0;
    for (int i = 0; i < 6; i++)
        snprintf(gl_prefix[k++], sizeof gl_prefix[0], "input_blocks.%d.1.transformer_blocks.0.fuser.", in[i]);
    snprintf(gl_prefix[k++], sizeof gl_prefix[0], "middle_block.1.transformer_blocks.0.fuser.");
    for (int i = 3; i < 12; i++)
        snprintf(gl_prefix[k++], sizeof gl_prefix[0], "output_blocks.%d.1.transformer_blocks.0.fuser.", i);
}

/* PositionNet on the boxes (h, w, y, x latent units) of a lh x lw latent: out [30, K]. */
static double *ref_posnet(const double *pooled, const int (*box)[4], int n, int lh, int lw)
{
    int width = IN_DIM + GLIGEN_POS_DIM;
    double *rows = xcalloc((size_t)GLIGEN_MAX_OBJS * width, sizeof(double));
    ref_prefix = "position_net.";
    double *np = ref_w("null_positive_feature"), *nq = ref_w("null_position_feature");
    for (int s = 0; s < GLIGEN_MAX_OBJS; s++) {
        double *r = rows + s * width;
        if (s >= n) { /* masks 0: the learnt null features */
            memcpy(r, np, IN_DIM * sizeof(double));
            memcpy(r + IN_DIM, nq, GLIGEN_POS_DIM * sizeof(double));
            continue;
        }
        double xy[4] = {(double)box[s][3] / lw, (double)box[s][2] / lh,
                        (double)(box[s][3] + box[s][1]) / lw, (double)(box[s][2] + box[s][0]) / lh};
        memcpy(r, pooled + s * IN_DIM, IN_DIM * sizeof(double));
        for (int k = 0; k < 8; k++) {
            double f = pow(100.0, k / 8.0);
            for (int c = 0; c < 4; c++) {
                r[IN_DIM + 8 * k + c] = sin(f * xy[c]);
                r[IN_DIM + 8 * k + 4 + c] = cos(f * xy[c]);
            }
        }
    }
    double *h1 = ref_linear(rows, GLIGEN_MAX_OBJS, width, 512, "linears.0", 1);
    for (int i = 0; i < GLIGEN_MAX_OBJS * 512; i++)
        h1[i] = ref_silu(h1[i]);
    double *h2 = ref_linear(h1, GLIGEN_MAX_OBJS, 512, 512, "linears.2", 1);
    for (int i = 0; i < GLIGEN_MAX_OBJS * 512; i++)
        h2[i] = ref_silu(h2[i]);
    double *o = ref_linear(h2, GLIGEN_MAX_OBJS, 512, KEY_DIM, "linears.4", 1);
    xfree(rows);
    xfree(np);
    xfree(nq);
    xfree(h1);
    xfree(h2);
    return o;
}

/* GatedSelfAttentionDense.forward on h [n, c] with gl_objs, weights of fuser st. */
static void ref_fuser(double *h, int n, int c, int st)
{
    const struct st_file *uf = ref_file;
    const char *up = ref_prefix;
    int N = GLIGEN_MAX_OBJS;
    ref_file = gl_file;
    ref_prefix = gl_prefix[st];
    double *objs = ref_linear(gl_objs, N, KEY_DIM, c, "linear", 1);
    double *src = xmalloc((size_t)(n + N) * c * sizeof(double));
    ref_layer_norm(h, n, c, "norm1", src);
    ref_layer_norm(objs, N, c, "norm1", src + (size_t)n * c);
    double *a = xcalloc((size_t)n * c, sizeof(double));
    /* attn(norm1(cat(x, objs)))[:, :n]: queries of the visual rows only */
    ref_attention(a, src, n, c, src, n + N, c, "attn", 8);
    double *ga = ref_w("alpha_attn"), *gd = ref_w("alpha_dense");
    for (int i = 0; i < n * c; i++)
        h[i] += tanh(ga[0]) * a[i];
    double *xn = xmalloc((size_t)n * c * sizeof(double));
    ref_layer_norm(h, n, c, "norm2", xn);
    double *pr = ref_linear(xn, n, c, 8 * c, "ff.net.0.proj", 1);
    double *gg = xmalloc((size_t)n * 4 * c * sizeof(double));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < 4 * c; j++) {
            double gate = pr[i * 8 * c + 4 * c + j];
            gg[i * 4 * c + j] = pr[i * 8 * c + j] * 0.5 * gate * (1.0 + erf(gate / sqrt(2.0)));
        }
    double *f = ref_linear(gg, n, 4 * c, c, "ff.net.2", 1);
    for (int i = 0; i < n * c; i++)
        h[i] += tanh(gd[0]) * f[i];
    xfree(objs);
    xfree(src);
    xfree(a);
    xfree(ga);
    xfree(gd);
    xfree(xn);
    xfree(pr);
    xfree(gg);
    xfree(f);
    gl_calls++;
    ref_file = uf;
    ref_prefix = up;
}

/* ---- helpers ---------------------------------------------------------------------------- */

static struct tensor *dev_tensor(struct dev *d, int ndim, const int64_t *shape, const float *v)
{
    struct tensor *t = NULL;
    struct err e = {0};
    if (tensor_new(d, TENSOR_F32, ndim, shape, &t, &e) < 0 ||
        (v && tensor_write_f32(t, v, tensor_numel(t), &e) < 0))
        PANIC("tensor: %s", e.msg);
    return t;
}

/* max |t[off + i] - ref[i]| / max |ref| over n values. */
static double max_rel_at(const struct tensor *t, size_t off, const double *ref, size_t n)
{
    size_t all = (size_t)tensor_numel(t);
    float *v = xmalloc(all * sizeof(float));
    struct err e = {0};
    if (off + n > all || tensor_read_f32(t, v, (int64_t)all, &e) < 0)
        PANIC("read: %s", e.msg);
    double num = 0, den = 1e-12;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs(v[off + i] - ref[i]));
        den = fmax(den, fabs(ref[i]));
    }
    xfree(v);
    return num / den;
}

/* max |v[i] - ref[i]| / max |ref| over n values. */
static double max_rel_host(const float *v, const double *ref, size_t n)
{
    double num = 0, den = 1e-12;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs(v[i] - ref[i]));
        den = fmax(den, fabs(ref[i]));
    }
    return num / den;
}

static void gen(const char *path, const struct model_config *cfg, int gligen, const char *drop,
                const char *extra, unsigned flags)
{
    struct ckpt_gen_opts o;
    struct err e = {0};
    ckpt_gen_opts_default(&o);
    o.cfg = *cfg;
    o.seed = 11;
    o.gligen = gligen;
    o.drop_tensor = drop;
    o.extra_tensor = extra;
    o.flags = flags;
    if (ckpt_gen_write(&o, path, &e) < 0)
        PANIC("gen '%s': %s", path, e.msg);
}

/* Three boxes (h, w, y, x) on a 5 x 8 latent and their pooled embeddings. */
static const int boxes[NBOX][4] = {{2, 3, 1, 4}, {5, 8, 0, 0}, {1, 2, 4, 6}};

static void make_pooled(float *pf, double *pd)
{
    for (int i = 0; i < NBOX * IN_DIM; i++)
        pd[i] = pf[i] = (float)(1.3 * sin(0.71 * i + 0.3));
}

static struct gligen *load_ok(const char *path, const char *what)
{
    struct gligen *g = NULL;
    struct err e = {0};
    int rc = gligen_load(path, TENSOR_F32, &g, &e);
    ok(rc == 0 && g, "%s loads: %s", what, rc ? e.msg : "ok");
    return g;
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_detect(const char *gp)
{
    struct gligen *g = load_ok(gp, "tiny GLIGEN");
    if (!g)
        return;
    struct model_config cfg;
    struct err e = {0};
    sd15_config_tiny(&cfg);
    int widths = 1;
    static const int want[16] = {32, 32, 64, 64, 96, 96, 96, 96, 96, 96, 64, 64, 64, 32, 32, 32};
    for (int i = 0; i < g->a.n_modules && i < 16; i++)
        widths &= g->a.m[i].query_dim == want[i] && g->a.m[i].heads == 8 &&
                  g->a.m[i].gate_attn != 0.0f;
    ok(g->a.n_modules == 16 && widths && g->a.in_dim == IN_DIM && g->a.key_dim == KEY_DIM &&
           !strcmp(g->a.m[0].block, "input_blocks.1") && !strcmp(g->a.m[6].block, "middle_block.1") &&
           !strcmp(g->a.m[15].block, "output_blocks.11"),
       "16 modules in load_gligen's order, widths 32..96, 8 heads, %d-wide text, %d-wide tokens",
       g->a.in_dim, g->a.key_dim);
    ok(gligen_fits(g, &cfg.unet, IN_DIM, &e) == 0, "it fits the tiny SD1.5 UNet");
    e = (struct err){0};
    ok(gligen_fits(g, &cfg.unet, 768, &e) == ERR_INVALID && strstr(e.msg, "768"),
       "a 768-wide CLIP does not: %s", e.msg);
    gligen_unref(g);
}

static void test_posnet(struct mm *mm, const char *gp)
{
    struct gligen *g = load_ok(gp, "GLIGEN (position net)");
    if (!g)
        return;
    struct err e = {0};
    struct mm_request req = {.n_models = 1, .models = {g->p},
                             .activation_bytes = gligen_plan_bytes(g, 2, 40, 32)};
    struct mm_report rep;
    EXPECT_OK(mm_load_models(mm, &req, &rep, &e));
    float pf[NBOX * IN_DIM];
    double pd[NBOX * IN_DIM];
    make_pooled(pf, pd);
    struct gligen_box b[NBOX];
    for (int i = 0; i < NBOX; i++)
        b[i] = (struct gligen_box){.pooled = pf + i * IN_DIM, .h = boxes[i][0], .w = boxes[i][1],
                                   .y = boxes[i][2], .x = boxes[i][3]};
    struct tensor *objs = dev_tensor(patcher_device(g->p), 3,
                                     (const int64_t[]){2, GLIGEN_MAX_OBJS, KEY_DIM}, NULL);
    EXPECT_OK(gligen_objs(g, b, NBOX, 5, 8, objs, &e));
    struct st_file *f = NULL;
    EXPECT_OK(st_open(gp, &f, &e));
    ref_file = f;
    double *ro = ref_posnet(pd, boxes, NBOX, 5, 8);
    size_t n = (size_t)GLIGEN_MAX_OBJS * KEY_DIM;
    double e0 = max_rel_at(objs, 0, ro, n), e1 = max_rel_at(objs, n, ro, n);
    ok(e0 < 1e-5 && e1 < 1e-5,
       "position net: the object tokens of 3 boxes + 27 null slots equal the float64 "
       "reference for both samples (%.2e, %.2e)", e0, e1);
    /* the boxes matter: another latent size moves the tokens */
    EXPECT_OK(gligen_objs(g, b, NBOX, 6, 8, objs, &e));
    double moved = max_rel_at(objs, 0, ro, n);
    ok(moved > 1e-3, "the box fractions follow the latent size (%.2e)", moved);
    struct gligen_box many[GLIGEN_MAX_OBJS + 1];
    for (int i = 0; i <= GLIGEN_MAX_OBJS; i++)
        many[i] = b[0];
    e = (struct err){0};
    ok(gligen_objs(g, many, GLIGEN_MAX_OBJS + 1, 5, 8, objs, &e) == ERR_INVALID &&
           strstr(e.msg, "30"),
       "31 boxes are refused: %s", e.msg);
    xfree(ro);
    st_close(f);
    tensor_free(objs);
    mm_node_end(mm, &rep);
    mm_unload(mm, patcher_model_of(g->p));
    gligen_unref(g);
}

/* The UNet's middle patch: the fusers on the objs of the test. */
struct fuse_ctx {
    struct gligen *g;
    struct tensor *objs;
    int calls;
};

static int fuse_middle(void *user, int st, struct tensor *x, struct err *e)
{
    struct fuse_ctx *f = user;
    f->calls++;
    return gligen_fuse(f->g, st, f->objs, x, e);
}

enum { H = 5, WD = 8, T = 8 };

/* The test's UNet input: x, the context and the boxes' pooled embeddings. */
static void unet_inputs(float *xs, float *cs, float *pf, double *pd)
{
    for (int i = 0; i < 4 * H * WD; i++)
        xs[i] = (float)(0.8 * sin(0.31 * i + 0.4));
    for (int i = 0; i < T * 64; i++)
        cs[i] = (float)(0.8 * sin(0.13 * i + 0.9));
    make_pooled(pf, pd);
}

/*
 * The tiny UNet's eps (host, 4 H WD) at t 610 with the GLIGEN model's fusers as its middle
 * patch, both loaded on mm together; *rep gets the plan, *calls the middle patch's calls.
 */
static void eval_unet(struct mm *mm, const char *ck, const char *gp, float *eps_out,
                      struct mm_report *rep, int *calls)
{
    struct model_config cfg;
    struct err e = {0};
    sd15_config_tiny(&cfg);
    static const enum tensor_dtype dt[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct model_ckpt m;
    EXPECT_OK(model_ckpt_load(ck, MODEL_LOAD_UNET, dt, &m, &e));
    struct gligen *g = load_ok(gp, "GLIGEN (UNet)");
    if (!g) {
        model_ckpt_release(&m);
        return;
    }
    struct patcher *unet = patcher_new(m.model[MODEL_UNET]);
    struct mm_request req = {
        .n_models = 2, .models = {unet, g->p},
        .activation_bytes = unet_plan_bytes(&cfg.unet, 1, H, WD, T) +
                            gligen_plan_bytes(g, 1, H * WD, cfg.unet.model_ch)};
    EXPECT_OK(mm_load_models(mm, &req, rep, &e));
    struct dev *d = patcher_device(unet);
    float xs[4 * H * WD], cs[T * 64], pf[NBOX * IN_DIM];
    double pd[NBOX * IN_DIM];
    unet_inputs(xs, cs, pf, pd);
    struct gligen_box b[NBOX];
    for (int i = 0; i < NBOX; i++)
        b[i] = (struct gligen_box){.pooled = pf + i * IN_DIM, .h = boxes[i][0], .w = boxes[i][1],
                                   .y = boxes[i][2], .x = boxes[i][3]};
    struct tensor *x = dev_tensor(d, 4, (const int64_t[]){1, 4, H, WD}, xs);
    struct tensor *ctx = dev_tensor(d, 3, (const int64_t[]){1, T, 64}, cs);
    struct tensor *eps = dev_tensor(d, 4, (const int64_t[]){1, 4, H, WD}, NULL);
    struct fuse_ctx fc = {.g = g};
    fc.objs = dev_tensor(d, 3, (const int64_t[]){1, GLIGEN_MAX_OBJS, KEY_DIM}, NULL);
    EXPECT_OK(gligen_objs(g, b, NBOX, H, WD, fc.objs, &e));
    struct unet_patches up = {.middle = fuse_middle, .user = &fc};
    float ts = 610.0f;
    EXPECT_OK(unet_eval_patched(unet, &cfg.unet, x, &ts, ctx, NULL, NULL, &up, eps, &e));
    EXPECT_OK(tensor_read_f32(eps, eps_out, 4 * H * WD, &e));
    *calls = fc.calls;
    tensor_free(x);
    tensor_free(ctx);
    tensor_free(eps);
    tensor_free(fc.objs);
    mm_node_end(mm, rep);
    mm_unload(mm, patcher_model_of(g->p));
    mm_unload(mm, m.model[MODEL_UNET]);
    patcher_unref(unet);
    model_ckpt_release(&m);
    gligen_unref(g);
}

static float cpu_eps[4 * H * WD]; /* test_unet's, for test_streamed */

static void test_unet(struct mm *mm, const char *ck, const char *gp)
{
    struct model_config cfg;
    struct err e = {0};
    struct mm_report rep;
    int calls = 0;
    float xs[4 * H * WD], cs[T * 64], pf[NBOX * IN_DIM];
    double pd[NBOX * IN_DIM];
    sd15_config_tiny(&cfg);
    unet_inputs(xs, cs, pf, pd);
    eval_unet(mm, ck, gp, cpu_eps, &rep, &calls);
    ok(calls == 16, "the middle patch ran in each of the 16 transformer blocks (%d)", calls);
    float ts = 610.0f;

    struct st_file *gf = NULL, *uf = NULL;
    EXPECT_OK(st_open(gp, &gf, &e));
    EXPECT_OK(st_open(ck, &uf, &e));
    gl_file = gf;
    gl_prefixes();
    ref_file = gf;
    double *ro = ref_posnet(pd, boxes, NBOX, H, WD);
    gl_objs = ro;
    struct act rx = ref_act_new(4, H, WD);
    for (int i = 0; i < 4 * H * WD; i++)
        rx.v[i] = xs[i];
    double rctx[T * 64];
    for (int i = 0; i < T * 64; i++)
        rctx[i] = cs[i];
    ref_ctx = rctx;
    ref_tokens = T;
    ref_ctx_dim = 64;
    ref_heads = cfg.unet.heads;
    ref_file = uf;
    ref_prefix = "model.diffusion_model.";
    ref_middle_patch = ref_fuser;
    struct act re = ref_unet(&cfg.unet, &rx, ts, NULL);
    ref_middle_patch = NULL;
    struct act r0 = ref_unet(&cfg.unet, &rx, ts, NULL);
    double err = max_rel_host(cpu_eps, re.v, 4 * H * WD), moved = max_rel_host(cpu_eps, r0.v, 4 * H * WD);
    ok(gl_calls == 16, "the reference ran 16 fusers (%d)", gl_calls);
    ok(err < 2e-4, "UNet eps with GLIGEN's fusers equals the float64 reference (%.2e)", err);
    ok(moved > 1e-2, "GLIGEN changes the UNet's output (%.2e)", moved);
    ref_act_free(&re);
    ref_act_free(&r0);
    ref_act_free(&rx);
    xfree(ro);
    st_close(gf);
    st_close(uf);
}

/* Both models streamed through a device too small for either: the same eps bit for bit. */
static void test_streamed(const char *ck, const char *gp)
{
    struct mm_config mc;
    struct mm *mm = NULL;
    struct err e = {0};
    struct mm_report rep;
    float got[4 * H * WD];
    int calls = 0;
    mm_config_init(&mc);
    mc.device_spec = "sim:12M";
    EXPECT_OK(mm_new(&mc, &mm, &e));
    if (!mm)
        return;
    eval_unet(mm, ck, gp, got, &rep, &calls);
    size_t gs = 0;
    for (int i = 0; i < rep.n_models; i++)
        if (!strcmp(rep.models[i].name, "gligen"))
            gs = rep.models[i].bytes_streamed;
    ok(calls == 16 && gs > 0 && rep.bytes_streamed > gs,
       "on a 12 MiB device the UNet and GLIGEN stream (%zu of them GLIGEN's)", rep.bytes_streamed);
    ok(memcmp(got, cpu_eps, sizeof got) == 0, "streamed: the same eps as resident");
    mm_free(mm);
}

static void expect_refused(const char *path, int code, const char *needle, const char *what)
{
    struct gligen *g = NULL;
    struct err e = {0};
    int rc = gligen_load(path, TENSOR_F32, &g, &e);
    ok(rc == code && !g && strstr(e.msg, needle) && strstr(e.msg, path), "%s: %s", what, e.msg);
    gligen_unref(g);
}

static void test_bad(const char *ck)
{
    struct model_config cfg, xl;
    char p[128];
    sd15_config_tiny(&cfg);
    sdxl_config_tiny(&xl);
    snprintf(p, sizeof p, "%s/bad.safetensors", dir);
    expect_refused(ck, ERR_UNSUPPORTED, "checkpoint", "a checkpoint is no GLIGEN model");
    gen(p, &cfg, 0, NULL, NULL, CKPT_GEN_CONTROLNET);
    expect_refused(p, ERR_UNSUPPORTED, "ControlNet", "a ControlNet is no GLIGEN model");
    gen(p, &cfg, 1, "output_blocks.4.1.transformer_blocks.0.fuser.attn.to_v.weight", NULL, 0);
    expect_refused(p, ERR_INVALID, "fuser.attn.to_v.weight' is missing", "a missing tensor");
    gen(p, &cfg, 1, "position_net.linears.2.bias", NULL, 0);
    expect_refused(p, ERR_INVALID, "position_net.linears.2.bias", "a missing position net bias");
    gen(p, &cfg, 1, NULL, "position_net.extra", 0);
    expect_refused(p, ERR_INVALID, "unexpected tensor 'position_net.extra'", "an unexpected tensor");
    /* a GLIGEN model for the SDXL UNet's transformers (loads) does not fit SD1.5's */
    gen(p, &xl, 1, NULL, NULL, 0);
    struct gligen *g = NULL;
    struct err e = {0};
    if (gligen_load(p, TENSOR_F32, &g, &e) == 0) {
        e = (struct err){0};
        ok(gligen_fits(g, &cfg.unet, 0, &e) == ERR_INVALID && strstr(e.msg, "another model"),
           "a GLIGEN model of another UNet does not fit: %s", e.msg);
    } else {
        ok(0, "the SDXL-shaped GLIGEN loads: %s", e.msg);
    }
    gligen_unref(g);
    unlink(p);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/test_models_gligen.XXXXXX");
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    tensor_threads_set(2);
    long live0 = alloc_live_count();
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    struct err e = {0};
    EXPECT_OK(mm_new(&mc, &mm, &e));
    struct model_config cfg;
    sd15_config_tiny(&cfg);
    char ck[128], gp[128];
    snprintf(ck, sizeof ck, "%s/ck.safetensors", dir);
    snprintf(gp, sizeof gp, "%s/gligen.safetensors", dir);
    gen(ck, &cfg, 0, NULL, NULL, 0);
    gen(gp, &cfg, 1, NULL, NULL, 0);
    test_detect(gp);
    test_posnet(mm, gp);
    test_unet(mm, ck, gp);
    test_streamed(ck, gp);
    test_bad(ck);
    mm_free(mm);
    unlink(ck);
    unlink(gp);
    rmdir(dir);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
