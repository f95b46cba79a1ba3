/* onebit: the public C API of libonebit.
 *
 * Ownership: every ob_*_load / ob_*_new has a matching ob_*_free. Functions that can fail
 * return an ob_status and, where they take (err, err_len), write one line saying why. */
#ifndef ONEBIT_H
#define ONEBIT_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ob_status {
    OB_OK = 0,
    OB_ERR_IO = 1,          /* file missing, unreadable */
    OB_ERR_FORMAT = 2,      /* malformed input (GGUF, JSON, template, ...) */
    OB_ERR_UNSUPPORTED = 3, /* valid but not supported (architecture, type, op) */
    OB_ERR_NOMEM = 4,       /* over the memory budget or allocation failed */
    OB_ERR_ARG = 5,         /* bad argument from the caller */
    OB_ERR_CONTEXT = 6,     /* sequence would exceed the context */
    OB_ERR_DEVICE = 7,      /* compute device fault */
} ob_status;

const char *ob_status_str(ob_status st);
/* This build's name as llama.cpp names its builds: "b<commits>-<commit>" ("b0-unknown"
 * outside a git checkout). */
const char *ob_build_info(void);

/* True once a compute device of this process has faulted (an illegal access, a lost
 * device, no progress within the limit): work may still be running on it, and the
 * driver's own teardown at exit can wait for that forever, so the caller ends the
 * process with _exit once its output is flushed. */
bool ob_device_faulted(void);

/* Tensor element types. Ids match GGUF/ggml type ids so files are interchangeable. */
typedef enum ob_type {
    OB_TYPE_F32 = 0, OB_TYPE_F16 = 1, OB_TYPE_Q4_0 = 2, OB_TYPE_Q4_1 = 3,
    OB_TYPE_Q5_0 = 6, OB_TYPE_Q5_1 = 7, OB_TYPE_Q8_0 = 8, OB_TYPE_Q8_1 = 9,
    OB_TYPE_Q2_K = 10, OB_TYPE_Q3_K = 11, OB_TYPE_Q4_K = 12, OB_TYPE_Q5_K = 13,
    OB_TYPE_Q6_K = 14, OB_TYPE_Q8_K = 15, OB_TYPE_IQ2_XXS = 16, OB_TYPE_IQ2_XS = 17,
    OB_TYPE_IQ3_XXS = 18, OB_TYPE_IQ1_S = 19, OB_TYPE_IQ4_NL = 20, OB_TYPE_IQ3_S = 21,
    OB_TYPE_IQ2_S = 22, OB_TYPE_IQ4_XS = 23, OB_TYPE_I8 = 24, OB_TYPE_I16 = 25,
    OB_TYPE_I32 = 26, OB_TYPE_I64 = 27, OB_TYPE_F64 = 28, OB_TYPE_IQ1_M = 29,
    OB_TYPE_BF16 = 30, OB_TYPE_TQ1_0 = 34, OB_TYPE_TQ2_0 = 35, OB_TYPE_MXFP4 = 39,
    OB_TYPE_Q1_0 = 41,
    OB_TYPE_COUNT = 42,
} ob_type;

/* Name of a type ("Q4_K"), or NULL for an id that is not a type. */
const char *ob_type_name(ob_type t);
/* Parses a type name, case-insensitive. Returns false if unknown. */
bool ob_type_from_name(const char *name, ob_type *out);

/* Bytes of a row of n elements of type t; 0 if unknown type or n not a block multiple. */
size_t ob_type_row_size(ob_type t, int64_t n);
/* Elements per block of type t (1 for plain types); 0 if unknown. */
int64_t ob_type_block_size(ob_type t);
/* Reference dequantize / quantize of n elements (n a multiple of the block size).
 * ob_quantize returns bytes written, 0 if the type has no quantizer. */
ob_status ob_dequantize(ob_type t, const void *src, float *dst, int64_t n);
size_t ob_quantize(ob_type t, const float *src, void *dst, int64_t n);

/* ---- models ---------------------------------------------------------------------- */

typedef struct ob_model ob_model;
typedef struct ob_context ob_context;
typedef struct ob_tokenizer ob_tokenizer;
typedef struct ob_sampler ob_sampler;

typedef enum ob_device_kind {
    OB_DEVICE_AUTO = 0, OB_DEVICE_CPU = 1, OB_DEVICE_CUDA = 2, OB_DEVICE_VULKAN = 3,
} ob_device_kind;

/* RoPE scaling types; values match llama.cpp's llama_rope_scaling_type. */
typedef enum ob_rope_scaling {
    OB_ROPE_SCALING_UNSPECIFIED = -1, /* the file's */
    OB_ROPE_SCALING_NONE = 0, OB_ROPE_SCALING_LINEAR = 1, OB_ROPE_SCALING_YARN = 2, OB_ROPE_SCALING_LONGROPE = 3,
} ob_rope_scaling;

typedef struct ob_model_params {
    ob_device_kind device;
    int device_index;
    bool strict_device;      /* refuse to load if any node would leave the device */
    int n_threads;           /* CPU threads; 0 = all cores */
    size_t mem_budget;       /* bytes; 0 = no explicit budget (free memory of the device) */
    /* RoPE overrides, as llama-server's --rope-* and --yarn-* flags; the defaults
     * (ob_model_default_params) keep what the file says. */
    int rope_scaling;        /* ob_rope_scaling */
    float rope_freq_base;    /* 0: the file's */
    float rope_freq_scale;   /* 0: the file's (1 / rope.scaling.factor) */
    int yarn_orig_ctx;       /* 0: the file's original context */
    float yarn_ext_factor;   /* < 0: 1 for YaRN, else 0 */
    float yarn_attn_factor;  /* < 0: the file's, else YaRN's 0.1 ln(factor) + 1 */
    float yarn_beta_fast;    /* < 0: the file's, else 32 */
    float yarn_beta_slow;    /* < 0: the file's, else 1 */
    /* Batch-invariant kernels (--deterministic): a token's logits are bitwise the same
     * whatever else shares its batch and however the batch was formed, on every backend
     * (the CPU always is; the GPU backends then take one reduction order for every batch
     * size, at some cost in speed). */
    bool deterministic;
} ob_model_params;

ob_model_params ob_model_default_params(void);
ob_status ob_model_load(const char *path, const ob_model_params *params, ob_model **out,
                        char *err, size_t err_len);
void ob_model_free(ob_model *m);

typedef struct ob_model_info {
    const char *arch;        /* general.architecture */
    const char *name;        /* general.name or file name */
    int64_t n_params;
    uint64_t file_size;
    uint64_t weight_bytes;
    int n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ctx_train;
    const char *backend;     /* "cpu", "cuda", ... */
} ob_model_info;
void ob_model_get_info(const ob_model *m, ob_model_info *out);
/* Device memory the engine holds for the model: its weights (on a host-memory backend those
 * borrowed from the file's mapping, counted all the same) and the buffers of its contexts
 * (KV cache, recurrent state, scratch, inputs). *peak: the most at once since the load or
 * the last ob_model_memory_reset_peak. A backend's own working memory is not counted. */
void ob_model_memory(const ob_model *m, uint64_t *now, uint64_t *peak);
void ob_model_memory_reset_peak(ob_model *m);
/* The model's tokenizer (owned by the model). */
const ob_tokenizer *ob_model_tokenizer(const ob_model *m);
/* Chat template from metadata (tokenizer.chat_template), or NULL. */
const char *ob_model_chat_template(const ob_model *m);

/* ---- contexts ---------------------------------------------------------------------- */

/* KV cache element types: llama-server's -ctk / -ctv values. Quantized ones need head
 * sizes that hold whole blocks of 32. */
typedef enum ob_kv_type {
    OB_KV_F16 = 0, OB_KV_Q8_0 = 1, OB_KV_F32 = 2, OB_KV_BF16 = 3, OB_KV_Q4_0 = 4, OB_KV_Q4_1 = 5,
    OB_KV_Q5_0 = 6, OB_KV_Q5_1 = 7, OB_KV_IQ4_NL = 8,
    OB_KV_COUNT = 9,
} ob_kv_type;
/* Every cache type's name, for usage and error lines. */
#define OB_KV_TYPE_NAMES "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl"
/* A cache type's name as llama-server spells it ("q4_0"), or NULL for a value that is none. */
const char *ob_kv_type_name(ob_kv_type t);
/* Parses a cache type name, case-insensitive. Returns false if unknown. */
bool ob_kv_type_from_name(const char *name, ob_kv_type *out);
/* The tensor type a cache of type t holds (OB_TYPE_COUNT for a value that is none). */
ob_type ob_kv_type_tensor(ob_kv_type t);

typedef struct ob_context_params {
    int n_ctx;               /* total KV cells per sequence; 0 = min(train ctx, 4096) */
    int n_seq;               /* parallel sequences, each owning n_ctx cells */
    int n_batch;             /* max tokens per ob_decode call */
    ob_kv_type type_k, type_v;
    /* Embeddings: ob_decode pools each sequence of the batch into one vector (read with
     * ob_get_embeddings) instead of producing logits. Required for encoder-only models.
     * Each call then treats the batch's sequences as new (positions start at 0), and the
     * whole batch must fit in n_batch tokens. */
    bool embeddings;
    int pooling;             /* ob_pooling; OB_POOLING_DEFAULT = the model's own; NONE: each
                              * token's final hidden state (ob_get_embeddings_ith), not normalised */
    bool normalize;          /* L2-normalise the pooled vectors (not applied to rank scores) */
    /* Models with recurrent layers (ob_model_has_recurrent_state): checkpoints of a
     * sequence's state kept per sequence, in host memory (ob_seq_checkpoint_at); default 2 */
    int n_seq_checkpoints;
} ob_context_params;

/* Values match llama.cpp's pooling_type metadata. RANK: a cross-encoder's classification
 * head on the first token, giving one score per sequence. */
enum ob_pooling { OB_POOLING_DEFAULT = -1, OB_POOLING_NONE = 0, OB_POOLING_MEAN = 1, OB_POOLING_CLS = 2,
                  OB_POOLING_LAST = 3, OB_POOLING_RANK = 4 };

ob_context_params ob_context_default_params(void);
ob_status ob_context_new(ob_model *m, const ob_context_params *p, ob_context **out,
                         char *err, size_t err_len);
void ob_context_free(ob_context *c);
int ob_context_n_ctx(const ob_context *c);
/* Where the context's graphs run (its largest prefill and a one-token step, the most of
 * either): nodes the backend has no kernel for (run on the CPU reference under
 * strict_device = false; with strict placement the context is refused at the first one),
 * runs of consecutive nodes on one side (1: all on the device), the off nodes' op names. */
typedef struct ob_placement {
    int n_off_device;
    int n_splits;
    char off_ops[128];       /* "SSM_CONV, DELTA_NET"; "" when none */
} ob_placement;
void ob_context_placement(const ob_context *c, ob_placement *out);

/* A batch of tokens; each token belongs to a sequence at a position. Positions of one
 * sequence must be contiguous from that sequence's current length. */
typedef struct ob_batch {
    int n_tokens;
    const int32_t *token;
    const int32_t *pos;
    const int32_t *seq;
    const int8_t *want_logits; /* per token; NULL = only the last token of the batch */
} ob_batch;

/* Runs the model over the batch, appending to each sequence's KV cache. */
ob_status ob_decode(ob_context *c, const ob_batch *b, char *err, size_t err_len);
/* Decodes the batch and samples one token per logits row (the rows ob_get_logits would
 * give, in batch order) with samplers[row], writing out_tokens[row] and recording each
 * token in its sampler (ob_sampler_accept). When every sampler is device-eligible
 * (ob_sampler_device_ok), the batch fits one n_batch chunk and the backend runs the
 * SAMPLE op, sampling happens in the step's graph and only the tokens are downloaded;
 * otherwise it decodes and samples on the host. The tokens are the same either way.
 * After the device path, ob_get_logits returns NULL for the batch's rows. */
ob_status ob_decode_sample(ob_context *c, const ob_batch *b, ob_sampler *const *samplers, int32_t *out_tokens,
                           char *err, size_t err_len);
/* Logits of the i-th token of the last batch (i must have wanted logits); n_vocab floats. */
const float *ob_get_logits(ob_context *c, int i);
/* Pooled vector of sequence seq from the last batch of an embeddings context
 * (ob_context_n_embd floats), or NULL if seq was not in it. */
const float *ob_get_embeddings(ob_context *c, int seq);
/* Per-token embeddings (an embeddings context with OB_POOLING_NONE): the final hidden
 * state of the i-th token of the last batch (ob_context_n_embd floats), or NULL. */
const float *ob_get_embeddings_ith(ob_context *c, int i);
/* Floats per pooled vector: n_embd, or the rank head's outputs when pooling is RANK. */
int ob_context_n_embd(const ob_context *c);
/* Relevance score (the rank head's first output) of sequence seq; NAN if none. */
float ob_get_rank_score(ob_context *c, int seq);
/* The model's own pooling (ob_pooling), OB_POOLING_NONE for a plain decoder. */
int ob_model_pooling(const ob_model *m);
/* Forgets positions >= pos of a sequence (pos = 0 clears it). A model with recurrent layers
 * (Qwen3.5, LFM2) holds per sequence a state that cannot be cut back: the sequence goes back
 * to its latest checkpoint at or before pos (ob_seq_checkpoint_at), or to 0, and the caller
 * decodes the tokens from ob_seq_len on again. */
void ob_seq_truncate(ob_context *c, int seq, int pos);
int ob_seq_len(const ob_context *c, int seq);
/* Whether the model has recurrent layers (issue #33), whose per-sequence state makes
 * ob_seq_truncate fall back to checkpoints or to 0 (so speculative decoding, which cuts a
 * rejected draft off, does not apply). */
bool ob_model_has_recurrent_state(const ob_model *m);
/* Asks the context to keep the recurrent state of seq when a later ob_decode brings the
 * sequence to length pos (the batch is run in two passes there if it must be): a point
 * ob_seq_truncate can come back to, as long as the tokens before pos stay the same. One
 * request per sequence (a new one replaces it); the oldest of the sequence's
 * n_seq_checkpoints is overwritten. No effect without recurrent layers or checkpoints. */
void ob_seq_checkpoint_at(ob_context *c, int seq, int pos);
/* Writes sequence seq's cache (every attention layer's K and V cells, the recurrent state)
 * and its tokens (n_tokens: exactly ob_seq_len, the tokens the cells hold) to path, through
 * path.tmp renamed over it. *n_bytes: the file's size. */
ob_status ob_seq_save_file(ob_context *c, int seq, const int32_t *tokens, int n_tokens, const char *path,
                           size_t *n_bytes, char *err, size_t err_len);
/* Reads a file ob_seq_save_file wrote (same model shape and cache types, or an error) into
 * sequence seq, whose earlier contents and checkpoints are then gone. A file refused before
 * its cells are read (missing, not a saved sequence, another model's) leaves the sequence as
 * it was; one cut short or damaged leaves it empty.
 * *tokens (malloc'd, the caller frees) and *n_tokens: what the sequence now holds. */
ob_status ob_seq_load_file(ob_context *c, int seq, const char *path, int32_t **tokens, int *n_tokens, size_t *n_bytes,
                           char *err, size_t err_len);

/* ---- tokenizer ----------------------------------------------------------------------- */

/* Encodes UTF-8 text. Returns number of tokens (may exceed cap: then call again with a
 * bigger buffer), or -1 on error. add_special: add BOS/EOS as metadata says.
 * parse_special: match special-token strings in the text. */
int ob_tokenize(const ob_tokenizer *t, const char *text, size_t len, int32_t *ids, int cap,
                bool add_special, bool parse_special);
/* Bytes of one token's piece (raw bytes, possibly a partial UTF-8 sequence). */
const char *ob_token_piece(const ob_tokenizer *t, int32_t id, size_t *len);
int ob_token_bos(const ob_tokenizer *t);
int ob_token_eos(const ob_tokenizer *t);
bool ob_token_is_eog(const ob_tokenizer *t, int32_t id);
int ob_tokenizer_n_vocab(const ob_tokenizer *t);

/* ---- sampling ------------------------------------------------------------------------ */

typedef struct ob_sampler_params {
    float temperature;       /* <= 0: greedy */
    int top_k;               /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off */
    float presence_penalty, frequency_penalty;
    int penalty_last_n;      /* window for penalties; 0 = off, -1 = whole history */
    uint64_t seed;
    int n_logit_bias;
    const int32_t *logit_bias_tok;
    const float *logit_bias_val;
    /* llama-server's other samplers (issue #31), off by default. The chain: logit bias,
     * penalties, DRY, top-k, typical-p, min-p, temperature, top-p, XTC, the draw; typical-p
     * and XTC read the distribution before temperature, as llama-server's do. Greedy
     * (temperature <= 0) stays the best token after bias, penalties and DRY. */
    float typical_p;         /* locally typical sampling (Meister et al.); >= 1: off */
    float xtc_probability;   /* XTC: chance per token of cutting the top choices; <= 0: off */
    float xtc_threshold;     /* XTC: the tokens at least this likely go, but the least likely
                              * of them; > 0.5: off */
    int mirostat;            /* 0 off; 1 Mirostat, 2 Mirostat 2.0 (Basu et al.): after logit
                              * bias and temperature, in place of the penalties, DRY and the
                              * truncation samplers, as llama-server runs them */
    float mirostat_tau;      /* the target surprise, in bits */
    float mirostat_eta;      /* mu's learning rate */
    float dry_multiplier;    /* DRY: a token that would extend a repeat of n >= allowed_length
                              * tokens loses multiplier * base^(n - allowed_length); 0: off */
    float dry_base;          /* < 1: off */
    int dry_allowed_length;
    int dry_penalty_last_n;  /* tokens DRY looks back over; 0: off, -1: the whole history (to 2^20) */
    int n_dry_breakers;      /* token sequences no repeat may run across (ob_dry_breakers_tokenize) */
    const int32_t *dry_breaker_len; /* [n_dry_breakers] tokens in each: 1 to 21 (others ignored) */
    const int32_t *dry_breaker_tok; /* the sequences end to end */
} ob_sampler_params;

/* DRY's sequence breakers as text, the way llama-server's --dry-sequence-breaker and a
 * request's dry_sequence_breakers give them (the strings are borrowed). */
#define OB_DRY_MAX_BREAKERS 32
typedef struct ob_dry_breaker_text {
    bool set;                /* false: llama-server's defaults "\n", ":", "\"", "*" */
    int n;
    const char *s[OB_DRY_MAX_BREAKERS];
} ob_dry_breaker_text;
/* The breakers as token sequences, made the way llama.cpp makes them: a token whose text
 * holds a breaker is a sequence of its own; a token whose text ends with the start of one
 * is followed by the tokens of the rest (at most 20). Breakers are cut to 40 bytes. out's
 * arrays are malloc'd (ob_dry_breakers_free); n = 0 and no arrays when there are none.
 * text NULL: the defaults. */
typedef struct ob_dry_breakers {
    int n;
    int32_t *len, *tok;      /* as ob_sampler_params' dry_breaker_len and dry_breaker_tok */
} ob_dry_breakers;
ob_status ob_dry_breakers_tokenize(const ob_tokenizer *t, const ob_dry_breaker_text *text, ob_dry_breakers *out);
void ob_dry_breakers_free(ob_dry_breakers *b);
/* Whether the params turn DRY on (so its breakers are worth making). */
bool ob_sampler_dry_on(const ob_sampler_params *p);

ob_sampler_params ob_sampler_default_params(void);
ob_sampler *ob_sampler_new(const ob_sampler_params *p, int n_vocab);
void ob_sampler_free(ob_sampler *s);
/* Samples from logits (not modified); records the token in the penalty history. */
int32_t ob_sampler_sample(ob_sampler *s, const float *logits);
void ob_sampler_accept(ob_sampler *s, int32_t tok);
void ob_sampler_reset(ob_sampler *s);
/* The next uniform draw in [0, 1) (a multiple of 2^-24) of the sampler's stream: the one
 * ob_sampler_sample would use for its next non-greedy token. */
float ob_sampler_next_uniform(ob_sampler *s);
/* Whether the sampler can run on the device (ob_decode_sample): greedy, or temperature with
 * top_k in 1..1024; no penalties, no logit bias, no DRY, and at a temperature no typical-p,
 * XTC or Mirostat. */
bool ob_sampler_device_ok(const ob_sampler *s);
/* The device sampler's 8 per-row floats (temperature, top_k, top_p, min_p, u, n_vocab, 0, 0);
 * draws u from the stream when not greedy, exactly as ob_sampler_sample would. */
void ob_sampler_device_params(ob_sampler *s, float *params);

#ifdef __cplusplus
}
#endif
#endif
