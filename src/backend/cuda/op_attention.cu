/* KV_STORE and ATTENTION with the KV cache in F32, F16 or Q8_0 (K and V independently).
 *
 * Attention is flash-decoding style: the grid is (kv split, head, token); each block of
 * four warps runs an online softmax over its split's cells (one cell per warp at a time,
 * each lane owning hd/32 elements of q, K, V and the accumulator), merges its warps in
 * shared memory, and either writes the output (one split) or a partial (max, sum, acc)
 * that k_attn_merge combines. Decode (T <= OB_ATTN_SPLIT_T) splits the cells so a single
 * token still fills the GPU; the number of splits depends only on the cache size, not on
 * positions (which live on the device), so a captured step stays valid as pos grows. */
#include "backend/cuda/cuda_int.h"
#include <math.h>

#define OB_ATTN_WARPS 4
#define OB_ATTN_MAX_NE 8      /* hd / 32: head sizes up to 256 */
#define OB_ATTN_CHUNK 256     /* cells per split in decode */
#define OB_ATTN_SPLIT_T 8

static __device__ __forceinline__ float kv_at(int type, const uint8_t *row, int64_t e) {
    if (type == OB_TYPE_F32) return ((const float *)row)[e];
    if (type == OB_TYPE_F16) return __half2float(((const __half *)row)[e]);
    const uint8_t *b = row + (e / 32) * 34;
    const float d = __half2float(__ushort_as_half((uint16_t)(b[0] | b[1] << 8)));
    return (float)(int8_t)b[2 + e % 32] * d;
}

/* ---- KV_STORE ---------------------------------------------------------------------------- */

/* One thread per element (F32/F16) or per 32-element block (Q8_0). Tokens whose cell is
 * outside the cache are skipped (the engine rejects them before; this avoids wild writes). */
__global__ void k_kv_store(const float *__restrict__ x, uint8_t *__restrict__ cache, const int32_t *__restrict__ pos,
                           const int32_t *__restrict__ seq, float *__restrict__ tok, int type, int64_t row, int64_t T,
                           int64_t cps, int64_t cells, size_t rb) {
    const int64_t per = type == OB_TYPE_Q8_0 ? row / 32 : row;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) *tok = 0.0f;
    if (i >= per * T) return;
    const int64_t t = i / per, k = i % per;
    const int64_t p = pos[t], s = seq[t];
    if (p < 0 || p >= cps || s < 0 || s * cps + cps > cells) return;
    uint8_t *d = cache + (size_t)(s * cps + p) * rb;
    const float *xr = x + t * row;
    if (type == OB_TYPE_F32) ((float *)d)[k] = xr[k];
    else if (type == OB_TYPE_F16) ((__half *)d)[k] = __float2half_rn(xr[k]);
    else ob_cu_quant_q8_0(xr + 32 * k, d + 34 * k);
}

bool ob_cu_op_kv_store(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *x = n->src[0], *cache = n->src[1];
    const int64_t row = cache->ne[0], T = ob_nelements(x) / row;
    const int64_t per = cache->type == OB_TYPE_Q8_0 ? row / 32 : row;
    k_kv_store<<<ob_cu_blocks(OB_MAX(per * T, 1), 256), 256, 0, cx->stream>>>(
        (const float *)x->data, (uint8_t *)cache->data, (const int32_t *)n->src[2]->data, (const int32_t *)n->src[3]->data,
        (float *)n->data, (int)cache->type, row, T, n->ip[0], ob_nrows(cache), ob_row_size(cache->type, row));
    return OB_CU_LAUNCHED(cx);
}

/* ---- ATTENTION --------------------------------------------------------------------------- */

typedef struct ob_attn_args {
    const float *q;
    const uint8_t *kc, *vc;
    const int32_t *pos, *seq;
    float *out, *partial;
    int64_t hd, H, T, n_kv, cps, cells, window;
    size_t krb, vrb;
    int ktype, vtype, causal, nsplit;
    float scale, cap;
} ob_attn_args;

static int attn_nsplit(const ob_tensor *n) {
    const int64_t T = n->src[0]->ne[2] * n->src[0]->ne[3];
    if (T > OB_ATTN_SPLIT_T) return 1;
    const int64_t s = (n->ip[0] + OB_ATTN_CHUNK - 1) / OB_ATTN_CHUNK;
    return (int)OB_MAX(1, OB_MIN(s, 4096));
}

size_t ob_cu_attention_tmp_size(const ob_tensor *n) {
    const int ns = attn_nsplit(n);
    if (ns == 1) return 0;
    const ob_tensor *q = n->src[0];
    return sizeof(float) * (size_t)(q->ne[1] * q->ne[2] * q->ne[3] * ns * (q->ne[0] + 2));
}

__global__ void __launch_bounds__(OB_ATTN_WARPS * OB_WARP) k_attn(ob_attn_args a) {
    __shared__ float s_m[OB_ATTN_WARPS], s_l[OB_ATTN_WARPS];
    __shared__ float s_acc[OB_ATTN_WARPS][OB_ATTN_MAX_NE * OB_WARP];
    __shared__ int s_hi;
    const int sp = blockIdx.x, lane = threadIdx.x % OB_WARP, w = threadIdx.x / OB_WARP;
    const int64_t h = blockIdx.y, t = blockIdx.z, hd = a.hd, ne = hd / 32;
    const int64_t kh = h / (a.H / a.n_kv);
    const int64_t p = a.pos[t], s = a.seq[t];
    /* Whole-sequence attention reaches the furthest position of this sequence in the batch. */
    if (threadIdx.x == 0) s_hi = (int)p;
    __syncthreads();
    if (!a.causal) {
        int m = (int)p;
        for (int64_t u = threadIdx.x; u < a.T; u += blockDim.x)
            if (a.seq[u] == s && a.pos[u] > m) m = a.pos[u];
        atomicMax(&s_hi, m);
        __syncthreads();
    }
    int64_t lo = a.window > 0 ? OB_MAX((int64_t)0, p - a.window + 1) : 0, hi = s_hi;
    if (!a.causal && a.window > 0) hi = OB_MIN(hi, p + a.window - 1);
    const bool valid = p >= 0 && p < a.cps && s >= 0 && s * a.cps + a.cps <= a.cells;
    if (!valid) hi = -1;
    hi = OB_MIN(hi, a.cps - 1);
    if (a.nsplit > 1) {
        lo = OB_MAX(lo, (int64_t)sp * OB_ATTN_CHUNK);
        hi = OB_MIN(hi, (int64_t)sp * OB_ATTN_CHUNK + OB_ATTN_CHUNK - 1);
    }
    float qv[OB_ATTN_MAX_NE], acc[OB_ATTN_MAX_NE];
    const float *qp = a.q + (t * a.H + h) * hd;
#pragma unroll
    for (int i = 0; i < OB_ATTN_MAX_NE; i++) { qv[i] = i < ne ? qp[lane + 32 * i] * a.scale : 0.0f; acc[i] = 0.0f; }
    float m = -INFINITY, l = 0.0f;
    const int64_t cell0 = s * a.cps, hoff = kh * hd;
    for (int64_t j = lo + w; j <= hi; j += OB_ATTN_WARPS) {
        const uint8_t *kr = a.kc + (size_t)(cell0 + j) * a.krb, *vr = a.vc + (size_t)(cell0 + j) * a.vrb;
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < OB_ATTN_MAX_NE; i++)
            if (i < ne) d += qv[i] * kv_at(a.ktype, kr, hoff + lane + 32 * i);
        for (int o = OB_WARP / 2; o > 0; o /= 2) d += OB_SHFL_XOR(d, o);
        if (a.cap > 0.0f) d = a.cap * tanhf(d / a.cap);
        if (d > m) {
            const float corr = expf(m - d);
            l *= corr;
#pragma unroll
            for (int i = 0; i < OB_ATTN_MAX_NE; i++) acc[i] *= corr;
            m = d;
        }
        const float pj = expf(d - m);
        l += pj;
#pragma unroll
        for (int i = 0; i < OB_ATTN_MAX_NE; i++)
            if (i < ne) acc[i] += pj * kv_at(a.vtype, vr, hoff + lane + 32 * i);
    }
    if (lane == 0) { s_m[w] = m; s_l[w] = l; }
#pragma unroll
    for (int i = 0; i < OB_ATTN_MAX_NE; i++)
        if (i < ne) s_acc[w][lane + 32 * i] = acc[i];
    __syncthreads();
    float M = -INFINITY;
    for (int k = 0; k < OB_ATTN_WARPS; k++) if (s_l[k] > 0.0f) M = fmaxf(M, s_m[k]);
    float L = 0.0f, f[OB_ATTN_WARPS];
    for (int k = 0; k < OB_ATTN_WARPS; k++) { f[k] = s_l[k] > 0.0f ? expf(s_m[k] - M) : 0.0f; L += s_l[k] * f[k]; }
    if (a.nsplit == 1) {
        float *o = a.out + (t * a.H + h) * hd;
        const float inv = L > 0.0f ? 1.0f / L : 0.0f;
        for (int64_t e = threadIdx.x; e < hd; e += blockDim.x) {
            float v = 0.0f;
            for (int k = 0; k < OB_ATTN_WARPS; k++) v += s_acc[k][e] * f[k];
            o[e] = v * inv;
        }
    } else {
        float *pp = a.partial + ((t * a.H + h) * a.nsplit + sp) * (hd + 2);
        if (threadIdx.x == 0) { pp[0] = M; pp[1] = L; }
        if (L > 0.0f)
            for (int64_t e = threadIdx.x; e < hd; e += blockDim.x) {
                float v = 0.0f;
                for (int k = 0; k < OB_ATTN_WARPS; k++) v += s_acc[k][e] * f[k];
                pp[2 + e] = v;
            }
    }
}

/* One block per (token, head): rescale every split's partial to the common max. */
__global__ void k_attn_merge(const float *__restrict__ partial, float *__restrict__ out, int64_t hd, int nsplit) {
    const float *pp = partial + (size_t)blockIdx.x * nsplit * (hd + 2);
    float M = -INFINITY;
    for (int k = 0; k < nsplit; k++) if (pp[k * (hd + 2) + 1] > 0.0f) M = fmaxf(M, pp[k * (hd + 2)]);
    float *o = out + (size_t)blockIdx.x * hd;
    for (int64_t e = threadIdx.x; e < hd; e += blockDim.x) {
        float L = 0.0f, v = 0.0f;
        for (int k = 0; k < nsplit; k++) {
            const float *ps = pp + k * (hd + 2);
            if (!(ps[1] > 0.0f)) continue;
            const float f = expf(ps[0] - M);
            L += ps[1] * f;
            v += ps[2 + e] * f;
        }
        o[e] = L > 0.0f ? v / L : 0.0f;
    }
}

bool ob_cu_op_attention(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *q = n->src[0], *kc = n->src[1], *vc = n->src[2];
    ob_attn_args a;
    a.q = (const float *)q->data;
    a.kc = (const uint8_t *)kc->data;
    a.vc = (const uint8_t *)vc->data;
    a.pos = (const int32_t *)n->src[3]->data;
    a.seq = (const int32_t *)n->src[4]->data;
    a.out = (float *)n->data;
    a.partial = (float *)cx->tmp;
    a.hd = q->ne[0];
    a.H = q->ne[1];
    a.T = q->ne[2] * q->ne[3];
    a.n_kv = n->ip[1];
    a.cps = n->ip[0];
    a.cells = ob_nrows(kc);
    a.window = n->ip[2];
    a.krb = ob_row_size(kc->type, kc->ne[0]);
    a.vrb = ob_row_size(vc->type, vc->ne[0]);
    a.ktype = (int)kc->type;
    a.vtype = (int)vc->type;
    a.causal = n->ip[3] != 0;
    a.nsplit = attn_nsplit(n);
    a.scale = n->fp[0];
    a.cap = n->fp[1];
    dim3 grid((unsigned)a.nsplit, (unsigned)a.H, (unsigned)a.T);
    k_attn<<<grid, OB_ATTN_WARPS * OB_WARP, 0, cx->stream>>>(a);
    if (!OB_CU_LAUNCHED(cx)) return false;
    if (a.nsplit > 1) {
        k_attn_merge<<<(unsigned)(a.H * a.T), 128, 0, cx->stream>>>(a.partial, a.out, a.hd, a.nsplit);
        if (!OB_CU_LAUNCHED(cx)) return false;
    }
    return true;
}
