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

int main(void) {
    const char *arches[] = {"llama", "qwen2", "qwen3", "gemma3"};
    for (int i = 0; i < 4; i++) {
        run_arch(arches[i], OB_KV_F32, 512, 1e-4, true);
        run_arch(arches[i], OB_KV_F32, 7, 1e-4, false);   /* chunked prefill */
        run_arch(arches[i], OB_KV_F16, 512, 5e-3, false);
        run_arch(arches[i], OB_KV_Q8_0, 512, 3e-2, false);
    }
    /* Unknown architectures and missing files are refused with a clear message. */
    char err[512] = {0};
    ob_model *m = NULL;
    CHECK(ob_model_load("tests/fixtures/models/nope.gguf", NULL, &m, err, sizeof(err)) != OB_OK && m == NULL);
    CHECK(strlen(err) > 0);
    return ob_test_done("test_models");
}
