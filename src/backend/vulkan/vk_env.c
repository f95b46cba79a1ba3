/* The Vulkan backend's switches, read once per backend (ob_vk_device_init) into its
 * ob_vk_opts; what each one turns on is in docs/architecture.md, the measurements behind
 * the defaults in bench/NOTES.md (and NOTES-vulkan-*.md). */
#include "backend/vulkan/vk_internal.h"
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define T ob_vk_opts
static const ob_env_var g_vk_env[] = {
    OB_ENV_B("ONEBIT_VULKAN_ALLOW_CPU", T, allow_cpu, 0, "software devices (lavapipe) usable: tests only"),
    OB_ENV_B("ONEBIT_VULKAN_STAGING", T, staging, 0, "device memory never mapped: uploads through staging (tests)"),
    OB_ENV_B("ONEBIT_VULKAN_STAGED_READS", T, staged_reads, 0,
             "downloads through cached staging also from cached memory (on by itself where reads are uncached)"),
    OB_ENV_I("ONEBIT_VK_PROFILE", T, profile, 0, 0, 4,
             "GPU time per op at exit: 1 per dispatch, 2 starts wait for earlier work, 3 timeline, 4 per level"),
    OB_ENV_B("ONEBIT_VK_NO_MATVEC", T, no_matvec, 0, "decode through the tiled matmul too"),
    OB_ENV_I("ONEBIT_VK_MATVEC_ROWS", T, matvec_rows, 0, 1, 16,
             "matvec.comp rows a subgroup (default: 1 on the chunk path, 4 on the streaming one, which takes at most 4)"),
    OB_ENV_B("ONEBIT_VK_MATVEC_STAGE", T, matvec_stage, 1, "matvec.comp's chunk path stages x in shared memory"),
    OB_ENV_B("ONEBIT_VK_MATVEC_SPLITK", T, matvec_splitk, 0, "one token through matvec.comp's split-K path (no faster on the H200)"),
    OB_ENV_B("ONEBIT_VK_Q8", T, q8, 1, "decode on int8 activations where the device has integer dot products"),
    OB_ENV_B("ONEBIT_VK_Q8_STAGE", T, q8_stage, 0, "int8 decode stages x in shared memory (slower on the H200)"),
    OB_ENV_B("ONEBIT_VK_Q8_FUSE", T, q8_fuse, 1, "norms, GLUs and attention write the int8 x of the matmuls after them"),
    OB_ENV_I("ONEBIT_VK_Q8_ROWS", T, q8_rows, 2, 1, 16, "int8 decode of several tokens: rows a subgroup"),
    OB_ENV_I("ONEBIT_VK_Q8_ROWS1", T, q8_rows1, -1, 0, 8,
             "one token: rows a subgroup sharing x in registers, 8/4/2/1 (0: per-row path; default: 4, Q8_0 8)"),
    OB_ENV_I("ONEBIT_VK_Q8_MIN_WG", T, q8_min_wg, -1, 0, 65536,
             "rows a subgroup halve while a matmul gets fewer workgroups (default: 256, TQ2_0 64)"),
    OB_ENV_B("ONEBIT_VK_NO_REUSE", T, no_reuse, 0, "record every step (no re-submitted command buffers)"),
    OB_ENV_B("ONEBIT_VK_ALL_BARRIERS", T, all_barriers, 0, "a barrier after every dispatch"),
    OB_ENV_B("ONEBIT_VK_HZ_AUDIT", T, hz_audit, 0,
             "check every dispatch against the others since its barrier apart from the hazard ranges (tests)"),
    OB_ENV_B("ONEBIT_VK_BARRIER_COMPUTE", T, barrier_compute, 0, "a listed graph's barriers compute-to-compute only (no faster)"),
    OB_ENV_B("ONEBIT_VK_NO_FUSE", T, no_fuse, 0, "every node its own dispatch"),
    OB_ENV_I("ONEBIT_VK_ATTN_SPLIT", T, attn_split, 16, 1, 64, "decode attention splits over cells, at most (1: off)"),
    OB_ENV_I("ONEBIT_VK_ATTN_CELLS", T, attn_cells, 1024, 32, 65536, "attention.comp: cells a split"),
    OB_ENV_B("ONEBIT_VK_RES_FUSE", T, res_fuse, 1, "a one-token matmul writes the residual sum after it"),
    OB_ENV_B("ONEBIT_VK_PRENORM", T, prenorm, 1, "the RMS norm between one-token matmuls folded into them (matvec_q8_pn.comp)"),
    OB_ENV_B("ONEBIT_VK_ATTN_Q8", T, attn_q8, 1, "a decode attention writes the int8 x of the o matmul"),
    OB_ENV_B("ONEBIT_VK_ATTN_LAST", T, attn_last, 1, "the last split of a decode attention merges (no merge dispatch)"),
    OB_ENV_B("ONEBIT_VK_ATTN_DEC", T, attn_dec, 1, "attn_dec.comp where it applies (else attention.comp)"),
    OB_ENV_I("ONEBIT_VK_ATTN_SOLO", T, attn_solo, 4, 0, 255, "under this many chunks, split 0 walks them alone (0: never)"),
    OB_ENV_I("ONEBIT_VK_Q6K_ROWS1", T, q6k_rows1, 4, 0, 8, "one token: Q6_K rows a subgroup, at most (0: as other types)"),
    OB_ENV_B("ONEBIT_VK_REPACK", T, repack, 1, "Q6_K, TQ2_0, Q1_0, Q8_0 weights repacked 16-aligned at upload"),
    OB_ENV_I("ONEBIT_VK_PN_GLU", T, pn_glu, 2, 0, 2, "gate, up and GLU as one prenorm consumer: 2 Q1_0 only, 1 every type, 0 off"),
    OB_ENV_S("ONEBIT_VK_PN_GLU16", T, pn_glu16, "1",
             "... at 16 rows a workgroup (X16 int8 x): 1 TQ2_0 gate/up, all: every type, 0 off"),
    OB_ENV_I("ONEBIT_VK_SPIN_US", T, spin_us, -1, 0, 1000000,
             "a step's fence polled this long before the blocking wait (default: 20000 on a GPU, 0 on a CPU device)"),
    OB_ENV_B("ONEBIT_VK_ATTN_FOLD", T, attn_fold, 1, "one token's q/k norms, ropes and K/V stores inside its decode attention"),
    OB_ENV_I("ONEBIT_VK_ATTN_GW", T, attn_gw, 1, 1, 4, "attn_dec.comp: query heads a workgroup, 1, 2 or 4"),
    OB_ENV_B("ONEBIT_VK_PIPE_STATS", T, pipe_stats, 0, "each pipeline's driver statistics on stderr as it is made"),
    OB_ENV_B("ONEBIT_VK_MARKS", T, marks, 1, "progress marks that name the dispatch a fault stopped in"),
    OB_ENV_D("ONEBIT_VK_TIMEOUT_S", T, timeout_s, 120, 1e-3, 3.2e7, "seconds a fence wait may see no progress before the device counts as hung"),
};
#undef T

const ob_env_var *ob_vulkan_env(size_t *n) {
    *n = OB_ARRAY_LEN(g_vk_env);
    return g_vk_env;
}

void ob_vk_env_parse(ob_vk_opts *o) {
    memset(o, 0, sizeof(*o));
    ob_env_parse(g_vk_env, OB_ARRAY_LEN(g_vk_env), o);
    /* the one switch that is a word: checked here */
    if (strcmp(o->pn_glu16, "0") && strcmp(o->pn_glu16, "1") && strcmp(o->pn_glu16, "all")) {
        ob_log(OB_LOG_WARN, "ONEBIT_VK_PN_GLU16=%s: not 0, 1 or all; default 1 kept", o->pn_glu16);
        snprintf(o->pn_glu16, sizeof(o->pn_glu16), "1");
    }
}
