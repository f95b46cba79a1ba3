/* ADD_ID on the CPU (graph.h): each (token, slot) row of a MATMUL_ID output gets the bias
 * row of the expert its gate slot names (gpt-oss's expert biases), and its plain-C
 * reference. One float add per element, so the kernel and the reference agree bit for bit;
 * a row's value never depends on the batch it came in. */
#include "backend/cpu/cpu.h"
#include <math.h>

/* The expert a gate slot names, or -1 (not an integer in [0, E)): as MATMUL_ID reads it. */
static int64_t slot_expert(float v, int64_t E) {
    return v >= 0.0f && v < (float)E && v == floorf(v) ? (int64_t)v : -1;
}

/* Rows [r0, r1) of the [N, k * T] output. */
static void add_id_rows(ob_tensor *dst, int64_t r0, int64_t r1) {
    const ob_tensor *y = dst->src[0], *bias = dst->src[1];
    const int64_t N = y->ne[0], k = y->ne[1], E = bias->ne[1];
    const float *g = dst->src[2]->data, *b = bias->data, *src = y->data;
    float *out = dst->data;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t t = r / k, j = r % k, e = slot_expert(g[t * 2 * k + k + j], E);
        const float *x = src + r * N;
        float *o = out + r * N;
        if (e < 0) {
            for (int64_t i = 0; i < N; i++) o[i] = x[i];
            continue;
        }
        const float *be = b + e * N;
        for (int64_t i = 0; i < N; i++) o[i] = x[i] + be[i];
    }
}

void ob_cpu_op_add_id(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    int64_t r0, r1;
    ob_cpu_split(ob_nrows(dst->src[0]), c->ith, c->nth, &r0, &r1);
    add_id_rows(dst, r0, r1);
}

void ob_cpu_ref_add_id(ob_tensor *dst) { add_id_rows(dst, 0, ob_nrows(dst->src[0])); }
