/*
 * test_memory — the policy part of memory/ on the sim device with a synthetic model
 * (tests/unit/memory_synth.h, >= 100 MB): streaming at budgets of 100/50/25/5 % gives
 * outputs bit-identical to full residency and never passes the budget; LoRA patches
 * equal a host-merged reference (strength 0 equals no LoRA); eviction order with
 * competing models; partial unload; unload-all; flags and states; clear OOM errors;
 * 100 load/unload/patch cycles leave nothing outstanding on host or device.
 */
#include <math.h>
#include <stdint.h>

#include "alloc.h"
#include "harness.h"
#include "log.h"
#include "memmgr.h"
#include "memory_synth.h"
#include "patcher.h"

#define B 4 /* batch */

static size_t mib(double x) { return (size_t)(x * 1048576.0); }

static int open_mm(const char *spec, struct mm **mm, enum mm_vram_state state)
{
    struct mm_config c;
    mm_config_init(&c);
    c.device_spec = spec;
    c.vram_state = state;
    struct err e = {0};
    int rc = mm_new(&c, mm, &e);
    if (rc < 0)
        printf("# mm_new(%s): %s\n", spec, e.msg);
    return rc;
}

/* Load p alone, run `steps` forwards, end the node. Returns the rc of the first failure. */
static int run_node(struct mm *mm, const struct synth *s, struct patcher *p, const float *in,
                    float *out, int steps, struct mm_report *rep, struct err *e)
{
    struct mm_request req = {.n_models = 1, .activation_bytes = synth_activation_bytes(s, B)};
    req.models[0] = p;
    int rc = mm_load_models(mm, &req, rep, e);
    if (rc < 0)
        return rc;
    for (int i = 0; i < steps && rc >= 0; i++)
        rc = synth_forward(s, p, mm_device(mm), in, out, B, e);
    mm_node_end(mm, rep);
    return rc;
}

/* ---- streaming at budgets ------------------------------------------------------------- */

static void test_budgets(void)
{
    struct synth s;
    struct patcher_model *m = synth_build(&s, "synth", 128, 112, 7, 42, NULL, NULL);
    size_t total = patcher_model_bytes(m);
    ok(total >= 100u * 1000 * 1000, "synthetic model is %zu bytes (>= 100 MB)", total);
    struct patcher *p = patcher_new(m);
    float *in = xmalloc(B * (size_t)s.d * sizeof(float));
    float *ref = xmalloc(B * (size_t)s.d * sizeof(float));
    float *out = xmalloc(B * (size_t)s.d * sizeof(float));
    synth_input(&s, in, B, 7);
    int pcts[4] = {100, 50, 25, 5};
    for (int k = 0; k < 4; k++) {
        size_t budget = total * (size_t)pcts[k] / 100 + synth_activation_bytes(&s, B);
        char spec[64];
        snprintf(spec, sizeof(spec), "sim:%zu", budget);
        struct mm *mm;
        if (open_mm(spec, &mm, MM_VRAM_NORMAL_VRAM) < 0) {
            ok(0, "open %s", spec);
            continue;
        }
        struct mm_report rep;
        struct err e = {0};
        int rc = run_node(mm, &s, p, in, k == 0 ? ref : out, 2, &rep, &e);
        ok(rc == 0, "%d%%: two steps run (%s)", pcts[k], e.msg);
        if (k == 0) {
            double mx = 0;
            int finite = 1;
            for (size_t i = 0; i < B * (size_t)s.d; i++) {
                finite &= isfinite(ref[i]);
                mx = fmax(mx, fabs(ref[i]));
            }
            ok(finite && mx > 0.1 && mx < 1e6, "reference output is finite and non-trivial "
               "(max |x| %.3g)", mx);
        }
        if (k > 0)
            ok(memcmp(out, ref, B * (size_t)s.d * sizeof(float)) == 0,
               "%d%%: output bit-identical to full residency", pcts[k]);
        ok(dev_bytes_peak(mm_device(mm)) <= budget, "%d%%: peak %zu <= budget %zu", pcts[k],
           dev_bytes_peak(mm_device(mm)), budget);
        ok(rep.peak_bytes <= budget, "%d%%: report peak within budget", pcts[k]);
        if (pcts[k] == 100) {
            EXPECT_EQ(rep.bytes_streamed, 0);
            EXPECT_EQ(rep.bytes_copied, 0);
            EXPECT_EQ(rep.bytes_resident, total);
        } else {
            ok(rep.bytes_streamed > 0 && rep.bytes_resident + rep.bytes_streamed == total,
               "%d%%: %zu resident + %zu streamed = model", pcts[k], rep.bytes_resident,
               rep.bytes_streamed);
            /* One transfer per streamed layer per step; the tail prefetches up to k
             * layers of the next step. */
            size_t slack = (size_t)rep.models[0].prefetch * (rep.models[0].ring_bytes /
                                                             (size_t)rep.models[0].ring_slots);
            ok(rep.bytes_copied >= 2 * rep.bytes_streamed &&
                   rep.bytes_copied <= 2 * rep.bytes_streamed + slack,
               "%d%%: copied %zu for 2 steps of %zu streamed", pcts[k], rep.bytes_copied,
               rep.bytes_streamed);
            ok(rep.models[0].prefetch >= 2, "%d%%: prefetch depth %d >= 2", pcts[k],
               rep.models[0].prefetch);
            EXPECT_EQ(rep.passes, 2);
        }
        mm_free(mm);
    }
    /* --novram streams every layer, --disable-async-offload copies synchronously: same
     * bytes out either way. */
    enum mm_vram_state states[2] = {MM_VRAM_NO_VRAM, MM_VRAM_NORMAL_VRAM};
    for (int k = 0; k < 2; k++) {
        struct mm_config c;
        mm_config_init(&c);
        c.device_spec = "sim:64M";
        struct err e = {0};
        c.vram_state = states[k];
        if (k == 1)
            c.async_offload = 0;
        c.disable_pinned_memory = k == 1;
        struct mm *mm;
        EXPECT_OK(mm_new(&c, &mm, &e));
        struct mm_report rep;
        int rc = run_node(mm, &s, p, in, out, 1, &rep, &e);
        ok(rc == 0 && memcmp(out, ref, B * (size_t)s.d * sizeof(float)) == 0,
           "%s: output identical (%s)", k ? "async offload off" : "novram", e.msg);
        if (k == 0)
            EXPECT_EQ(rep.bytes_resident, 0);
        else
            EXPECT_EQ(rep.models[0].prefetch, 0);
        mm_free(mm);
    }
    /* cpu device: DISABLED state, weights used in place (no device copies). */
    struct mm *mm;
    EXPECT_OK(open_mm("cpu", &mm, MM_VRAM_NORMAL_VRAM));
    EXPECT_EQ(mm_state(mm), MM_VRAM_DISABLED);
    struct mm_report rep;
    struct err e = {0};
    int rc = run_node(mm, &s, p, in, out, 1, &rep, &e);
    ok(rc == 0 && memcmp(out, ref, B * (size_t)s.d * sizeof(float)) == 0,
       "cpu: output identical (%s)", e.msg);
    EXPECT_EQ(dev_bytes_used(mm_device(mm)), 0);
    mm_free(mm);

    patcher_unref(p);
    patcher_model_unref(m);
    xfree(in);
    xfree(ref);
    xfree(out);
}

/* ---- LoRA -------------------------------------------------------------------------------- */

struct lora_spec {
    int rank;
    float alpha, strength;
    uint64_t seed;
};

static void lora_factors(const struct lora_spec *ls, int64_t out, int64_t in, const char *key,
                         float **up, float **down)
{
    uint64_t st = ls->seed;
    for (const char *c = key; *c; c++)
        st = st * 31 + (unsigned char)*c;
    *up = xmalloc((size_t)(out * ls->rank) * sizeof(float));
    *down = xmalloc((size_t)(ls->rank * in) * sizeof(float));
    for (int64_t k = 0; k < out * ls->rank; k++)
        (*up)[k] = synth__uniform(&st) * 0.05f;
    for (int64_t k = 0; k < ls->rank * in; k++)
        (*down)[k] = synth__uniform(&st) * 0.05f;
}

static int lora_target(const char *key)
{
    int i;
    return sscanf(key, "block%d.weight", &i) == 1 && i % 3 == 0;
}

/* Host merge, the reference: W += strength * alpha / rank * up @ down (double sums). */
static void merge_host(void *u, const char *key, float *w, int64_t out, int64_t in)
{
    const struct lora_spec *ls = u;
    if (!lora_target(key))
        return;
    float *up, *down;
    lora_factors(ls, out, in, key, &up, &down);
    float scale = ls->strength * ls->alpha / (float)ls->rank;
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) {
            double acc = 0;
            for (int r = 0; r < ls->rank; r++)
                acc += (double)up[o * ls->rank + r] * down[(int64_t)r * in + i];
            w[o * in + i] += (float)(scale * acc);
        }
    xfree(up);
    xfree(down);
}

static int add_loras(struct patcher *p, const struct synth *s, const struct lora_spec *ls)
{
    int n = 0;
    for (int i = 0; i < s->layers; i++) {
        char key[64];
        snprintf(key, sizeof(key), "block%d.weight", i);
        if (!lora_target(key))
            continue;
        int conv = synth_is_conv(s, i);
        int64_t out = conv ? s->c : s->d, in = conv ? (int64_t)s->c * 9 : s->d;
        float *up, *down;
        lora_factors(ls, out, in, key, &up, &down);
        struct err e = {0};
        if (patcher_add_lora(p, key, up, down, TENSOR_F32, ls->rank, ls->alpha, 1, ls->strength,
                             &e) == 0)
            n++;
        else
            printf("# %s\n", e.msg);
        xfree(up);
        xfree(down);
    }
    return n;
}

static double max_rel_diff(const float *a, const float *b, size_t n)
{
    double md = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mx = fmax(mx, fabs((double)b[i]));
    }
    return mx > 0 ? md / mx : md;
}

static void test_lora(void)
{
    struct lora_spec ls = {.rank = 4, .alpha = 2.0f, .strength = 0.7f, .seed = 99};
    struct synth s, sr;
    struct patcher_model *m = synth_build(&s, "base", 32, 24, 5, 5, NULL, NULL);
    struct patcher_model *mr = synth_build(&sr, "merged", 32, 24, 5, 5, merge_host, &ls);
    struct patcher *base = patcher_new(m), *merged = patcher_new(mr);
    struct patcher *lora = patcher_clone(base), *zero = patcher_clone(base);
    int n = add_loras(lora, &s, &ls);
    ok(n >= 8 && patcher_patch_count(lora) == n, "%d lora patches added", n);
    EXPECT_EQ(patcher_patch_count(base), 0);
    struct lora_spec l0 = ls;
    l0.strength = 0;
    add_loras(zero, &s, &l0);
    struct err e = {0};
    float f = 0;
    EXPECT_EQ(patcher_add_lora(lora, "nope.weight", &f, &f, TENSOR_F32, 1, 1, 1, 1, &e),
              ERR_NOT_FOUND);
    struct patcher *cl2 = patcher_clone(lora); /* clone copies the patch list */
    EXPECT_EQ(patcher_patch_count(cl2), n);
    patcher_unref(cl2);

    size_t nout = B * (size_t)s.d;
    float *in = xmalloc(nout * 4), *o_base = xmalloc(nout * 4), *o_ref = xmalloc(nout * 4);
    float *o_full = xmalloc(nout * 4), *o = xmalloc(nout * 4);
    synth_input(&s, in, B, 3);
    size_t total = patcher_model_bytes(m);
    struct mm *mm;
    char spec[64];
    snprintf(spec, sizeof(spec), "sim:%zu", total * 2 + mib(4));
    EXPECT_OK(open_mm(spec, &mm, MM_VRAM_NORMAL_VRAM));
    struct mm_report rep;
    EXPECT_OK(run_node(mm, &sr, merged, in, o_ref, 1, &rep, &e));
    EXPECT_OK(run_node(mm, &s, base, in, o_base, 1, &rep, &e));
    EXPECT_OK(run_node(mm, &s, lora, in, o_full, 1, &rep, &e));
    double d = max_rel_diff(o_full, o_ref, nout);
    ok(d < 1e-4, "lora (resident) equals host-merged reference (rel diff %.3g)", d);
    ok(memcmp(o_full, o_base, nout * 4) != 0, "lora changes the output");
    EXPECT_OK(run_node(mm, &s, zero, in, o, 1, &rep, &e));
    ok(memcmp(o, o_base, nout * 4) == 0, "strength 0 is bit-identical to no lora");
    /* Back to the base clone: the baked layers must be restored. */
    EXPECT_OK(run_node(mm, &s, base, in, o, 1, &rep, &e));
    ok(memcmp(o, o_base, nout * 4) == 0, "base clone after a lora clone: patches removed");
    mm_free(mm);

    /* Streamed with patches applied on the device copy after upload. */
    int pcts[3] = {50, 25, 5};
    for (int k = 0; k < 3; k++) {
        snprintf(spec, sizeof(spec), "sim:%zu",
                 total * (size_t)pcts[k] / 100 + synth_activation_bytes(&s, B) +
                     patcher_patch_workspace_bytes(lora));
        if (open_mm(spec, &mm, MM_VRAM_NORMAL_VRAM) < 0)
            continue;
        memset(o, 0, nout * 4);
        int rc = run_node(mm, &s, lora, in, o, 3, &rep, &e);
        ok(rc == 0 && rep.bytes_streamed > 0, "lora %d%%: streamed run (%s)", pcts[k], e.msg);
        ok(memcmp(o, o_full, nout * 4) == 0, "lora %d%%: bit-identical to resident lora",
           pcts[k]);
        ok(dev_bytes_peak(mm_device(mm)) <= dev_bytes_budget(mm_device(mm)),
           "lora %d%%: within budget", pcts[k]);
        /* The plain clone right after: streamed slots must not keep the patches. */
        rc = run_node(mm, &s, base, in, o, 1, &rep, &e);
        ok(rc == 0 && memcmp(o, o_base, nout * 4) == 0, "lora %d%%: base clone clean",
           pcts[k]);
        mm_free(mm);
    }
    patcher_unref(zero);
    patcher_unref(lora);
    patcher_unref(base);
    patcher_unref(merged);
    patcher_model_unref(m);
    patcher_model_unref(mr);
    xfree(in);
    xfree(o_base);
    xfree(o_ref);
    xfree(o_full);
    xfree(o);
}

/* ---- competing models ----------------------------------------------------------------------- */

static struct patcher_model *blocks_model(const char *name, int nlayers, size_t layer_bytes,
                                          float **blob)
{
    struct patcher_model *m = patcher_model_new(name, PATCHER_ROLE_UNET);
    int64_t n = (int64_t)(layer_bytes / 4);
    *blob = xcalloc((size_t)n, 4);
    patcher_model_keep(m, synth__free_blob, *blob);
    for (int i = 0; i < nlayers; i++) {
        char key[64];
        snprintf(key, sizeof(key), "%s.l%d", name, i);
        int l = patcher_model_add_layer(m, key, 0);
        patcher_model_add_weight(m, l, key, TENSOR_F32, 1, &n, *blob, TENSOR_F32, NULL);
    }
    return m;
}

static int load1(struct mm *mm, struct patcher *p, struct patcher *later, struct mm_report *r)
{
    struct mm_request req = {.n_models = 1};
    req.models[0] = p;
    if (later) {
        req.later[0] = later;
        req.n_later = 1;
    }
    struct err e = {0};
    int rc = mm_load_models(mm, &req, r, &e);
    if (rc < 0)
        printf("# load: %s\n", e.msg);
    mm_node_end(mm, r);
    return rc;
}

static void test_eviction(void)
{
    float *ba, *bb, *bc, *bd;
    /* Layers of 1 MiB: A 10, B 12, C 14, D 20 MiB; the device has 30 MiB. */
    struct patcher_model *ma = blocks_model("A", 10, mib(1), &ba);
    struct patcher_model *mb = blocks_model("B", 12, mib(1), &bb);
    struct patcher_model *mc = blocks_model("C", 14, mib(1), &bc);
    struct patcher_model *md = blocks_model("D", 20, mib(1), &bd);
    struct patcher *a = patcher_new(ma), *b = patcher_new(mb), *c = patcher_new(mc);
    struct patcher *d = patcher_new(md);
    struct mm *mm;
    EXPECT_OK(open_mm("sim:30M", &mm, MM_VRAM_NORMAL_VRAM));
    struct mm_report r;
    EXPECT_OK(load1(mm, a, NULL, &r));
    EXPECT_OK(load1(mm, b, NULL, &r));
    EXPECT_EQ(mm_loaded_count(mm), 2);
    EXPECT_EQ(r.models_unloaded, 0);
    /* C needs 14, 8 free: 6 MiB must go. A is needed later, so B gives them, partly. */
    EXPECT_OK(load1(mm, c, a, &r));
    EXPECT_EQ(mm_model_loaded_bytes(mm, ma), mib(10));
    EXPECT_EQ(mm_model_loaded_bytes(mm, mb), mib(6));
    EXPECT_EQ(mm_model_loaded_bytes(mm, mc), mib(14));
    EXPECT_EQ(r.bytes_unloaded, mib(6));
    EXPECT_EQ(r.models_unloaded, 0);
    ok(dev_bytes_used(mm_device(mm)) == mib(30), "device full, not over");
    /* D needs 20, 0 free: cheapest reloads first: B (6) whole, A (10) whole, then 4 of C. */
    EXPECT_OK(load1(mm, d, NULL, &r));
    EXPECT_EQ(mm_model_loaded_bytes(mm, mb), 0);
    EXPECT_EQ(mm_model_loaded_bytes(mm, ma), 0);
    EXPECT_EQ(mm_model_loaded_bytes(mm, mc), mib(10));
    EXPECT_EQ(mm_model_loaded_bytes(mm, md), mib(20));
    EXPECT_EQ(r.models_unloaded, 2);
    EXPECT_EQ(r.bytes_unloaded, mib(20));
    EXPECT_EQ(mm_loaded_count(mm), 2);
    /* A partly unloaded model requested again is re-planned and loads fully if it fits. */
    EXPECT_OK(load1(mm, c, NULL, &r));
    EXPECT_EQ(mm_model_loaded_bytes(mm, mc), mib(14));
    EXPECT_EQ(mm_model_loaded_bytes(mm, md), mib(16));
    /* Two models in one request that do not both fit: one streams, within budget. */
    struct mm_request req = {.n_models = 2, .activation_bytes = mib(1)};
    req.models[0] = c;
    req.models[1] = d;
    struct err e = {0};
    EXPECT_OK(mm_load_models(mm, &req, &r, &e));
    mm_node_end(mm, &r);
    ok(r.bytes_streamed > 0 && r.bytes_resident + r.bytes_streamed == mib(34),
       "two models: %zu resident + %zu streamed", r.bytes_resident, r.bytes_streamed);
    ok(dev_bytes_peak(mm_device(mm)) <= mib(30), "two models: peak within budget");
    struct mm_stats st;
    mm_stats(mm, &st);
    EXPECT_EQ(st.vram_total, mib(30));
    EXPECT_EQ(st.models_loaded, 2);
    EXPECT_EQ(st.models_bytes, dev_bytes_used(mm_device(mm)));
    /* POST /free: everything goes. */
    mm_unload_all(mm);
    EXPECT_EQ(mm_loaded_count(mm), 0);
    EXPECT_EQ(dev_bytes_used(mm_device(mm)), 0);
    mm_free(mm);

    /* --disable-smart-memory: every other model is unloaded before a load. */
    struct mm_config cfg;
    mm_config_init(&cfg);
    cfg.device_spec = "sim:100M";
    cfg.disable_smart_memory = 1;
    EXPECT_OK(mm_new(&cfg, &mm, &e));
    EXPECT_OK(load1(mm, a, NULL, &r));
    EXPECT_OK(load1(mm, b, NULL, &r));
    EXPECT_EQ(r.models_unloaded, 1);
    EXPECT_EQ(mm_model_loaded_bytes(mm, ma), 0);
    mm_prompt_end(mm);
    EXPECT_EQ(mm_loaded_count(mm), 0);
    mm_free(mm);

    /* Dropping the last reference to a loaded model unloads it. */
    EXPECT_OK(open_mm("sim:100M", &mm, MM_VRAM_NORMAL_VRAM));
    EXPECT_OK(load1(mm, d, NULL, &r));
    patcher_unref(d);
    patcher_model_unref(md);
    EXPECT_EQ(mm_loaded_count(mm), 0);
    EXPECT_EQ(dev_bytes_used(mm_device(mm)), 0);
    mm_free(mm);
    patcher_unref(a);
    patcher_unref(b);
    patcher_unref(c);
    patcher_model_unref(ma);
    patcher_model_unref(mb);
    patcher_model_unref(mc);
}

/* ---- errors, flags ------------------------------------------------------------------------ */

static void test_errors_and_flags(void)
{
    float *blob;
    struct patcher_model *m = blocks_model("E", 8, mib(1), &blob);
    struct patcher *p = patcher_new(m);
    struct mm *mm;
    struct err e = {0};
    struct tensor *const *w;
    EXPECT_EQ(patcher_acquire(p, 0, &w, &e), ERR_INVALID);
    ok(strstr(e.msg, "not loaded") != NULL, "acquire before load: %s", e.msg);
    EXPECT_OK(open_mm("sim:6M", &mm, MM_VRAM_NORMAL_VRAM));
    struct mm_request req = {.n_models = 1, .activation_bytes = mib(6)};
    req.models[0] = p;
    err_clear(&e);
    EXPECT_EQ(mm_load_models(mm, &req, NULL, &e), ERR_DEVICE_OOM);
    ok(strstr(e.msg, "'E'") != NULL, "oom message names the model: %s", e.msg);
    EXPECT_EQ(mm_loaded_count(mm), 0);
    EXPECT_EQ(dev_bytes_used(mm_device(mm)), 0);
    req.activation_bytes = mib(1);
    req.force_full_load = 1;
    err_clear(&e);
    EXPECT_EQ(mm_load_models(mm, &req, NULL, &e), ERR_DEVICE_OOM);
    req.force_full_load = 0;
    err_clear(&e);
    EXPECT_OK(mm_load_models(mm, &req, NULL, &e)); /* streams: 8 MiB model in 5 */
    mm_node_end(mm, NULL);
    EXPECT_OK(patcher_acquire(p, 3, &w, &e));
    EXPECT_EQ(tensor_numel(w[0]), mib(1) / 4);
    patcher_release(p, 3);
    mm_free(mm);
    EXPECT_EQ(patcher_acquire(p, 0, &w, &e), ERR_INVALID); /* unloaded with mm_free */

    struct mm_config c;
    enum mm_vram_state asked[4] = {MM_VRAM_NORMAL_VRAM, MM_VRAM_LOW_VRAM, MM_VRAM_NO_VRAM,
                                   MM_VRAM_HIGH_VRAM};
    for (int i = 0; i < 4; i++) {
        EXPECT_OK(open_mm("sim:16M", &mm, asked[i]));
        ok(mm_state(mm) == asked[i], "%s asked, %s given", mm_vram_state_name(asked[i]),
           mm_vram_state_name(mm_state(mm)));
        mm_free(mm);
    }
    /* --cpu is the cpu device: DISABLED whatever state the flags asked for. */
    mm_config_init(&c);
    c.device_spec = "cpu";
    c.vram_state = MM_VRAM_LOW_VRAM;
    EXPECT_OK(mm_new(&c, &mm, &e));
    EXPECT_EQ(mm_state(mm), MM_VRAM_DISABLED);
    EXPECT_EQ(dev_kind(mm_device(mm)), DEV_KIND_CPU);
    mm_free(mm);
    /* --lowvram: text encoders run on the CPU, the rest on the device. */
    /* An allocation that fails although the plan fit: shrink, retry once, succeed. */
    EXPECT_OK(open_mm("sim:30M", &mm, MM_VRAM_NORMAL_VRAM));
    struct mm_report rr;
    req.models[0] = p;
    req.activation_bytes = mib(1);
    dev_inject_oom(mm_device(mm), 5, 1);
    err_clear(&e);
    EXPECT_OK(mm_load_models(mm, &req, &rr, &e));
    mm_node_end(mm, &rr);
    EXPECT_EQ(rr.retried, 1);
    EXPECT_EQ(mm_model_loaded_bytes(mm, m), mib(8));
    /* ... and if the retry fails too, a clear error and nothing half-loaded. */
    mm_unload_all(mm);
    dev_inject_oom(mm_device(mm), 2, 1000);
    err_clear(&e);
    EXPECT_EQ(mm_load_models(mm, &req, &rr, &e), ERR_DEVICE_OOM);
    ok(strstr(e.msg, "cannot allocate") && strstr(e.msg, "'E'"), "retry failure: %s", e.msg);
    EXPECT_EQ(mm_loaded_count(mm), 0);
    EXPECT_EQ(dev_bytes_used(mm_device(mm)), 0);
    dev_inject_oom(mm_device(mm), 0, 0);
    mm_free(mm);

    struct patcher_model *te = patcher_model_new("te", PATCHER_ROLE_TEXT_ENCODER);
    int64_t n = 1024;
    int l = patcher_model_add_layer(te, "emb", 0);
    EXPECT_OK(patcher_model_add_weight(te, l, "emb.weight", TENSOR_F16, 1, &n, blob,
                                       TENSOR_F32, &e)); /* converted copy */
    EXPECT_EQ(patcher_model_add_weight(te, l, "emb.weight", TENSOR_F16, 1, &n, blob,
                                       TENSOR_F32, &e), ERR_EXISTS);
    struct patcher *tp = patcher_new(te);
    EXPECT_OK(open_mm("sim:16M", &mm, MM_VRAM_LOW_VRAM));
    req.models[0] = tp;
    req.n_models = 1;
    EXPECT_OK(mm_load_models(mm, &req, NULL, &e));
    mm_node_end(mm, NULL);
    EXPECT_EQ(dev_kind(patcher_device(tp)), DEV_KIND_CPU);
    EXPECT_EQ(dev_bytes_used(mm_device(mm)), 0);
    struct mm_report rep;
    memset(&rep, 0, sizeof(rep));
    req.models[0] = p;
    EXPECT_OK(mm_load_models(mm, &req, &rep, &e));
    mm_node_end(mm, &rep);
    EXPECT_EQ(dev_kind(patcher_device(p)), DEV_KIND_SIM);
    ok(rep.bytes_resident == 8388608 && rep.n_models == 1 && !strcmp(rep.models[0].name, "E"),
       "report: %zu bytes resident, model '%s'", rep.bytes_resident, rep.models[0].name);
    struct mm_report *taken = NULL;
    int n_taken = mm_reports_take(mm, &taken);
    ok(n_taken == 2 && taken[1].bytes_resident == rep.bytes_resident,
       "both node ends are kept for the executor (%d)", n_taken);
    xfree(taken);
    EXPECT_EQ(mm_reports_take(mm, &taken), 0);
    mm_free(mm);
    patcher_unref(tp);
    patcher_model_unref(te);
    patcher_unref(p);
    patcher_model_unref(m);
}

/* ---- cycles ---------------------------------------------------------------------------------- */

static void test_cycles(void)
{
    long live0 = alloc_live_count();
    struct synth s;
    struct patcher_model *m = synth_build(&s, "cyc", 16, 12, 4, 11, NULL, NULL);
    struct patcher *base = patcher_new(m);
    size_t total = patcher_model_bytes(m);
    char spec[64];
    snprintf(spec, sizeof(spec), "sim:%zu", total / 4 + 128 * 1024);
    struct mm *mm;
    EXPECT_OK(open_mm(spec, &mm, MM_VRAM_NORMAL_VRAM));
    float in[B * 64], out[B * 64];
    synth_input(&s, in, B, 1);
    int fails = 0;
    for (int i = 0; i < 100; i++) {
        struct patcher *p = patcher_clone(base);
        struct lora_spec ls = {.rank = 2, .alpha = 1, .strength = (float)(i % 3), .seed = (uint64_t)i};
        add_loras(p, &s, &ls);
        struct err e = {0};
        if (run_node(mm, &s, p, in, out, 1, NULL, &e) < 0) {
            fails++;
            printf("# cycle %d: %s\n", i, e.msg);
        }
        if (i % 2)
            mm_unload(mm, m);
        patcher_unref(p);
    }
    EXPECT_EQ(fails, 0);
    mm_unload_all(mm);
    EXPECT_EQ(dev_bytes_used(mm_device(mm)), 0);
    EXPECT_EQ(dev_alloc_count(mm_device(mm)), 0);
    mm_free(mm);
    patcher_unref(base);
    patcher_model_unref(m);
    EXPECT_EQ(alloc_live_count(), live0);
}

/* ---- bytes per side ---------------------------------------------------------------------- */

/*
 * A model whose weights come from an f16 "file" (kept at f16 on the host, f32 on the
 * device): the plan counts each side in its own bytes (memmgr.h, struct mm_model_plan).
 * cpu: resident = the f16 host copies used in place; sim: resident + streamed = the f32
 * layout, host = the f16 copies, pack = the streamed layers at the device layout.
 */
static void test_bytes_per_side(void)
{
    enum { L = 8, N = 256 * 256 };
    uint16_t *h = xmalloc((size_t)L * N * sizeof(uint16_t));
    for (size_t i = 0; i < (size_t)L * N; i++)
        h[i] = tensor_f32_to_f16((float)((i * 2654435761u) % 1001) / 1000.0f - 0.5f);
    struct patcher_model *m = patcher_model_new("f16model", PATCHER_ROLE_OTHER);
    struct err e = {0};
    for (int l = 0; l < L; l++) {
        char name[32];
        snprintf(name, sizeof(name), "layer.%d", l);
        int li = patcher_model_add_layer(m, name, 0);
        snprintf(name, sizeof(name), "layer.%d.weight", l);
        ok(patcher_model_add_weight(m, li, name, TENSOR_F32, 2, (int64_t[]){256, 256},
                                    h + (size_t)l * N, TENSOR_F16, &e) >= 0,
           "f16 weight %d borrowed (%s)", l, e.msg);
    }
    size_t dev_bytes = patcher_model_bytes(m), host_bytes = patcher_model_host_bytes(m, NULL);
    EXPECT_EQ(dev_bytes, (size_t)L * N * 4);
    EXPECT_EQ(host_bytes, (size_t)L * N * 2);
    struct patcher *p = patcher_new(m);
    struct mm_request req = {.n_models = 1, .models = {p}};
    struct mm_report rep;
    struct mm *mm;
    EXPECT_OK(open_mm("cpu", &mm, MM_VRAM_NORMAL_VRAM));
    EXPECT_OK(mm_load_models(mm, &req, &rep, &e));
    mm_node_end(mm, &rep);
    EXPECT_EQ(rep.models[0].bytes_resident, host_bytes);
    EXPECT_EQ(rep.models[0].bytes_host, host_bytes);
    EXPECT_EQ(rep.models[0].bytes_pack, 0);
    mm_free(mm);
    char spec[64];
    snprintf(spec, sizeof(spec), "sim:%zu", dev_bytes / 2);
    EXPECT_OK(open_mm(spec, &mm, MM_VRAM_NORMAL_VRAM));
    EXPECT_OK(mm_load_models(mm, &req, &rep, &e));
    mm_node_end(mm, &rep);
    const struct mm_model_plan *r = &rep.models[0];
    ok(r->bytes_streamed > 0 && r->bytes_resident + r->bytes_streamed == dev_bytes,
       "sim: %zu resident + %zu streamed = the f32 layout", r->bytes_resident,
       r->bytes_streamed);
    EXPECT_EQ(r->bytes_host, host_bytes);
    EXPECT_EQ(r->bytes_pack, r->bytes_streamed); /* layers here are 256-byte multiples */
    EXPECT_EQ(rep.bytes_host, host_bytes);
    ok(r->prefetch >= 2, "sim at 50 %%: prefetch %d >= 2", r->prefetch);
    mm_free(mm);
    patcher_unref(p);
    patcher_model_unref(m);
    xfree(h);
}

/* ---- CUDA (skipped without a GPU) ------------------------------------------------------- */

static void test_cuda(void)
{
    if (dev_cuda_count() == 0) {
        printf("# no CUDA GPU: cuda planner cases skipped\n");
        return;
    }
    struct synth s;
    struct patcher_model *m = synth_build(&s, "synth", 128, 112, 7, 42, NULL, NULL);
    struct patcher *p = patcher_new(m);
    struct lora_spec ls = {.rank = 4, .alpha = 2.0f, .strength = 0.7f, .seed = 99};
    struct patcher *pl = patcher_clone(p);
    add_loras(pl, &s, &ls);
    size_t total = patcher_model_bytes(m), nout = B * (size_t)s.d;
    float *in = xmalloc(nout * 4), *ref = xmalloc(nout * 4), *o = xmalloc(nout * 4);
    float *refl = xmalloc(nout * 4), *host = xmalloc(nout * 4);
    synth_input(&s, in, B, 7);
    struct mm *mm;
    struct err e = {0};
    EXPECT_OK(open_mm("cpu", &mm, MM_VRAM_NORMAL_VRAM));
    EXPECT_OK(run_node(mm, &s, p, in, host, 1, NULL, &e));
    mm_free(mm);
    int pcts[4] = {100, 50, 25, 5};
    for (int k = 0; k < 4; k++) {
        struct mm_config c;
        mm_config_init(&c);
        c.device_spec = "cuda:0";
        size_t budget = total * (size_t)pcts[k] / 100 + synth_activation_bytes(&s, B) +
                        patcher_patch_workspace_bytes(pl);
        c.vram_budget = budget + ((size_t)400 << 20); /* + the default reserve */
        if (mm_new(&c, &mm, &e) < 0) {
            ok(0, "cuda: mm_new: %s", e.msg);
            break;
        }
        struct mm_report rep;
        int rc = run_node(mm, &s, p, in, k ? o : ref, 2, &rep, &e);
        ok(rc == 0, "cuda %d%%: runs (%s)", pcts[k], e.msg);
        if (k == 0) {
            double d = max_rel_diff(ref, host, nout);
            ok(d < 1e-2, "cuda: full residency matches the cpu (rel %.3g)", d);
        } else {
            ok(memcmp(o, ref, nout * 4) == 0, "cuda %d%%: bit-identical to full residency",
               pcts[k]);
            ok(rep.bytes_streamed > 0, "cuda %d%%: streams %zu bytes", pcts[k],
               rep.bytes_streamed);
        }
        ok(dev_bytes_peak(mm_device(mm)) <= budget + ((size_t)400 << 20),
           "cuda %d%%: peak within budget", pcts[k]);
        rc = run_node(mm, &s, pl, in, k ? o : refl, 1, &rep, &e);
        ok(rc == 0 && (k == 0 || memcmp(o, refl, nout * 4) == 0),
           "cuda %d%%: lora identical to resident lora (%s)", pcts[k], e.msg);
        mm_unload_all(mm);
        EXPECT_EQ(dev_bytes_used(mm_device(mm)), 0);
        mm_free(mm);
    }
    patcher_unref(pl);
    patcher_unref(p);
    patcher_model_unref(m);
    xfree(in);
    xfree(ref);
    xfree(o);
    xfree(refl);
    xfree(host);
}

int main(void)
{
    long live0 = alloc_live_count();
    log_set_level(LOG_WARNING);
    tensor_threads_set(2);
    test_budgets();
    test_lora();
    test_eviction();
    test_errors_and_flags();
    test_cycles();
    test_bytes_per_side();
    test_cuda();
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
