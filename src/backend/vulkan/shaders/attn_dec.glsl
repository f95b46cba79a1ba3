// attn_dec.comp's code (see its header), shared with attn_fold.comp (ATTN_FOLD).
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
#ifdef ATTN_FOLD
// head_dim 128 only, one query head a workgroup (GW 1), a cell's 16 lanes in one subgroup
// with shuffles (attn_fold.comp's header)
layout(constant_id = 8) const bool HD128 = false;
#endif

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
#ifdef ATTN_FOLD
    if (HD128) { // one head of 128: 4 elements an invocation, a block's 8 meeting by shuffles
        const uint tid = gl_LocalInvocationID.x;
        if (gl_SubgroupID * gl_SubgroupSize < 32u) {
            const uint j = 4u * min(tid, 31u);
            q8_vec4(vec4(lgs[j], lgs[j + 1], lgs[j + 2], lgs[j + 3]), tid < 32u, tid, qx + uint64_t(g0) * 128,
                    qx + qbytes + uint64_t(g0) * 32);
        }
        return;
    }
#endif
    uint c = gl_LocalInvocationID.x, nb = hd / 32;
    if (c >= ng * nb) return;
    uint gi = c / nb, cb = c % nb;
    float x[32];
    for (uint i = 0; i < 32; i++) x[i] = lgs[gi * hd + 32 * cb + i];
    uint64_t g = g0 + gi;
    q8_block(x, qx + g * hd + 32 * cb, qx + qbytes + (g * nb + cb) * 8);
}

#ifdef ATTN_FOLD
#include "store.glsl"
// The folded token's key (normalised, roped) and value as the cache gives them back.
shared float kcs[256], vcs[256];
#define sh_row red // the staging rows: q heads at 0, k at 1024
// the fold's parameter block (host: ob_vk_record_attn_fold)
uint par_u(uint64_t par, uint i) { return BTK(par + 4 * i).v[0]; }

// The fold's rope factors (0: none) and mscale.
uint64_t par_ff(uint64_t par) { return uint64_t(par_u(par, 13)) | (uint64_t(par_u(par, 14)) << 32); }
float par_ms(uint64_t par) { return uintBitsToFloat(par_u(par, 15)); }

// The ROPE of element e of a head (its partner from the head's row at sh[base ..]).
float fold_rope(uint e, uint base, float pf, uint half_rot, bool neox, float fs, uint64_t ff, float ms, float rh,
                float rlo) {
    float x = sh_row[base + e];
    if (e >= 2 * half_rot) return x;
    uint i = neox ? e % half_rot : e / 2;
    bool first = neox ? e < half_rot : (e % 2u) == 0u;
    uint ia = neox ? i : 2 * i, ib = neox ? i + half_rot : 2 * i + 1;
    float cs, sn;
    rope_cos_sin(pf, i, fs, ff, ms, rh, rlo, cs, sn);
    float x0 = sh_row[base + ia], x1 = sh_row[base + ib];
    return first ? x0 * cs - x1 * sn : x0 * sn + x1 * cs;
}
// v[32] rounded as a cache of type TYPE stores it and chunk_f reads it back.
void fold_round(inout float v[32]) {
    if (TYPE == T_F16) {
        for (uint j = 0; j < 32; j++) v[j] = unpackHalf2x16(packHalf2x16(vec2(v[j], 0.0))).x;
    } else if (TYPE == T_Q8_0) { // store_chunk's codes, and the f16 scale it stores
        float d;
        int q[32];
        kvq_q8_0(v, d, q);
        float dh = unpackHalf2x16(kvq_f16(d)).x;
        for (uint j = 0; j < 32; j++) v[j] = dh * float(q[j]);
    }
}

// kcs / vcs (the token's key and value of kv head kh) rounded as the caches hold them, one
// 32-element block an invocation (k, then v); wr: the blocks also stored at byte crow of
// each cache.
void fold_blocks(uint hd, uint kh, uint64_t crow, bool wr) {
    uint tid = gl_LocalInvocationID.x, nb = hd / 32;
    if (tid >= 2 * nb) return;
    bool isv = tid >= nb;
    uint b = tid % nb;
    float v[32];
    for (uint j = 0; j < 32; j++) v[j] = isv ? vcs[32 * b + j] : kcs[32 * b + j];
    if (wr) store_chunk(uint(TYPE), (isv ? pc.c : pc.b) + crow, kh * nb + b, v, 32u);
    fold_round(v);
    for (uint j = 0; j < 32; j++) {
        if (isv) vcs[32 * b + j] = v[j];
        else kcs[32 * b + j] = v[j];
    }
}

// A chunk's loads (as the loop of main makes them).
void fold_loads(int j0, int lo, int hi, uint cl, uint NCL, uint64_t cell0, uint rl, uint e, out uvec4 ka[8],
                out uvec4 kb[8], out uvec4 va[8], out uvec4 vb[8]) {
    for (uint i = 0; i < CPI; i++) {
        int j = clamp(j0 + int(i * NCL + cl), lo, hi);
        raw_chunk(pc.b, cell0 + uint64_t(j), rl, e, ka[i], kb[i]);
        raw_chunk(pc.c, cell0 + uint64_t(j), rl, e, va[i], vb[i]);
    }
}

// fold_prep for one query head of WG (128) elements: an element an invocation, all loads
// and the rotation's angle at once, the norms by subgroup sums; F16 / F32 caches rounded
// and stored an element an invocation. The same arithmetic as norm_rope.comp's.
void fold_prep1(uint hb, uint kh, uint dc, uint64_t par, float pf, uint64_t crow, bool wr, out float qv[GW][8]) {
    const uint hd = WG;
    uint tid = gl_LocalInvocationID.x;
    uint fl = par_u(par, 4), rot = par_u(par, 5);
    uint64_t qn = uint64_t(par_u(par, 0)) | (uint64_t(par_u(par, 1)) << 32);
    uint64_t kn = uint64_t(par_u(par, 2)) | (uint64_t(par_u(par, 3)) << 32);
    uint64_t ka = pc.a + uint64_t(int64_t(int(pc.u[5]))), va = pc.a + uint64_t(int64_t(int(pc.u[9])));
    float xq = BF32(pc.a + (uint64_t(hb) * hd + tid) * 4).v[0];
    float xk = BF32(ka + (uint64_t(kh) * hd + tid) * 4).v[0];
    float xv = BF32(va + (uint64_t(kh) * hd + tid) * 4).v[0];
    float wq = (fl & 1u) != 0u && qn != 0ul ? BF32(qn + tid * 4).v[0] : 1.0;
    float wk = (fl & 2u) != 0u && kn != 0ul ? BF32(kn + tid * 4).v[0] : 1.0;
    float eq = uintBitsToFloat(par_u(par, 6)), ek = uintBitsToFloat(par_u(par, 7));
    // this element's rotation: partner, angle
    uint half_rot = (rot & 0xffffu) / 2;
    bool neox = (rot >> 16) == 2u, rotd = tid < 2 * half_rot;
    bool first = neox ? tid < half_rot : (tid % 2u) == 0u;
    uint ri = neox ? tid % max(half_rot, 1u) : tid / 2, partner = neox ? (first ? tid + half_rot : tid - half_rot)
                                                                       : (first ? tid + 1 : tid - 1);
    float cs = 1.0, sn = 0.0;
    if (rotd)
        rope_cos_sin(pf, ri, uintBitsToFloat(par_u(par, 10)), par_ff(par), par_ms(par),
                     uintBitsToFloat(par_u(par, 8)), uintBitsToFloat(par_u(par, 9)), cs, sn);
    // the sums of squares of q and k (wg_sum's order)
    float sq = subgroupAdd(xq * xq), sk = subgroupAdd(xk * xk);
    if (subgroupElect()) {
        mms[gl_SubgroupID] = sq;
        lls[gl_SubgroupID] = sk;
    }
    barrier();
    float tq = 0.0, tk = 0.0;
    for (uint i = 0; i < gl_NumSubgroups; i++) {
        tq += mms[i];
        tk += lls[i];
    }
    float yq = xq * ((fl & 1u) != 0u ? inversesqrt(tq / float(hd) + eq) : 1.0) * wq;
    float yk = xk * ((fl & 2u) != 0u ? inversesqrt(tk / float(hd) + ek) : 1.0) * wk;
    sh_row[tid] = yq;
    sh_row[1024 + tid] = yk;
    barrier();
    float oq = !rotd ? yq : first ? yq * cs - sh_row[partner] * sn : sh_row[partner] * sn + yq * cs;
    float ok = !rotd ? yk : first ? yk * cs - sh_row[1024 + partner] * sn : sh_row[1024 + partner] * sn + yk * cs;
    lgs[tid] = oq;
    if (TYPE == T_Q8_0) { // whole blocks: fold_prep's rounding
        kcs[tid] = ok;
        vcs[tid] = xv;
        barrier();
        fold_blocks(hd, kh, crow, wr);
    } else {
        uint e = kh * hd + tid;
        if (TYPE == T_F16) {
            uint hk = packHalf2x16(vec2(ok, 0.0)), hv = packHalf2x16(vec2(xv, 0.0));
            if (wr) {
                BU16(pc.b + crow).v[e] = uint16_t(hk & 0xffffu);
                BU16(pc.c + crow).v[e] = uint16_t(hv & 0xffffu);
            }
            ok = unpackHalf2x16(hk).x;
            xv = unpackHalf2x16(hv).x;
        } else if (wr) {
            BF32(pc.b + crow).v[e] = ok;
            BF32(pc.c + crow).v[e] = xv;
        }
        kcs[tid] = ok;
        vcs[tid] = xv;
    }
    barrier();
    for (uint gi = 0; gi < GW; gi++)
        for (uint k = 0; k < 8; k++) qv[gi][k] = gi == 0u ? lgs[dc * 8 + k] * pc.f[0] : 0.0;
}

// The folded nodes (T = 1): q of heads hb .. hb + gn - 1 RMS-normalised and roped into
// qv, the token's key (normalised, roped) and value of kv head kh rounded to the cache type
// into kcs / vcs, and, by the first head group's workgroup (wr), both stored in the caches
// at byte offset crow. Every invocation of the workgroup calls it (barriers).
void fold_prep(uint hb, uint gn, uint kh, uint hd, uint dc, uint64_t par, float pf, uint64_t crow, bool wr,
               out float qv[GW][8]) {
    if (HD128 || (hd == WG && gn == 1u)) { // uniform
        fold_prep1(hb, kh, dc, par, pf, crow, wr, qv);
        return;
    }
    uint tid = gl_LocalInvocationID.x, nq = gn * hd;
    uint fl = par_u(par, 4), rot = par_u(par, 5);
    uint64_t qn = uint64_t(par_u(par, 0)) | (uint64_t(par_u(par, 1)) << 32);
    uint64_t kn = uint64_t(par_u(par, 2)) | (uint64_t(par_u(par, 3)) << 32);
    uint64_t ka = pc.a + uint64_t(int64_t(int(pc.u[5]))), va = pc.a + uint64_t(int64_t(int(pc.u[9])));
    // loads: q (up to 4 heads of 256), k and v (one head)
    float xq[8], xk[2], xv[2];
    for (uint r = 0; r < 8; r++) {
        uint e = tid + r * WG;
        xq[r] = e < nq ? BF32(pc.a + (uint64_t(hb) * hd + e) * 4).v[0] : 0.0;
        if (e < nq) sh_row[e] = xq[r] * xq[r];
    }
    for (uint r = 0; r < 2; r++) {
        uint e = tid + r * WG;
        xk[r] = e < hd ? BF32(ka + (uint64_t(kh) * hd + e) * 4).v[0] : 0.0;
        xv[r] = e < hd ? BF32(va + (uint64_t(kh) * hd + e) * 4).v[0] : 0.0;
        if (e < hd) sh_row[1024 + e] = xk[r] * xk[r];
    }
    barrier();
    // sums of squares: 8 elements an invocation, then one invocation a head
    uint np = nq / 8 + hd / 8;
    for (uint c = tid; c < np; c += WG) {
        uint b0 = c < nq / 8 ? 8 * c : 1024 + 8 * (c - nq / 8);
        float z = 0.0;
        for (uint k = 0; k < 8; k++) z += sh_row[b0 + k];
        mms[c] = z;
    }
    barrier();
    if (tid <= gn) {
        float z = 0.0;
        for (uint k = 0; k < hd / 8; k++) z += mms[tid * (hd / 8) + k];
        lls[tid] = z;
    }
    barrier();
    float eq = uintBitsToFloat(par_u(par, 6)), ek = uintBitsToFloat(par_u(par, 7));
    for (uint r = 0; r < 8; r++) {
        uint e = tid + r * WG;
        if (e >= nq) continue;
        float sc = (fl & 1u) != 0u ? inversesqrt(lls[e / hd] / float(hd) + eq) : 1.0;
        float wq = (fl & 1u) != 0u && qn != 0ul ? BF32(qn + (e % hd) * 4).v[0] : 1.0;
        sh_row[e] = xq[r] * sc * wq;
    }
    for (uint r = 0; r < 2; r++) {
        uint e = tid + r * WG;
        if (e >= hd) continue;
        float sc = (fl & 2u) != 0u ? inversesqrt(lls[gn] / float(hd) + ek) : 1.0;
        float wk = (fl & 2u) != 0u && kn != 0ul ? BF32(kn + e * 4).v[0] : 1.0;
        sh_row[1024 + e] = xk[r] * sc * wk;
    }
    barrier();
    uint half_rot = (rot & 0xffffu) / 2;
    bool neox = (rot >> 16) == 2u;
    float rh = uintBitsToFloat(par_u(par, 8)), rlo = uintBitsToFloat(par_u(par, 9));
    float fs = uintBitsToFloat(par_u(par, 10)), ms = par_ms(par);
    uint64_t ff = par_ff(par);
    for (uint r = 0; r < 8; r++) {
        uint e = tid + r * WG;
        if (e < nq) lgs[e] = fold_rope(e % hd, e / hd * hd, pf, half_rot, neox, fs, ff, ms, rh, rlo);
    }
    for (uint r = 0; r < 2; r++) {
        uint e = tid + r * WG;
        if (e >= hd) continue;
        kcs[e] = fold_rope(e, 1024u, pf, half_rot, neox, fs, ff, ms, rh, rlo);
        vcs[e] = xv[r];
    }
    barrier();
    fold_blocks(hd, kh, crow, wr);
    barrier();
    for (uint gi = 0; gi < GW; gi++)
        for (uint k = 0; k < 8; k++) qv[gi][k] = gi < gn ? lgs[gi * hd + dc * 8 + k] * pc.f[0] : 0.0;
    barrier();
}
#endif

// One chunk's online softmax step for a lane and one head: its CPI cells' logits lg
// (NEG_INF outside the window) and their values (raw in va / vb; the fold's token, at cell
// p, from vcs) into the head's running max m, sum l and output acc.
void softmax_step(float lg[CPI], uvec4 va[8], uvec4 vb[8], int j0, int lo, int hi, int p, uint cl, uint NCL, uint dc,
                  inout float m, inout float l, inout float acc[8]) {
    float mt = NEG_INF;
    for (uint i = 0; i < CPI; i++) mt = max(mt, lg[i]);
    float mn = max(m, mt);
    bool seen = mn != NEG_INF; // else nothing seen yet by this lane: all stays
    float corr = seen ? exp(m - mn) : 1.0; // 0 while m is -inf
    m = mn;
    l *= corr;
    for (uint k = 0; k < 8; k++) acc[k] *= corr;
    for (uint i = 0; i < CPI; i++) {
        float pj = seen ? exp(lg[i] - mn) : 0.0, v[8];
        chunk_f(va[i], vb[i], v);
#ifdef ATTN_FOLD
        if (clamp(j0 + int(i * NCL + cl), lo, hi) == p)
            for (uint k = 0; k < 8; k++) v[k] = vcs[dc * 8 + k];
#endif
        l += pj;
        for (uint k = 0; k < 8; k++) acc[k] += pj * v[k];
    }
}

void main() {
    uint g = group_id();
    if (g >= pc.u[10]) return;
    uint tid = gl_LocalInvocationID.x;
#ifdef ATTN_FOLD
    const uint hd = HD128 ? 128u : pc.u[0] & 0xffffu; // HD128: the arithmetic on hd folds away
    const uint dv = hd, sv = hd;                      // the fold's values are its keys' width
#else
    // the values: dv wide, at sv a kv head in V rows of sv * n_kv (the K cache's, MLA's)
    const uint hd = pc.u[0] & 0xffffu, dv = pc.u[0] >> 16, sv = floatBitsToUint(pc.f[4]);
#endif
    uint H = pc.u[1] & 0xffffu, n_kv = pc.u[1] >> 16, T = pc.u[2] & 0xffffu;
    uint G = H / n_kv, NG = (G + GW - 1) / GW;
    uint S = max((pc.u[6] >> 8) & 255u, 1u), cps = pc.u[4];
    uint sp = g % S, gk = g / S, hg = gk % NG, t = gk / NG / n_kv, kh = gk / NG % n_kv;
    uint gn = min(GW, G - hg * GW); // heads of this workgroup: hb .. hb + gn - 1
    uint hb = kh * G + hg * GW;
    uint NC = hd / 8, NCL = WG / NC, dc = tid % NC, cl = tid / NC, C = CPI * NCL, rl = hd * n_kv, vrl = sv * n_kv;
    bool act = cl < NCL;
    if (!act) { dc = 0; cl = NCL - 1; } // idle invocations mirror a real one, drop results
    bool q8 = (pc.u[6] & 8u) != 0u, last = (pc.u[6] & 4u) != 0u && S > 1;
    uint64_t qx = uint64_t(pc.u[3]) | (uint64_t(pc.u[8]) << 32);
    uint64_t qbytes = (uint64_t(T) * H * dv + 15) / 16 * 16;
    uint64_t scr = uint64_t(pc.u[7]) | (uint64_t(floatBitsToUint(pc.f[3])) << 32);
    uint64_t p0 = scr + TICKET_BYTES;
    int p = BI32(pc.d).v[t], s = BI32(pc.e).v[t];
#ifdef ATTN_FOLD
    uint64_t par = uint64_t(floatBitsToUint(pc.f[1])) | (uint64_t(floatBitsToUint(pc.f[2])) << 32);
    bool ok = p >= 0 && s >= 0 && uint(p) < cps && uint64_t(s) * cps + cps <= uint64_t(par_u(par, 11));
    int w = int(par_u(par, 12)), lo = w > 0 ? max(0, p - w + 1) : 0, hi = ok ? p : -1;
#else
    bool ok = p >= 0 && s >= 0 && uint(p) < cps && uint64_t(s) * cps + cps <= uint64_t(pc.u[9]);
    int w = int(pc.u[5]), lo = w > 0 ? max(0, p - w + 1) : 0, hi = ok ? p : -1;
#endif
    // Fewer than u[6] >> 16 chunks to walk: the first split walks them all and writes the
    // output itself, the others leave (every split of a (token, head group) reads the same
    // p, so they agree); no partials, no merge.
    if (S > 1u && hi >= lo && uint(hi / int(C) - lo / int(C)) < (pc.u[6] >> 16)) {
        if (sp != 0u) return;
        S = 1u;
        last = false;
    }
    uint64_t cell0 = uint64_t(max(s, 0)) * cps;
    uint64_t gy0 = uint64_t(t) * H + hb; // token-head row of the workgroup's first head

    float qv[GW][8], slope[GW];
#ifdef ATTN_FOLD
    for (uint gi = 0; gi < GW; gi++) slope[gi] = 0.0; // the host folds only without ALiBi or soft-cap
#else
    for (uint gi = 0; gi < GW; gi++) {
        for (uint k = 0; k < 8; k++)
            qv[gi][k] = gi < gn ? BF32(pc.a + ((gy0 + gi) * hd + dc * 8 + k) * 4).v[0] * pc.f[0] : 0.0;
        slope[gi] = alibi_slope(hb + gi, H);
    }
#endif
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
#ifdef ATTN_FOLD
    // A split with no chunk to walk skips the prep (uniform per workgroup). The first
    // chunk's loads go out before it. The token's cell is in split (p / C) % S, whose first
    // head group's workgroup stores it.
    uvec4 ka[8], kb[8], va[8], vb[8];
    bool work = k0 * int(C) <= hi;
    if (work) fold_loads(k0 * int(C), lo, hi, cl, NCL, cell0, rl, kh * hd + dc * 8, ka, kb, va, vb);
    uint rb = TYPE == T_Q8_0 ? rl / 32 * 34 : TYPE == T_F16 ? rl * 2 : rl * 4; // cache row bytes
    bool wr = ok && hg == 0u && uint(p) / C % S == sp;
    if (work) fold_prep(hb, gn, kh, hd, dc, par, float(p), (cell0 + uint64_t(max(p, 0))) * rb, wr, qv);
#endif
    for (int kc = k0; kc * int(C) <= hi; kc += int(S)) {
        int j0 = kc * int(C);
#ifdef ATTN_FOLD
        if (kc != k0) fold_loads(j0, lo, hi, cl, NCL, cell0, rl, kh * hd + dc * 8, ka, kb, va, vb);
        if (HD128) {
            // cell j0 + i * NCL + cl's dot product summed over its 16 lanes (neighbouring
            // invocations of one subgroup) by shuffles: every lane holds it
            float lg[CPI];
            for (uint i = 0; i < CPI; i++) {
                float x[8];
                chunk_f(ka[i], kb[i], x);
                const int j = j0 + int(i * NCL + cl);
                if (clamp(j, lo, hi) == p) // the folded token: not in the cache yet
                    for (uint k = 0; k < 8; k++) x[k] = kcs[dc * 8 + k];
                float d = 0.0;
                for (uint k = 0; k < 8; k++) d += qv[0][k] * x[k];
                d += subgroupShuffleXor(d, 8u);
                d += subgroupShuffleXor(d, 4u);
                d += subgroupShuffleXor(d, 2u);
                d += subgroupShuffleXor(d, 1u);
                lg[i] = j >= lo && j <= hi ? d : NEG_INF;
            }
            softmax_step(lg, va, vb, j0, lo, hi, p, cl, NCL, dc, m[0], l[0], acc[0]);
            continue;
        }
#else
        uvec4 ka[8], kb[8], va[8], vb[8];
        // every load of the chunk first; cells outside lo..hi read cell lo or hi instead, and
        // lanes past the values' dv elements (dv < hd) the last chunk of them (dropped below)
        const uint ve = kh * sv + min(dc * 8, dv - 8);
        for (uint i = 0; i < CPI; i++) {
            int j = clamp(j0 + int(i * NCL + cl), lo, hi);
            raw_chunk(pc.b, cell0 + uint64_t(j), rl, kh * hd + dc * 8, ka[i], kb[i]);
            raw_chunk(pc.c, cell0 + uint64_t(j), vrl, ve, va[i], vb[i]);
        }
#endif
        for (uint i = 0; i < CPI; i++) {
            float x[8];
            chunk_f(ka[i], kb[i], x);
#ifdef ATTN_FOLD
            if (clamp(j0 + int(i * NCL + cl), lo, hi) == p) // the folded token: not in the cache yet
                for (uint k = 0; k < 8; k++) x[k] = kcs[dc * 8 + k];
#endif
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
#ifndef ATTN_FOLD
            if (pc.f[1] > 0.0) x = pc.f[1] * tanh(x / pc.f[1]);
#endif
            float sl = 0.0;
            for (uint z = 0; z < GW; z++) sl = z == gi ? slope[z] : sl;
            x -= sl * float(abs(p - j));
            lgs[pr] = j >= lo && j <= hi ? x : NEG_INF;
        }
        barrier();
        for (uint gi = 0; gi < GW; gi++) {
            float lg[CPI];
            for (uint i = 0; i < CPI; i++) lg[i] = gi < gn ? lgs[(i * gn + gi) * NCL + cl] : NEG_INF;
            softmax_step(lg, va, vb, j0, lo, hi, p, cl, NCL, dc, m[gi], l[gi], acc[gi]);
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
    uint VS = 4 * dv + 1, st = dv + 2;
    if (act && dc * 8 < dv)
        for (uint gi = 0; gi < GW; gi++)
            if (gi < gn)
                for (uint k = 0; k < 8; k++) red[cl * VS + gi * dv + dc * 8 + k] = acc[gi][k];
    barrier();
    for (uint o = tid; o < gn * dv; o += WG) {
        float x = 0.0;
        for (uint c2 = 0; c2 < NCL; c2++) x += red[c2 * VS + o];
        uint gi = o / dv, e = o % dv;
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
            x *= attn_inv(pc.p, hb + gi, Mg, Lg);
#ifdef ATTN_FOLD
            if ((pc.u[6] & 16u) == 0u) // bit 4: only the int8 output is read
#endif
            BF32(pc.o + ((gy0 + gi) * dv + e) * 4).v[0] = x;
            lgs[o] = x;
        }
    }
    if (S == 1u) {
        if (q8) {
            barrier();
            q8_group(gn, dv, uint(gy0), qx, qbytes);
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
        red[S * gn + tid] = attn_inv(pc.p, hb + tid, M, Ls);
    }
    barrier();
    for (uint o = tid; o < gn * dv; o += WG) {
        uint gi = o / dv, e = o % dv;
        BCF part = BCF(p0 + (gy0 + gi) * S * st * 4 + (2 + e) * 4);
        float x = 0.0;
        for (uint z0 = 0; z0 < S; z0 += 8) { // eight splits' loads in flight at once
            float v[8];
            for (uint k = 0; k < 8; k++) v[k] = z0 + k < S ? part.v[(z0 + k) * st] : 0.0;
            for (uint k = 0; k < 8; k++) x += z0 + k < S ? red[(z0 + k) * gn + gi] * v[k] : 0.0;
        }
        x *= red[S * gn + gi];
#ifdef ATTN_FOLD
        if ((pc.u[6] & 16u) == 0u)
#endif
        BF32(pc.o + ((gy0 + gi) * dv + e) * 4).v[0] = x;
        lgs[o] = x;
    }
    if (q8) {
        barrier();
        q8_group(gn, dv, uint(gy0), qx, qbytes);
    }
    if (tid == 0u) BTK(tk).v[0] = 0u;
}
