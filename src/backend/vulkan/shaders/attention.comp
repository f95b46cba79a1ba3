#version 450
// ATTENTION (flash style): one workgroup per (token t, query head h); cells are visited in
// tiles of WG, one cell per invocation for the logit, then every invocation accumulates
// its own output dimensions over the tile with an online softmax (running max and sum).
// a q F32 [hd, H, T], b K cache [hd*n_kv, cells], c V cache [sv*n_kv, cells] (F32, F16,
// BF16 or a block type of kvq.glsl; it may be the K cache itself, sv = hd, as MLA's), d pos I32 [T], e seq I32 [T], o y F32
// [dv*H, T]: kv head j's value is elements [j*sv, j*sv + dv) of a V row (graph.h), p the
// attention sinks F32 [H] (0: none; attn.glsl's attn_inv).
// u[0] hd | dv << 16, u[1] H | n_kv << 16, u[2] T, u[4] cells per seq, u[5] window, u[6] bit 0
// causal, bit 1 merge pass, bit 2 merge by the last split, bits 8.. splits S; u[7] K type |
// V type << 8 | a K block's bytes << 16 | a V block's << 24, u[9] cache cells, u[10] workgroups; f[0] scale, f[1] soft-cap, f[2] ALiBi
// max bias (0 = none; slopes as ob_alibi_slope in src/graph/graph.h), f[4] sv (its bits).
// hd <= MAXQ, dv <= MAXD * WG.
//
// Decode has one (t, h) per head, too few workgroups to fill a GPU, so with S > 1 the
// cells of each (t, h) are split over S workgroups (split sp takes tiles sp, sp + S, ...):
// each writes its running max m, sum l and unnormalised output to o = partials F32
// [dv + 2, S, H, T], and a merge pass (a = partials, o = y) rescales them to one max.
// With bit 2 there is no merge pass: the partials go to u[3] | u[8] << 32 (after the
// TICKET_BYTES of uint tickets there, one per (t, h), zero between dispatches; T * H <=
// 1024), o is y, and the split that finishes last
// (it draws ticket S - 1) merges, then puts the ticket back to 0. Its partials are written
// and read coherent (L2), after a device-scope memory barrier.
// Bit 3 (S = 1, dv % 32 == 0): y is also written as int8 for matvec_q8.comp (q8.glsl) at
// u[3] | u[8] << 32: qx, then dx after T * H * dv bytes rounded up to 16; each head's
// blocks of 32 by its own workgroup, so the matmul after needs no quantization pass.
#include "common.glsl"
#include "q8.glsl"
#include "attn.glsl"
#include "kvq.glsl"
#define WG 128
#define MAXD 4 // output dims per invocation: dv <= 4 * WG
#define MAXQ 1024 // the scaled query's elements: hd <= MAXQ (MLA's 576 included)
layout(local_size_x = WG) in;

shared float qs[MAXQ];
shared uint ticket;
shared float lg[WG];

// Element i of cache row r (row length rl) of type ty, blocks of tb bytes.
float kv_at(uint64_t base, uint ty, uint tb, uint64_t r, uint rl, uint i) {
    uint64_t k = r * rl + i;
    if (ty == T_F32) return BF32(base + k * 4).v[0];
    if (ty == T_F16) return unpackHalf2x16(uint(BU16(base + k * 2).v[0])).x;
    if (ty == T_BF16) return uintBitsToFloat(uint(BU16(base + k * 2).v[0]) << 16);
    return kvq_at(ty, base + (r * (rl / 32) + i / 32) * tb, i % 32);
}

void merge(uint g, uint dv, uint S, uint64_t p0, uint64_t y0);

// Bit 3: head g's dv outputs, in qs (after a barrier), as int8 blocks of 32.
void q8_head(uint g, uint dv) {
    uint tid = gl_LocalInvocationID.x, c = tid;
    if (c >= dv / 32) return;
    uint64_t qx = uint64_t(pc.u[3]) | (uint64_t(pc.u[8]) << 32);
    uint64_t qbytes = (uint64_t(pc.u[2]) * (pc.u[1] & 0xffffu) * dv + 15) / 16 * 16;
    float x[32];
    for (uint i = 0; i < 32; i++) x[i] = qs[32 * c + i];
    q8_block(x, qx + uint64_t(g) * dv + 32 * c, qx + qbytes + (uint64_t(g) * (dv / 32) + c) * 8);
}

// After this split's partial of (t, h) = g is written: the split that draws the last
// ticket merges all S into y (pc.o) and resets the ticket. Workgroup-uniform.
void finish(uint g, uint dv, uint S, uint64_t p0) {
    memoryBarrierBuffer(); // this invocation's partial writes, device-wide, before the ticket
    barrier();
    uint64_t tk = uint64_t(pc.u[3]) | (uint64_t(pc.u[8]) << 32);
    if (gl_LocalInvocationID.x == 0u) ticket = atomicAdd(BTK(tk).v[g], 1u);
    barrier();
    if (ticket != S - 1u) return;
    memoryBarrierBuffer();
    merge(g, dv, S, p0, pc.o);
    if (gl_LocalInvocationID.x == 0u) BTK(tk).v[g] = 0u;
}

// The scaled query (qs, elements e ..) dotted with 16 bytes of a key: 4 F32 (kt 0) or 8 F16.
float key_dot(uvec4 w, uint kt, uint e) {
    if (kt == 0u) return dot(vec4(qs[e], qs[e + 1], qs[e + 2], qs[e + 3]), uintBitsToFloat(w));
    float x = 0.0;
    for (uint k = 0; k < 4; k++) {
        vec2 h2 = unpackHalf2x16(w[k]);
        x += qs[e + 2 * k] * h2.x + qs[e + 2 * k + 1] * h2.y;
    }
    return x;
}

// y[t, h] (at y0; dv wide) from the S partials of (t, h) = g at p0.
void merge(uint g, uint dv, uint S, uint64_t p0, uint64_t y0) {
    uint tid = gl_LocalInvocationID.x, st = dv + 2;
    BCF part = BCF(p0 + uint64_t(g) * S * st * 4);
    float M = NEG_INF;
    for (uint sp = 0; sp < S; sp++) M = max(M, part.v[sp * st]);
    float L = 0.0, acc[MAXD];
    for (uint k = 0; k < MAXD; k++) acc[k] = 0.0;
    for (uint sp = 0; sp < S; sp++) {
        float m = part.v[sp * st];
        float wsp = m == NEG_INF ? 0.0 : exp(m - M);
        L += wsp * part.v[sp * st + 1];
        for (uint k = 0; k < MAXD; k++) {
            uint e = tid + k * WG;
            if (e < dv) acc[k] += wsp * part.v[sp * st + 2 + e];
        }
    }
    float inv = attn_inv(pc.p, g % (pc.u[1] & 0xffffu), M, L);
    BF32 y = BF32(y0 + uint64_t(g) * dv * 4);
    for (uint k = 0; k < MAXD; k++) {
        uint e = tid + k * WG;
        if (e < dv) y.v[e] = acc[k] * inv;
    }
}

void main() {
    uint g = group_id();
    if (g >= pc.u[10]) return;
    uint hd = pc.u[0] & 0xffffu, dv = pc.u[0] >> 16, H = pc.u[1] & 0xffffu, n_kv = pc.u[1] >> 16, T = pc.u[2];
    uint tid = gl_LocalInvocationID.x, sv = floatBitsToUint(pc.f[4]);
    uint S = max(pc.u[6] >> 8, 1u), sp = g % S;
    if ((pc.u[6] & 2u) != 0u) { merge(g, dv, S, pc.a, pc.o); return; }
    bool last = (pc.u[6] & 4u) != 0u;
    uint64_t p0 = (uint64_t(pc.u[3]) | (uint64_t(pc.u[8]) << 32)) + TICKET_BYTES;
    g /= S;
    uint t = g / H, h = g % H, kh = h / (H / n_kv), rl = hd * n_kv, vrl = sv * n_kv, cps = pc.u[4];
    uint kt = pc.u[7] & 255u, vt = (pc.u[7] >> 8) & 255u, ktb = (pc.u[7] >> 16) & 255u, vtb = pc.u[7] >> 24;
    int p = BI32(pc.d).v[t], s = BI32(pc.e).v[t];
    bool causal = (pc.u[6] & 1u) != 0u;
    int w = int(pc.u[5]);
    // S > 1: this split's partial, [m, l, acc[dv]]
    uint64_t pbase = last ? p0 : pc.o;
    BCF y = BCF(S > 1 ? pbase + (uint64_t(g) * S + sp) * (dv + 2) * 4 + 8 : pc.o + (uint64_t(t) * H + h) * dv * 4);
    BCF ml = BCF(pbase + (uint64_t(g) * S + sp) * (dv + 2) * 4);
    bool q8 = (pc.u[6] & 8u) != 0u && S == 1u;
    if (p < 0 || s < 0 || uint(p) >= cps || uint64_t(s) * cps + cps > uint64_t(pc.u[9])) {
        for (uint e = tid; e < dv; e += WG) {
            y.v[e] = 0.0;
            qs[e] = 0.0;
        }
        if (S > 1 && tid == 0) { ml.v[0] = NEG_INF; ml.v[1] = 0.0; }
        if (last && S > 1) finish(g, dv, S, p0);
        if (q8) {
            barrier();
            q8_head(g, dv);
        }
        return;
    }
    // Whole-sequence attention reaches the furthest position of this sequence in the batch.
    int hi = p;
    if (!causal) {
        int m = p;
        for (uint u = tid; u < T; u += WG)
            if (BI32(pc.e).v[u] == s) m = max(m, BI32(pc.d).v[u]);
        hi = int(wg_max(float(m)));
        hi = min(hi, int(cps) - 1);
        if (w > 0) hi = min(hi, p + w - 1);
    }
    int lo = w > 0 ? max(0, p - w + 1) : 0;
    BF32 q = BF32(pc.a + (uint64_t(t) * H + h) * hd * 4);
    for (uint e = tid; e < hd; e += WG) qs[e] = q.v[e] * pc.f[0];
    barrier();
    uint64_t cell0 = uint64_t(s) * cps;
    bool kwide = (pc.b & 15ul) == 0ul && ((kt == 0u && hd % 4u == 0u) || (kt == 1u && hd % 8u == 0u));
    float slope = alibi_slope(h, H);
    float m = -1.0 / 0.0, l = 0.0, acc[MAXD];
    for (uint k = 0; k < MAXD; k++) acc[k] = 0.0;
    for (int j0 = lo + int(sp * WG); j0 <= hi; j0 += int(S * WG)) {
        int j = j0 + int(tid);
        float x = -1.0 / 0.0;
        if (j <= hi) {
            x = 0.0;
            uint64_t r = cell0 + uint64_t(j);
            if (kwide) {
                // one 16-byte load per 8 f16 or 4 f32 of the cell's key (rows 16-aligned)
                // (four loads issued together: hd is a multiple of 16 elements where they
                // are whole, else one at a time; sixteen together were slower:
                // bench/NOTES.md, Moved from source comments)
                uint64_t kr = pc.b + (r * rl + kh * hd) * (kt == 0u ? 4 : 2);
                uint step = kt == 0u ? 4 : 8, e = 0;
                for (; e + 4 * step <= hd; e += 4 * step) {
                    uvec4 w4[4];
                    for (uint i = 0; i < 4; i++) w4[i] = BK4(kr + (e + i * step) * (kt == 0u ? 4 : 2)).v[0];
                    for (uint i = 0; i < 4; i++) x += key_dot(w4[i], kt, e + i * step);
                }
                for (; e < hd; e += step) x += key_dot(BK4(kr + e * (kt == 0u ? 4 : 2)).v[0], kt, e);
            } else if (kvq_block_type(kt)) {
                // a block's 32 values decoded at once (hd holds whole blocks: ob_op_valid)
                uint64_t kb = pc.b + (r * (rl / 32) + kh * hd / 32) * ktb;
                for (uint e = 0; e < hd; e += 32) {
                    float kv[32];
                    kvq_load(kt, kb + (e / 32) * ktb, kv);
                    for (uint i = 0; i < 32; i++) x += qs[e + i] * kv[i];
                }
            } else {
                for (uint e = 0; e < hd; e++) x += qs[e] * kv_at(pc.b, kt, ktb, r, rl, kh * hd + e);
            }
            if (pc.f[1] > 0.0) x = pc.f[1] * tanh(x / pc.f[1]);
            x -= slope * float(abs(p - j));
        }
        float mt = wg_max(x);
        float mn = max(m, mt);
        float corr = m == -1.0 / 0.0 ? 0.0 : exp(m - mn); // nothing accumulated yet
        lg[tid] = j <= hi ? exp(x - mn) : 0.0;
        l = l * corr + wg_sum(lg[tid]);
        m = mn;
        for (uint k = 0; k < MAXD; k++) acc[k] *= corr;
        int nj = min(WG, hi - j0 + 1), jj = 0;
        // eight cells' values loaded together, then accumulated (in cell order, as below;
        // 32 together were slower: bench/NOTES.md, Moved from source comments)
        for (; jj + 8 <= nj; jj += 8)
            for (uint k = 0; k < MAXD; k++) {
                uint e = tid + k * WG;
                if (e >= dv) break;
                float vv[8];
                for (int i = 0; i < 8; i++) vv[i] = kv_at(pc.c, vt, vtb, cell0 + uint64_t(j0 + jj + i), vrl, kh * sv + e);
                for (int i = 0; i < 8; i++) acc[k] += lg[jj + i] * vv[i];
            }
        for (; jj < nj; jj++) {
            float pj = lg[jj];
            uint64_t r = cell0 + uint64_t(j0 + jj);
            for (uint k = 0; k < MAXD; k++) {
                uint e = tid + k * WG;
                if (e < dv) acc[k] += pj * kv_at(pc.c, vt, vtb, r, vrl, kh * sv + e);
            }
        }
        barrier();
    }
    float inv = S > 1 ? 1.0 : attn_inv(pc.p, h, m, l);
    for (uint k = 0; k < MAXD; k++) {
        uint e = tid + k * WG;
        if (e < dv) y.v[e] = acc[k] * inv;
    }
    if (S > 1 && tid == 0) { ml.v[0] = m; ml.v[1] = l; }
    if (last && S > 1) finish(g, dv, S, p0);
    if (q8) { // the tiles' last barrier is behind: qs is free
        for (uint k = 0; k < MAXD; k++) {
            uint e = tid + k * WG;
            if (e < dv) qs[e] = acc[k] * inv;
        }
        barrier();
        q8_head(g, dv);
    }
}
