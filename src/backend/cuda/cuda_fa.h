/* Tensor-core flash attention for CUDA prefill (op_flash_attn.cu). Only .cu files include
 * this, after cuda_int.h. */
#ifndef OB_BACKEND_CUDA_FA_H
#define OB_BACKEND_CUDA_FA_H

#include "backend/cuda/cuda_int.h"

/* Whether ATTENTION node n can take the mma kernel: T >= 32 tokens, head size 64 or 128,
 * K and V caches F16 or Q8_0, at most 64 query heads per kv head, an sm_80+ CUDA device
 * (never HIP), not disabled by ONEBIT_CUDA_FA=0 (cx->fa_off).
 * Depends on shapes and types only, so a captured step stays valid. */
bool ob_cu_fa_applies(const ob_cu_ctx *cx, const ob_tensor *n);
/* Enqueues the kernel for n (ob_cu_fa_applies must hold); false on a launch error. */
bool ob_cu_op_flash_attn(ob_cu_ctx *cx, ob_tensor *n);

#endif
