/* ROPE over rows of [head_dim] (one head of one token). Angles are formed in double:
 * pos * inv_freq reaches 1e5 radians at long contexts, where float would lose ~1e-2. The
 * cos/sin of a token are computed once per thread per token and reused for all its heads. */
#include "backend/cpu/cpu.h"
#include <math.h>

#define OB_ROPE_MAX_PAIRS 512 /* n_rot <= 1024, checked by supports */

void ob_cpu_op_rope(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const ob_tensor *src = dst->src[0];
    const int32_t *pos = dst->src[1]->data;
    int64_t hd = src->ne[0], n_head = src->ne[1], r0, r1;
    int half = dst->ip[0] / 2;
    bool neox = dst->ip[1] == 2;
    double base = dst->fp[0], fs = dst->fp[1];
    const float *ff = dst->src[2] ? dst->src[2]->data : NULL; /* frequency factors: divide */
    const double ms = dst->fp[2];                               /* mscale: multiplies sin, cos */
    ob_cpu_split(ob_nrows(src), c->ith, c->nth, &r0, &r1);
    if (r0 >= r1) return;

    double inv_freq[OB_ROPE_MAX_PAIRS];
    float cs[OB_ROPE_MAX_PAIRS], sn[OB_ROPE_MAX_PAIRS];
    for (int i = 0; i < half; i++) inv_freq[i] = fs * pow(base, -2.0 * i / (2.0 * half)) / (ff ? (double)ff[i] : 1.0);
    int64_t cur_t = -1;
    for (int64_t r = r0; r < r1; r++) {
        int64_t t = r / n_head;
        if (t != cur_t) {
            cur_t = t;
            for (int i = 0; i < half; i++) {
                double th = (double)pos[t] * inv_freq[i];
                cs[i] = (float)(cos(th) * ms);
                sn[i] = (float)(sin(th) * ms);
            }
        }
        const float *x = (const float *)src->data + r * hd;
        float *y = (float *)dst->data + r * hd;
        /* mode 0 rotates (x[2i], x[2i+1]); NeoX rotates (x[i], x[i + n_rot/2]). */
        int64_t stride = neox ? half : 1, step = neox ? 1 : 2;
        for (int i = 0; i < half; i++) {
            int64_t j = (int64_t)i * step;
            float x0 = x[j], x1 = x[j + stride];
            y[j] = x0 * cs[i] - x1 * sn[i];
            y[j + stride] = x0 * sn[i] + x1 * cs[i];
        }
        for (int64_t j = 2 * (int64_t)half; j < hd; j++) y[j] = x[j];
    }
}
