#version 450
// MATMUL for prefill (T > 8 tokens): y = W x with a W [K, N] of TYPE, b x F32 [K, T],
// o y F32 [N, T]. u[0] K, u[1] N, u[2] T, u[3] W row bytes, u[10] workgroups in use.
//
// One workgroup per output tile of BM weight rows x BN tokens. Per step of BK along K
// the weight tile is decoded once into shared memory (f32) and the x tile copied beside
// it, both k-major; each invocation then accumulates a 4 x 4 register block, so every
// decoded weight is used BN times and every x value BM times.
#include "common.glsl"
#include "dequant.glsl"
#define BM 64
#define BN 64
#define BK 32
#define WG 256
#define PAD 4
layout(local_size_x = WG) in;

shared float ws[BK * (BM + PAD)]; // [BK][BM + PAD]: ws[k * (BM + PAD) + m]
shared float xt[BK * (BN + PAD)]; // [BK][BN + PAD]

void main() {
    uint tid = gl_LocalInvocationID.x;
    iq_init(tid, WG);
    uint g = group_id();
    if (g >= pc.u[10]) return; // uniform over the workgroup
    uint K = pc.u[0], N = pc.u[1], T = pc.u[2];
    uint tiles_n = (N + BM - 1) / BM;
    uint n0 = (g % tiles_n) * BM, t0 = (g / tiles_n) * BN;
    uint tx = tid % 16, ty = tid / 16; // tokens t0 + 4 tx .. +3, rows n0 + 4 ty .. +3
    float acc[4][4];
    for (uint i = 0; i < 4; i++)
        for (uint j = 0; j < 4; j++) acc[i][j] = 0.0;
    for (uint k0 = 0; k0 < K; k0 += BK) {
        barrier(); // the previous step's reads are done
        if (PLAIN) {
            for (uint e = tid; e < BM * BK; e += WG) {
                uint m = e / BK, kk = e % BK;
                bool ok = n0 + m < N && k0 + kk < K;
                ws[kk * (BM + PAD) + m] = ok ? dq_elem(pc.a + uint64_t(n0 + m) * pc.u[3], k0 + kk) : 0.0;
            }
        } else if (tid < BM) {
            float v[32];
            if (n0 + tid < N) dq_chunk(pc.a + uint64_t(n0 + tid) * pc.u[3], k0 / 32, v);
            else for (uint j = 0; j < 32; j++) v[j] = 0.0;
            for (uint j = 0; j < 32; j++) ws[j * (BM + PAD) + tid] = v[j];
        }
        for (uint e = tid; e < BN * BK; e += WG) {
            uint t = e / BK, kk = e % BK;
            bool ok = t0 + t < T && k0 + kk < K;
            xt[kk * (BN + PAD) + t] = ok ? BF32(pc.b).v[(t0 + t) * K + k0 + kk] : 0.0;
        }
        barrier();
        for (uint kk = 0; kk < BK; kk++) {
            vec4 a = vec4(ws[kk * (BM + PAD) + 4 * ty], ws[kk * (BM + PAD) + 4 * ty + 1],
                          ws[kk * (BM + PAD) + 4 * ty + 2], ws[kk * (BM + PAD) + 4 * ty + 3]);
            vec4 b = vec4(xt[kk * (BN + PAD) + 4 * tx], xt[kk * (BN + PAD) + 4 * tx + 1],
                          xt[kk * (BN + PAD) + 4 * tx + 2], xt[kk * (BN + PAD) + 4 * tx + 3]);
            for (uint i = 0; i < 4; i++)
                for (uint j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
        }
    }
    for (uint j = 0; j < 4; j++) {
        uint t = t0 + 4 * tx + j;
        if (t >= T) break;
        for (uint i = 0; i < 4; i++) {
            uint n = n0 + 4 * ty + i;
            if (n < N) BF32(pc.o).v[t * N + n] = acc[i][j];
        }
    }
}
