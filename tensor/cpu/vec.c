/*
 * vec.c — elementwise kernels (activations, softmax, norm helpers) with AVX-512,
 * AVX2 and scalar versions chosen once at run time from cpuid, so one binary
 * runs on any x86-64 and uses the widest unit the machine has.
 */
#include <math.h>

#include <immintrin.h>

#include "../tensor_impl.h"

static inline float scalar_exp(float x)
{
    return expf(x);
}

static inline float scalar_act(float x, enum cpu_act act)
{
    switch (act) {
    case CPU_ACT_SILU: return x / (1.0f + expf(-x));
    case CPU_ACT_QUICK_GELU: return x / (1.0f + expf(-1.702f * x));
    default: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    }
}

/* ---- AVX-512 ---------------------------------------------------------------------------- */
#if defined(__clang__) /* clang ignores GCC target pragmas */
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,fma,avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,fma,avx2")
#endif
#define V(name) name##_avx512
#define VT __m512
#define VL 16
#define VLOAD _mm512_loadu_ps
#define VSTORE _mm512_storeu_ps
#define VSET1 _mm512_set1_ps
#define VADD _mm512_add_ps
#define VSUB _mm512_sub_ps
#define VMUL _mm512_mul_ps
#define VDIV _mm512_div_ps
#define VMAX _mm512_max_ps
#define VMIN _mm512_min_ps
#define VFMA _mm512_fmadd_ps
#define VROUND(x) _mm512_roundscale_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VPOW2I(n)                                                                           \
    _mm512_castsi512_ps(                                                                    \
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23))
#define VABS(x) _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x),             \
                                                     _mm512_set1_epi32(0x7fffffff)))
#define VCOPYSIGN(y, x)                                                                     \
    _mm512_castsi512_ps(_mm512_or_si512(                                                    \
        _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(0x7fffffff)),            \
        _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u))))
#define VREDUCE_ADD _mm512_reduce_add_ps
#define VREDUCE_MAX _mm512_reduce_max_ps
#include "vec_tmpl.h"
#undef V
#undef VT
#undef VL
#undef VLOAD
#undef VSTORE
#undef VSET1
#undef VADD
#undef VSUB
#undef VMUL
#undef VDIV
#undef VMAX
#undef VMIN
#undef VFMA
#undef VROUND
#undef VPOW2I
#undef VABS
#undef VCOPYSIGN
#undef VREDUCE_ADD
#undef VREDUCE_MAX
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

/* ---- AVX2 ------------------------------------------------------------------------------- */
#if defined(__clang__) /* clang ignores GCC target pragmas */
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
static inline float hadd256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
static inline float hmax256(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
#define V(name) name##_avx2
#define VT __m256
#define VL 8
#define VLOAD _mm256_loadu_ps
#define VSTORE _mm256_storeu_ps
#define VSET1 _mm256_set1_ps
#define VADD _mm256_add_ps
#define VSUB _mm256_sub_ps
#define VMUL _mm256_mul_ps
#define VDIV _mm256_div_ps
#define VMAX _mm256_max_ps
#define VMIN _mm256_min_ps
#define VFMA _mm256_fmadd_ps
#define VROUND(x) _mm256_round_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VPOW2I(n)                                                                           \
    _mm256_castsi256_ps(                                                                    \
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23))
#define VABS(x) _mm256_and_ps((x), _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)))
#define VCOPYSIGN(y, x)                                                                     \
    _mm256_or_ps(_mm256_and_ps((y), _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))),   \
                 _mm256_and_ps((x), _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u))))
#define VREDUCE_ADD hadd256
#define VREDUCE_MAX hmax256
#include "vec_tmpl.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

/* ---- scalar ----------------------------------------------------------------------------- */

static float max_scalar(const float *x, int64_t n)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

static float exp_sum_scalar(float *y, const float *x, int64_t n, float m)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++) {
        y[i] = expf(x[i] - m);
        s += y[i];
    }
    return s;
}

static void scale_scalar(float *y, const float *x, float s, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * s;
}

static void act_scalar(float *y, const float *x, int64_t n, enum cpu_act act)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = scalar_act(x[i], act);
}

static void geglu_scalar(float *y, const float *a, const float *g, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] * scalar_act(g[i], CPU_ACT_GELU);
}

static void moments_scalar(const float *x, int64_t n, float shift, double *sum, double *sumsq)
{
    double s = 0, q = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)x[i] - shift;
        s += d;
        q += d * d;
    }
    *sum = s;
    *sumsq = q;
}

static void affine_scalar(float *y, const float *x, int64_t n, float a, float b, int silu)
{
    for (int64_t i = 0; i < n; i++) {
        float v = x[i] * a + b;
        y[i] = silu ? scalar_act(v, CPU_ACT_SILU) : v;
    }
}

static void ln_apply_scalar(float *y, const float *x, int64_t n, float m, float r, const float *g,
                            const float *b)
{
    for (int64_t i = 0; i < n; i++) {
        float v = (x[i] - m) * r;
        y[i] = (g ? v * g[i] : v) + (b ? b[i] : 0.0f);
    }
}

/* ---- dispatch --------------------------------------------------------------------------- */

static int isa = -1;     /* in use: 2 avx512, 1 avx2, 0 scalar */
static int isa_max = -1; /* what the CPU has */

static int get_isa(void)
{
    if (isa < 0) {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
            isa_max = 2;
        else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
            isa_max = 1;
        else
            isa_max = 0;
        isa = isa_max;
    }
    return isa;
}

#define DISPATCH(name, ...)                                                                 \
    (get_isa() == 2 ? name##_avx512(__VA_ARGS__)                                            \
                    : get_isa() == 1 ? name##_avx2(__VA_ARGS__) : name##_scalar(__VA_ARGS__))

void cpu_vec_force_isa(int level)
{
    get_isa();
    isa = level < 0 ? 0 : level > isa_max ? isa_max : level;
}

float cpu_vec_max(const float *x, int64_t n)
{
    return DISPATCH(max, x, n);
}

float cpu_vec_exp_sum(float *y, const float *x, int64_t n, float m)
{
    return DISPATCH(exp_sum, y, x, n, m);
}

void cpu_vec_scale(float *y, const float *x, float s, int64_t n)
{
    DISPATCH(scale, y, x, s, n);
}

void cpu_vec_geglu(float *y, const float *a, const float *g, int64_t n)
{
    DISPATCH(geglu, y, a, g, n);
}

void cpu_vec_moments(const float *x, int64_t n, float shift, double *sum, double *sumsq)
{
    DISPATCH(moments, x, n, shift, sum, sumsq);
}

void cpu_vec_affine(float *y, const float *x, int64_t n, float a, float b, int silu)
{
    DISPATCH(affine, y, x, n, a, b, silu);
}

void cpu_vec_ln_apply(float *y, const float *x, int64_t n, float m, float r, const float *g,
                      const float *b)
{
    DISPATCH(ln_apply, y, x, n, m, r, g, b);
}

/* ---- row-parallel kernels -------------------------------------------------------------- */

struct act_job {
    float *y;
    const float *x;
    enum cpu_act act;
    int64_t c; /* row width (geglu, softmax) */
};

#define ACT_BLOCK 4096

static void act_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct act_job *j = ctx;
    DISPATCH(act, j->y + b, j->x + b, e - b, j->act);
}

void cpu_activation(float *y, const float *x, int64_t n, enum cpu_act act)
{
    struct act_job j = {y, x, act, 0};
    if (n < ACT_BLOCK)
        act_task(&j, 0, n, 0);
    else
        tensor__pool_for(n, act_task, &j);
}

static void geglu_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct act_job *j = ctx;
    for (int64_t r = b; r < e; r++)
        DISPATCH(geglu, j->y + r * j->c, j->x + r * 2 * j->c, j->x + r * 2 * j->c + j->c, j->c);
}

void cpu_geglu(float *y, const float *x, int64_t rows, int64_t c)
{
    struct act_job j = {y, x, CPU_ACT_GELU, c};
    tensor__pool_for(rows, geglu_task, &j);
}

static void softmax_task(void *ctx, int64_t b, int64_t e, int tid)
{
    struct act_job *j = ctx;
    int64_t c = j->c;
    for (int64_t r = b; r < e; r++) {
        const float *x = j->x + r * c;
        float *y = j->y + r * c;
        float m = cpu_vec_max(x, c);
        if (m == -INFINITY) { /* a fully masked row: define it as uniform, never NaN */
            for (int64_t i = 0; i < c; i++)
                y[i] = 1.0f / (float)c;
            continue;
        }
        float s = cpu_vec_exp_sum(y, x, c, m);
        cpu_vec_scale(y, y, 1.0f / s, c);
    }
}

void cpu_softmax(float *y, const float *x, int64_t rows, int64_t c)
{
    struct act_job j = {y, x, CPU_ACT_SILU, c};
    tensor__pool_for(rows, softmax_task, &j);
}
