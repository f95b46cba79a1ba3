/* BPE model: symbols in a linked list, candidate merges in a binary heap keyed by
 * (rank, position), so a word of n symbols costs O(n log n) whatever its length (a whole
 * SentencePiece text is one "word"). Ranks come from a merges list, or, for SentencePiece
 * vocabularies without merges, from the score of the merged token. */
#include <stdlib.h>
#include "tokenizer/tok_internal.h"

/* GPT-2 byte-level map: printable Latin-1 bytes stand for themselves, the other 68 bytes
 * take code points 256.. in byte order. */
uint32_t ob_tok_byte_to_cp(uint8_t b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
    if (b <= 32) return 256u + b;
    if (b <= 160) return 256u + 33u + (uint32_t)(b - 127);
    return 256u + 67u; /* 173 */
}

int ob_tok_cp_to_byte(uint32_t cp) {
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return (int)cp;
    if (cp >= 256 && cp < 256 + 33) return (int)(cp - 256);
    if (cp >= 256 + 33 && cp < 256 + 67) return (int)(cp - 256 - 33 + 127);
    if (cp == 256 + 67) return 173;
    return -1;
}

typedef struct sym { int32_t id, prev, next; } sym;
typedef struct cand { double key; int32_t left, right, a, b, res; } cand;

static bool cand_less(const cand *x, const cand *y) {
    return x->key < y->key || (x->key == y->key && x->left < y->left);
}

static void heap_push(cand *h, size_t *n, cand c) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p])) break;
        h[i] = h[p]; i = p;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, size_t *n) {
    cand top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &last;
        if (l < *n && cand_less(&h[l], best)) { m = l; best = &h[l]; }
        if (r < *n && cand_less(&h[r], best)) { m = r; }
        if (m == i) break;
        h[i] = h[m]; i = m;
    }
    if (*n > 0) h[i] = last;
    return top;
}

/* Merge (a, b): rank key and result id; false if no such merge. */
static bool find_pair(const ob_tokenizer *t, int32_t a, int32_t b, double *key, int32_t *res) {
    if (a < 0 || b < 0) return false;
    if (t->merge_mode == OB_TOK_MERGE_RANK) {
        if (!t->mh) return false;
        uint64_t k = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
        uint64_t x = k;
        x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
        uint32_t h = (uint32_t)x & t->mh_mask;
        while (t->mh[h].key) {
            if (t->mh[h].key == k) { *key = t->mh[h].rank; *res = t->mh[h].res; return true; }
            h = (h + 1) & t->mh_mask;
        }
        return false;
    }
    size_t la = t->tok_len[a], lb = t->tok_len[b];
    char stack[512];
    char *m = la + lb <= sizeof(stack) ? stack : malloc(la + lb);
    if (!m) return false;
    memcpy(m, t->tok[a], la); memcpy(m + la, t->tok[b], lb);
    int32_t r = ob_tok_find(t, m, la + lb);
    if (m != stack) free(m);
    if (r < 0 || t->is_added[r]) return false;
    *key = -(double)t->score[r]; *res = r;
    return true;
}

static void push_pair(const ob_tokenizer *t, cand *h, size_t *nh, const sym *s, int32_t left) {
    int32_t right = s[left].next;
    if (right < 0) return;
    cand c = { 0, left, right, s[left].id, s[right].id, -1 };
    if (find_pair(t, c.a, c.b, &c.key, &c.res)) heap_push(h, nh, c);
}

static void emit_unk(const ob_tokenizer *t, ob_tok_ids *out, bool *last_unk) {
    if (t->unk_id < 0) return; /* no unknown token: the character is dropped */
    if (t->fuse_unk && *last_unk) return;
    ob_tok_ids_push(out, t->unk_id);
    *last_unk = true;
}

void ob_tok_bpe_word(const ob_tokenizer *t, ob_tok_scratch *s, const char *w, size_t len,
                     ob_tok_ids *out) {
    if (len == 0) return;
    const unsigned char *p = (const unsigned char *)w;
    if (t->byte_level && t->ignore_merges) {
        if (!ob_tok_reserve((void **)&s->buf, &s->cap, len * 2 + 1)) { s->oom = true; return; }
        size_t k = 0;
        for (size_t i = 0; i < len; i++) k += (size_t)ob_tok_utf8_encode(ob_tok_byte_to_cp(p[i]), s->buf + k);
        int32_t id = ob_tok_find(t, s->buf, k);
        if (id >= 0) { ob_tok_ids_push(out, id); return; }
    } else if (t->ignore_merges) {
        int32_t id = ob_tok_find(t, w, len);
        if (id >= 0) { ob_tok_ids_push(out, id); return; }
    }
    /* One symbol per byte at most (byte fallback), so len bounds the count. */
    size_t symb = s->sym_cap, heapb = s->heap_cap;
    if (!ob_tok_reserve(&s->sym, &symb, len * sizeof(sym)) ||
        !ob_tok_reserve(&s->heap, &heapb, (len * 3 + 4) * sizeof(cand))) { s->oom = true; return; }
    s->sym_cap = symb; s->heap_cap = heapb;
    sym *sy = s->sym;
    cand *h = s->heap;
    int32_t n = 0;
    /* Symbols of -1 stand for unknown characters: they never merge and become <unk>. */
    for (size_t i = 0; i < len;) {
        if (t->byte_level) { sy[n] = (sym){ t->byte_id[p[i]], n - 1, n + 1 }; n++; i++; continue; }
        int l = ob_tok_utf8_len(p + i, len - i);
        if (!l) l = 1;
        int32_t id = ob_tok_find(t, w + i, (size_t)l);
        if (id >= 0) { sy[n] = (sym){ id, n - 1, n + 1 }; n++; }
        else if (t->byte_fallback && t->byte_id[p[i]] >= 0) {
            for (int k = 0; k < l; k++) { sy[n] = (sym){ t->byte_id[p[i + k]], n - 1, n + 1 }; n++; }
        } else { sy[n] = (sym){ -1, n - 1, n + 1 }; n++; }
        i += (size_t)l;
    }
    sy[n - 1].next = -1;
    size_t nh = 0;
    for (int32_t i = 0; i + 1 < n; i++) push_pair(t, h, &nh, sy, i);
    while (nh > 0) {
        cand c = heap_pop(h, &nh);
        if (sy[c.left].id != c.a || sy[c.left].next != c.right || sy[c.right].id != c.b) continue;
        /* merge right into left */
        sy[c.left].id = c.res;
        sy[c.left].next = sy[c.right].next;
        if (sy[c.right].next >= 0) sy[sy[c.right].next].prev = c.left;
        sy[c.right].id = -2; /* dead */
        sy[c.right].next = -1;
        if (sy[c.left].prev >= 0) push_pair(t, h, &nh, sy, sy[c.left].prev);
        push_pair(t, h, &nh, sy, c.left);
    }
    bool last_unk = false;
    for (int32_t i = 0; i >= 0; i = sy[i].next) {
        if (sy[i].id >= 0) { ob_tok_ids_push(out, sy[i].id); last_unk = false; }
        else emit_unk(t, out, &last_unk);
    }
}
