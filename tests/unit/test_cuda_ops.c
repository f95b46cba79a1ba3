/* CUDA backend against the CPU reference: every op (and every weight type for MATMUL and
 * GET_ROWS) on seeded random inputs with poisoned outputs, the CPU fallback and its strict
 * refusal, and the model fixtures end to end (logits within 1e-3 of the CPU backend, same
 * greedy tokens through captured decode steps). Needs a GPU; built only with ONEBIT_CUDA.
 * The matmul groups are in cuda_ops_matmul.c, the shared helpers in cuda_testutil.c. */
#include "testutil.h"
#include "testutil_embed.h"
#include "testutil_sample.h"
#ifndef ONEBIT_CUDA
int main(void) {
    printf("test_cuda_ops: SKIPPED (built without -DONEBIT_CUDA=ON)\n");
    return 77; /* SKIP_RETURN_CODE (CMakeLists.txt): ctest reports it skipped */
}
#else
#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "backend/cuda/cuda_stats.h"
#include "onebit.h"
#include <jansson.h>
#include <math.h>
#include <string.h>
#include "cuda_testutil.h"

/* Residual ADD + RMS_NORM + quantize for the next matvec at every register layout of
 * k_rms_fused4 (1..4 groups of 4 per thread: K = 1024, 5120, 12288, 16384) and past it
 * (K = 20480: the block-loop kernel), with the sum read again later (so the fused launch
 * must store it): CPU reference and the unfused backend. */
static void test_fused_norm_sizes(ob_backend *be, ob_backend *plain) {
    static const int64_t Ks[] = {1024, 5120, 12288, 16384, 20480};
    const int64_t N = 64;
    for (size_t ki = 0; ki < OB_ARRAY_LEN(Ks); ki++)
        for (int T = 1; T <= 3; T += 2) {
            const int64_t K = Ks[ki];
            void *w1 = rand_typed(OB_TYPE_Q8_0, K * N, 0.5f), *w2 = rand_typed(OB_TYPE_Q8_0, N * K, 0.5f);
            float *x = rand_f32(K * T, 1.0f), *r = rand_f32(K * T, 1.0f), *nw = rand_f32(K, 1.0f);
            float *got[2] = {NULL, NULL};
            for (int pass = 0; pass < 2; pass++) {
                ob_graph *g = ob_graph_new(16);
                int64_t nx[2] = {K, T}, nkn[2] = {K, N}, nnk[2] = {N, K}, nk[1] = {K};
                ob_tensor *s1 = ob_add(g, ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x), ob_leaf(g, "r", OB_TYPE_F32, 2, nx, r));
                ob_tensor *h = ob_rms_norm(g, s1, ob_leaf(g, "nw", OB_TYPE_F32, 1, nk, nw), 1e-6f);
                ob_tensor *y = ob_matmul(g, ob_leaf(g, "w1", OB_TYPE_Q8_0, 2, nkn, w1), h);
                ob_tensor *z = ob_matmul(g, ob_leaf(g, "w2", OB_TYPE_Q8_0, 2, nnk, w2), y);
                ob_tensor *out = ob_add(g, s1, z);
                char what[80];
                snprintf(what, sizeof(what), "add+norm+matvec K=%lld T=%d %s", (long long)K, T, pass ? "unfused" : "fused");
                run_both_keep(pass ? plain : be, g, out, NULL, 5e-2, what, &got[pass]);
                ob_graph_free(g);
            }
            if (got[0] && got[1]) {
                double e = rel_err(got[0], got[1], K * T);
                CHECKF(e <= 1e-5, "add+norm+matvec K=%lld T=%d: fused vs unfused rel err %.3g", (long long)K, T, e);
            }
            free(got[0]); free(got[1]); free(x); free(r); free(nw); free(w1); free(w2);
        }
}

/* The node chains the backend fuses in decode (residual ADD + RMS_NORM + quantize, RMS_NORM
 * + quantize, GLU + quantize, matvecs sharing x in one launch, a type change ending a
 * group), against the CPU and against the same backend with fusion off (ONEBIT_CUDA_FUSE=0):
 * fused kernels repeat the unfused float operations, so the two must agree to rounding. */
static void test_fused(ob_backend *be, ob_backend *plain) {
    const int64_t K = 1024, F = 512;
    const int Ts[] = {1, 3, 8};
    void *wa = rand_typed(OB_TYPE_Q4_K, K * F, 0.5f), *wb = rand_typed(OB_TYPE_Q4_K, K * F, 0.5f);
    void *wc = rand_typed(OB_TYPE_Q6_K, K * F, 0.5f), *wd = rand_typed(OB_TYPE_Q6_K, F * K, 0.5f);
    void *wy = rand_typed(OB_TYPE_Q8_0, K * F, 0.5f);
    float *n1 = rand_f32(K, 1.0f), *n2 = rand_f32(K, 1.0f);
    for (size_t k = 0; k < OB_ARRAY_LEN(Ts); k++) {
        const int T = Ts[k];
        float *x = rand_f32(K * T, 1.0f), *r = rand_f32(K * T, 1.0f);
        float *got[2] = {NULL, NULL};
        for (int pass = 0; pass < 2; pass++) {
            ob_graph *g = ob_graph_new(32);
            int64_t nx[2] = {K, T}, nkf[2] = {K, F}, nfk[2] = {F, K}, nk[1] = {K};
            ob_tensor *X = ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x), *R = ob_leaf(g, "r", OB_TYPE_F32, 2, nx, r);
            ob_tensor *s1 = ob_add(g, X, R);
            ob_tensor *h = ob_rms_norm(g, s1, ob_leaf(g, "n1", OB_TYPE_F32, 1, nk, n1), 1e-6f);
            ob_tensor *a = ob_matmul(g, ob_leaf(g, "wa", OB_TYPE_Q4_K, 2, nkf, wa), h);
            ob_tensor *b = ob_matmul(g, ob_leaf(g, "wb", OB_TYPE_Q4_K, 2, nkf, wb), h);
            ob_tensor *c = ob_matmul(g, ob_leaf(g, "wc", OB_TYPE_Q6_K, 2, nkf, wc), h);
            ob_tensor *e = ob_glu(g, a, b, OB_ACT_SILU);
            ob_tensor *d = ob_matmul(g, ob_leaf(g, "wd", OB_TYPE_Q6_K, 2, nfk, wd), e);
            ob_tensor *s2 = ob_add(g, s1, d);
            ob_tensor *h2 = ob_rms_norm(g, s2, ob_leaf(g, "n2", OB_TYPE_F32, 1, nk, n2), 1e-6f);
            ob_tensor *y = ob_matmul(g, ob_leaf(g, "wy", OB_TYPE_Q8_0, 2, nkf, wy), h2);
            ob_tensor *out = ob_add(g, y, c);
            char what[80];
            snprintf(what, sizeof(what), "fused decode chain T=%d %s", T, pass ? "unfused" : "fused");
            run_both_keep(pass ? plain : be, g, out, NULL, 5e-2, what, &got[pass]);
            ob_graph_free(g);
        }
        if (got[0] && got[1]) {
            double e = rel_err(got[0], got[1], F * T);
            CHECKF(e <= 1e-5, "fused decode chain T=%d: fused vs unfused rel err %.3g", T, e);
        }
        free(got[0]); free(got[1]); free(x); free(r);
    }
    free(wa); free(wb); free(wc); free(wd); free(wy); free(n1); free(n2);
    /* Per-head RMS_NORM -> ROPE (q/k norm), both rope modes, partial rotation. */
    for (int mode = 0; mode <= 2; mode += 2) {
        const int64_t hd = 64, H = 3, T = 4;
        float *xq = rand_f32(hd * H * T, 2.0f), *wq = rand_f32(hd, 1.0f), *got[2] = {NULL, NULL};
        int32_t pos[4] = {0, 17, 1000, 30000};
        for (int pass = 0; pass < 2; pass++) {
            ob_graph *g = ob_graph_new(8);
            int64_t nq[3] = {hd, H, T}, np[1] = {T}, nw[1] = {hd};
            ob_tensor *X = ob_leaf(g, "x", OB_TYPE_F32, 3, nq, xq), *P = ob_leaf(g, "pos", OB_TYPE_I32, 1, np, pos);
            ob_tensor *y = ob_rope(g, ob_rms_norm(g, X, ob_leaf(g, "w", OB_TYPE_F32, 1, nw, wq), 1e-6f), P, NULL, 48, mode,
                                   10000.0f, 0.5f, 1.0f);
            run_both_keep(pass ? plain : be, g, y, NULL, 2e-6, mode ? "norm+rope neox" : "norm+rope adjacent", &got[pass]);
            ob_graph_free(g);
        }
        if (got[0] && got[1]) CHECKF(rel_err(got[0], got[1], hd * H * T) <= 1e-6, "norm+rope mode %d: fused vs unfused", mode);
        free(got[0]); free(got[1]); free(xq); free(wq);
    }
    /* Split decode ATTENTION -> int8 matvec of its output (the merge quantizes). */
    for (int T = 1; T <= 2; T++) {
        const int64_t hd = 64, H = 4, n_kv = 2, row = hd * n_kv, cps = 700, N = 96;
        float *q = rand_f32(hd * H * T, 1.0f), *kx = rand_f32(row * T, 1.0f), *vx = rand_f32(row * T, 1.0f);
        void *kc = rand_typed(OB_TYPE_F16, row * cps, 1.0f), *vc = rand_typed(OB_TYPE_F16, row * cps, 1.0f);
        void *wo = rand_typed(OB_TYPE_Q4_K, hd * H * N, 0.5f);
        float *got[2] = {NULL, NULL};
        int32_t pos[2] = {500, 501}, seq[2] = {0, 0};
        for (int pass = 0; pass < 2; pass++) {
            ob_graph *g = ob_graph_new(16);
            int64_t nq[3] = {hd, H, T}, nk[2] = {row, T}, nc[2] = {row, cps}, nt[1] = {T}, nw[2] = {hd * H, N};
            ob_tensor *Q = ob_leaf(g, "q", OB_TYPE_F32, 3, nq, q), *Kx = ob_leaf(g, "k", OB_TYPE_F32, 2, nk, kx);
            ob_tensor *Vx = ob_leaf(g, "v", OB_TYPE_F32, 2, nk, vx);
            ob_tensor *KC = ob_leaf(g, "kc", OB_TYPE_F16, 2, nc, kc), *VC = ob_leaf(g, "vc", OB_TYPE_F16, 2, nc, vc);
            ob_tensor *P = ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos), *S = ob_leaf(g, "seq", OB_TYPE_I32, 1, nt, seq);
            ob_tensor *sk = ob_kv_store(g, Kx, KC, P, S, cps), *sv = ob_kv_store(g, Vx, VC, P, S, cps);
            ob_tensor *a = ob_attention(g, Q, KC, VC, P, S, ob_add(g, sk, sv), cps, (int)n_kv, 0, true, 0.125f, 0);
            ob_tensor *y = ob_matmul(g, ob_leaf(g, "wo", OB_TYPE_Q4_K, 2, nw, wo), a);
            char what[80];
            snprintf(what, sizeof(what), "attention -> int8 matvec T=%d %s", T, pass ? "unfused" : "fused");
            run_both_keep(pass ? plain : be, g, y, NULL, 5e-2, what, &got[pass]);
            ob_graph_free(g);
        }
        if (got[0] && got[1]) CHECKF(rel_err(got[0], got[1], N * T) <= 1e-5, "attention -> matvec T=%d: fused vs unfused", T);
        free(got[0]); free(got[1]); free(q); free(kx); free(vx); free(kc); free(vc); free(wo);
    }
}

/* A decode layer's q/k/v tail: [RMS_NORM ->] ROPE of q and of k, KV_STORE of both, then
 * the split decode ATTENTION, with q, k, v made by bias ADDs so the planner places (and
 * reuses) their bytes as in a model. The fused backend must take the one-launch path
 * (OB_CU_FUSE_QKV, checked through its counter) and the last-block merge
 * (OB_CU_FUSE_ATTN_ONE), and agree with the CPU and, to rounding, with fusion off. */
static void qkv_case_x(ob_backend *be, ob_backend *plain, bool qk_norm, int64_t hd, ob_type kt, ob_type vt, int T, int mode,
                       int extra, int yarn) {
    const bool extra_reader = extra == 1; /* 2: the raw k and v are read again after the attention */
    /* yarn: 1, q and k share random frequency factors and an mscale, at positions near 30011
     * (so a cache of 30016 cells a sequence); 2, k's mscale differs from q's; 3, k's factors
     * are another tensor. 2 and 3 still take the one-launch tail but never the fold, whose
     * angles q and k share. */
    const int64_t H = 4, Hk = 2, cps = yarn ? 30016 : 192, cells = 2 * cps, row = hd * Hk;
    float *xq = rand_f32(hd * H * T, 1.0f), *bq = rand_f32(hd * H, 0.5f), *xk = rand_f32(row * T, 1.0f);
    float *bk = rand_f32(row, 0.5f), *xv = rand_f32(row * T, 1.0f), *bv = rand_f32(row, 0.5f);
    float *wq = rand_f32(hd, 1.0f), *wk = rand_f32(hd, 1.0f);
    void *kc = rand_typed(kt, row * cells, 1.0f), *vc = rand_typed(vt, row * cells, 1.0f);
    float *ff = yarn ? rand_factors(hd / 2) : NULL, *ff2 = yarn == 3 ? rand_factors(hd / 2) : NULL;
    const float qms = yarn ? 1.1386f : 1.0f, kms = yarn == 2 ? 1.0f : qms;
    int32_t pos[8], seq[8];
    /* a cache of several splits, so the in-block merge runs */
    for (int t = 0; t < T; t++) {
        seq[t] = t % 2;
        pos[t] = yarn ? 30011 - 7 * (t % 2) - t / 2 : 140 + 7 * (t % 2) + t / 2;
    }
    float *got[2] = {NULL, NULL};
    char what[200];
    /* pass 0: fused, cache K checked; 1: fused, cache V checked; 2: fusion off */
    for (int pass = 0; pass < 3; pass++) {
        ob_backend *b = pass == 2 ? plain : be;
        ob_graph *g = ob_graph_new(40);
        int64_t nq[2] = {hd * H, T}, nk[2] = {row, T}, nbq[1] = {hd * H}, nbk[1] = {row}, nw[1] = {hd};
        int64_t nc[2] = {row, cells}, nt[1] = {T}, q3[3] = {hd, H, T}, k3[3] = {hd, Hk, T}, nf[1] = {hd / 2};
        ob_tensor *q = ob_add(g, ob_leaf(g, "xq", OB_TYPE_F32, 2, nq, xq), ob_leaf(g, "bq", OB_TYPE_F32, 1, nbq, bq));
        ob_tensor *k = ob_add(g, ob_leaf(g, "xk", OB_TYPE_F32, 2, nk, xk), ob_leaf(g, "bk", OB_TYPE_F32, 1, nbk, bk));
        ob_tensor *v = ob_add(g, ob_leaf(g, "xv", OB_TYPE_F32, 2, nk, xv), ob_leaf(g, "bv", OB_TYPE_F32, 1, nbk, bv));
        const ob_tensor *raw[3] = {q, k, v};
        ob_tensor *KC = ob_leaf(g, "kc", kt, 2, nc, kc), *VC = ob_leaf(g, "vc", vt, 2, nc, vc);
        ob_tensor *P = ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos), *S = ob_leaf(g, "seq", OB_TYPE_I32, 1, nt, seq);
        q = ob_view(g, q, 3, q3);
        k = ob_view(g, k, 3, k3);
        if (qk_norm) q = ob_rms_norm(g, q, ob_leaf(g, "wq", OB_TYPE_F32, 1, nw, wq), 1e-6f);
        ob_tensor *qn = q;
        ob_tensor *FQ = ff ? ob_leaf(g, "ff", OB_TYPE_F32, 1, nf, ff) : NULL;
        ob_tensor *FK = ff2 ? ob_leaf(g, "ff2", OB_TYPE_F32, 1, nf, ff2) : FQ;
        q = ob_rope(g, q, P, FQ, (int)hd, mode, 10000.0f, 1.0f, qms);
        if (qk_norm) k = ob_rms_norm(g, k, ob_leaf(g, "wk", OB_TYPE_F32, 1, nw, wk), 1e-6f);
        k = ob_rope(g, k, P, FK, (int)hd, mode, 10000.0f, 1.0f, kms);
        ob_tensor *ks = ob_kv_store(g, k, KC, P, S, (int)cps), *vs = ob_kv_store(g, v, VC, P, S, (int)cps);
        vs->src[4] = ks;
        ob_tensor *a = ob_attention(g, q, KC, VC, P, S, vs, (int)cps, (int)Hk, 0, true, 0.125f, 0), *at = a;
        /* extra_reader: the q norm's output is also read later, so it must be written and
         * the one-launch tail (which keeps it in shared memory) must not be taken */
        if (extra_reader) a = ob_add(g, a, ob_view(g, qn, 2, nq));
        /* read again after the attention, the raw k and v stay live, so its output cannot
         * take their bytes and the fold applies at hd = 64 too */
        if (extra == 2) ob_add(g, (ob_tensor *)raw[1], (ob_tensor *)raw[2]);
        snprintf(what, sizeof(what), "q/k/v tail %s hd=%lld K %s V %s T=%d rope mode %d%s%s (%s, %s cache checked)",
                 qk_norm ? "qwen3 (q/k norm)" : "llama (no norm)", (long long)hd, ob_type_name(kt), ob_type_name(vt), T, mode,
                 extra_reader ? ", q norm read again" : extra == 2 ? ", raw k and v read again" : "",
                 yarn == 1 ? ", factors+mscale" : yarn == 2 ? ", factors, k mscale apart" : yarn == 3 ? ", k factors apart" : "",
                 pass == 2 ? "unfused" : "fused", pass == 1 ? "V" : "K");
        const int64_t qkv0 = ob_backend_cuda_stat(b, OB_CU_STAT_QKV), one0 = ob_backend_cuda_stat(b, OB_CU_STAT_ATTN_ONE);
        const int64_t fold0 = ob_backend_cuda_stat(b, OB_CU_STAT_ATTN_FOLD);
        /* A Q8_0 K cache of normed rows: the GPU's rsqrtf may move a block's f16 scale by an
         * ulp against the CPU's, so that cache is compared through the attention output
         * (looser) and, exactly, fused against unfused. */
        const bool k8 = kt == OB_TYPE_Q8_0 && qk_norm;
        ob_tensor *wr = pass == 1 ? VC : k8 ? NULL : KC;
        g_cache_tol = qk_norm && kt == OB_TYPE_F16 && pass != 1 ? 5e-4 : 1e-6; /* an f16 ulp, 2^-11 */
        run_both_keep(b, g, a, wr, k8 ? 1e-3 : 2e-5, what, pass == 1 ? NULL : &got[pass ? 1 : 0]);
        g_cache_tol = 1e-6;
        const int64_t dq = ob_backend_cuda_stat(b, OB_CU_STAT_QKV) - qkv0, d1 = ob_backend_cuda_stat(b, OB_CU_STAT_ATTN_ONE) - one0;
        const int wq_ = pass == 2 || extra_reader ? 0 : 1;
        CHECKF(dq == wq_, "%s: %lld one-launch q/k/v tails, want %d", what, (long long)dq, wq_);
        CHECKF(d1 == (pass == 2 ? 0 : 1), "%s: %lld last-block attention merges, want %d", what, (long long)d1, pass == 2 ? 0 : 1);
        /* One token over f16 caches: the tail is folded into the attention launch itself,
         * unless the planner put the attention's output over the raw k or v (freed after
         * their stores; at hd = 64 the output takes v's bytes), or over part of the raw q. */
        const int64_t df = ob_backend_cuda_stat(b, OB_CU_STAT_ATTN_FOLD) - fold0;
        bool apart = true;
        for (int r = 0; r < 3; r++) {
            const size_t o0 = at->offset, o1 = o0 + ob_nbytes(at), r0 = raw[r]->offset, r1 = r0 + ob_nbytes(raw[r]);
            const bool same = r == 0 && o0 == r0 && o1 == r1;
            if (!same && o0 < r1 && r0 < o1) apart = false;
        }
        const int wf = wq_ && T == 1 && kt == OB_TYPE_F16 && vt == OB_TYPE_F16 && apart && yarn < 2 ? 1 : 0;
        if (pass == 0 && T == 1 && kt == OB_TYPE_F16 && vt == OB_TYPE_F16 && !extra_reader)
            printf("q/k/v tail hd=%lld: attention output at %zu, raw q/k/v at %zu/%zu/%zu: fold %s\n", (long long)hd, at->offset,
                   raw[0]->offset, raw[1]->offset, raw[2]->offset, apart ? "expected" : "not allowed");
        CHECKF(df == wf, "%s: %lld q/k/v tails folded into the attention, want %d", what, (long long)df, wf);
        printf("checked %s: vs CPU, fused launches q/k/v %lld (folded into the attention %lld), attention merge-in-block %lld\n",
               what, (long long)dq, (long long)df, (long long)d1);
        ob_graph_free(g);
    }
    if (got[0] && got[1]) {
        /* k_qkv repeats the unfused float operations; the fold into the attention sums the
         * norm's squares in another order (an ulp, and at times an f16 rounding of K) */
        const bool fold = qk_norm && T == 1 && kt == OB_TYPE_F16 && vt == OB_TYPE_F16 && !extra_reader && yarn < 2;
        const double e = rel_err(got[0], got[1], hd * H * T);
        CHECKF(e <= (fold ? 1e-4 : 1e-6), "q/k/v tail norm=%d hd=%lld T=%d: fused vs unfused rel err %.3g", qk_norm, (long long)hd, T, e);
    }
    free(got[0]); free(got[1]);
    free(xq); free(bq); free(xk); free(bk); free(xv); free(bv); free(wq); free(wk); free(kc); free(vc); free(ff); free(ff2);
}

static void qkv_case(ob_backend *be, ob_backend *plain, bool qk_norm, int64_t hd, ob_type kt, ob_type vt, int T, int mode) {
    qkv_case_x(be, plain, qk_norm, hd, kt, vt, T, mode, 0, 0);
}

/* The split decode attention's arrival counters must be back at zero after every launch:
 * the same step computed five times (the second is captured, the rest replay the CUDA
 * graph) gives the CPU's output every time. */
static void attn_replay_case(ob_backend *be, ob_type kt, int T, int cps, int p0) {
    const int64_t hd = 64, H = 8, n_kv = 2, row = hd * n_kv;
    float *q = rand_f32(hd * H * T, 1.0f);
    void *kc = rand_typed(kt, row * cps, 1.0f), *vc = rand_typed(OB_TYPE_F16, row * cps, 1.0f);
    int32_t pos[8], seq[8];
    for (int t = 0; t < T; t++) { pos[t] = p0 + t; seq[t] = 0; }
    ob_graph *g = ob_graph_new(16);
    int64_t nq[3] = {hd, H, T}, nc[2] = {row, cps}, nt[1] = {T};
    ob_tensor *Q = ob_leaf(g, "q", OB_TYPE_F32, 3, nq, q);
    ob_tensor *KC = ob_leaf(g, "kc", kt, 2, nc, kc), *VC = ob_leaf(g, "vc", OB_TYPE_F16, 2, nc, vc);
    ob_tensor *P = ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos), *S = ob_leaf(g, "seq", OB_TYPE_I32, 1, nt, seq);
    ob_tensor *y = ob_attention(g, Q, KC, VC, P, S, NULL, cps, (int)n_kv, 0, true, 0.125f, 0);
    ob_graph_plan(g);
    void *hs = malloc(g->scratch_size + 64);
    ob_graph_bind(g, hs);
    for (int64_t i = 0; i < g->n; i++)
        if (g->nodes[i].op != OB_OP_LEAF && g->nodes[i].op != OB_OP_VIEW) ob_cpu_ref_op(&g->nodes[i]);
    const int64_t ny = hd * H * T;
    float *ref = malloc(sizeof(float) * (size_t)ny), *got = malloc(sizeof(float) * (size_t)ny);
    memcpy(ref, y->data, sizeof(float) * (size_t)ny);
    void *host[16] = {0}, *dev[16] = {0};
    for (int64_t i = 0; i < g->n && i < 16; i++) {
        ob_tensor *t = &g->nodes[i];
        if (t->op != OB_OP_LEAF) continue;
        host[i] = t->data;
        dev[i] = be->iface->alloc(be, ob_nbytes(t));
        be->iface->upload(be, dev[i], t->data, ob_nbytes(t));
        t->data = dev[i];
    }
    void *ds = be->iface->alloc(be, g->scratch_size + 64);
    ob_graph_bind(g, ds);
    const int64_t one0 = ob_backend_cuda_stat(be, OB_CU_STAT_ATTN_ONE);
    char err[256] = {0};
    memset(hs, 0xff, sizeof(float) * (size_t)ny); /* poison: NaN */
    for (int rep = 0; rep < 5; rep++) {
        /* the output is poisoned before every run: a merge that did not happen shows */
        ob_status st = be->iface->upload(be, y->data, hs, sizeof(float) * (size_t)ny);
        if (!st) st = be->iface->compute(be, g, err, sizeof(err));
        if (!st) st = be->iface->download(be, got, y->data, sizeof(float) * (size_t)ny);
        const double e = st ? INFINITY : rel_err(got, ref, ny);
        CHECKF(!st && e <= 2e-5, "attention replay K %s T=%d cells=%d pos0=%d run %d: %s rel err %.3g", ob_type_name(kt), T, cps, p0,
               rep, st ? err : "", e);
    }
    const int64_t d1 = ob_backend_cuda_stat(be, OB_CU_STAT_ATTN_ONE) - one0;
    CHECKF(d1 >= 1, "attention replay K %s T=%d: merge-in-block launches %lld, want >= 1", ob_type_name(kt), T, (long long)d1);
    printf("checked attention replay K %s T=%d cells=%d pos0=%d: 5 runs (captured, replayed) vs CPU, merge-in-block enqueued %lld\n",
           ob_type_name(kt), T, cps, p0, (long long)d1);
    for (int64_t i = 0; i < g->n && i < 16; i++)
        if (dev[i]) { be->iface->free_buf(be, dev[i]); g->nodes[i].data = host[i]; }
    be->iface->free_buf(be, ds);
    ob_graph_free(g);
    free(hs); free(ref); free(got); free(q); free(kc); free(vc);
}

static void test_fused_decode(ob_backend *be, ob_backend *plain) {
    const ob_type kv[3][2] = {{OB_TYPE_F16, OB_TYPE_F16}, {OB_TYPE_Q8_0, OB_TYPE_F32}, {OB_TYPE_F32, OB_TYPE_Q8_0}};
    for (int c = 0; c < 3; c++)
        for (int T = 1; T <= 3; T += 2) {
            qkv_case(be, plain, true, 128, kv[c][0], kv[c][1], T, 2);
            qkv_case(be, plain, false, 64, kv[c][0], kv[c][1], T, 0);
        }
    qkv_case_x(be, plain, true, 128, OB_TYPE_F16, OB_TYPE_F16, 1, 2, 1, 0);
    /* the fold at head size 256 (Gemma 3); at 64 (with a norm and NeoX halves, and without a
     * norm on adjacent pairs) once the output takes raw v's bytes (no fold) and once apart */
    qkv_case(be, plain, true, 256, OB_TYPE_F16, OB_TYPE_F16, 1, 2);
    qkv_case(be, plain, true, 64, OB_TYPE_F16, OB_TYPE_F16, 1, 2);
    qkv_case_x(be, plain, true, 64, OB_TYPE_F16, OB_TYPE_F16, 1, 2, 2, 0);
    qkv_case_x(be, plain, false, 64, OB_TYPE_F16, OB_TYPE_F16, 1, 0, 2, 0);
    attn_replay_case(be, OB_TYPE_F16, 1, 700, 500);
    attn_replay_case(be, OB_TYPE_Q8_0, 2, 4096, 37);
}

/* ROPE with frequency factors and an mscale (YaRN, Llama 3's scaling) in every kernel that
 * rotates: the plain rope, the fused norm+rope, the one-launch q/k/v tail and the tail
 * folded into the decode attention. Its inputs come from a seed of their own, so the
 * tests after it draw what they drew without it. */
static void test_rope_factors(ob_backend *be, ob_backend *plain) {
    const ob_rng saved = g_rng;
    ob_rng_seed(&g_rng, 30011);
    const int64_t hd = 64, H = 3, T = 4;
    int32_t pos[4] = {0, 17, 1000, 30011};
    int64_t nq[3] = {hd, H, T}, np[1] = {T}, nw[1] = {hd};
    /* c: mode (adjacent, NeoX) x {factors + mscale at n_rot 48 and 64, factors alone,
     * mscale alone}; a partial rotation's tail is copied unscaled */
    for (int c = 0; c < 8; c++) {
        const int mode = c % 2 ? 2 : 0, n_rot = c / 2 == 1 ? 64 : 48;
        const bool with_ff = c / 2 != 3;
        const float ms = c / 2 == 2 ? 1.0f : 1.1386f;
        float *x = rand_f32(hd * H * T, 1.0f), *ff = rand_factors(n_rot / 2);
        ob_graph *g = ob_graph_new(8);
        int64_t nf[1] = {n_rot / 2};
        ob_tensor *X = ob_leaf(g, "x", OB_TYPE_F32, 3, nq, x), *P = ob_leaf(g, "pos", OB_TYPE_I32, 1, np, pos);
        ob_tensor *F = with_ff ? ob_leaf(g, "ff", OB_TYPE_F32, 1, nf, ff) : NULL;
        ob_tensor *y = ob_rope(g, X, P, F, n_rot, mode, 10000.0f, 0.5f, ms);
        char what[96];
        snprintf(what, sizeof(what), "rope %s n_rot %d%s mscale %.4g", mode ? "neox" : "adjacent", n_rot,
                 with_ff ? " factors" : "", (double)ms);
        CHECKF(be->iface->supports(be, y), "%s: supported", what);
        run_both(be, g, y, NULL, 1e-6, what);
        ob_graph_free(g);
        free(x); free(ff);
    }
    /* RMS_NORM -> ROPE (q/k norm), fused and not, with factors and mscale */
    for (int mode = 0; mode <= 2; mode += 2) {
        float *xq = rand_f32(hd * H * T, 2.0f), *wq = rand_f32(hd, 1.0f), *ff = rand_factors(24), *got[2] = {NULL, NULL};
        for (int pass = 0; pass < 2; pass++) {
            ob_graph *g = ob_graph_new(8);
            int64_t nf[1] = {24};
            ob_tensor *X = ob_leaf(g, "x", OB_TYPE_F32, 3, nq, xq), *P = ob_leaf(g, "pos", OB_TYPE_I32, 1, np, pos);
            ob_tensor *F = ob_leaf(g, "ff", OB_TYPE_F32, 1, nf, ff);
            ob_tensor *y = ob_rope(g, ob_rms_norm(g, X, ob_leaf(g, "w", OB_TYPE_F32, 1, nw, wq), 1e-6f), P, F, 48, mode,
                                   10000.0f, 0.5f, 1.1386f);
            run_both_keep(pass ? plain : be, g, y, NULL, 2e-6,
                          mode ? "norm+rope neox factors+mscale" : "norm+rope adjacent factors+mscale", &got[pass]);
            ob_graph_free(g);
        }
        if (got[0] && got[1])
            CHECKF(rel_err(got[0], got[1], hd * H * T) <= 1e-6, "norm+rope factors+mscale mode %d: fused vs unfused", mode);
        free(got[0]); free(got[1]); free(xq); free(wq); free(ff);
    }
    /* the q/k/v tail: folded into the attention (one token, f16 caches; NeoX with q/k norm,
     * adjacent pairs without), as one launch (three tokens; a Q8_0 K cache), and refused
     * the fold where q's and k's ropes differ in mscale or in factors */
    qkv_case_x(be, plain, true, 128, OB_TYPE_F16, OB_TYPE_F16, 1, 2, 0, 1);
    qkv_case_x(be, plain, false, 64, OB_TYPE_F16, OB_TYPE_F16, 1, 0, 2, 1);
    qkv_case_x(be, plain, true, 128, OB_TYPE_F16, OB_TYPE_F16, 3, 2, 0, 1);
    qkv_case_x(be, plain, false, 64, OB_TYPE_Q8_0, OB_TYPE_F32, 1, 0, 0, 1);
    qkv_case_x(be, plain, true, 64, OB_TYPE_F16, OB_TYPE_F16, 1, 2, 2, 2);
    qkv_case_x(be, plain, false, 64, OB_TYPE_F16, OB_TYPE_F16, 1, 0, 2, 3);
    g_rng = saved;
}

static void test_elementwise(ob_backend *be) {
    const int64_t n = 300, rows = 5;
    float *a = rand_f32(n * rows, 2.0f), *b = rand_f32(n * rows, 1.0f), *w = rand_f32(n, 1.0f), *bias = rand_f32(n, 1.0f);
    int64_t ne[2] = {n, rows}, ne1[1] = {n};
    /* cases 7 .. 7 + 2 * OB_ACT_COUNT - 1: every activation alone, then as a GLU */
    const int n_act = 2 * (int)OB_ACT_COUNT, n_cases = 8 + n_act;
    for (int c = 0; c < n_cases; c++) {
        ob_graph *g = ob_graph_new(8);
        ob_tensor *A = ob_leaf(g, "a", OB_TYPE_F32, 2, ne, a), *B = ob_leaf(g, "b", OB_TYPE_F32, 2, ne, b);
        ob_tensor *Wt = ob_leaf(g, "w", OB_TYPE_F32, 1, ne1, w), *Bi = ob_leaf(g, "bias", OB_TYPE_F32, 1, ne1, bias);
        ob_tensor *y = NULL;
        switch (c) {
        case 0: y = ob_rms_norm(g, A, Wt, 1e-6f); break;
        case 1: y = ob_rms_norm(g, A, NULL, 1e-5f); break;
        case 2: y = ob_layer_norm(g, A, Wt, Bi, 1e-5f); break;
        case 3: y = ob_add(g, A, B); break;
        case 4: y = ob_mul(g, A, Wt); break;
        case 5: y = ob_add(g, A, Bi); break;
        case 6: y = ob_scale(g, A, 0.37f); break;
        default:
            if (c - 7 < (int)OB_ACT_COUNT) y = ob_act_op(g, A, (ob_act)(c - 7));
            else if (c - 7 < n_act) y = ob_glu(g, A, B, (ob_act)(c - 7 - (int)OB_ACT_COUNT));
            else y = ob_softmax(g, A);
            break;
        }
        CHECKF(be->iface->supports(be, y), "elementwise case %d supported", c);
        char what[64];
        snprintf(what, sizeof(what), "elementwise case %d (%s)", c, ob_op_name(y->op));
        run_both(be, g, y, NULL, 2e-6, what);
        ob_graph_free(g);
    }
    /* ROPE, both modes, partial rotation, long positions. */
    for (int mode = 0; mode <= 2; mode += 2) {
        const int64_t hd = 64, H = 3, T = 4;
        float *x = rand_f32(hd * H * T, 1.0f);
        int32_t pos[4] = {0, 17, 1000, 30000};
        ob_graph *g = ob_graph_new(8);
        int64_t nq[3] = {hd, H, T}, np[1] = {T};
        ob_tensor *X = ob_leaf(g, "x", OB_TYPE_F32, 3, nq, x), *P = ob_leaf(g, "pos", OB_TYPE_I32, 1, np, pos);
        ob_tensor *y = ob_rope(g, X, P, NULL, 48, mode, 10000.0f, 0.5f, 1.0f);
        run_both(be, g, y, NULL, 1e-6, mode ? "rope neox" : "rope adjacent");
        ob_graph_free(g);
        free(x);
    }
    /* CPY: to f16 and q8_0 on the device; to a K-quant only through the fallback. */
    const ob_type dsts[] = {OB_TYPE_F16, OB_TYPE_F32, OB_TYPE_Q8_0};
    for (int c = 0; c < 3; c++) {
        ob_graph *g = ob_graph_new(8);
        int64_t nc[2] = {256, 4};
        float *x = rand_f32(1024, 1.0f);
        ob_tensor *X = ob_leaf(g, "x", OB_TYPE_F32, 2, nc, x);
        ob_tensor *y = ob_cpy(g, X, dsts[c]);
        char what[64];
        snprintf(what, sizeof(what), "cpy f32 -> %s", ob_type_name(dsts[c]));
        run_both(be, g, y, NULL, 0, what);
        ob_graph_free(g);
        free(x);
    }
    free(a); free(b); free(w); free(bias);
}

/* KV_STORE of T new tokens into caches holding random history, then ATTENTION. */
static int g_attn_hd = 64; /* head size of attn_case_at (encoders: 12, 16) */

static void attn_case_at(ob_backend *be, ob_type kt, ob_type vt, int T, int n_seq, int cps, bool causal, int window,
                         float cap, int start) {
    const int64_t hd = g_attn_hd, H = 4, n_kv = 2, row = hd * n_kv, cells = (int64_t)cps * n_seq;
    float *q = rand_f32(hd * H * T, 1.0f), *k = rand_f32(row * T, 1.0f), *v = rand_f32(row * T, 1.0f);
    void *kc = rand_typed(kt, row * cells, 1.0f), *vc = rand_typed(vt, row * cells, 1.0f);
    int32_t pos[64], seq[64];
    for (int t = 0; t < T; t++) {
        seq[t] = t % n_seq;
        pos[t] = causal ? cps - T + t : t / n_seq;  /* decode near the end of the cache */
        if (causal && start >= 0) pos[t] = start + t / n_seq;
    }
    ob_graph *g = ob_graph_new(16);
    int64_t nq[3] = {hd, H, T}, nk[2] = {row, T}, nc[2] = {row, cells}, nt[1] = {T};
    ob_tensor *Q = ob_leaf(g, "q", OB_TYPE_F32, 3, nq, q), *Kx = ob_leaf(g, "k", OB_TYPE_F32, 2, nk, k);
    ob_tensor *Vx = ob_leaf(g, "v", OB_TYPE_F32, 2, nk, v);
    ob_tensor *KC = ob_leaf(g, "kc", kt, 2, nc, kc), *VC = ob_leaf(g, "vc", vt, 2, nc, vc);
    ob_tensor *P = ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos), *S = ob_leaf(g, "seq", OB_TYPE_I32, 1, nt, seq);
    ob_tensor *sk = ob_kv_store(g, Kx, KC, P, S, cps);
    ob_tensor *sv = ob_kv_store(g, Vx, VC, P, S, cps);
    ob_tensor *ord = ob_add(g, sk, sv);
    ob_tensor *y = ob_attention(g, Q, KC, VC, P, S, ord, cps, (int)n_kv, window, causal, 0.125f, cap);
    CHECK(be->iface->supports(be, y) && be->iface->supports(be, sk));
    char what[128];
    snprintf(what, sizeof(what), "attention K %s V %s T=%d seqs=%d cells=%d causal=%d window=%d cap=%g pos0=%d",
             ob_type_name(kt), ob_type_name(vt), T, n_seq, cps, causal, window, cap, pos[0]);
    run_both(be, g, y, KC, 2e-5, what);
    ob_graph_free(g);
    free(q); free(k); free(v); free(kc); free(vc);
}

static void attn_case(ob_backend *be, ob_type kt, ob_type vt, int T, int n_seq, int cps, bool causal, int window,
                      float cap) {
    attn_case_at(be, kt, vt, T, n_seq, cps, causal, window, cap, -1);
}

static void test_attention(ob_backend *be) {
    const ob_type kv[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_Q8_0};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) attn_case(be, kv[a], kv[b], 1, 1, 700, true, 0, 0);
    attn_case(be, OB_TYPE_F16, OB_TYPE_F16, 3, 2, 300, true, 0, 0);       /* split decode, 2 seqs */
    attn_case_at(be, OB_TYPE_F16, OB_TYPE_Q8_0, 16, 16, 96, true, 0, 0, 40); /* split decode, 16 seqs */
    attn_case(be, OB_TYPE_Q8_0, OB_TYPE_F16, 13, 1, 300, true, 0, 0);     /* split, 13 tokens of one seq */
    attn_case(be, OB_TYPE_F32, OB_TYPE_Q8_0, 20, 2, 64, true, 5, 0);      /* prefill, window */
    attn_case(be, OB_TYPE_F32, OB_TYPE_F32, 12, 1, 64, false, 0, 0);      /* encoder */
    attn_case(be, OB_TYPE_F16, OB_TYPE_F32, 12, 2, 64, false, 3, 30.0f);  /* encoder, window, soft-cap */
    attn_case(be, OB_TYPE_F32, OB_TYPE_F32, 2, 1, 1000, true, 100, 20.0f);
    /* small encoder heads (not multiples of 32: element-wise paths), decode and prefill */
    for (int k = 0; k < 2; k++) {
        g_attn_hd = k ? 12 : 16;
        attn_case(be, OB_TYPE_F32, OB_TYPE_F32, 12, 1, 64, false, 0, 0);
        attn_case(be, OB_TYPE_F16, OB_TYPE_F16, 12, 2, 64, false, 0, 0);
        attn_case(be, OB_TYPE_F16, OB_TYPE_F32, 1, 1, 300, true, 0, 0);
        attn_case(be, OB_TYPE_F32, OB_TYPE_F16, 3, 1, 300, true, 0, 0);
    }
    /* f16 caches at head sizes 128 and 256 (k_attn_h: rounds of several cells per warp),
     * deep in the cache, with a window and a soft-cap */
    g_attn_hd = 128;
    attn_case_at(be, OB_TYPE_F16, OB_TYPE_F16, 1, 1, 3000, true, 0, 0, 2500);
    attn_case_at(be, OB_TYPE_F16, OB_TYPE_F16, 1, 1, 1000, true, 300, 20.0f, 900);
    attn_case_at(be, OB_TYPE_F16, OB_TYPE_F16, 3, 3, 500, true, 0, 0, 400);
    attn_case_at(be, OB_TYPE_Q8_0, OB_TYPE_Q8_0, 1, 1, 3000, true, 0, 0, 2500);
    attn_case_at(be, OB_TYPE_Q8_0, OB_TYPE_F16, 5, 5, 600, true, 0, 0, 450);
    g_attn_hd = 256;
    attn_case_at(be, OB_TYPE_F16, OB_TYPE_F16, 1, 1, 2000, true, 0, 0, 1500);
    attn_case_at(be, OB_TYPE_F16, OB_TYPE_Q8_0, 1, 1, 2000, true, 0, 0, 1700);
    g_attn_hd = 64;
    attn_case(be, OB_TYPE_F16, OB_TYPE_F16, 12, 2, 64, false, 0, 0); /* encoder on k_attn_h (added after the session's last GPU run) */
    /* Decode early in a large cache: splits share the few used cells, most get none. */
    for (int p0 = 0; p0 < 40; p0 += 13) attn_case_at(be, OB_TYPE_F16, OB_TYPE_Q8_0, 1, 1, 4096, true, 0, 0, p0);
    attn_case_at(be, OB_TYPE_F32, OB_TYPE_F16, 4, 2, 2048, true, 0, 0, 300);
}

/* ---- prefill attention on tensor cores (src/backend/cuda/op_flash_attn.cu) ----------------
 * Prefill (T >= 32) with F16/Q8_0 caches and head size 64 or 128 takes the mma kernel (unless
 * ONEBIT_CUDA_FA=0; no existing test_attention case qualifies, so those keep 2e-5): q and
 * P are rounded to f16, hence 2e-3 (relative to the largest output) instead of 2e-5. Tokens
 * sit at pos start + t / n_seq of sequence t % n_seq (interleaved); the caches hold random
 * history below start. Each case prints its error. */
typedef struct fa_case {
    int hd, H, n_kv, T, n_seq, cps, start, window;
    ob_type kt, vt;
    bool causal;
    float cap, alibi;
} fa_case;

static void attn_fa_one(ob_backend *be, const fa_case *c) {
    const int64_t hd = c->hd, H = c->H, n_kv = c->n_kv, T = c->T, row = hd * n_kv, cells = (int64_t)c->cps * c->n_seq;
    float *q = rand_f32(hd * H * T, 1.0f), *k = rand_f32(row * T, 1.0f), *v = rand_f32(row * T, 1.0f);
    void *kc = rand_typed(c->kt, row * cells, 1.0f), *vc = rand_typed(c->vt, row * cells, 1.0f);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)T), *seq = malloc(sizeof(int32_t) * (size_t)T);
    for (int64_t t = 0; t < T; t++) {
        seq[t] = (int32_t)(t % c->n_seq);
        pos[t] = (int32_t)(c->start + t / c->n_seq);
    }
    ob_graph *g = ob_graph_new(16);
    int64_t nq[3] = {hd, H, T}, nk[2] = {row, T}, nc[2] = {row, cells}, nt[1] = {T};
    ob_tensor *Q = ob_leaf(g, "q", OB_TYPE_F32, 3, nq, q), *Kx = ob_leaf(g, "k", OB_TYPE_F32, 2, nk, k);
    ob_tensor *Vx = ob_leaf(g, "v", OB_TYPE_F32, 2, nk, v);
    ob_tensor *KC = ob_leaf(g, "kc", c->kt, 2, nc, kc), *VC = ob_leaf(g, "vc", c->vt, 2, nc, vc);
    ob_tensor *P = ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos), *S = ob_leaf(g, "seq", OB_TYPE_I32, 1, nt, seq);
    ob_tensor *sk = ob_kv_store(g, Kx, KC, P, S, c->cps);
    ob_tensor *sv = ob_kv_store(g, Vx, VC, P, S, c->cps);
    ob_tensor *ord = ob_add(g, sk, sv);
    ob_tensor *y = ob_attention(g, Q, KC, VC, P, S, ord, c->cps, (int)n_kv, c->window, c->causal, 0.125f, c->cap);
    y->fp[2] = c->alibi;
    char what[192];
    snprintf(what, sizeof(what), "fa hd=%d H=%d/%d K %s V %s T=%d seqs=%d cps=%d start=%d causal=%d window=%d cap=%g alibi=%g",
             c->hd, c->H, c->n_kv, ob_type_name(c->kt), ob_type_name(c->vt), c->T, c->n_seq, c->cps, c->start, c->causal,
             c->window, c->cap, c->alibi);
    CHECKF(be->iface->supports(be, y) && be->iface->supports(be, sk), "%s: not supported", what);
    float *got = NULL;
    const double tol = 2e-3;
    if (run_both_keep(be, g, y, KC, tol, what, &got) == OB_OK && got) {
        /* the reference once more (leaves are the untouched host copies again) for the printout */
        void *hs = malloc(g->scratch_size + 64);
        ob_graph_bind(g, hs);
        for (int64_t i = 0; i < g->n; i++)
            if (g->nodes[i].op != OB_OP_LEAF && g->nodes[i].op != OB_OP_VIEW) ob_cpu_ref_op(&g->nodes[i]);
        const double e = rel_err(got, (const float *)y->data, hd * H * T);
        printf("%s: rel err %.3g (tol %.0e)%s\n", what, e, tol, e <= tol ? "" : "  FAILED");
        free(hs);
    } else {
        printf("%s: FAILED (see above)\n", what);
    }
    free(got);
    ob_graph_free(g);
    free(q); free(k); free(v); free(kc); free(vc); free(pos); free(seq);
}

static void test_attention_fa(ob_backend *be) {
    const ob_type F16 = OB_TYPE_F16, Q8 = OB_TYPE_Q8_0;
    const fa_case cases[] = {
        /* hd H n_kv T seqs cps start window K V causal cap alibi */
        {64, 4, 2, 33, 1, 64, 0, 0, F16, F16, true, 0, 0},        /* partial row tile, empty history */
        {64, 4, 2, 64, 2, 200, 17, 0, Q8, Q8, true, 0, 0},        /* two interleaved sequences */
        {64, 4, 2, 100, 1, 300, 150, 40, F16, Q8, true, 0, 0},    /* window inside long history */
        {64, 4, 2, 512, 2, 1024, 300, 0, Q8, F16, true, 0, 0},    /* cell gap between sequences */
        {64, 4, 2, 100, 2, 64, 0, 7, F16, F16, false, 0, 0},      /* encoder, window */
        {128, 4, 2, 512, 1, 512, 0, 0, F16, F16, true, 0, 0},     /* prefill from empty */
        {128, 4, 2, 100, 2, 128, 60, 20, Q8, F16, true, 30.0f, 0},/* window + soft-cap */
        {128, 4, 2, 64, 2, 64, 0, 0, F16, Q8, false, 0, 0},       /* encoder */
        {128, 8, 2, 33, 1, 64, 5, 0, F16, F16, true, 0, 8.0f},    /* ALiBi */
        {128, 4, 4, 100, 1, 256, 100, 0, Q8, Q8, true, 0, 0},     /* no GQA */
        {64, 6, 2, 100, 2, 256, 40, 0, Q8, F16, true, 0, 0},      /* 3 heads per kv head: 21 tokens a block */
        {128, 32, 8, 512, 1, 512, 0, 0, F16, F16, true, 0, 0},    /* qwen3-8b prefill shape */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) attn_fa_one(be, &cases[i]);
}

/* ---- encoder ops: POOL, ACT tanh, ALiBi attention (src/backend/cuda/op_encoder.cu) ---------
 * A refusal fails: strict placement of the encoder models needs every one of them. */
static void enc_run(ob_backend *be, ob_graph *g, ob_tensor *y, double tol, const char *what) {
    CHECKF(be->iface->supports(be, y), "%s: not supported", what);
    run_both(be, g, y, NULL, tol, what);
}

static void test_encoder_ops(ob_backend *be) {
    /* POOL: sequences interleaved with shuffled positions (the pick follows pos, not batch
     * order), sequence 3 absent (zeros, also normalised); n spans several column blocks. */
    const int64_t n = 1003, T = 9, S = 4;
    int32_t seq[9] = {1, 0, 2, 1, 0, 0, 2, 1, 0}, pos[9] = {4, 2, 0, 3, 0, 1, 1, 5, 7};
    for (int type = OB_POOL_MEAN; type <= OB_POOL_LAST; type++)
        for (int norm = 0; norm < 2; norm++) {
            float *x = rand_f32(n * T, 1.0f);
            for (int64_t i = 0; i < n * T; i++) x[i] += 0.25f;
            ob_graph *g = ob_graph_new(8);
            int64_t nx[2] = {n, T}, nt[1] = {T};
            ob_tensor *y = ob_pool(g, ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x), ob_leaf(g, "seq", OB_TYPE_I32, 1, nt, seq),
                                   ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos), (ob_pool_type)type, norm, (int)S);
            char what[64];
            snprintf(what, sizeof(what), "pool type %d norm %d", type, norm);
            enc_run(be, g, y, 1e-5, what);
            ob_graph_free(g);
            free(x);
        }
    /* TANH, and GLU with it, over a wide range: saturation, tiny values. */
    for (int glu = 0; glu < 2; glu++) {
        const int64_t m = 300, rows = 5;
        float *a = rand_f32(m * rows, 4.0f), *b = rand_f32(m * rows, 1.0f);
        a[0] = 60.0f; a[1] = -60.0f; a[2] = 1e-4f; a[3] = -0.1f;
        ob_graph *g = ob_graph_new(8);
        int64_t ne[2] = {m, rows};
        ob_tensor *A = ob_leaf(g, "a", OB_TYPE_F32, 2, ne, a);
        ob_tensor *y = glu ? ob_glu(g, A, ob_leaf(g, "b", OB_TYPE_F32, 2, ne, b), OB_ACT_TANH) : ob_act_op(g, A, OB_ACT_TANH);
        enc_run(be, g, y, 2e-6, glu ? "glu tanh" : "act tanh");
        ob_graph_free(g);
        free(a); free(b);
    }
    /* ALiBi attention as jina-bert-v2 runs it (whole sequence, f[2] = max bias 8), and
     * causal: 12 heads take both slope families (n2 = 8), 4/2 is GQA. */
    static const int hs[][2] = {{12, 12}, {4, 2}};
    for (int c = 0; c < 4; c++) {
        const int64_t hd = 64, H = hs[c % 2][0], n_kv = hs[c % 2][1], row = hd * n_kv, cps = 40, n_seq = 2;
        const bool causal = c >= 2;
        const int Tq = causal ? 1 : 12;
        float *q = rand_f32(hd * H * Tq, 1.0f);
        void *kc = rand_typed(OB_TYPE_F16, row * cps * n_seq, 1.0f), *vc = rand_typed(OB_TYPE_F16, row * cps * n_seq, 1.0f);
        int32_t p[12], s[12];
        for (int t = 0; t < Tq; t++) { s[t] = t % 2; p[t] = causal ? 37 : t / 2; }
        float tok = 0;
        ob_graph *g = ob_graph_new(16);
        int64_t nq[3] = {hd, H, Tq}, nc[2] = {row, cps * n_seq}, nt[1] = {Tq}, n1[1] = {1};
        ob_tensor *y = ob_attention(g, ob_leaf(g, "q", OB_TYPE_F32, 3, nq, q), ob_leaf(g, "kc", OB_TYPE_F16, 2, nc, kc),
                                    ob_leaf(g, "vc", OB_TYPE_F16, 2, nc, vc), ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, p),
                                    ob_leaf(g, "seq", OB_TYPE_I32, 1, nt, s), ob_leaf(g, "tok", OB_TYPE_F32, 1, n1, &tok),
                                    (int)cps, (int)n_kv, 0, causal, 0.125f, 0.0f);
        y->fp[2] = 8.0f;
        char what[96];
        snprintf(what, sizeof(what), "attention alibi heads %lld/%lld causal %d", (long long)H, (long long)n_kv, causal);
        enc_run(be, g, y, 2e-5, what);
        ob_graph_free(g);
        free(q); free(kc); free(vc);
    }
}

/* A node without a kernel: refused by supports(), run on the CPU only with the fallback. */
static void test_fallback(void) {
    char err[256];
    ob_backend *strict = ob_backend_cuda_new(0, false, err, sizeof(err));
    ob_backend *loose = ob_backend_cuda_new(0, true, err, sizeof(err));
    CHECK(strict && loose);
    if (!strict || !loose) { ob_backend_free(strict); ob_backend_free(loose); return; }
    ob_graph *g = ob_graph_new(8);
    int64_t nc[2] = {256, 2};
    float *x = rand_f32(512, 1.0f);
    ob_tensor *X = ob_leaf(g, "x", OB_TYPE_F32, 2, nc, x);
    ob_tensor *y = ob_cpy(g, X, OB_TYPE_Q4_K);
    ob_tensor *z = ob_cpy(g, y, OB_TYPE_F32);
    CHECK(!strict->iface->supports(strict, y));
    CHECK(strict->iface->supports(strict, z));
    run_both(loose, g, z, NULL, 0, "fallback cpy f32 -> q4_k -> f32");
    ob_graph_plan(g);
    void *ds = strict->iface->alloc(strict, g->scratch_size);
    void *dx = strict->iface->alloc(strict, 2048);
    X->data = dx;
    ob_graph_bind(g, ds);
    CHECK(strict->iface->compute(strict, g, err, sizeof(err)) == OB_ERR_UNSUPPORTED);
    CHECK(strstr(err, "not supported") != NULL);
    strict->iface->free_buf(strict, ds);
    strict->iface->free_buf(strict, dx);
    ob_graph_free(g);
    free(x);
    ob_backend_free(strict);
    ob_backend_free(loose);
}

/* ---- model fixtures: CUDA against the CPU backend ---------------------------------------- */

static ob_context *open_ctx(const char *path, ob_device_kind dev, ob_kv_type kv, ob_model **m) {
    char err[512];
    ob_model_params mp = ob_model_default_params();
    mp.device = dev;
    mp.n_threads = 2;
    *m = NULL;
    if (ob_model_load(path, &mp, m, err, sizeof(err))) { CHECKF(0, "%s: %s", path, err); return NULL; }
    ob_context_params cp = ob_context_default_params();
    cp.n_ctx = 128;
    cp.type_k = cp.type_v = kv;
    ob_context *c = NULL;
    if (ob_context_new(*m, &cp, &c, err, sizeof(err))) { CHECKF(0, "%s: %s", path, err); return NULL; }
    return c;
}

static void test_fixture(const char *arch, ob_kv_type kv) {
    char path[256], err[512];
    snprintf(path, sizeof(path), "tests/fixtures/models/%s.json", arch);
    json_error_t je;
    json_t *meta = json_load_file(path, 0, &je);
    CHECKF(meta != NULL, "%s", path);
    if (!meta) return;
    int vocab = (int)json_integer_value(json_object_get(meta, "vocab"));
    json_t *jp = json_object_get(meta, "prompt"), *jg = json_object_get(meta, "greedy");
    int np = (int)json_array_size(jp), ng = (int)json_array_size(jg);
    /* A long fixture's prompt (qwen3moe's: 2,048 tokens) runs on its first 64 tokens; its
     * greedy tokens, which follow the whole prompt, are then checked against the CPU only. */
    const bool whole = np <= 256;
    if (!whole) np = 64;
    snprintf(path, sizeof(path), "tests/fixtures/models/%s.gguf", arch);
    ob_model *mc = NULL, *mg = NULL;
    ob_context *cc = open_ctx(path, OB_DEVICE_CPU, kv, &mc), *cg = open_ctx(path, OB_DEVICE_CUDA, kv, &mg);
    if (cc && cg) {
        int32_t tok[256], pos[256], seq[256];
        int8_t want[256];
        for (int i = 0; i < np; i++) {
            tok[i] = (int32_t)json_integer_value(json_array_get(jp, (size_t)i));
            pos[i] = i; seq[i] = 0; want[i] = 1;
        }
        ob_batch b = {np, tok, pos, seq, want};
        ob_status s1 = ob_decode(cc, &b, err, sizeof(err)), s2 = ob_decode(cg, &b, err, sizeof(err));
        CHECKF(!s1 && !s2, "%s: decode: %s", arch, err);
        double worst = 0;
        for (int i = 0; i < np && !s1 && !s2; i++) {
            double e = rel_err(ob_get_logits(cg, i), ob_get_logits(cc, i), vocab);
            if (!(e <= worst)) worst = e;
        }
        CHECKF(worst <= 1e-3, "%s kv=%d prefill: rel err %.3g vs cpu", arch, kv, worst);
        /* Greedy decode on both: the CUDA steps after the first two replay a captured graph. */
        int mism = 0;
        double dworst = 0;
        const float *lc = ob_get_logits(cc, np - 1), *lg = ob_get_logits(cg, np - 1);
        for (int k = 0; k < ng && lc && lg; k++) {
            int bc = 0, bg = 0;
            for (int v = 1; v < vocab; v++) { if (lc[v] > lc[bc]) bc = v; if (lg[v] > lg[bg]) bg = v; }
            if (bc != bg) { mism++; break; }
            if (kv == OB_KV_F32 && whole && bg != (int)json_integer_value(json_array_get(jg, (size_t)k))) { mism++; break; }
            int32_t p = np + k, s = 0, t = bg;
            ob_batch b1 = {1, &t, &p, &s, NULL};
            if (ob_decode(cc, &b1, err, sizeof(err)) || ob_decode(cg, &b1, err, sizeof(err))) { CHECKF(0, "%s", err); break; }
            lc = ob_get_logits(cc, 0);
            lg = ob_get_logits(cg, 0);
            double e = rel_err(lg, lc, vocab);
            if (!(e <= dworst)) dworst = e;
        }
        CHECKF(mism == 0, "%s kv=%d: greedy tokens differ", arch, kv);
        CHECKF(dworst <= 1e-3, "%s kv=%d decode: rel err %.3g vs cpu", arch, kv, dworst);
        printf("%s kv=%d: prefill rel err %.3g, decode rel err %.3g\n", arch, kv, worst, dworst);
    }
    ob_context_free(cc);
    ob_context_free(cg);
    ob_model_free(mc);
    ob_model_free(mg);
    json_decref(meta);
}

/* ---- SAMPLE: exact tokens against the CPU kernel ------------------------------------------ */

/* One SAMPLE graph of R rows of n logits (ob_test_sample_inputs) on be, its tokens against
 * the CPU kernel's. */
static void sample_case(ob_backend *be, int n, int R, const char *what) {
    ob_graph *g = ob_graph_new(8);
    float *lg = malloc(sizeof(float) * (size_t)n * R), *par = malloc(sizeof(float) * (size_t)R * OB_SAMPLE_NPARAM);
    ob_test_sample_inputs(n, R, true, &g_rng, lg, par);
    int64_t nel[2] = {n, R}, nep[2] = {OB_SAMPLE_NPARAM, R};
    ob_tensor *a = ob_leaf(g, "logits", OB_TYPE_F32, 2, nel, lg);
    ob_tensor *pp = ob_leaf(g, "params", OB_TYPE_F32, 2, nep, par);
    ob_tensor *t = ob_sample(g, a, pp);
    CHECKF(be->iface->supports(be, t), "%s: CUDA refuses SAMPLE", what);
    float *got = NULL;
    run_both_keep(be, g, t, NULL, 0, what, &got);
    const int bad = got ? ob_test_sample_check(lg, par, n, R, (const int32_t *)got, "cuda", what) : 0;
    printf("%s: %d/%d rows differ\n", what, bad, R);
    free(got);
    free(lg);
    free(par);
    ob_graph_free(g);
}

static void test_sample_op(ob_backend *be) {
    sample_case(be, 151936, 24, "sample vocab 151936");
    sample_case(be, 1000, 24, "sample vocab 1000 (top_k >= n: all ids)");
    sample_case(be, 4099, 12, "sample vocab 4099");
    sample_case(be, 7, 12, "sample vocab 7");
    /* constant rows: every id ties, so the candidates are the k lowest ids */
    ob_graph *g = ob_graph_new(8);
    const int n = OB_TEST_SAMPLE_CONST_N, R = 4;
    float *lg = malloc(sizeof(float) * (size_t)n * R), par[4 * OB_SAMPLE_NPARAM];
    ob_test_sample_constant(lg, par);
    int64_t nel[2] = {n, R}, nep[2] = {OB_SAMPLE_NPARAM, R};
    ob_tensor *t = ob_sample(g, ob_leaf(g, "logits", OB_TYPE_F32, 2, nel, lg), ob_leaf(g, "params", OB_TYPE_F32, 2, nep, par));
    float *got = NULL;
    run_both_keep(be, g, t, NULL, 0, "sample constant rows", &got);
    if (got) ob_test_sample_constant_check((const int32_t *)got, "cuda");
    free(got);
    free(lg);
    ob_graph_free(g);
}

int main(void) {

    ob_rng_seed(&g_rng, 1234);
    char err[256] = {0};
    ob_backend *be = ob_backend_cuda_new(0, false, err, sizeof(err));
    if (!be) {
        printf("test_cuda_ops: SKIPPED (no CUDA device: %s)\n", err);
        return 77; /* SKIP_RETURN_CODE */
    }
    CHECK(!strcmp(be->iface->name, "cuda"));
    /* ONEBIT_TEST_FIXTURES_ONLY=1: only the model fixtures (bisecting on a device).
     * ONEBIT_TEST_SHARD=i/n: every n-th group from the i-th (testutil.h). */
    const char *fo = getenv("ONEBIT_TEST_FIXTURES_ONLY");
    int ops = !(fo && fo[0] == '1'), k = 0;
    if (ops && ob_test_shard(k++)) test_matmul_get_rows(be);
    if (ops && ob_test_shard(k++)) test_plain_rows(be);
    if (ops && ob_test_shard(k++)) test_matmul_int8(be);
    if (ops && ob_test_shard(k++)) test_matmul_mmvq_run();
    if (ops && ob_test_shard(k++)) {
        /* MMQ at every T it takes (by default T > 32 goes to cuBLAS: test_matmul_blas) */
        char e2[256] = {0};
        ob_backend *mq = cuda_backend_with("ONEBIT_CUDA_MMQ_MAX_T", "1000000", e2, sizeof(e2));
        CHECKF(mq != NULL, "mmq backend: %s", e2);
        if (mq) {
            test_matmul_mmq(mq);
            test_matmul_mmq_stream(mq);
            ob_backend_free(mq);
        }
    }
    if (ops && ob_test_shard(k++)) test_elementwise(be);
    if (ops && ob_test_shard(k++)) test_attention(be);
    if (ops && ob_test_shard(k++)) test_attention_fa(be);
    if (ops && ob_test_shard(k++)) test_encoder_ops(be);
    if (ops && ob_test_shard(k++)) test_sample_op(be);
    if (ops && ob_test_shard(k++)) {
        ob_backend *plain = cuda_backend_with("ONEBIT_CUDA_FUSE", "0", err, sizeof(err));
        CHECKF(plain != NULL, "second backend: %s", err);
        if (plain) test_fused(be, plain);
        if (plain) test_fused_decode(be, plain);
        if (plain) test_fused_norm_sizes(be, plain);
        ob_backend_free(plain);
    }
    if (ops && ob_test_shard(k++)) {
        ob_backend *plain = cuda_backend_with("ONEBIT_CUDA_FUSE", "0", err, sizeof(err));
        CHECKF(plain != NULL, "second backend: %s", err);
        if (plain) test_rope_factors(be, plain);
        ob_backend_free(plain);
    }
    if (ops && ob_test_shard(k++)) test_fallback();
    if (ops && ob_test_shard(k++)) test_det_matmul();
    if (ops && ob_test_shard(k++)) test_matmul_blas();
    if (ops && ob_test_shard(k++)) test_moe_invariance();
    ob_backend_free(be);
    /* every encoder fixture strictly on the device (jina-bert-v2: rows of 72, test_plain_rows) */
    if (ob_test_shard(k++)) ob_test_encoders_on(OB_DEVICE_CUDA, "cuda", NULL);
    const char *arches[] = {"llama", "qwen2", "qwen3", "gemma3"};
    for (int i = 0; i < 4; i++) {
        if (!ob_test_shard(k++)) continue;
        test_fixture(arches[i], OB_KV_F32);
        test_fixture(arches[i], OB_KV_F16);
        test_fixture(arches[i], OB_KV_Q8_0);
        ob_test_sample_decode(arches[i], OB_DEVICE_CUDA, "cuda");
    }
    /* the mixture of experts (op_moe.cu) in a model: prefill, then decode steps replayed
     * from a captured graph */
    if (ob_test_shard(k++)) {
        test_fixture("qwen3moe", OB_KV_F32);
        test_fixture("qwen3moe", OB_KV_F16);
    }
    return ob_test_done("test_cuda_ops");
}
#endif
