/* GBNF text -> ob_grammar: the syntax of llama.cpp's grammars/README.md (rules, |, groups,
 * literals with \x \u \U escapes, character classes with ranges and ^, '.', * + ? {m}
 * {m,} {m,n}, # comments), checked for undefined rules and left recursion, then
 * flattened into the element array the matcher walks. Repetitions become helper rules:
 * x* is R ::= x R | (empty), x{0,n} a chain of n nested optional rules. */
#include "grammar/grammar_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"

typedef struct psym { int32_t type, arg; } psym;     /* BYTE, CLASS (arg: class index), REF */
typedef struct palt { psym *v; int n, cap; } palt;
typedef struct prule {
    char *name;             /* NULL for helper rules */
    palt *alts;
    int n_alts, cap_alts;
    bool defined;
    int origin;             /* the named rule a helper rule was made for */
    size_t def_at, ref_at;  /* text offsets of the definition and the first reference */
} prule;
typedef struct pclass { ob_cp_range *r; int n; } pclass;

typedef struct parser {
    const char *s;
    size_t len, pos;
    prule *rules;
    int n_rules, cap_rules;
    int32_t *names;         /* open-addressing hash of named rules (rule id, -1 empty) */
    uint32_t names_mask;
    pclass *classes;
    int n_classes, cap_classes;
    int any_class;          /* '.', made once */
    long n_syms;            /* symbols in all, for the size limit */
    int cur;                /* the named rule being parsed */
    char *err;
    size_t err_len;
    bool failed, nomem;
} parser;

static bool fail_at(parser *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail_at(parser *p, size_t at, const char *fmt, ...) {
    if (p->failed) return false;
    p->failed = true;
    if (!p->err || !p->err_len) return false;
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < p->len; i++) {
        if (p->s[i] == '\n') { line++; col = 1; }
        else if (((unsigned char)p->s[i] & 0xC0) != 0x80) col++;
    }
    int k = snprintf(p->err, p->err_len, "line %d, column %d: ", line, col);
    if (k < 0 || (size_t)k >= p->err_len) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + k, p->err_len - (size_t)k, fmt, ap);
    va_end(ap);
    return false;
}

static bool oom(parser *p) {
    p->nomem = !p->failed;
    return fail_at(p, p->pos, "out of memory");
}

static bool grow(void **v, int *cap, int need, size_t elem) {
    if (need <= *cap) return true;
    int c = *cap ? *cap : 4;
    while (c < need) c *= 2;
    void *q = realloc(*v, (size_t)c * elem);
    if (!q) return false;
    *v = q;
    *cap = c;
    return true;
}

static int new_rule(parser *p, char *name) {
    if (p->n_rules >= OB_GRAMMAR_MAX_RULES) {
        fail_at(p, p->pos, "the grammar is too large (over %d rules once repetitions are expanded)", OB_GRAMMAR_MAX_RULES);
        free(name);
        return -1;
    }
    if (!grow((void **)&p->rules, &p->cap_rules, p->n_rules + 1, sizeof *p->rules)) {
        free(name);
        oom(p);
        return -1;
    }
    prule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    r->name = name;
    r->origin = p->cur;
    return p->n_rules++;
}

static uint32_t hash_name(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static bool names_grow(parser *p) {
    uint32_t cap = p->names_mask ? (p->names_mask + 1) * 2 : 64;
    int32_t *t = malloc(cap * sizeof *t);
    if (!t) return false;
    for (uint32_t i = 0; i < cap; i++) t[i] = -1;
    for (int i = 0; i < p->n_rules; i++) {
        if (!p->rules[i].name) continue;
        uint32_t h = hash_name(p->rules[i].name, strlen(p->rules[i].name)) & (cap - 1);
        while (t[h] >= 0) h = (h + 1) & (cap - 1);
        t[h] = i;
    }
    free(p->names);
    p->names = t;
    p->names_mask = cap - 1;
    return true;
}

/* The named rule's id, created (undefined) on first sight. */
static int rule_named(parser *p, const char *s, size_t n, size_t at) {
    if (!p->names && !names_grow(p)) return oom(p), -1;
    uint32_t h = hash_name(s, n) & p->names_mask;
    for (; p->names[h] >= 0; h = (h + 1) & p->names_mask) {
        const char *nm = p->rules[p->names[h]].name;
        if (strlen(nm) == n && memcmp(nm, s, n) == 0) return p->names[h];
    }
    char *name = malloc(n + 1);
    if (!name) return oom(p), -1;
    memcpy(name, s, n);
    name[n] = 0;
    int id = new_rule(p, name);
    if (id < 0) return -1;
    p->rules[id].ref_at = at;
    p->rules[id].origin = id;
    p->names[h] = id;
    if ((uint32_t)p->n_rules * 2 > p->names_mask && !names_grow(p)) return oom(p), -1;
    return id;
}

static int add_alt(parser *p, int rule) {
    prule *r = &p->rules[rule];
    if (!grow((void **)&r->alts, &r->cap_alts, r->n_alts + 1, sizeof *r->alts)) return oom(p), -1;
    memset(&r->alts[r->n_alts], 0, sizeof *r->alts);
    return r->n_alts++;
}

static bool push_sym(parser *p, int rule, int alt, int32_t type, int32_t arg) {
    if (++p->n_syms > OB_GRAMMAR_MAX_ELEMS)
        return fail_at(p, p->pos, "the grammar is too large (over %d elements once repetitions are expanded)",
                       OB_GRAMMAR_MAX_ELEMS);
    palt *a = &p->rules[rule].alts[alt];
    if (!grow((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v)) return oom(p);
    a->v[a->n++] = (psym){type, arg};
    return true;
}

static bool push_cp(parser *p, int rule, int alt, uint32_t cp) {
    char b[4];
    int n = ob_utf8_put(cp, b);
    for (int i = 0; i < n; i++)
        if (!push_sym(p, rule, alt, OB_GE_BYTE, (unsigned char)b[i])) return false;
    return true;
}

static int add_class(parser *p, ob_cp_range *r, int n) {
    if (!grow((void **)&p->classes, &p->cap_classes, p->n_classes + 1, sizeof *p->classes)) {
        free(r);
        return oom(p), -1;
    }
    p->classes[p->n_classes] = (pclass){r, n};
    return p->n_classes++;
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static void skip_space(parser *p, bool newline_ok) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t') p->pos++;
        else if (c == '#') while (p->pos < p->len && p->s[p->pos] != '\n' && p->s[p->pos] != '\r') p->pos++;
        else if (newline_ok && (c == '\n' || c == '\r')) p->pos++;
        else break;
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class: an escape or a UTF-8 sequence. */
static bool parse_char(parser *p, uint32_t *cp) {
    size_t at = p->pos;
    const unsigned char *s = (const unsigned char *)p->s;
    if (s[p->pos] == '\\') {
        if (++p->pos >= p->len) return fail_at(p, at, "unfinished escape");
        char e = (char)s[p->pos++];
        int digits = 0;
        switch (e) {
        case 'n': *cp = '\n'; break;
        case 'r': *cp = '\r'; break;
        case 't': *cp = '\t'; break;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'': *cp = (uint32_t)e; break;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default: return fail_at(p, at, "unknown escape '\\%c'", e);
        }
        if (digits) {
            uint32_t v = 0;
            for (int i = 0; i < digits; i++) {
                int h = p->pos < p->len ? hexval(p->s[p->pos]) : -1;
                if (h < 0) return fail_at(p, at, "'\\%c' needs %d hex digits", e, digits);
                v = v * 16 + (uint32_t)h;
                p->pos++;
            }
            *cp = v;
        }
    } else {
        unsigned char c = s[p->pos];
        int n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!n || p->pos + (size_t)n > p->len) return fail_at(p, at, "invalid UTF-8");
        uint32_t v = n == 1 ? c : n == 2 ? c & 0x1Fu : n == 3 ? c & 0x0Fu : c & 0x07u;
        for (int i = 1; i < n; i++) {
            unsigned char d = s[p->pos + (size_t)i];
            if ((d & 0xC0) != 0x80) return fail_at(p, at, "invalid UTF-8");
            v = v << 6 | (d & 0x3Fu);
        }
        static const uint32_t min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (v < min_of[n]) return fail_at(p, at, "invalid UTF-8");
        p->pos += (size_t)n;
        *cp = v;
    }
    if (*cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF))
        return fail_at(p, at, "U+%04X is not a Unicode character", (unsigned)*cp);
    return true;
}

/* [...] after the '[': a class index, or -2 for a single character (put in *one). */
static int parse_class(parser *p, size_t at, uint32_t *one) {
    bool negate = p->pos < p->len && p->s[p->pos] == '^';
    if (negate) p->pos++;
    ob_cp_range *r = NULL;
    int n = 0, cap = 0;
    while (p->pos < p->len && p->s[p->pos] != ']') {
        uint32_t a, b;
        if (!parse_char(p, &a)) goto fail;
        b = a;
        if (p->pos + 1 < p->len && p->s[p->pos] == '-' && p->s[p->pos + 1] != ']') {
            size_t at_b = ++p->pos;
            if (!parse_char(p, &b)) goto fail;
            if (b < a) {
                fail_at(p, at_b, "range end U+%04X is below its start U+%04X", (unsigned)b, (unsigned)a);
                goto fail;
            }
        }
        if (!grow((void **)&r, &cap, n + 3, sizeof *r)) { oom(p); goto fail; }
        r[n++] = (ob_cp_range){a, b};
    }
    if (p->pos >= p->len) {
        fail_at(p, at, "unclosed '['");
        goto fail;
    }
    p->pos++;
    if (!negate && n == 1 && r[0].lo == r[0].hi) {
        *one = r[0].lo;
        free(r);
        return -2;
    }
    if (!grow((void **)&r, &cap, n + 3, sizeof *r)) { oom(p); goto fail; }
    ob_cp_ranges_normalize(r, &n, negate);
    return add_class(p, r, n);
fail:
    free(r);
    return -1;
}

static bool parse_alternates(parser *p, int rule, bool nested);

/* x{min,max} (max -1: unbounded) over the symbols [start, n) of the alternative. */
static bool repeat(parser *p, int rule, int alt, int start, long min, long max) {
    palt *a = &p->rules[rule].alts[alt];
    int ns = a->n - start;
    if (ns == 0) return true; /* "" repeated is still "" */
    psym *seq = malloc((size_t)ns * sizeof *seq);
    if (!seq) return oom(p);
    memcpy(seq, a->v + start, (size_t)ns * sizeof *seq);
    a->n = start;
    bool ok = true;
    if (ns > 1 && (min > 1 || max != min)) { /* copies of one reference instead of the sequence */
        int w = new_rule(p, NULL);
        ok = w >= 0 && add_alt(p, w) >= 0;
        for (int i = 0; ok && i < ns; i++) ok = push_sym(p, w, 0, seq[i].type, seq[i].arg);
        if (ok) { seq[0] = (psym){OB_GE_REF, w}; ns = 1; }
    }
    for (long k = 0; ok && k < min; k++)
        for (int i = 0; ok && i < ns; i++) ok = push_sym(p, rule, alt, seq[i].type, seq[i].arg);
    if (ok && max < 0) { /* R ::= x R | (empty) */
        int rr = new_rule(p, NULL);
        ok = rr >= 0 && add_alt(p, rr) >= 0 && add_alt(p, rr) >= 0;
        for (int i = 0; ok && i < ns; i++) ok = push_sym(p, rr, 0, seq[i].type, seq[i].arg);
        ok = ok && push_sym(p, rr, 0, OB_GE_REF, rr) && push_sym(p, rule, alt, OB_GE_REF, rr);
    } else if (ok && max > min) { /* R1 ::= x | (empty); Rk ::= x R(k-1) | (empty) */
        int prev = -1;
        for (long k = 0; ok && k < max - min; k++) {
            int rr = new_rule(p, NULL);
            ok = rr >= 0 && add_alt(p, rr) >= 0 && add_alt(p, rr) >= 0;
            for (int i = 0; ok && i < ns; i++) ok = push_sym(p, rr, 0, seq[i].type, seq[i].arg);
            if (ok && prev >= 0) ok = push_sym(p, rr, 0, OB_GE_REF, prev);
            prev = rr;
        }
        ok = ok && push_sym(p, rule, alt, OB_GE_REF, prev);
    }
    free(seq);
    return ok;
}

static bool parse_int(parser *p, long *v) {
    size_t at = p->pos;
    long x = 0;
    if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9') return fail_at(p, at, "expected a number");
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        x = x * 10 + (p->s[p->pos++] - '0');
        if (x > OB_GRAMMAR_MAX_REPEAT) return fail_at(p, at, "repetition count over %d", OB_GRAMMAR_MAX_REPEAT);
    }
    *v = x;
    return true;
}

/* The bounds after '{': m}, m,} or m,n}. */
static bool parse_braces(parser *p, size_t at, long *min, long *max) {
    skip_space(p, false);
    if (!parse_int(p, min)) return false;
    skip_space(p, false);
    *max = *min;
    if (p->pos < p->len && p->s[p->pos] == ',') {
        p->pos++;
        skip_space(p, false);
        *max = -1;
        if (p->pos < p->len && p->s[p->pos] != '}' && !parse_int(p, max)) return false;
        skip_space(p, false);
    }
    if (p->pos >= p->len || p->s[p->pos] != '}') return fail_at(p, at, "expected '}' to close the repetition");
    p->pos++;
    if (*max >= 0 && *max < *min)
        return fail_at(p, at, "repetition {%ld,%ld}: the maximum is below the minimum", *min, *max);
    return true;
}

static bool parse_sequence(parser *p, int rule, int alt, bool nested) {
    int last = -1; /* where the last symbol starts in the alternative */
    while (p->pos < p->len && !p->failed) {
        size_t at = p->pos;
        char c = p->s[p->pos];
        int n_before = p->rules[rule].alts[alt].n;
        if (c == '"') {
            p->pos++;
            while (p->pos < p->len && p->s[p->pos] != '"') {
                uint32_t cp;
                if (!parse_char(p, &cp) || !push_cp(p, rule, alt, cp)) return false;
            }
            if (p->pos >= p->len) return fail_at(p, at, "unterminated string literal");
            p->pos++;
            last = n_before;
        } else if (c == '[') {
            p->pos++;
            uint32_t one = 0;
            int cl = parse_class(p, at, &one);
            if (cl == -1) return false;
            if (!(cl == -2 ? push_cp(p, rule, alt, one) : push_sym(p, rule, alt, OB_GE_CLASS, cl))) return false;
            last = n_before;
        } else if (c == '.') {
            p->pos++;
            if (p->any_class < 0) {
                ob_cp_range *r = malloc(3 * sizeof *r);
                if (!r) return oom(p);
                int n = 0;
                ob_cp_ranges_normalize(r, &n, true);
                if ((p->any_class = add_class(p, r, n)) < 0) return false;
            }
            if (!push_sym(p, rule, alt, OB_GE_CLASS, p->any_class)) return false;
            last = n_before;
        } else if (is_name_char(c)) {
            while (p->pos < p->len && is_name_char(p->s[p->pos])) p->pos++;
            int ref = rule_named(p, p->s + at, p->pos - at, at);
            if (ref < 0 || !push_sym(p, rule, alt, OB_GE_REF, ref)) return false;
            last = n_before;
        } else if (c == '(') {
            p->pos++;
            skip_space(p, true);
            int sub = new_rule(p, NULL);
            if (sub < 0 || !parse_alternates(p, sub, true)) return false;
            if (p->pos >= p->len || p->s[p->pos] != ')') return fail_at(p, at, "unclosed '('");
            p->pos++;
            if (!push_sym(p, rule, alt, OB_GE_REF, sub)) return false;
            last = n_before;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) return fail_at(p, at, "'%c' has nothing before it to repeat", c);
            p->pos++;
            long min = c == '+' ? 1 : 0, max = c == '?' ? 1 : -1;
            if (c == '{' && !parse_braces(p, at, &min, &max)) return false;
            if (!repeat(p, rule, alt, last, min, max)) return false;
            last = -1;
        } else if (c == '<' || (c == '!' && p->pos + 1 < p->len && p->s[p->pos + 1] == '<')) {
            return fail_at(p, at, "token references (<...>, !<...>) are not supported");
        } else {
            break;
        }
        skip_space(p, nested);
    }
    return !p->failed;
}

static bool parse_alternates(parser *p, int rule, bool nested) {
    for (;;) {
        int alt = add_alt(p, rule);
        if (alt < 0 || !parse_sequence(p, rule, alt, nested)) return false;
        if (p->pos < p->len && p->s[p->pos] == '|') {
            p->pos++;
            skip_space(p, true);
            continue;
        }
        return true;
    }
}

static bool parse_rule(parser *p) {
    size_t at = p->pos;
    while (p->pos < p->len && is_name_char(p->s[p->pos])) p->pos++;
    if (p->pos == at) {
        char c = p->s[at];
        if (c >= 0x20 && c < 0x7F) return fail_at(p, at, "expected a rule name, found '%c'", c);
        return fail_at(p, at, "expected a rule name");
    }
    int id = rule_named(p, p->s + at, p->pos - at, at);
    if (id < 0) return false;
    if (p->rules[id].defined) return fail_at(p, at, "rule '%s' is defined twice", p->rules[id].name);
    p->rules[id].defined = true;
    p->rules[id].def_at = at;
    p->cur = id;
    skip_space(p, false);
    if (p->len - p->pos < 3 || memcmp(p->s + p->pos, "::=", 3) != 0)
        return fail_at(p, p->pos, "expected '::=' after the rule name '%s'", p->rules[id].name);
    p->pos += 3;
    skip_space(p, true);
    if (!parse_alternates(p, id, false)) return false;
    skip_space(p, false);
    if (p->pos < p->len && p->s[p->pos] != '\n' && p->s[p->pos] != '\r') {
        char c = p->s[p->pos];
        if (c >= 0x20 && c < 0x7F) return fail_at(p, p->pos, "unexpected '%c'", c);
        return fail_at(p, p->pos, "unexpected character");
    }
    return true;
}

/* Rules that can match the empty text. */
static bool *nullable_rules(parser *p) {
    bool *nul = calloc((size_t)p->n_rules, sizeof *nul);
    if (!nul) return NULL;
    for (bool changed = true; changed;) {
        changed = false;
        for (int r = 0; r < p->n_rules; r++) {
            if (nul[r]) continue;
            for (int a = 0; a < p->rules[r].n_alts && !nul[r]; a++) {
                const palt *al = &p->rules[r].alts[a];
                int i = 0;
                while (i < al->n && al->v[i].type == OB_GE_REF && nul[al->v[i].arg]) i++;
                if (i == al->n) nul[r] = changed = true;
            }
        }
    }
    return nul;
}

/* Left recursion: a rule that can reach itself at the same position (through rules that
 * start its alternatives, past ones that can be empty) would expand forever. */
static bool check_left_recursion(parser *p) {
    bool *nul = nullable_rules(p);
    uint8_t *color = calloc((size_t)p->n_rules, 1);
    struct frame { int r, a, i; } *st = malloc((size_t)p->n_rules * sizeof *st);
    bool ok = nul && color && st;
    if (!ok) oom(p);
    for (int start = 0; ok && start < p->n_rules; start++) {
        if (color[start]) continue;
        int sp = 0;
        st[sp++] = (struct frame){start, 0, 0};
        color[start] = 1;
        while (sp > 0 && ok) {
            struct frame *f = &st[sp - 1];
            const prule *r = &p->rules[f->r];
            if (f->a >= r->n_alts) {
                color[f->r] = 2;
                sp--;
                continue;
            }
            const palt *al = &r->alts[f->a];
            if (f->i >= al->n || (f->i > 0 && !(al->v[f->i - 1].type == OB_GE_REF && nul[al->v[f->i - 1].arg]))) {
                f->a++;
                f->i = 0;
                continue;
            }
            psym s = al->v[f->i++];
            if (s.type != OB_GE_REF) { f->i = al->n; continue; }
            if (color[s.arg] == 1) {
                const prule *named = &p->rules[p->rules[s.arg].origin];
                ok = fail_at(p, named->def_at, "rule '%s' is left-recursive: it can reach itself without matching "
                             "any text", named->name ? named->name : "?");
            } else if (color[s.arg] == 0) {
                color[s.arg] = 1;
                st[sp++] = (struct frame){s.arg, 0, 0};
            }
        }
    }
    free(nul);
    free(color);
    free(st);
    return ok;
}

static uint32_t hash_class(const pclass *c) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < c->n; i++) h = ((h ^ c->r[i].lo) * 16777619u ^ c->r[i].hi) * 16777619u;
    return h;
}

/* Class automata, one per distinct class (a hash of the ranges finds equal ones). */
static bool build_classes(parser *p, ob_gdfa_pool *pool, int32_t *start) {
    uint32_t cap = 16;
    while (cap < (uint32_t)p->n_classes * 2) cap *= 2;
    int32_t *tab = malloc(cap * sizeof *tab);
    if (!tab) return oom(p);
    for (uint32_t i = 0; i < cap; i++) tab[i] = -1;
    bool ok = true;
    for (int i = 0; ok && i < p->n_classes; i++) {
        const pclass *c = &p->classes[i];
        uint32_t h = hash_class(c) & (cap - 1);
        for (; tab[h] >= 0; h = (h + 1) & (cap - 1)) {
            const pclass *d = &p->classes[tab[h]];
            if (d->n == c->n && !memcmp(d->r, c->r, (size_t)c->n * sizeof *c->r)) break;
        }
        if (tab[h] >= 0) {
            start[i] = start[tab[h]];
        } else {
            tab[h] = i;
            ok = (start[i] = ob_gdfa_build(pool, c->r, c->n)) >= 0;
        }
    }
    free(tab);
    return ok || oom(p);
}

static ob_grammar *flatten(parser *p, int root) {
    ob_grammar *g = calloc(1, sizeof *g);
    int32_t *cls = malloc((size_t)(p->n_classes ? p->n_classes : 1) * sizeof *cls);
    ob_gdfa_pool pool = {0};
    long n_elems = 0, n_alts = 0;
    for (int r = 0; r < p->n_rules; r++) {
        n_alts += p->rules[r].n_alts;
        for (int a = 0; a < p->rules[r].n_alts; a++) n_elems += p->rules[r].alts[a].n + 1;
    }
    if (!g || !cls || !build_classes(p, &pool, cls)) goto fail;
    g->elems = malloc((size_t)n_elems * sizeof *g->elems);
    g->alt_pos = malloc((size_t)n_alts * sizeof *g->alt_pos);
    g->rule_alt = malloc((size_t)(p->n_rules + 1) * sizeof *g->rule_alt);
    if (!g->elems || !g->alt_pos || !g->rule_alt) goto fail;
    int32_t e = 0, k = 0;
    for (int r = 0; r < p->n_rules; r++) {
        g->rule_alt[r] = k;
        for (int a = 0; a < p->rules[r].n_alts; a++) {
            const palt *al = &p->rules[r].alts[a];
            g->alt_pos[k++] = e;
            for (int i = 0; i < al->n; i++)
                g->elems[e++] = al->v[i].type == OB_GE_CLASS ? (ob_gelem){OB_GE_CLASS, cls[al->v[i].arg]}
                                                              : (ob_gelem){al->v[i].type, al->v[i].arg};
            g->elems[e++] = (ob_gelem){OB_GE_END, 0};
        }
    }
    g->rule_alt[p->n_rules] = k;
    g->n_elems = e;
    g->n_alts = k;
    g->n_rules = p->n_rules;
    g->root = root;
    g->dfa = pool.t;
    g->n_dfa = pool.n;
    free(cls);
    return g;
fail:
    oom(p);
    free(cls);
    free(pool.t);
    ob_grammar_free(g);
    return NULL;
}

static void parser_free(parser *p) {
    for (int r = 0; r < p->n_rules; r++) {
        for (int a = 0; a < p->rules[r].n_alts; a++) free(p->rules[r].alts[a].v);
        free(p->rules[r].alts);
        free(p->rules[r].name);
    }
    free(p->rules);
    free(p->names);
    for (int i = 0; i < p->n_classes; i++) free(p->classes[i].r);
    free(p->classes);
}

ob_status ob_grammar_parse(const char *text, size_t len, ob_grammar **out, char *err, size_t err_len) {
    *out = NULL;
    if (err && err_len) err[0] = 0;
    parser p = {.s = text ? text : "", .len = text ? len : 0, .err = err, .err_len = err_len, .any_class = -1, .cur = -1};
    skip_space(&p, true);
    while (p.pos < p.len && parse_rule(&p)) skip_space(&p, true);
    int root = -1;
    for (int r = 0; !p.failed && r < p.n_rules; r++) {
        if (p.rules[r].name && !p.rules[r].defined)
            fail_at(&p, p.rules[r].ref_at, "undefined rule '%s'", p.rules[r].name);
        else if (p.rules[r].name && !strcmp(p.rules[r].name, "root"))
            root = r;
    }
    if (!p.failed && root < 0) {
        p.failed = true;
        if (err) snprintf(err, err_len, "the grammar has no 'root' rule");
    }
    if (!p.failed) check_left_recursion(&p);
    ob_grammar *g = p.failed ? NULL : flatten(&p, root);
    parser_free(&p);
    if (!g) return p.nomem ? OB_ERR_NOMEM : OB_ERR_FORMAT;
    *out = g;
    return OB_OK;
}

void ob_grammar_free(ob_grammar *g) {
    if (!g) return;
    free(g->elems);
    free(g->alt_pos);
    free(g->rule_alt);
    free(g->dfa);
    free(g);
}
