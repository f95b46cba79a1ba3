/* Mixture of experts (issue #32): MOE_GATE (softmax and sigmoid + bias, normalised or not,
 * scaled, ties in the logits, NaN logits, k from 1 to E), MATMUL_ID over every weight type
 * (x shared by a token's slots or one row per slot, one token and many, experts chosen by
 * one token and by most, ids naming no expert), MOE_SUM, and the whole Qwen3-MoE block
 * (router, gate, gate/up experts, SwiGLU, down experts, sum) against the node-by-node
 * reference.
 *
 * Every backend runs them all (Vulkan's sigmoid gate, like its SAMPLE, on a device with
 * shaderFloat64). */
#include "ops_cases.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A gate output [2k, T] made here: k distinct random experts per token with weights in
 * (0, 1]; bad: some slots name no expert (-1, E, 2.5, NaN, 1e9), which must give zeros. */
static ob_tensor *gate_leaf(ops_build *b, int64_t E, int64_t k, int64_t T, bool bad) {
    float *g = ops_own(b, sizeof(float) * (size_t)(2 * k * T));
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)E);
    for (int64_t t = 0; t < T; t++) {
        for (int64_t e = 0; e < E; e++) perm[e] = (int32_t)e;
        for (int64_t j = 0; j < k; j++) { /* a partial Fisher-Yates shuffle */
            const int64_t r = j + (int64_t)(ob_rng_u64(&b->rng) % (uint64_t)(E - j));
            const int32_t tmp = perm[j];
            perm[j] = perm[r];
            perm[r] = tmp;
            g[t * 2 * k + j] = 0.05f + 0.95f * ob_rng_uniform(&b->rng);
            g[t * 2 * k + k + j] = (float)perm[j];
        }
    }
    free(perm);
    if (bad) {
        static const float nope[5] = {-1.0f, 0.0f /* E */, 2.5f, NAN, 1e9f};
        for (int64_t i = 0; i < 5 && i < k * T; i++) {
            const int64_t t = (i * 7) % T, j = i % k;
            g[t * 2 * k + k + j] = i == 1 ? (float)E : nope[i];
        }
    }
    const int64_t ne[2] = {2 * k, T};
    return ops_leaf(b, "gate", OB_TYPE_F32, 2, ne, g);
}

/* ---- MOE_GATE ------------------------------------------------------------------------------ */

typedef struct gate_row {
    int64_t E, k, T;
    int gating;  /* ob_moe_gating */
    bool norm, bias;
    float scale;
    int logits;  /* 0 random; 1 ties (equal logits in every row, one row all equal); 2 NaN in a row */
} gate_row;

/* Independent of the reference's arithmetic: ids distinct and in range, in descending order
 * of their score with ties to the lower id, no unchosen expert above the last chosen,
 * weights positive and (normalised) summing to the scale. */
static void gate_ref(ops_build *b, const void *p) {
    const gate_row *r = p;
    const ob_tensor *o = b->chk[0];
    const float *l = o->src[0]->data, *bias = o->src[1] ? o->src[1]->data : NULL, *y = o->data;
    int bad = 0;
    for (int64_t t = 0; t < r->T && !bad; t++) {
        const float *lt = l + t * r->E, *yt = y + t * 2 * r->k;
        double sum = 0, prev = INFINITY, last = INFINITY;
        int64_t prev_id = -1;
        bool chosen[512] = {false};
        for (int64_t j = 0; j < r->k; j++) {
            const float v = yt[r->k + j];
            const int64_t e = (int64_t)v;
            if (!(v >= 0 && v < (float)r->E && v == (float)e) || chosen[e]) { bad = 1; break; }
            chosen[e] = true;
            double s = r->gating == OB_MOE_SOFTMAX ? lt[e] : 1.0 / (1.0 + exp(-(double)lt[e])) + (bias ? bias[e] : 0.0);
            if (isnan(s)) s = -INFINITY;
            if (s > prev || (s == prev && e < prev_id)) bad = 2;
            prev = last = s;
            prev_id = e;
            sum += yt[j];
            if (!(yt[j] >= 0) && r->logits != 2) bad = 3; /* a NaN logit makes the softmax's NaN */
        }
        for (int64_t e = 0; e < r->E && !bad; e++) {
            double s = r->gating == OB_MOE_SOFTMAX ? lt[e] : 1.0 / (1.0 + exp(-(double)lt[e])) + (bias ? bias[e] : 0.0);
            if (isnan(s)) s = -INFINITY;
            if (!chosen[e] && (s > last || (s == last && e < prev_id))) bad = 4;
        }
        if (!bad && r->norm && r->logits != 2 && fabs(sum - r->scale) > 1e-5 * fabs(r->scale)) bad = 5;
        if (bad) CHECKF(0, "%s: reference row %lld: defect %d", b->name, (long long)t, bad);
    }
    if (!bad) CHECK(true);
}

static void gate_build(ops_build *b, const void *p) {
    const gate_row *r = p;
    const int64_t ne[2] = {r->E, r->T}, nb[1] = {r->E};
    float *l = ops_f32(b, r->E * r->T, 2.0f);
    if (r->logits == 1) {
        for (int64_t t = 0; t < r->T; t++) {
            float *lt = l + t * r->E;
            lt[r->E - 1] = lt[0];                  /* a tie between the first and last expert */
            if (r->E > 4) lt[3] = lt[1] = lt[2];   /* three equal in the middle */
        }
        for (int64_t e = 0; e < r->E; e++) l[e] = 0.5f; /* row 0: all equal */
    } else if (r->logits == 2) {
        l[r->E * (r->T - 1) + 1] = NAN;
    }
    ob_tensor *bias = r->bias ? ops_leaf_f32(b, "bias", 1, nb, 0.5f) : NULL;
    ob_tensor *o = ob_moe_gate(b->g, ops_leaf(b, "logits", OB_TYPE_F32, 2, ne, l), bias, (int)r->k, r->gating, r->norm,
                               r->scale);
    /* the ids are whole numbers: any wrong one misses by >= 1 */
    ops_check(b, o, OPS_TOL(1e-7, 2e-6));
    b->ref_check = gate_ref;
}

/* ---- MATMUL_ID ----------------------------------------------------------------------------- */

typedef struct mmid_row {
    ob_type t;
    int64_t K, N, E, k, T;
    bool per_slot; /* x [K, k, T] rather than [K, T] */
    bool bad;      /* slots naming no expert */
} mmid_row;

static bool plain_type(ob_type t) { return t == OB_TYPE_F32 || t == OB_TYPE_F16 || t == OB_TYPE_BF16; }

/* The CPU's MATMUL bounds (ops_types.c): x quantized to the weight type's dot partner. */
static ops_tol mm_cpu_tol(ob_type t, int64_t K) {
    const double sk = sqrt((double)K);
    return plain_type(t) ? OPS_TOL((t == OB_TYPE_F32 ? 2e-4 : 4e-3) * sk, 1e-4) : OPS_TOL(6e-2 * sk, 1e-4);
}

static void mmid_build(ops_build *b, const void *p) {
    const mmid_row *r = p;
    const int64_t nw[3] = {r->K, r->N, r->E}, nx[3] = {r->K, r->per_slot ? r->k : r->T, r->T};
    ob_tensor *w = ops_leaf(b, "exps", r->t, 3, nw, ops_typed(b, r->t, r->K, r->N * r->E, 1.0f));
    ob_tensor *x = ops_leaf_f32(b, "x", r->per_slot ? 3 : 2, r->per_slot ? nx : (int64_t[]){r->K, r->T}, 1.0f);
    ob_tensor *o = ob_matmul_id(b->g, w, x, gate_leaf(b, r->E, r->k, r->T, r->bad));
    ops_check(b, o, mm_cpu_tol(r->t, r->K));
}

/* ---- MOE_SUM ------------------------------------------------------------------------------- */

typedef struct sum_row { int64_t N, k, T; } sum_row;

static void sum_build(ops_build *b, const void *p) {
    const sum_row *r = p;
    const int64_t ne[3] = {r->N, r->k, r->T};
    ob_tensor *o = ob_moe_sum(b->g, ops_leaf_f32(b, "y", 3, ne, 1.0f), gate_leaf(b, 64, r->k, r->T, false));
    ops_check(b, o, OPS_TOL(1e-6, 1e-5));
}

/* ---- the Qwen3-MoE block ------------------------------------------------------------------- */

typedef struct block_row {
    ob_type t;      /* the experts' type (the router stays F32, as converters keep it) */
    int64_t H, F, E, k, T;
} block_row;

static void block_build(ops_build *b, const void *p) {
    const block_row *r = p;
    const int64_t nh[2] = {r->H, r->T}, nr[2] = {r->H, r->E}, nu[3] = {r->H, r->F, r->E}, nd[3] = {r->F, r->H, r->E};
    ob_tensor *h = ops_leaf_f32(b, "h", 2, nh, 1.0f);
    ob_tensor *router = ops_leaf(b, "router", OB_TYPE_F32, 2, nr, ops_typed(b, OB_TYPE_F32, r->H, r->E, 0.3f));
    ob_tensor *gate = ob_moe_gate(b->g, ob_matmul(b->g, router, h), NULL, (int)r->k, OB_MOE_SOFTMAX, true, 1.0f);
    ob_tensor *g = ob_matmul_id(b->g, ops_leaf(b, "gate_exps", r->t, 3, nu, ops_typed(b, r->t, r->H, r->F * r->E, 0.1f)), h, gate);
    ob_tensor *u = ob_matmul_id(b->g, ops_leaf(b, "up_exps", r->t, 3, nu, ops_typed(b, r->t, r->H, r->F * r->E, 0.1f)), h, gate);
    ob_tensor *a = ob_glu(b->g, g, u, OB_ACT_SILU);
    ob_tensor *d = ob_matmul_id(b->g, ops_leaf(b, "down_exps", r->t, 3, nd, ops_typed(b, r->t, r->F, r->H * r->E, 0.1f)), a, gate);
    ob_tensor *o = ob_moe_sum(b->g, d, gate);
    /* int8 activations twice over (x, then the SwiGLU output): a bound relative to the
     * largest output, as the chains' */
    ops_check(b, o, plain_type(r->t) ? OPS_MREL(2e-3) : OPS_MREL(3e-2));
    if (r->t == OB_TYPE_F32) ops_tol_on(b, OPS_BIT(OPS_CPU), OPS_MREL(2e-5));
}

/* ---- the tables ---------------------------------------------------------------------------- */

static const gate_row g_gate[] = {
    /* Qwen3-MoE: softmax, normalised */
    {8, 2, 1, OB_MOE_SOFTMAX, true, false, 1.0f, 0},   {8, 2, 7, OB_MOE_SOFTMAX, true, false, 1.0f, 0},
    {128, 8, 3, OB_MOE_SOFTMAX, true, false, 1.0f, 0}, {128, 8, 33, OB_MOE_SOFTMAX, true, false, 1.0f, 0},
    {8, 1, 5, OB_MOE_SOFTMAX, false, false, 1.0f, 0},  {8, 8, 5, OB_MOE_SOFTMAX, true, false, 1.0f, 0},
    {60, 4, 9, OB_MOE_SOFTMAX, false, false, 1.0f, 0}, {32, 4, 9, OB_MOE_SOFTMAX, true, false, 1.0f, 1},
    {5, 3, 4, OB_MOE_SOFTMAX, true, false, 1.0f, 1},   {16, 2, 3, OB_MOE_SOFTMAX, true, false, 1.0f, 2},
    /* sigmoid + selection bias, scaled (DeepSeek-V3 / GLM style, without groups) */
    {64, 4, 1, OB_MOE_SIGMOID, true, true, 2.5f, 0},   {64, 4, 13, OB_MOE_SIGMOID, true, true, 2.5f, 0},
    {256, 8, 5, OB_MOE_SIGMOID, true, true, 1.8f, 0},  {32, 2, 6, OB_MOE_SIGMOID, false, false, 1.0f, 1},
    {32, 4, 6, OB_MOE_SIGMOID, true, true, 1.0f, 1},   {16, 3, 3, OB_MOE_SIGMOID, false, true, 1.0f, 2},
};

static const ob_type g_block_types[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_Q8_0, OB_TYPE_Q4_K, OB_TYPE_MXFP4, OB_TYPE_Q6_K};

static mmid_row g_mmid[256];
static int g_nmmid;

static void add_mmid(ops_list *l, ob_type t, int64_t K, int64_t N, int64_t E, int64_t k, int64_t T, bool per_slot, bool bad) {
    if (g_nmmid == (int)OB_ARRAY_LEN(g_mmid)) { fprintf(stderr, "ops_moe: g_mmid full\n"); exit(2); }
    mmid_row *r = &g_mmid[g_nmmid++];
    *r = (mmid_row){t, K, N, E, k, T, per_slot, bad};
    ops_case *c = ops_add(l, mmid_build, r, "MATMUL_ID %s K=%lld N=%lld E=%lld k=%lld T=%lld%s%s", ob_type_name(t),
                          (long long)K, (long long)N, (long long)E, (long long)k, (long long)T, per_slot ? " x per slot" : "",
                          bad ? " ids naming no expert" : "");
    /* activation formats, not weight formats: the CPU has no dot kernel for them and says so */
    if (t == OB_TYPE_Q8_1 || t == OB_TYPE_Q8_K) c->may_refuse = OPS_BIT(OPS_CPU);
}

void ops_add_moe(ops_list *l) {
    for (size_t i = 0; i < OB_ARRAY_LEN(g_gate); i++) {
        const gate_row *r = &g_gate[i];
        ops_add(l, gate_build, r, "MOE_GATE %s E=%lld k=%lld T=%lld%s%s scale=%g%s",
                r->gating == OB_MOE_SOFTMAX ? "softmax" : "sigmoid", (long long)r->E, (long long)r->k, (long long)r->T,
                r->norm ? " norm" : "", r->bias ? " bias" : "", r->scale,
                r->logits == 1 ? " ties" : r->logits == 2 ? " nan" : "");
    }
    /* every weight type: one token, an odd prefill, x shared and per slot */
    ob_type types[OB_TYPE_COUNT];
    const int nt = ops_weight_types(types);
    static const int64_t T_sweep[] = {1, 3, 17};
    for (int i = 0; i < nt; i++)
        for (size_t s = 0; s < OB_ARRAY_LEN(T_sweep); s++)
            add_mmid(l, types[i], 256, 19, 8, 2, T_sweep[s], s == 1, false);
    /* the hot types at the shapes the grouping and the kernels split differently: one
     * expert (k = E = 1), experts with many columns (T = 40 over 4: more than a tile),
     * Qwen3-30B's 128 experts with 8 chosen, rows past one tile of 8, ids naming no expert
     * (K x N x E under ops_typed's 4 M elements: past it Q6_K gets random blocks whose
     * scales overflow the SIMD kernels' int16 sums, which real files never hold) */
    static const ob_type hot[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_Q8_0, OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_MXFP4};
    for (size_t i = 0; i < OB_ARRAY_LEN(hot); i++) {
        const ob_type t = hot[i];
        add_mmid(l, t, 256, 37, 1, 1, 5, false, false);
        add_mmid(l, t, 256, 37, 4, 2, 40, false, false);
        add_mmid(l, t, 256, 37, 4, 2, 40, true, false);
        add_mmid(l, t, 512, 37, 128, 8, 1, false, false);
        add_mmid(l, t, 256, 70, 128, 8, 9, true, false);
        add_mmid(l, t, 256, 19, 8, 3, 6, false, true);
        add_mmid(l, t, 256, 19, 8, 3, 6, true, true);
    }
    static sum_row sums[] = {{64, 2, 1}, {64, 2, 7}, {2048, 8, 3}, {33, 1, 4}, {100, 6, 17}};
    for (size_t i = 0; i < OB_ARRAY_LEN(sums); i++)
        ops_add(l, sum_build, &sums[i], "MOE_SUM N=%lld k=%lld T=%lld", (long long)sums[i].N, (long long)sums[i].k,
                (long long)sums[i].T);
    static block_row blocks[OB_ARRAY_LEN(g_block_types) * 3];
    int nb = 0;
    for (size_t i = 0; i < OB_ARRAY_LEN(g_block_types); i++) {
        static const int64_t Ts[] = {1, 5, 33};
        for (size_t s = 0; s < 3; s++) {
            block_row *r = &blocks[nb++];
            *r = (block_row){g_block_types[i], 256, 256, 8, 2, Ts[s]};
            ops_add(l, block_build, r, "MOE block %s H=%lld F=%lld E=%lld k=%lld T=%lld", ob_type_name(r->t), (long long)r->H,
                    (long long)r->F, (long long)r->E, (long long)r->k, (long long)r->T);
        }
    }
}

ob_tensor *ops_gate_leaf(ops_build *b, int64_t E, int64_t k, int64_t T, bool bad) { return gate_leaf(b, E, k, T, bad); }
