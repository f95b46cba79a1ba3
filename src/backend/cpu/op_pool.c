/* POOL: one vector per sequence from the hidden states of its tokens in the batch (mean,
 * first = CLS, last), optionally L2-normalised. Work is split by sequence; each thread
 * scans the batch's seq/pos once per sequence it owns (T * n_seq integer work, small next
 * to the encoder that produced x). */
#include "backend/cpu/cpu.h"
#include <math.h>

void ob_cpu_op_pool(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const ob_tensor *x = dst->src[0];
    const int32_t *seq = dst->src[1]->data, *pos = dst->src[2]->data;
    int64_t n = x->ne[0], T = ob_nrows(x), S = dst->ne[1], s0, s1;
    int type = dst->ip[0];
    ob_cpu_split(S, c->ith, c->nth, &s0, &s1);
    for (int64_t s = s0; s < s1; s++) {
        float *y = (float *)dst->data + s * n;
        memset(y, 0, sizeof(float) * (size_t)n);
        int64_t count = 0, pick = -1;
        for (int64_t t = 0; t < T; t++) {
            if (seq[t] != s) continue;
            if (type == OB_POOL_MEAN) {
                const float *xt = (const float *)x->data + t * n;
                for (int64_t i = 0; i < n; i++) y[i] += xt[i];
                count++;
            } else if (pick < 0 || (type == OB_POOL_CLS ? pos[t] < pos[pick] : pos[t] > pos[pick])) {
                pick = t;
            }
        }
        if (type == OB_POOL_MEAN && count > 0) {
            float inv = 1.0f / (float)count;
            for (int64_t i = 0; i < n; i++) y[i] *= inv;
        } else if (pick >= 0) {
            memcpy(y, (const float *)x->data + pick * n, sizeof(float) * (size_t)n);
        }
        if (dst->ip[1]) {
            double ss = 0;
            for (int64_t i = 0; i < n; i++) ss += (double)y[i] * y[i];
            /* sentence-transformers' Normalize: x / max(|x|, 1e-12) */
            float inv = (float)(1.0 / fmax(sqrt(ss), 1e-12));
            for (int64_t i = 0; i < n; i++) y[i] *= inv;
        }
    }
}

/* The reference: the same definition computed in double, sequence by sequence. */
void ob_cpu_ref_pool(ob_tensor *dst) {
    const ob_tensor *x = dst->src[0];
    const int32_t *seq = dst->src[1]->data, *pos = dst->src[2]->data;
    int64_t n = x->ne[0], T = ob_nrows(x), S = dst->ne[1];
    int type = dst->ip[0];
    for (int64_t s = 0; s < S; s++) {
        float *y = (float *)dst->data + s * n;
        int64_t count = 0, first = -1, last = -1;
        for (int64_t t = 0; t < T; t++) {
            if (seq[t] != s) continue;
            count++;
            if (first < 0 || pos[t] < pos[first]) first = t;
            if (last < 0 || pos[t] > pos[last]) last = t;
        }
        double norm2 = 0;
        for (int64_t i = 0; i < n; i++) {
            double v = 0;
            if (count && type == OB_POOL_MEAN) {
                for (int64_t t = 0; t < T; t++)
                    if (seq[t] == s) v += ((const float *)x->data)[t * n + i];
                v /= (double)count;
            } else if (count) {
                v = ((const float *)x->data)[(type == OB_POOL_CLS ? first : last) * n + i];
            }
            y[i] = (float)v;
            norm2 += v * v;
        }
        if (dst->ip[1]) {
            double inv = 1.0 / fmax(sqrt(norm2), 1e-12);
            for (int64_t i = 0; i < n; i++) y[i] = (float)(y[i] * inv);
        }
    }
}
