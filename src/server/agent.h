/* The agent features of llama-server's web UI, behind explicit flags and off by default:
 * built-in tools (--tools, GET/POST /tools), MCP servers (--mcp-servers-json/-config,
 * their tools in /tools as <server>_<tool>) and the CORS proxy (--ui-mcp-proxy,
 * /cors-proxy). Internal to src/server: agent.c (state, routes), tools.c (the /tools
 * API), tools_files.c, tools_search.c, tools_system.c (the built-in tools), subproc.c
 * (child processes), mcp.c (the MCP client), proxy.c (the CORS proxy).
 *
 * Threads: each request runs on its connection's thread (http.c); a tool call blocks only
 * its own request. Everything that waits (a command, an MCP reply, a proxied transfer)
 * waits in slices of at most 100 ms and gives up once `stop` is set, so the server can
 * stop while calls are in flight. */
#ifndef OB_SERVER_AGENT_H
#define OB_SERVER_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <jansson.h>

#include "server/server.h"

/* ---- subproc.c: child processes ------------------------------------------------------ */

/* A child in a process group of its own (so a kill reaches what it started), with the
 * default signal dispositions and an empty signal mask whatever the server's. */
typedef struct ob_subproc {
    pid_t pid;   /* > 0 until reaped */
    int in;      /* write end of its stdin, or -1 (stdin is /dev/null) */
    int out;     /* read end of its stdout (and stderr when merged), non-blocking */
    int status;  /* wait status, once reaped */
} ob_subproc;

enum {
    OB_SUBPROC_STDIN = 1,      /* give the child a stdin pipe (else /dev/null) */
    OB_SUBPROC_MERGE_ERR = 2,  /* its stderr goes to the stdout pipe (else to ours) */
};

/* argv[0] is searched in PATH; envp NULL: our environment; cwd NULL: ours. */
ob_status ob_subproc_spawn(ob_subproc *p, char *const argv[], char *const envp[], const char *cwd, int flags,
                           char *err, size_t err_len);
/* Has the child exited? (It is left for ob_subproc_kill to reap.) */
bool ob_subproc_exited(const ob_subproc *p);
/* SIGKILL to the child's process group, closes the pipes, reaps. Safe to call twice. */
void ob_subproc_kill(ob_subproc *p);
/* The reaped child's exit code; 128 + N for a child killed by signal N. */
int ob_subproc_code(const ob_subproc *p);

/* A command run to completion with bounded output and time. */
typedef struct ob_subproc_result {
    char *out;          /* malloc'd, NUL-terminated, at most max_out bytes */
    size_t len;
    bool truncated;     /* there was more output than max_out */
    bool timed_out;     /* killed at the time limit */
    bool stopped;       /* killed because *stop was set */
    int code;
} ob_subproc_result;
/* Stdout and stderr together; the child's process group is killed once it exits (so
 * nothing it left behind outlives the call), at timeout_ms or when *stop is set. */
ob_status ob_subproc_run(char *const argv[], const char *cwd, size_t max_out, int timeout_ms,
                         const volatile int *stop, ob_subproc_result *res, char *err, size_t err_len);

/* ---- the built-in tools (tools_*.c) ------------------------------------------------ */

typedef struct ob_tool_ctx {
    const char *cwd;            /* x-tool-cwd header, else params.cwd, else NULL (ours) */
    const char *home;           /* $HOME at start, for a leading '~' (NULL: none) */
    const volatile int *stop;   /* set when the server stops */
} ob_tool_ctx;

/* One parameter of a tool's OpenAI function definition. extra: JSON text of more
 * schema keys for the property (an array's items), or NULL. */
typedef struct ob_tool_param {
    const char *name, *type, *desc;
    bool required;
    const char *extra;
} ob_tool_param;

/* A tool call's outcome: the reply object (200), or NULL with bad filled (a 400:
 * a missing or mistyped parameter, as llama-server answers). */
typedef json_t *(*ob_tool_fn)(json_t *params, const ob_tool_ctx *c, char *bad, size_t bad_len);
/* Streaming form (SSE of {"chunk"} events then {"done": true}); NULL with bad filled. */
typedef ob_stream *(*ob_tool_stream_fn)(json_t *params, const ob_tool_ctx *c, int client_fd, char *bad,
                                        size_t bad_len);

typedef struct ob_tool {
    const char *name, *display_name, *description;
    bool write;                 /* the UI should ask before running it */
    const ob_tool_param *params;
    int n_params;
    ob_tool_fn invoke;
    ob_tool_stream_fn stream;   /* NULL: stream = true is refused (404) */
} ob_tool;

/* llama-server's built-in tools in its order (tools.c). */
const ob_tool *ob_tools_builtin(int *n);

/* Parameter readers: absent keeps *out (false with bad filled if required); a wrong type
 * is false with bad filled. */
bool ob_tool_str(json_t *p, const char *key, bool required, const char **out, char *bad, size_t bad_len);
bool ob_tool_int(json_t *p, const char *key, long long *out, char *bad, size_t bad_len);
bool ob_tool_bool(json_t *p, const char *key, bool *out, char *bad, size_t bad_len);
/* {"error": msg} */
json_t *ob_tool_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* tools_files.c: a path as a tool sees it: a leading '~' is $HOME, a relative path is
 * joined to the cwd, "." and ".." are resolved lexically. malloc'd; NULL if too long. */
char *ob_tool_path(const ob_tool_ctx *c, const char *path);
json_t *ob_tool_read_file(json_t *p, const ob_tool_ctx *c, char *bad, size_t bad_len);
json_t *ob_tool_write_file(json_t *p, const ob_tool_ctx *c, char *bad, size_t bad_len);
json_t *ob_tool_edit_file(json_t *p, const ob_tool_ctx *c, char *bad, size_t bad_len);
/* tools_search.c */
json_t *ob_tool_file_glob_search(json_t *p, const ob_tool_ctx *c, char *bad, size_t bad_len);
json_t *ob_tool_grep_search(json_t *p, const ob_tool_ctx *c, char *bad, size_t bad_len);
/* tools_system.c */
json_t *ob_tool_exec(json_t *p, const ob_tool_ctx *c, char *bad, size_t bad_len);
ob_stream *ob_tool_exec_stream(json_t *p, const ob_tool_ctx *c, int client_fd, char *bad, size_t bad_len);
json_t *ob_tool_get_datetime(json_t *p, const ob_tool_ctx *c, char *bad, size_t bad_len);
json_t *ob_tool_get_info(json_t *p, const ob_tool_ctx *c, char *bad, size_t bad_len);

/* Length of the longest prefix of s[0..n) that does not end inside a UTF-8 sequence
 * (a streamed chunk keeps the rest for the next one). */
size_t ob_utf8_complete(const char *s, size_t n);

/* ---- mcp.c: the MCP client (stdio servers, JSON-RPC 2.0) ------------------------------ */

typedef struct ob_mcp ob_mcp;
/* Reads the "mcpServers" config from a file and/or inline JSON (either may be NULL).
 * A file that cannot be read or JSON that does not parse is an error; a server without
 * a command is logged (unless quiet) and skipped. *out is NULL when no server is
 * configured. */
ob_status ob_mcp_new(const char *file, const char *json_text, bool quiet, const volatile int *stop, ob_mcp **out,
                     char *err, size_t err_len);
/* Starts every server, initialises it and lists its tools (10 s each at most); a
 * server that fails is logged and left out. The processes stay up for the calls. */
void ob_mcp_warmup(ob_mcp *m);
/* The tools found at warm-up: an array of {"server", "name", "description",
 * "inputSchema", "readOnly"} (borrowed). */
json_t *ob_mcp_tools(ob_mcp *m);
/* Calls a tool of server `server` (its name); restarts a server that died. Returns
 * {"plain_text_response": text} or {"error": message}. */
json_t *ob_mcp_call(ob_mcp *m, const char *server, const char *tool, json_t *args);
/* Kills and reaps every server. Calls in flight must have returned (set *stop first). */
void ob_mcp_free(ob_mcp *m);

/* ---- the routes ------------------------------------------------------------------- */

/* agent.c: what the routes share. */
struct ob_srv_agent {
    const ob_srv_config *cfg;
    bool builtin[16];           /* by index in ob_tools_builtin(): enabled with --tools */
    ob_mcp *mcp;                /* NULL: no MCP servers */
    /* the MCP tools /tools lists (after warm-up; names that collide are left out):
     * {"tool": "<server>_<name>", "server", "name", "description", "inputSchema", "readOnly"} */
    json_t *mcp_tools;
    char *home;                 /* $HOME at start */
    volatile int stop;          /* the server is stopping: every wait gives up */
};

/* tools.c: GET /tools, POST /tools. */
void ob_srv_tools_get(ob_srv_agent *a, ob_resp *r);
void ob_srv_tools_post(ob_srv_agent *a, const ob_req *rq, ob_resp *r);
/* proxy.c: /cors-proxy?url=... (enabled). */
void ob_srv_proxy(ob_srv_agent *a, const ob_req *rq, ob_resp *r);
ob_status ob_srv_proxy_init(char *err, size_t err_len);
void ob_srv_proxy_cleanup(void);

#endif
