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
 * read the same weight rows run together and share them through L2), y = row tiles.
 *
 * Decode batches (T <= 16) of Q4_K, Q6_K and Q8_0 take k_mmq_dec instead: per-warp
 * cp.async rings of raw weight bytes, A fragments unpacked straight from them (see its
 * comment; knobs ONEBIT_CUDA_MMQ_DEC / _WARPS / _STAGES / _BLOCKS, cuda_env.cu). */
#include "backend/cuda/cuda_mmq.h"
#include <stdlib.h>
#include <string.h>

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
    OB_CU_MARK();
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

/* ---- decode batches: weights streamed through a cp.async pipeline ---------------------------- */

/* k_mmq above unpacks each stage's weights into a shared int8 tile between two block
 * barriers, so a block has one stage of loads in flight and then computes; at T <= 16 the
 * tensor cores are nearly idle and that serialization, not bandwidth, set the speed
 * (bench/NOTES-cuda-3-7.md: Session 5, Nsight Compute at 16 sequences). Here every warp owns 16 weight rows and a share of the K
 * stages and runs its own ring of `nst` raw-byte stage buffers filled by cp.async (16-byte
 * pieces, L1 bypassed), so nst - 1 stages per warp are in flight while it computes one;
 * the A fragments are unpacked in registers straight from the raw bytes, B (x, at most
 * 16 columns) comes from global memory through L1, which all warps of the SM share.
 *
 *   stage  = 256 weight elements of each of the warp's 16 rows (1 Q4_K/Q6_K block, 8 Q8_0
 *            blocks); its bytes [a, a + BPS) of a row are copied as the 16-aligned pieces
 *            covering them, so a row's data sit at offset a % 16 of its buffer row
 *   block  = NW warps on the same 16 rows taking stages w, w + NW, ... of the block's K
 *            range; partial sums meet in shared memory at the end
 *   grid   = x: 16-row tiles, y: K splits (partial outputs + k_mmq_reduce when > 1) */
template <int T> struct mmq_dec_tr;
/* BPS: bytes of a row's stage; RB: buffer row stride, an odd number of 16-byte pieces >=
 * the most pieces a stage can touch (so the 8 rows x 4 words of a fragment load fall in 32
 * different banks). */
template <> struct mmq_dec_tr<OB_TYPE_Q4_K> { static constexpr int BPS = 144, RB = 144; };
template <> struct mmq_dec_tr<OB_TYPE_Q6_K> { static constexpr int BPS = 210, RB = 240; };
template <> struct mmq_dec_tr<OB_TYPE_Q8_0> { static constexpr int BPS = 272, RB = 304; };

static __device__ __forceinline__ void mmq_cp16(void *sdst, const void *gsrc, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(OB_HIP)
    const unsigned s = (unsigned)__cvta_generic_to_shared(sdst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gsrc), "r"(bytes) : "memory");
#else
    /* never launched there (ob_cu_mmq_applies) */
    uint8_t *d = (uint8_t *)sdst;
    const uint8_t *g = (const uint8_t *)gsrc;
    for (int i = 0; i < 16; i++) d[i] = i < bytes ? g[i] : 0;
#endif
}
static __device__ __forceinline__ void mmq_cp_commit(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(OB_HIP)
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
/* Waits until at most n of this thread's committed groups are pending (n: 0..7). */
static __device__ __forceinline__ void mmq_cp_wait(int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(OB_HIP)
    switch (n) {
    case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 7;" ::: "memory"); break;
    }
#endif
}

/* One sub-block's MMAs for all NF column tiles and the scaled accumulation:
 * a: A fragment (rows g, g + 8); sw[h][half]: scales of row g + 8h (per 16 for Q6_K);
 * mw[h]: mins; b0/b1, x0/x1: x fragments and dx of each column tile (mmq_dec_x). */
template <bool SC16, bool MIN, int NF>
static __device__ __forceinline__ void mmq_dec_sub(float (&acc)[NF][4], const int (&a)[4], const int (&b0)[NF],
                                                   const int (&b1)[NF], const float2 (&x0)[NF], const float2 (&x1)[NF],
                                                   const float (&sw)[2][2], const float (&mw)[2]) {
#pragma unroll
    for (int j = 0; j < NF; j++) {
        if constexpr (SC16) {
            int lo[4] = {OB_MMQ_BIAS_BITS, OB_MMQ_BIAS_BITS, OB_MMQ_BIAS_BITS, OB_MMQ_BIAS_BITS};
            int hi[4] = {OB_MMQ_BIAS_BITS, OB_MMQ_BIAS_BITS, OB_MMQ_BIAS_BITS, OB_MMQ_BIAS_BITS};
            mmq_mma16(lo, a[0], a[1], b0[j]);
            mmq_mma16(hi, a[2], a[3], b1[j]);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float2 xv = e & 1 ? x1[j] : x0[j];
                const int h = e / 2;
                acc[j][e] += xv.x * (sw[h][0] * mmq_unbias(lo[e]) + sw[h][1] * mmq_unbias(hi[e]));
            }
        } else {
            int cc[4] = {OB_MMQ_BIAS_BITS, OB_MMQ_BIAS_BITS, OB_MMQ_BIAS_BITS, OB_MMQ_BIAS_BITS};
            mmq_mma32(cc, a, b0[j], b1[j]);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float2 xv = e & 1 ? x1[j] : x0[j];
                const int h = e / 2;
                float v = acc[j][e] + sw[h][0] * xv.x * mmq_unbias(cc[e]);
                if constexpr (MIN) v -= mw[h] * xv.y;
                acc[j][e] = v;
            }
        }
    }
}

/* x fragments of sub-block s of the current stage for every column tile: b0/b1 the words
 * at 4t and 16 + 4t of column 8j + g, x0/x1 dx of columns 8j + 2t, 8j + 2t + 1, from the
 * lane's pointers xq[j] (column 8j + g, byte 4t of the stage), xd0[j]/xd1[j] (columns
 * 8j + 2t and 8j + 2t + 1, the stage's first sub-block). */
template <int NF>
static __device__ __forceinline__ void mmq_dec_x(const int8_t *const (&xq)[NF], const float2 *const (&xd0)[NF],
                                                 const float2 *const (&xd1)[NF], int s, int (&b0)[NF], int (&b1)[NF],
                                                 float2 (&x0)[NF], float2 (&x1)[NF]) {
#pragma unroll
    for (int j = 0; j < NF; j++) {
        b0[j] = __ldg((const int *)(xq[j] + 32 * s));
        b1[j] = __ldg((const int *)(xq[j] + 32 * s + 16));
        x0[j] = __ldg(xd0[j] + s);
        x1[j] = __ldg(xd1[j] + s);
    }
}

/* The MMAs of one stage (256 elements) from the raw bytes of rows g (p0) and g + 8 (p1),
 * x through the lane's stage pointers (mmq_dec_x). Sub-block s + 1's x loads are issued
 * before sub-block s's MMAs, so their latency (L1 or L2) overlaps the math; issued just
 * before use, they stalled the warps (bench/NOTES-cuda-3-7.md: Session 5, Nsight Compute). */
template <int T, int NF>
static __device__ __forceinline__ void mmq_dec_stage(float (&acc)[NF][4], const uint8_t *p0, const uint8_t *p1,
                                                     const int8_t *const (&xq)[NF], const float2 *const (&xd0)[NF],
                                                     const float2 *const (&xd1)[NF], int t4) {
    int b0[NF], b1[NF];
    float2 x0[NF], x1[NF];
    mmq_dec_x<NF>(xq, xd0, xd1, 0, b0, b1, x0, x1);
    /* A fragment, scales and mins of sub-block s */
    uint4 h0 = make_uint4(0, 0, 0, 0), h1 = h0;
    float d0 = 0.0f, d1 = 0.0f, m0 = 0.0f, m1 = 0.0f;
    if constexpr (T == OB_TYPE_Q4_K) {
        h0 = *(const uint4 *)p0; /* d, dmin, scales: 16-aligned */
        h1 = *(const uint4 *)p1;
        d0 = mmq_f16(h0.x & 0xffff), m0 = mmq_f16(h0.x >> 16);
        d1 = mmq_f16(h1.x & 0xffff), m1 = mmq_f16(h1.x >> 16);
    } else if constexpr (T == OB_TYPE_Q6_K) {
        d0 = mmq_f16(mmq_ld16(p0 + 208)), d1 = mmq_f16(mmq_ld16(p1 + 208));
    }
    auto asub = [&](int s, int (&a)[4], float (&sw)[2][2], float (&mw)[2]) {
        if constexpr (T == OB_TYPE_Q4_K) {
            /* 32-byte chunk s / 2: low nibbles sub-block 2c, high nibbles 2c + 1 */
            const int c = s / 2, sh = 4 * (s % 2);
            const uint8_t *q0 = p0 + 16 + 32 * c + 4 * t4, *q1 = p1 + 16 + 32 * c + 4 * t4;
            a[0] = (int)((*(const uint32_t *)q0 >> sh) & 0x0f0f0f0fu);
            a[1] = (int)((*(const uint32_t *)q1 >> sh) & 0x0f0f0f0fu);
            a[2] = (int)((*(const uint32_t *)(q0 + 16) >> sh) & 0x0f0f0f0fu);
            a[3] = (int)((*(const uint32_t *)(q1 + 16) >> sh) & 0x0f0f0f0fu);
            int sc0, mn0, sc1, mn1;
            mmq_k_scale_min(s, h0, &sc0, &mn0);
            mmq_k_scale_min(s, h1, &sc1, &mn1);
            sw[0][0] = sw[0][1] = d0 * (float)sc0;
            sw[1][0] = sw[1][1] = d1 * (float)sc1;
            mw[0] = m0 * (float)mn0;
            mw[1] = m1 * (float)mn1;
        } else if constexpr (T == OB_TYPE_Q6_K) {
            /* as mmq_unpack: half g6 = s / 4, low 4 bits from ql, high 2 from qh */
            const int g6 = s / 4, r4 = s % 4, shl = 4 * (r4 / 2), shh = 2 * r4;
            const int ol = 64 * g6 + 32 * (r4 % 2) + 4 * t4, oh = 128 + 32 * g6 + 4 * t4;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint8_t *p = k & 1 ? p1 : p0;
                const int o = 16 * (k / 2);
                const uint32_t lo = (mmq_ld32(p + ol + o) >> shl) & 0x0f0f0f0fu;
                const uint32_t hi = (mmq_ld32(p + oh + o) >> shh) & 0x03030303u;
                a[k] = mmq_subb(lo | hi << 4, 0x20202020u);
            }
            sw[0][0] = d0 * (float)(int8_t)p0[192 + 2 * s];
            sw[0][1] = d0 * (float)(int8_t)p0[193 + 2 * s];
            sw[1][0] = d1 * (float)(int8_t)p1[192 + 2 * s];
            sw[1][1] = d1 * (float)(int8_t)p1[193 + 2 * s];
            mw[0] = mw[1] = 0.0f;
        } else {
            const uint8_t *q0 = p0 + 34 * s, *q1 = p1 + 34 * s;
            a[0] = (int)mmq_ld32(q0 + 2 + 4 * t4);
            a[1] = (int)mmq_ld32(q1 + 2 + 4 * t4);
            a[2] = (int)mmq_ld32(q0 + 18 + 4 * t4);
            a[3] = (int)mmq_ld32(q1 + 18 + 4 * t4);
            sw[0][0] = sw[0][1] = mmq_f16(mmq_ld16(q0));
            sw[1][0] = sw[1][1] = mmq_f16(mmq_ld16(q1));
            mw[0] = mw[1] = 0.0f;
        }
    };
    /* constant sub-block indices make the Q4_K scale/min extraction a few shifts; with two
     * column tiles full unrolling spills */
    constexpr int UN = NF == 1 ? 8 : 2;
#pragma unroll UN
    for (int s = 0; s < 8; s++) {
        int a[4];
        float sw[2][2], mw[2];
        asub(s, a, sw, mw);
        if constexpr (NF == 1) {
            /* fully unrolled, the compiler schedules these loads early itself; the explicit
             * prefetch cost a little at 4 and 8 columns (bench/NOTES.md: Moved from source
             * comments) */
            if (s > 0) mmq_dec_x<NF>(xq, xd0, xd1, s, b0, b1, x0, x1);
            mmq_dec_sub<T == OB_TYPE_Q6_K, T == OB_TYPE_Q4_K, NF>(acc, a, b0, b1, x0, x1, sw, mw);
            continue;
        }
        int nb0[NF], nb1[NF];
        float2 nx0[NF], nx1[NF];
        mmq_dec_x<NF>(xq, xd0, xd1, s < 7 ? s + 1 : 7, nb0, nb1, nx0, nx1);
        mmq_dec_sub<T == OB_TYPE_Q6_K, T == OB_TYPE_Q4_K, NF>(acc, a, b0, b1, x0, x1, sw, mw);
#pragma unroll
        for (int j = 0; j < NF; j++) {
            b0[j] = nb0[j];
            b1[j] = nb1[j];
            x0[j] = nx0[j];
            x1[j] = nx1[j];
        }
    }
}

/* y[z][t][n] for the block's 16 rows; kspl: stages per K split z; nst: ring depth (2..8).
 * Dynamic shared memory: NW * nst * 16 * RB bytes. */
template <int T, int NF>
__global__ void __launch_bounds__(8 * OB_WARP)
    k_mmq_dec(const uint8_t *__restrict__ W, size_t rb, const int8_t *__restrict__ qx, const float2 *__restrict__ dx,
              float *__restrict__ y, int64_t K, int64_t N, int nt, int kspl, int nst) {
    typedef mmq_dec_tr<T> tr;
    constexpr int STB = 16 * tr::RB;
    extern __shared__ __align__(16) uint8_t mmq_dsm[];
    const int lane = threadIdx.x % OB_WARP, warp = threadIdx.x / OB_WARP, nw = blockDim.x / OB_WARP;
    const int g = lane / 4, t4 = lane % 4;
    const int64_t n0 = (int64_t)blockIdx.x * 16;
    const int ns = (int)(K / 256), z0 = blockIdx.y * kspl, z1 = min(z0 + kspl, ns);
    const int cnt = z1 - z0 - warp > 0 ? (z1 - z0 - warp + nw - 1) / nw : 0; /* this warp's stages */
    uint8_t *buf = mmq_dsm + (size_t)warp * nst * STB;
    y += (int64_t)blockIdx.y * nt * N;

    /* Issues stage j of this warp into ring slot `slot`: (row, piece) units over the lanes;
     * rows past N repeat the last row (their results are not written). */
    auto issue = [&](int j, int slot) {
        const int64_t st = z0 + warp + (int64_t)j * nw;
        uint8_t *dst = buf + slot * STB;
        constexpr int PM = tr::RB / 16;
        for (int u = lane; u < 16 * PM; u += OB_WARP) {
            const int r = u / PM, p = u % PM;
            const int64_t row = n0 + r < N ? n0 + r : N - 1;
            const uint8_t *a = W + (size_t)row * rb + (size_t)st * tr::BPS;
            const uint8_t *al = (const uint8_t *)((uintptr_t)a & ~(uintptr_t)15), *piece = al + 16 * p;
            /* bytes of the stage from this piece on; a last piece shorter than 16 reads only
             * those, but its 16-byte access may pass the tensor's end (OB_CU_ALLOC_PAD) */
            const int64_t left = (a + tr::BPS) - piece;
            if (left > 0) mmq_cp16(dst + r * tr::RB + 16 * p, piece, left < 16 ? (int)left : 16);
        }
    };

    float acc[NF][4];
#pragma unroll
    for (int j = 0; j < NF; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[j][e] = 0.0f;

    for (int j = 0; j < nst - 1; j++) {
        if (j < cnt) issue(j, j);
        mmq_cp_commit(); /* empty groups keep the count uniform */
    }
    /* No kernel writes weights: under PDL the first stages stream while the kernel that
     * makes x (k_quant_act) still runs; x and y only after the wait. */
    OB_PDL_ENTRY();
    const int64_t r0 = n0 + g < N ? n0 + g : N - 1, r1 = n0 + g + 8 < N ? n0 + g + 8 : N - 1;
    /* The lane's x pointers at the warp's first stage (mmq_dec_x), advanced a stride of nw
     * stages per step. Columns past nt read column nt - 1: an MMA column only feeds its own
     * output column, and those are not written. */
    const int8_t *xq[NF];
    const float2 *xd0[NF], *xd1[NF];
    const int64_t st0 = z0 + warp;
#pragma unroll
    for (int j = 0; j < NF; j++) {
        const int c = min(8 * j + g, nt - 1), c0 = min(8 * j + 2 * t4, nt - 1), c1 = min(8 * j + 2 * t4 + 1, nt - 1);
        xq[j] = qx + (int64_t)c * K + 256 * st0 + 4 * t4;
        xd0[j] = dx + (int64_t)c0 * (K / 32) + 8 * st0;
        xd1[j] = dx + (int64_t)c1 * (K / 32) + 8 * st0;
    }
    for (int j = 0, slot = 0; j < cnt; j++) {
        if (j + nst - 1 < cnt) issue(j + nst - 1, slot == 0 ? nst - 1 : slot - 1);
        mmq_cp_commit();
        mmq_cp_wait(nst - 1); /* stage j landed (this lane's pieces) */
        OB_SYNCWARP();        /* ... and every lane's */
        const int64_t st = st0 + (int64_t)j * nw;
        const uint8_t *s = buf + slot * STB;
        const int o0 = (int)(((uintptr_t)W + (size_t)r0 * rb + (size_t)st * tr::BPS) & 15);
        const int o1 = (int)(((uintptr_t)W + (size_t)r1 * rb + (size_t)st * tr::BPS) & 15);
        mmq_dec_stage<T, NF>(acc, s + g * tr::RB + o0, s + (g + 8) * tr::RB + o1, xq, xd0, xd1, t4);
#pragma unroll
        for (int f = 0; f < NF; f++) {
            xq[f] += 256 * nw;
            xd0[f] += 8 * nw;
            xd1[f] += 8 * nw;
        }
        slot = slot + 1 == nst ? 0 : slot + 1;
        OB_SYNCWARP(); /* this slot is refilled by the next iteration's issue */
    }
    mmq_cp_wait(0);

    if (nw > 1) {
        /* partial sums of warps > 0 through shared memory: [warp - 1][NF * 4][32] */
        __syncthreads();
        float *red = (float *)mmq_dsm;
        if (warp > 0) {
#pragma unroll
            for (int j = 0; j < NF; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) red[((warp - 1) * NF * 4 + j * 4 + e) * OB_WARP + lane] = acc[j][e];
        }
        __syncthreads();
        if (warp > 0) return;
        for (int w = 1; w < nw; w++)
#pragma unroll
            for (int j = 0; j < NF; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[j][e] += red[((w - 1) * NF * 4 + j * 4 + e) * OB_WARP + lane];
    }
#pragma unroll
    for (int j = 0; j < NF; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int64_t row = n0 + g + 8 * (e / 2);
            const int col = 8 * j + 2 * t4 + (e & 1);
            if (row < N && col < nt) y[(int64_t)col * N + row] = acc[j][e];
        }
}

/* ---- host side ------------------------------------------------------------------------------- */

static bool mmq_type(ob_type t) {
    return t == OB_TYPE_Q4_K || t == OB_TYPE_Q5_K || t == OB_TYPE_Q6_K || t == OB_TYPE_Q8_0 || t == OB_TYPE_Q4_0 ||
           t == OB_TYPE_Q1_0 || t == OB_TYPE_TQ2_0;
}

void ob_cu_mmq_init(ob_cu_ctx *cx, const cudaDeviceProp *prop) {
    int m = cx->opt.mmq_min_t > 0 ? cx->opt.mmq_min_t : 2;
    if (!cx->opt.mmq) m = 0x7fffffff;
#ifdef OB_HIP
    m = 0x7fffffff;
#else
    if (prop->major < 8) m = 0x7fffffff;
#endif
    cx->mmq_min_t = m;
    const int sms = prop->multiProcessorCount > 0 ? prop->multiProcessorCount : 132;
    cx->mmq_dec_blocks = cx->opt.mmq_blocks > 0 ? cx->opt.mmq_blocks : 4 * sms;
}

bool ob_cu_mmq_applies(const ob_cu_ctx *cx, const ob_tensor *n) {
    if (n->op != OB_OP_MATMUL || !n->src[0] || !n->src[1]) return false;
    const ob_tensor *w = n->src[0], *x = n->src[1];
    const int64_t K = w->ne[0], N = w->ne[1], T = ob_nrows(x);
    if (!mmq_type(w->type) || x->type != OB_TYPE_F32 || n->type != OB_TYPE_F32) return false;
    if (K % 128 != 0 || K > 0x3fffffff || N < 1 || T < 1 || T > 0x3fffffff) return false;
    if (T < cx->mmq_min_t) return false;
    /* Small matrices at up to 4 columns stay on the int8 matvec, whose single launch beats
     * MMQ's quantize + stream (+ reduce) there (bench/NOTES-cuda-3-7.md: Session 3). An
     * explicit ONEBIT_CUDA_MMQ_MIN_T decides alone. */
    if (T <= 4 && K * N < ((int64_t)4 << 20) && cx->opt.mmq_min_t <= 0) return false;
    if (((uintptr_t)x->data & 15) != 0) return false; /* float4 loads of x */
    const uintptr_t a = (uintptr_t)w->data;
    return w->type == OB_TYPE_Q4_K || w->type == OB_TYPE_Q5_K ? (a & 15) == 0 : (a & 1) == 0;
}

/* y[i] = sum of the S partial outputs p[z][i], i < n. */
__global__ void k_mmq_reduce(const float *__restrict__ p, float *__restrict__ y, int64_t n, int S) {
    OB_PDL_ENTRY();
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
 * scratch traffic on smaller ones.
 * dec: k_mmq_dec instead (Q4_K/Q6_K/Q8_0, T <= the dec knob, K % 256 == 0, 16-aligned
 * weights), nw warps per 16-row block, nst ring stages per warp, K split over S blocks of
 * ksplit elements so that the grid reaches the block target. */
typedef struct mmq_plan { int cfg, S, dec, nw, nst; int64_t kc, ksplit; } mmq_plan;

/* The streaming decode kernel's knobs are cx->opt.mmq_dec (the largest T it takes; Q8_0
 * at most 8), mmq_warps, mmq_stages (0: chosen per type) and cx->mmq_dec_blocks. Against
 * the tiled kernel it won at 4, 8 and 16 sequences but lost on Q8_0 at 16, hence its cap
 * (bench/NOTES-cuda-3-7.md: Session 5). */

/* Bytes of a 16-row buffer of one stage (mmq_dec_tr<T>::RB * 16), 0 for types k_mmq_dec
 * does not take. */
static int mmq_dec_stb(ob_type t) {
    return t == OB_TYPE_Q4_K ? 16 * mmq_dec_tr<OB_TYPE_Q4_K>::RB
         : t == OB_TYPE_Q6_K ? 16 * mmq_dec_tr<OB_TYPE_Q6_K>::RB
         : t == OB_TYPE_Q8_0 ? 16 * mmq_dec_tr<OB_TYPE_Q8_0>::RB : 0;
}

/* k_mmq_dec's warps, ring depth and K split for W [K, N] of type t: from the weight shape,
 * the knobs and the GPU alone (never T, which batch-invariant mode relies on). */
static void mmq_dec_split(const ob_cu_ctx *cx, mmq_plan *p, ob_type t, int64_t K, int64_t N) {
    p->nw = cx->opt.mmq_warps;
    /* ring depth 2: the shared memory it leaves to L1 keeps more of x there, which the
     * x fragment loads wait on; Q8_0 (at most 8 columns) keeps 4, where 2 lost
     * (bench/NOTES-cuda-3-7.md: Session 7, MMQ ring depth 2). */
    p->nst = cx->opt.mmq_stages > 0 ? cx->opt.mmq_stages : t == OB_TYPE_Q8_0 ? 4 : 2;
    /* ring depth within 100 KB a block (at least two blocks an SM) */
    while (p->nst > 2 && (int64_t)p->nw * p->nst * mmq_dec_stb(t) > 100 * 1024) p->nst--;
    p->cfg = 0;
    p->kc = 256;
    const int64_t blocks = (N + 15) / 16, stages = K / 256;
    int64_t S = (cx->mmq_dec_blocks + blocks - 1) / blocks;
    if (S > 8) S = 8;
    if (S > stages) S = stages;
    if (S < 1) S = 1;
    p->ksplit = (stages + S - 1) / S * 256;
    p->S = (int)((K + p->ksplit - 1) / p->ksplit);
}

/* aligned: whether the weights are 16-aligned (a k_mmq_dec condition); the scratch size
 * takes both answers, so it does not depend on where the weights were at planning. */
static mmq_plan mmq_plan_of(const ob_cu_ctx *cx, const ob_tensor *n, bool aligned) {
    const ob_tensor *w = n->src[0];
    const int64_t K = w->ne[0], N = w->ne[1], T = ob_nrows(n->src[1]);
    mmq_plan p;
    memset(&p, 0, sizeof(p));
    const int max_t = cx->opt.mmq_dec;
    p.dec = T <= (w->type == OB_TYPE_Q8_0 && max_t > 8 ? 8 : max_t) && mmq_dec_stb(w->type) > 0 && K % 256 == 0 &&
            aligned;
    if (p.dec) {
        mmq_dec_split(cx, &p, w->type, K, N);
        return p;
    }
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

size_t ob_cu_mmq_tmp_size(const ob_cu_ctx *cx, const ob_tensor *n) {
    const int64_t K = n->src[0]->ne[0], N = n->src[0]->ne[1], T = ob_nrows(n->src[1]);
    const mmq_plan p = mmq_plan_of(cx, n, true), q = mmq_plan_of(cx, n, false);
    const int S = p.S > q.S ? p.S : q.S;
    return mmq_part_offset(K, T) + (S > 1 ? (size_t)S * (size_t)(T * N) * sizeof(float) : 0);
}

template <int T, int MF, int NF, int WM, int WK, int SB>
static void mmq_go(ob_cu_ctx *cx, const ob_tensor *n, const int8_t *qx, const float2 *dx, float *y, const mmq_plan *p) {
    const ob_tensor *w = n->src[0];
    const int64_t K = w->ne[0], N = w->ne[1], nt = ob_nrows(n->src[1]);
    constexpr int BM = WM * MF * 16, BN = NF * 8;
    const dim3 grid(ob_cu_blocks(nt, BN), ob_cu_blocks(N, BM), (unsigned)p->S);
    (void)OB_CU_LAUNCH_PLAIN(cx, (k_mmq<T, MF, NF, WM, WK, SB>), grid, WM * WK * OB_WARP, 0,
        (const uint8_t *)w->data, ob_row_size(w->type, K), qx, dx, y, K, N, (int)nt, p->ksplit);
}

/* Decode batches (T <= 16): 32-row tiles and two warps per row group splitting K, so even
 * N = 1024 gets 32 blocks, with 512-element stages (more weight bytes in flight per block).
 * Prefill: 128 x 64 (or 128 x 32) tiles, 4 warps of 32 rows each. */
/* k_mmq_dec with NF column tiles; the dynamic shared-memory limit is raised once per
 * kernel (the knobs, hence the size, are fixed for the process). */
template <int T, int NF>
static void mmq_go_dec(ob_cu_ctx *cx, const ob_tensor *n, const int8_t *qx, const float2 *dx, float *y, const mmq_plan *p) {
    const ob_tensor *w = n->src[0];
    const int64_t K = w->ne[0], N = w->ne[1], nt = ob_nrows(n->src[1]);
    const size_t shm = (size_t)p->nw * p->nst * 16 * mmq_dec_tr<T>::RB;
#ifndef OB_HIP
    static size_t raised = 48 * 1024;
    if (shm > raised) {
        if (!OB_CU(cx, cudaFuncSetAttribute(k_mmq_dec<T, NF>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm))) return;
        raised = shm;
    }
#endif
    const dim3 grid(ob_cu_blocks(N, 16), (unsigned)p->S);
    OB_CU_LAUNCH(cx, k_mmq_dec<T, NF>, grid, p->nw * OB_WARP, shm, (const uint8_t *)w->data, ob_row_size(w->type, K), qx, dx, y,
                 K, N, (int)nt, (int)(p->ksplit / 256), p->nst);
}

template <int T>
static void mmq_launch_dec(ob_cu_ctx *cx, const ob_tensor *n, const int8_t *qx, const float2 *dx, float *y, const mmq_plan *p) {
    if (ob_nrows(n->src[1]) <= 8) mmq_go_dec<T, 1>(cx, n, qx, dx, y, p);
    else mmq_go_dec<T, 2>(cx, n, qx, dx, y, p);
}

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
    const mmq_plan p = mmq_plan_of(cx, n, ((uintptr_t)n->src[0]->data & 15) == 0);
    float *part = (float *)((char *)cx->tmp + mmq_part_offset(K, T)), *y = p.S > 1 ? part : (float *)n->data;
    /* x quantized into cx->qx where it fits (the matvec's buffer, kept while x is: q/k/v
     * and gate/up share one quantization, as in op_mmvq.cu), else into cx->tmp. */
    const bool keep = cx->qx && ob_cu_qx_dx_offset(K, T) + (size_t)(K / 32 * T) * sizeof(float2) <= cx->qx_size;
    char *qb = keep ? (char *)cx->qx : (char *)cx->tmp;
    int8_t *qx = (int8_t *)qb;
    float2 *dx = (float2 *)(qb + ob_cu_qx_dx_offset(K, T));
    if (!keep || cx->qx_src != x->data || cx->qx_k != K || cx->qx_t != T) {
        if (!ob_cu_quant_act(cx, (const float *)x->data, qx, dx, K * T)) return false;
        if (keep) {
            cx->qx_src = x->data;
            cx->qx_k = K;
            cx->qx_t = T;
        }
    }
    switch (p.dec ? -1 - (int)n->src[0]->type : (int)n->src[0]->type) {
    case -1 - OB_TYPE_Q4_K: mmq_launch_dec<OB_TYPE_Q4_K>(cx, n, qx, dx, y, &p); break;
    case -1 - OB_TYPE_Q6_K: mmq_launch_dec<OB_TYPE_Q6_K>(cx, n, qx, dx, y, &p); break;
    case -1 - OB_TYPE_Q8_0: mmq_launch_dec<OB_TYPE_Q8_0>(cx, n, qx, dx, y, &p); break;
    case OB_TYPE_Q4_K: mmq_launch<OB_TYPE_Q4_K>(cx, n, qx, dx, y, &p); break;
    case OB_TYPE_Q5_K: mmq_launch<OB_TYPE_Q5_K>(cx, n, qx, dx, y, &p); break;
    case OB_TYPE_Q6_K: mmq_launch<OB_TYPE_Q6_K>(cx, n, qx, dx, y, &p); break;
    case OB_TYPE_Q8_0: mmq_launch<OB_TYPE_Q8_0>(cx, n, qx, dx, y, &p); break;
    case OB_TYPE_Q4_0: mmq_launch<OB_TYPE_Q4_0>(cx, n, qx, dx, y, &p); break;
    case OB_TYPE_Q1_0: mmq_launch<OB_TYPE_Q1_0>(cx, n, qx, dx, y, &p); break;
    case OB_TYPE_TQ2_0: mmq_launch<OB_TYPE_TQ2_0>(cx, n, qx, dx, y, &p); break;
    default: return false;
    }
    if (cx->faulted || !OB_CU_LAUNCHED(cx)) return false; /* faulted: mmq_go_dec's attribute call */
    if (p.S > 1) {
        return OB_CU_LAUNCH(cx, k_mmq_reduce, ob_cu_blocks(T * N, 256), 256, 0, (const float *)part, (float *)n->data, T * N,
                            p.S);
    }
    return true;
}

/* ---- batch-invariant mode (cx->det) ---------------------------------------------------------
 * Every column count goes through k_mmq_dec with one plan: NF = 2 column tiles (Q8_0: 1), the
 * ring depth and K split of mmq_dec_split (weight shape only), columns in chunks of 16 (Q8_0:
 * 8). An output element is then the same sum in the same order for any T: each (row,
 * column) accumulator walks its K split's stages in order, the int8 products of a stage are
 * exact integers, the warps of a block meet in a fixed order and k_mmq_reduce adds the
 * splits in order; a padded column slot only feeds its own (unwritten) output. One token
 * alone pays for the 15 idle columns of its tile; a 16-sequence decode step runs as in the
 * default mode. */

static int det_chunk(ob_type t) { return t == OB_TYPE_Q8_0 ? 8 : 16; }

bool ob_cu_mmq_det_applies(const ob_cu_ctx *cx, const ob_tensor *n) {
    if (n->op != OB_OP_MATMUL || !n->src[0] || !n->src[1]) return false;
    const ob_tensor *w = n->src[0], *x = n->src[1];
    const int64_t K = w->ne[0], N = w->ne[1], T = ob_nrows(x);
    if (mmq_dec_stb(w->type) == 0 || x->type != OB_TYPE_F32 || n->type != OB_TYPE_F32) return false;
    if (K % 256 != 0 || K > 0x3fffffff || N < 1 || T < 1 || T > 0x3fffffff) return false;
    if (cx->mmq_min_t == 0x7fffffff) return false; /* no int8 MMA here (HIP, below sm_80, ONEBIT_CUDA_MMQ=0) */
    return ((uintptr_t)x->data & 15) == 0 && ((uintptr_t)w->data & 15) == 0;
}

static mmq_plan det_plan(const ob_cu_ctx *cx, const ob_tensor *n) {
    const ob_tensor *w = n->src[0];
    mmq_plan p;
    memset(&p, 0, sizeof(p));
    p.dec = 1;
    mmq_dec_split(cx, &p, w->type, w->ne[0], w->ne[1]);
    return p;
}

size_t ob_cu_mmq_det_tmp_size(const ob_cu_ctx *cx, const ob_tensor *n) {
    const int64_t K = n->src[0]->ne[0], N = n->src[0]->ne[1], T = ob_nrows(n->src[1]);
    const mmq_plan p = det_plan(cx, n);
    const int64_t c = OB_MIN(T, (int64_t)det_chunk(n->src[0]->type));
    return mmq_part_offset(K, T) + (p.S > 1 ? (size_t)p.S * (size_t)(c * N) * sizeof(float) : 0);
}

bool ob_cu_op_mmq_det(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_type t = n->src[0]->type;
    const int64_t K = n->src[0]->ne[0], N = n->src[0]->ne[1], T = ob_nrows(n->src[1]);
    const mmq_plan p = det_plan(cx, n);
    int8_t *qx = (int8_t *)cx->tmp;
    float2 *dx = (float2 *)((char *)cx->tmp + ob_cu_qx_dx_offset(K, T));
    float *part = (float *)((char *)cx->tmp + mmq_part_offset(K, T));
    if (!ob_cu_quant_act(cx, (const float *)n->src[1]->data, qx, dx, K * T)) return false;
    cx->qx_src = NULL; /* cx->qx is not what it holds now */
    const int C = det_chunk(t);
    for (int64_t c0 = 0; c0 < T; c0 += C) {
        ob_tensor sub = *n;
        const int64_t c = OB_MIN((int64_t)C, T - c0);
        float *y = (float *)n->data + c0 * N;
        /* the launch reads nt from the node's x: a view of c columns */
        ob_tensor xs = *n->src[1];
        xs.ne[1] = c, xs.ne[2] = 1, xs.ne[3] = 1;
        sub.src[1] = &xs;
        float *dst = p.S > 1 ? part : y;
        const int8_t *q = qx + c0 * K;
        const float2 *d = dx + c0 * (K / 32);
        switch (t) {
        case OB_TYPE_Q4_K: mmq_go_dec<OB_TYPE_Q4_K, 2>(cx, &sub, q, d, dst, &p); break;
        case OB_TYPE_Q6_K: mmq_go_dec<OB_TYPE_Q6_K, 2>(cx, &sub, q, d, dst, &p); break;
        case OB_TYPE_Q8_0: mmq_go_dec<OB_TYPE_Q8_0, 1>(cx, &sub, q, d, dst, &p); break;
        default: return false;
        }
        if (cx->faulted) return false;
        if (p.S > 1 && !OB_CU_LAUNCH(cx, k_mmq_reduce, ob_cu_blocks(c * N, 256), 256, 0, (const float *)part, y, c * N,
                                     p.S))
            return false;
    }
    return !cx->faulted;
}

OB_CU_MARK_BIND(mmq)
