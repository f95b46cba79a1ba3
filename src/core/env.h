/* Environment switches (ONEBIT_CUDA_*, ONEBIT_VK_*, ...): each backend describes its
 * switches in one table, and ob_env_parse fills that backend's options struct from the
 * environment when a backend is created, so every switch is read in one place, once per
 * context, and `1bit info --env` lists them all (ob_env_list). Only the tables and the
 * options structs they fill know the names; kernels read the options. */
#ifndef OB_CORE_ENV_H
#define OB_CORE_ENV_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ob_env_kind {
    OB_ENV_BOOL,   /* bool: "0" or "1" */
    OB_ENV_INT,    /* int: a decimal integer in [min, max] */
    OB_ENV_MASK,   /* unsigned: strtoul base 0 (0x.. hex, 0.. octal), only the bits of max */
    OB_ENV_DOUBLE, /* double: a number in [min, max] */
    OB_ENV_STRING, /* char[OB_ENV_STR_MAX]: any text that fits (the backend checks it) */
} ob_env_kind;

#define OB_ENV_STR_MAX 32

/* One switch. The default may lie outside [min, max]: a sentinel the backend resolves
 * (e.g. -1 for "chosen per device"); a value from the environment must lie inside. */
typedef struct ob_env_var {
    const char *name;
    ob_env_kind kind;
    size_t offset;      /* offsetof(the options struct, the field it fills) */
    double def;         /* the default (BOOL 0/1, INT, MASK, DOUBLE) */
    double min, max;    /* allowed range (MASK: max is the set of allowed bits) */
    const char *def_str;/* STRING: the default */
    const char *help;   /* one line */
} ob_env_var;

/* Table entries: name, options type, field, default, [range,] help. */
#define OB_ENV_B(nm, T, f, d, h) {nm, OB_ENV_BOOL, offsetof(T, f), (d), 0, 1, NULL, h}
#define OB_ENV_I(nm, T, f, d, lo, hi, h) {nm, OB_ENV_INT, offsetof(T, f), (d), (lo), (hi), NULL, h}
#define OB_ENV_M(nm, T, f, d, bits, h) {nm, OB_ENV_MASK, offsetof(T, f), (d), 0, (bits), NULL, h}
#define OB_ENV_D(nm, T, f, d, lo, hi, h) {nm, OB_ENV_DOUBLE, offsetof(T, f), (d), (lo), (hi), NULL, h}
#define OB_ENV_S(nm, T, f, d, h) {nm, OB_ENV_STRING, offsetof(T, f), 0, 0, 0, (d), h}

/* Fills opts from the table: every field its default, then each switch set in the
 * environment its value. A value that does not parse or lies outside its range is
 * logged (one warning naming the switch and the default kept) and ignored. Returns the
 * number of values ignored. */
int ob_env_parse(const ob_env_var *t, size_t n, void *opts);

/* Prints title, then one line per switch: its name, its value in the environment (or
 * "default X"; "bad, default X" where ob_env_parse would ignore it) and its help. */
void ob_env_list(FILE *f, const char *title, const ob_env_var *t, size_t n);

/* Switches every backend reads that are not options of one: ONEBIT_TEST_FAULT (tests
 * only; each backend reads it itself). For ob_env_list only (no options struct). */
extern const ob_env_var ob_env_shared[];
extern const size_t ob_env_shared_n;

#ifdef __cplusplus
}
#endif

#endif
