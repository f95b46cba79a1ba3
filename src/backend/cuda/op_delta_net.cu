/* DELTA_NET (graph.h) on CUDA: the gated delta rule of Gated DeltaNet layers (Qwen3.5,
 * Qwen3-Next), token by token as the CPU's op_delta_net.c, for decode and prefill alike.
 *
 * Each column j of a head's dk x dv state evolves on its own given the token's q, k, v[j],
 * decay and beta (S *= decay; kv = S^T k; d = beta (v - kv); S += k d^T; o = S^T q, column by
 * column), so the work is split over columns: a warp holds 8 consecutive columns of one
 * (sequence, value head), each over 4 lanes that own the rows rg, rg + 4, ... (rg = lane / 8)
 * in registers; the column sums are the lanes' partial sums joined by two xor shuffles.
 * Lanes of one row group read 8 consecutive floats of a state row (a 32-byte sector), so the
 * state's one load and one store per node are whole sectors. Per token a warp stages the
 * normalised q and k of the head in its own shared memory (their norms by a butterfly over
 * the warp). A block is 4 warps (32 columns); the grid is state rows x value heads x column
 * blocks, and a block whose sequence has no token in the batch leaves at once. The tokens of
 * a sequence are walked in batch order with the state in registers from the first to the
 * last, then stored once; a token at position 0 starts from zeros.
 *
 * Every sum has one order fixed by dk and dv (a lane's rows in order, then the butterflies),
 * the same for a token alone or in a prefill, so the op is batch invariant with no switch and
 * uses no atomics. Tokens whose sequence has no state row get zeros (from the blocks of row
 * 0). Rows and columns past dk and dv are masked, never read: every load's index is inside
 * its tensor. The chunked form (ob_cpu_ref_delta_net_chunked), which a tensor-core prefill
 * would run, is not here yet. */
#include "backend/cuda/cuda_int.h"

#define OB_DN_WARPS 4
#define OB_DN_COLS 8                      /* columns a warp */
#define OB_DN_RG (32 / OB_DN_COLS)         /* lanes over a column's rows */
#define OB_DN_MAX_DK 256                  /* OB_DN_RG x the largest row count a lane holds */

/* R: the most rows a lane holds (dk <= OB_DN_RG R). */
template <int R>
__global__ void __launch_bounds__(OB_DN_WARPS * 32)
    k_delta_net(const float *__restrict__ qkv, const float *__restrict__ gl, const float *__restrict__ beta,
                float *__restrict__ state, const int32_t *__restrict__ pos, const int32_t *__restrict__ seq,
                float *__restrict__ out, int dk, int dv, int Hk, int H, int64_t T, int64_t S, int l2, float eps,
                float qscale) {
    OB_PDL_ENTRY();
    __shared__ float sh[OB_DN_WARPS][2][OB_DN_MAX_DK];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, c = lane % OB_DN_COLS, rg = lane / OB_DN_COLS;
    const int64_t ncb = (dv + OB_DN_WARPS * OB_DN_COLS - 1) / (OB_DN_WARPS * OB_DN_COLS);
    const int64_t b = blockIdx.x, cb = b % ncb, h = (b / ncb) % H, s = b / (ncb * H);
    const int j = (int)(cb * OB_DN_WARPS * OB_DN_COLS) + w * OB_DN_COLS + c;
    const bool live = j < dv;
    const int64_t W = 2 * (int64_t)Hk * dk + (int64_t)H * dv, kh = h % Hk;
    float *qs = sh[w][0], *ks = sh[w][1];
    int64_t t0 = 0;
    while (t0 < T && seq[t0] != s) t0++;
    if (t0 == T && s != 0) return; /* (row 0's blocks still write the zeros below) */
    float *Sg = state + s * (int64_t)dk * dv * H + h * (int64_t)dk * dv;
    float Sr[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int i = rg + OB_DN_RG * r;
        Sr[r] = t0 < T && live && i < dk ? Sg[(int64_t)i * dv + j] : 0.0f;
    }
    for (int64_t t = 0; t < T; t++) {
        const int32_t st = seq[t];
        if (st < 0 || st >= S) { /* no state: zeros, from the blocks of row 0 */
            if (s == 0 && rg == 0 && live) out[(t * H + h) * dv + j] = 0.0f;
            continue;
        }
        if (st != s) continue;
        if (pos[t] == 0) {
#pragma unroll
            for (int r = 0; r < R; r++) Sr[r] = 0.0f;
        }
        const float *row = qkv + t * W, *q = row + kh * dk, *k = row + Hk * dk + kh * dk;
        /* q and k normalised into this warp's shared rows; the norms by a butterfly */
        float sq = 0.0f, sk = 0.0f;
        for (int e = lane; e < dk; e += 32) {
            sq += q[e] * q[e];
            sk += k[e] * k[e];
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2) {
            sq += OB_SHFL_XOR(sq, o);
            sk += OB_SHFL_XOR(sk, o);
        }
        const float rq = l2 ? qscale / sqrtf(sq + eps) : qscale, rk = l2 ? 1.0f / sqrtf(sk + eps) : 1.0f;
        OB_SYNCWARP(); /* the last token's rows are read */
        for (int e = lane; e < dk; e += 32) {
            qs[e] = q[e] * rq;
            ks[e] = k[e] * rk;
        }
        OB_SYNCWARP();
        const float decay = expf(gl[t * H + h]), bt = beta[t * H + h];
        const float v = live ? row[2 * (int64_t)Hk * dk + h * dv + j] : 0.0f;
        float kv = 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int i = rg + OB_DN_RG * r;
            if (i < dk) {
                Sr[r] *= decay;
                kv += Sr[r] * ks[i];
            }
        }
#pragma unroll
        for (int o = OB_DN_COLS; o < 32; o *= 2) kv += OB_SHFL_XOR(kv, o);
        const float d = (v - kv) * bt;
        float acc = 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int i = rg + OB_DN_RG * r;
            if (i < dk) {
                Sr[r] += ks[i] * d;
                acc += Sr[r] * qs[i];
            }
        }
#pragma unroll
        for (int o = OB_DN_COLS; o < 32; o *= 2) acc += OB_SHFL_XOR(acc, o);
        if (rg == 0 && live) out[(t * H + h) * dv + j] = acc;
    }
    if (t0 == T || !live) return;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int i = rg + OB_DN_RG * r;
        if (i < dk) Sg[(int64_t)i * dv + j] = Sr[r];
    }
}

bool ob_cu_supports_delta_net(const ob_tensor *n) {
    const int64_t S = ob_nrows(n->src[3]), dv = n->ip[2], H = n->ne[1];
    const int64_t blocks = S * H * ((dv + OB_DN_WARPS * OB_DN_COLS - 1) / (OB_DN_WARPS * OB_DN_COLS));
    return n->ip[0] <= OB_DN_MAX_DK && blocks <= 0x7fffffff;
}

bool ob_cu_op_delta_net(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *qkv = n->src[0], *st = n->src[3];
    const int dk = n->ip[0], Hk = n->ip[1], dv = n->ip[2], H = (int)n->ne[1];
    const int64_t T = ob_nrows(qkv), S = ob_nrows(st);
    if (T == 0) return true;
    const int64_t ncb = (dv + OB_DN_WARPS * OB_DN_COLS - 1) / (OB_DN_WARPS * OB_DN_COLS);
    const unsigned blocks = (unsigned)(S * H * ncb);
    const float *q = (const float *)qkv->data, *g = (const float *)n->src[1]->data, *b = (const float *)n->src[2]->data;
    const int32_t *pos = (const int32_t *)n->src[4]->data, *seq = (const int32_t *)n->src[5]->data;
    float *sd = (float *)st->data, *o = (float *)n->data;
    const int l2 = n->ip[3] != 0;
    const float eps = n->fp[1], qs = n->fp[0];
    const int threads = OB_DN_WARPS * 32;
    if (dk <= OB_DN_RG * 8)
        return OB_CU_LAUNCH(cx, k_delta_net<8>, blocks, threads, 0, q, g, b, sd, pos, seq, o, dk, dv, Hk, H, T, S, l2,
                            eps, qs);
    if (dk <= OB_DN_RG * 16)
        return OB_CU_LAUNCH(cx, k_delta_net<16>, blocks, threads, 0, q, g, b, sd, pos, seq, o, dk, dv, Hk, H, T, S, l2,
                            eps, qs);
    if (dk <= OB_DN_RG * 32)
        return OB_CU_LAUNCH(cx, k_delta_net<32>, blocks, threads, 0, q, g, b, sd, pos, seq, o, dk, dv, Hk, H, T, S, l2,
                            eps, qs);
    return OB_CU_LAUNCH(cx, k_delta_net<64>, blocks, threads, 0, q, g, b, sd, pos, seq, o, dk, dv, Hk, H, T, S, l2, eps,
                        qs);
}

OB_CU_MARK_BIND(delta_net)
