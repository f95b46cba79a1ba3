/* Chunking of text and markdown for retrieval. Paragraphs (blank-line separated) are
 * packed into chunks of about max_words words; a markdown heading closes the chunk in
 * progress, and the path of headings above a chunk ("Sourdough bread > Baking") is its
 * first line, so a chunk keeps the context it was written in. A paragraph longer than a chunk is cut
 * after the sentence end nearest below the limit, or at the limit. */
#include "rag/rag.h"
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct sbuf { char *p; size_t n, cap; bool oom; } sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p; b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

typedef struct chunker {
    ob_rag_chunk **out; int *n; int cap;
    sbuf cur; int cur_words, cur_line;
    char heading[6][256];    /* current heading of each markdown level */
    int max_words;
    bool oom;
} chunker;

static int count_words(const char *s, size_t n) {
    int w = 0;
    bool in = false;
    for (size_t i = 0; i < n; i++) {
        bool sp = isspace((unsigned char)s[i]);
        if (!sp && !in) w++;
        in = !sp;
    }
    return w;
}

static void emit(chunker *c) {
    if (c->cur.oom) c->oom = true;
    if (c->cur_words == 0 || c->oom) { c->cur.n = 0; c->cur_words = 0; return; }
    if (*c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 64;
        ob_rag_chunk *p = realloc(*c->out, sizeof(ob_rag_chunk) * (size_t)cap);
        if (!p) { c->oom = true; return; }
        *c->out = p; c->cap = cap;
    }
    char *t = strndup(c->cur.p, c->cur.n);
    if (!t) { c->oom = true; return; }
    (*c->out)[*c->n] = (ob_rag_chunk){t, c->cur_line};
    (*c->n)++;
    c->cur.n = 0;
    c->cur_words = 0;
}

/* Appends a piece of text (part of a paragraph) starting at line. */
static void add_piece(chunker *c, const char *s, size_t n, int line, int words) {
    if (c->cur_words && c->cur_words + words > c->max_words) emit(c);
    if (c->cur_words == 0) {
        c->cur_line = line;
        /* The heading path ("Sourdough bread > Baking") gives a chunk the context it was written in. */
        bool any = false;
        for (int h = 0; h < 6; h++) {
            if (!c->heading[h][0]) continue;
            if (any) sb_add(&c->cur, " > ", 3);
            sb_add(&c->cur, c->heading[h], strlen(c->heading[h]));
            any = true;
        }
        if (any) sb_add(&c->cur, "\n", 1);
    } else {
        sb_add(&c->cur, "\n", 1);
    }
    sb_add(&c->cur, s, n);
    c->cur_words += words;
}

/* A paragraph: packed whole if it fits, else cut at sentence ends. */
static void add_para(chunker *c, const char *s, size_t n, int line) {
    int words = count_words(s, n);
    if (words == 0) return;
    if (words <= c->max_words) { add_piece(c, s, n, line, words); return; }
    size_t start = 0;
    while (start < n) {
        int w = 0;
        bool in = false;
        size_t i = start, cut = 0, hard = n;
        for (; i < n; i++) {
            bool sp = isspace((unsigned char)s[i]);
            if (!sp && !in && ++w > c->max_words) { hard = i; break; }
            in = !sp;
            if ((s[i] == '.' || s[i] == '!' || s[i] == '?') && (i + 1 == n || isspace((unsigned char)s[i + 1]))) cut = i + 1;
        }
        size_t end = hard == n ? n : cut > start ? cut : hard;
        add_piece(c, s + start, end - start, line, count_words(s + start, end - start));
        emit(c);
        start = end;
        while (start < n && isspace((unsigned char)s[start])) start++;
    }
}

ob_status ob_rag_chunk_text(const char *text, size_t len, int max_words, ob_rag_chunk **chunks, int *n,
                            char *err, size_t err_len) {
    chunker c = {.out = chunks, .n = n, .cap = *n, .max_words = max_words > 0 ? max_words : 120};
    size_t i = 0, para = 0, para_end = 0;
    int line = 1, para_line = 1;
    bool in_para = false;
    while (i < len && !c.oom) {
        size_t e = i;
        while (e < len && text[e] != '\n') e++;
        const char *l = text + i;
        size_t ll = e - i;
        while (ll && isspace((unsigned char)l[ll - 1])) ll--;
        size_t lead = 0;
        while (lead < ll && isspace((unsigned char)l[lead])) lead++;
        bool blank = lead == ll, heading = !blank && l[lead] == '#';
        if (blank || heading) {
            if (in_para) add_para(&c, text + para, para_end - para, para_line);
            in_para = false;
            if (heading) {
                emit(&c);
                size_t lv = lead;
                while (lv < ll && l[lv] == '#') lv++;
                int level = (int)OB_MIN(lv - lead, 6) - 1;
                while (lv < ll && isspace((unsigned char)l[lv])) lv++;
                snprintf(c.heading[level], sizeof(c.heading[level]), "%.*s", (int)OB_MIN(ll - lv, 255), l + lv);
                for (int h = level + 1; h < 6; h++) c.heading[h][0] = 0;
            }
        } else {
            if (!in_para) { in_para = true; para = i + lead; para_line = line; }
            para_end = i + ll;
        }
        i = e + 1;
        line++;
    }
    if (in_para) add_para(&c, text + para, para_end - para, para_line);
    emit(&c);
    free(c.cur.p);
    if (c.oom) return ob_fail(err, err_len, OB_ERR_NOMEM, "rag: out of memory while chunking");
    return OB_OK;
}

void ob_rag_chunks_free(ob_rag_chunk *c, int n) {
    for (int i = 0; i < n; i++) free(c[i].text);
    free(c);
}
