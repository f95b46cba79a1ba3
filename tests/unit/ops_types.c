/* The ops that take every weight type: MATMUL, GET_ROWS and CPY, over the type table
 * (ops_weight_types: every F32/F16/BF16 or quantized type of format/quant.h, so a type
 * added there is swept here without a line changed), then the shapes each backend's
 * kernels split differently: odd N and T, K off any block multiple for plain weights,
 * several K-quant blocks a row, x too large for shared memory, one and many tokens; x raw
 * and x on the int8 grid the GPUs' int8 paths quantize it to (there only float rounding
 * remains, so a wrong scale or element order fails a tight bound); two matmuls sharing x.
 * Paths only one backend takes run there (knobs, or `only`: shapes whose CPU reference
 * would cost more than they add elsewhere). */
#include "ops_cases.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    MM_ROUNDED = 1, /* x on the int8 grid (ops_round_q8) */
    MM_SHARED = 2,  /* y = W x + W2 x: two matmuls of one x (the second reuses the first's int8 x) */
    MM_PERIOD = 4,  /* W's rows repeat with a period of 509 (a huge W at a fraction of the quantizing) */
    MM_VK_FLOAT = 8, /* Vulkan's float path (knobs turn the int8 one off): its tighter bound */
    MM_MMQ = 16,    /* CUDA's int8 tensor-core matmul at every T (knob): its int8 bound at any T */
    MM_BLAS = 32,   /* CUDA's dequantize + f16 GEMM (knobs): 2e-3 of the largest output */
    MM_DET = 64,    /* batch-invariant mode: the int8 paths at any T, no tensor cores */
};

typedef struct mm_row {
    ob_type t, t2; /* t2: the second weight of MM_SHARED (0: t) */
    int64_t K, N, T;
    unsigned recipe;
} mm_row;

/* x quantized to int8 per 32 by the CUDA matvec / MMQ and the Vulkan int8 matvec. */
static bool cuda_int8_type(ob_type t) {
    return t == OB_TYPE_Q4_K || t == OB_TYPE_Q6_K || t == OB_TYPE_Q8_0 || t == OB_TYPE_Q1_0 || t == OB_TYPE_TQ2_0 ||
           t == OB_TYPE_Q4_0 || t == OB_TYPE_Q5_K;
}
static bool vk_int8_type(ob_type t) {
    return t == OB_TYPE_Q4_K || t == OB_TYPE_Q6_K || t == OB_TYPE_Q8_0 || t == OB_TYPE_Q1_0 || t == OB_TYPE_TQ2_0;
}
static bool plain_type(ob_type t) { return t == OB_TYPE_F32 || t == OB_TYPE_F16 || t == OB_TYPE_BF16; }

/* The bounds, per backend, for weights ~N(0, 1) (or the lattice types' small ones) and x
 * ~N(0, 1): y ~ sqrt(K). CPU: x quantized to the weight type's dot partner (Q8_0 / Q8_1 /
 * Q8_K) for quantized weights, f16 for F16 / BF16 ones. Vulkan: test_vulkan_ops' mm_atol
 * (int8 x steps of max|x| / 127 per 32 at T <= 8: ~0.005 rms a product, 6 of those), float
 * rounding on rounded x. CUDA: test_cuda_ops' bounds relative to the largest output. */
static void mm_tol(ops_build *b, const mm_row *r) {
    const double sk = sqrt((double)r->K) * (r->recipe & MM_SHARED ? 1.5 : 1.0);
    const bool rounded = r->recipe & MM_ROUNDED;
    ops_tol cpu = plain_type(r->t) ? OPS_TOL((r->t == OB_TYPE_F32 ? 2e-4 : 4e-3) * sk, 1e-4) : OPS_TOL(6e-2 * sk, 1e-4);
    const bool det = r->recipe & MM_DET;
    const bool vq8 = vk_int8_type(r->t) && (r->T <= 8 || det) && !(r->recipe & MM_VK_FLOAT);
    ops_tol vk = vq8 ? (rounded ? OPS_TOL(2e-5 * sk, 1e-5) : OPS_TOL(3e-2 * sk, 1e-4)) : OPS_TOL(2e-4 * sk, 1e-4);
    double m;
    if (r->recipe & MM_BLAS) m = 2e-3;
    else if (det) m = cuda_int8_type(r->t) ? 5e-2 : 2e-5;
    else if (cuda_int8_type(r->t) && (r->T <= 32 || (r->recipe & MM_MMQ))) m = rounded ? 1e-4 : 5e-2;
    else if (cuda_int8_type(r->t)) m = 5e-2; /* T > 32: cuBLAS on f16 */
    else if (r->T > 8 && r->t != OB_TYPE_F32) m = 4e-3; /* f16 tensor cores */
    else m = 2e-5;
    ops_tol_on(b, OPS_BIT(OPS_CPU), cpu);
    ops_tol_on(b, OPS_BIT(OPS_VK), vk);
    ops_tol_on(b, OPS_BIT(OPS_CUDA), OPS_MREL(m));
}

static void *mm_weights(ops_build *b, const mm_row *r, ob_type t, float scale) {
    if (!(r->recipe & MM_PERIOD)) return ops_typed(b, t, r->K, r->N, scale);
    const size_t rb = ob_row_size(t, r->K);
    const int64_t period = r->N < 509 ? r->N : 509;
    uint8_t *u = ops_typed(b, t, r->K, period, scale), *w = ops_own(b, rb * (size_t)r->N);
    for (int64_t i = 0; i < r->N; i++) memcpy(w + (size_t)i * rb, u + (size_t)(i % period) * rb, rb);
    return w;
}

static void mm_build(ops_build *b, const void *p) {
    const mm_row *r = p;
    const int64_t nw[2] = {r->K, r->N}, nx[2] = {r->K, r->T};
    float *x = ops_f32(b, r->K * r->T, 1.0f);
    if (r->recipe & MM_ROUNDED) ops_round_q8(x, r->K * r->T);
    ob_tensor *X = ops_leaf(b, "x", OB_TYPE_F32, 2, nx, x);
    ob_tensor *y = ob_matmul(b->g, ops_leaf(b, "w", r->t, 2, nw, mm_weights(b, r, r->t, 1.0f)), X);
    if (r->recipe & MM_SHARED) {
        const ob_type t2 = r->t2 ? r->t2 : r->t;
        y = ob_add(b->g, y, ob_matmul(b->g, ops_leaf(b, "w2", t2, 2, nw, mm_weights(b, r, t2, 0.6f)), X));
    }
    ops_check(b, y, OPS_EXACT);
    mm_tol(b, r);
}

/* ---- GET_ROWS ------------------------------------------------------------------------------ */

typedef struct gr_row {
    ob_type t;
    int64_t K, rows, n_ids;
    bool special; /* a table row of NaN, infinities and -0 (plain types), gathered twice */
} gr_row;

/* Independent of the reference: output row k is the dequantized table row ids[k]. */
static void gr_ref(ops_build *b, const void *p) {
    const gr_row *r = p;
    const ob_tensor *o = b->chk[0], *tab = o->src[0];
    const int32_t *ids = o->src[1]->data;
    const size_t rb = ob_row_size(r->t, r->K);
    float *row = malloc(sizeof(float) * (size_t)r->K);
    int bad = 0;
    for (int64_t k = 0; k < r->n_ids; k++) {
        ob_dequantize(r->t, (const char *)tab->data + rb * (size_t)ids[k], row, r->K);
        bad += memcmp(row, (const float *)o->data + k * r->K, sizeof(float) * (size_t)r->K) != 0;
    }
    CHECKF(bad == 0, "%s: %d reference rows are not the dequantized table rows", b->name, bad);
    free(row);
}

static void gr_build(ops_build *b, const void *p) {
    const gr_row *r = p;
    const int64_t ne[2] = {r->K, r->rows};
    void *tab;
    if (r->special) {
        float *f = ops_f32(b, r->K * r->rows, 1.0f);
        ops_special_row(f, r->K, 1);
        tab = ops_own(b, ob_row_size(r->t, r->K) * (size_t)r->rows);
        ob_type_traits_get(r->t)->from_float(f, tab, r->K * r->rows);
    } else {
        tab = ops_typed(b, r->t, r->K, r->rows, 1.0f);
    }
    int32_t ids[16];
    for (int64_t k = 0; k < r->n_ids; k++) ids[k] = (int32_t)(ob_rng_u64(&b->rng) % (uint64_t)r->rows);
    if (r->n_ids > 3) ids[3] = ids[1]; /* repeated ids are legal */
    if (r->special) ids[0] = ids[2] = 1;
    ob_tensor *o = ob_get_rows(b->g, ops_leaf(b, "tab", r->t, 2, ne, tab), ops_leaf_i32(b, "ids", r->n_ids, ids));
    ops_check(b, o, OPS_BITS);
    if (!plain_type(r->t)) {
        ops_tol_on(b, OPS_BIT(OPS_VK), OPS_TOL(1e-7, 1e-6));
        ops_tol_on(b, OPS_BIT(OPS_CUDA), OPS_MREL(1e-6));
    } else {
        ops_tol_on(b, OPS_BIT(OPS_CUDA), OPS_EXACT);
    }
    b->ref_check = gr_ref;
}

/* Ids from a request out of the table (past it, negative): the CPU backend refuses the
 * graph; the GPU backends give zero rows rather than read past the table. The reference
 * would read past it, so the expected rows are made here. */
static void bad_ids_build(ops_build *b, const void *p) {
    const ob_type t = *(const ob_type *)p;
    const int64_t K = 64, rows = 4, ne[2] = {K, rows};
    const int32_t ids[3] = {1, 99, -1};
    void *tab = ops_typed(b, t, K, rows, 1.0f);
    ob_tensor *o = ob_get_rows(b->g, ops_leaf(b, "tab", t, 2, ne, tab), ops_leaf_i32(b, "ids", 3, ids));
    ops_check(b, o, OPS_EXACT);
    ops_tol_on(b, OPS_GPU, OPS_TOL(1e-7, 1e-6));
    float *want = ops_own(b, sizeof(float) * (size_t)(3 * K));
    ob_dequantize(t, (const char *)tab + ob_row_size(t, K), want, K);
    b->expect[0] = want;
}

/* ---- CPY ----------------------------------------------------------------------------------- */

typedef struct cpy_row {
    ob_type src, dst;
    int64_t ne0, rows;
    bool special; /* NaN, infinities and -0 in row 1 (plain to plain) */
    const char *knobs;
} cpy_row;

/* The reference itself lands near the source values (a wrong layout the kernels would share
 * with it shows here). */
static void cpy_ref(ops_build *b, const void *p) {
    const cpy_row *r = p;
    if (!plain_type(r->dst) && r->dst != OB_TYPE_Q8_0) return; /* a 4-bit code step is coarser than the bound */
    const ob_tensor *o = b->chk[0];
    const int64_t n = r->ne0 * r->rows;
    float *fs = malloc(sizeof(float) * (size_t)n), *fd = malloc(sizeof(float) * (size_t)n);
    ob_dequantize(r->src, o->src[0]->data, fs, n);
    ob_dequantize(r->dst, o->data, fd, n);
    int64_t at = 0, bad = 0;
    for (int64_t i = 0; i < n; i++) {
        /* a Q8_0 code step is max|x| / 127 of its block: up to 0.05 at these values' scale */
        const float lim = (r->dst == OB_TYPE_Q8_0 ? 0.05f : 0.02f) + 0.02f * fabsf(fs[i]);
        const bool ok = isnan(fs[i]) ? isnan(fd[i]) : isinf(fs[i]) ? fd[i] == fs[i] : fabsf(fd[i] - fs[i]) <= lim;
        if (!ok && !bad++) at = i;
    }
    CHECKF(bad == 0, "%s: the reference is %lld values off the source (first at %lld: %g for %g)", b->name, (long long)bad,
           (long long)at, fd[at], fs[at]);
    free(fs);
    free(fd);
}

static void cpy_build(ops_build *b, const void *p) {
    const cpy_row *r = p;
    const int64_t ne[2] = {r->ne0, r->rows};
    void *x;
    if (r->special) {
        float *f = ops_f32(b, r->ne0 * r->rows, 2.0f);
        ops_special_row(f, r->ne0, 1);
        x = ops_own(b, ob_row_size(r->src, r->ne0) * (size_t)r->rows);
        ob_type_traits_get(r->src)->from_float(f, x, r->ne0 * r->rows);
    } else {
        x = ops_typed(b, r->src, r->ne0, r->rows, r->knobs ? 0.7f : 2.0f);
    }
    ob_tensor *o = ob_cpy(b->g, ops_leaf(b, "x", r->src, 2, ne, x), r->dst);
    /* the CPU and CUDA convert exactly as the reference; Vulkan within a Q8_0 code step
     * where a tie rounds the other way */
    ops_check(b, o, plain_type(r->dst) ? OPS_BITS : OPS_EXACT);
    ops_tol_on(b, OPS_BIT(OPS_CUDA), OPS_EXACT);
    ops_tol_on(b, OPS_BIT(OPS_VK), r->dst == OB_TYPE_Q8_0 ? OPS_TOL(0.06, 1e-6) : OPS_TOL(1e-6, 1e-6));
    b->ref_check = cpy_ref;
}

/* ---- the tables ---------------------------------------------------------------------------- */

static ob_type g_types[OB_TYPE_COUNT];
static int g_ntypes;

static const int64_t g_sweep_T[] = {1, 2, 3, 8, 9, 17};
/* test_vulkan_matmul_paths' types: matvec.comp for T <= 8 (partial row groups at N = 37),
 * the tiled shader above (partial 64-row and 64-token tiles at N = 70, T = 9 and 70) */
static const ob_type g_path_types[] = {OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_Q8_0, OB_TYPE_Q4_0, OB_TYPE_Q1_0,
                                       OB_TYPE_TQ2_0, OB_TYPE_Q5_K, OB_TYPE_Q2_K, OB_TYPE_F16, OB_TYPE_F32};
static const ob_type g_int8_types[] = {OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_Q8_0, OB_TYPE_Q1_0, OB_TYPE_TQ2_0, OB_TYPE_Q4_0,
                                       OB_TYPE_Q5_K};
static const mm_row g_mm_fixed[] = {
    /* x too large for shared memory: matvec reads it from global memory */
    {OB_TYPE_Q4_K, 0, 4352, 19, 1, 0}, {OB_TYPE_Q6_K, 0, 4352, 19, 2, 0}, {OB_TYPE_F16, 0, 4352, 19, 1, 0},
    {OB_TYPE_BF16, 0, 768, 37, 2, 0},
    /* two matmuls of one x: the second reuses the first's int8 x (Vulkan, CUDA) */
    {OB_TYPE_Q6_K, OB_TYPE_TQ2_0, 512, 70, 2, MM_ROUNDED | MM_SHARED},
    {OB_TYPE_Q4_K, OB_TYPE_Q6_K, 4096, 300, 3, MM_ROUNDED | MM_SHARED | MM_MMQ},
    {OB_TYPE_Q4_K, OB_TYPE_Q6_K, 4096, 300, 12, MM_ROUNDED | MM_SHARED | MM_MMQ},
};

/* Vulkan's decode matvec by knob: rows per subgroup and the chunk decoder on its float path
 * (ONEBIT_VK_Q8=0); the split-K path; the int8 path staging x in shared memory; its
 * one-token path at 8/4/2/1 rows per subgroup and per row; Q6_K's row cap. */
static const char *const g_vk_matvec_knobs[] = {
    "ONEBIT_VK_Q8=0 ONEBIT_VK_MATVEC_ROWS=1", "ONEBIT_VK_Q8=0 ONEBIT_VK_MATVEC_ROWS=3",
    "ONEBIT_VK_Q8=0 ONEBIT_VK_MATVEC_ROWS=4",
};
static const char *const g_vk_rows1_knobs[] = {
    "ONEBIT_VK_Q8_MIN_WG=0 ONEBIT_VK_Q6K_ROWS1=0 ONEBIT_VK_Q8_ROWS1=8", "ONEBIT_VK_Q8_MIN_WG=0 ONEBIT_VK_Q6K_ROWS1=0 ONEBIT_VK_Q8_ROWS1=4",
    "ONEBIT_VK_Q8_MIN_WG=0 ONEBIT_VK_Q6K_ROWS1=0 ONEBIT_VK_Q8_ROWS1=2", "ONEBIT_VK_Q8_MIN_WG=0 ONEBIT_VK_Q6K_ROWS1=0 ONEBIT_VK_Q8_ROWS1=1",
    "ONEBIT_VK_Q8_MIN_WG=0 ONEBIT_VK_Q6K_ROWS1=0 ONEBIT_VK_Q8_ROWS1=0",
};
static const char *const g_vk_q6cap_knobs[] = {
    "ONEBIT_VK_Q8_MIN_WG=0 ONEBIT_VK_Q8_ROWS1=4", "ONEBIT_VK_Q8_MIN_WG=0 ONEBIT_VK_Q8_ROWS1=8",
    "ONEBIT_VK_Q8_MIN_WG=0 ONEBIT_VK_Q8_ROWS1=4 ONEBIT_VK_Q6K_ROWS1=2", "ONEBIT_VK_Q8_MIN_WG=0 ONEBIT_VK_Q8_ROWS1=8 ONEBIT_VK_Q6K_ROWS1=2",
};
#define VK_SPLITK "ONEBIT_VK_Q8=0 ONEBIT_VK_MATVEC_SPLITK=1"
#define VK_Q8_STAGE "ONEBIT_VK_Q8_FUSE=0 ONEBIT_VK_Q8_STAGE=1"
#define CUDA_MMQ "ONEBIT_CUDA_MMQ_MAX_T=1000000"
#define CUDA_BLAS "ONEBIT_CUDA_MMQ_MAX_T=16 ONEBIT_CUDA_BLAS_SLAB=1"
/* CUDA's bulk-copy matvec with its ring wrapping several times */
#define CUDA_TMV_WRAP "ONEBIT_CUDA_TMV_BLOCKS=1 ONEBIT_CUDA_TMV_STAGES=2 ONEBIT_CUDA_TMV_CHUNK=1"

/* Rows made at registration (the loops below), kept for the run. */
static mm_row g_mm[2400];
static int g_nmm;
static gr_row g_gr[128];
static int g_ngr;
static cpy_row g_cpy[160];
static int g_ncpy;

static const char *recipe_name(unsigned r) {
    return r & MM_SHARED ? (r & MM_ROUNDED ? " shared rounded x" : " shared x") : r & MM_ROUNDED ? " rounded x" : "";
}

static ops_case *add_mm(ops_list *l, ob_type t, ob_type t2, int64_t K, int64_t N, int64_t T, unsigned recipe, const char *knobs) {
    if (g_nmm == (int)OB_ARRAY_LEN(g_mm)) { fprintf(stderr, "ops_types: g_mm full\n"); exit(2); }
    mm_row *r = &g_mm[g_nmm++];
    *r = (mm_row){t, t2, K, N, T, recipe};
    ops_case *c = ops_add(l, mm_build, r, "MATMUL %s%s%s K=%lld N=%lld T=%lld%s%s%s", ob_type_name(t), t2 ? "+" : "",
                          t2 ? ob_type_name(t2) : "", (long long)K, (long long)N, (long long)T, recipe_name(recipe),
                          knobs ? " " : "", knobs ? knobs : "");
    c->knobs = knobs;
    /* activation formats, not weight formats: the CPU has no dot kernel for them and says so */
    if (t == OB_TYPE_Q8_1 || t == OB_TYPE_Q8_K) c->may_refuse = OPS_BIT(OPS_CPU);
    return c;
}

static void add_gr(ops_list *l, ob_type t, int64_t K, int64_t rows, int64_t n_ids, bool special) {
    if (g_ngr == (int)OB_ARRAY_LEN(g_gr)) { fprintf(stderr, "ops_types: g_gr full\n"); exit(2); }
    gr_row *r = &g_gr[g_ngr++];
    *r = (gr_row){t, K, rows, n_ids, special};
    ops_add(l, gr_build, r, "GET_ROWS %s K=%lld rows=%lld ids=%lld%s", ob_type_name(t), (long long)K, (long long)rows,
            (long long)n_ids, special ? " nan/inf/-0 row" : "");
}

static void add_cpy(ops_list *l, ob_type s, ob_type d, int64_t ne0, int64_t rows, bool special, const char *knobs,
                    unsigned may_refuse) {
    if (g_ncpy == (int)OB_ARRAY_LEN(g_cpy)) { fprintf(stderr, "ops_types: g_cpy full\n"); exit(2); }
    cpy_row *r = &g_cpy[g_ncpy++];
    *r = (cpy_row){s, d, ne0, rows, special, knobs};
    ops_case *c = ops_add(l, cpy_build, r, "CPY %s->%s %lldx%lld%s%s%s", ob_type_name(s), ob_type_name(d), (long long)ne0,
                          (long long)rows, special ? " nan/inf/-0" : "", knobs ? " " : "", knobs ? knobs : "");
    c->knobs = knobs;
    c->may_refuse = may_refuse;
}

static void add_matmuls(ops_list *l) {
    /* every weight type; odd N, T across the decode / prefill split */
    for (int i = 0; i < g_ntypes; i++)
        for (size_t k = 0; k < OB_ARRAY_LEN(g_sweep_T); k++) add_mm(l, g_types[i], 0, 512, 67, g_sweep_T[k], 0, NULL);
    /* plain weights need no block multiple (jina-bert-v2's rows of 72) */
    static const int64_t plain_K[] = {40, 72, 99, 100};
    static const int64_t plain_T[] = {1, 2, 3, 8, 9, 17, 70};
    for (int t = 0; t < 3; t++)
        for (size_t ki = 0; ki < OB_ARRAY_LEN(plain_K); ki++)
            for (size_t k = 0; k < OB_ARRAY_LEN(plain_T); k++)
                add_mm(l, t == 0 ? OB_TYPE_F32 : t == 1 ? OB_TYPE_F16 : OB_TYPE_BF16, 0, plain_K[ki],
                       plain_T[k] == 70 ? 70 : plain_K[ki] == 100 ? 13 : 37, plain_T[k], 0, NULL);
    for (size_t i = 0; i < OB_ARRAY_LEN(g_path_types); i++) {
        for (int64_t T = 1; T <= 8; T++) add_mm(l, g_path_types[i], 0, 768, 37, T, 0, NULL);
        add_mm(l, g_path_types[i], 0, 768, 70, 9, 0, NULL);
        add_mm(l, g_path_types[i], 0, 768, 70, 70, 0, NULL);
    }
    for (size_t i = 0; i < OB_ARRAY_LEN(g_mm_fixed); i++) {
        const mm_row *r = &g_mm_fixed[i];
        add_mm(l, r->t, r->t2, r->K, r->N, r->T, r->recipe, r->recipe & MM_MMQ ? CUDA_MMQ : NULL);
    }
    /* the int8 paths: K with one and many units a lane (256), x staged (2048) or too large
     * for shared memory (12288); raw, rounded, and a second matmul on the same x */
    static const int64_t i8_K[] = {256, 2048, 12288};
    static const int64_t i8_T[] = {1, 2, 4, 8, 13, 16};
    for (size_t ki = 0; ki < OB_ARRAY_LEN(i8_K); ki++)
        for (size_t ti = 0; ti < OB_ARRAY_LEN(g_int8_types); ti++)
            for (size_t k = 0; k < OB_ARRAY_LEN(i8_T); k++)
                for (unsigned rec = 0; rec < 3; rec++)
                    add_mm(l, g_int8_types[ti], 0, i8_K[ki], 37, i8_T[k], rec == 0 ? 0 : rec == 1 ? MM_ROUNDED : MM_SHARED, NULL);
    /* Vulkan's int8 matvec at K with one and many units a lane, T = 1..8, rounded x */
    static const struct { int64_t K, T; } q8[] = {{256, 1}, {768, 1}, {768, 2}, {768, 5}, {768, 8}, {4352, 1}, {4352, 3}, {4352, 8}};
    for (size_t ti = 0; ti < 5; ti++)
        for (size_t s = 0; s < OB_ARRAY_LEN(q8); s++) {
            add_mm(l, g_int8_types[ti], 0, q8[s].K, 37, q8[s].T, MM_ROUNDED, NULL);
            /* x staged in shared memory where T * K fits */
            if (s == 1 || s == 3 || s >= 5) add_mm(l, g_int8_types[ti], 0, q8[s].K, 37, q8[s].T, MM_ROUNDED, VK_Q8_STAGE);
        }
    for (size_t v = 0; v < OB_ARRAY_LEN(g_vk_matvec_knobs); v++)
        for (size_t ti = 0; ti < 5; ti++)
            for (int64_t T = 1; T <= 3; T += 2) add_mm(l, g_int8_types[ti], 0, 768, 37, T, MM_VK_FLOAT, g_vk_matvec_knobs[v]);
    static const struct { int64_t K, N; } sk[] = {{4096, 37}, {4096, 4100}, {8192, 21}, {12288, 300}};
    for (size_t ti = 0; ti < 5; ti++)
        for (size_t s = 0; s < OB_ARRAY_LEN(sk); s++) {
            add_mm(l, g_int8_types[ti], 0, sk[s].K, sk[s].N, 1, MM_VK_FLOAT, VK_SPLITK);
            if (s == 0) add_mm(l, g_int8_types[ti], 0, sk[s].K, sk[s].N, 3, MM_VK_FLOAT, VK_SPLITK);
        }
    static const struct { int64_t K, N; } one[] = {{256, 37}, {4352, 70}, {12288, 37}};
    for (size_t v = 0; v < OB_ARRAY_LEN(g_vk_rows1_knobs); v++)
        for (size_t ti = 0; ti < 5; ti++)
            for (size_t s = 0; s < OB_ARRAY_LEN(one); s++) add_mm(l, g_int8_types[ti], 0, one[s].K, one[s].N, 1, MM_ROUNDED, g_vk_rows1_knobs[v]);
    for (size_t v = 0; v < OB_ARRAY_LEN(g_vk_q6cap_knobs); v++) {
        add_mm(l, OB_TYPE_Q6_K, 0, 4352, 70, 1, MM_ROUNDED, g_vk_q6cap_knobs[v]);
        add_mm(l, OB_TYPE_TQ2_0, 0, 4352, 70, 1, MM_ROUNDED, g_vk_q6cap_knobs[v]);
    }
}

/* CUDA's paths: the staged one-column matvec and its bulk-copy form at the decode shapes
 * (K = 4096 and 12288, a partial last run, N not a multiple of 8 rows, N large, x past
 * shared memory at K = 32768); the int8 tensor-core matmul at every T it takes (knob);
 * the streaming decode MMQ on a ring that wraps (N = 8500, K = 8192); cuBLAS by slabs
 * (knobs), and CPY to f16 through its staging kernel. CUDA only: their CPU reference
 * would double the CPU's time and add no path there. */
static void add_cuda_paths(ops_list *l) {
    static const ob_type mv[] = {OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_Q8_0, OB_TYPE_Q1_0, OB_TYPE_TQ2_0};
    static const struct { int64_t K, N; } shapes[] = {{4096, 37}, {4096, 4101}, {12288, 1001}, {2048, 9}, {5120, 77},
                                                      {32768, 37}, {4096, 16387}, {8192, 75}, {16384, 33}, {12288, 2000}};
    const int ns = (int)OB_ARRAY_LEN(shapes);
    for (size_t ty = 0; ty < OB_ARRAY_LEN(mv); ty++)
        for (int si = 0; si < ns; si++) {
            const ob_type t = mv[ty];
            const int64_t K = shapes[si].K, N = shapes[si].N;
            if (K % ob_type_block_size(t) != 0 || (si >= ns - 3 && t != OB_TYPE_TQ2_0)) continue;
            if (N > 10000 && t != OB_TYPE_Q4_K && t != OB_TYPE_Q6_K) continue;
            for (unsigned pre = 0; pre < 3; pre++) {
                if (pre == 0 && N > 1000) continue; /* raw x: the small shapes suffice */
                const unsigned rec = pre == 0 ? 0 : pre == 1 ? MM_ROUNDED : MM_ROUNDED | MM_SHARED;
                add_mm(l, t, 0, K, N, 1, rec, si == ns - 1 ? CUDA_TMV_WRAP : NULL)->only = OPS_BIT(OPS_CUDA);
            }
        }
    static const ob_type mmq[] = {OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_Q8_0, OB_TYPE_Q4_0, OB_TYPE_Q5_K, OB_TYPE_Q1_0, OB_TYPE_TQ2_0};
    static const int64_t Ks[] = {256, 4096, 12288, 1152}, Ns[] = {37, 300, 4100};
    static const int64_t Ts[] = {2, 4, 5, 8, 13, 16, 17, 64, 130, 512};
    for (size_t ty = 0; ty < OB_ARRAY_LEN(mmq); ty++)
        for (size_t ki = 0; ki < OB_ARRAY_LEN(Ks); ki++)
            for (size_t ni = 0; ni < OB_ARRAY_LEN(Ns); ni++) {
                const ob_type t = mmq[ty];
                const int64_t K = Ks[ki], N = Ns[ni];
                if (K == 12288 && (t != OB_TYPE_Q4_K || N != 37)) continue;
                if (K == 1152 && (ob_type_block_size(t) > 128 || N != 37)) continue;
                if (N == 4100 && (K != 256 || (t != OB_TYPE_Q4_K && t != OB_TYPE_Q6_K))) continue;
                for (size_t k = 0; k < OB_ARRAY_LEN(Ts); k++) {
                    const int64_t T = Ts[k];
                    if (K == 4096 && N == 300 && T > 64) continue;
                    if (K == 12288 && T != 4 && T != 16 && T != 130) continue;
                    if (N == 4100 && T != 13 && T != 512) continue;
                    add_mm(l, t, 0, K, N, T, MM_MMQ, CUDA_MMQ);
                    add_mm(l, t, 0, K, N, T, MM_MMQ | MM_ROUNDED, CUDA_MMQ);
                }
            }
    static const ob_type st[] = {OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_Q8_0};
    for (size_t ty = 0; ty < OB_ARRAY_LEN(st); ty++)
        for (int64_t T = 5; T <= 16; T += 11)
            if (T == 5 || st[ty] == OB_TYPE_Q4_K) add_mm(l, st[ty], 0, 8192, 8500, T, MM_MMQ | MM_ROUNDED | MM_PERIOD, CUDA_MMQ);
    static const ob_type bl[] = {OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_Q8_0, OB_TYPE_Q5_K, OB_TYPE_Q4_0,
                                 OB_TYPE_Q1_0, OB_TYPE_TQ2_0, OB_TYPE_Q3_K, OB_TYPE_F16};
    static const struct { int64_t K, N; } bs[] = {{256, 37}, {256, 300}, {4096, 37}, {4096, 300}, {768, 1400}, {800, 1400}};
    for (size_t ty = 0; ty < OB_ARRAY_LEN(bl); ty++)
        for (size_t si = 0; si < OB_ARRAY_LEN(bs); si++) {
            const ob_type t = bl[ty];
            const int64_t K = bs[si].K, N = bs[si].N;
            const bool hot = t == OB_TYPE_Q4_K || t == OB_TYPE_Q6_K || t == OB_TYPE_Q8_0;
            if (K % ob_type_block_size(t) != 0 || (K == 4096 && N == 300 && !hot)) continue;
            if (N == 1400 && t != OB_TYPE_Q6_K && t != OB_TYPE_Q8_0) continue;
            for (int64_t T = 64; T <= 512; T *= 8)
                if (N != 1400 || T == 64) add_mm(l, t, 0, K, N, T, MM_BLAS, CUDA_BLAS);
        }
    for (size_t ty = 0; ty < OB_ARRAY_LEN(bl); ty++)
        if (bl[ty] != OB_TYPE_F16 && bl[ty] != OB_TYPE_Q3_K)
            add_cpy(l, bl[ty], OB_TYPE_F16, 256, ob_type_block_size(bl[ty]) == 256 ? 37 : 45, false, CUDA_BLAS, 0);
}

/* Batch-invariant mode: the products test_cuda_ops and test_vulkan_ops check bitwise across
 * batch sizes (those bitwise checks stay there), here against the reference. */
static void add_det(ops_list *l) {
    static const ob_type cu[] = {OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_Q8_0, OB_TYPE_Q5_K, OB_TYPE_Q4_0, OB_TYPE_TQ2_0, OB_TYPE_F16, OB_TYPE_F32};
    static const ob_type vk[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_Q4_0, OB_TYPE_Q5_K, OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_Q8_0, OB_TYPE_Q1_0, OB_TYPE_TQ2_0};
    for (size_t i = 0; i < OB_ARRAY_LEN(cu); i++) {
        ops_case *c = add_mm(l, cu[i], 0, 4096, 300, 40, MM_DET, NULL);
        c->det = true;
        c->only = OPS_GPU;
        snprintf(c->name + strlen(c->name), sizeof(c->name) - strlen(c->name), " deterministic");
    }
    for (size_t i = 0; i < OB_ARRAY_LEN(vk); i++) {
        ops_case *c = add_mm(l, vk[i], 0, 768, 70, 40, MM_DET, NULL);
        c->det = true;
        snprintf(c->name + strlen(c->name), sizeof(c->name) - strlen(c->name), " deterministic");
    }
}

void ops_add_types(ops_list *l) {
    g_ntypes = ops_weight_types(g_types);
    add_matmuls(l);
    add_cuda_paths(l);
    add_det(l);
    /* GET_ROWS: every type, twice (test_cpu_ops' and test_vulkan_ops' shapes); plain rows of
     * 72 and 40; special rows */
    for (int i = 0; i < g_ntypes; i++) {
        add_gr(l, g_types[i], 256, 40, 9, false);
        add_gr(l, g_types[i], 512, 9, 6, false);
    }
    for (int t = 0; t < 3; t++) {
        const ob_type pt = t == 0 ? OB_TYPE_F32 : t == 1 ? OB_TYPE_F16 : OB_TYPE_BF16;
        add_gr(l, pt, 72, 37, 6, false);
        add_gr(l, pt, 40, 37, 6, false);
        add_gr(l, pt, 67, 5, 4, true);
    }
    static const ob_type bad[2] = {OB_TYPE_F32, OB_TYPE_Q4_0};
    for (int i = 0; i < 2; i++) {
        ops_case *c = ops_add(l, bad_ids_build, &bad[i], "GET_ROWS %s ids out of the table", ob_type_name(bad[i]));
        c->err_on = OPS_BIT(OPS_CPU);
        c->err_status = OB_ERR_ARG;
    }
    /* CPY: every type to F32 and F16; the old harnesses' pairs; plain to plain at rows of
     * 72 and 40 (no whole 32-element chunk); NaN, infinities and -0 between plain types */
    for (int i = 0; i < g_ntypes; i++) {
        add_cpy(l, g_types[i], OB_TYPE_F32, 256, 5, false, NULL, 0);
        add_cpy(l, g_types[i], OB_TYPE_F16, 256, 3, false, NULL, 0);
    }
    static const ob_type pairs[][2] = {
        {OB_TYPE_F32, OB_TYPE_Q8_0}, {OB_TYPE_F16, OB_TYPE_Q8_0}, {OB_TYPE_Q4_K, OB_TYPE_Q8_0}, {OB_TYPE_IQ3_XXS, OB_TYPE_Q8_0},
        {OB_TYPE_F32, OB_TYPE_BF16}, {OB_TYPE_Q8_0, OB_TYPE_Q8_0},
    };
    for (size_t i = 0; i < OB_ARRAY_LEN(pairs); i++) {
        add_cpy(l, pairs[i][0], pairs[i][1], 512, 6, false, NULL, 0);
        add_cpy(l, pairs[i][0], pairs[i][1], 256, 5, false, NULL, 0);
    }
    for (int s = 0; s < 3; s++)
        for (int d = 0; d < 3; d++) {
            const ob_type ts = s == 0 ? OB_TYPE_F32 : s == 1 ? OB_TYPE_F16 : OB_TYPE_BF16;
            const ob_type td = d == 0 ? OB_TYPE_F32 : d == 1 ? OB_TYPE_F16 : OB_TYPE_BF16;
            add_cpy(l, ts, td, 72, 3, false, NULL, 0);
            add_cpy(l, ts, td, 40, 3, false, NULL, 0);
            add_cpy(l, ts, td, 33, 4, true, NULL, 0);
        }
    /* to a K-quant: the CPU only (the GPU backends fall back for it) */
    add_cpy(l, OB_TYPE_F32, OB_TYPE_Q4_K, 256, 2, false, NULL, OPS_GPU);
    add_cpy(l, OB_TYPE_F32, OB_TYPE_Q4_0, 64, 2, false, NULL, OPS_GPU);
}
