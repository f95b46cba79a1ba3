/* 1bit tokenize -m MODEL.gguf|tokenizer.json [--ids] [--pieces] [--no-special]
 *                [--no-parse-special] [TEXT...]
 * Prints the token ids as a JSON array (and/or the pieces as a JSON array of strings).
 * TEXT arguments are joined by single spaces; without TEXT, stdin is read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include "app/commands.h"
#include "tokenizer/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f, "usage: 1bit tokenize -m MODEL.gguf|tokenizer.json [--ids] [--pieces] [--no-special]\n"
               "                     [--no-parse-special] [TEXT...]   (stdin when no TEXT)\n");
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* JSON string of raw bytes: escapes controls, quotes and backslashes; bytes that are not
 * valid UTF-8 (a piece may be half a character) become U+FFFD. */
static void print_json_bytes(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { printf("\\%c", c); i++; }
        else if (c < 0x20) { printf("\\u%04x", c); i++; }
        else if (c < 0x80) { putchar(c); i++; }
        else {
            utf8proc_int32_t cp;
            utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
            if (l > 0) { fwrite(s + i, 1, (size_t)l, stdout); i += (size_t)l; }
            else { fputs("\\ufffd", stdout); i++; }
        }
    }
    putchar('"');
}

static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
    size_t r;
    while ((r = fread(b + n, 1, cap - n, stdin)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(b, cap * 2);
            if (!nb) { free(b); return NULL; }
            b = nb; cap *= 2;
        }
    }
    *len = n;
    return b;
}

int ob_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL;
    bool ids = false, pieces = false, add_special = true, parse_special = true;
    size_t text_cap = 1, text_len = 0;
    char *text = NULL;
    int first_text = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) model = argv[++i];
        else if (!strcmp(a, "--ids")) ids = true;
        else if (!strcmp(a, "--pieces")) pieces = true;
        else if (!strcmp(a, "--no-special")) add_special = false;
        else if (!strcmp(a, "--no-parse-special")) parse_special = false;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--")) { first_text = i + 1; break; }
        else if (a[0] == '-' && a[1]) { fprintf(stderr, "tokenize: unknown option %s\n", a); usage(stderr); return 2; }
        else { first_text = i; break; }
    }
    if (!model) { fprintf(stderr, "tokenize: -m MODEL is required\n"); usage(stderr); return 2; }
    if (!ids && !pieces) ids = true;
    if (first_text >= 0 && first_text < argc) {
        for (int i = first_text; i < argc; i++) text_cap += strlen(argv[i]) + 1;
        text = malloc(text_cap);
        if (!text) { fprintf(stderr, "tokenize: out of memory\n"); return 1; }
        for (int i = first_text; i < argc; i++) {
            if (i > first_text) text[text_len++] = ' ';
            memcpy(text + text_len, argv[i], strlen(argv[i]));
            text_len += strlen(argv[i]);
        }
    } else {
        text = read_stdin(&text_len);
        if (!text) { fprintf(stderr, "tokenize: cannot read stdin\n"); return 1; }
    }
    char err[512] = "";
    ob_tokenizer *t = NULL;
    ob_status st;
    if (ends_with(model, ".gguf")) {
        ob_gguf *g = NULL;
        st = ob_gguf_open(model, &g, err, sizeof(err));
        if (st == OB_OK) { st = ob_tokenizer_from_gguf(g, &t, err, sizeof(err)); ob_gguf_close(g); }
    } else {
        st = ob_tokenizer_from_json(model, &t, err, sizeof(err));
    }
    if (st != OB_OK) { fprintf(stderr, "tokenize: %s\n", err); free(text); return 1; }
    int n = ob_tokenize(t, text, text_len, NULL, 0, add_special, parse_special);
    int32_t *v = n > 0 ? malloc((size_t)n * sizeof(int32_t)) : NULL;
    if (n < 0 || (n > 0 && !v)) {
        fprintf(stderr, "tokenize: encoding failed\n");
        free(v); free(text); ob_tokenizer_free(t); return 1;
    }
    if (n > 0) ob_tokenize(t, text, text_len, v, n, add_special, parse_special);
    if (ids) {
        putchar('[');
        for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", (int)v[i]);
        puts("]");
    }
    if (pieces) {
        putchar('[');
        for (int i = 0; i < n; i++) {
            size_t pl;
            const char *p = ob_token_piece(t, v[i], &pl);
            if (i) fputs(", ", stdout);
            print_json_bytes(p, pl);
        }
        puts("]");
    }
    free(v); free(text);
    ob_tokenizer_free(t);
    return 0;
}
