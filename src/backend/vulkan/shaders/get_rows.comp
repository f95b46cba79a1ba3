#version 450
// GET_ROWS: a table [ne0, rows] of TYPE, b ids I32 [T], o F32 [ne0, T].
// u[0] ne0, u[1] T, u[2] table row bytes, u[3] table rows. Plain types: one invocation per
// element; block types: one per 32-element chunk. An id out of range yields a zero row.
#include "common.glsl"
#include "dequant.glsl"
layout(local_size_x = 256) in;

void main() {
    iq_init(gl_LocalInvocationID.x, 256);
    uint idx = group_id() * 256 + gl_LocalInvocationID.x;
    uint ne0 = pc.u[0], per_row = PLAIN ? ne0 : ne0 / 32;
    uint t = idx / per_row, k = idx % per_row;
    if (t >= pc.u[1]) return;
    int id = BI32(pc.b).v[t];
    bool ok = id >= 0 && uint(id) < pc.u[3];
    uint64_t row = pc.a + uint64_t(ok ? id : 0) * pc.u[2];
    BF32 y = BF32(pc.o + uint64_t(t) * ne0 * 4);
    if (PLAIN) {
        y.v[k] = ok ? dq_elem(row, k) : 0.0;
    } else {
        float v[32];
        dq_chunk(row, k, v);
        for (uint j = 0; j < 32; j++) y.v[32 * k + j] = ok ? v[j] : 0.0;
    }
}
