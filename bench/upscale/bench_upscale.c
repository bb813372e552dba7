/*
 * bench_upscale — ImageUpscaleWithModel's work at full size: a 4x ESRGAN (RRDBNet
 * nf=64, nb=23, gc=32, random weights from gen_upscale's generator, f32) on a 512^2
 * image through ups_forward_tiled with ComfyUI's tile 512 / overlap 32 (one tile), on
 * the cpu device with 2 threads. Prints the seconds, the model's GFLOP/s (convs only,
 * ups_flops) and that rate as a fraction of the fp32 peak measured in the same run: the
 * best of OpenBLAS's and our sgemm at 2048^3, timed before and after the upscale (the
 * machine is shared; only the ratio means anything). The same per CPU-second of the
 * process follows: when the machine has more runnable threads than cores, the wall-clock
 * rates measure the queue as much as the code.
 *
 * Where the time goes (2 threads, this shared 2-core machine, December 2026): 82 GFLOP per
 * CPU-second against sgemm's 189. The 3x3 convs of the model run at ~120 GFLOP/CPU-s with
 * 96, 160 or 192 input channels but ~48 with 64 or 128 (conv1 and conv3 of every dense
 * block, and the nf -> nf convs: ~28 % of the FLOPs); the rate follows the im2col chunk
 * (cpu_conv_cols_bytes, 8 MiB: 1792 / 3584 output columns per GEMM at 256 wide), and a
 * 2 MiB chunk gives 94-123 for all five shapes. A tuning for tensor/cpu/conv.c, not here.
 *
 * Usage: bench_upscale [--size N] [--threads N] [--model PATH]. The model file is
 * generated when missing ($LATENTD_BENCH_DIR or ".", esrgan_x4_full_random.safetensors).
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "memmgr.h"
#include "tensor.h"
#include "tensor_impl.h"
#include "upscale.h"
#include "upscale_gen.h"

static double clock_s(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double now(void)
{
    return clock_s(CLOCK_MONOTONIC);
}

/* CPU seconds of the whole process (all threads): on a machine shared by more runnable
 * threads than cores, wall time measures the queue; GFLOP per CPU-second does not. */
static double cpu_now(void)
{
    return clock_s(CLOCK_PROCESS_CPUTIME_ID);
}

static double peak_cpu; /* best sgemm GFLOP per CPU-second */

/* Best GFLOP/s of three 2048^3 sgemms each of OpenBLAS and ours. */
static double sgemm_peak(void)
{
    const int n = 2048;
    float *a = xmalloc_aligned(64, (size_t)n * n * 4), *b = xmalloc_aligned(64, (size_t)n * n * 4);
    float *c = xmalloc_aligned(64, (size_t)n * n * 4);
    for (int i = 0; i < n * n; i++) {
        a[i] = (float)((i * 7) % 13) * 0.1f - 0.6f;
        b[i] = (float)((i * 5) % 11) * 0.1f - 0.5f;
    }
    double best = 0;
    for (int r = 0; r < 4; r++)
        for (int ours = 0; ours < 2; ours++) {
            double t0 = now(), c0 = cpu_now();
            if (ours)
                cpu_sgemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n, 0);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n,
                            0.0f, c, n);
            double gf = 2.0 * n * n * n / (now() - t0) / 1e9;
            double gc = 2.0 * n * n * n / (cpu_now() - c0) / 1e9;
            if (r > 0 && gf > best) /* the first round warms up */
                best = gf;
            if (r > 0 && gc > peak_cpu)
                peak_cpu = gc;
        }
    xfree_aligned(a);
    xfree_aligned(b);
    xfree_aligned(c);
    return best;
}

int main(int argc, char **argv)
{
    int size = 512, threads = 2;
    const char *model = NULL;
    char buf[1024];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc)
            size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else {
            fprintf(stderr, "usage: bench_upscale [--size N] [--threads N] [--model PATH]\n");
            return 2;
        }
    }
    tensor_threads_set(threads);
    struct err e = {0};
    if (!model) {
        const char *d = getenv("LATENTD_BENCH_DIR");
        snprintf(buf, sizeof(buf), "%s/esrgan_x4_full_random.safetensors", d && *d ? d : ".");
        model = buf;
    }
    if (access(model, R_OK) != 0) {
        struct upscale_gen_opts o;
        upscale_gen_opts_tiny(&o, UPS_ESRGAN, 4);
        o.arch.nf = 64, o.arch.nb = 23, o.arch.gc = 32;
        o.arch.naming = UPS_NAMING_OLD; /* as the ESRGAN 4x files people download */
        printf("generating %s\n", model);
        if (upscale_gen_write(&o, model, &e) < 0) {
            fprintf(stderr, "bench_upscale: %s\n", e.msg);
            return 1;
        }
    }
    double peak0 = sgemm_peak();

    struct mm_config mc;
    struct mm *mm;
    mm_config_init(&mc);
    mc.device_spec = "cpu";
    struct ups_arch a;
    struct patcher_model *m;
    if (mm_new(&mc, &mm, &e) < 0 || ups_load(model, &a, &m, &e) < 0) {
        fprintf(stderr, "bench_upscale: %s\n", e.msg);
        return 1;
    }
    struct patcher *p = patcher_new(m);
    patcher_model_unref(m);
    struct mm_request req = {.n_models = 1, .activation_bytes = ups_plan_bytes(&a, size, size)};
    req.models[0] = p;
    struct mm_report rep;
    struct tensor *x = NULL;
    int64_t xs[4] = {1, 3, size, size};
    size_t nin = (size_t)3 * size * size, nout = nin * (size_t)a.scale * a.scale;
    float *in = xmalloc(nin * sizeof(float)), *out = xmalloc(nout * sizeof(float));
    for (size_t i = 0; i < nin; i++)
        in[i] = (float)((i * 7919u) % 1000u) / 999.0f;
    if (mm_load_models(mm, &req, &rep, &e) < 0 ||
        tensor_new(patcher_device(p), TENSOR_F32, 4, xs, &x, &e) < 0 ||
        tensor_write_f32(x, in, (int64_t)nin, &e) < 0) {
        fprintf(stderr, "bench_upscale: %s\n", e.msg);
        return 1;
    }
    char desc[128];
    printf("model %s, input %dx%d, %d threads, plan %.0f MiB activations\n",
           ups_arch_str(&a, desc, sizeof(desc)), size, size, threads,
           (double)req.activation_bytes / (1 << 20));
    fflush(stdout);
    double t0 = now(), c0 = cpu_now();
    int rc = ups_forward_tiled(p, &a, x, out, 512, 32, NULL, NULL, &e);
    double secs = now() - t0, cpu = cpu_now() - c0;
    if (rc < 0) {
        fprintf(stderr, "bench_upscale: %s\n", e.msg);
        return 1;
    }
    mm_node_end(mm, &rep);
    double sum = 0;
    for (size_t i = 0; i < nout; i++)
        sum += out[i] < 0 ? -out[i] : out[i];
    double peak1 = sgemm_peak(), peak = peak0 > peak1 ? peak0 : peak1;
    double gf = ups_flops(&a, size, size) / secs / 1e9;
    printf("upscale %dx%d -> %dx%d: %.2f s, %.1f GFLOP (convs), %.1f GFLOP/s\n", size, size,
           size * a.scale, size * a.scale, secs, ups_flops(&a, size, size) / 1e9, gf);
    printf("fp32 peak (best sgemm 2048^3, before %.1f / after %.1f): %.1f GFLOP/s\n", peak0, peak1,
           peak);
    printf("ratio upscale / peak: %.3f   (device peak %.0f MiB, output checksum %.6e)\n",
           gf / peak, (double)rep.peak_bytes / (1 << 20), sum);
    double gc = ups_flops(&a, size, size) / cpu / 1e9;
    printf("per CPU-second (%.1f CPU-s for the upscale): %.1f GFLOP/s vs sgemm %.1f: ratio %.3f\n",
           cpu, gc, peak_cpu, gc / peak_cpu);
    tensor_free(x);
    patcher_unref(p);
    mm_free(mm);
    xfree(in);
    xfree(out);
    tensor_shutdown();
    return 0;
}
