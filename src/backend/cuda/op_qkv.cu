/* The fused decode launch of a layer's q/k/v tail (OB_CU_FUSE_QKV): [RMS_NORM ->] ROPE of
 * q, [RMS_NORM ->] ROPE of k, KV_STORE of k, KV_STORE of v, as one kernel instead of up to
 * four. Blocks [0, Hq*T) take q rows (one head of one token each), the next Hk*T blocks k
 * rows, each of which also writes its head's part of the K cache row from the rotated
 * values it just made, and the rest the V cache rows, one element (or Q8_0 block) per
 * thread. Every part repeats its unfused kernel's float operations with the same block
 * size, so the outputs equal the unfused ones bit for bit. The norms' outputs are never
 * written (only their ropes read them), nor k's rope when only its KV_STORE reads it, nor
 * the stores' zero tokens when nothing reads their value: cuda_backend.cu checks those
 * readers, and that no part writes what another reads, before it picks this launch. */
#include "backend/cuda/rowops.cuh"
#include "backend/cuda/cuda_stats.h"

typedef struct ob_qkv_part {
    const float *x, *w; /* x: the norm's input, or the rope's without a norm */
    float *z;           /* the rope's output (k: NULL where only its KV_STORE reads it: kept in
                         * shared memory); the norm's is never written (only the rope reads it) */
    int norm;
    int64_t rows, n_head;
    float eps;
    ob_rope_p rp; /* the part's own rope: q and k may differ in factors and mscale */
} ob_qkv_part;

typedef struct ob_qkv_args {
    ob_qkv_part q, k;
    ob_kv_job kj, vj;
    const int32_t *pos, *seq;
    int64_t hd, cps, T;
} ob_qkv_args;

/* Row r of one part: RMS_NORM (as k_rms_rope; the normed row stays in shared memory sy,
 * since only the rope reads it) then ROPE into z; without a norm, ROPE of x (as k_rope). */
static __device__ __forceinline__ void qkv_row(const ob_qkv_part &p, int64_t r, int64_t hd, const int32_t *__restrict__ pos,
                                               float *sh, float *sy, float *zr) {
    const float *src = p.x + r * hd;
    if (p.norm) {
        const float mean = 0.0f;
        float s2 = 0.0f;
        for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
            const float d = src[i] - mean;
            s2 += d * d;
        }
        const float sc = rsqrtf(block_sum(s2, sh) / (float)hd + p.eps);
        for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
            float v = (src[i] - mean) * sc;
            if (p.w) v *= p.w[i];
            sy[i] = v;
        }
        __syncthreads(); /* pairs read elements other threads normed */
        src = sy;
    }
    const int64_t half = (hd + 1) / 2;
    for (int64_t k = threadIdx.x; k < half; k += blockDim.x)
        rope_pair(src, zr, pos, r, k, hd, p.n_head, p.rp);
}

/* Item e (element, or block: kvq_block_type) of k head kh of token t into the K cache from
 * the rotated head zr, as kv_store_one does it from the rope's output. */
static __device__ __forceinline__ void kv_store_head(const ob_kv_job j, int64_t t, int64_t kh, int64_t hd, const float *zr, int64_t e,
                                                     const int32_t *__restrict__ pos, const int32_t *__restrict__ seq, int64_t cps) {
    const int64_t p = pos[t], s = seq[t];
    if (p < 0 || p >= cps || s < 0 || s * cps + cps > j.cells) return;
    uint8_t *d = j.cache + (size_t)(s * cps + p) * j.rb;
    /* the head's items start at element kh hd, block kh hd / 32 (hd holds whole blocks) */
    if (kvq_block_type(j.type)) kv_put(j, d + (size_t)kvq_bytes(j.type) * (kh * hd / 32), zr, e);
    else kv_put(j, d + (size_t)(j.type == OB_TYPE_F32 ? 4 : 2) * (kh * hd), zr, e);
}

__global__ void k_qkv(ob_qkv_args a) {
    OB_PDL_ENTRY();
    __shared__ float sh[32];
    extern __shared__ float ob_qkv_sm[]; /* [2][hd]: the normed row, the rotated k row */
    float *sy = ob_qkv_sm, *sz = ob_qkv_sm + a.hd;
    int64_t b = blockIdx.x;
    if (b == 0 && threadIdx.x == 0 && a.kj.tok) {
        *a.kj.tok = 0.0f;
        *a.vj.tok = 0.0f;
    }
    if (b < a.q.rows) {
        qkv_row(a.q, b, a.hd, a.pos, sh, sy, a.q.z + b * a.hd);
        return;
    }
    b -= a.q.rows;
    if (b < a.k.rows) {
        float *zr = a.k.z ? a.k.z + b * a.hd : sz;
        qkv_row(a.k, b, a.hd, a.pos, sh, sy, zr);
        __syncthreads(); /* the cache takes the rotated head the whole block wrote */
        const int64_t t = b / a.k.n_head, kh = b % a.k.n_head;
        const int64_t per = kvq_block_type(a.kj.type) ? a.hd / 32 : a.hd; /* threads' items of this head */
        for (int64_t e = threadIdx.x; e < per; e += blockDim.x) kv_store_head(a.kj, t, kh, a.hd, zr, e, a.pos, a.seq, a.cps);
        return;
    }
    b -= a.k.rows;
    const int64_t i = b * blockDim.x + threadIdx.x;
    if (i < a.vj.per * a.T) kv_store_one(a.vj, i / a.vj.per, i % a.vj.per, a.pos, a.seq, a.cps);
}

static ob_qkv_part qkv_part(const ob_tensor *norm, const ob_tensor *rope, bool keep) {
    ob_qkv_part p;
    const ob_tensor *x = norm ? norm->src[0] : rope->src[0];
    p.x = (const float *)x->data;
    p.w = norm && norm->src[1] ? (const float *)norm->src[1]->data : NULL;
    p.norm = norm != NULL;
    p.z = keep ? (float *)rope->data : NULL;
    p.rows = ob_nrows(x);
    p.n_head = rope->src[0]->ne[1];
    p.eps = norm ? norm->fp[0] : 0.0f;
    p.rp = rope_p(rope);
    return p;
}

/* Same block size as k_rms_rope (op_elementwise.cu's row_threads): the norm's reduction
 * order depends on it. */
static int qkv_threads(int64_t hd) { return hd >= 1024 ? 1024 : hd >= 256 ? 256 : 64; }

bool ob_cu_op_qkv(ob_cu_ctx *cx, ob_tensor *qn, ob_tensor *qr, ob_tensor *kn, ob_tensor *kr, ob_tensor *ks, ob_tensor *vs,
                  bool keep_kr, bool keep_tok) {
    ob_qkv_args a;
    a.q = qkv_part(qn, qr, true);
    a.k = qkv_part(kn, kr, keep_kr);
    a.kj = kv_job(ks);
    a.vj = kv_job(vs);
    if (!keep_tok) a.kj.tok = a.vj.tok = NULL;
    a.pos = (const int32_t *)ks->src[2]->data;
    a.seq = (const int32_t *)ks->src[3]->data;
    a.hd = qr->src[0]->ne[0];
    a.cps = ks->ip[0];
    a.T = ob_nelements(vs->src[0]) / vs->src[1]->ne[0];
    const int th = qkv_threads(a.hd);
    cx->stats[OB_CU_STAT_QKV]++;
    const int64_t vblocks = (a.vj.per * a.T + th - 1) / th;
    return OB_CU_LAUNCH(cx, k_qkv, dim3((unsigned)(a.q.rows + a.k.rows + vblocks)), dim3((unsigned)th),
                        2 * sizeof(float) * (size_t)a.hd, a);
}

OB_CU_MARK_BIND(qkv)
