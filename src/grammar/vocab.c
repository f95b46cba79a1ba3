/* The vocabulary as the mask walk wants it: every token's bytes in one buffer, the text
 * tokens sorted by bytes, and each one's common prefix with the token before it (a trie
 * laid out as an array). Built once per model. */
#include "grammar/grammar_int.h"

#include <stdlib.h>
#include <string.h>

static int cmp_tok(const void *a, const void *b, void *ctx) {
    const ob_grammar_vocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->len[x], ly = v->len[y], l = lx < ly ? lx : ly;
    int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], l);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return (x > y) - (x < y);
}

ob_grammar_vocab *ob_grammar_vocab_new(int n, const char *const *bytes, const uint32_t *lens, const uint8_t *kind) {
    if (n <= 0) return NULL;
    ob_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->n = n;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += lens[i];
    v->kind = malloc((size_t)n);
    v->off = malloc((size_t)n * sizeof *v->off);
    v->len = malloc((size_t)n * sizeof *v->len);
    v->bytes = malloc(total ? total : 1);
    v->order = malloc((size_t)n * sizeof *v->order);
    v->lcp = malloc((size_t)n * sizeof *v->lcp);
    v->ends = malloc((size_t)n * sizeof *v->ends);
    if (!v->kind || !v->off || !v->len || !v->bytes || !v->order || !v->lcp || !v->ends || total > UINT32_MAX) {
        ob_grammar_vocab_free(v);
        return NULL;
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        v->off[i] = (uint32_t)at;
        v->len[i] = lens[i];
        if (lens[i]) memcpy(v->bytes + at, bytes[i], lens[i]);
        at += lens[i];
        v->kind[i] = kind[i] == OB_GTOK_TEXT && lens[i] == 0 ? OB_GTOK_NEVER : kind[i];
        if (v->kind[i] == OB_GTOK_END) v->ends[v->n_ends++] = i;
        if (v->kind[i] == OB_GTOK_TEXT) {
            v->order[v->n_text++] = i;
            if (lens[i] > v->max_len) v->max_len = lens[i];
        }
    }
    qsort_r(v->order, (size_t)v->n_text, sizeof *v->order, cmp_tok, v);
    for (int32_t i = 0; i < v->n_text; i++) {
        uint32_t l = 0;
        if (i > 0) {
            int32_t a = v->order[i - 1], b = v->order[i];
            uint32_t m = v->len[a] < v->len[b] ? v->len[a] : v->len[b];
            while (l < m && v->bytes[v->off[a] + l] == v->bytes[v->off[b] + l]) l++;
        }
        v->lcp[i] = l;
    }
    int32_t i = 0;
    for (int b = 0; b < 256; b++) {
        v->first[b] = i;
        while (i < v->n_text && v->bytes[v->off[v->order[i]]] == b) i++;
    }
    v->first[256] = v->n_text;
    return v;
}

void ob_grammar_vocab_free(ob_grammar_vocab *v) {
    if (!v) return;
    free(v->kind);
    free(v->off);
    free(v->len);
    free(v->bytes);
    free(v->order);
    free(v->lcp);
    free(v->ends);
    free(v);
}

int ob_grammar_vocab_size(const ob_grammar_vocab *v) { return v ? v->n : 0; }
