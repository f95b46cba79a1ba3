/* SAMPLE on the device (op_sample.cu): one token per logits row, bit-for-bit the CPU
 * kernel's choice (backend/cpu/op_sample.c) up to the last bit of a double exp. */
#ifndef OB_BACKEND_CUDA_SAMPLE_H
#define OB_BACKEND_CUDA_SAMPLE_H

#include "backend/cuda/cuda_int.h"

bool ob_cu_supports_sample(const ob_tensor *n);
bool ob_cu_op_sample(ob_cu_ctx *cx, ob_tensor *n);

#endif
