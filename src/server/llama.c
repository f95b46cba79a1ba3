/* llama-server's own routes: /health, /props, /slots, /metrics, /completion, /tokenize,
 * /detokenize, /apply-template, in its shapes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "server/gen.h"
#include "tokenizer/tokenizer.h"

bool ob_oai_ready(ob_server_state *s, ob_resp *r);
json_t *ob_oai_token_json(ob_server_state *s, int32_t id, float lp);

static const char *stop_type(const ob_task_out *o) {
    if (o->finish == OB_FINISH_LENGTH) return "limit";
    if (o->stop_word) return "word";
    return o->stopped_eos ? "eos" : "none";
}

static json_t *probs_json(ob_server_state *s, const ob_tok_rec *t, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) {
        json_t *e = ob_oai_token_json(s, t[i].id, t[i].logprob);
        json_object_set_new(e, "id", json_integer(t[i].id));
        json_t *top = json_array();
        for (int k = 0; k < t[i].n_top; k++) {
            json_t *te = ob_oai_token_json(s, t[i].top_id[k], t[i].top_lp[k]);
            json_object_set_new(te, "id", json_integer(t[i].top_id[k]));
            json_array_append_new(top, te);
        }
        json_object_set_new(e, "top_logprobs", top);
        json_array_append_new(a, e);
    }
    return a;
}

/* The final object of /completion (whole reply, or the last stream event). */
static json_t *completion_final(ob_server_state *s, const char *text, size_t len, const ob_task_out *o) {
    json_t *j = json_pack("{s:o,s:i,s:b,s:s,s:i,s:i,s:s,s:o,s:i,s:b}", "content", ob_srv_jstr(text, len), "id_slot",
                          o->slot, "stop", 1, "model", s->model_id, "tokens_predicted", o->n_gen, "tokens_evaluated",
                          o->n_prompt, "stop_type", stop_type(o), "stopping_word",
                          ob_srv_jstr(o->stop_word ? o->stop_word : "", o->stop_word ? strlen(o->stop_word) : 0),
                          "tokens_cached", o->n_cached + o->n_gen, "truncated", 0);
    json_object_set_new(j, "timings", ob_gen_timings(o));
    return j;
}

static void completion_fmt(ob_gen_stream *gs, const ob_task_out *o, char **buf, size_t *len) {
    if (o->done && o->finish == OB_FINISH_ERROR) {
        ob_srv_sse(buf, len, NULL, json_pack("{s:{s:i,s:s,s:s}}", "error", "code", o->err_status ? o->err_status : 500,
                                             "message", o->err, "type", "server_error"));
        return;
    }
    if (o->text_len || (gs->logprobs && o->n_toks)) {
        json_t *j = json_pack("{s:o,s:b,s:i}", "content", ob_srv_jstr(o->text, o->text_len), "stop", 0, "id_slot", o->slot);
        if (gs->logprobs) json_object_set_new(j, "completion_probabilities", probs_json(gs->s, o->toks, o->n_toks));
        ob_srv_sse(buf, len, NULL, j);
    }
    if (o->done) ob_srv_sse(buf, len, NULL, completion_final(gs->s, "", 0, o));
}

static void completion(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    json_t *body = ob_srv_parse_body(rq, r);
    if (!body) return;
    ob_gen_req g;
    json_t *prompt = json_object_get(body, "prompt");
    if (!prompt) prompt = json_object_get(body, "content");
    int n;
    int32_t *ids = NULL;
    if (!prompt) ob_srv_error(r, 400, NULL, "'prompt' is required");
    else if (ob_gen_parse(s, body, OB_GEN_LLAMA, &g, r) && (ids = ob_gen_prompt_tokens(s, prompt, &n, r))) {
        ob_task_params p = ob_gen_task_params(&g, ids, n, 0);
        ob_task *t = ob_gen_submit(s, &p, r);
        if (t && g.stream) {
            *r = ob_gen_stream_start(s, rq, t, completion_fmt, &g, NULL);
        } else if (t) {
            ob_gen_result res;
            bool ok = ob_gen_wait(s, rq, &t, 1, &res, r);
            ob_sched_release(s->sched, t);
            if (ok) {
                json_t *j = completion_final(s, res.text, res.text_len, &res.last);
                if (g.logprobs) json_object_set_new(j, "completion_probabilities", probs_json(s, res.toks, res.n_toks));
                json_t *toks = json_array();
                for (int i = 0; i < res.n_toks; i++) json_array_append_new(toks, json_integer(res.toks[i].id));
                json_object_set_new(j, "tokens", toks);
                ob_srv_json(r, 200, j);
            }
            ob_gen_result_clear(&res);
        }
    }
    free(ids);
    json_decref(body);
}

static void tokenize(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    json_t *body = ob_srv_parse_body(rq, r);
    if (!body) return;
    json_t *c = json_object_get(body, "content");
    bool add_special = false, parse_special = true, pieces = false;
    if (!json_is_string(c)) ob_srv_error(r, 400, NULL, "'content' must be a string");
    else if (ob_srv_get_bool(body, "add_special", &add_special, r) && ob_srv_get_bool(body, "parse_special", &parse_special, r) &&
             ob_srv_get_bool(body, "with_pieces", &pieces, r)) {
        int n;
        int32_t *ids = ob_gen_tokenize(s, json_string_value(c), json_string_length(c), add_special, parse_special, &n, r);
        if (ids) {
            json_t *a = json_array();
            for (int i = 0; i < n; i++) {
                if (!pieces) {
                    json_array_append_new(a, json_integer(ids[i]));
                    continue;
                }
                size_t pl = 0;
                const char *p = ob_token_piece(s->tok, ids[i], &pl);
                json_array_append_new(a, json_pack("{s:i,s:o}", "id", ids[i], "piece", ob_srv_jstr(p ? p : "", p ? pl : 0)));
            }
            ob_srv_json(r, 200, json_pack("{s:o}", "tokens", a));
            free(ids);
        }
    }
    json_decref(body);
}

static void detokenize(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    json_t *body = ob_srv_parse_body(rq, r);
    if (!body) return;
    json_t *a = json_object_get(body, "tokens");
    int n_vocab = ob_tokenizer_n_vocab(s->tok);
    if (!json_is_array(a)) {
        ob_srv_error(r, 400, NULL, "'tokens' must be an array of token ids");
        json_decref(body);
        return;
    }
    char *text = NULL;
    size_t tl = 0, i;
    json_t *e;
    ob_detok d = {0};
    char piece[512];
    json_array_foreach(a, i, e) {
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= n_vocab) {
            free(text);
            ob_srv_error(r, 400, NULL, "tokens[%zu] is not a token id below %d", i, n_vocab);
            json_decref(body);
            return;
        }
        size_t pn = ob_detok_push(s->tok, &d, (int32_t)json_integer_value(e), piece, sizeof piece);
        if (pn <= sizeof piece) ob_srv_buf_add(&text, &tl, piece, pn);
    }
    size_t pn = ob_detok_flush(&d, piece, sizeof piece);
    if (pn <= sizeof piece) ob_srv_buf_add(&text, &tl, piece, pn);
    ob_srv_json(r, 200, json_pack("{s:o}", "content", ob_srv_jstr(text ? text : "", tl)));
    free(text);
    json_decref(body);
}

static void apply_template(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    json_t *body = ob_srv_parse_body(rq, r);
    if (!body) return;
    json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs)) {
        ob_srv_error(r, 400, NULL, "'messages' must be an array");
    } else {
        char *text = ob_gen_render_chat(s, msgs, true, r);
        if (text) ob_srv_json(r, 200, json_pack("{s:o}", "prompt", ob_srv_jstr(text, strlen(text))));
        free(text);
    }
    json_decref(body);
}

static void props(ob_server_state *s, ob_resp *r) {
    const char *tmpl = s->cfg->chat_template ? s->cfg->chat_template : s->chat_template;
    json_t *params = json_pack("{s:i,s:f,s:i,s:f,s:f}", "n_predict", -1, "temperature", 0.8, "top_k", 40, "top_p", 0.95,
                               "min_p", 0.05);
    /* embedding mode: one embeddings context, its length is the longest input */
    int n_ctx = s->sched ? ob_sched_n_ctx_slot(s->sched) : s->embd ? ob_srv_embd_n_ctx(s->embd) : 0;
    int n_slots = s->sched ? ob_sched_n_slots(s->sched) : 1;
    json_t *j = json_pack("{s:{s:i,s:o},s:i,s:s,s:s,s:s,s:{s:b,s:b},s:b}", "default_generation_settings", "n_ctx",
                          n_ctx, "params", params, "total_slots", n_slots,
                          "model_path", s->cfg->model_path, "model_alias", s->model_id, "build_info", "onebit",
                          "modalities", "vision", 0, "audio", 0, "is_sleeping", 0);
    json_object_set_new(j, "chat_template", tmpl ? ob_srv_jstr(tmpl, strlen(tmpl)) : json_string(""));
    json_object_set_new(j, "embedding", json_boolean(s->embd != NULL));
    json_object_set_new(j, "reranking", json_boolean(s->embd && ob_srv_embd_ranks(s->embd)));
    ob_srv_json(r, 200, j);
}

bool ob_srv_route_llama(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    const char *p = rq->path;
    bool get = !strcmp(rq->method, "GET"), post = !strcmp(rq->method, "POST");
    if (!strcmp(p, "/health") || !strcmp(p, "/v1/health")) {
        int st = __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE);
        if (st == 1) ob_srv_json(r, 200, json_pack("{s:s}", "status", "ok"));
        else ob_srv_error(r, 503, NULL, st == 0 ? "Loading model" : "the server is shutting down");
        return true;
    }
    static const char *const gets[] = {"/props", "/slots", "/metrics"};
    static const char *const posts[] = {"/completion", "/tokenize", "/detokenize", "/apply-template"};
    int gi = -1, pi = -1;
    for (size_t i = 0; i < OB_ARRAY_LEN(gets); i++) if (!strcmp(p, gets[i])) gi = (int)i;
    for (size_t i = 0; i < OB_ARRAY_LEN(posts); i++) if (!strcmp(p, posts[i])) pi = (int)i;
    if (gi < 0 && pi < 0) return false;
    if ((gi >= 0 && !get) || (pi >= 0 && !post)) {
        ob_srv_error(r, 405, NULL, "use %s", gi >= 0 ? "GET" : "POST");
        return true;
    }
    if (!ob_oai_ready(s, r)) return true;
    switch (gi) {
    case 0: props(s, r); return true;
    case 1:
        if (s->cfg->no_slots) ob_srv_error(r, 501, NULL, "This server does not support slots endpoint. Start it with `--slots`");
        else ob_srv_json(r, 200, s->sched ? ob_sched_slots_json(s->sched) : json_array());
        return true;
    case 2:
        if (!s->cfg->metrics) {
            ob_srv_error(r, 501, NULL, "This server does not support metrics endpoint. Start it with `--metrics`");
        } else {
            r->status = 200;
            r->content_type = "text/plain; version=0.0.4";
            r->body = ob_srv_metrics_text(s);
            r->body_len = r->body ? strlen(r->body) : 0;
        }
        return true;
    default: break;
    }
    switch (pi) {
    case 0: if (ob_gen_ready(s, r)) completion(s, rq, r); break;
    case 1: tokenize(s, rq, r); break;
    case 2: detokenize(s, rq, r); break;
    default: apply_template(s, rq, r); break;
    }
    return true;
}
