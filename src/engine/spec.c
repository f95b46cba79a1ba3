/* Speculative decoding: the draft side (see spec.h for the verification rule and why it
 * is exact). */
#include "engine/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/common.h"

struct ob_spec {
    ob_model *m;
    ob_context *ctx;
    ob_spec_params p;
    int n_seq, n_ctx, n_batch, n_vocab;
    int32_t *rec;            /* [n_seq, n_ctx] tokens in each draft sequence's KV */
    int *n_rec;              /* [n_seq] */
    int32_t *b_tok, *b_pos, *b_seq;  /* [n_batch] */
    int8_t *b_want;
    int *row;                /* [n_batch] per ob_spec_seq index: logits row in the last batch or -1 */
    int *cap;                /* [n_batch] per ob_spec_seq index: effective n_max */
    bool *live;              /* [n_batch] per ob_spec_seq index: still drafting */
};

ob_spec_params ob_spec_default_params(void) {
    ob_spec_params p = {.n_max = 16, .n_min = 0, .p_min = 0.75f};
    return p;
}

const ob_spec_params *ob_spec_params_of(const ob_spec *s) { return &s->p; }

static void piece_str(const ob_tokenizer *t, int32_t id, char *out, size_t cap) {
    size_t n = 0;
    const char *p = ob_token_piece(t, id, &n);
    if (!p) n = 0;
    size_t k = 0;
    for (size_t i = 0; i < n && k + 5 < cap; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c < 0x7f && c != '\'') out[k++] = (char)c;
        else k += (size_t)snprintf(out + k, cap - k, "\\x%02x", c);
    }
    out[k] = 0;
}

ob_status ob_spec_check_vocab(const ob_model *target, const ob_model *draft, char *err, size_t err_len) {
    const ob_tokenizer *a = ob_model_tokenizer(target), *b = ob_model_tokenizer(draft);
    ob_model_info ia, ib;
    ob_model_get_info(target, &ia);
    ob_model_get_info(draft, &ib);
    if (!a || !b) return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "draft model: a model has no tokenizer");
    int na = ob_tokenizer_n_vocab(a), nb = ob_tokenizer_n_vocab(b);
    if (na != nb)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED,
                       "draft model '%s' has a different vocabulary from the target '%s' (%d vs %d tokens); "
                       "a draft must use the target's tokenizer", ib.name, ia.name, nb, na);
    if (ob_token_bos(a) != ob_token_bos(b) || ob_token_eos(a) != ob_token_eos(b))
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED,
                       "draft model '%s' has different special tokens from the target '%s' (bos %d/%d, eos %d/%d)",
                       ib.name, ia.name, ob_token_bos(b), ob_token_bos(a), ob_token_eos(b), ob_token_eos(a));
    for (int i = 0; i < na; i++) {
        size_t la = 0, lb = 0;
        const char *pa = ob_token_piece(a, i, &la), *pb = ob_token_piece(b, i, &lb);
        if (la != lb || (la && (!pa || !pb || memcmp(pa, pb, la) != 0))) {
            char sa[64], sb[64];
            piece_str(a, i, sa, sizeof sa);
            piece_str(b, i, sb, sizeof sb);
            return ob_fail(err, err_len, OB_ERR_UNSUPPORTED,
                           "draft model '%s' has a different vocabulary from the target '%s' (token %d is '%s' vs '%s')",
                           ib.name, ia.name, i, sb, sa);
        }
    }
    return OB_OK;
}

ob_status ob_spec_new(ob_model *draft, const ob_spec_params *p, int n_seq, int n_ctx, int n_batch,
                      ob_spec **out, char *err, size_t err_len) {
    *out = NULL;
    if (n_seq < 1 || n_ctx < 2 || n_batch < 1 || !p || p->n_max < 0 || p->n_min < 0 || !(p->p_min >= 0 && p->p_min <= 1))
        return ob_fail(err, err_len, OB_ERR_ARG, "draft: bad parameters");
    ob_spec *s = calloc(1, sizeof *s);
    if (!s) return ob_fail(err, err_len, OB_ERR_NOMEM, "draft: out of memory");
    s->m = draft;
    s->p = *p;
    s->n_seq = n_seq;
    s->n_ctx = n_ctx;
    /* each draft step feeds one token per sequence: the batch must hold them all */
    s->n_batch = OB_MAX(n_batch, n_seq);
    ob_model_info mi;
    ob_model_get_info(draft, &mi);
    s->n_vocab = OB_MIN(mi.n_vocab, ob_tokenizer_n_vocab(ob_model_tokenizer(draft)));
    ob_context_params cp = ob_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq = n_seq;
    cp.n_batch = s->n_batch;
    char e2[256];
    ob_status st = ob_context_new(draft, &cp, &s->ctx, e2, sizeof e2);
    if (st != OB_OK) {
        free(s);
        return ob_fail(err, err_len, st, "draft context: %s", e2);
    }
    size_t nb = (size_t)s->n_batch;
    s->rec = malloc((size_t)n_seq * (size_t)n_ctx * sizeof(int32_t));
    s->n_rec = calloc((size_t)n_seq, sizeof(int));
    s->b_tok = malloc(nb * sizeof(int32_t));
    s->b_pos = malloc(nb * sizeof(int32_t));
    s->b_seq = malloc(nb * sizeof(int32_t));
    s->b_want = malloc(nb);
    s->row = malloc(nb * sizeof(int));
    s->cap = malloc(nb * sizeof(int));
    s->live = malloc(nb * sizeof(bool));
    if (!s->rec || !s->n_rec || !s->b_tok || !s->b_pos || !s->b_seq || !s->b_want || !s->row ||
        !s->cap || !s->live) {
        ob_spec_free(s);
        return ob_fail(err, err_len, OB_ERR_NOMEM, "draft: out of memory");
    }
    *out = s;
    return OB_OK;
}

void ob_spec_free(ob_spec *s) {
    if (!s) return;
    ob_context_free(s->ctx);
    free(s->rec);
    free(s->n_rec);
    free(s->b_tok);
    free(s->b_pos);
    free(s->b_seq);
    free(s->b_want);
    free(s->row);
    free(s->cap);
    free(s->live);
    free(s);
}

void ob_spec_reset_seq(ob_spec *s, int seq) {
    if (!s || seq < 0 || seq >= s->n_seq) return;
    ob_seq_truncate(s->ctx, seq, 0);
    s->n_rec[seq] = 0;
}

/* Token j of what a sequence should hold: its history, then the pending token. */
static int32_t full_tok(const ob_spec_seq *q, int j) { return j < q->n_hist ? q->hist[j] : q->last; }

/* Takes the draft's greedy choice from a logits row; false when it is not confident
 * enough (p_min) to be worth proposing. */
static bool pick(const ob_spec *s, const float *logits, int32_t *tok) {
    const int n = s->n_vocab, best = ob_argmax_f32(logits, n);
    *tok = best;
    if (!(logits[best] == logits[best])) return false;
    if (s->p.p_min <= 0) return true;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)(logits[i] - logits[best]));
    return 1.0 / sum >= (double)s->p.p_min;
}

/* Appends token tok at the end of sequence q's draft record and the batch. */
static void push(ob_spec *s, int *n, const ob_spec_seq *q, int32_t tok, bool want) {
    int seq = q->seq;
    s->b_tok[*n] = tok;
    s->b_pos[*n] = s->n_rec[seq];
    s->b_seq[*n] = seq;
    s->b_want[*n] = want ? 1 : 0;
    s->rec[(size_t)seq * (size_t)s->n_ctx + (size_t)s->n_rec[seq]] = tok;
    s->n_rec[seq]++;
    (*n)++;
}

static ob_status fail_all(ob_spec *s, ob_spec_seq *seqs, int n, ob_status st) {
    for (int i = 0; i < n; i++) {
        seqs[i].n_draft = 0;
        ob_spec_reset_seq(s, seqs[i].seq);
    }
    return st;
}

/* Takes the next proposal of sequence i from its logits row, ending its draft when the
 * draft is unsure or its cap is reached. */
static void take(ob_spec *s, ob_spec_seq *q, int i) {
    int32_t t;
    const float *lg = ob_get_logits(s->ctx, s->row[i]);
    if (!lg || !pick(s, lg, &t)) {
        s->live[i] = false;
        return;
    }
    q->draft[q->n_draft++] = t;
    if (q->n_draft >= s->cap[i]) s->live[i] = false;
}

ob_status ob_spec_draft(ob_spec *s, ob_spec_seq *seqs, int n, char *err, size_t err_len) {
    if (n > s->n_batch) return ob_fail(err, err_len, OB_ERR_ARG, "draft: %d sequences over the batch of %d", n, s->n_batch);
    for (int i = 0; i < n; i++) {
        ob_spec_seq *q = &seqs[i];
        q->n_draft = 0;
        s->live[i] = false;
        if (q->seq < 0 || q->seq >= s->n_seq || q->n_hist < 0) return fail_all(s, seqs, n, ob_fail(err, err_len, OB_ERR_ARG, "draft: bad sequence"));
        /* the draft holds hist + last + all but the final proposal */
        int cap = OB_MIN(OB_MIN(q->n_max, s->p.n_max), s->n_ctx - q->n_hist);
        s->cap[i] = cap;
        if (cap <= 0 || q->n_hist + 1 > s->n_ctx) continue;
        int L = q->n_hist + 1, seq = q->seq, k = 0;
        const int32_t *rec = s->rec + (size_t)seq * (size_t)s->n_ctx;
        while (k < s->n_rec[seq] && k < L - 1 && rec[k] == full_tok(q, k)) k++;
        ob_seq_truncate(s->ctx, seq, k);
        /* a draft model with recurrent layers goes back to a state checkpoint, or to 0
         * (ob_seq_truncate), and keeps one where its proposals start, for the next round */
        s->n_rec[seq] = ob_seq_len(s->ctx, seq);
        ob_seq_checkpoint_at(s->ctx, seq, L);
        s->live[i] = true;
    }
    /* catch-up: feed each sequence what its draft KV lacks, in chunks of the batch */
    for (;;) {
        int nb = 0;
        for (int i = 0; i < n; i++) {
            s->row[i] = -1;
            ob_spec_seq *q = &seqs[i];
            if (!s->live[i]) continue;
            int L = q->n_hist + 1;
            while (nb < s->n_batch && s->n_rec[q->seq] < L) {
                int j = s->n_rec[q->seq];
                if (j == L - 1) s->row[i] = nb;
                push(s, &nb, q, full_tok(q, j), j == L - 1);
            }
        }
        if (nb == 0) break;
        ob_batch b = {.n_tokens = nb, .token = s->b_tok, .pos = s->b_pos, .seq = s->b_seq, .want_logits = s->b_want};
        ob_status st = ob_decode(s->ctx, &b, err, err_len);
        if (st != OB_OK) return fail_all(s, seqs, n, st);
        for (int i = 0; i < n; i++)
            if (s->live[i] && s->row[i] >= 0) take(s, &seqs[i], i);
    }
    /* draft steps: one token per live sequence per decode */
    for (;;) {
        int nb = 0;
        for (int i = 0; i < n; i++) {
            s->row[i] = -1;
            ob_spec_seq *q = &seqs[i];
            if (!s->live[i]) continue;
            s->row[i] = nb;
            push(s, &nb, q, q->draft[q->n_draft - 1], true);
        }
        if (nb == 0) break;
        ob_batch b = {.n_tokens = nb, .token = s->b_tok, .pos = s->b_pos, .seq = s->b_seq, .want_logits = s->b_want};
        ob_status st = ob_decode(s->ctx, &b, err, err_len);
        if (st != OB_OK) return fail_all(s, seqs, n, st);
        for (int i = 0; i < n; i++)
            if (s->live[i]) take(s, &seqs[i], i);
    }
    for (int i = 0; i < n; i++)
        if (seqs[i].n_draft < s->p.n_min) seqs[i].n_draft = 0;
    return OB_OK;
}
