#version 450
// RMS_NORM then ROPE of each head, in one dispatch (the q/k norms of qwen3-style
// attention): one workgroup per row (head), the normalised row kept in shared memory
// so each element can read its rotation partner. The norm's own output is never written:
// the backend fuses only when the rope is its one reader.
// a x F32 [hd, n_head, T], b norm weight [hd] (u[4]), c pos I32 [T], o y F32 like x;
// u[0] hd (<= MAXD * WG), u[1] n_head, u[2] n_rot, u[3] rope mode (0 adjacent pairs,
// 2 NeoX halves), u[10] rows; f[0] eps, f[2] freq_scale, f[1] + f[3] the ratio
// base^(-2/n_rot) as a float pair (common.glsl: rope_cos_sin); p the frequency factors
// F32 [n_rot/2] (0: none), f[4] mscale.
// u[5] 1: the KV_STORE after the rope (k of a cache) is fused in: row r = (token t, head h)
// is also written to cache d (type u[6]: 0 F32, 1 F16, 8 Q8_0; hd a multiple of 32 for
// Q8_0) at cell seq[t] * cps + pos[t], elements h * hd .., with e seq I32 [T], u[7] cells
// per sequence cps, u[8] cache cells, u[9] cache row bytes; as KV_STORE, a token outside
// the cache is skipped.
#include "common.glsl"
#include "store.glsl"
#define WG 128
#define MAXD 4
layout(local_size_x = WG) in;

shared float rs[MAXD * WG];
shared float ys[MAXD * WG];

void main() {
    uint r = group_id(), hd = pc.u[0], tid = gl_LocalInvocationID.x;
    if (r >= pc.u[10]) return; // uniform per workgroup
    BF32 x = BF32(pc.a + uint64_t(r) * hd * 4), y = BF32(pc.o + uint64_t(r) * hd * 4);
    // the position (and for the fused store the sequence) and the norm weights load with
    // x, not one round trip each after the reduction
    uint t = r / pc.u[1];
    int ip = BI32(pc.c).v[t], sq = pc.u[5] != 0u ? BI32(pc.e).v[t] : 0;
    float v[MAXD], wn[MAXD], s = 0.0;
    for (uint k = 0; k < MAXD; k++) {
        uint e = tid + k * WG;
        v[k] = e < hd ? x.v[e] : 0.0;
        wn[k] = e < hd && pc.u[4] != 0u ? BF32(pc.b).v[e] : 1.0;
        s += v[k] * v[k];
    }
    float scale = inversesqrt(wg_sum(s) / float(hd) + pc.f[0]);
    for (uint k = 0; k < MAXD; k++) {
        uint e = tid + k * WG;
        if (e < hd) rs[e] = v[k] * scale * wn[k];
    }
    barrier();
    uint half_rot = pc.u[2] / 2;
    bool neox = pc.u[3] == 2u;
    float p = float(ip);
    for (uint k = 0; k < MAXD; k++) {
        uint j = tid + k * WG;
        if (j >= hd) break;
        float o;
        if (j >= 2 * half_rot) {
            o = rs[j];
        } else {
            uint i = neox ? j % half_rot : j / 2;
            bool first = neox ? j < half_rot : (j % 2u) == 0u;
            uint ia = neox ? i : 2 * i, ib = neox ? i + half_rot : 2 * i + 1;
            float cs, sn;
            // theta = p * fs * base^(-2i/n_rot) / ff[i]
            rope_cos_sin(p, i, pc.f[2], pc.p, pc.f[4], pc.f[1], pc.f[3], cs, sn);
            float x0 = rs[ia], x1 = rs[ib];
            o = first ? x0 * cs - x1 * sn : x0 * sn + x1 * cs;
        }
        // with the store fused, the store is the rope output's one reader: not written
        // (it may lie over rows of x that other workgroups have yet to read)
        if (pc.u[5] == 0u) y.v[j] = o;
        ys[j] = o;
    }
    if (pc.u[5] == 0u) return;
    // the fused KV_STORE
    uint cps = pc.u[7], ty = pc.u[6], h = r % pc.u[1];
    if (ip < 0 || sq < 0 || uint(ip) >= cps || uint64_t(sq) * cps + cps > uint64_t(pc.u[8])) return; // uniform
    uint64_t row = pc.d + (uint64_t(sq) * cps + uint64_t(ip)) * pc.u[9];
    if (ty != 8u) {
        for (uint k = 0; k < MAXD; k++) {
            uint j = tid + k * WG;
            if (j >= hd) break;
            if (ty == 0u) BF32(row).v[h * hd + j] = ys[j];
            else BU16(row).v[h * hd + j] = uint16_t(packHalf2x16(vec2(ys[j], 0.0)) & 0xffffu);
        }
        return;
    }
    barrier(); // Q8_0: whole 32-element blocks from ys
    if (tid < hd / 32) {
        float v[32];
        for (uint k = 0; k < 32; k++) v[k] = ys[32 * tid + k];
        store_chunk(8u, row, h * hd / 32 + tid, v, 32u);
    }
}
