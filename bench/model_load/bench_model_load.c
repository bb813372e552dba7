/*
 * bench_model_load — what loading a full-size SD1.5 checkpoint costs: wall time, peak
 * RSS, and RSS after the load split into anonymous (converted copies) and file pages
 * (the mapping kept for borrowed weights), plus the price of one st_check (the fstat
 * patcher_acquire pays per layer to notice a model file changed on disk).
 *
 * Usage: bench_model_load [--ckpt PATH] [--as f32|f32-convert|f16]
 *   --ckpt  the full-size random f16 checkpoint (generated on first use into
 *           $LATENTD_BENCH_DIR or the current directory, ~2 GiB)
 *   --as    f32: the CPU policy, f32 compute with the f16 weights kept at their file
 *           dtype (borrowed from the mapping, widened inside the ops; issue 15);
 *           f32-convert: every weight converted to f32 at load and the file closed
 *           (the policy before, MODEL_LOAD_CONVERT); f16: f16 compute (borrowed too)
 * Prints also the models' host-copy bytes (patcher_model_host_bytes) and how many of
 * them are owned (converted) rather than borrowed from the file.
 * One load per process, so that peak RSS is this load's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "ckpt_gen.h"
#include "safetensors.h"
#include "checkpoint.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A "Key:   123 kB" line of /proc/self/status, in MiB. */
static double status_mib(const char *key)
{
    FILE *fp = fopen("/proc/self/status", "r");
    char line[256];
    double v = -1;
    size_t n = strlen(key);
    while (fp && fgets(line, sizeof(line), fp))
        if (!strncmp(line, key, n) && line[n] == ':')
            v = strtod(line + n + 1, NULL) / 1024.0;
    if (fp)
        fclose(fp);
    return v;
}

int main(int argc, char **argv)
{
    const char *ckpt = NULL, *as = "f32";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ckpt") && i + 1 < argc)
            ckpt = argv[++i];
        else if (!strcmp(argv[i], "--as") && i + 1 < argc)
            as = argv[++i];
    }
    char path[512];
    struct err e = {0};
    if (!(ckpt = ckpt_gen_bench_full(ckpt, path, sizeof(path), &e))) {
        fprintf(stderr, "bench_model_load: %s\n", e.msg);
        return 1;
    }
    enum tensor_dtype d = strcmp(as, "f16") ? TENSOR_F32 : TENSOR_F16;
    const enum tensor_dtype dt[3] = {d, d, d};
    unsigned flags = MODEL_LOAD_ALL | (strcmp(as, "f32-convert") ? 0u : MODEL_LOAD_CONVERT);
    struct model_ckpt ck;
    double t0 = now_s();
    if (model_ckpt_load(ckpt, flags, dt, &ck, &e) < 0) {
        fprintf(stderr, "bench_model_load: %s\n", e.msg);
        return 1;
    }
    double t = now_s() - t0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("load '%s' as %s: %.2f s, peak RSS %.0f MiB, after: RSS %.0f MiB (anon %.0f, file "
           "%.0f)\n",
           ckpt, as, t, ru.ru_maxrss / 1024.0, status_mib("VmRSS"), status_mib("RssAnon"),
           status_mib("RssFile"));
    size_t host = 0, owned = 0;
    for (int c = 0; c < MODEL_COMPONENT_COUNT; c++) {
        size_t o = 0;
        if (ck.model[c]) {
            host += patcher_model_host_bytes(ck.model[c], &o);
            owned += o;
        }
    }
    printf("host copies: %.0f MiB, of which owned (converted) %.0f MiB\n", host / 1048576.0,
           owned / 1048576.0);
    struct st_file *f = NULL;
    if (st_open(ckpt, &f, &e) == 0) {
        int n = 100000;
        t0 = now_s();
        for (int i = 0; i < n; i++)
            st_check(f, &e);
        printf("st_check: %.2f us each\n", (now_s() - t0) / n * 1e6);
        st_close(f);
    }
    model_ckpt_release(&ck);
    return 0;
}
