/* llama-server's own routes: /health, /props, /slots, /metrics, /completion, /tokenize,
 * /detokenize, /apply-template, in its shapes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

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

/* completion_probabilities: logprobs, or with post_sampling_probs the chain's
 * probabilities under llama-server's other names (prob, top_probs). */
static json_t *probs_json(ob_server_state *s, const ob_tok_rec *t, int n, bool post) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) {
        json_t *e = ob_oai_token_json(s, t[i].id, t[i].logprob);
        json_object_set_new(e, "id", json_integer(t[i].id));
        if (post) {
            json_object_del(e, "logprob");
            json_object_set_new(e, "prob", json_real(t[i].logprob));
        }
        json_t *top = json_array();
        for (int k = 0; k < t[i].n_top; k++) {
            json_t *te = ob_oai_token_json(s, t[i].top_id[k], t[i].top_lp[k]);
            json_object_set_new(te, "id", json_integer(t[i].top_id[k]));
            if (post) {
                json_object_del(te, "logprob");
                json_object_set_new(te, "prob", json_real(t[i].top_lp[k]));
            }
            json_array_append_new(top, te);
        }
        json_object_set_new(e, post ? "top_probs" : "top_logprobs", top);
        json_array_append_new(a, e);
    }
    return a;
}

/* The final object of /completion (whole reply, or the last stream event). */
static json_t *completion_final(ob_server_state *s, const char *text, size_t len, const ob_task_out *o,
                                json_t *settings, json_t *prompt) {
    json_t *j = json_pack("{s:o,s:i,s:b,s:s,s:i,s:i,s:s,s:o,s:i,s:b,s:b}", "content", ob_srv_jstr(text, len), "id_slot",
                          o->slot, "stop", 1, "model", s->model_id, "tokens_predicted", o->n_gen, "tokens_evaluated",
                          o->n_prompt, "stop_type", stop_type(o), "stopping_word",
                          ob_srv_jstr(o->stop_word ? o->stop_word : "", o->stop_word ? strlen(o->stop_word) : 0),
                          "tokens_cached", o->n_cached + o->n_gen, "truncated", o->truncated, "has_new_line",
                          memchr(text, '\n', len) != NULL);
    json_object_set_new(j, "timings", ob_gen_timings(o));
    if (settings) json_object_set(j, "generation_settings", settings);
    if (prompt) json_object_set(j, "prompt", prompt);
    return j;
}

/* response_fields: only the named fields, "a/b" taken out of its object as "a/b". */
static json_t *pick_fields(json_t *j, json_t *fields) {
    if (!fields) return j;
    json_t *out = json_object();
    size_t i;
    json_t *f;
    json_array_foreach(fields, i, f) {
        const char *path = json_string_value(f);
        if (!path) continue;
        json_t *v = j;
        char part[128];
        for (const char *p = path; v && *p;) {
            size_t n = strcspn(p, "/");
            if (n >= sizeof part) { v = NULL; break; }
            memcpy(part, p, n);
            part[n] = 0;
            v = json_object_get(v, part);
            p += n;
            if (*p) p++;
        }
        if (v) json_object_set(out, path, v);
    }
    json_decref(j);
    return out;
}

static void completion_fmt(ob_gen_stream *gs, const ob_task_out *o, char **buf, size_t *len) {
    if (o->done && o->finish == OB_FINISH_ERROR) {
        ob_srv_sse(buf, len, NULL, json_pack("{s:{s:i,s:s,s:s}}", "error", "code", o->err_status ? o->err_status : 500,
                                             "message", o->err, "type", "server_error"));
        return;
    }
    /* every event before the last carries the ids of its tokens; text that arrives with
     * no token of its own (held back earlier) waits for the next event */
    ob_srv_buf_add(&gs->hold, &gs->hold_len, o->text ? o->text : "", o->text_len);
    if (o->n_toks) {
        json_t *toks = json_array();
        for (int i = 0; i < o->n_toks; i++) json_array_append_new(toks, json_integer(o->toks[i].id));
        json_t *j = json_pack("{s:o,s:o,s:b,s:i}", "content", ob_srv_jstr(gs->hold ? gs->hold : "", gs->hold_len),
                              "tokens", toks, "stop", 0, "id_slot", o->slot);
        if (gs->logprobs)
            json_object_set_new(j, "completion_probabilities", probs_json(gs->s, o->toks, o->n_toks, gs->post_sampling_probs));
        if (gs->timings_per_token) json_object_set_new(j, "timings", ob_gen_timings(o));
        ob_srv_sse(buf, len, NULL, j);
        gs->hold_len = 0;
    }
    if (o->done) {
        json_t *j = completion_final(gs->s, gs->hold ? gs->hold : "", gs->hold_len, o, gs->settings, NULL);
        json_object_set_new(j, "tokens", json_array());
        ob_srv_sse(buf, len, NULL, j);
        gs->hold_len = 0;
    }
}

/* Runs the prompts of a native completion body (owned by pp, freed here) and answers:
 * one result, an array of them, or a stream. */
static void complete(ob_server_state *s, const ob_req *rq, ob_resp *r, json_t *body, ob_gen_prompts *pp_in) {
    ob_gen_req g;
    ob_gen_prompts pp = *pp_in;
    ob_task *t[OB_GEN_MAX_N] = {0};
    if (!ob_gen_parse(s, body, OB_GEN_LLAMA, &g, r)) goto out;
    if (g.stream && pp.n > 1) {
        ob_srv_error(r, 400, NULL, "'stream' takes one prompt");
        goto out;
    }
    for (int i = 0; i < pp.n; i++) {
        ob_task_params p = ob_gen_task_params(&g, pp.ids[i], pp.len[i], 0);
        if (!(t[i] = ob_gen_submit(s, &p, r))) goto out;
    }
    if (g.stream) {
        *r = ob_gen_stream_start(s, rq, t[0], completion_fmt, &g, NULL);
        t[0] = NULL; /* the stream owns it */
        goto out;
    }
    ob_gen_result res[OB_GEN_MAX_N];
    bool ok = ob_gen_wait(s, rq, t, pp.n, res, r);
    if (ok) {
        json_t *settings = ob_gen_settings_json(s, &g);
        json_t *all = json_array();
        for (int i = 0; i < pp.n; i++) {
            json_t *pj = ob_gen_prompt_json(s, pp.ids[i], pp.len[i]);
            json_t *j = completion_final(s, res[i].text, res[i].text_len, &res[i].last, settings, pj);
            json_decref(pj);
            if (g.logprobs)
                json_object_set_new(j, "completion_probabilities",
                                    probs_json(s, res[i].toks, res[i].n_toks, g.post_sampling_probs));
            json_t *toks = json_array();
            for (int k = 0; g.return_tokens && k < res[i].n_toks; k++) json_array_append_new(toks, json_integer(res[i].toks[k].id));
            json_object_set_new(j, "tokens", toks);
            json_object_set_new(j, "index", json_integer(i));
            json_array_append_new(all, pick_fields(j, g.response_fields));
        }
        json_decref(settings);
        if (pp.n == 1) {
            json_t *one = json_incref(json_array_get(all, 0));
            json_decref(all);
            all = one;
        }
        ob_srv_json(r, 200, all);
    }
    for (int i = 0; i < pp.n; i++) ob_gen_result_clear(&res[i]);
out:
    for (int i = 0; i < pp.n; i++)
        if (t[i]) ob_sched_release(s->sched, t[i]);
    ob_gen_prompts_free(&pp);
}

/* POST /completion, /completions: llama-server's native completion. Several prompts give
 * an array of results. */
static void completion(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    json_t *body = ob_srv_parse_body(rq, r);
    if (!body) return;
    ob_gen_prompts pp;
    json_t *prompt = json_object_get(body, "prompt");
    if (!prompt) prompt = json_object_get(body, "content");
    if (!prompt) ob_srv_error(r, 400, NULL, "'prompt' is required");
    else if (ob_gen_prompts_parse(s, prompt, &pp, r)) complete(s, rq, r, body, &pp);
    json_decref(body);
}

/* A special token spelled one of names, or -1. */
static int32_t find_special(ob_server_state *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++) {
        int32_t ids[4], plain[4];
        int k = ob_tokenize(s->tok, names[i], strlen(names[i]), ids, 4, false, true);
        int k_plain = ob_tokenize(s->tok, names[i], strlen(names[i]), plain, 4, false, false);
        if (k == 1 && k_plain != 1) return ids[0];
    }
    return -1;
}

/* Appends the tokens of text (no special tokens added or parsed) to p. */
static bool add_text(ob_server_state *s, ob_gen_prompts *p, const char *text, size_t len, ob_resp *r) {
    int n;
    int32_t *ids = ob_gen_tokenize(s, text, len, false, false, &n, r);
    if (!ids) return false;
    int32_t *all = realloc(p->ids[0], sizeof(int32_t) * (size_t)(p->len[0] + n + 1));
    if (all) {
        memcpy(all + p->len[0], ids, sizeof(int32_t) * (size_t)n);
        p->ids[0] = all;
        p->len[0] += n;
    }
    free(ids);
    if (!all) ob_srv_error(r, 500, NULL, "out of memory");
    return all != NULL;
}

static bool add_tok(ob_gen_prompts *p, int32_t id, ob_resp *r) {
    int32_t *all = realloc(p->ids[0], sizeof(int32_t) * (size_t)(p->len[0] + 1));
    if (!all) {
        ob_srv_error(r, 500, NULL, "out of memory");
        return false;
    }
    all[p->len[0]++] = id;
    p->ids[0] = all;
    return true;
}

/* POST /infill: code infilling with the model's fill-in-the-middle tokens:
 * [extra] <PRE> input_prefix <SUF> input_suffix <MID> prompt, the extra chunks in the
 * repo-level pattern when the model has repo and file-separator tokens. Then as /completion. */
static void infill(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    static const char *const pre[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "\xe2\x96\x81<PRE>"};
    static const char *const suf[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "\xe2\x96\x81<SUF>"};
    static const char *const mid[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "\xe2\x96\x81<MID>"};
    static const char *const rep[] = {"<|repo_name|>", "<repo_name>", "<reponame>"};
    static const char *const sep[] = {"<|file_sep|>", "<file_sep>", "<filename>"};
    int32_t t_pre = find_special(s, pre, 5), t_suf = find_special(s, suf, 5), t_mid = find_special(s, mid, 5);
    if (t_pre < 0 || t_suf < 0 || t_mid < 0) {
        ob_srv_error(r, 501, "not_supported_error", "Infill is not supported by this model: it has no fill-in-the-middle "
                     "prefix, suffix and middle tokens");
        return;
    }
    json_t *body = ob_srv_parse_body(rq, r);
    if (!body) return;
    json_t *prompt = json_object_get(body, "prompt"), *ip = json_object_get(body, "input_prefix"),
           *is = json_object_get(body, "input_suffix"), *extra = json_object_get(body, "input_extra");
    ob_gen_prompts pp = {0};
    pp.n = 1;
    if (prompt && !json_is_string(prompt)) ob_srv_error(r, 400, NULL, "\"prompt\" must be a string");
    else if (!json_is_string(ip)) ob_srv_error(r, 400, NULL, "\"input_prefix\" is required (a string)");
    else if (!json_is_string(is)) ob_srv_error(r, 400, NULL, "\"input_suffix\" is required (a string)");
    else if (extra && !json_is_array(extra))
        ob_srv_error(r, 400, NULL, "\"input_extra\" must be an array of {\"filename\": string, \"text\": string}");
    else {
        size_t i;
        json_t *c;
        bool ok = true;
        json_array_foreach(extra, i, c) {
            json_t *fn = json_object_get(c, "filename");
            if (!json_is_string(json_object_get(c, "text")) || (fn && !json_is_string(fn))) {
                ob_srv_error(r, 400, NULL, "input_extra[%zu] must be {\"filename\": string (optional), \"text\": string}", i);
                ok = false;
                break;
            }
        }
        int32_t t_rep = find_special(s, rep, 3), t_sep = find_special(s, sep, 3);
        int32_t bos = ob_token_bos(s->tok);
        int32_t probe[2];
        if (ok && ob_tokenize(s->tok, "", 0, probe, 2, true, false) > 0 && probe[0] == bos) ok = add_tok(&pp, bos, r);
        if (ok && t_rep >= 0 && t_sep >= 0 && json_array_size(extra)) {
            ok = add_tok(&pp, t_rep, r) && add_text(s, &pp, "myproject\n", 10, r);
            json_array_foreach(extra, i, c) {
                const char *fn = json_string_value(json_object_get(c, "filename"));
                json_t *tx = json_object_get(c, "text");
                ok = ok && add_tok(&pp, t_sep, r) && add_text(s, &pp, fn ? fn : "", fn ? strlen(fn) : 0, r) &&
                     add_text(s, &pp, "\n", 1, r) && add_text(s, &pp, json_string_value(tx), json_string_length(tx), r);
            }
            ok = ok && add_tok(&pp, t_sep, r) && add_text(s, &pp, "filename\n", 9, r);
        } else if (ok) {
            json_array_foreach(extra, i, c) {
                json_t *tx = json_object_get(c, "text");
                ok = ok && add_text(s, &pp, json_string_value(tx), json_string_length(tx), r);
            }
        }
        ok = ok && add_tok(&pp, t_pre, r) && add_text(s, &pp, json_string_value(ip), json_string_length(ip), r) &&
             add_tok(&pp, t_suf, r) && add_text(s, &pp, json_string_value(is), json_string_length(is), r) &&
             add_tok(&pp, t_mid, r);
        if (ok && prompt) ok = add_text(s, &pp, json_string_value(prompt), json_string_length(prompt), r);
        if (ok) {
            complete(s, rq, r, body, &pp);
            pp.n = 0;
        }
    }
    ob_gen_prompts_free(&pp);
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
    ob_chat_opts co;
    if (!json_is_array(msgs)) {
        ob_srv_error(r, 400, NULL, "'messages' must be an array");
    } else if (ob_gen_chat_opts(s, body, &co, r)) {
        char *text = ob_gen_render_chat(s, msgs, &co, NULL, r);
        if (text) ob_srv_json(r, 200, json_pack("{s:o}", "prompt", ob_srv_jstr(text, strlen(text))));
        free(text);
    }
    json_decref(body);
}

/* A file name under --slot-save-path: one plain component (no separators, no "..", no
 * control bytes, no leading or trailing space, not ending in a dot). */
static bool slot_filename_ok(const char *f) {
    size_t n = f ? strlen(f) : 0;
    if (n == 0 || n > 255 || f[0] == ' ' || f[n - 1] == ' ' || f[n - 1] == '.') return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)f[i];
        if (ch < 0x20 || ch == 0x7f || ch == '/' || ch == '\\' || ch == ':') return false;
    }
    return true;
}

/* POST /slots/{id}?action=save|restore|erase (llama-server's, under --slot-save-path). */
static void slot_action(ob_server_state *s, const ob_req *rq, ob_resp *r, const char *id_text) {
    if (strcmp(rq->method, "POST")) {
        ob_srv_error(r, 405, NULL, "use POST");
        return;
    }
    if (!s->cfg->slot_save_path) {
        ob_srv_error(r, 501, "not_supported_error", "This server does not support slots action. Start it with `--slot-save-path`");
        return;
    }
    char *end = NULL;
    long id = strtol(id_text, &end, 10);
    if (!*id_text || *end || id < 0 || id > 1 << 20) {
        ob_srv_error(r, 400, NULL, "Invalid slot ID");
        return;
    }
    const char *action = rq->conn ? MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, "action") : NULL;
    ob_slot_action a = !action ? (ob_slot_action)-1 : !strcmp(action, "save") ? OB_SLOT_SAVE
                       : !strcmp(action, "restore") ? OB_SLOT_RESTORE : !strcmp(action, "erase") ? OB_SLOT_ERASE
                                                                                                   : (ob_slot_action)-1;
    if ((int)a < 0) {
        ob_srv_error(r, 400, NULL, "Invalid action");
        return;
    }
    if (!ob_gen_ready(s, r)) return;
    const char *fname = NULL;
    json_t *body = NULL;
    char path[4096] = "";
    if (a != OB_SLOT_ERASE) {
        if (!(body = ob_srv_parse_body(rq, r))) return;
        fname = json_string_value(json_object_get(body, "filename"));
        if (!slot_filename_ok(fname)) {
            json_decref(body);
            ob_srv_error(r, 400, NULL, "Invalid filename");
            return;
        }
        if (snprintf(path, sizeof(path), "%s/%s", s->cfg->slot_save_path, fname) >= (int)sizeof(path)) {
            json_decref(body);
            ob_srv_error(r, 400, NULL, "Invalid filename");
            return;
        }
    }
    ob_slot_result res;
    char err[512] = "";
    const int code = ob_sched_slot_action(s->sched, (int)id, a, path, 60000, &res, err, sizeof(err));
    if (code != 200) {
        ob_srv_error(r, code, code == 501 ? "not_supported_error" : code == 503 ? "unavailable_error" : NULL, "%s", err);
    } else if (a == OB_SLOT_ERASE) {
        ob_srv_json(r, 200, json_pack("{s:i,s:i}", "id_slot", (int)id, "n_erased", res.n_tokens));
    } else {
        const bool save = a == OB_SLOT_SAVE;
        ob_srv_json(r, 200, json_pack("{s:i,s:s,s:i,s:I,s:{s:f}}", "id_slot", (int)id, "filename", fname,
                                      save ? "n_saved" : "n_restored", res.n_tokens, save ? "n_written" : "n_read",
                                      (json_int_t)res.n_bytes, "timings", save ? "save_ms" : "restore_ms", res.ms));
    }
    json_decref(body);
}

static void props(ob_server_state *s, ob_resp *r) {
    const char *tmpl = s->cfg->chat_template ? s->cfg->chat_template : s->chat_template;
    /* the server's defaults (--temp, --seed, -n, ...) in generation_settings' shape */
    ob_gen_req *g = calloc(1, sizeof *g);
    if (!g) {
        ob_srv_error(r, 500, NULL, "out of memory");
        return;
    }
    g->sp = s->cfg->sp;
    g->dry_breakers = s->cfg->dry_breakers;
    g->n_predict = s->cfg->n_predict;
    g->seed_given = s->cfg->seed_set;
    json_t *params = ob_gen_settings_json(s, g);
    free(g);
    /* embedding mode: one embeddings context, its length is the longest input */
    int n_ctx = s->embd ? ob_srv_embd_n_ctx(s->embd) : s->n_ctx_slot;
    int n_slots = s->embd ? 1 : s->n_slots;
    json_t *j = json_pack("{s:{s:i,s:o},s:i,s:s,s:s,s:s,s:{s:b,s:b},s:b}", "default_generation_settings", "n_ctx",
                          n_ctx, "params", params, "total_slots", n_slots,
                          "model_path", s->cfg->model_path, "model_alias", s->model_id, "build_info", ob_build_info(),
                          "modalities", "vision", 0, "audio", 0, "is_sleeping",
                          __atomic_load_n(&s->sleeping, __ATOMIC_ACQUIRE) != 0);
    json_object_set_new(j, "chat_template", tmpl ? ob_srv_jstr(tmpl, strlen(tmpl)) : json_string(""));
    /* the KV cache types in use (-ctk / -ctv; an embeddings context keeps f32) */
    json_object_set_new(j, "cache_type_k", json_string(ob_kv_type_name(s->embd ? OB_KV_F32 : s->cfg->type_k)));
    json_object_set_new(j, "cache_type_v", json_string(ob_kv_type_name(s->embd ? OB_KV_F32 : s->cfg->type_v)));
    json_object_set_new(j, "embedding", json_boolean(s->embd != NULL));
    json_object_set_new(j, "reranking", json_boolean(s->embd && ob_srv_embd_ranks(s->embd)));
    ob_srv_json(r, 200, j);
}

bool ob_srv_route_llama(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    const char *p = rq->path;
    bool get = !strcmp(rq->method, "GET"), post = !strcmp(rq->method, "POST");
    if (!strcmp(p, "/health") || !strcmp(p, "/v1/health")) {
        if (!get && strcmp(rq->method, "HEAD")) {
            ob_srv_error(r, 405, NULL, "use GET");
            return true;
        }
        int st = __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE);
        if (st == 1) ob_srv_json(r, 200, json_pack("{s:s}", "status", "ok"));
        else ob_srv_error(r, 503, NULL, st == 0 ? "Loading model" : "the server is shutting down");
        return true;
    }
    if (!strncmp(p, "/slots/", 7)) {
        if (ob_oai_ready(s, r)) slot_action(s, rq, r, p + 7);
        return true;
    }
    static const char *const gets[] = {"/props", "/slots", "/metrics"};
    static const char *const posts[] = {"/completion", "/tokenize", "/detokenize", "/apply-template", "/completions",
                                        "/infill"};
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
    case 0: case 4: if (ob_gen_ready(s, r)) completion(s, rq, r); break;
    case 5: if (ob_gen_ready(s, r)) infill(s, rq, r); break;
    case 1: tokenize(s, rq, r); break;
    case 2: detokenize(s, rq, r); break;
    default: apply_template(s, rq, r); break;
    }
    return true;
}
