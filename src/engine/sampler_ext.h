/* The samplers llama-server has beyond the plain chain (issue #31), for sampler.c: DRY
 * (a penalty on tokens that would extend a repeat of earlier text), locally typical
 * sampling, XTC (exclude the top choices) and Mirostat 1 and 2. sampler.c keeps the plain
 * chain (logit bias, penalties, core/sample_pick.c) and calls in here only when one of
 * these is on: DRY after the penalties, the draw through ob_sampler_ext_pick.
 *
 * The chain, as ob_sampler_params documents it: top-k, typical-p, min-p, temperature,
 * top-p, XTC, the draw (our min-p and top-p read the distribution at temperature, as
 * they always have here; typical-p and XTC read it before, as llama-server's do).
 * Mirostat replaces it all after temperature. */
#ifndef OB_ENGINE_SAMPLER_EXT_H
#define OB_ENGINE_SAMPLER_EXT_H

#include "onebit.h"

typedef struct ob_sampler_ext ob_sampler_ext;

/* Whether p turns on any of these samplers (else sampler.c needs no ob_sampler_ext). */
bool ob_sampler_ext_wanted(const ob_sampler_params *p);
/* Copies what it needs of p (the DRY breakers included). NULL when out of memory. */
ob_sampler_ext *ob_sampler_ext_new(const ob_sampler_params *p, int n_vocab);
void ob_sampler_ext_free(ob_sampler_ext *x);
/* DRY's history emptied, Mirostat's mu back to 2 tau, XTC's stream back to its seed. */
void ob_sampler_ext_reset(ob_sampler_ext *x);
/* Records a token in DRY's history. */
void ob_sampler_ext_accept(ob_sampler_ext *x, int32_t tok);

/* DRY's penalties for the next token: *tok[i] loses *val[i] (pointers into x, valid until
 * the next call). Returns how many; 0 when DRY is off. */
int ob_sampler_ext_dry(ob_sampler_ext *x, const int32_t **tok, const float **val);
/* Whether the draw goes through ob_sampler_ext_pick (typical-p, XTC or Mirostat at a
 * temperature). */
bool ob_sampler_ext_draws(const ob_sampler_ext *x);
/* Whether the device sampler could stand in for the host (no DRY, and no draw here). */
bool ob_sampler_ext_device_ok(const ob_sampler_ext *x);
/* Whether the chain reads only the candidates sampler.c's lazy search under a filter
 * finds (the top_k best when top_k_on, else those above min-p's floor): Mirostat reads the
 * whole distribution, and so does typical-p without top-k. */
bool ob_sampler_ext_lazy_ok(const ob_sampler_ext *x, bool top_k_on);
/* The draw over w[0..n) (the vocabulary, or the allowed tokens in id order), temperature
 * > 0, with the uniform u: an index into w. Moves Mirostat's mu and XTC's stream. idx:
 * scratch of n ids. */
int32_t ob_sampler_ext_pick(ob_sampler_ext *x, const float *w, int n, double u, int32_t *idx);
/* Mirostat's mu now (2 tau before the first draw); NAN without Mirostat. */
float ob_sampler_ext_mu(const ob_sampler_ext *x);

/* The sampler's random stream (sampler.c): xoroshiro128+ seeded through splitmix64. */
uint64_t ob_sampler_rng_next(uint64_t *s);
void ob_sampler_rng_seed(uint64_t *s, uint64_t seed);

#endif
