/* Google Cloud Vertex AI's prediction contract, as llama-server follows it when the
 * environment has AIP_MODE=PREDICTION: POST AIP_PREDICT_ROUTE (default /predict) takes
 * {"instances": [{"@requestFormat": "chatCompletions", ...body...}, ...]} and answers
 * {"predictions": [reply, ...]}, each instance run through the route its format names
 * (a path, or the path in camelCase without /v1: "chatCompletions", "applyTemplate"),
 * never streamed. AIP_HEALTH_ROUTE, when set, is another /health. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "server/server.h"

#define OB_VERTEX_MAX_INSTANCES 128

/* The POST routes an instance may name. */
static const char *const k_routes[] = {
    "/v1/chat/completions", "/v1/completions", "/completion", "/completions", "/v1/embeddings", "/embedding",
    "/embeddings", "/v1/rerank", "/rerank", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses",
    "/tokenize", "/detokenize", "/apply-template", "/v1/chat/completions/input_tokens",
};

/* "/v1/chat/completions" -> "chatCompletions" */
static void camel(const char *path, char *out, size_t cap) {
    if (!strncmp(path, "/v1/", 4)) path += 3;
    if (*path == '/') path++;
    size_t n = 0;
    bool up = false;
    for (; *path && n + 1 < cap; path++) {
        if (*path == '/' || *path == '-' || *path == '_') {
            up = true;
            continue;
        }
        out[n++] = up ? (char)toupper((unsigned char)*path) : *path;
        up = false;
    }
    out[n] = 0;
}

static const char *route_for(const char *fmt) {
    for (size_t i = 0; i < OB_ARRAY_LEN(k_routes); i++) {
        char c[64];
        camel(k_routes[i], c, sizeof c);
        if (!strcmp(fmt, c) || !strcmp(fmt, k_routes[i])) return k_routes[i];
    }
    return NULL;
}

static json_t *instance_error(const char *msg) {
    return json_pack("{s:{s:i,s:s,s:s}}", "error", "code", 400, "message", msg, "type", "invalid_request_error");
}

static json_t *run_instance(ob_server_state *s, const ob_req *outer, json_t *inst) {
    const char *fmt = json_string_value(json_object_get(inst, "@requestFormat"));
    if (!json_is_object(inst)) return instance_error("each instance must be a JSON object");
    if (!fmt) return instance_error("each instance must include a string @requestFormat");
    const char *path = route_for(fmt);
    if (!path) return instance_error("no route for this @requestFormat");
    json_t *body = json_deep_copy(inst);
    json_object_del(body, "@requestFormat");
    if (json_object_get(body, "stream")) json_object_set_new(body, "stream", json_false());
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text) return instance_error("out of memory");
    ob_req rq = {.method = "POST", .path = path, .body = text, .body_len = strlen(text), .conn = outer->conn};
    ob_resp r = {0};
    ob_srv_dispatch(s, &rq, &r);
    free(text);
    json_t *out = NULL;
    if (r.stream) { /* not asked for, so not expected: refuse rather than block */
        r.stream->close(r.stream);
        out = instance_error("the predict route does not stream");
    } else if (r.body) {
        out = json_loadb(r.body, r.body_len, 0, NULL);
        if (!out) out = ob_srv_jstr(r.body, r.body_len);
    }
    free(r.body);
    return out ? out : json_null();
}

bool ob_srv_route_vertex(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    const char *mode = getenv("AIP_MODE");
    if (!mode || strcmp(mode, "PREDICTION")) return false;
    const char *pred = getenv("AIP_PREDICT_ROUTE"), *health = getenv("AIP_HEALTH_ROUTE");
    if (!pred || !*pred) pred = "/predict";
    if (*pred == '/') pred++;
    if (health && *health == '/') health++;
    if (health && *health && rq->path[0] == '/' && !strcmp(rq->path + 1, health)) {
        ob_req h = *rq;
        h.path = "/health";
        ob_srv_dispatch(s, &h, r);
        return true;
    }
    if (rq->path[0] != '/' || strcmp(rq->path + 1, pred)) return false;
    if (strcmp(rq->method, "POST")) {
        ob_srv_error(r, 405, NULL, "use POST");
        return true;
    }
    json_t *body = ob_srv_parse_body(rq, r);
    if (!body) return true;
    json_t *inst = json_object_get(body, "instances");
    if (!json_is_array(inst)) {
        ob_srv_error(r, 400, NULL, "the request needs an array 'instances'");
    } else if (json_array_size(inst) > OB_VERTEX_MAX_INSTANCES) {
        ob_srv_error(r, 400, NULL, "at most %d instances per request", OB_VERTEX_MAX_INSTANCES);
    } else {
        json_t *preds = json_array();
        size_t i;
        json_t *x;
        json_array_foreach(inst, i, x) json_array_append_new(preds, run_instance(s, rq, x));
        ob_srv_json(r, 200, json_pack("{s:o}", "predictions", preds));
    }
    json_decref(body);
    return true;
}

/* AIP_HTTP_PORT overrides --port in prediction mode (Vertex AI says where to listen). */
int ob_srv_vertex_port(int port) {
    const char *mode = getenv("AIP_MODE"), *p = getenv("AIP_HTTP_PORT");
    if (!mode || strcmp(mode, "PREDICTION") || !p || !*p) return port;
    char *end;
    long v = strtol(p, &end, 10);
    return *end || v < 1 || v > 65535 ? port : (int)v;
}
