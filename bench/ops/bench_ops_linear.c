/*
 * bench_ops_linear — bench_ops --linear (issue 15): every Linear shape of an SD1.5 UNet
 * step at 512^2, batch 2 (rows = 2 x tokens), as the UNet runs it (f32 activations, an
 * f16 weight, bias where the UNet has one, the fused GEGLU for the feed-forward's first
 * half), beside the same op on an f32 weight and beside bare sgemms of the same M, N, K.
 *
 * Per shape, the variants are timed in turn within each repetition (interleaved, so a
 * load change hits them all), and the fractions are medians of per-repetition ratios:
 *   op16   tensor_linear / tensor_linear_geglu, f16 weight (the UNet's case)
 *   ref16  the same with cpu_linear_fast = 0 (op_linalg.c's reference path)
 *   op32   the same op, f32 weight (no per-call widening)
 *   nt     cpu_sgemm(x, w^T), w already f32, beta 0: the reference rate
 *   nn     cpu_sgemm(x, wt), w stored transposed [k, n]
 * "calls" is how many times one UNet step runs the shape, so calls x ms is its share.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "bench_stats.h"
#include "clock.h"
#include "device.h"
#include "tensor.h"
#include "tensor_impl.h"

extern int cpu_linear_fast; /* tensor/cpu/linear.h: 0 runs the reference path */

void bench_ops_linear(struct dev *d, int reps, const char *only);

enum { V_OP16, V_REF16, V_OP32, V_NT, V_NN, V_N };
static const char *vname[V_N] = {"op16", "ref16", "op32", "nt", "nn"};

struct lin_shape {
    const char *name;
    int64_t rows, k, n; /* n: the weight's rows (2h for GEGLU) */
    int geglu, bias, calls;
};

/* SD1.5 at 512^2, batch 2: 16 transformers (levels 64^2 x2+x3, 32^2 x2+x3, 16^2 x2+x3,
 * middle 8^2), each: q k v (self) and q (cross) without bias; the two attention outputs,
 * proj_in and proj_out with bias; k v from the 154 text rows; GEGLU; FF out. Plus 24 Linears
 * on 2 rows (22 ResBlocks' time embeddings, time_embed's 2; as 1280 -> 1280): 216 calls. */
static const struct lin_shape shapes[] = {
    {"qkv_8192x320x320", 8192, 320, 320, 0, 0, 4 * 5},
    {"out_8192x320x320_b", 8192, 320, 320, 0, 1, 4 * 5},
    {"geglu_8192x320x2560", 8192, 320, 2560, 1, 1, 5},
    {"ffout_8192x1280x320", 8192, 1280, 320, 0, 1, 5},
    {"kv_154x768x320", 154, 768, 320, 0, 0, 2 * 5},
    {"qkv_2048x640x640", 2048, 640, 640, 0, 0, 4 * 5},
    {"out_2048x640x640_b", 2048, 640, 640, 0, 1, 4 * 5},
    {"geglu_2048x640x5120", 2048, 640, 5120, 1, 1, 5},
    {"ffout_2048x2560x640", 2048, 2560, 640, 0, 1, 5},
    {"kv_154x768x640", 154, 768, 640, 0, 0, 2 * 5},
    {"qkv_512x1280x1280", 512, 1280, 1280, 0, 0, 4 * 5},
    {"out_512x1280x1280_b", 512, 1280, 1280, 0, 1, 4 * 5},
    {"geglu_512x1280x10240", 512, 1280, 10240, 1, 1, 5},
    {"ffout_512x5120x1280", 512, 5120, 1280, 0, 1, 5},
    {"kv_154x768x1280", 154, 768, 1280, 0, 0, 2 * 6},
    {"qkv_128x1280x1280", 128, 1280, 1280, 0, 0, 4},
    {"out_128x1280x1280_b", 128, 1280, 1280, 0, 1, 4},
    {"geglu_128x1280x10240", 128, 1280, 10240, 1, 1, 1},
    {"ffout_128x5120x1280", 128, 5120, 1280, 0, 1, 1},
    {"temb_2x1280x1280", 2, 1280, 1280, 0, 1, 24},
};


static void fill(float *p, int64_t n, uint64_t s)
{
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((double)(s >> 40) / 16777216.0 - 0.5);
    }
}

static struct tensor *mk(struct dev *d, enum tensor_dtype dt, int nd, const int64_t *sh)
{
    struct tensor *t;
    if (tensor_new(d, dt, nd, sh, &t, NULL) < 0)
        PANIC("alloc");
    return t;
}

struct lin_case {
    const struct lin_shape *s;
    struct tensor *x, *w16, *w32, *b, *o;
    float *wt, *c; /* w transposed [k, n]; the sgemm's output [rows, n] */
};

static void run(struct lin_case *c, int v)
{
    const struct lin_shape *s = c->s;
    struct err e = {0};
    int rc = 0;
    const float *x = tensor_data(c->x), *w = tensor_data(c->w32);
    switch (v) {
    case V_OP16:
    case V_REF16:
    case V_OP32: {
        const struct tensor *w_ = v == V_OP32 ? c->w32 : c->w16;
        cpu_linear_fast = v != V_REF16;
        rc = s->geglu ? tensor_linear_geglu(c->o, c->x, w_, c->b, &e)
                      : tensor_linear(c->o, c->x, w_, c->b, &e);
        cpu_linear_fast = 1;
        break;
    }
    case V_NT:
        cpu_sgemm(0, 1, s->rows, s->n, s->k, 1.0f, x, s->k, w, s->k, 0.0f, c->c, s->n, 0);
        break;
    case V_NN:
        cpu_sgemm(0, 0, s->rows, s->n, s->k, 1.0f, x, s->k, c->wt, s->n, 0.0f, c->c, s->n, 0);
        break;
    }
    if (rc < 0)
        PANIC("linear %s: %s", s->name, e.msg);
}

/* Largest |op16 - op32| over the output, relative to max |op32|: the f16 weight widens
 * exactly and both take the same GEMMs, so this is 0. */
static double agree(struct lin_case *c)
{
    int64_t n = tensor_numel(c->o);
    float *ref = xmalloc((size_t)n * sizeof(float));
    run(c, V_OP32);
    memcpy(ref, tensor_data(c->o), (size_t)n * sizeof(float));
    run(c, V_OP16);
    const float *o = tensor_data(c->o);
    double dmax = 0, rmax = 0;
    for (int64_t i = 0; i < n; i++) {
        double dd = fabs((double)o[i] - (double)ref[i]);
        dmax = dd > dmax ? dd : dmax;
        rmax = fabs((double)ref[i]) > rmax ? fabs((double)ref[i]) : rmax;
    }
    xfree(ref);
    return rmax > 0 ? dmax / rmax : dmax;
}

void bench_ops_linear(struct dev *d, int reps, const char *only)
{
    double tot[V_N] = {0}, ctot[V_N] = {0};
    printf("# linear: SD1.5 UNet shapes at 512^2 batch 2, %d threads, %d reps interleaved.\n"
           "# GF/s: best wall time of each variant. Fractions: the median over reps of nt's\n"
           "# CPU time / the variant's (GFLOP per CPU-second relative to cpu_sgemm x.w^T at\n"
           "# the same M,N,K: the figure that survives a loaded machine). diff: max |op16 -\n"
           "# op32| / max |op32|.\n", tensor__pool_threads(), reps);
    printf("%-22s %5s %6s %6s %6s %6s %6s | %5s %5s %5s %5s | %8s %8s %6s\n", "shape", "calls",
           "op16", "ref16", "op32", "nt", "nn", "op16", "ref16", "op32", "nn", "op16 ms",
           "ref16 ms", "diff");
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        const struct lin_shape *s = &shapes[i];
        if (only && !strstr(s->name, only))
            continue;
        struct lin_case c = {0};
        c.s = s;
        int64_t on = s->geglu ? s->n / 2 : s->n;
        c.x = mk(d, TENSOR_F32, 2, (int64_t[]){s->rows, s->k});
        c.w32 = mk(d, TENSOR_F32, 2, (int64_t[]){s->n, s->k});
        c.w16 = mk(d, TENSOR_F16, 2, (int64_t[]){s->n, s->k});
        c.o = mk(d, TENSOR_F32, 2, (int64_t[]){s->rows, on});
        fill(tensor_data(c.x), s->rows * s->k, 1 + i);
        float *w = tensor_data(c.w32);
        fill(w, s->n * s->k, 100 + i);
        for (int64_t q = 0; q < s->n * s->k; q++)
            w[q] *= 0.1f;
        /* the f32 weight holds the f16 values, so op16 and op32 compute the same thing */
        tensor_convert_host(tensor_data(c.w16), TENSOR_F16, w, TENSOR_F32,
                            (size_t)(s->n * s->k));
        tensor_convert_host(w, TENSOR_F32, tensor_data(c.w16), TENSOR_F16,
                            (size_t)(s->n * s->k));
        if (s->bias) {
            c.b = mk(d, TENSOR_F32, 1, (int64_t[]){s->n});
            fill(tensor_data(c.b), s->n, 200 + i);
        }
        c.wt = xmalloc_aligned(64, (size_t)(s->n * s->k) * sizeof(float));
        c.c = xmalloc_aligned(64, (size_t)(s->rows * s->n) * sizeof(float));
        for (int64_t r = 0; r < s->n; r++)
            for (int64_t q = 0; q < s->k; q++)
                c.wt[q * s->n + r] = w[r * s->k + q];
        double flops = 2.0 * (double)s->rows * (double)s->n * (double)s->k;
        double t[V_N][16], ct[V_N][16], ratio[V_N][16];
        for (int v = 0; v < V_N; v++)
            run(&c, v); /* warm-up: page faults, JIT, scratch growth */
        int inner = flops < 2e9 ? (int)(2e9 / flops) : 1; /* >= ~2 GFLOP per timing */
        if (inner > 200)
            inner = 200;
        for (int r = 0; r < reps; r++) {
            for (int v = 0; v < V_N; v++) {
                double t0 = clock_mono_sec(), c0 = clock_process_cpu_sec();
                for (int q = 0; q < inner; q++)
                    run(&c, v);
                t[v][r] = (clock_mono_sec() - t0) / inner;
                ct[v][r] = (clock_process_cpu_sec() - c0) / inner;
            }
            for (int v = 0; v < V_N; v++)
                ratio[v][r] = ct[V_NT][r] / ct[v][r];
        }
        double gf[V_N], fr[V_N], ms[V_N], cms[V_N];
        for (int v = 0; v < V_N; v++) {
            double best = t[v][0];
            for (int r = 1; r < reps; r++)
                best = t[v][r] < best ? t[v][r] : best;
            gf[v] = flops / best / 1e9;
            ms[v] = bench_median(t[v], reps) * 1e3;
            cms[v] = bench_median(ct[v], reps) * 1e3;
            fr[v] = bench_median(ratio[v], reps);
            tot[v] += ms[v] * s->calls;
            ctot[v] += cms[v] * s->calls;
        }
        printf("%-22s %5d %6.1f %6.1f %6.1f %6.1f %6.1f | %5.2f %5.2f %5.2f %5.2f | %8.3f %8.3f "
               "%6.0e\n",
               s->name, s->calls, gf[V_OP16], gf[V_REF16], gf[V_OP32], gf[V_NT], gf[V_NN],
               fr[V_OP16], fr[V_REF16], fr[V_OP32], fr[V_NN], ms[V_OP16], ms[V_REF16], agree(&c));
        fflush(stdout);
        xfree_aligned(c.wt);
        xfree_aligned(c.c);
        tensor_free(c.x);
        tensor_free(c.w32);
        tensor_free(c.w16);
        tensor_free(c.b);
        tensor_free(c.o);
    }
    printf("# one UNet step's Linears (calls x median): wall ms");
    for (int v = 0; v < V_N; v++)
        printf(" %s %.1f", vname[v], tot[v]);
    printf("; CPU ms");
    for (int v = 0; v < V_N; v++)
        printf(" %s %.1f", vname[v], ctot[v]);
    printf("\n# op16/ref16 time: wall %.3f, CPU %.3f; nt/op16 CPU %.3f\n", tot[V_OP16] / tot[V_REF16],
           ctot[V_OP16] / ctot[V_REF16], ctot[V_NT] / ctot[V_OP16]);
}
