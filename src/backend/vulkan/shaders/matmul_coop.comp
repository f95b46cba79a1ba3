#version 450
// MATMUL for prefill on devices with cooperative matrices (16x16x16, f16 x f16 -> f32):
// y = W x with a W [K, N] of TYPE, b x F32 [K, T], o y F32 [N, T].
// u[0] K, u[1] N, u[2] T, u[3] W row bytes, u[4] 1: one f16 product (fast), 0: split
// products (precise), u[10] workgroups in use.
//
// Same tiling as matmul.comp (BM weight rows x BN tokens per workgroup, weight tile
// decoded once per BK step), but the tiles are stored as f16 and multiplied by the
// tensor cores: four subgroups of 32, each owning a 32 x 32 quarter of the output as
// 2 x 2 accumulators. The result goes through shared memory so edge tiles can be
// written with bounds checks.
//
// f16 keeps 11 bits, so one product per tile leaves a relative error near 1e-3 on a
// 512-long dot, ten times what the f32 paths give. By default each value v is stored as
// hi = f16(v) and lo = f16(v - hi), and the tile product is hi*hi + hi*lo + lo*hi (about
// 22 bits): three tensor-core products, cheap next to decoding the weights. u[4] = 1 skips
// the lo terms. Values beyond the f16 range (65504) become infinities either way.
//
// Written in GL_NV_cooperative_matrix because the Debian glslc (glslang 11.13) knows no
// GL_KHR_cooperative_matrix. The build also rewrites the compiled module into
// SPV_KHR_cooperative_matrix (tools/spv_nv2khr.c), which is what the host prefers; the
// NV module is used on devices that only offer the NV extension. Both need a 16x16x16
// f16/f32 configuration at subgroup scope and subgroup 32. For the rewrite, a matrix
// variable must serve only as A or only as B (KHR types differ by use): hence m0/m1.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"
#include "dequant.glsl"
#define BM 64
#define BN 64
#define BK 32
#define WG 128
#define SA (BK + 8)  // f16 row stride of the A and B tiles (80 bytes: 16-byte multiple)
#define SC (BM + 4)  // f32 column stride of the result tile
// The low halves v - f16(v) are ~2^-11 |v|: below f16's normal range (6.1e-5) for
// |v| < 0.5, where a device that flushes f16 subnormals loses them (the H200: results
// 2-4x the op test's tolerance). Stored x 2^12 they stay normal; their products go to
// separate accumulators, scaled back at the end.
#define LO_SCALE 4096.0
layout(local_size_x = WG) in;

shared float16_t wsh[BM * SA], wlo[BM * SA]; // A: weight row m, k at m * SA + k
shared float16_t xsh[BN * SA], xlo[BN * SA]; // B: token t, k at t * SA + k (column-major K x BN)
shared float csh[BN * SC];     // C: row m, token t at t * SC + m

#define CM_A fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define CM_C fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

void main() {
    uint tid = gl_LocalInvocationID.x;
    iq_init(tid, WG);
    uint g = group_id();
    if (g >= pc.u[10]) return; // uniform over the workgroup
    uint K = pc.u[0], N = pc.u[1], T = pc.u[2];
    uint tiles_n = (N + BM - 1) / BM;
    uint n0 = (g % tiles_n) * BM, t0 = (g / tiles_n) * BN;
    uint sg = gl_SubgroupID, rm = 32 * (sg % 2), ct = 32 * (sg / 2);
    CM_C c00 = CM_C(0.0), c01 = CM_C(0.0), c10 = CM_C(0.0), c11 = CM_C(0.0);
    CM_C d00 = CM_C(0.0), d01 = CM_C(0.0), d10 = CM_C(0.0), d11 = CM_C(0.0); // lo terms, x LO_SCALE
    for (uint k0 = 0; k0 < K; k0 += BK) {
        barrier();
        if (PLAIN) {
            for (uint e = tid; e < BM * BK; e += WG) {
                uint m = e / BK, kk = e % BK;
                bool ok = n0 + m < N && k0 + kk < K;
                float w = ok ? dq_elem(pc.a + uint64_t(n0 + m) * pc.u[3], k0 + kk) : 0.0;
                wsh[m * SA + kk] = float16_t(w);
                wlo[m * SA + kk] = float16_t((w - float(float16_t(w))) * LO_SCALE);
            }
        } else if (tid < BM) {
            float v[32];
            if (n0 + tid < N) dq_chunk(pc.a + uint64_t(n0 + tid) * pc.u[3], k0 / 32, v);
            else for (uint j = 0; j < 32; j++) v[j] = 0.0;
            for (uint j = 0; j < 32; j++) {
                wsh[tid * SA + j] = float16_t(v[j]);
                wlo[tid * SA + j] = float16_t((v[j] - float(float16_t(v[j]))) * LO_SCALE);
            }
        }
        for (uint e = tid; e < BN * BK; e += WG) {
            uint t = e / BK, kk = e % BK;
            bool ok = t0 + t < T && k0 + kk < K;
            float x = ok ? BF32(pc.b).v[(t0 + t) * K + k0 + kk] : 0.0;
            xsh[t * SA + kk] = float16_t(x);
            xlo[t * SA + kk] = float16_t((x - float(float16_t(x))) * LO_SCALE);
        }
        barrier();
        for (uint kk = 0; kk < BK; kk += 16) {
            CM_A a0, a1, b0, b1;
            coopMatLoadNV(a0, wsh, rm * SA + kk, SA, false);
            coopMatLoadNV(a1, wsh, (rm + 16) * SA + kk, SA, false);
            coopMatLoadNV(b0, xsh, ct * SA + kk, SA, true);
            coopMatLoadNV(b1, xsh, (ct + 16) * SA + kk, SA, true);
            c00 = coopMatMulAddNV(a0, b0, c00);
            c01 = coopMatMulAddNV(a0, b1, c01);
            c10 = coopMatMulAddNV(a1, b0, c10);
            c11 = coopMatMulAddNV(a1, b1, c11);
            if (pc.u[4] == 0) {
                CM_A l0, l1;
                coopMatLoadNV(l0, wlo, rm * SA + kk, SA, false);
                coopMatLoadNV(l1, wlo, (rm + 16) * SA + kk, SA, false);
                d00 = coopMatMulAddNV(l0, b0, d00);
                d01 = coopMatMulAddNV(l0, b1, d01);
                d10 = coopMatMulAddNV(l1, b0, d10);
                d11 = coopMatMulAddNV(l1, b1, d11);
                CM_A m0, m1; // B operands: separate from l0/l1 (KHR types differ for A and B)
                coopMatLoadNV(m0, xlo, ct * SA + kk, SA, true);
                coopMatLoadNV(m1, xlo, (ct + 16) * SA + kk, SA, true);
                d00 = coopMatMulAddNV(a0, m0, d00);
                d01 = coopMatMulAddNV(a0, m1, d01);
                d10 = coopMatMulAddNV(a1, m0, d10);
                d11 = coopMatMulAddNV(a1, m1, d11);
            }
        }
    }
    barrier();
    coopMatStoreNV(c00, csh, ct * SC + rm, SC, true);
    coopMatStoreNV(c01, csh, (ct + 16) * SC + rm, SC, true);
    coopMatStoreNV(c10, csh, ct * SC + rm + 16, SC, true);
    coopMatStoreNV(c11, csh, (ct + 16) * SC + rm + 16, SC, true);
    barrier();
    float acc[BM * BN / WG];
    for (uint q = 0; q < BM * BN / WG; q++) {
        uint e = tid + q * WG;
        acc[q] = csh[(e / BM) * SC + e % BM];
    }
    if (pc.u[4] == 0) {
        // the lo products were taken at LO_SCALE so that they stay normal f16 numbers
        // (matrix arithmetic on the accumulators would do this in registers, but Debian's
        // glslang crashes on it): through shared memory once more
        barrier();
        coopMatStoreNV(d00, csh, ct * SC + rm, SC, true);
        coopMatStoreNV(d01, csh, (ct + 16) * SC + rm, SC, true);
        coopMatStoreNV(d10, csh, ct * SC + rm + 16, SC, true);
        coopMatStoreNV(d11, csh, (ct + 16) * SC + rm + 16, SC, true);
        barrier();
        for (uint q = 0; q < BM * BN / WG; q++) {
            uint e = tid + q * WG;
            acc[q] += csh[(e / BM) * SC + e % BM] * (1.0 / LO_SCALE);
        }
    }
    for (uint q = 0; q < BM * BN / WG; q++) {
        uint e = tid + q * WG, m = e % BM, t = e / BM;
        if (n0 + m < N && t0 + t < T) BF32(pc.o).v[(t0 + t) * N + n0 + m] = acc[q];
    }
}
