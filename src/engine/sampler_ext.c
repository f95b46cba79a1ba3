/* DRY, typical-p, XTC and Mirostat (sampler_ext.h): the semantics llama-server gives them,
 * written from the papers and p-e-w's descriptions. */
#include "engine/sampler_ext.h"
#include "core/common.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DRY_TAIL_MAX 20        /* tokens after a breaker's first (llama.cpp's limit) */
#define DRY_TEXT_MAX 40        /* bytes of a breaker string that count (llama.cpp's limit) */
#define DRY_WHOLE (1 << 20)    /* dry_penalty_last_n -1: the whole history, up to this */
#define MIROSTAT_M 100         /* tokens Mirostat 1 fits its Zipf exponent to (the paper's m) */

struct ob_sampler_ext {
    ob_sampler_params p;       /* the breaker pointers not kept */
    int n_vocab;
    bool dry, typical, xtc, draws;
    /* DRY: the history (the window is its last `window` tokens, in order) */
    int window;
    int32_t *hist;             /* [hist_cap] */
    int hist_n, hist_cap;
    int32_t *z;                /* [hist_cap] Z-array of the reversed window */
    int32_t *best;             /* [n_vocab] 1 + the longest repeat a token would extend; 0 none */
    int32_t *pen_tok;          /* [hist_cap] penalised tokens of the last ob_sampler_ext_dry */
    float *pen_val;            /* [hist_cap] */
    /* DRY's breakers, sorted by (first token, length, tokens), no two the same */
    int n_brk;
    int32_t *brk_off, *brk_len, *brk_tok;
    /* Mirostat */
    float mu;
    /* XTC's coin: a stream of its own, so the draw's stream is the plain chain's */
    uint64_t xtc_rng[2];
    /* typical-p and Mirostat scratch, [n_vocab] each (allocated for those on) */
    double *pr;
    int32_t *a, *b;
    float *cw;
};

static bool dry_wanted(const ob_sampler_params *p) {
    return p->mirostat == 0 && p->dry_multiplier != 0 && p->dry_base >= 1.0f && p->dry_penalty_last_n != 0;
}

bool ob_sampler_dry_on(const ob_sampler_params *p) { return dry_wanted(p); }

static bool typical_wanted(const ob_sampler_params *p) { return p->mirostat == 0 && p->typical_p < 1.0f; }

static bool xtc_wanted(const ob_sampler_params *p) {
    return p->mirostat == 0 && p->xtc_probability > 0 && p->xtc_threshold <= 0.5f;
}

bool ob_sampler_ext_wanted(const ob_sampler_params *p) {
    return p->mirostat != 0 || dry_wanted(p) || typical_wanted(p) || xtc_wanted(p);
}

/* ---- DRY's breakers ------------------------------------------------------------------- */

static int cmp_brk(const void *pa, const void *pb, void *ctx) {
    const ob_sampler_ext *x = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    const int32_t *ta = x->brk_tok + x->brk_off[a], *tb = x->brk_tok + x->brk_off[b];
    if (ta[0] != tb[0]) return ta[0] < tb[0] ? -1 : 1;
    if (x->brk_len[a] != x->brk_len[b]) return x->brk_len[a] < x->brk_len[b] ? -1 : 1;
    for (int i = 1; i < x->brk_len[a]; i++)
        if (ta[i] != tb[i]) return ta[i] < tb[i] ? -1 : 1;
    return 0;
}

/* Copies p's breakers sorted, without duplicates; lengths outside 1..1 + DRY_TAIL_MAX are
 * dropped. */
static bool copy_breakers(ob_sampler_ext *x, const ob_sampler_params *p) {
    int n = p->n_dry_breakers > 0 && p->dry_breaker_len && p->dry_breaker_tok ? p->n_dry_breakers : 0;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += p->dry_breaker_len[i] > 0 ? (size_t)p->dry_breaker_len[i] : 0;
    size_t nn = (size_t)(n ? n : 1), nt = total ? total : 1;
    x->brk_off = malloc(sizeof(int32_t) * nn);
    x->brk_len = malloc(sizeof(int32_t) * nn);
    x->brk_tok = malloc(sizeof(int32_t) * nt);
    int32_t *order = malloc(sizeof(int32_t) * nn), *noff = malloc(sizeof(int32_t) * nn);
    int32_t *nlen = malloc(sizeof(int32_t) * nn), *ntok = malloc(sizeof(int32_t) * nt);
    bool ok = x->brk_off && x->brk_len && x->brk_tok && order && noff && nlen && ntok;
    if (ok) {
        /* p's sequences seen through x, sorted; the kept ones copied out in that order */
        if (total) memcpy(x->brk_tok, p->dry_breaker_tok, sizeof(int32_t) * total);
        size_t at = 0;
        int m = 0;
        for (int i = 0; i < n; i++) {
            int len = p->dry_breaker_len[i];
            if (len >= 1 && len <= 1 + DRY_TAIL_MAX) {
                x->brk_off[m] = (int32_t)at;
                x->brk_len[m] = len;
                order[m] = m;
                m++;
            }
            at += len > 0 ? (size_t)len : 0;
        }
        qsort_r(order, (size_t)m, sizeof(int32_t), cmp_brk, x);
        size_t w = 0;
        int k = 0;
        for (int i = 0; i < m; i++) {
            if (i > 0 && cmp_brk(&order[i], &order[i - 1], x) == 0) continue; /* equal ones are adjacent */
            int32_t q = order[i];
            memcpy(ntok + w, x->brk_tok + x->brk_off[q], sizeof(int32_t) * (size_t)x->brk_len[q]);
            noff[k] = (int32_t)w;
            nlen[k] = x->brk_len[q];
            w += (size_t)nlen[k++];
        }
        x->n_brk = k;
        int32_t *t;
        t = x->brk_off; x->brk_off = noff; noff = t;
        t = x->brk_len; x->brk_len = nlen; nlen = t;
        t = x->brk_tok; x->brk_tok = ntok; ntok = t;
    }
    free(order);
    free(noff);
    free(nlen);
    free(ntok);
    return ok;
}

/* The breakers whose first token is t: [*lo, *hi). */
static void brk_range(const ob_sampler_ext *x, int32_t t, int *lo, int *hi) {
    int l = 0, h = x->n_brk;
    while (l < h) {
        int mid = (l + h) / 2;
        if (x->brk_tok[x->brk_off[mid]] < t) l = mid + 1;
        else h = mid;
    }
    *lo = l;
    h = l;
    while (h < x->n_brk && x->brk_tok[x->brk_off[h]] == t) h++;
    *hi = h;
}

/* ---- life cycle ------------------------------------------------------------------------- */

ob_sampler_ext *ob_sampler_ext_new(const ob_sampler_params *p, int n_vocab) {
    ob_sampler_ext *x = calloc(1, sizeof(*x));
    if (!x) return NULL;
    x->p = *p;
    x->p.n_dry_breakers = 0;
    x->p.dry_breaker_len = x->p.dry_breaker_tok = NULL;
    x->p.logit_bias_tok = NULL;
    x->p.logit_bias_val = NULL;
    x->n_vocab = n_vocab;
    x->dry = dry_wanted(p);
    x->typical = typical_wanted(p);
    x->xtc = xtc_wanted(p);
    x->draws = p->temperature > 0 && (p->mirostat != 0 || x->typical || x->xtc);
    bool ok = true;
    if (x->dry) {
        x->window = p->dry_penalty_last_n < 0 || p->dry_penalty_last_n > DRY_WHOLE ? DRY_WHOLE : p->dry_penalty_last_n;
        x->best = calloc((size_t)n_vocab, sizeof(int32_t));
        ok = x->best && copy_breakers(x, p);
    }
    if (ok && x->draws) {
        x->pr = malloc(sizeof(double) * (size_t)n_vocab);
        x->a = malloc(sizeof(int32_t) * (size_t)n_vocab);
        x->b = malloc(sizeof(int32_t) * (size_t)n_vocab);
        x->cw = p->mirostat ? malloc(sizeof(float) * (size_t)n_vocab) : NULL;
        ok = x->pr && x->a && x->b && (!p->mirostat || x->cw);
    }
    if (!ok) {
        ob_sampler_ext_free(x);
        return NULL;
    }
    ob_sampler_ext_reset(x);
    return x;
}

void ob_sampler_ext_free(ob_sampler_ext *x) {
    if (!x) return;
    free(x->hist);
    free(x->z);
    free(x->best);
    free(x->pen_tok);
    free(x->pen_val);
    free(x->brk_off);
    free(x->brk_len);
    free(x->brk_tok);
    free(x->pr);
    free(x->a);
    free(x->b);
    free(x->cw);
    free(x);
}

void ob_sampler_ext_reset(ob_sampler_ext *x) {
    x->hist_n = 0;
    x->mu = 2.0f * x->p.mirostat_tau;
    ob_sampler_rng_seed(x->xtc_rng, x->p.seed ^ 0x7874632d636f696eull); /* "xtc-coin" */
}

float ob_sampler_ext_mu(const ob_sampler_ext *x) { return x->p.mirostat ? x->mu : NAN; }

bool ob_sampler_ext_draws(const ob_sampler_ext *x) { return x->draws; }

bool ob_sampler_ext_device_ok(const ob_sampler_ext *x) { return !x->dry && !x->draws; }

bool ob_sampler_ext_lazy_ok(const ob_sampler_ext *x, bool top_k_on) {
    if (!x->draws) return true;
    return x->p.mirostat == 0 && (!x->typical || top_k_on);
}

/* ---- DRY ------------------------------------------------------------------------------- */

/* The history keeps the last `window` tokens; its buffer grows to twice that, then the
 * window moves to the front, so appending is amortised O(1) and the window contiguous. */
void ob_sampler_ext_accept(ob_sampler_ext *x, int32_t tok) {
    if (!x->dry) return;
    if (x->hist_n == x->hist_cap) {
        long want = x->hist_cap ? 2L * x->hist_cap : 256;
        if (want > 2L * x->window) want = 2L * x->window;
        int32_t *h = want > x->hist_cap ? realloc(x->hist, sizeof(int32_t) * (size_t)want) : NULL;
        int32_t *z = h ? realloc(x->z, sizeof(int32_t) * (size_t)want) : NULL;
        int32_t *pt = z ? realloc(x->pen_tok, sizeof(int32_t) * (size_t)want) : NULL;
        float *pv = pt ? realloc(x->pen_val, sizeof(float) * (size_t)want) : NULL;
        if (h) x->hist = h;
        if (z) x->z = z;
        if (pt) x->pen_tok = pt;
        if (pv) {
            x->pen_val = pv;
            x->hist_cap = (int)want;
        } else if (x->hist_n == 0) {
            return; /* out of memory before the first token: DRY sees nothing */
        } else {
            /* full (or out of memory): keep the newer half, at least the window */
            int keep = OB_MIN(x->hist_n, x->window);
            if (keep == x->hist_n) keep = x->hist_n / 2;
            memmove(x->hist, x->hist + x->hist_n - keep, sizeof(int32_t) * (size_t)keep);
            x->hist_n = keep;
        }
    }
    x->hist[x->hist_n++] = tok;
}

int ob_sampler_ext_dry(ob_sampler_ext *x, const int32_t **tok, const float **val) {
    if (!x->dry) return 0;
    const ob_sampler_params *p = &x->p;
    const int n = OB_MIN(x->hist_n, x->window), allowed = p->dry_allowed_length;
    if (n < 2 || n <= allowed) return 0;
    const int32_t *a = x->hist + x->hist_n - n; /* a[n - 1] is the last token */
    /* A repeat may not reach back past the latest breaker: lim tokens follow its end. The
     * longest breaker that ends there counts (breakers are sorted by length). */
    int lim = n;
    for (int i = 0; i < n; i++) {
        int lo, hi, longest = -1;
        brk_range(x, a[n - 1 - i], &lo, &hi);
        for (int k = lo; k < hi; k++) {
            const int tail = x->brk_len[k] - 1;
            if (tail > i) break;
            const int32_t *t = x->brk_tok + x->brk_off[k] + 1;
            int j = 0;
            while (j < tail && t[j] == a[n - i + j]) j++;
            if (j == tail) longest = tail;
        }
        if (longest >= 0) {
            lim = i - longest;
            break;
        }
    }
    if (lim < allowed) return 0;
    /* z[k]: how many of the last tokens also end k tokens earlier (the Z-array of the
     * reversed window, so linear in n). */
    int32_t *z = x->z;
    int l = 0, r = 0;
    for (int k = 1; k < n; k++) {
        int m = k < r ? OB_MIN(r - k, z[k - l]) : 0;
        while (k + m < n && a[n - 1 - m] == a[n - 1 - k - m]) m++;
        z[k] = m;
        if (k + m > r) {
            l = k;
            r = k + m;
        }
    }
    /* the token after each earlier end would extend its repeat: the longest counts */
    int np = 0;
    for (int k = 1; k < n; k++) {
        int len = OB_MIN(z[k], lim);
        if (len < allowed) continue;
        int32_t t = a[n - k];
        if (t < 0 || t >= x->n_vocab) continue;
        if (!x->best[t]) x->pen_tok[np++] = t;
        if (x->best[t] < len + 1) x->best[t] = len + 1;
    }
    /* pow(base, e) stays finite: e at most ln(FLT_MAX) / ln(base), as llama.cpp caps it */
    int max_e = p->dry_base > 1.000001f ? (int)(88.7228391 / log((double)p->dry_base)) : 0;
    int out = 0;
    for (int i = 0; i < np; i++) {
        int32_t t = x->pen_tok[i];
        int len = x->best[t] - 1;
        x->best[t] = 0;
        int lo, hi;
        brk_range(x, t, &lo, &hi);
        if (lo < hi && x->brk_len[lo] == 1) continue; /* a breaker on its own is never penalised */
        int e = len - allowed;
        if (max_e > 0 && e > max_e) e = max_e;
        x->pen_tok[out] = t;
        x->pen_val[out++] = (float)((double)p->dry_multiplier * pow((double)p->dry_base, e));
    }
    *tok = x->pen_tok;
    *val = x->pen_val;
    return out;
}

/* ---- typical-p, XTC ------------------------------------------------------------------- */

typedef struct { const double *key; } by_key;

static int cmp_key(const void *pa, const void *pb, void *ctx) {
    const double *k = ((const by_key *)ctx)->key;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    if (k[a] != k[b]) return k[a] < k[b] ? -1 : 1;
    return (a > b) - (a < b); /* equal scores: the better ranked first */
}

static int cmp_i32(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return (a > b) - (a < b);
}

/* Locally typical sampling over the ranked candidates idx[0..m): each token's surprise
 * -ln p against the distribution's entropy; the tokens closest to it first, as few as
 * bring the probability past typical_p; they stay ranked. Returns how many. */
static int typical(ob_sampler_ext *x, const float *w, int32_t *idx, int m) {
    if (m < 2) return m;
    double *dist = x->pr, sum = 0, h = 0;
    const float mx = w[idx[0]];
    for (int i = 0; i < m; i++) sum += exp((double)(w[idx[i]] - mx));
    for (int i = 0; i < m; i++) {
        double pi = exp((double)(w[idx[i]] - mx)) / sum;
        if (pi > 0) h -= pi * log(pi);
    }
    int32_t *ord = x->a;
    for (int i = 0; i < m; i++) {
        double pi = exp((double)(w[idx[i]] - mx)) / sum;
        dist[i] = pi > 0 ? fabs(-log(pi) - h) : INFINITY;
        ord[i] = i;
    }
    by_key key = {dist};
    qsort_r(ord, (size_t)m, sizeof(int32_t), cmp_key, &key);
    double cum = 0;
    int keep = m;
    for (int j = 0; j < m; j++) {
        cum += exp((double)(w[idx[ord[j]]] - mx)) / sum;
        if (cum > x->p.typical_p) {
            keep = j + 1;
            break;
        }
    }
    qsort(ord, (size_t)keep, sizeof(int32_t), cmp_i32); /* back in rank order */
    for (int j = 0; j < keep; j++) x->b[j] = idx[ord[j]];
    memcpy(idx, x->b, sizeof(int32_t) * (size_t)keep);
    return keep;
}

/* XTC over the ranked candidates *idx[0..m): with xtc_probability, every token at least
 * xtc_threshold likely (before temperature) goes, but the least likely of them. */
static int xtc(ob_sampler_ext *x, const float *w, int32_t **idx, int m) {
    if (m < 2) return m;
    float coin = (float)(ob_sampler_rng_next(x->xtc_rng) >> 40) * 0x1p-24f;
    if (coin > x->p.xtc_probability) return m;
    const int32_t *c = *idx;
    const float mx = w[c[0]];
    double sum = 0;
    for (int i = 0; i < m; i++) sum += exp((double)(w[c[i]] - mx));
    int last = 0; /* the last of the ranked tokens at or above the threshold */
    while (last + 1 < m && exp((double)(w[c[last + 1]] - mx)) / sum >= x->p.xtc_threshold) last++;
    if (last > 0) {
        *idx += last;
        m -= last;
    }
    return m;
}

/* ---- Mirostat ------------------------------------------------------------------------- */

static int cmp_rank_f(const void *pa, const void *pb, void *ctx) {
    const float *w = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    if (w[a] != w[b]) return w[a] > w[b] ? -1 : 1;
    return (a > b) - (a < b);
}

/* Mirostat over the candidates with a finite logit, at temperature: version 1 estimates
 * the Zipf exponent s from the best MIROSTAT_M and keeps the k best that the target
 * surprise mu gives; version 2 keeps the tokens whose surprise -log2 p is at most mu. After
 * the draw, mu moves by eta times the error of the drawn token's surprise against tau. */
static int32_t mirostat(ob_sampler_ext *x, const float *w, int n, double u) {
    const ob_sampler_params *p = &x->p;
    const double t = p->temperature;
    int32_t *cid = x->a, *ord = x->b;
    float *cw = x->cw;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (w[i] > -INFINITY) {
            cid[m] = i;
            cw[m++] = w[i];
        }
    if (m == 0) return ob_argmax_f32(w, n); /* nothing finite to draw from */
    int k;
    if (p->mirostat == 1) {
        int kf = OB_MIN(MIROSTAT_M, m);
        ob_top_k_sorted(cw, m, kf, ord);
        double st = 0, tt = 0;
        for (int i = 0; i + 1 < kf; i++) {
            double ti = log((double)(i + 2) / (double)(i + 1));
            double bi = (double)(cw[ord[i]] - cw[ord[i + 1]]) / t; /* ln(p_i / p_i+1) */
            st += ti * bi;
            tt += ti * ti;
        }
        double s = st / tt, eps = s - 1;
        double kd = pow(eps * pow(2.0, (double)x->mu) / (1 - pow((double)x->n_vocab, -eps)), 1 / s);
        k = !(kd >= 1) ? 1 : kd >= m ? m : (int)kd; /* NaN (one candidate, s = 1) keeps the best */
        if (k > kf) ob_top_k_sorted(cw, m, k, ord);
    } else {
        float mx = cw[0];
        for (int i = 1; i < m; i++) if (cw[i] > mx) mx = cw[i];
        double z = 0;
        for (int i = 0; i < m; i++) z += exp((double)(cw[i] - mx) / t);
        k = 0;
        for (int i = 0; i < m; i++)
            if (-log2(exp((double)(cw[i] - mx) / t) / z) <= (double)x->mu) ord[k++] = i;
        if (k == 0) ord[k++] = ob_argmax_f32(cw, m);
        qsort_r(ord, (size_t)k, sizeof(int32_t), cmp_rank_f, cw);
    }
    int32_t j = ob_sample_draw(cw, ord, k, p->temperature, u);
    double z = 0;
    for (int i = 0; i < k; i++) z += exp((double)(cw[ord[i]] - cw[ord[0]]) / t);
    double surprise = -log2(exp((double)(cw[j] - cw[ord[0]]) / t) / z);
    x->mu -= (float)((double)p->mirostat_eta * (surprise - (double)p->mirostat_tau));
    return cid[j];
}

/* ---- the draw ------------------------------------------------------------------------- */

int32_t ob_sampler_ext_pick(ob_sampler_ext *x, const float *w, int n, double u, int32_t *idx) {
    const ob_sampler_params *p = &x->p;
    const float t = p->temperature;
    if (p->mirostat) return mirostat(x, w, n, u);
    /* typical-p reads the whole (top-k) distribution: no min-p floor before it */
    int m = ob_sample_rank(w, n, t, p->top_k, x->typical ? 0 : p->min_p, idx);
    if (m == 0) return ob_argmax_f32(w, n); /* only NaN logits */
    while (m > 1 && !(w[idx[m - 1]] > -INFINITY)) m--; /* weight 0 everywhere: not candidates */
    if (x->typical) m = typical(x, w, idx, m);
    m = ob_sample_min_p(w, idx, m, t, p->min_p);
    m = ob_sample_top_p(w, idx, m, t, p->top_p);
    int32_t *c = idx;
    if (x->xtc) m = xtc(x, w, &c, m);
    return ob_sample_draw(w, c, m, t, u);
}

/* ---- DRY's breakers from text ------------------------------------------------------------ */

typedef struct brk_out {
    int n, cap_n;
    size_t n_tok, cap_tok;
    int32_t *len, *tok;
} brk_out;

static bool brk_add(brk_out *o, int32_t head, const int32_t *tail, int n_tail) {
    if (o->n == o->cap_n) {
        int cap = o->cap_n ? 2 * o->cap_n : 256;
        int32_t *l = realloc(o->len, sizeof(int32_t) * (size_t)cap);
        if (!l) return false;
        o->len = l;
        o->cap_n = cap;
    }
    if (o->n_tok + 1 + (size_t)n_tail > o->cap_tok) {
        size_t cap = o->cap_tok ? 2 * o->cap_tok : 1024;
        while (cap < o->n_tok + 1 + (size_t)n_tail) cap *= 2;
        int32_t *t = realloc(o->tok, sizeof(int32_t) * cap);
        if (!t) return false;
        o->tok = t;
        o->cap_tok = cap;
    }
    o->len[o->n++] = 1 + n_tail;
    o->tok[o->n_tok++] = head;
    if (n_tail) memcpy(o->tok + o->n_tok, tail, sizeof(int32_t) * (size_t)n_tail);
    o->n_tok += (size_t)n_tail;
    return true;
}

ob_status ob_dry_breakers_tokenize(const ob_tokenizer *t, const ob_dry_breaker_text *text, ob_dry_breakers *out) {
    static const char *const defaults[] = {"\n", ":", "\"", "*"};
    memset(out, 0, sizeof(*out));
    const char *const *strs = text && text->set ? text->s : defaults;
    int ns = text && text->set ? OB_MAX(0, OB_MIN(text->n, OB_DRY_MAX_BREAKERS)) : (int)OB_ARRAY_LEN(defaults);
    const int nv = ob_tokenizer_n_vocab(t);
    brk_out o = {0};
    /* the tokens of the rest of a breaker after its first k bytes, made once per k */
    int32_t tails[DRY_TEXT_MAX][DRY_TAIL_MAX];
    int n_tail[DRY_TEXT_MAX];
    for (int si = 0; si < ns; si++) {
        const char *s = strs[si];
        size_t sl = s ? strlen(s) : 0;
        if (sl == 0) continue;
        if (sl > DRY_TEXT_MAX) sl = DRY_TEXT_MAX;
        for (size_t k = 0; k < sl; k++) n_tail[k] = -1;
        for (int32_t id = 0; id < nv; id++) {
            size_t pl;
            const char *piece = ob_token_piece(t, id, &pl);
            if (pl >= sl && memmem(piece, pl, s, sl)) {
                if (!brk_add(&o, id, NULL, 0)) goto nomem;
                continue;
            }
            /* the piece ends with the breaker's first k bytes (k < sl): its rest follows */
            size_t from = pl > sl ? pl - sl + 1 : 0;
            for (size_t pos = from; pos < pl; pos++) {
                size_t k = pl - pos;
                if (piece[pos] != s[0] || memcmp(piece + pos, s, k)) continue;
                if (n_tail[k] < 0) {
                    int32_t ids[4 * DRY_TEXT_MAX + 8];
                    int nt = ob_tokenize(t, s + k, sl - k, ids, (int)OB_ARRAY_LEN(ids), false, false);
                    if (nt < 0 || nt > (int)OB_ARRAY_LEN(ids)) nt = 0;
                    n_tail[k] = OB_MIN(nt, DRY_TAIL_MAX);
                    memcpy(tails[k], ids, sizeof(int32_t) * (size_t)n_tail[k]);
                }
                if (n_tail[k] > 0 && !brk_add(&o, id, tails[k], n_tail[k])) goto nomem;
            }
        }
    }
    out->n = o.n;
    out->len = o.len;
    out->tok = o.tok;
    return OB_OK;
nomem:
    free(o.len);
    free(o.tok);
    return OB_ERR_NOMEM;
}

void ob_dry_breakers_free(ob_dry_breakers *b) {
    if (!b) return;
    free(b->len);
    free(b->tok);
    memset(b, 0, sizeof(*b));
}
