/* Jinja lexer: template text -> tokens, applying jinja2's whitespace rules as
 * transformers configures them (trim_blocks + lstrip_blocks), `-` modifiers, comments and
 * {% raw %}. Newlines are normalised to \n and one trailing newline is dropped, as
 * jinja2 does with keep_trailing_newline=False. */
#include "chat/jinja_int.h"
#include <stdlib.h>
#include <ctype.h>

static void push(jj_ctx *c, jj_tok t) {
    if (c->ntok == c->captok) {
        size_t nc = c->captok ? c->captok * 2 : 256;
        jj_tok *nt = jj_alloc(c, nc * sizeof(jj_tok));
        if (c->ntok) memcpy(nt, c->toks, c->ntok * sizeof(jj_tok));
        c->toks = nt;
        c->captok = nc;
    }
    c->toks[c->ntok++] = t;
}

/* Positions are asked for mostly in increasing order: count on from the last answer. */
static int line_at(jj_ctx *c, size_t pos) {
    if (pos < c->line_pos) { c->line_pos = 0; c->line_cur = 1; }
    for (size_t i = c->line_pos; i < pos && i < c->src_n; i++) c->line_cur += c->src[i] == '\n';
    c->line_pos = pos;
    return c->line_cur;
}

/* Whitespace as Python's \s in a str regex (the `-` modifiers strip with \s*). */
static size_t skip_space(const jj_ctx *c, size_t i) {
    size_t cl;
    while (i < c->src_n && jj_is_space_at(c->src, c->src_n, i, &cl)) i += cl;
    return i;
}

static size_t rstrip_len(const char *p, size_t n) {
    /* walk forward so multi-byte spaces are found; keep the end of the last non-space */
    size_t end = 0, i = 0, cl;
    while (i < n) {
        if (jj_is_space_at(p, n, i, &cl)) i += cl;
        else { i += 1; while (i < n && ((unsigned char)p[i] & 0xC0) == 0x80) i++; end = i; }
    }
    return end;
}

static void emit_data(jj_ctx *c, const char *p, size_t n, size_t pos) {
    if (!n) return;
    jj_tok t = {0};
    t.kind = TK_DATA; t.p = p; t.n = n; t.line = line_at(c, pos);
    push(c, t);
}

/* Python unicode-escape decoding of a string literal body (jinja2 does the same). */
static void unescape(jj_ctx *c, const char *p, size_t n, jj_tok *t) {
    jj_buf b = {0};
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        if (ch != '\\' || i + 1 >= n) { jj_buf_putc(c, &b, ch); continue; }
        char e = p[++i];
        uint32_t cp = 0; int want = 0;
        switch (e) {
        case 'n': jj_buf_putc(c, &b, '\n'); break;
        case 't': jj_buf_putc(c, &b, '\t'); break;
        case 'r': jj_buf_putc(c, &b, '\r'); break;
        case '\\': jj_buf_putc(c, &b, '\\'); break;
        case '\'': jj_buf_putc(c, &b, '\''); break;
        case '"': jj_buf_putc(c, &b, '"'); break;
        case 'a': jj_buf_putc(c, &b, '\a'); break;
        case 'b': jj_buf_putc(c, &b, '\b'); break;
        case 'f': jj_buf_putc(c, &b, '\f'); break;
        case 'v': jj_buf_putc(c, &b, '\v'); break;
        case '\n': break; /* line continuation */
        case 'x': want = 2; break;
        case 'u': want = 4; break;
        case 'U': want = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                int k = 0;
                while (k < 3 && i < n && p[i] >= '0' && p[i] <= '7') { cp = cp * 8 + (uint32_t)(p[i] - '0'); i++; k++; }
                i--;
                want = -1;
            } else {
                jj_buf_putc(c, &b, '\\'); jj_buf_putc(c, &b, e);
            }
        }
        if (want > 0) {
            for (int k = 0; k < want; k++) {
                if (i + 1 >= n || !isxdigit((unsigned char)p[i + 1])) jj_fail(c, "line %d: truncated \\%c escape in string literal", t->line, e);
                char h = p[++i];
                cp = cp * 16 + (uint32_t)(isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
            }
        }
        if (want) {
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) jj_fail(c, "line %d: escape \\%c gives an invalid code point", t->line, e);
            char u[4]; size_t un;
            if (cp < 0x80) { u[0] = (char)cp; un = 1; }
            else if (cp < 0x800) { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); un = 2; }
            else if (cp < 0x10000) { u[0] = (char)(0xE0 | (cp >> 12)); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[2] = (char)(0x80 | (cp & 0x3F)); un = 3; }
            else { u[0] = (char)(0xF0 | (cp >> 18)); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)); u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); un = 4; }
            jj_buf_put(c, &b, u, un);
        }
    }
    t->p = b.p ? b.p : "";
    t->n = b.n;
}

static const struct { const char *s; jj_op op; } k_ops[] = {
    {"//", OP_FLOORDIV}, {"**", OP_POW}, {"==", OP_EQ}, {"!=", OP_NE}, {"<=", OP_LE}, {">=", OP_GE},
    {"+", OP_ADD}, {"-", OP_SUB}, {"*", OP_MUL}, {"/", OP_DIV}, {"%", OP_MOD}, {"~", OP_TILDE},
    {"[", OP_LBRACKET}, {"]", OP_RBRACKET}, {"(", OP_LPAREN}, {")", OP_RPAREN}, {"{", OP_LBRACE},
    {"}", OP_RBRACE}, {"<", OP_LT}, {">", OP_GT}, {"=", OP_ASSIGN}, {".", OP_DOT}, {":", OP_COLON},
    {"|", OP_PIPE}, {",", OP_COMMA}, {";", OP_SEMI},
};

/* Lexes the inside of a {{ }} or {% %} tag starting at i; returns the index after the
 * closing delimiter (and after whatever whitespace its modifier or trim_blocks eats). */
static size_t lex_tag(jj_ctx *c, size_t i, bool block) {
    const char *s = c->src;
    size_t n = c->src_n;
    int balance = 0;
    for (;;) {
        while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f' || s[i] == '\v')) i++;
        if (i >= n) jj_fail(c, "line %d: unexpected end of template: unterminated '%s' tag", line_at(c, i), block ? "{%" : "{{");
        int line = line_at(c, i);
        if (balance == 0) {
            const char *end = block ? "%}" : "}}";
            if (s[i] == '-' && i + 2 < n && s[i + 1] == end[0] && s[i + 2] == end[1]) {
                jj_tok t = {0}; t.kind = block ? TK_BLOCK_END : TK_VAR_END; t.line = line; push(c, t);
                return skip_space(c, i + 3);
            }
            if (s[i] == end[0] && i + 1 < n && s[i + 1] == end[1]) {
                jj_tok t = {0}; t.kind = block ? TK_BLOCK_END : TK_VAR_END; t.line = line; push(c, t);
                i += 2;
                if (block && i < n && s[i] == '\n') i++; /* trim_blocks */
                return i;
            }
        }
        jj_tok t = {0};
        t.line = line;
        unsigned char ch = (unsigned char)s[i];
        if (isalpha(ch) || ch == '_') {
            size_t j = i;
            while (j < n && (isalnum((unsigned char)s[j]) || s[j] == '_')) j++;
            t.kind = TK_NAME; t.p = s + i; t.n = j - i;
            push(c, t);
            i = j;
        } else if (isdigit(ch)) {
            size_t j = i;
            bool is_float = false;
            while (j < n && (isdigit((unsigned char)s[j]) || (s[j] == '_' && j + 1 < n && isdigit((unsigned char)s[j + 1])))) j++;
            if (j + 1 < n && s[j] == '.' && isdigit((unsigned char)s[j + 1])) {
                is_float = true;
                j++;
                while (j < n && (isdigit((unsigned char)s[j]) || (s[j] == '_' && j + 1 < n && isdigit((unsigned char)s[j + 1])))) j++;
            }
            if (j < n && (s[j] == 'e' || s[j] == 'E')) {
                size_t k = j + 1;
                if (k < n && (s[k] == '+' || s[k] == '-')) k++;
                if (k < n && isdigit((unsigned char)s[k])) {
                    is_float = true;
                    j = k;
                    while (j < n && isdigit((unsigned char)s[j])) j++;
                }
            }
            char tmp[128];
            size_t tn = 0;
            for (size_t k = i; k < j && tn + 1 < sizeof tmp; k++) if (s[k] != '_') tmp[tn++] = s[k];
            tmp[tn] = 0;
            if (j - i >= sizeof tmp - 1) jj_fail(c, "line %d: number literal too long", line);
            if (is_float) { t.kind = TK_FLOAT; t.f = strtod(tmp, NULL); }
            else {
                char *e;
                unsigned long long v = strtoull(tmp, &e, 10);
                if (v > (unsigned long long)INT64_MAX || tn > 19) jj_fail(c, "line %d: integer literal %s is too large", line, tmp);
                t.kind = TK_INT; t.i = (int64_t)v;
            }
            push(c, t);
            i = j;
        } else if (ch == '\'' || ch == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != (char)ch) { if (s[j] == '\\') j++; j++; }
            if (j >= n) jj_fail(c, "line %d: unterminated string literal", line);
            t.kind = TK_STRING;
            unescape(c, s + i + 1, j - i - 1, &t);
            push(c, t);
            i = j + 1;
        } else {
            size_t k;
            for (k = 0; k < OB_ARRAY_LEN(k_ops); k++) {
                size_t l = strlen(k_ops[k].s);
                if (i + l <= n && memcmp(s + i, k_ops[k].s, l) == 0) break;
            }
            if (k == OB_ARRAY_LEN(k_ops)) jj_fail(c, "line %d: unexpected character '%c' in tag", line, s[i]);
            t.kind = TK_OP; t.op = k_ops[k].op; t.p = k_ops[k].s; t.n = strlen(k_ops[k].s);
            if (t.op == OP_LBRACKET || t.op == OP_LPAREN || t.op == OP_LBRACE) balance++;
            if (t.op == OP_RBRACKET || t.op == OP_RPAREN || t.op == OP_RBRACE) {
                if (balance == 0) jj_fail(c, "line %d: unexpected '%s'", line, t.p);
                balance--;
            }
            push(c, t);
            i += t.n;
        }
    }
}

/* Is src[i..] "{%" [-+]? ws "endraw" ws [-+]? "%}"? Returns its length, 0 if not. */
static size_t match_endraw(jj_ctx *c, size_t i, bool *lead_minus, bool *trail_minus) {
    const char *s = c->src;
    size_t n = c->src_n, j = i + 2;
    if (i + 2 > n || s[i] != '{' || s[i + 1] != '%') return 0;
    *lead_minus = j < n && s[j] == '-';
    if (j < n && (s[j] == '-' || s[j] == '+')) j++;
    while (j < n && isspace((unsigned char)s[j])) j++;
    if (j + 6 > n || memcmp(s + j, "endraw", 6) != 0) return 0;
    j += 6;
    while (j < n && isspace((unsigned char)s[j])) j++;
    *trail_minus = j < n && s[j] == '-';
    if (j < n && s[j] == '-') j++;
    if (j + 2 > n || s[j] != '%' || s[j + 1] != '}') return 0;
    return j + 2 - i;
}

static bool is_raw_tag(const jj_ctx *c, size_t i, size_t *after) {
    const char *s = c->src;
    size_t n = c->src_n, j = i;
    if (j < n && (s[j] == '-' || s[j] == '+')) j++;
    while (j < n && isspace((unsigned char)s[j])) j++;
    if (j + 3 > n || memcmp(s + j, "raw", 3) != 0) return false;
    j += 3;
    while (j < n && isspace((unsigned char)s[j])) j++;
    bool minus = j < n && s[j] == '-';
    if (minus) j++;
    if (j + 2 > n || s[j] != '%' || s[j + 1] != '}') return false;
    j += 2;
    if (minus) j = skip_space(c, j);
    else if (j < n && s[j] == '\n') j++;
    *after = j;
    return true;
}

void jj_lex(jj_ctx *c) {
    /* normalise newlines, drop one trailing newline */
    char *src = jj_alloc(c, c->src_n + 1);
    size_t m = 0;
    for (size_t i = 0; i < c->src_n; i++) {
        if (c->src[i] == '\r') { src[m++] = '\n'; if (i + 1 < c->src_n && c->src[i + 1] == '\n') i++; }
        else src[m++] = c->src[i];
    }
    if (m && src[m - 1] == '\n') m--;
    src[m] = 0;
    c->src = src;
    c->src_n = m;

    const char *s = c->src;
    size_t n = c->src_n, pos = 0;
    while (pos < n) {
        size_t i = pos;
        while (i + 1 < n && !(s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#'))) i++;
        if (i + 1 >= n) { emit_data(c, s + pos, n - pos, pos); break; }
        char kind = s[i + 1];
        char mod = i + 2 < n ? s[i + 2] : 0;
        size_t text_n = i - pos;
        if (mod == '-') text_n = rstrip_len(s + pos, text_n);
        else if (mod != '+' && kind != '{') {
            /* lstrip_blocks: drop spaces/tabs between the line start and a block/comment */
            size_t lpos = text_n;
            while (lpos > 0 && s[pos + lpos - 1] != '\n') lpos--;
            bool line_starting = pos == 0 || s[pos - 1] == '\n';
            if (lpos > 0 || line_starting) {
                bool only_ws = true;
                for (size_t k = lpos; k < text_n; k++) if (s[pos + k] != ' ' && s[pos + k] != '\t') { only_ws = false; break; }
                if (only_ws) text_n = lpos;
            }
        }
        emit_data(c, s + pos, text_n, pos);
        size_t body = i + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
        if (kind == '#') {
            size_t j = body;
            while (j + 1 < n && !(s[j] == '#' && s[j + 1] == '}')) j++;
            if (j + 1 >= n) jj_fail(c, "line %d: unterminated comment", line_at(c, i));
            if (j > body && s[j - 1] == '-') pos = skip_space(c, j + 2);
            else { pos = j + 2; if (pos < n && s[pos] == '\n') pos++; }
            continue;
        }
        size_t after_raw;
        if (kind == '%' && is_raw_tag(c, i + 2, &after_raw)) {
            size_t j = after_raw, len = 0;
            bool lm = false, tm = false;
            while (j < n && !(len = match_endraw(c, j, &lm, &tm))) j++;
            if (j >= n) jj_fail(c, "line %d: unterminated {%% raw %%} block (missing endraw)", line_at(c, i));
            size_t rn = j - after_raw;
            if (lm) rn = rstrip_len(s + after_raw, rn);
            else {
                size_t lpos = rn;
                while (lpos > 0 && s[after_raw + lpos - 1] != '\n') lpos--;
                bool ws = true;
                for (size_t k = lpos; k < rn; k++) if (s[after_raw + k] != ' ' && s[after_raw + k] != '\t') ws = false;
                if (ws && (lpos > 0 || s[after_raw - 1] == '\n')) rn = lpos;
            }
            emit_data(c, s + after_raw, rn, after_raw);
            pos = j + len;
            if (tm) pos = skip_space(c, pos);
            else if (pos < n && s[pos] == '\n') pos++;
            continue;
        }
        jj_tok t = {0};
        t.kind = kind == '{' ? TK_VAR_BEGIN : TK_BLOCK_BEGIN;
        t.line = line_at(c, i);
        push(c, t);
        pos = lex_tag(c, body, kind == '%');
    }
    jj_tok e = {0};
    e.kind = TK_EOF; e.line = line_at(c, n);
    push(c, e);
}
