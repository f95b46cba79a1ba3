#version 450
// Activations to int8 for matvec_q8.comp (q8.glsl): a x F32 [K, T] -> o: qx int8 [T][K]
// (K bytes per token), then at o + u[2] (16-aligned) dx vec2 [T][K/32].
// u[0] K (a multiple of 32), u[1] blocks in all (T * K / 32), u[3] 1: x is GLU(a, b) =
// act.glsl's glu of kind u[4] (f[0], f[1]: GLU_SWIGLU_OAI's alpha and limit), also written
// as F32 to e (the GLU node's output).
// One invocation per block; a, b, e 16-aligned.
#include "common.glsl"
#include "act.glsl"
#include "q8.glsl"
layout(local_size_x = 64) in;
layout(buffer_reference, std430, buffer_reference_align = 16) buffer BV4 { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer BU4 { uvec4 v[]; };

void main() {
    uint i = group_id() * 64 + gl_LocalInvocationID.x;
    if (i >= pc.u[1]) return;
    bool glu = pc.u[3] != 0;
    BV4 x = BV4(pc.a + uint64_t(i) * 128);
    vec4 v[8], u[8];
    // every load before any store (a store may alias a later load, which would wait for it)
    for (uint k = 0; k < 8; k++) {
        v[k] = x.v[k];
        if (glu) u[k] = BV4(pc.b + uint64_t(i) * 128).v[k];
    }
    float amax = 0.0;
    for (uint k = 0; k < 8; k++) {
        if (glu) {
            v[k] = glu4(pc.u[4], v[k], u[k], pc.f[0], pc.f[1]);
            BV4(pc.e + uint64_t(i) * 128).v[k] = v[k];
        }
        vec4 a = abs(v[k]);
        amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
    }
    float d = amax / 127.0, id = q8_id(amax);
    uint w[8];
    int s = 0;
    for (uint k = 0; k < 8; k++) {
        ivec4 q = q8_round(v[k], id);
        s += q.x + q.y + q.z + q.w;
        w[k] = q8_pack(q);
    }
    BU4 o = BU4(pc.o + uint64_t(i) * 32);
    o.v[0] = uvec4(w[0], w[1], w[2], w[3]);
    o.v[1] = uvec4(w[4], w[5], w[6], w[7]);
    BQ8D(pc.o + pc.u[2]).v[i] = vec2(d, d * float(s));
}
