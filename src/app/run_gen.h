/* Generation for `1bit run`: feeds tokens at the end of sequence 0 and streams the sampled
 * reply to stdout, plainly or with a draft model (-md), until an end-of-generation token,
 * the length cap, the end of the context or an interrupt. Shared by the -p completion
 * (cmd_run.c) and the terminal chat (run_chat.c). */
#ifndef OB_APP_RUN_GEN_H
#define OB_APP_RUN_GEN_H
#include "engine/spec.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"
#include <signal.h>

typedef struct ob_run_gen {
    ob_model *m;
    ob_context *c;
    ob_sampler *s;
    const ob_tokenizer *tok;
    int n_batch;             /* tokens per prefill pass: an interrupt is seen between passes */
    int n_past;              /* cells of sequence 0 in use */
    int32_t *hist;           /* [n_ctx] the tokens in sequence 0's cells [0, n_past) */
    const volatile sig_atomic_t *stop;  /* set (by a SIGINT handler) to stop; NULL: never */
    /* speculative decoding (-md): NULL spec = plain decoding */
    ob_spec *spec;
    int32_t *draft;          /* [n_max] proposals */
    int32_t *b_tok, *b_pos, *b_seq;  /* [n_max + 1] verification batch */
    int8_t *b_want;
    long n_drafted, n_accepted;
    /* a grammar (--grammar, -j): each reply follows it from its first token; NULL: none */
    ob_grammar *gram;
    ob_grammar_vocab *gv;
    ob_grammar_matcher *gm;  /* the reply's, made by its first ob_run_gen_reply */
} ob_run_gen;

/* Why a reply ended. */
typedef enum ob_run_end {
    OB_RUN_END_EOG,          /* the model's end-of-generation token, or the grammar's end */
    OB_RUN_END_CAP,          /* the length cap (-n) */
    OB_RUN_END_CTX,          /* the context is full */
    OB_RUN_END_STOP,         /* *stop was set */
    OB_RUN_END_ERROR,        /* a decode failed (its line printed) */
} ob_run_end;

/* A reply as it streams: its tokens and their text. One reply may span several
 * ob_run_gen_reply calls (the chat rebuilds the context when it fills and goes on); the
 * detokenizer state carries over so a character split across them comes out whole. */
typedef struct ob_run_reply {
    int32_t *ids;            /* [n_ids] tokens emitted (owned) */
    int n_ids, cap_ids;
    char *text;              /* [len] their text, NUL-terminated (owned) */
    size_t len, cap;
    ob_detok dt;
    int n_prompt;            /* prompt tokens decoded */
    double t_prompt, t_gen;  /* seconds */
} ob_run_reply;

/* Sets up g for model m and context c: the sampler and the token record. Returns
 * OB_ERR_NOMEM (g then holds what it got; ob_run_gen_free frees it). */
ob_status ob_run_gen_init(ob_run_gen *g, ob_model *m, ob_context *c, const ob_sampler_params *sp, int n_batch);
/* Adds speculative decoding with draft model dm (owned by the caller) of at most n_max
 * tokens a step; err gets the reason on failure. */
ob_status ob_run_gen_add_draft(ob_run_gen *g, ob_model *dm, const ob_spec_params *spp, char *err, size_t err_len);
/* Makes every reply follow GBNF text gbnf (checked before: grammar.h's
 * ob_grammar_flags_gbnf); err gets the reason on failure. */
ob_status ob_run_gen_set_grammar(ob_run_gen *g, const char *gbnf, char *err, size_t err_len);
void ob_run_gen_free(ob_run_gen *g);

/* Feeds toks [0, n) at cell g->n_past (n >= 1, and it must fit the context), then samples
 * and streams up to n_predict tokens, appending them to r. The pieces go to stdout as they
 * come; the caller ends the text with ob_run_reply_flush. Returns why it stopped. */
ob_run_end ob_run_gen_reply(ob_run_gen *g, const int32_t *toks, int n, int n_predict, ob_run_reply *r);
/* Ends the reply's text: what the detokenizer still holds goes to stdout and r->text. */
void ob_run_reply_flush(ob_run_reply *r);
void ob_run_reply_free(ob_run_reply *r);

/* Tokenizes text (special tokens parsed; BOS added when add_special and the model adds
 * it). Returns a malloc'd array of *n tokens, or NULL (out of memory). */
int32_t *ob_run_tokenize(const ob_tokenizer *t, const char *text, bool add_special, int *n);

#endif
