/*
 * test_tensor_attn — the CPU attention's paths (tensor/cpu/attn_avx512.c, the fused
 * AVX-512 kernel; tensor/cpu/attn_avx2.c, its AVX2 + FMA port; attn.c's blocked-sgemm
 * reference) against a naive float64 attention written here, on SD's head dims (40,
 * 64, 80, 160), odd token counts (77 context keys, 4097 queries), the causal mask,
 * strided q/k/v views, dv different from d and not a multiple of 4 or 8, peaky scores
 * (the online softmax's rescaling and exp2's clamp), and small key blocks so ragged
 * blocks run. Bound: max |err| / max |ref| <= 1e-5 for each path against float64 and
 * each fused kernel against the reference path.
 * Each fused kernel the CPU has runs (cpu_attn_fused = 1 picks AVX-512F where present,
 * 2 forces the AVX2 one, whose call counter must move); a kernel the CPU lacks is
 * skipped with a message, and the reference path is still checked.
 */
#include <math.h>

#include "alloc.h"
#include "device.h"
#include "harness.h"
#include "tensor.h"
#include "tensor_impl.h"

#define TOL 1e-5

static struct dev *D;
static uint64_t rng = 0x2545f4914f6cdd1dull;

static float frand(void)
{
    return harness_frand(&rng);
}

/* [b, t, c] f32 of values in [-a, a]; also returned in *vals (xmalloc). */
static struct tensor *mk(int64_t b, int64_t t, int64_t c, float a, float **vals)
{
    struct tensor *x;
    if (tensor_new(D, TENSOR_F32, 3, (int64_t[]){b, t, c}, &x, NULL) < 0)
        PANIC("tensor_new failed");
    float *p = tensor_data(x);
    for (int64_t i = 0; i < b * t * c; i++)
        p[i] = frand() * a;
    *vals = xmalloc((size_t)(b * t * c) * sizeof(float));
    memcpy(*vals, p, (size_t)(b * t * c) * sizeof(float));
    return x;
}

/* Naive attention in double; q/k/v rows qrs/krs/vrs apart, out [B, tq, H*dv]. */
static void attn_ref(double *out, const float *q, const float *k, const float *v, int64_t B,
                     int64_t tq, int64_t tk, int H, int64_t d, int64_t dv, int64_t qrs,
                     int64_t krs, int64_t vrs, double scale, int causal)
{
    double *s = xmalloc((size_t)tk * sizeof(double));
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int64_t i = 0; i < tq; i++) {
                const float *qi = q + (b * tq + i) * qrs + h * d;
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < tk; j++) {
                    const float *kj = k + (b * tk + j) * krs + h * d;
                    double acc = 0;
                    for (int64_t c = 0; c < d; c++)
                        acc += (double)qi[c] * kj[c];
                    s[j] = causal && j > i ? -INFINITY : acc * scale;
                    m = fmax(m, s[j]);
                }
                for (int64_t j = 0; j < tk; j++)
                    sum += s[j] = exp(s[j] - m);
                double *o = out + (b * tq + i) * H * dv + h * dv;
                for (int64_t c = 0; c < dv; c++)
                    o[c] = 0;
                for (int64_t j = 0; j < tk; j++) {
                    const float *vj = v + (b * tk + j) * vrs + h * dv;
                    for (int64_t c = 0; c < dv; c++)
                        o[c] += s[j] * vj[c];
                }
                for (int64_t c = 0; c < dv; c++)
                    o[c] /= sum;
            }
    xfree(s);
}

static double rel_err(const float *got, const double *ref, int64_t n)
{
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        double dd = fabs((double)got[i] - ref[i]);
        if (!(dd <= md))
            md = isnan(dd) ? INFINITY : dd;
        mr = fmax(mr, fabs(ref[i]));
    }
    return mr > 0 ? md / mr : md;
}

/* A path of cpu_attention: the value of cpu_attn_fused that selects it. */
struct apath {
    const char *name;
    int mode;
};

static struct apath paths[2]; /* the fused kernels this CPU has */
static int npaths;

/* out computed on path `mode` (cpu_attn_fused); for the AVX2 path, also checks that the
 * kernel really ran (once per batch item). */
static float *run(int mode, struct tensor *o, const struct tensor *q, const struct tensor *k,
                  const struct tensor *v, int H, float scale, unsigned flags)
{
    struct err e = {0};
    int saved = cpu_attn_fused;
    long runs0 = cpu_attn_avx2_runs;
    /* NaN, so that an element a path fails to write cannot pass with the previous path's
     * value (rel_err counts NaN as an infinite error) */
    float *po = tensor_data(o);
    for (int64_t i = 0; i < tensor_numel(o); i++)
        po[i] = NAN;
    cpu_attn_fused = mode;
    int rc = tensor_attention(o, q, k, v, H, scale, flags, &e);
    cpu_attn_fused = saved;
    ok(rc == 0, "attention runs (mode %d): %s", mode, e.msg);
    if (mode == 2)
        ok(cpu_attn_avx2_runs - runs0 == q->shape[0], "the AVX2 kernel ran %ld times for %lld",
           cpu_attn_avx2_runs - runs0, (long long)q->shape[0]);
    float *r = xmalloc((size_t)tensor_numel(o) * sizeof(float));
    tensor_read_f32(o, r, tensor_numel(o), NULL);
    return r;
}

struct acase {
    const char *what;
    int64_t B, tq, tk, d, dv;
    int H;
    float a;     /* q and k in [-a, a] (v in [-1, 1]) */
    float scale; /* 0: 1/sqrt(d) */
    int causal, bk, ref64;
};

static void check_case(const struct acase *c)
{
    float *vq, *vk, *vv;
    struct tensor *q = mk(c->B, c->tq, c->H * c->d, c->a, &vq);
    struct tensor *k = mk(c->B, c->tk, c->H * c->d, c->a, &vk);
    struct tensor *v = mk(c->B, c->tk, c->H * c->dv, 1.0f, &vv);
    struct tensor *o;
    tensor_new(D, TENSOR_F32, 3, (int64_t[]){c->B, c->tq, c->H * c->dv}, &o, NULL);
    int saved_bk = cpu_fattn_bk;
    if (c->bk)
        cpu_fattn_bk = c->bk;
    unsigned fl = c->causal ? TENSOR_ATTN_CAUSAL : 0;
    float *rf = run(0, o, q, k, v, c->H, c->scale, fl);
    float *fu[2];
    for (int p = 0; p < npaths; p++)
        fu[p] = run(paths[p].mode, o, q, k, v, c->H, c->scale, fl);
    cpu_fattn_bk = saved_bk;
    int64_t n = tensor_numel(o);
    double scale = c->scale != 0.0f ? c->scale : 1.0 / sqrt((double)c->d);
    if (c->ref64) {
        double *ref = xmalloc((size_t)n * sizeof(double));
        attn_ref(ref, vq, vk, vv, c->B, c->tq, c->tk, c->H, c->d, c->dv, c->H * c->d,
                 c->H * c->d, c->H * c->dv, scale, c->causal);
        double er = rel_err(rf, ref, n);
        ok(er <= TOL, "%s: reference path vs float64 %.3g", c->what, er);
        for (int p = 0; p < npaths; p++) {
            double ef = rel_err(fu[p], ref, n);
            ok(ef <= TOL, "%s: %s vs float64 %.3g", c->what, paths[p].name, ef);
        }
        xfree(ref);
    }
    double *rd = xmalloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        rd[i] = rf[i];
    for (int p = 0; p < npaths; p++) {
        double eb = rel_err(fu[p], rd, n);
        ok(eb <= TOL, "%s: %s vs reference path %.3g", c->what, paths[p].name, eb);
        xfree(fu[p]);
    }
    xfree(rd);
    xfree(rf);
    xfree(vq);
    xfree(vk);
    xfree(vv);
    tensor_free(q);
    tensor_free(k);
    tensor_free(v);
    tensor_free(o);
}

/* Causal self-attention on q/k/v slices of one fused [B, T, 3C] projection. */
static void check_views(void)
{
    const int64_t B = 2, T = 101, d = 64, C = 2 * d;
    const int H = 2;
    float *vqkv;
    struct tensor *qkv = mk(B, T, 3 * C, 1.5f, &vqkv), *q, *k, *v, *o;
    tensor_slice(qkv, 2, 0, C, &q, NULL);
    tensor_slice(qkv, 2, C, C, &k, NULL);
    tensor_slice(qkv, 2, 2 * C, C, &v, NULL);
    tensor_new(D, TENSOR_F32, 3, (int64_t[]){B, T, C}, &o, NULL);
    double *ref = xmalloc((size_t)(B * T * C) * sizeof(double));
    attn_ref(ref, vqkv, vqkv + C, vqkv + 2 * C, B, T, T, H, d, d, 3 * C, 3 * C, 3 * C,
             1.0 / sqrt((double)d), 1);
    for (int p = -1; p < npaths; p++) {
        float *fu = run(p < 0 ? 0 : paths[p].mode, o, q, k, v, H, 0.0f, TENSOR_ATTN_CAUSAL);
        double ef = rel_err(fu, ref, B * T * C);
        ok(ef <= TOL, "causal, strided q/k/v views of one projection: %s vs float64 %.3g",
           p < 0 ? "reference path" : paths[p].name, ef);
        xfree(fu);
    }
    xfree(ref);
    xfree(vqkv);
    tensor_free(q);
    tensor_free(k);
    tensor_free(v);
    tensor_free(o);
    tensor_free(qkv);
}

int main(void)
{
    struct err e = {0};
    if (dev_open("cpu", 0, &D, &e) < 0)
        PANIC("dev_open: %s", e.msg);
    if (cpu_attention_avx512_usable())
        paths[npaths++] = (struct apath){"AVX-512 kernel", 1};
    else
        printf("# skip: the CPU lacks AVX-512F, the AVX-512 kernel is not checked\n");
    if (cpu_attention_avx2_usable())
        paths[npaths++] = (struct apath){"AVX2 kernel", 2};
    else
        printf("# skip: the CPU lacks AVX2 or FMA, the AVX2 kernel is not checked\n");
    static const struct acase cases[] = {
        /* what, B, tq, tk, d, dv, H, a, scale, causal, bk, ref64 */
        {"self, head dim 40, 131 tokens", 2, 131, 131, 40, 40, 2, 2.0f, 0, 0, 0, 1},
        {"self, head dim 64, 131 tokens, key blocks of 40", 2, 131, 131, 64, 64, 2, 2.0f, 0,
         0, 40, 1},
        {"self, head dim 80, 97 tokens", 1, 97, 97, 80, 80, 3, 2.0f, 0, 0, 0, 1},
        {"self, head dim 160, 64 tokens", 2, 64, 64, 160, 160, 2, 2.0f, 0, 0, 0, 1},
        {"cross, 4097 queries x 77 keys, head dim 40", 1, 4097, 77, 40, 40, 2, 2.0f, 0, 0, 0, 1},
        {"cross, 333 queries x 77 keys, head dim 64 (SDXL)", 2, 333, 77, 64, 64, 2, 2.0f, 0, 0,
         0, 1},
        {"causal, 77 tokens, head dim 64 (CLIP)", 2, 77, 77, 64, 64, 3, 2.0f, 0, 1, 0, 1},
        {"causal, 203 tokens, key blocks of 16", 1, 203, 203, 40, 40, 2, 2.0f, 0, 1, 16, 1},
        {"d 13, dv 21 (ragged kernels), 59 x 45", 2, 59, 45, 13, 21, 3, 2.0f, 0, 0, 24, 1},
        {"peaky scores (scale 1, |q|,|k| <= 2.5), 150 x 150", 1, 150, 150, 40, 40, 2, 2.5f, 1.0f,
         0, 32, 1},
        {"self, 1025 tokens, head dim 40", 1, 1025, 1025, 40, 40, 2, 2.0f, 0, 0, 0, 1},
        /* 4097 x 4097 in float64 would dominate the test's time (under ASan): the two
         * paths against each other only */
        {"self, 4097 tokens, head dim 40", 1, 4097, 4097, 40, 40, 1, 2.0f, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check_case(&cases[i]);
    check_views();
    dev_close(D);
    tensor_shutdown();
    return harness_done();
}
