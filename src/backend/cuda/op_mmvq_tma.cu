/* One-column decode matvec on sm_90 for TQ2_0, Q4_K and Q6_K weights: rows streamed into
 * shared memory by the bulk-copy engine (cp.async.bulk + mbarrier), x held in registers.
 *
 * Why a kernel of its own: a TQ2_0 row of K = 4096 is 1,056 bytes, so the staged matvec
 * (k_mmvq_run, op_mmvq.cu) gives each warp one short run to load, wait for and decode, and
 * its per-slot decode (shift, mask, a second dp4a for the -1 offset) costs ~2 instructions
 * per weight: it moved ~1 TB/s (bench/NOTES-cuda-3-7.md: Session 4). Here:
 *   - the grid is persistent (as many blocks as fit an SM); each warp owns chunks w, w +
 *     GW, ... (GW = warps in the grid) of up to 4 consecutive rows and keeps `stages`
 *     chunks in flight: one bulk copy per chunk into the warp's ring in shared memory,
 *     the first ones issued before the grid-dependency wait (no kernel writes weights);
 *   - lane l owns the 128-element halves h = l + 32 i (i < HPL = K / 4096) of every row,
 *     so its x (128 int8 per half, 32 registers) and x's block scales are loaded once;
 *   - TQ2_0's 32 bytes of trits per half are masked in place, without shifts: byte j holds
 *     the trits of elements 32 r + j (r = 0..3) at bits 2r, and (q & 3 << 2r) is 4^r times
 *     the trit, so dp4a (unsigned weights, signed x) sums 4^r * trit * x and the 4^-r goes
 *     into x's scale; the -1 of each trit comes off as the sum of x over the half, which
 *     the activation quantizer already stores (dx.y = d * sum(q)). One LOP3 and one dp4a
 *     per 4 weights. Q4_K and Q6_K decode their half the same way (nibbles in place).
 * It took a qwen3-8b TQ2_0 decode step a third faster, and the launch itself, not the bytes,
 * is now what a matvec costs (bench/NOTES-cuda-3-7.md: Session 6; the Q6_K K = 12288 figures
 * in bench/NOTES.md: Moved from source comments).
 * Used for one column (T = 1) when K is 4096 * HPL, rows are 16-byte aligned (cp.async.bulk
 * needs it) and the device runs sm_90 code (ONEBIT_CUDA_TMV=0: off, =mask: per type, for
 * comparisons; read into cx->tma when the backend starts). ONEBIT_CUDA_TMV_CHUNK / _STAGES /
 * _BLOCKS / _RMIN set the copy size, ring depth, blocks per SM and the fewest chunks per
 * warp. */
#include "backend/cuda/cuda_int.h"
#include "backend/cuda/cuda_mmvq.h"
#include <stdlib.h>
#include <string.h>

#define TMV_WARPS 4      /* warps per block */
#define TMV_MAX_STAGES 8 /* copies in flight per warp, at most */
#define TMV_GROUP 4      /* matrices sharing x in one launch (q/k/v, gate/up) */
#define TMV_MAX_CHUNK 4  /* rows per bulk copy, at most */

/* The launch's matrices, cut into chunks of `cr` consecutive rows (one bulk copy each; the
 * last chunk of a matrix may be shorter), numbered jointly. */
typedef struct tmv_set {
    const uint8_t *w[TMV_GROUP];
    float *y[TMV_GROUP];
    int n[TMV_GROUP];  /* rows of each matrix */
    int c0[TMV_GROUP]; /* its first chunk in the joint numbering */
    int count, chunks, cr;
} tmv_set;

#if !defined(OB_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TMV_DEVICE 1
#endif

#ifdef TMV_DEVICE
static __device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* Chunk q of the joint numbering: its rows' weights, output, and row count. Constant
 * indices only: a run-time index into the parameter struct would copy it to local memory. */
static __device__ __forceinline__ void tmv_chunk(const tmv_set &set, int q, size_t rb, const uint8_t *&w, float *&y, int &cnt) {
    const uint8_t *w0 = set.w[0];
    float *y0 = set.y[0];
    int n = set.n[0], c0 = 0;
#pragma unroll
    for (int k = 1; k < TMV_GROUP; k++)
        if (k < set.count && q >= set.c0[k]) { w0 = set.w[k]; y0 = set.y[k]; n = set.n[k]; c0 = set.c0[k]; }
    const int r = (q - c0) * set.cr;
    w = w0 + (size_t)r * rb;
    y = y0 + r;
    cnt = n - r < set.cr ? n - r : set.cr;
}

/* Lane 0: bytes from global src into shared dst, completing on mbarrier bar. */
static __device__ __forceinline__ void tmv_fetch(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
static __device__ __forceinline__ void tmv_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}
/* dp4a with unsigned weight bytes (the masked trits reach 2 * 64) and signed x bytes. */
static __device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
#endif

/* This lane's x for one 128-element half: int8 values (q[8r + k]: elements 32r + 4k ..
 * + 3), per 32-element sub-block r the scale d[r] and d * sum(q) s[r], and for Q6_K the
 * int sums of each 16 elements (s16[2r + j]). */
struct tmv_x {
    int q[32];
    float d[4], s[4];
    int s16[8];
};

#ifdef TMV_DEVICE
/* NW consecutive 32-bit words from shared memory at p + o, o even (blocks of 66 and 210
 * bytes start 2-aligned): NW aligned words, one more when o % 4 == 2, joined by funnel
 * shifts. */
template <int NW> static __device__ __forceinline__ void tmv_words(const unsigned char *p, int o, uint32_t (&w)[NW]) {
    const uint32_t *wp = (const uint32_t *)(p + (o & ~3));
    const unsigned sh = (unsigned)(o & 2) * 8;
    uint32_t u[NW + 1];
#pragma unroll
    for (int k = 0; k < NW; k++) u[k] = wp[k];
    u[NW] = sh ? wp[NW] : 0u; /* never past the data */
#pragma unroll
    for (int k = 0; k < NW; k++) w[k] = __funnelshift_r(u[k], u[k + 1], sh);
}
static __device__ __forceinline__ int sbyte(uint32_t w, int k) { return (int)(int8_t)(w >> (8 * k)); }
#endif

template <int T> struct tmv_tr;
template <> struct tmv_tr<OB_TYPE_TQ2_0> { static constexpr int bytes = 66; };
template <> struct tmv_tr<OB_TYPE_Q4_K> { static constexpr int bytes = 144; };
template <> struct tmv_tr<OB_TYPE_Q6_K> { static constexpr int bytes = 210; };

/* dot(half h of the row at rp, x). All three types have 256-element blocks: half h is
 * elements [128 (h & 1), +128) of block h >> 1. */
template <int T>
static __device__ __forceinline__ float tmv_half(const unsigned char *rp, int h, const tmv_x &x) {
#ifdef TMV_DEVICE
    const int o = tmv_tr<T>::bytes * (h >> 1), g = h & 1;
    if constexpr (T == OB_TYPE_TQ2_0) {
        /* qs[64] then d: byte j of half g holds the trits of elements 32r + j at bits 2r.
         * (q & 3 << 2r) is 4^r times the trit; dp4a (unsigned weights, signed x) sums that
         * against x, and the 4^-r goes into x's scale; the -1 of each trit comes off as the
         * sum of x (s[r]). One LOP3 and one dp4a per 4 weights. */
        uint32_t w[8];
        tmv_words<8>(rp, o + 32 * g, w);
        const float d = __half2float(__ushort_as_half(*(const unsigned short *)(rp + o + 64)));
        int s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            s0 = dp4a_us(w[k] & 0x03030303u, x.q[k], s0);
            s1 = dp4a_us(w[k] & 0x0c0c0c0cu, x.q[8 + k], s1);
            s2 = dp4a_us(w[k] & 0x30303030u, x.q[16 + k], s2);
            s3 = dp4a_us(w[k] & 0xc0c0c0c0u, x.q[24 + k], s3);
        }
        return d * (((float)s0 * x.d[0] + (float)s1 * (x.d[1] * 0.25f)) + ((float)s2 * (x.d[2] * 0.0625f) + (float)s3 * (x.d[3] * 0.015625f)) -
                     ((x.s[0] + x.s[1]) + (x.s[2] + x.s[3])));
    } else if constexpr (T == OB_TYPE_Q4_K) {
        /* d, dmin (f16), 12 bytes of 6-bit scales and mins, qs[128]: sub-block j = 4g + r
         * (32 elements) is the low (r even) or high nibbles of qs bytes 32 (j / 2) ... */
        const uint4 hd = *(const uint4 *)(rp + o);
        uint4 qv[4];
#pragma unroll
        for (int k = 0; k < 4; k++) qv[k] = *(const uint4 *)(rp + o + 16 + 64 * g + 16 * k);
        const uint32_t q[16] = {qv[0].x, qv[0].y, qv[0].z, qv[0].w, qv[1].x, qv[1].y, qv[1].z, qv[1].w,
                                qv[2].x, qv[2].y, qv[2].z, qv[2].w, qv[3].x, qv[3].y, qv[3].z, qv[3].w};
        const float d = __half2float(__ushort_as_half((unsigned short)(hd.x & 0xffff)));
        const float dmin = __half2float(__ushort_as_half((unsigned short)(hd.x >> 16)));
        float acc = 0.0f, mn = 0.0f;
#pragma unroll
        for (int r = 0; r < 4; r++) {
            int sd = 0;
#pragma unroll
            for (int k = 0; k < 8; k++) sd = __dp4a((int)((q[8 * (r >> 1) + k] >> (4 * (r & 1))) & 0x0f0f0f0fu), x.q[8 * r + k], sd);
            /* 6-bit scale and min of sub-block j = 4g + r (bytes 4..15 of the block) */
            const uint32_t bs = hd.y >> (8 * r), bm = hd.z >> (8 * r), bh = hd.w >> (8 * r);
            const int sc = (int)(g ? (bh & 15) | ((bs >> 6) & 3) << 4 : bs & 63);
            const int m = (int)(g ? ((bh >> 4) & 15) | ((bm >> 6) & 3) << 4 : bm & 63);
            acc += (float)(sc * sd) * x.d[r];
            mn += (float)m * x.s[r];
        }
        return d * acc - dmin * mn;
    } else {
        /* Q6_K: ql[128], qh[64], scales[16] (int8), d. Element 32r + l of half g: low (r
         * = 0, 1) or high (r = 2, 3) nibble of ql[64g + l + 32 (r & 1)], bits 2r of
         * qh[32g + l] on top, minus 32; scale sc[8g + 2r + l / 16]. */
        uint32_t ql[16], qh[8], scw[2];
        tmv_words<16>(rp, o + 64 * g, ql);
        tmv_words<8>(rp, o + 128 + 32 * g, qh);
        tmv_words<2>(rp, o + 192 + 8 * g, scw);
        const float d = __half2float(__ushort_as_half(*(const unsigned short *)(rp + o + 208)));
        int t[4];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            int a0 = 0, a1 = 0; /* the two 16-element groups */
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const uint32_t lo = ((ql[k + 8 * (r & 1)] >> (4 * (r >> 1))) & 0x0f0f0f0fu);
                const uint32_t hi = r == 0 ? (qh[k] << 4) & 0x30303030u
                                  : r == 1 ? (qh[k] << 2) & 0x30303030u
                                  : r == 2 ? qh[k] & 0x30303030u
                                           : (qh[k] >> 2) & 0x30303030u;
                if (k < 4) a0 = __dp4a((int)(lo | hi), x.q[8 * r + k], a0);
                else a1 = __dp4a((int)(lo | hi), x.q[8 * r + k], a1);
            }
            t[r] = sbyte(scw[r >> 1], 2 * (r & 1)) * (a0 - 32 * x.s16[2 * r]) +
                   sbyte(scw[r >> 1], 2 * (r & 1) + 1) * (a1 - 32 * x.s16[2 * r + 1]);
        }
        return d * (((float)t[0] * x.d[0] + (float)t[1] * x.d[1]) + ((float)t[2] * x.d[2] + (float)t[3] * x.d[3]));
    }
#else
    (void)rp, (void)h, (void)x;
    return 0.0f;
#endif
}

template <int T, int HPL>
__global__ void __launch_bounds__(TMV_WARPS * OB_WARP)
    k_mmvq_tma(tmv_set set, size_t rb, const int8_t *__restrict__ gqx, const float2 *__restrict__ gdx, int stages, int flags) {
#ifdef TMV_DEVICE
    extern __shared__ __align__(16) unsigned char tmv_sm[];
    const int warp = threadIdx.x / OB_WARP, lane = threadIdx.x % OB_WARP;
    const int gw = blockIdx.x * TMV_WARPS + warp, GW = gridDim.x * TMV_WARPS;
    /* shared memory: barriers, the block's x (swizzled qx, then dx), the warps' rings */
    uint64_t *bars = (uint64_t *)tmv_sm + warp * TMV_MAX_STAGES;
    int4 *sx = (int4 *)(tmv_sm + TMV_WARPS * TMV_MAX_STAGES * 8);
    constexpr int K = 4096 * HPL;
    const size_t sb = (size_t)set.cr * rb; /* bytes of a ring slot */
    unsigned char *ring = (unsigned char *)sx + K + K / 4 + (size_t)warp * (size_t)stages * sb;
    const int nch = gw < set.chunks ? (set.chunks - gw + GW - 1) / GW : 0; /* chunks of this warp */
    /* Lane j < stages sets up ring slot j and requests chunk j of the warp into it. */
    if (lane < stages) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bars + lane)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        if (lane < nch) {
            const uint8_t *w;
            float *y;
            int cnt;
            tmv_chunk(set, gw + lane * GW, rb, w, y, cnt);
            tmv_fetch(smem_u32(ring + (size_t)lane * sb), w, (uint32_t)(cnt * rb), smem_u32(bars + lane));
        }
    }
    __syncwarp();
    OB_PDL_ENTRY();
    /* x into shared memory with coalesced loads: 16-byte piece p of half h goes to slot
     * 8h + (p ^ (h & 7)), so that below the lanes of a quarter warp (halves h..h+7, one
     * piece index at a time) read eight different bank groups. */
    for (int i = threadIdx.x; i < K / 16; i += TMV_WARPS * OB_WARP) {
        const int h = i >> 3, p = i & 7;
        sx[8 * h + (p ^ (h & 7))] = ((const int4 *)gqx)[i];
    }
    for (int i = threadIdx.x; i < K / 64; i += TMV_WARPS * OB_WARP) sx[K / 16 + i] = ((const int4 *)gdx)[i];
    __syncthreads();
    /* This lane's x: halves h = lane + 32 i, in registers for the whole launch. */
    tmv_x xs[HPL];
#pragma unroll
    for (int i = 0; i < HPL; i++) {
        const int h = lane + OB_WARP * i;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int4 v = sx[8 * h + (k ^ (h & 7))];
            xs[i].q[4 * k] = v.x;
            xs[i].q[4 * k + 1] = v.y;
            xs[i].q[4 * k + 2] = v.z;
            xs[i].q[4 * k + 3] = v.w;
        }
        const float4 d01 = ((const float4 *)(sx + K / 16))[2 * h], d23 = ((const float4 *)(sx + K / 16))[2 * h + 1];
        xs[i].d[0] = d01.x, xs[i].s[0] = d01.y, xs[i].d[1] = d01.z, xs[i].s[1] = d01.w;
        xs[i].d[2] = d23.x, xs[i].s[2] = d23.y, xs[i].d[3] = d23.z, xs[i].s[3] = d23.w;
        if constexpr (T == OB_TYPE_Q6_K) {
#pragma unroll
            for (int e = 0; e < 8; e++) {
                int sm = 0;
#pragma unroll
                for (int k = 0; k < 4; k++) sm = __dp4a(0x01010101, xs[i].q[4 * e + k], sm);
                xs[i].s16[e] = sm;
            }
        }
    }
    int s = 0;         /* ring slot of chunk j */
    uint32_t par = 0u; /* its barrier's phase parity */
    for (int j = 0; j < nch; j++) {
        const uint8_t *w;
        float *y;
        int cnt;
        tmv_chunk(set, gw + j * GW, rb, w, y, cnt);
        tmv_wait(smem_u32(bars + s), par);
        const unsigned char *cp = ring + (size_t)s * sb;
        float acc[TMV_MAX_CHUNK];
#pragma unroll
        for (int rr = 0; rr < TMV_MAX_CHUNK; rr++) {
            acc[rr] = 0.0f;
            if (rr >= cnt || (flags & 1)) continue;
#pragma unroll
            for (int i = 0; i < HPL; i++) acc[rr] += tmv_half<T>(cp + (size_t)rr * rb, lane + OB_WARP * i, xs[i]);
        }
        __syncwarp(); /* every lane is done with this slot */
        if (lane == 0 && j + stages < nch) {
            const uint8_t *w2;
            float *y2;
            int cnt2;
            tmv_chunk(set, gw + (j + stages) * GW, rb, w2, y2, cnt2);
            tmv_fetch(smem_u32(cp), w2, (uint32_t)(cnt2 * rb), smem_u32(bars + s));
        }
#pragma unroll
        for (int o = OB_WARP / 2; o > 0; o /= 2)
#pragma unroll
            for (int rr = 0; rr < TMV_MAX_CHUNK; rr++) acc[rr] += OB_SHFL_XOR(acc[rr], o);
#pragma unroll
        for (int rr = 0; rr < TMV_MAX_CHUNK; rr++)
            if (lane == rr && rr < cnt) y[rr] = acc[rr];
        if (++s == stages) {
            s = 0;
            par ^= 1u;
        }
    }
#else
    (void)set, (void)rb, (void)gqx, (void)gdx, (void)stages, (void)flags;
#endif
}

/* ---- host side ---------------------------------------------------------------------------- */

static int64_t g_tmv_launches;
extern "C" int64_t ob_cu_mmvq_tma_launches(void) { return __atomic_load_n(&g_tmv_launches, __ATOMIC_RELAXED); }

extern "C" bool ob_cu_backend_tma(const ob_backend *be) { return ((const ob_cu_ctx *)be->ctx)->tma != 0; }

/* Up to which K = 4096 * HPL a type takes the kernel (the lanes keep HPL halves of x in
 * registers); 0: not at all, or not on this backend (cx->tma: OB_CU_TMA_* bits). */
static int tmv_max_hpl(const ob_cu_ctx *cx, ob_type t) {
    switch (t) {
    case OB_TYPE_TQ2_0: return cx->tma & OB_CU_TMA_TQ2_0 ? 4 : 0;
    case OB_TYPE_Q4_K: return cx->tma & OB_CU_TMA_Q4_K ? 3 : 0;
    case OB_TYPE_Q6_K: return cx->tma & OB_CU_TMA_Q6_K ? 3 : 0;
    default: return 0;
    }
}

static size_t tmv_plan(const ob_cu_ctx *cx, size_t rb, int hpl, int *cr_out, int *stages_out);

bool ob_cu_mmvq_tma_applies(const ob_cu_ctx *cx, ob_tensor *const *ns, int count) {
    if (count < 1 || count > TMV_GROUP) return false;
    const ob_tensor *w0 = ns[0]->src[0];
    const int64_t K = w0->ne[0];
    if (ob_nrows(ns[0]->src[1]) != 1 || K < 4096 || K % 4096 != 0 || K / 4096 > tmv_max_hpl(cx, w0->type)) return false;
    int64_t rows = 0;
    for (int i = 0; i < count; i++) {
        if (((uintptr_t)ns[i]->src[0]->data & 15) != 0) return false;
        rows += ns[i]->src[0]->ne[1];
    }
    const size_t rb = ob_row_size(w0->type, K);
    int cr, stages;
    /* 227 KB of shared memory per block on sm_90 */
    return rows < 0x7fffffff && rb % 16 == 0 && tmv_plan(cx, rb, (int)(K / 4096), &cr, &stages) <= 220 * 1024;
}

/* Rows per bulk copy (ONEBIT_CUDA_TMV_CHUNK, default 4, fewer where that passes 12 KB),
 * copies in flight per warp (ONEBIT_CUDA_TMV_STAGES, default ~12 KB of weights, at least
 * 2) and the block's shared memory for rows of rb bytes and K = 4096 * hpl. */
static size_t tmv_plan(const ob_cu_ctx *cx, size_t rb, int hpl, int *cr_out, int *stages_out) {
    int cr = cx->opt.tmv_chunk;
    if (cr <= 0) cr = (int)(12 * 1024 / rb);
    cr = cr < 1 ? 1 : cr > TMV_MAX_CHUNK ? TMV_MAX_CHUNK : cr;
    const size_t sb = (size_t)cr * rb;
    int stages = cx->opt.tmv_stages;
    if (stages <= 0) stages = (int)((12 * 1024 + sb - 1) / sb);
    stages = stages < 2 ? 2 : stages > TMV_MAX_STAGES ? TMV_MAX_STAGES : stages;
    *cr_out = cr;
    *stages_out = stages;
    return (size_t)TMV_WARPS * TMV_MAX_STAGES * 8 + (size_t)4096 * hpl * 5 / 4 + (size_t)TMV_WARPS * (size_t)stages * sb;
}

template <int T, int HPL>
static bool tmv_launch(ob_cu_ctx *cx, tmv_set *set, size_t rb, const int8_t *qx, const float2 *dx) {
#ifdef OB_HIP
    (void)cx, (void)set, (void)rb, (void)qx, (void)dx;
    return false; /* no bulk copies there: cx->tma is always 0 */
#else
    int cr, stages;
    const size_t shm = tmv_plan(cx, rb, HPL, &cr, &stages);
    /* Shared memory over 48 KB must be opted into; the blocks that fit an SM, once per
     * (kernel, size). */
    static size_t set_shm;
    static int per_sm;
    if (set_shm != shm) {
        if (!OB_CU(cx, cudaFuncSetAttribute(k_mmvq_tma<T, HPL>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm))) return false;
        int n = 0;
        if (!OB_CU(cx, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k_mmvq_tma<T, HPL>, TMV_WARPS * OB_WARP, shm))) return false;
        per_sm = n < 1 ? 1 : n;
        set_shm = shm;
    }
    int bps = cx->opt.tmv_blocks; /* blocks per SM (0: as many as fit) */
    if (bps <= 0 || bps > per_sm) bps = per_sm;
    set->cr = cr;
    set->chunks = 0;
    for (int i = 0; i < set->count; i++) {
        set->c0[i] = set->chunks;
        set->chunks += (set->n[i] + cr - 1) / cr;
    }
    /* at least rmin chunks per warp where the matrices are small (ONEBIT_CUDA_TMV_RMIN): each
     * warp's set-up (barriers, x) then serves several */
    const int rmin = cx->opt.tmv_rmin;
    const int64_t per = (int64_t)TMV_WARPS * (rmin < 1 ? 1 : rmin);
    const int64_t need = (set->chunks + per - 1) / per, cap = (int64_t)cx->sm_count * bps;
    const unsigned grid = (unsigned)(need < cap ? need : cap);
    if (grid == 0) return true; /* no rows: nothing to launch (a grid of 0 is an error) */
    const int flags = (int)cx->opt.tmv_flags; /* 1: skip the dot products (streaming only; diagnostics) */
    if (!OB_CU_LAUNCH(cx, k_mmvq_tma<T, HPL>, grid, TMV_WARPS * OB_WARP, shm, *set, rb, qx, dx, stages, flags)) return false;
    __atomic_fetch_add(&g_tmv_launches, 1, __ATOMIC_RELAXED);
    return true;
#endif
}

bool ob_cu_mmvq_tma(ob_cu_ctx *cx, ob_tensor *const *ns, int count, const int8_t *qx, const float2 *dx) {
    tmv_set set;
    memset(&set, 0, sizeof(set));
    for (int i = 0; i < count; i++) {
        set.w[i] = (const uint8_t *)ns[i]->src[0]->data;
        set.y[i] = (float *)ns[i]->data;
        set.n[i] = (int)ns[i]->src[0]->ne[1];
    }
    set.count = count;
    const ob_type t = ns[0]->src[0]->type;
    const int64_t K = ns[0]->src[0]->ne[0];
    const size_t rb = ob_row_size(t, K);
    switch (t * 8 + (int)(K / 4096)) {
    case OB_TYPE_TQ2_0 * 8 + 1: return tmv_launch<OB_TYPE_TQ2_0, 1>(cx, &set, rb, qx, dx);
    case OB_TYPE_TQ2_0 * 8 + 2: return tmv_launch<OB_TYPE_TQ2_0, 2>(cx, &set, rb, qx, dx);
    case OB_TYPE_TQ2_0 * 8 + 3: return tmv_launch<OB_TYPE_TQ2_0, 3>(cx, &set, rb, qx, dx);
    case OB_TYPE_TQ2_0 * 8 + 4: return tmv_launch<OB_TYPE_TQ2_0, 4>(cx, &set, rb, qx, dx);
    case OB_TYPE_Q4_K * 8 + 1: return tmv_launch<OB_TYPE_Q4_K, 1>(cx, &set, rb, qx, dx);
    case OB_TYPE_Q4_K * 8 + 2: return tmv_launch<OB_TYPE_Q4_K, 2>(cx, &set, rb, qx, dx);
    case OB_TYPE_Q4_K * 8 + 3: return tmv_launch<OB_TYPE_Q4_K, 3>(cx, &set, rb, qx, dx);
    case OB_TYPE_Q6_K * 8 + 1: return tmv_launch<OB_TYPE_Q6_K, 1>(cx, &set, rb, qx, dx);
    case OB_TYPE_Q6_K * 8 + 2: return tmv_launch<OB_TYPE_Q6_K, 2>(cx, &set, rb, qx, dx);
    case OB_TYPE_Q6_K * 8 + 3: return tmv_launch<OB_TYPE_Q6_K, 3>(cx, &set, rb, qx, dx);
    default: return false;
    }
}

OB_CU_MARK_BIND(mmvq_tma)
