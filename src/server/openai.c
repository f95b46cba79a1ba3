/* OpenAI routes: /v1/models, /v1/chat/completions, /v1/completions, in OpenAI's shapes
 * (plus llama-server's "timings"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/common.h"
#include "grammar/grammar.h"
#include "server/gen.h"

json_t *ob_oai_token_json(ob_server_state *s, int32_t id, float lp);
bool ob_oai_ready(ob_server_state *s, ob_resp *r);

bool ob_oai_ready(ob_server_state *s, ob_resp *r) {
    int st = __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE);
    if (st == 1) return true;
    if (st == 0) ob_srv_error(r, 503, NULL, "Loading model");
    else if (st == 2) ob_srv_error(r, 503, NULL, "model unloaded; POST /api/v1/load to load it again");
    else ob_srv_error(r, 503, NULL, "the server is shutting down");
    return false;
}

/* {"token","logprob","bytes"} for one token. */
json_t *ob_oai_token_json(ob_server_state *s, int32_t id, float lp) {
    size_t n = 0;
    const char *p = ob_token_piece(s->tok, id, &n);
    if (!p) n = 0;
    json_t *bytes = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(bytes, json_integer((unsigned char)p[i]));
    return json_pack("{s:o,s:f,s:o}", "token", ob_srv_jstr(p ? p : "", n), "logprob", (double)lp, "bytes", bytes);
}

static json_t *chat_logprobs(ob_server_state *s, const ob_tok_rec *t, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) {
        json_t *e = ob_oai_token_json(s, t[i].id, t[i].logprob);
        json_t *top = json_array();
        for (int k = 0; k < t[i].n_top; k++) json_array_append_new(top, ob_oai_token_json(s, t[i].top_id[k], t[i].top_lp[k]));
        json_object_set_new(e, "top_logprobs", top);
        json_array_append_new(a, e);
    }
    return json_pack("{s:o,s:n}", "content", a, "refusal");
}

/* Legacy completions logprobs: parallel arrays. */
static json_t *compl_logprobs(ob_server_state *s, const ob_tok_rec *t, int n, size_t base_offset) {
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t off = base_offset;
    for (int i = 0; i < n; i++) {
        size_t len = 0;
        const char *p = ob_token_piece(s->tok, t[i].id, &len);
        if (!p) len = 0;
        json_array_append_new(toks, ob_srv_jstr(p ? p : "", len));
        json_array_append_new(lps, json_real(t[i].logprob));
        json_t *top = json_object();
        for (int k = 0; k < t[i].n_top; k++) {
            size_t tl = 0;
            const char *tp = ob_token_piece(s->tok, t[i].top_id[k], &tl);
            json_t *key = ob_srv_jstr(tp ? tp : "", tp ? tl : 0);
            json_object_set_new(top, json_string_value(key), json_real(t[i].top_lp[k]));
            json_decref(key);
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += len;
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}

static json_t *usage_json(const ob_task_out *o, int n_choices, int total_gen) {
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", o->n_prompt, "completion_tokens", total_gen,
                     "total_tokens", o->n_prompt + total_gen, "prompt_tokens_details", "cached_tokens", o->n_cached);
}

static json_t *chunk_base(ob_gen_stream *gs, bool chat) {
    return json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", gs->id, "object", chat ? "chat.completion.chunk" : "text_completion",
                     "created", (json_int_t)gs->created, "model", gs->s->model_id, "system_fingerprint", ob_build_info());
}

/* What one streamed step adds to a chat reply: text, reasoning, tool-call deltas. */
typedef struct oai_delta {
    ob_gtext content, reasoning;
    json_t *calls;      /* delta.tool_calls entries, or NULL */
} oai_delta;

static void oai_event(void *ud, const ob_tc_event *e) {
    oai_delta *d = ud;
    if (e->kind == OB_TC_EV_CONTENT) {
        ob_gtext_add(&d->content, e->text, e->len);
        return;
    }
    if (e->kind == OB_TC_EV_REASONING) {
        ob_gtext_add(&d->reasoning, e->text, e->len);
        return;
    }
    if (!d->calls) d->calls = json_array();
    size_t n = json_array_size(d->calls);
    json_t *last = n ? json_array_get(d->calls, n - 1) : NULL;
    if (e->kind == OB_TC_EV_CALL) { /* llama-server's first delta of a call: id, type, name */
        json_array_append_new(d->calls, json_pack("{s:i,s:s,s:s,s:{s:o,s:s}}", "index", e->index, "id", e->id, "type",
                                                  "function", "function", "name", ob_srv_jstr(e->name, strlen(e->name)),
                                                  "arguments", ""));
        return;
    }
    if (last && json_integer_value(json_object_get(last, "index")) == e->index) { /* more of the same call */
        json_t *fn = json_object_get(last, "function");
        json_t *a = json_object_get(fn, "arguments");
        char *joined = NULL;
        size_t jl = 0;
        ob_srv_buf_add(&joined, &jl, json_string_value(a), json_string_length(a));
        ob_srv_buf_add(&joined, &jl, e->text, e->len);
        json_object_set_new(fn, "arguments", ob_srv_jstr(joined, jl));
        free(joined);
        return;
    }
    json_array_append_new(d->calls, json_pack("{s:i,s:{s:o}}", "index", e->index, "function", "arguments",
                                              ob_srv_jstr(e->text, e->len)));
}

/* A reply's message: content (null when only calls), reasoning_content, tool_calls. */
static json_t *chat_message(const ob_reply_all *a) {
    json_t *msg = json_pack("{s:s}", "role", "assistant");
    json_object_set_new(msg, "content", a->n_calls && !a->content_len ? json_null()
                                        : ob_srv_jstr(a->content, a->content_len));
    if (a->reasoning_len) json_object_set_new(msg, "reasoning_content", ob_srv_jstr(a->reasoning, a->reasoning_len));
    if (a->n_calls) {
        json_t *calls = json_array();
        for (int k = 0; k < a->n_calls; k++)
            json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:o,s:o}}", "id", a->calls[k].id, "type", "function",
                                                   "function", "name", ob_srv_jstr(a->calls[k].name, strlen(a->calls[k].name)),
                                                   "arguments", ob_srv_jstr(a->calls[k].args, a->calls[k].args_len)));
        json_object_set_new(msg, "tool_calls", calls);
    }
    return msg;
}

/* "tool_calls" when the reply made calls (and was not cut by the length limit). */
static const char *chat_finish(const ob_task_out *o, int n_calls) {
    return n_calls && o->finish != OB_FINISH_LENGTH ? "tool_calls" : ob_gen_finish_str(o);
}

static void chat_fmt(ob_gen_stream *gs, const ob_task_out *o, char **buf, size_t *len) {
    if (!gs->started) {
        json_t *c = chunk_base(gs, true);
        json_object_set_new(c, "choices", json_pack("[{s:i,s:{s:s,s:n},s:n,s:n}]", "index", 0, "delta", "role",
                                                    "assistant", "content", "logprobs", "finish_reason"));
        ob_srv_sse(buf, len, NULL, c);
    }
    if (o->done && o->finish == OB_FINISH_ERROR) {
        json_t *e = json_pack("{s:{s:i,s:s,s:s}}", "error", "code", o->err_status ? o->err_status : 500,
                              "message", o->err, "type", "server_error");
        ob_srv_sse(buf, len, NULL, e);
        return;
    }
    oai_delta d = {0};
    ob_reply_feed(&gs->rp, o->text ? o->text : "", o->text_len, o->done, oai_event, &d);
    size_t cl = d.content.n, rl = d.reasoning.n;
    const char *content = d.content.s, *reason = d.reasoning.s;
    if (cl || rl || d.calls || (gs->logprobs && o->n_toks)) {
        json_t *delta = json_object();
        if (rl) json_object_set_new(delta, "reasoning_content", ob_srv_jstr(reason, rl));
        if (cl || (!rl && !d.calls)) json_object_set_new(delta, "content", ob_srv_jstr(content ? content : "", cl));
        if (d.calls) json_object_set_new(delta, "tool_calls", json_incref(d.calls));
        json_t *ch = json_pack("{s:i,s:o,s:n}", "index", 0, "delta", delta, "finish_reason");
        json_object_set_new(ch, "logprobs", gs->logprobs ? chat_logprobs(gs->s, o->toks, o->n_toks) : json_null());
        json_t *c = chunk_base(gs, true);
        json_object_set_new(c, "choices", json_pack("[o]", ch));
        if (gs->timings_per_token) json_object_set_new(c, "timings", ob_gen_timings(o));
        ob_srv_sse(buf, len, NULL, c);
    }
    free(d.content.s);
    free(d.reasoning.s);
    json_decref(d.calls);
    if (o->done) {
        json_t *c = chunk_base(gs, true);
        json_object_set_new(c, "choices", json_pack("[{s:i,s:{},s:n,s:s}]", "index", 0, "delta", "logprobs",
                                                    "finish_reason", chat_finish(o, gs->rp.n_calls)));
        json_object_set_new(c, "timings", ob_gen_timings(o));
        ob_srv_sse(buf, len, NULL, c);
        if (gs->include_usage) {
            c = chunk_base(gs, true);
            json_object_set_new(c, "choices", json_array());
            json_object_set_new(c, "usage", usage_json(o, 1, o->n_gen));
            json_object_set_new(c, "timings", ob_gen_timings(o));
            ob_srv_sse(buf, len, NULL, c);
        }
        ob_srv_buf_add(buf, len, "data: [DONE]\n\n", 14);
    }
}

static void compl_fmt(ob_gen_stream *gs, const ob_task_out *o, char **buf, size_t *len) {
    if (o->done && o->finish == OB_FINISH_ERROR) {
        json_t *e = json_pack("{s:{s:i,s:s,s:s}}", "error", "code", o->err_status ? o->err_status : 500,
                              "message", o->err, "type", "server_error");
        ob_srv_sse(buf, len, NULL, e);
        return;
    }
    if (o->text_len || (gs->logprobs && o->n_toks)) {
        json_t *ch = json_pack("{s:o,s:i,s:n}", "text", ob_srv_jstr(o->text ? o->text : "", o->text_len), "index", 0,
                               "finish_reason");
        json_object_set_new(ch, "logprobs", gs->logprobs ? compl_logprobs(gs->s, o->toks, o->n_toks, 0) : json_null());
        json_t *c = chunk_base(gs, false);
        json_object_set_new(c, "choices", json_pack("[o]", ch));
        if (gs->timings_per_token) json_object_set_new(c, "timings", ob_gen_timings(o));
        ob_srv_sse(buf, len, NULL, c);
    }
    if (o->done) {
        json_t *c = chunk_base(gs, false);
        json_object_set_new(c, "choices", json_pack("[{s:s,s:i,s:n,s:s}]", "text", "", "index", 0, "logprobs",
                                                    "finish_reason", ob_gen_finish_str(o)));
        json_object_set_new(c, "timings", ob_gen_timings(o));
        ob_srv_sse(buf, len, NULL, c);
        if (gs->include_usage) {
            c = chunk_base(gs, false);
            json_object_set_new(c, "choices", json_array());
            json_object_set_new(c, "usage", usage_json(o, 1, o->n_gen));
            json_object_set_new(c, "timings", ob_gen_timings(o));
            ob_srv_sse(buf, len, NULL, c);
        }
        ob_srv_buf_add(buf, len, "data: [DONE]\n\n", 14);
    }
}

/* Submits n choices of each prompt and answers, streamed or whole; choice k of prompt i
 * has index i * n + k. */
static void run_generation(ob_server_state *s, const ob_req *rq, ob_resp *r, ob_gen_req *g, int32_t *const *prompts,
                           const int *n_prompts, int np, bool chat) {
    int nt = np * g->n;
    if (g->stream && nt > 1) {
        ob_srv_error(r, 400, NULL, "'stream' takes one prompt and 'n' = 1");
        return;
    }
    if (nt > OB_GEN_MAX_N) {
        ob_srv_error(r, 400, NULL, "at most %d choices in all (prompts x n)", OB_GEN_MAX_N);
        return;
    }
    ob_task *tasks[OB_GEN_MAX_N] = {0};
    for (int i = 0; i < nt; i++) {
        ob_task_params p = ob_gen_task_params(g, prompts[i / g->n], n_prompts[i / g->n], i % g->n);
        tasks[i] = ob_gen_submit(s, &p, r);
        if (!tasks[i]) {
            for (int j = 0; j < i; j++) ob_sched_release(s->sched, tasks[j]);
            return;
        }
    }
    if (g->stream) {
        ob_gen_stream *gs;
        *r = ob_gen_stream_start(s, rq, tasks[0], chat ? chat_fmt : compl_fmt, g, &gs);
        if (r->stream) ob_gen_id(gs->id, sizeof gs->id, chat ? "chatcmpl-" : "cmpl-");
        return;
    }
    ob_gen_result res[OB_GEN_MAX_N];
    bool ok = ob_gen_wait(s, rq, tasks, nt, res, r);
    for (int i = 0; i < nt; i++) ob_sched_release(s->sched, tasks[i]);
    if (!ok) {
        for (int i = 0; i < nt; i++) ob_gen_result_clear(&res[i]);
        return;
    }
    char id[48];
    ob_gen_id(id, sizeof id, chat ? "chatcmpl-" : "cmpl-");
    json_t *choices = json_array();
    int total_gen = 0;
    for (int i = 0; i < nt; i++) {
        json_t *ch;
        if (chat) {
            ob_reply_all a;
            ob_reply_whole(g, res[i].text, res[i].text_len, &a);
            ch = json_pack("{s:i,s:o,s:s}", "index", i, "message", chat_message(&a), "finish_reason",
                           chat_finish(&res[i].last, a.n_calls));
            ob_reply_all_free(&a);
            json_object_set_new(ch, "logprobs", g->logprobs ? chat_logprobs(s, res[i].toks, res[i].n_toks) : json_null());
        } else {
            ch = json_pack("{s:o,s:i,s:s}", "text", ob_srv_jstr(res[i].text, res[i].text_len), "index", i,
                           "finish_reason", ob_gen_finish_str(&res[i].last));
            json_object_set_new(ch, "logprobs", g->logprobs ? compl_logprobs(s, res[i].toks, res[i].n_toks, 0) : json_null());
        }
        json_array_append_new(choices, ch);
        total_gen += res[i].last.n_gen;
    }
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:o}", "id", id, "object", chat ? "chat.completion" : "text_completion",
                          "created", (json_int_t)time(NULL), "model", s->model_id, "system_fingerprint", ob_build_info(),
                          "choices", choices);
    int n_prompt_all = 0;
    for (int i = 0; i < np; i++) n_prompt_all += n_prompts[i];
    json_t *usage = usage_json(&res[0].last, nt, total_gen);
    json_object_set_new(usage, "prompt_tokens", json_integer(n_prompt_all));
    json_object_set_new(usage, "total_tokens", json_integer(n_prompt_all + total_gen));
    json_object_set_new(o, "usage", usage);
    json_object_set_new(o, "timings", ob_gen_timings(&res[0].last));
    if (g->verbose)
        json_object_set_new(o, "__verbose", json_pack("{s:o,s:o}", "prompt", ob_gen_prompt_json(s, prompts[0], n_prompts[0]),
                                                      "content", ob_srv_jstr(res[0].text, res[0].text_len)));
    for (int i = 0; i < nt; i++) ob_gen_result_clear(&res[i]);
    ob_srv_json(r, 200, o);
}

/* Chat messages -> prompt tokens (template rendered, BOS once). */
int32_t *ob_oai_chat_prompt(ob_server_state *s, json_t *messages, const ob_chat_opts *co, ob_chat_out *out, int *n,
                            ob_resp *r);
int32_t *ob_oai_chat_prompt(ob_server_state *s, json_t *messages, const ob_chat_opts *co, ob_chat_out *out, int *n,
                            ob_resp *r) {
    char *text = ob_gen_render_chat(s, messages, co, out, r);
    if (!text) return NULL;
    int32_t *ids = ob_gen_tokenize(s, text, strlen(text), true, true, n, r);
    free(text);
    if (ids && *n >= 2 && ids[0] == ob_token_bos(s->tok) && ids[1] == ids[0]) {
        memmove(ids, ids + 1, (size_t)(*n - 1) * sizeof *ids);
        (*n)--;
    }
    return ids;
}

/* The prompt tokens of a chat body (OpenAI shape), for generation or counting. */
static int32_t *chat_body_prompt(ob_server_state *s, json_t *body, ob_chat_opts *co, ob_chat_out *out, int *n,
                                 ob_resp *r) {
    json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs)) {
        ob_srv_error(r, 400, NULL, "'messages' must be an array");
        return NULL;
    }
    if (!ob_gen_chat_opts(s, body, co, r)) return NULL;
    return ob_oai_chat_prompt(s, msgs, co, out, n, r);
}

static void chat_completions(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    json_t *body = ob_srv_parse_body(rq, r);
    if (!body) return;
    ob_gen_req g;
    ob_chat_opts co;
    ob_chat_out out;
    int n;
    int32_t *ids = NULL;
    memset(&g, 0, sizeof g);
    if (ob_gen_parse(s, body, OB_GEN_OPENAI_CHAT, &g, r) && (ids = chat_body_prompt(s, body, &co, &out, &n, r))) {
        g.think_open = out.think_open;
        if (ob_gen_tools_setup(s, &co, &out, &g, r)) run_generation(s, rq, r, &g, &ids, &n, 1, true);
    }
    ob_gen_req_clear(&g);
    free(ids);
    json_decref(body);
}

/* POST /v1/chat/completions/input_tokens: the prompt's length, nothing generated. */
static void chat_input_tokens(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    json_t *body = ob_srv_parse_body(rq, r);
    if (!body) return;
    int n;
    ob_chat_opts co;
    int32_t *ids = chat_body_prompt(s, body, &co, NULL, &n, r);
    if (ids) ob_srv_json(r, 200, json_pack("{s:s,s:i}", "object", "response.input_tokens", "input_tokens", n));
    free(ids);
    json_decref(body);
}

static void completions(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    json_t *body = ob_srv_parse_body(rq, r);
    if (!body) return;
    ob_gen_req g;
    json_t *prompt = json_object_get(body, "prompt");
    if (!prompt) {
        ob_srv_error(r, 400, NULL, "'prompt' is required");
    } else if (ob_gen_parse(s, body, OB_GEN_OPENAI_COMPL, &g, r)) {
        ob_gen_prompts pp;
        if (ob_gen_prompts_parse(s, prompt, &pp, r)) run_generation(s, rq, r, &g, pp.ids, pp.len, pp.n, false);
        ob_gen_prompts_free(&pp);
    }
    json_decref(body);
}

static void models(ob_server_state *s, ob_resp *r) {
    json_t *meta = json_object();
    if (__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) == 1) {
        ob_model_info mi;
        ob_model_get_info(s->model, &mi);
        json_object_set_new(meta, "n_vocab", json_integer(mi.n_vocab));
        json_object_set_new(meta, "n_ctx_train", json_integer(mi.n_ctx_train));
        json_object_set_new(meta, "n_embd", json_integer(mi.n_embd));
        json_object_set_new(meta, "n_params", json_integer(mi.n_params));
        json_object_set_new(meta, "size", json_integer((json_int_t)mi.file_size));
    }
    json_t *m = json_pack("{s:s,s:s,s:I,s:s,s:o}", "id", s->model_id, "object", "model", "created",
                          (json_int_t)time(NULL), "owned_by", "onebit", "meta", meta);
    /* llama-server's --alias (comma list) and --tags */
    json_t *aliases = json_array(), *tags = json_array();
    const char *lists[2] = {s->cfg->alias, s->cfg->tags};
    json_t *arrs[2] = {aliases, tags};
    for (int k = 0; k < 2; k++) {
        for (const char *p = lists[k]; p && *p;) {
            size_t n = strcspn(p, ",");
            if (n) json_array_append_new(arrs[k], ob_srv_jstr(p, n));
            p += n;
            if (*p) p++;
        }
    }
    json_object_set_new(m, "aliases", aliases);
    json_object_set_new(m, "tags", tags);
    json_t *data = json_pack("[o]", m);
    ob_srv_cloud_list(s->cloud, data);
    ob_srv_json(r, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

bool ob_srv_route_openai(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    const char *p = rq->path;
    bool get = !strcmp(rq->method, "GET"), post = !strcmp(rq->method, "POST");
    if (!strcmp(p, "/v1/models") || !strcmp(p, "/models")) {
        if (!get) ob_srv_error(r, 405, NULL, "use GET");
        else models(s, r);
        return true;
    }
    if (!strcmp(p, "/v1/chat/completions/input_tokens") || !strcmp(p, "/chat/completions/input_tokens")) {
        if (!post) ob_srv_error(r, 405, NULL, "use POST");
        else if (ob_oai_ready(s, r)) chat_input_tokens(s, rq, r);
        return true;
    }
    /* /completions without /v1 is llama-server's native /completion (llama.c) */
    bool chat = !strcmp(p, "/v1/chat/completions") || !strcmp(p, "/chat/completions");
    bool compl = !strcmp(p, "/v1/completions");
    if (!chat && !compl) return false;
    if (!post) ob_srv_error(r, 405, NULL, "use POST");
    else if (ob_gen_ready(s, r)) (chat ? chat_completions : completions)(s, rq, r);
    return true;
}
