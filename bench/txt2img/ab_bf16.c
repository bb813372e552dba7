/*
 * ab_bf16 — bench_txt2img --ab: fp32 against bf16 (what --bf16-unet --bf16-vae set) on
 * the two costs a txt2img pays per image, in one process, interleaved: a UNet eval at
 * batch 2 (one CFG step) and a VAE decode, at 256^2 and 512^2.
 *
 * Why in one process and interleaved: the machine is shared (load changes by the
 * minute), so each repetition runs both precisions back to back, alternating which goes
 * first, and the ratio of medians is the figure. Time is CPU seconds of the whole
 * process (CLOCK_PROCESS_CPUTIME_ID: every pool thread), which a loaded machine changes
 * far less than the wall; the wall is printed beside it. The precision is switched on
 * the loaded model (patcher_model_set_precision), so both runs use the very same
 * weights, borrowed f16 from the checkpoint mapping. Repetition 0 is a warm-up (bf16
 * primitives JIT-compiled, pages touched) and is not counted.
 *
 * GFLOP/s: each case's direct-form FLOPs over its median wall, and that as a fraction of
 * the peak of the unit each precision runs on, measured here (bench_peaks.h).
 *
 * RSS: printed after each case (VmRSS now and the process's peak); the per-precision
 * peak of a whole run is the cold table's (bench_txt2img.c), one process each.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "bench_peaks.h"
#include "bench_sd.h"
#include "clock.h"
#include "checkpoint.h"
#include "memmgr.h"
#include "patcher.h"
#include "tensor.h"
#include "tensor_precision.h"
#include "unet.h"
#include "vae.h"

#include "bench_txt2img.h"

/* Profiling aids (bench_txt2img --ab-only unet|vae, --ab-prec fp32|bf16): run one case
 * and one precision only, e.g. under perf record. */
const char *bench_ab_only;
int bench_ab_prec = -1;

/* One case: the model's eval, run by `run`, `reps` times per precision after a warm-up. */
struct ab_case {
    const char *name;
    struct patcher_model *model;
    int (*run)(void *ctx);
    void *ctx;
    double flops; /* direct-form FLOPs of one run */
};

/* The peaks the GFLOP/s are fractions of (bench_peaks.h): fp32 FMA for fp32, and for
 * bf16 the unit its GEMMs run on (AMX, AVX-512 BF16, else fp32 FMA: emulated); the best
 * seen in this run, re-measured after every case. */
static double pk32, pk16;
static enum bench_peak k16;

static void peaks_update(int threads)
{
    double w = bench_peak_measure(BENCH_PEAK_FMA, threads, 3, NULL);
    pk32 = w > pk32 ? w : pk32;
    w = bench_peak_measure(k16, threads, 3, NULL);
    pk16 = w > pk16 ? w : pk16;
}

static void ab_run(const struct ab_case *c, int reps)
{
    double cpu[2][64], wall[2][64], la0 = bench_t2i_load1();
    if (reps > 64)
        reps = 64;
    for (int r = 0; r <= reps; r++)
        for (int q = 0; q < 2; q++) {
            int prec = (r + q) % 2; /* alternate which precision goes first */
            if (bench_ab_prec >= 0 && prec != bench_ab_prec) {
                cpu[prec][r > 0 ? r - 1 : 0] = wall[prec][r > 0 ? r - 1 : 0] = NAN;
                continue;
            }
            patcher_model_set_precision(c->model,
                                        prec ? TENSOR_PRECISION_BF16 : TENSOR_PRECISION_F32);
            double c0 = clock_process_cpu_sec(), w0 = clock_mono_sec();
            if (c->run(c->ctx) < 0)
                PANIC("%s failed", c->name);
            if (r > 0) {
                cpu[prec][r - 1] = clock_process_cpu_sec() - c0;
                wall[prec][r - 1] = clock_mono_sec() - w0;
            }
        }
    patcher_model_set_precision(c->model, TENSOR_PRECISION_F32);
    double c32 = bench_median(cpu[0], reps), c16 = bench_median(cpu[1], reps);
    double w32 = bench_median(wall[0], reps), w16 = bench_median(wall[1], reps);
    peaks_update(tensor_threads_get());
    double g32 = c->flops / w32 / 1e9, g16 = c->flops / w16 / 1e9;
    printf("%-14s %8.2f %8.2f %7.3f %8.2f %8.2f %7.3f %7.0f %7.0f %6.0f  %4.1f-%4.1f %7.0f %5.2f "
           "%7.0f %5.2f\n",
           c->name, c32, c16, c16 / c32, w32, w16, w16 / w32, bench_t2i_status_mib("VmRSS:"),
           bench_t2i_status_mib("VmHWM:"), (double)tensor_bf16_cache_bytes() / 1048576.0, la0,
           bench_t2i_load1(), g32, g32 / pk32, g16, g16 / pk16);
    fflush(stdout);
}

struct unet_ctx {
    struct patcher *p;
    const struct unet_arch *a;
    struct tensor *x, *ctx, *eps;
};

static int unet_run(void *v)
{
    struct unet_ctx *u = v;
    float t[2] = {500, 500};
    struct err e = {0};
    int rc = unet_eval(u->p, u->a, u->x, t, u->ctx, NULL, u->eps, NULL, &e);
    if (rc < 0)
        fprintf(stderr, "unet: %s\n", e.msg);
    return rc;
}

struct vae_ctx {
    struct patcher *p;
    const struct vae_arch *a;
    struct tensor *z, *img;
};

static int vae_run(void *v)
{
    struct vae_ctx *c = v;
    struct err e = {0};
    int rc = vae_decode(c->p, c->a, c->z, c->img, NULL, &e);
    if (rc < 0)
        fprintf(stderr, "vae: %s\n", e.msg);
    return rc;
}

static void load(struct mm *mm, struct patcher *p, size_t act)
{
    struct err e = {0};
    struct mm_request req = {.n_models = 1, .models = {p}, .activation_bytes = act};
    struct mm_report rep;
    if (mm_load_models(mm, &req, &rep, &e) < 0)
        PANIC("load: %s", e.msg);
}

int bench_txt2img_ab(const char *ckpt, int threads, int only, int reps)
{
    struct err e = {0};
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    struct model_ckpt ck;
    tensor_threads_set(threads);
    if (model_ckpt_load(ckpt, MODEL_LOAD_UNET | MODEL_LOAD_VAE, f32, &ck, &e) < 0)
        PANIC("%s", e.msg);
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    if (mm_new(&mc, &mm, &e) < 0)
        PANIC("%s", e.msg);
    printf("# A/B fp32 vs bf16 (%s), %d threads, %d reps after a warm-up, medians; cpu = "
           "process CPU seconds; LATENTD_BF16_CACHE_MB=%s\n",
           tensor_bf16_path(), threads, reps,
           getenv("LATENTD_BF16_CACHE_MB") ? getenv("LATENTD_BF16_CACHE_MB") : "(default)");
    const char *path = tensor_bf16_path();
    k16 = strstr(path, "AMX") && bench_peak_available(BENCH_PEAK_AMX)             ? BENCH_PEAK_AMX
          : strstr(path, "AVX-512 BF16") && bench_peak_available(BENCH_PEAK_BF16) ? BENCH_PEAK_BF16
                                                                                  : BENCH_PEAK_FMA;
    peaks_update(threads);
    printf("# peaks measured here, %d threads: fp32 %s %.0f GFLOP/s, bf16 path's %s %.0f\n",
           threads, bench_peak_name(BENCH_PEAK_FMA), pk32, bench_peak_name(k16), pk16);
    printf("%-14s %8s %8s %7s %8s %8s %7s %7s %7s %6s  %-9s %7s %5s %7s %5s\n", "case", "fp32_cpu",
           "bf16_cpu", "cpu_r", "fp32_s", "bf16_s", "wall_r", "rss", "peak", "cache", "load",
           "gf32", "pk32", "gf16", "pk16");
    static const int sizes[2] = {256, 512};
    for (int si = 0; si < 2; si++) {
        int px = sizes[si], lat = px / 8;
        char name[32];
        if (only && only != px)
            continue;
        if (!bench_ab_only || !strcmp(bench_ab_only, "unet")) {
            const struct unet_arch *a = &ck.cfg.unet;
            struct patcher *p = patcher_new(ck.model[MODEL_UNET]);
            size_t io = (size_t)2 * (2 * 4 * lat * lat + (size_t)77 * a->ctx_dim) * 4;
            load(mm, p, unet_plan_bytes(a, 2, lat, lat, 77) + io);
            struct dev *d = patcher_device(p);
            int64_t xs[4] = {2, 4, lat, lat}, cs[3] = {2, 77, a->ctx_dim};
            struct unet_ctx u = {p, a, bench_sd_filled(d, 4, xs, 0.37),
                                 bench_sd_filled(d, 3, cs, 0.011), NULL};
            if (tensor_new(d, TENSOR_F32, 4, xs, &u.eps, &e) < 0)
                PANIC("%s", e.msg);
            snprintf(name, sizeof name, "unet_b2_%d", px);
            ab_run(&(struct ab_case){name, ck.model[MODEL_UNET], unet_run, &u,
                                     unet_flops(a, 2, lat, lat, 77)},
                   reps);
            tensor_free(u.x);
            tensor_free(u.ctx);
            tensor_free(u.eps);
            mm_unload(mm, ck.model[MODEL_UNET]);
            patcher_unref(p);
        }
        if (!bench_ab_only || !strcmp(bench_ab_only, "vae")) {
            const struct vae_arch *a = &ck.cfg.vae;
            struct patcher *p = patcher_new(ck.model[MODEL_VAE]);
            load(mm, p, vae_plan_bytes(a, 1, lat, lat));
            struct dev *d = patcher_device(p);
            int64_t zs[4] = {1, 4, lat, lat}, is[4] = {1, 3, px, px};
            struct vae_ctx v = {p, a, bench_sd_filled(d, 4, zs, 0.23), NULL};
            if (tensor_new(d, TENSOR_F32, 4, is, &v.img, &e) < 0)
                PANIC("%s", e.msg);
            snprintf(name, sizeof name, "vae_dec_%d", px);
            ab_run(&(struct ab_case){name, ck.model[MODEL_VAE], vae_run, &v,
                                     vae_decode_flops(a, 1, lat, lat)},
                   reps);
            tensor_free(v.z);
            tensor_free(v.img);
            mm_unload(mm, ck.model[MODEL_VAE]);
            patcher_unref(p);
        }
    }
    printf("# cpu_r, wall_r: bf16 / fp32 (below 1: bf16 faster); rss/peak MiB after the case; "
           "cache: bf16 weight copies kept, MiB; load: 1-min load average before-after;\n"
           "# gf32, gf16: direct-form GFLOP / median wall (Winograd does fewer real flops);\n"
           "# pk32, pk16: those over the peaks above (best of the run, re-measured per case)\n");
    mm_unload_all(mm);
    mm_free(mm);
    model_ckpt_release(&ck);
    return 0;
}
