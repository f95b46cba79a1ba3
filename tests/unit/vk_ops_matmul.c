/* test_vulkan_ops' matmul groups: GET_ROWS and MATMUL of every weight type by shape, the
 * decode matvec's variants, and the int8 matvec (matvec_q8.comp) with its quantizer and
 * fusions, each against the CPU reference (vk_testutil.h). */
#include "backend/vulkan/vk_internal.h"
#include "vk_ops_cases.h"
#include "vk_testutil.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Does a MATMUL of t over T tokens take matvec_q8.comp (x quantized to int8 per 32)? */
static bool q8_path(ob_type t, int64_t T) {
    const ob_vk *vk = g_be[0]->ctx;
    return vk->q8 && T <= 8 && !vk->no_matvec &&
           (t == OB_TYPE_Q4_K || t == OB_TYPE_Q6_K || t == OB_TYPE_Q8_0 || t == OB_TYPE_Q1_0 || t == OB_TYPE_TQ2_0);
}

/* Is pipe matvec_q8.comp's for type t at T tokens (its one-token pipeline for T = 1)? */
static bool q8_mv(const ob_vk *vk, VkPipeline pipe, ob_type t, int64_t T) {
    if (!pipe) return false;
    if (T > 1) return pipe == vk->pipes[OB_VK_SH_MATVEC_Q8][t];
    for (int s = OB_VK_SH_MATVEC_Q8_1; s <= OB_VK_SH_MATVEC_Q8_1R1; s++)
        if (pipe == vk->pipes[s][t]) return true;
    return false;
}
/* A prenorm consumer (any rows per subgroup) of weight type t. */
static bool q8_pnc(const ob_vk *vk, VkPipeline pipe, ob_type t) {
    for (int s = OB_VK_SH_MATVEC_Q8_PNC; s <= OB_VK_SH_MATVEC_Q8_PNC1; s++)
        if (pipe && pipe == vk->pipes[s][t]) return true;
    return false;
}

/* Is pipe a quantizer of x for matvec_q8.comp (quant_x.comp or quant_x4.comp)? */
static bool is_quant(const ob_vk *vk, VkPipeline pipe) {
    return pipe && (pipe == vk->pipes[OB_VK_SH_QUANT_X][OB_TYPE_F32] || pipe == vk->pipes[OB_VK_SH_QUANT_X4][OB_TYPE_F32]);
}

/* Absolute tolerance of a matmul over K of weights ~N(0, 1) and x ~N(0, 1): float
 * rounding, or on the int8 path x's rounding to steps of max|x| / 127 per 32 elements
 * (~0.005 rms at |x| ~ N(0, 1): ~0.005 sqrt(K) on y; 6 of those). */
static double mm_atol(ob_type t, int64_t K, int64_t T) { return (q8_path(t, T) ? 3e-2 : 2e-4) * sqrt((double)K); }

static const ob_type g_wtypes[] = {
    OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_BF16, OB_TYPE_Q4_0, OB_TYPE_Q4_1, OB_TYPE_Q5_0, OB_TYPE_Q5_1,
    OB_TYPE_Q8_0, OB_TYPE_Q2_K, OB_TYPE_Q3_K, OB_TYPE_Q4_K, OB_TYPE_Q5_K, OB_TYPE_Q6_K, OB_TYPE_Q8_K,
    OB_TYPE_IQ4_NL, OB_TYPE_IQ4_XS, OB_TYPE_TQ1_0, OB_TYPE_TQ2_0, OB_TYPE_Q1_0, OB_TYPE_MXFP4,
    OB_TYPE_IQ2_XXS, OB_TYPE_IQ2_XS, OB_TYPE_IQ2_S, OB_TYPE_IQ3_XXS, OB_TYPE_IQ3_S, OB_TYPE_IQ1_S,
    OB_TYPE_IQ1_M,
};

void test_get_rows(void) {
    for (size_t ti = 0; ti < OB_ARRAY_LEN(g_wtypes); ti++) {
        ob_type t = g_wtypes[ti];
        int64_t ne[2] = {512, 9};
        void *tab = rand_typed(t, ne[0], ne[1], 1.0f);
        int32_t ids[6] = {3, 0, 8, 3, 5, 1};
        int64_t nt[1] = {6};
        ob_graph *g = ob_graph_new(4);
        ob_tensor *o = ob_get_rows(g, ob_leaf(g, "tab", t, 2, ne, tab), ob_leaf(g, "ids", OB_TYPE_I32, 1, nt, ids));
        char what[64];
        snprintf(what, sizeof(what), "get_rows %s", ob_type_name(t));
        check_graph(g, o, 1e-7, 1e-6, what);
        ob_graph_free(g);
        free(tab);
    }
}

void test_matmul(void) {
    static const int64_t Ts[] = {1, 3, 17};
    for (size_t ti = 0; ti < OB_ARRAY_LEN(g_wtypes); ti++)
        for (size_t k = 0; k < OB_ARRAY_LEN(Ts); k++) {
            ob_type t = g_wtypes[ti];
            int64_t K = 512, N = 37, T = Ts[k];
            int64_t nw[2] = {K, N}, nx[2] = {K, T};
            void *w = rand_typed(t, K, N, 1.0f);
            float *x = rand_f32(K * T, 1.0f);
            ob_graph *g = ob_graph_new(4);
            ob_tensor *o = ob_matmul(g, ob_leaf(g, "w", t, 2, nw, w), ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x));
            char what[64];
            snprintf(what, sizeof(what), "matmul %s T=%lld", ob_type_name(t), (long long)T);
            check_graph(g, o, mm_atol(t, K, T), 1e-4, what);
            ob_graph_free(g);
            free(w); free(x);
        }
    /* Plain weights need no block multiple. */
    for (int f16 = 0; f16 < 2; f16++) {
        int64_t nw[2] = {100, 13}, nx[2] = {100, 2};
        ob_type t = f16 ? OB_TYPE_F16 : OB_TYPE_F32;
        void *w = rand_typed(t, 100, 13, 1.0f);
        float *x = rand_f32(200, 1.0f);
        ob_graph *g = ob_graph_new(4);
        ob_tensor *o = ob_matmul(g, ob_leaf(g, "w", t, 2, nw, w), ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x));
        check_graph(g, o, 1e-4, 1e-4, f16 ? "matmul F16 K=100" : "matmul F32 K=100");
        ob_graph_free(g);
        free(w); free(x);
    }
}

static void matmul_case(ob_type t, int64_t K, int64_t N, int64_t T) {
    int64_t nw[2] = {K, N}, nx[2] = {K, T};
    void *w = rand_typed(t, K, N, 1.0f);
    float *x = rand_f32(K * T, 1.0f);
    ob_graph *g = ob_graph_new(4);
    ob_tensor *o = ob_matmul(g, ob_leaf(g, "w", t, 2, nw, w), ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x));
    char what[96];
    snprintf(what, sizeof(what), "matmul %s K=%lld N=%lld T=%lld", ob_type_name(t), (long long)K, (long long)N,
             (long long)T);
    check_graph(g, o, mm_atol(t, K, T), 1e-4, what);
    ob_graph_free(g);
    free(w); free(x);
}

/* The matmul paths by shape: matvec.comp for T <= 8 (x staged in shared memory while
 * T * K fits, read from global beyond), the tiled shader above. N = 37 and 70 leave
 * partial workgroups of rows (matvec: subgroups per 128 invocations) and of 64-row tiles;
 * T = 9 and 70 partial 64-token tiles; K = 768 and 4352 several K-quant blocks per row. */
void test_matmul_paths(void) {
    static const ob_type types[] = {OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_Q8_0, OB_TYPE_Q4_0, OB_TYPE_Q1_0,
                                    OB_TYPE_TQ2_0, OB_TYPE_Q5_K, OB_TYPE_Q2_K, OB_TYPE_F16, OB_TYPE_F32};
    for (size_t ti = 0; ti < OB_ARRAY_LEN(types); ti++) {
        for (int64_t T = 1; T <= 8; T++) matmul_case(types[ti], 768, 37, T);
        matmul_case(types[ti], 768, 70, 9);
        matmul_case(types[ti], 768, 70, 70);
    }
    /* x too large for shared memory: matvec reads it from global memory. */
    matmul_case(OB_TYPE_Q4_K, 4352, 19, 1);
    matmul_case(OB_TYPE_Q6_K, 4352, 19, 2);
    matmul_case(OB_TYPE_F16, 4352, 19, 1);
    /* Plain weights with K off any block multiple, every path. */
    for (int64_t T = 1; T <= 9; T += 4) matmul_case(OB_TYPE_F32, 100, 13, T);
    matmul_case(OB_TYPE_F16, 100, 70, 70);
    /* 16-bit weights: pairs per 32-bit load for an even K, one at a time for an odd K. */
    matmul_case(OB_TYPE_F16, 99, 13, 3);
    matmul_case(OB_TYPE_BF16, 99, 13, 1);
    matmul_case(OB_TYPE_BF16, 768, 37, 2);
}


/* The decode matvec's streaming path (Q4_K, Q6_K, Q8_0, Q1_0, TQ2_0) with 1, 3 and 4 rows
 * per subgroup (N = 37: partial row groups), each against the reference; the listed
 * dispatch shows which path ran. */
void test_matvec_variants(void) {
    setenv("ONEBIT_VK_Q8", "0", 1); /* these are matvec.comp's paths */
    static const ob_type types[] = {OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_Q8_0, OB_TYPE_Q1_0, OB_TYPE_TQ2_0};
    static const char *const var[] = {"ONEBIT_VK_MATVEC_ROWS", "ONEBIT_VK_MATVEC_ROWS", "ONEBIT_VK_MATVEC_ROWS"};
    static const char *const val[] = {"1", "3", "4"};
    static const uint32_t want_rps[] = {1, 3, 4};
    for (size_t v = 0; v < OB_ARRAY_LEN(var); v++) {
        ob_backend *be = backend_with(var[v], val[v]);
        if (!be) continue;
        ob_vk *vk = be->ctx;
        for (size_t ti = 0; ti < OB_ARRAY_LEN(types); ti++)
            for (int64_t T = 1; T <= 3; T += 2) {
                int64_t K = 768, N = 37, nw[2] = {K, N}, nx[2] = {K, T};
                void *w = rand_typed(types[ti], K, N, 1.0f);
                float *x = rand_f32(K * T, 1.0f);
                ob_graph *g = ob_graph_new(4);
                ob_tensor *o = ob_matmul(g, ob_leaf(g, "w", types[ti], 2, nw, w), ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x));
                char what[96];
                snprintf(what, sizeof(what), "matvec %s=%s %s T=%lld", var[v], val[v], ob_type_name(types[ti]), (long long)T);
                check_on(be, g, o, 2e-4 * sqrt((double)K), 1e-4, what);
                CHECKF(vk->n_prev == 1 && vk->prev[0].pc.u[6] == want_rps[v], "%s: rows per subgroup %u", what,
                       vk->n_prev ? vk->prev[0].pc.u[6] : 0);
                ob_graph_free(g);
                free(w); free(x);
            }
        ob_backend_free(be);
    }
    /* the split-K path (ONEBIT_VK_MATVEC_SPLITK=1): one token at K = 4096 * 1..3 (x in
     * registers, 1..3 pieces per invocation), N not a multiple of its 8-row batches nor of
     * its rows per workgroup; 3 tokens stay on the streaming path */
    ob_backend *sk = backend_with("ONEBIT_VK_MATVEC_SPLITK", "1");
    /* its own random stream: the tests after it keep the inputs they had before it */
    const ob_rng keep_rng = g_rng;
    ob_rng_seed(&g_rng, 0x5b17u);
    if (sk) {
        ob_vk *vk = sk->ctx;
        CHECKF(vk->matvec_splitk == (vk->info.subgroup >= 4 && vk->info.subgroup <= 128), "split-K path %s with subgroup %u",
               vk->matvec_splitk ? "on" : "off", vk->info.subgroup);
        static const struct { int64_t K, N; } shapes[] = {{4096, 37}, {4096, 4100}, {8192, 21}, {12288, 300}};
        for (size_t ti = 0; ti < OB_ARRAY_LEN(types); ti++)
            for (size_t si = 0; si < OB_ARRAY_LEN(shapes); si++)
                for (int64_t T = 1; T <= 3; T += 2) {
                    const int64_t K = shapes[si].K, N = shapes[si].N, nw[2] = {K, N}, nx[2] = {K, T};
                    if (T == 3 && si != 0) continue;
                    void *w = rand_typed(types[ti], K, N, 1.0f);
                    float *x = rand_f32(K * T, 1.0f);
                    ob_graph *g = ob_graph_new(4);
                    ob_tensor *o = ob_matmul(g, ob_leaf(g, "w", types[ti], 2, nw, w), ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x));
                    char what[96];
                    snprintf(what, sizeof(what), "matvec split-K %s K=%lld N=%lld T=%lld", ob_type_name(types[ti]), (long long)K,
                             (long long)N, (long long)T);
                    check_on(sk, g, o, 2e-4 * sqrt((double)K), 1e-4, what);
                    const uint32_t want = vk->matvec_splitk && T == 1 ? (uint32_t)(K / 4096) : 0;
                    CHECKF(vk->n_prev == 1 && vk->prev[0].pc.u[7] == want, "%s: pieces per invocation %u, want %u", what,
                           vk->n_prev ? vk->prev[0].pc.u[7] : 0, want);
                    ob_graph_free(g);
                    free(w); free(x);
                }
        ob_backend_free(sk);
    }
    g_rng = keep_rng;
    /* the default backend takes the streaming path too, or the int8 one where it can */
    ob_vk *vk0 = g_be[0]->ctx;
    matmul_case(OB_TYPE_Q4_K, 512, 16, 1);
    if (vk0->q8) CHECK(vk0->n_prev == 2 && q8_mv(vk0, vk0->prev[1].pipe, OB_TYPE_Q4_K, 1));
    else CHECK(vk0->n_prev == 1 && vk0->prev[0].pc.u[6] == 4); /* default: 4 rows per subgroup */
    unsetenv("ONEBIT_VK_Q8");
}

/* One token's matmul of a random W (type t, K x N) on x in int8 steps, on backend be,
 * checked against the reference; the backend's last list (prev) holds its dispatches. */
static void one_token_check(ob_backend *be, ob_type t, int64_t K, int64_t N, const char *what) {
    void *w;
    float *x;
    ob_tensor *o;
    ob_graph *g = q8_matmul_graph(t, K, N, 1, &w, &x, &o);
    check_on(be, g, o, 2e-5 * sqrt((double)K), 1e-5, what);
    ob_graph_free(g);
    free(w);
    free(x);
}

/* The int8 decode path (matvec_q8.comp) on x pre-rounded to its int8 grid, so to float
 * rounding: every type at K with one and many units per lane, T = 1..8, x read from
 * global memory and (ONEBIT_VK_Q8_STAGE=1) staged in shared memory where T * K fits;
 * N = 37 leaves partial row groups. Then
 * two matmuls on one x (the second reuses the quantized x: one QUANT_X dispatch), and a
 * node between them writing over x (no reuse: x is quantized again). */
void test_matvec_q8(void) {
    ob_vk *vk = g_be[0]->ctx;
    if (!vk->q8) {
        printf("matvec_q8: skipped (no integer dot products on %s)\n", vk->info.name);
        return;
    }
    static const ob_type types[] = {OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_Q8_0, OB_TYPE_Q1_0, OB_TYPE_TQ2_0};
    static const struct { int64_t K, T; } shapes[] = {{256, 1}, {768, 1}, {768, 2}, {768, 5}, {768, 8},
                                                      {4352, 1}, {4352, 3}, {4352, 8}};
    /* also the one-invocation-per-block quantizer (quant_x.comp): no shuffles there */
    setenv("ONEBIT_VK_Q8_FUSE", "0", 1);
    ob_backend *staged = backend_with("ONEBIT_VK_Q8_STAGE", "1");
    unsetenv("ONEBIT_VK_Q8_FUSE");
    for (size_t ti = 0; ti < OB_ARRAY_LEN(types); ti++)
        for (size_t si = 0; si < OB_ARRAY_LEN(shapes); si++) {
            const ob_type t = types[ti];
            const int64_t K = shapes[si].K, T = shapes[si].T;
            void *w;
            float *x;
            ob_tensor *o;
            ob_graph *g = q8_matmul_graph(t, K, 37, T, &w, &x, &o);
            char what[96];
            snprintf(what, sizeof(what), "matvec_q8 %s K=%lld T=%lld", ob_type_name(t), (long long)K, (long long)T);
            check_graph(g, o, 2e-5 * sqrt((double)K), 1e-5, what);
            CHECKF(vk->n_prev == 2 && q8_mv(vk, vk->prev[1].pipe, t, T) && vk->prev[1].pc.u[5] == 0,
                   "%s: %lld dispatches, x %s", what, (long long)vk->n_prev,
                   vk->n_prev == 2 && vk->prev[1].pc.u[5] ? "staged" : "global");
            /* x staged in shared memory (ONEBIT_VK_Q8_STAGE=1) where T * K fits */
            if (staged && (si == 1 || si == 3 || si >= 5)) {
                snprintf(what, sizeof(what), "matvec_q8 staged %s K=%lld T=%lld", ob_type_name(t), (long long)K, (long long)T);
                check_on(staged, g, o, 2e-5 * sqrt((double)K), 1e-5, what);
                const ob_vk *sv = staged->ctx;
                CHECKF(sv->n_prev == 2 && sv->prev[1].pc.u[5] == (T * K <= 768 * 16), "%s: x %s", what,
                       sv->n_prev == 2 && sv->prev[1].pc.u[5] ? "staged" : "global");
            }
            ob_graph_free(g);
            free(w); free(x);
        }
    ob_backend_free(staged);
    /* the one-token path at 8, 4, 2 and 1 rows per subgroup (x in registers, shared by the
     * rows), and its per-row path (ONEBIT_VK_Q8_ROWS1=0); ONEBIT_VK_Q8_MIN_WG=0 keeps the
     * rows asked for at any N. N = 37 and 70 end in partial row groups; K = 4352 and 12288
     * take several steps of units, 256 a partial one. ONEBIT_VK_Q6K_ROWS1=0: Q6_K takes
     * the rows asked for too (unset, at most 4: checked after). */
    setenv("ONEBIT_VK_Q8_MIN_WG", "0", 1);
    setenv("ONEBIT_VK_Q6K_ROWS1", "0", 1);
    /* its own random stream: the tests after it keep the inputs they had before it (the
     * model checks' q8_0-cache bound has a thin margin on some draws; see bench/NOTES.md) */
    const ob_rng keep_rng = g_rng;
    ob_rng_seed(&g_rng, 0x0a11u);
    static const char *const rows1[] = {"8", "4", "2", "1", "0"};
    static const ob_vk_shader want_sh[] = {OB_VK_SH_MATVEC_Q8_1, OB_VK_SH_MATVEC_Q8_1R4, OB_VK_SH_MATVEC_Q8_1R2,
                                           OB_VK_SH_MATVEC_Q8_1R1, OB_VK_SH_MATVEC_Q8_1};
    static const struct { int64_t K, N; } one[] = {{256, 37}, {4352, 70}, {12288, 37}};
    for (size_t v = 0; v < OB_ARRAY_LEN(rows1); v++) {
        ob_backend *be = backend_with("ONEBIT_VK_Q8_ROWS1", rows1[v]);
        if (!be) continue;
        ob_vk *bv = be->ctx;
        for (size_t ti = 0; ti < OB_ARRAY_LEN(types); ti++)
            for (size_t si = 0; si < OB_ARRAY_LEN(one); si++) {
                const ob_type t = types[ti];
                char what[96];
                snprintf(what, sizeof(what), "matvec_q8 rows1=%s %s K=%lld N=%lld", rows1[v], ob_type_name(t),
                         (long long)one[si].K, (long long)one[si].N);
                one_token_check(be, t, one[si].K, one[si].N, what);
                CHECKF(bv->n_prev == 2 && bv->prev[1].pipe == bv->pipes[want_sh[v]][t] &&
                           bv->prev[1].pc.u[6] == (v < 4),
                       "%s: pipeline or path not the one asked for", what);
            }
        ob_backend_free(be);
    }
    unsetenv("ONEBIT_VK_Q6K_ROWS1");
    /* Q6_K takes at most 4 rows a subgroup unless ONEBIT_VK_Q6K_ROWS1 says otherwise; the
     * other types the rows asked for */
    static const struct { const char *rows1, *q6cap; uint32_t q6k, tq2; } caps[] = {
        {"4", NULL, 4, 4}, {"8", NULL, 4, 8}, {"4", "2", 2, 4}, {"8", "2", 2, 8}};
    for (size_t c = 0; c < OB_ARRAY_LEN(caps); c++) {
        if (caps[c].q6cap) setenv("ONEBIT_VK_Q6K_ROWS1", caps[c].q6cap, 1);
        ob_backend *rb = backend_with("ONEBIT_VK_Q8_ROWS1", caps[c].rows1);
        unsetenv("ONEBIT_VK_Q6K_ROWS1");
        for (int k = 0; k < 2 && rb; k++) {
            const ob_type t = k ? OB_TYPE_TQ2_0 : OB_TYPE_Q6_K;
            const uint32_t rows = k ? caps[c].tq2 : caps[c].q6k;
            char what[96];
            snprintf(what, sizeof(what), "matvec_q8 rows1=%s, Q6_K rows %s: %s", caps[c].rows1,
                     caps[c].q6cap ? caps[c].q6cap : "unset", ob_type_name(t));
            one_token_check(rb, t, 4352, 70, what);
            const ob_vk *rv = rb->ctx;
            const ob_vk_shader want = rows == 8 ? OB_VK_SH_MATVEC_Q8_1 : rows == 4 ? OB_VK_SH_MATVEC_Q8_1R4 : OB_VK_SH_MATVEC_Q8_1R2;
            CHECKF(rv->n_prev == 2 && rv->prev[1].pipe == rv->pipes[want][t], "%s: not at %u rows", what, rows);
        }
        if (rb) ob_backend_free(rb);
    }
    unsetenv("ONEBIT_VK_Q8_MIN_WG");
    g_rng = keep_rng;
    for (int between = 0; between < 2; between++) {
        /* x is a 2-cell F32 cache; between: a KV_STORE writes new rows into it */
        const int64_t K = 512, N = 70, nw[2] = {K, N}, nx[2] = {K, 2}, n2[1] = {2};
        void *w = rand_typed(OB_TYPE_Q6_K, K, N, 1.0f), *w2 = rand_typed(OB_TYPE_TQ2_0, K, N, 1.0f);
        float *x = rand_f32(K * 2, 1.0f), *xn = rand_f32(K * 2, 1.0f);
        round_q8(x, K * 2);
        round_q8(xn, K * 2);
        int32_t pos[2] = {1, 0}, seq[2] = {0, 0};
        ob_graph *g = ob_graph_new(12);
        ob_tensor *tx = ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x);
        ob_tensor *a = ob_matmul(g, ob_leaf(g, "w", OB_TYPE_Q6_K, 2, nw, w), tx);
        if (between)
            ob_kv_store(g, ob_leaf(g, "xn", OB_TYPE_F32, 2, nx, xn), tx, ob_leaf(g, "pos", OB_TYPE_I32, 1, n2, pos),
                        ob_leaf(g, "seq", OB_TYPE_I32, 1, n2, seq), 2);
        ob_tensor *o = ob_add(g, a, ob_matmul(g, ob_leaf(g, "w2", OB_TYPE_TQ2_0, 2, nw, w2), tx));
        check_graph(g, o, 2e-5 * sqrt((double)K), 1e-5, between ? "matvec_q8 x written between" : "matvec_q8 shared x");
        int quants = 0;
        for (int64_t i = 0; i < vk->n_prev; i++) quants += is_quant(vk, vk->prev[i].pipe);
        CHECKF(quants == 1 + between, "x quantized %d times, want %d", quants, 1 + between);
        ob_graph_free(g);
        free(w); free(w2); free(x); free(xn);
    }
    /* An RMS norm and a GLU write the int8 x of the matmul after them themselves (q8_fuse):
     * no QUANT_X pass for the norm's reader, the GLU's product and int8 x in one. */
    for (int glu = 0; glu < 2; glu++) {
        const int64_t K = 1024, N = 70, T = glu ? 1 : 3, nw[2] = {K, N}, nx[2] = {K, T};
        void *w = rand_typed(OB_TYPE_Q4_K, K, N, 1.0f);
        float *x = rand_f32(K * T, 1.0f), *u = rand_f32(K * T, 1.0f), *nwt = rand_f32(K, 1.0f);
        ob_graph *g = ob_graph_new(12);
        ob_tensor *h = ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x);
        h = glu ? ob_glu(g, h, ob_leaf(g, "u", OB_TYPE_F32, 2, nx, u), OB_ACT_SILU)
                : ob_rms_norm(g, h, ob_leaf(g, "nw", OB_TYPE_F32, 1, nx, nwt), 1e-6f);
        ob_tensor *o = ob_matmul(g, ob_leaf(g, "w", OB_TYPE_Q4_K, 2, nw, w), h);
        check_graph(g, o, mm_atol(OB_TYPE_Q4_K, K, T), 1e-4, glu ? "matvec_q8 after glu" : "matvec_q8 after norm");
        int quants = 0, fused = 0;
        for (int64_t i = 0; i < vk->n_prev; i++) {
            const bool qx = is_quant(vk, vk->prev[i].pipe);
            quants += qx && vk->prev[i].pc.u[3] == 0;
            fused += qx ? vk->prev[i].pc.u[3] == 1 : vk->prev[i].pipe == vk->pipes[OB_VK_SH_NORM_Q8][OB_TYPE_F32];
        }
        CHECKF(vk->q8_fuse ? quants == 0 && fused == 1 && vk->n_prev == 2 : quants == 1,
               "%s: %d x quantized apart, %d fused, %lld dispatches", glu ? "glu" : "norm", quants, fused,
               (long long)vk->n_prev);
        ob_graph_free(g);
        free(w); free(x); free(u); free(nwt);
    }
    /* One token's gate and up matmuls on a norm's int8 x and their GLU: one dispatch
     * (matvec_q8.comp's GLU mode) writes the GLU's output and its int8 form, which the down
     * matmul reads; N = 288 leaves a partial workgroup where rows per workgroup exceed 32.
     * Checked twice: the GLU itself (its f32 output) and the down matmul (its int8 x), on the
     * default backends (gate, up, then the GLU quantizer). Weights of scale 1 / sqrt(K) keep
     * gate and up ~N(0, 1), as the x of mm_atol. */
    const ob_rng keep_rng3 = g_rng;
    ob_rng_seed(&g_rng, 0x6a7eu);
    static const ob_type gtypes[] = {OB_TYPE_Q4_K, OB_TYPE_TQ2_0};
    for (size_t ti = 0; ti < OB_ARRAY_LEN(gtypes); ti++)
        for (int64_t N = 256; N <= 288; N += 32)
            for (int down = 0; down < 2; down++) {
                const ob_type t = gtypes[ti];
                const int64_t K = 512, M = 70, nx[2] = {K, 1}, nw[2] = {K, N}, nd[2] = {N, M};
                void *wg = rand_typed(t, K, N, 1.0f / sqrtf((float)K)), *wu = rand_typed(t, K, N, 1.0f / sqrtf((float)K));
                void *wd = rand_typed(OB_TYPE_Q8_0, N, M, 1.0f);
                float *x = rand_f32(K, 1.0f), *nwt = rand_f32(K, 1.0f);
                ob_graph *g = ob_graph_new(16);
                ob_tensor *h = ob_rms_norm(g, ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x), ob_leaf(g, "nw", OB_TYPE_F32, 1, nx, nwt), 1e-6f);
                ob_tensor *mg = ob_matmul(g, ob_leaf(g, "wg", t, 2, nw, wg), h);
                ob_tensor *mu = ob_matmul(g, ob_leaf(g, "wu", t, 2, nw, wu), h);
                ob_tensor *gl = ob_glu(g, mg, mu, OB_ACT_SILU);
                ob_tensor *o = down ? ob_matmul(g, ob_leaf(g, "wd", OB_TYPE_Q8_0, 2, nd, wd), gl) : gl;
                char what[96];
                snprintf(what, sizeof(what), "gate/up/glu %s N=%lld %s", ob_type_name(t), (long long)N, down ? "down" : "glu");
                const double atol = down ? 2 * mm_atol(OB_TYPE_Q8_0, N, 1) : 2 * mm_atol(t, K, 1) / sqrt((double)K);
                check_graph(g, o, atol, 1e-2, what);
                CHECKF(!vk->q8_fuse || vk->n_prev == 4 + down, "%s: fused by default, %lld dispatches", what,
                       (long long)vk->n_prev);
                ob_graph_free(g);
                free(wg); free(wu); free(wd); free(x); free(nwt);
            }
    g_rng = keep_rng3;
    /* One token's matmul and the residual ADD after it in one dispatch. By default (prenorm)
     * it also writes the int8 x of the sum times the next RMS norm's weight and one sum of
     * squares per workgroup, the norm is not dispatched, and the matmul after it (its one
     * reader) scales its dot products by the norm's r. With ONEBIT_VK_PRENORM=0 the
     * matmul writes partial sums of squares and the norm runs as N / 256 workgroups.
     * Checked on the sum and on the matmul after the norm, and with ONEBIT_VK_RES_FUSE=0
     * (the ADD fused into the norm instead). */
    ob_backend *nores = backend_with("ONEBIT_VK_RES_FUSE", "0");
    ob_backend *nopn = backend_with("ONEBIT_VK_PRENORM", "0");
    const ob_rng keep_rng4 = g_rng;
    ob_rng_seed(&g_rng, 0x4e5u);
    static const ob_type mtypes[] = {OB_TYPE_Q4_K, OB_TYPE_TQ2_0, OB_TYPE_Q6_K, OB_TYPE_Q1_0};
    for (size_t ti = 0; ti < OB_ARRAY_LEN(mtypes); ti++)
        for (int64_t N = 1024; N <= 1536; N += 512)
            for (int last = 0; last < 2; last++) {
                const ob_type t = mtypes[ti];
                const int64_t K = 512, M = 70, nx[2] = {K, 1}, nr[2] = {N, 1}, nw[2] = {K, N}, n2[2] = {N, M};
                void *w1 = rand_typed(t, K, N, 1.0f), *w2 = rand_typed(OB_TYPE_Q8_0, N, M, 1.0f);
                float *x = rand_f32(K, 1.0f), *nw1 = rand_f32(K, 1.0f), *nw2 = rand_f32(N, 1.0f), *res = rand_f32(N, 8.0f);
                ob_graph *g = ob_graph_new(16);
                ob_tensor *h = ob_rms_norm(g, ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x), ob_leaf(g, "nw1", OB_TYPE_F32, 1, nx, nw1), 1e-6f);
                ob_tensor *mm = ob_matmul(g, ob_leaf(g, "w1", t, 2, nw, w1), h);
                ob_tensor *sum = ob_add(g, ob_leaf(g, "res", OB_TYPE_F32, 2, nr, res), mm);
                ob_tensor *h2 = ob_rms_norm(g, sum, ob_leaf(g, "nw2", OB_TYPE_F32, 1, nr, nw2), 1e-6f);
                ob_tensor *o = ob_matmul(g, ob_leaf(g, "w2", OB_TYPE_Q8_0, 2, n2, w2), h2);
                /* the sum read last (as a residual stream is), so no later node takes its bytes
                 * before it is checked: one dispatch more (kd) */
                ob_tensor *keep = last ? NULL : ob_scale(g, sum, 1.0f);
                const int64_t kd = last ? 0 : 1;
                char what[96];
                snprintf(what, sizeof(what), "matmul+add+norm %s N=%lld %s", ob_type_name(t), (long long)N, last ? "out" : "sum");
                ob_tensor *chk = last ? o : keep;
                /* x = norm(x) * nw1 is a product of normals: heavier tails than mm_atol's
                 * N(0, 1), so larger block maxima and int8 steps (the sum was 1.03 x mm_atol
                 * off on one H200 draw, fused and unfused alike) */
                const double atol = last ? 2 * mm_atol(OB_TYPE_Q8_0, N, 1) : 2 * mm_atol(t, K, 1);
                const int64_t pn0 = vk->pn_count;
                check_graph(g, chk, atol, 1e-3, what);
                /* the prenorm producer: whole 32-row blocks of 256 invocations */
                const uint32_t pnr = vk->info.subgroup <= 64 ? 256 / vk->info.subgroup * 4 : 0;
                const bool pn_want = vk->prenorm && pnr && pnr % 32 == 0 && N % pnr == 0;
                CHECKF(pn_want ? vk->pn_count > pn0 : vk->pn_count == pn0, "%s: prenorm %lld times", what,
                       (long long)(vk->pn_count - pn0));
                for (int b = 0; b < 2; b++) {
                    ob_backend *bb = b == 0 ? g_be[0] : nopn;
                    const ob_vk *bv = bb ? bb->ctx : NULL;
                    if (!bv) continue;
                    if (b) check_on_as(bb, g, chk, atol, 1e-3, what, "no prenorm");
                    int fused = 0, split = 0, pnp = 0, pnc = 0;
                    for (int64_t i = 0; i < bv->n_prev; i++) {
                        fused += q8_mv(bv, bv->prev[i].pipe, t, 1) && bv->prev[i].pc.u[7] == 1u;
                        split += bv->prev[i].pc.u[8] == (uint32_t)(N / 256) &&
                                 (bv->prev[i].pipe == bv->pipes[OB_VK_SH_NORM_Q8][OB_TYPE_F32] ||
                                  bv->prev[i].pipe == bv->pipes[OB_VK_SH_NORM][OB_TYPE_F32]);
                        pnp += bv->prev[i].pipe && bv->prev[i].pipe == bv->pipes[OB_VK_SH_MATVEC_Q8_PNP][t];
                        pnc += q8_pnc(bv, bv->prev[i].pipe, OB_TYPE_Q8_0);
                    }
                    const bool ok = !bv->q8_fuse           ? fused == 0 && pnp == 0
                                    : b == 0 && pn_want    ? pnp == 1 && pnc == 1 && fused == 0 && split == 0 && bv->n_prev == 3 + kd
                                                           : fused == 1 && split == 1 && pnp == 0 && bv->n_prev == 4 + kd;
                    CHECKF(ok, "%s%s: %d fused, %d split, %d/%d prenorm, %lld dispatches", what,
                           b == 1 ? ", no prenorm" : "", fused, split, pnp, pnc, (long long)bv->n_prev);
                }
                if (nores) {
                    check_on_as(nores, g, chk, atol, 1e-3, what, "unfused");
                    const ob_vk *nv = nores->ctx;
                    int f2 = 0;
                    for (int64_t i = 0; i < nv->n_prev; i++) f2 += nv->prev[i].pc.u[7] == 1 && q8_mv(nv, nv->prev[i].pipe, t, 1);
                    CHECKF(f2 == 0, "%s, unfused: fused anyway", what);
                }
                ob_graph_free(g);
                free(w1); free(w2); free(x); free(nw1); free(nw2); free(res);
            }
    g_rng = keep_rng4;
    if (nopn) ob_backend_free(nopn);
    if (nores) ob_backend_free(nores);
    /* Gate, up and their GLU on a prenorm's int8 x (after a matmul + residual ADD): one
     * dispatch (OB_VK_SH_MATVEC_Q8_PNG) writes the GLU's output and its int8 form, by
     * default for Q1_0 only, with ONEBIT_VK_PN_GLU=1 for every type, with 0 never. N = 1056
     * ends in a partial workgroup of whole 32-row blocks. Checked on the GLU's output and on
     * the down matmul after it (its int8 x): Q8_0, or (down 2) a TQ2_0 / Q6_K down, whose
     * GLU the X16 form writes (16 rows a workgroup, scales per 16 elements) by default for
     * TQ2_0 gate/up, with ONEBIT_VK_PN_GLU16=all for every type, and the down reads it. */
    ob_backend *pgall = backend_with("ONEBIT_VK_PN_GLU", "1"), *pgoff = backend_with("ONEBIT_VK_PN_GLU", "0");
    ob_backend *pg16 = backend_with("ONEBIT_VK_PN_GLU16", "all");
    const ob_rng keep_rng5 = g_rng;
    ob_rng_seed(&g_rng, 0x96a1u);
    static const ob_type ptypes[] = {OB_TYPE_Q1_0, OB_TYPE_TQ2_0, OB_TYPE_Q4_K, OB_TYPE_Q6_K};
    for (size_t ti = 0; ti < OB_ARRAY_LEN(ptypes); ti++)
        for (int64_t N = 1024; N <= 1056; N += 32)
            for (int down = 0; down < 3; down++) {
                const ob_type t = ptypes[ti];
                /* a down that reads an X16 x: rows of whole 256-blocks */
                const ob_type dt = down < 2 ? OB_TYPE_Q8_0 : t == OB_TYPE_Q4_K || t == OB_TYPE_Q6_K ? OB_TYPE_Q6_K : OB_TYPE_TQ2_0;
                if (down == 2 && N % 256) continue;
                /* the X16 downs on a stream of their own: the other cases keep their draws */
                const ob_rng keep_rng6 = g_rng;
                if (down == 2) ob_rng_seed(&g_rng, 0x16a1u + (uint32_t)ti);
                const int64_t K = 512, M = 70, nx[2] = {K, 1}, nw1[2] = {K, K}, nw[2] = {K, N}, nd[2] = {N, M};
                void *w1 = rand_typed(OB_TYPE_Q8_0, K, K, 1.0f / sqrtf((float)K));
                void *wg = rand_typed(t, K, N, 1.0f / sqrtf((float)K)), *wu = rand_typed(t, K, N, 1.0f / sqrtf((float)K));
                void *wd = rand_typed(dt, N, M, 1.0f);
                float *x = rand_f32(K, 1.0f), *nw0 = rand_f32(K, 1.0f), *res = rand_f32(K, 1.0f), *nwt = rand_f32(K, 1.0f);
                ob_graph *g = ob_graph_new(20);
                ob_tensor *h = ob_rms_norm(g, ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x), ob_leaf(g, "nw0", OB_TYPE_F32, 1, nx, nw0), 1e-6f);
                ob_tensor *sum = ob_add(g, ob_leaf(g, "res", OB_TYPE_F32, 2, nx, res), ob_matmul(g, ob_leaf(g, "w1", OB_TYPE_Q8_0, 2, nw1, w1), h));
                ob_tensor *h2 = ob_rms_norm(g, sum, ob_leaf(g, "nw", OB_TYPE_F32, 1, nx, nwt), 1e-6f);
                ob_tensor *gl = ob_glu(g, ob_matmul(g, ob_leaf(g, "wg", t, 2, nw, wg), h2), ob_matmul(g, ob_leaf(g, "wu", t, 2, nw, wu), h2),
                                       OB_ACT_SILU);
                ob_tensor *o = down ? ob_matmul(g, ob_leaf(g, "wd", dt, 2, nd, wd), gl) : gl;
                char what[96];
                snprintf(what, sizeof(what), "prenorm gate/up/glu %s N=%lld %s%s", ob_type_name(t), (long long)N,
                         down ? "down " : "glu", down ? ob_type_name(dt) : "");
                const double atol = down ? 2 * mm_atol(dt, N, 1) : 2 * mm_atol(t, K, 1) / sqrt((double)K);
                check_graph(g, o, atol, 1e-2, what);
                static const char *const bname[4] = {"", ", PN_GLU=1", ", PN_GLU=0", ", PN_GLU16=all"};
                for (int b = 0; b < 4; b++) {
                    ob_backend *bb = b == 0 ? g_be[0] : b == 1 ? pgall : b == 2 ? pgoff : pg16;
                    const ob_vk *bv = bb ? bb->ctx : NULL;
                    if (!bv) continue;
                    if (b) check_on_as(bb, g, o, atol, 1e-2, what, bname[b] + 2);
                    /* the 32-row form; the X16 form; dispatches on an X16 x (the X16 form and
                     * the down after it) */
                    int png = 0, png16 = 0, x16 = 0;
                    for (int64_t i = 0; i < bv->n_prev; i++) {
                        const VkPipeline p = bv->prev[i].pipe;
                        png += p && p == bv->pipes[OB_VK_SH_MATVEC_Q8_PNG][t];
                        png16 += p && p == bv->pipes[OB_VK_SH_MATVEC_Q8_PNG][ob_vk_pipe_slot((unsigned)t | OB_VK_X16)];
                        for (int s = 0; p && s < OB_VK_SH_COUNT; s++)
                            for (int k = 2 * OB_TYPE_COUNT; k < OB_VK_PIPE_SLOTS; k++) x16 += p == bv->pipes[s][k];
                    }
                    const bool on = bv->prenorm && bv->q8_fuse && bv->pn_count > 0 && bv->info.subgroup <= 64 && b != 2;
                    const bool want16 = on && down == 2 && (t == OB_TYPE_TQ2_0 || b == 3);
                    const bool want = on && !want16 && (b == 1 || t == OB_TYPE_Q1_0);
                    CHECKF(png == (want ? 1 : 0) && png16 == (want16 ? 1 : 0) && x16 == (want16 ? 2 : 0),
                           "%s%s: %d gate/up/GLU dispatches, %d X16, %d on an X16 x, %lld in all", what, bname[b], png, png16,
                           x16, (long long)bv->n_prev);
                }
                ob_graph_free(g);
                free(w1); free(wg); free(wu); free(wd); free(x); free(nw0); free(res); free(nwt);
                if (down == 2) g_rng = keep_rng6;
            }
    g_rng = keep_rng5;
    if (pgall) ob_backend_free(pgall);
    if (pgoff) ob_backend_free(pgoff);
    if (pg16) ob_backend_free(pg16);
    /* A decode attention (one workgroup per head) writes the int8 x of the matmul after it
     * itself: no quantization pass; at 29 and 39 cells seen. Its own random stream, as
     * above. */
    const ob_rng keep_rng2 = g_rng;
    ob_rng_seed(&g_rng, 0xa77eu);
    for (int late = 0; late < 3; late++) {
        /* late 2: 300 cells, split over 3 workgroups on attn_dec.comp; the split that merges
         * writes the int8 x */
        const int64_t hd = 64, H = 4, n_kv = 2, cps = late == 2 ? 300 : 40, K = hd * H, N = 70, nw[2] = {K, N};
        const int64_t nq[3] = {hd, H, 1}, nc[2] = {hd * n_kv, cps}, n1[1] = {1};
        void *w = rand_typed(OB_TYPE_Q4_K, K, N, 1.0f);
        void *kc = rand_typed(OB_TYPE_F16, hd * n_kv, cps, 1.0f), *vc = rand_typed(OB_TYPE_F16, hd * n_kv, cps, 1.0f);
        float *q = rand_f32(hd * H, 1.0f), tok = 0;
        int32_t pos[1] = {late == 1 ? (int32_t)cps - 1 : late == 2 ? 287 : 29}, seq[1] = {0};
        ob_graph *g = ob_graph_new(12);
        ob_tensor *at = ob_attention(g, ob_leaf(g, "q", OB_TYPE_F32, 3, nq, q), ob_leaf(g, "k", OB_TYPE_F16, 2, nc, kc),
                                     ob_leaf(g, "v", OB_TYPE_F16, 2, nc, vc), ob_leaf(g, "pos", OB_TYPE_I32, 1, n1, pos),
                                     ob_leaf(g, "seq", OB_TYPE_I32, 1, n1, seq), ob_leaf(g, "tok", OB_TYPE_F32, 1, n1, &tok),
                                     (int)cps, (int)n_kv, 0, 1, 1.0f / sqrtf((float)hd), 0.0f);
        ob_tensor *o = ob_matmul(g, ob_leaf(g, "w", OB_TYPE_Q4_K, 2, nw, w), at);
        const char *what = late == 2 ? "matvec_q8 after split attention" : late ? "matvec_q8 after attention, last cell" : "matvec_q8 after attention";
        check_graph(g, o, mm_atol(OB_TYPE_Q4_K, K, 1), 1e-4, what);
        int quants = 0, fused = 0;
        for (int64_t i = 0; i < vk->n_prev; i++) {
            quants += is_quant(vk, vk->prev[i].pipe);
            const VkPipeline p = vk->prev[i].pipe;
            fused += (p == vk->pipes[OB_VK_SH_ATTENTION][OB_TYPE_F32] || p == vk->pipes[OB_VK_SH_ATTN_DEC][OB_TYPE_F16] ||
                      p == vk->pipes[OB_VK_SH_ATTN_DEC_G2][OB_TYPE_F16] || p == vk->pipes[OB_VK_SH_ATTN_DEC_G1][OB_TYPE_F16]) &&
                     (vk->prev[i].pc.u[6] & 8u);
        }
        CHECKF(vk->q8_fuse ? quants == 0 && fused == 1 && vk->n_prev == 2 : quants == 1,
               "%s: %d x quantized apart, %d fused, %lld dispatches", what, quants, fused, (long long)vk->n_prev);
        ob_graph_free(g);
        free(w); free(kc); free(vc); free(q);
    }
    g_rng = keep_rng2;
}
