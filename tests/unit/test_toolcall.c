/* Tool calls in generated text (src/chat/toolcall.h): the format from real templates'
 * markers; every format's calls read whole (names, arguments as JSON, the content around
 * them, several calls, a missing closing tag, typed XML values); streamed readings
 * (byte by byte and in random pieces) that add up to the whole reading; hostile text
 * (every truncation, arguments that are not JSON, deep nesting, random bytes and
 * mutations) read without a crash and with cut calls left as content; and each format's
 * grammar, which must accept the canonical call text, refuse a wrong tool or a bad
 * argument type, and whose accepted text the parser reads back as the same call. */
#include "testutil.h"
#include "chat/toolcall.h"
#include "core/common.h"
#include "grammar/grammar.h"

#include <string.h>

#define DS_CALLS_BEGIN "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define DS_CALLS_END "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define DS_CALL_BEGIN "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define DS_CALL_END "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define DS_SEP "<\xEF\xBD\x9Ctool\xE2\x96\x81" "sep\xEF\xBD\x9C>"

static json_t *g_tools;

static const char k_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}},"
    "\"required\":[\"location\",\"days\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"query\":{\"type\":\"string\"},\"opts\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}}}},"
    "\"required\":[\"query\"]}}}]";

/* ---- expectations -------------------------------------------------------------------- */

typedef struct want_call { const char *name, *args; } want_call;

static bool args_equal(const char *got, size_t n, const char *want) {
    json_t *a = json_loadb(got, n, 0, NULL), *b = json_loads(want, 0, NULL);
    bool eq = a && b && json_equal(a, b);
    json_decref(a);
    json_decref(b);
    return eq;
}

/* Reads text whole and compares content and calls. */
static void expect(ob_tc_format f, const char *text, const char *content, const want_call *calls, int n) {
    ob_tc_result r;
    CHECK(ob_tc_parse(f, text, strlen(text), false, g_tools, &r) == OB_OK);
    CHECKF(!strcmp(r.content, content), "%s: content '%s', wanted '%s' (text '%s')", ob_tc_format_name(f), r.content,
           content, text);
    CHECKF(r.n_calls == n, "%s: %d calls, wanted %d (text '%s')", ob_tc_format_name(f), r.n_calls, n, text);
    for (int i = 0; i < n && i < r.n_calls; i++) {
        CHECKF(!strcmp(r.calls[i].name, calls[i].name), "%s: call %d is '%s', wanted '%s'", ob_tc_format_name(f), i,
               r.calls[i].name, calls[i].name);
        CHECKF(args_equal(r.calls[i].args, r.calls[i].args_len, calls[i].args), "%s: call %d args '%.*s', wanted %s",
               ob_tc_format_name(f), i, (int)r.calls[i].args_len, r.calls[i].args, calls[i].args);
        CHECK(r.calls[i].done);
    }
    ob_tc_result_free(&r);
}

#define W(...) ((const want_call[]){__VA_ARGS__})
#define NO_CALLS NULL, 0

/* ---- streaming ----------------------------------------------------------------------- */

typedef struct collect {
    char content[8192], reasoning[8192];
    size_t cl, rl;
    char names[OB_TC_MAX_CALLS][64];
    char args[OB_TC_MAX_CALLS][2048];
    size_t al[OB_TC_MAX_CALLS];
    int n_calls;
    bool bad_order;
} collect;

static void on_event(void *ud, const ob_tc_event *e) {
    collect *c = ud;
    switch (e->kind) {
    case OB_TC_EV_CONTENT:
        if (c->cl + e->len < sizeof c->content) memcpy(c->content + c->cl, e->text, e->len), c->cl += e->len;
        break;
    case OB_TC_EV_REASONING:
        if (c->rl + e->len < sizeof c->reasoning) memcpy(c->reasoning + c->rl, e->text, e->len), c->rl += e->len;
        break;
    case OB_TC_EV_CALL:
        if (e->index != c->n_calls) c->bad_order = true;
        if (c->n_calls < OB_TC_MAX_CALLS) snprintf(c->names[c->n_calls++], 64, "%s", e->name);
        break;
    case OB_TC_EV_ARGS:
        if (e->index >= c->n_calls) c->bad_order = true;
        else if (c->al[e->index] + e->len < sizeof c->args[0]) {
            memcpy(c->args[e->index] + c->al[e->index], e->text, e->len);
            c->al[e->index] += e->len;
        }
        break;
    }
}

/* Streams text in pieces (step 0: random sizes) and checks that the events add up to the
 * whole reading: the same content, reasoning, names and argument texts. */
static void expect_stream(ob_tc_format f, const char *text, size_t step, ob_rng *rng) {
    ob_tc_result whole;
    size_t n = strlen(text);
    CHECK(ob_tc_parse(f, text, n, false, g_tools, &whole) == OB_OK);
    ob_tc_stream *st = ob_tc_stream_new(f, g_tools);
    collect *c = calloc(1, sizeof *c);
    for (size_t i = 0; i < n;) {
        size_t k = step ? step : 1 + (size_t)(ob_rng_u64(rng) % 9);
        if (k > n - i) k = n - i;
        CHECK(ob_tc_stream_feed(st, text + i, k, false, on_event, c) == OB_OK);
        i += k;
    }
    CHECK(ob_tc_stream_feed(st, "", 0, true, on_event, c) == OB_OK);
    CHECKF(!c->bad_order, "%s: events out of order", ob_tc_format_name(f));
    CHECKF(c->cl == whole.content_len && !memcmp(c->content, whole.content, c->cl),
           "%s step %zu: streamed content '%.*s', whole '%s' (text '%s')", ob_tc_format_name(f), step, (int)c->cl,
           c->content, whole.content, text);
    CHECKF(c->rl == whole.reasoning_len && !memcmp(c->reasoning, whole.reasoning, c->rl),
           "%s: streamed reasoning '%.*s', whole '%s'", ob_tc_format_name(f), (int)c->rl, c->reasoning, whole.reasoning);
    CHECKF(c->n_calls == whole.n_calls, "%s step %zu: %d streamed calls, %d whole (text '%s')", ob_tc_format_name(f),
           step, c->n_calls, whole.n_calls, text);
    for (int i = 0; i < c->n_calls && i < whole.n_calls; i++) {
        CHECK(!strcmp(c->names[i], whole.calls[i].name));
        CHECKF(c->al[i] == whole.calls[i].args_len && !memcmp(c->args[i], whole.calls[i].args, c->al[i]),
               "%s step %zu: streamed args '%.*s', whole '%.*s'", ob_tc_format_name(f), step, (int)c->al[i], c->args[i],
               (int)whole.calls[i].args_len, whole.calls[i].args);
    }
    free(c);
    ob_tc_stream_free(st);
    ob_tc_result_free(&whole);
}

/* ---- samples ------------------------------------------------------------------------- */

typedef struct sample { ob_tc_format f; const char *text; } sample;

static const sample k_samples[] = {
    {OB_TC_HERMES, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", "
                   "\"days\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": "
                   "\"a \\\"quoted\\\" <tool_call> word\"}}\n</tool_call>"},
    {OB_TC_HERMES, "No tools needed: 2 + 2 = 4."},
    {OB_TC_GENERIC, "<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}</tool_call>"},
    {OB_TC_QWEN3_CODER, "<tool_call>\n<function=get_weather>\n<parameter=location>\nSan Francisco, CA\n</parameter>\n"
                        "<parameter=days>\n5\n</parameter>\n</function>\n</tool_call>"},
    {OB_TC_QWEN3_CODER, "Sure.\n<tool_call>\n<function=search>\n<parameter=query>\nline 1\nif (a < b) {}\n</parameter>\n"
                        "<parameter=opts>\n{\"n\": 2}\n</parameter>\n</function>\n</tool_call>"},
    {OB_TC_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\", \"days\": 2}}"},
    {OB_TC_LLAMA3, "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"query\": \"llamas\"}}"},
    {OB_TC_MISTRAL, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Oslo\", \"days\": 1}, "
                    "\"id\": \"abcDEF123\"}, {\"name\": \"search\", \"arguments\": {\"query\": \"fjords\"}}]"},
    {OB_TC_MISTRAL_V11, "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Rome\", \"days\": 4}[TOOL_CALLS]search[ARGS]"
                        "{\"query\": \"pasta\"}"},
    {OB_TC_HARMONY, "<|channel|>analysis<|message|>The user wants weather.<|end|><|start|>assistant<|channel|>commentary "
                    "to=functions.get_weather <|constrain|>json<|message|>{\"location\": \"Tokyo\", \"days\": 2}"},
    {OB_TC_HARMONY, "<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final<|message|>Hello there!"},
    {OB_TC_HARMONY, " to=functions.search<|channel|>commentary json<|message|>{\"query\": \"harmony\"}"},
    {OB_TC_GLM45, "I will look.\n<tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>Beijing</arg_value>\n"
                  "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"},
    {OB_TC_GLM45, "<tool_call>search<arg_key>query</arg_key><arg_value>a</arg_value><arg_key>opts</arg_key><arg_value>"
                  "{\"n\": 5}</arg_value></tool_call><tool_call>search<arg_key>query</arg_key><arg_value>b</arg_value>"
                  "</tool_call>"},
    {OB_TC_DEEPSEEK_R1, "Checking." DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "get_weather\n```json\n{\"location\": "
                        "\"Lima\", \"days\": 7}\n```" DS_CALL_END "\n" DS_CALL_BEGIN "function" DS_SEP "search\n```json\n"
                        "{\"query\": \"peru\"}\n```" DS_CALL_END DS_CALLS_END},
    {OB_TC_DEEPSEEK_V31, DS_CALLS_BEGIN DS_CALL_BEGIN "search" DS_SEP "{\"query\": \"v3.1\"}" DS_CALL_END DS_CALLS_END},
};

static void test_detect(void) {
    CHECK(ob_tc_detect(NULL) == OB_TC_GENERIC);
    CHECK(ob_tc_detect("{{ messages }}") == OB_TC_GENERIC);
    CHECK(ob_tc_detect("{{- '<tool_call>\\n{\"name\": \"' }}") == OB_TC_HERMES);
    CHECK(ob_tc_detect("<tool_call>\n<function={{ name }}>\n<parameter={{ k }}>") == OB_TC_QWEN3_CODER);
    CHECK(ob_tc_detect("[gMASK]<sop><tool_call>{{ name }}<arg_key>{{ k }}</arg_key><arg_value>") == OB_TC_GLM45);
    CHECK(ob_tc_detect("<|start|>assistant<|channel|>final<|message|>") == OB_TC_HARMONY);
    CHECK(ob_tc_detect("[AVAILABLE_TOOLS]{{ tools }}[TOOL_CALLS]{{ calls }}") == OB_TC_MISTRAL);
    CHECK(ob_tc_detect("[TOOL_CALLS]{{ name }}[ARGS]{{ args }}") == OB_TC_MISTRAL_V11);
    CHECK(ob_tc_detect("<|start_header_id|>ipython<|end_header_id|>") == OB_TC_LLAMA3);
    CHECK(ob_tc_detect(DS_CALLS_BEGIN "{{ '```json' }}") == OB_TC_DEEPSEEK_R1);
    CHECK(ob_tc_detect(DS_CALLS_BEGIN DS_CALL_BEGIN "{{ name }}" DS_SEP) == OB_TC_DEEPSEEK_V31);
    /* the real templates the repository carries */
    static const struct { const char *path; ob_tc_format f; } real[] = {
        {"../shared/data/tokenizers/qwen3/tokenizer_config.json", OB_TC_HERMES},
        {"../shared/data/tokenizers/deepseek_v3/tokenizer_config.json", OB_TC_DEEPSEEK_R1},
        {"../shared/data/tokenizers/gemma3/tokenizer_config.json", OB_TC_GENERIC},
        {"../shared/data/tokenizers/llama3/tokenizer_config.json", OB_TC_GENERIC},
    };
    for (size_t i = 0; i < OB_ARRAY_LEN(real); i++) {
        json_t *j = json_load_file(real[i].path, JSON_DECODE_INT_AS_REAL, NULL);
        const char *t = json_string_value(json_object_get(j, "chat_template"));
        if (!t) {
            fprintf(stderr, "SKIPPED: %s not found\n", real[i].path);
        } else {
            CHECKF(ob_tc_detect(t) == real[i].f, "%s: %s", real[i].path, ob_tc_format_name(ob_tc_detect(t)));
        }
        json_decref(j);
    }
}

static void test_whole(void) {
    static const char gw[] = "{\"location\": \"Paris\", \"days\": 3}";
    expect(OB_TC_HERMES, k_samples[0].text, "Let me check.",
           W({"get_weather", gw}, {"search", "{\"query\": \"a \\\"quoted\\\" <tool_call> word\"}"}), 2);
    expect(OB_TC_HERMES, "No tools needed.", "No tools needed.", NO_CALLS);
    /* the closing tag is optional; text after calls is content on its own line */
    expect(OB_TC_HERMES, "<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"q\"}}", "",
           W({"search", "{\"query\": \"q\"}"}), 1);
    expect(OB_TC_HERMES, "A<tool_call>{\"name\":\"search\",\"arguments\":{}}</tool_call>  B", "A\nB",
           W({"search", "{}"}), 1);
    /* OpenAI-style arguments as a string of JSON; arguments left out */
    expect(OB_TC_HERMES, "<tool_call>{\"name\": \"search\", \"arguments\": \"{\\\"query\\\": \\\"s\\\"}\"}</tool_call>", "",
           W({"search", "{\"query\": \"s\"}"}), 1);
    expect(OB_TC_HERMES, "<tool_call>{\"name\": \"get_time\"}</tool_call>", "", W({"get_time", "{}"}), 1);
    /* a fenced JSON and the <function=...> variant */
    expect(OB_TC_HERMES, "<tool_call>\n```json\n{\"name\": \"search\", \"arguments\": {\"query\": \"f\"}}\n```\n</tool_call>",
           "", W({"search", "{\"query\": \"f\"}"}), 1);
    expect(OB_TC_HERMES, "<function=search>{\"query\": \"fn\"}</function>", "", W({"search", "{\"query\": \"fn\"}"}), 1);
    /* not calls: stay content */
    expect(OB_TC_HERMES, "<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": </tool_call>",
           "<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": </tool_call>", NO_CALLS);
    expect(OB_TC_HERMES, "<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"cut",
           "<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"cut", NO_CALLS);
    expect(OB_TC_HERMES, "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>", NO_CALLS);
    expect(OB_TC_HERMES, "<tool_call>{\"name\": \"s\", \"arguments\": [1]}</tool_call>",
           "<tool_call>{\"name\": \"s\", \"arguments\": [1]}</tool_call>", NO_CALLS);
    expect(OB_TC_HERMES, "bad then good <tool_call>nope</tool_call><tool_call>{\"name\":\"search\",\"arguments\":{}}",
           "bad then good <tool_call>nope</tool_call>", W({"search", "{}"}), 1);
    /* generic: the tags, or the whole reply as one JSON object */
    expect(OB_TC_GENERIC, k_samples[2].text, "", W({"search", "{\"query\": \"x\"}"}), 1);
    expect(OB_TC_GENERIC, "{\"tool_call\": {\"name\": \"search\", \"arguments\": {\"query\": \"g\"}}}", "",
           W({"search", "{\"query\":\"g\"}"}), 1);
    expect(OB_TC_GENERIC, " {\"tool_calls\": [{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {\"x\": 1}}]}",
           "", W({"a", "{}"}, {"b", "{\"x\": 1}"}), 2);
    expect(OB_TC_GENERIC, "{\"response\": \"Just text.\"}", "Just text.", NO_CALLS);
    expect(OB_TC_GENERIC, "{\"other\": 1}", "{\"other\": 1}", NO_CALLS);
    /* Qwen3-Coder: values typed by the tool's schema */
    expect(OB_TC_QWEN3_CODER, k_samples[3].text, "", W({"get_weather", "{\"location\": \"San Francisco, CA\", \"days\": 5}"}), 1);
    expect(OB_TC_QWEN3_CODER, k_samples[4].text, "Sure.",
           W({"search", "{\"query\": \"line 1\\nif (a < b) {}\", \"opts\": {\"n\": 2}}"}), 1);
    expect(OB_TC_QWEN3_CODER, "<tool_call><function=get_weather><parameter=location>X</parameter><parameter=days>soon"
                              "</parameter></function></tool_call>",
           "", W({"get_weather", "{\"location\": \"X\", \"days\": \"soon\"}"}), 1); /* not JSON: kept as text */
    expect(OB_TC_QWEN3_CODER, "<tool_call><function=unknown><parameter=n>42</parameter></function></tool_call>", "",
           W({"unknown", "{\"n\": \"42\"}"}), 1); /* no schema: text */
    expect(OB_TC_QWEN3_CODER, "<tool_call>\n<function=search>\n<parameter=query>\ncut",
           "<tool_call>\n<function=search>\n<parameter=query>\ncut", NO_CALLS);
    /* Llama 3.x */
    expect(OB_TC_LLAMA3, k_samples[5].text, "", W({"get_weather", "{\"location\": \"Paris\", \"days\": 2}"}), 1);
    expect(OB_TC_LLAMA3, k_samples[6].text, "", W({"search", "{\"query\": \"llamas\"}"}), 1);
    expect(OB_TC_LLAMA3, "<|python_tag|>print(2 + 2)", "", W({"python", "{\"code\": \"print(2 + 2)\"}"}), 1);
    expect(OB_TC_LLAMA3, "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": [1, 2]}}", "",
           W({"a", "{}"}, {"b", "{\"x\": [1, 2]}"}), 2);
    expect(OB_TC_LLAMA3, "{\"answer\": 42}", "{\"answer\": 42}", NO_CALLS);
    expect(OB_TC_LLAMA3, "The answer is {\"name\": 1}.", "The answer is {\"name\": 1}.", NO_CALLS);
    /* Mistral */
    expect(OB_TC_MISTRAL, k_samples[7].text, "",
           W({"get_weather", "{\"location\": \"Oslo\", \"days\": 1}"}, {"search", "{\"query\": \"fjords\"}"}), 2);
    expect(OB_TC_MISTRAL, k_samples[8].text, "",
           W({"get_weather", "{\"location\": \"Rome\", \"days\": 4}"}, {"search", "{\"query\": \"pasta\"}"}), 2);
    expect(OB_TC_MISTRAL_V11, "Text first.[TOOL_CALLS]search[CALL_ID]a1b2c3d4e[ARGS]{\"query\": \"id\"}", "Text first.",
           W({"search", "{\"query\": \"id\"}"}), 1);
    expect(OB_TC_MISTRAL, "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}", "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}", NO_CALLS);
    /* gpt-oss */
    expect(OB_TC_HARMONY, k_samples[9].text, "", W({"get_weather", "{\"location\": \"Tokyo\", \"days\": 2}"}), 1);
    expect(OB_TC_HARMONY, k_samples[10].text, "Hello there!", NO_CALLS);
    expect(OB_TC_HARMONY, k_samples[11].text, "", W({"search", "{\"query\": \"harmony\"}"}), 1);
    expect(OB_TC_HARMONY, "plain text, no channels", "plain text, no channels", NO_CALLS);
    {
        ob_tc_result r;
        CHECK(ob_tc_parse(OB_TC_HARMONY, k_samples[9].text, strlen(k_samples[9].text), false, NULL, &r) == OB_OK);
        CHECK(!strcmp(r.reasoning, "The user wants weather."));
        ob_tc_result_free(&r);
    }
    /* GLM-4.5 */
    expect(OB_TC_GLM45, k_samples[12].text, "I will look.", W({"get_weather", "{\"location\": \"Beijing\", \"days\": 3}"}), 1);
    expect(OB_TC_GLM45, k_samples[13].text, "",
           W({"search", "{\"query\": \"a\", \"opts\": {\"n\": 5}}"}, {"search", "{\"query\": \"b\"}"}), 2);
    expect(OB_TC_GLM45, "<tool_call>get_time</tool_call>", "", W({"get_time", "{}"}), 1);
    expect(OB_TC_GLM45, "<tool_call>search<arg_key>query</arg_key><arg_value>cut",
           "<tool_call>search<arg_key>query</arg_key><arg_value>cut", NO_CALLS);
    /* DeepSeek */
    expect(OB_TC_DEEPSEEK_R1, k_samples[14].text, "Checking.",
           W({"get_weather", "{\"location\": \"Lima\", \"days\": 7}"}, {"search", "{\"query\": \"peru\"}"}), 2);
    expect(OB_TC_DEEPSEEK_V31, k_samples[15].text, "", W({"search", "{\"query\": \"v3.1\"}"}), 1);
    expect(OB_TC_DEEPSEEK_R1, k_samples[15].text, "", W({"search", "{\"query\": \"v3.1\"}"}), 1);
    /* none: everything is content */
    expect(OB_TC_NONE, k_samples[0].text, k_samples[0].text, NO_CALLS);
}

static void test_streams(void) {
    ob_rng rng;
    ob_rng_seed(&rng, 7);
    for (size_t i = 0; i < OB_ARRAY_LEN(k_samples); i++) {
        expect_stream(k_samples[i].f, k_samples[i].text, 1, &rng);
        expect_stream(k_samples[i].f, k_samples[i].text, 3, &rng);
        for (int k = 0; k < 4; k++) expect_stream(k_samples[i].f, k_samples[i].text, 0, &rng);
    }
    /* a call's start is announced before its arguments are complete */
    ob_tc_stream *st = ob_tc_stream_new(OB_TC_HERMES, NULL);
    collect *c = calloc(1, sizeof *c);
    const char *part = "Hi <tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"par";
    CHECK(ob_tc_stream_feed(st, part, strlen(part), false, on_event, c) == OB_OK);
    CHECK(c->n_calls == 1 && !strcmp(c->names[0], "search"));
    CHECK(c->al[0] == strlen("{\"query\": \"par") && !memcmp(c->args[0], "{\"query\": \"par", c->al[0]));
    CHECK(c->cl == 2 && !memcmp(c->content, "Hi", 2)); /* the markup never reaches the content */
    free(c);
    ob_tc_stream_free(st);
}

/* Every truncation of every sample, partial and whole, and random mutations: no crash, and
 * a whole reading never lists a call whose markup was cut before its arguments ended. */
static void test_hostile(void) {
    ob_rng rng;
    ob_rng_seed(&rng, 11);
    char buf[2048];
    for (size_t i = 0; i < OB_ARRAY_LEN(k_samples); i++) {
        size_t n = strlen(k_samples[i].text);
        for (size_t cut = 0; cut <= n; cut++) {
            for (int partial = 0; partial < 2; partial++) {
                ob_tc_result r;
                CHECK(ob_tc_parse(k_samples[i].f, k_samples[i].text, cut, partial, g_tools, &r) == OB_OK);
                for (int k = 0; k < r.n_calls; k++) {
                    CHECK(r.calls[k].name && r.calls[k].args);
                    if (!partial) { /* complete calls only: their arguments are a JSON object */
                        json_t *j = json_loadb(r.calls[k].args, r.calls[k].args_len, 0, NULL);
                        CHECKF(json_is_object(j), "%s cut at %zu: args '%.*s'", ob_tc_format_name(k_samples[i].f), cut,
                               (int)r.calls[k].args_len, r.calls[k].args);
                        json_decref(j);
                    }
                }
                ob_tc_result_free(&r);
            }
        }
        for (int m = 0; m < 300; m++) { /* mutations: a byte changed, a span dropped or repeated */
            size_t len = OB_MIN(n, sizeof buf / 2);
            memcpy(buf, k_samples[i].text, len);
            int kind = (int)(ob_rng_u64(&rng) % 3);
            size_t at = len ? (size_t)(ob_rng_u64(&rng) % len) : 0;
            if (kind == 0 && len) buf[at] = (char)(ob_rng_u64(&rng) & 0xFF);
            else if (kind == 1 && len > at + 1) {
                size_t k = 1 + (size_t)(ob_rng_u64(&rng) % (len - at - 1));
                memmove(buf + at, buf + at + k, len - at - k);
                len -= k;
            } else if (len) {
                size_t k = OB_MIN(len - at, sizeof buf - len);
                memmove(buf + at + k, buf + at, len - at);
                len += k;
            }
            for (int partial = 0; partial < 2; partial++) {
                ob_tc_result r;
                CHECK(ob_tc_parse(k_samples[i].f, buf, len, partial, g_tools, &r) == OB_OK);
                ob_tc_result_free(&r);
            }
            for (ob_tc_format f = OB_TC_GENERIC; f < OB_TC_FORMAT_COUNT; f++) {
                ob_tc_result r;
                CHECK(ob_tc_parse(f, buf, len, false, g_tools, &r) == OB_OK);
                ob_tc_result_free(&r);
            }
        }
    }
    /* random bytes and deep nesting through every format */
    static char big[70000];
    for (int t = 0; t < 50; t++) {
        size_t len = 1 + (size_t)(ob_rng_u64(&rng) % 512);
        for (size_t k = 0; k < len; k++) big[k] = "<{[\"tool_call>:,}] \\|"[ob_rng_u64(&rng) % 21];
        for (ob_tc_format f = OB_TC_GENERIC; f < OB_TC_FORMAT_COUNT; f++)
            for (int partial = 0; partial < 2; partial++) {
                ob_tc_result r;
                CHECK(ob_tc_parse(f, big, len, partial, g_tools, &r) == OB_OK);
                ob_tc_result_free(&r);
            }
    }
    size_t len = (size_t)snprintf(big, sizeof big, "<tool_call>{\"name\": \"x\", \"arguments\": {\"a\": ");
    while (len < 60000) big[len++] = '[';
    for (int partial = 0; partial < 2; partial++) {
        ob_tc_result r;
        CHECK(ob_tc_parse(OB_TC_HERMES, big, len, partial, NULL, &r) == OB_OK);
        CHECK(r.n_calls == 0);
        ob_tc_result_free(&r);
    }
    /* more calls than the limit: the rest is content, never lost memory */
    ob_gtext many = {0};
    for (int k = 0; k < OB_TC_MAX_CALLS + 10; k++)
        ob_gtext_puts(&many, "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>");
    ob_tc_result r;
    CHECK(ob_tc_parse(OB_TC_HERMES, many.s, many.n, false, NULL, &r) == OB_OK);
    CHECK(r.n_calls == OB_TC_MAX_CALLS && r.content_len > 0);
    ob_tc_result_free(&r);
    free(many.s);
}

/* ---- grammars --------------------------------------------------------------------------- */

static bool grammar_accepts(const ob_grammar *g, const char *s) {
    ob_grammar_matcher *m = ob_grammar_matcher_new(g, NULL, true);
    bool ok = m && ob_grammar_matcher_accept_bytes(m, s, strlen(s)) && ob_grammar_matcher_can_end(m);
    ob_grammar_matcher_free(m);
    return ok;
}

typedef struct gcase { ob_tc_format f; const char *call, *bad; } gcase;

static void test_grammars(void) {
    static const gcase cases[] = {
        {OB_TC_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"days\": 3}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"days\": \"3\"}}\n</tool_call>"},
        {OB_TC_GENERIC, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"days\": 3}}</tool_call>",
         "<tool_call>{\"name\": \"weather\", \"arguments\": {\"location\": \"Paris\", \"days\": 3}}</tool_call>"},
        {OB_TC_QWEN3_CODER, "<tool_call>\n<function=get_weather>\n<parameter=location>\nParis\n</parameter>\n<parameter=days>\n3\n"
                            "</parameter>\n</function>\n</tool_call>",
         "<tool_call>\n<function=get_weather>\n<parameter=location>\nParis\n</parameter>\n<parameter=days>\nthree\n"
         "</parameter>\n</function>\n</tool_call>"},
        {OB_TC_GLM45, "<tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
                      "<arg_value>3</arg_value>\n</tool_call>",
         "<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"},
        {OB_TC_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\", \"days\": 3}}",
         "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"days\": 3}}"},
        {OB_TC_MISTRAL, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"days\": 3}, "
                        "\"id\": \"abcDEF123\"}]",
         "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}]"},
        {OB_TC_MISTRAL_V11, "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris\", \"days\": 3}",
         "[TOOL_CALLS]get_weather[ARGS]{\"days\": 3}"},
        {OB_TC_HARMONY, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"location\": \"Paris\", "
                        "\"days\": 3}",
         "<|channel|>final to=functions.get_weather<|message|>{\"location\": \"Paris\", \"days\": 3}"},
        {OB_TC_DEEPSEEK_R1, DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "get_weather\n```json\n{\"location\": \"Paris\", "
                            "\"days\": 3}\n```" DS_CALL_END DS_CALLS_END,
         DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "get_weather\n```json\n{}\n```" DS_CALL_END DS_CALLS_END},
        {OB_TC_DEEPSEEK_V31, DS_CALLS_BEGIN DS_CALL_BEGIN "get_weather" DS_SEP "{\"location\": \"Paris\", \"days\": 3}"
                             DS_CALL_END DS_CALLS_END,
         DS_CALLS_BEGIN DS_CALL_BEGIN "get_weather" DS_SEP "{\"location\": 1, \"days\": 3}" DS_CALL_END DS_CALLS_END},
    };
    for (size_t i = 0; i < OB_ARRAY_LEN(cases); i++) {
        for (int req = 0; req < 2; req++) {
            ob_tc_grammar_opts o = {.tools = g_tools, .required = req, .parallel = true};
            ob_tc_grammar tg;
            char err[256];
            ob_status st = ob_tc_grammar_build(cases[i].f, &o, &tg, err, sizeof err);
            CHECKF(st == OB_OK, "%s: %s", ob_tc_format_name(cases[i].f), err);
            if (st) continue;
            CHECK(tg.lazy == !req);
            CHECK(!tg.lazy || tg.n_words + tg.n_starts > 0);
            ob_grammar *g = NULL;
            st = ob_grammar_parse(tg.gbnf, strlen(tg.gbnf), &g, err, sizeof err);
            CHECKF(st == OB_OK, "%s grammar: %s\n%s", ob_tc_format_name(cases[i].f), err, tg.gbnf);
            if (g) {
                CHECKF(grammar_accepts(g, cases[i].call), "%s grammar refuses\n%s\n%s", ob_tc_format_name(cases[i].f),
                       cases[i].call, tg.gbnf);
                CHECKF(!grammar_accepts(g, cases[i].bad), "%s grammar accepts\n%s", ob_tc_format_name(cases[i].f),
                       cases[i].bad);
            }
            /* a lazy grammar starts at its trigger: the call text begins with one */
            if (tg.lazy) {
                bool starts = false;
                for (int k = 0; k < tg.n_words; k++) starts |= !strncmp(cases[i].call, tg.words[k], strlen(tg.words[k]));
                for (int k = 0; k < tg.n_starts; k++) starts |= !strncmp(cases[i].call, tg.starts[k], strlen(tg.starts[k]));
                CHECKF(starts, "%s: the call does not begin with a trigger", ob_tc_format_name(cases[i].f));
            }
            ob_grammar_free(g);
            ob_tc_grammar_free(&tg);
        }
        /* what the grammar accepts reads back as the call */
        expect(cases[i].f, cases[i].call, "", W({"get_weather", "{\"location\": \"Paris\", \"days\": 3}"}), 1);
    }
    /* thinking first, then the call (required); a named tool; one call only */
    ob_tc_grammar_opts o = {.tools = g_tools, .required = true, .parallel = false, .think = 1, .only = "search"};
    ob_tc_grammar tg;
    char err[256];
    CHECK(ob_tc_grammar_build(OB_TC_HERMES, &o, &tg, err, sizeof err) == OB_OK);
    ob_grammar *g = NULL;
    CHECK(ob_grammar_parse(tg.gbnf, strlen(tg.gbnf), &g, err, sizeof err) == OB_OK);
    const char *one = "<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"q\"}}</tool_call>";
    char two[512], think[512];
    snprintf(two, sizeof two, "%s\n%s", one, one);
    snprintf(think, sizeof think, "<think>\nI should search. <b>bold</b> </thin\n</think>\n\n%s", one);
    CHECK(g && grammar_accepts(g, one) && grammar_accepts(g, think));
    CHECK(g && !grammar_accepts(g, two));
    CHECK(g && !grammar_accepts(g, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"location\": \"P\", \"days\": 1}}</tool_call>"));
    ob_grammar_free(g);
    ob_tc_grammar_free(&tg);
    o.only = "nope";
    CHECK(ob_tc_grammar_build(OB_TC_HERMES, &o, &tg, err, sizeof err) == OB_ERR_ARG);
    /* a schema the converter refuses names its tool */
    json_t *bad = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"odd\",\"parameters\":{\"type\":\"object\","
                             "\"properties\":{\"x\":{\"type\":\"number\",\"minimum\":1}}}}}]", 0, NULL);
    o = (ob_tc_grammar_opts){.tools = bad, .required = false, .parallel = true};
    CHECK(ob_tc_grammar_build(OB_TC_HERMES, &o, &tg, err, sizeof err) == OB_ERR_UNSUPPORTED);
    CHECKF(strstr(err, "odd") != NULL, "%s", err);
    json_decref(bad);
}

int main(void) {
    g_tools = json_loads(k_tools, 0, NULL);
    if (!g_tools) return 1;
    test_detect();
    test_whole();
    test_streams();
    test_hostile();
    test_grammars();
    json_decref(g_tools);
    return ob_test_done("test_toolcall");
}
