/*
 * bench_sd15 — SD1.5 model throughput on the CPU with the full-size random-weight
 * checkpoint (generated on first use: tools/ckpt_gen.c, fp16, ~2 GiB; loaded as f32
 * per sd15.md §8.5). One command; prints, for each case, the wall time, the achieved
 * GFLOP/s and its fraction of an sgemm (1024^3 through tensor_linear, 2 threads)
 * measured right before and after that case in the same run (the machine is shared).
 *
 * The cases are bench/common/bench_sd.c's, shared with bench/sdxl.
 *
 * usage: bench_sd15 [--ckpt PATH] [--quick] [--threads N] [--vae-only] [--reps N]
 *   cases: CLIP encode (1 chunk), UNet batch 2 (CFG) at 256^2 and 512^2 (latent 32^2 /
 *   64^2, 77 tokens), VAE decode at 256^2 and 512^2. --quick skips the 512^2 cases;
 *   --vae-only skips CLIP and the UNet (issue 15's VAE A/B), --reps N times each VAE case
 *   N times (the best is printed; default 2 at 256^2, 1 at 512^2).
 * Reference: stable-diffusion.cpp, same machine class, 2 threads (remeasured): ~5.2 s per
 * euler+CFG step and ~12.4 s VAE decode at 256^2; ~31 s and ~53 s at 512^2; goal <= 2/3
 * of those. The last lines print each measured time over its reference figure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_sd.h"
#include "clock.h"
#include "ckpt_gen.h"

int main(int argc, char **argv)
{
    const char *ckpt = NULL;
    int quick = 0, threads = 2, vae_only = 0, vae_reps = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ckpt") && i + 1 < argc)
            ckpt = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--vae-only"))
            vae_only = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            vae_reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_sd15 [--ckpt PATH] [--quick] [--threads N] "
                            "[--vae-only] [--reps N]\n");
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
    double t0 = clock_mono_sec();
    if (model_ckpt_load(ckpt, MODEL_LOAD_ALL, f32, &ck, &e) < 0) {
        fprintf(stderr, "bench_sd15: %s\n", e.msg);
        return 1;
    }
    printf("# loaded '%s' as f32 in %.1f s (%s), %d threads\n", ckpt, clock_mono_sec() - t0,
           ck.canonical ? "SD1.5" : "not canonical", threads);
    struct mm_config mc;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct mm *mm = NULL;
    if (mm_new(&mc, &mm, &e) < 0) {
        fprintf(stderr, "bench_sd15: %s\n", e.msg);
        return 1;
    }
    /* CLIP: one 77-token chunk. */
    if (!vae_only)
        bench_sd_text(mm, &ck, MODEL_CLIP, &(struct text_encode_opts){.layer = -1, .norm_hidden = 1},
                  "clip_encode_77");

    static const int sizes[2] = {256, 512};
    /* stable-diffusion.cpp on the same machine class, 2 threads (seconds). */
    static const double ref_unet_s[2] = {5.2, 31.0}, ref_vae_s[2] = {12.4, 53.0};
    double got_unet_s[2] = {0, 0}, got_vae_s[2] = {0, 0};
    for (int si = 0; si < (quick ? 1 : 2); si++) {
        int lat = sizes[si] / 8, reps = si == 0 ? 2 : 1;
        char name[64];
        snprintf(name, sizeof(name), "unet_b2_%d", sizes[si]);
        if (!vae_only && (got_unet_s[si] = bench_sd_unet(mm, &ck, lat, reps, name)) < 0)
            break;
        if (vae_reps > 0)
            reps = vae_reps;
        snprintf(name, sizeof(name), "vae_decode_%d", sizes[si]);
        if ((got_vae_s[si] = bench_sd_vae(mm, &ck, lat, reps, name)) < 0)
            break;
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
    printf("# peak RSS %.0f MiB\n", bench_sd_peak_rss_mib());
    model_ckpt_release(&ck);
    mm_free(mm);
    return 0;
}
