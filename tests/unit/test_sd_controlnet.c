/*
 * test_sd_controlnet — the ControlNet nodes and the sampler's use of them, at node level
 * on a tiny random checkpoint and ControlNet (tools/ckpt_gen) on the CPU:
 *   - start/end percent -> sigma against ComfyUI's formula computed here in float64 from
 *     the SD1.5 beta schedule, and the window test at its edges;
 *   - ControlNetApplyAdvanced: one control shared by positive and negative, chained to
 *     the control the entries had; strength 0 passes the inputs through;
 *   - KSampler: a control changes the latent, a window that takes no step gives exactly
 *     the uncontrolled latent, a window that takes some steps is in between;
 *   - bad input: a missing file, a checkpoint as ControlNet, a hint without 3 channels.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "ckpt_gen.h"
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

static struct value *ksample(struct value *model, struct value *pos, struct value *neg,
                             struct value *latent)
{
    const char *names[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                           "positive", "negative", "latent_image", "denoise"};
    struct value *v[] = {value_ref(model), value_new_u64(3), value_new_int(4),
                         value_new_float(6.0), value_new_string("euler"),
                         value_new_string("normal"), value_ref(pos), value_ref(neg),
                         value_ref(latent), value_new_float(1.0)};
    struct value *out[4];
    char msg[256];
    if (run(&sd_ksampler, names, v, 10, out, msg, sizeof msg) < 0) {
        printf("# KSampler: %s\n", msg);
        return NULL;
    }
    return out[0];
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
    ok(net && sd_controlnet_of(net), "ControlNetLoader: a CONTROL_NET (%s)", net ? "ok" : msg);
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

    /* bad input */
    struct value *mask = value_new_tensor("IMAGE", 4, (const int64_t[]){1, 8, 8, 1});
    struct value *bad[4] = {0};
    ok(apply(pos, neg, net, mask, 1.0, 0.0, 1.0, bad, msg) < 0 && strstr(msg, "channels"),
       "a 1-channel hint: %s", msg);
    value_unref(mask);
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

int main(void)
{
    long live0 = alloc_live_count();
    char dir[] = "/tmp/test_sd_cn.XXXXXX", sub[320], p1[400], p2[400], p3[400];
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    mkdir(sub, 0755);
    snprintf(p1, sizeof p1, "%s/tiny.safetensors", sub);
    snprintf(sub, sizeof sub, "%s/controlnet", dir);
    mkdir(sub, 0755);
    snprintf(p2, sizeof p2, "%s/cn.safetensors", sub);
    snprintf(p3, sizeof p3, "%s/ckpt.safetensors", sub);
    struct ckpt_gen_opts o;
    struct err e = {0};
    ckpt_gen_opts_default(&o);
    EXPECT_OK(ckpt_gen_write(&o, p1, &e));
    EXPECT_OK(ckpt_gen_write(&o, p3, &e));
    o.flags = CKPT_GEN_CONTROLNET;
    o.seed = 9;
    EXPECT_OK(ckpt_gen_write(&o, p2, &e));
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
    mm_free(mm);
    unlink(p1);
    unlink(p2);
    unlink(p3);
    rmdir(sub);
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    rmdir(sub);
    rmdir(dir);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
