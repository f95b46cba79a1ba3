// Read-bandwidth probe for the decode matvec's loading schemes (a device tool, not part of
// the build): how fast an H200 streams a buffer of one matvec's size from DRAM with
//   ldg  - 16-byte loads, UNR in flight per thread, grid of blocks x SMs;
//   tma  - per-warp rings of cp.async.bulk copies (chunk bytes, stages), as op_mmvq_tma.cu.
// Buffers rotate over enough copies to defeat the 50 MB L2. Kernels run back to back on
// one stream, timed with events; prints GB/s per scheme and size.
//   nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/stream_bw bench/stream_bw.cu && /tmp/stream_bw
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

template <int UNR>
__global__ void k_ldg(const int4 *__restrict__ p, size_t n, int *out) {
    int acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (UNR - 1) * stride < n; i += UNR * stride) {
        int4 v[UNR];
#pragma unroll
        for (int u = 0; u < UNR; u++) {
            const int4 *a = p + i + u * stride;
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(a));
        }
#pragma unroll
        for (int u = 0; u < UNR; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n; i += stride) acc ^= p[i].x;
    if (acc == 0x12345678) out[0] = acc;
}

__global__ void k_tma(const uint8_t *__restrict__ p, size_t nchunks, int cb, int stages, int *out) {
    extern __shared__ __align__(16) unsigned char sm[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    const size_t gw = (size_t)blockIdx.x * nw + warp, GW = (size_t)gridDim.x * nw;
    uint64_t *bars = (uint64_t *)sm + warp * 16;
    unsigned char *ring = sm + nw * 16 * 8 + (size_t)warp * stages * cb;
    const size_t nch = gw < nchunks ? (nchunks - gw + GW - 1) / GW : 0;
    if (lane < stages) {
        const uint32_t bar = (uint32_t)__cvta_generic_to_shared(bars + lane);
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        if ((size_t)lane < nch) {
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(cb) : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                             (uint32_t)__cvta_generic_to_shared(ring + (size_t)lane * cb)),
                         "l"(p + (gw + lane * GW) * cb), "r"(cb), "r"(bar)
                         : "memory");
        }
    }
    __syncwarp();
    int acc = 0, s = 0;
    uint32_t par = 0;
    for (size_t j = 0; j < nch; j++) {
        const uint32_t bar = (uint32_t)__cvta_generic_to_shared(bars + s);
        uint32_t done;
        do {
            asm volatile("{\n\t.reg .pred q;\n\tmbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2;\n\tselp.u32 %0, 1, 0, q;\n}"
                         : "=r"(done) : "r"(bar), "r"(par) : "memory");
        } while (!done);
        acc ^= ((const int *)(ring + (size_t)s * cb))[lane];
        __syncwarp();
        if (lane == 0 && j + stages < nch) {
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(cb) : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                             (uint32_t)__cvta_generic_to_shared(ring + (size_t)s * cb)),
                         "l"(p + (gw + (j + stages) * GW) * cb), "r"(cb), "r"(bar)
                         : "memory");
        }
        if (++s == stages) { s = 0; par ^= 1; }
    }
    if (acc == 0x12345678) out[0] = acc;
}

int main() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const size_t sizes[] = {6488064, 12976128, 25952256}; // qkv, down, gate+up of qwen3-8b TQ2_0
    const int copies = 24;
    uint8_t *buf;
    CK(cudaMalloc(&buf, sizes[2] * copies));
    CK(cudaMemset(buf, 1, sizes[2] * copies));
    int *out;
    CK(cudaMalloc(&out, 4));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaFuncSetAttribute(k_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    auto run = [&](const char *name, size_t sz, auto launch) {
        for (int w = 0; w < copies; w++) launch(buf + (size_t)w * sizes[2], sz);
        CK(cudaStreamSynchronize(st));
        const int reps = 4 * copies;
        CK(cudaEventRecord(e0, st));
        for (int r = 0; r < reps; r++) launch(buf + (size_t)(r % copies) * sizes[2], sz);
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        CK(cudaGetLastError());
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        const double us = ms * 1e3 / reps;
        printf("%-40s %9zu B  %7.2f us  %7.0f GB/s\n", name, sz, us, sz / us * 1e-3);
    };
    char name[96];
    for (size_t sz : sizes) {
        for (int unr : {4, 8}) for (int bps : {4, 8, 16}) {
            snprintf(name, sizeof name, "ldg unr=%d blocks/SM=%d (256 thr)", unr, bps);
            run(name, sz, [&](const uint8_t *p, size_t n) {
                if (unr == 4) k_ldg<4><<<sms * bps, 256, 0, st>>>((const int4 *)p, n / 16, out);
                else k_ldg<8><<<sms * bps, 256, 0, st>>>((const int4 *)p, n / 16, out);
            });
        }
        for (int cb : {1056, 4224, 8448, 16896}) for (int stg : {2, 4, 8}) for (int bps : {2, 4}) {
            const size_t shm = 4 * 16 * 8 + (size_t)4 * stg * cb;
            if (shm * bps > 220 * 1024) continue;
            snprintf(name, sizeof name, "tma chunk=%d stages=%d blocks/SM=%d", cb, stg, bps);
            run(name, sz, [&](const uint8_t *p, size_t n) {
                k_tma<<<sms * bps, 128, shm, st>>>(p, n / cb, cb, stg, out);
            });
        }
    }
    return 0;
}
