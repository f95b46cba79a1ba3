/* Grammar engine: GBNF parsing (valid grammars, errors with their line and column),
 * matching (whole strings accepted or refused: literals, escapes, classes, repetition
 * bounds, UTF-8 split across pieces), the token mask on a small vocabulary (equal to
 * asking token by token), sampling under the mask (equal to -inf logits before the
 * chain), and JSON schemas judged by the strings their grammars accept. */
#include "testutil.h"
#include "onebit.h"
#include "core/common.h"
#include "engine/sampler.h"
#include "grammar/grammar_int.h"
#include <math.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------- */

static ob_grammar *parse(const char *text) {
    char err[256];
    ob_grammar *g = NULL;
    ob_status st = ob_grammar_parse(text, strlen(text), &g, err, sizeof err);
    CHECKF(st == OB_OK, "grammar should parse: %s\n%s", err, text);
    return g;
}

/* Whether the grammar matches all of s (fed in pieces of `step` bytes). */
static bool matches_step(const ob_grammar *g, const char *s, size_t step) {
    ob_grammar_matcher *m = ob_grammar_matcher_new(g, NULL, true);
    if (!m) return false;
    size_t n = strlen(s);
    bool ok = true;
    for (size_t i = 0; i < n && ok; i += step) ok = ob_grammar_matcher_accept_bytes(m, s + i, OB_MIN(step, n - i));
    ok = ok && ob_grammar_matcher_can_end(m);
    ob_grammar_matcher_free(m);
    return ok;
}

static bool matches(const ob_grammar *g, const char *s) {
    bool whole = matches_step(g, s, strlen(s) ? strlen(s) : 1);
    bool bytes = matches_step(g, s, 1);
    CHECKF(whole == bytes, "whole and byte-by-byte disagree on '%s'", s);
    return whole;
}

static void expect(const char *grammar, const char *const *yes, const char *const *no) {
    ob_grammar *g = parse(grammar);
    if (!g) return;
    for (; yes && *yes; yes++) CHECKF(matches(g, *yes), "grammar %s\nshould accept '%s'", grammar, *yes);
    for (; no && *no; no++) CHECKF(!matches(g, *no), "grammar %s\nshould refuse '%s'", grammar, *no);
    ob_grammar_free(g);
}

static void expect_error(const char *grammar, const char *where) {
    char err[256] = "";
    ob_grammar *g = NULL;
    ob_status st = ob_grammar_parse(grammar, strlen(grammar), &g, err, sizeof err);
    CHECKF(st != OB_OK && !g, "grammar should fail: %s", grammar);
    CHECKF(strstr(err, where) != NULL, "error for %s\nis '%s', wanted '%s' in it", grammar, err, where);
    ob_grammar_free(g);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

/* ---- parser ---------------------------------------------------------------------------- */

static void test_parse_ok(void) {
    expect("root ::= \"abc\"", L("abc"), L("", "ab", "abcd", "abd"));
    expect("root ::= a | b\na ::= \"x\"\nb ::= \"y\" \"z\"", L("x", "yz"), L("y", "xyz"));
    expect("# comment\nroot ::= ( \"a\" # inside\n  | \"b\" )\n\n# end", L("a", "b"), L("ab"));
    expect("root ::= \"a\" |\n  \"b\"", L("a", "b"), L(""));
    expect("root ::= ", L(""), L("a"));
    expect("root ::= \"\"", L(""), L("a"));
    expect("root::=\"a\"  \r\nx::=\"b\"", L("a"), L("b"));
    expect("root ::= [a-c]+ \"!\"", L("a!", "abcab!"), L("!", "ad!"));
    expect("root ::= [^a-c\\n]", L("d", "Z", "\xC3\xA9"), L("a", "\n", ""));
    expect("root ::= .", L("a", "\n", "\xE2\x82\xAC", "\xF0\x9F\x98\x80"), L("", "ab"));
    expect("root ::= \"\\x41\\u00e9\\U0001F600\\t\\n\\r\\\\\\\"\\[\\]\"",
           L("A\xC3\xA9\xF0\x9F\x98\x80\t\n\r\\\"[]"), L("A"));
    expect("root ::= [\\x00-\\x1f]", L("\x01", "\x1f"), L(" "));
    expect("root ::= [\\]\\[\\-]*", L("", "[]-", "]]"), L("a"));
    expect("root ::= \"\xE6\x97\xA5\xE6\x9C\xAC\" [\xE3\x81\x81-\xE3\x82\x9F]", L("\xE6\x97\xA5\xE6\x9C\xAC\xE3\x81\x82"),
           L("\xE6\x97\xA5\xE6\x9C\xAC\xE3\x82\xA2"));
    expect("root ::= [-a]", L("-", "a"), L("b"));
    expect("root ::= [a-]", L("-", "a"), L("b"));
    expect("root ::= x_y\nx_y ::= \"ok\"", L("ok"), NULL);
    /* a rule may be used before it is defined, and recursion that consumes text is fine */
    expect("root ::= list\nlist ::= \"[\" (item (\",\" item)*)? \"]\"\nitem ::= [0-9] | list",
           L("[]", "[1]", "[1,[2,[]],3]"), L("[", "[1,]", "[[]"));
}

static void test_repetition(void) {
    expect("root ::= \"a\"{3}", L("aaa"), L("aa", "aaaa"));
    expect("root ::= \"a\"{2,}", L("aa", "aaaaaaa"), L("a", ""));
    expect("root ::= \"a\"{1,3}", L("a", "aa", "aaa"), L("", "aaaa"));
    expect("root ::= \"a\"{0,2}", L("", "a", "aa"), L("aaa"));
    expect("root ::= \"ab\"{2} \"c\"?", L("abab", "ababc"), L("ab", "ababcc"));
    expect("root ::= (\"a\" | \"bc\"){2,3}", L("aa", "abc", "bcbcbc", "abca"), L("a", "bcbcbca"));
    expect("root ::= [0-9]{ 2 , 4 }", L("12", "1234"), L("1", "12345"));
    expect("root ::= \"x\"* \"y\"+", L("y", "xxyy"), L("x", ""));
    expect("root ::= \"\"*", L(""), L("a"));
    expect("root ::= \"a\"{0}", L(""), L("a"));
    /* 5 at most, then exactly: as llama-server's 'root ::= "a"{5,5}' */
    expect("root ::= \"a\"{5,5}", L("aaaaa"), L("aaaa", "aaaaaa"));
}

static void test_parse_errors(void) {
    expect_error("root ::= this is (not valid GBNF", "line 1, column 18: unclosed '('");
    expect_error("root ::= \"abc", "line 1, column 10: unterminated string");
    expect_error("root ::= [abc", "line 1, column 10: unclosed '['");
    expect_error("root ::= foo", "line 1, column 10: undefined rule 'foo'");
    expect_error("root ::= \"a\"\n\nbar ::= \"b\" baz", "line 3, column 13: undefined rule 'baz'");
    expect_error("foo ::= \"a\"", "no 'root' rule");
    expect_error("", "no 'root' rule");
    expect_error("root \"a\"", "line 1, column 6: expected '::='");
    expect_error("root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice");
    expect_error("root ::= * \"a\"", "line 1, column 10: '*' has nothing before it");
    expect_error("root ::= \"a\"{2,1}", "the maximum is below the minimum");
    expect_error("root ::= \"a\"{2", "expected '}'");
    expect_error("root ::= \"a\"{1000000}", "repetition count over");
    expect_error("root ::= \"\\q\"", "line 1, column 11: unknown escape");
    expect_error("root ::= \"\\x4\"", "needs 2 hex digits");
    expect_error("root ::= [z-a]", "below its start");
    expect_error("root ::= \"\\uD800\"", "not a Unicode character");
    expect_error("root ::= \"a\" )", "line 1, column 14: unexpected ')'");
    expect_error("root ::= \"a\"\n| \"b\"", "line 2, column 1: expected a rule name, found '|'");
    expect_error("root ::= <think>", "token references");
    expect_error("root ::= \"\xC3\"", "invalid UTF-8");
    /* left recursion, direct, indirect and through something that can be empty */
    expect_error("root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive");
    expect_error("root ::= a\na ::= b \"x\"\nb ::= a | \"y\"", "left-recursive");
    expect_error("root ::= e root \"x\" | \"y\"\ne ::= \"\" | \"z\"", "rule 'root' is left-recursive");
    expect_error("root ::= (\"a\"?)*", "rule 'root' is left-recursive");
}

/* ---- token mask ------------------------------------------------------------------------- */

/* A small vocabulary: pieces that split UTF-8, an empty piece, an end token, a control one. */
static const char *const VOCAB[] = {
    "{", "}", "\"", "a", "ab", "abc", "b", "c", " ", "\"a", "a\"", "1", "12", "123", "x", ",", ":",
    "\xC3", "\xA9", "\xC3\xA9", "\xC3\xA9\xC3", "!", "a!", "", "<eos>", "<ctl>", "aa", "aaa", "b!", "{\"", "\"}",
};
#define NV ((int)OB_ARRAY_LEN(VOCAB))
#define TOK_EOS 24
#define TOK_CTL 25

static ob_grammar_vocab *fake_vocab(void) {
    uint32_t lens[NV];
    uint8_t kind[NV];
    for (int i = 0; i < NV; i++) {
        lens[i] = (uint32_t)strlen(VOCAB[i]);
        kind[i] = i == TOK_EOS ? OB_GTOK_END : i == TOK_CTL ? OB_GTOK_NEVER : OB_GTOK_TEXT;
    }
    return ob_grammar_vocab_new(NV, VOCAB, lens, kind);
}

/* Whether text + VOCAB[tok] keeps to the grammar, on a fresh matcher (no shared caches). */
static bool ref_allows(const ob_grammar *g, const char *text, size_t len, int tok) {
    ob_grammar_matcher *m = ob_grammar_matcher_new(g, NULL, true);
    bool ok = ob_grammar_matcher_accept_bytes(m, text, len);
    if (tok == TOK_EOS) ok = ok && ob_grammar_matcher_can_end(m);
    else if (tok == TOK_CTL || !VOCAB[tok][0]) ok = false;
    else ok = ok && ob_grammar_matcher_accept_bytes(m, VOCAB[tok], strlen(VOCAB[tok]));
    ob_grammar_matcher_free(m);
    return ok;
}

/* Random walks through the grammar by allowed tokens: at every step the mask equals
 * asking token by token and equals the fresh-matcher reference. */
static void check_mask_walks(const char *grammar, int walks, uint64_t seed) {
    ob_grammar *g = parse(grammar);
    ob_grammar_vocab *v = fake_vocab();
    if (!g || !v) return;
    ob_rng r;
    ob_rng_seed(&r, seed);
    for (int w = 0; w < walks; w++) {
        ob_grammar_matcher *m = ob_grammar_matcher_new(g, v, true);
        char text[256];
        size_t len = 0;
        for (int step = 0; step < 24; step++) {
            uint8_t mask[NV];
            int n = ob_grammar_matcher_mask(m, mask), count = 0;
            for (int t = 0; t < NV; t++) {
                bool ref = ref_allows(g, text, len, t);
                CHECKF(mask[t] == ref, "grammar %s after '%.*s': token %d '%s' mask %d, reference %d", grammar, (int)len,
                       text, t, VOCAB[t], mask[t], ref);
                CHECKF(ob_grammar_matcher_allows(m, t) == ref, "allows(%d) after '%.*s'", t, (int)len, text);
                count += mask[t];
            }
            CHECK(n == count);
            uint8_t again[NV]; /* the second time from the matcher's kept mask */
            CHECK(ob_grammar_matcher_mask(m, again) == n && !memcmp(again, mask, sizeof mask));
            if (count == 0) break;
            int pick = (int)(ob_rng_u64(&r) % (uint64_t)count);
            int tok = 0;
            for (; tok < NV; tok++) if (mask[tok] && pick-- == 0) break;
            if (tok == TOK_EOS) {
                CHECK(ob_grammar_matcher_can_end(m));
                break;
            }
            CHECK(ob_grammar_matcher_accept_token(m, tok));
            size_t tl = strlen(VOCAB[tok]);
            if (len + tl >= sizeof text) break;
            memcpy(text + len, VOCAB[tok], tl);
            len += tl;
        }
        ob_grammar_matcher_free(m);
    }
    ob_grammar_vocab_free(v);
    ob_grammar_free(g);
}

static void test_mask(void) {
    check_mask_walks("root ::= \"{\" ( \"\\\"\" [abc]* \"\\\"\" ( \",\" \"1\"+ )? )? \"}\"", 40, 1);
    check_mask_walks("root ::= \"a\"+ ( \"\xC3\xA9\" | \"b\" )* \"!\"", 40, 2);
    check_mask_walks("root ::= [^x]{0,6}", 40, 3);
    check_mask_walks("root ::= ( \"a\" | \"ab\" | \"abc\" ) ( \"c\" | \"bc\" )? \" \"?", 40, 4);
    /* the end token only where the grammar may end; never with end_tokens off */
    ob_grammar *g = parse("root ::= \"a\" \"b\"?");
    ob_grammar_vocab *v = fake_vocab();
    ob_grammar_matcher *m = ob_grammar_matcher_new(g, v, true), *noend = ob_grammar_matcher_new(g, v, false);
    CHECK(!ob_grammar_matcher_allows(m, TOK_EOS));
    CHECK(ob_grammar_matcher_accept_token(m, 3) && ob_grammar_matcher_accept_token(noend, 3));
    CHECK(ob_grammar_matcher_allows(m, TOK_EOS) && !ob_grammar_matcher_allows(noend, TOK_EOS));
    CHECK(!ob_grammar_matcher_allows(m, TOK_CTL) && !ob_grammar_matcher_allows(m, 23));
    CHECK(ob_grammar_matcher_accept_token(m, 6) && ob_grammar_matcher_allows(m, TOK_EOS));
    uint8_t mask[NV];
    CHECK(ob_grammar_matcher_mask(m, mask) == 1 && mask[TOK_EOS]);
    CHECK(ob_grammar_matcher_mask(noend, mask) == 1 && mask[6]); /* "b" */
    CHECK(ob_grammar_matcher_accept_token(noend, 6) && ob_grammar_matcher_mask(noend, mask) == 0);
    CHECK(!ob_grammar_matcher_accept_token(m, 3));
    ob_grammar_matcher_free(m);
    ob_grammar_matcher_free(noend);
    ob_grammar_vocab_free(v);
    ob_grammar_free(g);
}

/* An ambiguous grammar past the matcher's limits fails with a message instead of hanging. */
static void test_explosion(void) {
    ob_grammar *g = parse("root ::= x*\nx ::= [a-z] | [a-z] [a-z] | [a-z] [a-z] [a-z] | [a-z] x [a-z]");
    if (!g) return;
    ob_grammar_matcher *m = ob_grammar_matcher_new(g, NULL, true);
    bool ok = true;
    for (int i = 0; i < 20000 && ok; i++) ok = ob_grammar_matcher_accept_bytes(m, "a", 1);
    CHECKF(!ok && ob_grammar_matcher_error(m) && strstr(ob_grammar_matcher_error(m), "ambiguous"),
           "error: %s", ob_grammar_matcher_error(m) ? ob_grammar_matcher_error(m) : "(none)");
    ob_grammar_matcher_free(m);
    ob_grammar_free(g);
    /* too many alternatives at the very start: the matcher says why */
    ob_gtext big = {0};
    ob_gtext_puts(&big, "root ::= \"x\"");
    for (int i = 0; i < 17000; i++) ob_gtext_printf(&big, " | \"v%d\"", i);
    g = parse(big.s);
    free(big.s);
    if (!g) return;
    m = ob_grammar_matcher_new(g, NULL, true);
    CHECK(m && ob_grammar_matcher_error(m) && !ob_grammar_matcher_accept_bytes(m, "x", 1));
    ob_grammar_matcher_free(m);
    ob_grammar_free(g);
}

/* ---- sampling under the mask ------------------------------------------------------------------ */

typedef struct fake_filter { const uint8_t *ok; int n; int asked; } fake_filter;
static bool ff_allows(void *ud, int32_t t) {
    fake_filter *f = ud;
    f->asked++;
    return f->ok[t];
}
static int ff_mask(void *ud, uint8_t *allowed) {
    fake_filter *f = ud;
    int c = 0;
    for (int i = 0; i < f->n; i++) c += (allowed[i] = f->ok[i]);
    return c;
}

/* The filtered sampler draws the token the plain one draws from logits set to -inf where
 * the filter says no, for every chain setting, over a run of tokens (penalties see the
 * same history). */
static void test_sampler_equivalence(void) {
    enum { V = 3000 };
    static float logits[V], masked[V];
    static uint8_t ok[V];
    ob_rng r;
    ob_rng_seed(&r, 99);
    int32_t bias_tok[3] = {5, 17, 2999};
    float bias_val[3] = {3.0f, -2.0f, 8.0f};
    struct { float temp; int top_k; float top_p, min_p, rep; int n_bias; } cfg[] = {
        {0, 0, 1, 0, 1, 0}, {0.8f, 40, 0.95f, 0.05f, 1, 0}, {1.0f, 5, 1, 0, 1, 0}, {0.7f, 0, 0.9f, 0.1f, 1, 0},
        {1.2f, 0, 1, 0, 1, 0}, {0.9f, 0, 0.8f, 0, 1, 3}, {0.8f, 40, 0.95f, 0.05f, 1.3f, 3}, {0, 0, 1, 0, 1.5f, 3},
        {1.0f, 2000, 1, 0, 1, 0},
    };
    for (size_t c = 0; c < OB_ARRAY_LEN(cfg); c++) {
        for (int density = 0; density < 4; density++) {
            ob_sampler_params p = ob_sampler_default_params();
            p.temperature = cfg[c].temp;
            p.top_k = cfg[c].top_k;
            p.top_p = cfg[c].top_p;
            p.min_p = cfg[c].min_p;
            p.repeat_penalty = cfg[c].rep;
            p.penalty_last_n = 16;
            p.seed = 1000 + c * 10 + (uint64_t)density;
            p.n_logit_bias = cfg[c].n_bias;
            p.logit_bias_tok = bias_tok;
            p.logit_bias_val = bias_val;
            ob_sampler *a = ob_sampler_new(&p, V), *b = ob_sampler_new(&p, V);
            for (int step = 0; step < 30; step++) {
                /* allowed: all but a few, about half, a few, or one */
                static const int keep_in[4] = {97, 50, 2, 0};
                int n_ok = 0;
                for (int i = 0; i < V; i++) {
                    ok[i] = (int)(ob_rng_u64(&r) % 100) < keep_in[density];
                    n_ok += ok[i];
                }
                if (!n_ok) { ok[ob_rng_u64(&r) % V] = 1; n_ok = 1; }
                for (int i = 0; i < V; i++) {
                    logits[i] = 4.0f * ob_rng_normal(&r);
                    if (i % 7 == 0) logits[i] = logits[i - i % 14]; /* ties */
                    masked[i] = ok[i] ? logits[i] : -INFINITY;
                }
                fake_filter f = {ok, V, 0};
                ob_token_filter tf = {ff_allows, ff_mask, &f};
                int32_t ta = ob_sampler_sample_filtered(a, logits, &tf);
                int32_t tb = ob_sampler_sample(b, masked);
                CHECKF(ta == tb && ta >= 0 && ok[ta], "config %zu density %d step %d: filtered %d, masked %d", c,
                       density, step, ta, tb);
            }
            ob_sampler_free(a);
            ob_sampler_free(b);
        }
    }
    /* nothing allowed: -1, and the lazy path asks about few tokens when the best are allowed */
    memset(ok, 0, sizeof ok);
    for (int i = 0; i < V; i++) logits[i] = (float)i;
    ob_sampler_params p = ob_sampler_default_params();
    ob_sampler *s = ob_sampler_new(&p, V);
    fake_filter f = {ok, V, 0};
    ob_token_filter tf = {ff_allows, ff_mask, &f};
    CHECK(ob_sampler_sample_filtered(s, logits, &tf) == -1);
    memset(ok, 1, sizeof ok);
    f.asked = 0;
    int32_t t = ob_sampler_sample_filtered(s, logits, &tf);
    CHECKF(t >= V - 40 && f.asked == 40, "top-40 asks 40 tokens, asked %d", f.asked);
    ob_sampler_free(s);
}

/* ---- JSON schema ---------------------------------------------------------------------------- */

static ob_grammar *schema_grammar(const char *schema_json, char **text_out) {
    json_error_t je;
    json_t *js = schema_json ? json_loads(schema_json, JSON_DECODE_ANY, &je) : NULL;
    CHECKF(!schema_json || js, "bad test JSON: %s", schema_json);
    char *text = NULL, err[256];
    ob_status st = ob_grammar_from_schema(js, &text, err, sizeof err);
    json_decref(js);
    CHECKF(st == OB_OK, "schema %s: %s", schema_json ? schema_json : "(none)", err);
    if (st) return NULL;
    ob_grammar *g = NULL;
    st = ob_grammar_parse(text, strlen(text), &g, err, sizeof err);
    CHECKF(st == OB_OK, "schema %s gave a bad grammar: %s\n%s", schema_json, err, text);
    if (text_out) *text_out = text;
    else free(text);
    return g;
}

static void expect_schema(const char *schema_json, const char *const *yes, const char *const *no) {
    char *text = NULL;
    ob_grammar *g = schema_grammar(schema_json, &text);
    if (!g) { free(text); return; }
    for (; yes && *yes; yes++) CHECKF(matches(g, *yes), "schema %s\nshould accept %s\ngrammar:\n%s", schema_json, *yes, text);
    for (; no && *no; no++) CHECKF(!matches(g, *no), "schema %s\nshould refuse %s\ngrammar:\n%s", schema_json, *no, text);
    free(text);
    ob_grammar_free(g);
}

static void expect_schema_error(const char *schema_json, ob_status want, const char *msg) {
    json_error_t je;
    json_t *js = json_loads(schema_json, JSON_DECODE_ANY, &je);
    char *text = NULL, err[256] = "";
    ob_status st = ob_grammar_from_schema(js, &text, err, sizeof err);
    if (st == OB_OK) { /* some errors surface when the grammar is compiled */
        ob_grammar *g = NULL;
        st = ob_grammar_parse(text, strlen(text), &g, err, sizeof err);
        ob_grammar_free(g);
    }
    CHECKF(st == want && strstr(err, msg), "schema %s: status %d '%s', wanted %d '%s'", schema_json, st, err, want, msg);
    free(text);
    json_decref(js);
}

static void test_schema_objects(void) {
    const char *person = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},"
                         "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150}},\"required\":[\"name\"]}";
    expect_schema(person,
                  L("{\"name\":\"bob\"}", "{\"name\":\"bob\",\"age\":42}", "{ \"name\" : \"bob\" , \"age\" : 150 }",
                    "{\"name\":\"\"}", "{\n  \"name\": \"\\u00e9\\n\"\n}", "{\"name\":\"\xC3\xA9t\xC3\xA9\"}"),
                  L("{\"name\":\"bobbie\"}", "{\"name\":\"bob\",\"age\":151}", "{\"name\":\"bob\",\"age\":-1}",
                    "{\"name\":\"bob\",\"extra\":1}", "{}", "{\"name\":\"bob\",}", "{\"age\":1,\"name\":\"bob\"}",
                    "{\"name\":\"bob\",\"age\":04}", "{\"name\":bob}", "[\"name\"]"));
    /* optional pairs in declared order, none required */
    expect_schema("{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"boolean\"},\"c\":{\"type\":\"null\"}}}",
                  L("{}", "{\"a\":1}", "{\"b\":true}", "{\"c\":null}", "{\"a\":1,\"c\":null}", "{\"a\":1,\"b\":false,\"c\":null}"),
                  L("{,}", "{\"b\":true,\"a\":1}", "{\"a\":1,}", "{\"d\":1}"));
    /* additional pairs: a schema for them, declared keys not repeated as extras */
    expect_schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"boolean\"}}",
                  L("{\"a\":1,\"b\":true}", "{\"b\":false}", "{\"a\":1}", "{\"ab\":true,\"x\":false}", "{\"\":true}", "{}"),
                  L("{\"a\":1,\"b\":2}", "{\"a\":1,\"a\":true}", "{\"a\":true}"));
    expect_schema("{\"type\":\"object\",\"additionalProperties\":true}", L("{}", "{\"x\":[1,{\"y\":null}]}"), L("[]"));
    expect_schema("{\"type\":\"object\",\"additionalProperties\":false}", L("{}", "{ }"), L("{\"a\":1}"));
    /* required keys that properties does not describe take any value */
    expect_schema("{\"type\":\"object\",\"required\":[\"k\"],\"additionalProperties\":false}", L("{\"k\":[1,\"x\"]}"),
                  L("{}", "{\"j\":1}"));
    /* the empty top-level schema and none at all: any object; nested {}: any value */
    expect_schema(NULL, L("{}", "{\"a\":[1,{\"b\":null}],\"c\":\"d\"}"), L("[1]", "\"x\"", "{\"a\"}"));
    expect_schema("{}", L("{\"a\":1}"), L("1"));
    expect_schema("{\"type\":\"array\",\"items\":{}}", L("[1,\"a\",null,{\"x\":[]},true,-1.5e3]"), L("[1,]"));
    expect_schema("{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
                  "{\"properties\":{\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}]}",
                  L("{\"a\":1,\"b\":\"x\"}"), L("{\"a\":1}", "{\"b\":\"x\"}"));
    /* a key that JSON must escape */
    expect_schema("{\"properties\":{\"a\\\"b\":{\"const\":1}},\"required\":[\"a\\\"b\"]}", L("{\"a\\\"b\":1}"), L("{\"a\"b\":1}"));
}

static void test_schema_values(void) {
    expect_schema("{\"enum\":[\"red\",\"green\",1,null,{\"a\":[true]}]}",
                  L("\"red\"", "\"green\"", "1", "null", "{\"a\":[true]}", "\"red\" "), L("\"blue\"", "2", "\"Red\""));
    expect_schema("{\"const\":\"42\"}", L("\"42\""), L("42", "\"4\""));
    expect_schema("{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"null\"}]}", L("\"ab\"", "null"),
                  L("\"abc\"", "1"));
    expect_schema("{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"boolean\"}]}", L("3", "true"), L("1.5", "null"));
    expect_schema("{\"type\":[\"integer\",\"boolean\"]}", L("-12", "false"), L("\"1\"", "1.0"));
    expect_schema("{\"type\":\"number\"}", L("0", "-1.25", "3e10", "2.5E-3", "1e+2"), L("01", ".5", "1.", "-", "1e"));
    expect_schema("{\"type\":\"string\"}", L("\"\"", "\"a\\\"b\\\\c\\/\\b\\f\\n\\r\\t\\u00e9\\uFFFF\"", "\"\xF0\x9F\x98\x80\""),
                  L("\"a\nb\"", "\"\\x41\"", "\"\\ud800\"", "\"\\q\"", "\"abc"));
    expect_schema("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", L("\"ab\"", "\"\\nb\"", "\"\xC3\xA9\xC3\xA9\xC3\xA9\""),
                  L("\"a\"", "\"abcd\""));
    expect_schema("{\"type\":\"boolean\"}", L("true", "false"), L("True", "1"));
    expect_schema("{\"type\":\"null\"}", L("null"), L("nil"));
    expect_schema("{\"type\":\"string\",\"format\":\"date\"}", L("\"2024-02-29\""), L("\"2024-13-01\"", "\"24-01-01\""));
    expect_schema("{\"type\":\"string\",\"format\":\"time\"}", L("\"12:30:00Z\"", "\"23:59:59.123+02:00\""), L("\"24:00:00Z\"", "\"12:30\""));
    expect_schema("{\"type\":\"string\",\"format\":\"date-time\"}", L("\"2024-01-31T08:00:00Z\""), L("\"2024-01-31 08:00:00Z\""));
    expect_schema("{\"type\":\"string\",\"format\":\"uuid\"}", L("\"123e4567-e89b-12d3-a456-426614174000\""),
                  L("\"123e4567e89b12d3a456426614174000\""));
    expect_schema("{\"type\":\"string\",\"format\":\"email\"}", L("\"not checked\""), NULL);
    /* a large enum: every value a stack at the start */
    ob_gtext big = {0};
    ob_gtext_puts(&big, "{\"enum\":[");
    for (int i = 0; i < 6000; i++) ob_gtext_printf(&big, "%s\"value-%d\"", i ? "," : "", i);
    ob_gtext_puts(&big, "]}");
    expect_schema(big.s, L("\"value-0\"", "\"value-4321\"", "\"value-5999\""), L("\"value-6000\"", "\"value-\""));
    free(big.s);
}

static void test_schema_integers(void) {
    static const long long ranges[][2] = {{0, 9}, {0, 150}, {-5, 17}, {-120, -7}, {7, 7}, {13, 1307}, {-1000, 1000},
                                          {99, 101}, {1, 100000}, {-9, -1}, {0, 0}};
    for (size_t i = 0; i < OB_ARRAY_LEN(ranges); i++) {
        char sch[160];
        snprintf(sch, sizeof sch, "{\"type\":\"integer\",\"minimum\":%lld,\"maximum\":%lld}", ranges[i][0], ranges[i][1]);
        ob_grammar *g = schema_grammar(sch, NULL);
        if (!g) continue;
        long long lo = ranges[i][0], hi = ranges[i][1];
        for (long long v = lo - 150; v <= hi + 150; v += (hi - lo > 5000 ? 37 : 1)) {
            char num[32];
            snprintf(num, sizeof num, "%lld", v);
            CHECKF(matches(g, num) == (v >= lo && v <= hi), "[%lld, %lld] on %lld", lo, hi, v);
        }
        CHECKF(!matches(g, "-0") && !matches(g, "00") && !matches(g, "+1"), "[%lld, %lld]: odd spellings", lo, hi);
        ob_grammar_free(g);
    }
    expect_schema("{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":3}", L("1", "2"), L("0", "3"));
    expect_schema("{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true}", L("1", "12345"), L("0", "-1"));
    expect_schema("{\"type\":\"integer\",\"minimum\":10}", L("10", "99", "1234567890"), L("9", "-10"));
    expect_schema("{\"type\":\"integer\",\"maximum\":-3}", L("-3", "-1000"), L("-2", "0", "5"));
}

static void test_schema_arrays(void) {
    expect_schema("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}",
                  L("[1,2]", "[ 1 , 2, 3 ]"), L("[1]", "[1,2,3,4]", "[]", "[1,\"2\"]"));
    expect_schema("{\"type\":\"array\",\"items\":{\"type\":\"string\"}}", L("[]", "[\"a\"]", "[\"a\",\"b\",\"c\"]"), L("[,]"));
    expect_schema("{\"type\":\"array\",\"maxItems\":0}", L("[]"), L("[1]"));
    expect_schema("{\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}", L("[\"a\",1]"),
                  L("[\"a\"]", "[\"a\",1,2]", "[1,\"a\"]"));
    expect_schema("{\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"integer\"},\"maxItems\":3}",
                  L("[\"a\"]", "[\"a\",1,2]"), L("[\"a\",1,2,3]"));
    /* llama-server's suite: draft-4 tuple items */
    expect_schema("{\"items\":[{\"type\":\"integer\"}]}", L("[ -3000 ]", "[1]"), L("[1,2]", "[]"));
}

static void test_schema_refs_patterns(void) {
    const char *list = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                       "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"]}},"
                       "\"$ref\":\"#/$defs/node\"}";
    expect_schema(list, L("{\"v\":1,\"next\":null}", "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}"), L("{\"v\":1}"));
    expect_schema("{\"definitions\":{\"c\":{\"enum\":[\"x\",\"y\"]}},\"type\":\"array\",\"items\":{\"$ref\":\"#/definitions/c\"}}",
                  L("[\"x\",\"y\",\"x\"]"), L("[\"z\"]"));
    expect_schema("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}$\"}", L("\"AB-123\""), L("\"AB-12\"", "\"ab-123\"", "\"xAB-123\""));
    expect_schema("{\"type\":\"string\",\"pattern\":\"abc\"}", L("\"abc\"", "\"xxabcyy\""), L("\"ab\""));
    expect_schema("{\"type\":\"string\",\"pattern\":\"^(cat|dog)s?$\"}", L("\"cat\"", "\"dogs\""), L("\"cow\"", "\"cats!\""));
    expect_schema("{\"type\":\"string\",\"pattern\":\"^a\\\"b\\\\\\\\c\\\\n[^a-z]$\"}", L("\"a\\\"b\\\\c\\nX\"", "\"a\\\"b\\\\c\\n\\\"\""),
                  L("\"a\\\"b\\\\c\\nx\"", "\"a\\\"b\\\\c\\n\n\""));
    expect_schema("{\"type\":\"string\",\"pattern\":\"^[\\\\w.-]+@(?:[a-z]+\\\\.)+[a-z]{2,}$\"}", L("\"a.b-c@example.org\""),
                  L("\"a@b\"", "\"@x.org\""));
    expect_schema("{\"type\":\"string\",\"pattern\":\"^.{2}\\\\s\\\\S?$\"}", L("\"\xC3\xA9x \"", "\"ab\\tc\""), L("\"ab\"", "\"a\\nb \""));
}

static void test_schema_errors(void) {
    expect_schema_error("{\"type\":123}", OB_ERR_FORMAT, "'type' must be a string");
    expect_schema_error("{\"type\":\"hiccup\"}", OB_ERR_FORMAT, "unknown type 'hiccup'");
    expect_schema_error("123", OB_ERR_FORMAT, "a schema must be an object");
    expect_schema_error("{\"not\":{\"type\":\"string\"}}", OB_ERR_UNSUPPORTED, "'not' is not supported");
    expect_schema_error("{\"type\":\"array\",\"uniqueItems\":true}", OB_ERR_UNSUPPORTED, "'uniqueItems'");
    expect_schema_error("{\"type\":\"number\",\"minimum\":0}", OB_ERR_UNSUPPORTED, "integers only");
    expect_schema_error("{\"$ref\":\"https://example.com/s.json\"}", OB_ERR_UNSUPPORTED, "only local references");
    expect_schema_error("{\"$ref\":\"#/$defs/missing\"}", OB_ERR_FORMAT, "does not resolve");
    expect_schema_error("{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", OB_ERR_UNSUPPORTED, "backreferences");
    expect_schema_error("{\"type\":\"string\",\"pattern\":\"(?=a)\"}", OB_ERR_UNSUPPORTED, "lookaround");
    expect_schema_error("{\"type\":\"string\",\"pattern\":\"^a|b$\"}", OB_ERR_UNSUPPORTED, "top-level '|'");
    expect_schema_error("{\"type\":\"string\",\"pattern\":\"[abc\"}", OB_ERR_FORMAT, "unclosed '['");
    expect_schema_error("{\"type\":\"integer\",\"minimum\":5,\"maximum\":2}", OB_ERR_FORMAT, "no integer lies");
    expect_schema_error("{\"type\":\"string\",\"minLength\":-1}", OB_ERR_FORMAT, "non-negative integer");
    expect_schema_error("{\"enum\":[]}", OB_ERR_FORMAT, "non-empty array");
    expect_schema_error("false", OB_ERR_UNSUPPORTED, "allows no value");
    expect_schema_error("{\"$ref\":\"#\"}", OB_ERR_FORMAT, "left-recursive");
}

int main(void) {
    test_parse_ok();
    test_repetition();
    test_parse_errors();
    test_mask();
    test_explosion();
    test_sampler_equivalence();
    test_schema_objects();
    test_schema_values();
    test_schema_integers();
    test_schema_arrays();
    test_schema_refs_patterns();
    test_schema_errors();
    return ob_test_done("test_grammar");
}
