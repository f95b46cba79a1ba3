/* Jinja filters and tests, following jinja2 3.1 (and transformers' tojson override).
 * Where jinja2 returns a generator (map, select, items, unique, ...) we return a list
 * flagged JVF_GEN: iterating and |list / |join work, printing it directly is refused
 * because jinja2 would print an object address. */
#include "chat/jinja_int.h"
#include <ctype.h>
#include <math.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <utf8proc.h>

typedef jv (*filter_fn)(jj_ctx *c, jv v, jv *p);
typedef struct { const char *name; filter_fn fn; const char *params[6]; int nparams; bool varargs; } filter_def;

static bool is_num(jv v) { return v.kind == JV_BOOL || v.kind == JV_INT || v.kind == JV_FLOAT; }

static jv gen(jv l) { l.flags |= JVF_GEN; l.flags &= (uint8_t)~JVF_TUPLE; return l; }

static bool arg_true(jj_ctx *c, jv v) { return jj_given(v) && jv_truthy(c, v); }

static jv sort_key(jj_ctx *c, jv v, jv attr, bool case_sensitive) {
    if (jj_given(attr) && attr.kind != JV_NONE) v = jj_attr_path(c, v, attr);
    if (!case_sensitive && v.kind == JV_STR) v = jj_case(c, v, 0);
    return v;
}

/* stable merge sort of items by keys */
static void msort(jj_ctx *c, jv *items, jv *keys, size_t n, jv *ti, jv *tk, bool rev) {
    if (n < 2) return;
    size_t h = n / 2;
    msort(c, items, keys, h, ti, tk, rev);
    msort(c, items + h, keys + h, n - h, ti, tk, rev);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        jj_step(c);
        int r = jv_cmp(c, keys[j], keys[i]);
        bool take_right = rev ? r > 0 : r < 0;
        if (take_right) { ti[k] = items[j]; tk[k++] = keys[j++]; }
        else { ti[k] = items[i]; tk[k++] = keys[i++]; }
    }
    while (i < h) { ti[k] = items[i]; tk[k++] = keys[i++]; }
    while (j < n) { ti[k] = items[j]; tk[k++] = keys[j++]; }
    memcpy(items, ti, n * sizeof(jv));
    memcpy(keys, tk, n * sizeof(jv));
}

/* pair_index >= 0: key is item[pair_index] (dictsort); else attr (may be missing) */
static jv sorted(jj_ctx *c, jv l, jv attr, bool cs, bool rev, int pair_index) {
    size_t n = l.u.l->n;
    jv out = jv_list_new(c, n);
    jv *keys = jj_alloc(c, (n + 1) * sizeof(jv)), *ti = jj_alloc(c, (n + 1) * sizeof(jv)), *tk = jj_alloc(c, (n + 1) * sizeof(jv));
    for (size_t i = 0; i < n; i++) {
        jv item = l.u.l->v[i];
        out.u.l->v[i] = item;
        if (pair_index >= 0) keys[i] = sort_key(c, item.u.l->v[pair_index], jv_none(), cs);
        else keys[i] = sort_key(c, item, attr, cs);
    }
    out.u.l->n = n;
    msort(c, out.u.l->v, keys, n, ti, tk, rev);
    return out;
}

static jv to_list(jj_ctx *c, jv v, const char *what) {
    jv_check_defined(c, v.kind == JV_UNDEF ? jv_none() : v);
    return jj_iterable_to_list(c, v, what);
}

/* ---- filters ---- */

static jv f_abs(jj_ctx *c, jv v, jv *p) {
    if (v.kind == JV_FLOAT) return jv_float(fabs(v.u.f));
    if (v.kind == JV_INT) { if (v.u.i == INT64_MIN) jj_fail(c, "abs: integer overflow"); return jv_int(v.u.i < 0 ? -v.u.i : v.u.i); }
    if (v.kind == JV_BOOL) return jv_int(v.u.b);
    jv_check_defined(c, v);
    jj_fail(c, "bad operand type for abs(): '%s'", jv_type_name(v));
}
static jv f_attr(jj_ctx *c, jv v, jv *p) { jv n = jv_str_of(c, p[0]); return jj_get_attr(c, v, n.u.s.p, n.u.s.n); }
static jv f_batch(jj_ctx *c, jv v, jv *p) {
    int64_t k = p[0].kind == JV_INT ? p[0].u.i : 0;
    if (k <= 0) jj_fail(c, "batch: line count must be a positive integer");
    jv l = to_list(c, v, "batch"), out = jv_list_new(c, 0), cur = jv_list_new(c, 0);
    for (size_t i = 0; i < l.u.l->n; i++) {
        jj_list_push(c, cur.u.l, l.u.l->v[i]);
        if ((int64_t)cur.u.l->n == k) { jj_list_push(c, out.u.l, cur); cur = jv_list_new(c, 0); }
    }
    if (cur.u.l->n) {
        if (jj_given(p[1]) && p[1].kind != JV_NONE) while ((int64_t)cur.u.l->n < k) jj_list_push(c, cur.u.l, p[1]);
        jj_list_push(c, out.u.l, cur);
    }
    return gen(out);
}
static jv f_capitalize(jj_ctx *c, jv v, jv *p) { return jj_case(c, v, 2); }
static jv f_center(jj_ctx *c, jv v, jv *p) {
    v = jv_str_of(c, v);
    int64_t w = jj_given(p[0]) ? (p[0].kind == JV_INT ? p[0].u.i : 80) : 80;
    int64_t len = (int64_t)jj_utf8_len(v.u.s.p, v.u.s.n);
    if (w <= len) return v;
    int64_t pad = w - len, left = pad / 2 + (pad & w & 1);
    if (w > 100000) jj_fail(c, "center: width too large");
    jj_buf b = {0};
    for (int64_t i = 0; i < left; i++) jj_buf_putc(c, &b, ' ');
    jj_buf_put(c, &b, v.u.s.p, v.u.s.n);
    for (int64_t i = 0; i < pad - left; i++) jj_buf_putc(c, &b, ' ');
    return jv_str(b.p, b.n);
}
static jv f_default(jj_ctx *c, jv v, jv *p) {
    jv d = jj_given(p[0]) ? p[0] : jv_str("", 0);
    if (v.kind == JV_UNDEF || (arg_true(c, p[1]) && !jv_truthy(c, v))) return d;
    return v;
}
static jv f_dictsort(jj_ctx *c, jv v, jv *p) {
    jv_check_defined(c, v);
    if (v.kind != JV_DICT) jj_fail(c, "dictsort: expected a mapping, got '%s'", jv_type_name(v));
    int by = 0;
    if (jj_given(p[1])) {
        jv b = jv_str_of(c, p[1]);
        if (b.u.s.n == 3 && !memcmp(b.u.s.p, "key", 3)) by = 0;
        else if (b.u.s.n == 5 && !memcmp(b.u.s.p, "value", 5)) by = 1;
        else jj_fail(c, "You can only sort by either \"key\" or \"value\"");
    }
    jv pairs = jv_list_new(c, v.u.d->n);
    for (size_t i = 0; i < v.u.d->n; i++) {
        jv t = jv_list_new(c, 2);
        t.flags = JVF_TUPLE;
        jj_list_push(c, t.u.l, v.u.d->k[i]);
        jj_list_push(c, t.u.l, v.u.d->v[i]);
        jj_list_push(c, pairs.u.l, t);
    }
    return sorted(c, pairs, jv_none(), arg_true(c, p[0]), arg_true(c, p[2]), by);
}
static jv f_escape(jj_ctx *c, jv v, jv *p) {
    v = jv_str_of(c, v);
    jj_buf b = {0};
    for (size_t i = 0; i < v.u.s.n; i++) {
        char ch = v.u.s.p[i];
        switch (ch) {
        case '&': jj_buf_put(c, &b, "&amp;", 5); break;
        case '<': jj_buf_put(c, &b, "&lt;", 4); break;
        case '>': jj_buf_put(c, &b, "&gt;", 4); break;
        case '"': jj_buf_put(c, &b, "&#34;", 5); break;
        case '\'': jj_buf_put(c, &b, "&#39;", 5); break;
        default: jj_buf_putc(c, &b, ch);
        }
    }
    return jv_str(b.p ? b.p : "", b.n);
}
static jv f_first(jj_ctx *c, jv v, jv *p) {
    jv l = to_list(c, v, "first");
    return l.u.l->n ? l.u.l->v[0] : jv_undef("No first item, sequence was empty.");
}
static jv f_last(jj_ctx *c, jv v, jv *p) {
    jv l = to_list(c, v, "last");
    return l.u.l->n ? l.u.l->v[l.u.l->n - 1] : jv_undef("No last item, sequence was empty.");
}

/* Python float(str): optional spaces, sign, digits with underscores, inf/nan */
static bool parse_float(jj_ctx *c, jv s, double *out) {
    jv t = jj_strip(c, s, jv_none(), 3);
    char *z = jj_alloc(c, t.u.s.n + 1);
    size_t k = 0;
    for (size_t i = 0; i < t.u.s.n; i++) {
        char ch = t.u.s.p[i];
        if (ch == '_') { if (i == 0 || i + 1 >= t.u.s.n || !isdigit((unsigned char)t.u.s.p[i - 1]) || !isdigit((unsigned char)t.u.s.p[i + 1])) return false; continue; }
        if (!(isdigit((unsigned char)ch) || ch == '.' || ch == 'e' || ch == 'E' || ch == '+' || ch == '-' || isalpha((unsigned char)ch))) return false;
        z[k++] = ch;
    }
    z[k] = 0;
    if (!k) return false;
    const char *q = z + (z[0] == '+' || z[0] == '-');
    if (!strcasecmp(q, "inf") || !strcasecmp(q, "infinity")) { *out = z[0] == '-' ? -INFINITY : INFINITY; return true; }
    if (!strcasecmp(q, "nan")) { *out = NAN; return true; }
    for (const char *r = q; *r; r++) if (isalpha((unsigned char)*r) && *r != 'e' && *r != 'E') return false;
    if (!isdigit((unsigned char)q[0]) && !(q[0] == '.' && isdigit((unsigned char)q[1]))) return false;
    char *e;
    *out = strtod(z, &e);
    return *e == 0;
}
static jv f_float(jj_ctx *c, jv v, jv *p) {
    jv d = jj_given(p[0]) ? p[0] : jv_float(0.0);
    if (v.kind == JV_FLOAT) return v;
    if (v.kind == JV_INT || v.kind == JV_BOOL) return jv_float(v.kind == JV_INT ? (double)v.u.i : v.u.b);
    double f;
    if (v.kind == JV_STR && parse_float(c, v, &f)) return jv_float(f);
    return d;
}
static jv f_int(jj_ctx *c, jv v, jv *p) {
    jv d = jj_given(p[0]) ? p[0] : jv_int(0);
    if (jj_given(p[1]) && !(p[1].kind == JV_INT && p[1].u.i == 10)) jj_fail(c, "int filter: only base 10 is supported");
    if (v.kind == JV_INT) return v;
    if (v.kind == JV_BOOL) return jv_int(v.u.b);
    if (v.kind == JV_FLOAT) {
        if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18) return d;
        return jv_int((int64_t)v.u.f);
    }
    if (v.kind == JV_STR) {
        jv t = jj_strip(c, v, jv_none(), 3);
        const char *s = t.u.s.p;
        size_t n = t.u.s.n, i = 0;
        bool neg = false, ok = n > 0;
        if (i < n && (s[i] == '+' || s[i] == '-')) { neg = s[i] == '-'; i++; }
        if (i >= n) ok = false;
        int64_t r = 0;
        for (size_t k = i; ok && k < n; k++) {
            if (s[k] == '_' && k > i && k + 1 < n && isdigit((unsigned char)s[k + 1])) continue;
            if (!isdigit((unsigned char)s[k])) { ok = false; break; }
            if (__builtin_mul_overflow(r, 10, &r) || __builtin_add_overflow(r, s[k] - '0', &r)) jj_fail(c, "int: value too large");
        }
        if (ok) return jv_int(neg ? -r : r);
        double f;
        if (parse_float(c, v, &f) && isfinite(f) && fabs(f) < 9.2e18) return jv_int((int64_t)f);
    }
    return d;
}
static jv f_indent(jj_ctx *c, jv v, jv *p) {
    jv ind;
    if (!jj_given(p[0])) ind = jv_str("    ", 4);
    else if (p[0].kind == JV_STR) ind = p[0];
    else {
        int64_t w = p[0].kind == JV_INT ? p[0].u.i : 4;
        if (w > 10000) jj_fail(c, "indent: width too large");
        jj_buf b = {0};
        for (int64_t i = 0; i < w; i++) jj_buf_putc(c, &b, ' ');
        ind = jv_str(b.p ? b.p : "", b.n);
    }
    v = jv_str_of(c, v);
    jj_buf src = {0};
    jj_buf_put(c, &src, v.u.s.p, v.u.s.n);
    jj_buf_putc(c, &src, '\n');
    jv lines = jj_splitlines(c, src.p, src.n);
    jj_buf b = {0};
    if (arg_true(c, p[1 + 1])) { /* blank=True: indent every line, blank ones too */
        for (size_t i = 0; i < lines.u.l->n; i++) {
            if (i) { jj_buf_putc(c, &b, '\n'); jj_buf_put(c, &b, ind.u.s.p, ind.u.s.n); }
            jj_buf_put(c, &b, lines.u.l->v[i].u.s.p, lines.u.l->v[i].u.s.n);
        }
    } else {
        for (size_t i = 0; i < lines.u.l->n; i++) {
            jv ln = lines.u.l->v[i];
            if (i) { jj_buf_putc(c, &b, '\n'); if (ln.u.s.n) jj_buf_put(c, &b, ind.u.s.p, ind.u.s.n); }
            jj_buf_put(c, &b, ln.u.s.p, ln.u.s.n);
        }
    }
    if (arg_true(c, p[1])) {
        jj_buf r = {0};
        jj_buf_put(c, &r, ind.u.s.p, ind.u.s.n);
        jj_buf_put(c, &r, b.p ? b.p : "", b.n);
        return jv_str(r.p, r.n);
    }
    return jv_str(b.p ? b.p : "", b.n);
}
static jv f_items(jj_ctx *c, jv v, jv *p) {
    if (v.kind == JV_UNDEF) { jv_truthy(c, v); return gen(jv_list_new(c, 0)); }
    if (v.kind != JV_DICT) jj_fail(c, "Can only get item pairs from a mapping.");
    jv l = jv_list_new(c, v.u.d->n);
    for (size_t i = 0; i < v.u.d->n; i++) {
        jv t = jv_list_new(c, 2);
        t.flags = JVF_TUPLE;
        jj_list_push(c, t.u.l, v.u.d->k[i]);
        jj_list_push(c, t.u.l, v.u.d->v[i]);
        jj_list_push(c, l.u.l, t);
    }
    return gen(l);
}
static jv f_join(jj_ctx *c, jv v, jv *p) {
    jv l = to_list(c, v, "join");
    jv sep = jj_given(p[0]) ? jv_str_of(c, p[0]) : jv_str("", 0);
    jj_buf b = {0};
    for (size_t i = 0; i < l.u.l->n; i++) {
        if (i) jj_buf_put(c, &b, sep.u.s.p, sep.u.s.n);
        jv x = l.u.l->v[i];
        if (jj_given(p[1]) && p[1].kind != JV_NONE) x = jj_attr_path(c, x, p[1]);
        jv_to_str(c, &b, x);
    }
    return jv_str(b.p ? b.p : "", b.n);
}
static jv f_length(jj_ctx *c, jv v, jv *p) {
    switch ((jv_kind)v.kind) {
    case JV_STR: return jv_int((int64_t)jj_utf8_len(v.u.s.p, v.u.s.n));
    case JV_LIST: return jv_int((int64_t)v.u.l->n);
    case JV_DICT: return jv_int((int64_t)v.u.d->n);
    case JV_UNDEF: jv_truthy(c, v); return jv_int(0);
    default: jj_fail(c, "object of type '%s' has no len()", jv_type_name(v));
    }
}
static jv f_list(jj_ctx *c, jv v, jv *p) {
    jv l = to_list(c, v, "list"), out = jv_list_new(c, l.u.l->n);
    if (l.u.l->n) memcpy(out.u.l->v, l.u.l->v, l.u.l->n * sizeof(jv));
    out.u.l->n = l.u.l->n;
    return out;
}
static jv f_lower(jj_ctx *c, jv v, jv *p) { return jj_case(c, v, 0); }
static jv f_upper(jj_ctx *c, jv v, jv *p) { return jj_case(c, v, 1); }
static jv f_title(jj_ctx *c, jv v, jv *p) { return jj_case(c, v, 3); }
static jv f_minmax(jj_ctx *c, jv v, jv *p, bool max) {
    jv l = to_list(c, v, max ? "max" : "min");
    if (!l.u.l->n) return jv_undef("No aggregated item, sequence was empty.");
    size_t best = 0;
    jv bk = sort_key(c, l.u.l->v[0], p[1], arg_true(c, p[0]));
    for (size_t i = 1; i < l.u.l->n; i++) {
        jv k = sort_key(c, l.u.l->v[i], p[1], arg_true(c, p[0]));
        int r = jv_cmp(c, k, bk);
        if (max ? r > 0 : r < 0) { best = i; bk = k; }
    }
    return l.u.l->v[best];
}
static jv f_max(jj_ctx *c, jv v, jv *p) { return f_minmax(c, v, p, true); }
static jv f_min(jj_ctx *c, jv v, jv *p) { return f_minmax(c, v, p, false); }
static jv f_replace(jj_ctx *c, jv v, jv *p) {
    int64_t cnt = jj_given(p[2]) && p[2].kind != JV_NONE ? (p[2].kind == JV_INT ? p[2].u.i : -1) : -1;
    return jj_replace(c, v, p[0], p[1], cnt);
}
static jv f_reverse(jj_ctx *c, jv v, jv *p) {
    if (v.kind == JV_STR) {
        jv chars = jj_iterable_to_list(c, v, "reverse");
        jj_buf b = {0};
        for (size_t i = chars.u.l->n; i-- > 0;) jj_buf_put(c, &b, chars.u.l->v[i].u.s.p, chars.u.l->v[i].u.s.n);
        return jv_str(b.p ? b.p : "", b.n);
    }
    jv l = to_list(c, v, "reverse"), out = jv_list_new(c, l.u.l->n);
    for (size_t i = l.u.l->n; i-- > 0;) jj_list_push(c, out.u.l, l.u.l->v[i]);
    return gen(out);
}
static jv f_round(jj_ctx *c, jv v, jv *p) {
    int64_t prec = jj_given(p[0]) ? (p[0].kind == JV_INT ? p[0].u.i : 0) : 0;
    const char *method = "common";
    if (jj_given(p[1])) { jv m = jv_str_of(c, p[1]); method = jj_strndup(c, m.u.s.p, m.u.s.n); }
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor")) jj_fail(c, "method must be common, ceil or floor");
    jv_check_defined(c, v);
    if (!is_num(v)) jj_fail(c, "round: expected a number, got '%s'", jv_type_name(v));
    if (prec < -300 || prec > 300) jj_fail(c, "round: precision out of range");
    if (!strcmp(method, "common")) {
        if (v.kind != JV_FLOAT) {
            if (prec >= 0) return jv_int(v.kind == JV_INT ? v.u.i : v.u.b);
            jj_fail(c, "round: negative precision on integers is not supported");
        }
        if (!isfinite(v.u.f)) return v;
        /* Python rounds the exact binary value half-to-even; so does printf */
        char buf[400];
        if (prec >= 0) { snprintf(buf, sizeof buf, "%.*f", (int)prec, v.u.f); return jv_float(strtod(buf, NULL)); }
        double s = pow(10.0, (double)-prec);
        double q = v.u.f / s, r = nearbyint(q);
        return jv_float(r * s);
    }
    double x = v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : v.u.b, s = pow(10.0, (double)prec);
    double r = (!strcmp(method, "ceil") ? ceil(x * s) : floor(x * s)) / s;
    return jv_float(r);
}
static jv f_safe(jj_ctx *c, jv v, jv *p) { return jv_str_of(c, v); }
static jv f_sort(jj_ctx *c, jv v, jv *p) {
    jv l = to_list(c, v, "sort");
    return sorted(c, l, p[2], arg_true(c, p[1]), arg_true(c, p[0]), -1);
}
static jv f_string(jj_ctx *c, jv v, jv *p) { return jv_str_of(c, v); }
static jv f_sum(jj_ctx *c, jv v, jv *p) {
    jv l = to_list(c, v, "sum"), acc = jj_given(p[1]) ? p[1] : jv_int(0);
    for (size_t i = 0; i < l.u.l->n; i++) {
        jv x = l.u.l->v[i];
        if (jj_given(p[0]) && p[0].kind != JV_NONE) x = jj_attr_path(c, x, p[0]);
        acc = jj_binary(c, OP_ADD, acc, x);
    }
    return acc;
}
static jv f_tojson(jj_ctx *c, jv v, jv *p) {
    jj_json_opts o = {0};
    o.ensure_ascii = arg_true(c, p[0]);
    o.sort_keys = arg_true(c, p[3]);
    jv ind = p[1];
    if (jj_given(ind) && ind.kind != JV_NONE) {
        o.has_indent = true;
        if (ind.kind == JV_STR) o.indent = jj_strndup(c, ind.u.s.p, ind.u.s.n);
        else if (ind.kind == JV_INT || ind.kind == JV_BOOL) {
            int64_t w = ind.kind == JV_INT ? ind.u.i : ind.u.b;
            if (w > 1000) jj_fail(c, "tojson: indent too large");
            char *s = jj_alloc(c, (size_t)(w > 0 ? w : 0) + 1);
            for (int64_t i = 0; i < w; i++) s[i] = ' ';
            s[w > 0 ? w : 0] = 0;
            o.indent = s;
        } else jj_fail(c, "tojson: indent must be an integer or a string");
    }
    o.item_sep = o.has_indent ? "," : ", ";
    o.key_sep = ": ";
    if (jj_given(p[2]) && p[2].kind != JV_NONE) {
        jv s = p[2];
        if (s.kind != JV_LIST || s.u.l->n != 2 || s.u.l->v[0].kind != JV_STR || s.u.l->v[1].kind != JV_STR)
            jj_fail(c, "tojson: separators must be a pair of strings");
        o.item_sep = jj_strndup(c, s.u.l->v[0].u.s.p, s.u.l->v[0].u.s.n);
        o.key_sep = jj_strndup(c, s.u.l->v[1].u.s.p, s.u.l->v[1].u.s.n);
    }
    jj_buf b = {0};
    jv_to_json(c, &b, v, &o, 0);
    return jv_str(b.p ? b.p : "", b.n);
}
static jv f_trim(jj_ctx *c, jv v, jv *p) { return jj_strip(c, jv_str_of(c, v), p[0], 3); }
static jv f_unique(jj_ctx *c, jv v, jv *p) {
    jv l = to_list(c, v, "unique"), out = jv_list_new(c, 0), seen = jv_list_new(c, 0);
    for (size_t i = 0; i < l.u.l->n; i++) {
        jv k = sort_key(c, l.u.l->v[i], p[1], arg_true(c, p[0]));
        bool dup = false;
        for (size_t j = 0; j < seen.u.l->n && !dup; j++) { jj_step(c); dup = jv_eq(seen.u.l->v[j], k); }
        if (dup) continue;
        jj_list_push(c, seen.u.l, k);
        jj_list_push(c, out.u.l, l.u.l->v[i]);
    }
    return gen(out);
}
static jv f_wordcount(jj_ctx *c, jv v, jv *p) {
    v = jv_str_of(c, v);
    int64_t n = 0;
    bool in = false;
    for (size_t i = 0; i < v.u.s.n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)v.u.s.p + i, (utf8proc_ssize_t)(v.u.s.n - i), &cp);
        if (k <= 0) { k = 1; cp = 0xFFFD; }
        utf8proc_category_t cat = utf8proc_category(cp);
        bool w = cp == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
                 (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
        if (w && !in) n++;
        in = w;
        i += (size_t)k;
    }
    return jv_int(n);
}
static jv f_format(jj_ctx *c, jv v, jv *p) {
    /* printf-style: value % args; only %s, %d, %i and %% */
    v = jv_str_of(c, v);
    jv args = p[0];
    size_t ai = 0;
    jj_buf b = {0};
    for (size_t i = 0; i < v.u.s.n; i++) {
        char ch = v.u.s.p[i];
        if (ch != '%') { jj_buf_putc(c, &b, ch); continue; }
        if (i + 1 >= v.u.s.n) jj_fail(c, "format: incomplete format");
        char f = v.u.s.p[++i];
        if (f == '%') { jj_buf_putc(c, &b, '%'); continue; }
        if (f != 's' && f != 'd' && f != 'i') jj_fail(c, "format: conversion '%%%c' is not supported", f);
        if (ai >= args.u.l->n) jj_fail(c, "format: not enough arguments for format string");
        jv a = args.u.l->v[ai++];
        if (f == 's') jv_to_str(c, &b, a);
        else {
            if (a.kind == JV_FLOAT) a = jv_int((int64_t)a.u.f);
            if (a.kind != JV_INT && a.kind != JV_BOOL) jj_fail(c, "format: %%d format: a real number is required, not %s", jv_type_name(a));
            jv_to_str(c, &b, a.kind == JV_BOOL ? jv_int(a.u.b) : a);
        }
    }
    if (ai < args.u.l->n) jj_fail(c, "format: not all arguments converted during string formatting");
    return jv_str(b.p ? b.p : "", b.n);
}

/* map / select / reject / selectattr / rejectattr receive raw args (p[0] = all positional
 * as a tuple, p[1] = kwargs dict) since their signatures are variadic. */
static jv call_filter_by_name(jj_ctx *c, jv name, jv item, jv *rest, int nrest);
static bool call_test_by_name(jj_ctx *c, jv name, jv item, jv *rest, int nrest);

static jv f_map(jj_ctx *c, jv v, jv *p) {
    jv l = to_list(c, v, "map"), out = jv_list_new(c, l.u.l->n);
    jj_list *pos = p[0].u.l;
    jj_dict *kw = p[1].u.d;
    jv attr, dflt;
    bool has_attr = jj_dict_get_s(kw, "attribute", 9, &attr);
    bool has_dflt = jj_dict_get_s(kw, "default", 7, &dflt);
    if (has_attr) {
        if (pos->n) jj_fail(c, "map: attribute= and a filter name cannot be combined");
        if (kw->n > (size_t)(1 + has_dflt)) jj_fail(c, "map: unexpected keyword argument");
        for (size_t i = 0; i < l.u.l->n; i++) {
            jv x = jj_attr_path(c, l.u.l->v[i], attr);
            if (x.kind == JV_UNDEF && has_dflt) x = dflt;
            jj_list_push(c, out.u.l, x);
        }
        return gen(out);
    }
    if (!pos->n) jj_fail(c, "map requires a filter argument");
    if (kw->n) jj_fail(c, "map: keyword arguments to the mapped filter are not supported");
    for (size_t i = 0; i < l.u.l->n; i++)
        jj_list_push(c, out.u.l, call_filter_by_name(c, pos->v[0], l.u.l->v[i], pos->v + 1, (int)pos->n - 1));
    return gen(out);
}
static jv select_common(jj_ctx *c, jv v, jv *p, bool want, bool by_attr) {
    jv l = to_list(c, v, "select"), out = jv_list_new(c, 0);
    jj_list *pos = p[0].u.l;
    if (p[1].u.d->n) jj_fail(c, "select/reject: keyword arguments are not supported");
    size_t at = 0;
    jv attr = jv_none();
    if (by_attr) { if (!pos->n) jj_fail(c, "Missing parameter for attribute name"); attr = pos->v[at++]; }
    for (size_t i = 0; i < l.u.l->n; i++) {
        jv item = l.u.l->v[i], x = by_attr ? jj_attr_path(c, item, attr) : item;
        bool r = at < pos->n ? call_test_by_name(c, pos->v[at], x, pos->v + at + 1, (int)(pos->n - at - 1)) : jv_truthy(c, x);
        if (r == want) jj_list_push(c, out.u.l, item);
    }
    return gen(out);
}
static jv f_select(jj_ctx *c, jv v, jv *p) { return select_common(c, v, p, true, false); }
static jv f_reject(jj_ctx *c, jv v, jv *p) { return select_common(c, v, p, false, false); }
static jv f_selectattr(jj_ctx *c, jv v, jv *p) { return select_common(c, v, p, true, true); }
static jv f_rejectattr(jj_ctx *c, jv v, jv *p) { return select_common(c, v, p, false, true); }

#define VAR true
static const filter_def k_filters[] = {
    {"abs", f_abs, {0}, 0, false},
    {"attr", f_attr, {"name"}, 1, false},
    {"batch", f_batch, {"linecount", "fill_with"}, 2, false},
    {"capitalize", f_capitalize, {0}, 0, false},
    {"center", f_center, {"width"}, 1, false},
    {"count", f_length, {0}, 0, false},
    {"d", f_default, {"default_value", "boolean"}, 2, false},
    {"default", f_default, {"default_value", "boolean"}, 2, false},
    {"dictsort", f_dictsort, {"case_sensitive", "by", "reverse"}, 3, false},
    {"e", f_escape, {0}, 0, false},
    {"escape", f_escape, {0}, 0, false},
    {"first", f_first, {0}, 0, false},
    {"float", f_float, {"default"}, 1, false},
    {"forceescape", f_escape, {0}, 0, false},
    {"format", f_format, {0}, 0, VAR},
    {"indent", f_indent, {"width", "first", "blank"}, 3, false},
    {"int", f_int, {"default", "base"}, 2, false},
    {"items", f_items, {0}, 0, false},
    {"join", f_join, {"d", "attribute"}, 2, false},
    {"last", f_last, {0}, 0, false},
    {"length", f_length, {0}, 0, false},
    {"list", f_list, {0}, 0, false},
    {"lower", f_lower, {0}, 0, false},
    {"map", f_map, {0}, 0, VAR},
    {"max", f_max, {"case_sensitive", "attribute"}, 2, false},
    {"min", f_min, {"case_sensitive", "attribute"}, 2, false},
    {"reject", f_reject, {0}, 0, VAR},
    {"rejectattr", f_rejectattr, {0}, 0, VAR},
    {"replace", f_replace, {"old", "new", "count"}, 3, false},
    {"reverse", f_reverse, {0}, 0, false},
    {"round", f_round, {"precision", "method"}, 2, false},
    {"safe", f_safe, {0}, 0, false},
    {"select", f_select, {0}, 0, VAR},
    {"selectattr", f_selectattr, {0}, 0, VAR},
    {"sort", f_sort, {"reverse", "case_sensitive", "attribute"}, 3, false},
    {"string", f_string, {0}, 0, false},
    {"sum", f_sum, {"attribute", "start"}, 2, false},
    {"title", f_title, {0}, 0, false},
    {"tojson", f_tojson, {"ensure_ascii", "indent", "separators", "sort_keys"}, 4, false},
    {"trim", f_trim, {"chars"}, 1, false},
    {"unique", f_unique, {"case_sensitive", "attribute"}, 2, false},
    {"upper", f_upper, {0}, 0, false},
    {"wordcount", f_wordcount, {0}, 0, false},
};

int jj_filter_index(const char *name, size_t n) {
    for (size_t i = 0; i < OB_ARRAY_LEN(k_filters); i++)
        if (strlen(k_filters[i].name) == n && memcmp(k_filters[i].name, name, n) == 0) return (int)i;
    return -1;
}

jv jj_apply_filter(jj_ctx *c, int idx, jv v, jv *args, int nargs, const char **kwn, const size_t *kwnl, jv *kwv, int nkw) {
    jj_step(c);
    const filter_def *f = &k_filters[idx];
    jv p[6];
    if (f->varargs) {
        /* format takes positional args only (kwargs would be %(name)s); map/select take both */
        p[0] = jv_list_new(c, (size_t)nargs);
        p[0].flags = JVF_TUPLE;
        for (int i = 0; i < nargs; i++) jj_list_push(c, p[0].u.l, args[i]);
        p[1] = jv_dict_new(c, (size_t)nkw);
        for (int i = 0; i < nkw; i++) jj_dict_set(c, p[1].u.d, jv_str(kwn[i], kwnl[i]), kwv[i]);
        if (f->fn == f_format && nkw) jj_fail(c, "format: keyword arguments are not supported");
    } else {
        jj_args a = {args, nargs, kwn, kwnl, kwv, nkw};
        jj_bind(c, f->name, &a, f->params, f->nparams, p);
    }
    if (v.kind == JV_UNDEF && (v.flags & JVF_UNSAFE)) jv_check_defined(c, v);
    return f->fn(c, v, p);
}

static jv call_filter_by_name(jj_ctx *c, jv name, jv item, jv *rest, int nrest) {
    jv n = jv_str_of(c, name);
    int idx = jj_filter_index(n.u.s.p, n.u.s.n);
    if (idx < 0) jj_fail(c, "no filter named '%.*s'", (int)n.u.s.n, n.u.s.p);
    return jj_apply_filter(c, idx, item, rest, nrest, NULL, NULL, NULL, 0);
}

/* ---- tests ---- */

typedef bool (*test_fn)(jj_ctx *c, jv v, jv *args, int nargs);
static bool need1(jj_ctx *c, int nargs, const char *name) {
    if (nargs != 1) jj_fail(c, "test '%s' takes one argument", name);
    return true;
}
static bool t_defined(jj_ctx *c, jv v, jv *a, int n) { return v.kind != JV_UNDEF; }
static bool t_undefined(jj_ctx *c, jv v, jv *a, int n) { return v.kind == JV_UNDEF; }
static bool t_none(jj_ctx *c, jv v, jv *a, int n) { return v.kind == JV_NONE; }
static bool t_boolean(jj_ctx *c, jv v, jv *a, int n) { return v.kind == JV_BOOL; }
static bool t_false(jj_ctx *c, jv v, jv *a, int n) { return v.kind == JV_BOOL && !v.u.b; }
static bool t_true(jj_ctx *c, jv v, jv *a, int n) { return v.kind == JV_BOOL && v.u.b; }
static bool t_integer(jj_ctx *c, jv v, jv *a, int n) { return v.kind == JV_INT; }
static bool t_float(jj_ctx *c, jv v, jv *a, int n) { return v.kind == JV_FLOAT; }
static bool t_number(jj_ctx *c, jv v, jv *a, int n) { return is_num(v); }
static bool t_string(jj_ctx *c, jv v, jv *a, int n) { return v.kind == JV_STR; }
static bool t_mapping(jj_ctx *c, jv v, jv *a, int n) { return v.kind == JV_DICT; }
static bool t_iterable(jj_ctx *c, jv v, jv *a, int n) { return v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_UNDEF; }
static bool t_sequence(jj_ctx *c, jv v, jv *a, int n) { return v.kind == JV_STR || (v.kind == JV_LIST && !(v.flags & JVF_GEN)) || v.kind == JV_DICT || v.kind == JV_UNDEF; }
static bool t_callable(jj_ctx *c, jv v, jv *a, int n) { return v.kind == JV_FUNC || v.kind == JV_MACRO; }
static bool t_odd(jj_ctx *c, jv v, jv *a, int n) { jv r = jj_binary(c, OP_MOD, v, jv_int(2)); return jv_eq(r, jv_int(1)); }
static bool t_even(jj_ctx *c, jv v, jv *a, int n) { jv r = jj_binary(c, OP_MOD, v, jv_int(2)); return jv_eq(r, jv_int(0)); }
static bool t_divisibleby(jj_ctx *c, jv v, jv *a, int n) { need1(c, n, "divisibleby"); return jv_eq(jj_binary(c, OP_MOD, v, a[0]), jv_int(0)); }
static bool t_eq(jj_ctx *c, jv v, jv *a, int n) { need1(c, n, "eq"); return jv_eq(v, a[0]); }
static bool t_ne(jj_ctx *c, jv v, jv *a, int n) { need1(c, n, "ne"); return !jv_eq(v, a[0]); }
static bool t_lt(jj_ctx *c, jv v, jv *a, int n) { need1(c, n, "lt"); return jv_cmp(c, v, a[0]) < 0; }
static bool t_le(jj_ctx *c, jv v, jv *a, int n) { need1(c, n, "le"); return jv_cmp(c, v, a[0]) <= 0; }
static bool t_gt(jj_ctx *c, jv v, jv *a, int n) { need1(c, n, "gt"); return jv_cmp(c, v, a[0]) > 0; }
static bool t_ge(jj_ctx *c, jv v, jv *a, int n) { need1(c, n, "ge"); return jv_cmp(c, v, a[0]) >= 0; }
static bool t_in(jj_ctx *c, jv v, jv *a, int n) {
    need1(c, n, "in");
    jv seq = a[0];
    if (seq.kind == JV_STR) {
        if (v.kind != JV_STR) jj_fail(c, "'in <string>' requires string as left operand, not %s", jv_type_name(v));
        return v.u.s.n == 0 || memmem(seq.u.s.p, seq.u.s.n, v.u.s.p, v.u.s.n) != NULL;
    }
    if (seq.kind == JV_DICT) { jv x; return jj_dict_get(seq.u.d, v, &x); }
    jv l = to_list(c, seq, "in");
    for (size_t i = 0; i < l.u.l->n; i++) if (jv_eq(l.u.l->v[i], v)) return true;
    return false;
}
static bool t_sameas(jj_ctx *c, jv v, jv *a, int n) {
    need1(c, n, "sameas");
    jv b = a[0];
    if (v.kind != b.kind) return false;
    switch ((jv_kind)v.kind) {
    case JV_NONE: case JV_UNDEF: return true;
    case JV_BOOL: return v.u.b == b.u.b;
    case JV_LIST: return v.u.l == b.u.l;
    case JV_DICT: case JV_NS: return v.u.d == b.u.d;
    default: jj_fail(c, "test 'sameas' is only supported for None, booleans and containers");
    }
}
static bool t_lower(jj_ctx *c, jv v, jv *a, int n) { jv s = jv_str_of(c, v); return jv_eq(jj_case(c, s, 0), s); }
static bool t_upper(jj_ctx *c, jv v, jv *a, int n) { jv s = jv_str_of(c, v); return jv_eq(jj_case(c, s, 1), s); }
static bool t_escaped(jj_ctx *c, jv v, jv *a, int n) { return false; }
static bool t_filter(jj_ctx *c, jv v, jv *a, int n) { return v.kind == JV_STR && jj_filter_index(v.u.s.p, v.u.s.n) >= 0; }
static bool t_test(jj_ctx *c, jv v, jv *a, int n) { return v.kind == JV_STR && jj_test_index(v.u.s.p, v.u.s.n) >= 0; }

static const struct { const char *name; test_fn fn; } k_tests[] = {
    {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none}, {"boolean", t_boolean},
    {"false", t_false}, {"true", t_true}, {"integer", t_integer}, {"float", t_float}, {"number", t_number},
    {"string", t_string}, {"mapping", t_mapping}, {"iterable", t_iterable}, {"sequence", t_sequence},
    {"callable", t_callable}, {"odd", t_odd}, {"even", t_even}, {"divisibleby", t_divisibleby},
    {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"ne", t_ne}, {"!=", t_ne}, {"lt", t_lt},
    {"lessthan", t_lt}, {"<", t_lt}, {"le", t_le}, {"<=", t_le}, {"gt", t_gt}, {"greaterthan", t_gt},
    {">", t_gt}, {"ge", t_ge}, {">=", t_ge}, {"in", t_in}, {"sameas", t_sameas}, {"lower", t_lower},
    {"upper", t_upper}, {"escaped", t_escaped}, {"filter", t_filter}, {"test", t_test},
};

int jj_test_index(const char *name, size_t n) {
    for (size_t i = 0; i < OB_ARRAY_LEN(k_tests); i++)
        if (strlen(k_tests[i].name) == n && memcmp(k_tests[i].name, name, n) == 0) return (int)i;
    return -1;
}

bool jj_apply_test(jj_ctx *c, int idx, jv v, jv *args, int nargs) {
    jj_step(c);
    if (v.kind == JV_UNDEF && (v.flags & JVF_UNSAFE)) jv_check_defined(c, v);
    test_fn fn = k_tests[idx].fn;
    if (nargs && fn != t_divisibleby && fn != t_eq && fn != t_ne && fn != t_lt && fn != t_le && fn != t_gt &&
        fn != t_ge && fn != t_in && fn != t_sameas)
        jj_fail(c, "test '%s' takes no arguments", k_tests[idx].name);
    return fn(c, v, args, nargs);
}

static bool call_test_by_name(jj_ctx *c, jv name, jv item, jv *rest, int nrest) {
    jv n = jv_str_of(c, name);
    int idx = jj_test_index(n.u.s.p, n.u.s.n);
    if (idx < 0) jj_fail(c, "no test named '%.*s'", (int)n.u.s.n, n.u.s.p);
    return jj_apply_test(c, idx, item, rest, nrest);
}
