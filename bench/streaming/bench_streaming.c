/*
 * bench_streaming — step time of the synthetic model (tests/unit/memory_synth.h,
 * ~110 MB of linear and conv layers) when the device budget is 100/50/25/5 % of the
 * model, as a ratio to full residency measured in the same run, plus bytes copied
 * per step and the planner's prediction.
 *
 *   bench_streaming [--device sim|cuda:N] [--batch N] [--steps N]
 *   bench_streaming --sd15 CKPT [--size 256] [--steps N]   (bench_streaming_sd15.c)
 *   bench_streaming --layers   (the UNets' streaming layers; bench_streaming_layers.c)
 *
 * All four budgets stay loaded (one model instance and one manager each) and every
 * timed step runs at each budget in turn, so machine noise hits all of them alike;
 * the ratio is the median over steps of t(budget) / t(100 %) of the same step.
 * Warm-up steps measure per-layer compute times that the planner then uses when
 * it re-plans (as on the server's second run of a model).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_streaming_sd15.h"
#include "bench_stats.h"
#include "clock.h"
#include "log.h"
#include "memory_synth.h"

#define NB 4
#define MAXS 64

int main(int argc, char **argv)
{
    const char *device = "sim", *sd15 = NULL;
    int batch = 128, steps = 7, size = 256, steps_set = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]), steps_set = 1;
        else if (!strcmp(argv[i], "--sd15") && i + 1 < argc)
            sd15 = argv[++i];
        else if (!strcmp(argv[i], "--size") && i + 1 < argc)
            size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--layers"))
            return bench_streaming_layers();
        else {
            fprintf(stderr, "usage: %s [--device sim|cuda:N] [--batch N] [--steps N]\n"
                            "       %s --sd15 CKPT [--size 256] [--steps N]\n"
                            "       %s --layers\n",
                    argv[0], argv[0], argv[0]);
            return 2;
        }
    }
    if (batch < 1 || steps < 1 || steps > MAXS)
        return 2;
    log_set_level(LOG_WARNING);
    /* The sim's copy threads stand in for a GPU's copy engine, which is separate
     * hardware: leave them a core (compute gets the others, at every budget alike). */
    if (sd15) { /* bench_streaming_unet leaves the core itself */
        int rc = bench_streaming_sd15(sd15, size, steps_set ? steps : 3);
        tensor_shutdown();
        return rc;
    }
    if (!strcmp(device, "sim") && tensor_threads_get() > 1)
        tensor_threads_set(tensor_threads_get() - 1);
    int pct[NB] = {100, 50, 25, 5};
    struct synth s[NB];
    struct patcher_model *m[NB];
    struct patcher *p[NB];
    struct mm *mm[NB];
    struct mm_report rep[NB];
    for (int k = 0; k < NB; k++) {
        /* One model instance per budget (same seed, same bytes): a model is loaded on
         * one manager at a time, and all four stay loaded so steps can interleave. */
        m[k] = synth_build(&s[k], "synth", 128, 112, 7, 42, NULL, NULL);
        p[k] = patcher_new(m[k]);
    }
    size_t total = patcher_model_bytes(m[0]);
    size_t n = (size_t)batch * (size_t)s[0].d;
    float *in = xmalloc(n * 4), *out[NB];
    synth_input(&s[0], in, batch, 7);
    struct err e = {0};
    for (int k = 0; k < NB; k++) {
        out[k] = xmalloc(n * 4);
        size_t budget = total * (size_t)pct[k] / 100 + synth_activation_bytes(&s[k], batch);
        char spec[64];
        struct mm_config c;
        mm_config_init(&c);
        if (!strcmp(device, "sim")) {
            snprintf(spec, sizeof(spec), "sim:%zu", budget);
            c.device_spec = spec;
        } else {
            c.device_spec = device;
            c.vram_budget = budget + ((size_t)400 << 20); /* the default CUDA reserve */
        }
        if (mm_new(&c, &mm[k], &e) < 0) {
            fprintf(stderr, "%s\n", e.msg);
            return 1;
        }
    }
    struct mm_request req = {.n_models = 1,
                             .activation_bytes = synth_activation_bytes(&s[0], batch)};
    /* Warm-up: one load and two steps per budget (measures per-layer compute times),
     * then a re-plan that uses them, as the server's second run of a model would. */
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < NB; k++) {
            req.models[0] = p[k];
            if (mm_load_models(mm[k], &req, &rep[k], &e) < 0) {
                fprintf(stderr, "load at %d%%: %s\n", pct[k], e.msg);
                return 1;
            }
            for (int i = 0; pass == 0 && i < 2; i++)
                if (synth_forward(&s[k], p[k], mm_device(mm[k]), in, out[k], batch, &e) < 0) {
                    fprintf(stderr, "forward at %d%%: %s\n", pct[k], e.msg);
                    return 1;
                }
            if (pass == 0)
                mm_node_end(mm[k], &rep[k]);
        }
    /* Timed: step i runs at every budget in turn, so noise hits all of them alike;
     * the ratio is the median over steps of t(budget) / t(100 %) of the same round. */
    double t[NB][MAXS], ratio[NB][MAXS];
    for (int i = 0; i < steps; i++)
        for (int k = 0; k < NB; k++) {
            double t0 = clock_mono_sec() * 1e3;
            if (synth_forward(&s[k], p[k], mm_device(mm[k]), in, out[k], batch, &e) < 0) {
                fprintf(stderr, "forward at %d%%: %s\n", pct[k], e.msg);
                return 1;
            }
            t[k][i] = clock_mono_sec() * 1e3 - t0;
        }
    int identical = 1;
    for (int k = 0; k < NB; k++) {
        mm_node_end(mm[k], &rep[k]);
        identical &= memcmp(out[0], out[k], n * 4) == 0;
        for (int i = 0; i < steps; i++)
            ratio[k][i] = t[k][i] / t[0][i];
    }
    printf("bench/streaming: synthetic model %.1f MiB, %d layers, batch %d, device %s, "
           "%d interleaved steps, %d compute threads\n", total / 1048576.0, s[0].layers,
           batch, dev_name(mm_device(mm[0])), steps, tensor_threads_get());
    double tmin[NB];
    for (int k = 0; k < NB; k++) {
        tmin[k] = t[k][0];
        for (int i = 1; i < steps; i++)
            tmin[k] = t[k][i] < tmin[k] ? t[k][i] : tmin[k];
    }
    printf("%-7s %8s %8s %9s %9s %9s %9s %12s %8s %9s %9s\n", "budget", "min ms", "ratio",
           "med ms", "med ratio", "res MiB", "str MiB", "copied/step", "ring", "pred ms",
           "peak MiB");
    for (int k = 0; k < NB; k++) {
        double mr = bench_median(ratio[k], steps), mt = bench_median(t[k], steps);
        const struct mm_model_plan *mp = &rep[k].models[0];
        printf("%5d %% %8.2f %8.3f %9.2f %9.3f %9.1f %9.1f %12.1f %5dx%-2d %9.2f %9.1f\n",
               pct[k], tmin[k], tmin[k] / tmin[0], mt, mr, rep[k].bytes_resident / 1048576.0, rep[k].bytes_streamed / 1048576.0,
               rep[k].bytes_copied / (double)steps / 1048576.0, mp->ring_slots, mp->prefetch,
               rep[k].predicted_ms, rep[k].peak_bytes / 1048576.0);
    }
    printf("outputs bit-identical across budgets: %s\n", identical ? "yes" : "NO");
    printf("ratio = min step / min step at 100 %% (noise only adds time); med ratio = median "
           "over steps of the paired ratio\n");
    printf("goal (sim): ratio <= 1.05 at 25 %%\n");
    for (int k = 0; k < NB; k++) {
        mm_free(mm[k]);
        patcher_unref(p[k]);
        patcher_model_unref(m[k]);
        xfree(out[k]);
    }
    xfree(in);
    tensor_shutdown();
    return identical ? 0 : 1;
}
