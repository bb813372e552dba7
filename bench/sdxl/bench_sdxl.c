/*
 * bench_sdxl — SDXL base throughput on the CPU with the full-size random-weight checkpoint
 * (generated on first use into $LATENTD_BENCH_DIR: tools/ckpt_gen.c, fp16, ~6.5 GiB;
 * f32 compute, f16 weights kept at their file dtype). bench/sd15's twin: the same cases
 * (bench/common/bench_sd.c), each with its GFLOP/s as a fraction of an sgemm measured in
 * the same run, and the peak RSS.
 *
 * usage: bench_sdxl [--ckpt PATH] [--threads N] [--no-stream] [--rounds N]
 *   cases: CLIP-L and bigG encode (1 chunk each), UNet batch 2 (CFG) at 512^2 (latent
 *   64^2, 77 tokens, the ADM vector), then the streaming ratio: one such eval on the sim
 *   device at a 25 % budget (UNet weight bytes + activation plan) over full residency
 *   (bench/streaming's bench_streaming_unet), the median over --rounds interleaved
 *   rounds (default 1: each round reloads the UNet on both budgets, ~1.5 min apiece
 *   here; one round on a loaded, shared machine is noisy).
 *   LATENTD_BENCH_1024=1 adds the UNet at 1024^2 and LATENTD_BENCH_VAE1024=1 the VAE
 *   decode at 1024^2 (each minutes on 2 threads).
 * Goal (issue 13): UNet >= 0.5 of the sgemm; streaming ratio <= 1.05.
 * Measured 2026-12-02, 2 threads, AMD EPYC, quiet machine (load < 1), --rounds 1 with both
 * 1024 cases: CLIP-L 0.08 s (0.49 of a 335 GFLOP/s sgemm), bigG 0.55 s (0.52), UNet b2 512^2
 * 12.63 s (0.79), UNet b2 1024^2 45.80 s (0.92), VAE decode 1024^2 54.26 s (0.62); peak RSS
 * 6628 MiB before the streaming part (the f16 file is 6617 MiB), 15502 MiB after it (the sim
 * device's f32 copy of the UNet and the stream pack are host memory). Streaming at 25 %:
 * 1.035 (7743 MiB streamed per eval, ring 3 x 132 MiB, prefetch 2). On a loaded machine
 * (load 14-23) the same ratio read 1.2-1.5: the copy thread needs a core of its own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench_sd.h"
#include "clock.h"
#include "bench_streaming_sd15.h"
#include "ckpt_gen.h"
#include "family.h"

static int env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

int main(int argc, char **argv)
{
    const char *ckpt = NULL;
    int threads = 2, stream = 1, rounds = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ckpt") && i + 1 < argc)
            ckpt = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-stream"))
            stream = 0;
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_sdxl [--ckpt PATH] [--threads N] [--no-stream] "
                            "[--rounds N]\n");
            return 2;
        }
    }
    char path[1024];
    struct err e = {0};
    if (!(ckpt = ckpt_gen_bench_full_family(MODEL_FAMILY_SDXL, ckpt, path, sizeof(path), &e))) {
        fprintf(stderr, "bench_sdxl: %s\n", e.msg);
        return 1;
    }
    tensor_threads_set(threads);
    struct model_ckpt ck;
    static const enum tensor_dtype f32[3] = {TENSOR_F32, TENSOR_F32, TENSOR_F32};
    double t0 = clock_mono_sec();
    if (model_ckpt_load(ckpt, MODEL_LOAD_ALL, f32, &ck, &e) < 0) {
        fprintf(stderr, "bench_sdxl: %s\n", e.msg);
        return 1;
    }
    if (ck.cfg.family != MODEL_FAMILY_SDXL) {
        fprintf(stderr, "bench_sdxl: '%s' is a %s checkpoint, not SDXL base\n", ckpt,
                model_family_get(ck.cfg.family)->name);
        model_ckpt_release(&ck);
        return 1;
    }
    printf("# loaded '%s' as f32 compute in %.1f s (%s), %d threads, peak RSS %.0f MiB\n", ckpt,
           clock_mono_sec() - t0, ck.canonical ? "SDXL base" : "not canonical", threads,
           bench_sd_peak_rss_mib());
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    if (mm_new(&mc, &mm, &e) < 0) {
        fprintf(stderr, "bench_sdxl: %s\n", e.msg);
        model_ckpt_release(&ck);
        return 1;
    }
    /* As the SDXL family encodes (sdxl.md §4): penultimate layer, no final norm; bigG pads
     * with zeros. */
    bench_sd_text(mm, &ck, MODEL_CLIP, &(struct text_encode_opts){.layer = -2}, "clip_l_encode_77");
    bench_sd_text(mm, &ck, MODEL_CLIP2, &(struct text_encode_opts){.layer = -2, .pad_zero = 1},
                  "clip_g_encode_77");
    bench_sd_unet(mm, &ck, 64, 1, "unet_b2_512");
    if (env_on("LATENTD_BENCH_1024"))
        bench_sd_unet(mm, &ck, 128, 1, "unet_b2_1024");
    if (env_on("LATENTD_BENCH_VAE1024"))
        bench_sd_vae(mm, &ck, 128, 1, "vae_decode_1024");
    struct stat sb;
    double file_mib = stat(ckpt, &sb) == 0 ? (double)sb.st_size / 1048576.0 : -1;
    printf("# peak RSS %.0f MiB (checkpoint file, f16: %.0f MiB)\n", bench_sd_peak_rss_mib(),
           file_mib);
    model_ckpt_release(&ck);
    mm_free(mm);

    int rc = 0;
    if (stream) {
        static const int pct[2] = {100, 25};
        double ratio[2] = {0, 0};
        rc = bench_streaming_unet(ckpt, 512, rounds, pct, 2, ratio);
        if (rc == 0)
            printf("streaming_ratio_25pct_512        %.3f (goal <= 1.05)\n", ratio[1]);
        printf("# peak RSS %.0f MiB after streaming\n", bench_sd_peak_rss_mib());
    }
    return rc;
}
