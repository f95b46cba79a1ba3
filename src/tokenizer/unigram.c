/* Unigram model (SentencePiece "unigram", HF tokenizers' Unigram; GGUF tokenizer.ggml.model
 * "t5"): the segmentation of a word into vocabulary pieces whose scores (log-probabilities)
 * sum highest, found by Viterbi over a byte trie of the pieces.
 *
 * Follows HF tokenizers exactly, since that is what the models were evaluated with:
 *  - a character no piece of exactly its length covers gets an "unknown" edge scored
 *    min(score) - 10, so unknown text is kept as short as possible;
 *  - ties keep the path found first (the edge from the leftmost start);
 *  - runs of adjacent unknown pieces are fused into one string, which becomes unk_id (or,
 *    with byte fallback, its <0xXX> byte tokens when every one of its bytes has one);
 *  - normalizers run per stretch between added tokens, then Metaspace (" " -> "▁", a
 *    "▁" prefix unless the stretch already starts with one, and a split before every "▁").
 *
 * The SentencePiece precompiled charsmap (a serialized double-array trie) is not parsed.
 * Its stand-in is SentencePiece's default rule, nmt_nfkc, which (measured code point by code
 * point against HF's Precompiled on a charsmap sentencepiece 0.2 builds) is NFKC except:
 * C0/C1 controls other than whitespace are removed; TAB LF FF CR, CRLF, U+061C U+1680
 * U+200B U+200C U+200E U+200F U+2028 U+2029 U+2581 U+FEFF U+FFFD become one space; and
 * U+FF5E (fullwidth tilde) is kept. A model trained with another rule (nfkc_cf, identity
 * or a custom map) will differ. */
#include <stdlib.h>
#include <stdint.h>
#include <utf8proc.h>
#include "tokenizer/tok_internal.h"

#define UGM_UNK_PENALTY 10.0
#define UGM_NO_UNK (-2) /* edge id of an unknown character when the vocab has no unk */

static const char lowbar[] = "\xE2\x96\x81"; /* U+2581, 3 bytes */

/* ---- construction ------------------------------------------------------------------ */

static int32_t trie_new_node(ob_tokenizer *t, uint8_t byte, int32_t sibling) {
    if (t->n_ugm_trie == t->cap_ugm_trie) {
        size_t cap = (size_t)t->cap_ugm_trie * sizeof(ob_tok_trie_node);
        void *p = t->ugm_trie;
        if (t->n_ugm_trie >= INT32_MAX / 2 ||
            !ob_tok_reserve(&p, &cap, (size_t)(t->n_ugm_trie + 1) * sizeof(ob_tok_trie_node))) return -1;
        t->ugm_trie = p;
        t->cap_ugm_trie = (int32_t)(cap / sizeof(ob_tok_trie_node));
    }
    int32_t n = t->n_ugm_trie++;
    t->ugm_trie[n] = (ob_tok_trie_node){ -1, sibling, -1, byte };
    return n;
}

static bool trie_insert(ob_tokenizer *t, const char *s, size_t len, int32_t id) {
    const uint8_t *p = (const uint8_t *)s;
    int32_t node = t->ugm_root[p[0]];
    if (node < 0) {
        if ((node = trie_new_node(t, p[0], -1)) < 0) return false;
        t->ugm_root[p[0]] = node;
    }
    for (size_t i = 1; i < len; i++) {
        int32_t ch = t->ugm_trie[node].child;
        while (ch >= 0 && t->ugm_trie[ch].byte != p[i]) ch = t->ugm_trie[ch].sibling;
        if (ch < 0) {
            if ((ch = trie_new_node(t, p[i], t->ugm_trie[node].child)) < 0) return false;
            t->ugm_trie[node].child = ch;
        }
        node = ch;
    }
    t->ugm_trie[node].added = id; /* a duplicate piece: the last id wins, as in HF */
    return true;
}

ob_status ob_tok_unigram_init(ob_tokenizer *t, const bool *in_lattice, const bool *min_from, char *err, size_t err_len) {
    if (!t->ugm_score) return ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer: unigram model without scores");
    for (int i = 0; i < 256; i++) t->ugm_root[i] = -1;
    double mn = 0;
    bool any = false;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (min_from && !min_from[i]) continue;
        if (!any || t->ugm_score[i] < mn) mn = t->ugm_score[i];
        any = true;
    }
    t->ugm_unk_score = mn - UGM_UNK_PENALTY;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if ((in_lattice && !in_lattice[i]) || t->tok_len[i] == 0) continue;
        if (!trie_insert(t, t->tok[i], t->tok_len[i], i)) return ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory");
    }
    return OB_OK;
}

ob_status ob_tok_unigram_add_norm(ob_tokenizer *t, int step, char *err, size_t err_len) {
    if (t->n_ugm_norm >= OB_TOK_UGM_MAX_NORM)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "tokenizer: more than %d normalizer steps", OB_TOK_UGM_MAX_NORM);
    t->ugm_norm[t->n_ugm_norm++] = (uint8_t)step;
    return OB_OK;
}

void ob_tok_unigram_free(ob_tokenizer *t) {
    free(t->ugm_score); free(t->ugm_trie);
    t->ugm_score = NULL; t->ugm_trie = NULL;
}

/* ---- normalization ----------------------------------------------------------------- */

/* The scratch buffer (buf or buf2) that does not hold cur, with room for need bytes. */
static char *other_buf(ob_tok_scratch *s, const char *cur, size_t need) {
    uintptr_t c = (uintptr_t)cur, b = (uintptr_t)s->buf;
    bool in_buf = s->buf && c >= b && c < b + s->cap;
    char **p = in_buf ? &s->buf2 : &s->buf;
    size_t *cap = in_buf ? &s->cap2 : &s->cap;
    if (!ob_tok_reserve((void **)p, cap, need + 1)) { s->oom = true; return NULL; }
    return *p;
}

/* Unicode White_Space (Rust's char::is_whitespace, which HF's Strip uses). */
static bool is_uws(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static void strip_ws(const char **text, size_t *len, bool left, bool right) {
    const unsigned char *p = (const unsigned char *)*text;
    size_t a = 0, b = *len;
    while (left && a < b) {
        uint32_t cp; int l = ob_tok_utf8_decode(p + a, &cp);
        if (!is_uws(cp)) break;
        a += (size_t)l;
    }
    while (right && b > a) {
        size_t k = b - 1;
        while (k > a && (p[k] & 0xC0) == 0x80) k--;
        uint32_t cp; ob_tok_utf8_decode(p + k, &cp);
        if (!is_uws(cp)) break;
        b = k;
    }
    *text += a; *len = b - a;
}

static bool norm_unicode(ob_tok_scratch *s, const char **text, size_t *len, bool compat) {
    const unsigned char *p = (const unsigned char *)*text;
    bool ascii = true;
    for (size_t i = 0; i < *len; i++) if (p[i] >= 0x80) { ascii = false; break; }
    if (ascii) return true; /* ASCII is NFC- and NFKC-stable */
    utf8proc_uint8_t *dst = NULL;
    utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE | (compat ? UTF8PROC_COMPAT : 0);
    utf8proc_ssize_t r = utf8proc_map(p, (utf8proc_ssize_t)*len, &dst, opt);
    if (r < 0) return true; /* cannot happen on valid UTF-8; keep the text */
    char *o = other_buf(s, *text, (size_t)r);
    if (!o) { free(dst); return false; }
    memcpy(o, dst, (size_t)r);
    free(dst);
    *text = o; *len = (size_t)r;
    return true;
}

/* nmt_nfkc's changes before NFKC: -1 drop, 1 space, 2 keep out of NFKC, 0 none. */
static int nmt_class(uint32_t c) {
    if (c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D) return 1;
    if ((c >= 0x01 && c <= 0x1F) || c == 0x7F || c == 0x8F || c == 0x9F) return -1;
    if (c == 0x061C || c == 0x1680 || c == 0x200B || c == 0x200C || c == 0x200E || c == 0x200F || c == 0x2028 ||
        c == 0x2029 || c == 0x2581 || c == 0xFEFF || c == 0xFFFD) return 1;
    return c == 0xFF5E ? 2 : 0;
}

/* NFKC of p[0..n) appended to the growable o (cap bytes) at *k; false on OOM. */
static bool nfkc_append(const char *p, size_t n, char **o, size_t *cap, size_t *k) {
    if (n == 0) return true;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)n, &dst,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    const char *src = r < 0 ? p : (const char *)dst;
    size_t len = r < 0 ? n : (size_t)r;
    if (!ob_tok_reserve((void **)o, cap, *k + len + 1)) { free(dst); return false; }
    memcpy(*o + *k, src, len);
    *k += len;
    free(dst);
    return true;
}

static bool norm_nmt(ob_tok_scratch *s, const char **text, size_t *len) {
    const unsigned char *p = (const unsigned char *)*text;
    size_t n = *len;
    bool plain = true;
    for (size_t i = 0; i < n && plain; i++) plain = p[i] >= 0x20 && p[i] < 0x7F;
    if (plain) return true;
    /* Pass 1: the nmt rules, into a scratch buffer. Pass 2: NFKC per stretch between
     * kept U+FF5E (a starter that composes with nothing, so splitting there is safe). */
    char *m = other_buf(s, *text, n);
    if (!m) return false;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp; int l = ob_tok_utf8_decode(p + i, &cp);
        int c = nmt_class(cp);
        if (cp == 0x0D && i + 1 < n && p[i + 1] == 0x0A) l = 2;
        if (c == 1) m[k++] = ' ';
        else if (c == 0 || c == 2) { memcpy(m + k, p + i, (size_t)l); k += (size_t)l; }
        i += (size_t)l;
    }
    char *o = NULL;
    size_t cap = 0, ko = 0, a = 0;
    bool ok = true;
    for (size_t i = 0; i + 3 <= k && ok; i++) {
        if (memcmp(m + i, "\xEF\xBD\x9E", 3)) continue;
        ok = nfkc_append(m + a, i - a, &o, &cap, &ko) && ob_tok_reserve((void **)&o, &cap, ko + 4);
        if (ok) { memcpy(o + ko, m + i, 3); ko += 3; }
        a = i + 3; i += 2;
    }
    ok = ok && nfkc_append(m + a, k - a, &o, &cap, &ko);
    char *d = ok ? other_buf(s, m, ko) : NULL;
    if (d) memcpy(d, o ? o : "", ko);
    free(o);
    if (!d) { s->oom = true; return false; }
    *text = d; *len = ko;
    return true;
}

/* Space rewrites on U+0020 only. mode: runs of 2+ -> rep; every space -> rep; or
 * SentencePiece's remove_extra_whitespaces (trim, then runs -> one space). */
static bool norm_spaces(ob_tok_scratch *s, const char **text, size_t *len, int mode) {
    const char *p = *text;
    size_t n = *len;
    if (!memchr(p, ' ', n)) return true;
    if (mode == OB_TOK_UGM_SPM_WS) {
        while (n > 0 && p[0] == ' ') { p++; n--; }
        while (n > 0 && p[n - 1] == ' ') n--;
    }
    const char *rep = mode == OB_TOK_UGM_RUNS_TO_SPACE || mode == OB_TOK_UGM_SPM_WS ? " " : lowbar;
    size_t rl = strlen(rep);
    char *o = other_buf(s, *text, n * 3);
    if (!o) return false;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (p[i] != ' ') { o[k++] = p[i++]; continue; }
        size_t j = i;
        while (j < n && p[j] == ' ') j++;
        if (mode == OB_TOK_UGM_SPACE_TO_LOWBAR) {
            for (size_t r = i; r < j; r++) { memcpy(o + k, lowbar, 3); k += 3; }
        } else if (j - i >= 2 || mode == OB_TOK_UGM_SPM_WS) {
            memcpy(o + k, rep, rl); k += rl;
        } else o[k++] = ' ';
        i = j;
    }
    *text = o; *len = k;
    return true;
}

/* ---- Viterbi ----------------------------------------------------------------------- */

typedef struct node { double score; int32_t start, id; } node;
typedef struct seg { int32_t start, end, id; } seg;

static bool is_unk(const ob_tokenizer *t, int32_t id) { return id == UGM_NO_UNK || (id >= 0 && id == t->unk_id); }

/* Emits a fused run of unknown text w[a..b): the piece if it is one, else its bytes (byte
 * fallback, when every byte has a token), else unk_id (dropped if there is none). */
static void emit_unknown(const ob_tokenizer *t, const char *w, size_t a, size_t b, ob_tok_ids *out) {
    int32_t id = ob_tok_find(t, w + a, b - a);
    if (id >= 0) { ob_tok_ids_push(out, id); return; }
    if (t->byte_fallback) {
        bool all = true;
        for (size_t i = a; i < b && all; i++) all = t->byte_id[(unsigned char)w[i]] >= 0;
        if (all) {
            for (size_t i = a; i < b; i++) ob_tok_ids_push(out, t->byte_id[(unsigned char)w[i]]);
            return;
        }
    }
    if (t->unk_id >= 0) ob_tok_ids_push(out, t->unk_id);
}

static void viterbi(const ob_tokenizer *t, ob_tok_scratch *s, const char *w, size_t n, ob_tok_ids *out) {
    if (n == 0) return;
    if (n > (size_t)INT32_MAX - 1) { s->oom = true; return; }
    size_t nb = s->sym_cap, sb = s->heap_cap;
    if (!ob_tok_reserve(&s->sym, &nb, (n + 1) * sizeof(node)) || !ob_tok_reserve(&s->heap, &sb, n * sizeof(seg))) {
        s->oom = true; return;
    }
    s->sym_cap = nb; s->heap_cap = sb;
    node *nd = s->sym;
    seg *sg = s->heap;
    const uint8_t *p = (const uint8_t *)w;
    nd[0] = (node){ 0.0, -1, -1 };
    for (size_t i = 1; i <= n; i++) nd[i] = (node){ 0.0, -1, -1 };
    int32_t unk = t->unk_id >= 0 ? t->unk_id : UGM_NO_UNK;
    for (size_t pos = 0; pos < n;) {
        double base = nd[pos].score;
        int ml = ob_tok_utf8_len(p + pos, n - pos);
        if (!ml) ml = 1;
        bool single = false;
        int32_t tn = t->ugm_root[p[pos]];
        for (size_t k = pos; tn >= 0;) {
            int32_t id = t->ugm_trie[tn].added;
            size_t end = k + 1;
            if (id >= 0) {
                double c = base + t->ugm_score[id];
                if (nd[end].start < 0 || c > nd[end].score) nd[end] = (node){ c, (int32_t)pos, id };
                if (end - pos == (size_t)ml) single = true;
            }
            if (++k >= n) break;
            int32_t ch = t->ugm_trie[tn].child;
            while (ch >= 0 && t->ugm_trie[ch].byte != p[k]) ch = t->ugm_trie[ch].sibling;
            tn = ch;
        }
        size_t end = pos + (size_t)ml;
        if (!single) {
            double c = base + t->ugm_unk_score;
            if (nd[end].start < 0 || c > nd[end].score) nd[end] = (node){ c, (int32_t)pos, unk };
        }
        pos = end;
    }
    size_t ns = 0;
    for (size_t e = n; e > 0;) {
        int32_t st = nd[e].start;
        if (st < 0) { s->oom = true; return; } /* unreachable: every character has an edge */
        sg[ns++] = (seg){ st, (int32_t)e, nd[e].id };
        e = (size_t)st;
    }
    for (size_t i = ns; i > 0;) {
        seg g = sg[--i];
        if (!is_unk(t, g.id)) { ob_tok_ids_push(out, g.id); continue; }
        int32_t end = g.end;
        while (i > 0 && is_unk(t, sg[i - 1].id)) end = sg[--i].end;
        emit_unknown(t, w, (size_t)g.start, (size_t)end, out);
    }
}

/* ---- driver ------------------------------------------------------------------------ */

void ob_tok_unigram_segment(const ob_tokenizer *t, ob_tok_scratch *s, const char *text, size_t len, bool first,
                            ob_tok_ids *out) {
    for (int i = 0; i < t->n_ugm_norm && len > 0; i++) {
        bool ok = true;
        switch (t->ugm_norm[i]) {
        case OB_TOK_UGM_NFC: ok = norm_unicode(s, &text, &len, false); break;
        case OB_TOK_UGM_NFKC: ok = norm_unicode(s, &text, &len, true); break;
        case OB_TOK_UGM_NMT_NFKC: ok = norm_nmt(s, &text, &len); break;
        case OB_TOK_UGM_STRIP_LEFT: strip_ws(&text, &len, true, false); break;
        case OB_TOK_UGM_STRIP_RIGHT: strip_ws(&text, &len, false, true); break;
        default: ok = norm_spaces(s, &text, &len, t->ugm_norm[i]); break;
        }
        if (!ok) return;
    }
    if (len == 0) return;
    if (t->ugm_metaspace) {
        /* HF replaces the spaces first, so a leading space counts as a leading "▁". */
        bool pre = (t->ugm_prepend == 2 || (t->ugm_prepend == 1 && first)) && text[0] != ' ' &&
                   !(len >= 3 && !memcmp(text, lowbar, 3));
        size_t spaces = 0;
        for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
        if (pre || spaces) {
            char *o = other_buf(s, text, len + 2 * spaces + 3);
            if (!o) return;
            size_t k = 0;
            if (pre) { memcpy(o, lowbar, 3); k = 3; }
            for (size_t i = 0; i < len; i++) {
                if (text[i] == ' ') { memcpy(o + k, lowbar, 3); k += 3; }
                else o[k++] = text[i];
            }
            text = o; len = k;
        }
    }
    if (!(t->ugm_metaspace && t->ugm_split)) { viterbi(t, s, text, len, out); return; }
    /* Split before every "▁" (HF's MergedWithNext): each word starts with its "▁". */
    size_t a = 0;
    for (size_t i = 1; i + 3 <= len; i++) {
        if (memcmp(text + i, lowbar, 3)) continue;
        viterbi(t, s, text + a, i - a, out);
        a = i;
        i += 2;
    }
    viterbi(t, s, text + a, len - a, out);
}
