/*
 * test_models_cn_union — the Union ControlNet (controlnet.h: control_add_embedding,
 * task_embedding, transformer_layes, spatial_ch_projs) against the float64 reference
 * (ref_unet64.c, whose union_temb / union_merge are written from cldm.py apart from the
 * model code): a tiny random Union over the SD1.5 test trunk, in xinsir's diffusers
 * naming as gen_ckpt --cn-union writes it, gives the reference's residuals for a type
 * and for "auto" (no type); the types change the residuals; a type past a 6-type
 * Union's task_embedding fails with ComfyUI's message; a tiny SDXL Union loads as SDXL;
 * a Union whose task_embedding is not the trunk's width is refused naming the file.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "ckpt_gen.h"
#include "controlnet.h"
#include "family.h"
#include "harness.h"
#include "memmgr.h"
#include "ref_unet64.h"

#define H 8
#define WD 8
#define T 8

static char dir[64];

static void wave(float *v, size_t n, double a, double b)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(sin(a * (double)i + b) * 0.8);
}

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

static void gen_union(const char *path, const struct model_config *cfg, int types,
                      const char *extra)
{
    struct ckpt_gen_opts o;
    struct err e = {0};
    ckpt_gen_opts_default(&o);
    o.cfg = *cfg;
    o.seed = 11;
    o.flags = CKPT_GEN_CONTROLNET | CKPT_GEN_CN_DIFFUSERS;
    o.cn_union_types = types;
    o.extra_tensor = extra;
    if (ckpt_gen_write(&o, path, &e) < 0)
        PANIC("gen '%s': %s", path, e.msg);
}

/* The residuals of `cn` for control_type against the reference's; returns the worst
 * error, fills res (ns + 1 entries). */
static double check_type(struct controlnet *cn, const struct model_config *cfg, int type,
                         const struct tensor *x, const struct tensor *ctx,
                         const struct tensor *hint, const struct act *rx, const struct act *rh,
                         float t, struct controlnet_out *co)
{
    struct err e = {0};
    struct act res[UNET_MAX_BLOCKS + 1];
    ref_union_types = cn->union_types;
    ref_union_type = type;
    int ns = ref_controlnet(&cfg->unet, rx, t, rh, 0.8, res);
    ref_union_types = 0;
    ref_union_type = -1;
    if (controlnet_eval_type(cn, x, &t, ctx, NULL, hint, type, 0.8f, co, &e) < 0) {
        ok(0, "union eval (type %d): %s", type, e.msg);
        ns = -1;
    }
    double worst = ns < 0 || co->n_output != ns || !co->middle ? 1.0 : 0.0;
    for (int i = 0; ns >= 0 && i < ns; i++)
        worst = fmax(worst, max_rel(co->output[i], res[i].v,
                                    (size_t)res[i].c * res[i].h * res[i].w));
    if (ns >= 0)
        worst = fmax(worst,
                     max_rel(co->middle, res[ns].v, (size_t)res[ns].c * res[ns].h * res[ns].w));
    for (int i = 0; i <= ns; i++)
        ref_act_free(&res[i]);
    return worst;
}

static void test_numerics(struct mm *mm)
{
    struct model_config cfg;
    struct err e = {0};
    char path[128];
    sd15_config_tiny(&cfg);
    snprintf(path, sizeof(path), "%s/union.safetensors", dir);
    gen_union(path, &cfg, 8, NULL);
    struct controlnet *cn = NULL;
    EXPECT_OK(controlnet_load(path, NULL, TENSOR_F32, &cn, &e));
    if (!cn)
        return;
    ok(cn->union_types == 8 && cn->cfg.family == MODEL_FAMILY_SD15,
       "a diffusers-named Union loads: %d control types", cn->union_types);
    struct mm_request req = {.n_models = 1, .models = {cn->p},
                             .activation_bytes = controlnet_plan_bytes(cn, 1, H, WD, T)};
    struct mm_report rep;
    EXPECT_OK(mm_load_models(mm, &req, &rep, &e));

    struct dev *d = patcher_device(cn->p);
    float xs[4 * H * WD], cs[T * 64], hs[3 * 64 * H * WD];
    wave(xs, 4 * H * WD, 0.29, 0.3);
    wave(cs, T * 64, 0.17, 0.2);
    for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++)
        hs[i] = (float)(0.5 + 0.5 * sin(0.021 * (double)i));
    struct tensor *x = dev_tensor(d, 4, (const int64_t[]){1, 4, H, WD}, xs);
    struct tensor *ctx = dev_tensor(d, 3, (const int64_t[]){1, T, 64}, cs);
    struct tensor *hint = dev_tensor(d, 4, (const int64_t[]){1, 3, 8 * H, 8 * WD}, hs);
    struct act rx = ref_act_new(4, H, WD), rh = ref_act_new(3, 8 * H, 8 * WD);
    double rctx[T * 64];
    for (int i = 0; i < 4 * H * WD; i++)
        rx.v[i] = xs[i];
    for (int i = 0; i < 3 * 64 * H * WD; i++)
        rh.v[i] = hs[i];
    for (int i = 0; i < T * 64; i++)
        rctx[i] = cs[i];
    ref_ctx = rctx;
    ref_tokens = T;
    ref_ctx_dim = 64;
    ref_heads = cfg.unet.heads;
    /* The reference reads trunk weights by ldm name: only the union's own names and the
     * ones shared by both namings resolve in a diffusers file, so the reference reads a
     * bare ldm twin of the same seed instead (the same values: ckpt_gen seeds by the
     * control_model.* name whatever the naming). */
    char twin[128];
    snprintf(twin, sizeof(twin), "%s/union_ldm.safetensors", dir);
    {
        struct ckpt_gen_opts o;
        ckpt_gen_opts_default(&o);
        o.cfg = cfg;
        o.seed = 11;
        o.flags = CKPT_GEN_CONTROLNET | CKPT_GEN_CN_BARE;
        o.cn_union_types = 8;
        if (ckpt_gen_write(&o, twin, &e) < 0)
            PANIC("gen twin: %s", e.msg);
    }
    struct st_file *tf = NULL;
    EXPECT_OK(st_open(twin, &tf, &e));
    ref_file = tf;
    ref_prefix = "";

    struct controlnet_out co[3];
    const int types[3] = {3, 6, -1};
    for (int k = 0; k < 3; k++) {
        double err = check_type(cn, &cfg, types[k], x, ctx, hint, &rx, &rh, 532.0f, &co[k]);
        ok(err < 2e-4, "Union residuals for type %d (%s) equal the float64 reference (%.2e)",
           types[k], types[k] >= 0 ? controlnet_union_type_names[types[k]] : "auto", err);
    }
    /* the type matters: canny vs tile vs auto differ */
    float a[32 * H * WD], b[32 * H * WD], c[32 * H * WD];
    int64_t n0 = tensor_numel(co[0].output[0]);
    if (n0 <= (int64_t)(sizeof(a) / sizeof(a[0]))) {
        tensor_read_f32(co[0].output[0], a, n0, &e);
        tensor_read_f32(co[1].output[0], b, n0, &e);
        tensor_read_f32(co[2].output[0], c, n0, &e);
        double dab = 0, dac = 0;
        for (int64_t i = 0; i < n0; i++) {
            dab = fmax(dab, fabs(a[i] - b[i]));
            dac = fmax(dac, fabs(a[i] - c[i]));
        }
        ok(dab > 1e-4 && dac > 1e-4, "the control type changes the residuals (%.2e, %.2e)",
           dab, dac);
    }
    for (int k = 0; k < 3; k++)
        controlnet_out_release(&co[k]);
    st_close(tf);
    unlink(twin);
    mm_node_end(mm, &rep);
    mm_unload(mm, patcher_model_of(cn->p));
    controlnet_unref(cn);

    /* a 6-type Union: tile (6) is out of range, as ComfyUI says */
    gen_union(path, &cfg, 6, NULL);
    EXPECT_OK(controlnet_load(path, NULL, TENSOR_F32, &cn, &e));
    if (cn) {
        struct mm_request r6 = {.n_models = 1, .models = {cn->p},
                                .activation_bytes = controlnet_plan_bytes(cn, 1, H, WD, T)};
        EXPECT_OK(mm_load_models(mm, &r6, &rep, &e));
        struct controlnet_out o6;
        float t = 100.0f;
        int rc = controlnet_eval_type(cn, x, &t, ctx, NULL, hint, 6, 1.0f, &o6, &e);
        ok(rc == ERR_INVALID && strstr(e.msg, "Control type tile(6) is out of range") &&
               strstr(e.msg, "ProMax"),
           "type 6 on a 6-type Union: %s", e.msg);
        controlnet_out_release(&o6);
        e = (struct err){0};
        ok(controlnet_eval_type(cn, x, &t, ctx, NULL, hint, 5, 1.0f, &o6, &e) == 0,
           "type 5 (segment) runs on it (%s)", e.msg);
        controlnet_out_release(&o6);
        mm_node_end(mm, &rep);
        mm_unload(mm, patcher_model_of(cn->p));
        controlnet_unref(cn);
    }
    ref_act_free(&rx);
    ref_act_free(&rh);
    tensor_free(x);
    tensor_free(ctx);
    tensor_free(hint);
    unlink(path);
}

static void test_files(void)
{
    struct model_config xl, cfg;
    struct err e = {0};
    char p[128];
    sdxl_config_tiny(&xl);
    sd15_config_tiny(&cfg);
    snprintf(p, sizeof(p), "%s/x.safetensors", dir);
    struct controlnet *cn = NULL;
    gen_union(p, &xl, 8, NULL);
    struct st_file *f = NULL;
    EXPECT_OK(st_open(p, &f, &e));
    ok(f && st_find(f, "transformer_layes.0.attn.in_proj_weight") &&
           st_find(f, "control_add_embedding.linear_1.bias") && st_find(f, "task_embedding") &&
           st_find(f, "controlnet_cond_embedding.conv_in.weight"),
       "gen_ckpt --cn-union writes xinsir's names (in_proj_weight, diffusers trunk)");
    st_close(f);
    ok(controlnet_load(p, NULL, TENSOR_F32, &cn, &e) == 0 && cn &&
           cn->cfg.family == MODEL_FAMILY_SDXL && cn->union_types == 8,
       "a tiny SDXL ProMax Union loads as SDXL (%s)", e.msg);
    controlnet_unref(cn);
    cn = NULL;
    /* a task_embedding of another width than the trunk's */
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    o.cfg = cfg;
    o.flags = CKPT_GEN_CONTROLNET | CKPT_GEN_CN_DIFFUSERS;
    o.cn_union_types = 8;
    o.drop_tensor = "task_embedding";
    EXPECT_OK(ckpt_gen_write(&o, p, &e));
    int rc = controlnet_load(p, NULL, TENSOR_F32, &cn, &e);
    ok(rc == ERR_INVALID && !cn && strstr(e.msg, "task_embedding") && strstr(e.msg, p),
       "a Union without task_embedding: %s", e.msg);
    unlink(p);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/test_models_cnu.XXXXXX");
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
    test_numerics(mm);
    test_files();
    mm_free(mm);
    rmdir(dir);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
