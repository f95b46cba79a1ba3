/* Decode matvec with int8 activations for the hot weight types (Q4_K, Q6_K, Q8_0, Q1_0,
 * TQ2_0): the f32 path in op_quant.cu dequantizes every weight to f32 and is ALU-bound;
 * here the activations are quantized once per matmul input and every weight byte feeds
 * integer dot products (dp4a), so the kernel streams weights at memory speed.
 *
 *   x  F32 [K, T]                 -> qx int8 [T][K], dx float2 [T][K/32] = {d, d * sum(q)}
 *      per 32-element block: d = max|x| / 127, q = round(x / d)   (q8_1-style)
 *   W  [K, N] of a hot type; y F32 [N, T] = W^T (dx * qx)
 *
 * Each weight block is split into "slots" of 16 to 32 elements; a warp owns one output
 * row and its lanes walk the row's (block, slot) pairs, so adjacent lanes read adjacent
 * bytes (k_mmvq). One column with 16-byte aligned rows of >= 1 KB takes k_mmvq_run
 * instead: the warp stages runs of whole blocks of its row through shared memory with
 * 16-byte loads (ONEBIT_CUDA_MMVQ_OLD=1: always k_mmvq, for comparison). The quantized x
 * of the last matmul is kept (cx->qx_src) so q/k/v and gate/up, which share an input,
 * quantize it once; cuda_backend.cu drops it when a node writes over that input. On sm_90,
 * one column of TQ2_0, Q4_K or Q6_K at the K it covers goes to the bulk-copy kernel of
 * op_mmvq_tma.cu instead, on the same quantized x. */
#include "backend/cuda/cuda_int.h"
#include "backend/cuda/cuda_mmq.h"
#include "backend/cuda/cuda_mmvq.h"
#include <stdlib.h>
#include <string.h>

#define OB_MMVQ_ROWS 4 /* warps (= rows) per block */

/* ---- activation quantization ------------------------------------------------------------- */

/* 8 threads per 32-element block, 4 elements each. n = K * T elements, K % 32 == 0. */
__global__ void k_quant_act(const float *__restrict__ x, int8_t *__restrict__ qx, float2 *__restrict__ dx, int64_t n) {
    OB_PDL_ENTRY();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; /* group of 4 */
    const bool live = i * 4 < n;
    const float4 v = live ? ((const float4 *)x)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
    ob_cu_quant_group(v, live, i, qx, dx);
}

bool ob_cu_quant_act(ob_cu_ctx *cx, const float *x, int8_t *qx, float2 *dx, int64_t n) {
    return OB_CU_LAUNCH(cx, k_quant_act, ob_cu_blocks(n / 4, 256), 256, 0, x, qx, dx, n);
}

/* ---- helpers ------------------------------------------------------------------------------ */

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

/* Up to OB_MMVQ_GROUP matrices of one type and K that share x (q/k/v, gate/up) run as one
 * launch: fewer kernels per layer, and the small ones fill the GPU together. */
#define OB_MMVQ_GROUP 4
typedef struct ob_mmvq_set {
    const uint8_t *w[OB_MMVQ_GROUP];
    float *y[OB_MMVQ_GROUP];
    int64_t n[OB_MMVQ_GROUP];
    unsigned b0[OB_MMVQ_GROUP]; /* first block of each matrix */
    int count;
} ob_mmvq_set;

/* Rows per lane group: 2 for batches over long rows (the x reads dominate there), else 1
 * (small matrices need every block they can get). */
#define MMVQ_R(nt, K) ((nt) > 1 && (K) >= 4096 ? 2 : 1)

/* y[t][row]: OB_MMVQ_ROWS warps per block, each warp 32 >> lsh rows with 1 << lsh lanes
 * per row (fewer lanes when a row has fewer units than a warp). With smem, the block first
 * copies x (qx then dx of nt columns) to shared memory: every row of the block reads all
 * of x, and from L2 that traffic rivalled the weights' own. */
/* The block copies the int8 x (n elements) and its block scales into shared memory at sq
 * and points qx / dx there; all threads of the block must call it. */
static __device__ __forceinline__ void stage_x(int4 *sq, const int8_t *gqx, const float2 *gdx, int64_t n,
                                               const int8_t *&qx, const float2 *&dx) {
    const int nq = (int)(n / 16), nd = (int)(n / 32);
    for (int i = threadIdx.x; i < nq; i += blockDim.x) sq[i] = ((const int4 *)gqx)[i];
    float2 *sd = (float2 *)(sq + nq);
    for (int i = threadIdx.x; i < nd; i += blockDim.x) sd[i] = gdx[i];
    __syncthreads();
    qx = (const int8_t *)sq;
    dx = sd;
}

/* The matrix of this block (of a grouped launch), chosen with constant indices only: a
 * run-time index into the parameter struct would copy it to local memory. */
static __device__ __forceinline__ void mmvq_pick(const ob_mmvq_set &set, const uint8_t *&W, float *&y, int64_t &N,
                                                 unsigned &b0) {
    W = set.w[0];
    y = set.y[0];
    N = set.n[0];
    b0 = 0;
#pragma unroll
    for (int k = 1; k < OB_MMVQ_GROUP; k++)
        if (k < set.count && blockIdx.x >= set.b0[k]) { W = set.w[k]; y = set.y[k]; N = set.n[k]; b0 = set.b0[k]; }
}

template <int T, int NT, int R>
__global__ void __launch_bounds__(OB_MMVQ_ROWS * OB_WARP)
    k_mmvq(ob_mmvq_set set, size_t rb, const int8_t *__restrict__ gqx, const float2 *__restrict__ gdx, int64_t K, int nt,
           int lsh, int smem) {
    const uint8_t *W;
    float *y;
    int64_t N;
    unsigned b0;
    mmvq_pick(set, W, y, N, b0);
#if !defined(OB_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    {
        /* No kernel writes weights: under PDL this block may start pulling its rows into
         * L2 while the previous kernel (which makes x) still drains. */
        const int64_t rpb = (int64_t)OB_MMVQ_ROWS * (OB_WARP >> lsh) * R, r0 = (int64_t)(blockIdx.x - b0) * rpb;
        const int64_t nr = N - r0 < rpb ? N - r0 : rpb;
        if (nr > 0) {
            const uint8_t *p = W + (size_t)r0 * rb;
            const size_t bytes = (size_t)nr * rb;
            for (size_t o = (size_t)threadIdx.x * 128; o < bytes; o += (size_t)blockDim.x * 128)
                asm volatile("prefetch.global.L2 [%0];" ::"l"(p + o));
        }
    }
#endif
    OB_PDL_ENTRY();
    extern __shared__ int4 ob_mmvq_sm[];
    const int8_t *qx = gqx;
    const float2 *dx = gdx;
    if (smem) stage_x(ob_mmvq_sm, gqx, gdx, nt * K, qx, dx);
    const int lane = threadIdx.x % OB_WARP, L = 1 << lsh, l = lane & (L - 1);
    const int rpw = OB_WARP >> lsh;
    /* R adjacent rows per lane group: with several columns the x reads, not the weights,
     * dominate, and the second row reuses them (same shared-memory addresses). */
    const int64_t row0 = (((int64_t)(blockIdx.x - b0) * OB_MMVQ_ROWS + threadIdx.x / OB_WARP) * rpw + (lane >> lsh)) * R;
    constexpr int S = mq<T>::slots;
    const int nu = row0 < N ? (int)(K / mq<T>::qk) * S : 0; /* (block, slot) units of a row */
    const uint8_t *wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) wr[r] = W + (row0 + r < N ? row0 + r : row0) * rb;
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    constexpr int UNR = T == OB_TYPE_Q6_K || R > 1 ? 2 : 4;
#pragma unroll UNR
    for (int u = l; u < nu; u += L) {
        const int bi = u / S, s = u % S;
#pragma unroll
        for (int r = 0; r < R; r++)
            dot_slot<T, NT>(wr[r] + (size_t)bi * mq<T>::bytes, s, qx + (int64_t)bi * mq<T>::qk,
                            dx + (int64_t)bi * (mq<T>::qk / 32), K, nt, acc[r]);
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float v = acc[r][t];
            for (int o = L / 2; o > 0; o /= 2) v += OB_SHFL_XOR(v, o);
            if (l == 0 && row0 + r < N && t < nt) y[t * N + row0 + r] = v;
        }
}

/* ---- staged matvec (one column) --------------------------------------------------------- */

/* One warp per row, OB_MMVQ_SW rows per block. The 2-aligned block types (Q6_K, Q8_0,
 * Q1_0, TQ2_0) cost k_mmvq one 16-bit load per 2 bytes; here, when a row starts 16-byte
 * aligned and rb % 16 == 0, the warp copies runs of mq<T>::run whole blocks of its row
 * (1.6-2.3 KB, a multiple of 16 bytes) with 16-byte loads into registers, parks each run
 * in its slice of shared memory and decodes it from there while the next run's loads are
 * in flight. The first run is requested before the grid-dependency wait (no kernel
 * writes weights), so under PDL it overlaps the previous kernel's tail. */
#define OB_MMVQ_SW 8 /* warps (= rows) per block of k_mmvq_run */
#ifdef OB_HIP
/* OB_SYNCWARP is empty under HIP; the loops below are block-uniform so a block barrier
 * orders the shared-memory hand-off there instead. */
#define MMVQ_WSYNC() __syncthreads()
#else
#define MMVQ_WSYNC() __syncwarp()
#endif

template <int T> struct run_vecs { static constexpr int v = mq<T>::run * mq<T>::bytes / 16; };

/* y[row] = W[row] . x for one column; XS: x also staged in shared memory after the weight
 * slices (qx K bytes, then dx K/32 float2), a template flag so that its reads compile to
 * shared-memory loads rather than generic ones. */
template <int T, bool XS>
__global__ void __launch_bounds__(OB_MMVQ_SW * OB_WARP, 4) /* <= 64 registers: 32 warps per SM */
    k_mmvq_run(ob_mmvq_set set, size_t rb, const int8_t *__restrict__ gqx, const float2 *__restrict__ gdx, int64_t K) {
    static_assert(mq<T>::run * mq<T>::bytes % 16 == 0, "runs must be whole 16-byte pieces");
    constexpr int NV = run_vecs<T>::v, VPL = (NV + OB_WARP - 1) / OB_WARP;
    constexpr int RUN = mq<T>::run, S = mq<T>::slots, BY = mq<T>::bytes, QK = mq<T>::qk;
    constexpr int UPL = (RUN * S + OB_WARP - 1) / OB_WARP; /* units per lane in a full run */
    const uint8_t *W;
    float *y;
    int64_t N;
    unsigned b0;
    mmvq_pick(set, W, y, N, b0);
    const int64_t r0 = (int64_t)(blockIdx.x - b0) * OB_MMVQ_SW; /* < N: blocks cover rows only */
#if !defined(OB_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    {
        const int64_t nr = N - r0 < OB_MMVQ_SW ? N - r0 : OB_MMVQ_SW;
        const uint8_t *p = W + (size_t)r0 * rb;
        const size_t bytes = (size_t)nr * rb;
        for (size_t o = (size_t)threadIdx.x * 128; o < bytes; o += (size_t)blockDim.x * 128)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(p + o));
    }
#endif
    const int warp = threadIdx.x / OB_WARP, lane = threadIdx.x % OB_WARP;
    const int64_t row = r0 + warp;
    /* Rows past N decode row r0 again and store nothing: every warp runs the same loop. */
    const uint4 *src = (const uint4 *)(W + (size_t)(row < N ? row : r0) * rb);
    const int nb = (int)(K / QK);
    uint4 v[VPL];
#pragma unroll
    for (int k = 0; k < VPL; k++) {
        const int i = lane + k * OB_WARP;
        v[k] = i < (nb < RUN ? nb : RUN) * BY / 16 ? ldw16_early((const uint8_t *)(src + i)) : make_uint4(0, 0, 0, 0);
    }
    OB_PDL_ENTRY();
    extern __shared__ int4 ob_mmvq_sm[];
    uint4 *wbuf = (uint4 *)ob_mmvq_sm + warp * NV;
    const int8_t *qx = gqx;
    const float2 *dx = gdx;
    if constexpr (XS) stage_x(ob_mmvq_sm + OB_MMVQ_SW * NV, gqx, gdx, K, qx, dx);
    float acc = 0.0f;
    for (int c0 = 0; c0 < nb; c0 += RUN) {
        const int nbr = nb - c0 < RUN ? nb - c0 : RUN, nv = nbr * BY / 16;
        MMVQ_WSYNC(); /* the previous run's readers are done with the slice */
#pragma unroll
        for (int k = 0; k < VPL; k++) {
            const int i = lane + k * OB_WARP;
            if (i < nv) wbuf[i] = v[k];
        }
        MMVQ_WSYNC();
        /* Next run's loads go out before this run is decoded. */
        const int nn = nb - c0 - RUN, nv2 = (nn <= 0 ? 0 : nn < RUN ? nn : RUN) * BY / 16;
        const uint4 *s2 = src + (size_t)(c0 + RUN) * BY / 16;
#pragma unroll
        for (int k = 0; k < VPL; k++) {
            const int i = lane + k * OB_WARP;
            if (i < nv2) v[k] = ldw16((const uint8_t *)(s2 + i));
        }
        const uint8_t *wb = (const uint8_t *)wbuf;
        const int nu = nbr * S;
#pragma unroll
        for (int k = 0; k < UPL; k++) {
            const int u = lane + k * OB_WARP;
            if (u < nu) {
                const int bi = u / S, s = u % S;
                const int64_t blk = c0 + bi; /* block of the row */
                /* Q4_K: lanes 2 apart share a bank group; the rest: blocks 4 apart */
                const int rot = T == OB_TYPE_Q4_K ? (2 * bi + (s >> 1)) & 3 : bi & 3;
                dot_slot<T, 1, true>(wb + bi * BY, s, qx + blk * QK, dx + blk * (QK / 32), K, 1, &acc, rot);
            }
        }
    }
    for (int o = OB_WARP / 2; o > 0; o /= 2) acc += OB_SHFL_XOR(acc, o);
    if (lane == 0 && row < N) y[row] = acc;
}

/* ---- host side ---------------------------------------------------------------------------- */

static bool hot_type(ob_type t) {
    return t == OB_TYPE_Q4_K || t == OB_TYPE_Q6_K || t == OB_TYPE_Q8_0 || t == OB_TYPE_Q1_0 || t == OB_TYPE_TQ2_0;
}

bool ob_cu_mmvq_applies(const ob_cu_ctx *cx, const ob_tensor *n) {
    const ob_tensor *w = n->src[0];
    const int64_t T = ob_nrows(n->src[1]);
    if (ob_cu_mmq_applies(cx, n)) return false; /* the tensor-core path takes it (op_mmq.cu) */
    if (!hot_type(w->type) || T < 1 || T > OB_CU_MMVQ_MAX_T || w->ne[0] > 0x3fffffff) return false;
    if (((uintptr_t)n->src[1]->data & 15) != 0) return false; /* float4 loads of x */
    /* Q4_K reads whole 16-byte pieces; the others 16-bit words. Weights are 32-aligned
     * in practice; anything else takes the generic path. */
    const uintptr_t a = (uintptr_t)w->data;
    return w->type == OB_TYPE_Q4_K ? (a & 15) == 0 : (a & 1) == 0;
}

size_t ob_cu_mmvq_qx_size(const ob_tensor *n) {
    const int64_t K = n->src[0]->ne[0], T = ob_nrows(n->src[1]);
    return ob_cu_qx_dx_offset(K, T) + (size_t)(K / 32 * T) * sizeof(float2);
}

/* Lanes per row: the fewest power of two >= the row's units, at most a warp. */
static int mmvq_lsh(int64_t units) {
    int lsh = 0;
    while (lsh < 5 && ((int64_t)1 << lsh) < units) lsh++;
    return lsh;
}

template <int T> static void launch(ob_cu_ctx *cx, const ob_mmvq_set *set, unsigned grid, size_t rb, int64_t K, int nt,
                                     const int8_t *qx, const float2 *dx, int lsh) {
    /* x in shared memory when it fits the default 48 KB a block may take. */
    const size_t sm = (size_t)nt * (size_t)K + (size_t)nt * (size_t)(K / 32) * sizeof(float2);
    const int use = sm <= 48 * 1024;
    const size_t shm = use ? sm : 0;
    const bool r2 = MMVQ_R(nt, K) == 2;
    if (nt == 1)
        OB_CU_LAUNCH(cx, k_mmvq<T, 1, 1>, grid, OB_MMVQ_ROWS * OB_WARP, shm, *set, rb, qx, dx, K, 1, lsh, use);
    else if (nt <= 4 && r2) /* 4 sequences: no dead column slots in the unrolled loops */
        OB_CU_LAUNCH(cx, k_mmvq<T, 4, 2>, grid, OB_MMVQ_ROWS * OB_WARP, shm, *set, rb, qx, dx, K, nt, lsh, use);
    else if (nt <= 4)
        OB_CU_LAUNCH(cx, k_mmvq<T, 4, 1>, grid, OB_MMVQ_ROWS * OB_WARP, shm, *set, rb, qx, dx, K, nt, lsh, use);
    else if (nt <= 8 && r2)
        OB_CU_LAUNCH(cx, k_mmvq<T, 8, 2>, grid, OB_MMVQ_ROWS * OB_WARP, shm, *set, rb, qx, dx, K, nt, lsh, use);
    else if (nt <= 8)
        OB_CU_LAUNCH(cx, k_mmvq<T, 8, 1>, grid, OB_MMVQ_ROWS * OB_WARP, shm, *set, rb, qx, dx, K, nt, lsh, use);
    else if (r2)
        OB_CU_LAUNCH(cx, k_mmvq<T, OB_CU_MMVQ_MAX_T, 2>, grid, OB_MMVQ_ROWS * OB_WARP, shm, *set, rb, qx, dx, K, nt, lsh, use);
    else
        OB_CU_LAUNCH(cx, k_mmvq<T, OB_CU_MMVQ_MAX_T, 1>, grid, OB_MMVQ_ROWS * OB_WARP, shm, *set, rb, qx, dx, K, nt, lsh, use);
}

static int64_t g_run_launches;
extern "C" int64_t ob_cu_mmvq_run_launches(void) { return __atomic_load_n(&g_run_launches, __ATOMIC_RELAXED); }

/* k_mmvq_run: the weight slices, plus x when the total fits the default 48 KB. */
template <int T> static void launch_run(ob_cu_ctx *cx, const ob_mmvq_set *set, unsigned grid, size_t rb, int64_t K,
                                         const int8_t *qx, const float2 *dx) {
    const size_t wsm = (size_t)OB_MMVQ_SW * run_vecs<T>::v * 16, xsm = (size_t)K + (size_t)(K / 32) * sizeof(float2);
    const int bt = OB_MMVQ_SW * OB_WARP;
    const bool ok = wsm + xsm <= 48 * 1024 ? OB_CU_LAUNCH(cx, k_mmvq_run<T, true>, grid, bt, wsm + xsm, *set, rb, qx, dx, K)
                                           : OB_CU_LAUNCH(cx, k_mmvq_run<T, false>, grid, bt, wsm, *set, rb, qx, dx, K);
    if (ok) __atomic_fetch_add(&g_run_launches, 1, __ATOMIC_RELAXED);
}

/* Whether k_mmvq_run takes one column of these matrices: 16-byte aligned rows of at least
 * 1 KB (shorter rows leave most of a warp idle; k_mmvq splits them over fewer lanes). */
static bool use_run(ob_tensor *const *ns, int count, size_t rb, int64_t T) {
    if (T != 1 || rb % 16 != 0 || rb < 1024) return false;
    for (int i = 0; i < count; i++)
        if (((uintptr_t)ns[i]->src[0]->data & 15) != 0) return false;
    return true;
}

int ob_cu_mmvq_group_max(void) { return OB_MMVQ_GROUP; }

bool ob_cu_op_mmvq_group(ob_cu_ctx *cx, ob_tensor *const *ns, int count) {
    if (count < 1 || count > OB_MMVQ_GROUP) return false;
    const ob_tensor *x = ns[0]->src[1], *w0 = ns[0]->src[0];
    const int64_t K = w0->ne[0], T = ob_nrows(x);
    int8_t *qx = (int8_t *)cx->qx;
    float2 *dx = (float2 *)((char *)cx->qx + ob_cu_qx_dx_offset(K, T));
    if (cx->qx_src != x->data || cx->qx_k != K || cx->qx_t != T) {
        if (!ob_cu_quant_act(cx, (const float *)x->data, qx, dx, K * T)) return false;
        cx->qx_src = x->data;
        cx->qx_k = K;
        cx->qx_t = T;
    }
    if (ob_cu_mmvq_tma_applies(cx, ns, count)) return ob_cu_mmvq_tma(cx, ns, count, qx, dx) && !cx->faulted;
    ob_mmvq_set set;
    memset(&set, 0, sizeof(set));
    unsigned grid = 0;
    int lsh = 5;
    switch (w0->type) {
    case OB_TYPE_Q4_K: lsh = mmvq_lsh(K / mq<OB_TYPE_Q4_K>::qk * mq<OB_TYPE_Q4_K>::slots); break;
    case OB_TYPE_Q6_K: lsh = mmvq_lsh(K / mq<OB_TYPE_Q6_K>::qk * mq<OB_TYPE_Q6_K>::slots); break;
    case OB_TYPE_Q8_0: lsh = mmvq_lsh(K / mq<OB_TYPE_Q8_0>::qk * mq<OB_TYPE_Q8_0>::slots); break;
    case OB_TYPE_Q1_0: lsh = mmvq_lsh(K / mq<OB_TYPE_Q1_0>::qk * mq<OB_TYPE_Q1_0>::slots); break;
    case OB_TYPE_TQ2_0: lsh = mmvq_lsh(K / mq<OB_TYPE_TQ2_0>::qk * mq<OB_TYPE_TQ2_0>::slots); break;
    default: return false;
    }
    const size_t rb = ob_row_size(w0->type, K);
    const bool run = use_run(ns, count, rb, T);
    const int rows_per_block = run ? OB_MMVQ_SW : OB_MMVQ_ROWS * (OB_WARP >> lsh) * MMVQ_R(T, K);
    for (int i = 0; i < count; i++) {
        set.w[i] = (const uint8_t *)ns[i]->src[0]->data;
        set.y[i] = (float *)ns[i]->data;
        set.n[i] = ns[i]->src[0]->ne[1];
        set.b0[i] = grid;
        grid += ob_cu_blocks(set.n[i], rows_per_block);
    }
    set.count = count;
    if (run) {
        switch (w0->type) {
        case OB_TYPE_Q4_K: launch_run<OB_TYPE_Q4_K>(cx, &set, grid, rb, K, qx, dx); break;
        case OB_TYPE_Q6_K: launch_run<OB_TYPE_Q6_K>(cx, &set, grid, rb, K, qx, dx); break;
        case OB_TYPE_Q8_0: launch_run<OB_TYPE_Q8_0>(cx, &set, grid, rb, K, qx, dx); break;
        case OB_TYPE_Q1_0: launch_run<OB_TYPE_Q1_0>(cx, &set, grid, rb, K, qx, dx); break;
        case OB_TYPE_TQ2_0: launch_run<OB_TYPE_TQ2_0>(cx, &set, grid, rb, K, qx, dx); break;
        default: return false;
        }
        return !cx->faulted;
    }
    switch (w0->type) {
    case OB_TYPE_Q4_K: launch<OB_TYPE_Q4_K>(cx, &set, grid, rb, K, (int)T, qx, dx, lsh); break;
    case OB_TYPE_Q6_K: launch<OB_TYPE_Q6_K>(cx, &set, grid, rb, K, (int)T, qx, dx, lsh); break;
    case OB_TYPE_Q8_0: launch<OB_TYPE_Q8_0>(cx, &set, grid, rb, K, (int)T, qx, dx, lsh); break;
    case OB_TYPE_Q1_0: launch<OB_TYPE_Q1_0>(cx, &set, grid, rb, K, (int)T, qx, dx, lsh); break;
    case OB_TYPE_TQ2_0: launch<OB_TYPE_TQ2_0>(cx, &set, grid, rb, K, (int)T, qx, dx, lsh); break;
    default: return false;
    }
    return !cx->faulted; /* launch() recorded a failed launch */
}

bool ob_cu_op_mmvq(ob_cu_ctx *cx, ob_tensor *n) { return ob_cu_op_mmvq_group(cx, &n, 1); }

OB_CU_MARK_BIND(mmvq)
