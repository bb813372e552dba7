/*
 * test_models_full (label `model`) — a full-size SD1.5 random-weight UNet (the real
 * widths: 320 channels, 768 context, 686 tensors, fp16 as most community files) is
 * generated here, detected as canonical SD1.5, loaded with its fp16 weights borrowed
 * from the mapping, and evaluated once on a small latent (batch 2, 8x8, 77 tokens).
 * Checks: detection, finite output of sensible scale, and that the two batch elements
 * equal single evaluations of the same inputs (batch independence).
 * Argument 1 (optional): where to write the 1.7 GB file (default $TMPDIR or /tmp).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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
#include "family.h"

static struct tensor *wave_tensor(struct dev *d, int ndim, const int64_t *shape, double a, double b)
{
    struct tensor *t = NULL;
    struct err e = {0};
    if (tensor_new(d, TENSOR_F32, ndim, shape, &t, &e) < 0)
        PANIC("%s", e.msg);
    int64_t n = tensor_numel(t);
    float *v = xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)sin(a * (double)i + b);
    tensor_write_f32(t, v, n, &e);
    xfree(v);
    return t;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    char path[512];
    snprintf(path, sizeof(path), "%s/latentd_full_unet_%d.safetensors", dir, (int)getpid());
    tensor_threads_set(2);
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    sd15_config_canonical(&o.cfg);
    o.dtype = ST_DTYPE_F16;
    o.flags = CKPT_GEN_NO_VAE | CKPT_GEN_NO_CLIP;
    struct err e = {0};
    if (ckpt_gen_write(&o, path, &e) < 0) {
        unlink(path);
        SKIP("cannot write the full-size checkpoint: %s", e.msg);
    }
    struct model_ckpt ck;
    static const enum tensor_dtype dts[3] = {TENSOR_F16, TENSOR_F32, TENSOR_F32};
    int rc = model_ckpt_load(path, MODEL_LOAD_UNET, dts, &ck, &e);
    ok(rc == 0, "full-size UNet loads (%s)", e.msg);
    if (rc < 0) {
        unlink(path);
        return harness_done();
    }
    /* The mapping stays alive through the models; the name can go now. */
    unlink(path);
    struct model_config canon;
    sd15_config_canonical(&canon);
    ok(ck.cfg.unet.model_ch == 320 && ck.cfg.unet.ctx_dim == 768 && ck.tensors[MODEL_UNET] == 686 &&
           memcmp(ck.cfg.unet.mult, canon.unet.mult, sizeof(canon.unet.mult)) == 0,
       "detected SD1.5 UNet widths from shapes (686 tensors)");
    EXPECT_EQ(ck.bytes[MODEL_UNET], (size_t)859520964 * 2);

    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    EXPECT_OK(mm_new(&mc, &mm, &e));
    struct patcher *p = patcher_new(ck.model[MODEL_UNET]);
    struct mm_request req = {.n_models = 1,
                             .models = {p},
                             .activation_bytes = unet_plan_bytes(&ck.cfg.unet, 2, 8, 8, 77)};
    struct mm_report rep;
    EXPECT_OK(mm_load_models(mm, &req, &rep, &e));
    struct dev *d = patcher_device(p);
    int64_t xs[4] = {2, 4, 8, 8}, cs[3] = {2, 77, 768}, x1s[4] = {1, 4, 8, 8},
            c1s[3] = {1, 77, 768};
    struct tensor *x = wave_tensor(d, 4, xs, 0.37, 0.1), *ctx = wave_tensor(d, 3, cs, 0.011, 0.5);
    struct tensor *eps = NULL, *eps1 = NULL, *xv = NULL, *cv = NULL, *xc = NULL, *cc = NULL;
    tensor_new(d, TENSOR_F32, 4, xs, &eps, &e);
    tensor_new(d, TENSOR_F32, 4, x1s, &eps1, &e);
    float t[2] = {999, 250};
    rc = unet_eval(p, &ck.cfg.unet, x, t, ctx, NULL, eps, NULL, &e);
    ok(rc == 0, "full-size UNet eval, batch 2 at 8x8 (%s)", e.msg);
    float *out = xmalloc(2 * 256 * 4), *one = xmalloc(256 * 4);
    tensor_read_f32(eps, out, 512, &e);
    double ma = 0;
    int finite = 1;
    for (int i = 0; i < 512; i++) {
        finite &= isfinite(out[i]);
        ma += fabs(out[i]) / 512;
    }
    ok(finite && ma > 1e-3 && ma < 1e3, "eps finite with sensible scale (mean |eps| %g)", ma);
    /* Batch element 1 alone must give the same eps as in the batch. */
    tensor_slice(x, 0, 1, 1, &xv, &e);
    tensor_slice(ctx, 0, 1, 1, &cv, &e);
    tensor_new(d, TENSOR_F32, 4, x1s, &xc, &e);
    tensor_new(d, TENSOR_F32, 3, c1s, &cc, &e);
    tensor_copy(xc, xv, &e);
    tensor_copy(cc, cv, &e);
    rc = unet_eval(p, &ck.cfg.unet, xc, &t[1], cc, NULL, eps1, NULL, &e);
    tensor_read_f32(eps1, one, 256, &e);
    double diff = 0;
    for (int i = 0; i < 256; i++)
        diff = fmax(diff, fabs(one[i] - out[256 + i]));
    ok(rc == 0 && diff <= 1e-4 * fmax(ma, 1e-3), "batch element 1 equals a batch-1 eval (max diff %g)",
       diff);
    xfree(out);
    xfree(one);
    tensor_free(x);
    tensor_free(ctx);
    tensor_free(eps);
    tensor_free(eps1);
    tensor_free(xv);
    tensor_free(cv);
    tensor_free(xc);
    tensor_free(cc);
    mm_node_end(mm, &rep);
    mm_unload(mm, ck.model[MODEL_UNET]);
    patcher_unref(p);
    model_ckpt_release(&ck);
    mm_free(mm);
    return harness_done();
}
