#version 450
// RMS_NORM then ROPE of each head, in one dispatch (the q/k norms of qwen3-style
// attention): one workgroup per row (head), the normalised row kept in shared memory
// so each element can read its rotation partner. The norm's own output is never written:
// the backend fuses only when the rope is its one reader.
// a x F32 [hd, n_head, T], b norm weight [hd] (u[4]), c pos I32 [T], o y F32 like x;
// u[0] hd (<= MAXD * WG), u[1] n_head, u[2] n_rot, u[3] rope mode (0 adjacent pairs,
// 2 NeoX halves), u[10] rows; f[0] eps, f[2] freq_scale, f[1] + f[3] the ratio
// base^(-2/n_rot) as a float pair (common.glsl: rope_cos_sin).
#include "common.glsl"
#define WG 128
#define MAXD 4
layout(local_size_x = WG) in;

shared float rs[MAXD * WG];

void main() {
    uint r = group_id(), hd = pc.u[0], tid = gl_LocalInvocationID.x;
    if (r >= pc.u[10]) return; // uniform per workgroup
    BF32 x = BF32(pc.a + uint64_t(r) * hd * 4), y = BF32(pc.o + uint64_t(r) * hd * 4);
    float v[MAXD], s = 0.0;
    for (uint k = 0; k < MAXD; k++) {
        uint e = tid + k * WG;
        v[k] = e < hd ? x.v[e] : 0.0;
        s += v[k] * v[k];
    }
    float scale = inversesqrt(wg_sum(s) / float(hd) + pc.f[0]);
    for (uint k = 0; k < MAXD; k++) {
        uint e = tid + k * WG;
        if (e < hd) rs[e] = v[k] * scale * (pc.u[4] != 0u ? BF32(pc.b).v[e] : 1.0);
    }
    barrier();
    uint half_rot = pc.u[2] / 2;
    bool neox = pc.u[3] == 2u;
    float p = float(BI32(pc.c).v[r / pc.u[1]]);
    for (uint k = 0; k < MAXD; k++) {
        uint j = tid + k * WG;
        if (j >= hd) break;
        if (j >= 2 * half_rot) { y.v[j] = rs[j]; continue; }
        uint i = neox ? j % half_rot : j / 2;
        bool first = neox ? j < half_rot : (j % 2u) == 0u;
        uint ia = neox ? i : 2 * i, ib = neox ? i + half_rot : 2 * i + 1;
        float cs, sn;
        rope_cos_sin(p, i, pc.f[2], pc.f[1], pc.f[3], cs, sn); // theta = p * fs * base^(-2i/n_rot)
        float x0 = rs[ia], x1 = rs[ib];
        y.v[j] = first ? x0 * cs - x1 * sn : x0 * sn + x1 * cs;
    }
}
