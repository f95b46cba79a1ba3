/* CPU backend internals: thread pool, per-op kernels, dot-product kernels.
 * One file per op: op_<name>.c. Each op has a plain-C reference; fast paths (AVX2/FMA,
 * AVX-512, chosen at run time) are tested against it by tests/unit/test_cpu_ops.c. */
#ifndef OB_BACKEND_CPU_CPU_H
#define OB_BACKEND_CPU_CPU_H

#include "backend/backend.h"
#include "format/quant.h"

typedef struct ob_cpu_pool ob_cpu_pool;

/* What a kernel sees: its thread index among nth, a shared work buffer, and a barrier. */
typedef struct ob_cpu_op_ctx {
    int ith, nth;
    void *wdata;             /* shared by all threads of this node */
    size_t wsize;
    ob_cpu_pool *pool;
    /* Per node and compute, zeroed before the threads start (NULL: none): a matmul hands
     * out the last rows of its output through it (see op_matmul.c). */
    int64_t *next;
} ob_cpu_op_ctx;

/* Waits until all nth threads of the node reach it. */
void ob_cpu_sync(const ob_cpu_op_ctx *c);

/* Thread pool (pool.c): n_threads - 1 persistent workers plus the calling thread.
 * ob_cpu_pool_run calls fn(arg, ith, nth) on every thread and returns when all are done. */
ob_cpu_pool *ob_cpu_pool_new(int n_threads);
void ob_cpu_pool_free(ob_cpu_pool *p);
int ob_cpu_pool_size(const ob_cpu_pool *p);
void ob_cpu_pool_run(ob_cpu_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg);

typedef void (*ob_cpu_kernel_fn)(ob_tensor *dst, const ob_cpu_op_ctx *c);

/* This thread's share [*r0, *r1) of n items split as evenly as possible over nth. */
static inline void ob_cpu_split(int64_t n, int ith, int nth, int64_t *r0, int64_t *r1) {
    *r0 = n * ith / nth;
    *r1 = n * (ith + 1) / nth;
}

/* Work buffer bytes a node needs (shared across its threads). */
size_t ob_cpu_work_size(const ob_tensor *node, int nth);

/* Attention work buffer: per-thread K/V/accumulator scratch plus split-KV partials. */
size_t ob_cpu_attention_work_size(const ob_tensor *node, int nth);

/* Matmul work buffer (activations quantized to the weight type's dot partner). */
size_t ob_cpu_matmul_work_size(const ob_tensor *node, int nth);
/* Whether a dot kernel exists for weights of type t (Q8_1 and Q8_K have none: they are
 * activation formats). */
bool ob_cpu_matmul_has_kernel(ob_type t);

/* Per-op kernels (fast path where there is one, reference otherwise). */
void ob_cpu_op_get_rows(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_rms_norm(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_layer_norm(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_matmul(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_add(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_mul(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_scale(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_rope(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_kv_store(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_attention(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_glu(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_act(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_softmax(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_cpy(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_pool(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_sample(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_moe_gate(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_matmul_id(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_moe_sum(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_concat(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_slice(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_add_id(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_ssm_conv(ob_tensor *dst, const ob_cpu_op_ctx *c);
void ob_cpu_op_delta_net(ob_tensor *dst, const ob_cpu_op_ctx *c);
/* DELTA_NET's work buffer: each thread's normalised q and k and its dv-wide rows (op_delta_net.c). */
size_t ob_cpu_delta_net_work_size(const ob_tensor *node, int nth);
/* Work buffer of MOE_GATE (scores per thread) and MATMUL_ID (pairs grouped by expert and
 * their act rows); 0 for the other ops (op_moe.c). */
size_t ob_cpu_moe_work_size(const ob_tensor *node, int nth);
/* SAMPLE of one row: n logits, OB_SAMPLE_NPARAM params -> token (op_sample.c). */
int32_t ob_cpu_sample_row(const float *w, int n, const float *params);

/* Plain single-threaded references for every op (the test oracle). */
void ob_cpu_ref_op(ob_tensor *dst);

/* Matmul reference: dequantize each weight row to f32, dot in double. */
void ob_cpu_ref_matmul(ob_tensor *dst);
/* POOL reference (op_pool.c). */
void ob_cpu_ref_pool(ob_tensor *dst);
/* MOE_GATE, MATMUL_ID and MOE_SUM references (op_moe.c). */
void ob_cpu_ref_moe(ob_tensor *dst);
/* ADD_ID reference (op_add_id.c). */
void ob_cpu_ref_add_id(ob_tensor *dst);
/* SSM_CONV and DELTA_NET references (op_ssm_conv.c, op_delta_net.c). */
void ob_cpu_ref_ssm_conv(ob_tensor *dst);
void ob_cpu_ref_delta_net(ob_tensor *dst);
/* DELTA_NET in the chunked form a GPU runs for prefill (op_delta_net.c): chunks of `chunk`
 * positions aligned to absolute positions, the state rounded to float at each chunk's end;
 * equal to ob_cpu_ref_delta_net but for rounding (the op test holds it to that). */
void ob_cpu_ref_delta_net_chunked(ob_tensor *dst, int chunk);
/* SAMPLE reference (op_sample.c: the kernel is already plain C). */
void ob_cpu_ref_sample(ob_tensor *dst);

/* Forces the scalar fallback (tests compare each level): 0 scalar, 1 AVX2, 2 AVX-512,
 * -1 best available. Returns the level now in use. */
int ob_cpu_set_simd_level(int level);
int ob_cpu_simd_level(void);

#endif
