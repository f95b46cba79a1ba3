/* Counters of the fused decode launches the CUDA backend enqueued, so tests can check that
 * a pattern they build really took the fused path (not only that the result is right).
 * Counted on the host when a launch is enqueued or captured, not per graph replay. */
#ifndef OB_BACKEND_CUDA_STATS_H
#define OB_BACKEND_CUDA_STATS_H

#include "backend/backend.h"
#include <stdint.h>

enum {
    OB_CU_STAT_QKV,      /* q/k norm+rope + K/V stores as one launch (OB_CU_FUSE_QKV) */
    OB_CU_STAT_ATTN_ONE, /* split decode attention merged in its last block (OB_CU_FUSE_ATTN_ONE) */
    OB_CU_STAT_ATTN_FOLD, /* that q/k/v tail folded into the decode attention (OB_CU_FUSE_ATTN_QKV) */
    OB_CU_STAT_COUNT
};

#ifdef __cplusplus
extern "C"
#endif
    /* The counter `what` (OB_CU_STAT_*) of a CUDA backend; -1 for another backend. */
    int64_t
    ob_backend_cuda_stat(ob_backend *be, int what);

#endif
