/* The int8 tensor-core matmul (op_mmq.cu) for batches and prefill: MATMUL nodes with a hot
 * weight type and T >= ONEBIT_CUDA_MMQ_MIN_T columns (default 2). ONEBIT_CUDA_MMQ=0 turns it
 * off (comparison runs). Never applies under HIP or below sm_80. Only .cu files include this.
 * Decode-size T (<= ONEBIT_CUDA_MMQ_DEC, default 16; Q8_0 at most 8) of Q4_K/Q6_K/Q8_0
 * streams the weights through per-warp cp.async rings (ONEBIT_CUDA_MMQ_WARPS warps a block,
 * default 4; ONEBIT_CUDA_MMQ_STAGES ring depth, default 2 (Q8_0: 4);
 * ONEBIT_CUDA_MMQ_BLOCKS grid size below which K is split, default 4 per SM);
 * ONEBIT_CUDA_MMQ_MIN_T=1 sends single columns there too. */
#ifndef OB_BACKEND_CUDA_MMQ_H
#define OB_BACKEND_CUDA_MMQ_H

#include "backend/cuda/cuda_int.h"

/* cx->mmq_min_t and cx->mmq_dec_blocks from the switches and the device (at creation). */
void ob_cu_mmq_init(ob_cu_ctx *cx, const cudaDeviceProp *prop);
/* Whether op_mmq.cu takes MATMUL node n (pure: shapes, types, alignment and cx's options). */
bool ob_cu_mmq_applies(const ob_cu_ctx *cx, const ob_tensor *n);
/* Bytes of cx->tmp the node needs: int8 x [T][K], then (at ob_cu_qx_dx_offset) float2 [T][K/32]
 * (used only when cx->qx is too small for them), then the split-K partial sums. */
size_t ob_cu_mmq_tmp_size(const ob_cu_ctx *cx, const ob_tensor *n);
/* Enqueues the quantization of x and the matmul on cx->stream; false on a launch error. */
bool ob_cu_op_mmq(ob_cu_ctx *cx, ob_tensor *n);

/* Batch-invariant mode (cx->det): whether k_mmq_dec takes node n at every T (Q4_K, Q6_K,
 * Q8_0; K % 256 == 0; 16-aligned x and weights; int8 MMA on the device), its scratch in
 * cx->tmp, and the launch (columns in fixed chunks, one plan for every T). */
bool ob_cu_mmq_det_applies(const ob_cu_ctx *cx, const ob_tensor *n);
size_t ob_cu_mmq_det_tmp_size(const ob_cu_ctx *cx, const ob_tensor *n);
bool ob_cu_op_mmq_det(ob_cu_ctx *cx, ob_tensor *n);

#endif
