/* Streaming generation for `1bit run` (see run_gen.h). */
#include "app/run_gen.h"
#include "core/common.h"
#include "engine/sampler.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ob_status ob_run_gen_init(ob_run_gen *g, ob_model *m, ob_context *c, const ob_sampler_params *sp, int n_batch) {
    memset(g, 0, sizeof(*g));
    g->m = m;
    g->c = c;
    g->tok = ob_model_tokenizer(m);
    g->n_batch = n_batch > 0 ? n_batch : 512;
    g->s = ob_sampler_new(sp, ob_tokenizer_n_vocab(g->tok));
    g->hist = malloc(sizeof(int32_t) * (size_t)ob_context_n_ctx(c));
    return g->s && g->hist ? OB_OK : OB_ERR_NOMEM;
}

ob_status ob_run_gen_add_draft(ob_run_gen *g, ob_model *dm, const ob_spec_params *spp, char *err, size_t err_len) {
    if (ob_model_has_recurrent_state(g->m)) {
        /* a rejected draft would have to be cut off a state that cannot be cut back */
        fprintf(stderr, "1bit: the model has recurrent layers: going on without the draft model\n");
        return OB_OK;
    }
    ob_status st = ob_spec_check_vocab(g->m, dm, err, err_len);
    if (!st) st = ob_spec_new(dm, spp, 1, ob_context_n_ctx(g->c), g->n_batch, &g->spec, err, err_len);
    if (st) return st;
    size_t nm = (size_t)spp->n_max + 1;
    g->draft = malloc(sizeof(int32_t) * nm);
    g->b_tok = malloc(sizeof(int32_t) * nm);
    g->b_pos = malloc(sizeof(int32_t) * nm);
    g->b_seq = malloc(sizeof(int32_t) * nm);
    g->b_want = malloc(nm);
    if (!g->draft || !g->b_tok || !g->b_pos || !g->b_seq || !g->b_want)
        return ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
    return OB_OK;
}

ob_status ob_run_gen_set_grammar(ob_run_gen *g, const char *gbnf, char *err, size_t err_len) {
    ob_status st = ob_grammar_parse(gbnf, strlen(gbnf), &g->gram, err, err_len);
    if (st) return st;
    /* the sampler's vocabulary: control tokens are never text here */
    g->gv = ob_grammar_vocab_of(g->tok, ob_tokenizer_n_vocab(g->tok), false);
    return g->gv ? OB_OK : ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
}

void ob_run_gen_free(ob_run_gen *g) {
    ob_grammar_matcher_free(g->gm);
    ob_grammar_vocab_free(g->gv);
    ob_grammar_free(g->gram);
    ob_spec_free(g->spec);
    free(g->hist);
    free(g->draft);
    free(g->b_tok);
    free(g->b_pos);
    free(g->b_seq);
    free(g->b_want);
    ob_sampler_free(g->s);
    memset(g, 0, sizeof(*g));
}

static bool stopped(const ob_run_gen *g) { return g->stop && *g->stop; }

/* The next token from logits, under the grammar when there is one (its matcher follows the
 * token); -1 when the grammar allows none. */
static int32_t sample(ob_run_gen *g, const float *logits) {
    if (!g->gm) return ob_sampler_sample(g->s, logits);
    ob_token_filter f = ob_grammar_filter(g->gm);
    int32_t t = ob_sampler_sample_filtered(g->s, logits, &f);
    if (t >= 0 && ob_grammar_matcher_accept_token(g->gm, t)) return t;
    if (ob_grammar_matcher_error(g->gm)) fprintf(stderr, "\n1bit: grammar: %s\n", ob_grammar_matcher_error(g->gm));
    return -1;
}

static void reply_append(ob_run_reply *r, const char *p, size_t n) {
    if (r->len + n + 1 > r->cap) {
        size_t cap = (r->len + n + 1) * 2;
        char *t = realloc(r->text, cap);
        if (!t) return;
        r->text = t;
        r->cap = cap;
    }
    memcpy(r->text + r->len, p, n);
    r->len += n;
    r->text[r->len] = 0;
}

/* Streams token id's text to stdout and records it in the reply. */
static void emit(ob_run_gen *g, ob_run_reply *r, int32_t id) {
    if (r->n_ids == r->cap_ids) {
        int cap = r->cap_ids ? r->cap_ids * 2 : 256;
        int32_t *t = realloc(r->ids, sizeof(int32_t) * (size_t)cap);
        if (t) { r->ids = t; r->cap_ids = cap; }
    }
    if (r->n_ids < r->cap_ids) r->ids[r->n_ids++] = id;
    char buf[256];
    size_t w = ob_detok_push(g->tok, &r->dt, id, buf, sizeof(buf));
    if (w > sizeof(buf)) return;
    fwrite(buf, 1, w, stdout);
    fflush(stdout);
    reply_append(r, buf, w);
}

void ob_run_reply_flush(ob_run_reply *r) {
    char buf[256];
    size_t w = ob_detok_flush(&r->dt, buf, sizeof(buf));
    if (w && w <= sizeof(buf)) {
        fwrite(buf, 1, w, stdout);
        reply_append(r, buf, w);
    }
    fflush(stdout);
    memset(&r->dt, 0, sizeof(r->dt));
}

void ob_run_reply_free(ob_run_reply *r) {
    free(r->ids);
    free(r->text);
    memset(r, 0, sizeof(*r));
}

/* Feeds id at the end of sequence 0 together with the draft's proposals, then samples the
 * target's tokens row by row (see engine/spec.h for why this equals plain decoding).
 * Emitted tokens go through emit like plain decoding's; *k counts them. Returns the next
 * sampled token not yet in the KV, or -1 when the reply ended (*end says why). */
static int32_t spec_step(ob_run_gen *g, int32_t id, int *k, int n_predict, ob_run_reply *r, ob_run_end *end) {
    char err[512];
    int n_ctx = ob_context_n_ctx(g->c);
    /* row i is plain decoding's token decoded at n_past + i: keep within its limits */
    int cap = OB_MIN(n_predict - *k - 1, n_ctx - g->n_past - 2);
    ob_spec_seq q = {.seq = 0, .hist = g->hist, .n_hist = g->n_past, .last = id, .n_max = cap, .draft = g->draft};
    int nd = 0;
    if (cap > 0) {
        if (ob_spec_draft(g->spec, &q, 1, err, sizeof(err)) == OB_OK) nd = q.n_draft;
        else fprintf(stderr, "1bit: draft: %s (going on without it)\n", err);
    }
    g->hist[g->n_past] = id;
    for (int i = 0; i <= nd; i++) {
        g->b_tok[i] = i == 0 ? id : g->draft[i - 1];
        g->b_pos[i] = g->n_past + i;
        g->b_seq[i] = 0;
        g->b_want[i] = 1;
    }
    ob_batch b = {nd + 1, g->b_tok, g->b_pos, g->b_seq, g->b_want};
    if (ob_decode(g->c, &b, err, sizeof(err))) {
        fprintf(stderr, "1bit: %s\n", err);
        *end = OB_RUN_END_ERROR;
        return -1;
    }
    g->n_past++;
    g->n_drafted += nd;
    int32_t next = -1;
    for (int i = 0; i <= nd; i++) {
        int32_t t = sample(g, ob_get_logits(g->c, i));
        if (t < 0) { *end = OB_RUN_END_EOG; break; }
        if (i == nd || t != g->draft[i]) { next = t; break; }
        /* accepted: already in the KV at n_past; the checks plain decoding makes */
        g->n_accepted++;
        if (ob_token_is_eog(g->tok, t)) { *end = OB_RUN_END_EOG; break; }
        emit(g, r, t);
        if (++*k >= n_predict) { *end = OB_RUN_END_CAP; break; }
        if (g->n_past + 1 >= n_ctx) { *end = OB_RUN_END_CTX; break; }
        g->hist[g->n_past++] = t;
    }
    ob_seq_truncate(g->c, 0, g->n_past);
    return next;
}

/* Decodes toks [0, n) at the end of sequence 0 in passes of n_batch, so an interrupt is
 * seen between passes; the logits of the last token are left in the context. */
static ob_run_end prefill(ob_run_gen *g, const int32_t *toks, int n, int *n_last) {
    char err[512];
    int nb = OB_MIN(n, g->n_batch);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)nb), *seq = calloc((size_t)nb, sizeof(int32_t));
    if (!pos || !seq) {
        free(pos);
        free(seq);
        fprintf(stderr, "1bit: out of memory\n");
        return OB_RUN_END_ERROR;
    }
    ob_run_end end = OB_RUN_END_CAP;
    for (int off = 0; off < n; off += nb) {
        int m = OB_MIN(nb, n - off);
        for (int i = 0; i < m; i++) pos[i] = g->n_past + i;
        ob_batch b = {m, toks + off, pos, seq, NULL};
        if (ob_decode(g->c, &b, err, sizeof(err))) {
            fprintf(stderr, "1bit: %s\n", err);
            end = OB_RUN_END_ERROR;
            break;
        }
        for (int i = 0; i < m; i++) ob_sampler_accept(g->s, toks[off + i]);
        memcpy(g->hist + g->n_past, toks + off, sizeof(int32_t) * (size_t)m);
        g->n_past += m;
        *n_last = m;
        if (stopped(g)) { end = OB_RUN_END_STOP; break; }
    }
    free(pos);
    free(seq);
    return end;
}

ob_run_end ob_run_gen_reply(ob_run_gen *g, const int32_t *toks, int n, int n_predict, ob_run_reply *r) {
    char err[512];
    int n_ctx = ob_context_n_ctx(g->c);
    if (n <= 0 || g->n_past + n >= n_ctx) {
        fprintf(stderr, "1bit: the prompt (%d tokens) does not fit the context of %d tokens (-c)\n", g->n_past + n, n_ctx);
        return OB_RUN_END_ERROR;
    }
    double t0 = ob_time_s();
    int n_last = 0;
    ob_run_end end = prefill(g, toks, n, &n_last);
    r->n_prompt += n;
    r->t_prompt += ob_time_s() - t0;
    if (end != OB_RUN_END_CAP || n_predict <= 0) return end;
    if (g->gram && r->n_ids == 0) {
        /* a reply's first tokens: the grammar from its start */
        ob_grammar_matcher_free(g->gm);
        g->gm = ob_grammar_matcher_new(g->gram, g->gv, true);
        const char *why = g->gm ? ob_grammar_matcher_error(g->gm) : "out of memory";
        if (why) {
            fprintf(stderr, "1bit: grammar: %s\n", why);
            return OB_RUN_END_ERROR;
        }
    }
    t0 = ob_time_s();
    int32_t id = sample(g, ob_get_logits(g->c, n_last - 1));
    if (g->spec) {
        for (int k = 0;;) {
            if (id < 0 || ob_token_is_eog(g->tok, id)) { end = OB_RUN_END_EOG; break; }
            emit(g, r, id);
            if (++k >= n_predict) { end = OB_RUN_END_CAP; break; }
            if (g->n_past + 1 >= n_ctx) { end = OB_RUN_END_CTX; break; }
            if (stopped(g)) { end = OB_RUN_END_STOP; break; }
            id = spec_step(g, id, &k, n_predict, r, &end);
            if (id < 0) break;
        }
    } else {
        /* Each step samples its next token in the step itself (on the device when the
         * sampler allows: only the token comes back); the last emitted token is decoded
         * without a draw, so the sampler's stream is where host sampling would leave it. */
        for (int k = 0;; k++) {
            if (id < 0 || ob_token_is_eog(g->tok, id)) { end = OB_RUN_END_EOG; break; }
            emit(g, r, id);
            if (g->n_past + 1 >= n_ctx) { end = OB_RUN_END_CTX; break; }
            int32_t p = g->n_past, s0 = 0, next = -1;
            ob_batch nb = {1, &id, &p, &s0, NULL};
            bool last = k + 1 >= n_predict;
            /* a grammar's mask is applied on the host: the logits come back */
            ob_status st = last || g->gm ? ob_decode(g->c, &nb, err, sizeof(err))
                                         : ob_decode_sample(g->c, &nb, &g->s, &next, err, sizeof(err));
            if (!st && !last && g->gm) next = sample(g, ob_get_logits(g->c, 0));
            if (st) {
                fprintf(stderr, "1bit: %s\n", err);
                end = OB_RUN_END_ERROR;
                break;
            }
            g->hist[g->n_past++] = id;
            if (last) { end = OB_RUN_END_CAP; break; }
            if (stopped(g)) { end = OB_RUN_END_STOP; break; }
            id = next;
        }
    }
    r->t_gen += ob_time_s() - t0;
    return end;
}

int32_t *ob_run_tokenize(const ob_tokenizer *t, const char *text, bool add_special, int *n) {
    size_t len = strlen(text);
    if (len > (size_t)1 << 30) return NULL;
    int cap = (int)len + 16;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    if (!ids) return NULL;
    int k = ob_tokenize(t, text, len, ids, cap, add_special, true);
    if (k > cap) {
        int32_t *r = realloc(ids, sizeof(int32_t) * (size_t)k);
        if (!r) { free(ids); return NULL; }
        ids = r;
        k = ob_tokenize(t, text, len, ids, k, add_special, true);
    }
    if (k < 0) { free(ids); return NULL; }
    *n = k;
    return ids;
}
