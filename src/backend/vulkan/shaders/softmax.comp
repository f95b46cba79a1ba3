#version 450
// SOFTMAX over rows: one workgroup per row. a x F32 [n, rows], o y; u[0] n, u[10] rows.
#include "common.glsl"
layout(local_size_x = 128) in;

void main() {
    uint r = group_id(), n = pc.u[0], tid = gl_LocalInvocationID.x;
    if (r >= pc.u[10]) return;
    BF32 x = BF32(pc.a + uint64_t(r) * n * 4), y = BF32(pc.o + uint64_t(r) * n * 4);
    float m = -1.0 / 0.0;
    for (uint i = tid; i < n; i += 128) m = max(m, x.v[i]);
    m = wg_max(m);
    float s = 0.0;
    for (uint i = tid; i < n; i += 128) s += exp(x.v[i] - m);
    s = wg_sum(s);
    for (uint i = tid; i < n; i += 128) y.v[i] = exp(x.v[i] - m) / s;
}
