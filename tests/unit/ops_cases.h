/* The one op test (test_ops.c): a registry of cases, each able to build a graph, that
 * test_ops runs on every backend compiled in and present, against the plain-C reference
 * (ob_cpu_ref_op, node by node), with outputs poisoned before each run. Organised as
 * ggml's tests/test-backend-ops.cpp: a case knows how to build its graph and how close
 * each output must come; the harness knows the backends.
 *
 * A case file (ops_<family>.c) holds one table of parameter rows per op family and a
 * build function that turns a row into a graph; its ops_add_<family>() registers every row.
 * Adding an op adds one such table (and one line in test_ops.c's list of families); a
 * whole run fails while an op of the op table (graph/op_table.h) has no case. */
#ifndef OB_OPS_CASES_H
#define OB_OPS_CASES_H
#include "backend/backend.h"
#include "format/quant.h"
#include "graph/graph.h"
#include "testutil.h"
#include <stdbool.h>

/* Backend families, as bits (a case's `only` and `may_refuse` masks). */
enum { OPS_CPU = 0, OPS_CUDA = 1, OPS_VK = 2, OPS_NFAM = 3 };
#define OPS_BIT(f) (1u << (f))
#define OPS_ALL (OPS_BIT(OPS_CPU) | OPS_BIT(OPS_CUDA) | OPS_BIT(OPS_VK))
#define OPS_GPU (OPS_BIT(OPS_CUDA) | OPS_BIT(OPS_VK))

/* How close an output must come to the reference: every element within
 * atol + rtol |ref| + mrel max|ref| (mrel: test_cuda_ops' "relative to the largest"),
 * NaN only where the reference has NaN, an infinity only where the reference has the same
 * one. exact: the same value (NaN matching any NaN); sign: +0 and -0 differ too. Outputs
 * of other types (F16, Q8_0 caches) are compared as their dequantized values. */
typedef struct ops_tol {
    double atol, rtol, mrel;
    bool exact, sign;
    bool skip; /* not compared on this family (a value its contract leaves open) */
} ops_tol;
#define OPS_TOL(a, r) ((ops_tol){(a), (r), 0, false, false, false})
#define OPS_MREL(m) ((ops_tol){0, 0, (m), false, false, false})
#define OPS_EXACT ((ops_tol){0, 0, 0, true, false, false})
#define OPS_BITS ((ops_tol){0, 0, 0, true, true, false})
#define OPS_SKIP ((ops_tol){0, 0, 0, false, false, true})

#define OPS_MAX_CHECKS 4

/* What a build function fills in. The graph's host data is owned by the build (ops_own). */
typedef struct ops_build {
    ob_graph *g;
    ob_rng rng; /* the case's own stream, seeded from its name: the same draws whatever ran before */
    void **owned;
    int n_owned, cap_owned;
    /* the tensors compared: graph outputs (read by no node) or leaves the graph writes */
    ob_tensor *chk[OPS_MAX_CHECKS];
    ops_tol tol[OPS_MAX_CHECKS][OPS_NFAM];
    int n_chk;
    /* Optional: checks of the reference outputs themselves against values known without it
     * (chk[i]->data holds the reference's output when it is called). */
    void (*ref_check)(struct ops_build *b, const void *p);
    /* Optional: the expected bytes of each check, for a graph the reference cannot run (a
     * bad id it would read past a table with); then no reference runs. Owned memory. */
    void *expect[OPS_MAX_CHECKS];
    const char *name; /* the case's, for messages */
    void *user;       /* what the build leaves for its ref_check (owned memory) */
} ops_build;

typedef struct ops_case {
    char name[160];
    void (*build)(ops_build *b, const void *p);
    const void *p; /* the family's table row (static storage) */
    /* 0: every family; else only these (paths of one backend: knobs, or shapes only a
     * backend's kernels split differently and that would cost the CPU reference dearly) */
    unsigned only;
    /* Families whose supports() may refuse the case (recorded as "unsupported on <family>");
     * a refusal anywhere else fails: what a backend lacks by design is said here, so a
     * kernel lost from supports() does not pass unnoticed. */
    unsigned may_refuse;
    /* "VAR=value ...": the case runs on a backend made with these set, of the family the
     * variables name (ONEBIT_CUDA_*, ONEBIT_VK_*), and only there. */
    const char *knobs;
    bool det;       /* on a backend in batch-invariant mode (ob_backend.deterministic) */
    /* A fused chain: also run on the family's backend with fusion off, each against the
     * reference, and the first output fused within fuse_mrel (of max|ref|) of unfused. */
    bool chain;
    double fuse_mrel;
    /* Families that refuse the graph at compute with err_status (documented behaviour,
     * graph.h: the CPU backend refuses a token outside the cache). */
    unsigned err_on;
    ob_status err_status;
    /* A defect found and not yet fixed (outside tests/): on these families the case runs,
     * and its outcome is printed as a known failure (or as fixed) rather than counted. */
    unsigned known_on;
    const char *known_bug;
} ops_case;

typedef struct ops_list {
    ops_case *c;
    int n, cap;
} ops_list;

/* Appends a case; returns it so the caller may set more fields (the pointer holds until
 * the next ops_add). */
ops_case *ops_add(ops_list *l, void (*build)(ops_build *, const void *), const void *p, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- helpers for build functions ------------------------------------------------------ */

/* Memory freed with the case. */
void *ops_own(ops_build *b, size_t bytes);
/* n draws of N(0, scale) (never all zeros), owned. */
float *ops_f32(ops_build *b, int64_t n, float scale);
/* Rows of type t from N(0, scale) floats as a weight file holds them; the lattice types
 * (IQ1/2/3) are random valid blocks with small finite scales (their quantizers are slow and
 * miss grid points); huge Q4_K/Q6_K tables random blocks too (ops_kblocks). */
void *ops_typed(ops_build *b, ob_type t, int64_t ne0, int64_t rows, float scale);
/* x rounded to the int8 grid GPU matvecs quantize activations to (d = max|x| / 127 per 32,
 * q = round(x / d)): their result then matches the reference to float rounding. */
void ops_round_q8(float *x, int64_t n);
/* Row r of x [ne0, ...] as the special values NaN, +inf, -inf, -0, then finite draws. */
void ops_special_row(float *x, int64_t ne0, int64_t r);
/* n rope frequency factors uniform in [0.5, 40] (below and far above 1). */
float *ops_rope_factors(ops_build *b, int64_t n);

ob_tensor *ops_leaf(ops_build *b, const char *name, ob_type t, int nd, const int64_t *ne, void *data);
/* An F32 leaf of N(0, scale) draws. */
ob_tensor *ops_leaf_f32(ops_build *b, const char *name, int nd, const int64_t *ne, float scale);
/* An I32 leaf holding a copy of v[n]. */
ob_tensor *ops_leaf_i32(ops_build *b, const char *name, int64_t n, const int32_t *v);

/* Compare t on every family within tol; ops_tol_on overrides it for the families in mask. */
void ops_check(ops_build *b, ob_tensor *t, ops_tol tol);
void ops_tol_on(ops_build *b, unsigned mask, ops_tol tol);

/* A MOE_GATE output [2k, T] as a leaf: k distinct random experts of E per token with
 * weights in (0, 1]; bad: some slots name no expert (-1, E, 2.5, NaN, 1e9) (ops_moe.c). */
ob_tensor *ops_gate_leaf(ops_build *b, int64_t E, int64_t k, int64_t T, bool bad);

/* The weight types of MATMUL / GET_ROWS / CPY: every type of the type table that is F32,
 * F16, BF16 or quantized (format/quant.h). n <= OB_TYPE_COUNT; returns n. */
int ops_weight_types(ob_type *out);

/* ---- the families (ops_*.c) ------------------------------------------------------------ */
void ops_add_elementwise(ops_list *l); /* ADD MUL SCALE ACT GLU SOFTMAX RMS_NORM LAYER_NORM */
void ops_add_types(ops_list *l);       /* MATMUL GET_ROWS CPY over the type table, and paths */
void ops_add_attention(ops_list *l);   /* ROPE KV_STORE ATTENTION POOL SAMPLE */
void ops_add_chains(ops_list *l);      /* fused chains against the node-by-node reference */
void ops_add_moe(ops_list *l);         /* MOE_GATE MATMUL_ID MOE_SUM and the Qwen3-MoE block */
void ops_add_gptoss(ops_list *l);      /* ATTENTION's sinks, GLU's clamped SwiGLU, ADD_ID, the gpt-oss block */
void ops_add_mla(ops_list *l);         /* CONCAT SLICE, MLA's ATTENTION / MATMUL_ID, grouped MOE_GATE */
void ops_add_recurrent(ops_list *l);   /* SSM_CONV DELTA_NET (hybrid models' state), the chunked delta rule */
#endif
