/* ATTENTION for prefill on tensor cores (sm_80+): flash attention with mma.sync.
 *
 * A block of four warps owns 64 query rows: 64 / G consecutive batch tokens times the G =
 * n_head / n_kv query heads that share one kv head (row r = token r / G, head r % G), so
 * each K/V tile in shared memory serves every head of the group; warp w owns rows
 * [16w, 16w + 16). The block walks the cache in tiles of 64 cells, from
 * the lowest cell any of its tokens can see to the highest, skipping tiles nobody sees
 * (the gap between two sequences' cell ranges). Each K/V tile is converted to f16 in
 * shared memory (Q8_0 dequantized on the way); S = Q K^T and O += P V run as
 * m16n8k16 f16 mma with f32 accumulators, and the softmax is online in f32 (running max
 * and sum per row). Masking is per (token, cell): a token at (seq s, pos p) sees cells
 * s*cps + [lo, hi] with lo/hi exactly as k_attn_pf computes them (causal, window, whole
 * sequence for encoders), so tokens of different sequences may share a tile.
 *
 * Precision: q (scaled) and P are rounded to f16, so results differ from the f32
 * reference by ~1e-3 relative; the dispatcher therefore never takes F32 caches. gpt-oss's
 * attention sinks join each row's denominator at the end (rowops.cuh's attn_inv). */
#include "backend/cuda/cuda_fa.h"
#include "backend/cuda/rowops.cuh"
#include <limits.h>
#include <math.h>

#define OB_FA_BM 64    /* query rows ((token, head) pairs) per block */
#define OB_FA_BN 64    /* cache cells per tile */
#define OB_FA_WARPS 4  /* 16 rows each */
#define OB_FA_PAD 8    /* halves of padding per shared row: conflict-free fragment loads */
/* Fewer tokens leave too few blocks (n_kv * T / tokens per block) to fill the GPU over a
 * long cache (speculative verify steps): the per-(token, head) warp kernel does better. */
#define OB_FA_MIN_T 32

typedef struct ob_fa_args {
    const float *q;            /* [hd, H, T] */
    const uint8_t *kc, *vc;    /* [hd*n_kv, cells] rows of krb / vrb bytes */
    const int32_t *pos, *seq;  /* [T] */
    float *out;                /* [hd, H, T] */
    int T, H, n_kv, cps, cells, window, ktype, vtype, causal;
    int G, tpb;                /* query heads per kv head; tokens per block (64 / G) */
    size_t krb, vrb;
    float scale, cap, alibi;
    const float *sinks;        /* gpt-oss's sinks F32 [H], or NULL */
} ob_fa_args;

bool ob_cu_fa_applies(const ob_cu_ctx *cx, const ob_tensor *n) {
#if defined(OB_HIP)
    return false;
#else
    const ob_tensor *q = n->src[0], *kc = n->src[1], *vc = n->src[2];
    const int64_t hd = q->ne[0], T = q->ne[2] * q->ne[3];
    const bool kv_ok = (kc->type == OB_TYPE_F16 || kc->type == OB_TYPE_Q8_0) && (vc->type == OB_TYPE_F16 || vc->type == OB_TYPE_Q8_0);
    /* values as wide as the keys, a V cache of the K cache's layout (narrower values, MLA's,
     * take k_attn_pf) */
    const bool v_ok = n->ne[0] == hd * q->ne[1] && vc->ne[0] == kc->ne[0];
    return !cx->fa_off && kv_ok && v_ok && T >= OB_FA_MIN_T && (hd == 64 || hd == 128) && n->ip[1] > 0 && q->ne[1] % n->ip[1] == 0 &&
           q->ne[1] / n->ip[1] <= OB_FA_BM &&
           ob_nrows(kc) < INT_MAX - 2 * OB_FA_BN && T <= 65535 && (uintptr_t)kc->data % 16 == 0 && (uintptr_t)vc->data % 16 == 0 &&
           (uintptr_t)q->data % 8 == 0 && (uintptr_t)n->data % 8 == 0;
#endif
}

#if !defined(OB_HIP)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
/* Two floats -> packed f16x2 (lo in the low half, as mma fragments want). */
static __device__ __forceinline__ uint32_t fa_pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *(const uint32_t *)&h;
}

/* One K or V tile: cells c0 + [0, 64) of kv head kh into sm[64][HD + PAD] as f16. Cells
 * nobody in the block sees (vis[r] == 0) become zeros, so stale or NaN cache rows cannot
 * reach P V through a 0 * NaN. */
template <int HD>
static __device__ __forceinline__ void fa_load_tile(__half (*sm)[HD + OB_FA_PAD], const uint8_t *cache, size_t rb, int type,
                                                    int kh, int c0, const int *vis) {
    if (type == OB_TYPE_F16) {
        constexpr int per = HD / 8; /* 16-byte chunks per row */
        for (int i = threadIdx.x; i < OB_FA_BN * per; i += OB_FA_WARPS * OB_WARP) {
            const int r = i / per, c = i % per;
            uint4 u = make_uint4(0, 0, 0, 0);
            if (vis[r]) u = *(const uint4 *)(cache + (size_t)(c0 + r) * rb + (size_t)(kh * HD + 8 * c) * 2);
            *(uint4 *)&sm[r][8 * c] = u;
        }
    } else { /* Q8_0: 34-byte blocks of 32, kh * HD % 32 == 0 */
        constexpr int per = HD / 32;
        for (int i = threadIdx.x; i < OB_FA_BN * per; i += OB_FA_WARPS * OB_WARP) {
            const int r = i / per, c = i % per;
            uint32_t w[16];
            if (vis[r]) {
                const uint8_t *b = cache + (size_t)(c0 + r) * rb + (size_t)(kh * HD / 32 + c) * 34;
                const uint16_t *b16 = (const uint16_t *)b; /* blocks start on even bytes */
                const float d = __half2float(__ushort_as_half(b16[0]));
#pragma unroll
                for (int k = 0; k < 16; k++) {
                    const uint16_t v = b16[1 + k];
                    w[k] = fa_pack((float)(int8_t)(v & 0xff) * d, (float)(int8_t)(v >> 8) * d);
                }
            } else {
#pragma unroll
                for (int k = 0; k < 16; k++) w[k] = 0;
            }
            uint4 *dst = (uint4 *)&sm[r][32 * c];
#pragma unroll
            for (int k = 0; k < 4; k++) dst[k] = make_uint4(w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]);
        }
    }
}

/* d += a b: a 16x16 (row), b 16x8 (col), f16 in, f32 accumulate. */
static __device__ __forceinline__ void fa_mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* B fragment of V for cells k0 + [0, 16), dims n0 + [0, 8) from row-major sm[cell][dim]:
 * ldmatrix .trans hands lane (g, t) the pair (cell k0 + 2t (+1), dim n0 + g) and the same
 * 8 cells further. */
static __device__ __forceinline__ void fa_ldm_trans(const __half *row_addr, uint32_t &b0, uint32_t &b1) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(row_addr);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(b0), "=r"(b1) : "r"(a));
}
#endif

template <int HD>
__global__ void __launch_bounds__(OB_FA_WARPS * OB_WARP) k_flash_attn(ob_fa_args a) {
    OB_CU_MARK();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    __shared__ __align__(16) __half sK[OB_FA_BN][HD + OB_FA_PAD];
    __shared__ __align__(16) __half sV[OB_FA_BN][HD + OB_FA_PAD];
    /* per row of the tile: absolute cells [lo, hi] it sees (empty: lo > hi), the absolute
     * cell of its pos (ALiBi distance), its token (-1: none) and query head */
    __shared__ int s_lo[OB_FA_BM], s_hi[OB_FA_BM], s_pc[OB_FA_BM], s_tok[OB_FA_BM], s_head[OB_FA_BM];
    __shared__ int s_vis[OB_FA_BN];
    __shared__ int s_cmin, s_cmax;
    const int lane = threadIdx.x % OB_WARP, w = threadIdx.x / OB_WARP;
    const int g = lane / 4, tg = lane % 4;
    const int kh = blockIdx.x, t0 = blockIdx.y * a.tpb;

    if (threadIdx.x == 0) { s_cmin = INT_MAX; s_cmax = -1; }
    __syncthreads();
    if (threadIdx.x < OB_FA_BM) {
        const int r = threadIdx.x, ti = r / a.G, t = ti < a.tpb && t0 + ti < a.T ? t0 + ti : -1;
        int lo = 1, hi = 0, p = 0, base = 0;
        if (t >= 0) {
            p = a.pos[t];
            const int s = a.seq[t];
            const bool valid = p >= 0 && p < a.cps && s >= 0 && (int64_t)s * a.cps + a.cps <= a.cells;
            if (valid) {
                int top = p;
                if (!a.causal) /* whole-sequence attention: the furthest position of s in the batch */
                    for (int u = 0; u < a.T; u++)
                        if (a.seq[u] == s && a.pos[u] > top) top = a.pos[u];
                int l0 = a.window > 0 ? max(0, p - a.window + 1) : 0;
                if (!a.causal && a.window > 0) top = min(top, p + a.window - 1);
                top = min(top, a.cps - 1);
                base = s * a.cps;
                lo = base + l0;
                hi = base + top;
                if (lo > hi) { lo = 1; hi = 0; }
            }
        }
        s_lo[r] = lo; s_hi[r] = hi; s_pc[r] = base + p; s_tok[r] = t; s_head[r] = kh * a.G + r % a.G;
        if (lo <= hi) { atomicMin(&s_cmin, lo); atomicMax(&s_cmax, hi); }
    }
    __syncthreads();
    const int r0 = 16 * w + g, r1 = r0 + 8;
    const int lo0 = s_lo[r0], hi0 = s_hi[r0], lo1 = s_lo[r1], hi1 = s_hi[r1], p0 = s_pc[r0], p1 = s_pc[r1];
    const int ta = s_tok[r0], tb = s_tok[r1], ha = s_head[r0], hb = s_head[r1];
    const float sl0 = a.alibi > 0.0f ? ob_cu_alibi_slope(ha, a.H, a.alibi) : 0.0f;
    const float sl1 = a.alibi > 0.0f ? ob_cu_alibi_slope(hb, a.H, a.alibi) : 0.0f;
    /* Q fragments of this warp's 16 rows (q * scale in f16): row g in a[0], a[2], row
     * g + 8 in a[1], a[3]; k-step ks covers dims 16 ks + [0, 16). */
    uint32_t qa[HD / 16][4];
    {
        const float *qa_p = a.q + ((size_t)max(ta, 0) * a.H + ha) * HD, *qb_p = a.q + ((size_t)max(tb, 0) * a.H + hb) * HD;
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++) {
            const int e = 16 * ks + 2 * tg;
            float2 x0 = make_float2(0.0f, 0.0f), x1 = x0, x2 = x0, x3 = x0;
            if (ta >= 0) { x0 = *(const float2 *)(qa_p + e); x2 = *(const float2 *)(qa_p + e + 8); }
            if (tb >= 0) { x1 = *(const float2 *)(qb_p + e); x3 = *(const float2 *)(qb_p + e + 8); }
            qa[ks][0] = fa_pack(x0.x * a.scale, x0.y * a.scale);
            qa[ks][1] = fa_pack(x1.x * a.scale, x1.y * a.scale);
            qa[ks][2] = fa_pack(x2.x * a.scale, x2.y * a.scale);
            qa[ks][3] = fa_pack(x3.x * a.scale, x3.y * a.scale);
        }
    }
    const int cmin = s_cmin, cmax = s_cmax;

    float o[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* rows r0, r1 (partial per lane) */

    for (int c0 = cmin; c0 <= cmax; c0 += OB_FA_BN) {
        __syncthreads(); /* the previous tile's readers are done */
        int vis = 0;
        if (threadIdx.x < OB_FA_BN) {
            const int c = c0 + threadIdx.x;
            if (c <= cmax)
                for (int r = 0; r < OB_FA_BM; r++)
                    if (c >= s_lo[r] && c <= s_hi[r]) { vis = 1; break; }
            s_vis[threadIdx.x] = vis;
        }
        if (!__syncthreads_or(vis)) continue;
        fa_load_tile<HD>(sK, a.kc, a.krb, a.ktype, kh, c0, s_vis);
        fa_load_tile<HD>(sV, a.vc, a.vrb, a.vtype, kh, c0, s_vis);
        __syncthreads();
        const int c1 = c0 + OB_FA_BN - 1;
        const bool mine = (lo0 <= hi0 && lo0 <= c1 && hi0 >= c0) || (lo1 <= hi1 && lo1 <= c1 && hi1 >= c0);
        if (!__any_sync(0xffffffffu, mine)) continue; /* none of this warp's rows sees the tile */

        /* S [16 rows, 64 cells]: n-block nb holds cells c0 + 8 nb + 2 tg (+1) of rows g, g + 8 */
        float sc[OB_FA_BN / 8][4];
#pragma unroll
        for (int nb = 0; nb < OB_FA_BN / 8; nb++) {
            sc[nb][0] = sc[nb][1] = sc[nb][2] = sc[nb][3] = 0.0f;
            const __half *kr = &sK[8 * nb + g][2 * tg];
#pragma unroll
            for (int ks = 0; ks < HD / 16; ks++) {
                const uint32_t b0 = *(const uint32_t *)(kr + 16 * ks), b1 = *(const uint32_t *)(kr + 16 * ks + 8);
                fa_mma(sc[nb], qa[ks], b0, b1);
            }
        }
        /* soft-cap, ALiBi, mask; scores, maxima and exponents in base 2 from here */
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int nb = 0; nb < OB_FA_BN / 8; nb++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int c = c0 + 8 * nb + 2 * tg + (k & 1);
                const bool second = k >= 2;
                const int lo = second ? lo1 : lo0, hi = second ? hi1 : hi0, pc = second ? p1 : p0;
                const float slope = second ? sl1 : sl0;
                float d = sc[nb][k];
                if (a.cap > 0.0f) d = a.cap * tanhf(d / a.cap);
                d -= slope * (float)(pc > c ? pc - c : c - pc);
                d = c >= lo && c <= hi ? d * 1.44269504088896341f : -INFINITY; /* log2 e: exp2 below */
                sc[nb][k] = d;
                if (second) mx1 = fmaxf(mx1, d); else mx0 = fmaxf(mx0, d);
            }
        /* the four lanes of a quad share a row */
        mx0 = fmaxf(mx0, OB_SHFL_XOR(mx0, 1)); mx0 = fmaxf(mx0, OB_SHFL_XOR(mx0, 2));
        mx1 = fmaxf(mx1, OB_SHFL_XOR(mx1, 1)); mx1 = fmaxf(mx1, OB_SHFL_XOR(mx1, 2));
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        /* a row that has seen nothing yet keeps m = -inf: no rescale, p = 0 */
        const float cr0 = mn0 == -INFINITY ? 1.0f : exp2f(m0 - mn0), cr1 = mn1 == -INFINITY ? 1.0f : exp2f(m1 - mn1);
        m0 = mn0; m1 = mn1;
        l0 *= cr0; l1 *= cr1;
#pragma unroll
        for (int i = 0; i < HD / 8; i++) { o[i][0] *= cr0; o[i][1] *= cr0; o[i][2] *= cr1; o[i][3] *= cr1; }
        /* P as A fragments: k-step kk (cells 16 kk + [0, 16)) is S n-blocks 2 kk, 2 kk + 1 */
        uint32_t pa[OB_FA_BN / 16][4];
#pragma unroll
        for (int nb = 0; nb < OB_FA_BN / 8; nb++) {
            const float e0 = mn0 == -INFINITY ? 0.0f : exp2f(sc[nb][0] - mn0), e1 = mn0 == -INFINITY ? 0.0f : exp2f(sc[nb][1] - mn0);
            const float e2 = mn1 == -INFINITY ? 0.0f : exp2f(sc[nb][2] - mn1), e3 = mn1 == -INFINITY ? 0.0f : exp2f(sc[nb][3] - mn1);
            const __half2 h01 = __floats2half2_rn(e0, e1), h23 = __floats2half2_rn(e2, e3);
            /* the sum takes the rounded values, so numerator and denominator agree */
            const float2 f01 = __half22float2(h01), f23 = __half22float2(h23);
            l0 += f01.x + f01.y;
            l1 += f23.x + f23.y;
            pa[nb / 2][(nb & 1) * 2] = *(const uint32_t *)&h01;
            pa[nb / 2][(nb & 1) * 2 + 1] = *(const uint32_t *)&h23;
        }
        /* O [16 rows, HD] += P [16, 64] V [64, HD] */
#pragma unroll
        for (int kk = 0; kk < OB_FA_BN / 16; kk++)
#pragma unroll
            for (int nd = 0; nd < HD / 8; nd++) {
                uint32_t b0, b1;
                fa_ldm_trans(&sV[16 * kk + (lane % 16)][8 * nd], b0, b1);
                fa_mma(o[nd], pa[kk], b0, b1);
            }
    }
    /* row sums over the quad */
    l0 += OB_SHFL_XOR(l0, 1); l0 += OB_SHFL_XOR(l0, 2);
    l1 += OB_SHFL_XOR(l1, 1); l1 += OB_SHFL_XOR(l1, 2);
    const float i0 = attn_inv<true>(a.sinks, ha, m0, l0), i1 = attn_inv<true>(a.sinks, hb, m1, l1);
    float *oa = a.out + ((size_t)max(ta, 0) * a.H + ha) * HD, *ob = a.out + ((size_t)max(tb, 0) * a.H + hb) * HD;
#pragma unroll
    for (int nd = 0; nd < HD / 8; nd++) {
        const int e = 8 * nd + 2 * tg;
        if (ta >= 0) *(float2 *)(oa + e) = make_float2(o[nd][0] * i0, o[nd][1] * i0);
        if (tb >= 0) *(float2 *)(ob + e) = make_float2(o[nd][2] * i1, o[nd][3] * i1);
    }
#else
    /* Built without sm_80 code (ob_cu_fa_applies refuses such devices): make a wrong
     * dispatch loud rather than silently stale. */
    const int t = blockIdx.y * a.tpb + threadIdx.x / a.G;
    if (threadIdx.x < a.tpb * a.G && t < a.T) a.out[((size_t)t * a.H + blockIdx.x * a.G + threadIdx.x % a.G) * HD] = NAN;
#endif
}

bool ob_cu_op_flash_attn(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *q = n->src[0], *kc = n->src[1], *vc = n->src[2];
    ob_fa_args a;
    a.q = (const float *)q->data;
    a.kc = (const uint8_t *)kc->data;
    a.vc = (const uint8_t *)vc->data;
    a.pos = (const int32_t *)n->src[3]->data;
    a.seq = (const int32_t *)n->src[4]->data;
    a.out = (float *)n->data;
    a.T = (int)(q->ne[2] * q->ne[3]);
    a.H = (int)q->ne[1];
    a.n_kv = n->ip[1];
    a.cps = n->ip[0];
    a.cells = (int)ob_nrows(kc);
    a.window = n->ip[2];
    a.causal = n->ip[3] != 0;
    a.ktype = (int)kc->type;
    a.vtype = (int)vc->type;
    a.krb = ob_row_size(kc->type, kc->ne[0]);
    a.vrb = ob_row_size(vc->type, vc->ne[0]);
    a.scale = n->fp[0];
    a.cap = n->fp[1];
    a.alibi = n->fp[2];
    a.sinks = n->src[6] ? (const float *)n->src[6]->data : NULL;
    a.G = a.H / a.n_kv;
    a.tpb = OB_FA_BM / a.G;
    const dim3 grid((unsigned)a.n_kv, ob_cu_blocks(a.T, a.tpb));
    if (q->ne[0] == 128) (void)OB_CU_LAUNCH_PLAIN(cx, (k_flash_attn<128>), grid, OB_FA_WARPS * OB_WARP, 0, a);
    else (void)OB_CU_LAUNCH_PLAIN(cx, (k_flash_attn<64>), grid, OB_FA_WARPS * OB_WARP, 0, a);
    return OB_CU_LAUNCHED(cx);
}

#else /* OB_HIP: never applies */
bool ob_cu_op_flash_attn(ob_cu_ctx *cx, ob_tensor *n) { return false; }
#endif

OB_CU_MARK_BIND(flash_attn)
