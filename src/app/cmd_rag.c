/* 1bit rag index --embed-model E DIR -o INDEX.sqlite [--max-words N]
 * 1bit rag ask --index INDEX --embed-model E [--rerank-model R] [-m CHAT_MODEL] [-k N]
 *              [--json] [-n N_PREDICT] "question"
 * Without -m, ask prints the retrieved chunks (best first); with it, the chat model answers
 * from them and the sources are listed after the answer. */
#include "app/commands.h"
#include "app/opts.h"
#include "engine/chat_model.h"
#include "rag/rag.h"
#include "tokenizer/tokenizer.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: 1bit rag index --embed-model E.gguf DIR -o INDEX.sqlite [--max-words N]\n"
               "       1bit rag ask --index INDEX.sqlite --embed-model E.gguf [--rerank-model R.gguf]\n"
               "                    [-m CHAT_MODEL.gguf] [-k N] [-n N_PREDICT] [--json] \"question\"\n"
               "  common: -t N (threads), --device D, --no-strict-device\n");
}

typedef struct rag_opts {
    const char *embed, *rerank, *index, *out, *dir, *question;
    int k, max_words, n_predict;
    bool json;
    ob_common_opts co;       /* -m (chat model), threads, device, sampling */
} rag_opts;

static int parse(rag_opts *o, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--embed-model") && has) o->embed = argv[++i];
        else if (!strcmp(a, "--rerank-model") && has) o->rerank = argv[++i];
        else if (!strcmp(a, "--index") && has) o->index = argv[++i];
        else if (!strcmp(a, "-o") && has) o->out = argv[++i];
        else if (!strcmp(a, "-k") && has) o->k = atoi(argv[++i]);
        else if (!strcmp(a, "--max-words") && has) o->max_words = atoi(argv[++i]);
        else if ((!strcmp(a, "-n") || !strcmp(a, "--n-predict")) && has) o->n_predict = atoi(argv[++i]);
        else if (!strcmp(a, "--json")) o->json = true;
        else {
            int r = ob_opts_parse(&o->co, argc, argv, &i);
            if (r < 0) return 2;
            if (r > 0) continue;
            if (a[0] == '-') { fprintf(stderr, "rag: unknown option '%s'\n", a); usage(stderr); return 2; }
            if (!o->dir) o->dir = a;
            else { fprintf(stderr, "rag: unexpected argument '%s'\n", a); return 2; }
        }
    }
    return -1;
}

static int cmd_index(rag_opts *o) {
    if (!o->embed || !o->dir || !o->out) { usage(stderr); return 2; }
    char err[1024];
    ob_embedder *e = NULL;
    if (ob_embedder_new(o->embed, &o->co.mp, false, &e, err, sizeof(err))) { fprintf(stderr, "rag: %s\n", err); return 1; }
    ob_rag_index_opts io = {o->max_words, true};
    int n = 0;
    double t0 = ob_time_s();
    const char *name = strrchr(o->embed, '/');
    ob_status st = ob_rag_index_build(o->dir, e, name ? name + 1 : o->embed, o->out, &io, &n, err, sizeof(err));
    ob_embedder_free(e);
    if (st) { fprintf(stderr, "rag: %s\n", err); return 1; }
    fprintf(stderr, "rag: indexed %d chunks into %s in %.1f s\n", n, o->out, ob_time_s() - t0);
    return 0;
}

/* Reorders hits by the cross-encoder's scores, best first. */
static ob_status rerank(const rag_opts *o, ob_rag_hit *h, int n, char *err, size_t err_len) {
    ob_embedder *r = NULL;
    ob_status st = ob_embedder_new(o->rerank, &o->co.mp, true, &r, err, err_len);
    if (st) return st;
    const char **docs = malloc(sizeof(char *) * (size_t)n);
    float *sc = malloc(sizeof(float) * (size_t)n);
    if (!docs || !sc) st = ob_fail(err, err_len, OB_ERR_NOMEM, "rag: out of memory");
    for (int i = 0; !st && i < n; i++) docs[i] = h[i].text;
    if (!st) st = ob_embedder_rank(r, o->question, n, docs, sc, err, err_len);
    for (int i = 0; !st && i < n; i++) h[i].score = sc[i];
    for (int i = 1; !st && i < n; i++)
        for (int j = i; j > 0 && h[j - 1].score < h[j].score; j--) { ob_rag_hit t = h[j]; h[j] = h[j - 1]; h[j - 1] = t; }
    free(docs);
    free(sc);
    ob_embedder_free(r);
    return st;
}

/* The chat model answers from the hits; streams to stdout. */
static ob_status answer(rag_opts *o, const ob_rag_hit *h, int n, char *err, size_t err_len) {
    ob_model *m = NULL;
    ob_status st = ob_opts_load_model(&o->co, &m);
    if (st) return ob_fail(err, err_len, st, "cannot load the chat model");
    size_t cap = 256 + strlen(o->question);
    for (int i = 0; i < n; i++) cap += strlen(h[i].text) + strlen(h[i].path) + 64;
    char *user = malloc(cap);
    ob_context *c = NULL;
    ob_sampler *s = NULL;
    char *prompt = NULL;
    int32_t *ids = NULL;
    if (!user) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "rag: out of memory"); goto done; }
    size_t k = 0;
    k += (size_t)snprintf(user + k, cap - k, "Sources:\n");
    for (int i = 0; i < n; i++) k += (size_t)snprintf(user + k, cap - k, "[%d] (%s:%d)\n%s\n\n", i + 1, h[i].path, h[i].line, h[i].text);
    snprintf(user + k, cap - k, "Question: %s", o->question);
    json_t *msgs = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "system", "content",
                             "Answer the question using only the sources given. Cite the sources you use as [n]. "
                             "If the sources do not hold the answer, say so.",
                             "role", "user", "content", user);
    st = msgs ? ob_chat_render_model(m, msgs, true, &prompt, err, err_len) : ob_fail(err, err_len, OB_ERR_NOMEM, "rag: out of memory");
    json_decref(msgs);
    if (st) goto done;
    const ob_tokenizer *tok = ob_model_tokenizer(m);
    int len = (int)strlen(prompt);
    ids = malloc(sizeof(int32_t) * (size_t)(len + 16));
    int nt = ids ? ob_tokenize(tok, prompt, (size_t)len, ids, len + 16, false, true) : -1;
    if (nt <= 0 || nt > len + 16) { st = ob_fail(err, err_len, OB_ERR_ARG, "rag: cannot tokenize the prompt"); goto done; }
    ob_context_params cp = o->co.cp;
    if (cp.n_ctx <= 0 || cp.n_ctx < nt + o->n_predict + 1) cp.n_ctx = nt + o->n_predict + 1;
    if ((st = ob_context_new(m, &cp, &c, err, err_len))) goto done;
    ob_model_info info;
    ob_model_get_info(m, &info);
    s = ob_sampler_new(&o->co.sp, info.n_vocab);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)nt), *seq = calloc((size_t)nt, sizeof(int32_t));
    if (!s || !pos || !seq) { free(pos); free(seq); st = ob_fail(err, err_len, OB_ERR_NOMEM, "rag: out of memory"); goto done; }
    for (int i = 0; i < nt; i++) pos[i] = i;
    ob_batch b = {nt, ids, pos, seq, NULL};
    st = ob_decode(c, &b, err, err_len);
    free(pos);
    free(seq);
    const float *logits = st ? NULL : ob_get_logits(c, nt - 1);
    ob_detok dt = {0};
    char buf[256];
    for (int i = 0; logits && i < o->n_predict; i++) {
        int32_t id = ob_sampler_sample(s, logits);
        if (ob_token_is_eog(tok, id)) break;
        size_t w = ob_detok_push(tok, &dt, id, buf, sizeof(buf));
        if (w <= sizeof(buf)) { fwrite(buf, 1, w, stdout); fflush(stdout); }
        int32_t p = nt + i, s0 = 0;
        ob_batch nb = {1, &id, &p, &s0, NULL};
        if ((st = ob_decode(c, &nb, err, err_len))) break;
        logits = ob_get_logits(c, 0);
    }
    size_t w = ob_detok_flush(&dt, buf, sizeof(buf));
    if (w && w <= sizeof(buf)) fwrite(buf, 1, w, stdout);
    printf("\n\nSources:\n");
    for (int i = 0; i < n; i++) printf("[%d] %s:%d\n", i + 1, h[i].path, h[i].line);
done:
    ob_sampler_free(s);
    ob_context_free(c);
    ob_model_free(m);
    free(ids);
    free(prompt);
    free(user);
    return st;
}

static int cmd_ask(rag_opts *o) {
    o->question = o->dir;
    if (!o->embed || !o->index || !o->question) { usage(stderr); return 2; }
    if (!o->question[0]) { fprintf(stderr, "rag: empty question\n"); return 2; }
    if (o->k <= 0) o->k = 4;
    char err[1024];
    ob_embedder *e = NULL;
    if (ob_embedder_new(o->embed, &o->co.mp, false, &e, err, sizeof(err))) { fprintf(stderr, "rag: %s\n", err); return 1; }
    int dim = ob_embedder_dim(e);
    float *q = malloc(sizeof(float) * (size_t)dim);
    ob_rag_hit *h = NULL;
    int n = 0;
    ob_status st = q ? ob_embedder_embed(e, 1, &o->question, q, err, sizeof(err)) : ob_fail(err, sizeof(err), OB_ERR_NOMEM, "out of memory");
    ob_embedder_free(e);
    /* A reranker sees more candidates than it keeps. */
    int want = o->rerank ? OB_MAX(o->k * 4, 20) : o->k;
    if (!st) st = ob_rag_search(o->index, q, dim, want, &h, &n, err, sizeof(err));
    free(q);
    if (!st && o->rerank) st = rerank(o, h, n, err, sizeof(err));
    int keep = OB_MIN(n, o->k);
    if (!st && o->co.model) st = answer(o, h, keep, err, sizeof(err));
    else if (!st && o->json) {
        json_t *arr = json_array();
        for (int i = 0; i < keep; i++)
            json_array_append_new(arr, json_pack("{s:I, s:s, s:i, s:f, s:s}", "id", (json_int_t)h[i].id, "path", h[i].path,
                                                 "line", h[i].line, "score", (double)h[i].score, "text", h[i].text));
        char *s = json_dumps(arr, JSON_INDENT(1));
        if (s) puts(s);
        free(s);
        json_decref(arr);
    } else if (!st) {
        for (int i = 0; i < keep; i++) printf("[%d] %s:%d (score %.4f)\n%s\n\n", i + 1, h[i].path, h[i].line, h[i].score, h[i].text);
    }
    ob_rag_hits_free(h, n);
    if (st) { fprintf(stderr, "rag: %s\n", err); return 1; }
    return 0;
}

int ob_cmd_rag(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    rag_opts o = {0};
    o.n_predict = 256;
    ob_opts_init(&o.co);
    o.co.model = NULL;
    o.co.sp.temperature = 0; /* answers from sources: greedy by default */
    const char *sub = argv[1];
    int r = parse(&o, argc - 1, argv + 1);
    if (r >= 0) return r;
    if (!strcmp(sub, "index")) return cmd_index(&o);
    if (!strcmp(sub, "ask")) return cmd_ask(&o);
    fprintf(stderr, "rag: unknown subcommand '%s' (index, ask)\n", sub);
    usage(stderr);
    return 2;
}
