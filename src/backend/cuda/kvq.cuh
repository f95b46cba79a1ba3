/* The KV cache's block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: blocks of 32) and BF16
 * as KV_STORE writes them and the attention kernels read them, the type a run-time value.
 * The encoders give the bytes of the C reference quantizers (src/format/quant.c,
 * quant_small.c) bit for bit: products and sums by __fmul_rn / __fadd_rn (never contracted
 * into a fused multiply-add), divisions by __fdiv_rn, the f16 scales by ob_cu_f16_bits. Block
 * sizes and offsets are the layouts of format/quant.h. Included by rowops.cuh. */
#ifndef OB_BACKEND_CUDA_KVQ_CUH
#define OB_BACKEND_CUDA_KVQ_CUH

#include "backend/cuda/cuda_int.h"
#include <stddef.h>

static __constant__ int8_t g_kvq_iq4nl[16] = {OB_IQ4NL_VALUES};

/* Whether a cache of type t is stored in blocks of 32 (host and device). */
static __host__ __device__ __forceinline__ bool kvq_block_type(int t) {
    return t == OB_TYPE_Q8_0 || t == OB_TYPE_Q4_0 || t == OB_TYPE_Q4_1 || t == OB_TYPE_Q5_0 || t == OB_TYPE_Q5_1 ||
           t == OB_TYPE_IQ4_NL;
}

/* Bytes of a block of type t (kvq_block_type). */
static __device__ __forceinline__ int kvq_bytes(int t) {
    switch (t) {
    case OB_TYPE_Q8_0: return (int)sizeof(ob_block_q8_0);
    case OB_TYPE_Q4_0: return (int)sizeof(ob_block_q4_0);
    case OB_TYPE_Q4_1: return (int)sizeof(ob_block_q4_1);
    case OB_TYPE_Q5_0: return (int)sizeof(ob_block_q5_0);
    case OB_TYPE_Q5_1: return (int)sizeof(ob_block_q5_1);
    default: return (int)sizeof(ob_block_iq4_nl);
    }
}

/* Where a block of type t keeps its codes (qs) and, for Q5_*, its fifth bits (qh). */
static __device__ __forceinline__ int kvq_qs(int t) {
    return t == OB_TYPE_Q4_1 ? (int)offsetof(ob_block_q4_1, qs) : t == OB_TYPE_Q5_0 ? (int)offsetof(ob_block_q5_0, qs)
           : t == OB_TYPE_Q5_1 ? (int)offsetof(ob_block_q5_1, qs) : (int)offsetof(ob_block_q4_0, qs);
}
static __device__ __forceinline__ int kvq_qh(int t) {
    return t == OB_TYPE_Q5_1 ? (int)offsetof(ob_block_q5_1, qh) : (int)offsetof(ob_block_q5_0, qh);
}

static __device__ __forceinline__ float kvq_h2f(const uint8_t *p) { return __half2float(__ushort_as_half((uint16_t)(p[0] | p[1] << 8))); }
static __device__ __forceinline__ void kvq_put16(uint8_t *p, uint16_t h) {
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

/* f32 -> bf16 bits as ob_f32_to_bf16: round to nearest even, a NaN kept quiet. */
static __device__ __forceinline__ uint16_t kvq_bf16_bits(float f) {
    const uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64);
    return (uint16_t)((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

/* ob_trunc_code: a 4/5-bit code by truncation, NaN and negatives 0, at most qmax. */
static __device__ __forceinline__ int kvq_trunc(float v, int qmax) { return !(v > 0.0f) ? 0 : v >= (float)qmax ? qmax : (int)v; }

/* Index of the IQ4_NL value nearest v, the first on ties (ob_iq4_nearest). */
static __device__ __forceinline__ int kvq_iq4_nearest(float v) {
    int best = 0;
    float berr = fabsf(__fsub_rn(v, (float)g_kvq_iq4nl[0]));
    for (int k = 1; k < 16; k++) {
        const float err = fabsf(__fsub_rn(v, (float)g_kvq_iq4nl[k]));
        if (err < berr) { berr = err; best = k; }
    }
    return best;
}

/* ob_iq4_fit: the least-squares scale of 32 values over 21 stretches of the grid. */
static __device__ float kvq_iq4_fit(const float *x) {
    float amax = 0.0f, mx = 0.0f;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); mx = x[j]; }
    if (amax < 1e-30f) return 0.0f;
    float best_s = 0.0f, best_score = -1.0f;
    for (int k = -10; k <= 10; k++) {
        const float id = __fdiv_rn((float)g_kvq_iq4nl[0] + (float)k, mx);
        float sxv = 0.0f, svv = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float v = (float)g_kvq_iq4nl[kvq_iq4_nearest(__fmul_rn(id, x[j]))];
            sxv = __fadd_rn(sxv, __fmul_rn(x[j], v));
            svv = __fadd_rn(svv, __fmul_rn(v, v));
        }
        if (svv > 0.0f) {
            const float score = __fdiv_rn(__fmul_rn(sxv, sxv), svv);
            if (score > best_score) { best_score = score; best_s = __fdiv_rn(sxv, svv); }
        }
    }
    return best_s;
}

/* Writes 32 values x as one block of type t (kvq_block_type) at o (byte stores: blocks are
 * only 2-aligned). */
static __device__ void kvq_store(int t, const float *x, uint8_t *o) {
    if (t == OB_TYPE_Q8_0) {
        ob_cu_quant_q8_0(x, o);
        return;
    }
    if (t == OB_TYPE_IQ4_NL) {
        const uint16_t dh = ob_cu_f16_bits(kvq_iq4_fit(x));
        const float dl = __half2float(__ushort_as_half(dh)), id = dl != 0.0f ? __fdiv_rn(1.0f, dl) : 0.0f;
        kvq_put16(o, dh);
        for (int j = 0; j < 16; j++)
            o[2 + j] = (uint8_t)(kvq_iq4_nearest(__fmul_rn(id, x[j])) | kvq_iq4_nearest(__fmul_rn(id, x[j + 16])) << 4);
        return;
    }
    /* Q4_0 / Q5_0: the extreme value maps to -8 (-16); Q4_1 / Q5_1: [min, max] in 15 (31) steps */
    const bool five = t == OB_TYPE_Q5_0 || t == OB_TYPE_Q5_1, minv = t == OB_TYPE_Q4_1 || t == OB_TYPE_Q5_1;
    const int qmax = five ? 31 : 15;
    float d, mn = 0.0f, off;
    if (minv) {
        float mx = x[0];
        mn = x[0];
        for (int j = 1; j < 32; j++) { mn = fminf(mn, x[j]); mx = fmaxf(mx, x[j]); }
        d = __fdiv_rn(__fsub_rn(mx, mn), (float)qmax);
        off = 0.5f;
    } else {
        float amax = 0.0f, mx = 0.0f;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); mx = x[j]; }
        d = __fdiv_rn(mx, five ? -16.0f : -8.0f);
        off = five ? 16.5f : 8.5f;
    }
    const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    kvq_put16(o, ob_cu_f16_bits(d));
    if (minv) kvq_put16(o + 2, ob_cu_f16_bits(mn));
    uint8_t *qs = o + kvq_qs(t);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        const float a = minv ? __fsub_rn(x[j], mn) : x[j], b = minv ? __fsub_rn(x[j + 16], mn) : x[j + 16];
        const int q0 = kvq_trunc(__fadd_rn(__fmul_rn(a, id), off), qmax), q1 = kvq_trunc(__fadd_rn(__fmul_rn(b, id), off), qmax);
        qs[j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
        qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
    }
    if (five)
        for (int k = 0; k < 4; k++) o[kvq_qh(t) + k] = (uint8_t)(qh >> (8 * k));
}

/* Value j (< 32) of the block of type t at b, as the C reference dequantizes it. */
static __device__ __forceinline__ float kvq_at(int t, const uint8_t *b, int j) {
    const float d = kvq_h2f(b);
    if (t == OB_TYPE_Q8_0) return (float)(int8_t)b[offsetof(ob_block_q8_0, qs) + j] * d;
    const uint8_t c = b[kvq_qs(t) + (j & 15)];
    int q = j < 16 ? c & 15 : c >> 4;
    if (t == OB_TYPE_Q5_0 || t == OB_TYPE_Q5_1) {
        const uint8_t *h = b + kvq_qh(t);
        q |= ((h[j >> 3] >> (j & 7)) & 1) << 4;
    }
    switch (t) {
    case OB_TYPE_Q4_0: return d * (float)(q - 8);
    case OB_TYPE_Q5_0: return d * (float)(q - 16);
    case OB_TYPE_IQ4_NL: return d * (float)g_kvq_iq4nl[q];
    default: return __fadd_rn(__fmul_rn(d, (float)q), kvq_h2f(b + 2)); /* Q4_1, Q5_1: d q + m */
    }
}

/* sq[0..32) dotted with the 32 values of the block of type t at b. */
static __device__ __forceinline__ float kvq_dot32(int t, const uint8_t *b, const float *sq) {
    float s = 0.0f;
#pragma unroll 4
    for (int j = 0; j < 32; j++) s += sq[j] * kvq_at(t, b, j);
    return s;
}

#endif
