/* A context: KV cache for n_seq sequences (and the recurrent layers' state, with its
 * checkpoints), input buffers, activation scratch, logits. Everything on the device is
 * allocated here; ob_decode allocates nothing there. */
#include "engine/model_internal.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

static ob_type kv_type(ob_kv_type t) {
    return t == OB_KV_Q8_0 ? OB_TYPE_Q8_0 : t == OB_KV_F32 ? OB_TYPE_F32 : OB_TYPE_F16;
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
    c->kv_type_k = kv_type(p.type_k);
    c->kv_type_v = kv_type(p.type_v);
    ob_status st = OB_OK;
    size_t row = (size_t)hp->head_dim * hp->n_head_kv;
    size_t cells = (size_t)p.n_ctx * p.n_seq;
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
    if (m->params.strict_device) {
        st = check_placement(c, err, err_len);
        if (st) goto fail;
        build(c, 1, 1);
        st = check_placement(c, err, err_len);
        if (st) goto fail;
    }
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
