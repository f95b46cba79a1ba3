/* Hybrid models' recurrent ops (issue #33): SSM_CONV (the short causal conv with its rolling
 * state: 2 to 4 taps, with and without SiLU, odd channel counts, several sequences
 * interleaved in one batch, one starting at position 0 over a state full of garbage) and
 * DELTA_NET (the gated delta rule: Qwen3.5's head shapes and odd ones, value widths that take
 * the CPU's 64- and 8-column paths and its scalar tail, value heads over fewer query/key
 * heads, with and without the in-op L2 norm, decode steps, prefills of several sequences),
 * each with its output and the state it leaves checked. A batch split over three nodes that
 * share the state (a prefill cut anywhere, one token a node) must give what one node gives.
 *
 * The chunked form of the delta rule (ob_cpu_ref_delta_net_chunked, the GPUs' prefill
 * algorithm) is held to the token-by-token reference on every DELTA_NET case at chunks of 1,
 * 3, 16 and 64 positions (ref_check), and a prefill split at chunk boundaries must give
 * its outputs and end state bit for bit (the ALIGNED cases).
 *
 * The GPU kernels (CUDA op_ssm_conv.cu / op_delta_net.cu, Vulkan ssm_conv.comp /
 * delta_net.comp) run every case: the rows past the first tables reach their register and
 * column blocks' edges, the largest head they take and a sequence without a state row (zeros
 * there and in the reference; the CPU backend refuses the graph). A head past their size is
 * refused (may_refuse). */
#include "ops_cases.h"
#include "backend/cpu/cpu.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How a case's tokens are laid out over its nodes. */
enum {
    RC_PLAIN = 0,   /* one node: a prefill of n_seq interleaved sequences, sequence 0 from position 0 */
    RC_DECODE = 1,  /* one node: one token of each of n_seq sequences */
    RC_SPLIT = 2,   /* the RC_PLAIN batch cut into three nodes at uneven points */
    RC_STEPS = 3,   /* three nodes of one token of one sequence each */
    RC_ALIGNED = 4, /* one sequence from position 8, cut at positions 16 and 48 (chunk boundaries) */
    RC_NOSTATE = 5, /* RC_PLAIN with the last sequence past the state's rows: its tokens get zeros
                       (the GPUs, the reference) or the graph is refused (the CPU backend) */
};
static const char *const g_mode_name[] = {"prefill", "decode", "split", "steps", "aligned", "no-state"};

#define RC_MAX_T 96

/* The batch of a case: tokens (seq, pos) in batch order and the node each goes to. */
typedef struct rc_batch {
    int64_t T;
    int32_t seq[RC_MAX_T], pos[RC_MAX_T];
    int node_of[RC_MAX_T];
    int n_node;
} rc_batch;

/* Sequence s of n_seq starts at position 0 (s == 0: its state is garbage to be ignored) or at
 * 5 + 7 s; the tokens go round-robin over the sequences. */
static void rc_layout(rc_batch *bt, int mode, int64_t T, int n_seq) {
    memset(bt, 0, sizeof(*bt));
    int32_t next[8];
    for (int s = 0; s < n_seq; s++) next[s] = s == 0 ? 0 : 5 + 7 * s;
    if (mode == RC_STEPS) T = 3, n_seq = 1, next[0] = 11;
    if (mode == RC_ALIGNED) T = 48, n_seq = 1, next[0] = 8;
    if (mode == RC_DECODE) T = n_seq;
    bt->T = T;
    for (int64_t t = 0; t < T; t++) {
        const int s = (int)(t % n_seq);
        bt->seq[t] = s;
        bt->pos[t] = next[s]++;
    }
    bt->n_node = mode == RC_SPLIT || mode == RC_STEPS || mode == RC_ALIGNED ? 3 : 1;
    for (int64_t t = 0; t < T; t++) {
        if (mode == RC_SPLIT) bt->node_of[t] = t < T / 3 - 1 ? 0 : t < T - 2 ? 1 : 2;
        else if (mode == RC_STEPS) bt->node_of[t] = (int)t;
        else if (mode == RC_ALIGNED) bt->node_of[t] = bt->pos[t] < 16 ? 0 : bt->pos[t] < 48 ? 1 : 2;
        else bt->node_of[t] = 0;
    }
}

/* Rows [n_row, T] of the whole batch's `all` that go to node k, as a leaf. */
static ob_tensor *rc_part(ops_build *b, const rc_batch *bt, int k, const char *name, const float *all, int64_t n_row) {
    int64_t n = 0;
    for (int64_t t = 0; t < bt->T; t++) n += bt->node_of[t] == k;
    float *d = ops_own(b, sizeof(float) * (size_t)(n * n_row));
    for (int64_t t = 0, i = 0; t < bt->T; t++)
        if (bt->node_of[t] == k) memcpy(d + n_row * i++, all + n_row * t, sizeof(float) * (size_t)n_row);
    const int64_t ne[2] = {n_row, n};
    return ops_leaf(b, name, OB_TYPE_F32, 2, ne, d);
}

static ob_tensor *rc_ids(ops_build *b, const rc_batch *bt, int k, const char *name, const int32_t *all) {
    int32_t v[RC_MAX_T];
    int64_t n = 0;
    for (int64_t t = 0; t < bt->T; t++)
        if (bt->node_of[t] == k) v[n++] = all[t];
    return ops_leaf_i32(b, name, n, v);
}

/* ---- SSM_CONV -------------------------------------------------------------------------------- */

typedef struct conv_row {
    int64_t C, K, T;
    int n_seq, mode;
    bool silu;
} conv_row;

static void conv_build(ops_build *b, const void *p) {
    const conv_row *r = p;
    rc_batch bt;
    rc_layout(&bt, r->mode, r->T, r->n_seq);
    const int64_t C = r->C, K = r->K, nw[2] = {K, C};
    const int64_t ns[2] = {(K - 1) * C, r->mode == RC_NOSTATE ? r->n_seq - 1 : r->n_seq + 1};
    ob_tensor *state = ops_leaf_f32(b, "state", 2, ns, 1.0f); /* sequence 0's is garbage: it starts at 0 */
    ob_tensor *taps = ops_leaf_f32(b, "taps", 2, nw, 0.5f);
    const float *x = ops_f32(b, C * bt.T, 1.0f);
    for (int k = 0; k < bt.n_node; k++) {
        ob_tensor *y = ob_ssm_conv(b->g, rc_part(b, &bt, k, "x", x, C), taps, state, rc_ids(b, &bt, k, "pos", bt.pos),
                                   rc_ids(b, &bt, k, "seq", bt.seq), r->silu);
        ops_check(b, y, OPS_TOL(1e-6, 1e-5));
    }
    ops_check(b, state, OPS_BITS); /* the last K-1 inputs, copied */
}

/* ---- DELTA_NET ------------------------------------------------------------------------------- */

typedef struct dn_row {
    int dk, dv, Hk, H;
    int64_t T;
    int n_seq, mode;
    bool l2;
} dn_row;

/* What the chunked-form check needs: the nodes in order and the state before them. */
typedef struct dn_user {
    ob_tensor *node[3];
    int n_node;
    float *state0;
    int64_t state_n;
    int state_chk; /* check index of the state */
} dn_user;

static double dn_max(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

/* The chunked form over the case's nodes in order, from the original state: outputs[k] and
 * state (malloc'd) out. */
static float *dn_chunked(const dn_user *u, int chunk, float **outs) {
    float *st = malloc(sizeof(float) * (size_t)u->state_n);
    memcpy(st, u->state0, sizeof(float) * (size_t)u->state_n);
    for (int k = 0; k < u->n_node; k++) {
        ob_tensor n = *u->node[k], s = *u->node[k]->src[3];
        s.data = st;
        n.src[3] = &s;
        outs[k] = malloc(ob_nbytes(&n));
        n.data = outs[k];
        ob_cpu_ref_delta_net_chunked(&n, chunk);
    }
    return st;
}

/* The chunked form against the token-by-token reference (b->chk[i]->data: its outputs), and,
 * for a prefill split at chunk boundaries, against itself on the whole batch in one node. */
static void dn_chunk_check(ops_build *b, const void *p) {
    const dn_row *r = p;
    const dn_user *u = b->user;
    static const int chunks[] = {1, 3, 16, 64};
    for (size_t c = 0; c < OB_ARRAY_LEN(chunks); c++) {
        float *outs[3] = {NULL};
        float *st = dn_chunked(u, chunks[c], outs);
        double worst = 0;
        for (int k = 0; k <= u->n_node; k++) {
            const float *got = k < u->n_node ? outs[k] : st, *want = b->chk[k < u->n_node ? k : u->state_chk]->data;
            const int64_t n = k < u->n_node ? ob_nelements(u->node[k]) : u->state_n;
            const double mx = dn_max(want, n);
            for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)got[i] - want[i]) / (mx > 0 ? mx : 1));
        }
        CHECKF(worst <= 2e-6, "%s: chunked form (chunk %d) off the recurrence by %.3g of max", b->name, chunks[c], worst);
        for (int k = 0; k < u->n_node; k++) free(outs[k]);
        free(st);
    }
    if (r->mode != RC_ALIGNED) return;
    /* one node over the whole batch: the split nodes' tokens in order */
    for (int chunk = 8; chunk <= 16; chunk *= 2) {
        float *outs[3] = {NULL};
        float *st = dn_chunked(u, chunk, outs);
        dn_user whole = *u;
        ob_tensor n = *u->node[0], q = *n.src[0], g = *n.src[1], be = *n.src[2], ps = *n.src[4], sq = *n.src[5];
        int64_t T = 0;
        for (int k = 0; k < u->n_node; k++) T += u->node[k]->ne[2];
        const int64_t W = q.ne[0], H = n.ne[1];
        float *qa = malloc(sizeof(float) * (size_t)(W * T)), *ga = malloc(sizeof(float) * (size_t)(H * T)),
              *ba = malloc(sizeof(float) * (size_t)(H * T));
        int32_t *pa = malloc(sizeof(int32_t) * (size_t)T), *sa = malloc(sizeof(int32_t) * (size_t)T);
        for (int k = 0, at = 0; k < u->n_node; k++) {
            const ob_tensor *m = u->node[k];
            const int64_t Tk = m->ne[2];
            memcpy(qa + W * at, m->src[0]->data, sizeof(float) * (size_t)(W * Tk));
            memcpy(ga + H * at, m->src[1]->data, sizeof(float) * (size_t)(H * Tk));
            memcpy(ba + H * at, m->src[2]->data, sizeof(float) * (size_t)(H * Tk));
            memcpy(pa + at, m->src[4]->data, sizeof(int32_t) * (size_t)Tk);
            memcpy(sa + at, m->src[5]->data, sizeof(int32_t) * (size_t)Tk);
            at += (int)Tk;
        }
        q.data = qa, q.ne[1] = T, g.data = ga, g.ne[1] = T, be.data = ba, be.ne[1] = T;
        ps.data = pa, ps.ne[0] = T, sq.data = sa, sq.ne[0] = T;
        n.src[0] = &q, n.src[1] = &g, n.src[2] = &be, n.src[4] = &ps, n.src[5] = &sq, n.ne[2] = T;
        whole.node[0] = &n;
        whole.n_node = 1;
        float *one[3] = {NULL};
        float *st1 = dn_chunked(&whole, chunk, one);
        bool same = !memcmp(st, st1, sizeof(float) * (size_t)u->state_n);
        for (int k = 0, at = 0; k < u->n_node; k++) {
            const int64_t nk = ob_nelements(u->node[k]);
            same &= !memcmp(outs[k], one[0] + at, sizeof(float) * (size_t)nk);
            at += (int)nk;
        }
        CHECKF(same, "%s: chunked form (chunk %d) split at chunk boundaries differs from one node", b->name, chunk);
        for (int k = 0; k < u->n_node; k++) free(outs[k]);
        free(st), free(st1), free(one[0]), free(qa), free(ga), free(ba), free(pa), free(sa);
    }
}

static void dn_build(ops_build *b, const void *p) {
    const dn_row *r = p;
    rc_batch bt;
    rc_layout(&bt, r->mode, r->T, r->n_seq);
    const int64_t dk = r->dk, dv = r->dv, Hk = r->Hk, H = r->H, W = 2 * Hk * dk + H * dv;
    const int64_t n_state = r->mode == RC_DECODE ? r->n_seq + 2 : r->mode == RC_NOSTATE ? r->n_seq - 1 : r->n_seq + 1;
    const int64_t ns[2] = {dk * dv * H, n_state};
    ob_tensor *state = ops_leaf_f32(b, "state", 2, ns, 0.3f);
    /* without the L2 norm the keys stay small, so the recurrence stays contractive */
    const float *qkv = ops_f32(b, W * bt.T, r->l2 ? 1.0f : 0.15f);
    float *g = ops_own(b, sizeof(float) * (size_t)(H * bt.T)), *beta = ops_own(b, sizeof(float) * (size_t)(H * bt.T));
    for (int64_t i = 0; i < H * bt.T; i++) {
        g[i] = -3.0f * ob_rng_uniform(&b->rng) * ob_rng_uniform(&b->rng); /* decays from 0.05 to 1 */
        beta[i] = ob_rng_uniform(&b->rng);
    }
    dn_user *u = ops_own(b, sizeof(dn_user));
    u->state_n = ob_nelements(state);
    u->state0 = ops_own(b, sizeof(float) * (size_t)u->state_n);
    memcpy(u->state0, state->data, sizeof(float) * (size_t)u->state_n);
    for (int k = 0; k < bt.n_node; k++) {
        ob_tensor *o = ob_delta_net(b->g, rc_part(b, &bt, k, "qkv", qkv, W), rc_part(b, &bt, k, "g", g, H),
                                    rc_part(b, &bt, k, "beta", beta, H), state, rc_ids(b, &bt, k, "pos", bt.pos),
                                    rc_ids(b, &bt, k, "seq", bt.seq), r->dk, r->Hk, r->dv, 1.0f / sqrtf((float)r->dk),
                                    r->l2, 1e-6f);
        u->node[u->n_node++] = o;
        ops_check(b, o, OPS_MREL(2e-6));
    }
    u->state_chk = b->n_chk;
    ops_check(b, state, OPS_MREL(2e-6));
    b->user = u;
    b->ref_check = dn_chunk_check;
}

/* ---- the table ------------------------------------------------------------------------------- */

static const conv_row g_conv[] = {
    {64, 4, 40, 3, RC_PLAIN, true},   {130, 3, 33, 2, RC_PLAIN, false}, {1000, 2, 9, 2, RC_PLAIN, true},
    {6144, 4, 1, 4, RC_DECODE, true}, {130, 4, 1, 3, RC_DECODE, false}, {64, 3, 40, 2, RC_SPLIT, false},
    {200, 4, 40, 3, RC_SPLIT, true},  {96, 4, 0, 1, RC_STEPS, true},    {3, 3, 0, 1, RC_ALIGNED, false},
    /* LFM2's decode shape; 8 taps over an odd channel count; one token of each of two
     * sequences as a prefill; a sequence without a state row */
    {2048, 3, 4, 4, RC_DECODE, false}, {37, 8, 29, 3, RC_PLAIN, true},  {300, 5, 2, 2, RC_PLAIN, false},
    {77, 4, 20, 3, RC_NOSTATE, true},
};

static const dn_row g_dn[] = {
    {16, 16, 2, 4, 40, 3, RC_PLAIN, true},   {128, 128, 2, 4, 24, 2, RC_PLAIN, true},
    {8, 24, 3, 6, 33, 2, RC_PLAIN, false},   {32, 20, 1, 3, 17, 1, RC_PLAIN, true},
    {128, 128, 4, 8, 1, 3, RC_DECODE, true}, {16, 16, 2, 4, 1, 2, RC_DECODE, false},
    {16, 16, 2, 4, 40, 2, RC_SPLIT, true},   {24, 8, 2, 2, 31, 3, RC_SPLIT, true},
    {16, 16, 2, 4, 0, 1, RC_STEPS, true},    {128, 128, 1, 2, 0, 1, RC_STEPS, true},
    {16, 16, 2, 4, 0, 1, RC_ALIGNED, true},  {64, 72, 1, 2, 0, 1, RC_ALIGNED, false},
    /* the GPU kernels' paths: the largest head they take (256), rows and columns that fill
     * their register and column blocks partly (dk 40, 100; dv 36, 130), many value heads
     * over few key heads, a sequence without a state row */
    {256, 256, 1, 2, 20, 1, RC_PLAIN, true}, {256, 64, 2, 2, 1, 4, RC_DECODE, true},
    {40, 36, 2, 6, 23, 2, RC_PLAIN, true},   {100, 130, 1, 3, 9, 3, RC_PLAIN, false},
    {8, 8, 2, 16, 1, 5, RC_DECODE, true},    {16, 16, 2, 4, 30, 3, RC_NOSTATE, true},
    {320, 16, 1, 1, 5, 1, RC_PLAIN, true}, /* past the GPUs' head size: refused there */
};

/* The head size the GPU kernels take (op_delta_net.cu, delta_net.comp). */
#define RC_GPU_MAX_DK 256

/* The CPU backend refuses a token whose sequence has no state row (graph.h). */
static void rc_mark(ops_case *c, int mode) {
    if (mode != RC_NOSTATE) return;
    c->err_on = OPS_BIT(OPS_CPU);
    c->err_status = OB_ERR_CONTEXT;
}

void ops_add_recurrent(ops_list *l) {
    for (size_t i = 0; i < OB_ARRAY_LEN(g_conv); i++) {
        const conv_row *r = &g_conv[i];
        ops_case *c = ops_add(l, conv_build, r, "SSM_CONV C=%lld K=%lld %s T=%lld seqs=%d%s", (long long)r->C,
                              (long long)r->K, g_mode_name[r->mode], (long long)r->T, r->n_seq, r->silu ? " silu" : "");
        rc_mark(c, r->mode);
    }
    for (size_t i = 0; i < OB_ARRAY_LEN(g_dn); i++) {
        const dn_row *r = &g_dn[i];
        ops_case *c = ops_add(l, dn_build, r, "DELTA_NET dk=%d dv=%d heads %d/%d %s T=%lld seqs=%d%s", r->dk, r->dv,
                              r->Hk, r->H, g_mode_name[r->mode], (long long)r->T, r->n_seq, r->l2 ? " l2" : "");
        rc_mark(c, r->mode);
        if (r->dk > RC_GPU_MAX_DK) c->may_refuse = OPS_GPU;
    }
}
