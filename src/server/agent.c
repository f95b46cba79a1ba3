/* The agent features' state and routes: which built-in tools --tools enabled, the MCP
 * servers, the CORS proxy switch, and the stop flag every wait checks. /tools answers 403
 * (llama-server's "this feature is disabled") when there are neither tools nor MCP
 * servers, /cors-proxy when --ui-mcp-proxy is off. */
#include "server/agent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"

static void disabled(ob_resp *r) { ob_srv_error(r, 403, "feature_disabled", "this feature is disabled"); }

static ob_status agent_new(const ob_srv_config *cfg, bool quiet, ob_srv_agent **out, char *err, size_t err_len) {
    *out = NULL;
    ob_srv_agent *a = calloc(1, sizeof *a);
    if (!a) return ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
    a->cfg = cfg;
    a->mcp_tools = json_array();
    const char *home = getenv("HOME"); /* read once: nothing sets the environment after start */
    a->home = home ? strdup(home) : NULL;
    ob_status st = OB_OK;
    int n;
    const ob_tool *t = ob_tools_builtin(&n);
    for (const char *p = cfg->tools; p && *p && st == OB_OK;) {
        size_t l = strcspn(p, ",");
        while (l && *p == ' ') { p++; l--; }
        size_t e = l;
        while (e && p[e - 1] == ' ') e--;
        bool all = e == 3 && !strncmp(p, "all", 3), known = all;
        for (int i = 0; i < n; i++)
            if (all || (strlen(t[i].name) == e && !strncmp(p, t[i].name, e))) a->builtin[i] = known = true;
        if (!known && e) {
            char names[512] = "";
            for (int i = 0; i < n; i++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", t[i].name);
            st = ob_fail(err, err_len, OB_ERR_ARG, "--tools: unknown tool '%.*s' (all, %s)", (int)e, p, names);
        }
        p += l;
        if (*p == ',') p++;
    }
    if (st == OB_OK)
        st = ob_mcp_new(cfg->mcp_servers_config, cfg->mcp_servers_json, quiet, &a->stop, &a->mcp, err, err_len);
    if (st == OB_OK && cfg->ui_mcp_proxy) st = ob_srv_proxy_init(err, err_len);
    if (st != OB_OK) {
        ob_srv_agent_free(a);
        return st;
    }
    *out = a;
    return OB_OK;
}

ob_status ob_srv_agent_new(const ob_srv_config *cfg, ob_srv_agent **out, char *err, size_t err_len) {
    return agent_new(cfg, false, out, err, err_len);
}

ob_status ob_srv_agent_check(const ob_srv_config *cfg, char *err, size_t err_len) {
    ob_srv_agent *a;
    ob_status st = agent_new(cfg, true, &a, err, err_len);
    ob_srv_agent_free(a);
    return st;
}

void ob_srv_agent_warmup(ob_srv_agent *a) {
    if (!a) return;
    int n;
    const ob_tool *t = ob_tools_builtin(&n);
    char on[384] = "";
    for (int i = 0; i < n; i++)
        if (a->builtin[i])
            snprintf(on + strlen(on), sizeof on - strlen(on), "%s%s", *on ? "," : "built-in tools ", t[i].name);
    if (a->mcp) snprintf(on + strlen(on), sizeof on - strlen(on), "%sMCP servers", *on ? "; " : "");
    if (a->cfg->ui_mcp_proxy) snprintf(on + strlen(on), sizeof on - strlen(on), "%sCORS proxy", *on ? "; " : "");
    if (*on) ob_log(OB_LOG_WARN, "serve: enabled: %s; they act on this machine: keep this server from untrusted networks", on);
    if (!a->mcp) return;
    ob_mcp_warmup(a->mcp);
    /* listed as <server>_<tool>, unless a built-in tool or an earlier one has the name */
    size_t i;
    json_t *m;
    json_array_foreach(ob_mcp_tools(a->mcp), i, m) {
        char name[512];
        snprintf(name, sizeof name, "%s_%s", json_string_value(json_object_get(m, "server")),
                 json_string_value(json_object_get(m, "name")));
        bool taken = false;
        for (int k = 0; k < n; k++) taken |= a->builtin[k] && !strcmp(t[k].name, name);
        size_t j;
        json_t *o;
        json_array_foreach(a->mcp_tools, j, o) taken |= !strcmp(json_string_value(json_object_get(o, "tool")), name);
        if (taken) {
            ob_log(OB_LOG_WARN, "serve: MCP tool '%s' has the name of another tool, left out", name);
            continue;
        }
        json_t *e = json_deep_copy(m);
        json_object_set_new(e, "tool", json_string(name));
        json_array_append_new(a->mcp_tools, e);
    }
}

void ob_srv_agent_stop(ob_srv_agent *a) {
    if (a) __atomic_store_n(&a->stop, 1, __ATOMIC_RELEASE);
}

void ob_srv_agent_free(ob_srv_agent *a) {
    if (!a) return;
    a->stop = 1;
    ob_mcp_free(a->mcp);
    if (a->cfg->ui_mcp_proxy) ob_srv_proxy_cleanup();
    json_decref(a->mcp_tools);
    free(a->home);
    free(a);
}

bool ob_srv_route_agent(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    ob_srv_agent *a = __atomic_load_n(&s->agent, __ATOMIC_ACQUIRE); /* NULL until warmed up */
    if (!strcmp(rq->path, "/cors-proxy")) {
        if (!a || !a->cfg->ui_mcp_proxy) disabled(r);
        else ob_srv_proxy(a, rq, r);
        return true;
    }
    if (strcmp(rq->path, "/tools")) return false;
    bool any = a && (a->mcp || json_array_size(a->mcp_tools));
    for (size_t i = 0; a && i < OB_ARRAY_LEN(a->builtin); i++) any |= a->builtin[i];
    if (!any) disabled(r);
    else if (!strcmp(rq->method, "GET")) ob_srv_tools_get(a, r);
    else if (!strcmp(rq->method, "POST")) ob_srv_tools_post(a, rq, r);
    else ob_srv_error(r, 405, NULL, "use GET or POST");
    return true;
}
