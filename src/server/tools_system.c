/* The tools that run things or ask the system: exec_shell_command (whole, or streamed as
 * it prints), get_datetime, get_info.
 *
 * exec_shell_command runs `sh -c command` in the tool's cwd with stdout and stderr
 * together: at most 60 s (default 10) and 16 KiB of output (more is read and dropped so
 * the command never blocks on a full pipe). Its process group is killed when it ends, so
 * nothing it put in the background outlives the call. */
#include "server/agent.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "core/common.h"
#include "server/gen.h"

#define EXEC_MAX_OUT (16 * 1024)
#define EXEC_MAX_S 60
#define EXEC_DEFAULT_S 10

typedef struct exec_args {
    const char *command;
    int timeout_s;
    size_t max_out;
} exec_args;

static bool exec_read_args(json_t *p, exec_args *a, char *bad, size_t bad_len) {
    long long t = EXEC_DEFAULT_S, m = EXEC_MAX_OUT;
    if (!ob_tool_str(p, "command", true, &a->command, bad, bad_len) || !ob_tool_int(p, "timeout", &t, bad, bad_len) ||
        !ob_tool_int(p, "max_output_size", &m, bad, bad_len))
        return false;
    a->timeout_s = (int)OB_MAX(1, OB_MIN(t, EXEC_MAX_S));
    a->max_out = (size_t)OB_MAX(1, OB_MIN(m, EXEC_MAX_OUT));
    return true;
}

/* What follows the output: "[exit code: N]", and why it ended early. */
static void exec_tail(char *buf, size_t n, bool truncated, int code, bool timed_out) {
    snprintf(buf, n, "%s\n[exit code: %d]%s", truncated ? "\n[output truncated]" : "", code,
             timed_out ? " [exit due to timed out]" : "");
}

json_t *ob_tool_exec(json_t *p, const ob_tool_ctx *c, char *bad, size_t bad_len) {
    exec_args a;
    if (!exec_read_args(p, &a, bad, bad_len)) return NULL;
    char *argv[] = {"sh", "-c", (char *)a.command, NULL};
    ob_subproc_result r;
    char err[512];
    if (ob_subproc_run(argv, c->cwd, a.max_out, a.timeout_s * 1000, c->stop, &r, err, sizeof err) != OB_OK)
        return ob_tool_error("%s", err);
    char tail[128];
    exec_tail(tail, sizeof tail, r.truncated, r.code, r.timed_out);
    ob_srv_buf_add(&r.out, &r.len, tail, strlen(tail));
    json_t *res = json_object();
    json_object_set_new(res, "plain_text_response", ob_srv_jstr(r.out, r.len));
    free(r.out);
    return res;
}

/* ---- streamed: one {"chunk"} event per read, then the tail, then {"done": true} ------- */

typedef struct exec_stream {
    ob_stream base;
    ob_subproc p;
    const volatile int *stop;
    double deadline, quiet_until;
    size_t max_out, sent;
    bool truncated, timed_out, ended;
    char hold[4];        /* the start of a UTF-8 sequence that the next read completes */
    size_t n_hold;
    char err[512];       /* the command could not start: the final event says why */
} exec_stream;

static void sse_chunk(char **buf, size_t *len, const char *s, size_t n) {
    json_t *o = json_object();
    json_object_set_new(o, "chunk", ob_srv_jstr(s, n));
    ob_srv_sse(buf, len, NULL, o);
}

static int exec_next(ob_stream *st, char **buf, size_t *len) {
    exec_stream *x = (exec_stream *)st;
    if (x->ended) return 0;
    char rd[4096 + 4];
    for (;;) {
        if ((x->stop && *x->stop) || ob_srv_client_gone(st->fd)) return -1; /* close() kills it */
        double now = ob_time_s();
        bool done = false;
        if (now >= x->deadline) {
            x->timed_out = true;
            done = true;
        } else {
            if (x->quiet_until == 0 && ob_subproc_exited(&x->p)) x->quiet_until = now + 0.2;
            if (x->quiet_until > 0 && now >= x->quiet_until) done = true;
        }
        if (!done) {
            struct pollfd pf = {.fd = x->p.out, .events = POLLIN};
            int pr = poll(&pf, 1, 100);
            if (pr < 0 && errno != EINTR) done = true;
            if (pr <= 0 && !done) continue;
            memcpy(rd, x->hold, x->n_hold);
            ssize_t n = done ? 0 : read(x->p.out, rd + x->n_hold, sizeof rd - 4);
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (n > 0) {
                size_t have = x->n_hold + (size_t)n, keep = have;
                if (x->sent + keep > x->max_out) {
                    keep = x->max_out - x->sent;
                    x->truncated = true;
                }
                size_t whole = keep == have ? ob_utf8_complete(rd, keep) : keep;
                x->n_hold = keep - whole;
                memcpy(x->hold, rd + whole, x->n_hold);
                x->sent += whole;
                if (whole == 0) continue;
                sse_chunk(buf, len, rd, whole);
                return 1;
            }
            done = true; /* EOF or a read error */
        }
        /* the command ended (or ran out of time): its exit code, then done */
        if (!x->timed_out) {
            while (!ob_subproc_exited(&x->p) && ob_time_s() < x->deadline && !(x->stop && *x->stop)) {
                struct timespec ts = {0, 10 * 1000000L};
                nanosleep(&ts, NULL);
            }
            x->timed_out = !ob_subproc_exited(&x->p);
        }
        ob_subproc_kill(&x->p);
        char tail[128];
        exec_tail(tail, sizeof tail, x->truncated, ob_subproc_code(&x->p), x->timed_out);
        if (x->n_hold) sse_chunk(buf, len, x->hold, x->n_hold);
        sse_chunk(buf, len, tail, strlen(tail));
        ob_srv_sse(buf, len, NULL, json_pack("{s:b}", "done", 1));
        x->ended = true;
        return 0;
    }
}

static void exec_close(ob_stream *st) {
    exec_stream *x = (exec_stream *)st;
    ob_subproc_kill(&x->p);
    free(x);
}

/* A stream that only says the call failed. */
static int failed_next(ob_stream *st, char **buf, size_t *len) {
    exec_stream *x = (exec_stream *)st;
    if (!x->ended) ob_srv_sse(buf, len, NULL, json_pack("{s:b,s:o}", "done", 1, "error", ob_srv_jstr(x->err, strlen(x->err))));
    x->ended = true;
    return 0;
}

ob_stream *ob_tool_exec_stream(json_t *p, const ob_tool_ctx *c, int client_fd, char *bad, size_t bad_len) {
    exec_args a;
    if (!exec_read_args(p, &a, bad, bad_len)) return NULL;
    exec_stream *x = calloc(1, sizeof *x);
    if (!x) {
        snprintf(bad, bad_len, "out of memory");
        return NULL;
    }
    x->base.next = exec_next;
    x->base.close = exec_close;
    x->base.fd = client_fd;
    x->stop = c->stop;
    x->max_out = a.max_out;
    x->deadline = ob_time_s() + a.timeout_s;
    char *argv[] = {"sh", "-c", (char *)a.command, NULL};
    if (ob_subproc_spawn(&x->p, argv, NULL, c->cwd, OB_SUBPROC_MERGE_ERR, x->err, sizeof x->err) != OB_OK) {
        /* the error goes in the final event, as a call that throws does in llama-server */
        x->base.next = failed_next;
        x->p.pid = -1;
    }
    return &x->base;
}

/* ---- get_datetime, get_info ------------------------------------------------------- */

json_t *ob_tool_get_datetime(json_t *p, const ob_tool_ctx *c, char *bad, size_t bad_len) {
    const char *fmt = "%Y-%m-%dT%H:%M:%SZ";
    if (!ob_tool_str(p, "format", false, &fmt, bad, bad_len)) return NULL;
    if (strlen(fmt) > 256) return ob_tool_error("format string too long (at most 256 characters)");
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char out[1024];
    size_t n = strftime(out, sizeof out, fmt, &tm);
    if (n == 0) return ob_tool_error("invalid format string");
    return json_pack("{s:o}", "result", ob_srv_jstr(out, n));
}

json_t *ob_tool_get_info(json_t *p, const ob_tool_ctx *c, char *bad, size_t bad_len) {
    struct utsname u;
    char os[5 * sizeof u.sysname + 8] = "unknown", cwd[4096];
    if (uname(&u) == 0) snprintf(os, sizeof os, "%s %s %s %s %s", u.sysname, u.nodename, u.release, u.version, u.machine);
    const char *wd = c->cwd ? c->cwd : getcwd(cwd, sizeof cwd);
    return json_pack("{s:o,s:o}", "os", ob_srv_jstr(os, strlen(os)), "cwd", ob_srv_jstr(wd ? wd : "", wd ? strlen(wd) : 0));
}
