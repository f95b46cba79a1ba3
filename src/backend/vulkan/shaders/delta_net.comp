#version 450
// DELTA_NET (graph.h): the gated delta rule of Gated DeltaNet layers (Qwen3.5, Qwen3-Next),
// token by token as the CPU's op_delta_net.c, for decode and prefill alike.
// a qkv F32 [2 Hk dk + H dv, T], b g F32 [H, T] (log decay), c beta F32 [H, T], d state F32
// [dk dv H, S], e pos I32 [T], p seq I32 [T], o F32 [dv, H, T]. u[0] dk, u[1] dv, u[2] Hk,
// u[3] H, u[4] T, u[5] S, u[6] L2 norm (1) or none (0), u[7] column blocks (dv / CW rounded
// up); f[0] the query's scale, f[1] the norm's epsilon.
//
// Each column j of a head's dk x dv state evolves on its own given the token's q, k, v[j],
// decay and beta, so a workgroup holds CW consecutive columns of one (sequence, value head),
// each over RW invocations that own the rows rg, rg + RW, ... in registers. A column's sums
// are its invocations' partial sums (rows in order) added in row-group order from shared
// memory; the q and k norms are partial sums over the workgroup added in a fixed order too, so
// every sum has one order fixed by dk and dv: a token gives the same bits alone or in a
// prefill (batch invariant), and no atomics. The tokens of the workgroup's sequence are walked
// in batch order with the state in registers, stored once at the end; a token at position 0
// starts from zeros; tokens whose sequence has no state row get zeros (from row 0's
// workgroups). Rows past dk and columns past dv are masked, never read.
#include "common.glsl"
#define CW 8u
#define RW 16u
#define MAXR 16u // rows an invocation holds: dk <= RW MAXR (vk_recurrent.c refuses more)
#define WG (CW * RW)
layout(local_size_x = 128) in;

shared float qs[RW * MAXR], ks[RW * MAXR];
shared vec2 nrm[WG];
shared vec2 nrm2[RW];
shared float red_kv[RW][CW], red_o[RW][CW];

void main() {
    const uint dk = pc.u[0], dv = pc.u[1], Hk = pc.u[2], H = pc.u[3], T = pc.u[4], S = pc.u[5], ncb = pc.u[7];
    const uint lid = gl_LocalInvocationID.x, c = lid % CW, rg = lid / CW;
    const uint gid = group_id();
    if (gid >= pc.u[10]) return; // the 2D grid's tail
    const uint cb = gid % ncb, h = (gid / ncb) % H, s = gid / (ncb * H);
    const uint j = cb * CW + c;
    const bool live = j < dv;
    const uint64_t W = 2 * uint64_t(Hk) * dk + uint64_t(H) * dv, kh = h % Hk;
    BI32 pos = BI32(pc.e), seq = BI32(pc.p);
    BF32 gl = BF32(pc.b), beta = BF32(pc.c), o = BF32(pc.o);
    uint t0 = 0;
    while (t0 < T && seq.v[t0] != int(s)) t0++;
    if (t0 == T && s != 0u) return; // (row 0's workgroups still write the zeros below)
    BF32 Sg = BF32(pc.d + (uint64_t(s) * H + h) * dk * dv * 4);
    float Sr[MAXR];
    for (uint r = 0; r < MAXR; r++) {
        const uint i = rg + RW * r;
        Sr[r] = t0 < T && live && i < dk ? Sg.v[i * dv + j] : 0.0;
    }
    const float eps = pc.f[1], qscale = pc.f[0];
    for (uint t = 0; t < T; t++) {
        const int st = seq.v[t];
        if (st < 0 || st >= int(S)) { // no state: zeros, from the workgroups of row 0
            if (s == 0u && rg == 0u && live) o.v[(t * H + h) * dv + j] = 0.0;
            continue;
        }
        if (uint(st) != s) continue;
        if (pos.v[t] == 0)
            for (uint r = 0; r < MAXR; r++) Sr[r] = 0.0;
        BF32 q = BF32(pc.a + (uint64_t(t) * W + kh * dk) * 4), k = BF32(pc.a + (uint64_t(t) * W + (Hk + kh) * dk) * 4);
        // the norms of q and k: each invocation's elements, then fixed-order sums
        vec2 p = vec2(0.0);
        float qe[2], ke[2];
        for (uint m = 0; m < 2; m++) {
            const uint e = lid + WG * m;
            qe[m] = e < dk ? q.v[e] : 0.0;
            ke[m] = e < dk ? k.v[e] : 0.0;
            p += vec2(qe[m] * qe[m], ke[m] * ke[m]);
        }
        nrm[lid] = p;
        barrier();
        if (lid < RW) {
            vec2 a = nrm[lid * CW];
            for (uint m = 1; m < CW; m++) a += nrm[lid * CW + m];
            nrm2[lid] = a;
        }
        barrier();
        vec2 ss = nrm2[0];
        for (uint m = 1; m < RW; m++) ss += nrm2[m];
        const float rq = pc.u[6] != 0u ? qscale / sqrt(ss.x + eps) : qscale;
        const float rk = pc.u[6] != 0u ? 1.0 / sqrt(ss.y + eps) : 1.0;
        for (uint m = 0; m < 2; m++) {
            const uint e = lid + WG * m;
            if (e < dk) {
                qs[e] = qe[m] * rq;
                ks[e] = ke[m] * rk;
            }
        }
        barrier();
        const float decay = exp(gl.v[t * H + h]), bt = beta.v[t * H + h];
        const float v = live ? BF32(pc.a).v[uint(uint64_t(t) * W + 2 * uint64_t(Hk) * dk + h * dv + j)] : 0.0;
        float kv = 0.0;
        for (uint r = 0; r < MAXR; r++) {
            const uint i = rg + RW * r;
            if (i < dk) {
                Sr[r] *= decay;
                kv += Sr[r] * ks[i];
            }
        }
        red_kv[rg][c] = kv;
        barrier();
        kv = red_kv[0][c];
        for (uint m = 1; m < RW; m++) kv += red_kv[m][c];
        const float d = (v - kv) * bt;
        float acc = 0.0;
        for (uint r = 0; r < MAXR; r++) {
            const uint i = rg + RW * r;
            if (i < dk) {
                Sr[r] += ks[i] * d;
                acc += Sr[r] * qs[i];
            }
        }
        red_o[rg][c] = acc;
        barrier();
        if (rg == 0u && live) {
            acc = red_o[0][c];
            for (uint m = 1; m < RW; m++) acc += red_o[m][c];
            o.v[(t * H + h) * dv + j] = acc;
        }
    }
    if (t0 == T || !live) return;
    for (uint r = 0; r < MAXR; r++) {
        const uint i = rg + RW * r;
        if (i < dk) Sg.v[i * dv + j] = Sr[r];
    }
}
