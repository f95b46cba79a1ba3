#version 450
// ROPE: one invocation per (row, element of the row's first half-dim range).
// a x F32 [hd, n_head, T], b pos I32 [T], o y; u[0] hd, u[1] n_head, u[2] n_rot,
// u[3] mode (0 adjacent pairs, 2 NeoX halves), u[4] rows; f[1] freq_scale, f[0] + f[2] the
// ratio base^(-2/n_rot) as a float pair (common.glsl: rope_cos_sin); p the frequency
// factors F32 [n_rot/2] (0: none), f[4] mscale.
// Each invocation owns element j of its row: it writes j (and its partner if j is a
// pair's first element); elements past n_rot are copied.
#include "common.glsl"
layout(local_size_x = 256) in;

void main() {
    uint idx = group_id() * 256 + gl_LocalInvocationID.x;
    uint hd = pc.u[0], half_rot = pc.u[2] / 2;
    uint r = idx / hd, j = idx % hd;
    if (r >= pc.u[4]) return;
    BF32 x = BF32(pc.a + uint64_t(r) * hd * 4), y = BF32(pc.o + uint64_t(r) * hd * 4);
    if (j >= 2 * half_rot) { y.v[j] = x.v[j]; return; }
    bool neox = pc.u[3] == 2u;
    uint i = neox ? j % half_rot : j / 2;
    bool first = neox ? j < half_rot : (j % 2u) == 0u;
    uint a = neox ? i : 2 * i, b = neox ? i + half_rot : 2 * i + 1;
    float p = float(BI32(pc.b).v[r / pc.u[1]]);
    float cs, sn;
    // theta = p * fs * base^(-2i/n_rot) / ff[i]
    rope_cos_sin(p, i, pc.f[1], pc.p, pc.f[4], pc.f[0], pc.f[2], cs, sn);
    float x0 = x.v[a], x1 = x.v[b];
    y.v[j] = first ? x0 * cs - x1 * sn : x0 * sn + x1 * cs;
}
