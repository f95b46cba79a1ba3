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
    /* MLA (deepseek2): a row split and joined, values narrower than the keys read from the
     * K cache, one matrix per head, routing limited to groups */
    ob_tensor *sl = ob_slice(g, y, HD, HD);
    ob_tensor *cc = ob_concat(g, sl, ob_slice(g, y, 0, HD));
    ob_tensor *av = ob_attention_v(g, q, kc, kc, pos, seq, ks, CELLS, NKV, HD / 2, 0.125f);
    ob_tensor *mh = ob_matmul_id(g, ob_leaf(g, "k_b", OB_TYPE_Q8_0, 3, (int64_t[]){HD, FF, H}, p), q, NULL);
    ob_tensor *gg = ob_moe_gate_grouped(g, rl, NULL, TOPK, OB_MOE_SIGMOID, true, 1.0f, 4, 2);
    /* gpt-oss: attention sinks (a sliding window), the clamped SwiGLU, each expert's bias */
    ob_tensor *as = ob_attention(g, q, kc, vc, pos, seq, vs, CELLS, NKV, 4, true, 0.125f, 0.0f);
    as->src[6] = ob_leaf(g, "sinks", OB_TYPE_F32, 1, (int64_t[]){H}, p);
    ob_tensor *go = ob_glu_swiglu_oai(g, eu, eu, 1.702f, 7.0f);
    ob_tensor *ai = ob_add_id(g, eu, ob_leaf(g, "up_b", OB_TYPE_F32, 2, (int64_t[]){FF, NE}, p), gt);
    /* hybrid models (issue #33): the conv over y's 128 channels, then a delta rule over its rows
     * as 2 query/key heads of 16 and 4 value heads of 16 (2*2*16 + 4*16 = 128) */
    enum { KC = 4, NSEQ = 3, DK = 16, HK = 2, HV = 4, DV = 16 };
    ob_tensor *cst = ob_leaf(g, "conv_state", OB_TYPE_F32, 2, (int64_t[]){(KC - 1) * HD * H, NSEQ}, p);
    ob_tensor *cw = ob_leaf(g, "conv_w", OB_TYPE_F32, 2, (int64_t[]){KC, HD * H}, p);
    ob_tensor *cv = ob_ssm_conv(g, y, cw, cst, pos, seq, true);
    ob_tensor *gd = ob_leaf(g, "g", OB_TYPE_F32, 2, (int64_t[]){HV, T}, p);
    ob_tensor *dst = ob_leaf(g, "ssm_state", OB_TYPE_F32, 2, (int64_t[]){DK * DV * HV, NSEQ}, p);
    ob_tensor *dn = ob_delta_net(g, cv, gd, gd, dst, pos, seq, DK, HK, DV, 0.17f, true, 1e-6f);
    CHECK(ob_op_writes_src(cv, 2) && ob_op_writes_src(dn, 3) && ob_op_writes_src(ks, 1) && !ob_op_writes_src(dn, 0) &&
          !ob_op_writes_src(at, 1));
    bool seen[OB_OP_COUNT] = {0};
    for (int64_t i = 0; i < g->n; i++) {
        seen[g->nodes[i].op] = true;
        CHECKF(ob_op_valid(&g->nodes[i]), "node %lld (%s)", (long long)i, ob_op_name(g->nodes[i].op));
    }
    for (int op = 0; op < OB_OP_COUNT; op++) CHECKF(seen[op], "no %s node in the test graph", ob_op_name((ob_op)op));

    /* Sources: a required one missing, or one past the optional ones, is malformed. */
    ob_tensor *nodes[] = {x, n1, y, q, ks, at, c, pl, smp, gt, eu, ed, ms, sl, cc, av, mh, gg, as, go, ai, cv, dn};
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
    /* MLA's: a slice past the row, rows that do not pair up, values wider than the V rows,
     * a gateless MATMUL_ID without a row per matrix, groups that do not divide the experts
     * or leave fewer than k to choose from */
    bad = *sl;
    bad.ip[0] = HD * 2 * H - HD + 1;
    CHECK(!ob_op_valid(&bad));
    bad = *cc;
    bad.src[1] = n1; /* widths 32 + 128 for an output of 64 */
    CHECK(!ob_op_valid(&bad));
    bad = *av;
    bad.ne[0] = (HD * NKV + 2) * H; /* values past a kv head's row */
    CHECK(!ob_op_valid(&bad));
    bad = *mh;
    bad.src[1] = n1; /* [128, 3]: not one row per head */
    CHECK(!ob_op_valid(&bad));
    bad = *gg;
    bad.ip[3] = OB_MOE_GROUPS(3, 2);
    CHECK(!ob_op_valid(&bad));
    bad.ip[3] = OB_MOE_GROUPS(8, 1); /* 1 group of 1 expert for k = 2 */
    CHECK(!ob_op_valid(&bad));
    CHECK(ob_op_valid(mh) && ob_op_valid(av) && ob_op_valid(gg));
    CHECK(!ob_op_valid(NULL));
    /* gpt-oss's: sinks not one F32 per query head; the clamped SwiGLU of another activation,
     * kind, or a limit that clamps nothing sensible; expert biases of other rows, type or gate */
    bad = *as;
    bad.src[6] = nw;
    CHECK(!ob_op_valid(&bad));
    bad.src[6] = ob_leaf(g, "sinks16", OB_TYPE_F16, 1, (int64_t[]){H}, p);
    CHECK(!ob_op_valid(&bad));
    bad = *go;
    bad.ip[0] = OB_ACT_GELU;
    CHECK(!ob_op_valid(&bad));
    bad = *go;
    bad.ip[1] = OB_GLU_SWIGLU_OAI + 1;
    CHECK(!ob_op_valid(&bad));
    bad = *go;
    bad.fp[1] = 0.0f;
    CHECK(!ob_op_valid(&bad));
    bad.fp[1] = NAN;
    CHECK(!ob_op_valid(&bad));
    bad = *go;
    bad.fp[0] = INFINITY;
    CHECK(!ob_op_valid(&bad));
    bad = *ai;
    bad.src[1] = ob_leaf(g, "up_b2", OB_TYPE_F32, 2, (int64_t[]){FF / 2, NE}, p);
    CHECK(!ob_op_valid(&bad));
    bad.src[1] = ob_leaf(g, "up_b16", OB_TYPE_F16, 2, (int64_t[]){FF, NE}, p);
    CHECK(!ob_op_valid(&bad));
    bad = *ai;
    bad.src[2] = rl; /* not a gate of k slots */
    CHECK(!ob_op_valid(&bad));
    /* the recurrent ops': a state of other rows than the taps say, one tap, an activation
     * other than none and SiLU; q/k/v rows that do not add up, value heads that do not share
     * the key heads evenly, a state of another size, per-token rows of other tokens */
    bad = *cv;
    bad.src[2] = ob_leaf(g, "cst2", OB_TYPE_F32, 2, (int64_t[]){KC * HD * H, NSEQ}, p);
    CHECK(!ob_op_valid(&bad));
    bad = *cv;
    bad.src[1] = ob_leaf(g, "cw1", OB_TYPE_F32, 2, (int64_t[]){1, HD * H}, p);
    CHECK(!ob_op_valid(&bad));
    bad = *cv;
    bad.ip[0] = 2;
    CHECK(!ob_op_valid(&bad));
    bad = *dn;
    bad.ip[2] = DV + 1;
    CHECK(!ob_op_valid(&bad));
    bad = *dn;
    bad.ip[1] = 3; /* 4 value heads over 3 key heads */
    CHECK(!ob_op_valid(&bad));
    bad = *dn;
    bad.src[3] = cst;
    CHECK(!ob_op_valid(&bad));
    bad = *dn;
    bad.src[4] = ob_leaf(g, "pos2", OB_TYPE_I32, 1, (int64_t[]){T + 1}, p);
    CHECK(!ob_op_valid(&bad));
    CHECK(ob_op_valid(cv) && ob_op_valid(dn));
    ob_graph_free(g);
    return ob_test_done("test_op_table");
}
