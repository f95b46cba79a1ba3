/* A context: KV cache for n_seq sequences (and the recurrent layers' state, with its
 * checkpoints), input buffers, activation scratch, logits. Everything on the device is
 * allocated here; ob_decode allocates nothing there. */
#include "engine/model_internal.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A sequence's recurrent state as it was at length pos (host memory, rec_seq_bytes). */
typedef struct ob_ckpt {
    int pos;                 /* 0: empty */
    uint64_t stamp;          /* when taken: the oldest is overwritten first */
    void *data;              /* every recurrent layer's conv rows then delta-rule rows */
} ob_ckpt;

struct ob_context {
    ob_model *m;
    ob_backend *be;
    ob_context_params p;
    int cells_per_seq;
    ob_type kv_type_k, kv_type_v;
    void *kv_buf;            /* the attention layers' K then V caches */
    void *k[OB_MAX_LAYERS], *v[OB_MAX_LAYERS]; /* NULL for a recurrent layer */
    /* Recurrent layers (issue #33): their state, per layer the conv rows [rec_conv, n_seq] then
     * the delta-rule rows [rec_ssm, n_seq], in one device buffer; a token at position 0 starts
     * its sequence from zeros inside the ops, so nothing is cleared here. */
    void *rec_buf;
    void *conv_st[OB_MAX_LAYERS], *ssm_st[OB_MAX_LAYERS];
    size_t rec_seq_bytes;    /* one sequence's state over every recurrent layer; 0: none */
    ob_ckpt *ckpt;           /* [n_seq][n_ckpt] */
    int n_ckpt;
    int *ckpt_want;          /* [n_seq]: keep the state when the sequence reaches this length (0: no) */
    uint64_t ckpt_clock;
    void *in_buf;            /* device: tokens, pos, seq, out_ids (I32 [n_batch] each) */
    int32_t *h_in;           /* host staging for the same */
    void *scratch;
    size_t scratch_size;
    ob_graph *graph;
    float *logits;           /* host [n_vocab, n_out] */
    int32_t *logit_row;      /* per token of the last batch: row in logits or -1 */
    int n_batch_last;
    int *seq_len;            /* [n_seq] */
    int pooling;             /* embeddings mode: ob_pooling > 0 or OB_ARCH_POOL_TOKENS; 0 = logits */
    int n_embd_out;          /* floats per pooled vector */
    float *embd;             /* host [n_embd_out, n_seq] pooled vectors of the last batch
                              * ([n_embd_out, n_batch] per token for OB_ARCH_POOL_TOKENS) */
    int n_embd_rows;         /* OB_ARCH_POOL_TOKENS: tokens of the last batch */
    bool *embd_valid;        /* [n_seq] sequence was in the last batch */
    /* Sampling in the graph (ob_decode_sample): SAMPLE's params F32 [OB_SAMPLE_NPARAM, n_batch]
     * in a fixed device buffer (a captured step replays with the same pointer). */
    void *sample_buf;
    float *h_sample;         /* host [OB_SAMPLE_NPARAM, n_batch] */
    bool sample_ok;          /* the backend runs SAMPLE for this model's logits */
    /* What the graph holds while graph->version is nonzero (decode_chunk's last build): a
     * step of the same shape runs it again without building, planning or binding. */
    int built_T, built_n_out;
    ob_tensor *built_logits, *built_sampled;
    ob_placement place;      /* the prefill and decode graphs' placement (ob_context_placement) */
    uint64_t dev_bytes;      /* device buffers above, counted in the model's memory */
};

ob_context_params ob_context_default_params(void) {
    ob_context_params p = {0};
    p.n_ctx = 0;
    p.n_seq = 1;
    p.n_batch = 512;
    p.type_k = OB_KV_F16;
    p.type_v = OB_KV_F16;
    p.embeddings = false;
    p.pooling = OB_POOLING_DEFAULT;
    p.normalize = true;
    p.n_seq_checkpoints = 2;
    return p;
}

/* The cache types, indexed by ob_kv_type: llama-server's name and the tensor type. */
static const struct {
    const char *name;
    ob_type type;
} g_kv_types[OB_KV_COUNT] = {
    [OB_KV_F16] = {"f16", OB_TYPE_F16},       [OB_KV_Q8_0] = {"q8_0", OB_TYPE_Q8_0},
    [OB_KV_F32] = {"f32", OB_TYPE_F32},       [OB_KV_BF16] = {"bf16", OB_TYPE_BF16},
    [OB_KV_Q4_0] = {"q4_0", OB_TYPE_Q4_0},    [OB_KV_Q4_1] = {"q4_1", OB_TYPE_Q4_1},
    [OB_KV_Q5_0] = {"q5_0", OB_TYPE_Q5_0},    [OB_KV_Q5_1] = {"q5_1", OB_TYPE_Q5_1},
    [OB_KV_IQ4_NL] = {"iq4_nl", OB_TYPE_IQ4_NL},
};

const char *ob_kv_type_name(ob_kv_type t) { return (unsigned)t < OB_KV_COUNT ? g_kv_types[t].name : NULL; }

ob_type ob_kv_type_tensor(ob_kv_type t) { return (unsigned)t < OB_KV_COUNT ? g_kv_types[t].type : OB_TYPE_COUNT; }

bool ob_kv_type_from_name(const char *name, ob_kv_type *out) {
    for (int t = 0; name && t < OB_KV_COUNT; t++) {
        const char *a = g_kv_types[t].name, *b = name;
        while (*a && (*b == *a || (*b >= 'A' && *b <= 'Z' && *b - 'A' + 'a' == *a))) a++, b++;
        if (!*a && !*b) {
            if (out) *out = (ob_kv_type)t;
            return true;
        }
    }
    return false;
}

/* Builds the graph of one forward pass over T tokens, n_out of which want logits. */
static ob_tensor *build(ob_context *c, int T, int n_out) {
    ob_model *m = c->m;
    const ob_hparams *hp = &m->hp;
    ob_graph *g = c->graph;
    ob_graph_reset(g);
    ob_fwd_inputs in = {0};
    int32_t *base = c->in_buf;
    int nb = c->p.n_batch;
    int64_t neT[1] = {T}, neO[1] = {n_out};
    in.tokens = ob_leaf(g, "inp_tokens", OB_TYPE_I32, 1, neT, base);
    in.pos = ob_leaf(g, "inp_pos", OB_TYPE_I32, 1, neT, base + nb);
    in.seq = ob_leaf(g, "inp_seq", OB_TYPE_I32, 1, neT, base + 2 * nb);
    in.out_ids = ob_leaf(g, "inp_out_ids", OB_TYPE_I32, 1, neO, base + 3 * nb);
    int64_t cells = (int64_t)c->cells_per_seq * c->p.n_seq;
    int64_t nekv[2] = {(int64_t)hp->head_dim * hp->n_head_kv, cells};
    for (int il = 0; il < hp->n_layer; il++) {
        if (hp->layer_rec[il]) {
            const int64_t nec[2] = {hp->rec_conv, c->p.n_seq}, nes[2] = {hp->rec_ssm, c->p.n_seq};
            in.conv_state[il] = ob_leaf(g, "conv_state", OB_TYPE_F32, 2, nec, c->conv_st[il]);
            ob_set_name(in.conv_state[il], "conv_state.%d", il);
            if (hp->rec_ssm) {
                in.ssm_state[il] = ob_leaf(g, "ssm_state", OB_TYPE_F32, 2, nes, c->ssm_st[il]);
                ob_set_name(in.ssm_state[il], "ssm_state.%d", il);
            }
            continue;
        }
        in.k_cache[il] = ob_leaf(g, "cache_k", c->kv_type_k, 2, nekv, c->k[il]);
        ob_set_name(in.k_cache[il], "cache_k.%d", il);
        if (hp->v_in_k) { /* MLA: the values are read from the K rows */
            in.v_cache[il] = in.k_cache[il];
            continue;
        }
        in.v_cache[il] = ob_leaf(g, "cache_v", c->kv_type_v, 2, nekv, c->v[il]);
        ob_set_name(in.v_cache[il], "cache_v.%d", il);
    }
    in.cells_per_seq = c->cells_per_seq;
    in.n_tokens = T;
    in.n_out = n_out;
    in.pooling = c->pooling;
    in.normalize = c->p.normalize && c->pooling != OB_POOLING_RANK && c->pooling != OB_ARCH_POOL_TOKENS;
    in.n_seq = c->p.n_seq;
    return m->arch->build(g, hp, m->arch_priv, &in);
}

/* Counts the graph's nodes the backend has no kernel for and its runs of nodes on one side,
 * keeping the most of the graphs seen (ob_context_placement). */
static void count_placement(ob_context *c) {
    ob_graph *g = c->graph;
    ob_placement *pl = &c->place;
    int off = 0, runs = 0, side = -1;
    for (int64_t i = 0; i < g->n; i++) {
        ob_tensor *t = &g->nodes[i];
        if (t->op == OB_OP_LEAF || t->op == OB_OP_VIEW) continue;
        int on = c->be->iface->supports(c->be, t) ? 1 : 0;
        if (on != side) runs++;
        side = on;
        if (on) continue;
        off++;
        const char *name = ob_op_name(t->op);
        size_t len = strlen(pl->off_ops), nl = strlen(name);
        const char *hit = strstr(pl->off_ops, name);
        bool listed = hit && (hit == pl->off_ops || hit[-1] == ' ') && (hit[nl] == ',' || hit[nl] == 0);
        if (!listed && len + nl + 3 < sizeof(pl->off_ops))
            snprintf(pl->off_ops + len, sizeof(pl->off_ops) - len, "%s%s", len ? ", " : "", name);
    }
    pl->n_off_device = OB_MAX(pl->n_off_device, off);
    pl->n_splits = OB_MAX(pl->n_splits, runs);
}

void ob_context_placement(const ob_context *c, ob_placement *out) { *out = c->place; }

/* Every node of the graph must run on the chosen backend (strict placement). */
static ob_status check_placement(ob_context *c, char *err, size_t err_len) {
    ob_graph *g = c->graph;
    for (int64_t i = 0; i < g->n; i++) {
        ob_tensor *t = &g->nodes[i];
        if (t->op == OB_OP_LEAF || t->op == OB_OP_VIEW) continue;
        if (c->be->iface->supports(c->be, t)) continue;
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED,
                       "placement: node '%s' op %s (%s x %s) shape [%lld, %lld, %lld] has no %s kernel "
                       "(--no-strict-device allows a CPU fallback)",
                       t->name, ob_op_name(t->op), t->src[0] ? ob_type_name(t->src[0]->type) : "-",
                       t->src[1] ? ob_type_name(t->src[1]->type) : "-", (long long)t->ne[0], (long long)t->ne[1],
                       (long long)t->ne[2], c->be->iface->name);
    }
    return OB_OK;
}

void ob_context_free(ob_context *c) {
    if (!c) return;
    ob_backend *be = c->be;
    if (c->dev_bytes) ob_model_mem_add(c->m, -(int64_t)c->dev_bytes);
    if (c->kv_buf) be->iface->free_buf(be, c->kv_buf);
    if (c->rec_buf) be->iface->free_buf(be, c->rec_buf);
    for (int i = 0; c->ckpt && i < c->p.n_seq * c->n_ckpt; i++) free(c->ckpt[i].data);
    free(c->ckpt);
    free(c->ckpt_want);
    if (c->in_buf) be->iface->free_buf(be, c->in_buf);
    if (c->scratch) be->iface->free_buf(be, c->scratch);
    if (c->sample_buf) be->iface->free_buf(be, c->sample_buf);
    free(c->h_sample);
    ob_graph_free(c->graph);
    free(c->h_in);
    free(c->logits);
    free(c->logit_row);
    free(c->seq_len);
    free(c->embd);
    free(c->embd_valid);
    free(c);
}

ob_status ob_context_new(ob_model *m, const ob_context_params *pp, ob_context **out, char *err, size_t err_len) {
    *out = NULL;
    ob_context_params p = pp ? *pp : ob_context_default_params();
    const ob_hparams *hp = &m->hp;
    if (p.n_seq <= 0) p.n_seq = 1;
    if (p.n_batch <= 0) p.n_batch = 512;
    if (p.n_ctx <= 0) p.n_ctx = hp->n_ctx_train > 0 && hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (p.n_ctx > 1 << 22 || p.n_seq > 1024 || p.n_batch > 1 << 16)
        return ob_fail(err, err_len, OB_ERR_ARG, "context: sizes out of range (ctx %d, seqs %d, batch %d)", p.n_ctx, p.n_seq, p.n_batch);
    if (hp->n_ctx_limit > 0 && p.n_ctx > hp->n_ctx_limit && !hp->encoder)
        ob_log(OB_LOG_WARN, "context: %d positions per sequence is past the %d the model was trained for "
               "(answers may degrade there; --rope-scaling yarn with --rope-scale stretches it)", p.n_ctx, hp->n_ctx_limit);
    ob_context *c = calloc(1, sizeof(*c));
    if (!c) return ob_fail(err, err_len, OB_ERR_NOMEM, "context: out of memory");
    c->m = m;
    c->be = m->backend;
    c->p = p;
    c->cells_per_seq = p.n_ctx;
    c->kv_type_k = ob_kv_type_tensor(p.type_k);
    c->kv_type_v = ob_kv_type_tensor(p.type_v);
    ob_status st = OB_OK;
    size_t row = (size_t)hp->head_dim * hp->n_head_kv;
    size_t cells = (size_t)p.n_ctx * p.n_seq;
    for (int kv = 0; kv < 2; kv++) {
        const ob_kv_type t = kv ? p.type_v : p.type_k;
        if (!ob_kv_type_name(t)) {
            st = ob_fail(err, err_len, OB_ERR_ARG, "context: unknown KV cache type %d", (int)t);
            goto fail;
        }
        /* attention reads a head's slice of a cache row: it must hold whole blocks */
        if (hp->head_dim % ob_type_block_size(ob_kv_type_tensor(t)) != 0) {
            st = ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "context: a %s cache needs head sizes of whole %lld-element blocks (%d)",
                         ob_kv_type_name(t), (long long)ob_type_block_size(ob_kv_type_tensor(t)), hp->head_dim);
            goto fail;
        }
    }
    size_t krow = ob_row_size(c->kv_type_k, (int64_t)row), vrow = ob_row_size(c->kv_type_v, (int64_t)row);
    if (!krow || !vrow) {
        st = ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "context: head size %zu is not a multiple of the KV cache block", row);
        goto fail;
    }
    size_t layer_k = (krow * cells + 255) & ~(size_t)255, layer_v = hp->v_in_k ? 0 : (vrow * cells + 255) & ~(size_t)255;
    /* a KV cache for each attention layer, a state for each recurrent one */
    int n_attn = 0, n_rec = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        if (hp->layer_rec[il]) n_rec++;
        else n_attn++;
    }
    size_t kv_total = (layer_k + layer_v) * (size_t)n_attn;
    const size_t rec_conv = (sizeof(float) * (size_t)hp->rec_conv * (size_t)p.n_seq + 255) & ~(size_t)255,
                 rec_ssm = (sizeof(float) * (size_t)hp->rec_ssm * (size_t)p.n_seq + 255) & ~(size_t)255;
    const size_t rec_total = (rec_conv + rec_ssm) * (size_t)n_rec;
    c->rec_seq_bytes = sizeof(float) * (size_t)(hp->rec_conv + hp->rec_ssm) * (size_t)n_rec;
    c->n_ckpt = n_rec ? OB_MAX(0, OB_MIN(p.n_seq_checkpoints, 64)) : 0;
    if (n_rec) {
        c->ckpt = calloc((size_t)(p.n_seq * c->n_ckpt) + 1, sizeof(ob_ckpt));
        c->ckpt_want = calloc((size_t)p.n_seq, sizeof(int));
        if (!c->ckpt || !c->ckpt_want) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "context: out of memory"); goto fail; }
    }
    if (hp->encoder && !p.embeddings) {
        /* An encoder has no LM head: a caller expecting logits gets a clear error, not NULL rows. */
        st = ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "context: %s is an embedding/rank model (no logits); use embeddings",
                     hp->arch);
        goto fail;
    }
    if (p.embeddings) {
        c->pooling = p.pooling == OB_POOLING_DEFAULT ? hp->pooling_type : p.pooling;
        if (p.pooling == OB_POOLING_NONE) c->pooling = OB_ARCH_POOL_TOKENS; /* asked for: per token */
        else if (c->pooling == OB_POOLING_DEFAULT || c->pooling == OB_POOLING_NONE)
            c->pooling = hp->encoder ? OB_POOLING_CLS : OB_POOLING_LAST;
        if (c->pooling != OB_ARCH_POOL_TOKENS &&
            (c->pooling < OB_POOLING_MEAN || c->pooling > OB_POOLING_RANK || (c->pooling == OB_POOLING_RANK && hp->n_cls_out <= 0))) {
            st = ob_fail(err, err_len, OB_ERR_ARG, "context: pooling %d is not available for this model", c->pooling);
            goto fail;
        }
        c->n_embd_out = c->pooling == OB_POOLING_RANK ? hp->n_cls_out : hp->n_embd;
        size_t rows = c->pooling == OB_ARCH_POOL_TOKENS ? (size_t)p.n_batch : (size_t)p.n_seq;
        c->embd = calloc((size_t)c->n_embd_out * rows, sizeof(float));
        c->embd_valid = calloc((size_t)p.n_seq, sizeof(bool));
        if (!c->embd || !c->embd_valid) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "context: out of memory"); goto fail; }
    }
    c->graph = ob_graph_new((int64_t)hp->n_layer * 64 + 64); /* deepseek2 builds ~60 nodes a layer */
    c->h_in = calloc((size_t)p.n_batch * 4, sizeof(int32_t));
    /* +1: a chunk with no wanted row still writes one. Embeddings contexts have no logits. */
    c->logits = malloc(sizeof(float) * (c->pooling ? 1 : (size_t)hp->n_vocab * ((size_t)p.n_batch + 1)));
    c->logit_row = malloc(sizeof(int32_t) * (size_t)p.n_batch);
    c->seq_len = calloc((size_t)p.n_seq, sizeof(int));
    if (!c->graph || !c->h_in || !c->logits || !c->logit_row || !c->seq_len) {
        st = ob_fail(err, err_len, OB_ERR_NOMEM, "context: out of memory");
        goto fail;
    }
    /* Scratch for the largest graph: a full batch with every row wanting logits. */
    c->in_buf = c->be->iface->alloc(c->be, sizeof(int32_t) * (size_t)p.n_batch * 4);
    if (!c->in_buf) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "context: cannot allocate input buffers"); goto fail; }
    if (!build(c, p.n_batch, p.n_batch)) {
        st = ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "context: the %s family cannot build this output (pooling %d)",
                     m->arch->name, c->pooling);
        goto fail;
    }
    ob_graph_plan(c->graph);
    size_t scratch = c->graph->scratch_size;
    if (!c->pooling) {
        /* Sampling in the graph when the backend has the op: the largest graph with it
         * sizes the scratch too. Without it, decoding samples on the host. */
        c->sample_buf = c->be->iface->alloc(c->be, sizeof(float) * OB_SAMPLE_NPARAM * (size_t)p.n_batch);
        c->h_sample = calloc((size_t)p.n_batch * OB_SAMPLE_NPARAM, sizeof(float));
        if (!c->sample_buf || !c->h_sample) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "context: out of memory"); goto fail; }
        ob_tensor *lg = build(c, p.n_batch, p.n_batch);
        int64_t nep[2] = {OB_SAMPLE_NPARAM, p.n_batch};
        ob_tensor *tok = ob_sample(c->graph, lg, ob_leaf(c->graph, "inp_sample", OB_TYPE_F32, 2, nep, c->sample_buf));
        c->sample_ok = c->be->iface->supports(c->be, tok);
        if (c->sample_ok) {
            ob_graph_plan(c->graph);
            scratch = OB_MAX(scratch, c->graph->scratch_size);
        } else {
            build(c, p.n_batch, p.n_batch); /* placement checks the graph decoding will run */
        }
    }
    /* the largest graph as decoding runs it, then a one-token step */
    count_placement(c);
    if (m->params.strict_device && (st = check_placement(c, err, err_len))) goto fail;
    build(c, 1, 1);
    count_placement(c);
    if (m->params.strict_device && (st = check_placement(c, err, err_len))) goto fail;
    size_t need = kv_total + rec_total + scratch;
    if (m->params.mem_budget && need + m->weight_bytes > m->params.mem_budget) {
        st = ob_fail(err, err_len, OB_ERR_NOMEM,
                     "context: weights %.1f MiB + KV cache %.1f MiB + recurrent state %.1f MiB + scratch %.1f MiB exceed the "
                     "memory budget of %.1f MiB",
                     m->weight_bytes / 1048576.0, kv_total / 1048576.0, rec_total / 1048576.0, scratch / 1048576.0,
                     m->params.mem_budget / 1048576.0);
        goto fail;
    }
    c->kv_buf = kv_total ? c->be->iface->alloc(c->be, kv_total) : NULL;
    c->rec_buf = rec_total ? c->be->iface->alloc(c->be, rec_total) : NULL;
    c->scratch = c->be->iface->alloc(c->be, scratch);
    c->scratch_size = scratch;
    if ((kv_total && !c->kv_buf) || (rec_total && !c->rec_buf) || !c->scratch) {
        st = ob_fail(err, err_len, OB_ERR_NOMEM,
                     "context: cannot allocate KV cache %.1f MiB + recurrent state %.1f MiB + scratch %.1f MiB on %s",
                     kv_total / 1048576.0, rec_total / 1048576.0, scratch / 1048576.0, c->be->iface->name);
        goto fail;
    }
    for (int il = 0, ia = 0, ir = 0; il < hp->n_layer; il++) {
        if (hp->layer_rec[il]) {
            c->conv_st[il] = (char *)c->rec_buf + (size_t)ir * (rec_conv + rec_ssm);
            c->ssm_st[il] = (char *)c->conv_st[il] + rec_conv;
            ir++;
            continue;
        }
        c->k[il] = (char *)c->kv_buf + (size_t)ia * (layer_k + layer_v);
        c->v[il] = hp->v_in_k ? c->k[il] : (char *)c->k[il] + layer_k;
        ia++;
    }
    c->dev_bytes = kv_total + rec_total + scratch + sizeof(int32_t) * (size_t)p.n_batch * 4 +
                   (c->sample_buf ? sizeof(float) * OB_SAMPLE_NPARAM * (size_t)p.n_batch : 0);
    ob_model_mem_add(m, (int64_t)c->dev_bytes);
    *out = c;
    return OB_OK;
fail:
    ob_context_free(c);
    return st;
}

int ob_context_n_ctx(const ob_context *c) { return c->cells_per_seq; }

int ob_seq_len(const ob_context *c, int seq) {
    return seq >= 0 && seq < c->p.n_seq ? c->seq_len[seq] : 0;
}

/* ---- recurrent state checkpoints ------------------------------------------------------------ */

/* Copies sequence seq's state over every recurrent layer to (save) or from host memory h. */
static ob_status rec_copy(ob_context *c, int seq, void *h, bool save) {
    const ob_hparams *hp = &c->m->hp;
    ob_backend *be = c->be;
    char *at = h;
    for (int il = 0; il < hp->n_layer; il++) {
        if (!hp->layer_rec[il]) continue;
        const size_t nb[2] = {sizeof(float) * (size_t)hp->rec_conv, sizeof(float) * (size_t)hp->rec_ssm};
        char *dev[2] = {(char *)c->conv_st[il] + nb[0] * (size_t)seq, (char *)c->ssm_st[il] + nb[1] * (size_t)seq};
        for (int k = 0; k < 2; k++) {
            if (!nb[k]) continue;
            ob_status st = save ? be->iface->download(be, at, dev[k], nb[k]) : be->iface->upload(be, dev[k], at, nb[k]);
            if (st) return st;
            at += nb[k];
        }
    }
    return OB_OK;
}

/* Keeps sequence seq's state as it is now, at length len: in the slot already holding that
 * length, else an empty one, else the oldest. */
static void ckpt_save(ob_context *c, int seq, int len) {
    ob_ckpt *slot = c->ckpt + (size_t)seq * (size_t)c->n_ckpt, *use = NULL;
    for (int i = 0; i < c->n_ckpt && !use; i++)
        if (slot[i].pos == len) use = &slot[i];
    for (int i = 0; i < c->n_ckpt && !use; i++)
        if (!slot[i].pos) use = &slot[i];
    if (!use) {
        use = &slot[0];
        for (int i = 1; i < c->n_ckpt; i++)
            if (slot[i].stamp < use->stamp) use = &slot[i];
    }
    if (!use->data && !(use->data = malloc(c->rec_seq_bytes))) return; /* no room: no checkpoint */
    use->pos = rec_copy(c, seq, use->data, true) == OB_OK ? len : 0;
    use->stamp = ++c->ckpt_clock;
}

void ob_seq_checkpoint_at(ob_context *c, int seq, int pos) {
    if (!c || !c->n_ckpt || seq < 0 || seq >= c->p.n_seq || pos <= 0 || pos > c->cells_per_seq) return;
    if (pos == c->seq_len[seq]) ckpt_save(c, seq, pos);
    else c->ckpt_want[seq] = pos;
}

void ob_seq_truncate(ob_context *c, int seq, int pos) {
    if (seq < 0 || seq >= c->p.n_seq || pos < 0) return;
    if (pos >= c->seq_len[seq]) return;
    c->seq_len[seq] = pos;
    if (!c->rec_seq_bytes) return;
    /* The recurrent state cannot be cut back: the latest checkpoint at or before pos, or
     * nothing (the sequence starts again at 0). Checkpoints past the new length are gone. */
    ob_ckpt *slot = c->ckpt + (size_t)seq * (size_t)c->n_ckpt, *best = NULL;
    for (int i = 0; i < c->n_ckpt; i++) {
        if (slot[i].pos > pos) slot[i].pos = 0;
        else if (slot[i].pos && (!best || slot[i].pos > best->pos)) best = &slot[i];
    }
    c->seq_len[seq] = best && rec_copy(c, seq, best->data, false) == OB_OK ? best->pos : 0;
}

/* ---- a sequence in a file (llama-server's /slots/{id}?action=save|restore) ------------------ */

/* The file: this header (host byte order, the fields in the order written), the tokens
 * (int32), then per attention layer the K rows of cells 0 .. n_tokens-1 and the V rows (none
 * where V lives in K), then the recurrent state (rec_copy's order). */
#define SEQ_MAGIC "OB1SEQ\0\1"
enum { SEQ_VOCAB, SEQ_LAYER, SEQ_EMBD, SEQ_HEAD_DIM, SEQ_HEAD_KV, SEQ_TK, SEQ_TV, SEQ_V_IN_K, SEQ_TOKENS, SEQ_NU32 };
typedef struct seq_head {
    uint32_t u[SEQ_NU32];
    uint64_t krow, vrow, rec;
} seq_head;

static seq_head seq_head_of(const ob_context *c, int n_tokens) {
    const ob_hparams *hp = &c->m->hp;
    const int64_t row = (int64_t)hp->head_dim * hp->n_head_kv;
    seq_head h = {{(uint32_t)hp->n_vocab, (uint32_t)hp->n_layer, (uint32_t)hp->n_embd, (uint32_t)hp->head_dim,
                   (uint32_t)hp->n_head_kv, (uint32_t)c->kv_type_k, (uint32_t)c->kv_type_v, hp->v_in_k, (uint32_t)n_tokens},
                  ob_row_size(c->kv_type_k, row), hp->v_in_k ? 0 : ob_row_size(c->kv_type_v, row), c->rec_seq_bytes};
    return h;
}

/* Moves n bytes between the device at dev and the file f through buf (cap bytes). */
static ob_status seq_stream(ob_context *c, FILE *f, char *dev, size_t n, char *buf, size_t cap, bool save) {
    for (size_t at = 0; at < n;) {
        const size_t k = OB_MIN(cap, n - at);
        if (save) {
            if (c->be->iface->download(c->be, buf, dev + at, k) || fwrite(buf, 1, k, f) != k) return OB_ERR_IO;
        } else if (fread(buf, 1, k, f) != k || c->be->iface->upload(c->be, dev + at, buf, k)) {
            return OB_ERR_IO;
        }
        at += k;
    }
    return OB_OK;
}

/* Every attention layer's rows of seq's first n cells, then the recurrent state. */
static ob_status seq_body(ob_context *c, int seq, int n, FILE *f, bool save) {
    const ob_hparams *hp = &c->m->hp;
    const seq_head h = seq_head_of(c, n);
    const size_t cap = 1u << 22;
    char *buf = malloc(OB_MAX(cap, c->rec_seq_bytes) + 1);
    if (!buf) return OB_ERR_NOMEM;
    ob_status st = OB_OK;
    const size_t cell0 = (size_t)seq * (size_t)c->cells_per_seq;
    for (int il = 0; il < hp->n_layer && !st; il++) {
        if (hp->layer_rec[il]) continue;
        st = seq_stream(c, f, (char *)c->k[il] + h.krow * cell0, h.krow * (size_t)n, buf, cap, save);
        if (!st && h.vrow) st = seq_stream(c, f, (char *)c->v[il] + h.vrow * cell0, h.vrow * (size_t)n, buf, cap, save);
    }
    if (!st && c->rec_seq_bytes) {
        if (save) st = rec_copy(c, seq, buf, true) || fwrite(buf, 1, c->rec_seq_bytes, f) != c->rec_seq_bytes ? OB_ERR_IO : OB_OK;
        else st = fread(buf, 1, c->rec_seq_bytes, f) != c->rec_seq_bytes || rec_copy(c, seq, buf, false) ? OB_ERR_IO : OB_OK;
    }
    free(buf);
    return st;
}

ob_status ob_seq_save_file(ob_context *c, int seq, const int32_t *tokens, int n_tokens, const char *path,
                           size_t *n_bytes, char *err, size_t err_len) {
    if (seq < 0 || seq >= c->p.n_seq || n_tokens < 0 || n_tokens != c->seq_len[seq] || (n_tokens && !tokens))
        return ob_fail(err, err_len, OB_ERR_ARG, "sequence %d holds %d tokens, not the %d given", seq,
                       seq >= 0 && seq < c->p.n_seq ? c->seq_len[seq] : 0, n_tokens);
    if (c->pooling) return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "an embeddings context keeps no sequence state");
    /* written beside the file, then renamed over it: never a partial file under its name */
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return ob_fail(err, err_len, OB_ERR_ARG, "path too long");
    FILE *f = fopen(tmp, "wb");
    if (!f) return ob_fail(err, err_len, OB_ERR_IO, "cannot write %s", path);
    const seq_head h = seq_head_of(c, n_tokens);
    ob_status st = fwrite(SEQ_MAGIC, 1, 8, f) != 8 || fwrite(&h.u, sizeof(h.u), 1, f) != 1 ||
                           fwrite(&h.krow, 8, 1, f) != 1 || fwrite(&h.vrow, 8, 1, f) != 1 || fwrite(&h.rec, 8, 1, f) != 1 ||
                           fwrite(tokens, sizeof(int32_t), (size_t)n_tokens, f) != (size_t)n_tokens
                       ? OB_ERR_IO
                       : seq_body(c, seq, n_tokens, f, true);
    const long size = st ? 0 : ftell(f);
    if (fclose(f) != 0 && !st) st = OB_ERR_IO;
    if (!st && rename(tmp, path) != 0) st = OB_ERR_IO;
    if (st) {
        remove(tmp);
        if (st == OB_ERR_NOMEM) return ob_fail(err, err_len, st, "out of memory saving sequence %d", seq);
        return ob_fail(err, err_len, st, "cannot write %s", path);
    }
    if (n_bytes) *n_bytes = (size_t)size;
    return OB_OK;
}

ob_status ob_seq_load_file(ob_context *c, int seq, const char *path, int32_t **tokens, int *n_tokens, size_t *n_bytes,
                           char *err, size_t err_len) {
    *tokens = NULL;
    *n_tokens = 0;
    if (seq < 0 || seq >= c->p.n_seq) return ob_fail(err, err_len, OB_ERR_ARG, "no sequence %d", seq);
    if (c->pooling) return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "an embeddings context keeps no sequence state");
    FILE *f = fopen(path, "rb");
    if (!f) return ob_fail(err, err_len, OB_ERR_IO, "cannot read %s", path);
    char magic[8];
    seq_head h;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, SEQ_MAGIC, 8) || fread(&h.u, sizeof(h.u), 1, f) != 1 ||
        fread(&h.krow, 8, 1, f) != 1 || fread(&h.vrow, 8, 1, f) != 1 || fread(&h.rec, 8, 1, f) != 1) {
        fclose(f);
        return ob_fail(err, err_len, OB_ERR_FORMAT, "%s is not a saved sequence", path);
    }
    const int n = (int)OB_MIN(h.u[SEQ_TOKENS], (uint32_t)INT32_MAX);
    const seq_head want = seq_head_of(c, n);
    if (memcmp(h.u, want.u, sizeof(h.u)) || h.krow != want.krow || h.vrow != want.vrow || h.rec != want.rec) {
        fclose(f);
        return ob_fail(err, err_len, OB_ERR_FORMAT, "%s was saved by another model or cache type", path);
    }
    if (n > c->cells_per_seq) {
        fclose(f);
        return ob_fail(err, err_len, OB_ERR_CONTEXT, "%s holds %d tokens, past the %d of a sequence", path, n, c->cells_per_seq);
    }
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n + 1);
    ob_status st = !tok ? OB_ERR_NOMEM : fread(tok, sizeof(int32_t), (size_t)n, f) != (size_t)n ? OB_ERR_FORMAT : OB_OK;
    for (int i = 0; i < n && !st; i++)
        if (tok[i] < 0 || tok[i] >= c->m->hp.n_vocab) st = OB_ERR_FORMAT;
    /* the sequence is empty while its cells are rewritten: a failure leaves it so */
    c->seq_len[seq] = 0;
    if (c->n_ckpt) {
        ob_ckpt *slot = c->ckpt + (size_t)seq * (size_t)c->n_ckpt;
        for (int i = 0; i < c->n_ckpt; i++) slot[i].pos = 0;
        c->ckpt_want[seq] = 0;
    }
    if (!st) st = seq_body(c, seq, n, f, false);
    const long size = st ? 0 : ftell(f);
    if (!st && fgetc(f) != EOF) st = OB_ERR_FORMAT; /* bytes past the end: not ours */
    fclose(f);
    if (st) {
        free(tok);
        if (st == OB_ERR_NOMEM) return ob_fail(err, err_len, st, "out of memory restoring sequence %d", seq);
        return ob_fail(err, err_len, st, "%s is cut short or damaged", path);
    }
    c->seq_len[seq] = n;
    *tokens = tok;
    *n_tokens = n;
    if (n_bytes) *n_bytes = (size_t)size;
    return OB_OK;
}

/* Runs one chunk of at most n_batch tokens. With sparams (host [OB_SAMPLE_NPARAM, n_out],
 * the chunk being the whole batch), the graph ends in SAMPLE and only its tokens come
 * back, into out_tok [n_out]. */
static ob_status decode_chunk(ob_context *c, const ob_batch *b, int start, int T, const float *sparams,
                              int32_t *out_tok, char *err, size_t err_len) {
    const ob_hparams *hp = &c->m->hp;
    int nb = c->p.n_batch;
    int32_t *tok = c->h_in, *pos = c->h_in + nb, *seq = c->h_in + 2 * nb, *outs = c->h_in + 3 * nb;
    int n_out = 0;
    for (int i = 0; i < T; i++) {
        int j = start + i;
        tok[i] = b->token[j];
        pos[i] = b->pos[j];
        seq[i] = b->seq[j];
        bool want = b->want_logits ? b->want_logits[j] != 0 : j == b->n_tokens - 1;
        c->logit_row[j] = want ? n_out : -1;
        if (want) outs[n_out++] = i;
    }
    if (n_out == 0) outs[n_out++] = T - 1; /* the graph always ends in logits */
    ob_backend *be = c->be;
    ob_status st = be->iface->upload(be, c->in_buf, c->h_in, sizeof(int32_t) * (size_t)nb * 4);
    if (st) return ob_fail(err, err_len, OB_ERR_DEVICE, "decode: upload failed");
    ob_tensor *logits, *sampled = NULL;
    if (c->graph->version && c->built_T == T && c->built_n_out == n_out && (c->built_sampled != NULL) == (sparams != NULL)) {
        /* The same shape as the last step (every decode step of one batch size): the graph
         * reads its inputs from the same buffers, so it runs again as it is. */
        logits = c->built_logits;
        sampled = c->built_sampled;
    } else {
        logits = build(c, T, n_out);
        if (sparams) {
            int64_t nep[2] = {OB_SAMPLE_NPARAM, n_out};
            sampled = ob_sample(c->graph, logits, ob_leaf(c->graph, "inp_sample", OB_TYPE_F32, 2, nep, c->sample_buf));
        }
        ob_graph_plan(c->graph);
        OB_ASSERT(c->graph->scratch_size <= c->scratch_size);
        ob_graph_bind(c->graph, c->scratch);
        c->graph->version = ob_graph_new_version();
        c->built_T = T;
        c->built_n_out = n_out;
        c->built_logits = logits;
        c->built_sampled = sampled;
    }
    if (sparams) {
        st = be->iface->upload(be, c->sample_buf, sparams, sizeof(float) * OB_SAMPLE_NPARAM * (size_t)n_out);
        if (st) return ob_fail(err, err_len, OB_ERR_DEVICE, "decode: upload failed");
    }
    st = be->iface->compute(be, c->graph, err, err_len);
    if (st) return st;
    if (c->pooling == OB_ARCH_POOL_TOKENS) {
        st = be->iface->download(be, c->embd, logits->data, sizeof(float) * (size_t)c->n_embd_out * (size_t)T);
        if (st) return ob_fail(err, err_len, OB_ERR_DEVICE, "decode: download failed");
        c->n_embd_rows = T;
        return OB_OK;
    }
    if (c->pooling) {
        size_t eb = sizeof(float) * (size_t)c->n_embd_out * (size_t)c->p.n_seq;
        st = be->iface->download(be, c->embd, logits->data, eb);
        if (st) return ob_fail(err, err_len, OB_ERR_DEVICE, "decode: download failed");
        memset(c->embd_valid, 0, sizeof(bool) * (size_t)c->p.n_seq);
        for (int i = 0; i < T; i++) c->embd_valid[seq[i]] = true;
        return OB_OK;
    }
    if (sampled) {
        st = be->iface->download(be, out_tok, sampled->data, sizeof(int32_t) * (size_t)n_out);
        if (st) return ob_fail(err, err_len, OB_ERR_DEVICE, "decode: download failed");
        for (int i = 0; i < T; i++) c->logit_row[start + i] = -1; /* no logits on the host */
        return OB_OK;
    }
    /* Logits rows land at chunk-local rows; store them after the earlier chunks' rows. */
    int row0 = 0;
    for (int j = 0; j < start; j++) if (c->logit_row[j] >= 0) row0 = c->logit_row[j] + 1;
    for (int i = 0; i < T; i++) if (c->logit_row[start + i] >= 0) c->logit_row[start + i] += row0;
    size_t nbytes = sizeof(float) * (size_t)hp->n_vocab * (size_t)n_out;
    st = be->iface->download(be, c->logits + (size_t)row0 * hp->n_vocab, logits->data, nbytes);
    if (st) return ob_fail(err, err_len, OB_ERR_DEVICE, "decode: download failed");
    return OB_OK;
}

/* Where a pass over tokens [start, end) of b must end so that a sequence reaches the length
 * a checkpoint waits for (ob_seq_checkpoint_at) between passes: after that token, when a
 * later token of its sequence follows in the pass. */
static int ckpt_cut(const ob_context *c, const ob_batch *b, int start, int end) {
    for (int j = start; j < end; j++) {
        const int s = b->seq[j];
        if (s < 0 || s >= c->p.n_seq || c->ckpt_want[s] != b->pos[j] + 1) continue; /* (not yet validated) */
        for (int k = j + 1; k < end; k++)
            if (b->seq[k] == s) return j + 1;
    }
    return end;
}

static ob_status decode_run(ob_context *c, const ob_batch *b, const float *sparams, int32_t *out_tok, char *err,
                            size_t err_len) {
    const ob_hparams *hp = &c->m->hp;
    if (!b || b->n_tokens <= 0 || !b->token || !b->pos || !b->seq)
        return ob_fail(err, err_len, OB_ERR_ARG, "decode: empty batch");
    if (b->n_tokens > c->p.n_batch * 64)
        return ob_fail(err, err_len, OB_ERR_ARG, "decode: batch of %d tokens is too large", b->n_tokens);
    /* Validate everything first so a bad batch changes nothing. */
    int *len = malloc(sizeof(int) * (size_t)c->p.n_seq);
    if (!len) return ob_fail(err, err_len, OB_ERR_NOMEM, "decode: out of memory");
    memcpy(len, c->seq_len, sizeof(int) * (size_t)c->p.n_seq);
    ob_status st = OB_OK;
    if (c->pooling) {
        /* Whole-sequence attention sees only this batch's tokens: it must hold every
         * sequence whole, and each sequence starts afresh. */
        if (b->n_tokens > c->p.n_batch) {
            free(len);
            return ob_fail(err, err_len, OB_ERR_CONTEXT, "decode: %d tokens exceed the embeddings batch of %d",
                           b->n_tokens, c->p.n_batch);
        }
        for (int i = 0; i < b->n_tokens; i++)
            if (b->seq[i] >= 0 && b->seq[i] < c->p.n_seq) len[b->seq[i]] = 0;
    }
    for (int i = 0; i < b->n_tokens && !st; i++) {
        int s = b->seq[i], p = b->pos[i], t = b->token[i];
        if (t < 0 || t >= hp->n_vocab) st = ob_fail(err, err_len, OB_ERR_ARG, "decode: token id %d out of range", t);
        else if (s < 0 || s >= c->p.n_seq) st = ob_fail(err, err_len, OB_ERR_ARG, "decode: sequence %d out of range", s);
        else if (p != len[s]) st = ob_fail(err, err_len, OB_ERR_ARG, "decode: sequence %d expects position %d, got %d", s, len[s], p);
        else if (p >= c->cells_per_seq)
            st = ob_fail(err, err_len, OB_ERR_CONTEXT, "decode: sequence %d would exceed the context of %d tokens", s, c->cells_per_seq);
        else len[s] = p + 1;
    }
    if (st) { free(len); return st; }
    if (b->n_tokens > c->p.n_batch) {
        /* Logits of every chunk must fit the host buffer. */
        int n_out = 0;
        for (int j = 0; j < b->n_tokens; j++)
            n_out += b->want_logits ? b->want_logits[j] != 0 : j == b->n_tokens - 1;
        if (n_out > c->p.n_batch) {
            free(len);
            return ob_fail(err, err_len, OB_ERR_ARG, "decode: %d logits rows wanted, at most %d", n_out, c->p.n_batch);
        }
    }
    c->n_batch_last = b->n_tokens;
    free(c->logit_row);
    c->logit_row = malloc(sizeof(int32_t) * (size_t)b->n_tokens);
    if (!c->logit_row) { free(len); return ob_fail(err, err_len, OB_ERR_NOMEM, "decode: out of memory"); }
    /* the running lengths, for the recurrent state's checkpoints */
    int *cur = c->n_ckpt && !c->pooling ? malloc(sizeof(int) * (size_t)c->p.n_seq) : NULL;
    if (cur) memcpy(cur, c->seq_len, sizeof(int) * (size_t)c->p.n_seq);
    for (int start = 0, end; start < b->n_tokens && !st; start = end) {
        end = OB_MIN(start + c->p.n_batch, b->n_tokens);
        if (cur) end = ckpt_cut(c, b, start, end);
        st = decode_chunk(c, b, start, end - start, sparams, out_tok, err, err_len);
        if (!cur || st) continue;
        for (int j = start; j < end; j++) cur[b->seq[j]] = b->pos[j] + 1;
        for (int j = start; j < end; j++) {
            const int s = b->seq[j];
            if (c->ckpt_want[s] && cur[s] == c->ckpt_want[s]) {
                ckpt_save(c, s, cur[s]);
                c->ckpt_want[s] = 0;
            }
        }
    }
    free(cur);
    if (!st) memcpy(c->seq_len, len, sizeof(int) * (size_t)c->p.n_seq);
    free(len);
    return st;
}

ob_status ob_decode(ob_context *c, const ob_batch *b, char *err, size_t err_len) {
    return decode_run(c, b, NULL, NULL, err, err_len);
}

ob_status ob_decode_sample(ob_context *c, const ob_batch *b, ob_sampler *const *samplers, int32_t *out_tokens,
                           char *err, size_t err_len) {
    if (c->pooling) return ob_fail(err, err_len, OB_ERR_ARG, "decode: an embeddings context has no logits to sample");
    if (!b || b->n_tokens <= 0 || !samplers || !out_tokens)
        return ob_fail(err, err_len, OB_ERR_ARG, "decode: empty batch or no samplers");
    int n_rows = 0;
    for (int j = 0; j < b->n_tokens; j++) n_rows += b->want_logits ? b->want_logits[j] != 0 : j == b->n_tokens - 1;
    /* (one pass: a checkpoint that cuts the batch in two samples on the host) */
    bool dev = c->sample_ok && n_rows > 0 && b->n_tokens <= c->p.n_batch &&
               (!c->n_ckpt || ckpt_cut(c, b, 0, b->n_tokens) == b->n_tokens);
    for (int r = 0; r < n_rows; r++) {
        if (!samplers[r]) return ob_fail(err, err_len, OB_ERR_ARG, "decode: no sampler for logits row %d", r);
        dev = dev && ob_sampler_device_ok(samplers[r]);
    }
    if (dev) {
        for (int r = 0; r < n_rows; r++) ob_sampler_device_params(samplers[r], c->h_sample + (size_t)r * OB_SAMPLE_NPARAM);
        ob_status st = decode_run(c, b, c->h_sample, out_tokens, err, err_len);
        if (st) return st;
        for (int r = 0; r < n_rows; r++) ob_sampler_accept(samplers[r], out_tokens[r]);
        return OB_OK;
    }
    ob_status st = ob_decode(c, b, err, err_len);
    if (st) return st;
    for (int j = 0, r = 0; j < b->n_tokens; j++) {
        const float *lg = ob_get_logits(c, j);
        if (!lg) continue;
        out_tokens[r] = ob_sampler_sample(samplers[r], lg);
        r++;
    }
    return OB_OK;
}

const float *ob_get_embeddings(ob_context *c, int seq) {
    if (!c->pooling || c->pooling == OB_ARCH_POOL_TOKENS || seq < 0 || seq >= c->p.n_seq || !c->embd_valid[seq]) return NULL;
    return c->embd + (size_t)seq * (size_t)c->n_embd_out;
}

const float *ob_get_embeddings_ith(ob_context *c, int i) {
    if (c->pooling != OB_ARCH_POOL_TOKENS || i < 0 || i >= c->n_embd_rows) return NULL;
    return c->embd + (size_t)i * (size_t)c->n_embd_out;
}

int ob_context_n_embd(const ob_context *c) { return c->pooling ? c->n_embd_out : c->m->hp.n_embd; }

float ob_get_rank_score(ob_context *c, int seq) {
    const float *e = c->pooling == OB_POOLING_RANK ? ob_get_embeddings(c, seq) : NULL;
    return e ? e[0] : NAN;
}

int ob_model_pooling(const ob_model *m) { return m->hp.pooling_type; }

const float *ob_get_logits(ob_context *c, int i) {
    if (c->pooling) return NULL;
    if (i < 0 || i >= c->n_batch_last || c->logit_row[i] < 0) return NULL;
    return c->logits + (size_t)c->logit_row[i] * c->m->hp.n_vocab;
}
