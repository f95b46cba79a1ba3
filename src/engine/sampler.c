/* Sampling: penalties and logit bias, then greedy or temperature with top-k, top-p and
 * min-p. Deterministic for a seed. */
#include "core/common.h"
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
    return p;
}

static uint64_t rng_next(uint64_t *s) {
    uint64_t s0 = s[0], s1 = s[1], r = s0 + s1;
    s1 ^= s0;
    s[0] = ((s0 << 55) | (s0 >> 9)) ^ s1 ^ (s1 << 14);
    s[1] = (s1 << 36) | (s1 >> 28);
    return r;
}

static void rng_seed(uint64_t *s, uint64_t seed) {
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
    rng_seed(s->rng, p->seed);
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
    free(s);
}

void ob_sampler_reset(ob_sampler *s) {
    memset(s->counts, 0, sizeof(int32_t) * (size_t)s->n_vocab);
    s->hist_n = s->hist_head = 0;
    rng_seed(s->rng, s->p.seed);
}

void ob_sampler_accept(ob_sampler *s, int32_t tok) {
    if (s->hist_cap <= 0 || tok < 0 || tok >= s->n_vocab) return;
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
float ob_sampler_next_uniform(ob_sampler *s) { return (float)(rng_next(s->rng) >> 40) * 0x1p-24f; }

static bool has_penalties(const ob_sampler_params *p) {
    return p->repeat_penalty != 1.0f || p->presence_penalty != 0 || p->frequency_penalty != 0;
}

bool ob_sampler_device_ok(const ob_sampler *s) {
    const ob_sampler_params *p = &s->p;
    if (p->n_logit_bias > 0 || (has_penalties(p) && s->hist_cap > 0)) return false;
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

int32_t ob_sampler_sample(ob_sampler *s, const float *logits) {
    const ob_sampler_params *p = &s->p;
    int n = s->n_vocab;
    bool pen = has_penalties(p);
    if (p->temperature <= 0 && p->n_logit_bias == 0 && !(pen && s->hist_n > 0)) {
        const int best = ob_argmax_f32(logits, n); /* greedy, nothing to adjust: no copy */
        ob_sampler_accept(s, best);
        return best;
    }
    float *w = s->work;
    memcpy(w, logits, sizeof(float) * (size_t)n);
    for (int i = 0; i < p->n_logit_bias; i++) {
        int32_t t = p->logit_bias_tok[i];
        if (t >= 0 && t < n) w[t] += p->logit_bias_val[i];
    }
    if (pen && s->hist_n > 0) {
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
    if (p->temperature <= 0) {
        const int best = ob_argmax_f32(w, n);
        ob_sampler_accept(s, best);
        return best;
    }
    const int32_t pick = ob_sample_pick(w, n, p->temperature, p->top_k, p->top_p, p->min_p,
                                        (double)ob_sampler_next_uniform(s), s->idx);
    ob_sampler_accept(s, pick);
    return pick;
}
