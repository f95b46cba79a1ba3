#version 450
// MATMUL for decode and small batches (T <= 8) on int8 activations: y = W x with W [K, N]
// of Q4_K, Q6_K, Q8_0, Q1_0 or TQ2_0 and x already quantized by quant_x.comp.
// a W, b qx int8 [T][K], c dx vec2 [T][K/32] (d, d * sum(q)), o y F32 [N, T].
// u[0] K, u[1] N, u[2] T (<= MAXT), u[3] W row bytes, u[4] rows per workgroup, u[5] stage x in
// shared memory (set only when T * K <= SQ * 16), u[10] workgroups.
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
#define WG 128
// Tokens the accumulators are laid out for: 8, or 1 for the one-token pipeline (a
// specialization constant, so the token loops unroll and acc stays in registers).
layout(constant_id = 1) const uint MAXT = 8;
#define SQ 768  // uvec4 of staged qx: T * K <= 12,288
#define SD 384  // vec2 of staged dx
layout(local_size_x = WG) in;

spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4_(uint a, uint b, spirv_literal int packed_format);
// c + the dot product of the 4 signed bytes of a and b.
int dp4(uint a, uint b, int c) { return c + sdot4_(a, b, 0); }

layout(buffer_reference, std430, buffer_reference_align = 16) buffer BU4 { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer BV2 { vec2 v[]; };

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

uint byte_of(uint w, uint k) { return (w >> (8u * k)) & 255u; }

// Units per block.
const uint UPB = TYPE == T_Q8_0 ? 1 : 4;

// acc[t] += unit u of the row at `row`, dotted with token t's x, for t < T.
void unit_dot(uint64_t row, uint u, uint T, inout float acc[MAXT]) {
    uint b = u / UPB, s = u % UPB;
    if (TYPE == T_Q4_K) {
        // s: 32 bytes of qs: low nibbles are sub-block 2s (elements 64s + [0, 32)), high
        // nibbles sub-block 2s + 1. The min term uses x's d * sum(q) (dx.y).
        uint64_t blk = row + uint64_t(b) * 144;
        uvec4 hd = BU4(blk).v[0], qa = BU4(blk + 16 + 32 * s).v[0], qb = BU4(blk + 32 + 32 * s).v[0];
        vec2 dm = unpackHalf2x16(hd.x);
        // 6-bit scale and min of sub-blocks 2s and 2s + 1 (k = their index mod 4)
        bool lo = s < 2;
        uint k0 = (2 * s) & 3u, k1 = k0 + 1;
        uint sl = lo ? byte_of(hd.y, k0) & 63u : (byte_of(hd.w, k0) & 15u) | ((byte_of(hd.y, k0) >> 6) << 4);
        uint ml = lo ? byte_of(hd.z, k0) & 63u : (byte_of(hd.w, k0) >> 4) | ((byte_of(hd.z, k0) >> 6) << 4);
        uint sh = lo ? byte_of(hd.y, k1) & 63u : (byte_of(hd.w, k1) & 15u) | ((byte_of(hd.y, k1) >> 6) << 4);
        uint mh = lo ? byte_of(hd.z, k1) & 63u : (byte_of(hd.w, k1) >> 4) | ((byte_of(hd.z, k1) >> 6) << 4);
        uint e = 256 * b + 64 * s, c = 8 * b + 2 * s;
        for (uint t = 0; t < MAXT; t++) {
            if (t >= T) break;
            uvec4 x0 = xq(t, e), x1 = xq(t, e + 16), x2 = xq(t, e + 32), x3 = xq(t, e + 48);
            int dl = 0, dh = 0;
            for (uint i = 0; i < 4; i++) {
                dl = dp4(qa[i] & 0x0f0f0f0fu, x0[i], dl);
                dl = dp4(qb[i] & 0x0f0f0f0fu, x1[i], dl);
                dh = dp4((qa[i] >> 4) & 0x0f0f0f0fu, x2[i], dh);
                dh = dp4((qb[i] >> 4) & 0x0f0f0f0fu, x3[i], dh);
            }
            vec2 f0 = xd(t, c), f1 = xd(t, c + 1);
            acc[t] += dm.x * (float(int(sl) * dl) * f0.x + float(int(sh) * dh) * f1.x) -
                      dm.y * (float(ml) * f0.y + float(mh) * f1.y);
        }
    } else if (TYPE == T_Q6_K) {
        // s: half g = s / 2 (128 elements), bytes j0 = 16 (s % 2) on: ql [64g + j0, +16)
        // holds sub-blocks r = 0 (low) and 2 (high), ql [64g + 32 + j0, +16) r = 1 and 3,
        // qh [128 + 32g + j0, +16) two bits of each; r covers elements 128g + 32r + j0 +
        // [0, 16), one scale. Weights are 6-bit unsigned; the -32 comes off as 32 sum(x).
        uint64_t blk = row + uint64_t(b) * 210;
        uint g = s / 2, j0 = 16 * (s % 2);
        uint A[4], B[4], H[4];
        ld16(blk + 64 * g + j0, A);
        ld16(blk + 64 * g + 32 + j0, B);
        ld16(blk + 128 + 32 * g + j0, H);
        uvec2 scw = ld8(blk + 192 + 8 * g);
        float d = ldh2(blk + 208);
        for (uint t = 0; t < MAXT; t++) {
            if (t >= T) break;
            float a = 0.0;
            for (uint r = 0; r < 4; r++) {
                uint ns = 4 * (r >> 1), hs = 2 * r;
                uvec4 xv = xq(t, 256 * b + 128 * g + 32 * r + j0);
                int si = 0, sx = 0;
                for (uint i = 0; i < 4; i++) {
                    uint lo = (r & 1u) != 0u ? B[i] : A[i];
                    uint w = ((lo >> ns) & 0x0f0f0f0fu) | (((H[i] >> hs) << 4) & 0x30303030u);
                    si = dp4(w, xv[i], si);
                    sx = dp4(0x20202020u, xv[i], sx);
                }
                uint sb = 2 * r + j0 / 16; // scale byte of scw
                float sc = float(bitfieldExtract(int(scw[sb / 4]), int(8 * (sb % 4)), 8));
                a += sc * xd(t, 8 * b + 4 * g + r).x * float(si - sx);
            }
            acc[t] += d * a;
        }
    } else if (TYPE == T_TQ2_0) {
        // s: half g = s / 2, bytes m0 = 16 (s % 2) on of qs [32g, +32): each byte holds the
        // 2-bit trits of elements 128g + 32r + m0 + [0, 16) at shift 2r; value trit - 1.
        uint64_t blk = row + uint64_t(b) * 66;
        uint g = s / 2, m0 = 16 * (s % 2);
        uint Q[4];
        ld16(blk + 32 * g + m0, Q);
        float d = ldh2(blk + 64);
        for (uint t = 0; t < MAXT; t++) {
            if (t >= T) break;
            float a = 0.0;
            for (uint r = 0; r < 4; r++) {
                uvec4 xv = xq(t, 256 * b + 128 * g + 32 * r + m0);
                int si = 0, sx = 0;
                for (uint i = 0; i < 4; i++) {
                    si = dp4((Q[i] >> (2 * r)) & 0x03030303u, xv[i], si);
                    sx = dp4(0x01010101u, xv[i], sx);
                }
                a += xd(t, 8 * b + 4 * g + r).x * float(si - sx);
            }
            acc[t] += d * a;
        }
    } else if (TYPE == T_Q8_0) {
        uint64_t blk = row + uint64_t(b) * 34;
        uint W[8];
        ld32(blk + 2, W);
        float d = ldh2(blk);
        for (uint t = 0; t < MAXT; t++) {
            if (t >= T) break;
            uvec4 x0 = xq(t, 32 * b), x1 = xq(t, 32 * b + 16);
            int si = 0;
            for (uint i = 0; i < 4; i++) {
                si = dp4(W[i], x0[i], si);
                si = dp4(W[4 + i], x1[i], si);
            }
            acc[t] += d * xd(t, b).x * float(si);
        }
    } else if (TYPE == T_Q1_0) {
        // s: elements 32s .. 32s + 31 of the block's 128, the bits of word s of its 16 bytes:
        // bit set -> +d, clear -> -d; sum(sign * q) = 2 sum(bit * q) - sum(q), the last
        // from dx.y. Each 4 bits become four 0/1 bytes.
        uint64_t blk = row + uint64_t(b) * 18;
        uint bits = ld4(blk + 2 + 4 * s);
        float d = ldh2(blk);
        for (uint t = 0; t < MAXT; t++) {
            if (t >= T) break;
            uvec4 x0 = xq(t, 128 * b + 32 * s), x1 = xq(t, 128 * b + 32 * s + 16);
            int si = 0;
            for (uint k = 0; k < 4; k++) {
                si = dp4(((bits >> (4 * k)) & 15u) * 0x00204081u & 0x01010101u, x0[k], si);
                si = dp4(((bits >> (4 * k + 16)) & 15u) * 0x00204081u & 0x01010101u, x1[k], si);
            }
            vec2 f = xd(t, 4 * b + s);
            acc[t] += d * (2.0 * f.x * float(si) - f.y);
        }
    }
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint g = group_id();
    if (g >= pc.u[10]) return; // uniform over the workgroup
    uint K = pc.u[0], N = pc.u[1], T = pc.u[2], RW = pc.u[4];
    staged = pc.u[5] != 0;
    if (staged) {
        uint nq = T * K / 16, nd = T * K / 32;
        for (uint i = tid; i < nq; i += WG) sq[i] = BU4(pc.b).v[i];
        for (uint i = tid; i < nd; i += WG) sd[i] = BV2(pc.c).v[i];
        barrier();
    }
    uint U = K / BS * UPB, lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize;
    for (uint r = gl_SubgroupID; r < RW; r += gl_NumSubgroups) {
        uint n = g * RW + r;
        if (n >= N) break; // uniform over the subgroup
        uint64_t row = pc.a + uint64_t(n) * pc.u[3];
        float acc[MAXT];
        for (uint t = 0; t < MAXT; t++) acc[t] = 0.0;
        // several units per step where they exist: their loads are all in flight at once
        // (four for one token; two where 8 tokens' accumulators take the registers)
        uint u = lane;
        if (MAXT == 1)
            for (; u + 3 * sgs < U; u += 4 * sgs) {
                unit_dot(row, u, T, acc);
                unit_dot(row, u + sgs, T, acc);
                unit_dot(row, u + 2 * sgs, T, acc);
                unit_dot(row, u + 3 * sgs, T, acc);
            }
        for (; u + sgs < U; u += 2 * sgs) {
            unit_dot(row, u, T, acc);
            unit_dot(row, u + sgs, T, acc);
        }
        if (u < U) unit_dot(row, u, T, acc);
        for (uint t = 0; t < MAXT; t++) {
            if (t >= T) break;
            float s = subgroupAdd(acc[t]);
            if (subgroupElect()) BF32(pc.o).v[t * N + n] = s;
        }
    }
}
