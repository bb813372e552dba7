/*
 * bench_txt2img — the default txt2img workflow through the SD1.5 nodes
 * (CheckpointLoaderSimple -> CLIPTextEncode x2 -> EmptyLatentImage ->
 * KSampler 4 steps euler cfg 8 -> VAEDecode) on the full-size random
 * checkpoint, at 256^2 and 512^2, on the CPU. One command; prints per-step
 * time, VAE decode time, total and peak RSS, and two ratios measured in the
 * same run (the machine is shared):
 *   - pipeline overhead: KSampler's time per step / two raw UNet evals (the
 *     CFG pair) timed right before it at the same size — what the node,
 *     sampler, CFG and previews add over the model;
 *   - against stable-diffusion.cpp's figures (issue 6, 2 threads: 7.3 s per
 *     CFG step and 12 s decode at 256^2; 39 s and 66 s at 512^2; the goal is
 *     <= 2/3 of them).
 *
 * usage: bench_txt2img [--ckpt PATH] [--quick] [--tiny] [--threads N]
 *   --quick  only 256^2;  --tiny  the tiny test checkpoint (a fast self-check).
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
#include <unistd.h>

#include "alloc.h"
#include "ckpt_gen.h"
#include "memmgr.h"
#include "node_registry.h"
#include "node_run.h"
#include "sampling.h"
#include "sd15_models.h"
#include "sd_backend.h"
#include "sd_nodes.h"
#include "sd_types.h"
#include "tensor.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

static struct node_env env;

/* Progress hook: timestamps of the sampler's steps. */
struct steps {
    double t[64];
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
    if (s->n < 64)
        s->t[s->n++] = now_s();
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
    double t0 = now_s();
    for (int k = 0; k < 2; k++)
        if (m->ops->apply_eps(m->impl, x, 1, h, w, &t, ce->cond, ce->tokens, ce->dim, eps, &e) < 0)
            PANIC("unet: %s", e.msg);
    double dt = now_s() - t0;
    m->ops->finish(m->impl, env.mm);
    xfree(x);
    xfree(eps);
    return dt;
}

int main(int argc, char **argv)
{
    const char *ckpt = NULL;
    int quick = 0, tiny = 0, threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ckpt") && i + 1 < argc)
            ckpt = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--tiny"))
            tiny = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_txt2img [--ckpt PATH] [--quick] [--tiny] [--threads N]\n");
            return 2;
        }
    }
    /* The node looks checkpoints up under <models>/checkpoints: link the file there. */
    char dir[] = "/tmp/bench_txt2img.XXXXXX", sub[320], link_path[400], path[512];
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
        if (!ckpt) {
            const char *bd = getenv("LATENTD_BENCH_DIR");
            snprintf(path, sizeof path, "%s/sd15_full_random_f16.safetensors", bd ? bd : ".");
            ckpt = path;
        }
        struct stat sb;
        if (stat(ckpt, &sb) != 0) {
            printf("# generating the full-size random checkpoint '%s' (~2 GiB)\n", ckpt);
            fflush(stdout);
            struct ckpt_gen_opts o;
            ckpt_gen_opts_default(&o);
            sd15_config_canonical(&o.cfg);
            o.dtype = ST_DTYPE_F16;
            if (ckpt_gen_write(&o, ckpt, &e) < 0)
                PANIC("%s", e.msg);
        }
        char abs_path[PATH_MAX];
        if (!realpath(ckpt, abs_path) || symlink(abs_path, link_path) != 0)
            PANIC("cannot link '%s'", ckpt);
    }
    tensor_threads_set(threads);
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    mc.cpu = 1;
    struct mm *mm = NULL;
    if (mm_new(&mc, &mm, &e) < 0)
        PANIC("mm_new: %s", e.msg);
    env.models_dir = dir;
    env.mm = mm;
    env.preview_size = 512;

    double t0 = now_s();
    const char *cn[] = {"ckpt_name"};
    struct value *cv[] = {value_new_string("model.safetensors")}, *mcv[4];
    run_node(&sd_checkpoint_loader_simple, cn, cv, 1, mcv, NULL);
    printf("# CheckpointLoaderSimple %.1f s, %d threads%s\n", now_s() - t0, threads,
           tiny ? ", tiny checkpoint" : "");
    t0 = now_s();
    struct value *pos = encode(mcv[1], "beautiful scenery nature glass bottle landscape, , purple "
                                       "galaxy bottle,");
    struct value *neg = encode(mcv[1], "text, watermark");
    printf("# CLIPTextEncode x2 %.2f s\n", now_s() - t0);
    printf("%-6s %10s %10s %10s %10s %12s %12s %10s\n", "size", "step_s", "unet2_s", "overhead",
           "vae_s", "total_s", "vs_sdcpp", "rss_mib");
    static const int sizes[2] = {256, 512};
    static const double ref_step[2] = {7.3, 39.0}, ref_vae[2] = {12.0, 66.0};
    for (int si = 0; si < (quick ? 1 : 2); si++) {
        int px = sizes[si], lh = px / 8;
        double raw = raw_unet_pair(sd_model_of(mcv[0]), sd_cond_of(pos), lh, lh);
        double start = now_s();
        const char *en[] = {"width", "height", "batch_size"};
        struct value *ev[] = {value_new_int(px), value_new_int(px), value_new_int(1)}, *eo[4];
        run_node(&sd_empty_latent_image, en, ev, 3, eo, NULL);
        const char *kn[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                            "positive", "negative", "latent_image", "denoise"};
        struct value *kv[] = {value_ref(mcv[0]), value_new_int(156680208700286), value_new_int(4),
                              value_new_float(8.0), value_new_string("euler"),
                              value_new_string("normal"), value_ref(pos), value_ref(neg),
                              eo[0], value_new_float(1.0)};
        struct value *ko[4];
        struct steps st = {.n = 0};
        double ks0 = now_s();
        run_node(&sd_ksampler, kn, kv, 10, ko, &st);
        double ks = now_s() - ks0;
        /* Steps 2..4 (the first also loads the model): mean gap between progress events. */
        double step = st.n >= 2 ? (st.t[st.n - 1] - st.t[0]) / (st.n - 1) : ks / 4;
        const char *dn[] = {"samples", "vae"};
        struct value *dv[] = {ko[0], value_ref(mcv[2])}, *dout[4];
        double v0 = now_s();
        run_node(&sd_vae_decode, dn, dv, 2, dout, NULL);
        double vae = now_s() - v0, total = now_s() - start;
        double vs = (step / ref_step[si] + vae / ref_vae[si]) / 2;
        printf("%-6d %10.3f %10.3f %10.3f %10.3f %12.3f %12.3f %10.0f\n", px, step, raw,
               step / raw, vae, total, vs, peak_rss_mib());
        fflush(stdout);
        for (int i = 1; i < 4; i++)
            value_unref(ko[i]);
        value_unref(dout[0]);
    }
    printf("# overhead = KSampler step / two raw UNet evals in this run (1.0 = no overhead);\n"
           "# vs_sdcpp = mean of step/ref and vae/ref against stable-diffusion.cpp's 2-thread\n"
           "# figures (7.3 s step, 12 s decode @256; 39 s, 66 s @512); goal <= 0.67.%s\n",
           tiny ? " (tiny checkpoint: ratios not meaningful)" : "");
    value_unref(pos);
    value_unref(neg);
    for (int i = 0; i < 3; i++)
        value_unref(mcv[i]);
    mm_unload_all(mm);
    mm_free(mm);
    unlink(link_path);
    rmdir(sub);
    rmdir(dir);
    tensor_shutdown();
    return 0;
}
