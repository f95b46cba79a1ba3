/* Loader for the tokenizer.ggml.* metadata of a GGUF file: "gpt2" (byte-level BPE with
 * merges; tokenizer.ggml.pre picks the pre-tokenizer), "llama" (SentencePiece BPE by
 * score with byte fallback; Gemma 3 too), "bert" (WordPiece), "t5" (SentencePiece
 * Unigram: T5, XLM-RoBERTa / bge-reranker; byte fallback when it has byte tokens). Token types follow
 * llama.cpp: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte. */
#include <stdlib.h>
#include "tokenizer/tok_internal.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static int32_t get_id(const ob_gguf *g, const char *key, int32_t n_vocab) {
    int64_t v;
    if (!ob_gguf_get_i64(g, key, &v) || v < 0 || v >= n_vocab) return -1;
    return (int32_t)v;
}

static ob_status load(ob_tokenizer *t, const ob_gguf *g, char *err, size_t err_len) {
    const char *model = ob_gguf_get_str(g, "tokenizer.ggml.model");
    if (!model) return ob_fail(err, err_len, OB_ERR_FORMAT, "gguf: tokenizer.ggml.model missing");
    const ob_gguf_kv *toks = ob_gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (!toks || toks->type != OB_GGUF_ARRAY || toks->arr_type != OB_GGUF_STRING || !toks->arr_str || toks->n == 0 ||
        toks->n > (1u << 26))
        return ob_fail(err, err_len, OB_ERR_FORMAT, "gguf: tokenizer.ggml.tokens missing or not a string array");
    int32_t n = (int32_t)toks->n;
    const ob_gguf_kv *types = ob_gguf_find_kv(g, "tokenizer.ggml.token_type");
    if (types && (types->type != OB_GGUF_ARRAY || types->n != toks->n)) types = NULL;
    const ob_gguf_kv *scores = ob_gguf_find_kv(g, "tokenizer.ggml.scores");
    if (scores && (scores->type != OB_GGUF_ARRAY || scores->n != toks->n)) scores = NULL;
    int32_t *tt = malloc((size_t)n * sizeof(int32_t));
    const char **strs = malloc((size_t)n * sizeof(char *));
    uint32_t *lens = malloc((size_t)n * sizeof(uint32_t));
    char **owned = calloc((size_t)n, sizeof(char *));
    ob_status st = OB_OK;
    if (!tt || !strs || !lens || !owned) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
    bool bert = !strcmp(model, "bert");
    for (int32_t i = 0; i < n; i++) {
        int64_t ty = TT_NORMAL;
        if (types && !ob_gguf_arr_i64(types, (uint64_t)i, &ty)) ty = TT_NORMAL;
        tt[i] = (int32_t)ty;
        if (toks->arr_str[i].len > (1u << 20)) { st = ob_fail(err, err_len, OB_ERR_FORMAT, "gguf: token %d too long", (int)i); goto done; }
        strs[i] = toks->arr_str[i].p; lens[i] = (uint32_t)toks->arr_str[i].len;
        if (bert && ty == TT_NORMAL) {
            /* llama.cpp stores BERT words as "▁word" and continuations bare; WordPiece wants
             * "word" and "##cont". */
            size_t l = lens[i];
            char *s = malloc(l + 3);
            if (!s) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
            if (l >= 3 && !memcmp(strs[i], "\xE2\x96\x81", 3)) { memcpy(s, strs[i] + 3, l - 3); lens[i] = (uint32_t)(l - 3); }
            else { memcpy(s, "##", 2); memcpy(s + 2, strs[i], l); lens[i] = (uint32_t)(l + 2); }
            owned[i] = s; strs[i] = s;
        }
    }
    if ((st = ob_tok_set_vocab(t, n, strs, lens, err, err_len))) goto done;
    t->unk_id = get_id(g, "tokenizer.ggml.unknown_token_id", n);
    t->bos = get_id(g, "tokenizer.ggml.bos_token_id", n);
    t->eos = get_id(g, "tokenizer.ggml.eos_token_id", n);
    t->pad = get_id(g, "tokenizer.ggml.padding_token_id", n);
    bool spm = !strcmp(model, "llama"), ugm = !strcmp(model, "t5");
    if (!strcmp(model, "gpt2")) {
        t->model = OB_TOK_BPE; t->merge_mode = OB_TOK_MERGE_RANK; t->byte_level = true; t->dec = OB_TOK_DEC_BYTELEVEL;
        t->add_bos = false;
        const ob_gguf_kv *merges = ob_gguf_find_kv(g, "tokenizer.ggml.merges");
        if (!merges || merges->type != OB_GGUF_ARRAY || merges->arr_type != OB_GGUF_STRING || !merges->arr_str) {
            st = ob_fail(err, err_len, OB_ERR_FORMAT, "gguf: tokenizer.ggml.merges missing for a gpt2 tokenizer"); goto done;
        }
        if ((st = ob_tok_merges_init(t, merges->n, err, err_len))) goto done;
        for (uint64_t i = 0; i < merges->n && i <= (uint64_t)INT32_MAX; i++) {
            const char *m = merges->arr_str[i].p;
            const char *sp = memchr(m, ' ', merges->arr_str[i].len);
            if (!sp) { st = ob_fail(err, err_len, OB_ERR_FORMAT, "gguf: merge %llu has no space", (unsigned long long)i); goto done; }
            if ((st = ob_tok_add_merge(t, m, (size_t)(sp - m), sp + 1, merges->arr_str[i].len - (size_t)(sp - m) - 1,
                                       (int32_t)i, err, err_len))) goto done;
        }
        if ((st = ob_tok_set_preset(t, ob_gguf_get_str(g, "tokenizer.ggml.pre"), err, err_len))) goto done;
    } else if (spm) {
        t->model = OB_TOK_BPE; t->merge_mode = OB_TOK_MERGE_SCORE; t->byte_fallback = true;
        t->norm = OB_TOK_NORM_SPACE_TO_LOWBAR; t->dec = OB_TOK_DEC_SPM;
        t->add_bos = true; t->add_prefix_space = true;
        if (!scores || scores->arr_type != OB_GGUF_FLOAT32) { st = ob_fail(err, err_len, OB_ERR_FORMAT, "gguf: tokenizer.ggml.scores missing for a llama tokenizer"); goto done; }
        t->score = malloc((size_t)n * sizeof(float));
        if (!t->score) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
        for (int32_t i = 0; i < n; i++) if (!ob_gguf_arr_f32(scores, (uint64_t)i, &t->score[i])) t->score[i] = 0;
    } else if (ugm) {
        /* SentencePiece Unigram as llama.cpp writes it for T5 and XLM-R; the normalizer is
         * modelled, not read from the charsmap; Metaspace split into "▁words" as HF does. */
        t->model = OB_TOK_UNIGRAM; t->dec = OB_TOK_DEC_SPM;
        t->add_bos = false; t->add_eos = true; /* llama.cpp's defaults for "t5" */
        if (!scores || scores->arr_type != OB_GGUF_FLOAT32) { st = ob_fail(err, err_len, OB_ERR_FORMAT, "gguf: tokenizer.ggml.scores missing for a t5 tokenizer"); goto done; }
        t->ugm_score = malloc((size_t)n * sizeof(double));
        bool *normal = malloc((size_t)n * sizeof(bool));
        if (!t->ugm_score || !normal) { free(normal); st = ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
        for (int32_t i = 0; i < n; i++) {
            float f = 0;
            if (!ob_gguf_arr_f32(scores, (uint64_t)i, &f)) f = 0;
            t->ugm_score[i] = f;
            normal[i] = tt[i] == TT_NORMAL;
            t->byte_fallback |= tt[i] == TT_BYTE;
        }
        /* Every piece but the unused placeholders is in the lattice (HF's Unigram holds the
         * specials too); the unknown score counts normal pieces only, as llama.cpp does. */
        bool any_normal = false;
        for (int32_t i = 0; i < n; i++) any_normal |= normal[i];
        bool *in = malloc((size_t)n * sizeof(bool));
        if (!in) { free(normal); st = ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
        for (int32_t i = 0; i < n; i++) in[i] = tt[i] != TT_UNUSED;
        st = ob_tok_unigram_init(t, in, any_normal ? normal : NULL, err, err_len);
        free(in); free(normal);
        if (st) goto done;
        bool rm = false, pre = true;
        ob_gguf_get_bool(g, "tokenizer.ggml.remove_extra_whitespaces", &rm);
        ob_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &pre);
        /* A charsmap is nmt_nfkc's (the SentencePiece default) as far as we model it; a
         * file without one came from a tokenizer.json whose normalizer was plain NFKC. */
        const ob_gguf_kv *cm = ob_gguf_find_kv(g, "tokenizer.ggml.precompiled_charsmap");
        int norm = cm && cm->type == OB_GGUF_ARRAY && cm->n > 0 ? OB_TOK_UGM_NMT_NFKC : OB_TOK_UGM_NFKC;
        if ((st = ob_tok_unigram_add_norm(t, norm, err, err_len))) goto done;
        /* remove_extra_whitespaces as HF's converted tokenizer.json does it: Strip(right) of
         * all Unicode whitespace, then runs of spaces folded (and leading ones dropped). */
        if (rm && ((st = ob_tok_unigram_add_norm(t, OB_TOK_UGM_STRIP_RIGHT, err, err_len)) ||
                   (st = ob_tok_unigram_add_norm(t, OB_TOK_UGM_SPM_WS, err, err_len)))) goto done;
        t->ugm_metaspace = true; t->ugm_split = true; t->ugm_prepend = pre ? 2 : 0;
    } else if (bert) {
        t->model = OB_TOK_WORDPIECE; t->dec = OB_TOK_DEC_WORDPIECE; t->norm = OB_TOK_NORM_BERT; t->bert_pretok = true;
        t->bert_clean = t->bert_chinese = t->bert_lower = t->bert_strip_accents = true;
        int32_t cls = get_id(g, "tokenizer.ggml.cls_token_id", n), sep = get_id(g, "tokenizer.ggml.seperator_token_id", n);
        if (cls >= 0) t->bos = cls;
        if (sep >= 0) t->eos = sep;
        t->add_bos = t->bos >= 0; t->add_eos = t->eos >= 0;
    } else {
        st = ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "gguf: unsupported tokenizer model '%s'", model); goto done;
    }
    bool b;
    if (ob_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b)) t->add_bos = b;
    if (ob_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b)) t->add_eos = b;
    if (ob_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b)) t->add_prefix_space = b;
    static const char *const eog_keys[] = { "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id" };
    for (size_t i = 0; i < OB_ARRAY_LEN(eog_keys); i++) ob_tok_add_eog(t, get_id(g, eog_keys[i], n));
    /* Control tokens match only when parsing specials; user-defined ones always, on the
     * raw text (Gemma's runs of spaces, tabs and newlines are user-defined tokens: matching
     * them first gives what HF's merges, which rank whitespace runs first, give). */
    for (int32_t i = 0; i < n && !st; i++) {
        /* Unigram: HF splits <unk> off as an added token too. */
        bool unk_tok = ugm && tt[i] == TT_UNKNOWN;
        if (tt[i] != TT_CONTROL && tt[i] != TT_USER && !unk_tok) continue;
        const char *s = t->tok[i]; size_t l = t->tok_len[i];
        st = ob_tok_add_added(t, s, l, i, tt[i] != TT_USER, false, false, err, err_len);
        if (!st && tt[i] == TT_USER && spm && memchr(s, ' ', l)) {
            /* HF's tokenizer.json spells these with "▁" and matches that spelling too. */
            char *e = malloc(l * 3 + 1);
            if (!e) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory"); break; }
            size_t k = 0;
            for (size_t j = 0; j < l; j++) {
                if (s[j] == ' ') { memcpy(e + k, "\xE2\x96\x81", 3); k += 3; } else e[k++] = s[j];
            }
            st = ob_tok_add_added(t, e, k, i, false, false, false, err, err_len);
            free(e);
        }
    }
    if (st) goto done;
    st = ob_tok_finish(t, err, err_len);
done:
    if (owned) for (int32_t i = 0; i < n; i++) free(owned[i]);
    free(owned); free(tt); free(strs); free(lens);
    return st;
}

ob_status ob_tokenizer_from_gguf(const ob_gguf *g, ob_tokenizer **out, char *err, size_t err_len) {
    *out = NULL;
    if (!g) return ob_fail(err, err_len, OB_ERR_ARG, "tokenizer: no gguf");
    ob_tokenizer *t = ob_tok_new();
    if (!t) return ob_fail(err, err_len, OB_ERR_NOMEM, "tokenizer: out of memory");
    ob_status st = load(t, g, err, err_len);
    if (st) { ob_tokenizer_free(t); return st; }
    *out = t;
    return OB_OK;
}
