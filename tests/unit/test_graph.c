/* The scratch planner must never give two simultaneously live activations overlapping
 * bytes; checked on random DAGs by recomputing liveness independently. */
#include "testutil.h"
#include "graph/graph.h"

static int64_t storage(const ob_graph *g, int64_t i) {
    while (g->nodes[i].op == OB_OP_VIEW) i = g->nodes[i].src[0]->id;
    return i;
}

int main(void) {
    ob_rng r;
    ob_rng_seed(&r, 7);
    for (int iter = 0; iter < 300; iter++) {
        ob_graph *g = ob_graph_new(400);
        int64_t ne[2] = {1 + (int64_t)(ob_rng_u64(&r) % 64), 1 + (int64_t)(ob_rng_u64(&r) % 8)};
        ob_tensor *pool[400];
        int np = 0;
        pool[np++] = ob_leaf(g, "in", OB_TYPE_F32, 2, ne, (void *)0x1000);
        int n_ops = 5 + (int)(ob_rng_u64(&r) % 150);
        for (int k = 0; k < n_ops; k++) {
            ob_tensor *a = pool[ob_rng_u64(&r) % (uint64_t)np];
            ob_tensor *b = pool[ob_rng_u64(&r) % (uint64_t)np];
            int kind = (int)(ob_rng_u64(&r) % 4);
            ob_tensor *t;
            if (kind == 0) t = ob_add(g, a, b);
            else if (kind == 1) t = ob_mul(g, a, b);
            else if (kind == 2) t = ob_scale(g, a, 2.0f);
            else { int64_t ne2[1] = {ne[0] * ne[1]}; t = ob_view(g, a, 1, ne2); t = ob_view(g, t, 2, ne); }
            pool[np++] = t;
        }
        ob_graph_plan(g);
        /* independent liveness: last reader of each storage owner */
        int64_t last[400];
        for (int64_t i = 0; i < g->n; i++) last[i] = i;
        for (int64_t i = 0; i < g->n; i++)
            for (int s = 0; s < OB_MAX_SRC; s++)
                if (g->nodes[i].src[s]) { int64_t o = storage(g, g->nodes[i].src[s]->id); if (last[o] < i) last[o] = i; }
        for (int64_t i = 0; i < g->n; i++) if (last[i] == i) last[i] = g->n; /* outputs live to the end */
        size_t sz = ob_nbytes(&g->nodes[0]);
        for (int64_t i = 0; i < g->n; i++) {
            const ob_tensor *a = &g->nodes[i];
            if (a->op == OB_OP_LEAF || a->op == OB_OP_VIEW) continue;
            CHECK(a->offset + sz <= g->scratch_size);
            for (int64_t j = i + 1; j < g->n; j++) {
                const ob_tensor *b = &g->nodes[j];
                if (b->op == OB_OP_LEAF || b->op == OB_OP_VIEW) continue;
                if (last[i] < j) continue; /* a is dead before b is written */
                bool overlap = a->offset < b->offset + sz && b->offset < a->offset + sz;
                CHECKF(!overlap, "iter %d: node %lld [%zu) overlaps live node %lld", iter, (long long)j, b->offset, (long long)i);
            }
        }
        ob_graph_free(g);
    }
    return ob_test_done("test_graph");
}
