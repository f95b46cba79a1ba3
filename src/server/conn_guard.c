/* A deadline for request headers. libmicrohttpd's connection timeout is an idle timeout:
 * a client that sends one header byte every few seconds holds its connection (and, with a
 * thread per connection, a thread) for as long as it likes, and about a thousand such
 * clients lock everyone out. Here every connection gets a deadline by which its next
 * request's headers must be complete (set when the connection opens and again after each
 * reply); a watchdog thread shuts the socket of a connection past it, which ends the
 * connection in its own thread. Entries live from MHD's "started" notification to its
 * "closed" one, under one lock; the socket is closed only after "closed", so a shut-down
 * descriptor is always still this connection's. */
#include "server/server.h"

#ifdef ONEBIT_HAVE_MHD
#include <microhttpd.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "core/common.h"

typedef struct guard_conn {
    int fd;
    double deadline;          /* seconds (ob_time_s); 0: headers complete, not watched */
    struct guard_conn *prev, *next;
} guard_conn;

struct ob_conn_guard {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool stop;
    double limit_s;
    guard_conn *head;
    unsigned long n_cut;      /* connections ended at the deadline */
};

static void *watch(void *arg) {
    ob_conn_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        double now = ob_time_s();
        for (guard_conn *e = g->head; e; e = e->next) {
            if (e->deadline > 0 && now > e->deadline) {
                shutdown(e->fd, SHUT_RDWR);
                e->deadline = 0;
                g->n_cut++;
            }
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

ob_conn_guard *ob_conn_guard_new(double limit_s) {
    ob_conn_guard *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->limit_s = limit_s;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (pthread_create(&g->thread, NULL, watch, g)) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return NULL;
    }
    return g;
}

void ob_conn_guard_free(ob_conn_guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    while (g->head) {
        guard_conn *e = g->head;
        g->head = e->next;
        free(e);
    }
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

void ob_conn_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe) {
    ob_conn_guard *g = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        guard_conn *e = ci ? calloc(1, sizeof *e) : NULL;
        *socket_context = e;
        if (!e) return;
        e->fd = ci->connect_fd;
        pthread_mutex_lock(&g->mu);
        e->deadline = ob_time_s() + g->limit_s;
        e->next = g->head;
        if (g->head) g->head->prev = e;
        g->head = e;
        pthread_mutex_unlock(&g->mu);
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        guard_conn *e = *socket_context;
        if (!e) return;
        pthread_mutex_lock(&g->mu);
        if (e->prev) e->prev->next = e->next;
        else g->head = e->next;
        if (e->next) e->next->prev = e->prev;
        pthread_mutex_unlock(&g->mu);
        free(e);
        *socket_context = NULL;
    }
}

/* headers_done: the request's headers are in (stop watching) or its reply went out (the
 * next request's headers are due by a new deadline). */
void ob_conn_guard_mark(ob_conn_guard *g, struct MHD_Connection *c, bool headers_done) {
    if (!g) return;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    guard_conn *e = ci ? ci->socket_context : NULL;
    if (!e) return;
    pthread_mutex_lock(&g->mu);
    e->deadline = headers_done ? 0 : ob_time_s() + g->limit_s;
    pthread_mutex_unlock(&g->mu);
}

unsigned long ob_conn_guard_cut(ob_conn_guard *g) {
    if (!g) return 0;
    pthread_mutex_lock(&g->mu);
    unsigned long n = g->n_cut;
    pthread_mutex_unlock(&g->mu);
    return n;
}
#endif
