/* Row and element ops: RMS_NORM, LAYER_NORM, ADD, MUL, SCALE, ACT, GLU, ROPE, SOFTMAX.
 * Semantics are graph.h's; ob_cpu_ref_op is the oracle (tests/unit/test_cuda_ops.c). */
#include "backend/cuda/cuda_int.h"
#include <math.h>

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it. */
static __device__ float block_sum(float v, float *sh) {
    for (int o = OB_WARP / 2; o > 0; o /= 2) v += OB_SHFL_XOR(v, o);
    const int w = threadIdx.x / OB_WARP, nw = blockDim.x / OB_WARP;
    __syncthreads(); /* sh may still be read from a previous call */
    if (threadIdx.x % OB_WARP == 0) sh[w] = v;
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < nw; i++) s += sh[i];
    return s;
}

static __device__ float block_max(float v, float *sh) {
    for (int o = OB_WARP / 2; o > 0; o /= 2) v = fmaxf(v, OB_SHFL_XOR(v, o));
    const int w = threadIdx.x / OB_WARP, nw = blockDim.x / OB_WARP;
    __syncthreads();
    if (threadIdx.x % OB_WARP == 0) sh[w] = v;
    __syncthreads();
    float s = -INFINITY;
    for (int i = 0; i < nw; i++) s = fmaxf(s, sh[i]);
    return s;
}

static __device__ __forceinline__ float act_f(int act, float x) {
    switch (act) {
    case OB_ACT_SILU: return x / (1.0f + expf(-x));
    case OB_ACT_GELU: return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case OB_ACT_GELU_ERF: return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
    default: return x > 0.0f ? x : 0.0f;
    }
}

/* One block per row. */
__global__ void k_norm(const float *__restrict__ x, const float *__restrict__ w, const float *__restrict__ b,
                       float *__restrict__ y, int64_t n, float eps, int layer) {
    __shared__ float sh[32];
    const float *xr = x + blockIdx.x * n;
    float *yr = y + blockIdx.x * n;
    float mean = 0.0f;
    if (layer) {
        float s = 0.0f;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += xr[i];
        mean = block_sum(s, sh) / (float)n;
    }
    float s2 = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) { const float d = xr[i] - mean; s2 += d * d; }
    const float sc = rsqrtf(block_sum(s2, sh) / (float)n + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = (xr[i] - mean) * sc;
        if (w) v *= w[i];
        if (b) v += b[i];
        yr[i] = v;
    }
}

__global__ void k_binary(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ y, int64_t n,
                         int64_t nb, int mul) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float z = b[nb == n ? i : i % nb];
    y[i] = mul ? a[i] * z : a[i] + z;
}

__global__ void k_unary(const float *__restrict__ a, float *__restrict__ y, int64_t n, int act, float s) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    y[i] = act < 0 ? a[i] * s : act_f(act, a[i]);
}

__global__ void k_glu(const float *__restrict__ g, const float *__restrict__ u, float *__restrict__ y, int64_t n, int act) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = act_f(act, g[i]) * u[i];
}

/* One thread per rotated pair; the angle in double as the reference does, so long
 * positions keep their precision. Elements past n_rot are copied by the same kernel. */
__global__ void k_rope(const float *__restrict__ x, const int32_t *__restrict__ pos, float *__restrict__ y, int64_t hd,
                       int64_t n_head, int64_t rows, int n_rot, int neox, float base, float fscale) {
    const int64_t half = (hd + 1) / 2;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * half) return;
    const int64_t r = i / half, k = i % half;
    const float *xr = x + r * hd;
    float *yr = y + r * hd;
    if (k < n_rot / 2) {
        const double p = pos[r / n_head];
        const double th = p * (double)fscale * pow((double)base, -2.0 * (double)k / (double)n_rot);
        double sn, cs;
        sincos(th, &sn, &cs);
        const int64_t a = neox ? k : 2 * k, b = neox ? k + n_rot / 2 : 2 * k + 1;
        const double x0 = xr[a], x1 = xr[b];
        yr[a] = (float)(x0 * cs - x1 * sn);
        yr[b] = (float)(x0 * sn + x1 * cs);
    } else {
        /* the pass-through tail: elements n_rot + 2(k - n_rot/2) and the one after */
        const int64_t j = n_rot + 2 * (k - n_rot / 2);
        if (j < hd) yr[j] = xr[j];
        if (j + 1 < hd) yr[j + 1] = xr[j + 1];
    }
}

__global__ void k_softmax(const float *__restrict__ x, float *__restrict__ y, int64_t n) {
    __shared__ float sh[32];
    const float *xr = x + blockIdx.x * n;
    float *yr = y + blockIdx.x * n;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, xr[i]);
    m = block_max(m, sh);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += expf(xr[i] - m);
    const float inv = 1.0f / block_sum(s, sh);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = expf(xr[i] - m) * inv;
}

static int row_threads(int64_t n) { return n >= 1024 ? 1024 : n >= 256 ? 256 : 64; }

bool ob_cu_op_norm(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *a = n->src[0];
    const bool layer = n->op == OB_OP_LAYER_NORM;
    const float *w = n->src[1] ? (const float *)n->src[1]->data : NULL;
    const float *b = layer && n->src[2] ? (const float *)n->src[2]->data : NULL;
    k_norm<<<(unsigned)ob_nrows(a), row_threads(a->ne[0]), 0, cx->stream>>>((const float *)a->data, w, b, (float *)n->data,
                                                                            a->ne[0], n->fp[0], layer);
    return OB_CU_LAUNCHED(cx);
}

bool ob_cu_op_binary(ob_cu_ctx *cx, ob_tensor *n) {
    const int64_t ne = ob_nelements(n);
    k_binary<<<ob_cu_blocks(ne, 256), 256, 0, cx->stream>>>((const float *)n->src[0]->data, (const float *)n->src[1]->data,
                                                             (float *)n->data, ne, ob_nelements(n->src[1]), n->op == OB_OP_MUL);
    return OB_CU_LAUNCHED(cx);
}

bool ob_cu_op_unary(ob_cu_ctx *cx, ob_tensor *n) {
    const int64_t ne = ob_nelements(n);
    k_unary<<<ob_cu_blocks(ne, 256), 256, 0, cx->stream>>>((const float *)n->src[0]->data, (float *)n->data, ne,
                                                            n->op == OB_OP_SCALE ? -1 : n->ip[0], n->fp[0]);
    return OB_CU_LAUNCHED(cx);
}

bool ob_cu_op_glu(ob_cu_ctx *cx, ob_tensor *n) {
    const int64_t ne = ob_nelements(n);
    k_glu<<<ob_cu_blocks(ne, 256), 256, 0, cx->stream>>>((const float *)n->src[0]->data, (const float *)n->src[1]->data,
                                                          (float *)n->data, ne, n->ip[0]);
    return OB_CU_LAUNCHED(cx);
}

bool ob_cu_op_rope(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *a = n->src[0];
    const int64_t hd = a->ne[0], rows = ob_nrows(a);
    k_rope<<<ob_cu_blocks(rows * ((hd + 1) / 2), 256), 256, 0, cx->stream>>>(
        (const float *)a->data, (const int32_t *)n->src[1]->data, (float *)n->data, hd, a->ne[1], rows, n->ip[0],
        n->ip[1] == 2, n->fp[0], n->fp[1]);
    return OB_CU_LAUNCHED(cx);
}

bool ob_cu_op_softmax(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *a = n->src[0];
    k_softmax<<<(unsigned)ob_nrows(a), row_threads(a->ne[0]), 0, cx->stream>>>((const float *)a->data, (float *)n->data, a->ne[0]);
    return OB_CU_LAUNCHED(cx);
}
