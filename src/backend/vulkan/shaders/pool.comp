#version 450
// POOL: one workgroup per sequence id s; invocations stride over the n elements of a row.
// a x F32 [n, T], b seq I32 [T], c pos I32 [T], o y F32 [n, n_seq].
// u[0] n, u[1] T, u[2] ob_pool_type (1 mean, 2 cls, 3 last), u[3] L2-normalise, u[10] n_seq.
// The batch's seq/pos are scanned by every invocation alike (T integer loads, small next to
// the encoder that produced x), so the pick is uniform and needs no reduction.
#include "common.glsl"
#define WG 128
layout(local_size_x = WG) in;

void main() {
    uint s = group_id(), n = pc.u[0], T = pc.u[1], type = pc.u[2], tid = gl_LocalInvocationID.x;
    if (s >= pc.u[10]) return; // uniform per workgroup, so wg_sum's barriers stay legal
    BI32 seq = BI32(pc.b), pos = BI32(pc.c);
    BF32 y = BF32(pc.o + uint64_t(s) * n * 4);
    // CLS: lowest position of the sequence, LAST: highest; ties keep the earliest token,
    // as the CPU reference does.
    uint count = 0u;
    int pick = -1, pp = 0;
    for (uint t = 0u; t < T; t++) {
        if (seq.v[t] != int(s)) continue;
        count++;
        int p = pos.v[t];
        if (pick < 0 || (type == 2u ? p < pp : p > pp)) { pick = int(t); pp = p; }
    }
    float ss = 0.0;
    for (uint i = tid; i < n; i += WG) {
        float v = 0.0;
        if (type == 1u) {
            for (uint t = 0u; t < T; t++)
                if (seq.v[t] == int(s)) v += BF32(pc.a + uint64_t(t) * n * 4).v[i];
            if (count > 0u) v /= float(count);
        } else if (pick >= 0) {
            v = BF32(pc.a + uint64_t(pick) * n * 4).v[i];
        }
        y.v[i] = v;
        ss += v * v;
    }
    if (pc.u[3] == 0u) return;
    // sentence-transformers' Normalize: x / max(|x|, 1e-12). Each invocation rescales the
    // elements it wrote itself, so no barrier is needed between the two passes.
    float inv = 1.0 / max(sqrt(wg_sum(ss)), 1e-12);
    for (uint i = tid; i < n; i += WG) y.v[i] *= inv;
}
