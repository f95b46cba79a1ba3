/* The thin portability layer that lets the same .cu sources build with nvcc (CUDA) and
 * hipcc (HIP, -DONEBIT_HIP=ON). Kernel code uses the cuda* names and the OB_* helpers
 * below; under HIP they map to the hip* equivalents. Keep this the only place that
 * knows which toolkit is in use. */
#ifndef OB_BACKEND_CUDA_COMPAT_H
#define OB_BACKEND_CUDA_COMPAT_H

#if defined(ONEBIT_HIP_BUILD) || defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <stdlib.h>

#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError hipGetLastError
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaSetDevice hipSetDevice
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaDeviceProp hipDeviceProp_t
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaMemcpy hipMemcpy
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMallocHost(p, s) hipHostMalloc((p), (s), 0)
#define cudaFreeHost hipHostFree
#define cudaHostAlloc hipHostMalloc
#define cudaHostAllocMapped hipHostMallocMapped
#define cudaHostGetDevicePointer hipHostGetDevicePointer
#define cudaMemsetAsync hipMemsetAsync
#define cudaMemset hipMemset
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaMemcpyToSymbol hipMemcpyToSymbol
#define cudaMemGetInfo hipMemGetInfo
#define cudaStream_t hipStream_t
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStreamBeginCapture hipStreamBeginCapture
#define cudaStreamEndCapture hipStreamEndCapture
#define cudaStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define cudaEvent_t hipEvent_t
#define cudaEventCreate hipEventCreate
#define cudaEventDestroy hipEventDestroy
#define cudaEventRecord hipEventRecord
#define cudaEventElapsedTime hipEventElapsedTime
#define cudaGraph_t hipGraph_t
#define cudaGraphExec_t hipGraphExec_t
#define cudaGraphInstantiate(e, g, f) hipGraphInstantiate(e, g, NULL, NULL, 0)
#define cudaGraphLaunch hipGraphLaunch
#define cudaGraphDestroy hipGraphDestroy
#define cudaGraphExecDestroy hipGraphExecDestroy
#define OB_HIP 1
#define OB_SYMBOL(s) HIP_SYMBOL(s)
#define OB_SHFL_XOR(v, m) __shfl_xor((v), (m))
#define OB_SHFL(v, src) __shfl((v), (src))
#define OB_SYNCWARP() do { } while (0) /* a wavefront runs in lockstep */

#ifdef ONEBIT_HIPBLAS
#include <hipblas/hipblas.h>
#define cublasHandle_t hipblasHandle_t
#define cublasStatus_t hipblasStatus_t
#define CUBLAS_STATUS_SUCCESS HIPBLAS_STATUS_SUCCESS
#define cublasCreate hipblasCreate
#define cublasDestroy hipblasDestroy
#define cublasSetStream hipblasSetStream
#define cublasSgemm hipblasSgemm
#define CUBLAS_OP_T HIPBLAS_OP_T
#define CUBLAS_OP_N HIPBLAS_OP_N
/* C[m, n] (f32) = alpha op(A) op(B) + beta C with f16 A and B, column-major as in BLAS. */
static inline hipblasStatus_t ob_hip_gemm_f16(hipblasHandle_t h, int m, int n, int k, const float *alpha, const __half *A,
                                              int lda, const __half *B, int ldb, const float *beta, float *C, int ldc) {
    return hipblasGemmEx(h, HIPBLAS_OP_T, HIPBLAS_OP_N, m, n, k, alpha, A, HIPBLAS_R_16F, lda, B, HIPBLAS_R_16F, ldb, beta, C,
                         HIPBLAS_R_32F, ldc, HIPBLAS_R_32F, HIPBLAS_GEMM_DEFAULT);
}
#else
/* Debian 12 packages no hipBLAS, so the prefill GEMMs get a plain shared-memory tiled
 * kernel here: correct, not tuned. Only the shape the backend uses is supported:
 * C[m, n] = alpha A^T B + beta C, column-major, A [k, m] (lda), B [k, n] (ldb), so every
 * output is a dot of two contiguous k-vectors. */
typedef struct ob_hip_blas { hipStream_t stream; } *cublasHandle_t;
typedef int cublasStatus_t;
#define CUBLAS_STATUS_SUCCESS 0
#define OB_HIP_BLAS_BAD_OP 6
#define OB_HIP_BLAS_LAUNCH 13
enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
#define OB_HIP_GEMM_TILE 16

template <typename TA>
__global__ void ob_hip_k_gemm_tn(int m, int n, int k, float alpha, const TA *__restrict__ A, int lda, const TA *__restrict__ B,
                                 int ldb, float beta, float *__restrict__ C, int ldc) {
    __shared__ float as[OB_HIP_GEMM_TILE][OB_HIP_GEMM_TILE + 1], bs[OB_HIP_GEMM_TILE][OB_HIP_GEMM_TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int i0 = blockIdx.x * OB_HIP_GEMM_TILE, j0 = blockIdx.y * OB_HIP_GEMM_TILE;
    float acc = 0.0f;
    for (int p0 = 0; p0 < k; p0 += OB_HIP_GEMM_TILE) {
        /* row ty of each tile: k-elements p0+tx of A column i0+ty and B column j0+ty */
        const int p = p0 + tx;
        as[ty][tx] = (i0 + ty < m && p < k) ? (float)A[(size_t)(i0 + ty) * lda + p] : 0.0f;
        bs[ty][tx] = (j0 + ty < n && p < k) ? (float)B[(size_t)(j0 + ty) * ldb + p] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int q = 0; q < OB_HIP_GEMM_TILE; q++) acc += as[tx][q] * bs[ty][q];
        __syncthreads();
    }
    const int i = i0 + tx, j = j0 + ty;
    if (i < m && j < n) {
        float *c = C + (size_t)j * ldc + i;
        *c = alpha * acc + (beta != 0.0f ? beta * *c : 0.0f);
    }
}

static inline cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = (cublasHandle_t)calloc(1, sizeof(**h));
    return *h ? CUBLAS_STATUS_SUCCESS : OB_HIP_BLAS_LAUNCH;
}
static inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasSetStream(cublasHandle_t h, hipStream_t s) {
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
template <typename TA>
static cublasStatus_t ob_hip_gemm_tn(cublasHandle_t h, int m, int n, int k, float alpha, const TA *A, int lda, const TA *B,
                                     int ldb, float beta, float *C, int ldc) {
    const dim3 grid((m + OB_HIP_GEMM_TILE - 1) / OB_HIP_GEMM_TILE, (n + OB_HIP_GEMM_TILE - 1) / OB_HIP_GEMM_TILE);
    ob_hip_k_gemm_tn<TA><<<grid, dim3(OB_HIP_GEMM_TILE, OB_HIP_GEMM_TILE), 0, h->stream>>>(m, n, k, alpha, A, lda, B, ldb, beta,
                                                                                          C, ldc);
    return hipGetLastError() == hipSuccess ? CUBLAS_STATUS_SUCCESS : OB_HIP_BLAS_LAUNCH;
}
static inline cublasStatus_t cublasSgemm(cublasHandle_t h, int opa, int opb, int m, int n, int k, const float *alpha,
                                         const float *A, int lda, const float *B, int ldb, const float *beta, float *C, int ldc) {
    if (opa != CUBLAS_OP_T || opb != CUBLAS_OP_N) return OB_HIP_BLAS_BAD_OP;
    return ob_hip_gemm_tn<float>(h, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
}
static inline cublasStatus_t ob_hip_gemm_f16(cublasHandle_t h, int m, int n, int k, const float *alpha, const __half *A, int lda,
                                             const __half *B, int ldb, const float *beta, float *C, int ldc) {
    return ob_hip_gemm_tn<__half>(h, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
}
#endif /* ONEBIT_HIPBLAS */
#else
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>
#define OB_SYMBOL(s) s
#define OB_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m))
#define OB_SHFL(v, src) __shfl_sync(0xffffffffu, (v), (src))
#define OB_SYNCWARP() __syncwarp()
#endif

/* Programmatic dependent launch (sm_90+, CUDA 12.3+ inside captured graphs): a kernel
 * launched through ob_cu_launch_e with pdl set may start its blocks while the previous
 * kernel of the stream drains. So every kernel launched that way begins with
 * OB_PDL_ENTRY(): the wait holds until the previous grid has completed and its writes are
 * visible (a no-op without the attribute); the trigger right after it lets the next
 * kernel's blocks launch as this one's last blocks get scheduled. HIP and pre-sm_90
 * device code compile both to nothing (the backend then never sets the attribute). */
#if !defined(OB_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define OB_PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define OB_PDL_TRIGGER() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define OB_PDL_WAIT() do { } while (0)
#define OB_PDL_TRIGGER() do { } while (0)
#endif

/* Progress marks (cuda_fault.cu). After an illegal access the context is dead and device
 * memory cannot be read, but host memory can: so the first thread of every kernel's grid
 * numbers the launch (a device counter, seq) and leaves the number in a small host-mapped
 * ring. It does so after the PDL wait, when the launch before it has finished, so the
 * numbers follow the stream's order and the last one the host sees names the launch that
 * was running when the context died. Kernels launched without PDL call OB_CU_MARK() first
 * thing. Each .cu holds its own copy of the pointers (a static __constant__), which the
 * backend fills at start through OB_CU_MARK_BIND; seq NULL (ONEBIT_CUDA_MARKS=0, or never
 * bound) leaves marks out. */
#define OB_CU_MARK_RING 64
typedef struct ob_cu_marks_dev {
    unsigned long long *seq;  /* device memory: launches numbered so far */
    unsigned long long *ring; /* host-mapped: [n % OB_CU_MARK_RING] = n */
} ob_cu_marks_dev;
#if defined(__CUDACC__) || defined(__HIPCC__)
static __constant__ ob_cu_marks_dev ob_cu_marks_c;
#define OB_CU_MARK()                                                                                   \
    do {                                                                                               \
        if ((blockIdx.x | blockIdx.y | blockIdx.z | threadIdx.x | threadIdx.y | threadIdx.z) == 0 &&   \
            ob_cu_marks_c.seq) {                                                                       \
            const unsigned long long mark_ = atomicAdd(ob_cu_marks_c.seq, 1ull) + 1ull;                \
            ((volatile unsigned long long *)ob_cu_marks_c.ring)[mark_ % OB_CU_MARK_RING] = mark_;      \
        }                                                                                              \
    } while (0)
/* One per .cu (the list is OB_CU_MARK_TUS in cuda_int.h): fills that file's copy. */
#define OB_CU_MARK_BIND(tu)                                                                            \
    cudaError_t ob_cu_marks_bind_##tu(const ob_cu_marks_dev *m) {                                      \
        return cudaMemcpyToSymbol(OB_SYMBOL(ob_cu_marks_c), m, sizeof *m);                             \
    }
#endif
#define OB_PDL_ENTRY() do { OB_PDL_WAIT(); OB_CU_MARK(); OB_PDL_TRIGGER(); } while (0)

#if defined(__CUDACC__) || defined(__HIPCC__)
/* kernel<<<grid, block, shm, s>>>(args), or with pdl the same launch carrying the
 * programmatic-serialization attribute. Returns the launch's error. */
template <typename... P, typename... A>
static inline cudaError_t ob_cu_launch_k(bool pdl, cudaStream_t s, void (*k)(P...), dim3 grid, dim3 block, size_t shm,
                                         A... args) {
#ifndef OB_HIP
    if (pdl) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute at[1] = {};
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.gridDim = grid;
        cfg.blockDim = block;
        cfg.dynamicSmemBytes = shm;
        cfg.stream = s;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        return cudaLaunchKernelEx(&cfg, k, args...);
    }
#endif
    (void)pdl;
    k<<<grid, block, shm, s>>>(args...);
    return cudaGetLastError();
}
#endif

/* Kernels assume 32-lane warps; gfx10+/gfx11 run wave32 (hipcc -mwavefrontsize32 is the
 * default there). */
#define OB_WARP 32

#endif
