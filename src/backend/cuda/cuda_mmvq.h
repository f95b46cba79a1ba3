/* Test hook of the decode matvec (op_mmvq.cu): how many k_mmvq_run launches (the staged
 * one-column kernel) this process has enqueued, so tests can check a shape really took it.
 * Counted on the host at enqueue or capture time, not per graph replay. */
#ifndef OB_BACKEND_CUDA_MMVQ_H
#define OB_BACKEND_CUDA_MMVQ_H

#include <stdint.h>

#ifdef __cplusplus
extern "C"
#endif
    int64_t
    ob_cu_mmvq_run_launches(void);

#endif
