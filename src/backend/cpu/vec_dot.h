/* CPU dot-product kernels behind OB_OP_MATMUL (internal to src/backend/cpu).
 *
 * A matmul quantizes its activations once per node into the weight type's dot partner
 * (the "act format"), then each weight row is dotted with 1..4 activation columns per
 * call, so one load of a weight row serves several tokens during prefill. Where a level
 * has a tile kernel for the type, 8 rows x 1..8 columns go through one call instead, with
 * one row per SIMD lane, so the per-column cost no longer includes the weight decode and
 * the horizontal sums (4 parallel sequences decode at far less than 4x one's cost).
 *
 * Levels: vec_dot_ref.c (plain C, every type), vec_dot_avx2.c (AVX2+FMA+F16C) and
 * vec_dot_avx512.c (AVX-512 F/BW/VL + VNNI). Both x86 levels compile the same kernel
 * bodies (vec_dot_x86.inc) with different target attributes, so no -march flag is needed. */
#ifndef OB_BACKEND_CPU_VEC_DOT_H
#define OB_BACKEND_CPU_VEC_DOT_H

#include "format/quant.h"

/* Max activation columns one dot call handles. */
#define OB_DOT_MAX_COLS 4

typedef enum ob_act_fmt {
    OB_ACT_F32 = 0,   /* activations used as they are: K floats per column */
    OB_ACT_Q8_32 = 1, /* ob_q8a_block per 32 values */
    OB_ACT_Q8_K = 2,  /* ob_block_q8_k per 256 values (with 16-value sums) */
} ob_act_fmt;

/* Activation block for 32-value weight blocks. The scale is f32 (not f16 as in Q8_0) so
 * activation quantization adds only the int8 rounding error. sum = sum(qs) serves the
 * weight types with an additive min (Q4_1, Q5_1) and the tile kernels, which dot weights
 * stored with an offset (u8 = q + off) and take off * sum back out in integers. */
typedef struct { float d; int32_t sum; int8_t qs[32]; } ob_q8a_block;

/* out[c] = dot(weight row w of k values, activation column c), c < nc (1..OB_DOT_MAX_COLS).
 * Column c starts at (const char *)act + c * act_stride and is in the kernel's act format. */
typedef void (*ob_vec_dot_fn)(int64_t k, const void *w, const void *act, size_t act_stride,
                              int nc, float *out);

/* Quantizes k floats into format f. Every implementation gives the same bytes as
 * ob_cpu_quantize_act (test_cpu_matmul checks), so the level never changes a result. */
typedef void (*ob_quant_act_fn)(ob_act_fmt f, const float *x, void *y, int64_t k);

/* Max weight rows and activation columns one tile call handles. */
#define OB_TILE_ROWS 8
#define OB_TILE_MAX_COLS 8

/* out[c * out_stride + i] = dot(weight row i, activation column c) for i < nr (1..OB_TILE_ROWS),
 * c < nc (1..OB_TILE_MAX_COLS); row i starts at (const char *)w + i * w_stride. A tile kernel
 * puts one row per SIMD lane, so the weight decode is shared by all columns and each
 * (row, column) result takes the same arithmetic whatever nr, nc and the row's lane are:
 * a token's result does not depend on the batch it came in. */
typedef void (*ob_vec_tile_fn)(int64_t k, const void *w, size_t w_stride, int nr, const void *act,
                               size_t act_stride, int nc, float *out, size_t out_stride);

typedef struct ob_vec_dot_kernel {
    ob_vec_dot_fn dot;   /* NULL: this level has no kernel for the type */
    ob_act_fmt act;
    ob_quant_act_fn quant; /* NULL: use ob_cpu_quantize_act */
    ob_vec_tile_fn tile;   /* non-NULL: the matmul uses it instead of dot */
} ob_vec_dot_kernel;

/* Kernel for weight type t at each level; .dot is NULL where the level has none. */
ob_vec_dot_kernel ob_cpu_vec_dot_ref(ob_type t);
ob_vec_dot_kernel ob_cpu_vec_dot_avx2(ob_type t);
ob_vec_dot_kernel ob_cpu_vec_dot_avx512(ob_type t);

/* The kernel the matmuls use for weight type t at the current level (op_matmul.c);
 * .dot NULL when there is none. */
ob_vec_dot_kernel ob_cpu_matmul_kernel(ob_type t);

/* Bytes of one activation column of k values in format f (k a multiple of its block). */
size_t ob_cpu_act_row_size(ob_act_fmt f, int64_t k);
/* Quantizes k floats into format f (not OB_ACT_F32). */
void ob_cpu_quantize_act(ob_act_fmt f, const float *x, void *y, int64_t k);

#endif
