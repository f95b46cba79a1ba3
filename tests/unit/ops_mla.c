/* Multi-head latent attention and DeepSeek routing (issue #32): CONCAT and SLICE (rows of
 * odd widths, 1-D to 4-D), ATTENTION with values narrower than the keys (a V cache of its
 * own, or the K cache itself as MLA reads it: every cache type, decode and prefill over
 * several sequences, after KV_STORE), MATMUL_ID without a gate (one matrix per head, every
 * weight type), MOE_GATE with group-limited routing (softmax and sigmoid + bias, ties,
 * NaN), and DeepSeek-V2's absorbed attention block whole against the node-by-node
 * reference.
 *
 * Every GPU backend runs them all (no may_refuse marks). The narrower values run on each
 * attention path a backend has: the shapes (head sizes 576 down to 20, values of whole
 * 8-element chunks or not, T = 1, 9, 40 and 70), batch-invariant mode and the switches of
 * ops_gptoss.c pick Vulkan's attn_dec.comp (its splits, GW 4, one split) and attention.comp
 * (merge pass, last-split merge), CUDA's k_attn (splits merged by the last or by
 * k_attn_merge, one split) and k_attn_pf; CUDA's k_attn_h, tensor-core prefill and both
 * backends' folds are routed away from them by supports() and their planners, which these
 * cases check by their results. A narrower attention's int8 output (the next matmul's x)
 * is a chain. */
#include "ops_cases.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- CONCAT and SLICE ---------------------------------------------------------------------- */

typedef struct piece_row {
    int64_t na, nb, rows[3]; /* CONCAT: widths of a and b; SLICE: row width na, offset nb */
    int64_t len;             /* SLICE: elements kept */
} piece_row;

static int piece_dims(const piece_row *r) { return r->rows[2] > 1 ? 4 : r->rows[1] > 1 ? 3 : 2; }

static void concat_build(ops_build *b, const void *p) {
    const piece_row *r = p;
    const int nd = piece_dims(r);
    const int64_t na[4] = {r->na, r->rows[0], r->rows[1], r->rows[2]}, nb[4] = {r->nb, r->rows[0], r->rows[1], r->rows[2]};
    ob_tensor *a = ops_leaf_f32(b, "a", nd, na, 1.0f), *c = ops_leaf_f32(b, "b", nd, nb, 1.0f);
    ops_special_row(a->data, r->na, 0); /* NaN, infinities and -0 copied as they are */
    ops_check(b, ob_concat(b->g, a, c), OPS_BITS);
}

static void slice_build(ops_build *b, const void *p) {
    const piece_row *r = p;
    const int64_t ne[4] = {r->na, r->rows[0], r->rows[1], r->rows[2]};
    ob_tensor *a = ops_leaf_f32(b, "a", piece_dims(r), ne, 1.0f);
    ops_special_row(a->data, r->na, 0);
    ops_check(b, ob_slice(b->g, a, r->nb, r->len), OPS_BITS);
}

/* ---- ATTENTION with narrower values -------------------------------------------------------- */

typedef struct mla_attn_row {
    ob_type t;       /* K cache (and V cache when there is one) */
    int hd, dv, H, n_kv, T, n_seq, cps;
    bool shared;     /* the V cache is the K cache (MLA); else a V cache of dv * n_kv */
    bool store;      /* the T tokens' rows stored first (KV_STORE), the K cache checked too */
} mla_attn_row;

/* Tokens: decode at cps - 13 of sequence 1, or a prefill of T tokens over n_seq sequences
 * ending at each sequence's last cells. */
static void mla_tokens(const mla_attn_row *r, int32_t *pos, int32_t *seq) {
    for (int t = 0; t < r->T; t++) {
        seq[t] = r->T == 1 ? 1 : t % r->n_seq;
        pos[t] = r->T == 1 ? r->cps - 13 : r->cps - (r->T + r->n_seq - 1) / r->n_seq + t / r->n_seq;
    }
}

static void mla_attn_build(ops_build *b, const void *p) {
    const mla_attn_row *r = p;
    const int64_t krow = (int64_t)r->hd * r->n_kv, vrow = (int64_t)r->dv * r->n_kv, T = r->T;
    const int64_t cells = (int64_t)r->cps * (r->T == 1 ? 2 : r->n_seq);
    int32_t *pos = ops_own(b, sizeof(int32_t) * (size_t)T), *seq = ops_own(b, sizeof(int32_t) * (size_t)T);
    mla_tokens(r, pos, seq);
    void *kc = ops_typed(b, r->t, krow, cells, 1.0f), *vc = r->shared ? kc : ops_typed(b, r->t, vrow, cells, 1.0f);
    /* F32 cells no token may see hold NaN: a kernel that reads one fails */
    for (int64_t s = 0; s < cells / r->cps && !r->store && r->t == OB_TYPE_F32; s++) {
        int32_t mx = -1;
        for (int64_t t = 0; t < T; t++)
            if (seq[t] == s && pos[t] > mx) mx = pos[t];
        for (int64_t j = mx + 1; j < r->cps; j++) {
            for (int64_t e = 0; e < krow; e++) ((float *)kc)[(s * r->cps + j) * krow + e] = NAN;
            for (int64_t e = 0; e < vrow && !r->shared; e++) ((float *)vc)[(s * r->cps + j) * vrow + e] = NAN;
        }
    }
    const int64_t nq[3] = {r->hd, r->H, T}, nkc[2] = {krow, cells}, nvc[2] = {vrow, cells}, n1[1] = {1};
    ob_tensor *KC = ops_leaf(b, "kc", r->t, 2, nkc, kc);
    ob_tensor *VC = r->shared ? KC : ops_leaf(b, "vc", r->t, 2, nvc, vc);
    ob_tensor *P = ops_leaf_i32(b, "pos", T, pos), *S = ops_leaf_i32(b, "seq", T, seq), *order;
    if (r->store) {
        order = ob_kv_store(b->g, ops_leaf_f32(b, "k", 2, (int64_t[]){krow, T}, 1.0f), KC, P, S, r->cps);
        if (!r->shared) {
            ob_tensor *sv = ob_kv_store(b->g, ops_leaf_f32(b, "v", 2, (int64_t[]){vrow, T}, 1.0f), VC, P, S, r->cps);
            sv->src[4] = order;
            order = sv;
        }
    } else {
        order = ops_leaf(b, "tok", OB_TYPE_F32, 1, n1, ops_own(b, sizeof(float)));
    }
    ob_tensor *o = ob_attention_v(b->g, ops_leaf_f32(b, "q", 3, nq, 0.3f), KC, VC, P, S, order, r->cps, r->n_kv, r->dv,
                                  1.0f / sqrtf((float)r->hd));
    ops_check(b, o, OPS_TOL(4e-6, 2e-5));
    /* the GPUs' bounds of ops_attention.c */
    ops_tol_on(b, OPS_BIT(OPS_VK), OPS_TOL(1e-5, 1e-4));
    ops_tol_on(b, OPS_BIT(OPS_CUDA), OPS_MREL(2e-5));
    if (r->store) ops_check(b, KC, OPS_EXACT);
}

/* The attention's output read by an int8 matmul (the o projection of DeepSeek's naive form,
 * or of any model with narrower values): the GPU backends quantize it where they make it. */
static void mla_attnmv_build(ops_build *b, const void *p) {
    const mla_attn_row *r = p;
    mla_attn_build(b, p);
    ob_tensor *a = b->chk[0];
    const int64_t K = (int64_t)r->dv * r->H, N = 96, nw[2] = {K, N};
    ob_tensor *y = ob_matmul(b->g, ops_leaf(b, "wo", OB_TYPE_Q4_K, 2, nw, ops_typed(b, OB_TYPE_Q4_K, K, N, 1.0f)), a);
    b->n_chk = 0;
    ops_check(b, y, OPS_MREL(5e-2)); /* ops_chain.c's MV_MREL */
}

/* ---- MATMUL_ID without a gate -------------------------------------------------------------- */

typedef struct heads_row {
    ob_type t;
    int64_t K, N, E, T;
} heads_row;

static bool plain_type(ob_type t) { return t == OB_TYPE_F32 || t == OB_TYPE_F16 || t == OB_TYPE_BF16; }

/* The CPU's MATMUL bounds (ops_types.c): x quantized to the weight type's dot partner. */
static ops_tol mm_tol(ob_type t, int64_t K) {
    const double sk = sqrt((double)K);
    return plain_type(t) ? OPS_TOL((t == OB_TYPE_F32 ? 2e-4 : 4e-3) * sk, 1e-4) : OPS_TOL(6e-2 * sk, 1e-4);
}

static void heads_build(ops_build *b, const void *p) {
    const heads_row *r = p;
    const int64_t nw[3] = {r->K, r->N, r->E}, nx[3] = {r->K, r->E, r->T};
    ob_tensor *w = ops_leaf(b, "w", r->t, 3, nw, ops_typed(b, r->t, r->K, r->N * r->E, 1.0f));
    ops_check(b, ob_matmul_id(b->g, w, ops_leaf_f32(b, "x", 3, nx, 1.0f), NULL), mm_tol(r->t, r->K));
}

/* ---- MOE_GATE with groups ------------------------------------------------------------------ */

typedef struct group_row {
    int64_t E, k, T;
    int gating, n_group, used;
    bool bias;
    int logits; /* 0 random; 1 ties (a row all equal, equal pairs); 2 NaN in a row */
} group_row;

/* Independent of the reference's arithmetic: ids distinct and in range, every chosen expert
 * in one of at most `used` groups, and no expert of those groups left out that ranks above
 * a chosen one. */
static void group_ref(ops_build *b, const void *p) {
    const group_row *r = p;
    const ob_tensor *o = b->chk[0];
    const float *l = o->src[0]->data, *bias = o->src[1] ? o->src[1]->data : NULL, *y = o->data;
    const int64_t per = r->E / r->n_group;
    int bad = 0;
    for (int64_t t = 0; t < r->T && !bad; t++) {
        const float *lt = l + t * r->E, *yt = y + t * 2 * r->k;
        bool chosen[1024] = {false}, gused[64] = {false};
        int ng = 0;
        double last = INFINITY;
        for (int64_t j = 0; j < r->k && !bad; j++) {
            const float v = yt[r->k + j];
            const int64_t e = (int64_t)v;
            if (!(v >= 0 && v < (float)r->E && v == (float)e) || chosen[e]) { bad = 1; break; }
            chosen[e] = true;
            if (!gused[e / per]) { gused[e / per] = true; ng++; }
            double s = r->gating == OB_MOE_SOFTMAX ? lt[e] : 1.0 / (1.0 + exp(-(double)lt[e])) + (bias ? bias[e] : 0.0);
            last = isnan(s) ? -INFINITY : s;
        }
        if (!bad && ng > r->used) bad = 2;
        for (int64_t e = 0; e < r->E && !bad; e++) {
            if (chosen[e] || !gused[e / per]) continue;
            double s = r->gating == OB_MOE_SOFTMAX ? lt[e] : 1.0 / (1.0 + exp(-(double)lt[e])) + (bias ? bias[e] : 0.0);
            if (!isnan(s) && s > last) bad = 3;
        }
        if (bad) CHECKF(0, "%s: reference row %lld: defect %d", b->name, (long long)t, bad);
    }
    if (!bad) CHECK(true);
}

static void group_build(ops_build *b, const void *p) {
    const group_row *r = p;
    const int64_t ne[2] = {r->E, r->T}, nb[1] = {r->E};
    float *l = ops_f32(b, r->E * r->T, 2.0f);
    if (r->logits == 1) {
        for (int64_t e = 0; e < r->E; e++) l[e] = 0.25f; /* row 0: every group ties */
        for (int64_t t = 1; t < r->T; t++) l[t * r->E + r->E - 1] = l[t * r->E]; /* first and last expert */
    } else if (r->logits == 2) {
        l[r->E * (r->T - 1) + 2] = NAN;
    }
    ob_tensor *bias = r->bias ? ops_leaf_f32(b, "bias", 1, nb, 0.3f) : NULL;
    ob_tensor *o = ob_moe_gate_grouped(b->g, ops_leaf(b, "logits", OB_TYPE_F32, 2, ne, l), bias, (int)r->k, r->gating,
                                       true, 1.8f, r->n_group, r->used);
    ops_check(b, o, OPS_TOL(1e-7, 2e-6));
    b->ref_check = group_ref;
}

/* ---- the absorbed MLA block ---------------------------------------------------------------- */

typedef struct block_row {
    ob_type t;         /* the projections' type */
    int64_t D, H, q_lora, kv_lora, nope, rope, vd, T;
} block_row;

static ob_tensor *weight(ops_build *b, const char *name, ob_type t, int nd, const int64_t *ne, float scale) {
    int64_t rows = 1;
    for (int d = 1; d < nd; d++) rows *= ne[d];
    return ops_leaf(b, name, t, nd, ne, ops_typed(b, t, ne[0], rows, scale));
}

/* As arch/deepseek2.c builds one layer's attention: x [D, T] -> [D, T], with T <= 119 tokens
 * of one sequence stored after 9 cells already in the cache. */
static void mla_block_build(ops_build *b, const void *p) {
    const block_row *r = p;
    const int64_t T = r->T, hk = r->nope + r->rope, krow = r->kv_lora + r->rope, cps = 128;
    int32_t pos[128], seq[128];
    for (int64_t t = 0; t < T; t++) { pos[t] = (int32_t)(9 + t); seq[t] = 0; }
    ob_graph *g = b->g;
    ob_tensor *x = ops_leaf_f32(b, "x", 2, (int64_t[]){r->D, T}, 1.0f);
    ob_tensor *P = ops_leaf_i32(b, "pos", T, pos), *S = ops_leaf_i32(b, "seq", T, seq);
    ob_tensor *KC = ops_leaf(b, "kc", OB_TYPE_F16, 2, (int64_t[]){krow, cps}, ops_typed(b, OB_TYPE_F16, krow, cps, 1.0f));
    ob_tensor *qa = ob_matmul(g, weight(b, "q_a", r->t, 2, (int64_t[]){r->D, r->q_lora}, 0.2f), x);
    qa = ob_rms_norm(g, qa, ops_leaf_f32(b, "q_a_norm", 1, (int64_t[]){r->q_lora}, 1.0f), 1e-6f);
    ob_tensor *q = ob_matmul(g, weight(b, "q_b", r->t, 2, (int64_t[]){r->q_lora, hk * r->H}, 0.2f), qa);
    q = ob_view(g, q, 3, (int64_t[]){hk, r->H, T});
    ob_tensor *q_nope = ob_slice(g, q, 0, r->nope), *q_pe = ob_slice(g, q, r->nope, r->rope);
    q_pe = ob_rope(g, q_pe, P, NULL, (int)r->rope, 0, 1e4f, 1.0f, 1.0f);
    ob_tensor *q_abs =
        ob_matmul_id(g, weight(b, "k_b", r->t, 3, (int64_t[]){r->nope, r->kv_lora, r->H}, 0.2f), q_nope, NULL);
    ob_tensor *Q = ob_concat(g, q_abs, q_pe);
    ob_tensor *kv = ob_matmul(g, weight(b, "kv_a", r->t, 2, (int64_t[]){r->D, krow}, 0.2f), x);
    ob_tensor *c = ob_rms_norm(g, ob_slice(g, kv, 0, r->kv_lora),
                               ops_leaf_f32(b, "kv_a_norm", 1, (int64_t[]){r->kv_lora}, 1.0f), 1e-6f);
    ob_tensor *k_pe = ob_view(g, ob_slice(g, kv, r->kv_lora, r->rope), 3, (int64_t[]){r->rope, 1, T});
    k_pe = ob_rope(g, k_pe, P, NULL, (int)r->rope, 0, 1e4f, 1.0f, 1.0f);
    ob_tensor *st = ob_kv_store(g, ob_concat(g, c, k_pe), KC, P, S, (int)cps);
    ob_tensor *a = ob_attention_v(g, Q, KC, KC, P, S, st, (int)cps, 1, (int)r->kv_lora, 1.0f / sqrtf((float)hk));
    a = ob_view(g, a, 3, (int64_t[]){r->kv_lora, r->H, T});
    ob_tensor *v = ob_matmul_id(g, weight(b, "v_b", r->t, 3, (int64_t[]){r->kv_lora, r->vd, r->H}, 0.2f), a, NULL);
    v = ob_view(g, v, 2, (int64_t[]){r->vd * r->H, T});
    ob_tensor *o = ob_matmul(g, weight(b, "o", r->t, 2, (int64_t[]){r->vd * r->H, r->D}, 0.2f), v);
    /* int8 activations at each of five products in a row (q_a, q_b, k_b, v_b, o): a bound
     * relative to the largest output, as the MoE block's for its two */
    ops_check(b, o, plain_type(r->t) ? OPS_MREL(2e-3) : OPS_MREL(8e-2));
    /* F32 projections on the CPU: close, while few rows pass the F16 cache (a last-bit
     * difference upstream may round a cached element the other way: an F16 ulp, 1e-3 of it,
     * which 40 tokens' rows met) */
    if (r->t == OB_TYPE_F32 && T <= 8) ops_tol_on(b, OPS_BIT(OPS_CPU), OPS_MREL(2e-5));
}

/* ---- the tables ---------------------------------------------------------------------------- */

static const piece_row g_concat[] = {
    {512, 64, {1, 1, 1}, 0},  {512, 64, {4, 3, 1}, 0}, {1, 1, {5, 1, 1}, 0},
    {37, 3, {2, 3, 2}, 0},    {64, 512, {7, 1, 1}, 0}, {33, 95, {1, 300, 1}, 0},
    /* GLM-4.7-Flash's query (512 + 64 a head, 20 heads) at T = 40 and 70; the fixture's */
    {512, 64, {20, 40, 1}, 0}, {512, 64, {20, 70, 1}, 0}, {32, 16, {4, 70, 1}, 0},
};
static const piece_row g_slice[] = {
    {576, 0, {3, 1, 1}, 512}, {576, 512, {3, 1, 1}, 64}, {256, 192, {4, 5, 1}, 64}, {256, 0, {4, 5, 1}, 192},
    {7, 6, {1, 1, 1}, 1},     {9, 0, {2, 2, 2}, 9},      {100, 31, {1, 70, 1}, 33},
    {576, 512, {40, 1, 1}, 64}, {256, 192, {20, 70, 1}, 64}, {48, 16, {3, 40, 1}, 31},
};

static const mla_attn_row g_mla_attn[] = {
    /* MLA as DeepSeek-V2 / GLM-4.7-Flash read it: one latent row of kv_lora + rope per token,
     * the value its first kv_lora elements */
    {OB_TYPE_F32, 576, 512, 4, 1, 1, 1, 300, true, false},  {OB_TYPE_Q8_0, 576, 512, 4, 1, 1, 1, 300, true, false},
    {OB_TYPE_F32, 576, 512, 3, 1, 8, 3, 24, true, false},
    {OB_TYPE_F16, 576, 512, 3, 1, 8, 3, 24, true, true},    {OB_TYPE_Q8_0, 96, 64, 5, 1, 8, 2, 24, true, true},
    {OB_TYPE_F32, 96, 64, 16, 1, 1, 1, 100, true, true},    {OB_TYPE_F16, 40, 24, 2, 1, 11, 1, 70, true, false},
    /* GLM-4.7-Flash's 20 heads; prefills of 40 and 70 tokens (after their stores) */
    {OB_TYPE_F16, 576, 512, 20, 1, 1, 1, 300, true, false}, {OB_TYPE_F16, 576, 512, 4, 1, 40, 2, 100, true, true},
    {OB_TYPE_Q8_0, 576, 512, 4, 1, 70, 2, 100, true, true},
    /* values of their own, narrower than the keys (DeepSeek's naive form: 192 / 128) */
    {OB_TYPE_F32, 48, 32, 4, 2, 1, 1, 300, false, false},   {OB_TYPE_F16, 48, 32, 4, 4, 8, 3, 24, false, true},
    {OB_TYPE_Q8_0, 192, 128, 4, 2, 8, 3, 24, false, false}, {OB_TYPE_F32, 20, 4, 6, 3, 5, 2, 24, false, true},
    {OB_TYPE_Q8_0, 192, 128, 4, 2, 40, 2, 100, false, true}, {OB_TYPE_F32, 20, 4, 6, 3, 70, 2, 100, false, false},
    /* values not of whole 8-element chunks (Vulkan's attn_dec.comp routes them away), odd heads */
    {OB_TYPE_F16, 56, 20, 4, 2, 1, 1, 300, false, false},   {OB_TYPE_F16, 56, 20, 4, 2, 40, 2, 100, false, true},
    {OB_TYPE_F32, 44, 12, 3, 1, 1, 1, 300, true, false},    {OB_TYPE_F32, 44, 12, 3, 1, 70, 2, 100, true, false},
};

/* The shapes every attention path of a backend runs with narrower values: GLM-4.7-Flash's
 * latent row (576, past Vulkan's attn_dec.comp and CUDA's k_attn_h), the glm4moelite
 * fixture's (48 / 32), whole 8-chunks of a shorter value (40 / 24), a Q8_0 cache (96 / 64),
 * and a V cache of its own (48 / 32), at T = 1, 9, 40 and 70. */
static const mla_attn_row g_mla_paths[] = {
    {OB_TYPE_F16, 576, 512, 4, 1, 1, 1, 300, true, false}, {OB_TYPE_F32, 48, 32, 4, 1, 1, 1, 300, true, false},
    {OB_TYPE_F16, 40, 24, 4, 1, 1, 1, 300, true, false},   {OB_TYPE_Q8_0, 96, 64, 4, 1, 1, 1, 300, true, false},
    {OB_TYPE_F16, 48, 32, 4, 2, 1, 1, 300, false, false},
};
/* The attention paths only a switch reaches (ops_gptoss.c's list; flash attention never takes
 * narrower values). */
static const char *const g_mla_knobs[] = {
    "ONEBIT_VK_ATTN_SOLO=0", "ONEBIT_VK_ATTN_GW=4 ONEBIT_VK_ATTN_SOLO=0", "ONEBIT_VK_ATTN_SPLIT=1",
    "ONEBIT_VK_ATTN_LAST=0 ONEBIT_VK_ATTN_CELLS=128", "ONEBIT_VK_ATTN_DEC=0 ONEBIT_VK_ATTN_CELLS=128",
    "ONEBIT_CUDA_ATTN_H=0", "ONEBIT_CUDA_FUSE=0", "ONEBIT_CUDA_ATTN_SPLIT=1",
};
static mla_attn_row g_mla_var[32]; /* g_mla_paths at each T */
static int g_nmla;

static void add_mla_attn(ops_list *l, const mla_attn_row *r, const char *knobs, bool det) {
    ops_case *c = ops_add(l, mla_attn_build, r, "ATTENTION values %d of %d (%s) %s hd=%d H=%d/%d T=%d seqs=%d cells=%d%s%s%s%s",
                          r->dv, r->shared ? r->hd : r->dv, r->shared ? "the K cache" : "own cache", ob_type_name(r->t), r->hd,
                          r->H, r->n_kv, r->T, r->n_seq, r->cps, r->store ? " after KV_STORE" : "",
                          det ? " deterministic" : "", knobs ? " " : "", knobs ? knobs : "");
    c->knobs = knobs;
    c->det = det;
}

static const mla_attn_row g_mla_chain[] = {
    {OB_TYPE_F16, 192, 128, 4, 2, 1, 1, 300, false, false}, {OB_TYPE_F16, 96, 64, 4, 1, 1, 1, 300, true, false},
    {OB_TYPE_F16, 96, 64, 4, 1, 2, 2, 300, true, false},    {OB_TYPE_Q8_0, 576, 512, 2, 1, 1, 1, 300, true, false},
};

static const group_row g_groups[] = {
    /* DeepSeek-V3: 256 experts in 8 groups, 4 of them used, 8 chosen */
    {256, 8, 5, OB_MOE_SIGMOID, 8, 4, true, 0}, {256, 8, 1, OB_MOE_SIGMOID, 8, 4, true, 0},
    {64, 6, 9, OB_MOE_SIGMOID, 8, 3, true, 0},  {16, 4, 4, OB_MOE_SIGMOID, 4, 2, false, 1},
    {16, 2, 3, OB_MOE_SIGMOID, 4, 1, true, 2},  {32, 4, 7, OB_MOE_SOFTMAX, 4, 2, false, 0},
    {32, 4, 5, OB_MOE_SOFTMAX, 4, 2, false, 1}, {8, 2, 6, OB_MOE_SIGMOID, 8, 2, true, 0}, /* groups of one */
    {24, 6, 3, OB_MOE_SIGMOID, 3, 3, true, 0}, /* every group used */
    /* prefills; DeepSeek-V2's softmax in 8 groups, 3 used; 64 groups of 16 (more experts than
     * a workgroup's registers hold); groups of an odd width */
    {256, 8, 70, OB_MOE_SIGMOID, 8, 4, true, 0}, {160, 6, 40, OB_MOE_SOFTMAX, 8, 3, false, 0},
    {1024, 8, 3, OB_MOE_SIGMOID, 64, 4, true, 0}, {1024, 6, 2, OB_MOE_SOFTMAX, 64, 6, false, 1},
    {35, 3, 9, OB_MOE_SIGMOID, 5, 2, true, 2},
};

static const block_row g_blocks[] = {
    /* GLM-4.7-Flash's proportions, scaled down: nope 3/4 of the query head, values as wide */
    {OB_TYPE_F32, 128, 4, 64, 64, 48, 16, 64, 1}, {OB_TYPE_F32, 128, 4, 64, 64, 48, 16, 64, 7},
    {OB_TYPE_F16, 256, 4, 96, 128, 64, 32, 32, 5}, {OB_TYPE_Q8_0, 256, 2, 128, 128, 64, 32, 64, 3},
    {OB_TYPE_F32, 128, 4, 64, 64, 48, 16, 64, 40}, {OB_TYPE_F16, 256, 4, 96, 128, 64, 32, 32, 70},
};

void ops_add_mla(ops_list *l) {
    for (size_t i = 0; i < OB_ARRAY_LEN(g_concat); i++) {
        const piece_row *r = &g_concat[i];
        ops_add(l, concat_build, r, "CONCAT %lld + %lld x [%lld, %lld, %lld]", (long long)r->na, (long long)r->nb,
                (long long)r->rows[0], (long long)r->rows[1], (long long)r->rows[2]);
    }
    for (size_t i = 0; i < OB_ARRAY_LEN(g_slice); i++) {
        const piece_row *r = &g_slice[i];
        ops_add(l, slice_build, r, "SLICE [%lld, %lld) of %lld x [%lld, %lld, %lld]", (long long)r->nb,
                (long long)(r->nb + r->len), (long long)r->na, (long long)r->rows[0], (long long)r->rows[1],
                (long long)r->rows[2]);
    }
    for (size_t i = 0; i < OB_ARRAY_LEN(g_mla_attn); i++) add_mla_attn(l, &g_mla_attn[i], NULL, false);
    static const int Ts[] = {1, 9, 40, 70};
    for (size_t i = 0; i < OB_ARRAY_LEN(g_mla_paths); i++)
        for (size_t t = 0; t < OB_ARRAY_LEN(Ts); t++) {
            if (g_nmla == (int)OB_ARRAY_LEN(g_mla_var)) {
                fprintf(stderr, "ops_mla: g_mla_var full\n");
                exit(2);
            }
            mla_attn_row *r = &g_mla_var[g_nmla++];
            *r = g_mla_paths[i];
            r->T = Ts[t];
            if (Ts[t] > 1) { /* two sequences, the tokens at their last cells */
                r->n_seq = 2;
                r->cps = 100;
            }
            add_mla_attn(l, r, NULL, false);
            add_mla_attn(l, r, NULL, true);
            for (size_t k = 0; k < OB_ARRAY_LEN(g_mla_knobs); k++) {
                /* Vulkan's switches at one token (more take attention.comp unsplit), CUDA's at
                 * decode and small batches (more take k_attn_pf) */
                if (!strncmp(g_mla_knobs[k], "ONEBIT_VK_", 10) ? Ts[t] != 1 : Ts[t] > 16) continue;
                add_mla_attn(l, r, g_mla_knobs[k], false);
            }
        }
    for (size_t i = 0; i < OB_ARRAY_LEN(g_mla_chain); i++) {
        const mla_attn_row *r = &g_mla_chain[i];
        ops_case *c = ops_add(l, mla_attnmv_build, r, "chain ATTENTION values %d of %d (%s) %s hd=%d H=%d T=%d -> MATMUL Q4_K",
                              r->dv, r->shared ? r->hd : r->dv, r->shared ? "the K cache" : "own cache", ob_type_name(r->t),
                              r->hd, r->H, r->T);
        c->chain = true;
        c->fuse_mrel = 1e-5;
    }
    ob_type types[OB_TYPE_COUNT];
    const int nt = ops_weight_types(types);
    static heads_row heads[OB_TYPE_COUNT * 2 + 32];
    int nh = 0;
    for (int i = 0; i < nt; i++)
        for (int64_t T = 1; T <= 3; T += 2) heads[nh++] = (heads_row){types[i], 256, 19, 4, T};
    /* GLM-4.7-Flash's k_b (192 -> 512) and v_b (512 -> 256) at 20 heads, scaled down */
    static const ob_type hot[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_Q8_0, OB_TYPE_Q4_K};
    for (size_t i = 0; i < OB_ARRAY_LEN(hot); i++) {
        heads[nh++] = (heads_row){hot[i], 256, 128, 20, 1};
        heads[nh++] = (heads_row){hot[i], 512, 64, 20, 9};
        heads[nh++] = (heads_row){hot[i], 256, 32, 20, 40};
        heads[nh++] = (heads_row){hot[i], 256, 96, 4, 70};
    }
    /* the glm4moelite fixture's k_b (24 -> 32: rows of no whole 32-block) and v_b, F32 and F16 */
    for (int64_t T = 1; T <= 70; T += 69) {
        heads[nh++] = (heads_row){OB_TYPE_F32, 24, 32, 4, T};
        heads[nh++] = (heads_row){OB_TYPE_F16, 24, 32, 4, T};
        heads[nh++] = (heads_row){OB_TYPE_F32, 32, 32, 4, T};
    }
    for (int i = 0; i < nh; i++) {
        ops_case *c = ops_add(l, heads_build, &heads[i], "MATMUL_ID one matrix per head %s K=%lld N=%lld heads=%lld T=%lld",
                              ob_type_name(heads[i].t), (long long)heads[i].K, (long long)heads[i].N,
                              (long long)heads[i].E, (long long)heads[i].T);
        /* activation formats, not weight formats: the CPU has no dot kernel for them */
        if (heads[i].t == OB_TYPE_Q8_1 || heads[i].t == OB_TYPE_Q8_K) c->may_refuse = OPS_BIT(OPS_CPU);
    }
    for (size_t i = 0; i < OB_ARRAY_LEN(g_groups); i++) {
        const group_row *r = &g_groups[i];
        for (int det = 0; det < 2; det++)
            ops_add(l, group_build, r, "MOE_GATE %s E=%lld k=%lld T=%lld groups %d of %d%s%s%s",
                    r->gating == OB_MOE_SOFTMAX ? "softmax" : "sigmoid", (long long)r->E, (long long)r->k, (long long)r->T,
                    r->used, r->n_group, r->bias ? " bias" : "", r->logits == 1 ? " ties" : r->logits == 2 ? " nan" : "",
                    det ? " deterministic" : "")
                ->det = det;
    }
    for (size_t i = 0; i < OB_ARRAY_LEN(g_blocks); i++) {
        const block_row *r = &g_blocks[i];
        for (int det = 0; det < 2; det++)
            ops_add(l, mla_block_build, r, "MLA block %s D=%lld H=%lld q_lora=%lld kv_lora=%lld nope=%lld rope=%lld v=%lld T=%lld%s",
                    ob_type_name(r->t), (long long)r->D, (long long)r->H, (long long)r->q_lora, (long long)r->kv_lora,
                    (long long)r->nope, (long long)r->rope, (long long)r->vd, (long long)r->T, det ? " deterministic" : "")
                ->det = det;
    }
}
