/*
 * test_tensor_attn_bf16 — the bf16 attention kernels (tensor/cpu/attn_amx.c on AMX tiles,
 * tensor/cpu/attn_avx512bf16.c on AVX-512 BF16) against a float64 attention of the same
 * f32 inputs, each where the CPU has it: SD's head dims, ragged queries and keys (odd key
 * counts leave half a key pair, which must weigh nothing), cross-attention's 77 keys,
 * several key blocks, and scores whose running maximum moves.
 * Exits 77 (skipped) where the CPU has neither.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "device.h"
#include "harness.h"
#include "tensor_impl.h"
#include "cpu/gemm_amx.h"
#include "cpu/gemm_bf16.h"

static uint64_t rng = 0x243f6a8885a308d3ull;

static float frand(void)
{
    return harness_frand(&rng);
}

struct kernel {
    const char *name;
    int (*run)(float *out, int64_t o_rs, const float *q, int64_t q_rs, const float *k, int64_t k_rs,
               const float *v, int64_t v_rs, int64_t tq, int64_t tk, int heads, int64_t d,
               int64_t dv, float scale);
};

/*
 * One kernel's attention of `heads` heads (row strides wider than heads x d, as the
 * UNet's fused qkv are) against float64 softmax(q k^T scale) v of the same f32 inputs.
 * Q, K, V and P are rounded to bf16: the bound is 1e-2 of max |v| (values in [-1, 1]),
 * three times the worst error measured (3.2e-3), far below a wrong block's (~0.3).
 */
/* ramp > 0: channel 0 of key t is ramp * t and of query i +-4 (alternating), so half the
 * queries' scores rise through every block by more than the kernel's lazy-rescale margin
 * (its running max must move) and half fall (it must not matter that it stays). */
static void attn_one(const struct kernel *kn, int64_t tq, int64_t tk, int heads, int64_t d,
                     int64_t dv, float ramp)
{
    int64_t qrs = heads * d + 7, krs = heads * d + 3, vrs = heads * dv + 5, ors = heads * dv + 1;
    float *q = xmalloc((size_t)(tq * qrs) * 4), *k = xmalloc((size_t)(tk * krs) * 4);
    float *v = xmalloc((size_t)(tk * vrs) * 4), *o = xmalloc((size_t)(tq * ors) * 4);
    for (int64_t i = 0; i < tq * qrs; i++)
        q[i] = 2.0f * frand();
    for (int64_t i = 0; i < tk * krs; i++)
        k[i] = 2.0f * frand();
    for (int64_t i = 0; i < tk * vrs; i++)
        v[i] = frand();
    for (int64_t i = 0; i < tq * ors; i++)
        o[i] = NAN;
    for (int h = 0; h < heads && ramp > 0; h++) {
        for (int64_t t = 0; t < tk; t++)
            k[t * krs + h * d] = ramp * (float)t;
        for (int64_t i = 0; i < tq; i++)
            q[i * qrs + h * d] = i % 2 ? 4.0f : -4.0f;
    }
    float scale = 1.0f / sqrtf((float)d);
    int rc = kn->run(o, ors, q, qrs, k, krs, v, vrs, tq, tk, heads, d, dv, scale);
    double worst = 0;
    double *p = xmalloc((size_t)tk * sizeof(double));
    for (int h = 0; h < heads && rc == 0; h++)
        for (int64_t i = 0; i < tq; i++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t t = 0; t < tk; t++) {
                double s = 0;
                for (int64_t c = 0; c < d; c++)
                    s += (double)q[i * qrs + h * d + c] * (double)k[t * krs + h * d + c];
                p[t] = s * scale;
                mx = p[t] > mx ? p[t] : mx;
            }
            for (int64_t t = 0; t < tk; t++)
                sum += p[t] = exp(p[t] - mx);
            for (int64_t c = 0; c < dv; c++) {
                double r = 0;
                for (int64_t t = 0; t < tk; t++)
                    r += p[t] * (double)v[t * vrs + h * dv + c];
                double err = fabs((double)o[i * ors + h * dv + c] - r / sum);
                worst = err > worst || isnan(err) ? err : worst;
            }
        }
    ok(rc == 0 && worst <= 1e-2,
       "%s attention %lld x %lld keys, %d heads, d %lld, dv %lld%s: %s, "
       "worst |error| %.2e (bound 1e-2)",
       kn->name, (long long)tq, (long long)tk, heads, (long long)d, (long long)dv,
       ramp > 0 ? ", scores rising/falling by key" : "", rc == 0 ? "ran" : "NOT RUN", worst);
    xfree(p);
    xfree(q);
    xfree(k);
    xfree(v);
    xfree(o);
}

static void kernel_all(const struct kernel *kn)
{
    attn_one(kn, 131, 131, 2, 40, 40, 0.0f);
    attn_one(kn, 64, 96, 2, 64, 64, 0.0f);
    attn_one(kn, 97, 77, 3, 80, 80, 0.0f);
    attn_one(kn, 40, 200, 1, 160, 160, 0.0f);
    attn_one(kn, 33, 5, 2, 8, 24, 0.0f);
    attn_one(kn, 48, 160, 2, 40, 40, 0.5f);  /* ~13 log2 units per block of 32 keys */
    attn_one(kn, 40, 50, 2, 40, 40, 0.0f);   /* attn_amx.c: one 64-key step, ragged */
    attn_one(kn, 200, 301, 2, 40, 40, 0.0f); /* three blocks of 128 keys, the last odd */
    attn_one(kn, 17, 1, 1, 40, 40, 0.0f);    /* one key: half a pair */
}

int main(void)
{
    int amx = cpu_amx_usable(), avx512bf16 = cpu_avx512bf16_usable();
    if (!amx && !avx512bf16)
        SKIP("neither AMX-BF16 nor AVX-512 BF16 on this CPU");
    struct dev *dv;
    struct err e = {0};
    if (dev_open("cpu", 0, &dv, &e) < 0) /* the pool the attention's tasks run on */
        PANIC("dev_open: %s", e.msg);
    static const struct kernel kamx = {"AMX", cpu_attention_amx};
    static const struct kernel kbf = {"AVX-512 BF16", cpu_attention_avx512bf16};
    if (amx)
        kernel_all(&kamx);
    if (avx512bf16) {
        kernel_all(&kbf);
        /* vdpbf16ps sums channel pairs: an odd head dim is left to the f32 kernel */
        float x[3 * 2] = {0}, o[3 * 2];
        ok(cpu_attention_avx512bf16(o, 3, x, 3, x, 3, x, 3, 2, 2, 1, 3, 3, 1.0f) == -1,
           "AVX-512 BF16 attention declines an odd head dim");
    }
    dev_close(dv);
    return harness_done();
}
