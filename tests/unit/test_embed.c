/* Embeddings end to end on tiny random transformers models (tests/fixtures/embed/, made by
 * make_fixtures.py): `convert` of the HF folder, load, pooled outputs of three sequences
 * in one batch against transformers (1e-4 relative, F32), rank scores of the rerankers;
 * the POOL op against its reference; bad input to convert and to embeddings decode. */
#include "backend/cpu/cpu.h"
#include "convert/convert.h"
#include "rag/rag.h"
#include "testutil.h"
#include "testutil_embed.h"
#include "onebit.h"
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FIX "tests/fixtures/embed/"

static double rel_err(const float *a, const double *ref, int n) {
    double md = 0, mr = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (d > md || d != d) md = d != d ? INFINITY : d;
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    return md / (mr > 0 ? mr : 1);
}

static void tmp_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "/tmp/ob_test_embed_%d_%s.gguf", (int)getpid(), name);
}

/* Converts a fixture folder and loads it. */
static ob_model *convert_load(const char *name, ob_type type, char *gguf, size_t cap) {
    char dir[256], err[512] = "";
    snprintf(dir, sizeof(dir), FIX "%s", name);
    tmp_path(gguf, cap, name);
    ob_convert_opts o = {type, NULL};
    ob_status st = ob_convert_hf(dir, gguf, &o, err, sizeof(err));
    CHECKF(st == OB_OK, "convert %s: %s", name, err);
    if (st) return NULL;
    ob_model_params mp = ob_model_default_params();
    mp.n_threads = 2;
    ob_model *m = NULL;
    st = ob_model_load(gguf, &mp, &m, err, sizeof(err));
    CHECKF(st == OB_OK, "load %s: %s", name, err);
    return m;
}

/* name: the HF folder to convert; ref_name: the folder whose ref.json it must match. */
static void check_encoder_ref(const char *name, const char *ref_name, ob_type type, double tol) {
    char gguf[256], path[256], err[512] = "";
    snprintf(path, sizeof(path), FIX "%s/ref.json", ref_name);
    json_error_t je;
    json_t *ref = json_load_file(path, 0, &je);
    CHECKF(ref != NULL, "%s: %s", path, je.text);
    if (!ref) return;
    ob_model *m = convert_load(name, type, gguf, sizeof(gguf));
    json_t *seqs = json_object_get(ref, "seqs");
    int n_seq = (int)json_array_size(seqs);
    static const struct { const char *key; int pooling; } pools[] = {
        {"mean", OB_POOLING_MEAN}, {"cls", OB_POOLING_CLS}, {"last", OB_POOLING_LAST}, {"scores", OB_POOLING_RANK}};
    for (size_t p = 0; p < OB_ARRAY_LEN(pools) && m; p++) {
        json_t *want = json_object_get(ref, pools[p].key);
        if (!want) continue;
        ob_context_params cp = ob_context_default_params();
        cp.n_ctx = 64;
        cp.n_seq = n_seq + 1; /* one sequence stays unused: it must read back as absent */
        cp.n_batch = 128;
        cp.type_k = cp.type_v = OB_KV_F32;
        cp.embeddings = true;
        cp.pooling = pools[p].pooling == OB_POOLING_RANK ? OB_POOLING_DEFAULT : pools[p].pooling;
        cp.normalize = false;
        ob_context *c = NULL;
        ob_status st = ob_context_new(m, &cp, &c, err, sizeof(err));
        CHECKF(st == OB_OK, "%s %s: %s", name, pools[p].key, err);
        if (st) continue;
        /* Twice: the second call must start the sequences afresh. */
        for (int rep = 0; rep < 2 && !st; rep++) {
            st = ob_test_decode_seqs(c, seqs, err, sizeof(err));
            CHECKF(st == OB_OK, "%s %s: %s", name, pools[p].key, err);
        }
        int n = ob_context_n_embd(c);
        for (int s = 0; s < n_seq && !st; s++) {
            json_t *w = json_array_get(want, (size_t)s);
            CHECKF((int)json_array_size(w) == n, "%s: width %d vs %zu", name, n, json_array_size(w));
            double r[1024];
            for (int i = 0; i < n && i < 1024; i++) r[i] = json_real_value(json_array_get(w, (size_t)i));
            const float *e = ob_get_embeddings(c, s);
            CHECK(e != NULL);
            if (!e) continue;
            double er = rel_err(e, r, n);
            CHECKF(er <= tol, "%s %s seq %d: rel err %.3g > %.1g", name, pools[p].key, s, er, tol);
            printf("%s %s seq %d: rel err %.3g\n", name, pools[p].key, s, er);
            if (pools[p].pooling == OB_POOLING_RANK) CHECK(fabsf(ob_get_rank_score(c, s) - e[0]) == 0);
        }
        CHECK(ob_get_embeddings(c, n_seq) == NULL);
        CHECK(ob_get_logits(c, 0) == NULL);
        if (pools[p].pooling != OB_POOLING_RANK) CHECK(isnan(ob_get_rank_score(c, 0)));
        ob_context_free(c);
    }
    /* Normalised mean pooling: unit length, same direction. */
    if (m && json_object_get(ref, "mean")) {
        ob_context_params cp = ob_context_default_params();
        cp.n_ctx = 64; cp.n_seq = n_seq; cp.n_batch = 128; cp.embeddings = true; cp.pooling = OB_POOLING_MEAN;
        cp.type_k = cp.type_v = OB_KV_F32;
        ob_context *c = NULL;
        if (ob_context_new(m, &cp, &c, err, sizeof(err)) == OB_OK && ob_test_decode_seqs(c, seqs, err, sizeof(err)) == OB_OK) {
            const float *e = ob_get_embeddings(c, 1);
            double nn = 0;
            for (int i = 0; e && i < ob_context_n_embd(c); i++) nn += (double)e[i] * e[i];
            CHECKF(fabs(sqrt(nn) - 1) < 1e-5, "%s: normalised length %g", name, sqrt(nn));
            /* An embeddings batch larger than n_batch is refused, not split. */
            int32_t tok[200] = {0}, pos[200], sq[200] = {0};
            for (int i = 0; i < 200; i++) { pos[i] = i; tok[i] = 5; }
            ob_batch big = {200, tok, pos, sq, NULL};
            CHECK(ob_decode(c, &big, err, sizeof(err)) == OB_ERR_CONTEXT);
        } else {
            CHECKF(0, "%s: %s", name, err);
        }
        ob_context_free(c);
    }
    ob_model_free(m);
    unlink(gguf);
    json_decref(ref);
}

static void check_encoder(const char *name, ob_type type, double tol) { check_encoder_ref(name, name, type, tol); }

/* The pickle reader: a malicious checkpoint is refused without running it; mutated and
 * truncated checkpoints give an error or a model, never a crash (ASan watches). */
static void test_pickle(void) {
    char out[256], err[512] = "", dir[128], cmd[512];
    tmp_path(out, sizeof(out), "pk");
    ob_convert_opts o = {OB_TYPE_F32, NULL};
    unlink("/tmp/onebit_pickle_pwned");
    ob_status st = ob_convert_hf(FIX "evil-pt", out, &o, err, sizeof(err));
    CHECKF(st == OB_ERR_UNSUPPORTED && strstr(err, "system"), "evil pickle: %d %s", st, err);
    CHECK(access(out, F_OK) != 0);
    CHECK(access("/tmp/onebit_pickle_pwned", F_OK) != 0);
    size_t len = 0;
    unsigned char *orig = ob_test_read_file(FIX "bert-pt/pytorch_model.bin", &len);
    CHECK(orig && len > 5000);
    if (!orig) return;
    snprintf(dir, sizeof(dir), "/tmp/ob_test_embed_%d_pk", (int)getpid());
    snprintf(cmd, sizeof(cmd), "mkdir -p %s && cp " FIX "bert-pt/config.json " FIX "bert-pt/vocab.txt %s/", dir, dir);
    CHECK(system(cmd) == 0);
    char bin[256];
    snprintf(bin, sizeof(bin), "%s/pytorch_model.bin", dir);
    unsigned char *buf = malloc(len);
    ob_rng r;
    ob_rng_seed(&r, 7);
    int n_ok = 0, n_err = 0;
    for (int it = 0; it < 300; it++) {
        memcpy(buf, orig, len);
        size_t n = len;
        if (it % 10 == 9) n = (size_t)(ob_rng_u64(&r) % len); /* truncated */
        else {
            int k = 1 + (int)(ob_rng_u64(&r) % 4);
            /* data.pkl is the first entry; also hit the central directory at the end. */
            for (int j = 0; j < k; j++) {
                size_t at = it % 3 == 2 ? len - 1 - (size_t)(ob_rng_u64(&r) % 600) : 40 + (size_t)(ob_rng_u64(&r) % 3900);
                buf[at] = (unsigned char)ob_rng_u64(&r);
            }
        }
        FILE *f = fopen(bin, "wb");
        if (!f) break;
        fwrite(buf, 1, n, f);
        fclose(f);
        err[0] = 0;
        if (ob_convert_hf(dir, out, &o, err, sizeof(err)) == OB_OK) n_ok++;
        else { n_err++; CHECKF(err[0] != 0, "iteration %d: error without a message", it); }
        unlink(out);
    }
    printf("pickle mutations: %d converted, %d refused\n", n_ok, n_err);
    CHECK(n_err > 0);
    free(buf);
    free(orig);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* A decoder as embedder (Qwen3-Embedding style): causal attention, last-token and mean
 * pooling of the final normed states, on the tiny qwen3 of tests/fixtures/models. */
static void check_decoder_embed(void) {
    json_error_t je;
    json_t *ref = json_load_file(FIX "qwen3-embed.json", 0, &je);
    CHECKF(ref != NULL, "qwen3-embed.json: %s", je.text);
    if (!ref) return;
    char err[512] = "";
    ob_model_params mp = ob_model_default_params();
    mp.n_threads = 2;
    ob_model *m = NULL;
    ob_status st = ob_model_load("tests/fixtures/models/qwen3.gguf", &mp, &m, err, sizeof(err));
    CHECKF(st == OB_OK, "qwen3: %s", err);
    json_t *seqs = json_object_get(ref, "seqs");
    static const struct { const char *key; int pooling; } pools[] = {{"last", OB_POOLING_LAST}, {"mean", OB_POOLING_MEAN}};
    for (size_t p = 0; p < OB_ARRAY_LEN(pools) && !st; p++) {
        ob_context_params cp = ob_context_default_params();
        cp.n_ctx = 64; cp.n_seq = 3; cp.n_batch = 128; cp.embeddings = true; cp.pooling = pools[p].pooling;
        cp.normalize = false;
        cp.type_k = cp.type_v = OB_KV_F32;
        ob_context *c = NULL;
        if ((st = ob_context_new(m, &cp, &c, err, sizeof(err))) || (st = ob_test_decode_seqs(c, seqs, err, sizeof(err)))) {
            CHECKF(0, "qwen3 %s: %s", pools[p].key, err);
            ob_context_free(c);
            break;
        }
        json_t *want = json_object_get(ref, pools[p].key);
        for (int s = 0; s < 3; s++) {
            json_t *w = json_array_get(want, (size_t)s);
            int n = ob_context_n_embd(c);
            CHECK((int)json_array_size(w) == n && n <= 1024);
            double r[1024];
            for (int i = 0; i < n && i < 1024; i++) r[i] = json_real_value(json_array_get(w, (size_t)i));
            const float *e = ob_get_embeddings(c, s);
            CHECK(e != NULL);
            double er = e ? rel_err(e, r, n) : INFINITY;
            CHECKF(er <= 1e-4, "qwen3 %s seq %d: rel err %.3g", pools[p].key, s, er);
            printf("qwen3 %s seq %d: rel err %.3g\n", pools[p].key, s, er);
        }
        ob_context_free(c);
    }
    /* A decoder without a rank head cannot rank. */
    ob_context_params cp = ob_context_default_params();
    cp.embeddings = true; cp.pooling = OB_POOLING_RANK; cp.n_ctx = 64;
    ob_context *c = NULL;
    if (m) CHECK(ob_context_new(m, &cp, &c, err, sizeof(err)) == OB_ERR_ARG && c == NULL);
    ob_model_free(m);
    json_decref(ref);
}

/* `convert` of decoder HF folders (tests/fixtures/embed/<arch>-hf, the same tiny models as
 * tests/fixtures/models): the logits of the committed prompt match transformers'. Llama's
 * q/k rows are reordered by the converter: a wrong order fails here. */
static void check_decoder_convert(const char *arch) {
    char path[256], gguf[256], err[512] = "";
    snprintf(path, sizeof(path), "tests/fixtures/models/%s.json", arch);
    json_error_t je;
    json_t *meta = json_load_file(path, 0, &je);
    CHECKF(meta != NULL, "%s: %s", path, je.text);
    if (!meta) return;
    char name[32];
    snprintf(name, sizeof(name), "%s-hf", arch);
    ob_model *m = convert_load(name, OB_TYPE_F32, gguf, sizeof(gguf));
    json_t *jp = json_object_get(meta, "prompt");
    int np = (int)json_array_size(jp), vocab = (int)json_integer_value(json_object_get(meta, "vocab"));
    snprintf(path, sizeof(path), "tests/fixtures/models/%s.logits.f32", arch);
    size_t len = 0;
    float *ref = ob_test_read_file(path, &len);
    CHECK(ref && len == sizeof(float) * (size_t)np * (size_t)vocab && np <= 128);
    ob_context *c = NULL;
    if (m && ref && np <= 128) {
        ob_context_params cp = ob_context_default_params();
        cp.n_ctx = 128; cp.type_k = cp.type_v = OB_KV_F32;
        ob_status st = ob_context_new(m, &cp, &c, err, sizeof(err));
        CHECKF(st == OB_OK, "%s: %s", arch, err);
        int32_t tok[128], pos[128], seq[128];
        int8_t want[128];
        for (int i = 0; i < np; i++) { tok[i] = (int32_t)json_integer_value(json_array_get(jp, (size_t)i)); pos[i] = i; seq[i] = 0; want[i] = 1; }
        ob_batch b = {np, tok, pos, seq, want};
        if (!st) st = ob_decode(c, &b, err, sizeof(err));
        CHECKF(st == OB_OK, "%s: %s", arch, err);
        double worst = 0;
        for (int i = 0; i < np && !st; i++) {
            const float *lg = ob_get_logits(c, i);
            double md = 0, mr = 0;
            for (int v = 0; v < vocab; v++) {
                double d = fabs((double)lg[v] - ref[(size_t)i * vocab + v]);
                if (d > md || d != d) md = d != d ? INFINITY : d;
                if (fabs(ref[(size_t)i * vocab + v]) > mr) mr = fabs(ref[(size_t)i * vocab + v]);
            }
            if (md / mr > worst || md != md) worst = md / mr;
        }
        CHECKF(worst <= 1e-4, "%s converted: logits rel err %.3g", arch, worst);
        printf("%s converted from HF: logits rel err %.3g\n", arch, worst);
    }
    ob_context_free(c);
    ob_model_free(m);
    unlink(gguf);
    free(ref);
    json_decref(meta);
}

/* ATTENTION with ALiBi (f[2]): the kernel on 1..3 threads against the reference, causal and
 * whole-sequence, 6 heads (the non-power-of-two slopes) over 3 KV heads, two sequences
 * interleaved; and the bias must change the output. */
static void test_alibi_op(void) {
    ob_rng r;
    ob_rng_seed(&r, 11);
    enum { HD = 16, H = 6, NKV = 3, T = 13, CPS = 16, NSEQ = 2 };
    float *q = malloc(sizeof(float) * HD * H * T), *kc = malloc(sizeof(float) * HD * NKV * CPS * NSEQ);
    float *vc = malloc(sizeof(float) * HD * NKV * CPS * NSEQ), order = 0;
    ob_rng_fill_normal(&r, q, HD * H * T, 1.5f);
    ob_rng_fill_normal(&r, kc, HD * NKV * CPS * NSEQ, 1.5f);
    ob_rng_fill_normal(&r, vc, HD * NKV * CPS * NSEQ, 1.0f);
    int32_t pos[T], seq[T], cnt[NSEQ] = {0};
    for (int t = 0; t < T; t++) { seq[t] = t % 2; pos[t] = cnt[seq[t]]++; }
    for (int causal = 0; causal < 2; causal++) {
        float plain[HD * H * T];
        for (int alibi = 0; alibi < 2; alibi++)
            for (int th = 1; th <= 3; th++) {
                ob_backend *be = ob_backend_cpu_new(th);
                ob_graph *g = ob_graph_new(16);
                int64_t nq[3] = {HD, H, T}, nk[2] = {HD * NKV, CPS * NSEQ}, nt[1] = {T}, n1[1] = {1};
                ob_tensor *tq = ob_leaf(g, "q", OB_TYPE_F32, 3, nq, q);
                ob_tensor *tk = ob_leaf(g, "k", OB_TYPE_F32, 2, nk, kc), *tv = ob_leaf(g, "v", OB_TYPE_F32, 2, nk, vc);
                ob_tensor *tp = ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos), *ts = ob_leaf(g, "seq", OB_TYPE_I32, 1, nt, seq);
                ob_tensor *to = ob_leaf(g, "order", OB_TYPE_F32, 1, n1, &order);
                ob_tensor *a = ob_attention(g, tq, tk, tv, tp, ts, to, CPS, NKV, 0, causal, 0.25f, 0.0f);
                a->fp[2] = alibi ? 8.0f : 0.0f;
                ob_graph_plan(g);
                void *scratch = aligned_alloc(64, (g->scratch_size + 63) & ~(size_t)63);
                ob_graph_bind(g, scratch);
                CHECK(be->iface->compute(be, g, NULL, 0) == OB_OK);
                float ref[HD * H * T];
                void *saved = a->data;
                a->data = ref;
                ob_cpu_ref_op(a);
                a->data = saved;
                double worst = 0, diff = 0;
                for (int i = 0; i < HD * H * T; i++) {
                    double d = fabs((double)((float *)a->data)[i] - ref[i]);
                    if (d > worst || d != d) worst = d != d ? INFINITY : d;
                    if (alibi) diff = fmax(diff, fabs((double)ref[i] - plain[i]));
                }
                if (!alibi) memcpy(plain, ref, sizeof(plain));
                CHECKF(worst < 1e-5, "attention causal=%d alibi=%d nth=%d: err %g", causal, alibi, th, worst);
                if (alibi) CHECKF(diff > 1e-2, "alibi changed nothing (%g)", diff);
                free(scratch);
                ob_graph_free(g);
                ob_backend_free(be);
            }
    }
    free(q); free(kc); free(vc);
}

/* POOL kernel (threads 1..3) against the double-precision reference, sequences interleaved. */
static void test_pool_op(void) {
    ob_rng r;
    ob_rng_seed(&r, 99);
    int64_t n = 37, T = 29, S = 5;
    float *x = malloc(sizeof(float) * (size_t)(n * T));
    ob_rng_fill_normal(&r, x, n * T, 2.0f);
    int32_t seq[29], pos[29], cnt[5] = {0};
    for (int t = 0; t < T; t++) { seq[t] = (int32_t)(ob_rng_u64(&r) % 4); pos[t] = cnt[seq[t]]++; } /* seq 4 empty */
    for (int th = 1; th <= 3; th++) {
        ob_backend *be = ob_backend_cpu_new(th);
        for (int type = OB_POOL_MEAN; type <= OB_POOL_LAST; type++)
            for (int norm = 0; norm < 2; norm++) {
                ob_graph *g = ob_graph_new(8);
                int64_t nx[2] = {n, T}, nt[1] = {T};
                ob_tensor *tx = ob_leaf(g, "x", OB_TYPE_F32, 2, nx, x);
                ob_tensor *ts = ob_leaf(g, "seq", OB_TYPE_I32, 1, nt, seq);
                ob_tensor *tp = ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos);
                ob_tensor *o = ob_pool(g, tx, ts, tp, (ob_pool_type)type, norm, (int)S);
                CHECK(be->iface->supports(be, o));
                ob_graph_plan(g);
                void *scratch = aligned_alloc(64, (g->scratch_size + 63) & ~(size_t)63);
                ob_graph_bind(g, scratch);
                memset(scratch, 0x7f, g->scratch_size);
                CHECK(be->iface->compute(be, g, NULL, 0) == OB_OK);
                float ref[37 * 5];
                void *saved = o->data;
                o->data = ref;
                ob_cpu_ref_op(o);
                o->data = saved;
                double worst = 0;
                for (int64_t i = 0; i < n * S; i++) {
                    double d = fabs((double)((float *)o->data)[i] - ref[i]);
                    if (d > worst || d != d) worst = d != d ? INFINITY : d;
                }
                CHECKF(worst < 1e-5, "pool type %d norm %d nth %d: err %g", type, norm, th, worst);
                /* Spot-check the definition: CLS of seq 0 is its first token, seq 4 is zeros. */
                if (type == OB_POOL_CLS && !norm) {
                    int first = 0;
                    while (seq[first] != 0) first++;
                    CHECK(((float *)o->data)[0] == x[first * n]);
                }
                CHECK(((float *)o->data)[4 * n] == 0.0f);
                free(scratch);
                ob_graph_free(g);
            }
        ob_backend_free(be);
    }
    free(x);
}

static void test_convert_bad_input(void) {
    char out[256], err[512];
    tmp_path(out, sizeof(out), "bad");
    ob_convert_opts o = {OB_TYPE_F32, NULL};
    /* A folder that is not a model. */
    err[0] = 0;
    CHECK(ob_convert_hf("tests/fixtures/text", out, &o, err, sizeof(err)) != OB_OK && strstr(err, "not a model"));
    CHECK(access(out, F_OK) != 0);
    /* A folder that does not exist. */
    err[0] = 0;
    CHECK(ob_convert_hf("tests/fixtures/embed/nope", out, &o, err, sizeof(err)) != OB_OK && err[0]);
    /* An architecture we do not know is refused by name. */
    char dir[128];
    snprintf(dir, sizeof(dir), "/tmp/ob_test_embed_%d_dir", (int)getpid());
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "mkdir -p %s && cp " FIX "bert/* %s/ && "
             "sed -i 's/\"BertModel\"/\"MysteryModel\"/' %s/config.json", dir, dir, dir);
    CHECK(system(cmd) == 0);
    err[0] = 0;
    CHECK(ob_convert_hf(dir, out, &o, err, sizeof(err)) == OB_ERR_UNSUPPORTED && strstr(err, "MysteryModel"));
    CHECK(access(out, F_OK) != 0);
    /* Shards plus a consolidated copy: the index picks the shards, no duplicate error. */
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s && cp " FIX "bert-sharded/* %s/ && cp " FIX "bert/model.safetensors %s/",
             dir, dir, dir, dir);
    CHECK(system(cmd) == 0);
    err[0] = 0;
    CHECKF(ob_convert_hf(dir, out, &o, err, sizeof(err)) == OB_OK, "shards + copy: %s", err);
    unlink(out);
    /* A truncated safetensors file. */
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", dir, dir);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof(cmd), "cp " FIX "bert/config.json %s/ && head -c 3000 " FIX "bert/model.safetensors > %s/model.safetensors",
             dir, dir);
    CHECK(system(cmd) == 0);
    err[0] = 0;
    CHECK(ob_convert_hf(dir, out, &o, err, sizeof(err)) == OB_ERR_FORMAT && err[0]);
    CHECK(access(out, F_OK) != 0);
    /* A header claiming more data than the file has. */
    {
        char p[256];
        snprintf(p, sizeof(p), "%s/model.safetensors", dir);
        FILE *f = fopen(p, "wb");
        const char *h = "{\"x\":{\"dtype\":\"F32\",\"shape\":[1000000,1000000],\"data_offsets\":[0,16]}}";
        uint64_t hl = strlen(h);
        fwrite(&hl, 8, 1, f);
        fwrite(h, 1, hl, f);
        fwrite("0123456789abcdef", 1, 16, f);
        fclose(f);
        err[0] = 0;
        CHECK(ob_convert_hf(dir, out, &o, err, sizeof(err)) == OB_ERR_FORMAT && err[0]);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

static int words(const char *s) {
    int w = 0;
    for (bool in = false; *s; s++) {
        bool sp = *s == ' ' || *s == '\n' || *s == '\t';
        if (!sp && !in) w++;
        in = !sp;
    }
    return w;
}

/* Chunking: sizes, heading paths, line numbers, long paragraphs, degenerate input. */
static void test_chunker(void) {
    char err[256];
    ob_rag_chunk *ch = NULL;
    int n = 0;
    const char *md = "# Guide\n\nIntro words here.\n\n## Part A\nalpha beta\ngamma\n\n## Part B\n\ndelta.\n";
    CHECK(ob_rag_chunk_text(md, strlen(md), 50, &ch, &n, err, sizeof(err)) == OB_OK);
    CHECK(n == 3);
    if (n == 3) {
        CHECK(!strcmp(ch[0].text, "Guide\nIntro words here.") && ch[0].line == 3);
        CHECK(!strcmp(ch[1].text, "Guide > Part A\nalpha beta\ngamma") && ch[1].line == 6);
        CHECK(!strcmp(ch[2].text, "Guide > Part B\ndelta.") && ch[2].line == 11);
    }
    ob_rag_chunks_free(ch, n);
    /* A 1000-word paragraph with sentences every 7 words, then one with no sentence end. */
    char *big = malloc(20000);
    size_t k = 0;
    for (int i = 0; i < 1000; i++) k += (size_t)sprintf(big + k, "w%d%s", i, i % 7 == 6 ? ". " : " ");
    k += (size_t)sprintf(big + k, "\n\n");
    for (int i = 0; i < 500; i++) k += (size_t)sprintf(big + k, "x%d ", i);
    ch = NULL; n = 0;
    CHECK(ob_rag_chunk_text(big, k, 64, &ch, &n, err, sizeof(err)) == OB_OK);
    int total = 0;
    for (int i = 0; i < n; i++) {
        int w = words(ch[i].text);
        total += w;
        CHECKF(w > 0 && w <= 64, "chunk %d has %d words", i, w);
    }
    CHECKF(total == 1500, "words kept %d of 1500", total);
    CHECK(n >= 1500 / 64);
    /* Cut at sentence ends where there are some: the first chunk ends with a period. */
    if (n) CHECK(ch[0].text[strlen(ch[0].text) - 1] == '.');
    ob_rag_chunks_free(ch, n);
    free(big);
    /* Nothing but whitespace and headings: no chunks, no error. */
    const char *empty = "\n\n   \n# Only\n## Headings\n";
    ch = NULL; n = 0;
    CHECK(ob_rag_chunk_text(empty, strlen(empty), 50, &ch, &n, err, sizeof(err)) == OB_OK && n == 0);
    ob_rag_chunks_free(ch, n);
    ch = NULL; n = 0;
    CHECK(ob_rag_chunk_text("", 0, 50, &ch, &n, err, sizeof(err)) == OB_OK && n == 0);
    ob_rag_chunks_free(ch, n);
}

int main(void) {
    test_chunker();
    test_pool_op();
    check_encoder("bert", OB_TYPE_F32, 1e-4);
    check_encoder("nomic-bert", OB_TYPE_F32, 1e-4);
    check_encoder("bert-rerank", OB_TYPE_F32, 1e-4);
    check_encoder("xlmr-rerank", OB_TYPE_F32, 1e-4);
    test_alibi_op();
    check_encoder("jina-bert-v2", OB_TYPE_F32, 1e-4);
    check_encoder("bert", OB_TYPE_F16, 5e-3);
    check_decoder_embed();
    check_encoder_ref("bert-pt", "bert", OB_TYPE_F32, 1e-4);
    check_encoder_ref("bert-sharded", "bert", OB_TYPE_F32, 1e-4);
    test_pickle();
    check_decoder_convert("qwen3");
    check_decoder_convert("llama");
    test_convert_bad_input();
    return ob_test_done("test_embed");
}
