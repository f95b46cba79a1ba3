/* Reading tool calls out of generated text (toolcall.h): the format from the template's
 * markers, one reader per markup, and the stream that reports what a growing reply adds.
 *
 * Every reader walks the text forward once with bounded lookups; JSON is checked by a
 * scanner with an explicit stack (no recursion on the model's text), so a reply that is
 * cut off, nested without end or not JSON at all ends as content, never as a crash. */
#include "chat/toolcall.h"

#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "grammar/grammar.h"

#define MAX_NAME 256       /* a tool name longer than this is not one */
#define JSON_DEPTH 128     /* nesting the scanner follows in arguments */

/* ---- formats -------------------------------------------------------------------------- */

static const char *const k_names[OB_TC_FORMAT_COUNT] = {
    "none", "generic", "hermes", "qwen3-coder", "llama3", "mistral", "mistral-v11", "harmony", "glm-4.5",
    "deepseek-r1", "deepseek-v3.1",
};

const char *ob_tc_format_name(ob_tc_format f) { return f >= 0 && f < OB_TC_FORMAT_COUNT ? k_names[f] : "?"; }

bool ob_tc_format_special(ob_tc_format f) {
    return f == OB_TC_LLAMA3 || f == OB_TC_MISTRAL || f == OB_TC_MISTRAL_V11 || f == OB_TC_HARMONY ||
           f == OB_TC_DEEPSEEK_R1 || f == OB_TC_DEEPSEEK_V31 || f == OB_TC_GLM45;
}

#define DS_CALLS_BEGIN "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define DS_CALLS_END "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define DS_CALL_BEGIN "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define DS_CALL_END "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define DS_SEP "<\xEF\xBD\x9Ctool\xE2\x96\x81" "sep\xEF\xBD\x9C>"

ob_tc_format ob_tc_detect(const char *t) {
    if (!t) return OB_TC_GENERIC;
    if (strstr(t, DS_CALLS_BEGIN)) return strstr(t, "```json") ? OB_TC_DEEPSEEK_R1 : OB_TC_DEEPSEEK_V31;
    if (strstr(t, "<|channel|>")) return OB_TC_HARMONY;
    if (strstr(t, "<arg_key>") && strstr(t, "<arg_value>")) return OB_TC_GLM45;
    if (strstr(t, "<function=") && strstr(t, "<parameter=")) return OB_TC_QWEN3_CODER;
    if (strstr(t, "<tool_call>")) return OB_TC_HERMES;
    if (strstr(t, "[TOOL_CALLS]")) return strstr(t, "[ARGS]") ? OB_TC_MISTRAL_V11 : OB_TC_MISTRAL;
    if (strstr(t, "<|start_header_id|>ipython<|end_header_id|>") || strstr(t, "<|python_tag|>")) return OB_TC_LLAMA3;
    return OB_TC_GENERIC;
}

const json_t *ob_tc_find_tool(const json_t *tools, const char *name, size_t len) {
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn)) fn = t;
        const json_t *n = json_object_get(fn, "name");
        if (json_is_string(n) && json_string_length(n) == len && !memcmp(json_string_value(n), name, len)) return fn;
    }
    return NULL;
}

/* ---- small text helpers ---------------------------------------------------------------- */

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && is_ws(s[i])) i++;
    return i;
}

static bool starts(const char *s, size_t n, size_t i, const char *w) {
    size_t k = strlen(w);
    return i <= n && n - i >= k && !memcmp(s + i, w, k);
}

/* The rest of the text s[i..n) is a proper prefix of w (it could still become w). */
static bool prefix_of(const char *s, size_t n, size_t i, const char *w) {
    size_t k = strlen(w);
    return i <= n && n - i < k && !memcmp(s + i, w, n - i);
}

static const char *find(const char *s, size_t n, size_t i, const char *w) {
    return i <= n ? memmem(s + i, n - i, w, strlen(w)) : NULL;
}

/* ---- JSON scanning ---------------------------------------------------------------------- */

typedef enum { JS_OK, JS_PARTIAL, JS_BAD } js_st;

static js_st scan_string(const char *s, size_t n, size_t *pi) {
    size_t i = *pi + 1; /* past the quote */
    for (;;) {
        if (i >= n) return JS_PARTIAL;
        unsigned char c = (unsigned char)s[i];
        if (c == '"') {
            *pi = i + 1;
            return JS_OK;
        }
        if (c < 0x20) return JS_BAD;
        if (c != '\\') {
            i++;
            continue;
        }
        if (i + 1 >= n) return JS_PARTIAL;
        char e = s[i + 1];
        if (strchr("\"\\/bfnrt", e) && e) {
            i += 2;
        } else if (e == 'u') {
            for (size_t k = 2; k < 6; k++) {
                if (i + k >= n) return JS_PARTIAL;
                char h = s[i + k];
                if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F'))) return JS_BAD;
            }
            i += 6;
        } else {
            return JS_BAD;
        }
    }
}

static js_st scan_number(const char *s, size_t n, size_t *pi) {
    size_t i = *pi;
    if (s[i] == '-') i++;
    if (i >= n) return JS_PARTIAL;
    if (s[i] == '0') i++;
    else if (s[i] >= '1' && s[i] <= '9') while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    else return JS_BAD;
    if (i < n && s[i] == '.') {
        size_t d = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return i >= n ? JS_PARTIAL : JS_BAD;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return i >= n ? JS_PARTIAL : JS_BAD;
    }
    if (i >= n) return JS_PARTIAL; /* more digits may follow */
    *pi = i;
    return JS_OK;
}

/* One JSON value at s[i..n) after whitespace: JS_OK with *end past it, JS_PARTIAL when the
 * text is a valid beginning of one, JS_BAD otherwise (or nested deeper than JSON_DEPTH). */
static js_st scan_json(const char *s, size_t n, size_t i, size_t *end) {
    enum { VALUE, VALUE_OR_CLOSE, KEY_OR_CLOSE, KEY, COLON, AFTER } state = VALUE;
    char stk[JSON_DEPTH];
    int depth = 0;
    for (;;) {
        i = skip_ws(s, n, i);
        if (i >= n) return JS_PARTIAL;
        char c = s[i];
        bool value_done = false;
        switch (state) {
        case VALUE_OR_CLOSE:
            if (c == ']') {
                i++;
                depth--;
                value_done = true;
                break;
            }
            /* fall through */
        case VALUE:
            if (c == '{' || c == '[') {
                if (depth == JSON_DEPTH) return JS_BAD;
                stk[depth++] = c;
                i++;
                state = c == '{' ? KEY_OR_CLOSE : VALUE_OR_CLOSE;
            } else if (c == '"') {
                js_st r = scan_string(s, n, &i);
                if (r != JS_OK) return r;
                value_done = true;
            } else if (c == '-' || (c >= '0' && c <= '9')) {
                js_st r = scan_number(s, n, &i);
                if (r != JS_OK) return depth == 0 && r == JS_PARTIAL ? JS_PARTIAL : r;
                value_done = true;
            } else {
                static const char *const lits[] = {"true", "false", "null"};
                const char *lit = c == 't' ? lits[0] : c == 'f' ? lits[1] : c == 'n' ? lits[2] : NULL;
                if (!lit) return JS_BAD;
                size_t k = strlen(lit), have = OB_MIN(k, n - i);
                if (memcmp(s + i, lit, have)) return JS_BAD;
                if (have < k) return JS_PARTIAL;
                i += k;
                value_done = true;
            }
            break;
        case KEY_OR_CLOSE:
            if (c == '}') {
                i++;
                depth--;
                value_done = true;
                break;
            }
            /* fall through */
        case KEY: {
            if (c != '"') return JS_BAD;
            js_st r = scan_string(s, n, &i);
            if (r != JS_OK) return r;
            state = COLON;
            break;
        }
        case COLON:
            if (c != ':') return JS_BAD;
            i++;
            state = VALUE;
            break;
        case AFTER:
            if (c == ',') {
                i++;
                state = stk[depth - 1] == '{' ? KEY : VALUE;
            } else if (c == (stk[depth - 1] == '{' ? '}' : ']')) {
                i++;
                depth--;
                value_done = true;
            } else {
                return JS_BAD;
            }
            break;
        }
        if (value_done) {
            if (depth == 0) {
                *end = i;
                return JS_OK;
            }
            state = AFTER;
        }
    }
}

/* A JSON string's value (s[a..b) with its quotes), malloc'd; NULL if it is not one. */
static char *json_str_dup(const char *s, size_t a, size_t b, size_t *len) {
    json_t *j = json_loadb(s + a, b - a, JSON_DECODE_ANY, NULL);
    char *out = NULL;
    if (json_is_string(j)) {
        *len = json_string_length(j);
        out = malloc(*len + 1);
        if (out) memcpy(out, json_string_value(j), *len + 1);
    }
    json_decref(j);
    return out;
}

/* Complete arguments must be a JSON object jansson reads (valid UTF-8 included). */
static bool args_valid(const char *s, size_t n) {
    json_t *j = json_loadb(s, n, 0, NULL);
    bool ok = json_is_object(j);
    json_decref(j);
    return ok;
}

/* ---- the result being built ------------------------------------------------------------ */

typedef struct rd {
    const char *s;
    size_t n;
    bool partial;
    const json_t *tools;
    ob_gtext content, reasoning;
    ob_tc_call calls[OB_TC_MAX_CALLS];
    int n_calls;
    bool any_call;      /* a call was read: content around calls is trimmed */
    bool oom;
} rd;

static void call_clear(ob_tc_call *c) {
    free(c->name);
    free(c->args);
    free(c->id);
    memset(c, 0, sizeof *c);
}

/* Adds a call (taking name, args, id); false when the list is full or out of memory. */
static bool add_call(rd *r, char *name, char *args, size_t args_len, char *id, bool done) {
    if (r->n_calls == OB_TC_MAX_CALLS || !name || !args) {
        if (!name || !args) r->oom = true;
        free(name);
        free(args);
        free(id);
        return false;
    }
    r->calls[r->n_calls++] = (ob_tc_call){name, args, args_len, id, done};
    return true;
}

static void drop_calls(rd *r, int keep) {
    while (r->n_calls > keep) call_clear(&r->calls[--r->n_calls]);
}

/* Text outside calls. After a call, whitespace around it is dropped and a later text
 * starts on a new line. */
static void add_content(rd *r, const char *t, size_t len) {
    if (r->any_call) {
        size_t i = skip_ws(t, len, 0);
        if (i == len) return;
        if (r->content.n) ob_gtext_add(&r->content, "\n", 1);
        t += i;
        len -= i;
    }
    ob_gtext_add(&r->content, t, len);
}

static char *dupn(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

/* ---- JSON call objects: {"name": N, "arguments": {...}, "id": ...} ----------------------- */

typedef struct jcall {
    size_t name_a, name_b;      /* the name's JSON string, quotes included */
    size_t args_a, args_b;      /* the arguments' value (args_b: end of text while partial) */
    size_t id_a, id_b;
    bool has_name, has_args, args_done, has_id;
    size_t end;                 /* past the closing brace */
} jcall;

static bool is_args_key(const char *s, size_t a, size_t b) {
    size_t k = b - a;
    return (k == 11 && !memcmp(s + a, "\"arguments\"", 11)) || (k == 12 && !memcmp(s + a, "\"parameters\"", 12));
}

/* An object at s[i] ('{'); JS_PARTIAL with what is known so far when the text ends in it. */
static js_st read_jcall(const char *s, size_t n, size_t i, jcall *c) {
    memset(c, 0, sizeof *c);
    if (i >= n) return JS_PARTIAL;
    if (s[i] != '{') return JS_BAD;
    i++;
    for (bool first = true;; first = false) {
        i = skip_ws(s, n, i);
        if (i >= n) return JS_PARTIAL;
        if (s[i] == '}' && first) {
            c->end = i + 1;
            return JS_OK;
        }
        if (s[i] != '"') return JS_BAD;
        size_t ka = i;
        js_st r = scan_string(s, n, &i);
        if (r != JS_OK) return r;
        size_t kb = i;
        i = skip_ws(s, n, i);
        if (i >= n) return JS_PARTIAL;
        if (s[i] != ':') return JS_BAD;
        i = skip_ws(s, n, i + 1);
        size_t va = i, vb;
        r = scan_json(s, n, i, &vb);
        bool args = is_args_key(s, ka, kb);
        if (args) {
            c->has_args = true;
            c->args_a = va;
            c->args_b = r == JS_OK ? vb : n;
            c->args_done = r == JS_OK;
        }
        if (r != JS_OK) return r;
        if (kb - ka == 6 && !memcmp(s + ka, "\"name\"", 6) && s[va] == '"') {
            c->has_name = true;
            c->name_a = va;
            c->name_b = vb;
        } else if (kb - ka == 4 && !memcmp(s + ka, "\"id\"", 4) && s[va] == '"') {
            c->has_id = true;
            c->id_a = va;
            c->id_b = vb;
        }
        i = skip_ws(s, n, vb);
        if (i >= n) return JS_PARTIAL;
        if (s[i] == '}') {
            c->end = i + 1;
            return JS_OK;
        }
        if (s[i] != ',') return JS_BAD;
        i++;
    }
}

/* The arguments of a read object as JSON text: the object as written, a string's JSON
 * content, {} when there are none; NULL (and *bad) when they are not an object. */
static char *jcall_args(rd *r, const jcall *c, bool complete, size_t *len, bool *bad) {
    *bad = false;
    if (!c->has_args) {
        *len = complete ? 2 : 0;
        return dupn("{}", *len);
    }
    const char *a = r->s + c->args_a;
    if (*a == '"') { /* OpenAI-style arguments: a string of JSON */
        if (!c->args_done) {
            *len = 0;
            return dupn("", 0);
        }
        char *t = json_str_dup(r->s, c->args_a, c->args_b, len);
        json_t *j = t ? json_loadb(t, *len, 0, NULL) : NULL;
        bool ok = json_is_object(j);
        json_decref(j);
        if (!ok) {
            free(t);
            *bad = true;
            return NULL;
        }
        return t;
    }
    if (*a != '{' && !(r->partial && c->args_b == c->args_a)) {
        *bad = true;
        return NULL;
    }
    *len = c->args_b - c->args_a;
    while (c->args_done && *len && is_ws(a[*len - 1])) (*len)--;
    if (c->args_done && !args_valid(a, *len)) {
        *bad = true;
        return NULL;
    }
    return dupn(a, *len);
}

/* Adds the call an object describes. JS_OK: a complete call; JS_PARTIAL: listed when its
 * name is known; JS_BAD: no call. */
static js_st take_jcall(rd *r, const jcall *c, js_st st) {
    if (st == JS_BAD || (st == JS_OK && !c->has_name)) return JS_BAD;
    if (st == JS_PARTIAL && (!r->partial || !c->has_name)) return st;
    size_t nl = 0, il = 0, al = 0;
    char *name = json_str_dup(r->s, c->name_a, c->name_b, &nl);
    if (!name || nl == 0 || nl > MAX_NAME) {
        free(name);
        return JS_BAD;
    }
    bool bad;
    char *args = jcall_args(r, c, st == JS_OK, &al, &bad);
    if (bad) {
        free(name);
        return JS_BAD;
    }
    char *id = c->has_id ? json_str_dup(r->s, c->id_a, c->id_b, &il) : NULL;
    add_call(r, name, args, al, id, st == JS_OK);
    return st;
}

/* Skips whitespace and a closing tag. A text that ends in a part of the tag is taken
 * whole: while partial the tag is coming, and in a whole reply it was cut off. */
static size_t skip_close(const rd *r, size_t i, const char *tag) {
    size_t j = skip_ws(r->s, r->n, i);
    if (starts(r->s, r->n, j, tag)) return j + strlen(tag);
    if ((r->partial && j == r->n) || (j < r->n && prefix_of(r->s, r->n, j, tag))) return r->n;
    return i;
}

/* ---- one reader per markup ------------------------------------------------------------- */

/* A reader starts at its marker; it returns JS_OK with *end past the call(s), JS_PARTIAL
 * when the text ends inside (calls so far are kept while partial), JS_BAD when the markup
 * does not read (the marker is then content). */
typedef js_st (*reader_fn)(rd *r, size_t at, size_t *end);

static js_st read_json_at(rd *r, size_t i, size_t *end) {
    jcall c;
    js_st st = read_jcall(r->s, r->n, i, &c);
    st = take_jcall(r, &c, st);
    if (st == JS_OK) *end = c.end;
    return st;
}

/* <tool_call> {json} </tool_call>, the JSON possibly fenced in ``` */
static js_st rd_tool_call_json(rd *r, size_t at, size_t *end) {
    size_t i = skip_ws(r->s, r->n, at + strlen("<tool_call>"));
    if (i >= r->n || prefix_of(r->s, r->n, i, "```json")) return JS_PARTIAL;
    if (starts(r->s, r->n, i, "```json")) i = skip_ws(r->s, r->n, i + 7);
    else if (starts(r->s, r->n, i, "```")) i = skip_ws(r->s, r->n, i + 3);
    js_st st = read_json_at(r, i, end);
    if (st != JS_OK) return st;
    *end = skip_close(r, skip_close(r, *end, "```"), "</tool_call>");
    return JS_OK;
}

/* A name up to a delimiter (one of stops), at most MAX_NAME bytes, trimmed. */
static js_st read_name(const rd *r, size_t i, const char *const *stops, size_t *a, size_t *b, size_t *next) {
    size_t best = r->n;
    const char *which = NULL;
    for (const char *const *w = stops; *w; w++) {
        const char *p = find(r->s, OB_MIN(r->n, i + MAX_NAME + 64), i, *w);
        if (p && (size_t)(p - r->s) < best) {
            best = (size_t)(p - r->s);
            which = *w;
        }
    }
    if (!which) return r->n - i > MAX_NAME + 32 ? JS_BAD : JS_PARTIAL;
    *a = skip_ws(r->s, best, i);
    *b = best;
    while (*b > *a && is_ws(r->s[*b - 1])) (*b)--;
    if (*b == *a || *b - *a > MAX_NAME) return JS_BAD;
    *next = best + strlen(which);
    return JS_OK;
}

/* <function=NAME>{json}</function> (Hermes models sometimes write this) */
static js_st rd_function_json(rd *r, size_t at, size_t *end) {
    static const char *const stops[] = {">", NULL};
    size_t a, b, i;
    js_st st = read_name(r, at + strlen("<function="), stops, &a, &b, &i);
    if (st != JS_OK) return st;
    i = skip_ws(r->s, r->n, i);
    size_t e;
    st = scan_json(r->s, r->n, i, &e);
    if (st == JS_BAD || (i < r->n && r->s[i] != '{')) return JS_BAD;
    if (st == JS_PARTIAL && !r->partial) return st;
    size_t al = (st == JS_OK ? e : r->n) - i;
    if (st == JS_OK && !args_valid(r->s + i, al)) return JS_BAD;
    if (!add_call(r, dupn(r->s + a, b - a), dupn(r->s + i, al), al, NULL, st == JS_OK)) return r->oom ? JS_BAD : st;
    if (st != JS_OK) return st;
    *end = skip_close(r, e, "</function>");
    return JS_OK;
}

/* A parameter's value as JSON: text where the tool's schema says string or nothing, JSON
 * where it gives another type and the text reads as JSON. */
static json_t *typed_value(const rd *r, const char *tool, size_t tool_len, const char *key, const char *v, size_t n) {
    const json_t *fn = ob_tc_find_tool(r->tools, tool, tool_len);
    const json_t *ps = json_object_get(json_object_get(json_object_get(fn, "parameters"), "properties"), key);
    const json_t *ty = json_object_get(ps, "type");
    bool text = !ty || (json_is_string(ty) && !strcmp(json_string_value(ty), "string"));
    if (!text) {
        size_t i = skip_ws(v, n, 0), k = n;
        while (k > i && is_ws(v[k - 1])) k--;
        json_t *j = json_loadb(v + i, k - i, JSON_DECODE_ANY, NULL);
        if (j) return j;
    }
    return json_stringn(v, n);
}

/* XML-like arguments being built: {"k": v, ...}; the brace closes when the call does. */
static bool xml_arg(rd *r, ob_gtext *args, const char *tool, size_t tool_len, const char *key, size_t key_len,
                    const char *v, size_t vn) {
    char *k = dupn(key, key_len);
    json_t *val = k ? typed_value(r, tool, tool_len, k, v, vn) : NULL;
    json_t *kj = k ? json_stringn(k, key_len) : NULL;
    char *ks = kj ? json_dumps(kj, JSON_ENCODE_ANY) : NULL;
    char *vs = val ? json_dumps(val, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    bool ok = ks && vs; /* else a key or value that is not UTF-8 */
    if (!k) r->oom = true;
    if (ok) {
        ob_gtext_puts(args, args->n > 1 ? ", " : "");
        ob_gtext_puts(args, ks);
        ob_gtext_puts(args, ": ");
        ob_gtext_puts(args, vs);
    }
    free(ks);
    free(vs);
    json_decref(kj);
    json_decref(val);
    free(k);
    return ok;
}

/* Ends an XML-like call: complete calls get their closing brace. */
static js_st xml_done(rd *r, size_t a, size_t b, ob_gtext *args, js_st st) {
    if (st == JS_BAD || (st == JS_PARTIAL && !r->partial)) {
        free(args->s);
        return st == JS_BAD ? JS_BAD : JS_PARTIAL;
    }
    if (st == JS_OK) ob_gtext_add(args, "}", 1);
    if (args->oom) {
        free(args->s);
        r->oom = true;
        return JS_BAD;
    }
    add_call(r, dupn(r->s + a, b - a), args->s, args->n, NULL, st == JS_OK);
    return st;
}

/* Strips one newline after an opening tag and one before a closing tag (Qwen3-Coder's
 * layout). */
static void trim_nl(const char *s, size_t *a, size_t *b) {
    if (*a < *b && s[*a] == '\n') (*a)++;
    if (*b > *a && s[*b - 1] == '\n') (*b)--;
}

/* An XML-like call markup, read by rd_xml:
 *   [wrap] open NAME (key_open KEY key_close [val_open] VALUE val_close)* close [wrap_close] */
typedef struct xml_markup {
    const char *wrap, *wrap_close;   /* optional tags around the call, or NULL */
    const char *open;                /* the tag before the name */
    const char *name_ends[4];        /* what ends the name (NULL-terminated) */
    bool name_end_in_tag;            /* the end closes the opening tag (">"); else it starts what follows */
    const char *key_open, *key_close;
    bool key_as_name;                /* the key trimmed and bounded as a name is; else taken as written */
    const char *val_open;            /* a tag after the key (past whitespace), or NULL: the value follows it */
    const char *val_close;
    bool val_trim_nl;                /* one newline after the value's start and one before its end dropped */
    const char *close;               /* the call's end */
} xml_markup;

/* [<tool_call>] <function=NAME> (<parameter=K> v </parameter>)* </function> [</tool_call>] */
static const xml_markup k_qwen3_coder = {
    .wrap = "<tool_call>", .wrap_close = "</tool_call>", .open = "<function=", .name_ends = {">", NULL},
    .name_end_in_tag = true, .key_open = "<parameter=", .key_close = ">", .key_as_name = true,
    .val_close = "</parameter>", .val_trim_nl = true, .close = "</function>"};

/* <tool_call>NAME (<arg_key>k</arg_key> <arg_value>v</arg_value>)* </tool_call> */
static const xml_markup k_glm45 = {
    .open = "<tool_call>", .name_ends = {"<arg_key>", "</tool_call>", "\n", NULL}, .key_open = "<arg_key>",
    .key_close = "</arg_key>", .val_open = "<arg_value>", .val_close = "</arg_value>", .close = "</tool_call>"};

/* A parameter's key from s[i] up to the markup's key_close; *next past that. */
static js_st read_key(const rd *r, size_t i, const xml_markup *mk, size_t *a, size_t *b, size_t *next) {
    if (mk->key_as_name) {
        const char *const stops[] = {mk->key_close, NULL};
        return read_name(r, i, stops, a, b, next);
    }
    const char *e = find(r->s, OB_MIN(r->n, i + MAX_NAME + 16), i, mk->key_close);
    if (!e) return r->n - i > MAX_NAME ? JS_BAD : JS_PARTIAL;
    *a = i;
    *b = (size_t)(e - r->s);
    *next = *b + strlen(mk->key_close);
    return JS_OK;
}

/* One call in markup mk at s[at] (its wrap or its open). */
static js_st rd_xml(rd *r, size_t at, size_t *end, const xml_markup *mk) {
    size_t i = at;
    bool wrapped = mk->wrap && starts(r->s, r->n, i, mk->wrap);
    if (wrapped) i = skip_ws(r->s, r->n, i + strlen(mk->wrap));
    if (!starts(r->s, r->n, i, mk->open)) return prefix_of(r->s, r->n, i, mk->open) || i >= r->n ? JS_PARTIAL : JS_BAD;
    size_t a, b;
    js_st st = read_name(r, skip_ws(r->s, r->n, i + strlen(mk->open)), mk->name_ends, &a, &b, &i);
    if (st != JS_OK) return st;
    if (!mk->name_end_in_tag) i = b; /* the end is read below, as the next tag */
    ob_gtext args = {0};
    ob_gtext_add(&args, "{", 1);
    for (;;) {
        i = skip_ws(r->s, r->n, i);
        if (starts(r->s, r->n, i, mk->key_open)) {
            size_t ka, kb, v;
            st = read_key(r, i + strlen(mk->key_open), mk, &ka, &kb, &v);
            if (st != JS_OK) break;
            if (mk->val_open) {
                v = skip_ws(r->s, r->n, v);
                if (!starts(r->s, r->n, v, mk->val_open)) {
                    st = v >= r->n || prefix_of(r->s, r->n, v, mk->val_open) ? JS_PARTIAL : JS_BAD;
                    break;
                }
                v += strlen(mk->val_open);
            }
            const char *e = find(r->s, r->n, v, mk->val_close);
            if (!e) {
                st = JS_PARTIAL;
                break;
            }
            size_t va = v, vb = (size_t)(e - r->s);
            if (mk->val_trim_nl) trim_nl(r->s, &va, &vb);
            if (!xml_arg(r, &args, r->s + a, b - a, r->s + ka, kb - ka, r->s + va, vb - va)) {
                st = JS_BAD;
                break;
            }
            i = (size_t)(e - r->s) + strlen(mk->val_close);
        } else if (starts(r->s, r->n, i, mk->close)) {
            i += strlen(mk->close);
            *end = wrapped ? skip_close(r, i, mk->wrap_close) : i;
            st = JS_OK;
            break;
        } else {
            st = i >= r->n || prefix_of(r->s, r->n, i, mk->key_open) || prefix_of(r->s, r->n, i, mk->close)
                 ? JS_PARTIAL : JS_BAD;
            break;
        }
    }
    return xml_done(r, a, b, &args, st);
}

static js_st rd_qwen3_coder(rd *r, size_t at, size_t *end) { return rd_xml(r, at, end, &k_qwen3_coder); }
static js_st rd_glm45(rd *r, size_t at, size_t *end) { return rd_xml(r, at, end, &k_glm45); }

/* [TOOL_CALLS] [ {json}, ... ]  or  [TOOL_CALLS] NAME [CALL_ID]id? [ARGS] {json} */
static js_st rd_mistral(rd *r, size_t at, size_t *end) {
    size_t i = skip_ws(r->s, r->n, at + strlen("[TOOL_CALLS]"));
    if (i >= r->n) return JS_PARTIAL;
    if (r->s[i] == '[') {
        int keep = r->n_calls;
        i++;
        for (;;) {
            i = skip_ws(r->s, r->n, i);
            jcall c;
            js_st st = read_jcall(r->s, r->n, i, &c);
            st = take_jcall(r, &c, st);
            if (st != JS_OK) {
                if (st == JS_BAD || !r->partial) drop_calls(r, keep);
                return st;
            }
            i = skip_ws(r->s, r->n, c.end);
            if (i >= r->n) return JS_PARTIAL;
            if (r->s[i] == ']') {
                *end = i + 1;
                return JS_OK;
            }
            if (r->s[i] != ',') {
                drop_calls(r, keep);
                return JS_BAD;
            }
            i++;
        }
    }
    static const char *const stops[] = {"[ARGS]", "[CALL_ID]", NULL};
    size_t a, b;
    js_st st = read_name(r, i, stops, &a, &b, &i);
    if (st != JS_OK) return st;
    size_t ia = 0, ib = 0;
    if (starts(r->s, r->n, b, "[CALL_ID]")) {
        const char *p = find(r->s, OB_MIN(r->n, i + MAX_NAME), i, "[ARGS]");
        if (!p) return r->n - i > MAX_NAME ? JS_BAD : JS_PARTIAL;
        ia = i;
        ib = (size_t)(p - r->s);
        i = ib + strlen("[ARGS]");
    }
    i = skip_ws(r->s, r->n, i);
    size_t e;
    st = scan_json(r->s, r->n, i, &e);
    if (st == JS_BAD || (i < r->n && r->s[i] != '{')) return JS_BAD;
    if (st == JS_PARTIAL && !r->partial) return st;
    size_t al = (st == JS_OK ? e : r->n) - i;
    if (st == JS_OK && !args_valid(r->s + i, al)) return JS_BAD;
    add_call(r, dupn(r->s + a, b - a), dupn(r->s + i, al), al, ib > ia ? dupn(r->s + ia, ib - ia) : NULL, st == JS_OK);
    *end = e;
    return st;
}

/* One <｜tool▁call▁begin｜> ... [<｜tool▁call▁end｜>]: "function<｜tool▁sep｜>NAME\n```json\n{..}\n```"
 * (R1, V3) or "NAME<｜tool▁sep｜>{..}" (V3.1). */
static js_st ds_one(rd *r, size_t i, size_t *end) {
    static const char *const stops[] = {DS_SEP, NULL};
    size_t a, b;
    js_st st = read_name(r, i + strlen(DS_CALL_BEGIN), stops, &a, &b, &i);
    if (st != JS_OK) return st;
    if (b - a == 8 && !memcmp(r->s + a, "function", 8)) {
        static const char *const nstops[] = {"\n", "```", NULL};
        st = read_name(r, i, nstops, &a, &b, &i);
        if (st != JS_OK) return st;
        i = skip_ws(r->s, r->n, b);
        if (prefix_of(r->s, r->n, i, "```json")) return JS_PARTIAL;
        if (starts(r->s, r->n, i, "```json")) i += 7;
        else if (starts(r->s, r->n, i, "```")) i += 3;
        i = skip_ws(r->s, r->n, i);
    } else {
        i = skip_ws(r->s, r->n, i);
    }
    size_t e;
    st = scan_json(r->s, r->n, i, &e);
    if (st == JS_BAD || (i < r->n && r->s[i] != '{')) return JS_BAD;
    if (st == JS_PARTIAL && !r->partial) return st;
    size_t al = (st == JS_OK ? e : r->n) - i;
    if (st == JS_OK && !args_valid(r->s + i, al)) return JS_BAD;
    add_call(r, dupn(r->s + a, b - a), dupn(r->s + i, al), al, NULL, st == JS_OK);
    if (st != JS_OK) return st;
    *end = skip_close(r, skip_close(r, e, "```"), DS_CALL_END);
    return JS_OK;
}

static js_st rd_deepseek(rd *r, size_t at, size_t *end) {
    size_t i = at;
    bool section = starts(r->s, r->n, i, DS_CALLS_BEGIN);
    if (section) i += strlen(DS_CALLS_BEGIN);
    int keep = r->n_calls;
    for (int k = 0;; k++) {
        i = skip_ws(r->s, r->n, i);
        if (k > 0 && (!section || starts(r->s, r->n, i, DS_CALLS_END))) {
            *end = section ? i + strlen(DS_CALLS_END) : i;
            return JS_OK;
        }
        js_st st;
        if (!starts(r->s, r->n, i, DS_CALL_BEGIN)) {
            bool more = i >= r->n || prefix_of(r->s, r->n, i, DS_CALL_BEGIN) || (k > 0 && prefix_of(r->s, r->n, i, DS_CALLS_END));
            st = more ? JS_PARTIAL : k > 0 && !r->partial ? JS_OK : JS_BAD;
            if (st == JS_OK) { /* the section's end is missing: the calls read stand */
                *end = i;
                return st;
            }
        } else {
            st = ds_one(r, i, &i);
        }
        if (st != JS_OK) {
            if (st == JS_BAD || !r->partial) drop_calls(r, keep);
            return st;
        }
    }
}

/* <|python_tag|> {json} or code: the code is a call of "python" (Llama's built-in tool). */
static js_st rd_python_tag(rd *r, size_t at, size_t *end) {
    size_t i = skip_ws(r->s, r->n, at + strlen("<|python_tag|>"));
    if (i >= r->n) return JS_PARTIAL;
    if (r->s[i] == '{') return read_json_at(r, i, end);
    if (r->partial) return JS_PARTIAL; /* code: one call at the end */
    size_t b = r->n;
    while (b > i && is_ws(r->s[b - 1])) b--;
    json_t *a = json_pack("{s:s%}", "code", r->s + i, b - i);
    if (!a) return JS_BAD; /* not UTF-8 */
    char *args = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    add_call(r, dupn("python", 6), args, args ? strlen(args) : 0, NULL, true);
    *end = r->n;
    return JS_OK;
}

/* ---- the marker loop ----------------------------------------------------------------- */

typedef struct marker { const char *word; reader_fn fn; } marker;

static int markers_of(ob_tc_format f, marker *m) {
    int k = 0;
    switch (f) {
    case OB_TC_GENERIC:
    case OB_TC_HERMES:
        m[k++] = (marker){"<tool_call>", rd_tool_call_json};
        m[k++] = (marker){"<function=", rd_function_json};
        break;
    case OB_TC_QWEN3_CODER:
        m[k++] = (marker){"<tool_call>", rd_qwen3_coder};
        m[k++] = (marker){"<function=", rd_qwen3_coder};
        break;
    case OB_TC_GLM45: m[k++] = (marker){"<tool_call>", rd_glm45}; break;
    case OB_TC_MISTRAL:
    case OB_TC_MISTRAL_V11: m[k++] = (marker){"[TOOL_CALLS]", rd_mistral}; break;
    case OB_TC_DEEPSEEK_R1:
    case OB_TC_DEEPSEEK_V31:
        m[k++] = (marker){DS_CALLS_BEGIN, rd_deepseek};
        m[k++] = (marker){DS_CALL_BEGIN, rd_deepseek};
        break;
    case OB_TC_LLAMA3: m[k++] = (marker){"<|python_tag|>", rd_python_tag}; break;
    default: break;
    }
    return k;
}

/* Whether the reply as a whole may be one JSON call (Llama 3.x; the generic forms). */
static bool json_at_start(ob_tc_format f) { return f == OB_TC_LLAMA3 || f == OB_TC_GENERIC; }

/* The generic whole-reply forms: {"tool_call": {...}}, {"tool_calls": [...]},
 * {"response": "..."}, {"name", "arguments"}. Whole replies only. */
static bool read_generic_json(rd *r, size_t i) {
    size_t e;
    if (scan_json(r->s, r->n, i, &e) != JS_OK || skip_ws(r->s, r->n, e) != r->n) return false;
    json_t *j = json_loadb(r->s + i, e - i, 0, NULL);
    json_t *one = json_object_get(j, "tool_call"), *many = json_object_get(j, "tool_calls");
    json_t *resp = json_object_get(j, "response");
    json_t *list = json_is_array(many) ? json_incref(many) : json_is_object(one) ? json_pack("[O]", one)
                   : json_is_string(json_object_get(j, "name")) ? json_pack("[O]", j) : NULL;
    bool ok = false;
    if (json_is_string(resp) && json_object_size(j) == 1) {
        ob_gtext_add(&r->content, json_string_value(resp), json_string_length(resp));
        ok = true;
    } else if (json_array_size(list)) {
        ok = true;
        size_t k;
        json_t *c;
        json_array_foreach(list, k, c) {
            json_t *nm = json_object_get(c, "name"), *a = json_object_get(c, "arguments");
            if (!a) a = json_object_get(c, "parameters");
            if (!json_is_string(nm) || json_string_length(nm) > MAX_NAME || (a && !json_is_object(a))) {
                ok = false;
                break;
            }
            char *args = a ? json_dumps(a, JSON_COMPACT | JSON_PRESERVE_ORDER) : strdup("{}");
            if (!add_call(r, dupn(json_string_value(nm), json_string_length(nm)), args, args ? strlen(args) : 0,
                          NULL, true))
                break;
        }
        if (!ok) drop_calls(r, 0);
        else r->any_call = true;
    }
    json_decref(list);
    json_decref(j);
    return ok;
}

/* Leading JSON call objects (Llama 3.x): one or more, separated by whitespace or ';'. */
static js_st read_leading_calls(rd *r, size_t i, size_t *end) {
    js_st st = JS_BAD;
    for (int k = 0; r->n_calls < OB_TC_MAX_CALLS; k++) {
        size_t e;
        st = read_json_at(r, i, &e);
        if (st != JS_OK) return k > 0 && st == JS_BAD ? JS_OK : st;
        r->any_call = true;
        *end = e;
        i = skip_ws(r->s, r->n, e);
        if (i < r->n && r->s[i] == ';') i = skip_ws(r->s, r->n, i + 1);
        if (i >= r->n || r->s[i] != '{') return JS_OK;
    }
    return st;
}

/* Holds back, while partial, a tail that may be the start of a marker. */
static size_t held_tail(const rd *r, size_t from, const marker *m, int nm) {
    size_t keep = 0;
    for (int k = 0; k < nm; k++) {
        size_t w = strlen(m[k].word);
        for (size_t l = OB_MIN(w - 1, r->n - from); l > keep; l--)
            if (!memcmp(r->s + r->n - l, m[k].word, l)) {
                keep = l;
                break;
            }
    }
    return keep;
}

static void parse_markup(rd *r, ob_tc_format f) {
    marker m[4];
    int nm = markers_of(f, m);
    size_t pos = 0;
    if (json_at_start(f)) {
        size_t i = skip_ws(r->s, r->n, 0);
        if (i < r->n && r->s[i] == '{') {
            if (f == OB_TC_GENERIC) {
                if (r->partial) return; /* decided when the reply is whole */
                if (read_generic_json(r, i)) return;
            } else {
                size_t e = 0;
                int keep = r->n_calls;
                js_st st = read_leading_calls(r, i, &e);
                if (st == JS_PARTIAL && r->partial) return;
                if (st == JS_OK) pos = e;
                else {
                    drop_calls(r, keep);
                    r->any_call = false;
                }
            }
        } else if (r->partial && i == r->n) {
            return; /* nothing but whitespace yet */
        }
    }
    while (pos < r->n && r->n_calls < OB_TC_MAX_CALLS && !r->oom) {
        size_t at = r->n;
        int which = -1;
        for (int k = 0; k < nm; k++) {
            const char *p = find(r->s, r->n, pos, m[k].word);
            if (p && (size_t)(p - r->s) < at) {
                at = (size_t)(p - r->s);
                which = k;
            }
        }
        if (which < 0) break;
        int keep = r->n_calls;
        size_t end = at;
        js_st st = m[which].fn(r, at, &end);
        if (st == JS_OK) {
            add_content(r, r->s + pos, at - pos);
            r->any_call = true;
            pos = end;
            continue;
        }
        if (st == JS_PARTIAL && r->partial) {
            add_content(r, r->s + pos, at - pos);
            if (r->n_calls > keep) r->any_call = true;
            return;
        }
        /* not a call: its marker is text */
        drop_calls(r, keep);
        size_t w = strlen(m[which].word);
        add_content(r, r->s + pos, at + w - pos);
        pos = at + w;
    }
    size_t tail = r->n;
    if (r->partial) {
        tail -= held_tail(r, pos, m, nm);
        while (tail > pos && is_ws(r->s[tail - 1])) tail--;
    }
    if (tail > pos) add_content(r, r->s + pos, tail - pos);
}

/* ---- gpt-oss (harmony) --------------------------------------------------------------------- */

/* Messages of the reply: [<|start|>assistant][ to=functions.N][<|channel|>C][ <|constrain|>json]
 * <|message|>BODY, each ended by <|end|>, <|call|>, <|return|> or the next <|start|>. */
static void parse_harmony(rd *r) {
    static const char *const ends[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
    size_t pos = 0;
    size_t lead = skip_ws(r->s, r->n, 0);
    if (!find(r->s, r->n, 0, "<|message|>") && !find(r->s, r->n, 0, "<|channel|>") &&
        !starts(r->s, r->n, lead, "to=") && !starts(r->s, r->n, 0, "<|start|>")) {
        /* not harmony: the text is content (a possible marker start held back) */
        size_t tail = r->n;
        if (r->partial) {
            const char *lt = tail ? memchr(r->s + (tail > 16 ? tail - 16 : 0), '<', OB_MIN(tail, 16)) : NULL;
            if (lt && prefix_of(r->s, r->n, (size_t)(lt - r->s), "<|channel|>")) tail = (size_t)(lt - r->s);
            if (prefix_of(r->s, r->n, lead, "to=") || prefix_of(r->s, r->n, 0, "<|start|>")) tail = 0;
        }
        add_content(r, r->s, tail);
        return;
    }
    while (pos < r->n && r->n_calls < OB_TC_MAX_CALLS && !r->oom) {
        const char *mp = find(r->s, r->n, pos, "<|message|>");
        if (!mp) {
            if (!r->partial) add_content(r, r->s + pos, r->n - pos); /* a header cut off */
            return;
        }
        size_t hb = (size_t)(mp - r->s), body = hb + strlen("<|message|>");
        /* the header */
        const char *to = find(r->s, hb, pos, "to=functions.");
        const char *ch = find(r->s, hb, pos, "<|channel|>");
        size_t na = 0, nb = 0;
        if (to) {
            na = (size_t)(to - r->s) + strlen("to=functions.");
            nb = na;
            while (nb < hb && !is_ws(r->s[nb]) && r->s[nb] != '<') nb++;
        }
        bool analysis = ch && starts(r->s, hb, (size_t)(ch - r->s) + strlen("<|channel|>"), "analysis");
        size_t be = r->n, next = r->n;
        for (size_t k = 0; k < OB_ARRAY_LEN(ends); k++) {
            const char *e = find(r->s, r->n, body, ends[k]);
            if (e && (size_t)(e - r->s) < be) {
                be = (size_t)(e - r->s);
                next = be + (k == 3 ? 0 : strlen(ends[k])); /* <|start|> opens the next message */
            }
        }
        bool open = be == r->n;
        if (to && nb > na && nb - na <= MAX_NAME) {
            size_t i = skip_ws(r->s, be, body), e;
            js_st st = scan_json(r->s, be, i, &e);
            if (st == JS_OK && skip_ws(r->s, be, e) != be) st = JS_BAD;
            if (st == JS_PARTIAL && !(open && r->partial)) st = JS_BAD;
            if (st == JS_OK && !args_valid(r->s + i, e - i)) st = JS_BAD;
            if (st != JS_BAD && (i >= be || r->s[i] == '{')) {
                size_t al = (st == JS_OK ? e : be) - i;
                add_call(r, dupn(r->s + na, nb - na), dupn(r->s + i, al), al, NULL, st == JS_OK);
                r->any_call = true;
            } else if (!r->partial || !open) {
                add_content(r, r->s + pos, be - pos); /* not a call: shown as it is */
            }
        } else {
            size_t tail = be;
            if (open && r->partial) {
                const char *lt = be > body ? memchr(r->s + (be - body > 12 ? be - 12 : body), '<', OB_MIN(be - body, 12)) : NULL;
                if (lt) tail = (size_t)(lt - r->s);
            }
            if (analysis) ob_gtext_add(&r->reasoning, r->s + body, tail - body);
            else add_content(r, r->s + body, tail - body);
        }
        pos = next;
    }
}

ob_status ob_tc_parse(ob_tc_format f, const char *text, size_t len, bool partial, const json_t *tools,
                      ob_tc_result *out) {
    memset(out, 0, sizeof *out);
    rd *r = calloc(1, sizeof *r);
    if (!r) return OB_ERR_NOMEM;
    r->s = text ? text : "";
    r->n = text ? len : 0;
    r->partial = partial;
    r->tools = tools;
    if (f == OB_TC_HARMONY) parse_harmony(r);
    else if (f != OB_TC_NONE) parse_markup(r, f);
    else add_content(r, r->s, r->n);
    if (r->any_call || partial) { /* content around calls is trimmed; a growing one holds its tail */
        while (r->content.n && is_ws(r->content.s[r->content.n - 1])) r->content.n--;
        if (r->content.s) r->content.s[r->content.n] = 0;
    }
    ob_gtext_add(&r->content, "", 0);
    ob_gtext_add(&r->reasoning, "", 0);
    bool oom = r->oom || r->content.oom || r->reasoning.oom;
    out->content = r->content.s;
    out->content_len = r->content.n;
    out->reasoning = r->reasoning.s;
    out->reasoning_len = r->reasoning.n;
    if (r->n_calls && !oom) {
        out->calls = malloc((size_t)r->n_calls * sizeof *out->calls);
        if (out->calls) {
            memcpy(out->calls, r->calls, (size_t)r->n_calls * sizeof *out->calls);
            out->n_calls = r->n_calls;
            r->n_calls = 0;
        } else {
            oom = true;
        }
    }
    drop_calls(r, 0);
    free(r);
    if (oom) {
        ob_tc_result_free(out);
        return OB_ERR_NOMEM;
    }
    return OB_OK;
}

void ob_tc_result_free(ob_tc_result *r) {
    for (int i = 0; i < r->n_calls; i++) call_clear(&r->calls[i]);
    free(r->calls);
    free(r->content);
    free(r->reasoning);
    memset(r, 0, sizeof *r);
}

/* ---- streaming ----------------------------------------------------------------------------- */

struct ob_tc_stream {
    ob_tc_format fmt;
    const json_t *tools;
    ob_gtext text;
    size_t content_sent, reasoning_sent;
    char *content_prev;                    /* the content reported so far (to check it only grows) */
    int n_calls;                           /* calls reported */
    size_t args_sent[OB_TC_MAX_CALLS];
    char *args_prev[OB_TC_MAX_CALLS];
};

ob_tc_stream *ob_tc_stream_new(ob_tc_format f, const json_t *tools) {
    ob_tc_stream *st = calloc(1, sizeof *st);
    if (st) {
        st->fmt = f;
        st->tools = tools;
    }
    return st;
}

void ob_tc_stream_free(ob_tc_stream *st) {
    if (!st) return;
    free(st->text.s);
    free(st->content_prev);
    for (int i = 0; i < OB_TC_MAX_CALLS; i++) free(st->args_prev[i]);
    free(st);
}

/* Reports what `now` adds to what was sent (*prev, *sent): only a text that extends it. */
static bool grow(char **prev, size_t *sent, const char *now, size_t n, const char **delta, size_t *dlen) {
    *dlen = 0;
    if (n <= *sent || (*sent && memcmp(*prev, now, *sent))) return true;
    char *p = realloc(*prev, n + 1);
    if (!p) return false;
    memcpy(p, now, n);
    p[n] = 0;
    *prev = p;
    *delta = p + *sent;
    *dlen = n - *sent;
    *sent = n;
    return true;
}

ob_status ob_tc_stream_feed(ob_tc_stream *st, const char *text, size_t len, bool final, ob_tc_event_fn fn,
                            void *ud) {
    ob_gtext_add(&st->text, text ? text : "", text ? len : 0);
    if (st->text.oom) return OB_ERR_NOMEM;
    ob_tc_result r;
    ob_status s = ob_tc_parse(st->fmt, st->text.s, st->text.n, !final, st->tools, &r);
    if (s) return s;
    const char *d;
    size_t dl;
    /* a final reading that drops calls already reported would show their markup again */
    bool ok = final && r.n_calls < st->n_calls ? true
              : grow(&st->content_prev, &st->content_sent, r.content, r.content_len, &d, &dl);
    if (final && r.n_calls < st->n_calls) dl = 0;
    if (ok && dl) fn(ud, &(ob_tc_event){.kind = OB_TC_EV_CONTENT, .text = d, .len = dl});
    if (ok && r.reasoning_len > st->reasoning_sent) {
        fn(ud, &(ob_tc_event){.kind = OB_TC_EV_REASONING, .text = r.reasoning + st->reasoning_sent,
                              .len = r.reasoning_len - st->reasoning_sent});
        st->reasoning_sent = r.reasoning_len;
    }
    for (int i = 0; ok && i < r.n_calls; i++) {
        ob_tc_call *c = &r.calls[i];
        if (i >= st->n_calls) {
            if (i > st->n_calls) break;
            fn(ud, &(ob_tc_event){.kind = OB_TC_EV_CALL, .index = i, .name = c->name, .id = c->id});
            st->n_calls++;
        }
        ok = grow(&st->args_prev[i], &st->args_sent[i], c->args, c->args_len, &d, &dl);
        if (ok && dl) fn(ud, &(ob_tc_event){.kind = OB_TC_EV_ARGS, .index = i, .text = d, .len = dl});
    }
    ob_tc_result_free(&r);
    return ok ? OB_OK : OB_ERR_NOMEM;
}

char *ob_tc_generic_instructions(const json_t *tools) {
    ob_gtext t = {0};
    ob_gtext_puts(&t, "You can call the following tools. To call one, answer with only\n"
                      "<tool_call>\n{\"name\": <tool name>, \"arguments\": <arguments as a JSON object>}\n</tool_call>\n"
                      "(one such block per call), then wait for the results.\n\nTools:\n");
    size_t i;
    const json_t *tool;
    json_array_foreach(tools, i, tool) {
        const json_t *fn = json_object_get(tool, "function");
        char *s = json_dumps(json_is_object(fn) ? fn : tool, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!s) {
            t.oom = true;
            break;
        }
        ob_gtext_puts(&t, s);
        ob_gtext_puts(&t, "\n");
        free(s);
    }
    if (t.oom) {
        free(t.s);
        return NULL;
    }
    return t.s;
}
