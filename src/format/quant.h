/* The one table of tensor element types: block size, bytes per block, and the plain-C
 * reference dequantize / quantize of each. Layouts are bit-compatible with GGUF files.
 *
 * Implementations are split by family:
 *   quant.c         the table, F32/F16/BF16, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q8_1
 *   quant_k.c       Q2_K..Q6_K, Q8_K
 *   quant_iq.c      IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M (grids in quant_iq_grids.h)
 *   quant_small.c   IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, Q1_0, MXFP4 */
#ifndef OB_FORMAT_QUANT_H
#define OB_FORMAT_QUANT_H

#include "core/common.h"

#define OB_QK_K 256

typedef void (*ob_to_float_fn)(const void *src, float *dst, int64_t n);
/* Reference quantize of n values (n a multiple of the block size). Returns bytes written. */
typedef size_t (*ob_from_float_fn)(const float *src, void *dst, int64_t n);

typedef struct ob_type_traits {
    const char *name;
    int64_t block_size;      /* elements per block */
    size_t type_size;        /* bytes per block */
    bool is_quantized;
    ob_to_float_fn to_float;     /* NULL for integer types */
    ob_from_float_fn from_float; /* reference quantize; NULL where none exists */
} ob_type_traits;

/* NULL for an id that is not a known type. */
const ob_type_traits *ob_type_traits_get(ob_type t);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size or t unknown. */
size_t ob_row_size(ob_type t, int64_t n);

/* Per-family entry points, called through the table (declared for the tests too). */
void ob_dequant_row_q4_0(const void *x, float *y, int64_t n);
void ob_dequant_row_q4_1(const void *x, float *y, int64_t n);
void ob_dequant_row_q5_0(const void *x, float *y, int64_t n);
void ob_dequant_row_q5_1(const void *x, float *y, int64_t n);
void ob_dequant_row_q8_0(const void *x, float *y, int64_t n);
void ob_dequant_row_q8_1(const void *x, float *y, int64_t n);
void ob_dequant_row_q2_k(const void *x, float *y, int64_t n);
void ob_dequant_row_q3_k(const void *x, float *y, int64_t n);
void ob_dequant_row_q4_k(const void *x, float *y, int64_t n);
void ob_dequant_row_q5_k(const void *x, float *y, int64_t n);
void ob_dequant_row_q6_k(const void *x, float *y, int64_t n);
void ob_dequant_row_q8_k(const void *x, float *y, int64_t n);
void ob_dequant_row_iq2_xxs(const void *x, float *y, int64_t n);
void ob_dequant_row_iq2_xs(const void *x, float *y, int64_t n);
void ob_dequant_row_iq2_s(const void *x, float *y, int64_t n);
void ob_dequant_row_iq3_xxs(const void *x, float *y, int64_t n);
void ob_dequant_row_iq3_s(const void *x, float *y, int64_t n);
void ob_dequant_row_iq1_s(const void *x, float *y, int64_t n);
void ob_dequant_row_iq1_m(const void *x, float *y, int64_t n);
void ob_dequant_row_iq4_nl(const void *x, float *y, int64_t n);
void ob_dequant_row_iq4_xs(const void *x, float *y, int64_t n);
void ob_dequant_row_tq1_0(const void *x, float *y, int64_t n);
void ob_dequant_row_tq2_0(const void *x, float *y, int64_t n);
void ob_dequant_row_q1_0(const void *x, float *y, int64_t n);
void ob_dequant_row_mxfp4(const void *x, float *y, int64_t n);

size_t ob_quant_row_q4_0(const float *x, void *y, int64_t n);
size_t ob_quant_row_q4_1(const float *x, void *y, int64_t n);
size_t ob_quant_row_q5_0(const float *x, void *y, int64_t n);
size_t ob_quant_row_q5_1(const float *x, void *y, int64_t n);
size_t ob_quant_row_q8_0(const float *x, void *y, int64_t n);
size_t ob_quant_row_q8_1(const float *x, void *y, int64_t n);
size_t ob_quant_row_q2_k(const float *x, void *y, int64_t n);
size_t ob_quant_row_q3_k(const float *x, void *y, int64_t n);
size_t ob_quant_row_q4_k(const float *x, void *y, int64_t n);
size_t ob_quant_row_q5_k(const float *x, void *y, int64_t n);
size_t ob_quant_row_q6_k(const float *x, void *y, int64_t n);
size_t ob_quant_row_q8_k(const float *x, void *y, int64_t n);
size_t ob_quant_row_iq2_xxs(const float *x, void *y, int64_t n);
size_t ob_quant_row_iq2_xs(const float *x, void *y, int64_t n);
size_t ob_quant_row_iq2_s(const float *x, void *y, int64_t n);
size_t ob_quant_row_iq3_xxs(const float *x, void *y, int64_t n);
size_t ob_quant_row_iq3_s(const float *x, void *y, int64_t n);
size_t ob_quant_row_iq1_s(const float *x, void *y, int64_t n);
size_t ob_quant_row_iq1_m(const float *x, void *y, int64_t n);
size_t ob_quant_row_iq4_nl(const float *x, void *y, int64_t n);
size_t ob_quant_row_iq4_xs(const float *x, void *y, int64_t n);
size_t ob_quant_row_tq1_0(const float *x, void *y, int64_t n);
size_t ob_quant_row_tq2_0(const float *x, void *y, int64_t n);
size_t ob_quant_row_q1_0(const float *x, void *y, int64_t n);
size_t ob_quant_row_mxfp4(const float *x, void *y, int64_t n);

/* Block layouts, for kernels. */
typedef struct { uint16_t d; uint8_t qs[16]; } ob_block_q4_0;                    /* 32 */
typedef struct { uint16_t d, m; uint8_t qs[16]; } ob_block_q4_1;                 /* 32 */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } ob_block_q5_0;     /* 32 */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } ob_block_q5_1;  /* 32 */
typedef struct { uint16_t d; int8_t qs[32]; } ob_block_q8_0;                     /* 32 */
typedef struct { uint16_t d, s; int8_t qs[32]; } ob_block_q8_1;                  /* 32 */
typedef struct { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; } ob_block_q2_k;
typedef struct { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; } ob_block_q3_k;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } ob_block_q4_k;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } ob_block_q5_k;
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } ob_block_q6_k;
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } ob_block_q8_k;
typedef struct { uint16_t d; uint16_t qs[32]; } ob_block_iq2_xxs;
typedef struct { uint16_t d; uint16_t qs[32]; uint8_t scales[8]; } ob_block_iq2_xs;
typedef struct { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t scales[8]; } ob_block_iq2_s;
typedef struct { uint16_t d; uint8_t qs[96]; } ob_block_iq3_xxs;
typedef struct { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t signs[32]; uint8_t scales[4]; } ob_block_iq3_s;
typedef struct { uint16_t d; uint8_t qs[32]; uint16_t qh[8]; } ob_block_iq1_s;
typedef struct { uint8_t qs[32]; uint8_t qh[16]; uint8_t scales[8]; } ob_block_iq1_m;
typedef struct { uint16_t d; uint8_t qs[16]; } ob_block_iq4_nl;                  /* 32 */
typedef struct { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; } ob_block_iq4_xs;
typedef struct { uint8_t qs[48]; uint8_t qh[4]; uint16_t d; } ob_block_tq1_0;
typedef struct { uint8_t qs[64]; uint16_t d; } ob_block_tq2_0;
typedef struct { uint16_t d; uint8_t qs[16]; } ob_block_q1_0;                    /* 128 */
typedef struct { uint8_t e; uint8_t qs[16]; } ob_block_mxfp4;                    /* 32 */

/* The IQ4_NL / IQ4_XS non-linear 16-level table, and MXFP4's E2M1 values (doubled). The
 * table's values as a list, for device code that needs them as constants of its own. */
#define OB_IQ4NL_VALUES -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113
extern const int8_t ob_iq4nl_values[16];
extern const int8_t ob_mxfp4_values[16];
/* MXFP4's block scale 2^(e-128) (its table values above are doubled), as float bits; e < 2
 * lands in the subnormals. Every value d * table[q] is then exact in a float. */
static inline float ob_mxfp4_scale(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

#endif
