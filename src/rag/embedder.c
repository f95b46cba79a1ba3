/* An embedder: one model and one embeddings context. Texts are tokenized, cut to the
 * model's limit and packed several to a batch (one sequence each). */
#include "rag/rag.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define OB_EMB_SEQS 8

struct ob_embedder {
    ob_model *m;
    ob_context *c;
    const ob_tokenizer *tok;
    int dim, max_tokens, n_seq;
    bool rank;
    int32_t *tok_buf, *pos_buf, *seq_buf;   /* [n_seq * max_tokens] */
};

void ob_embedder_free(ob_embedder *e) {
    if (!e) return;
    ob_context_free(e->c);
    ob_model_free(e->m);
    free(e->tok_buf);
    free(e->pos_buf);
    free(e->seq_buf);
    free(e);
}

ob_status ob_embedder_new(const char *path, const ob_model_params *mp, bool rank, ob_embedder **out,
                          char *err, size_t err_len) {
    *out = NULL;
    ob_embedder *e = calloc(1, sizeof(*e));
    if (!e) return ob_fail(err, err_len, OB_ERR_NOMEM, "embed: out of memory");
    ob_status st = ob_model_load(path, mp, &e->m, err, err_len);
    if (st) { ob_embedder_free(e); return st; }
    ob_model_info info;
    ob_model_get_info(e->m, &info);
    if (rank && ob_model_pooling(e->m) != OB_POOLING_RANK) {
        ob_embedder_free(e);
        return ob_fail(err, err_len, OB_ERR_ARG, "%s: not a reranker (no rank head)", path);
    }
    e->rank = rank;
    e->tok = ob_model_tokenizer(e->m);
    e->max_tokens = info.n_ctx_train > 0 && info.n_ctx_train < 512 ? info.n_ctx_train : 512;
    e->n_seq = OB_EMB_SEQS;
    ob_context_params cp = ob_context_default_params();
    cp.n_ctx = e->max_tokens;
    cp.n_seq = e->n_seq;
    cp.n_batch = e->max_tokens * e->n_seq;
    cp.type_k = cp.type_v = OB_KV_F32;
    cp.embeddings = true;
    cp.pooling = OB_POOLING_DEFAULT;
    cp.normalize = true;
    st = ob_context_new(e->m, &cp, &e->c, err, err_len);
    if (st) { ob_embedder_free(e); return st; }
    e->dim = ob_context_n_embd(e->c);
    size_t cap = (size_t)cp.n_batch;
    e->tok_buf = malloc(sizeof(int32_t) * cap);
    e->pos_buf = malloc(sizeof(int32_t) * cap);
    e->seq_buf = malloc(sizeof(int32_t) * cap);
    if (!e->tok_buf || !e->pos_buf || !e->seq_buf) { ob_embedder_free(e); return ob_fail(err, err_len, OB_ERR_NOMEM, "embed: out of memory"); }
    *out = e;
    return OB_OK;
}

int ob_embedder_dim(const ob_embedder *e) { return e->dim; }
int ob_embedder_max_tokens(const ob_embedder *e) { return e->max_tokens; }

/* Tokens of text (with the model's specials) into dst, cut to cap keeping the final
 * special token. Returns the count, or -1. */
static int tokenize_cut(const ob_embedder *e, const char *text, bool add_special, int32_t *dst, int cap) {
    size_t len = strlen(text);
    int n = ob_tokenize(e->tok, text, len, dst, cap, add_special, false);
    if (n < 0) return -1;
    if (n <= cap) return n;
    int32_t *tmp = malloc(sizeof(int32_t) * (size_t)n);
    if (!tmp) return -1;
    int n2 = ob_tokenize(e->tok, text, len, tmp, n, add_special, false);
    if (n2 != n) { free(tmp); return -1; }
    memcpy(dst, tmp, sizeof(int32_t) * (size_t)cap);
    if (add_special) dst[cap - 1] = tmp[n - 1];
    free(tmp);
    return cap;
}

/* Runs the packed batch of n_seq sequences and copies out their vectors. */
static ob_status run_batch(ob_embedder *e, int T, int n_seq, float *out, char *err, size_t err_len) {
    ob_batch b = {T, e->tok_buf, e->pos_buf, e->seq_buf, NULL};
    ob_status st = ob_decode(e->c, &b, err, err_len);
    if (st) return st;
    for (int s = 0; s < n_seq; s++) {
        const float *v = ob_get_embeddings(e->c, s);
        if (!v) return ob_fail(err, err_len, OB_ERR_DEVICE, "embed: no output for sequence %d", s);
        memcpy(out + (size_t)s * (size_t)e->dim, v, sizeof(float) * (size_t)e->dim);
    }
    return OB_OK;
}

/* Shared by embed and rank: text i is query (rank only) + docs[i]. */
static ob_status embed_or_rank(ob_embedder *e, const char *query, int n, const char *const *texts, float *out,
                               char *err, size_t err_len) {
    int T = 0, ns = 0, first = 0;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)e->max_tokens);
    if (!ids) return ob_fail(err, err_len, OB_ERR_NOMEM, "embed: out of memory");
    ob_status st = OB_OK;
    for (int i = 0; i < n && !st; i++) {
        if (!texts[i] || !texts[i][0]) { st = ob_fail(err, err_len, OB_ERR_ARG, "embed: input %d is empty", i); break; }
        int k;
        if (query) {
            /* A pair: [CLS] query [SEP] doc [SEP]; the query gets at most half the room. */
            int qn = tokenize_cut(e, query, true, ids, e->max_tokens / 2);
            int dn = qn > 0 ? tokenize_cut(e, texts[i], true, ids + qn - 1, e->max_tokens - qn + 1) : -1;
            if (qn <= 0 || dn <= 0) { st = ob_fail(err, err_len, OB_ERR_ARG, "embed: cannot tokenize input %d", i); break; }
            k = qn + dn - 1;
            /* The doc was tokenized with its [CLS] over the query's [SEP]: put the [SEP] back.
             * (All tokens are segment 0: right for XLM-RoBERTa rerankers, which have one.) */
            int32_t sep = ob_token_eos(e->tok);
            if (sep >= 0) ids[qn - 1] = sep;
        } else {
            k = tokenize_cut(e, texts[i], true, ids, e->max_tokens);
            if (k <= 0) { st = ob_fail(err, err_len, OB_ERR_ARG, "embed: cannot tokenize input %d", i); break; }
        }
        if (ns == e->n_seq) {
            st = run_batch(e, T, ns, out + (size_t)first * (size_t)e->dim, err, err_len);
            first += ns;
            T = ns = 0;
            if (st) break;
        }
        for (int j = 0; j < k; j++) {
            e->tok_buf[T + j] = ids[j];
            e->pos_buf[T + j] = j;
            e->seq_buf[T + j] = ns;
        }
        T += k;
        ns++;
    }
    if (!st && ns) st = run_batch(e, T, ns, out + (size_t)first * (size_t)e->dim, err, err_len);
    free(ids);
    return st;
}

ob_status ob_embedder_embed(ob_embedder *e, int n, const char *const *texts, float *out, char *err, size_t err_len) {
    if (e->rank) return ob_fail(err, err_len, OB_ERR_ARG, "embed: this model is a reranker");
    return embed_or_rank(e, NULL, n, texts, out, err, err_len);
}

ob_status ob_embedder_rank(ob_embedder *e, const char *query, int n, const char *const *docs, float *scores,
                           char *err, size_t err_len) {
    if (!e->rank) return ob_fail(err, err_len, OB_ERR_ARG, "rank: this model is not a reranker");
    if (!query || !query[0]) return ob_fail(err, err_len, OB_ERR_ARG, "rank: empty query");
    float *tmp = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1) * (size_t)e->dim);
    if (!tmp) return ob_fail(err, err_len, OB_ERR_NOMEM, "rank: out of memory");
    ob_status st = embed_or_rank(e, query, n, docs, tmp, err, err_len);
    for (int i = 0; !st && i < n; i++) scores[i] = tmp[(size_t)i * (size_t)e->dim];
    free(tmp);
    return st;
}
