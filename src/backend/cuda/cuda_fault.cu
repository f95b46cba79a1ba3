/* Faults that say where they happened. An illegal access inside a kernel kills the CUDA
 * context: the error surfaces at the step's synchronize (or at a launch after it), every
 * later call returns it, and device memory can no longer be read. What stays readable is
 * host memory, so the kernels leave progress marks in a host-mapped ring (cuda_compat.h,
 * OB_CU_MARK) and the host keeps a log of what each step enqueued (ob_cu_note): the last
 * mark of the step picks the launch out of the log, and the fault becomes one line naming
 * the op, the node and the kernel. The process then ends (the server stops taking work).
 *
 * The marks are one device counter and one ring per device, shared by every backend on
 * it, because each .cu's copy of the pointers is a __constant__ of the device's module,
 * not of a backend. Two backends stepping on one device at the same moment would mix
 * their numbers; the engine steps one model at a time (a draft model included).
 *
 * ONEBIT_CUDA_MARKS=0 leaves the marks out (a fault is then named by its step only).
 * ONEBIT_TEST_FAULT=<node name> (tests only) points the first source of that node's launch
 * unit at unmapped memory, so its kernel faults the way a real out-of-bounds read does. */
#include "backend/cuda/cuda_int.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

OB_CU_MARK_BIND(fault)

#define OB_CU_MARK_DEVICES 64

typedef struct {
    bool tried, ok;
    ob_cu_marks_dev dev;
    volatile unsigned long long *ring;
} marks_slot;

static marks_slot g_marks[OB_CU_MARK_DEVICES];
static pthread_mutex_t g_marks_mu = PTHREAD_MUTEX_INITIALIZER;

/* The device's counter and ring, made and bound on first use (the current device is
 * cx->device). Without them a fault is named by its step only. */
static bool marks_slot_open(int device, marks_slot *s) {
    void *seq = NULL, *ring = NULL, *dring = NULL;
    if (cudaMalloc(&seq, sizeof(unsigned long long)) != cudaSuccess ||
        cudaMemset(seq, 0, sizeof(unsigned long long)) != cudaSuccess ||
        cudaHostAlloc(&ring, sizeof(unsigned long long) * OB_CU_MARK_RING, cudaHostAllocMapped) != cudaSuccess ||
        cudaHostGetDevicePointer(&dring, ring, 0) != cudaSuccess) {
        cudaGetLastError();
        if (ring) cudaFreeHost(ring);
        if (seq) cudaFree(seq);
        ob_log(OB_LOG_WARN, "cuda: device %d: no progress marks (a fault will not name its kernel)", device);
        return false;
    }
    memset(ring, 0, sizeof(unsigned long long) * OB_CU_MARK_RING);
    s->dev.seq = (unsigned long long *)seq;
    s->dev.ring = (unsigned long long *)dring;
    s->ring = (volatile unsigned long long *)ring;
    bool ok = true;
#define OB_CU_BIND(tu) ok = ok && ob_cu_marks_bind_##tu(&s->dev) == cudaSuccess;
    OB_CU_MARK_TUS(OB_CU_BIND)
#undef OB_CU_BIND
    if (!ok) {
        /* some files may hold the pointers already: point them all back at nothing */
        cudaGetLastError();
        const ob_cu_marks_dev none = {NULL, NULL};
#define OB_CU_UNBIND(tu) (void)ob_cu_marks_bind_##tu(&none);
        OB_CU_MARK_TUS(OB_CU_UNBIND)
#undef OB_CU_UNBIND
        cudaGetLastError();
        ob_log(OB_LOG_WARN, "cuda: device %d: no progress marks (a fault will not name its kernel)", device);
    }
    return ok; /* the counter and ring stay allocated for the process */
}

bool ob_cu_marks_init(ob_cu_ctx *cx) {
    const char *tf = getenv("ONEBIT_TEST_FAULT");
    cx->fault_name = tf && tf[0] ? tf : NULL;
    cx->cur_node = -1;
    if (!cx->opt.marks || cx->device < 0 || cx->device >= OB_CU_MARK_DEVICES) return true;
    pthread_mutex_lock(&g_marks_mu);
    marks_slot *s = &g_marks[cx->device];
    if (!s->tried) {
        s->tried = true;
        s->ok = marks_slot_open(cx->device, s);
    }
    if (s->ok) {
        cx->mdev = s->dev;
        cx->ring = s->ring;
        cx->marks = true;
    }
    pthread_mutex_unlock(&g_marks_mu);
    return true;
}

void ob_cu_marks_free(ob_cu_ctx *cx) {
    free(cx->log);
    cx->log = NULL;
    cx->log_n = cx->log_cap = 0;
    for (int i = 0; i < OB_CU_MAX_EXEC; i++) {
        free(cx->execs[i].log);
        cx->execs[i].log = NULL;
        cx->execs[i].log_n = 0;
    }
}

static unsigned long long ring_top(const ob_cu_ctx *cx) {
    unsigned long long top = 0;
    for (int i = 0; i < OB_CU_MARK_RING; i++)
        if (cx->ring[i] > top) top = cx->ring[i];
    return top;
}

void ob_cu_marks_step(ob_cu_ctx *cx) {
    cx->log_n = 0;
    cx->cur_node = -1;
    if (cx->marks) cx->mark_base = ring_top(cx);
}

bool ob_cu_note_grow(ob_cu_ctx *cx) {
    const int64_t cap = cx->log_cap ? 2 * cx->log_cap : 512;
    ob_cu_launch_rec *l = (ob_cu_launch_rec *)realloc(cx->log, sizeof(*l) * (size_t)cap);
    if (!l) return false;
    cx->log = l;
    cx->log_cap = cap;
    return true;
}

bool ob_cu_log_keep(ob_cu_ctx *cx, ob_cu_exec *ex) {
    free(ex->log);
    ex->log = NULL;
    ex->log_n = 0;
    if (!cx->log_n) return true;
    ex->log = (ob_cu_launch_rec *)malloc(sizeof(*ex->log) * (size_t)cx->log_n);
    if (!ex->log) return false;
    memcpy(ex->log, cx->log, sizeof(*ex->log) * (size_t)cx->log_n);
    ex->log_n = cx->log_n;
    return true;
}

/* "MATMUL output (q6_K)": the op, the node's name and, for a MATMUL, its weight type. */
static void node_words(const ob_graph *g, int32_t node, char *out, size_t len) {
    if (!g || node < 0 || node >= g->n) {
        snprintf(out, len, "an unnamed launch");
        return;
    }
    const ob_tensor *t = &g->nodes[node];
    const char *ty = t->op == OB_OP_MATMUL && t->src[0] ? ob_type_name(t->src[0]->type) : NULL;
    snprintf(out, len, "%s %s%s%s%s", ob_op_name(t->op), t->name[0] ? t->name : "(unnamed)", ty ? " (" : "",
             ty ? ty : "", ty ? ")" : "");
}

/* The kernel as the launch spelled it, without the parentheses a template needs there. */
static void kernel_words(const char *k, char *out, size_t len) {
    size_t n = strlen(k);
    if (n >= 2 && k[0] == '(' && k[n - 1] == ')') { k++; n -= 2; }
    snprintf(out, len, "%.*s", (int)n, k);
}

/* Appends to a line (vsnprintf: the line is cut at cap, never overrun). */
static void put(char *dst, size_t cap, size_t *at, const char *fmt, ...) {
    if (*at >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    const int w = vsnprintf(dst + *at, cap - *at, fmt, ap);
    va_end(ap);
    if (w > 0) *at += (size_t)w;
}

void ob_cu_fault_name(ob_cu_ctx *cx, const ob_graph *g, const ob_cu_launch_rec *log, int64_t n, cudaError_t e) {
    const char *what = cudaGetErrorString(e);
    ob_note_device_fault();
    if (!cx->marks || !log || n <= 0) {
        snprintf(cx->last_err, sizeof(cx->last_err), "%s in a step of %lld launches (%s)", what, (long long)n,
                 cx->marks ? "none logged" : "progress marks off: ONEBIT_CUDA_MARKS=0");
        return;
    }
    /* The k-th marked launch of the step is the last one that began: the ones before it
     * had finished (its mark follows its PDL wait, or stream order without PDL). */
    const unsigned long long k = ring_top(cx) - cx->mark_base;
    int64_t j = -1;
    unsigned long long seen = 0;
    for (int64_t i = 0; i < n; i++)
        if (log[i].marked && ++seen == k) { j = i; break; }
    if (k == 0) {
        j = 0; /* nothing of the step began: its first launch (or what came before it) */
    } else if (j < 0) {
        snprintf(cx->last_err, sizeof(cx->last_err), "%s after the last of %lld launches of the step", what, (long long)n);
        return;
    }
    /* a library launch (cuBLAS) leaves no mark: one that follows the last mark may be it */
    const ob_cu_launch_rec *after = j + 1 < n && !log[j + 1].marked ? &log[j + 1] : NULL;
    char node[192], kern[128], node2[192] = "", kern2[128] = "";
    node_words(g, log[j].node, node, sizeof node);
    kernel_words(log[j].kernel, kern, sizeof kern);
    if (after) {
        node_words(g, after->node, node2, sizeof node2);
        kernel_words(after->kernel, kern2, sizeof kern2);
    }
    size_t at = 0;
    put(cx->last_err, sizeof(cx->last_err), &at, "%s in %s (kernel %s, launch %lld of %lld in the step)", what, node, kern,
        (long long)(j + 1), (long long)n);
    if (after) put(cx->last_err, sizeof(cx->last_err), &at, ", or in %s (%s) after it", node2, kern2);
}

void *ob_cu_fault_inject(ob_cu_ctx *cx, ob_tensor *n) {
    if (!cx->fault_name || !n->src[0] || strcmp(n->name, cx->fault_name) != 0) return NULL;
    void *keep = n->src[0]->data;
    /* low device addresses are never mapped; the offsets a kernel adds stay far below any
     * allocation */
    n->src[0]->data = (void *)(uintptr_t)0x1000;
    return keep;
}
