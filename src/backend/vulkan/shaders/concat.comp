#version 450
// CONCAT and SLICE (graph.h): pieces of rows, copied as 32-bit words, so NaN payloads,
// infinities and -0 arrive as they are (the CPU copies floats the same way).
// CONCAT: o [n, rows] row r = a's row r [na], then b's row r [n - na]. SLICE: o [n, rows]
// row r = elements [off, off + n) of a's row r [na].
// u[0] n (the output's row), u[1] elements of o, u[2] na (a's row), u[3] SLICE's offset,
// u[4] 1: CONCAT, 0: SLICE; u[10] workgroups. An invocation per output element.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(buffer_reference, std430, buffer_reference_align = 4) buffer BWord { uint v[]; };

void main() {
    const uint i = group_id() * 256 + gl_LocalInvocationID.x;
    if (i >= pc.u[1]) return;
    const uint n = pc.u[0], na = pc.u[2], r = i / n, e = i % n;
    uint w;
    if (pc.u[4] != 0u)
        w = e < na ? BWord(pc.a + (uint64_t(r) * na + e) * 4).v[0] : BWord(pc.b + (uint64_t(r) * (n - na) + e - na) * 4).v[0];
    else
        w = BWord(pc.a + (uint64_t(r) * na + pc.u[3] + e) * 4).v[0];
    BWord(pc.o).v[i] = w;
}
