/* Tokenizer of a Hugging Face folder -> tokenizer.ggml.* metadata, as llama.cpp's converter
 * writes it. SentencePiece Unigram (XLM-RoBERTa) becomes "t5" (see convert_unigram). WordPiece (BERT family) from tokenizer.json or vocab.txt: words are stored
 * as "▁word", "##cont" continuations bare, bracketed specials as they are; special tokens
 * get type 3 (control). */
#include "convert/convert.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define OB_VOCAB_MAX (1 << 22)

enum { TT_NORMAL = 1, TT_CONTROL = 3, TT_USER = 4 };

typedef struct vocab {
    char **tok;              /* [n] model-form strings (owned) */
    int32_t *type;           /* [n] */
    int64_t n;
} vocab;

static void vocab_free(vocab *v) {
    if (v->tok) for (int64_t i = 0; i < v->n; i++) free(v->tok[i]);
    free(v->tok);
    free(v->type);
}

static ob_status vocab_alloc(vocab *v, int64_t n, char *err, size_t err_len) {
    v->tok = calloc((size_t)n, sizeof(char *));
    v->type = malloc(sizeof(int32_t) * (size_t)n);
    v->n = n;
    if (!v->tok || !v->type) return ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory");
    for (int64_t i = 0; i < n; i++) v->type[i] = TT_NORMAL;
    return OB_OK;
}

static bool is_bracketed(const char *s) {
    size_t l = strlen(s);
    return l >= 2 && s[0] == '[' && s[l - 1] == ']';
}

static int64_t find_tok(const vocab *v, const char *s) {
    for (int64_t i = 0; i < v->n; i++) if (v->tok[i] && !strcmp(v->tok[i], s)) return i;
    return -1;
}

/* WordPiece strings -> llama.cpp's spelling (see the file comment). */
static ob_status wordpiece_to_gguf(vocab *v, char *err, size_t err_len) {
    for (int64_t i = 0; i < v->n; i++) {
        char *s = v->tok[i];
        if (!s) return ob_fail(err, err_len, OB_ERR_FORMAT, "convert: vocabulary has no token with id %lld", (long long)i);
        if (v->type[i] != TT_NORMAL || is_bracketed(s)) continue;
        size_t l = strlen(s);
        char *o = malloc(l + 4);
        if (!o) return ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory");
        if (l >= 2 && s[0] == '#' && s[1] == '#') memcpy(o, s + 2, l - 1);
        else { memcpy(o, "\xE2\x96\x81", 3); memcpy(o + 3, s, l + 1); }
        free(s);
        v->tok[i] = o;
    }
    return OB_OK;
}

/* Ids come from model.vocab and added_tokens; the vocabulary is 0..max id. */
static ob_status vocab_count(const json_t *j, const json_t *jv, const char *path, int64_t *out, char *err, size_t err_len) {
    int64_t n = 0;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)jv, key, val) {
        json_int_t id = json_integer_value(val);
        if (!json_is_integer(val) || id < 0 || id >= OB_VOCAB_MAX)
            return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: token '%.100s' has a bad id", path, key);
        if (id + 1 > n) n = id + 1;
    }
    size_t ai;
    json_array_foreach(json_object_get(j, "added_tokens"), ai, val) {
        json_int_t id = json_integer_value(json_object_get(val, "id"));
        if (id < 0 || id >= OB_VOCAB_MAX || !json_is_string(json_object_get(val, "content")))
            return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: added token %zu is malformed", path, ai);
        if (id + 1 > n) n = id + 1;
    }
    *out = n;
    return OB_OK;
}

static ob_status from_tokenizer_json(vocab *v, const char *path, char *err, size_t err_len) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: %s (line %d)", path, je.text, je.line);
    ob_status st = OB_OK;
    json_t *model = json_object_get(j, "model");
    const char *type = json_string_value(json_object_get(model, "type"));
    json_t *jv = json_object_get(model, "vocab");
    if (!type || strcmp(type, "WordPiece")) {
        st = ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "%s: tokenizer model '%s' is not supported by convert (WordPiece only)",
                     path, type ? type : "?");
        goto done;
    }
    if (!json_is_object(jv) || json_object_size(jv) == 0 || json_object_size(jv) > OB_VOCAB_MAX) {
        st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: model.vocab missing or empty", path);
        goto done;
    }
    int64_t n = 0;
    if ((st = vocab_count(j, jv, path, &n, err, err_len))) goto done;
    const char *key;
    json_t *val, *added = json_object_get(j, "added_tokens");
    size_t ai;
    if ((st = vocab_alloc(v, n, err, err_len))) goto done;
    json_object_foreach(jv, key, val) {
        int64_t id = json_integer_value(val);
        if (v->tok[id]) { st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: id %lld used twice", path, (long long)id); goto done; }
        if (!(v->tok[id] = strdup(key))) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory"); goto done; }
    }
    json_array_foreach(added, ai, val) {
        int64_t id = json_integer_value(json_object_get(val, "id"));
        const char *c = json_string_value(json_object_get(val, "content"));
        if (!v->tok[id] && !(v->tok[id] = strdup(c))) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory"); goto done; }
        v->type[id] = json_is_true(json_object_get(val, "special")) ? TT_CONTROL : TT_USER;
    }
    st = wordpiece_to_gguf(v, err, err_len);
done:
    json_decref(j);
    return st;
}

static ob_status from_vocab_txt(vocab *v, const char *path, char *err, size_t err_len) {
    FILE *f = fopen(path, "rb");
    if (!f) return ob_fail(err, err_len, OB_ERR_IO, "%s: cannot open", path);
    int64_t cap = 1024, n = 0;
    char **tok = malloc(sizeof(char *) * (size_t)cap);
    char *line = NULL;
    size_t lcap = 0;
    ssize_t l;
    ob_status st = OB_OK;
    while (tok && (l = getline(&line, &lcap, f)) >= 0) {
        while (l > 0 && (line[l - 1] == '\n' || line[l - 1] == '\r')) line[--l] = 0;
        if (n == OB_VOCAB_MAX) { st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: too many tokens", path); break; }
        if (n == cap) {
            char **t2 = realloc(tok, sizeof(char *) * (size_t)(cap *= 2));
            if (!t2) break;
            tok = t2;
        }
        if (!(tok[n] = strdup(line))) break;
        n++;
    }
    bool oom = !tok || (!st && !feof(f));
    free(line);
    fclose(f);
    if (!st && oom) st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory reading %s", path);
    if (!st && n == 0) st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: empty vocabulary", path);
    if (!st) st = vocab_alloc(v, n, err, err_len);
    if (!st) {
        for (int64_t i = 0; i < n; i++) {
            v->tok[i] = tok[i];
            tok[i] = NULL;
            static const char *const specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
            for (size_t k = 0; k < OB_ARRAY_LEN(specials); k++)
                if (!strcmp(v->tok[i], specials[k])) v->type[i] = TT_CONTROL;
        }
        st = wordpiece_to_gguf(v, err, err_len);
    }
    if (tok) for (int64_t i = 0; i < n; i++) free(tok[i]);
    free(tok);
    return st;
}

/* ---- SentencePiece Unigram (XLM-RoBERTa, T5) -------------------------------------------- */

static int b64_val(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Standard base64 (padding optional) -> malloc'd bytes; NULL if malformed or on OOM. */
static uint8_t *b64_decode(const char *s, size_t *out_len) {
    size_t n = strlen(s), k = 0;
    uint8_t *o = malloc(n / 4 * 3 + 3);
    if (!o) return NULL;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n && s[i] != '='; i++) {
        int v = b64_val((unsigned char)s[i]);
        if (v < 0) { free(o); return NULL; }
        acc = (acc << 6) | (uint32_t)v;
        if ((bits += 6) >= 8) { bits -= 8; o[k++] = (uint8_t)(acc >> bits); }
    }
    *out_len = k;
    return o;
}

/* Walks the normalizer: the Precompiled charsmap (if any) and whether spaces are trimmed
 * and runs collapsed (SentencePiece's remove_extra_whitespaces). */
static void unigram_normalizer(json_t *n, const char **charsmap, bool *remove_ws) {
    const char *ty = json_string_value(json_object_get(n, "type"));
    if (!ty) return;
    if (!strcmp(ty, "Sequence")) {
        json_t *e;
        size_t i;
        json_array_foreach(json_object_get(n, "normalizers"), i, e) unigram_normalizer(e, charsmap, remove_ws);
    } else if (!strcmp(ty, "Precompiled")) {
        *charsmap = json_string_value(json_object_get(n, "precompiled_charsmap"));
    } else if (!strcmp(ty, "Replace")) {
        const char *re = json_string_value(json_object_get(json_object_get(n, "pattern"), "Regex"));
        if (re && (!strcmp(re, " {2,}") || !strcmp(re, "\\A +| +\\z"))) *remove_ws = true;
    }
}

/* Metaspace prepend scheme anywhere in the pre-tokenizer: false only for "never". */
static bool unigram_prefix(json_t *p) {
    const char *ty = json_string_value(json_object_get(p, "type"));
    if (!ty) return true;
    if (!strcmp(ty, "Sequence")) {
        json_t *e;
        size_t i;
        json_array_foreach(json_object_get(p, "pretokenizers"), i, e) if (!unigram_prefix(e)) return false;
        return true;
    }
    if (strcmp(ty, "Metaspace")) return true;
    const char *ps = json_string_value(json_object_get(p, "prepend_scheme"));
    if (ps) return strcmp(ps, "never") != 0;
    json_t *aps = json_object_get(p, "add_prefix_space");
    return !json_is_false(aps);
}

/* tokenizer.ggml.model "t5", as llama.cpp writes XLM-RoBERTa: pieces with their scores,
 * types (unknown / control / user-defined / byte), the charsmap, the whitespace flags and
 * the special ids of the post-processor template. */
static ob_status convert_unigram(ob_gguf_writer *w, json_t *j, const char *path, int type_vocab_size, int64_t *n_vocab,
                                 char *err, size_t err_len) {
    json_t *model = json_object_get(j, "model"), *jv = json_object_get(model, "vocab"), *val;
    json_t *added = json_object_get(j, "added_tokens");
    size_t nv = json_array_size(jv), i;
    if (!json_is_array(jv) || nv == 0 || nv > OB_VOCAB_MAX) return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: Unigram model.vocab missing or empty", path);
    int64_t n = (int64_t)nv;
    json_array_foreach(added, i, val) {
        json_int_t id = json_integer_value(json_object_get(val, "id"));
        if (id < 0 || id >= OB_VOCAB_MAX || !json_is_string(json_object_get(val, "content")))
            return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: added token %zu is malformed", path, i);
        if (id + 1 > n) n = id + 1;
    }
    vocab v = {0};
    float *scores = malloc(sizeof(float) * (size_t)n);
    uint8_t *cmap = NULL;
    ob_status st = vocab_alloc(&v, n, err, err_len);
    if (!st && !scores) st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory");
    if (st) goto done;
    bool byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    json_array_foreach(jv, i, val) {
        json_t *piece = json_array_get(val, 0), *score = json_array_get(val, 1);
        if (!json_is_string(piece) || !json_is_number(score)) { st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: vocab entry %zu is not [piece, score]", path, i); goto done; }
        if (!(v.tok[i] = strdup(json_string_value(piece)))) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory"); goto done; }
        scores[i] = (float)json_number_value(score);
        const char *p = v.tok[i];
        unsigned hx;
        if (byte_fallback && strlen(p) == 6 && !strncmp(p, "<0x", 3) && p[5] == '>' && sscanf(p + 3, "%2x", &hx) == 1) v.type[i] = 6;
    }
    for (int64_t k = (int64_t)nv; k < n; k++) scores[k] = 0.0f;
    json_array_foreach(added, i, val) {
        int64_t id = json_integer_value(json_object_get(val, "id"));
        if (!v.tok[id] && !(v.tok[id] = strdup(json_string_value(json_object_get(val, "content"))))) {
            st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory");
            goto done;
        }
        v.type[id] = json_is_true(json_object_get(val, "special")) ? TT_CONTROL : TT_USER;
    }
    for (int64_t k = 0; k < n; k++) {
        if (v.tok[k]) continue;
        char ph[40];
        snprintf(ph, sizeof(ph), "[PAD%lld]", (long long)k);
        if (!(v.tok[k] = strdup(ph))) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory"); goto done; }
        v.type[k] = 5; /* unused */
        scores[k] = -10000.0f;
    }
    json_t *unk = json_object_get(model, "unk_id");
    if (json_is_integer(unk) && json_integer_value(unk) >= 0 && json_integer_value(unk) < n) {
        v.type[json_integer_value(unk)] = 2; /* unknown */
        ob_gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)json_integer_value(unk));
    }
    const char *charsmap = NULL;
    bool remove_ws = false;
    unigram_normalizer(json_object_get(j, "normalizer"), &charsmap, &remove_ws);
    ob_gguf_set_str(w, "tokenizer.ggml.model", "t5");
    ob_gguf_set_str(w, "tokenizer.ggml.pre", "default");
    ob_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, NULL, (uint64_t)n);
    ob_gguf_set_arr(w, "tokenizer.ggml.scores", OB_GGUF_FLOAT32, scores, (uint64_t)n);
    ob_gguf_set_arr(w, "tokenizer.ggml.token_type", OB_GGUF_INT32, v.type, (uint64_t)n);
    ob_gguf_set_bool(w, "tokenizer.ggml.add_space_prefix", unigram_prefix(json_object_get(j, "pre_tokenizer")));
    ob_gguf_set_bool(w, "tokenizer.ggml.remove_extra_whitespaces", remove_ws);
    if (type_vocab_size > 0) ob_gguf_set_u32(w, "tokenizer.ggml.token_type_count", (uint32_t)type_vocab_size);
    if (charsmap) {
        size_t cl = 0;
        if (!(cmap = b64_decode(charsmap, &cl))) { st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: precompiled_charsmap is not base64", path); goto done; }
        ob_gguf_set_arr(w, "tokenizer.ggml.precompiled_charsmap", OB_GGUF_UINT8, cmap, (uint64_t)cl);
    }
    /* bos/eos: the specials before and after $A in the single-sequence template. */
    int64_t bos = -1, eos = -1;
    json_t *post = json_object_get(j, "post_processor"), *single = json_object_get(post, "single");
    json_t *tspec = json_object_get(post, "special_tokens");
    bool seen_seq = false;
    json_array_foreach(single, i, val) {
        if (json_object_get(val, "Sequence")) { seen_seq = true; continue; }
        const char *name = json_string_value(json_object_get(json_object_get(val, "SpecialToken"), "id"));
        json_t *ids = json_object_get(json_object_get(tspec, name ? name : ""), "ids");
        json_int_t id = json_integer_value(json_array_get(ids, 0));
        if (!json_is_integer(json_array_get(ids, 0)) || id < 0 || id >= n) continue;
        if (!seen_seq) bos = id; else eos = id;
    }
    static const struct { const char *tok, *key; } named[] = {
        {"<s>", "tokenizer.ggml.bos_token_id"}, {"</s>", "tokenizer.ggml.eos_token_id"},
        {"<pad>", "tokenizer.ggml.padding_token_id"}, {"<mask>", "tokenizer.ggml.mask_token_id"},
    };
    for (size_t k = 0; k < OB_ARRAY_LEN(named); k++) {
        int64_t id = k == 0 && bos >= 0 ? bos : k == 1 && eos >= 0 ? eos : find_tok(&v, named[k].tok);
        if (id >= 0) ob_gguf_set_u32(w, named[k].key, (uint32_t)id);
        if (id >= 0 && k == 0) ob_gguf_set_u32(w, "tokenizer.ggml.cls_token_id", (uint32_t)id);
        if (id >= 0 && k == 1) ob_gguf_set_u32(w, "tokenizer.ggml.seperator_token_id", (uint32_t)id);
    }
    ob_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", bos >= 0);
    ob_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", eos >= 0);
    *n_vocab = n;
done:
    free(scores);
    free(cmap);
    vocab_free(&v);
    return st;
}

ob_status ob_convert_vocab(ob_gguf_writer *w, const char *dir, int type_vocab_size, int64_t *n_vocab,
                           char *err, size_t err_len) {
    char path[4096];
    vocab v = {0};
    ob_status st;
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    json_t *tj = access(path, R_OK) == 0 ? json_load_file(path, 0, NULL) : NULL;
    const char *tty = json_string_value(json_object_get(json_object_get(tj, "model"), "type"));
    if (tty && !strcmp(tty, "Unigram")) {
        st = convert_unigram(w, tj, path, type_vocab_size, n_vocab, err, err_len);
        json_decref(tj);
        return st;
    }
    json_decref(tj);
    if (access(path, R_OK) == 0) st = from_tokenizer_json(&v, path, err, err_len);
    else {
        snprintf(path, sizeof(path), "%s/vocab.txt", dir);
        if (access(path, R_OK) != 0) return ob_fail(err, err_len, OB_ERR_IO, "%s: no tokenizer.json or vocab.txt", dir);
        st = from_vocab_txt(&v, path, err, err_len);
    }
    if (st) { vocab_free(&v); return st; }
    ob_gguf_set_str(w, "tokenizer.ggml.model", "bert");
    ob_gguf_set_str(w, "tokenizer.ggml.pre", "default");
    ob_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, NULL, (uint64_t)v.n);
    ob_gguf_set_arr(w, "tokenizer.ggml.token_type", OB_GGUF_INT32, v.type, (uint64_t)v.n);
    if (type_vocab_size > 0) ob_gguf_set_u32(w, "tokenizer.ggml.token_type_count", (uint32_t)type_vocab_size);
    static const struct { const char *tok, *key; } ids[] = {
        {"[UNK]", "tokenizer.ggml.unknown_token_id"}, {"[CLS]", "tokenizer.ggml.cls_token_id"},
        {"[SEP]", "tokenizer.ggml.seperator_token_id"}, {"[PAD]", "tokenizer.ggml.padding_token_id"},
        {"[MASK]", "tokenizer.ggml.mask_token_id"},
    };
    for (size_t k = 0; k < OB_ARRAY_LEN(ids); k++) {
        int64_t id = find_tok(&v, ids[k].tok);
        if (id >= 0) ob_gguf_set_u32(w, ids[k].key, (uint32_t)id);
    }
    ob_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    ob_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", true);
    *n_vocab = v.n;
    vocab_free(&v);
    return OB_OK;
}

/* ---- byte-level BPE ---------------------------------------------------------------------- */

/* The pre-tokenizer, named as tokenizer.ggml.pre: recognised from the Split regex's
 * letter rule (o200k, GPT-4o and gpt-oss: runs by case class) or digit rule (Llama 3 groups
 * up to three digits, Qwen2 splits every digit), or a bare ByteLevel (GPT-2's built-in regex). */
static const char *bpe_pre(json_t *pre) {
    const char *ty = json_string_value(json_object_get(pre, "type"));
    if (!ty) return NULL;
    if (!strcmp(ty, "ByteLevel")) return json_is_false(json_object_get(pre, "use_regex")) ? NULL : "gpt-2";
    if (!strcmp(ty, "Sequence")) {
        json_t *ps = json_object_get(pre, "pretokenizers"), *p;
        size_t i;
        const char *found = NULL;
        json_array_foreach(ps, i, p) {
            const char *t = json_string_value(json_object_get(p, "type"));
            if (t && !strcmp(t, "Split")) {
                const char *re = json_string_value(json_object_get(json_object_get(p, "pattern"), "Regex"));
                if (!re || found) return NULL;
                if (strstr(re, "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]")) found = "gpt-4o"; /* o200k: gpt-oss */
                else if (strstr(re, "\\p{N}{1,3}")) found = "llama-bpe";
                else if (strstr(re, "\\p{N}|")) found = "qwen2";
                else return NULL;
            } else if (!t || strcmp(t, "ByteLevel") || !json_is_false(json_object_get(p, "use_regex"))) {
                return NULL;
            }
        }
        return found;
    }
    return NULL;
}

/* bos/eos from config.json (an id or a list of ids: the first). */
static int64_t cfg_token(json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    if (json_is_array(v)) v = json_array_get(v, 0);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

ob_status ob_convert_vocab_bpe(ob_gguf_writer *w, const char *dir, int64_t *n_vocab, char *err, size_t err_len) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je), *cfg = NULL, *tc = NULL;
    if (!j) return ob_fail(err, err_len, OB_ERR_IO, "%s: %s", path, je.text);
    ob_status st = OB_OK;
    vocab v = {0};
    char **merges = NULL;
    size_t n_merges = 0;
    json_t *model = json_object_get(j, "model"), *jv = json_object_get(model, "vocab"), *jm = json_object_get(model, "merges");
    const char *type = json_string_value(json_object_get(model, "type"));
    const char *pre = bpe_pre(json_object_get(j, "pre_tokenizer"));
    if (!type || strcmp(type, "BPE") || !json_is_object(jv) || !json_is_array(jm)) {
        st = ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "%s: only byte-level BPE tokenizers convert for decoders", path);
        goto done;
    }
    if (!pre) { st = ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "%s: unknown pre-tokenizer (known: GPT-2, Llama 3, Qwen2, GPT-4o)", path); goto done; }
    int64_t n = 0;
    if ((st = vocab_count(j, jv, path, &n, err, err_len))) goto done;
    const char *key;
    json_t *val, *added = json_object_get(j, "added_tokens");
    size_t ai;
    if ((st = vocab_alloc(&v, n, err, err_len))) goto done;
    json_object_foreach(jv, key, val) {
        if (!(v.tok[json_integer_value(val)] = strdup(key))) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory"); goto done; }
    }
    json_array_foreach(added, ai, val) {
        int64_t id = json_integer_value(json_object_get(val, "id"));
        if (!v.tok[id] && !(v.tok[id] = strdup(json_string_value(json_object_get(val, "content"))))) {
            st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory");
            goto done;
        }
        v.type[id] = json_is_true(json_object_get(val, "special")) ? TT_CONTROL : TT_USER;
    }
    for (int64_t i = 0; i < n; i++) {
        /* Holes in the id space (padding ids with no token) get a unique placeholder. */
        if (v.tok[i]) continue;
        char ph[40];
        snprintf(ph, sizeof(ph), "[PAD%lld]", (long long)i);
        if (!(v.tok[i] = strdup(ph))) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory"); goto done; }
        v.type[i] = 5; /* unused */
    }
    n_merges = json_array_size(jm);
    merges = calloc(n_merges ? n_merges : 1, sizeof(char *));
    if (!merges) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory"); goto done; }
    json_array_foreach(jm, ai, val) {
        if (json_is_string(val)) merges[ai] = strdup(json_string_value(val));
        else if (json_is_array(val) && json_array_size(val) == 2 && json_is_string(json_array_get(val, 0)) &&
                 json_is_string(json_array_get(val, 1))) {
            const char *a = json_string_value(json_array_get(val, 0)), *b = json_string_value(json_array_get(val, 1));
            size_t la = strlen(a), lb = strlen(b);
            if ((merges[ai] = malloc(la + lb + 2))) { memcpy(merges[ai], a, la); merges[ai][la] = ' '; memcpy(merges[ai] + la + 1, b, lb + 1); }
        } else {
            st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: merge %zu is malformed", path, ai);
            goto done;
        }
        if (!merges[ai]) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory"); goto done; }
    }
    ob_gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    ob_gguf_set_str(w, "tokenizer.ggml.pre", pre);
    ob_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, NULL, (uint64_t)v.n);
    ob_gguf_set_arr(w, "tokenizer.ggml.token_type", OB_GGUF_INT32, v.type, (uint64_t)v.n);
    ob_gguf_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges, NULL, (uint64_t)n_merges);
    snprintf(path, sizeof(path), "%s/config.json", dir);
    cfg = json_load_file(path, 0, NULL);
    int64_t bos = cfg_token(cfg, "bos_token_id"), eos = cfg_token(cfg, "eos_token_id"), pad = cfg_token(cfg, "pad_token_id");
    if (bos >= 0 && bos < n) ob_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    if (eos >= 0 && eos < n) ob_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    if (pad >= 0 && pad < n) ob_gguf_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)pad);
    /* add_bos: the post-processor's single-sequence template starts with a special token. */
    json_t *single = json_object_get(json_object_get(j, "post_processor"), "single");
    bool add_bos = json_object_get(json_array_get(single, 0), "SpecialToken") != NULL;
    if (!single) {
        json_t *procs = json_object_get(json_object_get(j, "post_processor"), "processors"), *p;
        json_array_foreach(procs, ai, p)
            if (json_object_get(json_array_get(json_object_get(p, "single"), 0), "SpecialToken")) add_bos = true;
    }
    ob_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", add_bos);
    snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
    tc = json_load_file(path, 0, NULL);
    const char *tmpl = json_string_value(json_object_get(tc, "chat_template"));
    if (tmpl) ob_gguf_set_str(w, "tokenizer.chat_template", tmpl);
    *n_vocab = n;
done:
    if (merges) for (size_t i = 0; i < n_merges; i++) free(merges[i]);
    free(merges);
    vocab_free(&v);
    json_decref(cfg);
    json_decref(tc);
    json_decref(j);
    return st;
}
