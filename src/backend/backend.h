/* The backend seam: a struct of function pointers plus an opaque context. The engine
 * talks to every device through this and nothing else. */
#ifndef OB_BACKEND_BACKEND_H
#define OB_BACKEND_BACKEND_H

#include "graph/graph.h"

typedef struct ob_backend ob_backend;

typedef struct ob_backend_iface {
    const char *name;            /* "cpu", "cuda", "vulkan" */
    bool host_memory;            /* buffers are host memory: weights may be borrowed from the mmap */
    /* Can this node (op, input types, shape) run here? Must be cheap and pure. */
    bool (*supports)(ob_backend *b, const ob_tensor *node);
    void *(*alloc)(ob_backend *b, size_t size);                /* NULL on failure; 64-byte aligned */
    void (*free_buf)(ob_backend *b, void *p);
    ob_status (*upload)(ob_backend *b, void *dst, const void *src, size_t size);
    ob_status (*download)(ob_backend *b, void *dst, const void *src, size_t size);
    /* Runs every non-leaf, non-view node of g in order. Node data pointers are backend memory. */
    ob_status (*compute)(ob_backend *b, ob_graph *g, char *err, size_t err_len);
    void (*destroy)(ob_backend *b);
    /* Device memory free now, in bytes (NULL or 0: host memory or unknown): the default
     * memory budget when --mem-budget is not given. */
    size_t (*free_memory)(ob_backend *b);
    /* Optional (NULL: upload): a model weight of `type` whose rows are ne0 elements. The
     * backend may keep it in a layout of its own; download gives back the bytes uploaded.
     * Last, so the positional initializers of the C++ (CUDA/HIP) backends leave it NULL. */
    ob_status (*upload_weight)(ob_backend *b, void *dst, const void *src, size_t size, ob_type type, int64_t ne0);
} ob_backend_iface;

struct ob_backend {
    const ob_backend_iface *iface;
    void *ctx;
    /* Batch-invariant mode (ob_model_params.deterministic), set by the engine before the
     * first compute: every output element is reduced in one order whatever the batch size
     * (kernel choice, split sizes and fusions that depend only on shapes other than the
     * token count). The CPU backend always is. */
    bool deterministic;
};

/* CPU backend; n_threads 0 = number of online cores. */
ob_backend *ob_backend_cpu_new(int n_threads);

/* GPU backends (only in builds with the option on). allow_fallback: nodes the device has
 * no kernel for run on the CPU reference (each such split is logged); without it the
 * engine's placement check refuses them before anything runs. NULL + err on failure. */
#ifdef ONEBIT_CUDA
ob_backend *ob_backend_cuda_new(int device, bool allow_fallback, char *err, size_t err_len);
#endif
#ifdef ONEBIT_VULKAN
ob_backend *ob_backend_vulkan_new(int device, bool allow_fallback, char *err, size_t err_len);
#endif

static inline void ob_backend_free(ob_backend *b) { if (b) b->iface->destroy(b); }

#endif
