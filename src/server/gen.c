/* Shared generation plumbing for the route families (see gen.h). */
#include "server/gen.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>

#include "core/common.h"

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

static bool parse_bias(ob_server_state *s, json_t *v, ob_gen_req *g, ob_resp *r) {
    if (!v || json_is_null(v)) return true;
    int n_vocab = ob_tokenizer_n_vocab(s->tok);
    if (json_is_object(v)) {
        const char *k;
        json_t *b;
        json_object_foreach(v, k, b) {
            char *end;
            long id = strtol(k, &end, 10);
            if (*k == 0 || *end || id < 0 || id >= n_vocab || !json_is_number(b)) {
                ob_srv_error(r, 400, NULL, "'logit_bias' keys must be token ids and values numbers");
                return false;
            }
            if (g->sp.n_logit_bias >= OB_GEN_MAX_BIAS) {
                ob_srv_error(r, 400, NULL, "'logit_bias' has too many entries");
                return false;
            }
            g->bias_tok[g->sp.n_logit_bias] = (int32_t)id;
            g->bias_val[g->sp.n_logit_bias++] = (float)json_number_value(b);
        }
        return true;
    }
    if (json_is_array(v)) { /* llama-server: [[id, bias], ...] */
        size_t i;
        json_t *p;
        json_array_foreach(v, i, p) {
            json_t *a = json_array_get(p, 0), *b = json_array_get(p, 1);
            if (!json_is_array(p) || !json_is_integer(a) || !(json_is_number(b) || json_is_false(b)) ||
                json_integer_value(a) < 0 || json_integer_value(a) >= n_vocab || g->sp.n_logit_bias >= OB_GEN_MAX_BIAS) {
                ob_srv_error(r, 400, NULL, "'logit_bias' must be [[token_id, bias], ...]");
                return false;
            }
            g->bias_tok[g->sp.n_logit_bias] = (int32_t)json_integer_value(a);
            g->bias_val[g->sp.n_logit_bias++] = json_is_false(b) ? -1e30f : (float)json_number_value(b);
        }
        return true;
    }
    ob_srv_error(r, 400, NULL, "'logit_bias' must be an object");
    return false;
}

bool ob_gen_parse(ob_server_state *s, json_t *o, ob_gen_flavor fl, ob_gen_req *g, ob_resp *r) {
    memset(g, 0, sizeof *g);
    g->sp = s->cfg->sp; /* the server's --temp, --seed, ... */
    if (!s->cfg->seed_set)
        g->sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)(uintptr_t)g << 16) ^ (uint64_t)(ob_time_s() * 1e9);
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
    ll = -1;
    if (!ob_srv_get_int(o, "seed", -(1LL << 62), 1LL << 62, &ll, r)) return false;
    if (json_object_get(o, "seed") && !json_is_null(json_object_get(o, "seed"))) g->sp.seed = (uint64_t)ll;
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

int32_t *ob_gen_prompt_tokens(ob_server_state *s, json_t *prompt, int *n_out, ob_resp *r) {
    if (json_is_string(prompt))
        return ob_gen_tokenize(s, json_string_value(prompt), json_string_length(prompt), true, true, n_out, r);
    if (!json_is_array(prompt) || json_array_size(prompt) == 0) {
        ob_srv_error(r, 400, NULL, "'prompt' must be a string or a non-empty array of token ids");
        return NULL;
    }
    /* one string in an array is the common OpenAI shape */
    if (json_array_size(prompt) == 1 && json_is_string(json_array_get(prompt, 0)))
        return ob_gen_prompt_tokens(s, json_array_get(prompt, 0), n_out, r);
    size_t n = json_array_size(prompt);
    int n_vocab = ob_tokenizer_n_vocab(s->tok);
    int32_t *ids = malloc(n * sizeof *ids);
    if (!ids) {
        ob_srv_error(r, 500, NULL, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(prompt, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= n_vocab) {
            free(ids);
            ob_srv_error(r, 400, NULL, "'prompt' must be a string or an array of token ids below %d", n_vocab);
            return NULL;
        }
        ids[i] = (int32_t)json_integer_value(e);
    }
    *n_out = (int)n;
    return ids;
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
    p.ignore_eos = g->ignore_eos;
    return p;
}

bool ob_oai_ready(ob_server_state *s, ob_resp *r);

bool ob_gen_ready(ob_server_state *s, ob_resp *r) {
    if (!ob_oai_ready(s, r)) return false;
    if (s->sched) return true;
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
    if (st == OB_ERR_CONTEXT) ob_srv_error(r, 400, "exceed_context_size_error", "%s", err);
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
            res[i].last = o;
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

void ob_gen_split_think(const char *text, size_t len, char **content, char **reasoning) {
    *reasoning = NULL;
    size_t i = 0;
    while (i < len && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) i++;
    if (len - i >= 7 && memcmp(text + i, "<think>", 7) == 0) {
        const char *b = text + i + 7;
        size_t bl = len - i - 7;
        const char *e = memmem(b, bl, "</think>", 8);
        size_t rl = e ? (size_t)(e - b) : bl;
        *reasoning = strndup(b, rl);
        const char *c = e ? e + 8 : b + bl;
        size_t cl = (size_t)(text + len - c);
        while (cl && (*c == '\n' || *c == ' ')) { c++; cl--; }
        *content = strndup(c, cl);
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
