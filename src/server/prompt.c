/* Chat messages to prompt text through the model's template (or --chat-template): the
 * messages checked and put in the shape templates take, tools and template variables,
 * an assistant prefill, and thinking turned on or off (--reasoning). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/jinja.h"
#include "core/common.h"
#include "engine/chat_model.h"
#include "server/gen.h"

/* Thinking markers of the template families that have them: open, close. */
static const char *const k_think[][2] = {
    {"<think>", "</think>"},
    {"<|START_THINKING|>", "<|END_THINKING|>"},
    {"<seed:think>", "</seed:think>"},
    {"[THINK]", "[/THINK]"},
};

static bool is_media_part(const char *ty) {
    return !strcmp(ty, "image_url") || !strcmp(ty, "input_image") || !strcmp(ty, "image") ||
           !strcmp(ty, "input_audio") || !strcmp(ty, "audio") || !strcmp(ty, "file");
}

/* content: a string, null, or an array of parts whose text parts are joined with a blank
 * line (as llama-server does for templates that take strings). Media parts cannot be
 * read by a text-only model: that is llama-server's 500, "image input is not supported". */
static json_t *flat_content(json_t *c, size_t i, ob_resp *r) {
    if (!c || json_is_null(c)) return json_string("");
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) {
        ob_srv_error(r, 400, NULL, "messages[%zu].content must be a string or an array of parts", i);
        return NULL;
    }
    char *text = NULL;
    size_t tl = 0, k;
    json_t *part;
    json_array_foreach(c, k, part) {
        const char *ty = json_string_value(json_object_get(part, "type"));
        json_t *t = json_object_get(part, "text");
        if (json_is_object(part) && ty && is_media_part(ty)) {
            free(text);
            ob_srv_error(r, 500, "server_error", "image input is not supported by this server: %s parts need a "
                         "multimodal model, and none is loaded", ty);
            return NULL;
        }
        if (!json_is_object(part) || (ty && strcmp(ty, "text") && strcmp(ty, "input_text")) || !json_is_string(t)) {
            free(text);
            ob_srv_error(r, 400, NULL, "messages[%zu].content[%zu] must be a text part ({\"type\":\"text\",\"text\":...})",
                         i, k);
            return NULL;
        }
        if (k) ob_srv_buf_add(&text, &tl, "\n\n", 2);
        ob_srv_buf_add(&text, &tl, json_string_value(t), json_string_length(t));
    }
    json_t *s = json_stringn(text ? text : "", tl);
    free(text);
    return s;
}

/* Tool calls as templates read them: function.arguments an object when it is JSON text. */
static json_t *norm_tool_calls(json_t *tc, size_t i, ob_resp *r) {
    if (!json_is_array(tc)) {
        ob_srv_error(r, 400, NULL, "messages[%zu].tool_calls must be an array", i);
        return NULL;
    }
    json_t *out = json_deep_copy(tc);
    size_t k;
    json_t *call;
    json_array_foreach(out, k, call) {
        json_t *fn = json_object_get(call, "function");
        if (!json_is_object(call) || !json_is_object(fn) || !json_is_string(json_object_get(fn, "name"))) {
            json_decref(out);
            ob_srv_error(r, 400, NULL, "messages[%zu].tool_calls[%zu] must have a function with a name", i, k);
            return NULL;
        }
        json_t *args = json_object_get(fn, "arguments");
        if (json_is_string(args)) {
            json_t *parsed = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
            if (json_is_object(parsed)) json_object_set_new(fn, "arguments", parsed);
            else json_decref(parsed);
        }
    }
    return out;
}

/* Checks roles and puts each message in the shape templates take. Returns a new array or
 * NULL with r filled. */
static json_t *normalize_messages(json_t *messages, ob_resp *r) {
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        json_t *role = json_object_get(m, "role");
        if (!json_is_object(m) || !json_is_string(role)) {
            ob_srv_error(r, 400, NULL, "messages[%zu] must be an object with a string 'role'", i);
            goto fail;
        }
        /* OpenAI's roles; "developer" is its newer name for system instructions and reaches
         * the template as "system" (templates know only the four) */
        const char *rv = json_string_value(role);
        bool developer = !strcmp(rv, "developer");
        if (!developer && strcmp(rv, "system") && strcmp(rv, "user") && strcmp(rv, "assistant") && strcmp(rv, "tool")) {
            ob_srv_error(r, 400, NULL, "messages[%zu]: role '%.64s' is not system, developer, user, assistant or tool", i, rv);
            goto fail;
        }
        json_t *nm = json_deep_copy(m);
        if (developer) json_object_set_new(nm, "role", json_string("system"));
        json_t *c = flat_content(json_object_get(m, "content"), i, r);
        if (!c) {
            json_decref(nm);
            goto fail;
        }
        json_object_set_new(nm, "content", c);
        json_t *tc = json_object_get(m, "tool_calls");
        if (tc && !json_is_null(tc)) {
            json_t *ntc = norm_tool_calls(tc, i, r);
            if (!ntc) {
                json_decref(nm);
                goto fail;
            }
            json_object_set_new(nm, "tool_calls", ntc);
        } else if (tc) {
            json_object_del(nm, "tool_calls");
        }
        json_array_append_new(out, nm);
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

/* tool_choice: "auto" / "none" / "required", {"type":"function","function":{"name"}}
 * (Chat Completions) or {"type":"function","name"} (Responses). */
static bool parse_tool_choice(json_t *tc, ob_chat_opts *o, ob_resp *r) {
    if (!tc || json_is_null(tc)) return true;
    const char *v = json_string_value(tc);
    if (v) {
        if (!strcmp(v, "auto")) o->tool_choice = OB_TOOLS_AUTO;
        else if (!strcmp(v, "none")) o->tool_choice = OB_TOOLS_NONE;
        else if (!strcmp(v, "required")) o->tool_choice = OB_TOOLS_REQUIRED;
        else {
            ob_srv_error(r, 400, NULL, "Invalid tool_choice: %.64s (auto, none, required or a function)", v);
            return false;
        }
        return true;
    }
    const char *ty = json_string_value(json_object_get(tc, "type"));
    json_t *name = json_object_get(json_object_get(tc, "function"), "name");
    if (!name) name = json_object_get(tc, "name");
    if (!json_is_object(tc) || !ty || strcmp(ty, "function") || !json_is_string(name)) {
        ob_srv_error(r, 400, NULL, "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                     "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        return false;
    }
    o->tool_choice = OB_TOOLS_NAMED;
    o->tool_name = json_string_value(name);
    return true;
}

bool ob_gen_tool_choice_check(const ob_chat_opts *o, ob_resp *r) {
    if (o->tool_choice == OB_TOOLS_REQUIRED && !o->tools) {
        ob_srv_error(r, 400, NULL, "tool_choice \"required\" needs 'tools'");
        return false;
    }
    if (o->tool_choice == OB_TOOLS_NAMED && !ob_tc_find_tool(o->tools, o->tool_name, strlen(o->tool_name))) {
        ob_srv_error(r, 400, NULL, "tool_choice names the function '%.64s', which is not among the tools", o->tool_name);
        return false;
    }
    return true;
}

bool ob_gen_chat_opts(ob_server_state *s, json_t *body, ob_chat_opts *o, ob_resp *r) {
    memset(o, 0, sizeof *o);
    o->add_generation_prompt = true;
    o->enable_thinking = -1;
    o->parallel = true;
    bool agp_given = json_is_boolean(json_object_get(body, "add_generation_prompt"));
    if (!ob_srv_get_bool(body, "add_generation_prompt", &o->add_generation_prompt, r)) return false;
    if (!ob_srv_get_bool(body, "continue_final_message", &o->continue_final, r)) return false;
    if (o->continue_final && agp_given && o->add_generation_prompt) {
        ob_srv_error(r, 400, NULL, "'continue_final_message' and 'add_generation_prompt' cannot both be true");
        return false;
    }
    json_t *tools = json_object_get(body, "tools");
    if (tools && !json_is_null(tools) && !json_is_array(tools)) {
        ob_srv_error(r, 400, NULL, "'tools' must be an array");
        return false;
    }
    o->tools = json_array_size(tools) ? tools : NULL;
    if (!parse_tool_choice(json_object_get(body, "tool_choice"), o, r)) return false;
    if (!ob_srv_get_bool(body, "parallel_tool_calls", &o->parallel, r)) return false;
    if (!ob_gen_tool_choice_check(o, r)) return false;
    if (o->tool_choice == OB_TOOLS_NONE) o->tools = NULL; /* the template never sees them */
    json_t *kw = json_object_get(body, "chat_template_kwargs");
    if (kw && !json_is_null(kw) && !json_is_object(kw)) {
        ob_srv_error(r, 400, NULL, "'chat_template_kwargs' must be an object");
        return false;
    }
    o->kwargs = json_is_object(kw) ? kw : NULL;
    json_t *et = json_object_get(o->kwargs, "enable_thinking");
    if (et && !json_is_boolean(et)) {
        ob_srv_error(r, 400, NULL, "invalid type for \"enable_thinking\" (expected boolean)");
        return false;
    }
    const char *effort = json_string_value(json_object_get(body, "reasoning_effort"));
    if (effort && !strcmp(effort, "none")) o->enable_thinking = 0;
    (void)s;
    return true;
}

/* Today's date as templates read it: date_string "26 Jul 2024" (Llama 3.x), datetime
 * "Jul 26 2024" (FireFunction). */
static json_t *today_string(const char *fmt) {
    char buf[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    size_t n = strftime(buf, sizeof buf, fmt, &tm);
    return json_stringn(buf, n);
}

static json_t *token_text(const ob_tokenizer *t, int id) {
    size_t n = 0;
    const char *p = id >= 0 ? ob_token_piece(t, id, &n) : NULL;
    return p ? ob_srv_jstr(p, n) : json_string("");
}

/* Index into k_think of the pair the template writes, or -1. */
static int think_pair(const char *tmpl) {
    for (size_t i = 0; i < OB_ARRAY_LEN(k_think); i++)
        if (strstr(tmpl, k_think[i][0]) && strstr(tmpl, k_think[i][1])) return (int)i;
    return -1;
}

static size_t trimmed_len(const char *t) {
    size_t n = strlen(t);
    while (n && (t[n - 1] == ' ' || t[n - 1] == '\n' || t[n - 1] == '\r' || t[n - 1] == '\t')) n--;
    return n;
}

/* A template that shows the model no tools (GENERIC, neither "tools" nor FireFunction's
 * "functions" in it): the tools and the <tool_call> syntax go into the system message
 * (a new one first when there is none), as llama-server's template polyfill does. */
static bool add_tool_instructions(json_t *msgs, json_t *tools) {
    char *ins = ob_tc_generic_instructions(tools);
    if (!ins) return false;
    json_t *first = json_array_get(msgs, 0);
    const char *role = json_string_value(json_object_get(first, "role"));
    bool ok;
    if (role && !strcmp(role, "system")) {
        const char *c = json_string_value(json_object_get(first, "content"));
        size_t n = strlen(c ? c : "") + strlen(ins) + 4;
        char *joined = malloc(n);
        if (joined) snprintf(joined, n, "%s%s%s", c ? c : "", c && *c ? "\n\n" : "", ins);
        ok = joined && !json_object_set_new(first, "content", json_string(joined));
        free(joined);
    } else {
        ok = !json_array_insert_new(msgs, 0, json_pack("{s:s,s:s}", "role", "system", "content", ins));
    }
    free(ins);
    return ok;
}

static bool ends_with(const char *t, size_t n, const char *tag) {
    size_t k = strlen(tag);
    return n >= k && !memcmp(t + n - k, tag, k);
}

char *ob_gen_render_chat(ob_server_state *s, json_t *messages, const ob_chat_opts *o, ob_chat_out *co, ob_resp *r) {
    if (co) memset(co, 0, sizeof *co);
    const char *tmpl = s->cfg->chat_template ? s->cfg->chat_template : ob_model_template_or_builtin(s->model);
    if (!tmpl) {
        ob_srv_error(r, 500, NULL, "the model has no chat template; start the server with --chat-template-file");
        return NULL;
    }
    json_t *msgs = normalize_messages(messages, r);
    if (!msgs) return NULL;
    ob_tc_format tcf = ob_tc_detect(tmpl);
    if (o->tools && tcf == OB_TC_GENERIC && !strstr(tmpl, "tools") && !strstr(tmpl, "functions") &&
        !add_tool_instructions(msgs, o->tools)) {
        json_decref(msgs);
        ob_srv_error(r, 500, NULL, "out of memory");
        return NULL;
    }
    /* A final assistant message is a prefill: the reply continues it (llama-server's
     * default, and what continue_final_message asks for explicitly). */
    size_t n = json_array_size(msgs);
    const char *last_role = n ? json_string_value(json_object_get(json_array_get(msgs, n - 1), "role")) : NULL;
    const char *prev_role = n > 1 ? json_string_value(json_object_get(json_array_get(msgs, n - 2), "role")) : NULL;
    bool last_asst = last_role && !strcmp(last_role, "assistant");
    if (last_asst && prev_role && !strcmp(prev_role, "assistant")) {
        json_decref(msgs);
        ob_srv_error(r, 400, NULL, "cannot have 2 or more assistant messages at the end of the list");
        return NULL;
    }
    json_t *prefill = NULL;
    bool agp = o->add_generation_prompt;
    if (last_asst && (agp || o->continue_final) && !json_object_get(json_array_get(msgs, n - 1), "tool_calls")) {
        prefill = json_incref(json_object_get(json_array_get(msgs, n - 1), "content"));
        json_array_remove(msgs, n - 1);
        agp = true;
    }
    /* enable_thinking is always defined, true unless turned off (templates test it bare) */
    int think = o->enable_thinking;
    if (think < 0) think = s->cfg->reasoning != OB_REASONING_OFF;
    /* --chat-template-kwargs, then the request's own over them (llama-server's order) */
    const json_t *srv_kw = s->cfg->template_kwargs;
    json_t *kw_think = json_object_get(o->kwargs, "enable_thinking");
    if (!kw_think) kw_think = json_object_get(srv_kw, "enable_thinking");
    if (kw_think) think = json_is_true(kw_think);

    json_t *ctx = json_object();
    json_object_set_new(ctx, "messages", msgs);
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(agp));
    if (o->tools) json_object_set(ctx, "tools", o->tools);
    json_object_set_new(ctx, "bos_token", token_text(s->tok, ob_token_bos(s->tok)));
    json_object_set_new(ctx, "eos_token", token_text(s->tok, ob_token_eos(s->tok)));
    json_object_set_new(ctx, "date_string", today_string("%d %b %Y"));
    json_object_set_new(ctx, "datetime", today_string("%b %d %Y"));
    json_object_set_new(ctx, "enable_thinking", json_boolean(think));
    /* FireFunction-style templates read the tools as one JSON text named `functions`
     * (llama-server sets it for them): given to every template, "" without tools */
    char *fn = o->tools ? json_dumps(o->tools, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_object_set_new(ctx, "functions", json_string(fn ? fn : ""));
    free(fn);
    /* a copy: the server's object is shared by every request's thread */
    if (srv_kw) json_object_update_new(ctx, json_deep_copy(srv_kw));
    if (o->kwargs) json_object_update(ctx, o->kwargs);
    char err[512];
    char *out = NULL;
    ob_status st = ob_jinja_render(tmpl, strlen(tmpl), ctx, &out, err, sizeof err);
    json_decref(ctx);
    if (st != OB_OK) {
        json_decref(prefill);
        ob_srv_error(r, 400, NULL, "chat template: %s", err);
        return NULL;
    }
    size_t len = strlen(out);
    /* Thinking off: a template that opens a thought at the start of the reply gets it
     * closed at once, and one that would let the model open it gets an empty one. */
    int tp = think_pair(tmpl);
    if (tp >= 0 && think == 0 && agp && !prefill) {
        size_t tl = trimmed_len(out);
        if (ends_with(out, tl, k_think[tp][0])) {
            ob_srv_buf_add(&out, &len, k_think[tp][1], strlen(k_think[tp][1]));
        } else if (!ends_with(out, tl, k_think[tp][1])) {
            ob_srv_buf_add(&out, &len, k_think[tp][0], strlen(k_think[tp][0]));
            ob_srv_buf_add(&out, &len, k_think[tp][1], strlen(k_think[tp][1]));
        }
    }
    if (prefill) {
        ob_srv_buf_add(&out, &len, json_string_value(prefill), json_string_length(prefill));
        json_decref(prefill);
    } else if (co && agp && ends_with(out, trimmed_len(out), k_think[0][0])) {
        co->think_open = true; /* the reply starts inside a thought */
    }
    if (co) {
        co->tc_format = tcf;
        co->think = co->think_open ? 2 : tp == 0 && think && agp && !prefill ? 1 : 0;
    }
    return out;
}
