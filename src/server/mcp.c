/* The MCP client: servers started as child processes, JSON-RPC 2.0 over their stdin and
 * stdout, one message a line (the protocol's stdio transport). Config: the Cursor /
 * Claude Desktop shape, {"mcpServers": {name: {"command", "args", "env", "cwd",
 * "timeout_ms"}}}.
 *
 * Each server is one process, started at warm-up (initialize, notifications/initialized,
 * tools/list) and kept for the calls; calls to one server take turns (its mutex), calls
 * to different servers run at once. A caller holding the mutex reads the child's stdout
 * itself, in 50 ms slices (no reader thread): lines that are notifications, replies to
 * other ids or not JSON are skipped, a ping from the server is answered. A server that
 * died is started again by the next call (one that cannot start is not tried again for
 * 5 s). A call that times out (timeout_ms, default 30 s) kills the process: a server in
 * an unknown state is not reused. The child's stderr goes to the server's log. */
#include "server/agent.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/common.h"

#define MCP_MAX_SERVERS 64
#define MCP_MAX_TOOLS 1024       /* per server */
#define MCP_MAX_LINE (8u << 20)  /* a longer message is dropped */
#define MCP_WARMUP_S 10.0
#define MCP_RETRY_S 5.0
#define MCP_PROTOCOL "2024-11-05"

extern char **environ;

typedef struct mcp_server {
    char *name;
    char **argv;             /* command, args..., NULL */
    char **envp;             /* NULL: ours; else ours with the config's env over it */
    char *cwd;
    int timeout_ms;
    pthread_mutex_t mu;      /* one call at a time; guards everything below */
    ob_subproc proc;
    bool up, ready;          /* running; initialized */
    json_int_t next_id;
    char *rbuf;              /* bytes read from its stdout, not yet a whole line */
    size_t rlen, rcap;
    bool skipping;           /* dropping an over-long line up to its end */
    double retry_at;         /* could not start: not before this time */
} mcp_server;

struct ob_mcp {
    mcp_server *s;
    int n;
    json_t *tools;
    const volatile int *stop;
};

/* ---- config ------------------------------------------------------------------------ */

static void free_strv(char **v) {
    for (size_t i = 0; v && v[i]; i++) free(v[i]);
    free(v);
}

/* Our environment with the config's variables over it, built once at start. */
static char **build_env(json_t *env) {
    size_t n = 0, k = 0;
    while (environ[n]) n++;
    char **e = calloc(n + json_object_size(env) + 1, sizeof *e);
    if (!e) return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t kl = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        char key[256];
        if (kl < sizeof key) {
            memcpy(key, environ[i], kl);
            key[kl] = 0;
            if (json_object_get(env, key)) continue;
        }
        e[k++] = strdup(environ[i]);
    }
    const char *key;
    json_t *v;
    json_object_foreach(env, key, v) {
        size_t l = strlen(key) + json_string_length(v) + 2;
        if ((e[k] = malloc(l)) != NULL) snprintf(e[k++], l, "%s=%s", key, json_string_value(v));
    }
    return e;
}

static ob_status add_servers(ob_mcp *m, const char *text, size_t len, const char *what, bool quiet, char *err,
                             size_t err_len) {
    enum ob_log_level warn = quiet ? OB_LOG_DEBUG : OB_LOG_WARN;
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!root)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", what, je.line, je.column, je.text);
    json_t *servers = json_object_get(root, "mcpServers");
    ob_status st = OB_OK;
    if (!json_is_object(servers) || json_object_size(servers) == 0)
        ob_log(warn, "serve: MCP config %s: no servers in \"mcpServers\"", what);
    const char *name;
    json_t *c;
    json_object_foreach(servers, name, c) {
        const char *cmd = json_string_value(json_object_get(c, "command"));
        json_t *args = json_object_get(c, "args"), *env = json_object_get(c, "env"), *to = json_object_get(c, "timeout_ms");
        const char *cwd = json_string_value(json_object_get(c, "cwd"));
        bool dup = false;
        for (int i = 0; i < m->n; i++) dup |= !strcmp(m->s[i].name, name);
        if (!json_is_object(c) || !cmd || !*cmd) {
            /* HTTP and SSE servers (a "url") need a transport this client lacks */
            ob_log(warn, "serve: MCP server '%s' has no command (only stdio servers are supported), skipped", name);
            continue;
        }
        if (dup) {
            ob_log(warn, "serve: MCP server '%s' is configured twice, the second is skipped", name);
            continue;
        }
        bool args_ok = !args || json_is_array(args), env_ok = !env || json_is_object(env);
        size_t i;
        json_t *v;
        json_array_foreach(args_ok ? args : NULL, i, v) args_ok &= json_is_string(v);
        const char *k;
        json_object_foreach(env_ok ? env : NULL, k, v) env_ok &= json_is_string(v);
        if (!args_ok || !env_ok || (to && !json_is_integer(to)) || (json_object_get(c, "cwd") && !cwd)) {
            st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: MCP server '%s': args must be an array of strings, env an "
                         "object of strings, cwd a string, timeout_ms an integer", what, name);
            break;
        }
        if (m->n == MCP_MAX_SERVERS) {
            st = ob_fail(err, err_len, OB_ERR_ARG, "%s: more than %d MCP servers", what, MCP_MAX_SERVERS);
            break;
        }
        mcp_server *s = &m->s[m->n];
        memset(s, 0, sizeof *s);
        s->name = strdup(name);
        s->argv = calloc(json_array_size(args) + 2, sizeof *s->argv);
        if (s->argv) s->argv[0] = strdup(cmd);
        json_array_foreach(args, i, v) if (s->argv) s->argv[i + 1] = strdup(json_string_value(v));
        s->envp = json_object_size(env) ? build_env(env) : NULL;
        s->cwd = cwd ? strdup(cwd) : NULL;
        s->timeout_ms = to ? (int)OB_MAX(1, OB_MIN(json_integer_value(to), 3600000)) : 30000;
        s->proc.pid = -1;
        s->proc.in = s->proc.out = -1;
        s->next_id = 1;
        pthread_mutex_init(&s->mu, NULL);
        m->n++;
        if (!s->name || !s->argv || !s->argv[0] || (json_object_size(env) && !s->envp)) {
            st = ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
            break;
        }
    }
    json_decref(root);
    return st;
}

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0;
    *n = 0;
    for (;;) {
        if (*n == cap) {
            if (cap >= (16u << 20)) break; /* 16 MiB of config is not a config */
            char *t = realloc(buf, cap = cap ? cap * 2 : 4096);
            if (!t) break;
            buf = t;
        }
        size_t k = fread(buf + *n, 1, cap - *n, f);
        if (k == 0) break;
        *n += k;
    }
    bool ok = !ferror(f) && *n < cap;
    fclose(f);
    if (!ok) {
        free(buf);
        return NULL;
    }
    return buf;
}

ob_status ob_mcp_new(const char *file, const char *json_text, bool quiet, const volatile int *stop, ob_mcp **out,
                     char *err, size_t err_len) {
    *out = NULL;
    if (!file && !json_text) return OB_OK;
    ob_mcp *m = calloc(1, sizeof *m);
    if (!m || !(m->s = calloc(MCP_MAX_SERVERS, sizeof *m->s)) || !(m->tools = json_array())) {
        ob_mcp_free(m);
        return ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
    }
    m->stop = stop;
    ob_status st = OB_OK;
    if (file) {
        size_t n;
        char *text = read_file(file, &n);
        if (!text) st = ob_fail(err, err_len, OB_ERR_IO, "--mcp-servers-config: cannot read '%s'", file);
        else st = add_servers(m, text, n, file, quiet, err, err_len);
        free(text);
    }
    if (st == OB_OK && json_text)
        st = add_servers(m, json_text, strlen(json_text), "--mcp-servers-json", quiet, err, err_len);
    if (st != OB_OK || m->n == 0) {
        ob_mcp_free(m);
        return st;
    }
    *out = m;
    return OB_OK;
}

/* ---- one server's messages --------------------------------------------------------- */

static void server_down(mcp_server *s) {
    ob_subproc_kill(&s->proc);
    s->up = s->ready = false;
    s->rlen = 0;
    s->skipping = false;
}

static bool server_up(ob_mcp *m, mcp_server *s, char *why, size_t why_len) {
    if (s->up && !ob_subproc_exited(&s->proc)) return true;
    if (s->up) {
        server_down(s);
        ob_log(OB_LOG_WARN, "serve: MCP server '%s' exited (code %d), starting it again", s->name,
               ob_subproc_code(&s->proc));
    }
    if (ob_time_s() < s->retry_at) {
        snprintf(why, why_len, "MCP server unavailable: %s", s->name);
        return false;
    }
    char err[512];
    if (ob_subproc_spawn(&s->proc, s->argv, s->envp, s->cwd, OB_SUBPROC_STDIN, err, sizeof err) != OB_OK) {
        ob_log(OB_LOG_WARN, "serve: MCP server '%s': %s", s->name, err);
        snprintf(why, why_len, "MCP server unavailable: %.100s (%.300s)", s->name, err);
        s->retry_at = ob_time_s() + MCP_RETRY_S;
        return false;
    }
    s->up = true;
    s->ready = false;
    s->next_id = 1;
    s->rlen = 0;
    return true;
}

/* Writes one message and its newline; false if the child is gone, the time is up or the
 * server stops. */
static bool send_msg(ob_mcp *m, mcp_server *s, json_t *msg, double deadline) {
    char *text = json_dumps(msg, JSON_COMPACT);
    if (!text) return false;
    size_t n = strlen(text), off = 0;
    text[n++] = '\n'; /* json_dumps' NUL becomes the newline; nothing reads past n */
    bool ok = true;
    while (off < n && ok) {
        ssize_t w = write(s->proc.in, text + off, n - off);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR) ok = false;
        else if ((m->stop && *m->stop) || ob_time_s() >= deadline) ok = false;
        else {
            struct pollfd pf = {.fd = s->proc.in, .events = POLLOUT};
            poll(&pf, 1, 50);
        }
    }
    free(text);
    return ok;
}

/* The next whole line from the child's stdout, or NULL with *why (timed out, cancelled,
 * closed). */
static char *next_line(ob_mcp *m, mcp_server *s, double deadline, const char **why) {
    for (;;) {
        char *nl = s->rlen ? memchr(s->rbuf, '\n', s->rlen) : NULL;
        if (nl) {
            size_t l = (size_t)(nl - s->rbuf);
            char *line = s->skipping ? NULL : strndup(s->rbuf, l);
            memmove(s->rbuf, nl + 1, s->rlen - l - 1);
            s->rlen -= l + 1;
            if (s->skipping) {
                s->skipping = false;
                continue;
            }
            return line;
        }
        if (s->rlen > MCP_MAX_LINE) {
            ob_log(OB_LOG_WARN, "serve: MCP server '%s' sent a line over %u bytes, dropped", s->name, MCP_MAX_LINE);
            s->rlen = 0;
            s->skipping = true;
        }
        if (m->stop && *m->stop) {
            *why = "cancelled";
            return NULL;
        }
        if (ob_time_s() >= deadline) {
            *why = "request timed out";
            return NULL;
        }
        struct pollfd pf = {.fd = s->proc.out, .events = POLLIN};
        int pr = poll(&pf, 1, 50);
        if (pr == 0 && ob_subproc_exited(&s->proc)) {
            /* no EOF when something the server started still holds its stdout */
            *why = "transport closed (the server exited)";
            return NULL;
        }
        if (pr <= 0) continue;
        if (s->rcap - s->rlen < 65536) {
            char *t = realloc(s->rbuf, s->rcap + 65536);
            if (!t) {
                *why = "out of memory";
                return NULL;
            }
            s->rbuf = t;
            s->rcap += 65536;
        }
        ssize_t r = read(s->proc.out, s->rbuf + s->rlen, s->rcap - s->rlen);
        if (r > 0) s->rlen += (size_t)r;
        else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
            *why = "transport closed";
            return NULL;
        }
    }
}

/* Sends a request and waits for the reply with its id; NULL with why filled. On a time
 * out or a closed pipe the process is killed: its state is unknown. */
static json_t *rpc(ob_mcp *m, mcp_server *s, const char *method, json_t *params, double deadline, char *why,
                   size_t why_len) {
    json_int_t id = s->next_id++;
    json_t *req = json_pack("{s:s,s:I,s:s}", "jsonrpc", "2.0", "id", id, "method", method);
    if (params) json_object_set(req, "params", params);
    bool sent = send_msg(m, s, req, deadline);
    json_decref(req);
    if (!sent) {
        snprintf(why, why_len, "%s", (m->stop && *m->stop) ? "cancelled" : "transport closed");
        server_down(s);
        return NULL;
    }
    for (;;) {
        const char *w = NULL;
        char *line = next_line(m, s, deadline, &w);
        if (!line) {
            snprintf(why, why_len, "%s", w);
            ob_log(OB_LOG_WARN, "serve: MCP server '%s': %s: %s", s->name, method, w);
            server_down(s);
            return NULL;
        }
        json_t *msg = json_loads(line, 0, NULL);
        free(line);
        if (!json_is_object(msg)) {
            json_decref(msg);
            continue;
        }
        json_t *mid = json_object_get(msg, "id");
        const char *mm = json_string_value(json_object_get(msg, "method"));
        if (mm && mid) {
            /* the server asks something of us: a ping is answered, anything else refused */
            json_t *ans = !strcmp(mm, "ping")
                              ? json_pack("{s:s,s:O,s:{}}", "jsonrpc", "2.0", "id", mid, "result")
                              : json_pack("{s:s,s:O,s:{s:i,s:s}}", "jsonrpc", "2.0", "id", mid, "error", "code", -32601,
                                          "message", "method not supported by this client");
            send_msg(m, s, ans, deadline);
            json_decref(ans);
        } else if (json_is_integer(mid) && json_integer_value(mid) == id) {
            return msg;
        }
        json_decref(msg); /* a notification, or the late reply to a request given up on */
    }
}

static const char *rpc_error(json_t *reply) {
    json_t *e = json_object_get(reply, "error");
    const char *msg = json_string_value(json_object_get(e, "message"));
    return msg ? msg : json_is_string(e) ? json_string_value(e) : "unknown error";
}

/* initialize + notifications/initialized, once per process. */
static bool server_ready(ob_mcp *m, mcp_server *s, double deadline, char *why, size_t why_len) {
    if (!server_up(m, s, why, why_len)) return false;
    if (s->ready) return true;
    json_t *params = json_pack("{s:s,s:{},s:{s:s,s:s}}", "protocolVersion", MCP_PROTOCOL, "capabilities", "clientInfo",
                               "name", "onebit", "version", "1.0");
    json_t *rep = rpc(m, s, "initialize", params, deadline, why, why_len);
    json_decref(params);
    if (rep && !json_object_get(rep, "result")) {
        snprintf(why, why_len, "initialize failed: %s", rpc_error(rep));
        json_decref(rep);
        server_down(s);
        return false;
    }
    if (!rep) {
        char w[256];
        snprintf(w, sizeof w, "%s", why);
        snprintf(why, why_len, "initialize failed: %s", w);
        return false;
    }
    json_decref(rep);
    json_t *note = json_pack("{s:s,s:s}", "jsonrpc", "2.0", "method", "notifications/initialized");
    bool ok = send_msg(m, s, note, deadline);
    json_decref(note);
    if (!ok) {
        snprintf(why, why_len, "initialize failed: transport closed");
        server_down(s);
        return false;
    }
    s->ready = true;
    return true;
}

/* ---- warm-up and calls --------------------------------------------------------------- */

static void list_tools(ob_mcp *m, mcp_server *s) {
    double deadline = ob_time_s() + MCP_WARMUP_S;
    char why[512];
    pthread_mutex_lock(&s->mu);
    if (!server_ready(m, s, deadline, why, sizeof why)) {
        ob_log(OB_LOG_WARN, "serve: MCP server '%s' left out: %s", s->name, why);
        pthread_mutex_unlock(&s->mu);
        return;
    }
    size_t found = 0;
    json_t *cursor = NULL;
    for (int page = 0; page < 100; page++) {
        json_t *params = cursor ? json_pack("{s:O}", "cursor", cursor) : NULL;
        json_t *rep = rpc(m, s, "tools/list", params, deadline, why, sizeof why);
        json_decref(params);
        json_decref(cursor);
        cursor = NULL;
        json_t *res = json_object_get(rep, "result");
        if (!res) {
            ob_log(OB_LOG_WARN, "serve: MCP server '%s': tools/list failed: %s", s->name, rep ? rpc_error(rep) : why);
            json_decref(rep);
            break;
        }
        size_t i;
        json_t *t;
        json_array_foreach(json_object_get(res, "tools"), i, t) {
            const char *name = json_string_value(json_object_get(t, "name"));
            if (!name || !*name || found == MCP_MAX_TOOLS) continue;
            const char *desc = json_string_value(json_object_get(t, "description"));
            json_t *schema = json_object_get(t, "inputSchema");
            /* a tool without a schema takes no arguments */
            schema = json_is_object(schema) ? json_incref(schema) : json_pack("{s:s,s:{}}", "type", "object", "properties");
            json_t *ro = json_object_get(json_object_get(t, "annotations"), "readOnlyHint");
            json_array_append_new(m->tools, json_pack("{s:s,s:s,s:s,s:o,s:b}", "server", s->name, "name", name,
                                                      "description", desc ? desc : "", "inputSchema", schema,
                                                      "readOnly", json_is_true(ro)));
            found++;
        }
        json_t *next = json_object_get(res, "nextCursor");
        if (json_is_string(next)) cursor = json_incref(next);
        json_decref(rep);
        if (!cursor) break;
    }
    json_decref(cursor);
    pthread_mutex_unlock(&s->mu);
    ob_log(OB_LOG_INFO, "serve: MCP server '%s': %zu tools", s->name, found);
}

void ob_mcp_warmup(ob_mcp *m) {
    for (int i = 0; i < m->n && !(m->stop && *m->stop); i++) list_tools(m, &m->s[i]);
}

json_t *ob_mcp_tools(ob_mcp *m) { return m ? m->tools : NULL; }

/* The tool's result as /tools gives it: its text parts joined by newlines; isError
 * makes it an error. */
static json_t *tool_result(json_t *res) {
    char *text = NULL;
    size_t n = 0;
    size_t i;
    json_t *part;
    json_array_foreach(json_object_get(res, "content"), i, part) {
        const char *t = json_string_value(json_object_get(part, "text"));
        const char *type = json_string_value(json_object_get(part, "type"));
        if (!t || !type || strcmp(type, "text")) continue; /* images and resources are not passed on */
        if (n) ob_srv_buf_add(&text, &n, "\n", 1);
        ob_srv_buf_add(&text, &n, t, json_string_length(json_object_get(part, "text")));
    }
    json_t *out;
    if (json_is_true(json_object_get(res, "isError"))) out = n ? ob_tool_error("%s", text) : ob_tool_error("MCP tool returned an error");
    else out = json_pack("{s:o}", "plain_text_response", ob_srv_jstr(text ? text : "", n));
    free(text);
    return out;
}

json_t *ob_mcp_call(ob_mcp *m, const char *server, const char *tool, json_t *args) {
    mcp_server *s = NULL;
    for (int i = 0; m && i < m->n; i++)
        if (!strcmp(m->s[i].name, server)) s = &m->s[i];
    if (!s) return ob_tool_error("MCP server unavailable: %s", server);
    if (m->stop && *m->stop) return ob_tool_error("cancelled: the server is stopping");
    char why[512];
    json_t *out;
    pthread_mutex_lock(&s->mu);
    double deadline = ob_time_s() + s->timeout_ms / 1e3;
    if (!server_ready(m, s, deadline, why, sizeof why)) {
        out = ob_tool_error("%s", why);
    } else {
        json_t *params = json_pack("{s:s,s:O}", "name", tool, "arguments", args);
        json_t *rep = rpc(m, s, "tools/call", params, deadline, why, sizeof why);
        json_decref(params);
        json_t *res = json_object_get(rep, "result");
        if (!rep) out = ob_tool_error("%s", why);
        else if (json_object_get(rep, "error")) out = ob_tool_error("%s", rpc_error(rep));
        else if (!json_is_object(res)) out = ob_tool_error("invalid response from MCP server");
        else out = tool_result(res);
        json_decref(rep);
    }
    pthread_mutex_unlock(&s->mu);
    return out;
}

void ob_mcp_free(ob_mcp *m) {
    if (!m) return;
    for (int i = 0; m->s && i < m->n; i++) {
        mcp_server *s = &m->s[i];
        pthread_mutex_lock(&s->mu); /* calls in flight give up within 50 ms of *stop */
        server_down(s);
        pthread_mutex_unlock(&s->mu);
        pthread_mutex_destroy(&s->mu);
        free(s->name);
        free_strv(s->argv);
        free_strv(s->envp);
        free(s->cwd);
        free(s->rbuf);
    }
    free(m->s);
    json_decref(m->tools);
    free(m);
}
