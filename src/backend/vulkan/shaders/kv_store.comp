#version 450
// KV_STORE: a x F32 [row, T] -> cache b (type u[2]: F32, F16, BF16, or a block type of
// kvq.glsl, u[7] bytes a block) at cell seq*cps + pos; c pos I32 [T], d seq I32 [T]; o, the
// 1-element ordering token, is never written (no shader reads it: writing it made the graph
// place a barrier wherever the token's byte lay in memory an earlier dispatch of the level
// was still reading).
// u[0] row (a multiple of 32 for block types; plain rows may end in a partial 32-chunk),
// u[1] T, u[3] cells per sequence, u[4] cache cells, u[5] cache row bytes. One invocation
// per 32-chunk of a token's row; u[6] 1 (F32/F16, row % 4 == 0, x and cache 16- and
// 8-aligned): one invocation per 4 elements instead, a vec4 load and one 16- or 8-byte
// store. A token outside the cache is skipped, never written wild.
#include "common.glsl"
#include "store.glsl"
layout(local_size_x = 64) in;

layout(buffer_reference, std430, buffer_reference_align = 16) buffer BV4 { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer BU2 { uvec2 v[]; };

void main() {
    uint idx = group_id() * 64 + gl_LocalInvocationID.x;
    bool wide = pc.u[6] != 0u;
    uint row = pc.u[0], per_row = wide ? row / 4 : (row + 31) / 32;
    uint t = idx / per_row, c = idx % per_row;
    if (t >= pc.u[1]) return;
    int p = BI32(pc.c).v[t], s = BI32(pc.d).v[t];
    vec4 x4 = wide ? BV4(pc.a).v[idx] : vec4(0.0); // x rows are contiguous: element 4 * idx
    uint cps = pc.u[3];
    if (p < 0 || s < 0 || uint(p) >= cps || uint64_t(s) * cps + cps > uint64_t(pc.u[4])) return;
    uint64_t crow = pc.b + (uint64_t(s) * cps + uint64_t(p)) * pc.u[5];
    if (wide) {
        if (pc.u[2] == 0u) BV4(crow).v[c] = x4;
        else BU2(crow).v[c] = uvec2(packHalf2x16(x4.xy), packHalf2x16(x4.zw));
        return;
    }
    uint nvalid = min(32u, row - 32 * c);
    float v[32];
    BF32 x = BF32(pc.a + (uint64_t(t) * row + 32 * c) * 4);
    for (uint j = 0; j < 32; j++) v[j] = j < nvalid ? x.v[j] : 0.0;
    if (kvq_block_type(pc.u[2])) kvq_store(pc.u[2], crow + uint64_t(c) * pc.u[7], v);
    else store_chunk(pc.u[2], crow, c, v, nvalid);
}
