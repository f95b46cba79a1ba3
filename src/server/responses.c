/* OpenAI's Responses API (POST /v1/responses, /responses), as llama-server serves it: the
 * request becomes a chat (instructions as the system message, input items as messages,
 * function calls and their outputs as tool calls and tool messages), the reply output
 * items (a "reasoning" item for a thought, a "message" for the text, a "function_call"
 * per tool call), whole or as the API's named stream events. POST
 * /v1/responses/input_tokens counts the prompt. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/common.h"
#include "server/gen.h"

bool ob_oai_ready(ob_server_state *s, ob_resp *r);
int32_t *ob_oai_chat_prompt(ob_server_state *s, json_t *messages, const ob_chat_opts *co, ob_chat_out *out, int *n,
                            ob_resp *r);

/* Content of an input message as chat content parts. */
static json_t *parts_of(json_t *c, size_t i, ob_resp *r) {
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) {
        ob_srv_error(r, 400, NULL, "input[%zu].content must be a string or an array of parts", i);
        return NULL;
    }
    json_t *out = json_array();
    size_t k;
    json_t *p;
    json_array_foreach(c, k, p) {
        const char *ty = json_string_value(json_object_get(p, "type"));
        json_t *t = json_object_get(p, "text");
        if (ty && (!strcmp(ty, "input_text") || !strcmp(ty, "output_text") || !strcmp(ty, "text")) && json_is_string(t)) {
            json_array_append_new(out, json_pack("{s:s,s:O}", "type", "text", "text", t));
        } else if (ty && !strcmp(ty, "input_image")) {
            json_t *url = json_object_get(p, "image_url");
            json_array_append_new(out, json_pack("{s:s,s:{s:O}}", "type", "image_url", "image_url", "url",
                                                 json_is_string(url) ? url : json_string("")));
        } else {
            json_decref(out);
            ob_srv_error(r, 400, NULL, "input[%zu].content[%zu]: unsupported part type '%s'", i, k, ty ? ty : "(none)");
            return NULL;
        }
    }
    return out;
}

/* The request as chat messages. */
static json_t *to_messages(json_t *body, ob_resp *r) {
    json_t *msgs = json_array();
    json_t *ins = json_object_get(body, "instructions");
    if (json_is_string(ins)) json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", ins));
    json_t *in = json_object_get(body, "input");
    if (json_is_string(in)) {
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", in));
        return msgs;
    }
    if (!json_is_array(in)) {
        json_decref(msgs);
        ob_srv_error(r, 400, NULL, "'input' must be a string or an array of items");
        return NULL;
    }
    size_t i;
    json_t *it;
    json_array_foreach(in, i, it) {
        const char *ty = json_string_value(json_object_get(it, "type"));
        const char *role = json_string_value(json_object_get(it, "role"));
        if (!json_is_object(it)) {
            ob_srv_error(r, 400, NULL, "input[%zu] must be an object", i);
            goto fail;
        }
        if ((!ty || !strcmp(ty, "message")) && role) {
            json_t *c = parts_of(json_object_get(it, "content"), i, r);
            if (!c) goto fail;
            json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", strcmp(role, "developer") ? role : "system",
                                                  "content", c));
        } else if (ty && !strcmp(ty, "function_call")) {
            json_t *args = json_object_get(it, "arguments");
            json_array_append_new(msgs, json_pack("{s:s,s:s,s:[{s:s,s:s,s:{s:s,s:s}}]}", "role", "assistant", "content", "",
                                                  "tool_calls", "id", json_string_value(json_object_get(it, "call_id")) ?: "",
                                                  "type", "function", "function", "name",
                                                  json_string_value(json_object_get(it, "name")) ?: "", "arguments",
                                                  json_string_value(args) ?: "{}"));
        } else if (ty && !strcmp(ty, "function_call_output")) {
            json_t *o = json_object_get(it, "output");
            json_array_append_new(msgs, json_pack("{s:s,s:s,s:s}", "role", "tool", "tool_call_id",
                                                  json_string_value(json_object_get(it, "call_id")) ?: "", "content",
                                                  json_string_value(o) ?: ""));
        } else if (ty && !strcmp(ty, "reasoning")) {
            continue; /* earlier thoughts: the templates take no separate reasoning turn here */
        } else {
            ob_srv_error(r, 400, NULL, "input[%zu]: unsupported item type '%s'", i, ty ? ty : "(none)");
            goto fail;
        }
    }
    return msgs;
fail:
    json_decref(msgs);
    return NULL;
}

/* The Responses request as the chat body ob_gen_parse and the template take. */
static json_t *chat_body(json_t *body, ob_resp *r) {
    json_t *msgs = to_messages(body, r);
    if (!msgs) return NULL;
    json_t *cb = json_pack("{s:o}", "messages", msgs);
    static const char *const same[] = {"temperature", "top_p", "top_k", "min_p", "seed", "stream", "stop",
                                       "logit_bias", "presence_penalty", "frequency_penalty", "chat_template_kwargs",
                                       "timings_per_token", "reasoning_format", "tool_choice", "parallel_tool_calls"};
    for (size_t k = 0; k < OB_ARRAY_LEN(same); k++)
        if (json_object_get(body, same[k])) json_object_set(cb, same[k], json_object_get(body, same[k]));
    if (json_object_get(body, "max_output_tokens")) json_object_set(cb, "max_tokens", json_object_get(body, "max_output_tokens"));
    /* text.format {"type":"json_schema","name":...,"schema":{...}} is response_format's
     * json_schema with the schema one level up */
    json_t *tf = json_object_get(json_object_get(body, "text"), "format");
    const char *fmt = json_string_value(json_object_get(tf, "type"));
    if (fmt) {
        json_t *rf = json_pack("{s:s}", "type", fmt);
        if (json_object_get(tf, "schema")) json_object_set(rf, "schema", json_object_get(tf, "schema"));
        json_object_set_new(cb, "response_format", rf);
    }
    const char *effort = json_string_value(json_object_get(json_object_get(body, "reasoning"), "effort"));
    if (effort) json_object_set_new(cb, "reasoning_effort", json_string(effort));
    json_t *tools = json_object_get(body, "tools");
    if (json_array_size(tools)) {
        json_t *t = json_array();
        size_t i;
        json_t *tool;
        json_array_foreach(tools, i, tool) {
            const char *ty = json_string_value(json_object_get(tool, "type"));
            if (!ty || strcmp(ty, "function") || !json_is_string(json_object_get(tool, "name"))) continue;
            json_t *fn = json_pack("{s:O}", "name", json_object_get(tool, "name"));
            if (json_object_get(tool, "description")) json_object_set(fn, "description", json_object_get(tool, "description"));
            json_object_set(fn, "parameters", json_object_get(tool, "parameters") ?: json_object());
            json_array_append_new(t, json_pack("{s:s,s:o}", "type", "function", "function", fn));
        }
        json_object_set_new(cb, "tools", t);
    }
    return cb;
}

static json_t *usage_json(const ob_task_out *o) {
    return json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens", o->n_prompt, "input_tokens_details",
                     "cached_tokens", o->n_cached, "output_tokens", o->n_gen, "output_tokens_details", "reasoning_tokens",
                     0, "total_tokens", o->n_prompt + o->n_gen);
}

static json_t *text_part(const char *text, size_t len) {
    return json_pack("{s:s,s:o,s:[]}", "type", "output_text", "text", ob_srv_jstr(text, len), "annotations");
}

static json_t *message_item(const char *id, const char *status, json_t *content) {
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "type", "message", "id", id, "status", status, "role", "assistant",
                     "content", content);
}

static json_t *reasoning_item(const char *id, const char *status, const char *text, size_t len) {
    json_t *content = len ? json_pack("[{s:s,s:o}]", "type", "reasoning_text", "text", ob_srv_jstr(text, len)) : json_array();
    return json_pack("{s:s,s:s,s:s,s:[],s:o}", "type", "reasoning", "id", id, "status", status, "summary", "content",
                     content);
}

static json_t *call_item(const char *id, const char *call_id, const char *name, const char *status, const char *args,
                         size_t len) {
    return json_pack("{s:s,s:s,s:s,s:o,s:o,s:s}", "type", "function_call", "id", id, "call_id", call_id, "name",
                     ob_srv_jstr(name, strlen(name)), "arguments", ob_srv_jstr(args, len), "status", status);
}

/* The response object; output NULL while in progress (stolen otherwise). */
static json_t *response_json(ob_server_state *s, const char *id, long created, json_t *output, const ob_task_out *o) {
    bool done = output != NULL;
    bool cut = done && o->finish == OB_FINISH_LENGTH;
    json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:n,s:b,s:s,s:[],s:{},s:{s:{s:s}}}", "id", id, "object", "response",
                          "created_at", (json_int_t)created, "status", !done ? "in_progress" : cut ? "incomplete" : "completed",
                          "model", s->model_id, "output", done ? output : json_array(), "error", "parallel_tool_calls", 1,
                          "tool_choice", "auto", "tools", "metadata", "text", "format", "type", "text");
    json_object_set_new(j, "incomplete_details", cut ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null());
    json_object_set_new(j, "usage", done ? usage_json(o) : json_null());
    return j;
}

/* Stream state kept in the generic stream: id (response id), n_sent (sequence number),
 * items (the output items; the last one open while blk_kind says so), hold (the open
 * item's text). Item ids follow the response id. */
static void ev(ob_gen_stream *gs, char **buf, size_t *len, const char *type, json_t *j) {
    json_object_set_new(j, "type", json_string(type));
    json_object_set_new(j, "sequence_number", json_integer(gs->n_sent++));
    ob_srv_sse(buf, len, type, j);
}

enum { ITEM_NONE, ITEM_REASONING, ITEM_MESSAGE, ITEM_CALL };

typedef struct rs_ctx { ob_gen_stream *gs; char **buf; size_t *len; const ob_task_out *o; } rs_ctx;

static const char *open_id(const ob_gen_stream *gs) {
    return json_string_value(json_object_get(json_array_get(gs->items, (size_t)gs->blk_index), "id"));
}

/* Closes the open item with its .done events; cut: the reply ended at the length limit. */
static void item_close(rs_ctx *c, bool cut) {
    ob_gen_stream *gs = c->gs;
    if (!gs->blk_kind) return;
    const char *t = gs->hold ? gs->hold : "";
    size_t tl = gs->hold_len;
    json_t *item = json_array_get(gs->items, (size_t)gs->blk_index);
    const char *id = open_id(gs), *status = cut ? "incomplete" : "completed";
    json_t *done = NULL;
    if (gs->blk_kind == ITEM_REASONING) {
        ev(gs, c->buf, c->len, "response.reasoning_text.done", json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index",
                                                                          gs->blk_index, "content_index", 0, "text",
                                                                          ob_srv_jstr(t, tl)));
        done = reasoning_item(id, status, t, tl);
    } else if (gs->blk_kind == ITEM_MESSAGE) {
        ev(gs, c->buf, c->len, "response.output_text.done",
           json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", id, "output_index", gs->blk_index, "content_index", 0, "text",
                     ob_srv_jstr(t, tl), "logprobs"));
        ev(gs, c->buf, c->len, "response.content_part.done",
           json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", gs->blk_index, "content_index", 0, "part",
                     text_part(t, tl)));
        done = message_item(id, status, json_pack("[o]", text_part(t, tl)));
    } else {
        const char *name = json_string_value(json_object_get(item, "name"));
        ev(gs, c->buf, c->len, "response.function_call_arguments.done",
           json_pack("{s:s,s:i,s:o,s:s}", "item_id", id, "output_index", gs->blk_index, "arguments", ob_srv_jstr(t, tl),
                     "name", name));
        done = call_item(id, json_string_value(json_object_get(item, "call_id")), name, status, t, tl);
    }
    ev(gs, c->buf, c->len, "response.output_item.done", json_pack("{s:i,s:O}", "output_index", gs->blk_index, "item", done));
    json_array_set_new(gs->items, (size_t)gs->blk_index, done);
    gs->blk_kind = ITEM_NONE;
    gs->hold_len = 0;
}

static void item_open(rs_ctx *c, int kind, json_t *item) {
    ob_gen_stream *gs = c->gs;
    item_close(c, false);
    if (!gs->items) gs->items = json_array();
    gs->blk_index = (int)json_array_size(gs->items);
    gs->blk_kind = kind;
    gs->blk_any = true;
    ev(gs, c->buf, c->len, "response.output_item.added", json_pack("{s:i,s:O}", "output_index", gs->blk_index, "item", item));
    json_array_append_new(gs->items, item);
    if (kind == ITEM_MESSAGE)
        ev(gs, c->buf, c->len, "response.content_part.added",
           json_pack("{s:s,s:i,s:i,s:o}", "item_id", open_id(gs), "output_index", gs->blk_index, "content_index", 0, "part",
                     text_part("", 0)));
}

/* An item id: the message "msg_<response>" (as before items other than it), others with
 * their kind and index. */
static void item_id(const ob_gen_stream *gs, const char *kind, char *out, size_t n) {
    size_t k = gs->items ? json_array_size(gs->items) : 0;
    if (!strcmp(kind, "msg")) snprintf(out, n, "msg_%s", gs->id + 5);
    else snprintf(out, n, "%s_%s_%zu", kind, gs->id + 5, k);
}

static void rs_event(void *ud, const ob_tc_event *e) {
    rs_ctx *c = ud;
    ob_gen_stream *gs = c->gs;
    char id[96];
    switch (e->kind) {
    case OB_TC_EV_REASONING:
        if (gs->blk_kind != ITEM_REASONING) {
            item_id(gs, "rs", id, sizeof id);
            item_open(c, ITEM_REASONING, reasoning_item(id, "in_progress", "", 0));
        }
        ob_srv_buf_add(&gs->hold, &gs->hold_len, e->text, e->len);
        ev(gs, c->buf, c->len, "response.reasoning_text.delta",
           json_pack("{s:s,s:i,s:i,s:o}", "item_id", open_id(gs), "output_index", gs->blk_index, "content_index", 0,
                     "delta", ob_srv_jstr(e->text, e->len)));
        break;
    case OB_TC_EV_CONTENT: {
        if (gs->blk_kind != ITEM_MESSAGE) {
            item_id(gs, "msg", id, sizeof id);
            item_open(c, ITEM_MESSAGE, message_item(id, "in_progress", json_array()));
        }
        ob_srv_buf_add(&gs->hold, &gs->hold_len, e->text, e->len);
        json_t *d = json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", open_id(gs), "output_index", gs->blk_index,
                              "content_index", 0, "delta", ob_srv_jstr(e->text, e->len), "logprobs");
        if (gs->timings_per_token) json_object_set_new(d, "timings", ob_gen_timings(c->o));
        ev(gs, c->buf, c->len, "response.output_text.delta", d);
        break;
    }
    case OB_TC_EV_CALL:
        item_id(gs, "fc", id, sizeof id);
        item_open(c, ITEM_CALL, call_item(id, e->id, e->name, "in_progress", "", 0));
        break;
    case OB_TC_EV_ARGS:
        if (gs->blk_kind != ITEM_CALL) break;
        ob_srv_buf_add(&gs->hold, &gs->hold_len, e->text, e->len);
        ev(gs, c->buf, c->len, "response.function_call_arguments.delta",
           json_pack("{s:s,s:i,s:o}", "item_id", open_id(gs), "output_index", gs->blk_index, "delta",
                     ob_srv_jstr(e->text, e->len)));
        break;
    }
}

static void resp_fmt(ob_gen_stream *gs, const ob_task_out *o, char **buf, size_t *len) {
    if (!gs->started) {
        ev(gs, buf, len, "response.created", json_pack("{s:o}", "response", response_json(gs->s, gs->id, gs->created, NULL, o)));
        ev(gs, buf, len, "response.in_progress", json_pack("{s:o}", "response", response_json(gs->s, gs->id, gs->created, NULL, o)));
    }
    if (o->done && o->finish == OB_FINISH_ERROR) {
        ev(gs, buf, len, "error", json_pack("{s:s,s:s,s:n}", "code", "server_error", "message", o->err, "param"));
        return;
    }
    rs_ctx c = {gs, buf, len, o};
    ob_reply_feed(&gs->rp, o->text ? o->text : "", o->text_len, o->done, rs_event, &c);
    if (o->done) {
        bool cut = o->finish == OB_FINISH_LENGTH;
        if (!gs->blk_any) {
            char id[96];
            item_id(gs, "msg", id, sizeof id);
            item_open(&c, ITEM_MESSAGE, message_item(id, "in_progress", json_array()));
        }
        item_close(&c, cut);
        json_t *fin = json_pack("{s:o,s:o}", "response",
                                response_json(gs->s, gs->id, gs->created, json_incref(gs->items), o), "timings",
                                ob_gen_timings(o));
        ev(gs, buf, len, cut ? "response.incomplete" : "response.completed", fin);
    }
}

/* A whole reply's output items. */
static json_t *output_items(const char *rid, const ob_reply_all *a, bool cut) {
    json_t *out = json_array();
    char id[96];
    const char *status = cut ? "incomplete" : "completed";
    if (a->reasoning_len) {
        snprintf(id, sizeof id, "rs_%s_0", rid + 5);
        json_array_append_new(out, reasoning_item(id, status, a->reasoning, a->reasoning_len));
    }
    if (a->content_len || !a->n_calls) {
        snprintf(id, sizeof id, "msg_%s", rid + 5);
        json_array_append_new(out, message_item(id, status, json_pack("[o]", text_part(a->content, a->content_len))));
    }
    for (int k = 0; k < a->n_calls; k++) {
        snprintf(id, sizeof id, "fc_%s_%zu", rid + 5, json_array_size(out));
        json_array_append_new(out, call_item(id, a->calls[k].id, a->calls[k].name, status, a->calls[k].args,
                                             a->calls[k].args_len));
    }
    return out;
}

static void responses(ob_server_state *s, const ob_req *rq, ob_resp *r, bool count_only) {
    json_t *body = ob_srv_parse_body(rq, r);
    if (!body) return;
    json_t *cb = chat_body(body, r);
    ob_gen_req g;
    ob_chat_opts co;
    ob_chat_out out;
    int32_t *ids = NULL;
    int n;
    memset(&g, 0, sizeof g);
    if (!cb || !ob_gen_parse(s, cb, OB_GEN_OPENAI_CHAT, &g, r) || !ob_gen_chat_opts(s, cb, &co, r) ||
        !(ids = ob_oai_chat_prompt(s, json_object_get(cb, "messages"), &co, &out, &n, r)))
        goto done;
    g.think_open = out.think_open;
    if (count_only) {
        ob_srv_json(r, 200, json_pack("{s:s,s:i}", "object", "response.input_tokens", "input_tokens", n));
        goto done;
    }
    if (!ob_gen_tools_setup(s, &co, &out, &g, r)) goto done;
    ob_task_params p = ob_gen_task_params(&g, ids, n, 0);
    ob_task *t = ob_gen_submit(s, &p, r);
    if (!t) goto done;
    if (g.stream) {
        ob_gen_stream *gs;
        *r = ob_gen_stream_start(s, rq, t, resp_fmt, &g, &gs);
        if (r->stream) ob_gen_id(gs->id, sizeof gs->id, "resp_");
        goto done;
    }
    ob_gen_result res;
    bool ok = ob_gen_wait(s, rq, &t, 1, &res, r);
    ob_sched_release(s->sched, t);
    if (ok) {
        char id[48];
        ob_gen_id(id, sizeof id, "resp_");
        ob_reply_all a;
        ob_reply_whole(&g, res.text, res.text_len, &a);
        json_t *items = output_items(id, &a, res.last.finish == OB_FINISH_LENGTH);
        ob_reply_all_free(&a);
        json_t *j = response_json(s, id, (long)time(NULL), items, &res.last);
        json_object_set_new(j, "timings", ob_gen_timings(&res.last));
        ob_srv_json(r, 200, j);
    }
    ob_gen_result_clear(&res);
done:
    ob_gen_req_clear(&g);
    free(ids);
    json_decref(cb);
    json_decref(body);
}

bool ob_srv_route_responses(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    bool count = !strcmp(rq->path, "/v1/responses/input_tokens") || !strcmp(rq->path, "/responses/input_tokens");
    if (!count && strcmp(rq->path, "/v1/responses") && strcmp(rq->path, "/responses")) return false;
    if (strcmp(rq->method, "POST")) ob_srv_error(r, 405, NULL, "use POST");
    else if (count ? ob_oai_ready(s, r) : ob_gen_ready(s, r)) responses(s, rq, r, count);
    return true;
}
