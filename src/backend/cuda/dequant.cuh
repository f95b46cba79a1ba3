/* Device dequantization: deq32<T>(row, c, v) writes elements [32c, 32c + 32) of a row of
 * type T into v. Every supported weight type's block is a multiple of 32 elements, so a
 * 32-element chunk is the unit of work for the matvec, GEMM-staging, GET_ROWS and CPY
 * kernels. Formulas follow the reference dequantizers in src/format/quant*.c (same float
 * operation order where the reference is bit-exact). Included by op_quant.cu and op_moe.cu:
 * the lattice tables below are device globals of each translation unit (no relocatable
 * device code), so each of those files fills its own copy with ob_cu_deq_tables_fill. */
#ifndef OB_BACKEND_CUDA_DEQUANT_CUH
#define OB_BACKEND_CUDA_DEQUANT_CUH

#include "backend/cuda/cuda_int.h"
#include "format/quant_iq_grids.h"

static __device__ uint8_t g_ksigns[128];
static __device__ uint8_t g_iq2xxs[256][8];
static __device__ uint8_t g_iq2xs[512][8];
static __device__ uint8_t g_iq2s[1024][8];
static __device__ uint8_t g_iq3xxs[256][4];
static __device__ uint8_t g_iq3s[512][4];
static __device__ int8_t g_iq1s[2048][8];
static __device__ int8_t g_iq4nl[16];
static __device__ int8_t g_mxfp4[16];

/* Uploads the tables above (this translation unit's copy) from the host's. */
static inline bool ob_cu_deq_tables_fill(ob_cu_ctx *cx) {
    return OB_CU(cx, cudaMemcpyToSymbol(OB_SYMBOL(g_ksigns), ob_iq_ksigns, sizeof(ob_iq_ksigns))) &&
           OB_CU(cx, cudaMemcpyToSymbol(OB_SYMBOL(g_iq2xxs), ob_iq2xxs_grid, sizeof(ob_iq2xxs_grid))) &&
           OB_CU(cx, cudaMemcpyToSymbol(OB_SYMBOL(g_iq2xs), ob_iq2xs_grid, sizeof(ob_iq2xs_grid))) &&
           OB_CU(cx, cudaMemcpyToSymbol(OB_SYMBOL(g_iq2s), ob_iq2s_grid, sizeof(ob_iq2s_grid))) &&
           OB_CU(cx, cudaMemcpyToSymbol(OB_SYMBOL(g_iq3xxs), ob_iq3xxs_grid, sizeof(ob_iq3xxs_grid))) &&
           OB_CU(cx, cudaMemcpyToSymbol(OB_SYMBOL(g_iq3s), ob_iq3s_grid, sizeof(ob_iq3s_grid))) &&
           OB_CU(cx, cudaMemcpyToSymbol(OB_SYMBOL(g_iq1s), ob_iq1s_grid, sizeof(ob_iq1s_grid))) &&
           OB_CU(cx, cudaMemcpyToSymbol(OB_SYMBOL(g_iq4nl), ob_iq4nl_values, 16)) &&
           OB_CU(cx, cudaMemcpyToSymbol(OB_SYMBOL(g_mxfp4), ob_mxfp4_values, 16));
}

static __device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
static __device__ __forceinline__ uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static __device__ __forceinline__ uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

template <int T> struct ob_tr;
#define OB_TR(t, bs, sz) template <> struct ob_tr<t> { static constexpr int block = bs; static constexpr int bytes = sz; };
OB_TR(OB_TYPE_F32, 32, 128)   /* float types: a "block" is one 32-element chunk */
OB_TR(OB_TYPE_F16, 32, 64)
OB_TR(OB_TYPE_BF16, 32, 64)
OB_TR(OB_TYPE_Q4_0, 32, 18)
OB_TR(OB_TYPE_Q4_1, 32, 20)
OB_TR(OB_TYPE_Q5_0, 32, 22)
OB_TR(OB_TYPE_Q5_1, 32, 24)
OB_TR(OB_TYPE_Q8_0, 32, 34)
OB_TR(OB_TYPE_Q8_1, 32, 36)
OB_TR(OB_TYPE_Q2_K, 256, 84)
OB_TR(OB_TYPE_Q3_K, 256, 110)
OB_TR(OB_TYPE_Q4_K, 256, 144)
OB_TR(OB_TYPE_Q5_K, 256, 176)
OB_TR(OB_TYPE_Q6_K, 256, 210)
OB_TR(OB_TYPE_Q8_K, 256, 292)
OB_TR(OB_TYPE_IQ2_XXS, 256, 66)
OB_TR(OB_TYPE_IQ2_XS, 256, 74)
OB_TR(OB_TYPE_IQ2_S, 256, 82)
OB_TR(OB_TYPE_IQ3_XXS, 256, 98)
OB_TR(OB_TYPE_IQ3_S, 256, 110)
OB_TR(OB_TYPE_IQ1_S, 256, 50)
OB_TR(OB_TYPE_IQ1_M, 256, 56)
OB_TR(OB_TYPE_IQ4_NL, 32, 18)
OB_TR(OB_TYPE_IQ4_XS, 256, 136)
OB_TR(OB_TYPE_TQ1_0, 256, 54)
OB_TR(OB_TYPE_TQ2_0, 256, 66)
OB_TR(OB_TYPE_Q1_0, 128, 18)
OB_TR(OB_TYPE_MXFP4, 32, 17)
#undef OB_TR

/* The list every dispatcher switches over. */
#define OB_CU_FOR_EACH_TYPE(X) \
    X(OB_TYPE_F32) X(OB_TYPE_F16) X(OB_TYPE_BF16) X(OB_TYPE_Q4_0) X(OB_TYPE_Q4_1) X(OB_TYPE_Q5_0) \
    X(OB_TYPE_Q5_1) X(OB_TYPE_Q8_0) X(OB_TYPE_Q8_1) X(OB_TYPE_Q2_K) X(OB_TYPE_Q3_K) X(OB_TYPE_Q4_K) \
    X(OB_TYPE_Q5_K) X(OB_TYPE_Q6_K) X(OB_TYPE_Q8_K) X(OB_TYPE_IQ2_XXS) X(OB_TYPE_IQ2_XS) X(OB_TYPE_IQ2_S) \
    X(OB_TYPE_IQ3_XXS) X(OB_TYPE_IQ3_S) X(OB_TYPE_IQ1_S) X(OB_TYPE_IQ1_M) X(OB_TYPE_IQ4_NL) \
    X(OB_TYPE_IQ4_XS) X(OB_TYPE_TQ1_0) X(OB_TYPE_TQ2_0) X(OB_TYPE_Q1_0) X(OB_TYPE_MXFP4)

static __device__ __forceinline__ void put8s(float *v, float db, const uint8_t *g, uint8_t s) {
#pragma unroll
    for (int j = 0; j < 8; j++) { float x = db * (float)g[j]; v[j] = (s >> j) & 1 ? -x : x; }
}

static __device__ __forceinline__ int tq1_trit(uint8_t b, int k) {
    const uint8_t p3[5] = {1, 3, 9, 27, 81};
    return ((int)(uint8_t)(b * p3[k]) * 3) >> 8;
}

template <int T> static __device__ __forceinline__ void deq32(const uint8_t *row, int64_t c, float *v) {
    constexpr int cpb = ob_tr<T>::block / 32;
    const uint8_t *b = row + (c / cpb) * ob_tr<T>::bytes;
    const int s = (int)(c % cpb);
    if constexpr (T == OB_TYPE_F32) {
        const float4 *p = (const float4 *)b;
#pragma unroll
        for (int k = 0; k < 8; k++) { float4 f = p[k]; v[4 * k] = f.x; v[4 * k + 1] = f.y; v[4 * k + 2] = f.z; v[4 * k + 3] = f.w; }
    } else if constexpr (T == OB_TYPE_F16) {
        const uint16_t *p = (const uint16_t *)b;
#pragma unroll
        for (int j = 0; j < 32; j++) v[j] = h2f(p[j]);
    } else if constexpr (T == OB_TYPE_BF16) {
        const uint16_t *p = (const uint16_t *)b;
#pragma unroll
        for (int j = 0; j < 32; j++) v[j] = __uint_as_float((uint32_t)p[j] << 16);
    } else if constexpr (T == OB_TYPE_Q4_0 || T == OB_TYPE_Q4_1 || T == OB_TYPE_IQ4_NL) {
        const float d = h2f(rd16(b));
        const float m = T == OB_TYPE_Q4_1 ? h2f(rd16(b + 2)) : 0.0f;
        const uint8_t *qs = b + (T == OB_TYPE_Q4_1 ? 4 : 2);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int lo = qs[j] & 15, hi = qs[j] >> 4;
            if constexpr (T == OB_TYPE_Q4_0) { v[j] = d * (float)(lo - 8); v[j + 16] = d * (float)(hi - 8); }
            else if constexpr (T == OB_TYPE_Q4_1) { v[j] = d * (float)lo + m; v[j + 16] = d * (float)hi + m; }
            else { v[j] = d * (float)g_iq4nl[lo]; v[j + 16] = d * (float)g_iq4nl[hi]; }
        }
    } else if constexpr (T == OB_TYPE_Q5_0 || T == OB_TYPE_Q5_1) {
        const bool one = T == OB_TYPE_Q5_1;
        const float d = h2f(rd16(b)), m = one ? h2f(rd16(b + 2)) : 0.0f;
        const uint32_t qh = rd32(b + (one ? 4 : 2));
        const uint8_t *qs = b + (one ? 8 : 6);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int lo = (qs[j] & 15) | (int)((qh >> j) & 1) << 4, hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            if (one) { v[j] = d * (float)lo + m; v[j + 16] = d * (float)hi + m; }
            else { v[j] = d * (float)(lo - 16); v[j + 16] = d * (float)(hi - 16); }
        }
    } else if constexpr (T == OB_TYPE_Q8_0 || T == OB_TYPE_Q8_1) {
        const float d = h2f(rd16(b));
        const int8_t *qs = (const int8_t *)(b + (T == OB_TYPE_Q8_0 ? 2 : 4));
#pragma unroll
        for (int j = 0; j < 32; j++) v[j] = (float)qs[j] * d;
    } else if constexpr (T == OB_TYPE_Q2_K) {
        const float d = h2f(rd16(b + 80)), dmin = h2f(rd16(b + 82));
        const uint8_t *qs = b + 16 + (s / 4) * 32;
        const int sh = 2 * (s % 4);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint8_t sc = b[2 * s + h];
            const float dl = d * (float)(sc & 15), ml = dmin * (float)(sc >> 4);
#pragma unroll
            for (int j = 0; j < 16; j++) v[16 * h + j] = dl * (float)((qs[16 * h + j] >> sh) & 3) - ml;
        }
    } else if constexpr (T == OB_TYPE_Q3_K) {
        const float d = h2f(rd16(b + 108));
        const uint8_t *qs = b + 32 + (s / 4) * 32, *sc = b + 96;
        const int sh = 2 * (s % 4);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int i = 2 * s + h;
            const int lo = (sc[i % 8] >> (4 * (i / 8))) & 15, hi = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
            const float dl = d * (float)((lo | hi << 4) - 32);
#pragma unroll
            for (int j = 0; j < 16; j++) {
                const int e = 16 * h + j;
                const int q = (qs[e] >> sh) & 3, hb = (b[e] >> s) & 1;
                v[e] = dl * (float)(q - (hb ? 0 : 4));
            }
        }
    } else if constexpr (T == OB_TYPE_Q4_K || T == OB_TYPE_Q5_K) {
        const float d = h2f(rd16(b)), dmin = h2f(rd16(b + 2));
        const uint8_t *sc = b + 4;
        int scv, mv;
        if (s < 4) { scv = sc[s] & 63; mv = sc[s + 4] & 63; }
        else { scv = (sc[s + 4] & 15) | (sc[s - 4] >> 6) << 4; mv = (sc[s + 4] >> 4) | (sc[s] >> 6) << 4; }
        const float dl = d * (float)scv, ml = dmin * (float)mv;
        const uint8_t *qs = b + (T == OB_TYPE_Q4_K ? 16 : 48) + (s / 2) * 32;
        const int sh = 4 * (s % 2);
#pragma unroll
        for (int j = 0; j < 32; j++) {
            int q = (qs[j] >> sh) & 15;
            if constexpr (T == OB_TYPE_Q5_K) q |= ((b[16 + j] >> s) & 1) << 4;
            v[j] = dl * (float)q - ml;
        }
    } else if constexpr (T == OB_TYPE_Q6_K) {
        const float d = h2f(rd16(b + 208));
        const int g = s / 4, r4 = s % 4;
        const uint8_t *ql = b + 64 * g + 32 * (r4 % 2), *qh = b + 128 + 32 * g;
        const int8_t *scs = (const int8_t *)(b + 192);
        const int shl = 4 * (r4 / 2), shh = 2 * r4;
#pragma unroll
        for (int j = 0; j < 32; j++) {
            const int q = (((ql[j] >> shl) & 15) | ((qh[j] >> shh) & 3) << 4) - 32;
            v[j] = (d * (float)scs[2 * s + j / 16]) * (float)q;
        }
    } else if constexpr (T == OB_TYPE_Q8_K) {
        float d; memcpy(&d, b, 4);
        const int8_t *qs = (const int8_t *)(b + 4) + 32 * s;
#pragma unroll
        for (int j = 0; j < 32; j++) v[j] = d * (float)qs[j];
    } else if constexpr (T == OB_TYPE_IQ2_XXS) {
        const float d = h2f(rd16(b));
        const uint8_t *qs = b + 2 + 8 * s;
        const uint32_t aux = rd32(qs + 4);
        const float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
#pragma unroll
        for (int l = 0; l < 4; l++) put8s(v + 8 * l, db, g_iq2xxs[qs[l]], g_ksigns[(aux >> (7 * l)) & 127]);
    } else if constexpr (T == OB_TYPE_IQ2_XS || T == OB_TYPE_IQ2_S) {
        const float d = h2f(rd16(b));
        const uint8_t *scales = b + (T == OB_TYPE_IQ2_XS ? 66 : 74);
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const int g = 4 * s + l;
            const int ls = (scales[g / 4] >> (4 * ((g / 2) & 1))) & 15;
            const float db = d * (0.5f + (float)ls) * 0.25f;
            if constexpr (T == OB_TYPE_IQ2_XS) {
                const uint16_t q = rd16(b + 2 + 2 * g);
                put8s(v + 8 * l, db, g_iq2xs[q & 511], g_ksigns[q >> 9]);
            } else {
                const int idx = b[2 + g] | (((b[66 + g / 4] >> (2 * (g % 4))) & 3) << 8);
                put8s(v + 8 * l, db, g_iq2s[idx], b[2 + 32 + g]);
            }
        }
    } else if constexpr (T == OB_TYPE_IQ3_XXS) {
        const float d = h2f(rd16(b));
        const uint8_t *qs = b + 2;
        const uint32_t aux = rd32(qs + 64 + 4 * s);
        const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint8_t sg = g_ksigns[(aux >> (7 * l)) & 127];
            const uint8_t *g0 = g_iq3xxs[qs[8 * s + 2 * l]], *g1 = g_iq3xxs[qs[8 * s + 2 * l + 1]];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float v0 = db * (float)g0[j], v1 = db * (float)g1[j];
                v[8 * l + j] = (sg >> j) & 1 ? -v0 : v0;
                v[8 * l + j + 4] = (sg >> (j + 4)) & 1 ? -v1 : v1;
            }
        }
    } else if constexpr (T == OB_TYPE_IQ3_S) {
        const float d = h2f(rd16(b));
        const float db = d * (float)(1 + 2 * ((b[106 + s / 2] >> (4 * (s & 1))) & 15));
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int g = 8 * s + k;
            const int idx = b[2 + g] | (((b[66 + g / 8] >> (g % 8)) & 1) << 8);
            const uint8_t sg = b[74 + g / 2];
            const int sh = 4 * (g & 1);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float x = db * (float)g_iq3s[idx][j];
                v[4 * k + j] = (sg >> (sh + j)) & 1 ? -x : x;
            }
        }
    } else if constexpr (T == OB_TYPE_IQ1_S) {
        const float d = h2f(rd16(b));
        const uint16_t qh = rd16(b + 34 + 2 * s);
        const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
        const float delta = qh & 0x8000 ? -0.125f : 0.125f;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const int8_t *g = g_iq1s[b[2 + 4 * s + l] | (((qh >> (3 * l)) & 7) << 8)];
#pragma unroll
            for (int j = 0; j < 8; j++) v[8 * l + j] = dl * ((float)g[j] + delta);
        }
    } else if constexpr (T == OB_TYPE_IQ1_M) {
        uint16_t sc[4];
#pragma unroll
        for (int k = 0; k < 4; k++) sc[k] = rd16(b + 48 + 2 * k);
        const uint16_t dh = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        const float d = h2f(dh);
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const int g = 4 * s + l, j2 = g / 2;
            const float dl = d * (float)(2 * ((sc[j2 / 4] >> (3 * (j2 % 4))) & 7) + 1);
            const int nib = (b[32 + g / 2] >> (4 * (g & 1))) & 15;
            const float delta = nib & 8 ? -0.125f : 0.125f;
            const int8_t *gr = g_iq1s[b[g] | ((nib & 7) << 8)];
#pragma unroll
            for (int j = 0; j < 8; j++) v[8 * l + j] = dl * ((float)gr[j] + delta);
        }
    } else if constexpr (T == OB_TYPE_IQ4_XS) {
        const float d = h2f(rd16(b));
        const int lo = (b[4 + s / 2] >> (4 * (s % 2))) & 15, hi = (rd16(b + 2) >> (2 * s)) & 3;
        const float dl = d * (float)((lo | hi << 4) - 32);
        const uint8_t *qs = b + 8 + 16 * s;
#pragma unroll
        for (int j = 0; j < 16; j++) { v[j] = dl * (float)g_iq4nl[qs[j] & 15]; v[j + 16] = dl * (float)g_iq4nl[qs[j] >> 4]; }
    } else if constexpr (T == OB_TYPE_TQ1_0) {
        const float d = h2f(rd16(b + 52));
#pragma unroll
        for (int j = 0; j < 32; j++) {
            const int e = 32 * s + j;
            int t;
            if (e < 160) t = tq1_trit(b[e % 32], e / 32);
            else if (e < 240) t = tq1_trit(b[32 + (e - 160) % 16], (e - 160) / 16);
            else t = tq1_trit(b[48 + (e - 240) % 4], (e - 240) / 4);
            v[j] = d * (float)(t - 1);
        }
    } else if constexpr (T == OB_TYPE_TQ2_0) {
        const float d = h2f(rd16(b + 64));
        const uint8_t *qs = b + 32 * (s / 4);
        const int sh = 2 * (s % 4);
#pragma unroll
        for (int j = 0; j < 32; j++) v[j] = d * (float)(((qs[j] >> sh) & 3) - 1);
    } else if constexpr (T == OB_TYPE_Q1_0) {
        const float d = h2f(rd16(b));
        const uint32_t bits = rd32(b + 2 + 4 * s);
#pragma unroll
        for (int j = 0; j < 32; j++) v[j] = (bits >> j) & 1 ? d : -d;
    } else if constexpr (T == OB_TYPE_MXFP4) {
        const uint8_t e = b[0];
        const float d = __uint_as_float(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
#pragma unroll
        for (int j = 0; j < 16; j++) { v[j] = d * (float)g_mxfp4[b[1 + j] & 15]; v[j + 16] = d * (float)g_mxfp4[b[1 + j] >> 4]; }
    }
}

/* Element i of a plain-typed (F32, F16, BF16) array at p (p only element-aligned): rows
 * that are not whole 32-element chunks. */
template <int T> static __device__ __forceinline__ float plain_at(const uint8_t *p, int64_t i) {
    if constexpr (T == OB_TYPE_F32) return ((const float *)p)[i];
    else if constexpr (T == OB_TYPE_F16) return h2f(((const uint16_t *)p)[i]);
    else return __uint_as_float((uint32_t)((const uint16_t *)p)[i] << 16);
}

#endif
