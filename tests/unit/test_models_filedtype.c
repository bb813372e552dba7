/*
 * test_models_filedtype — weights kept at their file dtype (issue 15). A tiny f16 and
 * a tiny bf16 checkpoint are loaded twice: as today's default (f16/bf16 host copies
 * borrowed from the mapping, widened inside the ops) and with MODEL_LOAD_CONVERT
 * (every weight converted to f32 at load, the behaviour before). Checked:
 *   - the accounting: kept host copies are exactly half the converted ones and all
 *     borrowed (nothing owned); the device layout (f32) is the same;
 *   - CLIP, UNet (batch 2, two timesteps) and VAE decode outputs are bit-identical
 *     (widening f16/bf16 to f32 is exact, and the ops make the same GEMM calls);
 *   - a LoRA-patched UNet (the patched layer baked to f32 on the cpu device) too;
 *   - the UNet on the simulated device, fully resident and streamed (device copies
 *     widened on upload / in the stream pack), equals the cpu device's bit for bit.
 * Arguments: tokenizer dir.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "ckpt_gen.h"
#include "checkpoint.h"
#include "harness.h"
#include "memmgr.h"
#include "text_encoder.h"
#include "unet.h"
#include "vae.h"

static struct clip_tokenizer *tok;

static void wave(float *v, long n, double a, double b)
{
    for (long i = 0; i < n; i++)
        v[i] = (float)(a * __builtin_sin(0.37 * (double)i + b));
}

static struct tensor *new_wave(struct dev *d, int ndim, const int64_t *shape, double a, double b)
{
    struct tensor *t = NULL;
    struct err e = {0};
    if (tensor_new(d, TENSOR_F32, ndim, shape, &t, &e) < 0)
        PANIC("tensor_new: %s", e.msg);
    int64_t n = tensor_numel(t);
    float *v = xmalloc((size_t)n * sizeof(float));
    wave(v, n, a, b);
    tensor_write_f32(t, v, n, &e);
    xfree(v);
    return t;
}

/* Outputs of one model set, compared with memcmp. */
struct outs {
    float *cond, *pooled; /* CLIP */
    int64_t ncond, npooled;
    float eps[2 * 4 * 8 * 8];
    float eps_lora[2 * 4 * 8 * 8];
    float img[3 * 40 * 48];
};

static void outs_release(struct outs *o)
{
    xfree(o->cond);
    xfree(o->pooled);
}

static int load_models(struct mm *mm, struct patcher **p, int n, struct err *e)
{
    struct mm_request req = {.n_models = n, .activation_bytes = (size_t)64 << 20};
    for (int i = 0; i < n; i++)
        req.models[i] = p[i];
    struct mm_report rep;
    return mm_load_models(mm, &req, &rep, e);
}

static int unet_eps(struct mm *mm, struct patcher *p, const struct model_config *cfg, float *out)
{
    struct err e = {0};
    int rc = load_models(mm, &p, 1, &e);
    if (rc < 0) {
        printf("# %s\n", e.msg);
        return rc;
    }
    struct dev *d = patcher_device(p);
    int64_t xs[4] = {2, 4, 8, 8}, cs[3] = {2, 77, cfg->unet.ctx_dim};
    struct tensor *x = new_wave(d, 4, xs, 0.37, 0.1), *ctx = new_wave(d, 3, cs, 0.011, 0.5);
    struct tensor *eps = NULL;
    float ts[2] = {500, 20};
    if ((rc = tensor_new(d, TENSOR_F32, 4, xs, &eps, &e)) == 0 &&
        (rc = unet_eval(p, &cfg->unet, x, ts, ctx, NULL, eps, NULL, &e)) == 0)
        rc = tensor_read_f32(eps, out, 2 * 4 * 8 * 8, &e);
    if (rc < 0)
        printf("# unet: %s\n", e.msg);
    mm_node_end(mm, NULL);
    tensor_free(eps);
    tensor_free(x);
    tensor_free(ctx);
    return rc;
}

/* A rank-2 LoRA on the UNet's output conv (4 x 32 x 3 x 3 in the tiny layout). */
static int add_lora(struct patcher *p)
{
    static const char key[] = "model.diffusion_model.out.2.weight";
    int layer, index, ndim;
    int64_t shape[4];
    struct patcher_model *m = patcher_model_of(p);
    if (patcher_model_find(m, key, &layer, &index) < 0 ||
        !patcher_model_host_data(m, layer, index, NULL, &ndim, shape))
        return -1;
    int64_t out = shape[0], in = shape[1] * shape[2] * shape[3], rank = 2;
    float *up = xmalloc((size_t)(out * rank) * 4), *down = xmalloc((size_t)(rank * in) * 4);
    wave(up, (long)(out * rank), 0.3, 0.2);
    wave(down, (long)(rank * in), 0.2, 0.7);
    struct err e = {0};
    int rc = patcher_add_lora(p, key, up, down, TENSOR_F32, rank, 1.0f, 1, 0.8f, &e);
    if (rc < 0)
        printf("# lora: %s\n", e.msg);
    xfree(up);
    xfree(down);
    return rc;
}

static int run_all(struct mm *mm, struct model_ckpt *ck, struct outs *o)
{
    struct patcher *p[3];
    struct err e = {0};
    memset(o, 0, sizeof(*o));
    for (int c = 0; c < 3; c++)
        p[c] = patcher_new(ck->model[c]);
    int rc = 0;
    /* CLIP */
    struct clip_tokens tk;
    clip_tokenize_prompt(tok, "a photo of a (red:1.2) cat", &tk);
    if ((rc = load_models(mm, &p[MODEL_CLIP], 1, &e)) == 0)
        rc = text_encode(p[MODEL_CLIP], &ck->cfg.text[0], model_prefix(&ck->cfg, MODEL_CLIP), &tk,
                         &(struct text_encode_opts){.layer = -1, .norm_hidden = 1}, &o->cond,
                         &o->pooled, NULL, &e);
    o->ncond = (int64_t)tk.n_chunks * 77 * ck->cfg.text[0].width;
    o->npooled = ck->cfg.text[0].width;
    clip_tokens_release(&tk);
    mm_node_end(mm, NULL);
    if (rc < 0)
        printf("# clip: %s\n", e.msg);
    /* UNet, then a LoRA clone of it */
    if (rc == 0)
        rc = unet_eps(mm, p[MODEL_UNET], &ck->cfg, o->eps);
    struct patcher *lp = patcher_clone(p[MODEL_UNET]);
    if (rc == 0 && (rc = add_lora(lp)) == 0)
        rc = unet_eps(mm, lp, &ck->cfg, o->eps_lora);
    patcher_unref(lp);
    /* VAE */
    if (rc == 0 && (rc = load_models(mm, &p[MODEL_VAE], 1, &e)) == 0) {
        struct dev *d = patcher_device(p[MODEL_VAE]);
        int64_t zs[4] = {1, 4, 5, 6}, is[4] = {1, 3, 40, 48};
        struct tensor *z = new_wave(d, 4, zs, 0.23, 0.3), *img = NULL;
        if ((rc = tensor_new(d, TENSOR_F32, 4, is, &img, &e)) == 0 &&
            (rc = vae_decode(p[MODEL_VAE], &ck->cfg.vae, z, img, NULL, &e)) == 0)
            rc = tensor_read_f32(img, o->img, 3 * 40 * 48, &e);
        tensor_free(z);
        tensor_free(img);
        mm_node_end(mm, NULL);
    }
    if (rc < 0)
        printf("# %s\n", e.msg);
    for (int c = 0; c < 3; c++) {
        mm_unload(mm, ck->model[c]);
        patcher_unref(p[c]);
    }
    return rc;
}

static void check_accounting(const char *dn, const struct model_ckpt *kept,
                             const struct model_ckpt *conv)
{
    static const char *const names[3] = {"unet", "vae", "clip"};
    for (int c = 0; c < 3; c++) {
        size_t kown = 1, cown = 0;
        size_t kh = patcher_model_host_bytes(kept->model[c], &kown);
        size_t ch = patcher_model_host_bytes(conv->model[c], &cown);
        ok(kh * 2 == ch && kown == 0 && cown == ch,
           "%s %s: host copy %zu bytes kept (owned %zu) = half of %zu converted (owned %zu)", dn,
           names[c], kh, kown, ch, cown);
        EXPECT_EQ(patcher_model_bytes(kept->model[c]), patcher_model_bytes(conv->model[c]));
    }
}

static void compare_outs(const char *dn, const struct outs *a, const struct outs *b)
{
    ok(a->ncond == b->ncond && a->cond && b->cond &&
           !memcmp(a->cond, b->cond, (size_t)a->ncond * 4) &&
           !memcmp(a->pooled, b->pooled, (size_t)a->npooled * 4),
       "%s: CLIP cond and pooled bit-identical kept vs converted", dn);
    ok(!memcmp(a->eps, b->eps, sizeof(a->eps)), "%s: UNet eps bit-identical", dn);
    ok(!memcmp(a->eps_lora, b->eps_lora, sizeof(a->eps_lora)) &&
           memcmp(a->eps_lora, a->eps, sizeof(a->eps)),
       "%s: LoRA-patched UNet eps bit-identical (and changed by the LoRA)", dn);
    ok(!memcmp(a->img, b->img, sizeof(a->img)), "%s: VAE decode bit-identical", dn);
}

/* The kept model's UNet on the simulated device: resident (budget above the model)
 * and streamed (below), eps equal to the cpu device's. */
static void test_sim(const char *dn, struct model_ckpt *kept, const float *cpu_eps)
{
    size_t bytes = patcher_model_bytes(kept->model[MODEL_UNET]);
    size_t budgets[2] = {bytes + ((size_t)96 << 20), bytes / 2 + ((size_t)72 << 20)};
    for (int i = 0; i < 2; i++) {
        char spec[64];
        snprintf(spec, sizeof(spec), "sim:%zuK", budgets[i] >> 10);
        struct mm_config mc;
        mm_config_init(&mc);
        mc.device_spec = spec;
        struct mm *mm = NULL;
        struct err e = {0};
        if (mm_new(&mc, &mm, &e) < 0) {
            ok(0, "mm_new %s: %s", spec, e.msg);
            return;
        }
        struct patcher *p = patcher_new(kept->model[MODEL_UNET]);
        float eps[2 * 4 * 8 * 8];
        int rc = unet_eps(mm, p, &kept->cfg, eps);
        ok(rc == 0 && !memcmp(eps, cpu_eps, sizeof(eps)),
           "%s: UNet on the sim device (%s, %s) equals the cpu device's", dn, spec,
           i ? "streamed" : "resident");
        mm_unload(mm, kept->model[MODEL_UNET]);
        patcher_unref(p);
        mm_free(mm);
    }
}

static void test_dtype(struct mm *mm, const char *dir, enum st_dtype sdt)
{
    const char *dn = st_dtype_name(sdt);
    char path[256];
    snprintf(path, sizeof(path), "%s/%s.safetensors", dir, dn);
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    o.dtype = sdt;
    struct err e = {0};
    EXPECT_OK(ckpt_gen_write(&o, path, &e));
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct model_ckpt kept, conv;
    int rk = model_ckpt_load(path, MODEL_LOAD_ALL, f32, &kept, &e);
    ok(rk == 0, "%s: load kept (%s)", dn, e.msg);
    int rc = model_ckpt_load(path, MODEL_LOAD_ALL | MODEL_LOAD_CONVERT, f32, &conv, &e);
    ok(rc == 0, "%s: load converted (%s)", dn, e.msg);
    if (rk == 0 && rc == 0) {
        check_accounting(dn, &kept, &conv);
        struct outs a, b;
        int ra = run_all(mm, &kept, &a), rb = run_all(mm, &conv, &b);
        ok(ra == 0 && rb == 0, "%s: forward passes ran", dn);
        if (ra == 0 && rb == 0) {
            compare_outs(dn, &a, &b);
            test_sim(dn, &kept, a.eps);
        }
        outs_release(&a);
        outs_release(&b);
    }
    if (rk == 0)
        model_ckpt_release(&kept);
    if (rc == 0)
        model_ckpt_release(&conv);
    unlink(path);
}

int main(int argc, char **argv)
{
    const char *tokdir = argc > 1 ? argv[1] : NULL;
    tensor_threads_set(2);
    long live0 = alloc_live_count();
    struct err e = {0};
    EXPECT_OK(clip_tokenizer_load(tokdir, &tok, &e));
    char dir[] = "/tmp/test_models_filedtype.XXXXXX";
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    if (mm_new(&mc, &mm, &e) < 0) {
        ok(0, "mm_new: %s", e.msg);
        return harness_done();
    }
    test_dtype(mm, dir, ST_DTYPE_F16);
    test_dtype(mm, dir, ST_DTYPE_BF16);
    mm_free(mm);
    clip_tokenizer_free(tok);
    rmdir(dir);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
