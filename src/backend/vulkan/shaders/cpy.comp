#version 450
// CPY: a src of TYPE (u[0] elements) -> o dst of type u[1] (F32, F16, BF16, Q8_0).
// One invocation per 32-element chunk of the flat tensor (rows are whole blocks, so the
// chunks of consecutive rows are consecutive in memory).
#include "common.glsl"
#include "dequant.glsl"
#include "store.glsl"
layout(local_size_x = 64) in;

void main() {
    iq_init(gl_LocalInvocationID.x, 64);
    uint c = group_id() * 64 + gl_LocalInvocationID.x, n = pc.u[0];
    if (32 * c >= n) return;
    uint nvalid = min(32u, n - 32 * c);
    float v[32];
    if (PLAIN) {
        for (uint j = 0; j < 32; j++) v[j] = j < nvalid ? dq_elem(pc.a, 32 * c + j) : 0.0;
    } else {
        dq_chunk(pc.a, c, v);
    }
    store_chunk(pc.u[1], pc.o, c, v, nvalid);
}
