/* test_vulkan_ops' batch-invariant groups (ob_backend.deterministic): a token's row of a
 * matmul, an attention and a mixture of experts is the same bits whatever batch it is in. */
#include "backend/vulkan/vk_internal.h"
#include "format/quant.h"
#include "vk_ops_cases.h"
#include "vk_testutil.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- batch-invariant mode (ob_backend.deterministic) ------------------------------------ */

/* How many of the n rows of y (each w floats) differ bitwise from rows rows[i] of ref. */
static int det_rows_differ(const float *y, const float *ref, const int *rows, int64_t n, int64_t w) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += memcmp(y + i * w, ref + (int64_t)rows[i] * w, sizeof(float) * (size_t)w) != 0;
    return bad;
}

/* Every listed dispatch of be's last graph runs shader sh, or the quantizer before it. */
static bool det_listed(const ob_backend *be, ob_vk_shader sh) {
    const ob_vk *vk = be->ctx;
    bool any = false;
    for (int64_t i = 0; i < vk->n_prev; i++) {
        const uint32_t s = vk->prev[i].sh;
        if (s != (uint32_t)OB_VK_SH_QUANT_X && s != (uint32_t)OB_VK_SH_QUANT_X4 && s != (uint32_t)sh) return false;
        any |= s == (uint32_t)sh;
    }
    return any;
}

/* MATMUL of W (K x N, type t) over the T rows rows[] of x on be: y [T][N]. */
static ob_status det_matmul(ob_backend *be, ob_type t, const void *w, int64_t K, int64_t N, const float *x,
                            const int *rows, int64_t T, float *y) {
    float *xs = malloc(sizeof(float) * (size_t)(K * T));
    for (int64_t i = 0; i < T; i++) memcpy(xs + i * K, x + (int64_t)rows[i] * K, sizeof(float) * (size_t)K);
    int64_t nw[2] = {K, N}, nx[2] = {K, T};
    ob_graph *g = ob_graph_new(4);
    ob_tensor *o = ob_matmul(g, ob_leaf(g, "w", t, 2, nw, (void *)w), ob_leaf(g, "x", OB_TYPE_F32, 2, nx, xs));
    char err[256] = "";
    ob_status st = run_on(be, g, o, y, err, sizeof(err));
    CHECKF(st == OB_OK, "deterministic matmul %s T=%lld: %s", ob_type_name(t), (long long)T, err);
    ob_graph_free(g);
    free(xs);
    return st;
}

/* A token's output row is the same bits in a batch of 40, alone, among 3 others of the
 * batch, and in batches of 8 and 9 (across matvec's token chunks), on one kernel for every
 * T: the int8 matvec for its weight types, matvec.comp for the others (ONEBIT_VK_Q8=0: for
 * all), the tiled shader with ONEBIT_VK_NO_MATVEC=1. The 40-token result is also checked
 * against the reference. Then the flag off again: one token takes its own pipelines. */
void test_det_matmul(void) {
    static const ob_type types[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_Q4_0, OB_TYPE_Q5_K, OB_TYPE_Q4_K,
                                    OB_TYPE_Q6_K, OB_TYPE_Q8_0, OB_TYPE_Q1_0, OB_TYPE_TQ2_0};
    static const char *const names[] = {"default", "ONEBIT_VK_Q8=0", "ONEBIT_VK_NO_MATVEC=1"};
    char err[256] = "";
    ob_backend *bes[3] = {ob_backend_vulkan_new(0, false, err, sizeof(err)), backend_with("ONEBIT_VK_Q8", "0"),
                          backend_with("ONEBIT_VK_NO_MATVEC", "1")};
    CHECKF(bes[0] != NULL, "deterministic backend: %s", err);
    const bool keep_mw = g_model_weights;
    g_model_weights = true; /* repacked as a model's weights are */
    const int64_t K = 768, N = 70, T = 40;
    static const int one[3] = {0, 8, 39}, three[3] = {5, 17, 33};
    int all[40], eight[8], nine[9];
    for (int i = 0; i < 40; i++) all[i] = i;
    for (int i = 0; i < 8; i++) eight[i] = 8 + i;
    for (int i = 0; i < 9; i++) nine[i] = 31 + i;
    float *y40 = malloc(sizeof(float) * (size_t)(N * T)), *y = malloc(sizeof(float) * (size_t)(N * T));
    for (int b = 0; b < 3; b++) {
        if (!bes[b]) continue;
        bes[b]->deterministic = true;
        const ob_vk *vk = bes[b]->ctx;
        for (size_t ti = 0; ti < OB_ARRAY_LEN(types); ti++) {
            const ob_type t = types[ti];
            void *w = rand_typed(t, K, N, 1.0f);
            float *x = rand_f32(K * T, 1.0f);
            const bool int8 = vk->q8 && (t == OB_TYPE_Q4_K || t == OB_TYPE_Q6_K || t == OB_TYPE_Q8_0 ||
                                         t == OB_TYPE_Q1_0 || t == OB_TYPE_TQ2_0);
            const ob_vk_shader sh = vk->no_matvec ? OB_VK_SH_MATMUL : int8 ? OB_VK_SH_MATVEC_Q8 : OB_VK_SH_MATVEC;
            char what[96];
            snprintf(what, sizeof(what), "deterministic matmul %s (%s)", ob_type_name(t), names[b]);
            if (b == 0) {
                int64_t nw[2] = {K, N}, nx[2] = {K, T};
                ob_graph *g = ob_graph_new(4);
                ob_tensor *o = ob_matmul(g, ob_leaf(g, "w", t, 2, nw, w), ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x));
                check_on(bes[b], g, o, (int8 ? 3e-2 : 2e-4) * sqrt((double)K), 1e-4, what);
                ob_graph_free(g);
            }
            if (det_matmul(bes[b], t, w, K, N, x, all, T, y40)) { free(w); free(x); continue; }
            CHECKF(det_listed(bes[b], sh), "%s T=40: shader %u", what, vk->n_prev ? vk->prev[vk->n_prev - 1].sh : 99u);
            const struct { const int *rows; int64_t n; } sel[] = {{one, 1}, {one + 1, 1}, {one + 2, 1}, {three, 3},
                                                                 {eight, 8}, {nine, 9}};
            for (size_t k = 0; k < OB_ARRAY_LEN(sel); k++) {
                if (det_matmul(bes[b], t, w, K, N, x, sel[k].rows, sel[k].n, y)) continue;
                CHECKF(det_listed(bes[b], sh), "%s T=%lld: shader %u", what, (long long)sel[k].n,
                       vk->n_prev ? vk->prev[vk->n_prev - 1].sh : 99u);
                const int bad = det_rows_differ(y, y40, sel[k].rows, sel[k].n, N);
                CHECKF(bad == 0, "%s: %d of %lld rows at T=%lld differ from T=40", what, bad, (long long)sel[k].n,
                       (long long)sel[k].n);
            }
            free(w);
            free(x);
        }
    }
    /* the flag off again: the pipelines are rebuilt, and one token takes the one-token path */
    if (bes[0] && ((ob_vk *)bes[0]->ctx)->q8) {
        bes[0]->deterministic = false;
        void *w = rand_typed(OB_TYPE_Q4_K, K, N, 1.0f);
        float *x = rand_f32(K, 1.0f);
        if (!det_matmul(bes[0], OB_TYPE_Q4_K, w, K, N, x, one, 1, y)) {
            const ob_vk *vk = bes[0]->ctx;
            const uint32_t s = vk->n_prev ? vk->prev[vk->n_prev - 1].sh : 99u;
            CHECKF(!vk->det && s >= OB_VK_SH_MATVEC_Q8_1 && s <= OB_VK_SH_MATVEC_Q8_1R1, "flag off: shader %u", s);
        }
        free(w);
        free(x);
    }
    g_model_weights = keep_mw;
    free(y40);
    free(y);
    for (int b = 0; b < 3; b++)
        if (bes[b]) ob_backend_free(bes[b]);
}

/* ATTENTION of the T tokens rows[] (their q, positions, sequences) over fixed caches on be:
 * y [T][hd * H]; the last graph's dispatch count in *nd and whether its last dispatch
 * waited on a barrier in *bar. */
typedef struct det_attn {
    ob_type kv;
    int hd, H, n_kv, cps, window;
    void *kc, *vc;
    float *q;
    int32_t *pos, *seq;
} det_attn;
static ob_status det_attention(ob_backend *be, const det_attn *a, const int *rows, int64_t T, float *y) {
    const int64_t qr = (int64_t)a->hd * a->H, row = (int64_t)a->hd * a->n_kv, cells = (int64_t)a->cps * 3;
    float *q = malloc(sizeof(float) * (size_t)(qr * T));
    int32_t pos[40], seq[40];
    for (int64_t i = 0; i < T; i++) {
        memcpy(q + i * qr, a->q + (int64_t)rows[i] * qr, sizeof(float) * (size_t)qr);
        pos[i] = a->pos[rows[i]];
        seq[i] = a->seq[rows[i]];
    }
    float tok = 0;
    ob_graph *g = ob_graph_new(16);
    int64_t nq[3] = {a->hd, a->H, T}, nc[2] = {row, cells}, nt[1] = {T}, n1[1] = {1};
    ob_tensor *o = ob_attention(g, ob_leaf(g, "q", OB_TYPE_F32, 3, nq, q), ob_leaf(g, "k", a->kv, 2, nc, a->kc),
                                ob_leaf(g, "v", a->kv, 2, nc, a->vc), ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos),
                                ob_leaf(g, "seq", OB_TYPE_I32, 1, nt, seq), ob_leaf(g, "tok", OB_TYPE_F32, 1, n1, &tok),
                                a->cps, a->n_kv, a->window, 1, 1.0f / sqrtf((float)a->hd), 0.0f);
    char err[256] = "";
    ob_status st = run_on(be, g, o, y, err, sizeof(err));
    CHECKF(st == OB_OK, "deterministic attention T=%lld: %s", (long long)T, err);
    ob_graph_free(g);
    free(q);
    return st;
}

/* Causal attention: a token's output is the same bits in a batch of 40 tokens of three
 * sequences, alone, among 3 and among 9. attn_dec.comp with splits (every split walking
 * its chunks, and with split 0 walking a few alone), its 40 tokens in chunks of 32 where
 * 32 kv heads take the tickets; attention.comp without splits where attn_dec.comp does not
 * apply (head size 12). */
void test_det_attention(void) {
    static const struct { ob_type kv; int hd, H, n_kv, window, dec; } cases[] = {
        {OB_TYPE_F16, 32, 32, 32, 0, 1}, {OB_TYPE_Q8_0, 64, 8, 2, 0, 1}, {OB_TYPE_F32, 32, 4, 2, 100, 1},
        {OB_TYPE_F32, 12, 4, 2, 0, 0},
    };
    char err[256] = "";
    ob_backend *be = ob_backend_vulkan_new(0, false, err, sizeof(err));
    CHECKF(be != NULL, "deterministic backend: %s", err);
    if (!be) return;
    be->deterministic = true;
    ob_vk *vk = be->ctx;
    static const int one[3] = {0, 21, 39}, three[3] = {4, 18, 37};
    int all[40], nine[9];
    for (int i = 0; i < 40; i++) all[i] = i;
    for (int i = 0; i < 9; i++) nine[i] = 3 * i + 7;
    for (int solo = 0; solo < 2; solo++)
        for (size_t c = 0; c < OB_ARRAY_LEN(cases); c++) {
            vk->attn_solo = solo ? 4u : 0u;
            det_attn a = {cases[c].kv, cases[c].hd, cases[c].H, cases[c].n_kv, 600, cases[c].window, NULL, NULL, NULL,
                          NULL, NULL};
            const int64_t qr = (int64_t)a.hd * a.H, row = (int64_t)a.hd * a.n_kv, T = 40;
            a.kc = rand_typed(a.kv, row, (int64_t)a.cps * 3, 1.0f);
            a.vc = rand_typed(a.kv, row, (int64_t)a.cps * 3, 1.0f);
            a.q = rand_f32(qr * T, 1.0f);
            int32_t pos[40], seq[40];
            for (int i = 0; i < 40; i++) {
                seq[i] = i % 3;
                pos[i] = (int32_t)((i * 157 + 23) % a.cps);
            }
            a.pos = pos;
            a.seq = seq;
            float *y40 = malloc(sizeof(float) * (size_t)(qr * T)), *y = malloc(sizeof(float) * (size_t)(qr * T));
            char what[96];
            snprintf(what, sizeof(what), "deterministic attention %s hd %d heads %d/%d window %d solo %d",
                     ob_type_name(a.kv), a.hd, a.H, a.n_kv, a.window, solo);
            if (!det_attention(be, &a, all, T, y40)) {
                /* attn_dec.comp in chunks of tokens whose tickets fit (a barrier between), or
                 * one attention.comp dispatch with one split */
                const int64_t chunks = cases[c].dec && a.n_kv * (a.H / a.n_kv) > 25 ? 2 : 1;
                const ob_vk_shader sh = cases[c].dec ? OB_VK_SH_ATTN_DEC_G1 : OB_VK_SH_ATTENTION;
                bool ok = vk->n_prev == chunks && (chunks == 1 || vk->prev[1].barrier);
                for (int64_t i = 0; i < vk->n_prev && ok; i++)
                    ok = vk->prev[i].sh == (uint32_t)sh && (cases[c].dec ? (vk->prev[i].pc.u[6] >> 8 & 255u) > 1u
                                                                         : (vk->prev[i].pc.u[6] >> 8) <= 1u);
                CHECKF(ok, "%s: %lld dispatches of shader %u", what, (long long)vk->n_prev,
                       vk->n_prev ? vk->prev[0].sh : 99u);
            }
            const struct { const int *rows; int64_t n; } sel[] = {{one, 1}, {one + 1, 1}, {one + 2, 1}, {three, 3},
                                                                 {nine, 9}};
            for (size_t k = 0; k < OB_ARRAY_LEN(sel); k++) {
                if (det_attention(be, &a, sel[k].rows, sel[k].n, y)) continue;
                const int bad = det_rows_differ(y, y40, sel[k].rows, sel[k].n, qr);
                CHECKF(bad == 0, "%s: %d of %lld tokens at T=%lld differ from T=40", what, bad, (long long)sel[k].n,
                       (long long)sel[k].n);
            }
            free(y40);
            free(y);
            free(a.kc);
            free(a.vc);
            free(a.q);
        }
    ob_backend_free(be);
}

/* ---- mixture of experts (vk_moe.c) -------------------------------------------------------- */

/* Qwen3-MoE's feed-forward over the T rows rows[] of h on be: router F32 [K, E] and softmax
 * top-k gate, gate/up experts [K, F, E] and down [F, K, E] of type t, SwiGLU, sum: y [T][K]. */
typedef struct det_moe { ob_type t; int64_t K, F, E, k; void *router, *gate, *up, *down; float *h; } det_moe;

static ob_status det_moe_run(ob_backend *be, const det_moe *m, const int *rows, int64_t T, float *y) {
    float *hs = malloc(sizeof(float) * (size_t)(m->K * T));
    for (int64_t i = 0; i < T; i++) memcpy(hs + i * m->K, m->h + (int64_t)rows[i] * m->K, sizeof(float) * (size_t)m->K);
    const int64_t nh[2] = {m->K, T}, nr[2] = {m->K, m->E}, nu[3] = {m->K, m->F, m->E}, nd[3] = {m->F, m->K, m->E};
    ob_graph *g = ob_graph_new(16);
    ob_tensor *h = ob_leaf(g, "h", OB_TYPE_F32, 2, nh, hs);
    ob_tensor *gate = ob_moe_gate(g, ob_matmul(g, ob_leaf(g, "router", OB_TYPE_F32, 2, nr, m->router), h), NULL,
                                  (int)m->k, OB_MOE_SOFTMAX, true, 1.0f);
    ob_tensor *a = ob_glu(g, ob_matmul_id(g, ob_leaf(g, "gate_exps", m->t, 3, nu, m->gate), h, gate),
                          ob_matmul_id(g, ob_leaf(g, "up_exps", m->t, 3, nu, m->up), h, gate), OB_ACT_SILU);
    ob_tensor *o = ob_moe_sum(g, ob_matmul_id(g, ob_leaf(g, "down_exps", m->t, 3, nd, m->down), a, gate), gate);
    char err[256] = "";
    ob_status st = run_on(be, g, o, y, err, sizeof(err));
    CHECKF(st == OB_OK, "deterministic moe %s T=%lld: %s", ob_type_name(m->t), (long long)T, err);
    ob_graph_free(g);
    free(hs);
    return st;
}

/* Batch-invariant mode: a token's MoE output is the same bits in a batch of 40, alone and
 * among others, over weight types of matvec.glsl's streaming path (Q4_K; Q6_K repacked, as
 * a model's weights are), its chunk path (Q5_K) and plain rows (F16), each MoE op on its
 * own kernel. Then MATMUL_ID reads only the chosen experts: every other expert's bytes
 * are 0xff (NaN weights in F32, NaN scales in Q4_K) and the output still matches. */
void test_det_moe(void) {
    static const ob_type types[] = {OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_Q5_K, OB_TYPE_F16};
    static const int one[2] = {0, 39}, three[3] = {5, 17, 33};
    char err[256] = "";
    ob_backend *be = ob_backend_vulkan_new(0, false, err, sizeof(err));
    CHECKF(be != NULL, "moe backend: %s", err);
    if (!be) return;
    be->deterministic = true;
    const bool keep_mw = g_model_weights;
    g_model_weights = true;
    det_moe m = {OB_TYPE_F32, 2048, 256, 8, 2, rand_typed(OB_TYPE_F32, 2048, 8, 0.3f), NULL, NULL, NULL, NULL};
    int all[40];
    for (int i = 0; i < 40; i++) all[i] = i;
    m.h = rand_f32(m.K * 40, 1.0f);
    float *y40 = malloc(sizeof(float) * (size_t)(m.K * 40)), *y = malloc(sizeof(float) * (size_t)(m.K * 40));
    for (size_t ti = 0; ti < OB_ARRAY_LEN(types); ti++) {
        m.t = types[ti];
        m.gate = rand_typed(m.t, m.K, m.F * m.E, 0.1f);
        m.up = rand_typed(m.t, m.K, m.F * m.E, 0.1f);
        m.down = rand_typed(m.t, m.F, m.K * m.E, 0.1f);
        if (!det_moe_run(be, &m, all, 40, y40)) {
            const ob_vk *vk = be->ctx;
            int nid = 0;
            for (int64_t i = 0; i < vk->n_prev; i++) nid += vk->prev[i].sh == (uint32_t)OB_VK_SH_MATMUL_ID;
            CHECKF(nid == 3, "deterministic moe %s: %d MATMUL_ID dispatches", ob_type_name(m.t), nid);
            const struct { const int *rows; int64_t n; } sel[] = {{one, 1}, {one + 1, 1}, {three, 3}};
            for (size_t k = 0; k < OB_ARRAY_LEN(sel); k++) {
                if (det_moe_run(be, &m, sel[k].rows, sel[k].n, y)) continue;
                const int bad = det_rows_differ(y, y40, sel[k].rows, sel[k].n, m.K);
                CHECKF(bad == 0, "deterministic moe %s: %d of %lld rows differ from T=40", ob_type_name(m.t), bad,
                       (long long)sel[k].n);
            }
        }
        free(m.gate);
        free(m.up);
        free(m.down);
    }
    g_model_weights = keep_mw;
    ob_backend_free(be);
    free(m.router);
    free(m.h);
    free(y40);
    free(y);
    /* experts 1, 4 and 6 chosen; the other five are 0xff bytes */
    static const float gv[3][4] = {{0.7f, 0.3f, 1, 6}, {0.5f, 0.5f, 6, 4}, {0.9f, 0.1f, 4, 1}};
    static const ob_type ptypes[] = {OB_TYPE_F32, OB_TYPE_Q4_K};
    for (size_t ti = 0; ti < OB_ARRAY_LEN(ptypes); ti++) {
        const ob_type t = ptypes[ti];
        const int64_t K = 256, N = 40, E = 8, nw[3] = {K, N, E}, nx[2] = {K, 3}, ng[2] = {4, 3};
        const size_t eb = ob_row_size(t, K) * (size_t)N;
        char *w = rand_typed(t, K, N * E, 1.0f);
        for (int e = 0; e < E; e++)
            if (e != 1 && e != 4 && e != 6) memset(w + (size_t)e * eb, 0xff, eb);
        float *x = rand_f32(K * 3, 1.0f);
        ob_graph *g = ob_graph_new(4);
        ob_tensor *o = ob_matmul_id(g, ob_leaf(g, "exps", t, 3, nw, w), ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x),
                                    ob_leaf(g, "gate", OB_TYPE_F32, 2, ng, (void *)gv));
        /* (matvec.glsl's f32 bound at K = 256: MATMUL_ID never takes the int8 path) */
        check_graph(g, o, 2e-4 * 16, 1e-4,
                    t == OB_TYPE_F32 ? "matmul_id, unchosen experts NaN (F32)" : "matmul_id, unchosen experts NaN (Q4_K)");
        ob_graph_free(g);
        free(w);
        free(x);
    }
}
