/* Golden end-to-end test: tiny random models of each architecture (made with
 * transformers by tests/fixtures/models/make_fixtures.py) give the same logits
 * (1e-4 relative, F32 weights and KV) and the same 32 greedy tokens as transformers.
 *
 * Far positions: each fixture again over a 2,048-token prompt and 32 more tokens fed one
 * at a time (the decode kernels, fused ones included, at positions 2048-2079), on every
 * backend this build has, and the RoPE variants (llama3 at factors 8 and 32, YaRN) in
 * the GGUF llama.cpp's own converter wrote and in the one `1bit convert` writes from the
 * same Hugging Face folder, and the mixture-of-experts fixtures (qwen3moe; glm4moelite, GLM-4.7-Flash's
 * class as deepseek2: latent attention, shared experts, a dense first layer, YaRN; gptoss:
 * sinks, sliding and full layers, MXFP4 experts with biases, the clamped SwiGLU) the same way,
 * and the hybrid fixtures (issue #33: qwen35, Gated DeltaNet and gated attention; qwen35moe, the
 * same with routed experts and a sigmoid-gated shared expert; lfm2, short convolutions and
 * attention) in llama.cpp's file, with their recurrent state's checkpoints and
 * the fallback to decoding again when a sequence is cut where it has none.
 * Errors are printed by position range; a backend this build has but this machine lacks,
 * or one without kernels for a fixture's ops, is reported SKIPPED.
 *
 * Usage: test_models [name ...]: only the fixtures named (every one without);
 * test_models cache-types: only the check of every KV cache type (check_cache_types). */
#include "testutil.h"
#include "onebit.h"
#include "convert/convert.h"
#include "backend/backend.h"
#include "format/gguf.h"
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#define FIX "tests/fixtures/models/"

/* The fixtures named on the command line (none: all). */
static int g_argc;
static char **g_argv;
static bool wanted(const char *name) {
    for (int i = 1; i < g_argc; i++)
        if (!strcmp(g_argv[i], name)) return true;
    return g_argc <= 1;
}

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
    /* a reference of another context over a fixture's model names its file ("model") */
    const char *model_stem = json_string_value(json_object_get(meta, "model"));
    snprintf(path, sizeof(path), FIX "%s.gguf", model_stem ? model_stem : arch);
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
 * server's promise that batched answers equal solo ones rests on this). The CPU backend
 * guarantees it by construction, with or without --deterministic: threads split rows,
 * never one row's reduction, so each norm, softmax and attention sum runs in one order
 * whatever the batch; the multi-column matmul kernels keep one accumulator per column,
 * summed in the one-column kernel's order (this test is what holds them to it). The GPU
 * backends pick kernels and split sizes by batch size for speed, so they guarantee it only
 * in batch-invariant mode (ob_model_params.deterministic, backend.h): checked there with
 * the flag on. The 40-token prefill crosses every batch-size threshold the GPU kernels
 * have (matvec, tensor-core and cuBLAS matmuls; split and prefill attention). */
static void check_batch_invariance(const char *arch, ob_device_kind kind, const char *dname, bool det, bool may_refuse) {
    char path[256], err[512];
    snprintf(path, sizeof(path), FIX "%s.gguf", arch);
    ob_model_params mp = ob_model_default_params();
    mp.device = kind;
    mp.deterministic = det;
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
    ob_status st = ob_context_new(m, &cp, &c, err, sizeof(err));
    if (st == OB_ERR_UNSUPPORTED && may_refuse && kind != OB_DEVICE_CPU && !strncmp(err, "placement:", 10)) {
        printf("batch invariance %s on %s: SKIPPED (%s)\n", arch, dname, err);
        ob_model_free(m);
        return;
    }
    if (st) { CHECKF(0, "%s", err); ob_model_free(m); return; }
    int32_t tok[80], pos[80], seq[80];
    int8_t want[80];
    float *ref = malloc(sizeof(float) * (size_t)V * T);
    ob_rng r;
    ob_rng_seed(&r, 3);
    for (int i = 0; i < T; i++) { tok[i] = (int32_t)(ob_rng_u64(&r) % (uint64_t)(V - 2)); pos[i] = i; seq[i] = 0; want[i] = 1; }
    ob_batch b = {T, tok, pos, seq, want};
    CHECK(ob_decode(c, &b, err, sizeof(err)) == OB_OK);
    for (int i = 0; i < T; i++) memcpy(ref + (size_t)i * V, ob_get_logits(c, i), sizeof(float) * (size_t)V);
    /* sequence 1: one token per call (a model with recurrent layers keeps its state at 10, for
     * the cut below; the others have nothing to keep) */
    ob_seq_checkpoint_at(c, 1, 10);
    int bad_steps = 0, bad_mixed = 0, n_mixed = 0;
    for (int i = 0; i < T; i++) {
        int32_t p = i, s = 1;
        ob_batch one = {1, &tok[i], &p, &s, NULL};
        CHECK(ob_decode(c, &one, err, sizeof(err)) == OB_OK);
        if (memcmp(ob_get_logits(c, 0), ref + (size_t)i * V, sizeof(float) * (size_t)V)) bad_steps++;
    }
    /* sequence 2 interleaved with sequence 1's continuation, three tokens per call */
    ob_seq_truncate(c, 1, 10);
    CHECKF(ob_seq_len(c, 1) == 10, "%s: sequence 1 cut to 10 holds %d", arch, ob_seq_len(c, 1));
    for (int i = 0; i + 1 < T - 10; i += 2) {
        int32_t t3[3] = {tok[i], tok[i + 1], tok[10 + i / 2]}, p3[3] = {i, i + 1, 10 + i / 2}, s3[3] = {2, 2, 1};
        int8_t w3[3] = {1, 1, 1};
        ob_batch mix = {3, t3, p3, s3, w3};
        n_mixed++;
        CHECK(ob_decode(c, &mix, err, sizeof(err)) == OB_OK);
        if (memcmp(ob_get_logits(c, 0), ref + (size_t)i * V, sizeof(float) * (size_t)V) ||
            memcmp(ob_get_logits(c, 1), ref + (size_t)(i + 1) * V, sizeof(float) * (size_t)V) ||
            memcmp(ob_get_logits(c, 2), ref + (size_t)(10 + i / 2) * V, sizeof(float) * (size_t)V))
            bad_mixed++;
    }
    CHECKF(bad_steps == 0, "%s on %s%s: %d of %d single-token steps differ from prefill", arch, dname,
           det ? " (deterministic)" : "", bad_steps, T);
    CHECKF(bad_mixed == 0, "%s on %s%s: %d of %d mixed batches differ from prefill", arch, dname,
           det ? " (deterministic)" : "", bad_mixed, n_mixed);
    printf("batch invariance %s on %s%s: %d/%d steps, %d/%d mixed batches differ\n", arch, dname,
           det ? " (deterministic)" : "", bad_steps, T, bad_mixed, n_mixed);
    free(ref);
    ob_context_free(c);
    ob_model_free(m);
}

typedef struct dev { ob_device_kind kind; const char *name; } dev;

/* Positions [lo, hi) of the error table. */
static const int g_ranges[][2] = {{0, 16}, {16, 128}, {128, 512}, {512, 1536}, {1536, 2048}, {2048, 2080}};
#define N_RANGES ((int)(sizeof(g_ranges) / sizeof(g_ranges[0])))

/* The long reference `ref` (json + logits: rows for the prompt then for each greedy token
 * fed back; with "rows" in the json, only the positions it lists, ascending) against the model
 * file at path on device d: prefill in chunks of 512, then one token a step. The argmax of the
 * last prompt row and of each greedy row but the last must be the next greedy token.
 * may_refuse: a GPU backend without kernels for some of the model's ops (its strict placement
 * refuses the context) is reported SKIPPED, not failed. */
static void run_long(const char *ref, const char *path, const dev *d, const char *what, bool may_refuse) {
    char p[256], err[512];
    snprintf(p, sizeof(p), FIX "%s.json", ref);
    json_error_t je;
    json_t *meta = json_load_file(p, 0, &je);
    CHECKF(meta != NULL, "%s: %s", p, je.text);
    if (!meta) return;
    int V = (int)json_integer_value(json_object_get(meta, "vocab"));
    json_t *jp = json_object_get(meta, "prompt"), *jg = json_object_get(meta, "greedy");
    int np = (int)json_array_size(jp), ng = (int)json_array_size(jg), n = np + ng;
    json_t *jrows = json_object_get(meta, "rows");
    int n_rows = jrows ? (int)json_array_size(jrows) : n;
    snprintf(p, sizeof(p), FIX "%s.logits.f32", ref);
    size_t len = 0;
    float *want = ob_test_read_file(p, &len);
    CHECKF(want && len == sizeof(float) * (size_t)n_rows * (size_t)V && np >= 2048, "%s: %zu bytes for %d rows", p, len,
           n_rows);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n * 4);
    if (!want || len != sizeof(float) * (size_t)n_rows * (size_t)V || !tok) {
        free(want), free(tok), json_decref(meta);
        return;
    }
    int32_t *pos = tok + n, *seq = pos + n, *row_of = seq + n; /* row_of: the stored row of a position, or -1 */
    for (int i = 0; i < n; i++) row_of[i] = jrows ? -1 : i;
    for (int r = 0; jrows && r < n_rows; r++) {
        json_int_t at = json_integer_value(json_array_get(jrows, (size_t)r));
        if (at >= 0 && at < n) row_of[at] = r;
    }
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)json_integer_value(json_array_get(i < np ? jp : jg, (size_t)(i < np ? i : i - np)));
        pos[i] = i;
        seq[i] = 0;
    }
    ob_model_params mp = ob_model_default_params();
    mp.device = d->kind;
    mp.n_threads = 2;
    ob_model *m = NULL;
    if (ob_model_load(path, &mp, &m, err, sizeof(err))) {
        CHECKF(0, "%s on %s: %s", what, d->name, err);
        free(want), free(tok), json_decref(meta);
        return;
    }
    ob_context_params cp = ob_context_default_params();
    cp.n_ctx = n;
    cp.n_batch = 512;
    cp.type_k = cp.type_v = OB_KV_F32;
    ob_context *c = NULL;
    double rerr[N_RANGES] = {0};
    int top1[N_RANGES] = {0}, rows[N_RANGES] = {0}, greedy_bad = -1;
    ob_status st = ob_context_new(m, &cp, &c, err, sizeof(err));
    if (st == OB_ERR_UNSUPPORTED && may_refuse && d->kind != OB_DEVICE_CPU && !strncmp(err, "placement:", 10)) {
        printf("%-28s %-7s SKIPPED (%s)\n", what, d->name, err);
        ob_model_free(m);
        free(want), free(tok), json_decref(meta);
        return;
    }
    CHECKF(st == OB_OK, "%s: %s", what, err);
    int8_t *wantl = malloc((size_t)n);
    for (int i = 0; i < n && !st; i++) wantl[i] = 1;
    for (int at = 0; at < n && !st;) {
        int k = at < np ? (np - at < 512 ? np - at : 512) : 1;
        ob_batch b = {k, tok + at, pos + at, seq + at, wantl + at};
        st = ob_decode(c, &b, err, sizeof(err));
        CHECKF(st == OB_OK, "%s at %d: %s", what, at, err);
        for (int j = 0; j < k && !st; j++) {
            const int i = at + j;
            const float *got = ob_get_logits(c, j);
            int bg = 0;
            for (int v = 1; v < V; v++)
                if (got[v] > got[bg]) bg = v;
            if (i >= np - 1 && i < n - 1 && bg != tok[i + 1] && greedy_bad < 0) greedy_bad = i - (np - 1);
            if (row_of[i] < 0) continue;
            const float *ref_row = want + (size_t)row_of[i] * V;
            double e = row_rel_err(got, ref_row, V);
            int r = 0;
            while (r + 1 < N_RANGES && i >= g_ranges[r][1]) r++;
            if (e > rerr[r] || e != e) rerr[r] = e != e ? INFINITY : e;
            int br = 0;
            for (int v = 1; v < V; v++)
                if (ref_row[v] > ref_row[br]) br = v;
            top1[r] += bg == br;
            rows[r]++;
        }
        at += k;
    }
    if (!st) {
        printf("%-28s %-7s", what, d->name);
        for (int r = 0; r < N_RANGES; r++)
            printf(" [%d,%d) %.1e/%d%%", g_ranges[r][0], g_ranges[r][1], rerr[r], rows[r] ? 100 * top1[r] / rows[r] : 0);
        printf("\n");
        for (int r = 0; r < N_RANGES; r++)
            CHECKF(rerr[r] <= 1e-4, "%s on %s: positions [%d,%d): logits rel err %.3g > 1e-4", what, d->name,
                   g_ranges[r][0], g_ranges[r][1], rerr[r]);
        CHECKF(greedy_bad < 0, "%s on %s: greedy token %d differs from transformers'", what, d->name, greedy_bad);
    }
    free(wantl);
    ob_context_free(c);
    ob_model_free(m);
    free(want), free(tok), json_decref(meta);
}

/* Whether this machine has the device (a GPU backend that is built but finds no device
 * is reported SKIPPED, not passed). */
static bool dev_present(const dev *d) {
    char err[256] = "";
    ob_backend *b = NULL;
#ifdef ONEBIT_CUDA
    if (d->kind == OB_DEVICE_CUDA) b = ob_backend_cuda_new(0, false, err, sizeof(err));
#endif
#ifdef ONEBIT_VULKAN
    if (d->kind == OB_DEVICE_VULKAN) b = ob_backend_vulkan_new(0, false, err, sizeof(err));
#endif
    if (d->kind == OB_DEVICE_CPU) return true;
    if (!b) printf("%s: SKIPPED (no device: %s)\n", d->name, err);
    ob_backend_free(b);
    return b != NULL;
}

/* deepseek2 files from before llama.cpp split attn_kv_b into attn_k_b / attn_v_b: the
 * glm4moelite fixture rewritten with each layer's kv_b [kv_lora, H * (nope + v)], rebuilt
 * from its k_b [nope, kv_lora, H] and v_b [kv_lora, v, H], in their place loads through the
 * loader's own split and gives the same logits. */
static void run_legacy_kv_b(const dev *d) {
    char err[512], out[128];
    ob_gguf *g = NULL;
    if (ob_gguf_open(FIX "glm4moelite.gguf", &g, err, sizeof(err))) { CHECKF(0, "%s", err); return; }
    ob_gguf_writer *w = ob_gguf_writer_new(3, 0);
    ob_gguf_copy_kv(w, g);
    void *keep[32];
    int n_keep = 0;
    bool ok = w != NULL;
    for (int64_t i = 0; i < ob_gguf_n_tensors(g) && ok; i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
        const char *kb = strstr(t->name.p, "attn_k_b.weight");
        if (strstr(t->name.p, "attn_v_b.weight")) continue;
        if (!kb) {
            ok = ob_gguf_add_tensor(w, t->name.p, t->type, t->n_dims, t->ne, t->data, err, sizeof(err)) == OB_OK;
            continue;
        }
        char vname[96];
        snprintf(vname, sizeof(vname), "%.*sattn_v_b.weight", (int)(kb - t->name.p), t->name.p);
        const ob_gguf_tensor *v = ob_gguf_find_tensor(g, vname);
        ok = v && t->type == OB_TYPE_F32 && v->type == OB_TYPE_F32 && n_keep + 2 <= 32;
        if (!ok) break;
        const int64_t nope = t->ne[0], kvr = t->ne[1], H = t->ne[2], vd = v->ne[1], per = nope + vd;
        float *kv = malloc(sizeof(float) * (size_t)(kvr * H * per));
        char *name = malloc(96);
        keep[n_keep++] = kv;
        keep[n_keep++] = name;
        const float *k = t->data, *vv = v->data;
        for (int64_t h = 0; h < H; h++)
            for (int64_t c = 0; c < per; c++)
                for (int64_t j = 0; j < kvr; j++)
                    kv[(h * per + c) * kvr + j] = c < nope ? k[(h * kvr + j) * nope + c] : vv[(h * vd + c - nope) * kvr + j];
        snprintf(name, 96, "%.*sattn_kv_b.weight", (int)(kb - t->name.p), t->name.p);
        ok = ob_gguf_add_tensor(w, name, OB_TYPE_F32, 2, (const int64_t[]){kvr, H * per}, kv, err, sizeof(err)) == OB_OK;
    }
    snprintf(out, sizeof(out), "/tmp/ob_models_glm_kv_b_%d.gguf", (int)getpid());
    if (ok) ok = ob_gguf_writer_write(w, out, err, sizeof(err)) == OB_OK;
    CHECKF(ok, "rewriting glm4moelite with attn_kv_b: %s", err);
    if (ok) run_long("glm4moelite", out, d, "glm4moelite (attn_kv_b)", true);
    unlink(out);
    for (int i = 0; i < n_keep; i++) free(keep[i]);
    ob_gguf_writer_free(w);
    ob_gguf_close(g);
}

/* A hybrid model's recurrent state when a sequence is cut, on device d (a GPU in batch-invariant
 * mode, so a token's logits are the same bits in any batch as on the CPU; its checkpoints are
 * the backend's downloads and uploads of the state rows): a prefill that stops at a checkpoint gives the logits of one
 * without; a cut back to 30 resumes from the checkpoint at 24 and gives the same logits again;
 * a cut to 20, before every checkpoint, starts the sequence again (length 0); without
 * checkpoints every cut does. */
static void check_recurrent_cut(const char *arch, const dev *d) {
    char path[256], err[512];
    snprintf(path, sizeof(path), FIX "%s.gguf", arch);
    ob_model_params mp = ob_model_default_params();
    mp.device = d->kind;
    mp.n_threads = 2;
    /* a GPU's prefills of 24 and of 40 tokens agree bitwise only in batch-invariant mode */
    mp.deterministic = d->kind != OB_DEVICE_CPU;
    ob_model *m = NULL;
    if (ob_model_load(path, &mp, &m, err, sizeof(err))) { CHECKF(0, "%s", err); return; }
    CHECK(ob_model_has_recurrent_state(m));
    ob_model_info info;
    ob_model_get_info(m, &info);
    const int V = info.n_vocab, T = 40;
    int32_t tok[40], pos[40], seq[40];
    int8_t want[40];
    ob_rng r;
    ob_rng_seed(&r, 5);
    for (int i = 0; i < T; i++) { tok[i] = (int32_t)(ob_rng_u64(&r) % (uint64_t)(V - 2)); pos[i] = i; seq[i] = 0; want[i] = 1; }
    float *ref = malloc(sizeof(float) * (size_t)V * T);
    for (int ck = 2; ck >= 0; ck -= 2) {
        ob_context_params cp = ob_context_default_params();
        cp.n_ctx = 64;
        cp.n_seq_checkpoints = ck;
        ob_context *c = NULL;
        if (ob_context_new(m, &cp, &c, err, sizeof(err))) { CHECKF(0, "%s", err); break; }
        if (ck) ob_seq_checkpoint_at(c, 0, 24);
        ob_batch b = {T, tok, pos, seq, want};
        CHECK(ob_decode(c, &b, err, sizeof(err)) == OB_OK);
        int bad = 0;
        for (int i = 0; i < T; i++) {
            if (ck) memcpy(ref + (size_t)i * V, ob_get_logits(c, i), sizeof(float) * (size_t)V);
            else bad += memcmp(ob_get_logits(c, i), ref + (size_t)i * V, sizeof(float) * (size_t)V) != 0;
        }
        CHECKF(bad == 0, "%s: %d rows of a prefill cut at a checkpoint differ from one without", arch, bad);
        ob_seq_truncate(c, 0, 30);
        const int at = ob_seq_len(c, 0);
        CHECKF(at == (ck ? 24 : 0), "%s, %d checkpoints: cut to 30, the sequence holds %d", arch, ck, at);
        ob_batch rest = {T - at, tok + at, pos + at, seq + at, want + at};
        CHECK(ob_decode(c, &rest, err, sizeof(err)) == OB_OK);
        bad = 0;
        for (int i = at; i < T; i++) bad += memcmp(ob_get_logits(c, i - at), ref + (size_t)i * V, sizeof(float) * (size_t)V) != 0;
        CHECKF(bad == 0, "%s: %d rows decoded again after the cut differ", arch, bad);
        ob_seq_truncate(c, 0, 20);
        CHECKF(ob_seq_len(c, 0) == 0, "%s: cut before every checkpoint, the sequence holds %d", arch, ob_seq_len(c, 0));
        printf("recurrent cut %s on %s, %d checkpoints: resumed at %d, %d rows after it bitwise equal\n", arch, d->name, ck,
               at, T - at);
        ob_context_free(c);
    }
    free(ref);
    ob_model_free(m);
}

/* A hybrid fixture rewritten with one metadata key changed (a u32, or an i32 array of n) must
 * be refused at load with a line that names `names` (the tensor or key that disagrees). */
static void refuse_mutated(const char *arch, const char *key, uint32_t v, const int32_t *arr, int n, const char *names) {
    char path[256], out[128], err[512] = "";
    snprintf(path, sizeof(path), FIX "%s.gguf", arch);
    ob_gguf *g = NULL;
    if (ob_gguf_open(path, &g, err, sizeof(err))) { CHECKF(0, "%s", err); return; }
    ob_gguf_writer *w = ob_gguf_writer_new(3, 0);
    ob_gguf_copy_kv(w, g);
    if (arr) ob_gguf_set_arr(w, key, OB_GGUF_INT32, arr, (uint64_t)n);
    else ob_gguf_set_u32(w, key, v);
    bool ok = true;
    for (int64_t i = 0; i < ob_gguf_n_tensors(g) && ok; i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
        ok = ob_gguf_add_tensor(w, t->name.p, t->type, t->n_dims, t->ne, t->data, err, sizeof(err)) == OB_OK;
    }
    snprintf(out, sizeof(out), "/tmp/ob_models_bad_%s_%d.gguf", arch, (int)getpid());
    if (ok) ok = ob_gguf_writer_write(w, out, err, sizeof(err)) == OB_OK;
    CHECKF(ok, "rewriting %s: %s", arch, err);
    ob_model_params mp = ob_model_default_params();
    mp.device = OB_DEVICE_CPU;
    ob_model *m = NULL;
    err[0] = 0;
    if (ok) {
        const ob_status st = ob_model_load(out, &mp, &m, err, sizeof(err));
        CHECKF(st != OB_OK && m == NULL && strstr(err, names), "%s with %s changed: status %d, '%s' (want a refusal naming %s)",
               arch, key, (int)st, err, names);
        printf("%s with %s changed: %s\n", arch, key, err);
    }
    ob_model_free(m);
    unlink(out);
    ob_gguf_writer_free(w);
    ob_gguf_close(g);
}

static void check_hybrid_refusals(void) {
    refuse_mutated("qwen35", "qwen35.ssm.conv_kernel", 3, NULL, 0, "blk.0.ssm_conv1d.weight");
    refuse_mutated("qwen35", "qwen35.ssm.state_size", 8, NULL, 0, "blk.0.attn_qkv.weight");
    refuse_mutated("qwen35", "qwen35.ssm.group_count", 4, NULL, 0, "blk.0.attn_qkv.weight");
    refuse_mutated("qwen35", "qwen35.ssm.group_count", 3, NULL, 0, "qwen35.ssm.group_count");
    refuse_mutated("qwen35", "qwen35.ssm.time_step_rank", 2, NULL, 0, "blk.0.ssm_dt.bias");
    refuse_mutated("qwen35", "qwen35.ssm.inner_size", 32, NULL, 0, "blk.0.attn_qkv.weight");
    const int32_t rec[5] = {1, 1, 1, 1, 0}; /* layer 1 said recurrent: it has attention's tensors */
    refuse_mutated("qwen35", "qwen35.attention.recurrent_layers", 0, rec, 5, "blk.1.attn_qkv.weight");
    refuse_mutated("lfm2", "lfm2.shortconv.l_cache", 4, NULL, 0, "blk.0.shortconv.conv.weight");
    const int32_t kv3[4] = {0, 0, 3, 0}, kv_conv[4] = {0, 2, 2, 0};
    refuse_mutated("lfm2", "lfm2.attention.head_count_kv", 0, kv3, 4, "lfm2.attention.head_count_kv");
    refuse_mutated("lfm2", "lfm2.attention.head_count_kv", 0, kv_conv, 4, "blk.1.attn_q.weight");
}

/* qwen35moe's expert keys against its tensors: each disagreement named. */
static void check_qwen35moe_refusals(void) {
    refuse_mutated("qwen35moe", "qwen35moe.expert_count", 4, NULL, 0, "blk.0.ffn_gate_inp.weight");
    refuse_mutated("qwen35moe", "qwen35moe.expert_used_count", 9, NULL, 0, "qwen35moe.expert_used_count");
    refuse_mutated("qwen35moe", "qwen35moe.expert_feed_forward_length", 8, NULL, 0, "blk.0.ffn_gate_exps.weight");
    refuse_mutated("qwen35moe", "qwen35moe.expert_shared_feed_forward_length", 16, NULL, 0, "blk.0.ffn_gate_shexp.weight");
    refuse_mutated("qwen35moe", "qwen35moe.ssm.time_step_rank", 2, NULL, 0, "blk.0.ssm_dt.bias");
}

/* make_dense.py's fixtures (issue #35): phi3 (fused qkv and gate/up, partial rope, LongRoPE),
 * smollm3 (unroped layers), minicpm (scaled embeddings, residuals and logits; LongRoPE); each
 * also as <name>.short, a 64-token context within the original one (LongRoPE's short factors). */
static const char *const g_dense[] = {"phi3", "smollm3", "minicpm"};

static void run_long_all(const dev *devs, int n_dev) {
    static const char *const plain[] = {"llama", "qwen2", "qwen3", "gemma3"};
    static const char *const variants[] = {"llama3-f8", "llama3-f32", "qwen3-yarn"};
    char ref[64], path[256], what[64], err[512];
    printf("rel err by position range / top-1 agreement with transformers (F32 weights and KV):\n");
    bool have[8];
    for (int k = 0; k < n_dev; k++) have[k] = dev_present(&devs[k]);
    for (int k = 0; k < n_dev; k++)
        for (int i = 0; i < 4 && have[k]; i++) {
            if (!wanted(plain[i])) continue;
            snprintf(ref, sizeof(ref), "%s.long", plain[i]);
            snprintf(path, sizeof(path), FIX "%s.gguf", plain[i]);
            run_long(ref, path, &devs[k], plain[i], false);
        }
    for (int i = 0; i < 3; i++) {
        /* `1bit convert` of the Hugging Face folder the reference was made from */
        char hf[256], out[128];
        if (!wanted(variants[i])) continue;
        snprintf(hf, sizeof(hf), FIX "%s-hf", variants[i]);
        snprintf(out, sizeof(out), "/tmp/ob_models_%s_%d.gguf", variants[i], (int)getpid());
        ob_convert_opts co = {OB_TYPE_F32, NULL};
        ob_status cst = ob_convert_hf(hf, out, &co, err, sizeof(err));
        CHECKF(cst == OB_OK, "convert %s: %s", hf, err);
        for (int k = 0; k < n_dev; k++) {
            if (!have[k]) continue;
            snprintf(path, sizeof(path), FIX "%s.gguf", variants[i]);
            snprintf(what, sizeof(what), "%s (llama.cpp's file)", variants[i]);
            run_long(variants[i], path, &devs[k], what, false);
            snprintf(what, sizeof(what), "%s (1bit convert)", variants[i]);
            if (!cst) run_long(variants[i], out, &devs[k], what, false);
        }
        unlink(out);
    }
    /* Mixtures of experts (issue #32), the same two files; a GPU backend without MoE
     * kernels refuses them (SKIPPED). */
    static const char *const moe[] = {"qwen3moe", "glm4moelite", "gptoss"};
    for (size_t i = 0; i < OB_ARRAY_LEN(moe); i++) {
        char hf[256], out[128];
        if (!wanted(moe[i])) continue;
        snprintf(hf, sizeof(hf), FIX "%s-hf", moe[i]);
        snprintf(out, sizeof(out), "/tmp/ob_models_%s_%d.gguf", moe[i], (int)getpid());
        ob_convert_opts co = {OB_TYPE_F32, NULL};
        ob_status cst = ob_convert_hf(hf, out, &co, err, sizeof(err));
        CHECKF(cst == OB_OK, "convert %s: %s", hf, err);
        for (int k = 0; k < n_dev; k++) {
            if (!have[k]) continue;
            snprintf(path, sizeof(path), FIX "%s.gguf", moe[i]);
            snprintf(what, sizeof(what), "%s (llama.cpp's file)", moe[i]);
            run_long(moe[i], path, &devs[k], what, true);
            snprintf(what, sizeof(what), "%s (1bit convert)", moe[i]);
            if (!cst) run_long(moe[i], out, &devs[k], what, true);
        }
        unlink(out);
    }
    /* Hybrid models (issue #33), llama.cpp's file (`1bit convert` does not write them yet); a
     * GPU backend without the recurrent ops' kernels refuses them (SKIPPED). */
    static const char *const hybrid[] = {"qwen35", "qwen35moe", "lfm2"};
    for (size_t i = 0; i < OB_ARRAY_LEN(hybrid); i++)
        for (int k = 0; k < n_dev && wanted(hybrid[i]); k++) {
            if (!have[k]) continue;
            snprintf(path, sizeof(path), FIX "%s.gguf", hybrid[i]);
            snprintf(what, sizeof(what), "%s (llama.cpp's file)", hybrid[i]);
            run_long(hybrid[i], path, &devs[k], what, true);
        }
    /* Dense families (issue #35), llama.cpp's file: every backend must run them */
    for (size_t i = 0; i < OB_ARRAY_LEN(g_dense); i++)
        for (int k = 0; k < n_dev && wanted(g_dense[i]); k++) {
            if (!have[k]) continue;
            snprintf(path, sizeof(path), FIX "%s.gguf", g_dense[i]);
            snprintf(what, sizeof(what), "%s (llama.cpp's file)", g_dense[i]);
            run_long(g_dense[i], path, &devs[k], what, false);
        }
}

/* The logits of arch's prompt on device d with caches of types kt / kv: a prefill of all but
 * its last 4 tokens, then those one at a time (prefill and decode kernels both read the
 * cache). Rows [np, V] into out; false (reported) when the context is refused. */
static bool cache_run(ob_model *m, const int32_t *tok, int np, int V, ob_kv_type kt, ob_kv_type vt, float *out) {
    char err[512];
    ob_context_params cp = ob_context_default_params();
    cp.n_ctx = 128;
    cp.type_k = kt;
    cp.type_v = vt;
    ob_context *c = NULL;
    if (ob_context_new(m, &cp, &c, err, sizeof(err))) {
        CHECKF(0, "cache types %s/%s: %s", ob_kv_type_name(kt), ob_kv_type_name(vt), err);
        return false;
    }
    int32_t pos[256], seq[256];
    int8_t want[256];
    for (int i = 0; i < np; i++) pos[i] = i, seq[i] = 0, want[i] = 1;
    bool ok = true;
    for (int at = 0; at < np && ok;) {
        const int k = at == 0 ? np - 4 : 1;
        ob_batch b = {k, (int32_t *)tok + at, pos + at, seq + at, want + at};
        ok = ob_decode(c, &b, err, sizeof(err)) == OB_OK;
        CHECKF(ok, "cache types %s/%s at %d: %s", ob_kv_type_name(kt), ob_kv_type_name(vt), at, err);
        for (int j = 0; j < k && ok; j++) memcpy(out + (size_t)(at + j) * V, ob_get_logits(c, j), sizeof(float) * (size_t)V);
        at += k;
    }
    ob_context_free(c);
    return ok;
}

/* The largest row_rel_err of np rows of V logits. */
static double rows_rel_err(const float *got, const float *ref, int np, int V) {
    double worst = 0;
    for (int r = 0; r < np; r++) {
        const double e = row_rel_err(got + (size_t)r * V, ref + (size_t)r * V, V);
        if (e > worst || e != e) worst = e != e ? INFINITY : e;
    }
    return worst;
}

/* llama-server's cache types (-ctk / -ctv) end to end: arch's fixture on device d with each
 * type as keys beside f16 values and as values beside f16 keys. Every row of the prompt's
 * logits lies within a bound of the f16-cache run's on d (what the type's rounding does to a
 * random tiny model: about half the bound on the CPU and lavapipe), and on a GPU within 1e-2
 * of the CPU's run of the same types (the caches hold the reference quantizer's bytes; a
 * code may still flip where the GPU's k or v differs from the CPU's in the last bits). */
static void check_cache_types(const char *arch, const dev *d) {
    static const struct { ob_kv_type t; double tol; } types[] = {
        {OB_KV_F32, 5e-3}, {OB_KV_BF16, 2e-2}, {OB_KV_Q8_0, 5e-2}, {OB_KV_Q5_0, 0.3}, {OB_KV_Q5_1, 0.3},
        {OB_KV_Q4_0, 0.5}, {OB_KV_Q4_1, 0.5}, {OB_KV_IQ4_NL, 0.5},
    };
    char path[256], err[512];
    snprintf(path, sizeof(path), FIX "%s.json", arch);
    json_error_t je;
    json_t *meta = json_load_file(path, 0, &je);
    CHECKF(meta != NULL, "%s: %s", path, je.text);
    if (!meta) return;
    const int V = (int)json_integer_value(json_object_get(meta, "vocab"));
    json_t *jp = json_object_get(meta, "prompt");
    const int np = (int)json_array_size(jp);
    int32_t tok[256];
    for (int i = 0; i < np && i < 256; i++) tok[i] = (int32_t)json_integer_value(json_array_get(jp, (size_t)i));
    snprintf(path, sizeof(path), FIX "%s.gguf", arch);
    ob_model_params mp = ob_model_default_params();
    mp.device = d->kind;
    mp.n_threads = 2;
    ob_model_params mc = mp;
    mc.device = OB_DEVICE_CPU;
    ob_model *m = NULL, *mcpu = NULL;
    const size_t n = (size_t)np * (size_t)V;
    float *ref = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n), *cpu = malloc(sizeof(float) * n);
    CHECKF(np > 8 && np <= 256, "%s: prompt of %d tokens", arch, np);
    const bool gpu = d->kind != OB_DEVICE_CPU;
    if (np > 8 && np <= 256 && ref && got && cpu && !ob_model_load(path, &mp, &m, err, sizeof(err)) &&
        (!gpu || !ob_model_load(path, &mc, &mcpu, err, sizeof(err))) && cache_run(m, tok, np, V, OB_KV_F16, OB_KV_F16, ref)) {
        for (size_t i = 0; i < OB_ARRAY_LEN(types); i++)
            for (int side = 0; side < 2; side++) {
                const ob_kv_type kt = side ? OB_KV_F16 : types[i].t, vt = side ? types[i].t : OB_KV_F16;
                if (!cache_run(m, tok, np, V, kt, vt, got)) continue;
                const double e = rows_rel_err(got, ref, np, V);
                CHECKF(e <= types[i].tol, "%s on %s, cache %s/%s: logits %.3g off the f16 cache's (> %.1g)", arch, d->name,
                       ob_kv_type_name(kt), ob_kv_type_name(vt), e, types[i].tol);
                double ec = 0;
                if (gpu && cache_run(mcpu, tok, np, V, kt, vt, cpu)) {
                    ec = rows_rel_err(got, cpu, np, V);
                    CHECKF(ec <= 1e-2, "%s on %s, cache %s/%s: logits %.3g off the CPU's (> 1e-2)", arch, d->name,
                           ob_kv_type_name(kt), ob_kv_type_name(vt), ec);
                }
                printf("%s on %s, cache %s/%s: max rel err %.3g against f16, %.3g against the CPU\n", arch, d->name,
                       ob_kv_type_name(kt), ob_kv_type_name(vt), e, ec);
            }
    } else if (!m || (gpu && !mcpu)) {
        CHECKF(0, "%s on %s: %s", arch, d->name, err);
    }
    ob_model_free(m);
    ob_model_free(mcpu);
    free(ref);
    free(got);
    free(cpu);
    json_decref(meta);
}

int main(int argc, char **argv) {
    g_argc = argc;
    g_argv = argv;
    /* a missing barrier fails the decode on lavapipe too (vk_hazard.c) */
    setenv("ONEBIT_VK_HZ_AUDIT", "1", 0);
    const dev devs[] = {
        {OB_DEVICE_CPU, "cpu"},
#ifdef ONEBIT_CUDA
        {OB_DEVICE_CUDA, "cuda"},
#endif
#ifdef ONEBIT_VULKAN
        {OB_DEVICE_VULKAN, "vulkan"},
#endif
    };
    const char *arches[] = {"llama", "qwen2", "qwen3", "gemma3"};
    if (argc == 2 && !strcmp(argv[1], "cache-types")) {
        for (int k = 0; k < (int)(sizeof(devs) / sizeof(devs[0])); k++)
            if (dev_present(&devs[k]))
                for (int i = 0; i < 4; i += 2) check_cache_types(arches[i], &devs[k]);
        return ob_test_done("test_models");
    }
    run_long_all(devs, (int)(sizeof(devs) / sizeof(devs[0])));
    for (int i = 0; i < 4; i++) {
        if (!wanted(arches[i])) continue;
        run_arch(arches[i], OB_KV_F32, 512, 1e-4, true);
        run_arch(arches[i], OB_KV_F32, 7, 1e-4, false);   /* chunked prefill */
        run_arch(arches[i], OB_KV_F16, 512, 5e-3, false);
        run_arch(arches[i], OB_KV_Q8_0, 512, 3e-2, false);
    }
    for (size_t i = 0; i < OB_ARRAY_LEN(g_dense); i++) {
        char ref[64];
        if (!wanted(g_dense[i])) continue;
        snprintf(ref, sizeof(ref), "%s.short", g_dense[i]);
        run_arch(ref, OB_KV_F32, 512, 1e-4, true);
        run_arch(ref, OB_KV_F32, 7, 1e-4, false);
        run_arch(ref, OB_KV_F16, 512, 5e-3, false);
    }
    for (int k = 0; k < (int)(sizeof(devs) / sizeof(devs[0])); k++) {
        if (!dev_present(&devs[k])) continue; /* dev_present said SKIPPED */
        const bool det = devs[k].kind != OB_DEVICE_CPU;
        for (int i = 0; i < 4; i++)
            if (wanted(arches[i])) check_batch_invariance(arches[i], devs[k].kind, devs[k].name, det, false);
        /* the MoE ops (issue #32) and the recurrent ones (issue #33): a GPU backend without
         * their kernels says SKIPPED */
        static const char *const more[] = {"qwen3moe", "glm4moelite", "gptoss", "qwen35", "qwen35moe", "lfm2"};
        for (size_t i = 0; i < OB_ARRAY_LEN(more); i++)
            if (wanted(more[i])) check_batch_invariance(more[i], devs[k].kind, devs[k].name, det, true);
        for (size_t i = 0; i < OB_ARRAY_LEN(g_dense); i++)
            if (wanted(g_dense[i])) check_batch_invariance(g_dense[i], devs[k].kind, devs[k].name, det, false);
        if (devs[k].kind == OB_DEVICE_CPU && wanted("glm4moelite")) run_legacy_kv_b(&devs[k]);
        for (int i = 0; i < 4; i++)
            if (wanted(arches[i]) && i % 2 == 0) check_cache_types(arches[i], &devs[k]);
    }
    /* (on each device: a GPU's checkpoints are its downloads and uploads of the state rows) */
    static const char *const recurrent[] = {"qwen35", "qwen35moe", "lfm2"};
    for (int k = 0; k < (int)(sizeof(devs) / sizeof(devs[0])); k++) {
        if (!dev_present(&devs[k])) continue;
        for (size_t i = 0; i < OB_ARRAY_LEN(recurrent); i++)
            if (wanted(recurrent[i])) check_recurrent_cut(recurrent[i], &devs[k]);
    }
    if (wanted("qwen35") && wanted("lfm2")) check_hybrid_refusals();
    if (wanted("qwen35moe")) check_qwen35moe_refusals();
    /* Unknown architectures and missing files are refused with a clear message. */
    char err[512] = {0};
    ob_model *m = NULL;
    CHECK(ob_model_load("tests/fixtures/models/nope.gguf", NULL, &m, err, sizeof(err)) != OB_OK && m == NULL);
    CHECK(strlen(err) > 0);
    return ob_test_done("test_models");
}
