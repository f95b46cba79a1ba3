/* The op table (src/graph/op_table.c): every op has its entry, every node the builders make
 * is well formed, and a node with a source missing or one too many is refused. */
#include "testutil.h"
#include "graph/op_table.h"
#include <string.h>

int main(void) {
    /* An entry per op with a distinct name (the static assert only counts entries: an op
     * added in the middle without one would leave a hole). */
    for (int op = 0; op < OB_OP_COUNT; op++) {
        const ob_op_info *info = ob_op_info_get((ob_op)op);
        CHECKF(info && info->name && info->n_src + info->n_src_opt <= OB_MAX_SRC, "op %d", op);
        if (!info || !info->name) continue;
        CHECK(strcmp(ob_op_name((ob_op)op), info->name) == 0);
        for (int o = 0; o < op; o++) CHECKF(strcmp(ob_op_name((ob_op)o), info->name) != 0, "ops %d and %d", o, op);
    }
    CHECK(ob_op_info_get(OB_OP_COUNT) == NULL && strcmp(ob_op_name(OB_OP_COUNT), "?") == 0);
    CHECK(ob_op_info_get((ob_op)-1) == NULL);

    /* One node of every op, as an architecture builds them (shapes only: no data). */
    enum { HD = 32, H = 4, NKV = 2, T = 3, CELLS = 16, V = 64 };
    ob_graph *g = ob_graph_new(96);
    void *p = (void *)0x1000;
    ob_tensor *emb = ob_leaf(g, "emb", OB_TYPE_Q8_0, 2, (int64_t[]){HD * H, V}, p);
    ob_tensor *ids = ob_leaf(g, "ids", OB_TYPE_I32, 1, (int64_t[]){T}, p);
    ob_tensor *pos = ob_leaf(g, "pos", OB_TYPE_I32, 1, (int64_t[]){T}, p);
    ob_tensor *seq = ob_leaf(g, "seq", OB_TYPE_I32, 1, (int64_t[]){T}, p);
    ob_tensor *nw = ob_leaf(g, "nw", OB_TYPE_F32, 1, (int64_t[]){HD * H}, p);
    ob_tensor *wq = ob_leaf(g, "wq", OB_TYPE_Q4_K, 2, (int64_t[]){HD * H * 2, HD * H}, p);
    ob_tensor *kc = ob_leaf(g, "kc", OB_TYPE_F16, 2, (int64_t[]){HD * NKV, CELLS}, p);
    ob_tensor *vc = ob_leaf(g, "vc", OB_TYPE_Q8_0, 2, (int64_t[]){HD * NKV, CELLS}, p);
    ob_tensor *sp = ob_leaf(g, "sp", OB_TYPE_F32, 2, (int64_t[]){OB_SAMPLE_NPARAM, T}, p);
    ob_tensor *x = ob_get_rows(g, emb, ids);
    ob_tensor *n1 = ob_rms_norm(g, x, nw, 1e-6f);
    ob_tensor *n2 = ob_layer_norm(g, n1, nw, nw, 1e-5f);
    ob_tensor *big = ob_view(g, ob_leaf(g, "x2", OB_TYPE_F32, 2, (int64_t[]){HD * H * 2, T}, p), 2,
                             (int64_t[]){HD * H * 2, T});
    ob_tensor *y = ob_matmul(g, wq, big);
    ob_tensor *s = ob_scale(g, ob_mul(g, ob_add(g, y, n2), nw), 0.5f);
    ob_tensor *q = ob_rope(g, ob_view(g, s, 3, (int64_t[]){HD, H, T}), pos, NULL, HD, 2, 1e4f, 1.0f, 1.0f);
    ob_tensor *k = ob_view(g, ob_matmul(g, ob_leaf(g, "wk", OB_TYPE_F16, 2, (int64_t[]){HD * H, HD * NKV}, p), n2),
                           3, (int64_t[]){HD, NKV, T});
    ob_tensor *ks = ob_kv_store(g, k, kc, pos, seq, CELLS);
    ob_tensor *vs = ob_kv_store(g, k, vc, pos, seq, CELLS);
    vs->src[4] = ks; /* as arch/common.c orders the V store after the K store */
    ob_tensor *at = ob_attention(g, q, kc, vc, pos, seq, vs, CELLS, NKV, 0, true, 0.125f, 0.0f);
    ob_tensor *act = ob_softmax(g, ob_act_op(g, ob_glu(g, at, s, OB_ACT_GELU), OB_ACT_TANH));
    ob_tensor *c = ob_cpy(g, act, OB_TYPE_Q8_0);
    ob_tensor *pl = ob_pool(g, act, seq, pos, OB_POOL_MEAN, true, 2);
    ob_tensor *lg = ob_matmul(g, emb, act);
    ob_tensor *smp = ob_sample(g, lg, sp);
    /* a mixture-of-experts block: router, gate, experts on the shared x then per slot, sum */
    enum { NE = 8, TOPK = 2, FF = 64 };
    ob_tensor *rl = ob_matmul(g, ob_leaf(g, "router", OB_TYPE_F32, 2, (int64_t[]){HD * H, NE}, p), n1);
    ob_tensor *gt = ob_moe_gate(g, rl, ob_leaf(g, "bias", OB_TYPE_F32, 1, (int64_t[]){NE}, p), TOPK, OB_MOE_SIGMOID,
                                true, 2.5f);
    ob_tensor *eu = ob_matmul_id(g, ob_leaf(g, "up_exps", OB_TYPE_Q4_0, 3, (int64_t[]){HD * H, FF, NE}, p), n1, gt);
    ob_tensor *ed = ob_matmul_id(g, ob_leaf(g, "down_exps", OB_TYPE_Q8_0, 3, (int64_t[]){FF, HD * H, NE}, p), eu, gt);
    ob_tensor *ms = ob_moe_sum(g, ed, gt);
    bool seen[OB_OP_COUNT] = {0};
    for (int64_t i = 0; i < g->n; i++) {
        seen[g->nodes[i].op] = true;
        CHECKF(ob_op_valid(&g->nodes[i]), "node %lld (%s)", (long long)i, ob_op_name(g->nodes[i].op));
    }
    for (int op = 0; op < OB_OP_COUNT; op++) CHECKF(seen[op], "no %s node in the test graph", ob_op_name((ob_op)op));

    /* Sources: a required one missing, or one past the optional ones, is malformed. */
    ob_tensor *nodes[] = {x, n1, y, q, ks, at, c, pl, smp, gt, eu, ed, ms};
    for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
        ob_tensor m = *nodes[i];
        const ob_op_info *info = ob_op_info_get(m.op);
        m.src[0] = NULL;
        CHECKF(!ob_op_valid(&m), "%s without src0", info->name);
        m = *nodes[i];
        const int extra = info->n_src + info->n_src_opt;
        if (extra < OB_MAX_SRC) {
            m.src[extra] = nw;
            CHECKF(!ob_op_valid(&m), "%s with src%d", info->name, extra);
        }
    }
    ob_tensor bad = *q;
    bad.ip[0] = HD + 2; /* n_rot past the head */
    CHECK(!ob_op_valid(&bad));
    bad = *act->src[0]; /* the ACT node under the softmax */
    bad.ip[0] = OB_ACT_COUNT;
    CHECK(!ob_op_valid(&bad));
    bad = *ks;
    bad.src[1] = emb; /* a cache whose row (128) does not divide the K rows (192 elements) */
    CHECK(!ob_op_valid(&bad));
    bad = *gt;
    bad.ip[0] = NE + 1; /* more experts chosen than there are */
    CHECK(!ob_op_valid(&bad));
    bad = *eu;
    bad.src[1] = ob_leaf(g, "x5", OB_TYPE_F32, 2, (int64_t[]){HD * H, 5}, p); /* rows neither per token nor per slot */
    CHECK(!ob_op_valid(&bad));
    bad = *ms;
    bad.src[1] = rl; /* not a gate of k slots */
    CHECK(!ob_op_valid(&bad));
    bad.op = OB_OP_COUNT;
    CHECK(!ob_op_valid(&bad));
    CHECK(!ob_op_valid(NULL));
    ob_graph_free(g);
    return ob_test_done("test_op_table");
}
