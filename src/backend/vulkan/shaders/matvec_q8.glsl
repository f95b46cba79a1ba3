// The body of matvec_q8.comp and matvec_q8_pn.comp (MATVEC_PN).
// MATMUL for decode and small batches (T <= 8) on int8 activations: y = W x with W [K, N]
// of Q4_K, Q6_K, Q8_0, Q1_0 or TQ2_0 and x already quantized by quant_x.comp.
// a W, b qx int8 [T][K], c dx vec2 [T][K/32] (d, d * sum(q)), o y F32 [N, T].
// u[0] K, u[1] N, u[2] T (<= MAXT; any count with DET, below), u[3] W row bytes, u[4] rows
// per workgroup, u[5] stage x in shared memory (set only when T * K <= SQ * 16), u[6]
// (one-token pipelines only) 1: the x-in-registers path of RS rows per subgroup (0: the
// per-row path), u[7] 1 (that path):
// the residual ADD after the matmul fused in (d the other addend, o the sum, e one sum of
// squares per subgroup), u[10] workgroups.
//
// The f32 matvec (matvec.comp) turns every weight into a float and spends ~6 instructions
// per weight; here weight bytes meet int8 activations in 4-wide integer dot products
// (SPV_KHR_integer_dot_product, dp4a on NVIDIA), so a weight costs well under one
// instruction and the shader streams W at memory speed. Each weight block is cut into
// units of 32 or 64 elements; a subgroup owns a row and its lanes walk the row's units
// in order, so neighbouring lanes read neighbouring bytes. Block scales are applied to
// each unit's integer sums, and the activation scales per 32 elements (dx) after that.
#extension GL_EXT_spirv_intrinsics : require
#include "common.glsl"
#include "dequant.glsl"
#include "ld2.glsl"
#ifdef MATVEC_PN
// matvec_q8_pn.comp: the workgroup size is specialization constant 6 (256 for the
// producer, 128 for the consumers), PN constant 5 (below).
layout(local_size_x_id = 6) in;
#define WG gl_WorkGroupSize.x
#else
#define WG 128
#endif
// Tokens the accumulators are laid out for: 8, or 1 for the one-token pipeline (a
// specialization constant, so the token loops unroll and acc stays in registers).
layout(constant_id = 1) const uint MAXT = 8;
#define SQ 768  // uvec4 of staged qx: T * K <= 12,288
#define SD 384  // vec2 of staged dx
// Rows per subgroup of the one-token path (8, 4, 2 or 1), and the units per lane whose x it
// holds at once: 1, or 2 for Q1_0 and Q8_0 under 8 rows (a K = 4096 row of 64 units then
// fills the lanes twice). One unit at a time is faster for Q4_K, Q6_K and TQ2_0 (not by
// registers: TQ2_0's 4-row pipeline keeps 76); Q1_0 keeps 2 (bench/NOTES.md: Session 18).
layout(constant_id = 2) const uint RS = 8;
// Gate/up/GLU mode of the one-token path (RS = 8; 2 in matvec_q8_pn.comp's consumer, at
// 512 invocations): a W gate and d W up (both u[3] row bytes), rows of both dotted with the
// same x in registers; e gets act.glsl's glu(gate, up) (u[8] its kind, f[4] and f[5]
// GLU_SWIGLU_OAI's alpha and limit), o its int8 form (q8.glsl)
// per 32 rows, dx at o + u[9]. A workgroup's rows (u[4]) are whole 32-row blocks and N a
// multiple of 32 (the host checks).
layout(constant_id = 3) const bool GLU = false;
// Int8 x with scales per 16 elements, not 32 (dx: float [K / 16], in q8_vec4_16's order).
// Without GLU, x is read so: TQ2_0 and Q6_K rows only (their units pair x with the weights in runs
// of 16 elements, one scale a run), never staged. In GLU mode (the prenorm gate/up/GLU
// consumer, on a prenorm's x of 32-element blocks) the GLU's int8 output is written so: 16
// rows a workgroup, 8 subgroups of 2, whole blocks.
layout(constant_id = 8) const bool X16 = false;
const bool X16_IN = X16 && !GLU;
// Batch-invariant mode (the backend's deterministic flag, vk_ops.c): the host sends every
// token count, one included, through the multi-token pipeline's per-row path, and T may
// exceed MAXT: the tokens go in chunks of MAXT, each reduced as a batch of its own. A
// token's sum for a row then runs over the same units, lanes and subgroupAdd whatever T
// is and whichever chunk holds it (the one-token pipelines' x-in-registers path walks
// the same units but is other code, which a driver may contract into FMAs otherwise).
layout(constant_id = 9) const bool DET = false;
#include "act.glsl"
#include "q8.glsl"
shared float gv[WG]; // GLU: the workgroup's outputs (at most WG rows: 8 a subgroup, >= 16 lanes)
const uint CH = RS == 8 || TYPE == T_Q4_K || TYPE == T_Q6_K || TYPE == T_TQ2_0 ? 1 : 2;
#ifndef MATVEC_PN
layout(local_size_x = WG) in;
#endif

spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4_(uint a, uint b, spirv_literal int packed_format);
// c + the dot product of the 4 signed bytes of a and b.
int dp4(uint a, uint b, int c) { return c + sdot4_(a, b, 0); }
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4452)
int sudot4_(uint a, uint b, spirv_literal int packed_format);
// c + the dot product of the 4 signed bytes of a with the 4 unsigned bytes of b.
int dp4su(uint a, uint b, int c) { return c + sudot4_(a, b, 0); }

layout(buffer_reference, std430, buffer_reference_align = 16) buffer BU4 { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer BV2 { vec2 v[]; };

#ifdef MATVEC_PN
// The prenorm's two addresses: G in f[1] | f[2] << 32, H in u[9] | f[3] << 32, as bits.
uint64_t tail_g() { return uint64_t(floatBitsToUint(pc.f[1])) | uint64_t(floatBitsToUint(pc.f[2])) << 32; }
uint64_t tail_h() { return uint64_t(pc.u[9]) | uint64_t(floatBitsToUint(pc.f[3])) << 32; }
// Prenorm (vk_ops.c, ob_vk_prenorm_ok): the RMS norm between a one-token matmul + residual
// ADD and the one-token matmuls that read it is not dispatched. The producer (PN 1, the
// residual path, rows in whole 32-row blocks per workgroup) writes each block of h * w (h
// the sum, w the norm's weight at G, 0: none) as int8 at H (qx, then dx after u[1] rounded
// up to 16 bytes) and its workgroup's sum of h^2 to e[g]. The int8 x of h * w differs from
// that of the norm's output only by the factor r = 1 / sqrt(mean(h^2) + eps) on every
// block scale, so each consumer (PN 2) takes r from the u[8] sums at e (f[0] eps, u[0] the
// row length) and scales its dot products by it.
layout(constant_id = 5) const uint PN = 0;
float pn_scale() {
    float s = 0.0;
    for (uint i = gl_SubgroupInvocationID; i < pc.u[8]; i += gl_SubgroupSize) s += BF32(pc.e).v[i];
    return inversesqrt(subgroupAdd(s) / float(pc.u[0]) + pc.f[0]);
}
#endif

shared uvec4 sq[SQ];
shared vec2 sd[SD];
bool staged;

// 16 bytes of qx at element e (a multiple of 16) of token t; dx of 32-block c of token t.
uvec4 xq(uint t, uint e) {
    uint i = (t * pc.u[0] + e) / 16;
    return staged ? sq[i] : BU4(pc.b).v[i];
}
vec2 xd(uint t, uint c) {
    uint i = t * (pc.u[0] / 32) + c;
    return staged ? sd[i] : BV2(pc.c).v[i];
}
// X16: the scales of the four 16-element runs of unit s of block b, token t (q8_vec4_16's
// order puts them together).
layout(buffer_reference, std430, buffer_reference_align = 16) buffer BX16 { vec4 v[]; };
vec4 xd16(uint t, uint b, uint s) { return BX16(pc.c).v[(t * (pc.u[0] / 16) + 16 * b + 4 * s) / 4]; }

uint byte_of(uint w, uint k) { return (w >> (8u * k)) & 255u; }

// Units per block.
const uint UPB = TYPE == T_Q8_0 ? 1 : 4;

// A unit's weight words, laid out per type (unused words stay 0):
//   Q4_K  w[0..3] the block's first 16 bytes (d, dmin, 12 scale bytes), w[4..7] and
//         w[8..11] the unit's two 16-byte runs of qs;
//   Q6_K  w[0..3] ql run A, w[4..7] ql run B, w[8..11] the qh run, w[12..13] the half's 8
//         scales, w[14] d;
//   TQ2_0 w[0..3] the unit's 16 bytes of qs, w[4] d;
//   Q8_0  w[0..7] the 32 codes, w[8] d;
//   Q1_0  w[0] the unit's 32 sign bits, w[1] d.
#define NWU 15
void unit_w(uint64_t row, uint u, out uint w[NWU]) {
    uint b = u / UPB, s = u % UPB;
    for (uint i = 0; i < NWU; i++) w[i] = 0u;
    if (TYPE == T_Q4_K) {
        // s: 32 bytes of qs: low nibbles are sub-block 2s (elements 64s + [0, 32)), high
        // nibbles sub-block 2s + 1
        uint64_t blk = row + uint64_t(b) * 144;
        uvec4 hd = BU4(blk).v[0], qa = BU4(blk + 16 + 32 * s).v[0], qb = BU4(blk + 32 + 32 * s).v[0];
        for (uint i = 0; i < 4; i++) {
            w[i] = hd[i];
            w[4 + i] = qa[i];
            w[8 + i] = qb[i];
        }
    } else if (TYPE == T_Q6_K) {
        // s: half g = s / 2 (128 elements), bytes j0 = 16 (s % 2) on: ql [64g + j0, +16)
        // holds sub-blocks r = 0 (low) and 2 (high), ql [64g + 32 + j0, +16) r = 1 and 3,
        // qh [128 + 32g + j0, +16) two bits of each; r covers elements 128g + 32r + j0 +
        // [0, 16), one scale.
        uint64_t blk = wblk(row, b);
        uint g = s / 2, j0 = 16 * (s % 2);
        uint A[4], B[4], H[4];
        ld16(blk + 64 * g + j0, A);
        ld16(blk + 64 * g + 32 + j0, B);
        ld16(blk + 128 + 32 * g + j0, H);
        uvec2 scw = ld8(blk + 192 + 8 * g);
        for (uint i = 0; i < 4; i++) {
            w[i] = A[i];
            w[4 + i] = B[i];
            w[8 + i] = H[i];
        }
        w[12] = scw.x;
        w[13] = scw.y;
        w[14] = floatBitsToUint(ldh2(wd(row, b)));
    } else if (TYPE == T_TQ2_0) {
        // s: half g = s / 2, bytes m0 = 16 (s % 2) on of qs [32g, +32): each byte holds the
        // 2-bit trits of elements 128g + 32r + m0 + [0, 16) at shift 2r
        uint Q[4];
        ld16(wblk(row, b) + 32 * (s / 2) + 16 * (s % 2), Q);
        for (uint i = 0; i < 4; i++) w[i] = Q[i];
        w[4] = floatBitsToUint(ldh2(wd(row, b)));
    } else if (TYPE == T_Q8_0) {
        uint W[8];
        ld32(wblk(row, b) + 2, W);
        for (uint i = 0; i < 8; i++) w[i] = W[i];
        w[8] = floatBitsToUint(ldh2(wd(row, b)));
    } else if (TYPE == T_Q1_0) {
        // s: elements 32s .. 32s + 31 of the block's 128, the bits of word s of its 16 bytes
        w[0] = ld4(wblk(row, b) + 2 + 4 * s);
        w[1] = floatBitsToUint(ldh2(wd(row, b)));
    }
}

// Token t's x for unit u: q[0..3] 16 int8 each (the runs unit_dot pairs with the weights),
// d the activation scales it needs (dx.x of each 32-element run, or dx.xy where the
// weights have a min or sign term), e what the weights' offset takes off, from x alone
// (TQ2_0: e.x = sum over runs of d * sum(q); Q6_K: e[r] = 32 d[r] sum(q) of run r).
void unit_x(uint t, uint u, out uvec4 q[4], out vec4 d, out vec4 e) {
    uint b = u / UPB, s = u % UPB;
    q[0] = q[1] = q[2] = q[3] = uvec4(0u);
    d = vec4(0.0);
    e = vec4(0.0);
    if (TYPE == T_Q4_K) {
        uint e = 256 * b + 64 * s, c = 8 * b + 2 * s;
        for (uint i = 0; i < 4; i++) q[i] = xq(t, e + 16 * i);
        d = vec4(xd(t, c), xd(t, c + 1));
    } else if (TYPE == T_Q6_K || TYPE == T_TQ2_0) {
        uint g = s / 2, j0 = 16 * (s % 2);
        const vec4 d16 = X16_IN ? xd16(t, b, s) : vec4(0.0);
        for (uint r = 0; r < 4; r++) {
            q[r] = xq(t, 256 * b + 128 * g + 32 * r + j0);
            d[r] = X16_IN ? d16[r] : xd(t, 8 * b + 4 * g + r).x;
            int sx = 0;
            for (uint i = 0; i < 4; i++) sx = dp4(TYPE == T_Q6_K ? 0x20202020u : 0x01010101u, q[r][i], sx);
            e[r] = d[r] * float(sx);
        }
        if (TYPE == T_TQ2_0) {
            e = vec4(e.x + e.y + e.z + e.w, 0.0, 0.0, 0.0);
            // unit_dot leaves run r's trits at bit 2r (4^r times their value): 4^-r here,
            // once per x rather than a shift per weight word and row (exact: powers of 2)
            d *= vec4(1.0, 0.25, 0.0625, 0.015625);
        }
    } else if (TYPE == T_Q8_0) {
        q[0] = xq(t, 32 * b);
        q[1] = xq(t, 32 * b + 16);
        d.x = xd(t, b).x;
    } else if (TYPE == T_Q1_0) {
        q[0] = xq(t, 128 * b + 32 * s);
        q[1] = xq(t, 128 * b + 32 * s + 16);
        d.xy = xd(t, 4 * b + s);
    }
}

// Unit u's weights (unit_w) dotted with one token's x (unit_x).
float unit_dot(uint u, uint w[NWU], uvec4 q[4], vec4 d, vec4 e) {
    uint s = u % UPB;
    if (TYPE == T_Q4_K) {
        // 6-bit scale and min of sub-blocks 2s and 2s + 1 (k = their index mod 4); the min
        // term uses x's d * sum(q) (d.y, d.w)
        vec2 dm = unpackHalf2x16(w[0]);
        bool lo = s < 2;
        uint k0 = (2 * s) & 3u, k1 = k0 + 1;
        uint sl = lo ? byte_of(w[1], k0) & 63u : (byte_of(w[3], k0) & 15u) | ((byte_of(w[1], k0) >> 6) << 4);
        uint ml = lo ? byte_of(w[2], k0) & 63u : (byte_of(w[3], k0) >> 4) | ((byte_of(w[2], k0) >> 6) << 4);
        uint sh = lo ? byte_of(w[1], k1) & 63u : (byte_of(w[3], k1) & 15u) | ((byte_of(w[1], k1) >> 6) << 4);
        uint mh = lo ? byte_of(w[2], k1) & 63u : (byte_of(w[3], k1) >> 4) | ((byte_of(w[2], k1) >> 6) << 4);
        int dl = 0, dh = 0;
        for (uint i = 0; i < 4; i++) {
            dl = dp4(w[4 + i] & 0x0f0f0f0fu, q[0][i], dl);
            dl = dp4(w[8 + i] & 0x0f0f0f0fu, q[1][i], dl);
            // high nibbles masked in place (16 times their value, unsigned): 1/16 below
            dh = dp4su(q[2][i], w[4 + i] & 0xf0f0f0f0u, dh);
            dh = dp4su(q[3][i], w[8 + i] & 0xf0f0f0f0u, dh);
        }
        return dm.x * (float(int(sl) * dl) * d.x + float(int(sh) * dh) * (d.z * 0.0625)) - dm.y * (float(ml) * d.y + float(mh) * d.w);
    } else if (TYPE == T_Q6_K) {
        // weights are 6-bit unsigned; the -32 comes off as 32 sum(x) (e)
        uint j0 = 16 * (s % 2);
        float a = 0.0;
        for (uint r = 0; r < 4; r++) {
            uint ns = 4 * (r >> 1), hs = 2 * r;
            int si = 0;
            for (uint i = 0; i < 4; i++) {
                uint lo = (r & 1u) != 0u ? w[4 + i] : w[i];
                uint v = ((lo >> ns) & 0x0f0f0f0fu) | (((w[8 + i] >> hs) << 4) & 0x30303030u);
                si = dp4(v, q[r][i], si);
            }
            uint sb = 2 * r + j0 / 16; // scale byte of the half's 8
            float sc = float(bitfieldExtract(int(w[12 + sb / 4]), int(8 * (sb % 4)), 8));
            a += sc * (d[r] * float(si) - e[r]);
        }
        return uintBitsToFloat(w[14]) * a;
    } else if (TYPE == T_TQ2_0) {
        // trit - 1: the -1 comes off as sum(x) (e.x). Run r's trits are masked in place, not
        // shifted: bytes of 4^r * trit, unsigned, and d[r] carries the 4^-r (unit_x)
        float a = 0.0;
        for (uint r = 0; r < 4; r++) {
            int si = 0;
            for (uint i = 0; i < 4; i++) si = dp4su(q[r][i], w[i] & (0x03030303u << (2 * r)), si);
            a += d[r] * float(si);
        }
        return uintBitsToFloat(w[4]) * (a - e.x);
    } else if (TYPE == T_Q8_0) {
        int si = 0;
        for (uint i = 0; i < 4; i++) {
            si = dp4(w[i], q[0][i], si);
            si = dp4(w[4 + i], q[1][i], si);
        }
        return uintBitsToFloat(w[8]) * d.x * float(si);
    } else if (TYPE == T_Q1_0) {
        // bit set -> +d, clear -> -d: sum(sign * q) = 2 sum(bit * q) - sum(q), the last from
        // d.y; each 4 bits become four 0/1 bytes
        int si = 0;
        for (uint k = 0; k < 4; k++) {
            si = dp4(((w[0] >> (4 * k)) & 15u) * 0x00204081u & 0x01010101u, q[0][k], si);
            si = dp4(((w[0] >> (4 * k + 16)) & 15u) * 0x00204081u & 0x01010101u, q[1][k], si);
        }
        return uintBitsToFloat(w[1]) * (2.0 * d.x * float(si) - d.y);
    }
    return 0.0;
}

// acc[t] += unit u of the row at `row`, dotted with token t0 + t's x, for t0 + t < T.
void unit_acc(uint64_t row, uint u, uint t0, uint T, inout float acc[MAXT]) {
    uint w[NWU];
    unit_w(row, u, w);
    for (uint t = 0; t < MAXT; t++) {
        if (t0 + t >= T) break;
        uvec4 q[4];
        vec4 d, e;
        unit_x(t0 + t, u, q, d, e);
        acc[t] += unit_dot(u, w, q, d, e);
    }
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint g = group_id();
    if (g >= pc.u[10]) return; // uniform over the workgroup
    uint K = pc.u[0], N = pc.u[1], T = pc.u[2], RW = pc.u[4];
    staged = !DET && pc.u[5] != 0;
    if (staged) {
        uint nq = T * K / 16, nd = T * K / 32;
        for (uint i = tid; i < nq; i += WG) sq[i] = BU4(pc.b).v[i];
        for (uint i = tid; i < nd; i += WG) sd[i] = BV2(pc.c).v[i];
        barrier();
    }
    uint U = K / BS * UPB, lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize;
    // The one-token pipelines of fewer than 8 rows a subgroup and the prenorm's only ever
    // take the x-in-registers path (the host sets u[6] for them), so the per-row path after
    // it is not compiled into them: less code for each SM to fetch at a launch.
#if defined(MATVEC_PN)
    const bool REG_ONLY = true;
#else
    const bool REG_ONLY = MAXT == 1 && RS < 8;
#endif
    if (REG_ONLY || (MAXT == 1 && pc.u[6] != 0u)) {
        // One token, RS consecutive rows per subgroup: the lane's x for CH units is loaded
        // once into registers and dotted with each of the rows' units, so x costs 1 / RS of
        // its loads. No branch guards a load (rows and units past the end are clamped and
        // their products dropped): every weight load of a step can be issued before the
        // first arithmetic, as a branch or a store between them would prevent.
        const uint64_t wa = pc.a;
        uint n0 = g * RW + gl_SubgroupID * RS;
        if (!GLU && n0 >= N) return; // uniform over the subgroup; no barrier follows
#ifdef MATVEC_PN
        const float rr = PN == 2u ? pn_scale() : 1.0; // loads issued ahead of the weights'
        // the producer's residual rows and norm weights, also loaded ahead of the weights
        float res[RS], nw[RS];
        for (uint r = 0; r < RS; r++) {
            res[r] = PN == 1u ? BF32(pc.d).v[min(n0 + r, N - 1)] : 0.0;
            nw[r] = PN == 1u && tail_g() != 0ul ? BF32(tail_g()).v[min(n0 + r, N - 1)] : 1.0;
        }
#endif
        float acc[RS], acc2[GLU ? RS : 1];
        for (uint r = 0; r < RS; r++) acc[r] = 0.0;
        for (uint r = 0; r < acc2.length(); r++) acc2[r] = 0.0;
        for (uint u0 = 0; u0 < U; u0 += CH * sgs) {
            uvec4 X[CH][4];
            vec4 D[CH], E[CH];
            uint uc[CH];
            bool ok[CH];
            for (uint j = 0; j < CH; j++) {
                uint u = u0 + j * sgs + lane;
                ok[j] = u < U;
                uc[j] = min(u, U - 1);
                unit_x(0, uc[j], X[j], D[j], E[j]);
            }
            for (uint r = 0; r < RS; r++) {
                uint64_t row = wa + uint64_t(min(n0 + r, N - 1)) * pc.u[3];
                for (uint j = 0; j < CH; j++) {
                    uint w[NWU];
                    unit_w(row, uc[j], w);
                    float v = unit_dot(uc[j], w, X[j], D[j], E[j]);
                    acc[r] += ok[j] ? v : 0.0;
                    if (GLU) {
                        unit_w(pc.d + (row - pc.a), uc[j], w);
                        v = unit_dot(uc[j], w, X[j], D[j], E[j]);
                        acc2[r] += ok[j] ? v : 0.0;
                    }
                }
            }
        }
        if (!GLU && pc.u[7] != 0u) {
            // the residual ADD fused in: o = d + W x (o may be d: each row is read, then
            // written, by this subgroup alone, all reads first), and the sum of the rows'
            // squares to e[n0 / RS] for the RMS norm after it
            float ss = 0.0;
#ifndef MATVEC_PN
            float res[RS];
            for (uint r = 0; r < RS; r++) res[r] = BF32(pc.d).v[min(n0 + r, N - 1)];
#endif
            for (uint r = 0; r < RS; r++) {
                float h = res[r] + subgroupAdd(acc[r]);
                if (n0 + r < N) {
                    ss += h * h;
                    if (subgroupElect()) BF32(pc.o).v[n0 + r] = h;
                }
#ifdef MATVEC_PN
                if (PN == 1u && subgroupElect()) gv[gl_SubgroupID * RS + r] = h * nw[r];
#endif
            }
#ifdef MATVEC_PN
            if (PN == 1u) {
                // every row of the workgroup is in (the host checks N % u[4] == 0), so no
                // subgroup returned above and wg_sum's barriers are the whole workgroup's
                // (ss is the same on every lane: one lane's counts)
                const float t = wg_sum(subgroupElect() ? ss : 0.0);
                // 4 rows an invocation, a block's 8 invocations meeting by shuffles (whole
                // subgroups call q8_vec4: the subgroup size is a multiple of 8)
                if (gl_SubgroupID * gl_SubgroupSize < RW / 4u) {
                    const bool live = tid < RW / 4u;
                    const uint j = live ? 4u * tid : 0u;
                    q8_vec4(vec4(gv[j], gv[j + 1], gv[j + 2], gv[j + 3]), live, g * RW / 4u + tid, tail_h(),
                            tail_h() + uint64_t((N + 15u) / 16u * 16u));
                }
                if (tid == 0u) BF32(pc.e).v[g] = t;
                return;
            }
#endif
            if (subgroupElect()) BF32(pc.e).v[n0 / RS] = ss;
            return;
        }
        if (!GLU) {
            for (uint r = 0; r < RS; r++) {
                float s = subgroupAdd(acc[r]);
#ifdef MATVEC_PN
                s *= rr;
#endif
                if (subgroupElect() && n0 + r < N) BF32(pc.o).v[n0 + r] = s;
            }
            return;
        }
        // GLU: act(gate) * up per row, then each block of 32 rows as int8
        for (uint r = 0; r < RS; r++) {
#ifdef MATVEC_PN
            // a prenorm consumer (PN 2): both sums scaled by r; the GLU's output at G, its
            // kind in f[3]'s bits (e and u[8] hold the producer's sums)
            float v = glu(floatBitsToUint(pc.f[3]), rr * subgroupAdd(acc[r]), rr * subgroupAdd(acc2[r]), pc.f[4], pc.f[5]);
            if (subgroupElect()) {
                gv[gl_SubgroupID * RS + r] = v;
                if (n0 + r < N) BF32(tail_g()).v[n0 + r] = v;
            }
#else
            float v = glu(pc.u[8], subgroupAdd(acc[r]), subgroupAdd(acc2[r]), pc.f[4], pc.f[5]);
            if (subgroupElect()) {
                gv[gl_SubgroupID * RS + r] = v;
                if (n0 + r < N) BF32(pc.e).v[n0 + r] = v;
            }
#endif
        }
        barrier();
#ifdef Q8_SHUFFLE
        if (X16) {
            // 16-row blocks (RW = 16): 4 rows an invocation, a block's 4 invocations meeting
            // by shuffles; the first subgroup calls it whole
            if (gl_SubgroupID == 0u) {
                const bool live = tid < RW / 4u && g * RW + 4u * tid < N;
                const uint j = live ? 4u * tid : 0u;
                q8_vec4_16(vec4(gv[j], gv[j + 1], gv[j + 2], gv[j + 3]), live, g * RW / 4u + tid, pc.o, pc.o + pc.u[9]);
            }
            return;
        }
#endif
        uint b0 = g * RW + 32 * tid;
        if (tid < RW / 32 && b0 < N) {
            float x[32];
            for (uint i = 0; i < 32; i++) x[i] = gv[32 * tid + i];
            q8_block(x, pc.o + b0, pc.o + pc.u[9] + uint64_t(b0 / 32) * 8);
        }
        return;
    }
    for (uint r = gl_SubgroupID; r < RW; r += gl_NumSubgroups) {
        uint n = g * RW + r;
        if (n >= N) break; // uniform over the subgroup
        uint64_t row = pc.a + uint64_t(n) * pc.u[3];
        // DET: any T, MAXT tokens at a time, the row's units read again per chunk (from
        // cache); else the one chunk there is (T <= MAXT), and the loop folds away
        for (uint t0 = 0; t0 < (DET ? T : 1u); t0 += MAXT) {
            float acc[MAXT];
            for (uint t = 0; t < MAXT; t++) acc[t] = 0.0;
            // several units per step where they exist: their loads are all in flight at once
            // (four for one token; two where 8 tokens' accumulators take the registers)
            uint u = lane;
            if (MAXT == 1)
                for (; u + 3 * sgs < U; u += 4 * sgs) {
                    unit_acc(row, u, t0, T, acc);
                    unit_acc(row, u + sgs, t0, T, acc);
                    unit_acc(row, u + 2 * sgs, t0, T, acc);
                    unit_acc(row, u + 3 * sgs, t0, T, acc);
                }
            for (; u + sgs < U; u += 2 * sgs) {
                unit_acc(row, u, t0, T, acc);
                unit_acc(row, u + sgs, t0, T, acc);
            }
            if (u < U) unit_acc(row, u, t0, T, acc);
            for (uint t = 0; t < MAXT; t++) {
                if (t0 + t >= T) break;
                float s = subgroupAdd(acc[t]);
                if (subgroupElect()) BF32(pc.o).v[(t0 + t) * N + n] = s;
            }
        }
    }
}
