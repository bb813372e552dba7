/*
 * bench_txt2img — the default txt2img workflow through the SD1.5 nodes
 * (CheckpointLoaderSimple -> CLIPTextEncode x2 -> EmptyLatentImage ->
 * KSampler 4 steps euler cfg 8 -> VAEDecode) on the full-size random
 * checkpoint, at 256^2 and 512^2, on the CPU. One command; prints per-step
 * time, VAE decode time, total and peak RSS, the GFLOP/s of a step and of the
 * decode, and ratios measured in the same run (the machine is shared):
 *   - pipeline overhead: KSampler's time per step / two raw UNet evals (the
 *     CFG pair) timed right before it at the same size — what the node,
 *     sampler, CFG and previews add over the model;
 *   - sgemm: a 1024^3 GEMM through tensor_linear timed right before the size,
 *     so a slow figure can be told apart from a busy machine;
 *   - peak: step GFLOP/s / this CPU's fp32 FMA peak on --threads threads, measured
 *     right before the table (bench/common/bench_peaks.c); the goal is >= 0.5;
 *   - against stable-diffusion.cpp measured on this machine earlier, 2 threads
 *     (hard-coded; the cold table below measures sd.cpp in the same run instead):
 *     5.2 s per CFG step and 12.4 s decode at 256^2; 31 s and 53 s at 512^2.
 *     The goal for the step is <= 1/3 of sd.cpp's time (= 0.5 of peak).
 *
 * usage: bench_txt2img [--ckpt PATH] [--quick] [--size N] [--tiny] [--threads N]
 *                      [--no-cold | --cold-only] [--sdcpp PATH] [--reps N] [--ab ...]
 *   --quick  only 256^2;  --size N  only N^2 (256 or 512);
 *   --tiny  the tiny test checkpoint (a fast self-check);
 *   --device SPEC  memory/device.h spec (default cpu; cuda:0 on a GPU machine,
 *            where the CPU peak and sd.cpp ratios do not apply);
 *   --perf-ctl CTL,ACK  profile KSampler only: write "enable"/"disable" to perf's
 *            control FIFO around it, e.g.
 *              mkfifo c a; perf record -g -D -1 --control=fifo:c,a -- \
 *                bench_txt2img --size 256 --perf-ctl c,a
 *            (--perf-vae: around VAEDecode instead);
 * Cold runs (issue 15; cold_table.c): after the table, each size runs again in a fresh
 * child process (this binary with --cold-child), from exec to the PNG written, for fp32
 * and for bf16 (what latentd --bf16-unet --bf16-vae sets: mm_config.precision, read by
 * the loader node), and with --sdcpp PATH (or LATENTD_SDCPP=PATH) stable-diffusion.cpp's
 * CLI (sd / sd-cli of its default CPU build) on the same checkpoint, size, steps,
 * sampler, CFG, seed, prompts and threads, interleaved fp32, bf16, sd.cpp, fp32, ...
 * --reps N times per size (default 1); prints each child's wall, CPU seconds and peak
 * RSS (wait4), the medians, the bf16/fp32 ratios and latentd/sd.cpp's with issue 15's
 * goals (fp32 cold wall <= 0.2 of sd.cpp's at 256^2, <= 0.12 at 512^2; peak RSS <=
 * sd.cpp's). Before them the checkpoint is evicted from the page cache and read back
 * once, so that every run starts from one stated state (--page-cache as-is skips that;
 * cold_table.c says what it changed: nothing measurable end to end). --no-cold skips them;
 * --cold-only runs only them. sd.cpp takes ~55 s per
 * 256^2 and ~330 s per 512^2 run on 2 quiet threads: --cold-only --reps 3 is ~30 minutes
 * (far more on a loaded machine: 305 s for one 256^2 run at load 9).
 * --ab [--reps N (default 3)]: instead of all that, an in-process fp32 / bf16 A/B of one
 * UNet eval at batch 2 and one VAE decode per size, interleaved, medians of CPU seconds
 * (ab_bf16.c);
 * --ab-only unet|vae and --ab-prec fp32|bf16 narrow it to one case / precision (perf).
 * GEMM time per shape: LD_PRELOAD=<build>/libgemm_trace.so bench_txt2img ...
 * (bench/txt2img/gemm_trace.c; KSampler and VAE calls are labelled per size).
 * The full checkpoint is the one bench_sd15 uses (generated on first use in
 * $LATENTD_BENCH_DIR or the current directory, fp16, ~2 GiB).
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#include "alloc.h"
#include "bench_peaks.h"
#include "ckpt_gen.h"
#include "device.h"
#include "memmgr.h"
#include "node_registry.h"
#include "node_run.h"
#include "sampling.h"
#include "text_encoder.h"
#include "unet.h"
#include "vae.h"
#include "sd_backend.h"
#include "sd_nodes.h"
#include "sd_types.h"
#include "tensor.h"
#include "tensor_precision.h"
#include "node_imageio.h"

#include "bench_txt2img.h"
#include "clock.h"

static double peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

static struct node_env env;

/* Progress hook: wall and CPU timestamps of the sampler's steps. */
struct steps {
    double t[64], c[64];
    int n;
};

static int on_progress(void *user, double value, double max, const uint8_t *rgb, int w, int h)
{
    struct steps *s = user;
    (void)value;
    (void)max;
    (void)rgb;
    (void)w;
    (void)h;
    if (s->n < 64) {
        s->c[s->n] = clock_process_cpu_sec();
        s->t[s->n++] = clock_mono_sec();
    }
    return 0;
}

static int no_interrupt(void *user)
{
    (void)user;
    return 0;
}

/* Run a node; inputs by name (references taken over); outputs into out[]. */
static void run_node(const struct node_class *cls, const char *const *names, struct value **vals,
                     int n, struct value **out, struct steps *st)
{
    struct value *in[16] = {0}, *outs[4] = {0};
    for (int i = 0; i < n; i++)
        in[node_class_input_index(cls, names[i])] = vals[i];
    struct node_hooks hooks = {.user = st, .progress = on_progress, .interrupted = no_interrupt};
    struct node_ctx c;
    node_ctx_init(&c, cls, "1", &env, in, outs);
    c.hooks = &hooks;
    if (cls->run(&c) < 0)
        PANIC("%s: %s: %s", cls->name, c.exc_type, c.exc_message.ptr);
    node_ctx_release(&c);
    for (int i = 0; i < 16; i++)
        value_unref(in[i]);
    for (int i = 0; i < 4; i++)
        out[i] = outs[i];
}

static struct value *encode(struct value *clip, const char *text)
{
    const char *names[] = {"text", "clip"};
    struct value *v[] = {value_new_string(text), value_ref(clip)}, *o[4];
    run_node(&sd_clip_text_encode, names, v, 2, o, NULL);
    return o[0];
}

/* Two raw UNet evals (the CFG pair, batch 1 each) at latent h x w: seconds. */
static double raw_unet_pair(const struct sd_model *m, const struct sd_cond *c, int h, int w)
{
    size_t n = (size_t)4 * h * w;
    float *x = xmalloc(n * sizeof *x), *eps = xmalloc(n * sizeof *eps);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)sin(0.1 * (double)i);
    const struct sd_cond_entry *ce = &c->entries[0];
    struct err e = {0};
    float t = 999.0f;
    if (m->ops->prepare(m->impl, env.mm, 1, h, w, ce->tokens, &e) < 0)
        PANIC("prepare: %s", e.msg);
    double t0 = clock_mono_sec();
    for (int k = 0; k < 2; k++)
        if (m->ops->apply_eps(m->impl, x, 1, h, w, &t, ce->cond, ce->tokens, ce->dim, eps, &e) < 0)
            PANIC("unet: %s", e.msg);
    double dt = clock_mono_sec() - t0;
    m->ops->finish(m->impl, env.mm);
    xfree(x);
    xfree(eps);
    return dt;
}

/* GFLOP/s of a 1024^3 sgemm through tensor_linear on `d`: best of 3. */
static double sgemm_rate(struct dev *d)
{
    const int64_t n = 1024, s[2] = {n, n};
    struct tensor *t[3] = {NULL, NULL, NULL};
    struct err e = {0};
    float *v = xmalloc((size_t)(n * n) * sizeof *v);
    for (int64_t i = 0; i < n * n; i++)
        v[i] = (float)sin(0.01 * (double)i);
    for (int k = 0; k < 3; k++) {
        if (tensor_new(d, TENSOR_F32, 2, s, &t[k], &e) < 0)
            PANIC("sgemm: %s", e.msg);
        tensor_write_f32(t[k], v, n * n, &e);
    }
    xfree(v);
    double best = 0;
    for (int r = 0; r < 4; r++) {
        double t0 = clock_mono_sec();
        if (tensor_linear(t[2], t[0], t[1], NULL, &e) < 0)
            PANIC("sgemm: %s", e.msg);
        dev_stream_sync(dev_compute_stream(d)); /* asynchronous on a GPU */
        double dt = clock_mono_sec() - t0;
        if (r > 0) /* the first warms the thread pool and caches */
            best = fmax(best, 2.0 * (double)(n * n * n) / dt / 1e9);
    }
    for (int k = 0; k < 3; k++)
        tensor_free(t[k]);
    return best;
}

/* bench/txt2img/gemm_trace.c when LD_PRELOADed: files GEMM calls under a label. */
extern void gemm_trace_mark(const char *label) __attribute__((weak));

/* perf record --control=fifo:CTL,ACK: send `cmd` and wait for perf's "ack". */
static void perf_ctl(const char *spec, const char *cmd)
{
    if (!spec)
        return;
    char ctl[256], *ack;
    snprintf(ctl, sizeof ctl, "%s", spec);
    if (!(ack = strchr(ctl, ',')))
        PANIC("--perf-ctl wants CTL,ACK");
    *ack++ = 0;
    int fc = open(ctl, O_WRONLY), fa = open(ack, O_RDONLY);
    if (fc < 0 || fa < 0)
        PANIC("--perf-ctl: cannot open '%s' / '%s'", ctl, ack);
    char buf[16];
    if (write(fc, cmd, strlen(cmd)) < 0 || read(fa, buf, sizeof buf) <= 0)
        PANIC("--perf-ctl: perf did not answer");
    close(fc);
    close(fa);
}

/*
 * --cold-child PX PREC: the whole workflow once in this fresh process, from the
 * checkpoint load to the PNG on disk (out_png), at fp32 or bf16 for the UNet and VAE.
 */
static int cold_child(const char *models_dir, int px, int bf16, int threads, const char *out_png)
{
    tensor_threads_set(threads);
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    if (bf16) /* what srv_precision makes of --bf16-unet --bf16-vae */
        mc.precision[PATCHER_ROLE_UNET] = mc.precision[PATCHER_ROLE_VAE] = TENSOR_PRECISION_BF16;
    struct mm *mm = NULL;
    struct err e = {0};
    if (mm_new(&mc, &mm, &e) < 0)
        PANIC("mm_new: %s", e.msg);
    env.models_dir = models_dir;
    env.mm = mm;
    env.preview_size = 512;
    const char *cn[] = {"ckpt_name"};
    struct value *cv[] = {value_new_string("model.safetensors")}, *mcv[4];
    run_node(&sd_checkpoint_loader_simple, cn, cv, 1, mcv, NULL);
    struct value *pos = encode(mcv[1], BENCH_T2I_POSITIVE);
    struct value *neg = encode(mcv[1], BENCH_T2I_NEGATIVE);
    const char *en[] = {"width", "height", "batch_size"};
    struct value *ev[] = {value_new_int(px), value_new_int(px), value_new_int(1)}, *eo[4];
    run_node(&sd_empty_latent_image, en, ev, 3, eo, NULL);
    const char *kn[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                        "positive", "negative", "latent_image", "denoise"};
    struct value *kv[] = {value_ref(mcv[0]), value_new_int(BENCH_T2I_SEED),
                          value_new_int(BENCH_T2I_STEPS), value_new_float(BENCH_T2I_CFG),
                          value_new_string(BENCH_T2I_SAMPLER),
                          value_new_string(BENCH_T2I_SCHEDULER), value_ref(pos), value_ref(neg),
                          eo[0], value_new_float(1.0)};
    struct value *ko[4];
    struct steps st = {.n = 0}; /* the progress hook writes here */
    run_node(&sd_ksampler, kn, kv, 10, ko, &st);
    const char *dn[] = {"samples", "vae"};
    struct value *dv[] = {ko[0], value_ref(mcv[2])}, *dout[4];
    run_node(&sd_vae_decode, dn, dv, 2, dout, NULL);
    const struct value *img = dout[0]; /* [1, H, W, 3] in [0, 1] */
    size_t n = img->numel;
    uint8_t *u8 = xmalloc(n);
    for (size_t i = 0; i < n; i++) {
        float v = img->data[i] * 255.0f;
        u8[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
    if (node_png_write(out_png, u8, (int)img->shape[2], (int)img->shape[1], 3, 6, NULL, 0, &e) < 0)
        PANIC("png: %s", e.msg);
    printf("cold-child %d %s bf16_cache_mib %.0f\n", px, bf16 ? "bf16" : "fp32",
           (double)tensor_bf16_cache_bytes() / 1048576.0);
    xfree(u8);
    for (int i = 1; i < 4; i++)
        value_unref(ko[i]);
    value_unref(dout[0]);
    value_unref(pos);
    value_unref(neg);
    for (int i = 0; i < 3; i++)
        value_unref(mcv[i]);
    mm_unload_all(mm);
    mm_free(mm);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 7 && !strcmp(argv[1], "--cold-child"))
        return cold_child(argv[4], atoi(argv[2]), !strcmp(argv[3], "bf16"), atoi(argv[5]),
                          argv[6]);
    const char *ckpt = NULL, *perf = NULL, *device = "cpu";
    int quick = 0, tiny = 0, threads = 2, only = 0, perf_vae = 0, cold = 1, cold_only = 0;
    int page_as_is = 0;
    int ab = 0, reps = 0; /* 0: the mode's default (--ab 3, cold table 1) */
    const char *sdcpp = getenv("LATENTD_SDCPP");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ckpt") && i + 1 < argc)
            ckpt = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--tiny"))
            tiny = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = argv[++i];
        else if (!strcmp(argv[i], "--perf-ctl") && i + 1 < argc)
            perf = argv[++i];
        else if (!strcmp(argv[i], "--perf-vae"))
            perf_vae = 1;
        else if (!strcmp(argv[i], "--no-cold"))
            cold = 0;
        else if (!strcmp(argv[i], "--cold-only"))
            cold_only = 1;
        else if (!strcmp(argv[i], "--ab"))
            ab = 1;
        else if (!strcmp(argv[i], "--page-cache") && i + 1 < argc &&
                 (!strcmp(argv[i + 1], "read") || !strcmp(argv[i + 1], "as-is")))
            page_as_is = !strcmp(argv[++i], "as-is");
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sdcpp") && i + 1 < argc)
            sdcpp = argv[++i];
        else if (!strcmp(argv[i], "--ab-only") && i + 1 < argc)
            bench_ab_only = argv[++i];
        else if (!strcmp(argv[i], "--ab-prec") && i + 1 < argc)
            bench_ab_prec = !strcmp(argv[++i], "bf16");
        else if (!strcmp(argv[i], "--size") && i + 1 < argc &&
                 (!strcmp(argv[i + 1], "256") || !strcmp(argv[i + 1], "512")))
            only = atoi(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: bench_txt2img [--ckpt PATH] [--quick] [--size 256|512] [--tiny] "
                    "[--threads N] [--device SPEC] [--perf-ctl CTL,ACK [--perf-vae]] "
                    "[--no-cold | --cold-only] [--sdcpp PATH] [--reps N] "
                    "[--page-cache read|as-is] "
                    "[--ab [--ab-only unet|vae] [--ab-prec fp32|bf16]]\n");
            return 2;
        }
    }
    if (sdcpp && *sdcpp && access(sdcpp, X_OK) != 0) { /* before minutes of other runs */
        fprintf(stderr, "bench_txt2img: --sdcpp / LATENTD_SDCPP '%s': not an executable file\n",
                sdcpp);
        return 2;
    }
    if (ab) { /* ab_bf16.c: in-process fp32 / bf16 A/B of a UNet step and a VAE decode */
        char path_ab[512];
        struct err e_ab = {0};
        if (!(ckpt = ckpt_gen_bench_full(ckpt, path_ab, sizeof path_ab, &e_ab)))
            PANIC("%s", e_ab.msg);
        return bench_txt2img_ab(ckpt, threads, quick ? 256 : only, reps < 1 ? 3 : reps);
    }
    /* The node looks checkpoints up under <models>/checkpoints: link the file there. */
    char dir[] = "/tmp/bench_txt2img.XXXXXX", sub[320], link_path[400], path[512];
    char self[PATH_MAX];
    ssize_t self_n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (self_n <= 0)
        PANIC("readlink /proc/self/exe");
    self[self_n] = 0;
    if (sdcpp && !*sdcpp)
        sdcpp = NULL; /* LATENTD_SDCPP= (empty) means none */
    struct bench_t2i_cold_opts co = {.self = self,
                                     .models_dir = dir,
                                     .sdcpp = sdcpp,
                                     .threads = threads,
                                     .quick = quick,
                                     .only = only,
                                     .reps = reps < 1 ? 1 : reps,
                                     .page_cache_as_is = page_as_is};
    if (!mkdtemp(dir))
        PANIC("mkdtemp");
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    mkdir(sub, 0755);
    snprintf(link_path, sizeof link_path, "%s/model.safetensors", sub);
    struct err e = {0};
    if (tiny) {
        struct ckpt_gen_opts o;
        ckpt_gen_opts_default(&o);
        if (ckpt_gen_write(&o, link_path, &e) < 0)
            PANIC("%s", e.msg);
    } else {
        if (!(ckpt = ckpt_gen_bench_full(ckpt, path, sizeof path, &e)))
            PANIC("%s", e.msg);
        char abs_path[PATH_MAX];
        if (!realpath(ckpt, abs_path) || symlink(abs_path, link_path) != 0)
            PANIC("cannot link '%s'", ckpt);
    }
    if (cold_only) {
        bench_t2i_cold_table(&co);
        unlink(link_path);
        rmdir(sub);
        rmdir(dir);
        return 0;
    }
    tensor_threads_set(threads);
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = device;
    struct mm *mm = NULL;
    if (mm_new(&mc, &mm, &e) < 0)
        PANIC("mm_new: %s", e.msg);
    env.models_dir = dir;
    env.mm = mm;
    env.preview_size = 512;

    double t0 = clock_mono_sec();
    const char *cn[] = {"ckpt_name"};
    struct value *cv[] = {value_new_string("model.safetensors")}, *mcv[4];
    run_node(&sd_checkpoint_loader_simple, cn, cv, 1, mcv, NULL);
    printf("# CheckpointLoaderSimple %.1f s, %d threads, device %s%s\n", clock_mono_sec() - t0,
           threads, dev_name(mm_device(mm)), tiny ? ", tiny checkpoint" : "");
    t0 = clock_mono_sec();
    struct value *pos = encode(mcv[1], BENCH_T2I_POSITIVE);
    struct value *neg = encode(mcv[1], BENCH_T2I_NEGATIVE);
    printf("# CLIPTextEncode x2 %.2f s\n", clock_mono_sec() - t0);
    struct model_config cfg;
    struct patcher *unet = sd_model_unet_patcher(sd_model_of(mcv[0]), &cfg);
    if (!unet)
        PANIC("the checkpoint's MODEL is not an SD1.5 UNet");
    /* this machine's fp32 FMA peak on these threads, measured now (bench_peaks.h; it was
     * a hard-coded 439 GFLOP/s, 2 Sapphire Rapids cores, before the CPUs changed) */
    const double peak = bench_peak_measure(BENCH_PEAK_FMA, threads, 5, NULL);
    printf("%-5s %7s %6s %8s %6s %7s %6s %8s %7s %7s %8s %6s %7s %7s %7s %7s %7s\n", "size",
           "step_s", "cpu_s", "unet2_s", "ovh", "vae_s", "vcpu_s", "total_s", "step_gf", "vae_gf",
           "sgemm_gf", "peak", "st/sgm", "st/sdc", "vae/sdc", "rss_mib", "rss/sdc");
    static const int sizes[2] = {256, 512};
    static const double ref_step[2] = {5.2, 31.0}, ref_vae[2] = {12.4, 53.0};
    /* stable-diffusion.cpp's peak RSS on the same checkpoint, 2 threads (issue 15). */
    static const double ref_rss[2] = {2435, 3693};
    for (int si = 0; si < (quick ? 1 : 2); si++) {
        int px = sizes[si], lh = px / 8;
        if (only && px != only)
            continue;
        if (gemm_trace_mark)
            gemm_trace_mark("sgemm");
        double sg = sgemm_rate(mm_device(mm));
        if (gemm_trace_mark)
            gemm_trace_mark(px == 256 ? "raw256" : "raw512");
        double raw = raw_unet_pair(sd_model_of(mcv[0]), sd_cond_of(pos), lh, lh);
        double start = clock_mono_sec();
        const char *en[] = {"width", "height", "batch_size"};
        struct value *ev[] = {value_new_int(px), value_new_int(px), value_new_int(1)}, *eo[4];
        run_node(&sd_empty_latent_image, en, ev, 3, eo, NULL);
        const char *kn[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                            "positive", "negative", "latent_image", "denoise"};
        struct value *kv[] = {value_ref(mcv[0]), value_new_int(BENCH_T2I_SEED),
                              value_new_int(BENCH_T2I_STEPS), value_new_float(BENCH_T2I_CFG),
                              value_new_string(BENCH_T2I_SAMPLER),
                              value_new_string(BENCH_T2I_SCHEDULER), value_ref(pos), value_ref(neg),
                              eo[0], value_new_float(1.0)};
        struct value *ko[4];
        struct steps st = {.n = 0};
        double ks0 = clock_mono_sec();
        perf_ctl(perf_vae ? NULL : perf, "enable\n");
        if (gemm_trace_mark)
            gemm_trace_mark(px == 256 ? "ksamp256" : "ksamp512");
        run_node(&sd_ksampler, kn, kv, 10, ko, &st);
        if (gemm_trace_mark)
            gemm_trace_mark(px == 256 ? "vae256" : "vae512");
        perf_ctl(perf_vae ? NULL : perf, "disable\n");
        double ks = clock_mono_sec() - ks0;
        /* Steps 2..4 (the first also loads the model): mean gap between progress events. */
        double step = st.n >= 2 ? (st.t[st.n - 1] - st.t[0]) / (st.n - 1) : ks / 4;
        double step_cpu = st.n >= 2 ? (st.c[st.n - 1] - st.c[0]) / (st.n - 1) : 0;
        const char *dn[] = {"samples", "vae"};
        struct value *dv[] = {ko[0], value_ref(mcv[2])}, *dout[4];
        perf_ctl(perf_vae ? perf : NULL, "enable\n");
        double v0 = clock_mono_sec(), vc0 = clock_process_cpu_sec();
        run_node(&sd_vae_decode, dn, dv, 2, dout, NULL);
        double vae_cpu = clock_process_cpu_sec() - vc0;
        perf_ctl(perf_vae ? perf : NULL, "disable\n");
        double vae = clock_mono_sec() - v0, total = clock_mono_sec() - start;
        double sgf = unet_flops(&cfg.unet, 2, lh, lh, 77) / step / 1e9;
        double vgf = vae_decode_flops(&cfg.vae, 1, lh, lh) / vae / 1e9;
        double rss = peak_rss_mib();
        printf("%-5d %7.3f %6.2f %8.3f %6.2f %7.3f %6.2f %8.3f %7.1f %7.1f %8.1f %6.2f %7.2f %7.2f "
               "%7.2f %7.0f %7.2f\n",
               px, step, step_cpu, raw, step / raw, vae, vae_cpu, total, sgf, vgf, sg, sgf / peak,
               sgf / sg, step / ref_step[si], vae / ref_vae[si], rss, rss / ref_rss[si]);
        fflush(stdout);
        for (int i = 1; i < 4; i++)
            value_unref(ko[i]);
        value_unref(dout[0]);
    }
    printf("# step_s: CFG step (batch-2 UNet + sampler), mean of steps 2..4; cpu_s: process CPU\n"
           "# time per step (about threads x step_s when no other process took the cores;\n"
           "# vcpu_s likewise for the decode);\n"
           "# unet2_s: two raw batch-1 UNet evals; ovh = step_s / unet2_s; *_gf: GFLOP/s\n"
           "# (sd15_*_flops);\n"
           "# sgemm_gf: 1024^3 tensor_linear in this run; peak = step_gf / %.0f GFLOP/s (fp32\n"
           "# FMA peak measured here, %d threads), goal >= 0.5; st/sgm = step_gf / sgemm_gf; "
           "st/sdc, vae/sdc =\n"
           "# time / stable-diffusion.cpp's (5.2 s step, 12.4 s decode @256; 31 s, 53 s @512),\n"
           "# goal for the step <= 0.33; rss_mib: the process's peak RSS so far (run --size\n"
           "# for one size's own), rss/sdc = rss_mib / sd.cpp's (2435 MiB @256, 3693 @512),\n"
           "# goal <= 1. Shared machine: figures are noisy.%s\n",
           peak, threads, tiny ? " (tiny checkpoint: ratios not meaningful)" : "");
    value_unref(pos);
    value_unref(neg);
    for (int i = 0; i < 3; i++)
        value_unref(mcv[i]);
    mm_unload_all(mm);
    mm_free(mm);
    tensor_shutdown();
    if (cold && !strcmp(device, "cpu"))
        bench_t2i_cold_table(&co);
    unlink(link_path);
    rmdir(sub);
    rmdir(dir);
    return 0;
}
