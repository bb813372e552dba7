/*
 * test_models_controlnet — the ControlNet (models/controlnet/controlnet.h) against a
 * float64 reference written here, apart from the model code: a tiny random SD1.5
 * ControlNet (tools/ckpt_gen, the real control_model.* layout at gen_ckpt --tiny
 * widths) gives residuals equal to the reference's; the UNet with those residuals at
 * two strengths equals the reference UNet with them; strength 0 residuals leave the
 * UNet's output bit-identical; chained residuals add; the UNet with FreeU / FreeU_V2
 * patched into its output blocks (unet_eval_patched) equals the reference with
 * nodes_freelunch.py's patch written here (full 2-D DFT, fftshift-ed box). Loading: the three namings, the
 * family from the shapes (SDXL's too), a diff ControlNet adds the UNet's weights, and
 * bad files (a checkpoint, a missing or misshapen tensor, an unexpected one) fail with
 * a message naming the file. The reference is ref_unet64.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "checkpoint.h"
#include "ckpt_gen.h"
#include "controlnet.h"
#include "family.h"
#include "harness.h"
#include "memmgr.h"
#include "ref_unet64.h"
#include "unet.h"
#include "unet_freeu.h"

static char dir[64];

/* ---- helpers -------------------------------------------------------------------------- */

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

static int gen(const char *path, const struct model_config *cfg, unsigned flags,
               const char *drop, const char *extra)
{
    struct ckpt_gen_opts o;
    struct err e = {0};
    ckpt_gen_opts_default(&o);
    o.cfg = *cfg;
    o.seed = 7;
    o.flags = flags;
    o.drop_tensor = drop;
    o.extra_tensor = extra;
    int rc = ckpt_gen_write(&o, path, &e);
    if (rc < 0)
        PANIC("gen '%s': %s", path, e.msg);
    return rc;
}

/* ---- tests ---------------------------------------------------------------------------- */

#define H 8
#define WD 8
#define T 8

static void test_numerics(struct mm *mm)
{
    struct model_config cfg;
    struct err e = {0};
    char cn_path[128], ck_path[128];
    sd15_config_tiny(&cfg);
    snprintf(cn_path, sizeof(cn_path), "%s/cn.safetensors", dir);
    snprintf(ck_path, sizeof(ck_path), "%s/ck.safetensors", dir);
    gen(cn_path, &cfg, CKPT_GEN_CONTROLNET, NULL, NULL);
    gen(ck_path, &cfg, 0, NULL, NULL);
    struct controlnet *cn = NULL;
    EXPECT_OK(controlnet_load(cn_path, NULL, TENSOR_F32, &cn, &e));
    if (!cn)
        return;
    ok(cn->cfg.family == MODEL_FAMILY_SD15 && cn->hint_ch == 3 &&
           cn->cfg.unet.model_ch == cfg.unet.model_ch && cn->cfg.unet.ctx_dim == cfg.unet.ctx_dim,
       "tiny ControlNet detected as SD1.5 (width %d, context %d, hint %d)", cn->cfg.unet.model_ch,
       cn->cfg.unet.ctx_dim, cn->hint_ch);
    static const enum tensor_dtype dt[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct model_ckpt ck;
    EXPECT_OK(model_ckpt_load(ck_path, MODEL_LOAD_UNET, dt, &ck, &e));
    struct patcher *unet = patcher_new(ck.model[MODEL_UNET]);
    size_t act = controlnet_plan_bytes(cn, 1, H, WD, T) + unet_plan_bytes(&cfg.unet, 1, H, WD, T);
    struct mm_request req = {.n_models = 2, .models = {unet, cn->p}, .activation_bytes = act};
    struct mm_report rep;
    EXPECT_OK(mm_load_models(mm, &req, &rep, &e));
    size_t in_plan = 0;
    for (int i = 0; i < rep.n_models; i++)
        if (strcmp(rep.models[i].name, "controlnet") == 0)
            in_plan = rep.models[i].bytes_resident + rep.models[i].bytes_streamed;
    /* the cpu device uses the host copies in place: the plan counts them (issue 13) */
    size_t cn_bytes = patcher_model_host_bytes(patcher_model_of(cn->p), NULL);
    ok(in_plan == cn_bytes, "the plan holds the ControlNet's %zu bytes (%zu)", cn_bytes,
       in_plan);

    /* inputs */
    struct dev *d = patcher_device(unet);
    float xs[4 * H * WD], cs[T * 64], hs[3 * 64 * H * WD];
    wave(xs, 4 * H * WD, 0.37, 0.1);
    wave(cs, T * 64, 0.11, 0.7);
    for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++) /* an image in 0..1 */
        hs[i] = (float)(0.5 + 0.5 * sin(0.013 * (double)i));
    struct tensor *x = dev_tensor(d, 4, (const int64_t[]){1, 4, H, WD}, xs);
    struct tensor *ctx = dev_tensor(d, 3, (const int64_t[]){1, T, 64}, cs);
    struct tensor *hint = dev_tensor(d, 4, (const int64_t[]){1, 3, 8 * H, 8 * WD}, hs);
    float t = 421.0f;

    struct act rx = ref_act_new(4, H, WD), rh = ref_act_new(3, 8 * H, 8 * WD);
    double rc_ctx[T * 64];
    for (int i = 0; i < 4 * H * WD; i++)
        rx.v[i] = xs[i];
    for (int i = 0; i < 3 * 64 * H * WD; i++)
        rh.v[i] = hs[i];
    for (int i = 0; i < T * 64; i++)
        rc_ctx[i] = cs[i];
    ref_ctx = rc_ctx;
    ref_tokens = T;
    ref_ctx_dim = 64;
    ref_heads = cfg.unet.heads;

    /* residuals at strength 0.7 */
    struct st_file *cf = NULL;
    EXPECT_OK(st_open(cn_path, &cf, &e));
    ref_file = cf;
    ref_prefix = "control_model.";
    struct act res[UNET_MAX_BLOCKS + 1];
    int ns = ref_controlnet(&cfg.unet, &rx, t, &rh, 0.7, res);
    struct controlnet_out co;
    EXPECT_OK(controlnet_eval(cn, x, &t, ctx, NULL, hint, 0.7f, &co, &e));
    ok(co.n_output == ns && co.middle, "%d residuals and the middle's (reference %d)",
       co.n_output, ns);
    double worst = 0;
    for (int i = 0; i < ns && i < co.n_output; i++)
        worst = fmax(worst, max_rel(co.output[i], res[i].v,
                                    (size_t)res[i].c * res[i].h * res[i].w));
    worst = fmax(worst, max_rel(co.middle, res[ns].v, (size_t)res[ns].c * res[ns].h * res[ns].w));
    ok(worst < 2e-4, "residuals equal the float64 reference (max error / max |ref| %.2e)", worst);
    st_close(cf);

    /* the UNet with them, at 0.7 and at 1.6 (a second eval of the ControlNet) */
    struct st_file *uf = NULL;
    EXPECT_OK(st_open(ck_path, &uf, &e));
    ref_file = uf;
    ref_prefix = "model.diffusion_model.";
    struct tensor *eps = dev_tensor(d, 4, (const int64_t[]){1, 4, H, WD}, NULL);
    struct tensor *eps0 = dev_tensor(d, 4, (const int64_t[]){1, 4, H, WD}, NULL);
    struct unet_control uc;
    for (int pass = 0; pass < 2; pass++) {
        double s = pass ? 1.6 : 0.7;
        if (pass) {
            controlnet_out_release(&co);
            EXPECT_OK(controlnet_eval(cn, x, &t, ctx, NULL, hint, (float)s, &co, &e));
            for (int i = 0; i <= ns; i++)
                for (int k = 0; k < res[i].c * res[i].h * res[i].w; k++)
                    res[i].v[k] *= s / 0.7;
        }
        controlnet_out_view(&co, &uc);
        EXPECT_OK(unet_eval_control(unet, &cfg.unet, x, &t, ctx, NULL, &uc, eps, &e));
        struct act re = ref_unet(&cfg.unet, &rx, t, res);
        double err = max_rel(eps, re.v, 4 * H * WD);
        ok(err < 2e-4, "UNet output with control at strength %.1f equals the reference (%.2e)", s,
           err);
        ref_act_free(&re);
    }
    /* without control: the reference without residuals; the control changed eps */
    EXPECT_OK(unet_eval(unet, &cfg.unet, x, &t, ctx, NULL, eps0, NULL, &e));
    struct act re0 = ref_unet(&cfg.unet, &rx, t, NULL);
    ok(max_rel(eps0, re0.v, 4 * H * WD) < 2e-4, "UNet without control equals the reference");
    ok(max_rel(eps, re0.v, 4 * H * WD) > 1e-2, "the control changes the output (%.2e)",
       max_rel(eps, re0.v, 4 * H * WD));
    ref_act_free(&re0);

    /* FreeU and FreeU_V2 in the output blocks (the tiny widths 32*{1,2,3,3}: only the
     * 2*model_ch level matches, so b2/s2 carry the check), with control residuals */
    for (int v2 = 0; v2 < 2; v2++) {
        struct unet_freeu fu = {.v2 = v2, .model_ch = cfg.unet.model_ch, .b1 = 1.1,
                                .b2 = v2 ? 1.4 : 1.2, .s1 = 0.9, .s2 = 0.2};
        struct unet_patches up = {.output_block = unet_freeu_output_block, .user = &fu};
        struct tensor *epf = dev_tensor(d, 4, (const int64_t[]){1, 4, H, WD}, NULL);
        EXPECT_OK(unet_eval_patched(unet, &cfg.unet, x, &t, ctx, NULL, &uc, &up, epf, &e));
        ref_freeu = &fu;
        struct act rf = ref_unet(&cfg.unet, &rx, t, res);
        ref_freeu = NULL;
        double err = max_rel(epf, rf.v, 4 * H * WD);
        ok(err < 2e-4, "%s in the output blocks (with control) equals the reference (%.2e)",
           v2 ? "FreeU_V2" : "FreeU", err);
        float with[4 * H * WD], without[4 * H * WD];
        double dmax = 0, amax = 0;
        tensor_read_f32(epf, with, 4 * H * WD, &e);
        tensor_free(epf);
        tensor_read_f32(eps, without, 4 * H * WD, &e); /* the same control, no FreeU */
        for (int i = 0; i < 4 * H * WD; i++) {
            dmax = fmax(dmax, fabs(with[i] - without[i]));
            amax = fmax(amax, fabs(without[i]));
        }
        ok(dmax > 1e-3 * amax, "%s changes the output (%.2e)", v2 ? "FreeU_V2" : "FreeU",
           dmax / amax);
        ref_act_free(&rf);
    }

    /* strength 0: bit-identical to no control */
    controlnet_out_release(&co);
    EXPECT_OK(controlnet_eval(cn, x, &t, ctx, NULL, hint, 0.0f, &co, &e));
    controlnet_out_view(&co, &uc);
    EXPECT_OK(unet_eval_control(unet, &cfg.unet, x, &t, ctx, NULL, &uc, eps, &e));
    float a0[4 * H * WD], a1[4 * H * WD];
    tensor_read_f32(eps0, a0, 4 * H * WD, &e);
    tensor_read_f32(eps, a1, 4 * H * WD, &e);
    ok(memcmp(a0, a1, sizeof(a0)) == 0, "strength 0 residuals: the output is bit-identical");

    /* chaining: prev + cur, slot by slot */
    struct controlnet_out c1, c2;
    EXPECT_OK(controlnet_eval(cn, x, &t, ctx, NULL, hint, 0.5f, &c1, &e));
    EXPECT_OK(controlnet_eval(cn, x, &t, ctx, NULL, hint, 0.25f, &c2, &e));
    EXPECT_OK(controlnet_out_merge(&c2, &c1, &e));
    for (int i = 0; i <= ns; i++)
        for (int k = 0; k < res[i].c * res[i].h * res[i].w; k++)
            res[i].v[k] *= 0.75 / 1.6;
    worst = max_rel(c2.middle, res[ns].v, (size_t)res[ns].c * res[ns].h * res[ns].w);
    for (int i = 0; i < ns; i++)
        worst = fmax(worst, max_rel(c2.output[i], res[i].v,
                                    (size_t)res[i].c * res[i].h * res[i].w));
    ok(worst < 2e-4, "two chained ControlNets (0.5, 0.25) add up to 0.75 (%.2e)", worst);
    controlnet_out_release(&c1);
    controlnet_out_release(&c2);
    controlnet_out_release(&co);
    st_close(uf);
    for (int i = 0; i <= ns; i++)
        ref_act_free(&res[i]);
    ref_act_free(&rx);
    ref_act_free(&rh);
    tensor_free(x);
    tensor_free(ctx);
    tensor_free(hint);
    tensor_free(eps);
    tensor_free(eps0);
    mm_node_end(mm, &rep);

    /* a diff ControlNet: its weights are the file's plus the UNet's */
    char df[128];
    snprintf(df, sizeof(df), "%s/diff.safetensors", dir);
    gen(df, &cfg, CKPT_GEN_CONTROLNET | CKPT_GEN_CN_DIFF, NULL, NULL);
    struct controlnet *dcn = NULL;
    EXPECT_OK(controlnet_load(df, unet, TENSOR_F32, &dcn, &e));
    if (dcn) {
        const char *key = "model.diffusion_model.input_blocks.1.0.in_layers.2.weight";
        int l0, i0, l1, i1, l2, i2, nd;
        int64_t sh[4];
        enum tensor_dtype t0, t1, t2;
        patcher_model_find(patcher_model_of(dcn->p), key, &l0, &i0);
        patcher_model_find(patcher_model_of(cn->p), key, &l1, &i1);
        patcher_model_find(ck.model[MODEL_UNET], key, &l2, &i2);
        const float *w0 = patcher_model_host_data(patcher_model_of(dcn->p), l0, i0, &t0, &nd, sh);
        const float *w1 = patcher_model_host_data(patcher_model_of(cn->p), l1, i1, &t1, &nd, sh);
        const float *w2 = patcher_model_host_data(ck.model[MODEL_UNET], l2, i2, &t2, &nd, sh);
        ok(t0 == TENSOR_F32 && t1 == TENSOR_F32 && t2 == TENSOR_F32 && w0[5] == w1[5] + w2[5] &&
               w0[77] == w1[77] + w2[77],
           "diff ControlNet weight = delta + the UNet's");
        controlnet_unref(dcn);
    }
    mm_unload(mm, patcher_model_of(cn->p));
    mm_unload(mm, ck.model[MODEL_UNET]);
    patcher_unref(unet);
    model_ckpt_release(&ck);
    controlnet_unref(cn);
    unlink(df);
    unlink(cn_path);
    unlink(ck_path);
}

static void expect_fail(const char *path, int code, const char *what, const char *needle)
{
    struct controlnet *cn = NULL;
    struct err e = {0};
    int rc = controlnet_load(path, NULL, TENSOR_F32, &cn, &e);
    ok(rc == code && !cn && strstr(e.msg, needle) && strstr(e.msg, path), "%s: %s", what, e.msg);
    controlnet_unref(cn);
}

static void test_files(void)
{
    struct model_config cfg, xl;
    struct err e = {0};
    char p[128];
    sd15_config_tiny(&cfg);
    sdxl_config_tiny(&xl);
    snprintf(p, sizeof(p), "%s/f.safetensors", dir);

    struct controlnet *cn = NULL;
    gen(p, &cfg, CKPT_GEN_CONTROLNET | CKPT_GEN_CN_BARE, NULL, NULL);
    ok(controlnet_load(p, NULL, TENSOR_F32, &cn, &e) == 0 && cn &&
           cn->cfg.family == MODEL_FAMILY_SD15,
       "names without control_model. load (%s)", e.msg);
    controlnet_unref(cn);
    cn = NULL;
    gen(p, &xl, CKPT_GEN_CONTROLNET, NULL, NULL);
    ok(controlnet_load(p, NULL, TENSOR_F32, &cn, &e) == 0 && cn &&
           cn->cfg.family == MODEL_FAMILY_SDXL && cn->cfg.unet.adm_in == xl.unet.adm_in,
       "a tiny SDXL ControlNet is SDXL (context %d, ADM %d) (%s)", cn ? cn->cfg.unet.ctx_dim : 0,
       cn ? cn->cfg.unet.adm_in : 0, e.msg);
    controlnet_unref(cn);

    /* diffusers names: the same weights as the ldm file of the same seed */
    char q[128];
    struct controlnet *a = NULL, *b = NULL;
    snprintf(q, sizeof(q), "%s/g.safetensors", dir);
    gen(p, &xl, CKPT_GEN_CONTROLNET | CKPT_GEN_CN_DIFFUSERS, NULL, NULL);
    gen(q, &xl, CKPT_GEN_CONTROLNET, NULL, NULL);
    struct st_file *df = NULL;
    EXPECT_OK(st_open(p, &df, &e));
    ok(df && st_find(df, "controlnet_cond_embedding.blocks.5.weight") &&
           st_find(df, "controlnet_down_blocks.8.bias") &&
           st_find(df, "down_blocks.1.attentions.1.transformer_blocks.1.attn2.to_k.weight") &&
           st_find(df, "down_blocks.0.downsamplers.0.conv.weight") &&
           st_find(df, "mid_block.resnets.1.time_emb_proj.weight") &&
           st_find(df, "add_embedding.linear_2.bias") && st_find(df, "controlnet_mid_block.weight"),
       "the generator writes diffusers ControlNetModel names");
    st_close(df);
    ok(controlnet_load(p, NULL, TENSOR_F32, &a, &e) == 0 &&
           controlnet_load(q, NULL, TENSOR_F32, &b, &e) == 0,
       "diffusers and ldm files load (%s)", e.msg);
    if (a && b) {
        const struct patcher_model *ma = patcher_model_of(a->p), *mb = patcher_model_of(b->p);
        int same = a->cfg.family == MODEL_FAMILY_SDXL &&
                   !memcmp(&a->cfg, &b->cfg, sizeof(a->cfg)) &&
                   patcher_model_layer_count(ma) == patcher_model_layer_count(mb);
        for (int l = 0; same && l < patcher_model_layer_count(ma); l++)
            for (int i = 0; same && i < patcher_model_weight_count(ma, l); i++) {
                enum tensor_dtype t0, t1;
                int nd;
                int64_t s0[4], s1[4];
                const float *w0 = patcher_model_host_data(ma, l, i, &t0, &nd, s0);
                const float *w1 = patcher_model_host_data(mb, l, i, &t1, &nd, s1);
                same = !strcmp(patcher_model_weight_key(ma, l, i), patcher_model_weight_key(mb, l, i)) &&
                       !memcmp(s0, s1, sizeof(s0)) && w0[0] == w1[0];
            }
        ok(same, "the diffusers SDXL ControlNet holds the ldm file's weights, keys and layers");
    }
    controlnet_unref(a);
    controlnet_unref(b);
    unlink(q);

    gen(p, &cfg, 0, NULL, NULL);
    expect_fail(p, ERR_UNSUPPORTED, "a checkpoint", "checkpoint");
    gen(p, &cfg, CKPT_GEN_CONTROLNET, "zero_convs.3.0.weight", NULL);
    expect_fail(p, ERR_INVALID, "a missing zero conv", "zero_convs.3.0.weight");
    gen(p, &cfg, CKPT_GEN_CONTROLNET, "input_hint_block.0.weight", NULL);
    expect_fail(p, ERR_INVALID, "no hint encoder", "input_hint_block");
    gen(p, &cfg, CKPT_GEN_CONTROLNET, NULL, "control_model.zero_convs.99.0.weight");
    expect_fail(p, ERR_INVALID, "an unexpected tensor", "zero_convs.99.0.weight");
    FILE *fp = fopen(p, "wb");
    fputs("not a safetensors file", fp);
    fclose(fp);
    cn = NULL;
    ok(controlnet_load(p, NULL, TENSOR_F32, &cn, &e) < 0 && !cn, "garbage fails: %s", e.msg);
    unlink(p);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/test_models_cn.XXXXXX");
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
