#version 450
// ADD, MUL, SCALE, ACT, GLU: one invocation per output element.
// a src0, b src1 (ADD/MUL: broadcast over u[2] elements; GLU: up), o dst;
// u[0] n, u[1] op (0 add, 1 mul, 2 scale, 3 act, 4 glu), u[3] ob_act (0 silu, 1 gelu tanh, 2 gelu erf, 3 relu, 4 tanh;
// GLU also act.glsl's GLU_SWIGLU_OAI); f[0] scale (GLU_SWIGLU_OAI: alpha, f[1] its limit).
#include "common.glsl"
#include "act.glsl"
layout(local_size_x = 256) in;

void main() {
    uint i = group_id() * 256 + gl_LocalInvocationID.x;
    if (i >= pc.u[0]) return;
    float x = BF32(pc.a).v[i], y;
    uint op = pc.u[1];
    if (op == 0u) y = x + BF32(pc.b).v[i % pc.u[2]];
    else if (op == 1u) y = x * BF32(pc.b).v[i % pc.u[2]];
    else if (op == 2u) y = x * pc.f[0];
    else if (op == 3u) y = act(pc.u[3], x);
    else y = glu(pc.u[3], x, BF32(pc.b).v[i], pc.f[0], pc.f[1]);
    BF32(pc.o).v[i] = y;
}
