/* A JSON-schema "pattern" (ECMA-262 regular expression) as a GBNF expression over the
 * inside of a JSON string: literals, '.', classes with ranges and negation, \d \w \s and
 * their negations, groups ((...), (?:...), (?<name>...)), alternation, * + ? {m} {m,}
 * {m,n} (lazy forms read as greedy), and ^ / $ at the ends. A pattern without ^ (or $)
 * may have any text before (or after) its match, as JSON Schema's unanchored search
 * means. Characters the JSON text must escape (quote, backslash, controls) are matched
 * in their escaped spelling. Backreferences, lookaround and word boundaries are refused. */
#include "grammar/grammar_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rx {
    const char *s;
    size_t n, pos;
    ob_gtext *o;
    char *err;
    size_t err_len;
    ob_status st;
} rx;

static bool fail(rx *r, ob_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(rx *r, ob_status st, const char *fmt, ...) {
    if (r->st) return false;
    r->st = st;
    if (r->err && r->err_len) {
        int k = snprintf(r->err, r->err_len, "pattern, at offset %zu: ", r->pos);
        if (k > 0 && (size_t)k < r->err_len) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(r->err + k, r->err_len - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return false;
}

/* A growable code point set. */
typedef struct cpset { ob_cp_range *r; int n, cap; bool oom; } cpset;

static void set_add(cpset *s, uint32_t lo, uint32_t hi) {
    if (s->n + 3 > s->cap) {
        int c = s->cap ? s->cap * 2 : 16;
        while (c < s->n + 3) c *= 2;
        ob_cp_range *q = realloc(s->r, (size_t)c * sizeof *q);
        if (!q) { s->oom = true; return; }
        s->r = q;
        s->cap = c;
    }
    s->r[s->n++] = (ob_cp_range){lo, hi};
}

/* \d \w \s (upper case: the complement, added as such). */
static void add_shorthand(cpset *s, char c) {
    cpset t = {0};
    char lower = (char)(c | 0x20);
    if (lower == 'd') set_add(&t, '0', '9');
    else if (lower == 'w') { set_add(&t, '0', '9'); set_add(&t, 'A', 'Z'); set_add(&t, 'a', 'z'); set_add(&t, '_', '_'); }
    else {
        static const uint32_t ws[][2] = {{9, 13}, {32, 32}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                         {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                                         {0xFEFF, 0xFEFF}};
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) set_add(&t, ws[i][0], ws[i][1]);
    }
    if (t.oom) { s->oom = true; free(t.r); return; }
    ob_cp_ranges_normalize(t.r, &t.n, c != lower);
    for (int i = 0; i < t.n; i++) set_add(s, t.r[i].lo, t.r[i].hi);
    free(t.r);
}

static void put_cp(ob_gtext *o, uint32_t c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) ob_gtext_printf(o, "%c", (char)c);
    else if (c <= 0xFFFF) ob_gtext_printf(o, "\\u%04X", (unsigned)c);
    else ob_gtext_printf(o, "\\U%08X", (unsigned)c);
}

/* A JSON-escaped spelling of a character that cannot appear raw in a JSON string. */
static void put_escaped(ob_gtext *o, uint32_t c) {
    if (c == '"') ob_gtext_puts(o, "\"\\\\\\\"\"");
    else if (c == '\\') ob_gtext_puts(o, "\"\\\\\\\\\"");
    else if (c == '\n') ob_gtext_puts(o, "\"\\\\n\"");
    else if (c == '\t') ob_gtext_puts(o, "\"\\\\t\"");
    else if (c == '\r') ob_gtext_puts(o, "\"\\\\r\"");
    else if (c == '\b') ob_gtext_puts(o, "\"\\\\b\"");
    else if (c == '\f') ob_gtext_puts(o, "\"\\\\f\"");
    else ob_gtext_printf(o, "\"\\\\u%04x\"", (unsigned)c);
}

static bool special(uint32_t c) { return c < 0x20 || c == '"' || c == '\\' || c == 0x7F; }

/* A normalised set as: ( [raw members] | escaped members ). */
static void emit_set(ob_gtext *o, const ob_cp_range *r, int n) {
    ob_gtext_puts(o, "( ");
    bool first = true, any_raw = false;
    for (int i = 0; i < n; i++)
        for (uint32_t c = r[i].lo; c <= r[i].hi && !any_raw; c++) {
            if (!special(c)) any_raw = true;
            if (c >= 0x80) break; /* past ASCII every member is raw */
        }
    if (any_raw) {
        ob_gtext_puts(o, "[");
        for (int i = 0; i < n; i++) {
            /* split around the specials: [0,1F], '"' (22), '\\' (5C), 7F */
            uint32_t lo = r[i].lo, hi = r[i].hi;
            while (lo <= hi) {
                while (lo <= hi && special(lo)) lo++;
                if (lo > hi) break;
                uint32_t e = lo;
                while (e < hi && !special(e + 1)) e++;
                put_cp(o, lo);
                if (e > lo) { ob_gtext_puts(o, "-"); put_cp(o, e); }
                if (e == hi) break;
                lo = e + 1;
            }
        }
        ob_gtext_puts(o, "]");
        first = false;
    }
    for (int i = 0; i < n; i++)
        for (uint32_t c = r[i].lo; c <= r[i].hi && c < 0x80; c++)
            if (special(c)) {
                if (!first) ob_gtext_puts(o, " | ");
                first = false;
                put_escaped(o, c);
            }
    if (first) ob_gtext_puts(o, "[^\\U00000000-\\U0010FFFF]"); /* the empty set: matches nothing */
    ob_gtext_puts(o, " )");
}

static bool emit_cpset(rx *r, cpset *s, bool negate) {
    if (s->oom) return fail(r, OB_ERR_NOMEM, "out of memory");
    set_add(s, 1, 0); /* room for normalisation (+2) */
    set_add(s, 1, 0);
    if (s->oom) return fail(r, OB_ERR_NOMEM, "out of memory");
    s->n -= 2;
    ob_cp_ranges_normalize(s->r, &s->n, negate);
    emit_set(r->o, s->r, s->n);
    return true;
}

static int hexv(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One UTF-8 character of the pattern. */
static bool next_cp(rx *r, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)r->s + r->pos;
    size_t left = r->n - r->pos;
    unsigned char c = s[0];
    int n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!n || (size_t)n > left) return fail(r, OB_ERR_FORMAT, "invalid UTF-8");
    uint32_t v = n == 1 ? c : n == 2 ? c & 0x1Fu : n == 3 ? c & 0x0Fu : c & 0x07u;
    for (int i = 1; i < n; i++) v = v << 6 | (s[i] & 0x3Fu);
    r->pos += (size_t)n;
    *cp = v;
    return true;
}

/* After a backslash: a single character (*cp), or a shorthand class added to set (returns
 * true with *cp = -1). */
static bool parse_escape(rx *r, cpset *set, int64_t *cp) {
    if (r->pos >= r->n) return fail(r, OB_ERR_FORMAT, "a trailing backslash");
    char e = r->s[r->pos++];
    switch (e) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        add_shorthand(set, e);
        *cp = -1;
        return true;
    case 'n': *cp = '\n'; return true;
    case 'r': *cp = '\r'; return true;
    case 't': *cp = '\t'; return true;
    case 'f': *cp = '\f'; return true;
    case 'v': *cp = '\v'; return true;
    case '0': *cp = 0; return true;
    case 'x': case 'u': {
        int digits = e == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = r->pos < r->n ? hexv(r->s[r->pos]) : -1;
            if (h < 0) return fail(r, OB_ERR_FORMAT, "'\\%c' needs %d hex digits", e, digits);
            v = v * 16 + (uint32_t)h;
            r->pos++;
        }
        *cp = v;
        return true;
    }
    case 'b': case 'B': return fail(r, OB_ERR_UNSUPPORTED, "word boundaries (\\%c) are not supported", e);
    case 'p': case 'P': return fail(r, OB_ERR_UNSUPPORTED, "Unicode property classes (\\%c) are not supported", e);
    case 'c': case 'k': return fail(r, OB_ERR_UNSUPPORTED, "'\\%c' is not supported", e);
    default:
        if (e >= '1' && e <= '9') return fail(r, OB_ERR_UNSUPPORTED, "backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) return fail(r, OB_ERR_FORMAT, "unknown escape '\\%c'", e);
        r->pos--;
        uint32_t v;
        if (!next_cp(r, &v)) return false;
        *cp = v; /* escaped punctuation stands for itself */
        return true;
    }
}

static bool parse_class(rx *r) {
    size_t start = r->pos - 1;
    bool negate = r->pos < r->n && r->s[r->pos] == '^';
    if (negate) r->pos++;
    cpset set = {0};
    bool first = true, ok = true;
    while (ok && r->pos < r->n && (r->s[r->pos] != ']' || first)) {
        first = false;
        int64_t a;
        if (r->s[r->pos] == '\\') { r->pos++; ok = parse_escape(r, &set, &a); }
        else { uint32_t v; ok = next_cp(r, &v); a = v; }
        if (!ok || a < 0) continue;
        int64_t b = a;
        if (r->pos + 1 < r->n && r->s[r->pos] == '-' && r->s[r->pos + 1] != ']') {
            r->pos++;
            if (r->s[r->pos] == '\\') { r->pos++; ok = parse_escape(r, &set, &b); }
            else { uint32_t v; ok = next_cp(r, &v); b = v; }
            if (ok && (b < 0 || b < a)) ok = fail(r, OB_ERR_FORMAT, "a bad range in a character class");
        }
        if (ok) set_add(&set, (uint32_t)a, (uint32_t)b);
    }
    if (ok && r->pos >= r->n) { r->pos = start; ok = fail(r, OB_ERR_FORMAT, "unclosed '['"); }
    if (ok) {
        r->pos++;
        ok = emit_cpset(r, &set, negate);
    }
    free(set.r);
    return ok;
}

static bool parse_alt(rx *r, int depth);

static bool parse_atom(rx *r, int depth) {
    char c = r->s[r->pos];
    if (c == '(') {
        r->pos++;
        if (r->pos < r->n && r->s[r->pos] == '?') {
            if (r->pos + 1 < r->n && r->s[r->pos + 1] == ':') r->pos += 2;
            else if (r->pos + 2 < r->n && r->s[r->pos + 1] == '<' && r->s[r->pos + 2] != '=' && r->s[r->pos + 2] != '!') {
                const char *close = memchr(r->s + r->pos, '>', r->n - r->pos);
                if (!close) return fail(r, OB_ERR_FORMAT, "unfinished group name");
                r->pos = (size_t)(close - r->s) + 1;
            } else {
                return fail(r, OB_ERR_UNSUPPORTED, "lookaround and other (?...) groups are not supported");
            }
        }
        ob_gtext_puts(r->o, "( ");
        if (!parse_alt(r, depth + 1)) return false;
        if (r->pos >= r->n || r->s[r->pos] != ')') return fail(r, OB_ERR_FORMAT, "unclosed '('");
        r->pos++;
        ob_gtext_puts(r->o, " )");
        return true;
    }
    if (c == '[') {
        r->pos++;
        return parse_class(r);
    }
    if (c == '.') { /* anything but line terminators */
        r->pos++;
        cpset set = {0};
        set_add(&set, '\n', '\n');
        set_add(&set, '\r', '\r');
        set_add(&set, 0x2028, 0x2029);
        bool ok = emit_cpset(r, &set, true);
        free(set.r);
        return ok;
    }
    if (c == '^' || c == '$')
        return fail(r, OB_ERR_UNSUPPORTED, "'%c' is supported only at the start / end of the pattern", c);
    if (c == '*' || c == '+' || c == '?' || c == '{') return fail(r, OB_ERR_FORMAT, "'%c' has nothing to repeat", c);
    int64_t cp;
    cpset set = {0};
    if (c == '\\') {
        r->pos++;
        if (!parse_escape(r, &set, &cp)) { free(set.r); return false; }
        if (cp < 0) {
            bool ok = emit_cpset(r, &set, false);
            free(set.r);
            return ok;
        }
    } else {
        uint32_t v;
        if (!next_cp(r, &v)) return false;
        cp = v;
    }
    free(set.r);
    if (special((uint32_t)cp)) put_escaped(r->o, (uint32_t)cp);
    else {
        if (cp >= 0xD800 && cp <= 0xDFFF) return fail(r, OB_ERR_UNSUPPORTED, "surrogate escapes are not supported");
        char u[4];
        ob_gtext_literal(r->o, u, (size_t)ob_utf8_put((uint32_t)cp, u));
    }
    return true;
}

static bool parse_count(rx *r, long *v) {
    long x = 0;
    if (r->pos >= r->n || r->s[r->pos] < '0' || r->s[r->pos] > '9') return fail(r, OB_ERR_FORMAT, "expected a number in {}");
    while (r->pos < r->n && r->s[r->pos] >= '0' && r->s[r->pos] <= '9') {
        x = x * 10 + (r->s[r->pos++] - '0');
        if (x > OB_GRAMMAR_MAX_REPEAT)
            return fail(r, OB_ERR_UNSUPPORTED, "repetition counts over %d are not supported", OB_GRAMMAR_MAX_REPEAT);
    }
    *v = x;
    return true;
}

static bool parse_concat(rx *r, int depth) {
    bool any = false;
    while (r->pos < r->n && r->s[r->pos] != '|' && r->s[r->pos] != ')') {
        if (any) ob_gtext_puts(r->o, " ");
        any = true;
        /* the atom is written inside a group so a quantifier applies to all of it */
        ob_gtext_puts(r->o, "( ");
        if (!parse_atom(r, depth)) return false;
        ob_gtext_puts(r->o, " )");
        if (r->pos >= r->n) break;
        char c = r->s[r->pos];
        if (c == '*' || c == '+' || c == '?') {
            r->pos++;
            ob_gtext_printf(r->o, "%c", c);
        } else if (c == '{') {
            size_t at = r->pos++;
            long min, max;
            if (!parse_count(r, &min)) return false;
            max = min;
            if (r->pos < r->n && r->s[r->pos] == ',') {
                r->pos++;
                max = -1;
                if (r->pos < r->n && r->s[r->pos] != '}' && !parse_count(r, &max)) return false;
            }
            if (r->pos >= r->n || r->s[r->pos] != '}') { r->pos = at; return fail(r, OB_ERR_FORMAT, "unclosed '{'"); }
            r->pos++;
            if (max >= 0 && max < min)
                return fail(r, OB_ERR_FORMAT, "{%ld,%ld}: the maximum is below the minimum", min, max);
            if (max < 0) ob_gtext_printf(r->o, "{%ld,}", min);
            else ob_gtext_printf(r->o, "{%ld,%ld}", min, max);
        } else {
            continue;
        }
        if (r->pos < r->n && r->s[r->pos] == '?') r->pos++; /* lazy: the same strings */
        if (r->pos < r->n && (r->s[r->pos] == '*' || r->s[r->pos] == '+' || r->s[r->pos] == '{'))
            return fail(r, OB_ERR_FORMAT, "a quantifier follows a quantifier");
    }
    if (!any) ob_gtext_puts(r->o, "\"\"");
    return true;
}

static bool parse_alt(rx *r, int depth) {
    if (depth > 64) return fail(r, OB_ERR_UNSUPPORTED, "groups nested more than 64 deep");
    if (!parse_concat(r, depth)) return false;
    while (r->pos < r->n && r->s[r->pos] == '|') {
        r->pos++;
        ob_gtext_puts(r->o, " | ");
        if (!parse_concat(r, depth)) return false;
    }
    return true;
}

/* Whether the pattern has a '|' outside every group and class. */
static bool top_level_alt(const char *s, size_t n) {
    int depth = 0;
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\') { i++; continue; }
        if (in_class) { if (s[i] == ']') in_class = false; continue; }
        if (s[i] == '[') in_class = true;
        else if (s[i] == '(') depth++;
        else if (s[i] == ')') depth--;
        else if (s[i] == '|' && depth == 0) return true;
    }
    return false;
}

ob_status ob_grammar_pattern(const char *re, size_t n, ob_gtext *out, char *err, size_t err_len) {
    bool start = n > 0 && re[0] == '^';
    /* a final '$' that is not escaped (an odd run of backslashes before it escapes it) */
    size_t bs = 0;
    while (n >= 2 + bs && re[n - 2 - bs] == '\\') bs++;
    bool end = n > (size_t)start && re[n - 1] == '$' && bs % 2 == 0;
    rx r = {.s = re + start, .n = n - start - end, .o = out, .err = err, .err_len = err_len};
    if ((start || end) && top_level_alt(r.s, r.n)) {
        fail(&r, OB_ERR_UNSUPPORTED, "'^' or '$' around a top-level '|' is not supported: group the alternatives");
        return r.st;
    }
    if (!start) ob_gtext_puts(out, "char* ");
    ob_gtext_puts(out, "( ");
    if (parse_alt(&r, 0) && r.pos < r.n) fail(&r, OB_ERR_FORMAT, "unmatched ')'");
    ob_gtext_puts(out, " )");
    if (!end) ob_gtext_puts(out, " char*");
    if (!r.st && out->oom) fail(&r, OB_ERR_NOMEM, "out of memory");
    return r.st;
}
