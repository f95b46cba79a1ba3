/* JSON replies, error shapes and typed field readers shared by the route families. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "server/server.h"

static const char *type_for_status(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 501: return "not_supported_error";
    case 503: return "unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

void ob_srv_json(ob_resp *r, int status, json_t *j) {
    r->status = status;
    r->content_type = "application/json";
    r->body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (!r->body) {
        r->status = 500;
        r->body = strdup("{\"error\":{\"code\":500,\"message\":\"out of memory\",\"type\":\"server_error\"}}");
    }
    r->body_len = r->body ? strlen(r->body) : 0;
    json_decref(j);
}

void ob_srv_error(ob_resp *r, int status, const char *type, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_object();
    json_object_set_new(e, "code", json_integer(status));
    json_object_set_new(e, "message", ob_srv_jstr(msg, strlen(msg)));
    json_object_set_new(e, "type", json_string(type ? type : type_for_status(status)));
    json_t *o = json_object();
    json_object_set_new(o, "error", e);
    ob_srv_json(r, status, o);
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if invalid or truncated. */
static size_t utf8_len(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    size_t len;
    unsigned min;
    if (c < 0x80) return 1;
    if ((c & 0xe0) == 0xc0) { len = 2; min = 0x80; c &= 0x1f; }
    else if ((c & 0xf0) == 0xe0) { len = 3; min = 0x800; c &= 0x0f; }
    else if ((c & 0xf8) == 0xf0) { len = 4; min = 0x10000; c &= 0x07; }
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        c = (c << 6) | (p[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
    return len;
}

json_t *ob_srv_jstr(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    if (j) return j;
    /* invalid UTF-8 (or an embedded NUL): replace each bad byte with U+FFFD */
    char *buf = malloc(n * 3 + 1);
    if (!buf) return json_string("");
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_len(p + i, n - i);
        if (l == 0 || p[i] == 0) {
            memcpy(buf + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        } else {
            memcpy(buf + o, p + i, l);
            o += l;
            i += l;
        }
    }
    j = json_stringn(buf, o);
    free(buf);
    return j ? j : json_string("");
}

json_t *ob_srv_parse_body(const ob_req *rq, ob_resp *r) {
    json_error_t e;
    if (rq->body_len == 0) {
        ob_srv_error(r, 400, NULL, "request body is empty; expected a JSON object");
        return NULL;
    }
    json_t *j = json_loadb(rq->body, rq->body_len, JSON_REJECT_DUPLICATES, &e);
    if (!j) {
        ob_srv_error(r, 400, NULL, "invalid JSON at line %d column %d: %s", e.line, e.column, e.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        ob_srv_error(r, 400, NULL, "the request body must be a JSON object");
        return NULL;
    }
    return j;
}

void ob_srv_buf_add(char **buf, size_t *len, const char *s, size_t n) {
    char *p = realloc(*buf, *len + n + 1);
    if (!p) return;
    memcpy(p + *len, s, n);
    *len += n;
    p[*len] = 0;
    *buf = p;
}

void ob_srv_sse(char **buf, size_t *len, const char *event, json_t *j) {
    if (event) {
        ob_srv_buf_add(buf, len, "event: ", 7);
        ob_srv_buf_add(buf, len, event, strlen(event));
        ob_srv_buf_add(buf, len, "\n", 1);
    }
    char *s = json_dumps(j, JSON_COMPACT);
    ob_srv_buf_add(buf, len, "data: ", 6);
    if (s) ob_srv_buf_add(buf, len, s, strlen(s));
    ob_srv_buf_add(buf, len, "\n\n", 2);
    free(s);
    json_decref(j);
}

bool ob_srv_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, ob_resp *r) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    long long x;
    if (json_is_integer(v)) x = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v)) x = (long long)json_real_value(v);
    else {
        ob_srv_error(r, 400, NULL, "'%s' must be an integer", key);
        return false;
    }
    if (x < lo || x > hi) {
        ob_srv_error(r, 400, NULL, "'%s' must be between %lld and %lld", key, lo, hi);
        return false;
    }
    *out = x;
    return true;
}

bool ob_srv_get_num(json_t *o, const char *key, double lo, double hi, double *out, ob_resp *r) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_number(v)) {
        ob_srv_error(r, 400, NULL, "'%s' must be a number", key);
        return false;
    }
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) {
        ob_srv_error(r, 400, NULL, "'%s' must be between %g and %g", key, lo, hi);
        return false;
    }
    *out = x;
    return true;
}

bool ob_srv_get_bool(json_t *o, const char *key, bool *out, ob_resp *r) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) {
        ob_srv_error(r, 400, NULL, "'%s' must be a boolean", key);
        return false;
    }
    *out = json_is_true(v);
    return true;
}

bool ob_srv_joined_text(json_t *v, const char *what, bool blocks, char **out, size_t *len, ob_resp *r) {
    if (!v || json_is_null(v)) return true;
    if (json_is_string(v)) {
        ob_srv_buf_add(out, len, json_string_value(v), json_string_length(v));
        return true;
    }
    const char *items = blocks ? "content blocks" : "parts";
    if (!json_is_array(v)) {
        ob_srv_error(r, 400, NULL, "%s must be a string or an array of %s", what, items);
        return false;
    }
    size_t i;
    json_t *b;
    json_array_foreach(v, i, b) {
        const char *ty = json_string_value(json_object_get(b, "type"));
        json_t *t = json_object_get(b, "text");
        if ((blocks && (!ty || strcmp(ty, "text"))) || !json_is_string(t)) {
            ob_srv_error(r, 400, NULL, "%s[%zu]: only text %s are supported%s", what, i, blocks ? "blocks" : "parts",
                         blocks ? "" : " here");
            return false;
        }
        if (*len) ob_srv_buf_add(out, len, "\n", 1);
        ob_srv_buf_add(out, len, json_string_value(t), json_string_length(t));
    }
    return true;
}

bool ob_srv_convert_parts(json_t *c, const char *what, bool blocks, const char *image_type, json_t *(*image)(json_t *),
                          json_t *out, ob_resp *r) {
    if (!c || json_is_null(c)) return true;
    /* Anthropic refuses empty text blocks: from OpenAI parts (to blocks) they are left out */
    const bool skip_empty = !blocks;
    if (json_is_string(c)) {
        if (!skip_empty || json_string_length(c)) json_array_append_new(out, json_pack("{s:s,s:O}", "type", "text", "text", c));
        return true;
    }
    if (!json_is_array(c)) {
        ob_srv_error(r, 400, NULL, "%s must be a string or an array of %s", what, blocks ? "content blocks" : "parts");
        return false;
    }
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p) {
        const char *ty = json_string_value(json_object_get(p, "type"));
        json_t *t = json_object_get(p, "text");
        if (ty && !strcmp(ty, "text") && json_is_string(t)) {
            if (!skip_empty || json_string_length(t))
                json_array_append_new(out, json_pack("{s:s,s:O}", "type", "text", "text", t));
        } else if (ty && !strcmp(ty, image_type)) {
            json_array_append_new(out, image(p));
        } else {
            ob_srv_error(r, 400, NULL, "%s[%zu]: unsupported %s type '%s'", what, i, blocks ? "block" : "part",
                         ty ? ty : "(none)");
            return false;
        }
    }
    return true;
}
