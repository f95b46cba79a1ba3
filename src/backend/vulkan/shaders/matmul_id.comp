#version 450
// MATMUL_ID (graph.h): y[:, j, t] = W[:, :, id] x for slot j of token t, id the slot's
// expert in the gate: W [K, N, E] of TYPE, b x F32 [K, T] (the token's slots share its row)
// or [K, k, T] (a row per slot), c the MOE_GATE output [2k, T] (k weights, then k ids as
// floats; 0: none, slot j takes matrix j, as MLA's one matrix per head), o y F32 [N, k, T].
// A slot whose id is not an integer in [0, E) gets zeros.
// u[0] K, u[1] N, u[2] E | 1 << 31 where x is shared by a token's slots, u[3] W row bytes,
// u[4] rows per workgroup, u[5] 0 (x not staged), u[6] rows per subgroup on the streaming
// path (0: the chunk path), u[7] 0 (no split-K), u[8] workgroups per slot (row blocks),
// u[9] k, u[10] workgroups.
//
// matvec.glsl's one-token kernels (MATMUL_ID): a workgroup per (row block, slot), which
// reads its slot's id from the gate, so a decode step reads only the chosen experts' rows
// (an expert chosen by several tokens of a batch is read once per slot, from the caches
// where they hold it). Every slot is a batch of one on one pipeline whatever T is, so a
// token's result never depends on its batch (vk->det holds with no plan of its own).
#define MATMUL_ID
#include "matvec.glsl"

// The workgroup's slot (consecutive workgroups take the row blocks of one slot): g becomes
// its row block; false, with its rows of y zeroed, when the id names no expert.
bool mv_slot(inout uint g) {
    const uint N = pc.u[1], RW = pc.u[4], k = pc.u[9], E = pc.u[2] & 0x7fffffffu;
    const uint p = g / pc.u[8], t = p / k;
    g %= pc.u[8];
    const float v = pc.c == 0ul ? float(p % k) : BF32(pc.c + (uint64_t(t) * 2 * k + k + p % k) * 4).v[0];
    if (!(v >= 0.0 && v < float(E) && v == floor(v))) { // NaN included; E <= 2^24 is exact
        for (uint r = gl_LocalInvocationID.x; r < RW; r += WG)
            if (g * RW + r < N) BF32(pc.o).v[p * N + g * RW + r] = 0.0;
        return false;
    }
    mv_w = pc.a + uint64_t(uint(v)) * N * pc.u[3];
    mv_x = pc.b + uint64_t((pc.u[2] >> 31) != 0u ? t : p) * pc.u[0] * 4;
    mv_o = pc.o + uint64_t(p) * N * 4;
    return true;
}
