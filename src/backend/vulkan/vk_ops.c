/* What the Vulkan kernels accept, and how each node becomes a dispatch (split decode
 * attention: two) or a fused pair of nodes one: which shader, which push constants, how
 * many workgroups. Shapes follow src/graph/graph.h.
 *
 * Batch-invariant mode (vk->det, the backend's deterministic flag): a token's outputs must
 * be bitwise the same whatever else shares its batch, so every choice below that looks at
 * the token count T is made as it would be for any T, from the weight, head and cache
 * shapes and the device alone, on one pipeline each (a driver may contract multiplies and
 * adds into FMAs differently in other code, so two kernels that sum in the same order are
 * not trusted to round alike):
 *  - MATMUL: matvec_q8.comp's multi-token pipeline on its per-row path where the int8 path
 *    applies (x quantized by the quantizer dispatch, per 32-element block, so a token's
 *    int8 x does not depend on its batch), else matvec.comp (streaming or chunk path,
 *    never staged, never split-K); both with DET, which takes any T in chunks of their
 *    token width, each chunk summed as a batch of its own. Never the one-token pipelines,
 *    the tiled shader (unless ONEBIT_VK_NO_MATVEC=1, then it for every T: an output's sum
 *    runs over k in order wherever its tile lies).
 *  - ATTENTION: attn_dec.comp wherever its shape fits (causal, head size, cache types),
 *    at its split count from the cells a sequence holds (the solo walk hangs on the
 *    token's position only), the tokens in chunks as many as have tickets, a barrier
 *    between chunks; else attention.comp with one workgroup per (token, head), no splits.
 *    The splits' partials are merged in split order by whichever finishes last: the
 *    ticket's atomic picks who merges, not the order of the sum.
 *  - Fusions that apply only to some T are off: the one-token matmul + residual ADD (and
 *    the norm's partial sums and prenorm), gate/up/GLU, the attention fold, and the
 *    int8 outputs of norms, GLUs and attentions (the quantizer writes the same bytes from
 *    the same floats, but the norm that writes them is other code). RMS_NORM + ROPE (+ K
 *    store) is off too: norm_rope.comp sums a head's squares in its own order, and its
 *    address test may pass for one graph and not another. ADD + norm stays: one norm.comp
 *    pipeline either way, and the fused sum is the ADD's own a + b.
 *  - The mixture-of-experts ops (vk_moe.c) compute each token the same way for any T. */
#include <math.h>
#include <string.h>

#include "backend/vulkan/vk_internal.h"
#include "format/quant.h"
#include "graph/op_table.h"

static bool is_f32(const ob_tensor *t) { return t && t->type == OB_TYPE_F32; }

/* Weight types with a decoder in shaders/dequant.glsl. */
static bool weight_type_ok(ob_type t) {
    switch (t) {
    case OB_TYPE_F32: case OB_TYPE_F16: case OB_TYPE_BF16:
    case OB_TYPE_Q4_0: case OB_TYPE_Q4_1: case OB_TYPE_Q5_0: case OB_TYPE_Q5_1:
    case OB_TYPE_Q8_0: case OB_TYPE_Q8_1: case OB_TYPE_Q2_K: case OB_TYPE_Q3_K:
    case OB_TYPE_Q4_K: case OB_TYPE_Q5_K: case OB_TYPE_Q6_K: case OB_TYPE_Q8_K:
    case OB_TYPE_IQ4_NL: case OB_TYPE_IQ4_XS: case OB_TYPE_TQ1_0: case OB_TYPE_TQ2_0:
    case OB_TYPE_Q1_0: case OB_TYPE_MXFP4: case OB_TYPE_IQ2_XXS: case OB_TYPE_IQ2_XS:
    case OB_TYPE_IQ2_S: case OB_TYPE_IQ3_XXS: case OB_TYPE_IQ3_S: case OB_TYPE_IQ1_S:
    case OB_TYPE_IQ1_M:
        return true;
    default:
        return false;
    }
}

static bool is_plain(ob_type t) { return t == OB_TYPE_F32 || t == OB_TYPE_F16 || t == OB_TYPE_BF16; }

static bool row_aligned(ob_type t, int64_t n) {
    int64_t bs = ob_type_block_size(t);
    return bs > 0 && n > 0 && n % bs == 0;
}

/* Indices inside shaders are 32-bit. */
static bool fits32(int64_t n) { return n >= 0 && n < ((int64_t)1 << 31); }

/* An ATTENTION's values: dv wide (the output's row per head), at sv a kv head in the V
 * cache's rows (graph.h: the K cache's own width where V is read from it, as MLA's). */
static int64_t attn_dv(const ob_tensor *n) { return n->ne[0] / n->src[0]->ne[1]; }
static int64_t attn_sv(const ob_tensor *n) { return n->src[2]->ne[0] / n->ip[1]; }

/* SAMPLE's workgroup (sample.comp): 1024 invocations, halved while the device allows fewer
 * or it would hold over 64 subgroups (the shader's per-subgroup arrays); 0: no kernel (no
 * shaderFloat64, or under 64 invocations). */
uint32_t ob_vk_sample_wg(const ob_vk *vk) {
    uint32_t wg = 1024;
    while (wg >= 64 && (wg > vk->info.max_wg || wg > 64 * vk->info.subgroup)) wg /= 2;
    return vk->mods[OB_VK_SH_SAMPLE] && wg >= 64 ? wg : 0;
}

bool ob_vk_matvec_weight_ok(const ob_tensor *w) {
    return weight_type_ok(w->type) && row_aligned(w->type, w->ne[0]) && (is_plain(w->type) || w->ne[0] % 32 == 0) &&
           fits32((int64_t)ob_row_size(w->type, w->ne[0]));
}

/* The shapes and types are ob_op_valid's; what is left are the shaders' limits. */
bool ob_vk_supports_node(const ob_vk *vk, const ob_tensor *n) {
    if (!ob_op_valid(n) || !fits32(ob_nelements(n))) return false;
    const ob_tensor *a = n->src[0], *b = n->src[1];
    switch (n->op) {
    case OB_OP_GET_ROWS:
        return weight_type_ok(a->type) && row_aligned(a->type, a->ne[0]) && fits32(ob_nrows(a)) &&
               fits32((int64_t)ob_row_size(a->type, a->ne[0]));
    case OB_OP_MATMUL:
        return ob_vk_matvec_weight_ok(a) && fits32(ob_nelements(b));
    case OB_OP_RMS_NORM:
    case OB_OP_LAYER_NORM:
    case OB_OP_ADD:
    case OB_OP_MUL:
    case OB_OP_SCALE:
    case OB_OP_ACT:
    case OB_OP_SOFTMAX:
    case OB_OP_GLU: /* plain, or gpt-oss's clamped SwiGLU (act.glsl's glu) */
    case OB_OP_ROPE: /* with or without its F32 [n_rot/2] frequency factors */
        return true;
    case OB_OP_KV_STORE: /* F32/F16 rows may end in a partial 32-chunk (tiny heads) */
        return fits32(ob_nrows(b)) && fits32(ob_nelements(a));
    case OB_OP_ATTENTION:
        if (!(n->fp[2] >= 0.0f)) return false; /* ALiBi max bias: 0 = none; NaN refused */
        /* (attention sinks, src6, on every path: attn.glsl's attn_inv; values narrower than
         * the keys, from a V cache of their own or the K cache itself, as MLA's, on every
         * path too: attn_dec_plan and ob_vk_attn_fold_ok say where) attention.comp: keys
         * up to its MAXQ (MLA's 576 included), values up to MAXD * WG */
        return a->ne[1] <= 65535 && a->ne[0] <= 1024 && attn_dv(n) <= 512 && fits32(ob_nrows(b)) &&
               fits32(ob_nelements(b)) && fits32(ob_nelements(n->src[2]));
    case OB_OP_POOL:
        return fits32(ob_nelements(a));
    case OB_OP_CONCAT: /* concat.comp; a SLICE's source is longer than its output */
    case OB_OP_SLICE:
        return fits32(ob_nelements(a));
    case OB_OP_SAMPLE: /* sample.comp, where the device runs it */
        return ob_vk_sample_wg(vk) && fits32(a->ne[0]);
    case OB_OP_MOE_GATE:
    case OB_OP_MATMUL_ID:
    case OB_OP_MOE_SUM:
    case OB_OP_ADD_ID:
        return ob_vk_moe_supports(vk, n);
    case OB_OP_SSM_CONV:
    case OB_OP_DELTA_NET:
        return ob_vk_recurrent_supports(vk, n);
    case OB_OP_CPY:
        if (!weight_type_ok(a->type)) return false;
        if (n->type != OB_TYPE_F32 && n->type != OB_TYPE_F16 && n->type != OB_TYPE_BF16 && n->type != OB_TYPE_Q8_0)
            return false;
        if (!row_aligned(a->type, a->ne[0]) || !row_aligned(n->type, n->ne[0])) return false;
        /* Block sources decode whole 32-element chunks; a Q8_0 destination writes them. */
        return (is_plain(a->type) && n->type != OB_TYPE_Q8_0) || ob_nelements(n) % 32 == 0;
    default:
        return false;
    }
}

static uint64_t addr(const ob_tensor *t) { return t ? (uint64_t)(uintptr_t)t->data : 0; }
static uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

int64_t ob_vk_next_node(const ob_graph *g, int64_t j) {
    for (j++; j < g->n && (g->nodes[j].op == OB_OP_LEAF || g->nodes[j].op == OB_OP_VIEW); j++) {}
    return j;
}

/* The weight types of both decode paths that read whole blocks a piece at a time:
 * matvec.comp's streaming path and matvec_q8.comp. Both need W and x 16-aligned (Q4_K
 * reads 16-byte words; the others' 2-aligned blocks are found from a 4-aligned row start)
 * and K a whole count of 32-element pieces (block-aligned rows of these types are). */
static bool piece_types_ok(const ob_tensor *w, const ob_tensor *x) {
    ob_type t = w->type;
    if (t != OB_TYPE_Q4_K && t != OB_TYPE_Q6_K && t != OB_TYPE_Q8_0 && t != OB_TYPE_Q1_0 && t != OB_TYPE_TQ2_0)
        return false;
    return addr(w) % 16 == 0 && addr(x) % 16 == 0 && w->ne[0] % 32 == 0;
}
bool ob_vk_matvec_fast_ok(const ob_vk *vk, const ob_tensor *w, const ob_tensor *x) {
    return vk->matvec_fast_rps && piece_types_ok(w, x);
}
static bool matvec_q8_ok(const ob_vk *vk, const ob_tensor *w, const ob_tensor *x) {
    return vk->q8 && piece_types_ok(w, x);
}

/* A device buffer of at least `bytes` in *b. A smaller one may still be named by
 * dispatches recorded but not yet run, so it is retired (freed with the device), not
 * freed; when the retired list is full, OB_ERR_NOMEM (callers then take another path). */
static ob_status scratch_buffer(ob_vk *vk, ob_vk_alloc *b, uint64_t bytes, char *err, size_t err_len) {
    if (b->buf && b->size >= bytes) return OB_OK;
    if (b->buf) {
        if (vk->n_retired == OB_VK_MAX_RETIRED) return ob_fail(err, err_len, OB_ERR_NOMEM, "vulkan: scratch buffer");
        vk->retired[vk->n_retired++] = *b;
        memset(b, 0, sizeof(*b));
    }
    /* room to grow: sizes vary little once loaded */
    return ob_vk_buffer_new(vk, (size_t)(bytes < (1u << 20) ? (1u << 20) : 2 * bytes), false, b, err, err_len);
}

static void q8_sizes(uint64_t K, uint64_t T, uint64_t *qbytes, uint64_t *dbytes) {
    *qbytes = (T * K + 15) / 16 * 16;
    *dbytes = T * K / 32 * 8;
}

/* Weight types whose one-token matmuls read an X16 int8 x (matvec_q8.glsl's X16). */
static bool x16_type(ob_type t) { return t == OB_TYPE_TQ2_0 || t == OB_TYPE_Q6_K; }
/* Can a matmul of weight w read the int8 x at q8_addr as it is (X16 or not)? An X16 x's
 * scales take the bytes of the 32-element form's (a float per 16, not a pair per 32). */
static bool q8_reads_ok(const ob_vk *vk, const ob_tensor *w) { return !vk->q8_x16 || x16_type(w->type); }
/* The type a one-token matmul of weight w on the int8 x at q8_addr dispatches with: its
 * weight type (ob_vk_wtype), | OB_VK_X16 where that x is X16. */
static ob_type q8_wtype(const ob_vk *vk, const ob_tensor *w) {
    return (ob_type)((unsigned)ob_vk_wtype(vk, w) | (vk->q8_x16 ? OB_VK_X16 : 0u));
}

/* A node whose recording also quantizes its output for matvec_q8.comp: an RMS norm on the
 * register path (add: the residual ADD fused before it), or a GLU, of T <= 8 rows of whole
 * 32-element blocks (what a decode matmul's x is); they set q8_src to their output. */
static bool norm_q8_ok(const ob_vk *vk, const ob_tensor *norm, const ob_tensor *add) {
    const ob_tensor *x = norm->src[0];
    uint64_t al = addr(x) | addr(norm->src[1]) | addr(norm);
    if (add) al |= addr(add->src[0]) | addr(add->src[1]);
    return vk->q8_fuse && norm->op == OB_OP_RMS_NORM && x && ob_nrows(x) <= 8 && x->ne[0] % 32 == 0 &&
           x->ne[0] <= 8192 && al % 16 == 0;
}
/* A GLU's kind as act.glsl's glu takes it: the ob_act, or GLU_SWIGLU_OAI for gpt-oss's
 * clamped SwiGLU, whose alpha and limit go with it (f[0] and f[1] of its node). */
#define VK_GLU_SWIGLU_OAI 16u /* act.glsl's GLU_SWIGLU_OAI */
static uint32_t glu_kind(const ob_tensor *glu) {
    return glu->ip[1] == OB_GLU_SWIGLU_OAI ? VK_GLU_SWIGLU_OAI : (uint32_t)glu->ip[0];
}
static bool glu_q8_ok(const ob_vk *vk, const ob_tensor *glu) {
    const ob_tensor *a = glu->src[0], *b = glu->src[1];
    return vk->q8_fuse && glu->op == OB_OP_GLU && a && b && ob_nrows(glu) <= 8 && glu->ne[0] % 32 == 0 &&
           ob_nelements(a) == ob_nelements(glu) && ob_nelements(b) == ob_nelements(glu) &&
           (addr(a) | addr(b) | addr(glu)) % 16 == 0;
}

/* Workgroups per (token, head) of attention: 1 once there are enough (token, head) pairs
 * to fill the device; else one per attn_cells cells a sequence can hold, up to
 * attn_splits. */
static uint64_t attn_splits(const ob_vk *vk, uint64_t pairs, uint64_t cps) {
    /* batch-invariant: one workgroup walks a (token, head)'s cells, whatever the pairs */
    if (vk->attn_splits <= 1 || pairs >= 512 || vk->det) return 1;
    uint64_t s = cdiv(cps, vk->attn_cells);
    return s < vk->attn_splits ? s : vk->attn_splits;
}

/* attn_dec.comp's plan for an ATTENTION, where it applies: causal, T <= 8 tokens, head_dim
 * a multiple of 8 in 32..256 (of 32 for Q8_0), K and V caches of one type (F32, F16 or
 * Q8_0) at 16-byte aligned addresses. A workgroup per (token, kv head, group of *gw <= 4
 * of its G query heads, split); *cpi (8) cells per invocation per chunk, *splits (S) chunks
 * apart. S > 1 needs the last-split merge. */
static bool attn_dec_plan(const ob_vk *vk, const ob_tensor *n, uint32_t *cpi, uint32_t *gw, uint64_t *splits) {
    const ob_tensor *q = n->src[0], *kc = n->src[1], *vc = n->src[2];
    if (!vk->attn_dec || n->op != OB_OP_ATTENTION || !q || !kc || !vc || n->ip[3] == 0 || n->ip[1] <= 0) return false;
    const int64_t hd = q->ne[0], H = q->ne[1], T = q->ne[2] * q->ne[3], n_kv = n->ip[1];
    /* batch-invariant: any T, in chunks of tokens whose tickets fit (the header) */
    if ((T > 8 && !vk->det) || H % n_kv != 0 || H > 65535 || hd % 8 != 0 || hd < 32 || hd > 256 ||
        kc->type != vc->type || vk->info.shared_bytes < 24 * 1024)
        return false;
    /* values read a chunk of 8 at a time, rows of whole chunks (Q8_0: blocks, ob_op_valid) */
    if (attn_dv(n) % 8 != 0 || attn_sv(n) % 8 != 0 || attn_dv(n) > hd) return false;
    if (kc->type != OB_TYPE_F32 && kc->type != OB_TYPE_F16 && !(kc->type == OB_TYPE_Q8_0 && hd % 32 == 0)) return false;
    if (kc->type != OB_TYPE_Q8_0 && (addr(kc) | addr(vc)) % 16 != 0) return false;
    const uint64_t G = (uint64_t)(H / n_kv), ncl = 128 / (uint64_t)(hd / 8);
    /* heads per workgroup: attn_gw, or the one or two there are */
    *gw = G == 1 ? 1 : G == 2 && vk->attn_gw > 2 ? 2 : vk->attn_gw;
    if ((uint64_t)(vk->det ? 1 : T) * (uint64_t)n_kv * cdiv(G, *gw) > OB_VK_TICKET_BYTES / 4) return false;
    *cpi = 8; /* the shader's CPI */
    uint64_t S = cdiv((uint64_t)n->ip[0], *cpi * ncl);
    if (S > vk->attn_splits) S = vk->attn_splits;
    if (S > 1 && !vk->attn_last) return false;
    *splits = S < 1 ? 1 : S;
    return true;
}

/* An ATTENTION of T <= 8 tokens in one workgroup per (token, head) (no split), or on
 * attn_dec.comp (any split), and head outputs of whole 32-element blocks: the workgroup
 * that makes a head's output quantizes it itself. */
static bool attn_q8_ok(const ob_vk *vk, const ob_tensor *n) {
    const ob_tensor *q = n->src[0];
    if (!vk->q8_fuse || !vk->attn_q8 || n->op != OB_OP_ATTENTION || !q || ob_nrows(n) > 8 || attn_dv(n) % 32 != 0)
        return false;
    uint32_t cpi, gw;
    uint64_t S;
    if (attn_dec_plan(vk, n, &cpi, &gw, &S)) return true;
    const uint64_t T = (uint64_t)(q->ne[2] * q->ne[3]), H = (uint64_t)q->ne[1];
    return attn_splits(vk, T * H, (uint64_t)n->ip[0]) == 1;
}

ob_vk_range ob_vk_q8_out(ob_vk *vk, const ob_tensor *n, const ob_tensor *add) {
    ob_vk_range r = {0, 0, false};
    vk->q8_next = r;
    /* batch-invariant: only the quantizer writes int8 x (these producers take T <= 8) */
    if (vk->det) return r;
    if (!norm_q8_ok(vk, n, add) && !glu_q8_ok(vk, n) && !attn_q8_ok(vk, n)) return r;
    uint64_t qb, db;
    q8_sizes((uint64_t)n->ne[0], (uint64_t)ob_nrows(n), &qb, &db);
    char err[128];
    if (scratch_buffer(vk, &vk->q8_buf, qb + db, err, sizeof(err)) != OB_OK) return r;
    r.lo = vk->q8_buf.addr;
    r.hi = r.lo + qb + db;
    vk->q8_next = r;
    return r;
}

/* Records the quantization of n elements (T rows) at pc->a into the int8 buffer, its other
 * push constants set (quant_x.comp's layout): one invocation per 4 elements where the
 * device has shuffles (quant_x4.comp), else one per 32. */
static ob_status dispatch_quant(ob_vk *vk, ob_vk_pc *pc, uint64_t n, char *err, size_t err_len) {
    const bool x4 = vk->q8_fuse;
    pc->u[1] = (uint32_t)(x4 ? n / 4 : n / 32);
    return ob_vk_dispatch(vk, x4 ? OB_VK_SH_QUANT_X4 : OB_VK_SH_QUANT_X, OB_TYPE_F32, pc, cdiv(pc->u[1], 64), err, err_len);
}

/* A scratch buffer (attn_part) of at least `bytes` after its
 * tickets, which are zeroed where the buffer is new: in the command buffer being recorded
 * (the next dispatch then waits for the fill), or by a submission of its own when none is
 * (a graph being listed). Either way the hazard ranges stand: callers record a node whose
 * own ranges are already in them. (It once set hz_all, which the node's next hazard check
 * took as a barrier that cleared every range, the node's writes with them, so the node
 * after it could run beside it: on the H200 a matmul read the decode attention's int8
 * output before it was written, on a backend's first graph.) */
static ob_status ticket_scratch(ob_vk *vk, ob_vk_alloc *b, uint64_t bytes, char *err, size_t err_len) {
    const VkBuffer before = b->buf;
    ob_status st = scratch_buffer(vk, b, OB_VK_TICKET_BYTES + bytes, err, err_len);
    if (st || b->buf == before) return st;
    const bool was = vk->recording, hz_all = vk->hz_all;
    st = ob_vk_begin(vk, err, err_len); /* sets hz_all when it begins */
    if (st) return st;
    vkCmdFillBuffer(vk->cmd, b->buf, 0, OB_VK_TICKET_BYTES, 0);
    if (was) {
        vk->need_barrier = true;
        return OB_OK;
    }
    st = ob_vk_submit_wait(vk, err, err_len);
    vk->hz_all = hz_all;
    return st;
}

/* After a dispatch that wrote the int8 form of node n's output at qx (q8_buf or q8_buf2):
 * the next matmuls of n read it there. */
static void q8_written(ob_vk *vk, const ob_tensor *n, uint64_t qx) {
    vk->q8_addr = qx;
    vk->q8_x16 = false;
    vk->q8_src = addr(n);
    vk->q8_end = addr(n) + (uint64_t)ob_nelements(n) * 4;
    vk->q8_K = (uint32_t)n->ne[0];
    vk->q8_T = (uint32_t)ob_nrows(n);
}

/* Norm push constants for its int8 output, if ob_vk_q8_out gave it one. */
static ob_vk_shader norm_q8_pc(ob_vk *vk, const ob_tensor *norm, ob_vk_pc *pc) {
    if (vk->q8_next.hi == vk->q8_next.lo || !pc->u[5]) return OB_VK_SH_NORM;
    uint64_t qb, db;
    q8_sizes((uint64_t)norm->ne[0], (uint64_t)ob_nrows(norm), &qb, &db);
    pc->c = vk->q8_next.lo;
    pc->u[6] = 1;
    pc->u[7] = (uint32_t)qb;
    return OB_VK_SH_NORM_Q8;
}

/* Subgroups per 128-invocation workgroup of matvec_q8.comp. */
static uint32_t q8_sgs(const ob_vk *vk) { return vk->info.subgroup >= 128 ? 1 : 128 / vk->info.subgroup; }

/* The one-token pipeline for N rows of type t and its rows per subgroup: up to q8_rows1
 * (unset: 4, except Q8_0's 8: 4 beat 8 and 2, bench/NOTES-vulkan-3-11.md: Session 11, and
 * NOTES-vulkan-12-16.md: Session 13, rows per subgroup), fewer while that leaves under
 * q8_min_wg workgroups. */
static ob_vk_shader one_token_rows(const ob_vk *vk, ob_type t, uint64_t N, uint32_t *rps_out) {
    uint32_t rps = vk->q8_rows1;
    if (vk->q8_rows1_auto && t != OB_TYPE_Q8_0 && rps > 4) rps = 4;
    /* Q6_K: at most q6k_rows1 (4 unless set): with two units a lane 2 rows had beaten 4
     * (bench/NOTES.md: Session 17), with one (matvec_q8.glsl's CH) 4 beat 2 (Session 18,
     * kept: Q6_K at up to 4 rows a subgroup again). */
    if (t == OB_TYPE_Q6_K && vk->q6k_rows1 && rps > vk->q6k_rows1) rps = vk->q6k_rows1;
    /* unset: TQ2_0 keeps its rows a subgroup down to 64 workgroups (qwen3-8b's k and v then
     * take q's 4 rows and pipeline; bench/NOTES.md: Session 21, and NOTES-vulkan-12-16.md:
     * Session 16, where 128 had beaten 256); Q4_K_M and Q1_0 keep 256 */
    const uint32_t mw = vk->q8_min_wg_auto && t == OB_TYPE_TQ2_0 ? 64u : vk->q8_min_wg;
    while (rps > 1 && N < (uint64_t)q8_sgs(vk) * rps * mw) rps /= 2;
    *rps_out = rps;
    return rps >= 8 ? OB_VK_SH_MATVEC_Q8_1 : rps == 4 ? OB_VK_SH_MATVEC_Q8_1R4 : rps == 2 ? OB_VK_SH_MATVEC_Q8_1R2
                                                                                          : OB_VK_SH_MATVEC_Q8_1R1;
}
/* The same rows per subgroup on the prenorm consumer (base OB_VK_SH_MATVEC_Q8_PNC). */
static ob_vk_shader pnc_rows(ob_vk_shader base, uint32_t rps) {
    return (ob_vk_shader)(base + (rps >= 8 ? 0 : rps == 4 ? 1 : rps == 2 ? 2 : 3));
}

/* MATMUL of T <= 8 tokens on int8 activations: x is quantized into q8_buf (unless the
 * last quantized x is this one, unchanged), then matvec_q8.comp reads it. */
static ob_status record_matvec_q8(ob_vk *vk, const ob_tensor *n, ob_vk_pc *pc, bool *taken, char *err, size_t err_len) {
    const ob_tensor *w = n->src[0], *x = n->src[1];
    const uint32_t K = (uint32_t)w->ne[0], N = (uint32_t)w->ne[1], T = (uint32_t)ob_nrows(x);
    uint64_t qbytes, dbytes;
    q8_sizes(K, T, &qbytes, &dbytes);
    const uint64_t xlo = addr(x), xhi = xlo + (uint64_t)T * K * 4;
    /* a prenorm's consumer: x, the norm's output, was never written; its int8 form (without
     * r) and the producer's sums of squares are in pn_buf */
    const bool pn = vk->pn_src && vk->pn_src == xlo && vk->pn_K == K && T == 1;
    const bool fresh = !pn && (vk->q8_src != xlo || vk->q8_K != K || vk->q8_T != T || !q8_reads_ok(vk, w));
    /* no room for x's int8 form (the retired list is full): the f32 matvec instead */
    char e2[128];
    *taken = !fresh || scratch_buffer(vk, &vk->q8_buf, qbytes + dbytes, e2, sizeof(e2)) == OB_OK;
    /* (batch-invariant: the f32 matvec would round otherwise, so the step fails instead) */
    if (!*taken) return vk->det ? ob_fail(err, err_len, OB_ERR_NOMEM, "vulkan: %s: %s", n->name, e2) : OB_OK;
    if (fresh) {
        ob_vk_pc q;
        memset(&q, 0, sizeof(q));
        q.a = xlo;
        q.o = vk->q8_buf.addr;
        q.u[0] = K;
        q.u[2] = (uint32_t)qbytes;
        ob_vk_range rd = {xlo, xhi, false}, wr = {q.o, q.o + qbytes + dbytes, false};
        ob_vk_hz(vk, &rd, 1, &wr, 1);
        ob_status st = dispatch_quant(vk, &q, (uint64_t)T * K, err, err_len);
        if (st) return st;
        q8_written(vk, x, vk->q8_buf.addr);
    }
    /* qx was written since the last barrier (or not): the ranges decide. A fresh qx was
     * written just now, so that barrier comes and clears the node's own ranges (added by
     * the graph's hazard check): they go in again. A reused one only adds its read; putting
     * the node's output in again would meet itself and fence q/k/v (gate/up) apart. */
    const uint64_t q0 = pn ? vk->pn_q8 : vk->q8_addr;
    /* an X16 x (not a prenorm's): its own pipelines, never staged */
    const bool x16 = !pn && vk->q8_x16;
    ob_vk_range rd[2] = {{q0, q0 + qbytes + dbytes, false}, {addr(w), addr(w) + ob_nbytes(w), false}};
    ob_vk_range wr = {addr(n), addr(n) + ob_nbytes(n), false};
    if (pn) rd[1] = (ob_vk_range){vk->pn_ss, vk->pn_ss + (uint64_t)vk->pn_nss * 4, false};
    if (fresh) ob_vk_hz(vk, rd, 2, &wr, 1);
    else ob_vk_hz(vk, rd, pn ? 2 : 1, NULL, 0);
    pc->b = q0;
    pc->c = q0 + qbytes;
    pc->e = 0;
    /* batch-invariant: every T on the multi-token pipeline's per-row path (DET) */
    const bool one = T == 1 && vk->q8_rows1 > 0 && !vk->det;
    uint32_t rps;
    ob_vk_shader sh = one                    ? one_token_rows(vk, w->type, N, &rps)
                      : T == 1 && !vk->det ? OB_VK_SH_MATVEC_Q8_1
                                           : OB_VK_SH_MATVEC_Q8;
    if (pn) {
        if (!one) return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "vulkan: %s: a prenorm consumer off its path", n->name);
        sh = pnc_rows(OB_VK_SH_MATVEC_Q8_PNC, rps);
        pc->e = vk->pn_ss;
        pc->u[8] = vk->pn_nss;
        pc->f[0] = vk->pn_eps;
    }
    if (!one) {
        /* rows per subgroup: up to q8_rows, fewer while that leaves under q8_min_wg workgroups */
        rps = vk->q8_rows;
        while (rps > 1 && (uint64_t)N < (uint64_t)q8_sgs(vk) * rps * vk->q8_min_wg) rps /= 2;
    }
    pc->u[4] = q8_sgs(vk) * rps;
    pc->u[6] = one;
    pc->u[5] = vk->q8_stage && !x16 && !vk->det && (uint64_t)T * K <= 768 * 16;
    return ob_vk_dispatch(vk, sh, pn ? ob_vk_wtype(vk, w) : q8_wtype(vk, w), pc, cdiv(N, pc->u[4]), err, err_len);
}

/* The prenorm's two addresses (matvec_q8.glsl's tail_g, tail_h), as bits in f[1..3] and u[9]. */
static void pn_addr_pc(ob_vk_pc *pc, uint64_t g, uint64_t h) {
    const uint32_t w[3] = {(uint32_t)g, (uint32_t)(g >> 32), (uint32_t)(h >> 32)};
    memcpy(&pc->f[1], w, sizeof(w));
    pc->u[9] = (uint32_t)h;
}

bool ob_vk_fusable_matmul_add(ob_vk *vk, const ob_tensor *mm, const ob_tensor *add, const ob_tensor *norm,
                              int64_t add_index) {
    if (!vk->res_fuse || !vk->q8_rows1 || vk->det || mm->op != OB_OP_MATMUL || add->op != OB_OP_ADD ||
        norm->op != OB_OP_RMS_NORM || norm->src[0] != add || (add->src[0] == mm) == (add->src[1] == mm) ||
        mm->last_use != add_index)
        return false;
    const ob_tensor *w = mm->src[0], *x = mm->src[1], *res = add->src[0] == mm ? add->src[1] : add->src[0];
    const int64_t N = w->ne[1];
    /* one token on an int8 x a producer already wrote; the norm's row spread over N / 256
     * workgroups of 64 vec4s (n / 4 a multiple of 8 per workgroup), on its register path */
    return ob_vk_supports_node(vk, mm) && ob_vk_supports_node(vk, add) && ob_vk_supports_node(vk, norm) && ob_nrows(x) == 1 &&
           vk->pn_src != addr(x) &&
           matvec_q8_ok(vk, w, x) && vk->q8_src == addr(x) && vk->q8_K == (uint32_t)x->ne[0] && vk->q8_T == 1 &&
           q8_reads_ok(vk, w) && is_f32(res) && ob_nelements(res) == N && ob_nelements(add) == N && N % 512 == 0 && N <= 8192 &&
           (addr(res) | addr(add) | addr(norm) | addr(norm->src[1])) % 16 == 0;
}

/* The one-token matmul + residual ADD's push constants (matvec_q8.glsl, u[7] 1): W w, the
 * int8 x at q0 (its dx qb bytes on), the residual, the sum into add, the sums of squares
 * to ss, `rows` rows a workgroup. */
static void matmul_add_pc(ob_vk_pc *pc, const ob_tensor *w, const ob_tensor *res, const ob_tensor *add, uint64_t q0,
                          uint64_t qb, uint64_t ss, uint32_t rows) {
    memset(pc, 0, sizeof(*pc));
    pc->a = addr(w);
    pc->b = q0;
    pc->c = q0 + qb;
    pc->d = addr(res);
    pc->e = ss;
    pc->o = addr(add);
    pc->u[0] = (uint32_t)w->ne[0];
    pc->u[1] = (uint32_t)w->ne[1];
    pc->u[2] = 1;
    pc->u[3] = (uint32_t)ob_row_size(w->type, w->ne[0]);
    pc->u[4] = rows;
    pc->u[6] = 1;
    pc->u[7] = 1;
}

ob_status ob_vk_record_matmul_add(ob_vk *vk, ob_tensor *mm, ob_tensor *add, char *err, size_t err_len) {
    const ob_tensor *w = mm->src[0], *res = add->src[0] == mm ? add->src[1] : add->src[0];
    const uint32_t K = (uint32_t)w->ne[0], N = (uint32_t)w->ne[1];
    uint32_t rps;
    const ob_vk_shader sh = one_token_rows(vk, w->type, N, &rps);
    const uint32_t np = (uint32_t)cdiv(N, rps);
    uint64_t qb, db;
    q8_sizes(K, 1, &qb, &db);
    ob_status st = scratch_buffer(vk, &vk->ss_buf, (uint64_t)np * 4, err, err_len);
    if (st) return st;
    /* reads the int8 x, the weights and the residual; writes the sum (the matmul's own
     * output is never written: the ADD was its one reader) and the partial sums */
    const uint64_t q0 = vk->q8_addr, ss = vk->ss_buf.addr;
    ob_vk_range rd[3] = {{q0, q0 + qb + db, false}, {addr(w), addr(w) + ob_nbytes(w), false},
                         {addr(res), addr(res) + ob_nbytes(res), false}};
    ob_vk_range wr[2] = {{addr(add), addr(add) + ob_nbytes(add), false}, {ss, ss + (uint64_t)np * 4, false}};
    ob_vk_hz(vk, rd, 3, wr, 2);
    ob_vk_pc pc;
    matmul_add_pc(&pc, w, res, add, q0, qb, ss, q8_sgs(vk) * rps);
    st = ob_vk_dispatch(vk, sh, q8_wtype(vk, w), &pc, cdiv(N, pc.u[4]), err, err_len);
    if (st) return st;
    vk->ss_src = addr(add);
    vk->ss_n = np;
    return OB_OK;
}

/* Every reader of t (node t_index; at least one) a one-token int8 matmul of t: MATMUL with
 * t as its x, on record_matvec_q8's path; x16: on TQ2_0 or Q6_K weights (they read an X16
 * int8 x as it is). */
static bool int8_matmul_readers(const ob_vk *vk, const ob_graph *g, const ob_tensor *t, int64_t t_index, bool x16) {
    int readers = 0;
    for (int64_t j = t_index + 1; j <= t->last_use && j < g->n; j++) {
        const ob_tensor *r = &g->nodes[j], *w = r->src[0];
        bool reads = false;
        for (int s = 0; s < OB_MAX_SRC; s++) reads |= r->src[s] == t;
        if (!reads) continue;
        if (r->op != OB_OP_MATMUL || r->src[1] != t || !w || w == t || !ob_vk_supports_node(vk, r) || !vk->q8_rows1 ||
            !matvec_q8_ok(vk, w, t) || w->ne[0] != t->ne[0] || (x16 && !x16_type(w->type)))
            return false;
        readers++;
    }
    return readers > 0;
}

/* Rows per workgroup of the prenorm producer (256 invocations, 4 rows a subgroup) and of
 * the prenorm gate/up/GLU consumer (512 invocations, 2 gate and 2 up rows a subgroup): the
 * same 1024 / subgroup rows. */
static uint32_t pn_rows(const ob_vk *vk) { return vk->info.subgroup > 64 ? 0 : 256 / vk->info.subgroup * 4; }

bool ob_vk_prenorm_ok(ob_vk *vk, const ob_graph *g, const ob_tensor *add, const ob_tensor *norm, int64_t norm_index) {
    const ob_tensor *nw = norm->src[1];
    const int64_t N = add->ne[0];
    const uint32_t rw = pn_rows(vk);
    /* the last prenorm's readers all recorded (its int8 x is in the one pn_buf) */
    if (vk->pn_src && vk->pn_last >= norm_index) return false;
    if (!vk->prenorm || vk->no_matvec || vk->det || norm->op != OB_OP_RMS_NORM || norm->src[0] != add ||
        ob_nrows(norm) != 1 || !is_f32(norm) || norm->ne[0] != N || (nw && (!is_f32(nw) || ob_nelements(nw) != N)) ||
        rw == 0 || rw % 32 != 0 || N % rw != 0)
        return false;
    /* every reader of the norm a one-token int8 matmul (record_matvec_q8's path), none of
     * it fused otherwise (they check pn_src) */
    return int8_matmul_readers(vk, g, norm, norm_index, false);
}

ob_status ob_vk_record_matmul_add_pn(ob_vk *vk, ob_tensor *mm, ob_tensor *add, ob_tensor *norm, char *err,
                                     size_t err_len) {
    const ob_tensor *w = mm->src[0], *res = add->src[0] == mm ? add->src[1] : add->src[0], *nw = norm->src[1];
    const uint32_t K = (uint32_t)w->ne[0], N = (uint32_t)w->ne[1], rw = pn_rows(vk), nwg = N / rw;
    uint64_t qb, db, qn, dn;
    q8_sizes(K, 1, &qb, &db);
    q8_sizes(N, 1, &qn, &dn);
    ob_status st = scratch_buffer(vk, &vk->pn_buf, qn + dn + (uint64_t)nwg * 4, err, err_len);
    if (st) return st;
    /* reads the int8 x, the weights, the residual and the norm's weight; writes the sum
     * (the matmul's own output and the norm's never) and the norm's int8 x and sums */
    const uint64_t q0 = vk->q8_addr, h = vk->pn_buf.addr, ss = h + qn + dn;
    ob_vk_range rd[4] = {{q0, q0 + qb + db, false}, {addr(w), addr(w) + ob_nbytes(w), false},
                         {addr(res), addr(res) + ob_nbytes(res), false}, {0, 0, false}};
    if (nw) rd[3] = (ob_vk_range){addr(nw), addr(nw) + ob_nbytes(nw), false};
    ob_vk_range wr[2] = {{addr(add), addr(add) + ob_nbytes(add), false}, {h, ss + (uint64_t)nwg * 4, false}};
    ob_vk_hz(vk, rd, nw ? 4 : 3, wr, 2);
    ob_vk_pc pc;
    matmul_add_pc(&pc, w, res, add, q0, qb, ss, rw);
    pn_addr_pc(&pc, addr(nw), h);
    st = ob_vk_dispatch(vk, OB_VK_SH_MATVEC_Q8_PNP, q8_wtype(vk, w), &pc, nwg, err, err_len);
    if (st) return st;
    q8_written(vk, norm, h);
    vk->pn_src = addr(norm);
    vk->pn_end = addr(norm) + ob_nbytes(norm);
    vk->pn_q8 = h;
    vk->pn_K = N;
    vk->pn_last = norm->last_use;
    vk->pn_ss = ss;
    vk->pn_nss = nwg;
    vk->pn_eps = norm->fp[0];
    vk->pn_count++;
    return OB_OK;
}

/* What the gate/up/GLU fusion needs: MATMUL gate and up of one x and their GLU (the one
 * reader of both), one token on a prenorm's int8 x, the same weight type and shape, rows
 * in whole 32-row blocks. */
static bool gate_up_fusable(ob_vk *vk, const ob_tensor *gate, const ob_tensor *up, const ob_tensor *glu,
                            int64_t glu_index) {
    if (!vk->q8_fuse || !vk->q8_rows1 || vk->det || gate->op != OB_OP_MATMUL || up->op != OB_OP_MATMUL ||
        glu->op != OB_OP_GLU)
        return false;
    const ob_tensor *wg = gate->src[0], *wu = up->src[0], *x = gate->src[1];
    if (glu->src[0] != gate || glu->src[1] != up || up->src[1] != x || gate->last_use != glu_index ||
        up->last_use != glu_index || !ob_vk_supports_node(vk, gate) || !ob_vk_supports_node(vk, up) || !ob_vk_supports_node(vk, glu))
        return false;
    const bool xq = vk->pn_src == addr(x) && vk->pn_K == (uint32_t)x->ne[0];
    return ob_nrows(x) == 1 && xq && ob_vk_wtype(vk, wg) == ob_vk_wtype(vk, wu) && wg->ne[0] == wu->ne[0] &&
           wg->ne[1] == wu->ne[1] &&
           matvec_q8_ok(vk, wg, x) && matvec_q8_ok(vk, wu, x) && wg->ne[1] % 32 == 0;
}

/* The gate/up recorder's hazards (reads: the prenorm's int8 x and sums of squares, both
 * weights; writes: wr) and the push constants of both matmuls' rows on that x. */
static void gate_up_pc(ob_vk *vk, const ob_tensor *wg, const ob_tensor *wu, const ob_tensor *glu,
                       const ob_vk_range *wr, int nwr, ob_vk_pc *pc) {
    const uint32_t K = (uint32_t)wg->ne[0];
    uint64_t qin, din;
    q8_sizes(K, 1, &qin, &din);
    const uint64_t q0 = vk->pn_q8;
    ob_vk_range rd[4] = {{q0, q0 + qin + din, false}, {addr(wg), addr(wg) + ob_nbytes(wg), false},
                         {addr(wu), addr(wu) + ob_nbytes(wu), false},
                         {vk->pn_ss, vk->pn_ss + (uint64_t)vk->pn_nss * 4, false}};
    ob_vk_hz(vk, rd, 4, wr, nwr);
    memset(pc, 0, sizeof(*pc));
    pc->a = addr(wg);
    pc->b = q0;
    pc->c = q0 + qin;
    pc->d = addr(wu);
    pc->u[0] = K;
    pc->u[1] = (uint32_t)wg->ne[1];
    pc->u[2] = 1;
    pc->u[3] = (uint32_t)ob_row_size(wg->type, K);
    pc->u[6] = 1;
    pc->u[8] = glu_kind(glu);
    pc->f[4] = glu->fp[0];
    pc->f[5] = glu->fp[1];
}

/* Rows a workgroup of the X16 gate/up/GLU consumer: 8 subgroups of 2 gate and 2 up rows,
 * whole 16-row blocks of its int8 output. */
#define PNG16_ROWS 16u

/* The prenorm gate/up/GLU consumer (pn 1: OB_VK_SH_MATVEC_Q8_PNG; pn 2: the same at 16 rows
 * a workgroup, its int8 output X16): one dispatch writes the GLU's output and its int8 form
 * into q8_buf2 (the gate and up outputs are never written: the GLU was their one reader). */
ob_status ob_vk_record_gate_up_glu(ob_vk *vk, ob_tensor *gate, ob_tensor *up, ob_tensor *glu, int pn, char *err,
                                   size_t err_len) {
    const ob_tensor *wg = gate->src[0], *wu = up->src[0];
    const uint32_t N = (uint32_t)wg->ne[1];
    const bool x16 = pn == 2;
    uint64_t qout, dout;
    q8_sizes(N, 1, &qout, &dout);
    ob_status st = scratch_buffer(vk, &vk->q8_buf2, qout + dout, err, err_len);
    if (st) return st;
    const uint64_t o2 = vk->q8_buf2.addr;
    ob_vk_range wr[2] = {{addr(glu), addr(glu) + ob_nbytes(glu), false}, {o2, o2 + qout + dout, false}};
    ob_vk_pc pc;
    gate_up_pc(vk, wg, wu, glu, wr, 2, &pc);
    pc.o = o2;
    pc.u[9] = (uint32_t)qout;
    /* e and u[8] hold the prenorm's sums; the GLU's output and the ob_act go in f[1..3] */
    pc.e = vk->pn_ss;
    pc.u[4] = x16 ? PNG16_ROWS : pn_rows(vk);
    pc.u[8] = vk->pn_nss;
    pc.f[0] = vk->pn_eps;
    const uint64_t ga = addr(glu);
    const uint32_t gw[3] = {(uint32_t)ga, (uint32_t)(ga >> 32), glu_kind(glu)};
    memcpy(&pc.f[1], gw, sizeof(gw));
    st = ob_vk_dispatch(vk, OB_VK_SH_MATVEC_Q8_PNG,
                        (ob_type)((unsigned)ob_vk_wtype(vk, wg) | (x16 ? OB_VK_X16 : 0u)), &pc, cdiv(N, pc.u[4]), err,
                        err_len);
    if (st) return st;
    q8_written(vk, glu, o2);
    vk->q8_x16 = x16;
    return OB_OK;
}

/* The 32-row form (1), unset, only for Q1_0 weights: it won there and lost on TQ2_0 and Q4_K
 * (bench/NOTES.md: Session 17). Likely (inferred, not measured): 512 invocations of the
 * wider types' registers leave fewer warps an SM than their 128-invocation gate and up
 * workgroups. The X16 form (2) keeps
 * 8 subgroups a workgroup; unset, TQ2_0 gate/up take it where the GLU's readers can. */
int ob_vk_fusable_gate_up_pn(ob_vk *vk, const ob_graph *g, const ob_tensor *gate, const ob_tensor *up,
                             const ob_tensor *glu, int64_t glu_index) {
    const ob_tensor *wg = gate->src[0];
    if (!vk->pn_glu || !wg || !gate_up_fusable(vk, gate, up, glu, glu_index) || !glu_q8_ok(vk, glu) ||
        ob_nelements(glu) != wg->ne[1] || !is_f32(glu))
        return 0;
    const uint32_t sgs = vk->info.subgroup, rw = pn_rows(vk);
    if (vk->pn_glu16 && (vk->pn_glu16 == 2 || wg->type == OB_TYPE_TQ2_0) && sgs >= 4 && sgs <= 64 &&
        8 * sgs <= vk->info.max_wg && int8_matmul_readers(vk, g, glu, glu_index, true))
        return 2;
    if (vk->pn_glu == 2 && wg->type != OB_TYPE_Q1_0) return 0;
    return rw && rw % 32 == 0 && vk->info.max_wg >= 512 ? 1 : 0;
}

/* Do the bytes of a and b not meet? */
static bool apart(const ob_tensor *a, const ob_tensor *b) {
    return addr(a) + ob_nbytes(a) <= addr(b) || addr(b) + ob_nbytes(b) <= addr(a);
}

/* A fused dispatch may write the second node's output `out` over bytes of the first
 * node's input `in`, which the graph freed after the first node: safe only where every
 * workgroup reads its rows before it writes the same rows (out exactly at in), or where
 * they do not meet. At an offset, one workgroup's output would land on rows another has
 * yet to read (a Gemma 3 norm after its residual ADD met this). */
static bool no_partial_overlap(const ob_tensor *out, const ob_tensor *in) {
    if (!in || !in->data || !out->data) return true;
    return addr(out) == addr(in) || apart(out, in);
}

/* norm.comp's register path: rows of whole vec4s up to its 256 x 4 x 8 elements, every
 * address it touches 16-aligned (absent ones are 0). */
static bool norm_vec_ok(int64_t n, const ob_vk_pc *pc) {
    return n % 4 == 0 && n <= 8192 && ((pc->a | pc->b | pc->c | pc->d | pc->e | pc->o) & 15) == 0;
}

bool ob_vk_fusable_add_norm(const ob_vk *vk, const ob_tensor *add, const ob_tensor *norm) {
    const ob_tensor *x = add->src[0], *y = add->src[1];
    return add->op == OB_OP_ADD && (norm->op == OB_OP_RMS_NORM || norm->op == OB_OP_LAYER_NORM) &&
           norm->src[0] == add && x && y && is_f32(x) && is_f32(y) && is_f32(add) &&
           ob_nelements(x) == ob_nelements(add) && ob_nelements(y) == ob_nelements(add) && ob_vk_supports_node(vk, add) &&
           ob_vk_supports_node(vk, norm) && no_partial_overlap(norm, x) && no_partial_overlap(norm, y);
}

ob_status ob_vk_record_add_norm(ob_vk *vk, ob_tensor *add, ob_tensor *norm, char *err, size_t err_len) {
    ob_vk_pc pc;
    memset(&pc, 0, sizeof(pc));
    const ob_tensor *a = norm->src[0];
    pc.a = addr(add->src[0]);
    pc.d = addr(add->src[1]);
    pc.e = addr(add);
    pc.b = addr(norm->src[1]);
    pc.c = norm->op == OB_OP_LAYER_NORM ? addr(norm->src[2]) : 0;
    pc.o = addr(norm);
    pc.u[0] = (uint32_t)a->ne[0];
    pc.u[1] = norm->op == OB_OP_LAYER_NORM;
    pc.u[2] = norm->src[1] != NULL;
    pc.u[3] = norm->op == OB_OP_LAYER_NORM && norm->src[2] != NULL;
    pc.u[4] = 1;
    pc.u[5] = norm_vec_ok(a->ne[0], &pc);
    pc.f[0] = norm->fp[0];
    const ob_vk_shader sh = norm_q8_pc(vk, norm, &pc);
    ob_status st = ob_vk_dispatch(vk, sh, OB_TYPE_F32, &pc, (uint64_t)ob_nrows(a), err, err_len);
    if (!st && sh == OB_VK_SH_NORM_Q8) q8_written(vk, norm, vk->q8_buf.addr);
    return st;
}

/* An attention that merges its splits itself reads and writes attn_part's partials and
 * tickets. */
static void attn_part_rw(ob_vk *vk) {
    ob_vk_range rw = {vk->attn_part.addr, vk->attn_part.addr + vk->attn_part.size, false};
    ob_vk_hz(vk, &rw, 1, &rw, 1);
}

/* The int8 output of an attention, if ob_vk_q8_out gave it one: its address in u[3] | u[8]
 * << 32 and bit 3 of u[6] (attention.comp and attn_dec.comp alike). */
static bool attn_q8_pc(const ob_vk *vk, ob_vk_pc *pc) {
    if (vk->q8_next.hi <= vk->q8_next.lo) return false;
    pc->u[3] = (uint32_t)vk->q8_next.lo;
    pc->u[8] = (uint32_t)(vk->q8_next.lo >> 32);
    pc->u[6] |= 8u;
    return true;
}

/* attn_dec.comp's (and attn_fold.comp's) splits in u[6] (with the solo threshold) and,
 * with S > 1, the split scratch at u[7] | f[3] << 32. */
static void attn_dec_splits_pc(ob_vk *vk, ob_vk_pc *pc, uint64_t S) {
    pc->u[6] = (uint32_t)S << 8 | (S > 1 ? 4u | vk->attn_solo << 16 : 0u);
    if (S <= 1) return;
    attn_part_rw(vk);
    const uint32_t hi = (uint32_t)(vk->attn_part.addr >> 32);
    pc->u[7] = (uint32_t)vk->attn_part.addr;
    memcpy(&pc->f[3], &hi, sizeof(hi));
}

bool ob_vk_fusable_norm_rope(const ob_vk *vk, const ob_tensor *norm, const ob_tensor *rope, int64_t rope_index) {
    const ob_tensor *x = norm->src[0];
    /* batch-invariant: off (norm_rope.comp sums a head's squares in its own order) */
    return !vk->det && norm->op == OB_OP_RMS_NORM && rope->op == OB_OP_ROPE && rope->src[0] == norm &&
           norm->last_use == rope_index && x && x->ne[0] <= 512 && ob_nelements(rope) == ob_nelements(norm) &&
           rope->ne[0] == x->ne[0] && ob_vk_supports_node(vk, norm) && ob_vk_supports_node(vk, rope);
}
bool ob_vk_norm_rope_out_ok(const ob_tensor *norm, const ob_tensor *rope) { return no_partial_overlap(rope, norm->src[0]); }

/* The rope shaders' ratio base^(-2/n_rot), in double, as a float pair hi + lo. */
static void rope_ratio(float base, int32_t n_rot, float *hi, float *lo) {
    const double r = n_rot > 0 ? pow((double)base, -2.0 / (double)n_rot) : 1.0;
    *hi = (float)r;
    *lo = (float)(r - (double)*hi);
}

bool ob_vk_fusable_rope_store(const ob_vk *vk, const ob_tensor *rope, const ob_tensor *store, int64_t store_index) {
    const ob_tensor *c = store->src[1];
    if (store->op != OB_OP_KV_STORE || store->src[0] != rope || rope->last_use != store_index || !ob_vk_supports_node(vk, store))
        return false;
    /* rows of the rope are (token, head); the cache row holds every head of a token */
    const int64_t hd = rope->ne[0], heads = rope->ne[1];
    return c->ne[0] == hd * heads && ob_nelements(store->src[2]) == ob_nelements(rope) / (hd * heads) &&
           (c->type == OB_TYPE_F32 || c->type == OB_TYPE_F16 || (c->type == OB_TYPE_Q8_0 && hd % 32 == 0));
}

ob_status ob_vk_record_norm_rope(ob_vk *vk, ob_tensor *norm, ob_tensor *rope, ob_tensor *store, char *err,
                                 size_t err_len) {
    ob_vk_pc pc;
    memset(&pc, 0, sizeof(pc));
    const ob_tensor *x = norm->src[0];
    pc.a = addr(x);
    pc.b = addr(norm->src[1]);
    pc.c = addr(rope->src[1]);
    pc.o = addr(rope);
    pc.u[0] = (uint32_t)x->ne[0];
    pc.u[1] = (uint32_t)rope->src[0]->ne[1];
    pc.u[2] = (uint32_t)rope->ip[0];
    pc.u[3] = (uint32_t)rope->ip[1];
    pc.u[4] = norm->src[1] != NULL;
    pc.f[0] = norm->fp[0];
    rope_ratio(rope->fp[0], rope->ip[0], &pc.f[1], &pc.f[3]);
    pc.f[2] = rope->fp[1];
    pc.p = addr(rope->src[2]); /* a..e and f[0..3] are taken */
    pc.f[4] = rope->fp[2];
    if (store) {
        const ob_tensor *c = store->src[1];
        pc.d = addr(c);
        pc.e = addr(store->src[3]);
        pc.u[5] = 1;
        pc.u[6] = (uint32_t)c->type;
        pc.u[7] = (uint32_t)store->ip[0];
        pc.u[8] = (uint32_t)ob_nrows(c);
        pc.u[9] = (uint32_t)ob_row_size(c->type, c->ne[0]);
    }
    return ob_vk_dispatch(vk, OB_VK_SH_NORM_ROPE, OB_TYPE_F32, &pc, (uint64_t)ob_nrows(x), err, err_len);
}

/* ---- the attention fold (attn_fold.comp) ---------------------------------------------- */

/* The signed byte offset from a to b, if it fits 32 bits. */
static bool delta32(uint64_t a, uint64_t b, uint32_t *d) {
    const int64_t v = (int64_t)(b - a);
    if (v < INT32_MIN || v > INT32_MAX) return false;
    *d = (uint32_t)(int32_t)v;
    return true;
}

bool ob_vk_attn_fold_ok(ob_vk *vk, const ob_graph *g, int64_t i, ob_vk_fold *f) {
    memset(f, 0, sizeof(*f));
    /* (its module needs shuffles: vk_device.c makes it only where they exist) */
    if (!vk->attn_fold || !vk->mods[OB_VK_SH_ATTN_FOLD] || !vk->listing || vk->no_fuse || vk->det ||
        vk->fold_n >= OB_VK_FOLD_SLOTS)
        return false;
    int64_t j = i, iqr, ikr, iks;
    ob_tensor *n = &g->nodes[j];
    if (n->op == OB_OP_RMS_NORM) {
        f->qn = n;
        j = ob_vk_next_node(g, j);
    }
    if (j >= g->n || g->nodes[j].op != OB_OP_ROPE) return false;
    f->qr = &g->nodes[iqr = j];
    j = ob_vk_next_node(g, j);
    if (j < g->n && g->nodes[j].op == OB_OP_RMS_NORM) {
        f->kn = &g->nodes[j];
        j = ob_vk_next_node(g, j);
    }
    if (j >= g->n || g->nodes[j].op != OB_OP_ROPE) return false;
    f->kr = &g->nodes[ikr = j];
    j = ob_vk_next_node(g, j);
    if (j >= g->n || g->nodes[j].op != OB_OP_KV_STORE) return false;
    f->ks = &g->nodes[iks = j];
    j = ob_vk_next_node(g, j);
    if (j >= g->n || g->nodes[j].op != OB_OP_KV_STORE) return false;
    f->vs = &g->nodes[j];
    j = ob_vk_next_node(g, j);
    if (j >= g->n || g->nodes[j].op != OB_OP_ATTENTION) return false;
    f->at = &g->nodes[f->end = j];
    const ob_tensor *at = f->at, *qr = f->qr, *kr = f->kr, *ks = f->ks, *vs = f->vs;
    /* each folded output read only by the next folded node */
    if ((f->qn && (qr->src[0] != f->qn || f->qn->last_use != iqr)) ||
        (f->kn && (kr->src[0] != f->kn || f->kn->last_use != ikr)) || at->src[0] != qr || qr->last_use != f->end ||
        ks->src[0] != kr || kr->last_use != iks)
        return false;
    const ob_tensor *rq = f->rq = f->qn ? f->qn->src[0] : qr->src[0], *rk = f->rk = f->kn ? f->kn->src[0] : kr->src[0];
    const ob_tensor *rv = f->rv = vs->src[0], *kc = at->src[1], *vc = at->src[2], *pos = at->src[3], *seq = at->src[4];
    /* one token, the same positions, sequences and caches throughout */
    const int64_t hd = qr->ne[0], n_kv = at->ip[1];
    /* values as wide as the keys, from a V cache of their own (the fold stores both rows) */
    if (attn_dv(at) != hd || vc == kc || vc->ne[0] != kc->ne[0]) return false;
    if (qr->ne[2] * qr->ne[3] != 1 || kr->ne[0] != hd || kr->ne[1] != n_kv || kr->ne[2] * kr->ne[3] != 1 ||
        ob_nelements(rv) != hd * n_kv || hd % 32 != 0 || hd > 256 || ks->src[1] != kc ||
        vs->src[1] != vc || qr->src[1] != pos || kr->src[1] != pos || ks->src[2] != pos || vs->src[2] != pos ||
        ks->src[3] != seq || vs->src[3] != seq || ks->ip[0] != at->ip[0] || vs->ip[0] != at->ip[0])
        return false;
    /* F32 throughout; norm weights of one head's elements */
    const ob_tensor *wq = f->qn ? f->qn->src[1] : NULL, *wk = f->kn ? f->kn->src[1] : NULL;
    if (!is_f32(rq) || !is_f32(rk) || !is_f32(rv) || (wq && (!is_f32(wq) || ob_nelements(wq) != hd)) ||
        (wk && (!is_f32(wk) || ob_nelements(wk) != hd)))
        return false;
    /* the same rope for q and k (one parameter block holds it: factors and mscale too),
     * adjacent pairs or NeoX halves */
    if (qr->ip[0] != kr->ip[0] || qr->ip[1] != kr->ip[1] || qr->fp[0] != kr->fp[0] || qr->fp[1] != kr->fp[1] ||
        qr->fp[2] != kr->fp[2] || !qr->src[2] != !kr->src[2] || addr(qr->src[2]) != addr(kr->src[2]) ||
        (qr->ip[1] != 0 && qr->ip[1] != 2) || qr->ip[0] <= 0 || qr->ip[0] > hd || qr->ip[0] % 2 != 0)
        return false;
    if (at->fp[1] != 0.0f || at->fp[2] != 0.0f) return false;
    const ob_tensor *nodes[] = {f->qn, qr, f->kn, kr, ks, vs, at};
    for (size_t k = 0; k < OB_ARRAY_LEN(nodes); k++)
        if (nodes[k] && !ob_vk_supports_node(vk, nodes[k])) return false;
    uint32_t gw;
    /* Where the one reader of the output is the matmul right after it, on the int8 x the
     * fold writes, the F32 output is never written. Else it is written while other
     * workgroups may still read the raw q, k and v: it must lie apart from k and v, and on
     * q exactly (a q head is read only by the workgroups that write that head's output,
     * before they write it) or apart from it. */
    const int64_t jm = ob_vk_next_node(g, f->end);
    const ob_tensor *mm = jm < g->n ? &g->nodes[jm] : NULL;
    f->q8_only = mm && mm->op == OB_OP_MATMUL && mm->src[1] && addr(mm->src[1]) == addr(at) &&
                 ob_nelements(mm->src[1]) == ob_nelements(at) && at->last_use == jm && !vk->no_matvec &&
                 ob_vk_supports_node(vk, mm) && matvec_q8_ok(vk, mm->src[0], mm->src[1]) && attn_q8_ok(vk, at) &&
                 ob_vk_q8_out(vk, at, NULL).hi > 0;
    if (!f->q8_only && (!no_partial_overlap(at, rq) || !apart(at, rk) || !apart(at, rv))) return false;
    return attn_dec_plan(vk, at, &f->cpi, &gw, &f->S) && gw == 1 && delta32(addr(rq), addr(rk), &f->dk) &&
           delta32(addr(rq), addr(rv), &f->dv);
}

ob_status ob_vk_record_attn_fold(ob_vk *vk, const ob_vk_fold *f, char *err, size_t err_len) {
    const ob_tensor *at = f->at, *qr = f->qr, *kc = at->src[1], *vc = at->src[2], *rq = f->rq, *rk = f->rk, *rv = f->rv;
    if (!vk->fold_par.buf) {
        ob_status st = ob_vk_buffer_new(vk, sizeof(vk->fold_host), false, &vk->fold_par, err, err_len);
        if (st) return st;
    }
    /* reads: the raw q, k, v, positions, sequences, both caches, then the rope's factors and
     * the sinks where there are; writes: the caches (the token's cell), the output and its
     * int8 form */
    const ob_tensor *rds[] = {rq, rk, rv, at->src[3], at->src[4], kc, vc, qr->src[2], at->src[6]};
    ob_vk_range rd[OB_ARRAY_LEN(rds)], wr[4];
    int nrd = 0;
    for (size_t k = 0; k < OB_ARRAY_LEN(rds); k++)
        if (rds[k]) rd[nrd++] = (ob_vk_range){addr(rds[k]), addr(rds[k]) + ob_nbytes(rds[k]), false};
    int nwr = 0;
    wr[nwr++] = rd[5];
    wr[nwr++] = rd[6];
    /* never written with q8_only, but what was there is gone (a prenorm's or int8 x's
     * source that lay there is dead): a dead write */
    wr[nwr++] = (ob_vk_range){addr(at), addr(at) + ob_nbytes(at), f->q8_only};
    const ob_vk_range q8r = ob_vk_q8_out(vk, at, NULL);
    if (q8r.hi > q8r.lo) wr[nwr++] = q8r;
    else if (f->q8_only)
        return ob_fail(err, err_len, OB_ERR_NOMEM, "vulkan: %s: no int8 output for the attention fold", at->name);
    ob_vk_hz(vk, rd, nrd, wr, nwr);

    uint64_t S = f->S;
    const uint64_t hd = (uint64_t)qr->ne[0], H = (uint64_t)qr->ne[1], n_kv = (uint64_t)at->ip[1];
    if (S > 1 && ticket_scratch(vk, &vk->attn_part, H * S * (hd + 2) * 4, err, err_len) != OB_OK) S = 1;
    /* the parameter block */
    const int slot = vk->fold_n++;
    uint32_t *w = vk->fold_host[slot];
    memset(w, 0, sizeof(vk->fold_host[slot]));
    const uint64_t qn = f->qn ? addr(f->qn->src[1]) : 0, kn = f->kn ? addr(f->kn->src[1]) : 0;
    w[0] = (uint32_t)qn;
    w[1] = (uint32_t)(qn >> 32);
    w[2] = (uint32_t)kn;
    w[3] = (uint32_t)(kn >> 32);
    w[4] = (f->qn ? 1u : 0u) | (f->kn ? 2u : 0u);
    w[5] = (uint32_t)qr->ip[0] | (uint32_t)qr->ip[1] << 16;
    const float eq = f->qn ? f->qn->fp[0] : 0.0f, ek = f->kn ? f->kn->fp[0] : 0.0f;
    float rh, rl;
    rope_ratio(qr->fp[0], qr->ip[0], &rh, &rl);
    memcpy(&w[6], &eq, 4);
    memcpy(&w[7], &ek, 4);
    memcpy(&w[8], &rh, 4);
    memcpy(&w[9], &rl, 4);
    memcpy(&w[10], &qr->fp[1], 4);
    w[11] = (uint32_t)ob_nrows(kc);
    w[12] = (uint32_t)at->ip[2];
    const uint64_t ff = addr(qr->src[2]);
    w[13] = (uint32_t)ff;
    w[14] = (uint32_t)(ff >> 32);
    memcpy(&w[15], &qr->fp[2], 4);
    const uint64_t par = vk->fold_par.addr + (uint64_t)slot * sizeof(vk->fold_host[0]);

    ob_vk_pc pc;
    memset(&pc, 0, sizeof(pc));
    pc.a = addr(rq);
    pc.b = addr(kc);
    pc.c = addr(vc);
    pc.d = addr(at->src[3]);
    pc.e = addr(at->src[4]);
    pc.o = addr(at);
    pc.u[0] = (uint32_t)hd;
    pc.u[1] = (uint32_t)H | (uint32_t)n_kv << 16;
    pc.u[2] = 1u | f->cpi << 16 | 1u << 24; /* one token, one query head a workgroup */
    pc.u[4] = (uint32_t)at->ip[0];
    pc.u[5] = f->dk;
    attn_dec_splits_pc(vk, &pc, S);
    pc.u[6] |= f->q8_only ? 16u : 0u;
    pc.u[9] = f->dv;
    const uint32_t plo = (uint32_t)par, phi = (uint32_t)(par >> 32);
    memcpy(&pc.f[1], &plo, 4);
    memcpy(&pc.f[2], &phi, 4);
    pc.f[0] = at->fp[0];
    pc.p = addr(at->src[6]); /* the sinks, or 0 */
    const bool q8 = attn_q8_pc(vk, &pc);
    /* head_dim 128 where a cell's 16 lanes share a subgroup and shuffles exist: the
     * pipeline built for it alone (attn_fold.comp's HD128: dot products by shuffles) */
    const bool hd128 = hd == 128 && vk->info.shuffle && vk->info.subgroup % 16 == 0;
    ob_status st = ob_vk_dispatch(vk, OB_VK_SH_ATTN_FOLD, (ob_type)((unsigned)kc->type | (hd128 ? OB_VK_HD128 : 0u)), &pc,
                                  H * S, err, err_len);
    if (!st && q8) q8_written(vk, at, vk->q8_buf.addr);
    if (!st) vk->fold_count++;
    return st;
}

ob_status ob_vk_fold_upload(ob_vk *vk, char *err, size_t err_len) {
    const size_t bytes = (size_t)vk->fold_n * sizeof(vk->fold_host[0]);
    if (!vk->fold_n || (vk->fold_n <= vk->fold_dev_n && !memcmp(vk->fold_host, vk->fold_dev, bytes))) return OB_OK;
    vk->fold_dev_n = 0;
    /* mapped, or through staging (its own submission: nothing is being recorded now) */
    ob_status st = ob_vk_copy_at(vk, &vk->fold_par, 0, vk->fold_host, bytes, true, err, err_len);
    if (st) return st;
    memcpy(vk->fold_dev, vk->fold_host, bytes);
    vk->fold_dev_n = vk->fold_n;
    return OB_OK;
}

ob_status ob_vk_record_node(ob_vk *vk, ob_tensor *n, char *err, size_t err_len) {
    const ob_tensor *a = n->src[0], *b = n->src[1];
    ob_vk_pc pc;
    memset(&pc, 0, sizeof(pc));
    pc.a = addr(a);
    pc.b = addr(b);
    pc.c = addr(n->src[2]);
    pc.d = addr(n->src[3]);
    pc.e = addr(n->src[4]);
    pc.o = addr(n);
    /* Weight decoders find the IQ lattice tables at e (no such node has a fifth source). */
    if (n->op == OB_OP_GET_ROWS || n->op == OB_OP_MATMUL || n->op == OB_OP_CPY) pc.e = vk->iq_tab;
    uint64_t ne = (uint64_t)ob_nelements(n);
    switch (n->op) {
    case OB_OP_GET_ROWS:
        pc.u[0] = (uint32_t)a->ne[0];
        pc.u[1] = (uint32_t)ob_nelements(b);
        pc.u[2] = (uint32_t)ob_row_size(a->type, a->ne[0]);
        pc.u[3] = (uint32_t)ob_nrows(a);
        return ob_vk_dispatch(vk, OB_VK_SH_GET_ROWS, ob_vk_wtype(vk, a), &pc, cdiv(is_plain(a->type) ? ne : ne / 32, 256), err,
                              err_len);
    case OB_OP_RMS_NORM:
    case OB_OP_LAYER_NORM:
        pc.u[0] = (uint32_t)a->ne[0];
        pc.u[1] = n->op == OB_OP_LAYER_NORM;
        pc.u[2] = n->src[1] != NULL;
        pc.u[3] = n->op == OB_OP_LAYER_NORM && n->src[2] != NULL;
        if (n->op == OB_OP_RMS_NORM) pc.c = 0;
        pc.u[5] = norm_vec_ok(a->ne[0], &pc);
        pc.f[0] = n->fp[0];
        {
            const ob_vk_shader sh = norm_q8_pc(vk, n, &pc);
            uint64_t groups = (uint64_t)ob_nrows(a);
            if (vk->ss_src && vk->ss_src == addr(a) && n->op == OB_OP_RMS_NORM && groups == 1 && pc.u[5] &&
                a->ne[0] % 512 == 0) {
                /* the matmul before wrote partial sums of squares: N / 256 workgroups */
                const uint64_t ss = vk->ss_buf.addr;
                ob_vk_range rd = {ss, ss + (uint64_t)vk->ss_n * 4, false};
                ob_vk_hz(vk, &rd, 1, NULL, 0);
                pc.d = ss;
                pc.u[8] = (uint32_t)(a->ne[0] / 256);
                pc.u[9] = vk->ss_n;
                groups = pc.u[8];
            }
            ob_status st = ob_vk_dispatch(vk, sh, OB_TYPE_F32, &pc, groups, err, err_len);
            if (!st && sh == OB_VK_SH_NORM_Q8) q8_written(vk, n, vk->q8_buf.addr);
            return st;
        }
    case OB_OP_MATMUL: {
        uint64_t N = (uint64_t)a->ne[1], T = (uint64_t)ob_nrows(b);
        pc.u[0] = (uint32_t)a->ne[0];
        pc.u[1] = (uint32_t)N;
        pc.u[2] = (uint32_t)T;
        pc.u[3] = (uint32_t)ob_row_size(a->type, a->ne[0]);
        /* Up to 8 tokens (decode, small batches) W is read once by matvec.comp; beyond, the
         * 64 x 64 output tiles of matmul.comp. Batch-invariant: the
         * matvecs for every T (their DET pipelines), or with ONEBIT_VK_NO_MATVEC=1 the
         * tiled f32 shader for every T (an output's sum runs over k in order, whatever
         * tile holds it). */
        if ((T <= 8 || vk->det) && !vk->no_matvec) {
            const uint64_t K = (uint64_t)a->ne[0];
            if (matvec_q8_ok(vk, a, b)) {
                bool taken;
                ob_status st = record_matvec_q8(vk, n, &pc, &taken, err, err_len);
                if (st || taken) return st;
            }
            if (T == 1 && vk->matvec_splitk && !vk->det && ob_vk_matvec_fast_ok(vk, a, b) && K % 4096 == 0 &&
                K / 4096 <= 3) {
                /* rows per workgroup: ~512 workgroups, 8..64 rows, whole batches of 8 */
                uint64_t rw = (cdiv(N, 512) + 7) / 8 * 8;
                rw = rw < 8 ? 8 : rw > 64 ? 64 : rw;
                pc.u[4] = (uint32_t)rw;
                pc.u[7] = (uint32_t)(K / 4096);
                return ob_vk_dispatch(vk, OB_VK_SH_MATVEC, ob_vk_wtype(vk, a), &pc, cdiv(N, rw), err, err_len);
            }
            if (ob_vk_matvec_fast_ok(vk, a, b)) {
                pc.u[4] = vk->matvec_fast_rows;
                pc.u[6] = vk->matvec_fast_rps;
                return ob_vk_dispatch(vk, OB_VK_SH_MATVEC, ob_vk_wtype(vk, a), &pc, cdiv(N, vk->matvec_fast_rows), err,
                                      err_len);
            }
            pc.u[4] = vk->matvec_rows;
            pc.u[5] = vk->matvec_stage && !vk->det;
            return ob_vk_dispatch(vk, OB_VK_SH_MATVEC, ob_vk_wtype(vk, a), &pc, cdiv(N, vk->matvec_rows), err, err_len);
        }
        return ob_vk_dispatch(vk, OB_VK_SH_MATMUL, ob_vk_wtype(vk, a), &pc, cdiv(N, 64) * cdiv(T, 64), err, err_len);
    }
    case OB_OP_GLU:
        if (vk->q8_next.hi > vk->q8_next.lo) {
            /* the product and its int8 form in one pass (the quantizer's GLU mode) */
            uint64_t qb, db;
            q8_sizes((uint64_t)n->ne[0], (uint64_t)ob_nrows(n), &qb, &db);
            pc.e = addr(n);
            pc.o = vk->q8_next.lo;
            pc.u[0] = (uint32_t)n->ne[0];
            pc.u[2] = (uint32_t)qb;
            pc.u[3] = 1;
            pc.u[4] = glu_kind(n);
            pc.f[0] = n->fp[0];
            pc.f[1] = n->fp[1];
            ob_status st = dispatch_quant(vk, &pc, ne, err, err_len);
            if (!st) q8_written(vk, n, vk->q8_buf.addr);
            return st;
        }
        /* fall through */
    case OB_OP_ADD:
    case OB_OP_MUL:
    case OB_OP_SCALE:
    case OB_OP_ACT:
        pc.u[0] = (uint32_t)ne;
        pc.u[1] = n->op == OB_OP_ADD ? 0 : n->op == OB_OP_MUL ? 1 : n->op == OB_OP_SCALE ? 2 : n->op == OB_OP_ACT ? 3 : 4;
        pc.u[2] = b && n->op != OB_OP_GLU ? (uint32_t)ob_nelements(b) : 1;
        pc.u[3] = n->op == OB_OP_GLU ? glu_kind(n) : (uint32_t)n->ip[0];
        pc.f[0] = n->fp[0];
        pc.f[1] = n->fp[1]; /* GLU_SWIGLU_OAI: alpha in f[0], the limit here */
        return ob_vk_dispatch(vk, OB_VK_SH_ELEMENTWISE, OB_TYPE_F32, &pc, cdiv(ne, 256), err, err_len);
    case OB_OP_SOFTMAX:
        pc.u[0] = (uint32_t)a->ne[0];
        return ob_vk_dispatch(vk, OB_VK_SH_SOFTMAX, OB_TYPE_F32, &pc, (uint64_t)ob_nrows(a), err, err_len);
    case OB_OP_ROPE:
        pc.u[0] = (uint32_t)a->ne[0];
        pc.u[1] = (uint32_t)a->ne[1];
        pc.u[2] = (uint32_t)n->ip[0];
        pc.u[3] = (uint32_t)n->ip[1];
        pc.u[4] = (uint32_t)ob_nrows(a);
        rope_ratio(n->fp[0], n->ip[0], &pc.f[0], &pc.f[2]);
        pc.f[1] = n->fp[1];
        pc.p = addr(n->src[2]); /* as norm_rope.comp takes them */
        pc.f[4] = n->fp[2];
        return ob_vk_dispatch(vk, OB_VK_SH_ROPE, OB_TYPE_F32, &pc, cdiv(ne, 256), err, err_len);
    case OB_OP_KV_STORE: {
        int64_t row = b->ne[0], T = ob_nelements(a) / row;
        pc.u[0] = (uint32_t)row;
        pc.u[1] = (uint32_t)T;
        pc.u[2] = (uint32_t)b->type;
        pc.u[3] = (uint32_t)n->ip[0];
        pc.u[4] = (uint32_t)ob_nrows(b);
        pc.u[5] = (uint32_t)ob_row_size(b->type, row);
        pc.u[7] = (uint32_t)ob_type_traits_get(b->type)->type_size; /* a block's bytes (kvq.glsl) */
        /* F32/F16 caches: 4 elements per invocation where the row and addresses allow */
        pc.u[6] = (b->type == OB_TYPE_F32 || b->type == OB_TYPE_F16) && row % 4 == 0 && pc.a % 16 == 0 &&
                  pc.b % 16 == 0;
        return ob_vk_dispatch(vk, OB_VK_SH_KV_STORE, OB_TYPE_F32, &pc,
                              cdiv((uint64_t)T * (pc.u[6] ? (uint64_t)row / 4 : cdiv((uint64_t)row, 32)), 64), err, err_len);
    }
    case OB_OP_ATTENTION: {
        const ob_tensor *kc = n->src[1], *vc = n->src[2];
        uint64_t H = (uint64_t)a->ne[1], T = (uint64_t)(a->ne[2] * a->ne[3]);
        const uint64_t dv = (uint64_t)attn_dv(n);
        const uint32_t sv = (uint32_t)attn_sv(n);
        pc.u[0] = (uint32_t)a->ne[0] | (uint32_t)dv << 16;
        memcpy(&pc.f[4], &sv, sizeof(sv)); /* the shaders read its bits */
        pc.u[1] = (uint32_t)H | (uint32_t)n->ip[1] << 16;
        pc.u[2] = (uint32_t)T;
        pc.u[4] = (uint32_t)n->ip[0];
        pc.u[5] = (uint32_t)n->ip[2];
        pc.u[6] = n->ip[3] != 0;
        /* the cache types, and their blocks' bytes (attention.comp's kv_at) */
        pc.u[7] = (uint32_t)kc->type | (uint32_t)vc->type << 8 | (uint32_t)ob_type_traits_get(kc->type)->type_size << 16 |
                  (uint32_t)ob_type_traits_get(vc->type)->type_size << 24;
        pc.u[9] = (uint32_t)ob_nrows(kc);
        pc.f[0] = n->fp[0];
        pc.f[1] = n->fp[1];
        pc.f[2] = n->fp[2];
        pc.p = addr(n->src[6]); /* the sinks, or 0 */
        uint32_t cpi, gw;
        uint64_t S, hd = (uint64_t)a->ne[0];
        if (attn_dec_plan(vk, n, &cpi, &gw, &S)) {
            const uint64_t n_kv = (uint64_t)n->ip[1], ng = cdiv(H / n_kv, gw);
            /* tokens a dispatch: all (T <= 8), or batch-invariant, as many as have tickets
             * (a token's workgroups and numbers are the same in any chunk) */
            uint64_t tc = T;
            if (vk->det) {
                const uint64_t cap = S > 1 ? OB_VK_TICKET_BYTES / 4 / (n_kv * ng) : 65535;
                tc = T < cap ? T : cap;
            }
            if (S > 1 && ticket_scratch(vk, &vk->attn_part, tc * H * S * (dv + 2) * 4, err, err_len) != OB_OK) {
                if (vk->det) return ob_fail(err, err_len, OB_ERR_NOMEM, "vulkan: %s: no split scratch", n->name);
                S = 1;
            }
            attn_dec_splits_pc(vk, &pc, S);
            const bool q8 = attn_q8_pc(vk, &pc);
            const ob_vk_shader sh = gw == 4 ? OB_VK_SH_ATTN_DEC : gw == 2 ? OB_VK_SH_ATTN_DEC_G2 : OB_VK_SH_ATTN_DEC_G1;
            ob_status st = OB_OK;
            for (uint64_t t0 = 0; t0 < T && !st; t0 += tc) {
                const uint64_t nt = T - t0 < tc ? T - t0 : tc;
                pc.a = addr(a) + t0 * H * hd * 4;
                pc.d = addr(n->src[3]) + t0 * 4;
                pc.e = addr(n->src[4]) + t0 * 4;
                pc.o = addr(n) + t0 * H * dv * 4;
                pc.u[2] = (uint32_t)nt | cpi << 16 | gw << 24;
                /* the chunk before drew the same tickets and wrote the same partials */
                if (t0 > 0 && S > 1) vk->need_barrier = true;
                st = ob_vk_dispatch(vk, sh, kc->type, &pc, nt * n_kv * ng * S, err, err_len);
            }
            if (!st && q8) q8_written(vk, n, vk->q8_buf.addr);
            return st;
        }
        S = attn_splits(vk, T * H, (uint64_t)n->ip[0]);
        if (S > 1 && ticket_scratch(vk, &vk->attn_part, T * H * S * (dv + 2) * 4, err, err_len) != OB_OK) S = 1;
        if (S <= 1) {
            /* and its int8 form where ob_vk_q8_out chose it (only without splits here) */
            const bool q8 = attn_q8_pc(vk, &pc);
            ob_status st = ob_vk_dispatch(vk, OB_VK_SH_ATTENTION, OB_TYPE_F32, &pc, T * H, err, err_len);
            if (!st && q8) q8_written(vk, n, vk->q8_buf.addr);
            return st;
        }
        pc.u[3] = (uint32_t)vk->attn_part.addr;
        pc.u[8] = (uint32_t)(vk->attn_part.addr >> 32);
        if (vk->attn_last && T * H <= OB_VK_TICKET_BYTES / 4) {
            /* one dispatch: the partials, merged by whichever split of a (token, head)
             * finishes last */
            attn_part_rw(vk);
            pc.u[6] |= (uint32_t)S << 8 | 4u;
            return ob_vk_dispatch(vk, OB_VK_SH_ATTENTION, OB_TYPE_F32, &pc, T * H * S, err, err_len);
        }
        /* the partials, then their merge; each waits for what came before */
        pc.o = vk->attn_part.addr + OB_VK_TICKET_BYTES;
        pc.u[6] |= (uint32_t)S << 8;
        vk->need_barrier = true;
        ob_status st = ob_vk_dispatch(vk, OB_VK_SH_ATTENTION, OB_TYPE_F32, &pc, T * H * S, err, err_len);
        if (st) return st;
        pc.a = vk->attn_part.addr + OB_VK_TICKET_BYTES;
        pc.o = addr(n);
        pc.u[6] = ((uint32_t)S << 8) | 2u;
        vk->need_barrier = true;
        return ob_vk_dispatch(vk, OB_VK_SH_ATTENTION, OB_TYPE_F32, &pc, T * H, err, err_len);
    }
    case OB_OP_SAMPLE:
        /* a workgroup per row; the greedy pass reads vec4s where rows are 16-byte aligned */
        pc.u[0] = (uint32_t)a->ne[0];
        pc.u[1] = addr(a) % 16 == 0 && a->ne[0] % 4 == 0;
        return ob_vk_dispatch(vk, OB_VK_SH_SAMPLE, OB_TYPE_F32, &pc, (uint64_t)ob_nrows(a), err, err_len);
    case OB_OP_POOL:
        pc.u[0] = (uint32_t)a->ne[0];
        pc.u[1] = (uint32_t)ob_nrows(a);
        pc.u[2] = (uint32_t)n->ip[0];
        pc.u[3] = n->ip[1] != 0;
        return ob_vk_dispatch(vk, OB_VK_SH_POOL, OB_TYPE_F32, &pc, (uint64_t)n->ip[2], err, err_len);
    case OB_OP_MOE_GATE:
    case OB_OP_MATMUL_ID:
    case OB_OP_MOE_SUM:
    case OB_OP_ADD_ID:
        return ob_vk_record_moe(vk, n, &pc, err, err_len);
    case OB_OP_SSM_CONV:
    case OB_OP_DELTA_NET:
        return ob_vk_record_recurrent(vk, n, &pc, err, err_len);
    case OB_OP_CONCAT:
    case OB_OP_SLICE:
        pc.u[0] = (uint32_t)n->ne[0];
        pc.u[1] = (uint32_t)ne;
        pc.u[2] = (uint32_t)a->ne[0];
        pc.u[3] = n->op == OB_OP_SLICE ? (uint32_t)n->ip[0] : 0u;
        pc.u[4] = n->op == OB_OP_CONCAT;
        return ob_vk_dispatch(vk, OB_VK_SH_CONCAT, OB_TYPE_F32, &pc, cdiv(ne, 256), err, err_len);
    case OB_OP_CPY:
        pc.u[0] = (uint32_t)ne;
        pc.u[1] = (uint32_t)n->type;
        return ob_vk_dispatch(vk, OB_VK_SH_CPY, ob_vk_wtype(vk, a), &pc, cdiv(cdiv(ne, 32), 64), err, err_len);
    default:
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "vulkan: op %s has no kernel", ob_op_name(n->op));
    }
}
