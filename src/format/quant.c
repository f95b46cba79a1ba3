/* The type table, the public (de)quantize wrappers, and the plain-C reference codecs for
 * the float types and the 32-element legacy quants (Q4_0 .. Q8_1).
 *
 * Bit-exactness: every formula below evaluates in float32 in the same order as the
 * `gguf` Python package (numpy float32), which in turn matches ggml's *_ref functions, so
 * files written here are byte-identical to theirs. That only holds without fused
 * multiply-add, hence the pragma for clang (GCC in ISO C mode never contracts). */
#include "format/quant.h"
#include <math.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

_Static_assert(sizeof(ob_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(ob_block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(ob_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(ob_block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(ob_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(ob_block_q8_1) == 36, "q8_1 layout");

/* ---- float types ------------------------------------------------------------------- */

static void f32_to_float(const void *x, float *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }
static size_t f32_from_float(const float *x, void *y, int64_t n) {
    memcpy(y, x, (size_t)n * sizeof(float));
    return (size_t)n * sizeof(float);
}

static void f16_to_float(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h; memcpy(&h, p + 2 * i, 2);
        y[i] = ob_f16_to_f32(h);
    }
}
static size_t f16_from_float(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = ob_f32_to_f16(x[i]);
        memcpy(p + 2 * i, &h, 2);
    }
    return (size_t)n * 2;
}

static void bf16_to_float(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h; memcpy(&h, p + 2 * i, 2);
        y[i] = ob_bf16_to_f32(h);
    }
}
static size_t bf16_from_float(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = ob_f32_to_bf16(x[i]);
        memcpy(p + 2 * i, &h, 2);
    }
    return (size_t)n * 2;
}

static void f64_to_float(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n; i++) { double v; memcpy(&v, p + 8 * i, 8); y[i] = (float)v; }
}

/* Integer tensors (token ids, positions) are converted by value: handy for dumping. */
#define OB_INT_TO_FLOAT(NAME, T)                                             \
    static void NAME(const void *x, float *y, int64_t n) {                   \
        const uint8_t *p = x;                                                \
        for (int64_t i = 0; i < n; i++) {                                    \
            T v; memcpy(&v, p + sizeof(T) * (size_t)i, sizeof(T));           \
            y[i] = (float)v;                                                 \
        }                                                                    \
    }
OB_INT_TO_FLOAT(i8_to_float, int8_t)
OB_INT_TO_FLOAT(i16_to_float, int16_t)
OB_INT_TO_FLOAT(i32_to_float, int32_t)
OB_INT_TO_FLOAT(i64_to_float, int64_t)
#undef OB_INT_TO_FLOAT

/* ---- 32-element legacy quants -------------------------------------------------------
 * Nibble order in all of them: byte j holds element j (low nibble) and j+16 (high). */

void ob_dequant_row_q4_0(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / 32; i++, p += sizeof(ob_block_q4_0), y += 32) {
        ob_block_q4_0 b; memcpy(&b, p, sizeof b);
        const float d = ob_f16_to_f32(b.d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)((b.qs[j] & 0xf) - 8);
            y[j + 16] = d * (float)((b.qs[j] >> 4) - 8);
        }
    }
}

void ob_dequant_row_q4_1(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / 32; i++, p += sizeof(ob_block_q4_1), y += 32) {
        ob_block_q4_1 b; memcpy(&b, p, sizeof b);
        const float d = ob_f16_to_f32(b.d), m = ob_f16_to_f32(b.m);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)(b.qs[j] & 0xf) + m;
            y[j + 16] = d * (float)(b.qs[j] >> 4) + m;
        }
    }
}

void ob_dequant_row_q5_0(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / 32; i++, p += sizeof(ob_block_q5_0), y += 32) {
        ob_block_q5_0 b; memcpy(&b, p, sizeof b);
        const float d = ob_f16_to_f32(b.d);
        uint32_t qh; memcpy(&qh, b.qh, 4); /* bit j = fifth bit of element j */
        for (int j = 0; j < 16; j++) {
            int lo = (b.qs[j] & 0xf) | (int)((qh >> j) & 1) << 4;
            int hi = (b.qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = d * (float)(lo - 16);
            y[j + 16] = d * (float)(hi - 16);
        }
    }
}

void ob_dequant_row_q5_1(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / 32; i++, p += sizeof(ob_block_q5_1), y += 32) {
        ob_block_q5_1 b; memcpy(&b, p, sizeof b);
        const float d = ob_f16_to_f32(b.d), m = ob_f16_to_f32(b.m);
        uint32_t qh; memcpy(&qh, b.qh, 4);
        for (int j = 0; j < 16; j++) {
            int lo = (b.qs[j] & 0xf) | (int)((qh >> j) & 1) << 4;
            int hi = (b.qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = d * (float)lo + m;
            y[j + 16] = d * (float)hi + m;
        }
    }
}

void ob_dequant_row_q8_0(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / 32; i++, p += sizeof(ob_block_q8_0), y += 32) {
        ob_block_q8_0 b; memcpy(&b, p, sizeof b);
        const float d = ob_f16_to_f32(b.d);
        for (int j = 0; j < 32; j++) y[j] = (float)b.qs[j] * d;
    }
}

/* Q8_1 is an activation format (s = d * sum(qs) speeds up dot products with Q4_1/Q5_1);
 * ggml has no dequantizer for it, but the values are plainly d * qs. */
void ob_dequant_row_q8_1(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / 32; i++, p += sizeof(ob_block_q8_1), y += 32) {
        ob_block_q8_1 b; memcpy(&b, p, sizeof b);
        const float d = ob_f16_to_f32(b.d);
        for (int j = 0; j < 32; j++) y[j] = (float)b.qs[j] * d;
    }
}

/* Value with the largest magnitude, first one on ties (numpy argmax of abs). */
static float ob_signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
    }
    return max;
}

/* Truncating code used by the 4/5-bit refs; NaN and overflow (a subnormal scale makes
 * 1/d infinite) are pinned instead of being undefined casts. */
static int ob_trunc_code(float v, int qmax) {
    if (!(v > 0.0f)) return 0;
    if (v >= (float)qmax) return qmax;
    return (int)v;
}

/* Symmetric 4/5-bit: the extreme value maps to -8 (-16), so the scale's sign follows it
 * and the one-sided range of the code is used at the extreme. q = trunc(x/d + 8.5). */
size_t ob_quant_row_q4_0(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n / 32; i++, x += 32, p += sizeof(ob_block_q4_0)) {
        const float d = ob_signed_absmax(x, 32) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        ob_block_q4_0 b;
        b.d = ob_f32_to_f16(d);
        for (int j = 0; j < 16; j++) {
            int q0 = ob_trunc_code(x[j] * id + 8.5f, 15);
            int q1 = ob_trunc_code(x[j + 16] * id + 8.5f, 15);
            b.qs[j] = (uint8_t)(q0 | q1 << 4);
        }
        memcpy(p, &b, sizeof b);
    }
    return (size_t)(n / 32) * sizeof(ob_block_q4_0);
}

size_t ob_quant_row_q4_1(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n / 32; i++, x += 32, p += sizeof(ob_block_q4_1)) {
        float min = x[0], max = x[0];
        for (int j = 1; j < 32; j++) { min = fminf(min, x[j]); max = fmaxf(max, x[j]); }
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        ob_block_q4_1 b;
        b.d = ob_f32_to_f16(d);
        b.m = ob_f32_to_f16(min);
        for (int j = 0; j < 16; j++) {
            int q0 = ob_trunc_code((x[j] - min) * id + 0.5f, 15);
            int q1 = ob_trunc_code((x[j + 16] - min) * id + 0.5f, 15);
            b.qs[j] = (uint8_t)(q0 | q1 << 4);
        }
        memcpy(p, &b, sizeof b);
    }
    return (size_t)(n / 32) * sizeof(ob_block_q4_1);
}

size_t ob_quant_row_q5_0(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n / 32; i++, x += 32, p += sizeof(ob_block_q5_0)) {
        const float d = ob_signed_absmax(x, 32) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        ob_block_q5_0 b;
        b.d = ob_f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = ob_trunc_code(x[j] * id + 16.5f, 31);
            int q1 = ob_trunc_code(x[j + 16] * id + 16.5f, 31);
            b.qs[j] = (uint8_t)((q0 & 0xf) | (q1 & 0xf) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
        }
        memcpy(b.qh, &qh, 4);
        memcpy(p, &b, sizeof b);
    }
    return (size_t)(n / 32) * sizeof(ob_block_q5_0);
}

size_t ob_quant_row_q5_1(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n / 32; i++, x += 32, p += sizeof(ob_block_q5_1)) {
        float min = x[0], max = x[0];
        for (int j = 1; j < 32; j++) { min = fminf(min, x[j]); max = fmaxf(max, x[j]); }
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        ob_block_q5_1 b;
        b.d = ob_f32_to_f16(d);
        b.m = ob_f32_to_f16(min);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = ob_trunc_code((x[j] - min) * id + 0.5f, 31);
            int q1 = ob_trunc_code((x[j + 16] - min) * id + 0.5f, 31);
            b.qs[j] = (uint8_t)((q0 & 0xf) | (q1 & 0xf) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
        }
        memcpy(b.qh, &qh, 4);
        memcpy(p, &b, sizeof b);
    }
    return (size_t)(n / 32) * sizeof(ob_block_q5_1);
}

/* Rounds half away from zero, as ggml's roundf-based refs and gguf's np_roundf do. */
static int8_t ob_q8_code(float v) {
    if (!(v == v)) return 0;
    return (int8_t)roundf(fminf(fmaxf(v, -127.0f), 127.0f));
}

size_t ob_quant_row_q8_0(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n / 32; i++, x += 32, p += sizeof(ob_block_q8_0)) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        ob_block_q8_0 b;
        b.d = ob_f32_to_f16(d);
        for (int j = 0; j < 32; j++) b.qs[j] = ob_q8_code(x[j] * id);
        memcpy(p, &b, sizeof b);
    }
    return (size_t)(n / 32) * sizeof(ob_block_q8_0);
}

size_t ob_quant_row_q8_1(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n / 32; i++, x += 32, p += sizeof(ob_block_q8_1)) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        ob_block_q8_1 b;
        int sum = 0;
        for (int j = 0; j < 32; j++) { b.qs[j] = ob_q8_code(x[j] * id); sum += b.qs[j]; }
        b.d = ob_f32_to_f16(d);
        b.s = ob_f32_to_f16((float)sum * d);
        memcpy(p, &b, sizeof b);
    }
    return (size_t)(n / 32) * sizeof(ob_block_q8_1);
}

/* ---- the table ------------------------------------------------------------------------ */

#define OB_Q(id, nm, bs, blk, lower) \
    [id] = { nm, bs, sizeof(blk), true, ob_dequant_row_##lower, ob_quant_row_##lower }

/* Indexed by GGUF type id; ids GGUF retired stay empty (name NULL: unknown). */
static const ob_type_traits ob_traits[] = {
    [OB_TYPE_F32] = { "F32", 1, 4, false, f32_to_float, f32_from_float },
    [OB_TYPE_F16] = { "F16", 1, 2, false, f16_to_float, f16_from_float },
    [OB_TYPE_BF16] = { "BF16", 1, 2, false, bf16_to_float, bf16_from_float },
    [OB_TYPE_F64] = { "F64", 1, 8, false, f64_to_float, NULL },
    [OB_TYPE_I8] = { "I8", 1, 1, false, i8_to_float, NULL },
    [OB_TYPE_I16] = { "I16", 1, 2, false, i16_to_float, NULL },
    [OB_TYPE_I32] = { "I32", 1, 4, false, i32_to_float, NULL },
    [OB_TYPE_I64] = { "I64", 1, 8, false, i64_to_float, NULL },
    OB_Q(OB_TYPE_Q4_0, "Q4_0", 32, ob_block_q4_0, q4_0),
    OB_Q(OB_TYPE_Q4_1, "Q4_1", 32, ob_block_q4_1, q4_1),
    OB_Q(OB_TYPE_Q5_0, "Q5_0", 32, ob_block_q5_0, q5_0),
    OB_Q(OB_TYPE_Q5_1, "Q5_1", 32, ob_block_q5_1, q5_1),
    OB_Q(OB_TYPE_Q8_0, "Q8_0", 32, ob_block_q8_0, q8_0),
    OB_Q(OB_TYPE_Q8_1, "Q8_1", 32, ob_block_q8_1, q8_1),
    OB_Q(OB_TYPE_Q2_K, "Q2_K", OB_QK_K, ob_block_q2_k, q2_k),
    OB_Q(OB_TYPE_Q3_K, "Q3_K", OB_QK_K, ob_block_q3_k, q3_k),
    OB_Q(OB_TYPE_Q4_K, "Q4_K", OB_QK_K, ob_block_q4_k, q4_k),
    OB_Q(OB_TYPE_Q5_K, "Q5_K", OB_QK_K, ob_block_q5_k, q5_k),
    OB_Q(OB_TYPE_Q6_K, "Q6_K", OB_QK_K, ob_block_q6_k, q6_k),
    OB_Q(OB_TYPE_Q8_K, "Q8_K", OB_QK_K, ob_block_q8_k, q8_k),
    OB_Q(OB_TYPE_IQ2_XXS, "IQ2_XXS", OB_QK_K, ob_block_iq2_xxs, iq2_xxs),
    OB_Q(OB_TYPE_IQ2_XS, "IQ2_XS", OB_QK_K, ob_block_iq2_xs, iq2_xs),
    OB_Q(OB_TYPE_IQ2_S, "IQ2_S", OB_QK_K, ob_block_iq2_s, iq2_s),
    OB_Q(OB_TYPE_IQ3_XXS, "IQ3_XXS", OB_QK_K, ob_block_iq3_xxs, iq3_xxs),
    OB_Q(OB_TYPE_IQ3_S, "IQ3_S", OB_QK_K, ob_block_iq3_s, iq3_s),
    OB_Q(OB_TYPE_IQ1_S, "IQ1_S", OB_QK_K, ob_block_iq1_s, iq1_s),
    OB_Q(OB_TYPE_IQ1_M, "IQ1_M", OB_QK_K, ob_block_iq1_m, iq1_m),
    OB_Q(OB_TYPE_IQ4_NL, "IQ4_NL", 32, ob_block_iq4_nl, iq4_nl),
    OB_Q(OB_TYPE_IQ4_XS, "IQ4_XS", OB_QK_K, ob_block_iq4_xs, iq4_xs),
    OB_Q(OB_TYPE_TQ1_0, "TQ1_0", OB_QK_K, ob_block_tq1_0, tq1_0),
    OB_Q(OB_TYPE_TQ2_0, "TQ2_0", OB_QK_K, ob_block_tq2_0, tq2_0),
    OB_Q(OB_TYPE_MXFP4, "MXFP4", 32, ob_block_mxfp4, mxfp4),
    OB_Q(OB_TYPE_Q1_0, "Q1_0", 128, ob_block_q1_0, q1_0),
};
#undef OB_Q
/* The last id must have its entry, so a type added to ob_type cannot be left out. */
_Static_assert(sizeof(ob_traits) / sizeof(ob_traits[0]) == OB_TYPE_COUNT, "ob_traits needs an entry for every ob_type up to OB_TYPE_COUNT");

const ob_type_traits *ob_type_traits_get(ob_type t) {
    if ((int)t < 0 || (int)t >= OB_TYPE_COUNT || !ob_traits[t].name) return NULL;
    return &ob_traits[t];
}

size_t ob_row_size(ob_type t, int64_t n) {
    const ob_type_traits *tr = ob_type_traits_get(t);
    if (!tr || n < 0 || n % tr->block_size != 0) return 0;
    size_t bytes;
    if (!ob_mul_ok((size_t)(n / tr->block_size), tr->type_size, &bytes)) return 0;
    return bytes;
}

/* ---- public wrappers ------------------------------------------------------------------ */

const char *ob_type_name(ob_type t) {
    const ob_type_traits *tr = ob_type_traits_get(t);
    return tr ? tr->name : NULL;
}

bool ob_type_from_name(const char *name, ob_type *out) {
    if (!name) return false;
    for (int t = 0; t < OB_TYPE_COUNT; t++) {
        const char *a = ob_traits[t].name, *b = name;
        if (!a) continue;
        while (*a && *b) {
            char cb = *b;
            if (cb >= 'a' && cb <= 'z') cb = (char)(cb - 'a' + 'A');
            if (*a != cb) break;
            a++; b++;
        }
        if (!*a && !*b) {
            if (out) *out = (ob_type)t;
            return true;
        }
    }
    return false;
}

size_t ob_type_row_size(ob_type t, int64_t n) { return ob_row_size(t, n); }

int64_t ob_type_block_size(ob_type t) {
    const ob_type_traits *tr = ob_type_traits_get(t);
    return tr ? tr->block_size : 0;
}

ob_status ob_dequantize(ob_type t, const void *src, float *dst, int64_t n) {
    const ob_type_traits *tr = ob_type_traits_get(t);
    if (!tr) return ob_fail(NULL, 0, OB_ERR_ARG, "unknown type id %d", (int)t);
    if (!tr->to_float) return ob_fail(NULL, 0, OB_ERR_UNSUPPORTED, "no dequantizer for %s", tr->name);
    if (n < 0 || n % tr->block_size != 0 || (n > 0 && (!src || !dst)))
        return ob_fail(NULL, 0, OB_ERR_ARG, "%s: bad element count %lld", tr->name, (long long)n);
    if (n) tr->to_float(src, dst, n);
    return OB_OK;
}

size_t ob_quantize(ob_type t, const float *src, void *dst, int64_t n) {
    const ob_type_traits *tr = ob_type_traits_get(t);
    if (!tr || !tr->from_float || n <= 0 || n % tr->block_size != 0 || !src || !dst) return 0;
    return tr->from_float(src, dst, n);
}

const char *ob_status_str(ob_status st) {
    switch (st) {
    case OB_OK: return "ok";
    case OB_ERR_IO: return "i/o error";
    case OB_ERR_FORMAT: return "malformed input";
    case OB_ERR_UNSUPPORTED: return "unsupported";
    case OB_ERR_NOMEM: return "out of memory";
    case OB_ERR_ARG: return "bad argument";
    case OB_ERR_CONTEXT: return "context full";
    case OB_ERR_DEVICE: return "device error";
    }
    return "unknown status";
}
