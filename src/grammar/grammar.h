/* Grammar-constrained generation.
 *
 * A GBNF grammar (llama.cpp's syntax, its grammars/README.md) is compiled into a pushdown
 * automaton over bytes: literals become byte elements and each character class a small
 * UTF-8 byte automaton, so a token's bytes (which may split a character) are followed one
 * at a time with no partial-character state. A matcher keeps the set of parse stacks the
 * text so far allows; stacks and sets of stacks are interned, and each set's transition
 * per byte is computed once and remembered, so following a token is a handful of array
 * reads once the grammar's states have been seen.
 *
 * Which tokens may come next: ob_grammar_matcher_allows asks about one token (the sampler
 * asks only about the tokens its chain can reach: engine/sampler.h), ob_grammar_matcher_mask
 * about the whole vocabulary, walking the vocabulary in byte order so that tokens sharing a
 * prefix share its walk (a trie in array form: ob_grammar_vocab, built once per model).
 *
 * JSON schema -> GBNF text (schema.c, with pattern.c for the regex subset of "pattern").
 *
 * Ownership: an ob_grammar is immutable once built and may be shared by matchers; a
 * matcher borrows its grammar and vocabulary, which must outlive it. No global state. */
#ifndef OB_GRAMMAR_GRAMMAR_H
#define OB_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "onebit.h"

typedef struct ob_grammar ob_grammar;

/* Parses and compiles GBNF text whose start rule is "root". A syntax error, an undefined
 * rule, left recursion or a grammar over the size limit is OB_ERR_FORMAT with a message
 * naming the line and column. */
ob_status ob_grammar_parse(const char *text, size_t len, ob_grammar **out, char *err, size_t err_len);
void ob_grammar_free(ob_grammar *g);

/* JSON schema -> GBNF text (malloc'd, NUL-terminated). An empty top-level schema ({} or
 * NULL) means any JSON object (llama-server's json_object); nested, {} is any value.
 * Unsupported or invalid schemas are OB_ERR_UNSUPPORTED / OB_ERR_FORMAT with a message. */
ob_status ob_grammar_from_schema(const json_t *schema, char **out, char *err, size_t err_len);

/* ---- a grammar as a command line gives it ------------------------------------------------ */

/* llama.cpp's four ways (llama-server's and llama-cli's flags): --grammar GBNF,
 * --grammar-file FILE, -j / --json-schema SCHEMA, --json-schema-file FILE; at most one. */
typedef struct ob_grammar_flags {
    const char *gbnf, *gbnf_file, *schema, *schema_file; /* borrowed (argv) */
} ob_grammar_flags;

/* If a is one of the four flags, takes its value v into f and returns 2 (flag and value
 * consumed); 0 if a is not one; -1 (err written) if v is missing. */
int ob_grammar_flags_parse(const char *a, const char *v, ob_grammar_flags *f, char *err, size_t err_len);
/* The grammar f gives as GBNF text in *out (malloc'd; NULL when none is given), read,
 * converted and compiled once here so that a bad one is an error naming its flag. */
ob_status ob_grammar_flags_gbnf(const ob_grammar_flags *f, char **out, char *err, size_t err_len);
/* Usage lines of the four flags. */
extern const char *ob_grammar_flags_help;

/* ---- writing GBNF ------------------------------------------------------------------------ */

/* Growable NUL-terminated text. oom is sticky: appends after a failure do nothing. */
typedef struct ob_gtext { char *s; size_t n, cap; bool oom; } ob_gtext;
void ob_gtext_add(ob_gtext *t, const char *s, size_t n);
void ob_gtext_puts(ob_gtext *t, const char *s);
void ob_gtext_printf(ob_gtext *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a GBNF string literal (quotes included), every byte outside printable ASCII and
 * the quote and backslash escaped. */
void ob_gtext_literal(ob_gtext *t, const char *s, size_t n);

/* A grammar put together from JSON schemas and rules of the caller's own (a tool call's
 * markup around each tool's parameters). Rule names are made unique from hints; the
 * returned names are owned by the builder. A schema's rule takes the whitespace after
 * its value, as in ob_grammar_from_schema; its $refs resolve within that schema. */
typedef struct ob_grammar_builder ob_grammar_builder;
ob_grammar_builder *ob_grammar_builder_new(void);
void ob_grammar_builder_free(ob_grammar_builder *b);
/* The rule of a schema's value ({} or NULL: any JSON object); NULL with err on a schema
 * the converter refuses (OB_ERR_UNSUPPORTED / OB_ERR_FORMAT in *st). */
const char *ob_grammar_builder_schema(ob_grammar_builder *b, const json_t *schema, const char *hint,
                                      ob_status *st, char *err, size_t err_len);
/* One of the fixed rules: "ws" (optional whitespace), "string", "value", "object", ...;
 * NULL for an unknown name or when out of memory. */
const char *ob_grammar_builder_prim(ob_grammar_builder *b, const char *what);
/* A rule of the caller's: body is GBNF over names returned before. NULL when out of memory. */
const char *ob_grammar_builder_rule(ob_grammar_builder *b, const char *hint, const char *body);
/* The whole grammar, "root ::= root_body" first; *out malloc'd. */
ob_status ob_grammar_builder_finish(ob_grammar_builder *b, const char *root_body, char **out, char *err,
                                    size_t err_len);

/* ---- tokens ---------------------------------------------------------------------------- */

enum ob_gtok_kind {
    OB_GTOK_TEXT = 0,   /* its bytes must follow the grammar */
    OB_GTOK_END = 1,    /* end of generation: allowed where the grammar may end */
    OB_GTOK_NEVER = 2,  /* control tokens, empty pieces: never allowed */
};

/* The vocabulary's token bytes (copied), sorted by bytes with the common prefix of each
 * token with the one before it. kind: [n] ob_gtok_kind. NULL when out of memory. */
typedef struct ob_grammar_vocab ob_grammar_vocab;
ob_grammar_vocab *ob_grammar_vocab_new(int n, const char *const *bytes, const uint32_t *lens, const uint8_t *kind);
void ob_grammar_vocab_free(ob_grammar_vocab *v);
int ob_grammar_vocab_size(const ob_grammar_vocab *v);

/* ---- matching --------------------------------------------------------------------------- */

typedef struct ob_grammar_matcher ob_grammar_matcher;

/* A matcher at the start of the grammar. v may be NULL (bytes only: no token calls);
 * end_tokens: whether OB_GTOK_END tokens may be allowed at all (false for ignore_eos).
 * NULL when out of memory; a grammar past the matcher's limits at its very start gives a
 * matcher whose ob_grammar_matcher_error says so. */
ob_grammar_matcher *ob_grammar_matcher_new(const ob_grammar *g, const ob_grammar_vocab *v, bool end_tokens);
void ob_grammar_matcher_free(ob_grammar_matcher *m);

/* Follows n bytes: true and advanced if the grammar allows them, else false and unchanged. */
bool ob_grammar_matcher_accept_bytes(ob_grammar_matcher *m, const char *s, size_t n);
/* Whether the text so far is a complete sentence of the grammar. */
bool ob_grammar_matcher_can_end(const ob_grammar_matcher *m);
/* Whether token tok may come next. */
bool ob_grammar_matcher_allows(ob_grammar_matcher *m, int32_t tok);
/* allowed[i] = 1 for every token that may come next, else 0 (vocabulary size bytes);
 * returns how many. */
int ob_grammar_matcher_mask(ob_grammar_matcher *m, uint8_t *allowed);
/* Follows a token's bytes (an END token ends the text); false if not allowed. */
bool ob_grammar_matcher_accept_token(ob_grammar_matcher *m, int32_t tok);
/* Non-NULL once the grammar's parse states outgrew the matcher's limits (an ambiguous
 * grammar): nothing is allowed after that. */
const char *ob_grammar_matcher_error(const ob_grammar_matcher *m);

#endif
