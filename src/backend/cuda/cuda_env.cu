/* The CUDA backend's switches, read once per backend (ob_backend_cuda_new) into its
 * ob_cu_opts. Measured choices behind the defaults: bench/NOTES.md and NOTES-cuda-3-7.md. */
#include "backend/cuda/cuda_env.h"
#include "core/common.h"
#include <stddef.h>

#define T ob_cu_opts
static const ob_env_var g_cuda_env[] = {
    OB_ENV_B("ONEBIT_CUDA_GRAPHS", T, graphs, 1, "decode steps captured and replayed as CUDA graphs (0: launched every step)"),
    OB_ENV_M("ONEBIT_CUDA_FUSE", T, fuse, OB_CU_FUSE_ALL, OB_CU_FUSE_ALL,
             "fused decode patterns kept, OB_CU_FUSE_* bits (cuda_env.h; 0: none, to bisect a wrong result)"),
    OB_ENV_M("ONEBIT_CUDA_DET_FUSE", T, det_fuse, OB_CU_FUSE_KV_PAIR, OB_CU_FUSE_ALL,
             "fusions kept in batch-invariant mode, OB_CU_FUSE_* bits"),
    OB_ENV_B("ONEBIT_CUDA_PROFILE", T, profile, 0, "GPU time per op (and weight type) per step, printed at exit; steps uncaptured"),
    OB_ENV_B("ONEBIT_CUDA_TIMING", T, timing, 0, "GPU time, wall time and host gap per step, printed at exit"),
    OB_ENV_B("ONEBIT_CUDA_PDL", T, pdl, 1, "programmatic dependent launch where the device and kernels are sm_90+"),
    OB_ENV_M("ONEBIT_CUDA_TMV", T, tmv, OB_CU_TMA_ALL, OB_CU_TMA_ALL,
             "bulk-copy one-column matvec per weight type: 1 TQ2_0, 2 Q4_K, 4 Q6_K (sm_90+; 0: off)"),
    OB_ENV_M("ONEBIT_CUDA_SKIP", T, skip, 0, 63,
             "diagnostics, wrong results: launches left out, 1 matmul, 2 attention, 4 others (8 GLU, 16 ADD, 32 q/k/v tail)"),
    OB_ENV_I("ONEBIT_CUDA_ATTN_SPLIT", T, attn_split, 0, 0, 256, "decode attention splits forced to N (0: by the cache size)"),
    OB_ENV_I("ONEBIT_CUDA_ATTN_U", T, attn_u, -1, 0, 1,
             "k_attn's early loads before the PDL wait: 1 on, 0 off (default: for one token)"),
    OB_ENV_I("ONEBIT_CUDA_ATTN_H", T, attn_h, 2, 0, 2, "decode kernel k_attn_h: 0 never, 1 one token, 2 every decode batch"),
    OB_ENV_I("ONEBIT_CUDA_RMS_G", T, rms_g, 2, 1, 4, "4-element groups a thread of the fused residual + norm"),
    OB_ENV_B("ONEBIT_CUDA_FA", T, fa, 1, "tensor-core prefill attention (sm_80+)"),
    OB_ENV_B("ONEBIT_CUDA_STAGE", T, stage, 1, "small uploads staged through pinned memory"),
    OB_ENV_B("ONEBIT_CUDA_MARKS", T, marks, 1, "progress marks that name a faulting kernel"),
    OB_ENV_B("ONEBIT_CUDA_MMQ", T, mmq, 1, "int8 tensor-core matmul for batches and prefill (sm_80+)"),
    OB_ENV_I("ONEBIT_CUDA_MMQ_MIN_T", T, mmq_min_t, 0, 1, 0x3fffffff,
             "columns from which MATMUL takes MMQ, alone (default: 2, small matrices at <= 4 columns on the matvec)"),
    OB_ENV_I("ONEBIT_CUDA_MMQ_DEC", T, mmq_dec, 16, 0, 16, "largest T of the streaming decode MMQ k_mmq_dec (Q8_0 at most 8; 0: off)"),
    OB_ENV_I("ONEBIT_CUDA_MMQ_WARPS", T, mmq_warps, 4, 1, 8, "k_mmq_dec's warps a block"),
    OB_ENV_I("ONEBIT_CUDA_MMQ_STAGES", T, mmq_stages, 0, 2, 8, "k_mmq_dec's ring depth (default: 2, Q8_0 4)"),
    OB_ENV_I("ONEBIT_CUDA_MMQ_BLOCKS", T, mmq_blocks, 0, 1, 0x3fffffff,
             "k_mmq_dec's grid size below which K is split (default: 4 per SM)"),
    OB_ENV_I("ONEBIT_CUDA_MMQ_MAX_T", T, mmq_max_t, 32, 0, 0x7fffffff, "MATMULs of more columns take dequant to f16 + cuBLAS"),
    OB_ENV_I("ONEBIT_CUDA_BLAS_SLAB", T, blas_slab, 64, 1, 4096, "f16 weight elements per cuBLAS slab, in units of 2^20"),
    OB_ENV_I("ONEBIT_CUDA_TMV_CHUNK", T, tmv_chunk, 0, 1, 4, "bulk-copy matvec: rows per copy (default: 12 KB a copy, at most 4)"),
    OB_ENV_I("ONEBIT_CUDA_TMV_STAGES", T, tmv_stages, 0, 2, 8, "bulk-copy matvec: copies in flight a warp (default: ~12 KB)"),
    OB_ENV_I("ONEBIT_CUDA_TMV_BLOCKS", T, tmv_blocks, 0, 0, 64, "bulk-copy matvec: blocks per SM (0: as many as fit)"),
    OB_ENV_I("ONEBIT_CUDA_TMV_RMIN", T, tmv_rmin, 1, 1, 1024, "bulk-copy matvec: fewest row chunks a warp"),
    OB_ENV_M("ONEBIT_CUDA_TMV_FLAGS", T, tmv_flags, 0, 1, "diagnostics, wrong results: 1 the bulk-copy matvec skips its dot products"),
};
#undef T

extern "C" const ob_env_var *ob_cuda_env(size_t *n) {
    *n = OB_ARRAY_LEN(g_cuda_env);
    return g_cuda_env;
}
