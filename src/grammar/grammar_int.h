/* Private to src/grammar/: the compiled grammar the matcher walks, the character-class
 * automata, the vocabulary layout and the text buffer the schema converter writes into. */
#ifndef OB_GRAMMAR_GRAMMAR_INT_H
#define OB_GRAMMAR_GRAMMAR_INT_H

#include "grammar/grammar.h"

/* Size limits: a grammar larger than this after repetitions are expanded is refused. */
#define OB_GRAMMAR_MAX_ELEMS (1 << 21)
#define OB_GRAMMAR_MAX_RULES (1 << 19)
#define OB_GRAMMAR_MAX_REPEAT 100000

/* One element of a rule alternative. Each alternative is a run of elements ending in END. */
enum ob_gelem_type {
    OB_GE_END = 0,   /* end of an alternative */
    OB_GE_BYTE,      /* arg: the byte */
    OB_GE_CLASS,     /* arg: start state of the class's byte automaton in dfa */
    OB_GE_REF,       /* arg: rule id */
};
typedef struct ob_gelem { int32_t type, arg; } ob_gelem;

/* Byte automaton transitions: next state, or one of these. */
#define OB_GDFA_REJECT (-1)
#define OB_GDFA_DONE (-2)      /* the character is complete */

struct ob_grammar {
    ob_gelem *elems;        /* [n_elems] alternatives, each ended by END */
    int32_t n_elems;
    int32_t *alt_pos;       /* [n_alts] first element of each alternative, grouped by rule */
    int32_t *rule_alt;      /* [n_rules + 1] rule r's alternatives: alt_pos[rule_alt[r] .. rule_alt[r+1]) */
    int32_t n_rules, n_alts;
    int32_t root;
    int32_t *dfa;           /* [n_dfa][256] class automata (OB_GDFA_* or next state) */
    int32_t n_dfa;
};

/* Code point ranges [lo, hi], sorted and disjoint once normalised. */
typedef struct ob_cp_range { uint32_t lo, hi; } ob_cp_range;

/* Sorts and merges r[0..*n), drops surrogates, complements within the Unicode scalar
 * values when negate. r must have room for *n + 2 ranges. */
void ob_cp_ranges_normalize(ob_cp_range *r, int *n, bool negate);

/* Growable int32 automaton table: [n][256]. */
typedef struct ob_gdfa_pool { int32_t *t; int32_t n, cap; int32_t any[4]; } ob_gdfa_pool;
/* Builds the byte automaton of a normalised code point set: returns its start state, or
 * -1 when out of memory. */
int32_t ob_gdfa_build(ob_gdfa_pool *p, const ob_cp_range *r, int n);

/* The UTF-8 bytes of code point cp (<= 0x10FFFF) into out; returns how many (1-4). */
int ob_utf8_put(uint32_t cp, char *out);

/* A JSON-schema "pattern" (an ECMA-262 regex subset) as one GBNF expression matching the
 * inside of a JSON string (the JSON-escaped text between the quotes), appended to out.
 * An unanchored pattern may have any text around it. OB_ERR_UNSUPPORTED names what is
 * not supported (backreferences, lookaround, ...). */
ob_status ob_grammar_pattern(const char *re, size_t n, ob_gtext *out, char *err, size_t err_len);

struct ob_grammar_vocab {
    int32_t n;              /* vocabulary size */
    uint8_t *kind;          /* [n] ob_gtok_kind */
    uint32_t *off, *len;    /* [n] token bytes: bytes + off[i], len[i] */
    uint8_t *bytes;
    int32_t *order;         /* [n_text] TEXT tokens sorted by bytes */
    uint32_t *lcp;          /* [n_text] common prefix length with the previous in order */
    int32_t n_text;
    int32_t first[257];     /* order[first[b] .. first[b+1]): the tokens starting with byte b */
    int32_t *ends;          /* [n_ends] the END tokens */
    int32_t n_ends;
    uint32_t max_len;
};

#endif
