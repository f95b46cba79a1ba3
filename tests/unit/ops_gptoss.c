/* gpt-oss's additions to the op table (issue #32): ATTENTION with sinks (every cache type,
 * GQA, a sliding window, decode and prefill, sinks that dominate, that vanish (-inf) and
 * that tie the scores, with a soft-cap too; one known value), GLU's clamped SwiGLU
 * (OB_GLU_SWIGLU_OAI: inputs on both sides of the limit, exactly at it, NaN and +inf; known
 * values), ADD_ID (experts' biases, ids naming no expert) and the whole gpt-oss
 * feed-forward block (router with bias, softmax top-k renormalised, gate/up experts with
 * biases, the clamped SwiGLU, down experts with bias, sum) against the node-by-node
 * reference. The sinks run on every attention path of each GPU backend (the switches below
 * and batch-invariant mode pick the ones the shapes alone would not); the fused forms of the
 * clamped SwiGLU and of a sinks attention are chains in ops_chain.c. */
#include "ops_cases.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- ATTENTION with sinks ------------------------------------------------------------------ */

enum { SINK_RANDOM = 0, SINK_BIG = 1, SINK_NEG_INF = 2, SINK_TIE = 3 };

typedef struct sink_row {
    ob_type kt, vt;
    int hd, H, n_kv, T, cps, window;
    float cap;
    int sinks; /* SINK_* */
} sink_row;

/* CUDA's prefill on tensor cores (op_flash_attn.cu: q and P rounded to f16) takes these. */
static bool sink_fa_shape(const sink_row *r) {
    const bool ct = (r->kt == OB_TYPE_F16 || r->kt == OB_TYPE_Q8_0) && (r->vt == OB_TYPE_F16 || r->vt == OB_TYPE_Q8_0);
    return r->T >= 32 && ct && (r->hd == 64 || r->hd == 128);
}

/* T = 1: decode one token at position cps - 13 of sequence 1 (of 2); else a prefill of T
 * tokens of two sequences interleaved, at positions from 3. Unseen F32 cells hold NaN. */
static void sink_build(ops_build *b, const void *p) {
    const sink_row *r = p;
    const int64_t row = (int64_t)r->hd * r->n_kv, cells = 2 * (int64_t)r->cps, T = r->T;
    int32_t *pos = ops_own(b, sizeof(int32_t) * (size_t)T), *seq = ops_own(b, sizeof(int32_t) * (size_t)T);
    for (int64_t t = 0; t < T; t++) {
        seq[t] = T == 1 ? 1 : (int32_t)(t % 2);
        pos[t] = T == 1 ? r->cps - 13 : (int32_t)(3 + t / 2);
    }
    void *kc = ops_typed(b, r->kt, row, cells, 1.0f), *vc = ops_typed(b, r->vt, row, cells, 1.0f);
    for (int64_t s = 0; s < 2; s++) {
        int32_t mx = -1;
        for (int64_t t = 0; t < T; t++)
            if (seq[t] == s && pos[t] > mx) mx = pos[t];
        for (int64_t j = mx + 1; j < r->cps; j++)
            for (int64_t e = 0; e < row; e++) {
                if (r->kt == OB_TYPE_F32) ((float *)kc)[(s * r->cps + j) * row + e] = NAN;
                if (r->vt == OB_TYPE_F32) ((float *)vc)[(s * r->cps + j) * row + e] = NAN;
            }
    }
    float *sk = ops_f32(b, r->H, 1.5f);
    for (int h = 0; h < r->H; h++) {
        if (r->sinks == SINK_BIG) sk[h] = 12.0f + (float)h; /* the sink takes nearly all the weight */
        if (r->sinks == SINK_NEG_INF) sk[h] = h % 2 ? -INFINITY : sk[h];
        if (r->sinks == SINK_TIE) sk[h] = 0.0f; /* q = 0 below: every score is 0 too */
    }
    const int64_t nq[3] = {r->hd, r->H, T}, nc[2] = {row, cells}, n1[1] = {1}, ns[1] = {r->H};
    float *q = ops_f32(b, r->hd * r->H * T, 1.0f);
    if (r->sinks == SINK_TIE) memset(q, 0, sizeof(float) * (size_t)(r->hd * r->H * T));
    ob_tensor *o = ob_attention(b->g, ops_leaf(b, "q", OB_TYPE_F32, 3, nq, q), ops_leaf(b, "kc", r->kt, 2, nc, kc),
                                ops_leaf(b, "vc", r->vt, 2, nc, vc), ops_leaf_i32(b, "pos", T, pos),
                                ops_leaf_i32(b, "seq", T, seq), ops_leaf(b, "tok", OB_TYPE_F32, 1, n1, ops_own(b, 4)),
                                r->cps, r->n_kv, r->window, true, 1.0f / sqrtf((float)r->hd), r->cap);
    o->src[6] = ops_leaf(b, "sinks", OB_TYPE_F32, 1, ns, sk);
    ops_check(b, o, OPS_TOL(4e-6, 2e-5));
    /* the GPUs' bounds of ops_attention.c */
    ops_tol_on(b, OPS_BIT(OPS_VK), OPS_TOL(1e-5, 1e-4));
    ops_tol_on(b, OPS_BIT(OPS_CUDA), OPS_MREL(sink_fa_shape(r) ? 2e-3 : 2e-5));
}

/* Head size 4, two cells, scores 1 and 2, sink s: out = (e^1 v0 + e^2 v1) / (e^1 + e^2 + e^s). */
static void sink_known_ref(ops_build *b, const void *p) {
    (void)p;
    const float *y = b->chk[0]->data;
    const double den = exp(1.0) + exp(2.0) + exp(1.5), p0 = exp(1.0) / den, p1 = exp(2.0) / den;
    CHECKF(fabs(y[0] - (3 * p0 - p1)) < 1e-5 && fabs(y[1] - (4 * p0 + 5 * p1)) < 1e-5 && y[2] == 0 && y[3] == 0,
           "%s: %g %g", b->name, y[0], y[1]);
}

static void sink_known_build(ops_build *b, const void *p) {
    (void)p;
    float *q = ops_own(b, sizeof(float) * 4), *k = ops_own(b, sizeof(float) * 8), *v = ops_own(b, sizeof(float) * 8);
    float *s = ops_own(b, sizeof(float));
    const float qv[4] = {1, 2, 0, 0}, kv[8] = {1, 0, 0, 0, 0, 1, 0, 0}, vv[8] = {3, 4, 0, 0, -1, 5, 0, 0};
    memcpy(q, qv, sizeof(qv));
    memcpy(k, kv, sizeof(kv));
    memcpy(v, vv, sizeof(vv));
    s[0] = 1.5f;
    const int32_t pos[1] = {1}, seq[1] = {0};
    const int64_t nq[3] = {4, 1, 1}, nc[2] = {4, 2}, n1[1] = {1};
    ob_tensor *o = ob_attention(b->g, ops_leaf(b, "q", OB_TYPE_F32, 3, nq, q), ops_leaf(b, "k", OB_TYPE_F32, 2, nc, k),
                                ops_leaf(b, "v", OB_TYPE_F32, 2, nc, v), ops_leaf_i32(b, "pos", 1, pos),
                                ops_leaf_i32(b, "seq", 1, seq), ops_leaf(b, "tok", OB_TYPE_F32, 1, n1, ops_own(b, 4)), 2, 1,
                                0, true, 1.0f, 0.0f);
    o->src[6] = ops_leaf(b, "sinks", OB_TYPE_F32, 1, n1, s);
    ops_check(b, o, OPS_TOL(1e-6, 1e-5));
    b->ref_check = sink_known_ref;
}

/* ---- GLU: the clamped SwiGLU --------------------------------------------------------------- */

typedef struct oai_row {
    int64_t ne[3];
    float scale; /* of the draws: 8 puts a good share past the limit of 7 */
    bool special;
} oai_row;

static void oai_build(ops_build *b, const void *p) {
    const oai_row *r = p;
    const int64_t n = r->ne[0] * r->ne[1] * r->ne[2];
    float *g = ops_f32(b, n, r->scale), *u = ops_f32(b, n, r->scale);
    if (r->special && n >= 8) {
        /* NaN (kept), +inf (clamped to the limit), the limit itself, just past it, -limit */
        static const float gs[8] = {NAN, INFINITY, 7.0f, 7.0001f, -7.0f, -30.0f, 0.0f, -0.0f};
        static const float us[8] = {0.5f, 2.0f, 7.0f, -7.0001f, INFINITY, -INFINITY, NAN, 3.0f};
        memcpy(g, gs, sizeof(gs));
        memcpy(u, us, sizeof(us));
    }
    ob_tensor *o = ob_glu_swiglu_oai(b->g, ops_leaf(b, "gate", OB_TYPE_F32, 3, r->ne, g), ops_leaf(b, "up", OB_TYPE_F32, 3, r->ne, u),
                                     1.702f, 7.0f);
    ops_check(b, o, OPS_TOL(1e-6, 1e-5));
}

/* Known values: g = 1, u = 0.5: sigmoid(1.702) * 1.5; g = 10, u = -10 (both clamped):
 * 7 sigmoid(11.914) * -6. */
static void oai_known_ref(ops_build *b, const void *p) {
    (void)p;
    const float *y = b->chk[0]->data;
    const double w0 = 1.5 / (1.0 + exp(-1.702)), w1 = -6.0 * 7.0 / (1.0 + exp(-1.702 * 7.0));
    CHECKF(fabs(y[0] - w0) < 1e-6 && fabs(y[1] - w1) < 1e-5, "%s: %.9g %.9g, want %.9g %.9g", b->name, y[0], y[1], w0, w1);
}

static void oai_known_build(ops_build *b, const void *p) {
    (void)p;
    float *g = ops_own(b, sizeof(float) * 2), *u = ops_own(b, sizeof(float) * 2);
    g[0] = 1.0f, g[1] = 10.0f, u[0] = 0.5f, u[1] = -10.0f;
    const int64_t ne[1] = {2};
    ops_check(b, ob_glu_swiglu_oai(b->g, ops_leaf(b, "g", OB_TYPE_F32, 1, ne, g), ops_leaf(b, "u", OB_TYPE_F32, 1, ne, u), 1.702f, 7.0f),
              OPS_TOL(1e-6, 1e-5));
    b->ref_check = oai_known_ref;
}

/* ---- ADD_ID -------------------------------------------------------------------------------- */

typedef struct add_id_row {
    int64_t N, E, k, T;
    bool bad; /* slots naming no expert: y passes unchanged */
} add_id_row;

static void add_id_build(ops_build *b, const void *p) {
    const add_id_row *r = p;
    const int64_t ny[3] = {r->N, r->k, r->T}, nb[2] = {r->N, r->E};
    ob_tensor *o = ob_add_id(b->g, ops_leaf_f32(b, "y", 3, ny, 1.0f), ops_leaf_f32(b, "bias", 2, nb, 1.0f),
                             ops_gate_leaf(b, r->E, r->k, r->T, r->bad));
    ops_check(b, o, OPS_BITS); /* one float add */
}

/* ---- the gpt-oss block --------------------------------------------------------------------- */

typedef struct block_row {
    ob_type t; /* the experts' type (router and biases stay F32, as converters keep them) */
    int64_t H, F, E, k, T;
} block_row;

static void block_build(ops_build *b, const void *p) {
    const block_row *r = p;
    const int64_t nh[2] = {r->H, r->T}, nr[2] = {r->H, r->E}, nu[3] = {r->H, r->F, r->E}, nd[3] = {r->F, r->H, r->E};
    const int64_t ne[1] = {r->E}, nbf[2] = {r->F, r->E}, nbh[2] = {r->H, r->E};
    ob_tensor *h = ops_leaf_f32(b, "h", 2, nh, 1.0f);
    ob_tensor *router = ops_leaf(b, "router", OB_TYPE_F32, 2, nr, ops_typed(b, OB_TYPE_F32, r->H, r->E, 0.3f));
    ob_tensor *logits = ob_add(b->g, ob_matmul(b->g, router, h), ops_leaf_f32(b, "router_b", 1, ne, 0.5f));
    ob_tensor *gate = ob_moe_gate(b->g, logits, NULL, (int)r->k, OB_MOE_SOFTMAX, true, 1.0f);
    /* gate/up of scale 0.5 over H = 96: values of a few units, some past the limit of 7 */
    ob_tensor *g = ob_matmul_id(b->g, ops_leaf(b, "gate_exps", r->t, 3, nu, ops_typed(b, r->t, r->H, r->F * r->E, 0.5f)), h, gate);
    g = ob_add_id(b->g, g, ops_leaf_f32(b, "gate_b", 2, nbf, 1.0f), gate);
    ob_tensor *u = ob_matmul_id(b->g, ops_leaf(b, "up_exps", r->t, 3, nu, ops_typed(b, r->t, r->H, r->F * r->E, 0.5f)), h, gate);
    u = ob_add_id(b->g, u, ops_leaf_f32(b, "up_b", 2, nbf, 1.0f), gate);
    ob_tensor *a = ob_glu_swiglu_oai(b->g, g, u, 1.702f, 7.0f);
    ob_tensor *d = ob_matmul_id(b->g, ops_leaf(b, "down_exps", r->t, 3, nd, ops_typed(b, r->t, r->F, r->H * r->E, 0.1f)), a, gate);
    d = ob_add_id(b->g, d, ops_leaf_f32(b, "down_b", 2, nbh, 1.0f), gate);
    ob_tensor *o = ob_moe_sum(b->g, d, gate);
    /* F32 and MXFP4 weights take F32 activations on the CPU (MXFP4: dequantized rows); the
     * others int8 ones twice over (x, then the SwiGLU output) */
    const bool f32_act = r->t == OB_TYPE_F32 || r->t == OB_TYPE_MXFP4;
    ops_check(b, o, r->t == OB_TYPE_F16 || f32_act ? OPS_MREL(2e-3) : OPS_MREL(3e-2));
    if (f32_act) ops_tol_on(b, OPS_BIT(OPS_CPU), OPS_MREL(2e-5));
}

/* ---- the tables ---------------------------------------------------------------------------- */

static sink_row g_sink[192];
static int g_nsink;

/* The attention paths that only a backend switch reaches: Vulkan's attn_dec.comp with its
 * splits merged by the last (no solo walk), four heads a workgroup, one split, and
 * attention.comp merged by a second pass or by the last split; CUDA's k_attn on F16 caches
 * (not k_attn_h), the merge launch (no last-arrival merge), one split (the block writes the
 * output), k_attn_pf where flash attention would take the prefill. */
static const char *const g_sink_knobs[] = {
    "ONEBIT_VK_ATTN_SOLO=0", "ONEBIT_VK_ATTN_GW=4 ONEBIT_VK_ATTN_SOLO=0", "ONEBIT_VK_ATTN_SPLIT=1",
    "ONEBIT_VK_ATTN_LAST=0 ONEBIT_VK_ATTN_CELLS=128", "ONEBIT_VK_ATTN_DEC=0 ONEBIT_VK_ATTN_CELLS=128",
    "ONEBIT_CUDA_ATTN_H=0", "ONEBIT_CUDA_FUSE=0", "ONEBIT_CUDA_ATTN_SPLIT=1", "ONEBIT_CUDA_FA=0",
};

/* knobs: NULL, or one of g_sink_knobs; det: batch-invariant mode (every T on the split
 * decode kernels). */
static void add_sink(ops_list *l, sink_row r, const char *knobs, bool det) {
    if (g_nsink == (int)OB_ARRAY_LEN(g_sink)) { fprintf(stderr, "ops_gptoss: g_sink full\n"); exit(2); }
    g_sink[g_nsink] = r;
    static const char *const kinds[] = {"random", "big", "-inf", "tie"};
    ops_case *c = ops_add(l, sink_build, &g_sink[g_nsink++],
                          "ATTENTION sinks %s K %s V %s hd=%d H=%d/%d T=%d cells=%d window %d cap %g%s%s%s", kinds[r.sinks],
                          ob_type_name(r.kt), ob_type_name(r.vt), r.hd, r.H, r.n_kv, r.T, r.cps, r.window, r.cap,
                          det ? " deterministic" : "", knobs ? " " : "", knobs ? knobs : "");
    c->knobs = knobs;
    c->det = det;
}

void ops_add_gptoss(ops_list *l) {
    const ob_type F32 = OB_TYPE_F32, F16 = OB_TYPE_F16, Q8 = OB_TYPE_Q8_0;
    /* gpt-oss's heads (64 wide, 8 query heads per kv head), its window of 128 inside a
     * 300-cell history, full attention; every cache type; decode, a small batch and a
     * prefill (CUDA's tensor cores for F16 and Q8_0); small odd heads */
    static const ob_type kv[3][2] = {{OB_TYPE_F32, OB_TYPE_F32}, {OB_TYPE_F16, OB_TYPE_F16}, {OB_TYPE_Q8_0, OB_TYPE_F16}};
    static const int Ts[] = {1, 9, 40};
    for (int c = 0; c < 3; c++)
        for (size_t t = 0; t < OB_ARRAY_LEN(Ts); t++)
            for (int w = 0; w < 2; w++) {
                const sink_row r = {kv[c][0], kv[c][1], 64, 8, 1, Ts[t], 300, w ? 128 : 0, 0.0f, SINK_RANDOM};
                add_sink(l, r, NULL, false);
                add_sink(l, r, NULL, true);
                for (size_t k = 0; k < OB_ARRAY_LEN(g_sink_knobs); k++) {
                    const bool vk = !strncmp(g_sink_knobs[k], "ONEBIT_VK_", 10), fa = strstr(g_sink_knobs[k], "_FA=") != NULL;
                    /* Vulkan's switches at decode (T = 9 and 40 take attention.comp, unsplit);
                     * CUDA's flash-attention switch where it would apply, the others at
                     * decode and small batches */
                    if (vk ? Ts[t] != 1 : fa ? !sink_fa_shape(&r) : Ts[t] > 16) continue;
                    add_sink(l, r, g_sink_knobs[k], false);
                }
            }
    add_sink(l, (sink_row){F32, F32, 12, 6, 3, 7, 40, 5, 0.0f, SINK_RANDOM}, NULL, false);
    add_sink(l, (sink_row){F16, Q8, 64, 4, 2, 5, 80, 0, 30.0f, SINK_RANDOM}, NULL, false);
    for (int s = SINK_BIG; s <= SINK_TIE; s++) {
        add_sink(l, (sink_row){F32, F32, 32, 4, 2, 1, 100, 0, 0.0f, s}, NULL, false);
        add_sink(l, (sink_row){F16, F16, 32, 4, 2, 9, 100, 16, 0.0f, s}, NULL, false);
        add_sink(l, (sink_row){F16, F16, 64, 4, 2, 40, 100, 16, 0.0f, s}, NULL, false);
        add_sink(l, (sink_row){F16, F16, 64, 8, 1, 1, 300, 0, 0.0f, s}, "ONEBIT_VK_ATTN_SOLO=0", false);
        add_sink(l, (sink_row){F16, F16, 64, 8, 1, 1, 300, 0, 0.0f, s}, "ONEBIT_CUDA_FUSE=0", false);
    }
    ops_add(l, sink_known_build, NULL, "ATTENTION sinks known value");

    static const oai_row oai[] = {
        {{67, 5, 3}, 8.0f, true}, {{300, 5, 1}, 4.0f, false}, {{2880, 3, 1}, 8.0f, true}, {{1, 1, 1}, 9.0f, false},
        {{4097, 1, 1}, 8.0f, false},
    };
    for (size_t i = 0; i < OB_ARRAY_LEN(oai); i++)
        ops_add(l, oai_build, &oai[i], "GLU swiglu_oai %lldx%lldx%lld scale %g%s", (long long)oai[i].ne[0],
                (long long)oai[i].ne[1], (long long)oai[i].ne[2], oai[i].scale, oai[i].special ? " nan/inf/limit" : "");
    ops_add(l, oai_known_build, NULL, "GLU swiglu_oai known values");

    static const add_id_row ids[] = {
        {37, 8, 2, 5, false}, {37, 8, 3, 6, true}, {2880, 32, 4, 3, false}, {96, 4, 4, 33, false}, {1, 1, 1, 1, false},
    };
    for (size_t i = 0; i < OB_ARRAY_LEN(ids); i++)
        ops_add(l, add_id_build, &ids[i], "ADD_ID N=%lld E=%lld k=%lld T=%lld%s", (long long)ids[i].N, (long long)ids[i].E,
                (long long)ids[i].k, (long long)ids[i].T, ids[i].bad ? " ids naming no expert" : "");

    /* the block at gpt-oss's proportions (rows of 32-blocks that are not 256-blocks, 4 of the
     * experts), its MXFP4 experts and the types a requantized file may hold */
    static const ob_type types[] = {OB_TYPE_F32, OB_TYPE_MXFP4, OB_TYPE_F16, OB_TYPE_Q8_0};
    static block_row blocks[OB_ARRAY_LEN(types) * 3];
    int nb = 0;
    for (size_t i = 0; i < OB_ARRAY_LEN(types); i++) {
        static const int64_t bts[] = {1, 5, 33};
        for (size_t s = 0; s < 3; s++) {
            block_row *r = &blocks[nb++];
            *r = (block_row){types[i], 96, 64, 8, 4, bts[s]};
            ops_add(l, block_build, r, "gpt-oss block %s H=%lld F=%lld E=%lld k=%lld T=%lld", ob_type_name(r->t),
                    (long long)r->H, (long long)r->F, (long long)r->E, (long long)r->k, (long long)r->T);
        }
    }
}
