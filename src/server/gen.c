/* Shared generation plumbing for the route families (see gen.h). */
#include "server/gen.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>

#include "core/common.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

static bool parse_stop(json_t *v, const char *key, ob_gen_req *g, ob_resp *r) {
    if (!v || json_is_null(v)) return true;
    if (json_is_string(v)) {
        g->stop[0] = json_string_value(v);
        g->n_stop = 1;
        return true;
    }
    if (!json_is_array(v) || json_array_size(v) > OB_GEN_MAX_STOP) {
        ob_srv_error(r, 400, NULL, "'%s' must be a string or an array of at most %d strings", key, OB_GEN_MAX_STOP);
        return false;
    }
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e)) {
            ob_srv_error(r, 400, NULL, "'%s' must contain only strings", key);
            return false;
        }
        g->stop[g->n_stop++] = json_string_value(e);
    }
    return true;
}

/* One logit_bias entry: a token id, or text whose every token gets the bias; the value
 * is a number, or false (never this token). */
static bool add_bias(ob_server_state *s, json_t *key_num, const char *key_str, size_t key_len, json_t *val,
                     ob_gen_req *g, ob_resp *r) {
    float b;
    if (json_is_number(val)) b = (float)json_number_value(val);
    else if (json_is_false(val)) b = -1e30f; /* never: shown as null (-inf) */
    else {
        ob_srv_error(r, 400, NULL, "'logit_bias' values must be numbers or false");
        return false;
    }
    int n_vocab = ob_tokenizer_n_vocab(s->tok);
    int32_t one, *ids = &one;
    int n = 1;
    if (key_num) {
        if (!json_is_integer(key_num) || json_integer_value(key_num) < 0 || json_integer_value(key_num) >= n_vocab) {
            ob_srv_error(r, 400, NULL, "'logit_bias': token ids must be below %d", n_vocab);
            return false;
        }
        one = (int32_t)json_integer_value(key_num);
    } else {
        ids = ob_gen_tokenize(s, key_str, key_len, false, false, &n, r);
        if (!ids) return false;
    }
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        if (g->sp.n_logit_bias >= OB_GEN_MAX_BIAS) {
            ob_srv_error(r, 400, NULL, "'logit_bias' has more than %d tokens", OB_GEN_MAX_BIAS);
            ok = false;
            break;
        }
        g->bias_tok[g->sp.n_logit_bias] = ids[i];
        g->bias_val[g->sp.n_logit_bias++] = b;
    }
    if (ids != &one) free(ids);
    return ok;
}

/* llama-server's forms: [[id or text, bias], ...], or OpenAI's {"id or text": bias}. */
static bool parse_bias(ob_server_state *s, json_t *v, ob_gen_req *g, ob_resp *r) {
    if (!v || json_is_null(v)) return true;
    if (json_is_object(v)) {
        const char *k;
        json_t *b;
        json_object_foreach(v, k, b) {
            char *end;
            long long id = strtoll(k, &end, 10);
            json_t *num = *k && !*end ? json_integer(id) : NULL;
            bool ok = add_bias(s, num, k, strlen(k), b, g, r);
            json_decref(num);
            if (!ok) return false;
        }
        return true;
    }
    if (json_is_array(v)) {
        size_t i;
        json_t *p;
        json_array_foreach(v, i, p) {
            json_t *a = json_array_get(p, 0), *b = json_array_get(p, 1);
            if (!json_is_array(p) || json_array_size(p) != 2 || !(json_is_integer(a) || json_is_string(a))) {
                ob_srv_error(r, 400, NULL, "'logit_bias' must be [[token_id or text, bias], ...]");
                return false;
            }
            if (!add_bias(s, json_is_integer(a) ? a : NULL, json_string_value(a), json_string_length(a), b, g, r))
                return false;
        }
        return true;
    }
    ob_srv_error(r, 400, NULL, "'logit_bias' must be an object or an array");
    return false;
}

/* The schema a request asks its output to follow (borrowed), from llama-server's
 * json_schema, OpenAI's response_format ({"type":"json_object"} with an optional "schema",
 * {"type":"json_schema","json_schema":{"schema":...}}) or Anthropic's output_config.format /
 * output_format ({"type":"json_schema","schema":...}); *any when it asks for any JSON object
 * without a schema. False with r filled on a malformed field. */
static bool find_schema(json_t *o, ob_gen_flavor fl, const json_t **schema, bool *any, ob_resp *r) {
    json_t *js = json_object_get(o, "json_schema");
    *schema = js && !json_is_null(js) ? js : NULL;
    *any = false;
    json_t *rf = json_object_get(o, "response_format");
    if (rf && !json_is_null(rf)) {
        const char *ty = json_string_value(json_object_get(rf, "type"));
        if (!json_is_object(rf) || !ty) {
            ob_srv_error(r, 400, NULL, "'response_format' must be an object with a 'type'");
            return false;
        }
        if (!strcmp(ty, "json_object")) {
            json_t *sch = json_object_get(rf, "schema");
            if (sch) *schema = sch;
            else if (!*schema) *any = true;
        } else if (!strcmp(ty, "json_schema")) {
            json_t *w = json_object_get(rf, "json_schema");
            *schema = json_is_object(w) ? json_object_get(w, "schema") : json_object_get(rf, "schema");
            *any = !*schema;
        } else if (strcmp(ty, "text")) {
            ob_srv_error(r, 400, NULL, "response_format type must be one of \"text\", \"json_object\" or \"json_schema\", "
                         "but got: %s", ty);
            return false;
        }
    }
    if (fl == OB_GEN_ANTHROPIC) {
        json_t *fmt = json_object_get(json_object_get(o, "output_config"), "format");
        if (!fmt || json_is_null(fmt)) fmt = json_object_get(o, "output_format");
        if (fmt && !json_is_null(fmt)) {
            const char *ty = json_string_value(json_object_get(fmt, "type"));
            if (!ty || strcmp(ty, "json_schema") || !json_object_get(fmt, "schema")) {
                ob_srv_error(r, 400, NULL, "the output format must be {\"type\": \"json_schema\", \"schema\": {...}}");
                return false;
            }
            *schema = json_object_get(fmt, "schema");
        }
    }
    return true;
}

/* Structured output: the grammar the output must follow, as GBNF text kept in the body's
 * "grammar" field (a JSON schema is converted into it, as llama-server does), checked here
 * so that a bad one is a 400 before anything runs. g->grammar borrows it. */
static bool parse_structured(json_t *o, ob_gen_flavor fl, ob_gen_req *g, ob_resp *r) {
    json_t *gr = json_object_get(o, "grammar");
    if (gr && !json_is_null(gr) && !json_is_string(gr)) {
        ob_srv_error(r, 400, NULL, "'grammar' must be a string");
        return false;
    }
    const json_t *schema;
    bool any;
    if (!find_schema(o, fl, &schema, &any, r)) return false;
    bool has_grammar = json_string_length(gr) > 0;
    if ((schema || any) && has_grammar) {
        if (fl != OB_GEN_LLAMA) { /* the native route lets the grammar win, as llama-server */
            ob_srv_error(r, 400, NULL, "Cannot use both json_schema and grammar");
            return false;
        }
        schema = NULL;
        any = false;
    }
    if (schema || any) {
        char *text = NULL, err[256];
        ob_status st = ob_grammar_from_schema(schema, &text, err, sizeof err);
        if (st == OB_ERR_NOMEM) {
            ob_srv_error(r, 500, NULL, "out of memory");
            return false;
        }
        if (st) {
            ob_srv_error(r, 400, NULL, "\"json_schema\": %s", err);
            return false;
        }
        int bad = json_object_set_new(o, "grammar", json_string(text));
        free(text);
        if (bad) {
            ob_srv_error(r, 500, NULL, "the schema's grammar could not be kept");
            return false;
        }
        gr = json_object_get(o, "grammar");
        has_grammar = true;
    }
    if (!has_grammar) return true;
    ob_grammar *gm = NULL;
    char err[256];
    ob_status st = ob_grammar_parse(json_string_value(gr), json_string_length(gr), &gm, err, sizeof err);
    ob_grammar_free(gm);
    if (st) {
        ob_srv_error(r, st == OB_ERR_NOMEM ? 500 : 400, NULL, "Failed to parse grammar: %s", err);
        return false;
    }
    g->grammar = json_string_value(gr);
    return true;
}

bool ob_gen_parse(ob_server_state *s, json_t *o, ob_gen_flavor fl, ob_gen_req *g, ob_resp *r) {
    memset(g, 0, sizeof *g);
    g->sp = s->cfg->sp; /* the server's --temp, --seed, ... */
    g->seed_given = s->cfg->seed_set;
    g->reasoning_format = s->cfg->reasoning_format;
    g->verbose = s->cfg->verbose;
    if (!s->cfg->seed_set)
        g->sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)(uintptr_t)g << 16) ^ (uint64_t)(ob_time_s() * 1e9);
    if (!parse_structured(o, fl, g, r)) return false;
    /* the server's --grammar / -j for a request without its own */
    if (!g->grammar) g->grammar = s->cfg->grammar;
    g->n_predict = s->cfg->n_predict;
    g->n = 1;
    long long ll;
    double d;
    ll = g->n_predict;
    if (fl == OB_GEN_LLAMA) {
        if (!ob_srv_get_int(o, "n_predict", -1, 1 << 30, &ll, r)) return false;
        if (!ob_srv_get_int(o, "max_tokens", -1, 1 << 30, &ll, r)) return false;
    } else {
        if (!ob_srv_get_int(o, "max_tokens", 0, 1 << 30, &ll, r)) return false;
        if (!ob_srv_get_int(o, "max_completion_tokens", 0, 1 << 30, &ll, r)) return false;
        if (fl == OB_GEN_ANTHROPIC && !json_is_integer(json_object_get(o, "max_tokens"))) {
            ob_srv_error(r, 400, NULL, "'max_tokens' is required");
            return false;
        }
    }
    g->n_predict = (int)ll;
    /* llama-server's slot pinning (-1: any slot; the scheduler checks the range) */
    ll = -1;
    if (!ob_srv_get_int(o, "id_slot", -1, 1 << 20, &ll, r)) return false;
    g->id_slot = (int)ll;
    d = g->sp.temperature;
    if (!ob_srv_get_num(o, "temperature", 0, 100, &d, r)) return false;
    g->sp.temperature = (float)d;
    d = g->sp.top_p;
    if (!ob_srv_get_num(o, "top_p", 0, 1, &d, r)) return false;
    g->sp.top_p = (float)d;
    d = g->sp.min_p;
    if (!ob_srv_get_num(o, "min_p", 0, 1, &d, r)) return false;
    g->sp.min_p = (float)d;
    ll = g->sp.top_k;
    if (!ob_srv_get_int(o, "top_k", -1, 1 << 30, &ll, r)) return false;
    g->sp.top_k = (int)ll;
    d = g->sp.presence_penalty;
    if (!ob_srv_get_num(o, "presence_penalty", -2, 2, &d, r)) return false;
    g->sp.presence_penalty = (float)d;
    d = g->sp.frequency_penalty;
    if (!ob_srv_get_num(o, "frequency_penalty", -2, 2, &d, r)) return false;
    g->sp.frequency_penalty = (float)d;
    d = g->sp.repeat_penalty;
    if (!ob_srv_get_num(o, "repeat_penalty", 0, 10, &d, r)) return false;
    g->sp.repeat_penalty = (float)d;
    if ((g->sp.presence_penalty != 0 || g->sp.frequency_penalty != 0) && g->sp.penalty_last_n == 0)
        g->sp.penalty_last_n = -1;
    if (!ob_gen_parse_samplers(s, o, g, r)) return false; /* mirostat, typical_p, dry_*, xtc_* */
    ll = -1;
    if (!ob_srv_get_int(o, "seed", -(1LL << 62), 1LL << 62, &ll, r)) return false;
    if (ll >= 0) {
        g->sp.seed = (uint64_t)ll;
        g->seed_given = true;
    }
    if (!ob_srv_get_bool(o, "post_sampling_probs", &g->post_sampling_probs, r)) return false;
    if (!ob_srv_get_bool(o, "return_tokens", &g->return_tokens, r)) return false;
    if (!ob_srv_get_bool(o, "timings_per_token", &g->timings_per_token, r)) return false;
    if (!ob_srv_get_bool(o, "verbose", &g->verbose, r)) return false;
    json_t *rfmt = json_object_get(o, "reasoning_format");
    if (json_is_string(rfmt)) {
        static const char *const names[] = {"auto", "none", "deepseek", "deepseek-legacy"}; /* OB_RFMT_* order */
        size_t k = 0;
        while (k < OB_ARRAY_LEN(names) && strcmp(json_string_value(rfmt), names[k])) k++;
        if (k == OB_ARRAY_LEN(names)) {
            ob_srv_error(r, 400, NULL, "'reasoning_format' must be auto, none, deepseek or deepseek-legacy");
            return false;
        }
        g->reasoning_format = (int)k;
    }
    json_t *rf = json_object_get(o, "response_fields");
    if (rf && !json_is_null(rf) && !json_is_array(rf)) {
        ob_srv_error(r, 400, NULL, "'response_fields' must be an array of strings");
        return false;
    }
    g->response_fields = json_array_size(rf) ? rf : NULL;
    if (!ob_srv_get_bool(o, "stream", &g->stream, r)) return false;
    if (!ob_srv_get_bool(o, "ignore_eos", &g->ignore_eos, r)) return false;
    if (!parse_stop(json_object_get(o, fl == OB_GEN_ANTHROPIC ? "stop_sequences" : "stop"),
                    fl == OB_GEN_ANTHROPIC ? "stop_sequences" : "stop", g, r))
        return false;
    if (!parse_bias(s, json_object_get(o, "logit_bias"), g, r)) return false;
    if (fl == OB_GEN_OPENAI_CHAT || fl == OB_GEN_OPENAI_COMPL) {
        ll = 1;
        if (!ob_srv_get_int(o, "n", 1, OB_GEN_MAX_N, &ll, r)) return false;
        g->n = (int)ll;
        json_t *so = json_object_get(o, "stream_options");
        if (so && !json_is_null(so)) {
            if (!json_is_object(so)) {
                ob_srv_error(r, 400, NULL, "'stream_options' must be an object");
                return false;
            }
            if (!ob_srv_get_bool(so, "include_usage", &g->include_usage, r)) return false;
        }
    }
    if (fl == OB_GEN_OPENAI_CHAT) {
        if (!ob_srv_get_bool(o, "logprobs", &g->logprobs, r)) return false;
        ll = 0;
        if (!ob_srv_get_int(o, "top_logprobs", 0, OB_SRV_MAX_TOP, &ll, r)) return false;
        g->n_probs = (int)ll;
    } else if (fl == OB_GEN_OPENAI_COMPL) {
        ll = -1;
        if (!ob_srv_get_int(o, "logprobs", 0, OB_SRV_MAX_TOP, &ll, r)) return false;
        g->logprobs = ll >= 0;
        g->n_probs = ll > 0 ? (int)ll : 0;
        if (!ob_srv_get_bool(o, "echo", &g->echo, r)) return false;
    } else if (fl == OB_GEN_LLAMA) {
        ll = 0;
        if (!ob_srv_get_int(o, "n_probs", 0, OB_SRV_MAX_TOP, &ll, r)) return false;
        g->n_probs = (int)ll;
        g->logprobs = ll > 0;
    }
    for (int i = 0; i < g->n_stop; i++) {
        if (strlen(g->stop[i]) > 256) {
            ob_srv_error(r, 400, NULL, "stop strings must be at most 256 bytes");
            return false;
        }
    }
    return true;
}

int32_t *ob_gen_tokenize(ob_server_state *s, const char *text, size_t len, bool add_special,
                         bool parse_special, int *n_out, ob_resp *r) {
    int cap = (int)OB_MIN(len + 16, (size_t)1 << 24);
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) {
        ob_srv_error(r, 500, NULL, "out of memory");
        return NULL;
    }
    int n = ob_tokenize(s->tok, text, len, ids, cap, add_special, parse_special);
    if (n > cap) {
        int32_t *p = realloc(ids, (size_t)n * sizeof *ids);
        if (!p) {
            free(ids);
            ob_srv_error(r, 500, NULL, "out of memory");
            return NULL;
        }
        ids = p;
        n = ob_tokenize(s->tok, text, len, ids, n, add_special, parse_special);
    }
    if (n < 0) {
        free(ids);
        ob_srv_error(r, 400, NULL, "the text could not be tokenized");
        return NULL;
    }
    *n_out = n;
    return ids;
}

/* Appends ids to a growing prompt (*cap ids allocated, doubled as needed). */
static bool ids_add(int32_t **ids, int *n, int *cap, const int32_t *add, int k, ob_resp *r) {
    if (*n > (1 << 24) - k) {
        ob_srv_error(r, 400, NULL, "the prompt is too long");
        return false;
    }
    if (*n + k > *cap) {
        int c = *cap ? *cap : 64;
        while (c < *n + k) c *= 2;
        int32_t *p = realloc(*ids, (size_t)c * sizeof *p);
        if (!p) {
            ob_srv_error(r, 500, NULL, "out of memory");
            return false;
        }
        *ids = p;
        *cap = c;
    }
    memcpy(*ids + *n, add, (size_t)k * sizeof **ids);
    *n += k;
    return true;
}

/* One prompt: a string, a {"prompt_string": ...} object, or a sequence of token ids and
 * strings. BOS is added when the prompt starts with text (llama-server's rule). */
static bool one_prompt(ob_server_state *s, json_t *v, int32_t **ids_out, int *n_out, ob_resp *r) {
    *ids_out = NULL;
    *n_out = 0;
    if (json_is_object(v)) {
        json_t *mm = json_object_get(v, "multimodal_data");
        if (json_array_size(mm) || (mm && !json_is_null(mm) && !json_is_array(mm))) {
            ob_srv_error(r, 400, NULL, "multimodal_data is not supported: this server has no multimodal model loaded");
            return false;
        }
        v = json_object_get(v, "prompt_string");
        if (!json_is_string(v)) {
            ob_srv_error(r, 400, NULL, "a JSON prompt needs a string 'prompt_string'");
            return false;
        }
    }
    if (json_is_string(v)) {
        *ids_out = ob_gen_tokenize(s, json_string_value(v), json_string_length(v), true, true, n_out, r);
        return *ids_out != NULL;
    }
    if (!json_is_array(v) || json_array_size(v) == 0) {
        ob_srv_error(r, 400, NULL, "a prompt must be a string, a non-empty array of token ids and strings, or "
                     "{\"prompt_string\": ...}");
        return false;
    }
    int n_vocab = ob_tokenizer_n_vocab(s->tok), cap = 0;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        bool ok;
        if (json_is_integer(e)) {
            json_int_t id = json_integer_value(e);
            if (id < 0 || id >= n_vocab) {
                ob_srv_error(r, 400, NULL, "prompt token %lld is not below %d", (long long)id, n_vocab);
                ok = false;
            } else {
                int32_t t = (int32_t)id;
                ok = ids_add(ids_out, n_out, &cap, &t, 1, r);
            }
        } else if (json_is_string(e)) {
            int k;
            int32_t *t = ob_gen_tokenize(s, json_string_value(e), json_string_length(e), i == 0, true, &k, r);
            ok = t && ids_add(ids_out, n_out, &cap, t, k, r);
            free(t);
        } else {
            ob_srv_error(r, 400, NULL, "a prompt sequence holds only token ids and strings");
            ok = false;
        }
        if (!ok) {
            free(*ids_out);
            *ids_out = NULL;
            return false;
        }
    }
    return true;
}

bool ob_gen_prompts_parse(ob_server_state *s, json_t *prompt, ob_gen_prompts *p, ob_resp *r) {
    memset(p, 0, sizeof *p);
    /* an array is several prompts unless it is one sequence (it holds a token id) */
    bool several = json_is_array(prompt) && json_array_size(prompt) > 0;
    size_t i;
    json_t *e;
    json_array_foreach(prompt, i, e) if (json_is_integer(e)) several = false;
    size_t n = several ? json_array_size(prompt) : 1;
    if (n > OB_GEN_MAX_N) {
        ob_srv_error(r, 400, NULL, "at most %d prompts per request", OB_GEN_MAX_N);
        return false;
    }
    for (size_t k = 0; k < n; k++) {
        if (!one_prompt(s, several ? json_array_get(prompt, k) : prompt, &p->ids[k], &p->len[k], r)) {
            ob_gen_prompts_free(p);
            return false;
        }
        p->n = (int)k + 1;
    }
    return true;
}

void ob_gen_prompts_free(ob_gen_prompts *p) {
    for (int i = 0; i < p->n; i++) free(p->ids[i]);
    memset(p, 0, sizeof *p);
}

json_t *ob_gen_prompt_json(ob_server_state *s, const int32_t *ids, int n) {
    char *text = NULL, piece[512];
    size_t tl = 0;
    ob_detok d = {0};
    for (int i = 0; i < n; i++) {
        size_t pn = ob_detok_push(s->tok, &d, ids[i], piece, sizeof piece);
        if (pn <= sizeof piece) ob_srv_buf_add(&text, &tl, piece, pn);
    }
    size_t pn = ob_detok_flush(&d, piece, sizeof piece);
    if (pn <= sizeof piece) ob_srv_buf_add(&text, &tl, piece, pn);
    json_t *j = ob_srv_jstr(text ? text : "", tl);
    free(text);
    return j;
}

json_t *ob_gen_settings_json(ob_server_state *s, const ob_gen_req *g) {
    const ob_sampler_params *sp = &g->sp;
    json_t *stop = json_array();
    for (int i = 0; i < g->n_stop; i++) json_array_append_new(stop, ob_srv_jstr(g->stop[i], strlen(g->stop[i])));
    json_t *bias = json_array();
    for (int i = 0; i < sp->n_logit_bias; i++)
        json_array_append_new(bias, json_pack("{s:o,s:i}", "bias", g->bias_val[i] <= -1e30f ? json_null()
                                              : json_real(g->bias_val[i]), "token", g->bias_tok[i]));
    if (g->ignore_eos) { /* end-of-generation tokens are never sampled: llama-server lists them */
        int n_vocab = ob_tokenizer_n_vocab(s->tok);
        for (int t = 0; t < n_vocab; t++)
            if (ob_token_is_eog(s->tok, t)) json_array_append_new(bias, json_pack("{s:n,s:i}", "bias", "token", t));
    }
    /* the seed of a random-seeded request reads as llama-server's -1 (4294967295) */
    json_t *j = json_pack("{s:I,s:f,s:i,s:f,s:f,s:i,s:f,s:f,s:f,s:i,s:i,s:o,s:b,s:b,s:o,s:i,s:b,s:b}",
                          "seed", g->seed_given ? (json_int_t)sp->seed : (json_int_t)4294967295LL,
                          "temperature", (double)sp->temperature, "top_k", sp->top_k, "top_p", (double)sp->top_p,
                          "min_p", (double)sp->min_p, "repeat_last_n", sp->penalty_last_n,
                          "repeat_penalty", (double)sp->repeat_penalty, "presence_penalty", (double)sp->presence_penalty,
                          "frequency_penalty", (double)sp->frequency_penalty, "n_predict", g->n_predict,
                          "max_tokens", g->n_predict, "stop", stop, "ignore_eos", g->ignore_eos, "stream", g->stream,
                          "logit_bias", bias, "n_probs", g->n_probs, "post_sampling_probs", g->post_sampling_probs,
                          "timings_per_token", g->timings_per_token);
    /* samplers this server does not have, at their "off" values */
    json_t *off = json_pack("{s:f,s:f,s:f,s:f,s:f,s:i,s:i,s:i,s:s}", "dynatemp_range", 0.0, "dynatemp_exponent", 1.0,
                            "top_n_sigma", -1.0, "adaptive_target", -1.0, "adaptive_decay", 0.9, "n_keep", 0,
                            "n_discard", 0, "min_keep", 0, "grammar", g->grammar ? g->grammar : "");
    json_object_update(j, off);
    json_decref(off);
    ob_gen_samplers_json(g, j); /* mirostat, typical_p, dry_*, xtc_* */
    json_object_set_new(j, "samplers", json_pack("[s,s,s,s,s,s,s,s]", "penalties", "dry", "top_k", "typ_p", "top_p",
                                                 "min_p", "xtc", "temperature"));
    json_object_set_new(j, "model", json_string(s->model_id));
    return j;
}

ob_task_params ob_gen_task_params(const ob_gen_req *g, const int32_t *prompt, int n_prompt, int choice) {
    ob_task_params p = {0};
    p.prompt = prompt;
    p.n_prompt = n_prompt;
    p.n_predict = g->n_predict;
    p.sp = g->sp;
    p.sp.seed = g->sp.seed + (uint64_t)choice;
    p.sp.logit_bias_tok = g->bias_tok;
    p.sp.logit_bias_val = g->bias_val;
    p.stop = g->stop;
    p.n_stop = g->n_stop;
    p.n_probs = g->n_probs;
    p.logprobs = g->logprobs;
    p.post_sampling = g->logprobs && g->post_sampling_probs;
    p.ignore_eos = g->ignore_eos;
    p.dry_breakers = &g->dry_breakers;
    p.grammar = g->grammar;
    if (g->grammar && g->grammar == g->tcg.gbnf) {
        p.grammar_lazy = g->tcg.lazy;
        p.grammar_words = (const char *const *)g->tcg.words;
        p.n_grammar_words = g->tcg.n_words;
        p.grammar_starts = (const char *const *)g->tcg.starts;
        p.n_grammar_starts = g->tcg.n_starts;
        p.grammar_special = g->tcg.special;
    }
    p.think_open = g->think_open;
    p.pin_slot = g->id_slot >= 0;
    p.id_slot = g->id_slot;
    return p;
}

bool ob_oai_ready(ob_server_state *s, ob_resp *r);

bool ob_gen_ready(ob_server_state *s, ob_resp *r) {
    if (!ob_oai_ready(s, r)) return false;
    if (s->sched) return true;
    if (!s->embd) { /* asleep, and waking failed (logged) */
        ob_srv_error(r, 503, NULL, "the server is asleep and could not wake: see its log");
        return false;
    }
    /* embedding mode has no scheduler; llama-server's words */
    ob_srv_error(r, 501, "not_supported_error", "This server does not support completions. Start it without `--embeddings`");
    return false;
}

ob_task *ob_gen_submit(ob_server_state *s, const ob_task_params *p, ob_resp *r) {
    if (!ob_gen_ready(s, r)) return NULL;
    char err[256];
    ob_status st;
    ob_task *t = ob_sched_submit(s->sched, p, &st, err, sizeof err);
    if (t) return t;
    if (st == OB_ERR_CONTEXT) {
        /* llama-server's shape: the error also carries the prompt's length and a slot's */
        int n_ctx = ob_sched_n_ctx_slot(s->sched);
        char msg[384];
        snprintf(msg, sizeof msg, "the request exceeds the available context size: the prompt has %d tokens, a "
                 "slot holds %d (try a larger --ctx-size or fewer --parallel slots)", p->n_prompt, n_ctx);
        ob_srv_json(r, 400, json_pack("{s:{s:i,s:s,s:s,s:i,s:i}}", "error", "code", 400, "message", msg, "type",
                                      "exceed_context_size_error", "n_prompt_tokens", p->n_prompt, "n_ctx", n_ctx));
    }
    else if (st == OB_ERR_ARG) ob_srv_error(r, 400, NULL, "%s", err);
    else if (st == OB_ERR_DEVICE) ob_srv_error(r, 503, NULL, "%s", err);
    else ob_srv_error(r, 500, NULL, "%s", err);
    return NULL;
}

bool ob_gen_wait(ob_server_state *s, const ob_req *rq, ob_task **tasks, int n, ob_gen_result *res, ob_resp *r) {
    int fd = ob_srv_conn_fd(rq);
    ob_task_cursor cur[OB_GEN_MAX_N] = {{0}};
    memset(res, 0, (size_t)n * sizeof *res);
    int left = n;
    bool done[OB_GEN_MAX_N] = {0};
    while (left > 0) {
        for (int i = 0; i < n; i++) {
            if (done[i]) continue;
            ob_task_out o;
            ob_sched_poll(s->sched, tasks[i], &cur[i], 100, &o);
            if (o.text_len) ob_srv_buf_add(&res[i].text, &res[i].text_len, o.text, o.text_len);
            if (o.n_toks) {
                ob_tok_rec *p = realloc(res[i].toks, (size_t)(res[i].n_toks + o.n_toks) * sizeof *p);
                if (p) {
                    memcpy(p + res[i].n_toks, o.toks, (size_t)o.n_toks * sizeof *p);
                    res[i].toks = p;
                    res[i].n_toks += o.n_toks;
                }
            }
            ob_task_out_clear(&o);
            if (o.stop_word && !res[i].stop_word) res[i].stop_word = strdup(o.stop_word);
            res[i].last = o;
            res[i].last.stop_word = res[i].stop_word;
            if (o.done) {
                done[i] = true;
                left--;
                if (o.finish == OB_FINISH_ERROR) {
                    ob_srv_error(r, o.err_status ? o.err_status : 500, NULL, "%s", o.err);
                    return false;
                }
            }
        }
        if (left > 0 && ob_srv_client_gone(fd)) {
            r->status = 0;
            return false;
        }
    }
    for (int i = 0; i < n; i++)
        if (!res[i].text) ob_srv_buf_add(&res[i].text, &res[i].text_len, "", 0);
    return true;
}

void ob_gen_result_clear(ob_gen_result *res) {
    free(res->stop_word);
    free(res->text);
    free(res->toks);
    memset(res, 0, sizeof *res);
}

const char *ob_gen_finish_str(const ob_task_out *o) {
    return o->finish == OB_FINISH_LENGTH ? "length" : "stop";
}

json_t *ob_gen_timings(const ob_task_out *o) {
    double pn = o->n_prompt - o->n_cached;
    json_t *j = json_pack("{s:i,s:f,s:f,s:f,s:i,s:f,s:f,s:f,s:i}",
                     "prompt_n", (int)pn, "prompt_ms", o->t_prompt_ms,
                     "prompt_per_token_ms", pn > 0 ? o->t_prompt_ms / pn : 0.0,
                     "prompt_per_second", o->t_prompt_ms > 0 ? pn * 1e3 / o->t_prompt_ms : 0.0,
                     "predicted_n", o->n_gen, "predicted_ms", o->t_gen_ms,
                     "predicted_per_token_ms", o->n_gen > 0 ? o->t_gen_ms / o->n_gen : 0.0,
                     "predicted_per_second", o->t_gen_ms > 0 ? o->n_gen * 1e3 / o->t_gen_ms : 0.0,
                     "cache_n", o->n_cached);
    /* llama-server adds these only when a draft model is loaded */
    if (j && o->speculative) {
        json_object_set_new(j, "draft_n", json_integer(o->draft_n));
        json_object_set_new(j, "draft_n_accepted", json_integer(o->draft_n_accepted));
    }
    return j;
}

static int gen_next(ob_stream *st, char **buf, size_t *len) {
    ob_gen_stream *gs = (ob_gen_stream *)st;
    if (gs->ended) return 0;
    for (;;) {
        ob_task_out o;
        ob_sched_poll(gs->s->sched, gs->task, &gs->cur, 100, &o);
        bool news = o.text_len || o.n_toks || o.done || !gs->started;
        if (news) {
            gs->fmt(gs, &o, buf, len);
            gs->started = true;
        }
        bool done = o.done;
        ob_task_out_clear(&o);
        if (done) {
            gs->ended = true;
            return 0;
        }
        if (news && *len) return 1;
        if (ob_srv_client_gone(st->fd)) return -1;
    }
}

static void gen_close(ob_stream *st) {
    ob_gen_stream *gs = (ob_gen_stream *)st;
    ob_sched_release(gs->s->sched, gs->task);
    ob_reply_free(&gs->rp);
    json_decref(gs->items);
    json_decref(gs->settings);
    free(gs->hold);
    free(gs);
}

ob_resp ob_gen_stream_start(ob_server_state *s, const ob_req *rq, ob_task *t, ob_gen_fmt fmt,
                            const ob_gen_req *g, ob_gen_stream **out) {
    ob_resp r = {0};
    ob_gen_stream *gs = calloc(1, sizeof *gs);
    if (!gs) {
        ob_sched_release(s->sched, t);
        ob_srv_error(&r, 500, NULL, "out of memory");
        return r;
    }
    gs->base.next = gen_next;
    gs->base.close = gen_close;
    gs->base.fd = ob_srv_conn_fd(rq);
    gs->s = s;
    gs->task = t;
    gs->fmt = fmt;
    gs->created = (long)time(NULL);
    gs->logprobs = g->logprobs;
    gs->include_usage = g->include_usage;
    gs->timings_per_token = g->timings_per_token;
    gs->return_tokens = g->return_tokens;
    gs->post_sampling_probs = g->post_sampling_probs;
    ob_reply_init(&gs->rp, g);
    gs->settings = ob_gen_settings_json(s, g);
    r.status = 200;
    r.content_type = "text/event-stream";
    r.stream = &gs->base;
    if (out) *out = gs;
    return r;
}

bool ob_srv_client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    if (p.revents & POLLIN) { /* readable: either pipelined bytes or an orderly close */
        char c;
        ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        return n == 0;
    }
    return false;
}

void ob_gen_split_think(const char *text, size_t len, bool think_open, int fmt, char **content, char **reasoning) {
    *reasoning = NULL;
    size_t i = 0;
    while (i < len && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) i++;
    bool opened = len - i >= 7 && memcmp(text + i, "<think>", 7) == 0;
    if (fmt != OB_RFMT_NONE && (opened || think_open)) {
        const char *b = opened ? text + i + 7 : text;
        size_t bl = (size_t)(text + len - b);
        const char *e = memmem(b, bl, "</think>", 8);
        size_t rl = e ? (size_t)(e - b) : bl;
        *reasoning = strndup(b, rl);
        const char *c = e ? e + 8 : b + bl;
        size_t cl = (size_t)(text + len - c);
        while (cl && (*c == '\n' || *c == ' ')) { c++; cl--; }
        *content = fmt == OB_RFMT_DEEPSEEK_LEGACY ? strndup(text, len) : strndup(c, cl);
        return;
    }
    *content = strndup(text, len);
}

void ob_gen_id(char *out, size_t n, const char *prefix) {
    static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec * 2654435761u ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)out;
    size_t p = (size_t)snprintf(out, n, "%s", prefix);
    for (; p + 1 < n && p < strlen(prefix) + 24; p++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        out[p] = al[x % (sizeof al - 1)];
    }
    if (p < n) out[p] = 0;
}
