/* Shared basics: status codes, error messages, logging, half-precision conversion.
 * Library code returns an ob_status and fills an error message; only main() exits. */
#ifndef OB_CORE_COMMON_H
#define OB_CORE_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <string.h>
#include "onebit.h"

#define OB_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define OB_MIN(a, b) ((a) < (b) ? (a) : (b))
#define OB_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Writes a formatted message into err (may be NULL), returns status. */
ob_status ob_fail(char *err, size_t err_len, ob_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Internal invariant check: always on, never used for input validation. */
#define OB_ASSERT(x) do { if (!(x)) ob_panic(__FILE__, __LINE__, #x); } while (0)
void ob_panic(const char *file, int line, const char *what) __attribute__((noreturn));

/* A backend's device fault (ob_device_faulted in onebit.h). */
void ob_note_device_fault(void);

enum ob_log_level { OB_LOG_DEBUG = 0, OB_LOG_INFO = 1, OB_LOG_WARN = 2, OB_LOG_ERROR = 3 };
void ob_log(enum ob_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ob_log_set_level(enum ob_log_level lvl);

/* Checked arithmetic for sizes read from files and requests. Return false on overflow. */
static inline bool ob_mul_ok(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool ob_add_ok(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }

/* IEEE half <-> float, exact (round-to-nearest-even on the way down). */
static inline float ob_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else { /* subnormal: renormalise */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) bits = sign | 0x7f800000u | (man << 13);
    else bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    float f; memcpy(&f, &bits, 4); return f;
}
static inline uint16_t ob_f32_to_f16(float f) {
    uint32_t x; memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0)); /* inf / NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow -> inf */
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign;
        uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* value in units of 2^-24 is m >> shift */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t q = ((ax >> 13) - (112u << 10));
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) q++;
    return (uint16_t)(sign | q);
}
static inline float ob_bf16_to_f32(uint16_t h) { uint32_t b = (uint32_t)h << 16; float f; memcpy(&f, &b, 4); return f; }
static inline uint16_t ob_f32_to_bf16(float f) {
    uint32_t x; memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64); /* quiet NaN */
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

/* Monotonic clock in seconds. */
double ob_time_s(void);

/* The whole of a text file of at most max bytes without NUL bytes, malloc'd and
 * NUL-terminated (*len, if given, its length); NULL if it cannot be read, is longer or
 * holds a NUL. */
char *ob_read_text_file(const char *path, size_t max, size_t *len);
/* Index of the first largest of w[0..n), as the plain scan `if (w[i] > w[best]) best = i`
 * from best = 0 finds it (a NaN at 0 wins, NaNs elsewhere never do), but vectorizable:
 * greedy sampling and speculative drafts run it over a whole vocabulary every token. */
int ob_argmax_f32(const float *w, int n);
/* A token from logits w[0..n) (temp > 0): the top_k best by (value desc, id asc), or with
 * top_k off (<= 0 or >= n) every id at or above the min-p threshold; then min-p,
 * temperature, top-p (>= 1: off) and the pick with u in [0, 1), all in double. idx:
 * scratch of min(top_k, n) ids when top-k is on, n otherwise. */
int32_t ob_sample_pick(const float *w, int n, float temp, int top_k, float top_p, float min_p, double u,
                       int32_t *idx);
/* ob_sample_pick's stages, for chains that put more samplers between them
 * (engine/sampler_ext.c): rank gives the candidates best first in idx (the top_k best, or
 * with top-k off every id at or above the min-p threshold; 0: only NaN logits); min_p and
 * top_p return how many of the ranked candidates they keep; draw picks among them. */
int ob_sample_rank(const float *w, int n, float temp, int top_k, float min_p, int32_t *idx);
int ob_sample_min_p(const float *w, const int32_t *idx, int m, float temp, float min_p);
int ob_sample_top_p(const float *w, const int32_t *idx, int m, float temp, float top_p);
int32_t ob_sample_draw(const float *w, const int32_t *idx, int m, float temp, double u);
/* The k best ids of w[0..n) (k <= n) by (value desc, id asc), best first. */
void ob_top_k_sorted(const float *w, int n, int k, int32_t *idx);

#endif
