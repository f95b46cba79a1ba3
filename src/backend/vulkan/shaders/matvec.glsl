// MATMUL for decode and small batches (T <= 8 tokens; any T with DET, below): y = W x with
// a W [K, N] of TYPE, b x F32 [K, T], o y F32 [N, T]. matvec.comp; with MATMUL_ID defined,
// the kernels of matmul_id.comp (one token of one expert a workgroup: MV_W and below).
// u[0] K, u[1] N, u[2] T, u[3] W row bytes, u[4] rows per workgroup, u[5] stage x in
// shared memory (when it fits), u[6] rows per subgroup on the streaming path (0: off),
// u[7] pieces per invocation on the split-K path (0: off), u[10] workgroups.
//
// Decode is bound by reading W once, so: one subgroup per weight row, each invocation
// decoding whole 32-element chunks with wide loads (dequant.glsl), neighbouring lanes on
// neighbouring chunks so a subgroup's loads are contiguous; every token of the batch is
// dotted with one decoded chunk, so W is read once for up to 8 tokens. The subgroup's
// partial sums meet in one subgroupAdd.
//
// x is staged in shared memory once per workgroup when it fits (T * K up to ~4,000),
// transposed so that element j of chunk c sits at j * P + c (P = K/32 + 1): lanes read
// consecutive chunks, so consecutive words, with no bank conflicts. Larger x is read from
// global memory (caches serve the rows of one workgroup).
//
// Rows per workgroup come from the host (subgroups the device reports per 128
// invocations, times rows per subgroup); a subgroup loops over its rows, and over more
// if the driver picked a larger subgroup size than it reports.
#include "common.glsl"
#include "dequant.glsl"
#include "ld2.glsl"
#define WG 128
#define MAXT 8
#define XS 4160
layout(local_size_x = WG) in;
// The workgroup's matrix, x, y and token count: the push constants' (MATMUL), or for
// MATMUL_ID the expert, x row and y row of the workgroup's slot and one token, which
// matmul_id.comp's mv_slot sets (it also moves g from the workgroup to its row block).
#ifdef MATMUL_ID
uint64_t mv_w, mv_x, mv_o;
bool mv_slot(inout uint g);
#define MV_W mv_w
#define MV_X mv_x
#define MV_O mv_o
#define MV_T 1u
#else
#define MV_W pc.a
#define MV_X pc.b
#define MV_O pc.o
#define MV_T pc.u[2]
#endif
// Batch-invariant mode (the backend's deterministic flag, vk_ops.c): the host sends every
// token count, one included, here (never to matmul.comp, never split-K, never staged),
// and T may exceed MAXT: the tokens go in chunks of MAXT, each reduced as a batch of its
// own, so a token's sum for a row runs over the same pieces, lanes and subgroupAdd
// whatever T is and whichever chunk holds it.
layout(constant_id = 9) const bool DET = false;

shared float xs[XS];
layout(buffer_reference, std430, buffer_reference_align = 16) buffer BV4 { vec4 v[]; };

// ---- streaming path (u[6] = rows per subgroup, 0: the path above) -----------------------
// Q4_K, Q6_K, Q8_0, Q1_0 and TQ2_0 (every K a multiple of 32, W 16-aligned, x 16-aligned):
// a row is cut into K/32 "pieces" of 32 elements each (for the K-quants not contiguous:
// the elements that one run of weight bytes encodes), lane l of a subgroup takes pieces
// l, l + S, ... so neighbouring lanes read neighbouring bytes; per piece it loads its
// weight bytes as whole 32-bit words (Q4_K as one 16-byte uvec4) and its 32 x as 8 vec4
// straight from global memory (x is read by every row, so it lives in L1/L2; no staging,
// no barrier), and dots them with the block's scales folded in after the sums. x is
// loaded once per piece and token and used for R rows, so x traffic is 1/R of W's count
// of loads. Blocks of 34, 18, 66 and 210 bytes are only 2-aligned: 32-bit words are read
// at the aligned address and shifted together (ld2.glsl), never past a word that
// holds a byte of the block, so no read leaves the tensor's allocation.
const bool FAST = TYPE == T_Q4_K || TYPE == T_Q6_K || TYPE == T_Q8_0 || TYPE == T_Q1_0 || TYPE == T_TQ2_0;
#define RMAX 4
layout(buffer_reference, std430, buffer_reference_align = 16) buffer BU4 { uvec4 v[]; };

const uvec4 SH8 = uvec4(0, 8, 16, 24);
vec4 nib_lo(uint w) { return vec4((uvec4(w) >> SH8) & 15u); }
vec4 nib_hi(uint w) { return vec4((uvec4(w) >> (SH8 + 4u)) & 15u); }
float hsum(vec4 v) { return dot(v, vec4(1.0)); }

// Element offsets (in x) of the 8 vec4 of piece p: vec4 i covers offs + 4 * i's slot.
uint x_at(uint p, uint i) {
    uint b = p / 8, q = p % 8;
    if (TYPE == T_Q4_K) return 256 * b + 64 * (q / 2) + 16 * (q % 2) + 32 * (i / 4) + 4 * (i % 4);
    if (TYPE == T_Q6_K || TYPE == T_TQ2_0) return 256 * b + 128 * (q / 4) + 8 * (q % 4) + 32 * (i / 2) + 4 * (i % 2);
    return 32 * p + 4 * i; // Q8_0, Q1_0: contiguous
}

void x_load(uint64_t xrow, uint p, out vec4 xv[8]) {
    BV4 x = BV4(xrow);
    for (uint i = 0; i < 8; i++) xv[i] = x.v[x_at(p, i) / 4];
}

// Piece p of the row at `row`, dotted with its x.
float piece_dot(uint64_t row, uint p, vec4 xv[8]) {
    uint b = p / 8, q = p % 8;
    if (TYPE == T_Q4_K) {
        uint64_t blk = row + uint64_t(b) * 144;
        vec2 dm = unpackHalf2x16(BU32(blk).v[0]);
        uint sw[3];
        for (uint i = 0; i < 3; i++) sw[i] = BU32(blk + 4 + 4 * i).v[0];
        uint g = q / 2;
        // sub-blocks 2g (low nibbles) and 2g+1 (high nibbles); both forms of the 6-bit
        // scale/min unpacking, selected, so lanes of different g do not diverge
        float sc[2], mn[2];
        for (uint k = 0; k < 2; k++) {
            uint s = 2 * g + k;
            uint sl = WB(sw, s & 3u), ml = WB(sw, (s & 3u) + 4u), hh = WB(sw, (s & 3u) + 8u);
            uint sc6 = s < 4 ? sl & 63u : (hh & 15u) | ((sl >> 6) << 4);
            uint m6 = s < 4 ? ml & 63u : (hh >> 4) | ((ml >> 6) << 4);
            sc[k] = dm.x * float(sc6);
            mn[k] = dm.y * float(m6);
        }
        uvec4 qv = BU4(blk + 16 + 32 * g + 16 * (q % 2)).v[0];
        float dl = 0.0, dh = 0.0, xl = 0.0, xh = 0.0;
        for (uint k = 0; k < 4; k++) {
            dl += dot(nib_lo(qv[k]), xv[k]);
            dh += dot(nib_hi(qv[k]), xv[4 + k]);
            xl += hsum(xv[k]);
            xh += hsum(xv[4 + k]);
        }
        return sc[0] * dl - mn[0] * xl + sc[1] * dh - mn[1] * xh;
    } else if (TYPE == T_Q6_K) {
        uint64_t blk = wblk(row, b);
        uint n = q / 4, l0 = 8 * (q % 4);
        uvec2 lo0 = ld8(blk + 64 * n + l0), lo1 = ld8(blk + 64 * n + 32 + l0), hi = ld8(blk + 128 + 32 * n + l0);
        uvec2 scw = ld8(blk + 192 + 8 * n);
        uint c = l0 / 16; // scale of x_at's group k is byte 8n + 2k + c of the 16
        float s = 0.0;
        for (uint k = 0; k < 4; k++) {
            float d = 0.0, xs = 0.0;
            for (uint h = 0; h < 2; h++) {
                uint lw = (k % 2 == 0 ? lo0 : lo1)[h];
                vec4 l4 = k < 2 ? nib_lo(lw) : nib_hi(lw);
                vec4 h4 = vec4(((uvec4(hi[h]) >> (SH8 + 2u * k)) & 3u) << 4);
                d += dot(l4 + h4, xv[2 * k + h]);
                xs += hsum(xv[2 * k + h]);
            }
            uint sb = 2 * k + c; // byte of scw
            float sc = float(bitfieldExtract(int(scw[sb / 4]), int(8 * (sb % 4)), 8));
            s += sc * (d - 32.0 * xs);
        }
        return ldh2(wd(row, b)) * s;
    } else if (TYPE == T_TQ2_0) {
        uvec2 qw = ld8(wblk(row, b) + 32 * (q / 4) + 8 * (q % 4));
        float d = 0.0, xs = 0.0;
        for (uint l = 0; l < 4; l++)
            for (uint h = 0; h < 2; h++) {
                d += dot(vec4((uvec4(qw[h]) >> (SH8 + 2u * l)) & 3u), xv[2 * l + h]);
                xs += hsum(xv[2 * l + h]);
            }
        return ldh2(wd(row, b)) * (d - xs);
    } else if (TYPE == T_Q8_0) {
        uint64_t blk = wblk(row, p);
        float d = 0.0;
        for (uint k = 0; k < 4; k++) {
            uvec2 w = ld8(blk + 2 + 8 * k);
            for (uint h = 0; h < 2; h++)
                d += dot(vec4(ivec4(uvec4(w[h]) << (uvec4(24) - SH8)) >> 24), xv[2 * k + h]);
        }
        return ldh2(wd(row, p)) * d;
    } else if (TYPE == T_Q1_0) {
        uint bits = ld4(wblk(row, p / 4) + 2 + 4 * (p % 4));
        float d = 0.0, xs = 0.0;
        for (uint i = 0; i < 8; i++) {
            d += dot(vec4((uvec4(bits) >> (uvec4(0, 1, 2, 3) + 4u * i)) & 1u), xv[i]);
            xs += hsum(xv[i]);
        }
        return ldh2(wd(row, p / 4)) * (2.0 * d - xs);
    }
    return 0.0;
}

void main_fast(uint g) {
    uint K = pc.u[0], N = pc.u[1], T = MV_T, RW = pc.u[4], R = pc.u[6], P = K / 32;
    uint lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize;
    for (uint r0 = gl_SubgroupID * R; r0 < RW; r0 += gl_NumSubgroups * R) {
        uint n0 = g * RW + r0;
        if (n0 >= N) break; // uniform over the subgroup
        uint64_t rows[RMAX];
        for (uint r = 0; r < RMAX; r++) rows[r] = MV_W + uint64_t(min(n0 + r, N - 1)) * pc.u[3];
        // DET: tokens t0 .. t0 + MAXT - 1 a pass (the header); else the one pass there is
        for (uint t0 = 0; t0 < (DET ? T : 1u); t0 += MAXT) {
            float acc[RMAX * MAXT];
            for (uint i = 0; i < RMAX * MAXT; i++) acc[i] = 0.0;
            vec4 xv[8], xw[8];
            // Two pieces per step where both exist (uniform over the subgroup when P is a
            // multiple of S): one straight run of loads, so twice the bytes are in flight.
            for (uint p = lane; p < P;) {
                if (p + sgs < P) {
                    for (uint t = 0; t < MAXT; t++) {
                        if (t0 + t >= T) break;
                        x_load(MV_X + uint64_t(t0 + t) * K * 4, p, xv);
                        x_load(MV_X + uint64_t(t0 + t) * K * 4, p + sgs, xw);
                        for (uint r = 0; r < RMAX; r++) {
                            if (r >= R) break;
                            acc[r * MAXT + t] += piece_dot(rows[r], p, xv) + piece_dot(rows[r], p + sgs, xw);
                        }
                    }
                    p += 2 * sgs;
                } else {
                    for (uint t = 0; t < MAXT; t++) {
                        if (t0 + t >= T) break;
                        x_load(MV_X + uint64_t(t0 + t) * K * 4, p, xv);
                        for (uint r = 0; r < RMAX; r++) {
                            if (r >= R) break;
                            acc[r * MAXT + t] += piece_dot(rows[r], p, xv);
                        }
                    }
                    p += sgs;
                }
            }
            for (uint r = 0; r < RMAX; r++) {
                if (r >= R) break;
                for (uint t = 0; t < MAXT; t++) {
                    if (t0 + t >= T) break;
                    float s = subgroupAdd(acc[r * MAXT + t]);
                    if (subgroupElect() && n0 + r < N) BF32(MV_O).v[(t0 + t) * N + n0 + r] = s;
                }
            }
        }
    }
}

// ---- split-K path (u[7] = pieces per invocation PPI = K / 4096, 1..3; one token) ----------
// ONEBIT_VK_MATVEC_SPLITK=1; off by default: no faster (bench/NOTES-cuda-3-7.md: Session 7). Invocation i of the
// workgroup owns pieces i + WG j (j < PPI) of every row, so its x (8 vec4 per piece) is
// loaded once, into registers, and serves all u[4] rows of the workgroup (the streaming
// path above loads x again for every R rows). A batch of SK_RB rows at a time: each
// invocation dots its pieces, the subgroups sum theirs (subgroupAdd), and the subgroup
// partials meet in shared memory.
#define SK_PMAX 3
#define SK_RB 8
shared float sk_red[WG / 4 * SK_RB]; // [subgroup][row of the batch]; subgroups of >= 4 invocations

void main_splitk(uint g) {
    uint N = pc.u[1], RW = pc.u[4], PPI = pc.u[7];
    uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID, nsg = gl_NumSubgroups;
    vec4 xv[SK_PMAX][8];
    for (uint j = 0; j < SK_PMAX; j++)
        if (j < PPI) x_load(MV_X, tid + WG * j, xv[j]);
    uint n0 = g * RW;
    for (uint r0 = 0; r0 < RW; r0 += SK_RB) { // uniform over the workgroup
        float acc[SK_RB];
        for (uint r = 0; r < SK_RB; r++) {
            acc[r] = 0.0;
            uint n = n0 + r0 + r;
            if (r0 + r < RW && n < N) { // uniform
                uint64_t row = MV_W + uint64_t(n) * pc.u[3];
                for (uint j = 0; j < SK_PMAX; j++)
                    if (j < PPI) acc[r] += piece_dot(row, tid + WG * j, xv[j]);
            }
        }
        for (uint r = 0; r < SK_RB; r++) {
            float s = subgroupAdd(acc[r]);
            if (subgroupElect()) sk_red[sg * SK_RB + r] = s;
        }
        barrier();
        if (tid < SK_RB) {
            uint n = n0 + r0 + tid;
            float s = 0.0;
            for (uint k = 0; k < nsg; k++) s += sk_red[k * SK_RB + tid];
            if (r0 + tid < RW && n < N) BF32(MV_O).v[n] = s;
        }
        barrier();
    }
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    iq_init(tid, WG);
    uint g = group_id();
    if (g >= pc.u[10]) return; // uniform over the workgroup: no barrier is skipped by part of it
#ifdef MATMUL_ID
    if (!mv_slot(g)) return; // an id that names no expert (uniform: the workgroup's slot)
#endif
    if (FAST && pc.u[7] != 0) { main_splitk(g); return; }
    if (FAST && pc.u[6] != 0) { main_fast(g); return; }
    uint K = pc.u[0], N = pc.u[1], T = MV_T, R = pc.u[4];
    uint nc = K / 32, P = nc + 1, CS = PLAIN ? K : 32 * P; // staged floats per token
    bool staged = !DET && pc.u[5] != 0 && T * CS <= XS;
    bool x16 = (MV_X & 15ul) == 0; // chunks of x start 16-aligned: vec4 loads when not staged
    if (staged) {
        for (uint i = tid; i < T * K; i += WG) {
            uint t = i / K, k = i % K;
            xs[t * CS + (PLAIN ? k : (k % 32) * P + k / 32)] = BF32(MV_X).v[i];
        }
    }
    barrier();
    uint lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize;
    for (uint r = gl_SubgroupID; r < R; r += gl_NumSubgroups) {
        uint n = g * R + r;
        if (n >= N) break; // uniform over the subgroup
        uint64_t row = MV_W + uint64_t(n) * pc.u[3];
        // DET: tokens t0 .. t0 + MAXT - 1 a pass (never staged)
        for (uint t0 = 0; t0 < (DET ? T : 1u); t0 += MAXT) {
            float acc[MAXT];
            for (uint t = 0; t < MAXT; t++) acc[t] = 0.0;
            if (PLAIN && TYPE != T_F32 && K % 2 == 0) {
                // two 16-bit weights per 32-bit load (rows of an even K start 4-aligned)
                for (uint i2 = lane; i2 < K / 2; i2 += sgs) {
                    uint h = BU32(row).v[i2];
                    vec2 w = TYPE == T_F16 ? unpackHalf2x16(h)
                                           : vec2(uintBitsToFloat(h << 16), uintBitsToFloat(h & 0xffff0000u));
                    for (uint t = 0; t < MAXT; t++) {
                        if (t0 + t >= T) break;
                        uint tt = t0 + t;
                        vec2 x = staged ? vec2(xs[tt * CS + 2 * i2], xs[tt * CS + 2 * i2 + 1])
                                        : vec2(BF32(MV_X).v[tt * K + 2 * i2], BF32(MV_X).v[tt * K + 2 * i2 + 1]);
                        acc[t] += dot(w, x);
                    }
                }
            } else if (PLAIN) {
                for (uint i = lane; i < K; i += sgs) {
                    float w = dq_elem(row, i);
                    for (uint t = 0; t < MAXT; t++)
                        if (t0 + t < T) acc[t] += w * (staged ? xs[(t0 + t) * CS + i] : BF32(MV_X).v[(t0 + t) * K + i]);
                }
            } else {
                float v[32];
                for (uint c = lane; c < nc; c += sgs) {
                    dq_chunk(row, c, v);
                    for (uint t = 0; t < MAXT; t++) {
                        if (t0 + t >= T) break;
                        uint tt = t0 + t;
                        float s = 0.0;
                        if (staged) {
                            for (uint j = 0; j < 32; j++) s += v[j] * xs[tt * CS + j * P + c];
                        } else if (x16) {
                            BV4 x = BV4(MV_X + (uint64_t(tt) * K + 32 * c) * 4);
                            for (uint j = 0; j < 8; j++)
                                s += dot(vec4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]), x.v[j]);
                        } else {
                            BF32 x = BF32(MV_X + (uint64_t(tt) * K + 32 * c) * 4);
                            for (uint j = 0; j < 32; j++) s += v[j] * x.v[j];
                        }
                        acc[t] += s;
                    }
                }
            }
            for (uint t = 0; t < MAXT; t++) {
                if (t0 + t >= T) break;
                float s = subgroupAdd(acc[t]);
                if (subgroupElect()) BF32(MV_O).v[(t0 + t) * N + n] = s;
            }
        }
    }
}
