#version 450
// ADD_ID (graph.h): o[:, j, t] = a[:, j, t] + b[:, id], id slot j's expert in token t's gate
// row: a y F32 [N, k, T] (a MATMUL_ID output), b the biases F32 [N, E], c the MOE_GATE output
// [2k, T] (k weights, then k ids as floats), o F32 [N, k, T] (may be a itself: each element
// is read, then written, by one invocation). A slot whose id is not an integer in [0, E)
// passes y unchanged. u[0] N, u[1] k, u[2] E, u[3] elements in all, u[10] workgroups. An
// invocation per element and one float add, as the CPU's: a token's rows never depend on
// its batch.
#include "common.glsl"
layout(local_size_x = 256) in;

void main() {
    const uint N = pc.u[0], k = pc.u[1], E = pc.u[2];
    const uint i = group_id() * 256 + gl_LocalInvocationID.x;
    if (i >= pc.u[3]) return;
    const uint r = i / N, t = r / k;
    const float v = BF32(pc.c + (uint64_t(t) * 2 * k + k + r % k) * 4).v[0];
    float y = BF32(pc.a).v[i];
    if (v >= 0.0 && v < float(E) && v == floor(v)) // NaN never; E <= 2^24 is exact
        y += BF32(pc.b + (uint64_t(uint(v)) * N + i % N) * 4).v[0];
    BF32(pc.o).v[i] = y;
}
