/* Tool calls in generated text: which markup a chat template's model writes (found from
 * markers in the template, as llama.cpp's common/chat does), reading the calls out of a
 * reply (whole, or while it is still being generated), and the grammar that holds a call
 * to its tool's parameters schema.
 *
 * The formats (the markup each model family was trained on):
 *   GENERIC      <tool_call>{"name": N, "arguments": {...}}</tool_call>, or a reply that is
 *                one JSON object {"tool_call": ...} / {"tool_calls": [...]} / {"name", "arguments"}
 *   HERMES       Hermes 2 Pro, Qwen 2.5, Qwen3: <tool_call>{"name": N, "arguments": {...}}</tool_call>
 *                one after another
 *   QWEN3_CODER  Qwen3-Coder, Qwen3.5: <tool_call><function=N><parameter=P>value</parameter>
 *                </function></tool_call>
 *   LLAMA3       Llama 3.1-3.3: a reply that is {"name": N, "parameters": {...}}, or
 *                <|python_tag|> and the JSON (or code: a call of "python" with {"code"})
 *   MISTRAL      [TOOL_CALLS][{"name": N, "arguments": {...}, "id": "..."}] (Nemo);
 *   MISTRAL_V11  [TOOL_CALLS]N[ARGS]{...} (later Mistral / Magistral / Devstral); either is read
 *   HARMONY      gpt-oss: <|channel|>commentary to=functions.N <|constrain|>json<|message|>{...}
 *                (the analysis channel is reasoning, the final channel content)
 *   GLM45        GLM-4.5 / 4.6 / 4.7: <tool_call>N<arg_key>k</arg_key><arg_value>v</arg_value>
 *                </tool_call>
 *   DEEPSEEK_R1  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```
 *                <｜tool▁call▁end｜>...<｜tool▁calls▁end｜> (DeepSeek R1, V3)
 *   DEEPSEEK_V31 ...<｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...; either is read
 *
 * Arguments come out as JSON text: for the JSON formats the object exactly as the model
 * wrote it; for the XML-like ones (QWEN3_CODER, GLM45) an object built from the parameters,
 * a value kept as a string where the tool's schema says string (or says nothing) and read
 * as JSON otherwise. Whole and streamed readings of one reply give the same arguments: a
 * stream's argument fragments join into the final text.
 *
 * Nothing here keeps global state; every input is treated as hostile (bounded depth and
 * counts, no recursion on the text). */
#ifndef OB_CHAT_TOOLCALL_H
#define OB_CHAT_TOOLCALL_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "onebit.h"

typedef enum ob_tc_format {
    OB_TC_NONE = 0,          /* nothing is parsed */
    OB_TC_GENERIC,
    OB_TC_HERMES,
    OB_TC_QWEN3_CODER,
    OB_TC_LLAMA3,
    OB_TC_MISTRAL,
    OB_TC_MISTRAL_V11,
    OB_TC_HARMONY,
    OB_TC_GLM45,
    OB_TC_DEEPSEEK_R1,
    OB_TC_DEEPSEEK_V31,
    OB_TC_FORMAT_COUNT
} ob_tc_format;

#define OB_TC_MAX_CALLS 64        /* calls read from one reply; markup past them is content */
#define OB_TC_MAX_TRIGGERS 8

/* The format a template's model writes; GENERIC when the template shows none. */
ob_tc_format ob_tc_detect(const char *tmpl);
const char *ob_tc_format_name(ob_tc_format f);
/* Whether the format's markup is made of the model's control tokens (gpt-oss, Mistral,
 * DeepSeek, Llama's python tag): a grammar must then match those tokens by their text. */
bool ob_tc_format_special(ob_tc_format f);

typedef struct ob_tc_call {
    char *name;
    char *args;       /* JSON text of the arguments object; while streaming, what has come */
    size_t args_len;
    char *id;         /* the model's own id (Mistral), or NULL */
    bool done;        /* the arguments are complete */
} ob_tc_call;

typedef struct ob_tc_result {
    char *content; size_t content_len;       /* the text outside calls (never NULL) */
    char *reasoning; size_t reasoning_len;   /* gpt-oss's analysis channel (never NULL) */
    ob_tc_call *calls;
    int n_calls;
} ob_tc_result;

/* Reads a reply. partial: the text may still grow; markup that may be starting at its end
 * is held back from content (and so is trailing whitespace), the last call may be open
 * (its arguments so far), a call is listed once its name is complete. Whole: a call whose
 * markup does not read (arguments that are not JSON, a call cut off) stays in content as
 * text. tools: the request's tools (OpenAI shape: [{"type":"function","function":{...}}]),
 * for the XML-like formats' value types; may be NULL. OB_ERR_NOMEM only. */
ob_status ob_tc_parse(ob_tc_format f, const char *text, size_t len, bool partial, const json_t *tools,
                      ob_tc_result *out);
void ob_tc_result_free(ob_tc_result *r);

/* ---- streaming: what a reply adds as it grows ------------------------------------------ */

typedef enum ob_tc_ev_kind {
    OB_TC_EV_CONTENT,     /* text: more content */
    OB_TC_EV_REASONING,   /* text: more reasoning (gpt-oss) */
    OB_TC_EV_CALL,        /* a new call: index, name, id (the model's or NULL) */
    OB_TC_EV_ARGS,        /* text: more arguments of call index */
} ob_tc_ev_kind;

typedef struct ob_tc_event {
    ob_tc_ev_kind kind;
    int index;
    const char *text; size_t len;
    const char *name, *id;
} ob_tc_event;

typedef void (*ob_tc_event_fn)(void *ud, const ob_tc_event *e);

typedef struct ob_tc_stream ob_tc_stream;
/* tools is borrowed and must outlive the stream. NULL when out of memory. */
ob_tc_stream *ob_tc_stream_new(ob_tc_format f, const json_t *tools);
void ob_tc_stream_free(ob_tc_stream *st);
/* Appends text and reports what it adds, in order: content, reasoning, then calls and
 * their arguments. final: the reply is complete (a held-back tail is released). Calls
 * already reported stay reported even when the whole reply would not read them. */
ob_status ob_tc_stream_feed(ob_tc_stream *st, const char *text, size_t len, bool final, ob_tc_event_fn fn,
                            void *ud);

/* ---- grammar ---------------------------------------------------------------------------- */

typedef struct ob_tc_grammar_opts {
    const json_t *tools;      /* OpenAI shape */
    const char *only;         /* a named tool_choice: the one tool allowed; NULL: any */
    bool required;            /* a call from the first token (tool_choice required or named) */
    bool parallel;            /* several calls may follow one another */
    int think;                /* 0: the template has no thinking; 1: the reply may open <think>;
                               * 2: the prompt opened it (the reply starts inside the thought) */
} ob_tc_grammar_opts;

typedef struct ob_tc_grammar {
    char *gbnf;                               /* malloc'd */
    bool lazy;                                /* holds only from a trigger on */
    bool special;                             /* control tokens may match it by their text */
    char *words[OB_TC_MAX_TRIGGERS];          /* lazy: a word anywhere starts the grammar */
    int n_words;
    char *starts[OB_TC_MAX_TRIGGERS];         /* lazy: ... or a word the reply begins with */
    int n_starts;
} ob_tc_grammar;

/* The grammar of a format's calls over the tools' parameters schemas. A schema the
 * converter cannot hold a value to is OB_ERR_UNSUPPORTED / OB_ERR_FORMAT with err naming
 * the tool; no tools (or `only` naming none of them) is OB_ERR_ARG. */
ob_status ob_tc_grammar_build(ob_tc_format f, const ob_tc_grammar_opts *o, ob_tc_grammar *out, char *err,
                              size_t err_len);
void ob_tc_grammar_free(ob_tc_grammar *g);

/* The function object ({"name", "parameters", ...}) of a tool named name, or NULL. */
const json_t *ob_tc_find_tool(const json_t *tools, const char *name, size_t len);

/* For templates that do not show tools to the model (GENERIC): instructions that list the
 * tools and the <tool_call> syntax, malloc'd; NULL when out of memory. */
char *ob_tc_generic_instructions(const json_t *tools);

#endif
