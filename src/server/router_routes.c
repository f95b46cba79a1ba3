/* Router mode's HTTP routes (router.h), as llama-server's router answers them:
 *
 *   GET  /models, /v1/models          the list, each model with its status (?reload=1 reads
 *                                     the sources again first; POST /models/reload too)
 *   POST /models/load, /models/unload {"model": id}: starts or stops its child (200 at once;
 *                                     the status says when it is done)
 *   POST /models                      {"model": "org/name[:TAG]"}: downloads it into the Hub's
 *                                     cache (events on /models/sse)
 *   DELETE /models?model=id           removes a cached model from the cache
 *   GET  /models/sse                  SSE: {"model", "event", "data"} for status changes,
 *                                     downloads, reloads and removals
 *   GET  /props                       the router's own properties (with ?model=: the child's)
 *   the API routes                    relayed to the child the body's "model" (a GET's
 *                                     ?model=) names, loading it first unless
 *                                     --no-models-autoload (or ?autoload=false)
 *
 * A relayed request waits for its model in slices of 200 ms, giving up when its client
 * leaves or the server stops; the reply (a stream too) is passed on as it comes
 * (relay.h), and a client that leaves ends the child's request. */
#include "server/router.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/common.h"
#include "server/gen.h"
#include "server/relay.h"

#if defined(ONEBIT_HAVE_MHD) && defined(ONEBIT_HAVE_CURL)
#include <curl/curl.h>
#include <microhttpd.h>

#define RT_SUB_MAX (1u << 20) /* events held for one slow /models/sse client */

/* ---- /models/sse ------------------------------------------------------------------- */

struct ob_rt_sub {
    ob_stream base;
    ob_router *rt;
    char *buf;       /* events not yet taken */
    size_t len;
    bool greeted;
    ob_rt_sub *next;
};

void ob_rt_event(ob_router *rt, const char *event, const char *model, json_t *data) {
    json_t *e = json_object();
    json_object_set_new(e, "model", json_string(model));
    json_object_set_new(e, "event", json_string(event));
    if (data) json_object_set_new(e, "data", data);
    char *line = NULL;
    size_t len = 0;
    ob_srv_sse(&line, &len, NULL, e);
    for (ob_rt_sub *s = rt->subs; s && line; s = s->next)
        if (s->len + len <= RT_SUB_MAX) ob_srv_buf_add(&s->buf, &s->len, line, len);
    free(line);
    pthread_cond_broadcast(&rt->cv);
}

static void timed_wait(ob_router *rt, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&rt->cv, &rt->mu, &ts);
}

static int sub_next(ob_stream *st, char **buf, size_t *len) {
    ob_rt_sub *s = (ob_rt_sub *)st;
    ob_router *rt = s->rt;
    if (!s->greeted) { /* the headers go out with a first line: the client knows it is subscribed */
        s->greeted = true;
        static const char hello[] = ": router events\n\n";
        ob_srv_buf_add(buf, len, hello, sizeof hello - 1);
        return 1;
    }
    pthread_mutex_lock(&rt->mu);
    for (;;) {
        if (s->len) {
            *buf = s->buf;
            *len = s->len;
            s->buf = NULL;
            s->len = 0;
            pthread_mutex_unlock(&rt->mu);
            return 1;
        }
        if (rt->stop) {
            pthread_mutex_unlock(&rt->mu);
            return 0;
        }
        timed_wait(rt, 500);
        pthread_mutex_unlock(&rt->mu);
        if (ob_srv_client_gone(s->base.fd)) return -1;
        pthread_mutex_lock(&rt->mu);
    }
}

static void sub_close(ob_stream *st) {
    ob_rt_sub *s = (ob_rt_sub *)st;
    ob_router *rt = s->rt;
    pthread_mutex_lock(&rt->mu);
    for (ob_rt_sub **pp = &rt->subs; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    pthread_mutex_unlock(&rt->mu);
    free(s->buf);
    free(s);
}

static void route_sse(ob_router *rt, const ob_req *rq, ob_resp *r) {
    ob_rt_sub *s = calloc(1, sizeof *s);
    if (!s) {
        ob_srv_error(r, 500, NULL, "out of memory");
        return;
    }
    s->base.next = sub_next;
    s->base.close = sub_close;
    s->base.fd = ob_srv_conn_fd(rq);
    s->rt = rt;
    pthread_mutex_lock(&rt->mu);
    s->next = rt->subs;
    rt->subs = s;
    pthread_mutex_unlock(&rt->mu);
    r->status = 200;
    r->content_type = "text/event-stream";
    r->stream = &s->base;
}

/* ---- POST /models: downloads -------------------------------------------------------- */

struct ob_rt_download {
    pthread_t th;
    ob_router *rt;
    ob_rt_model *m;   /* DOWNLOADING: only this download's thread drops it */
    char *id;
    bool done;
    ob_rt_download *next;
};

static void on_progress(void *ud, const char *file, int64_t have, int64_t size) {
    ob_rt_download *d = ud;
    json_t *f = json_object();
    json_object_set_new(f, "done", json_integer(have));
    json_object_set_new(f, "total", json_integer(size));
    json_t *prog = json_object();
    json_object_set_new(prog, file, f);
    json_t *data = json_object();
    json_object_set_new(data, "progress", prog);
    pthread_mutex_lock(&d->rt->mu);
    ob_rt_event(d->rt, "download_progress", d->id, data);
    pthread_mutex_unlock(&d->rt->mu);
}

static void *download_main(void *arg) {
    ob_rt_download *d = arg;
    ob_router *rt = d->rt;
    char err[768] = "";
    ob_status st = rt->hooks->pull(rt->hooks->ud, d->id, on_progress, d, &d->m->cancel, err, sizeof err);
    if (st) ob_log(OB_LOG_WARN, "router: download of %s failed: %s", d->id, err);
    else ob_log(OB_LOG_INFO, "router: %s downloaded", d->id);
    pthread_mutex_lock(&rt->mu);
    ob_rt_remove(rt, d->m);
    d->m = NULL;
    bool stop = rt->stop;
    pthread_mutex_unlock(&rt->mu);
    char e2[512];
    /* the cache lists it now (under the name of its quantization) */
    if (!st && !stop && ob_router_reload(rt, e2, sizeof e2)) ob_log(OB_LOG_WARN, "router: reload: %s", e2);
    pthread_mutex_lock(&rt->mu);
    json_t *data = NULL;
    if (st) {
        data = json_object();
        json_object_set_new(data, "error", json_string(err));
    }
    ob_rt_event(rt, st ? "download_failed" : "download_finished", d->id, data);
    d->done = true;
    pthread_mutex_unlock(&rt->mu);
    return NULL;
}

void ob_rt_routes_free(ob_router *rt) {
    for (ob_rt_download *d = rt->downloads, *next; d; d = next) {
        next = d->next;
        pthread_join(d->th, NULL);
        free(d->id);
        free(d);
    }
    rt->downloads = NULL;
    for (ob_rt_sub *s = rt->subs, *next; s; s = next) { /* none: their streams closed first */
        next = s->next;
        free(s->buf);
        free(s);
    }
    rt->subs = NULL;
}

/* Locked: joins the downloads that have finished. */
static void reap_downloads(ob_router *rt) {
    for (ob_rt_download **pp = &rt->downloads; *pp;) {
        ob_rt_download *d = *pp;
        if (!d->done) {
            pp = &d->next;
            continue;
        }
        *pp = d->next;
        pthread_join(d->th, NULL); /* it has returned, or is about to */
        free(d->id);
        free(d);
    }
}

static void route_download(ob_router *rt, const char *id, ob_resp *r) {
    if (!rt->hooks || !rt->hooks->pull) {
        ob_srv_error(r, 501, NULL, "this server cannot download models");
        return;
    }
    pthread_mutex_lock(&rt->mu);
    reap_downloads(rt);
    if (ob_rt_find(rt, id)) {
        pthread_mutex_unlock(&rt->mu);
        ob_srv_error(r, 400, NULL, "model '%s' already exists", id);
        return;
    }
    ob_rt_download *d = calloc(1, sizeof *d);
    ob_rt_model *m = calloc(1, sizeof *m);
    if (!d || !m || !(d->id = strdup(id)) || !(m->id = strdup(id)) || !(m->aliases = json_array()) ||
        !(m->tags = json_array()))
        goto fail;
    m->source = OB_RT_SRC_CACHE;
    m->status = OB_RT_DOWNLOADING;
    m->proc.pid = -1;
    m->proc.in = m->proc.out = -1;
    if (!ob_rt_add(rt, m)) goto fail;
    d->rt = rt;
    d->m = m;
    if (pthread_create(&d->th, NULL, download_main, d)) {
        ob_rt_remove(rt, m); /* frees it */
        m = NULL;
        goto fail;
    }
    d->next = rt->downloads;
    rt->downloads = d;
    pthread_mutex_unlock(&rt->mu);
    ob_log(OB_LOG_INFO, "router: downloading %s", id);
    ob_srv_json(r, 200, json_pack("{s:b}", "success", 1));
    return;
fail:
    pthread_mutex_unlock(&rt->mu);
    ob_rt_model_free(m);
    if (d) free(d->id);
    free(d);
    ob_srv_error(r, 500, NULL, "cannot start the download");
}

/* ---- DELETE /models?model= ---------------------------------------------------------- */

static void route_remove(ob_router *rt, const char *id, ob_resp *r) {
    pthread_mutex_lock(&rt->mu);
    ob_rt_model *m = ob_rt_find(rt, id);
    if (!m) {
        pthread_mutex_unlock(&rt->mu);
        ob_srv_error(r, 404, NULL, "model '%s' is not found", id);
        return;
    }
    if (m->source != OB_RT_SRC_CACHE || !rt->hooks || !rt->hooks->cache_remove) {
        pthread_mutex_unlock(&rt->mu);
        ob_srv_error(r, 400, NULL, "model '%s' is not removable (not from the Hugging Face cache)", id);
        return;
    }
    char name[1024];
    snprintf(name, sizeof name, "%s", m->id);
    /* a download is cancelled, a child stopped: then the files go */
    ob_rt_request_unload(rt, m);
    ob_rt_wake(rt);
    while (!rt->stop && (m = ob_rt_find(rt, name)) && (m->status == OB_RT_DOWNLOADING || ob_rt_running(m)))
        timed_wait(rt, 200);
    if (rt->stop) {
        pthread_mutex_unlock(&rt->mu);
        ob_srv_error(r, 503, NULL, "the server is shutting down");
        return;
    }
    char err[512];
    ob_status st = rt->hooks->cache_remove(rt->hooks->ud, name, err, sizeof err);
    if (st) {
        pthread_mutex_unlock(&rt->mu);
        ob_srv_error(r, 500, NULL, "cannot remove %s: %s", name, err);
        return;
    }
    if ((m = ob_rt_find(rt, name)) != NULL) ob_rt_remove(rt, m);
    ob_rt_event(rt, "model_remove", name, NULL);
    pthread_mutex_unlock(&rt->mu);
    ob_log(OB_LOG_INFO, "router: removed %s from the cache", name);
    ob_srv_json(r, 200, json_pack("{s:b}", "success", 1));
}

/* ---- the list -------------------------------------------------------------------------- */

static json_t *strv_json(const ob_rt_strv *s) {
    json_t *a = json_array();
    for (int i = 0; i < s->n; i++) json_array_append_new(a, json_string(s->v[i]));
    return a;
}

/* Locked: one model as GET /models shows it (llama-server's fields). */
static json_t *model_json(ob_router *rt, const ob_rt_model *m, json_int_t created) {
    json_t *status = json_object();
    json_object_set_new(status, "value", json_string(ob_rt_status_name(m->status)));
    if (m->args.n && m->proc.pid > 0) {
        json_object_set_new(status, "args", strv_json(&m->args));
    } else if (m->status != OB_RT_DOWNLOADING) {
        ob_rt_strv a = {0};
        if (ob_rt_child_args(rt, m, 0, &a)) json_object_set_new(status, "args", strv_json(&a));
        ob_rt_strv_free(&a);
    }
    if (m->preset_ini) json_object_set_new(status, "preset", json_string(m->preset_ini));
    if (m->failed && m->status == OB_RT_UNLOADED) {
        json_object_set_new(status, "failed", json_true());
        json_object_set_new(status, "exit_code", json_integer(m->exit_code));
    }
    static const char *const sources[] = {"preset", "models_dir", "cache"};
    json_t *o = json_pack("{s:s, s:O, s:O, s:s, s:s, s:I, s:o, s:{s:[s], s:[s]}, s:s, s:b}", "id", m->id, "aliases",
                          m->aliases, "tags", m->tags, "object", "model", "owned_by", "onebit", "created", created,
                          "status", status, "architecture", "input_modalities", "text", "output_modalities", "text",
                          "source", sources[m->source], "can_remove", m->source == OB_RT_SRC_CACHE);
    if (o && m->path) json_object_set_new(o, "path", json_string(m->path));
    if (o && m->info && ob_rt_running(m)) {
        /* what the child says of itself, where the router says nothing */
        const char *k;
        json_t *v;
        json_object_foreach(m->info, k, v) if (!json_object_get(o, k)) json_object_set(o, k, v);
    }
    return o;
}

static void route_list(ob_router *rt, const ob_srv_cloud *cloud, ob_resp *r) {
    json_t *data = json_array();
    json_int_t t = (json_int_t)time(NULL);
    pthread_mutex_lock(&rt->mu);
    for (int i = 0; i < rt->n_models; i++) json_array_append_new(data, model_json(rt, rt->models[i], t));
    pthread_mutex_unlock(&rt->mu);
    ob_srv_cloud_list(cloud, data);
    ob_srv_json(r, 200, json_pack("{s:o, s:s}", "data", data, "object", "list"));
}

static void route_props(ob_router *rt, ob_resp *r) {
    const ob_srv_config *cfg = rt->cfg;
    ob_srv_json(r, 200,
                json_pack("{s:s, s:i, s:b, s:s, s:s, s:{s:{}, s:i}, s:{}, s:s, s:b}", "role", "router", "max_instances",
                          cfg->models_max, "models_autoload", cfg->models_autoload, "model_alias", "llama-server",
                          "model_path", "none", "default_generation_settings", "params", "n_ctx", 0, "ui_settings",
                          "build_info", ob_build_info(), "cors_proxy_enabled", cfg->ui_mcp_proxy));
}

/* ---- load, unload ---------------------------------------------------------------------- */

static void route_load(ob_router *rt, const char *id, bool load, ob_resp *r) {
    pthread_mutex_lock(&rt->mu);
    ob_rt_model *m = ob_rt_find(rt, id);
    if (!m) {
        pthread_mutex_unlock(&rt->mu);
        ob_srv_error(r, load ? 404 : 400, NULL, "model '%s' is not found", id);
        return;
    }
    bool running = ob_rt_running(m) && !m->stopping;
    if (load && (running || m->status == OB_RT_DOWNLOADING)) {
        pthread_mutex_unlock(&rt->mu);
        ob_srv_error(r, 400, NULL, "model '%s' is already %s", m->id, running ? "running" : "downloading");
        return;
    }
    if (!load && !running && m->status != OB_RT_DOWNLOADING) {
        pthread_mutex_unlock(&rt->mu);
        ob_srv_error(r, 400, NULL, "model '%s' is not running", m->id);
        return;
    }
    if (load) {
        if (m->stopping) m->want_load = true, m->last_used = ob_time_s(); /* started again once it has exited */
        else ob_rt_request_load(rt, m);
    } else {
        ob_rt_request_unload(rt, m);
    }
    pthread_mutex_unlock(&rt->mu);
    ob_rt_wake(rt);
    ob_srv_json(r, 200, json_pack("{s:b}", "success", 1));
}

/* The port of the model's child, loading it first when autoload; 0 with r filled (r's
 * status 0: the client left). */
static int ensure_loaded(ob_router *rt, const char *id, bool autoload, int client_fd, ob_resp *r) {
    bool asked = false;
    int port = 0;
    char name[1024];
    snprintf(name, sizeof name, "%s", id);
    pthread_mutex_lock(&rt->mu);
    for (;;) {
        if (rt->stop) {
            ob_srv_error(r, 503, NULL, "the server is shutting down");
            break;
        }
        ob_rt_model *m = ob_rt_find(rt, name);
        if (!m) {
            ob_srv_error(r, 400, NULL, asked ? "model '%s' was removed" : "model '%s' not found", name);
            break;
        }
        snprintf(name, sizeof name, "%s", m->id); /* an alias names the model */
        if (m->status == OB_RT_DOWNLOADING) {
            ob_srv_error(r, 400, NULL, "model '%s' is being downloaded", name);
            break;
        }
        if (m->status == OB_RT_LOADED && !m->stopping) {
            port = m->port;
            m->last_used = ob_time_s();
            break;
        }
        if (m->status == OB_RT_UNLOADED && !m->want_load) {
            if (asked && m->failed) {
                ob_srv_error(r, 500, NULL, "model '%s' failed to load (exit code %d; the router's log has its output)",
                             name, m->exit_code);
                break;
            }
            if (asked) {
                ob_srv_error(r, 503, NULL, "model '%s' was unloaded while it loaded", name);
                break;
            }
            if (!autoload) {
                ob_srv_error(r, 400, NULL, "model '%s' is not loaded", name);
                break;
            }
            ob_log(OB_LOG_INFO, "router: %s is not loaded; loading it", name);
            ob_rt_request_load(rt, m);
            asked = true;
            ob_rt_wake(rt);
        }
        timed_wait(rt, 200);
        pthread_mutex_unlock(&rt->mu);
        bool gone = ob_srv_client_gone(client_fd);
        pthread_mutex_lock(&rt->mu);
        if (gone) break; /* r->status stays 0: no reply */
    }
    pthread_mutex_unlock(&rt->mu);
    return port;
}

/* ---- relaying ---------------------------------------------------------------------------- */

typedef struct walk {
    struct curl_slist *list;
    char *query;
    size_t qlen;
    bool content_type, failed;
} walk;

static void add_header(walk *w, const char *line) {
    struct curl_slist *l = curl_slist_append(w->list, line);
    if (!l) w->failed = true;
    else w->list = l;
}

/* The request's headers go on, but for this server's key, hop-by-hop ones and those
 * curl sets itself. */
static enum MHD_Result take_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    walk *w = cls;
    static const char *const skip[] = {"host", "content-length", "transfer-encoding", "connection", "keep-alive",
                                       "te", "upgrade", "expect", "accept-encoding", "authorization", "x-api-key",
                                       "proxy-authorization", "trailer"};
    for (size_t i = 0; i < OB_ARRAY_LEN(skip); i++)
        if (!strcasecmp(key, skip[i])) return MHD_YES;
    if (!strcasecmp(key, "content-type")) w->content_type = true;
    char line[8192];
    int n = value && *value ? snprintf(line, sizeof line, "%s: %s", key, value) : snprintf(line, sizeof line, "%s;", key);
    if (n > 0 && (size_t)n < sizeof line) add_header(w, line);
    return MHD_YES;
}

static void add_escaped(walk *w, const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char e[3] = {(char)*p, 0, 0};
        size_t n = 1;
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || strchr("-_.~", *p)))
            e[0] = '%', e[1] = hex[*p >> 4], e[2] = hex[*p & 15], n = 3;
        ob_srv_buf_add(&w->query, &w->qlen, e, n);
    }
}

/* The query string again (MHD took it apart). */
static enum MHD_Result take_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    walk *w = cls;
    ob_srv_buf_add(&w->query, &w->qlen, w->qlen ? "&" : "?", 1);
    add_escaped(w, key);
    if (value) {
        ob_srv_buf_add(&w->query, &w->qlen, "=", 1);
        add_escaped(w, value);
    }
    return MHD_YES;
}

static void relay(ob_router *rt, const ob_req *rq, int port, ob_resp *r) {
    walk w = {0};
    MHD_get_connection_values(rq->conn, MHD_HEADER_KIND, take_header, &w);
    MHD_get_connection_values(rq->conn, MHD_GET_ARGUMENT_KIND, take_arg, &w);
    if (!w.content_type && strcmp(rq->method, "GET")) add_header(&w, "Content-Type: application/json");
    char *url = NULL;
    size_t ul = 0;
    char head[64];
    snprintf(head, sizeof head, "http://127.0.0.1:%d", port);
    ob_srv_buf_add(&url, &ul, head, strlen(head));
    ob_srv_buf_add(&url, &ul, rq->path, strlen(rq->path));
    if (w.query) ob_srv_buf_add(&url, &ul, w.query, w.qlen);
    free(w.query);
    if (w.failed || !url) {
        curl_slist_free_all(w.list);
        free(url);
        ob_srv_error(r, 500, NULL, "out of memory");
        return;
    }
    ob_srv_relay_req q = {.method = rq->method, .url = url, .body = rq->body, .body_len = rq->body_len,
                          .headers = w.list, .stop = &rt->stop, .idle_timeout_s = rt->cfg->timeout_s};
    ob_srv_relay(&q, ob_srv_conn_fd(rq), r);
    free(url);
}

static const char *query(const ob_req *rq, const char *key) {
    return rq->conn ? MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, key) : NULL;
}

/* The routes a child answers: POST ones name the model in the body, GET ones in ?model=. */
static bool relayed(const char *method, const char *p) {
    static const char *const posts[] = {
        "/completion", "/completions", "/v1/completions", "/chat/completions", "/v1/chat/completions",
        "/chat/completions/input_tokens", "/v1/chat/completions/input_tokens", "/responses", "/v1/responses",
        "/responses/input_tokens", "/v1/responses/input_tokens", "/messages", "/v1/messages",
        "/messages/count_tokens", "/v1/messages/count_tokens", "/infill", "/embedding", "/embeddings",
        "/v1/embeddings", "/rerank", "/reranking", "/v1/rerank", "/v1/reranking", "/tokenize", "/detokenize",
        "/apply-template", "/props", "/slots"};
    static const char *const gets[] = {"/props", "/metrics", "/slots"};
    bool post = !strcmp(method, "POST");
    const char *const *list = post ? posts : gets;
    size_t n = post ? OB_ARRAY_LEN(posts) : OB_ARRAY_LEN(gets);
    if (!post && strcmp(method, "GET")) return false;
    if (!strncmp(p, "/slots/", 7)) return true;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(p, list[i])) return true;
    return false;
}

static void route_relay(ob_router *rt, const ob_req *rq, ob_resp *r) {
    char id[1024] = "";
    if (!strcmp(rq->method, "GET")) {
        const char *q = query(rq, "model");
        if (q) snprintf(id, sizeof id, "%s", q);
    } else {
        json_t *body = ob_srv_parse_body(rq, r);
        if (!body) return;
        const char *s = json_string_value(json_object_get(body, "model"));
        if (s) snprintf(id, sizeof id, "%s", s);
        json_decref(body);
    }
    if (!id[0]) {
        ob_srv_error(r, 400, NULL, "model name is missing from the request");
        return;
    }
    const char *al = query(rq, "autoload");
    bool autoload = al ? !strcmp(al, "true") || !strcmp(al, "1") : rt->cfg->models_autoload;
    int port = ensure_loaded(rt, id, autoload, ob_srv_conn_fd(rq), r);
    if (port > 0) relay(rt, rq, port, r);
}

/* The management routes change what runs and what is on disk: they take JSON only, which a
 * web page of another origin cannot send without a preflight that CORS refuses (a form's
 * text/plain POST could otherwise start downloads). */
static bool json_request(const ob_req *rq, ob_resp *r) {
    const char *ct = rq->conn ? MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Content-Type") : NULL;
    if (ct && !strncasecmp(ct, "application/json", 16)) return true;
    ob_srv_error(r, 415, NULL, "%s takes a JSON body (Content-Type: application/json)", rq->path);
    return false;
}

/* The "model" of a /models/load or /models/unload or POST /models body, or NULL with r
 * filled; free it with json_decref(*body). */
static const char *body_model(const ob_req *rq, ob_resp *r, json_t **body) {
    *body = NULL;
    if (!json_request(rq, r)) return NULL;
    *body = ob_srv_parse_body(rq, r);
    if (!*body) return NULL;
    const char *id = json_string_value(json_object_get(*body, "model"));
    if (!id || !*id) ob_srv_error(r, 400, NULL, "model must be a non-empty string");
    return id && *id ? id : NULL;
}

bool ob_srv_route_router(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    ob_router *rt = s->router;
    const char *p = rq->path, *me = rq->method;
    bool get = !strcmp(me, "GET") || !strcmp(me, "HEAD"), post = !strcmp(me, "POST");
    if (!strcmp(p, "/health") || !strcmp(p, "/v1/health")) {
        if (get) ob_srv_json(r, 200, json_pack("{s:s}", "status", "ok"));
        else ob_srv_error(r, 405, NULL, "%s takes GET", p);
        return true;
    }
    json_t *body = NULL;
    const char *id;
    if (!strcmp(p, "/models") || !strcmp(p, "/v1/models")) {
        bool v1 = p[1] == 'v';
        if (get) {
            char err[768];
            const char *reload = query(rq, "reload");
            if (reload && *reload && ob_router_reload(rt, err, sizeof err)) ob_srv_error(r, 500, NULL, "%s", err);
            else route_list(rt, s->cloud, r);
        } else if (post && !v1) {
            if ((id = body_model(rq, r, &body))) route_download(rt, id, r);
        } else if (!strcmp(me, "DELETE") && !v1) {
            id = query(rq, "model");
            if (!id || !*id) ob_srv_error(r, 400, NULL, "model must be a non-empty string (?model=)");
            else route_remove(rt, id, r);
        } else {
            ob_srv_error(r, 405, NULL, "%s %s is not a route", me, p);
        }
    } else if (!strcmp(p, "/models/load") || !strcmp(p, "/models/unload")) {
        if (!post) ob_srv_error(r, 405, NULL, "%s takes POST", p);
        else if ((id = body_model(rq, r, &body))) route_load(rt, id, p[8] == 'l', r);
    } else if (!strcmp(p, "/models/reload")) {
        char err[768];
        if (!post) ob_srv_error(r, 405, NULL, "%s takes POST", p);
        else if (!json_request(rq, r)) {}
        else if (ob_router_reload(rt, err, sizeof err)) ob_srv_error(r, 500, NULL, "%s", err);
        else route_list(rt, s->cloud, r);
    } else if (!strcmp(p, "/models/sse")) {
        if (!get) ob_srv_error(r, 405, NULL, "%s takes GET", p);
        else route_sse(rt, rq, r);
    } else if (!strcmp(p, "/props") && get && !query(rq, "model")) {
        route_props(rt, r);
    } else if (relayed(me, p)) {
        route_relay(rt, rq, r);
    } else {
        ob_srv_error(r, 404, NULL, "no route for %s %s (router mode: the API routes take a \"model\")", me, p);
    }
    json_decref(body);
    return true;
}

#else /* no libmicrohttpd or no libcurl: ob_router_new refuses, nothing routes here */

void ob_rt_event(ob_router *rt, const char *event, const char *model, json_t *data) { json_decref(data); }
void ob_rt_routes_free(ob_router *rt) {}
bool ob_srv_route_router(ob_server_state *s, const ob_req *rq, ob_resp *r) { return false; }
#endif
