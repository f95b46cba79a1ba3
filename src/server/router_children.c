/* Router mode's children (router.h): one monitor thread starts each child `1bit serve`
 * once there is room under --models-max (asking the least recently used one to exit when
 * there is not), polls a starting child's /health until it answers, relays every child's
 * output to our stderr a line at a time ("[model] ..."), and reaps the children that
 * exit, reporting them unloaded (failed, with their exit code, when nobody asked).
 *
 * A child runs with --exit-with-stdin: closing its stdin is how it is asked to exit (it
 * shuts down as on SIGTERM), and a router that dies, however, closes it too. A child that
 * is still loading is killed at once; one that does not exit within its stop timeout
 * (the preset's stop-timeout, default 10 s) is killed with its process group. */
#include "server/router.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/common.h"

#ifdef ONEBIT_HAVE_CURL
#include <curl/curl.h>
#endif

#define RT_HEALTH_EVERY_S 0.2 /* a starting child's /health, this often */
#define RT_POLL_MS 100

bool ob_rt_running(const ob_rt_model *m) {
    return m->status == OB_RT_LOADING || m->status == OB_RT_LOADED || m->proc.pid > 0;
}

void ob_rt_wake(ob_router *rt) {
    char b = 1;
    if (rt->wake[1] >= 0 && write(rt->wake[1], &b, 1) < 0) {} /* full: a wake-up is pending anyway */
}

/* Locked: the new status, told to /models/sse clients and to waiting requests. */
static void set_status(ob_router *rt, ob_rt_model *m, ob_rt_status st) {
    m->status = st;
    json_t *d = json_object();
    json_object_set_new(d, "status", json_string(ob_rt_status_name(st)));
    if (st == OB_RT_UNLOADED) {
        json_object_set_new(d, "exit_code", json_integer(m->exit_code));
        if (m->failed) json_object_set_new(d, "failed", json_true());
    }
    if (st == OB_RT_LOADED && m->info) json_object_set(d, "info", m->info);
    ob_rt_event(rt, "status_change", m->id, d);
    pthread_cond_broadcast(&rt->cv);
}

void ob_rt_request_load(ob_router *rt, ob_rt_model *m) {
    if (ob_rt_running(m) || m->status == OB_RT_DOWNLOADING || rt->stop) return;
    m->want_load = true;
    m->failed = false;
    m->exit_code = 0;
    m->last_used = ob_time_s();
    set_status(rt, m, OB_RT_LOADING);
}

/* Locked: asks m's child to exit (killed at once while it loads). */
static void begin_stop(ob_rt_model *m) {
    if (m->proc.pid <= 0 || m->stopping) return;
    m->stopping = true;
    if (m->status == OB_RT_LOADING) {
        kill(-m->proc.pid, SIGKILL);
        m->stop_deadline = 0;
        ob_log(OB_LOG_INFO, "router: %s is still loading; killing it", m->id);
        return;
    }
    if (m->proc.in >= 0) close(m->proc.in);
    m->proc.in = -1;
    m->stop_deadline = ob_time_s() + m->stop_timeout_s;
    ob_log(OB_LOG_INFO, "router: stopping %s", m->id);
}

void ob_rt_request_unload(ob_router *rt, ob_rt_model *m) {
    if (m->status == OB_RT_DOWNLOADING) {
        m->cancel = 1;
        return;
    }
    if (m->want_load && m->proc.pid <= 0) { /* not started yet */
        m->want_load = false;
        set_status(rt, m, OB_RT_UNLOADED);
        return;
    }
    begin_stop(m);
}

/* A port of 127.0.0.1 free now (the child binds it a moment later). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (!bind(fd, (struct sockaddr *)&a, sizeof a) && !getsockname(fd, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* Locked: starts m's child. */
static void spawn(ob_router *rt, ob_rt_model *m) {
    m->want_load = false;
    if (m->status != OB_RT_LOADING) set_status(rt, m, OB_RT_LOADING); /* asked while its last child exited */
    ob_rt_strv a = {0};
    char err[512] = "out of memory";
    int port = free_port();
    ob_status st = port > 0 && ob_rt_child_args(rt, m, port, &a) ? OB_OK : OB_ERR_IO;
    if (!st) st = ob_subproc_spawn(&m->proc, a.v, NULL, NULL, OB_SUBPROC_STDIN | OB_SUBPROC_MERGE_ERR, err, sizeof err);
    if (st) {
        ob_rt_strv_free(&a);
        ob_log(OB_LOG_ERROR, "router: cannot start %s: %s", m->id, err);
        m->failed = true;
        m->exit_code = -1;
        set_status(rt, m, OB_RT_UNLOADED);
        return;
    }
    ob_rt_strv_free(&m->args);
    m->args = a;
    m->port = port;
    m->stopping = false;
    m->line_len = 0;
    m->next_health = ob_time_s() + RT_HEALTH_EVERY_S;
    ob_log(OB_LOG_INFO, "router: starting %s on port %d (pid %d)", m->id, port, (int)m->proc.pid);
}

/* Locked: one line of a child's output to our stderr. */
static void emit_line(const ob_rt_model *m, const char *s, size_t n) {
    fprintf(stderr, "[%s] %.*s\n", m->id, (int)n, s);
}

/* Locked: what the child printed, relayed a line at a time (a line longer than the
 * buffer goes out in pieces). */
static void drain(ob_rt_model *m) {
    char buf[4096];
    while (m->proc.out >= 0) {
        ssize_t n = read(m->proc.out, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n <= 0) { /* EOF: every writer closed it */
            close(m->proc.out);
            m->proc.out = -1;
            break;
        }
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == '\n' || m->line_len == sizeof m->line) {
                emit_line(m, m->line, m->line_len);
                m->line_len = 0;
                if (buf[i] == '\n') continue;
            }
            m->line[m->line_len++] = buf[i];
        }
    }
    if (m->line_len) {
        emit_line(m, m->line, m->line_len);
        m->line_len = 0;
    }
}

/* Locked: a child that exited is reaped and reported unloaded. */
static void reap(ob_router *rt, ob_rt_model *m) {
    drain(m);
    ob_subproc_kill(&m->proc); /* what it left in its process group goes too */
    int code = ob_subproc_code(&m->proc);
    bool asked = m->stopping;
    m->failed = !asked && code != 0;
    m->exit_code = code;
    m->stopping = false;
    m->port = 0;
    json_decref(m->info);
    m->info = NULL;
    if (asked) ob_log(OB_LOG_INFO, "router: %s stopped", m->id);
    else ob_log(OB_LOG_WARN, "router: %s exited with code %d", m->id, code);
    set_status(rt, m, OB_RT_UNLOADED);
    if (m->gone) ob_rt_remove(rt, m);
}

/* Locked: starts the loads asked for while there is room, asking the least recently
 * used child to exit when there is not (one at a time). */
static void schedule(ob_router *rt) {
    int max = rt->cfg->models_max, alive = 0;
    bool evicting = false;
    for (int i = 0; i < rt->n_models; i++) {
        alive += rt->models[i]->proc.pid > 0;
        evicting |= rt->models[i]->proc.pid > 0 && rt->models[i]->stopping;
    }
    for (;;) {
        ob_rt_model *next = NULL;
        for (int i = 0; i < rt->n_models; i++) {
            ob_rt_model *m = rt->models[i];
            if (m->want_load && m->proc.pid <= 0 && (!next || m->last_used < next->last_used)) next = m;
        }
        if (!next) return;
        if (max <= 0 || alive < max) {
            spawn(rt, next);
            alive += next->proc.pid > 0;
            continue;
        }
        if (evicting) return; /* room comes when that one has exited */
        ob_rt_model *lru = NULL;
        for (int i = 0; i < rt->n_models; i++) {
            ob_rt_model *m = rt->models[i];
            if (m->proc.pid <= 0 || m->stopping) continue;
            /* a loaded one before one still loading */
            bool better = !lru || (m->status == OB_RT_LOADED && lru->status != OB_RT_LOADED) ||
                          (m->status == lru->status && m->last_used < lru->last_used);
            if (better) lru = m;
        }
        if (!lru) return;
        ob_log(OB_LOG_INFO, "router: --models-max %d reached; unloading the least recently used, %s", max, lru->id);
        begin_stop(lru);
        return;
    }
}

#ifdef ONEBIT_HAVE_CURL
static size_t on_body(char *p, size_t sz, size_t nm, void *ud) {
    size_t n = sz * nm;
    char **buf = ud;
    size_t len = *buf ? strlen(*buf) : 0;
    if (len + n > (1u << 20)) return 0;
    char *b = realloc(*buf, len + n + 1);
    if (!b) return 0;
    memcpy(b + len, p, n);
    b[len + n] = 0;
    *buf = b;
    return n;
}

/* GET http://127.0.0.1:port/path: the status (0: no answer) and the body (malloc'd). */
static long child_get(CURL *c, int port, const char *path, char **body) {
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    *body = NULL;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 2000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
    long status = 0;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

/* Not locked: the starting children's /health; those that answer are loaded. */
static void health_checks(ob_router *rt, CURL *c) {
    enum { MAX_CHECKS = 64 };
    struct { ob_rt_model *m; pid_t pid; int port; } todo[MAX_CHECKS];
    int n = 0;
    double now = ob_time_s();
    pthread_mutex_lock(&rt->mu);
    for (int i = 0; i < rt->n_models && n < MAX_CHECKS; i++) {
        ob_rt_model *m = rt->models[i];
        if (m->status != OB_RT_LOADING || m->proc.pid <= 0 || m->stopping || m->next_health > now) continue;
        m->next_health = now + RT_HEALTH_EVERY_S;
        todo[n].m = m, todo[n].pid = m->proc.pid, todo[n].port = m->port;
        n++;
    }
    pthread_mutex_unlock(&rt->mu);
    /* the models stay: only this thread reaps a child and drops a model that had one */
    for (int k = 0; k < n; k++) {
        char *body = NULL;
        if (child_get(c, todo[k].port, "/health", &body) != 200) {
            free(body);
            continue;
        }
        free(body);
        json_t *info = NULL;
        if (child_get(c, todo[k].port, "/v1/models", &body) == 200 && body) {
            json_t *j = json_loads(body, 0, NULL);
            info = json_incref(json_array_get(json_object_get(j, "data"), 0));
            json_decref(j);
        }
        free(body);
        pthread_mutex_lock(&rt->mu);
        ob_rt_model *m = todo[k].m;
        if (m->proc.pid == todo[k].pid && m->status == OB_RT_LOADING && !m->stopping) {
            json_decref(m->info);
            m->info = info;
            info = NULL;
            m->last_used = ob_time_s();
            ob_log(OB_LOG_INFO, "router: %s is ready on port %d", m->id, m->port);
            set_status(rt, m, OB_RT_LOADED);
        }
        pthread_mutex_unlock(&rt->mu);
        json_decref(info);
    }
}
#endif

void *ob_rt_monitor_main(void *arg) {
    ob_router *rt = arg;
#ifdef ONEBIT_HAVE_CURL
    CURL *c = curl_easy_init();
#endif
    enum { MAX_FDS = 256 };
    struct pollfd pf[MAX_FDS];
    for (;;) {
        int n = 0;
        bool alive = false;
        pthread_mutex_lock(&rt->mu);
        pf[n++] = (struct pollfd){.fd = rt->wake[0], .events = POLLIN};
        for (int i = 0; i < rt->n_models; i++) {
            ob_rt_model *m = rt->models[i];
            alive |= m->proc.pid > 0;
            if (m->proc.pid > 0 && m->proc.out >= 0 && n < MAX_FDS)
                pf[n++] = (struct pollfd){.fd = m->proc.out, .events = POLLIN};
        }
        bool stop = rt->stop;
        pthread_mutex_unlock(&rt->mu);
        if (stop && !alive) break;
        poll(pf, (nfds_t)n, RT_POLL_MS);
        char junk[64];
        while (read(rt->wake[0], junk, sizeof junk) > 0) {}

        pthread_mutex_lock(&rt->mu);
        double now = ob_time_s();
        for (int i = rt->n_models - 1; i >= 0; i--) {
            ob_rt_model *m = rt->models[i];
            if (rt->stop) {
                m->want_load = false;
                if (m->status == OB_RT_LOADING && m->proc.pid <= 0) set_status(rt, m, OB_RT_UNLOADED);
                begin_stop(m);
            }
            if (m->proc.pid <= 0) continue;
            drain(m);
            if (ob_subproc_exited(&m->proc)) {
                reap(rt, m);
                continue;
            }
            if (m->stopping && now >= m->stop_deadline) {
                if (m->stop_deadline > 0) ob_log(OB_LOG_WARN, "router: %s did not stop in %d s; killing it", m->id,
                                                 m->stop_timeout_s);
                kill(-m->proc.pid, SIGKILL);
                kill(m->proc.pid, SIGKILL);
                m->stop_deadline = now + 3600; /* reaped once it is gone */
            }
        }
        if (!rt->stop) schedule(rt);
        pthread_mutex_unlock(&rt->mu);
#ifdef ONEBIT_HAVE_CURL
        if (c && !stop) health_checks(rt, c);
#endif
    }
#ifdef ONEBIT_HAVE_CURL
    curl_easy_cleanup(c);
#endif
    return NULL;
}
