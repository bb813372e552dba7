/*
 * bench_controlnet — what one ControlNet adds to a UNet step (issue 16): the full-size
 * random SD1.5 UNet, batch 2 (a CFG step) at 512^2 (--size), with and without a
 * full-size ControlNet of the same family (its residuals computed, then injected),
 * rounds interleaved, medians. Prints both times, their ratio, and the ControlNet's
 * weight bytes as a share of the UNet's (a stand-in for its FLOP share: the trunk it
 * runs is the UNet's input side and middle, plus the hint encoder at pixel size).
 *
 * usage: bench_controlnet [--ckpt PATH] [--cn PATH] [--size N] [--rounds N] [--threads N]
 * The checkpoint is bench/sd15's (ckpt_gen_bench_full); the ControlNet is generated
 * next to it on first use (cn_full_random_f16.safetensors, ~0.7 GB).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_sd.h"
#include "clock.h"
#include "checkpoint.h"
#include "ckpt_gen.h"
#include "controlnet.h"
#include "family.h"
#include "memmgr.h"
#include "unet.h"

static struct tensor *filled(struct dev *d, int ndim, const int64_t *shape, float v)
{
    struct tensor *t = NULL;
    struct err e = {0};
    if (tensor_new(d, TENSOR_F32, ndim, shape, &t, &e) < 0 || tensor_fill(t, v, &e) < 0) {
        fprintf(stderr, "bench_controlnet: %s\n", e.msg);
        exit(1);
    }
    return t;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *ckpt = NULL, *cn_path = NULL;
    int size = 512, rounds = 3, threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ckpt") && i + 1 < argc)
            ckpt = argv[++i];
        else if (!strcmp(argv[i], "--cn") && i + 1 < argc)
            cn_path = argv[++i];
        else if (!strcmp(argv[i], "--size") && i + 1 < argc)
            size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_controlnet [--ckpt PATH] [--cn PATH] [--size N] "
                            "[--rounds N] [--threads N]\n");
            return 2;
        }
    }
    if (rounds < 1 || rounds > 64 || size < 64 || size % 8)
        return fprintf(stderr, "bench_controlnet: bad --rounds or --size\n"), 2;
    char path[1024], cnbuf[1100];
    struct err e = {0};
    if (!(ckpt = ckpt_gen_bench_full(ckpt, path, sizeof(path), &e)))
        return fprintf(stderr, "bench_controlnet: %s\n", e.msg), 1;
    if (!cn_path) {
        const char *dir = getenv("LATENTD_BENCH_DIR");
        snprintf(cnbuf, sizeof(cnbuf), "%s/cn_full_random_f16.safetensors", dir ? dir : ".");
        cn_path = cnbuf;
        if (access(cn_path, R_OK) != 0) {
            struct ckpt_gen_opts o;
            ckpt_gen_opts_default(&o);
            sd15_config_canonical(&o.cfg);
            o.dtype = ST_DTYPE_F16;
            o.flags |= CKPT_GEN_CONTROLNET;
            printf("# generating %s\n", cn_path);
            if (ckpt_gen_write(&o, cn_path, &e) < 0)
                return fprintf(stderr, "bench_controlnet: %s\n", e.msg), 1;
        }
    }
    tensor_threads_set(threads);
    struct model_ckpt ck;
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct controlnet *cn = NULL;
    if (model_ckpt_load(ckpt, MODEL_LOAD_UNET, f32, &ck, &e) < 0 ||
        controlnet_load(cn_path, NULL, TENSOR_F32, &cn, &e) < 0)
        return fprintf(stderr, "bench_controlnet: %s\n", e.msg), 1;
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    if (mm_new(&mc, &mm, &e) < 0)
        return fprintf(stderr, "bench_controlnet: %s\n", e.msg), 1;
    const struct unet_arch *a = &ck.cfg.unet;
    int lat = size / 8;
    struct patcher *up = patcher_new(ck.model[MODEL_UNET]);
    struct mm_request req = {.n_models = 2, .models = {up, cn->p}};
    req.activation_bytes = unet_plan_bytes(a, 2, lat, lat, 77) +
                           controlnet_plan_bytes(cn, 2, lat, lat, 77) + (64u << 20);
    struct mm_report rep;
    if (mm_load_models(mm, &req, &rep, &e) < 0)
        return fprintf(stderr, "bench_controlnet: %s\n", e.msg), 1;
    struct dev *d = patcher_device(up);
    int64_t xs[4] = {2, 4, lat, lat}, cs[3] = {2, 77, a->ctx_dim}, hs[4] = {2, 3, size, size};
    struct tensor *x = filled(d, 4, xs, 0.37f), *ctx = filled(d, 3, cs, 0.011f);
    struct tensor *hint = filled(d, 4, hs, 0.5f), *eps = NULL;
    tensor_new(d, TENSOR_F32, 4, xs, &eps, &e);
    float t[2] = {500, 500};
    double plain[64], with[64];
    for (int r = 0; r < rounds; r++) {
        double s = clock_mono_sec();
        if (unet_eval(up, a, x, t, ctx, NULL, eps, NULL, &e) < 0)
            fprintf(stderr, "bench_controlnet: %s\n", e.msg);
        plain[r] = clock_mono_sec() - s;
        s = clock_mono_sec();
        struct controlnet_out o;
        struct unet_control uc;
        if (controlnet_eval(cn, x, t, ctx, NULL, hint, 1.0f, &o, &e) < 0)
            fprintf(stderr, "bench_controlnet: %s\n", e.msg);
        controlnet_out_view(&o, &uc);
        if (unet_eval_control(up, a, x, t, ctx, NULL, &uc, eps, &e) < 0)
            fprintf(stderr, "bench_controlnet: %s\n", e.msg);
        controlnet_out_release(&o);
        with[r] = clock_mono_sec() - s;
        printf("# round %d: unet %.2f s, controlnet + unet %.2f s\n", r + 1, plain[r], with[r]);
    }
    qsort(plain, (size_t)rounds, sizeof(double), cmp_d);
    qsort(with, (size_t)rounds, sizeof(double), cmp_d);
    double mp = plain[rounds / 2], mw = with[rounds / 2];
    double wu = (double)patcher_model_bytes(ck.model[MODEL_UNET]);
    double wc = (double)patcher_model_bytes(patcher_model_of(cn->p));
    printf("controlnet_step_%d: unet batch 2 %.2f s, with one ControlNet %.2f s, ratio %.3f "
           "(median of %d interleaved rounds, %d threads); ControlNet weights %.0f%% of the "
           "UNet's; peak RSS %.0f MiB\n",
           size, mp, mw, mw / mp, rounds, threads, 100.0 * wc / wu, bench_sd_peak_rss_mib());
    tensor_free(x);
    tensor_free(ctx);
    tensor_free(hint);
    tensor_free(eps);
    mm_node_end(mm, &rep);
    mm_unload(mm, ck.model[MODEL_UNET]);
    mm_unload(mm, patcher_model_of(cn->p));
    mm_free(mm);
    patcher_unref(up);
    controlnet_unref(cn);
    model_ckpt_release(&ck);
    return 0;
}
