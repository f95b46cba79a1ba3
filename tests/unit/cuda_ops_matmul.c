/* test_cuda_ops' matmul groups: every weight type for MATMUL and GET_ROWS, the int8 decode
 * matvec (k_mmvq_run), MMQ, cuBLAS, the mixture of experts, and batch invariance, each
 * against the CPU reference (cuda_testutil.h). */
#include "cuda_testutil.h"
#include "backend/cuda/cuda_mmvq.h"
#include "format/quant.h"
#include <math.h>
#include <string.h>

static const ob_type all_types[] = {
    OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_BF16, OB_TYPE_Q4_0, OB_TYPE_Q4_1, OB_TYPE_Q5_0, OB_TYPE_Q5_1, OB_TYPE_Q8_0,
    OB_TYPE_Q8_1, OB_TYPE_Q2_K, OB_TYPE_Q3_K, OB_TYPE_Q4_K, OB_TYPE_Q5_K, OB_TYPE_Q6_K, OB_TYPE_Q8_K, OB_TYPE_IQ2_XXS,
    OB_TYPE_IQ2_XS, OB_TYPE_IQ2_S, OB_TYPE_IQ3_XXS, OB_TYPE_IQ3_S, OB_TYPE_IQ1_S, OB_TYPE_IQ1_M, OB_TYPE_IQ4_NL,
    OB_TYPE_IQ4_XS, OB_TYPE_TQ1_0, OB_TYPE_TQ2_0, OB_TYPE_Q1_0, OB_TYPE_MXFP4,
};

/* Types whose matmul quantizes x to int8 per 32-element block: the decode matvec (T <= 16)
 * and the tensor-core MMQ path (T >= 2; op_mmq.cu also takes Q4_0 and Q5_K). */
static bool int8_act_type(ob_type t) {
    return t == OB_TYPE_Q4_K || t == OB_TYPE_Q6_K || t == OB_TYPE_Q8_0 || t == OB_TYPE_Q1_0 || t == OB_TYPE_TQ2_0 ||
           t == OB_TYPE_Q4_0 || t == OB_TYPE_Q5_K;
}

void test_matmul_get_rows(ob_backend *be) {
    const int64_t K = 512, N = 67;
    const int Ts[] = {1, 3, 8, 17};
    for (size_t ti = 0; ti < OB_ARRAY_LEN(all_types); ti++) {
        ob_type t = all_types[ti];
        void *w = rand_typed(t, K * N, 0.5f);
        for (size_t k = 0; k < OB_ARRAY_LEN(Ts); k++) {
            int T = Ts[k];
            ob_graph *g = ob_graph_new(8);
            float *x = rand_f32(K * T, 1.0f);
            int64_t new[2] = {K, N}, nex[2] = {K, T};
            ob_tensor *W = ob_leaf(g, "w", t, 2, new, w), *X = ob_leaf(g, "x", OB_TYPE_F32, 2, nex, x);
            ob_tensor *y = ob_matmul(g, W, X);
            CHECKF(be->iface->supports(be, y), "matmul %s supported", ob_type_name(t));
            char what[64];
            snprintf(what, sizeof(what), "matmul %s T=%d", ob_type_name(t), T);
            /* T > 8 multiplies f16-rounded weights and activations (tensor cores); T <= 8
             * on int8 types quantizes x per 32 elements (test_matmul_int8 bounds it tightly). */
            double tol = int8_act_type(t) ? 5e-2 : T > 8 && t != OB_TYPE_F32 ? 4e-3 : 2e-5;
            run_both(be, g, y, NULL, tol, what);
            ob_graph_free(g);
            free(x);
        }
        /* GET_ROWS from the same table (N rows of K). */
        ob_graph *g = ob_graph_new(8);
        int32_t ids[5];
        for (int i = 0; i < 5; i++) ids[i] = (int32_t)(ob_rng_u64(&g_rng) % N);
        int64_t new[2] = {K, N}, ne1[1] = {5};
        ob_tensor *W = ob_leaf(g, "w", t, 2, new, w), *I = ob_leaf(g, "ids", OB_TYPE_I32, 1, ne1, ids);
        ob_tensor *y = ob_get_rows(g, W, I);
        char what[64];
        snprintf(what, sizeof(what), "get_rows %s", ob_type_name(t));
        run_both(be, g, y, NULL, 1e-6, what);
        ob_graph_free(g);
        free(w);
    }
}

/* Batch-invariant mode (backend.h's deterministic): a MATMUL column must come out bitwise
 * the same whatever the column count, k_mmq_dec's fixed plan (Q4_K, Q6_K, Q8_0: chunks of
 * 16 or 8 columns, K split into partial sums at N = 300) and a column at a time for the
 * rest (the TMA matvec for TQ2_0 at K = 4096, the int8 matvec, the plain one). Each
 * product at T = 40 is also checked against the CPU reference. */
void test_det_matmul(void) {
    char err[256] = {0};
    ob_backend *be = ob_backend_cuda_new(0, false, err, sizeof(err));
    CHECKF(be != NULL, "det backend: %s", err);
    if (!be) return;
    be->deterministic = true;
    const ob_type types[] = {OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_Q8_0, OB_TYPE_Q5_K, OB_TYPE_Q4_0, OB_TYPE_TQ2_0, OB_TYPE_F16,
                             OB_TYPE_F32};
    const int64_t K = 4096, N = 300, TT = 40;
    const int subs[][2] = {{0, 1}, {7, 1}, {39, 1}, {0, 3}, {5, 17}, {16, 16}, {23, 17}};
    for (size_t ti = 0; ti < OB_ARRAY_LEN(types); ti++) {
        const ob_type t = types[ti];
        void *w = rand_typed(t, K * N, 0.5f);
        float *x = rand_f32(K * TT, 1.0f), *full = NULL;
        char what[96];
        {
            ob_graph *g = ob_graph_new(8);
            int64_t new[2] = {K, N}, nex[2] = {K, TT};
            ob_tensor *W = ob_leaf(g, "w", t, 2, new, w), *X = ob_leaf(g, "x", OB_TYPE_F32, 2, nex, x);
            ob_tensor *y = ob_matmul(g, W, X);
            snprintf(what, sizeof(what), "deterministic matmul %s T=%d", ob_type_name(t), (int)TT);
            run_both_keep(be, g, y, NULL, int8_act_type(t) ? 5e-2 : 2e-5, what, &full);
            ob_graph_free(g);
        }
        int bad = 0;
        for (size_t si = 0; si < OB_ARRAY_LEN(subs) && full; si++) {
            const int c0 = subs[si][0], c = subs[si][1];
            ob_graph *g = ob_graph_new(8);
            int64_t new[2] = {K, N}, nex[2] = {K, c};
            ob_tensor *W = ob_leaf(g, "w", t, 2, new, w), *X = ob_leaf(g, "x", OB_TYPE_F32, 2, nex, x + (int64_t)c0 * K);
            ob_tensor *y = ob_matmul(g, W, X);
            float *part = NULL;
            snprintf(what, sizeof(what), "deterministic matmul %s columns %d..%d", ob_type_name(t), c0, c0 + c - 1);
            run_both_keep(be, g, y, NULL, int8_act_type(t) ? 5e-2 : 2e-5, what, &part);
            if (part && memcmp(part, full + (int64_t)c0 * N, sizeof(float) * (size_t)(c * N))) bad++;
            free(part);
            ob_graph_free(g);
        }
        CHECKF(bad == 0, "deterministic matmul %s: %d of %d column ranges differ from the T=40 product", ob_type_name(t), bad,
               (int)OB_ARRAY_LEN(subs));
        printf("deterministic matmul %s: %d of %d column ranges differ bitwise from T=40\n", ob_type_name(t), bad,
               (int)OB_ARRAY_LEN(subs));
        free(full);
        free(x);
        free(w);
    }
    ob_backend_free(be);
}

/* A Qwen3-MoE feed-forward on router logits given as a leaf: MOE_GATE (softmax, top k,
 * renormalised), gate and up MATMUL_ID on x shared by a token's slots, SwiGLU, down
 * MATMUL_ID on one row per slot, MOE_SUM. */
static ob_tensor *moe_ffn(ob_graph *g, ob_type t, int64_t H, int64_t F, int64_t E, int k, int64_t T, float *logits, float *h,
                          void *wg, void *wu, void *wd) {
    int64_t nl[2] = {E, T}, nh[2] = {H, T}, nu[3] = {H, F, E}, nd[3] = {F, H, E};
    ob_tensor *gate = ob_moe_gate(g, ob_leaf(g, "logits", OB_TYPE_F32, 2, nl, logits), NULL, k, OB_MOE_SOFTMAX, true, 1.0f);
    ob_tensor *X = ob_leaf(g, "h", OB_TYPE_F32, 2, nh, h);
    ob_tensor *gt = ob_matmul_id(g, ob_leaf(g, "gate_exps", t, 3, nu, wg), X, gate);
    ob_tensor *up = ob_matmul_id(g, ob_leaf(g, "up_exps", t, 3, nu, wu), X, gate);
    ob_tensor *d = ob_matmul_id(g, ob_leaf(g, "down_exps", t, 3, nd, wd), ob_glu(g, gt, up, OB_ACT_SILU), gate);
    return ob_moe_sum(g, d, gate);
}

/* The mixture-of-experts ops (op_moe.cu) are batch invariant in both modes: a token's
 * output of moe_ffn is bitwise the same at T = 40 and in column ranges alone, by default
 * and with the backend's deterministic flag. Q4_K and Q6_K take the int8 kernel, F16 and
 * MXFP4 the f32 one; 64 experts, 8 chosen. Every run is also checked against the CPU
 * reference (relative to the largest output). */
void test_moe_invariance(void) {
    const ob_type types[] = {OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_F16, OB_TYPE_MXFP4};
    const int64_t H = 256, F = 256, E = 64, TT = 40; /* rows whole Q4_K / Q6_K blocks (256) */
    const int k = 8;
    const int subs[][2] = {{0, 1}, {7, 1}, {39, 1}, {0, 3}, {5, 17}, {16, 16}, {23, 17}};
    for (int det = 0; det < 2; det++) {
        char err[256] = {0};
        ob_backend *be = ob_backend_cuda_new(0, false, err, sizeof(err));
        CHECKF(be != NULL, "moe backend: %s", err);
        if (!be) return;
        be->deterministic = det != 0;
        for (size_t ti = 0; ti < OB_ARRAY_LEN(types); ti++) {
            const ob_type t = types[ti];
            const double tol = t == OB_TYPE_Q4_K || t == OB_TYPE_Q6_K ? 5e-2 : 1e-4;
            void *wg = rand_typed(t, H * F * E, 0.1f), *wu = rand_typed(t, H * F * E, 0.1f), *wd = rand_typed(t, F * H * E, 0.1f);
            float *logits = rand_f32(E * TT, 2.0f), *h = rand_f32(H * TT, 1.0f), *full = NULL;
            char what[128];
            {
                ob_graph *g = ob_graph_new(32);
                ob_tensor *y = moe_ffn(g, t, H, F, E, k, TT, logits, h, wg, wu, wd);
                snprintf(what, sizeof(what), "moe ffn %s T=%d%s", ob_type_name(t), (int)TT, det ? " (deterministic)" : "");
                run_both_keep(be, g, y, NULL, tol, what, &full);
                ob_graph_free(g);
            }
            int bad = 0;
            for (size_t si = 0; si < OB_ARRAY_LEN(subs) && full; si++) {
                const int c0 = subs[si][0], c = subs[si][1];
                ob_graph *g = ob_graph_new(32);
                ob_tensor *y = moe_ffn(g, t, H, F, E, k, c, logits + c0 * E, h + c0 * H, wg, wu, wd);
                float *part = NULL;
                snprintf(what, sizeof(what), "moe ffn %s tokens %d..%d%s", ob_type_name(t), c0, c0 + c - 1,
                         det ? " (deterministic)" : "");
                run_both_keep(be, g, y, NULL, tol, what, &part);
                if (part && memcmp(part, full + c0 * H, sizeof(float) * (size_t)(c * H))) bad++;
                free(part);
                ob_graph_free(g);
            }
            CHECKF(bad == 0, "moe ffn %s%s: %d of %d token ranges differ from the T=40 run", ob_type_name(t),
                   det ? " (deterministic)" : "", bad, (int)OB_ARRAY_LEN(subs));
            printf("moe ffn %s%s: %d of %d token ranges differ bitwise from T=40\n", ob_type_name(t),
                   det ? " (deterministic)" : "", bad, (int)OB_ARRAY_LEN(subs));
            free(full);
            free(logits);
            free(h);
            free(wg);
            free(wu);
            free(wd);
        }
        ob_backend_free(be);
    }
}

/* Plain tables (F32, F16, BF16) whose rows are not whole 32-element chunks (jina-bert-v2's
 * test model has hidden size 72): MATMUL on the element matvec (T <= 8) and on cuBLAS
 * (T > 8), GET_ROWS, and CPY to each plain type (exact). */
void test_plain_rows(ob_backend *be) {
    static const ob_type types[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_BF16};
    static const int64_t Ks[] = {72, 40};
    const int64_t N = 37;
    const int Ts[] = {1, 3, 8, 17};
    for (size_t ki = 0; ki < OB_ARRAY_LEN(Ks); ki++)
    for (size_t ty = 0; ty < OB_ARRAY_LEN(types); ty++) {
        const int64_t K = Ks[ki];
        const ob_type t = types[ty];
        void *w = rand_typed(t, K * N, 0.5f);
        int64_t new[2] = {K, N};
        char what[80];
        for (size_t k = 0; k < OB_ARRAY_LEN(Ts); k++) {
            const int T = Ts[k];
            ob_graph *g = ob_graph_new(8);
            float *x = rand_f32(K * T, 1.0f);
            int64_t nex[2] = {K, T};
            ob_tensor *y = ob_matmul(g, ob_leaf(g, "w", t, 2, new, w), ob_leaf(g, "x", OB_TYPE_F32, 2, nex, x));
            snprintf(what, sizeof(what), "matmul %s K=%lld T=%d", ob_type_name(t), (long long)K, T);
            CHECKF(be->iface->supports(be, y), "%s: not supported", what);
            /* T > 8: cuBLAS on f16-rounded x (and weights) except for F32 (SGEMM) */
            run_both(be, g, y, NULL, T > 8 && t != OB_TYPE_F32 ? 4e-3 : 2e-5, what);
            ob_graph_free(g);
            free(x);
        }
        ob_graph *g = ob_graph_new(8);
        int32_t ids[6];
        for (int i = 0; i < 6; i++) ids[i] = (int32_t)(ob_rng_u64(&g_rng) % N);
        int64_t ne1[1] = {6};
        ob_tensor *y = ob_get_rows(g, ob_leaf(g, "w", t, 2, new, w), ob_leaf(g, "ids", OB_TYPE_I32, 1, ne1, ids));
        snprintf(what, sizeof(what), "get_rows %s K=%lld", ob_type_name(t), (long long)K);
        CHECKF(be->iface->supports(be, y), "%s: not supported", what);
        run_both(be, g, y, NULL, 0, what);
        ob_graph_free(g);
        /* CPY of three rows: 216 or 120 elements, not whole 32-element chunks either */
        static const ob_type dsts[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_BF16};
        for (size_t d = 0; d < OB_ARRAY_LEN(dsts); d++) {
            g = ob_graph_new(8);
            int64_t ne3[2] = {K, 3};
            y = ob_cpy(g, ob_leaf(g, "w", t, 2, ne3, w), dsts[d]);
            snprintf(what, sizeof(what), "cpy %s -> %s K=%lld", ob_type_name(t), ob_type_name(dsts[d]), (long long)K);
            CHECKF(be->iface->supports(be, y), "%s: not supported", what);
            run_both(be, g, y, NULL, 0, what);
            ob_graph_free(g);
        }
        free(w);
    }
}

/* x rounded the way the device quantizes it (d = max|x| / 127, q = round(x / d)): the
 * device then sees exactly these integers, so its result must match the reference on
 * this x to float rounding, which catches a wrong scale, offset or element order. */
static void round_q8(float *x, int64_t n) {
    for (int64_t b = 0; b < n; b += 32) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b + j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < 32; j++) x[b + j] = d * rintf(x[b + j] * id);
    }
}

/* The int8 matvec at a K that makes every lane loop over several blocks, on raw x (int8
 * error: ~1% relative) and on pre-rounded x (float rounding only); and two matmuls sharing
 * one x, the second reusing the first one's quantized x. */
/* K = 256: a few lanes per row, many rows per warp; 2048: x staged in shared memory;
 * 12288 with 8 columns: x too large for shared memory, read from global memory. */
void test_matmul_int8(ob_backend *be) {
    const int64_t Ks[] = {256, 2048, 12288}, N = 37;
    const int Ts[] = {1, 2, 4, 8, 13, 16};
    for (size_t ki = 0; ki < OB_ARRAY_LEN(Ks); ki++)
    for (size_t ti = 0; ti < OB_ARRAY_LEN(all_types); ti++) {
        const int64_t K = Ks[ki];
        ob_type t = all_types[ti];
        if (!int8_act_type(t)) continue;
        void *w = rand_typed(t, K * N, 0.5f), *w2 = rand_typed(t, K * N, 0.3f);
        for (size_t k = 0; k < OB_ARRAY_LEN(Ts); k++) {
            const int T = Ts[k];
            for (int pre = 0; pre < 3; pre++) {
                ob_graph *g = ob_graph_new(8);
                float *x = rand_f32(K * T, 1.0f);
                if (pre == 1) round_q8(x, K * T);
                int64_t new[2] = {K, N}, nex[2] = {K, T};
                ob_tensor *W = ob_leaf(g, "w", t, 2, new, w), *X = ob_leaf(g, "x", OB_TYPE_F32, 2, nex, x);
                ob_tensor *y = ob_matmul(g, W, X);
                if (pre == 2) y = ob_add(g, y, ob_matmul(g, ob_leaf(g, "w2", t, 2, new, w2), X));
                char what[80];
                snprintf(what, sizeof(what), "matmul int8 %s K=%lld T=%d %s", ob_type_name(t), (long long)K, T,
                         pre == 0 ? "raw x" : pre == 1 ? "rounded x" : "shared x");
                run_both(be, g, y, NULL, pre == 1 ? 1e-4 : 5e-2, what);
                ob_graph_free(g);
                free(x);
            }
        }
        free(w);
        free(w2);
    }
}

/* Random Q4_K or Q6_K rows of n elements straight from random bytes (every bit pattern of
 * their quants and sub-block scales is a valid block) with sane f16 super-block scales:
 * quantizing floats to these types costs ~0.2 us per element on the CPU, too slow for the
 * large decode shapes. */
static void *rand_kblocks(ob_type t, int64_t n) {
    const size_t nb = ob_type_row_size(t, n), bs = t == OB_TYPE_Q4_K ? 144 : 210;
    uint8_t *q = malloc(nb);
    for (size_t i = 0; i < nb; i += 8) {
        const uint64_t r = ob_rng_u64(&g_rng);
        memcpy(q + i, &r, nb - i < 8 ? nb - i : 8);
    }
    for (size_t b = 0; b + bs <= nb; b += bs) {
        const float u = (float)(ob_rng_u64(&g_rng) >> 40) * 0x1p-24f, v = (float)(ob_rng_u64(&g_rng) >> 40) * 0x1p-24f;
        const uint16_t d = ob_f32_to_f16(0.002f + 0.004f * u), dmin = ob_f32_to_f16(0.001f + 0.004f * v);
        if (t == OB_TYPE_Q4_K) {
            memcpy(q + b, &d, 2);
            memcpy(q + b + 2, &dmin, 2);
        } else {
            memcpy(q + b + 208, &d, 2);
        }
    }
    return q;
}

/* The staged one-column matvec (k_mmvq_run: 16-byte aligned rows of >= 1 KB) on the decode
 * shapes: K = 4096 and 12288, one row run or several, full and partial last runs (Q4_K
 * K = 5120: 16 + 4 blocks; Q8_0 K = 4096: 48 + 48 + 32; Q1_0/TQ2_0 K = 4096: one partial),
 * N not a multiple of the 8 rows of a block (rows past N must not be written: the output
 * is poisoned), a large N, x too large for shared memory (K = 32768), and two matmuls on
 * one x (grouped launch). Q4_K/Q6_K weights are random blocks (rand_kblocks). x
 * pre-rounded to the device's int8 grid (tol 1e-4: a wrong offset, slot or scale fails)
 * and raw (5e-2). Also checks the kernel really ran (its
 * launch counter moved); TQ2_0,
 * Q4_K and Q6_K at the K the bulk-copy kernel (op_mmvq_tma.cu) covers must take that
 * kernel instead where the backend has it. */
void test_matmul_mmvq_run(void) {
    /* A backend without captured graphs: a replay would enqueue nothing and leave the
     * launch counter still. */
    char err[256] = {0};
    ob_backend *be = cuda_backend_with("ONEBIT_CUDA_GRAPHS", "0", err, sizeof(err));
    CHECKF(be != NULL, "mmvq run backend: %s", err);
    if (!be) return;
    static const ob_type types[] = {OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_Q8_0, OB_TYPE_Q1_0, OB_TYPE_TQ2_0};
    /* The last three: TQ2_0 only (the bulk-copy kernel's K = 8192 and 16384; K = 12288
     * with the ring wrapping several times, run below with fewer blocks and stages). */
    static const struct { int64_t K, N; } shapes[] = {{4096, 37}, {4096, 4101}, {12288, 1001}, {2048, 9}, {5120, 77},
                                                      {32768, 37}, {4096, 16387}, {8192, 75}, {16384, 33}, {12288, 2000}};
    const bool tma = ob_cu_backend_tma(be);
    int cases = 0;
    for (size_t ty = 0; ty < OB_ARRAY_LEN(types); ty++)
    for (size_t si = 0; si < OB_ARRAY_LEN(shapes); si++) {
        const ob_type t = types[ty];
        const int64_t K = shapes[si].K, N = shapes[si].N;
        if (K % ob_type_block_size(t) != 0) continue;
        if (si >= OB_ARRAY_LEN(shapes) - 3 && t != OB_TYPE_TQ2_0) continue;
        if (N > 10000 && t != OB_TYPE_Q4_K && t != OB_TYPE_Q6_K) continue; /* CPU reference time */
        const size_t rb = ob_type_row_size(t, K);
        const bool staged = rb % 16 == 0 && rb >= 1024; /* rows 16-aligned: device buffers are */
        /* TQ2_0 at K = 4096 * 1..4, Q4_K and Q6_K at 4096 * 1..3 take the bulk-copy
         * kernel where the device has it */
        const int64_t kmax = t == OB_TYPE_TQ2_0 ? 16384 : t == OB_TYPE_Q4_K || t == OB_TYPE_Q6_K ? 12288 : 0;
        const bool bulk = tma && K % 4096 == 0 && K <= kmax;
        /* the wrap case: one block of 4 warps per SM, one row per copy, 2 copies in flight */
        const bool wrap = si == OB_ARRAY_LEN(shapes) - 1;
        char keep_b[64], keep_s[64], keep_c[64];
        ob_backend *bw = NULL; /* the switches are read when a backend is made */
        if (wrap) {
            env_swap("ONEBIT_CUDA_TMV_BLOCKS", "1", keep_b);
            env_swap("ONEBIT_CUDA_TMV_STAGES", "2", keep_s);
            env_swap("ONEBIT_CUDA_TMV_CHUNK", "1", keep_c);
            bw = cuda_backend_with("ONEBIT_CUDA_GRAPHS", "0", err, sizeof(err));
            CHECKF(bw != NULL, "mmvq run wrap backend: %s", err);
            env_restore("ONEBIT_CUDA_TMV_BLOCKS", keep_b);
            env_restore("ONEBIT_CUDA_TMV_STAGES", keep_s);
            env_restore("ONEBIT_CUDA_TMV_CHUNK", keep_c);
            if (!bw) continue;
        }
        const bool kq = t == OB_TYPE_Q4_K || t == OB_TYPE_Q6_K;
        void *w = kq ? rand_kblocks(t, K * N) : rand_typed(t, K * N, 0.5f);
        void *w2 = kq ? rand_kblocks(t, K * N) : rand_typed(t, K * N, 0.3f);
        for (int pre = 0; pre < 3; pre++) {
            if (pre == 0 && N > 1000) continue; /* raw x: the small shapes suffice */
            ob_graph *g = ob_graph_new(8);
            float *x = rand_f32(K, 1.0f);
            if (pre >= 1) round_q8(x, K);
            int64_t new[2] = {K, N}, nex[2] = {K, 1};
            ob_tensor *W = ob_leaf(g, "w", t, 2, new, w), *X = ob_leaf(g, "x", OB_TYPE_F32, 2, nex, x);
            ob_tensor *y = ob_matmul(g, W, X);
            if (pre == 2) y = ob_add(g, y, ob_matmul(g, ob_leaf(g, "w2", t, 2, new, w2), X));
            char what[112];
            snprintf(what, sizeof(what), "mmvq run %s K=%lld N=%lld rb=%zu %s", ob_type_name(t), (long long)K, (long long)N,
                     rb, pre == 0 ? "raw x" : pre == 1 ? "rounded x" : "shared rounded x");
            const double tol = pre ? 1e-4 : 5e-2;
            const int before = ob_test_failures;
            const int64_t l0 = ob_cu_mmvq_run_launches(), b0 = ob_cu_mmvq_tma_launches();
            run_both(wrap ? bw : be, g, y, NULL, tol, what);
            const int64_t dl = ob_cu_mmvq_run_launches() - l0, db = ob_cu_mmvq_tma_launches() - b0;
            if (bulk) CHECKF(db > 0 && dl == 0, "%s: bulk-copy kernel did not run (%lld) or k_mmvq_run did (%lld)", what,
                             (long long)db, (long long)dl);
            else if (staged) CHECKF(dl > 0, "%s: k_mmvq_run did not run", what);
            else CHECKF(dl == 0, "%s: k_mmvq_run ran (%lld launches) where it must not", what, (long long)dl);
            if (!bulk) CHECKF(db == 0, "%s: bulk-copy kernel ran where it must not", what);
            printf("%s: %s (tol %.0e, %s, %lld staged / %lld bulk launches)\n", what, ob_test_failures == before ? "ok" : "FAILED",
                   tol, bulk ? "bulk" : staged ? "staged" : "k_mmvq", (long long)dl, (long long)db);
            cases++;
            ob_graph_free(g);
            free(x);
        }
        free(w);
        free(w2);
        ob_backend_free(bw);
    }
    printf("mmvq run: %d cases\n", cases);
    ob_backend_free(be);
}

/* The int8 tensor-core matmul (op_mmq.cu) for every type it takes, at K with one and with
 * many 512-element stages, N not a multiple of any row tile, and T across the decode tiles
 * (8 and 16 columns) and the prefill tiles (32 and 64 columns), T not a multiple of 8
 * included: raw x (int8 rounding of x, ~1%) and x pre-rounded to what the device quantizes
 * it to, where only float rounding remains, so a wrong fragment layout, scale, min, element
 * order or unwritten output fails at 1e-4. Also 4100 rows (enough row tiles that K is not
 * split across blocks) and K = 1152 for the 32/128-element block types (nine 128-element
 * stages split over blocks unevenly). The largest shapes are skipped to keep the CPU
 * reference quick. */
void test_matmul_mmq(ob_backend *be) {
    static const ob_type types[] = {OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_Q8_0, OB_TYPE_Q4_0, OB_TYPE_Q5_K, OB_TYPE_Q1_0,
                                    OB_TYPE_TQ2_0};
    const int64_t Ks[] = {256, 4096, 12288, 1152}, Ns[] = {37, 300, 4100};
    const int Ts[] = {2, 4, 5, 8, 13, 16, 17, 64, 130, 512};
    int cases = 0;
    for (size_t ty = 0; ty < OB_ARRAY_LEN(types); ty++)
    for (size_t ki = 0; ki < OB_ARRAY_LEN(Ks); ki++)
    for (size_t ni = 0; ni < OB_ARRAY_LEN(Ns); ni++) {
        const ob_type t = types[ty];
        const int64_t K = Ks[ki], N = Ns[ni];
        if (K == 12288 && (t != OB_TYPE_Q4_K || N != 37)) continue;
        if (K == 1152 && (ob_type_block_size(t) > 128 || N != 37)) continue;
        if (N == 4100 && (K != 256 || (t != OB_TYPE_Q4_K && t != OB_TYPE_Q6_K))) continue;
        void *w = rand_typed(t, K * N, 0.5f);
        for (size_t k = 0; k < OB_ARRAY_LEN(Ts); k++) {
            const int T = Ts[k];
            if (K == 4096 && N == 300 && T > 64) continue;
            if (K == 12288 && T != 4 && T != 16 && T != 130) continue;
            if (N == 4100 && T != 13 && T != 512) continue;
            for (int pre = 0; pre < 2; pre++) {
                ob_graph *g = ob_graph_new(8);
                float *x = rand_f32(K * T, 1.0f);
                if (pre) round_q8(x, K * T);
                int64_t new[2] = {K, N}, nex[2] = {K, T};
                ob_tensor *W = ob_leaf(g, "w", t, 2, new, w), *X = ob_leaf(g, "x", OB_TYPE_F32, 2, nex, x);
                ob_tensor *y = ob_matmul(g, W, X);
                char what[96];
                snprintf(what, sizeof(what), "mmq %s K=%lld N=%lld T=%d %s", ob_type_name(t), (long long)K, (long long)N, T,
                         pre ? "rounded x" : "raw x");
                const double tol = pre ? 1e-4 : 5e-2;
                run_case(be, g, y, tol, what, &cases);
                ob_graph_free(g);
                free(x);
            }
        }
        free(w);
    }
    printf("mmq: %d cases\n", cases);
}

/* The streaming decode MMQ kernel (op_mmq.cu k_mmq_dec: Q4_K/Q6_K, T <= 16; Q8_0, T <= 8)
 * with enough rows that K is not split across blocks (N = 8500: 532 row tiles, more than
 * the default 4 blocks per SM of an H200, last tile partial), so each warp walks 8 stages
 * of K = 8192 through its ring of 2 (Q8_0: 4) and the ring wraps: a stage read before it
 * lands, a slot refilled early, a wrong row offset of the 2-aligned Q6_K/Q8_0 runs or a
 * wrong column tile (T = 5: one tile, 16: two) fails at 1e-4 on pre-rounded x. test_matmul_mmq covers the split-K, short-K shapes. */
void test_matmul_mmq_stream(ob_backend *be) {
    static const ob_type types[] = {OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_Q8_0};
    const int64_t K = 8192, N = 8500;
    int cases = 0;
    for (size_t ty = 0; ty < OB_ARRAY_LEN(types); ty++) {
        const ob_type t = types[ty];
        /* 509 distinct rows repeated (quantizing all 70M values takes ~15 s): a prime period,
         * so a row or tile offset error reads different data. */
        const size_t rb = ob_type_row_size(t, K);
        uint8_t *w = malloc(rb * (size_t)N), *u = rand_typed(t, K * 509, 0.5f);
        for (int64_t r = 0; r < N; r++) memcpy(w + (size_t)r * rb, u + (size_t)(r % 509) * rb, rb);
        free(u);
        for (int T = 5; T <= 16; T += 11) {
            if (T == 16 && t != OB_TYPE_Q4_K) continue;
            ob_graph *g = ob_graph_new(8);
            float *x = rand_f32(K * T, 1.0f);
            round_q8(x, K * T);
            int64_t new[2] = {K, N}, nex[2] = {K, T};
            ob_tensor *W = ob_leaf(g, "w", t, 2, new, w), *X = ob_leaf(g, "x", OB_TYPE_F32, 2, nex, x);
            ob_tensor *y = ob_matmul(g, W, X);
            char what[96];
            snprintf(what, sizeof(what), "mmq stream %s K=%lld N=%lld T=%d rounded x", ob_type_name(t), (long long)K,
                     (long long)N, T);
            run_case(be, g, y, 1e-4, what, &cases);
            ob_graph_free(g);
            free(x);
        }
        free(w);
    }
    /* Two matmuls of one x (q/k/v-like): the second reuses the first's quantized x when the
     * backend's activation buffer holds it (op_mmq.cu); their sum catches a stale or wrong
     * reuse. Types differ (Q4_K, Q6_K) so both kernels' x reads are checked. */
    for (int T = 3; T <= 12; T += 9) {
        const int64_t Kq = 4096, Nq = 300;
        void *w1 = rand_typed(OB_TYPE_Q4_K, Kq * Nq, 0.5f), *w2 = rand_typed(OB_TYPE_Q6_K, Kq * Nq, 0.5f);
        ob_graph *g = ob_graph_new(8);
        float *x = rand_f32(Kq * T, 1.0f);
        round_q8(x, Kq * T);
        int64_t new[2] = {Kq, Nq}, nex[2] = {Kq, T};
        ob_tensor *W1 = ob_leaf(g, "w1", OB_TYPE_Q4_K, 2, new, w1), *W2 = ob_leaf(g, "w2", OB_TYPE_Q6_K, 2, new, w2);
        ob_tensor *X = ob_leaf(g, "x", OB_TYPE_F32, 2, nex, x);
        ob_tensor *y = ob_add(g, ob_matmul(g, W1, X), ob_matmul(g, W2, X));
        char what[96];
        snprintf(what, sizeof(what), "mmq shared x Q4_K+Q6_K K=%lld N=%lld T=%d rounded x", (long long)Kq, (long long)Nq, T);
        run_case(be, g, y, 1e-4, what, &cases);
        ob_graph_free(g);
        free(x);
        free(w1);
        free(w2);
    }
    printf("mmq stream: %d cases\n", cases);
}

/* The cuBLAS prefill path (op_quant.cu): ONEBIT_CUDA_MMQ_MAX_T=16 sends every T > 16 to
 * dequant-to-f16 + GEMM, and ONEBIT_CUDA_BLAS_SLAB=1 stages 2^20 weight elements per GEMM,
 * so N = 300 at K = 4096 takes two slabs and the odd shapes (K = 768 Q6_K, K = 800 Q8_0)
 * start their second slab at a weight address that is not 16-aligned (the byte-load
 * fallback). Both knobs are read when a backend is created (per backend), so this test makes
 * its own and restores the environment. Tolerance 2e-3: f16
 * rounding of W and x gives ~4e-4 here while the int8 MMQ on raw x gives ~5e-3, so a node
 * that still went to MMQ fails too. Then CPY of each type to f16 (the same staging kernel)
 * against the reference dequant rounded to f16, byte for byte, with a block count that
 * leaves a partial tile. */
void test_matmul_blas(void) {
    char err[256] = {0}, keep_t[64], keep_s[64];
    env_swap("ONEBIT_CUDA_MMQ_MAX_T", "16", keep_t);
    env_swap("ONEBIT_CUDA_BLAS_SLAB", "1", keep_s);
    ob_backend *be = ob_backend_cuda_new(0, false, err, sizeof(err));
    env_restore("ONEBIT_CUDA_MMQ_MAX_T", keep_t);
    env_restore("ONEBIT_CUDA_BLAS_SLAB", keep_s);
    CHECKF(be != NULL, "blas backend: %s", err);
    if (!be) return;
    static const ob_type types[] = {OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_Q8_0, OB_TYPE_Q5_K, OB_TYPE_Q4_0,
                                    OB_TYPE_Q1_0, OB_TYPE_TQ2_0, OB_TYPE_Q3_K, OB_TYPE_F16};
    struct { int64_t K, N; } shapes[] = {{256, 37}, {256, 300}, {4096, 37}, {4096, 300}, {768, 1400}, {800, 1400}};
    const int Ts[] = {64, 512};
    int cases = 0;
    for (size_t ty = 0; ty < OB_ARRAY_LEN(types); ty++)
    for (size_t si = 0; si < OB_ARRAY_LEN(shapes); si++) {
        const ob_type t = types[ty];
        const int64_t K = shapes[si].K, N = shapes[si].N;
        const bool hot = t == OB_TYPE_Q4_K || t == OB_TYPE_Q6_K || t == OB_TYPE_Q8_0;
        if (K % ob_type_block_size(t) != 0) continue;
        if (K == 4096 && N == 300 && !hot) continue; /* keep the CPU reference quick */
        if (N == 1400 && t != OB_TYPE_Q6_K && t != OB_TYPE_Q8_0) continue;
        void *w = rand_typed(t, K * N, 0.5f);
        for (size_t k = 0; k < OB_ARRAY_LEN(Ts); k++) {
            const int T = Ts[k];
            if (N == 1400 && T != 64) continue;
            ob_graph *g = ob_graph_new(8);
            float *x = rand_f32(K * T, 1.0f);
            int64_t new[2] = {K, N}, nex[2] = {K, T};
            ob_tensor *W = ob_leaf(g, "w", t, 2, new, w), *X = ob_leaf(g, "x", OB_TYPE_F32, 2, nex, x);
            ob_tensor *y = ob_matmul(g, W, X);
            char what[96];
            snprintf(what, sizeof(what), "blas %s K=%lld N=%lld T=%d", ob_type_name(t), (long long)K, (long long)N, T);
            run_case(be, g, y, 2e-3, what, &cases);
            ob_graph_free(g);
            free(x);
        }
        free(w);
    }
    /* CPY to f16 in 4096-element tiles: 37 blocks of 256, or 256 x 45 elements of the
     * 32/128-element types, each two full tiles and a partial one. */
    for (size_t ty = 0; ty < OB_ARRAY_LEN(types); ty++) {
        const ob_type t = types[ty];
        if (t == OB_TYPE_F16 || t == OB_TYPE_Q3_K) continue; /* no staging kernel: k_cpy_deq */
        const int64_t ne0 = 256, nr = ob_type_block_size(t) == 256 ? 37 : 45;
        void *w = rand_typed(t, ne0 * nr, 0.7f);
        ob_graph *g = ob_graph_new(8);
        int64_t ne[2] = {ne0, nr};
        ob_tensor *W = ob_leaf(g, "w", t, 2, ne, w);
        ob_tensor *y = ob_cpy(g, W, OB_TYPE_F16);
        char what[96];
        snprintf(what, sizeof(what), "cpy %s -> f16 (%lld elements)", ob_type_name(t), (long long)(ne0 * nr));
        run_case(be, g, y, 0, what, &cases);
        ob_graph_free(g);
        free(w);
    }
    printf("blas: %d cases\n", cases);
    ob_backend_free(be);
}
