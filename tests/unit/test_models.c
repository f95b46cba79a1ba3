/* Golden end-to-end test: tiny random models of each architecture (made with
 * transformers by tests/fixtures/models/make_fixtures.py) give the same logits
 * (1e-4 relative, F32 weights and KV) and the same 32 greedy tokens as transformers. */
#include "testutil.h"
#include "onebit.h"
#include <jansson.h>
#include <math.h>
#include <string.h>

#define FIX "tests/fixtures/models/"

static double row_rel_err(const float *a, const float *ref, int n) {
    double md = 0, mr = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (d > md || d != d) md = d != d ? INFINITY : d;
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    return md / (mr > 0 ? mr : 1);
}

static void run_arch(const char *arch, ob_kv_type kv, int n_batch, double tol, bool check_greedy) {
    char path[256], err[512];
    snprintf(path, sizeof(path), FIX "%s.json", arch);
    json_error_t je;
    json_t *meta = json_load_file(path, 0, &je);
    CHECKF(meta != NULL, "%s: %s", path, je.text);
    if (!meta) return;
    int vocab = (int)json_integer_value(json_object_get(meta, "vocab"));
    json_t *jp = json_object_get(meta, "prompt"), *jg = json_object_get(meta, "greedy");
    int np = (int)json_array_size(jp), ng = (int)json_array_size(jg);
    snprintf(path, sizeof(path), FIX "%s.logits.f32", arch);
    size_t len = 0;
    float *ref = ob_test_read_file(path, &len);
    CHECK(ref && len == sizeof(float) * (size_t)np * (size_t)vocab);
    snprintf(path, sizeof(path), FIX "%s.gguf", arch);
    ob_model_params mp = ob_model_default_params();
    mp.n_threads = 2;
    ob_model *m = NULL;
    ob_status st = ob_model_load(path, &mp, &m, err, sizeof(err));
    CHECKF(st == OB_OK, "%s: %s", arch, err);
    ob_context_params cp = ob_context_default_params();
    cp.n_ctx = 128;
    cp.n_batch = n_batch;
    cp.type_k = cp.type_v = kv;
    ob_context *c = NULL;
    if (!st) {
        st = ob_context_new(m, &cp, &c, err, sizeof(err));
        CHECKF(st == OB_OK, "%s: %s", arch, err);
    }
    if (!st && ref) {
        int32_t tok[256], pos[256], seq[256];
        int8_t want[256];
        for (int i = 0; i < np; i++) {
            tok[i] = (int32_t)json_integer_value(json_array_get(jp, (size_t)i));
            pos[i] = i; seq[i] = 0; want[i] = 1;
        }
        /* With a small batch, ask only for logits of the last chunk's rows (host rows are
         * limited to n_batch); the full check runs with n_batch >= 64. */
        int first = np > n_batch ? np - n_batch : 0;
        for (int i = 0; i < first; i++) want[i] = 0;
        ob_batch b = {np, tok, pos, seq, want};
        st = ob_decode(c, &b, err, sizeof(err));
        CHECKF(st == OB_OK, "%s: %s", arch, err);
        double worst = 0;
        for (int i = first; i < np && !st; i++) {
            double e = row_rel_err(ob_get_logits(c, i), ref + (size_t)i * vocab, vocab);
            if (e > worst || e != e) worst = e;
        }
        CHECKF(worst <= tol, "%s kv=%d batch=%d: logits rel err %.3g > %.1g", arch, kv, n_batch, worst, tol);
        printf("%s kv=%d batch=%d: max rel err %.3g\n", arch, kv, n_batch, worst);
        if (check_greedy && !st) {
            const float *lg = ob_get_logits(c, np - 1);
            int mism = 0;
            for (int k = 0; k < ng; k++) {
                int best = 0;
                for (int v = 1; v < vocab; v++) if (lg[v] > lg[best]) best = v;
                int want_tok = (int)json_integer_value(json_array_get(jg, (size_t)k));
                if (best != want_tok) { mism++; CHECKF(0, "%s: greedy step %d: got %d, want %d", arch, k, best, want_tok); break; }
                int32_t p = np + k, s = 0, t = best;
                ob_batch b1 = {1, &t, &p, &s, NULL};
                if (ob_decode(c, &b1, err, sizeof(err))) { CHECKF(0, "%s", err); break; }
                lg = ob_get_logits(c, 0);
            }
            (void)mism;
        }
    }
    ob_context_free(c);
    ob_model_free(m);
    free(ref);
    json_decref(meta);
}

/* A token's logits must not depend on what else shares its batch: prefill, one token at
 * a time, and two sequences interleaved in one batch give bitwise identical logits (the
 * server's promise that batched answers equal solo ones rests on this). */
static void check_batch_invariance(const char *arch) {
    char path[256], err[512];
    snprintf(path, sizeof(path), FIX "%s.gguf", arch);
    ob_model_params mp = ob_model_default_params();
    mp.n_threads = 3; /* more threads than (token, kv head) pairs in a decode step */
    ob_model *m = NULL;
    if (ob_model_load(path, &mp, &m, err, sizeof(err))) { CHECKF(0, "%s", err); return; }
    ob_model_info info;
    ob_model_get_info(m, &info);
    int V = info.n_vocab, T = 40;
    ob_context_params cp = ob_context_default_params();
    cp.n_ctx = 64;
    cp.n_seq = 3;
    ob_context *c = NULL;
    if (ob_context_new(m, &cp, &c, err, sizeof(err))) { CHECKF(0, "%s", err); ob_model_free(m); return; }
    int32_t tok[80], pos[80], seq[80];
    int8_t want[80];
    float *ref = malloc(sizeof(float) * (size_t)V * T);
    ob_rng r;
    ob_rng_seed(&r, 3);
    for (int i = 0; i < T; i++) { tok[i] = (int32_t)(ob_rng_u64(&r) % (uint64_t)(V - 2)); pos[i] = i; seq[i] = 0; want[i] = 1; }
    ob_batch b = {T, tok, pos, seq, want};
    CHECK(ob_decode(c, &b, err, sizeof(err)) == OB_OK);
    for (int i = 0; i < T; i++) memcpy(ref + (size_t)i * V, ob_get_logits(c, i), sizeof(float) * (size_t)V);
    /* sequence 1: one token per call */
    int bad_steps = 0, bad_mixed = 0;
    for (int i = 0; i < T; i++) {
        int32_t p = i, s = 1;
        ob_batch one = {1, &tok[i], &p, &s, NULL};
        CHECK(ob_decode(c, &one, err, sizeof(err)) == OB_OK);
        if (memcmp(ob_get_logits(c, 0), ref + (size_t)i * V, sizeof(float) * (size_t)V)) bad_steps++;
    }
    /* sequence 2 interleaved with sequence 1's continuation, three tokens per call */
    ob_seq_truncate(c, 1, 10);
    for (int i = 0; i + 1 < T - 10; i += 2) {
        int32_t t3[3] = {tok[i], tok[i + 1], tok[10 + i / 2]}, p3[3] = {i, i + 1, 10 + i / 2}, s3[3] = {2, 2, 1};
        int8_t w3[3] = {1, 1, 1};
        ob_batch mix = {3, t3, p3, s3, w3};
        CHECK(ob_decode(c, &mix, err, sizeof(err)) == OB_OK);
        if (memcmp(ob_get_logits(c, 0), ref + (size_t)i * V, sizeof(float) * (size_t)V) ||
            memcmp(ob_get_logits(c, 1), ref + (size_t)(i + 1) * V, sizeof(float) * (size_t)V) ||
            memcmp(ob_get_logits(c, 2), ref + (size_t)(10 + i / 2) * V, sizeof(float) * (size_t)V))
            bad_mixed++;
    }
    CHECKF(bad_steps == 0, "%s: %d single-token steps differ from prefill", arch, bad_steps);
    CHECKF(bad_mixed == 0, "%s: %d mixed batches differ from prefill", arch, bad_mixed);
    free(ref);
    ob_context_free(c);
    ob_model_free(m);
}

int main(void) {
    const char *arches[] = {"llama", "qwen2", "qwen3", "gemma3"};
    for (int i = 0; i < 4; i++) {
        run_arch(arches[i], OB_KV_F32, 512, 1e-4, true);
        run_arch(arches[i], OB_KV_F32, 7, 1e-4, false);   /* chunked prefill */
        run_arch(arches[i], OB_KV_F16, 512, 5e-3, false);
        run_arch(arches[i], OB_KV_Q8_0, 512, 3e-2, false);
    }
    for (int i = 0; i < 4; i++) check_batch_invariance(arches[i]);
    /* Unknown architectures and missing files are refused with a clear message. */
    char err[512] = {0};
    ob_model *m = NULL;
    CHECK(ob_model_load("tests/fixtures/models/nope.gguf", NULL, &m, err, sizeof(err)) != OB_OK && m == NULL);
    CHECK(strlen(err) > 0);
    return ob_test_done("test_models");
}
