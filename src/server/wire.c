/* OpenAI chat <-> Anthropic Messages (wire.h): requests, whole replies, SSE streams and
 * error bodies. What one format has and the other lacks is dropped (logprobs, n > 1,
 * thinking signatures); everything a chat with tools needs is carried: system text,
 * text and image content, tool definitions and choice, tool calls and their results,
 * stop sequences and reasons, usage. */
#include "server/wire.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/common.h"
#include "server/gen.h"

#define DEFAULT_MAX_TOKENS 4096 /* Anthropic requires max_tokens; OpenAI has no default to copy */

void ob_wire_error(ob_resp *r, ob_wire_fmt fmt, int status, const char *fmt_str, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt_str);
    vsnprintf(msg, sizeof msg, fmt_str, ap);
    va_end(ap);
    if (fmt == OB_WIRE_OPENAI) {
        ob_srv_error(r, status, status == 502 ? "upstream_error" : NULL, "%s", msg);
        return;
    }
    const char *type = status == 502 ? "api_error" : status == 401 ? "authentication_error"
                       : status == 404 ? "not_found_error" : status >= 500 ? "api_error" : "invalid_request_error";
    ob_srv_json(r, status, json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error", "type", type, "message",
                                     ob_srv_jstr(msg, strlen(msg))));
}

/* ---- stop reasons ------------------------------------------------------------------- */

static const char *finish_to_stop(const char *f) {
    if (!f) return "end_turn";
    if (!strcmp(f, "length")) return "max_tokens";
    if (!strcmp(f, "tool_calls") || !strcmp(f, "function_call")) return "tool_use";
    if (!strcmp(f, "content_filter")) return "refusal";
    return "end_turn";
}

static const char *stop_to_finish(const char *s) {
    if (!s) return "stop";
    if (!strcmp(s, "max_tokens")) return "length";
    if (!strcmp(s, "tool_use")) return "tool_calls";
    if (!strcmp(s, "refusal")) return "content_filter";
    return "stop";
}

/* ---- requests: OpenAI -> Anthropic -------------------------------------------------- */

/* An OpenAI image_url part as an Anthropic image block (a data: URL becomes base64). */
static json_t *image_block(json_t *part) {
    json_t *iu = json_object_get(part, "image_url");
    const char *url = json_string_value(json_is_object(iu) ? json_object_get(iu, "url") : iu);
    if (!url) url = "";
    const char *comma = strchr(url, ',');
    if (!strncmp(url, "data:", 5) && comma && comma - url > 12 && !strncmp(comma - 7, ";base64", 7))
        return json_pack("{s:s,s:{s:s,s:s%,s:s}}", "type", "image", "source", "type", "base64", "media_type", url + 5,
                         (size_t)(comma - 7 - (url + 5)), "data", comma + 1);
    return json_pack("{s:s,s:{s:s,s:s}}", "type", "image", "source", "type", "url", "url", url);
}

/* Appends blocks as a turn of role; a turn of the same role as the last one joins it
 * (Anthropic wants user and assistant turns to alternate). Takes blocks. */
static void push_turn(json_t *msgs, const char *role, json_t *blocks) {
    if (!json_array_size(blocks)) {
        json_decref(blocks);
        return;
    }
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    const char *lr = json_string_value(json_object_get(last, "role"));
    if (lr && !strcmp(lr, role)) {
        json_array_extend(json_object_get(last, "content"), blocks);
        json_decref(blocks);
        return;
    }
    json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", role, "content", blocks));
}

static bool tool_calls_blocks(json_t *calls, size_t i, json_t *blocks, ob_resp *r) {
    size_t k;
    json_t *tc;
    json_array_foreach(calls, k, tc) {
        json_t *fn = json_object_get(tc, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        if (!name) {
            ob_srv_error(r, 400, NULL, "messages[%zu].tool_calls[%zu] needs function.name", i, k);
            return false;
        }
        json_t *in = args && *args ? json_loads(args, 0, NULL) : json_object();
        if (!json_is_object(in)) {
            json_decref(in);
            ob_srv_error(r, 400, NULL, "messages[%zu].tool_calls[%zu]: arguments are not a JSON object", i, k);
            return false;
        }
        json_array_append_new(blocks, json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id",
                                                json_string_value(json_object_get(tc, "id")) ?: "", "name", name,
                                                "input", in));
    }
    return true;
}

/* OpenAI messages as Anthropic's: system and developer turns gather into *sys, tool
 * results become user turns of tool_result blocks. */
static json_t *anth_messages(json_t *msgs, char **sys, size_t *sys_len, ob_resp *r) {
    if (!json_is_array(msgs)) {
        ob_srv_error(r, 400, NULL, "'messages' must be an array");
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *c = json_object_get(m, "content");
        char what[64];
        snprintf(what, sizeof what, "messages[%zu].content", i);
        bool ok = true;
        if (role && (!strcmp(role, "system") || !strcmp(role, "developer"))) {
            if (*sys_len) ob_srv_buf_add(sys, sys_len, "\n\n", 2);
            ok = ob_srv_joined_text(c, what, false, sys, sys_len, r);
        } else if (role && !strcmp(role, "user")) {
            json_t *b = json_array();
            ok = ob_srv_convert_parts(c, what, false, "image_url", image_block, b, r);
            push_turn(out, "user", ok ? b : (json_decref(b), json_array()));
        } else if (role && !strcmp(role, "assistant")) {
            json_t *b = json_array();
            ok = ob_srv_convert_parts(c, what, false, "image_url", image_block, b, r) && tool_calls_blocks(json_object_get(m, "tool_calls"), i, b, r);
            push_turn(out, "assistant", ok ? b : (json_decref(b), json_array()));
        } else if (role && !strcmp(role, "tool")) {
            char *t = NULL;
            size_t tl = 0;
            ok = ob_srv_joined_text(c, what, false, &t, &tl, r);
            if (ok)
                push_turn(out, "user", json_pack("[{s:s,s:s,s:s%}]", "type", "tool_result", "tool_use_id",
                                                 json_string_value(json_object_get(m, "tool_call_id")) ?: "",
                                                 "content", t ? t : "", tl));
            free(t);
        } else {
            ob_srv_error(r, 400, NULL, "messages[%zu].role must be system, developer, user, assistant or tool", i);
            ok = false;
        }
        if (!ok) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

static json_t *anth_tools(json_t *tools, ob_resp *r) {
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        json_t *name = json_object_get(fn, "name");
        if (!json_is_string(name)) {
            json_decref(out);
            ob_srv_error(r, 400, NULL, "tools[%zu] needs function.name", i);
            return NULL;
        }
        json_t *o = json_pack("{s:O}", "name", name);
        json_t *d = json_object_get(fn, "description"), *p = json_object_get(fn, "parameters");
        if (json_is_string(d)) json_object_set(o, "description", d);
        json_object_set_new(o, "input_schema", json_is_object(p) ? json_incref(p) : json_pack("{s:s}", "type", "object"));
        json_array_append_new(out, o);
    }
    return out;
}

/* tool_choice "auto" | "none" | "required" | {"type":"function","function":{"name"}},
 * with parallel_tool_calls. */
static bool anth_tool_choice(json_t *body, json_t *out, ob_resp *r) {
    json_t *tc = json_object_get(body, "tool_choice");
    json_t *par = json_object_get(body, "parallel_tool_calls");
    json_t *choice = NULL;
    const char *s = json_string_value(tc);
    if (s && !strcmp(s, "auto")) choice = json_pack("{s:s}", "type", "auto");
    else if (s && !strcmp(s, "none")) choice = json_pack("{s:s}", "type", "none");
    else if (s && !strcmp(s, "required")) choice = json_pack("{s:s}", "type", "any");
    else if (json_is_object(tc) && json_is_string(json_object_get(json_object_get(tc, "function"), "name")))
        choice = json_pack("{s:s,s:O}", "type", "tool", "name", json_object_get(json_object_get(tc, "function"), "name"));
    else if (tc && !json_is_null(tc)) {
        ob_srv_error(r, 400, NULL, "tool_choice must be auto, none, required or a named function");
        return false;
    }
    if (json_is_false(par)) {
        if (!choice) choice = json_pack("{s:s}", "type", "auto");
        json_object_set_new(choice, "disable_parallel_tool_use", json_true());
    }
    if (choice) json_object_set_new(out, "tool_choice", choice);
    return true;
}

json_t *ob_wire_req_to_anthropic(json_t *body, const char *model, ob_resp *r) {
    char *sys = NULL;
    size_t sys_len = 0;
    json_t *msgs = anth_messages(json_object_get(body, "messages"), &sys, &sys_len, r);
    if (!msgs) {
        free(sys);
        return NULL;
    }
    json_t *mt = json_object_get(body, "max_completion_tokens");
    if (!json_is_integer(mt)) mt = json_object_get(body, "max_tokens");
    json_t *out = json_pack("{s:s,s:o,s:I}", "model", model, "messages", msgs, "max_tokens",
                            json_is_integer(mt) ? json_integer_value(mt) : (json_int_t)DEFAULT_MAX_TOKENS);
    if (sys_len) json_object_set_new(out, "system", ob_srv_jstr(sys, sys_len));
    free(sys);
    json_t *v;
    if (json_is_number(v = json_object_get(body, "temperature"))) /* OpenAI's 0..2, Anthropic's 0..1 */
        json_object_set_new(out, "temperature", json_real(OB_MIN(json_number_value(v), 1.0)));
    if (json_is_number(v = json_object_get(body, "top_p"))) json_object_set(out, "top_p", v);
    if (json_is_integer(v = json_object_get(body, "top_k"))) json_object_set(out, "top_k", v);
    if (json_is_string(v = json_object_get(body, "stop"))) json_object_set_new(out, "stop_sequences", json_pack("[O]", v));
    else if (json_is_array(v)) json_object_set(out, "stop_sequences", v);
    if (json_is_true(json_object_get(body, "stream"))) json_object_set_new(out, "stream", json_true());
    if (json_is_string(v = json_object_get(body, "user"))) json_object_set_new(out, "metadata", json_pack("{s:O}", "user_id", v));
    json_t *tools = json_object_get(body, "tools");
    if (json_array_size(tools)) {
        json_t *t = anth_tools(tools, r);
        if (!t) goto fail;
        json_object_set_new(out, "tools", t);
    }
    if (!anth_tool_choice(body, out, r)) goto fail;
    return out;
fail:
    json_decref(out);
    return NULL;
}

/* ---- requests: Anthropic -> OpenAI -------------------------------------------------- */

/* anthropic.c's messages as a cloud API takes them: no reasoning_content, and an
 * assistant turn with no text has content null. */
static void tidy_openai_messages(json_t *msgs) {
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        json_object_del(m, "reasoning_content");
        json_t *c = json_object_get(m, "content");
        const char *role = json_string_value(json_object_get(m, "role"));
        if (json_is_array(c) && !json_array_size(c))
            json_object_set_new(m, "content", role && !strcmp(role, "assistant") ? json_null() : json_string(""));
    }
}

json_t *ob_wire_req_to_openai(json_t *body, const char *model, ob_resp *r) {
    json_t *msgs = ob_anth_chat_messages(body, r);
    if (!msgs) return NULL;
    tidy_openai_messages(msgs);
    json_t *out = json_pack("{s:s,s:o}", "model", model, "messages", msgs);
    json_t *v;
    if (json_is_integer(v = json_object_get(body, "max_tokens"))) json_object_set(out, "max_tokens", v);
    if (json_is_number(v = json_object_get(body, "temperature"))) json_object_set(out, "temperature", v);
    if (json_is_number(v = json_object_get(body, "top_p"))) json_object_set(out, "top_p", v);
    if (json_is_array(v = json_object_get(body, "stop_sequences")) && json_array_size(v)) json_object_set(out, "stop", v);
    if (json_is_true(json_object_get(body, "stream"))) {
        json_object_set_new(out, "stream", json_true());
        json_object_set_new(out, "stream_options", json_pack("{s:b}", "include_usage", 1));
    }
    if (json_is_string(v = json_object_get(json_object_get(body, "metadata"), "user_id"))) json_object_set(out, "user", v);
    json_t *tools = json_object_get(body, "tools");
    if (json_array_size(tools)) {
        json_t *t = ob_anth_tools_openai(tools, r);
        if (!t) goto fail;
        json_object_set_new(out, "tools", t);
    }
    json_t *tc = json_object_get(body, "tool_choice");
    const char *ty = json_string_value(json_object_get(tc, "type"));
    if (ty) {
        if (!strcmp(ty, "auto")) json_object_set_new(out, "tool_choice", json_string("auto"));
        else if (!strcmp(ty, "any")) json_object_set_new(out, "tool_choice", json_string("required"));
        else if (!strcmp(ty, "none")) json_object_set_new(out, "tool_choice", json_string("none"));
        else if (!strcmp(ty, "tool") && json_is_string(json_object_get(tc, "name")))
            json_object_set_new(out, "tool_choice", json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name",
                                                              json_object_get(tc, "name")));
        else {
            ob_srv_error(r, 400, NULL, "tool_choice.type must be auto, any, none or tool (with a name)");
            goto fail;
        }
        if (json_is_true(json_object_get(tc, "disable_parallel_tool_use")))
            json_object_set_new(out, "parallel_tool_calls", json_false());
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

/* ---- whole replies ------------------------------------------------------------------ */

static json_int_t int_of(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? json_integer_value(v) : 0;
}

/* Anthropic's input tokens: those read from or written to its cache count too. */
static json_int_t anth_input_tokens(json_t *usage) {
    return int_of(usage, "input_tokens") + int_of(usage, "cache_read_input_tokens") +
           int_of(usage, "cache_creation_input_tokens");
}

static json_t *oai_usage(json_int_t in, json_int_t out) {
    return json_pack("{s:I,s:I,s:I}", "prompt_tokens", in, "completion_tokens", out, "total_tokens", in + out);
}

static json_t *reply_to_openai(json_t *reply, const char *model) {
    char *text = NULL, *thinking = NULL;
    size_t tl = 0, hl = 0;
    json_t *calls = json_array();
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(reply, "content"), i, b) {
        const char *ty = json_string_value(json_object_get(b, "type"));
        json_t *t;
        if (!ty) continue;
        if (!strcmp(ty, "text") && json_is_string(t = json_object_get(b, "text"))) {
            ob_srv_buf_add(&text, &tl, json_string_value(t), json_string_length(t));
        } else if (!strcmp(ty, "thinking") && json_is_string(t = json_object_get(b, "thinking"))) {
            ob_srv_buf_add(&thinking, &hl, json_string_value(t), json_string_length(t));
        } else if (!strcmp(ty, "tool_use")) {
            json_t *in = json_object_get(b, "input");
            char *args = json_dumps(in ? in : json_object(), JSON_COMPACT);
            json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id",
                                                   json_string_value(json_object_get(b, "id")) ?: "", "type", "function",
                                                   "function", "name", json_string_value(json_object_get(b, "name")) ?: "",
                                                   "arguments", args ? args : "{}"));
            free(args);
        }
    }
    json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content",
                            text || !json_array_size(calls) ? ob_srv_jstr(text ? text : "", tl) : json_null());
    if (thinking) json_object_set_new(msg, "reasoning_content", ob_srv_jstr(thinking, hl));
    if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
    json_decref(calls);
    free(text);
    free(thinking);
    json_t *usage = json_object_get(reply, "usage");
    const char *stop = json_string_value(json_object_get(reply, "stop_reason"));
    return json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:n,s:s}],s:o}", "id",
                     json_string_value(json_object_get(reply, "id")) ?: "chatcmpl-upstream", "object",
                     "chat.completion", "created", (json_int_t)time(NULL), "model", model, "choices", "index", 0,
                     "message", msg, "logprobs", "finish_reason", stop_to_finish(stop), "usage",
                     oai_usage(anth_input_tokens(usage), int_of(usage, "output_tokens")));
}

static json_t *reply_to_anthropic(json_t *reply, const char *model) {
    json_t *ch = json_array_get(json_object_get(reply, "choices"), 0);
    json_t *msg = json_object_get(ch, "message");
    json_t *blocks = json_array();
    json_t *v;
    if (json_is_string(v = json_object_get(msg, "reasoning_content")) && json_string_length(v))
        json_array_append_new(blocks, json_pack("{s:s,s:O,s:s}", "type", "thinking", "thinking", v, "signature", ""));
    if (json_is_string(v = json_object_get(msg, "content")) && json_string_length(v))
        json_array_append_new(blocks, json_pack("{s:s,s:O}", "type", "text", "text", v));
    size_t i;
    json_t *tc;
    json_array_foreach(json_object_get(msg, "tool_calls"), i, tc) {
        json_t *fn = json_object_get(tc, "function");
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        json_t *in = args && *args ? json_loads(args, 0, NULL) : NULL;
        if (!json_is_object(in)) {
            json_decref(in);
            in = json_object();
        }
        json_array_append_new(blocks, json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id",
                                                json_string_value(json_object_get(tc, "id")) ?: "", "name",
                                                json_string_value(json_object_get(fn, "name")) ?: "", "input", in));
    }
    if (!json_array_size(blocks)) json_array_append_new(blocks, json_pack("{s:s,s:s}", "type", "text", "text", ""));
    json_t *usage = json_object_get(reply, "usage");
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:n,s:{s:I,s:I}}", "id",
                     json_string_value(json_object_get(reply, "id")) ?: "msg_upstream", "type", "message", "role",
                     "assistant", "model", model, "content", blocks, "stop_reason",
                     finish_to_stop(json_string_value(json_object_get(ch, "finish_reason"))), "stop_sequence", "usage",
                     "input_tokens", int_of(usage, "prompt_tokens"), "output_tokens", int_of(usage, "completion_tokens"));
}

json_t *ob_wire_reply(json_t *reply, ob_wire_fmt to, const char *model) {
    return to == OB_WIRE_OPENAI ? reply_to_openai(reply, model) : reply_to_anthropic(reply, model);
}

/* ---- streamed replies --------------------------------------------------------------- */

enum { BLK_NONE, BLK_THINKING, BLK_TEXT, BLK_TOOL };

struct ob_wire_sse {
    ob_wire_fmt to;
    char *model;
    bool include_usage;
    char *pend;             /* upstream bytes short of a whole event (CRs dropped) */
    size_t plen;
    bool started, finished;
    char id[128];
    char stop[32];          /* the reason in the client's words, once known */
    json_int_t in_tok, out_tok;
    /* to Anthropic: the open content block */
    int blk_index, blk_kind;
    bool blk_any;
    json_int_t tool_index;  /* the OpenAI index of the open tool_use block */
    /* to OpenAI: tool calls seen so far (the open one is n_tools - 1) */
    int n_tools;
    time_t created;
};

ob_wire_sse *ob_wire_sse_new(ob_wire_fmt to, const char *model, bool include_usage) {
    ob_wire_sse *w = calloc(1, sizeof *w);
    if (!w || !(w->model = strdup(model))) {
        free(w);
        return NULL;
    }
    w->to = to;
    w->include_usage = include_usage;
    w->created = time(NULL);
    return w;
}

void ob_wire_sse_free(ob_wire_sse *w) {
    if (!w) return;
    free(w->model);
    free(w->pend);
    free(w);
}

typedef struct sse_out { char **buf; size_t *len; } sse_out;

/* -- OpenAI chunks to Anthropic events -- */

static void a_close(ob_wire_sse *w, sse_out *o) {
    if (w->blk_kind == BLK_NONE) return;
    ob_srv_sse(o->buf, o->len, "content_block_stop",
               json_pack("{s:s,s:i}", "type", "content_block_stop", "index", w->blk_index));
    w->blk_index++;
    w->blk_kind = BLK_NONE;
}

static void a_open(ob_wire_sse *w, sse_out *o, int kind, json_t *block) {
    a_close(w, o);
    ob_srv_sse(o->buf, o->len, "content_block_start",
               json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index", w->blk_index, "content_block", block));
    w->blk_kind = kind;
    w->blk_any = true;
}

static void a_delta(ob_wire_sse *w, sse_out *o, json_t *delta) {
    ob_srv_sse(o->buf, o->len, "content_block_delta",
               json_pack("{s:s,s:i,s:o}", "type", "content_block_delta", "index", w->blk_index, "delta", delta));
}

static void a_start(ob_wire_sse *w, sse_out *o) {
    if (w->started) return;
    w->started = true;
    if (!w->id[0]) ob_gen_id(w->id, sizeof w->id, "msg_");
    json_t *msg = json_pack("{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:{s:I,s:i}}", "id", w->id, "type", "message", "role",
                            "assistant", "model", w->model, "content", "stop_reason", "stop_sequence", "usage",
                            "input_tokens", w->in_tok, "output_tokens", 0);
    ob_srv_sse(o->buf, o->len, "message_start", json_pack("{s:s,s:o}", "type", "message_start", "message", msg));
    ob_srv_sse(o->buf, o->len, "ping", json_pack("{s:s}", "type", "ping"));
}

static void a_finish(ob_wire_sse *w, sse_out *o) {
    a_start(w, o);
    if (!w->blk_any) a_open(w, o, BLK_TEXT, json_pack("{s:s,s:s}", "type", "text", "text", ""));
    a_close(w, o);
    ob_srv_sse(o->buf, o->len, "message_delta",
               json_pack("{s:s,s:{s:s,s:n},s:{s:I,s:I}}", "type", "message_delta", "delta", "stop_reason",
                         w->stop[0] ? w->stop : "end_turn", "stop_sequence", "usage", "input_tokens", w->in_tok,
                         "output_tokens", w->out_tok));
    ob_srv_sse(o->buf, o->len, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    w->finished = true;
}

static void a_error(ob_wire_sse *w, sse_out *o, const char *msg) {
    ob_srv_sse(o->buf, o->len, "error", json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error", "type", "api_error",
                                                  "message", ob_srv_jstr(msg, strlen(msg))));
    w->finished = true;
}

static void from_openai(ob_wire_sse *w, sse_out *o, const char *data) {
    if (!strcmp(data, "[DONE]")) {
        a_finish(w, o);
        return;
    }
    json_t *c = json_loads(data, 0, NULL);
    if (!json_is_object(c)) {
        json_decref(c);
        return;
    }
    json_t *err = json_object_get(c, "error");
    if (err) {
        const char *m = json_string_value(json_object_get(err, "message"));
        a_error(w, o, m ? m : "the upstream's stream reported an error");
        json_decref(c);
        return;
    }
    const char *id = json_string_value(json_object_get(c, "id"));
    if (id && !w->id[0]) snprintf(w->id, sizeof w->id, "%s", id);
    json_t *usage = json_object_get(c, "usage");
    if (json_is_object(usage)) {
        w->in_tok = int_of(usage, "prompt_tokens");
        w->out_tok = int_of(usage, "completion_tokens");
    }
    a_start(w, o);
    json_t *ch = json_array_get(json_object_get(c, "choices"), 0);
    json_t *d = json_object_get(ch, "delta"), *v;
    if (json_is_string(v = json_object_get(d, "reasoning_content")) && json_string_length(v)) {
        if (w->blk_kind != BLK_THINKING)
            a_open(w, o, BLK_THINKING, json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", ""));
        a_delta(w, o, json_pack("{s:s,s:O}", "type", "thinking_delta", "thinking", v));
    }
    if (json_is_string(v = json_object_get(d, "content")) && json_string_length(v)) {
        if (w->blk_kind != BLK_TEXT) a_open(w, o, BLK_TEXT, json_pack("{s:s,s:s}", "type", "text", "text", ""));
        a_delta(w, o, json_pack("{s:s,s:O}", "type", "text_delta", "text", v));
    }
    size_t i;
    json_t *tc;
    json_array_foreach(json_object_get(d, "tool_calls"), i, tc) {
        json_int_t idx = int_of(tc, "index");
        json_t *fn = json_object_get(tc, "function");
        const char *tid = json_string_value(json_object_get(tc, "id"));
        const char *name = json_string_value(json_object_get(fn, "name"));
        if ((tid || name) && (w->blk_kind != BLK_TOOL || w->tool_index != idx)) {
            char gen[48];
            if (!tid) {
                ob_gen_id(gen, sizeof gen, "toolu_");
                tid = gen;
            }
            a_open(w, o, BLK_TOOL, json_pack("{s:s,s:s,s:s,s:{}}", "type", "tool_use", "id", tid, "name",
                                             name ? name : "", "input"));
            w->tool_index = idx;
        }
        json_t *args = json_object_get(fn, "arguments");
        if (json_is_string(args) && json_string_length(args) && w->blk_kind == BLK_TOOL && w->tool_index == idx)
            a_delta(w, o, json_pack("{s:s,s:O}", "type", "input_json_delta", "partial_json", args));
    }
    const char *fin = json_string_value(json_object_get(ch, "finish_reason"));
    if (fin) snprintf(w->stop, sizeof w->stop, "%s", finish_to_stop(fin));
    json_decref(c);
}

/* -- Anthropic events to OpenAI chunks -- */

static void o_chunk(ob_wire_sse *w, sse_out *o, json_t *delta, const char *finish) {
    json_t *ch = json_pack("{s:i,s:o,s:n}", "index", 0, "delta", delta, "logprobs");
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    ob_srv_sse(o->buf, o->len, NULL,
               json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", w->id, "object", "chat.completion.chunk", "created",
                         (json_int_t)w->created, "model", w->model, "choices", ch));
}

static void o_start(ob_wire_sse *w, sse_out *o) {
    if (w->started) return;
    w->started = true;
    if (!w->id[0]) ob_gen_id(w->id, sizeof w->id, "chatcmpl-");
    o_chunk(w, o, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL);
}

static void o_finish(ob_wire_sse *w, sse_out *o) {
    o_start(w, o);
    o_chunk(w, o, json_object(), w->stop[0] ? w->stop : "stop");
    if (w->include_usage)
        ob_srv_sse(o->buf, o->len, NULL,
                   json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", w->id, "object", "chat.completion.chunk", "created",
                             (json_int_t)w->created, "model", w->model, "choices", "usage",
                             oai_usage(w->in_tok, w->out_tok)));
    ob_srv_buf_add(o->buf, o->len, "data: [DONE]\n\n", 14);
    w->finished = true;
}

static void o_error(ob_wire_sse *w, sse_out *o, const char *msg) {
    ob_srv_sse(o->buf, o->len, NULL, json_pack("{s:{s:i,s:o,s:s}}", "error", "code", 502, "message",
                                               ob_srv_jstr(msg, strlen(msg)), "type", "upstream_error"));
    w->finished = true;
}

static void from_anthropic(ob_wire_sse *w, sse_out *o, const char *data) {
    json_t *e = json_loads(data, 0, NULL);
    const char *ty = json_string_value(json_object_get(e, "type"));
    if (!ty) {
        json_decref(e);
        return;
    }
    json_t *v;
    if (!strcmp(ty, "message_start")) {
        json_t *m = json_object_get(e, "message");
        const char *id = json_string_value(json_object_get(m, "id"));
        if (id) snprintf(w->id, sizeof w->id, "%s", id);
        w->in_tok = anth_input_tokens(json_object_get(m, "usage"));
        o_start(w, o);
    } else if (!strcmp(ty, "content_block_start")) {
        o_start(w, o);
        json_t *b = json_object_get(e, "content_block");
        const char *bt = json_string_value(json_object_get(b, "type"));
        if (bt && !strcmp(bt, "tool_use")) {
            json_t *call = json_pack("{s:i,s:s,s:s,s:{s:s,s:s}}", "index", w->n_tools, "id",
                                     json_string_value(json_object_get(b, "id")) ?: "", "type", "function", "function",
                                     "name", json_string_value(json_object_get(b, "name")) ?: "", "arguments", "");
            w->n_tools++;
            o_chunk(w, o, json_pack("{s:[o]}", "tool_calls", call), NULL);
        } else if (bt && !strcmp(bt, "text") && json_string_length(v = json_object_get(b, "text"))) {
            o_chunk(w, o, json_pack("{s:O}", "content", v), NULL);
        }
    } else if (!strcmp(ty, "content_block_delta")) {
        o_start(w, o);
        json_t *d = json_object_get(e, "delta");
        const char *dt = json_string_value(json_object_get(d, "type"));
        if (!dt) {
        } else if (!strcmp(dt, "text_delta") && json_is_string(v = json_object_get(d, "text"))) {
            o_chunk(w, o, json_pack("{s:O}", "content", v), NULL);
        } else if (!strcmp(dt, "thinking_delta") && json_is_string(v = json_object_get(d, "thinking"))) {
            o_chunk(w, o, json_pack("{s:O}", "reasoning_content", v), NULL);
        } else if (!strcmp(dt, "input_json_delta") && w->n_tools && json_is_string(v = json_object_get(d, "partial_json")) &&
                   json_string_length(v)) {
            o_chunk(w, o, json_pack("{s:[{s:i,s:{s:O}}]}", "tool_calls", "index", w->n_tools - 1, "function", "arguments", v),
                    NULL);
        }
    } else if (!strcmp(ty, "message_delta")) {
        const char *s = json_string_value(json_object_get(json_object_get(e, "delta"), "stop_reason"));
        if (s) snprintf(w->stop, sizeof w->stop, "%s", stop_to_finish(s));
        json_t *u = json_object_get(e, "usage");
        if (json_is_integer(json_object_get(u, "output_tokens"))) w->out_tok = int_of(u, "output_tokens");
        if (json_is_integer(json_object_get(u, "input_tokens"))) w->in_tok = anth_input_tokens(u);
    } else if (!strcmp(ty, "message_stop")) {
        o_finish(w, o);
    } else if (!strcmp(ty, "error")) {
        const char *m = json_string_value(json_object_get(json_object_get(e, "error"), "message"));
        o_error(w, o, m ? m : "the upstream's stream reported an error");
    }
    json_decref(e);
}

/* One whole SSE event (its lines, CRs gone): its data lines joined, then translated. */
static void on_event(ob_wire_sse *w, sse_out *o, char *ev, size_t n) {
    char *data = NULL;
    size_t dl = 0;
    for (char *l = ev; l < ev + n;) {
        char *e = memchr(l, '\n', (size_t)(ev + n - l));
        size_t ll = e ? (size_t)(e - l) : (size_t)(ev + n - l);
        if (ll >= 5 && !strncmp(l, "data:", 5)) {
            const char *v = l + 5;
            size_t vl = ll - 5;
            if (vl && *v == ' ') {
                v++;
                vl--;
            }
            if (data) ob_srv_buf_add(&data, &dl, "\n", 1);
            ob_srv_buf_add(&data, &dl, v, vl); /* allocates even when vl is 0 */
        }
        l += ll + 1;
    }
    if (data && !w->finished) (w->to == OB_WIRE_ANTHROPIC ? from_openai : from_anthropic)(w, o, data);
    free(data);
}

void ob_wire_sse_feed(ob_wire_sse *w, const char *data, size_t n, bool at_end, char **out, size_t *out_len) {
    sse_out o = {out, out_len};
    for (size_t i = 0; i < n;) { /* drop CRs: "\r\n\r\n" ends an event as "\n\n" does */
        size_t k = i;
        while (k < n && data[k] != '\r') k++;
        ob_srv_buf_add(&w->pend, &w->plen, data + i, k - i);
        i = k + 1;
    }
    size_t start = 0;
    for (size_t k = 0; k + 1 < w->plen; k++) {
        if (w->pend[k] != '\n' || w->pend[k + 1] != '\n') continue;
        on_event(w, &o, w->pend + start, k - start);
        start = k + 2;
        k++;
    }
    if (start) {
        memmove(w->pend, w->pend + start, w->plen - start);
        w->plen -= start;
    }
    if (!at_end) return;
    if (w->plen) on_event(w, &o, w->pend, w->plen); /* a last event without its blank line */
    w->plen = 0;
    if (!w->finished && w->to == OB_WIRE_ANTHROPIC && w->stop[0]) {
        a_finish(w, &o); /* a finish_reason came: an upstream that sends no [DONE] */
    } else if (!w->finished) {
        const char *msg = "the upstream's stream ended before its last event";
        if (w->to == OB_WIRE_ANTHROPIC) a_error(w, &o, msg);
        else o_error(w, &o, msg);
    }
}
