/*
 * test_sd_controlnet — the ControlNet nodes and the sampler's use of them, at node level
 * on a tiny random checkpoint and ControlNet (tools/ckpt_gen) on the CPU:
 *   - start/end percent -> sigma against ComfyUI's formula computed here in float64 from
 *     the SD1.5 beta schedule, and the window test at its edges;
 *   - ControlNetApplyAdvanced: one control shared by positive and negative, chained to
 *     the control the entries had; strength 0 passes the inputs through;
 *   - KSampler: a control changes the latent, a window that takes no step gives exactly
 *     the uncontrolled latent, a window that takes some steps is in between;
 *   - a *_shuffle file's residuals are pooled (global_average_pooling);
 *   - bad input: a missing file, a checkpoint as ControlNet, a hint without 3 channels;
 *   - the other kinds: a Union through SetUnionControlNetType (its type changes the latent;
 *     tile on a 6-type Union fails with ComfyUI's message), T2I-Adapters (3- and
 *     1-channel) and a Control-LoRA through ControlNetLoader and the apply node, an SDXL
 *     adapter on an SD1.5 model refused; the hint resized once per size, across steps and samplings.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "ckpt_gen.h"
#include "family.h"
#include "harness.h"
#include "memmgr.h"
#include "node_registry.h"
#include "node_run.h"
#include "sd_backend.h"
#include "sd_control.h"
#include "sd_nodes.h"
#include "sd_types.h"

static struct node_env env;

/* Run `cls` with named inputs (references taken over); outputs into out[4] (or dropped). */
static int run(const struct node_class *cls, const char *const *names, struct value **vals,
               int n, struct value **out, char *msg, size_t msg_size)
{
    struct value *in[16] = {0}, *outs[4] = {0};
    for (int i = 0; i < n; i++)
        in[node_class_input_index(cls, names[i])] = vals[i];
    struct node_ctx c;
    node_ctx_init(&c, cls, "1", &env, in, outs);
    int rc = cls->run(&c);
    if (msg)
        snprintf(msg, msg_size, "%s: %s", c.exc_type, c.exc_message.ptr);
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

/* ComfyUI's ModelSamplingDiscrete.percent_to_sigma, in float64 from the betas. */
static double ref_percent_to_sigma(double p)
{
    if (p <= 0)
        return 999999999.9;
    if (p >= 1)
        return 0;
    double lo = sqrt(0.00085), hi = sqrt(0.012), cum = 1, ls[1000];
    for (int i = 0; i < 1000; i++) {
        double b = lo + (hi - lo) * i / 999.0;
        cum *= 1 - b * b;
        ls[i] = log(sqrt((1 - cum) / cum));
    }
    double t = (1 - p) * 999.0, w = t - floor(t);
    return exp((1 - w) * ls[(int)floor(t)] + w * ls[(int)ceil(t)]);
}

static void test_window(void)
{
    struct sampling_discrete ms;
    sampling_discrete_init(&ms, 0.00085, 0.012);
    double worst = 0;
    for (int i = 1; i < 100; i++) {
        double p = i / 100.0 + 0.0037;
        worst = fmax(worst, fabs(sd_control_percent_to_sigma(&ms, p) / ref_percent_to_sigma(p) - 1));
    }
    ok(worst < 1e-5, "percent_to_sigma equals ComfyUI's formula (max rel %.2e)", worst);
    ok(sd_control_percent_to_sigma(&ms, 0) == 999999999.9 && sd_control_percent_to_sigma(&ms, 1) == 0,
       "percent 0 -> 999999999.9, 1 -> 0");
    struct sd_control c = {.start = 0.25, .end = 0.75};
    float hi = (float)ref_percent_to_sigma(0.25), lo = (float)ref_percent_to_sigma(0.75);
    ok(!sd_control_active(&c, &ms, hi * 1.001f) && sd_control_active(&c, &ms, hi * 0.999f) &&
           sd_control_active(&c, &ms, lo * 1.001f) && !sd_control_active(&c, &ms, lo * 0.999f),
       "window [0.25, 0.75]: active for sigma in [%.4f, %.4f] only", lo, hi);
    c.start = 0;
    c.end = 1;
    ok(sd_control_active(&c, &ms, 14.6f) && sd_control_active(&c, &ms, 0.0f), "[0, 1] always");
}

static struct value *encode(struct value *clip, const char *text)
{
    const char *names[] = {"text", "clip"};
    struct value *v[] = {value_new_string(text), value_ref(clip)}, *out[4];
    return run(&sd_clip_text_encode, names, v, 2, out, NULL, 0) < 0 ? NULL : out[0];
}

/* ControlNetApplyAdvanced: out[0], out[1] = positive, negative. */
static int apply(struct value *pos, struct value *neg, struct value *cn, struct value *img,
                 double strength, double start, double end, struct value **out, char *msg)
{
    const char *names[] = {"positive", "negative", "control_net", "image", "strength",
                           "start_percent", "end_percent"};
    struct value *v[] = {value_ref(pos), value_ref(neg), value_ref(cn), value_ref(img),
                         value_new_float(strength), value_new_float(start), value_new_float(end)};
    return run(&sd_controlnet_apply_advanced, names, v, 7, out, msg, 256);
}

static struct value *ksample_msg(struct value *model, struct value *pos, struct value *neg,
                                 struct value *latent, char *msg, size_t msg_size)
{
    const char *names[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                           "positive", "negative", "latent_image", "denoise"};
    struct value *v[] = {value_ref(model), value_new_u64(3), value_new_int(4),
                         value_new_float(6.0), value_new_string("euler"),
                         value_new_string("normal"), value_ref(pos), value_ref(neg),
                         value_ref(latent), value_new_float(1.0)};
    struct value *out[4];
    return run(&sd_ksampler, names, v, 10, out, msg, msg_size) < 0 ? NULL : out[0];
}

static struct value *ksample(struct value *model, struct value *pos, struct value *neg,
                             struct value *latent)
{
    char msg[256];
    struct value *l = ksample_msg(model, pos, neg, latent, msg, sizeof msg);
    if (!l)
        printf("# KSampler: %s\n", msg);
    return l;
}

static double latent_diff(const struct value *a, const struct value *b)
{
    const struct sd_latent *x = sd_latent_of(a), *y = sd_latent_of(b);
    double d = 0;
    for (int64_t i = 0; x && y && i < x->b * x->c * x->h * x->w; i++)
        d = fmax(d, fabs(x->samples[i] - y->samples[i]));
    return x && y ? d : -1;
}

static struct value *load_cn(const char *name, char *msg)
{
    const char *names[] = {"control_net_name"};
    struct value *v[] = {value_new_string(name)}, *out[4];
    return run(&sd_controlnet_loader, names, v, 1, out, msg, 256) < 0 ? NULL : out[0];
}

static void test_nodes(const char *dir)
{
    char msg[256];
    const char *cn[] = {"ckpt_name"};
    struct value *cv[] = {value_new_string("tiny.safetensors")}, *mcv[4] = {0};
    if (run(&sd_checkpoint_loader_simple, cn, cv, 1, mcv, msg, sizeof msg) < 0) {
        ok(0, "checkpoint: %s", msg);
        return;
    }
    struct value *model = mcv[0], *clip = mcv[1];
    value_unref(mcv[2]);
    struct value *pos = encode(clip, "a cat"), *neg = encode(clip, "blurry");
    struct value *img = value_new_tensor("IMAGE", 4, (const int64_t[]){1, 40, 56, 3});
    for (size_t i = 0; i < img->numel; i++)
        img->data[i] = (float)((i / 3 + i / 170) % 7) / 6.0f;
    const char *en[] = {"width", "height", "batch_size"};
    struct value *ev[] = {value_new_int(64), value_new_int(48), value_new_int(1)}, *eo[4];
    run(&sd_empty_latent_image, en, ev, 3, eo, NULL, 0);
    struct value *empty = eo[0];

    struct value *net = load_cn("cn.safetensors", msg);
    ok(net && sd_cnet_of(net), "ControlNetLoader: a CONTROL_NET (%s)", net ? "ok" : msg);
    if (!net)
        goto out;
    struct value *a[4] = {0}, *b[4] = {0}, *z[4] = {0}, *w0[4] = {0}, *wh[4] = {0};
    EXPECT_OK(apply(pos, neg, net, img, 0.9, 0.0, 1.0, a, msg));
    const struct sd_cond *ap = sd_cond_of(a[0]), *an = sd_cond_of(a[1]);
    ok(ap && an && ap->entries[0].control && ap->entries[0].control == an->entries[0].control &&
           !ap->entries[0].control->prev && !sd_cond_of(pos)->entries[0].control,
       "one control on positive and negative, the inputs unchanged");
    EXPECT_OK(apply(a[0], a[1], net, img, 0.5, 0.0, 1.0, b, msg));
    ok(sd_cond_of(b[0])->entries[0].control->prev == ap->entries[0].control &&
           sd_cond_of(b[0])->entries[0].control == sd_cond_of(b[1])->entries[0].control,
       "a second apply chains to the first (previous_controlnet)");
    EXPECT_OK(apply(pos, neg, net, img, 0.0, 0.0, 1.0, z, msg));
    ok(z[0] == pos && z[1] == neg, "strength 0 passes the conditionings through");
    EXPECT_OK(apply(pos, neg, net, img, 0.9, 0.0, 0.0, w0, msg));  /* takes no step */
    EXPECT_OK(apply(pos, neg, net, img, 0.9, 0.5, 1.0, wh, msg));  /* the later steps */

    struct value *l0 = ksample(model, pos, neg, empty), *l1 = ksample(model, a[0], a[1], empty);
    struct value *l2 = ksample(model, b[0], b[1], empty), *lw0 = ksample(model, w0[0], w0[1], empty);
    struct value *lwh = ksample(model, wh[0], wh[1], empty);
    ok(l0 && l1 && latent_diff(l0, l1) > 1e-3, "the control changes the latent (%.3g)",
       latent_diff(l0, l1));
    ok(l2 && latent_diff(l2, l1) > 1e-4, "a chained second control changes it again (%.3g)",
       latent_diff(l2, l1));
    ok(lw0 && latent_diff(lw0, l0) == 0.0, "a window that takes no step: the uncontrolled latent");
    ok(lwh && latent_diff(lwh, l0) > 1e-4 && latent_diff(lwh, l1) > 1e-4,
       "window [0.5, 1]: neither (%.3g, %.3g)", latent_diff(lwh, l0), latent_diff(lwh, l1));
    struct value *a1[2] = {value_ref(a[0]), value_ref(a[1])}, *l0b = value_ref(l0);
    for (int i = 0; i < 2; i++) {
        value_unref(a[i]);
        value_unref(b[i]);
        value_unref(z[i]);
        value_unref(w0[i]);
        value_unref(wh[i]);
    }
    value_unref(l0);
    value_unref(l1);
    value_unref(l2);
    value_unref(lw0);
    value_unref(lwh);

    /* a "_shuffle" file (the same weights as cn.safetensors): global average pooling */
    struct value *shuf = load_cn("cn_shuffle.safetensors", msg), *g[4] = {0};
    ok(shuf && sd_cnet_of(shuf)->global_average_pooling && !sd_cnet_of(net)->global_average_pooling,
       "a *_shuffle file gets global_average_pooling (load_controlnet's rule)");
    if (shuf) {
        EXPECT_OK(apply(pos, neg, shuf, img, 0.9, 0.0, 1.0, g, msg));
        struct value *lg = ksample(model, g[0], g[1], empty), *l1b = ksample(model, a1[0], a1[1], empty);
        ok(lg && l1b && latent_diff(lg, l1b) > 1e-4 && latent_diff(lg, l0b) > 1e-4,
           "pooled residuals give another latent (%.3g)", latent_diff(lg, l1b));
        value_unref(lg);
        value_unref(l1b);
        value_unref(g[0]);
        value_unref(g[1]);
    }
    value_unref(shuf);

    /* bad input */
    struct value *mask = value_new_tensor("IMAGE", 4, (const int64_t[]){1, 8, 8, 1});
    struct value *bad[4] = {0};
    ok(apply(pos, neg, net, mask, 1.0, 0.0, 1.0, bad, msg) < 0 && strstr(msg, "channels"),
       "a 1-channel hint: %s", msg);
    value_unref(mask);
    value_unref(a1[0]);
    value_unref(a1[1]);
    value_unref(l0b);
    struct value *none = load_cn("nope.safetensors", msg);
    ok(!none && strstr(msg, "FileNotFoundError") && strstr(msg, "'controlnet'"),
       "a missing file: %s", msg);
    struct value *ck = load_cn("ckpt.safetensors", msg);
    ok(!ck && strstr(msg, "RuntimeError") && strstr(msg, "not a supported ControlNet"),
       "a checkpoint: %s", msg);
    value_unref(net);
out:
    (void)dir;
    value_unref(img);
    value_unref(empty);
    value_unref(pos);
    value_unref(neg);
    value_unref(model);
    value_unref(clip);
}

static struct value *set_type(struct value *net, const char *type)
{
    const char *names[] = {"control_net", "type"};
    struct value *v[] = {value_ref(net), value_new_string(type)}, *out[4];
    return run(&sd_set_union_controlnet_type, names, v, 2, out, NULL, 0) < 0 ? NULL : out[0];
}

/* Union ControlNets through SetUnionControlNetType, T2I-Adapters through the loader and
 * the apply node, and the hint resized once per size. */
static void test_kinds(void)
{
    char msg[256];
    const char *cn[] = {"ckpt_name"};
    struct value *cv[] = {value_new_string("tiny_t2i.safetensors")}, *mcv[4] = {0};
    if (run(&sd_checkpoint_loader_simple, cn, cv, 1, mcv, msg, sizeof msg) < 0) {
        ok(0, "checkpoint: %s", msg);
        return;
    }
    struct value *model = mcv[0], *clip = mcv[1];
    value_unref(mcv[2]);
    struct value *pos = encode(clip, "a dog"), *neg = encode(clip, "");
    struct value *img = value_new_tensor("IMAGE", 4, (const int64_t[]){1, 40, 56, 3});
    for (size_t i = 0; i < img->numel; i++)
        img->data[i] = (float)((i / 3 + i / 150) % 5) / 4.0f;
    const char *en[] = {"width", "height", "batch_size"};
    struct value *ev[] = {value_new_int(64), value_new_int(40), value_new_int(1)}, *eo[4];
    run(&sd_empty_latent_image, en, ev, 3, eo, NULL, 0);
    struct value *empty = eo[0], *l0 = ksample(model, pos, neg, empty);

    /* Union: canny vs auto; the hint resized once for the 4 steps x (cond, uncond) */
    struct value *u8 = load_cn("union8.safetensors", msg);
    ok(u8 && sd_cnet_of(u8)->cn && sd_cnet_of(u8)->cn->union_types == 8,
       "ControlNetLoader loads a Union (%s)", u8 ? "8 types" : msg);
    struct value *canny = u8 ? set_type(u8, "canny/lineart/anime_lineart/mlsd") : NULL;
    struct value *autot = u8 ? set_type(u8, "auto") : NULL;
    ok(canny && sd_cnet_of(canny)->control_type == 3 && sd_cnet_of(canny)->cn ==
           sd_cnet_of(u8)->cn && autot && sd_cnet_of(autot)->control_type == -1,
       "SetUnionControlNetType: canny is type 3, auto none, the model shared");
    struct value *a[4] = {0}, *b[4] = {0};
    if (canny && autot) {
        EXPECT_OK(apply(pos, neg, canny, img, 0.9, 0.0, 1.0, a, msg));
        EXPECT_OK(apply(pos, neg, autot, img, 0.9, 0.0, 1.0, b, msg));
        long r0 = sd_control_resize_count();
        struct value *la = ksample(model, a[0], a[1], empty);
        long r1 = sd_control_resize_count();
        struct value *lb = ksample(model, b[0], b[1], empty);
        ok(la && lb && latent_diff(la, l0) > 1e-3 && latent_diff(la, lb) > 1e-4,
           "a Union changes the latent, its type too (%.3g, %.3g)", latent_diff(la, l0),
           latent_diff(la, lb));
        ok(r1 - r0 == 1, "the hint was resized once for 4 steps (%ld)", r1 - r0);
        struct value *lc = ksample(model, a[0], a[1], empty);
        ok(sd_control_resize_count() == r1 + 1 && lc && latent_diff(lc, la) == 0.0,
           "a second sampling at that size reuses it, the same latent");
        value_unref(la);
        value_unref(lb);
        value_unref(lc);
    }
    for (int i = 0; i < 2; i++) {
        value_unref(a[i]);
        value_unref(b[i]);
    }
    /* tile on a 6-type Union: ComfyUI's error, at sampling */
    struct value *u6 = load_cn("union6.safetensors", msg), *tile = u6 ? set_type(u6, "tile") : NULL;
    if (tile) {
        EXPECT_OK(apply(pos, neg, tile, img, 1.0, 0.0, 1.0, a, msg));
        struct value *lt = ksample_msg(model, a[0], a[1], empty, msg, sizeof msg);
        ok(!lt && strstr(msg, "Control type tile(6) is out of range"), "tile on 6 types: %s",
           msg);
        value_unref(lt);
        value_unref(a[0]);
        value_unref(a[1]);
    }

    /* T2I-Adapters: a 3-channel full one and a 1-channel one (the image's mean) */
    const char *files[2] = {"t2i.safetensors", "t2i_depth.safetensors"};
    for (int k = 0; k < 2; k++) {
        struct value *t = load_cn(files[k], msg);
        ok(t && sd_cnet_of(t)->t2i && sd_cnet_of(t)->t2i->a.hint_ch == (k ? 1 : 3),
           "ControlNetLoader loads a T2I-Adapter (%s)", t ? files[k] : msg);
        if (!t)
            continue;
        EXPECT_OK(apply(pos, neg, t, img, 0.8, 0.0, 1.0, a, msg));
        long r0 = sd_control_resize_count();
        struct value *lt = ksample(model, a[0], a[1], empty);
        ok(lt && latent_diff(lt, l0) > 1e-3 && sd_control_resize_count() == r0 + 1,
           "the %s adapter changes the latent (%.3g), one resize", k ? "1-channel" : "full",
           latent_diff(lt, l0));
        value_unref(lt);
        value_unref(a[0]);
        value_unref(a[1]);
        value_unref(t);
    }
    /* a Control-LoRA: its ControlNet made at sampling from the model's UNet */
    struct value *lora = load_cn("control_lora.safetensors", msg);
    ok(lora && sd_cnet_of(lora)->lora && !sd_cnet_of(lora)->cn,
       "ControlNetLoader loads a Control-LoRA (%s)", lora ? "ok" : msg);
    if (lora) {
        EXPECT_OK(apply(pos, neg, lora, img, 0.8, 0.0, 1.0, a, msg));
        struct value *ll = ksample(model, a[0], a[1], empty);
        ok(ll && latent_diff(ll, l0) > 1e-3 && sd_cnet_of(lora)->_made,
           "the Control-LoRA changes the latent (%.3g)", latent_diff(ll, l0));
        value_unref(ll);
        value_unref(a[0]);
        value_unref(a[1]);
    }
    value_unref(lora);
    struct value *xl = load_cn("t2i_xl.safetensors", msg);
    if (xl) {
        EXPECT_OK(apply(pos, neg, xl, img, 1.0, 0.0, 1.0, a, msg));
        struct value *lx = ksample_msg(model, a[0], a[1], empty, msg, sizeof msg);
        ok(!lx && strstr(msg, "T2I-Adapter (SDXL") && strstr(msg, "does not fit"),
           "an SDXL adapter on an SD1.5 model: %s", msg);
        value_unref(lx);
        value_unref(a[0]);
        value_unref(a[1]);
    } else {
        ok(0, "t2i_xl: %s", msg);
    }
    value_unref(xl);
    value_unref(u8);
    value_unref(u6);
    value_unref(canny);
    value_unref(autot);
    value_unref(tile);
    value_unref(l0);
    value_unref(img);
    value_unref(empty);
    value_unref(pos);
    value_unref(neg);
    value_unref(model);
    value_unref(clip);
}

/* A generated file in dir/sub; its path is kept in paths[] for the cleanup. */
static void gen_file(const struct ckpt_gen_opts *o, const char *dir, const char *sub,
                     const char *name, char paths[][400], int *n)
{
    struct err e = {0};
    snprintf(paths[*n], 400, "%s/%s/%s", dir, sub, name);
    EXPECT_OK(ckpt_gen_write(o, paths[(*n)++], &e));
}

int main(void)
{
    long live0 = alloc_live_count();
    char dir[] = "/tmp/test_sd_cn.XXXXXX", sub[320], p1[400], p2[400], p3[400], p4[400];
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    mkdir(sub, 0755);
    snprintf(p1, sizeof p1, "%s/tiny.safetensors", sub);
    snprintf(sub, sizeof sub, "%s/controlnet", dir);
    mkdir(sub, 0755);
    snprintf(p2, sizeof p2, "%s/cn.safetensors", sub);
    snprintf(p3, sizeof p3, "%s/ckpt.safetensors", sub);
    snprintf(p4, sizeof p4, "%s/cn_shuffle.safetensors", sub);
    struct ckpt_gen_opts o;
    struct err e = {0};
    ckpt_gen_opts_default(&o);
    EXPECT_OK(ckpt_gen_write(&o, p1, &e));
    EXPECT_OK(ckpt_gen_write(&o, p3, &e));
    o.flags = CKPT_GEN_CONTROLNET;
    o.seed = 9;
    EXPECT_OK(ckpt_gen_write(&o, p2, &e));
    EXPECT_OK(ckpt_gen_write(&o, p4, &e));
    /* the kinds: a checkpoint of the adapters' widths (x 1, 2, 4, 4), Unions of its
     * trunk, adapters */
    char more[10][400];
    int nm = 0;
    struct ckpt_gen_opts k;
    ckpt_gen_opts_default(&k);
    k.cfg.unet.mult[2] = 4;
    k.cfg.unet.mult[3] = 4;
    gen_file(&k, dir, "checkpoints", "tiny_t2i.safetensors", more, &nm);
    k.flags = CKPT_GEN_CONTROLNET;
    k.cn_lora_rank = 4;
    gen_file(&k, dir, "controlnet", "control_lora.safetensors", more, &nm);
    k.cn_lora_rank = 0;
    k.flags = CKPT_GEN_CONTROLNET | CKPT_GEN_CN_DIFFUSERS;
    k.cn_union_types = 8;
    gen_file(&k, dir, "controlnet", "union8.safetensors", more, &nm);
    k.cn_union_types = 6;
    gen_file(&k, dir, "controlnet", "union6.safetensors", more, &nm);
    k.flags = 0;
    k.cn_union_types = 0;
    k.t2i = CKPT_GEN_T2I_FULL;
    gen_file(&k, dir, "controlnet", "t2i.safetensors", more, &nm);
    k.t2i_hint_ch = 1;
    gen_file(&k, dir, "controlnet", "t2i_depth.safetensors", more, &nm);
    k.t2i = CKPT_GEN_T2I_XL;
    sdxl_config_tiny(&k.cfg);
    gen_file(&k, dir, "controlnet", "t2i_xl.safetensors", more, &nm);
    tensor_threads_set(2);

    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    EXPECT_OK(mm_new(&mc, &mm, &e));
    env.models_dir = dir;
    env.mm = mm;
    test_window();
    test_nodes(dir);
    test_kinds();
    mm_free(mm);
    for (int i = 0; i < nm; i++)
        unlink(more[i]);
    unlink(p1);
    unlink(p2);
    unlink(p3);
    unlink(p4);
    rmdir(sub);
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    rmdir(sub);
    rmdir(dir);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
