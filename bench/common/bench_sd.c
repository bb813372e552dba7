/*
 * bench_sd — shared cases of bench/sd15 and bench/sdxl (bench_sd.h). Each case makes
 * its own patcher on the checkpoint's model, loads it on the caller's manager for the
 * case and unloads it after, so one process can time every component of a full-size
 * checkpoint without holding two of them on the device at once.
 */
#include "bench_sd.h"
#include "clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "clip_tokenizer.h"
#include "unet.h"
#include "vae.h"

struct tensor *bench_sd_filled(struct dev *d, int ndim, const int64_t *shape, double a)
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

/* Through tensor_linear: the GEMM path the models' linears and convs run on. */
double bench_sd_sgemm_rate(struct dev *d)
{
    const int64_t n = 1024;
    int64_t s[2] = {n, n};
    struct tensor *a = bench_sd_filled(d, 2, s, 0.1), *b = bench_sd_filled(d, 2, s, 0.2), *c = NULL;
    struct err e = {0};
    tensor_new(d, TENSOR_F32, 2, s, &c, &e);
    tensor_linear(c, a, b, NULL, &e); /* warm */
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = clock_mono_sec();
        tensor_linear(c, a, b, NULL, &e);
        double dt = clock_mono_sec() - t0;
        best = fmax(best, 2.0 * n * n * n / dt / 1e9);
    }
    tensor_free(a);
    tensor_free(b);
    tensor_free(c);
    return best;
}

void bench_sd_report(const char *name, double secs, double flops, double sg0, double sg1)
{
    double gf = flops / secs / 1e9, sg = 0.5 * (sg0 + sg1);
    printf("%-28s %9.2f s %9.1f GFLOP/s %6.2f of sgemm (%.1f GFLOP/s)\n", name, secs, gf, gf / sg,
           sg);
    fflush(stdout);
}

double bench_sd_peak_rss_mib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = -1;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "VmHWM:", 6) == 0)
            kib = atof(line + 6);
    if (f)
        fclose(f);
    return kib < 0 ? -1 : kib / 1024.0;
}

static int load(struct mm *mm, struct patcher *p, size_t act)
{
    struct err e = {0};
    struct mm_request req = {.n_models = 1, .models = {p}, .activation_bytes = act};
    struct mm_report rep;
    if (mm_load_models(mm, &req, &rep, &e) < 0) {
        fprintf(stderr, "bench: %s\n", e.msg);
        return -1;
    }
    return 0;
}

double bench_sd_text(struct mm *mm, struct model_ckpt *ck, enum model_component comp,
                     const struct text_encode_opts *opts, const char *name)
{
    const struct model_config *c = &ck->cfg;
    const struct text_arch *ta = &c->text[comp - MODEL_CLIP];
    struct err e = {0};
    struct clip_tokenizer *tok = NULL;
    struct patcher *p = patcher_new(ck->model[comp]);
    double best = -1;
    if (clip_tokenizer_load(NULL, &tok, &e) < 0 || load(mm, p, text_plan_bytes(ta, 1)) < 0) {
        fprintf(stderr, "bench: %s skipped: %s\n", name, e.msg);
        goto out;
    }
    struct dev *d = patcher_device(p);
    struct clip_tokens tk;
    clip_tokenize_prompt(tok, "a photograph of an astronaut riding a horse, highly detailed", &tk);
    double sg0 = 0;
    best = 1e30;
    for (int r = 0; r < 4; r++) { /* the first is the warm-up */
        float *cond = NULL, *pooled = NULL;
        if (r == 1)
            sg0 = bench_sd_sgemm_rate(d);
        double s = clock_mono_sec();
        if (text_encode(p, ta, model_prefix(c, comp), &tk, opts, &cond, &pooled, NULL, &e) < 0)
            fprintf(stderr, "bench: %s: %s\n", name, e.msg);
        if (r > 0)
            best = fmin(best, clock_mono_sec() - s);
        xfree(cond);
        xfree(pooled);
    }
    double D = ta->width, M = ta->mlp, T = 77;
    double fl = ta->layers * (2 * T * (4 * D * D + 2 * D * M) + 4 * T * T * D);
    bench_sd_report(name, best, fl, sg0, bench_sd_sgemm_rate(d));
    clip_tokens_release(&tk);
    mm_unload(mm, ck->model[comp]);
out:
    clip_tokenizer_free(tok);
    patcher_unref(p);
    return best;
}

double bench_sd_unet(struct mm *mm, struct model_ckpt *ck, int lat, int reps, const char *name)
{
    const struct unet_arch *a = &ck->cfg.unet;
    struct err e = {0};
    struct patcher *p = patcher_new(ck->model[MODEL_UNET]);
    size_t io = (size_t)2 * (2 * 4 * lat * lat + (size_t)77 * a->ctx_dim + a->adm_in) * 4;
    if (load(mm, p, unet_plan_bytes(a, 2, lat, lat, 77) + io) < 0) {
        patcher_unref(p);
        return -1;
    }
    struct dev *d = patcher_device(p);
    int64_t xs[4] = {2, 4, lat, lat}, cs[3] = {2, 77, a->ctx_dim}, ys[2] = {2, a->adm_in};
    struct tensor *x = bench_sd_filled(d, 4, xs, 0.37), *ctx = bench_sd_filled(d, 3, cs, 0.011),
                  *eps = NULL;
    struct tensor *y = a->adm_in ? bench_sd_filled(d, 2, ys, 0.017) : NULL;
    tensor_new(d, TENSOR_F32, 4, xs, &eps, &e);
    float t[2] = {500, 500};
    double sg0 = bench_sd_sgemm_rate(d), best = 1e30;
    for (int r = 0; r < reps; r++) {
        double s = clock_mono_sec();
        if (unet_eval(p, a, x, t, ctx, y, eps, NULL, &e) < 0)
            fprintf(stderr, "bench: %s: %s\n", name, e.msg);
        best = fmin(best, clock_mono_sec() - s);
    }
    bench_sd_report(name, best, unet_flops(a, 2, lat, lat, 77), sg0, bench_sd_sgemm_rate(d));
    tensor_free(x);
    tensor_free(ctx);
    tensor_free(y);
    tensor_free(eps);
    mm_unload(mm, ck->model[MODEL_UNET]);
    patcher_unref(p);
    return best;
}

double bench_sd_vae(struct mm *mm, struct model_ckpt *ck, int lat, int reps, const char *name)
{
    const struct vae_arch *a = &ck->cfg.vae;
    struct err e = {0};
    struct patcher *p = patcher_new(ck->model[MODEL_VAE]);
    if (load(mm, p, vae_plan_bytes(a, 1, lat, lat)) < 0) {
        patcher_unref(p);
        return -1;
    }
    struct dev *d = patcher_device(p);
    int64_t zs[4] = {1, 4, lat, lat}, is[4] = {1, 3, 8 * lat, 8 * lat};
    struct tensor *z = bench_sd_filled(d, 4, zs, 0.23), *img = NULL;
    tensor_new(d, TENSOR_F32, 4, is, &img, &e);
    double sg0 = bench_sd_sgemm_rate(d), best = 1e30;
    for (int r = 0; r < reps; r++) {
        double s = clock_mono_sec();
        if (vae_decode(p, a, z, img, NULL, &e) < 0)
            fprintf(stderr, "bench: %s: %s\n", name, e.msg);
        best = fmin(best, clock_mono_sec() - s);
    }
    bench_sd_report(name, best, vae_decode_flops(a, 1, lat, lat), sg0, bench_sd_sgemm_rate(d));
    tensor_free(z);
    tensor_free(img);
    mm_unload(mm, ck->model[MODEL_VAE]);
    patcher_unref(p);
    return best;
}
