/* Jinja values: the arena they live in, Python semantics for truth, equality, ordering,
 * str() / repr() (Python spellings: True, None, 1.0, {'a': 1}) and json.dumps as
 * transformers' tojson calls it. */
#include "chat/jinja_int.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <utf8proc.h>

_Noreturn void jj_fail(jj_ctx *c, const char *fmt, ...) {
    if (c->err && c->err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->err_len, fmt, ap);
        va_end(ap);
    }
    longjmp(c->jb, 1);
}

#define JJ_CHUNK (64 * 1024)

void *jj_alloc(jj_ctx *c, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    jj_chunk *k = c->arena;
    if (!k || k->cap - k->used < n) {
        size_t cap = n > JJ_CHUNK ? n : JJ_CHUNK;
        if (c->mem_used + cap > c->mem_cap) jj_fail(c, "template used more than %zu bytes of memory", c->mem_cap);
        k = malloc(sizeof(jj_chunk) + 16 + cap);
        if (!k) jj_fail(c, "out of memory rendering template");
        k->next = c->arena;
        k->used = 0;
        k->cap = cap;
        c->arena = k;
        c->mem_used += cap;
    }
    char *base = (char *)k + ((sizeof(jj_chunk) + 15) & ~(size_t)15);
    void *p = base + k->used;
    k->used += n;
    return p;
}

char *jj_strndup(jj_ctx *c, const char *p, size_t n) {
    char *s = jj_alloc(c, n + 1);
    if (n) memcpy(s, p, n);
    s[n] = 0;
    return s;
}

void jj_step(jj_ctx *c) {
    if (++c->steps > c->max_steps) jj_fail(c, "template took more than %llu steps (infinite loop?)", (unsigned long long)c->max_steps);
}

static void buf_grow(jj_ctx *c, jj_buf *b, size_t add) {
    size_t need;
    if (!ob_add_ok(b->n, add + 1, &need) || need > c->max_output + 1)
        jj_fail(c, "template output larger than %zu bytes", c->max_output);
    if (need <= b->cap) return;
    size_t nc = b->cap ? b->cap * 2 : 64;
    while (nc < need) nc *= 2;
    char *np = jj_alloc(c, nc);
    if (b->n) memcpy(np, b->p, b->n);
    b->p = np;
    b->cap = nc;
}

void jj_buf_put(jj_ctx *c, jj_buf *b, const char *p, size_t n) {
    buf_grow(c, b, n);
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jj_buf_putc(jj_ctx *c, jj_buf *b, char ch) { jj_buf_put(c, b, &ch, 1); }

void jj_buf_printf(jj_ctx *c, jj_buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    jj_buf_put(c, b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* ---- UTF-8 ---- */

static uint32_t decode_at(const char *p, size_t n, size_t i, size_t *clen) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p + i, (utf8proc_ssize_t)(n - i), &cp);
    if (k <= 0) { *clen = 1; return (unsigned char)p[i]; }
    *clen = (size_t)k;
    return (uint32_t)cp;
}

size_t jj_utf8_len(const char *p, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)p[i] & 0xC0) != 0x80;
    return k;
}

size_t jj_utf8_offset(const char *p, size_t n, size_t cp) {
    size_t i = 0, k = 0;
    while (i < n) {
        if (((unsigned char)p[i] & 0xC0) != 0x80) { if (k == cp) return i; k++; }
        i++;
    }
    return n;
}

static bool py_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool jj_is_space_at(const char *p, size_t n, size_t i, size_t *clen) {
    uint32_t cp = decode_at(p, n, i, clen);
    return py_space(cp);
}

/* ---- construction ---- */

jv jv_list_new(jj_ctx *c, size_t cap) {
    jj_list *l = jj_alloc(c, sizeof *l);
    l->n = 0;
    l->cap = cap;
    l->v = cap ? jj_alloc(c, cap * sizeof(jv)) : NULL;
    jv v = {0};
    v.kind = JV_LIST;
    v.u.l = l;
    return v;
}

jv jv_dict_new(jj_ctx *c, size_t cap) {
    jj_dict *d = jj_alloc(c, sizeof *d);
    d->n = 0;
    d->cap = cap;
    d->k = cap ? jj_alloc(c, cap * sizeof(jv)) : NULL;
    d->v = cap ? jj_alloc(c, cap * sizeof(jv)) : NULL;
    jv v = {0};
    v.kind = JV_DICT;
    v.u.d = d;
    return v;
}

void jj_list_push(jj_ctx *c, jj_list *l, jv x) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4;
        jv *nv = jj_alloc(c, nc * sizeof(jv));
        if (l->n) memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = x;
}

static bool hashable(jv k) { return k.kind != JV_LIST || (k.flags & JVF_TUPLE); }

void jj_dict_set(jj_ctx *c, jj_dict *d, jv k, jv x) {
    if (!hashable(k) || k.kind == JV_DICT) jj_fail(c, "unhashable type: '%s'", jv_type_name(k));
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(d->k[i], k)) { d->v[i] = x; return; }
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 4;
        jv *nk = jj_alloc(c, nc * sizeof(jv)), *nv = jj_alloc(c, nc * sizeof(jv));
        if (d->n) { memcpy(nk, d->k, d->n * sizeof(jv)); memcpy(nv, d->v, d->n * sizeof(jv)); }
        d->k = nk; d->v = nv; d->cap = nc;
    }
    d->k[d->n] = k;
    d->v[d->n] = x;
    d->n++;
}

bool jj_dict_get(const jj_dict *d, jv k, jv *out) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(d->k[i], k)) { *out = d->v[i]; return true; }
    return false;
}

bool jj_dict_get_s(const jj_dict *d, const char *k, size_t kn, jv *out) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].kind == JV_STR && d->k[i].u.s.n == kn && memcmp(d->k[i].u.s.p, k, kn) == 0) { *out = d->v[i]; return true; }
    return false;
}

jv jv_func(jj_ctx *c, int id, jv self) {
    jj_func *f = jj_alloc(c, sizeof *f);
    f->id = id;
    f->self = self;
    jv v = {0};
    v.kind = JV_FUNC;
    v.u.fn = f;
    return v;
}

jv jv_from_json(jj_ctx *c, const json_t *j) {
    jj_step(c);
    switch (json_typeof(j)) {
    case JSON_NULL: return jv_none();
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_STRING: return jv_str(json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        jv l = jv_list_new(c, n);
        for (size_t i = 0; i < n; i++) l.u.l->v[i] = jv_from_json(c, json_array_get(j, i));
        l.u.l->n = n;
        return l;
    }
    case JSON_OBJECT: {
        jv d = jv_dict_new(c, json_object_size(j));
        const char *k;
        json_t *v;
        /* JSON keys are unique strings: append without the duplicate scan */
        json_object_foreach((json_t *)j, k, v) {
            jj_dict *dd = d.u.d;
            dd->k[dd->n] = jv_str(k, strlen(k));
            dd->v[dd->n] = jv_from_json(c, v);
            dd->n++;
        }
        return d;
    }
    }
    return jv_none();
}

/* ---- Python semantics ---- */

const char *jv_type_name(jv v) {
    switch ((jv_kind)v.kind) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return (v.flags & JVF_TUPLE) ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_FUNC: return "builtin_function_or_method";
    case JV_MACRO: return "Macro";
    case JV_LOOP: return "LoopContext";
    }
    return "object";
}

void jv_check_defined(jj_ctx *c, jv v) {
    if (v.kind == JV_UNDEF) jj_fail(c, "%.*s", (int)v.u.s.n, v.u.s.p ? v.u.s.p : "undefined value");
}

bool jv_truthy(jj_ctx *c, jv v) {
    if (v.flags & JVF_UNSAFE) jv_check_defined(c, v);
    switch ((jv_kind)v.kind) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s.n != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

static bool is_num(jv v) { return v.kind == JV_BOOL || v.kind == JV_INT || v.kind == JV_FLOAT; }
static double num_f(jv v) { return v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t num_i(jv v) { return v.kind == JV_INT ? v.u.i : v.kind == JV_BOOL ? (int64_t)v.u.b : 0; }

bool jv_eq(jv a, jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.kind == JV_FLOAT || b.kind == JV_FLOAT) return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a.kind != b.kind) return false;
    switch ((jv_kind)a.kind) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.u.s.n == b.u.s.n && (a.u.s.n == 0 || memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0);
    case JV_LIST:
        if ((a.flags & JVF_TUPLE) != (b.flags & JVF_TUPLE) || a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++) if (!jv_eq(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv x;
            if (!jj_dict_get(b.u.d, a.u.d->k[i], &x) || !jv_eq(a.u.d->v[i], x)) return false;
        }
        return true;
    case JV_NS: return a.u.d == b.u.d;
    case JV_FUNC: return a.u.fn == b.u.fn;
    case JV_MACRO: return a.u.m == b.u.m;
    case JV_LOOP: return a.u.loop == b.u.loop;
    default: return false;
    }
}

int jv_cmp(jj_ctx *c, jv a, jv b) {
    jv_check_defined(c, a);
    jv_check_defined(c, b);
    if (is_num(a) && is_num(b)) {
        if (a.kind == JV_FLOAT || b.kind == JV_FLOAT) { double x = num_f(a), y = num_f(b); return x < y ? -1 : x > y ? 1 : 0; }
        int64_t x = num_i(a), y = num_i(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.kind == JV_STR && b.kind == JV_STR) {
        size_t m = OB_MIN(a.u.s.n, b.u.s.n);
        int r = m ? memcmp(a.u.s.p, b.u.s.p, m) : 0;
        if (r) return r < 0 ? -1 : 1;
        return a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n ? 1 : 0;
    }
    if (a.kind == JV_LIST && b.kind == JV_LIST && (a.flags & JVF_TUPLE) == (b.flags & JVF_TUPLE)) {
        size_t m = OB_MIN(a.u.l->n, b.u.l->n);
        for (size_t i = 0; i < m; i++) {
            if (jv_eq(a.u.l->v[i], b.u.l->v[i])) continue;
            return jv_cmp(c, a.u.l->v[i], b.u.l->v[i]);
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n ? 1 : 0;
    }
    jj_fail(c, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a), jv_type_name(b));
}

/* Python repr(float): the shortest digits that round-trip, fixed notation for
 * 1e-4 <= |x| < 1e16, else scientific with a two-digit exponent. */
void jj_float_repr(char *out, size_t cap, double f) {
    if (isnan(f)) { snprintf(out, cap, "nan"); return; }
    if (isinf(f)) { snprintf(out, cap, f < 0 ? "-inf" : "inf"); return; }
    char buf[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    /* buf: [-]d[.ddd]e[+-]XX */
    char digits[24];
    int nd = 0, exp10 = 0;
    bool neg = buf[0] == '-';
    const char *q = buf + neg;
    for (; *q && *q != 'e'; q++) if (*q != '.') digits[nd++] = *q;
    if (*q == 'e') exp10 = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char res[64];
    int r = 0;
    if (neg) res[r++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++) res[r++] = i < nd ? digits[i] : '0';
            res[r++] = '.';
            if (nd > exp10 + 1) for (int i = exp10 + 1; i < nd; i++) res[r++] = digits[i];
            else res[r++] = '0';
        } else {
            res[r++] = '0'; res[r++] = '.';
            for (int i = 0; i < -exp10 - 1; i++) res[r++] = '0';
            for (int i = 0; i < nd; i++) res[r++] = digits[i];
        }
        res[r] = 0;
    } else {
        res[r++] = digits[0];
        if (nd > 1) { res[r++] = '.'; for (int i = 1; i < nd; i++) res[r++] = digits[i]; }
        res[r] = 0;
        snprintf(res + r, sizeof res - (size_t)r, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
    snprintf(out, cap, "%s", res);
}

static void repr_str(jj_ctx *c, jj_buf *b, const char *p, size_t n) {
    bool has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    jj_buf_putc(c, b, q);
    for (size_t i = 0; i < n;) {
        size_t cl;
        uint32_t cp = decode_at(p, n, i, &cl);
        if (cp == (uint32_t)q || cp == '\\') { jj_buf_putc(c, b, '\\'); jj_buf_putc(c, b, (char)cp); }
        else if (cp == '\n') jj_buf_put(c, b, "\\n", 2);
        else if (cp == '\r') jj_buf_put(c, b, "\\r", 2);
        else if (cp == '\t') jj_buf_put(c, b, "\\t", 2);
        else if (cp < 0x20 || cp == 0x7f) jj_buf_printf(c, b, "\\x%02x", cp);
        else if (cp >= 0x80) {
            utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
            bool printable = !(cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CS ||
                               cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CN || cat == UTF8PROC_CATEGORY_ZL ||
                               cat == UTF8PROC_CATEGORY_ZP || cat == UTF8PROC_CATEGORY_ZS);
            if (printable) jj_buf_put(c, b, p + i, cl);
            else if (cp <= 0xff) jj_buf_printf(c, b, "\\x%02x", cp);
            else if (cp <= 0xffff) jj_buf_printf(c, b, "\\u%04x", cp);
            else jj_buf_printf(c, b, "\\U%08x", cp);
        } else jj_buf_putc(c, b, (char)cp);
        i += cl;
    }
    jj_buf_putc(c, b, q);
}

static void put_scalar(jj_ctx *c, jj_buf *b, jv v) {
    char tmp[64];
    switch ((jv_kind)v.kind) {
    case JV_NONE: jj_buf_put(c, b, "None", 4); break;
    case JV_BOOL: if (v.u.b) jj_buf_put(c, b, "True", 4); else jj_buf_put(c, b, "False", 5); break;
    case JV_INT: jj_buf_printf(c, b, "%lld", (long long)v.u.i); break;
    case JV_FLOAT: jj_float_repr(tmp, sizeof tmp, v.u.f); jj_buf_put(c, b, tmp, strlen(tmp)); break;
    default: break;
    }
}

void jv_repr(jj_ctx *c, jj_buf *b, jv v) {
    jj_step(c);
    if (v.flags & JVF_GEN) jj_fail(c, "cannot print a generator/view value (jinja2 prints an object address); add |list");
    switch ((jv_kind)v.kind) {
    case JV_STR: repr_str(c, b, v.u.s.p, v.u.s.n); return;
    case JV_UNDEF: if (v.flags & JVF_UNSAFE) jv_check_defined(c, v); jj_buf_put(c, b, "Undefined", 9); return;
    case JV_LIST: {
        bool tup = v.flags & JVF_TUPLE;
        jj_buf_putc(c, b, tup ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jj_buf_put(c, b, ", ", 2);
            jv_repr(c, b, v.u.l->v[i]);
        }
        if (tup && v.u.l->n == 1) jj_buf_putc(c, b, ',');
        jj_buf_putc(c, b, tup ? ')' : ']');
        return;
    }
    case JV_DICT: case JV_NS: {
        if (v.kind == JV_NS) jj_buf_put(c, b, "<Namespace ", 11);
        jj_buf_putc(c, b, '{');
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jj_buf_put(c, b, ", ", 2);
            jv_repr(c, b, v.u.d->k[i]);
            jj_buf_put(c, b, ": ", 2);
            jv_repr(c, b, v.u.d->v[i]);
        }
        jj_buf_putc(c, b, '}');
        if (v.kind == JV_NS) jj_buf_putc(c, b, '>');
        return;
    }
    case JV_FUNC: case JV_MACRO: case JV_LOOP:
        jj_fail(c, "cannot print a %s object", jv_type_name(v));
    default: put_scalar(c, b, v);
    }
}

void jv_to_str(jj_ctx *c, jj_buf *b, jv v) {
    if (v.kind == JV_STR) { jj_buf_put(c, b, v.u.s.p, v.u.s.n); return; }
    if (v.kind == JV_UNDEF) { if (v.flags & JVF_UNSAFE) jv_check_defined(c, v); return; }
    jv_repr(c, b, v);
}

jv jv_str_of(jj_ctx *c, jv v) {
    if (v.kind == JV_STR) return v;
    jj_buf b = {0};
    jv_to_str(c, &b, v);
    return jv_str(b.p ? b.p : "", b.n);
}

/* ---- json.dumps ---- */

static void json_str(jj_ctx *c, jj_buf *b, const char *p, size_t n, bool ascii) {
    jj_buf_putc(c, b, '"');
    for (size_t i = 0; i < n;) {
        size_t cl;
        uint32_t cp = decode_at(p, n, i, &cl);
        switch (cp) {
        case '"': jj_buf_put(c, b, "\\\"", 2); break;
        case '\\': jj_buf_put(c, b, "\\\\", 2); break;
        case '\n': jj_buf_put(c, b, "\\n", 2); break;
        case '\r': jj_buf_put(c, b, "\\r", 2); break;
        case '\t': jj_buf_put(c, b, "\\t", 2); break;
        case '\b': jj_buf_put(c, b, "\\b", 2); break;
        case '\f': jj_buf_put(c, b, "\\f", 2); break;
        default:
            if (cp < 0x20 || (ascii && cp >= 0x7f)) {
                if (cp > 0xffff) {
                    uint32_t v = cp - 0x10000;
                    jj_buf_printf(c, b, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
                } else jj_buf_printf(c, b, "\\u%04x", cp);
            } else jj_buf_put(c, b, p + i, cl);
        }
        i += cl;
    }
    jj_buf_putc(c, b, '"');
}

static void json_float(jj_ctx *c, jj_buf *b, double f) {
    if (isnan(f)) { jj_buf_put(c, b, "NaN", 3); return; }
    if (isinf(f)) { if (f < 0) jj_buf_put(c, b, "-Infinity", 9); else jj_buf_put(c, b, "Infinity", 8); return; }
    char tmp[64];
    jj_float_repr(tmp, sizeof tmp, f);
    jj_buf_put(c, b, tmp, strlen(tmp));
}

static void json_newline(jj_ctx *c, jj_buf *b, const jj_json_opts *o, int level) {
    jj_buf_putc(c, b, '\n');
    for (int i = 0; i < level; i++) jj_buf_put(c, b, o->indent, strlen(o->indent));
}

static jv json_key(jj_ctx *c, jv k) {
    switch ((jv_kind)k.kind) {
    case JV_STR: return k;
    case JV_NONE: return jv_str("null", 4);
    case JV_BOOL: return k.u.b ? jv_str("true", 4) : jv_str("false", 5);
    case JV_INT: case JV_FLOAT: { jj_buf b = {0}; if (k.kind == JV_INT) put_scalar(c, &b, k); else json_float(c, &b, k.u.f); return jv_str(b.p, b.n); }
    default: jj_fail(c, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    }
}

void jv_to_json(jj_ctx *c, jj_buf *b, jv v, const jj_json_opts *o, int level) {
    jj_step(c);
    if (level > c->max_depth) jj_fail(c, "tojson: value nests too deeply");
    switch ((jv_kind)v.kind) {
    case JV_NONE: jj_buf_put(c, b, "null", 4); return;
    case JV_BOOL: if (v.u.b) jj_buf_put(c, b, "true", 4); else jj_buf_put(c, b, "false", 5); return;
    case JV_INT: put_scalar(c, b, v); return;
    case JV_FLOAT: json_float(c, b, v.u.f); return;
    case JV_STR: json_str(c, b, v.u.s.p, v.u.s.n, o->ensure_ascii); return;
    case JV_LIST: {
        if (v.flags & JVF_GEN) jj_fail(c, "Object of type generator is not JSON serializable");
        if (!v.u.l->n) { jj_buf_put(c, b, "[]", 2); return; }
        jj_buf_putc(c, b, '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jj_buf_put(c, b, o->item_sep, strlen(o->item_sep));
            if (o->has_indent) json_newline(c, b, o, level + 1);
            jv_to_json(c, b, v.u.l->v[i], o, level + 1);
        }
        if (o->has_indent) json_newline(c, b, o, level);
        jj_buf_putc(c, b, ']');
        return;
    }
    case JV_DICT: {
        jj_dict *d = v.u.d;
        if (!d->n) { jj_buf_put(c, b, "{}", 2); return; }
        size_t *ord = jj_alloc(c, d->n * sizeof(size_t));
        for (size_t i = 0; i < d->n; i++) ord[i] = i;
        if (o->sort_keys) /* insertion sort keeps it simple; dicts here are small */
            for (size_t i = 1; i < d->n; i++)
                for (size_t j = i; j > 0 && jv_cmp(c, d->k[ord[j - 1]], d->k[ord[j]]) > 0; j--) {
                    size_t t = ord[j]; ord[j] = ord[j - 1]; ord[j - 1] = t;
                }
        jj_buf_putc(c, b, '{');
        for (size_t i = 0; i < d->n; i++) {
            if (i) jj_buf_put(c, b, o->item_sep, strlen(o->item_sep));
            if (o->has_indent) json_newline(c, b, o, level + 1);
            jv k = json_key(c, d->k[ord[i]]);
            json_str(c, b, k.u.s.p, k.u.s.n, o->ensure_ascii);
            jj_buf_put(c, b, o->key_sep, strlen(o->key_sep));
            jv_to_json(c, b, d->v[ord[i]], o, level + 1);
        }
        if (o->has_indent) json_newline(c, b, o, level);
        jj_buf_putc(c, b, '}');
        return;
    }
    default:
        if (v.kind == JV_UNDEF && (v.flags & JVF_UNSAFE)) jv_check_defined(c, v);
        jj_fail(c, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

jv jj_iterable_to_list(jj_ctx *c, jv v, const char *what) {
    switch ((jv_kind)v.kind) {
    case JV_LIST: return v;
    case JV_DICT: {
        jv l = jv_list_new(c, v.u.d->n);
        memcpy(l.u.l->v, v.u.d->k, v.u.d->n * sizeof(jv));
        l.u.l->n = v.u.d->n;
        return l;
    }
    case JV_STR: {
        jv l = jv_list_new(c, jj_utf8_len(v.u.s.p, v.u.s.n));
        for (size_t i = 0; i < v.u.s.n;) {
            size_t cl;
            decode_at(v.u.s.p, v.u.s.n, i, &cl);
            jj_list_push(c, l.u.l, jv_str(v.u.s.p + i, cl));
            i += cl;
        }
        return l;
    }
    case JV_UNDEF:
        if (v.flags & JVF_UNSAFE) jv_check_defined(c, v);
        return jv_list_new(c, 0);
    default:
        jj_fail(c, "%s: '%s' object is not iterable", what, jv_type_name(v));
    }
}
