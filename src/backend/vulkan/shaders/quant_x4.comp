#version 450
// quant_x.comp's job with 4 elements per invocation, the 8 invocations of a 32-element
// block meeting by subgroup shuffles (q8.glsl: q8_vec4): 8x the invocations, for the
// small activations of decode. Its own module: shuffles are a capability a device may
// lack. Same push constants as quant_x.comp (u[1] here: vec4s in all, T * K / 4).
#extension GL_KHR_shader_subgroup_shuffle : require
#define Q8_SHUFFLE
#include "common.glsl"
#include "act.glsl"
#include "q8.glsl"
layout(local_size_x = 64) in;
layout(buffer_reference, std430, buffer_reference_align = 16) buffer BV4 { vec4 v[]; };

void main() {
    uint i = group_id() * 64 + gl_LocalInvocationID.x;
    if (group_id() >= pc.u[10]) return; // uniform per workgroup
    bool live = i < pc.u[1];
    vec4 y = vec4(0.0);
    if (live) {
        y = BV4(pc.a).v[i];
        if (pc.u[3] != 0) {
            vec4 u = BV4(pc.b).v[i];
            y = glu4(pc.u[4], y, u, pc.f[0], pc.f[1]);
            BV4(pc.e).v[i] = y;
        }
    }
    q8_vec4(y, live, i, pc.o, pc.o + pc.u[2]);
}
