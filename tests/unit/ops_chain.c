/* Fused chains: multi-node graphs shaped as a decoder layer's, so the backends' fusions
 * fire (CUDA's launch_fused in cuda_backend.cu, Vulkan's record_at in vk_backend.c and
 * vk_ops.c), each checked against the reference computed node by node, and (chain) on the
 * family's backend with fusion off, the fused output within fuse_mrel of the unfused one:
 *   ADD -> RMS_NORM / LAYER_NORM (the sum read again)       CUDA, Vulkan
 *   ADD -> RMS_NORM -> int8 matvec, matvecs sharing x, GLU -> int8 matvec   CUDA, Vulkan
 *   [RMS_NORM ->] ROPE, [RMS_NORM ->] ROPE, KV_STORE, KV_STORE [-> ATTENTION]  CUDA (one
 *     launch, or folded into the one-token attention), Vulkan (norm+rope(+store), the fold)
 *   ATTENTION -> int8 matvec of its output                   CUDA, Vulkan
 *   matmul + residual ADD [+ the next norm], gate/up/GLU [+ down]   Vulkan (knobs)
 * plus a plain chain of many small nodes (the CPU's pool) and one of mixed ops. gpt-oss's
 * forms ride on the same chains: attention sinks in the q/k/v tail and the attention before
 * a matvec, its clamped SwiGLU (at a limit of 1, so the clamps act) in the GLU chains. */
#include "ops_cases.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

/* An int8 matvec's bound relative to its largest output (test_cuda_ops' 5e-2), for every
 * backend: the CPU and the GPUs all quantize x to int8 for these weights. */
#define MV_MREL OPS_MREL(5e-2)

/* ---- ADD -> norm ------------------------------------------------------------------------- */

typedef struct addnorm_row {
    int64_t n, rows;
    bool layer;
} addnorm_row;

/* The residual ADD fused into the norm after it, the sum read again (o * s), so the fused
 * dispatch must write it: norm.comp's register widths (4096, 8192) and loops (8196, 1002). */
static void addnorm_build(ops_build *b, const void *p) {
    const addnorm_row *r = p;
    const int64_t ne[2] = {r->n, r->rows}, nw[1] = {r->n};
    float *x = ops_f32(b, r->n * r->rows, 2.0f);
    for (int64_t i = 0; i < r->n * r->rows; i++) x[i] += 0.5f;
    ob_tensor *s = ob_add(b->g, ops_leaf(b, "x", OB_TYPE_F32, 2, ne, x), ops_leaf_f32(b, "y", 2, ne, 1.0f));
    ob_tensor *w = ops_leaf_f32(b, "w", 1, nw, 1.0f);
    ob_tensor *o = r->layer ? ob_layer_norm(b->g, s, w, ops_leaf_f32(b, "bias", 1, nw, 1.0f), 1e-5f) : ob_rms_norm(b->g, s, w, 1e-6f);
    ops_check(b, ob_mul(b->g, o, s), OPS_TOL(1e-5, 1e-4));
    ops_tol_on(b, OPS_BIT(OPS_CUDA), OPS_MREL(2e-6));
}

/* ---- ADD -> RMS_NORM -> int8 matvecs (CUDA's k_rms_fused4 register layouts) ---------------- */

typedef struct normmv_row {
    int64_t K, T;
} normmv_row;

static void normmv_build(ops_build *b, const void *p) {
    const normmv_row *r = p;
    const int64_t N = 64, nx[2] = {r->K, r->T}, nkn[2] = {r->K, N}, nnk[2] = {N, r->K}, nk[1] = {r->K};
    ob_tensor *s1 = ob_add(b->g, ops_leaf_f32(b, "x", 2, nx, 1.0f), ops_leaf_f32(b, "r", 2, nx, 1.0f));
    ob_tensor *h = ob_rms_norm(b->g, s1, ops_leaf_f32(b, "nw", 1, nk, 1.0f), 1e-6f);
    ob_tensor *y = ob_matmul(b->g, ops_leaf(b, "w1", OB_TYPE_Q8_0, 2, nkn, ops_typed(b, OB_TYPE_Q8_0, r->K, N, 0.5f)), h);
    ob_tensor *z = ob_matmul(b->g, ops_leaf(b, "w2", OB_TYPE_Q8_0, 2, nnk, ops_typed(b, OB_TYPE_Q8_0, N, r->K, 0.5f)), y);
    ops_check(b, ob_add(b->g, s1, z), MV_MREL);
}

/* ---- a decode layer's matvecs (test_cuda_ops' test_fused) ------------------------------------ */

static void decode_build(ops_build *b, const void *p) {
    const int64_t T = *(const int64_t *)p, K = 1024, F = 512;
    const int64_t nx[2] = {K, T}, nkf[2] = {K, F}, nfk[2] = {F, K}, nk[1] = {K};
    ob_tensor *s1 = ob_add(b->g, ops_leaf_f32(b, "x", 2, nx, 1.0f), ops_leaf_f32(b, "r", 2, nx, 1.0f));
    ob_tensor *h = ob_rms_norm(b->g, s1, ops_leaf_f32(b, "n1", 1, nk, 1.0f), 1e-6f);
    ob_tensor *a = ob_matmul(b->g, ops_leaf(b, "wa", OB_TYPE_Q4_K, 2, nkf, ops_typed(b, OB_TYPE_Q4_K, K, F, 0.5f)), h);
    ob_tensor *c = ob_matmul(b->g, ops_leaf(b, "wb", OB_TYPE_Q4_K, 2, nkf, ops_typed(b, OB_TYPE_Q4_K, K, F, 0.5f)), h);
    ob_tensor *d = ob_matmul(b->g, ops_leaf(b, "wc", OB_TYPE_Q6_K, 2, nkf, ops_typed(b, OB_TYPE_Q6_K, K, F, 0.5f)), h);
    ob_tensor *e = ob_glu(b->g, a, c, OB_ACT_SILU);
    ob_tensor *dn = ob_matmul(b->g, ops_leaf(b, "wd", OB_TYPE_Q6_K, 2, nfk, ops_typed(b, OB_TYPE_Q6_K, F, K, 0.5f)), e);
    ob_tensor *s2 = ob_add(b->g, s1, dn);
    ob_tensor *h2 = ob_rms_norm(b->g, s2, ops_leaf_f32(b, "n2", 1, nk, 1.0f), 1e-6f);
    ob_tensor *y = ob_matmul(b->g, ops_leaf(b, "wy", OB_TYPE_Q8_0, 2, nkf, ops_typed(b, OB_TYPE_Q8_0, K, F, 0.5f)), h2);
    ops_check(b, ob_add(b->g, y, d), MV_MREL);
}

/* ---- RMS_NORM -> ROPE [-> KV_STORE] --------------------------------------------------------- */

typedef struct normrope_row {
    int hd, n_rot, mode, T;
    float fscale, mscale;
    bool weight, factors, reader; /* reader: the norm's output read again (no fusion) */
    int posset;                  /* 0: Vulkan's positions (30011, 511), 1: CUDA's (30000) */
    ob_type store;               /* the rope stored into a cache of this type (F32 / F16 / Q8_0); 0: none */
} normrope_row;

static void normrope_build(ops_build *b, const void *p) {
    const normrope_row *r = p;
    static const int32_t pv[5] = {0, 1, 17, 30011, 511}, pc[4] = {0, 17, 1000, 30000}, ps[5] = {0, 3, 8, 7, 9};
    static const int32_t ss[5] = {0, 0, 1, 2, 1};
    const int64_t H = r->store ? 2 : 3, T = r->T, ne[3] = {r->hd, H, T}, nw[1] = {r->hd}, nf[1] = {r->n_rot / 2};
    ob_tensor *P = ops_leaf_i32(b, "pos", T, r->store ? ps : r->posset ? pc : pv);
    ob_tensor *h = ob_rms_norm(b->g, ops_leaf_f32(b, "x", 3, ne, 2.0f), r->weight ? ops_leaf_f32(b, "w", 1, nw, 1.0f) : NULL, 1e-6f);
    ob_tensor *F = r->factors ? ops_leaf(b, "factors", OB_TYPE_F32, 1, nf, ops_rope_factors(b, r->n_rot / 2)) : NULL;
    ob_tensor *o = ob_rope(b->g, h, P, F, r->n_rot, r->mode, 10000.0f, r->fscale, r->mscale);
    if (r->store) {
        const int64_t cps = 10, nc[2] = {r->hd * H, 3 * cps};
        ob_tensor *cache = ops_leaf(b, "cache", r->store, 2, nc, ops_typed(b, r->store, r->hd * H, 3 * cps, 1.0f));
        ob_kv_store(b->g, o, cache, P, ops_leaf_i32(b, "seq", T, ss), (int)cps);
        const double a = r->store == OB_TYPE_Q8_0 ? 0.03 : r->store == OB_TYPE_F16 ? 2e-3 : 2e-4;
        ops_check(b, cache, OPS_TOL(a, 1e-4));
        return;
    }
    if (r->reader) o = ob_add(b->g, o, h);
    ops_check(b, o, OPS_TOL(2e-4, 1e-4));
    ops_tol_on(b, OPS_BIT(OPS_CPU), OPS_TOL(1e-5, 1e-5));
    ops_tol_on(b, OPS_BIT(OPS_CUDA), OPS_MREL(2e-6));
}

/* ---- a decode layer's q/k/v tail (test_cuda_ops' qkv_case_x) --------------------------------- */

typedef struct qkv_row {
    bool qk_norm;
    int hd;
    ob_type kt, vt;
    int T, mode;
    int extra; /* 1: the q norm's output read again; 2: the raw k and v read again after */
    int yarn;  /* 1: shared factors + mscale near position 30011; 2: k's mscale apart; 3: k's factors apart */
    bool sinks; /* gpt-oss's attention sinks (ATTENTION's src6) */
} qkv_row;

static void qkv_build(ops_build *b, const void *p) {
    const qkv_row *r = p;
    const int64_t hd = r->hd, H = 4, Hk = 2, T = r->T, cps = r->yarn ? 30016 : 192, cells = 2 * cps, row = hd * Hk;
    int32_t pos[8], seq[8];
    for (int t = 0; t < T; t++) {
        seq[t] = t % 2;
        pos[t] = r->yarn ? 30011 - 7 * (t % 2) - t / 2 : 140 + 7 * (t % 2) + t / 2;
    }
    const float qms = r->yarn ? 1.1386f : 1.0f, kms = r->yarn == 2 ? 1.0f : qms;
    const int64_t nq[2] = {hd * H, T}, nk[2] = {row, T}, nbq[1] = {hd * H}, nbk[1] = {row}, nw[1] = {hd};
    const int64_t nc[2] = {row, cells}, q3[3] = {hd, H, T}, k3[3] = {hd, Hk, T}, nf[1] = {hd / 2};
    ob_graph *g = b->g;
    ob_tensor *q = ob_add(g, ops_leaf_f32(b, "xq", 2, nq, 1.0f), ops_leaf_f32(b, "bq", 1, nbq, 0.5f));
    ob_tensor *k = ob_add(g, ops_leaf_f32(b, "xk", 2, nk, 1.0f), ops_leaf_f32(b, "bk", 1, nbk, 0.5f));
    ob_tensor *v = ob_add(g, ops_leaf_f32(b, "xv", 2, nk, 1.0f), ops_leaf_f32(b, "bv", 1, nbk, 0.5f));
    ob_tensor *rk = k, *rv = v;
    ob_tensor *KC = ops_leaf(b, "kc", r->kt, 2, nc, ops_typed(b, r->kt, row, cells, 1.0f));
    ob_tensor *VC = ops_leaf(b, "vc", r->vt, 2, nc, ops_typed(b, r->vt, row, cells, 1.0f));
    ob_tensor *P = ops_leaf_i32(b, "pos", T, pos), *S = ops_leaf_i32(b, "seq", T, seq);
    q = ob_view(g, q, 3, q3);
    k = ob_view(g, k, 3, k3);
    if (r->qk_norm) q = ob_rms_norm(g, q, ops_leaf_f32(b, "wq", 1, nw, 1.0f), 1e-6f);
    ob_tensor *qn = q;
    ob_tensor *FQ = r->yarn ? ops_leaf(b, "ff", OB_TYPE_F32, 1, nf, ops_rope_factors(b, hd / 2)) : NULL;
    ob_tensor *FK = r->yarn == 3 ? ops_leaf(b, "ff2", OB_TYPE_F32, 1, nf, ops_rope_factors(b, hd / 2)) : FQ;
    q = ob_rope(g, q, P, FQ, (int)hd, r->mode, 10000.0f, 1.0f, qms);
    if (r->qk_norm) k = ob_rms_norm(g, k, ops_leaf_f32(b, "wk", 1, nw, 1.0f), 1e-6f);
    k = ob_rope(g, k, P, FK, (int)hd, r->mode, 10000.0f, 1.0f, kms);
    ob_tensor *ks = ob_kv_store(g, k, KC, P, S, (int)cps), *vs = ob_kv_store(g, v, VC, P, S, (int)cps);
    vs->src[4] = ks;
    ob_tensor *a = ob_attention(g, q, KC, VC, P, S, vs, (int)cps, (int)Hk, 0, true, 0.125f, 0);
    const int64_t nh[1] = {H};
    if (r->sinks) a->src[6] = ops_leaf_f32(b, "sinks", 1, nh, 2.0f);
    if (r->extra == 1) a = ob_add(g, a, ob_view(g, qn, 2, nq));
    ob_tensor *raw = r->extra == 2 ? ob_add(g, rk, rv) : NULL;
    /* a Q8_0 K cache of normed rows: a GPU's rsqrtf may move a block's scale an ulp from
     * the reference's, so that output is held looser (test_cuda_ops: 1e-3) */
    const bool k8 = r->kt == OB_TYPE_Q8_0 && r->qk_norm;
    ops_check(b, a, OPS_TOL(1e-5, 1e-4));
    ops_tol_on(b, OPS_BIT(OPS_CPU), OPS_TOL(1e-5, 1e-5));
    ops_tol_on(b, OPS_BIT(OPS_CUDA), OPS_MREL(k8 ? 1e-3 : 2e-5));
    /* an F16 K row an f16 ulp off (below) moves the output by about 1e-4 of its range
     * (NVIDIA's Vulkan compiler contracts the rope and norm differently from lavapipe) */
    if (r->kt == OB_TYPE_F16) ops_tol_on(b, OPS_BIT(OPS_CUDA) | OPS_BIT(OPS_VK), OPS_MREL(1e-4));
    /* caches: rows rounded from the same floats match exactly; a normed row may differ by a
     * float ulp, which at an f16 rounding boundary is an f16 ulp (2^-11) */
    const ops_tol kt = r->kt == OB_TYPE_Q8_0 ? OPS_TOL(0.03, 1e-6) : r->kt == OB_TYPE_F16 ? OPS_MREL(5e-4) : OPS_TOL(2e-4, 1e-4);
    ops_check(b, KC, kt);
    ops_check(b, VC, r->vt == OB_TYPE_Q8_0 ? OPS_TOL(0.03, 1e-6) : OPS_MREL(1e-6));
    if (raw) ops_check(b, raw, OPS_EXACT);
}

/* ---- ATTENTION -> int8 matvec of its output ----------------------------------------------- */

typedef struct attnmv_row {
    int T, cps, pos0;
    bool store, sinks;
} attnmv_row;

static void attnmv_build(ops_build *b, const void *p) {
    const attnmv_row *r = p;
    const int64_t hd = 64, H = 4, n_kv = 2, row = hd * n_kv, N = r->store ? 96 : 70, T = r->T;
    const int64_t nq[3] = {hd, H, T}, nk[2] = {row, T}, nc[2] = {row, r->cps}, nw[2] = {hd * H, N}, n1[1] = {1};
    int32_t pos[2] = {r->pos0, r->pos0 + 1}, seq[2] = {0, 0};
    ob_tensor *KC = ops_leaf(b, "kc", OB_TYPE_F16, 2, nc, ops_typed(b, OB_TYPE_F16, row, r->cps, 1.0f));
    ob_tensor *VC = ops_leaf(b, "vc", OB_TYPE_F16, 2, nc, ops_typed(b, OB_TYPE_F16, row, r->cps, 1.0f));
    ob_tensor *P = ops_leaf_i32(b, "pos", T, pos), *S = ops_leaf_i32(b, "seq", T, seq), *order;
    if (r->store) {
        ob_tensor *sk = ob_kv_store(b->g, ops_leaf_f32(b, "k", 2, nk, 1.0f), KC, P, S, r->cps);
        order = ob_add(b->g, sk, ob_kv_store(b->g, ops_leaf_f32(b, "v", 2, nk, 1.0f), VC, P, S, r->cps));
    } else {
        order = ops_leaf(b, "tok", OB_TYPE_F32, 1, n1, ops_own(b, sizeof(float)));
    }
    ob_tensor *a = ob_attention(b->g, ops_leaf_f32(b, "q", 3, nq, 1.0f), KC, VC, P, S, order, r->cps, (int)n_kv, 0, true,
                                0.125f, 0.0f);
    if (r->sinks) {
        /* sinks about 4: a tenth or more of the weight beside hundreds of cells, which the
         * int8 matvec's bound sees */
        const int64_t nh[1] = {H};
        float *sk = ops_f32(b, H, 1.0f);
        for (int64_t h = 0; h < H; h++) sk[h] += 4.0f;
        a->src[6] = ops_leaf(b, "sinks", OB_TYPE_F32, 1, nh, sk);
    }
    ob_tensor *y = ob_matmul(b->g, ops_leaf(b, "wo", OB_TYPE_Q4_K, 2, nw, ops_typed(b, OB_TYPE_Q4_K, hd * H, N, r->store ? 0.5f : 1.0f)), a);
    ops_check(b, y, MV_MREL);
}

/* ---- Vulkan's int8 fusions: norm / GLU / attention writing the next matvec's x ---------------- */

typedef struct vkmv_row {
    int kind;  /* 0: RMS_NORM -> matvec; 1: GLU -> matvec; 2: norm, gate, up, GLU [, down];
                  3: norm, matmul, residual ADD, norm [, matmul]; 4: the same with gate/up/GLU
                  [, down] after the second norm; 5: two matvecs of one x with a KV_STORE
                  writing x between them */
    ob_type t, dt; /* the matvec type; the down's (kind 2, 4) */
    int64_t N;
    int last;      /* kind 2/4: a down matmul after the GLU (2: its own type dt); kind 3: the
                      output (not the sum, read again) */
    bool oai;      /* kinds 1, 2, 4: gpt-oss's clamped SwiGLU for the SiLU GLU */
} vkmv_row;

/* The chains' GLU: SiLU, or gpt-oss's clamped SwiGLU at a limit of 1 (inputs of about unit
 * size cross it often). */
static ob_tensor *chain_glu(ob_graph *g, ob_tensor *gate, ob_tensor *up, bool oai) {
    return oai ? ob_glu_swiglu_oai(g, gate, up, 1.702f, 1.0f) : ob_glu(g, gate, up, OB_ACT_SILU);
}

static double mm_atol(ob_type t, int64_t K) {
    const bool q8 = t == OB_TYPE_Q4_K || t == OB_TYPE_Q6_K || t == OB_TYPE_Q8_0 || t == OB_TYPE_Q1_0 || t == OB_TYPE_TQ2_0;
    return (q8 ? 3e-2 : 2e-4) * sqrt((double)K);
}

static void vkmv_build(ops_build *b, const void *p) {
    const vkmv_row *r = p;
    ob_graph *g = b->g;
    const int64_t K = r->kind <= 1 ? 1024 : 512, M = 70;
    const int64_t T = r->kind == 0 ? 3 : 1, nx[2] = {K, T};
    const float ws = r->kind == 2 || r->kind == 4 ? 1.0f / sqrtf((float)K) : 1.0f;
    if (r->kind == 5) {
        const int64_t nw[2] = {K, 70}, nx2[2] = {K, 2};
        const int32_t pos[2] = {1, 0}, seq[2] = {0, 0};
        float *x = ops_f32(b, K * 2, 1.0f), *xn = ops_f32(b, K * 2, 1.0f);
        ops_round_q8(x, K * 2);
        ops_round_q8(xn, K * 2);
        ob_tensor *tx = ops_leaf(b, "x", OB_TYPE_F32, 2, nx2, x);
        ob_tensor *a = ob_matmul(g, ops_leaf(b, "w", OB_TYPE_Q6_K, 2, nw, ops_typed(b, OB_TYPE_Q6_K, K, 70, 1.0f)), tx);
        ob_kv_store(g, ops_leaf(b, "xn", OB_TYPE_F32, 2, nx2, xn), tx, ops_leaf_i32(b, "pos", 2, pos), ops_leaf_i32(b, "seq", 2, seq), 2);
        ob_tensor *o = ob_add(g, a, ob_matmul(g, ops_leaf(b, "w2", OB_TYPE_TQ2_0, 2, nw, ops_typed(b, OB_TYPE_TQ2_0, K, 70, 1.0f)), tx));
        ops_check(b, o, MV_MREL);
        ops_tol_on(b, OPS_BIT(OPS_VK), OPS_TOL(2e-5 * sqrt((double)K), 1e-5));
        ops_check(b, tx, OPS_EXACT);
        return;
    }
    ob_tensor *x = ops_leaf_f32(b, "x", 2, nx, 1.0f), *h, *o;
    double atol;
    if (r->kind <= 1) {
        h = r->kind ? chain_glu(g, x, ops_leaf_f32(b, "u", 2, nx, 1.0f), r->oai)
                    : ob_rms_norm(g, x, ops_leaf_f32(b, "nw", 1, nx, 1.0f), 1e-6f);
        const int64_t nw[2] = {K, 70};
        o = ob_matmul(g, ops_leaf(b, "w", r->t, 2, nw, ops_typed(b, r->t, K, 70, 1.0f)), h);
        atol = mm_atol(r->t, K);
    } else {
        h = ob_rms_norm(g, x, ops_leaf_f32(b, "nw0", 1, nx, 1.0f), 1e-6f);
        if (r->kind >= 3) {
            /* matmul + residual ADD, then the next norm */
            const int64_t N1 = r->kind == 3 ? r->N : K, nw1[2] = {K, N1}, nr[2] = {N1, 1};
            const ob_type t1 = r->kind == 3 ? r->t : OB_TYPE_Q8_0;
            ob_tensor *mm = ob_matmul(g, ops_leaf(b, "w1", t1, 2, nw1, ops_typed(b, t1, K, N1, r->kind == 3 ? 1.0f : ws)), h);
            ob_tensor *sum = ob_add(g, ops_leaf_f32(b, "res", 2, nr, r->kind == 3 ? 8.0f : 1.0f), mm);
            h = ob_rms_norm(g, sum, ops_leaf_f32(b, "nw", 1, nr, 1.0f), 1e-6f);
            if (r->kind == 3) {
                const int64_t n2[2] = {r->N, M};
                o = ob_matmul(g, ops_leaf(b, "w2", OB_TYPE_Q8_0, 2, n2, ops_typed(b, OB_TYPE_Q8_0, r->N, M, 1.0f)), h);
                /* the sum read last (a residual stream), so no later node takes its bytes */
                if (!r->last) o = ob_scale(g, sum, 1.0f);
                atol = r->last ? 2 * mm_atol(OB_TYPE_Q8_0, r->N) : 2 * mm_atol(r->t, K);
                ops_check(b, o, OPS_TOL(atol, 1e-3));
                ops_tol_on(b, OPS_BIT(OPS_CPU) | OPS_BIT(OPS_CUDA), MV_MREL);
                return;
            }
        }
        const int64_t nw[2] = {K, r->N}, nd[2] = {r->N, M};
        ob_tensor *gl = chain_glu(g, ob_matmul(g, ops_leaf(b, "wg", r->t, 2, nw, ops_typed(b, r->t, K, r->N, ws)), h),
                                  ob_matmul(g, ops_leaf(b, "wu", r->t, 2, nw, ops_typed(b, r->t, K, r->N, ws)), h), r->oai);
        const ob_type dt = r->last == 2 ? r->dt : OB_TYPE_Q8_0;
        o = r->last ? ob_matmul(g, ops_leaf(b, "wd", dt, 2, nd, ops_typed(b, dt, r->N, M, 1.0f)), gl) : gl;
        atol = r->last ? 2 * mm_atol(dt, r->N) : 3 * mm_atol(r->t, K) / sqrt((double)K);
    }
    ops_check(b, o, OPS_TOL(atol, r->kind >= 2 ? 1e-2 : 1e-4));
    ops_tol_on(b, OPS_BIT(OPS_CPU) | OPS_BIT(OPS_CUDA), MV_MREL);
}

/* ---- plain chains ----------------------------------------------------------------------- */

/* 500 ADDs of one row in a row (the CPU runs such small nodes on one thread, one barrier
 * for the lot): exact, each a single IEEE add. */
static void adds_build(ops_build *b, const void *p) {
    const int64_t ne[1] = {37};
    ob_tensor *t = ops_leaf_f32(b, "x", 1, ne, 1.0f), *tb = ops_leaf_f32(b, "b", 1, ne, 0.01f);
    for (int i = 0; i < 500; i++) t = ob_add(b->g, t, tb);
    ops_check(b, t, OPS_EXACT);
}

/* Several ops in one submission, each seeing the previous one's writes. */
static void mixed_build(ops_build *b, const void *p) {
    const int64_t K = 256, N = 96, T = 4, nx[2] = {K, T}, nw[2] = {K, N}, nb[1] = {N};
    ob_tensor *h = ob_rms_norm(b->g, ops_leaf_f32(b, "x", 2, nx, 1.0f), ops_leaf_f32(b, "nw", 1, nx, 1.0f), 1e-6f);
    h = ob_matmul(b->g, ops_leaf(b, "w", OB_TYPE_Q5_K, 2, nw, ops_typed(b, OB_TYPE_Q5_K, K, N, 1.0f)), h);
    h = ob_act_op(b->g, ob_add(b->g, h, ops_leaf_f32(b, "b", 1, nb, 1.0f)), OB_ACT_GELU);
    ops_check(b, ob_softmax(b->g, ob_scale(b->g, h, 0.5f)), OPS_TOL(1e-6, 1e-3));
    ops_tol_on(b, OPS_BIT(OPS_CPU) | OPS_BIT(OPS_CUDA), OPS_MREL(5e-2));
}

/* ---- the tables -------------------------------------------------------------------------- */

static addnorm_row g_addnorm[8];
static normmv_row g_normmv[10];
static const int64_t g_decode_T[] = {1, 3, 8};
static normrope_row g_normrope[64];
static const qkv_row g_qkv[] = {
    /* norm hd K V T mode extra yarn: every cache pair at 1 and 3 tokens, qwen3 and llama style */
    {true, 128, OB_TYPE_F16, OB_TYPE_F16, 1, 2, 0, 0, false}, {false, 64, OB_TYPE_F16, OB_TYPE_F16, 1, 0, 0, 0, false},
    {true, 128, OB_TYPE_F16, OB_TYPE_F16, 3, 2, 0, 0, false}, {false, 64, OB_TYPE_F16, OB_TYPE_F16, 3, 0, 0, 0, false},
    {true, 128, OB_TYPE_Q8_0, OB_TYPE_F32, 1, 2, 0, 0, false}, {false, 64, OB_TYPE_Q8_0, OB_TYPE_F32, 1, 0, 0, 0, false},
    {true, 128, OB_TYPE_Q8_0, OB_TYPE_F32, 3, 2, 0, 0, false}, {false, 64, OB_TYPE_Q8_0, OB_TYPE_F32, 3, 0, 0, 0, false},
    {true, 128, OB_TYPE_F32, OB_TYPE_Q8_0, 1, 2, 0, 0, false}, {false, 64, OB_TYPE_F32, OB_TYPE_Q8_0, 1, 0, 0, 0, false},
    {true, 128, OB_TYPE_F32, OB_TYPE_Q8_0, 3, 2, 0, 0, false}, {false, 64, OB_TYPE_F32, OB_TYPE_Q8_0, 3, 0, 0, 0, false},
    /* the q norm read again (no one-launch tail); the fold at head sizes 256 and 64, with the
     * output over raw v's bytes or apart (raw k and v read again) */
    {true, 128, OB_TYPE_F16, OB_TYPE_F16, 1, 2, 1, 0, false}, {true, 256, OB_TYPE_F16, OB_TYPE_F16, 1, 2, 0, 0, false},
    {true, 64, OB_TYPE_F16, OB_TYPE_F16, 1, 2, 0, 0, false}, {true, 64, OB_TYPE_F16, OB_TYPE_F16, 1, 2, 2, 0, false},
    {false, 64, OB_TYPE_F16, OB_TYPE_F16, 1, 0, 2, 0, false},
    /* factors and mscale: folded, one launch, and refused the fold where q's and k's ropes differ */
    {true, 128, OB_TYPE_F16, OB_TYPE_F16, 1, 2, 0, 1, false}, {false, 64, OB_TYPE_F16, OB_TYPE_F16, 1, 0, 2, 1, false},
    {true, 128, OB_TYPE_F16, OB_TYPE_F16, 3, 2, 0, 1, false}, {false, 64, OB_TYPE_Q8_0, OB_TYPE_F32, 1, 0, 0, 1, false},
    {true, 64, OB_TYPE_F16, OB_TYPE_F16, 1, 2, 2, 2, false}, {false, 64, OB_TYPE_F16, OB_TYPE_F16, 1, 0, 2, 3, false},
    /* gpt-oss's: no norms, NeoX with factors and mscale, sinks; folded (F16), one launch
     * (3 tokens, other caches), and the fold with q/k norms */
    {false, 64, OB_TYPE_F16, OB_TYPE_F16, 1, 2, 0, 1, true}, {false, 64, OB_TYPE_F16, OB_TYPE_F16, 3, 2, 0, 1, true},
    {false, 64, OB_TYPE_Q8_0, OB_TYPE_F32, 1, 2, 0, 1, true}, {true, 128, OB_TYPE_F16, OB_TYPE_F16, 1, 2, 0, 0, true},
};
static const attnmv_row g_attnmv[] = {
    {1, 700, 500, true, false}, {2, 700, 500, true, false}, {1, 40, 29, false, false}, {1, 40, 39, false, false},
    {1, 300, 287, false, false},
    /* gpt-oss's sinks (the merge that writes the int8 output takes them) */
    {1, 700, 500, true, true}, {2, 700, 500, true, true}, {1, 300, 287, false, true},
};
static vkmv_row g_vkmv[96];
static int g_nnr, g_nvk;

/* Vulkan's fusions of these chains and their off switches. */
static const char *const g_glu_knobs[] = {NULL};
static const char *const g_res_knobs[] = {NULL, "ONEBIT_VK_PRENORM=0", "ONEBIT_VK_RES_FUSE=0"};
static const char *const g_png_knobs[] = {NULL, "ONEBIT_VK_PN_GLU=1", "ONEBIT_VK_PN_GLU=0", "ONEBIT_VK_PN_GLU16=all"};

static ops_case *chain(ops_case *c, double fuse_mrel) {
    c->chain = true;
    c->fuse_mrel = fuse_mrel;
    return c;
}

static void add_vkmv(ops_list *l, vkmv_row r, const char *const *knobs, int n_knobs) {
    static const char *const kind[] = {"RMS_NORM -> MATMUL", "GLU -> MATMUL", "RMS_NORM -> gate/up -> GLU",
                                       "RMS_NORM -> MATMUL + ADD -> RMS_NORM", "MATMUL + ADD -> RMS_NORM -> gate/up -> GLU",
                                       "MATMUL, KV_STORE into its x, MATMUL"};
    g_vkmv[g_nvk] = r;
    for (int k = 0; k < n_knobs; k++) {
        ops_case *c = ops_add(l, vkmv_build, &g_vkmv[g_nvk], "chain %s%s %s N=%lld%s%s%s%s", kind[r.kind],
                              r.oai ? " swiglu_oai" : "", ob_type_name(r.t), (long long)r.N,
                              r.last == 2 ? " -> down " : r.last ? (r.kind == 3 ? " -> MATMUL" : " -> down Q8_0") : "",
                              r.last == 2 ? ob_type_name(r.dt) : "", knobs[k] ? " " : "", knobs[k] ? knobs[k] : "");
        c->knobs = knobs[k];
        /* fused, x is quantized at other points (the norm's weight folded in, 16-element
         * scales): the two differ by int8 steps */
        chain(c, 5e-2);
    }
    g_nvk++;
}

void ops_add_chains(ops_list *l) {
    static const int64_t widths[] = {4096, 8192, 8196, 1002};
    int k = 0;
    for (size_t w = 0; w < OB_ARRAY_LEN(widths); w++)
        for (int layer = 0; layer < 2; layer++) {
            g_addnorm[k] = (addnorm_row){widths[w], 3, layer};
            chain(ops_add(l, addnorm_build, &g_addnorm[k++], "chain ADD -> %s %lldx3 -> MUL", layer ? "LAYER_NORM" : "RMS_NORM",
                          (long long)widths[w]), 1e-5);
        }
    /* fused, the norm's output is quantized to int8 from floats an ulp from the unfused
     * norm's, so now and then an element rounds one int8 step the other way: about
     * 1 / (127 sqrt(K)) of the output's range for one such element */
    static const int64_t nK[] = {1024, 5120, 12288, 16384, 20480};
    k = 0;
    for (size_t i = 0; i < OB_ARRAY_LEN(nK); i++)
        for (int64_t T = 1; T <= 3; T += 2) {
            g_normmv[k] = (normmv_row){nK[i], T};
            chain(ops_add(l, normmv_build, &g_normmv[k++], "chain ADD -> RMS_NORM -> MATMUL Q8_0 x2 -> ADD K=%lld T=%lld",
                          (long long)nK[i], (long long)T), 1e-4);
        }
    for (size_t i = 0; i < OB_ARRAY_LEN(g_decode_T); i++)
        chain(ops_add(l, decode_build, &g_decode_T[i], "chain decode layer matvecs T=%lld", (long long)g_decode_T[i]), 1e-5);
    /* RMS_NORM -> ROPE: Vulkan's (head sizes 64 and 128, partial rotation without a norm
     * weight, a second reader), with factors and mscale; CUDA's (n_rot 48, four tokens) */
    for (int hd = 64; hd <= 128; hd += 64)
        for (int mode = 0; mode <= 2; mode += 2)
            for (int partial = 0; partial < 2; partial++)
                for (int var = 0; var < 3; var++) { /* plain, second reader, factors + mscale */
                    normrope_row *r = &g_normrope[g_nnr++];
                    *r = (normrope_row){hd, partial ? hd / 2 : hd, mode, 5, partial ? 0.5f : 1.0f, var == 2 ? 1.1386f : 1.0f,
                                        !partial, var == 2, var == 1, 0, 0};
                    chain(ops_add(l, normrope_build, r, "chain RMS_NORM -> ROPE hd=%d mode %d n_rot %d%s%s", hd, mode, r->n_rot,
                                  var == 1 ? " norm read again" : "", var == 2 ? " factors, mscale" : ""), 1e-6);
                }
    for (int mode = 0; mode <= 2; mode += 2)
        for (int ff = 0; ff < 2; ff++) {
            normrope_row *r = &g_normrope[g_nnr++];
            *r = (normrope_row){64, 48, mode, 4, 0.5f, ff ? 1.1386f : 1.0f, true, ff, false, 1, 0};
            chain(ops_add(l, normrope_build, r, "chain RMS_NORM -> ROPE hd=64 mode %d n_rot 48 T=4%s", mode,
                          ff ? " factors, mscale" : ""), 1e-6);
        }
    static const ob_type kv[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_Q8_0};
    for (size_t i = 0; i < 3; i++)
        for (int ff = 0; ff < 2; ff++) {
            normrope_row *r = &g_normrope[g_nnr++];
            *r = (normrope_row){64, 64, 2, 5, 1.0f, ff ? 1.1386f : 1.0f, true, ff, false, 0, kv[i]};
            chain(ops_add(l, normrope_build, r, "chain RMS_NORM -> ROPE -> KV_STORE %s%s", ob_type_name(kv[i]),
                          ff ? " factors, mscale" : ""), 1e-4);
        }
    for (size_t i = 0; i < OB_ARRAY_LEN(g_qkv); i++) {
        const qkv_row *r = &g_qkv[i];
        /* the fold into the attention sums the norm's squares in its own order */
        const bool fold = r->qk_norm && r->T == 1 && r->kt == OB_TYPE_F16 && r->vt == OB_TYPE_F16 && r->extra != 1 && r->yarn < 2;
        /* and a fused rope (+ norm) rounds to an F16 cache from floats an ulp from the
         * unfused kernels' on some compilers (NVIDIA's Vulkan), so an element an f16 ulp off */
        const bool f16 = r->kt == OB_TYPE_F16 || r->vt == OB_TYPE_F16;
        chain(ops_add(l, qkv_build, r, "chain q/k/v tail %s hd=%d K %s V %s T=%d mode %d%s%s%s", r->qk_norm ? "q/k norm" : "no norm",
                      r->hd, ob_type_name(r->kt), ob_type_name(r->vt), r->T, r->mode,
                      r->extra == 1 ? ", q norm read again" : r->extra == 2 ? ", raw k and v read again" : "",
                      r->yarn == 1 ? ", factors+mscale" : r->yarn == 2 ? ", k mscale apart" : r->yarn == 3 ? ", k factors apart" : "",
                      r->sinks ? ", sinks" : ""),
              fold || f16 ? 1e-4 : 1e-6);
    }
    for (size_t i = 0; i < OB_ARRAY_LEN(g_attnmv); i++) {
        const attnmv_row *r = &g_attnmv[i];
        chain(ops_add(l, attnmv_build, r, "chain %sATTENTION%s -> MATMUL Q4_K T=%d cells=%d pos %d", r->store ? "KV_STORE x2 -> " : "",
                      r->sinks ? " sinks" : "", r->T, r->cps, r->pos0), 1e-5);
    }
    static const char *const none[1] = {NULL};
    for (int glu = 0; glu < 2; glu++) add_vkmv(l, (vkmv_row){glu, OB_TYPE_Q4_K, 0, 70, 0, false}, none, 1);
    static const ob_type gt[] = {OB_TYPE_Q4_K, OB_TYPE_TQ2_0};
    for (size_t t = 0; t < 2; t++)
        for (int64_t N = 256; N <= 288; N += 32)
            for (int down = 0; down < 2; down++) add_vkmv(l, (vkmv_row){2, gt[t], 0, N, down, false}, g_glu_knobs, (int)OB_ARRAY_LEN(g_glu_knobs));
    static const ob_type mt[] = {OB_TYPE_Q4_K, OB_TYPE_TQ2_0, OB_TYPE_Q6_K, OB_TYPE_Q1_0};
    for (size_t t = 0; t < 4; t++)
        for (int64_t N = 1024; N <= 1536; N += 512)
            for (int last = 0; last < 2; last++) add_vkmv(l, (vkmv_row){3, mt[t], 0, N, last, false}, g_res_knobs, (int)OB_ARRAY_LEN(g_res_knobs));
    static const ob_type pt[] = {OB_TYPE_Q1_0, OB_TYPE_TQ2_0, OB_TYPE_Q4_K, OB_TYPE_Q6_K};
    for (size_t t = 0; t < 4; t++)
        for (int64_t N = 1024; N <= 1056; N += 32)
            for (int down = 0; down < 3; down++) {
                if (down == 2 && N % 256) continue;
                const ob_type dt = pt[t] == OB_TYPE_Q4_K || pt[t] == OB_TYPE_Q6_K ? OB_TYPE_Q6_K : OB_TYPE_TQ2_0;
                add_vkmv(l, (vkmv_row){4, pt[t], dt, N, down, false}, g_png_knobs, 4);
            }
    add_vkmv(l, (vkmv_row){5, OB_TYPE_Q6_K, 0, 70, 0, false}, none, 1);
    /* gpt-oss's clamped SwiGLU through the GLU fusions: the GLU writing the int8 x, gate/up/GLU
     * on the prenorm consumer (Q1_0; TQ2_0's X16 form; Q4_K by switch) */
    add_vkmv(l, (vkmv_row){1, OB_TYPE_Q4_K, 0, 70, 0, true}, none, 1);
    for (int down = 0; down < 2; down++) add_vkmv(l, (vkmv_row){2, OB_TYPE_Q4_K, 0, 256, down, true}, none, 1);
    for (size_t t = 0; t < 3; t++)
        for (int down = 0; down < 3; down++)
            add_vkmv(l, (vkmv_row){4, pt[t], pt[t] == OB_TYPE_Q4_K ? OB_TYPE_Q6_K : OB_TYPE_TQ2_0, 1024, down, true},
                     g_png_knobs, 4);
    chain(ops_add(l, adds_build, NULL, "chain 500 ADDs of 37 elements"), 0);
    chain(ops_add(l, mixed_build, NULL, "chain RMS_NORM -> MATMUL Q5_K -> ADD -> GELU -> SCALE -> SOFTMAX"), 1e-5);
}
