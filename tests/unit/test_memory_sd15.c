/*
 * test_memory_sd15 — the SD1.5 UNet streamed by the memory manager: a tiny generated
 * checkpoint evaluated (batch 2, 16x16 latent, 77 tokens) on "sim:SIZE" devices whose
 * budgets hold 100/50/25/5 % of the UNet's weight bytes plus its activation plan,
 * loaded through mm_load_models / mm_node_end as nodes/sd_backend.c does.
 *
 * Asserts, per budget: the output is bit-identical to full residency and to the cpu
 * device; the device peak never exceeds the budget; bytes are streamed below 100 %;
 * nothing is left allocated on the device after the unload. A budget the planner
 * refuses must fail with ERR_DEVICE_OOM and a message naming the model and what it
 * needs; the test then raises
 * it in 1 % steps to the smallest that works and reports that.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "ckpt_gen.h"
#include "harness.h"
#include "memmgr.h"
#include "checkpoint.h"
#include "text_encoder.h"
#include "unet.h"
#include "vae.h"
#include "tensor.h"

enum { B = 2, H = 16, W = 16, T = 77 };

static struct model_ckpt ck;
static struct patcher *unet;
static float x_host[B * 4 * H * W];
static float ctx_host[B * T * 768];
static const float ts[B] = {999.0f, 321.0f};

/* The activation plan nodes/sd_backend.c's unet_prepare asks for. */
static size_t act_bytes(void)
{
    size_t io = (size_t)B * ((size_t)8 * H * W + (size_t)T * ck.cfg.unet.ctx_dim) * 4;
    return unet_plan_bytes(&ck.cfg.unet, B, H, W, T) + io;
}

static void fill(float *v, size_t n, unsigned seed)
{
    unsigned s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        v[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

struct run {
    float eps[B * 4 * H * W];
    size_t peak, copied, streamed;
    long allocs_after;
    size_t used_after;
};

/* One node: load, eval, node end, unload. Returns 0, or the load's error. */
static int run_on(const char *spec, struct run *r, struct err *e)
{
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = spec;
    struct mm *mm = NULL;
    int rc = mm_new(&mc, &mm, e);
    if (rc < 0)
        return rc;
    struct dev *d = mm_device(mm);
    dev_peak_reset(d);
    struct mm_request req = {.n_models = 1, .models = {unet}, .activation_bytes = act_bytes()};
    struct mm_report rep;
    if ((rc = mm_load_models(mm, &req, &rep, e)) < 0) {
        ok(dev_alloc_count(d) == 0, "%s: a refused load leaves nothing allocated", spec);
        mm_free(mm);
        return rc;
    }
    int64_t xs[4] = {B, 4, H, W}, cs[3] = {B, T, ck.cfg.unet.ctx_dim};
    struct tensor *x = NULL, *c = NULL, *eps = NULL;
    EXPECT_OK(tensor_new(d, TENSOR_F32, 4, xs, &x, e));
    EXPECT_OK(tensor_write_f32(x, x_host, B * 4 * H * W, e));
    EXPECT_OK(tensor_new(d, TENSOR_F32, 3, cs, &c, e));
    EXPECT_OK(tensor_write_f32(c, ctx_host, (size_t)B * T * ck.cfg.unet.ctx_dim, e));
    EXPECT_OK(tensor_new(d, TENSOR_F32, 4, xs, &eps, e));
    rc = unet_eval(unet, &ck.cfg.unet, x, ts, c, NULL, eps, NULL, e);
    ok(rc == 0, "%s: unet eval (%s)", spec, e->msg);
    EXPECT_OK(tensor_read_f32(eps, r->eps, B * 4 * H * W, e));
    tensor_free(x);
    tensor_free(c);
    tensor_free(eps);
    mm_node_end(mm, &rep);
    r->peak = dev_bytes_peak(d);
    r->copied = rep.bytes_copied;
    r->streamed = rep.bytes_streamed;
    mm_unload(mm, ck.model[MODEL_UNET]);
    r->allocs_after = dev_alloc_count(d);
    r->used_after = dev_bytes_used(d);
    mm_free(mm);
    return 0;
}

int main(void)
{
    char dir[] = "/tmp/test_memory_sd15.XXXXXX", path[64];
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    snprintf(path, sizeof(path), "%s/tiny.safetensors", dir);
    tensor_threads_set(2);
    long live0 = alloc_live_count();
    struct err e = {0};
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    o.flags = CKPT_GEN_NO_VAE | CKPT_GEN_NO_CLIP;
    EXPECT_OK(ckpt_gen_write(&o, path, &e));
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    if (model_ckpt_load(path, MODEL_LOAD_UNET, f32, &ck, &e) < 0) {
        ok(0, "load tiny checkpoint: %s", e.msg);
        return harness_done();
    }
    unet = patcher_new(ck.model[MODEL_UNET]);
    ASSERT(ck.cfg.unet.ctx_dim <= 768);
    fill(x_host, sizeof(x_host) / 4, 1);
    fill(ctx_host, (size_t)B * T * ck.cfg.unet.ctx_dim, 2);
    size_t wbytes = patcher_model_bytes(ck.model[MODEL_UNET]), act = act_bytes();
    printf("# tiny unet: %zu weight bytes, %d layers, activation plan %zu bytes\n", wbytes,
           patcher_model_layer_count(ck.model[MODEL_UNET]), act);

    static struct run cpu, full, r;
    EXPECT_OK(run_on("cpu", &cpu, &e));
    static const int pct[] = {100, 50, 25, 5};
    for (int k = 0; k < 4; k++) {
        int p = pct[k];
        for (;; p++) {
            size_t budget = wbytes * (size_t)p / 100 + act;
            char spec[64];
            snprintf(spec, sizeof(spec), "sim:%zu", budget);
            err_clear(&e);
            int rc = run_on(spec, &r, &e);
            if (rc == 0) {
                printf("# budget %d %%%s: peak %zu / %zu, streamed %zu, copied %zu\n", p,
                       p != pct[k] ? " (smallest that works)" : "", r.peak, budget,
                       r.streamed, r.copied);
                ok(r.peak <= budget, "%d %%: device peak %zu <= budget %zu", p, r.peak, budget);
                ok(memcmp(r.eps, cpu.eps, sizeof(r.eps)) == 0, "%d %%: eps identical to cpu", p);
                if (k == 0)
                    full = r;
                ok(memcmp(r.eps, full.eps, sizeof(r.eps)) == 0,
                   "%d %%: eps identical to full residency", p);
                if (k == 0)
                    ok(r.copied == 0 && r.streamed == 0, "100 %%: nothing streamed");
                else
                    ok(r.copied > 0 && r.streamed > 0, "%d %%: bytes streamed (%zu copied)", p,
                       r.copied);
                ok(r.allocs_after == 0 && r.used_after == 0,
                   "%d %%: nothing allocated after unload (%ld allocs, %zu bytes)", p,
                   r.allocs_after, r.used_after);
                break;
            }
            ok(rc == ERR_DEVICE_OOM && strstr(e.msg, "'unet'") && strstr(e.msg, "needs at least"),
               "budget %d %% refused clearly: %s", p, e.msg);
            if (p >= 100) {
                ok(0, "no budget works");
                break;
            }
        }
    }
    /* The refusal of a budget below the activation plan alone. */
    char spec[64];
    snprintf(spec, sizeof(spec), "sim:%zu", act / 2);
    err_clear(&e);
    int rc = run_on(spec, &r, &e);
    ok(rc == ERR_DEVICE_OOM && strstr(e.msg, "'unet'") && strstr(e.msg, "tried to allocate"),
       "half the activation plan refused, with the size asked for: %s", e.msg);

    patcher_unref(unet);
    model_ckpt_release(&ck);
    unlink(path);
    rmdir(dir);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
