/* Plain-C dot kernels (every type, any CPU) and activation quantization.
 *
 * The scalar level keeps activations in f32 and dequantizes each weight block with the
 * type's reference to_float: it is the portable fallback, not the fast path. */
#include "backend/cpu/vec_dot.h"

#include <math.h>

/* Round to nearest even without libm: adding 1.5 * 2^23 pushes the fraction out of a
 * float's mantissa. Exact for |v| < 2^22, far above the 127 we need. */
static inline int round_i(float v) {
    return (int)((v + 12582912.0f) - 12582912.0f);
}

size_t ob_cpu_act_row_size(ob_act_fmt f, int64_t k) {
    switch (f) {
    case OB_ACT_Q8_32: return (size_t)(k / 32) * sizeof(ob_q8a_block);
    case OB_ACT_Q8_K: return (size_t)(k / OB_QK_K) * sizeof(ob_block_q8_k);
    case OB_ACT_F32: break;
    }
    return (size_t)k * sizeof(float);
}

static void quantize_q8_32(const float *x, ob_q8a_block *y, int64_t k) {
    for (int64_t i = 0; i < k / 32; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            const int q = round_i(x[j] * id);
            y[i].qs[j] = (int8_t)q;
            sum += q;
        }
        y[i].d = d;
        y[i].sum = sum;
    }
}

static void quantize_q8_k(const float *x, ob_block_q8_k *y, int64_t k) {
    for (int64_t i = 0; i < k / OB_QK_K; i++, x += OB_QK_K) {
        float amax = 0.0f;
        for (int j = 0; j < OB_QK_K; j++) amax = fmaxf(amax, fabsf(x[j]));
        float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        y[i].d = amax / 127.0f;
        for (int s = 0; s < OB_QK_K / 16; s++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) {
                int q = round_i(x[16 * s + j] * id);
                y[i].qs[16 * s + j] = (int8_t)q;
                sum += q;
            }
            y[i].bsums[s] = (int16_t)sum;
        }
    }
}

void ob_cpu_quantize_act(ob_act_fmt f, const float *x, void *y, int64_t k) {
    if (f == OB_ACT_Q8_32) quantize_q8_32(x, y, k);
    else if (f == OB_ACT_Q8_K) quantize_q8_k(x, y, k);
}

/* ---- f32 activations ----------------------------------------------------------------- */

static void dot_f32(int64_t k, const void *w, const void *act, size_t stride, int nc, float *out) {
    const float *wf = w;
    for (int c = 0; c < nc; c++) {
        const float *x = (const float *)((const char *)act + (size_t)c * stride);
        float s[8] = {0};
        int64_t i = 0;
        /* Eight partial sums: lets the compiler vectorize and keeps the rounding spread. */
        for (; i + 8 <= k; i += 8)
            for (int j = 0; j < 8; j++) s[j] += wf[i + j] * x[i + j];
        for (; i < k; i++) s[0] += wf[i] * x[i];
        out[c] = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    }
}

/* Dequantizes one chunk (<= 256 values) of the row at a time into a stack buffer and
 * dots it with every column, so each weight block is decoded once per call. */
static void dot_dequant(ob_type t, int64_t k, const void *w, const void *act, size_t stride,
                        int nc, float *out) {
    const ob_type_traits *tr = ob_type_traits_get(t);
    const int64_t bs = tr->block_size;
    const int64_t per = bs >= OB_QK_K ? 1 : OB_QK_K / bs; /* blocks per chunk */
    float buf[OB_QK_K];
    float acc[OB_DOT_MAX_COLS][8];
    memset(acc, 0, sizeof(acc));
    const char *wb = w;
    for (int64_t i = 0; i < k; i += bs * per) {
        int64_t nb = OB_MIN(per, (k - i) / bs), n = nb * bs;
        tr->to_float(wb, buf, n);
        wb += (size_t)nb * tr->type_size;
        for (int c = 0; c < nc; c++) {
            const float *x = (const float *)((const char *)act + (size_t)c * stride) + i;
            int64_t j = 0;
            for (; j + 8 <= n; j += 8)
                for (int l = 0; l < 8; l++) acc[c][l] += buf[j + l] * x[j + l];
            for (; j < n; j++) acc[c][0] += buf[j] * x[j];
        }
    }
    for (int c = 0; c < nc; c++) {
        float *a = acc[c];
        out[c] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    }
}

#define DEQ_KERNEL(name, type) \
    static void dot_deq_##name(int64_t k, const void *w, const void *act, size_t stride, \
                               int nc, float *out) { dot_dequant(type, k, w, act, stride, nc, out); }

DEQ_KERNEL(f16, OB_TYPE_F16)
DEQ_KERNEL(bf16, OB_TYPE_BF16)
DEQ_KERNEL(q4_0, OB_TYPE_Q4_0)
DEQ_KERNEL(q4_1, OB_TYPE_Q4_1)
DEQ_KERNEL(q5_0, OB_TYPE_Q5_0)
DEQ_KERNEL(q5_1, OB_TYPE_Q5_1)
DEQ_KERNEL(q8_0, OB_TYPE_Q8_0)
DEQ_KERNEL(q2_k, OB_TYPE_Q2_K)
DEQ_KERNEL(q3_k, OB_TYPE_Q3_K)
DEQ_KERNEL(q4_k, OB_TYPE_Q4_K)
DEQ_KERNEL(q5_k, OB_TYPE_Q5_K)
DEQ_KERNEL(q6_k, OB_TYPE_Q6_K)
DEQ_KERNEL(iq2_xxs, OB_TYPE_IQ2_XXS)
DEQ_KERNEL(iq2_xs, OB_TYPE_IQ2_XS)
DEQ_KERNEL(iq2_s, OB_TYPE_IQ2_S)
DEQ_KERNEL(iq3_xxs, OB_TYPE_IQ3_XXS)
DEQ_KERNEL(iq3_s, OB_TYPE_IQ3_S)
DEQ_KERNEL(iq1_s, OB_TYPE_IQ1_S)
DEQ_KERNEL(iq1_m, OB_TYPE_IQ1_M)
DEQ_KERNEL(iq4_nl, OB_TYPE_IQ4_NL)
DEQ_KERNEL(iq4_xs, OB_TYPE_IQ4_XS)
DEQ_KERNEL(tq1_0, OB_TYPE_TQ1_0)
DEQ_KERNEL(tq2_0, OB_TYPE_TQ2_0)
DEQ_KERNEL(q1_0, OB_TYPE_Q1_0)
DEQ_KERNEL(mxfp4, OB_TYPE_MXFP4)

ob_vec_dot_kernel ob_cpu_vec_dot_ref(ob_type t) {
    ob_vec_dot_fn f = NULL;
    switch (t) {
    case OB_TYPE_F32: f = dot_f32; break;
    case OB_TYPE_F16: f = dot_deq_f16; break;
    case OB_TYPE_BF16: f = dot_deq_bf16; break;
    case OB_TYPE_Q4_0: f = dot_deq_q4_0; break;
    case OB_TYPE_Q4_1: f = dot_deq_q4_1; break;
    case OB_TYPE_Q5_0: f = dot_deq_q5_0; break;
    case OB_TYPE_Q5_1: f = dot_deq_q5_1; break;
    case OB_TYPE_Q8_0: f = dot_deq_q8_0; break;
    case OB_TYPE_Q2_K: f = dot_deq_q2_k; break;
    case OB_TYPE_Q3_K: f = dot_deq_q3_k; break;
    case OB_TYPE_Q4_K: f = dot_deq_q4_k; break;
    case OB_TYPE_Q5_K: f = dot_deq_q5_k; break;
    case OB_TYPE_Q6_K: f = dot_deq_q6_k; break;
    case OB_TYPE_IQ2_XXS: f = dot_deq_iq2_xxs; break;
    case OB_TYPE_IQ2_XS: f = dot_deq_iq2_xs; break;
    case OB_TYPE_IQ2_S: f = dot_deq_iq2_s; break;
    case OB_TYPE_IQ3_XXS: f = dot_deq_iq3_xxs; break;
    case OB_TYPE_IQ3_S: f = dot_deq_iq3_s; break;
    case OB_TYPE_IQ1_S: f = dot_deq_iq1_s; break;
    case OB_TYPE_IQ1_M: f = dot_deq_iq1_m; break;
    case OB_TYPE_IQ4_NL: f = dot_deq_iq4_nl; break;
    case OB_TYPE_IQ4_XS: f = dot_deq_iq4_xs; break;
    case OB_TYPE_TQ1_0: f = dot_deq_tq1_0; break;
    case OB_TYPE_TQ2_0: f = dot_deq_tq2_0; break;
    case OB_TYPE_Q1_0: f = dot_deq_q1_0; break;
    case OB_TYPE_MXFP4: f = dot_deq_mxfp4; break;
    default: break;
    }
    return (ob_vec_dot_kernel){ .dot = f, .act = OB_ACT_F32 };
}
