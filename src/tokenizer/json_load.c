/* Loader for Hugging Face tokenizer.json (model BPE, WordPiece or Unigram), plus the
 * tokenizer_config.json beside it for the bos/eos tokens.
 *
 * Added tokens are all matched on the raw text; the "normalized" flag is not honoured
 * (it only matters for normalizers that change text an added token could contain). */
#include <stdlib.h>
#include <stdio.h>
#include <jansson.h>
#include "tokenizer/tok_internal.h"

static const char *jstr(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}
static bool jbool(const json_t *o, const char *key, bool def) {
    const json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : def;
}
static bool streq(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* Unigram models (XLM-R, T5) run their normalizers as an ordered list of steps; the
 * SentencePiece Precompiled charsmap is approximated by nmt_nfkc (see unigram.c). */
static ob_status load_unigram_normalizer(ob_tokenizer *t, const json_t *n, const char *ty, char *err, size_t err_len) {
    int step = 0;
    if (streq(ty, "NFC")) step = OB_TOK_UGM_NFC;
    else if (streq(ty, "NFKC")) step = OB_TOK_UGM_NFKC;
    else if (streq(ty, "Precompiled")) step = OB_TOK_UGM_NMT_NFKC;
    else if (streq(ty, "Strip")) {
        ob_status st = OB_OK;
        if (jbool(n, "strip_left", false)) st = ob_tok_unigram_add_norm(t, OB_TOK_UGM_STRIP_LEFT, err, err_len);
        if (!st && jbool(n, "strip_right", false)) st = ob_tok_unigram_add_norm(t, OB_TOK_UGM_STRIP_RIGHT, err, err_len);
        return st;
    } else if (streq(ty, "Replace")) {
        const json_t *pat = json_object_get(n, "pattern");
        const char *re = jstr(pat, "Regex"), *lit = jstr(pat, "String"), *c = jstr(n, "content");
        if (streq(re, " {2,}") && streq(c, " ")) step = OB_TOK_UGM_RUNS_TO_SPACE;
        else if (streq(re, " {2,}") && streq(c, "\xE2\x96\x81")) step = OB_TOK_UGM_RUNS_TO_LOWBAR;
        else if (streq(lit, " ") && streq(c, "\xE2\x96\x81")) step = OB_TOK_UGM_SPACE_TO_LOWBAR;
        else if (streq(re, "\\A +| +\\z") && streq(c, "")) step = OB_TOK_UGM_SPM_WS; /* runs fold later */
        else return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "tokenizer.json: unsupported Replace normalizer for a Unigram model");
    }
    if (!step) return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "tokenizer.json: unsupported normalizer '%s'", ty ? ty : "?");
    return ob_tok_unigram_add_norm(t, step, err, err_len);
}

static ob_status load_normalizer(ob_tokenizer *t, const json_t *n, char *err, size_t err_len) {
    if (!n || json_is_null(n)) return OB_OK;
    const char *ty = jstr(n, "type");
    if (streq(ty, "Sequence")) {
        const json_t *arr = json_object_get(n, "normalizers");
        size_t i; const json_t *v;
        json_array_foreach(arr, i, v) {
            ob_status st = load_normalizer(t, v, err, err_len);
            if (st) return st;
        }
        return OB_OK;
    }
    if (t->model == OB_TOK_UNIGRAM) return load_unigram_normalizer(t, n, ty, err, err_len);
    if (streq(ty, "NFC")) { t->norm = OB_TOK_NORM_NFC; return OB_OK; }
    if (streq(ty, "Replace")) {
        const json_t *pat = json_object_get(n, "pattern");
        if (streq(jstr(pat, "String"), " ") && streq(jstr(n, "content"), "\xE2\x96\x81")) {
            t->norm = OB_TOK_NORM_SPACE_TO_LOWBAR; return OB_OK;
        }
    }
    if (streq(ty, "Prepend") && streq(jstr(n, "prepend"), "\xE2\x96\x81")) {
        t->add_prefix_space = true; t->prefix_every_segment = true; return OB_OK;
    }
    if (streq(ty, "BertNormalizer")) {
        t->norm = OB_TOK_NORM_BERT;
        t->bert_clean = jbool(n, "clean_text", true);
        t->bert_chinese = jbool(n, "handle_chinese_chars", true);
        t->bert_lower = jbool(n, "lowercase", true);
        t->bert_strip_accents = jbool(n, "strip_accents", t->bert_lower); /* null follows lowercase */
        return OB_OK;
    }
    return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "tokenizer.json: unsupported normalizer '%s'", ty ? ty : "?");
}

static ob_status load_pretok(ob_tokenizer *t, const json_t *p, char *err, size_t err_len) {
    if (!p || json_is_null(p)) return OB_OK;
    const char *ty = jstr(p, "type");
    ob_status st;
    if (streq(ty, "Sequence")) {
        const json_t *arr = json_object_get(p, "pretokenizers");
        size_t i; const json_t *v;
        json_array_foreach(arr, i, v) if ((st = load_pretok(t, v, err, err_len))) return st;
        return OB_OK;
    }
    if (streq(ty, "Metaspace") && t->model == OB_TOK_UNIGRAM) {
        const char *ps = jstr(p, "prepend_scheme"), *rep = jstr(p, "replacement");
        if (rep && !streq(rep, "\xE2\x96\x81")) return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "tokenizer.json: Metaspace replacement other than U+2581");
        t->ugm_metaspace = true;
        t->ugm_prepend = streq(ps, "first") ? 1 : streq(ps, "never") ? 0 : ps ? 2 : jbool(p, "add_prefix_space", true) ? 2 : 0;
        t->ugm_split = jbool(p, "split", true);
        return OB_OK;
    }
    if (t->model == OB_TOK_UNIGRAM)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer '%s' with a Unigram model", ty ? ty : "?");
    if (streq(ty, "ByteLevel")) {
        t->byte_level = true;
        t->bl_add_prefix_space = jbool(p, "add_prefix_space", false);
        if (jbool(p, "use_regex", true)) return ob_tok_add_regex(t, ob_tok_re_gpt2, strlen(ob_tok_re_gpt2), err, err_len);
        return OB_OK;
    }
    if (streq(ty, "Split")) {
        const json_t *pat = json_object_get(p, "pattern");
        const char *beh = jstr(p, "behavior");
        if (jbool(p, "invert", false)) return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "tokenizer.json: inverted Split");
        const char *re = jstr(pat, "Regex"), *lit = jstr(pat, "String");
        /* Gemma: Split(" ") after Replace(" " -> "▁") can never match: nothing to do. */
        if (streq(lit, " ") && t->norm == OB_TOK_NORM_SPACE_TO_LOWBAR) return OB_OK;
        if (!streq(beh, "Isolated")) return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "tokenizer.json: Split behavior '%s'", beh ? beh : "?");
        if (re) return ob_tok_add_regex(t, re, strlen(re), err, err_len);
        if (lit) {
            char buf[512];
            int n = snprintf(buf, sizeof(buf), "\\Q%s\\E", lit);
            if (n < 0 || (size_t)n >= sizeof(buf) || strstr(lit, "\\E")) return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "tokenizer.json: Split string too long");
            return ob_tok_add_regex(t, buf, (size_t)n, err, err_len);
        }
        return ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer.json: Split without a pattern");
    }
    if (streq(ty, "BertPreTokenizer")) { t->bert_pretok = true; return OB_OK; }
    if (streq(ty, "Metaspace")) {
        t->norm = OB_TOK_NORM_SPACE_TO_LOWBAR;
        const char *ps = jstr(p, "prepend_scheme");
        t->add_prefix_space = ps ? !streq(ps, "never") : jbool(p, "add_prefix_space", true);
        return OB_OK;
    }
    return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "tokenizer.json: unsupported pre_tokenizer '%s'", ty ? ty : "?");
}

static int32_t special_id(const json_t *tpl_special, const char *name) {
    const json_t *e = json_object_get(tpl_special, name);
    const json_t *ids = json_object_get(e, "ids");
    const json_t *first = json_array_get(ids, 0);
    return json_is_integer(first) ? (int32_t)json_integer_value(first) : -1;
}

static void load_post(ob_tokenizer *t, const json_t *p) {
    if (!p || json_is_null(p)) return;
    const char *ty = jstr(p, "type");
    if (streq(ty, "Sequence")) {
        size_t i; const json_t *v;
        json_array_foreach(json_object_get(p, "processors"), i, v) load_post(t, v);
    } else if (streq(ty, "TemplateProcessing")) {
        const json_t *single = json_object_get(p, "single"), *sp = json_object_get(p, "special_tokens");
        bool seen_seq = false;
        size_t i; const json_t *v;
        json_array_foreach(single, i, v) {
            if (json_object_get(v, "Sequence")) { seen_seq = true; continue; }
            const json_t *st = json_object_get(v, "SpecialToken");
            int32_t id = special_id(sp, jstr(st, "id"));
            if (id < 0) continue;
            if (!seen_seq) { t->bos = id; t->add_bos = true; }
            else { t->eos = id; t->add_eos = true; }
        }
    } else if (streq(ty, "BertProcessing") || streq(ty, "RobertaProcessing")) {
        const json_t *cls = json_object_get(p, "cls"), *sep = json_object_get(p, "sep");
        if (json_is_integer(json_array_get(cls, 1))) { t->bos = (int32_t)json_integer_value(json_array_get(cls, 1)); t->add_bos = true; }
        if (json_is_integer(json_array_get(sep, 1))) { t->eos = (int32_t)json_integer_value(json_array_get(sep, 1)); t->add_eos = true; }
    }
}

/* bos_token / eos_token in tokenizer_config.json: a string or {"content": ...}. */
static int32_t config_token(const ob_tokenizer *t, const json_t *cfg, const char *key) {
    const json_t *v = json_object_get(cfg, key);
    const char *s = json_is_string(v) ? json_string_value(v) : jstr(v, "content");
    return s ? ob_tok_find(t, s, strlen(s)) : -1;
}

static ob_status add_added_tokens(ob_tokenizer *t, const json_t *added, char *err, size_t err_len) {
    size_t i; const json_t *v;
    json_array_foreach(added, i, v) {
        const char *c = jstr(v, "content");
        ob_status st = ob_tok_add_added(t, c, json_string_length(json_object_get(v, "content")),
                                        (int32_t)json_integer_value(json_object_get(v, "id")), jbool(v, "special", false),
                                        jbool(v, "lstrip", false), jbool(v, "rstrip", false), err, err_len);
        if (st) return st;
    }
    return OB_OK;
}

/* model.vocab is [[piece, score], ...] (id = index); added tokens may extend the id space. */
static ob_status load_unigram(ob_tokenizer *t, const json_t *root, const json_t *model, char *err, size_t err_len) {
    const json_t *vocab = json_object_get(model, "vocab"), *added = json_object_get(root, "added_tokens");
    size_t nv = json_array_size(vocab), i;
    if (!json_is_array(vocab) || nv == 0 || nv >= (1u << 26))
        return ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer.json: Unigram model.vocab missing or not a list");
    int64_t max_id = (int64_t)nv - 1;
    const json_t *v;
    json_array_foreach(added, i, v) {
        const json_t *id = json_object_get(v, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 26) || !jstr(v, "content"))
            return ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer.json: bad added token %zu", i);
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    int32_t n = (int32_t)max_id + 1;
    const char **strs = calloc((size_t)n, sizeof(char *));
    uint32_t *lens = calloc((size_t)n, sizeof(uint32_t));
    t->ugm_score = calloc((size_t)n, sizeof(double));
    ob_status st = OB_OK;
    if (!strs || !lens || !t->ugm_score) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
    json_array_foreach(vocab, i, v) {
        const json_t *piece = json_array_get(v, 0), *score = json_array_get(v, 1);
        if (!json_is_array(v) || !json_is_string(piece) || !json_is_number(score)) {
            st = ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer.json: Unigram vocab entry %zu is not [piece, score]", i);
            goto done;
        }
        strs[i] = json_string_value(piece); lens[i] = (uint32_t)json_string_length(piece);
        t->ugm_score[i] = json_number_value(score);
    }
    json_array_foreach(added, i, v) {
        int32_t id = (int32_t)json_integer_value(json_object_get(v, "id"));
        if (!strs[id]) { strs[id] = jstr(v, "content"); lens[id] = (uint32_t)json_string_length(json_object_get(v, "content")); }
    }
    /* Ids past the vocab list that no added token names: empty strings, never matched. */
    for (int32_t k = 0; k < n; k++) if (!strs[k]) strs[k] = "";
    if ((st = ob_tok_set_vocab(t, n, strs, lens, err, err_len))) goto done;
    /* Only model.vocab pieces are in the lattice (and in the minimum score). */
    bool *in = calloc((size_t)n, sizeof(bool));
    if (!in) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
    for (size_t k = 0; k < nv; k++) in[k] = true;
    st = ob_tok_unigram_init(t, in, in, err, err_len);
    free(in);
    if (st) goto done;
    const json_t *unk = json_object_get(model, "unk_id");
    if (json_is_integer(unk) && json_integer_value(unk) >= 0 && json_integer_value(unk) < n) t->unk_id = (int32_t)json_integer_value(unk);
    t->byte_fallback = jbool(model, "byte_fallback", false);
    if ((st = load_normalizer(t, json_object_get(root, "normalizer"), err, err_len))) goto done;
    if ((st = load_pretok(t, json_object_get(root, "pre_tokenizer"), err, err_len))) goto done;
    if ((st = add_added_tokens(t, added, err, err_len))) goto done;
    load_post(t, json_object_get(root, "post_processor"));
    t->dec = OB_TOK_DEC_SPM;
done:
    free(strs); free(lens);
    return st;
}

static ob_status load_json(ob_tokenizer *t, const json_t *root, char *err, size_t err_len) {
    const json_t *model = json_object_get(root, "model");
    const char *mty = jstr(model, "type");
    const json_t *vocab = json_object_get(model, "vocab");
    const json_t *added = json_object_get(root, "added_tokens");
    if (streq(mty, "Unigram")) { t->model = OB_TOK_UNIGRAM; return load_unigram(t, root, model, err, err_len); }
    if (!json_is_object(vocab)) return ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer.json: model.vocab missing or not an object");
    if (!streq(mty, "BPE") && !streq(mty, "WordPiece")) {
        /* BPE files from older writers omit the type. */
        if (!mty && json_object_get(model, "merges")) mty = "BPE";
        else return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "tokenizer.json: unsupported model type '%s'", mty ? mty : "?");
    }
    t->model = streq(mty, "BPE") ? OB_TOK_BPE : OB_TOK_WORDPIECE;
    /* id space: vocab plus added tokens (which may lie past the vocab) */
    int64_t max_id = -1;
    const char *key; const json_t *v;
    json_object_foreach((json_t *)vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 26))
            return ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer.json: bad id for token '%.40s'", key);
        if (json_integer_value(v) > max_id) max_id = json_integer_value(v);
    }
    size_t i;
    json_array_foreach(added, i, v) {
        const json_t *id = json_object_get(v, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 26) || !jstr(v, "content"))
            return ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer.json: bad added token %zu", i);
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    if (max_id < 0) return ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer.json: empty vocabulary");
    int32_t n = (int32_t)max_id + 1;
    const char **strs = calloc((size_t)n, sizeof(char *));
    uint32_t *lens = calloc((size_t)n, sizeof(uint32_t));
    if (!strs || !lens) { free(strs); free(lens); return ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory"); }
    json_object_foreach((json_t *)vocab, key, v) {
        int32_t id = (int32_t)json_integer_value(v);
        strs[id] = key; lens[id] = (uint32_t)strlen(key);
    }
    json_array_foreach(added, i, v) {
        int32_t id = (int32_t)json_integer_value(json_object_get(v, "id"));
        if (!strs[id]) { strs[id] = jstr(v, "content"); lens[id] = (uint32_t)json_string_length(json_object_get(v, "content")); }
    }
    ob_status st = ob_tok_set_vocab(t, n, strs, lens, err, err_len);
    free(strs); free(lens);
    if (st) return st;

    if ((st = load_normalizer(t, json_object_get(root, "normalizer"), err, err_len))) return st;
    if ((st = load_pretok(t, json_object_get(root, "pre_tokenizer"), err, err_len))) return st;
    const char *unk = jstr(model, "unk_token");
    if (unk) t->unk_id = ob_tok_find(t, unk, strlen(unk));

    if (t->model == OB_TOK_BPE) {
        t->merge_mode = OB_TOK_MERGE_RANK;
        t->byte_fallback = jbool(model, "byte_fallback", false);
        t->ignore_merges = jbool(model, "ignore_merges", false);
        t->fuse_unk = jbool(model, "fuse_unk", false);
        const char *csp = jstr(model, "continuing_subword_prefix"), *eow = jstr(model, "end_of_word_suffix");
        if ((csp && *csp) || (eow && *eow))
            return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "tokenizer.json: BPE subword prefix/suffix not supported");
        const json_t *merges = json_object_get(model, "merges");
        if (!json_is_array(merges)) return ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer.json: model.merges missing");
        if ((st = ob_tok_merges_init(t, json_array_size(merges), err, err_len))) return st;
        json_array_foreach(merges, i, v) {
            const char *a, *b; size_t la, lb;
            if (json_is_string(v)) {
                a = json_string_value(v);
                const char *sp = strchr(a, ' ');
                if (!sp) return ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer.json: merge %zu has no space", i);
                la = (size_t)(sp - a); b = sp + 1; lb = strlen(b);
            } else if (json_is_array(v) && json_array_size(v) == 2 && json_is_string(json_array_get(v, 0)) &&
                       json_is_string(json_array_get(v, 1))) {
                a = json_string_value(json_array_get(v, 0)); la = json_string_length(json_array_get(v, 0));
                b = json_string_value(json_array_get(v, 1)); lb = json_string_length(json_array_get(v, 1));
            } else return ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer.json: bad merge %zu", i);
            if (i > (size_t)INT32_MAX) break;
            if ((st = ob_tok_add_merge(t, a, la, b, lb, (int32_t)i, err, err_len))) return st;
        }
    } else {
        const char *pre = jstr(model, "continuing_subword_prefix");
        if (pre) {
            if (strlen(pre) >= sizeof(t->wp_prefix)) return ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer.json: WordPiece prefix too long");
            memcpy(t->wp_prefix, pre, strlen(pre) + 1);
        }
        const json_t *mx = json_object_get(model, "max_input_chars_per_word");
        if (json_is_integer(mx)) t->wp_max_chars = (int)OB_MIN(json_integer_value(mx), 1 << 20);
    }
    if ((st = add_added_tokens(t, added, err, err_len))) return st;
    load_post(t, json_object_get(root, "post_processor"));
    /* decoder */
    if (t->model == OB_TOK_WORDPIECE) t->dec = OB_TOK_DEC_WORDPIECE;
    else if (t->byte_level) t->dec = OB_TOK_DEC_BYTELEVEL;
    else if (t->norm == OB_TOK_NORM_SPACE_TO_LOWBAR || t->byte_fallback) t->dec = OB_TOK_DEC_SPM;
    else t->dec = OB_TOK_DEC_RAW;
    if (t->model == OB_TOK_BPE && !t->byte_level && t->n_re == 0 && t->norm != OB_TOK_NORM_SPACE_TO_LOWBAR && !t->byte_fallback)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "tokenizer.json: BPE without byte-level or SentencePiece handling");
    return OB_OK;
}

ob_status ob_tokenizer_from_json(const char *path, ob_tokenizer **out, char *err, size_t err_len) {
    *out = NULL;
    if (!path) return ob_fail(err, err_len, OB_ERR_ARG, "tokenizer: no path");
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        FILE *f = fopen(path, "rb");
        if (!f) return ob_fail(err, err_len, OB_ERR_IO, "tokenizer: cannot open %s", path);
        fclose(f);
        return ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer: %s:%d: %s", path, je.line, je.text);
    }
    ob_tokenizer *t = ob_tok_new();
    if (!t) { json_decref(root); return ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory"); }
    ob_status st = json_is_object(root) ? load_json(t, root, err, err_len)
                                        : ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer: %s is not a JSON object", path);
    json_decref(root);
    if (st == OB_OK) {
        /* tokenizer_config.json beside it names bos/eos (it does not decide add_bos: the
         * post_processor does, as in HF tokenizers). */
        const char *slash = strrchr(path, '/');
        size_t dl = slash ? (size_t)(slash - path + 1) : 0;
        char *cp = malloc(dl + 32);
        if (cp) {
            memcpy(cp, path, dl); memcpy(cp + dl, "tokenizer_config.json", 22);
            json_t *cfg = json_load_file(cp, 0, &je);
            if (json_is_object(cfg)) {
                int32_t b = config_token(t, cfg, "bos_token"), e = config_token(t, cfg, "eos_token");
                int32_t p = config_token(t, cfg, "pad_token");
                if (b >= 0 && !t->add_bos) t->bos = b;
                if (e >= 0 && !t->add_eos) t->eos = e;
                if (p >= 0) t->pad = p;
            }
            json_decref(cfg);
            free(cp);
        }
        st = ob_tok_finish(t, err, err_len);
    }
    if (st) { ob_tokenizer_free(t); return st; }
    *out = t;
    return OB_OK;
}
