/* The grammar of tool calls (toolcall.h): each format's markup around each tool's
 * parameters schema (grammar/grammar.h's builder), and the words that start it when it
 * is lazy. With tool_choice auto the reply is free until a trigger appears and the call
 * is held from the trigger's first byte on; with required (or a named tool) the reply is
 * calls from its first token, after a thought where the template has one. */
#include "chat/toolcall.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "grammar/grammar.h"

#define DS_CALLS_BEGIN "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define DS_CALLS_END "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define DS_CALL_BEGIN "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define DS_CALL_END "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define DS_SEP "<\xEF\xBD\x9Ctool\xE2\x96\x81" "sep\xEF\xBD\x9C>"

typedef struct gb {
    ob_grammar_builder *b;
    ob_tc_format f;
    const ob_tc_grammar_opts *o;
    ob_status st;
    char *err;
    size_t err_len;
    const char *ws;        /* the optional-whitespace rule */
    /* gpt-oss: the header after the name, in a channel header or a role header, and the
     * calls of the role form */
    const char *h_rest, *h_rest_role;
    ob_gtext h_role;
} gb;

static bool gfail(gb *g, ob_status st, const char *fmt, const char *arg) {
    if (g->st) return false;
    g->st = st;
    if (g->err && g->err_len) snprintf(g->err, g->err_len, fmt, arg);
    return false;
}

static bool g_oom(gb *g) { return gfail(g, OB_ERR_NOMEM, "%s", "out of memory"); }

/* " lit " */
static void lit(ob_gtext *t, const char *s) {
    ob_gtext_add(t, " ", 1);
    ob_gtext_literal(t, s, strlen(s));
    ob_gtext_add(t, " ", 1);
}

/* A name as a JSON string, as a literal: "\"get_weather\"" */
static bool json_name_lit(gb *g, ob_gtext *t, const char *name) {
    json_t *j = json_string(name);
    char *s = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    json_decref(j);
    if (!s) return g_oom(g);
    lit(t, s);
    free(s);
    return true;
}

static void ref(ob_gtext *t, const char *name) {
    ob_gtext_add(t, " ", 1);
    ob_gtext_puts(t, name);
    ob_gtext_add(t, " ", 1);
}

/* A rule from a text being written; the text is freed. */
static const char *rule_of(gb *g, const char *hint, ob_gtext *body) {
    const char *n = body->oom ? NULL : ob_grammar_builder_rule(g->b, hint, body->s ? body->s : "");
    free(body->s);
    memset(body, 0, sizeof *body);
    if (!n) g_oom(g);
    return n;
}

/* Any text that does not contain stop (an ASCII word whose first byte occurs in it only
 * there): a byte other than the first, or a proper prefix of stop followed by a byte that
 * neither continues it nor starts it again. */
static const char *not_containing(gb *g, const char *stop) {
    char hint[64];
    snprintf(hint, sizeof hint, "tc-text-%zu", strlen(stop));
    ob_gtext t = {0};
    size_t n = strlen(stop);
    ob_gtext_printf(&t, "( [^\\x%02X]", (unsigned char)stop[0]);
    for (size_t k = 1; k < n; k++) {
        ob_gtext_add(&t, " | ", 3);
        ob_gtext_literal(&t, stop, k);
        ob_gtext_printf(&t, " [^\\x%02X\\x%02X]", (unsigned char)stop[k], (unsigned char)stop[0]);
    }
    ob_gtext_puts(&t, " )*");
    return rule_of(g, hint, &t);
}

/* The tools a call may name: all, or the one tool_choice names. */
static int tools_of(gb *g, const json_t **fns, int cap) {
    int n = 0;
    size_t i;
    const json_t *tool;
    json_array_foreach(g->o->tools, i, tool) {
        const json_t *fn = json_object_get(tool, "function");
        if (!json_is_object(fn)) fn = tool;
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name || !*name || (g->o->only && strcmp(name, g->o->only))) continue;
        if (n < cap) fns[n++] = fn;
    }
    return n;
}

/* The rule of a tool's arguments (its parameters schema; none: any object). */
static const char *args_rule(gb *g, const json_t *fn, int idx) {
    char hint[32], err[256];
    snprintf(hint, sizeof hint, "tc%d-args", idx);
    const json_t *ps = json_object_get(fn, "parameters");
    ob_status st;
    const char *r = ob_grammar_builder_schema(g->b, json_is_object(ps) ? ps : NULL, hint, &st, err, sizeof err);
    if (!r) {
        if (st == OB_ERR_NOMEM) return g_oom(g), NULL;
        char msg[400];
        snprintf(msg, sizeof msg, "tool '%.64s': %s", json_string_value(json_object_get(fn, "name")), err);
        gfail(g, st, "%s", msg);
    }
    return r;
}

/* A property's schema says its value is a string (then the XML-like formats write it raw). */
static bool is_string_schema(const json_t *ps) {
    const json_t *ty = json_object_get(ps, "type");
    return !ty || (json_is_string(ty) && !strcmp(json_string_value(ty), "string"));
}

/* A string parameter written raw: its enum's values, at most maxLength characters (no
 * '<' in them then, so the closing tag cannot hide inside), or any text without the
 * closing tag. Qwen3-Coder's values may sit between newlines. */
static void raw_string(gb *g, const json_t *ps, const char *text, ob_gtext *out) {
    const json_t *en = json_object_get(ps, "enum"), *ml = json_object_get(ps, "maxLength");
    bool nl = g->f == OB_TC_QWEN3_CODER;
    size_t i;
    const json_t *v;
    bool all_strings = json_array_size(en) > 0;
    json_array_foreach(en, i, v) all_strings = all_strings && json_is_string(v);
    if (nl) ob_gtext_puts(out, " \"\\n\"? ");
    if (all_strings) {
        ob_gtext_puts(out, " ( ");
        json_array_foreach(en, i, v) {
            if (i) ob_gtext_puts(out, " | ");
            ob_gtext_literal(out, json_string_value(v), json_string_length(v));
        }
        ob_gtext_puts(out, " ) ");
        if (nl) ob_gtext_puts(out, " \"\\n\"? ");
    } else if (json_is_integer(ml) && json_integer_value(ml) >= 0 && json_integer_value(ml) <= 100000) {
        ob_gtext_printf(out, " [^<]{0,%lld} ", (long long)json_integer_value(ml) + (nl ? 1 : 0));
    } else {
        ref(out, text);
    }
}

/* The parameters of an XML-like call (QWEN3_CODER, GLM45): required ones in the declared
 * order, optional ones may be left out; a schema without properties takes any keys. */
static bool xml_params(gb *g, const json_t *fn, int idx, ob_gtext *out) {
    bool glm = g->f == OB_TC_GLM45;
    const char *close = glm ? "</arg_value>" : "</parameter>";
    const char *text = not_containing(g, close);
    if (!text) return false;
    const json_t *params = json_object_get(fn, "parameters");
    const json_t *props = json_object_get(params, "properties"), *req = json_object_get(params, "required");
    if (!json_is_object(props) || !json_object_size(props)) {
        ob_gtext_printf(out, " ( %s [a-zA-Z0-9_.-]+ %s %s %s %s )* ", glm ? "\"<arg_key>\"" : "\"<parameter=\"",
                        glm ? "\"</arg_key>\" ws \"<arg_value>\"" : "\">\"", text, glm ? "\"</arg_value>\"" : "\"</parameter>\"",
                        g->ws);
        return true;
    }
    const char *key;
    const json_t *ps;
    int k = 0;
    json_object_foreach((json_t *)props, key, ps) {
        bool required = false;
        size_t i;
        const json_t *r;
        json_array_foreach(req, i, r) if (json_is_string(r) && !strcmp(json_string_value(r), key)) required = true;
        ob_gtext one = {0};
        char open[400];
        if (strlen(key) > 256) return gfail(g, OB_ERR_ARG, "%s", "a parameter name is longer than 256 bytes");
        snprintf(open, sizeof open, glm ? "<arg_key>%s</arg_key>" : "<parameter=%s>", key);
        lit(&one, open);
        if (glm) ob_gtext_printf(&one, " %s \"<arg_value>\" ", g->ws);
        if (is_string_schema(ps)) {
            raw_string(g, ps, text, &one);
        } else {
            char hint[48];
            snprintf(hint, sizeof hint, "tc%d-p%d", idx, k);
            char err[256];
            ob_status st;
            const char *v = ob_grammar_builder_schema(g->b, ps, hint, &st, err, sizeof err);
            if (!v) {
                free(one.s);
                return st == OB_ERR_NOMEM ? g_oom(g) : gfail(g, st, "%s", err);
            }
            if (!glm) ref(&one, g->ws);
            ref(&one, v);
        }
        lit(&one, close);
        ref(&one, g->ws);
        if (one.oom) return g_oom(g);
        ob_gtext_printf(out, required ? " %s " : " ( %s )? ", one.s);
        free(one.s);
        k++;
    }
    return true;
}

/* One call of tool fn, as the format writes it. */
static bool call_body(gb *g, const json_t *fn, int idx, ob_gtext *t) {
    const char *name = json_string_value(json_object_get(fn, "name"));
    if (g->f == OB_TC_QWEN3_CODER || g->f == OB_TC_GLM45) {
        char open[400];
        if (strlen(name) > 256) return gfail(g, OB_ERR_ARG, "%s", "a tool name is longer than 256 bytes");
        if (g->f == OB_TC_GLM45) {
            lit(t, "<tool_call>");
            lit(t, name);
            ref(t, g->ws);
        } else {
            lit(t, "<tool_call>");
            ref(t, g->ws);
            snprintf(open, sizeof open, "<function=%s>", name);
            lit(t, open);
            ref(t, g->ws);
        }
        if (!xml_params(g, fn, idx, t)) return false;
        if (g->f == OB_TC_QWEN3_CODER) {
            lit(t, "</function>");
            ref(t, g->ws);
        }
        lit(t, "</tool_call>");
        return true;
    }
    const char *args = args_rule(g, fn, idx);
    if (!args) return false;
    switch (g->f) {
    case OB_TC_HARMONY: /* the name, the rest of the header, the message */
        lit(t, name);
        ref(t, g->h_rest);
        ref(t, args);
        ob_gtext_puts(&g->h_role, g->h_role.n ? " | " : "");
        lit(&g->h_role, name);
        ref(&g->h_role, g->h_rest_role);
        ref(&g->h_role, args);
        return true;
    case OB_TC_MISTRAL_V11:
        lit(t, "[TOOL_CALLS]");
        lit(t, name);
        lit(t, "[ARGS]");
        ref(t, args);
        return true;
    case OB_TC_DEEPSEEK_R1:
        lit(t, DS_CALL_BEGIN "function" DS_SEP);
        lit(t, name);
        lit(t, "\n```json\n");
        ref(t, args);
        ref(t, g->ws);
        lit(t, "```");
        ref(t, g->ws);
        lit(t, DS_CALL_END);
        ref(t, g->ws);
        return true;
    case OB_TC_DEEPSEEK_V31:
        lit(t, DS_CALL_BEGIN);
        lit(t, name);
        lit(t, DS_SEP);
        ref(t, args);
        lit(t, DS_CALL_END);
        ref(t, g->ws);
        return true;
    default: break;
    }
    /* the JSON object formats */
    bool hermes = g->f == OB_TC_HERMES || g->f == OB_TC_GENERIC;
    if (hermes) {
        lit(t, "<tool_call>");
        ref(t, g->ws);
    }
    ob_gtext_printf(t, " \"{\" %s \"\\\"name\\\"\" %s \":\" %s ", g->ws, g->ws, g->ws);
    if (!json_name_lit(g, t, name)) return false;
    ob_gtext_printf(t, " %s \",\" %s %s %s \":\" %s %s ", g->ws, g->ws,
                    g->f == OB_TC_LLAMA3 ? "\"\\\"parameters\\\"\"" : "\"\\\"arguments\\\"\"", g->ws, g->ws, args);
    if (g->f == OB_TC_MISTRAL)
        ob_gtext_printf(t, " ( \",\" %s \"\\\"id\\\"\" %s \":\" %s \"\\\"\" [a-zA-Z0-9]{9} \"\\\"\" %s )? ", g->ws, g->ws,
                        g->ws, g->ws);
    ob_gtext_printf(t, " \"}\" %s ", g->ws);
    if (hermes) lit(t, "</tool_call>");
    return true;
}

/* The calls: one, or several in a row; a format's section around them. */
static const char *calls_rule(gb *g, const char *call) {
    ob_gtext t = {0};
    switch (g->f) {
    case OB_TC_MISTRAL:
        ob_gtext_printf(&t, " \"[TOOL_CALLS]\" \"[\" %s %s ", g->ws, call);
        if (g->o->parallel) ob_gtext_printf(&t, "( \",\" %s %s )*", g->ws, call);
        ob_gtext_puts(&t, " \"]\" ");
        break;
    case OB_TC_DEEPSEEK_R1:
    case OB_TC_DEEPSEEK_V31:
        lit(&t, DS_CALLS_BEGIN);
        ob_gtext_printf(&t, " %s%s ", call, g->o->parallel ? "+" : "");
        lit(&t, DS_CALLS_END);
        break;
    case OB_TC_LLAMA3:
        ob_gtext_printf(&t, " \"<|python_tag|>\"? %s ", call);
        if (g->o->parallel) ob_gtext_printf(&t, "( ( \";\" %s )? %s )*", g->ws, call);
        break;
    case OB_TC_HARMONY:
        ob_gtext_puts(&t, call); /* one call ends the turn (<|call|>) */
        break;
    default:
        ob_gtext_puts(&t, call);
        if (g->o->parallel) ob_gtext_printf(&t, " ( %s %s )*", g->ws, call);
        break;
    }
    return rule_of(g, "tc-calls", &t);
}

/* gpt-oss: a call sits in a commentary (or analysis) channel with its recipient in the
 * channel header, or with the recipient in the role header before the channel. */
static bool harmony_rules(gb *g) {
    ob_gtext t = {0};
    ob_gtext_puts(&t, "( \" <|constrain|>json\" | \" json\" )? \"<|message|>\"");
    g->h_rest = rule_of(g, "harmony-rest", &t);
    ob_gtext_puts(&t, "\"<|channel|>\" ( \"commentary\" | \"analysis\" ) ( \" <|constrain|>json\" | \" json\" )? "
                      "\"<|message|>\"");
    g->h_rest_role = rule_of(g, "harmony-rest-role", &t);
    return g->h_rest && g->h_rest_role;
}

static bool harmony_root(gb *g, const char *in_channel, ob_gtext *root) {
    const char *in_role = rule_of(g, "harmony-in-role", &g->h_role);
    if (!in_role) return false;
    const char *chan = "\"<|channel|>\" ( \"commentary\" | \"analysis\" )";
    if (g->o->required) {
        const char *text = not_containing(g, "<|end|>");
        if (!text) return false;
        ob_gtext_printf(root, "( \"<|channel|>analysis<|message|>\" %s \"<|end|>\" \"<|start|>assistant\" )? ", text);
        ob_gtext_printf(root, "( %s \" to=functions.\" %s | \" to=functions.\" %s )", chan, in_channel, in_role);
    } else {
        ob_gtext_printf(root, "%s \" to=functions.\" %s | \"<|start|>assistant\"? \" to=functions.\" %s", chan,
                        in_channel, in_role);
    }
    return true;
}

static bool add_trigger(char **list, int *n, const char *w) {
    if (*n == OB_TC_MAX_TRIGGERS) return true;
    list[*n] = strdup(w);
    if (!list[*n]) return false;
    (*n)++;
    return true;
}

static bool triggers_of(ob_tc_format f, ob_tc_grammar *out) {
    bool ok = true;
    switch (f) {
    case OB_TC_GENERIC:
    case OB_TC_HERMES:
    case OB_TC_QWEN3_CODER:
    case OB_TC_GLM45: ok = add_trigger(out->words, &out->n_words, "<tool_call>"); break;
    case OB_TC_LLAMA3:
        ok = add_trigger(out->words, &out->n_words, "<|python_tag|>") && add_trigger(out->starts, &out->n_starts, "{\"");
        break;
    case OB_TC_MISTRAL:
    case OB_TC_MISTRAL_V11: ok = add_trigger(out->words, &out->n_words, "[TOOL_CALLS]"); break;
    case OB_TC_HARMONY:
        ok = add_trigger(out->words, &out->n_words, "<|channel|>commentary to=") &&
             add_trigger(out->words, &out->n_words, "<|channel|>analysis to=") &&
             add_trigger(out->words, &out->n_words, "<|start|>assistant to=") &&
             add_trigger(out->starts, &out->n_starts, " to=");
        break;
    case OB_TC_DEEPSEEK_R1:
    case OB_TC_DEEPSEEK_V31: ok = add_trigger(out->words, &out->n_words, DS_CALLS_BEGIN); break;
    default: break;
    }
    return ok;
}

ob_status ob_tc_grammar_build(ob_tc_format f, const ob_tc_grammar_opts *o, ob_tc_grammar *out, char *err,
                              size_t err_len) {
    memset(out, 0, sizeof *out);
    if (err && err_len) err[0] = 0;
    if (f == OB_TC_NONE) return ob_fail(err, err_len, OB_ERR_ARG, "no tool-call format");
    gb g = {.b = ob_grammar_builder_new(), .f = f, .o = o, .err = err, .err_len = err_len};
    if (!g.b) return ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
    g.ws = ob_grammar_builder_prim(g.b, "ws");
    const json_t *fns[256];
    int n = tools_of(&g, fns, (int)OB_ARRAY_LEN(fns));
    if (n == 0) {
        ob_grammar_builder_free(g.b);
        return ob_fail(err, err_len, OB_ERR_ARG, o->only ? "tool_choice names a function that is not among the tools"
                                                          : "no tools to call");
    }
    const char *calls[256];
    ob_gtext any = {0};
    bool ok = g.ws != NULL && (f != OB_TC_HARMONY || harmony_rules(&g));
    for (int i = 0; i < n && ok; i++) {
        ob_gtext t = {0};
        ok = call_body(&g, fns[i], i, &t);
        char hint[32];
        snprintf(hint, sizeof hint, "tc%d-call", i);
        calls[i] = ok ? rule_of(&g, hint, &t) : (free(t.s), NULL);
        ok = ok && calls[i];
        if (ok) ob_gtext_printf(&any, "%s%s", i ? " | " : "", calls[i]);
    }
    ob_gtext root = {0};
    const char *call = ok ? rule_of(&g, "tc-call", &any) : NULL;
    ok = call != NULL;
    if (ok && f == OB_TC_HARMONY) {
        ok = harmony_root(&g, call, &root);
    } else if (ok) {
        const char *all = calls_rule(&g, call);
        ok = all != NULL;
        if (ok && o->required && o->think) {
            const char *text = not_containing(&g, "</think>");
            ok = text != NULL;
            /* Qwen3 writes a blank line after the thought */
            if (ok && o->think == 2) ob_gtext_printf(&root, "%s \"</think>\" [ \\t\\r\\n]{0,8} %s", text, all);
            else if (ok) ob_gtext_printf(&root, "( \"<think>\" %s \"</think>\" [ \\t\\r\\n]{0,8} )? %s", text, all);
        } else if (ok) {
            ob_gtext_puts(&root, all);
        }
    }
    free(any.s);
    free(g.h_role.s);
    if (ok && root.oom) ok = g_oom(&g);
    ob_status st = OB_OK;
    if (ok) st = ob_grammar_builder_finish(g.b, root.s, &out->gbnf, err, err_len);
    free(root.s);
    ob_grammar_builder_free(g.b);
    if (!ok) st = g.st ? g.st : OB_ERR_NOMEM;
    if (st == OB_OK) {
        out->lazy = !o->required;
        out->special = ob_tc_format_special(f);
        if (out->lazy && !triggers_of(f, out)) st = ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
    }
    if (st) ob_tc_grammar_free(out);
    return st;
}

void ob_tc_grammar_free(ob_tc_grammar *g) {
    free(g->gbnf);
    for (int i = 0; i < g->n_words; i++) free(g->words[i]);
    for (int i = 0; i < g->n_starts; i++) free(g->starts[i]);
    memset(g, 0, sizeof *g);
}
