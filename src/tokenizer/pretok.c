/* Pre-tokenizer: HF "Split" with behavior Isolated, through PCRE2 in UTF + UCP mode with
 * JIT. Several regexes (a Sequence of Splits) apply one after another: each splits every
 * piece the previous one produced. Matches and the gaps between them are both pieces. */
#include <stdlib.h>
#include "tokenizer/tok_internal.h"

const char ob_tok_re_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char re_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char re_qwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* o200k (GPT-4o, gpt-oss): letter runs split by case class, contractions kept on the word. */
static const char re_gpt4o[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char re_dsv3_digits[] = "\\p{N}{1,3}";
static const char re_dsv3_cjk[] = "[\\x{4e00}-\\x{9fa5}\\x{3040}-\\x{309f}\\x{30a0}-\\x{30ff}]+";
static const char re_dsv3_main[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

ob_status ob_tok_add_regex(ob_tokenizer *t, const char *pattern, size_t len, char *err, size_t err_len) {
    if (t->n_re >= OB_TOK_MAX_RE) return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "tokenizer: more than %d split regexes", OB_TOK_MAX_RE);
    int ec; PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof(msg));
        return ob_fail(err, err_len, OB_ERR_FORMAT, "tokenizer: bad pre-tokenizer regex at %zu: %s", (size_t)eo, (char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if JIT is absent */
    t->re[t->n_re++] = re;
    return OB_OK;
}

ob_status ob_tok_set_preset(ob_tokenizer *t, const char *pre, char *err, size_t err_len) {
    ob_status st;
    if (!pre || !strcmp(pre, "default") || !strcmp(pre, "gpt-2") || !strcmp(pre, "gpt2"))
        return ob_tok_add_regex(t, ob_tok_re_gpt2, strlen(ob_tok_re_gpt2), err, err_len);
    if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3") || !strcmp(pre, "llama-v3")) {
        t->ignore_merges = true;
        return ob_tok_add_regex(t, re_llama3, strlen(re_llama3), err, err_len);
    }
    if (!strcmp(pre, "qwen2") || !strcmp(pre, "qwen3") || !strcmp(pre, "qwen35")) {
        t->norm = OB_TOK_NORM_NFC;
        return ob_tok_add_regex(t, re_qwen2, strlen(re_qwen2), err, err_len);
    }
    if (!strcmp(pre, "gpt-4o") || !strcmp(pre, "llama4")) /* llama.cpp's names for the o200k split */
        return ob_tok_add_regex(t, re_gpt4o, strlen(re_gpt4o), err, err_len);
    if (!strcmp(pre, "deepseek-v3")) {
        if ((st = ob_tok_add_regex(t, re_dsv3_digits, strlen(re_dsv3_digits), err, err_len))) return st;
        if ((st = ob_tok_add_regex(t, re_dsv3_cjk, strlen(re_dsv3_cjk), err, err_len))) return st;
        return ob_tok_add_regex(t, re_dsv3_main, strlen(re_dsv3_main), err, err_len);
    }
    return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "tokenizer: unknown pre-tokenizer '%s'", pre);
}

static void split_level(const ob_tokenizer *t, ob_tok_scratch *s, int level, const char *text, size_t len,
                        ob_tok_ids *out) {
    if (len == 0) return;
    if (level == t->n_re) { ob_tok_bpe_word(t, s, text, len, out); return; }
    if (!s->md[level]) {
        s->md[level] = pcre2_match_data_create_from_pattern(t->re[level], NULL);
        if (!s->md[level]) { s->oom = true; return; }
    }
    pcre2_match_data *md = s->md[level];
    size_t pos = 0, gap = 0;
    while (pos <= len) {
        int rc = pcre2_match(t->re[level], (PCRE2_SPTR)text, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0) break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* empty match: step one character so the scan advances */
            if (ms >= len) break;
            pos = ms + 1;
            while (pos < len && ((unsigned char)text[pos] & 0xC0) == 0x80) pos++;
            continue;
        }
        if (ms > gap) split_level(t, s, level + 1, text + gap, ms - gap, out);
        split_level(t, s, level + 1, text + ms, me - ms, out);
        gap = pos = me;
    }
    if (gap < len) split_level(t, s, level + 1, text + gap, len - gap, out);
}

void ob_tok_pretok_bpe(const ob_tokenizer *t, ob_tok_scratch *s, const char *text, size_t len,
                       ob_tok_ids *out) {
    if (t->bl_add_prefix_space && len > 0 && text[0] != ' ') {
        /* ByteLevel(add_prefix_space): the text gets a leading space first. */
        char *tmp = malloc(len + 1);
        if (!tmp) { s->oom = true; return; }
        tmp[0] = ' '; memcpy(tmp + 1, text, len);
        split_level(t, s, 0, tmp, len + 1, out);
        free(tmp);
        return;
    }
    split_level(t, s, 0, text, len, out);
}
