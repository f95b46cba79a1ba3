/* CONCAT and SLICE (graph.h): rows joined from two operands, or cut from one. MLA splits
 * its projections into the part that turns with the position and the part that does not,
 * and joins them again for the cache; these copy rows, split by rows over the threads. */
#include "backend/cpu/cpu.h"

void ob_cpu_op_concat(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const ob_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t na = a->ne[0], nb = b->ne[0];
    int64_t r0, r1;
    ob_cpu_split(ob_nrows(dst), c->ith, c->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        float *y = (float *)dst->data + r * (na + nb);
        memcpy(y, (const float *)a->data + r * na, sizeof(float) * (size_t)na);
        memcpy(y + na, (const float *)b->data + r * nb, sizeof(float) * (size_t)nb);
    }
}

void ob_cpu_op_slice(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const ob_tensor *a = dst->src[0];
    const int64_t n = a->ne[0], len = dst->ne[0], off = dst->ip[0];
    int64_t r0, r1;
    ob_cpu_split(ob_nrows(dst), c->ith, c->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++)
        memcpy((float *)dst->data + r * len, (const float *)a->data + r * n + off, sizeof(float) * (size_t)len);
}
