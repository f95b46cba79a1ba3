/* Anthropic Messages API: POST /v1/messages, whole or streamed with its named events
 * (message_start, content_block_start/delta/stop, message_delta, message_stop). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "server/gen.h"

bool ob_oai_ready(ob_server_state *s, ob_resp *r);
int32_t *ob_oai_chat_prompt(ob_server_state *s, json_t *messages, int *n, ob_resp *r);

static const char *stop_reason(const ob_task_out *o) {
    if (o->finish == OB_FINISH_LENGTH) return "max_tokens";
    return o->stop_word ? "stop_sequence" : "end_turn";
}

static json_t *stop_seq(const ob_task_out *o) {
    return o->stop_word ? ob_srv_jstr(o->stop_word, strlen(o->stop_word)) : json_null();
}

/* Text of a system field or content: a string or an array of text blocks. */
static bool block_text(json_t *v, const char *what, char **out, size_t *len, ob_resp *r) {
    if (json_is_string(v)) {
        ob_srv_buf_add(out, len, json_string_value(v), json_string_length(v));
        return true;
    }
    if (!json_is_array(v)) {
        ob_srv_error(r, 400, NULL, "%s must be a string or an array of content blocks", what);
        return false;
    }
    size_t i;
    json_t *b;
    json_array_foreach(v, i, b) {
        const char *ty = json_string_value(json_object_get(b, "type"));
        json_t *t = json_object_get(b, "text");
        if (!ty || strcmp(ty, "text") || !json_is_string(t)) {
            ob_srv_error(r, 400, NULL, "%s[%zu]: only text blocks are supported", what, i);
            return false;
        }
        if (*len) ob_srv_buf_add(out, len, "\n", 1);
        ob_srv_buf_add(out, len, json_string_value(t), json_string_length(t));
    }
    return true;
}

/* Anthropic messages (+ system) in the OpenAI shape the templates take. */
static json_t *to_chat_messages(json_t *body, ob_resp *r) {
    json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        ob_srv_error(r, 400, NULL, "'messages' must be a non-empty array");
        return NULL;
    }
    json_t *out = json_array();
    json_t *sys = json_object_get(body, "system");
    if (sys && !json_is_null(sys)) {
        char *t = NULL;
        size_t tl = 0;
        if (!block_text(sys, "system", &t, &tl, r)) {
            free(t);
            json_decref(out);
            return NULL;
        }
        json_array_append_new(out, json_pack("{s:s,s:s%}", "role", "system", "content", t ? t : "", tl));
        free(t);
    }
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant"))) {
            ob_srv_error(r, 400, NULL, "messages[%zu].role must be 'user' or 'assistant'", i);
            json_decref(out);
            return NULL;
        }
        char *t = NULL, what[48];
        size_t tl = 0;
        snprintf(what, sizeof what, "messages[%zu].content", i);
        if (!block_text(json_object_get(m, "content"), what, &t, &tl, r)) {
            free(t);
            json_decref(out);
            return NULL;
        }
        json_array_append_new(out, json_pack("{s:s,s:s%}", "role", role, "content", t ? t : "", tl));
        free(t);
    }
    return out;
}

static json_t *usage(const ob_task_out *o, int out_tokens) {
    return json_pack("{s:i,s:i,s:i,s:i}", "input_tokens", o->n_prompt, "output_tokens", out_tokens,
                     "cache_creation_input_tokens", 0, "cache_read_input_tokens", o->n_cached);
}

static void msg_fmt(ob_gen_stream *gs, const ob_task_out *o, char **buf, size_t *len) {
    if (!gs->started) {
        json_t *msg = json_pack("{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:o}", "id", gs->id, "type", "message", "role",
                                "assistant", "model", gs->s->model_id, "content", "stop_reason", "stop_sequence",
                                "usage", usage(o, 0));
        ob_srv_sse(buf, len, "message_start", json_pack("{s:s,s:o}", "type", "message_start", "message", msg));
        ob_srv_sse(buf, len, "content_block_start", json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_start",
                                                              "index", 0, "content_block", "type", "text", "text", ""));
        ob_srv_sse(buf, len, "ping", json_pack("{s:s}", "type", "ping"));
    }
    if (o->done && o->finish == OB_FINISH_ERROR) {
        ob_srv_sse(buf, len, "error", json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", "api_error",
                                                "message", o->err));
        return;
    }
    if (o->text_len)
        ob_srv_sse(buf, len, "content_block_delta",
                   json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index", 0, "delta", "type",
                             "text_delta", "text", ob_srv_jstr(o->text, o->text_len)));
    if (o->done) {
        ob_srv_sse(buf, len, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", 0));
        ob_srv_sse(buf, len, "message_delta",
                   json_pack("{s:s,s:{s:s,s:o},s:{s:i}}", "type", "message_delta", "delta", "stop_reason",
                             stop_reason(o), "stop_sequence", stop_seq(o), "usage", "output_tokens", o->n_gen));
        ob_srv_sse(buf, len, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    }
}

static void messages(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    json_t *body = ob_srv_parse_body(rq, r);
    if (!body) return;
    ob_gen_req g;
    json_t *chat = NULL;
    int32_t *ids = NULL;
    int n;
    if (!ob_gen_parse(s, body, OB_GEN_ANTHROPIC, &g, r) || !(chat = to_chat_messages(body, r)) ||
        !(ids = ob_oai_chat_prompt(s, chat, &n, r)))
        goto out;
    ob_task_params p = ob_gen_task_params(&g, ids, n, 0);
    ob_task *t = ob_gen_submit(s, &p, r);
    if (!t) goto out;
    if (g.stream) {
        ob_gen_stream *gs;
        *r = ob_gen_stream_start(s, rq, t, msg_fmt, &g, &gs);
        if (r->stream) ob_gen_id(gs->id, sizeof gs->id, "msg_");
        goto out;
    }
    ob_gen_result res;
    bool ok = ob_gen_wait(s, rq, &t, 1, &res, r);
    ob_sched_release(s->sched, t);
    if (ok) {
        char id[48];
        ob_gen_id(id, sizeof id, "msg_");
        json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:[{s:s,s:o}],s:s,s:o,s:o}", "id", id, "type", "message", "role",
                              "assistant", "model", s->model_id, "content", "type", "text", "text",
                              ob_srv_jstr(res.text, res.text_len), "stop_reason", stop_reason(&res.last),
                              "stop_sequence", stop_seq(&res.last), "usage", usage(&res.last, res.last.n_gen));
        ob_srv_json(r, 200, j);
    }
    ob_gen_result_clear(&res);
out:
    free(ids);
    json_decref(chat);
    json_decref(body);
}

bool ob_srv_route_anthropic(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    if (strcmp(rq->path, "/v1/messages") && strcmp(rq->path, "/messages")) return false;
    if (strcmp(rq->method, "POST")) ob_srv_error(r, 405, NULL, "use POST");
    else if (ob_gen_ready(s, r)) messages(s, rq, r);
    return true;
}
