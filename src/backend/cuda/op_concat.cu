/* CONCAT and SLICE (graph.h) on CUDA: rows joined from two operands, or cut from one, as
 * MLA splits its projections into the part that turns with the position and the part that
 * does not and joins them again for its cache (arch/deepseek2.c). One thread per output
 * element, copied as a 32-bit word, so NaN payloads, infinities and -0 arrive as they are
 * (the CPU's memcpy, src/backend/cpu/op_concat.c). Every index is the thread's own
 * element's, so nothing reads past either source or writes past the output. */
#include "backend/cuda/cuda_int.h"

#define OB_CONCAT_BLOCK 256

/* y [n, rows]: CONCAT (cat): row r = a's row r [na], then b's row r [n - na]; SLICE: row r =
 * elements [off, off + n) of a's row r [na]. */
__global__ void __launch_bounds__(OB_CONCAT_BLOCK)
    k_concat(const uint32_t *__restrict__ a, const uint32_t *__restrict__ b, uint32_t *__restrict__ y, int64_t n,
             int64_t na, int64_t off, int64_t total, int cat) {
    OB_PDL_ENTRY();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int64_t r = i / n, e = i % n;
    y[i] = cat ? (e < na ? a[r * na + e] : b[r * (n - na) + e - na]) : a[r * na + off + e];
}

bool ob_cu_op_concat(ob_cu_ctx *cx, ob_tensor *n) {
    const ob_tensor *a = n->src[0], *b = n->src[1];
    const int64_t total = ob_nelements(n);
    if (total == 0) return true;
    const bool cat = n->op == OB_OP_CONCAT;
    return OB_CU_LAUNCH(cx, k_concat, ob_cu_blocks(total, OB_CONCAT_BLOCK), OB_CONCAT_BLOCK, 0, (const uint32_t *)a->data,
                        cat ? (const uint32_t *)b->data : (const uint32_t *)NULL, (uint32_t *)n->data, n->ne[0], a->ne[0],
                        cat ? (int64_t)0 : (int64_t)n->ip[0], total, (int)cat);
}

OB_CU_MARK_BIND(concat)
