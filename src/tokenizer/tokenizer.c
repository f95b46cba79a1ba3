/* Tokenizer core: vocabulary and merges hashes, added-token matching, the encode driver
 * (sanitize -> added tokens -> normalize -> pre-tokenize -> model), decode and the
 * streaming detokenizer. Model-specific work lives in bpe.c / wordpiece.c / pretok.c.
 *
 * Invalid UTF-8 input: each maximal invalid subpart becomes one U+FFFD (the rule of
 * Python's bytes.decode(errors="replace"), which is what a str handed to HF tokenizers
 * would contain). */
#include <stdlib.h>
#include <stdio.h>
#include <utf8proc.h>
#include "tokenizer/tok_internal.h"

/* ---- small utilities ------------------------------------------------------------- */

bool ob_tok_reserve(void **p, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) { if (nc > SIZE_MAX / 2) return false; nc *= 2; }
    void *q = realloc(*p, nc);
    if (!q) return false;
    *p = q; *cap = nc;
    return true;
}

void ob_tok_ids_push(ob_tok_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        size_t bytes = ids->cap * sizeof(int32_t);
        if (!ob_tok_reserve((void **)&ids->v, &bytes, (ids->n + 1) * sizeof(int32_t))) { ids->oom = true; return; }
        ids->cap = bytes / sizeof(int32_t);
    }
    ids->v[ids->n++] = id;
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a, then a final mix for the low bits */
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ull; }
    h ^= h >> 29; h *= 0xbf58476d1ce4e5b9ull; h ^= h >> 32;
    return h;
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return x;
}

static uint32_t pow2_at_least(size_t n) {
    uint32_t c = 16;
    while (c < n && c < (1u << 30)) c <<= 1;
    return c;
}

/* ---- UTF-8 ------------------------------------------------------------------------ */

int ob_tok_utf8_len(const unsigned char *p, size_t n) {
    if (n == 0) return 0;
    unsigned char c = p[0];
    if (c < 0x80) return 1;
    int len; unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) { len = 3; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) { len = 3; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) { len = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) { len = 4; hi = 0x8F; }
    else return 0;
    if (n < (size_t)len) return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (int i = 2; i < len; i++) if ((p[i] & 0xC0) != 0x80) return 0;
    return len;
}

/* Bytes of the maximal invalid subpart at p: the lead byte plus the continuation bytes
 * that could still have completed it (Unicode's "maximal subpart" rule). */
static int utf8_invalid_len(const unsigned char *p, size_t n) {
    unsigned char c = p[0];
    int len; unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) { len = 3; lo = 0xA0; }
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) len = 3;
    else if (c == 0xED) { len = 3; hi = 0x9F; }
    else if (c == 0xF0) { len = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) { len = 4; hi = 0x8F; }
    else return 1;
    int k = 1;
    if (k < len && (size_t)k < n && p[k] >= lo && p[k] <= hi) {
        k++;
        while (k < len && (size_t)k < n && (p[k] & 0xC0) == 0x80) k++;
    }
    return k;
}

int ob_tok_utf8_decode(const unsigned char *p, uint32_t *cp) {
    unsigned char c = p[0];
    if (c < 0x80) { *cp = c; return 1; }
    if (c < 0xE0) { *cp = ((uint32_t)(c & 0x1F) << 6) | (p[1] & 0x3F); return 2; }
    if (c < 0xF0) { *cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F); return 3; }
    *cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) | ((uint32_t)(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    return 4;
}

int ob_tok_utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { o[0] = (unsigned char)(0xC0 | (cp >> 6)); o[1] = (unsigned char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12)); o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18)); o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Returns a valid-UTF-8 version of text: text itself if already valid, else a malloc'd
 * copy (in *owned) with U+FFFD for each maximal invalid subpart. NULL on OOM. */
static const char *utf8_sanitize(const char *text, size_t len, size_t *out_len, char **owned) {
    const unsigned char *p = (const unsigned char *)text;
    size_t i = 0;
    while (i < len) {
        if (p[i] < 0x80) { i++; continue; }
        int l = ob_tok_utf8_len(p + i, len - i);
        if (!l) break;
        i += (size_t)l;
    }
    *owned = NULL;
    if (i == len) { *out_len = len; return text; }
    size_t cap; /* worst case: every byte becomes 3 bytes */
    if (!ob_mul_ok(len, 3, &cap)) return NULL;
    char *o = malloc(cap + 1);
    if (!o) return NULL;
    memcpy(o, text, i);
    size_t n = i;
    while (i < len) {
        int l = ob_tok_utf8_len(p + i, len - i);
        if (l) { memcpy(o + n, p + i, (size_t)l); n += (size_t)l; i += (size_t)l; continue; }
        memcpy(o + n, "\xEF\xBF\xBD", 3); n += 3;
        i += (size_t)utf8_invalid_len(p + i, len - i);
    }
    o[n] = 0;
    *owned = o; *out_len = n;
    return o;
}

/* ---- construction ------------------------------------------------------------------ */

ob_tokenizer *ob_tok_new(void) {
    ob_tokenizer *t = calloc(1, sizeof(*t));
    if (!t) return NULL;
    t->bos = t->eos = t->pad = t->sep = t->unk_id = -1;
    t->wp_max_chars = 100;
    memcpy(t->wp_prefix, "##", 3);
    for (int i = 0; i < 256; i++) t->byte_id[i] = t->ugm_root[i] = -1;
    return t;
}

ob_status ob_tok_set_vocab(ob_tokenizer *t, int32_t n, const char *const *strs, const uint32_t *lens,
                           char *err, size_t err_len) {
    if (n <= 0 || n > (1 << 26)) return ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer: bad vocabulary size %d", (int)n);
    t->n_vocab = n;
    t->tok = calloc((size_t)n, sizeof(char *));
    t->tok_len = calloc((size_t)n, sizeof(uint32_t));
    t->is_added = calloc((size_t)n, sizeof(bool));
    t->vh_mask = pow2_at_least((size_t)n * 2) - 1;
    t->vh = malloc(((size_t)t->vh_mask + 1) * sizeof(int32_t));
    if (!t->tok || !t->tok_len || !t->is_added || !t->vh) return ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory");
    memset(t->vh, 0xff, ((size_t)t->vh_mask + 1) * sizeof(int32_t));
    for (int32_t i = 0; i < n; i++) {
        uint32_t l = strs[i] ? lens[i] : 0;
        t->tok[i] = malloc((size_t)l + 1);
        if (!t->tok[i]) return ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory");
        if (l) memcpy(t->tok[i], strs[i], l);
        t->tok[i][l] = 0;
        t->tok_len[i] = l;
        if (!strs[i]) continue; /* a hole in the id space (tokenizer.json may skip ids) */
        uint32_t h = (uint32_t)hash_bytes(t->tok[i], l) & t->vh_mask;
        bool dup = false;
        while (t->vh[h] >= 0) {
            int32_t o = t->vh[h];
            if (t->tok_len[o] == l && memcmp(t->tok[o], t->tok[i], l) == 0) { dup = true; break; }
            h = (h + 1) & t->vh_mask;
        }
        if (!dup) t->vh[h] = i; /* first id wins for duplicate strings */
    }
    return OB_OK;
}

int32_t ob_tok_find(const ob_tokenizer *t, const char *s, size_t len) {
    uint32_t h = (uint32_t)hash_bytes(s, len) & t->vh_mask;
    for (;;) {
        int32_t id = t->vh[h];
        if (id < 0) return -1;
        if (t->tok_len[id] == len && memcmp(t->tok[id], s, len) == 0) return id;
        h = (h + 1) & t->vh_mask;
    }
}

ob_status ob_tok_merges_init(ob_tokenizer *t, size_t n_merges, char *err, size_t err_len) {
    free(t->mh);
    t->mh_mask = pow2_at_least(n_merges * 2 + 16) - 1;
    t->mh = calloc((size_t)t->mh_mask + 1, sizeof(ob_tok_merge));
    if (!t->mh) return ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory for merges");
    return OB_OK;
}

ob_status ob_tok_add_merge(ob_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen,
                           int32_t rank, char *err, size_t err_len) {
    int32_t ia = ob_tok_find(t, a, alen), ib = ob_tok_find(t, b, blen);
    if (ia < 0 || ib < 0) return OB_OK; /* HF refuses such files; we skip the merge */
    char stack[256];
    char *m = alen + blen <= sizeof(stack) ? stack : malloc(alen + blen);
    if (!m) return ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory");
    memcpy(m, a, alen); memcpy(m + alen, b, blen);
    int32_t res = ob_tok_find(t, m, alen + blen);
    if (m != stack) free(m);
    if (res < 0) return OB_OK;
    uint64_t key = ((uint64_t)(uint32_t)ia << 32 | (uint32_t)ib) + 1; /* +1: 0 marks empty */
    uint32_t h = (uint32_t)hash_u64(key) & t->mh_mask;
    while (t->mh[h].key) {
        if (t->mh[h].key == key) return OB_OK; /* keep the first (best) rank */
        h = (h + 1) & t->mh_mask;
    }
    t->mh[h].key = key; t->mh[h].rank = rank; t->mh[h].res = res;
    return OB_OK;
}

static ob_status trie_add(ob_tokenizer *t, const char *s, size_t len, int32_t added_idx) {
    int32_t node = 0;
    if (t->n_trie == 0) {
        t->cap_trie = 256;
        t->trie = malloc((size_t)t->cap_trie * sizeof(ob_tok_trie_node));
        if (!t->trie) return OB_ERR_NOMEM;
        t->trie[0] = (ob_tok_trie_node){ -1, -1, -1, 0 };
        t->n_trie = 1;
    }
    for (size_t i = 0; i < len; i++) {
        uint8_t c = (uint8_t)s[i];
        int32_t ch = t->trie[node].child;
        while (ch >= 0 && t->trie[ch].byte != c) ch = t->trie[ch].sibling;
        if (ch < 0) {
            if (t->n_trie == t->cap_trie) {
                ob_tok_trie_node *nt = realloc(t->trie, (size_t)t->cap_trie * 2 * sizeof(ob_tok_trie_node));
                if (!nt) return OB_ERR_NOMEM;
                t->trie = nt; t->cap_trie *= 2;
            }
            ch = t->n_trie++;
            t->trie[ch] = (ob_tok_trie_node){ -1, t->trie[node].child, -1, c };
            t->trie[node].child = ch;
        }
        node = ch;
    }
    if (t->trie[node].added < 0) t->trie[node].added = added_idx;
    return OB_OK;
}

ob_status ob_tok_add_added(ob_tokenizer *t, const char *s, size_t len, int32_t id, bool special,
                           bool lstrip, bool rstrip, char *err, size_t err_len) {
    if (id < 0 || id >= t->n_vocab) return ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer: added token id %d out of range", (int)id);
    if (len == 0) return OB_OK;
    size_t cap = (size_t)t->n_added * sizeof(ob_tok_added);
    if ((t->n_added & (t->n_added - 1)) == 0) { /* grow at powers of two */
        size_t need = (size_t)(t->n_added ? t->n_added * 2 : 8) * sizeof(ob_tok_added);
        void *p = t->added;
        if (!ob_tok_reserve(&p, &cap, need)) return ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory");
        t->added = p;
    }
    ob_tok_added *a = &t->added[t->n_added];
    a->text = malloc(len + 1);
    if (!a->text) return ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory");
    memcpy(a->text, s, len); a->text[len] = 0;
    a->len = (uint32_t)len; a->id = id; a->special = special; a->lstrip = lstrip; a->rstrip = rstrip;
    t->is_added[id] = true;
    if (trie_add(t, s, len, t->n_added) != OB_OK) return ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory");
    t->n_added++;
    return OB_OK;
}

void ob_tok_add_eog(ob_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return;
    for (int i = 0; i < t->n_eog; i++) if (t->eog[i] == id) return;
    if (t->n_eog < (int)OB_ARRAY_LEN(t->eog)) t->eog[t->n_eog++] = id;
}

/* Decoded bytes of a vocabulary string under the tokenizer's decoder. */
static ob_status make_dec(ob_tokenizer *t, int32_t id) {
    const char *s = t->tok[id];
    size_t n = t->tok_len[id];
    char *o = malloc(n + 2); /* decoders shrink the text, or add one space (WordPiece) */
    if (!o) return OB_ERR_NOMEM;
    size_t k = 0;
    if (t->dec == OB_TOK_DEC_BYTELEVEL) {
        /* A token with any character outside the byte map decodes as its raw text. */
        const unsigned char *p = (const unsigned char *)s;
        size_t i = 0; bool ok = true;
        while (i < n) {
            int l = ob_tok_utf8_len(p + i, n - i);
            uint32_t cp; int b;
            if (!l) { ok = false; break; }
            ob_tok_utf8_decode(p + i, &cp);
            if ((b = ob_tok_cp_to_byte(cp)) < 0) { ok = false; break; }
            o[k++] = (char)b; i += (size_t)l;
        }
        if (!ok) { memcpy(o, s, n); k = n; }
    } else if (t->dec == OB_TOK_DEC_SPM) {
        unsigned v;
        if (n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' && sscanf(s + 3, "%2x", &v) == 1 && !t->is_added[id]) {
            o[k++] = (char)v;
        } else {
            for (size_t i = 0; i < n; i++) {
                if (i + 3 <= n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) { o[k++] = ' '; i += 2; }
                else o[k++] = s[i];
            }
        }
    } else if (t->dec == OB_TOK_DEC_WORDPIECE) {
        size_t pl = strlen(t->wp_prefix);
        /* Words are joined by spaces, continuations glued on: a word's piece is " word"
         * (HF's decoder drops the space before the first word). */
        if (pl && n >= pl && memcmp(s, t->wp_prefix, pl) == 0 && !t->is_added[id]) { memcpy(o, s + pl, n - pl); k = n - pl; }
        else { o[0] = ' '; memcpy(o + 1, s, n); k = n + 1; }
    } else { memcpy(o, s, n); k = n; }
    o[k] = 0;
    t->dec_str[id] = o; t->dec_len[id] = (uint32_t)k;
    return OB_OK;
}

ob_status ob_tok_finish(ob_tokenizer *t, char *err, size_t err_len) {
    if (t->byte_level) {
        for (int b = 0; b < 256; b++) {
            char u[4]; int l = ob_tok_utf8_encode(ob_tok_byte_to_cp((uint8_t)b), u);
            t->byte_id[b] = ob_tok_find(t, u, (size_t)l);
        }
    } else if (t->byte_fallback) {
        for (int b = 0; b < 256; b++) {
            char u[8]; snprintf(u, sizeof(u), "<0x%02X>", b);
            t->byte_id[b] = ob_tok_find(t, u, 6);
        }
    }
    t->dec_str = calloc((size_t)t->n_vocab, sizeof(char *));
    t->dec_len = calloc((size_t)t->n_vocab, sizeof(uint32_t));
    if (!t->dec_str || !t->dec_len) return ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory");
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (make_dec(t, i) != OB_OK) return ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory");
    ob_tok_add_eog(t, t->eos);
    static const char *const eog_names[] = { "<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|endoftext|>",
        "<|end_of_text|>", "<|eom_id|>", ("<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>") };
    for (size_t i = 0; i < OB_ARRAY_LEN(eog_names); i++) {
        int32_t id = ob_tok_find(t, eog_names[i], strlen(eog_names[i]));
        if (id >= 0) ob_tok_add_eog(t, id);
    }
    if ((t->add_bos && t->bos < 0) || (t->add_eos && t->eos < 0))
        return ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer: add_bos/add_eos set but the token id is missing");
    return OB_OK;
}

void ob_tokenizer_free(ob_tokenizer *t) {
    if (!t) return;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (t->tok) free(t->tok[i]);
        if (t->dec_str) free(t->dec_str[i]);
    }
    free(t->tok); free(t->tok_len); free(t->dec_str); free(t->dec_len); free(t->score);
    free(t->vh); free(t->mh); free(t->is_added);
    for (int i = 0; i < t->n_re; i++) pcre2_code_free(t->re[i]);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].text);
    free(t->added); free(t->trie);
    ob_tok_unigram_free(t);
    free(t);
}

/* ---- encode ----------------------------------------------------------------------- */

static void scratch_free(ob_tok_scratch *s) {
    free(s->buf); free(s->buf2); free(s->sym); free(s->heap);
    for (int i = 0; i < OB_TOK_MAX_RE; i++) if (s->md[i]) pcre2_match_data_free(s->md[i]);
}

/* NFC through utf8proc; text whose bytes are all below 0xCC holds only code points below
 * U+0300, which are all NFC-stable, so the common case skips the library call. */
static const char *normalize_nfc(ob_tok_scratch *s, const char *text, size_t len, size_t *out_len) {
    bool simple = true;
    for (size_t i = 0; i < len; i++) if ((unsigned char)text[i] >= 0xCC) { simple = false; break; }
    if (simple) { *out_len = len; return text; }
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len, &dst,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (r < 0) { *out_len = len; return text; }
    if (!ob_tok_reserve((void **)&s->buf2, &s->cap2, (size_t)r + 1)) { free(dst); s->oom = true; *out_len = 0; return text; }
    memcpy(s->buf2, dst, (size_t)r);
    free(dst);
    *out_len = (size_t)r;
    return s->buf2;
}

/* Runs normalizer, pre-tokenizer and model on a stretch of text with no added tokens. */
static void encode_segment(const ob_tokenizer *t, ob_tok_scratch *s, const char *text, size_t len,
                           bool first, ob_tok_ids *out) {
    if (len == 0) return;
    if (t->model == OB_TOK_WORDPIECE) { ob_tok_wordpiece_segment(t, s, text, len, out); return; }
    if (t->model == OB_TOK_UNIGRAM) { ob_tok_unigram_segment(t, s, text, len, first, out); return; }
    if (t->norm == OB_TOK_NORM_NFC) {
        text = normalize_nfc(s, text, len, &len);
    } else if (t->norm == OB_TOK_NORM_SPACE_TO_LOWBAR) {
        /* Replace(" " -> "▁"), with the SentencePiece dummy prefix where asked for. */
        size_t extra = 0;
        for (size_t i = 0; i < len; i++) extra += text[i] == ' ';
        size_t need = len + 2 * extra + 4;
        if (!ob_tok_reserve((void **)&s->buf2, &s->cap2, need)) { s->oom = true; return; }
        size_t k = 0;
        if (t->add_prefix_space && (first || t->prefix_every_segment)) { memcpy(s->buf2, "\xE2\x96\x81", 3); k = 3; }
        for (size_t i = 0; i < len; i++) {
            if (text[i] == ' ') { memcpy(s->buf2 + k, "\xE2\x96\x81", 3); k += 3; }
            else s->buf2[k++] = text[i];
        }
        text = s->buf2; len = k;
    }
    if (t->n_re > 0) ob_tok_pretok_bpe(t, s, text, len, out);
    else ob_tok_bpe_word(t, s, text, len, out);
}

static bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Longest added token starting at p, or -1. */
static int match_added(const ob_tokenizer *t, const char *p, size_t n, bool parse_special, size_t *mlen) {
    int32_t node = 0, best = -1;
    for (size_t i = 0; i < n; i++) {
        int32_t ch = t->trie[node].child;
        uint8_t c = (uint8_t)p[i];
        while (ch >= 0 && t->trie[ch].byte != c) ch = t->trie[ch].sibling;
        if (ch < 0) break;
        node = ch;
        int32_t a = t->trie[node].added;
        if (a >= 0 && (parse_special || !t->added[a].special)) { best = a; *mlen = i + 1; }
    }
    return best;
}

static void encode_text(const ob_tokenizer *t, ob_tok_scratch *s, const char *text, size_t len,
                        bool add_special, bool parse_special, ob_tok_ids *out) {
    if (add_special && t->add_bos) ob_tok_ids_push(out, t->bos);
    size_t seg = 0, i = 0;
    bool first = true;
    if (t->n_trie > 0) {
        bool can_start[256] = { false };
        for (int32_t ch = t->trie[0].child; ch >= 0; ch = t->trie[ch].sibling) can_start[t->trie[ch].byte] = true;
        while (i < len) {
            if (!can_start[(unsigned char)text[i]]) { i++; continue; }
            size_t ml = 0;
            int a = match_added(t, text + i, len - i, parse_special, &ml);
            if (a < 0) { i++; continue; }
            size_t seg_end = i;
            if (t->added[a].lstrip) while (seg_end > seg && is_ws((unsigned char)text[seg_end - 1])) seg_end--;
            encode_segment(t, s, text + seg, seg_end - seg, first, out);
            first = false;
            ob_tok_ids_push(out, t->added[a].id);
            i += ml;
            if (t->added[a].rstrip) while (i < len && is_ws((unsigned char)text[i])) i++;
            seg = i;
        }
    }
    encode_segment(t, s, text + seg, len - seg, first, out);
    if (add_special && t->add_eos) ob_tok_ids_push(out, t->eos);
}

static int encode_common(const ob_tokenizer *t, ob_tok_scratch *s, const char *text, size_t len,
                         bool add_special, bool parse_special, ob_tok_ids *out) {
    if (!t || (!text && len)) return -1;
    char *owned = NULL;
    size_t n = 0;
    const char *clean = len ? utf8_sanitize(text, len, &n, &owned) : "";
    if (!clean) return -1;
    encode_text(t, s, clean, n, add_special, parse_special, out);
    free(owned);
    if (out->oom || s->oom) return -1;
    return out->n > (size_t)INT32_MAX ? -1 : (int)out->n;
}

int ob_tokenize(const ob_tokenizer *t, const char *text, size_t len, int32_t *ids, int cap,
                bool add_special, bool parse_special) {
    ob_tok_scratch s = { 0 };
    ob_tok_ids out = { 0 };
    int n = encode_common(t, &s, text, len, add_special, parse_special, &out);
    if (n > 0 && ids && cap > 0) memcpy(ids, out.v, (size_t)OB_MIN(n, cap) * sizeof(int32_t));
    free(out.v);
    scratch_free(&s);
    return n;
}

int64_t ob_tokenize_batch(const ob_tokenizer *t, int n_texts, const char *const *texts, const size_t *lens,
                          int32_t *ids, int64_t cap, int64_t *offsets, bool add_special, bool parse_special) {
    if (!t || n_texts < 0 || !offsets) return -1;
    ob_tok_scratch s = { 0 };
    ob_tok_ids out = { 0 };
    int64_t total = 0;
    offsets[0] = 0;
    for (int i = 0; i < n_texts; i++) {
        out.n = 0;
        int n = encode_common(t, &s, texts[i], lens[i], add_special, parse_special, &out);
        if (n < 0) { total = -1; break; }
        if (ids && n > 0 && total + n <= cap) memcpy(ids + total, out.v, (size_t)n * sizeof(int32_t));
        total += n;
        offsets[i + 1] = total;
    }
    free(out.v);
    scratch_free(&s);
    return total;
}

/* ---- decode ----------------------------------------------------------------------- */

const char *ob_token_piece(const ob_tokenizer *t, int32_t id, size_t *len) {
    if (!t || id < 0 || id >= t->n_vocab) { if (len) *len = 0; return ""; }
    if (len) *len = t->dec_len[id];
    return t->dec_str[id];
}

int ob_token_bos(const ob_tokenizer *t) { return t ? t->bos : -1; }
int ob_token_eos(const ob_tokenizer *t) { return t ? t->eos : -1; }
int ob_tokenizer_n_vocab(const ob_tokenizer *t) { return t ? t->n_vocab : 0; }

void ob_tokenizer_mark_control(const ob_tokenizer *t, uint8_t *control) {
    memset(control, 0, (size_t)t->n_vocab);
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].special && t->added[i].id >= 0 && t->added[i].id < t->n_vocab) control[t->added[i].id] = 1;
    if (t->unk_id >= 0 && t->unk_id < t->n_vocab) control[t->unk_id] = 1;
}

bool ob_token_is_eog(const ob_tokenizer *t, int32_t id) {
    if (!t) return false;
    for (int i = 0; i < t->n_eog; i++) if (t->eog[i] == id) return true;
    return false;
}

/* Length of a UTF-8 prefix at p (n bytes) that is incomplete but could still become valid,
 * or 0. */
static int utf8_incomplete(const unsigned char *p, size_t n) {
    int need = utf8_invalid_len(p, n);
    if (need == 0 || (size_t)need != n) return 0;
    unsigned char c = p[0];
    int full = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 1;
    return (full > need && c >= 0xC2 && c <= 0xF4) ? need : 0;
}

/* Emits the complete characters of buf[0..n) into out (or counts them when out is NULL),
 * replacing invalid bytes by U+FFFD; returns bytes produced and the held-back tail. */
static size_t emit_utf8(const unsigned char *buf, size_t n, char *out, size_t *tail_start) {
    size_t i = 0, k = 0;
    while (i < n) {
        int l = ob_tok_utf8_len(buf + i, n - i);
        if (l) { if (out) memcpy(out + k, buf + i, (size_t)l); k += (size_t)l; i += (size_t)l; continue; }
        if (utf8_incomplete(buf + i, n - i)) break;
        int bad = utf8_invalid_len(buf + i, n - i);
        if (out) memcpy(out + k, "\xEF\xBF\xBD", 3);
        k += 3; i += (size_t)bad;
    }
    *tail_start = i;
    return k;
}

size_t ob_detok_push(const ob_tokenizer *t, ob_detok *d, int32_t id, char *out, size_t cap) {
    size_t plen;
    const char *piece = ob_token_piece(t, id, &plen);
    size_t total = (size_t)d->n_pend + plen;
    unsigned char stackbuf[512];
    unsigned char *buf = total <= sizeof(stackbuf) ? stackbuf : malloc(total);
    if (!buf) return 0;
    memcpy(buf, d->pend, (size_t)d->n_pend);
    memcpy(buf + d->n_pend, piece, plen);
    size_t tail;
    size_t need = emit_utf8(buf, total, NULL, &tail);
    if (need <= cap) {
        emit_utf8(buf, total, out, &tail);
        d->n_pend = (int)(total - tail); /* at most 3: an incomplete sequence */
        memcpy(d->pend, buf + tail, (size_t)d->n_pend);
    }
    if (buf != stackbuf) free(buf);
    return need;
}

size_t ob_detok_flush(ob_detok *d, char *out, size_t cap) {
    size_t need = d->n_pend ? 3 : 0;
    if (need > cap) return need;
    if (need) memcpy(out, "\xEF\xBF\xBD", 3);
    d->n_pend = 0;
    return need;
}
