/* Relaying an HTTP request to another server (ob_srv_relay, relay.h), and on it the CORS
 * proxy (--ui-mcp-proxy): /cors-proxy?url=U forwards the request to U and gives back its
 * status, headers and body, so that a page of the web UI can reach an MCP server that
 * does not allow its origin. Only http and https, no credentials in U. The router
 * (router.c) relays requests to its children the same way.
 *
 * The CORS proxy forwards the method, the body, and only the headers the page names
 * explicitly as x-llama-server-proxy-header-<name>: never this server's own
 * Authorization, X-Api-Key or cookies. Returned: the target's headers except hop-by-hop
 * ones, its CORS headers (ours apply), Server and Set-Cookie (a cookie would land on this
 * server's origin). A reply that is complete when its headers arrive is sent whole (so a
 * 204 has no body); a longer one (an SSE stream) is passed on as it comes, never more
 * than ~1 MiB held. The transfer runs on the request's thread (curl multi, 100 ms
 * slices): it stops when the client leaves or the server stops, and after --timeout
 * seconds without a byte. */
#include "server/agent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/common.h"
#include "server/gen.h"
#include "server/relay.h"

#if defined(ONEBIT_HAVE_CURL) && defined(ONEBIT_HAVE_MHD)
#include <curl/curl.h>
#include <microhttpd.h>

#define HOLD_MAX (1u << 20)
#define HEADER_PREFIX "x-llama-server-proxy-header-"

ob_status ob_srv_proxy_init(char *err, size_t err_len) {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "--ui-mcp-proxy: libcurl did not start");
    return OB_OK;
}

void ob_srv_proxy_cleanup(void) { curl_global_cleanup(); }

typedef struct proxy {
    ob_stream base;
    CURLM *multi;
    CURL *easy;
    struct curl_slist *out_headers;
    const volatile int *stop;
    char *body;              /* received, not yet passed on */
    size_t len;
    char *headers;           /* the reply's headers to pass on: "Name: value\n" */
    size_t hlen;
    long status;             /* of the response being read */
    bool location;           /* it has a Location (a redirect curl follows) */
    bool headers_done, paused, done;
    CURLcode result;
    char errbuf[CURL_ERROR_SIZE];
} proxy;

static bool drop_response_header(const char *name, size_t n) {
    static const char *const drop[] = {"server", "transfer-encoding", "content-length", "keep-alive", "connection",
                                       "set-cookie", "upgrade", "proxy-connection", "trailer"};
    if (n >= 15 && !strncasecmp(name, "access-control-", 15)) return true;
    for (size_t i = 0; i < OB_ARRAY_LEN(drop); i++)
        if (strlen(drop[i]) == n && !strncasecmp(name, drop[i], n)) return true;
    return false;
}

static size_t on_header(char *line, size_t size, size_t nitems, void *ud) {
    proxy *p = ud;
    size_t n = size * nitems, l = n;
    while (l && (line[l - 1] == '\n' || line[l - 1] == '\r')) l--;
    if (n >= 5 && !strncmp(line, "HTTP/", 5)) {
        /* a new response (after a 1xx or a redirect): its headers replace the last one's */
        const char *sp = memchr(line, ' ', l);
        p->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        p->hlen = 0;
        p->location = false;
    } else if (l == 0) {
        bool redirect = p->location && (p->status == 301 || p->status == 302 || p->status == 303 ||
                                        p->status == 307 || p->status == 308);
        if (p->status >= 200 && !redirect) p->headers_done = true;
    } else if (line[0] != ' ' && line[0] != '\t') {
        const char *colon = memchr(line, ':', l);
        if (!colon) return n;
        size_t nl = (size_t)(colon - line);
        if (nl == 8 && !strncasecmp(line, "location", 8)) p->location = true;
        if (drop_response_header(line, nl)) return n;
        const char *v = colon + 1;
        while (v < line + l && (*v == ' ' || *v == '\t')) v++;
        ob_srv_buf_add(&p->headers, &p->hlen, line, nl);
        ob_srv_buf_add(&p->headers, &p->hlen, ": ", 2);
        ob_srv_buf_add(&p->headers, &p->hlen, v, (size_t)(line + l - v));
        ob_srv_buf_add(&p->headers, &p->hlen, "\n", 1);
    }
    return n;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud) {
    proxy *p = ud;
    size_t n = size * nmemb;
    if (p->len > 0 && p->len + n > HOLD_MAX) {
        /* held until the client has taken what is here: curl gives it again on resume */
        p->paused = true;
        return CURL_WRITEFUNC_PAUSE;
    }
    size_t before = p->len;
    ob_srv_buf_add(&p->body, &p->len, data, n);
    return p->len == before + n ? n : 0;
}

/* Runs the transfer until the headers are in (or, after, until some body is), or it
 * ends. False when the client left or the server stops. */
static bool pump(proxy *p, bool headers) {
    for (;;) {
        int running;
        curl_multi_perform(p->multi, &running);
        int q;
        for (CURLMsg *m; (m = curl_multi_info_read(p->multi, &q)) != NULL;)
            if (m->msg == CURLMSG_DONE) {
                p->done = true;
                p->result = m->data.result;
            }
        if (p->done || (headers ? p->headers_done : p->len > 0)) return true;
        if ((p->stop && *p->stop) || ob_srv_client_gone(p->base.fd)) return false;
        curl_multi_poll(p->multi, NULL, 0, 100, NULL);
    }
}

static int proxy_next(ob_stream *st, char **buf, size_t *len) {
    proxy *p = (proxy *)st;
    for (;;) {
        if (p->len) {
            ob_srv_buf_add(buf, len, p->body, p->len);
            p->len = 0;
            return 1;
        }
        if (p->done) return p->result == CURLE_OK ? 0 : -1; /* a cut transfer cuts the reply */
        if (p->paused) {
            p->paused = false;
            curl_easy_pause(p->easy, CURLPAUSE_CONT);
        }
        if (!pump(p, false)) return -1;
    }
}

static void proxy_close(ob_stream *st) {
    proxy *p = (proxy *)st;
    if (p->multi && p->easy) curl_multi_remove_handle(p->multi, p->easy);
    if (p->easy) curl_easy_cleanup(p->easy);
    if (p->multi) curl_multi_cleanup(p->multi);
    curl_slist_free_all(p->out_headers);
    free(p->body);
    free(p->headers);
    free(p);
}

typedef struct hdr_walk {
    struct curl_slist *list;
    bool content_type, failed;
} hdr_walk;

/* The request headers to forward: only x-llama-server-proxy-header-<name>, as <name>. */
static enum MHD_Result take_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    hdr_walk *w = cls;
    size_t pl = strlen(HEADER_PREFIX);
    if (strncasecmp(key, HEADER_PREFIX, pl) || !key[pl]) return MHD_YES;
    const char *name = key + pl;
    static const char *const hop[] = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "te",
                                      "upgrade", "expect", "accept-encoding"};
    for (size_t i = 0; i < OB_ARRAY_LEN(hop); i++)
        if (!strcasecmp(name, hop[i])) return MHD_YES;
    if (!strcasecmp(name, "content-type")) w->content_type = true;
    char line[8192];
    /* curl sends "Name;" as an empty header ("Name:" would remove it) */
    int n = value && *value ? snprintf(line, sizeof line, "%s: %s", name, value) : snprintf(line, sizeof line, "%s;", name);
    if (n < 0 || (size_t)n >= sizeof line) return MHD_YES;
    struct curl_slist *l = curl_slist_append(w->list, line);
    if (!l) w->failed = true;
    else w->list = l;
    return MHD_YES;
}

/* 400 unless url is an http(s) URL with a host and no credentials. */
static bool check_url(const char *url, ob_resp *r) {
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *user = NULL, *pass = NULL;
    bool ok = false;
    if (!u || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK) {
        ob_srv_error(r, 400, NULL, "invalid target URL");
    } else {
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
        curl_url_get(u, CURLUPART_HOST, &host, 0);
        curl_url_get(u, CURLUPART_USER, &user, 0);
        curl_url_get(u, CURLUPART_PASSWORD, &pass, 0);
        if (!scheme || (strcasecmp(scheme, "http") && strcasecmp(scheme, "https")))
            ob_srv_error(r, 400, NULL, "unsupported URL scheme in target URL: %s", scheme ? scheme : "(none)");
        else if (!host || !*host) ob_srv_error(r, 400, NULL, "invalid target URL: missing host");
        else if (user || pass) ob_srv_error(r, 400, NULL, "credentials in the target URL are not supported");
        else ok = true;
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(user);
    curl_free(pass);
    curl_url_cleanup(u);
    return ok;
}

void ob_srv_relay(const ob_srv_relay_req *q, int client_fd, ob_resp *r) {
    static const char *const methods[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"};
    size_t mi = 0;
    while (mi < OB_ARRAY_LEN(methods) && strcmp(q->method, methods[mi])) mi++;
    struct curl_slist *out_headers = q->headers;
    proxy *p = mi < OB_ARRAY_LEN(methods) ? calloc(1, sizeof *p) : NULL;
    if (!p || !(p->multi = curl_multi_init()) || !(p->easy = curl_easy_init())) goto oom;
    p->base.next = proxy_next;
    p->base.close = proxy_close;
    p->base.fd = client_fd;
    p->stop = q->stop;
    struct curl_slist *l = curl_slist_append(out_headers, "Expect:"); /* no 100-continue round trip */
    if (!l) goto oom;
    p->out_headers = out_headers = l;
    CURL *e = p->easy;
    curl_easy_setopt(e, CURLOPT_URL, q->url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, q->follow_redirects ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)q->idle_timeout_s);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, p->out_headers);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, p);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, p);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, p->errbuf);
    if (mi == 5) curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    if (mi >= 1 && mi <= 4) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)q->body_len);
        curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, q->body_len ? q->body : "");
        if (mi != 1) curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, methods[mi]);
    } else if (mi == 0) {
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    }
    if (curl_multi_add_handle(p->multi, e) != CURLM_OK) goto oom;
    if (!pump(p, true)) {
        /* the client left (nothing is sent) or the server stops */
        if (q->stop && *q->stop) ob_srv_error(r, 503, NULL, "the server is shutting down");
        proxy_close(&p->base);
        return;
    }
    if (!p->headers_done && p->done) {
        const char *why = p->errbuf[0] ? p->errbuf : curl_easy_strerror(p->result);
        ob_log(OB_LOG_WARN, "serve: proxy %s: %s", q->url, why);
        ob_srv_error(r, 502, NULL, "proxy error: %s", why);
        proxy_close(&p->base);
        return;
    }
    r->status = (int)p->status;
    r->headers = p->headers;
    p->headers = NULL;
    if (p->done) {
        /* complete already: sent whole, with its length (and no body for a 204) */
        if (p->result != CURLE_OK) {
            free(r->headers);
            r->headers = NULL;
            ob_srv_error(r, 502, NULL, "proxy error: %s", p->errbuf[0] ? p->errbuf : curl_easy_strerror(p->result));
        } else {
            r->body = p->body;
            r->body_len = p->len;
            p->body = NULL;
            p->len = 0;
        }
        proxy_close(&p->base);
        return;
    }
    r->stream = &p->base;
    return;
oom:
    if (p) {
        p->out_headers = NULL;
        proxy_close(&p->base);
    }
    curl_slist_free_all(out_headers);
    ob_srv_error(r, 500, NULL, "%s", mi < OB_ARRAY_LEN(methods) ? "out of memory" : "method not relayed");
}

void ob_srv_proxy(ob_srv_agent *a, const ob_req *rq, ob_resp *r) {
    const char *url = rq->conn ? MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, "url") : NULL;
    static const char *const methods[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"};
    size_t mi = 0;
    while (mi < OB_ARRAY_LEN(methods) && strcmp(rq->method, methods[mi])) mi++;
    if (mi == OB_ARRAY_LEN(methods)) {
        ob_srv_error(r, 405, NULL, "the proxy forwards GET, POST, PUT, PATCH, DELETE and HEAD");
        return;
    }
    if (!url || !*url) {
        ob_srv_error(r, 400, NULL, "missing 'url' query parameter (the URL to forward to)");
        return;
    }
    if (!check_url(url, r)) return;
    hdr_walk w = {0};
    MHD_get_connection_values(rq->conn, MHD_HEADER_KIND, take_header, &w);
    bool has_body = mi >= 1 && mi <= 3;
    if (has_body && !w.content_type) { /* not curl's form type */
        struct curl_slist *l = curl_slist_append(w.list, "Content-Type:");
        if (!l) w.failed = true;
        else w.list = l;
    }
    if (w.failed) {
        curl_slist_free_all(w.list);
        ob_srv_error(r, 500, NULL, "out of memory");
        return;
    }
    ob_log(OB_LOG_INFO, "serve: proxying %s to %s", rq->method, url);
    ob_srv_relay_req q = {.method = rq->method, .url = url, .body = rq->body, .body_len = rq->body_len,
                          .headers = w.list, .follow_redirects = true, .stop = &a->stop,
                          .idle_timeout_s = a->cfg->timeout_s};
    ob_srv_relay(&q, ob_srv_conn_fd(rq), r);
}

#else /* no libcurl (or no HTTP server at all) */

ob_status ob_srv_proxy_init(char *err, size_t err_len) {
    return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "--ui-mcp-proxy: this build has no libcurl (libcurl4-openssl-dev)");
}

void ob_srv_proxy_cleanup(void) {}

void ob_srv_proxy(ob_srv_agent *a, const ob_req *rq, ob_resp *r) {
    ob_srv_error(r, 501, NULL, "this build has no CORS proxy (no libcurl)");
}

void ob_srv_relay(const ob_srv_relay_req *q, int client_fd, ob_resp *r) {
    ob_srv_error(r, 501, NULL, "this build cannot relay requests (no libcurl)");
}
#endif
