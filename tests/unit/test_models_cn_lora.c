/*
 * test_models_cn_lora — Control-LoRAs (models/controlnet/control_lora.h): a tiny random
 * Control-LoRA (gen_ckpt --cn-lora, rank 4) made into a ControlNet for a tiny SD1.5
 * UNet gives the residuals of the float64 reference ControlNet (ref_unet64.c) whose
 * weights are computed here apart from the model code: the file's weight, else the
 * UNet's, plus up @ down in double. Bad files: no marker, a missing half of a pair, an
 * unexpected tensor, a Control-LoRA for another model's widths.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "checkpoint.h"
#include "ckpt_gen.h"
#include "control_lora.h"
#include "family.h"
#include "harness.h"
#include "memmgr.h"
#include "ref_unet64.h"

#define H 8
#define WD 8
#define T 8

static char dir[64];
static const struct st_file *lora_f, *unet_f;

static double *to_double(const struct st_file *f, const struct st_tensor *t, size_t *n)
{
    *n = st_tensor_numel(t);
    if (t->dtype != ST_DTYPE_F32)
        PANIC("reference: '%s' is not f32", t->name);
    const float *v = st_tensor_data(f, t);
    double *d = xmalloc(*n * sizeof(double));
    for (size_t i = 0; i < *n; i++)
        d[i] = v[i];
    return d;
}

/* ControlLora.pre_run's weight: the file's, else the UNet's, + up.flatten(1) @
 * down.flatten(1) when the file has the pair. */
static double *merged(const char *name)
{
    char n[256];
    size_t cnt, nu, nd;
    const struct st_tensor *t = st_find(lora_f, name);
    double *w;
    if (t) {
        w = to_double(lora_f, t, &cnt);
    } else {
        snprintf(n, sizeof(n), "model.diffusion_model.%s", name);
        if (!(t = st_find(unet_f, n)))
            PANIC("reference: no '%s' in the file or the UNet", name);
        w = to_double(unet_f, t, &cnt);
    }
    size_t l = strlen(name);
    if (l > 7 && !strcmp(name + l - 7, ".weight")) {
        const struct st_tensor *up, *down;
        snprintf(n, sizeof(n), "%.*s.up", (int)(l - 7), name);
        up = st_find(lora_f, n);
        snprintf(n, sizeof(n), "%.*s.down", (int)(l - 7), name);
        down = st_find(lora_f, n);
        if (up && down) {
            double *u = to_double(lora_f, up, &nu), *d = to_double(lora_f, down, &nd);
            size_t o = (size_t)up->shape[0], r = nu / o, cols = cnt / o;
            for (size_t i = 0; i < o; i++)
                for (size_t j = 0; j < cols; j++)
                    for (size_t q = 0; q < r; q++)
                        w[i * cols + j] += u[i * r + q] * d[q * cols + j];
            xfree(u);
            xfree(d);
        }
    }
    return w;
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

static void gen(const char *path, const struct model_config *cfg, int rank, const char *drop,
                const char *extra)
{
    struct ckpt_gen_opts o;
    struct err e = {0};
    ckpt_gen_opts_default(&o);
    o.cfg = *cfg;
    o.seed = rank ? 13 : 42;
    o.flags = rank ? CKPT_GEN_CONTROLNET : 0;
    o.cn_lora_rank = rank;
    o.drop_tensor = drop;
    o.extra_tensor = extra;
    if (ckpt_gen_write(&o, path, &e) < 0)
        PANIC("gen '%s': %s", path, e.msg);
}

static void test_numerics(struct mm *mm)
{
    struct model_config cfg;
    struct err e = {0};
    char lp[128], cp[128];
    sd15_config_tiny(&cfg);
    snprintf(lp, sizeof(lp), "%s/cl.safetensors", dir);
    snprintf(cp, sizeof(cp), "%s/ck.safetensors", dir);
    gen(lp, &cfg, 4, NULL, NULL);
    gen(cp, &cfg, 0, NULL, NULL);
    static const enum tensor_dtype dt[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct model_ckpt ck;
    EXPECT_OK(model_ckpt_load(cp, MODEL_LOAD_UNET, dt, &ck, &e));
    struct control_lora *cl = NULL;
    struct controlnet *cn = NULL;
    EXPECT_OK(control_lora_load(lp, &cl, &e));
    if (cl)
        EXPECT_OK(control_lora_make(cl, ck.model[MODEL_UNET], &ck.cfg, TENSOR_F32, &cn, &e));
    if (!cn) {
        control_lora_unref(cl);
        model_ckpt_release(&ck);
        return;
    }
    ok(cn->hint_ch == 3 && cn->cfg.family == MODEL_FAMILY_SD15 && !cn->union_types,
       "a Control-LoRA made for the SD1.5 UNet (hint %d)", cn->hint_ch);
    struct mm_request req = {.n_models = 1, .models = {cn->p},
                             .activation_bytes = controlnet_plan_bytes(cn, 1, H, WD, T)};
    struct mm_report rep;
    EXPECT_OK(mm_load_models(mm, &req, &rep, &e));
    struct dev *d = patcher_device(cn->p);
    float xs[4 * H * WD], cs[T * 64], hs[3 * 64 * H * WD];
    for (int i = 0; i < 4 * H * WD; i++)
        xs[i] = (float)(0.8 * sin(0.23 * i + 0.5));
    for (int i = 0; i < T * 64; i++)
        cs[i] = (float)(0.8 * sin(0.19 * i + 0.1));
    for (int i = 0; i < 3 * 64 * H * WD; i++)
        hs[i] = (float)(0.5 + 0.5 * sin(0.011 * i));
    struct tensor *x = dev_tensor(d, 4, (const int64_t[]){1, 4, H, WD}, xs);
    struct tensor *ctx = dev_tensor(d, 3, (const int64_t[]){1, T, 64}, cs);
    struct tensor *hint = dev_tensor(d, 4, (const int64_t[]){1, 3, 8 * H, 8 * WD}, hs);
    float t = 377.0f;
    struct controlnet_out co;
    EXPECT_OK(controlnet_eval(cn, x, &t, ctx, NULL, hint, 0.9f, &co, &e));

    struct act rx = ref_act_new(4, H, WD), rh = ref_act_new(3, 8 * H, 8 * WD), res[UNET_MAX_BLOCKS + 1];
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
    struct st_file *lf = NULL, *uf = NULL;
    EXPECT_OK(st_open(lp, &lf, &e));
    EXPECT_OK(st_open(cp, &uf, &e));
    lora_f = lf;
    unet_f = uf;
    ref_prefix = "";
    ref_w_hook = merged;
    int ns = ref_controlnet(&cfg.unet, &rx, t, &rh, 0.9, res);
    ref_w_hook = NULL;
    double worst = co.n_output == ns && co.middle ? 0 : 1;
    for (int i = 0; i < ns && i < co.n_output; i++)
        worst = fmax(worst, max_rel(co.output[i], res[i].v, (size_t)res[i].c * res[i].h * res[i].w));
    worst = fmax(worst, max_rel(co.middle, res[ns].v, (size_t)res[ns].c * res[ns].h * res[ns].w));
    ok(worst < 2e-4, "its residuals equal the float64 reference ControlNet of merged weights "
       "(%.2e)", worst);
    for (int i = 0; i <= ns; i++)
        ref_act_free(&res[i]);
    ref_act_free(&rx);
    ref_act_free(&rh);
    st_close(lf);
    st_close(uf);
    controlnet_out_release(&co);
    tensor_free(x);
    tensor_free(ctx);
    tensor_free(hint);
    mm_node_end(mm, &rep);
    mm_unload(mm, patcher_model_of(cn->p));
    controlnet_unref(cn);

    /* bad files */
    struct model_config xl;
    sdxl_config_tiny(&xl);
    cn = NULL;
    int rc;
    gen(lp, &xl, 4, NULL, NULL);
    struct control_lora *cx = NULL;
    EXPECT_OK(control_lora_load(lp, &cx, &e));
    rc = cx ? control_lora_make(cx, ck.model[MODEL_UNET], &ck.cfg, TENSOR_F32, &cn, &e) : -1;
    ok(rc == ERR_INVALID && !cn && strstr(e.msg, lp), "an SDXL Control-LoRA on SD1.5: %s", e.msg);
    control_lora_unref(cx);
    controlnet_unref(cn);
    cn = NULL;
    e = (struct err){0};
    gen(lp, &cfg, 4, "input_blocks.1.0.in_layers.2.down", NULL);
    EXPECT_OK(control_lora_load(lp, &cx, &e));
    rc = cx ? control_lora_make(cx, ck.model[MODEL_UNET], &ck.cfg, TENSOR_F32, &cn, &e) : -1;
    ok(rc == ERR_INVALID && strstr(e.msg, "input_blocks.1.0.in_layers.2.up"),
       "half of a pair: %s", e.msg);
    control_lora_unref(cx);
    controlnet_unref(cn);
    cn = NULL;
    e = (struct err){0};
    gen(lp, &cfg, 4, NULL, "input_blocks.1.0.nonsense.weight");
    EXPECT_OK(control_lora_load(lp, &cx, &e));
    rc = cx ? control_lora_make(cx, ck.model[MODEL_UNET], &ck.cfg, TENSOR_F32, &cn, &e) : -1;
    ok(rc == ERR_INVALID && strstr(e.msg, "unexpected tensor 'input_blocks.1.0.nonsense.weight'"),
       "an unexpected tensor: %s", e.msg);
    control_lora_unref(cx);
    controlnet_unref(cn);
    cx = NULL;
    e = (struct err){0};
    ok(control_lora_load(cp, &cx, &e) == ERR_UNSUPPORTED && !cx && strstr(e.msg, "lora_controlnet"),
       "a checkpoint: %s", e.msg);
    mm_unload(mm, ck.model[MODEL_UNET]);
    model_ckpt_release(&ck);
    control_lora_unref(cl);
    unlink(lp);
    unlink(cp);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/test_models_cnl.XXXXXX");
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
    mm_free(mm);
    rmdir(dir);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
