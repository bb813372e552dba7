/*
 * test_models_t2i — T2I-Adapters (models/controlnet/t2i_adapter.h) against a float64
 * reference written here from comfy/t2i_adapter/adapter.py, apart from the model code
 * (pixel unshuffle, convs, ReLU, AvgPool2d with padding [h % 2, w % 2] counting the
 * padded zeros): tiny random full (SD1.5, 3-channel hint), light and SDXL (1-channel
 * hint, diffusers names) adapters from tools/ckpt_gen give the reference's features,
 * at an odd latent height so the pooling pads, placed in ComfyUI's input/middle slots;
 * the SD1.5 UNet with the features in its input blocks (unet_control.input) equals the
 * float64 reference UNet (ref_unet64.c) with them. Bad files: a ControlNet, a missing
 * tensor, a Stable Cascade ControlNet's names.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "checkpoint.h"
#include "ckpt_gen.h"
#include "family.h"
#include "harness.h"
#include "memmgr.h"
#include "ref_unet64.h"
#include "t2i_adapter.h"

static char dir[64];

/* ---- float64 reference adapter --------------------------------------------------------- */

static struct act unshuffle(const struct act *x, int r)
{
    struct act o = ref_act_new(x->c * r * r, x->h / r, x->w / r);
    for (int c = 0; c < x->c; c++)
        for (int i = 0; i < r; i++)
            for (int j = 0; j < r; j++)
                for (int y = 0; y < o.h; y++)
                    for (int xx = 0; xx < o.w; xx++)
                        o.v[((c * r * r + i * r + j) * o.h + y) * o.w + xx] =
                            x->v[(c * x->h + y * r + i) * x->w + xx * r + j];
    return o;
}

/* AvgPool2d(2, 2, padding [h % 2, w % 2]), count_include_pad: the sum over the window's
 * in-bounds pixels divided by 4. */
static struct act pool(const struct act *x)
{
    int ph = x->h % 2, pw = x->w % 2;
    struct act o = ref_act_new(x->c, (x->h + 2 * ph - 2) / 2 + 1, (x->w + 2 * pw - 2) / 2 + 1);
    for (int c = 0; c < x->c; c++)
        for (int y = 0; y < o.h; y++)
            for (int xx = 0; xx < o.w; xx++) {
                double s = 0;
                for (int i = 0; i < 2; i++)
                    for (int j = 0; j < 2; j++) {
                        int sy = 2 * y - ph + i, sx = 2 * xx - pw + j;
                        if (sy >= 0 && sy < x->h && sx >= 0 && sx < x->w)
                            s += x->v[(c * x->h + sy) * x->w + sx];
                    }
                o.v[(c * o.h + y) * o.w + xx] = s / 4.0;
            }
    return o;
}

static void replace(struct act *x, struct act n)
{
    ref_act_free(x);
    *x = n;
}

/* x + block2(relu(block1(x))) */
static struct act res_tail(const struct act *x, const char *p, int k)
{
    char n[64];
    snprintf(n, sizeof(n), "%s.block1", p);
    struct act h = ref_conv(x, n, x->c, 3, 1);
    for (int i = 0; i < h.c * h.h * h.w; i++)
        h.v[i] = h.v[i] > 0 ? h.v[i] : 0;
    snprintf(n, sizeof(n), "%s.block2", p);
    struct act o = ref_conv(&h, n, x->c, k, 1);
    for (int i = 0; i < o.c * o.h * o.w; i++)
        o.v[i] += x->v[i];
    ref_act_free(&h);
    return o;
}

/* The four level outputs (feat[l], owned) of the adapter `a` for image x. */
static void ref_adapter(const struct t2i_arch *a, const struct act *img, struct act *feat)
{
    char n[64];
    struct act x = unshuffle(img, a->unshuffle);
    if (a->kind == T2I_FULL)
        replace(&x, ref_conv(&x, "conv_in", a->channels[0], 3, 1));
    for (int i = 0; i < T2I_LEVELS; i++) {
        if (a->kind == T2I_LIGHT) {
            int inter = a->channels[i] / 4;
            if (i)
                replace(&x, pool(&x));
            snprintf(n, sizeof(n), "body.%d.in_conv", i);
            replace(&x, ref_conv(&x, n, inter, 1, 1));
            for (int k = 0; k < 4; k++) {
                snprintf(n, sizeof(n), "body.%d.body.%d", i, k);
                replace(&x, res_tail(&x, n, 3));
            }
            snprintf(n, sizeof(n), "body.%d.out_conv", i);
            replace(&x, ref_conv(&x, n, a->channels[i], 1, 1));
        } else {
            for (int j = 0; j < 2; j++) {
                int idx = 2 * i + j;
                /* adapter.py: SD downsamples at levels 3, 2, 1; SDXL at 2, and widens at 1 */
                int down = j == 0 && (a->xl ? i == 2 : i >= 1);
                int widen = j == 0 && (a->xl ? i == 1 || i == 2 : i >= 1) &&
                            a->channels[i - 1] != a->channels[i];
                if (down)
                    replace(&x, pool(&x));
                if (widen) {
                    snprintf(n, sizeof(n), "body.%d.in_conv", idx);
                    replace(&x, ref_conv(&x, n, a->channels[i], a->ksize, 1));
                }
                snprintf(n, sizeof(n), "body.%d", idx);
                replace(&x, res_tail(&x, n, a->ksize));
            }
        }
        feat[i] = ref_act_new(x.c, x.h, x.w);
        memcpy(feat[i].v, x.v, sizeof(double) * x.c * x.h * x.w);
    }
    ref_act_free(&x);
}

/* ---- helpers -------------------------------------------------------------------------- */

static struct tensor *dev_tensor(struct dev *d, int ndim, const int64_t *shape, const float *v)
{
    struct tensor *t = NULL;
    struct err e = {0};
    if (tensor_new(d, TENSOR_F32, ndim, shape, &t, &e) < 0 ||
        (v && tensor_write_f32(t, v, tensor_numel(t), &e) < 0))
        PANIC("tensor: %s", e.msg);
    return t;
}

static double max_rel(const struct tensor *t, const double *ref, size_t n)
{
    if (!t || (size_t)tensor_numel(t) != n)
        return 1.0;
    float *v = xmalloc(n * sizeof(float));
    struct err e = {0};
    if (tensor_read_f32(t, v, (int64_t)n, &e) < 0)
        PANIC("read: %s", e.msg);
    double num = 0, den = 1e-12;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs(v[i] - ref[i]));
        den = fmax(den, fabs(ref[i]));
    }
    xfree(v);
    return num / den;
}

static void gen(const char *path, const struct model_config *cfg, int kind, int hint_ch,
                unsigned flags, const char *drop)
{
    struct ckpt_gen_opts o;
    struct err e = {0};
    ckpt_gen_opts_default(&o);
    o.cfg = *cfg;
    o.seed = 5;
    o.flags = flags;
    o.t2i = kind;
    o.t2i_hint_ch = hint_ch;
    o.drop_tensor = drop;
    if (ckpt_gen_write(&o, path, &e) < 0)
        PANIC("gen '%s': %s", path, e.msg);
}

/* A tiny SD1.5 UNet whose level widths are the adapters' (model_ch x 1, 2, 4, 4). */
static void sd15_t2i_config(struct model_config *cfg)
{
    sd15_config_tiny(cfg);
    cfg->unet.mult[2] = 4;
    cfg->unet.mult[3] = 4;
}

/* ---- tests ---------------------------------------------------------------------------- */

/* One adapter's features against the reference for a ih x iw image; returns the eval's
 * output (caller releases) and the reference features. */
static void check_adapter(struct mm *mm, const char *what, const struct model_config *cfg,
                          int kind, int hint_ch, unsigned flags, int ih, int iw,
                          struct controlnet_out *co, struct act *feat)
{
    char path[128];
    struct err e = {0};
    snprintf(path, sizeof(path), "%s/t2i.safetensors", dir);
    gen(path, cfg, kind, hint_ch, flags, NULL);
    struct t2i_adapter *t = NULL;
    memset(co, 0, sizeof(*co));
    if (t2i_adapter_load(path, TENSOR_F32, &t, &e) < 0) {
        ok(0, "%s loads: %s", what, e.msg);
        return;
    }
    ok(t->a.kind == (kind == CKPT_GEN_T2I_LIGHT ? T2I_LIGHT : T2I_FULL) &&
           t->a.xl == (kind == CKPT_GEN_T2I_XL) && t->a.hint_ch == hint_ch &&
           t->a.channels[3] == 4 * cfg->unet.model_ch,
       "%s detected (hint %d, widths %d..%d, kernel %d)", what, t->a.hint_ch, t->a.channels[0],
       t->a.channels[3], t->a.ksize);
    struct mm_request req = {.n_models = 1, .models = {t->p},
                             .activation_bytes = t2i_adapter_plan_bytes(t, 1, ih, iw)};
    struct mm_report rep;
    EXPECT_OK(mm_load_models(mm, &req, &rep, &e));
    size_t n = (size_t)hint_ch * ih * iw;
    float *img = xmalloc(n * sizeof(float));
    struct act ri = ref_act_new(hint_ch, ih, iw);
    for (size_t i = 0; i < n; i++)
        ri.v[i] = img[i] = (float)(0.5 + 0.5 * sin(0.037 * (double)i + 0.2));
    struct tensor *hint = dev_tensor(patcher_device(t->p), 4,
                                     (const int64_t[]){1, hint_ch, ih, iw}, img);
    EXPECT_OK(t2i_adapter_eval(t, hint, co, &e));
    struct st_file *f = NULL;
    EXPECT_OK(st_open(path, &f, &e));
    if (flags & CKPT_GEN_CN_DIFFUSERS) { /* the reference reads ComfyUI's names: a twin */
        st_close(f);
        gen(path, cfg, kind, hint_ch, 0, NULL);
        EXPECT_OK(st_open(path, &f, &e));
    }
    ref_file = f;
    ref_prefix = "";
    ref_adapter(&t->a, &ri, feat);
    static const int sd[4] = {2, 5, 8, 11}, xl[4] = {3, 5, 8, -1};
    double worst = 0;
    int placed = co->n_input == (t->a.xl ? 10 : 12);
    for (int l = 0; l < T2I_LEVELS; l++) {
        int at = t->a.xl ? xl[l] : sd[l];
        const struct tensor *got = at < 0 ? co->middle : co->input[at];
        worst = fmax(worst, max_rel(got, feat[l].v, (size_t)feat[l].c * feat[l].h * feat[l].w));
    }
    for (int i = 0; i < co->n_input; i++)
        placed &= (co->input[i] != NULL) ==
                  (t->a.xl ? i == 3 || i == 5 || i == 8 : i == 2 || i == 5 || i == 8 || i == 11);
    ok(placed && (t->a.xl ? co->middle != NULL : co->middle == NULL),
       "%s: features in ComfyUI's slots (%d inputs%s)", what, co->n_input,
       co->middle ? " + middle" : "");
    ok(worst < 2e-5, "%s: features equal the float64 reference (%dx%d image, %.2e)", what, ih,
       iw, worst);
    st_close(f);
    tensor_free(hint);
    xfree(img);
    ref_act_free(&ri);
    mm_node_end(mm, &rep);
    mm_unload(mm, patcher_model_of(t->p));
    t2i_adapter_unref(t);
    unlink(path);
}

static void test_adapters(struct mm *mm)
{
    struct model_config sd, xl;
    struct controlnet_out co;
    struct act feat[T2I_LEVELS];
    sd15_t2i_config(&sd);
    sdxl_config_tiny(&xl);
    /* latent 5 x 8: the pools pad the odd height */
    check_adapter(mm, "full SD1.5 adapter", &sd, CKPT_GEN_T2I_FULL, 3, 0, 40, 64, &co, feat);
    controlnet_out_release(&co);
    for (int l = 0; l < T2I_LEVELS; l++)
        ref_act_free(&feat[l]);
    check_adapter(mm, "light adapter", &sd, CKPT_GEN_T2I_LIGHT, 3, 0, 40, 64, &co, feat);
    controlnet_out_release(&co);
    for (int l = 0; l < T2I_LEVELS; l++)
        ref_act_free(&feat[l]);
    check_adapter(mm, "SDXL adapter (1-channel, diffusers names)", &xl, CKPT_GEN_T2I_XL, 1,
                  CKPT_GEN_CN_DIFFUSERS, 48, 64, &co, feat);
    controlnet_out_release(&co);
    for (int l = 0; l < T2I_LEVELS; l++)
        ref_act_free(&feat[l]);
}

/* The SD1.5 UNet with a full adapter's features (x 0.6) in its input blocks. */
static void test_injection(struct mm *mm)
{
    enum { H = 5, WD = 8, T = 8 };
    struct model_config cfg;
    struct err e = {0};
    char ck[128], ap[128];
    sd15_t2i_config(&cfg);
    snprintf(ck, sizeof(ck), "%s/ck.safetensors", dir);
    snprintf(ap, sizeof(ap), "%s/ad.safetensors", dir);
    gen(ck, &cfg, 0, 0, 0, NULL);
    gen(ap, &cfg, CKPT_GEN_T2I_FULL, 3, 0, NULL);
    static const enum tensor_dtype dt[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct model_ckpt m;
    EXPECT_OK(model_ckpt_load(ck, MODEL_LOAD_UNET, dt, &m, &e));
    struct t2i_adapter *t = NULL;
    EXPECT_OK(t2i_adapter_load(ap, TENSOR_F32, &t, &e));
    if (!t) {
        model_ckpt_release(&m);
        return;
    }
    struct patcher *unet = patcher_new(m.model[MODEL_UNET]);
    struct mm_request req = {
        .n_models = 2, .models = {unet, t->p},
        .activation_bytes = unet_plan_bytes(&cfg.unet, 1, H, WD, T) +
                            t2i_adapter_plan_bytes(t, 1, 8 * H, 8 * WD)};
    struct mm_report rep;
    EXPECT_OK(mm_load_models(mm, &req, &rep, &e));
    struct dev *d = patcher_device(unet);
    float xs[4 * H * WD], cs[T * 64], hs[3 * 64 * H * WD];
    for (int i = 0; i < 4 * H * WD; i++)
        xs[i] = (float)(0.8 * sin(0.31 * i + 0.4));
    for (int i = 0; i < T * 64; i++)
        cs[i] = (float)(0.8 * sin(0.13 * i + 0.9));
    for (int i = 0; i < 3 * 64 * H * WD; i++)
        hs[i] = (float)(0.5 + 0.5 * sin(0.017 * i));
    struct tensor *x = dev_tensor(d, 4, (const int64_t[]){1, 4, H, WD}, xs);
    struct tensor *ctx = dev_tensor(d, 3, (const int64_t[]){1, T, 64}, cs);
    struct tensor *hint = dev_tensor(d, 4, (const int64_t[]){1, 3, 8 * H, 8 * WD}, hs);
    struct tensor *eps = dev_tensor(d, 4, (const int64_t[]){1, 4, H, WD}, NULL);
    struct controlnet_out co;
    EXPECT_OK(t2i_adapter_eval(t, hint, &co, &e));
    for (int i = 0; i < co.n_input; i++)
        if (co.input[i])
            EXPECT_OK(tensor_scale(co.input[i], co.input[i], 0.6f, &e));
    struct unet_control uc;
    controlnet_out_view(&co, &uc);
    float ts = 610.0f;
    EXPECT_OK(unet_eval_control(unet, &cfg.unet, x, &ts, ctx, NULL, &uc, eps, &e));

    /* the reference: the adapter's features x 0.6, added after input blocks 2, 5, 8, 11 */
    struct st_file *af = NULL, *uf = NULL;
    EXPECT_OK(st_open(ap, &af, &e));
    EXPECT_OK(st_open(ck, &uf, &e));
    struct act ri = ref_act_new(3, 8 * H, 8 * WD), rx = ref_act_new(4, H, WD), feat[T2I_LEVELS];
    for (int i = 0; i < 3 * 64 * H * WD; i++)
        ri.v[i] = hs[i];
    for (int i = 0; i < 4 * H * WD; i++)
        rx.v[i] = xs[i];
    ref_file = af;
    ref_prefix = "";
    ref_adapter(&t->a, &ri, feat);
    struct act in[UNET_MAX_BLOCKS];
    memset(in, 0, sizeof(in));
    for (int l = 0; l < T2I_LEVELS; l++) {
        for (int i = 0; i < feat[l].c * feat[l].h * feat[l].w; i++)
            feat[l].v[i] *= 0.6;
        in[3 * l + 2] = feat[l];
    }
    double rctx[T * 64];
    for (int i = 0; i < T * 64; i++)
        rctx[i] = cs[i];
    ref_ctx = rctx;
    ref_tokens = T;
    ref_ctx_dim = 64;
    ref_heads = cfg.unet.heads;
    ref_file = uf;
    ref_prefix = "model.diffusion_model.";
    ref_input = in;
    struct act re = ref_unet(&cfg.unet, &rx, ts, NULL);
    ref_input = NULL;
    struct act r0 = ref_unet(&cfg.unet, &rx, ts, NULL);
    double err = max_rel(eps, re.v, 4 * H * WD), moved = max_rel(eps, r0.v, 4 * H * WD);
    ok(err < 2e-4, "UNet with the adapter's features in its input blocks equals the float64 "
       "reference (%.2e)", err);
    ok(moved > 1e-2, "the features change the UNet's output (%.2e)", moved);
    ref_act_free(&re);
    ref_act_free(&r0);
    for (int l = 0; l < T2I_LEVELS; l++)
        ref_act_free(&feat[l]);
    ref_act_free(&ri);
    ref_act_free(&rx);
    st_close(af);
    st_close(uf);
    controlnet_out_release(&co);
    tensor_free(x);
    tensor_free(ctx);
    tensor_free(hint);
    tensor_free(eps);
    mm_node_end(mm, &rep);
    mm_unload(mm, patcher_model_of(t->p));
    mm_unload(mm, m.model[MODEL_UNET]);
    patcher_unref(unet);
    model_ckpt_release(&m);
    t2i_adapter_unref(t);
    unlink(ck);
    unlink(ap);
}

static void test_bad_files(void)
{
    struct model_config cfg;
    struct err e = {0};
    char p[128];
    struct t2i_adapter *t = NULL;
    sd15_t2i_config(&cfg);
    snprintf(p, sizeof(p), "%s/bad.safetensors", dir);
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    o.cfg = cfg;
    o.flags = CKPT_GEN_CONTROLNET;
    EXPECT_OK(ckpt_gen_write(&o, p, &e));
    ok(t2i_adapter_load(p, TENSOR_F32, &t, &e) == ERR_UNSUPPORTED && !t && strstr(e.msg, p),
       "a ControlNet is no T2I-Adapter: %s", e.msg);
    gen(p, &cfg, CKPT_GEN_T2I_FULL, 3, 0, "body.5.block2.weight");
    e = (struct err){0};
    ok(t2i_adapter_load(p, TENSOR_F32, &t, &e) == ERR_INVALID && !t &&
           strstr(e.msg, "body.5.block2.weight") && strstr(e.msg, p),
       "a missing tensor: %s", e.msg);
    /* Stable Cascade's controlnet (backbone.*): named, refused */
    o.flags = 0;
    o.t2i = CKPT_GEN_T2I_LIGHT;
    o.drop_tensor = "body.0.in_conv.weight";
    o.extra_tensor = "backbone.0.0.weight";
    EXPECT_OK(ckpt_gen_write(&o, p, &e));
    e = (struct err){0};
    ok(t2i_adapter_load(p, TENSOR_F32, &t, &e) == ERR_UNSUPPORTED && !t &&
           strstr(e.msg, "Stable Cascade"),
       "a Stable Cascade ControlNet: %s", e.msg);
    unlink(p);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/test_models_t2i.XXXXXX");
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
    test_adapters(mm);
    test_injection(mm);
    test_bad_files();
    mm_free(mm);
    rmdir(dir);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
