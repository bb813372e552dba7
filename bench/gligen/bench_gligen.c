/*
 * bench_gligen — what GLIGEN adds to a UNet step (issue 16): the full-size random SD1.5
 * UNet, batch 2 (a CFG step) at 256^2 (--size), with and without a full-size GLIGEN
 * model (768-wide object tokens, a fuser per transformer: its position net on 4 boxes,
 * then every fuser as the middle patch), rounds interleaved, medians. Prints both times,
 * their ratio, the GLIGEN weights as a share of the UNet's, and GLIGEN's FLOPs as a share
 * of unet_flops (each fuser is a transformer block's self-attention and feed-forward, its
 * keys over T + 30 tokens): the ratio the step time should show on an idle machine.
 *
 * usage: bench_gligen [--ckpt PATH] [--gligen PATH] [--size N] [--rounds N] [--threads N]
 * The checkpoint is bench/sd15's (ckpt_gen_bench_full); the GLIGEN model is generated
 * next to it on first use (gligen_full_random_f16.safetensors, ~0.4 GB).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_sd.h"
#include "clock.h"
#include "checkpoint.h"
#include "ckpt_gen.h"
#include "family.h"
#include "gligen.h"
#include "memmgr.h"
#include "unet.h"

static void fail(const struct err *e)
{
    fprintf(stderr, "bench_gligen: %s\n", e->msg);
    exit(1);
}

static struct tensor *filled(struct dev *d, int ndim, const int64_t *shape, float v)
{
    struct tensor *t = NULL;
    struct err e = {0};
    if (tensor_new(d, TENSOR_F32, ndim, shape, &t, &e) < 0 || tensor_fill(t, v, &e) < 0)
        fail(&e);
    return t;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct fuse {
    struct gligen *g;
    struct tensor *objs;
};

static int middle(void *user, int st, struct tensor *x, struct err *e)
{
    struct fuse *f = user;
    return gligen_fuse(f->g, st, f->objs, x, e);
}

/* Multiply-adds x2 of GLIGEN's work in one UNet eval of b samples over an h x w latent:
 * the position net, and each fuser at its transformer's token count (its level's size). */
static double gligen_flops(const struct gligen *g, const struct unet_arch *a, int b, int h, int w)
{
    double N = GLIGEN_MAX_OBJS, K = g->a.key_dim, H = GLIGEN_HIDDEN;
    double f = N * ((g->a.in_dim + GLIGEN_POS_DIM) * H + H * H + H * K);
    struct unet_blocks bl;
    unet_blocks_build(a, &bl);
    int k = 0;
    for (int i = 0; i < bl.n && k < g->a.n_modules; i++) {
        if (bl.v[i].op != UNET_OP_ST)
            continue;
        double C = g->a.m[k++].query_dim, T = 1.0;
        int hh = h, ww = w;
        for (int l = 0; l < bl.v[i].level; l++) {
            hh = (hh + 1) / 2;
            ww = (ww + 1) / 2;
        }
        T = (double)hh * ww;
        /* objs linear, q, k and v over T + N, the attention, to_out, GEGLU and net.2 */
        f += N * K * C + T * C * C + 2 * (T + N) * C * C + 2 * T * (T + N) * C + T * C * C +
             T * C * 8 * C + T * 4 * C * C;
    }
    return 2.0 * b * f;
}

/* The GLIGEN model next to the checkpoint, generated when missing. */
static const char *gligen_file(char *buf, size_t n, struct err *e)
{
    const char *dir = getenv("LATENTD_BENCH_DIR");
    snprintf(buf, n, "%s/gligen_full_random_f16.safetensors", dir ? dir : ".");
    if (access(buf, R_OK) == 0)
        return buf;
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    sd15_config_canonical(&o.cfg);
    o.dtype = ST_DTYPE_F16;
    o.gligen = 1;
    printf("# generating %s\n", buf);
    return ckpt_gen_write(&o, buf, e) < 0 ? NULL : buf;
}

int main(int argc, char **argv)
{
    const char *ckpt = NULL, *gp = NULL;
    int size = 256, rounds = 3, threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ckpt") && i + 1 < argc)
            ckpt = argv[++i];
        else if (!strcmp(argv[i], "--gligen") && i + 1 < argc)
            gp = argv[++i];
        else if (!strcmp(argv[i], "--size") && i + 1 < argc)
            size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_gligen [--ckpt PATH] [--gligen PATH] [--size N] "
                            "[--rounds N] [--threads N]\n");
            return 2;
        }
    }
    if (rounds < 1 || rounds > 64 || size < 64 || size % 8)
        return fprintf(stderr, "bench_gligen: bad --rounds or --size\n"), 2;
    char path[1024], gbuf[1100];
    struct err e = {0};
    if (!(ckpt = ckpt_gen_bench_full(ckpt, path, sizeof(path), &e)) ||
        (!gp && !(gp = gligen_file(gbuf, sizeof gbuf, &e))))
        fail(&e);
    tensor_threads_set(threads);
    struct model_ckpt ck;
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct fuse f = {0};
    if (model_ckpt_load(ckpt, MODEL_LOAD_UNET, f32, &ck, &e) < 0 ||
        gligen_load(gp, TENSOR_F32, &f.g, &e) < 0 || gligen_fits(f.g, &ck.cfg.unet, 0, &e) < 0)
        fail(&e);
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    if (mm_new(&mc, &mm, &e) < 0)
        fail(&e);
    const struct unet_arch *a = &ck.cfg.unet;
    int lat = size / 8;
    struct patcher *up = patcher_new(ck.model[MODEL_UNET]);
    struct mm_request req = {.n_models = 2, .models = {up, f.g->p}};
    req.activation_bytes = unet_plan_bytes(a, 2, lat, lat, 77) +
                           gligen_plan_bytes(f.g, 2, lat * lat, a->model_ch) + (64u << 20);
    struct mm_report rep;
    if (mm_load_models(mm, &req, &rep, &e) < 0)
        fail(&e);
    struct dev *d = patcher_device(up);
    int64_t xs[4] = {2, 4, lat, lat}, cs[3] = {2, 77, a->ctx_dim};
    int64_t os[3] = {2, GLIGEN_MAX_OBJS, f.g->a.key_dim};
    struct tensor *x = filled(d, 4, xs, 0.37f), *ctx = filled(d, 3, cs, 0.011f), *eps = NULL;
    if (tensor_new(d, TENSOR_F32, 4, xs, &eps, &e) < 0 || tensor_new(d, TENSOR_F32, 3, os, &f.objs, &e) < 0)
        fail(&e);
    float *pooled = calloc((size_t)f.g->a.in_dim, sizeof(float));
    struct gligen_box boxes[4];
    for (int i = 0; i < 4; i++)
        boxes[i] = (struct gligen_box){.pooled = pooled, .h = lat / 2, .w = lat / 4,
                                       .y = (i % 2) * lat / 2, .x = i * lat / 4};
    struct unet_patches patches = {.middle = middle, .user = &f};
    float t[2] = {500, 500};
    double plain[64], with[64];
    for (int r = 0; r < rounds; r++) {
        double s = clock_mono_sec();
        if (unet_eval(up, a, x, t, ctx, NULL, eps, NULL, &e) < 0)
            fail(&e);
        plain[r] = clock_mono_sec() - s;
        s = clock_mono_sec();
        if (gligen_objs(f.g, boxes, 4, lat, lat, f.objs, &e) < 0 ||
            unet_eval_patched(up, a, x, t, ctx, NULL, NULL, &patches, eps, &e) < 0)
            fail(&e);
        with[r] = clock_mono_sec() - s;
        printf("# round %d: unet %.2f s, gligen + unet %.2f s\n", r + 1, plain[r], with[r]);
    }
    qsort(plain, (size_t)rounds, sizeof(double), cmp_d);
    qsort(with, (size_t)rounds, sizeof(double), cmp_d);
    double mp = plain[rounds / 2], mw = with[rounds / 2];
    double wu = (double)patcher_model_bytes(ck.model[MODEL_UNET]);
    double wg = (double)patcher_model_bytes(patcher_model_of(f.g->p));
    double fu = unet_flops(a, 2, lat, lat, 77), fg = gligen_flops(f.g, a, 2, lat, lat);
    printf("gligen_step_%d: unet batch 2 %.2f s, with GLIGEN (4 boxes) %.2f s, ratio %.3f "
           "(median of %d interleaved rounds, %d threads); GLIGEN weights %.0f%% of the "
           "UNet's, its FLOPs %.0f%% (%.1f of %.1f GFLOP: ratio %.3f expected); peak RSS %.0f "
           "MiB\n",
           size, mp, mw, mw / mp, rounds, threads, 100.0 * wg / wu, 100.0 * fg / fu, fg * 1e-9,
           fu * 1e-9, 1.0 + fg / fu, bench_sd_peak_rss_mib());
    free(pooled);
    tensor_free(x);
    tensor_free(ctx);
    tensor_free(eps);
    tensor_free(f.objs);
    mm_node_end(mm, &rep);
    mm_unload(mm, ck.model[MODEL_UNET]);
    mm_unload(mm, patcher_model_of(f.g->p));
    mm_free(mm);
    patcher_unref(up);
    gligen_unref(f.g);
    model_ckpt_release(&ck);
    return 0;
}
