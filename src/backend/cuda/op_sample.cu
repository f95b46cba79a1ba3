/* SAMPLE: one block per logits row [n_vocab], writing one I32 token, with the CPU
 * kernel's semantics (backend/cpu/op_sample.c, itself ob_sampler_sample's):
 *   greedy (temperature <= 0): the first maximum (w[0] NaN -> 0), a block reduction;
 *   otherwise the top-k by (value desc, id asc): a 4-pass 8-bit radix select finds the
 *   k-th key, one ordered pass collects the keys above it and the lowest ids equal to it;
 *   a bitonic sort of the <= 1024 candidates in shared memory; then min-p, temperature,
 *   top-p and the draw with the row's u, in double and in the sampler's sequential order
 *   (one thread: at most 1024 adds; the exps are computed by all threads first).
 * Logits are mapped to 32-bit keys that order like floats (-0 as +0, NaN lowest). */
#include "backend/cuda/cuda_sample.h"

#define SMP_THREADS 1024

static __device__ __forceinline__ uint32_t smp_key(float f) {
    if (f != f) return 0u;
    if (f == 0.0f) f = 0.0f; /* -0 ties +0, as float comparison has it */
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* (key, id) packed so that a larger value ranks first, then a lower id; 0 = empty slot. */
static __device__ __forceinline__ uint64_t smp_pack(uint32_t key, int32_t id) {
    return ((uint64_t)key << 32) | (uint64_t)(0xffffffffu - (uint32_t)id);
}
static __device__ __forceinline__ int32_t smp_id(uint64_t p) { return (int32_t)(0xffffffffu - (uint32_t)p); }

/* Adds 1 to h[bin] for each live lane; lanes with the same bin add once together. */
static __device__ __forceinline__ void smp_hist_add(unsigned *h, unsigned bin, bool live) {
#if !defined(OB_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    const unsigned act = __ballot_sync(0xffffffffu, live);
    if (!live) return;
    const unsigned same = __match_any_sync(act, bin);
    if ((threadIdx.x & 31) == (unsigned)(__ffs(same) - 1)) atomicAdd(&h[bin], (unsigned)__popc(same));
#else
    if (live) atomicAdd(&h[bin], 1u);
#endif
}

/* Exclusive prefix of flag over the block (blockDim.x == SMP_THREADS); *total = sum.
 * Every thread must call it. */
static __device__ __forceinline__ int smp_block_scan(int flag, int *wsum, int *total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int v = flag;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const int o = OB_SHFL(v, lane >= d ? lane - d : lane);
        if (lane >= d) v += o;
    }
    if (lane == 31) wsum[warp] = v;
    __syncthreads();
    if (warp == 0) {
        int s = wsum[lane];
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const int o = OB_SHFL(s, lane >= d ? lane - d : lane);
            if (lane >= d) s += o;
        }
        wsum[lane] = s; /* inclusive over warps */
    }
    __syncthreads();
    const int before = (warp ? wsum[warp - 1] : 0) + v - flag;
    *total = wsum[31];
    __syncthreads(); /* wsum is reused by the next call */
    return before;
}

__global__ void __launch_bounds__(SMP_THREADS) k_sample(const float *__restrict__ logits, const float *__restrict__ params,
                                                        int32_t *__restrict__ out, int n) {
    OB_PDL_ENTRY();
    __shared__ uint64_t cand[SMP_THREADS];
    __shared__ double ex[SMP_THREADS];
    __shared__ unsigned hist[256];
    __shared__ int wsum[32];
    __shared__ float bval[32];
    __shared__ int bidx[32];
    __shared__ unsigned s_sel, s_kr;
    __shared__ int s_gt, s_eq, s_m, s_done;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float *w = logits + (int64_t)blockIdx.x * n;
    const float *p = params + (int64_t)blockIdx.x * OB_SAMPLE_NPARAM;
    const float temp = p[OB_SAMPLE_TEMP], top_p = p[OB_SAMPLE_TOP_P], min_p = p[OB_SAMPLE_MIN_P];
    const float nv = p[OB_SAMPLE_N_VOCAB];
    if (nv >= 1.0f && nv < (float)n) n = (int)nv; /* the sampler's vocabulary: a prefix of the row */

    if (temp <= 0.0f) {
        /* first maximum: start every thread from w[0] so equal later values never win */
        const float w0 = w[0];
        if (w0 != w0) {
            if (tid == 0) out[blockIdx.x] = 0;
            return;
        }
        float bv = w0;
        int bi = 0;
        for (int i = tid; i < n; i += SMP_THREADS) {
            const float v = w[i];
            if (v > bv) { bv = v; bi = i; }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = OB_SHFL_XOR(bv, o);
            const int oi = OB_SHFL_XOR(bi, o);
            if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
        }
        if (lane == 0) { bval[warp] = bv; bidx[warp] = bi; }
        __syncthreads();
        if (tid == 0) {
            for (int k = 1; k < SMP_THREADS / 32; k++)
                if (bval[k] > bv || (bval[k] == bv && bidx[k] < bi)) { bv = bval[k]; bi = bidx[k]; }
            out[blockIdx.x] = bi;
        }
        return;
    }

    const float kf = p[OB_SAMPLE_TOP_K];
    const int k = kf >= 1.0f ? (kf < (float)OB_SAMPLE_MAX_K ? (int)kf : OB_SAMPLE_MAX_K) : 1;
    const bool all = k >= n; /* n <= OB_SAMPLE_MAX_K: every id is a candidate */
    int m;
    if (all) {
        for (int i = tid; i < SMP_THREADS; i += SMP_THREADS) cand[i] = i < n ? smp_pack(smp_key(w[i]), i) : 0;
        m = n;
    } else {
        /* radix select of the k-th largest key, most significant byte first */
        uint32_t prefix = 0, mask = 0, kr = (uint32_t)k;
        for (int shift = 24; shift >= 0; shift -= 8) {
            if (tid < 256) hist[tid] = 0;
            __syncthreads();
            for (int base = 0; base < n; base += SMP_THREADS) {
                const int i = base + tid;
                const uint32_t key = i < n ? smp_key(w[i]) : 0u;
                smp_hist_add(hist, (key >> shift) & 255u, i < n && (key & mask) == prefix);
            }
            __syncthreads();
            if (tid == 0) {
                uint32_t cum = 0, b = 255;
                for (;; b--) {
                    if (cum + hist[b] >= kr || b == 0) break;
                    cum += hist[b];
                }
                s_sel = b;
                s_kr = kr - cum;
            }
            __syncthreads();
            prefix |= s_sel << shift;
            mask |= 255u << shift;
            kr = s_kr;
            __syncthreads(); /* s_sel, s_kr and hist are rewritten next pass */
        }
        /* prefix is now the k-th key; kr of the ids holding it are needed (the lowest) */
        const int n_gt = k - (int)kr;
        if (tid == 0) { s_gt = 0; s_eq = 0; }
        __syncthreads();
        for (int base = 0; base < n; base += SMP_THREADS) {
            const int i = base + tid;
            const uint32_t key = i < n ? smp_key(w[i]) : 0u;
            if (i < n && key > prefix) cand[atomicAdd(&s_gt, 1)] = smp_pack(key, i);
            int tot;
            const int r = smp_block_scan(i < n && key == prefix, wsum, &tot);
            const int taken = s_eq;
            if (i < n && key == prefix && taken + r < (int)kr) cand[n_gt + taken + r] = smp_pack(key, i);
            __syncthreads();
            /* decided by one thread: s_gt may move again as soon as the next pass starts */
            if (tid == 0) {
                s_eq = taken + tot;
                s_done = s_gt == n_gt && s_eq >= (int)kr;
            }
            __syncthreads();
            if (s_done) break;
        }
        for (int i = k + tid; i < SMP_THREADS; i += SMP_THREADS) cand[i] = 0;
        m = k;
    }
    __syncthreads();
    /* bitonic sort, descending, over the smallest power of two >= m */
    int P = 1;
    while (P < m) P <<= 1;
    for (int size = 2; size <= P; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int t = tid; t < P / 2; t += SMP_THREADS) {
                const int i = 2 * stride * (t / stride) + t % stride, j = i + stride;
                const uint64_t a = cand[i], b = cand[j];
                const bool desc = (i & size) == 0;
                if (desc ? a < b : a > b) { cand[i] = b; cand[j] = a; }
            }
            __syncthreads();
        }
    const float mx = w[smp_id(cand[0])];
    if (tid == 0) {
        int mm = m;
        if (all) {
            /* the sampler's top-k-off pre-filter (with its float slack), then its min-p */
            float mx0 = w[0];
            for (int i = 1; i < n; i++) if (w[i] > mx0) mx0 = w[i];
            const float lim = min_p > 0.0f ? __fsub_rn(__fadd_rn(mx0, (float)__dmul_rn(log((double)min_p), (double)temp)), 1e-6f)
                                           : -INFINITY;
            mm = 0;
            while (mm < m && w[smp_id(cand[mm])] >= lim) mm++;
        }
        if (mm > 0 && min_p > 0.0f) {
            const double lim = __dmul_rn(log((double)min_p), (double)temp);
            int keep = 1;
            while (keep < mm && (double)__fsub_rn(w[smp_id(cand[keep])], mx) >= lim) keep++;
            mm = keep;
        }
        s_m = mm;
    }
    __syncthreads();
    m = s_m;
    if (m == 0) { /* only NaN logits */
        if (tid == 0) out[blockIdx.x] = 0;
        return;
    }
    for (int i = tid; i < m; i += SMP_THREADS) ex[i] = exp((double)__fsub_rn(w[smp_id(cand[i])], mx) / (double)temp);
    __syncthreads();
    if (tid != 0) return;
    double sum = 0;
    for (int i = 0; i < m; i++) sum += ex[i];
    if (top_p < 1.0f) {
        double cum = 0;
        int keep = 0;
        while (keep < m) {
            cum += ex[keep] / sum;
            keep++;
            if (cum >= (double)top_p) break;
        }
        m = keep;
        sum = 0;
        for (int i = 0; i < m; i++) sum += ex[i];
    }
    const float u0 = p[OB_SAMPLE_U];
    const float u = u0 >= 0.0f && u0 < 1.0f ? u0 : 0.0f;
    const double r = __dmul_rn((double)u, sum);
    int32_t pick = smp_id(cand[m - 1]);
    double acc = 0;
    for (int i = 0; i < m; i++) {
        acc += ex[i];
        if (r < acc) { pick = smp_id(cand[i]); break; }
    }
    out[blockIdx.x] = pick;
}

/* After ob_op_valid: one block per row. */
bool ob_cu_supports_sample(const ob_tensor *n) { return ob_nrows(n->src[0]) <= 0x7fffffff; }

bool ob_cu_op_sample(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *lg = n->src[0];
    return OB_CU_LAUNCH(cx, k_sample, (unsigned)ob_nrows(lg), SMP_THREADS, 0, (const float *)lg->data,
                        (const float *)n->src[1]->data, (int32_t *)n->data, (int)lg->ne[0]);
}

OB_CU_MARK_BIND(sample)
