/* Sampling: logit bias and penalties, then greedy or temperature with top-k, top-p and
 * min-p; DRY, typical-p, XTC and Mirostat through sampler_ext.c when asked for.
 * Deterministic for a seed. */
#include "core/common.h"
#include "engine/sampler.h"
#include "engine/sampler_ext.h"
#include <math.h>
#include <stdlib.h>

struct ob_sampler {
    ob_sampler_params p;
    int n_vocab;
    int32_t *bias_tok;
    float *bias_val;
    int32_t *hist;           /* ring of recent tokens for penalties */
    int hist_cap, hist_n, hist_head;
    int32_t *counts;         /* [n_vocab] occurrences within the window */
    float *work;             /* [n_vocab] adjusted logits */
    int32_t *idx;            /* [n_vocab] candidate ids */
    uint64_t rng[2];
    ob_sampler_ext *ext;     /* DRY, typical-p, XTC, Mirostat: NULL when none is on */
    /* sampling under a filter, allocated on first use */
    int32_t *f_cand, *f_ids; /* [n_vocab] ranked candidates; allowed ids */
    float *f_w;              /* [n_vocab] the allowed ids' adjusted logits */
    uint8_t *f_mask;         /* [n_vocab] */
};

ob_sampler_params ob_sampler_default_params(void) {
    ob_sampler_params p = {0};
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.penalty_last_n = 64;
    p.seed = 0x5eed;
    /* llama-server's defaults for the samplers that start off */
    p.typical_p = 1.0f;
    p.xtc_threshold = 0.1f;
    p.mirostat_tau = 5.0f;
    p.mirostat_eta = 0.1f;
    p.dry_base = 1.75f;
    p.dry_allowed_length = 2;
    p.dry_penalty_last_n = -1;
    return p;
}

uint64_t ob_sampler_rng_next(uint64_t *s) {
    uint64_t s0 = s[0], s1 = s[1], r = s0 + s1;
    s1 ^= s0;
    s[0] = ((s0 << 55) | (s0 >> 9)) ^ s1 ^ (s1 << 14);
    s[1] = (s1 << 36) | (s1 >> 28);
    return r;
}

void ob_sampler_rng_seed(uint64_t *s, uint64_t seed) {
    /* splitmix64 to spread the seed over both words */
    for (int i = 0; i < 2; i++) {
        uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        s[i] = z ^ (z >> 31);
    }
}

ob_sampler *ob_sampler_new(const ob_sampler_params *p, int n_vocab) {
    if (n_vocab <= 0) return NULL;
    ob_sampler *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->hist_cap = p->penalty_last_n < 0 ? 1 << 20 : p->penalty_last_n;
    s->counts = calloc((size_t)n_vocab, sizeof(int32_t));
    s->work = malloc(sizeof(float) * (size_t)n_vocab);
    s->idx = malloc(sizeof(int32_t) * (size_t)n_vocab);
    s->hist = malloc(sizeof(int32_t) * (size_t)(s->hist_cap > 0 ? s->hist_cap : 1));
    int nb = p->n_logit_bias > 0 ? p->n_logit_bias : 0;
    s->bias_tok = malloc(sizeof(int32_t) * (size_t)(nb ? nb : 1));
    s->bias_val = malloc(sizeof(float) * (size_t)(nb ? nb : 1));
    if (!s->counts || !s->work || !s->idx || !s->hist || !s->bias_tok || !s->bias_val) {
        ob_sampler_free(s);
        return NULL;
    }
    if (nb) {
        memcpy(s->bias_tok, p->logit_bias_tok, sizeof(int32_t) * (size_t)nb);
        memcpy(s->bias_val, p->logit_bias_val, sizeof(float) * (size_t)nb);
    }
    s->p.n_logit_bias = nb;
    s->p.logit_bias_tok = s->bias_tok;
    s->p.logit_bias_val = s->bias_val;
    if (ob_sampler_ext_wanted(p) && !(s->ext = ob_sampler_ext_new(p, n_vocab))) {
        ob_sampler_free(s);
        return NULL;
    }
    s->p.n_dry_breakers = 0; /* the ext sampler holds its own copy */
    s->p.dry_breaker_len = s->p.dry_breaker_tok = NULL;
    ob_sampler_rng_seed(s->rng, p->seed);
    return s;
}

void ob_sampler_free(ob_sampler *s) {
    if (!s) return;
    free(s->counts);
    free(s->work);
    free(s->idx);
    free(s->hist);
    free(s->bias_tok);
    free(s->bias_val);
    free(s->f_cand);
    free(s->f_ids);
    free(s->f_w);
    free(s->f_mask);
    ob_sampler_ext_free(s->ext);
    free(s);
}

void ob_sampler_reset(ob_sampler *s) {
    memset(s->counts, 0, sizeof(int32_t) * (size_t)s->n_vocab);
    s->hist_n = s->hist_head = 0;
    ob_sampler_rng_seed(s->rng, s->p.seed);
    if (s->ext) ob_sampler_ext_reset(s->ext);
}

float ob_sampler_mirostat_mu(const ob_sampler *s) { return s->ext ? ob_sampler_ext_mu(s->ext) : NAN; }

void ob_sampler_accept(ob_sampler *s, int32_t tok) {
    if (tok < 0 || tok >= s->n_vocab) return;
    if (s->ext) ob_sampler_ext_accept(s->ext, tok);
    if (s->hist_cap <= 0) return;
    if (s->hist_n == s->hist_cap) {
        int32_t old = s->hist[s->hist_head];
        s->counts[old]--;
        s->hist_n--;
    }
    s->hist[s->hist_head] = tok;
    s->hist_head = (s->hist_head + 1) % s->hist_cap;
    s->hist_n++;
    s->counts[tok]++;
}

/* 24 bits, so the float a device sampler receives is the very same number. */
float ob_sampler_next_uniform(ob_sampler *s) { return (float)(ob_sampler_rng_next(s->rng) >> 40) * 0x1p-24f; }

/* Mirostat runs after logit bias alone, as llama-server's chain has it. */
static bool has_penalties(const ob_sampler_params *p) {
    return p->mirostat == 0 && (p->repeat_penalty != 1.0f || p->presence_penalty != 0 || p->frequency_penalty != 0);
}

bool ob_sampler_device_ok(const ob_sampler *s) {
    const ob_sampler_params *p = &s->p;
    if (p->n_logit_bias > 0 || (has_penalties(p) && s->hist_cap > 0)) return false;
    if (s->ext && !ob_sampler_ext_device_ok(s->ext)) return false;
    return p->temperature <= 0 || (p->top_k >= 1 && p->top_k <= 1024);
}

void ob_sampler_device_params(ob_sampler *s, float *params) {
    const ob_sampler_params *p = &s->p;
    memset(params, 0, sizeof(float) * 8);
    params[0] = p->temperature;
    params[1] = (float)p->top_k;
    params[2] = p->top_p;
    params[3] = p->min_p;
    if (p->temperature > 0) params[4] = ob_sampler_next_uniform(s);
    params[5] = (float)s->n_vocab;
}

/* Logits after logit bias, penalties and DRY: s->work, or logits itself when none applies. */
static const float *adjust(ob_sampler *s, const float *logits) {
    const ob_sampler_params *p = &s->p;
    int n = s->n_vocab;
    bool pen = has_penalties(p) && s->hist_n > 0;
    const int32_t *dry_tok = NULL;
    const float *dry_val = NULL;
    int n_dry = s->ext ? ob_sampler_ext_dry(s->ext, &dry_tok, &dry_val) : 0;
    if (p->n_logit_bias == 0 && !pen && n_dry == 0) return logits;
    float *w = s->work;
    memcpy(w, logits, sizeof(float) * (size_t)n);
    for (int i = 0; i < p->n_logit_bias; i++) {
        int32_t t = p->logit_bias_tok[i];
        if (t >= 0 && t < n) w[t] += p->logit_bias_val[i];
    }
    if (pen) {
        /* Visit each distinct token of the window once. */
        for (int k = 0; k < s->hist_n; k++) {
            int32_t t = s->hist[(s->hist_head - 1 - k + s->hist_cap) % s->hist_cap];
            int c = s->counts[t];
            if (c <= 0 || w[t] != w[t]) continue;
            if (p->repeat_penalty != 1.0f) w[t] = w[t] > 0 ? w[t] / p->repeat_penalty : w[t] * p->repeat_penalty;
            w[t] -= (float)c * p->frequency_penalty + p->presence_penalty;
            s->counts[t] = -c; /* mark visited */
        }
        for (int k = 0; k < s->hist_n; k++) {
            int32_t t = s->hist[(s->hist_head - 1 - k + s->hist_cap) % s->hist_cap];
            if (s->counts[t] < 0) s->counts[t] = -s->counts[t];
        }
    }
    for (int i = 0; i < n_dry; i++) w[dry_tok[i]] -= dry_val[i];
    return w;
}

/* The draw at a temperature over w[0..n) (the vocabulary or the allowed tokens): an index. */
static int32_t draw(ob_sampler *s, const float *w, int n, int32_t *idx) {
    const ob_sampler_params *p = &s->p;
    const double u = (double)ob_sampler_next_uniform(s);
    if (s->ext && ob_sampler_ext_draws(s->ext)) return ob_sampler_ext_pick(s->ext, w, n, u, idx);
    return ob_sample_pick(w, n, p->temperature, p->top_k, p->top_p, p->min_p, u, idx);
}

int32_t ob_sampler_sample(ob_sampler *s, const float *logits) {
    const ob_sampler_params *p = &s->p;
    const float *w = adjust(s, logits);
    if (p->temperature <= 0) {
        const int best = ob_argmax_f32(w, s->n_vocab);
        ob_sampler_accept(s, best);
        return best;
    }
    const int32_t pick = draw(s, w, s->n_vocab, s->idx);
    ob_sampler_accept(s, pick);
    return pick;
}

/* Candidates asked about one by one before the whole vocabulary is masked instead. */
#define FILTER_LAZY_MAX 1024
#define BLOCK 64

static int cmp_rank(const void *a, const void *b, void *ctx) {
    const float *w = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (w[x] != w[y]) return w[x] < w[y] ? 1 : -1;
    return (x > y) - (x < y);
}

/* Every id whose w reaches the k-th largest of the block maxima (k blocks hold a value at
 * least that large, so the k best are among them), ranked by (value desc, id asc), into
 * s->f_cand; returns how many. Two vectorizable passes and a sort of a few hundred, where
 * a heap over the whole vocabulary would compare every entry with its root. */
static int rank_candidates(ob_sampler *s, const float *w, int k) {
    int n = s->n_vocab, nb = (n + BLOCK - 1) / BLOCK;
    float *bm = s->f_w, floor = -INFINITY; /* scratch until the candidates are chosen */
    for (int b = 0; b < nb; b++) {
        const float *x = w + (size_t)b * BLOCK;
        int len = b == nb - 1 ? n - b * BLOCK : BLOCK;
        float m8[8];
        for (int j = 0; j < 8; j++) m8[j] = -INFINITY;
        int i = 0;
        for (; i + 8 <= len; i += 8) /* eight running maxima: vectorizable */
            for (int j = 0; j < 8; j++) m8[j] = x[i + j] > m8[j] ? x[i + j] : m8[j];
        for (; i < len; i++) m8[0] = x[i] > m8[0] ? x[i] : m8[0];
        float m = m8[0];
        for (int j = 1; j < 8; j++) m = m8[j] > m ? m8[j] : m;
        bm[b] = m;
    }
    if (k < nb) {
        ob_top_k_sorted(bm, nb, k, s->idx);
        floor = bm[s->idx[k - 1]];
    }
    int c = 0;
    for (int b = 0; b < nb; b++) { /* only blocks whose maximum reaches the floor hold any */
        if (!(bm[b] >= floor)) continue;
        int end = b == nb - 1 ? n : (b + 1) * BLOCK;
        for (int i = b * BLOCK; i < end; i++) if (w[i] >= floor) s->f_cand[c++] = i;
    }
    qsort_r(s->f_cand, (size_t)c, sizeof(int32_t), cmp_rank, (void *)w);
    return c;
}

/* The allowed tokens among the best by adjusted logit, best first, into s->f_ids: as many
 * as the chain can reach (greedy 1, top-k k, min-p those above its floor). Returns how
 * many, or -1 when the chain could reach further than FILTER_LAZY_MAX candidates. */
static int lazy_candidates(ob_sampler *s, const float *w, const ob_token_filter *f) {
    const ob_sampler_params *p = &s->p;
    int n = s->n_vocab;
    bool greedy = p->temperature <= 0;
    int need = greedy ? 1 : p->top_k > 0 && p->top_k < n ? p->top_k : 0;
    if (!greedy && s->ext && !ob_sampler_ext_lazy_ok(s->ext, need > 0)) return -1;
    if (need == 0 && !(p->min_p > 0)) return -1;
    int m = 0, checked = 0, k = need > 32 ? need : 32;
    for (;;) {
        /* a longer list starts with the shorter one: ask only about the new candidates */
        int c = rank_candidates(s, w, k);
        for (int i = checked; i < c && (need == 0 || m < need); i++)
            if (f->allows(f->ud, s->f_cand[i])) s->f_ids[m++] = s->f_cand[i];
        checked = c;
        if (need > 0 && m == need) return m;
        if (need == 0 && m > 0) {
            /* min-p keeps (w - max) >= log(min_p) * T: clearly past that, no later one counts */
            double lim = log(p->min_p) * p->temperature;
            if ((double)(w[s->f_cand[c - 1]] - w[s->f_ids[0]]) < lim - 1e-4) return m;
        }
        if (c == n) return m;
        /* at the density of allowed tokens seen so far, how far the chain would look */
        long want = need > 0 ? 2L * need * c / (m ? m : 1) : 8L * c;
        if (want < 8L * k) want = 8L * k;
        if (want > FILTER_LAZY_MAX) return -1;
        k = (int)want;
    }
}

static int cmp_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int32_t ob_sampler_sample_filtered(ob_sampler *s, const float *logits, const ob_token_filter *f) {
    const ob_sampler_params *p = &s->p;
    int n = s->n_vocab;
    if (!s->f_cand) {
        s->f_cand = malloc(sizeof(int32_t) * (size_t)n);
        s->f_ids = malloc(sizeof(int32_t) * (size_t)n);
        s->f_w = malloc(sizeof(float) * (size_t)n);
        s->f_mask = malloc((size_t)n);
        if (!s->f_cand || !s->f_ids || !s->f_w || !s->f_mask) {
            free(s->f_cand); free(s->f_ids); free(s->f_w); free(s->f_mask);
            s->f_cand = s->f_ids = NULL;
            s->f_w = NULL;
            s->f_mask = NULL;
            return -1;
        }
    }
    const float *w = adjust(s, logits);
    int m = lazy_candidates(s, w, f);
    if (m < 0) {
        f->mask(f->ud, s->f_mask);
        m = 0;
        int i = 0;
        for (; i + 8 <= n; i += 8) { /* a word at a time: most of a grammar's mask is zeros */
            uint64_t w8;
            memcpy(&w8, s->f_mask + i, 8);
            if (!w8) continue;
            for (int j = i; j < i + 8; j++) if (s->f_mask[j]) s->f_ids[m++] = j;
        }
        for (; i < n; i++) if (s->f_mask[i]) s->f_ids[m++] = i;
    } else if (m > 0 && p->temperature <= 0) {
        ob_sampler_accept(s, s->f_ids[0]); /* the best allowed: masked argmax */
        return s->f_ids[0];
    } else {
        /* in id order, so ties rank as they would in the masked vocabulary */
        qsort(s->f_ids, (size_t)m, sizeof(int32_t), cmp_id);
    }
    if (m == 0) return -1;
    /* The disallowed tokens would be -inf: weight 0 in every sum, never picked. Sampling
     * the allowed ones alone, in id order, draws the same token. */
    for (int i = 0; i < m; i++) s->f_w[i] = w[s->f_ids[i]];
    int32_t j = p->temperature <= 0 ? ob_argmax_f32(s->f_w, m) : draw(s, s->f_w, m, s->f_cand);
    int32_t tok = s->f_ids[j];
    ob_sampler_accept(s, tok);
    return tok;
}
