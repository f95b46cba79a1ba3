/* Jinja interpreter: small templates with outputs checked against jinja2 3.1 rendered the
 * way transformers does (trim_blocks, lstrip_blocks, loopcontrols, HF tojson), error
 * messages that name the construct, and the bounds on runaway templates. */
#include "testutil.h"
#include "chat/jinja.h"
#include "chat/chat.h"
#include <string.h>

static char *render(const char *tmpl, const char *ctx_json, char *err, size_t err_len, const ob_jinja_limits *lim) {
    json_t *ctx = NULL;
    if (ctx_json) {
        json_error_t je;
        ctx = json_loads(ctx_json, 0, &je);
        if (!ctx) { snprintf(err, err_len, "bad test JSON: %s", je.text); return NULL; }
    }
    char *out = NULL;
    err[0] = 0;
    ob_status st = ob_jinja_render_ex(tmpl, strlen(tmpl), ctx, lim, &out, NULL, err, err_len);
    json_decref(ctx);
    return st == OB_OK ? out : NULL;
}

static void expect(const char *tmpl, const char *ctx, const char *want, int line) {
    char err[512];
    char *got = render(tmpl, ctx, err, sizeof err, NULL);
    CHECKF(got && strcmp(got, want) == 0, "line %d: template %s\n  want [%s]\n  got  [%s] %s", line, tmpl, want,
           got ? got : "(error)", got ? "" : err);
    free(got);
}
#define EXPECT(t, ctx, want) expect(t, ctx, want, __LINE__)

/* Rendering must fail and the message must contain `needle`. */
static void expect_err(const char *tmpl, const char *ctx, const char *needle, const ob_jinja_limits *lim, int line) {
    char err[512];
    char *got = render(tmpl, ctx, err, sizeof err, lim);
    CHECKF(!got && strstr(err, needle), "line %d: template %s: want error containing [%s], got [%s] err [%s]", line,
           tmpl, needle, got ? got : "(error)", err);
    free(got);
}
#define EXPECT_ERR(t, ctx, needle) expect_err(t, ctx, needle, NULL, __LINE__)

static void test_basics(void) {
    EXPECT("Hello {{ name }}!", "{\"name\": \"w\\u00f6rld\"}", "Hello wörld!");
    EXPECT("{{ x }}|{{ x is defined }}", NULL, "|False");
    EXPECT("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}", NULL, "7 9 3 -4 2 1024");
    EXPECT("{{ 1 / 2 }} {{ 4 / 2 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }} {{ 1e15 }}", NULL,
           "0.5 2.0 0.30000000000000004 1e+20 1e-05 1000000000000000.0");
    EXPECT("{{ true }} {{ none }} {{ [1, 'a', none, true] }} {{ {'k': 'it\\'s'} }} {{ (1,) }}", NULL,
           "True None [1, 'a', None, True] {'k': \"it's\"} (1,)");
    EXPECT("{{ 'a' ~ 1 ~ none }} {{ 'x' if false }}| {{ 'y' if 0 else 'n' }}", NULL, "a1None | n");
    EXPECT("{{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ 1 < 2 < 3 }} {{ 'at' in 'cat' }} {{ 3 not in [1, 2] }}", NULL, "True True True True True");
    EXPECT("{{ 1 and 'x' }}{{ 0 or [] }}{{ not none }}", NULL, "x[]True");
    EXPECT("{# comment #}a{{- '  b  ' -}}  c", NULL, "a  b  c");
}

static void test_whitespace(void) {
    /* trim_blocks eats the newline after a block tag; lstrip_blocks the indent before it */
    EXPECT("  {% if true %}\n  yes\n  {% endif %}\nend\n", NULL, "  yes\nend");
    EXPECT("a  {%- if true -%}  b  {%- endif %}", NULL, "ab");
    EXPECT("x {% if true %}y{% endif %}", NULL, "x y");
    EXPECT("  {%+ if true %}y{% endif %}", NULL, "  y");
    EXPECT("{% raw %}{{ x }}{% endraw %}", NULL, "{{ x }}");
    EXPECT("a\r\nb", NULL, "a\nb");
}

static void test_loops(void) {
    EXPECT("{% for i in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
           "{\"xs\": [\"a\", \"b\"]}", "102TrueFalse2;211FalseTrue2;");
    EXPECT("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}", "{\"d\": {\"z\": 1, \"a\": 2}}", "z=1,a=2,");
    EXPECT("{% for x in [] %}a{% else %}empty{% endfor %}", NULL, "empty");
    EXPECT("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", NULL, "13");
    EXPECT("{% for x in [1, 2, 3, 4, 5] if x is odd %}{{ x }}/{{ loop.length }} {% endfor %}", NULL, "1/3 3/3 5/3 ");
    EXPECT("{% for m in ms[::-1] %}{{ m }}{% endfor %}", "{\"ms\": [1, 2, 3]}", "321");
    /* a set inside a loop body does not leak out; a namespace does */
    EXPECT("{% set x = 1 %}{% for i in [1, 2] %}{% set x = 5 %}{% endfor %}{{ x }}", NULL, "1");
    EXPECT("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", NULL, "6");
}

static void test_filters_and_methods(void) {
    EXPECT("{{ d|tojson }}", "{\"d\": {\"b\": [1, 2.0, null], \"a\": \"\\u00e9\\n\\\"\"}}", "{\"b\": [1, 2.0, null], \"a\": \"é\\n\\\"\"}");
    EXPECT("{{ d|tojson(indent=2) }}", "{\"d\": {\"a\": [1], \"e\": {}}}", "{\n  \"a\": [\n    1\n  ],\n  \"e\": {}\n}");
    EXPECT("{{ d|tojson(sort_keys=true) }}", "{\"d\": {\"b\": 1, \"a\": 2}}", "{\"a\": 2, \"b\": 1}");
    EXPECT("{{ '  x  '|trim }}|{{ 'ab'|upper }}|{{ 'hello wORLD'|title }}|{{ 'hELLO'|capitalize }}|{{ 'é'|length }}", NULL, "x|AB|Hello World|Hello|1");
    EXPECT("{{ xs|map(attribute='n')|join(',') }}|{{ xs|selectattr('n', 'gt', 1)|list|length }}", "{\"xs\": [{\"n\": 1}, {\"n\": 2}]}", "1,2|1");
    EXPECT("{{ [3, 1, 2]|sort }}{{ ['b', 'A']|sort }}{{ {'b': 1, 'a': 2}|dictsort }}", NULL, "[1, 2, 3]['A', 'b'][('a', 2), ('b', 1)]");
    EXPECT("{{ x|default('d') }}{{ ''|default('e', true) }}{{ '3'|int + 1 }}{{ 2.5|round }}{{ 2.567|round(2) }}", NULL, "de42.02.57");
    EXPECT("{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'x</think>y'.split('</think>')[-1] }}", NULL, "['a', 'b', '', 'c']['a', 'b']y");
    EXPECT("{{ 'Hi'.startswith('H') }}{{ 'xxaxx'.strip('x') }}{{ '\\nq'.lstrip('\\n') }}{{ 'a-b'.replace('-', '+') }}", NULL, "Trueaqa+b");
    EXPECT("{{ 'abcdef'[1:4] }}{{ 'abcdef'[-2:] }}{{ [1, 2, 3, 4][::2] }}", NULL, "bcdef[1, 3]");
    EXPECT("{{ d.get('a') }}{{ d.get('z', 5) }}{{ d.keys()|list }}", "{\"d\": {\"a\": 1}}", "15['a']");
    EXPECT("{{ 'a\\nb'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}", NULL, "a\n  b|  a\n  b");
}

static void test_macros_and_sets(void) {
    EXPECT("{% macro f(a, b='x') %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(2, b=3) }}", NULL, "[1x][23]");
    EXPECT("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}", NULL, "<in>");
    EXPECT("{% set x %}a{{ 1 }}{% endset %}[{{ x }}]", NULL, "[a1]");
    EXPECT("{% set a, b = [1, 2] %}{{ b }}{{ a }}", NULL, "21");
    EXPECT("{% filter upper %}ab{% endfilter %}", NULL, "AB");
}

static void test_errors(void) {
    EXPECT_ERR("{{ x|bogus }}", NULL, "bogus");
    EXPECT_ERR("{% if x is bogus %}{% endif %}", NULL, "bogus");
    EXPECT_ERR("{% if x %}never closed", NULL, "endif");
    EXPECT_ERR("{% for x in y %}never closed", NULL, "endfor");
    EXPECT_ERR("{{ 'unterminated }}", NULL, "unterminated");
    EXPECT_ERR("{{ x ", NULL, "unterminated");
    EXPECT_ERR("{# never closed", NULL, "comment");
    EXPECT_ERR("{% endif %}", NULL, "endif");
    EXPECT_ERR("{% include 'x' %}", NULL, "include");
    EXPECT_ERR("{{ raise_exception('Roles must alternate') }}", NULL, "Roles must alternate");
    EXPECT_ERR("{{ x.y }}", NULL, "'x' is undefined");
    EXPECT_ERR("{{ x + 1 }}", NULL, "'x' is undefined");
    EXPECT_ERR("{{ [1].append(2) }}", NULL, "unsafe");
    EXPECT_ERR("{{ 'a' + 1 }}", NULL, "+");
    EXPECT_ERR("{{ 1 / 0 }}", NULL, "division by zero");
    EXPECT_ERR("{{ x|tojson }}", NULL, "not JSON serializable");
    EXPECT_ERR("{{ [1, 2]|map('upper') }}", NULL, "generator");
    EXPECT_ERR("{{ range(1000000)|length }}", NULL, "Range too big");
}

static void test_limits(void) {
    /* a loop that would run for ever is stopped by the step budget */
    ob_jinja_limits steps = {.max_steps = 100000};
    expect_err("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", NULL, "steps", &steps, __LINE__);
    /* output that grows without bound hits the output cap */
    ob_jinja_limits outcap = {.max_output = 1000};
    expect_err("{% for i in range(10000) %}xxxxxxxx{% endfor %}", NULL, "output", &outcap, __LINE__);
    /* doubling a string in a loop hits the cap before the memory runs out */
    expect_err("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}", NULL, "bytes", NULL, __LINE__);
    /* unbounded macro recursion */
    expect_err("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, "deeply", NULL, __LINE__);
    /* deeply nested expressions and blocks are refused at parse time */
    char deep[4096];
    size_t k = 0;
    k += (size_t)snprintf(deep + k, sizeof deep - k, "{{ ");
    for (int i = 0; i < 1000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 1000; i++) deep[k++] = ')';
    k += (size_t)snprintf(deep + k, sizeof deep - k, " }}");
    EXPECT_ERR(deep, NULL, "deeply");
    char blocks[8192];
    k = 0;
    for (int i = 0; i < 500; i++) k += (size_t)snprintf(blocks + k, sizeof blocks - k, "{%% if 1 %%}");
    EXPECT_ERR(blocks, NULL, "deeply");
}

/* Random printable junk must never crash or hang: it renders or fails cleanly. */
static void test_fuzz_junk(void) {
    static const char *const atoms[] = {"{{", "}}", "{%", "%}", "{#", "#}", "if", "for", "x", "in", "endif", "endfor",
                                        "(", ")", "[", "]", "'", "\"", "|", "upper", " ", "\n", "-", "+", ".", "1",
                                        "set", "=", "macro", "loop", "~", ",", ":", "is", "not", "raw", "endraw"};
    ob_rng r;
    ob_rng_seed(&r, 1234);
    ob_jinja_limits lim = {.max_steps = 20000, .max_output = 1 << 16};
    int ok = 0;
    for (int t = 0; t < 3000; t++) {
        char buf[512];
        size_t k = 0;
        int n = 1 + (int)(ob_rng_u64(&r) % 40);
        for (int i = 0; i < n; i++) {
            const char *a = atoms[ob_rng_u64(&r) % OB_ARRAY_LEN(atoms)];
            size_t l = strlen(a);
            if (k + l + 1 >= sizeof buf) break;
            memcpy(buf + k, a, l);
            k += l;
        }
        buf[k] = 0;
        char err[256], *out = NULL;
        if (ob_jinja_render_ex(buf, k, NULL, &lim, &out, NULL, err, sizeof err) == OB_OK) ok++;
        else CHECK(err[0] != 0);
        free(out);
    }
    CHECK(ok > 0); /* some junk is valid text */
}

static void test_chat_render(void) {
    json_error_t je;
    json_t *msgs = json_loads("[{\"role\": \"user\", \"content\": \"Hi\"}]", 0, &je);
    ob_chat_params p = {.messages = msgs, .add_generation_prompt = true, .enable_thinking = 0, .bos_token = "<s>"};
    char err[256], *out = NULL;
    const char *t = "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}"
                    "{{ tools is none }}{{ eos_token is defined }}{% if add_generation_prompt %}A:{% endif %}"
                    "{{ enable_thinking }}";
    CHECK(ob_chat_render(t, &p, &out, err, sizeof err) == OB_OK);
    CHECKF(out && !strcmp(out, "<s>user:Hi;TrueFalseA:False"), "got %s", out ? out : err);
    free(out);
    json_decref(msgs);
}

int main(void) {
    test_basics();
    test_whitespace();
    test_loops();
    test_filters_and_methods();
    test_macros_and_sets();
    test_errors();
    test_limits();
    test_fuzz_junk();
    test_chat_render();
    return ob_test_done("test_jinja");
}
