/* Embedding and rerank routes (embedding mode: `serve --embeddings` / `--reranking`, or an
 * encoder model):
 *   POST /v1/embeddings   {input: string | [string] | [int] | [[int]], encoding_format: float|base64}
 *   POST /embedding, /embeddings  llama-server's native shape ({content: ...})
 *   POST /v1/rerank, /rerank, /v1/reranking  {query, documents: [string], top_n}
 * One embeddings context serves every request, behind a mutex; the inputs of a request
 * are packed several sequences to one ob_decode. An embeddings pass must hold each
 * sequence whole (attention sees only the batch), so the context's batch is as large as
 * its context: an input longer than -b is still processed in one pass, and only an input
 * longer than the context is refused (400 exceed_context_size_error). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/arch.h"
#include "core/common.h"
#include "server/server.h"

#define OB_EMBD_SEQS 8
#define OB_EMBD_MAX_INPUTS 4096
/* KV cells in all (n_seq x n_ctx): bounds the memory of long-context decoder embedders. */
#define OB_EMBD_CELLS 16384

struct ob_srv_embd {
    ob_model *m;
    const ob_tokenizer *tok;
    ob_context *c;
    pthread_mutex_t mu;         /* guards c, the buffers and st */
    int n_ctx, n_seq, dim;
    bool rank;
    bool per_token;             /* --pooling none: every token's final state, on /embedding only */
    volatile bool failed;       /* a device fault: the server must exit (ARCHITECTURE.md) */
    int32_t *tok_buf, *pos_buf, *seq_buf;   /* [n_ctx]: one pass */
    ob_srv_embd_stats st;
};

bool ob_srv_embd_wanted(const ob_srv_config *cfg, const ob_model *m) {
    if (cfg->embeddings || cfg->reranking) return true;
    ob_model_info info;
    ob_model_get_info(m, &info);
    /* the bert family has no LM head: it can only embed or rank */
    return ob_arch_find(info.arch) == &ob_arch_bert || ob_model_pooling(m) == OB_POOLING_RANK;
}

bool ob_srv_embd_ranks(const ob_srv_embd *e) { return e->rank; }
int ob_srv_embd_n_ctx(const ob_srv_embd *e) { return e->n_ctx; }
const ob_context *ob_srv_embd_context(const ob_srv_embd *e) { return e->c; }
bool ob_srv_embd_failed(ob_srv_embd *e) { return __atomic_load_n(&e->failed, __ATOMIC_ACQUIRE); }

void ob_srv_embd_get_stats(ob_srv_embd *e, ob_srv_embd_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->st;
    pthread_mutex_unlock(&e->mu);
}

void ob_srv_embd_free(ob_srv_embd *e) {
    if (!e) return;
    ob_context_free(e->c);
    pthread_mutex_destroy(&e->mu);
    free(e->tok_buf);
    free(e->pos_buf);
    free(e->seq_buf);
    free(e);
}

ob_status ob_srv_embd_new(ob_model *m, const ob_srv_config *cfg, ob_srv_embd **out, char *err, size_t err_len) {
    *out = NULL;
    ob_srv_embd *e = calloc(1, sizeof(*e));
    if (!e) return ob_fail(err, err_len, OB_ERR_NOMEM, "embeddings: out of memory");
    pthread_mutex_init(&e->mu, NULL);
    e->m = m;
    e->tok = ob_model_tokenizer(m);
    e->rank = cfg->reranking || cfg->pooling == OB_POOLING_RANK ||
              (cfg->pooling == OB_POOLING_DEFAULT && ob_model_pooling(m) == OB_POOLING_RANK);
    ob_model_info info;
    ob_model_get_info(m, &info);
    e->n_ctx = info.n_ctx_train > 0 ? info.n_ctx_train : 2048;
    if (cfg->n_ctx > 0 && cfg->n_ctx < e->n_ctx) e->n_ctx = cfg->n_ctx;
    if (e->n_ctx > 32768) e->n_ctx = 32768;
    e->n_seq = OB_MAX(1, OB_MIN(OB_EMBD_SEQS, OB_EMBD_CELLS / e->n_ctx));
    ob_context_params cp = ob_context_default_params();
    cp.n_ctx = e->n_ctx;
    cp.n_seq = e->n_seq;
    cp.n_batch = e->n_ctx; /* one whole input always fits one pass */
    cp.type_k = cp.type_v = OB_KV_F32;
    cp.embeddings = true;
    cp.pooling = e->rank ? OB_POOLING_RANK : cfg->pooling;
    e->per_token = !e->rank && cfg->pooling == OB_POOLING_NONE;
    cp.normalize = true;
    ob_status st = ob_context_new(m, &cp, &e->c, err, err_len);
    if (st) { ob_srv_embd_free(e); return st; }
    e->dim = ob_context_n_embd(e->c);
    size_t cap = (size_t)e->n_ctx;
    e->tok_buf = malloc(sizeof(int32_t) * cap);
    e->pos_buf = malloc(sizeof(int32_t) * cap);
    e->seq_buf = malloc(sizeof(int32_t) * cap);
    if (!e->tok_buf || !e->pos_buf || !e->seq_buf) { ob_srv_embd_free(e); return ob_fail(err, err_len, OB_ERR_NOMEM, "embeddings: out of memory"); }
    *out = e;
    return OB_OK;
}

/* llama-server's shape for a prompt over the context: the error object also carries
 * n_prompt_tokens and n_ctx. */
static void exceed_error(ob_resp *r, int n_tokens, int n_ctx, const char *what) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s is too large to process: %d tokens, more than the context of %d tokens", what,
             n_tokens, n_ctx);
    ob_srv_json(r, 400, json_pack("{s:{s:i,s:s,s:s,s:i,s:i}}", "error", "code", 400, "message", msg, "type",
                                  "exceed_context_size_error", "n_prompt_tokens", n_tokens, "n_ctx", n_ctx));
}

/* One input as token ids (owned). */
typedef struct input { int32_t *ids; int n; } input;

static void inputs_free(input *in, int n) {
    if (!in) return;
    for (int i = 0; i < n; i++) free(in[i].ids);
    free(in);
}

static bool tokenize(ob_srv_embd *e, const char *text, size_t len, bool add_special, input *out, ob_resp *r) {
    int cap = (int)OB_MIN(len + 16, (size_t)1 << 24);
    out->ids = malloc(sizeof(int32_t) * (size_t)cap);
    int n = out->ids ? ob_tokenize(e->tok, text, len, out->ids, cap, add_special, false) : -1;
    if (n > cap) {
        free(out->ids);
        out->ids = malloc(sizeof(int32_t) * (size_t)n);
        cap = n;
        n = out->ids ? ob_tokenize(e->tok, text, len, out->ids, cap, add_special, false) : -1;
    }
    if (n < 0 || n > cap) { ob_srv_error(r, 500, NULL, "cannot tokenize the input"); return false; }
    out->n = n;
    return true;
}

/* One input: a string, or a sequence of token ids and strings (llama-server's mixed form;
 * special tokens are added around a sequence that starts with text). */
static bool one_input(ob_srv_embd *e, json_t *x, size_t i, input *out, ob_resp *r) {
    if (json_is_string(x)) {
        if (!tokenize(e, json_string_value(x), json_string_length(x), true, out, r)) return false;
    } else if (json_is_array(x) && json_array_size(x) > 0 && json_array_size(x) <= (1u << 20)) {
        int vocab = ob_tokenizer_n_vocab(e->tok);
        size_t k;
        json_t *t;
        json_array_foreach(x, k, t) {
            input part = {0};
            int32_t one;
            if (json_is_integer(t) && json_integer_value(t) >= 0 && json_integer_value(t) < vocab) {
                one = (int32_t)json_integer_value(t);
                part.ids = &one;
                part.n = 1;
            } else if (json_is_string(t)) {
                if (!tokenize(e, json_string_value(t), json_string_length(t), k == 0, &part, r)) return false;
            } else {
                ob_srv_error(r, 400, NULL, "input %zu: element %zu is neither a token id below %d nor a string", i, k, vocab);
                return false;
            }
            int32_t *ids = realloc(out->ids, sizeof(int32_t) * (size_t)(out->n + part.n));
            if (ids) {
                memcpy(ids + out->n, part.ids, sizeof(int32_t) * (size_t)part.n);
                out->ids = ids;
                out->n += part.n;
            }
            if (part.ids != &one) free(part.ids);
            if (!ids) { ob_srv_error(r, 500, NULL, "out of memory"); return false; }
        }
    } else {
        ob_srv_error(r, 400, NULL, "input %zu must be a string or a non-empty array of token ids and strings", i);
        return false;
    }
    if (out->n == 0) { ob_srv_error(r, 400, NULL, "input %zu has no tokens", i); return false; }
    return true;
}

/* input: one input (a string, or a sequence holding a token id), or an array of them. */
static input *parse_inputs(ob_srv_embd *e, json_t *v, int *n_out, ob_resp *r) {
    *n_out = 0;
    if (!v) { ob_srv_error(r, 400, NULL, "'input' is required"); return NULL; }
    bool single = json_is_string(v);
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) if (json_is_integer(x)) single = true;
    size_t n = single ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    if (!single && !json_is_array(v)) { ob_srv_error(r, 400, NULL, "'input' must be a string or an array"); return NULL; }
    if (n == 0) { ob_srv_error(r, 400, NULL, "'input' is empty"); return NULL; }
    if (n > OB_EMBD_MAX_INPUTS) { ob_srv_error(r, 400, NULL, "at most %d inputs per request", OB_EMBD_MAX_INPUTS); return NULL; }
    input *in = calloc(n, sizeof(input));
    if (!in) { ob_srv_error(r, 500, NULL, "out of memory"); return NULL; }
    for (size_t k = 0; k < n; k++) {
        if (!one_input(e, single ? v : json_array_get(v, k), k, &in[k], r)) goto fail;
        if (in[k].n > e->n_ctx) {
            char what[48];
            snprintf(what, sizeof what, "input %zu", k);
            exceed_error(r, in[k].n, e->n_ctx, what);
            goto fail;
        }
    }
    *n_out = (int)n;
    return in;
fail:
    inputs_free(in, (int)n);
    return NULL;
}

/* Runs inputs through the model, packing up to n_seq per pass; out [n, dim] (per token:
 * [tokens of every input, dim], the inputs' rows one after another). */
static bool run(ob_srv_embd *e, const input *in, int n, float *out, ob_resp *r) {
    char err[512];
    bool ok = true;
    pthread_mutex_lock(&e->mu);
    double t0 = ob_time_s();
    long long tokens = 0;
    size_t orow = 0; /* per token: the next output row */
    for (int i = 0; i < n && ok;) {
        int T = 0, ns = 0;
        while (i + ns < n && ns < e->n_seq && T + in[i + ns].n <= e->n_ctx) {
            const input *x = &in[i + ns];
            for (int k = 0; k < x->n; k++) { e->tok_buf[T + k] = x->ids[k]; e->pos_buf[T + k] = k; e->seq_buf[T + k] = ns; }
            T += x->n;
            ns++;
        }
        ob_batch b = {T, e->tok_buf, e->pos_buf, e->seq_buf, NULL};
        ob_status st = ob_decode(e->c, &b, err, sizeof(err));
        if (st) {
            if (st == OB_ERR_DEVICE) __atomic_store_n(&e->failed, true, __ATOMIC_RELEASE);
            ob_srv_error(r, 500, NULL, "%s", err);
            ok = false;
            break;
        }
        e->st.n_decode++;
        tokens += T;
        for (int s = 0, row = 0; s < ns && ok; s++) {
            if (e->per_token) {
                for (int k = 0; k < in[i + s].n; k++, row++) {
                    const float *v = ob_get_embeddings_ith(e->c, row);
                    if (!v) { ob_srv_error(r, 500, NULL, "no embedding for input %d", i + s); ok = false; break; }
                    memcpy(out + orow++ * (size_t)e->dim, v, sizeof(float) * (size_t)e->dim);
                }
                continue;
            }
            const float *v = ob_get_embeddings(e->c, s);
            if (!v) { ob_srv_error(r, 500, NULL, "no embedding for input %d", i + s); ok = false; break; }
            memcpy(out + (size_t)(i + s) * (size_t)e->dim, v, sizeof(float) * (size_t)e->dim);
        }
        i += ns;
    }
    if (ok) {
        double dt = ob_time_s() - t0;
        e->st.tokens += (uint64_t)tokens;
        e->st.seconds += dt;
        e->st.requests++;
        e->st.last_tokens = (int)OB_MIN(tokens, (long long)1 << 30);
        e->st.last_s = dt;
    }
    pthread_mutex_unlock(&e->mu);
    return ok;
}

static char *base64(const void *p, size_t n) {
    static const char tb[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *b = p;
    char *o = malloc((n + 2) / 3 * 4 + 1), *w = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < n ? b[i + 2] : 0);
        *w++ = tb[v >> 18 & 63];
        *w++ = tb[v >> 12 & 63];
        *w++ = i + 1 < n ? tb[v >> 6 & 63] : '=';
        *w++ = i + 2 < n ? tb[v & 63] : '=';
    }
    *w = 0;
    return o;
}

static json_t *vec_json(const float *v, int dim) {
    json_t *a = json_array();
    for (int i = 0; i < dim; i++) json_array_append_new(a, json_real(v[i]));
    return a;
}

static void handle_embeddings(ob_server_state *s, ob_srv_embd *e, const ob_req *rq, ob_resp *r, bool native) {
    if (e->rank) { ob_srv_error(r, 501, "not_supported_error", "this server ranks (--reranking): use /v1/rerank"); return; }
    json_t *body = ob_srv_parse_body(rq, r);
    if (!body) return;
    const char *fmt = json_string_value(json_object_get(body, "encoding_format"));
    if (fmt && strcmp(fmt, "float") && strcmp(fmt, "base64")) {
        ob_srv_error(r, 400, NULL, "encoding_format must be 'float' or 'base64'");
        json_decref(body);
        return;
    }
    if (e->per_token && !native) {
        /* an OpenAI embedding is one vector per input */
        ob_srv_error(r, 400, NULL, "pooling 'none' (one vector per token) is not OpenAI-compatible: use /embedding, "
                     "or start the server with another --pooling");
        json_decref(body);
        return;
    }
    json_t *inp = json_object_get(body, "input");
    if (!inp && native) inp = json_object_get(body, "content");
    int n = 0;
    input *in = parse_inputs(e, inp, &n, r);
    size_t rows = (size_t)n;
    if (in && e->per_token) {
        rows = 0;
        for (int i = 0; i < n; i++) rows += (size_t)in[i].n;
    }
    float *out = in ? malloc(sizeof(float) * rows * (size_t)e->dim) : NULL;
    if (in && !out) ob_srv_error(r, 500, NULL, "out of memory");
    if (out && run(e, in, n, out, r)) {
        long long tokens = 0;
        for (int i = 0; i < n; i++) tokens += in[i].n;
        json_t *data = json_array();
        size_t row = 0;
        for (int i = 0; i < n && e->per_token; i++) {
            /* llama-server's per-token shape: the input's vectors, one per token */
            json_t *vs = json_array();
            for (int k = 0; k < in[i].n; k++, row++) json_array_append_new(vs, vec_json(out + row * (size_t)e->dim, e->dim));
            json_array_append_new(data, json_pack("{s:i,s:o}", "index", i, "embedding", vs));
        }
        for (int i = 0; i < n && !e->per_token; i++) {
            const float *v = out + (size_t)i * (size_t)e->dim;
            json_t *ej;
            if (fmt && !strcmp(fmt, "base64")) {
                char *b = base64(v, sizeof(float) * (size_t)e->dim);
                ej = json_string(b ? b : "");
                free(b);
            } else {
                ej = vec_json(v, e->dim);
            }
            if (native) json_array_append_new(data, json_pack("{s:i,s:[o]}", "index", i, "embedding", ej));
            else json_array_append_new(data, json_pack("{s:s,s:i,s:o}", "object", "embedding", "index", i, "embedding", ej));
        }
        if (native) ob_srv_json(r, 200, data);
        else
            ob_srv_json(r, 200, json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model", s->model_id,
                                          "usage", "prompt_tokens", tokens, "total_tokens", tokens));
    }
    free(out);
    inputs_free(in, n);
    json_decref(body);
}

/* The cross-encoder's pair from the two tokenizations (each with the tokenizer's
 * specials): BERT [CLS] q [SEP] d [SEP]; RoBERTa-style <s> q </s></s> d </s> (as the
 * Hugging Face tokenizers pair them); with no specials, q d. */
static bool make_pair(const ob_tokenizer *tok, const input *q, const input *d, input *out, ob_resp *r) {
    int bos = ob_token_bos(tok), eos = ob_token_eos(tok);
    bool drop = d->n > 1 && bos >= 0 && d->ids[0] == bos && q->n > 0 && q->ids[0] == bos;
    /* BERT's leading special is the text "[CLS]" (pieces of specials are not their text) */
    int32_t probe[4];
    bool cls = ob_tokenize(tok, "[CLS]", 5, probe, 4, false, true) == 1 && probe[0] == bos;
    bool dbl = drop && !cls && eos >= 0 && q->ids[q->n - 1] == eos;
    out->n = q->n + d->n - (drop ? 1 : 0) + (dbl ? 1 : 0);
    out->ids = malloc(sizeof(int32_t) * (size_t)out->n);
    if (!out->ids) { ob_srv_error(r, 500, NULL, "out of memory"); return false; }
    int k = 0;
    memcpy(out->ids, q->ids, sizeof(int32_t) * (size_t)q->n);
    k += q->n;
    if (dbl) out->ids[k++] = eos;
    memcpy(out->ids + k, d->ids + (drop ? 1 : 0), sizeof(int32_t) * (size_t)(d->n - (drop ? 1 : 0)));
    return true;
}

static void handle_rerank(ob_server_state *s, ob_srv_embd *e, const ob_req *rq, ob_resp *r) {
    if (!e->rank) { ob_srv_error(r, 501, "not_supported_error", "This server does not support reranking. Start it with `--reranking` and a reranker model"); return; }
    json_t *body = ob_srv_parse_body(rq, r);
    if (!body) return;
    /* Text Embeddings Inference's shape: "texts" in, a bare sorted array of {index, score}
     * (and "text" with return_text) out */
    json_t *q = json_object_get(body, "query"), *docs = json_object_get(body, "documents");
    bool tei = !docs && json_object_get(body, "texts");
    bool return_text = false;
    if (tei) docs = json_object_get(body, "texts");
    if (tei && !ob_srv_get_bool(body, "return_text", &return_text, r)) { json_decref(body); return; }
    long long top_n = -1;
    input qi = {0}, *pairs = NULL, *di = NULL;
    float *sc = NULL;
    int nd = 0;
    if (!json_is_string(q) || !json_string_length(q)) { ob_srv_error(r, 400, NULL, "'query' must be a non-empty string"); goto done; }
    if (!json_is_array(docs) || !json_array_size(docs)) { ob_srv_error(r, 400, NULL, "'%s' must be a non-empty array", tei ? "texts" : "documents"); goto done; }
    for (size_t i = 0; i < json_array_size(docs); i++)
        if (!json_string_length(json_array_get(docs, i))) { ob_srv_error(r, 400, NULL, "documents[%zu] must be a non-empty string", i); goto done; }
    if (!ob_srv_get_int(body, "top_n", 1, 1 << 20, &top_n, r)) goto done;
    if (!tokenize(e, json_string_value(q), json_string_length(q), true, &qi, r)) goto done;
    if (!(di = parse_inputs(e, docs, &nd, r))) goto done;
    pairs = calloc((size_t)nd, sizeof(input));
    sc = malloc(sizeof(float) * (size_t)nd * (size_t)e->dim);
    if (!pairs || !sc) { ob_srv_error(r, 500, NULL, "out of memory"); goto done; }
    for (int i = 0; i < nd; i++) {
        if (!make_pair(e->tok, &qi, &di[i], &pairs[i], r)) goto done;
        if (pairs[i].n > e->n_ctx) {
            char what[64];
            snprintf(what, sizeof what, "query + document %d", i);
            exceed_error(r, pairs[i].n, e->n_ctx, what);
            goto done;
        }
    }
    if (!run(e, pairs, nd, sc, r)) goto done;
    int *order = malloc(sizeof(int) * (size_t)nd);
    if (!order) { ob_srv_error(r, 500, NULL, "out of memory"); goto done; }
    for (int i = 0; i < nd; i++) order[i] = i;
    for (int i = 1; i < nd; i++)
        for (int j = i; j > 0 && sc[(size_t)order[j - 1] * (size_t)e->dim] < sc[(size_t)order[j] * (size_t)e->dim]; j--) {
            int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
        }
    int keep = top_n > 0 && top_n < nd ? (int)top_n : nd;
    json_t *res = json_array();
    long long tokens = 0;
    for (int i = 0; i < nd; i++) tokens += pairs[i].n;
    for (int i = 0; i < keep; i++) {
        int k = order[i];
        json_t *doc = json_array_get(docs, (size_t)k);
        json_t *o = json_pack("{s:i,s:f}", "index", k, tei ? "score" : "relevance_score", (double)sc[(size_t)k * (size_t)e->dim]);
        if (tei && return_text) json_object_set(o, "text", doc);
        else if (!tei && json_is_string(doc)) json_object_set_new(o, "document", json_pack("{s:O}", "text", doc));
        json_array_append_new(res, o);
    }
    free(order);
    if (tei) {
        ob_srv_json(r, 200, res);
        goto done;
    }
    ob_srv_json(r, 200, json_pack("{s:s,s:s,s:o,s:{s:I,s:I}}", "object", "list", "model", s->model_id, "results", res,
                                  "usage", "prompt_tokens", tokens, "total_tokens", tokens));
done:
    free(qi.ids);
    inputs_free(di, nd);
    inputs_free(pairs, pairs ? nd : 0);
    free(sc);
    json_decref(body);
}

bool ob_oai_ready(ob_server_state *s, ob_resp *r);

bool ob_srv_route_embeddings(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    const char *p = rq->path;
    bool emb_oai = !strcmp(p, "/v1/embeddings"), emb_native = !strcmp(p, "/embedding") || !strcmp(p, "/embeddings");
    bool rerank = !strcmp(p, "/v1/rerank") || !strcmp(p, "/rerank") || !strcmp(p, "/v1/reranking") || !strcmp(p, "/reranking");
    if (!emb_oai && !emb_native && !rerank) return false;
    if (strcmp(rq->method, "POST")) { ob_srv_error(r, 405, NULL, "%s takes POST", p); return true; }
    if (!ob_oai_ready(s, r)) return true;
    ob_srv_embd *e = s->embd;
    if (!e) {
        ob_srv_error(r, 501, "not_supported_error", "This server does not support %s. Start it with `%s`", rerank ? "reranking" : "embeddings",
                     rerank ? "--reranking" : "--embeddings");
        return true;
    }
    if (rerank) handle_rerank(s, e, rq, r);
    else handle_embeddings(s, e, rq, r, emb_native);
    return true;
}
