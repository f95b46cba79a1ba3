/* Vector exp for x <= 0 (AVX2 + FMA), shared by the CPU softmax in attention and the
 * SiLU of element-wise ops. Internal to src/backend/cpu; include after cpu.h. */
#ifndef OB_BACKEND_CPU_SIMD_EXP_H
#define OB_BACKEND_CPU_SIMD_EXP_H

#if defined(__x86_64__)
#include <immintrin.h>

/* exp(x) for x <= 0: x = k ln2 + r with |r| <= ln2/2, exp(r) by its Taylor series to r^7
 * (relative error ~2e-8 before rounding), times 2^k built in the exponent bits. Inputs
 * below -87 are clamped; their true values are < 2e-38, nothing next to the max's 1. */
__attribute__((target("avx2,fma,f16c"))) static inline __m256 exp_neg_avx2(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.428606765330187e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

#endif

#endif
