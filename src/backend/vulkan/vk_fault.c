/* Fault containment: no wait on the device is unbounded, and a hang or a device loss ends
 * in one error line that names what was running. Progress marks (vk_internal.h's
 * ob_vk_marks) say how far a command buffer got: the first level whose mark was written
 * and whose successor's was not holds the dispatch that did not finish. The line is
 * returned in err only (the caller prints it), never logged here as well. */
#include "backend/vulkan/vk_internal.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define OB_VK_FAULT_LIST 4 /* dispatches of the unfinished level named in the line */

void ob_vk_fault_env(ob_vk *vk) {
    vk->marks = vk->opt.marks;
    vk->timeout_s = vk->opt.timeout_s; /* at most a year: the wait's nanoseconds stay far inside 64 bits */
    const char *fn = getenv("ONEBIT_TEST_FAULT");
    vk->fault_node[0] = 0;
    if (fn && *fn) {
        snprintf(vk->fault_node, sizeof(vk->fault_node), "%s", fn);
        ob_log(OB_LOG_INFO, "vulkan: ONEBIT_TEST_FAULT: a dispatch that never finishes follows node %s (test only)",
               vk->fault_node);
    }
}

ob_status ob_vk_fault_init(ob_vk *vk, char *err, size_t err_len) {
    ob_status st = OB_OK;
    if (vk->marks) {
        st = ob_vk_buffer_new(vk, sizeof(uint32_t), true, &vk->mark_buf, err, err_len);
        if (st) return st;
        ob_vk_mark_reset(vk);
    }
    if (vk->fault_node[0]) {
        /* a device buffer (the shader reaches it by address), its flag word zeroed */
        static const uint32_t zero[4];
        st = ob_vk_buffer_new(vk, sizeof(zero), false, &vk->fault_buf, err, err_len);
        if (!st) st = ob_vk_copy_at(vk, &vk->fault_buf, 0, (void *)zero, sizeof(zero), true, err, err_len);
    }
    return st;
}

void ob_vk_fault_free(ob_vk *vk) {
    /* a faulted device may still run the work that uses them: they go with the process */
    if (vk->dev && !vk->faulted) {
        if (vk->mark_buf.buf) ob_vk_buffer_free(vk, &vk->mark_buf);
        if (vk->fault_buf.buf) ob_vk_buffer_free(vk, &vk->fault_buf);
    }
    ob_vk_marks *t[3] = {&vk->mk_cmd, &vk->mk_list, &vk->mk_prev};
    for (int i = 0; i < 3; i++) {
        free(t[i]->e);
        memset(t[i], 0, sizeof(*t[i]));
    }
}

ob_status ob_vk_mark_add(ob_vk *vk, ob_vk_marks *t, ob_vk_shader sh, bool level_start, char *err, size_t err_len) {
    if (t->n == t->cap) {
        int64_t cap = t->cap ? 2 * t->cap : 256;
        ob_vk_mark *e = realloc(t->e, sizeof(*e) * (size_t)cap);
        if (!e) return ob_fail(err, err_len, OB_ERR_NOMEM, "vulkan: out of memory for progress marks");
        t->e = e;
        t->cap = cap;
    }
    if (level_start || t->n == 0) t->levels++;
    ob_vk_mark *m = &t->e[t->n++];
    m->level = t->levels;
    m->sh = (uint32_t)sh;
    const ob_tensor *n = vk->mk_node;
    m->op = n ? (int32_t)n->op : -1;
    snprintf(m->node, sizeof(m->node), "%s", n ? n->name : "");
    return OB_OK;
}

void ob_vk_mark_write(ob_vk *vk, VkCommandBuffer cb, uint32_t value) {
    vkCmdUpdateBuffer(cb, vk->mark_buf.buf, 0, sizeof(value), &value);
}

void ob_vk_mark_reset(ob_vk *vk) {
    if (vk->mark_buf.map) *(volatile uint32_t *)vk->mark_buf.map = 0;
}

static uint32_t mark_read(const ob_vk *vk) {
    return vk->mark_buf.map ? *(volatile const uint32_t *)vk->mark_buf.map : 0;
}

/* Appends to s (cap bytes, at *at), truncating. */
__attribute__((format(printf, 4, 5))) static void put(char *s, size_t cap, size_t *at, const char *fmt, ...) {
    if (*at + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(s + *at, cap - *at, fmt, ap);
    va_end(ap);
    if (w > 0) *at = OB_MIN(cap - 1, *at + (size_t)w);
}

static void put_mark(char *s, size_t cap, size_t *at, const ob_vk_mark *m) {
    const char *sh = m->sh < OB_VK_SH_COUNT ? ob_vk_spv_table[m->sh].name : "?";
    if (m->sh == OB_VK_SH_FAULT) put(s, cap, at, "fault");
    else if (m->op < 0) put(s, cap, at, "a dispatch outside a graph (shader %s)", sh);
    else put(s, cap, at, "%s %s (shader %s)", ob_op_name((ob_op)m->op), m->node[0] ? m->node : "(unnamed)", sh);
}

/* Where the command buffer of table t stopped, from the mark word. */
static void where(const ob_vk *vk, const ob_vk_marks *t, char *s, size_t cap) {
    size_t at = 0;
    s[0] = 0;
    if (!t) {
        put(s, cap, &at, " waiting for the queue to go idle");
        return;
    }
    if (!vk->marks) {
        put(s, cap, &at, " (progress marks off: ONEBIT_VK_MARKS=0)");
        return;
    }
    if (t->n == 0) {
        put(s, cap, &at, " in a command buffer without dispatches (copies)");
        return;
    }
    const uint32_t m = mark_read(vk), L = t->levels;
    if (m == 0) {
        put(s, cap, &at, " before the first of its %u levels began", L);
        return;
    }
    if (m > L) {
        put(s, cap, &at, " after the last of its %u levels (every dispatch finished)", L);
        return;
    }
    int64_t first = 0, k = 0;
    while (first < t->n && t->e[first].level < m) first++;
    while (first + k < t->n && t->e[first + k].level == m) k++;
    if (k == 1) {
        put(s, cap, &at, " in ");
        put_mark(s, cap, &at, &t->e[first]);
        put(s, cap, &at, " [level %u of %u]", m, L);
        return;
    }
    put(s, cap, &at, " in level %u of %u, one of its %lld dispatches: ", m, L, (long long)k);
    for (int64_t i = 0; i < k && i < OB_VK_FAULT_LIST; i++) {
        if (i) put(s, cap, &at, ", ");
        put_mark(s, cap, &at, &t->e[first + i]);
    }
    if (k > OB_VK_FAULT_LIST) put(s, cap, &at, " and %lld more", (long long)(k - OB_VK_FAULT_LIST));
}

ob_status ob_vk_fault_fail(ob_vk *vk, VkResult r, const ob_vk_marks *t, char *err, size_t err_len) {
    vk->faulted = true;
    ob_note_device_fault();
    char loc[768];
    where(vk, t, loc, sizeof(loc));
    if (r == VK_TIMEOUT)
        return ob_fail(err, err_len, OB_ERR_DEVICE, "vulkan: %s: no progress for %g s (ONEBIT_VK_TIMEOUT_S)%s",
                       vk->info.name, vk->timeout_s, loc);
    if (r == VK_ERROR_DEVICE_LOST)
        return ob_fail(err, err_len, OB_ERR_DEVICE, "vulkan: %s: device lost (VK_ERROR_DEVICE_LOST)%s", vk->info.name,
                       loc);
    return ob_fail(err, err_len, OB_ERR_DEVICE, "vulkan: %s: waiting for the device failed (VkResult %d)%s",
                   vk->info.name, (int)r, loc);
}

ob_status ob_vk_fence_wait(ob_vk *vk, const ob_vk_marks *t, char *err, size_t err_len) {
    /* In slices of at most a second while marks can move: the clock restarts whenever one
     * does, so only a stall of timeout_s fails, however long the whole submission runs. */
    const bool watch = vk->marks && t && t->n;
    const double slice = watch && vk->timeout_s > 1.0 ? 1.0 : vk->timeout_s;
    uint32_t seen = watch ? mark_read(vk) : 0;
    double t_moved = ob_time_s();
    for (;;) {
        VkResult r = vkWaitForFences(vk->dev, 1, &vk->fence, VK_TRUE, (uint64_t)(slice * 1e9));
        if (r == VK_SUCCESS) r = vkResetFences(vk->dev, 1, &vk->fence);
        if (r == VK_SUCCESS) return OB_OK;
        if (r != VK_TIMEOUT) return ob_vk_fault_fail(vk, r, t, err, err_len);
        const double now = ob_time_s();
        const uint32_t m = watch ? mark_read(vk) : 0;
        if (m != seen) {
            seen = m;
            t_moved = now;
        } else if (now - t_moved >= vk->timeout_s) {
            return ob_vk_fault_fail(vk, VK_TIMEOUT, t, err, err_len);
        }
    }
}

ob_status ob_vk_wait_idle(ob_vk *vk, char *err, size_t err_len) {
    if (vk->faulted) return ob_fail(err, err_len, OB_ERR_DEVICE, "vulkan: %s faulted earlier", vk->info.name);
    if (!vk->fence) return OB_OK; /* nothing was ever submitted */
    /* an empty batch's fence signals once everything submitted before it has finished */
    VkResult r = vkQueueSubmit(vk->queue, 0, NULL, vk->fence);
    if (r == VK_ERROR_DEVICE_LOST) return ob_vk_fault_fail(vk, r, NULL, err, err_len);
    if (r != VK_SUCCESS)
        return ob_fail(err, err_len, OB_ERR_DEVICE, "vulkan: %s: queue submission failed (VkResult %d)", vk->info.name,
                       (int)r);
    return ob_vk_fence_wait(vk, NULL, err, err_len);
}

ob_status ob_vk_fault_inject(ob_vk *vk, const ob_graph *g, int64_t from, int64_t to, char *err, size_t err_len) {
    if (!vk->fault_node[0] || !vk->fault_buf.buf) return OB_OK;
    bool hit = false;
    for (int64_t i = from; i <= to && i < g->n && !hit; i++) hit = !strcmp(g->nodes[i].name, vk->fault_node);
    if (!hit) return OB_OK;
    const ob_tensor *was = vk->mk_node;
    vk->mk_node = NULL;
    ob_vk_pc pc = {.a = vk->fault_buf.addr};
    /* the most workgroups a dispatch takes: shaders/fault.comp says why on a CPU device */
    ob_status st = ob_vk_dispatch(vk, OB_VK_SH_FAULT, OB_TYPE_F32, &pc, (uint64_t)65535 * 65535, err, err_len);
    vk->mk_node = was;
    return st;
}
