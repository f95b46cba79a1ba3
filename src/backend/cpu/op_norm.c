/* RMS_NORM and LAYER_NORM, split over rows. Sums are accumulated in double in the scalar
 * path; the AVX2 path keeps 8 float lanes of partial sums (rows are at most a few
 * thousand values, so float lanes lose nothing that matters against the eps). */
#include "backend/cpu/cpu.h"
#include <math.h>

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2,fma"))) static float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* sum(x^2) over n values. */
__attribute__((target("avx2,fma"))) static double sumsq_avx2(const float *x, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        a0 = _mm256_fmadd_ps(v0, v0, a0);
        a1 = _mm256_fmadd_ps(v1, v1, a1);
    }
    double s = hsum256(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

/* y = x * s * w (w may be NULL). */
__attribute__((target("avx2,fma"))) static void scale_mul_avx2(float *y, const float *x, float s, const float *w,
                                                              int64_t n) {
    __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    if (w)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs), _mm256_loadu_ps(w + i)));
    else
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    for (; i < n; i++) y[i] = w ? x[i] * s * w[i] : x[i] * s;
}
#endif

void ob_cpu_op_rms_norm(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const ob_tensor *src = dst->src[0];
    const float *w = dst->src[1] ? dst->src[1]->data : NULL;
    int64_t n = src->ne[0], r0, r1;
    float eps = dst->fp[0];
    ob_cpu_split(ob_nrows(src), c->ith, c->nth, &r0, &r1);
#if defined(__x86_64__)
    bool avx2 = ob_cpu_simd_level() >= 1;
#endif
    for (int64_t r = r0; r < r1; r++) {
        const float *x = (const float *)src->data + r * n;
        float *y = (float *)dst->data + r * n;
#if defined(__x86_64__)
        if (avx2) {
            float s = (float)(1.0 / sqrt(sumsq_avx2(x, n) / (double)n + eps));
            scale_mul_avx2(y, x, s, w, n);
            continue;
        }
#endif
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
        float s = (float)(1.0 / sqrt(ss / (double)n + eps));
        for (int64_t i = 0; i < n; i++) y[i] = w ? x[i] * s * w[i] : x[i] * s;
    }
}

void ob_cpu_op_layer_norm(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const ob_tensor *src = dst->src[0];
    const float *w = dst->src[1] ? dst->src[1]->data : NULL;
    const float *b = dst->src[2] ? dst->src[2]->data : NULL;
    int64_t n = src->ne[0], r0, r1;
    float eps = dst->fp[0];
    ob_cpu_split(ob_nrows(src), c->ith, c->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const float *x = (const float *)src->data + r * n;
        float *y = (float *)dst->data + r * n;
        /* Two passes (mean, then centred squares) avoid the cancellation of E[x^2]-E[x]^2. */
        double sum = 0;
        for (int64_t i = 0; i < n; i++) sum += x[i];
        float mean = (float)(sum / (double)n);
        double var = 0;
        for (int64_t i = 0; i < n; i++) {
            float d = x[i] - mean;
            var += (double)d * d;
        }
        float s = (float)(1.0 / sqrt(var / (double)n + eps));
        for (int64_t i = 0; i < n; i++) {
            float v = (x[i] - mean) * s;
            if (w) v *= w[i];
            if (b) v += b[i];
            y[i] = v;
        }
    }
}
