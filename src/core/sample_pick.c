/* The draw shared by the host sampler (engine/sampler.c) and the CPU SAMPLE op
 * (backend/cpu/op_sample.c); the CUDA kernel (op_sample.cu) repeats the same arithmetic,
 * and tests hold it to these tokens. */
#include "core/common.h"
#include <math.h>
#include <stdlib.h>

/* a ranks before b: larger value, then lower id (the samplers' total order) */
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

/* The k best ids of w[0..n) into h[0..k) (a heap whose root is the worst kept): O(n log k). */
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

void ob_top_k_sorted(const float *w, int n, int k, int32_t *idx) {
    if (k > n) k = n;
    if (k <= 0) return;
    top_k(w, n, k, idx);
    qsort_r(idx, (size_t)k, sizeof(int32_t), cmp_rank, (void *)w);
}

int ob_sample_rank(const float *w, int n, float temp, int top_k_n, float min_p, int32_t *idx) {
    int m = 0;
    if (top_k_n > 0 && top_k_n < n) {
        top_k(w, n, top_k_n, idx);
        m = top_k_n;
    } else {
        /* top-k off: a min-p threshold (when set) prunes before the sort */
        float mx0 = w[0];
        for (int i = 1; i < n; i++) if (w[i] > mx0) mx0 = w[i];
        float lim = min_p > 0 ? mx0 + (float)(log(min_p) * temp) - 1e-6f : -INFINITY;
        for (int i = 0; i < n; i++) if (w[i] >= lim) idx[m++] = i;
        if (m == 0) return 0; /* only NaN logits */
    }
    qsort_r(idx, (size_t)m, sizeof(int32_t), cmp_rank, (void *)w);
    return m;
}

int ob_sample_min_p(const float *w, const int32_t *idx, int m, float temp, float min_p) {
    if (!(min_p > 0)) return m;
    /* keep tokens with prob >= min_p * max prob */
    const double lim = log(min_p) * temp;
    const float mx = w[idx[0]];
    int keep = 1;
    while (keep < m && (double)(w[idx[keep]] - mx) >= lim) keep++;
    return keep;
}

int ob_sample_top_p(const float *w, const int32_t *idx, int m, float temp, float top_p) {
    if (!(top_p < 1.0f)) return m;
    const float mx = w[idx[0]];
    double sum = 0;
    for (int i = 0; i < m; i++) sum += exp((double)(w[idx[i]] - mx) / temp);
    double cum = 0;
    int keep = 0;
    while (keep < m) {
        cum += exp((double)(w[idx[keep]] - mx) / temp) / sum;
        keep++;
        if (cum >= top_p) break;
    }
    return keep;
}

int32_t ob_sample_draw(const float *w, const int32_t *idx, int m, float temp, double u) {
    const float mx = w[idx[0]];
    double sum = 0;
    for (int i = 0; i < m; i++) sum += exp((double)(w[idx[i]] - mx) / temp);
    const double r = u * sum;
    int32_t pick = idx[m - 1];
    double acc = 0;
    for (int i = 0; i < m; i++) {
        acc += exp((double)(w[idx[i]] - mx) / temp);
        if (r < acc) { pick = idx[i]; break; }
    }
    return pick;
}

int32_t ob_sample_pick(const float *w, int n, float temp, int top_k_n, float top_p, float min_p, double u,
                       int32_t *idx) {
    int m = ob_sample_rank(w, n, temp, top_k_n, min_p, idx);
    if (m == 0) return ob_argmax_f32(w, n); /* only NaN logits: nothing to draw from */
    m = ob_sample_min_p(w, idx, m, temp, min_p);
    m = ob_sample_top_p(w, idx, m, temp, top_p);
    return ob_sample_draw(w, idx, m, temp, u);
}
