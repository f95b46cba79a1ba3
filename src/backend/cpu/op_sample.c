/* SAMPLE: one token per logits row from per-row parameters (temperature, top-k, top-p,
 * min-p and a uniform draw u), with exactly ob_sampler_sample's arithmetic so that a
 * request gives the same tokens whether it samples here, on a GPU, or on the host:
 * greedy = first max; otherwise the top-k by (value desc, id asc), min-p, temperature,
 * top-p, then the draw, all in double in the sampler's order. Rows are split over threads;
 * each row needs at most OB_SAMPLE_MAX_K candidates, kept on the stack. */
#include "backend/cpu/cpu.h"
#include <math.h>
#include <stdlib.h>

/* a ranks before b: larger value, then lower id (the sampler's total order) */
static bool before(const float *w, int32_t a, int32_t b) {
    if (w[a] != w[b]) return w[a] > w[b];
    return a < b;
}

static int cmp_rank(const void *a, const void *b, void *ctx) {
    const float *w = ctx;
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (w[x] != w[y]) return w[x] < w[y] ? 1 : -1;
    return x - y;
}

/* The k best ids of w[0..n) into h[0..k) (a heap whose root is the worst kept). */
static void top_k(const float *w, int n, int k, int32_t *h) {
    int m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (m < k) {
            int c = m++;
            h[c] = i;
            while (c > 0 && before(w, h[(c - 1) / 2], h[c])) { /* a worse child rises */
                int32_t t = h[c]; h[c] = h[(c - 1) / 2]; h[(c - 1) / 2] = t; c = (c - 1) / 2;
            }
        } else if (before(w, i, h[0])) {
            h[0] = i;
            int c = 0;
            for (;;) {
                int l = 2 * c + 1, r = l + 1, worst = c;
                if (l < m && before(w, h[worst], h[l])) worst = l;
                if (r < m && before(w, h[worst], h[r])) worst = r;
                if (worst == c) break;
                int32_t t = h[c]; h[c] = h[worst]; h[worst] = t; c = worst;
            }
        }
    }
}

int32_t ob_cpu_sample_row(const float *w, int n, const float *p) {
    const float temp = p[OB_SAMPLE_TEMP], top_p = p[OB_SAMPLE_TOP_P], min_p = p[OB_SAMPLE_MIN_P];
    if (temp <= 0 || n <= 0) return ob_argmax_f32(w, n);
    int32_t idx[OB_SAMPLE_MAX_K];
    const float kf = p[OB_SAMPLE_TOP_K];
    int k = kf >= 1 ? (kf < OB_SAMPLE_MAX_K ? (int)kf : OB_SAMPLE_MAX_K) : 1;
    int m = 0;
    if (k < n) {
        top_k(w, n, k, idx);
        m = k;
    } else {
        /* n <= OB_SAMPLE_MAX_K: the sampler's top-k-off branch, min-p pre-filter included */
        float mx0 = w[0];
        for (int i = 1; i < n; i++) if (w[i] > mx0) mx0 = w[i];
        float lim = min_p > 0 ? mx0 + (float)(log(min_p) * temp) - 1e-6f : -INFINITY;
        for (int i = 0; i < n; i++) if (w[i] >= lim) idx[m++] = i;
        if (m == 0) return ob_argmax_f32(w, n); /* only NaN logits: nothing to draw from */
    }
    qsort_r(idx, (size_t)m, sizeof(int32_t), cmp_rank, (void *)w);
    const float mx = w[idx[0]];
    if (min_p > 0) {
        const double lim = log(min_p) * temp;
        int keep = 1;
        while (keep < m && (double)(w[idx[keep]] - mx) >= lim) keep++;
        m = keep;
    }
    double sum = 0;
    for (int i = 0; i < m; i++) sum += exp((double)(w[idx[i]] - mx) / temp);
    if (top_p < 1.0f) {
        double cum = 0;
        int keep = 0;
        while (keep < m) {
            cum += exp((double)(w[idx[keep]] - mx) / temp) / sum;
            keep++;
            if (cum >= top_p) break;
        }
        m = keep;
        sum = 0;
        for (int i = 0; i < m; i++) sum += exp((double)(w[idx[i]] - mx) / temp);
    }
    const float u = p[OB_SAMPLE_U] >= 0 && p[OB_SAMPLE_U] < 1 ? p[OB_SAMPLE_U] : 0;
    const double r = (double)u * sum;
    int32_t pick = idx[m - 1];
    double acc = 0;
    for (int i = 0; i < m; i++) {
        acc += exp((double)(w[idx[i]] - mx) / temp);
        if (r < acc) { pick = idx[i]; break; }
    }
    return pick;
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
