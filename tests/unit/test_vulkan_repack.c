/* Repacked weights on the Vulkan backend (vk_repack.c): model weights of Q6_K, TQ2_0, Q1_0
 * and Q8_0 whose rows hold whole groups of 8 blocks are kept as groups of 8 block bodies
 * followed by their 8 f16 d's. Checked here:
 *   - the device bytes are that layout (against a permutation written here from the
 *     layout's description), and downloads give the uploaded bytes back, whole and in
 *     random pieces; other shapes and types, and ONEBIT_VK_REPACK=0, stay as uploaded;
 *     freeing a buffer forgets its ranges;
 *   - every kernel that reads weights matches the CPU reference on repacked weights, and
 *     runs on the repacked pipelines (none on the plain ones): the one-token int8 matmul
 *     at 8, 4, 2 and 1 rows a subgroup and per row, the batched int8 matmul, the f32
 *     matvec (streaming and chunk paths), prefill tiles, GET_ROWS, CPY, a matmul + ADD +
 *     RMS norm (prenorm producer and consumer) and gate / up / GLU / down.
 * Runs on lavapipe where there is no GPU. */
#include "testutil.h"
#include <stdio.h>
#ifndef ONEBIT_VULKAN
int main(void) {
    printf("test_vulkan_repack: SKIPPED (built without -DONEBIT_VULKAN=ON)\n");
    return 77; /* SKIP_RETURN_CODE (CMakeLists.txt): ctest reports it skipped */
}
#else
#include "backend/vulkan/vk_internal.h"
#include "format/quant.h"
#include "onebit.h"
#include "vk_testutil.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The repacked types: elements and bytes per block, where a plain block keeps its d. */
static const struct { ob_type t; int64_t bs; size_t ts, dpos; } k_types[] = {
    {OB_TYPE_Q6_K, 256, 210, 208}, {OB_TYPE_TQ2_0, 256, 66, 64}, {OB_TYPE_Q1_0, 128, 18, 0}, {OB_TYPE_Q8_0, 32, 34, 0}};

/* Dispatches of vk's last list on a pipeline of weight type t, repacked (rp) or plain (on
 * an X16 int8 x or not). */
static int count_pipes(const ob_vk *vk, ob_type t, bool rp) {
    const unsigned tf = (unsigned)t | (rp ? OB_VK_RP : 0u);
    int n = 0;
    for (int64_t i = 0; i < vk->n_prev; i++)
        for (int s = 0; s < OB_VK_SH_COUNT; s++)
            if (vk->prev[i].pipe && (vk->prev[i].pipe == vk->pipes[s][ob_vk_pipe_slot(tf)] ||
                                     vk->prev[i].pipe == vk->pipes[s][ob_vk_pipe_slot(tf | OB_VK_X16)])) {
                n++;
                break;
            }
    return n;
}

static void check_rp(const ob_vk *vk, ob_type t, const char *what) {
    const int r = count_pipes(vk, t, true), p = count_pipes(vk, t, false);
    CHECKF(r >= 1 && p == 0, "%s: %d repacked and %d plain dispatches of %s", what, r, p, ob_type_name(t));
}

/* ---- layout and copies ----------------------------------------------------------------- */

static void test_layout(void) {
    ob_backend *be = g_be[0], *off = backend_with("ONEBIT_VK_REPACK", "0");
    ob_vk *vk = be->ctx;
    for (size_t ti = 0; ti <= OB_ARRAY_LEN(k_types); ti++) {
        /* the last round: Q4_K (16-aligned blocks already), never repacked */
        const bool q4k = ti == OB_ARRAY_LEN(k_types);
        const ob_type t = q4k ? OB_TYPE_Q4_K : k_types[ti].t;
        const int64_t bs = q4k ? 256 : k_types[ti].bs;
        const size_t ts = q4k ? 144 : k_types[ti].ts, dpos = q4k ? 0 : k_types[ti].dpos;
        static const int64_t blocks[] = {8, 24, 4, 12}; /* blocks a row: 4 and 12 are not whole groups */
        for (size_t bi = 0; bi < OB_ARRAY_LEN(blocks); bi++) {
            const int64_t ne0 = blocks[bi] * bs, rows = 5;
            const size_t bytes = (size_t)rows * (size_t)blocks[bi] * ts;
            const bool want = !q4k && blocks[bi] % 8 == 0;
            char what[96];
            snprintf(what, sizeof(what), "layout %s, %lld blocks a row", ob_type_name(t), (long long)blocks[bi]);
            uint8_t *w = rand_typed(t, ne0, rows, 1.0f), *got = malloc(bytes), *raw = malloc(bytes);
            void *dev = be->iface->alloc(be, bytes);
            CHECK(dev != NULL);
            if (!dev) continue;
            ob_status st = be->iface->upload_weight(be, dev, w, bytes, t, ne0);
            CHECKF(st == OB_OK, "%s: upload", what);
            CHECKF(vk->n_rp == (want ? 1 : 0), "%s: %d repacked ranges", what, vk->n_rp);
            ob_tensor tt;
            memset(&tt, 0, sizeof(tt));
            tt.type = t;
            tt.ne[0] = ne0;
            tt.ne[1] = rows;
            tt.ne[2] = tt.ne[3] = 1;
            tt.data = dev;
            CHECKF(ob_vk_wtype(vk, &tt) == (ob_type)(want ? ((unsigned)t | OB_VK_RP) : (unsigned)t), "%s: dispatch type",
                   what);
            /* the device bytes as they lie */
            ob_vk_alloc *a = ob_vk_find(vk, (uint64_t)(uintptr_t)dev, bytes);
            char err[256] = "";
            CHECK(a && ob_vk_copy_at(vk, a, (size_t)((uint64_t)(uintptr_t)dev - a->addr), raw, bytes, false, err,
                                     sizeof(err)) == OB_OK);
            bool same = true;
            for (size_t g = 0; want && g < bytes / (8 * ts); g++)
                for (size_t j = 0; j < 8; j++) {
                    const uint8_t *blk = w + (8 * g + j) * ts, *rg = raw + 8 * g * ts;
                    for (size_t k = 0, o = 0; k < ts; k++) {
                        if (k == dpos || k == dpos + 1) same &= rg[8 * (ts - 2) + 2 * j + (k - dpos)] == blk[k];
                        else same &= rg[j * (ts - 2) + o++] == blk[k];
                    }
                }
            if (!want) same = !memcmp(raw, w, bytes);
            CHECKF(same, "%s: device bytes not in the %s layout", what, want ? "repacked" : "plain");
            /* downloads: whole, then random pieces */
            CHECKF(be->iface->download(be, got, dev, bytes) == OB_OK && !memcmp(got, w, bytes), "%s: download", what);
            for (int p = 0; p < 24; p++) {
                const size_t at = (size_t)(ob_rng_u64(&g_rng) % bytes), n = 1 + (size_t)(ob_rng_u64(&g_rng) % (bytes - at));
                memset(got, 0xa5, n);
                CHECKF(be->iface->download(be, got, (uint8_t *)dev + at, n) == OB_OK && !memcmp(got, w + at, n),
                       "%s: download of %zu bytes at %zu", what, n, at);
            }
            if (want) {
                /* the weight again, repacked, then plain bytes over it: plain from then on */
                CHECK(be->iface->upload_weight(be, dev, w, bytes, t, ne0) == OB_OK && vk->n_rp == 1);
                CHECK(be->iface->upload(be, dev, w, bytes) == OB_OK);
                CHECKF(vk->n_rp == 0 && ob_vk_wtype(vk, &tt) == t, "%s: repacked after a plain upload", what);
                CHECKF(be->iface->download(be, got, dev, bytes) == OB_OK && !memcmp(got, w, bytes), "%s: plain download",
                       what);
                CHECK(be->iface->upload_weight(be, dev, w, bytes, t, ne0) == OB_OK && vk->n_rp == 1);
            }
            be->iface->free_buf(be, dev);
            CHECKF(vk->n_rp == 0, "%s: %d ranges after free", what, vk->n_rp);
            if (off) {
                ob_vk *ov = off->ctx;
                void *d2 = off->iface->alloc(off, bytes);
                CHECK(d2 && off->iface->upload_weight(off, d2, w, bytes, t, ne0) == OB_OK);
                CHECKF(ov->n_rp == 0, "%s: repacked with ONEBIT_VK_REPACK=0", what);
                if (d2) off->iface->free_buf(off, d2);
            }
            free(w);
            free(got);
            free(raw);
        }
    }
    if (off) ob_backend_free(off);
}

/* ---- kernels ----------------------------------------------------------------------------- */

/* A MATMUL of type t (K x N) over T tokens of x on the int8 grid: on every backend of
 * g_be, and on `extra` backends when given, with the repacked pipelines. */
static void matmul_case(ob_type t, int64_t K, int64_t N, int64_t T, ob_backend *const *extra, const char *const *names,
                        int n_extra) {
    void *w;
    float *x;
    ob_tensor *o;
    ob_graph *g = q8_matmul_graph(t, K, N, T, &w, &x, &o);
    char what[96];
    snprintf(what, sizeof(what), "repacked matmul %s K=%lld N=%lld T=%lld", ob_type_name(t), (long long)K, (long long)N,
             (long long)T);
    /* int8 paths to float rounding (x on their grid); f32 paths as the op test's */
    const double atol = (T <= 8 ? 2e-5 : 2e-4) * sqrt((double)K);
    check_graph(g, o, atol, 1e-4, what);
    check_rp(g_be[0]->ctx, t, what);
    for (int e = 0; e < n_extra; e++) {
        if (!extra[e]) continue;
        char w2[160];
        snprintf(w2, sizeof(w2), "%s, %s", what, names[e]);
        check_on(extra[e], g, o, 2e-4 * sqrt((double)K), 1e-4, w2);
        check_rp(extra[e]->ctx, t, w2);
    }
    ob_graph_free(g);
    free(w);
    free(x);
}

static void test_matmul(void) {
    /* every one-token row count (ONEBIT_VK_Q8_MIN_WG=0 keeps it at any N; Q6_K too), the
     * per-row one-token path (0), the f32 matvec's streaming path (ONEBIT_VK_Q8=0) */
    setenv("ONEBIT_VK_Q8_MIN_WG", "0", 1);
    setenv("ONEBIT_VK_Q6K_ROWS1", "0", 1);
    static const char *const rows1[] = {"8", "4", "2", "1", "0"};
    ob_backend *ex[6];
    const char *names[6] = {"rows1=8", "rows1=4", "rows1=2", "rows1=1", "per row", "f32 streaming"};
    for (int i = 0; i < 5; i++) ex[i] = backend_with("ONEBIT_VK_Q8_ROWS1", rows1[i]);
    unsetenv("ONEBIT_VK_Q8_MIN_WG");
    unsetenv("ONEBIT_VK_Q6K_ROWS1");
    ex[5] = backend_with("ONEBIT_VK_Q8", "0");
    for (size_t ti = 0; ti < OB_ARRAY_LEN(k_types); ti++) {
        const ob_type t = k_types[ti].t;
        const int64_t bs = k_types[ti].bs;
        matmul_case(t, 8 * bs, 37, 1, ex, names, 6);
        matmul_case(t, 24 * bs, 70, 1, ex, names, 6);
        matmul_case(t, 24 * bs, 37, 3, ex + 5, names + 5, 1);
        matmul_case(t, 8 * bs, 70, 12, NULL, NULL, 0);
    }
    for (int i = 0; i < 6; i++)
        if (ex[i]) ob_backend_free(ex[i]);
}

static void test_rows_cpy(void) {
    for (size_t ti = 0; ti < OB_ARRAY_LEN(k_types); ti++) {
        const ob_type t = k_types[ti].t;
        const int64_t ne[2] = {16 * k_types[ti].bs, 9}, nt[1] = {6};
        void *tab = rand_typed(t, ne[0], ne[1], 1.0f);
        int32_t ids[6] = {3, 0, 8, 3, 5, 1};
        char what[96];
        ob_graph *g = ob_graph_new(4);
        ob_tensor *o = ob_get_rows(g, ob_leaf(g, "tab", t, 2, ne, tab), ob_leaf(g, "ids", OB_TYPE_I32, 1, nt, ids));
        snprintf(what, sizeof(what), "repacked get_rows %s", ob_type_name(t));
        check_graph(g, o, 1e-7, 1e-6, what);
        check_rp(g_be[0]->ctx, t, what);
        ob_graph_free(g);
        for (int f16 = 0; f16 < 2; f16++) {
            g = ob_graph_new(4);
            o = ob_cpy(g, ob_leaf(g, "tab", t, 2, ne, tab), f16 ? OB_TYPE_F16 : OB_TYPE_F32);
            snprintf(what, sizeof(what), "repacked cpy %s -> %s", ob_type_name(t), f16 ? "F16" : "F32");
            check_graph(g, o, 1e-6, f16 ? 1e-3 : 1e-6, what);
            check_rp(g_be[0]->ctx, t, what);
            ob_graph_free(g);
        }
        free(tab);
    }
}

/* One token's matmul + residual ADD + RMS norm + matmul, both weights of type t (K x N,
 * N x M): the prenorm producer and its consumer on repacked weights (checked on the sum
 * and on the last matmul). Then gate, up, their GLU and down on the norm (prenorm
 * gate/up/GLU with ONEBIT_VK_PN_GLU=1, and apart with 0). */
static void test_fused(void) {
    const ob_vk *vk = g_be[0]->ctx;
    ob_backend *pgall = backend_with("ONEBIT_VK_PN_GLU", "1"), *pgoff = backend_with("ONEBIT_VK_PN_GLU", "0");
    for (size_t ti = 0; ti < OB_ARRAY_LEN(k_types); ti++) {
        const ob_type t = k_types[ti].t;
        const int64_t K = k_types[ti].bs >= 256 ? 2048 : 1024, N = K, M = 70;
        const int64_t nx[2] = {K, 1}, nw[2] = {K, N}, n2[2] = {N, M};
        const float sc = 1.0f / sqrtf((float)K);
        void *w1 = rand_typed(t, K, N, sc), *w2 = rand_typed(t, N, M, 1.0f), *wg = rand_typed(t, N, N, sc),
             *wu = rand_typed(t, N, N, sc);
        float *x = rand_f32(K, 1.0f), *nw1 = rand_f32(K, 1.0f), *nw2 = rand_f32(N, 1.0f), *res = rand_f32(N, 1.0f);
        for (int glu = 0; glu < 2; glu++)
            for (int last = 0; last < 2; last++) {
                ob_graph *g = ob_graph_new(20);
                ob_tensor *h = ob_rms_norm(g, ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x), ob_leaf(g, "nw1", OB_TYPE_F32, 1, nx, nw1), 1e-6f);
                ob_tensor *sum = ob_add(g, ob_leaf(g, "res", OB_TYPE_F32, 2, nx, res), ob_matmul(g, ob_leaf(g, "w1", t, 2, nw, w1), h));
                ob_tensor *h2 = ob_rms_norm(g, sum, ob_leaf(g, "nw2", OB_TYPE_F32, 1, nx, nw2), 1e-6f);
                if (glu)
                    h2 = ob_glu(g, ob_matmul(g, ob_leaf(g, "wg", t, 2, nw, wg), h2), ob_matmul(g, ob_leaf(g, "wu", t, 2, nw, wu), h2),
                                OB_ACT_SILU);
                ob_tensor *o = ob_matmul(g, ob_leaf(g, "w2", t, 2, n2, w2), h2);
                /* an inner node checked is read last, so no later node takes its bytes */
                ob_tensor *chk = last ? o : ob_scale(g, glu ? h2 : sum, 1.0f);
                char what[96];
                snprintf(what, sizeof(what), "repacked %s %s, %s", glu ? "gate/up/glu" : "matmul+add+norm", ob_type_name(t),
                         last ? "out" : glu ? "glu" : "sum");
                /* the op test's bounds for these chains (int8 steps on products of normals) */
                const double atol = last ? 2 * 3e-2 * sqrt((double)N) : 2 * 3e-2 * (glu ? 1.0 : sqrt((double)K));
                const int64_t pn0 = vk->pn_count;
                check_graph(g, chk, atol, 1e-2, what);
                check_rp(vk, t, what);
                CHECKF(!vk->prenorm || !vk->q8_fuse || vk->info.subgroup > 64 || vk->pn_count > pn0, "%s: no prenorm", what);
                /* b 2: the default backend (its run above). Where the down matmul is the GLU's
                 * one reader (last), TQ2_0 takes the X16 form there and with PN_GLU=1 (its down,
                 * TQ2_0 too, reads an X16 x); otherwise the 32-row form with PN_GLU=1, and
                 * Q1_0 by default */
                for (int b = 0; glu && b < 3; b++) {
                    ob_backend *bb = b == 0 ? pgall : b == 1 ? pgoff : g_be[0];
                    if (!bb) continue;
                    if (b < 2) check_on_as(bb, g, chk, atol, 1e-2, what, b ? "PN_GLU=0" : "PN_GLU=1");
                    const ob_vk *bv = bb->ctx;
                    check_rp(bv, t, what);
                    int png = 0, png16 = 0;
                    for (int64_t i = 0; i < bv->n_prev; i++) {
                        const VkPipeline p = bv->prev[i].pipe;
                        png += p && p == bv->pipes[OB_VK_SH_MATVEC_Q8_PNG][t + OB_TYPE_COUNT];
                        png16 += p && p == bv->pipes[OB_VK_SH_MATVEC_Q8_PNG][ob_vk_pipe_slot((unsigned)t | OB_VK_RP | OB_VK_X16)];
                    }
                    const bool on = b != 1 && bv->prenorm && bv->q8_fuse && bv->info.subgroup <= 64;
                    const bool want16 = on && t == OB_TYPE_TQ2_0 && last, want = on && !want16 && (b == 0 || t == OB_TYPE_Q1_0);
                    CHECKF(png == (want ? 1 : 0) && png16 == (want16 ? 1 : 0),
                           "%s, %s: %d repacked gate/up/GLU dispatches, %d X16", what,
                           b == 0 ? "PN_GLU=1" : b == 1 ? "PN_GLU=0" : "default", png, png16);
                }
                ob_graph_free(g);
            }
        free(w1); free(w2); free(wg); free(wu); free(x); free(nw1); free(nw2); free(res);
    }
    if (pgall) ob_backend_free(pgall);
    if (pgoff) ob_backend_free(pgoff);
}

int main(void) {
    ob_rng_seed(&g_rng, 0x7e9acu);
    if (!vkt_begin("test_vulkan_repack")) return ob_test_failures ? ob_test_done("test_vulkan_repack") : 77; /* no device: skipped */
    g_model_weights = true;
    test_layout();
    test_matmul();
    test_rows_cpy();
    test_fused();
    vkt_end();
    return ob_test_done("test_vulkan_repack");
}
#endif
