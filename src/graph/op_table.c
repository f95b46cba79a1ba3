#include "graph/op_table.h"
#include "format/quant.h"

static bool is_f32(const ob_tensor *t) { return t && t->type == OB_TYPE_F32; }
static bool is_i32(const ob_tensor *t) { return t && t->type == OB_TYPE_I32; }

/* The cache types of KV_STORE and ATTENTION (graph.h): llama-server's -ctk / -ctv types. */
static bool kv_type(ob_type t) {
    switch (t) {
    case OB_TYPE_F32: case OB_TYPE_F16: case OB_TYPE_BF16: case OB_TYPE_Q8_0: case OB_TYPE_Q4_0:
    case OB_TYPE_Q4_1: case OB_TYPE_Q5_0: case OB_TYPE_Q5_1: case OB_TYPE_IQ4_NL:
        return true;
    default:
        return false;
    }
}

/* A row of n elements of t holds whole blocks (false for an unknown type). Not n > 0: the
 * CUDA backend takes plain rows of any length, so a backend that wants rows adds that. */
static bool whole_blocks(ob_type t, int64_t n) {
    const int64_t bs = ob_type_block_size(t);
    return bs > 0 && n % bs == 0;
}

static bool act_ok(int32_t act) { return act >= OB_ACT_SILU && act < OB_ACT_COUNT; }

/* ---- per-op checks -------------------------------------------------------------------- */

static bool get_rows_ok(const ob_tensor *n) {
    const ob_tensor *a = n->src[0], *ids = n->src[1];
    return whole_blocks(a->type, a->ne[0]) && is_i32(ids) && is_f32(n) && n->ne[0] == a->ne[0] &&
           ob_nrows(n) == ob_nelements(ids);
}

/* RMS_NORM and LAYER_NORM: the weight and bias, where present, are F32 rows of x's width. */
static bool norm_ok(const ob_tensor *n) {
    const ob_tensor *a = n->src[0];
    if (!is_f32(a) || !is_f32(n) || ob_nelements(n) != ob_nelements(a) || n->ne[0] != a->ne[0]) return false;
    for (int s = 1; s <= (n->op == OB_OP_LAYER_NORM ? 2 : 1); s++)
        if (n->src[s] && (!is_f32(n->src[s]) || ob_nelements(n->src[s]) != a->ne[0])) return false;
    return true;
}

static bool matmul_ok(const ob_tensor *n) {
    const ob_tensor *w = n->src[0], *x = n->src[1];
    return whole_blocks(w->type, w->ne[0]) && is_f32(x) && is_f32(n) && x->ne[0] == w->ne[0] &&
           n->ne[0] == w->ne[1] && ob_nrows(n) == ob_nrows(x);
}

/* ADD and MUL: b is a full operand or one row broadcast over a's rows. */
static bool binary_ok(const ob_tensor *n) {
    const ob_tensor *a = n->src[0], *b = n->src[1];
    return is_f32(a) && is_f32(b) && is_f32(n) && ob_nelements(n) == ob_nelements(a) && b->ne[0] == a->ne[0] &&
           n->ne[0] == a->ne[0] && (ob_nelements(b) == ob_nelements(a) || ob_nelements(b) == a->ne[0]);
}

/* SCALE and SOFTMAX (and ACT, below): same shape in and out. */
static bool unary_ok(const ob_tensor *n) {
    const ob_tensor *a = n->src[0];
    return is_f32(a) && is_f32(n) && ob_nelements(n) == ob_nelements(a) && n->ne[0] == a->ne[0];
}

static bool act_node_ok(const ob_tensor *n) { return act_ok(n->ip[0]) && unary_ok(n); }

/* GLU: plain, or gpt-oss's clamped SwiGLU (a SiLU GLU with a finite alpha and limit > 0). */
static bool glu_ok(const ob_tensor *n) {
    const ob_tensor *a = n->src[0], *b = n->src[1];
    const bool kind_ok = n->ip[1] == OB_GLU_PLAIN || (n->ip[1] == OB_GLU_SWIGLU_OAI && n->ip[0] == OB_ACT_SILU &&
                                                      isfinite(n->fp[0]) && n->fp[1] > 0.0f && isfinite(n->fp[1]));
    return is_f32(a) && is_f32(b) && is_f32(n) && ob_nelements(a) == ob_nelements(b) &&
           ob_nelements(n) == ob_nelements(a) && act_ok(n->ip[0]) && kind_ok;
}

static bool rope_ok(const ob_tensor *n) {
    const ob_tensor *a = n->src[0], *pos = n->src[1], *factors = n->src[2];
    const int n_rot = n->ip[0];
    return is_f32(a) && is_f32(n) && is_i32(pos) && ob_nelements(n) == ob_nelements(a) && n->ne[0] == a->ne[0] &&
           n_rot > 0 && n_rot % 2 == 0 && n_rot <= a->ne[0] && (n->ip[1] == 0 || n->ip[1] == 2) &&
           ob_nelements(pos) == a->ne[2] * a->ne[3] && (!factors || (is_f32(factors) && ob_nelements(factors) == n_rot / 2)) &&
           isfinite(n->fp[2]);
}

/* The rows of x go one per token into cache rows of the same width; a quantized cache row
 * is written in whole blocks. src4, where set, only orders the store after another. */
static bool kv_store_ok(const ob_tensor *n) {
    const ob_tensor *x = n->src[0], *cache = n->src[1], *pos = n->src[2], *seq = n->src[3];
    if (!is_f32(x) || !kv_type(cache->type) || !is_i32(pos) || !is_i32(seq) || !is_f32(n)) return false;
    const int64_t row = cache->ne[0];
    if (row <= 0 || ob_nelements(x) % row != 0 || !whole_blocks(cache->type, row)) return false;
    const int64_t T = ob_nelements(x) / row;
    return ob_nelements(pos) == T && ob_nelements(seq) == T && n->ip[0] > 0;
}

/* The ALiBi max bias (f[2]) is left to the backends: the GPU ones refuse a negative or NaN
 * one, the CPU backend takes any (a difference kept as it was; see issue #30). */
static bool attention_ok(const ob_tensor *n) {
    const ob_tensor *q = n->src[0], *kc = n->src[1], *vc = n->src[2], *pos = n->src[3], *seq = n->src[4];
    if (!is_f32(q) || !is_f32(n) || !kv_type(kc->type) || !kv_type(vc->type) || !is_i32(pos) || !is_i32(seq))
        return false;
    const int64_t hd = q->ne[0], H = q->ne[1], T = q->ne[2] * q->ne[3];
    const int n_kv = n->ip[1];
    if (n_kv <= 0 || H % n_kv != 0 || n->ip[0] <= 0 || n->ip[2] < 0 || n->ne[0] % H != 0) return false;
    /* the values' width dv, and the V row of one kv head (sv; wider than dv when the V
     * cache is the K cache, as MLA's) */
    const int64_t dv = n->ne[0] / H, sv = vc->ne[0] / n_kv;
    if (kc->ne[0] != hd * n_kv || vc->ne[0] % n_kv != 0 || dv < 1 || dv > sv || ob_nrows(kc) != ob_nrows(vc))
        return false;
    /* Per-head slices of a quantized cache row must start and end on a block boundary. */
    if (!whole_blocks(kc->type, hd) || !whole_blocks(vc->type, sv) || !whole_blocks(vc->type, dv)) return false;
    /* sinks (gpt-oss): one logit per query head */
    if (n->src[6] && (!is_f32(n->src[6]) || ob_nelements(n->src[6]) != H)) return false;
    return ob_nelements(pos) == T && ob_nelements(seq) == T && ob_nrows(n) == T;
}

/* A conversion between any two types the node's rows hold in whole blocks. */
static bool cpy_ok(const ob_tensor *n) {
    const ob_tensor *a = n->src[0];
    return ob_nelements(a) == ob_nelements(n) && whole_blocks(a->type, a->ne[0]) && whole_blocks(n->type, n->ne[0]);
}

static bool pool_ok(const ob_tensor *n) {
    const ob_tensor *a = n->src[0], *seq = n->src[1], *pos = n->src[2];
    if (!is_f32(a) || !is_f32(n) || !is_i32(seq) || !is_i32(pos)) return false;
    const int64_t T = ob_nrows(a);
    return ob_nelements(seq) == T && ob_nelements(pos) == T && n->ne[0] == a->ne[0] && ob_nrows(n) == n->ip[2] &&
           n->ip[2] > 0 && n->ip[0] >= OB_POOL_MEAN && n->ip[0] <= OB_POOL_LAST;
}

/* The parameter values live in backend memory: kernels clamp top_k to 1..OB_SAMPLE_MAX_K
 * and u to [0, 1) themselves. Token ids and row counts fit in an I32. */
static bool sample_ok(const ob_tensor *n) {
    const ob_tensor *a = n->src[0], *p = n->src[1];
    if (!is_f32(a) || !is_f32(p) || n->type != OB_TYPE_I32) return false;
    const int64_t R = ob_nrows(a);
    return a->ne[0] > 0 && a->ne[0] <= 0x7fffffff && p->ne[0] == OB_SAMPLE_NPARAM && ob_nrows(p) == R &&
           ob_nelements(n) == R && R <= 0x7fffffff;
}

/* MOE_GATE: k of E experts per row of logits; ids exact in a float. */
static bool moe_gate_ok(const ob_tensor *n) {
    const ob_tensor *a = n->src[0], *bias = n->src[1];
    const int64_t E = a->ne[0], k = n->ip[0];
    if (n->ip[3]) { /* groups: whole ones, enough experts left in the used ones for k */
        const int64_t ng = OB_MOE_GROUP_COUNT(n->ip[3]), nu = OB_MOE_GROUP_USED(n->ip[3]);
        if (ng < 2 || E % ng != 0 || nu < 1 || nu > ng || k > nu * (E / ng)) return false;
    }
    return is_f32(a) && is_f32(n) && E >= 1 && E <= OB_MOE_MAX_EXPERTS && k >= 1 && k <= E && n->ne[0] == 2 * k &&
           ob_nrows(n) == ob_nrows(a) && (n->ip[1] == OB_MOE_SOFTMAX || n->ip[1] == OB_MOE_SIGMOID) &&
           (n->ip[2] & ~OB_MOE_NORM) == 0 && isfinite(n->fp[0]) && (!bias || (is_f32(bias) && ob_nelements(bias) == E));
}

/* The gate output of k slots for T tokens, as MATMUL_ID and MOE_SUM read it. */
static bool gate_rows_ok(const ob_tensor *gate, int64_t k, int64_t T) {
    return is_f32(gate) && k >= 1 && gate->ne[0] == 2 * k && ob_nrows(gate) == T;
}

/* MATMUL_ID: x shared by the k slots of its token ([K, T]) or one row per slot ([K, k, T]);
 * without a gate, one row per matrix ([K, E, T]). */
static bool matmul_id_ok(const ob_tensor *n) {
    const ob_tensor *w = n->src[0], *x = n->src[1];
    const int64_t k = n->ne[1], T = n->ne[2] * n->ne[3];
    if (!whole_blocks(w->type, w->ne[0]) || w->ne[2] < 1 || w->ne[2] > OB_MOE_MAX_EXPERTS || w->ne[3] != 1 ||
        !is_f32(x) || !is_f32(n) || x->ne[0] != w->ne[0] || n->ne[0] != w->ne[1])
        return false;
    if (!n->src[2]) return k == w->ne[2] && x->ne[1] == k && ob_nrows(x) == k * T;
    return gate_rows_ok(n->src[2], k, T) && (ob_nrows(x) == T || (x->ne[1] == k && ob_nrows(x) == k * T));
}

static bool moe_sum_ok(const ob_tensor *n) {
    const ob_tensor *y = n->src[0];
    const int64_t k = y->ne[1], T = y->ne[2] * y->ne[3];
    return is_f32(y) && is_f32(n) && n->ne[0] == y->ne[0] && ob_nrows(n) == T && gate_rows_ok(n->src[1], k, T);
}

/* CONCAT: two F32 operands of as many rows, joined row by row. */
static bool concat_ok(const ob_tensor *n) {
    const ob_tensor *a = n->src[0], *b = n->src[1];
    return is_f32(a) && is_f32(b) && is_f32(n) && ob_nrows(a) == ob_nrows(b) && ob_nrows(n) == ob_nrows(a) &&
           n->ne[0] == a->ne[0] + b->ne[0];
}

/* SLICE: a range inside each row of an F32 operand. */
static bool slice_ok(const ob_tensor *n) {
    const ob_tensor *a = n->src[0];
    return is_f32(a) && is_f32(n) && n->ip[0] >= 0 && n->ne[0] >= 1 && n->ip[0] + n->ne[0] <= a->ne[0] &&
           ob_nrows(n) == ob_nrows(a);
}

/* ADD_ID: a bias row per expert [N, E] added to each slot of a MATMUL_ID output [N, k, T]. */
static bool add_id_ok(const ob_tensor *n) {
    const ob_tensor *y = n->src[0], *bias = n->src[1];
    const int64_t k = y->ne[1], T = y->ne[2] * y->ne[3];
    return is_f32(y) && is_f32(bias) && is_f32(n) && ob_nelements(n) == ob_nelements(y) && n->ne[0] == y->ne[0] &&
           n->ne[1] == k && bias->ne[0] == y->ne[0] && bias->ne[1] >= 1 && bias->ne[1] <= OB_MOE_MAX_EXPERTS &&
           bias->ne[2] * bias->ne[3] == 1 && gate_rows_ok(n->src[2], k, T);
}

/* The recurrent ops' per-token inputs: pos and seq I32 [T]; a state of S >= 1 rows. */
static bool tokens_ok(const ob_tensor *pos, const ob_tensor *seq, int64_t T) {
    return is_i32(pos) && is_i32(seq) && ob_nelements(pos) == T && ob_nelements(seq) == T;
}

/* SSM_CONV: K taps (2..64) per channel, the state K-1 inputs of C channels per sequence. */
static bool ssm_conv_ok(const ob_tensor *n) {
    const ob_tensor *x = n->src[0], *w = n->src[1], *st = n->src[2];
    const int64_t C = x->ne[0], K = w->ne[0], T = ob_nrows(x);
    return is_f32(x) && is_f32(w) && is_f32(st) && is_f32(n) && C >= 1 && K >= 2 && K <= 64 && w->ne[1] == C &&
           ob_nrows(w) == C && st->ne[0] == (K - 1) * C && ob_nrows(st) >= 1 && n->ne[0] == C && ob_nrows(n) == T &&
           (n->ip[0] == 0 || n->ip[0] == 1) && tokens_ok(n->src[3], n->src[4], T);
}

/* DELTA_NET: the packed q/k/v rows, H value heads over Hk query/key heads, a dk x dv matrix
 * per value head and sequence. */
static bool delta_net_ok(const ob_tensor *n) {
    const ob_tensor *qkv = n->src[0], *g = n->src[1], *b = n->src[2], *st = n->src[3];
    const int64_t dk = n->ip[0], Hk = n->ip[1], dv = n->ip[2], H = g->ne[0], T = ob_nrows(qkv);
    if (!is_f32(qkv) || !is_f32(g) || !is_f32(b) || !is_f32(st) || !is_f32(n)) return false;
    if (dk < 1 || dk > 1024 || dv < 1 || dv > 1024 || Hk < 1 || H < Hk || H % Hk != 0 || H > 65536) return false;
    if (qkv->ne[0] != 2 * Hk * dk + H * dv || ob_nrows(g) != T || b->ne[0] != H || ob_nrows(b) != T) return false;
    if (st->ne[0] != dk * dv * H || ob_nrows(st) < 1) return false;
    return n->ne[0] == dv && n->ne[1] == H && n->ne[2] * n->ne[3] == T && (n->ip[3] == 0 || n->ip[3] == 1) &&
           isfinite(n->fp[0]) && n->fp[1] >= 0.0f && isfinite(n->fp[1]) && tokens_ok(n->src[4], n->src[5], T);
}

/* ---- the table ------------------------------------------------------------------------ */

static const ob_op_info g_ops[] = {
    [OB_OP_LEAF] = {"LEAF", 0, 0, NULL, 0},
    [OB_OP_VIEW] = {"VIEW", 1, 0, NULL, 0},
    [OB_OP_GET_ROWS] = {"GET_ROWS", 2, 0, get_rows_ok, 0},
    [OB_OP_RMS_NORM] = {"RMS_NORM", 1, 1, norm_ok, 0},
    [OB_OP_LAYER_NORM] = {"LAYER_NORM", 1, 2, norm_ok, 0},
    [OB_OP_MATMUL] = {"MATMUL", 2, 0, matmul_ok, 0},
    [OB_OP_ADD] = {"ADD", 2, 0, binary_ok, 0},
    [OB_OP_MUL] = {"MUL", 2, 0, binary_ok, 0},
    [OB_OP_SCALE] = {"SCALE", 1, 0, unary_ok, 0},
    [OB_OP_ROPE] = {"ROPE", 2, 1, rope_ok, 0},
    [OB_OP_KV_STORE] = {"KV_STORE", 4, 1, kv_store_ok, 1u << 1},
    [OB_OP_ATTENTION] = {"ATTENTION", 5, 2, attention_ok, 0},
    [OB_OP_GLU] = {"GLU", 2, 0, glu_ok, 0},
    [OB_OP_ACT] = {"ACT", 1, 0, act_node_ok, 0},
    [OB_OP_SOFTMAX] = {"SOFTMAX", 1, 0, unary_ok, 0},
    [OB_OP_CPY] = {"CPY", 1, 0, cpy_ok, 0},
    [OB_OP_POOL] = {"POOL", 3, 0, pool_ok, 0},
    [OB_OP_SAMPLE] = {"SAMPLE", 2, 0, sample_ok, 0},
    [OB_OP_MOE_GATE] = {"MOE_GATE", 1, 1, moe_gate_ok, 0},
    [OB_OP_MATMUL_ID] = {"MATMUL_ID", 2, 1, matmul_id_ok, 0},
    [OB_OP_MOE_SUM] = {"MOE_SUM", 2, 0, moe_sum_ok, 0},
    [OB_OP_CONCAT] = {"CONCAT", 2, 0, concat_ok, 0},
    [OB_OP_SLICE] = {"SLICE", 1, 0, slice_ok, 0},
    [OB_OP_ADD_ID] = {"ADD_ID", 3, 0, add_id_ok, 0},
    [OB_OP_SSM_CONV] = {"SSM_CONV", 5, 0, ssm_conv_ok, 1u << 2},
    [OB_OP_DELTA_NET] = {"DELTA_NET", 6, 0, delta_net_ok, 1u << 3},
};
/* A new op must get its entry; test_graph checks that every entry is filled. */
_Static_assert(sizeof(g_ops) / sizeof(g_ops[0]) == OB_OP_COUNT, "g_ops needs one entry per ob_op");

const ob_op_info *ob_op_info_get(ob_op op) {
    return ((int)op >= 0 && (int)op < OB_OP_COUNT && g_ops[op].name) ? &g_ops[op] : NULL;
}

const char *ob_op_name(ob_op op) {
    const ob_op_info *info = ob_op_info_get(op);
    return info ? info->name : "?";
}

bool ob_op_valid(const ob_tensor *n) {
    const ob_op_info *info = n ? ob_op_info_get(n->op) : NULL;
    if (!info) return false;
    for (int s = 0; s < OB_MAX_SRC; s++) {
        if (s < info->n_src && !n->src[s]) return false;
        if (s >= info->n_src + info->n_src_opt && n->src[s]) return false;
    }
    return !info->valid || info->valid(n);
}

bool ob_op_writes_src(const ob_tensor *n, int s) {
    const ob_op_info *info = n ? ob_op_info_get(n->op) : NULL;
    return info && s >= 0 && s < OB_MAX_SRC && (info->writes >> s & 1u) && n->src[s];
}
