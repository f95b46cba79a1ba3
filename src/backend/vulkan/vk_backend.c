/* The Vulkan backend behind the seam: buffers are device addresses, a graph is recorded
 * into one command buffer and submitted once, and nodes without a kernel run on the CPU
 * reference when fallback is allowed. A barrier goes only before a dispatch that touches
 * bytes an earlier one since the last barrier wrote (or writes bytes one read). A graph
 * whose nodes all run on the device is listed first and its command buffer re-submitted
 * as is while the list repeats (decode steps): no recording per step. The backend's
 * deterministic flag (batch-invariant kernels, vk_ops.c's header) is read at each compute
 * and built into every pipeline. */
#include "backend/vulkan/vk_internal.h"
#include "backend/cpu/cpu.h"
#include "format/quant.h"
#include "graph/op_table.h"
#include <stdio.h>
#include <stdlib.h>

/* ---- command buffer -------------------------------------------------------------------- */

ob_status ob_vk_begin(ob_vk *vk, char *err, size_t err_len) {
    if (vk->recording) return OB_OK;
    OB_VK_CHECK(vkResetCommandBuffer(vk->cmd, 0));
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    OB_VK_CHECK(vkBeginCommandBuffer(vk->cmd, &bi));
    vk->recording = true;
    /* Earlier submissions' writes are made visible by the first dispatch's barrier. */
    vk->hz_all = true;
    vk->mk_cmd.n = 0;
    vk->mk_cmd.levels = 0;
    if (vk->prof.pool) {
        /* Queries must be reset before they are written, and a command buffer's first
         * command is the one place no earlier write can race the reset. */
        vkCmdResetQueryPool(vk->cmd, vk->prof.pool, 0, vk->prof.cap);
        vk->prof.n = 0;
    }
    return OB_OK;
}

/* compute_only: the barrier follows dispatches only (a listed graph's, with
 * ONEBIT_VK_BARRIER_COMPUTE=1), so transfer stages and accesses are left out. */
static void barrier(ob_vk *vk, VkCommandBuffer cb, VkPipelineStageFlags dst_stage, VkAccessFlags dst_access,
                    bool compute_only) {
    if (vk->prof.in_step && cb == vk->cmd) vk->prof.barriers++; /* gcmd's count per submit */
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | (compute_only ? 0 : VK_ACCESS_TRANSFER_WRITE_BIT),
                          .dstAccessMask = dst_access};
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | (compute_only ? 0 : VK_PIPELINE_STAGE_TRANSFER_BIT),
                         dst_stage, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* ---- profiling (ONEBIT_VK_PROFILE=1) --------------------------------------------------- */

static int prof_key(const ob_tensor *n) {
    return n->op == OB_OP_MATMUL && n->src[0] ? OB_OP_COUNT + (int)n->src[0]->type : (int)n->op;
}

/* One timestamp of a dispatch's pair (recording has begun). The start mark, after the
 * previous barrier, is taken at TOP_OF_PIPE and the end mark, before this dispatch's
 * barrier, at BOTTOM_OF_PIPE: the pair spans the dispatch from the moment the command
 * processor reaches it to its last invocation, and the time from one end to the next
 * start is the barrier and command processing between them. With start_waits the start
 * mark also waits for the earlier work's compute stage. */
static void prof_mark(ob_vk *vk, VkCommandBuffer cb, bool start) {
    ob_vk_prof *pr = &vk->prof;
    if (!pr->pool || (start ? pr->n % 2 != 0 || pr->n + 2 > pr->cap : pr->n % 2 != 1)) return;
    if (start) pr->key[pr->n / 2] = pr->key_now;
    VkPipelineStageFlagBits stage = !start             ? VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT
                                    : pr->start_waits ? VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
                                                      : VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT;
    vkCmdWriteTimestamp(cb, stage, pr->pool, pr->n++);
}

/* After the fence: the pairs of the finished command buffer into the per-op sums; true
 * when their timestamps were read (into ts). */
static bool prof_collect(ob_vk *vk) {
    ob_vk_prof *pr = &vk->prof;
    uint32_t n = pr->n - pr->n % 2;
    pr->n = 0;
    if (n < 2) return false;
    VkResult r = vkGetQueryPoolResults(vk->dev, pr->pool, 0, n, sizeof(uint64_t) * n, pr->ts, sizeof(uint64_t),
                                       VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    if (r != VK_SUCCESS) return false;
    const double ms_per_tick = pr->ns_per_tick * 1e-6;
    for (uint32_t k = 0; k < n; k += 2) {
        int key = pr->key[k / 2];
        pr->node_ms[key] += (double)((pr->ts[k + 1] - pr->ts[k]) & pr->mask) * ms_per_tick;
        pr->node_count[key]++;
    }
    pr->gpu_span_ms += (double)((pr->ts[n - 1] - pr->ts[0]) & pr->mask) * ms_per_tick;
    return true;
}

/* ONEBIT_VK_PROFILE=3: after prof_collect read a listed graph's timestamps (into ts),
 * each position's start (after the first dispatch's start) and duration into the timeline
 * sums. */
static void prof_timeline(ob_vk *vk) {
    ob_vk_prof *pr = &vk->prof;
    int64_t n = vk->gcmd_prof_n / 2 < vk->n_prev ? vk->gcmd_prof_n / 2 : vk->n_prev;
    if (n < 1) return;
    if (pr->tl_n != n) {
        free(pr->tl_start);
        free(pr->tl_dur);
        pr->tl_start = calloc((size_t)n, sizeof(double));
        pr->tl_dur = calloc((size_t)n, sizeof(double));
        pr->tl_n = pr->tl_start && pr->tl_dur ? n : 0;
        pr->tl_steps = 0;
        if (!pr->tl_n) return;
    }
    const uint64_t *ts = pr->ts;
    const double ms = pr->ns_per_tick * 1e-6;
    for (int64_t k = 0; k < n; k++) {
        pr->tl_start[k] += (double)((ts[2 * k] - ts[0]) & pr->mask) * ms;
        pr->tl_dur[k] += (double)((ts[2 * k + 1] - ts[2 * k]) & pr->mask) * ms;
    }
    pr->tl_steps++;
}

/* The timeline of the last listed graph: its first 48 positions and its last 8. */
static void prof_timeline_print(const ob_vk *vk) {
    const ob_vk_prof *pr = &vk->prof;
    if (!pr->tl_n || !pr->tl_steps || pr->tl_n != vk->n_prev) return;
    const double s = (double)pr->tl_steps;
    fprintf(stderr, "vulkan timeline (%lld steps): pos barrier shader groups start_us dur_us\n", (long long)pr->tl_steps);
    for (int64_t k = 0; k < pr->tl_n; k++) {
        if (k >= 48 && k < pr->tl_n - 8) continue;
        const ob_vk_cmd *c = &vk->prev[k];
        fprintf(stderr, "  %4lld %c %-10s %6u %9.2f %7.2f\n", (long long)k, c->barrier ? 'B' : '.',
                c->sh < OB_VK_SH_COUNT ? ob_vk_spv_table[c->sh].name : "?", c->gx * c->gy, 1e3 * pr->tl_start[k] / s,
                1e3 * pr->tl_dur[k] / s);
    }
}

/* ONEBIT_VK_PROFILE=4: the level boundaries' timestamps (into ts, gcmd_prof_n of them:
 * one before each level, one at the end) as each level's time, summed. */
static void prof_levels(ob_vk *vk) {
    ob_vk_prof *pr = &vk->prof;
    const int64_t n = (int64_t)vk->gcmd_prof_n - 1;
    if (n < 1 || vkGetQueryPoolResults(vk->dev, pr->pool, 0, (uint32_t)n + 1, sizeof(uint64_t) * (size_t)(n + 1), pr->ts,
                                       sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) != VK_SUCCESS)
        return;
    pr->n = 0;
    if (pr->tl_n != n) {
        free(pr->tl_dur);
        pr->tl_dur = calloc((size_t)n, sizeof(double));
        pr->tl_n = pr->tl_dur ? n : 0;
        pr->tl_steps = 0;
        if (!pr->tl_n) return;
    }
    const double ms = pr->ns_per_tick * 1e-6;
    for (int64_t k = 0; k < n; k++) pr->tl_dur[k] += (double)((pr->ts[k + 1] - pr->ts[k]) & pr->mask) * ms;
    pr->gpu_span_ms += (double)((pr->ts[n] - pr->ts[0]) & pr->mask) * ms;
    pr->tl_steps++;
}

/* The levels of the last listed graph: the first 24, then each kind of level (the
 * shaders of its dispatches) with its count and time per step. */
static void prof_levels_print(const ob_vk *vk) {
    const ob_vk_prof *pr = &vk->prof;
    if (!pr->tl_n || !pr->tl_steps) return;
    enum { KINDS = 64 };
    char kind[KINDS][96];
    double kt[KINDS];
    int kn[KINDS], nk = 0;
    const double s = (double)pr->tl_steps;
    double total = 0;
    fprintf(stderr, "vulkan levels (%lld steps, %lld levels): level us shaders\n", (long long)pr->tl_steps, (long long)pr->tl_n);
    int64_t lv = -1;
    for (int64_t i = 0; i < vk->n_prev && lv < pr->tl_n; i++) {
        if (i > 0 && !vk->prev[i].barrier) continue;
        lv++;
        if (lv >= pr->tl_n) break;
        char name[96] = "";
        size_t at = 0;
        for (int64_t j = i; j < vk->n_prev && (j == i || !vk->prev[j].barrier); j++) {
            const ob_vk_cmd *c = &vk->prev[j];
            int w = snprintf(name + at, sizeof(name) - at, "%s%s/%u", j == i ? "" : "+",
                             c->sh < OB_VK_SH_COUNT ? ob_vk_spv_table[c->sh].name : "?", c->gx * c->gy);
            if (w < 0 || (size_t)w >= sizeof(name) - at) break;
            at += (size_t)w;
        }
        const double us = 1e3 * pr->tl_dur[lv] / s;
        total += us;
        if (lv < 24) fprintf(stderr, "  %4lld %8.2f %s\n", (long long)lv, us, name);
        int k = 0;
        while (k < nk && strcmp(kind[k], name)) k++;
        if (k == nk && nk < KINDS) {
            snprintf(kind[nk], sizeof(kind[nk]), "%s", name);
            kt[nk] = 0;
            kn[nk++] = 0;
        }
        if (k < nk) {
            kt[k] += us;
            kn[k]++;
        }
    }
    fprintf(stderr, "  kinds (%.1f us a step in levels):\n", total);
    for (int k = 0; k < nk; k++)
        fprintf(stderr, "  %5d x %8.2f us = %9.1f us  %s\n", kn[k], kt[k] / kn[k], kt[k], kind[k]);
}

static void prof_print(const ob_vk *vk) {
    const ob_vk_prof *pr = &vk->prof;
    double total = 0;
    for (int k = 0; k < OB_VK_PROF_KEYS; k++) total += pr->node_ms[k];
    if (!pr->steps) return;
    const double s = (double)pr->steps;
    fprintf(stderr,
            "vulkan profile: %lld steps on %s; per step: %.1f dispatches, %.1f barriers, %.1f submits\n"
            "  host: %.3f ms recording, %.3f ms submit-to-fence (%.3f ms of it outside the gpu span),"
            " %.3f ms CPU fallback per step (and %.1f ms building pipelines in all)\n"
            "  gpu:  %.3f ms in dispatches, %.3f ms first start to last end, %.3f ms between dispatches per step\n",
            (long long)pr->steps, vk->info.name, pr->dispatches / s, pr->barriers / s, pr->submits / s,
            pr->record_ms / s, pr->submit_ms / s, (pr->submit_ms - pr->gpu_span_ms) / s, pr->fallback_ms / s, pr->pipeline_ms, total / s, pr->gpu_span_ms / s,
            (pr->gpu_span_ms - total) / s);
    fprintf(stderr, "  reuse: %lld of %lld steps re-submitted the last recording (ONEBIT_VK_NO_REUSE=1: off)\n",
            (long long)vk->reused, (long long)pr->steps);
    if (total <= 0) return;
    for (int k = 0; k < OB_VK_PROF_KEYS; k++)
        if (pr->node_count[k])
            fprintf(stderr, "  %-10s %-7s %8lld launches %10.3f ms/step %5.1f%% %9.2f us/launch\n",
                    k < OB_OP_COUNT ? ob_op_name((ob_op)k) : "MATMUL",
                    k < OB_OP_COUNT ? "" : ob_type_name((ob_type)(k - OB_OP_COUNT)), (long long)pr->node_count[k],
                    pr->node_ms[k] / s, 100.0 * pr->node_ms[k] / total, 1e3 * pr->node_ms[k] / (double)pr->node_count[k]);
}

/* Submits one command buffer (t: its progress marks) and waits for it, bounded
 * (vk_fault.c). After a fault nothing on this device can be trusted: every later call
 * fails, so the server stops taking work and a supervisor restarts it. */
static ob_status submit_cmd(ob_vk *vk, VkCommandBuffer cmd, const ob_vk_marks *t, char *err, size_t err_len) {
    if (vk->marks) ob_vk_mark_reset(vk);
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cmd};
    VkResult r = vkQueueSubmit(vk->queue, 1, &si, vk->fence);
    /* the fence polled for up to spin_us (vk_device.c says why), then the blocking wait */
    if (r == VK_SUCCESS && vk->spin_us) {
        const double t_end = ob_time_s() + 1e-6 * vk->spin_us;
        while ((r = vkGetFenceStatus(vk->dev, vk->fence)) == VK_NOT_READY && ob_time_s() < t_end) {}
        if (r == VK_NOT_READY) r = VK_SUCCESS;
    }
    if (r == VK_SUCCESS) return ob_vk_fence_wait(vk, t, err, err_len);
    if (r == VK_ERROR_DEVICE_LOST) return ob_vk_fault_fail(vk, r, t, err, err_len);
    return ob_fail(err, err_len, OB_ERR_DEVICE, "vulkan: %s: queue submission failed (VkResult %d)", vk->info.name,
                   (int)r);
}

/* The end of a command buffer of `levels` levels: device writes reach the host domain
 * before mapped reads after the fence, and (marks on) the mark levels + 1 says every
 * level finished (the barrier's TRANSFER stage orders it after them). */
static void finish_cmd(ob_vk *vk, VkCommandBuffer cb, uint32_t levels) {
    const VkPipelineStageFlags dst = VK_PIPELINE_STAGE_HOST_BIT | (vk->marks ? VK_PIPELINE_STAGE_TRANSFER_BIT : 0);
    barrier(vk, cb, dst, VK_ACCESS_HOST_READ_BIT | (vk->marks ? VK_ACCESS_TRANSFER_WRITE_BIT : 0), false);
    if (vk->marks) ob_vk_mark_write(vk, cb, levels + 1);
}

ob_status ob_vk_submit_wait(ob_vk *vk, char *err, size_t err_len) {
    if (!vk->recording) return OB_OK;
    vk->recording = false;
    finish_cmd(vk, vk->cmd, vk->mk_cmd.levels);
    OB_VK_CHECK(vkEndCommandBuffer(vk->cmd));
    double t_sub = vk->prof.in_step ? ob_time_s() : 0;
    ob_status st = submit_cmd(vk, vk->cmd, &vk->mk_cmd, err, err_len);
    if (st) return st;
    if (vk->prof.in_step) {
        ob_vk_prof *pr = &vk->prof;
        double t_done = ob_time_s();
        pr->record_ms += 1e3 * (t_sub - pr->t_step) - (pr->pipeline_ms - pr->pipeline_seen_ms);
        pr->pipeline_seen_ms = pr->pipeline_ms;
        pr->submit_ms += 1e3 * (t_done - t_sub);
        pr->submits++;
        prof_collect(vk);
        pr->t_step = ob_time_s(); /* recording resumes (after a CPU fallback) from here */
    }
    return OB_OK;
}

/* ONEBIT_VK_PIPE_STATS=1: the driver's statistics of each new pipeline on stderr, one line
 * each (the H200's driver: registers per invocation, shared memory, binary size). */
static void pipe_stats(ob_vk *vk, VkPipeline p, const char *name, ob_vk_shader sh, ob_type type) {
    PFN_vkGetPipelineExecutableStatisticsKHR get =
        (PFN_vkGetPipelineExecutableStatisticsKHR)vkGetDeviceProcAddr(vk->dev, "vkGetPipelineExecutableStatisticsKHR");
    if (!get) return;
    VkPipelineExecutableInfoKHR ei = {.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, .pipeline = p};
    VkPipelineExecutableStatisticKHR st[16];
    uint32_t n = 16;
    for (uint32_t i = 0; i < n; i++)
        st[i] = (VkPipelineExecutableStatisticKHR){.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR};
    if (get(vk->dev, &ei, &n, st) < 0) return;
    char line[512];
    int at = snprintf(line, sizeof line, "pipe-stats %s sh=%d type=%d%s%s:", name, (int)sh, (int)((unsigned)type & 0xffu),
                      ((unsigned)type & OB_VK_RP) ? " repacked" : "", ((unsigned)type & OB_VK_X16) ? " x16" : "");
    for (uint32_t i = 0; i < n && at > 0 && (size_t)at < sizeof line; i++) {
        const VkPipelineExecutableStatisticValueKHR *v = &st[i].value;
        char *p = line + at;
        const size_t left = sizeof line - (size_t)at;
        switch (st[i].format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
            at += snprintf(p, left, " %s=%u;", st[i].name, (unsigned)v->b32);
            break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
            at += snprintf(p, left, " %s=%lld;", st[i].name, (long long)v->i64);
            break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
            at += snprintf(p, left, " %s=%llu;", st[i].name, (unsigned long long)v->u64);
            break;
        default:
            at += snprintf(p, left, " %s=%g;", st[i].name, v->f64);
            break;
        }
    }
    fprintf(stderr, "%s\n", line);
}

static ob_status pipeline(ob_vk *vk, ob_vk_shader sh, ob_type tf, VkPipeline *out, char *err, size_t err_len) {
    /* tf: the weight type, | OB_VK_RP for repacked weights, | OB_VK_X16 for an X16 int8 x
     * (pipelines apart) */
    const bool rp = ((unsigned)tf & OB_VK_RP) != 0, x16 = ((unsigned)tf & OB_VK_X16) != 0;
    const ob_type type = (ob_type)((unsigned)tf & 0xffu);
    VkPipeline *slot = &vk->pipes[sh][ob_vk_pipe_slot((unsigned)tf)];
    if (*slot) { *out = *slot; return OB_OK; }
    /* constant 0: the weight type; 1: matvec_q8.comp's token count, 2: its rows per
     * subgroup of the one-token path (attn_dec.comp: query heads per workgroup), 3: its
     * gate/up/GLU mode (the prenorm consumer's), 4: unused (all ignored elsewhere) */
    const bool png = sh == OB_VK_SH_MATVEC_Q8_PNG;
    const bool pn = (sh >= OB_VK_SH_MATVEC_Q8_PNP && sh <= OB_VK_SH_MATVEC_Q8_PNC1) || png;
    const bool one = (sh >= OB_VK_SH_MATVEC_Q8_1 && sh <= OB_VK_SH_MATVEC_Q8_1R1) || pn;
    /* RS 8, 4, 2, 1 (the prenorm producer: 4) */
    const int tv = sh == OB_VK_SH_MATVEC_Q8_PNP ? 1 : png ? 2 : pn ? (int)(sh - OB_VK_SH_MATVEC_Q8_PNC) : -1;
    const uint32_t rs = sh == OB_VK_SH_MATVEC_Q8_1R4 || sh == OB_VK_SH_ATTN_DEC || tv == 1                 ? 4u
                        : sh == OB_VK_SH_MATVEC_Q8_1R2 || sh == OB_VK_SH_ATTN_DEC_G2 || tv == 2 ? 2u
                        : sh == OB_VK_SH_MATVEC_Q8_1R1 || sh == OB_VK_SH_ATTN_DEC_G1 || sh == OB_VK_SH_ATTN_FOLD ||
                                tv == 3
                            ? 1u
                            : 8u;
    /* 5: matvec_q8_pn.comp's role (1 producer, 2 consumer), 6: its workgroup size (the
     * X16 gate/up/GLU consumer: 8 subgroups), 7: the weights repacked (dequant.glsl's RP),
     * 8: the int8 x X16 (matvec_q8.glsl), attn_fold.comp's HD128, 9: batch-invariant mode
     * (matvec.comp's and matvec_q8.glsl's DET: any token count, in chunks), 10 and 11: the
     * weight type's elements and bytes per block from the C type table (dequant.glsl) */
    const ob_type_traits *tt = ob_type_traits_get(type);
    uint32_t spec[12] = {(uint32_t)type, one ? 1u : 8u, rs, png, 0u,
                         sh == OB_VK_SH_MATVEC_Q8_PNP ? 1u : pn ? 2u : 0u,
                         sh == OB_VK_SH_MATVEC_Q8_PNP ? 256u
                         : png                        ? (x16 ? 8u * vk->info.subgroup : 512u)
                         : sh == OB_VK_SH_SAMPLE      ? ob_vk_sample_wg(vk)
                                                      : 128u,
                         rp, x16, vk->det,
                         tt ? (uint32_t)tt->block_size : 1u, tt ? (uint32_t)tt->type_size : 4u};
    VkSpecializationMapEntry me[12];
    for (uint32_t i = 0; i < 12; i++)
        me[i] = (VkSpecializationMapEntry){.constantID = i, .offset = i * sizeof(uint32_t), .size = sizeof(uint32_t)};
    VkSpecializationInfo si = {.mapEntryCount = 12, .pMapEntries = me, .dataSize = sizeof(spec), .pData = spec};
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = vk->mods[sh], .pName = "main", .pSpecializationInfo = &si},
        .layout = vk->layout};
    if (vk->pipe_stats) ci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
    double t0 = vk->prof.in_step ? ob_time_s() : 0;
    OB_VK_CHECK(vkCreateComputePipelines(vk->dev, VK_NULL_HANDLE, 1, &ci, NULL, slot));
    if (vk->pipe_stats) pipe_stats(vk, *slot, ob_vk_spv_table[sh].name, sh, tf);
    /* First use compiles inside a step's recording: kept apart so it does not read as a
     * per-step recording cost. */
    if (vk->prof.in_step) vk->prof.pipeline_ms += 1e3 * (ob_time_s() - t0);
    *out = *slot;
    return OB_OK;
}

static const VkPipelineStageFlags k_dst_stage = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
/* (TRANSFER_WRITE: a level's progress mark, vkCmdUpdateBuffer, after the last level's) */
static const VkAccessFlags k_dst_access =
    VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;

ob_status ob_vk_dispatch(ob_vk *vk, ob_vk_shader sh, ob_type type, ob_vk_pc *pc, uint64_t groups, char *err,
                         size_t err_len) {
    if (groups == 0) return OB_OK;
    /* Every device allows 65535 groups per dimension; larger counts go 2D. */
    uint64_t gx = groups < 65535 ? groups : 65535, gy = (groups + gx - 1) / gx;
    if (gy > 65535 || groups > UINT32_MAX)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "vulkan: %llu workgroups is too many", (unsigned long long)groups);
    pc->u[10] = (uint32_t)groups;
    pc->u[11] = (uint32_t)gx;
    VkPipeline p = VK_NULL_HANDLE;
    ob_status st = pipeline(vk, sh, type, &p, err, err_len);
    if (st) return st;
    if (vk->listing) {
        if (vk->n_list == vk->cap_list) {
            int64_t cap = vk->cap_list ? 2 * vk->cap_list : 256;
            ob_vk_cmd *l = realloc(vk->list, sizeof(*l) * (size_t)cap);
            if (!l) return ob_fail(err, err_len, OB_ERR_NOMEM, "vulkan: out of memory listing a graph");
            vk->list = l;
            vk->cap_list = cap;
        }
        ob_vk_cmd *c = &vk->list[vk->n_list++];
        memset(c, 0, sizeof(*c));
        c->pipe = p;
        c->pc = *pc;
        c->gx = (uint32_t)gx;
        c->gy = (uint32_t)gy;
        c->prof_key = vk->prof.key_now;
        c->barrier = vk->need_barrier;
        c->sh = (uint32_t)sh;
        vk->need_barrier = false;
        st = ob_vk_hz_audit(vk, c->barrier, ob_vk_spv_table[sh].name, err, err_len);
        if (st) {
            vk->n_list--;
            return st;
        }
        /* its progress mark's entry (record_list writes the marks) */
        if (vk->marks && (st = ob_vk_mark_add(vk, &vk->mk_list, sh, c->barrier, err, err_len)) != OB_OK) vk->n_list--;
        return st;
    }
    st = ob_vk_begin(vk, err, err_len);
    if (st) return st;
    /* Outside a graph (no hazard check ran) every dispatch is fenced off. */
    const bool bar = vk->need_barrier || vk->hz_all;
    st = ob_vk_hz_audit(vk, bar, ob_vk_spv_table[sh].name, err, err_len);
    if (st) return st;
    if (bar) barrier(vk, vk->cmd, k_dst_stage, k_dst_access, false);
    vk->need_barrier = false;
    vk->hz_all = false;
    if (vk->marks) {
        /* a new level gets its mark after its barrier */
        const uint32_t levels = vk->mk_cmd.levels;
        st = ob_vk_mark_add(vk, &vk->mk_cmd, sh, bar, err, err_len);
        if (st) return st;
        if (vk->mk_cmd.levels != levels) ob_vk_mark_write(vk, vk->cmd, vk->mk_cmd.levels);
    }
    if (vk->prof.in_step) prof_mark(vk, vk->cmd, true);
    vkCmdBindPipeline(vk->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p);
    vkCmdPushConstants(vk->cmd, vk->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(*pc), pc);
    vkCmdDispatch(vk->cmd, (uint32_t)gx, (uint32_t)gy, 1);
    if (vk->prof.in_step) {
        prof_mark(vk, vk->cmd, false);
        vk->prof.dispatches++;
    }
    return OB_OK;
}

/* The node a group of dispatches is timed and named as (ONEBIT_VK_PROFILE, fault lines). */
static void rec_node(ob_vk *vk, const ob_tensor *n) {
    vk->prof.key_now = prof_key(n);
    vk->mk_node = n;
}

/* Records node *i, or the fused pair starting there (then *i moves to its second node). */
static ob_status record_at(ob_vk *vk, ob_graph *g, int64_t *i, char *err, size_t err_len) {
    ob_vk_hz_own_clear(vk); /* (the fused recorders hand in their own ranges) */
    /* partial sums of squares from a matmul + ADD serve only the plain RMS_NORM right after */
    const uint64_t ss = vk->ss_src;
    vk->ss_src = 0;
    ob_tensor *n = &g->nodes[*i];
    ob_vk_fold fold;
    if (!vk->no_fuse && (n->op == OB_OP_RMS_NORM || n->op == OB_OP_ROPE) && ob_vk_attn_fold_ok(vk, g, *i, &fold)) {
        rec_node(vk, fold.at); /* timed as the attention */
        *i = fold.end;
        return ob_vk_record_attn_fold(vk, &fold, err, err_len);
    }
    if (!vk->no_fuse && n->op == OB_OP_ADD) {
        int64_t j = ob_vk_next_node(g, *i);
        if (j < g->n && ob_vk_fusable_add_norm(vk, n, &g->nodes[j])) {
            ob_tensor *norm = &g->nodes[j];
            rec_node(vk, norm);
            ob_vk_hz_node(vk, norm, n, NULL);
            *i = j;
            return ob_vk_record_add_norm(vk, n, norm, err, err_len);
        }
    }
    if (!vk->no_fuse && n->op == OB_OP_RMS_NORM) {
        int64_t j = ob_vk_next_node(g, *i);
        if (j < g->n && ob_vk_fusable_norm_rope(vk, n, &g->nodes[j], j)) {
            ob_tensor *rope = &g->nodes[j], *store = NULL;
            /* and the KV_STORE of a k rope */
            int64_t k = ob_vk_next_node(g, j);
            if (k < g->n && ob_vk_fusable_rope_store(vk, rope, &g->nodes[k], k)) store = &g->nodes[k];
            if (store || ob_vk_norm_rope_out_ok(n, rope)) {
                rec_node(vk, n); /* timed as the norm */
                ob_vk_hz_node(vk, rope, n, store);
                *i = store ? k : j;
                return ob_vk_record_norm_rope(vk, n, rope, store, err, err_len);
            }
        }
    }
    if (!vk->no_fuse && n->op == OB_OP_MATMUL) {
        /* gate, up and their GLU, or a matmul and its residual ADD: the fused recorders keep
         * their own hazard ranges */
        int64_t j = ob_vk_next_node(g, *i), k = ob_vk_next_node(g, j);
        if (k < g->n && ob_vk_fusable_matmul_add(vk, n, &g->nodes[j], &g->nodes[k], j)) {
            rec_node(vk, n);
            if (ob_vk_prenorm_ok(vk, g, &g->nodes[j], &g->nodes[k], k)) {
                *i = k;
                return ob_vk_record_matmul_add_pn(vk, n, &g->nodes[j], &g->nodes[k], err, err_len);
            }
            *i = j;
            return ob_vk_record_matmul_add(vk, n, &g->nodes[j], err, err_len);
        }
        if (k < g->n && g->nodes[k].op == OB_OP_GLU) {
            ob_tensor *a = n, *b = &g->nodes[j], *glu = &g->nodes[k];
            if (glu->src[0] == b) { a = b; b = n; } /* up recorded first */
            /* on a prenorm's x (ONEBIT_VK_PN_GLU; unset: Q1_0) */
            const int pn = ob_vk_fusable_gate_up_pn(vk, g, a, b, glu, k);
            if (pn) {
                rec_node(vk, n);
                *i = k;
                return ob_vk_record_gate_up_glu(vk, a, b, glu, pn, err, err_len);
            }
        }
    }
    rec_node(vk, n); /* the dispatches of this node time under its key */
    ob_vk_hz_node(vk, n, NULL, NULL);
    if (n->op == OB_OP_RMS_NORM) vk->ss_src = ss;
    return ob_vk_record_node(vk, n, err, err_len);
}

/* ---- listed graphs --------------------------------------------------------------------- */

/* The list's progress-mark table becomes prev's (gcmd's): after record_list, or when gcmd
 * is re-submitted for a list equal to prev (its names, which the lists do not compare,
 * are then the newer graph's). */
static void swap_marks(ob_vk *vk) {
    ob_vk_marks m = vk->mk_prev;
    vk->mk_prev = vk->mk_list;
    vk->mk_list = m;
    vk->mk_list.n = 0;
    vk->mk_list.levels = 0;
}

/* gcmd from the list (which becomes prev). */
static ob_status record_list(ob_vk *vk, char *err, size_t err_len) {
    ob_vk_prof *pr = &vk->prof;
    vk->prev_valid = false;
    if (!vk->gcmd) {
        VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                           .commandPool = vk->cpool, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                           .commandBufferCount = 1};
        OB_VK_CHECK(vkAllocateCommandBuffers(vk->dev, &cai, &vk->gcmd));
    }
    OB_VK_CHECK(vkResetCommandBuffer(vk->gcmd, 0));
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    OB_VK_CHECK(vkBeginCommandBuffer(vk->gcmd, &bi));
    const bool prof = pr->in_step && pr->pool, lv = prof && pr->levels;
    if (prof) {
        vkCmdResetQueryPool(vk->gcmd, pr->pool, 0, pr->cap);
        pr->n = 0;
    }
    VkPipeline bound = VK_NULL_HANDLE;
    uint32_t level = 0;
    for (int64_t i = 0; i < vk->n_list; i++) {
        const ob_vk_cmd *c = &vk->list[i];
        if (lv && (i == 0 || c->barrier) && pr->n + 2 <= pr->cap)
            vkCmdWriteTimestamp(vk->gcmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pr->pool, pr->n++);
        /* (a progress mark waits on its barrier's TRANSFER stage, so with marks on the
         * compute-only barriers are the full ones) */
        if (c->barrier && vk->bar_compute && !vk->marks)
            barrier(vk, vk->gcmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT,
                    true);
        else if (c->barrier || (vk->marks && i == 0))
            barrier(vk, vk->gcmd, k_dst_stage, k_dst_access, false); /* (the first mark after the last one) */
        /* the level's mark, as mk_list numbered it (ob_vk_mark_add) */
        if (vk->marks && (i == 0 || c->barrier)) ob_vk_mark_write(vk, vk->gcmd, ++level);
        if (prof && !lv) {
            pr->key_now = c->prof_key;
            prof_mark(vk, vk->gcmd, true);
        }
        if (c->pipe != bound) vkCmdBindPipeline(vk->gcmd, VK_PIPELINE_BIND_POINT_COMPUTE, c->pipe);
        bound = c->pipe;
        vkCmdPushConstants(vk->gcmd, vk->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(c->pc), &c->pc);
        vkCmdDispatch(vk->gcmd, c->gx, c->gy, 1);
        if (prof && !lv) prof_mark(vk, vk->gcmd, false);
    }
    if (lv && pr->n < pr->cap) vkCmdWriteTimestamp(vk->gcmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pr->pool, pr->n++);
    finish_cmd(vk, vk->gcmd, level);
    OB_VK_CHECK(vkEndCommandBuffer(vk->gcmd));
    vk->gcmd_pool = prof ? pr->pool : VK_NULL_HANDLE;
    vk->gcmd_prof_n = prof ? pr->n : 0;
    ob_vk_cmd *t = vk->prev;
    int64_t tc = vk->cap_prev;
    vk->prev = vk->list;
    vk->cap_prev = vk->cap_list;
    vk->n_prev = vk->n_list;
    vk->list = t;
    vk->cap_list = tc;
    vk->n_list = 0;
    swap_marks(vk);
    vk->prev_valid = true;
    return OB_OK;
}

/* Submits gcmd and waits; with profiling, its timestamps go under prev's keys. */
static ob_status submit_list(ob_vk *vk, char *err, size_t err_len) {
    ob_vk_prof *pr = &vk->prof;
    double t_sub = pr->in_step ? ob_time_s() : 0;
    ob_status st = submit_cmd(vk, vk->gcmd, &vk->mk_prev, err, err_len);
    if (st) return st;
    if (pr->in_step) {
        double t_done = ob_time_s();
        pr->record_ms += 1e3 * (t_sub - pr->t_step) - (pr->pipeline_ms - pr->pipeline_seen_ms);
        pr->pipeline_seen_ms = pr->pipeline_ms;
        pr->submit_ms += 1e3 * (t_done - t_sub);
        pr->submits++;
        pr->dispatches += vk->n_prev;
        pr->barriers++; /* the host barrier at the end */
        for (int64_t i = 0; i < vk->n_prev; i++) pr->barriers += vk->prev[i].barrier != 0;
        if (pr->pool && pr->pool == vk->gcmd_pool) {
            for (uint32_t k = 0; k < vk->gcmd_prof_n / 2 && k < (uint32_t)vk->n_prev; k++) pr->key[k] = vk->prev[k].prof_key;
            pr->n = vk->gcmd_prof_n;
            if (pr->levels) prof_levels(vk);
            else if (prof_collect(vk) && pr->timeline) prof_timeline(vk);
        }
        pr->t_step = ob_time_s();
    }
    return OB_OK;
}

static bool same_list(const ob_vk *vk) {
    return vk->prev_valid && vk->n_list == vk->n_prev && vk->gcmd_pool == (vk->prof.in_step ? vk->prof.pool : VK_NULL_HANDLE) &&
           !memcmp(vk->list, vk->prev, sizeof(ob_vk_cmd) * (size_t)vk->n_list);
}

/* ---- the seam -------------------------------------------------------------------------- */

static bool vk_supports(ob_backend *be, const ob_tensor *node) { return ob_vk_supports_node(be->ctx, node); }

static void *vk_alloc(ob_backend *be, size_t size) {
    ob_vk *vk = be->ctx;
    char err[256];
    vk->list_g = NULL;
    if (vk->faulted) return NULL;
    if (vk->n_allocs == vk->cap_allocs) {
        int cap = vk->cap_allocs ? vk->cap_allocs * 2 : 16;
        ob_vk_alloc *a = realloc(vk->allocs, sizeof(*a) * (size_t)cap);
        if (!a) return NULL;
        vk->allocs = a;
        vk->cap_allocs = cap;
    }
    ob_vk_alloc a;
    if (ob_vk_buffer_new(vk, size, false, &a, err, sizeof(err)) != OB_OK) {
        ob_log(OB_LOG_ERROR, "%s", err);
        return NULL;
    }
    vk->allocs[vk->n_allocs++] = a;
    return (void *)(uintptr_t)a.addr;
}

static void vk_free_buf(ob_backend *be, void *p) {
    ob_vk *vk = be->ctx;
    if (!p) return;
    vk->list_g = NULL;
    /* a faulted device may still run work that reads it: it goes with the process */
    if (vk->faulted) return;
    for (int i = 0; i < vk->n_allocs; i++) {
        if (vk->allocs[i].addr != (uint64_t)(uintptr_t)p) continue;
        char err[512];
        if (ob_vk_wait_idle(vk, err, sizeof(err)) != OB_OK) {
            ob_log(OB_LOG_ERROR, "%s", err);
            return;
        }
        ob_vk_repack_forget(vk, vk->allocs[i].addr, vk->allocs[i].addr + vk->allocs[i].size);
        ob_vk_buffer_free(vk, &vk->allocs[i]);
        vk->allocs[i] = vk->allocs[--vk->n_allocs];
        return;
    }
}

/* The seam's calls without an error message log theirs, except after a fault that an
 * earlier call already reported (one line a fault). */
static void log_err(bool was_faulted, const char *err) {
    if (!was_faulted) ob_log(OB_LOG_ERROR, "%s", err);
}

static ob_status vk_upload(ob_backend *be, void *dst, const void *src, size_t size) {
    char err[512];
    ob_vk *vk = be->ctx;
    const bool was = vk->faulted;
    /* plain bytes over a repacked weight: it is read as plain from now on */
    if (vk->n_rp) ob_vk_repack_forget(vk, (uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)dst + size);
    ob_status st = ob_vk_copy(vk, dst, src, size, true, err, sizeof(err));
    if (st) log_err(was, err);
    return st;
}

static ob_status vk_upload_weight(ob_backend *be, void *dst, const void *src, size_t size, ob_type type, int64_t ne0) {
    char err[512];
    ob_vk *vk = be->ctx;
    const bool was = vk->faulted;
    ob_status st = ob_vk_upload_weight(vk, dst, src, size, type, ne0, err, sizeof(err));
    if (st) log_err(was, err);
    return st;
}

static ob_status vk_download(ob_backend *be, void *dst, const void *src, size_t size) {
    char err[512];
    ob_vk *vk = be->ctx;
    const bool was = vk->faulted;
    ob_status st = ob_vk_copy(vk, dst, src, size, false, err, sizeof(err));
    if (st) log_err(was, err);
    return st;
}

/* Runs one node on the CPU reference: sources come down, the result goes back up (and the
 * sources it writes in place: KV_STORE's cache, the recurrent ops' state). */
static ob_status cpu_fallback(ob_vk *vk, ob_tensor *n, char *err, size_t err_len) {
    ob_tensor srcs[OB_MAX_SRC], dst = *n;
    void *host[OB_MAX_SRC + 1] = {0};
    ob_status st = OB_OK;
    if (!vk->fallback_logged[n->op][n->src[0] ? n->src[0]->type : 0]) {
        vk->fallback_logged[n->op][n->src[0] ? n->src[0]->type : 0] = 1;
        ob_log(OB_LOG_WARN, "vulkan: node %s (%s, %s) runs on the CPU", n->name, ob_op_name(n->op),
               n->src[0] ? ob_type_name(n->src[0]->type) : "-");
    }
    for (int i = 0; i < OB_MAX_SRC && !st; i++) {
        if (!n->src[i]) continue;
        srcs[i] = *n->src[i];
        size_t sz = ob_nbytes(&srcs[i]);
        host[i] = malloc(sz ? sz : 1);
        if (!host[i]) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "vulkan: fallback for %s: out of memory", n->name); break; }
        st = ob_vk_copy(vk, host[i], srcs[i].data, sz, false, err, err_len);
        srcs[i].data = host[i];
        dst.src[i] = &srcs[i];
    }
    size_t dsz = ob_nbytes(n);
    if (!st) {
        host[OB_MAX_SRC] = malloc(dsz ? dsz : 1);
        if (!host[OB_MAX_SRC]) st = ob_fail(err, err_len, OB_ERR_NOMEM, "vulkan: fallback for %s: out of memory", n->name);
    }
    if (!st) {
        dst.data = host[OB_MAX_SRC];
        ob_cpu_ref_op(&dst);
        st = ob_vk_copy(vk, n->data, dst.data, dsz, true, err, err_len);
        for (int i = 0; i < OB_MAX_SRC && !st; i++)
            if (ob_op_writes_src(n, i)) st = ob_vk_copy(vk, n->src[i]->data, srcs[i].data, ob_nbytes(&srcs[i]), true, err, err_len);
    }
    for (int i = 0; i <= OB_MAX_SRC; i++) free(host[i]);
    return st;
}

/* The backend's deterministic flag into vk->det. The pipelines were built for the old
 * value (specialisation constant 9), so they go, and with them the recorded graph that
 * names them; the engine sets the flag before its first graph, so this runs at most once
 * a model (tests switch it back and forth). */
static ob_status set_det(ob_vk *vk, bool det, char *err, size_t err_len) {
    ob_status st = ob_vk_submit_wait(vk, err, err_len);
    if (!st) st = ob_vk_wait_idle(vk, err, err_len);
    if (st) return st;
    for (int s = 0; s < OB_VK_SH_COUNT; s++)
        for (int t = 0; t < OB_VK_PIPE_SLOTS; t++)
            if (vk->pipes[s][t]) {
                vkDestroyPipeline(vk->dev, vk->pipes[s][t], NULL);
                vk->pipes[s][t] = VK_NULL_HANDLE;
            }
    vk->prev_valid = false;
    vk->list_g = NULL;
    vk->det = det;
    return OB_OK;
}

static ob_status compute_graph(ob_backend *be, ob_graph *g, char *err, size_t err_len) {
    ob_vk *vk = be->ctx;
    if (vk->faulted)
        return ob_fail(err, err_len, OB_ERR_DEVICE, "vulkan: %s faulted earlier (device lost or hung)", vk->info.name);
    ob_status st = be->deterministic != vk->det ? set_det(vk, be->deterministic, err, err_len) : OB_OK;
    if (st) return st;
    ob_vk_prof *pr = &vk->prof;
    /* Anything recorded before this graph (none today) is finished first, so the pool
     * can grow and the step's times are the graph's alone. */
    const bool prof = pr->on && ob_vk_submit_wait(vk, err, err_len) == OB_OK && ob_vk_prof_reserve(vk, g->n);
    if (prof) {
        pr->in_step = true;
        pr->t_step = ob_time_s();
    }
    vk->q8_src = vk->pn_src = 0; /* a quantized x is kept within a graph only */
    ob_vk_hz_audit_reset(vk);
    ob_vk_hz_own_clear(vk);
    vk->ss_src = 0;
    /* the graph gcmd was listed from, back at that version: no host pass over its nodes */
    const bool unlisted = vk->reuse && vk->prev_valid && g->version && g == vk->list_g &&
                          g->version == vk->list_version && vk->gcmd_pool == (prof ? pr->pool : VK_NULL_HANDLE);
    if (!unlisted) vk->list_g = NULL;
    bool all_device = vk->reuse;
    for (int64_t i = 0; i < g->n && all_device && !unlisted; i++) {
        const ob_tensor *n = &g->nodes[i];
        all_device = n->op == OB_OP_LEAF || n->op == OB_OP_VIEW || ob_vk_supports_node(vk, n);
    }
    if (all_device) {
        /* Listed, then recorded only if the list changed. Anything still recorded on cmd
         * (nothing today) runs first: gcmd's submit follows it. */
        st = ob_vk_submit_wait(vk, err, err_len);
        if (!unlisted) {
            vk->listing = true;
            vk->n_list = 0;
            vk->mk_list.n = 0;
            vk->mk_list.levels = 0;
            vk->fold_n = 0;
            vk->need_barrier = false;
            vk->hz_all = true;
            for (int64_t i = 0; i < g->n && !st; i++) {
                ob_tensor *n = &g->nodes[i];
                if (n->op == OB_OP_LEAF || n->op == OB_OP_VIEW) continue;
                const int64_t from = i;
                st = record_at(vk, g, &i, err, err_len);
                if (!st && vk->fault_node[0]) st = ob_vk_fault_inject(vk, g, from, i, err, err_len);
            }
            vk->listing = false;
            if (!st) st = ob_vk_fold_upload(vk, err, err_len);
        }
        if (!st) {
            if (unlisted) vk->reused++;
            else if (same_list(vk)) {
                vk->reused++;
                if (vk->marks) swap_marks(vk);
            } else {
                st = record_list(vk, err, err_len);
            }
        }
        if (!st) st = submit_list(vk, err, err_len);
        if (!st) {
            vk->unlisted += unlisted;
            vk->list_g = g;
            vk->list_version = g->version;
        }
        if (prof) {
            pr->in_step = false;
            if (!st) pr->steps++;
        }
        return st;
    }
    for (int64_t i = 0; i < g->n && !st; i++) {
        ob_tensor *n = &g->nodes[i];
        if (n->op == OB_OP_LEAF || n->op == OB_OP_VIEW) continue;
        if (ob_vk_supports_node(vk, n)) {
            const int64_t from = i;
            st = record_at(vk, g, &i, err, err_len);
            if (!st && vk->fault_node[0]) st = ob_vk_fault_inject(vk, g, from, i, err, err_len);
        } else if (vk->allow_fallback && n->op < OB_OP_COUNT && n->op != OB_OP_LEAF) {
            st = ob_vk_submit_wait(vk, err, err_len);
            /* The fallback's own copies (staging path) are its cost, not the step's submits. */
            double t0 = prof ? ob_time_s() : 0;
            pr->in_step = false;
            if (!st) st = cpu_fallback(vk, n, err, err_len);
            vk->q8_src = vk->pn_src = 0; /* the host wrote device memory */
            if (prof) {
                pr->in_step = true;
                pr->fallback_ms += 1e3 * (ob_time_s() - t0);
                pr->t_step = ob_time_s();
            }
        } else {
            st = ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "vulkan: node %s (%s, %s) has no kernel", n->name,
                         ob_op_name(n->op), n->src[0] ? ob_type_name(n->src[0]->type) : "-");
        }
    }
    if (st) {
        pr->in_step = false;
        /* Drop what was recorded: a half graph must not run later. */
        if (vk->recording) {
            vkEndCommandBuffer(vk->cmd);
            vk->recording = false;
        }
        return st;
    }
    st = ob_vk_submit_wait(vk, err, err_len);
    if (prof) {
        pr->in_step = false;
        if (!st) pr->steps++;
    }
    return st;
}

static ob_status vk_compute(ob_backend *be, ob_graph *g, char *err, size_t err_len) {
    ob_vk *vk = be->ctx;
    ob_status st = compute_graph(be, g, err, err_len);
    vk->mk_node = NULL; /* the graph's nodes may go before the next dispatch */
    return st;
}

static void vk_destroy(ob_backend *be) {
    if (!be) return;
    ob_vk *vk = be->ctx;
    if (vk) {
        if (vk->prof.on) prof_print(vk);
        if (vk->prof.timeline) prof_timeline_print(vk);
        if (vk->prof.levels) prof_levels_print(vk);
        ob_vk_device_free(vk);
        free(vk);
    }
    free(be);
}

static size_t vk_free_memory(ob_backend *be) { return ob_vk_free_memory(be->ctx); }

static const ob_backend_iface g_vk_iface = {
    .name = "vulkan",
    .host_memory = false,
    .supports = vk_supports,
    .alloc = vk_alloc,
    .free_buf = vk_free_buf,
    .upload = vk_upload,
    .upload_weight = vk_upload_weight,
    .download = vk_download,
    .compute = vk_compute,
    .destroy = vk_destroy,
    .free_memory = vk_free_memory,
};

ob_backend *ob_backend_vulkan_new(int device, bool allow_fallback, char *err, size_t err_len) {
    ob_backend *be = calloc(1, sizeof(*be));
    ob_vk *vk = calloc(1, sizeof(*vk));
    if (!be || !vk) {
        free(be);
        free(vk);
        ob_fail(err, err_len, OB_ERR_NOMEM, "vulkan: out of memory");
        return NULL;
    }
    vk->allow_fallback = allow_fallback;
    if (ob_vk_device_init(vk, device, err, err_len) != OB_OK) {
        ob_vk_device_free(vk);
        free(vk);
        free(be);
        return NULL;
    }
    ob_log(OB_LOG_INFO, "vulkan: using %s (%.1f GiB, subgroup %u%s)", vk->info.name, vk->info.mem / 1073741824.0,
           vk->info.subgroup,
           !vk->host_visible ? "" : vk->staged_reads ? ", host-visible memory, staged reads" : ", host-visible memory");
    be->iface = &g_vk_iface;
    be->ctx = vk;
    if (ob_vk_iq_tables_init(be, err, err_len) != OB_OK) {
        vk_destroy(be);
        return NULL;
    }
    return be;
}
