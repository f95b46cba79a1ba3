#version 450
// SSM_CONV (graph.h): the depthwise causal convolution of a recurrent layer (LFM2's short conv,
// the conv before Qwen3.5's delta rule) with its rolling state, as the CPU's op_ssm_conv.c.
// a x F32 [C, T], b taps F32 [K, C], c state F32 [(K-1) C, S], d pos I32 [T], e seq I32 [T],
// o y F32 [C, T]. u[0] C, u[1] K, u[2] T, u[3] S, u[4] SiLU (1) or none (0), u[5] the pass:
//  0: an invocation per (channel, token): its K inputs, found by walking back over the earlier
//     tokens of its sequence in the batch, then the sequence's state row as it was before the
//     node, stopping at a token at position 0 (zeros before it); taps summed in order 0..K-1.
//  1: an invocation per (channel, state row), after pass 0 (a barrier between): the row's new
//     last K-1 inputs from its sequence's last token in the batch, written in place from slot
//     0 up; where slot K-2-j's value comes from the old state it is slot K-1-j+m, above every
//     slot written so far, so nothing is read after it was written.
// A token's output is computed the same way in any batch (batch invariant); every walk stays
// inside [0, T), and a token whose sequence has no state row gets zeros.
#include "common.glsl"
layout(local_size_x = 256) in;

// From token t of sequence s, up to `steps` earlier tokens of s, stopping at one at position
// 0: the earliest reached; m the steps taken.
uint conv_back(uint t, int s, uint steps, out uint m) {
    BI32 pos = BI32(pc.d), seq = BI32(pc.e);
    uint cur = t;
    m = 0;
    while (m < steps && pos.v[cur] != 0) {
        int u = int(cur) - 1;
        while (u >= 0 && seq.v[u] != s) u--;
        if (u < 0) break;
        cur = uint(u);
        m++;
    }
    return cur;
}

// The next token of s after u (one exists: conv_back came from it), never past T - 1.
uint conv_next(uint u, int s) {
    BI32 seq = BI32(pc.e);
    const uint T = pc.u[2];
    for (u++; u < T - 1 && seq.v[u] != s; u++) {
    }
    return u;
}

void main() {
    const uint C = pc.u[0], K = pc.u[1], T = pc.u[2], S = pc.u[3];
    const uint64_t i = uint64_t(group_id()) * 256 + gl_LocalInvocationID.x;
    BF32 x = BF32(pc.a), st = BF32(pc.c);
    BI32 pos = BI32(pc.d), seq = BI32(pc.e);
    if (pc.u[5] == 0u) {
        if (i >= uint64_t(C) * T) return;
        const uint c = uint(i % C), t = uint(i / C);
        const int s = seq.v[t];
        if (s < 0 || s >= int(S)) {
            BF32(pc.o).v[uint(i)] = 0.0;
            return;
        }
        uint m;
        uint u = conv_back(t, s, K - 1, m);
        const bool zero = pos.v[u] == 0;
        const uint64_t row = uint64_t(s) * (K - 1) * C;
        BF32 w = BF32(pc.b + uint64_t(c) * K * 4);
        float acc = 0.0;
        for (uint k = 0; k < K; k++) {
            const uint j = K - 1 - k; // tap k takes the input j tokens back
            float v;
            if (j > m) {
                v = zero ? 0.0 : st.v[uint(row + uint64_t(K - 1 - (j - m)) * C + c)];
            } else {
                v = x.v[uint(uint64_t(u) * C + c)];
                if (j > 0u) u = conv_next(u, s);
            }
            acc += w.v[k] * v;
        }
        BF32(pc.o).v[uint(i)] = pc.u[4] != 0u ? acc / (1.0 + exp(-acc)) : acc;
        return;
    }
    if (i >= uint64_t(C) * S) return;
    const uint c = uint(i % C);
    const int s = int(i / C);
    int last = int(T) - 1;
    while (last >= 0 && seq.v[last] != s) last--;
    if (last < 0) return; // no token of this sequence: its state stays
    uint m;
    uint u = conv_back(uint(last), s, K - 2, m);
    const bool zero = pos.v[u] == 0;
    const uint64_t row = uint64_t(s) * (K - 1) * C;
    for (int j = int(K) - 2; j >= 0; j--) {
        float v;
        if (uint(j) > m) {
            v = zero ? 0.0 : st.v[uint(row + uint64_t(K - 1 - (uint(j) - m)) * C + c)];
        } else {
            v = x.v[uint(uint64_t(u) * C + c)];
            if (j > 0) u = conv_next(u, s);
        }
        st.v[uint(row + uint64_t(K - 2 - uint(j)) * C + c)] = v;
    }
}
