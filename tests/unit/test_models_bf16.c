/*
 * test_models_bf16 — the tiny and small random-weight checkpoints (f16 files, as the
 * benchmarks use) with the UNet and VAE at bf16 compute (tensor_precision.h, set on
 * the models as the loader node does for --bf16-unet --bf16-vae) against the same
 * models at fp32:
 *   - one UNet eval (batch 2, two timesteps): relative error of eps,
 *     ||eps_bf16 - eps_fp32|| / ||eps_fp32|| <= 0.05 (bf16 inputs: one K-length dot is off
 *     by at most ~2^-7 of sum |x w| (test_tensor_bf16); through ~25 GEMM layers with norms
 *     in between it grows: measured 0.022 tiny, 0.020 small, random weights);
 *   - a 4-step Euler txt2img (written here: x += (sigma' - sigma) eps) decoded to pixels
 *     in [0, 1]: PSNR of bf16 against fp32 >= 35 dB (measured 48.9 tiny, 48.7 small);
 *   - the precision scope: fp32 again once the layers are released; fp32 models stay
 *     bit-identical after bf16 ones ran (the bf16 cache is not consulted for them).
 * Arguments: none.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "ckpt_gen.h"
#include "checkpoint.h"
#include "harness.h"
#include "memmgr.h"
#include "tensor_precision.h"
#include "unet.h"
#include "vae.h"

#define LAT 16 /* latent side: 128^2 pixels */

static void wave(float *v, long n, double a, double b)
{
    for (long i = 0; i < n; i++)
        v[i] = (float)(a * sin(0.37 * (double)i + b) + 0.5 * a * cos(0.061 * (double)i));
}

static struct tensor *new_t(struct dev *d, int ndim, const int64_t *shape, const float *v)
{
    struct tensor *t = NULL;
    struct err e = {0};
    if (tensor_new(d, TENSOR_F32, ndim, shape, &t, &e) < 0)
        PANIC("tensor_new: %s", e.msg);
    if (v)
        tensor_write_f32(t, v, tensor_numel(t), &e);
    return t;
}

static int load(struct mm *mm, struct patcher *p, struct err *e)
{
    struct mm_request req = {.n_models = 1, .activation_bytes = (size_t)64 << 20};
    req.models[0] = p;
    struct mm_report rep;
    return mm_load_models(mm, &req, &rep, e);
}

/* eps for x [b,4,LAT,LAT] at timesteps ts (one per image). */
static int eps_of(struct mm *mm, struct patcher *p, const struct model_config *cfg, int b,
                  const float *xv, const float *ts, float *out)
{
    struct err e = {0};
    int rc = load(mm, p, &e);
    if (rc < 0) {
        printf("# %s\n", e.msg);
        return rc;
    }
    struct dev *d = patcher_device(p);
    int64_t xs[4] = {b, 4, LAT, LAT}, cs[3] = {b, 77, cfg->unet.ctx_dim};
    float *cv = xmalloc((size_t)(b * 77 * cfg->unet.ctx_dim) * 4);
    wave(cv, (long)(b * 77 * cfg->unet.ctx_dim), 0.8, 0.5);
    struct tensor *x = new_t(d, 4, xs, xv), *ctx = new_t(d, 3, cs, cv), *eps = new_t(d, 4, xs, NULL);
    if ((rc = unet_eval(p, &cfg->unet, x, ts, ctx, NULL, eps, NULL, &e)) == 0)
        rc = tensor_read_f32(eps, out, tensor_numel(eps), &e);
    if (rc < 0)
        printf("# unet: %s\n", e.msg);
    ok(tensor_precision_get() == TENSOR_PRECISION_F32,
       "after the UNet released its layers the thread is back at fp32");
    mm_node_end(mm, NULL);
    tensor_free(x);
    tensor_free(ctx);
    tensor_free(eps);
    xfree(cv);
    return rc;
}

/* 4 Euler steps from noise, decoded; pixels in [0, 1] into img [3 * 8LAT * 8LAT]. */
static int txt2img(struct mm *mm, struct patcher *unet, struct patcher *vae,
                   const struct model_config *cfg, float *img)
{
    static const float sig[5] = {14.6f, 4.0f, 1.5f, 0.5f, 0.0f};
    static const float ts[4] = {999.0f, 749.0f, 499.0f, 249.0f};
    long n = 4L * LAT * LAT;
    float *x = xmalloc((size_t)n * 4), *eps = xmalloc((size_t)n * 4);
    wave(x, n, sig[0], 0.9);
    int rc = 0;
    for (int s = 0; s < 4 && rc == 0; s++) {
        float xin[4 * LAT * LAT];
        float scale = 1.0f / sqrtf(sig[s] * sig[s] + 1.0f); /* c_in of eps prediction */
        for (long i = 0; i < n; i++)
            xin[i] = x[i] * scale;
        if ((rc = eps_of(mm, unet, cfg, 1, xin, &ts[s], eps)) == 0)
            for (long i = 0; i < n; i++)
                x[i] += (sig[s + 1] - sig[s]) * eps[i];
    }
    struct err e = {0};
    if (rc == 0 && (rc = load(mm, vae, &e)) == 0) {
        struct dev *d = patcher_device(vae);
        int64_t zs[4] = {1, 4, LAT, LAT}, is[4] = {1, 3, 8 * LAT, 8 * LAT};
        for (long i = 0; i < n; i++)
            x[i] /= 0.18215f; /* SD1.5's latent scale */
        struct tensor *z = new_t(d, 4, zs, x), *im = new_t(d, 4, is, NULL);
        if ((rc = vae_decode(vae, &cfg->vae, z, im, NULL, &e)) == 0)
            rc = tensor_read_f32(im, img, tensor_numel(im), &e);
        tensor_free(z);
        tensor_free(im);
        mm_node_end(mm, NULL);
    }
    if (rc < 0)
        printf("# txt2img: %s\n", e.msg);
    long np = 3L * 64 * LAT * LAT;
    for (long i = 0; i < np; i++) {
        float v = (img[i] + 1.0f) * 0.5f; /* VAEDecode: clamp((x + 1) / 2, 0, 1) */
        img[i] = v < 0 ? 0 : v > 1 ? 1 : v;
    }
    xfree(x);
    xfree(eps);
    return rc;
}

static double rel_err(const float *a, const float *ref, long n)
{
    double num = 0, den = 0;
    for (long i = 0; i < n; i++) {
        num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static double psnr(const float *a, const float *b, long n)
{
    double mse = 0;
    for (long i = 0; i < n; i++)
        mse += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    mse /= (double)n;
    return mse > 0 ? 10.0 * log10(1.0 / mse) : INFINITY;
}

static void run_config(struct mm *mm, const char *dir, const char *name, int small)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s.safetensors", dir, name);
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    o.dtype = ST_DTYPE_F16;
    if (small)
        for (int k = 0; k < 4; k++)
            o.cfg.unet.mult[k] = o.cfg.vae.mult[k] = 1;
    struct err e = {0};
    EXPECT_OK(ckpt_gen_write(&o, path, &e));
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct model_ckpt ck;
    if (model_ckpt_load(path, MODEL_LOAD_ALL, f32, &ck, &e) < 0) {
        ok(0, "%s: load: %s", name, e.msg);
        unlink(path);
        return;
    }
    struct patcher *unet = patcher_new(ck.model[MODEL_UNET]);
    struct patcher *vae = patcher_new(ck.model[MODEL_VAE]);
    long n = 2L * 4 * LAT * LAT, np = 3L * 64 * LAT * LAT;
    float *xv = xmalloc((size_t)n * 4), *e32 = xmalloc((size_t)n * 4);
    float *e16 = xmalloc((size_t)n * 4), *e32b = xmalloc((size_t)n * 4);
    float *i32 = xmalloc((size_t)np * 4), *i16 = xmalloc((size_t)np * 4);
    float ts[2] = {500.0f, 20.0f};
    wave(xv, n, 1.0, 0.1);
    int rc = eps_of(mm, unet, &ck.cfg, 2, xv, ts, e32);
    rc = rc ? rc : txt2img(mm, unet, vae, &ck.cfg, i32);
    patcher_model_set_precision(ck.model[MODEL_UNET], TENSOR_PRECISION_BF16);
    patcher_model_set_precision(ck.model[MODEL_VAE], TENSOR_PRECISION_BF16);
    rc = rc ? rc : eps_of(mm, unet, &ck.cfg, 2, xv, ts, e16);
    rc = rc ? rc : txt2img(mm, unet, vae, &ck.cfg, i16);
    patcher_model_set_precision(ck.model[MODEL_UNET], TENSOR_PRECISION_F32);
    rc = rc ? rc : eps_of(mm, unet, &ck.cfg, 2, xv, ts, e32b);
    ok(rc == 0, "%s: forward passes ran", name);
    if (rc == 0) {
        double re = rel_err(e16, e32, n), p = psnr(i16, i32, np);
        printf("# %s: bf16 cache %zu KiB, path %s\n", name, tensor_bf16_cache_bytes() >> 10,
               tensor_bf16_path());
        ok(re > 0 && re <= 0.05, "%s: UNet eps relative error bf16 vs fp32 = %.3g (<= 0.05)",
           name, re);
        ok(p >= 35.0, "%s: decoded 128^2 image PSNR bf16 vs fp32 = %.1f dB (>= 35)", name, p);
        ok(!memcmp(e32, e32b, (size_t)n * 4), "%s: fp32 again after bf16: bit-identical", name);
    }
    xfree(xv);
    xfree(e32);
    xfree(e16);
    xfree(e32b);
    xfree(i32);
    xfree(i16);
    mm_unload(mm, ck.model[MODEL_UNET]);
    mm_unload(mm, ck.model[MODEL_VAE]);
    patcher_unref(unet);
    patcher_unref(vae);
    model_ckpt_release(&ck);
    ok(tensor_bf16_cache_bytes() == 0, "%s: freeing the models dropped their bf16 copies", name);
    unlink(path);
}

int main(void)
{
    tensor_threads_set(2);
    long live0 = alloc_live_count();
    struct err e = {0};
    char dir[] = "/tmp/test_models_bf16.XXXXXX";
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
    run_config(mm, dir, "tiny", 0);
    run_config(mm, dir, "small", 1);
    mm_free(mm);
    rmdir(dir);
    tensor_shutdown();
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
