/* DRY, typical-p, XTC and Mirostat (engine/sampler_ext.c) against plain reference code
 * written here from the samplers' definitions: small random distributions from a seeded
 * source, and the draw checked exactly. Two samplers share a seed; the first only gives the
 * uniform number (ob_sampler_next_uniform) the second's draw will use, and the reference
 * picks the token that number selects from the distribution it expects. Then the
 * statistics: empirical frequencies of many seeded draws against the expected
 * distribution (chi-square), the tokens truncation keeps, Mirostat's mu step by step, DRY
 * on constructed repetitions, sampling under a filter, and the breakers a real vocabulary
 * gives. */
#include "testutil.h"
#include "onebit.h"
#include "core/common.h"
#include "engine/sampler.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define V 48
#define VBIG 300

/* ---- the reference chain ---------------------------------------------------------------- */

static bool before(const float *w, int a, int b) { return w[a] != w[b] ? w[a] > w[b] : a < b; }

/* ids of w[0..n) best first (value desc, id asc): insertion sort */
static void rank_all(const float *w, int n, int *ord) {
    for (int i = 0; i < n; i++) {
        int j = i;
        while (j > 0 && before(w, i, ord[j - 1])) {
            ord[j] = ord[j - 1];
            j--;
        }
        ord[j] = i;
    }
}

typedef struct chain_cfg {
    float temp, top_p, min_p, typical_p, xtc_t;
    int top_k;
    bool xtc_cut; /* XTC's coin fell (probability 1 in the exact tests) */
} chain_cfg;

/* The candidates the chain draws from, best first: top-k, typical-p, min-p (at T), top-p
 * (at T), XTC. Returns how many. */
static int ref_candidates(const float *w, int n, const chain_cfg *cf, int *c) {
    int ord[VBIG];
    rank_all(w, n, ord);
    int m = cf->top_k > 0 && cf->top_k < n ? cf->top_k : n;
    int k = 0;
    for (int i = 0; i < m; i++) if (w[ord[i]] > -INFINITY) c[k++] = ord[i];
    m = k;
    if (m == 0) return 0;
    if (cf->typical_p < 1 && m >= 2) {
        double p[VBIG], d[VBIG], sum = 0, h = 0;
        for (int i = 0; i < m; i++) sum += p[i] = exp((double)w[c[i]] - (double)w[c[0]]);
        for (int i = 0; i < m; i++) {
            p[i] /= sum;
            h -= p[i] * log(p[i]);
        }
        for (int i = 0; i < m; i++) d[i] = fabs(-log(p[i]) - h);
        bool chosen[VBIG] = {0};
        double cum = 0;
        for (int cnt = 0; cnt < m;) {
            int j = -1; /* the closest to the entropy not yet chosen; ties: the better ranked */
            for (int i = 0; i < m; i++) if (!chosen[i] && (j < 0 || d[i] < d[j])) j = i;
            chosen[j] = true;
            cum += p[j];
            cnt++;
            if (cum > cf->typical_p) break;
        }
        k = 0;
        for (int i = 0; i < m; i++) if (chosen[i]) c[k++] = c[i];
        m = k;
    }
    if (cf->min_p > 0) {
        k = 1;
        for (int i = 1; i < m; i++)
            if ((double)(w[c[i]] - w[c[0]]) >= log(cf->min_p) * cf->temp) c[k++] = c[i];
        m = k;
    }
    if (cf->top_p < 1) {
        double q[VBIG], sum = 0, cum = 0;
        for (int i = 0; i < m; i++) sum += q[i] = exp((double)(w[c[i]] - w[c[0]]) / cf->temp);
        k = 0;
        while (k < m) {
            cum += q[k++] / sum;
            if (cum >= cf->top_p) break;
        }
        m = k;
    }
    if (cf->xtc_cut && m >= 2) {
        double sum = 0;
        for (int i = 0; i < m; i++) sum += exp((double)(w[c[i]] - w[c[0]]));
        int last = -1;
        for (int i = 0; i < m; i++) {
            if (exp((double)(w[c[i]] - w[c[0]])) / sum >= cf->xtc_t) last = i;
            else break;
        }
        if (last >= 1) {
            memmove(c, c + last, sizeof(int) * (size_t)(m - last));
            m -= last;
        }
    }
    return m;
}

/* probabilities of the candidates c[0..m) at temperature t */
static void ref_probs(const float *w, const int *c, int m, double t, double *p) {
    double sum = 0;
    for (int i = 0; i < m; i++) sum += p[i] = exp((double)(w[c[i]] - w[c[0]]) / t);
    for (int i = 0; i < m; i++) p[i] /= sum;
}

/* the candidate u selects, going down the ranked list */
static int ref_pick(const float *w, const int *c, int m, double t, double u) {
    double p[VBIG], acc = 0;
    ref_probs(w, c, m, t, p);
    for (int i = 0; i < m; i++) {
        acc += p[i];
        if (u < acc) return c[i];
    }
    return c[m - 1];
}

static ob_sampler_params plain(float temp, uint64_t seed) {
    ob_sampler_params p = ob_sampler_default_params();
    p.temperature = temp;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    p.seed = seed;
    return p;
}

static void random_logits(ob_rng *r, float *w, int n) {
    float scale = 0.5f + 3.5f * ob_rng_uniform(r);
    ob_rng_fill_normal(r, w, n, scale);
}

/* Chi-square of counts against probabilities p over k outcomes (those of expected count
 * under 5 pooled); true when within a bound a correct sampler fails with p < 1e-6. */
static bool chi_square_ok(const int *cnt, const double *p, int k, int total, double *chi, int *df) {
    double x = 0, pool_e = 0, pool_o = 0;
    int cells = 0;
    for (int i = 0; i < k; i++) {
        double e = p[i] * total;
        if (e < 5) {
            pool_e += e;
            pool_o += cnt[i];
            continue;
        }
        x += (cnt[i] - e) * (cnt[i] - e) / e;
        cells++;
    }
    if (pool_e > 0) {
        x += (pool_o - pool_e) * (pool_o - pool_e) / (pool_e > 1 ? pool_e : 1);
        cells++;
    }
    *chi = x;
    *df = cells > 1 ? cells - 1 : 1;
    return x <= *df + 7 * sqrt(2.0 * *df) + 10;
}

/* ---- typical-p, top-k, min-p, top-p, XTC: the exact draw -------------------------------- */

static void test_chain_exact(void) {
    ob_rng r;
    ob_rng_seed(&r, 31);
    int mismatches = 0, steps = 0;
    for (int trial = 0; trial < 300; trial++) {
        chain_cfg cf = {0};
        static const float temps[] = {0.5f, 1.0f, 1.7f};
        cf.temp = temps[trial % 3];
        cf.top_k = (int)(ob_rng_u64(&r) % 4) == 0 ? 0 : 3 + (int)(ob_rng_u64(&r) % 30);
        cf.top_p = trial % 5 == 0 ? 0.9f : 1.0f;
        cf.min_p = trial % 7 == 0 ? 0.05f : 0.0f;
        cf.typical_p = trial % 3 == 2 ? 1.0f : 0.1f + 0.89f * ob_rng_uniform(&r);
        bool xtc = trial % 2 == 1;
        cf.xtc_t = 0.02f + 0.45f * ob_rng_uniform(&r);
        cf.xtc_cut = xtc;
        ob_sampler_params p = plain(cf.temp, 100 + (uint64_t)trial);
        p.top_k = cf.top_k;
        p.top_p = cf.top_p;
        p.min_p = cf.min_p;
        p.typical_p = cf.typical_p;
        p.xtc_probability = xtc ? 1.0f : 0.0f;
        p.xtc_threshold = cf.xtc_t;
        ob_sampler *a = ob_sampler_new(&p, V), *b = ob_sampler_new(&p, V);
        float w[V];
        int c[VBIG];
        for (int step = 0; step < 12; step++) {
            random_logits(&r, w, V);
            if (step % 4 == 3) w[ob_rng_u64(&r) % V] = -INFINITY; /* a banned token */
            double u = ob_sampler_next_uniform(a);
            int tok = ob_sampler_sample(b, w);
            int m = ref_candidates(w, V, &cf, c);
            int want = ref_pick(w, c, m, cf.temp, u);
            steps++;
            if (tok != want) {
                mismatches++;
                if (mismatches < 5)
                    fprintf(stderr, "trial %d step %d: sampled %d, reference %d (m %d, top_k %d, typical %.3f, "
                            "xtc %d %.3f)\n", trial, step, tok, want, m, cf.top_k, (double)cf.typical_p, xtc,
                            (double)cf.xtc_t);
            }
        }
        ob_sampler_free(a);
        ob_sampler_free(b);
    }
    CHECKF(mismatches == 0, "%d of %d draws differ from the reference chain", mismatches, steps);
}

/* ---- the tokens that survive, and their frequencies -------------------------------------- */

/* Draws N tokens from fixed logits and checks that only the reference's candidates appear
 * and at their renormalised probabilities (chi-square). */
static void check_frequencies(const char *what, ob_sampler_params p, const float *w, int n, const int *c, int m,
                              const double *prob) {
    enum { N = 30000 };
    int cnt[VBIG] = {0}, outside = 0;
    ob_sampler *s = ob_sampler_new(&p, n);
    for (int k = 0; k < N; k++) cnt[ob_sampler_sample(s, w)]++;
    ob_sampler_free(s);
    int cc[VBIG];
    bool in[VBIG] = {0};
    for (int i = 0; i < m; i++) {
        in[c[i]] = true;
        cc[i] = cnt[c[i]];
    }
    for (int i = 0; i < n; i++) if (!in[i]) outside += cnt[i];
    CHECKF(outside == 0, "%s: %d draws outside the %d tokens that survive", what, outside, m);
    for (int i = 0; i < m; i++)
        CHECKF(prob[i] * N < 20 || cc[i] > 0, "%s: token %d (p %.4f) never drawn", what, c[i], prob[i]);
    double chi;
    int df;
    CHECKF(chi_square_ok(cc, prob, m, N, &chi, &df), "%s: chi-square %.1f with %d degrees of freedom", what, chi, df);
}

static void test_frequencies(void) {
    ob_rng r;
    ob_rng_seed(&r, 7);
    float w[V];
    int c[VBIG];
    double prob[VBIG];
    for (int trial = 0; trial < 6; trial++) {
        ob_rng_fill_normal(&r, w, V, 1.5f + 0.5f * (float)trial);
        chain_cfg cf = {.temp = trial % 2 ? 1.3f : 0.8f, .top_p = 1, .typical_p = 0.5f + 0.08f * (float)trial,
                        .top_k = trial < 3 ? 0 : 25};
        ob_sampler_params p = plain(cf.temp, 900 + (uint64_t)trial);
        p.top_k = cf.top_k;
        p.typical_p = cf.typical_p;
        int m = ref_candidates(w, V, &cf, c);
        ref_probs(w, c, m, cf.temp, prob);
        check_frequencies("typical-p", p, w, V, c, m, prob);
        /* XTC always cutting */
        cf.typical_p = 1;
        cf.xtc_t = 0.03f + 0.02f * (float)trial;
        cf.xtc_cut = true;
        p.typical_p = 1;
        p.xtc_probability = 1;
        p.xtc_threshold = cf.xtc_t;
        m = ref_candidates(w, V, &cf, c);
        ref_probs(w, c, m, cf.temp, prob);
        check_frequencies("xtc", p, w, V, c, m, prob);
    }
    /* XTC with its coin: a mixture of the cut and the whole distribution */
    ob_rng_fill_normal(&r, w, V, 2.0f);
    chain_cfg cf = {.temp = 1, .top_p = 1, .typical_p = 1, .xtc_t = 0.05f, .top_k = 0};
    int cu[VBIG], all[VBIG];
    double pc[VBIG], pa[VBIG], mix[VBIG];
    int m_all = ref_candidates(w, V, &cf, all);
    cf.xtc_cut = true;
    int m_cut = ref_candidates(w, V, &cf, cu);
    CHECKF(m_cut < m_all, "the test distribution has tokens above XTC's threshold (%d of %d kept)", m_cut, m_all);
    ref_probs(w, all, m_all, 1, pa);
    ref_probs(w, cu, m_cut, 1, pc);
    const double prob_x = 0.3;
    for (int i = 0; i < m_all; i++) {
        mix[i] = (1 - prob_x) * pa[i];
        for (int j = 0; j < m_cut; j++) if (cu[j] == all[i]) mix[i] += prob_x * pc[j];
    }
    ob_sampler_params p = plain(1, 4242);
    p.xtc_probability = (float)prob_x;
    p.xtc_threshold = cf.xtc_t;
    check_frequencies("xtc p=0.3", p, w, V, all, m_all, mix);
}

/* XTC on a distribution written out: 0.4, 0.3, 0.2, 0.1. */
static void test_xtc_constructed(void) {
    float w[4] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    ob_sampler_params p = plain(1, 77);
    p.xtc_probability = 1;
    p.xtc_threshold = 0.15f; /* three above: the two likeliest go, 0.2 and 0.1 stay */
    ob_sampler *s = ob_sampler_new(&p, 4);
    int cnt[4] = {0};
    for (int k = 0; k < 6000; k++) cnt[ob_sampler_sample(s, w)]++;
    ob_sampler_free(s);
    CHECKF(cnt[0] == 0 && cnt[1] == 0 && cnt[2] > 0 && cnt[3] > 0, "xtc 0.15: counts %d %d %d %d", cnt[0], cnt[1],
           cnt[2], cnt[3]);
    CHECKF(fabs(cnt[2] / 6000.0 - 2.0 / 3) < 0.03, "xtc 0.15: 0.2 of 0.3 drawn %.3f of the time", cnt[2] / 6000.0);
    p.xtc_threshold = 0.35f; /* one above: nothing goes */
    s = ob_sampler_new(&p, 4);
    memset(cnt, 0, sizeof cnt);
    for (int k = 0; k < 6000; k++) cnt[ob_sampler_sample(s, w)]++;
    ob_sampler_free(s);
    CHECKF(fabs(cnt[0] / 6000.0 - 0.4) < 0.03, "xtc 0.35: 0.4 drawn %.3f of the time", cnt[0] / 6000.0);
    p.xtc_threshold = 0.6f; /* past 0.5: off */
    s = ob_sampler_new(&p, 4);
    CHECK(ob_sampler_device_ok(s) == false); /* temperature 1, top-k 0: the host either way */
    ob_sampler_free(s);
}

/* ---- Mirostat ------------------------------------------------------------------------------ */

typedef struct miro_ref { int version; double tau, eta, t; float mu; int n_vocab; } miro_ref;

static int ref_mirostat(miro_ref *mr, const float *w, int n, double u) {
    int ord[VBIG], c[VBIG], m = 0;
    rank_all(w, n, ord);
    for (int i = 0; i < n; i++) if (w[ord[i]] > -INFINITY) c[m++] = ord[i];
    double p[VBIG];
    ref_probs(w, c, m, mr->t, p);
    int k;
    if (mr->version == 1) {
        /* Zipf's exponent by least squares over the best 100: ln(p_i / p_i+1) against
         * ln((i + 2) / (i + 1)); then the k whose expected surprise is mu */
        double num = 0, den = 0;
        for (int i = 0; i + 1 < m && i + 1 < 100; i++) {
            double ti = log((i + 2.0) / (i + 1.0)), bi = log(p[i] / p[i + 1]);
            num += ti * bi;
            den += ti * ti;
        }
        double s = num / den, e = s - 1;
        double kd = pow(e * pow(2.0, mr->mu) / (1 - pow(mr->n_vocab, -e)), 1 / s);
        k = !(kd >= 1) ? 1 : kd >= m ? m : (int)kd;
    } else {
        k = 0;
        while (k < m && -log2(p[k]) <= mr->mu) k++;
        if (k == 0) k = 1;
    }
    double q[VBIG];
    ref_probs(w, c, k, mr->t, q);
    int tok = ref_pick(w, c, k, mr->t, u), j = 0;
    while (c[j] != tok) j++;
    mr->mu = (float)(mr->mu - mr->eta * (-log2(q[j]) - mr->tau));
    return tok;
}

static void test_mirostat(void) {
    ob_rng r;
    ob_rng_seed(&r, 5150);
    float w[VBIG];
    int mism = 0, mu_off = 0, steps = 0;
    for (int trial = 0; trial < 40; trial++) {
        miro_ref mr = {.version = 1 + trial % 2, .tau = trial % 4 < 2 ? 3.0 : 5.0, .eta = trial % 3 ? 0.1 : 0.5,
                       .t = trial % 5 ? 1.0 : 0.7, .n_vocab = VBIG};
        ob_sampler_params p = plain((float)mr.t, 31337 + (uint64_t)trial);
        p.mirostat = mr.version;
        p.mirostat_tau = (float)mr.tau;
        p.mirostat_eta = (float)mr.eta;
        p.top_k = 40; /* ignored under Mirostat, as the penalties are */
        p.repeat_penalty = 1.5f;
        mr.mu = (float)(2 * mr.tau);
        ob_sampler *a = ob_sampler_new(&p, VBIG), *b = ob_sampler_new(&p, VBIG);
        CHECKF(ob_sampler_mirostat_mu(b) == (float)(2 * mr.tau), "mu starts at 2 tau: %f", (double)ob_sampler_mirostat_mu(b));
        for (int step = 0; step < 40; step++) {
            /* roughly Zipfian: the paper's model of a language's distribution */
            for (int i = 0; i < VBIG; i++) w[i] = -1.1f * logf((float)(i + 1)) + 0.6f * ob_rng_normal(&r);
            if (step % 5 == 4) w[ob_rng_u64(&r) % VBIG] = -INFINITY;
            double u = ob_sampler_next_uniform(a);
            int tok = ob_sampler_sample(b, w);
            int want = ref_mirostat(&mr, w, VBIG, u);
            steps++;
            if (tok != want) {
                if (mism++ < 4)
                    fprintf(stderr, "mirostat %d trial %d step %d: sampled %d, reference %d\n", mr.version, trial, step,
                            tok, want);
                mr.mu = ob_sampler_mirostat_mu(b); /* follow the sampler on */
                continue;
            }
            float mu = ob_sampler_mirostat_mu(b);
            if (fabs((double)mu - (double)mr.mu) > 1e-4 * (1 + fabs((double)mr.mu))) {
                if (mu_off++ < 4)
                    fprintf(stderr, "mirostat %d trial %d step %d: mu %.6f, reference %.6f\n", mr.version, trial, step,
                            (double)mu, (double)mr.mu);
                mr.mu = mu;
            }
        }
        ob_sampler_free(a);
        ob_sampler_free(b);
    }
    CHECKF(mism == 0, "mirostat: %d of %d draws differ from the reference", mism, steps);
    CHECKF(mu_off == 0, "mirostat: mu off the reference in %d of %d steps", mu_off, steps);

    /* the controller's purpose: the mean surprise of the drawn tokens comes to tau */
    for (int version = 1; version <= 2; version++) {
        ob_sampler_params p = plain(1, 8 + (uint64_t)version);
        p.mirostat = version;
        p.mirostat_tau = 4;
        p.mirostat_eta = 0.1f;
        ob_sampler *s = ob_sampler_new(&p, VBIG);
        double sum = 0;
        int n = 0;
        for (int step = 0; step < 3000; step++) {
            for (int i = 0; i < VBIG; i++) w[i] = -1.0f * logf((float)(i + 1)) + 0.3f * ob_rng_normal(&r);
            float mu0 = ob_sampler_mirostat_mu(s);
            ob_sampler_sample(s, w);
            /* mu1 = mu0 - eta (surprise - tau): the surprise the sampler saw */
            double surprise = (mu0 - ob_sampler_mirostat_mu(s)) / p.mirostat_eta + p.mirostat_tau;
            if (step >= 500) {
                sum += surprise;
                n++;
            }
        }
        ob_sampler_free(s);
        CHECKF(fabs(sum / n - 4) < 0.25, "mirostat %d: mean surprise %.3f bits, tau 4", version, sum / n);
    }
}

/* ---- DRY ----------------------------------------------------------------------------------- */

typedef struct dry_cfg {
    float mult, base;
    int allowed, last_n;
    int n_brk;
    const int32_t *brk_len, *brk_tok;
} dry_cfg;

/* The logits after DRY, straight from the definition: a token t that follows an earlier
 * stretch of the window equal to the window's last L tokens (L as long as it goes, but not
 * reaching back past the latest breaker) loses mult * base^(L - allowed) for its longest
 * such L >= allowed, unless t is a breaker of one token. */
static void ref_dry(const dry_cfg *d, const int *hist, int nh, const float *w, int n, float *out) {
    memcpy(out, w, sizeof(float) * (size_t)n);
    int len_n = d->last_n < 0 ? nh : (nh < d->last_n ? nh : d->last_n);
    if (d->mult == 0 || d->last_n == 0 || len_n < 2 || len_n <= d->allowed) return;
    const int *a = hist + nh - len_n;
    int nw = len_n;
    /* the latest breaker: the longest sequence starting there that fits */
    int lim = nw;
    for (int i = 0; i < nw && lim == nw; i++) {
        int start = nw - 1 - i, best = -1;
        for (int b = 0, off = 0; b < d->n_brk; off += d->brk_len[b], b++) {
            int len = d->brk_len[b];
            if (len - 1 > i) continue;
            bool eq = true;
            for (int j = 0; j < len; j++) eq = eq && a[start + j] == d->brk_tok[off + j];
            if (eq && len - 1 > best) best = len - 1;
        }
        if (best >= 0) lim = i - best;
    }
    if (lim < d->allowed) return;
    int longest[VBIG];
    for (int t = 0; t < n; t++) longest[t] = -1;
    for (int e = 0; e + 1 < nw; e++) {
        int len = 0;
        while (len <= e && a[e - len] == a[nw - 1 - len]) len++;
        if (len > lim) len = lim;
        if (len >= d->allowed && len > longest[a[e + 1]]) longest[a[e + 1]] = len;
    }
    int max_e = d->base > 1.000001f ? (int)(88.7228391 / log(d->base)) : 0;
    for (int t = 0; t < n; t++) {
        if (longest[t] < 0) continue;
        bool single = false;
        for (int b = 0, off = 0; b < d->n_brk; off += d->brk_len[b], b++)
            single = single || (d->brk_len[b] == 1 && d->brk_tok[off] == t);
        if (single) continue;
        int e = longest[t] - d->allowed;
        if (max_e > 0 && e > max_e) e = max_e;
        out[t] -= (float)(d->mult * pow(d->base, e));
    }
}

static ob_sampler_params dry_params(const dry_cfg *d, float temp, uint64_t seed) {
    ob_sampler_params p = plain(temp, seed);
    p.dry_multiplier = d->mult;
    p.dry_base = d->base;
    p.dry_allowed_length = d->allowed;
    p.dry_penalty_last_n = d->last_n;
    p.n_dry_breakers = d->n_brk;
    p.dry_breaker_len = d->brk_len;
    p.dry_breaker_tok = d->brk_tok;
    return p;
}

/* The greedy token after DRY over history h (logits w[0..n)). */
static int dry_greedy(const dry_cfg *d, const int *h, int nh, const float *w, int n) {
    ob_sampler_params p = dry_params(d, 0, 1);
    ob_sampler *s = ob_sampler_new(&p, n);
    for (int i = 0; i < nh; i++) ob_sampler_accept(s, h[i]);
    int t = ob_sampler_sample(s, w);
    ob_sampler_free(s);
    return t;
}

static void test_dry_constructed(void) {
    enum { N = 16 };
    float w[N] = {0};
    dry_cfg d = {.mult = 0.8f, .base = 1.75f, .allowed = 2, .last_n = -1};
    /* "3 4 5" again after "3 4 5 6": 6 would make it 4 long; L = 3: 0.8 * 1.75 = 1.4 */
    const int h1[] = {3, 4, 5, 6, 9, 3, 4, 5};
    w[6] = 1.3f;
    CHECKF(dry_greedy(&d, h1, 8, w, N) == 0, "DRY: 6 (1.3) should lose 1.4");
    w[6] = 1.5f;
    CHECKF(dry_greedy(&d, h1, 8, w, N) == 6, "DRY: 6 (1.5) should keep 0.1 after 1.4");
    d.last_n = 4; /* the window "9 3 4 5" holds no earlier 5 */
    w[6] = 0.1f;
    CHECK(dry_greedy(&d, h1, 8, w, N) == 6);
    d.last_n = -1;
    d.mult = 0; /* off */
    CHECK(dry_greedy(&d, h1, 8, w, N) == 6);
    d.mult = 0.8f;
    /* none across a breaker: "5 B 6 7" repeats; with B (token 11) a breaker only "6 7"
     * counts, shorter than allowed 3 */
    const int h2[] = {5, 11, 6, 7, 9, 5, 11, 6, 7};
    memset(w, 0, sizeof w);
    w[9] = 0.5f; /* L = 4 without the breaker: 0.8 * 1.75 = 1.4 > 0.5 */
    d.allowed = 3;
    CHECK(dry_greedy(&d, h2, 9, w, N) == 0);
    const int32_t b_len[] = {1}, b_tok[] = {11};
    d.n_brk = 1;
    d.brk_len = b_len;
    d.brk_tok = b_tok;
    CHECKF(dry_greedy(&d, h2, 9, w, N) == 9, "DRY: no penalty across the breaker");
    /* a breaker of two tokens (11 12): only the whole sequence breaks */
    const int32_t b2_len[] = {2}, b2_tok[] = {11, 12};
    d.brk_len = b2_len;
    d.brk_tok = b2_tok;
    const int h3[] = {5, 11, 12, 6, 7, 9, 5, 11, 12, 6, 7};
    CHECKF(dry_greedy(&d, h3, 11, w, N) == 9, "DRY: no penalty across a two-token breaker");
    CHECKF(dry_greedy(&d, h2, 9, w, N) == 0, "DRY: 11 alone is not the breaker 11 12");
    /* a one-token breaker is never penalised itself: 11 would extend "4 5" */
    const int h4[] = {4, 5, 11, 8, 4, 5};
    memset(w, 0, sizeof w);
    w[11] = 0.5f;
    d.allowed = 2;
    d.n_brk = 0;
    CHECK(dry_greedy(&d, h4, 6, w, N) == 0); /* 0.8 off 11 */
    d.n_brk = 1;
    d.brk_len = b_len;
    d.brk_tok = b_tok;
    CHECK(dry_greedy(&d, h4, 6, w, N) == 11);
    /* the exponent is capped: base 1e30, a 6-token repeat: the penalty stays finite, so
     * the token's logit is finite and it can still win against -inf everywhere else */
    float wi[N];
    for (int i = 0; i < N; i++) wi[i] = -INFINITY;
    wi[9] = 0;
    dry_cfg big = {.mult = 1, .base = 1e30f, .allowed = 0, .last_n = -1};
    const int h5[] = {1, 2, 3, 4, 5, 6, 9, 1, 2, 3, 4, 5, 6};
    CHECK(dry_greedy(&big, h5, 13, wi, N) == 9);
}

/* Random histories over a small alphabet (many repeats) with random breakers: the exact
 * draw against the reference's logits. */
static void test_dry_random(void) {
    ob_rng r;
    ob_rng_seed(&r, 2718);
    int mism = 0, steps = 0;
    for (int trial = 0; trial < 300; trial++) {
        int alpha = 3 + (int)(ob_rng_u64(&r) % 5);
        int32_t blen[6], btok[18];
        int nb = (int)(ob_rng_u64(&r) % 4), nt = 0;
        for (int b = 0; b < nb; b++) {
            blen[b] = 1 + (int)(ob_rng_u64(&r) % 3);
            for (int j = 0; j < blen[b]; j++) btok[nt++] = (int32_t)(ob_rng_u64(&r) % (uint64_t)alpha);
        }
        if (nb >= 2 && trial % 3 == 0) { /* a duplicate */
            blen[nb] = blen[0];
            memcpy(btok + nt, btok, sizeof(int32_t) * (size_t)blen[0]);
            nt += blen[0];
            nb++;
        }
        static const float bases[] = {1.0f, 1.3f, 1.75f, 3.0f};
        static const int last_ns[] = {-1, 5, 40, 1000};
        dry_cfg d = {.mult = 0.2f + 2 * ob_rng_uniform(&r), .base = bases[trial % 4],
                     .allowed = (int)(ob_rng_u64(&r) % 5), .last_n = last_ns[(trial / 4) % 4],
                     .n_brk = nb, .brk_len = blen, .brk_tok = btok};
        ob_sampler_params p = dry_params(&d, 1, 500 + (uint64_t)trial);
        ob_sampler *a = ob_sampler_new(&p, V), *b = ob_sampler_new(&p, V);
        int hist[400], nh = 0;
        int len0 = 2 + (int)(ob_rng_u64(&r) % 200);
        for (int i = 0; i < len0; i++) {
            /* stretches copied from earlier: long repeats */
            int t = nh > 8 && ob_rng_u64(&r) % 3 ? hist[nh - 1 - (int)(ob_rng_u64(&r) % 8)]
                                                 : (int)(ob_rng_u64(&r) % (uint64_t)alpha);
            hist[nh++] = t;
            ob_sampler_accept(b, t);
        }
        float w[V], adj[V];
        for (int step = 0; step < 10; step++) {
            /* logits that favour the alphabet, so the draws repeat too */
            for (int i = 0; i < V; i++) w[i] = (i < alpha ? 2.0f : -1.0f) + ob_rng_normal(&r);
            ref_dry(&d, hist, nh, w, V, adj);
            chain_cfg cf = {.temp = 1, .top_p = 1, .typical_p = 1};
            int c[VBIG];
            int m = ref_candidates(adj, V, &cf, c);
            double u = ob_sampler_next_uniform(a);
            int tok = ob_sampler_sample(b, w);
            int want = ref_pick(adj, c, m, 1, u);
            steps++;
            if (tok != want && mism++ < 4)
                fprintf(stderr, "dry trial %d step %d: sampled %d, reference %d\n", trial, step, tok, want);
            hist[nh++] = tok;
        }
        ob_sampler_free(a);
        ob_sampler_free(b);
    }
    CHECKF(mism == 0, "DRY: %d of %d draws differ from the reference", mism, steps);
}

/* ---- greedy, seeds, the device, a filter ---------------------------------------------------- */

static void test_greedy_and_seeds(void) {
    ob_rng r;
    ob_rng_seed(&r, 99);
    float w[V];
    random_logits(&r, w, V);
    int amax = 0;
    for (int i = 1; i < V; i++) if (w[i] > w[amax]) amax = i;
    for (int k = 0; k < 4; k++) {
        ob_sampler_params p = plain(0, 3);
        if (k == 0) p.typical_p = 0.2f;
        if (k == 1) { p.xtc_probability = 1; p.xtc_threshold = 0.01f; }
        if (k >= 2) p.mirostat = k - 1;
        ob_sampler *s = ob_sampler_new(&p, V), *fresh = ob_sampler_new(&p, V);
        for (int j = 0; j < 5; j++) CHECKF(ob_sampler_sample(s, w) == amax, "greedy stays greedy (case %d)", k);
        CHECK(ob_sampler_next_uniform(s) == ob_sampler_next_uniform(fresh)); /* no draw was used */
        CHECK(ob_sampler_device_ok(s)); /* nothing of theirs applies at temperature 0 */
        p.temperature = 0.8f;
        p.top_k = 40; /* so that only their samplers keep it off the device */
        ob_sampler *hot = ob_sampler_new(&p, V);
        CHECK(!ob_sampler_device_ok(hot));
        ob_sampler_free(s);
        ob_sampler_free(fresh);
        ob_sampler_free(hot);
    }
    dry_cfg d = {.mult = 1, .base = 1.75f, .allowed = 2, .last_n = -1};
    ob_sampler_params p = dry_params(&d, 0, 3);
    ob_sampler *s = ob_sampler_new(&p, V);
    CHECK(!ob_sampler_device_ok(s)); /* DRY reads the history: the host */
    ob_sampler_free(s);

    /* every sampler on: a seed fixes the output, another seed changes it, reset replays */
    int32_t bl[] = {1, 2}, bt[] = {3, 4, 5};
    p = plain(1.1f, 77);
    p.top_k = 30;
    p.typical_p = 0.9f;
    p.xtc_probability = 0.5f;
    p.xtc_threshold = 0.1f;
    p.dry_multiplier = 0.8f;
    p.n_dry_breakers = 2;
    p.dry_breaker_len = bl;
    p.dry_breaker_tok = bt;
    int out[3][120];
    for (int run = 0; run < 3; run++) {
        p.seed = run < 2 ? 77 : 78;
        s = ob_sampler_new(&p, V);
        ob_rng q;
        ob_rng_seed(&q, 1);
        for (int k = 0; k < 120; k++) {
            ob_rng_fill_normal(&q, w, 8, 1.0f); /* the first 8 likely: repeats for DRY */
            for (int i = 8; i < V; i++) w[i] = -2 + ob_rng_normal(&q);
            out[run][k] = ob_sampler_sample(s, w);
        }
        if (run == 0) {
            ob_sampler_reset(s);
            ob_rng_seed(&q, 1);
            bool same = true;
            for (int k = 0; k < 120; k++) {
                ob_rng_fill_normal(&q, w, 8, 1.0f);
                for (int i = 8; i < V; i++) w[i] = -2 + ob_rng_normal(&q);
                same = same && ob_sampler_sample(s, w) == out[0][k];
            }
            CHECKF(same, "reset replays the seeded sequence");
        }
        ob_sampler_free(s);
    }
    CHECK(memcmp(out[0], out[1], sizeof out[0]) == 0);
    CHECK(memcmp(out[0], out[2], sizeof out[0]) != 0);
}

typedef struct fake_filter { const uint8_t *ok; int n; } fake_filter;
static bool ff_allows(void *ud, int32_t t) { return ((fake_filter *)ud)->ok[t] != 0; }
static int ff_mask(void *ud, uint8_t *allowed) {
    fake_filter *f = ud;
    int c = 0;
    for (int i = 0; i < f->n; i++) c += (allowed[i] = f->ok[i]) != 0;
    return c;
}

/* Under a filter the token is the one masking the logits first would give. */
static void test_filtered(void) {
    ob_rng r;
    ob_rng_seed(&r, 404);
    struct { float temp; int top_k; float min_p, typical_p, xtc_p; int mirostat; float dry; } cfg[] = {
        {1.0f, 0, 0.05f, 0.7f, 0, 0, 0},   /* typical-p without top-k: the whole mask */
        {0.9f, 12, 0.0f, 0.6f, 0, 0, 0},   /* typical-p after top-k: lazy */
        {1.0f, 0, 0.02f, 1.0f, 0.7f, 0, 0}, /* XTC after min-p: lazy */
        {1.2f, 20, 0.0f, 1.0f, 1.0f, 0, 0.7f},
        {1.0f, 0, 0.0f, 1.0f, 0, 1, 0},    /* Mirostat 1 */
        {0.8f, 40, 0.05f, 1.0f, 0, 2, 0},  /* Mirostat 2 */
        {0.0f, 40, 0.05f, 0.5f, 1.0f, 0, 1.0f}, /* greedy with DRY */
    };
    uint8_t ok[VBIG];
    float w[VBIG], masked[VBIG];
    int mism = 0;
    for (size_t c = 0; c < OB_ARRAY_LEN(cfg); c++) {
        for (int density = 0; density < 3; density++) {
            ob_sampler_params p = plain(cfg[c].temp, 60 + c * 3 + (uint64_t)density);
            p.top_k = cfg[c].top_k;
            p.min_p = cfg[c].min_p;
            p.typical_p = cfg[c].typical_p;
            p.xtc_probability = cfg[c].xtc_p;
            p.xtc_threshold = 0.08f;
            p.mirostat = cfg[c].mirostat;
            p.dry_multiplier = cfg[c].dry;
            p.dry_allowed_length = 1;
            ob_sampler *a = ob_sampler_new(&p, VBIG), *b = ob_sampler_new(&p, VBIG);
            for (int step = 0; step < 25; step++) {
                static const int keep_in[3] = {95, 40, 3};
                int n_ok = 0;
                for (int i = 0; i < VBIG; i++) n_ok += ok[i] = (int)(ob_rng_u64(&r) % 100) < keep_in[density];
                if (!n_ok) ok[ob_rng_u64(&r) % VBIG] = 1;
                for (int i = 0; i < VBIG; i++) {
                    w[i] = 3.0f * ob_rng_normal(&r) + (i < 6 ? 4.0f : 0.0f);
                    masked[i] = ok[i] ? w[i] : -INFINITY;
                }
                fake_filter f = {ok, VBIG};
                ob_token_filter tf = {ff_allows, ff_mask, &f};
                int32_t ta = ob_sampler_sample_filtered(a, w, &tf), tb = ob_sampler_sample(b, masked);
                if ((ta != tb || ta < 0 || !ok[ta]) && mism++ < 4)
                    fprintf(stderr, "filtered config %zu density %d step %d: %d, masked %d\n", c, density, step, ta, tb);
            }
            if (cfg[c].mirostat)
                CHECK(ob_sampler_mirostat_mu(a) == ob_sampler_mirostat_mu(b));
            ob_sampler_free(a);
            ob_sampler_free(b);
        }
    }
    CHECKF(mism == 0, "%d filtered draws differ from masked ones", mism);
}

/* ---- breakers from a real vocabulary ------------------------------------------------------ */

typedef struct seq { int len; int32_t t[24]; } seq;

static int cmp_seq(const void *pa, const void *pb) {
    const seq *a = pa, *b = pb;
    if (a->len != b->len) return a->len - b->len;
    return memcmp(a->t, b->t, sizeof(int32_t) * (size_t)a->len);
}

static void test_breakers_tokenize(void) {
    const char *path = "tests/fixtures/models/qwen2.gguf";
    ob_model_params mp = ob_model_default_params();
    mp.device = OB_DEVICE_CPU;
    ob_model *m = NULL;
    char err[256];
    if (ob_model_load(path, &mp, &m, err, sizeof err)) {
        fprintf(stderr, "SKIPPED breakers: %s\n", err);
        return;
    }
    const ob_tokenizer *t = ob_model_tokenizer(m);
    int nv = ob_tokenizer_n_vocab(t);
    ob_dry_breaker_text text = {.set = true, .n = 4, .s = {"\n", ":", "the", "\"\n"}};
    ob_dry_breakers got;
    CHECK(ob_dry_breakers_tokenize(t, &text, &got) == OB_OK);
    /* the reference: every token holding a breaker; every token ending in a proper start of
     * one, then the tokens of its rest */
    int nw = 0, cap = 1024;
    seq *want = malloc(sizeof(seq) * (size_t)cap), *have = malloc(sizeof(seq) * (size_t)(got.n ? got.n : 1));
    for (int b = 0; b < text.n; b++) {
        const char *s = text.s[b];
        size_t sl = strlen(s);
        for (int id = 0; id < nv; id++) {
            if (nw + 64 > cap) want = realloc(want, sizeof(seq) * (size_t)(cap *= 2));
            size_t pl;
            const char *pc = ob_token_piece(t, id, &pl);
            bool holds = false;
            for (size_t i = 0; i + sl <= pl && !holds; i++) holds = memcmp(pc + i, s, sl) == 0;
            if (holds) {
                want[nw].len = 1;
                want[nw++].t[0] = id;
                continue;
            }
            for (size_t k = 1; k < sl && k <= pl; k++) {
                if (memcmp(pc + pl - k, s, k)) continue;
                int32_t ids[64];
                int n = ob_tokenize(t, s + k, sl - k, ids, 64, false, false);
                if (n <= 0) continue;
                if (n > 20) n = 20;
                want[nw].len = 1 + n;
                want[nw].t[0] = id;
                memcpy(want[nw].t + 1, ids, sizeof(int32_t) * (size_t)n);
                nw++;
            }
        }
    }
    size_t off = 0;
    for (int i = 0; i < got.n; i++) {
        have[i].len = got.len[i];
        memcpy(have[i].t, got.tok + off, sizeof(int32_t) * (size_t)got.len[i]);
        off += (size_t)got.len[i];
    }
    qsort(want, (size_t)nw, sizeof(seq), cmp_seq);
    qsort(have, (size_t)got.n, sizeof(seq), cmp_seq);
    int uw = 0, uh = 0; /* distinct ones */
    for (int i = 0; i < nw; i++) if (!uw || cmp_seq(&want[i], &want[uw - 1])) want[uw++] = want[i];
    for (int i = 0; i < got.n; i++) if (!uh || cmp_seq(&have[i], &have[uh - 1])) have[uh++] = have[i];
    bool same = uw == uh;
    for (int i = 0; same && i < uw; i++) same = cmp_seq(&want[i], &have[i]) == 0;
    CHECKF(same && uw > 0, "breakers: %d sequences, the reference %d (vocabulary %d)", uh, uw, nv);
    int multi = 0;
    for (int i = 0; i < uw; i++) multi += want[i].len > 1;
    CHECKF(multi > 0, "the test's breakers reach across tokens somewhere");
    free(want);
    free(have);
    ob_dry_breakers_free(&got);
    /* the defaults; and "none" */
    CHECK(ob_dry_breakers_tokenize(t, NULL, &got) == OB_OK && got.n > 0);
    ob_dry_breakers_free(&got);
    ob_dry_breaker_text none = {.set = true, .n = 0};
    CHECK(ob_dry_breakers_tokenize(t, &none, &got) == OB_OK && got.n == 0);
    ob_dry_breakers_free(&got);
    ob_model_free(m);
}

int main(void) {
    if (ob_test_shard(0)) test_chain_exact();
    if (ob_test_shard(1)) test_frequencies();
    if (ob_test_shard(2)) test_xtc_constructed();
    if (ob_test_shard(3)) test_mirostat();
    if (ob_test_shard(4)) test_dry_constructed();
    if (ob_test_shard(5)) test_dry_random();
    if (ob_test_shard(6)) test_greedy_and_seeds();
    if (ob_test_shard(7)) test_filtered();
    if (ob_test_shard(8)) test_breakers_tokenize();
    return ob_test_done("test_sampler_ext");
}
