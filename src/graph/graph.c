#include "graph/graph.h"
#include "format/quant.h"
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

ob_graph *ob_graph_new(int64_t cap) {
    ob_graph *g = calloc(1, sizeof(*g));
    if (!g) return NULL;
    g->nodes = calloc((size_t)cap, sizeof(ob_tensor));
    if (!g->nodes) { free(g); return NULL; }
    g->cap = cap;
    return g;
}

void ob_graph_free(ob_graph *g) {
    if (!g) return;
    free(g->nodes);
    free(g);
}

void ob_graph_reset(ob_graph *g) { g->n = 0; g->scratch_size = 0; g->version = 0; }

uint64_t ob_graph_new_version(void) {
    static _Atomic uint64_t last;
    return ++last;
}

int64_t ob_nelements(const ob_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }
int64_t ob_nrows(const ob_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }
size_t ob_nbytes(const ob_tensor *t) { return ob_row_size(t->type, t->ne[0]) * (size_t)ob_nrows(t); }

static ob_tensor *new_node(ob_graph *g, ob_op op, ob_type type, int n_dims, const int64_t *ne) {
    OB_ASSERT(g->n < g->cap);
    ob_tensor *t = &g->nodes[g->n];
    memset(t, 0, sizeof(*t));
    t->op = op;
    t->type = type;
    t->id = g->n++;
    for (int i = 0; i < 4; i++) t->ne[i] = i < n_dims ? ne[i] : 1;
    return t;
}

ob_tensor *ob_sample(ob_graph *g, ob_tensor *logits, ob_tensor *params) {
    int64_t ne[1] = {ob_nrows(logits)};
    ob_tensor *t = new_node(g, OB_OP_SAMPLE, OB_TYPE_I32, 1, ne);
    t->src[0] = logits;
    t->src[1] = params;
    snprintf(t->name, sizeof(t->name), "sample");
    return t;
}

ob_tensor *ob_moe_gate(ob_graph *g, ob_tensor *logits, ob_tensor *bias, int k, ob_moe_gating gating, bool norm,
                       float scale) {
    int64_t ne[2] = {2 * (int64_t)k, ob_nrows(logits)};
    ob_tensor *t = new_node(g, OB_OP_MOE_GATE, OB_TYPE_F32, 2, ne);
    t->src[0] = logits;
    t->src[1] = bias;
    t->ip[0] = k;
    t->ip[1] = gating;
    t->ip[2] = norm ? OB_MOE_NORM : 0;
    t->fp[0] = scale;
    return t;
}

ob_tensor *ob_moe_gate_grouped(ob_graph *g, ob_tensor *logits, ob_tensor *bias, int k, ob_moe_gating gating, bool norm,
                               float scale, int n_group, int n_group_used) {
    ob_tensor *t = ob_moe_gate(g, logits, bias, k, gating, norm, scale);
    if (n_group > 1) t->ip[3] = OB_MOE_GROUPS(n_group, n_group_used);
    return t;
}

ob_tensor *ob_concat(ob_graph *g, ob_tensor *a, ob_tensor *b) {
    OB_ASSERT(ob_nrows(a) == ob_nrows(b));
    int64_t ne[4] = {a->ne[0] + b->ne[0], a->ne[1], a->ne[2], a->ne[3]};
    ob_tensor *t = new_node(g, OB_OP_CONCAT, OB_TYPE_F32, 4, ne);
    t->src[0] = a;
    t->src[1] = b;
    return t;
}

ob_tensor *ob_slice(ob_graph *g, ob_tensor *x, int64_t offset, int64_t len) {
    OB_ASSERT(offset >= 0 && len >= 1 && offset + len <= x->ne[0] && offset <= INT32_MAX);
    int64_t ne[4] = {len, x->ne[1], x->ne[2], x->ne[3]};
    ob_tensor *t = new_node(g, OB_OP_SLICE, OB_TYPE_F32, 4, ne);
    t->src[0] = x;
    t->ip[0] = (int32_t)offset;
    return t;
}

ob_tensor *ob_matmul_id(ob_graph *g, ob_tensor *w, ob_tensor *x, ob_tensor *gate) {
    OB_ASSERT(w->ne[0] == x->ne[0]);
    if (!gate) { /* one matrix per head: x [K, E, T] */
        int64_t ne[3] = {w->ne[1], w->ne[2], ob_nrows(x) / w->ne[2]};
        ob_tensor *t = new_node(g, OB_OP_MATMUL_ID, OB_TYPE_F32, 3, ne);
        t->src[0] = w;
        t->src[1] = x;
        return t;
    }
    int64_t ne[3] = {w->ne[1], gate->ne[0] / 2, ob_nrows(gate)};
    ob_tensor *t = new_node(g, OB_OP_MATMUL_ID, OB_TYPE_F32, 3, ne);
    t->src[0] = w;
    t->src[1] = x;
    t->src[2] = gate;
    return t;
}

ob_tensor *ob_moe_sum(ob_graph *g, ob_tensor *y, ob_tensor *gate) {
    int64_t ne[2] = {y->ne[0], ob_nrows(gate)};
    ob_tensor *t = new_node(g, OB_OP_MOE_SUM, OB_TYPE_F32, 2, ne);
    t->src[0] = y;
    t->src[1] = gate;
    return t;
}

ob_tensor *ob_ssm_conv(ob_graph *g, ob_tensor *x, ob_tensor *taps, ob_tensor *state, ob_tensor *pos, ob_tensor *seq,
                       bool silu) {
    int64_t ne[2] = {x->ne[0], ob_nrows(x)};
    ob_tensor *t = new_node(g, OB_OP_SSM_CONV, OB_TYPE_F32, 2, ne);
    t->src[0] = x; t->src[1] = taps; t->src[2] = state; t->src[3] = pos; t->src[4] = seq;
    t->ip[0] = silu ? 1 : 0;
    return t;
}

ob_tensor *ob_delta_net(ob_graph *g, ob_tensor *qkv, ob_tensor *gate, ob_tensor *beta, ob_tensor *state, ob_tensor *pos,
                        ob_tensor *seq, int dk, int n_k_heads, int dv, float q_scale, bool l2_norm, float l2_eps) {
    int64_t ne[3] = {dv, gate->ne[0], ob_nrows(qkv)};
    ob_tensor *t = new_node(g, OB_OP_DELTA_NET, OB_TYPE_F32, 3, ne);
    t->src[0] = qkv; t->src[1] = gate; t->src[2] = beta; t->src[3] = state; t->src[4] = pos; t->src[5] = seq;
    t->ip[0] = dk;
    t->ip[1] = n_k_heads;
    t->ip[2] = dv;
    t->ip[3] = l2_norm ? 1 : 0;
    t->fp[0] = q_scale;
    t->fp[1] = l2_eps;
    return t;
}

void ob_set_name(ob_tensor *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof(t->name), fmt, ap);
    va_end(ap);
}

ob_tensor *ob_leaf(ob_graph *g, const char *name, ob_type type, int n_dims, const int64_t *ne, void *data) {
    ob_tensor *t = new_node(g, OB_OP_LEAF, type, n_dims, ne);
    t->data = data;
    if (name) snprintf(t->name, sizeof(t->name), "%s", name);
    return t;
}

ob_tensor *ob_view(ob_graph *g, ob_tensor *a, int n_dims, const int64_t *ne) {
    ob_tensor *t = new_node(g, OB_OP_VIEW, a->type, n_dims, ne);
    OB_ASSERT(ob_nelements(t) == ob_nelements(a));
    t->src[0] = a;
    t->data = a->data;
    snprintf(t->name, sizeof(t->name), "%s", a->name);
    return t;
}

static ob_tensor *unary_like(ob_graph *g, ob_op op, ob_tensor *a) {
    ob_tensor *t = new_node(g, op, OB_TYPE_F32, 4, a->ne);
    t->src[0] = a;
    return t;
}

ob_tensor *ob_get_rows(ob_graph *g, ob_tensor *table, ob_tensor *ids) {
    int64_t ne[2] = {table->ne[0], ob_nelements(ids)};
    ob_tensor *t = new_node(g, OB_OP_GET_ROWS, OB_TYPE_F32, 2, ne);
    t->src[0] = table;
    t->src[1] = ids;
    return t;
}

ob_tensor *ob_rms_norm(ob_graph *g, ob_tensor *x, ob_tensor *w, float eps) {
    ob_tensor *t = unary_like(g, OB_OP_RMS_NORM, x);
    t->src[1] = w;
    t->fp[0] = eps;
    return t;
}

ob_tensor *ob_layer_norm(ob_graph *g, ob_tensor *x, ob_tensor *w, ob_tensor *b, float eps) {
    ob_tensor *t = unary_like(g, OB_OP_LAYER_NORM, x);
    t->src[1] = w;
    t->src[2] = b;
    t->fp[0] = eps;
    return t;
}

ob_tensor *ob_matmul(ob_graph *g, ob_tensor *w, ob_tensor *x) {
    OB_ASSERT(w->ne[0] == x->ne[0]);
    int64_t ne[2] = {w->ne[1], ob_nrows(x)};
    ob_tensor *t = new_node(g, OB_OP_MATMUL, OB_TYPE_F32, 2, ne);
    t->src[0] = w;
    t->src[1] = x;
    return t;
}

static ob_tensor *binary(ob_graph *g, ob_op op, ob_tensor *a, ob_tensor *b) {
    OB_ASSERT(a->ne[0] == b->ne[0]);
    OB_ASSERT(ob_nrows(b) == 1 || ob_nrows(b) == ob_nrows(a));
    ob_tensor *t = unary_like(g, op, a);
    t->src[1] = b;
    return t;
}

ob_tensor *ob_add(ob_graph *g, ob_tensor *a, ob_tensor *b) { return binary(g, OB_OP_ADD, a, b); }
ob_tensor *ob_mul(ob_graph *g, ob_tensor *a, ob_tensor *b) { return binary(g, OB_OP_MUL, a, b); }

ob_tensor *ob_scale(ob_graph *g, ob_tensor *a, float s) {
    ob_tensor *t = unary_like(g, OB_OP_SCALE, a);
    t->fp[0] = s;
    return t;
}

ob_tensor *ob_rope(ob_graph *g, ob_tensor *x, ob_tensor *pos, ob_tensor *factors, int n_rot, int mode, float base,
                   float freq_scale, float mscale) {
    ob_tensor *t = unary_like(g, OB_OP_ROPE, x);
    t->src[1] = pos;
    t->src[2] = factors;
    t->ip[0] = n_rot;
    t->ip[1] = mode;
    t->fp[0] = base;
    t->fp[1] = freq_scale;
    t->fp[2] = mscale;
    return t;
}

ob_tensor *ob_kv_store(ob_graph *g, ob_tensor *x, ob_tensor *cache, ob_tensor *pos, ob_tensor *seq, int cells_per_seq) {
    OB_ASSERT(x->ne[0] * x->ne[1] == cache->ne[0] || x->ne[0] == cache->ne[0]);
    int64_t ne[1] = {1};
    ob_tensor *t = new_node(g, OB_OP_KV_STORE, OB_TYPE_F32, 1, ne);
    t->src[0] = x;
    t->src[1] = cache;
    t->src[2] = pos;
    t->src[3] = seq;
    t->ip[0] = cells_per_seq;
    return t;
}

ob_tensor *ob_attention(ob_graph *g, ob_tensor *q, ob_tensor *kc, ob_tensor *vc, ob_tensor *pos,
                        ob_tensor *seq, ob_tensor *order, int cells_per_seq, int n_head_kv,
                        int window, bool causal, float scale, float softcap) {
    int64_t ne[2] = {q->ne[0] * q->ne[1], q->ne[2]};
    ob_tensor *t = new_node(g, OB_OP_ATTENTION, OB_TYPE_F32, 2, ne);
    t->src[0] = q; t->src[1] = kc; t->src[2] = vc; t->src[3] = pos; t->src[4] = seq; t->src[5] = order;
    t->ip[0] = cells_per_seq;
    t->ip[1] = n_head_kv;
    t->ip[2] = window;
    t->ip[3] = causal ? 1 : 0;
    t->fp[0] = scale;
    t->fp[1] = softcap;
    return t;
}

ob_tensor *ob_attention_v(ob_graph *g, ob_tensor *q, ob_tensor *kc, ob_tensor *vc, ob_tensor *pos, ob_tensor *seq,
                          ob_tensor *order, int cells_per_seq, int n_head_kv, int dv, float scale) {
    ob_tensor *t = ob_attention(g, q, kc, vc, pos, seq, order, cells_per_seq, n_head_kv, 0, true, scale, 0.0f);
    t->ne[0] = (int64_t)dv * q->ne[1];
    return t;
}

ob_tensor *ob_glu(ob_graph *g, ob_tensor *gate, ob_tensor *up, ob_act act) {
    OB_ASSERT(ob_nelements(gate) == ob_nelements(up));
    ob_tensor *t = unary_like(g, OB_OP_GLU, gate);
    t->src[1] = up;
    t->ip[0] = act;
    return t;
}

ob_tensor *ob_glu_swiglu_oai(ob_graph *g, ob_tensor *gate, ob_tensor *up, float alpha, float limit) {
    ob_tensor *t = ob_glu(g, gate, up, OB_ACT_SILU);
    t->ip[1] = OB_GLU_SWIGLU_OAI;
    t->fp[0] = alpha;
    t->fp[1] = limit;
    return t;
}

ob_tensor *ob_add_id(ob_graph *g, ob_tensor *y, ob_tensor *bias, ob_tensor *gate) {
    OB_ASSERT(bias->ne[0] == y->ne[0]);
    ob_tensor *t = unary_like(g, OB_OP_ADD_ID, y);
    t->src[1] = bias;
    t->src[2] = gate;
    return t;
}

ob_tensor *ob_act_op(ob_graph *g, ob_tensor *x, ob_act act) {
    ob_tensor *t = unary_like(g, OB_OP_ACT, x);
    t->ip[0] = act;
    return t;
}

ob_tensor *ob_softmax(ob_graph *g, ob_tensor *x) { return unary_like(g, OB_OP_SOFTMAX, x); }

ob_tensor *ob_cpy(ob_graph *g, ob_tensor *x, ob_type type) {
    ob_tensor *t = new_node(g, OB_OP_CPY, type, 4, x->ne);
    t->src[0] = x;
    return t;
}

ob_tensor *ob_pool(ob_graph *g, ob_tensor *x, ob_tensor *seq, ob_tensor *pos, ob_pool_type type, bool normalize, int n_seq) {
    int64_t ne[2] = {x->ne[0], n_seq};
    ob_tensor *t = new_node(g, OB_OP_POOL, OB_TYPE_F32, 2, ne);
    t->src[0] = x; t->src[1] = seq; t->src[2] = pos;
    t->ip[0] = type;
    t->ip[1] = normalize ? 1 : 0;
    t->ip[2] = n_seq;
    return t;
}

/* Storage owner of a node: views resolve to the node whose bytes they share. */
static ob_tensor *storage_of(ob_tensor *t) {
    while (t->op == OB_OP_VIEW) t = t->src[0];
    return t;
}

/* Greedy first-fit over a sorted free list. Nodes are freed after their last reader, so
 * a forward pass needs a few activations' worth of memory instead of all of them. */
typedef struct { size_t off, size; } ob_span;

#define OB_SCRATCH_ALIGN 256

static size_t span_size(const ob_tensor *t) {
    size_t n = (ob_nbytes(t) + OB_SCRATCH_ALIGN - 1) & ~(size_t)(OB_SCRATCH_ALIGN - 1);
    return n ? n : OB_SCRATCH_ALIGN;
}

void ob_graph_plan(ob_graph *g) {
    for (int64_t i = 0; i < g->n; i++) g->nodes[i].last_use = i;
    for (int64_t i = 0; i < g->n; i++) {
        ob_tensor *t = &g->nodes[i];
        for (int s = 0; s < OB_MAX_SRC; s++) {
            if (!t->src[s]) continue;
            ob_tensor *o = storage_of(t->src[s]);
            if (o->last_use < i) o->last_use = i;
        }
    }
    /* Free lists are tiny (a few dozen spans), so arrays with linear scans are enough. */
    int64_t cap = g->n + 1, nfree = 0;
    ob_span *freel = malloc(sizeof(ob_span) * (size_t)cap);
    OB_ASSERT(freel);
    size_t top = 0;
    /* Bucket nodes by their last use so they can be released after that step. */
    int64_t *head = malloc(sizeof(int64_t) * (size_t)cap), *next = malloc(sizeof(int64_t) * (size_t)cap);
    OB_ASSERT(head && next);
    for (int64_t i = 0; i < cap; i++) head[i] = -1;
    for (int64_t i = 0; i < g->n; i++) {
        ob_tensor *t = &g->nodes[i];
        if (t->op != OB_OP_LEAF && t->op != OB_OP_VIEW) {
            size_t need = span_size(t);
            int64_t best = -1;
            for (int64_t f = 0; f < nfree; f++)
                if (freel[f].size >= need && (best < 0 || freel[f].size < freel[best].size)) best = f;
            if (best >= 0) {
                t->offset = freel[best].off;
                freel[best].off += need;
                freel[best].size -= need;
                if (freel[best].size == 0) freel[best] = freel[--nfree];
            } else {
                t->offset = top;
                top += need;
            }
            /* A node read by nobody lives until the end (it is a graph output). */
            int64_t lu = t->last_use == i ? g->n - 1 : t->last_use;
            next[i] = head[lu];
            head[lu] = i;
        }
        /* Release everything whose last reader is this step (never the node just placed). */
        for (int64_t j = head[i]; j >= 0; j = next[j]) {
            if (j == i) continue;
            ob_tensor *d = &g->nodes[j];
            size_t sz = span_size(d);
            bool merged = false;
            for (int64_t f = 0; f < nfree && !merged; f++) {
                if (freel[f].off + freel[f].size == d->offset) { freel[f].size += sz; merged = true; }
                else if (d->offset + sz == freel[f].off) { freel[f].off = d->offset; freel[f].size += sz; merged = true; }
            }
            if (!merged) freel[nfree++] = (ob_span){d->offset, sz};
        }
    }
    g->scratch_size = top;
    free(freel);
    free(head);
    free(next);
}

void ob_graph_bind(ob_graph *g, void *base) {
    for (int64_t i = 0; i < g->n; i++) {
        ob_tensor *t = &g->nodes[i];
        if (t->op == OB_OP_LEAF) continue;
        if (t->op == OB_OP_VIEW) t->data = storage_of(t)->data;
        else t->data = (char *)base + t->offset;
    }
}
