/* Encoder ops: POOL (one vector per sequence: mean, first = CLS or last token by
 * position, optionally L2-normalised) and ACT = TANH (the rank heads of BERT-style
 * rerankers). Semantics are graph.h's; ob_cpu_ref_op is the oracle
 * (tests/unit/test_cuda_ops.c). Only intrinsics that cuda_compat.h maps are used, so the
 * file builds with hipcc as well. */
#include "backend/cuda/cuda_int.h"
#include <math.h>

#define OB_POOL_THREADS 128 /* columns per block of k_pool */
#define OB_POOL_NORM_THREADS 256

/* ---- POOL ----------------------------------------------------------------------------------- */

/* Grid (n_seq, column blocks): thread i of block (s, c) owns column c * blockDim.x + i of
 * sequence s's row, so the loads of one token row are coalesced. Every thread scans the
 * batch's seq/pos itself (the same addresses across the warp: broadcast loads), so the
 * count and the CLS/LAST pick need no reduction. CLS takes the lowest position, LAST the
 * highest; ties keep the earliest token, as the CPU reference does. A sequence with no
 * token in the batch gets zeros. */
__global__ void k_pool(const float *__restrict__ x, const int32_t *__restrict__ seq, const int32_t *__restrict__ pos,
                       float *__restrict__ y, int64_t n, int64_t T, int type) {
    OB_CU_MARK();
    const int64_t s = blockIdx.x, i = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = 0.0f;
    if (type == OB_POOL_MEAN) {
        int64_t count = 0;
        for (int64_t t = 0; t < T; t++) {
            if (seq[t] != s) continue;
            v += x[t * n + i];
            count++;
        }
        if (count > 0) v *= 1.0f / (float)count;
    } else {
        int64_t pick = -1;
        int32_t pp = 0;
        for (int64_t t = 0; t < T; t++) {
            if (seq[t] != s) continue;
            const int32_t p = pos[t];
            if (pick < 0 || (type == OB_POOL_CLS ? p < pp : p > pp)) { pick = t; pp = p; }
        }
        if (pick >= 0) v = x[pick * n + i];
    }
    y[s * n + i] = v;
}

/* In place, one block per pooled row [n]: sentence-transformers' Normalize,
 * y / max(|y|, 1e-12) (an all-zero row stays zero). */
__global__ void k_pool_l2(float *__restrict__ y, int64_t n) {
    OB_CU_MARK();
    __shared__ float sh[OB_POOL_NORM_THREADS / OB_WARP];
    float *yr = y + (int64_t)blockIdx.x * n;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += yr[i] * yr[i];
    for (int o = OB_WARP / 2; o > 0; o /= 2) ss += OB_SHFL_XOR(ss, o);
    if (threadIdx.x % OB_WARP == 0) sh[threadIdx.x / OB_WARP] = ss;
    __syncthreads();
    float tot = 0.0f;
    for (int k = 0; k < (int)(blockDim.x / OB_WARP); k++) tot += sh[k];
    const float inv = 1.0f / fmaxf(sqrtf(tot), 1e-12f);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] *= inv;
}

/* After ob_op_valid: grid x is the sequence (up to 2^31 - 1), grid y the column blocks (up
 * to 65535). */
bool ob_cu_supports_pool(const ob_tensor *n) { return (n->src[0]->ne[0] + OB_POOL_THREADS - 1) / OB_POOL_THREADS <= 65535; }

bool ob_cu_op_pool(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *a = n->src[0];
    const int64_t ncol = a->ne[0], S = n->ip[2];
    const dim3 grid((unsigned)S, ob_cu_blocks(ncol, OB_POOL_THREADS));
    (void)OB_CU_LAUNCH_PLAIN(cx, (k_pool), grid, OB_POOL_THREADS, 0, (const float *)a->data, (const int32_t *)n->src[1]->data,
                                                      (const int32_t *)n->src[2]->data, (float *)n->data, ncol, ob_nrows(a),
                                                      n->ip[0]);
    if (!OB_CU_LAUNCHED(cx)) return false;
    if (n->ip[1]) {
        (void)OB_CU_LAUNCH_PLAIN(cx, (k_pool_l2), (unsigned)S, OB_POOL_NORM_THREADS, 0, (float *)n->data, ncol);
        if (!OB_CU_LAUNCHED(cx)) return false;
    }
    return true;
}

/* ---- ACT = TANH ----------------------------------------------------------------------------- */

/* tanhf is accurate to a few ulp on both toolkits and saturates to +-1 without overflow. */
__global__ void k_tanh(const float *__restrict__ a, float *__restrict__ y, int64_t n) {
    OB_CU_MARK();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = tanhf(a[i]);
}

bool ob_cu_op_tanh(ob_cu_ctx *cx, ob_tensor *n) {
    const int64_t ne = ob_nelements(n);
    (void)OB_CU_LAUNCH_PLAIN(cx, (k_tanh), ob_cu_blocks(ne, 256), 256, 0, (const float *)n->src[0]->data, (float *)n->data, ne);
    return OB_CU_LAUNCHED(cx);
}

OB_CU_MARK_BIND(encoder)
