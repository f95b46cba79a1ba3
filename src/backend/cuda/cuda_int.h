/* CUDA backend internals shared by its .cu files: the backend context, the checked-call
 * macro, and the per-op launchers. Only .cu files include this. */
#ifndef OB_BACKEND_CUDA_INT_H
#define OB_BACKEND_CUDA_INT_H

#include "backend/cuda/cuda_compat.h"

extern "C" {
#include "backend/backend.h"
#include "format/quant.h"
#include "graph/op_table.h"
}
#include "backend/cuda/cuda_stats.h"
#include "backend/cuda/cuda_env.h"

#define OB_CU_MAX_EXEC 4
#define OB_CU_MMVQ_MAX_T 16 /* int8 decode matvec up to this many columns (16 parallel sequences) */

/* One captured decode step: replayed while the graph's structure (ops, shapes, types,
 * data pointers, parameters) hashes to the same key, since inputs live in fixed buffers. */
/* One launch of a step, as the host enqueued it (cuda_fault.cu names the one a fault
 * stopped in): the kernel as the launch names it, the graph node whose launch unit it
 * belongs to, and whether the kernel leaves a progress mark (ours do; cuBLAS's do not). */
typedef struct ob_cu_launch_rec {
    const char *kernel;
    int32_t node;
    bool marked;
} ob_cu_launch_rec;

typedef struct ob_cu_exec {
    uint64_t key;
    cudaGraphExec_t exec;
    uint64_t last_used;
    ob_cu_launch_rec *log;     /* the launches captured in it */
    int64_t log_n;
} ob_cu_exec;

typedef struct ob_cu_ctx {
    int device;
    bool allow_fallback;
    ob_cu_opts opt;            /* the switches (cuda_env.cu), read when the backend is made */
    bool faulted;              /* a device error happened: every later call fails */
    int sm_count;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *tmp;                 /* per-node scratch (f16 weight slabs, attention partials) */
    size_t tmp_size;
    void *qx;                  /* int8 activations of the decode matvec (op_mmvq.cu) */
    size_t qx_size;
    const void *qx_src;        /* the x that qx holds now (NULL: none); K and T it had */
    int64_t qx_k, qx_t;
    uint8_t *stage;            /* pinned staging of small uploads (NULL: none) */
    size_t stage_size, stage_used;
    ob_cu_exec execs[OB_CU_MAX_EXEC];
    uint64_t last_key, tick;
    /* What the host pass of cu_compute derived from the graph last time, kept for a graph
     * that comes back with the same nonzero version (unchanged: see ob_graph.version). */
    const ob_graph *pass_g;
    uint64_t pass_version, pass_key;
    size_t pass_need, pass_qneed, pass_cneed;
    bool pass_capturable;
    int64_t slab_elems;        /* ONEBIT_CUDA_BLAS_SLAB: f16 weight elements per GEMM slab */
    /* op_mmq.cu: the fewest columns MMQ takes (INT32_MAX: none, where the device has no
     * int8 MMA or ONEBIT_CUDA_MMQ=0), and the streaming decode kernel's grid target */
    int mmq_min_t, mmq_dec_blocks;
    /* Fused decode patterns, one bit each (OB_CU_FUSE_*): ONEBIT_CUDA_FUSE=0 turns all off
     * (for tests), =MASK keeps only those bits (to bisect a wrong result on a device). */
    unsigned fuse;
    /* Batch-invariant mode (ob_backend.deterministic, taken at the first compute): MATMUL
     * through one plan for every T (op_quant.cu, op_mmq.cu), attention through the split
     * kernels with a split count of the cache size alone (op_attention.cu), and of the
     * fusions only those in opt.det_fuse (ONEBIT_CUDA_DET_FUSE=MASK, default OB_CU_FUSE_KV_PAIR:
     * the others apply at some batch sizes only, and their reductions or roundings are not
     * the unfused kernels'). */
    bool det;
    bool fa_off;               /* ONEBIT_CUDA_FA=0 or below sm_80: no tensor-core prefill attention (op_flash_attn.cu) */
    /* ONEBIT_CUDA_PROFILE=1: steps run uncaptured with an event around every launch; the
     * GPU time per op (fused or not) is printed to stderr when the backend is freed. */
    bool prof;
    cudaEvent_t *prof_ev;
    int64_t prof_cap;
    /* indexed by op, or OB_OP_COUNT + weight type for MATMUL (time per weight type) */
    double prof_ms[OB_OP_COUNT + OB_TYPE_COUNT][2];
    int64_t prof_count[OB_OP_COUNT + OB_TYPE_COUNT][2], prof_steps;
    /* ONEBIT_CUDA_PDL=0 turns off programmatic dependent launch (on by default where the
     * device is sm_90+ and the kernels were built for it). */
    bool pdl;
    /* The weight types of the bulk-copy matvec (op_mmvq_tma.cu), OB_CU_TMA_* bits: all of
     * them where sm_90 code runs on an sm_90+ device, none elsewhere; ONEBIT_CUDA_TMV=MASK
     * keeps only those bits (0: off, for comparisons). */
    unsigned tma;
    /* Split decode attention's arrival counters, one per (token, head), zero between
     * launches (the last block resets its own). */
    unsigned *attn_cnt;
    size_t attn_cnt_n;
    /* ONEBIT_CUDA_TIMING=1: events around each compute's GPU work, host wall time between
     * compute starts; per-step means printed when the backend is freed. [0] uncaptured, [1] replays. */
    bool timing;
    cudaEvent_t tev[2];
    double t_last_start, t_last_gpu;
    int t_last_kind;           /* -1: no step before */
    double t_gpu[2], t_wall[2];
    int64_t t_steps[2];
    int64_t stats[OB_CU_STAT_COUNT]; /* cuda_stats.h: OB_CU_STAT_* */
    bool warned[OB_OP_COUNT];  /* fallback logged once per op */
    char last_err[512];        /* first failing call: file:line: call: message */
    /* Progress marks and the launch log (cuda_fault.cu; ONEBIT_CUDA_MARKS=0: off). */
    bool marks;
    ob_cu_marks_dev mdev;      /* what the kernels get: seq on the device, ring mapped */
    volatile unsigned long long *ring; /* the ring as the host reads it */
    unsigned long long mark_base;      /* the highest mark when the step began */
    ob_cu_launch_rec *log;     /* this step's launches, as enqueued */
    int64_t log_n, log_cap;
    int32_t cur_node;          /* the node whose launch unit is being enqueued */
    const char *fault_name;    /* ONEBIT_TEST_FAULT: the node whose launch is made to fault */
    bool in_step;              /* inside cu_compute: a device fault is named there, not logged */
    cudaError_t last_code;     /* the error of last_err */
} ob_cu_ctx;

/* Every .cu with kernels, one X each; each defines OB_CU_MARK_BIND(name) once. */
#define OB_CU_MARK_TUS(X) \
    X(backend) X(attention) X(concat) X(elementwise) X(encoder) X(flash_attn) X(mmq) X(mmvq) X(mmvq_tma) X(moe) X(qkv) X(quant) \
    X(sample) X(fault) X(ssm_conv) X(delta_net)
#define OB_CU_MARK_DECL(tu) cudaError_t ob_cu_marks_bind_##tu(const ob_cu_marks_dev *m);
OB_CU_MARK_TUS(OB_CU_MARK_DECL)
#undef OB_CU_MARK_DECL

/* cuda_fault.cu: progress marks and the launch log, the fault's one line, and the
 * test-only injected fault (ONEBIT_TEST_FAULT=<node name>). */
bool ob_cu_marks_init(ob_cu_ctx *cx);
void ob_cu_marks_free(ob_cu_ctx *cx);
void ob_cu_marks_step(ob_cu_ctx *cx);  /* a step begins: the log restarts, the base is read */
bool ob_cu_note_grow(ob_cu_ctx *cx);
static inline void ob_cu_note(ob_cu_ctx *cx, const char *kernel, bool marked) {
    if (!cx->marks || (cx->log_n == cx->log_cap && !ob_cu_note_grow(cx))) return;
    cx->log[cx->log_n++] = (ob_cu_launch_rec){kernel, cx->cur_node, marked};
}
/* A copy of this step's log for a captured graph (false: out of memory; the graph then
 * faults without a name). */
bool ob_cu_log_keep(ob_cu_ctx *cx, ob_cu_exec *ex);
/* The step failed with e after the launches in log (the step's own, or a replayed graph's):
 * writes cx->last_err as one line naming the op, node and kernel the marks point at. */
void ob_cu_fault_name(ob_cu_ctx *cx, const ob_graph *g, const ob_cu_launch_rec *log, int64_t n, cudaError_t e);
/* ONEBIT_TEST_FAULT: before node i's launch unit, points its first source at unmapped
 * memory and returns what to restore (NULL: not this node). */
void *ob_cu_fault_inject(ob_cu_ctx *cx, ob_tensor *n);

/* An error that a kernel left behind and that kills the context (every later call
 * returns it), as against a launch or allocation refused on the host. */
static inline bool ob_cu_sticky(cudaError_t e) {
#ifdef OB_HIP
    return e == hipErrorIllegalAddress || e == hipErrorLaunchFailure;
#else
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
        return true;
    default:
        return false;
    }
#endif
}

/* Records the first failure (file:line) and marks the context faulted. */
bool ob_cu_check(ob_cu_ctx *cx, cudaError_t e, const char *file, int line, const char *what);
#define OB_CU(cx, call) ob_cu_check((cx), (call), __FILE__, __LINE__, #call)
/* A kernel launch, with the PDL attribute when cx->pdl (the kernel must begin with
 * OB_PDL_ENTRY()): OB_CU_LAUNCH(cx, kernel, grid, block, shm, args...). */
#define OB_CU_LAUNCH(cx, k, ...) \
    (ob_cu_note((cx), #k, true), \
     ob_cu_check((cx), ob_cu_launch_k((cx)->pdl, (cx)->stream, k, __VA_ARGS__), __FILE__, __LINE__, "kernel launch"))
/* The same without the PDL attribute, for kernels that do not begin with OB_PDL_ENTRY()
 * (they begin with OB_CU_MARK()). */
#define OB_CU_LAUNCH_PLAIN(cx, k, ...) \
    (ob_cu_note((cx), #k, true), \
     ob_cu_check((cx), ob_cu_launch_k(false, (cx)->stream, k, __VA_ARGS__), __FILE__, __LINE__, "kernel launch"))
/* After a kernel launch. */
#define OB_CU_LAUNCHED(cx) ob_cu_check((cx), cudaGetLastError(), __FILE__, __LINE__, "kernel launch")

/* Per-op support checks (pure; called after ob_op_valid, so they hold only the kernels'
 * limits) and launchers (enqueue on cx->stream; false on a launch error, which
 * ob_cu_check has recorded). tmp_size: bytes of cx->tmp a node needs. */
bool ob_cu_type_has_deq(ob_type t);
bool ob_cu_supports_quant_op(const ob_tensor *n);   /* GET_ROWS, MATMUL, CPY */
size_t ob_cu_matmul_tmp_size(const ob_cu_ctx *cx, const ob_tensor *n);
bool ob_cu_matmul_uses_blas(const ob_cu_ctx *cx, const ob_tensor *n);
/* Batch-invariant mode: bytes of cx->qx a MATMUL run a column at a time needs (0: none). */
size_t ob_cu_matmul_det_qx_size(const ob_cu_ctx *cx, const ob_tensor *n);
bool ob_cu_op_get_rows(ob_cu_ctx *cx, ob_tensor *n);
bool ob_cu_op_matmul(ob_cu_ctx *cx, ob_tensor *n);
bool ob_cu_op_cpy(ob_cu_ctx *cx, ob_tensor *n);
bool ob_cu_tables_init(ob_cu_ctx *cx);
/* int8-activation matvec for hot types (Q4_K, Q6_K, Q8_0, Q1_0, TQ2_0) at T <= 8. */
bool ob_cu_mmvq_applies(const ob_cu_ctx *cx, const ob_tensor *n);
size_t ob_cu_mmvq_qx_size(const ob_tensor *n);
bool ob_cu_op_mmvq(ob_cu_ctx *cx, ob_tensor *n);
/* x F32 [n] -> int8 blocks of 32 in qx and (scale, scale x sum) per block in dx, as the
 * int8 matvec and MMQ read them (op_mmvq.cu k_quant_act); n % 32 == 0. */
bool ob_cu_quant_act(ob_cu_ctx *cx, const float *x, int8_t *qx, float2 *dx, int64_t n);
/* count (<= ob_cu_mmvq_group_max()) mmvq matmuls with one x, weight type and K, as one
 * launch; outputs must not overlap. */
int ob_cu_mmvq_group_max(void);
bool ob_cu_op_mmvq_group(ob_cu_ctx *cx, ob_tensor *const *ns, int count);
/* The bulk-copy matvec (op_mmvq_tma.cu): whether it takes these count matmuls of one x (one
 * column, a type of cx->tma at the K it covers, 16-byte aligned rows), and its launch on x
 * already quantized to qx/dx. */
bool ob_cu_mmvq_tma_applies(const ob_cu_ctx *cx, ob_tensor *const *ns, int count);
bool ob_cu_mmvq_tma(ob_cu_ctx *cx, ob_tensor *const *ns, int count, const int8_t *qx, const float2 *dx);

bool ob_cu_op_norm(ob_cu_ctx *cx, ob_tensor *n);
/* Fused decode forms (cuda_backend.cu decides when they apply): RMS_NORM of `norm`, with
 * the residual ADD `add` (its src[0] + src[1], same shape) computed on the way when add is
 * given; quant: also write the int8 activations of norm's output to cx->qx. GLU that also
 * quantizes its output ([K, T]) to cx->qx. The caller updates cx->qx_src. */
bool ob_cu_op_rms_fused(ob_cu_ctx *cx, const ob_tensor *add, ob_tensor *norm, bool quant);
bool ob_cu_op_glu_quant(ob_cu_ctx *cx, ob_tensor *glu, int64_t K);
/* RMS_NORM `norm` (rows of the head size) and the ROPE of its output `rope` in one launch. */
bool ob_cu_op_rms_rope(ob_cu_ctx *cx, ob_tensor *norm, ob_tensor *rope);
/* [qn = RMS_NORM ->] qr = ROPE, [kn = RMS_NORM ->] kr = ROPE, ks = KV_STORE of kr, vs =
 * KV_STORE of v at the same positions, in one launch (op_qkv.cu; the caller checks shapes,
 * readers and overlaps). qn, kn: NULL where the layer has no q/k norm; their outputs are
 * not written, nor kr's unless keep_kr, nor the stores' zero tokens unless keep_tok. */
bool ob_cu_op_qkv(ob_cu_ctx *cx, ob_tensor *qn, ob_tensor *qr, ob_tensor *kn, ob_tensor *kr, ob_tensor *ks, ob_tensor *vs,
                  bool keep_kr, bool keep_tok);
bool ob_cu_op_binary(ob_cu_ctx *cx, ob_tensor *n);  /* ADD, MUL */
bool ob_cu_op_unary(ob_cu_ctx *cx, ob_tensor *n);   /* SCALE, ACT */
bool ob_cu_op_glu(ob_cu_ctx *cx, ob_tensor *n);
bool ob_cu_op_rope(ob_cu_ctx *cx, ob_tensor *n);
bool ob_cu_op_softmax(ob_cu_ctx *cx, ob_tensor *n);

size_t ob_cu_attention_tmp_size(const ob_cu_ctx *cx, const ob_tensor *n);
bool ob_cu_op_kv_store(ob_cu_ctx *cx, ob_tensor *n);
/* Two KV_STOREs with the same positions (K and V of a layer) in one launch; m NULL: n alone. */
bool ob_cu_op_kv_store_pair(ob_cu_ctx *cx, ob_tensor *n, ob_tensor *m);
bool ob_cu_op_attention(ob_cu_ctx *cx, ob_tensor *n);
/* Whether decode attention of n ends in the split merge, which can then also quantize its
 * output to cx->qx for the int8 matvec that reads it (quant; the caller updates qx_src). */
bool ob_cu_attention_merges(const ob_cu_ctx *cx, const ob_tensor *n);
bool ob_cu_op_attention_q(ob_cu_ctx *cx, ob_tensor *n, bool quant);
/* The q/k/v tail [RMS_NORM ->] ROPE (q), [RMS_NORM ->] ROPE (k), KV_STORE (k), KV_STORE (v)
 * folded into n's launch (OB_CU_FUSE_ATTN_QKV; the caller checked the tail with try_qkv and
 * that n reads it alone): fold_ok says whether n's shapes and cache types allow it. */
bool ob_cu_attention_fold_ok(const ob_cu_ctx *cx, const ob_tensor *n);
bool ob_cu_op_attention_fold(ob_cu_ctx *cx, ob_tensor *n, bool quant, const ob_tensor *qn, const ob_tensor *qr,
                             const ob_tensor *kn, const ob_tensor *kr, const ob_tensor *vs);
/* Arrival counters (cx->attn_cnt) decode attention of n needs to merge in its last split
 * block (OB_CU_FUSE_ATTN_ONE); 0: none. */
size_t ob_cu_attention_cnt_size(const ob_cu_ctx *cx, const ob_tensor *n);

#if defined(__CUDACC__) || defined(__HIPCC__)
/* f32 -> f16 bits, round to nearest even, integer-only: bit-identical to ob_f32_to_f16,
 * so a Q8_0 block written on the device equals the host reference byte for byte. */
static __device__ __forceinline__ uint16_t ob_cu_f16_bits(float f) {
    const uint32_t x = __float_as_uint(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000u) {
        if (ax < 0x33000000u) return (uint16_t)sign;
        const uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000, shift = 126 - e;
        uint32_t q = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t q = (ax >> 13) - (112u << 10);
    const uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

/* One Q8_0 block from 32 floats, as ob_quant_row_q8_0 (same float operations). */
static __device__ __forceinline__ void ob_cu_quant_q8_0(const float *v, uint8_t *o) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(v[j]));
    const float d = __fdiv_rn(amax, 127.0f), id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    const uint16_t dh = ob_cu_f16_bits(d);
    o[0] = (uint8_t)(dh & 0xff);
    o[1] = (uint8_t)(dh >> 8);
    for (int j = 0; j < 32; j++) {
        const float q = __fmul_rn(v[j], id);
        o[2 + j] = (uint8_t)(int8_t)(q == q ? roundf(fminf(fmaxf(q, -127.0f), 127.0f)) : 0.0f);
    }
}
/* The int8 activations of one 32-element block from 8 consecutive threads holding 4 values
 * each, exactly as k_quant_act in op_mmvq.cu computes them (g: the group's index from the start of
 * qx; 32-blocks start at g % 8 == 0). All 32 lanes of the warp must call it. */
static __device__ __forceinline__ void ob_cu_quant_group(float4 v, bool live, int64_t g, int8_t *qx, float2 *dx) {
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 4; o > 0; o /= 2) amax = fmaxf(amax, OB_SHFL_XOR(amax, o));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const int q0 = __float2int_rn(v.x * id), q1 = __float2int_rn(v.y * id);
    const int q2 = __float2int_rn(v.z * id), q3 = __float2int_rn(v.w * id);
    int s = q0 + q1 + q2 + q3;
#pragma unroll
    for (int o = 4; o > 0; o /= 2) s += OB_SHFL_XOR(s, o);
    if (!live) return;
    ((char4 *)qx)[g] = make_char4((signed char)q0, (signed char)q1, (signed char)q2, (signed char)q3);
    if ((g & 7) == 0) dx[g / 8] = make_float2(d, d * (float)s);
}
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
/* ALiBi slope of query head h of n_head for ATTENTION's f[2] = max_bias: graph.h's
 * ob_alibi_slope with the same float operations, on the device. */
static __device__ __forceinline__ float ob_cu_alibi_slope(int h, int n_head, float max_bias) {
    int n2 = 1;
    while (n2 * 2 <= n_head) n2 *= 2;
    const float m0 = exp2f(-max_bias / (float)n2), m1 = exp2f(-max_bias / (float)(2 * n2));
    return h < n2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - n2) + 1));
}
#endif

/* Mixture of experts (op_moe.cu): MOE_GATE, MATMUL_ID, MOE_SUM, and ADD_ID (gpt-oss's expert
 * biases on a MATMUL_ID output). supports: the kernels'
 * limits (after ob_op_valid); tmp_size: bytes of cx->tmp a node needs (MATMUL_ID's int8 x);
 * tables_init: op_moe.cu's copy of the dequantizers' lattice tables (dequant.cuh). */
bool ob_cu_supports_moe(const ob_tensor *n);
size_t ob_cu_moe_tmp_size(const ob_tensor *n);
bool ob_cu_moe_tables_init(ob_cu_ctx *cx);
bool ob_cu_op_moe_gate(ob_cu_ctx *cx, ob_tensor *n);
bool ob_cu_op_matmul_id(ob_cu_ctx *cx, ob_tensor *n);
bool ob_cu_op_moe_sum(ob_cu_ctx *cx, ob_tensor *n);
bool ob_cu_op_add_id(ob_cu_ctx *cx, ob_tensor *n);

/* CONCAT and SLICE (op_concat.cu): one thread per output element (any shape the op table takes). */
bool ob_cu_op_concat(ob_cu_ctx *cx, ob_tensor *n);

/* The recurrent layers' ops (graph.h, issue #33): SSM_CONV (op_ssm_conv.cu: any shape the op
 * table takes) and DELTA_NET (op_delta_net.cu: dk up to 256). */
bool ob_cu_op_ssm_conv(ob_cu_ctx *cx, ob_tensor *n);
bool ob_cu_supports_delta_net(const ob_tensor *n);
bool ob_cu_op_delta_net(ob_cu_ctx *cx, ob_tensor *n);

/* POOL and ACT = TANH (op_encoder.cu). */
bool ob_cu_supports_pool(const ob_tensor *n);
bool ob_cu_op_pool(ob_cu_ctx *cx, ob_tensor *n);
bool ob_cu_op_tanh(ob_cu_ctx *cx, ob_tensor *n);

/* Byte offset of dx (float2 [T][K/32]) after qx (int8 [T][K]) in cx->qx. */
static inline size_t ob_cu_qx_dx_offset(int64_t K, int64_t T) { return ((size_t)(K * T) + 255) & ~(size_t)255; }

static inline unsigned ob_cu_blocks(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }

#endif
