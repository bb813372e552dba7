/*
 * exp2_avx512.h — 2^x for x <= 0 on 16 floats, the fused attention kernels' exponential
 * (attn_avx512.c, attn_amx.c). Private to tensor/cpu/.
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

#endif
