/* Mixture of experts on CUDA (graph.h, issue #32). The semantics, and the plain-C
 * references these kernels are tested against, are the CPU's (src/backend/cpu/op_moe.c).
 *
 *   MOE_GATE   logits F32 [E, T] (+ selection bias F32 [E]) -> F32 [2k, T]: one warp per
 *              token. Pass j of k finds the best expert ranked after pick j-1 (score
 *              descending, then id ascending; scores in double exactly as op_moe.c's
 *              gate_score, NaN lowest): each lane over experts lane, lane + 32, ..., then a
 *              butterfly over the warp. The weights follow in double, as the reference
 *              computes them, summed in pick order. Group-limited routing (OB_MOE_GROUPS,
 *              at most 64 groups): lanes over groups take each group's two best selection
 *              scores (softmax: probabilities, the denominator summed over lanes, then
 *              butterflies), a group is used where fewer than `used` groups rank before it,
 *              and every expert of another group scores -inf, as op_moe.c's gate_mask_groups.
 *   MATMUL_ID  W [K, N, E], x F32 [K, T] (shared by a token's slots) or [K, k, T] (one row
 *              per slot), the gate -> F32 [N, k, T]: a grid over (row block, slot, token).
 *              Without a gate slot j takes matrix j (MLA's one matrix per head, k = E).
 *              Every warp reads its slot's expert id from the gate on the device (no host
 *              sync, so the step stays capturable as a CUDA graph) and reads rows of that
 *              expert only: a decode step touches the k chosen experts and nothing else. An
 *              id that is not an integer in [0, E) gives zeros. Q4_K, Q6_K, Q8_0, Q1_0 and
 *              TQ2_0 run on int8 x (op_mmvq.cu's k_quant_act and dot_slot, mmvq_dot.cuh),
 *              lanes over a row's (block, slot) units as k_mmvq; every other type the CUDA
 *              MATMUL takes runs on f32 x through the dequantizers (dequant.cuh), lanes over
 *              32-element chunks as op_quant.cu's k_mmv.
 *   MOE_SUM    y [N, k, T], the gate -> [N, T]: one thread per output, slots in order.
 *   ADD_ID     y [N, k, T], biases [N, E], the gate -> [N, k, T] (gpt-oss's expert biases):
 *              one thread per element, one float add as op_add_id.c's.
 *
 * Batch invariance (cx->det asks nothing more): each output element is made by one warp or
 * thread whose work and reduction order depend on its own token's data and the node's
 * shapes other than T, and which kernel runs depends on the weight type and pointer
 * alignment, never on T. So a token's result is the same alone, in a prefill or in a batch.
 *
 * Not here yet: a grouped prefill. Each (token, slot) pair reads its expert's rows on its
 * own, so at T tokens an expert's weights are read once per pair that chose it (from L2 at
 * best); see ob_cu_op_matmul_id for what grouping would take. */
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/mmvq_dot.cuh"
#include <math.h>

#define OB_MOE_WARPS 4     /* warps per block (MOE_GATE, MATMUL_ID) */
#define OB_MOE_MAX_GROUPS 64 /* groups of group-limited routing (a bit each in a warp's mask) */
#define OB_MOE_SUM_BLOCK 256

/* ---- MOE_GATE ------------------------------------------------------------------------------ */

/* Selection score of expert e, as op_moe.c's gate_score: the logit (the softmax is
 * monotone), or sigmoid(logit) + bias, in double; NaN ranks below everything. */
static __device__ __forceinline__ double gate_score(bool sigmoid, float l, const float *__restrict__ bias, int64_t e) {
    const double s = sigmoid ? 1.0 / (1.0 + exp(-(double)l)) + (bias ? (double)bias[e] : 0.0) : (double)l;
    return isnan(s) ? -INFINITY : s;
}

/* The weight of a chosen expert before normalisation, as op_moe.c's ref_moe_gate. */
static __device__ __forceinline__ double gate_weight(bool sigmoid, float l, double mx, double den) {
    return sigmoid ? 1.0 / (1.0 + exp(-(double)l)) : exp((double)l - mx) / den;
}

/* Whether candidate (sb, ib) ranks before (sa, ia): a higher score, or the same score and a
 * lower id. Id -1 is no candidate and ranks after everything. */
static __device__ __forceinline__ bool ranks_before(double sb, int ib, double sa, int ia) {
    return ib >= 0 && (ia < 0 || sb > sa || (sb == sa && ib < ia));
}

/* Group-limited routing (graph.h's OB_MOE_GROUPS: n groups, `used` of them): the used groups
 * of logits row l as bits, the same in every lane of the warp. mx: the largest logit (NaN
 * skipped), for softmax's probabilities (sigmoid: unused). As op_moe.c's gate_mask_groups: a group's score is
 * its two best selection scores summed (one, in groups of one), NaN and inf - inf as -inf,
 * and the `used` best groups (ties to the lower group) are kept. gs: the warp's shared row of
 * group scores. */
static __device__ unsigned long long gate_groups(const float *__restrict__ l, const float *__restrict__ bias, int64_t E,
                                                 bool sigmoid, int32_t groups, double mx, double *gs, int lane) {
    const int ng = OB_MOE_GROUP_COUNT(groups), nu = OB_MOE_GROUP_USED(groups);
    const int64_t per = E / ng;
    double den = 0.0;
    if (!sigmoid) {
        for (int64_t e = lane; e < E; e += OB_WARP) den += isnan(l[e]) ? 0.0 : exp((double)l[e] - mx);
#pragma unroll
        for (int o = OB_WARP / 2; o > 0; o /= 2) den += OB_SHFL_XOR(den, o);
    }
    for (int g = lane; g < ng; g += OB_WARP) {
        double b1 = -INFINITY, b2 = -INFINITY;
        for (int64_t e = g * per; e < (g + 1) * per; e++) {
            double v = sigmoid ? gate_score(true, l[e], bias, e) : exp((double)l[e] - mx) / den;
            if (isnan(v)) v = -INFINITY;
            if (v > b1) {
                b2 = b1;
                b1 = v;
            } else if (v > b2) {
                b2 = v;
            }
        }
        const double s = per > 1 ? b1 + b2 : b1;
        gs[g] = isnan(s) ? -INFINITY : s;
    }
    OB_SYNCWARP();
    unsigned long long used = 0;
    for (int g = lane; g < ng; g += OB_WARP) {
        int before = 0;
        for (int o = 0; o < ng; o++) before += gs[o] > gs[g] || (gs[o] == gs[g] && o < g);
        if (before < nu) used |= 1ull << g;
    }
#pragma unroll
    for (int o = OB_WARP / 2; o > 0; o /= 2) used |= OB_SHFL_XOR(used, o);
    return used;
}

/* out row t = [w_0 .. w_{k-1}, id_0 .. id_{k-1}] of logits row t. One warp per token.
 * groups: MOE_GATE's i[3] (0: every expert may be chosen). */
__global__ void __launch_bounds__(OB_MOE_WARPS * OB_WARP)
    k_moe_gate(const float *__restrict__ logits, const float *__restrict__ bias, float *__restrict__ out, int64_t E, int64_t T,
               int k, int sigmoid, int norm, float scale, int32_t groups) {
    OB_PDL_ENTRY();
    __shared__ double s_gs[OB_MOE_WARPS][OB_MOE_MAX_GROUPS];
    const int lane = threadIdx.x % OB_WARP;
    const int64_t t = (int64_t)blockIdx.x * OB_MOE_WARPS + threadIdx.x / OB_WARP;
    if (t >= T) return; /* the whole warp: t is the warp's */
    const float *l = logits + t * E;
    float *y = out + t * 2 * k;
    /* Softmax: the largest logit (a NaN never wins the comparison, as in the reference) and
     * the denominator, in double. Butterflies leave the same value in every lane. */
    double mx = 0.0, den = 0.0;
    if (!sigmoid) {
        float m = -INFINITY;
        for (int64_t e = lane; e < E; e += OB_WARP) m = l[e] > m ? l[e] : m;
#pragma unroll
        for (int o = OB_WARP / 2; o > 0; o /= 2) {
            const float v = OB_SHFL_XOR(m, o);
            m = v > m ? v : m;
        }
        mx = (double)m;
        for (int64_t e = lane; e < E; e += OB_WARP) den += exp((double)l[e] - mx);
#pragma unroll
        for (int o = OB_WARP / 2; o > 0; o /= 2) den += OB_SHFL_XOR(den, o);
    }
    /* the experts of groups left out score -inf (bit g of used: group g may be chosen) */
    const int64_t per = groups ? E / OB_MOE_GROUP_COUNT(groups) : E;
    const unsigned long long used = groups ? gate_groups(l, bias, E, sigmoid, groups, mx, s_gs[threadIdx.x / OB_WARP], lane)
                                           : ~0ull;
    auto sel = [&](int64_t e) { return (used >> (e / per)) & 1 ? gate_score(sigmoid, l[e], bias, e) : (double)-INFINITY; };
    /* Pick j: the best of the experts ranked after pick j-1 (pid, its score ps). */
    double ps = 0.0, wsum = 0.0;
    int pid = -1;
    for (int j = 0; j < k; j++) {
        double bs = -INFINITY;
        int bid = -1;
        for (int64_t e = lane; e < E; e += OB_WARP) {
            const double s = sel(e);
            if (pid >= 0 && !(s < ps || (s == ps && e > pid))) continue; /* ranked before pick j-1 */
            if (ranks_before(s, (int)e, bs, bid)) {
                bs = s;
                bid = (int)e;
            }
        }
#pragma unroll
        for (int o = OB_WARP / 2; o > 0; o /= 2) {
            const double os = OB_SHFL_XOR(bs, o);
            const int oid = OB_SHFL_XOR(bid, o);
            if (ranks_before(os, oid, bs, bid)) {
                bs = os;
                bid = oid;
            }
        }
        pid = bid < 0 ? 0 : bid; /* unreachable: k <= E distinct ranks (op_moe.c does the same) */
        ps = sel(pid);
        wsum += gate_weight(sigmoid, l[pid], mx, den); /* in pick order, as the reference */
        if (lane == 0) y[k + j] = (float)pid;
    }
    /* The weights: lane 0 reads back the ids it wrote itself (no ordering between lanes). */
    if (lane == 0)
        for (int j = 0; j < k; j++) {
            const double w = gate_weight(sigmoid, l[(int)y[k + j]], mx, den);
            y[j] = (float)((norm ? w / wsum : w) * (double)scale);
        }
}

bool ob_cu_op_moe_gate(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *a = n->src[0], *bias = n->src[1];
    const int64_t E = a->ne[0], T = ob_nrows(a);
    if (T == 0) return true;
    return OB_CU_LAUNCH(cx, k_moe_gate, ob_cu_blocks(T, OB_MOE_WARPS), OB_MOE_WARPS * OB_WARP, 0, (const float *)a->data,
                        bias ? (const float *)bias->data : (const float *)NULL, (float *)n->data, E, T, (int)n->ip[0],
                        (int)(n->ip[1] == OB_MOE_SIGMOID), (int)((n->ip[2] & OB_MOE_NORM) != 0), n->fp[0], (int32_t)n->ip[3]);
}

/* ---- MATMUL_ID ----------------------------------------------------------------------------- */

/* The expert a gate slot names, or -1 when it names none (not an integer in [0, E)), as
 * op_moe.c's slot_expert: no id can index past the weight. */
static __device__ __forceinline__ int64_t slot_expert(float v, int64_t E) {
    return v >= 0.0f && v < (float)E && v == floorf(v) ? (int64_t)v : -1;
}

/* What every MATMUL_ID kernel gets: expert e's row r starts at W + (e N + r) rb; slot j of
 * token t reads x row t xt + j xs (shared x: xt 1, xs 0; one row per slot: xt k, xs 1) and
 * writes y[(t k + j) N + r]; the gate row of token t is gate[t 2k ..] (NULL: slot j takes
 * matrix j). */
typedef struct mmid_args {
    const uint8_t *W;
    size_t rb;
    int64_t K, N, E, xt, xs;
    const float *gate;
    float *y;
    int k;
} mmid_args;

/* This lane's part of the dot of weight row wr (type T, K elements) with x row xr: 32-element
 * chunks lane, lane + 32, ... (plain rows that are not whole chunks: elements lane, lane +
 * 32, ...). x4: xr is 16-byte aligned and read as float4; the sums are the same either way. */
template <int T>
static __device__ __forceinline__ float lane_dot(const uint8_t *__restrict__ wr, const float *__restrict__ xr, int64_t K,
                                                 bool x4, int lane) {
    float acc = 0.0f;
    if constexpr (T == OB_TYPE_F32 || T == OB_TYPE_F16 || T == OB_TYPE_BF16) {
        if (K % 32 != 0) {
            for (int64_t i = lane; i < K; i += OB_WARP) acc += plain_at<T>(wr, i) * xr[i];
            return acc;
        }
    }
    for (int64_t c = lane; c < K / 32; c += OB_WARP) {
        float v[32];
        deq32<T>(wr, c, v);
        const float *xc = xr + c * 32;
        float s = 0.0f;
#pragma unroll
        for (int q = 0; q < 8; q++) {
            const float4 f =
                x4 ? ((const float4 *)xc)[q] : make_float4(xc[4 * q], xc[4 * q + 1], xc[4 * q + 2], xc[4 * q + 3]);
            s += v[4 * q] * f.x + v[4 * q + 1] * f.y + v[4 * q + 2] * f.z + v[4 * q + 3] * f.w;
        }
        acc += s;
    }
    return acc;
}

/* Any weight type on f32 x: one warp per output row, OB_MOE_WARPS rows a block; grid
 * (row blocks, slot, token). */
template <int T>
__global__ void __launch_bounds__(OB_MOE_WARPS * OB_WARP) k_mmid(mmid_args a, const float *__restrict__ x, int x4) {
    OB_PDL_ENTRY();
    const int lane = threadIdx.x % OB_WARP, j = (int)blockIdx.y;
    const int64_t t = blockIdx.z, row = (int64_t)blockIdx.x * OB_MOE_WARPS + threadIdx.x / OB_WARP;
    if (row >= a.N) return; /* the whole warp */
    const int64_t e = a.gate ? slot_expert(a.gate[t * 2 * a.k + a.k + j], a.E) : j;
    float acc = 0.0f;
    if (e >= 0) /* the same for the whole warp */
        acc = lane_dot<T>(a.W + ((size_t)e * (size_t)a.N + (size_t)row) * a.rb, x + (t * a.xt + j * a.xs) * a.K, a.K, x4 != 0,
                          lane);
#pragma unroll
    for (int o = OB_WARP / 2; o > 0; o /= 2) acc += OB_SHFL_XOR(acc, o);
    if (lane == 0) a.y[(t * a.k + j) * a.N + row] = acc;
}

/* int8 x (qx [R][K], dx [R][K/32] from k_quant_act) for the types of dot_slot: each row's
 * (block, slot) units go to 1 << lsh lanes (the fewest that cover them, at most a warp), so
 * a warp takes 32 >> lsh rows; grid (row blocks, slot, token). Lanes of rows past N, and of
 * a slot naming no expert, walk nothing but join the shuffles. */
template <int T>
__global__ void __launch_bounds__(OB_MOE_WARPS * OB_WARP)
    k_mmid_q8(mmid_args a, const int8_t *__restrict__ qx, const float2 *__restrict__ dx, int lsh) {
    OB_PDL_ENTRY();
    constexpr int S = mq<T>::slots, QK = mq<T>::qk, BY = mq<T>::bytes;
    const int lane = threadIdx.x % OB_WARP, L = 1 << lsh, l = lane & (L - 1), j = (int)blockIdx.y;
    const int64_t t = blockIdx.z;
    const int64_t row = ((int64_t)blockIdx.x * OB_MOE_WARPS + threadIdx.x / OB_WARP) * (OB_WARP >> lsh) + (lane >> lsh);
    const int64_t e = a.gate ? slot_expert(a.gate[t * 2 * a.k + a.k + j], a.E) : j, xr = t * a.xt + j * a.xs;
    const int nu = row < a.N && e >= 0 ? (int)(a.K / QK) * S : 0;
    const uint8_t *wr = a.W + ((size_t)(e >= 0 ? e : 0) * (size_t)a.N + (size_t)(row < a.N ? row : 0)) * a.rb;
    const int8_t *q = qx + xr * a.K;
    const float2 *d = dx + xr * (a.K / 32);
    float acc = 0.0f;
#pragma unroll 2
    for (int u = l; u < nu; u += L) {
        const int bi = u / S, s = u % S;
        dot_slot<T, 1>(wr + (size_t)bi * BY, s, q + (int64_t)bi * QK, d + (int64_t)bi * (QK / 32), a.K, 1, &acc);
    }
    for (int o = L / 2; o > 0; o /= 2) acc += OB_SHFL_XOR(acc, o);
    if (l == 0 && row < a.N) a.y[(t * a.k + j) * a.N + row] = acc;
}

/* The types of dot_slot (mmvq_dot.cuh). */
static bool q8_type(ob_type t) {
    return t == OB_TYPE_Q4_K || t == OB_TYPE_Q6_K || t == OB_TYPE_Q8_0 || t == OB_TYPE_Q1_0 || t == OB_TYPE_TQ2_0;
}

/* Bytes of cx->tmp for n's int8 x, whenever its type may take that path (shapes only). */
static size_t mmid_q8_bytes(const ob_tensor *n) {
    const ob_tensor *w = n->src[0], *x = n->src[1];
    if (!q8_type(w->type)) return 0;
    const int64_t K = w->ne[0], R = ob_nrows(x);
    return ob_cu_qx_dx_offset(K, R) + (size_t)(K / 32 * R) * sizeof(float2);
}

/* Whether n runs on int8 x: a type of dot_slot, x rows k_quant_act can read (float4 loads),
 * weights aligned as op_mmvq.cu reads them (Q4_K 16-byte pieces, the others 2-byte words;
 * an expert's matrix is a whole number of rows, which keeps that), and the scratch there. */
static bool mmid_q8(const ob_cu_ctx *cx, const ob_tensor *n) {
    const ob_tensor *w = n->src[0], *x = n->src[1];
    const uintptr_t wa = (uintptr_t)w->data;
    return q8_type(w->type) && w->ne[0] > 0 && w->ne[0] <= 0x3fffffff && ((uintptr_t)x->data & 15) == 0 &&
           (w->type == OB_TYPE_Q4_K ? (wa & 15) == 0 : (wa & 1) == 0) && mmid_q8_bytes(n) <= cx->tmp_size;
}

/* Lanes per row of the int8 kernel: the fewest power of two >= the row's units, at most a warp. */
static int q8_lsh(ob_type t, int64_t K) {
    int64_t units = 0;
    switch (t) {
#define U(tt) case tt: units = K / mq<tt>::qk * mq<tt>::slots; break;
        U(OB_TYPE_Q4_K) U(OB_TYPE_Q6_K) U(OB_TYPE_Q8_0) U(OB_TYPE_Q1_0) U(OB_TYPE_TQ2_0)
#undef U
    default: break;
    }
    int lsh = 0;
    while (lsh < 5 && ((int64_t)1 << lsh) < units) lsh++;
    return lsh;
}

/* MATMUL_ID. For a grouped prefill (tokens grouped by expert, as llama.cpp's MUL_MAT_ID
 * with MMQ does), this would need: the gate's ids on the device turned into per-expert
 * lists of (token, slot) pairs and counts (a counting sort in one small kernel, as op_moe.c
 * does on the host; the lists bounded by k T, so the scratch is shape-only and the step
 * stays capturable), x gathered (and quantized) in list order, then a tiled matmul whose
 * blocks each take a tile of one expert's rows against a tile of its list (a block per
 * (expert, row tile, column tile) with an empty-tile exit, or a persistent grid walking
 * the per-expert tile counts), its outputs scattered back to y[(t k + j) N + r]. Each
 * output's K loop must stay in one fixed order for batch invariance (no split-K atomics). */
bool ob_cu_op_matmul_id(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *w = n->src[0], *x = n->src[1];
    const int64_t K = w->ne[0], N = w->ne[1], k = n->ne[1], T = n->ne[2] * n->ne[3];
    if (N == 0 || T == 0) return true;
    const bool shared = ob_nrows(x) == T && k > 1; /* as op_moe.c decides it */
    mmid_args a;
    a.W = (const uint8_t *)w->data;
    a.rb = ob_row_size(w->type, K);
    a.K = K;
    a.N = N;
    a.E = w->ne[2];
    a.xt = shared ? 1 : k;
    a.xs = shared ? 0 : 1;
    a.gate = n->src[2] ? (const float *)n->src[2]->data : NULL; /* NULL: slot j takes matrix j */
    a.y = (float *)n->data;
    a.k = (int)k;
    if (mmid_q8(cx, n)) {
        const int64_t R = ob_nrows(x);
        int8_t *qx = (int8_t *)cx->tmp;
        float2 *dx = (float2 *)((char *)cx->tmp + ob_cu_qx_dx_offset(K, R));
        if (!ob_cu_quant_act(cx, (const float *)x->data, qx, dx, K * R)) return false;
        const int lsh = q8_lsh(w->type, K);
        const dim3 grid(ob_cu_blocks(N, OB_MOE_WARPS * (OB_WARP >> lsh)), (unsigned)k, (unsigned)T);
        const int8_t *cq = qx;
        const float2 *cd = dx;
        switch (w->type) {
#define Q(tt) case tt: return OB_CU_LAUNCH(cx, k_mmid_q8<tt>, grid, OB_MOE_WARPS * OB_WARP, 0, a, cq, cd, lsh);
            Q(OB_TYPE_Q4_K) Q(OB_TYPE_Q6_K) Q(OB_TYPE_Q8_0) Q(OB_TYPE_Q1_0) Q(OB_TYPE_TQ2_0)
#undef Q
        default: return false;
        }
    }
    const dim3 grid(ob_cu_blocks(N, OB_MOE_WARPS), (unsigned)k, (unsigned)T);
    const int x4 = ((uintptr_t)x->data & 15) == 0 && K % 4 == 0;
    switch (w->type) {
#define X(tt) case tt: return OB_CU_LAUNCH(cx, k_mmid<tt>, grid, OB_MOE_WARPS * OB_WARP, 0, a, (const float *)x->data, x4);
        OB_CU_FOR_EACH_TYPE(X)
#undef X
    default: return false;
    }
}

/* ---- MOE_SUM ------------------------------------------------------------------------------- */

/* y[t][i] = sum over j = 0..k-1, in that order, of w_j,t * src[t][j][i]: op_moe.c's kernel. */
__global__ void __launch_bounds__(OB_MOE_SUM_BLOCK)
    k_moe_sum(const float *__restrict__ src, const float *__restrict__ gate, float *__restrict__ y, int64_t N, int k, int64_t n) {
    OB_PDL_ENTRY();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int64_t t = i / N, r = i % N;
    const float *g = gate + t * 2 * k, *s = src + t * k * N + r;
    float acc = g[0] * s[0];
    for (int j = 1; j < k; j++) acc += g[j] * s[(int64_t)j * N];
    y[i] = acc;
}

bool ob_cu_op_moe_sum(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *src = n->src[0];
    const int64_t N = src->ne[0], k = src->ne[1], ne = ob_nelements(n);
    if (ne == 0) return true;
    return OB_CU_LAUNCH(cx, k_moe_sum, ob_cu_blocks(ne, OB_MOE_SUM_BLOCK), OB_MOE_SUM_BLOCK, 0, (const float *)src->data,
                        (const float *)n->src[1]->data, (float *)n->data, N, (int)k, ne);
}

/* ---- ADD_ID -------------------------------------------------------------------------------- */

/* y[(t k + j) N + i] = src[...] + bias[id N + i], id slot j's expert in token t's gate row;
 * src as it is where the slot names no expert. y may be src itself (each element is read,
 * then written, by one thread). */
__global__ void __launch_bounds__(OB_MOE_SUM_BLOCK)
    k_add_id(const float *src, const float *__restrict__ bias, const float *__restrict__ gate, float *y, int64_t N, int k,
             int64_t E, int64_t n) {
    OB_PDL_ENTRY();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int64_t r = i / N, t = r / k, e = slot_expert(gate[t * 2 * k + k + r % k], E);
    y[i] = e >= 0 ? src[i] + bias[e * N + i % N] : src[i];
}

bool ob_cu_op_add_id(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *src = n->src[0], *bias = n->src[1];
    const int64_t N = src->ne[0], k = src->ne[1], ne = ob_nelements(n);
    if (ne == 0) return true;
    return OB_CU_LAUNCH(cx, k_add_id, ob_cu_blocks(ne, OB_MOE_SUM_BLOCK), OB_MOE_SUM_BLOCK, 0, (const float *)src->data,
                        (const float *)bias->data, (const float *)n->src[2]->data, (float *)n->data, N, (int)k, bias->ne[1], ne);
}

/* ---- support ------------------------------------------------------------------------------- */

bool ob_cu_supports_moe(const ob_tensor *n) {
    switch (n->op) {
    case OB_OP_MOE_GATE: /* blocks of OB_MOE_WARPS tokens; groups of a warp's mask */
        return ob_nrows(n->src[0]) <= 0x7fffffff && OB_MOE_GROUP_COUNT(n->ip[3]) <= OB_MOE_MAX_GROUPS;
    case OB_OP_MATMUL_ID: { /* with a gate, or one matrix per head (none) */
        const ob_tensor *w = n->src[0];
        const bool plain = w->type == OB_TYPE_F32 || w->type == OB_TYPE_F16 || w->type == OB_TYPE_BF16;
        /* rows as the MATMUL kernels take them (plain types any length, the others whole
         * 32-element chunks); slots and tokens within a grid's y and z */
        return ob_cu_type_has_deq(w->type) && (plain || w->ne[0] % 32 == 0) && n->ne[1] <= 65535 &&
               n->ne[2] * n->ne[3] <= 65535;
    }
    case OB_OP_MOE_SUM:
    case OB_OP_ADD_ID:
        return true;
    default:
        return false;
    }
}

size_t ob_cu_moe_tmp_size(const ob_tensor *n) { return n->op == OB_OP_MATMUL_ID ? mmid_q8_bytes(n) : 0; }

bool ob_cu_moe_tables_init(ob_cu_ctx *cx) { return ob_cu_deq_tables_fill(cx); }

OB_CU_MARK_BIND(moe)
