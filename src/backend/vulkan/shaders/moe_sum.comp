#version 450
// MOE_SUM (graph.h): o[i, t] = sum over slots j = 0 .. k-1, in that order, of w_j,t *
// a[i, j, t]; a y F32 [N, k, T], b the MOE_GATE output [2k, T] (its first k: the weights),
// o F32 [N, T]. u[0] N, u[1] k, u[2] T, u[10] workgroups. An invocation per output element, its
// slots in order: a token's sums are the same in any batch.
#include "common.glsl"
layout(local_size_x = 256) in;

void main() {
    const uint N = pc.u[0], k = pc.u[1];
    const uint64_t i = uint64_t(group_id()) * 256 + gl_LocalInvocationID.x, t = i / N;
    if (i >= uint64_t(N) * pc.u[2]) return;
    BF32 w = BF32(pc.b + t * 2 * k * 4), y = BF32(pc.a + (t * k * N + i % N) * 4);
    float s = w.v[0] * y.v[0];
    for (uint j = 1; j < k; j++) s += w.v[j] * y.v[j * N];
    BF32(pc.o).v[uint(i)] = s;
}
