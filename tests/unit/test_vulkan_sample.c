/* SAMPLE on the Vulkan backend (sample.comp): exact tokens against the CPU kernel
 * (ob_cpu_sample_row, the host sampler's draw) on every backend of vk_testutil, for greedy
 * and sampled rows (temperature, top-k, top-p, min-p, the sampler's vocabulary), rows of
 * ties, NaN and -0, and vocabularies from 7 to 151,936. Runs on Mesa's lavapipe where there
 * is no GPU. */
#include "testutil.h"
#include <stdio.h>
#ifndef ONEBIT_VULKAN
int main(void) {
    printf("test_vulkan_sample: skipped (built without -DONEBIT_VULKAN=ON)\n");
    return 0;
}
#else
#include "backend/cpu/cpu.h"
#include "backend/vulkan/vk_internal.h"
#include "onebit.h"
#include "vk_testutil.h"
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One SAMPLE graph of R rows of n logits (from the base pointer's alignment: off floats
 * into the leaf, so the greedy pass's vec4 path and its scalar one both run); row r's
 * params from cfg[r % ncfg], u drawn here. Rows are normals times 3, every other row
 * rounded to integers (long runs of ties at the maximum and at the top-k boundary, where
 * the lowest ids must win). Returns the rows that differ from the CPU kernel. */
static int sample_case(ob_backend *be, int n, int R, int off, const float (*cfg)[4], int ncfg, const char *what) {
    ob_graph *g = ob_graph_new(8);
    float *buf = rand_f32((int64_t)n * R + off, 3.0f), *lg = buf + off;
    for (int r = 0; r < R; r += 2)
        for (int i = 0; i < n; i++) lg[(size_t)r * n + i] = roundf(lg[(size_t)r * n + i]);
    if (R > 1) { /* row 1: two equal maxima, the later one at the end of the row */
        lg[(size_t)n + n / 3] = 100.0f;
        lg[(size_t)n + n - 1] = 100.0f;
    }
    if (n > 8) { /* row 0 (greedy): NaNs, and a -0 / +0 pair as the maximum */
        for (int i = 1; i < n; i += 5) lg[i] = NAN;
        for (int i = 0; i < n; i++) lg[i] = lg[i] > 0 ? -lg[i] : lg[i];
        lg[2] = -0.0f;
        lg[3] = 0.0f;
    }
    float *par = calloc((size_t)R * OB_SAMPLE_NPARAM, sizeof(float));
    for (int r = 0; r < R; r++) {
        float *p = par + (size_t)r * OB_SAMPLE_NPARAM;
        for (int j = 0; j < 4; j++) p[j] = cfg[r % ncfg][j];
        p[OB_SAMPLE_U] = r == R - 1 ? 1.0f - 0x1p-24f : (float)(ob_rng_u64(&g_rng) >> 40) * 0x1p-24f;
        if (r % 5 == 3) { /* a sampler vocabulary smaller than the row, its best logit just past it */
            p[OB_SAMPLE_N_VOCAB] = (float)(n - n / 7);
            if (n - n / 7 < n) lg[(size_t)r * n + n - n / 7] = 200.0f;
        }
    }
    int64_t nel[2] = {n, R}, nep[2] = {OB_SAMPLE_NPARAM, R};
    ob_tensor *t = ob_sample(g, ob_leaf(g, "logits", OB_TYPE_F32, 2, nel, lg),
                             ob_leaf(g, "params", OB_TYPE_F32, 2, nep, par));
    CHECKF(be->iface->supports(be, t), "%s: Vulkan refuses SAMPLE", what);
    int32_t *got = calloc((size_t)R, sizeof(int32_t));
    char err[256] = "";
    ob_status st = run_on(be, g, t, got, err, sizeof(err));
    CHECKF(st == OB_OK, "%s: %s", what, err);
    int bad = 0;
    for (int r = 0; r < R && st == OB_OK; r++) {
        const float *p = par + (size_t)r * OB_SAMPLE_NPARAM;
        const float nv = p[OB_SAMPLE_N_VOCAB];
        const int32_t want = ob_cpu_sample_row(lg + (size_t)r * n, nv >= 1 ? (int)nv : n, p);
        if (got[r] != want && bad++ < 8)
            CHECKF(0, "%s row %d (temp %.2f top_k %.0f top_p %.2f min_p %.2f u %.6f): vulkan %d, cpu %d", what, r, p[0],
                   p[1], p[2], p[3], p[4], got[r], want);
    }
    ob_graph_free(g);
    free(got);
    free(buf);
    free(par);
    return bad;
}

static void test_sample_op(void) {
    /* temperature, top_k, top_p, min_p */
    static const float cfg[][4] = {
        {0.0f, 40, 0.95f, 0.05f}, {0.8f, 40, 0.95f, 0.05f}, {1.0f, 1, 1.0f, 0.0f},   {0.7f, 5, 1.0f, 0.0f},
        {1.5f, 1024, 1.0f, 0.0f}, {0.6f, 1024, 0.9f, 0.1f}, {1.2f, 40, 0.5f, 0.0f},  {0.3f, 200, 1.0f, 0.2f},
        {0.0f, 0, 1.0f, 0.0f},    {2.0f, 777, 0.99f, 0.0f}, {0.9f, 64, 1.0f, 0.01f}, {1.0f, 1023, 0.8f, 0.0f},
    };
    const int ncfg = (int)OB_ARRAY_LEN(cfg);
    static const struct { int n, R, off; } sz[] = {
        {151936, 12, 0}, {32001, 12, 1}, {1000, 24, 0}, {4099, 12, 3}, {7, 12, 0}, {4096, 12, 2},
    };
    for (int b = 0; b < N_BE; b++)
        for (size_t i = 0; i < OB_ARRAY_LEN(sz); i++) {
            char what[96];
            snprintf(what, sizeof(what), "sample vocab %d (%s%s)", sz[i].n, g_be_name[b], sz[i].off ? ", unaligned" : "");
            const int bad = sample_case(g_be[b], sz[i].n, sz[i].R, sz[i].off, cfg, ncfg, what);
            printf("%s: %d/%d rows differ\n", what, bad, sz[i].R);
        }
    /* the fence polled before the blocking wait (by default only on a GPU) */
    const ob_vk *v0 = g_be[0]->ctx;
    CHECKF(v0->spin_us == (v0->info.type == VK_PHYSICAL_DEVICE_TYPE_CPU ? 0u : 20000u), "spin_us %u by default",
           v0->spin_us);
    ob_backend *spin = backend_with("ONEBIT_VK_SPIN_US", "3000");
    CHECK(spin != NULL);
    if (spin) {
        CHECK(((const ob_vk *)spin->ctx)->spin_us == 3000u);
        CHECK(sample_case(spin, 151936, 12, 0, cfg, ncfg, "sample vocab 151936 (fence polled)") == 0);
        ob_backend_free(spin);
    }
    /* constant rows: every id ties, so the candidates are the k lowest ids */
    const int n = 32000, R = 4;
    float *lg = malloc(sizeof(float) * (size_t)n * R), par[4 * OB_SAMPLE_NPARAM] = {0};
    for (int i = 0; i < n * R; i++) lg[i] = -1.5f;
    for (int r = 0; r < R; r++) {
        par[r * OB_SAMPLE_NPARAM + OB_SAMPLE_TEMP] = r ? 1.0f : 0.0f;
        par[r * OB_SAMPLE_NPARAM + OB_SAMPLE_TOP_K] = r == 3 ? 1024.0f : 40.0f;
        par[r * OB_SAMPLE_NPARAM + OB_SAMPLE_TOP_P] = 1.0f;
        par[r * OB_SAMPLE_NPARAM + OB_SAMPLE_U] = r == 1 ? 0.0f : 0.999f;
    }
    ob_graph *g = ob_graph_new(8);
    int64_t nel[2] = {n, R}, nep[2] = {OB_SAMPLE_NPARAM, R};
    ob_tensor *t = ob_sample(g, ob_leaf(g, "logits", OB_TYPE_F32, 2, nel, lg), ob_leaf(g, "params", OB_TYPE_F32, 2, nep, par));
    int32_t tk[4] = {-1, -1, -1, -1};
    char err[256] = "";
    CHECKF(run_on(g_be[0], g, t, tk, err, sizeof(err)) == OB_OK, "sample constant rows: %s", err);
    /* greedy: id 0; u 0: the first candidate; u .999 of 40 equal: id 39; of 1024: id 1022 */
    CHECKF(tk[0] == 0 && tk[1] == 0 && tk[2] == 39 && tk[3] == 1022, "sample constant rows: %d %d %d %d", tk[0], tk[1],
           tk[2], tk[3]);
    ob_graph_free(g);
    free(lg);
}

/* The double exp and log of sample.comp, through draws whose answer they decide: a row of
 * two logits whose probabilities put the boundary right next to u. Against the CPU kernel
 * on many temperatures and min-p values (min-p's cut is log(min_p) * temp). */
static void test_sample_math(void) {
    const int R = 256, n = 2;
    float *lg = malloc(sizeof(float) * n * R), *par = calloc((size_t)R * OB_SAMPLE_NPARAM, sizeof(float));
    for (int r = 0; r < R; r++) {
        float *p = par + (size_t)r * OB_SAMPLE_NPARAM;
        lg[n * r] = 0.0f;
        lg[n * r + 1] = -(float)(ob_rng_u64(&g_rng) >> 40) * 0x1p-24f * 12.0f;
        p[OB_SAMPLE_TEMP] = 0.05f + (float)(ob_rng_u64(&g_rng) >> 40) * 0x1p-24f * 3.0f;
        p[OB_SAMPLE_TOP_K] = 2;
        p[OB_SAMPLE_TOP_P] = 1.0f;
        p[OB_SAMPLE_MIN_P] = r % 2 ? (float)(ob_rng_u64(&g_rng) >> 40) * 0x1p-24f * 0.5f : 0.0f;
        /* u just under the first token's probability */
        const double e1 = exp((double)lg[n * r + 1] / p[OB_SAMPLE_TEMP]);
        p[OB_SAMPLE_U] = (float)(1.0 / (1.0 + e1)) * (r % 3 == 0 ? 0.999999f : r % 3 == 1 ? 1.000001f : 0.5f);
        if (p[OB_SAMPLE_U] >= 1.0f) p[OB_SAMPLE_U] = 0.999f;
    }
    ob_graph *g = ob_graph_new(8);
    int64_t nel[2] = {n, R}, nep[2] = {OB_SAMPLE_NPARAM, R};
    ob_tensor *t = ob_sample(g, ob_leaf(g, "logits", OB_TYPE_F32, 2, nel, lg), ob_leaf(g, "params", OB_TYPE_F32, 2, nep, par));
    int32_t *got = calloc((size_t)R, sizeof(int32_t));
    char err[256] = "";
    CHECKF(run_on(g_be[0], g, t, got, err, sizeof(err)) == OB_OK, "sample math: %s", err);
    int bad = 0, ones = 0;
    for (int r = 0; r < R; r++) {
        const int32_t want = ob_cpu_sample_row(lg + n * r, n, par + (size_t)r * OB_SAMPLE_NPARAM);
        ones += want == 1;
        if (got[r] != want && bad++ < 8) CHECKF(0, "sample math row %d: vulkan %d, cpu %d", r, got[r], want);
    }
    /* both tokens come up: the draws sit on both sides of the boundary */
    CHECKF(ones > 0 && ones < R, "sample math: token 1 drawn %d of %d times", ones, R);
    printf("sample math: %d/%d rows differ, token 1 drawn %d times\n", bad, R, ones);
    ob_graph_free(g);
    free(got);
    free(lg);
    free(par);
}

/* ob_decode_sample on Vulkan: greedy tokens equal the fixture's golden ones (the HF
 * reference's) through reused steps, with only tokens coming back (no logits row). */
static void test_sample_decode(const char *arch) {
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
    mp.device = OB_DEVICE_VULKAN;
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
    printf("%s: ob_decode_sample on vulkan: %d/%d golden greedy tokens\n", arch, ok, ng);
    ob_sampler_free(s);
    ob_context_free(c);
    ob_model_free(m);
    json_decref(meta);
}

int main(void) {
    if (!vkt_begin("test_vulkan_sample")) return ob_test_done("test_vulkan_sample");
    ob_rng_seed(&g_rng, 0x5a3b1eu);
    test_sample_op();
    test_sample_math();
    static const char *const arches[] = {"llama", "qwen2", "qwen3", "gemma3"};
    for (size_t i = 0; i < OB_ARRAY_LEN(arches); i++) test_sample_decode(arches[i]);
    vkt_end();
    return ob_test_done("test_vulkan_sample");
}
#endif
