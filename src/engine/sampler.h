/* Sampling under a token constraint (a grammar: src/grammar/grammar.h). The result is
 * exactly what ob_sampler_sample gives on logits whose disallowed entries were set to
 * -inf before any other step (logit bias, penalties, DRY, top-k, typical-p, min-p,
 * temperature, top-p, XTC and the draw, in that order, or Mirostat), but only the tokens
 * the chain can reach are asked about: the best few by adjusted logit until greedy has its
 * first allowed token, top-k its k, or min-p everything above its floor. With neither
 * top-k nor min-p, with Mirostat or typical-p without top-k (they read the whole
 * distribution), or when so few of the best are allowed that the search would go past
 * 1,024 candidates, the whole vocabulary is masked at once. The draw is then made over the allowed tokens alone, in id order:
 * the disallowed ones would weigh 0 in every sum, so it picks the same token. */
#ifndef OB_ENGINE_SAMPLER_H
#define OB_ENGINE_SAMPLER_H

#include "onebit.h"
#include "grammar/grammar.h"

typedef struct ob_token_filter {
    bool (*allows)(void *ud, int32_t tok);   /* whether tok may come next */
    int (*mask)(void *ud, uint8_t *allowed); /* all tokens at once ([n_vocab] 0/1); returns the count */
    void *ud;
} ob_token_filter;

/* Samples a token the filter allows and records it (ob_sampler_accept); -1 when the
 * filter allows none (nothing is recorded then). */
int32_t ob_sampler_sample_filtered(ob_sampler *s, const float *logits, const ob_token_filter *f);

/* The filter a grammar matcher gives (the matcher borrowed: it must outlive the filter). */
ob_token_filter ob_grammar_filter(ob_grammar_matcher *m);

/* The vocabulary's token bytes for grammar matchers, n_vocab entries (the logits' count):
 * ids the tokenizer lacks (a model with padded logits) are never text, end-of-generation
 * tokens end the text, and control tokens are never allowed unless special (then they are
 * their text). NULL when out of memory. Built once per model by its user. */
ob_grammar_vocab *ob_grammar_vocab_of(const ob_tokenizer *tok, int n_vocab, bool special);

/* Mirostat's mu (the surprise it aims the truncation at), NAN without Mirostat. */
float ob_sampler_mirostat_mu(const ob_sampler *s);

#endif
