/* Sampler: greedy is the argmax; a seed fixes the output; temperature sampling follows
 * the softmax; top-k, top-p, min-p, penalties and logit bias restrict and shift as
 * llama.cpp documents them. */
#include "testutil.h"
#include "onebit.h"
#include "core/common.h"
#include <math.h>
#include <string.h>

#define V 50

static void softmax(const float *l, double *p, int n, float temp) {
    double mx = l[0], s = 0;
    for (int i = 1; i < n; i++) if (l[i] > mx) mx = l[i];
    for (int i = 0; i < n; i++) { p[i] = exp((l[i] - mx) / temp); s += p[i]; }
    for (int i = 0; i < n; i++) p[i] /= s;
}

/* ob_argmax_f32 against the plain first-max scan it replaces: random rows with ties, NaNs
 * (one at index 0 in some rows) and infinities, lengths around the 8-wide blocks. */
static void test_argmax(void) {
    ob_rng r;
    ob_rng_seed(&r, 77);
    float w[103];
    for (int rep = 0; rep < 400; rep++) {
        const int n = 1 + (int)(ob_rng_u64(&r) % 103);
        for (int i = 0; i < n; i++) {
            const uint64_t k = ob_rng_u64(&r) % 16;
            w[i] = k == 0 ? NAN : k == 1 ? -INFINITY : k == 2 ? INFINITY * (rep % 3 == 0) : (float)(ob_rng_u64(&r) % 7);
        }
        int best = 0;
        for (int i = 1; i < n; i++) if (w[i] > w[best]) best = i;
        CHECKF(ob_argmax_f32(w, n) == best, "argmax rep %d n %d: %d vs scan %d", rep, n, ob_argmax_f32(w, n), best);
    }
}

int main(void) {
    test_argmax();
    ob_rng r;
    ob_rng_seed(&r, 11);
    float logits[V];
    ob_rng_fill_normal(&r, logits, V, 2.0f);
    int amax = 0;
    for (int i = 1; i < V; i++) if (logits[i] > logits[amax]) amax = i;

    ob_sampler_params p = ob_sampler_default_params();
    p.temperature = 0;
    ob_sampler *s = ob_sampler_new(&p, V);
    CHECK(ob_sampler_sample(s, logits) == amax);
    ob_sampler_free(s);

    /* Same seed, same sequence; another seed, (almost surely) another one. */
    p = ob_sampler_default_params();
    p.temperature = 1.5f; p.top_k = 0; p.top_p = 1; p.min_p = 0;
    int a[64], b[64], c[64];
    for (int run = 0; run < 3; run++) {
        p.seed = run < 2 ? 1234 : 999;
        s = ob_sampler_new(&p, V);
        for (int k = 0; k < 64; k++) (run == 0 ? a : run == 1 ? b : c)[k] = ob_sampler_sample(s, logits);
        ob_sampler_free(s);
    }
    CHECK(memcmp(a, b, sizeof(a)) == 0);
    CHECK(memcmp(a, c, sizeof(a)) != 0);

    /* Frequencies follow softmax(logits / T): every token's count within 5 sigma. */
    p.seed = 5; p.penalty_last_n = 0;
    s = ob_sampler_new(&p, V);
    int cnt[V] = {0};
    const int N = 40000;
    for (int k = 0; k < N; k++) cnt[ob_sampler_sample(s, logits)]++;
    ob_sampler_free(s);
    double pr[V];
    softmax(logits, pr, V, p.temperature);
    for (int i = 0; i < V; i++) {
        double sd = sqrt(N * pr[i] * (1 - pr[i])) + 1;
        CHECKF(fabs(cnt[i] - N * pr[i]) <= 5 * sd, "token %d: %d draws, expected %.1f", i, cnt[i], N * pr[i]);
    }

    /* top-k: only the k best ever appear. */
    p.top_k = 3;
    s = ob_sampler_new(&p, V);
    int order[V];
    for (int i = 0; i < V; i++) order[i] = i;
    for (int i = 0; i < V; i++) for (int j = i + 1; j < V; j++)
        if (logits[order[j]] > logits[order[i]]) { int t = order[i]; order[i] = order[j]; order[j] = t; }
    bool seen3 = false;
    for (int k = 0; k < 2000; k++) {
        int t = ob_sampler_sample(s, logits);
        CHECK(t == order[0] || t == order[1] || t == order[2]);
        if (t == order[2]) seen3 = true;
    }
    CHECK(seen3);
    ob_sampler_free(s);

    /* top-p: the nucleus is the smallest prefix reaching p. */
    p.top_k = 0; p.top_p = 0.5f;
    softmax(logits, pr, V, p.temperature);
    int nuc = 0;
    double cum = 0;
    while (cum < 0.5) cum += pr[order[nuc++]];
    s = ob_sampler_new(&p, V);
    for (int k = 0; k < 2000; k++) {
        int t = ob_sampler_sample(s, logits), rank = 0;
        while (order[rank] != t) rank++;
        CHECKF(rank < nuc, "top-p: rank %d outside nucleus of %d", rank, nuc);
    }
    ob_sampler_free(s);

    /* min-p: tokens below min_p * p_max never appear. */
    p.top_p = 1; p.min_p = 0.3f;
    s = ob_sampler_new(&p, V);
    for (int k = 0; k < 2000; k++) {
        int t = ob_sampler_sample(s, logits);
        CHECK(pr[t] >= 0.3 * pr[order[0]] * 0.999);
    }
    ob_sampler_free(s);

    /* logit bias: -inf bans the argmax; a big bonus forces a token. */
    p = ob_sampler_default_params();
    p.temperature = 0;
    int32_t bt[2] = {amax, 7};
    float bv[2] = {-INFINITY, 0};
    p.n_logit_bias = 1; p.logit_bias_tok = bt; p.logit_bias_val = bv;
    s = ob_sampler_new(&p, V);
    CHECK(ob_sampler_sample(s, logits) != amax);
    ob_sampler_free(s);
    bv[1] = 1000;
    p.n_logit_bias = 2;
    s = ob_sampler_new(&p, V);
    CHECK(ob_sampler_sample(s, logits) == 7);
    ob_sampler_free(s);

    /* Penalties: a heavily repeated argmax loses to the runner-up. */
    p = ob_sampler_default_params();
    p.temperature = 0; p.penalty_last_n = 16; p.presence_penalty = 100;
    s = ob_sampler_new(&p, V);
    CHECK(ob_sampler_sample(s, logits) == amax); /* records amax */
    CHECK(ob_sampler_sample(s, logits) == order[1]);
    ob_sampler_free(s);
    p.presence_penalty = 0; p.frequency_penalty = 0; p.repeat_penalty = 1e6f;
    s = ob_sampler_new(&p, V);
    ob_sampler_accept(s, order[0]);
    int t1 = ob_sampler_sample(s, logits);
    CHECK(t1 != order[0] || logits[order[0]] <= 0);
    ob_sampler_free(s);
    return ob_test_done("test_sampler");
}
