/* Test hook of the decode matvec (op_mmvq.cu): how many k_mmvq_run launches (the staged
 * one-column kernel) this process has enqueued, so tests can check a shape really took it.
 * Counted on the host at enqueue or capture time, not per graph replay. */
#ifndef OB_BACKEND_CUDA_MMVQ_H
#define OB_BACKEND_CUDA_MMVQ_H

#include <stdbool.h>
#include <stdint.h>

struct ob_backend;

#ifdef __cplusplus
extern "C" {
#endif

int64_t ob_cu_mmvq_run_launches(void);
/* The same for the bulk-copy kernel (op_mmvq_tma.cu: TQ2_0, Q4_K, Q6_K). */
int64_t ob_cu_mmvq_tma_launches(void);
/* Whether a CUDA backend may use that kernel for any type (sm_90 code on the device,
 * ONEBIT_CUDA_TMV not 0). */
bool ob_cu_backend_tma(const struct ob_backend *be);

#ifdef __cplusplus
}
#endif

#endif
