/* SAMPLE: one token per logits row from per-row parameters (temperature, top-k, top-p,
 * min-p and a uniform draw u), through the host sampler's own draw (ob_sample_pick), so a
 * request gives the same tokens whether it samples here, on a GPU, or on the host. Rows
 * are split over threads; each row needs at most OB_SAMPLE_MAX_K candidates, on the stack. */
#include "backend/cpu/cpu.h"

int32_t ob_cpu_sample_row(const float *w, int n, const float *p) {
    const float temp = p[OB_SAMPLE_TEMP];
    if (temp <= 0 || n <= 0) return ob_argmax_f32(w, n);
    /* top-k within 1..OB_SAMPLE_MAX_K; k >= n (top-k off) only when n <= OB_SAMPLE_MAX_K,
     * so idx always has room */
    int32_t idx[OB_SAMPLE_MAX_K];
    const float kf = p[OB_SAMPLE_TOP_K];
    const int k = kf >= 1 ? (kf < OB_SAMPLE_MAX_K ? (int)kf : OB_SAMPLE_MAX_K) : 1;
    const float u = p[OB_SAMPLE_U] >= 0 && p[OB_SAMPLE_U] < 1 ? p[OB_SAMPLE_U] : 0;
    return ob_sample_pick(w, n, temp, k, p[OB_SAMPLE_TOP_P], p[OB_SAMPLE_MIN_P], (double)u, idx);
}

void ob_cpu_op_sample(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const ob_tensor *lg = dst->src[0], *pr = dst->src[1];
    const int64_t n = lg->ne[0], R = ob_nrows(lg);
    int64_t r0, r1;
    ob_cpu_split(R, c->ith, c->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++)
    {
        const float *p = (const float *)pr->data + r * OB_SAMPLE_NPARAM;
        const float nv = p[OB_SAMPLE_N_VOCAB];
        const int nr = nv >= 1 && nv < (float)n ? (int)nv : (int)n;
        ((int32_t *)dst->data)[r] = ob_cpu_sample_row((const float *)lg->data + r * n, nr, p);
    }
}

void ob_cpu_ref_sample(ob_tensor *dst) {
    ob_cpu_op_ctx one = {.ith = 0, .nth = 1};
    ob_cpu_op_sample(dst, &one);
}
