#version 450
// RMS_NORM and LAYER_NORM: one workgroup per row.
// a x F32 [n, rows], b weight [n] (u[2]), c bias [n] (u[3]), o y F32; u[0] n, u[1] 1 = layer; f[0] eps.
#include "common.glsl"
layout(local_size_x = 128) in;

void main() {
    uint r = group_id(), n = pc.u[0], tid = gl_LocalInvocationID.x;
    if (r >= pc.u[10]) return; // u[10] rows; uniform per workgroup, so barriers stay legal
    BF32 x = BF32(pc.a + uint64_t(r) * n * 4), y = BF32(pc.o + uint64_t(r) * n * 4);
    float mean = 0.0;
    if (pc.u[1] != 0) {
        float s = 0.0;
        for (uint i = tid; i < n; i += 128) s += x.v[i];
        mean = wg_sum(s) / float(n);
    }
    float s = 0.0;
    for (uint i = tid; i < n; i += 128) { float d = x.v[i] - mean; s += d * d; }
    float scale = inversesqrt(wg_sum(s) / float(n) + pc.f[0]);
    for (uint i = tid; i < n; i += 128) {
        float v = (x.v[i] - mean) * scale;
        if (pc.u[2] != 0) v *= BF32(pc.b).v[i];
        if (pc.u[3] != 0) v += BF32(pc.c).v[i];
        y.v[i] = v;
    }
}
