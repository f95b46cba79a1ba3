/* The matcher: which parse stacks the text so far leaves open, and which tokens may come
 * next (grammar.h).
 *
 * A stack is a chain of interned nodes (pos, dst, parent): the top's element position,
 * the state inside a character class's byte automaton, and the node to return to when
 * the top's alternative ends (0: the bottom; the node 0 in a set means "may end here").
 * A return frame is never pushed for a reference that ends its alternative (a tail call),
 * so x* loops run in constant depth. A set of stacks is interned too and carries a
 * lazily filled row of 256 transitions, so once a state has been seen a byte costs one
 * array read. The tables grow with every new state; past a budget they are rebuilt from
 * the current set alone between tokens. */
#include "grammar/grammar_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEAD (-1)
#define UNKNOWN (-2)
#define MAX_SET 16384             /* stacks in one set */
#define MAX_VISIT (1 << 16)       /* nodes expanded for one byte */
#define BUDGET (64u << 20)        /* table bytes that trigger a rebuild between tokens */
#define HARD_LIMIT (1024u << 20)  /* table bytes that fail the matcher */
#define MASK_CACHE_MAX 4096       /* masks allowing at most this many text tokens are kept */

typedef struct tables {
    int32_t *npos, *ndst, *npar;  /* [cap_nodes] */
    int32_t *nmark;               /* [cap_nodes] closure visit stamp */
    int32_t n_nodes, cap_nodes;
    int32_t *ntab;                /* hash: node id, -1 empty */
    uint32_t ntab_mask;
    int32_t *items;               /* set members, sorted */
    size_t n_items, cap_items;
    int32_t *soff, *slen, *srow;  /* [cap_sets] items offset, count, transition row or -1 */
    int32_t n_sets, cap_sets;
    int32_t *stab;
    uint32_t stab_mask;
    int32_t *rows;                /* [n_rows][256] next set, DEAD or UNKNOWN */
    int32_t n_rows, cap_rows;
    int32_t *smask;               /* [cap_sets] the set's allowed text tokens in masks, or -1 */
    int32_t *masks;               /* at smask[s]: a count, then that many token ids */
    size_t n_masks, cap_masks;
} tables;

struct ob_grammar_matcher {
    const ob_grammar *g;
    const ob_grammar_vocab *v;
    bool end_tokens;
    tables t;
    int32_t cur;                  /* the current set */
    int32_t epoch;                /* closure stamp */
    int32_t *work, *out;          /* closure scratch */
    int32_t n_work, cap_work, n_out, cap_out;
    int32_t *path;                /* [max token length + 1] sets along a mask walk */
    int32_t *found;               /* [MASK_CACHE_MAX] text tokens a mask walk allowed */
    bool failed, nomem;
    char err[192];
};

static void fail(ob_grammar_matcher *m, const char *msg) {
    if (m->failed) return;
    m->failed = true;
    snprintf(m->err, sizeof m->err, "%s", msg);
}

static void oom(ob_grammar_matcher *m) {
    m->nomem = !m->failed;
    fail(m, "out of memory");
}

static size_t table_bytes(const tables *t) {
    return (size_t)t->cap_nodes * 16 + ((size_t)t->ntab_mask + 1) * 4 + t->cap_items * 4 + (size_t)t->cap_sets * 12 +
           ((size_t)t->stab_mask + 1) * 4 + (size_t)t->cap_rows * 1024 + t->cap_masks * 4;
}

static void tables_free(tables *t) {
    free(t->npos); free(t->ndst); free(t->npar); free(t->nmark); free(t->ntab);
    free(t->items); free(t->soff); free(t->slen); free(t->srow); free(t->stab); free(t->rows);
    free(t->smask); free(t->masks);
    memset(t, 0, sizeof *t);
}

static bool grow32(int32_t **p, int32_t need, int32_t *cap, int32_t fill) {
    if (need <= *cap) return true;
    int32_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    int32_t *q = realloc(*p, (size_t)c * sizeof *q);
    if (!q) return false;
    for (int32_t i = *cap; i < c; i++) q[i] = fill;
    *p = q;
    *cap = c;
    return true;
}

static uint32_t mix(uint32_t h, uint32_t x) {
    h ^= x * 0x9E3779B1u;
    return (h << 13 | h >> 19) * 5 + 0xE6546B64u;
}

static bool rehash(int32_t **tab, uint32_t *mask, uint32_t cap, int32_t n, uint32_t (*key)(const tables *, int32_t),
                   const tables *t) {
    int32_t *nt = malloc(cap * sizeof *nt);
    if (!nt) return false;
    for (uint32_t i = 0; i < cap; i++) nt[i] = -1;
    for (int32_t i = 0; i < n; i++) {
        uint32_t h = key(t, i) & (cap - 1);
        while (nt[h] >= 0) h = (h + 1) & (cap - 1);
        nt[h] = i;
    }
    free(*tab);
    *tab = nt;
    *mask = cap - 1;
    return true;
}

static uint32_t node_key3(int32_t pos, int32_t dst, int32_t par) {
    return mix(mix(mix(0x811C9DC5u, (uint32_t)pos), (uint32_t)dst), (uint32_t)par);
}
static uint32_t node_key(const tables *t, int32_t i) { return node_key3(t->npos[i], t->ndst[i], t->npar[i]); }

static uint32_t items_key(const int32_t *v, int32_t n) {
    uint32_t h = 0x811C9DC5u ^ (uint32_t)n;
    for (int32_t i = 0; i < n; i++) h = mix(h, (uint32_t)v[i]);
    return h;
}
static uint32_t set_key(const tables *t, int32_t i) { return items_key(t->items + t->soff[i], t->slen[i]); }

/* The node (pos, dst, par), made if new; -1 when out of memory. */
static int32_t node(tables *t, int32_t pos, int32_t dst, int32_t par) {
    uint32_t h = node_key3(pos, dst, par) & t->ntab_mask;
    for (int32_t id; (id = t->ntab[h]) >= 0; h = (h + 1) & t->ntab_mask)
        if (t->npos[id] == pos && t->ndst[id] == dst && t->npar[id] == par) return id;
    int32_t id = t->n_nodes, cap = t->cap_nodes;
    if (id + 1 > cap) {
        int32_t c = cap;
        if (!grow32(&t->npos, id + 1, &c, 0)) return -1;
        c = cap;
        if (!grow32(&t->ndst, id + 1, &c, 0)) return -1;
        c = cap;
        if (!grow32(&t->npar, id + 1, &c, 0)) return -1;
        c = cap;
        if (!grow32(&t->nmark, id + 1, &c, 0)) return -1;
        t->cap_nodes = c;
    }
    t->npos[id] = pos;
    t->ndst[id] = dst;
    t->npar[id] = par;
    t->nmark[id] = 0;
    t->n_nodes++;
    t->ntab[h] = id;
    if ((uint32_t)t->n_nodes * 2 > t->ntab_mask && !rehash(&t->ntab, &t->ntab_mask, (t->ntab_mask + 1) * 2, t->n_nodes,
                                                           node_key, t))
        return -1;
    return id;
}

/* The set holding v[0..n) (sorted), made if new; -1 when out of memory. */
static int32_t set_of(tables *t, const int32_t *v, int32_t n) {
    uint32_t h = items_key(v, n) & t->stab_mask;
    for (int32_t id; (id = t->stab[h]) >= 0; h = (h + 1) & t->stab_mask)
        if (t->slen[id] == n && !memcmp(t->items + t->soff[id], v, (size_t)n * sizeof *v)) return id;
    if (t->n_items + (size_t)n > t->cap_items) {
        size_t c = t->cap_items ? t->cap_items : 256;
        while (c < t->n_items + (size_t)n) c *= 2;
        int32_t *q = realloc(t->items, c * sizeof *q);
        if (!q) return -1;
        t->items = q;
        t->cap_items = c;
    }
    int32_t id = t->n_sets, cap = t->cap_sets;
    if (id + 1 > cap) {
        int32_t c = cap;
        if (!grow32(&t->soff, id + 1, &c, 0)) return -1;
        c = cap;
        if (!grow32(&t->slen, id + 1, &c, 0)) return -1;
        c = cap;
        if (!grow32(&t->srow, id + 1, &c, -1)) return -1;
        c = cap;
        if (!grow32(&t->smask, id + 1, &c, -1)) return -1;
        t->cap_sets = c;
    }
    memcpy(t->items + t->n_items, v, (size_t)n * sizeof *v);
    t->soff[id] = (int32_t)t->n_items;
    t->slen[id] = n;
    t->srow[id] = -1;
    t->smask[id] = -1;
    t->n_items += (size_t)n;
    t->n_sets++;
    t->stab[h] = id;
    if ((uint32_t)t->n_sets * 2 > t->stab_mask && !rehash(&t->stab, &t->stab_mask, (t->stab_mask + 1) * 2, t->n_sets,
                                                          set_key, t))
        return -1;
    return id;
}

static bool tables_init(tables *t) {
    memset(t, 0, sizeof *t);
    t->ntab = malloc(256 * sizeof *t->ntab);
    t->stab = malloc(256 * sizeof *t->stab);
    if (!t->ntab || !t->stab) return false;
    for (int i = 0; i < 256; i++) t->ntab[i] = t->stab[i] = -1;
    t->ntab_mask = t->stab_mask = 255;
    return node(t, -1, 0, 0) == 0; /* node 0: the empty stack */
}

static int32_t start_dst(const ob_grammar *g, int32_t pos) {
    return g->elems[pos].type == OB_GE_CLASS ? g->elems[pos].arg : 0;
}

static bool push_work(ob_grammar_matcher *m, int32_t id) {
    if (id < 0 || !grow32(&m->work, m->n_work + 1, &m->cap_work, 0)) {
        oom(m);
        return false;
    }
    m->work[m->n_work++] = id;
    return true;
}

static bool push_out(ob_grammar_matcher *m, int32_t id) {
    if (id < 0 || !grow32(&m->out, m->n_out + 1, &m->cap_out, 0)) {
        oom(m);
        return false;
    }
    m->out[m->n_out++] = id;
    return true;
}

/* The element at pos is complete: go on at pos + 1, or return to par at its end. */
static bool after(ob_grammar_matcher *m, int32_t pos, int32_t par) {
    const ob_grammar *g = m->g;
    if (g->elems[pos + 1].type == OB_GE_END) return push_work(m, par);
    return push_work(m, node(&m->t, pos + 1, start_dst(g, pos + 1), par));
}

/* Expands the queued stacks until each top is a byte or class (or the stack is empty)
 * into m->out. */
static bool closure(ob_grammar_matcher *m) {
    const ob_grammar *g = m->g;
    tables *t = &m->t;
    int visits = 0;
    while (m->n_work > 0 && !m->failed) {
        int32_t x = m->work[--m->n_work];
        if (t->nmark[x] == m->epoch) continue;
        t->nmark[x] = m->epoch;
        if (++visits > MAX_VISIT) {
            fail(m, "the grammar is too ambiguous: over 65536 parse states at one position");
            return false;
        }
        if (x == 0) {
            push_out(m, 0);
            continue;
        }
        int32_t pos = t->npos[x], par = t->npar[x];
        ob_gelem e = g->elems[pos];
        if (e.type == OB_GE_BYTE || e.type == OB_GE_CLASS) {
            push_out(m, x);
        } else if (e.type == OB_GE_END) {
            push_work(m, par);
        } else { /* a reference: each alternative, returning after it (no frame for a tail call) */
            int32_t ret = g->elems[pos + 1].type == OB_GE_END ? par : node(t, pos + 1, start_dst(g, pos + 1), par);
            if (ret < 0) {
                oom(m);
                return false;
            }
            for (int32_t a = g->rule_alt[e.arg]; a < g->rule_alt[e.arg + 1]; a++) {
                int32_t ap = g->alt_pos[a];
                if (!push_work(m, node(t, ap, start_dst(g, ap), ret))) return false;
            }
        }
    }
    return !m->failed;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* m->out, sorted and without repeats, as a set; DEAD when empty. */
static int32_t finish_set(ob_grammar_matcher *m) {
    if (m->failed || m->n_out == 0) return DEAD;
    qsort(m->out, (size_t)m->n_out, sizeof *m->out, cmp_i32);
    int32_t k = 1;
    for (int32_t i = 1; i < m->n_out; i++) if (m->out[i] != m->out[k - 1]) m->out[k++] = m->out[i];
    if (k > MAX_SET) {
        fail(m, "the grammar is too ambiguous: over 16384 parse stacks at one position (or that many alternatives)");
        return DEAD;
    }
    int32_t s = set_of(&m->t, m->out, k);
    if (s < 0) oom(m);
    if (table_bytes(&m->t) > HARD_LIMIT) fail(m, "the grammar's parse states outgrew the matcher's memory limit");
    return m->failed ? DEAD : s;
}

/* The set after set s reads byte b. */
static int32_t compute(ob_grammar_matcher *m, int32_t s, uint8_t b) {
    const ob_grammar *g = m->g;
    tables *t = &m->t;
    if (m->epoch == INT32_MAX) { /* stamps start over */
        memset(t->nmark, 0, (size_t)t->n_nodes * sizeof *t->nmark);
        m->epoch = 0;
    }
    m->epoch++;
    m->n_work = m->n_out = 0;
    int32_t n = t->slen[s];
    for (int32_t i = 0; i < n && !m->failed; i++) {
        int32_t x = t->items[t->soff[s] + i];
        if (x == 0) continue;
        int32_t pos = t->npos[x], par = t->npar[x];
        ob_gelem e = g->elems[pos];
        if (e.type == OB_GE_BYTE) {
            if (e.arg == b) after(m, pos, par);
        } else {
            int32_t d = g->dfa[(size_t)t->ndst[x] * 256 + b];
            if (d == OB_GDFA_DONE) after(m, pos, par);
            else if (d != OB_GDFA_REJECT) push_out(m, node(t, pos, d, par)); /* inside the character */
        }
    }
    if (!closure(m)) return DEAD;
    return finish_set(m);
}

static int32_t step(ob_grammar_matcher *m, int32_t s, uint8_t b) {
    tables *t = &m->t;
    int32_t row = t->srow[s];
    if (row < 0) {
        row = t->n_rows;
        int32_t cap = t->cap_rows;
        if (row + 1 > cap) {
            int32_t c = cap ? cap * 2 : 16;
            int32_t *q = realloc(t->rows, (size_t)c * 256 * sizeof *q);
            if (!q) {
                oom(m);
                return DEAD;
            }
            t->rows = q;
            t->cap_rows = c;
        }
        for (int i = 0; i < 256; i++) t->rows[(size_t)row * 256 + (size_t)i] = UNKNOWN;
        t->n_rows++;
        t->srow[s] = row;
    }
    int32_t v = t->rows[(size_t)row * 256 + b];
    if (v != UNKNOWN) return v;
    v = compute(m, s, b);
    if (m->failed) return DEAD;
    t->rows[(size_t)row * 256 + b] = v;
    return v;
}

static int32_t walk(ob_grammar_matcher *m, int32_t s, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n && s != DEAD; i++) s = step(m, s, p[i]);
    return s;
}

static bool set_can_end(const tables *t, int32_t s) { return t->slen[s] > 0 && t->items[t->soff[s]] == 0; }

/* Rebuilds the tables from the current set alone (every cached transition is dropped). */
static bool compact(ob_grammar_matcher *m) {
    tables nt, *ot = &m->t;
    int32_t *map = malloc((size_t)ot->n_nodes * sizeof *map);
    int32_t *chain = malloc((size_t)ot->n_nodes * sizeof *chain);
    bool ok = map && chain && tables_init(&nt);
    if (ok) {
        for (int32_t i = 0; i < ot->n_nodes; i++) map[i] = -1;
        map[0] = 0;
    }
    int32_t n = ok ? ot->slen[m->cur] : 0;
    m->n_out = 0;
    for (int32_t i = 0; ok && i < n; i++) {
        /* the unmapped part of the stack, top first; then map from the bottom up */
        int32_t k = 0, x = ot->items[ot->soff[m->cur] + i];
        while (map[x] < 0) { chain[k++] = x; x = ot->npar[x]; }
        while (ok && k > 0) {
            int32_t y = chain[--k];
            map[y] = node(&nt, ot->npos[y], ot->ndst[y], map[ot->npar[y]]);
            ok = map[y] >= 0;
        }
        ok = ok && push_out(m, map[ot->items[ot->soff[m->cur] + i]]);
    }
    free(map);
    free(chain);
    if (!ok) {
        if (nt.ntab) tables_free(&nt);
        oom(m);
        return false;
    }
    tables_free(ot);
    m->t = nt;
    qsort(m->out, (size_t)m->n_out, sizeof *m->out, cmp_i32);
    m->cur = set_of(&m->t, m->out, m->n_out);
    if (m->cur < 0) oom(m);
    return !m->failed;
}

ob_grammar_matcher *ob_grammar_matcher_new(const ob_grammar *g, const ob_grammar_vocab *v, bool end_tokens) {
    ob_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->g = g;
    m->v = v;
    m->end_tokens = end_tokens;
    m->path = malloc(((v ? v->max_len : 0) + 1) * sizeof *m->path);
    m->found = malloc(MASK_CACHE_MAX * sizeof *m->found);
    if (!m->path || !m->found || !tables_init(&m->t)) goto fail;
    m->epoch = 1;
    for (int32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++) {
        int32_t ap = g->alt_pos[a];
        if (!push_work(m, node(&m->t, ap, start_dst(g, ap), 0))) goto fail;
    }
    closure(m);
    m->cur = finish_set(m);
    if (m->cur < 0 && m->nomem) goto fail;
    return m; /* failed past a limit: kept, so that the caller can say why */
fail:
    ob_grammar_matcher_free(m);
    return NULL;
}

void ob_grammar_matcher_free(ob_grammar_matcher *m) {
    if (!m) return;
    tables_free(&m->t);
    free(m->work);
    free(m->out);
    free(m->path);
    free(m->found);
    free(m);
}

const char *ob_grammar_matcher_error(const ob_grammar_matcher *m) { return m->failed ? m->err : NULL; }

bool ob_grammar_matcher_can_end(const ob_grammar_matcher *m) { return !m->failed && set_can_end(&m->t, m->cur); }

static void advance_to(ob_grammar_matcher *m, int32_t s) {
    m->cur = s;
    if (table_bytes(&m->t) > BUDGET) compact(m);
}

bool ob_grammar_matcher_accept_bytes(ob_grammar_matcher *m, const char *s, size_t n) {
    if (m->failed) return false;
    int32_t x = walk(m, m->cur, (const uint8_t *)s, n);
    if (x == DEAD) return false;
    advance_to(m, x);
    return !m->failed;
}

bool ob_grammar_matcher_allows(ob_grammar_matcher *m, int32_t tok) {
    const ob_grammar_vocab *v = m->v;
    if (m->failed || !v || tok < 0 || tok >= v->n) return false;
    if (v->kind[tok] == OB_GTOK_END) return m->end_tokens && set_can_end(&m->t, m->cur);
    if (v->kind[tok] != OB_GTOK_TEXT) return false;
    return walk(m, m->cur, v->bytes + v->off[tok], v->len[tok]) != DEAD;
}

bool ob_grammar_matcher_accept_token(ob_grammar_matcher *m, int32_t tok) {
    const ob_grammar_vocab *v = m->v;
    if (m->failed || !v || tok < 0 || tok >= v->n) return false;
    if (v->kind[tok] == OB_GTOK_END) return m->end_tokens && set_can_end(&m->t, m->cur);
    if (v->kind[tok] != OB_GTOK_TEXT) return false;
    int32_t x = walk(m, m->cur, v->bytes + v->off[tok], v->len[tok]);
    if (x == DEAD) return false;
    advance_to(m, x);
    return !m->failed;
}

/* Keeps the n text tokens in m->found as the current set's mask. */
static void keep_mask(ob_grammar_matcher *m, int n) {
    tables *t = &m->t;
    if (t->n_masks + (size_t)n + 1 > t->cap_masks) {
        size_t c = t->cap_masks ? t->cap_masks : 1024;
        while (c < t->n_masks + (size_t)n + 1) c *= 2;
        int32_t *q = realloc(t->masks, c * sizeof *q);
        if (!q) return; /* not kept: the next mask walks again */
        t->masks = q;
        t->cap_masks = c;
    }
    t->smask[m->cur] = (int32_t)t->n_masks;
    t->masks[t->n_masks++] = n;
    memcpy(t->masks + t->n_masks, m->found, (size_t)n * sizeof *m->found);
    t->n_masks += (size_t)n;
}

int ob_grammar_matcher_mask(ob_grammar_matcher *m, uint8_t *allowed) {
    const ob_grammar_vocab *v = m->v;
    if (!v) return 0;
    memset(allowed, 0, (size_t)v->n);
    if (m->failed) return 0;
    int count = 0;
    if (m->t.smask[m->cur] >= 0) { /* this set's mask was walked before */
        const int32_t *k = m->t.masks + m->t.smask[m->cur];
        for (int32_t i = 1; i <= k[0]; i++) allowed[k[i]] = 1;
        count = k[0];
    } else {
        /* tokens in byte order, a first byte at a time (a dead first byte skips them all):
         * the walk of a token starts where its common prefix with the one before left
         * off, and a prefix that died kills every token sharing it */
        int32_t *path = m->path;
        path[0] = m->cur;
        for (int b = 0; b < 256 && !m->failed; b++) {
            int32_t lo = v->first[b], hi = v->first[b + 1];
            if (lo == hi || (path[1] = step(m, m->cur, (uint8_t)b)) == DEAD) continue;
            uint32_t live = 1; /* path[0..live]: the sets after the previous token's first bytes */
            for (int32_t i = lo; i < hi && !m->failed; i++) {
                int32_t tok = v->order[i];
                uint32_t l = i == lo ? 1 : v->lcp[i], len = v->len[tok];
                if (l > live) continue; /* shares the byte that killed the previous one */
                const uint8_t *bytes = v->bytes + v->off[tok];
                uint32_t k = l;
                int32_t s = path[k];
                while (k < len) {
                    s = step(m, s, bytes[k]);
                    if (s == DEAD) break;
                    path[++k] = s;
                }
                live = k;
                if (k == len) {
                    allowed[tok] = 1;
                    if (count < MASK_CACHE_MAX) m->found[count] = tok;
                    count++;
                }
            }
        }
        if (m->failed) {
            memset(allowed, 0, (size_t)v->n);
            return 0;
        }
        if (count <= MASK_CACHE_MAX) keep_mask(m, count);
    }
    if (m->end_tokens && set_can_end(&m->t, m->cur))
        for (int32_t i = 0; i < v->n_ends; i++) allowed[v->ends[i]] = 1;
    return count + (m->end_tokens && set_can_end(&m->t, m->cur) ? v->n_ends : 0);
}
