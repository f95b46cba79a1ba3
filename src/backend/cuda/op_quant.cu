/* Ops that read weight-typed data through the device dequantizers: MATMUL (quantized
 * matvec for decode, dequantize-to-f16 + cuBLAS for prefill), GET_ROWS and CPY.
 *
 *   MATMUL: src0 W [K, N] any supported type; src1 x F32 [K, T]; dst F32 [N, T].
 *   T <= OB_MMV_MAX_T, hot types: op_mmvq.cu (int8 activations, dp4a). Other types:
 *   one warp per output row; each lane dequantizes 32-element chunks
 *   of the row (adjacent lanes read adjacent bytes) and dots them with the T columns, so
 *   the weights stream from memory once per step.
 *   Larger T: the int8 tensor-core MMQ (op_mmq.cu) for its types, up to
 *   ONEBIT_CUDA_MMQ_MAX_T columns. Otherwise W is dequantized slab by slab into f16
 *   (cx->tmp; k_deq16 for the hot types), x is converted to f16, and cuBLAS multiplies them
 *   on tensor cores with f32 accumulation. F32 weights use plain SGEMM.
 *
 * The plain types (F32, F16, BF16) take any row length: rows that are not whole 32-element
 * chunks (small encoders: jina-bert-v2's test model has 72) go through element kernels
 * (k_mmv_plain for every column count, k_get_rows_plain, k_cpy_plain). Block types keep
 * whole-chunk rows. */
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/cuda_mmq.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define OB_MMV_MAX_T 8 /* f32-activation matvec up to this many columns */

/* op_mmq.cu accepts n and ONEBIT_CUDA_MMQ_MAX_T does not send it to cuBLAS: above 32
 * columns prefill through dequant to f16 + cuBLAS beat MMQ's prefill tiles 3x, and slabs
 * of 64 x 2^20 weights beat 16 (bench/NOTES-cuda-3-7.md: Session 3). */
static bool mmq_takes(const ob_cu_ctx *cx, const ob_tensor *n) {
    return ob_cu_mmq_applies(cx, n) && ob_nrows(n->src[1]) <= cx->opt.mmq_max_t;
}

bool ob_cu_tables_init(ob_cu_ctx *cx) {
    cx->slab_elems = (int64_t)cx->opt.blas_slab << 20;
    return ob_cu_deq_tables_fill(cx);
}

bool ob_cu_type_has_deq(ob_type t) {
    switch (t) {
#define X(tt) case tt: return true;
        OB_CU_FOR_EACH_TYPE(X)
#undef X
    default: return false;
    }
}

/* ---- kernels ----------------------------------------------------------------------------- */

/* y[t][row] = dot(W row, x[t]); blockDim.x = 32 * rows per block. */
template <int T, int NT>
__global__ void k_mmv(const uint8_t *__restrict__ W, size_t rb, const float *__restrict__ x, float *__restrict__ y,
                      int64_t K, int64_t N, int nt) {
    OB_CU_MARK();
    const int lane = threadIdx.x % OB_WARP;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / OB_WARP) + threadIdx.x / OB_WARP;
    if (row >= N) return;
    const uint8_t *wr = W + row * rb;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    const int64_t nc = K / 32;
    for (int64_t c = lane; c < nc; c += OB_WARP) {
        float v[32];
        deq32<T>(wr, c, v);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= nt) break;
            const float4 *xp = (const float4 *)(x + t * K + c * 32);
            float s = 0.0f;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const float4 f = xp[k];
                s += v[4 * k] * f.x + v[4 * k + 1] * f.y + v[4 * k + 2] * f.z + v[4 * k + 3] * f.w;
            }
            acc[t] += s;
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float s = acc[t];
        for (int o = OB_WARP / 2; o > 0; o /= 2) s += OB_SHFL_XOR(s, o);
        if (lane == 0 && t < nt) y[t * N + row] = s;
    }
}

/* Rows [0, rows) of W -> f16, one thread per 32-element chunk. */
template <int T>
__global__ void k_deq_f16(const uint8_t *__restrict__ W, size_t rb, __half *__restrict__ out, int64_t K, int64_t rows) {
    OB_CU_MARK();
    const int64_t nc = K / 32, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nc * rows) return;
    const int64_t r = i / nc, c = i % nc;
    float v[32];
    deq32<T>(W + r * rb, c, v);
    __half2 *o = (__half2 *)(out + r * K + c * 32);
#pragma unroll
    for (int j = 0; j < 16; j++) o[j] = __floats2half2_rn(v[2 * j], v[2 * j + 1]);
}

__global__ void k_f32_to_f16(const float *__restrict__ x, __half *__restrict__ y, int64_t n) {
    OB_CU_MARK();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2half_rn(x[i]);
}

/* ---- prefill staging: weights -> f16 ------------------------------------------------------
 * A slab of whole rows is a contiguous run of blocks, and so is its f16 image, so staging
 * dequantizes a flat block array: each 256-thread CTA copies 4096 elements' worth of blocks
 * into shared memory with 16-byte loads (4096 / block * bytes is a multiple of 16 for every
 * type, so consecutive tiles stay 16-aligned when the slab is), then each thread decodes
 * twice 8 consecutive elements, each written as one 16-byte store: in each store the lanes
 * cover consecutive 16-byte pieces of the output. Products and differences are rounded one
 * at a time (no FMA contraction) so the f16 values equal the CPU reference's f32 dequant
 * rounded to f16. */
#define OB_DQ_ELEMS 4096 /* per CTA tile: 2 x 8 elements per thread, 16 KB of loads in flight per SM */
#define OB_DQ_THREADS 256

static bool deq16_type(ob_type t) {
    return t == OB_TYPE_Q4_K || t == OB_TYPE_Q5_K || t == OB_TYPE_Q6_K || t == OB_TYPE_Q8_0 || t == OB_TYPE_Q4_0 ||
           t == OB_TYPE_Q1_0 || t == OB_TYPE_TQ2_0;
}

/* 8 bytes at p; p is A-aligned (8, or 2 for blocks whose size is only even). */
template <int A> static __device__ __forceinline__ uint2 sm_ld8(const uint8_t *p) {
    if constexpr (A >= 8) return *(const uint2 *)p;
    else {
        const uint16_t *q = (const uint16_t *)p;
        return make_uint2((uint32_t)q[0] | (uint32_t)q[1] << 16, (uint32_t)q[2] | (uint32_t)q[3] << 16);
    }
}
static __device__ __forceinline__ float sm_h2f(const uint8_t *p) { return __half2float(__ushort_as_half(*(const uint16_t *)p)); }
static __device__ __forceinline__ int byte_of(uint2 w, int k) { return (int)(((k < 4 ? w.x : w.y) >> (8 * (k & 3))) & 255); }

/* Elements [e, e + 8) (e % 8 == 0) of the block at b (shared memory, 2-aligned; 16-aligned
 * for Q4_K and Q5_K, whose sizes are multiples of 16). */
template <int T> static __device__ __forceinline__ void deq8(const uint8_t *b, int e, float *v) {
    if constexpr (T == OB_TYPE_Q4_K || T == OB_TYPE_Q5_K) {
        const int s = e / 32, j = e % 32;
        const float d = sm_h2f(b), dmin = sm_h2f(b + 2);
        const uint8_t *sc = b + 4;
        int scv, mv;
        if (s < 4) { scv = sc[s] & 63; mv = sc[s + 4] & 63; }
        else { scv = (sc[s + 4] & 15) | (sc[s - 4] >> 6) << 4; mv = (sc[s + 4] >> 4) | (sc[s] >> 6) << 4; }
        const float dl = d * (float)scv, ml = dmin * (float)mv;
        const uint2 q = sm_ld8<8>(b + (T == OB_TYPE_Q4_K ? 16 : 48) + (s / 2) * 32 + j);
        const int sh = 4 * (s % 2);
        uint2 h = make_uint2(0, 0);
        if constexpr (T == OB_TYPE_Q5_K) h = sm_ld8<8>(b + 16 + j);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int x = (byte_of(q, k) >> sh) & 15;
            if constexpr (T == OB_TYPE_Q5_K) x |= ((byte_of(h, k) >> s) & 1) << 4;
            v[k] = __fsub_rn(__fmul_rn(dl, (float)x), ml);
        }
    } else if constexpr (T == OB_TYPE_Q6_K) {
        const int g = e / 128, r4 = (e % 128) / 32, j = e % 32;
        const float d = sm_h2f(b + 208);
        const float dl = __fmul_rn(d, (float)(int8_t)b[192 + e / 16]);
        const uint2 ql = sm_ld8<2>(b + 64 * g + 32 * (r4 % 2) + j), qh = sm_ld8<2>(b + 128 + 32 * g + j);
        const int shl = 4 * (r4 / 2), shh = 2 * r4;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int x = (((byte_of(ql, k) >> shl) & 15) | ((byte_of(qh, k) >> shh) & 3) << 4) - 32;
            v[k] = __fmul_rn(dl, (float)x);
        }
    } else if constexpr (T == OB_TYPE_Q8_0) {
        const float d = sm_h2f(b);
        const uint2 q = sm_ld8<2>(b + 2 + e);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = __fmul_rn((float)(int8_t)byte_of(q, k), d);
    } else if constexpr (T == OB_TYPE_Q4_0) {
        const float d = sm_h2f(b);
        const uint2 q = sm_ld8<2>(b + 2 + e % 16);
        const int sh = 4 * (e / 16);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = __fmul_rn(d, (float)(((byte_of(q, k) >> sh) & 15) - 8));
    } else if constexpr (T == OB_TYPE_Q1_0) {
        const float d = sm_h2f(b);
        const int bits = b[2 + e / 8];
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = (bits >> k) & 1 ? d : -d;
    } else if constexpr (T == OB_TYPE_TQ2_0) {
        const float d = sm_h2f(b + 64);
        const uint2 q = sm_ld8<2>(b + 32 * (e / 128) + e % 32);
        const int sh = 2 * ((e % 128) / 32);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = __fmul_rn(d, (float)(((byte_of(q, k) >> sh) & 3) - 1));
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = 0.0f; /* never launched: deq16_type */
    }
}

/* out[0, nblk * block) = the nblk blocks at src, as f16. out 16-aligned. One tile
 * (OB_DQ_ELEMS elements) per CTA. */
template <int T>
__global__ void __launch_bounds__(OB_DQ_THREADS) k_deq16(const uint8_t *__restrict__ src, __half *__restrict__ out, int64_t nblk) {
    OB_CU_MARK();
    constexpr int BS = ob_tr<T>::block, BY = ob_tr<T>::bytes, NB = OB_DQ_ELEMS / BS, TB = NB * BY;
    static_assert(TB % 16 == 0, "tiles must stay 16-aligned");
    __shared__ __align__(16) uint8_t sm[TB];
    const int64_t b0 = (int64_t)blockIdx.x * NB;
    const int nb = (int)(nblk - b0 < NB ? nblk - b0 : NB), bytes = nb * BY;
    const uint8_t *g = src + b0 * BY;
    int i0 = 0;
    if (((uintptr_t)g & 15) == 0) {
        for (int i = threadIdx.x; i < bytes / 16; i += OB_DQ_THREADS) ((uint4 *)sm)[i] = ((const uint4 *)g)[i];
        i0 = bytes & ~15;
    }
    for (int i = i0 + threadIdx.x; i < bytes; i += OB_DQ_THREADS) sm[i] = g[i];
    __syncthreads();
#pragma unroll
    for (int p = 0; p < OB_DQ_ELEMS / 8 / OB_DQ_THREADS; p++) {
        const int e = (p * OB_DQ_THREADS + threadIdx.x) * 8;
        if (e >= nb * BS) break;
        float v[8];
        deq8<T>(sm + (e / BS) * BY, e % BS, v);
        uint4 o;
        __half2 h[4];
#pragma unroll
        for (int k = 0; k < 4; k++) h[k] = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
        memcpy(&o, h, 16);
        *(uint4 *)(out + b0 * BS + e) = o;
    }
}

template <int T> static void launch_deq16(ob_cu_ctx *cx, const uint8_t *src, __half *out, int64_t nblk) {
    constexpr int NB = OB_DQ_ELEMS / ob_tr<T>::block;
    (void)OB_CU_LAUNCH_PLAIN(cx, (k_deq16<T>), ob_cu_blocks(nblk, NB), OB_DQ_THREADS, 0, src, out, nblk);
}

/* Flat dequant of ne elements (whole blocks) to f16 with k_deq16; false when the type has
 * no such kernel or out is not 16-aligned (the caller takes the generic kernels). */
static bool deq16(ob_cu_ctx *cx, ob_type t, const uint8_t *src, __half *out, int64_t ne) {
    if (!deq16_type(t) || ((uintptr_t)out & 15) != 0) return false;
    const int64_t nblk = ne / ob_type_block_size(t);
    switch (t) {
    case OB_TYPE_Q4_K: launch_deq16<OB_TYPE_Q4_K>(cx, src, out, nblk); break;
    case OB_TYPE_Q5_K: launch_deq16<OB_TYPE_Q5_K>(cx, src, out, nblk); break;
    case OB_TYPE_Q6_K: launch_deq16<OB_TYPE_Q6_K>(cx, src, out, nblk); break;
    case OB_TYPE_Q8_0: launch_deq16<OB_TYPE_Q8_0>(cx, src, out, nblk); break;
    case OB_TYPE_Q4_0: launch_deq16<OB_TYPE_Q4_0>(cx, src, out, nblk); break;
    case OB_TYPE_Q1_0: launch_deq16<OB_TYPE_Q1_0>(cx, src, out, nblk); break;
    case OB_TYPE_TQ2_0: launch_deq16<OB_TYPE_TQ2_0>(cx, src, out, nblk); break;
    default: return false;
    }
    return true;
}

/* x [K, T] f32 -> f16, 8 elements per thread (n % 8 == 0, both 16-aligned). */
__global__ void k_f32_to_f16_x8(const float4 *__restrict__ x, uint4 *__restrict__ y, int64_t n8) {
    OB_CU_MARK();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    const float4 a = x[2 * i], b = x[2 * i + 1];
    __half2 h[4] = {__floats2half2_rn(a.x, a.y), __floats2half2_rn(a.z, a.w), __floats2half2_rn(b.x, b.y),
                    __floats2half2_rn(b.z, b.w)};
    uint4 o;
    memcpy(&o, h, 16);
    y[i] = o;
}

/* dst[t] = table[ids[t]] as f32; ids out of range give zeros (the engine validates them
 * first; this only keeps a bad id from reading wild memory). */
template <int T>
__global__ void k_get_rows(const uint8_t *__restrict__ tab, size_t rb, int64_t rows, const int32_t *__restrict__ ids,
                           float *__restrict__ y, int64_t ne0, int64_t nt) {
    OB_CU_MARK();
    const int64_t nc = ne0 / 32, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nc * nt) return;
    const int64_t t = i / nc, c = i % nc;
    const int32_t id = ids[t];
    float v[32];
    if (id >= 0 && id < rows) deq32<T>(tab + (size_t)id * rb, c, v);
    else
        for (int j = 0; j < 32; j++) v[j] = 0.0f;
    float *o = y + t * ne0 + c * 32;
#pragma unroll
    for (int j = 0; j < 32; j++) o[j] = v[j];
}

/* f32 -> bf16, round to nearest even; a NaN stays a (quiet) NaN. */
static __device__ __forceinline__ uint16_t f32_to_bf16(float f) {
    const uint32_t u = __float_as_uint(f);
    return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 64) : (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

/* CPY of a contiguous tensor seen as one flat row: 32 elements per thread. */
template <int T>
__global__ void k_cpy_deq(const uint8_t *__restrict__ src, void *__restrict__ dst, int dtype, int64_t nc) {
    OB_CU_MARK();
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= nc) return;
    float v[32];
    deq32<T>(src, c, v);
    if (dtype == OB_TYPE_F32) {
        float *o = (float *)dst + c * 32;
        for (int j = 0; j < 32; j++) o[j] = v[j];
    } else if (dtype == OB_TYPE_F16) {
        __half *o = (__half *)dst + c * 32;
        for (int j = 0; j < 32; j++) o[j] = __float2half_rn(v[j]);
    } else if (dtype == OB_TYPE_BF16) {
        uint16_t *o = (uint16_t *)dst + c * 32;
        for (int j = 0; j < 32; j++) o[j] = f32_to_bf16(v[j]);
    } else { /* Q8_0 */
        ob_cu_quant_q8_0(v, (uint8_t *)dst + c * 34);
    }
}

/* ---- plain types at any row length --------------------------------------------------------- */

static bool plain_type(ob_type t) { return t == OB_TYPE_F32 || t == OB_TYPE_F16 || t == OB_TYPE_BF16; }

/* Rows the 32-element chunk kernels cannot take: those go to the element kernels below. */
static bool plain_odd(ob_type t, int64_t ne0) { return plain_type(t) && ne0 % 32 != 0; }

/* k_mmv for plain rows of any K: the warp's lanes take elements lane, lane + 32, ... */
template <int T, int NT>
__global__ void k_mmv_plain(const uint8_t *__restrict__ W, size_t rb, const float *__restrict__ x, float *__restrict__ y,
                            int64_t K, int64_t N, int nt) {
    OB_CU_MARK();
    const int lane = threadIdx.x % OB_WARP;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / OB_WARP) + threadIdx.x / OB_WARP;
    if (row >= N) return;
    const uint8_t *wr = W + row * rb;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    for (int64_t k = lane; k < K; k += OB_WARP) {
        const float w = plain_at<T>(wr, k);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= nt) break;
            acc[t] += w * x[t * K + k];
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float s = acc[t];
        for (int o = OB_WARP / 2; o > 0; o /= 2) s += OB_SHFL_XOR(s, o);
        if (lane == 0 && t < nt) y[t * N + row] = s;
    }
}

/* k_get_rows for plain rows of any length: one thread per output element. */
template <int T>
__global__ void k_get_rows_plain(const uint8_t *__restrict__ tab, size_t rb, int64_t rows, const int32_t *__restrict__ ids,
                                 float *__restrict__ y, int64_t ne0, int64_t nt) {
    OB_CU_MARK();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= ne0 * nt) return;
    const int64_t t = i / ne0, j = i % ne0;
    const int32_t id = ids[t];
    y[i] = id >= 0 && id < rows ? plain_at<T>(tab + (size_t)id * rb, j) : 0.0f;
}

/* CPY (also weight staging to f16) of ne plain elements of any count: one thread each. */
template <int T>
__global__ void k_cpy_plain(const uint8_t *__restrict__ src, void *__restrict__ dst, int dtype, int64_t ne) {
    OB_CU_MARK();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= ne) return;
    const float v = plain_at<T>(src, i);
    if (dtype == OB_TYPE_F32) ((float *)dst)[i] = v;
    else if (dtype == OB_TYPE_F16) ((__half *)dst)[i] = __float2half_rn(v);
    else ((uint16_t *)dst)[i] = f32_to_bf16(v);
}

static bool launch_cpy_plain(ob_cu_ctx *cx, ob_type t, const void *src, void *dst, ob_type dtype, int64_t ne) {
    const unsigned grid = ob_cu_blocks(ne, 256);
    const uint8_t *s = (const uint8_t *)src;
    switch (t) {
    case OB_TYPE_F32: (void)OB_CU_LAUNCH_PLAIN(cx, (k_cpy_plain<OB_TYPE_F32>), grid, 256, 0, s, dst, (int)dtype, ne); break;
    case OB_TYPE_F16: (void)OB_CU_LAUNCH_PLAIN(cx, (k_cpy_plain<OB_TYPE_F16>), grid, 256, 0, s, dst, (int)dtype, ne); break;
    case OB_TYPE_BF16: (void)OB_CU_LAUNCH_PLAIN(cx, (k_cpy_plain<OB_TYPE_BF16>), grid, 256, 0, s, dst, (int)dtype, ne); break;
    default: return false;
    }
    return OB_CU_LAUNCHED(cx);
}

/* ---- support ------------------------------------------------------------------------------ */

/* Rows the kernels take: plain types any length, block types whole 32-element chunks. */
static bool whole_rows(const ob_tensor *a) {
    return plain_type(a->type) || (a->ne[0] % 32 == 0 && a->ne[0] % ob_type_block_size(a->type) == 0);
}

/* After ob_op_valid (shapes, and rows in whole blocks of their type): the types with a
 * dequantizer, and the chunks the kernels read and write. */
bool ob_cu_supports_quant_op(const ob_tensor *n) {
    const ob_tensor *a = n->src[0];
    if (!ob_cu_type_has_deq(a->type)) return false;
    switch (n->op) {
    case OB_OP_GET_ROWS:
    case OB_OP_MATMUL:
        return whole_rows(a);
    case OB_OP_CPY: {
        const int64_t ne = ob_nelements(a);
        if (plain_type(a->type) && plain_type(n->type)) return true; /* any count: k_cpy_plain */
        if (ne % 32 != 0 || ne % ob_type_block_size(a->type) != 0) return false;
        if (n->type == OB_TYPE_Q8_0) return n->ne[0] % 32 == 0;
        return n->type == OB_TYPE_F32 || n->type == OB_TYPE_F16 || n->type == OB_TYPE_BF16;
    }
    default: return false;
    }
}

bool ob_cu_matmul_uses_blas(const ob_cu_ctx *cx, const ob_tensor *n) {
    return !cx->det && ob_nrows(n->src[1]) > OB_MMV_MAX_T && !mmq_takes(cx, n) && !ob_cu_mmvq_applies(cx, n) &&
           !plain_odd(n->src[0]->type, n->src[0]->ne[0]);
}

static int64_t slab_rows(const ob_cu_ctx *cx, int64_t K, int64_t N) {
    int64_t r = cx->slab_elems / K;
    return r < 1 ? 1 : r > N ? N : r;
}

size_t ob_cu_matmul_tmp_size(const ob_cu_ctx *cx, const ob_tensor *n) {
    if (cx->det) return ob_cu_mmq_det_applies(cx, n) ? ob_cu_mmq_det_tmp_size(cx, n) : 0; /* else a column at a time */
    if (mmq_takes(cx, n)) return ob_cu_mmq_tmp_size(cx, n);
    if (!ob_cu_matmul_uses_blas(cx, n) || n->src[0]->type == OB_TYPE_F32) return 0;
    const int64_t K = n->src[0]->ne[0], N = n->src[0]->ne[1], T = ob_nrows(n->src[1]);
    size_t w = n->src[0]->type == OB_TYPE_F16 ? 0 : (size_t)(slab_rows(cx, K, N) * K) * 2;
    return ((w + 255) & ~(size_t)255) + (size_t)(K * T) * 2;
}

/* ---- launchers ---------------------------------------------------------------------------- */

template <int T> static void launch_mmv(ob_cu_ctx *cx, const ob_tensor *n, int nt) {
    const ob_tensor *w = n->src[0];
    const int64_t K = w->ne[0], N = w->ne[1];
    const size_t rb = ob_row_size(w->type, K);
    const int rows_per_block = 4;
    const unsigned grid = ob_cu_blocks(N, rows_per_block);
    const float *x = (const float *)n->src[1]->data;
    if constexpr (T == OB_TYPE_F32 || T == OB_TYPE_F16 || T == OB_TYPE_BF16) {
        if (K % 32 != 0) { /* any column count, OB_MMV_MAX_T at a time (cuBLAS is not used here) */
            const uint8_t *W = (const uint8_t *)w->data;
            float *y = (float *)n->data;
            for (int t0 = 0; t0 < nt; t0 += OB_MMV_MAX_T) {
                const int c = nt - t0 < OB_MMV_MAX_T ? nt - t0 : OB_MMV_MAX_T;
                if (c == 1) (void)OB_CU_LAUNCH_PLAIN(cx, (k_mmv_plain<T, 1>), grid, 32 * rows_per_block, 0, W, rb, x + (int64_t)t0 * K, y + (int64_t)t0 * N, K, N, 1);
                else (void)OB_CU_LAUNCH_PLAIN(cx, (k_mmv_plain<T, OB_MMV_MAX_T>), grid, 32 * rows_per_block, 0, W, rb, x + (int64_t)t0 * K, y + (int64_t)t0 * N, K, N, c);
            }
            return;
        }
    }
    if (nt == 1)
        (void)OB_CU_LAUNCH_PLAIN(cx, (k_mmv<T, 1>), grid, 32 * rows_per_block, 0, (const uint8_t *)w->data, rb, x, (float *)n->data, K, N, 1);
    else
        (void)OB_CU_LAUNCH_PLAIN(cx, (k_mmv<T, OB_MMV_MAX_T>), grid, 32 * rows_per_block, 0, (const uint8_t *)w->data, rb, x, (float *)n->data, K, N, nt);
}

template <int T> static void launch_deq_f16(ob_cu_ctx *cx, const uint8_t *W, size_t rb, __half *out, int64_t K, int64_t rows) {
    (void)OB_CU_LAUNCH_PLAIN(cx, (k_deq_f16<T>), ob_cu_blocks(rows * (K / 32), 256), 256, 0, W, rb, out, K, rows);
}

static bool blas_ok(ob_cu_ctx *cx, cublasStatus_t s, const char *file, int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return true;
    if (!cx->faulted) snprintf(cx->last_err, sizeof(cx->last_err), "%s:%d: cublas status %d", file, line, (int)s);
    cx->faulted = true;
    return false;
}

static bool matmul_blas(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *w = n->src[0];
    const int64_t K = w->ne[0], N = w->ne[1], T = ob_nrows(n->src[1]);
    const size_t rb = ob_row_size(w->type, K);
    const float one = 1.0f, zero = 0.0f;
    float *y = (float *)n->data;
    if (w->type == OB_TYPE_F32) {
        ob_cu_note(cx, "cublasSgemm", false);
        return blas_ok(cx, cublasSgemm(cx->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)T, (int)K, &one, (const float *)w->data,
                                       (int)K, (const float *)n->src[1]->data, (int)K, &zero, y, (int)N), __FILE__, __LINE__);
    }
    const int64_t sr = slab_rows(cx, K, N);
    __half *w16 = (__half *)cx->tmp;
    size_t woff = w->type == OB_TYPE_F16 ? 0 : ((size_t)(sr * K) * 2 + 255) & ~(size_t)255;
    __half *x16 = (__half *)((char *)cx->tmp + woff);
    const float *x = (const float *)n->src[1]->data;
    if (((uintptr_t)x & 15) == 0 && ((uintptr_t)x16 & 15) == 0 && (K * T) % 8 == 0)
        (void)OB_CU_LAUNCH_PLAIN(cx, (k_f32_to_f16_x8), ob_cu_blocks(K * T / 8, 256), 256, 0, (const float4 *)x, (uint4 *)x16, K * T / 8);
    else
        (void)OB_CU_LAUNCH_PLAIN(cx, (k_f32_to_f16), ob_cu_blocks(K * T, 256), 256, 0, x, x16, K * T);
    if (!OB_CU_LAUNCHED(cx)) return false;
    for (int64_t r0 = 0; r0 < N; r0 += sr) {
        const int64_t rows = OB_MIN(sr, N - r0);
        const uint8_t *W = (const uint8_t *)w->data + (size_t)r0 * rb;
        const __half *A = (const __half *)W;
        if (w->type != OB_TYPE_F16 && deq16(cx, w->type, W, w16, rows * K)) {
            if (!OB_CU_LAUNCHED(cx)) return false;
            A = w16;
        } else if (w->type != OB_TYPE_F16) {
            switch (w->type) {
#define X(tt) case tt: launch_deq_f16<tt>(cx, W, rb, w16, K, rows); break;
                OB_CU_FOR_EACH_TYPE(X)
#undef X
            default: return false;
            }
            if (!OB_CU_LAUNCHED(cx)) return false;
            A = w16;
        }
        ob_cu_note(cx, "cublasGemmEx", false);
#ifdef OB_HIP
        /* hipBLAS GemmEx, or cuda_compat.h's own kernel where hipBLAS is not packaged */
        cublasStatus_t s = ob_hip_gemm_f16(cx->blas, (int)rows, (int)T, (int)K, &one, A, (int)K, x16, (int)K, &zero,
                                           y + r0, (int)N);
#else
        cublasStatus_t s = cublasGemmEx(cx->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, (int)T, (int)K, &one, A, CUDA_R_16F,
                                        (int)K, x16, CUDA_R_16F, (int)K, &zero, y + r0, CUDA_R_32F, (int)N,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
#endif
        if (!blas_ok(cx, s, __FILE__, __LINE__)) return false;
    }
    return true;
}

/* The one-column path of the default mode (its kernel depends only on the weights). */
static bool matmul_by_size(ob_cu_ctx *cx, ob_tensor *n);

size_t ob_cu_matmul_det_qx_size(const ob_cu_ctx *cx, const ob_tensor *n) {
    if (!cx->det || ob_cu_mmq_det_applies(cx, n)) return 0;
    const int64_t K = n->src[0]->ne[0];
    return ob_cu_qx_dx_offset(K, 1) + (size_t)(K / 32) * sizeof(float2);
}

/* Batch-invariant MATMUL (cx->det): k_mmq_dec with one plan for every T where it applies
 * (op_mmq.cu), otherwise each column alone through the path a single token takes, so a
 * column's sum never depends on how many came with it. */
static bool matmul_det(ob_cu_ctx *cx, ob_tensor *n) {
    if (ob_cu_mmq_det_applies(cx, n)) return ob_cu_op_mmq_det(cx, n);
    const int64_t T = ob_nrows(n->src[1]), K = n->src[1]->ne[0], N = n->ne[0];
    if (T == 1) return matmul_by_size(cx, n);
    ob_tensor col = *n, xc = *n->src[1];
    xc.ne[1] = xc.ne[2] = xc.ne[3] = 1;
    col.ne[1] = col.ne[2] = col.ne[3] = 1;
    col.src[1] = &xc;
    for (int64_t t = 0; t < T; t++) {
        xc.data = (float *)n->src[1]->data + t * K;
        col.data = (float *)n->data + t * N;
        if (!matmul_by_size(cx, &col)) return false;
    }
    return true;
}

bool ob_cu_op_matmul(ob_cu_ctx *cx, ob_tensor *n) { return cx->det ? matmul_det(cx, n) : matmul_by_size(cx, n); }

static bool matmul_by_size(ob_cu_ctx *cx, ob_tensor *n) {
    const int64_t T = ob_nrows(n->src[1]);
    if (mmq_takes(cx, n)) return ob_cu_op_mmq(cx, n);
    if (ob_cu_mmvq_applies(cx, n)) return ob_cu_op_mmvq(cx, n);
    if (T > OB_MMV_MAX_T && !plain_odd(n->src[0]->type, n->src[0]->ne[0])) return matmul_blas(cx, n);
    switch (n->src[0]->type) {
#define X(tt) case tt: launch_mmv<tt>(cx, n, (int)T); break;
        OB_CU_FOR_EACH_TYPE(X)
#undef X
    default: return false;
    }
    return OB_CU_LAUNCHED(cx);
}

template <int T> static void launch_get_rows(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *a = n->src[0], *ids = n->src[1];
    const int64_t ne0 = a->ne[0], nt = ob_nelements(ids);
    if constexpr (T == OB_TYPE_F32 || T == OB_TYPE_F16 || T == OB_TYPE_BF16) {
        if (ne0 % 32 != 0) {
            (void)OB_CU_LAUNCH_PLAIN(cx, (k_get_rows_plain<T>), ob_cu_blocks(nt * ne0, 256), 256, 0, (const uint8_t *)a->data,
                ob_row_size(a->type, ne0), ob_nrows(a), (const int32_t *)ids->data, (float *)n->data, ne0, nt);
            return;
        }
    }
    (void)OB_CU_LAUNCH_PLAIN(cx, (k_get_rows<T>), ob_cu_blocks(nt * (ne0 / 32), 128), 128, 0,
        (const uint8_t *)a->data, ob_row_size(a->type, ne0), ob_nrows(a), (const int32_t *)ids->data, (float *)n->data, ne0, nt);
}

bool ob_cu_op_get_rows(ob_cu_ctx *cx, ob_tensor *n) {
    switch (n->src[0]->type) {
#define X(tt) case tt: launch_get_rows<tt>(cx, n); break;
        OB_CU_FOR_EACH_TYPE(X)
#undef X
    default: return false;
    }
    return OB_CU_LAUNCHED(cx);
}

bool ob_cu_op_cpy(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *a = n->src[0];
    if (plain_odd(a->type, ob_nelements(a))) return launch_cpy_plain(cx, a->type, a->data, n->data, n->type, ob_nelements(a));
    const int64_t nc = ob_nelements(a) / 32;
    const unsigned grid = ob_cu_blocks(nc, 128);
    if (n->type == OB_TYPE_F16 && deq16(cx, a->type, (const uint8_t *)a->data, (__half *)n->data, ob_nelements(a)))
        return OB_CU_LAUNCHED(cx);
    switch (a->type) {
#define X(tt) case tt: (void)OB_CU_LAUNCH_PLAIN(cx, (k_cpy_deq<tt>), grid, 128, 0, (const uint8_t *)a->data, n->data, (int)n->type, nc); break;
        OB_CU_FOR_EACH_TYPE(X)
#undef X
    default: return false;
    }
    return OB_CU_LAUNCHED(cx);
}

OB_CU_MARK_BIND(quant)
