/* GET /tools and POST /tools: llama-server's tool API for its web UI. The built-in tools'
 * table (their OpenAI function definitions), the listing, and a call: a built-in tool's
 * reply, its SSE stream, or an MCP server's answer. */
#include "server/agent.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "server/gen.h"

#ifdef ONEBIT_HAVE_MHD
#include <microhttpd.h>
#endif

/* ---- the table --------------------------------------------------------------------- */

static const ob_tool_param p_read_file[] = {
    {"path", "string", "File to read", true, NULL},
    {"start_line", "integer", "First line to return, counting from 1 (default 1)", false, NULL},
    {"end_line", "integer", "Last line to return, inclusive (default: the last line)", false, NULL},
    {"append_loc", "boolean", "Start each line with its number and an arrow, as \"12\u2192text\"", false, NULL},
};
static const ob_tool_param p_glob[] = {
    {"path", "string", "Directory to search under", true, NULL},
    {"include", "string", "Glob of the entries to return, e.g. \"*.c\" or \"src/**/*.h\" (default **)", false, NULL},
    {"exclude", "string", "Glob of the entries to leave out", false, NULL},
    {"type", "string", "What to return: \"file\" (default), \"dir\" or \"all\"", false, NULL},
    {"max_depth", "integer", "How deep to go: 1 lists the directory itself, 0 (default) has no limit", false, NULL},
    {"limit", "integer", "Most entries to return (at most 100, the default)", false, NULL},
};
static const ob_tool_param p_grep[] = {
    {"path", "string", "File or directory to search", true, NULL},
    {"pattern", "string", "Regular expression (PCRE) to look for, or plain text with literal", true, NULL},
    {"include", "string", "Glob of the files to search (default **)", false, NULL},
    {"exclude", "string", "Glob of the files to skip", false, NULL},
    {"return_line_numbers", "boolean", "Show the number of each line", false, NULL},
    {"literal", "boolean", "Take pattern as plain text (default false)", false, NULL},
    {"ignore_case", "boolean", "Match regardless of case (default false)", false, NULL},
    {"context_lines", "integer", "Lines to show before and after each match (default 0)", false, NULL},
};
static const ob_tool_param p_exec[] = {
    {"command", "string", "Command line for sh -c", true, NULL},
    {"timeout", "integer", "Seconds before the command is killed (default 10, at most 60)", false, NULL},
    {"max_output_size", "integer", "Most bytes of output to return (at most and by default 16384)", false, NULL},
};
static const ob_tool_param p_write[] = {
    {"path", "string", "File to write", true, NULL},
    {"content", "string", "The file's new content", true, NULL},
};
static const ob_tool_param p_edit[] = {
    {"path", "string", "File to edit", true, NULL},
    {"edits", "array", "Replacements, each of a distinct part of the file", true,
     "{\"items\": {\"type\": \"object\", \"properties\": {"
     "\"old_text\": {\"type\": \"string\", \"description\": \"Text now in the file; it must occur exactly once "
     "and must not overlap another edit's\"}, "
     "\"new_text\": {\"type\": \"string\", \"description\": \"What replaces it\"}}, "
     "\"required\": [\"old_text\", \"new_text\"]}}"},
};
static const ob_tool_param p_datetime[] = {
    {"format", "string", "strftime format of the answer (default \"%Y-%m-%dT%H:%M:%SZ\", ISO 8601)", false, NULL},
};

#define PARAMS(a) a, (int)OB_ARRAY_LEN(a)
static const ob_tool g_tools[] = {
    {"read_file", "Read file",
     "Returns a text file's lines, all or from start_line to end_line; append_loc numbers them. Files over "
     "16 KiB must be read in ranges.", false, PARAMS(p_read_file), ob_tool_read_file, NULL},
    {"file_glob_search", "File search",
     "Lists the files (or directories with type) under a directory whose path matches a glob. In a git "
     "checkout files ignored by git are left out; elsewhere .git, node_modules, build, dist and similar "
     "directories are not entered. A glob without '/' matches the name at any depth; with '/' it matches the "
     "path below the directory at any depth unless it starts with '/' or '**'. Directories end with '/'.",
     false, PARAMS(p_glob), ob_tool_file_glob_search, NULL},
    {"grep_search", "Grep search",
     "Finds the lines matching a regular expression in a file or in the files under a directory, as "
     "path:line (path:number:line with line numbers). Skips what file_glob_search skips, and binary files; "
     "include and exclude are globs as there.",
     false, PARAMS(p_grep), ob_tool_grep_search, NULL},
    {"exec_shell_command", "Execute shell command",
     "Runs a command line with sh -c and returns what it printed (stdout and stderr together) and its exit "
     "code.", true, PARAMS(p_exec), ob_tool_exec, ob_tool_exec_stream},
    {"write_file", "Write file",
     "Writes a file, replacing it if it exists; missing parent directories are created.",
     true, PARAMS(p_write), ob_tool_write_file, NULL},
    {"edit_file", "Edit file",
     "Replaces parts of a file: each edit's old_text must occur once in the file as it is now (whitespace at "
     "line ends and typographic quotes or dashes may differ) and edits must not overlap.",
     true, PARAMS(p_edit), ob_tool_edit_file, NULL},
    {"get_datetime", "Get Date & Time", "Returns the current date and time (UTC).",
     false, PARAMS(p_datetime), ob_tool_get_datetime, NULL},
    {"get_info", "Get Runtime Info", "Returns the operating system and the working directory.",
     false, NULL, 0, ob_tool_get_info, NULL},
};
#undef PARAMS

const ob_tool *ob_tools_builtin(int *n) {
    _Static_assert(OB_ARRAY_LEN(g_tools) <= OB_ARRAY_LEN(((ob_srv_agent *)0)->builtin), "builtin[] too small");
    *n = (int)OB_ARRAY_LEN(g_tools);
    return g_tools;
}

static json_t *definition(const ob_tool *t) {
    json_t *props = json_object(), *req = json_array();
    for (int i = 0; i < t->n_params; i++) {
        const ob_tool_param *p = &t->params[i];
        json_t *o = json_pack("{s:s,s:s}", "type", p->type, "description", p->desc);
        if (p->extra) {
            json_t *x = json_loads(p->extra, 0, NULL);
            OB_ASSERT(x); /* a constant of the table above */
            json_object_update(o, x);
            json_decref(x);
        }
        json_object_set_new(props, p->name, o);
        if (p->required) json_array_append_new(req, json_string(p->name));
    }
    json_t *params = json_pack("{s:s,s:o}", "type", "object", "properties", props);
    if (json_array_size(req)) json_object_set_new(params, "required", req);
    else json_decref(req);
    return json_pack("{s:s,s:{s:s,s:s,s:o}}", "type", "function", "function", "name", t->name, "description",
                     t->description, "parameters", params);
}

static json_t *entry(const char *name, const char *display, const char *type, bool write, json_t *def) {
    return json_pack("{s:s,s:s,s:s,s:{s:b},s:o}", "display_name", display, "tool", name, "type", type,
                     "permissions", "write", write, "definition", def);
}

void ob_srv_tools_get(ob_srv_agent *a, ob_resp *r) {
    json_t *list = json_array();
    int n;
    const ob_tool *t = ob_tools_builtin(&n);
    for (int i = 0; i < n; i++)
        if (a->builtin[i]) json_array_append_new(list, entry(t[i].name, t[i].display_name, "builtin", t[i].write, definition(&t[i])));
    size_t k;
    json_t *m;
    json_array_foreach(a->mcp_tools, k, m) {
        const char *name = json_string_value(json_object_get(m, "tool"));
        json_t *schema = json_object_get(m, "inputSchema");
        json_t *def = json_pack("{s:s,s:{s:s,s:O,s:O}}", "type", "function", "function", "name", name, "description",
                                json_object_get(m, "description"), "parameters", schema);
        /* an MCP tool that does not say it only reads may write (the protocol's default) */
        json_array_append_new(list, entry(name, name, "mcp", !json_is_true(json_object_get(m, "readOnly")), def));
    }
    ob_srv_json(r, 200, list);
}

/* ---- a call ------------------------------------------------------------------------- */

void ob_srv_tools_post(ob_srv_agent *a, const ob_req *rq, ob_resp *r) {
    json_t *body = ob_srv_parse_body(rq, r);
    if (!body) return;
    const char *name = json_string_value(json_object_get(body, "tool"));
    json_t *params = json_object_get(body, "params");
    bool stream = false;
    if (!name) {
        ob_srv_error(r, 400, NULL, "'tool' must be a string: the name of the tool to call");
        goto out;
    }
    if (params && !json_is_null(params) && !json_is_object(params)) {
        ob_srv_error(r, 400, NULL, "'params' must be an object");
        goto out;
    }
    if (!ob_srv_get_bool(body, "stream", &stream, r)) goto out;
    params = params && json_is_object(params) ? json_incref(params) : json_object();

    int n, bi = -1;
    const ob_tool *t = ob_tools_builtin(&n);
    for (int i = 0; i < n; i++)
        if (a->builtin[i] && !strcmp(t[i].name, name)) bi = i;
    json_t *mt = NULL;
    size_t k;
    json_t *m;
    json_array_foreach(a->mcp_tools, k, m) if (!strcmp(json_string_value(json_object_get(m, "tool")), name)) mt = m;
    if (bi < 0 && !mt) {
        ob_srv_error(r, 404, "invalid_request_error", "unknown tool \"%s\"", name);
    } else if (stream && (bi < 0 || !t[bi].stream)) {
        ob_srv_error(r, 404, "invalid_request_error", "tool \"%s\" does not support stream = true", name);
    } else if (mt) {
        /* the arguments go to the MCP server as given */
        ob_srv_json(r, 200, ob_mcp_call(a->mcp, json_string_value(json_object_get(mt, "server")),
                                        json_string_value(json_object_get(mt, "name")), params));
    } else {
        /* the runtime's x-tool-cwd header wins over a cwd the model put in the params */
        const char *cwd = NULL;
#ifdef ONEBIT_HAVE_MHD
        if (rq->conn) cwd = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "x-tool-cwd");
#endif
        if (!cwd || !*cwd) cwd = json_string_value(json_object_get(params, "cwd"));
        ob_tool_ctx c = {.cwd = cwd && *cwd ? cwd : NULL, .home = a->home, .stop = &a->stop};
        char bad[512] = "";
        if (stream) {
            ob_stream *st = t[bi].stream(params, &c, ob_srv_conn_fd(rq), bad, sizeof bad);
            if (st) {
                r->status = 200;
                r->content_type = "text/event-stream";
                r->stream = st;
            } else {
                ob_srv_error(r, 400, NULL, "%s", bad);
            }
        } else {
            json_t *out = t[bi].invoke(params, &c, bad, sizeof bad);
            if (out) ob_srv_json(r, 200, out);
            else ob_srv_error(r, 400, NULL, "%s", bad);
        }
    }
    json_decref(params);
out:
    json_decref(body);
}

/* ---- helpers for the tools -------------------------------------------------------- */

bool ob_tool_str(json_t *p, const char *key, bool required, const char **out, char *bad, size_t bad_len) {
    json_t *v = json_object_get(p, key);
    if (!v || json_is_null(v)) {
        if (required) snprintf(bad, bad_len, "missing parameter '%s'", key);
        return !required;
    }
    if (!json_is_string(v)) {
        snprintf(bad, bad_len, "parameter '%s' must be a string", key);
        return false;
    }
    *out = json_string_value(v);
    return true;
}

bool ob_tool_int(json_t *p, const char *key, long long *out, char *bad, size_t bad_len) {
    json_t *v = json_object_get(p, key);
    if (!v || json_is_null(v)) return true;
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    double d = json_is_real(v) ? json_real_value(v) : 0.5;
    if (d == (double)(long long)d && d > -1e15 && d < 1e15) {
        *out = (long long)d;
        return true;
    }
    snprintf(bad, bad_len, "parameter '%s' must be an integer", key);
    return false;
}

bool ob_tool_bool(json_t *p, const char *key, bool *out, char *bad, size_t bad_len) {
    json_t *v = json_object_get(p, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) {
        snprintf(bad, bad_len, "parameter '%s' must be a boolean", key);
        return false;
    }
    *out = json_is_true(v);
    return true;
}

json_t *ob_tool_error(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *o = json_object();
    json_object_set_new(o, "error", ob_srv_jstr(msg, strlen(msg)));
    return o;
}

size_t ob_utf8_complete(const char *s, size_t n) {
    /* step back over at most 3 continuation bytes to the lead byte of the last sequence */
    size_t i = n, back = 0;
    while (i > 0 && back < 3 && ((unsigned char)s[i - 1] & 0xc0) == 0x80) {
        i--;
        back++;
    }
    if (i == 0) return n;
    unsigned char c = (unsigned char)s[i - 1];
    size_t need = c >= 0xf0 && c < 0xf8 ? 4 : c >= 0xe0 && c < 0xf0 ? 3 : c >= 0xc0 && c < 0xe0 ? 2 : 1;
    return need > back + 1 ? i - 1 : n;
}
