/* SAMPLE op and ob_decode_sample: the op on the CPU backend picks exactly the token that
 * ob_sampler_sample picks from the same logits with the same uniform draw (random rows,
 * ties, every temperature / top-k / top-p / min-p mix the device path accepts), and
 * decoding with ob_decode_sample on the fixture models gives the golden greedy tokens and
 * the same seeded tokens as ob_decode + ob_sampler_sample. */
#include "testutil.h"
#include "onebit.h"
#include "backend/backend.h"
#include "graph/graph.h"
#include <jansson.h>
#include <math.h>
#include <string.h>

/* Rows of normal logits; every third row rounded to a few levels (ties at the top and at
 * the top-k boundary), one row constant. */
static void fill_rows(ob_rng *r, float *lg, int n, int R, float scale) {
    ob_rng_fill_normal(r, lg, (int64_t)n * R, scale);
    for (int row = 0; row < R; row++) {
        float *w = lg + (size_t)row * n;
        if (row % 3 == 1)
            for (int i = 0; i < n; i++) w[i] = roundf(w[i]);
        if (row == R - 1 && R > 2)
            for (int i = 0; i < n; i++) w[i] = 0.25f;
    }
}

/* Runs SAMPLE over R rows of n logits on be (host-memory backend). */
static void run_op(ob_backend *be, const float *lg, const float *par, int n, int R, int32_t *out) {
    ob_graph *g = ob_graph_new(8);
    int64_t nel[2] = {n, R}, nep[2] = {OB_SAMPLE_NPARAM, R};
    ob_tensor *a = ob_leaf(g, "logits", OB_TYPE_F32, 2, nel, (void *)lg);
    ob_tensor *p = ob_leaf(g, "params", OB_TYPE_F32, 2, nep, (void *)par);
    ob_tensor *t = ob_sample(g, a, p);
    CHECK(be->iface->supports(be, t));
    ob_graph_plan(g);
    void *scratch = be->iface->alloc(be, g->scratch_size);
    ob_graph_bind(g, scratch);
    memset(t->data, 0xff, sizeof(int32_t) * (size_t)R); /* poison: -1 is never a token */
    char err[256] = "";
    ob_status st = be->iface->compute(be, g, err, sizeof(err));
    CHECKF(st == OB_OK, "compute: %s", err);
    memcpy(out, t->data, sizeof(int32_t) * (size_t)R);
    be->iface->free_buf(be, scratch);
    ob_graph_free(g);
}

static void test_op_vs_sampler(ob_backend *be) {
    static const int vocabs[] = {7, 50, 1000, 4099, 32000};
    static const float temps[] = {0.0f, 0.3f, 0.8f, 1.5f};
    static const int topks[] = {1, 5, 40, 1024};
    static const float topps[] = {1.0f, 0.9f, 0.5f};
    static const float minps[] = {0.0f, 0.05f, 0.2f};
    ob_rng r;
    ob_rng_seed(&r, 2024);
    const int R = 9;
    int cases = 0, mism = 0, distinct_nonzero = 0;
    for (size_t vi = 0; vi < sizeof(vocabs) / sizeof(*vocabs); vi++) {
        const int n = vocabs[vi];
        float *lg = malloc(sizeof(float) * (size_t)n * R);
        float par[OB_SAMPLE_NPARAM * 9];
        int32_t got[9];
        for (size_t ti = 0; ti < 4; ti++)
            for (size_t ki = 0; ki < 4; ki++)
                for (size_t pi = 0; pi < 3; pi++)
                    for (size_t mi = 0; mi < 3; mi++) {
                        if (temps[ti] <= 0 && (ki || pi || mi)) continue; /* greedy ignores the rest */
                        fill_rows(&r, lg, n, R, 1.0f + 2.0f * (float)(cases % 3));
                        ob_sampler_params sp = ob_sampler_default_params();
                        sp.temperature = temps[ti];
                        sp.top_k = topks[ki];
                        sp.top_p = topps[pi];
                        sp.min_p = minps[mi];
                        sp.seed = 1000 + (uint64_t)cases;
                        ob_sampler *dev = ob_sampler_new(&sp, n), *host = ob_sampler_new(&sp, n);
                        CHECK(ob_sampler_device_ok(dev));
                        for (int row = 0; row < R; row++) ob_sampler_device_params(dev, par + row * OB_SAMPLE_NPARAM);
                        run_op(be, lg, par, n, R, got);
                        for (int row = 0; row < R; row++) {
                            const int32_t want = ob_sampler_sample(host, lg + (size_t)row * n);
                            if (got[row] != want && mism++ < 10)
                                CHECKF(0, "n %d temp %.2f top_k %d top_p %.2f min_p %.2f row %d: op %d, sampler %d", n,
                                       sp.temperature, sp.top_k, sp.top_p, sp.min_p, row, got[row], want);
                            distinct_nonzero += got[row] != 0;
                        }
                        /* both streams drew the same number of uniforms */
                        CHECK(ob_sampler_next_uniform(dev) == ob_sampler_next_uniform(host));
                        ob_sampler_free(dev);
                        ob_sampler_free(host);
                        cases++;
                    }
        free(lg);
    }
    CHECKF(mism == 0, "%d rows differ", mism);
    CHECK(distinct_nonzero > cases); /* the op really picked tokens, not a constant */
    printf("SAMPLE op vs ob_sampler_sample: %d configurations x %d rows, %d mismatches\n", cases, R, mism);
}

/* Greedy on the full Qwen vocabulary, and u at its extremes (0 and just under 1). */
static void test_op_large(ob_backend *be) {
    const int n = 151936, R = 4;
    float *lg = malloc(sizeof(float) * (size_t)n * R);
    ob_rng r;
    ob_rng_seed(&r, 99);
    ob_rng_fill_normal(&r, lg, (int64_t)n * R, 3.0f);
    lg[(size_t)1 * n + 77777] = 40.0f; /* row 1: a clear winner late in the row */
    lg[(size_t)1 * n + 150000] = 40.0f; /* and a later tie that must lose */
    float par[OB_SAMPLE_NPARAM * 4] = {0};
    const float u[4] = {0.0f, 0.5f, 1.0f - 0x1p-24f, 0.25f};
    for (int row = 0; row < R; row++) {
        float *p = par + row * OB_SAMPLE_NPARAM;
        p[OB_SAMPLE_TEMP] = row == 1 ? 0.0f : 0.9f;
        p[OB_SAMPLE_TOP_K] = row == 3 ? 1024.0f : 40.0f;
        p[OB_SAMPLE_TOP_P] = 0.95f;
        p[OB_SAMPLE_MIN_P] = row == 2 ? 0.05f : 0.0f;
        p[OB_SAMPLE_U] = u[row];
    }
    int32_t got[4];
    run_op(be, lg, par, n, R, got);
    CHECKF(got[1] == 77777, "greedy tie: %d", got[1]);
    for (int row = 0; row < R; row++) {
        ob_sampler_params sp = ob_sampler_default_params();
        const float *p = par + row * OB_SAMPLE_NPARAM;
        sp.temperature = p[OB_SAMPLE_TEMP];
        sp.top_k = (int)p[OB_SAMPLE_TOP_K];
        sp.top_p = p[OB_SAMPLE_TOP_P];
        sp.min_p = p[OB_SAMPLE_MIN_P];
        /* the same row again, one row per graph, with the u a seeded sampler draws */
        ob_sampler *s = ob_sampler_new(&sp, n), *s2 = ob_sampler_new(&sp, n);
        float pp[OB_SAMPLE_NPARAM];
        ob_sampler_device_params(s2, pp);
        int32_t one;
        run_op(be, lg + (size_t)row * n, pp, n, 1, &one);
        const int32_t want = ob_sampler_sample(s, lg + (size_t)row * n);
        CHECKF(one == want, "vocab %d row %d: op %d, sampler %d", n, row, one, want);
        CHECKF(got[row] >= 0 && got[row] < n, "row %d: token %d out of range", row, got[row]);
        ob_sampler_free(s);
        ob_sampler_free(s2);
    }
    printf("SAMPLE op on vocab %d: greedy tie -> %d, rows %d %d %d %d\n", n, got[1], got[0], got[1], got[2], got[3]);
    free(lg);
}

static int first_max(const float *w, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (w[i] > w[best]) best = i;
    return best;
}

/* A sampler whose vocabulary is shorter than the logits rows (a model's padded output):
 * the op must not pick past it, even where the padding holds the largest logit. */
static void test_op_short_vocab(ob_backend *be) {
    const int n = 2000, nv = 1700, R = 6;
    float *lg = malloc(sizeof(float) * (size_t)n * R), par[6 * OB_SAMPLE_NPARAM];
    ob_rng r;
    ob_rng_seed(&r, 5);
    ob_rng_fill_normal(&r, lg, (int64_t)n * R, 2.0f);
    for (int row = 0; row < R; row++) lg[(size_t)row * n + nv + 10] = 50.0f;
    int32_t got[6];
    int same = 0;
    for (int row = 0; row < R; row++) {
        ob_sampler_params sp = ob_sampler_default_params();
        sp.temperature = row % 3 == 0 ? 0.0f : 1.0f;
        sp.top_k = row == 2 ? 1024 : 40;
        sp.seed = (uint64_t)row;
        ob_sampler *a = ob_sampler_new(&sp, nv), *b = ob_sampler_new(&sp, nv);
        ob_sampler_device_params(a, par + row * OB_SAMPLE_NPARAM);
        CHECK(par[row * OB_SAMPLE_NPARAM + OB_SAMPLE_N_VOCAB] == (float)nv);
        run_op(be, lg + (size_t)row * n, par + row * OB_SAMPLE_NPARAM, n, 1, &got[row]);
        const int32_t want = ob_sampler_sample(b, lg + (size_t)row * n);
        CHECKF(got[row] == want && got[row] < nv, "short vocab row %d: op %d, sampler %d", row, got[row], want);
        same += got[row] == want;
        ob_sampler_free(a);
        ob_sampler_free(b);
    }
    printf("SAMPLE op, sampler vocabulary %d of %d logits: %d/%d rows equal\n", nv, n, same, R);
    free(lg);
}

/* ---- end to end on the fixture models ------------------------------------------------ */

#define FIX "tests/fixtures/models/"

/* Greedy through ob_decode_sample against the golden tokens (transformers). */
static void e2e_greedy(const char *arch) {
    char path[256], err[512] = "";
    snprintf(path, sizeof(path), FIX "%s.json", arch);
    json_error_t je;
    json_t *meta = json_load_file(path, 0, &je);
    CHECKF(meta != NULL, "%s: %s", path, je.text);
    if (!meta) return;
    json_t *jp = json_object_get(meta, "prompt"), *jg = json_object_get(meta, "greedy");
    int np = (int)json_array_size(jp), ng = (int)json_array_size(jg);
    snprintf(path, sizeof(path), FIX "%s.gguf", arch);
    ob_model_params mp = ob_model_default_params();
    mp.n_threads = 2;
    ob_model *m = NULL;
    ob_context *c = NULL;
    ob_status st = ob_model_load(path, &mp, &m, err, sizeof(err));
    CHECKF(st == OB_OK, "%s: %s", arch, err);
    ob_context_params cp = ob_context_default_params();
    cp.n_ctx = 128;
    cp.n_batch = 64;
    cp.type_k = cp.type_v = OB_KV_F32;
    if (!st) st = ob_context_new(m, &cp, &c, err, sizeof(err));
    CHECKF(st == OB_OK, "%s: %s", arch, err);
    ob_sampler_params sp = ob_sampler_default_params();
    sp.temperature = 0;
    ob_sampler *s = ob_sampler_new(&sp, ob_tokenizer_n_vocab(ob_model_tokenizer(m)));
    CHECK(ob_sampler_device_ok(s));
    int32_t tok[256], pos[256], seq[256];
    for (int i = 0; i < np && i < 256; i++) {
        tok[i] = (int32_t)json_integer_value(json_array_get(jp, (size_t)i));
        pos[i] = i; seq[i] = 0;
    }
    int ok = 0;
    if (!st) {
        ob_batch b = {np, tok, pos, seq, NULL};
        int32_t t = -1;
        st = ob_decode_sample(c, &b, &s, &t, err, sizeof(err));
        CHECKF(st == OB_OK, "%s: %s", arch, err);
        CHECK(ob_get_logits(c, np - 1) == NULL); /* sampled in the graph: no logits came back */
        for (int k = 0; k < ng && !st; k++) {
            const int want = (int)json_integer_value(json_array_get(jg, (size_t)k));
            if (t != want) { CHECKF(0, "%s: greedy step %d: got %d, want %d", arch, k, t, want); break; }
            ok++;
            int32_t p = np + k, sq = 0, in = t;
            ob_batch b1 = {1, &in, &p, &sq, NULL};
            st = ob_decode_sample(c, &b1, &s, &t, err, sizeof(err));
            CHECKF(st == OB_OK, "%s: %s", arch, err);
        }
    }
    printf("%s: ob_decode_sample greedy %d/%d golden tokens\n", arch, ok, ng);
    ob_sampler_free(s);
    ob_context_free(c);
    ob_model_free(m);
    json_decref(meta);
}

/* Two sequences decoded together; seeded sampling through ob_decode_sample (in the graph,
 * and on the host when penalties rule the device out) against ob_decode +
 * ob_sampler_sample on a second context. */
static void e2e_seeded(const char *arch, bool penalties) {
    char path[256], err[512] = "";
    snprintf(path, sizeof(path), FIX "%s.gguf", arch);
    ob_model_params mp = ob_model_default_params();
    mp.n_threads = 2;
    ob_model *m = NULL;
    ob_context *c[2] = {NULL, NULL};
    ob_status st = ob_model_load(path, &mp, &m, err, sizeof(err));
    CHECKF(st == OB_OK, "%s: %s", arch, err);
    ob_context_params cp = ob_context_default_params();
    cp.n_ctx = 64;
    cp.n_seq = 2;
    cp.n_batch = 16;
    for (int k = 0; k < 2 && !st; k++) st = ob_context_new(m, &cp, &c[k], err, sizeof(err));
    CHECKF(st == OB_OK, "%s: %s", arch, err);
    if (st) { ob_context_free(c[0]); ob_model_free(m); return; }
    const int V = ob_tokenizer_n_vocab(ob_model_tokenizer(m));
    ob_sampler *s[2][2];
    for (int k = 0; k < 2; k++)
        for (int q = 0; q < 2; q++) {
            ob_sampler_params sp = ob_sampler_default_params();
            sp.temperature = q ? 1.3f : 0.7f;
            sp.top_k = q ? 1024 : 20;
            sp.top_p = q ? 1.0f : 0.9f;
            sp.min_p = q ? 0.0f : 0.02f;
            sp.seed = 42 + (uint64_t)q;
            if (penalties) sp.repeat_penalty = 1.3f;
            s[k][q] = ob_sampler_new(&sp, V);
        }
    CHECK(ob_sampler_device_ok(s[0][0]) == !penalties);
    int32_t cur[2][2] = {{1, 2}, {1, 2}};
    int same = 0, steps = 24, differ_from_greedy = 0;
    for (int step = 0; step < steps && !st; step++) {
        int32_t pos[2] = {step, step}, seq[2] = {0, 1};
        int8_t want[2] = {1, 1};
        ob_batch b0 = {2, cur[0], pos, seq, want};
        int32_t got[2] = {-1, -1};
        st = ob_decode_sample(c[0], &b0, s[0], got, err, sizeof(err));
        CHECKF(st == OB_OK, "%s: %s", arch, err);
        ob_batch b1 = {2, cur[1], pos, seq, want};
        if (!st) st = ob_decode(c[1], &b1, err, sizeof(err));
        CHECKF(st == OB_OK, "%s: %s", arch, err);
        if (st) break;
        for (int q = 0; q < 2; q++) {
            const float *lg = ob_get_logits(c[1], q);
            const int32_t ref = ob_sampler_sample(s[1][q], lg);
            differ_from_greedy += ref != first_max(lg, V);
            if (got[q] == ref) same++;
            else CHECKF(0, "%s step %d seq %d: ob_decode_sample %d, host %d", arch, step, q, got[q], ref);
            cur[0][q] = got[q];
            cur[1][q] = ref;
        }
    }
    CHECK(differ_from_greedy > 0); /* really sampled */
    printf("%s (%s): ob_decode_sample seeded %d/%d tokens equal to the host sampler\n", arch,
           penalties ? "penalties, host path" : "in the graph", same, 2 * steps);
    for (int k = 0; k < 2; k++) {
        for (int q = 0; q < 2; q++) ob_sampler_free(s[k][q]);
        ob_context_free(c[k]);
    }
    ob_model_free(m);
}

int main(void) {
    ob_backend *be = ob_backend_cpu_new(2);
    test_op_vs_sampler(be);
    test_op_large(be);
    test_op_short_vocab(be);
    ob_backend_free(be);
    e2e_greedy("llama");
    e2e_greedy("qwen2");
    e2e_greedy("gemma3");
    e2e_seeded("qwen2", false);
    e2e_seeded("llama", true);
    return ob_test_done("sample");
}
