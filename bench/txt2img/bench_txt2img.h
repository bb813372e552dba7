/*
 * bench_txt2img.h — what the files of bench/txt2img share (private to this benchmark):
 *   - the one workflow every run of it does (prompts, seed, steps, sampler, CFG), so that
 *     the in-process table, latentd's cold children and stable-diffusion.cpp's runs in
 *     the cold table are all given the same image to make;
 *   - the entry points of the modes that live in their own file (--ab: ab_bf16.c; the
 *     cold table: cold_table.c);
 *   - small measuring helpers (median, /proc readings).
 * Everything here runs on the benchmark's main thread.
 */
#ifndef LATENTD_BENCH_TXT2IMG_H
#define LATENTD_BENCH_TXT2IMG_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_stats.h" /* bench_median */

/* ComfyUI's default workflow, at 4 steps so that a 512^2 sd.cpp run stays ~5 minutes. */
#define BENCH_T2I_POSITIVE                                                                         \
    "beautiful scenery nature glass bottle landscape, , purple galaxy bottle,"
#define BENCH_T2I_NEGATIVE "text, watermark"
#define BENCH_T2I_SEED 156680208700286LL
#define BENCH_T2I_STEPS 4
#define BENCH_T2I_CFG 8.0
#define BENCH_T2I_SAMPLER "euler"
#define BENCH_T2I_SCHEDULER "normal" /* sd.cpp calls it "discrete" */

/* --ab (ab_bf16.c): in-process fp32 / bf16 A/B of a UNet step and a VAE decode. */
int bench_txt2img_ab(const char *ckpt, int threads, int only, int reps);
extern const char *bench_ab_only; /* "unet", "vae" or NULL for both */
extern int bench_ab_prec;         /* 0 fp32, 1 bf16, -1 both */

/* The cold table (cold_table.c). */
struct bench_t2i_cold_opts {
    const char *self;       /* this binary, exec'd with --cold-child */
    const char *models_dir; /* holds checkpoints/model.safetensors (the checkpoint) */
    const char *sdcpp;      /* stable-diffusion.cpp's CLI (sd / sd-cli), or NULL */
    int threads;
    int quick; /* 256^2 only */
    int only;  /* 256 or 512: that size only; 0: both */
    int reps;  /* interleaved repetitions per size (>= 1); medians are printed */
    int page_cache_as_is; /* 0: the checkpoint is evicted and read back once first */
};

/*
 * Runs latentd fp32, latentd bf16 and (when o->sdcpp) stable-diffusion.cpp on the
 * workflow above, each in a fresh process from exec to the PNG, interleaved per
 * repetition, and prints each run and the medians with their ratios. Exits the process
 * with a message when a child fails (a bad --sdcpp is user input, not a broken invariant).
 */
void bench_t2i_cold_table(const struct bench_t2i_cold_opts *o);

/* A "Key:" line of /proc/self/status in kB (VmRSS, VmHWM), as MiB; -1 when unreadable. */
static inline double bench_t2i_status_mib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = -1;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl))
            kib = atof(line + kl);
    if (f)
        fclose(f);
    return kib < 0 ? -1 : kib / 1024.0;
}

/* The 1-minute load average (0 when unreadable): printed next to every figure. */
static inline double bench_t2i_load1(void)
{
    double la = 0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &la) != 1)
            la = 0;
        fclose(f);
    }
    return la;
}

#endif
