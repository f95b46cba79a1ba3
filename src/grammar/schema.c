/* JSON schema -> GBNF text, for the common subset: type (one or a list), properties with
 * required and optional ones in the declared order, additionalProperties (false by
 * default when properties are given, as llama-server does), enum, const, anyOf / oneOf,
 * allOf of object schemas, items / prefixItems, minItems / maxItems, minLength /
 * maxLength, integer minimum / maximum (inclusive and exclusive), local $ref (#/$defs,
 * #/definitions, any #/ pointer), string formats date, time, date-time and uuid, and
 * pattern (pattern.c). A keyword that constrains what this cannot enforce is refused with
 * a message naming it, so that no answer is taken for schema-valid when it may not be.
 *
 * Every value's expression takes the whitespace after it; root is the value alone. */
#include "grammar/grammar_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define INT_DIGITS 16   /* integers of up to 16 digits, as the generic number rule */

typedef struct ref_rule { char *ref, *name; } ref_rule;

typedef struct conv {
    const json_t *root;
    ob_gtext rules;              /* "name ::= body\n" lines */
    char **names;                /* rule names taken */
    int n_names, cap_names;
    ref_rule *refs;
    int n_refs, cap_refs;
    int depth;
    char *err;
    size_t err_len;
    ob_status st;
} conv;

static bool fail(conv *c, ob_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(conv *c, ob_status st, const char *fmt, ...) {
    if (c->st) return false;
    c->st = st;
    if (c->err && c->err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->err_len, fmt, ap);
        va_end(ap);
    }
    return false;
}

static bool oom(conv *c) { return fail(c, OB_ERR_NOMEM, "out of memory"); }

static bool name_taken(const conv *c, const char *n) {
    for (int i = 0; i < c->n_names; i++) if (!strcmp(c->names[i], n)) return true;
    return false;
}

/* A new rule name from a hint: letters, digits and '-' kept, the rest as '-'; a number is
 * added when the name is taken. Returns a pointer owned by c, or NULL. */
static const char *take_name(conv *c, const char *hint) {
    char base[96];
    size_t k = 0;
    for (const char *p = hint; *p && k < sizeof base - 12; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-';
        base[k++] = ok ? ch : '-';
    }
    if (k == 0) base[k++] = 'r';
    base[k] = 0;
    char name[112];
    snprintf(name, sizeof name, "%s", base);
    for (int i = 1; name_taken(c, name); i++) snprintf(name, sizeof name, "%s-%d", base, i);
    if (c->n_names == c->cap_names) {
        int cap = c->cap_names ? c->cap_names * 2 : 32;
        char **q = realloc(c->names, (size_t)cap * sizeof *q);
        if (!q) return oom(c), NULL;
        c->names = q;
        c->cap_names = cap;
    }
    char *dup = strdup(name);
    if (!dup) return oom(c), NULL;
    c->names[c->n_names++] = dup;
    return dup;
}

/* An empty body is written "" (after "::=" a line break does not end the rule). */
static void add_rule(conv *c, const char *name, const char *body) {
    ob_gtext_printf(&c->rules, "%s ::= %s\n", name, *body ? body : "\"\"");
}

/* The fixed rules (ws, string, number, ...): defined once, on first use. */
static const char *prim(conv *c, const char *what) {
    static const struct { const char *name, *body, *deps; } prims[] = {
        {"ws", "( [ \\t] | \"\\n\" [ \\t]{0,20} )?", ""},
        {"char", "[^\"\\\\\\x00-\\x1F\\x7F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | "
                 "[dD] [0-7] [0-9a-fA-F]{2} ) )", ""},
        {"string", "\"\\\"\" char* \"\\\"\" ws", "char ws"},
        {"integer", "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ws", "ws"},
        {"number", "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )? ws", "ws"},
        {"boolean", "( \"true\" | \"false\" ) ws", "ws"},
        {"null", "\"null\" ws", "ws"},
        {"value", "object | array | string | number | boolean | null", "object array string number boolean null"},
        {"object", "\"{\" ws ( string \":\" ws value ( \",\" ws string \":\" ws value )* )? \"}\" ws", "ws string value"},
        {"array", "\"[\" ws ( value ( \",\" ws value )* )? \"]\" ws", "ws value"},
        {"date", "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )", ""},
        {"time", "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "
                 "( [zZ] | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )", ""},
        {"date-time", "date [tT] time", "date time"},
        {"uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}", ""},
    };
    for (size_t i = 0; i < sizeof prims / sizeof *prims; i++) {
        if (strcmp(prims[i].name, what)) continue;
        if (name_taken(c, what)) return prims[i].name;
        if (!take_name(c, what)) return NULL;
        add_rule(c, prims[i].name, prims[i].body);
        char deps[64];
        snprintf(deps, sizeof deps, "%s", prims[i].deps);
        for (char *save = NULL, *d = strtok_r(deps, " ", &save); d; d = strtok_r(NULL, " ", &save))
            if (!prim(c, d)) return NULL;
        return prims[i].name;
    }
    return NULL;
}

/* Makes sure prim(what) is defined. */
static bool need(conv *c, const char *what) { return prim(c, what) != NULL || (c->st ? false : oom(c)); }

/* Appends prim(what) as a reference. */
static bool use(conv *c, ob_gtext *o, const char *what) {
    const char *n = prim(c, what);
    if (!n) return c->st ? false : oom(c);
    ob_gtext_puts(o, n);
    return true;
}

/* A JSON value's exact text, then ws. */
static bool literal_value(conv *c, const json_t *v, ob_gtext *o) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) return oom(c);
    ob_gtext_literal(o, s, strlen(s));
    free(s);
    ob_gtext_puts(o, " ");
    return use(c, o, "ws");
}

static bool visit(conv *c, const json_t *s, const char *name, ob_gtext *o);

/* The rule "name ::= <s>" under a name already taken, and the name appended. */
static bool make_rule(conv *c, const json_t *s, const char *name, ob_gtext *o) {
    ob_gtext body = {0};
    bool ok = visit(c, s, name, &body);
    if (ok && body.oom) ok = oom(c);
    if (ok) add_rule(c, name, body.s ? body.s : "");
    free(body.s);
    if (ok) ob_gtext_puts(o, name);
    return ok;
}

/* Makes a rule "name ::= <s>" and appends its name. */
static bool visit_rule(conv *c, const json_t *s, const char *hint, ob_gtext *o) {
    const char *name = take_name(c, hint);
    return name && make_rule(c, s, name, o);
}

/* ---- $ref ------------------------------------------------------------------------------ */

static const json_t *resolve(conv *c, const char *ref) {
    if (ref[0] != '#')
        return fail(c, OB_ERR_UNSUPPORTED, "$ref '%s': only local references (#/...) are supported", ref), NULL;
    const json_t *cur = c->root;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/') return fail(c, OB_ERR_UNSUPPORTED, "$ref '%s': only JSON pointers (#/a/b) are supported", ref), NULL;
        p++;
        char key[256];
        size_t k = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1')) { ch = p[1] == '0' ? '~' : '/'; p++; }
            else if (ch == '%' && p[1] && p[2]) {
                unsigned v;
                if (sscanf(p + 1, "%2x", &v) == 1) { ch = (char)v; p += 2; }
            }
            if (k + 1 >= sizeof key) return fail(c, OB_ERR_FORMAT, "$ref '%s': a part is too long", ref), NULL;
            key[k++] = ch;
        }
        key[k] = 0;
        if (json_is_object(cur)) cur = json_object_get(cur, key);
        else if (json_is_array(cur)) {
            char *end;
            long i = strtol(key, &end, 10);
            cur = *key && !*end && i >= 0 ? json_array_get(cur, (size_t)i) : NULL;
        } else cur = NULL;
        if (!cur) return fail(c, OB_ERR_FORMAT, "$ref '%s' does not resolve in the schema", ref), NULL;
    }
    return cur;
}

/* The rule of a reference, made on first use (recursion refers to it by name). */
static bool visit_ref(conv *c, const char *ref, ob_gtext *o) {
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ref, ref)) {
            ob_gtext_puts(o, c->refs[i].name);
            return true;
        }
    const json_t *target = resolve(c, ref);
    if (!target) return false;
    const char *last = strrchr(ref, '/');
    char hint[96];
    snprintf(hint, sizeof hint, "ref-%s", last && last[1] ? last + 1 : "root");
    const char *name = take_name(c, hint);
    if (!name) return false;
    if (c->n_refs == c->cap_refs) {
        int cap = c->cap_refs ? c->cap_refs * 2 : 8;
        ref_rule *q = realloc(c->refs, (size_t)cap * sizeof *q);
        if (!q) return oom(c);
        c->refs = q;
        c->cap_refs = cap;
    }
    char *r = strdup(ref);
    if (!r) return oom(c);
    c->refs[c->n_refs++] = (ref_rule){r, (char *)name};
    return make_rule(c, target, name, o);
}

/* ---- integers ----------------------------------------------------------------------------- */

static void digits_of(uint64_t v, char *d, int len) {
    for (int i = len - 1; i >= 0; i--) { d[i] = (char)('0' + v % 10); v /= 10; }
}

static int n_digits(uint64_t v) {
    int n = 1;
    while (v >= 10) { v /= 10; n++; }
    return n;
}

static bool all_of(const char *d, int n, char ch) {
    for (int i = 0; i < n; i++) if (d[i] != ch) return false;
    return true;
}

/* The digit strings of length n from a to b (a <= b, same length). */
static void same_len(ob_gtext *o, const char *a, const char *b, int n) {
    int p = 0;
    while (p < n && a[p] == b[p]) p++;
    if (p > 0) {
        ob_gtext_literal(o, a, (size_t)p);
        if (p == n) return;
        ob_gtext_puts(o, " ");
    }
    a += p; b += p; n -= p;
    int lo = a[0] - '0', hi = b[0] - '0';
    bool a_low = all_of(a + 1, n - 1, '0'), b_high = all_of(b + 1, n - 1, '9');
    int mid_lo = a_low ? lo : lo + 1, mid_hi = b_high ? hi : hi - 1;
    ob_gtext_puts(o, "( ");
    bool first = true;
    char nines[INT_DIGITS + 2], zeros[INT_DIGITS + 2];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    if (!a_low) {
        ob_gtext_printf(o, "\"%c\" ", a[0]);
        same_len(o, a + 1, nines, n - 1);
        first = false;
    }
    if (mid_lo <= mid_hi) {
        if (!first) ob_gtext_puts(o, " | ");
        if (mid_lo == mid_hi) ob_gtext_printf(o, "\"%d\"", mid_lo);
        else ob_gtext_printf(o, "[%d-%d]", mid_lo, mid_hi);
        if (n > 1) ob_gtext_printf(o, " [0-9]{%d}", n - 1);
        first = false;
    }
    if (!b_high) {
        if (!first) ob_gtext_puts(o, " | ");
        ob_gtext_printf(o, "\"%c\" ", b[0]);
        same_len(o, zeros, b + 1, n - 1);
    }
    ob_gtext_puts(o, " )");
}

/* The decimal texts (no leading zeros) of lo..hi, 0 <= lo <= hi. */
static void uint_range(ob_gtext *o, uint64_t lo, uint64_t hi) {
    ob_gtext_puts(o, "( ");
    int la = n_digits(lo), lb = n_digits(hi);
    for (int len = la; len <= lb; len++) {
        uint64_t p10 = 1;
        for (int i = 1; i < len; i++) p10 *= 10;
        uint64_t a = len == 1 ? 0 : p10, b = p10 * 10 - 1;
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        char da[INT_DIGITS + 4], db[INT_DIGITS + 4];
        digits_of(a, da, len);
        digits_of(b, db, len);
        if (len > la) ob_gtext_puts(o, " | ");
        same_len(o, da, db, len);
    }
    ob_gtext_puts(o, " )");
}

/* A bound keyword as a number; absent is fine. */
static bool get_num(conv *c, const json_t *s, const char *key, bool *has, double *v) {
    const json_t *x = json_object_get(s, key);
    *has = false;
    if (!x) return true;
    if (!json_is_number(x)) return fail(c, OB_ERR_FORMAT, "'%s' must be a number", key);
    *has = true;
    *v = json_number_value(x);
    return true;
}

static bool visit_integer(conv *c, const json_t *s, ob_gtext *o) {
    const double big = 9999999999999999.0; /* the 16-digit cap of the generic rule */
    double lo = -big, hi = big, v;
    bool has;
    if (!get_num(c, s, "minimum", &has, &v)) return false;
    if (has) lo = fmax(lo, ceil(v));
    if (!get_num(c, s, "maximum", &has, &v)) return false;
    if (has) hi = fmin(hi, floor(v));
    /* exclusive bounds: a number (draft 6 on), or true on minimum / maximum (draft 4) */
    const json_t *xmin = json_object_get(s, "exclusiveMinimum"), *xmax = json_object_get(s, "exclusiveMaximum");
    if (json_is_true(xmin)) xmin = json_object_get(s, "minimum");
    if (json_is_true(xmax)) xmax = json_object_get(s, "maximum");
    if (json_is_number(xmin)) lo = fmax(lo, floor(json_number_value(xmin)) + 1);
    else if (xmin && !json_is_boolean(xmin)) return fail(c, OB_ERR_FORMAT, "'exclusiveMinimum' must be a number");
    if (json_is_number(xmax)) hi = fmin(hi, ceil(json_number_value(xmax)) - 1);
    else if (xmax && !json_is_boolean(xmax)) return fail(c, OB_ERR_FORMAT, "'exclusiveMaximum' must be a number");
    if (lo == -big && hi == big) return use(c, o, "integer");
    if (lo < -big || hi > big) return fail(c, OB_ERR_UNSUPPORTED, "integer bounds beyond 16 digits are not supported");
    if (lo > hi) return fail(c, OB_ERR_FORMAT, "no integer lies between the schema's minimum and maximum");
    int64_t a = (int64_t)lo, b = (int64_t)hi;
    ob_gtext_puts(o, "( ");
    if (a < 0) {
        ob_gtext_puts(o, "\"-\" ");
        uint_range(o, b < 0 ? (uint64_t)-b : 1, (uint64_t)-a);
        if (b >= 0) ob_gtext_puts(o, " | ");
    }
    if (b >= 0) uint_range(o, a > 0 ? (uint64_t)a : 0, (uint64_t)b);
    ob_gtext_puts(o, " ) ");
    return use(c, o, "ws");
}

/* ---- strings -------------------------------------------------------------------------------- */

static bool get_count(conv *c, const json_t *s, const char *key, long long *v) {
    const json_t *x = json_object_get(s, key);
    if (!x) return true;
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return fail(c, OB_ERR_FORMAT, "'%s' must be a non-negative integer", key);
    *v = json_integer_value(x);
    if (*v > OB_GRAMMAR_MAX_REPEAT)
        return fail(c, OB_ERR_UNSUPPORTED, "'%s' over %d is not supported", key, OB_GRAMMAR_MAX_REPEAT);
    return true;
}

static bool visit_string(conv *c, const json_t *s, ob_gtext *o) {
    long long min = 0, max = -1;
    if (!get_count(c, s, "minLength", &min) || !get_count(c, s, "maxLength", &max)) return false;
    if (max >= 0 && max < min) return fail(c, OB_ERR_FORMAT, "'maxLength' is below 'minLength'");
    const json_t *pat = json_object_get(s, "pattern");
    const char *fmt = json_string_value(json_object_get(s, "format"));
    static const char *const formats[] = {"date", "time", "date-time", "uuid"};
    bool known = false;
    for (size_t i = 0; fmt && i < sizeof formats / sizeof *formats; i++) known |= !strcmp(fmt, formats[i]);
    if (pat) {
        if (!json_is_string(pat)) return fail(c, OB_ERR_FORMAT, "'pattern' must be a string");
        if (min > 0 || max >= 0 || known)
            return fail(c, OB_ERR_UNSUPPORTED, "'pattern' together with minLength, maxLength or format is not supported");
        if (!need(c, "char")) return false;
        ob_gtext_puts(o, "\"\\\"\" ( ");
        ob_status st = ob_grammar_pattern(json_string_value(pat), json_string_length(pat), o, c->err, c->err_len);
        if (st) return c->st = st, false;
        ob_gtext_puts(o, " ) \"\\\"\" ");
        return use(c, o, "ws");
    }
    if (known) {
        if (min > 0 || max >= 0)
            return fail(c, OB_ERR_UNSUPPORTED, "'format' together with minLength or maxLength is not supported");
        ob_gtext_puts(o, "\"\\\"\" ");
        if (!use(c, o, fmt)) return false;
        ob_gtext_puts(o, " \"\\\"\" ");
        return use(c, o, "ws");
    }
    /* other formats (email, uri, ...) are annotations here, as JSON Schema makes them by default */
    if (min == 0 && max < 0) return use(c, o, "string");
    ob_gtext_puts(o, "\"\\\"\" ");
    if (!use(c, o, "char")) return false;
    if (max < 0) ob_gtext_printf(o, "{%lld,}", min);
    else ob_gtext_printf(o, "{%lld,%lld}", min, max);
    ob_gtext_puts(o, " \"\\\"\" ");
    return use(c, o, "ws");
}

/* ---- arrays ---------------------------------------------------------------------------------- */

/* "{lo,hi}", or "{lo,}" when hi < 0 (no limit). */
static void repeat_suffix(ob_gtext *o, long long lo, long long hi) {
    if (hi < 0) ob_gtext_printf(o, "{%lld,}", lo);
    else ob_gtext_printf(o, "{%lld,%lld}", lo, hi);
}

static bool visit_array(conv *c, const json_t *s, const char *name, ob_gtext *o) {
    long long min = 0, max = -1;
    if (!get_count(c, s, "minItems", &min) || !get_count(c, s, "maxItems", &max)) return false;
    if (max >= 0 && max < min) return fail(c, OB_ERR_FORMAT, "'maxItems' is below 'minItems'");
    const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    if (json_is_array(items)) { /* draft 4 tuples: items is the prefix, additionalItems the rest */
        prefix = items;
        items = json_object_get(s, "additionalItems");
    }
    if (prefix && !json_is_array(prefix)) return fail(c, OB_ERR_FORMAT, "'prefixItems' must be an array of schemas");
    long long np = (long long)json_array_size(prefix);
    if (max >= 0 && max < np)
        return fail(c, OB_ERR_UNSUPPORTED, "'maxItems' below the number of prefixItems is not supported");
    if (!need(c, "ws")) return false;
    char hint[160];
    ob_gtext_puts(o, "\"[\" ws");
    for (long long i = 0; i < np; i++) { /* the tuple's items, each written */
        ob_gtext_puts(o, i ? " \",\" ws " : " ");
        snprintf(hint, sizeof hint, "%s-%lld", name, i);
        if (!visit_rule(c, json_array_get(prefix, (size_t)i), hint, o)) return false;
    }
    /* then items: any values when absent (nothing more after a tuple: llama-server's choice) */
    bool more = prefix ? items && !json_is_false(items) : !json_is_false(items);
    long long lo = min > np ? min - np : 0, hi = max >= 0 ? max - np : -1;
    if (!more || hi == 0) {
        if (lo > 0) return fail(c, OB_ERR_FORMAT, "'minItems' asks for more items than the schema allows");
    } else {
        ob_gtext item = {0};
        snprintf(hint, sizeof hint, "%s-item", name);
        bool ok = items && !json_is_true(items) ? visit_rule(c, items, hint, &item) : use(c, &item, "value");
        if (ok && item.oom) ok = oom(c);
        if (ok && np > 0) { /* each after a comma */
            ob_gtext_printf(o, " ( \",\" ws %s )", item.s);
            repeat_suffix(o, lo, hi);
        } else if (ok) { /* the first bare, the others after commas */
            ob_gtext_printf(o, " %s%s ( \",\" ws %s )", lo ? "" : "( ", item.s, item.s);
            repeat_suffix(o, lo ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
            if (!lo) ob_gtext_puts(o, " )?");
        }
        free(item.s);
        if (!ok) return false;
    }
    ob_gtext_puts(o, " \"]\" ws");
    return true;
}

/* ---- objects ----------------------------------------------------------------------------- */

typedef struct prop {
    const char *key;
    char *enc;              /* the key as JSON writes it, without the quotes */
    const json_t *schema;
    bool required;
    const char *kv;         /* its "key": value rule */
} prop;

/* The content of a key string that is none of the (encoded) names in[0..n) that share
 * their first depth bytes: a trie over them, where any other character leaves the names
 * behind for good and closing the string is fine unless a name ends here. */
static void key_not_in(ob_gtext *o, prop *const *in, int n, size_t depth) {
    ob_gtext others = {0};
    ob_gtext_puts(&others, "[^\"\\\\\\x00-\\x1F\\x7F");
    ob_gtext_puts(o, "( ");
    bool ends_here = false;
    int alts = 0;
    prop **sub = malloc((size_t)n * sizeof *sub);
    if (!sub) { o->oom = true; free(others.s); return; }
    for (int i = 0; i < n; i++) {
        size_t len = strlen(in[i]->enc);
        if (len == depth) { ends_here = true; continue; }
        unsigned char ch = (unsigned char)in[i]->enc[depth];
        bool seen = false;
        for (int j = 0; j < i && !seen; j++) seen = strlen(in[j]->enc) > depth && (unsigned char)in[j]->enc[depth] == ch;
        if (seen) continue;
        int m = 0;
        for (int j = i; j < n; j++)
            if (strlen(in[j]->enc) > depth && (unsigned char)in[j]->enc[depth] == ch) sub[m++] = in[j];
        if (alts++) ob_gtext_puts(o, " | ");
        ob_gtext_literal(o, (const char *)&ch, 1);
        ob_gtext_puts(o, " ");
        key_not_in(o, sub, m, depth + 1);
        if (ch == ']' || ch == '-' || ch == '^' || ch == '[') ob_gtext_printf(&others, "\\%c", ch);
        else if (ch >= 0x20 && ch < 0x7F && ch != '\\') ob_gtext_add(&others, (const char *)&ch, 1);
        else ob_gtext_printf(&others, "\\x%02X", ch);
    }
    free(sub);
    ob_gtext_puts(&others, "]");
    if (alts++) ob_gtext_puts(o, " | ");
    ob_gtext_printf(o, "( %s | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) ) char*", others.s ? others.s : "[^\"]");
    if (!ends_here) ob_gtext_puts(o, " | \"\"");
    ob_gtext_puts(o, " )");
    if (others.oom) o->oom = true;
    free(others.s);
}

static bool in_required(const json_t *req, const char *key) {
    size_t i;
    const json_t *e;
    json_array_foreach(req, i, e) if (json_is_string(e) && !strcmp(json_string_value(e), key)) return true;
    return false;
}

/* Makes "hint ::= body" and returns the rule's name (owned by c), or NULL. */
static const char *named_rule(conv *c, const char *hint, ob_gtext *body) {
    if (body->oom) return oom(c), NULL;
    const char *nm = take_name(c, hint);
    if (nm) add_rule(c, nm, body->s ? body->s : "");
    return nm;
}

/* "key": value for every property; the additional pair when others are allowed. */
static bool object_pairs(conv *c, prop *p, int n, const json_t *add, bool extras, const char *name,
                         const char **extra) {
    char hint[200];
    for (int k = 0; k < n; k++) {
        json_t *ks = json_string(p[k].key);
        char *kj = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
        json_decref(ks);
        if (!kj) return oom(c);
        size_t kl = strlen(kj);
        p[k].enc = strndup(kj + 1, kl - 2);
        ob_gtext kv = {0};
        ob_gtext_literal(&kv, kj, kl);
        free(kj);
        if (!p[k].enc) { free(kv.s); return oom(c); }
        ob_gtext_puts(&kv, " ws \":\" ws ");
        snprintf(hint, sizeof hint, "%s-%s", name, p[k].key);
        bool ok = visit_rule(c, p[k].schema, hint, &kv);
        snprintf(hint, sizeof hint, "%s-%s-kv", name, p[k].key);
        ok = ok && (p[k].kv = named_rule(c, hint, &kv)) != NULL;
        free(kv.s);
        if (!ok) return false;
    }
    *extra = NULL;
    if (!extras) return true;
    ob_gtext kv = {0};
    prop **all = malloc((size_t)(n ? n : 1) * sizeof *all);
    if (!all) return oom(c);
    for (int k = 0; k < n; k++) all[k] = &p[k];
    ob_gtext_puts(&kv, "\"\\\"\" ");
    if (n > 0) key_not_in(&kv, all, n, 0);
    else ob_gtext_puts(&kv, "char*");
    free(all);
    ob_gtext_puts(&kv, " \"\\\"\" ws \":\" ws ");
    snprintf(hint, sizeof hint, "%s-additional", name);
    bool ok = json_is_object(add) && json_object_size(add) ? visit_rule(c, add, hint, &kv) : use(c, &kv, "value");
    snprintf(hint, sizeof hint, "%s-additional-kv", name);
    ok = ok && (*extra = named_rule(c, hint, &kv)) != NULL;
    free(kv.s);
    return ok;
}

static bool visit_object(conv *c, const json_t *s, const char *name, ob_gtext *o) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *add = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return fail(c, OB_ERR_FORMAT, "'properties' must be an object");
    if (req && !json_is_array(req)) return fail(c, OB_ERR_FORMAT, "'required' must be an array of strings");
    if (add && !json_is_boolean(add) && !json_is_object(add))
        return fail(c, OB_ERR_FORMAT, "'additionalProperties' must be a boolean or a schema");
    size_t i;
    const json_t *e;
    json_array_foreach(req, i, e)
        if (!json_is_string(e)) return fail(c, OB_ERR_FORMAT, "'required' must be an array of strings");
    /* llama-server's default: with properties, no others unless additionalProperties says */
    bool extras = add ? !json_is_false(add) : json_object_size(props) == 0;
    bool any_extra = !add || json_is_true(add) || (json_is_object(add) && json_object_size(add) == 0);
    if (json_object_size(props) == 0 && json_array_size(req) == 0 && extras && any_extra) return use(c, o, "object");
    if (!need(c, "ws") || !need(c, "char")) return false;
    int n = 0;
    prop *p = calloc(json_object_size(props) + json_array_size(req) + 1, sizeof *p);
    if (!p) return oom(c);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)props, key, v) p[n++] = (prop){.key = key, .schema = v, .required = in_required(req, key)};
    json_array_foreach(req, i, e) { /* required but not described: any value (or the additional schema) */
        bool have = false;
        for (int k = 0; k < n && !have; k++) have = !strcmp(p[k].key, json_string_value(e));
        if (!have)
            p[n++] = (prop){.key = json_string_value(e), .schema = json_is_object(add) ? add : json_true(), .required = true};
    }
    const char *extra = NULL;
    bool ok = object_pairs(c, p, n, add, extras, name, &extra);
    /* after[k]: the pairs from k on once something was written (each after a comma); the
     * object's first pair is any optional one before the first required, in order */
    const char **after = ok ? calloc((size_t)n + 1, sizeof *after) : NULL;
    if (ok && !after) ok = oom(c);
    char hint[200];
    for (int k = n; ok && k >= 0; k--) {
        ob_gtext body = {0};
        if (k == n) {
            if (extra) ob_gtext_printf(&body, "( \",\" ws %s )*", extra);
        }
        else if (p[k].required) ob_gtext_printf(&body, "\",\" ws %s %s", p[k].kv, after[k + 1]);
        else ob_gtext_printf(&body, "( \",\" ws %s )? %s", p[k].kv, after[k + 1]);
        snprintf(hint, sizeof hint, "%s-after-%d", name, k);
        ok = (after[k] = named_rule(c, hint, &body)) != NULL;
        free(body.s);
    }
    if (ok) {
        ob_gtext_puts(o, "\"{\" ws ( ");
        int k = 0;
        for (; k < n; k++) {
            ob_gtext_printf(o, "%s%s %s", k ? " | " : "", p[k].kv, after[k + 1]);
            if (p[k].required) break;
        }
        if (k == n) { /* every pair optional: the extras alone, or nothing */
            if (extra) ob_gtext_printf(o, "%s%s %s", n ? " | " : "", extra, after[n]);
            ob_gtext_puts(o, n || extra ? " | \"\"" : "\"\"");
        }
        ob_gtext_puts(o, " ) \"}\" ws");
    }
    free(after);
    for (int k = 0; k < n; k++) free(p[k].enc);
    free(p);
    return ok;
}

/* ---- allOf ----------------------------------------------------------------------------- */

/* One object schema from allOf's parts: properties joined, required united, other keywords
 * taken once (two parts that disagree are refused). */
static bool visit_all_of(conv *c, const json_t *s, const char *name, ob_gtext *o) {
    const json_t *parts = json_object_get(s, "allOf");
    if (!json_is_array(parts) || !json_array_size(parts)) return fail(c, OB_ERR_FORMAT, "'allOf' must be a non-empty array");
    json_t *m = json_deep_copy(s);
    if (!m) return oom(c);
    json_object_del(m, "allOf");
    bool ok = true;
    size_t i;
    const json_t *part;
    json_array_foreach(parts, i, part) {
        const json_t *q = part;
        for (int hops = 0; ok && json_is_object(q) && json_is_string(json_object_get(q, "$ref")) && hops < 16; hops++)
            ok = (q = resolve(c, json_string_value(json_object_get(q, "$ref")))) != NULL;
        if (!ok) break;
        if (json_is_true(q)) continue;
        if (!json_is_object(q)) { ok = fail(c, OB_ERR_FORMAT, "'allOf' parts must be schemas"); break; }
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)q, k, v) {
            if (!strcmp(k, "properties")) {
                json_t *mp = json_object_get(m, "properties");
                if (!mp) json_object_set_new(m, "properties", mp = json_object());
                const char *pk;
                json_t *pv;
                json_object_foreach(v, pk, pv) {
                    if (json_object_get(mp, pk) && !json_equal(json_object_get(mp, pk), pv)) {
                        ok = fail(c, OB_ERR_UNSUPPORTED, "'allOf': property '%s' is described twice", pk);
                        break;
                    }
                    json_object_set(mp, pk, pv);
                }
            } else if (!strcmp(k, "required")) {
                json_t *mr = json_object_get(m, "required");
                if (!mr) json_object_set_new(m, "required", mr = json_array());
                size_t j;
                json_t *r;
                json_array_foreach(v, j, r)
                    if (json_is_string(r) && !in_required(mr, json_string_value(r))) json_array_append(mr, r);
            } else if (!strcmp(k, "$defs") || !strcmp(k, "definitions") || !strcmp(k, "title") ||
                       !strcmp(k, "description")) {
                continue;
            } else if (!json_object_get(m, k)) {
                json_object_set(m, k, v);
            } else if (!json_equal(json_object_get(m, k), v)) {
                ok = fail(c, OB_ERR_UNSUPPORTED, "'allOf': the parts disagree on '%s'", k);
            }
            if (!ok) break;
        }
        if (!ok) break;
    }
    if (ok) ok = visit(c, m, name, o);
    json_decref(m);
    return ok;
}

/* ---- any schema ------------------------------------------------------------------------- */

static bool check_keywords(conv *c, const json_t *s) {
    static const char *const refused[] = {"not", "if", "then", "else", "contains", "minContains", "maxContains",
                                          "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas",
                                          "dependencies", "multipleOf", "unevaluatedProperties", "unevaluatedItems",
                                          "$dynamicRef", "$recursiveRef"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (json_object_get(s, refused[i]))
            return fail(c, OB_ERR_UNSUPPORTED, "the schema keyword '%s' is not supported", refused[i]);
    if (json_is_true(json_object_get(s, "uniqueItems")))
        return fail(c, OB_ERR_UNSUPPORTED, "the schema keyword 'uniqueItems' is not supported");
    const json_t *minp = json_object_get(s, "minProperties"), *maxp = json_object_get(s, "maxProperties");
    /* minProperties that the required keys already meet is no constraint */
    json_int_t n_req = (json_int_t)json_array_size(json_object_get(s, "required"));
    if (maxp || (minp && !(json_is_integer(minp) && json_integer_value(minp) <= n_req)))
        return fail(c, OB_ERR_UNSUPPORTED, "the schema keyword '%s' is not supported", maxp ? "maxProperties" : "minProperties");
    return true;
}

static bool visit_type(conv *c, const json_t *s, const char *type, const char *name, ob_gtext *o) {
    if (!strcmp(type, "string")) return visit_string(c, s, o);
    if (!strcmp(type, "integer")) return visit_integer(c, s, o);
    if (!strcmp(type, "number")) {
        static const char *const bounds[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
        for (size_t i = 0; i < 4; i++)
            if (json_object_get(s, bounds[i]))
                return fail(c, OB_ERR_UNSUPPORTED, "'%s' is supported for integers only, not numbers", bounds[i]);
        return use(c, o, "number");
    }
    if (!strcmp(type, "boolean")) return use(c, o, "boolean");
    if (!strcmp(type, "null")) return use(c, o, "null");
    if (!strcmp(type, "object")) return visit_object(c, s, name, o);
    if (!strcmp(type, "array")) return visit_array(c, s, name, o);
    return fail(c, OB_ERR_FORMAT, "unknown type '%s'", type);
}

/* The type a schema without "type" describes, from its keywords; NULL: any value. */
static const char *implied_type(const json_t *s) {
    static const struct { const char *key, *type; } hints[] = {
        {"properties", "object"}, {"additionalProperties", "object"}, {"required", "object"},
        {"items", "array"}, {"prefixItems", "array"}, {"minItems", "array"}, {"maxItems", "array"},
        {"minLength", "string"}, {"maxLength", "string"}, {"pattern", "string"}, {"format", "string"},
        {"minimum", "number"}, {"maximum", "number"}, {"exclusiveMinimum", "number"}, {"exclusiveMaximum", "number"},
    };
    for (size_t i = 0; i < sizeof hints / sizeof *hints; i++)
        if (json_object_get(s, hints[i].key)) return hints[i].type;
    return NULL;
}

static bool visit(conv *c, const json_t *s, const char *name, ob_gtext *o) {
    if (json_is_true(s)) return use(c, o, "value");
    if (json_is_false(s)) return fail(c, OB_ERR_UNSUPPORTED, "the schema 'false' allows no value");
    if (!json_is_object(s)) return fail(c, OB_ERR_FORMAT, "a schema must be an object or a boolean");
    if (++c->depth > MAX_DEPTH) return fail(c, OB_ERR_UNSUPPORTED, "the schema is nested more than %d deep", MAX_DEPTH);
    bool ok = check_keywords(c, s);
    const json_t *ref = json_object_get(s, "$ref"), *x;
    char hint[160];
    if (!ok) {
    } else if (ref) {
        ok = json_is_string(ref) ? visit_ref(c, json_string_value(ref), o)
                                 : fail(c, OB_ERR_FORMAT, "'$ref' must be a string");
    } else if ((x = json_object_get(s, "const"))) {
        ok = literal_value(c, x, o);
    } else if ((x = json_object_get(s, "enum"))) {
        if (!json_is_array(x) || !json_array_size(x)) ok = fail(c, OB_ERR_FORMAT, "'enum' must be a non-empty array");
        ob_gtext_puts(o, "( ");
        size_t i;
        json_t *v;
        json_array_foreach(x, i, v) {
            if (!ok) break;
            if (i) ob_gtext_puts(o, " | ");
            char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
            if (!t) { ok = oom(c); break; }
            ob_gtext_literal(o, t, strlen(t));
            free(t);
        }
        ob_gtext_puts(o, " ) ");
        ok = ok && use(c, o, "ws");
    } else if ((x = json_object_get(s, "anyOf")) || (x = json_object_get(s, "oneOf"))) {
        if (!json_is_array(x) || !json_array_size(x))
            ok = fail(c, OB_ERR_FORMAT, "'anyOf' / 'oneOf' must be a non-empty array");
        ob_gtext_puts(o, "( ");
        size_t i;
        json_t *v;
        json_array_foreach(x, i, v) {
            if (!ok) break;
            if (i) ob_gtext_puts(o, " | ");
            snprintf(hint, sizeof hint, "%s-%zu", name, i);
            ok = visit_rule(c, v, hint, o);
        }
        ob_gtext_puts(o, " )");
    } else if (json_object_get(s, "allOf")) {
        ok = visit_all_of(c, s, name, o);
    } else {
        const json_t *type = json_object_get(s, "type");
        if (json_is_string(type)) {
            ok = visit_type(c, s, json_string_value(type), name, o);
        } else if (json_is_array(type) && json_array_size(type)) {
            ob_gtext_puts(o, "( ");
            size_t i;
            json_t *v;
            json_array_foreach(type, i, v) {
                if (!ok) break;
                if (!json_is_string(v)) {
                    ok = fail(c, OB_ERR_FORMAT, "'type' must be a string or an array of strings");
                    break;
                }
                if (i) ob_gtext_puts(o, " | ");
                snprintf(hint, sizeof hint, "%s-%s", name, json_string_value(v));
                ok = visit_type(c, s, json_string_value(v), hint, o);
            }
            ob_gtext_puts(o, " )");
        } else if (type) {
            ok = fail(c, OB_ERR_FORMAT, "'type' must be a string or an array of strings");
        } else {
            const char *t = implied_type(s);
            ok = t ? visit_type(c, s, t, name, o) : use(c, o, c->depth == 1 ? "object" : "value");
        }
    }
    c->depth--;
    return ok;
}

/* ---- the builder: several schemas and rules of the caller's in one grammar ------------- */

struct ob_grammar_builder { conv c; };

static void conv_refs_clear(conv *c);

ob_grammar_builder *ob_grammar_builder_new(void) {
    ob_grammar_builder *b = calloc(1, sizeof *b);
    if (b && !take_name(&b->c, "root")) { /* finish writes the root rule */
        ob_grammar_builder_free(b);
        return NULL;
    }
    return b;
}

static void conv_refs_clear(conv *c) {
    for (int i = 0; i < c->n_refs; i++) free(c->refs[i].ref);
    free(c->refs);
    c->refs = NULL;
    c->n_refs = c->cap_refs = 0;
}

void ob_grammar_builder_free(ob_grammar_builder *b) {
    if (!b) return;
    free(b->c.rules.s);
    for (int i = 0; i < b->c.n_names; i++) free(b->c.names[i]);
    free(b->c.names);
    conv_refs_clear(&b->c);
    free(b);
}

const char *ob_grammar_builder_schema(ob_grammar_builder *b, const json_t *schema, const char *hint,
                                      ob_status *st, char *err, size_t err_len) {
    conv *c = &b->c;
    json_t *empty = schema ? NULL : json_object();
    /* each schema is its own root for $ref, so two tools' "#/$defs/x" stay apart */
    conv_refs_clear(c);
    c->root = schema ? schema : empty;
    c->depth = 0;
    c->st = OB_OK;
    c->err = err;
    c->err_len = err_len;
    if (err && err_len) err[0] = 0;
    const char *name = take_name(c, hint);
    ob_gtext body = {0};
    bool ok = name && visit(c, c->root, name, &body);
    if (ok && body.oom) ok = oom(c);
    if (ok) add_rule(c, name, body.s ? body.s : "");
    if (ok && c->rules.oom) ok = oom(c);
    free(body.s);
    json_decref(empty);
    c->root = NULL;
    c->err = NULL;
    c->err_len = 0;
    *st = ok ? OB_OK : c->st ? c->st : OB_ERR_NOMEM;
    c->st = OB_OK;
    return ok ? name : NULL;
}

const char *ob_grammar_builder_prim(ob_grammar_builder *b, const char *what) { return prim(&b->c, what); }

const char *ob_grammar_builder_rule(ob_grammar_builder *b, const char *hint, const char *body) {
    const char *name = take_name(&b->c, hint);
    if (name) add_rule(&b->c, name, body);
    return b->c.rules.oom ? NULL : name;
}

ob_status ob_grammar_builder_finish(ob_grammar_builder *b, const char *root_body, char **out, char *err,
                                    size_t err_len) {
    *out = NULL;
    ob_gtext all = {0};
    ob_gtext_printf(&all, "root ::= %s\n", root_body);
    ob_gtext_add(&all, b->c.rules.s ? b->c.rules.s : "", b->c.rules.n);
    if (all.oom || b->c.rules.oom) {
        free(all.s);
        if (err && err_len) snprintf(err, err_len, "out of memory");
        return OB_ERR_NOMEM;
    }
    *out = all.s;
    return OB_OK;
}

ob_status ob_grammar_from_schema(const json_t *schema, char **out, char *err, size_t err_len) {
    *out = NULL;
    if (err && err_len) err[0] = 0;
    conv c = {.root = schema, .err = err, .err_len = err_len};
    json_t *empty = NULL;
    if (!schema) schema = c.root = empty = json_object();
    ob_gtext root = {0};
    bool ok = take_name(&c, "root") && visit(&c, schema, "root", &root);
    if (ok && (root.oom || c.rules.oom)) ok = oom(&c);
    ob_gtext all = {0};
    if (ok) {
        ob_gtext_printf(&all, "root ::= %s\n", root.s);
        ob_gtext_add(&all, c.rules.s ? c.rules.s : "", c.rules.n);
        if (all.oom) ok = oom(&c);
    }
    free(root.s);
    free(c.rules.s);
    for (int i = 0; i < c.n_names; i++) free(c.names[i]);
    free(c.names);
    for (int i = 0; i < c.n_refs; i++) free(c.refs[i].ref);
    free(c.refs);
    json_decref(empty);
    if (!ok) {
        free(all.s);
        return c.st ? c.st : OB_ERR_NOMEM;
    }
    *out = all.s;
    return OB_OK;
}
