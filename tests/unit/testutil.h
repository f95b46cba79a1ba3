/* Minimal test helpers: CHECK macros that count failures, and a seeded random source. */
#ifndef OB_TESTUTIL_H
#define OB_TESTUTIL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern int ob_test_failures;
extern int ob_test_checks;

#define CHECK(cond) do { ob_test_checks++; if (!(cond)) { ob_test_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECKF(cond, ...) do { ob_test_checks++; if (!(cond)) { ob_test_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* Prints a summary line and returns the process exit code. */
int ob_test_done(const char *name);

/* ONEBIT_TEST_SHARD=i/n (0 <= i < n): true when the test's k-th group of checks belongs to
 * shard i (k mod n == i), so a slow run (a sanitizer) can be spread over n processes that
 * together run every group once; unset: every group. */
int ob_test_shard(int k);

/* xoshiro-style PRNG: deterministic for a seed. */
typedef struct { uint64_t s[2]; } ob_rng;
void ob_rng_seed(ob_rng *r, uint64_t seed);
uint64_t ob_rng_u64(ob_rng *r);
float ob_rng_uniform(ob_rng *r);          /* [0, 1) */
float ob_rng_normal(ob_rng *r);           /* N(0, 1) */
void ob_rng_fill_normal(ob_rng *r, float *x, int64_t n, float scale);

/* Max error against ref, scaled: |a - r| / (atol + rtol |r|), its index in *where; NaN
 * anywhere -> inf. */
double ob_test_err_ratio(const float *a, const float *r, int64_t n, double atol, double rtol, int64_t *where);

/* Reads a whole file; NULL on error. Caller frees. */
void *ob_test_read_file(const char *path, size_t *len);
#endif
