#version 450
// ATTENTION for decode and small causal batches (T <= 8 tokens): one workgroup per (token
// t, kv head kh, group hg of GW of the G = H / n_kv query heads that share kh, split sp).
// attention.comp walks its cells one tile after another with a load chain per cell; here a
// chunk of C cells costs one round of loads: invocation (dc, cl) (dc = tid % NC, NC = hd / 8
// chunks of 8 elements; cl = tid / NC, one of NCL = WG / NC cell lanes) loads chunk dc of
// the key and the value of its CPI cells j = chunk start + i * NCL + cl (i < CPI) at once,
// before any arithmetic. The keys' partial dots meet in shared memory (one logit per
// (cell, head)); each cell lane keeps its own running max, sum and output dims (online
// softmax over its cells), and the lanes are merged at the end as splits are.
// GW (1, 2 or 4) is a specialization constant. With GW > 1 a key and value serve several
// heads, but every invocation carries GW heads' dots, sums and outputs: on the H200 the
// per-invocation work, not the reads, set the time (decode attention 8.2 / 11.4 / 23.7 us
// for GW 1 / 2 / 4 at 16 cells, qwen3-8b; attention.comp 12.5), so the default is 1.
// a q F32 [hd, H, T], b K cache, c V cache ([hd * n_kv, cells] of TYPE: F32, F16 or Q8_0,
// both the same), d pos I32 [T], e seq I32 [T], o y F32 [hd * H, T].
// u[0] hd (a multiple of 8, 32..256; of 32 for Q8_0), u[1] H | n_kv << 16, u[2] T | CPI << 16 |
// GW << 24 (both repeated for the host's checks),
// u[3] | u[8] << 32 the int8 output (bit 3), u[4] cells per seq, u[5] window, u[6] bit 2:
// splits merged by the last (S > 1), bit 3 the int8 output, bits 8.. splits S,
// u[7] | floatBitsToUint(f[3]) << 32 the split scratch (TICKET_BYTES of tickets, one per
// (t, kh, hg), then the partials [m, l, acc[hd]] per (t, h, sp)), u[9] cache cells,
// u[10] workgroups; f[0] scale, f[1] soft-cap, f[2] ALiBi max bias.
// Only causal attention: cells lo .. p of the token's sequence (lo = p - window + 1).
#include "common.glsl"
#include "dequant.glsl"
#include "ld2.glsl"
#include "q8.glsl"
#include "attn.glsl"
#define WG 128
layout(local_size_x = WG) in;

#define RED 4128          // >= NC * (C * GW + 1) <= NC * (8 * NCL * 4 + 1) and NCL * (4 * hd + 1)
shared float red[RED];
shared float lgs[1024];   // a chunk's logits [i][gi][cl], and the workgroup's outputs
shared float mms[256], lls[256]; // per (lane, head), then per (split, head) in the merge
shared uint ticket;
// Cells per invocation per chunk: a constant, and the loops over them have constant trip
// counts and no break, so they unroll and ka / va stay in registers.
const uint CPI = 8;
// Query heads per workgroup (1, 2 or 4).
layout(constant_id = 2) const uint GW = 4;

// Chunk (8 elements at element e of cache row r, row length rl) as raw words: F16 one
// 16-byte load, F32 two, Q8_0 the 8 codes (x, y) and the block's scale (z).
void raw_chunk(uint64_t base, uint64_t r, uint rl, uint e, out uvec4 a, out uvec4 b) {
    b = uvec4(0u);
    if (TYPE == T_F16) {
        a = BK4(base + (r * rl + e) * 2).v[0];
    } else if (TYPE == T_F32) {
        uint64_t p = base + (r * rl + e) * 4;
        a = BK4(p).v[0];
        b = BK4(p + 16).v[0];
    } else {
        uint64_t blk = base + (r * (rl / 32) + e / 32) * 34;
        uvec2 w = ld8(blk + 2 + e % 32);
        a = uvec4(w, BU32(blk & ~3ul).v[0] >> (8u * uint(blk & 2ul)), 0u);
    }
}
void chunk_f(uvec4 a, uvec4 b, out float x[8]) {
    if (TYPE == T_F16) {
        for (uint k = 0; k < 4; k++) {
            vec2 h = unpackHalf2x16(a[k]);
            x[2 * k] = h.x;
            x[2 * k + 1] = h.y;
        }
    } else if (TYPE == T_F32) {
        for (uint k = 0; k < 4; k++) {
            x[k] = uintBitsToFloat(a[k]);
            x[4 + k] = uintBitsToFloat(b[k]);
        }
    } else {
        float d = unpackHalf2x16(a.z).x;
        for (uint k = 0; k < 8; k++) x[k] = d * float(bitfieldExtract(int(a[k / 4]), int(8 * (k % 4)), 8));
    }
}

// Head gi's outputs of a head group, in lgs[gi * hd ..] after a barrier, as int8 blocks of
// 32 (the layout of attention.comp's q8_head) for the token-head row g.
void q8_group(uint ng, uint hd, uint g0, uint64_t qx, uint64_t qbytes) {
    uint c = gl_LocalInvocationID.x, nb = hd / 32;
    if (c >= ng * nb) return;
    uint gi = c / nb, cb = c % nb;
    float x[32];
    for (uint i = 0; i < 32; i++) x[i] = lgs[gi * hd + 32 * cb + i];
    uint64_t g = g0 + gi;
    q8_block(x, qx + g * hd + 32 * cb, qx + qbytes + (g * nb + cb) * 8);
}

void main() {
    uint g = group_id();
    if (g >= pc.u[10]) return;
    uint tid = gl_LocalInvocationID.x;
    uint hd = pc.u[0], H = pc.u[1] & 0xffffu, n_kv = pc.u[1] >> 16, T = pc.u[2] & 0xffffu;
    uint G = H / n_kv, NG = (G + GW - 1) / GW;
    uint S = max(pc.u[6] >> 8, 1u), cps = pc.u[4];
    uint sp = g % S, gk = g / S, hg = gk % NG, t = gk / NG / n_kv, kh = gk / NG % n_kv;
    uint gn = min(GW, G - hg * GW); // heads of this workgroup: hb .. hb + gn - 1
    uint hb = kh * G + hg * GW;
    uint NC = hd / 8, NCL = WG / NC, dc = tid % NC, cl = tid / NC, C = CPI * NCL, rl = hd * n_kv;
    bool act = cl < NCL;
    if (!act) { dc = 0; cl = NCL - 1; } // idle invocations mirror a real one, drop results
    bool q8 = (pc.u[6] & 8u) != 0u, last = (pc.u[6] & 4u) != 0u && S > 1;
    uint64_t qx = uint64_t(pc.u[3]) | (uint64_t(pc.u[8]) << 32);
    uint64_t qbytes = (uint64_t(T) * H * hd + 15) / 16 * 16;
    uint64_t scr = uint64_t(pc.u[7]) | (uint64_t(floatBitsToUint(pc.f[3])) << 32);
    uint64_t p0 = scr + TICKET_BYTES;
    int p = BI32(pc.d).v[t], s = BI32(pc.e).v[t];
    bool ok = p >= 0 && s >= 0 && uint(p) < cps && uint64_t(s) * cps + cps <= uint64_t(pc.u[9]);
    int w = int(pc.u[5]), lo = w > 0 ? max(0, p - w + 1) : 0, hi = ok ? p : -1;
    uint64_t cell0 = uint64_t(max(s, 0)) * cps;
    uint64_t gy0 = uint64_t(t) * H + hb; // token-head row of the workgroup's first head

    float qv[GW][8], slope[GW];
    for (uint gi = 0; gi < GW; gi++) {
        for (uint k = 0; k < 8; k++)
            qv[gi][k] = gi < gn ? BF32(pc.a + ((gy0 + gi) * hd + dc * 8 + k) * 4).v[0] * pc.f[0] : 0.0;
        slope[gi] = alibi_slope(hb + gi, H);
    }
    float m[GW], l[GW], acc[GW][8];
    for (uint gi = 0; gi < GW; gi++) {
        m[gi] = NEG_INF;
        l[gi] = 0.0;
        for (uint k = 0; k < 8; k++) acc[gi][k] = 0.0;
    }

    // chunks k0, k0 + S, ... of C cells (chunk k: cells k * C ..), from the first that
    // reaches lo; split sp takes those with k % S == sp
    uint CG = C * gn, CGs = CG + 1;
    int kfirst = lo / int(C);
    int k0 = kfirst + int((sp + S - uint(kfirst) % S) % S);
    for (int kc = k0; kc * int(C) <= hi; kc += int(S)) {
        int j0 = kc * int(C);
        uvec4 ka[8], kb[8], va[8], vb[8];
        // every load of the chunk first; cells outside lo..hi read cell lo or hi instead
        for (uint i = 0; i < CPI; i++) {
            int j = clamp(j0 + int(i * NCL + cl), lo, hi);
            raw_chunk(pc.b, cell0 + uint64_t(j), rl, kh * hd + dc * 8, ka[i], kb[i]);
            raw_chunk(pc.c, cell0 + uint64_t(j), rl, kh * hd + dc * 8, va[i], vb[i]);
        }
        for (uint i = 0; i < CPI; i++) {
            float x[8];
            chunk_f(ka[i], kb[i], x);
            for (uint gi = 0; gi < GW; gi++) {
                float d = 0.0;
                for (uint k = 0; k < 8; k++) d += qv[gi][k] * x[k];
                if (act && gi < gn) red[dc * CGs + (i * gn + gi) * NCL + cl] = d;
            }
        }
        barrier();
        for (uint pr = tid; pr < CG; pr += WG) {
            float x = 0.0;
            for (uint d = 0; d < NC; d++) x += red[d * CGs + pr];
            uint c2 = pr % NCL, ig = pr / NCL, i = ig / gn, gi = ig % gn;
            int j = j0 + int(i * NCL + c2);
            if (pc.f[1] > 0.0) x = pc.f[1] * tanh(x / pc.f[1]);
            float sl = 0.0;
            for (uint z = 0; z < GW; z++) sl = z == gi ? slope[z] : sl;
            x -= sl * float(abs(p - j));
            lgs[pr] = j >= lo && j <= hi ? x : NEG_INF;
        }
        barrier();
        for (uint gi = 0; gi < GW; gi++) {
            float lg[CPI], mt = NEG_INF;
            for (uint i = 0; i < CPI; i++) {
                lg[i] = gi < gn ? lgs[(i * gn + gi) * NCL + cl] : NEG_INF;
                mt = max(mt, lg[i]);
            }
            float mn = max(m[gi], mt);
            bool seen = mn != NEG_INF; // else nothing seen yet by this lane: all stays
            float corr = seen ? exp(m[gi] - mn) : 1.0; // 0 while m is -inf
            m[gi] = mn;
            l[gi] *= corr;
            for (uint k = 0; k < 8; k++) acc[gi][k] *= corr;
            for (uint i = 0; i < CPI; i++) {
                float pj = seen ? exp(lg[i] - mn) : 0.0, v[8];
                chunk_f(va[i], vb[i], v);
                l[gi] += pj;
                for (uint k = 0; k < 8; k++) acc[gi][k] += pj * v[k];
            }
        }
    }

    // the cell lanes merged: M, L per head over the lanes, each lane's output scaled to M
    if (act && dc == 0)
        for (uint gi = 0; gi < GW; gi++)
            if (gi < gn) {
                mms[cl * gn + gi] = m[gi];
                lls[cl * gn + gi] = l[gi];
            }
    barrier();
    float L[GW], Mx[GW];
    for (uint gi = 0; gi < GW; gi++) {
        float M = NEG_INF, sum = 0.0;
        if (gi < gn) {
            for (uint c2 = 0; c2 < NCL; c2++) M = max(M, mms[c2 * gn + gi]);
            for (uint c2 = 0; c2 < NCL; c2++) {
                float mc = mms[c2 * gn + gi];
                sum += mc == NEG_INF ? 0.0 : lls[c2 * gn + gi] * exp(mc - M);
            }
        }
        L[gi] = sum;
        Mx[gi] = M;
        float f = m[gi] == NEG_INF ? 0.0 : exp(m[gi] - M);
        for (uint k = 0; k < 8; k++) acc[gi][k] *= f;
    }
    uint VS = 4 * hd + 1, st = hd + 2;
    if (act)
        for (uint gi = 0; gi < GW; gi++)
            if (gi < gn)
                for (uint k = 0; k < 8; k++) red[cl * VS + gi * hd + dc * 8 + k] = acc[gi][k];
    barrier();
    for (uint o = tid; o < gn * hd; o += WG) {
        float x = 0.0;
        for (uint c2 = 0; c2 < NCL; c2++) x += red[c2 * VS + o];
        uint gi = o / hd, e = o % hd;
        float Lg = 0.0, Mg = NEG_INF;
        for (uint z = 0; z < GW; z++) {
            Lg = z == gi ? L[z] : Lg;
            Mg = z == gi ? Mx[z] : Mg;
        }
        if (S > 1) {
            BCF part = BCF(p0 + ((gy0 + gi) * S + sp) * st * 4);
            part.v[2 + e] = x;
            if (e == 0u) {
                part.v[0] = Mg;
                part.v[1] = Lg;
            }
        } else {
            x *= Lg > 0.0 ? 1.0 / Lg : 0.0;
            BF32(pc.o + ((gy0 + gi) * hd + e) * 4).v[0] = x;
            lgs[o] = x;
        }
    }
    if (S == 1u) {
        if (q8) {
            barrier();
            q8_group(gn, hd, uint(gy0), qx, qbytes);
        }
        return;
    }
    if (!last) return;

    // the split that draws the last ticket of (t, kh, hg) merges the S partials of its heads
    memoryBarrierBuffer();
    barrier();
    uint64_t tk = scr + uint64_t(gk) * 4;
    if (tid == 0u) ticket = atomicAdd(BTK(tk).v[0], 1u);
    barrier();
    if (ticket != S - 1u) return;
    memoryBarrierBuffer();
    // each split's max and sum per head, all loaded at once, then the weights in shared memory
    for (uint i = tid; i < S * gn; i += WG) {
        uint z = i / gn, gi = i % gn;
        BCF part = BCF(p0 + ((gy0 + gi) * S + z) * st * 4);
        mms[i] = part.v[0];
        lls[i] = part.v[1];
    }
    barrier();
    if (tid < gn) {
        float M = NEG_INF, Ls = 0.0;
        for (uint z = 0; z < S; z++) M = max(M, mms[z * gn + tid]);
        for (uint z = 0; z < S; z++) {
            float mz = mms[z * gn + tid], wz = mz == NEG_INF ? 0.0 : exp(mz - M);
            Ls += wz * lls[z * gn + tid];
            red[z * gn + tid] = wz;
        }
        red[S * gn + tid] = Ls > 0.0 ? 1.0 / Ls : 0.0;
    }
    barrier();
    for (uint o = tid; o < gn * hd; o += WG) {
        uint gi = o / hd, e = o % hd;
        BCF part = BCF(p0 + (gy0 + gi) * S * st * 4 + (2 + e) * 4);
        float x = 0.0;
        for (uint z0 = 0; z0 < S; z0 += 8) { // eight splits' loads in flight at once
            float v[8];
            for (uint k = 0; k < 8; k++) v[k] = z0 + k < S ? part.v[(z0 + k) * st] : 0.0;
            for (uint k = 0; k < 8; k++) x += z0 + k < S ? red[(z0 + k) * gn + gi] * v[k] : 0.0;
        }
        x *= red[S * gn + gi];
        BF32(pc.o + ((gy0 + gi) * hd + e) * 4).v[0] = x;
        lgs[o] = x;
    }
    if (q8) {
        barrier();
        q8_group(gn, hd, uint(gy0), qx, qbytes);
    }
    if (tid == 0u) BTK(tk).v[0] = 0u;
}
