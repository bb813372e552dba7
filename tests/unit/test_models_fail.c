/*
 * test_models_fail — a model whose weights stop being trustworthy part-way through a
 * forward pass (its file was truncated or rewritten on disk: patcher_acquire's check
 * fails, issue 11) must return that error from any layer, free what it made and leave
 * the patcher and the memory manager usable. The check is simulated: a keep whose check
 * fails from its k-th call on, for every k of the UNet and the VAE decoder on the cpu
 * device (zero copy: compute reads the host copy directly, as with a mapped file).
 * Run under ASan to catch double frees on the error paths.
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

enum { B = 1, H = 8, W = 8, T = 77 };

static int calls, fail_from; /* the check fails from call fail_from on (0: never) */

static int fake_check(void *user, struct err *e)
{
    (void)user;
    if (fail_from && ++calls >= fail_from)
        return err_set(e, ERR_IO, "'fake.safetensors' changed on disk while in use");
    return 0;
}

static void no_release(void *user) { (void)user; }

static int unet_once(struct mm *mm, struct patcher *p, const struct model_config *cfg,
                     struct err *e)
{
    struct mm_request req = {.n_models = 1, .models = {p}};
    req.activation_bytes = unet_plan_bytes(&cfg->unet, B, H, W, T) + (1u << 20);
    struct mm_report rep;
    int rc = mm_load_models(mm, &req, &rep, e);
    if (rc < 0)
        return rc;
    struct dev *d = mm_device(mm);
    int64_t xs[4] = {B, 4, H, W}, cs[3] = {B, T, cfg->unet.ctx_dim};
    const float ts[B] = {500.0f};
    struct tensor *x = NULL, *c = NULL, *eps = NULL;
    if ((rc = tensor_new(d, TENSOR_F32, 4, xs, &x, e)) >= 0 &&
        (rc = tensor_new(d, TENSOR_F32, 3, cs, &c, e)) >= 0 &&
        (rc = tensor_new(d, TENSOR_F32, 4, xs, &eps, e)) >= 0 &&
        (rc = tensor_fill(x, 0.25f, e)) >= 0 && (rc = tensor_fill(c, 0.5f, e)) >= 0)
        rc = unet_eval(p, &cfg->unet, x, ts, c, NULL, eps, NULL, e);
    tensor_free(x);
    tensor_free(c);
    tensor_free(eps);
    mm_node_end(mm, &rep);
    return rc;
}

static int vae_once(struct mm *mm, struct patcher *p, const struct model_config *cfg,
                    struct err *e)
{
    struct mm_request req = {.n_models = 1, .models = {p}};
    req.activation_bytes = vae_plan_bytes(&cfg->vae, B, H, W) + (1u << 20);
    struct mm_report rep;
    int rc = mm_load_models(mm, &req, &rep, e);
    if (rc < 0)
        return rc;
    struct dev *d = mm_device(mm);
    int64_t zs[4] = {B, 4, H, W}, is[4] = {B, 3, 8 * H, 8 * W};
    struct tensor *z = NULL, *img = NULL;
    if ((rc = tensor_new(d, TENSOR_F32, 4, zs, &z, e)) >= 0 &&
        (rc = tensor_new(d, TENSOR_F32, 4, is, &img, e)) >= 0 &&
        (rc = tensor_fill(z, 0.1f, e)) >= 0)
        rc = vae_decode(p, &cfg->vae, z, img, NULL, e);
    tensor_free(z);
    tensor_free(img);
    mm_node_end(mm, &rep);
    return rc;
}

typedef int (*once_fn)(struct mm *, struct patcher *, const struct model_config *, struct err *);

/* Fail at every check call of one run in turn (the run acquires layers k times), then
 * pass again: same model, same manager. */
static void fail_everywhere(const char *what, struct mm *mm, struct patcher *p,
                            const struct model_config *cfg, once_fn once)
{
    struct err e = {0};
    fail_from = 0;
    EXPECT_OK(once(mm, p, cfg, &e));
    int k = 1, bad = 0, rc;
    for (;; k++) {
        calls = 0;
        fail_from = k;
        err_clear(&e);
        if ((rc = once(mm, p, cfg, &e)) == 0)
            break; /* k is past the run's last acquire */
        bad += rc != ERR_IO || !strstr(e.msg, "changed on disk");
        if (rc != ERR_IO)
            printf("# %s: check %d: rc %d (%s)\n", what, k, rc, e.msg);
    }
    ok(k > 10 && bad == 0, "%s: a failed check at any of %d acquires is the node's error", what,
       k - 1);
    fail_from = 0;
    err_clear(&e);
    ok(once(mm, p, cfg, &e) == 0, "%s: runs again afterwards (%s)", what, e.msg);
}

int main(void)
{
    char dir[] = "/tmp/test_models_fail.XXXXXX", path[64];
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    snprintf(path, sizeof(path), "%s/tiny.safetensors", dir);
    tensor_threads_set(2);
    long live0 = alloc_live_count();
    struct err e = {0};
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    o.flags = CKPT_GEN_NO_CLIP;
    EXPECT_OK(ckpt_gen_write(&o, path, &e));
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct model_ckpt ck;
    if (model_ckpt_load(path, MODEL_LOAD_UNET | MODEL_LOAD_VAE, f32, &ck, &e) < 0) {
        ok(0, "load tiny checkpoint: %s", e.msg);
        return harness_done();
    }
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    EXPECT_OK(mm_new(&mc, &mm, &e));
    struct patcher *unet = patcher_new(ck.model[MODEL_UNET]);
    struct patcher *vae = patcher_new(ck.model[MODEL_VAE]);
    patcher_model_keep_checked(ck.model[MODEL_UNET], no_release, fake_check, NULL);
    patcher_model_keep_checked(ck.model[MODEL_VAE], no_release, fake_check, NULL);
    fail_everywhere("unet", mm, unet, &ck.cfg, unet_once);
    fail_everywhere("vae decode", mm, vae, &ck.cfg, vae_once);
    patcher_unref(unet);
    patcher_unref(vae);
    model_ckpt_release(&ck);
    mm_free(mm);
    /* the thread's CPU scratch (widened weights, Winograd's buffers) is kept between ops
     * by design and freed at the thread's exit; give it back now to count the rest */
    tensor_cpu_scratch_release();
    EXPECT_EQ(alloc_live_count(), live0);
    unlink(path);
    rmdir(dir);
    return harness_done();
}
