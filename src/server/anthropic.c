/* Anthropic Messages API: POST /v1/messages, whole or streamed with its named events
 * (message_start, content_block_start/delta/stop, message_delta, message_stop). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "server/gen.h"
#include "server/wire.h"

bool ob_oai_ready(ob_server_state *s, ob_resp *r);
int32_t *ob_oai_chat_prompt(ob_server_state *s, json_t *messages, const ob_chat_opts *co, ob_chat_out *out, int *n,
                            ob_resp *r);

static const char *stop_reason(const ob_task_out *o, int n_calls) {
    if (o->finish == OB_FINISH_LENGTH) return "max_tokens";
    if (n_calls) return "tool_use";
    return o->stop_word ? "stop_sequence" : "end_turn";
}

/* Anthropic's tool ids read "toolu_..." */
static void tool_id(const char *call_id, char *out, size_t n) {
    snprintf(out, n, "toolu_%s", strncmp(call_id, "call_", 5) ? call_id : call_id + 5);
}

static json_t *stop_seq(const ob_task_out *o) {
    return o->stop_word ? ob_srv_jstr(o->stop_word, strlen(o->stop_word)) : json_null();
}

/* An image block as an OpenAI image part (a text-only model then refuses it). */
static json_t *image_part(json_t *b) {
    json_t *src = json_object_get(b, "source");
    const char *ty = json_string_value(json_object_get(src, "type"));
    const char *url = json_string_value(json_object_get(src, "url"));
    char *u = NULL;
    if (ty && !strcmp(ty, "base64")) {
        const char *mt = json_string_value(json_object_get(src, "media_type"));
        const char *data = json_string_value(json_object_get(src, "data"));
        size_t n = strlen(mt ? mt : "") + strlen(data ? data : "") + 16;
        u = malloc(n);
        if (u) snprintf(u, n, "data:%s;base64,%s", mt ? mt : "", data ? data : "");
    }
    json_t *part = json_pack("{s:s,s:{s:s}}", "type", "image_url", "image_url", "url", u ? u : url ? url : "");
    free(u);
    return part;
}

/* One Anthropic message as OpenAI messages: a user turn's tool_result blocks become
 * "tool" messages (before its text), an assistant turn's tool_use blocks tool_calls and
 * its thinking reasoning_content. */
static bool convert_message(json_t *m, size_t i, json_t *out, ob_resp *r) {
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant"))) {
        ob_srv_error(r, 400, NULL, "messages[%zu].role must be 'user' or 'assistant'", i);
        return false;
    }
    char what[64];
    snprintf(what, sizeof what, "messages[%zu].content", i);
    json_t *c = json_object_get(m, "content");
    if (json_is_string(c)) {
        json_array_append_new(out, json_pack("{s:s,s:O}", "role", role, "content", c));
        return true;
    }
    if (!json_is_array(c)) {
        ob_srv_error(r, 400, NULL, "%s must be a string or an array of content blocks", what);
        return false;
    }
    bool user = !strcmp(role, "user");
    json_t *parts = json_array(), *calls = json_array();
    char *thinking = NULL;
    size_t tl = 0, k;
    json_t *b;
    bool ok = true;
    json_array_foreach(c, k, b) {
        const char *ty = json_string_value(json_object_get(b, "type"));
        if (!json_is_object(b) || !ty) {
            ob_srv_error(r, 400, NULL, "%s[%zu] must be a content block with a type", what, k);
            ok = false;
        } else if (!strcmp(ty, "text") || !strcmp(ty, "image")) {
            json_t *one = json_pack("[O]", b);
            ok = ob_srv_convert_parts(one, what, true, "image", image_part, parts, r);
            json_decref(one);
        } else if (user && !strcmp(ty, "tool_result")) {
            json_t *tc = json_object_get(b, "content");
            json_t *tparts = json_array();
            ok = !tc || json_is_null(tc) || ob_srv_convert_parts(tc, what, true, "image", image_part, tparts, r);
            if (ok)
                json_array_append_new(out, json_pack("{s:s,s:s,s:o}", "role", "tool", "tool_call_id",
                                                     json_string_value(json_object_get(b, "tool_use_id")) ?: "",
                                                     "content", tparts));
            else
                json_decref(tparts);
        } else if (!user && !strcmp(ty, "tool_use")) {
            json_t *in = json_object_get(b, "input");
            char *args = json_dumps(in ? in : json_object(), JSON_COMPACT);
            json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id",
                                                   json_string_value(json_object_get(b, "id")) ?: "", "type", "function",
                                                   "function", "name", json_string_value(json_object_get(b, "name")) ?: "",
                                                   "arguments", args ? args : "{}"));
            free(args);
        } else if (!user && !strcmp(ty, "thinking")) {
            json_t *t = json_object_get(b, "thinking");
            if (json_is_string(t)) ob_srv_buf_add(&thinking, &tl, json_string_value(t), json_string_length(t));
        } else if (strcmp(ty, "redacted_thinking")) {
            ob_srv_error(r, 400, NULL, "%s[%zu]: unsupported block type '%s'", what, k, ty);
            ok = false;
        }
        if (!ok) break;
    }
    if (ok && (json_array_size(parts) || json_array_size(calls) || thinking || !user)) {
        json_t *nm = json_pack("{s:s,s:O}", "role", role, "content", parts);
        if (json_array_size(calls)) json_object_set(nm, "tool_calls", calls);
        if (thinking) json_object_set_new(nm, "reasoning_content", json_stringn(thinking, tl));
        json_array_append_new(out, nm);
    }
    json_decref(parts);
    json_decref(calls);
    free(thinking);
    return ok;
}

/* Anthropic messages (+ system) in the OpenAI shape the templates take (wire.h). */
json_t *ob_anth_chat_messages(json_t *body, ob_resp *r) {
    json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs)) {
        ob_srv_error(r, 400, NULL, "'messages' must be an array");
        return NULL;
    }
    json_t *out = json_array();
    json_t *sys = json_object_get(body, "system");
    if (sys && !json_is_null(sys)) {
        char *t = NULL;
        size_t tl = 0;
        if (!ob_srv_joined_text(sys, "system", true, &t, &tl, r)) {
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
        if (!convert_message(m, i, out, r)) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

/* tool_choice {"type": "auto" | "any" | "tool" (with "name") | "none",
 * "disable_parallel_tool_use"}. */
static bool tool_choice(json_t *body, ob_chat_opts *co, ob_resp *r) {
    json_t *tc = json_object_get(body, "tool_choice");
    if (!tc || json_is_null(tc)) return true;
    const char *ty = json_string_value(json_object_get(tc, "type"));
    if (!json_is_object(tc) || !ty) {
        ob_srv_error(r, 400, NULL, "'tool_choice' must be an object with a 'type'");
        return false;
    }
    if (!strcmp(ty, "auto")) co->tool_choice = OB_TOOLS_AUTO;
    else if (!strcmp(ty, "any")) co->tool_choice = OB_TOOLS_REQUIRED;
    else if (!strcmp(ty, "none")) co->tool_choice = OB_TOOLS_NONE;
    else if (!strcmp(ty, "tool") && json_is_string(json_object_get(tc, "name"))) {
        co->tool_choice = OB_TOOLS_NAMED;
        co->tool_name = json_string_value(json_object_get(tc, "name"));
    } else {
        ob_srv_error(r, 400, NULL, "tool_choice.type must be auto, any, none or tool (with a name)");
        return false;
    }
    bool off = false;
    if (!ob_srv_get_bool(tc, "disable_parallel_tool_use", &off, r)) return false;
    co->parallel = !off;
    return true;
}

/* Anthropic tools ({name, description, input_schema}) as OpenAI function tools (wire.h). */
json_t *ob_anth_tools_openai(json_t *tools, ob_resp *r) {
    json_t *t = json_array();
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool) {
        json_t *name = json_object_get(tool, "name");
        if (!json_is_string(name)) {
            json_decref(t);
            ob_srv_error(r, 400, NULL, "tools[%zu] needs a name", i);
            return NULL;
        }
        json_t *fn = json_pack("{s:O}", "name", name);
        if (json_object_get(tool, "description")) json_object_set(fn, "description", json_object_get(tool, "description"));
        json_t *schema = json_object_get(tool, "input_schema");
        json_object_set_new(fn, "parameters", schema ? json_incref(schema) : json_object());
        json_array_append_new(t, json_pack("{s:s,s:o}", "type", "function", "function", fn));
    }
    return t;
}

/* tools, tool_choice, thinking: as the OpenAI-shaped options the template takes. */
static bool chat_opts(json_t *body, ob_chat_opts *co, json_t **tools_out, ob_resp *r) {
    memset(co, 0, sizeof *co);
    co->add_generation_prompt = true;
    co->enable_thinking = -1;
    co->parallel = true;
    *tools_out = NULL;
    json_t *th = json_object_get(body, "thinking");
    const char *tht = json_string_value(json_object_get(th, "type"));
    if (tht) co->enable_thinking = !strcmp(tht, "enabled");
    json_t *tools = json_object_get(body, "tools");
    if (tools && !json_is_null(tools) && !json_is_array(tools)) {
        ob_srv_error(r, 400, NULL, "'tools' must be an array");
        return false;
    }
    if (json_array_size(tools)) {
        if (!(co->tools = *tools_out = ob_anth_tools_openai(tools, r))) return false;
    }
    if (!tool_choice(body, co, r) || !ob_gen_tool_choice_check(co, r)) return false;
    if (co->tool_choice == OB_TOOLS_NONE) co->tools = NULL;
    return true;
}

/* The prompt of a Messages body, for generation or counting; *tools (the tools in the
 * OpenAI shape co points to) is the caller's to release. */
static int32_t *body_prompt(ob_server_state *s, json_t *body, ob_chat_opts *co, json_t **tools, ob_chat_out *out,
                            int *n, ob_resp *r) {
    json_t *chat = NULL;
    int32_t *ids = NULL;
    if (chat_opts(body, co, tools, r) && (chat = ob_anth_chat_messages(body, r)))
        ids = ob_oai_chat_prompt(s, chat, co, out, n, r);
    json_decref(chat);
    return ids;
}

static json_t *usage(const ob_task_out *o, int out_tokens) {
    return json_pack("{s:i,s:i,s:i,s:i}", "input_tokens", o->n_prompt, "output_tokens", out_tokens,
                     "cache_creation_input_tokens", 0, "cache_read_input_tokens", o->n_cached);
}

/* Content blocks of a streamed reply open as their kind of content comes (thinking, text,
 * a tool_use per call); the first one is followed by the ping, as Anthropic's API sends. */
enum { BLK_NONE, BLK_THINKING, BLK_TEXT, BLK_TOOL };

typedef struct am_ctx { ob_gen_stream *gs; char **buf; size_t *len; } am_ctx;

static void blk_close(am_ctx *c) {
    if (!c->gs->blk_kind) return;
    ob_srv_sse(c->buf, c->len, "content_block_stop",
               json_pack("{s:s,s:i}", "type", "content_block_stop", "index", c->gs->blk_index));
    c->gs->blk_index++;
    c->gs->blk_kind = BLK_NONE;
}

static void blk_open(am_ctx *c, int kind, json_t *block) {
    blk_close(c);
    ob_srv_sse(c->buf, c->len, "content_block_start", json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index",
                                                                c->gs->blk_index, "content_block", block));
    if (!c->gs->blk_any) ob_srv_sse(c->buf, c->len, "ping", json_pack("{s:s}", "type", "ping"));
    c->gs->blk_any = true;
    c->gs->blk_kind = kind;
}

static void blk_delta(am_ctx *c, json_t *delta) {
    ob_srv_sse(c->buf, c->len, "content_block_delta", json_pack("{s:s,s:i,s:o}", "type", "content_block_delta", "index",
                                                                c->gs->blk_index, "delta", delta));
}

static void am_event(void *ud, const ob_tc_event *e) {
    am_ctx *c = ud;
    switch (e->kind) {
    case OB_TC_EV_REASONING:
        if (c->gs->blk_kind != BLK_THINKING)
            blk_open(c, BLK_THINKING, json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", ""));
        blk_delta(c, json_pack("{s:s,s:o}", "type", "thinking_delta", "thinking", ob_srv_jstr(e->text, e->len)));
        break;
    case OB_TC_EV_CONTENT:
        if (c->gs->blk_kind != BLK_TEXT) blk_open(c, BLK_TEXT, json_pack("{s:s,s:s}", "type", "text", "text", ""));
        blk_delta(c, json_pack("{s:s,s:o}", "type", "text_delta", "text", ob_srv_jstr(e->text, e->len)));
        break;
    case OB_TC_EV_CALL: {
        char id[64];
        tool_id(e->id, id, sizeof id);
        blk_open(c, BLK_TOOL, json_pack("{s:s,s:s,s:o,s:{}}", "type", "tool_use", "id", id, "name",
                                        ob_srv_jstr(e->name, strlen(e->name)), "input"));
        break;
    }
    case OB_TC_EV_ARGS:
        if (c->gs->blk_kind == BLK_TOOL)
            blk_delta(c, json_pack("{s:s,s:o}", "type", "input_json_delta", "partial_json", ob_srv_jstr(e->text, e->len)));
        break;
    }
}

static void msg_fmt(ob_gen_stream *gs, const ob_task_out *o, char **buf, size_t *len) {
    if (!gs->started) {
        json_t *msg = json_pack("{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:o}", "id", gs->id, "type", "message", "role",
                                "assistant", "model", gs->s->model_id, "content", "stop_reason", "stop_sequence",
                                "usage", usage(o, 0));
        ob_srv_sse(buf, len, "message_start", json_pack("{s:s,s:o}", "type", "message_start", "message", msg));
    }
    if (o->done && o->finish == OB_FINISH_ERROR) {
        ob_srv_sse(buf, len, "error", json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", "api_error",
                                                "message", o->err));
        return;
    }
    am_ctx c = {gs, buf, len};
    ob_reply_feed(&gs->rp, o->text ? o->text : "", o->text_len, o->done, am_event, &c);
    if (o->done) {
        if (!gs->blk_any) blk_open(&c, BLK_TEXT, json_pack("{s:s,s:s}", "type", "text", "text", ""));
        blk_close(&c);
        ob_srv_sse(buf, len, "message_delta",
                   json_pack("{s:s,s:{s:s,s:o},s:{s:i}}", "type", "message_delta", "delta", "stop_reason",
                             stop_reason(o, gs->rp.n_calls), "stop_sequence", stop_seq(o), "usage", "output_tokens",
                             o->n_gen));
        ob_srv_sse(buf, len, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    }
}

/* A whole reply's content blocks: thinking, text, tool_use. */
static json_t *content_blocks(const ob_reply_all *a) {
    json_t *blocks = json_array();
    if (a->reasoning_len)
        json_array_append_new(blocks, json_pack("{s:s,s:o,s:s}", "type", "thinking", "thinking",
                                                ob_srv_jstr(a->reasoning, a->reasoning_len), "signature", ""));
    if (a->content_len || (!a->n_calls && !a->reasoning_len))
        json_array_append_new(blocks, json_pack("{s:s,s:o}", "type", "text", "text", ob_srv_jstr(a->content, a->content_len)));
    for (int k = 0; k < a->n_calls; k++) {
        char id[64];
        tool_id(a->calls[k].id, id, sizeof id);
        json_t *in = json_loadb(a->calls[k].args, a->calls[k].args_len, 0, NULL);
        if (!json_is_object(in)) {
            json_decref(in);
            in = json_object();
        }
        json_array_append_new(blocks, json_pack("{s:s,s:s,s:o,s:o}", "type", "tool_use", "id", id, "name",
                                                ob_srv_jstr(a->calls[k].name, strlen(a->calls[k].name)), "input", in));
    }
    return blocks;
}

static void messages(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    json_t *body = ob_srv_parse_body(rq, r);
    if (!body) return;
    ob_gen_req g;
    ob_chat_opts co;
    ob_chat_out out;
    json_t *tools = NULL;
    int32_t *ids = NULL;
    int n;
    memset(&g, 0, sizeof g);
    if (!ob_gen_parse(s, body, OB_GEN_ANTHROPIC, &g, r) || !(ids = body_prompt(s, body, &co, &tools, &out, &n, r)))
        goto out;
    g.think_open = out.think_open;
    if (!ob_gen_tools_setup(s, &co, &out, &g, r)) goto out;
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
        ob_reply_all a;
        ob_reply_whole(&g, res.text, res.text_len, &a);
        json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:o,s:o}", "id", id, "type", "message", "role", "assistant",
                              "model", s->model_id, "content", content_blocks(&a), "stop_reason",
                              stop_reason(&res.last, a.n_calls), "stop_sequence", stop_seq(&res.last), "usage",
                              usage(&res.last, res.last.n_gen));
        ob_reply_all_free(&a);
        ob_srv_json(r, 200, j);
    }
    ob_gen_result_clear(&res);
out:
    ob_gen_req_clear(&g);
    json_decref(tools);
    free(ids);
    json_decref(body);
}

/* POST /v1/messages/count_tokens: {"input_tokens": n} of the prompt the body would give. */
static void count_tokens(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    json_t *body = ob_srv_parse_body(rq, r);
    if (!body) return;
    int n;
    ob_chat_opts co;
    json_t *tools = NULL;
    int32_t *ids = body_prompt(s, body, &co, &tools, NULL, &n, r);
    if (ids) ob_srv_json(r, 200, json_pack("{s:i}", "input_tokens", n));
    json_decref(tools);
    free(ids);
    json_decref(body);
}

bool ob_srv_route_anthropic(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    if (!strcmp(rq->path, "/v1/messages/count_tokens") || !strcmp(rq->path, "/messages/count_tokens")) {
        if (strcmp(rq->method, "POST")) ob_srv_error(r, 405, NULL, "use POST");
        else if (ob_oai_ready(s, r)) count_tokens(s, rq, r);
        return true;
    }
    if (strcmp(rq->path, "/v1/messages") && strcmp(rq->path, "/messages")) return false;
    if (strcmp(rq->method, "POST")) ob_srv_error(r, 405, NULL, "use POST");
    else if (ob_gen_ready(s, r)) messages(s, rq, r);
    return true;
}
