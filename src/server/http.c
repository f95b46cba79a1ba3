/* HTTP on libmicrohttpd: one thread per connection, body and header limits, API key,
 * CORS, and the serve loop (listen first, load, serve, shut down on a signal or fault). */
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/common.h"
#include "server/gen.h"
#include "server/router.h"
#include "server/scheduler.h"
#include "engine/spec.h"

/* The route families in turn; the first that owns the path answers. */
void ob_srv_dispatch(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    if (ob_srv_route_cloud(s, rq, r)) return; /* a remote model's request, in either mode */
    if (__atomic_load_n(&s->router, __ATOMIC_ACQUIRE)) { /* router mode: the models answer in children */
        if (!ob_srv_route_agent(s, rq, r)) ob_srv_route_router(s, rq, r);
        return;
    }
    if (ob_srv_route_vertex(s, rq, r)) return;
    if (ob_srv_route_agent(s, rq, r)) return;
    if (ob_srv_route_embeddings(s, rq, r)) return;
    if (ob_srv_route_llama(s, rq, r)) return;
    if (ob_srv_route_openai(s, rq, r)) return;
    if (ob_srv_route_anthropic(s, rq, r)) return;
    if (ob_srv_route_responses(s, rq, r)) return;
    if (ob_srv_route_lemonade(s, rq, r)) return;
    ob_srv_error(r, 404, NULL, "no route for %s %s", rq->method, rq->path);
}

#ifdef ONEBIT_HAVE_MHD
#include <microhttpd.h>

/* Per-request state across MHD's access-handler calls. */
typedef struct ob_conn {
    char *body;
    size_t len, cap;
    bool too_large;
    bool life;      /* holds ob_http.life for reading */
    bool active;    /* counts as activity for --sleep-idle-seconds */
} ob_conn;

typedef struct ob_http {
    ob_server_state st;
    struct MHD_Daemon *d;
    /* What generation needs besides the weights, freed while asleep (--sleep-idle-seconds):
     * the context, the draft's state and the scheduler (st.sched). */
    ob_model *dm;                /* draft model (-md), stays loaded */
    ob_context *ctx;
    ob_spec *spec;
    /* Requests in flight hold it for reading (a stream until its last byte); sleeping and
     * waking take it for writing, so st.sched never changes under a request. */
    pthread_rwlock_t life;
    int64_t t_last_ms;           /* the last request's start or end */
    ob_conn_guard *guard;        /* the header deadline */
} ob_http;

void ob_conn_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe);

/* Counts a request header's occurrences (MHD keeps every one). */
static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    (void)value;
    struct { const char *name; int n; } *c = cls;
    if (key && !strcasecmp(key, c->name)) c->n++;
    return MHD_YES;
}

static int64_t now_ms(void) { return (int64_t)(ob_time_s() * 1e3); }

/* Context, draft state and scheduler for generation (at start and on waking). */
static ob_status gen_start(ob_http *h, char *err, size_t err_len) {
    const ob_srv_config *cfg = h->st.cfg;
    ob_context_params cp = ob_context_default_params();
    cp.n_seq = cfg->n_slots;
    /* -kvu: every slot may fill the whole -c; each gets its own -c cells (llama-server
     * shares one pool of -c cells between them: docs/compat.md) */
    cp.n_ctx = cfg->n_ctx > 0 ? (cfg->kv_unified ? cfg->n_ctx : cfg->n_ctx / cfg->n_slots) : 0;
    cp.n_batch = cfg->n_batch;
    cp.type_k = cfg->type_k;
    cp.type_v = cfg->type_v;
    ob_status st = ob_context_new(h->st.model, &cp, &h->ctx, err, err_len);
    if (st == OB_OK && h->dm) {
        /* one draft sequence per slot, as long as a slot; proposals must fit the batch */
        ob_spec_params sp = {.n_max = OB_MIN(cfg->draft_max, cfg->n_batch - 1), .n_min = cfg->draft_min,
                             .p_min = cfg->draft_p_min};
        char e2[384];
        if (sp.n_max > 0)
            st = ob_spec_new(h->dm, &sp, cfg->n_slots, ob_context_n_ctx(h->ctx), cfg->n_batch, &h->spec, e2, sizeof e2);
        if (st != OB_OK) snprintf(err, err_len, "draft model %s: %s", cfg->draft_path, e2);
    }
    ob_sched *sched = NULL;
    if (st == OB_OK) st = ob_sched_new(h->st.model, h->ctx, h->spec, cfg->n_slots, cfg->n_batch, &sched, err, err_len);
    h->st.sched = sched;
    return st;
}

/* Stops the scheduler (failing anything left) and frees what gen_start made. */
static void gen_stop(ob_http *h) {
    if (h->st.sched) ob_sched_stop(h->st.sched);
    ob_sched_free(h->st.sched);
    h->st.sched = NULL;
    ob_spec_free(h->spec);
    h->spec = NULL;
    ob_context_free(h->ctx);
    h->ctx = NULL;
}

/* Requests that leave a sleeping server asleep: llama-server's health and properties. */
static bool wakes(const char *method, const char *path) {
    return strcmp(method, "GET") || (strcmp(path, "/health") && strcmp(path, "/v1/health") && strcmp(path, "/props") &&
                                     strcmp(path, "/v1/models") && strcmp(path, "/models"));
}

static void wake(ob_http *h) {
    pthread_rwlock_wrlock(&h->life);
    if (__atomic_load_n(&h->st.sleeping, __ATOMIC_ACQUIRE)) {
        char err[512];
        if (gen_start(h, err, sizeof err) == OB_OK) {
            __atomic_store_n(&h->st.sleeping, 0, __ATOMIC_RELEASE);
            ob_log(OB_LOG_INFO, "serve: awake");
        } else {
            gen_stop(h);
            ob_log(OB_LOG_ERROR, "serve: cannot wake: %s", err);
        }
    }
    pthread_rwlock_unlock(&h->life);
}

/* Called about every 200 ms: asleep after --sleep-idle-seconds with no request in flight. */
static void maybe_sleep(ob_http *h) {
    const ob_srv_config *cfg = h->st.cfg;
    if (cfg->sleep_idle_s < 0 || !h->ctx || __atomic_load_n(&h->st.sleeping, __ATOMIC_ACQUIRE)) return;
    if (now_ms() - __atomic_load_n(&h->t_last_ms, __ATOMIC_ACQUIRE) < (int64_t)cfg->sleep_idle_s * 1000) return;
    if (pthread_rwlock_trywrlock(&h->life) != 0) return; /* a request is in flight */
    gen_stop(h);
    __atomic_store_n(&h->st.sleeping, 1, __ATOMIC_RELEASE);
    pthread_rwlock_unlock(&h->life);
    ob_log(OB_LOG_INFO, "serve: asleep after %d s idle (KV cache freed)", cfg->sleep_idle_s);
}

int ob_srv_conn_fd(const ob_req *rq) {
    if (!rq->conn) return -1;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(rq->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* Is origin a page of this machine: http(s)://localhost, 127.0.0.1 or [::1], any port? */
static bool origin_is_local(const char *origin) {
    const char *o = origin;
    if (!strncmp(o, "http://", 7)) o += 7;
    else if (!strncmp(o, "https://", 8)) o += 8;
    else return false;
    static const char *const hosts[] = {"localhost", "127.0.0.1", "[::1]"};
    for (size_t i = 0; i < OB_ARRAY_LEN(hosts); i++) {
        size_t n = strlen(hosts[i]);
        if (strncasecmp(o, hosts[i], n)) continue;
        const char *rest = o + n;
        if (!*rest) return true;
        if (*rest != ':' || !rest[1]) continue;
        while (*++rest >= '0' && *rest <= '9') {}
        if (!*rest) return true;
    }
    return false;
}

/* May a page of this origin read our replies? The server's own origin always; then
 * --cors-origins (a comma list: origins, '*' for any, 'localhost' for pages of this
 * machine). Without the flag: any origin when --api-key is set (the key, which a foreign
 * page does not have, guards the server), else pages of this machine only, so that a web
 * page the user happens to visit cannot drive an open local server. */
static bool origin_allowed(const ob_srv_config *cfg, struct MHD_Connection *c, const char *origin) {
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    if (host) {
        const char *o = origin;
        if (!strncmp(o, "http://", 7)) o += 7;
        else if (!strncmp(o, "https://", 8)) o += 8;
        if (!strcasecmp(o, host)) return true;
    }
    const char *l = cfg->cors_origins;
    if (!l) return cfg->api_keys || origin_is_local(origin);
    size_t ol = strlen(origin);
    while (*l) {
        const char *e = strchr(l, ',');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        while (n && *l == ' ') { l++; n--; }
        while (n && l[n - 1] == ' ') n--;
        if ((n == 1 && *l == '*') || (n == ol && !strncasecmp(l, origin, n))) return true;
        if (n == 9 && !strncasecmp(l, "localhost", 9) && origin_is_local(origin)) return true;
        if (!e) break;
        l = e + 1;
    }
    return false;
}

/* Reads anyone may make without the key (llama-server's public endpoints). */
static bool path_is_open(const char *method, const char *path) {
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) return false;
    return !strcmp(path, "/health") || !strcmp(path, "/v1/health") || !strcmp(path, "/v1/models") ||
           !strcmp(path, "/models") || !strcmp(path, "/api/v1/health") || !strcmp(path, "/api/v1/models");
}

/* Is k one of the keys (one a line, none empty)? */
static bool key_listed(const char *keys, const char *k) {
    size_t n = strlen(k);
    while (n && *keys) {
        size_t m = strcspn(keys, "\n");
        if (m == n && !memcmp(keys, k, n)) return true;
        keys += m;
        if (*keys) keys++;
    }
    return false;
}

static bool authorized(const ob_srv_config *cfg, struct MHD_Connection *c) {
    if (!cfg->api_keys) return true;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (a && !strncasecmp(a, "Bearer ", 7) && key_listed(cfg->api_keys, a + 7)) return true;
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    return x && key_listed(cfg->api_keys, x);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max);
static void stream_free(void *cls);

/* SSE bytes pending for MHD: the stream refills it. */
typedef struct ob_sse_pipe {
    ob_stream *st;
    char *buf;
    size_t len, off;
    int state; /* 1 more may follow, 0 ended, -1 aborted */
} ob_sse_pipe;

static ssize_t stream_reader(void *cls, uint64_t pos, char *out, size_t max) {
    ob_sse_pipe *p = cls;
    while (p->off >= p->len) {
        free(p->buf);
        p->buf = NULL;
        p->len = p->off = 0;
        if (p->state == 0) return MHD_CONTENT_READER_END_OF_STREAM;
        if (p->state < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
        p->state = p->st->next(p->st, &p->buf, &p->len);
    }
    size_t n = OB_MIN(max, p->len - p->off);
    memcpy(out, p->buf + p->off, n);
    p->off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    ob_sse_pipe *p = cls;
    p->st->close(p->st);
    free(p->buf);
    free(p);
}

static void add_common_headers(const ob_srv_config *cfg, struct MHD_Connection *c, struct MHD_Response *resp) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin && origin_allowed(cfg, c, origin)) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
        MHD_add_response_header(resp, "Access-Control-Allow-Credentials", "true");
        MHD_add_response_header(resp, "Vary", "Origin");
    }
    MHD_add_response_header(resp, "Server", "onebit");
}

/* A route's own headers ("Name: value" lines); they come before the defaults, which
 * yield to them. */
static void add_route_headers(struct MHD_Response *resp, char *lines) {
    for (char *l = lines; l && *l;) {
        char *e = strchr(l, '\n');
        if (e) *e = 0;
        char *colon = strchr(l, ':');
        if (colon) {
            *colon = 0;
            const char *v = colon + 1;
            while (*v == ' ') v++;
            MHD_add_response_header(resp, l, v);
            *colon = ':';
        }
        if (!e) break;
        *e = '\n';
        l = e + 1;
    }
}

static enum MHD_Result send_resp(ob_http *h, struct MHD_Connection *c, ob_resp *r) {
    struct MHD_Response *resp;
    char *route_headers = r->headers;
    r->headers = NULL;
    if (r->stream) {
        ob_sse_pipe *p = calloc(1, sizeof *p);
        if (!p) {
            r->stream->close(r->stream);
            return MHD_NO;
        }
        p->st = r->stream;
        p->state = 1;
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, p, stream_free);
        if (!resp) {
            stream_free(p);
            free(route_headers);
            return MHD_NO;
        }
        add_route_headers(resp, route_headers);
        if (!MHD_get_response_header(resp, "Content-Type"))
            MHD_add_response_header(resp, "Content-Type", r->content_type ? r->content_type : "text/event-stream");
        if (!MHD_get_response_header(resp, "Cache-Control")) MHD_add_response_header(resp, "Cache-Control", "no-cache");
    } else {
        resp = MHD_create_response_from_buffer(r->body_len, r->body, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
            free(r->body);
            free(route_headers);
            return MHD_NO;
        }
        r->body = NULL;
        add_route_headers(resp, route_headers);
        /* a proxied reply (route headers) has the target's Content-Type or none */
        if (!route_headers && !MHD_get_response_header(resp, "Content-Type"))
            MHD_add_response_header(resp, "Content-Type", r->content_type ? r->content_type : "application/json");
    }
    free(route_headers);
    add_common_headers(&*h->st.cfg, c, resp);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}


static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    ob_http *h = cls;
    const ob_srv_config *cfg = h->st.cfg;
    ob_conn *cn = *con_cls;
    if (!cn) {
        cn = calloc(1, sizeof *cn);
        if (!cn) return MHD_NO;
        *con_cls = cn;
        ob_conn_guard_mark(h->guard, c, true); /* the headers are in */
        struct { const char *name; int n; } ncl = {"Content-Length", 0};
        MHD_get_connection_values(c, MHD_HEADER_KIND, count_header, &ncl);
        if (ncl.n > 1) { /* which length is meant is ambiguous (request smuggling): refuse */
            ob_resp r = {0};
            ob_srv_error(&r, 400, NULL, "more than one Content-Length header");
            return send_resp(h, c, &r);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            char *end;
            unsigned long long n = strtoull(cl, &end, 10);
            if (*end || n > cfg->max_body) cn->too_large = true;
        }
        if (cn->too_large) { /* answer at once rather than reading what we will refuse */
            ob_resp r = {0};
            ob_srv_error(&r, 413, NULL, "request body larger than %zu bytes", cfg->max_body);
            return send_resp(h, c, &r);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cn->too_large) {
            size_t need;
            if (!ob_add_ok(cn->len, *upload_size, &need) || need > cfg->max_body) {
                cn->too_large = true;
            } else {
                if (need + 1 > cn->cap) {
                    size_t cap = cn->cap ? cn->cap : 4096;
                    while (cap < need + 1) cap *= 2;
                    char *p = realloc(cn->body, cap);
                    if (!p) return MHD_NO;
                    cn->body = p;
                    cn->cap = cap;
                }
                memcpy(cn->body + cn->len, upload, *upload_size);
                cn->len += *upload_size;
                cn->body[cn->len] = 0;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    ob_resp r = {0};
    if (cn->too_large) {
        ob_srv_error(&r, 413, NULL, "request body larger than %zu bytes", cfg->max_body);
        return send_resp(h, c, &r);
    }
    char path[512];
    size_t pl = strcspn(url, "?");
    if (pl >= sizeof path) {
        ob_srv_error(&r, 414, NULL, "URL too long");
        return send_resp(h, c, &r);
    }
    memcpy(path, url, pl);
    path[pl] = 0;
    while (pl > 1 && path[pl - 1] == '/') path[--pl] = 0;
    if (!strcmp(method, "OPTIONS")) {
        /* A preflight is answered 200 either way, as llama-server does: for an origin
         * that is not allowed it carries no Access-Control-Allow-Origin, so the browser
         * refuses the request itself. The allowed headers are the ones asked for (a bare
         * '*' would not cover Authorization, which the Fetch standard never wildcards). */
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!resp) return MHD_NO;
        add_common_headers(cfg, c, resp);
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        const char *rh = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", rh && *rh ? rh : "*");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "86400");
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    if (!path_is_open(method, path) && !authorized(cfg, c)) {
        ob_srv_error(&r, 401, NULL, "invalid or missing API key");
        return send_resp(h, c, &r);
    }
    /* The request is in: from here on the model's pace, not the client's, sets how long
     * the reply takes (a queued stream may wait minutes), and a client that leaves is
     * noticed by polling its socket. The idle timeout comes back in on_completed. */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)0);
    /* health and properties are no activity: polling them lets a server fall asleep */
    bool active = wakes(method, path);
    pthread_rwlock_rdlock(&h->life);
    for (int k = 0; active && k < 3 && __atomic_load_n(&h->st.sleeping, __ATOMIC_ACQUIRE); k++) {
        /* asleep (or fell asleep just now): wake it, then look again under the lock */
        pthread_rwlock_unlock(&h->life);
        wake(h);
        pthread_rwlock_rdlock(&h->life);
    }
    cn->life = true;
    cn->active = active;
    if (active) __atomic_store_n(&h->t_last_ms, now_ms(), __ATOMIC_RELEASE);
    ob_req rq = {.method = method, .path = path, .body = cn->body ? cn->body : "", .body_len = cn->len, .conn = c};
    ob_srv_dispatch(&h->st, &rq, &r);
    if (r.status == 0) { /* the client went away while we worked: close without a reply */
        free(r.body);
        free(r.headers);
        if (r.stream) r.stream->close(r.stream);
        return MHD_NO;
    }
    return send_resp(h, c, &r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode tc) {
    ob_http *h = cls;
    if (tc == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)h->st.cfg->timeout_s);
    ob_conn_guard_mark(h->guard, c, false); /* the next request's headers are due */
    ob_conn *cn = *con_cls;
    if (!cn) return;
    if (cn->life) {
        if (cn->active) __atomic_store_n(&h->t_last_ms, now_ms(), __ATOMIC_RELEASE);
        pthread_rwlock_unlock(&h->life);
    }
    free(cn->body);
    free(cn);
    *con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    char msg[256];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n') msg[--n] = 0;
    ob_log(OB_LOG_DEBUG, "http: %s", msg);
}

static char *model_id_from_path(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    return strdup(b);
}

/* The id clients see: with --alias a,b,c the first of the aliases in byte order (as
 * llama-server picks it), else the file name. */
static char *model_id_from_alias(const char *alias) {
    const char *best = NULL;
    size_t best_n = 0;
    for (const char *p = alias; *p;) {
        size_t n = strcspn(p, ",");
        if (n && (!best || memcmp(p, best, OB_MIN(n, best_n)) < 0 ||
                  (!memcmp(p, best, OB_MIN(n, best_n)) && n < best_n))) {
            best = p;
            best_n = n;
        }
        p += n;
        if (*p) p++;
    }
    return best ? strndup(best, best_n) : strdup(alias);
}

/* Resolves host:port to a socket address for MHD. */
static bool resolve(const char *host, int port, struct sockaddr_storage *ss, char *err, size_t n) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &ai);
    if (rc != 0 || !ai) {
        ob_fail(err, n, OB_ERR_ARG, "cannot resolve host '%s': %s", host, gai_strerror(rc));
        return false;
    }
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    return true;
}

int ob_server_run(const ob_srv_config *cfg) {
    ob_http *h = calloc(1, sizeof *h);
    if (!h) return 1;
    h->st.cfg = cfg;
    h->st.t_start = ob_time_s();
    char *model_id = cfg->router                    ? strdup("llama-server")
                     : cfg->alias && cfg->alias[0] ? model_id_from_alias(cfg->alias)
                                                   : model_id_from_path(cfg->model_path);
    h->st.model_id = model_id;

    /* Signals go to this thread only (sigtimedwait below); connection threads inherit
     * the mask. A closed socket must not kill the process. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[512];
    struct sockaddr_storage ss;
    int port = ob_srv_vertex_port(cfg->port);
    if (!resolve(cfg->host, port, &ss, err, sizeof err)) {
        fprintf(stderr, "1bit serve: %s\n", err);
        free(model_id);
        free(h);
        return 1;
    }
    ob_srv_cloud *cloud = NULL;
    if (ob_srv_cloud_new(cfg->models_config, &cloud, err, sizeof err) != OB_OK) {
        fprintf(stderr, "1bit serve: %s\n", err);
        free(model_id);
        free(h);
        return 1;
    }
    h->st.cloud = cloud;
    h->guard = ob_conn_guard_new(cfg->header_timeout_s);
    if (!h->guard) {
        ob_srv_cloud_free(cloud);
        fprintf(stderr, "1bit serve: cannot start the connection watchdog\n");
        free(model_id);
        free(h);
        return 1;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (ss.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
    h->d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, h,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->timeout_s,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, cfg->max_header,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_conns,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->max_conns_per_ip,
                            MHD_OPTION_NOTIFY_CONNECTION, ob_conn_guard_notify, h->guard,
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
                            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
                            MHD_OPTION_END);
    if (!h->d) {
        fprintf(stderr, "1bit serve: cannot listen on %s:%d: %s\n", cfg->host, port, strerror(errno));
        ob_conn_guard_free(h->guard);
        ob_srv_cloud_free(cloud);
        free(model_id);
        free(h);
        return 1;
    }
    ob_log(OB_LOG_INFO, "serve: listening on http://%s:%d (%s%s)", cfg->host, port, cfg->router ? "router mode" : "loading ",
           cfg->router ? "" : cfg->model_path);

    /* --tools, MCP servers, --ui-mcp-proxy: a bad config stops the start; MCP servers
     * are started and their tools listed before the model loads */
    ob_srv_agent *agent;
    if (ob_srv_agent_new(cfg, &agent, err, sizeof err) != OB_OK) {
        fprintf(stderr, "1bit serve: %s\n", err);
        MHD_stop_daemon(h->d);
        ob_conn_guard_free(h->guard);
        ob_srv_cloud_free(cloud);
        free(model_id);
        free(h);
        return 1;
    }
    ob_srv_agent_warmup(agent);
    __atomic_store_n(&h->st.agent, agent, __ATOMIC_RELEASE);

    int rc = 0;
    ob_model *m = NULL;
    ob_srv_embd *embd = NULL;
    pthread_rwlock_init(&h->life, NULL);
    h->t_last_ms = now_ms();
    /* router mode: no model here; the router lists the models and runs each in a child */
    ob_router *router = NULL;
    ob_status st = cfg->router ? ob_router_new(cfg, &router, err, sizeof err)
                               : ob_model_load(cfg->model_path, &cfg->mp, &m, err, sizeof err);
    h->st.model = m;
    /* Embedding mode (llama-server's --embeddings, or a model with no LM head): one
     * embeddings context and no chat scheduler; generation routes answer 501. */
    bool embd_mode = st == OB_OK && m && ob_srv_embd_wanted(cfg, m);
    if (embd_mode) {
        st = ob_srv_embd_new(m, cfg, &embd, err, sizeof err);
    } else if (st == OB_OK && m && cfg->draft_path && cfg->draft_max > 0 && ob_model_has_recurrent_state(m)) {
        /* a rejected draft would have to be cut off a state that cannot be cut back */
        ob_log(OB_LOG_WARN, "serve: speculative decoding is off: the model has recurrent layers (%s not loaded)",
               cfg->draft_path);
    } else if (st == OB_OK && m && cfg->draft_path && cfg->draft_max > 0) {
        char e2[384];
        st = ob_model_load(cfg->draft_path, &cfg->mp, &h->dm, e2, sizeof e2);
        if (st == OB_OK) st = ob_spec_check_vocab(m, h->dm, e2, sizeof e2);
        if (st != OB_OK) snprintf(err, sizeof err, "draft model %s: %s", cfg->draft_path, e2);
    }
    if (st == OB_OK && m && !embd_mode) {
        st = gen_start(h, err, sizeof err);
        if (st == OB_OK && h->spec)
            ob_log(OB_LOG_INFO, "serve: speculative decoding with %s (up to %d tokens)", cfg->draft_path,
                   OB_MIN(cfg->draft_max, cfg->n_batch - 1));
    }
    if (st != OB_OK) {
        fprintf(stderr, "1bit serve: %s\n", err);
        h->st.ready = -1;
        rc = 1;
        goto out;
    }
    h->st.tok = m ? ob_model_tokenizer(m) : NULL;
    h->st.chat_template = m ? ob_model_chat_template(m) : NULL;
    h->st.embd = embd;
    __atomic_store_n(&h->st.router, router, __ATOMIC_RELEASE);
    if (h->st.sched) {
        h->st.n_ctx_slot = ob_sched_n_ctx_slot(h->st.sched);
        h->st.n_slots = ob_sched_n_slots(h->st.sched);
    }
    __atomic_store_n(&h->st.ready, 1, __ATOMIC_RELEASE);
    if (router)
        ob_log(OB_LOG_INFO, "serve: ready: router mode");
    else if (embd)
        ob_log(OB_LOG_INFO, "serve: ready: %s, inputs of up to %d tokens", ob_srv_embd_ranks(embd) ? "reranking" : "embeddings",
               ob_srv_embd_n_ctx(embd));
    else
        ob_log(OB_LOG_INFO, "serve: ready: %d slot(s) of %d tokens", cfg->n_slots, h->st.n_ctx_slot);

    for (;;) {
        struct timespec ts = {0, 200 * 1000000L};
        int sig = sigtimedwait(&set, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) {
            ob_log(OB_LOG_INFO, "serve: signal %d, shutting down", sig);
            break;
        }
        pthread_rwlock_rdlock(&h->life);
        bool failed = (h->st.sched && ob_sched_failed(h->st.sched)) || (embd && ob_srv_embd_failed(embd));
        pthread_rwlock_unlock(&h->life);
        if (failed) {
            /* in-flight requests already hold their 500; give them a moment to go out */
            __atomic_store_n(&h->st.ready, -1, __ATOMIC_RELEASE);
            struct timespec g = {1, 0};
            nanosleep(&g, NULL);
            rc = 1;
            break;
        }
        maybe_sleep(h);
    }
out:
    if (h->st.sched || embd) __atomic_store_n(&h->st.ready, -1, __ATOMIC_RELEASE);
    if (h->st.sched) ob_sched_stop(h->st.sched); /* fails what is left, so every reader finishes */
    ob_router_stop(router);                      /* waits for models and relayed requests give up */
    ob_srv_agent_stop(agent);                    /* tool calls and proxied transfers give up */
    MHD_stop_daemon(h->d);                       /* waits for the connection threads */
    ob_srv_agent_free(agent);                    /* kills and reaps the MCP servers */
    ob_router_free(router);                      /* stops and reaps the children */
    ob_conn_guard_free(h->guard);
    ob_srv_cloud_free(cloud);
    gen_stop(h);
    ob_srv_embd_free(embd);
    ob_model_free(h->dm);
    ob_model_free(m);
    pthread_rwlock_destroy(&h->life);
    free(model_id);
    free(h);
    return rc;
}

#else /* no libmicrohttpd */

int ob_srv_conn_fd(const ob_req *rq) { return -1; }

int ob_server_run(const ob_srv_config *cfg) {
    fprintf(stderr, "1bit serve: this build has no HTTP support (libmicrohttpd was not found)\n");
    return 1;
}
#endif
