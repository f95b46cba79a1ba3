/* A grammar as the sampler's token filter (sampler.h): the model's vocabulary laid out for
 * the matcher, and the matcher's questions as the filter's. */
#include "engine/sampler.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>

static bool gm_allows(void *ud, int32_t tok) { return ob_grammar_matcher_allows(ud, tok); }
static int gm_mask(void *ud, uint8_t *allowed) { return ob_grammar_matcher_mask(ud, allowed); }

ob_token_filter ob_grammar_filter(ob_grammar_matcher *m) { return (ob_token_filter){gm_allows, gm_mask, m}; }

ob_grammar_vocab *ob_grammar_vocab_of(const ob_tokenizer *tok, int n_vocab, bool special) {
    int n = n_vocab, nt = ob_tokenizer_n_vocab(tok);
    const char **bytes = calloc((size_t)(n > 0 ? n : 1), sizeof *bytes);
    uint32_t *lens = calloc((size_t)(n > 0 ? n : 1), sizeof *lens);
    uint8_t *kind = malloc((size_t)(n > 0 ? n : 1)), *control = calloc((size_t)(nt > 0 ? nt : 1), 1);
    ob_grammar_vocab *v = NULL;
    if (bytes && lens && kind && control) {
        ob_tokenizer_mark_control(tok, control);
        for (int i = 0; i < n; i++) {
            size_t len = 0;
            bytes[i] = i < nt ? ob_token_piece(tok, i, &len) : "";
            lens[i] = (uint32_t)len;
            kind[i] = i >= nt ? OB_GTOK_NEVER : ob_token_is_eog(tok, i) ? OB_GTOK_END
                      : control[i] && !special ? OB_GTOK_NEVER : OB_GTOK_TEXT;
        }
        v = ob_grammar_vocab_new(n, bytes, lens, kind);
    }
    free(bytes);
    free(lens);
    free(kind);
    free(control);
    return v;
}
