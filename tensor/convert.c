/*
 * convert.c — f32 <-> f16 / bf16 conversion on the host.
 *
 * Scalar conversions are exact bit manipulation (round to nearest even, NaN kept
 * quiet, f16 subnormals handled) so results never depend on the CPU; the bulk
 * path uses F16C when the CPU has it, which rounds the same way.
 */
#include <string.h>

#include <cpuid.h>
#include <immintrin.h>

#include "tensor_impl.h"

static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float tensor_bf16_to_f32(uint16_t b)
{
    return u2f((uint32_t)b << 16);
}

uint16_t tensor_f32_to_bf16(float f)
{
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1);      /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float tensor_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f)
        return u2f(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return u2f(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t tensor_f32_to_f16(float f)
{
    uint32_t u = f2u(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return sign | 0x7e00; /* NaN */
    if (a >= 0x477ff000u)     /* rounds to >= 65520: inf */
        return sign | 0x7c00;
    if (a < 0x38800000u) {
        /* result is subnormal (or zero): value / 2^-24, rounded to nearest even */
        float v = u2f(a) * 16777216.0f; /* exact: scaling by a power of two */
        uint32_t m = (uint32_t)v;
        float rem = v - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1)))
            m++;
        return sign | (uint16_t)m;
    }
    /* normal: rebias exponent, round mantissa 23 -> 10 bits to nearest even */
    uint32_t r = a + 0xfffu + ((a >> 13) & 1);
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

__attribute__((target("avx,f16c"))) static void f16_to_f32_f16c(float *d, const uint16_t *s,
                                                                 size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    for (; i < n; i++)
        d[i] = tensor_f16_to_f32(s[i]);
}

__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(uint16_t *d, const float *s,
                                                                 size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        d[i] = tensor_f32_to_f16(s[i]);
}

static int have_f16c(void)
{
    static int v = -1;
    if (v < 0) {
        /* cpuid rather than __builtin_cpu_supports("f16c"): clang before 16 rejects that
         * feature name. AVX also needs the OS to save YMM state (OSXSAVE, then XCR0). */
        unsigned a, b, c, d;
        int ok = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) && (c & bit_AVX) &&
                 (c & bit_OSXSAVE);
        if (ok) {
            unsigned lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            ok = (lo & 6) == 6;
        }
        v = ok;
    }
    return v;
}

void tensor_convert_host(void *dst, enum tensor_dtype dst_dt, const void *src,
                         enum tensor_dtype src_dt, size_t n)
{
    if (dst_dt == src_dt) {
        if (dst != src)
            memmove(dst, src, n * tensor_dtype_size(dst_dt));
        return;
    }
    if (src_dt == TENSOR_F32) {
        const float *s = src;
        uint16_t *d = dst;
        if (dst_dt == TENSOR_F16 && have_f16c()) {
            f32_to_f16_f16c(d, s, n);
        } else {
            for (size_t i = 0; i < n; i++)
                d[i] = dst_dt == TENSOR_F16 ? tensor_f32_to_f16(s[i]) : tensor_f32_to_bf16(s[i]);
        }
        return;
    }
    if (dst_dt == TENSOR_F32) {
        const uint16_t *s = src;
        float *d = dst;
        if (src_dt == TENSOR_F16 && have_f16c()) {
            f16_to_f32_f16c(d, s, n);
        } else {
            for (size_t i = 0; i < n; i++)
                d[i] = src_dt == TENSOR_F16 ? tensor_f16_to_f32(s[i]) : tensor_bf16_to_f32(s[i]);
        }
        return;
    }
    /* f16 <-> bf16 through f32, element by element (src == dst is allowed). */
    const uint16_t *s = src;
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++)
        d[i] = src_dt == TENSOR_F16 ? tensor_f32_to_bf16(tensor_f16_to_f32(s[i]))
                                    : tensor_f32_to_f16(tensor_bf16_to_f32(s[i]));
}
