/* WordPiece (BERT): BertNormalizer (clean text, pad CJK ideographs with spaces, strip
 * accents via NFD minus Mn, lower-case), BertPreTokenizer (split on whitespace, isolate
 * punctuation), then greedy longest-match-first with the "##" continuation prefix.
 * Character classes come from utf8proc's Unicode data. */
#include <stdlib.h>
#include <utf8proc.h>
#include "tokenizer/tok_internal.h"

/* Unicode White_Space (the set Rust's char::is_whitespace uses). */
static bool is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

/* Cc, Cf, Cs, Co; not Cn: HF's category tables leave unassigned code points in. */
static bool is_control(uint32_t c) {
    if (c == '\t' || c == '\n' || c == '\r') return false;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CS ||
           k == UTF8PROC_CATEGORY_CO;
}

static bool is_punct(uint32_t c) {
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

/* The CJK ideograph blocks BERT pads with spaces (its definition, not Unicode's). */
static bool is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

typedef struct cpbuf { uint32_t *v; size_t n, cap; bool oom; } cpbuf;
static void cp_push(cpbuf *b, uint32_t c) {
    if (b->n == b->cap) {
        size_t bytes = b->cap * sizeof(uint32_t);
        void *p = b->v;
        if (!ob_tok_reserve(&p, &bytes, (b->n + 1) * sizeof(uint32_t))) { b->oom = true; return; }
        b->v = p; b->cap = bytes / sizeof(uint32_t);
    }
    b->v[b->n++] = c;
}

static void normalize_char(const ob_tokenizer *t, uint32_t c, cpbuf *o) {
    if (t->bert_clean) {
        if (c == 0 || c == 0xFFFD || is_control(c)) return;
        if (is_white_space(c)) { cp_push(o, ' '); return; }
    }
    /* CJK padding comes before NFD: a compatibility ideograph is padded, then decomposed. */
    bool cjk = t->bert_chinese && is_cjk(c);
    if (cjk) cp_push(o, ' ');
    utf8proc_int32_t d[32];
    utf8proc_ssize_t nd = 1;
    d[0] = (utf8proc_int32_t)c;
    if (t->bert_strip_accents) {
        int last = 0;
        nd = utf8proc_decompose_char((utf8proc_int32_t)c, d, 32, UTF8PROC_DECOMPOSE, &last);
        if (nd < 0 || nd > 32) { nd = 1; d[0] = (utf8proc_int32_t)c; }
    }
    for (utf8proc_ssize_t i = 0; i < nd; i++) {
        uint32_t x = (uint32_t)d[i];
        if (t->bert_strip_accents && utf8proc_category((utf8proc_int32_t)x) == UTF8PROC_CATEGORY_MN) continue;
        if (t->bert_lower) {
            if (x == 0x130) { cp_push(o, 'i'); cp_push(o, 0x307); continue; } /* full mapping of İ */
            x = (uint32_t)utf8proc_tolower((utf8proc_int32_t)x);
        }
        cp_push(o, x);
    }
    if (cjk) cp_push(o, ' ');
}

/* Greedy longest-match-first over the characters w[0..n). */
static void wordpiece_word(const ob_tokenizer *t, ob_tok_scratch *s, const uint32_t *w, size_t n, ob_tok_ids *out) {
    if (n == 0) return;
    if (n > (size_t)t->wp_max_chars) { if (t->unk_id >= 0) ob_tok_ids_push(out, t->unk_id); return; }
    size_t pl = strlen(t->wp_prefix);
    /* bytes of the word, with the byte offset of each character */
    size_t need = n * 4 + pl + 1;
    if (!ob_tok_reserve((void **)&s->buf, &s->cap, need * 2 + (n + 1) * sizeof(size_t) + 16)) { s->oom = true; return; }
    char *bytes = s->buf, *cand = s->buf + need;
    size_t *off = (size_t *)(void *)(((uintptr_t)(s->buf + 2 * need) + 15) & ~(uintptr_t)15);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) { off[i] = k; k += (size_t)ob_tok_utf8_encode(w[i], bytes + k); }
    off[n] = k;
    size_t mark = out->n;
    size_t start = 0;
    while (start < n) {
        int32_t found = -1;
        size_t end = n;
        for (; end > start; end--) {
            size_t cl = 0;
            if (start > 0) { memcpy(cand, t->wp_prefix, pl); cl = pl; }
            memcpy(cand + cl, bytes + off[start], off[end] - off[start]);
            cl += off[end] - off[start];
            found = ob_tok_find(t, cand, cl);
            if (found >= 0) break;
        }
        if (found < 0) { out->n = mark; if (t->unk_id >= 0) ob_tok_ids_push(out, t->unk_id); return; }
        ob_tok_ids_push(out, found);
        start = end;
    }
}

void ob_tok_wordpiece_segment(const ob_tokenizer *t, ob_tok_scratch *s, const char *text, size_t len,
                              ob_tok_ids *out) {
    cpbuf cps = { 0 };
    const unsigned char *p = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        uint32_t c;
        i += (size_t)ob_tok_utf8_decode(p + i, &c);
        if (t->norm == OB_TOK_NORM_BERT) normalize_char(t, c, &cps);
        else cp_push(&cps, c);
    }
    if (cps.oom) { s->oom = true; free(cps.v); return; }
    size_t ws = 0;
    for (size_t i = 0; i <= cps.n; i++) {
        uint32_t c = i < cps.n ? cps.v[i] : ' ';
        bool white = is_white_space(c);
        bool punct = !white && t->bert_pretok && is_punct(c);
        if (!white && !punct && t->bert_pretok) continue;
        if (!t->bert_pretok && !white) continue;
        wordpiece_word(t, s, cps.v + ws, i - ws, out);
        if (punct) wordpiece_word(t, s, cps.v + i, 1, out);
        ws = i + 1;
    }
    free(cps.v);
}
