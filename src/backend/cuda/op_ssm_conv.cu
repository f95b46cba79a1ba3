/* SSM_CONV (graph.h) on CUDA: the depthwise causal convolution of a recurrent layer (LFM2's
 * short conv, the conv before Qwen3.5's delta rule) with its rolling state, the semantics of
 * the CPU's op_ssm_conv.c. Two launches, in stream order:
 *
 *   k_conv_out    a thread per (channel, token): the token's K inputs, found by walking back
 *                 over the earlier tokens of its sequence in the batch, then (for the part of
 *                 the window before the batch) the sequence's state row as it was before the
 *                 node; stopping at a token at position 0, before which everything is zero.
 *                 The taps are summed in order 0..K-1, as graph.h says.
 *   k_conv_state  a thread per (channel, state row): the row's new last K-1 inputs, from its
 *                 sequence's last token in the batch, written in place oldest slot first (a
 *                 slot is read only before it is written: see there).
 *
 * A token's output depends only on its own sequence's inputs and state, computed the same
 * way at any batch size, so the op is batch invariant with no switch. The walks read only
 * tokens of the batch (indices in [0, T)); a token whose sequence has no state row gets zeros
 * and touches nothing. */
#include "backend/cuda/cuda_int.h"

#define OB_CONV_BLOCK 256

/* From token t of sequence s, up to `steps` earlier tokens of s in the batch, stopping at a
 * token at position 0: the earliest reached, and in *m how many steps were taken. */
static __device__ __forceinline__ int64_t conv_back(const int32_t *__restrict__ pos, const int32_t *__restrict__ seq,
                                                    int64_t t, int32_t s, int steps, int *m) {
    int64_t cur = t;
    int n = 0;
    while (n < steps && pos[cur] != 0) {
        int64_t u = cur - 1;
        while (u >= 0 && seq[u] != s) u--;
        if (u < 0) break;
        cur = u;
        n++;
    }
    *m = n;
    return cur;
}

/* The next token of sequence s after u (one exists: conv_back walked back from it). */
static __device__ __forceinline__ int64_t conv_next(const int32_t *__restrict__ seq, int64_t u, int32_t s,
                                                    int64_t T) {
    for (u++; u < T - 1 && seq[u] != s; u++) {
    }
    return u;
}

/* Input j back (j counting down over the calls), given the walk back: c_m = the earliest token
 * reached after m steps, at *u; beyond it the state (or zeros where c_m is at position 0).
 * Within the batch, x at *u, which then moves on to the sequence's next token. */
static __device__ __forceinline__ float conv_take(const float *__restrict__ x, const float *__restrict__ st,
                                                  const int32_t *__restrict__ seq, bool zero, int j, int m, int K,
                                                  int64_t C, int64_t c, int32_t s, int64_t T, int64_t *u) {
    if (j > m) return zero ? 0.0f : st[(int64_t)(K - 1 - (j - m)) * C + c];
    const float v = x[*u * C + c];
    if (j > 0) *u = conv_next(seq, *u, s, T);
    return v;
}

__global__ void __launch_bounds__(OB_CONV_BLOCK)
    k_conv_out(const float *__restrict__ x, const float *__restrict__ taps, const float *__restrict__ state,
               const int32_t *__restrict__ pos, const int32_t *__restrict__ seq, float *__restrict__ y, int64_t C,
               int K, int64_t T, int64_t S, int silu) {
    OB_PDL_ENTRY();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= C * T) return;
    const int64_t c = i % C, t = i / C;
    const int32_t s = seq[t];
    if (s < 0 || s >= S) {
        y[i] = 0.0f;
        return;
    }
    int m;
    int64_t u = conv_back(pos, seq, t, s, K - 1, &m);
    const bool zero = pos[u] == 0;
    const float *st = state + s * (K - 1) * C, *w = taps + c * K;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
        const int j = K - 1 - k; /* tap k takes the input j tokens back */
        acc += w[k] * conv_take(x, st, seq, zero, j, m, K, C, c, s, T, &u);
    }
    y[i] = silu ? acc / (1.0f + expf(-acc)) : acc;
}

/* Slot K-2-j of the new state is the input j back from the sequence's last token. Slots are
 * written from 0 up (j down); slot K-2-j's value, where it comes from the old state, is its
 * slot K-1-j+m, above every slot written so far, so nothing is read after it was written. */
__global__ void __launch_bounds__(OB_CONV_BLOCK)
    k_conv_state(const float *__restrict__ x, float *__restrict__ state, const int32_t *__restrict__ pos,
                 const int32_t *__restrict__ seq, int64_t C, int K, int64_t T, int64_t S) {
    OB_PDL_ENTRY();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= C * S) return;
    const int64_t c = i % C;
    const int32_t s = (int32_t)(i / C);
    int64_t last = T - 1;
    while (last >= 0 && seq[last] != s) last--;
    if (last < 0) return; /* no token of this sequence: its state stays */
    int m;
    int64_t u = conv_back(pos, seq, last, s, K - 2, &m);
    const bool zero = pos[u] == 0;
    float *st = state + (int64_t)s * (K - 1) * C;
    for (int j = K - 2; j >= 0; j--) {
        const float v = conv_take(x, st, seq, zero, j, m, K, C, c, s, T, &u);
        st[(int64_t)(K - 2 - j) * C + c] = v;
    }
}

bool ob_cu_op_ssm_conv(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *x = n->src[0], *w = n->src[1], *st = n->src[2];
    const int64_t C = x->ne[0], T = ob_nrows(x), S = ob_nrows(st);
    const int K = (int)w->ne[0];
    const int32_t *pos = (const int32_t *)n->src[3]->data, *seq = (const int32_t *)n->src[4]->data;
    if (T == 0) return true;
    if (!OB_CU_LAUNCH(cx, k_conv_out, ob_cu_blocks(C * T, OB_CONV_BLOCK), OB_CONV_BLOCK, 0, (const float *)x->data,
                      (const float *)w->data, (const float *)st->data, pos, seq, (float *)n->data, C, K, T, S,
                      (int)(n->ip[0] != 0)))
        return false;
    return OB_CU_LAUNCH(cx, k_conv_state, ob_cu_blocks(C * S, OB_CONV_BLOCK), OB_CONV_BLOCK, 0, (const float *)x->data,
                        (float *)st->data, pos, seq, C, K, T, S);
}

OB_CU_MARK_BIND(ssm_conv)
