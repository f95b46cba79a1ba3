/* Row and element ops: RMS_NORM, LAYER_NORM, ADD, MUL, SCALE, ACT, GLU (gpt-oss's clamped
 * SwiGLU too), ROPE, SOFTMAX, and the fused forms cuda_backend.cu picks for decode (residual
 * ADD + RMS_NORM, and RMS_NORM or GLU that also quantize their output for the int8 matvec
 * that reads it).
 * Semantics are graph.h's; ob_cpu_ref_op is the oracle (tests/unit/test_cuda_ops.c). A
 * fused kernel repeats its parts' float operations in the same order with the same
 * thread layout, so its outputs equal the unfused kernels' bit for bit. */
#include "backend/cuda/rowops.cuh"
#include <math.h>

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
    case OB_ACT_TANH: return tanhf(x);
    case OB_ACT_SOFTPLUS: return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x));
    case OB_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    default: return x > 0.0f ? x : 0.0f;
    }
}

/* GLU's parameters (graph.h): its ob_act, and for gpt-oss's clamped SwiGLU (OB_GLU_SWIGLU_OAI)
 * alpha and the limit. */
typedef struct ob_glu_p {
    int act, oai;
    float alpha, limit;
} ob_glu_p;

static ob_glu_p glu_p(const ob_tensor *n) {
    const ob_glu_p p = {n->ip[0], n->ip[1] == OB_GLU_SWIGLU_OAI, n->fp[0], n->fp[1]};
    return p;
}

/* act(g) * u, or the clamped SwiGLU: g clamped above at the limit, u to +-limit (the
 * comparisons keep a NaN, as the reference's), g sigmoid(alpha g) (u + 1). */
static __device__ __forceinline__ float glu_f(const ob_glu_p &p, float g, float u) {
    if (!p.oai) return act_f(p.act, g) * u;
    const float x = g > p.limit ? p.limit : g, v = u > p.limit ? p.limit : u < -p.limit ? -p.limit : u;
    return x / (1.0f + expf(-p.alpha * x)) * (v + 1.0f);
}

/* One block per row. */
__global__ void k_norm(const float *__restrict__ x, const float *__restrict__ w, const float *__restrict__ b,
                       float *__restrict__ y, int64_t n, float eps, int layer) {
    OB_PDL_ENTRY();
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
    OB_PDL_ENTRY();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float z = b[nb == n ? i : i % nb];
    y[i] = mul ? a[i] * z : a[i] + z;
}

__global__ void k_unary(const float *__restrict__ a, float *__restrict__ y, int64_t n, int act, float s) {
    OB_PDL_ENTRY();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    y[i] = act < 0 ? a[i] * s : act_f(act, a[i]);
}

__global__ void k_glu(const float *__restrict__ g, const float *__restrict__ u, float *__restrict__ y, int64_t n, ob_glu_p p) {
    OB_PDL_ENTRY();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = glu_f(p, g[i], u[i]);
}

/* One thread per rotated pair. */
__global__ void k_rope(const float *__restrict__ x, const int32_t *__restrict__ pos, float *__restrict__ y, int64_t hd,
                       int64_t n_head, int64_t rows, ob_rope_p rp) {
    OB_PDL_ENTRY();
    const int64_t half = (hd + 1) / 2;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * half) return;
    const int64_t r = i / half, k = i % half;
    rope_pair(x + r * hd, y + r * hd, pos, r, k, hd, n_head, rp);
}

__global__ void k_softmax(const float *__restrict__ x, float *__restrict__ y, int64_t n) {
    OB_PDL_ENTRY();
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
    return OB_CU_LAUNCH(cx, k_norm, (unsigned)ob_nrows(a), row_threads(a->ne[0]), 0, (const float *)a->data, w, b, (float *)n->data,
                                                                            a->ne[0], n->fp[0], layer);
}

/* ---- fused forms ------------------------------------------------------------------------ */

/* RMS_NORM of one row per block, as k_norm with layer = 0; with xb, the row is first the
 * residual sum x + xb, stored to xs (which may be x or xb itself: each element is read and
 * written by one thread); with qx, the normed row is also quantized for the int8 matvec
 * (n % 32 == 0, y 16-byte aligned). y overlaps none of the inputs. */
__global__ void k_rms_fused(const float *x, const float *xb, float *xs, const float *__restrict__ w, float *y, int64_t n,
                            float eps, int8_t *__restrict__ qx, float2 *__restrict__ dx) {
    OB_PDL_ENTRY();
    __shared__ float sh[32];
    const float *xr = x + blockIdx.x * n;
    const float *br = xb ? xb + blockIdx.x * n : NULL;
    float *sr = xs ? xs + blockIdx.x * n : NULL;
    float *yr = y + blockIdx.x * n;
    const float mean = 0.0f;
    float s2 = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = xr[i];
        if (br) {
            v = v + br[i];
            sr[i] = v;
        }
        const float d = v - mean;
        s2 += d * d;
    }
    const float sc = rsqrtf(block_sum(s2, sh) / (float)n + eps);
    const float *vr = br ? sr : xr;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = (vr[i] - mean) * sc;
        if (w) v *= w[i];
        yr[i] = v;
    }
    if (!qx) return;
    __syncthreads(); /* the row's y, written by the whole block, is read back in groups of 4 */
    const int64_t ng = n / 4;
    for (int64_t base = 0; base < ng; base += blockDim.x) {
        const int64_t g = base + threadIdx.x;
        const bool live = g < ng;
        const float4 v = live ? ((const float4 *)yr)[g] : make_float4(0.f, 0.f, 0.f, 0.f);
        ob_cu_quant_group(v, live, g, qx + blockIdx.x * n, dx + blockIdx.x * (n / 32));
    }
}

/* k_rms_fused with the row held in registers: thread t owns the 4-element groups t,
 * t + blockDim, ... (at most G), so the residual sum, the norm and the quantization read
 * each element from memory once, and the norm weights are fetched before the wait on the
 * previous kernel. All pointers 16-byte aligned, n % 4 == 0, n / 4 <= G * blockDim. */
template <int G>
__global__ void k_rms_fused4(const float *x, const float *xb, float *xs, const float *__restrict__ w, float *y, int64_t n,
                             float eps, int8_t *__restrict__ qx, float2 *__restrict__ dx) {
    const int64_t ng = n / 4;
    float4 wv[G];
#pragma unroll
    for (int k = 0; k < G; k++) {
        const int64_t g = threadIdx.x + (int64_t)k * blockDim.x;
        wv[k] = w && g < ng ? ((const float4 *)w)[g] : make_float4(1.f, 1.f, 1.f, 1.f);
    }
    OB_PDL_ENTRY();
    __shared__ float sh[32];
    const float4 *xr = (const float4 *)(x + blockIdx.x * n);
    const float4 *br = xb ? (const float4 *)(xb + blockIdx.x * n) : NULL;
    float4 *sr = xs ? (float4 *)(xs + blockIdx.x * n) : NULL;
    float4 *yr = (float4 *)(y + blockIdx.x * n);
    float4 v[G];
    float s2 = 0.0f;
#pragma unroll
    for (int k = 0; k < G; k++) {
        const int64_t g = threadIdx.x + (int64_t)k * blockDim.x;
        v[k] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (g < ng) {
            v[k] = xr[g];
            if (br) {
                const float4 b = br[g];
                v[k] = make_float4(v[k].x + b.x, v[k].y + b.y, v[k].z + b.z, v[k].w + b.w);
                sr[g] = v[k];
            }
            s2 += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
        }
    }
    const float sc = rsqrtf(block_sum(s2, sh) / (float)n + eps);
#pragma unroll
    for (int k = 0; k < G; k++) {
        const int64_t g = threadIdx.x + (int64_t)k * blockDim.x;
        const bool live = g < ng;
        const float4 o = make_float4(v[k].x * sc * wv[k].x, v[k].y * sc * wv[k].y, v[k].z * sc * wv[k].z,
                                     v[k].w * sc * wv[k].w);
        if (live) yr[g] = o;
        if (qx) ob_cu_quant_group(o, live, g, qx + blockIdx.x * n, dx + blockIdx.x * (n / 32));
    }
}

/* GLU of 4 consecutive elements per thread, as k_glu, then their int8 quantization. */
__global__ void k_glu_quant(const float *g, const float *u, float *y, int64_t n, ob_glu_p p, int8_t *__restrict__ qx,
                            float2 *__restrict__ dx) {
    OB_PDL_ENTRY();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; /* group of 4 */
    const bool live = i * 4 < n;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (live) {
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = glu_f(p, g[4 * i + k], u[4 * i + k]);
#pragma unroll
        for (int k = 0; k < 4; k++) y[4 * i + k] = v[k];
    }
    ob_cu_quant_group(make_float4(v[0], v[1], v[2], v[3]), live, i, qx, dx);
}

/* RMS_NORM of one row per block (as k_norm, layer = 0) into y, then ROPE of that row into
 * z (as k_rope): the per-head q/k norm before rotation. z may be x itself or apart from it
 * (the row is read before it is written), never y. */
__global__ void k_rms_rope(const float *x, const float *__restrict__ w, float *y, float *z, const int32_t *__restrict__ pos,
                           int64_t hd, int64_t n_head, float eps, ob_rope_p rp) {
    OB_PDL_ENTRY();
    __shared__ float sh[32];
    norm_rope_row(x, w, y, z, pos, blockIdx.x, hd, n_head, eps, rp, sh);
}

bool ob_cu_op_rms_rope(ob_cu_ctx *cx, ob_tensor *norm, ob_tensor *rope) {
    const ob_tensor *a = norm->src[0];
    const int64_t hd = a->ne[0];
    return OB_CU_LAUNCH(cx, k_rms_rope, (unsigned)ob_nrows(a), row_threads(hd), 0,
        (const float *)a->data, norm->src[1] ? (const float *)norm->src[1]->data : NULL, (float *)norm->data,
        (float *)rope->data, (const int32_t *)rope->src[1]->data, hd, rope->src[0]->ne[1], norm->fp[0], rope_p(rope));
}

bool ob_cu_op_rms_fused(ob_cu_ctx *cx, const ob_tensor *add, ob_tensor *norm, bool quant) {
    const ob_tensor *a = add ? add->src[0] : norm->src[0];
    const int64_t n = a->ne[0], rows = ob_nrows(a);
    int8_t *qx = quant ? (int8_t *)cx->qx : NULL;
    float2 *dx = quant ? (float2 *)((char *)cx->qx + ob_cu_qx_dx_offset(n, rows)) : NULL;
    const float *xb = add ? (const float *)add->src[1]->data : NULL, *w = norm->src[1] ? (const float *)norm->src[1]->data : NULL;
    float *xs = add ? (float *)add->data : NULL;
    const uintptr_t al = (uintptr_t)a->data | (uintptr_t)xb | (uintptr_t)xs | (uintptr_t)w | (uintptr_t)norm->data;
    const int64_t ng = n / 4;
    if (n % 4 == 0 && (al & 15) == 0 && ng <= 4 * 1024) {
        /* cx->opt.rms_g groups of 4 a thread (512 threads at n = 4096 by default). 4 (256
         * threads, early beside the matvec ahead) lost: the block's serial part after the
         * wait grew more than the early start saved; and letting the next kernel start only
         * after this one's loads lost to its early weight copies (bench/NOTES.md: Session 9,
         * fused residual + norm at 512 threads, and tried and dropped). */
        const int64_t per = (ng + cx->opt.rms_g - 1) / cx->opt.rms_g;
        const int bt = (int)OB_MAX((int64_t)32, OB_MIN((int64_t)1024, (per + 31) / 32 * 32)), G = (int)((ng + bt - 1) / bt);
        float *y = (float *)norm->data;
        const float eps = norm->fp[0];
        const float *x = (const float *)a->data;
        switch (G) {
        case 1: return OB_CU_LAUNCH(cx, k_rms_fused4<1>, (unsigned)rows, bt, 0, x, xb, xs, w, y, n, eps, qx, dx);
        case 2: return OB_CU_LAUNCH(cx, k_rms_fused4<2>, (unsigned)rows, bt, 0, x, xb, xs, w, y, n, eps, qx, dx);
        case 3: return OB_CU_LAUNCH(cx, k_rms_fused4<3>, (unsigned)rows, bt, 0, x, xb, xs, w, y, n, eps, qx, dx);
        default: return OB_CU_LAUNCH(cx, k_rms_fused4<4>, (unsigned)rows, bt, 0, x, xb, xs, w, y, n, eps, qx, dx);
        }
    }
    return OB_CU_LAUNCH(cx, k_rms_fused, (unsigned)rows, row_threads(n), 0,
        (const float *)a->data, add ? (const float *)add->src[1]->data : NULL, add ? (float *)add->data : NULL,
        norm->src[1] ? (const float *)norm->src[1]->data : NULL, (float *)norm->data, n, norm->fp[0], qx, dx);
}

bool ob_cu_op_glu_quant(ob_cu_ctx *cx, ob_tensor *glu, int64_t K) {
    const int64_t ne = ob_nelements(glu);
    return OB_CU_LAUNCH(cx, k_glu_quant, ob_cu_blocks(ne / 4, 256), 256, 0,
        (const float *)glu->src[0]->data, (const float *)glu->src[1]->data, (float *)glu->data, ne, glu_p(glu),
        (int8_t *)cx->qx, (float2 *)((char *)cx->qx + ob_cu_qx_dx_offset(K, ne / K)));
}

bool ob_cu_op_binary(ob_cu_ctx *cx, ob_tensor *n) {
    const int64_t ne = ob_nelements(n);
    return OB_CU_LAUNCH(cx, k_binary, ob_cu_blocks(ne, 256), 256, 0, (const float *)n->src[0]->data, (const float *)n->src[1]->data,
                                                             (float *)n->data, ne, ob_nelements(n->src[1]), n->op == OB_OP_MUL);
}

bool ob_cu_op_unary(ob_cu_ctx *cx, ob_tensor *n) {
    const int64_t ne = ob_nelements(n);
    return OB_CU_LAUNCH(cx, k_unary, ob_cu_blocks(ne, 256), 256, 0, (const float *)n->src[0]->data, (float *)n->data, ne,
                                                            n->op == OB_OP_SCALE ? -1 : n->ip[0], n->fp[0]);
}

bool ob_cu_op_glu(ob_cu_ctx *cx, ob_tensor *n) {
    const int64_t ne = ob_nelements(n);
    return OB_CU_LAUNCH(cx, k_glu, ob_cu_blocks(ne, 256), 256, 0, (const float *)n->src[0]->data, (const float *)n->src[1]->data,
                                                          (float *)n->data, ne, glu_p(n));
}

bool ob_cu_op_rope(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *a = n->src[0];
    const int64_t hd = a->ne[0], rows = ob_nrows(a);
    return OB_CU_LAUNCH(cx, k_rope, ob_cu_blocks(rows * ((hd + 1) / 2), 256), 256, 0,
        (const float *)a->data, (const int32_t *)n->src[1]->data, (float *)n->data, hd, a->ne[1], rows, rope_p(n));
}

bool ob_cu_op_softmax(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *a = n->src[0];
    return OB_CU_LAUNCH(cx, k_softmax, (unsigned)ob_nrows(a), row_threads(a->ne[0]), 0, (const float *)a->data, (float *)n->data, a->ne[0]);
}

OB_CU_MARK_BIND(elementwise)
