/* Jinja built-ins other than filters and tests: globals (range, namespace, dict,
 * raise_exception, strftime_now), attribute and item lookup with jinja2's sandbox rules,
 * the str / dict / list / loop methods templates call, and slicing. */
#include "chat/jinja_int.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <utf8proc.h>

void jj_bind(jj_ctx *c, const char *fname, const jj_args *in, const char *const *names, int nnames, jv *out) {
    jv missing = jv_undef("missing argument");
    missing.flags = JVF_MISSING;
    for (int i = 0; i < nnames; i++) out[i] = missing;
    if (in->na > nnames) jj_fail(c, "%s() takes at most %d argument(s) (%d given)", fname, nnames, in->na);
    for (int i = 0; i < in->na; i++) out[i] = in->a[i];
    for (int k = 0; k < in->nk; k++) {
        int i;
        for (i = 0; i < nnames; i++)
            if (strlen(names[i]) == in->knl[k] && memcmp(names[i], in->kn[k], in->knl[k]) == 0) break;
        if (i == nnames) jj_fail(c, "%s() got an unexpected keyword argument '%.*s'", fname, (int)in->knl[k], in->kn[k]);
        if (jj_given(out[i])) jj_fail(c, "%s() got multiple values for argument '%s'", fname, names[i]);
        out[i] = in->kv[k];
    }
}

static void need_str(jj_ctx *c, jv v, const char *what) {
    jv_check_defined(c, v);
    if (v.kind != JV_STR) jj_fail(c, "%s: expected a string, got '%s'", what, jv_type_name(v));
}

static int64_t need_int(jj_ctx *c, jv v, const char *what) {
    jv_check_defined(c, v);
    if (v.kind == JV_INT) return v.u.i;
    if (v.kind == JV_BOOL) return v.u.b;
    jj_fail(c, "%s: expected an integer, got '%s'", what, jv_type_name(v));
}

/* ---- strings ---- */

static uint32_t cp_at(const char *p, size_t n, size_t i, size_t *cl) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p + i, (utf8proc_ssize_t)(n - i), &cp);
    if (k <= 0) { *cl = 1; return (unsigned char)p[i]; }
    *cl = (size_t)k;
    return (uint32_t)cp;
}

static void put_cp(jj_ctx *c, jj_buf *b, uint32_t cp) {
    utf8proc_uint8_t u[4];
    utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)cp, u);
    jj_buf_put(c, b, (const char *)u, (size_t)k);
}

static bool is_cased_letter(uint32_t cp) {
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

static bool is_title_delim(uint32_t cp) {
    /* jinja2's title filter splits words at runs of [-\s({\[<] */
    return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' ||
           (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

jv jj_case(jj_ctx *c, jv s, int mode) {
    s = jv_str_of(c, s);
    jj_buf b = {0};
    bool first = true, prev_cased = false, prev_delim = true;
    for (size_t i = 0; i < s.u.s.n;) {
        size_t cl;
        uint32_t cp = cp_at(s.u.s.p, s.u.s.n, i, &cl), o = cp;
        switch (mode) {
        case 0: o = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp); break;
        case 1: o = (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp); break;
        case 2: o = first ? (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp); break;
        case 3: {
            bool d = is_title_delim(cp);
            o = (!d && prev_delim) ? (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
            if (d) o = cp;
            prev_delim = d;
            break;
        }
        case 4:
            o = prev_cased ? (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp) : (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp);
            prev_cased = is_cased_letter(cp);
            break;
        }
        put_cp(c, &b, o);
        first = false;
        i += cl;
    }
    return jv_str(b.p ? b.p : "", b.n);
}

static bool in_chars(uint32_t cp, jv chars) {
    for (size_t i = 0; i < chars.u.s.n;) {
        size_t cl;
        if (cp_at(chars.u.s.p, chars.u.s.n, i, &cl) == cp) return true;
        i += cl;
    }
    return false;
}

jv jj_strip(jj_ctx *c, jv s, jv chars, int mode) {
    need_str(c, s, "strip");
    bool ws = !jj_given(chars) || chars.kind == JV_NONE;
    if (!ws) need_str(c, chars, "strip chars");
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, start = 0, end = n;
    if (mode & 1) {
        while (start < n) {
            size_t cl;
            uint32_t cp = cp_at(p, n, start, &cl);
            bool strip = ws ? jj_is_space_at(p, n, start, &cl) : in_chars(cp, chars);
            if (!strip) break;
            start += cl;
        }
    }
    if (mode & 2) {
        while (end > start) {
            size_t b = end - 1;
            while (b > start && ((unsigned char)p[b] & 0xC0) == 0x80) b--;
            size_t cl;
            uint32_t cp = cp_at(p, n, b, &cl);
            bool strip = ws ? jj_is_space_at(p, n, b, &cl) : in_chars(cp, chars);
            if (!strip) break;
            end = b;
        }
    }
    return jv_str(p + start, end - start);
}

jv jj_replace(jj_ctx *c, jv s, jv old, jv new_, int64_t count) {
    s = jv_str_of(c, s);
    old = jv_str_of(c, old);
    new_ = jv_str_of(c, new_);
    jj_buf b = {0};
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    int64_t done = 0;
    if (old.u.s.n == 0) { /* Python inserts `new` before every character and at the end */
        while (i <= n) {
            jj_step(c);
            if (count < 0 || done < count) { jj_buf_put(c, &b, new_.u.s.p, new_.u.s.n); done++; }
            if (i == n) break;
            size_t cl;
            cp_at(p, n, i, &cl);
            jj_buf_put(c, &b, p + i, cl);
            i += cl;
        }
        return jv_str(b.p ? b.p : "", b.n);
    }
    while (i < n) {
        const char *hit = (count < 0 || done < count) ? memmem(p + i, n - i, old.u.s.p, old.u.s.n) : NULL;
        if (!hit) { jj_buf_put(c, &b, p + i, n - i); break; }
        jj_step(c);
        jj_buf_put(c, &b, p + i, (size_t)(hit - (p + i)));
        jj_buf_put(c, &b, new_.u.s.p, new_.u.s.n);
        i = (size_t)(hit - p) + old.u.s.n;
        done++;
    }
    return jv_str(b.p ? b.p : "", b.n);
}

jv jj_splitlines(jj_ctx *c, const char *p, size_t n) {
    jv l = jv_list_new(c, 0);
    size_t start = 0, i = 0;
    while (i < n) {
        size_t cl;
        uint32_t cp = cp_at(p, n, i, &cl);
        bool br = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D || cp == 0x1E ||
                  cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (br) {
            jj_list_push(c, l.u.l, jv_str(p + start, i - start));
            i += cl;
            if (cp == '\r' && i < n && p[i] == '\n') i++;
            start = i;
        } else i += cl;
    }
    if (start < n) jj_list_push(c, l.u.l, jv_str(p + start, n - start));
    return l;
}

/* start of the code point before byte position pos (pos > 0) */
static size_t prev_cp(const char *p, size_t pos) {
    size_t q = pos - 1;
    while (q > 0 && ((unsigned char)p[q] & 0xC0) == 0x80) q--;
    return q;
}

static jv split(jj_ctx *c, jv s, jv sep, int64_t maxsplit, bool right) {
    jv l = jv_list_new(c, 0);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    if (!jj_given(sep) || sep.kind == JV_NONE) {
        /* runs of whitespace, no empty strings; after maxsplit words the remainder is
         * kept as is (minus the whitespace next to the last split), as CPython does */
        size_t cl;
        if (!right) {
            size_t i = 0;
            int64_t left = maxsplit;
            while (maxsplit < 0 || left-- > 0) {
                while (i < n && jj_is_space_at(p, n, i, &cl)) i += cl;
                if (i >= n) break;
                size_t st = i;
                while (i < n && !jj_is_space_at(p, n, i, &cl)) { cp_at(p, n, i, &cl); i += cl; }
                jj_list_push(c, l.u.l, jv_str(p + st, i - st));
            }
            while (i < n && jj_is_space_at(p, n, i, &cl)) i += cl;
            if (i < n) jj_list_push(c, l.u.l, jv_str(p + i, n - i));
            return l;
        }
        jv rev = jv_list_new(c, 0);
        size_t e = n;
        int64_t left = maxsplit;
        while (maxsplit < 0 || left-- > 0) {
            while (e > 0 && jj_is_space_at(p, n, prev_cp(p, e), &cl)) e = prev_cp(p, e);
            if (e == 0) break;
            size_t st = e;
            while (st > 0 && !jj_is_space_at(p, n, prev_cp(p, st), &cl)) st = prev_cp(p, st);
            jj_list_push(c, rev.u.l, jv_str(p + st, e - st));
            e = st;
        }
        while (e > 0 && jj_is_space_at(p, n, prev_cp(p, e), &cl)) e = prev_cp(p, e);
        if (e > 0) jj_list_push(c, rev.u.l, jv_str(p, e));
        for (size_t k = rev.u.l->n; k-- > 0;) jj_list_push(c, l.u.l, rev.u.l->v[k]);
        return l;
    }
    need_str(c, sep, "split separator");
    if (sep.u.s.n == 0) jj_fail(c, "split: empty separator");
    const char *q = sep.u.s.p;
    size_t m = sep.u.s.n;
    if (!right) {
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            jj_step(c);
            const char *hit = (maxsplit < 0 || done < maxsplit) ? memmem(p + i, n - i, q, m) : NULL;
            if (!hit) { jj_list_push(c, l.u.l, jv_str(p + i, n - i)); break; }
            jj_list_push(c, l.u.l, jv_str(p + i, (size_t)(hit - (p + i))));
            i = (size_t)(hit - p) + m;
            done++;
        }
        return l;
    }
    /* rsplit: collect from the right, then reverse */
    jv rev = jv_list_new(c, 0);
    size_t end = n;
    int64_t done = 0;
    for (;;) {
        jj_step(c);
        size_t hit = (size_t)-1;
        if ((maxsplit < 0 || done < maxsplit) && end >= m)
            for (size_t k = end - m + 1; k-- > 0;) if (memcmp(p + k, q, m) == 0) { hit = k; break; }
        if (hit == (size_t)-1) { jj_list_push(c, rev.u.l, jv_str(p, end)); break; }
        jj_list_push(c, rev.u.l, jv_str(p + hit + m, end - hit - m));
        end = hit;
        done++;
    }
    for (size_t k = rev.u.l->n; k-- > 0;) jj_list_push(c, l.u.l, rev.u.l->v[k]);
    return l;
}

static jv str_format(jj_ctx *c, jv fmt, const jj_args *a) {
    jj_buf b = {0};
    const char *p = fmt.u.s.p;
    size_t n = fmt.u.s.n;
    int autoi = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '{' && i + 1 < n && p[i + 1] == '{') { jj_buf_putc(c, &b, '{'); i++; continue; }
        if (p[i] == '}' && i + 1 < n && p[i + 1] == '}') { jj_buf_putc(c, &b, '}'); i++; continue; }
        if (p[i] == '}') jj_fail(c, "str.format: single '}' encountered in format string");
        if (p[i] != '{') { jj_buf_putc(c, &b, p[i]); continue; }
        size_t j = i + 1;
        while (j < n && p[j] != '}') j++;
        if (j >= n) jj_fail(c, "str.format: single '{' encountered in format string");
        const char *f = p + i + 1;
        size_t fl = j - i - 1;
        for (size_t k = 0; k < fl; k++)
            if (f[k] == ':' || f[k] == '!' || f[k] == '.' || f[k] == '[')
                jj_fail(c, "str.format: field '{%.*s}' (format specs, conversions, attribute access) is not supported", (int)fl, f);
        jv v;
        if (fl == 0) {
            if (autoi >= a->na) jj_fail(c, "str.format: replacement index %d out of range", autoi);
            v = a->a[autoi++];
        } else if (f[0] >= '0' && f[0] <= '9') {
            int idx = atoi(f);
            if (idx >= a->na) jj_fail(c, "str.format: replacement index %d out of range", idx);
            v = a->a[idx];
        } else {
            int k;
            for (k = 0; k < a->nk; k++) if (a->knl[k] == fl && memcmp(a->kn[k], f, fl) == 0) break;
            if (k == a->nk) jj_fail(c, "str.format: no argument named '%.*s'", (int)fl, f);
            v = a->kv[k];
        }
        jv_to_str(c, &b, v);
        i = j;
    }
    return jv_str(b.p ? b.p : "", b.n);
}

/* ---- methods ---- */

typedef enum { MT_STR, MT_DICT, MT_LIST, MT_LOOP } method_type;
static const struct { method_type t; const char *name; } k_methods[] = {
    {MT_STR, "startswith"}, {MT_STR, "endswith"}, {MT_STR, "split"}, {MT_STR, "rsplit"}, {MT_STR, "strip"},
    {MT_STR, "lstrip"}, {MT_STR, "rstrip"}, {MT_STR, "replace"}, {MT_STR, "upper"}, {MT_STR, "lower"},
    {MT_STR, "title"}, {MT_STR, "capitalize"}, {MT_STR, "find"}, {MT_STR, "rfind"}, {MT_STR, "count"},
    {MT_STR, "format"}, {MT_STR, "join"}, {MT_STR, "splitlines"}, {MT_STR, "isdigit"}, {MT_STR, "isalpha"},
    {MT_STR, "isalnum"}, {MT_STR, "isspace"}, {MT_STR, "islower"}, {MT_STR, "isupper"}, {MT_STR, "index"},
    {MT_DICT, "items"}, {MT_DICT, "keys"}, {MT_DICT, "values"}, {MT_DICT, "get"},
    {MT_LIST, "index"}, {MT_LIST, "count"},
    {MT_LOOP, "cycle"}, {MT_LOOP, "changed"},
};
/* mutating methods the immutable sandbox refuses */
static const char *const k_unsafe[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear",
                                       "update", "popitem", "setdefault", "add", "discard"};

static int find_method(method_type t, const char *name, size_t n) {
    for (size_t i = 0; i < OB_ARRAY_LEN(k_methods); i++)
        if (k_methods[i].t == t && strlen(k_methods[i].name) == n && memcmp(k_methods[i].name, name, n) == 0) return (int)i;
    return -1;
}

static jv no_attr(jj_ctx *c, jv obj, const char *name, size_t n) {
    jj_buf b = {0};
    if (obj.kind == JV_NONE) jj_buf_printf(c, &b, "'None' has no attribute '%.*s'", (int)OB_MIN(n, 200), name);
    else jj_buf_printf(c, &b, "'%s object' has no attribute '%.*s'", jv_type_name(obj), (int)OB_MIN(n, 200), name);
    return jv_undef(b.p);
}

static jv loop_attr(jj_ctx *c, jv lv, const char *name, size_t n, bool *found) {
    const jj_loop *l = lv.u.loop;
    *found = true;
#define IS(s) (n == sizeof(s) - 1 && memcmp(name, s, n) == 0)
    if (IS("index")) return jv_int(l->index0 + 1);
    if (IS("index0")) return jv_int(l->index0);
    if (IS("revindex")) return jv_int(l->length - l->index0);
    if (IS("revindex0")) return jv_int(l->length - l->index0 - 1);
    if (IS("first")) return jv_bool(l->index0 == 0);
    if (IS("last")) return jv_bool(l->index0 == l->length - 1);
    if (IS("length")) return jv_int(l->length);
    if (IS("depth")) return jv_int(l->depth);
    if (IS("depth0")) return jv_int(l->depth - 1);
    if (IS("previtem")) return l->index0 > 0 ? l->items->v[l->index0 - 1] : jv_undef("there is no previous item");
    if (IS("nextitem")) return l->index0 + 1 < l->length ? l->items->v[l->index0 + 1] : jv_undef("there is no next item");
#undef IS
    *found = false;
    return jv_none();
}

jv jj_get_attr(jj_ctx *c, jv obj, const char *name, size_t n) {
    jv_check_defined(c, obj);
    for (size_t i = 0; i < OB_ARRAY_LEN(k_unsafe); i++)
        if (strlen(k_unsafe[i]) == n && memcmp(k_unsafe[i], name, n) == 0 && (obj.kind == JV_LIST || obj.kind == JV_DICT)) {
            jj_buf b = {0};
            jj_buf_printf(c, &b, "access to attribute '%.*s' of '%s' object is unsafe", (int)n, name, jv_type_name(obj));
            jv u = jv_undef(b.p);
            u.flags = JVF_UNSAFE;
            return u;
        }
    jv v;
    int m;
    switch ((jv_kind)obj.kind) {
    case JV_DICT:
        if ((m = find_method(MT_DICT, name, n)) >= 0) return jv_func(c, JF_METHOD + m, obj);
        if (jj_dict_get_s(obj.u.d, name, n, &v)) return v;
        return no_attr(c, obj, name, n);
    case JV_NS:
        if (jj_dict_get_s(obj.u.d, name, n, &v)) return v;
        return no_attr(c, obj, name, n);
    case JV_STR:
        if ((m = find_method(MT_STR, name, n)) >= 0) return jv_func(c, JF_METHOD + m, obj);
        return no_attr(c, obj, name, n);
    case JV_LIST:
        if ((m = find_method(MT_LIST, name, n)) >= 0) return jv_func(c, JF_METHOD + m, obj);
        return no_attr(c, obj, name, n);
    case JV_LOOP: {
        bool found;
        v = loop_attr(c, obj, name, n, &found);
        if (found) return v;
        if ((m = find_method(MT_LOOP, name, n)) >= 0) return jv_func(c, JF_METHOD + m, obj);
        return no_attr(c, obj, name, n);
    }
    default:
        return no_attr(c, obj, name, n);
    }
}

jv jj_get_item(jj_ctx *c, jv obj, jv key) {
    jv_check_defined(c, obj);
    jv v;
    switch ((jv_kind)obj.kind) {
    case JV_DICT:
        if (jj_dict_get(obj.u.d, key, &v)) return v;
        break;
    case JV_LIST: case JV_STR:
        if (key.kind == JV_INT || key.kind == JV_BOOL) {
            int64_t i = key.kind == JV_INT ? key.u.i : key.u.b;
            int64_t len = obj.kind == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)jj_utf8_len(obj.u.s.p, obj.u.s.n);
            if (i < 0) i += len;
            if (i < 0 || i >= len) {
                jj_buf b = {0};
                jj_buf_printf(c, &b, "'%s object' has no element %lld", jv_type_name(obj), (long long)(key.kind == JV_INT ? key.u.i : key.u.b));
                return jv_undef(b.p);
            }
            if (obj.kind == JV_LIST) return obj.u.l->v[i];
            size_t off = jj_utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)i), end = off + 1;
            while (end < obj.u.s.n && ((unsigned char)obj.u.s.p[end] & 0xC0) == 0x80) end++;
            return jv_str(obj.u.s.p + off, end - off);
        }
        break;
    default: break;
    }
    if (key.kind == JV_STR) return jj_get_attr(c, obj, key.u.s.p, key.u.s.n);
    jj_buf b = {0};
    jj_buf_printf(c, &b, "'%s object' has no element ", jv_type_name(obj));
    jv_repr(c, &b, key);
    return jv_undef(b.p);
}

/* Python slice semantics on code points / items. */
jv jj_slice(jj_ctx *c, jv obj, jv start, jv stop, jv step) {
    jv_check_defined(c, obj);
    int64_t len;
    if (obj.kind == JV_LIST) len = (int64_t)obj.u.l->n;
    else if (obj.kind == JV_STR) len = (int64_t)jj_utf8_len(obj.u.s.p, obj.u.s.n);
    else jj_fail(c, "'%s' object is not subscriptable", jv_type_name(obj));
    int64_t st = step.kind == JV_NONE ? 1 : need_int(c, step, "slice step");
    if (st == 0) jj_fail(c, "slice step cannot be zero");
    int64_t lo, hi;
    if (st > 0) {
        lo = start.kind == JV_NONE ? 0 : need_int(c, start, "slice start");
        hi = stop.kind == JV_NONE ? len : need_int(c, stop, "slice stop");
        if (lo < 0) { lo += len; if (lo < 0) lo = 0; } else if (lo > len) lo = len;
        if (hi < 0) { hi += len; if (hi < 0) hi = 0; } else if (hi > len) hi = len;
    } else {
        lo = start.kind == JV_NONE ? len - 1 : need_int(c, start, "slice start");
        hi = stop.kind == JV_NONE ? -1 : need_int(c, stop, "slice stop");
        if (start.kind != JV_NONE) { if (lo < 0) { lo += len; if (lo < 0) lo = -1; } else if (lo >= len) lo = len - 1; }
        if (stop.kind != JV_NONE) { if (hi < 0) { hi += len; if (hi < 0) hi = -1; } else if (hi >= len) hi = len - 1; }
    }
    if (obj.kind == JV_LIST) {
        jv l = jv_list_new(c, 0);
        l.flags = obj.flags & JVF_TUPLE;
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) { jj_step(c); jj_list_push(c, l.u.l, obj.u.l->v[i]); }
        return l;
    }
    if (st == 1) {
        size_t a = jj_utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)lo), b = lo < hi ? jj_utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)hi) : a;
        return jv_str(obj.u.s.p + a, b - a);
    }
    jv chars = jj_iterable_to_list(c, obj, "slice");
    jj_buf b = {0};
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
        jj_step(c);
        jv ch = chars.u.l->v[i];
        jj_buf_put(c, &b, ch.u.s.p, ch.u.s.n);
    }
    return jv_str(b.p ? b.p : "", b.n);
}

jv jj_attr_path(jj_ctx *c, jv item, jv path) {
    if (path.kind == JV_INT) return jj_get_item(c, item, path);
    need_str(c, path, "attribute");
    const char *p = path.u.s.p;
    size_t n = path.u.s.n, i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && p[j] != '.') j++;
        bool digits = j > i;
        for (size_t k = i; k < j; k++) if (p[k] < '0' || p[k] > '9') digits = false;
        jv key = digits ? jv_int(strtoll(jj_strndup(c, p + i, j - i), NULL, 10)) : jv_str(p + i, j - i);
        item = jj_get_item(c, item, key);
        i = j + 1;
    }
    return item;
}

/* ---- globals ---- */

static const struct { const char *name; int id; } k_globals[] = {
    {"range", JF_RANGE}, {"namespace", JF_NAMESPACE}, {"dict", JF_DICT},
    {"raise_exception", JF_RAISE}, {"strftime_now", JF_STRFTIME},
};

jv jj_global(jj_ctx *c, const char *name, size_t n, bool *found) {
    for (size_t i = 0; i < OB_ARRAY_LEN(k_globals); i++)
        if (strlen(k_globals[i].name) == n && memcmp(k_globals[i].name, name, n) == 0) {
            *found = true;
            return jv_func(c, k_globals[i].id, jv_none());
        }
    *found = false;
    return jv_none();
}

static bool str_pred(jv s, int which) {
    if (s.u.s.n == 0) return false;
    bool any_cased = false;
    for (size_t i = 0; i < s.u.s.n;) {
        size_t cl;
        uint32_t cp = cp_at(s.u.s.p, s.u.s.n, i, &cl);
        utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
        bool alpha = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT ||
                     cat == UTF8PROC_CATEGORY_LM || cat == UTF8PROC_CATEGORY_LO;
        bool digit = cat == UTF8PROC_CATEGORY_ND;
        size_t scl;
        bool space = jj_is_space_at(s.u.s.p, s.u.s.n, i, &scl);
        switch (which) {
        case 0: if (!digit) return false; break;
        case 1: if (!alpha) return false; break;
        case 2: if (!alpha && !digit && cat != UTF8PROC_CATEGORY_NL && cat != UTF8PROC_CATEGORY_NO) return false; break;
        case 3: if (!space) return false; break;
        case 4: if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) return false; if (cat == UTF8PROC_CATEGORY_LL) any_cased = true; break;
        case 5: if (cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT) return false; if (cat == UTF8PROC_CATEGORY_LU) any_cased = true; break;
        }
        i += cl;
    }
    return which >= 4 ? any_cased : true;
}

static bool prefix_match(jj_ctx *c, jv s, jv pre, bool end) {
    if (pre.kind == JV_LIST && (pre.flags & JVF_TUPLE)) {
        for (size_t i = 0; i < pre.u.l->n; i++) if (prefix_match(c, s, pre.u.l->v[i], end)) return true;
        return false;
    }
    need_str(c, pre, end ? "endswith" : "startswith");
    if (pre.u.s.n > s.u.s.n) return false;
    return memcmp(s.u.s.p + (end ? s.u.s.n - pre.u.s.n : 0), pre.u.s.p, pre.u.s.n) == 0;
}

static jv call_method(jj_ctx *c, int m, jv self, const jj_args *a) {
    const char *name = k_methods[m].name;
    jv p[3];
    if (k_methods[m].t == MT_STR) {
        static const char *const n_sub[] = {"sub"}, *const n_split[] = {"sep", "maxsplit"}, *const n_chars[] = {"chars"},
                                 *const n_repl[] = {"old", "new", "count"}, *const n_iter[] = {"iterable"};
        if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
            static const char *const n_pre[] = {"prefix"};
            jj_bind(c, name, a, n_pre, 1, p);
            if (!jj_given(p[0])) jj_fail(c, "%s() takes exactly one argument", name);
            return jv_bool(prefix_match(c, self, p[0], name[0] == 'e'));
        }
        if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
            jj_bind(c, name, a, n_split, 2, p);
            return split(c, self, p[0], jj_given(p[1]) ? need_int(c, p[1], "maxsplit") : -1, name[0] == 'r');
        }
        if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
            jj_bind(c, name, a, n_chars, 1, p);
            return jj_strip(c, self, p[0], name[0] == 'l' ? 1 : name[0] == 'r' ? 2 : 3);
        }
        if (!strcmp(name, "replace")) {
            jj_bind(c, name, a, n_repl, 3, p);
            need_str(c, p[0], "replace"); need_str(c, p[1], "replace");
            return jj_replace(c, self, p[0], p[1], jj_given(p[2]) ? need_int(c, p[2], "replace count") : -1);
        }
        if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") || !strcmp(name, "capitalize")) {
            jj_bind(c, name, a, NULL, 0, p);
            return jj_case(c, self, name[0] == 'l' ? 0 : name[0] == 'u' ? 1 : name[0] == 'c' ? 2 : 4);
        }
        if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index") || !strcmp(name, "count")) {
            jj_bind(c, name, a, n_sub, 1, p);
            need_str(c, p[0], name);
            const char *s = self.u.s.p, *q = p[0].u.s.p;
            size_t n = self.u.s.n, k = p[0].u.s.n;
            if (!strcmp(name, "count")) {
                if (k == 0) return jv_int((int64_t)jj_utf8_len(s, n) + 1);
                int64_t cnt = 0;
                for (size_t i = 0; i + k <= n;) { const char *h = memmem(s + i, n - i, q, k); if (!h) break; cnt++; i = (size_t)(h - s) + k; }
                return jv_int(cnt);
            }
            size_t pos = (size_t)-1;
            if (!strcmp(name, "rfind")) { if (k <= n) for (size_t i = n - k + 1; i-- > 0;) if (memcmp(s + i, q, k) == 0) { pos = i; break; } }
            else { const char *h = k == 0 ? s : memmem(s, n, q, k); if (h) pos = (size_t)(h - s); }
            if (pos == (size_t)-1) { if (name[0] == 'i') jj_fail(c, "substring not found"); return jv_int(-1); }
            return jv_int((int64_t)jj_utf8_len(s, pos));
        }
        if (!strcmp(name, "format")) return str_format(c, self, a);
        if (!strcmp(name, "join")) {
            jj_bind(c, name, a, n_iter, 1, p);
            jv l = jj_iterable_to_list(c, p[0], "join");
            jj_buf b = {0};
            for (size_t i = 0; i < l.u.l->n; i++) {
                if (i) jj_buf_put(c, &b, self.u.s.p, self.u.s.n);
                if (l.u.l->v[i].kind != JV_STR) jj_fail(c, "sequence item %zu: expected str instance, %s found", i, jv_type_name(l.u.l->v[i]));
                jj_buf_put(c, &b, l.u.l->v[i].u.s.p, l.u.l->v[i].u.s.n);
            }
            return jv_str(b.p ? b.p : "", b.n);
        }
        if (!strcmp(name, "splitlines")) { jj_bind(c, name, a, NULL, 0, p); return jj_splitlines(c, self.u.s.p, self.u.s.n); }
        static const char *const preds[] = {"isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper"};
        for (int k = 0; k < 6; k++)
            if (!strcmp(name, preds[k])) { jj_bind(c, name, a, NULL, 0, p); return jv_bool(str_pred(self, k)); }
    } else if (k_methods[m].t == MT_DICT) {
        jj_dict *d = self.u.d;
        if (!strcmp(name, "get")) {
            static const char *const n_get[] = {"key", "default"};
            jj_bind(c, name, a, n_get, 2, p);
            if (!jj_given(p[0])) jj_fail(c, "get expected at least 1 argument");
            jv v;
            if (jj_dict_get(d, p[0], &v)) return v;
            return jj_given(p[1]) ? p[1] : jv_none();
        }
        jj_bind(c, name, a, NULL, 0, p);
        jv l = jv_list_new(c, d->n);
        l.flags = JVF_GEN;
        for (size_t i = 0; i < d->n; i++) {
            if (name[0] == 'k') jj_list_push(c, l.u.l, d->k[i]);
            else if (name[0] == 'v') jj_list_push(c, l.u.l, d->v[i]);
            else {
                jv t = jv_list_new(c, 2);
                t.flags = JVF_TUPLE;
                jj_list_push(c, t.u.l, d->k[i]);
                jj_list_push(c, t.u.l, d->v[i]);
                jj_list_push(c, l.u.l, t);
            }
        }
        return l;
    } else if (k_methods[m].t == MT_LIST) {
        static const char *const n_x[] = {"value"};
        jj_bind(c, name, a, n_x, 1, p);
        int64_t cnt = 0;
        for (size_t i = 0; i < self.u.l->n; i++)
            if (jv_eq(self.u.l->v[i], p[0])) { if (name[0] == 'i') return jv_int((int64_t)i); cnt++; }
        if (name[0] == 'i') jj_fail(c, "list.index(x): x not in list");
        return jv_int(cnt);
    } else if (k_methods[m].t == MT_LOOP) {
        jj_loop *l = self.u.loop;
        if (a->nk) jj_fail(c, "loop.%s() takes no keyword arguments", name);
        if (!strcmp(name, "cycle")) {
            if (a->na == 0) jj_fail(c, "no items for cycling given");
            return a->a[l->index0 % a->na];
        }
        jv t = jv_list_new(c, (size_t)a->na);
        for (int i = 0; i < a->na; i++) jj_list_push(c, t.u.l, a->a[i]);
        bool changed = !l->has_changed || !jv_eq(l->last_changed, t);
        l->last_changed = t;
        l->has_changed = true;
        return jv_bool(changed);
    }
    jj_fail(c, "method '%s' is not supported", name);
}

jv jj_call_builtin(jj_ctx *c, const jj_func *fn, jv *args, int nargs, const char **kwn, const size_t *kwnl, jv *kwv, int nkw, int line) {
    jj_args a = {args, nargs, kwn, kwnl, kwv, nkw};
    if (fn->id >= JF_METHOD) return call_method(c, fn->id - JF_METHOD, fn->self, &a);
    switch (fn->id) {
    case JF_RANGE: {
        if (nkw) jj_fail(c, "range() takes no keyword arguments");
        if (nargs < 1 || nargs > 3) jj_fail(c, "range expected 1 to 3 arguments, got %d", nargs);
        int64_t lo = 0, hi, st = 1;
        if (nargs == 1) hi = need_int(c, args[0], "range");
        else { lo = need_int(c, args[0], "range"); hi = need_int(c, args[1], "range"); }
        if (nargs == 3) st = need_int(c, args[2], "range");
        if (st == 0) jj_fail(c, "range() arg 3 must not be zero");
        int64_t cnt = st > 0 ? (hi > lo ? (hi - lo + st - 1) / st : 0) : (lo > hi ? (lo - hi - st - 1) / -st : 0);
        if (cnt > 100000) jj_fail(c, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        jv l = jv_list_new(c, (size_t)cnt);
        for (int64_t i = 0; i < cnt; i++) jj_list_push(c, l.u.l, jv_int(lo + i * st));
        l.flags = JVF_GEN;
        return l;
    }
    case JF_NAMESPACE: case JF_DICT: {
        jv d = jv_dict_new(c, 0);
        if (nargs > 1) jj_fail(c, "%s() takes at most one positional argument", fn->id == JF_DICT ? "dict" : "namespace");
        if (nargs == 1) {
            jv src = args[0];
            if (src.kind != JV_DICT && src.kind != JV_NS) jj_fail(c, "%s(): positional argument must be a mapping", fn->id == JF_DICT ? "dict" : "namespace");
            for (size_t i = 0; i < src.u.d->n; i++) jj_dict_set(c, d.u.d, src.u.d->k[i], src.u.d->v[i]);
        }
        for (int k = 0; k < nkw; k++) jj_dict_set(c, d.u.d, jv_str(kwn[k], kwnl[k]), kwv[k]);
        if (fn->id == JF_NAMESPACE) d.kind = JV_NS;
        return d;
    }
    case JF_RAISE: {
        if (nargs != 1 || nkw) jj_fail(c, "raise_exception() takes one argument");
        jv msg = jv_str_of(c, args[0]);
        jj_fail(c, "%.*s", (int)OB_MIN(msg.u.s.n, 4000), msg.u.s.p);
    }
    case JF_STRFTIME: {
        if (nargs != 1 || nkw) jj_fail(c, "strftime_now() takes one argument");
        need_str(c, args[0], "strftime_now");
        const char *f = jj_strndup(c, args[0].u.s.p, args[0].u.s.n);
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char buf[512];
        size_t k = strftime(buf, sizeof buf, f, &tm);
        if (k == 0 && args[0].u.s.n) jj_fail(c, "strftime_now: format too long or empty result");
        return jv_str(jj_strndup(c, buf, k), k);
    }
    default:
        jj_fail(c, "line %d: unknown built-in function", line);
    }
}
