/* The sequence ops: ROPE (both modes, partial rotation, frequency factors and mscale, far
 * positions), KV_STORE (every cache type, rows off the 32-element chunk, tokens outside
 * the cache; the quantized types' blocks as the reference quantizer writes them, from rows
 * made to reach their corner cases), ATTENTION (every cache type pair, GQA, windows,
 * soft-cap, ALiBi, causal and
 * whole-sequence, decode deep in a cache and prefill over several sequences, head sizes
 * from 4 to 256; unseen F32 cells hold NaN, so reading one fails), POOL and SAMPLE. */
#include "ops_cases.h"
#include "testutil_sample.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- ROPE ---------------------------------------------------------------------------------- */

/* Position sets: test_cpu_ops' (far: 100000), test_vulkan_ops' (30011: a float angle alone
 * is ~1e-3 off), test_cuda_ops' (four tokens). */
static const int32_t g_pos[3][5] = {{0, 1, 17, 4095, 100000}, {0, 1, 17, 30011, 511}, {0, 17, 1000, 30011, 0}};

typedef struct rope_row {
    int hd, H, T, n_rot, mode;
    float fscale, mscale;
    bool factors;
    int posset;
} rope_row;

static void rope_tol(ops_build *b) {
    ops_tol_on(b, OPS_BIT(OPS_CPU), OPS_TOL(1e-6, 1e-5));
    /* float angles: ~3e-5 rad lost at position 511 next to the reference's double */
    ops_tol_on(b, OPS_BIT(OPS_VK), OPS_TOL(2e-4, 1e-4));
    ops_tol_on(b, OPS_BIT(OPS_CUDA), OPS_MREL(1e-6)); /* angles in double */
}

static void rope_build(ops_build *b, const void *p) {
    const rope_row *r = p;
    const int64_t ne[3] = {r->hd, r->H, r->T}, nf[1] = {r->n_rot / 2};
    ob_tensor *x = ops_leaf_f32(b, "x", 3, ne, 1.0f);
    ob_tensor *f = r->factors ? ops_leaf(b, "factors", OB_TYPE_F32, 1, nf, ops_rope_factors(b, r->n_rot / 2)) : NULL;
    ob_tensor *o = ob_rope(b->g, x, ops_leaf_i32(b, "pos", r->T, g_pos[r->posset]), f, r->n_rot, r->mode, 10000.0f,
                           r->fscale, r->mscale);
    ops_check(b, o, OPS_EXACT);
    rope_tol(b);
}

/* Known values: pair 0 of a head at position 3 turns by 3 / factor_0 radians, both outputs
 * scaled by mscale; elements past n_rot pass through unscaled; without factors pair 1
 * turns by 3 * 10000^(-1/2). */
static void rope_known_ref(ops_build *b, const void *p) {
    const bool ff = *(const int *)p;
    const float *y = b->chk[0]->data;
    if (ff)
        CHECKF(fabsf(y[0] - 2 * cosf(0.75f)) < 1e-6f && fabsf(y[1] - 2 * sinf(0.75f)) < 1e-6f && y[4] == 5 && y[5] == 7,
               "%s: %g %g %g %g", b->name, y[0], y[1], y[4], y[5]);
    else
        CHECKF(fabsf(y[0] - cosf(3)) < 1e-6f && fabsf(y[1] - sinf(3)) < 1e-6f && fabsf(y[2] - (float)cos(0.03)) < 1e-6f &&
                   fabsf(y[3] - (float)sin(0.03)) < 1e-6f,
               "%s: %g %g %g %g", b->name, y[0], y[1], y[2], y[3]);
}

static void rope_known_build(ops_build *b, const void *p) {
    const bool ff = *(const int *)p;
    float *x = ops_own(b, sizeof(float) * 6), *fac = ops_own(b, sizeof(float) * 2);
    const float xv[6] = {1, 0, 1, 0, 5, 7};
    memcpy(x, xv, sizeof(xv));
    fac[0] = 4;
    fac[1] = 2;
    const int64_t ne[3] = {ff ? 6 : 4, 1, 1}, nf[1] = {2};
    const int32_t pos[1] = {3};
    ob_tensor *o = ob_rope(b->g, ops_leaf(b, "x", OB_TYPE_F32, 3, ne, x), ops_leaf_i32(b, "pos", 1, pos),
                           ff ? ops_leaf(b, "factors", OB_TYPE_F32, 1, nf, fac) : NULL, 4, 0, 10000.0f, 1.0f, ff ? 2.0f : 1.0f);
    ops_check(b, o, OPS_EXACT);
    rope_tol(b);
    b->ref_check = rope_known_ref;
}

/* ---- KV_STORE ------------------------------------------------------------------------------ */

typedef struct kv_row {
    ob_type t;
    int64_t row;
    int outside; /* 1: token 4 past its sequence's cells; 2: in a sequence past the cache */
    bool stress; /* x's 32-element blocks of the kinds kv_stress makes */
} kv_row;

/* The block types and BF16 store the reference quantizer's bytes on every backend
 * (kvq.glsl, kvq.cuh): compared exactly. */
static void kv_tol(ops_build *b, ob_type t) {
    if (t != OB_TYPE_F32 && t != OB_TYPE_F16) {
        ops_tol_on(b, OPS_GPU, OPS_EXACT);
        return;
    }
    ops_tol_on(b, OPS_BIT(OPS_VK), OPS_TOL(1e-7, 1e-6));
    ops_tol_on(b, OPS_BIT(OPS_CUDA), OPS_MREL(1e-6));
}

/* n floats whose 32-element blocks take turns at a quantizer's corner cases: normal draws,
 * tiny ones, zeros, a constant (Q4_1 / Q5_1's zero range), values on a grid of eighths
 * (codes exactly between two steps), and draws with one far outlier. */
static float *kv_stress(ops_build *b, int64_t n) {
    float *x = ops_f32(b, n, 1.0f);
    for (int64_t k = 0; k < n / 32; k++)
        for (int64_t j = 0; j < 32; j++) {
            float *v = x + 32 * k + j;
            switch (k % 6) {
            case 1: *v *= 1e-3f; break;
            case 2: *v = 0.0f; break;
            case 3: *v = 0.7f; break;
            case 4: *v = floorf(*v * 8.0f) / 8.0f; break;
            case 5: if (j == 11) *v = -100.0f; break;
            default: break;
            }
        }
    return x;
}

/* How far a stored value may read back from the input, as a share of its block's largest
 * magnitude: a step of the type's grid (Q4_0's far end is an eighth of it away). */
static float kv_step(ob_type t) {
    switch (t) {
    case OB_TYPE_Q4_0: case OB_TYPE_Q4_1: case OB_TYPE_IQ4_NL: return 0.14f;
    case OB_TYPE_Q5_0: case OB_TYPE_Q5_1: return 0.07f;
    case OB_TYPE_Q8_0: return 0.005f;
    default: return 0.0f;
    }
}

/* Independent of the reference: the stored row reads back as the input (to the cache
 * type's precision); with a token outside the cache, nothing of it stored anywhere. */
static void kv_ref(ops_build *b, const void *p) {
    const kv_row *r = p;
    const ob_tensor *cache = b->chk[1], *x = b->chk[0]->src[0];
    const size_t rb = ob_row_size(r->t, r->row);
    float *back = malloc(sizeof(float) * (size_t)r->row);
    ob_dequantize(r->t, (const char *)cache->data + rb * (size_t)(2 * 10 + 7), back, r->row);
    int bad = 0;
    for (int64_t i = 0; i < r->row; i++) {
        const float *xr = (const float *)x->data + 3 * r->row, want = xr[i];
        float amax = 0.0f;
        for (int64_t j = i - i % 32; j < i - i % 32 + 32 && j < r->row; j++) amax = fmaxf(amax, fabsf(xr[j]));
        bad += !(fabsf(back[i] - want) <= 0.02f + 0.01f * fabsf(want) + kv_step(r->t) * amax);
    }
    CHECKF(bad == 0, "%s: %d elements of the stored row read back off the input", b->name, bad);
    CHECKF(*(const float *)b->chk[0]->data == 0.0f, "%s: token %g", b->name, *(const float *)b->chk[0]->data);
    /* a token past its sequence's cells would land in the next sequence's first cell (20):
     * the reference skips it, so the whole cache is as before but for the other rows */
    if (r->outside == 1) {
        const size_t at = rb * 20;
        CHECKF(!memcmp((const char *)cache->data + at, (const char *)b->user + at, rb), "%s: the reference stored the token past its cells",
               b->name);
    }
    free(back);
}

static void kv_build(ops_build *b, const void *p) {
    const kv_row *r = p;
    const int64_t cps = 10, n_seq = 3, T = 5, nx[3] = {r->row / 2, 2, T}, nc[2] = {r->row, cps * n_seq};
    int32_t pos[5] = {0, 1, 2, 7, 9}, seq[5] = {0, 0, 0, 2, 1};
    if (r->outside == 1) pos[4] = (int32_t)cps;
    if (r->outside == 2) seq[4] = (int32_t)n_seq;
    void *c0 = ops_typed(b, r->t, r->row, cps * n_seq, 1.0f);
    ob_tensor *cache = ops_leaf(b, "cache", r->t, 2, nc, c0);
    b->user = ops_own(b, ob_nbytes(cache));
    memcpy(b->user, c0, ob_nbytes(cache));
    ob_tensor *xt = r->stress ? ops_leaf(b, "x", OB_TYPE_F32, 3, nx, kv_stress(b, r->row * T)) : ops_leaf_f32(b, "x", 3, nx, 1.0f);
    ob_tensor *o = ob_kv_store(b->g, xt, cache, ops_leaf_i32(b, "pos", T, pos),
                               ops_leaf_i32(b, "seq", T, seq), (int)cps);
    /* the token orders later reads; its value (0 from the reference and the CPU) is left
     * open to the GPU backends (Vulkan's stays unwritten) */
    ops_check(b, o, OPS_EXACT);
    ops_tol_on(b, OPS_GPU, OPS_SKIP);
    ops_check(b, cache, OPS_EXACT);
    kv_tol(b, r->t);
    b->ref_check = kv_ref;
}

/* ---- ATTENTION ----------------------------------------------------------------------------- */

enum {
    AT_GRID, /* test_cpu_ops' and test_vulkan_ops' tokens: prefill 8 tokens of 3 sequences (24 cells
                each), or decode one token at 287 of sequence 1 (300 cells each) */
    AT_TAIL, /* test_cuda_ops' attn_case: token t of sequence t % n_seq, at cps - T + t (causal) or
                t / n_seq; at start + t / n_seq where start >= 0 */
};

typedef struct attn_row {
    ob_type kt, vt;
    int hd, H, n_kv, T, n_seq, cps, layout, start;
    bool causal;
    int window;
    float cap, alibi;
    bool store; /* the T tokens' k and v stored first (KV_STORE), the K cache checked too */
} attn_row;

static bool fa_shape(const attn_row *r) {
    const bool ct = (r->kt == OB_TYPE_F16 || r->kt == OB_TYPE_Q8_0) && (r->vt == OB_TYPE_F16 || r->vt == OB_TYPE_Q8_0);
    return r->T >= 32 && ct && (r->hd == 64 || r->hd == 128);
}

static void attn_tol(ops_build *b, const attn_row *r) {
    /* test_cpu_ops' bound on its grid; longer sums (more cells, larger heads) elsewhere */
    ops_tol_on(b, OPS_BIT(OPS_CPU), r->layout == AT_GRID ? OPS_TOL(1e-6, 1e-5) : OPS_TOL(4e-6, 2e-5));
    ops_tol_on(b, OPS_BIT(OPS_VK), OPS_TOL(1e-5, 1e-4));
    /* prefill on tensor cores (op_flash_attn.cu): q and P rounded to f16 */
    ops_tol_on(b, OPS_BIT(OPS_CUDA), OPS_MREL(fa_shape(r) ? 2e-3 : 2e-5));
}

static void attn_tokens(const attn_row *r, int32_t *pos, int32_t *seq) {
    static const int32_t pp[8] = {5, 6, 7, 8, 9, 0, 1, 17}, sp[8] = {0, 0, 0, 0, 0, 2, 2, 1};
    for (int t = 0; t < r->T; t++) {
        if (r->layout == AT_GRID) {
            pos[t] = r->T == 1 ? 287 : pp[t];
            seq[t] = r->T == 1 ? 1 : sp[t];
        } else {
            seq[t] = t % r->n_seq;
            pos[t] = r->start >= 0 ? r->start + t / r->n_seq : r->causal ? r->cps - r->T + t : t / r->n_seq;
        }
    }
}

static void attn_build(ops_build *b, const void *p) {
    const attn_row *r = p;
    const int64_t row = (int64_t)r->hd * r->n_kv, cells = (int64_t)r->cps * r->n_seq, T = r->T;
    int32_t *pos = ops_own(b, sizeof(int32_t) * (size_t)T), *seq = ops_own(b, sizeof(int32_t) * (size_t)T);
    attn_tokens(r, pos, seq);
    void *kc = ops_typed(b, r->kt, row, cells, 1.0f), *vc = ops_typed(b, r->vt, row, cells, 1.0f);
    /* F32 cells no token may see hold NaN: a kernel that reads one fails */
    for (int64_t s = 0; s < r->n_seq && !r->store; s++) {
        int32_t mx = -1;
        for (int64_t t = 0; t < T; t++)
            if (seq[t] == s && pos[t] > mx) mx = pos[t];
        for (int64_t j = mx + 1; j < r->cps; j++)
            for (int64_t e = 0; e < row; e++) {
                if (r->kt == OB_TYPE_F32) ((float *)kc)[(s * r->cps + j) * row + e] = NAN;
                if (r->vt == OB_TYPE_F32) ((float *)vc)[(s * r->cps + j) * row + e] = NAN;
            }
    }
    const int64_t nq[3] = {r->hd, r->H, T}, nk[2] = {row, T}, nc[2] = {row, cells}, n1[1] = {1};
    ob_tensor *KC = ops_leaf(b, "kc", r->kt, 2, nc, kc), *VC = ops_leaf(b, "vc", r->vt, 2, nc, vc);
    ob_tensor *P = ops_leaf_i32(b, "pos", T, pos), *S = ops_leaf_i32(b, "seq", T, seq), *order;
    if (r->store) {
        ob_tensor *sk = ob_kv_store(b->g, ops_leaf_f32(b, "k", 2, nk, 1.0f), KC, P, S, r->cps);
        ob_tensor *sv = ob_kv_store(b->g, ops_leaf_f32(b, "v", 2, nk, 1.0f), VC, P, S, r->cps);
        order = ob_add(b->g, sk, sv);
    } else {
        order = ops_leaf(b, "tok", OB_TYPE_F32, 1, n1, ops_own(b, sizeof(float)));
    }
    ob_tensor *o = ob_attention(b->g, ops_leaf_f32(b, "q", 3, nq, 1.0f), KC, VC, P, S, order, r->cps, r->n_kv, r->window,
                                r->causal, r->layout == AT_GRID ? 1.0f / sqrtf((float)r->hd) : 0.125f, r->cap);
    o->fp[2] = r->alibi;
    ops_check(b, o, OPS_EXACT);
    attn_tol(b, r);
    if (r->store) {
        ops_check(b, KC, OPS_EXACT);
        kv_tol(b, r->kt);
        ops_check(b, VC, OPS_EXACT);
        kv_tol(b, r->vt);
    }
}

/* A single known case (head size 4, two cells): out = softmax([q.k0, q.k1]) . [v0, v1];
 * with a second token at position 2 of 2 cells (outside the cache): zeros. */
static void attn_known_ref(ops_build *b, const void *p) {
    const int outside = *(const int *)p;
    const float *y = b->chk[0]->data;
    const double p0 = exp(1.0) / (exp(1.0) + exp(2.0)), p1 = 1 - p0;
    CHECKF(fabs(y[0] - (3 * p0 - p1)) < 1e-5 && fabs(y[1] - (4 * p0 + 5 * p1)) < 1e-5 && y[2] == 0 && y[3] == 0, "%s: %g %g",
           b->name, y[0], y[1]);
    if (outside) CHECKF(y[4] == 0 && y[5] == 0 && y[6] == 0 && y[7] == 0, "%s: outside token %g %g", b->name, y[4], y[5]);
}

static void attn_known_build(ops_build *b, const void *p) {
    const int outside = *(const int *)p;
    float *q = ops_own(b, sizeof(float) * 8), *k = ops_own(b, sizeof(float) * 8), *v = ops_own(b, sizeof(float) * 8);
    const float qv[8] = {1, 2, 0, 0, -1, 0.5f, 0, 0}, kv[8] = {1, 0, 0, 0, 0, 1, 0, 0}, vv[8] = {3, 4, 0, 0, -1, 5, 0, 0};
    memcpy(q, qv, sizeof(qv));
    memcpy(k, kv, sizeof(kv));
    memcpy(v, vv, sizeof(vv));
    const int32_t pos[2] = {1, 2}, seq[2] = {0, 0};
    const int64_t T = outside ? 2 : 1, nq[3] = {4, 1, T}, nc[2] = {4, 2}, n1[1] = {1};
    ob_tensor *o = ob_attention(b->g, ops_leaf(b, "q", OB_TYPE_F32, 3, nq, q), ops_leaf(b, "k", OB_TYPE_F32, 2, nc, k),
                                ops_leaf(b, "v", OB_TYPE_F32, 2, nc, v), ops_leaf_i32(b, "pos", T, pos), ops_leaf_i32(b, "seq", T, seq),
                                ops_leaf(b, "tok", OB_TYPE_F32, 1, n1, ops_own(b, sizeof(float))), 2, 1, 0, true, 1.0f, 0.0f);
    ops_check(b, o, OPS_EXACT);
    ops_tol_on(b, OPS_ALL, OPS_TOL(1e-6, 1e-5));
    b->ref_check = attn_known_ref;
}

/* ---- POOL and SAMPLE ----------------------------------------------------------------------- */

typedef struct pool_row {
    int64_t n, T, n_seq;
    int type, norm;
} pool_row;

static void pool_build(ops_build *b, const void *p) {
    const pool_row *r = p;
    /* sequences interleaved with shuffled positions (the pick follows pos, not batch order);
     * sequence 3 has no token (zeros, also normalised) */
    static const int32_t seq9[9] = {1, 0, 2, 1, 0, 0, 2, 1, 0}, pos9[9] = {4, 2, 0, 3, 0, 1, 1, 5, 7};
    const int64_t nx[2] = {r->n, r->T};
    float *x = ops_f32(b, r->n * r->T, 1.0f);
    for (int64_t i = 0; i < r->n * r->T; i++) x[i] += 0.25f;
    ob_tensor *o = ob_pool(b->g, ops_leaf(b, "x", OB_TYPE_F32, 2, nx, x), ops_leaf_i32(b, "seq", r->T, seq9),
                           ops_leaf_i32(b, "pos", r->T, pos9), (ob_pool_type)r->type, r->norm, (int)r->n_seq);
    ops_check(b, o, OPS_TOL(1e-6, 1e-5));
    ops_tol_on(b, OPS_BIT(OPS_CUDA), OPS_MREL(1e-5));
}

typedef struct sample_row {
    int n, R;
    bool constant; /* every logit equal: the candidates are the k lowest ids */
} sample_row;

/* Independent of the reference: constant rows pick ids 0, 0, 39 and 1022. */
static void sample_const_ref(ops_build *b, const void *p) {
    const int32_t *tk = b->chk[0]->data;
    CHECKF(tk[0] == 0 && tk[1] == 0 && tk[2] == 39 && tk[3] == 1022, "%s: %d %d %d %d", b->name, tk[0], tk[1], tk[2], tk[3]);
}

static void sample_build(ops_build *b, const void *p) {
    const sample_row *r = p;
    float *lg = ops_own(b, sizeof(float) * (size_t)r->n * (size_t)r->R), *par = ops_own(b, sizeof(float) * (size_t)r->R * OB_SAMPLE_NPARAM);
    if (r->constant) ob_test_sample_constant(lg, par);
    else ob_test_sample_inputs(r->n, r->R, true, &b->rng, lg, par);
    const int64_t nl[2] = {r->n, r->R}, np[2] = {OB_SAMPLE_NPARAM, r->R};
    ops_check(b, ob_sample(b->g, ops_leaf(b, "logits", OB_TYPE_F32, 2, nl, lg), ops_leaf(b, "params", OB_TYPE_F32, 2, np, par)),
              OPS_EXACT);
    if (r->constant) b->ref_check = sample_const_ref;
}

/* ---- the tables ---------------------------------------------------------------------------- */

static rope_row g_rope[64];
static kv_row g_kv[48];
static attn_row g_attn[1024];
static pool_row g_pool[12];
static int g_nrope, g_nkv, g_nattn, g_npool;
static const int g_known[2] = {0, 1};

static void add_rope(ops_list *l, rope_row r) {
    g_rope[g_nrope] = r;
    ops_add(l, rope_build, &g_rope[g_nrope++], "ROPE hd=%d H=%d T=%d n_rot=%d mode %d scale %g%s mscale %g pos %d", r.hd, r.H,
            r.T, r.n_rot, r.mode, r.fscale, r.factors ? " factors" : "", r.mscale, g_pos[r.posset][3]);
}

static ops_case *add_attn(ops_list *l, attn_row r, const char *knobs) {
    if (g_nattn == (int)OB_ARRAY_LEN(g_attn)) { fprintf(stderr, "ops_attention: g_attn full\n"); exit(2); }
    g_attn[g_nattn] = r;
    ops_case *c = ops_add(l, attn_build, &g_attn[g_nattn++],
                          "ATTENTION K %s V %s hd=%d H=%d/%d T=%d seqs=%d cells=%d%s%s window %d cap %g alibi %g%s%s%s",
                          ob_type_name(r.kt), ob_type_name(r.vt), r.hd, r.H, r.n_kv, r.T, r.n_seq, r.cps,
                          r.layout == AT_GRID ? (r.T == 1 ? " decode" : " prefill") : "", r.causal ? " causal" : " whole",
                          r.window, r.cap, r.alibi, r.store ? " after KV_STORE" : "", knobs ? " " : "", knobs ? knobs : "");
    c->knobs = knobs;
    return c;
}

/* test_vulkan_ops' attention knobs: splits of 128 cells so the 300-cell decode splits, every
 * split walking its chunks (solo 0) or split 0 walking a few alone (solo 8); one split;
 * splits merged by a second pass; attention.comp where attn_dec.comp applies; up to four
 * query heads a workgroup. */
static const char *const g_vk_attn_knobs[] = {
    "ONEBIT_VK_ATTN_CELLS=128 ONEBIT_VK_ATTN_SOLO=0", "ONEBIT_VK_ATTN_CELLS=128 ONEBIT_VK_ATTN_SOLO=8",
    "ONEBIT_VK_ATTN_SPLIT=1", "ONEBIT_VK_ATTN_LAST=0 ONEBIT_VK_ATTN_CELLS=128",
    "ONEBIT_VK_ATTN_DEC=0 ONEBIT_VK_ATTN_CELLS=128", "ONEBIT_VK_ATTN_GW=4 ONEBIT_VK_ATTN_SOLO=0",
};

/* The cache types beside F32 / F16 / Q8_0 (llama-server's -ctk / -ctv): the generic paths
 * (CPU's converted rows, Vulkan's attention.comp, CUDA's k_attn and k_attn_pf). */
static const char *const g_ct_knobs[] = {
    "ONEBIT_VK_ATTN_CELLS=128", "ONEBIT_VK_ATTN_LAST=0 ONEBIT_VK_ATTN_CELLS=128", "ONEBIT_VK_ATTN_SPLIT=1",
    "ONEBIT_CUDA_ATTN_U=0", "ONEBIT_CUDA_ATTN_SPLIT=1", "ONEBIT_CUDA_FUSE=0",
};

/* Each type as keys beside F16 values, as values beside F16 keys, and as both, every token
 * stored first (the caches checked too): one token deep in a 400-cell cache (Vulkan's tiles
 * of 128 and splits, CUDA's splits: every knob of g_ct_knobs, and batch-invariant mode), 6
 * tokens of 3 sequences across cell 128, 40 tokens of one across cell 64 (CUDA's k_attn_pf),
 * and 9 tokens of 2 sequences whole-sequence with a window and a soft-cap; head sizes of 1,
 * 2 and 3 blocks (BF16 also 12 and 20: any width of 4). */
static void add_cache_types(ops_list *l) {
    static const ob_type ct[] = {OB_TYPE_BF16, OB_TYPE_Q4_0, OB_TYPE_Q4_1, OB_TYPE_Q5_0, OB_TYPE_Q5_1, OB_TYPE_IQ4_NL};
    const ob_type F16 = OB_TYPE_F16;
    for (size_t i = 0; i < OB_ARRAY_LEN(ct); i++)
        for (int side = 0; side < 3; side++) {
            const ob_type kt = side == 1 ? F16 : ct[i], vt = side == 0 ? F16 : ct[i];
            const int hd = side == 0 ? 64 : side == 1 ? 96 : 32;
            const attn_row dec = {kt, vt, hd, 4, 2, 1, 1, 400, AT_TAIL, 317, true, 0, 0, 0, true};
            add_attn(l, dec, NULL);
            for (size_t k = 0; k < OB_ARRAY_LEN(g_ct_knobs); k++) add_attn(l, dec, g_ct_knobs[k]);
            add_attn(l, (attn_row){kt, vt, hd, 4, 2, 6, 3, 300, AT_TAIL, 126, true, 0, 0, 0, true}, NULL);
            add_attn(l, (attn_row){kt, vt, hd, 4, 2, 6, 3, 300, AT_TAIL, 126, true, 0, 0, 0, true}, NULL)->det = true;
            add_attn(l, (attn_row){kt, vt, hd, 6, 2, 40, 1, 128, AT_TAIL, 60, true, 0, 0, 0, true}, NULL);
            add_attn(l, (attn_row){kt, vt, hd, 4, 4, 9, 2, 64, AT_TAIL, -1, false, 3, 30, 0, true}, NULL);
        }
    for (int hd = 12; hd <= 20; hd += 8)
        for (int side = 0; side < 2; side++) {
            const ob_type kt = side ? F16 : OB_TYPE_BF16, vt = side ? OB_TYPE_BF16 : F16;
            add_attn(l, (attn_row){kt, vt, hd, 4, 2, 1, 1, 300, AT_TAIL, 200, true, 0, 0, 0, true}, NULL);
            add_attn(l, (attn_row){kt, vt, hd, 4, 2, 12, 2, 64, AT_TAIL, -1, false, 0, 0, 0, true}, NULL);
        }
}

static void add_attention(ops_list *l) {
    static const ob_type kv[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_Q8_0};
    static const int heads[][2] = {{4, 4}, {4, 2}, {6, 1}};
    /* the grid of test_cpu_ops and test_vulkan_ops (Vulkan's head size 256 for GQA decode too) */
    for (size_t k = 0; k < 3; k++)
        for (size_t h = 0; h < 3; h++)
            for (int window = 0; window <= 3; window += 3)
                for (int causal = 0; causal < 2; causal++)
                    for (int cap = 0; cap < 2; cap++)
                        for (int dec = 0; dec < 2; dec++)
                            for (int big = 0; big < 2; big++) {
                                if (big && (!dec || h != 1 || kv[k] == OB_TYPE_Q8_0)) continue;
                                const int hd = kv[k] == OB_TYPE_Q8_0 ? 64 : big ? 256 : dec ? 40 : 36;
                                const attn_row r = {kv[k], kv[k], hd, heads[h][0], heads[h][1], dec ? 1 : 8, 3, dec ? 300 : 24,
                                                    AT_GRID, -1, causal, window, cap ? 1.5f : 0.0f, 0, false};
                                add_attn(l, r, NULL);
                                /* Vulkan's split decode paths; the attn_dec.comp cases (causal, head
                                 * size a multiple of 8 in 32..256) on attention.comp and in groups */
                                const bool dcase = causal && hd % 8 == 0 && hd >= 32 && hd <= 256;
                                for (size_t v = 0; v < OB_ARRAY_LEN(g_vk_attn_knobs); v++) {
                                    if (v == 1 && (!dec || !causal || cap)) continue;
                                    if ((v == 2 || v == 3) && !dec) continue;
                                    if ((v == 4 || v == 5) && !dcase) continue;
                                    if (v == 0 && !dec) continue;
                                    add_attn(l, r, g_vk_attn_knobs[v]);
                                }
                            }
    /* ALiBi: test_vulkan_ops' (6 heads at head size 12 take both slope families; GQA with a
     * soft-cap; 16 heads, bias 8, a window) and test_cuda_ops' encoder ones (12 heads, GQA) */
    static const int ah[][2] = {{6, 6}, {4, 2}, {16, 16}};
    for (int h = 0; h < 3; h++)
        for (int causal = 0; causal < 2; causal++)
            for (int dec = 0; dec < 2; dec++) {
                const attn_row r = {h == 1 ? OB_TYPE_F16 : OB_TYPE_F32, h == 1 ? OB_TYPE_F16 : OB_TYPE_F32, h == 0 ? 12 : 32,
                                    ah[h][0], ah[h][1], dec ? 1 : 8, 3, dec ? 300 : 24, AT_GRID, -1, causal, h == 2 ? 3 : 0,
                                    h == 1 ? 1.5f : 0.0f, h == 2 ? 8.0f : 0.5f + (float)h, false};
                add_attn(l, r, NULL);
            }
    for (int c = 0; c < 4; c++) {
        const bool causal = c >= 2;
        const attn_row r = {OB_TYPE_F16, OB_TYPE_F16, 64, c % 2 ? 4 : 12, c % 2 ? 2 : 12, causal ? 1 : 12, 2, 40, AT_TAIL,
                            causal ? 37 : -1, causal, 0, 0, 8.0f, false};
        add_attn(l, r, NULL);
    }
    /* test_cuda_ops' KV_STORE + ATTENTION cases, the K cache checked too */
    const ob_type F32 = OB_TYPE_F32, F16 = OB_TYPE_F16, Q8 = OB_TYPE_Q8_0;
    for (int a = 0; a < 3; a++)
        for (int v = 0; v < 3; v++) add_attn(l, (attn_row){kv[a], kv[v], 64, 4, 2, 1, 1, 700, AT_TAIL, -1, true, 0, 0, 0, true}, NULL);
    static const attn_row tail[] = {
        /* kt vt hd H kv T seqs cells layout start causal window cap alibi store */
        {F16, F16, 64, 4, 2, 3, 2, 300, AT_TAIL, -1, true, 0, 0, 0, true},    /* split decode, 2 sequences */
        {F16, Q8, 64, 4, 2, 16, 16, 96, AT_TAIL, 40, true, 0, 0, 0, true},   /* split decode, 16 sequences */
        {Q8, F16, 64, 4, 2, 13, 1, 300, AT_TAIL, -1, true, 0, 0, 0, true},   /* 13 tokens of one sequence */
        {F32, Q8, 64, 4, 2, 20, 2, 64, AT_TAIL, -1, true, 5, 0, 0, true},    /* prefill, window */
        {F32, F32, 64, 4, 2, 12, 1, 64, AT_TAIL, -1, false, 0, 0, 0, true},  /* encoder */
        {F16, F32, 64, 4, 2, 12, 2, 64, AT_TAIL, -1, false, 3, 30, 0, true}, /* encoder, window, soft-cap */
        {F32, F32, 64, 4, 2, 2, 1, 1000, AT_TAIL, -1, true, 100, 20, 0, true},
        {F32, F32, 16, 4, 2, 12, 1, 64, AT_TAIL, -1, false, 0, 0, 0, true}, /* small encoder heads */
        {F16, F16, 16, 4, 2, 12, 2, 64, AT_TAIL, -1, false, 0, 0, 0, true},
        {F16, F32, 16, 4, 2, 1, 1, 300, AT_TAIL, -1, true, 0, 0, 0, true},
        {F32, F16, 16, 4, 2, 3, 1, 300, AT_TAIL, -1, true, 0, 0, 0, true},
        {F32, F32, 12, 4, 2, 12, 1, 64, AT_TAIL, -1, false, 0, 0, 0, true},
        {F16, F16, 12, 4, 2, 12, 2, 64, AT_TAIL, -1, false, 0, 0, 0, true},
        {F16, F32, 12, 4, 2, 1, 1, 300, AT_TAIL, -1, true, 0, 0, 0, true},
        {F32, F16, 12, 4, 2, 3, 1, 300, AT_TAIL, -1, true, 0, 0, 0, true},
        {F16, F16, 128, 4, 2, 1, 1, 3000, AT_TAIL, 2500, true, 0, 0, 0, true}, /* deep in the cache */
        {F16, F16, 128, 4, 2, 1, 1, 1000, AT_TAIL, 900, true, 300, 20, 0, true},
        {F16, F16, 128, 4, 2, 3, 3, 500, AT_TAIL, 400, true, 0, 0, 0, true},
        {Q8, Q8, 128, 4, 2, 1, 1, 3000, AT_TAIL, 2500, true, 0, 0, 0, true},
        {Q8, F16, 128, 4, 2, 5, 5, 600, AT_TAIL, 450, true, 0, 0, 0, true},
        {F16, F16, 256, 4, 2, 1, 1, 2000, AT_TAIL, 1500, true, 0, 0, 0, true},
        {F16, Q8, 256, 4, 2, 1, 1, 2000, AT_TAIL, 1700, true, 0, 0, 0, true},
        {F16, F16, 64, 4, 2, 12, 2, 64, AT_TAIL, -1, false, 0, 0, 0, true},
        {F16, Q8, 64, 4, 2, 1, 1, 4096, AT_TAIL, 0, true, 0, 0, 0, true}, /* early in a large cache */
        {F16, Q8, 64, 4, 2, 1, 1, 4096, AT_TAIL, 13, true, 0, 0, 0, true},
        {F16, Q8, 64, 4, 2, 1, 1, 4096, AT_TAIL, 26, true, 0, 0, 0, true},
        {F16, Q8, 64, 4, 2, 1, 1, 4096, AT_TAIL, 39, true, 0, 0, 0, true},
        {F32, F16, 64, 4, 2, 4, 2, 2048, AT_TAIL, 300, true, 0, 0, 0, true},
        /* prefill on CUDA's tensor cores (T >= 32, F16/Q8_0 caches, head size 64 or 128) */
        {F16, F16, 64, 4, 2, 33, 1, 64, AT_TAIL, 0, true, 0, 0, 0, true},     /* partial row tile, empty history */
        {Q8, Q8, 64, 4, 2, 64, 2, 200, AT_TAIL, 17, true, 0, 0, 0, true},     /* two interleaved sequences */
        {F16, Q8, 64, 4, 2, 100, 1, 300, AT_TAIL, 150, true, 40, 0, 0, true}, /* window inside long history */
        {Q8, F16, 64, 4, 2, 512, 2, 1024, AT_TAIL, 300, true, 0, 0, 0, true}, /* cell gap between sequences */
        {F16, F16, 64, 4, 2, 100, 2, 64, AT_TAIL, 0, false, 7, 0, 0, true},   /* encoder, window */
        {F16, F16, 128, 4, 2, 512, 1, 512, AT_TAIL, 0, true, 0, 0, 0, true},  /* prefill from empty */
        {Q8, F16, 128, 4, 2, 100, 2, 128, AT_TAIL, 60, true, 20, 30, 0, true}, /* window + soft-cap */
        {F16, Q8, 128, 4, 2, 64, 2, 64, AT_TAIL, 0, false, 0, 0, 0, true},   /* encoder */
        {F16, F16, 128, 8, 2, 33, 1, 64, AT_TAIL, 5, true, 0, 0, 8, true},   /* ALiBi */
        {Q8, Q8, 128, 4, 4, 100, 1, 256, AT_TAIL, 100, true, 0, 0, 0, true},  /* no GQA */
        {Q8, F16, 64, 6, 2, 100, 2, 256, AT_TAIL, 40, true, 0, 0, 0, true},   /* 3 heads per kv head */
    };
    for (size_t i = 0; i < OB_ARRAY_LEN(tail); i++) add_attn(l, tail[i], NULL);
    add_cache_types(l);
    /* qwen3-8b's prefill shape: CUDA's tensor-core kernel; ~2 G multiply-adds of CPU reference
     * (and a minute of lavapipe) */
    add_attn(l, (attn_row){F16, F16, 128, 32, 8, 512, 1, 512, AT_TAIL, 0, true, 0, 0, 0, true}, NULL)->only = OPS_BIT(OPS_CUDA);
}

void ops_add_attention(ops_list *l) {
    /* ROPE: test_cpu_ops' grid (factors, modes, partial rotation, position 100000) ... */
    for (int ff = 0; ff < 2; ff++)
        for (int mode = 0; mode <= 2; mode += 2)
            for (int nr = 0; nr < 2; nr++)
                add_rope(l, (rope_row){64, 3, 5, nr ? 32 : 64, mode, nr ? 0.25f : 1.0f, ff ? 1.1386294f : 1.0f, ff, 0});
    /* ... test_vulkan_ops' (each of factors and mscale alone and both) ... */
    for (int mode = 0; mode <= 2; mode += 2)
        for (int partial = 0; partial < 2; partial++)
            for (int var = 0; var < 4; var++)
                add_rope(l, (rope_row){64, 3, 5, partial ? 32 : 64, mode, partial ? 0.5f : 1.0f, var >= 2 ? 1.1386f : 1.0f,
                                       var == 1 || var == 3, 1});
    /* ... test_cuda_ops' (n_rot 48 of 64, four tokens) and odd shapes */
    for (int c = 0; c < 10; c++) {
        const int mode = c % 2 ? 2 : 0, n_rot = c / 2 == 1 ? 64 : 48;
        add_rope(l, (rope_row){64, 3, 4, n_rot, mode, 0.5f, c / 2 == 2 || c / 2 == 4 ? 1.0f : 1.1386f, c / 2 != 3 && c / 2 != 4, 2});
    }
    add_rope(l, (rope_row){2, 1, 1, 2, 0, 1.0f, 1.0f, false, 1});
    add_rope(l, (rope_row){6, 5, 3, 4, 2, 1.0f, 1.0f, true, 1});
    add_rope(l, (rope_row){256, 2, 5, 256, 2, 1.0f, 1.0f, false, 0});
    for (int ff = 0; ff < 2; ff++) ops_add(l, rope_known_build, &g_known[ff], "ROPE known values%s", ff ? " factors, mscale" : "");
    /* KV_STORE: every cache type at rows of 128; F32/F16 rows of 72 (a partial 32-chunk) and
     * 70 (not a multiple of 4); a token past its sequence's cells or in a sequence past the
     * cache: refused by the CPU backend, skipped by the reference and the GPU backends */
    static const ob_type kt[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_Q8_0, OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_F16, OB_TYPE_F32};
    for (size_t i = 0; i < OB_ARRAY_LEN(kt); i++)
        for (int out = 0; out < 3; out++) {
            if (out && i >= 3) continue;
            g_kv[g_nkv] = (kv_row){kt[i], i < 3 ? 128 : i < 5 ? 72 : 70, out, false};
            ops_case *c = ops_add(l, kv_build, &g_kv[g_nkv++], "KV_STORE %s row %lld%s", ob_type_name(kt[i]),
                                  (long long)(i < 3 ? 128 : i < 5 ? 72 : 70),
                                  out == 1 ? " token past its cells" : out == 2 ? " token past the cache" : "");
            if (out) {
                c->err_on = OPS_BIT(OPS_CPU);
                c->err_status = OB_ERR_CONTEXT;
            }
        }
    /* ... every cache type from rows of corner cases (kv_stress) at 160 (five blocks), BF16
     * also at 72 and 70; a token past its sequence's cells */
    static const ob_type st[] = {OB_TYPE_Q8_0, OB_TYPE_Q4_0, OB_TYPE_Q4_1, OB_TYPE_Q5_0, OB_TYPE_Q5_1, OB_TYPE_IQ4_NL,
                                 OB_TYPE_BF16, OB_TYPE_BF16, OB_TYPE_BF16};
    for (size_t i = 0; i < OB_ARRAY_LEN(st); i++)
        for (int out = 0; out < 2; out++) {
            const int64_t row = i < 7 ? 160 : i == 7 ? 72 : 70;
            g_kv[g_nkv] = (kv_row){st[i], row, out, true};
            ops_case *c = ops_add(l, kv_build, &g_kv[g_nkv++], "KV_STORE %s row %lld corner cases%s", ob_type_name(st[i]),
                                  (long long)row, out ? " token past its cells" : "");
            if (out) {
                c->err_on = OPS_BIT(OPS_CPU);
                c->err_status = OB_ERR_CONTEXT;
            }
        }
    add_attention(l);
    for (int o = 0; o < 2; o++) {
        ops_case *c = ops_add(l, attn_known_build, &g_known[o], "ATTENTION known value%s", o ? ", a token outside the cache" : "");
        if (o) {
            c->err_on = OPS_BIT(OPS_CPU);
            c->err_status = OB_ERR_CONTEXT;
        }
    }
    /* POOL: mean / first / last, with and without L2 norm; odd single-token sequence */
    for (int type = OB_POOL_MEAN; type <= OB_POOL_LAST; type++)
        for (int norm = 0; norm < 2; norm++) {
            g_pool[g_npool] = (pool_row){1003, 9, 4, type, norm};
            ops_add(l, pool_build, &g_pool[g_npool++], "POOL type %d norm %d n=1003 T=9 seqs=4", type, norm);
        }
    g_pool[g_npool] = (pool_row){1, 1, 2, OB_POOL_MEAN, 1};
    ops_add(l, pool_build, &g_pool[g_npool++], "POOL type 1 norm 1 n=1 T=1 seqs=2");
    /* SAMPLE: exact tokens; row 0 greedy over NaNs and a -0 / +0 maximum */
    static const sample_row sr[] = {{151936, 24, false}, {1000, 24, false}, {4099, 12, false}, {7, 12, false},
                                    {OB_TEST_SAMPLE_CONST_N, 4, true}};
    for (size_t i = 0; i < OB_ARRAY_LEN(sr); i++)
        ops_add(l, sample_build, &sr[i], "SAMPLE vocab %d rows %d%s", sr[i].n, sr[i].R, sr[i].constant ? " constant" : "");
}
