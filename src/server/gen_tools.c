/* Tool calls in chat requests and replies (gen.h): the grammar a request's tool_choice
 * asks for, and the reply split into reasoning, content and calls, as a stream of events
 * (streamed replies) or read whole. The formats and their grammars are chat/toolcall.h's;
 * this file only decides which applies and gives calls their ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "grammar/grammar.h"
#include "server/gen.h"

void ob_gen_req_clear(ob_gen_req *g) {
    ob_tc_grammar_free(&g->tcg);
    json_decref(g->tools);
    g->tools = NULL;
    g->grammar = NULL;
}

bool ob_gen_tools_setup(ob_server_state *s, const ob_chat_opts *co, const ob_chat_out *out, ob_gen_req *g, ob_resp *r) {
    (void)s;
    g->parallel_tools = co->parallel;
    if (!co->tools) {
        /* gpt-oss's channels are read even without tools: analysis is reasoning */
        if (out->tc_format == OB_TC_HARMONY && g->reasoning_format != OB_RFMT_NONE) g->tc_format = OB_TC_HARMONY;
        return true;
    }
    g->tc_format = out->tc_format ? out->tc_format : OB_TC_GENERIC;
    g->tools = json_incref(co->tools);
    bool forced = co->tool_choice == OB_TOOLS_REQUIRED || co->tool_choice == OB_TOOLS_NAMED;
    if (g->grammar) { /* the request's own grammar or schema holds the whole reply */
        if (forced) {
            ob_srv_error(r, 400, NULL, "tool_choice \"required\" or a named function cannot be used with a grammar, "
                         "json_schema or response_format");
            return false;
        }
        return true;
    }
    ob_tc_grammar_opts o = {.tools = co->tools, .only = co->tool_choice == OB_TOOLS_NAMED ? co->tool_name : NULL,
                            .required = forced, .parallel = co->parallel && co->tool_choice != OB_TOOLS_NAMED,
                            .think = out->think};
    char err[512];
    ob_status st = ob_tc_grammar_build((ob_tc_format)g->tc_format, &o, &g->tcg, err, sizeof err);
    if (st == OB_ERR_NOMEM) {
        ob_srv_error(r, 500, NULL, "out of memory");
        return false;
    }
    if (st) {
        if (forced) {
            ob_srv_error(r, 400, NULL, "tools: %s", err);
            return false;
        }
        /* auto: calls are still read, only not held to their schemas */
        ob_log(OB_LOG_WARN, "serve: tool calls left unconstrained: %s", err);
        return true;
    }
    g->grammar = g->tcg.gbnf;
    return true;
}

/* ---- the reply as it comes ------------------------------------------------------------ */

void ob_reply_init(ob_reply *rp, const ob_gen_req *g) {
    memset(rp, 0, sizeof *rp);
    /* where the reply starts: inside a thought the prompt opened, or undecided; with
     * reasoning_format none (or legacy) a thought is content */
    bool plain = g->reasoning_format == OB_RFMT_NONE || g->reasoning_format == OB_RFMT_DEEPSEEK_LEGACY;
    rp->think = plain ? 2 : g->think_open ? 1 : 0;
    rp->reasoning_as_content = g->reasoning_format == OB_RFMT_NONE;
    rp->parallel = g->parallel_tools || g->tc_format == OB_TC_HARMONY;
    rp->tc_format = g->tc_format;
    if (g->tc_format != OB_TC_NONE) {
        rp->tools = json_incref(g->tools);
        rp->tc = ob_tc_stream_new((ob_tc_format)g->tc_format, rp->tools);
        if (!rp->tc) rp->oom = true;
    }
}

void ob_reply_free(ob_reply *rp) {
    ob_tc_stream_free(rp->tc);
    json_decref(rp->tools);
    free(rp->hold);
    memset(rp, 0, sizeof *rp);
}

static void emit(ob_reply *rp, ob_tc_ev_kind kind, const char *t, size_t n) {
    if (!n) return;
    if (kind == OB_TC_EV_REASONING && rp->reasoning_as_content) kind = OB_TC_EV_CONTENT;
    rp->fn(rp->ud, &(ob_tc_event){.kind = kind, .text = t, .len = n});
}

/* A model's own call id is kept when it is a short word (letters, digits, '_', '-'). */
static bool id_ok(const char *id) {
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > 32) return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* Calls get their ids here; with parallel_tool_calls false only the first passes. */
static void on_tc(void *ud, const ob_tc_event *e) {
    ob_reply *rp = ud;
    if (e->kind == OB_TC_EV_CONTENT || e->kind == OB_TC_EV_REASONING) {
        emit(rp, e->kind, e->text, e->len);
        return;
    }
    if (e->index >= OB_TC_MAX_CALLS || (!rp->parallel && e->index > 0)) return;
    ob_tc_event c = *e;
    if (e->kind == OB_TC_EV_CALL) {
        if (e->index != rp->n_calls) return;
        if (id_ok(e->id)) snprintf(rp->ids[e->index], sizeof rp->ids[0], "%s", e->id);
        /* Mistral's templates check that ids are 9 letters and digits */
        else if (rp->tc_format == OB_TC_MISTRAL || rp->tc_format == OB_TC_MISTRAL_V11) ob_gen_id(rp->ids[e->index], 10, "");
        else ob_gen_id(rp->ids[e->index], sizeof rp->ids[0], "call_");
        rp->n_calls++;
    } else if (e->index >= rp->n_calls) {
        return;
    }
    c.id = rp->ids[e->index];
    rp->fn(rp->ud, &c);
}

static void content(ob_reply *rp, const char *t, size_t n, bool final) {
    if (!rp->tc) {
        emit(rp, OB_TC_EV_CONTENT, t, n);
        return;
    }
    if ((n || final) && ob_tc_stream_feed(rp->tc, t, n, final, on_tc, rp) != OB_OK) rp->oom = true;
}

void ob_reply_feed(ob_reply *rp, const char *t, size_t n, bool final, ob_tc_event_fn fn, void *ud) {
    rp->fn = fn;
    rp->ud = ud;
    ob_srv_buf_add(&rp->hold, &rp->hold_len, t ? t : "", t ? n : 0);
    for (;;) {
        char *h = rp->hold ? rp->hold : "";
        size_t hl = rp->hold_len;
        if (rp->think == 0) { /* does the reply open a thought? */
            size_t i = 0;
            while (i < hl && (h[i] == ' ' || h[i] == '\n' || h[i] == '\r' || h[i] == '\t')) i++;
            size_t rest = hl - i;
            if (rest >= 7 && !memcmp(h + i, "<think>", 7)) {
                rp->think = 1;
                memmove(h, h + i + 7, hl - i - 7);
                rp->hold_len -= i + 7;
                continue;
            }
            if (!final && rest < 7 && !memcmp(h + i, "<think>", rest)) return;
            rp->think = 2;
            continue;
        }
        if (rp->think == 1) {
            char *e = memmem(h, hl, "</think>", 8);
            if (e) {
                size_t k = (size_t)(e - h);
                emit(rp, OB_TC_EV_REASONING, h, k);
                size_t skip = k + 8;
                while (skip < hl && (h[skip] == '\n' || h[skip] == ' ')) skip++;
                if (skip == hl && !final) { /* more blank may follow: keep the closing tag */
                    memmove(h, h + k, hl - k);
                    rp->hold_len = hl - k;
                    return;
                }
                memmove(h, h + skip, hl - skip);
                rp->hold_len -= skip;
                rp->think = 2;
                continue;
            }
            size_t keep = 0;
            for (size_t k = OB_MIN(7, hl); k > 0 && !final; k--)
                if (!memcmp(h + hl - k, "</think>", k)) {
                    keep = k;
                    break;
                }
            emit(rp, OB_TC_EV_REASONING, h, hl - keep);
            memmove(h, h + hl - keep, keep);
            rp->hold_len = keep;
            if (final) rp->think = 2; /* a thought never closed */
            return;
        }
        rp->hold_len = 0;
        content(rp, h, hl, final);
        return;
    }
}

/* ---- a whole reply -------------------------------------------------------------------- */

typedef struct whole { ob_reply_all *a; ob_gtext content, reasoning; } whole;

static void on_whole(void *ud, const ob_tc_event *e) {
    whole *w = ud;
    ob_reply_all *a = w->a;
    switch (e->kind) {
    case OB_TC_EV_CONTENT: ob_gtext_add(&w->content, e->text, e->len); break;
    case OB_TC_EV_REASONING: ob_gtext_add(&w->reasoning, e->text, e->len); break;
    case OB_TC_EV_CALL:
        if (a->n_calls < OB_TC_MAX_CALLS) {
            ob_reply_call *c = &a->calls[a->n_calls++];
            c->name = strdup(e->name ? e->name : "");
            snprintf(c->id, sizeof c->id, "%s", e->id ? e->id : "");
        }
        break;
    case OB_TC_EV_ARGS:
        if (e->index < a->n_calls) {
            ob_reply_call *c = &a->calls[e->index];
            char *p = realloc(c->args, c->args_len + e->len + 1);
            if (p) {
                memcpy(p + c->args_len, e->text, e->len);
                c->args_len += e->len;
                p[c->args_len] = 0;
                c->args = p;
            }
        }
        break;
    }
}

void ob_reply_whole(const ob_gen_req *g, const char *text, size_t len, ob_reply_all *out) {
    memset(out, 0, sizeof *out);
    whole w = {.a = out};
    ob_reply rp;
    ob_reply_init(&rp, g);
    ob_reply_feed(&rp, text, len, true, on_whole, &w);
    ob_reply_free(&rp);
    if (g->reasoning_format == OB_RFMT_DEEPSEEK_LEGACY) { /* the thought in both places */
        char *c, *rs;
        ob_gen_split_think(text, len, g->think_open, g->reasoning_format, &c, &rs);
        if (rs) ob_gtext_puts(&w.reasoning, rs);
        free(c);
        free(rs);
    }
    ob_gtext_add(&w.content, "", 0);
    ob_gtext_add(&w.reasoning, "", 0);
    out->content = w.content.s ? w.content.s : strdup("");
    out->content_len = w.content.s ? w.content.n : 0;
    out->reasoning = w.reasoning.s ? w.reasoning.s : strdup("");
    out->reasoning_len = w.reasoning.s ? w.reasoning.n : 0;
    for (int i = 0; i < out->n_calls; i++)
        if (!out->calls[i].args) out->calls[i].args = strdup("{}"), out->calls[i].args_len = 2;
}

void ob_reply_all_free(ob_reply_all *a) {
    free(a->content);
    free(a->reasoning);
    for (int i = 0; i < a->n_calls; i++) {
        free(a->calls[i].name);
        free(a->calls[i].args);
    }
    memset(a, 0, sizeof *a);
}
