/* The CUDA backend's environment switches: the options struct its table (cuda_env.cu)
 * fills when a backend is created, and the table itself for `1bit info --env`. Plain C:
 * the app includes it too. */
#ifndef OB_BACKEND_CUDA_CUDA_ENV_H
#define OB_BACKEND_CUDA_CUDA_ENV_H

#include <stdbool.h>
#include "core/env.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fused decode patterns, one bit each (ONEBIT_CUDA_FUSE, ONEBIT_CUDA_DET_FUSE). */
enum {
    OB_CU_FUSE_MMVQ_GROUP = 1, OB_CU_FUSE_ADD_NORM = 2, OB_CU_FUSE_NORM_ROPE = 4, OB_CU_FUSE_NORM_Q = 8,
    OB_CU_FUSE_KV_PAIR = 16, OB_CU_FUSE_ATTN_Q = 32, OB_CU_FUSE_GLU_Q = 64,
    /* split decode attention merges in its last-arriving block (no merge launch) */
    OB_CU_FUSE_ATTN_ONE = 128,
    /* q norm+rope, k norm+rope + its cache rows, V's cache rows: one launch (OB_CU_FUSE_QKV) */
    OB_CU_FUSE_QKV = 256,
    /* that tail folded into the one-token decode attention (k_attn_h's F) */
    OB_CU_FUSE_ATTN_QKV = 512, OB_CU_FUSE_ALL = 1023
};

/* Weight types of the bulk-copy matvec (ONEBIT_CUDA_TMV). */
enum { OB_CU_TMA_TQ2_0 = 1, OB_CU_TMA_Q4_K = 2, OB_CU_TMA_Q6_K = 4, OB_CU_TMA_ALL = 7 };

/* One field per switch, as parsed (cuda_env.cu has each one's meaning, default and
 * range); ob_backend_cuda_new narrows them to what the device can do. */
typedef struct ob_cu_opts {
    bool graphs, profile, timing, pdl, fa, stage, marks, mmq;
    unsigned fuse, det_fuse, tmv, skip, tmv_flags;
    int attn_split, attn_u, attn_h, rms_g;
    int mmq_min_t, mmq_dec, mmq_warps, mmq_stages, mmq_blocks, mmq_max_t, blas_slab;
    int tmv_chunk, tmv_stages, tmv_blocks, tmv_rmin;
} ob_cu_opts;

/* The table (n: its length). */
const ob_env_var *ob_cuda_env(size_t *n);

#ifdef __cplusplus
}
#endif

#endif
