/* CUDA backend internals shared by its .cu files: the backend context, the checked-call
 * macro, and the per-op launchers. Only .cu files include this. */
#ifndef OB_BACKEND_CUDA_INT_H
#define OB_BACKEND_CUDA_INT_H

#include "backend/cuda/cuda_compat.h"

extern "C" {
#include "backend/backend.h"
#include "format/quant.h"
}

#define OB_CU_MAX_EXEC 4

/* One captured decode step: replayed while the graph's structure (ops, shapes, types,
 * data pointers, parameters) hashes to the same key, since inputs live in fixed buffers. */
typedef struct ob_cu_exec {
    uint64_t key;
    cudaGraphExec_t exec;
    uint64_t last_used;
} ob_cu_exec;

typedef struct ob_cu_ctx {
    int device;
    bool allow_fallback;
    bool faulted;              /* a device error happened: every later call fails */
    int sm_count;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *tmp;                 /* per-node scratch (f16 weight slabs, attention partials) */
    size_t tmp_size;
    ob_cu_exec execs[OB_CU_MAX_EXEC];
    uint64_t last_key, tick;
    bool use_graphs;
    bool warned[OB_OP_COUNT];  /* fallback logged once per op */
    char last_err[256];        /* first failing call: file:line: call: message */
} ob_cu_ctx;

/* Records the first failure (file:line) and marks the context faulted. */
bool ob_cu_check(ob_cu_ctx *cx, cudaError_t e, const char *file, int line, const char *what);
#define OB_CU(cx, call) ob_cu_check((cx), (call), __FILE__, __LINE__, #call)
/* After a kernel launch. */
#define OB_CU_LAUNCHED(cx) ob_cu_check((cx), cudaGetLastError(), __FILE__, __LINE__, "kernel launch")

/* Per-op support checks (pure) and launchers (enqueue on cx->stream; false on a launch
 * error, which ob_cu_check has recorded). tmp_size: bytes of cx->tmp a node needs. */
bool ob_cu_type_has_deq(ob_type t);
bool ob_cu_supports_quant_op(const ob_tensor *n);   /* GET_ROWS, MATMUL, CPY */
size_t ob_cu_matmul_tmp_size(const ob_tensor *n);
bool ob_cu_matmul_uses_blas(const ob_tensor *n);
bool ob_cu_op_get_rows(ob_cu_ctx *cx, ob_tensor *n);
bool ob_cu_op_matmul(ob_cu_ctx *cx, ob_tensor *n);
bool ob_cu_op_cpy(ob_cu_ctx *cx, ob_tensor *n);
bool ob_cu_tables_init(ob_cu_ctx *cx);

bool ob_cu_op_norm(ob_cu_ctx *cx, ob_tensor *n);
bool ob_cu_op_binary(ob_cu_ctx *cx, ob_tensor *n);  /* ADD, MUL */
bool ob_cu_op_unary(ob_cu_ctx *cx, ob_tensor *n);   /* SCALE, ACT */
bool ob_cu_op_glu(ob_cu_ctx *cx, ob_tensor *n);
bool ob_cu_op_rope(ob_cu_ctx *cx, ob_tensor *n);
bool ob_cu_op_softmax(ob_cu_ctx *cx, ob_tensor *n);

size_t ob_cu_attention_tmp_size(const ob_tensor *n);
bool ob_cu_op_kv_store(ob_cu_ctx *cx, ob_tensor *n);
bool ob_cu_op_attention(ob_cu_ctx *cx, ob_tensor *n);

static inline unsigned ob_cu_blocks(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }

#endif
