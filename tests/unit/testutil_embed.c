/* Encoders end to end on a GPU backend, shared by the CUDA and Vulkan op tests: the HF
 * fixtures of tests/fixtures/embed/ converted to F32 GGUF, then the pooled vectors (or rank
 * scores) of three sequences in one batch on the device, strictly placed (every node on
 * the device: POOL, ACT tanh of the rank heads, ALiBi attention of jina-bert-v2), within
 * 1e-3 of the CPU backend, as the decoder fixtures. The tiny qwen3 as a Qwen3-Embedding
 * style decoder embedder too (causal, last/mean). */
#include "testutil_embed.h"
#include "testutil.h"
#include "convert/convert.h"
#include <jansson.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

ob_status ob_test_decode_seqs(ob_context *c, json_t *seqs, char *err, size_t err_len) {
    int32_t tok[256], pos[256], seq[256];
    int n = 0;
    for (size_t s = 0; s < json_array_size(seqs); s++) {
        json_t *js = json_array_get(seqs, s);
        for (size_t i = 0; i < json_array_size(js) && n < 256; i++, n++) {
            tok[n] = (int32_t)json_integer_value(json_array_get(js, i));
            pos[n] = (int32_t)i;
            seq[n] = (int32_t)s;
        }
    }
    ob_batch b = {n, tok, pos, seq, NULL};
    return ob_decode(c, &b, err, err_len);
}

static void check_embedder(const char *name, const char *gguf, json_t *seqs, ob_device_kind dev, const char *dname) {
    static const int pools[] = {OB_POOLING_DEFAULT, OB_POOLING_MEAN, OB_POOLING_CLS, OB_POOLING_LAST};
    int n_seq = (int)json_array_size(seqs);
    char err[512] = "";
    ob_model *m[2] = {NULL, NULL};
    for (int d = 0; d < 2; d++) {
        ob_model_params mp = ob_model_default_params();
        mp.device = d ? dev : OB_DEVICE_CPU;
        mp.n_threads = 2;
        ob_status st = ob_model_load(gguf, &mp, &m[d], err, sizeof(err));
        CHECKF(st == OB_OK, "%s on %s: %s", name, d ? dname : "cpu", err);
    }
    if (m[1]) {
        ob_model_info vi;
        ob_model_get_info(m[1], &vi);
        CHECK(vi.backend && !strcmp(vi.backend, dname));
    }
    for (size_t p = 0; p < sizeof(pools) / sizeof(pools[0]) && m[0] && m[1]; p++)
        for (int v = 0; v < (p == 0 ? 3 : 1); v++) {
            /* v: 0 F32 KV, 1 F16 KV, 2 normalised (not for rank scores: ignored there) */
            ob_context *c[2] = {NULL, NULL};
            ob_status st = OB_OK;
            for (int d = 0; d < 2 && !st; d++) {
                ob_context_params cp = ob_context_default_params();
                cp.n_ctx = 64;
                cp.n_seq = n_seq + 1; /* one sequence without tokens */
                cp.n_batch = 128;
                cp.type_k = cp.type_v = v == 1 ? OB_KV_F16 : OB_KV_F32;
                cp.embeddings = true;
                cp.pooling = pools[p];
                cp.normalize = v == 2;
                st = ob_context_new(m[d], &cp, &c[d], err, sizeof(err));
                /* LAST on a model whose own head ranks may be refused on both devices alike */
                if (st && d == 0) break;
                CHECKF(st == OB_OK, "%s pooling %d on %s: %s", name, pools[p], d ? dname : "cpu", err);
                if (!st) {
                    st = ob_test_decode_seqs(c[d], seqs, err, sizeof(err));
                    CHECKF(st == OB_OK, "%s pooling %d decode on %s: %s", name, pools[p], d ? dname : "cpu", err);
                }
            }
            if (!st && c[0] && c[1]) {
                int n = ob_context_n_embd(c[0]);
                CHECK(n == ob_context_n_embd(c[1]) && n > 0);
                double worst = 0;
                for (int s = 0; s < n_seq; s++) {
                    const float *e0 = ob_get_embeddings(c[0], s), *e1 = ob_get_embeddings(c[1], s);
                    CHECK(e0 && e1);
                    if (!e0 || !e1) continue;
                    double md = 0, mr = 0;
                    for (int i = 0; i < n; i++) {
                        double dd = fabs((double)e0[i] - e1[i]);
                        if (dd > md || dd != dd) md = dd != dd ? INFINITY : dd;
                        if (fabs(e0[i]) > mr) mr = fabs(e0[i]);
                    }
                    double rel = md / (mr > 0 ? mr : 1);
                    if (rel > worst || rel != rel) worst = rel;
                }
                CHECK(ob_get_embeddings(c[1], n_seq) == NULL);
                CHECKF(worst <= 1e-3, "%s pooling %d variant %d: %s rel err %.3g", name, pools[p], v, dname, worst);
                printf("embed %s pooling %d variant %d: %s vs cpu max rel err %.3g\n", name, pools[p], v, dname, worst);
            }
            for (int d = 0; d < 2; d++) ob_context_free(c[d]);
        }
    for (int d = 0; d < 2; d++) ob_model_free(m[d]);
}

/* A fixture the device cannot place: strict loading must refuse it with the one-line
 * placement error (node, op, shape), not run it partly on the CPU. */
static void check_refused(const char *name, const char *gguf, ob_device_kind dev, const char *dname) {
    char err[512] = "";
    ob_model *m = NULL;
    ob_model_params mp = ob_model_default_params();
    mp.device = dev;
    ob_status st = ob_model_load(gguf, &mp, &m, err, sizeof(err));
    ob_context *c = NULL;
    if (st == OB_OK) {
        ob_context_params cp = ob_context_default_params();
        cp.n_ctx = 64;
        cp.embeddings = true;
        st = ob_context_new(m, &cp, &c, err, sizeof(err));
    }
    CHECKF(st != OB_OK && strstr(err, "placement: node") && strstr(err, dname), "%s on %s: expected a placement error, got %d '%s'",
           name, dname, (int)st, err);
    printf("embed %s on %s: refused as expected: %s\n", name, dname, err);
    ob_context_free(c);
    ob_model_free(m);
}

void ob_test_encoders_on(ob_device_kind dev, const char *dname, const char *const *refused) {
    static const char *fix[] = {"bert", "nomic-bert", "jina-bert-v2", "bert-rerank", "xlmr-rerank"};
    for (size_t f = 0; f < sizeof(fix) / sizeof(fix[0]); f++) {
        char dir[256], path[300], gguf[256], err[512] = "";
        snprintf(dir, sizeof(dir), "tests/fixtures/embed/%s", fix[f]);
        snprintf(path, sizeof(path), "%s/ref.json", dir);
        snprintf(gguf, sizeof(gguf), "/tmp/ob_test_%s_%d_%s.gguf", dname, (int)getpid(), fix[f]);
        json_error_t je;
        json_t *ref = json_load_file(path, 0, &je);
        CHECKF(ref != NULL, "%s: %s", path, je.text);
        if (!ref) continue;
        ob_convert_opts o = {OB_TYPE_F32, NULL};
        ob_status st = ob_convert_hf(dir, gguf, &o, err, sizeof(err));
        CHECKF(st == OB_OK, "convert %s: %s", fix[f], err);
        bool refuse = false;
        for (int r = 0; refused && refused[r]; r++) refuse = refuse || !strcmp(refused[r], fix[f]);
        if (!st && refuse) check_refused(fix[f], gguf, dev, dname);
        else if (!st) check_embedder(fix[f], gguf, json_object_get(ref, "seqs"), dev, dname);
        unlink(gguf);
        json_decref(ref);
    }
    json_error_t je;
    json_t *ref = json_load_file("tests/fixtures/embed/qwen3-embed.json", 0, &je);
    CHECKF(ref != NULL, "qwen3-embed.json: %s", je.text);
    if (ref) check_embedder("qwen3", "tests/fixtures/models/qwen3.gguf", json_object_get(ref, "seqs"), dev, dname);
    json_decref(ref);
}
