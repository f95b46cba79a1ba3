/* The CPU backend: the ob_backend interface over host memory, and the compute loop. A graph
 * is one pool dispatch: its nodes are cut into stages (see ob_cpu_stage) and the threads
 * meet at one barrier between stages, not after every node. */
#include "backend/cpu/cpu.h"
#include "graph/op_table.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* One node as scheduled: its kernel and its slice of the shared work buffer. */
typedef struct ob_cpu_item {
    ob_tensor *node;
    ob_cpu_kernel_fn fn;
    size_t woff, wsize;
    int64_t next; /* the node's shared counter (ob_cpu_op_ctx.next), 0 at each compute */
} ob_cpu_item;

/* Nodes run between two barriers. A serial stage is a chain of tiny nodes that thread 0
 * runs alone, in order; a parallel stage is one node, or several mutually independent
 * matmuls, each split over every thread. */
typedef struct ob_cpu_stage {
    int64_t first, count;   /* range of items */
    bool serial;
} ob_cpu_stage;

typedef struct ob_cpu_backend {
    ob_cpu_pool *pool;
    int nth;
    void *wdata;   /* shared work buffer: grows to the largest stage seen, never shrinks */
    size_t wsize;
    /* The schedule of the graph being computed; arrays grow, never shrink. */
    ob_cpu_item *items;     /* [cap_items] */
    ob_cpu_stage *stages;   /* [cap_stages] */
    int64_t n_items, cap_items, n_stages, cap_stages;
    /* The pool runs one graph at a time; contexts sharing a backend take turns here. */
    pthread_mutex_t mu;
} ob_cpu_backend;

/* ---- what the CPU can run ------------------------------------------------------------ */

static bool has_to_float(ob_type t) {
    const ob_type_traits *tr = ob_type_traits_get(t);
    return tr && tr->to_float;
}

/* Rows of at least one element (ob_op_valid already holds them to whole blocks). */
static bool row_aligned(ob_type t, int64_t n) {
    int64_t bs = ob_type_block_size(t);
    return bs > 0 && n > 0 && n % bs == 0;
}

static int64_t gcd64(int64_t a, int64_t b) { while (b) { int64_t r = a % b; a = b; b = r; } return a; }

/* The shapes and types are ob_op_valid's; what is left are the reference kernels' limits. */
static bool supports_node(const ob_tensor *n) {
    if (!ob_op_valid(n)) return false;
    const ob_tensor *a = n->src[0];
    switch (n->op) {
    case OB_OP_LEAF:
    case OB_OP_VIEW:
    case OB_OP_RMS_NORM:
    case OB_OP_LAYER_NORM:
    case OB_OP_ADD:
    case OB_OP_MUL:
    case OB_OP_SCALE:
    case OB_OP_ACT:
    case OB_OP_SOFTMAX:
    case OB_OP_GLU:
    case OB_OP_ATTENTION:
    case OB_OP_POOL:
    case OB_OP_SAMPLE:
    case OB_OP_MOE_GATE:
    case OB_OP_MOE_SUM:
    case OB_OP_CONCAT:
    case OB_OP_SLICE:
    case OB_OP_ADD_ID:
    case OB_OP_SSM_CONV:
    case OB_OP_DELTA_NET:
        return true;
    case OB_OP_MATMUL_ID:
        return has_to_float(a->type) && row_aligned(a->type, a->ne[0]) && ob_cpu_matmul_has_kernel(a->type);
    case OB_OP_GET_ROWS:
        return has_to_float(a->type) && row_aligned(a->type, a->ne[0]);
    case OB_OP_MATMUL:
        return has_to_float(a->type) && row_aligned(a->type, a->ne[0]) && ob_cpu_matmul_has_kernel(a->type);
    case OB_OP_ROPE:
        return n->ip[0] <= 1024;
    case OB_OP_KV_STORE:
        return ob_nelements(n) >= 1;
    case OB_OP_CPY: {
        const ob_type_traits *ts = ob_type_traits_get(a->type), *td = ob_type_traits_get(n->type);
        if (!ts->to_float || !(td->from_float || n->type == OB_TYPE_F32)) return false;
        if (!row_aligned(a->type, a->ne[0]) || !row_aligned(n->type, n->ne[0])) return false;
        int64_t bs = ts->block_size, bd = td->block_size, l = bs / gcd64(bs, bd) * bd;
        return l <= 256 && ob_nelements(a) % l == 0;
    }
    default:
        return false;
    }
}

static bool cpu_supports(ob_backend *be, const ob_tensor *node) { return supports_node(node); }

/* ---- memory -------------------------------------------------------------------------- */

static void *cpu_alloc(ob_backend *be, size_t size) {
    size_t sz = (size + 63) & ~(size_t)63;
    if (sz < size) return NULL;
    return aligned_alloc(64, sz ? sz : 64);
}

static void cpu_free_buf(ob_backend *be, void *p) { free(p); }

static ob_status cpu_copy(ob_backend *be, void *dst, const void *src, size_t size) {
    if (size) memcpy(dst, src, size);
    return OB_OK;
}

/* ---- compute ------------------------------------------------------------------------- */

static ob_cpu_kernel_fn kernel_for(ob_op op) {
    switch (op) {
    case OB_OP_GET_ROWS: return ob_cpu_op_get_rows;
    case OB_OP_RMS_NORM: return ob_cpu_op_rms_norm;
    case OB_OP_LAYER_NORM: return ob_cpu_op_layer_norm;
    case OB_OP_MATMUL: return ob_cpu_op_matmul;
    case OB_OP_ADD: return ob_cpu_op_add;
    case OB_OP_MUL: return ob_cpu_op_mul;
    case OB_OP_SCALE: return ob_cpu_op_scale;
    case OB_OP_ROPE: return ob_cpu_op_rope;
    case OB_OP_KV_STORE: return ob_cpu_op_kv_store;
    case OB_OP_ATTENTION: return ob_cpu_op_attention;
    case OB_OP_GLU: return ob_cpu_op_glu;
    case OB_OP_ACT: return ob_cpu_op_act;
    case OB_OP_SOFTMAX: return ob_cpu_op_softmax;
    case OB_OP_CPY: return ob_cpu_op_cpy;
    case OB_OP_POOL: return ob_cpu_op_pool;
    case OB_OP_SAMPLE: return ob_cpu_op_sample;
    case OB_OP_MOE_GATE: return ob_cpu_op_moe_gate;
    case OB_OP_MATMUL_ID: return ob_cpu_op_matmul_id;
    case OB_OP_MOE_SUM: return ob_cpu_op_moe_sum;
    case OB_OP_CONCAT: return ob_cpu_op_concat;
    case OB_OP_SLICE: return ob_cpu_op_slice;
    case OB_OP_ADD_ID: return ob_cpu_op_add_id;
    case OB_OP_SSM_CONV: return ob_cpu_op_ssm_conv;
    case OB_OP_DELTA_NET: return ob_cpu_op_delta_net;
    default: return NULL;
    }
}

size_t ob_cpu_work_size(const ob_tensor *node, int nth) {
    switch (node->op) {
    case OB_OP_MATMUL: return ob_cpu_matmul_work_size(node, nth);
    case OB_OP_ATTENTION: return ob_cpu_attention_work_size(node, nth);
    case OB_OP_MOE_GATE:
    case OB_OP_MATMUL_ID: return ob_cpu_moe_work_size(node, nth);
    case OB_OP_DELTA_NET: return ob_cpu_delta_net_work_size(node, nth);
    default: return 0;
    }
}

/* Index inputs come from requests: a bad position or id is an error, not a wild write. */
static ob_status check_indices(const ob_tensor *n, char *err, size_t err_len) {
    if (n->op == OB_OP_GET_ROWS) {
        const int32_t *ids = n->src[1]->data;
        int64_t rows = ob_nrows(n->src[0]), T = ob_nelements(n->src[1]);
        for (int64_t i = 0; i < T; i++)
            if (ids[i] < 0 || ids[i] >= rows)
                return ob_fail(err, err_len, OB_ERR_ARG, "%s: row id %d out of range [0, %lld)", n->name,
                               (int)ids[i], (long long)rows);
    } else if (n->op == OB_OP_KV_STORE || n->op == OB_OP_ATTENTION) {
        const ob_tensor *cache = n->src[1];
        const int32_t *pos = n->src[n->op == OB_OP_KV_STORE ? 2 : 3]->data;
        const int32_t *seq = n->src[n->op == OB_OP_KV_STORE ? 3 : 4]->data;
        int64_t T = ob_nelements(n->src[n->op == OB_OP_KV_STORE ? 2 : 3]);
        int64_t cps = n->ip[0], cells = ob_nrows(cache);
        for (int64_t i = 0; i < T; i++)
            if (pos[i] < 0 || pos[i] >= cps || seq[i] < 0 || (int64_t)seq[i] * cps + cps > cells)
                return ob_fail(err, err_len, OB_ERR_CONTEXT, "%s: token %lld (seq %d, pos %d) outside the KV cache",
                               n->name, (long long)i, (int)seq[i], (int)pos[i]);
    } else if (n->op == OB_OP_SSM_CONV || n->op == OB_OP_DELTA_NET) {
        const ob_tensor *state = n->src[n->op == OB_OP_SSM_CONV ? 2 : 3];
        const int32_t *seq = n->src[n->op == OB_OP_SSM_CONV ? 4 : 5]->data;
        const int64_t T = ob_nelements(n->src[n->op == OB_OP_SSM_CONV ? 4 : 5]);
        for (int64_t i = 0; i < T; i++)
            if (seq[i] < 0 || seq[i] >= ob_nrows(state))
                return ob_fail(err, err_len, OB_ERR_CONTEXT, "%s: token %lld of sequence %d, which has no recurrent state",
                               n->name, (long long)i, (int)seq[i]);
    }
    return OB_OK;
}

/* A node this small costs less than the barrier a split would need: chains of such nodes
 * run on one thread with a single barrier after them. A decode step of a small model is
 * mostly such nodes between its matmuls. */
#define OB_CPU_TINY_ELEMS 4096
/* Most matmuls one parallel stage holds (q/k/v, gate/up in practice). */
#define OB_CPU_MAX_GROUP 8

static bool is_tiny(const ob_tensor *n) {
    switch (n->op) {
    case OB_OP_RMS_NORM:
    case OB_OP_LAYER_NORM:
    case OB_OP_ADD:
    case OB_OP_MUL:
    case OB_OP_SCALE:
    case OB_OP_ROPE:
    case OB_OP_GLU:
    case OB_OP_ACT:
    case OB_OP_SOFTMAX:
    case OB_OP_CPY:
    case OB_OP_GET_ROWS:
    case OB_OP_CONCAT:
    case OB_OP_SLICE:
    case OB_OP_ADD_ID:
        return ob_nelements(n) <= OB_CPU_TINY_ELEMS;
    case OB_OP_KV_STORE:
    case OB_OP_MOE_GATE:
    case OB_OP_MOE_SUM:
    case OB_OP_SSM_CONV:
        return ob_nelements(n->src[0]) <= OB_CPU_TINY_ELEMS;
    default:
        return false;
    }
}

static bool overlaps(const ob_tensor *a, const ob_tensor *b) {
    if (!a || !b || !a->data || !b->data) return false;
    const char *a0 = a->data, *b0 = b->data;
    return a0 < b0 + ob_nbytes(b) && b0 < a0 + ob_nbytes(a);
}

/* Whether matmul m may run in the same stage as the earlier matmul e: neither reads what
 * the other writes, and their outputs are disjoint (the planner reuses scratch memory, so
 * an output may sit where a finished node's input was). */
static bool independent(const ob_tensor *e, const ob_tensor *m) {
    for (int s = 0; s < 2; s++)
        if (overlaps(e->src[s], m) || overlaps(m->src[s], e)) return false;
    return !overlaps(e, m);
}

static bool grow(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return true;
    int64_t nc = OB_MAX(need, *cap * 2);
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return false;
    *p = q;
    *cap = nc;
    return true;
}

/* Checks every node, then cuts the graph into stages. Nothing runs if any node fails. */
static ob_status schedule(ob_cpu_backend *cb, ob_graph *g, size_t *wneed, char *err, size_t err_len) {
    cb->n_items = cb->n_stages = 0;
    *wneed = 0;
    if (!grow((void **)&cb->items, &cb->cap_items, g->n, sizeof(*cb->items)) ||
        !grow((void **)&cb->stages, &cb->cap_stages, g->n, sizeof(*cb->stages)))
        return ob_fail(err, err_len, OB_ERR_NOMEM, "cpu: schedule for %lld nodes", (long long)g->n);
    ob_cpu_stage *cur = NULL;
    size_t cur_w = 0;
    for (int64_t i = 0; i < g->n; i++) {
        ob_tensor *n = &g->nodes[i];
        if (n->op == OB_OP_LEAF || n->op == OB_OP_VIEW) continue;
        ob_cpu_kernel_fn fn = kernel_for(n->op);
        if (!fn || !supports_node(n))
            return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "cpu: node %s (%s, %s) not supported", n->name,
                           ob_op_name(n->op), ob_type_name(n->type) ? ob_type_name(n->type) : "?");
        ob_status st = check_indices(n, err, err_len);
        if (st != OB_OK) return st;
        const bool tiny = cb->nth > 1 && is_tiny(n);
        bool join = false;
        if (cur && tiny && cur->serial) join = true;
        else if (cur && !cur->serial && n->op == OB_OP_MATMUL && cur->count < OB_CPU_MAX_GROUP) {
            join = true;
            for (int64_t k = cur->first; k < cur->first + cur->count && join; k++)
                join = cb->items[k].node->op == OB_OP_MATMUL && independent(cb->items[k].node, n);
        }
        if (!join) {
            cur = &cb->stages[cb->n_stages++];
            cur->first = cb->n_items;
            cur->count = 0;
            cur->serial = tiny;
            cur_w = 0;
        }
        /* A serial stage's nodes run one after another, so they share one work area. */
        size_t ws = (ob_cpu_work_size(n, tiny ? 1 : cb->nth) + 63) & ~(size_t)63;
        ob_cpu_item *it = &cb->items[cb->n_items++];
        it->node = n;
        it->fn = fn;
        it->woff = tiny ? 0 : cur_w;
        it->wsize = ws;
        it->next = 0;
        if (!tiny) cur_w += ws;
        cur->count++;
        *wneed = OB_MAX(*wneed, tiny ? ws : cur_w);
    }
    return OB_OK;
}

static void run_stages(void *arg, int ith, int nth) {
    ob_cpu_backend *cb = arg; /* items: only their counters change here, through atomics */
    ob_cpu_op_ctx c = {.ith = ith, .nth = nth, .pool = cb->pool};
    ob_cpu_op_ctx one = {.ith = 0, .nth = 1, .pool = cb->pool};
    for (int64_t s = 0; s < cb->n_stages; s++) {
        const ob_cpu_stage *st = &cb->stages[s];
        if (s > 0) ob_cpu_sync(&c);
        if (st->serial && ith != 0) continue;
        ob_cpu_op_ctx *cc = st->serial ? &one : &c;
        for (int64_t k = st->first; k < st->first + st->count; k++) {
            ob_cpu_item *it = &cb->items[k];
            cc->wdata = (char *)cb->wdata + it->woff;
            cc->wsize = it->wsize;
            cc->next = &it->next;
            it->fn(it->node, cc);
        }
    }
}

static ob_status compute_locked(ob_cpu_backend *cb, ob_graph *g, char *err, size_t err_len) {
    size_t ws = 0;
    ob_status st = schedule(cb, g, &ws, err, err_len);
    if (st != OB_OK) return st;
    if (ws > cb->wsize) {
        size_t sz = (ws + 63) & ~(size_t)63;
        void *p = aligned_alloc(64, sz);
        if (!p) return ob_fail(err, err_len, OB_ERR_NOMEM, "cpu: work buffer of %zu bytes", ws);
        free(cb->wdata);
        cb->wdata = p;
        cb->wsize = sz;
    }
    if (cb->n_stages > 0) ob_cpu_pool_run(cb->pool, run_stages, cb);
    return OB_OK;
}

static ob_status cpu_compute(ob_backend *be, ob_graph *g, char *err, size_t err_len) {
    ob_cpu_backend *cb = be->ctx;
    pthread_mutex_lock(&cb->mu);
    ob_status st = compute_locked(cb, g, err, err_len);
    pthread_mutex_unlock(&cb->mu);
    return st;
}

static void cpu_destroy(ob_backend *be) {
    if (!be) return;
    ob_cpu_backend *cb = be->ctx;
    if (cb) {
        ob_cpu_pool_free(cb->pool);
        pthread_mutex_destroy(&cb->mu);
        free(cb->wdata);
        free(cb->items);
        free(cb->stages);
        free(cb);
    }
    free(be);
}

static const ob_backend_iface g_cpu_iface = {
    .name = "cpu",
    .host_memory = true,
    .supports = cpu_supports,
    .alloc = cpu_alloc,
    .free_buf = cpu_free_buf,
    .upload = cpu_copy,
    .download = cpu_copy,
    .compute = cpu_compute,
    .destroy = cpu_destroy,
};

ob_backend *ob_backend_cpu_new(int n_threads) {
    if (n_threads <= 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = nc > 0 ? (int)OB_MIN(nc, 512) : 1;
    }
    ob_backend *be = calloc(1, sizeof(*be));
    ob_cpu_backend *cb = calloc(1, sizeof(*cb));
    if (!be || !cb) { free(be); free(cb); return NULL; }
    cb->nth = n_threads;
    pthread_mutex_init(&cb->mu, NULL);
    cb->pool = ob_cpu_pool_new(n_threads);
    if (!cb->pool) { pthread_mutex_destroy(&cb->mu); free(be); free(cb); return NULL; }
    be->iface = &g_cpu_iface;
    be->ctx = cb;
    return be;
}
