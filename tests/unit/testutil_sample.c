/* See testutil_sample.h. */
#include "testutil_sample.h"
#include "backend/cpu/cpu.h"
#include "graph/graph.h"
#include <jansson.h>
#include <math.h>
#include <string.h>

const float ob_test_sample_cfg[OB_TEST_SAMPLE_NCFG][4] = {
    {0.0f, 40, 0.95f, 0.05f}, {0.8f, 40, 0.95f, 0.05f}, {1.0f, 1, 1.0f, 0.0f},   {0.7f, 5, 1.0f, 0.0f},
    {1.5f, 1024, 1.0f, 0.0f}, {0.6f, 1024, 0.9f, 0.1f}, {1.2f, 40, 0.5f, 0.0f},  {0.3f, 200, 1.0f, 0.2f},
    {0.0f, 0, 1.0f, 0.0f},    {2.0f, 777, 0.99f, 0.0f}, {0.9f, 64, 1.0f, 0.01f}, {1.0f, 1023, 0.8f, 0.0f},
};

void ob_test_sample_inputs(int n, int R, bool nan_row0, ob_rng *rng, float *lg, float *par) {
    ob_rng_fill_normal(rng, lg, (int64_t)n * R, 3.0f);
    for (int r = 0; r < R; r += 2)
        for (int i = 0; i < n; i++) lg[(size_t)r * n + i] = roundf(lg[(size_t)r * n + i]);
    if (R > 1) {
        lg[(size_t)n + n / 3] = 100.0f;
        lg[(size_t)n + n - 1] = 100.0f;
    }
    if (nan_row0 && n > 8) {
        for (int i = 1; i < n; i += 5) lg[i] = NAN;
        for (int i = 0; i < n; i++) lg[i] = lg[i] > 0 ? -lg[i] : lg[i];
        lg[2] = -0.0f;
        lg[3] = 0.0f;
    }
    memset(par, 0, sizeof(float) * (size_t)R * OB_SAMPLE_NPARAM);
    for (int r = 0; r < R; r++) {
        float *p = par + (size_t)r * OB_SAMPLE_NPARAM;
        for (int j = 0; j < 4; j++) p[j] = ob_test_sample_cfg[r % OB_TEST_SAMPLE_NCFG][j];
        p[OB_SAMPLE_U] = r == R - 1 ? 1.0f - 0x1p-24f : (float)(ob_rng_u64(rng) >> 40) * 0x1p-24f;
        if (r % 5 == 3) {
            p[OB_SAMPLE_N_VOCAB] = (float)(n - n / 7);
            if (n - n / 7 < n) lg[(size_t)r * n + n - n / 7] = 200.0f;
        }
    }
}

int ob_test_sample_check(const float *lg, const float *par, int n, int R, const int32_t *got, const char *dev,
                         const char *what) {
    int bad = 0;
    for (int r = 0; r < R; r++) {
        const float *p = par + (size_t)r * OB_SAMPLE_NPARAM;
        const float nv = p[OB_SAMPLE_N_VOCAB];
        const int32_t want = ob_cpu_sample_row(lg + (size_t)r * n, nv >= 1 ? (int)nv : n, p);
        if (got[r] != want && bad++ < 8)
            CHECKF(0, "%s row %d (temp %.2f top_k %.0f top_p %.2f min_p %.2f u %.6f): %s %d, cpu %d", what, r, p[0],
                   p[1], p[2], p[3], p[4], dev, got[r], want);
    }
    return bad;
}

void ob_test_sample_constant(float *lg, float *par) {
    for (int i = 0; i < 4 * OB_TEST_SAMPLE_CONST_N; i++) lg[i] = -1.5f;
    memset(par, 0, sizeof(float) * 4 * OB_SAMPLE_NPARAM);
    for (int r = 0; r < 4; r++) {
        par[r * OB_SAMPLE_NPARAM + OB_SAMPLE_TEMP] = r ? 1.0f : 0.0f;
        par[r * OB_SAMPLE_NPARAM + OB_SAMPLE_TOP_K] = r == 3 ? 1024.0f : 40.0f;
        par[r * OB_SAMPLE_NPARAM + OB_SAMPLE_TOP_P] = 1.0f;
        par[r * OB_SAMPLE_NPARAM + OB_SAMPLE_U] = r == 1 ? 0.0f : 0.999f;
    }
}

void ob_test_sample_constant_check(const int32_t *tk, const char *dev) {
    /* greedy: id 0; u 0: the first candidate; u .999 of 40 equal: id 39; of 1024: id 1022 */
    CHECKF(tk[0] == 0 && tk[1] == 0 && tk[2] == 39 && tk[3] == 1022, "sample constant rows on %s: %d %d %d %d", dev,
           tk[0], tk[1], tk[2], tk[3]);
    printf("sample constant rows on %s: %d %d %d %d (want 0 0 39 1022)\n", dev, tk[0], tk[1], tk[2], tk[3]);
}

void ob_test_sample_decode(const char *arch, ob_device_kind dev, const char *dev_name) {
    char path[256], err[512];
    snprintf(path, sizeof(path), "tests/fixtures/models/%s.json", arch);
    json_error_t je;
    json_t *meta = json_load_file(path, 0, &je);
    CHECKF(meta != NULL, "%s", path);
    if (!meta) return;
    json_t *jp = json_object_get(meta, "prompt"), *jg = json_object_get(meta, "greedy");
    const int np = (int)json_array_size(jp), ng = (int)json_array_size(jg);
    snprintf(path, sizeof(path), "tests/fixtures/models/%s.gguf", arch);
    ob_model_params mp = ob_model_default_params();
    mp.device = dev;
    mp.n_threads = 2;
    ob_model *m = NULL;
    ob_context *c = NULL;
    CHECKF(ob_model_load(path, &mp, &m, err, sizeof(err)) == OB_OK, "%s: %s", path, err);
    ob_context_params cp = ob_context_default_params();
    cp.n_ctx = 128;
    if (m) CHECKF(ob_context_new(m, &cp, &c, err, sizeof(err)) == OB_OK, "%s: %s", path, err);
    ob_sampler_params sp = ob_sampler_default_params();
    sp.temperature = 0;
    ob_sampler *s = m ? ob_sampler_new(&sp, ob_tokenizer_n_vocab(ob_model_tokenizer(m))) : NULL;
    int ok = 0;
    CHECKF(np <= 64, "%s: a prompt of %d tokens", arch, np);
    if (c && s && np <= 64) {
        int32_t tok[64], pos[64], seq[64];
        for (int i = 0; i < np; i++) {
            tok[i] = (int32_t)json_integer_value(json_array_get(jp, (size_t)i));
            pos[i] = i;
            seq[i] = 0;
        }
        ob_batch b = {np, tok, pos, seq, NULL};
        int32_t t = -1;
        ob_status st = ob_decode_sample(c, &b, &s, &t, err, sizeof(err));
        CHECKF(!st, "%s: %s", arch, err);
        CHECKF(ob_get_logits(c, np - 1) == NULL, "%s: ob_decode_sample did not sample on the device", arch);
        for (int k = 0; k < ng && !st; k++) {
            const int want = (int)json_integer_value(json_array_get(jg, (size_t)k));
            if (t != want) {
                CHECKF(0, "%s: device-sampled greedy step %d: %d, want %d", arch, k, t, want);
                break;
            }
            ok++;
            int32_t p = np + k, sq = 0, in = t;
            ob_batch b1 = {1, &in, &p, &sq, NULL};
            st = ob_decode_sample(c, &b1, &s, &t, err, sizeof(err));
            CHECKF(!st, "%s: %s", arch, err);
        }
    }
    CHECKF(ok == ng, "%s: %d/%d golden greedy tokens", arch, ok, ng);
    printf("%s: ob_decode_sample on %s: %d/%d golden greedy tokens\n", arch, dev_name, ok, ng);
    ob_sampler_free(s);
    ob_context_free(c);
    ob_model_free(m);
    json_decref(meta);
}
