/*
 * rng — PyTorch's CPU MT19937 generator and torch.randn (sd15.md §6.2–§6.5).
 *
 * Every rounding step below mirrors one PyTorch operation; changing the order
 * of a multiply and an add, or letting the compiler fuse them, changes the
 * last bit of some outputs. So contraction is switched off for this file and
 * the fused multiply-adds the AVX2 build uses are written as explicit fmaf().
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "sampling_rng.h"

#include <math.h>
#include <string.h>

#define MT_N 624
#define MT_M 397

void sampling_rng_seed(struct sampling_rng *rng, uint64_t seed)
{
    rng->_state[0] = (uint32_t)(seed & 0xffffffffu);
    for (uint32_t j = 1; j < MT_N; j++) {
        uint32_t prev = rng->_state[j - 1];
        rng->_state[j] = 1812433253u * (prev ^ (prev >> 30)) + j;
    }
    /* "left" starts at 1 so that the first output twists the state first. */
    rng->_left = 1;
    rng->_index = 0;
    rng->_has_cached_normal = 0;
    rng->_cached_normal = 0.0;
}

static void mt_twist(struct sampling_rng *rng)
{
    uint32_t *s = rng->_state;
    /* In place and in order: later words see the words already rewritten. */
    for (int j = 0; j < MT_N; j++) {
        uint32_t y = (s[j] & 0x80000000u) | (s[(j + 1) % MT_N] & 0x7fffffffu);
        s[j] = s[(j + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    rng->_left = MT_N;
    rng->_index = 0;
}

uint32_t sampling_rng_u32(struct sampling_rng *rng)
{
    if (--rng->_left <= 0)
        mt_twist(rng);
    uint32_t y = rng->_state[rng->_index++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

float sampling_rng_uniform_float(struct sampling_rng *rng)
{
    uint32_t r = sampling_rng_u32(rng);
    return (float)(r & 0xffffffu) * 0x1p-24f;
}

double sampling_rng_uniform_double(struct sampling_rng *rng)
{
    uint64_t hi = sampling_rng_u32(rng);
    uint64_t lo = sampling_rng_u32(rng);
    uint64_t v = (hi << 32) | lo;
    return (double)(v & ((1ull << 53) - 1)) * 0x1p-53;
}

/* ---- Cephes polynomials (avx_mathfun.h as GCC compiles it for AVX2) ---- */

static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* a*b + c with one rounding (V2) or two (V3). */
static inline float madd(float a, float b, float c, int fused)
{
    if (fused)
        return fmaf(a, b, c);
    float p = a * b;
    return p + c;
}

static float cephes_log(float x, int fused)
{
    const float min_norm = 0x1p-126f;
    if (x < min_norm)
        x = min_norm;
    uint32_t bits = f2u(x);
    float e = (float)((int32_t)(bits >> 23) - 127);
    e = e + 1.0f;
    float m = u2f((bits & 0x807fffffu) | 0x3f000000u);
    float xx;
    if (m < 0.707106781186547524f) {
        e = e - 1.0f;
        xx = m - 1.0f;
        xx = xx + m;
    } else {
        xx = m - 1.0f;
    }
    float z = xx * xx;
    float y = 7.0376836292e-2f;
    y = madd(y, xx, -1.1514610310e-1f, fused);
    y = madd(y, xx, 1.1676998740e-1f, fused);
    y = madd(y, xx, -1.2420140846e-1f, fused);
    y = madd(y, xx, 1.4249322787e-1f, fused);
    y = madd(y, xx, -1.6668057665e-1f, fused);
    y = madd(y, xx, 2.0000714765e-1f, fused);
    y = madd(y, xx, -2.4999993993e-1f, fused);
    y = madd(y, xx, 3.3333331174e-1f, fused);
    y = y * xx;
    float q1 = e * -2.12194440e-4f;
    y = madd(y, z, q1, fused);
    y = y - 0.5f * z; /* 0.5*z is exact: fused or not, one rounding */
    xx = xx + y;
    return xx + e * 0.693359375f; /* the product is exact */
}

static void cephes_sincos(float x, float *s_out, float *c_out, int fused)
{
    uint32_t sign_sin = f2u(x) & 0x80000000u;
    float a = fabsf(x);
    int32_t j = (int32_t)(a * 1.27323954473516f);
    j = (j + 1) & ~1;
    float y = (float)j;
    uint32_t swap_sign_sin = ((uint32_t)j & 4u) << 29;
    int poly_mask = (j & 2) == 0;
    uint32_t sign_cos = ((~(uint32_t)(j - 2)) & 4u) << 29;
    sign_sin ^= swap_sign_sin;

    /* The three-part reduction is always fused on AVX2 builds (fmadd). */
    a = madd(y, -0.78515625f, a, fused);
    a = madd(y, -2.4187564849853515625e-4f, a, fused);
    a = madd(y, -3.77489497744594108e-8f, a, fused);
    float z = a * a;

    float c = 2.443315711809948e-5f;
    c = madd(c, z, -1.388731625493765e-3f, fused);
    c = madd(c, z, 4.166664568298827e-2f, fused);
    c = c * z;
    c = madd(c, z, -(0.5f * z), fused);
    c = c + 1.0f;

    float s = -1.9515295891e-4f;
    s = madd(s, z, 8.3321608736e-3f, fused);
    s = madd(s, z, -1.6666654611e-1f, fused);
    s = s * z;
    s = madd(s, a, a, fused);

    /* Blend exactly as the vector code does, including the +0 additions. */
    float ysin2 = poly_mask ? s : 0.0f;
    float ysin1 = poly_mask ? 0.0f : c;
    float s2 = s - ysin2;
    float c2 = c - ysin1;
    float sin_v = ysin1 + ysin2;
    float cos_v = c2 + s2;
    *s_out = u2f(f2u(sin_v) ^ sign_sin);
    *c_out = u2f(f2u(cos_v) ^ sign_cos);
}

float sampling_rng__log(float x, enum sampling_randn_variant variant)
{
    if (variant == SAMPLING_RANDN_V1)
        return logf(x);
    return cephes_log(x, variant == SAMPLING_RANDN_V2);
}

void sampling_rng__sincos(float x, float *s, float *c, enum sampling_randn_variant variant)
{
    if (variant == SAMPLING_RANDN_V1) {
        *s = sinf(x);
        *c = cosf(x);
        return;
    }
    cephes_sincos(x, s, c, variant == SAMPLING_RANDN_V2);
}

/* normal_fill_16: slots j and j+8 become the cosine and sine of one pair. */
static void normal_fill_16(float *d, enum sampling_randn_variant variant)
{
    for (int j = 0; j < 8; j++) {
        float u1 = 1.0f - d[j];
        float u2 = d[j + 8];
        float theta, s, c;
        if (variant == SAMPLING_RANDN_V1) {
            /* Scalar build: 2*pi*u2 formed in double, rounded once. */
            theta = (float)(2.0 * 3.14159265358979323846 * (double)u2);
        } else {
            theta = 6.2831855f * u2; /* 2*pi rounded to float first */
        }
        float radius = sqrtf(-2.0f * sampling_rng__log(u1, variant));
        sampling_rng__sincos(theta, &s, &c, variant);
        /* "* std + mean" with std 1, mean 0: turns -0 into +0 like PyTorch. */
        d[j] = (radius * c) * 1.0f + 0.0f;
        d[j + 8] = (radius * s) * 1.0f + 0.0f;
    }
}

static float normal_double(struct sampling_rng *rng)
{
    if (rng->_has_cached_normal) {
        rng->_has_cached_normal = 0;
        return (float)(rng->_cached_normal * 1.0 + 0.0);
    }
    /* Note the roles: the first uniform is the angle, the second the radius. */
    double u1 = sampling_rng_uniform_double(rng);
    double u2 = sampling_rng_uniform_double(rng);
    double r = sqrt(-2.0 * log1p(-u2));
    double theta = 2.0 * 3.14159265358979323846 * u1;
    rng->_cached_normal = r * sin(theta);
    rng->_has_cached_normal = 1;
    return (float)(r * cos(theta) * 1.0 + 0.0);
}

void sampling_rng_randn(struct sampling_rng *rng, float *out, size_t n,
                        enum sampling_randn_variant variant)
{
    if (n < 16) {
        for (size_t i = 0; i < n; i++)
            out[i] = normal_double(rng);
        return;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = sampling_rng_uniform_float(rng);
    for (size_t i = 0; i + 16 <= n; i += 16)
        normal_fill_16(out + i, variant);
    if (n % 16 != 0) {
        /* Recompute the last 16 from fresh uniforms, overwriting transformed values. */
        float *tail = out + n - 16;
        for (int i = 0; i < 16; i++)
            tail[i] = sampling_rng_uniform_float(rng);
        normal_fill_16(tail, variant);
    }
}
