/* The int8-activation dot products of the decode matvec (op_mmvq.cu), shared with the
 * mixture-of-experts matvec (op_moe.cu): weight loads, the per-type geometry mq<T> (slots
 * of a block) and dot_slot, which dots one slot of a weight block with the int8 x that
 * k_quant_act makes (qx int8 per element, dx float2 {d, d * sum(q)} per 32 elements).
 * Device code only; each including .cu gets its own copies (all static). */
#ifndef OB_BACKEND_CUDA_MMVQ_DOT_CUH
#define OB_BACKEND_CUDA_MMVQ_DOT_CUH

#include "backend/cuda/cuda_int.h"

static __device__ __forceinline__ float f16f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
/* Weight loads: read once per step, so they bypass L1 (which then keeps x and the block
 * headers that neighbouring lanes share). Not volatile: the compiler may hoist them. */
#ifdef OB_HIP
static __device__ __forceinline__ uint4 ldw16(const uint8_t *p) { return *(const uint4 *)p; }
static __device__ __forceinline__ uint32_t ldw2(const uint8_t *p) { return *(const uint16_t *)p; }
static __device__ __forceinline__ uint4 ldw16_early(const uint8_t *p) { return *(const uint4 *)p; }
#else
static __device__ __forceinline__ uint4 ldw16(const uint8_t *p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
/* The same for loads that must be issued before the grid-dependency wait: ptxas moves
 * that wait above .nc (read-only) loads, so these are plain coherent loads, volatile to
 * keep their place. */
static __device__ __forceinline__ uint4 ldw16_early(const uint8_t *p) {
    uint4 r;
    asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}
/* 2-byte pieces go through L1: the 2-aligned block types read a sector in several
 * pieces (one per instruction), and L1 serves the repeats. */
static __device__ __forceinline__ uint32_t ldw2(const uint8_t *p) { return __ldg((const unsigned short *)p); }
#endif
/* The same loads on a weight block that is either in global memory (SM false) or already
 * staged in shared memory by k_mmvq_run (SM true: plain loads of the same alignment). */
template <bool SM> static __device__ __forceinline__ uint4 ld16(const uint8_t *p) {
    if constexpr (SM) return *(const uint4 *)p;
    else return ldw16(p);
}
template <bool SM> static __device__ __forceinline__ uint32_t ld2(const uint8_t *p) {
    if constexpr (SM) return *(const uint16_t *)p;
    else return ldw2(p);
}
/* 32 bits from a 2-byte aligned address (Q6_K, Q8_0, Q1_0, TQ2_0 blocks are 2-aligned). */
template <bool SM> static __device__ __forceinline__ int ld32(const uint8_t *p) {
    return (int)(ld2<SM>(p) | ld2<SM>(p + 2) << 16);
}
/* NW consecutive 32-bit words from a 2-byte aligned address. In shared memory: NW + 1
 * aligned words (NW when p is 4-aligned) joined by funnel shifts instead of 2 * NW 16-bit
 * loads; a staged run of such blocks is read by every lane at a 2-aligned offset, and the
 * 16-bit loads were what its decode waited on. */
template <bool SM, int NW> static __device__ __forceinline__ void ld32n(const uint8_t *p, int (&w)[NW]) {
    if constexpr (SM) {
        const uintptr_t a = (uintptr_t)p;
        const uint32_t *q = (const uint32_t *)(a & ~(uintptr_t)3);
        const unsigned sh = (unsigned)(a & 2) * 8;
        uint32_t cur = q[0];
#pragma unroll
        for (int k = 0; k < NW; k++) {
            const uint32_t nxt = (k + 1 < NW || sh) ? q[k + 1] : 0u; /* never past the data */
            w[k] = (int)(uint32_t)((((uint64_t)nxt << 32) | cur) >> sh);
            cur = nxt;
        }
    } else {
#pragma unroll
        for (int k = 0; k < NW; k++) w[k] = ld32<SM>(p + 4 * k);
    }
}
#ifdef OB_HIP
/* Portable form (the HIP build is compile-checked, not tuned). */
static __device__ __forceinline__ int dp4a(int a, int b, int c) {
    for (int k = 0; k < 4; k++) c += (int)(int8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
    return c;
}
#else
static __device__ __forceinline__ int dp4a(int a, int b, int c) { return __dp4a(a, b, c); }
#endif
static __device__ __forceinline__ int byte_of(uint32_t w, int k) { return (int)((w >> (8 * k)) & 0xff); }

/* Scale and min of Q4_K sub-block j (0..7) from the header words (scales are bytes 4..15
 * of the block: hd.y, hd.z, hd.w), without indexing a local array at run time. */
static __device__ __forceinline__ void q4k_scale_min(int j, uint4 hd, int *sc, int *m) {
    if (j < 4) {
        *sc = byte_of(hd.y, j) & 63;
        *m = byte_of(hd.z, j) & 63;
    } else {
        const int k = j - 4, hi = byte_of(hd.w, k);
        *sc = (hi & 15) | (byte_of(hd.y, k) >> 6) << 4;
        *m = (hi >> 4) | (byte_of(hd.z, k) >> 6) << 4;
    }
}

template <int T> struct mq;
/* slots per block, elements per block, bytes per block; run: blocks per staged run of
 * k_mmvq_run, a multiple of 8 (so run * bytes is a multiple of 16) near 1.6-2.3 KB. */
template <> struct mq<OB_TYPE_Q4_K> { static constexpr int slots = 4, qk = 256, bytes = 144, run = 16; };
template <> struct mq<OB_TYPE_Q6_K> { static constexpr int slots = 8, qk = 256, bytes = 210, run = 8; };
template <> struct mq<OB_TYPE_Q8_0> { static constexpr int slots = 2, qk = 32, bytes = 34, run = 48; };
template <> struct mq<OB_TYPE_Q1_0> { static constexpr int slots = 4, qk = 128, bytes = 18, run = 88; };
template <> struct mq<OB_TYPE_TQ2_0> { static constexpr int slots = 8, qk = 256, bytes = 66, run = 24; };

/* acc[t] += dot(slot `s` of weight block b, x block elements) for t < nt.
 * qx/dx point at the weight block's first element / 32-block of column 0; columns are
 * kx bytes / kx/32 float2 apart. */
template <int T, int NT, bool SM = false>
static __device__ __forceinline__ void dot_slot(const uint8_t *__restrict__ b, int s, const int8_t *__restrict__ qx,
                                                const float2 *__restrict__ dx, int64_t kx, int nt, float *acc, int rot = 0) {
    if constexpr (T == OB_TYPE_Q4_K) {
        /* s: 32-byte chunk s of qs: low nibbles are sub-block 2s (elements [64s, 64s+32)),
         * high nibbles sub-block 2s+1. The min term uses x's stored d * sum(q) (dx.y). */
        const uint4 hd = ld16<SM>(b); /* d, dmin, scales[12] */
        const uint4 qa = ld16<SM>(b + 16 + 32 * s), qb = ld16<SM>(b + 32 + 32 * s);
        const float d = f16f((uint16_t)(hd.x & 0xffff)), dmin = f16f((uint16_t)(hd.x >> 16));
        int sl, ml, sh, mh; /* 6-bit scale and min of sub-blocks 2s, 2s+1 */
        q4k_scale_min(2 * s, hd, &sl, &ml);
        q4k_scale_min(2 * s + 1, hd, &sh, &mh);
        const int w[8] = {(int)qa.x, (int)qa.y, (int)qa.z, (int)qa.w, (int)qb.x, (int)qb.y, (int)qb.z, (int)qb.w};
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= nt) break;
            const int8_t *xp = qx + t * kx + 64 * s;
            /* The four 16-byte pieces (two per sub-block) are taken from piece rot on: lanes
             * 64 bytes apart would otherwise meet in the same shared-memory banks. */
            int dl = 0, dh = 0;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int c = (k + rot) & 3, nsh = (c & 2) ? 4 : 0;
                const int4 xv = *(const int4 *)(xp + 16 * c);
                const int xs[4] = {xv.x, xv.y, xv.z, xv.w};
                int p = 0;
#pragma unroll
                for (int i = 0; i < 4; i++) p = dp4a(((c & 1 ? w[4 + i] : w[i]) >> nsh) & 0x0f0f0f0f, xs[i], p);
                if (c & 2) dh += p;
                else dl += p;
            }
            const float4 f = *(const float4 *)(dx + t * (kx / 32) + 2 * s); /* (d, d*sum) of both sub-blocks */
            acc[t] += d * ((float)(sl * dl) * f.x + (float)(sh * dh) * f.z) - dmin * ((float)ml * f.y + (float)mh * f.w);
        }
    } else if constexpr (T == OB_TYPE_Q6_K) {
        /* s: half g = s/4 (128 elements), byte range j0 = 8 * (s%4). ql bytes [64g + j0, +8)
         * hold sub-blocks 4g (low) and 4g+2 (high), [64g + 32 + j0, +8) sub-blocks 4g+1 and
         * 4g+3; qh bytes [128 + 32g + j0, +8) hold 2 bits of each of the four. */
        const int g = s / 4, j0 = 8 * (s % 4);
        int aa[2], bb[2], hh[2];
        ld32n<SM, 2>(b + 64 * g + j0, aa);
        ld32n<SM, 2>(b + 64 * g + 32 + j0, bb);
        ld32n<SM, 2>(b + 128 + 32 * g + j0, hh);
        const int a0 = aa[0], a1 = aa[1], b0 = bb[0], b1 = bb[1], h0 = hh[0], h1 = hh[1];
        const float d = f16f((uint16_t)ld2<SM>(b + 208));
        const int8_t *scs = (const int8_t *)(b + 192);
        /* Sub-block r = 0..3 of this half: 8 unsigned 6-bit weights q; the -32 offset is
         * taken off the dot as 32 * sum(x) (one dp4a, cheaper than a per-byte subtract).
         * Sub-blocks are visited from rot on: the lanes of a warp serve 4 blocks whose x
         * pieces lie 256 bytes apart, i.e. in the same shared-memory banks; rotating each
         * block's order by its place in the warp (k_mmvq_run) spreads them over all banks. */
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= nt) break;
            float a = 0.0f;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int r = (k + rot) & 3, sub = 4 * g + r;
                const int lo0 = r & 1 ? b0 : a0, lo1 = r & 1 ? b1 : a1, ns = 4 * (r >> 1), hs = 2 * r;
                const int w0 = ((lo0 >> ns) & 0x0f0f0f0f) | (((h0 >> hs) << 4) & 0x30303030);
                const int w1 = ((lo1 >> ns) & 0x0f0f0f0f) | (((h1 >> hs) << 4) & 0x30303030);
                const int2 xv = *(const int2 *)(qx + t * kx + 32 * sub + j0);
                const int si = dp4a(w1, xv.y, dp4a(w0, xv.x, 0)) - dp4a(0x20202020, xv.y, dp4a(0x20202020, xv.x, 0));
                a += d * (float)scs[2 * sub + j0 / 16] * dx[t * (kx / 32) + sub].x * (float)si;
            }
            acc[t] += a;
        }
    } else if constexpr (T == OB_TYPE_Q8_0) {
        /* s: elements [16s, 16s + 16) of the block. */
        const uint8_t *qs = b + 2 + 16 * s;
        int w[4];
        ld32n<SM, 4>(qs, w);
        const float d = f16f((uint16_t)ld2<SM>(b));
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= nt) break;
            const int4 xv = *(const int4 *)(qx + t * kx + 16 * s);
            int si = dp4a(w[0], xv.x, 0);
            si = dp4a(w[1], xv.y, si);
            si = dp4a(w[2], xv.z, si);
            si = dp4a(w[3], xv.w, si);
            acc[t] += d * dx[t * (kx / 32)].x * (float)si;
        }
    } else if constexpr (T == OB_TYPE_Q1_0) {
        /* s: elements [32s, 32s + 32): bit j set -> +d, clear -> -d. Each 4 bits expand to
         * four 0/1 bytes for dp4a against the int8 activations. */
        const uint32_t bits = (uint32_t)ld32<SM>(b + 2 + 4 * s);
        const float d = f16f((uint16_t)ld2<SM>(b));
        /* sum(sign * q) = 2 * sum(bit * q) - sum(q); x's d * sum(q) is stored (dx.y). */
        int sg[8];
#pragma unroll
        for (int k = 0; k < 8; k++) sg[k] = (int)(((bits >> (4 * k)) & 15u) * 0x00204081u & 0x01010101u); /* bit i -> byte i */
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= nt) break;
            const int4 x0 = *(const int4 *)(qx + t * kx + 32 * s), x1 = *(const int4 *)(qx + t * kx + 32 * s + 16);
            int si = dp4a(sg[0], x0.x, 0);
            si = dp4a(sg[1], x0.y, si);
            si = dp4a(sg[2], x0.z, si);
            si = dp4a(sg[3], x0.w, si);
            si = dp4a(sg[4], x1.x, si);
            si = dp4a(sg[5], x1.y, si);
            si = dp4a(sg[6], x1.z, si);
            si = dp4a(sg[7], x1.w, si);
            const float2 f = dx[t * (kx / 32) + s];
            acc[t] += d * (2.0f * f.x * (float)si - f.y);
        }
    } else if constexpr (T == OB_TYPE_TQ2_0) {
        /* s: half g = s/4, byte range j0 = 8 * (s%4) of qs[32g ..]: each byte holds 2-bit
         * trits of sub-blocks 4g + r at shift 2r; value = trit - 1 in {-1, 0, 1}. */
        const int g = s / 4, j0 = 8 * (s % 4);
        int qq[2];
        ld32n<SM, 2>(b + 32 * g + j0, qq);
        const int q0 = qq[0], q1 = qq[1];
        const float d = f16f((uint16_t)ld2<SM>(b + 64));
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= nt) break;
            float a = 0.0f;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                /* trits 0..2 of sub-block r (from rot on, as for Q6_K); the -1 comes off as
                 * sum(x) below */
                const int r = (k + rot) & 3, sub = 4 * g + r;
                const int w0 = (q0 >> (2 * r)) & 0x03030303, w1 = (q1 >> (2 * r)) & 0x03030303;
                const int2 xv = *(const int2 *)(qx + t * kx + 32 * sub + j0);
                const int si = dp4a(w1, xv.y, dp4a(w0, xv.x, 0)) - dp4a(0x01010101, xv.y, dp4a(0x01010101, xv.x, 0));
                a += dx[t * (kx / 32) + sub].x * (float)si;
            }
            acc[t] += d * a;
        }
    }
}

#endif
