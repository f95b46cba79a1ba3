#version 450
// MATMUL for decode and small batches (T <= 8 tokens): y = W x with a W [K, N] of TYPE,
// b x F32 [K, T], o y F32 [N, T].
// u[0] K, u[1] N, u[2] T, u[3] W row bytes, u[4] rows per workgroup, u[5] stage x in
// shared memory (when it fits), u[10] workgroups.
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
#define WG 128
#define MAXT 8
#define XS 4160
layout(local_size_x = WG) in;

shared float xs[XS];
layout(buffer_reference, std430, buffer_reference_align = 16) buffer BV4 { vec4 v[]; };

void main() {
    uint tid = gl_LocalInvocationID.x;
    iq_init(tid, WG);
    uint g = group_id();
    if (g >= pc.u[10]) return; // uniform over the workgroup: no barrier is skipped by part of it
    uint K = pc.u[0], N = pc.u[1], T = pc.u[2], R = pc.u[4];
    uint nc = K / 32, P = nc + 1, CS = PLAIN ? K : 32 * P; // staged floats per token
    bool staged = pc.u[5] != 0 && T * CS <= XS;
    bool x16 = (pc.b & 15ul) == 0; // chunks of x start 16-aligned: vec4 loads when not staged
    if (staged) {
        for (uint i = tid; i < T * K; i += WG) {
            uint t = i / K, k = i % K;
            xs[t * CS + (PLAIN ? k : (k % 32) * P + k / 32)] = BF32(pc.b).v[i];
        }
    }
    barrier();
    uint lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize;
    for (uint r = gl_SubgroupID; r < R; r += gl_NumSubgroups) {
        uint n = g * R + r;
        if (n >= N) break; // uniform over the subgroup
        uint64_t row = pc.a + uint64_t(n) * pc.u[3];
        float acc[MAXT];
        for (uint t = 0; t < MAXT; t++) acc[t] = 0.0;
        if (PLAIN && TYPE != T_F32 && K % 2 == 0) {
            // two 16-bit weights per 32-bit load (rows of an even K start 4-aligned)
            for (uint i2 = lane; i2 < K / 2; i2 += sgs) {
                uint h = BU32(row).v[i2];
                vec2 w = TYPE == T_F16 ? unpackHalf2x16(h)
                                       : vec2(uintBitsToFloat(h << 16), uintBitsToFloat(h & 0xffff0000u));
                for (uint t = 0; t < MAXT; t++) {
                    if (t >= T) break;
                    vec2 x = staged ? vec2(xs[t * CS + 2 * i2], xs[t * CS + 2 * i2 + 1])
                                    : vec2(BF32(pc.b).v[t * K + 2 * i2], BF32(pc.b).v[t * K + 2 * i2 + 1]);
                    acc[t] += dot(w, x);
                }
            }
        } else if (PLAIN) {
            for (uint i = lane; i < K; i += sgs) {
                float w = dq_elem(row, i);
                for (uint t = 0; t < MAXT; t++)
                    if (t < T) acc[t] += w * (staged ? xs[t * CS + i] : BF32(pc.b).v[t * K + i]);
            }
        } else {
            float v[32];
            for (uint c = lane; c < nc; c += sgs) {
                dq_chunk(row, c, v);
                for (uint t = 0; t < MAXT; t++) {
                    if (t >= T) break;
                    float s = 0.0;
                    if (staged) {
                        for (uint j = 0; j < 32; j++) s += v[j] * xs[t * CS + j * P + c];
                    } else if (x16) {
                        BV4 x = BV4(pc.b + (uint64_t(t) * K + 32 * c) * 4);
                        for (uint j = 0; j < 8; j++)
                            s += dot(vec4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]), x.v[j]);
                    } else {
                        BF32 x = BF32(pc.b + (uint64_t(t) * K + 32 * c) * 4);
                        for (uint j = 0; j < 32; j++) s += v[j] * x.v[j];
                    }
                    acc[t] += s;
                }
            }
        }
        for (uint t = 0; t < MAXT; t++) {
            if (t >= T) break;
            float s = subgroupAdd(acc[t]);
            if (subgroupElect()) BF32(pc.o).v[t * N + n] = s;
        }
    }
}
