/* Tokenizer unit tests: a tiny byte-level BPE built here (known merges -> known ids),
 * a tiny SentencePiece vocabulary in a GGUF, bad input (invalid UTF-8, missing and
 * malformed files and metadata), streaming detokenization, seeded random round trips,
 * and a few fixed encodings of the real tokenizers when ../shared (beside the checkout) is present. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>
#include "testutil.h"
#include "tokenizer/tokenizer.h"

/* GPT-2's byte -> code point map, written out independently of the library. */
static unsigned byte_cp(int b) {
    int n = 0;
    for (int x = 0; x < 256; x++) {
        bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174;
        if (x == b) return printable ? (unsigned)x : 256u + (unsigned)n;
        if (!printable) n++;
    }
    return 0;
}

static void cp_utf8(unsigned cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; o[1] = 0; }
    else { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); o[2] = 0; }
}

static char g_dir[] = "/tmp/ob_tok_test_XXXXXX";

static void write_file(const char *name, const char *text, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    if (f) { fputs(text, f); fclose(f); }
}

/* ids 0..255: the byte symbols in byte order; 256.. the merges below; 261 <|end|>. */
static char *tiny_bpe_json(void) {
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char u[4]; cp_utf8(byte_cp(b), u);
        json_object_set_new(vocab, u, json_integer(b));
    }
    char gw[8]; cp_utf8(byte_cp(' '), gw); strcat(gw, "w");
    json_object_set_new(vocab, "he", json_integer(256));
    json_object_set_new(vocab, "ll", json_integer(257));
    json_object_set_new(vocab, "hell", json_integer(258));
    json_object_set_new(vocab, "hello", json_integer(259));
    json_object_set_new(vocab, gw, json_integer(260));
    json_t *merges = json_array();
    char m5[16]; snprintf(m5, sizeof(m5), "%.2s w", gw);
    const char *ms[] = { "l l", "h e", "he ll", "hell o", m5 };
    for (int i = 0; i < 5; i++) json_array_append_new(merges, json_string(ms[i]));
    json_t *root = json_pack("{s:{s:s,s:o,s:o},s:{s:s,s:b,s:b},s:[{s:i,s:s,s:b,s:b,s:b}],s:n}",
        "model", "type", "BPE", "vocab", vocab, "merges", merges,
        "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 1,
        "added_tokens", "id", 261, "content", "<|end|>", "special", 1, "lstrip", 0, "rstrip", 0,
        "normalizer");
    char *s = json_dumps(root, 0);
    json_decref(root);
    return s;
}

static int enc(const ob_tokenizer *t, const char *s, size_t n, int32_t *ids, int cap) {
    return ob_tokenize(t, s, n, ids, cap, true, true);
}

static void test_tiny_bpe(void) {
    char path[512], err[256];
    char *js = tiny_bpe_json();
    CHECK(js != NULL);
    if (!js) return;
    write_file("tokenizer.json", js, path, sizeof(path));
    free(js);
    ob_tokenizer *t = NULL;
    ob_status st = ob_tokenizer_from_json(path, &t, err, sizeof(err));
    CHECKF(st == OB_OK, "%s", err);
    if (st) return;
    CHECK(ob_tokenizer_n_vocab(t) == 262);
    int32_t ids[64];
    const char *text = "hello world<|end|>";
    int n = enc(t, text, strlen(text), ids, 64);
    int32_t want[] = { 259, 260, 'o', 'r', 'l', 'd', 261 };
    CHECKF(n == 7, "n=%d", n);
    for (int i = 0; i < 7 && i < n; i++) CHECKF(ids[i] == want[i], "ids[%d]=%d want %d", i, ids[i], want[i]);
    /* parse_special off: the marker is plain text */
    n = ob_tokenize(t, text, strlen(text), ids, 64, true, false);
    CHECK(n > 7 && ids[6] == '<');
    /* a too-small buffer reports the size needed */
    CHECK(ob_tokenize(t, text, strlen(text), ids, 2, true, true) == 7);
    /* "hhello": leftmost-lowest-rank merging */
    n = enc(t, "hhello", 6, ids, 64);
    CHECK(n == 2 && ids[0] == 'h' && ids[1] == 259);
    /* invalid UTF-8 is replaced by U+FFFD per maximal subpart */
    int32_t a[64], b[64];
    int na = enc(t, "a\xff\xe4\xb8z", 5, a, 64);
    int nb = enc(t, "a\xEF\xBF\xBD\xEF\xBF\xBDz", 8, b, 64);
    CHECK(na == nb && na > 0 && memcmp(a, b, (size_t)na * sizeof(int32_t)) == 0);
    CHECK(enc(t, "", 0, ids, 64) == 0);
    CHECK(enc(t, NULL, 3, ids, 64) == -1);

    /* streaming detok: "é" as two byte tokens; the first push emits nothing */
    ob_detok d = { 0 };
    char out[16];
    CHECK(ob_detok_push(t, &d, 0xC3, out, sizeof(out)) == 0);
    size_t w = ob_detok_push(t, &d, 0xA9, out, sizeof(out));
    CHECK(w == 2 && memcmp(out, "\xC3\xA9", 2) == 0);
    CHECK(ob_detok_push(t, &d, 0xE4, out, sizeof(out)) == 0);
    CHECK(ob_detok_flush(&d, out, sizeof(out)) == 3 && memcmp(out, "\xEF\xBF\xBD", 3) == 0);
    CHECK(ob_detok_push(t, &d, 259, out, 2) == 5); /* too small: size needed, nothing written */
    CHECK(ob_detok_push(t, &d, 259, out, sizeof(out)) == 5 && memcmp(out, "hello", 5) == 0);
    /* invalid byte sequence mid-stream becomes U+FFFD, never a half character */
    CHECK(ob_detok_push(t, &d, 0xC3, out, sizeof(out)) == 0);
    w = ob_detok_push(t, &d, 'x', out, sizeof(out));
    CHECK(w == 4 && memcmp(out, "\xEF\xBF\xBDx", 4) == 0);

    /* seeded random round trips: valid UTF-8 decodes back exactly */
    ob_rng r; ob_rng_seed(&r, 42);
    for (int it = 0; it < 300; it++) {
        char s[256]; size_t k = 0;
        while (k < 200) {
            uint64_t x = ob_rng_u64(&r);
            unsigned cp = (x & 3) == 0 ? (unsigned)(x >> 8) % 0x80 : (x & 3) == 1 ? 0x80 + (unsigned)(x >> 8) % 0x780
                         : (x & 3) == 2 ? 0x800 + (unsigned)(x >> 8) % 0xF000 : 0x10000 + (unsigned)(x >> 8) % 0x100000;
            if (cp >= 0xD800 && cp <= 0xDFFF) continue;
            if (cp < 0x80) s[k++] = (char)cp;
            else if (cp < 0x800) { s[k++] = (char)(0xC0 | (cp >> 6)); s[k++] = (char)(0x80 | (cp & 0x3F)); }
            else if (cp < 0x10000) { s[k++] = (char)(0xE0 | (cp >> 12)); s[k++] = (char)(0x80 | ((cp >> 6) & 0x3F)); s[k++] = (char)(0x80 | (cp & 0x3F)); }
            else { s[k++] = (char)(0xF0 | (cp >> 18)); s[k++] = (char)(0x80 | ((cp >> 12) & 0x3F)); s[k++] = (char)(0x80 | ((cp >> 6) & 0x3F)); s[k++] = (char)(0x80 | (cp & 0x3F)); }
        }
        int32_t tk[256];
        int nt = ob_tokenize(t, s, k, tk, 256, false, false);
        CHECK(nt > 0 && nt <= (int)k);
        char back[512]; size_t bl = 0;
        for (int i = 0; i < nt && i < 256; i++) {
            size_t pl; const char *p = ob_token_piece(t, tk[i], &pl);
            if (bl + pl < sizeof(back)) { memcpy(back + bl, p, pl); bl += pl; }
        }
        CHECKF(bl == k && memcmp(back, s, k) == 0, "round trip %d", it);
        /* random bytes: never fails, never crashes */
        for (size_t i = 0; i < k; i++) s[i] = (char)ob_rng_u64(&r);
        CHECK(ob_tokenize(t, s, k, tk, 256, true, true) > 0);
    }
    ob_tokenizer_free(t);
    unlink(path);
}

static void test_bad_files(void) {
    char path[512], err[256];
    ob_tokenizer *t = NULL;
    CHECK(ob_tokenizer_from_json("/nonexistent/dir/tokenizer.json", &t, err, sizeof(err)) == OB_ERR_IO && t == NULL);
    CHECK(strlen(err) > 0);
    const struct { const char *json; ob_status want; } cases[] = {
        { "{\"model\": ", OB_ERR_FORMAT },
        { "[1, 2]", OB_ERR_FORMAT },
        { "{}", OB_ERR_FORMAT },
        { "{\"model\": {\"type\": \"Unigram\", \"vocab\": {\"a\": 0}}}", OB_ERR_FORMAT }, /* vocab must be a list */
        { "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", \"x\"]]}}", OB_ERR_FORMAT },
        { "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", -1.0]]},"
          " \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", OB_ERR_UNSUPPORTED },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -4}, \"merges\": []}}", OB_ERR_FORMAT },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}", OB_ERR_FORMAT },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"ab\"]},"
          " \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", OB_ERR_FORMAT },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
          " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}", OB_ERR_FORMAT },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
          " \"added_tokens\": [{\"id\": \"x\", \"content\": \"a\"}]}", OB_ERR_FORMAT },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_file("tokenizer.json", cases[i].json, path, sizeof(path));
        err[0] = 0;
        ob_status st = ob_tokenizer_from_json(path, &t, err, sizeof(err));
        CHECKF(st == cases[i].want && t == NULL && err[0], "case %zu: st=%d err=%s", i, (int)st, err);
        if (t) { ob_tokenizer_free(t); t = NULL; }
        unlink(path);
    }
}

/* A small SentencePiece vocabulary in a GGUF: merges by score, byte fallback. */
static void test_gguf_spm(void) {
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/spm.gguf", g_dir);
    const char *toks[262];
    char bytes[256][8];
    float scores[262];
    int32_t types[262];
    const char *named[6] = { "<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "\xE2\x96\x81" "a" };
    for (int i = 0; i < 6; i++) { toks[i] = named[i]; scores[i] = (float)-i; types[i] = i < 3 ? (i == 0 ? 2 : 3) : 1; }
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof(bytes[b]), "<0x%02X>", b);
        toks[6 + b] = bytes[b]; scores[6 + b] = 0; types[6 + b] = 6;
    }
    /* "b" is not in the vocabulary: it must come out as <0x62> */
    ob_gguf_writer *w = ob_gguf_writer_new(3, 32);
    ob_gguf_set_str(w, "general.architecture", "llama");
    ob_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    ob_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 262);
    ob_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    ob_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    ob_gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    ob_gguf_set_arr(w, "tokenizer.ggml.token_type", OB_GGUF_INT32, types, 262);
    /* first without scores: a clear error */
    ob_status st = ob_gguf_writer_write(w, path, err, sizeof(err));
    CHECKF(st == OB_OK, "%s", err);
    ob_gguf *g = NULL;
    ob_tokenizer *t = NULL;
    if (st == OB_OK && ob_gguf_open(path, &g, err, sizeof(err)) == OB_OK) {
        st = ob_tokenizer_from_gguf(g, &t, err, sizeof(err));
        CHECKF(st == OB_ERR_FORMAT && t == NULL && strstr(err, "scores"), "st=%d %s", (int)st, err);
        ob_gguf_close(g); g = NULL;
    }
    ob_gguf_set_arr(w, "tokenizer.ggml.scores", OB_GGUF_FLOAT32, scores, 262);
    st = ob_gguf_writer_write(w, path, err, sizeof(err));
    ob_gguf_writer_free(w);
    if (st == OB_OK && ob_gguf_open(path, &g, err, sizeof(err)) == OB_OK) {
        st = ob_tokenizer_from_gguf(g, &t, err, sizeof(err));
        CHECKF(st == OB_OK, "%s", err);
        ob_gguf_close(g);
        if (t) {
            int32_t ids[16];
            /* add_space_prefix defaults on: "▁a" "▁" "<0x62>" */
            int n = ob_tokenize(t, "a b", 3, ids, 16, true, true);
            CHECKF(n == 4 && ids[0] == 1 && ids[1] == 5 && ids[2] == 3 && ids[3] == 6 + 'b',
                   "n=%d %d %d %d %d", n, ids[0], ids[1], ids[2], ids[3]);
            CHECK(ob_token_bos(t) == 1 && ob_token_eos(t) == 2 && ob_token_is_eog(t, 2) && !ob_token_is_eog(t, 5));
            size_t pl; const char *p = ob_token_piece(t, 6 + 'b', &pl);
            CHECK(pl == 1 && p[0] == 'b');
            p = ob_token_piece(t, 5, &pl);
            CHECK(pl == 2 && memcmp(p, " a", 2) == 0);
            ob_tokenizer_free(t);
        }
    } else CHECKF(0, "gguf write/open failed: %s", err);
    /* no tokenizer metadata at all */
    w = ob_gguf_writer_new(3, 32);
    ob_gguf_set_str(w, "general.architecture", "llama");
    if (ob_gguf_writer_write(w, path, err, sizeof(err)) == OB_OK && ob_gguf_open(path, &g, err, sizeof(err)) == OB_OK) {
        t = NULL;
        CHECK(ob_tokenizer_from_gguf(g, &t, err, sizeof(err)) == OB_ERR_FORMAT && t == NULL && strstr(err, "tokenizer.ggml.model"));
        ob_gguf_close(g);
    }
    ob_gguf_writer_free(w);
    unlink(path);
}

/* Fixed encodings of the shared tokenizers (reference ids from HF tokenizers). */
static void test_real(void) {
    const struct { const char *path; const char *text; int n; int32_t ids[16]; } cases[] = {
        { "../shared/data/tokenizers/qwen3/tokenizer.json", "Hello world, <|im_start|> 123", 9,
          { 9707, 1879, 11, 220, 151644, 220, 16, 17, 18 } },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (access(cases[i].path, R_OK) != 0) { fprintf(stderr, "skip %s\n", cases[i].path); continue; }
        char err[256];
        ob_tokenizer *t = NULL;
        ob_status st = ob_tokenizer_from_json(cases[i].path, &t, err, sizeof(err));
        CHECKF(st == OB_OK, "%s", err);
        if (!t) continue;
        int32_t ids[64];
        int n = ob_tokenize(t, cases[i].text, strlen(cases[i].text), ids, 64, true, true);
        CHECKF(n == cases[i].n, "%s: n=%d", cases[i].path, n);
        for (int k = 0; k < n && k < cases[i].n; k++) CHECK(ids[k] == cases[i].ids[k]);
        ob_tokenizer_free(t);
    }
}

int main(void) {
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    test_tiny_bpe();
    test_bad_files();
    test_gguf_spm();
    test_real();
    rmdir(g_dir);
    return ob_test_done("test_tokenizer");
}
