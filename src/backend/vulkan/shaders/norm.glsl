// RMS_NORM / LAYER_NORM: the body of norm.comp and norm_q8.comp.
// RMS_NORM and LAYER_NORM: one workgroup per row, optionally after a residual add.
// a x F32 [n, rows], b weight [n] (u[2]), c bias [n] (u[3]), o y F32; u[0] n, u[1] 1 = layer;
// f[0] eps. u[4] 1: fused ADD before the norm: the row is a + d (d F32 [n, rows]), and
// that sum is written to e (the ADD node's output) as well.
//
// A row of up to WG * 4 * NV elements (n % 4 == 0, every address 16-aligned: u[5] 1) is
// loaded once into registers as vec4, so the statistics and the output take one round
// trip to memory instead of one per pass and per loop step; other rows loop over x.
// u[6] 1 (RMS, register path, n % 32 == 0, subgroups of a multiple of 8 with shuffles):
// the output is also quantized for matvec_q8.comp (q8.glsl): qx at c + row * n, dx at
// c + u[7] + row * n / 4.
// That variant is its own module (norm_q8.comp defines NORM_Q8): shuffles are a
// capability a device may lack, and a driver may reject a module that declares one.
// u[8] G > 1 (RMS, register path, one row, no fused ADD): the row's sum of squares comes
// as u[9] partial sums at d (the matmul before wrote them with the row), so G workgroups
// each normalise 1 / G of the row (n / 4 a multiple of 8 G: whole 32-element blocks). One
// workgroup per row was the longest small dispatch of a decode step
// (bench/NOTES-vulkan-3-11.md: Session 11).
#ifdef NORM_Q8
#extension GL_KHR_shader_subgroup_shuffle : require
#define Q8_SHUFFLE
#endif
#include "common.glsl"
#include "q8.glsl"
#define WG 256
#define NV 8
layout(local_size_x = WG) in;
layout(buffer_reference, std430, buffer_reference_align = 16) buffer BV4 { vec4 v[]; };

void main() {
    uint r = group_id(), n = pc.u[0], tid = gl_LocalInvocationID.x;
    if (r >= pc.u[10]) return; // u[10] rows (or parts); uniform per workgroup, so barriers stay legal
    if (pc.u[8] > 1u) {
        uint per = n / 4 / pc.u[8], lo = r * per; // this workgroup's vec4s of the one row
        float s = 0.0;
        vec4 v[NV], wv[NV];
        for (uint k = 0; k < NV; k++) {
            uint j = tid + k * WG;
            v[k] = j < per ? BV4(pc.a).v[lo + j] : vec4(0.0);
            wv[k] = j < per && pc.u[2] != 0 ? BV4(pc.b).v[lo + j] : vec4(1.0);
        }
        for (uint i = tid; i < pc.u[9]; i += WG) s += BF32(pc.d).v[i];
        float scale = inversesqrt(wg_sum(s) / float(n) + pc.f[0]);
        for (uint k = 0; k < NV; k++) {
            if (k * WG >= per) break; // uniform
            uint j = tid + k * WG;
            bool live = j < per;
            vec4 y = v[k] * scale * wv[k];
            if (live) BV4(pc.o).v[lo + j] = y;
#ifdef NORM_Q8
            if (pc.u[6] != 0) q8_vec4(y, live, lo + j, pc.c, pc.c + pc.u[7]);
#endif
        }
        return;
    }
    uint64_t off = uint64_t(r) * n * 4;
    bool layer = pc.u[1] != 0, has_w = pc.u[2] != 0, has_b = pc.u[3] != 0, fused = pc.u[4] != 0;
    if (pc.u[5] != 0) {
        uint n4 = n / 4;
        vec4 v[NV], wv[NV];
        float s = 0.0;
        // Every load first, the weights too: a store through a buffer reference may alias
        // a later load, which then waits for it (one memory round trip per vec4).
        for (uint k = 0; k < NV; k++) {
            uint i = tid + k * WG;
            v[k] = vec4(0.0);
            wv[k] = vec4(1.0);
            if (i < n4) {
                v[k] = BV4(pc.a + off).v[i];
                if (fused) v[k] += BV4(pc.d + off).v[i];
                if (has_w) wv[k] = BV4(pc.b).v[i];
            }
        }
        for (uint k = 0; k < NV; k++) {
            uint i = tid + k * WG;
            if (i < n4) {
                if (fused) BV4(pc.e + off).v[i] = v[k];
                s += dot(v[k], vec4(1.0));
            }
        }
        float mean = layer ? wg_sum(s) / float(n) : 0.0;
        float q = 0.0;
        for (uint k = 0; k < NV; k++) {
            vec4 dv = v[k] - mean;
            if (tid + k * WG < n4) q += dot(dv, dv);
        }
        float scale = inversesqrt(wg_sum(q) / float(n) + pc.f[0]);
        bool q8 = pc.u[6] != 0;
        for (uint k = 0; k < NV; k++) {
            if (k * WG >= n4) break; // uniform
            uint i = tid + k * WG;
            bool live = i < n4;
            vec4 y = (v[k] - mean) * scale * wv[k];
            if (live) {
                if (has_b) y += BV4(pc.c).v[i];
                BV4(pc.o + off).v[i] = y;
            }
#ifdef NORM_Q8
            if (q8) q8_vec4(y, live, i, pc.c + uint64_t(r) * n, pc.c + pc.u[7] + uint64_t(r) * (n / 4));
#endif
        }
        return;
    }
    BF32 x = BF32(pc.a + off), x2 = BF32(pc.d + off), y = BF32(pc.o + off);
    float mean = 0.0;
    if (layer) {
        float s = 0.0;
        for (uint i = tid; i < n; i += WG) s += x.v[i] + (fused ? x2.v[i] : 0.0);
        mean = wg_sum(s) / float(n);
    }
    float s = 0.0;
    for (uint i = tid; i < n; i += WG) {
        float xi = x.v[i] + (fused ? x2.v[i] : 0.0);
        if (fused) BF32(pc.e + off).v[i] = xi;
        float d = xi - mean;
        s += d * d;
    }
    float scale = inversesqrt(wg_sum(s) / float(n) + pc.f[0]);
    for (uint i = tid; i < n; i += WG) {
        // the sum as this invocation wrote it: the ADD's output may lie over an addend
        float v = ((fused ? BF32(pc.e + off).v[i] : x.v[i]) - mean) * scale;
        if (has_w) v *= BF32(pc.b).v[i];
        if (has_b) v += BF32(pc.c).v[i];
        y.v[i] = v;
    }
}
