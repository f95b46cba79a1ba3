/* Every op of the Vulkan backend against the CPU reference (ob_cpu_ref_op) on seeded
 * random inputs with per-op tolerances, on the mappable-memory path and on the staging
 * path (ONEBIT_VULKAN_STAGING=1), with device scratch poisoned with NaN before each run so
 * an element a kernel forgets to write fails. Then the model fixtures end to end: logits
 * on Vulkan within 1e-3 (relative to the row's largest logit) of the CPU backend.
 * Runs on Mesa's lavapipe where there is no GPU (ONEBIT_VULKAN_ALLOW_CPU=1 is set here).
 * The matmul groups are in vk_ops_matmul.c, the batch-invariant ones in vk_ops_det.c.
 *
 * ONEBIT_TEST_SHARD=i/n: only every n-th group of main's list from the i-th (testutil.h),
 * so n processes together run each group once (one process under the validation layer is
 * too slow). The op groups draw from one seeded source in turn, so a shard's op inputs
 * differ from an unsharded run's; the model prompts do not. */
#include "testutil.h"
#include "testutil_embed.h"
#include <stdio.h>
#ifndef ONEBIT_VULKAN
int main(void) {
    printf("test_vulkan_ops: SKIPPED (built without -DONEBIT_VULKAN=ON)\n");
    return 77; /* SKIP_RETURN_CODE (CMakeLists.txt): ctest reports it skipped */
}
#else
#include "backend/cpu/cpu.h"
#include "backend/vulkan/vulkan.h"
#include "backend/vulkan/vk_internal.h"
#include "convert/convert.h"
#include "onebit.h"
#include "vk_ops_cases.h"
#include "vk_testutil.h"
#include <dlfcn.h>
#include <jansson.h>
#include <unistd.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- per-op cases ---------------------------------------------------------------------- */

static void test_norms(void) {
    int64_t ne[2] = {1003, 7};
    for (int layer = 0; layer < 2; layer++)
        for (int variant = 0; variant < 3; variant++) {
            ob_graph *g = ob_graph_new(8);
            float *x = rand_f32(ne[0] * ne[1], 3.0f), *w = rand_f32(ne[0], 1.0f), *bb = rand_f32(ne[0], 1.0f);
            for (int64_t i = 0; i < ne[0] * ne[1]; i++) x[i] += 0.5f;
            ob_tensor *tx = ob_leaf(g, "x", OB_TYPE_F32, 2, ne, x);
            ob_tensor *tw = variant < 2 ? ob_leaf(g, "w", OB_TYPE_F32, 1, ne, w) : NULL;
            ob_tensor *tb = variant < 1 ? ob_leaf(g, "b", OB_TYPE_F32, 1, ne, bb) : NULL;
            ob_tensor *o = layer ? ob_layer_norm(g, tx, tw, tb, 1e-5f) : ob_rms_norm(g, tx, tw, 1e-6f);
            char what[64];
            snprintf(what, sizeof(what), "%s variant %d", layer ? "layer_norm" : "rms_norm", variant);
            check_graph(g, o, 1e-5, 1e-4, what);
            ob_graph_free(g);
            free(x); free(w); free(bb);
        }
}

/* Rows norm.comp keeps in registers (n = 4096, 8192: whole vec4s, up to 8 per invocation)
 * and rows it loops over (8196: too long; 1002: no vec4 multiple); then the residual ADD
 * fused into the norm that follows it, for both norms, with the sum used again after (so
 * its write is checked), on the default backend (one dispatch fewer) and with
 * ONEBIT_VK_NO_FUSE=1. */
static void test_norm_paths(void) {
    static const int64_t ns[] = {4096, 8192, 8196, 1002};
    ob_backend *nf = backend_with("ONEBIT_VK_NO_FUSE", "1");
    for (size_t k = 0; k < OB_ARRAY_LEN(ns); k++)
        for (int layer = 0; layer < 2; layer++)
            for (int fused = 0; fused < 2; fused++) {
                int64_t ne[2] = {ns[k], 3};
                float *x = rand_f32(ne[0] * ne[1], 2.0f), *y = rand_f32(ne[0] * ne[1], 1.0f);
                float *w = rand_f32(ne[0], 1.0f), *bb = rand_f32(ne[0], 1.0f);
                for (int64_t i = 0; i < ne[0] * ne[1]; i++) x[i] += 0.5f;
                ob_graph *g = ob_graph_new(16);
                ob_tensor *tx = ob_leaf(g, "x", OB_TYPE_F32, 2, ne, x), *s = tx;
                if (fused) s = ob_add(g, tx, ob_leaf(g, "y", OB_TYPE_F32, 2, ne, y));
                ob_tensor *tw = ob_leaf(g, "w", OB_TYPE_F32, 1, ne, w);
                ob_tensor *o = layer ? ob_layer_norm(g, s, tw, ob_leaf(g, "b", OB_TYPE_F32, 1, ne, bb), 1e-5f)
                                     : ob_rms_norm(g, s, tw, 1e-6f);
                if (fused) o = ob_mul(g, o, s);
                char what[96];
                snprintf(what, sizeof(what), "%s n %lld%s", layer ? "layer_norm" : "rms_norm", (long long)ns[k],
                         fused ? " after add" : "");
                check_graph(g, o, 1e-5, 1e-4, what);
                ob_vk *vk = g_be[0]->ctx;
                CHECKF(vk->n_prev == 1 + fused, "%s: %lld dispatches", what, (long long)vk->n_prev);
                CHECKF(vk->n_prev && vk->prev[0].pc.u[5] == (ns[k] <= 8192 && ns[k] % 4 == 0), "%s: register path %u",
                       what, vk->n_prev ? vk->prev[0].pc.u[5] : 9);
                if (nf && fused) {
                    check_on(nf, g, o, 1e-5, 1e-4, what);
                    CHECK(((ob_vk *)nf->ctx)->n_prev == 3);
                }
                ob_graph_free(g);
                free(x); free(y); free(w); free(bb);
            }
    if (nf) ob_backend_free(nf);
}

static void test_elementwise(void) {
    int64_t ne[3] = {67, 5, 3}, n = 67 * 5 * 3;
    for (int op = 0; op < 2; op++)
        for (int bc = 0; bc < 2; bc++) {
            ob_graph *g = ob_graph_new(8);
            float *a = rand_f32(n, 1.0f), *b = rand_f32(n, 1.0f);
            ob_tensor *ta = ob_leaf(g, "a", OB_TYPE_F32, 3, ne, a), *tb = ob_leaf(g, "b", OB_TYPE_F32, bc ? 1 : 3, ne, b);
            char what[64];
            snprintf(what, sizeof(what), "%s%s", op ? "mul" : "add", bc ? " broadcast" : "");
            check_graph(g, op ? ob_mul(g, ta, tb) : ob_add(g, ta, tb), 1e-7, 1e-6, what);
            ob_graph_free(g);
            free(a); free(b);
        }
    {
        ob_graph *g = ob_graph_new(4);
        float *a = rand_f32(n, 1.0f);
        check_graph(g, ob_scale(g, ob_leaf(g, "a", OB_TYPE_F32, 3, ne, a), -0.37f), 1e-7, 1e-6, "scale");
        ob_graph_free(g);
        free(a);
    }
    for (int act = OB_ACT_SILU; act < OB_ACT_COUNT; act++)
        for (int glu = 0; glu < 2; glu++) {
            ob_graph *g = ob_graph_new(4);
            float *a = rand_f32(n, 4.0f), *b = rand_f32(n, 1.0f);
            a[0] = 60.0f; a[1] = -60.0f; /* saturation must not give NaN */
            a[2] = 1e-3f; a[3] = -0.1f; a[4] = 0.13f; /* tanh's small-|x| branch and its edge */
            ob_tensor *ta = ob_leaf(g, "gate", OB_TYPE_F32, 3, ne, a);
            ob_tensor *o = glu ? ob_glu(g, ta, ob_leaf(g, "up", OB_TYPE_F32, 3, ne, b), (ob_act)act) : ob_act_op(g, ta, (ob_act)act);
            char what[64];
            snprintf(what, sizeof(what), "%s act %d", glu ? "glu" : "act", act);
            check_graph(g, o, 1e-6, 1e-5, what);
            ob_graph_free(g);
            free(a); free(b);
        }
    {
        int64_t ns[2] = {1001, 6};
        ob_graph *g = ob_graph_new(4);
        float *a = rand_f32(ns[0] * ns[1], 8.0f);
        a[5] = 90.0f; /* exp overflow without the max subtraction */
        check_graph(g, ob_softmax(g, ob_leaf(g, "a", OB_TYPE_F32, 2, ns, a)), 1e-8, 1e-5, "softmax");
        ob_graph_free(g);
        free(a);
    }
}

static void test_rope(void) {
    for (int mode = 0; mode <= 2; mode += 2)
        for (int partial = 0; partial < 2; partial++) {
            int64_t ne[3] = {64, 3, 5}, n = 64 * 3 * 5;
            int32_t pos[5] = {0, 1, 17, 30011, 511}; /* 30011: float theta alone would be ~1e-3 off */
            ob_graph *g = ob_graph_new(4);
            float *x = rand_f32(n, 1.0f);
            int64_t nt[1] = {5};
            ob_tensor *o = ob_rope(g, ob_leaf(g, "x", OB_TYPE_F32, 3, ne, x), ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos), NULL,
                                   partial ? 32 : 64, mode, 10000.0f, partial ? 0.5f : 1.0f, 1.0f);
            char what[64];
            snprintf(what, sizeof(what), "rope mode %d n_rot %d", mode, partial ? 32 : 64);
            /* float angles at pos 511 lose ~3e-5 rad next to the reference's double */
            check_graph(g, o, 2e-4, 1e-4, what);
            ob_graph_free(g);
            free(x);
        }
    /* with frequency factors (theta divided by them: up to 2x 30011 rad) and mscale, each
     * alone and both; their own random stream, so the tests after keep their inputs */
    const ob_rng keep_rng = g_rng;
    ob_rng_seed(&g_rng, 0x7a7du);
    for (int mode = 0; mode <= 2; mode += 2)
        for (int partial = 0; partial < 2; partial++)
            for (int var = 0; var < 3; var++) {
                const int n_rot = partial ? 32 : 64;
                const bool ff = var != 1;
                const float ms = var ? VKT_MSCALE : 1.0f;
                int64_t ne[3] = {64, 3, 5}, n = 64 * 3 * 5, nt[1] = {5}, nf[1] = {n_rot / 2};
                int32_t pos[5] = {0, 1, 17, 30011, 511};
                ob_graph *g = ob_graph_new(6);
                float *x = rand_f32(n, 1.0f), *fac = rand_rope_factors(n_rot / 2);
                ob_tensor *o = ob_rope(g, ob_leaf(g, "x", OB_TYPE_F32, 3, ne, x), ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos),
                                       ff ? ob_leaf(g, "factors", OB_TYPE_F32, 1, nf, fac) : NULL, n_rot, mode, 10000.0f,
                                       partial ? 0.5f : 1.0f, ms);
                char what[96];
                snprintf(what, sizeof(what), "rope mode %d n_rot %d factors %d mscale %g", mode, n_rot, ff, (double)ms);
                check_graph(g, o, 2e-4, 1e-4, what);
                ob_graph_free(g);
                free(x); free(fac);
            }
    g_rng = keep_rng;
}

/* The k norm + rope + KV_STORE of qwen3-style attention in one dispatch, into a cache of
 * type kt, checked on the cache rows; with factors, the rope has frequency factors and an
 * mscale. nf: the backend with fusion off (or NULL). */
static void norm_rope_store_case(ob_backend *nf, ob_type kt, bool factors) {
    int32_t kpos[5] = {0, 3, 8, 7, 9}, kseq[5] = {0, 0, 1, 2, 1};
    const int64_t hd = 64, heads = 2, T = 5, cps = 10, cells = 3 * cps;
    int64_t ne[3] = {hd, heads, T}, nt[1] = {T}, nc[2] = {hd * heads, cells}, nff[1] = {hd / 2};
    float *x = rand_f32(hd * heads * T, 2.0f), *w = rand_f32(hd, 1.0f), *fac = factors ? rand_rope_factors(hd / 2) : NULL;
    void *cache = rand_typed(kt, hd * heads, cells, 1.0f);
    ob_graph *g = ob_graph_new(12);
    ob_tensor *pos_t = ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, kpos);
    ob_tensor *h = ob_rms_norm(g, ob_leaf(g, "x", OB_TYPE_F32, 3, ne, x), ob_leaf(g, "w", OB_TYPE_F32, 1, ne, w), 1e-6f);
    ob_tensor *k = ob_rope(g, h, pos_t, factors ? ob_leaf(g, "factors", OB_TYPE_F32, 1, nff, fac) : NULL, (int)hd, 2,
                           10000.0f, 1.0f, factors ? VKT_MSCALE : 1.0f);
    ob_tensor *tc = ob_leaf(g, "cache", kt, 2, nc, cache);
    ob_kv_store(g, k, tc, pos_t, ob_leaf(g, "seq", OB_TYPE_I32, 1, nt, kseq), (int)cps);
    char what[96];
    snprintf(what, sizeof(what), "norm+rope+kv_store%s %s", factors ? " factors, mscale" : "", ob_type_name(kt));
    check_graph(g, tc, kt == OB_TYPE_Q8_0 ? 0.03 : kt == OB_TYPE_F16 ? 2e-3 : 2e-4, 1e-4, what);
    ob_vk *vk = g_be[0]->ctx;
    CHECKF(vk->n_prev == 1 && vk->prev[0].pc.u[5] == 1, "%s: %lld dispatches", what, (long long)vk->n_prev);
    if (nf && kt == OB_TYPE_F32) { /* check_on compares F32 results */
        check_on(nf, g, tc, 2e-4, 1e-4, what);
        CHECK(((ob_vk *)nf->ctx)->n_prev == 3);
    }
    ob_graph_free(g);
    free(x); free(w); free(fac); free(cache);
}

/* q/k norm then rope per head, fused into one dispatch (modes 0 and 2, whole and partial
 * rotation, with and without a norm weight, head dims 64 and 128 over 3 heads x 5
 * tokens), also on ONEBIT_VK_NO_FUSE=1; and a norm with a second reader, which is not fused. */
static void test_norm_rope(void) {
    ob_backend *nf = backend_with("ONEBIT_VK_NO_FUSE", "1");
    int32_t pos[5] = {0, 1, 17, 30011, 511}; /* 30011: float theta alone would be ~1e-3 off */
    for (int hd = 64; hd <= 128; hd += 64)
        for (int mode = 0; mode <= 2; mode += 2)
            for (int partial = 0; partial < 2; partial++)
                for (int reader = 0; reader < 2; reader++) {
                    int64_t ne[3] = {hd, 3, 5}, n = hd * 15, nt[1] = {5};
                    float *x = rand_f32(n, 2.0f), *w = rand_f32(hd, 1.0f);
                    ob_graph *g = ob_graph_new(8);
                    ob_tensor *h = ob_rms_norm(g, ob_leaf(g, "x", OB_TYPE_F32, 3, ne, x),
                                               partial ? NULL : ob_leaf(g, "w", OB_TYPE_F32, 1, ne, w), 1e-6f);
                    ob_tensor *o = ob_rope(g, h, ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos), NULL, partial ? hd / 2 : hd, mode,
                                           10000.0f, partial ? 0.5f : 1.0f, 1.0f);
                    if (reader) o = ob_add(g, o, h);
                    char what[96];
                    snprintf(what, sizeof(what), "norm+rope hd %d mode %d partial %d reader %d", hd, mode, partial, reader);
                    check_graph(g, o, 2e-4, 1e-4, what);
                    ob_vk *vk = g_be[0]->ctx;
                    CHECKF(vk->n_prev == (reader ? 3 : 1), "%s: %lld dispatches", what, (long long)vk->n_prev);
                    if (nf) {
                        check_on(nf, g, o, 2e-4, 1e-4, what);
                        CHECK(((ob_vk *)nf->ctx)->n_prev == 2 + reader);
                    }
                    ob_graph_free(g);
                    free(x); free(w);
                }
    /* the k norm + rope + KV_STORE of qwen3-style attention in one dispatch: the cache rows
     * against the reference, for each cache type */
    static const ob_type kv[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_Q8_0};
    for (size_t ti = 0; ti < OB_ARRAY_LEN(kv); ti++) norm_rope_store_case(nf, kv[ti], false);
    /* the same with the rope's frequency factors and mscale (norm_rope.comp takes them
     * in the push constants' last slots): fused alone and with the KV_STORE, and unfused */
    const ob_rng keep_rng = g_rng;
    ob_rng_seed(&g_rng, 0x7a7eu);
    for (int hd = 64; hd <= 128; hd += 64)
        for (int mode = 0; mode <= 2; mode += 2)
            for (int partial = 0; partial < 2; partial++) {
                const int n_rot = partial ? hd / 2 : hd;
                int64_t ne[3] = {hd, 3, 5}, n = hd * 15, nt[1] = {5}, nff[1] = {n_rot / 2};
                float *x = rand_f32(n, 2.0f), *w = rand_f32(hd, 1.0f), *fac = rand_rope_factors(n_rot / 2);
                ob_graph *g = ob_graph_new(8);
                ob_tensor *h = ob_rms_norm(g, ob_leaf(g, "x", OB_TYPE_F32, 3, ne, x),
                                           partial ? NULL : ob_leaf(g, "w", OB_TYPE_F32, 1, ne, w), 1e-6f);
                ob_tensor *o = ob_rope(g, h, ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos),
                                       ob_leaf(g, "factors", OB_TYPE_F32, 1, nff, fac), n_rot, mode, 10000.0f,
                                       partial ? 0.5f : 1.0f, VKT_MSCALE);
                char what[96];
                snprintf(what, sizeof(what), "norm+rope factors, mscale hd %d mode %d partial %d", hd, mode, partial);
                check_graph(g, o, 2e-4, 1e-4, what);
                ob_vk *vk = g_be[0]->ctx;
                CHECKF(vk->n_prev == 1, "%s: %lld dispatches", what, (long long)vk->n_prev);
                if (nf) {
                    check_on(nf, g, o, 2e-4, 1e-4, what);
                    CHECK(((ob_vk *)nf->ctx)->n_prev == 2);
                }
                ob_graph_free(g);
                free(x); free(w); free(fac);
            }
    for (size_t ti = 0; ti < OB_ARRAY_LEN(kv); ti++) norm_rope_store_case(nf, kv[ti], true);
    g_rng = keep_rng;
    if (nf) ob_backend_free(nf);
}

static void test_cpy(void) {
    static const ob_type pairs[][2] = {
        {OB_TYPE_F32, OB_TYPE_F16}, {OB_TYPE_F16, OB_TYPE_F32}, {OB_TYPE_F32, OB_TYPE_BF16},
        {OB_TYPE_Q4_K, OB_TYPE_F32}, {OB_TYPE_F32, OB_TYPE_Q8_0}, {OB_TYPE_Q6_K, OB_TYPE_F16},
        {OB_TYPE_IQ2_S, OB_TYPE_F32}, {OB_TYPE_IQ1_M, OB_TYPE_F16}, {OB_TYPE_IQ3_XXS, OB_TYPE_Q8_0},
    };
    for (size_t i = 0; i < OB_ARRAY_LEN(pairs); i++) {
        int64_t ne[2] = {256, 5};
        void *x = rand_typed(pairs[i][0], ne[0], ne[1], 2.0f);
        ob_graph *g = ob_graph_new(4);
        ob_tensor *o = ob_cpy(g, ob_leaf(g, "x", pairs[i][0], 2, ne, x), pairs[i][1]);
        char what[64];
        snprintf(what, sizeof(what), "cpy %s -> %s", ob_type_name(pairs[i][0]), ob_type_name(pairs[i][1]));
        /* one Q8_0 code step (amax/127) where a tie rounds the other way */
        check_graph(g, o, pairs[i][1] == OB_TYPE_Q8_0 ? 0.06 : 1e-6, 1e-6, what);
        ob_graph_free(g);
        free(x);
    }
}

static void test_kv_store(void) {
    /* row 72 (tiny encoder heads, 6 x 12): F32/F16 rows ending in a partial 32-chunk (4
     * elements per invocation); row 70 (not a multiple of 4): one invocation per chunk */
    static const ob_type types[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_Q8_0, OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_F16, OB_TYPE_F32};
    int64_t cps = 10, n_seq = 3, T = 5;
    int32_t pos[5] = {0, 1, 2, 7, 9}, seq[5] = {0, 0, 0, 2, 1};
    for (size_t ti = 0; ti < OB_ARRAY_LEN(types); ti++) {
        ob_type t = types[ti];
        int64_t row = ti < 3 ? 128 : ti < 5 ? 72 : 70;
        void *cache = rand_typed(t, row, cps * n_seq, 1.0f);
        float *x = rand_f32(row * T, 1.0f);
        ob_graph *g = ob_graph_new(8);
        int64_t nx[3] = {row / 2, 2, T}, nc[2] = {row, cps * n_seq}, nt[1] = {T};
        ob_tensor *tc = ob_leaf(g, "cache", t, 2, nc, cache);
        ob_kv_store(g, ob_leaf(g, "x", OB_TYPE_F32, 3, nx, x), tc, ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos),
                    ob_leaf(g, "seq", OB_TYPE_I32, 1, nt, seq), (int)cps);
        char what[64];
        snprintf(what, sizeof(what), "kv_store %s row %lld", ob_type_name(t), (long long)row);
        check_graph(g, tc, t == OB_TYPE_Q8_0 ? 0.03 : 1e-7, 1e-6, what);
        const ob_vk *vk = g_be[0]->ctx;
        CHECKF(vk->n_prev == 1 && vk->prev[0].pc.u[6] == (t != OB_TYPE_Q8_0 && row % 4 == 0), "%s: path %u", what,
               vk->n_prev == 1 ? vk->prev[0].pc.u[6] : 9u);
        ob_graph_free(g);
        free(x); free(cache);
    }
}

typedef struct attn_case {
    ob_type kv;
    int hd, n_head, n_kv, window, causal;
    float softcap;
    int decode;
    float alibi; /* ALiBi max bias, 0 = none */
} attn_case;

static ob_backend *g_nosplit; /* ONEBIT_VK_ATTN_SPLIT=1 */
static ob_backend *g_mergepass; /* ONEBIT_VK_ATTN_LAST=0: splits merged by a second dispatch */
static ob_backend *g_olddec;    /* ONEBIT_VK_ATTN_DEC=0: attention.comp where attn_dec.comp applies */
static ob_backend *g_gw4;       /* ONEBIT_VK_ATTN_GW=4: attn_dec.comp with up to 4 query heads a workgroup */

static void run_attention(const attn_case *ac) {
    int64_t cps = ac->decode ? 300 : 24, n_seq = 3, hd = ac->hd, row = hd * ac->n_kv, cells = cps * n_seq;
    int32_t pos_p[8] = {5, 6, 7, 8, 9, 0, 1, 17}, seq_p[8] = {0, 0, 0, 0, 0, 2, 2, 1};
    int32_t pos_d[1] = {287}, seq_d[1] = {1};
    int64_t T = ac->decode ? 1 : 8;
    int32_t *pos = ac->decode ? pos_d : pos_p, *seq = ac->decode ? seq_d : seq_p;
    void *kc = rand_typed(ac->kv, row, cells, 1.0f), *vc = rand_typed(ac->kv, row, cells, 1.0f);
    if (ac->kv == OB_TYPE_F32) {
        /* Cells no token may see hold NaN: a kernel that reads them fails. */
        for (int64_t s = 0; s < n_seq; s++) {
            int32_t mx = -1;
            for (int64_t t = 0; t < T; t++) if (seq[t] == s && pos[t] > mx) mx = pos[t];
            for (int64_t j = mx + 1; j < cps; j++)
                for (int64_t e = 0; e < row; e++) ((float *)kc)[(s * cps + j) * row + e] = ((float *)vc)[(s * cps + j) * row + e] = NAN;
        }
    }
    float *q = rand_f32(hd * ac->n_head * T, 1.0f), tok = 0;
    ob_graph *g = ob_graph_new(16);
    int64_t nq[3] = {hd, ac->n_head, T}, nc[2] = {row, cells}, nt[1] = {T}, n1[1] = {1};
    ob_tensor *o = ob_attention(g, ob_leaf(g, "q", OB_TYPE_F32, 3, nq, q), ob_leaf(g, "k", ac->kv, 2, nc, kc),
                                ob_leaf(g, "v", ac->kv, 2, nc, vc), ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos),
                                ob_leaf(g, "seq", OB_TYPE_I32, 1, nt, seq), ob_leaf(g, "tok", OB_TYPE_F32, 1, n1, &tok),
                                (int)cps, ac->n_kv, ac->window, ac->causal, 1.0f / sqrtf((float)hd), ac->softcap);
    o->fp[2] = ac->alibi;
    CHECKF(g_be[0]->iface->supports(g_be[0], o), "attention alibi %g: refused", ac->alibi);
    char what[160];
    snprintf(what, sizeof(what), "attention %s hd %d heads %d/%d window %d causal %d cap %g alibi %g %s",
             ob_type_name(ac->kv), ac->hd, ac->n_head, ac->n_kv, ac->window, ac->causal, ac->softcap, ac->alibi,
             ac->decode ? "decode" : "prefill");
    check_graph(g, o, 1e-5, 1e-4, what);
    /* Causal attention of heads of 8k elements (32..256) takes attn_dec.comp: a workgroup
     * per (token, kv head, group of GW query heads (attn_gw: 1 by default), split), C = cpi *
     * (128 / (hd / 8)) cells a chunk, chunks split over S = cells per sequence / C workgroups
     * (at most attn_splits), merged by the last split to finish. Else attention.comp, decode (300 cells per sequence) split over 3
     * workgroups per head, merged by the last of them (one dispatch), or by a merge pass
     * (ONEBIT_VK_ATTN_LAST=0). */
    ob_vk *vk = g_be[0]->ctx;
    const int G = ac->n_head / ac->n_kv, cpi = 8, gw = G == 1 ? 1 : G == 2 && vk->attn_gw > 2 ? 2 : (int)vk->attn_gw;
    const ob_vk_shader dsh = gw == 4 ? OB_VK_SH_ATTN_DEC : gw == 2 ? OB_VK_SH_ATTN_DEC_G2 : OB_VK_SH_ATTN_DEC_G1;
    const bool dec = ac->causal && ac->hd % 8 == 0 && ac->hd >= 32 && ac->hd <= 256;
    const int64_t C = cpi * (128 / (ac->hd / 8)), S_dec = (cps + C - 1) / C < 16 ? (cps + C - 1) / C : 16;
    CHECKF(vk->n_prev == 1, "%s: %lld dispatches", what, (long long)vk->n_prev);
    if (vk->n_prev == 1) {
        const ob_vk_pc *pc = &vk->prev[0].pc;
        if (dec)
            CHECKF(vk->prev[0].pipe == vk->pipes[dsh][ac->kv] && ((pc->u[6] >> 8) & 255u) == (uint32_t)S_dec &&
                       ((pc->u[2] >> 16) & 255u) == (uint32_t)cpi && (pc->u[2] >> 24) == (uint32_t)gw &&
                       ((pc->u[6] & 4u) != 0) == (S_dec > 1),
                   "%s: attn_dec, S %u cpi %u gw %u, want S %lld cpi %d gw %d", what, (pc->u[6] >> 8) & 255u,
                   (pc->u[2] >> 16) & 255u, pc->u[2] >> 24, (long long)S_dec, cpi, gw);
        else
            CHECKF(vk->prev[0].pipe == vk->pipes[OB_VK_SH_ATTENTION][OB_TYPE_F32] &&
                       (!ac->decode || ((pc->u[6] >> 8) == 3 && (pc->u[6] & 4u))),
                   "%s: attention.comp, S %u", what, pc->u[6] >> 8);
        if (dec && ac->decode) CHECKF(S_dec > 1, "%s: the decode case splits", what);
    }
    if (dec && g_olddec) {
        /* the same on attention.comp, split over 3 workgroups per head */
        check_on_as(g_olddec, g, o, 1e-5, 1e-4, what, "attention.comp");
        const ob_vk *ov = g_olddec->ctx;
        CHECKF(ov->n_prev == 1 && ov->prev[0].pipe == ov->pipes[OB_VK_SH_ATTENTION][OB_TYPE_F32] &&
                   (!ac->decode || (ov->prev[0].pc.u[6] >> 8) == 3),
               "%s, attention.comp: %lld dispatches", what, (long long)ov->n_prev);
    }
    if (dec && g_gw4) {
        /* query heads in groups of up to 4 per workgroup (6 heads: 4 + 2; 2 heads: GW = 2) */
        check_on_as(g_gw4, g, o, 1e-5, 1e-4, what, "4 heads a workgroup");
        const ob_vk *gv = g_gw4->ctx;
        const ob_vk_shader want = G >= 3 ? OB_VK_SH_ATTN_DEC : G == 2 ? OB_VK_SH_ATTN_DEC_G2 : OB_VK_SH_ATTN_DEC_G1;
        CHECKF(gv->n_prev == 1 && gv->prev[0].pipe == gv->pipes[want][ac->kv] && (gv->prev[0].pc.u[2] >> 24) == (G >= 3 ? 4u : (uint32_t)G),
               "%s, 4 heads a workgroup: %lld dispatches", what, (long long)gv->n_prev);
    }
    /* no split: attn_dec.comp walks all chunks in one workgroup (online softmax across them) */
    if (ac->decode && g_nosplit) {
        check_on(g_nosplit, g, o, 1e-5, 1e-4, what);
        const ob_vk *nv = g_nosplit->ctx;
        CHECKF(nv->n_prev == 1 && (nv->prev[0].pc.u[6] >> 8) <= 1, "%s, no split: %lld dispatches", what,
               (long long)nv->n_prev);
    }
    if (ac->decode && g_mergepass) {
        check_on_as(g_mergepass, g, o, 1e-5, 1e-4, what, "merge pass");
        const ob_vk *mv = g_mergepass->ctx;
        CHECKF(mv->n_prev == 2 && (mv->prev[0].pc.u[6] >> 8) == 3 && mv->prev[1].pc.u[6] == ((3u << 8) | 2u),
               "%s, merge pass: %lld dispatches", what, (long long)mv->n_prev);
    }
    ob_graph_free(g);
    free(q); free(kc); free(vc);
}

static void test_attention(void) {
    g_nosplit = backend_with("ONEBIT_VK_ATTN_SPLIT", "1");
    g_mergepass = backend_with("ONEBIT_VK_ATTN_LAST", "0");
    if (g_mergepass) ((ob_vk *)g_mergepass->ctx)->attn_cells = 128;
    g_olddec = backend_with("ONEBIT_VK_ATTN_DEC", "0");
    if (g_olddec) ((ob_vk *)g_olddec->ctx)->attn_cells = 128;
    g_gw4 = backend_with("ONEBIT_VK_ATTN_GW", "4");
    if (g_gw4) ((ob_vk *)g_gw4->ctx)->attn_solo = 0;
    /* splits of 128 cells, so the 300-cell decode cases split (the default is 1024); every
     * split walks its chunks (no "solo" walk by split 0 of a few chunks: see below) */
    uint32_t keep_cells[N_BE], keep_solo[N_BE];
    for (int b = 0; b < N_BE; b++) {
        keep_cells[b] = ((ob_vk *)g_be[b]->ctx)->attn_cells;
        ((ob_vk *)g_be[b]->ctx)->attn_cells = 128;
        keep_solo[b] = ((ob_vk *)g_be[b]->ctx)->attn_solo;
        ((ob_vk *)g_be[b]->ctx)->attn_solo = 0;
    }
    static const ob_type kvt[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_Q8_0};
    static const int heads[][2] = {{4, 4}, {4, 2}, {6, 1}};
    for (size_t k = 0; k < OB_ARRAY_LEN(kvt); k++)
        for (size_t h = 0; h < OB_ARRAY_LEN(heads); h++)
            for (int window = 0; window <= 3; window += 3)
                for (int causal = 0; causal < 2; causal++)
                    for (int cap = 0; cap < 2; cap++)
                        for (int decode = 0; decode < 2; decode++) {
                            /* hd 256 in decode: two output dims per invocation */
                            int hd = kvt[k] == OB_TYPE_Q8_0 ? 64 : (decode ? (h == 1 ? 256 : 40) : 36);
                            attn_case ac = {kvt[k], hd, heads[h][0], heads[h][1], window, causal, cap ? 1.5f : 0.0f, decode, 0};
                            run_attention(&ac);
                        }
    /* solo: the decode cases' splits find at most 3 chunks to walk, under the threshold, so
     * split 0 walks them alone (the dispatch still has the splits' workgroups) */
    for (int b = 0; b < N_BE; b++) ((ob_vk *)g_be[b]->ctx)->attn_solo = 8;
    for (size_t k = 0; k < OB_ARRAY_LEN(kvt); k++)
        for (size_t h = 0; h < OB_ARRAY_LEN(heads); h++)
            for (int window = 0; window <= 3; window += 3) {
                int hd = kvt[k] == OB_TYPE_Q8_0 ? 64 : (h == 1 ? 256 : 40);
                attn_case ac = {kvt[k], hd, heads[h][0], heads[h][1], window, 1, 0.0f, 1, 0};
                run_attention(&ac);
                const ob_vk *vk = g_be[0]->ctx;
                CHECKF(vk->n_prev == 1 && (vk->prev[0].pc.u[6] >> 16) == 8u, "solo attention: u[6] %#x",
                       vk->n_prev == 1 ? vk->prev[0].pc.u[6] : 0u);
            }
    /* ALiBi (jina-bert-v2: encoder, whole sequence): 6 heads take both slope families
     * (n2 = 4) at head_dim 12 as the tiny fixture; 4/2 is GQA; 16 heads, bias 8: slopes down to 2^-8. Positions reach 287
     * in decode, so distant cells are strongly damped. */
    static const int aheads[][2] = {{6, 6}, {4, 2}, {16, 16}};
    for (size_t h = 0; h < OB_ARRAY_LEN(aheads); h++)
        for (int causal = 0; causal < 2; causal++)
            for (int decode = 0; decode < 2; decode++) {
                attn_case ac = {h == 1 ? OB_TYPE_F16 : OB_TYPE_F32, h == 0 ? 12 : 32, aheads[h][0], aheads[h][1], h == 2 ? 3 : 0, causal,
                                h == 1 ? 1.5f : 0.0f, decode, h == 2 ? 8.0f : 0.5f + (float)h};
                run_attention(&ac);
            }
    if (g_nosplit) ob_backend_free(g_nosplit);
    g_nosplit = NULL;
    if (g_mergepass) ob_backend_free(g_mergepass);
    g_mergepass = NULL;
    if (g_olddec) ob_backend_free(g_olddec);
    g_olddec = NULL;
    if (g_gw4) ob_backend_free(g_gw4);
    g_gw4 = NULL;
    for (int b = 0; b < N_BE; b++) {
        ((ob_vk *)g_be[b]->ctx)->attn_cells = keep_cells[b];
        ((ob_vk *)g_be[b]->ctx)->attn_solo = keep_solo[b];
    }
}

/* POOL: mean / first / last of each sequence's tokens, with and without L2 norm; the
 * batch interleaves sequences with shuffled positions (the pick follows pos, not order),
 * and sequence 3 has no token (zeros, also after normalising). n is no multiple of the
 * workgroup. */
static void test_pool(void) {
    int64_t n = 1003, T = 9, n_seq = 4;
    int32_t seq[9] = {1, 0, 2, 1, 0, 0, 2, 1, 0}, pos[9] = {4, 2, 0, 3, 0, 1, 1, 5, 7};
    for (int type = OB_POOL_MEAN; type <= OB_POOL_LAST; type++)
        for (int norm = 0; norm < 2; norm++) {
            int64_t nx[2] = {n, T}, nt[1] = {T};
            float *x = rand_f32(n * T, 1.0f);
            for (int64_t i = 0; i < n * T; i++) x[i] += 0.25f;
            ob_graph *g = ob_graph_new(8);
            ob_tensor *o = ob_pool(g, ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x), ob_leaf(g, "seq", OB_TYPE_I32, 1, nt, seq),
                                   ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos), (ob_pool_type)type, norm, (int)n_seq);
            CHECK(g_be[0]->iface->supports(g_be[0], o));
            char what[64];
            snprintf(what, sizeof(what), "pool type %d norm %d", type, norm);
            check_graph(g, o, 1e-6, 1e-5, what);
            ob_graph_free(g);
            free(x);
        }
}

/* Several nodes in one submission: each must see the previous node's writes. */
static void test_chain(void) {
    int64_t K = 256, N = 96, T = 4;
    int64_t nx[2] = {K, T}, nw[2] = {K, N}, nb[1] = {N};
    float *x = rand_f32(K * T, 1.0f), *nw_ = rand_f32(K, 1.0f), *bias = rand_f32(N, 1.0f);
    void *w = rand_typed(OB_TYPE_Q5_K, K, N, 1.0f);
    ob_graph *g = ob_graph_new(16);
    ob_tensor *h = ob_rms_norm(g, ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x), ob_leaf(g, "nw", OB_TYPE_F32, 1, nx, nw_), 1e-6f);
    h = ob_matmul(g, ob_leaf(g, "w", OB_TYPE_Q5_K, 2, nw, w), h);
    h = ob_add(g, h, ob_leaf(g, "b", OB_TYPE_F32, 1, nb, bias));
    h = ob_act_op(g, h, OB_ACT_GELU);
    h = ob_softmax(g, ob_scale(g, h, 0.5f));
    check_graph(g, h, 1e-6, 1e-3, "chain norm-matmul-add-gelu-scale-softmax");
    ob_graph_free(g);
    free(x); free(nw_); free(bias); free(w);
}

/* Bad ids from a request must not write outside the output: the row reads as zeros. */
static void test_bad_ids(void) {
    int64_t ne[2] = {64, 4}, nt[1] = {2}, n = 128;
    float *tab = rand_f32(256, 1.0f), got[128];
    int32_t ids[2] = {1, 99};
    ob_graph *g = ob_graph_new(4);
    ob_tensor *o = ob_get_rows(g, ob_leaf(g, "tab", OB_TYPE_F32, 2, ne, tab), ob_leaf(g, "ids", OB_TYPE_I32, 1, nt, ids));
    char err[256];
    CHECK(run_on(g_be[0], g, o, got, err, sizeof(err)) == OB_OK);
    bool ok = true;
    for (int64_t i = 0; i < 64; i++) ok &= got[i] == tab[64 + i] && got[64 + i] == 0.0f;
    CHECK(ok);
    (void)n;
    ob_graph_free(g);
    free(tab);
}

/* A node with no kernel (CPY to Q4_0): supports() says no; strict compute refuses; with
 * fallback it runs on the CPU reference and matches, and device nodes after it see its
 * result. */
static void test_fallback(void) {
    int64_t n = 64, T = 2;
    int64_t nx[2] = {n, T};
    float *x = rand_f32(n * T, 1.0f), got[128];
    ob_graph *g = ob_graph_new(8);
    ob_tensor *o = ob_cpy(g, ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x), OB_TYPE_Q4_0);
    CHECK(!g_be[0]->iface->supports(g_be[0], o));
    o = ob_scale(g, ob_cpy(g, o, OB_TYPE_F32), 2.0f); /* device nodes after the fallback */
    char err[256] = "";
    CHECK(run_on(g_be[0], g, o, got, err, sizeof(err)) == OB_ERR_UNSUPPORTED);
    CHECKF(strstr(err, ob_op_name(OB_OP_CPY)) != NULL, "%s", err);
    ob_backend *fb = ob_backend_vulkan_new(0, true, err, sizeof(err));
    CHECKF(fb != NULL, "%s", err);
    if (fb) {
        CHECK(run_on(fb, g, o, got, err, sizeof(err)) == OB_OK);
        void *scratch;
        run_ref(g, &scratch);
        int64_t at = 0;
        CHECKF(ob_test_err_ratio(got, o->data, 2 * n, 1e-6, 1e-6, &at) <= 1.0, "fallback cpy at %lld", (long long)at);
        free(scratch);
        ob_backend_free(fb);
    }
    ob_graph_free(g);
    free(x);
}

/* ONEBIT_VK_PROFILE=1: a device node chain and a graph with a CPU fallback node run
 * right, and the profile has every device node once per step with a finite,
 * non-negative time, the host sides measured and the fallback apart. */
static void test_profile(void) {
    int64_t K = 256, N = 96, T = 4, nx[2] = {K, T}, nw[2] = {K, N};
    float *x = rand_f32(K * T, 1.0f), *nw_ = rand_f32(K, 1.0f), got[256 * 4];
    void *w = rand_typed(OB_TYPE_Q5_K, K, N, 1.0f);
    ob_graph *g = ob_graph_new(16);
    ob_tensor *h = ob_rms_norm(g, ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x), ob_leaf(g, "nw", OB_TYPE_F32, 1, nx, nw_), 1e-6f);
    h = ob_softmax(g, ob_scale(g, ob_matmul(g, ob_leaf(g, "w", OB_TYPE_Q5_K, 2, nw, w), h), 0.5f));
    ob_graph *gf = ob_graph_new(8);
    ob_tensor *f = ob_cpy(gf, ob_leaf(gf, "x", OB_TYPE_F32, 2, nx, x), OB_TYPE_Q4_0); /* no kernel: CPU */
    f = ob_scale(gf, ob_cpy(gf, f, OB_TYPE_F32), 2.0f);
    char err[256] = "";
    const char *was = getenv("ONEBIT_VK_PROFILE");
    char keep[8] = "";
    if (was) snprintf(keep, sizeof(keep), "%s", was);
    setenv("ONEBIT_VK_PROFILE", "1", 1);
    ob_backend *be = ob_backend_vulkan_new(0, true, err, sizeof(err));
    if (was) setenv("ONEBIT_VK_PROFILE", keep, 1);
    else unsetenv("ONEBIT_VK_PROFILE");
    CHECKF(be != NULL, "%s", err);
    if (be) {
        ob_vk *vk = be->ctx;
        CHECKF(vk->prof.on, "profiling off on %s", vk->info.name);
        CHECKF(run_on(be, g, h, got, err, sizeof(err)) == OB_OK, "%s", err);
        void *scratch;
        run_ref(g, &scratch);
        int64_t at = 0;
        CHECKF(ob_test_err_ratio(got, h->data, N * T, 1e-6, 1e-3, &at) <= 1.0, "profiled chain at %lld", (long long)at);
        free(scratch);
        const ob_vk_prof *pr = &vk->prof;
        CHECK(pr->steps == 1 && pr->dispatches == 4 && pr->barriers >= 4 && pr->submits == 1);
        CHECK(pr->node_count[OB_OP_RMS_NORM] == 1 && pr->node_count[OB_OP_SCALE] == 1 &&
              pr->node_count[OB_OP_SOFTMAX] == 1 && pr->node_count[OB_OP_COUNT + OB_TYPE_Q5_K] == 1);
        double sum = 0;
        int bad = 0;
        for (int k = 0; k < OB_VK_PROF_KEYS; k++) {
            bad += !(pr->node_ms[k] >= 0 && pr->node_ms[k] < 1e4) || (pr->node_count[k] == 0 && pr->node_ms[k] != 0);
            sum += pr->node_ms[k];
        }
        CHECKF(bad == 0 && sum > 0, "per-op times: %d bad, sum %g ms", bad, sum);
        CHECK(pr->gpu_span_ms >= 0 && pr->record_ms >= 0 && pr->submit_ms > 0 && pr->fallback_ms == 0);
        /* The CPU node comes first (nothing recorded yet: no extra submit); its time is the
         * fallback's, its device successors are timed as usual. */
        CHECKF(run_on(be, gf, f, got, err, sizeof(err)) == OB_OK, "%s", err);
        run_ref(gf, &scratch);
        CHECKF(ob_test_err_ratio(got, f->data, K * T, 1e-6, 1e-6, &at) <= 1.0, "profiled fallback at %lld", (long long)at);
        free(scratch);
        CHECK(pr->steps == 2 && pr->submits == 2 && pr->node_count[OB_OP_CPY] == 1 && pr->node_count[OB_OP_SCALE] == 2);
        CHECK(pr->fallback_ms > 0);
        ob_backend_free(be);
    }
    /* ONEBIT_VK_PROFILE=4: whole levels, one timestamp a barrier (printed when freed); two
     * steps (one run here, one in check_on) */
    be = backend_with("ONEBIT_VK_PROFILE", "4");
    if (be) {
        ob_vk *vk = be->ctx;
        CHECKF(run_on(be, g, h, got, err, sizeof(err)) == OB_OK, "%s", err);
        check_on(be, g, h, 1e-6, 1e-3, "level-profiled chain");
        const ob_vk_prof *pr = &vk->prof;
        int64_t levels = 0;
        for (int64_t i = 0; i < vk->n_prev; i++) levels += i == 0 || vk->prev[i].barrier;
        double sum = 0;
        int bad = 0;
        for (int64_t k = 0; k < pr->tl_n; k++) {
            bad += !(pr->tl_dur[k] >= 0 && pr->tl_dur[k] < 1e4);
            sum += pr->tl_dur[k];
        }
        CHECKF(pr->levels && pr->tl_steps == 2 && pr->tl_n == levels && levels >= 2 && bad == 0 && sum > 0 &&
                   pr->gpu_span_ms > 0,
               "levels: %lld timed of %lld, %lld steps, %d bad, sum %g ms", (long long)pr->tl_n, (long long)levels,
               (long long)pr->tl_steps, bad, sum);
        ob_backend_free(be);
    }
    ob_graph_free(g);
    ob_graph_free(gf);
    free(x); free(nw_); free(w);
}

/* The default memory budget: the device-local heap's free bytes. Without
 * VK_EXT_memory_budget that is the heap less our buffers, so a 64 MiB buffer shows. */
static void test_free_memory(void) {
    ob_backend *be = g_be[0];
    CHECK(be->iface->free_memory != NULL);
    if (!be->iface->free_memory) return;
    size_t before = be->iface->free_memory(be);
    ob_vk *vk = be->ctx;
    CHECKF(before > 0, "free_memory 0 on %s", vk->info.name);
    uint32_t n = 0;
    bool budget = false;
    vkEnumerateDeviceExtensionProperties(vk->info.phys, NULL, &n, NULL);
    VkExtensionProperties *e = calloc(n ? n : 1, sizeof(*e));
    if (e && vkEnumerateDeviceExtensionProperties(vk->info.phys, NULL, &n, e) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++) budget |= !strcmp(e[i].extensionName, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    free(e);
    const size_t mb64 = (size_t)64 << 20;
    void *p = be->iface->alloc(be, mb64);
    CHECK(p != NULL);
    size_t after = be->iface->free_memory(be);
    printf("free_memory: %.1f MiB, %.1f MiB with 64 MiB more allocated (%s)\n", before / 1048576.0,
           after / 1048576.0, budget ? "VK_EXT_memory_budget" : "heap less our buffers");
    if (!budget) CHECKF(after + mb64 <= before, "free %zu -> %zu after 64 MiB", before, after);
    be->iface->free_buf(be, p);
    if (!budget) CHECK(be->iface->free_memory(be) == before);
}

/* Barriers only where a dispatch touches what an earlier one wrote, and re-submission of
 * a repeated graph: add and mul both read x, y (no barrier between them), the sum of
 * their results waits for both, then a Q4_K matvec and an RMS norm. The graph runs three
 * times on the same buffers with new x each time: the 2nd and 3rd re-submit the first
 * recording, and every run matches the reference on its own x. Then the same on a
 * backend with ONEBIT_VK_NO_REUSE=1 and ONEBIT_VK_ALL_BARRIERS=1. */
static void test_reuse(void) {
    for (int variant = 0; variant < 2; variant++) {
        ob_backend *be = variant ? backend_with("ONEBIT_VK_NO_REUSE", "1") : g_be[0];
        ob_backend *be2 = variant ? backend_with("ONEBIT_VK_ALL_BARRIERS", "1") : NULL;
        for (int bi = 0; bi < (variant ? 2 : 1); bi++) {
            ob_backend *b = bi ? be2 : be;
            if (!b) continue;
            ob_vk *vk = b->ctx;
            int64_t K = 256, N = 64, nx[1] = {K}, nw[2] = {K, N};
            float *x = rand_f32(K, 1.0f), *y = rand_f32(K, 1.0f);
            void *w = rand_typed(OB_TYPE_Q4_K, K, N, 1.0f);
            ob_graph *g = ob_graph_new(16);
            ob_tensor *tx = ob_leaf(g, "x", OB_TYPE_F32, 1, nx, x), *ty = ob_leaf(g, "y", OB_TYPE_F32, 1, nx, y);
            ob_tensor *s = ob_add(g, ob_add(g, tx, ty), ob_mul(g, tx, ty));
            ob_tensor *o = ob_rms_norm(g, ob_matmul(g, ob_leaf(g, "w", OB_TYPE_Q4_K, 2, nw, w), s), NULL, 1e-6f);
            /* leaves on the device once, as a context's buffers are */
            void *dev[3] = {b->iface->alloc(b, K * 4), b->iface->alloc(b, K * 4), b->iface->alloc(b, ob_row_size(OB_TYPE_Q4_K, K) * (size_t)N)};
            ob_tensor *leaves[3] = {tx, ty, NULL};
            for (int64_t i = 0; i < g->n; i++)
                if (g->nodes[i].op == OB_OP_LEAF && !strcmp(g->nodes[i].name, "w")) leaves[2] = &g->nodes[i];
            CHECK(dev[0] && dev[1] && dev[2] && leaves[2]);
            if (!dev[0] || !dev[1] || !dev[2] || !leaves[2]) continue;
            void *host[3] = {x, y, w};
            for (int k = 0; k < 3; k++) {
                b->iface->upload(b, dev[k], host[k], ob_nbytes(leaves[k]));
                leaves[k]->data = dev[k];
            }
            ob_graph_plan(g);
            void *scratch = b->iface->alloc(b, g->scratch_size);
            ob_graph_bind(g, scratch);
            int64_t reused0 = vk->reused, unlisted0 = vk->unlisted;
            const bool q8 = vk->q8;
            const int64_t n_want = q8 ? 6 : 5;
            float got[64], ref[64];
            /* runs 0-1 at version 0 (listed each time); run 2 gives the graph a version (listed
             * once more), run 3 comes back with it (submitted without listing) */
            for (int run = 0; run < 4; run++) {
                if (run == 2) g->version = ob_graph_new_version();
                /* run 3 from a stream of its own: the model checks after this keep their draws */
                ob_rng own;
                ob_rng_seed(&own, 0x5e05eu + (uint64_t)variant);
                ob_rng_fill_normal(run == 3 ? &own : &g_rng, x, K, 1.0f);
                b->iface->upload(b, dev[0], x, K * 4);
                char err[256] = "";
                CHECKF(b->iface->compute(b, g, err, sizeof(err)) == OB_OK, "reuse run %d: %s", run, err);
                b->iface->download(b, got, o->data, sizeof(got));
                /* reference on host copies of the leaves */
                ob_graph *gr = ob_graph_new(16);
                ob_tensor *rx = ob_leaf(gr, "x", OB_TYPE_F32, 1, nx, x), *ry = ob_leaf(gr, "y", OB_TYPE_F32, 1, nx, y);
                ob_tensor *rs = ob_add(gr, ob_add(gr, rx, ry), ob_mul(gr, rx, ry));
                ob_tensor *ro = ob_rms_norm(gr, ob_matmul(gr, ob_leaf(gr, "w", OB_TYPE_Q4_K, 2, nw, w), rs), NULL, 1e-6f);
                void *rscr;
                run_ref(gr, &rscr);
                memcpy(ref, ro->data, sizeof(ref));
                free(rscr);
                ob_graph_free(gr);
                int64_t at = 0;
                /* int8 x: ~0.3% of y's scale (a stale result is off by its whole scale) */
                CHECKF(ob_test_err_ratio(got, ref, N, q8 ? 3e-2 : 1e-5, 1e-3, &at) <= 1.0, "reuse variant %d/%d run %d at %lld: %g vs %g",
                       variant, bi, run, (long long)at, got[at], ref[at]);
            }
            if (variant == 0) {
                CHECKF(vk->reused - reused0 == 3, "re-submitted %lld of 3", (long long)(vk->reused - reused0));
                CHECKF(vk->unlisted - unlisted0 == 1, "unlisted %lld of 1", (long long)(vk->unlisted - unlisted0));
                /* add, mul, add, [quantize x,] matmul, norm: barriers before all but mul */
                CHECK(vk->n_prev == n_want);
                bool bars = vk->n_prev == n_want && !vk->prev[1].barrier;
                for (int64_t i = 0; i < vk->n_prev; i++) bars &= i == 1 || vk->prev[i].barrier;
                CHECKF(bars, "barriers %u %u %u %u %u", vk->prev[0].barrier, vk->prev[1].barrier, vk->prev[2].barrier,
                       vk->prev[3].barrier, vk->prev[4].barrier);
            } else if (bi == 0) {
                CHECK(vk->reused == reused0 && vk->unlisted == unlisted0); /* ONEBIT_VK_NO_REUSE */
            } else {
                bool all = vk->n_prev == n_want;
                for (int64_t i = 0; i < vk->n_prev; i++) all &= vk->prev[i].barrier != 0;
                CHECK(all); /* ONEBIT_VK_ALL_BARRIERS */
                CHECK(vk->unlisted - unlisted0 == 1);
            }
            b->iface->free_buf(b, scratch);
            for (int k = 0; k < 3; k++) b->iface->free_buf(b, dev[k]);
            ob_graph_free(g);
            free(x); free(y); free(w);
        }
        if (variant) {
            ob_backend_free(be);
            ob_backend_free(be2);
        }
    }
}

/* ---- models ---------------------------------------------------------------------------- */

static void test_models(void) {
    static const char *arch[] = {"llama", "qwen2", "qwen3", "gemma3"};
    /* the prompts from a stream of their own: the same whichever groups ran before
     * (ONEBIT_TEST_SHARD) */
    ob_rng rng;
    ob_rng_seed(&rng, 0x6d0de1u);
    for (size_t a = 0; a < OB_ARRAY_LEN(arch); a++)
        for (int kv = 0; kv < 3; kv++) {
            char path[256], err[512] = "";
            snprintf(path, sizeof(path), "tests/fixtures/models/%s.gguf", arch[a]);
            ob_model *m[2] = {NULL, NULL};
            ob_context *c[2] = {NULL, NULL};
            int np = 23;
            int32_t tok[23], pos[23], seq[23];
            int8_t want[23];
            for (int i = 0; i < np; i++) { tok[i] = (int32_t)(ob_rng_u64(&rng) % 500); pos[i] = i; seq[i] = 0; want[i] = 1; }
            for (int d = 0; d < 2; d++) {
                ob_model_params mp = ob_model_default_params();
                mp.device = d ? OB_DEVICE_VULKAN : OB_DEVICE_CPU;
                mp.n_threads = 2;
                ob_status st = ob_model_load(path, &mp, &m[d], err, sizeof(err));
                CHECKF(st == OB_OK, "%s on %s: %s", arch[a], d ? "vulkan" : "cpu", err);
                if (st) continue;
                ob_context_params cp = ob_context_default_params();
                cp.n_ctx = 64;
                cp.n_batch = 16; /* two chunks: a prefill graph and a short one */
                cp.type_k = cp.type_v = kv == 0 ? OB_KV_F32 : kv == 1 ? OB_KV_F16 : OB_KV_Q8_0;
                st = ob_context_new(m[d], &cp, &c[d], err, sizeof(err));
                CHECKF(st == OB_OK, "%s context: %s", arch[a], err);
                if (st) continue;
                ob_batch b = {np, tok, pos, seq, want};
                for (int i = 0; i < np - 16; i++) want[i] = 0;
                st = ob_decode(c[d], &b, err, sizeof(err));
                CHECKF(st == OB_OK, "%s decode: %s", arch[a], err);
                /* then two single-token decode steps */
                for (int k = 0; k < 2 && !st; k++) {
                    int32_t t1 = 7 + k, p1 = np + k, s1 = 0;
                    ob_batch b1 = {1, &t1, &p1, &s1, NULL};
                    st = ob_decode(c[d], &b1, err, sizeof(err));
                    CHECKF(st == OB_OK, "%s decode step: %s", arch[a], err);
                }
            }
            if (c[0] && c[1]) {
                /* The last single-token step's logits. */
                const float *l0 = ob_get_logits(c[0], 0), *l1 = ob_get_logits(c[1], 0);
                ob_model_info info;
                ob_model_get_info(m[0], &info);
                CHECK(l0 && l1);
                if (l0 && l1) {
                    double md = 0, mr = 0;
                    for (int v = 0; v < info.n_vocab; v++) {
                        double d = fabs((double)l0[v] - l1[v]);
                        if (d > md || d != d) md = d != d ? INFINITY : d;
                        if (fabs(l0[v]) > mr) mr = fabs(l0[v]);
                    }
                    double rel = md / (mr > 0 ? mr : 1);
                    CHECKF(rel <= 1e-3, "%s kv %d: vulkan logits rel err %.3g", arch[a], kv, rel);
                    printf("model %s kv %d: vulkan vs cpu max rel err %.3g\n", arch[a], kv, rel);
                }
                ob_model_info vi;
                ob_model_get_info(m[1], &vi);
                CHECK(vi.backend && !strcmp(vi.backend, "vulkan"));
            }
            for (int d = 0; d < 2; d++) { ob_context_free(c[d]); ob_model_free(m[d]); }
        }
}

int main(void) {
    if (!vkt_begin("test_vulkan_ops")) return ob_test_failures ? ob_test_done("test_vulkan_ops") : 77; /* no device: skipped */
    ob_rng_seed(&g_rng, 0x5eed0bu);
    double t0 = ob_time_s();
    int k = 0; /* the group index for ONEBIT_TEST_SHARD */
    if (ob_test_shard(k++)) test_norms();
    if (ob_test_shard(k++)) test_norm_paths();
    if (ob_test_shard(k++)) test_elementwise();
    if (ob_test_shard(k++)) test_rope();
    if (ob_test_shard(k++)) test_norm_rope();
    if (ob_test_shard(k++)) test_get_rows();
    if (ob_test_shard(k++)) test_matmul();
    if (ob_test_shard(k++)) test_matmul_paths();
    if (ob_test_shard(k++)) test_cpy();
    if (ob_test_shard(k++)) test_kv_store();
    if (ob_test_shard(k++)) test_attention();
    if (ob_test_shard(k++)) test_pool();
    if (ob_test_shard(k++)) test_chain();
    if (ob_test_shard(k++)) test_matvec_variants();
    if (ob_test_shard(k++)) test_matvec_q8();
    if (ob_test_shard(k++)) test_reuse();
    if (ob_test_shard(k++)) test_det_matmul();
    if (ob_test_shard(k++)) test_det_attention();
    if (ob_test_shard(k++)) test_det_moe();
    if (ob_test_shard(k++)) test_bad_ids();
    if (ob_test_shard(k++)) test_fallback();
    if (ob_test_shard(k++)) test_profile();
    if (ob_test_shard(k++)) test_free_memory();
    printf("ops: %.1f s\n", ob_time_s() - t0);
    if (ob_test_shard(k++)) test_models();
    printf("decoders: %.1f s\n", ob_time_s() - t0);
    if (ob_test_shard(k++)) ob_test_encoders_on(OB_DEVICE_VULKAN, "vulkan", NULL);
    printf("total: %.1f s\n", ob_time_s() - t0);
    vkt_end();
    return ob_test_done("test_vulkan_ops");
}
#endif
