/* Device helpers shared by the row ops (op_elementwise.cu), the KV cache and attention
 * kernels (op_attention.cu, op_flash_attn.cu) and the fused decode q/k/v launch (op_qkv.cu),
 * so a fused kernel repeats its parts' exact float operations. Only .cu files include this. */
#ifndef OB_BACKEND_CUDA_ROWOPS_CUH
#define OB_BACKEND_CUDA_ROWOPS_CUH

#include "backend/cuda/cuda_int.h"
#include "backend/cuda/kvq.cuh"
#include <math.h>

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it. */
static __device__ __forceinline__ float block_sum(float v, float *sh) {
    for (int o = OB_WARP / 2; o > 0; o /= 2) v += OB_SHFL_XOR(v, o);
    const int w = threadIdx.x / OB_WARP, nw = blockDim.x / OB_WARP;
    __syncthreads(); /* sh may still be read from a previous call */
    if (threadIdx.x % OB_WARP == 0) sh[w] = v;
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < nw; i++) s += sh[i];
    return s;
}

/* One ROPE node's parameters (graph.h OB_OP_ROPE) as its kernels take them. */
typedef struct ob_rope_p {
    const float *ff; /* frequency factors [n_rot / 2] dividing the angles, or NULL */
    float base, fscale, ms; /* ms: mscale, multiplies both rotated elements */
    int n_rot, neox;
} ob_rope_p;

/* ROPE node r's parameters (host side). */
static inline ob_rope_p rope_p(const ob_tensor *r) {
    ob_rope_p p;
    p.ff = r->src[2] ? (const float *)r->src[2]->data : NULL;
    p.base = r->fp[0];
    p.fscale = r->fp[1];
    p.ms = r->fp[2];
    p.n_rot = r->ip[0];
    p.neox = r->ip[1] == 2;
    return p;
}

/* The angle of pair k of ROPE at position p, in double as the reference does it, so long
 * positions keep their precision. The sine and cosine come back times mscale, which then
 * scales both rotated elements without another multiply per element (1: exact, as none). */
static __device__ __forceinline__ void rope_angle(double p, int64_t k, const ob_rope_p &rp, double *sn, double *cs) {
    double th = p * (double)rp.fscale * pow((double)rp.base, -2.0 * (double)k / (double)rp.n_rot);
    if (rp.ff) th /= (double)rp.ff[k];
    sincos(th, sn, cs);
    *sn *= (double)rp.ms;
    *cs *= (double)rp.ms;
}

/* Pair k of one row of ROPE (xr -> yr) with its angle's sine and cosine (mscale in them);
 * pairs past n_rot / 2 copy the pass-through tail, unscaled: elements n_rot + 2(k - n_rot/2)
 * and the one after. */
static __device__ __forceinline__ void rope_apply(const float *xr, float *yr, int64_t k, int64_t hd, int n_rot, int neox,
                                                  double sn, double cs) {
    if (k < n_rot / 2) {
        const int64_t a = neox ? k : 2 * k, b = neox ? k + n_rot / 2 : 2 * k + 1;
        const double x0 = xr[a], x1 = xr[b];
        yr[a] = (float)(x0 * cs - x1 * sn);
        yr[b] = (float)(x0 * sn + x1 * cs);
    } else {
        const int64_t j = n_rot + 2 * (k - n_rot / 2);
        if (j < hd) yr[j] = xr[j];
        if (j + 1 < hd) yr[j + 1] = xr[j + 1];
    }
}

/* Pair k of one row of ROPE (xr -> yr, row r of the input). */
static __device__ __forceinline__ void rope_pair(const float *xr, float *yr, const int32_t *__restrict__ pos, int64_t r,
                                                 int64_t k, int64_t hd, int64_t n_head, const ob_rope_p &rp) {
    double sn = 0.0, cs = 1.0;
    if (k < rp.n_rot / 2) rope_angle(pos[r / n_head], k, rp, &sn, &cs);
    rope_apply(xr, yr, k, hd, rp.n_rot, rp.neox, sn, cs);
}

/* Element e of a cache row of any cache type (op_table.c's kv_type). */
static __device__ __forceinline__ float kv_at(int type, const uint8_t *row, int64_t e) {
    if (type == OB_TYPE_F32) return ((const float *)row)[e];
    if (type == OB_TYPE_F16) return __half2float(((const __half *)row)[e]);
    if (type == OB_TYPE_BF16) return __uint_as_float((uint32_t)((const uint16_t *)row)[e] << 16);
    return kvq_at(type, row + (e / 32) * kvq_bytes(type), (int)(e % 32));
}

/* One cache write: x F32 [row, T] into cache rows of `type` (rb bytes each). */
typedef struct ob_kv_job {
    const float *x;
    uint8_t *cache;
    float *tok;
    int type;
    int64_t row, per, cells; /* per: threads per token (elements, or blocks: kvq_block_type) */
    size_t rb;
} ob_kv_job;

/* The cache write of KV_STORE n (host side). */
static inline ob_kv_job kv_job(const ob_tensor *n) {
    const ob_tensor *x = n->src[0], *cache = n->src[1];
    ob_kv_job j;
    j.x = (const float *)x->data;
    j.cache = (uint8_t *)cache->data;
    j.tok = (float *)n->data;
    j.type = (int)cache->type;
    j.row = cache->ne[0];
    j.per = kvq_block_type(cache->type) ? j.row / 32 : j.row;
    j.cells = ob_nrows(cache);
    j.rb = ob_row_size(cache->type, j.row);
    return j;
}

/* Element or 32-element block k of token t into a cache of type j.type. */
static __device__ __forceinline__ void kv_put(const ob_kv_job &j, uint8_t *d, const float *xr, int64_t k) {
    if (j.type == OB_TYPE_F32) ((float *)d)[k] = xr[k];
    else if (j.type == OB_TYPE_F16) ((__half *)d)[k] = __float2half_rn(xr[k]);
    else if (j.type == OB_TYPE_BF16) ((uint16_t *)d)[k] = kvq_bf16_bits(xr[k]);
    else kvq_store(j.type, xr + 32 * k, d + (size_t)kvq_bytes(j.type) * k);
}

/* Element or 32-element block k of token t. Tokens whose cell is outside the cache are
 * skipped (the engine rejects them before; this avoids wild writes). */
static __device__ __forceinline__ void kv_store_one(const ob_kv_job j, int64_t t, int64_t k, const int32_t *__restrict__ pos,
                                                    const int32_t *__restrict__ seq, int64_t cps) {
    const int64_t p = pos[t], s = seq[t];
    if (p < 0 || p >= cps || s < 0 || s * cps + cps > j.cells) return;
    uint8_t *d = j.cache + (size_t)(s * cps + p) * j.rb;
    kv_put(j, d, j.x + t * j.row, k);
}

/* RMS_NORM of row r (hd elements, w optional) into y, then ROPE of that row into z, by
 * the whole block (k_rms_rope's body; sh: 32 floats of shared memory). z may be x itself
 * or apart from it, never y. */
static __device__ __forceinline__ void norm_rope_row(const float *x, const float *__restrict__ w, float *y, float *z,
                                                     const int32_t *__restrict__ pos, int64_t r, int64_t hd, int64_t n_head,
                                                     float eps, const ob_rope_p &rp, float *sh) {
    const float *xr = x + r * hd;
    float *yr = y + r * hd;
    const float mean = 0.0f;
    float s2 = 0.0f;
    for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
        const float d = xr[i] - mean;
        s2 += d * d;
    }
    const float sc = rsqrtf(block_sum(s2, sh) / (float)hd + eps);
    for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
        float v = (xr[i] - mean) * sc;
        if (w) v *= w[i];
        yr[i] = v;
    }
    __syncthreads(); /* pairs read elements other threads normed */
    const int64_t half = (hd + 1) / 2;
    for (int64_t k = threadIdx.x; k < half; k += blockDim.x)
        rope_pair(yr, z + r * hd, pos, r, k, hd, n_head, rp);
}

/* The factor that turns a (token, head)'s unnormalised attention output (its values weighted
 * by exp(score - m), the weights summing to l) into the output: 1 / l; with gpt-oss's sinks
 * (graph.h's ATTENTION src6, F32 [n_head]; NULL: none) head h's sink joins the denominator as
 * one more logit with no value, and where it is the larger the factor also carries the output
 * from m to it. As the reference, a sink of -inf or NaN adds nothing. B2: m in base 2 (the
 * flash kernel's exp2 units; the sink is turned into them here). */
template <bool B2 = false>
static __device__ __forceinline__ float attn_inv(const float *__restrict__ sinks, int64_t h, float m, float l) {
    if (sinks) {
        const float s = B2 ? sinks[h] * 1.44269504088896341f : sinks[h];
        if (s > m) { /* m = -inf (no cell seen) included */
            const float c = m == -INFINITY ? 0.0f : B2 ? exp2f(m - s) : expf(m - s);
            return c / (l * c + 1.0f);
        }
        if (s > -INFINITY) l += B2 ? exp2f(s - m) : expf(s - m);
    }
    return l > 0.0f ? 1.0f / l : 0.0f;
}

#endif
