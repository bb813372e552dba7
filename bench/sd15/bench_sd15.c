/*
 * bench_sd15 — SD1.5 model throughput on the CPU with the full-size random-weight
 * checkpoint (generated on first use: tools/ckpt_gen.c, fp16, ~2 GiB; loaded as f32
 * per sd15.md §8.5). One command; prints, for each case, the wall time, the achieved
 * GFLOP/s and its fraction of an sgemm (1024^3 through tensor_linear, 2 threads)
 * measured right before and after that case in the same run (the machine is shared).
 *
 * usage: bench_sd15 [--ckpt PATH] [--quick] [--threads N]
 *   cases: CLIP encode (1 chunk), UNet batch 2 (CFG) at 256^2 and 512^2 (latent 32^2 /
 *   64^2, 77 tokens), VAE decode at 256^2 and 512^2. --quick skips the 512^2 cases.
 * Reference: stable-diffusion.cpp, same machine class, 2 threads (remeasured): ~5.2 s per
 * euler+CFG step and ~12.4 s VAE decode at 256^2; ~31 s and ~53 s at 512^2; goal <= 2/3
 * of those. The last lines print each measured time over its reference figure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "ckpt_gen.h"
#include "clip_tokenizer.h"
#include "memmgr.h"
#include "checkpoint.h"
#include "text_encoder.h"
#include "unet.h"
#include "vae.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static struct tensor *filled(struct dev *d, int ndim, const int64_t *shape, double a)
{
    struct tensor *t = NULL;
    struct err e = {0};
    if (tensor_new(d, TENSOR_F32, ndim, shape, &t, &e) < 0)
        PANIC("%s", e.msg);
    int64_t n = tensor_numel(t);
    float *v = xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)sin(a * (double)i + 0.3);
    tensor_write_f32(t, v, n, &e);
    xfree(v);
    return t;
}

/* sgemm GFLOP/s through tensor_linear (the GEMM path the models' linears run on). */
static double sgemm_rate(struct dev *d)
{
    const int64_t n = 1024;
    int64_t s[2] = {n, n};
    struct tensor *a = filled(d, 2, s, 0.1), *b = filled(d, 2, s, 0.2), *c = NULL;
    struct err e = {0};
    tensor_new(d, TENSOR_F32, 2, s, &c, &e);
    tensor_linear(c, a, b, NULL, &e); /* warm */
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        tensor_linear(c, a, b, NULL, &e);
        double dt = now_s() - t0;
        best = fmax(best, 2.0 * n * n * n / dt / 1e9);
    }
    tensor_free(a);
    tensor_free(b);
    tensor_free(c);
    return best;
}

static void report(const char *name, double secs, double flops, double sg0, double sg1)
{
    double gf = flops / secs / 1e9, sg = 0.5 * (sg0 + sg1);
    printf("%-28s %9.2f s %9.1f GFLOP/s %6.2f of sgemm (%.1f GFLOP/s)\n", name, secs, gf, gf / sg,
           sg);
    fflush(stdout);
}

static int load(struct mm *mm, struct model_ckpt *ck, struct patcher **p, size_t act)
{
    struct err e = {0};
    struct mm_request req = {.n_models = 1, .models = {*p}, .activation_bytes = act};
    struct mm_report rep;
    (void)ck;
    if (mm_load_models(mm, &req, &rep, &e) < 0) {
        fprintf(stderr, "bench_sd15: %s\n", e.msg);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *ckpt = NULL;
    int quick = 0, threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ckpt") && i + 1 < argc)
            ckpt = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_sd15 [--ckpt PATH] [--quick] [--threads N]\n");
            return 2;
        }
    }
    char path[1024];
    struct err e = {0};
    if (!(ckpt = ckpt_gen_bench_full(ckpt, path, sizeof(path), &e))) {
        fprintf(stderr, "bench_sd15: %s\n", e.msg);
        return 1;
    }
    tensor_threads_set(threads);
    struct model_ckpt ck;
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    double t0 = now_s();
    if (model_ckpt_load(ckpt, MODEL_LOAD_ALL, f32, &ck, &e) < 0) {
        fprintf(stderr, "bench_sd15: %s\n", e.msg);
        return 1;
    }
    printf("# loaded '%s' as f32 in %.1f s (%s), %d threads\n", ckpt, now_s() - t0,
           ck.canonical ? "SD1.5" : "not canonical", threads);
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    if (mm_new(&mc, &mm, &e) < 0) {
        fprintf(stderr, "bench_sd15: %s\n", e.msg);
        return 1;
    }
    struct patcher *clip = patcher_new(ck.model[MODEL_CLIP]), *unet = patcher_new(ck.model[MODEL_UNET]),
                   *vae = patcher_new(ck.model[MODEL_VAE]);
    struct dev *d = NULL;
    const struct model_config *c = &ck.cfg;

    /* CLIP: one 77-token chunk. */
    struct clip_tokenizer *tok = NULL;
    if (clip_tokenizer_load(NULL, &tok, &e) == 0 &&
        load(mm, &ck, &clip, text_plan_bytes(&c->text[0], 1)) == 0) {
        d = patcher_device(clip);
        struct clip_tokens tk;
        clip_tokenize_prompt(tok, "a photograph of an astronaut riding a horse, highly detailed", &tk);
        float *cond = NULL, *pooled = NULL;
        text_encode(clip, &c->text[0], model_prefix(c, MODEL_CLIP), &tk,
                    &(struct text_encode_opts){.layer = -1, .norm_hidden = 1}, &cond, &pooled, NULL,
                    &e); /* warm */
        xfree(cond);
        xfree(pooled);
        double sg0 = sgemm_rate(d), best = 1e30;
        for (int r = 0; r < 3; r++) {
            double s = now_s();
            text_encode(clip, &c->text[0], model_prefix(c, MODEL_CLIP), &tk,
                        &(struct text_encode_opts){.layer = -1, .norm_hidden = 1}, &cond, &pooled,
                        NULL, &e);
            best = fmin(best, now_s() - s);
            xfree(cond);
            xfree(pooled);
        }
        double D = c->text[0].width, M = c->text[0].mlp, T = 77;
        double fl = c->text[0].layers * (2 * T * (4 * D * D + 2 * D * M) + 4 * T * T * D);
        report("clip_encode_77", best, fl, sg0, sgemm_rate(d));
        clip_tokens_release(&tk);
        mm_unload(mm, ck.model[MODEL_CLIP]);
    } else {
        fprintf(stderr, "bench_sd15: clip skipped: %s\n", e.msg);
    }
    clip_tokenizer_free(tok);

    static const int sizes[2] = {256, 512};
    /* stable-diffusion.cpp on the same machine class, 2 threads (seconds). */
    static const double ref_unet_s[2] = {5.2, 31.0}, ref_vae_s[2] = {12.4, 53.0};
    double got_unet_s[2] = {0, 0}, got_vae_s[2] = {0, 0};
    for (int si = 0; si < (quick ? 1 : 2); si++) {
        int lat = sizes[si] / 8;
        if (load(mm, &ck, &unet, unet_plan_bytes(&c->unet, 2, lat, lat, 77)) < 0)
            break;
        d = patcher_device(unet);
        int64_t xs[4] = {2, 4, lat, lat}, cs[3] = {2, 77, c->unet.ctx_dim};
        struct tensor *x = filled(d, 4, xs, 0.37), *ctx = filled(d, 3, cs, 0.011), *eps = NULL;
        tensor_new(d, TENSOR_F32, 4, xs, &eps, &e);
        float t[2] = {500, 500};
        int reps = si == 0 ? 2 : 1;
        double sg0 = sgemm_rate(d), best = 1e30;
        for (int r = 0; r < reps; r++) {
            double s = now_s();
            if (unet_eval(unet, &c->unet, x, t, ctx, NULL, eps, NULL, &e) < 0)
                fprintf(stderr, "bench_sd15: %s\n", e.msg);
            best = fmin(best, now_s() - s);
        }
        char name[64];
        got_unet_s[si] = best;
        snprintf(name, sizeof(name), "unet_b2_%d", sizes[si]);
        report(name, best, unet_flops(&c->unet, 2, lat, lat, 77), sg0, sgemm_rate(d));
        tensor_free(x);
        tensor_free(ctx);
        tensor_free(eps);
        mm_unload(mm, ck.model[MODEL_UNET]);

        if (load(mm, &ck, &vae, vae_plan_bytes(&c->vae, 1, lat, lat)) < 0)
            break;
        d = patcher_device(vae);
        int64_t zs[4] = {1, 4, lat, lat}, is[4] = {1, 3, 8 * lat, 8 * lat};
        struct tensor *z = filled(d, 4, zs, 0.23), *img = NULL;
        tensor_new(d, TENSOR_F32, 4, is, &img, &e);
        sg0 = sgemm_rate(d);
        best = 1e30;
        for (int r = 0; r < reps; r++) {
            double s = now_s();
            if (vae_decode(vae, &c->vae, z, img, NULL, &e) < 0)
                fprintf(stderr, "bench_sd15: %s\n", e.msg);
            best = fmin(best, now_s() - s);
        }
        got_vae_s[si] = best;
        snprintf(name, sizeof(name), "vae_decode_%d", sizes[si]);
        report(name, best, vae_decode_flops(&c->vae, 1, lat, lat), sg0, sgemm_rate(d));
        tensor_free(z);
        tensor_free(img);
        mm_unload(mm, ck.model[MODEL_VAE]);
    }
    printf("# reference (stable-diffusion.cpp, 2 threads): euler+CFG step %.1f s @256, %.0f s "
           "@512; vae decode %.1f s @256, %.0f s @512\n",
           ref_unet_s[0], ref_unet_s[1], ref_vae_s[0], ref_vae_s[1]);
    for (int si = 0; si < 2; si++) {
        if (got_unet_s[si] > 0)
            printf("# unet_b2_%d / reference: %.2f\n", sizes[si], got_unet_s[si] / ref_unet_s[si]);
        if (got_vae_s[si] > 0)
            printf("# vae_decode_%d / reference: %.2f\n", sizes[si], got_vae_s[si] / ref_vae_s[si]);
    }
    patcher_unref(clip);
    patcher_unref(unet);
    patcher_unref(vae);
    model_ckpt_release(&ck);
    mm_free(mm);
    return 0;
}
