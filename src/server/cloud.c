/* Cloud passthrough (--models-config FILE): models served by a remote OpenAI- or
 * Anthropic-compatible API, listed in /v1/models beside the local model. A request to
 * /v1/chat/completions, /v1/messages, /v1/completions (OpenAI upstreams only) or
 * /v1/messages/count_tokens (Anthropic upstreams only) whose "model" names one is relayed there (relay.h): unchanged when the client speaks the
 * upstream's format, else translated both ways, streams included (wire.h).
 *
 *   {"models": [{"id": "gpt-4o-mini", "base_url": "https://api.openai.com/v1",
 *                "wire_format": "openai", "api_key_env": "OPENAI_API_KEY",
 *                "model": "name upstream (default: id)"}, ...]}
 *
 * The key is read from its environment variable for each request and goes only into the
 * upstream's request headers: never into a log line, an error body or /props (an
 * upstream's error message is scrubbed of it before it is passed on). An upstream that
 * cannot be reached or answers an error gives 502 with a JSON error in the client's
 * format. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/common.h"
#include "server/agent.h"
#include "server/gen.h"
#include "server/relay.h"
#include "server/wire.h"

#define CLOUD_ERR_BODY_MAX (64u << 10) /* of an upstream's error reply, read for its message */
#define ANTHROPIC_VERSION "2023-06-01"

typedef struct cloud_model {
    char *id;        /* what clients name */
    char *upstream;  /* what the upstream calls it */
    char *base_url;  /* without a trailing '/' */
    char *key_env;   /* NULL: no key sent */
    ob_wire_fmt fmt;
} cloud_model;

struct ob_srv_cloud {
    cloud_model *models;
    int n;
    bool curl;       /* curl_global_init was called */
};

#ifdef ONEBIT_HAVE_CURL
#include <curl/curl.h>
#endif

void ob_srv_cloud_free(ob_srv_cloud *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        free(c->models[i].id);
        free(c->models[i].upstream);
        free(c->models[i].base_url);
        free(c->models[i].key_env);
    }
    free(c->models);
#ifdef ONEBIT_HAVE_CURL
    if (c->curl) curl_global_cleanup();
#endif
    free(c);
}

static bool env_name_ok(const char *s) {
    if (!*s || isdigit((unsigned char)*s)) return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_') return false;
    return true;
}

/* One entry of "models"; false with err filled. */
static bool read_entry(json_t *e, size_t i, const ob_srv_cloud *c, cloud_model *m, char *err, size_t err_len) {
    static const char *const keys[] = {"id", "base_url", "wire_format", "api_key_env", "model"};
    if (!json_is_object(e)) {
        snprintf(err, err_len, "models[%zu] is not an object", i);
        return false;
    }
    const char *k;
    json_t *v;
    json_object_foreach(e, k, v) {
        size_t j = 0;
        while (j < OB_ARRAY_LEN(keys) && strcmp(k, keys[j])) j++;
        if (j == OB_ARRAY_LEN(keys)) {
            snprintf(err, err_len, "models[%zu]: unknown key '%s' (id, base_url, wire_format, api_key_env, model)", i, k);
            return false;
        }
        if (!json_is_string(v) || !json_string_length(v)) {
            snprintf(err, err_len, "models[%zu].%s must be a non-empty string", i, k);
            return false;
        }
    }
    const char *id = json_string_value(json_object_get(e, "id"));
    const char *url = json_string_value(json_object_get(e, "base_url"));
    const char *wf = json_string_value(json_object_get(e, "wire_format"));
    const char *env = json_string_value(json_object_get(e, "api_key_env"));
    const char *up = json_string_value(json_object_get(e, "model"));
    if (!id || !url || !wf) {
        snprintf(err, err_len, "models[%zu] needs id, base_url and wire_format", i);
        return false;
    }
    for (int j = 0; j < c->n; j++)
        if (!strcmp(c->models[j].id, id)) {
            snprintf(err, err_len, "models[%zu]: the id '%s' is given twice", i, id);
            return false;
        }
    if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8)) {
        snprintf(err, err_len, "models[%zu].base_url must be an http:// or https:// URL", i);
        return false;
    }
    if (strcmp(wf, "openai") && strcmp(wf, "anthropic")) {
        snprintf(err, err_len, "models[%zu].wire_format must be \"openai\" or \"anthropic\", not \"%s\"", i, wf);
        return false;
    }
    if (env && !env_name_ok(env)) {
        snprintf(err, err_len, "models[%zu].api_key_env must name an environment variable (letters, digits, _)", i);
        return false;
    }
    size_t ul = strlen(url);
    while (ul > 8 && url[ul - 1] == '/') ul--;
    m->id = strdup(id);
    m->upstream = strdup(up ? up : id);
    m->base_url = strndup(url, ul);
    m->key_env = env ? strdup(env) : NULL;
    m->fmt = !strcmp(wf, "anthropic") ? OB_WIRE_ANTHROPIC : OB_WIRE_OPENAI;
    if (!m->id || !m->upstream || !m->base_url || (env && !m->key_env)) {
        snprintf(err, err_len, "out of memory");
        return false;
    }
    return true;
}

ob_status ob_srv_cloud_new(const char *path, ob_srv_cloud **out, char *err, size_t err_len) {
    *out = NULL;
    if (!path) return OB_OK;
    char why[384] = "";
    json_error_t je;
    ob_srv_cloud *c = calloc(1, sizeof *c);
    json_t *root = c ? json_load_file(path, JSON_REJECT_DUPLICATES, &je) : NULL;
    json_t *models = json_object_get(root, "models");
    if (!c) {
        snprintf(why, sizeof why, "out of memory");
    } else if (!root) {
        snprintf(why, sizeof why, "%s (line %d, column %d)", je.text, je.line, je.column);
    } else if (!json_is_object(root) || !json_is_array(models) || json_object_size(root) != 1) {
        snprintf(why, sizeof why, "must be an object with one key, \"models\", an array of models");
    } else if (!(c->models = calloc(json_array_size(models) + 1, sizeof *c->models))) {
        snprintf(why, sizeof why, "out of memory");
    } else {
        size_t i;
        json_t *e;
        json_array_foreach(models, i, e) {
            if (!read_entry(e, i, c, &c->models[c->n], why, sizeof why)) {
                c->n++; /* what read_entry took is freed with the rest */
                break;
            }
            c->n++;
        }
    }
    json_decref(root);
    if (why[0]) {
        ob_srv_cloud_free(c);
        return ob_fail(err, err_len, OB_ERR_ARG, "--models-config %s: %s", path, why);
    }
#ifdef ONEBIT_HAVE_CURL
    if (c->n && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        ob_srv_cloud_free(c);
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "--models-config: libcurl did not start");
    }
    c->curl = c->n > 0;
#endif
    *out = c;
    return OB_OK;
}

void ob_srv_cloud_list(const ob_srv_cloud *c, json_t *data) {
    json_int_t t = (json_int_t)time(NULL);
    for (int i = 0; c && i < c->n; i++) {
        const cloud_model *m = &c->models[i];
        json_array_append_new(data, json_pack("{s:s,s:s,s:I,s:s,s:{s:s,s:s}}", "id", m->id, "object", "model", "created",
                                              t, "owned_by", m->fmt == OB_WIRE_ANTHROPIC ? "anthropic" : "openai",
                                              "meta", "wire_format", m->fmt == OB_WIRE_ANTHROPIC ? "anthropic" : "openai",
                                              "base_url", m->base_url));
    }
}

static const cloud_model *find(const ob_srv_cloud *c, const char *id) {
    for (int i = 0; id && i < c->n; i++)
        if (!strcmp(c->models[i].id, id)) return &c->models[i];
    return NULL;
}

#if defined(ONEBIT_HAVE_CURL) && defined(ONEBIT_HAVE_MHD)
#include <microhttpd.h>

/* ---- a translated stream -------------------------------------------------------------- */

typedef struct xlate {
    ob_stream base;
    ob_stream *up;     /* the relay's stream of the upstream's SSE */
    ob_wire_sse *w;
    bool done;
} xlate;

static int xlate_next(ob_stream *st, char **buf, size_t *len) {
    xlate *x = (xlate *)st;
    size_t before = *len;
    while (!x->done) {
        char *in = NULL;
        size_t n = 0;
        int rc = x->up->next(x->up, &in, &n);
        x->done = rc != 1;
        ob_wire_sse_feed(x->w, in ? in : "", n, x->done, buf, len);
        free(in);
        if (*len > before) return 1;
    }
    return 0;
}

static void xlate_close(ob_stream *st) {
    xlate *x = (xlate *)st;
    x->up->close(x->up);
    ob_wire_sse_free(x->w);
    free(x);
}

/* ---- forwarding ---------------------------------------------------------------------- */

/* The whole of a relayed reply (a stream read to its end, at most max bytes kept). */
static void take_body(ob_resp *up, size_t max) {
    if (!up->stream) return;
    ob_stream *st = up->stream;
    up->stream = NULL;
    for (int rc = 1; rc == 1;) {
        char *b = NULL;
        size_t n = 0;
        rc = st->next(st, &b, &n);
        if (up->body_len < max) ob_srv_buf_add(&up->body, &up->body_len, b ? b : "", OB_MIN(n, max - up->body_len));
        free(b);
    }
    st->close(st);
}

/* Replaces every copy of key in s by "***". */
static void scrub(char *s, const char *key) {
    size_t kl = key ? strlen(key) : 0;
    if (kl < 4) return;
    for (char *p; (p = strstr(s, key)) != NULL;) {
        memcpy(p, "***", 3);
        memmove(p + 3, p + kl, strlen(p + kl) + 1);
    }
}

/* An upstream's error reply (or the relay's own) as a 502 in the client's format. */
static void upstream_error(const cloud_model *m, ob_wire_fmt client, const char *key, ob_resp *up, ob_resp *r) {
    bool reached = up->headers != NULL; /* the relay's own errors carry no headers */
    take_body(up, CLOUD_ERR_BODY_MAX);
    char msg[512] = "";
    json_t *j = up->body ? json_loadb(up->body, up->body_len, 0, NULL) : NULL;
    json_t *e = json_object_get(j, "error");
    const char *jm = json_string_value(json_object_get(e, "message"));
    if (!jm) jm = json_string_value(e);
    if (jm) snprintf(msg, sizeof msg, "%s", jm);
    else if (up->body) snprintf(msg, sizeof msg, "%.300s", up->body);
    json_decref(j);
    scrub(msg, key);
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    int status = up->status;
    free(up->body);
    free(up->headers);
    memset(up, 0, sizeof *up);
    if (!reached && status == 503) {
        ob_wire_error(r, client, 503, "the server is shutting down");
        return;
    }
    if (reached) {
        ob_log(OB_LOG_WARN, "serve: cloud model '%s': the upstream answered HTTP %d", m->id, status);
        ob_wire_error(r, client, 502, "model '%s': the upstream answered HTTP %d: %s", m->id, status,
                      msg[0] ? msg : "(no message)");
    } else {
        const char *why = strncmp(msg, "proxy error: ", 13) ? msg : msg + 13; /* the relay's wording */
        ob_wire_error(r, client, 502, "model '%s': cannot reach the upstream %s: %s", m->id, m->base_url, why);
    }
}

static struct curl_slist *add_line(struct curl_slist *l, bool *ok, const char *fmt, const char *v) {
    char line[4096];
    int n = snprintf(line, sizeof line, fmt, v);
    struct curl_slist *nl = n > 0 && (size_t)n < sizeof line ? curl_slist_append(l, line) : NULL;
    if (!nl) *ok = false;
    return nl ? nl : l;
}

/* The upstream's request headers: JSON, the key, Anthropic's version (the client's if it
 * sent one) and beta flags. */
static struct curl_slist *upstream_headers(const cloud_model *m, const ob_req *rq, const char *key, bool *ok) {
    struct curl_slist *l = NULL;
    *ok = true;
    l = add_line(l, ok, "Content-Type: %s", "application/json");
    if (m->fmt == OB_WIRE_OPENAI) {
        if (key) l = add_line(l, ok, "Authorization: Bearer %s", key);
        return l;
    }
    if (key) l = add_line(l, ok, "x-api-key: %s", key);
    const char *ver = rq->conn ? MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "anthropic-version") : NULL;
    const char *beta = rq->conn ? MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "anthropic-beta") : NULL;
    l = add_line(l, ok, "anthropic-version: %s", ver && *ver ? ver : ANTHROPIC_VERSION);
    if (beta && *beta) l = add_line(l, ok, "anthropic-beta: %s", beta);
    return l;
}

/* The upstream's reply in the client's format: a whole body translated, or a stream
 * wrapped in a translating one. Takes up. */
static void translate_reply(const cloud_model *m, ob_wire_fmt client, bool stream, bool include_usage, ob_resp *up,
                            ob_resp *r) {
    free(up->headers); /* the upstream's Content-Type and ids describe the other format */
    up->headers = NULL;
    if (!stream) {
        take_body(up, SIZE_MAX);
        json_t *j = up->body ? json_loadb(up->body, up->body_len, 0, NULL) : NULL;
        free(up->body);
        if (!json_is_object(j)) ob_wire_error(r, client, 502, "model '%s': the upstream's reply is not a JSON object", m->id);
        else ob_srv_json(r, 200, ob_wire_reply(j, client, m->id));
        json_decref(j);
        return;
    }
    ob_wire_sse *w = ob_wire_sse_new(client, m->id, include_usage);
    xlate *x = w && up->stream ? calloc(1, sizeof *x) : NULL;
    if (w && up->stream && !x) {
        ob_wire_sse_free(w);
        w = NULL;
    }
    if (!w) {
        if (up->stream) up->stream->close(up->stream);
        free(up->body);
        ob_wire_error(r, client, 500, "out of memory");
        return;
    }
    if (!up->stream) { /* the whole stream came with the headers */
        char *out = NULL;
        size_t n = 0;
        ob_wire_sse_feed(w, up->body ? up->body : "", up->body_len, true, &out, &n);
        ob_wire_sse_free(w);
        free(up->body);
        r->status = 200;
        r->content_type = "text/event-stream";
        r->body = out ? out : strdup("");
        r->body_len = n;
        return;
    }
    x->base.next = xlate_next;
    x->base.close = xlate_close;
    x->base.fd = up->stream->fd;
    x->up = up->stream;
    x->w = w;
    r->status = 200;
    r->stream = &x->base;
}

/* The routes forwarded: chat (either format), OpenAI's completions, Anthropic's counting. */
typedef enum cloud_route { ROUTE_CHAT, ROUTE_COMPLETIONS, ROUTE_COUNT } cloud_route;

static void forward(ob_server_state *s, const ob_req *rq, const cloud_model *m, ob_wire_fmt client, cloud_route route,
                    json_t *body, ob_resp *r) {
    if (route == ROUTE_COMPLETIONS && m->fmt != OB_WIRE_OPENAI) {
        ob_wire_error(r, client, 400, "model '%s' is an Anthropic upstream: use /v1/chat/completions or /v1/messages",
                      m->id);
        return;
    }
    if (route == ROUTE_COUNT && m->fmt != OB_WIRE_ANTHROPIC) {
        ob_wire_error(r, client, 400, "model '%s' is an OpenAI upstream: it has no token counting route", m->id);
        return;
    }
    const char *key = m->key_env ? getenv(m->key_env) : NULL;
    if (m->key_env && (!key || !*key)) {
        ob_wire_error(r, client, 502, "model '%s': the environment variable %s (its API key) is not set", m->id, m->key_env);
        return;
    }
    bool stream = json_is_true(json_object_get(body, "stream"));
    bool include_usage = json_is_true(json_object_get(json_object_get(body, "stream_options"), "include_usage"));
    json_t *out = NULL;
    if (client == m->fmt) {
        if (strcmp(m->id, m->upstream)) { /* the same body, naming the model as the upstream does */
            out = json_incref(body);
            json_object_set_new(out, "model", json_string(m->upstream));
        }
    } else if (!(out = client == OB_WIRE_OPENAI ? ob_wire_req_to_anthropic(body, m->upstream, r)
                                                : ob_wire_req_to_openai(body, m->upstream, r))) {
        return; /* r holds the 400 */
    }
    char *text = out ? json_dumps(out, JSON_COMPACT) : NULL;
    json_decref(out);
    if (out && !text) {
        ob_wire_error(r, client, 500, "out of memory");
        return;
    }
    char url[2048];
    const char *tail = route == ROUTE_COUNT               ? "/v1/messages/count_tokens"
                       : m->fmt == OB_WIRE_ANTHROPIC       ? "/v1/messages"
                       : route == ROUTE_COMPLETIONS        ? "/completions"
                                                           : "/chat/completions";
    snprintf(url, sizeof url, "%s%s", m->base_url, tail);
    bool ok;
    struct curl_slist *h = upstream_headers(m, rq, key, &ok);
    if (!ok) {
        curl_slist_free_all(h);
        free(text);
        ob_wire_error(r, client, 500, "out of memory");
        return;
    }
    ob_log(OB_LOG_INFO, "serve: cloud model '%s': %s%s to %s", m->id, stream ? "streamed " : "",
           client == m->fmt ? "relayed" : "translated", url);
    ob_srv_relay_req q = {.method = "POST", .url = url, .body = text ? text : rq->body,
                          .body_len = text ? strlen(text) : rq->body_len, .headers = h, .follow_redirects = false,
                          .stop = s->agent ? &s->agent->stop : NULL, .idle_timeout_s = s->cfg->timeout_s};
    ob_resp up = {0};
    ob_srv_relay(&q, ob_srv_conn_fd(rq), &up);
    free(text);
    if (up.status == 0) { /* the client left */
        *r = up;
        return;
    }
    if (up.status < 200 || up.status >= 300) upstream_error(m, client, key, &up, r);
    else if (client == m->fmt) *r = up;
    else translate_reply(m, client, stream, include_usage, &up, r);
}

bool ob_srv_route_cloud(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    const ob_srv_cloud *c = s->cloud;
    if (!c || !c->n || strcmp(rq->method, "POST")) return false;
    const char *p = rq->path;
    bool chat = !strcmp(p, "/v1/chat/completions") || !strcmp(p, "/chat/completions");
    bool legacy = !strcmp(p, "/v1/completions");
    bool msgs = !strcmp(p, "/v1/messages") || !strcmp(p, "/messages");
    bool count = !strcmp(p, "/v1/messages/count_tokens") || !strcmp(p, "/messages/count_tokens");
    if (!chat && !legacy && !msgs && !count) return false;
    json_t *body = json_loadb(rq->body, rq->body_len, 0, NULL);
    const cloud_model *m = find(c, json_string_value(json_object_get(body, "model")));
    if (!m || !json_is_object(body)) { /* the local model's request, or a 400 there */
        json_decref(body);
        return false;
    }
    forward(s, rq, m, msgs || count ? OB_WIRE_ANTHROPIC : OB_WIRE_OPENAI,
            legacy ? ROUTE_COMPLETIONS : count ? ROUTE_COUNT : ROUTE_CHAT, body, r);
    json_decref(body);
    return true;
}

#else /* no libcurl */

bool ob_srv_route_cloud(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    const ob_srv_cloud *c = s->cloud;
    if (!c || !c->n || strcmp(rq->method, "POST")) return false;
    json_t *body = json_loadb(rq->body, rq->body_len, 0, NULL);
    bool mine = find(c, json_string_value(json_object_get(body, "model"))) != NULL;
    json_decref(body);
    if (mine) ob_srv_error(r, 501, NULL, "this build cannot reach cloud models (no libcurl)");
    return mine;
}
#endif
