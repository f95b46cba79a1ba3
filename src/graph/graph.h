/* The op IR. An architecture file builds one forward pass as a list of nodes; a backend
 * runs them. Tensors are contiguous; ne[0] is the innermost dimension (a row). */
#ifndef OB_GRAPH_GRAPH_H
#define OB_GRAPH_GRAPH_H

#include "core/common.h"
#include <math.h>

#define OB_MAX_SRC 7 /* ATTENTION's optional sinks are its seventh */
#define OB_MAX_NAME 64

typedef enum ob_op {
    OB_OP_LEAF = 0,   /* weight, cache or input: data set by the owner */
    OB_OP_VIEW,       /* same bytes as src0, other shape (contiguous reshape) */
    OB_OP_GET_ROWS,   /* src0 table [ne0, rows] any type; src1 ids I32 [T] -> F32 [ne0, T] */
    OB_OP_RMS_NORM,   /* src0 x F32 [n, rows]; src1 weight F32 [n] or NULL; f[0] eps.
                         i[0] = 1: Gemma style, multiply by (1 + w) is folded at load, so no flag needed */
    OB_OP_LAYER_NORM, /* src0 x [n, rows]; src1 weight [n] or NULL; src2 bias [n] or NULL; f[0] eps */
    OB_OP_MATMUL,     /* src0 W [K, N] any type; src1 x F32 [K, T] -> F32 [N, T]  (y = W x) */
    OB_OP_ADD,        /* src0 [n, rows] + src1 ([n, rows] or [n] broadcast) */
    OB_OP_MUL,        /* src0 [n, rows] * src1 ([n, rows] or [n] broadcast) */
    OB_OP_SCALE,      /* src0 * f[0] */
    OB_OP_ROPE,       /* src0 F32 [head_dim, n_head, T]; src1 pos I32 [T]; src2 NULL or
                         frequency factors F32 [n_rot/2].
                         i[0] n_rot, i[1] mode (0 = adjacent pairs, 2 = NeoX halves);
                         f[0] freq_base, f[1] freq_scale, f[2] mscale.
                         Pair i < n_rot/2 turns by theta = pos * f[1] * f[0]^(-2i/n_rot) / src2[i]
                         (src2 NULL: / 1), as ggml's rope_ext with its factors; both rotated
                         elements are then multiplied by f[2] (YaRN's attention factor, 1 for
                         none). Elements past n_rot are copied unscaled. YaRN's per-pair
                         ramp is folded into src2 by the host (arch/rope.c) */
    OB_OP_KV_STORE,   /* writes src0 F32 [row, T] into cache src1 (a cache type [row, cells]:
                         op_table.c's kv_type) at
                         cell seq*i[0] + pos; src2 pos I32 [T]; src3 seq I32 [T];
                         src4 NULL or another KV_STORE's token (ordering only).
                         dst is a 1-element F32 token that orders later reads. A token
                         outside the cache (pos not in [0, i[0]), or its sequence's cells
                         past the cache) is not stored: the CPU backend refuses the graph,
                         the reference and the GPU backends skip it */
    OB_OP_ATTENTION,  /* src0 q F32 [hd, n_head, T]; src1 K cache [hd*n_kv, cells];
                         src2 V cache [hd*n_kv, cells]; src3 pos I32 [T]; src4 seq I32 [T];
                         src5 the KV_STORE token (ordering only); src6 NULL or sinks F32 [n_head]
                         (gpt-oss): head h's sink is one more logit, in the scaled scores' units,
                         that joins the softmax's denominator and adds no value.
                         i[0] cells per sequence, i[1] n_head_kv, i[2] sliding window (0 = none),
                         i[3] causal (1) or whole sequence (0, encoders: attends to the
                         batch's tokens of the same sequence); f[0] scale, f[1] logit soft-cap (0 = none),
                         f[2] ALiBi max bias (0 = none): query head h adds -slope_h * |pos_q - pos_k| to
                         its scores, slope_h = m0^(h+1) for h < n2, else m1^(2(h-n2)+1), where n2 is the
                         largest power of two <= n_head, m0 = 2^(-f[2]/n2), m1 = 2^(-f[2]/(2 n2))
                         -> F32 [dv*n_head, T]; a token outside the cache (as KV_STORE's) gets
                         zeros, and whole-sequence attention reaches cell i[0] - 1 at most.
                         dv, the values' width, is the output's ne[0] / n_head (hd unless built by
                         ob_attention_v); kv head j's value is elements [j*sv, j*sv + dv) of a
                         V cache row, sv = its width / n_kv >= dv: src2 may be the K cache
                         itself (MLA keeps one latent row per token and reads its first dv
                         elements as the value) */
    OB_OP_GLU,        /* src0 gate [n, rows], src1 up [n, rows] -> act(gate) * up; i[0] ob_act;
                         i[1] ob_glu_kind: OB_GLU_SWIGLU_OAI (i[0] SILU) is gpt-oss's clamped form,
                         g = min(gate, f[1]), u = clamp(up, -f[1], f[1]):
                         g * sigmoid(f[0] * g) * (u + 1); f[0] alpha, f[1] limit > 0 */
    OB_OP_ACT,        /* src0 -> act(src0); i[0] ob_act */
    OB_OP_SOFTMAX,    /* softmax over rows of src0 */
    OB_OP_CPY,        /* src0 -> dst of another type (same element count) */
    OB_OP_POOL,       /* src0 x F32 [n, T]; src1 seq I32 [T]; src2 pos I32 [T] -> F32 [n, n_seq]:
                         one row per sequence id 0..n_seq-1 over that sequence's tokens in the
                         batch (zeros when it has none). i[0] ob_pool_type, i[1] L2-normalise
                         (1) or not (0), i[2] n_seq */
    OB_OP_SAMPLE,     /* src0 logits F32 [n_vocab, R]; src1 params F32 [OB_SAMPLE_NPARAM, R]
                         (see ob_sample_param) -> I32 [R]: one token per row, exactly as
                         ob_sampler_sample picks it with no penalties and no logit bias */
    /* Mixture of experts (issue #32). A token's k chosen experts travel as one F32 row of
     * the gate output: [w_0 .. w_{k-1}, id_0 .. id_{k-1}], ids as exact floats. */
    OB_OP_MOE_GATE,   /* src0 router logits F32 [E, T]; src1 NULL or selection bias F32 [E]
                         -> F32 [2k, T]. i[0] k (1..E), i[1] ob_moe_gating, i[2] flags
                         (OB_MOE_NORM: the k weights divided by their sum); f[0] scale;
                         i[3] 0, or OB_MOE_GROUPS(n, used): group-limited routing (DeepSeek-V3),
                         see there.
                         Softmax: the k largest logits (the softmax is monotone), weight
                         softmax(logits)[id]. Sigmoid: the k largest sigmoid(l) + bias, weight
                         sigmoid(l)[id] (the bias only selects). Ties go to the lower id;
                         the chosen are in descending order of their score. Weights are then
                         normalised (flag) and multiplied by f[0] */
    OB_OP_MATMUL_ID,  /* src0 experts' W [K, N, E] any type; src1 x F32 [K, T] (every slot
                         reads token t's row) or [K, k, T] (one row per slot); src2 the
                         MOE_GATE output [2k, T] -> F32 [N, k, T]: slot j of token t is
                         W[id_j,t] x. A slot whose id is not an integer in [0, E) (a
                         gate output is always one; a corrupt one is not) gives zeros.
                         src2 NULL: slot j uses matrix j (k = E, x [K, E, T]): one matrix
                         per head, as MLA's k_b and v_b are */
    OB_OP_MOE_SUM,    /* src0 y F32 [N, k, T]; src1 the MOE_GATE output [2k, T] -> F32 [N, T]:
                         sum over j = 0..k-1, in that order, of w_j,t * y[:, j, t] */
    /* Pieces of rows (MLA, issue #32): splitting a projection into its parts and joining the
     * parts of a query or key, as ggml's strided views and concat do. */
    OB_OP_CONCAT,     /* src0 a F32 [na, ...], src1 b F32 [nb, ...] of as many rows -> F32
                         [na + nb, ...] (a's shape past ne[0]): each row a's then b's */
    OB_OP_SLICE,      /* src0 F32 [n, ...] -> F32 [len, ...]: elements [i[0], i[0] + len) of
                         every row */
    /* gpt-oss (issue #32): each expert's bias after MATMUL_ID */
    OB_OP_ADD_ID,     /* src0 y F32 [N, k, T] (a MATMUL_ID output); src1 bias F32 [N, E]; src2 the
                         MOE_GATE output [2k, T] -> F32 [N, k, T]: y[:, j, t] + bias[:, id_j,t].
                         A slot whose id names no expert (as MATMUL_ID's) gets y unchanged */
    /* Recurrent layers (issue #33): state that a sequence carries from token to token, one
     * row per sequence of a state leaf [n, S] that the op reads and writes in place (the op
     * table's `writes`). Tokens of a sequence run in batch order; a token at position 0 starts
     * its sequence from a zero state (a new sequence needs no clearing). A token whose sequence
     * is outside the state is refused by the CPU backend (OB_ERR_CONTEXT) and gets zeros from
     * the reference, as KV_STORE's. */
    OB_OP_SSM_CONV,   /* src0 x F32 [C, T]; src1 taps F32 [K, C] (K >= 2: tap K-1 takes the token,
                         tap K-1-j the input j tokens back); src2 state F32 [(K-1) C, S]: per
                         sequence its last K-1 inputs, oldest first, C channels each; src3 pos
                         I32 [T]; src4 seq I32 [T] -> F32 [C, T]: the depthwise causal
                         convolution (LFM2's short conv, the conv before Qwen3.5's delta rule),
                         taps summed in order 0..K-1; i[0] 1: SiLU of the sum, 0: none */
    OB_OP_DELTA_NET,  /* The gated delta rule (Gated DeltaNet, Qwen3.5 / Qwen3-Next).
                         src0 qkv F32 [2 Hk dk + H dv, T]: per token the query heads, the key
                         heads (Hk of dk each) and the value heads (H of dv); src1 g F32 [H, T]
                         (the log of the decay); src2 beta F32 [H, T]; src3 state F32 [dk dv H, S]:
                         per sequence and value head a dk x dv matrix, row i at i*dv; src4 pos
                         I32 [T]; src5 seq I32 [T] -> F32 [dv, H, T]. i[0] dk, i[1] Hk, i[2] dv
                         (H = g's ne[0], a multiple of Hk; value head h reads query/key head
                         h % Hk: llama.cpp's converter writes Qwen3.5's value heads in that
                         tiled order); i[3] 1: q and k L2-normalised first, x / sqrt(|x|^2 + f[1]);
                         f[0] the query's scale. Per token and head, in double in the reference:
                         S = exp(g) S; d = beta (v - S^T k); S += k d^T; o = S^T (f[0] q) */
    OB_OP_COUNT,
} ob_op;

/* MOE_GATE's gating function (i[1]) and flags (i[2]). */
typedef enum ob_moe_gating { OB_MOE_SOFTMAX = 0, OB_MOE_SIGMOID = 1 } ob_moe_gating;
#define OB_MOE_NORM 1
/* MOE_GATE's i[3] for group-limited routing: the E experts are n consecutive groups of E/n;
 * a group's score is the sum of its two best selection scores (its one, in groups of one;
 * softmax: probabilities), and only the experts of the `used` best groups (ties to the lower
 * group) can be chosen, as llama.cpp's expert_group_count / expert_group_used_count. */
#define OB_MOE_GROUPS(n, used) ((int32_t)((uint32_t)(n) | (uint32_t)(used) << 16))
#define OB_MOE_GROUP_COUNT(i3) ((int)((uint32_t)(i3) & 0xffff))
#define OB_MOE_GROUP_USED(i3) ((int)((uint32_t)(i3) >> 16))
/* Experts an id can name: every id below is exact in a float. */
#define OB_MOE_MAX_EXPERTS (1 << 24)

/* GLU's kind (i[1]). */
typedef enum ob_glu_kind { OB_GLU_PLAIN = 0, OB_GLU_SWIGLU_OAI = 1 } ob_glu_kind;

typedef enum ob_act { OB_ACT_SILU = 0, OB_ACT_GELU = 1 /* tanh approx */, OB_ACT_GELU_ERF = 2, OB_ACT_RELU = 3,
                     OB_ACT_TANH = 4, OB_ACT_SOFTPLUS = 5 /* log(1 + e^x) */, OB_ACT_SIGMOID = 6,
                     OB_ACT_COUNT /* not an activation: how many there are */ } ob_act;

/* Values match llama.cpp's <arch>.pooling_type. CLS takes the sequence's lowest position
 * in the batch, LAST its highest. */
typedef enum ob_pool_type { OB_POOL_NONE = 0, OB_POOL_MEAN = 1, OB_POOL_CLS = 2, OB_POOL_LAST = 3 } ob_pool_type;

/* Per-row parameters of SAMPLE. TOP_K is a float holding an integer; U is a uniform draw
 * in [0, 1) from the request's sampler (ob_sampler_next_uniform), unused when greedy. */
typedef enum ob_sample_param {
    OB_SAMPLE_TEMP = 0,      /* <= 0: greedy (first max) */
    OB_SAMPLE_TOP_K = 1,     /* 1..OB_SAMPLE_MAX_K when not greedy */
    OB_SAMPLE_TOP_P = 2,     /* >= 1: off */
    OB_SAMPLE_MIN_P = 3,     /* <= 0: off */
    OB_SAMPLE_U = 4,
    OB_SAMPLE_N_VOCAB = 5,   /* >= 1: only the row's first N logits are candidates (the
                                sampler's vocabulary, which may be smaller than the model's) */
    OB_SAMPLE_NPARAM = 8,    /* floats per row (the rest are zero) */
} ob_sample_param;
#define OB_SAMPLE_MAX_K 1024

/* "?" for an id that is not an op. The table behind it, with each op's sources and
 * checks, is graph/op_table.h. */
const char *ob_op_name(ob_op op);

/* ALiBi slope of query head h of n_head for ATTENTION's f[2] = max_bias (see there). */
static inline float ob_alibi_slope(int h, int n_head, float max_bias) {
    int n2 = 1;
    while (n2 * 2 <= n_head) n2 *= 2;
    float m0 = exp2f(-max_bias / (float)n2), m1 = exp2f(-max_bias / (float)(2 * n2));
    return h < n2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - n2) + 1));
}

typedef struct ob_tensor {
    ob_op op;
    ob_type type;
    int64_t ne[4];           /* elements per dimension, unused = 1 */
    void *data;              /* backend memory (host pointer on the CPU) */
    struct ob_tensor *src[OB_MAX_SRC];
    int32_t ip[4];           /* integer op parameters */
    float fp[4];             /* float op parameters */
    char name[OB_MAX_NAME];
    /* planner state */
    int64_t id;              /* index in the graph */
    size_t offset;           /* byte offset in the scratch arena (non-leaf, non-view) */
    int64_t last_use;
} ob_tensor;

typedef struct ob_graph {
    ob_tensor *nodes;        /* [cap]; nodes in execution order (leaves included) */
    int64_t n, cap;
    size_t scratch_size;     /* bytes the planner needs for activations */
    /* 0: unknown. Nonzero: set by the owner after plan and bind; the same value on a later
     * compute promises that no node changed since, so a backend may reuse what it derived
     * from the graph then (ob_graph_reset clears it). */
    uint64_t version;
} ob_graph;

ob_graph *ob_graph_new(int64_t cap);
void ob_graph_free(ob_graph *g);
void ob_graph_reset(ob_graph *g);
/* A version no graph has held before (for ob_graph.version; thread-safe). */
uint64_t ob_graph_new_version(void);

int64_t ob_nelements(const ob_tensor *t);
size_t ob_nbytes(const ob_tensor *t);
int64_t ob_nrows(const ob_tensor *t); /* elements / ne[0] */

/* Builders. Each returns the new node (never NULL: capacity is an internal invariant). */
ob_tensor *ob_leaf(ob_graph *g, const char *name, ob_type type, int n_dims, const int64_t *ne, void *data);
ob_tensor *ob_view(ob_graph *g, ob_tensor *a, int n_dims, const int64_t *ne);
ob_tensor *ob_get_rows(ob_graph *g, ob_tensor *table, ob_tensor *ids);
ob_tensor *ob_rms_norm(ob_graph *g, ob_tensor *x, ob_tensor *w, float eps);
ob_tensor *ob_layer_norm(ob_graph *g, ob_tensor *x, ob_tensor *w, ob_tensor *b, float eps);
ob_tensor *ob_matmul(ob_graph *g, ob_tensor *w, ob_tensor *x);
ob_tensor *ob_add(ob_graph *g, ob_tensor *a, ob_tensor *b);
ob_tensor *ob_mul(ob_graph *g, ob_tensor *a, ob_tensor *b);
ob_tensor *ob_scale(ob_graph *g, ob_tensor *a, float s);
/* factors: NULL or F32 [n_rot/2]; mscale 1 for none (see OB_OP_ROPE). */
ob_tensor *ob_rope(ob_graph *g, ob_tensor *x, ob_tensor *pos, ob_tensor *factors, int n_rot, int mode, float base,
                   float freq_scale, float mscale);
ob_tensor *ob_kv_store(ob_graph *g, ob_tensor *x, ob_tensor *cache, ob_tensor *pos, ob_tensor *seq, int cells_per_seq);
ob_tensor *ob_attention(ob_graph *g, ob_tensor *q, ob_tensor *kc, ob_tensor *vc, ob_tensor *pos,
                        ob_tensor *seq, ob_tensor *order, int cells_per_seq, int n_head_kv,
                        int window, bool causal, float scale, float softcap);
/* Causal ATTENTION whose values are dv wide (<= the V cache's row per kv head): MLA's,
 * where vc is the K cache and the value is the first dv elements of each latent row. */
ob_tensor *ob_attention_v(ob_graph *g, ob_tensor *q, ob_tensor *kc, ob_tensor *vc, ob_tensor *pos, ob_tensor *seq,
                          ob_tensor *order, int cells_per_seq, int n_head_kv, int dv, float scale);
ob_tensor *ob_glu(ob_graph *g, ob_tensor *gate, ob_tensor *up, ob_act act);
/* GLU of kind OB_GLU_SWIGLU_OAI (gpt-oss: alpha 1.702, limit 7). */
ob_tensor *ob_glu_swiglu_oai(ob_graph *g, ob_tensor *gate, ob_tensor *up, float alpha, float limit);
/* ADD_ID: each slot's expert bias (bias F32 [N, E]) added to a MATMUL_ID output. */
ob_tensor *ob_add_id(ob_graph *g, ob_tensor *y, ob_tensor *bias, ob_tensor *gate);
ob_tensor *ob_act_op(ob_graph *g, ob_tensor *x, ob_act act);
ob_tensor *ob_softmax(ob_graph *g, ob_tensor *x);
ob_tensor *ob_cpy(ob_graph *g, ob_tensor *x, ob_type type);
ob_tensor *ob_pool(ob_graph *g, ob_tensor *x, ob_tensor *seq, ob_tensor *pos, ob_pool_type type, bool normalize, int n_seq);
ob_tensor *ob_sample(ob_graph *g, ob_tensor *logits, ob_tensor *params);
/* Mixture of experts (see OB_OP_MOE_GATE, OB_OP_MATMUL_ID, OB_OP_MOE_SUM). bias: NULL or F32 [E];
 * gate NULL: slot j of ob_matmul_id uses matrix j of w (one per head). */
ob_tensor *ob_moe_gate(ob_graph *g, ob_tensor *logits, ob_tensor *bias, int k, ob_moe_gating gating, bool norm,
                       float scale);
ob_tensor *ob_matmul_id(ob_graph *g, ob_tensor *w, ob_tensor *x, ob_tensor *gate);
ob_tensor *ob_moe_sum(ob_graph *g, ob_tensor *y, ob_tensor *gate);
/* MOE_GATE with group-limited routing (n_group > 1; see OB_MOE_GROUPS). */
ob_tensor *ob_moe_gate_grouped(ob_graph *g, ob_tensor *logits, ob_tensor *bias, int k, ob_moe_gating gating, bool norm,
                               float scale, int n_group, int n_group_used);
/* CONCAT and SLICE (graph.h's ops of the same names). */
ob_tensor *ob_concat(ob_graph *g, ob_tensor *a, ob_tensor *b);
ob_tensor *ob_slice(ob_graph *g, ob_tensor *x, int64_t offset, int64_t len);
/* SSM_CONV and DELTA_NET (graph.h's ops of the same names; state leaves written in place). */
ob_tensor *ob_ssm_conv(ob_graph *g, ob_tensor *x, ob_tensor *taps, ob_tensor *state, ob_tensor *pos, ob_tensor *seq,
                       bool silu);
ob_tensor *ob_delta_net(ob_graph *g, ob_tensor *qkv, ob_tensor *gate, ob_tensor *beta, ob_tensor *state, ob_tensor *pos,
                        ob_tensor *seq, int dk, int n_k_heads, int dv, float q_scale, bool l2_norm, float l2_eps);
void ob_set_name(ob_tensor *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Assigns scratch offsets to every computed node, reusing memory after a node's last
 * use. Sets g->scratch_size. Views share their source's bytes. */
void ob_graph_plan(ob_graph *g);
/* Points every computed node's data at base + offset (after ob_graph_plan). */
void ob_graph_bind(ob_graph *g, void *base);

#endif
