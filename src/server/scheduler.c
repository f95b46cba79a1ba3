/* Continuous batching over n_slots sequences of one context (see scheduler.h). */
#include "server/scheduler.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <jansson.h>

#include "core/common.h"
#include "engine/sampler.h"
#include "engine/spec.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

struct ob_task {
    /* input, fixed at submit */
    int32_t *prompt;
    int n_prompt, n_predict, n_probs;
    bool logprobs, post_sampling, ignore_eos, truncated;
    ob_sampler_params sp;
    int32_t *bias_tok;
    float *bias_val;
    char **stop;
    int n_stop;
    /* output, under s->mu */
    char *text;
    size_t text_len, text_cap, released;
    ob_tok_rec *toks;
    int n_toks, toks_cap;
    bool done, stopped_eos;
    ob_finish finish;
    int err_status, stop_idx;
    char err[256];
    int n_cached, n_gen, slot;
    int want_slot;       /* the request's id_slot (-1: any) */
    int n_drafted, n_accepted;
    double t_start, t_prompt_done, t_end;
    pthread_cond_t cond;
    int refs;
    bool cancelled;
    ob_task *next;
    /* scheduler thread only */
    ob_sampler *smp;
    ob_grammar *gram;    /* the request's grammar, or NULL */
    ob_grammar_matcher *gm; /* NULL while a lazy grammar waits for its trigger */
    /* lazy grammar: triggers (words then starts), where to look next, the leading thought */
    const ob_grammar_vocab *gv;
    bool lazy;
    char **trig;
    int n_words, n_trig;
    size_t trig_from, reply_at;
    int trig_think;      /* 0 undecided, 1 inside a leading thought, 2 past it or none */
    bool starts_done;    /* the reply's start can no longer match a start trigger */
    ob_detok dt;
    int n_past;          /* prompt tokens already in the KV */
    int32_t last_tok;    /* sampled, not yet in the KV */
};

typedef struct ob_slot {
    ob_task *task;
    int32_t *cache;      /* [n_ctx_slot] tokens held in this sequence's KV */
    int n_cache;
    int i_batch;         /* batch row whose logits this slot samples from, or -1 */
    int n_fed;           /* tokens this slot put in the current batch */
    int32_t *draft;      /* [spec n_max] proposals following last_tok this step */
    int n_draft;         /* proposals in the batch after last_tok (rows i_batch+1..) */
    uint64_t n_drafted, n_accepted;
    double t_used;
    uint64_t n_tasks;
} ob_slot;

struct ob_sched {
    ob_model *m;
    ob_context *ctx;
    ob_spec *spec;                    /* NULL: no draft model */
    ob_spec_seq *sq;                  /* [n_slots] draft requests of one step */
    int32_t *drafts;                  /* [n_slots, spec n_max] */
    const ob_tokenizer *tok;
    int n_slots, n_ctx_slot, n_batch, n_vocab;
    ob_slot *slots;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    ob_task *q_head, *q_tail;
    int n_queued;
    pthread_t th;
    bool thread_started, stop, failed, joined;
    /* a step's ob_decode runs without mu: slot actions wait until it is back (step_done) */
    bool decoding;
    pthread_cond_t step_done;
    int32_t *b_tok, *b_pos, *b_seq;   /* [n_batch] */
    int8_t *b_want;
    /* A step whose every logits row can be sampled in the graph (no logprobs, no drafts,
     * device-eligible samplers) runs through ob_decode_sample: only tokens come back. */
    ob_sampler **b_smp;               /* [n_batch] sampler per logits row */
    int32_t *b_out;                   /* [n_batch] token per logits row */
    bool b_sampled;                   /* the last step's rows are in b_out (no logits) */
    float *ps_w;                      /* [n_vocab] scratch: post-sampling logits */
    int32_t *ps_idx;                  /* [n_vocab] scratch: post-sampling candidates */
    float *gm_w;                      /* [n_vocab] scratch: logits a grammar leaves (post-sampling) */
    uint8_t *gm_mask;                 /* [n_vocab] scratch */
    /* token bytes for grammars, built by the first request that has one; the second lets
     * control tokens match by their text (tool-call markup made of them) */
    ob_grammar_vocab *gvocab, *gvocab_special;
    pthread_mutex_t gv_mu;
    ob_sched_stats st;
};

static void task_free(ob_task *t) {
    if (!t) return;
    free(t->prompt);
    free(t->bias_tok);
    free(t->bias_val);
    for (int i = 0; i < t->n_stop; i++) free(t->stop[i]);
    free(t->stop);
    free(t->text);
    free(t->toks);
    if (t->smp) ob_sampler_free(t->smp);
    ob_grammar_matcher_free(t->gm);
    ob_grammar_free(t->gram);
    for (int i = 0; i < t->n_trig; i++) free(t->trig[i]);
    free(t->trig);
    pthread_cond_destroy(&t->cond);
    free(t);
}

/* Drops one reference; the caller holds s->mu. */
static void task_unref(ob_task *t) {
    if (--t->refs == 0) task_free(t);
}

static bool text_reserve(ob_task *t, size_t extra) {
    size_t need = t->text_len + extra + 1;
    if (need <= t->text_cap) return true;
    size_t cap = t->text_cap ? t->text_cap : 256;
    while (cap < need) cap *= 2;
    char *p = realloc(t->text, cap);
    if (!p) return false;
    t->text = p;
    t->text_cap = cap;
    return true;
}

/* Ends a task: the reader sees done; the scheduler's reference goes. Holds s->mu. */
static void task_finish(ob_sched *s, ob_task *t, ob_finish f, int status, const char *msg) {
    if (t->done) return;
    if (f != OB_FINISH_ERROR && !t->cancelled) {
        char tail[16];
        size_t n = ob_detok_flush(&t->dt, tail, sizeof tail);
        if (n <= sizeof tail && t->stop_idx < 0 && text_reserve(t, n)) {
            memcpy(t->text + t->text_len, tail, n);
            t->text_len += n;
        }
        if (t->stop_idx < 0) t->released = t->text_len; /* a partial stop never completed */
    }
    t->done = true;
    t->finish = f;
    t->err_status = status;
    if (msg) snprintf(t->err, sizeof t->err, "%s", msg);
    t->t_end = ob_time_s();
    if (t->t_prompt_done == 0) t->t_prompt_done = t->t_end;
    if (t->t_start > 0) {
        s->st.prompt_tokens += (uint64_t)(t->n_past - t->n_cached);
        s->st.prompt_s += t->t_prompt_done - t->t_start;
        s->st.gen_tokens += (uint64_t)t->n_gen;
        s->st.gen_s += t->t_end - t->t_prompt_done;
        if (f != OB_FINISH_ERROR && !t->cancelled) {
            s->st.last_prompt_tokens = t->n_prompt;
            s->st.last_gen_tokens = t->n_gen;
            s->st.last_ttft_s = t->t_prompt_done - t->t_start;
            double dt = t->t_end - t->t_prompt_done;
            s->st.last_tps = dt > 0 ? t->n_gen / dt : 0;
        }
    }
    s->st.requests_done++;
    pthread_cond_broadcast(&t->cond);
    task_unref(t);
}

/* Longest suffix of text that is a proper prefix of some stop string: held back so a
 * stream never shows the beginning of a stop string that then completes. */
static size_t stop_holdback(const ob_task *t) {
    size_t best = 0;
    for (int i = 0; i < t->n_stop; i++) {
        size_t sl = strlen(t->stop[i]);
        for (size_t k = OB_MIN(sl - 1, t->text_len); k > best; k--) {
            if (memcmp(t->text + t->text_len - k, t->stop[i], k) == 0) { best = k; break; }
        }
    }
    return best;
}

/* Appends a piece of generated text and applies stop strings. Returns true if a stop
 * string ended the task. Holds s->mu. */
static bool task_append_text(ob_task *t, const char *p, size_t n) {
    if (n == 0) return false;
    if (!text_reserve(t, n)) return false;
    size_t old = t->text_len;
    memcpy(t->text + old, p, n);
    t->text_len += n;
    t->text[t->text_len] = 0;
    size_t best = (size_t)-1;
    for (int i = 0; i < t->n_stop; i++) {
        size_t sl = strlen(t->stop[i]);
        size_t from = old > sl ? old - sl + 1 : 0;
        if (t->text_len < sl) continue;
        for (size_t j = from; j + sl <= t->text_len; j++) {
            if (memcmp(t->text + j, t->stop[i], sl) == 0) {
                if (j < best) { best = j; t->stop_idx = i; }
                break;
            }
        }
    }
    if (best != (size_t)-1) {
        t->text_len = best;
        t->text[best] = 0;
        t->released = best;
        return true;
    }
    size_t rel = t->text_len - stop_holdback(t);
    if (rel > t->released) t->released = rel;
    return false;
}

/* log softmax of logits into lp; fills the token record. */
static void fill_logprobs(ob_sched *s, const float *logits, int32_t tok, int n_top, ob_tok_rec *r) {
    int n = s->n_vocab;
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)(logits[i] - mx));
    float lse = mx + (float)log(sum);
    r->id = tok;
    r->logprob = (tok >= 0 && tok < n) ? logits[tok] - lse : -INFINITY;
    r->n_top = 0;
    for (int k = 0; k < n_top && k < OB_SRV_MAX_TOP; k++) {
        /* selection of the k-th largest, skipping those taken: n_top is small */
        int bi = -1;
        for (int i = 0; i < n; i++) {
            bool taken = false;
            for (int j = 0; j < k; j++) if (r->top_id[j] == i) { taken = true; break; }
            if (taken) continue;
            if (bi < 0 || logits[i] > logits[bi]) bi = i;
        }
        if (bi < 0) break;
        r->top_id[k] = bi;
        r->top_lp[k] = logits[bi] - lse;
        r->n_top++;
    }
}

static int cmp_w_desc(const void *a, const void *b, void *w) {
    float x = ((const float *)w)[*(const int32_t *)a], y = ((const float *)w)[*(const int32_t *)b];
    return x > y ? -1 : x < y ? 1 : (*(const int32_t *)a > *(const int32_t *)b) - (*(const int32_t *)a < *(const int32_t *)b);
}

/* The distribution the sampler draws from (logit bias, top-k, min-p, temperature, top-p,
 * in ob_sample_pick's order; repetition penalties are not replayed): tok's probability
 * and the n_top most likely, none of them zero. Greedy is a point mass on tok. */
static void fill_post_probs(ob_sched *s, const ob_task *t, const float *logits, int32_t tok, int n_top, ob_tok_rec *r) {
    const ob_sampler_params *p = &t->sp;
    int n = s->n_vocab;
    r->id = tok;
    r->logprob = 1.0f;
    r->n_top = 0;
    if (p->temperature <= 0) {
        if (n_top > 0) {
            r->top_id[0] = tok;
            r->top_lp[0] = 1.0f;
            r->n_top = 1;
        }
        return;
    }
    float *w = s->ps_w;
    int32_t *idx = s->ps_idx;
    memcpy(w, logits, (size_t)n * sizeof *w);
    for (int i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias_tok[i] >= 0 && p->logit_bias_tok[i] < n) w[p->logit_bias_tok[i]] += p->logit_bias_val[i];
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) if (w[i] > mx) mx = w[i];
    /* candidates: above the min-p floor, then the k best */
    float lim = p->min_p > 0 ? mx + (float)(log(p->min_p) * p->temperature) - 1e-6f : -INFINITY;
    int m = 0;
    for (int i = 0; i < n; i++) if (w[i] >= lim && w[i] > -1e29f) idx[m++] = i;
    if (m == 0) return;
    qsort_r(idx, (size_t)m, sizeof *idx, cmp_w_desc, w);
    if (p->top_k > 0 && p->top_k < m) m = p->top_k;
    double sum = 0;
    for (int i = 0; i < m; i++) sum += exp((double)(w[idx[i]] - mx) / p->temperature);
    if (p->top_p < 1.0f) {
        double cum = 0;
        int keep = 0;
        while (keep < m) {
            cum += exp((double)(w[idx[keep]] - mx) / p->temperature) / sum;
            keep++;
            if (cum >= p->top_p) break;
        }
        m = keep;
        sum = 0;
        for (int i = 0; i < m; i++) sum += exp((double)(w[idx[i]] - mx) / p->temperature);
    }
    r->logprob = 0;
    for (int i = 0; i < m; i++) {
        float pr = (float)(exp((double)(w[idx[i]] - mx) / p->temperature) / sum);
        if (idx[i] == tok) r->logprob = pr;
        if (i < n_top && i < OB_SRV_MAX_TOP && pr > 0) {
            r->top_id[r->n_top] = idx[i];
            r->top_lp[r->n_top++] = pr;
        }
    }
}

static bool tok_push(ob_task *t, const ob_tok_rec *r) {
    if (t->n_toks == t->toks_cap) {
        int cap = t->toks_cap ? t->toks_cap * 2 : 64;
        ob_tok_rec *p = realloc(t->toks, (size_t)cap * sizeof *p);
        if (!p) return false;
        t->toks = p;
        t->toks_cap = cap;
    }
    t->toks[t->n_toks++] = *r;
    return true;
}

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int n = OB_MIN(na, nb), i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* Moves queued tasks into free slots, preferring the slot whose KV already holds the
 * longest prefix of the prompt. Holds s->mu. */
static void assign_tasks(ob_sched *s) {
    ob_task *prev = NULL;
    for (ob_task *t = s->q_head, *nx; t; t = nx) {
        nx = t->next;
        if (t->cancelled) {
            if (prev) prev->next = nx;
            else s->q_head = nx;
            if (s->q_tail == t) s->q_tail = prev;
            s->n_queued--;
            task_finish(s, t, OB_FINISH_NONE, 0, NULL);
            continue;
        }
        int best = -1, best_lcp = -1;
        for (int i = 0; i < s->n_slots; i++) {
            ob_slot *sl = &s->slots[i];
            if (sl->task || (t->want_slot >= 0 && i != t->want_slot)) continue;
            int l = common_prefix(sl->cache, sl->n_cache, t->prompt, t->n_prompt);
            if (l > best_lcp || (l == best_lcp && sl->t_used < s->slots[best].t_used)) {
                best = i;
                best_lcp = l;
            }
        }
        if (best < 0) {
            /* every slot busy, or the one it asked for: a later task may still fit */
            prev = t;
            continue;
        }
        if (prev) prev->next = nx;
        else s->q_head = nx;
        if (s->q_tail == t) s->q_tail = prev;
        t->next = NULL;
        s->n_queued--;
        ob_slot *sl = &s->slots[best];
        /* the last prompt token is always decoded again: its logits start the reply */
        int keep = OB_MIN(best_lcp, t->n_prompt - 1);
        ob_seq_truncate(s->ctx, best, keep);
        /* A model with recurrent layers resumes at its latest state checkpoint up to there,
         * or decodes the prompt again from 0 (ob_seq_truncate); it keeps one where this prompt
         * ends, for the next request that shares it (a conversation's next turn). */
        keep = ob_seq_len(s->ctx, best);
        ob_seq_checkpoint_at(s->ctx, best, t->n_prompt - 1);
        sl->n_cache = keep;
        sl->task = t;
        sl->n_tasks++;
        t->slot = best;
        t->n_past = keep;
        t->n_cached = keep;
        t->t_start = ob_time_s();
    }
}

static void fail_all(ob_sched *s, int status, const char *msg) {
    for (int i = 0; i < s->n_slots; i++) {
        if (s->slots[i].task) task_finish(s, s->slots[i].task, OB_FINISH_ERROR, status, msg);
        s->slots[i].task = NULL;
    }
    while (s->q_head) {
        ob_task *t = s->q_head;
        s->q_head = t->next;
        task_finish(s, t, OB_FINISH_ERROR, status, msg);
    }
    s->q_tail = NULL;
    s->n_queued = 0;
}

/* Fills the batch: one token per generating slot first (latency), then prompt chunks
 * in slot order until n_batch. Returns the token count. Holds s->mu. */
static int build_batch(ob_sched *s) {
    int n = 0;
    for (int i = 0; i < s->n_slots; i++) {
        ob_slot *sl = &s->slots[i];
        sl->i_batch = -1;
        sl->n_fed = 0;
        ob_task *t = sl->task;
        if (!t || t->n_past < t->n_prompt || n >= s->n_batch) continue;
        s->b_tok[n] = t->last_tok;
        s->b_pos[n] = sl->n_cache;
        s->b_seq[n] = i;
        s->b_want[n] = 1;
        sl->i_batch = n++;
        sl->n_fed = 1;
        /* the draft's proposals follow, each wanting logits for verification */
        for (int j = 0; j < sl->n_draft && n < s->n_batch; j++) {
            s->b_tok[n] = sl->draft[j];
            s->b_pos[n] = sl->n_cache + 1 + j;
            s->b_seq[n] = i;
            s->b_want[n] = 1;
            n++;
            sl->n_fed++;
        }
        sl->n_draft = sl->n_fed - 1;
    }
    for (int i = 0; i < s->n_slots && n < s->n_batch; i++) {
        ob_slot *sl = &s->slots[i];
        ob_task *t = sl->task;
        if (!t || t->n_past >= t->n_prompt) continue;
        int k = OB_MIN(t->n_prompt - t->n_past, s->n_batch - n);
        for (int j = 0; j < k; j++) {
            s->b_tok[n] = t->prompt[t->n_past + j];
            s->b_pos[n] = sl->n_cache + j;
            s->b_seq[n] = i;
            s->b_want[n] = 0;
            n++;
        }
        sl->n_fed = k;
        if (t->n_past + k == t->n_prompt) {
            s->b_want[n - 1] = 1;
            sl->i_batch = n - 1;
        }
    }
    return n;
}

/* Asks the draft for proposals for every generating slot (room permitting: the slot's
 * context, its n_predict, a fair share of the batch). Drops s->mu while the draft model
 * runs; slots change only on this thread. Holds s->mu. */
static void draft_slots(ob_sched *s) {
    int n_gen = 0, nq = 0;
    for (int i = 0; i < s->n_slots; i++) {
        ob_slot *sl = &s->slots[i];
        sl->n_draft = 0;
        if (sl->task && !sl->task->cancelled && sl->task->n_past >= sl->task->n_prompt) n_gen++;
    }
    if (!s->spec || n_gen == 0) return;
    int share = (s->n_batch - n_gen) / n_gen;
    for (int i = 0; i < s->n_slots; i++) {
        ob_slot *sl = &s->slots[i];
        ob_task *t = sl->task;
        if (!t || t->cancelled || t->n_past < t->n_prompt) continue;
        /* row r is plain decoding's token at position n_cache + r: stay inside the slot */
        int cap = OB_MIN(share, s->n_ctx_slot - 1 - sl->n_cache);
        if (t->n_predict >= 0) cap = OB_MIN(cap, t->n_predict - t->n_gen - 1);
        if (cap <= 0) continue;
        s->sq[nq++] = (ob_spec_seq){.seq = i, .hist = sl->cache, .n_hist = sl->n_cache, .last = t->last_tok,
                                    .n_max = cap, .draft = sl->draft};
    }
    if (nq == 0) return;
    char err[256];
    pthread_mutex_unlock(&s->mu);
    ob_status st = ob_spec_draft(s->spec, s->sq, nq, err, sizeof err);
    pthread_mutex_lock(&s->mu);
    if (st != OB_OK) {
        ob_log(OB_LOG_WARN, "serve: draft failed (going on without proposals): %s", err);
        return;
    }
    for (int k = 0; k < nq; k++) s->slots[s->sq[k].seq].n_draft = s->sq[k].n_draft;
}

/* A lazy grammar starts at the first trigger of the reply (past a leading thought): a
 * matcher is fed the text from the trigger's first byte (and the bytes the detokenizer
 * holds back), and every later token is sampled under it. A trigger whose text the grammar
 * refuses (the model wrote the word, then something else in the same token) leaves the
 * reply free from then on. Holds s->mu. */
static void lazy_trigger(ob_sched *s, ob_task *t) {
    const char *x = t->text ? t->text : "";
    size_t n = t->text_len;
    if (t->trig_think != 2) {
        if (t->trig_think == 0) {
            size_t i = 0;
            while (i < n && (x[i] == ' ' || x[i] == '\n' || x[i] == '\r' || x[i] == '\t')) i++;
            if (n - i < 7 && !memcmp(x + i, "<think>", n - i)) return; /* may still open one */
            t->trig_think = n - i >= 7 && !memcmp(x + i, "<think>", 7) ? 1 : 2;
            t->trig_from = t->trig_think == 1 ? i + 7 : 0;
        }
        if (t->trig_think == 1) {
            const char *e = memmem(x + t->trig_from, n - t->trig_from, "</think>", 8);
            if (!e) {
                if (n > t->trig_from + 7) t->trig_from = n - 7;
                return;
            }
            t->trig_from = (size_t)(e - x) + 8;
            t->trig_think = 2;
        }
        t->reply_at = t->trig_from;
    }
    size_t at = n, longest = 1;
    for (int k = 0; k < t->n_words; k++) {
        size_t wl = strlen(t->trig[k]);
        longest = OB_MAX(longest, wl);
        const char *p = t->trig_from < n ? memmem(x + t->trig_from, n - t->trig_from, t->trig[k], wl) : NULL;
        if (p && (size_t)(p - x) < at) at = (size_t)(p - x);
    }
    if (!t->starts_done && t->n_trig > t->n_words) {
        size_t b = t->reply_at;
        while (b < n && (x[b] == ' ' || x[b] == '\n' || x[b] == '\r' || x[b] == '\t')) b++;
        bool waiting = false;
        const size_t cand[2] = {t->reply_at, b};
        for (int k = t->n_words; k < t->n_trig; k++) {
            size_t wl = strlen(t->trig[k]);
            for (int c = 0; c < 2; c++) {
                size_t q = cand[c], have = OB_MIN(wl, n - q);
                if (memcmp(x + q, t->trig[k], have)) continue;
                if (have < wl) waiting = true;
                else if (q < at) at = q;
            }
        }
        if (b < n && !waiting) t->starts_done = true;
    }
    if (at == n) {
        if (n > t->trig_from + longest - 1) t->trig_from = n - (longest - 1);
        return;
    }
    t->lazy = false;
    t->gm = ob_grammar_matcher_new(t->gram, t->gv, !t->ignore_eos);
    bool ok = t->gm && ob_grammar_matcher_accept_bytes(t->gm, x + at, n - at) &&
              ob_grammar_matcher_accept_bytes(t->gm, (const char *)t->dt.pend, (size_t)t->dt.n_pend) &&
              !ob_grammar_matcher_error(t->gm);
    if (!ok) {
        ob_log(OB_LOG_DEBUG, "serve: the text after a tool-call trigger does not follow the grammar; left free");
        ob_grammar_matcher_free(t->gm);
        t->gm = NULL;
    }
}

/* Hands a sampled token to the slot's reader: end tokens, logprobs, text, stop strings,
 * length. Returns false when that ended the task (the slot is then free). Holds s->mu. */
static bool slot_emit(ob_sched *s, ob_slot *sl, ob_task *t, const float *logits, int32_t tok) {
    if (!t->ignore_eos && ob_token_is_eog(s->tok, tok)) {
        t->stopped_eos = true;
        sl->task = NULL;
        task_finish(s, t, OB_FINISH_STOP, 0, NULL);
        return false;
    }
    if (t->gm && !ob_grammar_matcher_accept_token(t->gm, tok)) { /* sampled under the mask: cannot happen */
        sl->task = NULL;
        task_finish(s, t, OB_FINISH_ERROR, 500, "the sampled token does not follow the grammar");
        return false;
    }
    if (t->logprobs && t->post_sampling) {
        ob_tok_rec r;
        fill_post_probs(s, t, logits, tok, t->n_probs, &r);
        tok_push(t, &r);
    } else if (t->logprobs) {
        ob_tok_rec r;
        fill_logprobs(s, logits, tok, t->n_probs, &r);
        tok_push(t, &r);
    } else {
        ob_tok_rec r = {.id = tok};
        tok_push(t, &r);
    }
    char piece[256];
    size_t pn = ob_detok_push(s->tok, &t->dt, tok, piece, sizeof piece);
    if (pn > sizeof piece) pn = 0; /* a piece this long is not text we can show */
    t->n_gen++;
    t->last_tok = tok;
    bool stopped = task_append_text(t, piece, pn);
    pthread_cond_broadcast(&t->cond);
    if (stopped) {
        sl->task = NULL;
        task_finish(s, t, OB_FINISH_STOP, 0, NULL);
        return false;
    }
    if (t->lazy) lazy_trigger(s, t);
    if ((t->n_predict >= 0 && t->n_gen >= t->n_predict) || sl->n_cache >= s->n_ctx_slot) {
        t->truncated = !(t->n_predict >= 0 && t->n_gen >= t->n_predict);
        sl->task = NULL;
        task_finish(s, t, OB_FINISH_LENGTH, 0, NULL);
        return false;
    }
    return true;
}

/* Samples under the task's grammar: disallowed tokens are out before any other sampler
 * step (engine/sampler.h). With post-sampling probabilities *logits becomes the logits
 * the grammar leaves (-inf elsewhere), which fill_post_probs then reads. -1: no token. */
static int32_t sample_grammar(ob_sched *s, ob_task *t, const float **logits) {
    if (t->logprobs && t->post_sampling) {
        ob_grammar_matcher_mask(t->gm, s->gm_mask);
        for (int i = 0; i < s->n_vocab; i++) s->gm_w[i] = s->gm_mask[i] ? (*logits)[i] : -INFINITY;
        *logits = s->gm_w;
    }
    ob_token_filter f = ob_grammar_filter(t->gm);
    return ob_sampler_sample_filtered(t->smp, *logits, &f);
}

/* After a forward: move fed tokens into each slot's cache record, sample where logits
 * were produced, and publish text. With proposals, rows are verified in order and the
 * KV is cut back after the last accepted one. Holds s->mu. */
static void consume_batch(ob_sched *s, int n) {
    double now = ob_time_s();
    for (int i = 0; i < s->n_slots; i++) {
        ob_slot *sl = &s->slots[i];
        ob_task *t = sl->task;
        if (!t || sl->n_fed == 0) continue;
        for (int j = 0; j < n; j++)
            if (s->b_seq[j] == i && sl->n_cache < s->n_ctx_slot) sl->cache[sl->n_cache++] = s->b_tok[j];
        if (t->n_past < t->n_prompt) t->n_past += sl->n_fed;
        sl->t_used = now;
        if (t->cancelled) {
            sl->task = NULL;
            task_finish(s, t, OB_FINISH_NONE, 0, NULL);
            continue;
        }
        if (sl->i_batch < 0) continue;
        if (t->t_prompt_done == 0) t->t_prompt_done = now;
        if (t->n_predict == 0) {
            /* n_predict / max_tokens 0: the prompt is evaluated (and cached), nothing is
             * generated, as llama-server does */
            sl->task = NULL;
            task_finish(s, t, OB_FINISH_LENGTH, 0, NULL);
            continue;
        }
        int nd = sl->n_draft;
        int keep = sl->n_cache - nd; /* KV up to and including the token fed before the proposals */
        t->n_drafted += nd;
        sl->n_drafted += (uint64_t)nd;
        s->st.n_drafted += (uint64_t)nd;
        for (int r = 0; r <= nd; r++) {
            /* what plain decoding's slot would hold when sampling this row */
            sl->n_cache = keep + r;
            const float *logits = s->b_sampled ? NULL : ob_get_logits(s->ctx, sl->i_batch + r);
            if (!logits && !s->b_sampled) {
                sl->task = NULL;
                task_finish(s, t, OB_FINISH_ERROR, 500, "no logits from the model");
                break;
            }
            int32_t tok;
            if (s->b_sampled) { /* no drafts in such a step: r == 0; the row is the count of wanted rows before */
                int row = 0;
                for (int j = 0; j < sl->i_batch; j++) row += s->b_want[j] != 0;
                tok = s->b_out[row];
            } else if (t->gm) {
                tok = sample_grammar(s, t, &logits);
                if (tok < 0) {
                    /* nothing may follow (the grammar is complete and end tokens are off), or
                     * the grammar outgrew the matcher */
                    const char *why = ob_grammar_matcher_error(t->gm);
                    sl->task = NULL;
                    if (why) task_finish(s, t, OB_FINISH_ERROR, 400, why);
                    else task_finish(s, t, OB_FINISH_STOP, 0, NULL);
                    break;
                }
            } else {
                tok = ob_sampler_sample(t->smp, logits);
            }
            bool accepted = r < nd && tok == sl->draft[r];
            if (accepted) {
                t->n_accepted++;
                sl->n_accepted++;
                s->st.n_draft_accepted++;
            }
            if (!slot_emit(s, sl, t, logits, tok) || !accepted) break;
        }
        if (nd > 0) ob_seq_truncate(s->ctx, i, sl->n_cache);
        sl->n_draft = 0;
    }
}

/* Whether every logits row of the batch of n can be sampled in the step's graph; fills
 * s->b_smp. Holds s->mu. */
static bool plan_device_sampling(ob_sched *s, int n) {
    int rows = 0;
    for (int j = 0; j < n; j++) {
        if (!s->b_want[j]) continue;
        if (s->b_seq[j] < 0 || s->b_seq[j] >= s->n_slots) return false;
        const ob_slot *sl = &s->slots[s->b_seq[j]];
        const ob_task *t = sl->task;
        /* a grammar's mask is applied on the host */
        if (!t || !t->smp || t->logprobs || t->gm || sl->n_draft > 0 || !ob_sampler_device_ok(t->smp)) return false;
        s->b_smp[rows++] = t->smp;
    }
    return rows > 0;
}

static void *sched_main(void *arg) {
    ob_sched *s = arg;
    char err[256];
    pthread_mutex_lock(&s->mu);
    for (;;) {
        for (int i = 0; i < s->n_slots; i++) {
            ob_task *t = s->slots[i].task;
            if (t && t->cancelled) {
                s->slots[i].task = NULL;
                task_finish(s, t, OB_FINISH_NONE, 0, NULL);
            }
        }
        if (s->stop) break;
        assign_tasks(s);
        draft_slots(s);
        int n = build_batch(s);
        if (n == 0) {
            pthread_cond_wait(&s->wake, &s->mu);
            continue;
        }
        /* The samplers stay with their slots' tasks while the lock is released: only this
         * thread finishes a task that holds a slot. */
        s->b_sampled = plan_device_sampling(s, n);
        s->decoding = true;
        pthread_mutex_unlock(&s->mu);
        ob_batch b = {.n_tokens = n, .token = s->b_tok, .pos = s->b_pos, .seq = s->b_seq,
                      .want_logits = s->b_want};
        err[0] = 0;
        ob_status st = s->b_sampled ? ob_decode_sample(s->ctx, &b, s->b_smp, s->b_out, err, sizeof err)
                                    : ob_decode(s->ctx, &b, err, sizeof err);
        pthread_mutex_lock(&s->mu);
        s->decoding = false;
        pthread_cond_broadcast(&s->step_done);
        s->st.n_decode_calls++;
        s->st.n_decode_tokens += (uint64_t)n;
        if (st == OB_ERR_DEVICE) {
            ob_log(OB_LOG_ERROR, "serve: device fault: %s", err);
            s->failed = true;
            fail_all(s, 500, "compute device fault; the server is shutting down");
            break;
        }
        if (st != OB_OK) {
            /* the batch's sequences may be half-written: forget them and fail their tasks */
            ob_log(OB_LOG_WARN, "serve: decode failed: %s", err);
            for (int i = 0; i < s->n_slots; i++) {
                ob_slot *sl = &s->slots[i];
                if (!sl->n_fed) continue;
                ob_seq_truncate(s->ctx, i, 0);
                sl->n_cache = 0;
                if (sl->task) task_finish(s, sl->task, OB_FINISH_ERROR, 500, err[0] ? err : "decode failed");
                sl->task = NULL;
            }
            continue;
        }
        consume_batch(s, n);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

ob_status ob_sched_new(ob_model *m, ob_context *ctx, ob_spec *spec, int n_slots, int n_batch, ob_sched **out,
                       char *err, size_t err_len) {
    *out = NULL;
    if (n_slots < 1 || n_batch < 1) return ob_fail(err, err_len, OB_ERR_ARG, "scheduler: bad slot or batch count");
    ob_sched *s = calloc(1, sizeof *s);
    if (!s) return ob_fail(err, err_len, OB_ERR_NOMEM, "scheduler: out of memory");
    s->m = m;
    s->ctx = ctx;
    s->tok = ob_model_tokenizer(m);
    s->n_slots = n_slots;
    s->n_batch = n_batch;
    s->n_ctx_slot = ob_context_n_ctx(ctx);
    s->n_vocab = ob_tokenizer_n_vocab(s->tok);
    ob_model_info mi;
    ob_model_get_info(m, &mi);
    if (mi.n_vocab > s->n_vocab) s->n_vocab = mi.n_vocab;
    s->slots = calloc((size_t)n_slots, sizeof *s->slots);
    s->b_tok = malloc((size_t)n_batch * sizeof(int32_t));
    s->b_pos = malloc((size_t)n_batch * sizeof(int32_t));
    s->b_seq = malloc((size_t)n_batch * sizeof(int32_t));
    s->b_want = malloc((size_t)n_batch);
    s->b_smp = calloc((size_t)n_batch, sizeof *s->b_smp);
    s->b_out = malloc((size_t)n_batch * sizeof(int32_t));
    s->ps_w = malloc((size_t)s->n_vocab * sizeof(float));
    s->ps_idx = malloc((size_t)s->n_vocab * sizeof(int32_t));
    s->gm_w = malloc((size_t)s->n_vocab * sizeof(float));
    s->gm_mask = malloc((size_t)s->n_vocab);
    bool ok = s->slots && s->b_tok && s->b_pos && s->b_seq && s->b_want && s->b_smp && s->b_out && s->ps_w && s->ps_idx &&
              s->gm_w && s->gm_mask;
    for (int i = 0; ok && i < n_slots; i++) {
        s->slots[i].cache = malloc((size_t)s->n_ctx_slot * sizeof(int32_t));
        ok = s->slots[i].cache != NULL;
    }
    if (spec && ob_model_has_recurrent_state(m)) {
        /* a rejected draft would have to be cut off a state that cannot be cut back */
        ob_log(OB_LOG_WARN, "serve: speculative decoding is off: %s has recurrent layers", mi.arch);
        spec = NULL;
    }
    if (ok && spec) {
        int n_max = OB_MAX(1, ob_spec_params_of(spec)->n_max);
        s->spec = spec;
        s->sq = calloc((size_t)n_slots, sizeof *s->sq);
        s->drafts = malloc((size_t)n_slots * (size_t)n_max * sizeof(int32_t));
        ok = s->sq && s->drafts;
        for (int i = 0; ok && i < n_slots; i++) s->slots[i].draft = s->drafts + (size_t)i * (size_t)n_max;
    }
    if (!ok) {
        ob_sched_free(s);
        return ob_fail(err, err_len, OB_ERR_NOMEM, "scheduler: out of memory");
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->gv_mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->step_done, NULL);
    if (pthread_create(&s->th, NULL, sched_main, s) != 0) {
        pthread_mutex_destroy(&s->mu);
        pthread_mutex_destroy(&s->gv_mu);
        pthread_cond_destroy(&s->wake);
        pthread_cond_destroy(&s->step_done);
        ob_sched_free(s);
        return ob_fail(err, err_len, OB_ERR_NOMEM, "scheduler: cannot start thread");
    }
    s->thread_started = true;
    *out = s;
    return OB_OK;
}

void ob_sched_stop(ob_sched *s) {
    if (!s || !s->thread_started) return;
    pthread_mutex_lock(&s->mu);
    bool joined = s->joined;
    s->stop = true;
    pthread_cond_signal(&s->wake);
    pthread_cond_broadcast(&s->step_done);
    pthread_mutex_unlock(&s->mu);
    if (!joined) pthread_join(s->th, NULL);
    pthread_mutex_lock(&s->mu);
    s->joined = true;
    fail_all(s, s->failed ? 500 : 503, s->failed ? "compute device fault" : "server shutting down");
    pthread_mutex_unlock(&s->mu);
}

void ob_sched_free(ob_sched *s) {
    if (!s) return;
    if (s->thread_started) {
        ob_sched_stop(s);
        pthread_mutex_destroy(&s->mu);
        pthread_mutex_destroy(&s->gv_mu);
        pthread_cond_destroy(&s->wake);
        pthread_cond_destroy(&s->step_done);
    }
    ob_grammar_vocab_free(s->gvocab);
    ob_grammar_vocab_free(s->gvocab_special);
    for (int i = 0; s->slots && i < s->n_slots; i++) free(s->slots[i].cache);
    free(s->slots);
    free(s->b_tok);
    free(s->b_pos);
    free(s->b_seq);
    free(s->b_want);
    free(s->b_smp);
    free(s->b_out);
    free(s->ps_w);
    free(s->ps_idx);
    free(s->gm_w);
    free(s->gm_mask);
    free(s->sq);
    free(s->drafts);
    free(s);
}

int ob_sched_n_ctx_slot(const ob_sched *s) { return s->n_ctx_slot; }
int ob_sched_n_slots(const ob_sched *s) { return s->n_slots; }

bool ob_sched_failed(ob_sched *s) {
    pthread_mutex_lock(&s->mu);
    bool f = s->failed;
    pthread_mutex_unlock(&s->mu);
    return f;
}

/* The vocabulary's token bytes for grammars (engine/sampler.h): made once, by the first
 * request with one. */
static ob_grammar_vocab *grammar_vocab(ob_sched *s, bool special) {
    pthread_mutex_lock(&s->gv_mu);
    ob_grammar_vocab **slot = special ? &s->gvocab_special : &s->gvocab;
    if (!*slot) *slot = ob_grammar_vocab_of(s->tok, s->n_vocab, special);
    ob_grammar_vocab *v = *slot;
    pthread_mutex_unlock(&s->gv_mu);
    return v;
}

ob_task *ob_sched_submit(ob_sched *s, const ob_task_params *p, ob_status *st, char *err, size_t err_len) {
    if (p->n_prompt < 1) {
        *st = ob_fail(err, err_len, OB_ERR_ARG, "the prompt is empty");
        return NULL;
    }
    if (p->pin_slot && (p->id_slot < 0 || p->id_slot >= s->n_slots)) {
        *st = ob_fail(err, err_len, OB_ERR_ARG, "id_slot %d is not a slot (0 .. %d)", p->id_slot, s->n_slots - 1);
        return NULL;
    }
    if (p->n_prompt >= s->n_ctx_slot) {
        *st = ob_fail(err, err_len, OB_ERR_CONTEXT,
                      "the request exceeds the available context size (%d prompt tokens, context %d per slot)",
                      p->n_prompt, s->n_ctx_slot);
        return NULL;
    }
    ob_task *t = calloc(1, sizeof *t);
    if (!t) goto nomem;
    pthread_cond_init(&t->cond, NULL);
    t->stop_idx = -1;
    t->slot = -1;
    t->want_slot = p->pin_slot ? p->id_slot : -1;
    t->n_prompt = p->n_prompt;
    t->n_predict = p->n_predict;
    t->n_probs = OB_MAX(0, OB_MIN(p->n_probs, OB_SRV_MAX_TOP));
    t->logprobs = p->logprobs || p->post_sampling;
    t->post_sampling = p->post_sampling;
    t->ignore_eos = p->ignore_eos;
    t->sp = p->sp;
    t->prompt = malloc((size_t)p->n_prompt * sizeof(int32_t));
    if (!t->prompt) goto nomem;
    memcpy(t->prompt, p->prompt, (size_t)p->n_prompt * sizeof(int32_t));
    if (p->sp.n_logit_bias > 0) {
        t->bias_tok = malloc((size_t)p->sp.n_logit_bias * sizeof(int32_t));
        t->bias_val = malloc((size_t)p->sp.n_logit_bias * sizeof(float));
        if (!t->bias_tok || !t->bias_val) goto nomem;
        memcpy(t->bias_tok, p->sp.logit_bias_tok, (size_t)p->sp.n_logit_bias * sizeof(int32_t));
        memcpy(t->bias_val, p->sp.logit_bias_val, (size_t)p->sp.n_logit_bias * sizeof(float));
        t->sp.logit_bias_tok = t->bias_tok;
        t->sp.logit_bias_val = t->bias_val;
    } else {
        t->sp.n_logit_bias = 0;
        t->sp.logit_bias_tok = NULL;
        t->sp.logit_bias_val = NULL;
    }
    if (p->n_stop > 0) {
        t->stop = calloc((size_t)p->n_stop, sizeof(char *));
        if (!t->stop) goto nomem;
        for (int i = 0; i < p->n_stop; i++) {
            if (!p->stop[i] || !p->stop[i][0]) continue;
            t->stop[t->n_stop] = strdup(p->stop[i]);
            if (!t->stop[t->n_stop]) goto nomem;
            t->n_stop++;
        }
    }
    /* DRY's breakers as this vocabulary's token sequences: the sampler keeps a copy */
    ob_dry_breakers brk = {0};
    if (ob_sampler_dry_on(&t->sp) && ob_dry_breakers_tokenize(s->tok, p->dry_breakers, &brk)) goto nomem;
    t->sp.n_dry_breakers = brk.n;
    t->sp.dry_breaker_len = brk.len;
    t->sp.dry_breaker_tok = brk.tok;
    t->smp = ob_sampler_new(&t->sp, s->n_vocab);
    ob_dry_breakers_free(&brk);
    t->sp.n_dry_breakers = 0;
    t->sp.dry_breaker_len = t->sp.dry_breaker_tok = NULL;
    if (!t->smp) goto nomem;
    /* the penalties and DRY see the prompt, as llama-server's samplers do */
    for (int i = 0; i < t->n_prompt; i++) ob_sampler_accept(t->smp, t->prompt[i]);
    if (p->grammar && p->grammar[0]) {
        char gerr[256];
        ob_status gst = ob_grammar_parse(p->grammar, strlen(p->grammar), &t->gram, gerr, sizeof gerr);
        if (gst == OB_ERR_NOMEM) goto nomem;
        if (gst) {
            task_free(t);
            *st = ob_fail(err, err_len, OB_ERR_ARG, "Failed to parse grammar: %s", gerr);
            return NULL;
        }
        ob_grammar_vocab *v = grammar_vocab(s, p->grammar_special);
        if (!v) goto nomem;
        t->gv = v;
        if (p->grammar_lazy) {
            t->lazy = true;
            t->trig_think = p->think_open ? 1 : 0;
            int nw = OB_MAX(0, p->n_grammar_words), ns = OB_MAX(0, p->n_grammar_starts);
            t->trig = calloc((size_t)(nw + ns) + 1, sizeof *t->trig);
            if (!t->trig) goto nomem;
            for (int i = 0; i < nw + ns; i++) { /* words first, then starts; empty ones skipped */
                const char *w = i < nw ? p->grammar_words[i] : p->grammar_starts[i - nw];
                if (!w || !*w) continue;
                if (!(t->trig[t->n_trig++] = strdup(w))) goto nomem;
                if (i < nw) t->n_words++;
            }
        } else if (!(t->gm = ob_grammar_matcher_new(t->gram, v, !p->ignore_eos))) {
            goto nomem;
        }
        if (t->gm && ob_grammar_matcher_error(t->gm)) {
            *st = ob_fail(err, err_len, OB_ERR_ARG, "%s", ob_grammar_matcher_error(t->gm));
            task_free(t);
            return NULL;
        }
    }
    t->refs = 2; /* the caller's and the scheduler's */
    pthread_mutex_lock(&s->mu);
    if (s->failed || s->stop) {
        pthread_mutex_unlock(&s->mu);
        task_free(t);
        *st = ob_fail(err, err_len, OB_ERR_DEVICE, "the server is shutting down");
        return NULL;
    }
    if (s->q_tail) s->q_tail->next = t;
    else s->q_head = t;
    s->q_tail = t;
    s->n_queued++;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    *st = OB_OK;
    return t;
nomem:
    task_free(t);
    *st = ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
    return NULL;
}

void ob_sched_poll(ob_sched *s, ob_task *t, ob_task_cursor *cur, int ms, ob_task_out *o) {
    memset(o, 0, sizeof *o);
    pthread_mutex_lock(&s->mu);
    if (!(t->released > cur->text || t->n_toks > cur->toks || t->done) && ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        while (!(t->released > cur->text || t->n_toks > cur->toks || t->done)) {
            if (pthread_cond_timedwait(&t->cond, &s->mu, &ts) == ETIMEDOUT) break;
        }
    }
    if (t->released > cur->text) {
        o->text_len = t->released - cur->text;
        o->text = malloc(o->text_len + 1);
        if (o->text) {
            memcpy(o->text, t->text + cur->text, o->text_len);
            o->text[o->text_len] = 0;
            cur->text = t->released;
        } else {
            o->text_len = 0;
        }
    }
    if (t->n_toks > cur->toks) {
        o->n_toks = t->n_toks - cur->toks;
        o->toks = malloc((size_t)o->n_toks * sizeof *o->toks);
        if (o->toks) {
            memcpy(o->toks, t->toks + cur->toks, (size_t)o->n_toks * sizeof *o->toks);
            cur->toks = t->n_toks;
        } else {
            o->n_toks = 0;
        }
    }
    /* done only once the reader has everything */
    o->done = t->done && cur->text >= t->released && cur->toks >= t->n_toks;
    o->finish = t->finish;
    o->err_status = t->err_status;
    memcpy(o->err, t->err, sizeof o->err);
    o->stop_word = t->stop_idx >= 0 ? t->stop[t->stop_idx] : NULL;
    o->stopped_eos = t->stopped_eos;
    o->truncated = t->truncated;
    o->n_prompt = t->n_prompt;
    o->n_cached = t->n_cached;
    o->n_gen = t->n_gen;
    o->slot = t->slot;
    o->speculative = s->spec != NULL;
    o->draft_n = t->n_drafted;
    o->draft_n_accepted = t->n_accepted;
    double tp = t->t_prompt_done > 0 ? t->t_prompt_done : 0;
    o->t_prompt_ms = (tp > 0 && t->t_start > 0) ? (tp - t->t_start) * 1e3 : 0;
    double te = t->t_end > 0 ? t->t_end : ob_time_s();
    o->t_gen_ms = tp > 0 ? (te - tp) * 1e3 : 0;
    pthread_mutex_unlock(&s->mu);
}

void ob_task_out_clear(ob_task_out *o) {
    free(o->text);
    free(o->toks);
    o->text = NULL;
    o->toks = NULL;
}

void ob_sched_release(ob_sched *s, ob_task *t) {
    if (!t) return;
    pthread_mutex_lock(&s->mu);
    if (!t->done) {
        t->cancelled = true;
        pthread_cond_signal(&s->wake);
    }
    task_unref(t);
    pthread_mutex_unlock(&s->mu);
}

void ob_sched_get_stats(ob_sched *s, ob_sched_stats *st) {
    pthread_mutex_lock(&s->mu);
    *st = s->st;
    st->processing = 0;
    st->kv_used = 0;
    for (int i = 0; i < s->n_slots; i++) {
        if (s->slots[i].task) st->processing++;
        st->kv_used += s->slots[i].n_cache;
    }
    st->deferred = s->n_queued;
    st->n_slots = s->n_slots;
    st->n_ctx_slot = s->n_ctx_slot;
    st->kv_total = (long)s->n_slots * s->n_ctx_slot;
    pthread_mutex_unlock(&s->mu);
}

json_t *ob_sched_slots_json(ob_sched *s) {
    json_t *a = json_array();
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_slots; i++) {
        ob_slot *sl = &s->slots[i];
        ob_task *t = sl->task;
        json_t *o = json_pack("{s:i,s:i,s:b,s:i,s:I}", "id", i, "n_ctx", s->n_ctx_slot,
                              "is_processing", t != NULL, "n_past", sl->n_cache,
                              "n_tasks", (json_int_t)sl->n_tasks);
        if (o && t)
            json_object_set_new(o, "next_token", json_pack("{s:i,s:i}", "n_decoded", t->n_gen,
                                                           "n_prompt", t->n_prompt));
        if (o) {
            json_object_set_new(o, "speculative", json_boolean(s->spec != NULL));
            json_object_set_new(o, "draft_n", json_integer((json_int_t)sl->n_drafted));
            json_object_set_new(o, "draft_n_accepted", json_integer((json_int_t)sl->n_accepted));
        }
        if (o) json_array_append_new(a, o);
    }
    pthread_mutex_unlock(&s->mu);
    return a;
}

/* ---- /slots/{id}?action=save|restore|erase ---------------------------------------------- */

int ob_sched_slot_action(ob_sched *s, int id, ob_slot_action a, const char *path, int wait_ms, ob_slot_result *res,
                         char *err, size_t err_len) {
    memset(res, 0, sizeof(*res));
    if (id < 0 || id >= s->n_slots) {
        snprintf(err, err_len, "Invalid slot ID: %d is not a slot (0 .. %d)", id, s->n_slots - 1);
        return 400;
    }
    if (s->spec && a == OB_SLOT_RESTORE) {
        /* the draft's sequence would no longer follow the slot's */
        snprintf(err, err_len, "slot restore is not supported with a draft model");
        return 501;
    }
    const double t0 = ob_time_s();
    pthread_mutex_lock(&s->mu);
    /* between steps, on an idle slot: the context is this thread's while mu is held and
     * no decode is in flight */
    for (;;) {
        if (s->stop || s->failed) {
            pthread_mutex_unlock(&s->mu);
            snprintf(err, err_len, "the server is shutting down");
            return 503;
        }
        if (!s->decoding && !s->slots[id].task) break;
        const double left_ms = wait_ms - 1e3 * (ob_time_s() - t0);
        if (left_ms <= 0) {
            pthread_mutex_unlock(&s->mu);
            snprintf(err, err_len, "slot %d is busy", id);
            return 503;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        const long ms = (long)OB_MIN(left_ms, 100.0);
        ts.tv_nsec += (ms % 1000) * 1000000L;
        ts.tv_sec += ms / 1000 + ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&s->step_done, &s->mu, &ts);
    }
    ob_slot *sl = &s->slots[id];
    const double t1 = ob_time_s();
    int code = 200;
    if (a == OB_SLOT_ERASE) {
        res->n_tokens = sl->n_cache;
        ob_seq_truncate(s->ctx, id, 0);
        sl->n_cache = 0;
    } else if (a == OB_SLOT_SAVE) {
        ob_status st = ob_seq_save_file(s->ctx, id, sl->cache, sl->n_cache, path, &res->n_bytes, err, err_len);
        res->n_tokens = sl->n_cache;
        code = st == OB_OK ? 200 : st == OB_ERR_IO ? 500 : 400;
    } else {
        int32_t *tok = NULL;
        int n = 0;
        ob_status st = ob_seq_load_file(s->ctx, id, path, &tok, &n, &res->n_bytes, err, err_len);
        /* a file refused before its cells were read leaves the slot as it was */
        sl->n_cache = OB_MIN(sl->n_cache, ob_seq_len(s->ctx, id));
        if (st == OB_OK) {
            memcpy(sl->cache, tok, sizeof(int32_t) * (size_t)n);
            sl->n_cache = n;
            res->n_tokens = n;
        }
        free(tok);
        code = st == OB_OK ? 200 : st == OB_ERR_NOMEM ? 500 : 400;
    }
    pthread_mutex_unlock(&s->mu);
    res->ms = 1e3 * (ob_time_s() - t1);
    return code;
}
