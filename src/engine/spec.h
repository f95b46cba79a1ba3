/* Speculative decoding with a draft model: a small model with the target's vocabulary
 * proposes up to n_max tokens greedily; the target runs all of them in one ob_decode (the
 * token it was about to feed, then the proposals, each wanting logits) and keeps the
 * longest prefix it agrees with.
 *
 * Verification (done by the caller, which owns the target's sampler): for i = 0..n_draft
 * sample the target's token t_i from row i with the usual sampler; emit t_i; continue only
 * if i < n_draft and t_i == draft[i]. Then truncate the target's sequence to hold the fed
 * token plus the accepted proposals.
 *
 * Why this is exact: every emitted token is drawn from the target's own distribution
 * given exactly the tokens emitted before it (the engine is batch invariant, so row i's
 * logits are those a one-token decode would give). Greedy output is therefore identical
 * to plain greedy decoding, and with a seed, sampled output is identical to plain
 * sampling with that seed (the sampler sees the same logits and the same history, and
 * draws its random numbers in the same order). The draft is greedy, so its distribution
 * is a point mass q = 1{x = d}: the standard rejection scheme (accept d with probability
 * min(1, p(d)/q(d)) = p(d), else draw from normalised max(0, p - q) = p without d) is
 * the same law as "draw t ~ p, accept if t == d", which is what the loop does.
 *
 * The draft keeps its own context (one sequence per target sequence) and a record of
 * the tokens in each of its sequences, so it re-feeds only what changed. */
#ifndef OB_ENGINE_SPEC_H
#define OB_ENGINE_SPEC_H

#include "onebit.h"

/* llama-server's --draft-max, --draft-min, --draft-p-min. */
typedef struct ob_spec_params {
    int n_max;       /* most tokens drafted per step (default 16) */
    int n_min;       /* a draft shorter than this is dropped (default 0) */
    float p_min;     /* stop drafting when the draft's top probability falls below (0.75) */
} ob_spec_params;

ob_spec_params ob_spec_default_params(void);

/* The draft must speak the target's vocabulary: same token count, same pieces, same
 * BOS/EOS. Fails with OB_ERR_UNSUPPORTED and a one-line reason otherwise. */
ob_status ob_spec_check_vocab(const ob_model *target, const ob_model *draft, char *err, size_t err_len);

typedef struct ob_spec ob_spec;

/* A draft context of n_seq sequences of n_ctx cells (the target's), n_batch tokens per
 * decode. The draft model stays owned by the caller and must outlive the ob_spec. */
ob_status ob_spec_new(ob_model *draft, const ob_spec_params *p, int n_seq, int n_ctx, int n_batch,
                      ob_spec **out, char *err, size_t err_len);
void ob_spec_free(ob_spec *s);
const ob_spec_params *ob_spec_params_of(const ob_spec *s);

/* One sequence to draft for. */
typedef struct ob_spec_seq {
    int seq;                 /* sequence id in the draft context (= the target's) */
    const int32_t *hist;     /* [n_hist] tokens in the target's KV of this sequence */
    int n_hist;
    int32_t last;            /* sampled, not yet fed to the target */
    int n_max;               /* most tokens to draft here (capped by the params' n_max) */
    int32_t *draft;          /* out: [n_max] proposals following last */
    int n_draft;             /* out */
} ob_spec_seq;

/* Drafts for n sequences together: each draft step is one ob_decode over all of them.
 * A failed draft decode leaves n_draft = 0 everywhere (decoding then just goes on without
 * proposals) and returns the status. */
ob_status ob_spec_draft(ob_spec *s, ob_spec_seq *seqs, int n, char *err, size_t err_len);

/* Forgets what the draft holds for a sequence (after the target's was cleared). */
void ob_spec_reset_seq(ob_spec *s, int seq);

#endif
