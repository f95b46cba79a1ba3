#version 450
// MATMUL y = W x: a W [K, N] of TYPE, b x F32 [K, T], o y F32 [N, T].
// u[0] K, u[1] N, u[2] T, u[3] W row bytes, u[10] workgroups in use.
// One workgroup per (row n, tile of TT tokens): each weight chunk is decoded once and
// dotted with every token of the tile, so prefill re-reads W T/TT times, decode once.
// Partial sums are reduced with subgroupAdd and one shared slot per subgroup.
#include "common.glsl"
#include "dequant.glsl"
#define WG 128
#define TT 8
layout(local_size_x = WG) in;

shared float part[TT * OB_MAX_SG];

void main() {
    iq_init(gl_LocalInvocationID.x, WG);
    uint g = group_id();
    if (g >= pc.u[10]) return;
    uint K = pc.u[0], N = pc.u[1], T = pc.u[2], tid = gl_LocalInvocationID.x;
    uint n = g % N, t0 = (g / N) * TT, nt = min(TT, T - t0);
    uint64_t row = pc.a + uint64_t(n) * pc.u[3];
    float acc[TT];
    for (uint t = 0; t < TT; t++) acc[t] = 0.0;
    if (PLAIN) {
        for (uint i = tid; i < K; i += WG) {
            float w = dq_elem(row, i);
            for (uint t = 0; t < nt; t++) acc[t] += w * BF32(pc.b).v[(t0 + t) * K + i];
        }
    } else {
        float v[32];
        for (uint c = tid; c < K / 32; c += WG) {
            dq_chunk(row, c, v);
            for (uint t = 0; t < nt; t++) {
                BF32 x = BF32(pc.b + (uint64_t(t0 + t) * K + 32 * c) * 4);
                float s = 0.0;
                for (uint j = 0; j < 32; j++) s += v[j] * x.v[j];
                acc[t] += s;
            }
        }
    }
    for (uint t = 0; t < TT; t++) {
        float s = subgroupAdd(acc[t]);
        if (subgroupElect()) part[t * OB_MAX_SG + gl_SubgroupID] = s;
    }
    barrier();
    if (tid < nt) {
        float s = 0.0;
        for (uint i = 0; i < gl_NumSubgroups; i++) s += part[tid * OB_MAX_SG + i];
        BF32(pc.o).v[(t0 + tid) * N + n] = s;
    }
}
