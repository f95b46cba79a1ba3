/* Speculative decoding on the tiny fixture models: two sequences drafted together and
 * verified in one target batch give exactly the tokens of plain one-token decoding, for
 * greedy and for seeded sampling, with the target itself as draft (every proposal
 * accepted) and with another model of the same vocabulary (proposals rejected too). */
#include "testutil.h"
#include "engine/spec.h"
#include "core/common.h"

#include <string.h>

#define FIX "tests/fixtures/models/"
#define N_SEQ 2
#define N_PROMPT 12
#define N_GEN 24
#define N_CTX 96

static int32_t prompts[N_SEQ][N_PROMPT];

static ob_model *load(const char *path) {
    char err[256];
    ob_model *m = NULL;
    ob_model_params mp = ob_model_default_params();
    mp.n_threads = 2;
    if (ob_model_load(path, &mp, &m, err, sizeof err) != OB_OK) fprintf(stderr, "%s: %s\n", path, err);
    return m;
}

static ob_context *new_ctx(ob_model *m, int n_seq) {
    char err[256];
    ob_context_params cp = ob_context_default_params();
    cp.n_ctx = N_CTX;
    cp.n_seq = n_seq;
    cp.n_batch = 64;
    ob_context *c = NULL;
    if (ob_context_new(m, &cp, &c, err, sizeof err) != OB_OK) fprintf(stderr, "context: %s\n", err);
    return c;
}

static ob_sampler_params sampling(bool greedy, int seq) {
    ob_sampler_params sp = ob_sampler_default_params();
    sp.temperature = greedy ? 0.0f : 0.05f; /* low: samples often agree with the greedy draft */
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.seed = 99 + (uint64_t)seq;
    return sp;
}

/* Plain decoding of one sequence: prompt, then sample and feed one token at a time. */
static void plain(ob_model *m, int seq, bool greedy, int32_t *out) {
    ob_context *c = new_ctx(m, 1);
    ob_sampler_params sp = sampling(greedy, seq);
    ob_sampler *s = ob_sampler_new(&sp, 512);
    int32_t pos[N_PROMPT], sq[N_PROMPT] = {0};
    for (int i = 0; i < N_PROMPT; i++) pos[i] = i;
    ob_batch b = {N_PROMPT, prompts[seq], pos, sq, NULL};
    char err[256];
    CHECK(ob_decode(c, &b, err, sizeof err) == OB_OK);
    const float *lg = ob_get_logits(c, N_PROMPT - 1);
    for (int k = 0; k < N_GEN; k++) {
        out[k] = ob_sampler_sample(s, lg);
        int32_t p = N_PROMPT + k, z = 0;
        ob_batch nb = {1, &out[k], &p, &z, NULL};
        CHECK(ob_decode(c, &nb, err, sizeof err) == OB_OK);
        lg = ob_get_logits(c, 0);
    }
    ob_sampler_free(s);
    ob_context_free(c);
}

typedef struct { long drafted, accepted, max_draft; } stats;

/* Both sequences at once: draft for both, verify all proposals in one target decode. */
static void speculative(ob_model *m, ob_model *dm, const ob_spec_params *spp, bool greedy,
                        int32_t out[N_SEQ][N_GEN], stats *st) {
    char err[256];
    ob_context *c = new_ctx(m, N_SEQ);
    ob_spec *spec = NULL;
    CHECK(ob_spec_new(dm, spp, N_SEQ, N_CTX, 64, &spec, err, sizeof err) == OB_OK);
    ob_sampler *smp[N_SEQ];
    int32_t hist[N_SEQ][N_CTX], last[N_SEQ], draft[N_SEQ][32];
    int n_past[N_SEQ], n_out[N_SEQ];
    int32_t bt[64], bp[64], bs[64];
    int8_t bw[64];
    int n = 0;
    for (int q = 0; q < N_SEQ; q++) {
        ob_sampler_params sp = sampling(greedy, q);
        smp[q] = ob_sampler_new(&sp, 512);
        for (int i = 0; i < N_PROMPT; i++, n++) {
            bt[n] = prompts[q][i]; bp[n] = i; bs[n] = q; bw[n] = i == N_PROMPT - 1;
            hist[q][i] = prompts[q][i];
        }
        n_past[q] = N_PROMPT;
        n_out[q] = 0;
    }
    ob_batch b = {n, bt, bp, bs, bw};
    CHECK(ob_decode(c, &b, err, sizeof err) == OB_OK);
    for (int q = 0; q < N_SEQ; q++) {
        last[q] = ob_sampler_sample(smp[q], ob_get_logits(c, N_PROMPT * (q + 1) - 1));
        out[q][n_out[q]++] = last[q];
    }
    for (int guard = 0; guard < 4 * N_GEN; guard++) {
        ob_spec_seq sq[N_SEQ];
        int nq = 0;
        for (int q = 0; q < N_SEQ; q++) {
            if (n_out[q] >= N_GEN) continue;
            sq[nq++] = (ob_spec_seq){.seq = q, .hist = hist[q], .n_hist = n_past[q], .last = last[q],
                                     .n_max = N_GEN - n_out[q] - 1, .draft = draft[q]};
        }
        if (nq == 0) break;
        CHECK(ob_spec_draft(spec, sq, nq, err, sizeof err) == OB_OK);
        int row[N_SEQ];
        n = 0;
        for (int k = 0; k < nq; k++) {
            int q = sq[k].seq;
            CHECK(sq[k].n_draft <= sq[k].n_max && sq[k].n_draft <= spp->n_max);
            CHECK(sq[k].n_draft == 0 || sq[k].n_draft >= spp->n_min);
            if (sq[k].n_draft > st->max_draft) st->max_draft = sq[k].n_draft;
            row[k] = n;
            for (int i = 0; i <= sq[k].n_draft; i++, n++) {
                bt[n] = i == 0 ? last[q] : draft[q][i - 1];
                bp[n] = n_past[q] + i; bs[n] = q; bw[n] = 1;
            }
        }
        ob_batch vb = {n, bt, bp, bs, bw};
        CHECK(ob_decode(c, &vb, err, sizeof err) == OB_OK);
        for (int k = 0; k < nq; k++) {
            int q = sq[k].seq, nd = sq[k].n_draft;
            hist[q][n_past[q]++] = last[q];
            st->drafted += nd;
            for (int i = 0; i <= nd; i++) {
                int32_t t = ob_sampler_sample(smp[q], ob_get_logits(c, row[k] + i));
                out[q][n_out[q]++] = t;
                if (i == nd || t != draft[q][i]) { last[q] = t; break; }
                st->accepted++;
                hist[q][n_past[q]++] = t;
            }
            ob_seq_truncate(c, q, n_past[q]);
            CHECK(ob_seq_len(c, q) == n_past[q]);
        }
    }
    for (int q = 0; q < N_SEQ; q++) ob_sampler_free(smp[q]);
    ob_spec_free(spec);
    ob_context_free(c);
}

static void compare(ob_model *m, ob_model *dm, const ob_spec_params *spp, bool greedy, bool same, const char *what) {
    int32_t ref[N_SEQ][N_GEN], got[N_SEQ][N_GEN];
    for (int q = 0; q < N_SEQ; q++) plain(m, q, greedy, ref[q]);
    stats st = {0};
    speculative(m, dm, spp, greedy, got, &st);
    for (int q = 0; q < N_SEQ; q++)
        CHECKF(memcmp(ref[q], got[q], sizeof ref[q]) == 0, "%s: sequence %d differs from plain decoding", what, q);
    CHECK(ref[0][0] != ref[0][1] || ref[0][1] != ref[0][2] || ref[1][0] != ref[0][0]); /* not a constant stream */
    fprintf(stderr, "%s: %ld proposed, %ld accepted, longest %ld\n", what, st.drafted, st.accepted, st.max_draft);
    if (spp->n_min > spp->n_max) CHECK(st.drafted == 0);
    else CHECK(st.drafted > 0);
    if (same && greedy) CHECK(st.accepted == st.drafted);
    if (same && !greedy) CHECK(st.accepted > 0);
    if (!same && spp->n_min <= spp->n_max) CHECK(st.accepted < st.drafted);
}

int main(void) {
    ob_rng r;
    ob_rng_seed(&r, 4242);
    for (int q = 0; q < N_SEQ; q++)
        for (int i = 0; i < N_PROMPT; i++) prompts[q][i] = (int32_t)(ob_rng_u64(&r) % 510);
    ob_model *m = load(FIX "llama.gguf"), *same = load(FIX "llama.gguf"), *other = load(FIX "qwen3.gguf");
    CHECK(m && same && other);
    if (!m || !same || !other) return ob_test_done("spec");
    char err[256];
    CHECK(ob_spec_check_vocab(m, same, err, sizeof err) == OB_OK);
    CHECK(ob_spec_check_vocab(m, other, err, sizeof err) == OB_OK); /* the fixtures share one vocabulary */

    ob_spec_params spp = ob_spec_default_params();
    spp.p_min = 0; /* random tiny models are never confident: draft regardless */
    spp.n_max = 5;
    compare(m, same, &spp, true, true, "greedy, same model");
    compare(m, other, &spp, true, false, "greedy, other model");
    compare(m, same, &spp, false, true, "sampled, same model");
    compare(m, other, &spp, false, false, "sampled, other model");
    spp.n_max = 16;
    spp.n_min = 17;
    compare(m, other, &spp, true, false, "greedy, drafts dropped by n_min");

    ob_spec *bad = NULL;
    ob_spec_params neg = ob_spec_default_params();
    neg.p_min = 2.0f;
    CHECK(ob_spec_new(same, &neg, 1, N_CTX, 8, &bad, err, sizeof err) == OB_ERR_ARG && bad == NULL);
    ob_model_free(m);
    ob_model_free(same);
    ob_model_free(other);
    return ob_test_done("spec");
}
