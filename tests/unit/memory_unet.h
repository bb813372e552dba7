/*
 * memory_unet — a tiny generated checkpoint's UNet streamed by the memory manager, the
 * common part of test_memory_sd15 and test_memory_sdxl: one eval (batch B, an H x W
 * latent, T context tokens, an ADM vector y when the family has one) per node on
 * "sim:SIZE" devices whose budgets hold p % of the UNet's weight bytes plus its
 * activation plan, loaded through mm_load_models / mm_node_end as nodes/sd_backend.c does.
 *
 * mem_unet_check_budgets asserts, per budget: eps bit-identical to the cpu device's and
 * to full residency; the device peak within the budget; bytes streamed below 100 % and
 * none at 100 %, through a ring that prefetches (depth >= 1: uploads on the sim device's
 * copy thread overlap compute) wherever the budget holds two slots; nothing left on the
 * device after the unload. Each streamed budget runs a second time with every async copy
 * slowed down (dev_inject_copy_delay): if compute did not wait on a slot's upload event,
 * or an upload did not wait on the slot's last compute, it would read or overwrite the
 * wrong layer's bytes and eps would differ. A budget the planner refuses
 * must fail with ERR_DEVICE_OOM and a message naming the model and what it needs; the
 * budget then rises in 1 % steps to the smallest that works, which is reported. Below the
 * activation plan alone the refusal names the size asked for.
 *
 * Header-only (static functions); test thread only.
 */
#ifndef LATENTD_TESTS_MEMORY_UNET_H
#define LATENTD_TESTS_MEMORY_UNET_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "checkpoint.h"
#include "ckpt_gen.h"
#include "family.h"
#include "harness.h"
#include "memmgr.h"
#include "tensor.h"
#include "unet.h"

struct mem_unet {
    int b, h, w, t; /* the eval's shape: batch, latent rows/cols, context tokens */
    float ts[4];    /* one timestep per sample */
    struct model_ckpt ck;
    struct patcher *unet;
    float *x, *ctx, *y; /* host inputs; y NULL without an ADM input */
    size_t n_eps;
    char dir[64], path[96];
};

struct mem_unet_run {
    float *eps;
    size_t peak, copied, streamed;
    int prefetch, slots; /* the ring the planner chose */
    long allocs_after;
    size_t used_after;
};

static void mem_unet__fill(float *v, size_t n, unsigned seed)
{
    unsigned s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        v[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

/* Generate (UNet only, f32, seed 42) a checkpoint of `cfg` and load its UNet; 0 or -1. */
static int mem_unet_init(struct mem_unet *m, const struct model_config *cfg, const char *name)
{
    struct err e = {0};
    struct ckpt_gen_opts o;
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    snprintf(m->dir, sizeof(m->dir), "/tmp/%s.XXXXXX", name);
    if (!mkdtemp(m->dir))
        PANIC("mkdtemp");
    snprintf(m->path, sizeof(m->path), "%s/tiny.safetensors", m->dir);
    ckpt_gen_opts_default(&o);
    o.cfg = *cfg;
    o.flags = CKPT_GEN_NO_VAE | CKPT_GEN_NO_CLIP;
    if (ckpt_gen_write(&o, m->path, &e) < 0 ||
        model_ckpt_load(m->path, MODEL_LOAD_UNET, f32, &m->ck, &e) < 0) {
        ok(0, "generate and load a tiny %s UNet: %s", name, e.msg);
        return -1;
    }
    const struct unet_arch *a = &m->ck.cfg.unet;
    m->unet = patcher_new(m->ck.model[MODEL_UNET]);
    m->n_eps = (size_t)m->b * 4 * m->h * m->w;
    m->x = xmalloc(m->n_eps * sizeof(float));
    m->ctx = xmalloc((size_t)m->b * m->t * a->ctx_dim * sizeof(float));
    mem_unet__fill(m->x, m->n_eps, 1);
    mem_unet__fill(m->ctx, (size_t)m->b * m->t * a->ctx_dim, 2);
    if (a->adm_in) {
        m->y = xmalloc((size_t)m->b * a->adm_in * sizeof(float));
        mem_unet__fill(m->y, (size_t)m->b * a->adm_in, 3);
    }
    return 0;
}

static void mem_unet_release(struct mem_unet *m)
{
    patcher_unref(m->unet);
    model_ckpt_release(&m->ck);
    xfree(m->x);
    xfree(m->ctx);
    xfree(m->y);
    unlink(m->path);
    rmdir(m->dir);
}

/* The activation plan nodes/sd_backend.c's unet_prepare asks for: the plan plus x, eps,
 * the context and y on the device. */
static size_t mem_unet_act_bytes(const struct mem_unet *m)
{
    const struct unet_arch *a = &m->ck.cfg.unet;
    size_t io = (size_t)m->b *
                ((size_t)8 * m->h * m->w + (size_t)m->t * a->ctx_dim + (size_t)a->adm_in) * 4;
    return unet_plan_bytes(a, m->b, m->h, m->w, m->t) + io;
}

/* One node: load, eval, node end, unload. Every async copy first sleeps `delay_us`
 * (0: none). Returns 0, or the load's error. */
static int mem_unet_run_on(struct mem_unet *m, const char *spec, unsigned delay_us,
                           struct mem_unet_run *r, struct err *e)
{
    const struct unet_arch *a = &m->ck.cfg.unet;
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = spec;
    struct mm *mm = NULL;
    int rc = mm_new(&mc, &mm, e);
    if (rc < 0)
        return rc;
    struct dev *d = mm_device(mm);
    dev_peak_reset(d);
    dev_inject_copy_delay(d, delay_us);
    struct mm_request req = {
        .n_models = 1, .models = {m->unet}, .activation_bytes = mem_unet_act_bytes(m)};
    struct mm_report rep;
    if ((rc = mm_load_models(mm, &req, &rep, e)) < 0) {
        ok(dev_alloc_count(d) == 0, "%s: a refused load leaves nothing allocated", spec);
        mm_free(mm);
        return rc;
    }
    int64_t xs[4] = {m->b, 4, m->h, m->w}, cs[3] = {m->b, m->t, a->ctx_dim},
            ys[2] = {m->b, a->adm_in};
    struct tensor *x = NULL, *c = NULL, *y = NULL, *eps = NULL;
    EXPECT_OK(tensor_new(d, TENSOR_F32, 4, xs, &x, e));
    EXPECT_OK(tensor_write_f32(x, m->x, (int64_t)m->n_eps, e));
    EXPECT_OK(tensor_new(d, TENSOR_F32, 3, cs, &c, e));
    EXPECT_OK(tensor_write_f32(c, m->ctx, (int64_t)m->b * m->t * a->ctx_dim, e));
    if (m->y) {
        EXPECT_OK(tensor_new(d, TENSOR_F32, 2, ys, &y, e));
        EXPECT_OK(tensor_write_f32(y, m->y, (int64_t)m->b * a->adm_in, e));
    }
    EXPECT_OK(tensor_new(d, TENSOR_F32, 4, xs, &eps, e));
    rc = unet_eval(m->unet, a, x, m->ts, c, y, eps, NULL, e);
    ok(rc == 0, "%s: unet eval (%s)", spec, e->msg);
    EXPECT_OK(tensor_read_f32(eps, r->eps, (int64_t)m->n_eps, e));
    tensor_free(x);
    tensor_free(c);
    tensor_free(y);
    tensor_free(eps);
    mm_node_end(mm, &rep);
    r->peak = dev_bytes_peak(d);
    r->copied = rep.bytes_copied;
    r->streamed = rep.bytes_streamed;
    r->prefetch = rep.models[0].prefetch;
    r->slots = rep.models[0].ring_slots;
    mm_unload(mm, m->ck.model[MODEL_UNET]);
    r->allocs_after = dev_alloc_count(d);
    r->used_after = dev_bytes_used(d);
    mm_free(mm);
    return 0;
}

/*
 * A streamed budget `spec` whose plain run gave `r`: the ring prefetches when two slots
 * fit, and with every async copy slowed by 2 ms the eps are still the cpu device's.
 */
static void mem_unet__check_slow_copy(struct mem_unet *m, const char *spec, size_t budget,
                                      const float *cpu_eps, struct mem_unet_run *r)
{
    struct err e = {0};
    size_t sz = m->n_eps * sizeof(float);
    /* Two slots of the largest layer fit beside the activations: the planner must not
     * fall back to one slot with no overlap. */
    const struct patcher_model *pm = m->ck.model[MODEL_UNET];
    size_t big = 0;
    for (int l = 0; l < patcher_model_layer_count(pm); l++)
        if (patcher_model_layer_bytes(pm, l) > big)
            big = patcher_model_layer_bytes(pm, l);
    if (budget >= mem_unet_act_bytes(m) + 2 * big)
        ok(r->prefetch >= 1, "%s: ring of %d slots prefetches %d layer(s)", spec, r->slots,
           r->prefetch);
    memset(r->eps, 0, sz);
    int rc = mem_unet_run_on(m, spec, 2000, r, &e);
    ok(rc == 0 && memcmp(r->eps, cpu_eps, sz) == 0,
       "%s with 2 ms per async copy (prefetch %d): eps identical to cpu (%s)", spec,
       r->prefetch, e.msg);
    ok(r->peak <= budget, "%s slow copies: peak %zu <= budget %zu", spec, r->peak, budget);
}

static void mem_unet_check_budgets(struct mem_unet *m, const int *pct, int n_pct)
{
    struct err e = {0};
    size_t wbytes = patcher_model_bytes(m->ck.model[MODEL_UNET]), act = mem_unet_act_bytes(m);
    size_t sz = m->n_eps * sizeof(float);
    struct mem_unet_run cpu = {.eps = xmalloc(sz)}, full = {.eps = xmalloc(sz)},
                        r = {.eps = xmalloc(sz)};
    printf("# tiny %s unet: %zu weight bytes, %d layers, activation plan %zu bytes\n",
           model_family_get(m->ck.cfg.family)->name, wbytes,
           patcher_model_layer_count(m->ck.model[MODEL_UNET]), act);
    EXPECT_OK(mem_unet_run_on(m, "cpu", 0, &cpu, &e));
    for (int k = 0; k < n_pct; k++) {
        int p = pct[k];
        for (;; p++) {
            size_t budget = wbytes * (size_t)p / 100 + act;
            char spec[64];
            snprintf(spec, sizeof(spec), "sim:%zu", budget);
            err_clear(&e);
            int rc = mem_unet_run_on(m, spec, 0, &r, &e);
            if (rc == 0) {
                printf("# budget %d %%%s: peak %zu / %zu, streamed %zu, copied %zu, ring %d "
                       "x prefetch %d\n", p, p != pct[k] ? " (smallest that works)" : "",
                       r.peak, budget, r.streamed, r.copied, r.slots, r.prefetch);
                ok(r.peak <= budget, "%d %%: device peak %zu <= budget %zu", p, r.peak, budget);
                ok(memcmp(r.eps, cpu.eps, sz) == 0, "%d %%: eps identical to cpu", p);
                if (pct[k] == 100)
                    memcpy(full.eps, r.eps, sz);
                ok(memcmp(r.eps, full.eps, sz) == 0, "%d %%: eps identical to full residency", p);
                if (pct[k] == 100)
                    ok(r.copied == 0 && r.streamed == 0, "100 %%: nothing streamed");
                else
                    ok(r.copied > 0 && r.streamed > 0, "%d %%: bytes streamed (%zu copied)", p,
                       r.copied);
                ok(r.allocs_after == 0 && r.used_after == 0,
                   "%d %%: nothing allocated after unload (%ld allocs, %zu bytes)", p,
                   r.allocs_after, r.used_after);
                if (pct[k] < 100 && p == pct[k])
                    mem_unet__check_slow_copy(m, spec, budget, cpu.eps, &r);
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
    int rc = mem_unet_run_on(m, spec, 0, &r, &e);
    ok(rc == ERR_DEVICE_OOM && strstr(e.msg, "'unet'") && strstr(e.msg, "tried to allocate"),
       "half the activation plan refused, with the size asked for: %s", e.msg);
    xfree(cpu.eps);
    xfree(full.eps);
    xfree(r.eps);
}

#endif
