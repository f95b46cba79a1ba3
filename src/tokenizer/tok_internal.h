/* Private to src/tokenizer/: the tokenizer object and the functions the model files
 * (bpe.c, wordpiece.c), the pre-tokenizer (pretok.c) and the loaders share. */
#ifndef OB_TOKENIZER_TOK_INTERNAL_H
#define OB_TOKENIZER_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include "tokenizer/tokenizer.h"

enum ob_tok_model { OB_TOK_BPE = 0, OB_TOK_WORDPIECE = 1, OB_TOK_UNIGRAM = 2 };
/* How a BPE picks the next merge: by rank in a merges list, or by the score of the
 * merged token (SentencePiece vocabularies from GGUF, which carry no merges). */
enum ob_tok_merge_mode { OB_TOK_MERGE_RANK = 0, OB_TOK_MERGE_SCORE = 1 };
enum ob_tok_norm { OB_TOK_NORM_NONE = 0, OB_TOK_NORM_NFC = 1, OB_TOK_NORM_SPACE_TO_LOWBAR = 2,
                   OB_TOK_NORM_BERT = 3 };
enum ob_tok_dec { OB_TOK_DEC_RAW = 0, OB_TOK_DEC_BYTELEVEL = 1, OB_TOK_DEC_SPM = 2,
                  OB_TOK_DEC_WORDPIECE = 3 };

#define OB_TOK_MAX_RE 4
/* Unigram normalizer steps, applied in the order of the tokenizer.json Sequence. */
enum ob_tok_ugm_norm { OB_TOK_UGM_NFC = 1, OB_TOK_UGM_NFKC, OB_TOK_UGM_STRIP_LEFT, OB_TOK_UGM_STRIP_RIGHT,
                       OB_TOK_UGM_RUNS_TO_SPACE, OB_TOK_UGM_RUNS_TO_LOWBAR, OB_TOK_UGM_SPACE_TO_LOWBAR,
                       OB_TOK_UGM_SPM_WS, OB_TOK_UGM_NMT_NFKC };
#define OB_TOK_UGM_MAX_NORM 8

typedef struct ob_tok_added {
    char *text; uint32_t len;
    int32_t id;
    bool special, lstrip, rstrip;
} ob_tok_added;

/* Byte trie over the added tokens: longest match at a position in O(match length). */
typedef struct ob_tok_trie_node {
    int32_t child, sibling;  /* first child / next sibling node index, -1 = none */
    int32_t added;           /* index into added[] ending here, -1 = none */
    uint8_t byte;
} ob_tok_trie_node;

/* One entry of the merges hash: pair (a, b) -> rank and merged id. */
typedef struct ob_tok_merge { uint64_t key; int32_t rank, res; } ob_tok_merge;

struct ob_tokenizer {
    int model, merge_mode, norm, dec;
    int32_t n_vocab;
    char **tok; uint32_t *tok_len;     /* [n_vocab] vocabulary strings, model form */
    char **dec_str; uint32_t *dec_len; /* [n_vocab] decoded bytes of each token */
    float *score;                      /* [n_vocab] SentencePiece scores, or NULL */
    int32_t *vh; uint32_t vh_mask;     /* open-addressing hash: string -> id (-1 empty) */
    ob_tok_merge *mh; uint32_t mh_mask;/* open-addressing hash of merges (key 0 empty) */
    bool byte_level;                   /* GPT-2 byte <-> unicode mapping on the symbols */
    bool byte_fallback;                /* <0xXX> tokens for characters not in vocab */
    bool ignore_merges;                /* a whole pre-token found in vocab wins outright */
    bool add_prefix_space;             /* SentencePiece dummy prefix "▁" */
    bool prefix_every_segment;         /* HF Prepend: every text stretch, not only the first */
    bool bl_add_prefix_space;          /* ByteLevel pre-tokenizer add_prefix_space */
    int32_t byte_id[256];              /* byte-level symbol / byte-fallback token of a byte */
    int32_t unk_id;
    bool fuse_unk;
    /* Pre-tokenizer: Split(Isolated) regexes applied in sequence. */
    int n_re;
    pcre2_code *re[OB_TOK_MAX_RE];
    bool bert_pretok;
    /* WordPiece */
    char wp_prefix[16]; int wp_max_chars;
    bool bert_lower, bert_strip_accents, bert_chinese, bert_clean;
    /* Added / special tokens */
    ob_tok_added *added; int n_added;
    ob_tok_trie_node *trie; int n_trie, cap_trie;
    bool *is_added;                    /* [n_vocab] */
    /* Unigram (unigram.c): Viterbi over vocabulary pieces scored by log-probability */
    double *ugm_score;                 /* [n_vocab] piece scores (f64, as HF keeps them) */
    double ugm_unk_score;              /* cost of one unknown character: min score - 10 */
    ob_tok_trie_node *ugm_trie; int32_t n_ugm_trie, cap_ugm_trie; /* .added = vocab id */
    int32_t ugm_root[256];             /* root's child per first byte (-1 none) */
    uint8_t ugm_norm[OB_TOK_UGM_MAX_NORM]; int n_ugm_norm;
    bool ugm_metaspace;                /* Metaspace pre-tokenizer: " " -> "▁" */
    int ugm_prepend;                   /* Metaspace prepend scheme: 0 never, 1 first, 2 always */
    bool ugm_split;                    /* Metaspace split: one Viterbi per "▁word" */
    /* Special ids and flags (-1 = none) */
    int32_t bos, eos, pad, sep;
    bool add_bos, add_eos;
    int32_t eog[16]; int n_eog;
};

/* Growable id list used during encode. */
typedef struct ob_tok_ids { int32_t *v; size_t n, cap; bool oom; } ob_tok_ids;
void ob_tok_ids_push(ob_tok_ids *ids, int32_t id);

/* Scratch reused across pieces of one encode call (never shared between threads). */
typedef struct ob_tok_scratch {
    char *buf; size_t cap;            /* byte-level string / normalization output */
    char *buf2; size_t cap2;
    void *sym; size_t sym_cap;        /* BPE symbols */
    void *heap; size_t heap_cap;      /* BPE merge queue */
    pcre2_match_data *md[OB_TOK_MAX_RE];
    bool oom;
} ob_tok_scratch;
bool ob_tok_reserve(void **p, size_t *cap, size_t need);

/* ---- tokenizer.c: building blocks shared by the loaders ---- */
ob_tokenizer *ob_tok_new(void);
/* Takes the strings (copied); builds the vocab hash. */
ob_status ob_tok_set_vocab(ob_tokenizer *t, int32_t n, const char *const *strs, const uint32_t *lens,
                           char *err, size_t err_len);
int32_t ob_tok_find(const ob_tokenizer *t, const char *s, size_t len);
ob_status ob_tok_add_merge(ob_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen,
                           int32_t rank, char *err, size_t err_len);
ob_status ob_tok_merges_init(ob_tokenizer *t, size_t n_merges, char *err, size_t err_len);
ob_status ob_tok_add_added(ob_tokenizer *t, const char *s, size_t len, int32_t id, bool special,
                           bool lstrip, bool rstrip, char *err, size_t err_len);
/* Fills byte_id[], dec_str[] and eog[] once vocab, mode and specials are known. */
ob_status ob_tok_finish(ob_tokenizer *t, char *err, size_t err_len);
void ob_tok_add_eog(ob_tokenizer *t, int32_t id);

/* ---- pretok.c ---- */
/* Compiles a Split regex (UTF + UCP, JIT). */
ob_status ob_tok_add_regex(ob_tokenizer *t, const char *pattern, size_t len, char *err, size_t err_len);
/* Named pre-tokenizer presets (GGUF tokenizer.ggml.pre), false if unknown. */
ob_status ob_tok_set_preset(ob_tokenizer *t, const char *pre, char *err, size_t err_len);
extern const char ob_tok_re_gpt2[];
/* Splits text (valid UTF-8) by the regexes and calls ob_tok_bpe_word on each piece. */
void ob_tok_pretok_bpe(const ob_tokenizer *t, ob_tok_scratch *s, const char *text, size_t len,
                       ob_tok_ids *out);

/* ---- bpe.c ---- */
void ob_tok_bpe_word(const ob_tokenizer *t, ob_tok_scratch *s, const char *w, size_t len,
                     ob_tok_ids *out);
/* Unicode code point of the byte-level symbol for byte b, and the inverse (-1 if none). */
uint32_t ob_tok_byte_to_cp(uint8_t b);
int ob_tok_cp_to_byte(uint32_t cp);

/* ---- wordpiece.c ---- */
void ob_tok_wordpiece_segment(const ob_tokenizer *t, ob_tok_scratch *s, const char *text,
                              size_t len, ob_tok_ids *out);

/* ---- unigram.c ---- */
/* Builds the piece trie and the unknown score once vocab and ugm_score are set; only the
 * pieces with in_lattice[id] (NULL = all) may be matched, and min_from[id] (NULL = all)
 * says which pieces count for the minimum score. */
ob_status ob_tok_unigram_init(ob_tokenizer *t, const bool *in_lattice, const bool *min_from, char *err, size_t err_len);
ob_status ob_tok_unigram_add_norm(ob_tokenizer *t, int step, char *err, size_t err_len);
/* Normalizes, pre-tokenizes (Metaspace) and segments one stretch without added tokens. */
void ob_tok_unigram_segment(const ob_tokenizer *t, ob_tok_scratch *s, const char *text, size_t len, bool first,
                            ob_tok_ids *out);
void ob_tok_unigram_free(ob_tokenizer *t);

/* ---- utf-8 helpers (tokenizer.c) ---- */
/* Length of a valid UTF-8 sequence at p (n bytes left), 0 if invalid or truncated. */
int ob_tok_utf8_len(const unsigned char *p, size_t n);
/* Decodes one code point of valid UTF-8, returns its length. */
int ob_tok_utf8_decode(const unsigned char *p, uint32_t *cp);
int ob_tok_utf8_encode(uint32_t cp, char *out);

#endif
