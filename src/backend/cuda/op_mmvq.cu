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
#include "backend/cuda/mmvq_dot.cuh"
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
