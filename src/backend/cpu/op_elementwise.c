/* Element-wise ops (ADD, MUL, SCALE, GLU and gpt-oss's clamped form, ACT), row ops
 * (SOFTMAX), type conversion (CPY) and row gathers (GET_ROWS). Element-wise ops split the
 * flattened elements over threads so a single decode row still uses every thread; row ops split
 * rows. All of them read an element before writing the same index, so dst may alias src0. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/simd_exp.h"
#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

/* y = silu(g) * u (u NULL: silu(g)) over n values: silu(x) = x * sigmoid(x), the sigmoid
 * from e = exp(-|x|) as 1 / (1 + e) for x >= 0 and e / (1 + e) below, so exp never
 * overflows (relative error a few 1e-8 against expf). A decode step spent ~4% of its time
 * in scalar expf here at 4 sequences. */
__attribute__((target("avx2,fma,f16c"))) static void silu_avx2(float *y, const float *g, const float *u, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i), e = exp_neg_avx2(_mm256_or_ps(x, sign));
        const __m256 num = _mm256_blendv_ps(e, one, _mm256_cmp_ps(x, zero, _CMP_GE_OQ));
        __m256 r = _mm256_mul_ps(x, _mm256_div_ps(num, _mm256_add_ps(one, e)));
        if (u) r = _mm256_mul_ps(r, _mm256_loadu_ps(u + i));
        _mm256_storeu_ps(y + i, r);
    }
    if (i < n) { /* the tail through the same vector code: a value's bits never depend on
                    * where a thread's share of the elements begins or ends */
        float gt[8] = {0}, ut[8] = {0}, yt[8];
        memcpy(gt, g + i, sizeof(float) * (size_t)(n - i));
        if (u) memcpy(ut, u + i, sizeof(float) * (size_t)(n - i));
        silu_avx2(yt, gt, u ? ut : NULL, 8);
        memcpy(y + i, yt, sizeof(float) * (size_t)(n - i));
    }
}

/* gpt-oss's clamped SwiGLU over n values (graph.h, OB_GLU_SWIGLU_OAI): x = min(g, limit),
 * y = x * sigmoid(alpha x) * (clamp(u, -limit, limit) + 1), the sigmoid as silu_avx2's. The
 * clamps keep a NaN: min/max return their second operand when one is NaN. */
__attribute__((target("avx2,fma,f16c"))) static void swiglu_oai_avx2(float *y, const float *g, const float *u, int64_t n,
                                                                     float alpha, float limit) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
    const __m256 va = _mm256_set1_ps(alpha), lim = _mm256_set1_ps(limit), nlim = _mm256_set1_ps(-limit);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_min_ps(lim, _mm256_loadu_ps(g + i));
        const __m256 v = _mm256_min_ps(lim, _mm256_max_ps(nlim, _mm256_loadu_ps(u + i)));
        const __m256 z = _mm256_mul_ps(va, x), e = exp_neg_avx2(_mm256_or_ps(z, sign));
        const __m256 num = _mm256_blendv_ps(e, one, _mm256_cmp_ps(z, zero, _CMP_GE_OQ));
        const __m256 r = _mm256_mul_ps(_mm256_mul_ps(x, _mm256_div_ps(num, _mm256_add_ps(one, e))), _mm256_add_ps(v, one));
        _mm256_storeu_ps(y + i, r);
    }
    if (i < n) { /* the tail through the same vector code, as silu_avx2's */
        float gt[8] = {0}, ut[8] = {0}, yt[8];
        memcpy(gt, g + i, sizeof(float) * (size_t)(n - i));
        memcpy(ut, u + i, sizeof(float) * (size_t)(n - i));
        swiglu_oai_avx2(yt, gt, ut, 8, alpha, limit);
        memcpy(y + i, yt, sizeof(float) * (size_t)(n - i));
    }
}

/* y = a + b, a * b (op 0, 1) over n values. */
__attribute__((target("avx2,fma"))) static void binary_avx2(int op, float *y, const float *a, const float *b,
                                                           int64_t n) {
    int64_t i = 0;
    if (op == 0)
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    else
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (; i < n; i++) y[i] = op == 0 ? a[i] + b[i] : a[i] * b[i];
}

__attribute__((target("avx2,fma"))) static void scale_avx2(float *y, const float *a, float s, int64_t n) {
    __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), vs));
    for (; i < n; i++) y[i] = a[i] * s;
}
#endif

static void binary_seg(bool avx2, int op, float *y, const float *a, const float *b, int64_t n) {
#if defined(__x86_64__)
    if (avx2) { binary_avx2(op, y, a, b, n); return; }
#endif
    if (op == 0) for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
    else for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i];
}

/* Walks this thread's element range in segments that never cross a row of src1, so a
 * broadcast [n] operand needs no per-element modulo. */
static void binary_op(ob_tensor *dst, const ob_cpu_op_ctx *c, int op) {
    const ob_tensor *a = dst->src[0], *b = dst->src[1];
    int64_t ne0 = a->ne[0], nb = ob_nelements(b), e0, e1;
    bool bcast = nb != ob_nelements(a);
    ob_cpu_split(ob_nelements(a), c->ith, c->nth, &e0, &e1);
    const float *pa = a->data, *pb = b->data;
    float *py = dst->data;
#if defined(__x86_64__)
    bool avx2 = ob_cpu_simd_level() >= 1;
#else
    bool avx2 = false;
#endif
    if (!bcast) { binary_seg(avx2, op, py + e0, pa + e0, pb + e0, e1 - e0); return; }
    for (int64_t e = e0; e < e1;) {
        int64_t col = e % ne0, len = OB_MIN(ne0 - col, e1 - e);
        binary_seg(avx2, op, py + e, pa + e, pb + col, len);
        e += len;
    }
}

void ob_cpu_op_add(ob_tensor *dst, const ob_cpu_op_ctx *c) { binary_op(dst, c, 0); }
void ob_cpu_op_mul(ob_tensor *dst, const ob_cpu_op_ctx *c) { binary_op(dst, c, 1); }

void ob_cpu_op_scale(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const float *a = dst->src[0]->data;
    float *y = dst->data, s = dst->fp[0];
    int64_t e0, e1;
    ob_cpu_split(ob_nelements(dst), c->ith, c->nth, &e0, &e1);
#if defined(__x86_64__)
    if (ob_cpu_simd_level() >= 1) { scale_avx2(y + e0, a + e0, s, e1 - e0); return; }
#endif
    for (int64_t i = e0; i < e1; i++) y[i] = a[i] * s;
}

/* The activations in float, as the reference models compute them (GELU: tanh approx as
 * in HF gelu_pytorch_tanh). */
static inline float act_f(int act, float x) {
    switch (act) {
    case OB_ACT_SILU: return x / (1.0f + expf(-x));
    case OB_ACT_GELU: return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case OB_ACT_GELU_ERF: return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
    case OB_ACT_TANH: return tanhf(x);
    case OB_ACT_SOFTPLUS: return x > 0 ? x + log1pf(expf(-x)) : log1pf(expf(x)); /* no overflow either side */
    case OB_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    default: return x > 0 ? x : 0;
    }
}

void ob_cpu_op_act(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const float *x = dst->src[0]->data;
    float *y = dst->data;
    int act = dst->ip[0];
    int64_t e0, e1;
    ob_cpu_split(ob_nelements(dst), c->ith, c->nth, &e0, &e1);
#if defined(__x86_64__)
    if (act == OB_ACT_SILU && ob_cpu_simd_level() >= 1) {
        silu_avx2(y + e0, x + e0, NULL, e1 - e0);
        return;
    }
#endif
    for (int64_t i = e0; i < e1; i++) y[i] = act_f(act, x[i]);
}

void ob_cpu_op_glu(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const float *g = dst->src[0]->data, *u = dst->src[1]->data;
    float *y = dst->data;
    int act = dst->ip[0];
    int64_t e0, e1;
    ob_cpu_split(ob_nelements(dst), c->ith, c->nth, &e0, &e1);
    if (dst->ip[1] == OB_GLU_SWIGLU_OAI) {
        const float alpha = dst->fp[0], lim = dst->fp[1];
#if defined(__x86_64__)
        if (ob_cpu_simd_level() >= 1) {
            swiglu_oai_avx2(y + e0, g + e0, u + e0, e1 - e0, alpha, lim);
            return;
        }
#endif
        for (int64_t i = e0; i < e1; i++) {
            const float x = g[i] > lim ? lim : g[i], v = u[i] > lim ? lim : u[i] < -lim ? -lim : u[i]; /* NaN kept */
            y[i] = x / (1.0f + expf(-alpha * x)) * (v + 1.0f);
        }
        return;
    }
#if defined(__x86_64__)
    if (act == OB_ACT_SILU && ob_cpu_simd_level() >= 1) {
        silu_avx2(y + e0, g + e0, u + e0, e1 - e0);
        return;
    }
#endif
    for (int64_t i = e0; i < e1; i++) y[i] = act_f(act, g[i]) * u[i];
}

void ob_cpu_op_softmax(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const ob_tensor *src = dst->src[0];
    int64_t n = src->ne[0], r0, r1;
    ob_cpu_split(ob_nrows(src), c->ith, c->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const float *x = (const float *)src->data + r * n;
        float *y = (float *)dst->data + r * n;
        float mx = -INFINITY;
        for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
        double sum = 0;
        for (int64_t i = 0; i < n; i++) {
            float e = expf(x[i] - mx);
            y[i] = e;
            sum += e;
        }
        float inv = (float)(1.0 / sum);
        for (int64_t i = 0; i < n; i++) y[i] *= inv;
    }
}

static int64_t gcd64(int64_t a, int64_t b) { while (b) { int64_t r = a % b; a = b; b = r; } return a; }

/* Converts in chunks of lcm(block sizes) elements (at most 256, checked by supports), so
 * both sides always see whole blocks; through a float buffer unless one side is F32. */
void ob_cpu_op_cpy(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const ob_tensor *src = dst->src[0];
    const ob_type_traits *ts = ob_type_traits_get(src->type), *td = ob_type_traits_get(dst->type);
    int64_t bs = ts->block_size, bd = td->block_size, chunk = bs / gcd64(bs, bd) * bd;
    int64_t k0, k1;
    ob_cpu_split(ob_nelements(dst) / chunk, c->ith, c->nth, &k0, &k1);
    float tmp[256];
    for (int64_t k = k0; k < k1; k++) {
        int64_t e = k * chunk;
        const char *s = (const char *)src->data + (size_t)(e / bs) * ts->type_size;
        char *d = (char *)dst->data + (size_t)(e / bd) * td->type_size;
        if (src->type == dst->type) memcpy(d, s, (size_t)(chunk / bs) * ts->type_size);
        else if (dst->type == OB_TYPE_F32) ts->to_float(s, (float *)d, chunk);
        else if (src->type == OB_TYPE_F32) td->from_float((const float *)s, d, chunk);
        else {
            ts->to_float(s, tmp, chunk);
            td->from_float(tmp, d, chunk);
        }
    }
}

void ob_cpu_op_get_rows(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const ob_tensor *tab = dst->src[0];
    const int32_t *ids = dst->src[1]->data;
    const ob_type_traits *tr = ob_type_traits_get(tab->type);
    int64_t n = tab->ne[0], r0, r1;
    size_t row_bytes = ob_row_size(tab->type, n);
    ob_cpu_split(ob_nrows(dst), c->ith, c->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++)
        tr->to_float((const char *)tab->data + (size_t)ids[r] * row_bytes, (float *)dst->data + r * n, n);
}
