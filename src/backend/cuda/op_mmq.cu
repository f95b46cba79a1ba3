/* MATMUL on int8 tensor cores ("MMQ") for parallel decode (T = 2..16) and prefill: the
 * multi-column matvec (op_mmvq.cu) pays about a column's worth of dp4a and shared-memory
 * reads per extra column, and the f16 path (op_quant.cu) dequantizes every weight to f16
 * and goes through cuBLAS. Here the weights are unpacked to int8 in shared memory once
 * per block and every column comes from shared memory through mma.sync.
 *
 *   x  F32 [K, T]  -> qx int8 [T][K], dx float2 [T][K/32] = {d, d * sum(q)}   (cx->tmp)
 *   W  [K, N] of a supported type: per 32-element sub-block, int8 values q, a float scale
 *      s and (Q4_K, Q5_K) a float min m, so that w = s * q - m
 *   y  F32 [N, T], y[t * N + n] = sum over sub-blocks b of
 *        s_b * d_b * isum_b - m_b * (d_b * sum(q_x)_b)        (isum: int32 from the MMA)
 *   Q6_K has a scale per 16 elements: two m16n8k16 MMAs per sub-block instead of one k32.
 *
 * Block tile: BM = WM * MF * 16 weight rows x BN = NF * 8 columns, K in stages of SB
 * sub-blocks (32 * SB elements). Warp (wm, wk) owns rows [wm * MF * 16, +MF * 16) and all
 * BN columns, and takes the sub-blocks s = wk, wk + WK, ... of each stage; with WK > 1 the
 * partial sums meet in shared memory at the end (small row tiles for decode, so that
 * enough blocks stream the weights). Grid: x = column tiles (fastest, so the blocks that
 * read the same weight rows run together and share them through L2), y = row tiles. */
#include "backend/cuda/cuda_mmq.h"
#include <stdlib.h>

/* ---- activations --------------------------------------------------------------------------- */

/* 8 threads per 32-element block, 4 elements each; n = K * T elements, K % 32 == 0. */
__global__ void k_mmq_quant(const float *__restrict__ x, int8_t *__restrict__ qx, float2 *__restrict__ dx, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; /* group of 4 */
    const bool live = i * 4 < n;
    const float4 v = live ? ((const float4 *)x)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
    ob_cu_quant_group(v, live, i, qx, dx);
}

/* ---- weight unpacking ---------------------------------------------------------------------- */

template <int T> struct mmq_tr;
/* qk: elements per block; bytes per block; min: has a per-sub-block min; sc16: a scale per
 * 16 elements; a16: blocks are 16-aligned in a row (16-byte loads). */
template <> struct mmq_tr<OB_TYPE_Q4_K> { static constexpr int qk = 256, bytes = 144; static constexpr bool min = true, sc16 = false, a16 = true; };
template <> struct mmq_tr<OB_TYPE_Q5_K> { static constexpr int qk = 256, bytes = 176; static constexpr bool min = true, sc16 = false, a16 = true; };
template <> struct mmq_tr<OB_TYPE_Q6_K> { static constexpr int qk = 256, bytes = 210; static constexpr bool min = false, sc16 = true, a16 = false; };
template <> struct mmq_tr<OB_TYPE_Q8_0> { static constexpr int qk = 32, bytes = 34; static constexpr bool min = false, sc16 = false, a16 = false; };
template <> struct mmq_tr<OB_TYPE_Q4_0> { static constexpr int qk = 32, bytes = 18; static constexpr bool min = false, sc16 = false, a16 = false; };
template <> struct mmq_tr<OB_TYPE_Q1_0> { static constexpr int qk = 128, bytes = 18; static constexpr bool min = false, sc16 = false, a16 = false; };
template <> struct mmq_tr<OB_TYPE_TQ2_0> { static constexpr int qk = 256, bytes = 66; static constexpr bool min = false, sc16 = false, a16 = false; };

static __device__ __forceinline__ float mmq_f16(uint32_t h) { return __half2float(__ushort_as_half((unsigned short)h)); }
static __device__ __forceinline__ uint32_t mmq_ld16(const uint8_t *p) { return *(const uint16_t *)p; }
/* 32 bits from a 2-aligned address. */
static __device__ __forceinline__ uint32_t mmq_ld32(const uint8_t *p) { return mmq_ld16(p) | mmq_ld16(p + 2) << 16; }
static __device__ __forceinline__ int mmq_byte(uint32_t w, int k) { return (int)((w >> (8 * k)) & 0xff); }
/* Bytes b < 128 minus c <= 128, per byte with no borrow between bytes. */
static __device__ __forceinline__ int mmq_subb(uint32_t x, uint32_t c) { return (int)(((x | 0x80808080u) - c) ^ 0x80808080u); }

/* 6-bit scale and min of Q4_K/Q5_K sub-block j from the 12 scale bytes (words y, z, w of
 * the 16-byte header). */
static __device__ __forceinline__ void mmq_k_scale_min(int j, uint4 hd, int *sc, int *m) {
    if (j < 4) {
        *sc = mmq_byte(hd.y, j) & 63;
        *m = mmq_byte(hd.z, j) & 63;
    } else {
        const int k = j - 4, hi = mmq_byte(hd.w, k);
        *sc = (hi & 15) | (mmq_byte(hd.y, k) >> 6) << 4;
        *m = (hi >> 4) | (mmq_byte(hd.z, k) >> 6) << 4;
    }
}

/* Sub-block s (32 elements) of weight block b: q[k] holds elements 4k..4k+3 as int8 (in
 * element order, little-endian); sc[0] the scale (sc[1] the second 16's scale for sc16
 * types), *mn the min (0 where the type has none). Formulas as src/format/quant*.c. */
template <int T>
static __device__ __forceinline__ void mmq_unpack(const uint8_t *__restrict__ b, int s, int (&q)[8], float (&sc)[2], float *mn) {
    *mn = 0.0f;
    if constexpr (T == OB_TYPE_Q4_K || T == OB_TYPE_Q5_K) {
        const uint4 hd = *(const uint4 *)b; /* d, dmin, scales[12] */
        const uint8_t *qs = b + (T == OB_TYPE_Q4_K ? 16 : 48) + 32 * (s / 2);
        const uint4 u0 = *(const uint4 *)qs, u1 = *(const uint4 *)(qs + 16);
        const uint32_t w[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
        const int sh = 4 * (s % 2);
#pragma unroll
        for (int k = 0; k < 8; k++) q[k] = (int)((w[k] >> sh) & 0x0f0f0f0fu);
        if constexpr (T == OB_TYPE_Q5_K) {
            const uint4 h0 = *(const uint4 *)(b + 16), h1 = *(const uint4 *)(b + 32);
            const uint32_t h[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
#pragma unroll
            for (int k = 0; k < 8; k++) q[k] |= (int)(((h[k] >> s) & 0x01010101u) << 4);
        }
        int scv, mv;
        mmq_k_scale_min(s, hd, &scv, &mv);
        sc[0] = mmq_f16(hd.x & 0xffff) * (float)scv;
        sc[1] = sc[0];
        *mn = mmq_f16(hd.x >> 16) * (float)mv;
    } else if constexpr (T == OB_TYPE_Q6_K) {
        /* half g (128 elements), r4 = s % 4: low 4 bits from ql (nibble r4/2 of the bytes
         * at 64g + 32(r4%2)), high 2 bits from qh bytes at 128 + 32g, shifted by 2 r4. */
        const int g = s / 4, r4 = s % 4, shl = 4 * (r4 / 2), shh = 2 * r4;
        const uint8_t *ql = b + 64 * g + 32 * (r4 % 2), *qh = b + 128 + 32 * g;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint32_t lo = (mmq_ld32(ql + 4 * k) >> shl) & 0x0f0f0f0fu, hi = (mmq_ld32(qh + 4 * k) >> shh) & 0x03030303u;
            q[k] = mmq_subb(lo | hi << 4, 0x20202020u);
        }
        const float d = mmq_f16(mmq_ld16(b + 208));
        sc[0] = d * (float)(int8_t)b[192 + 2 * s];
        sc[1] = d * (float)(int8_t)b[192 + 2 * s + 1];
    } else if constexpr (T == OB_TYPE_Q8_0) {
#pragma unroll
        for (int k = 0; k < 8; k++) q[k] = (int)mmq_ld32(b + 2 + 4 * k);
        sc[0] = sc[1] = mmq_f16(mmq_ld16(b));
    } else if constexpr (T == OB_TYPE_Q4_0) {
        /* low nibbles are elements 0..15, high nibbles 16..31; value q - 8 */
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t w = mmq_ld32(b + 2 + 4 * k);
            q[k] = mmq_subb(w & 0x0f0f0f0fu, 0x08080808u);
            q[k + 4] = mmq_subb((w >> 4) & 0x0f0f0f0fu, 0x08080808u);
        }
        sc[0] = sc[1] = mmq_f16(mmq_ld16(b));
    } else if constexpr (T == OB_TYPE_Q1_0) {
        /* bit j of the sub-block's 32-bit word: +d when set, -d when clear */
        const uint32_t bits = mmq_ld32(b + 2 + 4 * s);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint32_t m = (((bits >> (4 * k)) & 15u) * 0x00204081u) & 0x01010101u; /* bit i -> byte i */
            q[k] = mmq_subb(m << 1, 0x01010101u);
        }
        sc[0] = sc[1] = mmq_f16(mmq_ld16(b));
    } else if constexpr (T == OB_TYPE_TQ2_0) {
        /* element 32s + j: 2-bit trit (value - 1) at shift 2 (s % 4) of qs[32 (s / 4) + j] */
        const int g = s / 4, sh = 2 * (s % 4);
#pragma unroll
        for (int k = 0; k < 8; k++) q[k] = mmq_subb((mmq_ld32(b + 32 * g + 4 * k) >> sh) & 0x03030303u, 0x01010101u);
        sc[0] = sc[1] = mmq_f16(mmq_ld16(b + 64));
    }
}

/* ---- tensor-core fragments ------------------------------------------------------------------ */

/* Fragments of mma.m16n8k32 (s8), g = lane / 4, t = lane % 4:
 *   A 16x32 row-major: a0 = A[g][4t..4t+3], a1 = A[g+8][4t..], a2 = A[g][16+4t..], a3 = A[g+8][16+4t..]
 *   B 32x8 col-major:  b0 = B[4t..4t+3][g], b1 = B[16+4t..][g]
 *   C 16x8:            c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
 * m16n8k16 takes (a0, a1, b0) for k 0..15 and (a2, a3, b1) for k 16..31 with the same C. */
static __device__ __forceinline__ void mmq_mma32(int (&c)[4], const int (&a)[4], int b0, int b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(OB_HIP)
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    /* never launched there (ob_cu_mmq_applies) */
    c[0] = c[1] = c[2] = c[3] = 0;
#endif
}
static __device__ __forceinline__ void mmq_mma16(int (&c)[4], int a0, int a1, int b0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(OB_HIP)
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0));
#else
    c[0] = c[1] = c[2] = c[3] = 0;
#endif
}

/* The MMAs start from the bits of 1.5 * 2^23 instead of 0: a sub-block's dot is below 2^22
 * in magnitude (32 * 127 * 127), so the int32 result read as a float is exactly
 * 1.5 * 2^23 + dot, and one FADD replaces an int-to-float conversion (a quarter-rate
 * instruction that otherwise bounds the prefill kernel). */
#define OB_MMQ_BIAS_BITS 0x4B400000
#define OB_MMQ_BIAS 12582912.0f
static __device__ __forceinline__ float mmq_unbias(int c) { return __int_as_float(c) - OB_MMQ_BIAS; }

/* ---- the kernel ------------------------------------------------------------------------------ */

template <int T, int MF, int NF, int WM, int WK, int SB>
__global__ void __launch_bounds__(WM * WK * OB_WARP)
    k_mmq(const uint8_t *__restrict__ W, size_t rb, const int8_t *__restrict__ qx, const float2 *__restrict__ dx,
          float *__restrict__ y, int64_t K, int64_t N, int nt, int64_t ksplit) {
    typedef mmq_tr<T> tr;
    constexpr int BM = WM * MF * 16, BN = NF * 8, NTH = WM * WK * OB_WARP;
    /* Row stride of the int8 tiles: 16 bytes of padding make it 4 words mod 32, so the 8
     * rows x 4 words of a fragment load hit 32 different banks. */
    constexpr int LD = 32 * SB + 16;
    constexpr int NSC = tr::sc16 ? 2 * SB : SB;
    static_assert(SB % 4 == 0, "the padding argument needs SB % 4 == 0");
    static_assert((WK - 1) * WM * OB_WARP * MF * NF * 4 * 4 <= BM * LD, "the WK reduction reuses the A tile");
    __shared__ __align__(16) int8_t sa[BM * LD];        /* weights [BM][32 SB] */
    __shared__ __align__(16) int8_t sb[BN * LD];        /* x [BN][32 SB] */
    __shared__ float ssc[BM * NSC];                     /* weight scales */
    __shared__ float smn[tr::min ? BM * SB : 1];        /* weight mins */
    __shared__ float2 sdx[BN * SB];                     /* x {d, d * sum} */

    const int tid = threadIdx.x, lane = tid % OB_WARP, warp = tid / OB_WARP;
    const int wm = warp % WM, wk = warp / WM, g = lane / 4, t4 = lane % 4;
    const int64_t t0 = (int64_t)blockIdx.x * BN, n0 = (int64_t)blockIdx.y * BM;
    const int64_t kb32 = K / 32, kbeg = (int64_t)blockIdx.z * ksplit, kend = kbeg + ksplit < K ? kbeg + ksplit : K;
    y += (int64_t)blockIdx.z * nt * N; /* split z's partial sums (the output itself when unsplit) */
    float acc[MF][NF][4];
#pragma unroll
    for (int i = 0; i < MF; i++)
#pragma unroll
        for (int j = 0; j < NF; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    for (int64_t k0 = kbeg; k0 < kend; k0 += 32 * SB) {
        /* Weights: (row, sub-block) units, sub-blocks of a row on adjacent threads. Rows past
         * N repeat the last row (their results are not written). */
#pragma unroll
        for (int u0 = 0; u0 < BM * SB; u0 += NTH) {
            const int u = u0 + tid;
            if (BM * SB % NTH != 0 && u >= BM * SB) break;
            const int r = u / SB, s = u % SB;
            const int64_t row = n0 + r < N ? n0 + r : N - 1;
            const int64_t sg = k0 / 32 + s; /* sub-block index in the row */
            const uint8_t *blk = W + (size_t)row * rb + (size_t)(sg / (tr::qk / 32)) * tr::bytes;
            int q[8];
            float sc[2], mn;
            mmq_unpack<T>(blk, (int)(sg % (tr::qk / 32)), q, sc, &mn);
            int4 *dst = (int4 *)(sa + r * LD + 32 * s);
            dst[0] = make_int4(q[0], q[1], q[2], q[3]);
            dst[1] = make_int4(q[4], q[5], q[6], q[7]);
            if constexpr (tr::sc16) {
                ssc[r * NSC + 2 * s] = sc[0];
                ssc[r * NSC + 2 * s + 1] = sc[1];
            } else {
                ssc[r * NSC + s] = sc[0];
            }
            if constexpr (tr::min) smn[r * SB + s] = mn;
        }
        /* x: 16-byte pieces; columns past nt are zeros. */
        for (int u = tid; u < BN * 2 * SB; u += NTH) {
            const int c = u / (2 * SB), p = u % (2 * SB);
            int4 v = make_int4(0, 0, 0, 0);
            if (t0 + c < nt) v = *(const int4 *)(qx + (t0 + c) * K + k0 + 16 * p);
            *(int4 *)(sb + c * LD + 16 * p) = v;
        }
        for (int u = tid; u < BN * SB; u += NTH) {
            const int c = u / SB, s = u % SB;
            sdx[u] = t0 + c < nt ? dx[(t0 + c) * kb32 + k0 / 32 + s] : make_float2(0.0f, 0.0f);
        }
        __syncthreads();

#pragma unroll 2
        for (int s = wk; s < SB; s += WK) {
            int a[MF][4];
            float sw[MF][2][2], mw[MF][2]; /* [mf][row g / g+8][16-half] */
#pragma unroll
            for (int i = 0; i < MF; i++) {
                const int r = (wm * MF + i) * 16 + g;
                const int8_t *p = sa + r * LD + 32 * s + 4 * t4;
                a[i][0] = *(const int *)p;
                a[i][1] = *(const int *)(p + 8 * LD);
                a[i][2] = *(const int *)(p + 16);
                a[i][3] = *(const int *)(p + 8 * LD + 16);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int rr = r + 8 * h;
                    if constexpr (tr::sc16) {
                        sw[i][h][0] = ssc[rr * NSC + 2 * s];
                        sw[i][h][1] = ssc[rr * NSC + 2 * s + 1];
                    } else {
                        sw[i][h][0] = sw[i][h][1] = ssc[rr * NSC + s];
                    }
                    mw[i][h] = tr::min ? smn[rr * SB + s] : 0.0f;
                }
            }
#pragma unroll
            for (int j = 0; j < NF; j++) {
                const int c = j * 8 + g;
                const int8_t *p = sb + c * LD + 32 * s + 4 * t4;
                const int b0 = *(const int *)p, b1 = *(const int *)(p + 16);
                const float2 x0 = sdx[(j * 8 + 2 * t4) * SB + s], x1 = sdx[(j * 8 + 2 * t4 + 1) * SB + s];
#pragma unroll
                for (int i = 0; i < MF; i++) {
                    if constexpr (tr::sc16) {
                        int lo[4] = {OB_MMQ_BIAS_BITS, OB_MMQ_BIAS_BITS, OB_MMQ_BIAS_BITS, OB_MMQ_BIAS_BITS};
                        int hi[4] = {OB_MMQ_BIAS_BITS, OB_MMQ_BIAS_BITS, OB_MMQ_BIAS_BITS, OB_MMQ_BIAS_BITS};
                        mmq_mma16(lo, a[i][0], a[i][1], b0);
                        mmq_mma16(hi, a[i][2], a[i][3], b1);
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const float2 xv = e & 1 ? x1 : x0;
                            const int h = e / 2;
                            acc[i][j][e] += xv.x * (sw[i][h][0] * mmq_unbias(lo[e]) + sw[i][h][1] * mmq_unbias(hi[e]));
                        }
                    } else {
                        int cc[4] = {OB_MMQ_BIAS_BITS, OB_MMQ_BIAS_BITS, OB_MMQ_BIAS_BITS, OB_MMQ_BIAS_BITS};
                        mmq_mma32(cc, a[i], b0, b1);
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const float2 xv = e & 1 ? x1 : x0;
                            const int h = e / 2;
                            float v = acc[i][j][e] + sw[i][h][0] * xv.x * mmq_unbias(cc[e]);
                            if constexpr (tr::min) v -= mw[i][h] * xv.y;
                            acc[i][j][e] = v;
                        }
                    }
                }
            }
        }
        __syncthreads();
    }

    if constexpr (WK > 1) {
        /* Warps wk > 0 hand their partial sums to warp (wm, 0) through the A tile. */
        float *red = (float *)sa;
        constexpr int PER = MF * NF * 4;
        if (wk > 0) {
#pragma unroll
            for (int i = 0; i < MF; i++)
#pragma unroll
                for (int j = 0; j < NF; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        red[(((wk - 1) * WM + wm) * PER + (i * NF + j) * 4 + e) * OB_WARP + lane] = acc[i][j][e];
        }
        __syncthreads();
        if (wk > 0) return;
        for (int w = 1; w < WK; w++)
#pragma unroll
            for (int i = 0; i < MF; i++)
#pragma unroll
                for (int j = 0; j < NF; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        acc[i][j][e] += red[(((w - 1) * WM + wm) * PER + (i * NF + j) * 4 + e) * OB_WARP + lane];
    }
#pragma unroll
    for (int i = 0; i < MF; i++)
#pragma unroll
        for (int j = 0; j < NF; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t row = n0 + (wm * MF + i) * 16 + g + 8 * (e / 2), col = t0 + j * 8 + 2 * t4 + (e & 1);
                if (row < N && col < nt) y[col * N + row] = acc[i][j][e];
            }
}

/* ---- host side ------------------------------------------------------------------------------- */

static bool mmq_type(ob_type t) {
    return t == OB_TYPE_Q4_K || t == OB_TYPE_Q5_K || t == OB_TYPE_Q6_K || t == OB_TYPE_Q8_0 || t == OB_TYPE_Q4_0 ||
           t == OB_TYPE_Q1_0 || t == OB_TYPE_TQ2_0;
}

/* The env knobs and the device's mma support, read once (they do not change while the
 * process runs; one device kind per process). */
static int mmq_min_t(void) {
    static int v = -1;
    if (v < 0) {
        int m = 2;
        const char *on = getenv("ONEBIT_CUDA_MMQ"), *mt = getenv("ONEBIT_CUDA_MMQ_MIN_T");
        if (mt && atoi(mt) > 0) m = atoi(mt);
        if (on && on[0] == '0') m = 0x7fffffff;
#ifdef OB_HIP
        m = 0x7fffffff;
#else
        int dev = 0, major = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
            cudaGetLastError();
            major = 0;
        }
        if (major < 8) m = 0x7fffffff;
#endif
        v = m;
    }
    return v;
}

bool ob_cu_mmq_applies(const ob_tensor *n) {
    if (n->op != OB_OP_MATMUL || !n->src[0] || !n->src[1]) return false;
    const ob_tensor *w = n->src[0], *x = n->src[1];
    const int64_t K = w->ne[0], N = w->ne[1], T = ob_nrows(x);
    if (!mmq_type(w->type) || x->type != OB_TYPE_F32 || n->type != OB_TYPE_F32) return false;
    if (K % 128 != 0 || K > 0x3fffffff || N < 1 || T < 1 || T > 0x3fffffff) return false;
    if (T < mmq_min_t()) return false;
    if (((uintptr_t)x->data & 15) != 0) return false; /* float4 loads of x */
    const uintptr_t a = (uintptr_t)w->data;
    return w->type == OB_TYPE_Q4_K || w->type == OB_TYPE_Q5_K ? (a & 15) == 0 : (a & 1) == 0;
}

/* y[i] = sum of the S partial outputs p[z][i], i < n. */
__global__ void k_mmq_reduce(const float *__restrict__ p, float *__restrict__ y, int64_t n, int S) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = p[i];
    for (int z = 1; z < S; z++) v += p[z * n + i];
    y[i] = v;
}

/* Tile choice, shared by the scratch size and the launch: cfg 0/1 decode tiles (32 rows x
 * 8/16 columns, 512-element stages where K allows), 2/3 prefill tiles (128 rows x 32/64
 * columns, 128-element stages). K is split over S blocks (partial sums in cx->tmp, then
 * k_mmq_reduce) when the tiles alone give too few blocks to keep the memory system busy:
 * a decode block keeps one stage of weights in flight, so small N needs several blocks per
 * SM; the targets assume an H100/H200-sized GPU (about 132 SMs) and only cost a little more
 * scratch traffic on smaller ones. */
typedef struct mmq_plan { int cfg, S; int64_t kc, ksplit; } mmq_plan;
static mmq_plan mmq_plan_of(int64_t K, int64_t N, int64_t T) {
    mmq_plan p;
    p.cfg = T <= 8 ? 0 : T <= 16 ? 1 : T <= 32 ? 2 : 3;
    const bool dec = p.cfg < 2;
    p.kc = dec && K % 512 == 0 ? 512 : 128;
    const int64_t bm = dec ? 32 : 128, bn = p.cfg == 0 ? 8 : p.cfg == 1 ? 16 : p.cfg == 2 ? 32 : 64;
    const int64_t blocks = ((T + bn - 1) / bn) * ((N + bm - 1) / bm), target = dec ? 512 : 256;
    int64_t S = (target + blocks - 1) / blocks, stages = K / p.kc;
    if (S > 8) S = 8;
    if (S > stages) S = stages;
    if (S < 1) S = 1;
    p.ksplit = (stages + S - 1) / S * p.kc;
    p.S = (int)((K + p.ksplit - 1) / p.ksplit);
    return p;
}

/* Byte offset of the partial sums in cx->tmp. */
static size_t mmq_part_offset(int64_t K, int64_t T) {
    return (ob_cu_qx_dx_offset(K, T) + (size_t)(K / 32 * T) * sizeof(float2) + 255) & ~(size_t)255;
}

size_t ob_cu_mmq_tmp_size(const ob_tensor *n) {
    const int64_t K = n->src[0]->ne[0], N = n->src[0]->ne[1], T = ob_nrows(n->src[1]);
    const mmq_plan p = mmq_plan_of(K, N, T);
    return mmq_part_offset(K, T) + (p.S > 1 ? (size_t)p.S * (size_t)(T * N) * sizeof(float) : 0);
}

template <int T, int MF, int NF, int WM, int WK, int SB>
static void mmq_go(ob_cu_ctx *cx, const ob_tensor *n, const int8_t *qx, const float2 *dx, float *y, const mmq_plan *p) {
    const ob_tensor *w = n->src[0];
    const int64_t K = w->ne[0], N = w->ne[1], nt = ob_nrows(n->src[1]);
    constexpr int BM = WM * MF * 16, BN = NF * 8;
    const dim3 grid(ob_cu_blocks(nt, BN), ob_cu_blocks(N, BM), (unsigned)p->S);
    k_mmq<T, MF, NF, WM, WK, SB><<<grid, WM * WK * OB_WARP, 0, cx->stream>>>(
        (const uint8_t *)w->data, ob_row_size(w->type, K), qx, dx, y, K, N, (int)nt, p->ksplit);
}

/* Decode batches (T <= 16): 32-row tiles and two warps per row group splitting K, so even
 * N = 1024 gets 32 blocks, with 512-element stages (more weight bytes in flight per block).
 * Prefill: 128 x 64 (or 128 x 32) tiles, 4 warps of 32 rows each. */
template <int T>
static void mmq_launch(ob_cu_ctx *cx, const ob_tensor *n, const int8_t *qx, const float2 *dx, float *y, const mmq_plan *p) {
    const bool long_k = p->kc == 512;
    switch (p->cfg) {
    case 0:
        if (long_k) mmq_go<T, 1, 1, 2, 2, 16>(cx, n, qx, dx, y, p);
        else mmq_go<T, 1, 1, 2, 2, 4>(cx, n, qx, dx, y, p);
        break;
    case 1:
        if (long_k) mmq_go<T, 1, 2, 2, 2, 16>(cx, n, qx, dx, y, p);
        else mmq_go<T, 1, 2, 2, 2, 4>(cx, n, qx, dx, y, p);
        break;
    case 2: mmq_go<T, 2, 4, 4, 1, 4>(cx, n, qx, dx, y, p); break;
    default: mmq_go<T, 2, 8, 4, 1, 4>(cx, n, qx, dx, y, p); break;
    }
}

bool ob_cu_op_mmq(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *x = n->src[1];
    const int64_t K = n->src[0]->ne[0], N = n->src[0]->ne[1], T = ob_nrows(x);
    const mmq_plan p = mmq_plan_of(K, N, T);
    int8_t *qx = (int8_t *)cx->tmp;
    float *part = (float *)((char *)cx->tmp + mmq_part_offset(K, T)), *y = p.S > 1 ? part : (float *)n->data;
    float2 *dx = (float2 *)((char *)cx->tmp + ob_cu_qx_dx_offset(K, T));
    k_mmq_quant<<<ob_cu_blocks(K * T / 4, 256), 256, 0, cx->stream>>>((const float *)x->data, qx, dx, K * T);
    if (!OB_CU_LAUNCHED(cx)) return false;
    switch (n->src[0]->type) {
    case OB_TYPE_Q4_K: mmq_launch<OB_TYPE_Q4_K>(cx, n, qx, dx, y, &p); break;
    case OB_TYPE_Q5_K: mmq_launch<OB_TYPE_Q5_K>(cx, n, qx, dx, y, &p); break;
    case OB_TYPE_Q6_K: mmq_launch<OB_TYPE_Q6_K>(cx, n, qx, dx, y, &p); break;
    case OB_TYPE_Q8_0: mmq_launch<OB_TYPE_Q8_0>(cx, n, qx, dx, y, &p); break;
    case OB_TYPE_Q4_0: mmq_launch<OB_TYPE_Q4_0>(cx, n, qx, dx, y, &p); break;
    case OB_TYPE_Q1_0: mmq_launch<OB_TYPE_Q1_0>(cx, n, qx, dx, y, &p); break;
    case OB_TYPE_TQ2_0: mmq_launch<OB_TYPE_TQ2_0>(cx, n, qx, dx, y, &p); break;
    default: return false;
    }
    if (!OB_CU_LAUNCHED(cx)) return false;
    if (p.S > 1) {
        k_mmq_reduce<<<ob_cu_blocks(T * N, 256), 256, 0, cx->stream>>>(part, (float *)n->data, T * N, p.S);
        return OB_CU_LAUNCHED(cx);
    }
    return true;
}
