/*
 * exp2_avx512.h — 2^x on 16 floats, the fused attention kernels' exponentials
 * (attn_avx512.c, attn_amx.c, attn_avx512bf16.c). Private to tensor/cpu/.
 *
 * A degree-5 polynomial on [-1/2, 1/2] with scalef: a least-squares fit of 2^f with
 * relative weight at Chebyshev nodes, then reweighted towards minimax; max relative
 * error 2.3e-7 evaluated in float. The argument is clamped at -100: 2^-100 is nothing
 * next to a softmax row's maximum term 1, the clamp also maps a NaN from -inf - -inf to
 * it (vmaxps returns its second operand for NaN), and it keeps denormals out of the
 * accumulators.
 */
#ifndef LATENTD_TENSOR_CPU_EXP2_AVX512_H
#define LATENTD_TENSOR_CPU_EXP2_AVX512_H

#include <immintrin.h>

static inline __attribute__((always_inline, target("avx512f,fma"))) __m512 cpu_exp2_neg16(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-100.0f));
    __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(0.001327647129073739f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.009675540961325169f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.05550713092088699f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24022120237350464f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931469440460205f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000001192092896f));
    return _mm512_scalef_ps(p, n);
}

/*
 * 2^x for a softmax whose P is rounded to bf16 (relative 2^-9) right after (the bf16
 * attentions: attn_amx.c, attn_avx512bf16.c): a degree-3 polynomial on [-1/2, 1/2]
 * (relative error 7.5e-5, a fit with relative weight at Chebyshev nodes, reweighted
 * towards minimax) is exact enough and two FMAs shorter than cpu_exp2_neg16's. Clamped at
 * -100 as cpu_exp2_neg16 (NaN from -inf - -inf included). x may be positive (attn_amx.c's
 * lazy rescale lets it reach its LAZY_LOG2).
 */
static inline __attribute__((always_inline, target("avx512f,fma"))) __m512 cpu_exp2_p3(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-100.0f));
    __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(0.055171627551317215f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.2426111251115799f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6932609677314758f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.9999280571937561f));
    return _mm512_scalef_ps(p, n);
}

#endif
