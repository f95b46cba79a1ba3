/* KV_STORE and ATTENTION with the KV cache in any cache type (op_table.c's kv_type; K and V
 * independently): F16 and Q8_0 have the fast paths below, every type the generic ones
 * (k_attn, k_attn_pf through rowops.cuh's kv_at and kvq.cuh).
 *
 * Attention is flash-decoding style: the grid is (kv split, head, token); each block of
 * four warps runs an online softmax over its split's cells (one cell per warp at a time,
 * each lane owning hd/32 elements of q, K, V and the accumulator), merges its warps in
 * shared memory, and either writes the output (one split) or a partial (max, sum, acc)
 * that k_attn_merge combines. Decode (T <= OB_ATTN_SPLIT_T) splits each token's used
 * cells [lo, hi] (known only on the device) evenly over a fixed number of splits, so a
 * single token fills the GPU at any position: splitting the whole cache instead left a
 * short context to a few blocks that each walked hundreds of cells one after another.
 * The number of splits depends only on shapes and the GPU, not on positions, so a
 * captured step stays valid as pos grows. With OB_CU_FUSE_ATTN_ONE the split block that
 * finishes last for its (token, head) (an atomic arrival count, reset by that block) does
 * the merge itself, so decode attention is one launch.
 *
 * Decode kernels: k_attn_h for f16 or Q8_0 K and V at head sizes 64/128/256, k_attn for the
 * rest (f32 caches, other head sizes). k_attn walks one cell per warp at a time, its K load, reduction,
 * exp and V load in sequence: two memory latencies per cell, so a deep context made
 * decode latency-bound. k_attn_h gives each lane hd/32 consecutive elements (one 4-16 byte
 * load per row) and takes 4 cells per warp per round, every load of a round issued before
 * any is used: deep contexts ran 2-4x faster (bench/NOTES.md: Session 8, k_attn_h).
 * For one token (T = 1, causal, pos and seq inputs of the step) both load the rows of
 * earlier positions before the PDL wait: only row p is written by the kernel ahead.
 * With f16 caches k_attn_h can also take the layer's q/k/v tail (q/k norm, rope, the K/V
 * stores of row p; OB_CU_FUSE_ATTN_QKV), which then needs no launch of its own (a few % of
 * a decode step: bench/NOTES.md, Session 9, the q/k/v tail folded into k_attn_h). It
 * applies where the planner kept the attention's output apart from the raw k and v (24 of
 * qwen3-8b's 36 layers).
 *
 * gpt-oss's attention sinks (src6) join a head's softmax where its output is made: the
 * block's output (one split), the merge of the splits (by the last to arrive or by
 * k_attn_merge), k_attn_pf's and the flash kernel's rows (rowops.cuh's attn_inv).
 *
 * Values narrower than the keys (graph.h: dv elements at sv a kv head in the V rows, the V
 * cache possibly the K cache itself, as MLA's) run on k_attn, k_attn_pf and the merges: a
 * lane's K elements run to hd, its V elements and outputs to dv, the partials are dv + 2
 * wide. MLA's latent rows (hd 576) take their instances of NE = 18 elements a lane
 * (OB_ATTN_MAX_NE_W); k_attn_h, the q/k/v fold and the tensor-core prefill keep values as
 * wide as the keys from a V cache of their own (attn_h_ok, ob_cu_fa_applies). */
#include "backend/cuda/rowops.cuh"
#include "backend/cuda/cuda_stats.h"
#include "backend/cuda/cuda_fa.h"
#include <math.h>

#define OB_ATTN_WARPS 4
#define OB_ATTN_MAX_NE 8      /* ceil(hd / 32): head sizes up to 256 (any multiple of 4) */
#define OB_ATTN_MAX_NE_W 18   /* ... up to 576: MLA's latent rows (kv_lora_rank 512 + rope 64) */
#define OB_ATTN_CELLS_PER_SPLIT 16 /* fewest cells per split when the whole cache is in use */
#define OB_ATTN_MAX_SPLIT 256
/* Batches up to 16 tokens take the split decode kernel (k_attn), larger ones k_attn_pf or
 * flash attention: at 16 parallel sequences k_attn_pf's blocks were few and long and its
 * output skipped the fused quantization (bench/NOTES-cuda-3-7.md: Session 7, attention for
 * 9-16 tokens). */
#define OB_ATTN_SPLIT_T 16

/* ---- KV_STORE ---------------------------------------------------------------------------- */

/* One thread per element (F32/F16/BF16) or per 32-element block (kvq_block_type) of job a, then of job b
 * (nj == 2: the K and V stores of a layer in one launch). */
__global__ void k_kv_store(ob_kv_job a, ob_kv_job b, int nj, const int32_t *__restrict__ pos, const int32_t *__restrict__ seq,
                           int64_t T, int64_t cps) {
    OB_PDL_ENTRY();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) {
        *a.tok = 0.0f;
        if (nj > 1) *b.tok = 0.0f;
    }
    if (i < a.per * T) {
        kv_store_one(a, i / a.per, i % a.per, pos, seq, cps);
        return;
    }
    i -= a.per * T;
    if (nj > 1 && i < b.per * T) kv_store_one(b, i / b.per, i % b.per, pos, seq, cps);
}

bool ob_cu_op_kv_store_pair(ob_cu_ctx *cx, ob_tensor *n, ob_tensor *m) {
    const int64_t T = ob_nelements(n->src[0]) / n->src[1]->ne[0];
    const ob_kv_job a = kv_job(n), b = m ? kv_job(m) : a;
    const int64_t total = a.per * T + (m ? b.per * T : 0);
    return OB_CU_LAUNCH(cx, k_kv_store, ob_cu_blocks(OB_MAX(total, 1), 256), 256, 0, a, b, m ? 2 : 1,
                        (const int32_t *)n->src[2]->data, (const int32_t *)n->src[3]->data, T, (int64_t)n->ip[0]);
}

bool ob_cu_op_kv_store(ob_cu_ctx *cx, ob_tensor *n) { return ob_cu_op_kv_store_pair(cx, n, NULL); }

/* ---- ATTENTION --------------------------------------------------------------------------- */

typedef struct ob_attn_args {
    const float *q;
    const uint8_t *kc, *vc;
    const int32_t *pos, *seq;
    float *out, *partial;
    /* cnt: one arrival counter per (token, head): the split that arrives last merges (no
     * merge launch), quantizing for the int8 matvec when qx is set; NULL: k_attn_merge. */
    unsigned *cnt;
    int8_t *qx;
    float2 *dx;
    /* dv: the values' width (the output's row per head), sv: a kv head's stride in V rows */
    int64_t hd, dv, sv, H, T, n_kv, cps, cells, window;
    size_t krb, vrb;
    int ktype, vtype, causal, nsplit;
    /* early: pos and seq are inputs uploaded before the step and T == 1, causal: the
     * cache rows of earlier positions are loaded before the PDL wait (only this step's
     * row, p, is made by the kernels ahead). */
    int early;
    float scale, cap, alibi; /* alibi: ALiBi max bias, 0 = none */
    const float *sinks;      /* gpt-oss's sinks F32 [H] (graph.h), or NULL */
    /* The folded q/k/v tail (k_attn_h<..., true>, one token): q is the raw q projection, fk
     * and fv the raw k and v rows; fqw / fkw the q / k norm weights (fqnorm / fknorm: the
     * norm is there); the rope (fr, one for q and k: their angles are shared) has n_rot = hd,
     * NeoX halves or adjacent pairs, its factors and mscale. */
    const float *fk, *fv, *fqw, *fkw;
    float fqeps, fkeps;
    ob_rope_p fr;
    int fqnorm, fknorm;
} ob_attn_args;

/* Up to eight blocks per SM over (split, head, token) (a block walks its cells one per
 * warp at a time, so short splits hide the latency of those dependent loads), at most one
 * split per OB_ATTN_CELLS_PER_SPLIT cells of the cache, and 8 splits until the cache is
 * large enough for 512 cells per split. Fewer splits leave each block a long serial walk,
 * more add blocks and merge work (bench/NOTES-cuda-3-7.md: Session 3, decode attention
 * splits). */
static int attn_nsplit(const ob_cu_ctx *cx, const ob_tensor *n) {
    const ob_tensor *q = n->src[0];
    const int64_t T = q->ne[2] * q->ne[3], H = q->ne[1];
    if (T > OB_ATTN_SPLIT_T && !cx->det) return 1;
    if (cx->opt.attn_split > 0) return OB_MIN(cx->opt.attn_split, OB_ATTN_MAX_SPLIT);
    const int64_t want = (8 * (int64_t)OB_MAX(cx->sm_count, 1) + H * T - 1) / (H * T);
    const int64_t cells = n->ip[0];
    const int64_t most = OB_MIN((cells + OB_ATTN_CELLS_PER_SPLIT - 1) / OB_ATTN_CELLS_PER_SPLIT,
                                OB_MAX((int64_t)8, (cells + 511) / 512));
    /* batch-invariant mode: a count from the cache size alone, for every T */
    if (cx->det) return (int)OB_MAX(1, OB_MIN(most, OB_ATTN_MAX_SPLIT));
    return (int)OB_MAX(1, OB_MIN(OB_MIN(want, most), OB_ATTN_MAX_SPLIT));
}

/* ATTENTION n's values: dv wide (the output's row per head), at sv a kv head in V rows. */
static int64_t attn_dv(const ob_tensor *n) { return n->ne[0] / n->src[0]->ne[1]; }
static int64_t attn_sv(const ob_tensor *n) { return n->src[2]->ne[0] / n->ip[1]; }

size_t ob_cu_attention_tmp_size(const ob_cu_ctx *cx, const ob_tensor *n) {
    const int ns = attn_nsplit(cx, n);
    if (ns == 1) return 0;
    const ob_tensor *q = n->src[0];
    return sizeof(float) * (size_t)(q->ne[1] * q->ne[2] * q->ne[3] * ns * (attn_dv(n) + 2));
}

/* Element e of one (token, head)'s output from its splits' partials (pp), M: their max.
 * cg: the partials were written by other blocks of this grid, so the loads skip L1 (not
 * coherent across SMs within a grid). */
template <bool cg> static __device__ __forceinline__ float ld_part(const float *p) {
#ifdef OB_HIP
    return cg ? *(const volatile float *)p : *p;
#else
    return cg ? __ldcg(p) : *p;
#endif
}

template <bool cg>
static __device__ __forceinline__ float merge_one(const float *pp, int nsplit, int64_t dv, float M, int64_t e,
                                                  const float *sinks, int64_t h) {
    float L = 0.0f, v = 0.0f;
    for (int k = 0; k < nsplit; k++) {
        const float *ps = pp + k * (dv + 2);
        const float l = ld_part<cg>(ps + 1);
        if (!(l > 0.0f)) continue;
        const float f = expf(ld_part<cg>(ps) - M);
        L += l * f;
        v += ld_part<cg>(ps + 2 + e) * f;
    }
    if (sinks) return v * attn_inv(sinks, h, M, L);
    return L > 0.0f ? v / L : 0.0f;
}

/* Output of (token, head) number `item` from its splits' partials, by the whole block:
 * rescale every split to the common max. With qx, also the int8 activations of the output
 * for the matvec that reads it (4 consecutive elements per thread; a head's dv % 32 == 0,
 * so no 32-block spans two heads). */
template <bool cg>
static __device__ __forceinline__ void merge_head(const float *__restrict__ partial, float *__restrict__ out, int64_t dv,
                                                  int nsplit, int8_t *__restrict__ qx, float2 *__restrict__ dx, int64_t item,
                                                  const float *sinks, int64_t H) {
    const float *pp = partial + (size_t)item * nsplit * (dv + 2);
    const int64_t h = item % H;
    float M = -INFINITY;
    for (int k = 0; k < nsplit; k++)
        if (ld_part<cg>(pp + k * (dv + 2) + 1) > 0.0f) M = fmaxf(M, ld_part<cg>(pp + k * (dv + 2)));
    float *o = out + (size_t)item * dv;
    if (!qx) {
        for (int64_t e = threadIdx.x; e < dv; e += blockDim.x) o[e] = merge_one<cg>(pp, nsplit, dv, M, e, sinks, h);
        return;
    }
    const int64_t ng = dv / 4;
    for (int64_t base = 0; base < ng; base += blockDim.x) {
        const int64_t g = base + threadIdx.x;
        const bool live = g < ng;
        float r[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (live) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                r[k] = merge_one<cg>(pp, nsplit, dv, M, 4 * g + k, sinks, h);
                o[4 * g + k] = r[k];
            }
        }
        ob_cu_quant_group(make_float4(r[0], r[1], r[2], r[3]), live, item * ng + g, qx, dx);
    }
}

/* As merge_head, with the splits' (max, sum) read once into shared memory as weights
 * f_k / L, so each element is a sum of independent loads rather than a walk that loads
 * and tests each split's sum again: faster at one sequence (8 splits), slower at 16 (2
 * splits), where merge_head stays (bench/NOTES.md: Session 8, split weights in the merge).
 * Every split's row is written (zeros when it saw no cell), as the sums here take each
 * split's elements unconditionally. */
template <bool cg>
static __device__ __forceinline__ void merge_head_w(const float *__restrict__ partial, float *__restrict__ out, int64_t dv,
                                                    int nsplit, int8_t *__restrict__ qx, float2 *__restrict__ dx, int64_t item,
                                                    const float *sinks, int64_t H) {
    __shared__ float s_f[OB_ATTN_MAX_SPLIT];
    __shared__ float s_inv;
    const float *pp = partial + (size_t)item * nsplit * (dv + 2);
    for (int k = threadIdx.x; k < nsplit; k += blockDim.x) {
        const float l = ld_part<cg>(pp + k * (dv + 2) + 1);
        s_f[k] = l > 0.0f ? ld_part<cg>(pp + k * (dv + 2)) : -INFINITY;
    }
    __syncthreads();
    if (threadIdx.x < OB_WARP) {
        float M = -INFINITY;
        for (int k = threadIdx.x; k < nsplit; k += OB_WARP) M = fmaxf(M, s_f[k]);
        for (int o = OB_WARP / 2; o > 0; o /= 2) M = fmaxf(M, OB_SHFL_XOR(M, o));
        float L = 0.0f;
        for (int k = threadIdx.x; k < nsplit; k += OB_WARP) {
            const float f = s_f[k] > -INFINITY ? expf(s_f[k] - M) : 0.0f;
            L += f * ld_part<cg>(pp + k * (dv + 2) + 1);
            s_f[k] = f;
        }
        for (int o = OB_WARP / 2; o > 0; o /= 2) L += OB_SHFL_XOR(L, o);
        if (threadIdx.x == 0) s_inv = attn_inv(sinks, item % H, M, L);
    }
    __syncthreads();
    const float inv = s_inv;
    float *o = out + (size_t)item * dv;
    const int64_t ng = dv / 4;
    for (int64_t base = 0; base < (qx ? ng : dv); base += blockDim.x) {
        const int64_t g = base + threadIdx.x;
        if (!qx) {
            if (g < dv) {
                float v = 0.0f;
#pragma unroll 4
                for (int k = 0; k < nsplit; k++) v += s_f[k] * ld_part<cg>(pp + k * (dv + 2) + 2 + g);
                o[g] = v * inv;
            }
            continue;
        }
        const bool live = g < ng;
        float4 r = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (live) {
#pragma unroll 4
            for (int k = 0; k < nsplit; k++) {
                const float *ps = pp + k * (dv + 2) + 2 + 4 * g, f = s_f[k];
                r.x += f * ld_part<cg>(ps), r.y += f * ld_part<cg>(ps + 1), r.z += f * ld_part<cg>(ps + 2), r.w += f * ld_part<cg>(ps + 3);
            }
            r.x *= inv, r.y *= inv, r.z *= inv, r.w *= inv;
            o[4 * g] = r.x, o[4 * g + 1] = r.y, o[4 * g + 2] = r.z, o[4 * g + 3] = r.w;
        }
        ob_cu_quant_group(r, live, item * ng + g, qx, dx);
    }
}

/* One block (OB_ATTN_WARPS warps) per (token, head). */
__global__ void k_attn_merge(const float *__restrict__ partial, float *__restrict__ out, int64_t dv, int nsplit,
                             int8_t *__restrict__ qx, float2 *__restrict__ dx, const float *__restrict__ sinks, int64_t H) {
    OB_PDL_ENTRY();
    merge_head<false>(partial, out, dv, nsplit, qx, dx, blockIdx.x, sinks, H);
}

/* Token t's cells [lo, hi] for split sp (hi < lo: none), its position p and the first cell of
 * its sequence; s_hi: a shared int. Reads only pos and seq (inputs), once per block. */
static __device__ __forceinline__ void attn_range(const ob_attn_args &a, int sp, int64_t t, int *s_hi, int64_t *p_, int64_t *cell0_,
                                                  int64_t *lo_, int64_t *hi_) {
    const int64_t p = a.pos[t], s = a.seq[t];
    /* Whole-sequence attention reaches the furthest position of this sequence in the batch. */
    if (threadIdx.x == 0) *s_hi = (int)p;
    __syncthreads();
    if (!a.causal) {
        int m = (int)p;
        for (int64_t u = threadIdx.x; u < a.T; u += blockDim.x)
            if (a.seq[u] == s && a.pos[u] > m) m = a.pos[u];
        atomicMax(s_hi, m);
        __syncthreads();
    }
    int64_t lo = a.window > 0 ? OB_MAX((int64_t)0, p - a.window + 1) : 0, hi = *s_hi;
    if (!a.causal && a.window > 0) hi = OB_MIN(hi, p + a.window - 1);
    const bool valid = p >= 0 && p < a.cps && s >= 0 && s * a.cps + a.cps <= a.cells;
    if (!valid) hi = -1;
    hi = OB_MIN(hi, a.cps - 1);
    if (a.nsplit > 1 && hi >= lo) {
        /* ceil(used / nsplit): the used cells spread over every split, however few. At batch 1
         * the walk over a split's cells is latency-bound, so more splits win: a floor of 32
         * cells per split was slower (bench/NOTES-cuda-3-7.md: Session 3). */
        const int64_t chunk = (hi - lo + a.nsplit) / a.nsplit;
        lo += (int64_t)sp * chunk;
        hi = OB_MIN(hi, lo + chunk - 1);
    }
    *p_ = p;
    *cell0_ = s * a.cps;
    *lo_ = lo;
    *hi_ = hi;
}

/* After a decode block's warps left their (max, sum, acc) in s_m, s_l, s_acc[warp][element]
 * (dv elements): the block's output (one split) or its partial, and with a.cnt the merge by
 * the split that arrives last (wm: merge_head_w, else merge_head). */
template <int NE>
static __device__ __forceinline__ void attn_finish(const ob_attn_args &a, const float *s_m, const float *s_l,
                                                   const float (*s_acc)[NE * OB_WARP], int64_t t, int64_t h, int sp, bool wm) {
    const int64_t dv = a.dv; /* the outputs' width */
    __syncthreads();
    float M = -INFINITY;
    for (int k = 0; k < OB_ATTN_WARPS; k++) if (s_l[k] > 0.0f) M = fmaxf(M, s_m[k]);
    float L = 0.0f, f[OB_ATTN_WARPS];
    for (int k = 0; k < OB_ATTN_WARPS; k++) { f[k] = s_l[k] > 0.0f ? expf(s_m[k] - M) : 0.0f; L += s_l[k] * f[k]; }
    if (a.nsplit == 1) {
        float *o = a.out + (t * a.H + h) * dv;
        const float inv = attn_inv(a.sinks, h, M, L);
        for (int64_t e = threadIdx.x; e < dv; e += blockDim.x) {
            float v = 0.0f;
            for (int k = 0; k < OB_ATTN_WARPS; k++) v += s_acc[k][e] * f[k];
            o[e] = v * inv;
        }
    } else {
        float *pp = a.partial + ((t * a.H + h) * a.nsplit + sp) * (dv + 2);
        if (threadIdx.x == 0) { pp[0] = M; pp[1] = L; }
        /* written even when empty (zeros): the merge sums every split's row */
        for (int64_t e = threadIdx.x; e < dv; e += blockDim.x) {
            float v = 0.0f;
            for (int k = 0; k < OB_ATTN_WARPS; k++) v += s_acc[k][e] * f[k];
            pp[2 + e] = v;
        }
        if (!a.cnt) return;
        /* Last arrival merges: each thread's partial stores are made device-visible before
         * the block counts itself in; the last block resets the counter for the next
         * launch (a captured step replays with the same buffer). */
        __shared__ bool s_last;
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned *c = a.cnt + t * a.H + h;
            s_last = atomicAdd(c, 1u) == (unsigned)a.nsplit - 1;
            if (s_last) *c = 0;
        }
        __syncthreads();
        if (!s_last) return;
        __threadfence();
        if (wm) merge_head_w<true>(a.partial, a.out, dv, a.nsplit, a.qx, a.dx, t * a.H + h, a.sinks, a.H);
        else merge_head<true>(a.partial, a.out, dv, a.nsplit, a.qx, a.dx, t * a.H + h, a.sinks, a.H);
    }
}

/* One round's online-softmax step for the cells j0 + u * OB_ATTN_WARPS (u < U) of a warp:
 * d[u], the lanes' partial dot products, is reduced over the warp, soft-capped and
 * ALiBi-penalised; the running max m, sum l and accumulator acc (NA elements a lane) move
 * to the round's max, and each cell up to hi gets its weight pj = exp(d - m), added to l
 * and passed to add(u, pj) (which adds pj times the cell's V to acc). */
template <int U, int NA, class F>
static __device__ __forceinline__ void attn_round(const ob_attn_args &a, float (&d)[U], int64_t j0, int64_t hi, int64_t p, float slope,
                                                  float &m, float &l, float (&acc)[NA], F &&add) {
#pragma unroll
    for (int o = OB_WARP / 2; o > 0; o /= 2)
#pragma unroll
        for (int u = 0; u < U; u++) d[u] += OB_SHFL_XOR(d[u], o);
    float mx = m;
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int64_t j = j0 + (int64_t)u * OB_ATTN_WARPS;
        if (a.cap > 0.0f) d[u] = a.cap * tanhf(d[u] / a.cap);
        d[u] -= slope * (float)(p > j ? p - j : j - p); /* ALiBi: distance penalty (0 without) */
        if (j <= hi) mx = fmaxf(mx, d[u]);
    }
    if (mx > m) {
        const float corr = expf(m - mx);
        l *= corr;
#pragma unroll
        for (int i = 0; i < NA; i++) acc[i] *= corr;
        m = mx;
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (j0 + (int64_t)u * OB_ATTN_WARPS > hi) continue;
        const float pj = expf(d[u] - m);
        l += pj;
        add(u, pj);
    }
}

/* k_attn<U>: U = 0 walks one cell per warp at a time with every load after the PDL wait; U >= 1
 * loads rounds of U cells (cells j0 + u * OB_ATTN_WARPS, u < U) and, for one token, the first
 * round before the wait (a.early). Only U = 1 is launched: with 4 cells per round this
 * kernel held 168 registers and ran slower than 1 (the k_attn_h layout does it in 72;
 * bench/NOTES.md: Session 8). */

/* One round's K (hd, from hoff) and V (dv, from voff) elements of this lane (0 past hi, and
 * for cell `skip`). */
template <int U, int NE>
static __device__ __forceinline__ void attn_load(const ob_attn_args &a, int64_t cell0, int64_t hoff, int64_t voff, int lane,
                                                 int64_t j0, int64_t hi, int64_t skip, float (&kf)[U][NE], float (&vf)[U][NE]) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int64_t j = j0 + (int64_t)u * OB_ATTN_WARPS;
        const bool on = j <= hi && j != skip;
        const uint8_t *kr = a.kc + (size_t)(cell0 + j) * a.krb, *vr = a.vc + (size_t)(cell0 + j) * a.vrb;
#pragma unroll
        for (int i = 0; i < NE; i++) {
            kf[u][i] = on && lane + 32 * i < a.hd ? kv_at(a.ktype, kr, hoff + lane + 32 * i) : 0.0f;
            vf[u][i] = on && lane + 32 * i < a.dv ? kv_at(a.vtype, vr, voff + lane + 32 * i) : 0.0f;
        }
    }
}

/* NE: a lane's elements (ceil(max(hd, dv) / 32) at most): OB_ATTN_MAX_NE, or
 * OB_ATTN_MAX_NE_W for MLA's latent rows (attention_launch picks). K elements run to hd from
 * kv head kh's hoff, V elements and outputs to dv from its voff. */
template <int U, int NE> __global__ void __launch_bounds__(OB_ATTN_WARPS * OB_WARP) k_attn(ob_attn_args a) {
    /* early: pos, seq and the cache rows of earlier steps are complete before this step's
     * kernels run, so the first round of loads goes out before the wait for the kernel
     * ahead (which writes q and cache row p). */
    if (!a.early) OB_PDL_ENTRY();
    __shared__ float s_m[OB_ATTN_WARPS], s_l[OB_ATTN_WARPS];
    __shared__ float s_acc[OB_ATTN_WARPS][NE * OB_WARP];
    __shared__ int s_hi;
    const int sp = blockIdx.x, lane = threadIdx.x % OB_WARP, w = threadIdx.x / OB_WARP;
    const int64_t h = blockIdx.y, t = blockIdx.z, hd = a.hd, dv = a.dv;
    const int64_t kh = h / (a.H / a.n_kv);
    int64_t p, cell0, lo, hi;
    attn_range(a, sp, t, &s_hi, &p, &cell0, &lo, &hi);
    const float slope = a.alibi > 0.0f ? ob_cu_alibi_slope((int)h, (int)a.H, a.alibi) : 0.0f;
    const int64_t hoff = kh * hd, voff = kh * a.sv;
    float qv[NE], acc[NE];
    float m = -INFINITY, l = 0.0f;
    if constexpr (U == 0) {
        /* one cell per warp at a time */
        const float *qp = a.q + (t * a.H + h) * hd;
#pragma unroll
        for (int i = 0; i < NE; i++) { qv[i] = lane + 32 * i < hd ? qp[lane + 32 * i] * a.scale : 0.0f; acc[i] = 0.0f; }
        for (int64_t j = lo + w; j <= hi; j += OB_ATTN_WARPS) {
            const uint8_t *kr = a.kc + (size_t)(cell0 + j) * a.krb, *vr = a.vc + (size_t)(cell0 + j) * a.vrb;
            float d[1] = {0.0f};
#pragma unroll
            for (int i = 0; i < NE; i++)
                if (lane + 32 * i < hd) d[0] += qv[i] * kv_at(a.ktype, kr, hoff + lane + 32 * i);
            attn_round<1>(a, d, j, hi, p, slope, m, l, acc, [&](int, float pj) {
#pragma unroll
                for (int i = 0; i < NE; i++)
                    if (lane + 32 * i < dv) acc[i] += pj * kv_at(a.vtype, vr, voff + lane + 32 * i);
            });
        }
    } else {
        float kf[U][NE], vf[U][NE];
        /* the first round; with early, all but row p (the kernel ahead writes it) before the wait */
        attn_load<U, NE>(a, cell0, hoff, voff, lane, lo + w, hi, a.early ? p : (int64_t)-1, kf, vf);
        if (a.early) {
            OB_PDL_ENTRY();
            const int64_t u = p - (lo + w);
            if (u >= 0 && u % OB_ATTN_WARPS == 0 && u / OB_ATTN_WARPS < U && p <= hi) {
                const uint8_t *kr = a.kc + (size_t)(cell0 + p) * a.krb, *vr = a.vc + (size_t)(cell0 + p) * a.vrb;
#pragma unroll
                for (int uu = 0; uu < U; uu++) {
                    if (uu != u / OB_ATTN_WARPS) continue;
#pragma unroll
                    for (int i = 0; i < NE; i++) {
                        if (lane + 32 * i < hd) kf[uu][i] = kv_at(a.ktype, kr, hoff + lane + 32 * i);
                        if (lane + 32 * i < dv) vf[uu][i] = kv_at(a.vtype, vr, voff + lane + 32 * i);
                    }
                }
            }
        }
        const float *qp = a.q + (t * a.H + h) * hd;
#pragma unroll
        for (int i = 0; i < NE; i++) { qv[i] = lane + 32 * i < hd ? qp[lane + 32 * i] * a.scale : 0.0f; acc[i] = 0.0f; }
        for (int64_t j0 = lo + w; j0 <= hi; j0 += U * OB_ATTN_WARPS) {
            if (j0 != lo + w) attn_load<U, NE>(a, cell0, hoff, voff, lane, j0, hi, -1, kf, vf);
            float d[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                d[u] = 0.0f;
#pragma unroll
                for (int i = 0; i < NE; i++) d[u] += qv[i] * kf[u][i];
            }
            attn_round<U>(a, d, j0, hi, p, slope, m, l, acc, [&](int u, float pj) {
#pragma unroll
                for (int i = 0; i < NE; i++) acc[i] += pj * vf[u][i];
            });
        }
    }
    if (lane == 0) { s_m[w] = m; s_l[w] = l; }
#pragma unroll
    for (int i = 0; i < NE; i++)
        if (lane + 32 * i < dv) s_acc[w][lane + 32 * i] = acc[i];
    attn_finish<NE>(a, s_m, s_l, s_acc, t, h, sp, U != 0);
}

/* ---- decode over an f16 or Q8_0 cache: each lane's elements loaded at once ------------------ */

/* Lane l owns elements [EPL l, EPL l + EPL) of a head of hd = 32 EPL: one 4/8/16-byte load per
 * cache row. A round takes U cells per warp: every K and V load of the round is issued (as
 * raw bits) before any is used, so a round waits for memory once. */
template <int EPL> struct attn_raw;
template <> struct attn_raw<2> { typedef uint32_t t; };
template <> struct attn_raw<4> { typedef uint2 t; };
template <> struct attn_raw<8> { typedef uint4 t; };

template <int EPL> static __device__ __forceinline__ void attn_h2f(const typename attn_raw<EPL>::t &r, float (&f)[EPL]) {
    const uint32_t *w = (const uint32_t *)&r;
#pragma unroll
    for (int k = 0; k < EPL / 2; k++) {
        const float2 v = __half22float2(*(const __half2 *)&w[k]);
        f[2 * k] = v.x;
        f[2 * k + 1] = v.y;
    }
}

/* A lane's EPL elements of cache rows of one kv head: f16 (one load) or Q8_0 (Q8: the block's
 * f16 scale and EPL int8 values in 2-byte loads, as the 34-byte blocks are 2-aligned;
 * values as kv_at gives them). raw: the bits one row gives, loaded before any is used. */
template <int EPL, bool Q8> struct attn_lane;
template <int EPL> struct attn_lane<EPL, false> {
    typedef typename attn_raw<EPL>::t raw;
    const raw *b;
    size_t st;
    __device__ __forceinline__ attn_lane(const uint8_t *cache, int64_t cell0, size_t rb, int64_t kh, int lane)
        : b((const raw *)(cache + (size_t)cell0 * rb + (size_t)kh * 64 * EPL) + lane), st(rb / sizeof(raw)) {}
    __device__ __forceinline__ raw load(int64_t j) const { return b[j * st]; }
    static __device__ __forceinline__ void to_f(const raw &r, float (&f)[EPL]) { attn_h2f<EPL>(r, f); }
};
template <int EPL> struct attn_lane<EPL, true> {
    struct raw {
        uint16_t q[EPL / 2], d;
    };
    const uint8_t *b; /* the lane's block in the row of cell0: head kh is blocks [kh EPL, kh EPL + EPL) */
    size_t rb;
    int off;          /* the lane's first element within its block */
    __device__ __forceinline__ attn_lane(const uint8_t *cache, int64_t cell0, size_t rb_, int64_t kh, int lane)
        : b(cache + (size_t)cell0 * rb_ + (size_t)(kh * EPL + EPL * lane / 32) * 34), rb(rb_), off(EPL * lane % 32) {}
    __device__ __forceinline__ raw load(int64_t j) const {
        raw r;
        const uint8_t *p = b + (size_t)j * rb;
        r.d = *(const uint16_t *)p;
#pragma unroll
        for (int k = 0; k < EPL / 2; k++) r.q[k] = *(const uint16_t *)(p + 2 + off + 2 * k);
        return r;
    }
    static __device__ __forceinline__ void to_f(const raw &r, float (&f)[EPL]) {
        const float d = __half2float(__ushort_as_half(r.d));
#pragma unroll
        for (int k = 0; k < EPL / 2; k++) {
            f[2 * k] = (float)(int8_t)(r.q[k] & 0xff) * d;
            f[2 * k + 1] = (float)(int8_t)(r.q[k] >> 8) * d;
        }
    }
};

/* One head row of the folded q/k tail in a warp's registers: lane l holds elements [EPL l,
 * EPL l + EPL) of the raw row; [RMS_NORM (weights w, shared memory) ->] ROPE with n_rot = hd
 * and the block's angles sn/cs, mscale in them (NeoX halves: the partner element sits in lane
 * l ^ 16). The float operations are k_qkv's except the norm's summation order. */
template <int EPL>
static __device__ __forceinline__ void fold_lane(float (&v)[EPL], const float *w, bool norm, float eps, int neox, const double *sn,
                                                 const double *cs, int lane) {
    constexpr int hd = 32 * EPL;
    if (norm) {
        const float mean = 0.0f;
        float s2 = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; e++) {
            const float d = v[e] - mean;
            s2 += d * d;
        }
        for (int o = 16; o > 0; o /= 2) s2 += OB_SHFL_XOR(s2, o);
        const float sc = rsqrtf(s2 / (float)hd + eps);
#pragma unroll
        for (int e = 0; e < EPL; e++) {
            v[e] = (v[e] - mean) * sc;
            if (w) v[e] *= w[EPL * lane + e];
        }
    }
    if (neox) {
        const bool lo = lane < 16;
#pragma unroll
        for (int e = 0; e < EPL; e++) {
            const float o = OB_SHFL_XOR(v[e], 16);
            const int k = EPL * lane + e - (lo ? 0 : hd / 2);
            const double x0 = lo ? v[e] : o, x1 = lo ? o : v[e];
            v[e] = lo ? (float)(x0 * cs[k] - x1 * sn[k]) : (float)(x0 * sn[k] + x1 * cs[k]);
        }
    } else {
#pragma unroll
        for (int e = 0; e < EPL; e += 2) {
            const int k = (EPL * lane + e) / 2;
            const double x0 = v[e], x1 = v[e + 1];
            v[e] = (float)(x0 * cs[k] - x1 * sn[k]);
            v[e + 1] = (float)(x0 * sn[k] + x1 * cs[k]);
        }
    }
}

/* F: the q/k/v tail folded in (OB_CU_FUSE_ATTN_QKV; one token, f16 K and V, early): each warp
 * norms and rotates its block's q head from the raw projection, the warp whose cells include
 * p makes row p of K (normed, rotated, f16) and V (f16) in registers instead of loading them,
 * and in the first block of the kv head's split that holds p it also stores them to the
 * cache. The rope's angles and the norm weights are made before the PDL wait (so try_qkv
 * folds only where the rope's factors are a leaf), and every raw load is issued before any
 * math. */
template <int EPL, int U, bool KQ, bool VQ, bool F = false>
__global__ void __launch_bounds__(OB_ATTN_WARPS * OB_WARP) k_attn_h(ob_attn_args a) {
    typedef attn_lane<EPL, KQ> KL;
    typedef attn_lane<EPL, VQ> VL;
    if (!a.early) OB_PDL_ENTRY();
    __shared__ float s_m[OB_ATTN_WARPS], s_l[OB_ATTN_WARPS];
    __shared__ float s_acc[OB_ATTN_WARPS][OB_ATTN_MAX_NE * OB_WARP];
    __shared__ int s_hi;
    const int sp = blockIdx.x, lane = threadIdx.x % OB_WARP, w = threadIdx.x / OB_WARP;
    const int64_t h = blockIdx.y, t = blockIdx.z, hd = 32 * EPL;
    const int64_t kh = h / (a.H / a.n_kv);
    int64_t p, cell0, lo, hi;
    attn_range(a, sp, t, &s_hi, &p, &cell0, &lo, &hi);
    const float slope = a.alibi > 0.0f ? ob_cu_alibi_slope((int)h, (int)a.H, a.alibi) : 0.0f;
    const KL kl(a.kc, cell0, a.krb, kh, lane);
    const VL vl(a.vc, cell0, a.vrb, kh, lane);
    typename KL::raw kr[U];
    typename VL::raw vr[U];
    const typename KL::raw kzero{};
    const typename VL::raw vzero{};
    /* the first round; with early, all but row p (the kernel ahead writes it) before the wait */
    const int64_t skip = a.early ? p : -1;
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int64_t j = lo + w + (int64_t)u * OB_ATTN_WARPS;
        const bool on = j <= hi && j != skip;
        kr[u] = on ? kl.load(j) : kzero;
        vr[u] = on ? vl.load(j) : vzero;
    }
    float qv[EPL], acc[EPL];
    typename KL::raw kp = kzero; /* F: row p, made here */
    typename VL::raw vp = vzero;
    if constexpr (F) {
        static_assert(!KQ && !VQ, "the fold stores f16 rows");
        __shared__ double s_sn[16 * OB_ATTN_MAX_NE], s_cs[16 * OB_ATTN_MAX_NE];
        __shared__ float s_w[2][32 * OB_ATTN_MAX_NE];
        const double pd = a.pos[t];
        for (int64_t k = threadIdx.x; k < hd / 2; k += blockDim.x) rope_angle(pd, k, a.fr, &s_sn[k], &s_cs[k]);
        for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
            s_w[0][i] = a.fqw ? a.fqw[i] : 1.0f;
            s_w[1][i] = a.fkw ? a.fkw[i] : 1.0f;
        }
        OB_PDL_ENTRY();
        /* every load first: q for each warp, row p's raw k and v for the warp that takes p */
        const bool own = p >= lo && p <= hi && (p - lo) % OB_ATTN_WARPS == w;
        float qz[EPL], kz[EPL], vz[EPL];
        const float *qx = a.q + (t * a.H + h) * hd + EPL * lane, *kx = a.fk + kh * hd + EPL * lane, *vx = a.fv + kh * hd + EPL * lane;
#pragma unroll
        for (int e = 0; e < EPL; e++) {
            qz[e] = qx[e];
            kz[e] = own ? kx[e] : 0.0f;
            vz[e] = own ? vx[e] : 0.0f;
        }
        __syncthreads(); /* the angles and weights */
        fold_lane<EPL>(qz, a.fqw ? s_w[0] : NULL, a.fqnorm != 0, a.fqeps, a.fr.neox, s_sn, s_cs, lane);
#pragma unroll
        for (int e = 0; e < EPL; e++) { qv[e] = qz[e] * a.scale; acc[e] = 0.0f; }
        if (own) {
            fold_lane<EPL>(kz, a.fkw ? s_w[1] : NULL, a.fknorm != 0, a.fkeps, a.fr.neox, s_sn, s_cs, lane);
            uint32_t *kw = (uint32_t *)&kp, *vw = (uint32_t *)&vp;
#pragma unroll
            for (int e = 0; e < EPL / 2; e++) {
                const __half2 k2 = __floats2half2_rn(kz[2 * e], kz[2 * e + 1]), v2 = __floats2half2_rn(vz[2 * e], vz[2 * e + 1]);
                kw[e] = *(const uint32_t *)&k2;
                vw[e] = *(const uint32_t *)&v2;
            }
            if (h % (a.H / a.n_kv) == 0) {
                ((typename KL::raw *)kl.b)[p * kl.st] = kp;
                ((typename VL::raw *)vl.b)[p * vl.st] = vp;
            }
#pragma unroll
            for (int u = 0; u < U; u++)
                if (lo + w + (int64_t)u * OB_ATTN_WARPS == p) {
                    kr[u] = kp;
                    vr[u] = vp;
                }
        }
    } else {
        if (a.early) {
            OB_PDL_ENTRY();
#pragma unroll
            for (int u = 0; u < U; u++)
                if (lo + w + (int64_t)u * OB_ATTN_WARPS == p && p <= hi) {
                    kr[u] = kl.load(p);
                    vr[u] = vl.load(p);
                }
        }
        const float *qp = a.q + (t * a.H + h) * hd + EPL * lane;
#pragma unroll
        for (int e = 0; e < EPL; e++) { qv[e] = qp[e] * a.scale; acc[e] = 0.0f; }
    }
    float m = -INFINITY, l = 0.0f;
    for (int64_t j0 = lo + w; j0 <= hi; j0 += U * OB_ATTN_WARPS) {
        if (j0 != lo + w) {
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t j = j0 + (int64_t)u * OB_ATTN_WARPS;
                kr[u] = F && j == p ? kp : j <= hi ? kl.load(j) : kzero;
                vr[u] = F && j == p ? vp : j <= hi ? vl.load(j) : vzero;
            }
        }
        float d[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            float kf[EPL];
            KL::to_f(kr[u], kf);
            d[u] = 0.0f;
#pragma unroll
            for (int e = 0; e < EPL; e++) d[u] += qv[e] * kf[e];
        }
        attn_round<U>(a, d, j0, hi, p, slope, m, l, acc, [&](int u, float pj) {
            float vf[EPL];
            VL::to_f(vr[u], vf);
#pragma unroll
            for (int e = 0; e < EPL; e++) acc[e] += pj * vf[e];
        });
    }
    if (lane == 0) { s_m[w] = m; s_l[w] = l; }
#pragma unroll
    for (int e = 0; e < EPL; e++) s_acc[w][EPL * lane + e] = acc[e];
    attn_finish<OB_ATTN_MAX_NE>(a, s_m, s_l, s_acc, t, h, sp, a.T == 1);
}

/* ---- prefill: one warp per (token, head), lanes over cells ----------------------------- */

/* q . K row j (hd elements from hoff), q in shared memory (already scaled). */
static __device__ __forceinline__ float q_dot_row(int type, const uint8_t *row, int64_t hoff, const float *sq, int hd) {
    float d = 0.0f;
    if ((hd % 8 != 0 && !kvq_block_type(type)) || type == OB_TYPE_BF16) {
        /* small encoder heads (hd 12, 20, ...), and BF16: element by element */
        for (int e = 0; e < hd; e++) d += sq[e] * kv_at(type, row, hoff + e);
    } else if (kvq_block_type(type) && type != OB_TYPE_Q8_0) { /* the other block types, hoff % 32 == 0 */
        const int bb = kvq_bytes(type);
        const uint8_t *b0 = row + (hoff / 32) * bb;
        for (int blk = 0; blk < hd / 32; blk++) d += kvq_dot32(type, b0 + (size_t)bb * blk, sq + 32 * blk);
    } else if (type == OB_TYPE_F16) {
        /* 16-byte loads: each lane reads its own row, so every load instruction touches 32
         * different sectors; fewer, wider loads cut those L1 transactions 4x. */
        const uint4 *r = (const uint4 *)(row + 2 * hoff);
#pragma unroll 4
        for (int e = 0; e < hd / 8; e++) {
            const uint4 u = r[e];
            const float4 q0 = *(const float4 *)(sq + 8 * e), q1 = *(const float4 *)(sq + 8 * e + 4);
            const float2 v0 = __half22float2(*(const __half2 *)&u.x), v1 = __half22float2(*(const __half2 *)&u.y);
            const float2 v2 = __half22float2(*(const __half2 *)&u.z), v3 = __half22float2(*(const __half2 *)&u.w);
            d += q0.x * v0.x + q0.y * v0.y + q0.z * v1.x + q0.w * v1.y + q1.x * v2.x + q1.y * v2.y + q1.z * v3.x + q1.w * v3.y;
        }
    } else if (type == OB_TYPE_F32) {
        const float4 *r = (const float4 *)(row + 4 * hoff);
#pragma unroll 4
        for (int e = 0; e < hd / 4; e++) {
            const float4 v = r[e];
            d += sq[4 * e] * v.x + sq[4 * e + 1] * v.y + sq[4 * e + 2] * v.z + sq[4 * e + 3] * v.w;
        }
    } else { /* Q8_0, 34-byte blocks, hoff % 32 == 0 */
        const uint8_t *b0 = row + (hoff / 32) * 34;
        for (int blk = 0; blk < hd / 32; blk++) {
            const uint8_t *b = b0 + 34 * blk;
            const float dd = __half2float(__ushort_as_half(*(const uint16_t *)b));
            const uint16_t *qs = (const uint16_t *)(b + 2);
            float a = 0.0f;
#pragma unroll
            for (int k = 0; k < 16; k++) {
                const uint16_t w = qs[k];
                a += sq[32 * blk + 2 * k] * (float)(int8_t)(w & 0xff) + sq[32 * blk + 2 * k + 1] * (float)(int8_t)(w >> 8);
            }
            d += dd * a;
        }
    }
    return d;
}

/* Prefill (T > OB_ATTN_SPLIT_T): a warp owns one (token, head); its lanes score 32 cells
 * at a time (each lane one K row, q from shared memory), the online softmax advances once
 * per 32 cells, and then the lanes switch to head elements to add the 32 V rows. The
 * warps of a block take consecutive heads of one token, which share K/V rows (GQA), so
 * those rows come from L1 after the first warp. The per-cell, per-warp reductions of
 * k_attn made long prompts latency-bound. */
#define OB_PF_WARPS 4
template <int NE> __global__ void __launch_bounds__(OB_PF_WARPS * OB_WARP) k_attn_pf(ob_attn_args a) {
    OB_CU_MARK();
    __shared__ __align__(16) float s_q[OB_PF_WARPS][NE * OB_WARP];
    const int lane = threadIdx.x % OB_WARP, w = threadIdx.x / OB_WARP;
    const int64_t item = (int64_t)blockIdx.x * OB_PF_WARPS + w;
    const bool live = item < a.T * a.H;
    const int64_t t = live ? item / a.H : 0, h = live ? item % a.H : 0;
    const int hd = (int)a.hd;
    const int64_t kh = h / (a.H / a.n_kv);
    const int64_t p = a.pos[t], s = a.seq[t];
    const float slope = a.alibi > 0.0f ? ob_cu_alibi_slope((int)h, (int)a.H, a.alibi) : 0.0f;
    const float *qp = a.q + (t * a.H + h) * hd;
    for (int e = lane; e < hd; e += OB_WARP) s_q[w][e] = qp[e] * a.scale;
    /* Whole-sequence attention reaches the furthest position of this sequence in the batch. */
    int64_t hi = p;
    if (!a.causal) {
        int m = (int)p;
        for (int64_t u = lane; u < a.T; u += OB_WARP)
            if (a.seq[u] == s && a.pos[u] > m) m = a.pos[u];
        for (int o = OB_WARP / 2; o > 0; o /= 2) m = max(m, OB_SHFL_XOR(m, o));
        hi = m;
    }
    OB_SYNCWARP();
    int64_t lo = a.window > 0 ? OB_MAX((int64_t)0, p - a.window + 1) : 0;
    if (!a.causal && a.window > 0) hi = OB_MIN(hi, p + a.window - 1);
    const bool valid = live && p >= 0 && p < a.cps && s >= 0 && s * a.cps + a.cps <= a.cells;
    if (!valid) hi = -1;
    hi = OB_MIN(hi, a.cps - 1);
    float acc[NE];
#pragma unroll
    for (int i = 0; i < NE; i++) acc[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int64_t cell0 = s * a.cps, hoff = kh * hd, voff = kh * a.sv;
    const int dv = (int)a.dv;
    for (int64_t j0 = lo; j0 <= hi; j0 += OB_WARP) {
        const int64_t j = j0 + lane;
        float d = -INFINITY;
        if (j <= hi) {
            d = q_dot_row(a.ktype, a.kc + (size_t)(cell0 + j) * a.krb, hoff, s_q[w], hd);
            if (a.cap > 0.0f) d = a.cap * tanhf(d / a.cap);
            d -= slope * (float)(p > j ? p - j : j - p);
        }
        float mc = d;
        for (int o = OB_WARP / 2; o > 0; o /= 2) mc = fmaxf(mc, OB_SHFL_XOR(mc, o));
        const float mn = fmaxf(m, mc); /* finite: cell j0 <= hi is live */
        const float corr = expf(m - mn);
        const float pj = j <= hi ? expf(d - mn) : 0.0f;
        float ps = pj;
        for (int o = OB_WARP / 2; o > 0; o /= 2) ps += OB_SHFL_XOR(ps, o);
        l = l * corr + ps;
        m = mn;
#pragma unroll
        for (int i = 0; i < NE; i++) acc[i] *= corr;
        const int nc = (int)OB_MIN((int64_t)OB_WARP, hi - j0 + 1);
        for (int c = 0; c < nc; c++) {
            const float pc = OB_SHFL(pj, c);
            const uint8_t *vr = a.vc + (size_t)(cell0 + j0 + c) * a.vrb;
#pragma unroll
            for (int i = 0; i < NE; i++)
                if (lane + 32 * i < dv) acc[i] += pc * kv_at(a.vtype, vr, voff + lane + 32 * i);
        }
    }
    if (!live) return;
    float *o = a.out + (t * a.H + h) * dv;
    const float inv = attn_inv(a.sinks, h, m, l);
#pragma unroll
    for (int i = 0; i < NE; i++)
        if (lane + 32 * i < dv) o[lane + 32 * i] = acc[i] * inv;
}

/* The merge quantizes 32-element blocks of one head's output: only for value widths that are
 * 32-multiples. */
bool ob_cu_attention_merges(const ob_cu_ctx *cx, const ob_tensor *n) { return attn_nsplit(cx, n) > 1 && attn_dv(n) % 32 == 0; }

/* Whether decode ATTENTION n (T <= OB_ATTN_SPLIT_T) takes k_attn_h: f16 or Q8_0 K and V (each)
 * with hd = 64, 128, 256, values as wide as the keys from a V cache of its own layout (a
 * lane's V elements are its K elements), rows aligned for the loads (16 bytes; 2 for Q8_0's
 * 34-byte blocks), and cx->opt.attn_h (ONEBIT_CUDA_ATTN_H: 0 never, 1 one token, 2 every
 * decode batch). */
static bool attn_h_ok(const ob_cu_ctx *cx, const ob_tensor *n) {
    const ob_tensor *q = n->src[0], *kc = n->src[1], *vc = n->src[2];
    const int64_t hd = q->ne[0], T = q->ne[2] * q->ne[3];
    if (attn_dv(n) != hd || attn_sv(n) != hd) return false;
    const bool kq = kc->type == OB_TYPE_Q8_0, vq = vc->type == OB_TYPE_Q8_0;
    const size_t kal = kq ? 2 : 16, val = vq ? 2 : 16;
    return (kq || kc->type == OB_TYPE_F16) && (vq || vc->type == OB_TYPE_F16) && (hd == 64 || hd == 128 || hd == 256) &&
           ((uintptr_t)kc->data % kal) == 0 && ((uintptr_t)vc->data % val) == 0 && ob_row_size(kc->type, kc->ne[0]) % kal == 0 &&
           ob_row_size(vc->type, vc->ne[0]) % val == 0 && (cx->opt.attn_h >= 2 || (cx->opt.attn_h == 1 && (T == 1 || cx->det)));
}

/* Whether k_attn_h can take ATTENTION n with the q/k/v tail folded in: one token, causal,
 * pos and seq inputs of the step (the early loads), f16 K and V caches of their own (the
 * fold stores a row into each). */
bool ob_cu_attention_fold_ok(const ob_cu_ctx *cx, const ob_tensor *n) {
    const ob_tensor *q = n->src[0];
    return (cx->fuse & OB_CU_FUSE_ATTN_QKV) && q->ne[2] * q->ne[3] == 1 && n->ip[3] != 0 && n->src[1] != n->src[2] &&
           n->src[3]->op == OB_OP_LEAF && n->src[4]->op == OB_OP_LEAF && n->src[1]->type == OB_TYPE_F16 &&
           n->src[2]->type == OB_TYPE_F16 && attn_h_ok(cx, n);
}

/* fold: NULL, or the tail's nodes {q norm or NULL, q rope, k norm or NULL, k rope, V store}
 * (ob_cu_attention_fold_ok holds). */
static bool attention_launch(ob_cu_ctx *cx, ob_tensor *n, bool quant, const ob_tensor *const *fold) {
    const ob_tensor *q = n->src[0], *kc = n->src[1], *vc = n->src[2];
    ob_attn_args a = {};
    a.q = (const float *)q->data;
    a.kc = (const uint8_t *)kc->data;
    a.vc = (const uint8_t *)vc->data;
    a.pos = (const int32_t *)n->src[3]->data;
    a.seq = (const int32_t *)n->src[4]->data;
    a.out = (float *)n->data;
    a.partial = (float *)cx->tmp;
    a.hd = q->ne[0];
    a.dv = attn_dv(n);
    a.sv = attn_sv(n);
    a.H = q->ne[1];
    a.T = q->ne[2] * q->ne[3];
    a.n_kv = n->ip[1];
    a.cps = n->ip[0];
    a.cells = ob_nrows(kc);
    a.window = n->ip[2];
    a.krb = ob_row_size(kc->type, kc->ne[0]);
    a.vrb = ob_row_size(vc->type, vc->ne[0]);
    a.ktype = (int)kc->type;
    a.vtype = (int)vc->type;
    a.causal = n->ip[3] != 0;
    a.nsplit = attn_nsplit(cx, n);
    a.early = a.T == 1 && a.causal && n->src[3]->op == OB_OP_LEAF && n->src[4]->op == OB_OP_LEAF;
    a.scale = n->fp[0];
    a.cap = n->fp[1];
    a.alibi = n->fp[2];
    a.sinks = n->src[6] ? (const float *)n->src[6]->data : NULL;
    if (fold) {
        const ob_tensor *qn = fold[0], *qr = fold[1], *kn = fold[2], *kr = fold[3], *vs = fold[4];
        a.q = (const float *)(qn ? qn->src[0] : qr->src[0])->data;
        a.fk = (const float *)(kn ? kn->src[0] : kr->src[0])->data;
        a.fv = (const float *)vs->src[0]->data;
        a.fqw = qn && qn->src[1] ? (const float *)qn->src[1]->data : NULL;
        a.fkw = kn && kn->src[1] ? (const float *)kn->src[1]->data : NULL;
        a.fqnorm = qn != NULL;
        a.fknorm = kn != NULL;
        a.fqeps = qn ? qn->fp[0] : 0.0f;
        a.fkeps = kn ? kn->fp[0] : 0.0f;
        a.fr = rope_p(qr);
        cx->stats[OB_CU_STAT_QKV]++;
        cx->stats[OB_CU_STAT_ATTN_FOLD]++;
    }
    /* batch-invariant mode: the split kernels at every T (their per-token sums do not
     * depend on T: each (split, head, token) block walks that token's own cells) */
    if (a.T > OB_ATTN_SPLIT_T && !cx->det && ob_cu_fa_applies(cx, n)) return ob_cu_op_flash_attn(cx, n);
    /* MLA's latent rows (hd or dv past 256) on the kernels' instances of more elements a lane */
    const bool wide = OB_MAX(a.hd, a.dv) > 32 * OB_ATTN_MAX_NE;
    if (a.T > OB_ATTN_SPLIT_T && !cx->det) {
        const unsigned nb = ob_cu_blocks(a.T * a.H, OB_PF_WARPS);
        if (wide) (void)OB_CU_LAUNCH_PLAIN(cx, (k_attn_pf<OB_ATTN_MAX_NE_W>), nb, OB_PF_WARPS * OB_WARP, 0, a);
        else (void)OB_CU_LAUNCH_PLAIN(cx, (k_attn_pf<OB_ATTN_MAX_NE>), nb, OB_PF_WARPS * OB_WARP, 0, a);
        return OB_CU_LAUNCHED(cx);
    }
    const int64_t K = a.dv * a.H;
    a.qx = quant ? (int8_t *)cx->qx : NULL;
    a.dx = quant ? (float2 *)((char *)cx->qx + ob_cu_qx_dx_offset(K, a.T)) : NULL;
    const bool one = a.nsplit > 1 && (cx->fuse & OB_CU_FUSE_ATTN_ONE) && cx->attn_cnt && cx->attn_cnt_n >= (size_t)(a.H * a.T);
    a.cnt = one ? cx->attn_cnt : NULL;
    if (one) cx->stats[OB_CU_STAT_ATTN_ONE]++;
    dim3 grid((unsigned)a.nsplit, (unsigned)a.H, (unsigned)a.T);
    const dim3 blk(OB_ATTN_WARPS * OB_WARP);
    /* k_attn_h where attn_h_ok says so, 4 cells a round: 8 ran no faster (bench/NOTES.md:
     * Session 8, k_attn_h); it takes q8_0 caches too (Session 9, q8_0 caches on k_attn_h). */
    const int epl = (int)(a.hd / 32);
    const bool kq = kc->type == OB_TYPE_Q8_0, vq = vc->type == OB_TYPE_Q8_0;
    const bool hk = attn_h_ok(cx, n);
    if (fold) {
        a.early = 1; /* ob_cu_attention_fold_ok */
        if (!(epl == 2   ? OB_CU_LAUNCH(cx, (k_attn_h<2, 4, false, false, true>), grid, blk, 0, a)
              : epl == 4 ? OB_CU_LAUNCH(cx, (k_attn_h<4, 4, false, false, true>), grid, blk, 0, a)
                         : OB_CU_LAUNCH(cx, (k_attn_h<8, 4, false, false, true>), grid, blk, 0, a)))
            return false;
    } else if (hk) {
        bool ok;
#define OB_ATTN_H_CASE(E, K8, V8) \
    case E * 4 + K8 * 2 + V8: ok = OB_CU_LAUNCH(cx, (k_attn_h<E, 4, K8 != 0, V8 != 0>), grid, blk, 0, a); break
        switch (epl * 4 + (int)kq * 2 + (int)vq) {
            OB_ATTN_H_CASE(2, 0, 0); OB_ATTN_H_CASE(2, 0, 1); OB_ATTN_H_CASE(2, 1, 0); OB_ATTN_H_CASE(2, 1, 1);
            OB_ATTN_H_CASE(4, 0, 0); OB_ATTN_H_CASE(4, 0, 1); OB_ATTN_H_CASE(4, 1, 0); OB_ATTN_H_CASE(4, 1, 1);
            OB_ATTN_H_CASE(8, 0, 0); OB_ATTN_H_CASE(8, 0, 1); OB_ATTN_H_CASE(8, 1, 0); OB_ATTN_H_CASE(8, 1, 1);
        default: ok = false; break;
        }
#undef OB_ATTN_H_CASE
        if (!ok) return false;
    } else {
        /* early loads (k_attn<1>: the first cell of each warp before the PDL wait) for one
         * token (cx->opt.attn_u: ONEBIT_CUDA_ATTN_U=0/1 forces them off/on, -1 automatic) */
        const int U = cx->opt.attn_u >= 0 ? cx->opt.attn_u : a.T == 1 ? 1 : 0;
        if (U == 0) a.early = 0;
        bool ok;
        if (wide)
            ok = U == 0 ? OB_CU_LAUNCH(cx, (k_attn<0, OB_ATTN_MAX_NE_W>), grid, blk, 0, a)
                        : OB_CU_LAUNCH(cx, (k_attn<1, OB_ATTN_MAX_NE_W>), grid, blk, 0, a);
        else
            ok = U == 0 ? OB_CU_LAUNCH(cx, (k_attn<0, OB_ATTN_MAX_NE>), grid, blk, 0, a)
                        : OB_CU_LAUNCH(cx, (k_attn<1, OB_ATTN_MAX_NE>), grid, blk, 0, a);
        if (!ok) return false;
    }
    if (a.nsplit > 1 && !one)
        return OB_CU_LAUNCH(cx, k_attn_merge, dim3((unsigned)(a.H * a.T)), dim3(OB_ATTN_WARPS * OB_WARP), 0, (const float *)a.partial,
                            a.out, a.dv, a.nsplit, a.qx, a.dx, a.sinks, a.H);
    return true;
}

size_t ob_cu_attention_cnt_size(const ob_cu_ctx *cx, const ob_tensor *n) {
    const ob_tensor *q = n->src[0];
    return attn_nsplit(cx, n) > 1 ? (size_t)(q->ne[1] * q->ne[2] * q->ne[3]) : 0;
}

bool ob_cu_op_attention_q(ob_cu_ctx *cx, ob_tensor *n, bool quant) { return attention_launch(cx, n, quant, NULL); }

bool ob_cu_op_attention_fold(ob_cu_ctx *cx, ob_tensor *n, bool quant, const ob_tensor *qn, const ob_tensor *qr,
                             const ob_tensor *kn, const ob_tensor *kr, const ob_tensor *vs) {
    const ob_tensor *fold[5] = {qn, qr, kn, kr, vs};
    return attention_launch(cx, n, quant, fold);
}

bool ob_cu_op_attention(ob_cu_ctx *cx, ob_tensor *n) { return ob_cu_op_attention_q(cx, n, false); }

OB_CU_MARK_BIND(attention)
