/* Tokenizers: byte-level BPE (GPT-2 / Llama 3 / Qwen2-3 / DeepSeek V3 pre-tokenizers via
 * PCRE2), SentencePiece-style BPE with byte fallback (Gemma 3, Llama 2), WordPiece (BERT).
 * Built from GGUF metadata (tokenizer.ggml.*) or a Hugging Face tokenizer.json.
 * The public encode/decode entry points are in include/onebit.h. */
#ifndef OB_TOKENIZER_TOKENIZER_H
#define OB_TOKENIZER_TOKENIZER_H

#include "format/gguf.h"

ob_status ob_tokenizer_from_gguf(const ob_gguf *g, ob_tokenizer **out, char *err, size_t err_len);
/* path: a tokenizer.json; a tokenizer_config.json beside it is read for bos/eos/add_bos. */
ob_status ob_tokenizer_from_json(const char *path, ob_tokenizer **out, char *err, size_t err_len);
void ob_tokenizer_free(ob_tokenizer *t);

/* control[i] = 1 for the tokens that are not text (control / special added tokens, the
 * unknown token), else 0; control has n_vocab entries. */
void ob_tokenizer_mark_control(const ob_tokenizer *t, uint8_t *control);

/* Streaming decode: holds back an incomplete UTF-8 sequence until it completes, so a
 * stream never carries half a character. */
typedef struct ob_detok { unsigned char pend[8]; int n_pend; } ob_detok;
/* Appends the text of token id to out (cap bytes); returns bytes written, or the bytes
 * needed if cap is too small (nothing written then). */
size_t ob_detok_push(const ob_tokenizer *t, ob_detok *d, int32_t id, char *out, size_t cap);
/* Flushes what is held back (as U+FFFD for an invalid tail). */
size_t ob_detok_flush(ob_detok *d, char *out, size_t cap);

/* Encodes n_texts texts in one call (for bindings and benchmarks: one crossing of the
 * language boundary). Token ids of text i go to ids[offsets[i] .. offsets[i+1]) when the
 * total fits in cap; offsets has n_texts + 1 entries. Returns the total, or -1 on error. */
int64_t ob_tokenize_batch(const ob_tokenizer *t, int n_texts, const char *const *texts, const size_t *lens,
                          int32_t *ids, int64_t cap, int64_t *offsets, bool add_special, bool parse_special);

#endif
