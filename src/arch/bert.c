/* Encoders: BERT (MiniLM, BGE), XLM-RoBERTa, nomic-bert (rotary, SwiGLU, fused QKV) and
 * jina-bert-v2 (ALiBi, GEGLU), with cross-encoder rank heads. Post-norm blocks:
 * x = LN(x + attn(x)); x = LN(x + ffn(x)); attention over the whole sequence. The output
 * is pooled per sequence (mean / CLS / last); a rank head maps the CLS vector through
 * dense -> tanh -> dense to one score per label. */
#include "arch/arch_common.h"
#include "format/quant.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { BERT_PLAIN = 0, BERT_NOMIC = 1, BERT_JINA2 = 2 };

typedef struct ob_bert_layer {
    const ob_weight *wq, *wk, *wv, *wqkv;   /* [E, E] x3, or fused [E, 3E] */
    const ob_weight *bq, *bk, *bv, *bqkv;   /* optional biases */
    const ob_weight *q_norm, *q_norm_b, *k_norm, *k_norm_b; /* jina: LayerNorm over q / k [E] */
    const ob_weight *wo, *bo;               /* [E, E], [E] */
    const ob_weight *attn_ln, *attn_ln_b;   /* attn_output_norm [E] */
    const ob_weight *up, *up_b;             /* [E, F] */
    const ob_weight *gate, *gate_b;         /* [E, F] (nomic, jina) */
    const ob_weight *down, *down_b;         /* [F, E] */
    const ob_weight *out_ln, *out_ln_b;     /* layer_output_norm [E] */
} ob_bert_layer;

typedef struct ob_bert {
    int kind;
    const ob_weight *tok_embd;              /* [E, V] */
    const ob_weight *tok_types;             /* [E, n_types] or NULL; row 0 is added */
    const ob_weight *pos_embd;              /* [E, n_ctx] (bert) or NULL */
    const ob_weight *embd_ln, *embd_ln_b;   /* [E] */
    const ob_weight *cls, *cls_b;           /* rank head dense [E, E] */
    const ob_weight *cls_out, *cls_out_b;   /* rank head output [E, n_cls] */
    ob_bert_layer layers[];
} ob_bert;

static int bert_kind(const char *arch) {
    if (!strcmp(arch, "nomic-bert")) return BERT_NOMIC;
    if (!strcmp(arch, "jina-bert-v2")) return BERT_JINA2;
    return BERT_PLAIN;
}

static ob_status bert_hparams(const ob_gguf *g, ob_hparams *hp, char *err, size_t err_len) {
    /* The keys every family shares (sizes, heads, rope base, attention scale). */
    ob_status st = ob_hp_load_common(g, hp, err, err_len);
    if (st) return st;
    const char *a = hp->arch;
    uint32_t v;
    if (hp->n_embd % hp->n_head || hp->n_ff > (1 << 20) || hp->n_embd > (1 << 16) || hp->n_head_kv != hp->n_head)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: implausible hyperparameters (layers %d, embd %d, heads %d, ff %d)",
                       hp->n_layer, hp->n_embd, hp->n_head, hp->n_ff);
    hp->rope_mode = 2;
    if (!ob_hp_f32(g, a, "attention.layer_norm_epsilon", &hp->norm_eps)) hp->norm_eps = 1e-12f;
    hp->encoder = true;
    hp->pooling_type = ob_hp_u32(g, a, "pooling_type", &v) ? (int)v : OB_POOLING_CLS;
    const ob_gguf_tensor *co = ob_gguf_find_tensor(g, "cls.output.weight");
    if (co && co->n_dims == 2 && co->ne[0] == hp->n_embd && co->ne[1] > 0 && co->ne[1] <= 4096) hp->n_cls_out = (int)co->ne[1];
    if (hp->pooling_type < OB_POOLING_NONE || hp->pooling_type > OB_POOLING_RANK ||
        (hp->pooling_type == OB_POOLING_RANK && !hp->n_cls_out))
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: pooling type %d unusable (rank head outputs %d)",
                       hp->pooling_type, hp->n_cls_out);
    if (bert_kind(a) == BERT_JINA2) {
        if (!ob_hp_f32(g, a, "attention.max_alibi_bias", &hp->alibi_max_bias)) hp->alibi_max_bias = 8.0f;
        if (!(hp->alibi_max_bias > 0 && hp->alibi_max_bias <= 64))
            return ob_fail(err, err_len, OB_ERR_FORMAT, "model: bad ALiBi max bias %g", hp->alibi_max_bias);
    }
    return OB_OK;
}

static ob_status bert_bind(ob_model_view *mv, const ob_hparams *hp, void **priv, char *err, size_t err_len) {
    ob_bert *m = calloc(1, sizeof(ob_bert) + sizeof(ob_bert_layer) * (size_t)hp->n_layer);
    if (!m) return ob_fail(err, err_len, OB_ERR_NOMEM, "model: out of memory");
    *priv = m;
    m->kind = bert_kind(hp->arch);
    int64_t E = hp->n_embd, F = hp->n_ff, V = hp->n_vocab;
    char name[96];
#define OB_W(dst, nm, nd, req, ...) do { \
        int64_t ne_[4] = {__VA_ARGS__}; \
        (dst) = ob_mv_weight(mv, nm, nd, ne_, req, err, err_len); \
        if (!(dst) && ((req) || ob_mv_failed(mv))) return OB_ERR_FORMAT; } while (0)
#define OB_L(dst, suffix, nd, req, ...) do { \
        snprintf(name, sizeof(name), "blk.%d.%s", il, suffix); OB_W(dst, name, nd, req, __VA_ARGS__); } while (0)
    OB_W(m->tok_embd, "token_embd.weight", 2, true, E, V);
    OB_W(m->tok_types, "token_types.weight", 2, false, E, -1);
    OB_W(m->pos_embd, "position_embd.weight", 2, m->kind == BERT_PLAIN, E, -1);
    OB_W(m->embd_ln, "token_embd_norm.weight", 1, true, E);
    OB_W(m->embd_ln_b, "token_embd_norm.bias", 1, false, E);
    OB_W(m->cls, "cls.weight", 2, false, E, E);
    OB_W(m->cls_b, "cls.bias", 1, false, E);
    OB_W(m->cls_out, "cls.output.weight", 2, false, E, hp->n_cls_out > 0 ? hp->n_cls_out : -1);
    OB_W(m->cls_out_b, "cls.output.bias", 1, false, hp->n_cls_out);
    if (m->tok_types && m->tok_types->type != OB_TYPE_F32 && m->tok_types->type != OB_TYPE_F16)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "model: token_types.weight must be F32 or F16");
    if (m->pos_embd && hp->n_ctx_train > m->pos_embd->ne[1])
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %lld position embeddings for a context of %d",
                       (long long)m->pos_embd->ne[1], hp->n_ctx_train);
    for (int il = 0; il < hp->n_layer; il++) {
        ob_bert_layer *L = &m->layers[il];
        OB_L(L->wqkv, "attn_qkv.weight", 2, false, E, 3 * E);
        OB_L(L->bqkv, "attn_qkv.bias", 1, false, 3 * E);
        bool sep = !L->wqkv;
        OB_L(L->wq, "attn_q.weight", 2, sep, E, E);
        OB_L(L->wk, "attn_k.weight", 2, sep, E, E);
        OB_L(L->wv, "attn_v.weight", 2, sep, E, E);
        OB_L(L->bq, "attn_q.bias", 1, false, E);
        OB_L(L->bk, "attn_k.bias", 1, false, E);
        OB_L(L->bv, "attn_v.bias", 1, false, E);
        OB_L(L->q_norm, "attn_q_norm.weight", 1, false, E);
        OB_L(L->q_norm_b, "attn_q_norm.bias", 1, false, E);
        OB_L(L->k_norm, "attn_k_norm.weight", 1, false, E);
        OB_L(L->k_norm_b, "attn_k_norm.bias", 1, false, E);
        OB_L(L->wo, "attn_output.weight", 2, true, E, E);
        OB_L(L->bo, "attn_output.bias", 1, false, E);
        OB_L(L->attn_ln, "attn_output_norm.weight", 1, true, E);
        OB_L(L->attn_ln_b, "attn_output_norm.bias", 1, false, E);
        /* jina-bert-v2 keeps gate and up fused in ffn_up [E, 2F] (gate first) */
        OB_L(L->up, "ffn_up.weight", 2, true, E, m->kind == BERT_JINA2 ? -1 : F);
        if (L->up->ne[1] != F && L->up->ne[1] != 2 * F)
            return ob_fail(err, err_len, OB_ERR_FORMAT, "model: blk.%d.ffn_up.weight has %lld rows for ff %lld", il,
                           (long long)L->up->ne[1], (long long)F);
        OB_L(L->up_b, "ffn_up.bias", 1, false, -1);
        OB_L(L->gate, "ffn_gate.weight", 2, m->kind == BERT_NOMIC || (m->kind == BERT_JINA2 && L->up->ne[1] == F), E, F);
        OB_L(L->gate_b, "ffn_gate.bias", 1, false, F);
        OB_L(L->down, "ffn_down.weight", 2, true, F, E);
        OB_L(L->down_b, "ffn_down.bias", 1, false, E);
        OB_L(L->out_ln, "layer_output_norm.weight", 1, true, E);
        OB_L(L->out_ln_b, "layer_output_norm.bias", 1, false, E);
        /* The fused projection is read as three row blocks: each must start on a whole row. */
        if (L->wqkv && ob_type_block_size(L->wqkv->type) > E)
            return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "model: attn_qkv rows too short for type %s",
                           ob_type_name(L->wqkv->type));
        if (L->up_b && L->up_b->ne[0] != L->up->ne[1])
            return ob_fail(err, err_len, OB_ERR_FORMAT, "model: blk.%d.ffn_up.bias does not match the weight", il);
    }
#undef OB_L
#undef OB_W
    return OB_OK;
}

static ob_tensor *leaf_opt(ob_graph *g, const ob_weight *w) { return w ? ob_weight_leaf(g, w) : NULL; }

static ob_tensor *add_bias(ob_graph *g, ob_tensor *y, const ob_weight *b) {
    return b ? ob_add(g, y, ob_weight_leaf(g, b)) : y;
}

/* Rows [r0, r0 + n) of a weight [K, N] as a leaf [K, n]: the block of a fused matrix. */
static ob_tensor *weight_rows(ob_graph *g, const ob_weight *w, int64_t r0, int64_t n, const char *name) {
    int64_t ne[2] = {w->ne[0], n};
    size_t rb = ob_row_size(w->type, w->ne[0]);
    return ob_leaf(g, name, w->type, 2, ne, (char *)w->data + rb * (size_t)r0);
}

static ob_tensor *bias_rows(ob_graph *g, const ob_weight *b, int64_t r0, int64_t n, const char *name) {
    if (!b) return NULL;
    int64_t ne[1] = {n};
    return ob_leaf(g, name, b->type, 1, ne, (char *)b->data + sizeof(float) * (size_t)r0);
}

static ob_tensor *proj(ob_graph *g, ob_tensor *w, ob_tensor *b, ob_tensor *x, const char *nm, int il) {
    ob_tensor *y = ob_matmul(g, w, x);
    ob_set_name(y, "blk.%d.%s", il, nm);
    return b ? ob_add(g, y, b) : y;
}

static ob_tensor *bert_attn(ob_graph *g, const ob_hparams *hp, const ob_bert *m, const ob_fwd_inputs *in, int il,
                            ob_tensor *x) {
    const ob_bert_layer *L = &m->layers[il];
    int64_t E = hp->n_embd, T = in->n_tokens;
    ob_tensor *wq, *wk, *wv, *bq, *bk, *bv;
    if (L->wqkv) {
        wq = weight_rows(g, L->wqkv, 0, E, "attn_qkv.q");
        wk = weight_rows(g, L->wqkv, E, E, "attn_qkv.k");
        wv = weight_rows(g, L->wqkv, 2 * E, E, "attn_qkv.v");
        bq = bias_rows(g, L->bqkv, 0, E, "attn_qkv.bq");
        bk = bias_rows(g, L->bqkv, E, E, "attn_qkv.bk");
        bv = bias_rows(g, L->bqkv, 2 * E, E, "attn_qkv.bv");
    } else {
        wq = ob_weight_leaf(g, L->wq); wk = ob_weight_leaf(g, L->wk); wv = ob_weight_leaf(g, L->wv);
        bq = leaf_opt(g, L->bq); bk = leaf_opt(g, L->bk); bv = leaf_opt(g, L->bv);
    }
    ob_tensor *q = proj(g, wq, bq, x, "attn_q", il);
    ob_tensor *k = proj(g, wk, bk, x, "attn_k", il);
    ob_tensor *v = proj(g, wv, bv, x, "attn_v", il);
    if (L->q_norm) q = ob_layer_norm(g, q, ob_weight_leaf(g, L->q_norm), leaf_opt(g, L->q_norm_b), hp->norm_eps);
    if (L->k_norm) k = ob_layer_norm(g, k, ob_weight_leaf(g, L->k_norm), leaf_opt(g, L->k_norm_b), hp->norm_eps);
    int64_t qs[3] = {hp->head_dim, hp->n_head, T};
    q = ob_view(g, q, 3, qs);
    if (m->kind == BERT_NOMIC) {
        k = ob_view(g, k, 3, qs);
        ob_tensor *ff = hp->rope.factors ? ob_weight_leaf(g, hp->rope.factors) : NULL;
        q = ob_rope(g, q, in->pos, ff, hp->n_rot, hp->rope_mode, hp->rope.base, hp->rope.freq_scale, hp->rope.mscale);
        k = ob_rope(g, k, in->pos, ff, hp->n_rot, hp->rope_mode, hp->rope.base, hp->rope.freq_scale, hp->rope.mscale);
        ob_set_name(q, "blk.%d.q_rope", il);
        ob_set_name(k, "blk.%d.k_rope", il);
    }
    ob_tensor *ks = ob_kv_store(g, k, in->k_cache[il], in->pos, in->seq, in->cells_per_seq);
    ob_set_name(ks, "blk.%d.k_store", il);
    ob_tensor *vs = ob_kv_store(g, v, in->v_cache[il], in->pos, in->seq, in->cells_per_seq);
    ob_set_name(vs, "blk.%d.v_store", il);
    vs->src[4] = ks; /* orders the V store after the K store: the attention waits on both */
    ob_tensor *a = ob_attention(g, q, in->k_cache[il], in->v_cache[il], in->pos, in->seq, vs, in->cells_per_seq,
                                hp->n_head_kv, 0, false, hp->attn_scale, 0.0f);
    a->fp[2] = hp->alibi_max_bias;
    ob_set_name(a, "blk.%d.attn", il);
    return proj(g, ob_weight_leaf(g, L->wo), leaf_opt(g, L->bo), a, "attn_output", il);
}

static ob_tensor *bert_ffn(ob_graph *g, const ob_hparams *hp, const ob_bert *m, int il, ob_tensor *x) {
    const ob_bert_layer *L = &m->layers[il];
    ob_tensor *h;
    if (L->up->ne[1] == 2 * (int64_t)hp->n_ff) {
        int64_t F = hp->n_ff;
        ob_tensor *gt = proj(g, weight_rows(g, L->up, 0, F, "ffn_up.gate"), bias_rows(g, L->up_b, 0, F, "ffn_up.bg"), x, "ffn_gate", il);
        ob_tensor *up = proj(g, weight_rows(g, L->up, F, F, "ffn_up.up"), bias_rows(g, L->up_b, F, F, "ffn_up.bu"), x, "ffn_up", il);
        h = ob_glu(g, gt, up, OB_ACT_GELU_ERF);
        return proj(g, ob_weight_leaf(g, L->down), leaf_opt(g, L->down_b), h, "ffn_down", il);
    }
    ob_tensor *up = proj(g, ob_weight_leaf(g, L->up), leaf_opt(g, L->up_b), x, "ffn_up", il);
    if (L->gate) {
        ob_tensor *gt = proj(g, ob_weight_leaf(g, L->gate), leaf_opt(g, L->gate_b), x, "ffn_gate", il);
        h = ob_glu(g, gt, up, m->kind == BERT_NOMIC ? OB_ACT_SILU : OB_ACT_GELU_ERF);
    } else {
        h = ob_act_op(g, up, OB_ACT_GELU_ERF);
    }
    return proj(g, ob_weight_leaf(g, L->down), leaf_opt(g, L->down_b), h, "ffn_down", il);
}

ob_tensor *ob_arch_pool(ob_graph *g, const ob_fwd_inputs *in, ob_tensor *x) {
    if (in->pooling == OB_ARCH_POOL_TOKENS) return x;
    if (in->pooling < OB_POOLING_MEAN || in->pooling > OB_POOLING_LAST) return NULL;
    ob_tensor *p = ob_pool(g, x, in->seq, in->pos, (ob_pool_type)in->pooling, in->normalize, in->n_seq);
    ob_set_name(p, "pooled");
    return p;
}

static ob_tensor *bert_build(ob_graph *g, const ob_hparams *hp, const void *priv, const ob_fwd_inputs *in) {
    const ob_bert *m = priv;
    int64_t E = hp->n_embd;
    ob_tensor *x = ob_get_rows(g, ob_weight_leaf(g, m->tok_embd), in->tokens);
    ob_set_name(x, "token_embd");
    if (m->tok_types) {
        /* Every token is of type 0 (single-segment input), so row 0 is a broadcast bias. */
        int64_t ne[1] = {E};
        ob_tensor *t0 = ob_leaf(g, "token_types.0", m->tok_types->type, 1, ne, m->tok_types->data);
        if (t0->type != OB_TYPE_F32) t0 = ob_cpy(g, t0, OB_TYPE_F32);
        x = ob_add(g, x, t0);
    }
    if (m->pos_embd) x = ob_add(g, x, ob_get_rows(g, ob_weight_leaf(g, m->pos_embd), in->pos));
    x = ob_layer_norm(g, x, ob_weight_leaf(g, m->embd_ln), leaf_opt(g, m->embd_ln_b), hp->norm_eps);
    ob_set_name(x, "token_embd_norm");
    for (int il = 0; il < hp->n_layer; il++) {
        const ob_bert_layer *L = &m->layers[il];
        ob_tensor *a = bert_attn(g, hp, m, in, il, x);
        x = ob_layer_norm(g, ob_add(g, x, a), ob_weight_leaf(g, L->attn_ln), leaf_opt(g, L->attn_ln_b), hp->norm_eps);
        ob_set_name(x, "blk.%d.attn_output_norm", il);
        ob_tensor *f = bert_ffn(g, hp, m, il, x);
        x = ob_layer_norm(g, ob_add(g, x, f), ob_weight_leaf(g, L->out_ln), leaf_opt(g, L->out_ln_b), hp->norm_eps);
        ob_set_name(x, "blk.%d.layer_output_norm", il);
    }
    if (in->pooling == OB_POOLING_RANK) {
        if (!m->cls_out) return NULL;
        ob_tensor *p = ob_pool(g, x, in->seq, in->pos, OB_POOL_CLS, false, in->n_seq);
        ob_set_name(p, "pooled");
        if (m->cls) {
            p = add_bias(g, ob_matmul(g, ob_weight_leaf(g, m->cls), p), m->cls_b);
            p = ob_act_op(g, p, OB_ACT_TANH);
        }
        p = add_bias(g, ob_matmul(g, ob_weight_leaf(g, m->cls_out), p), m->cls_out_b);
        ob_set_name(p, "cls.output");
        return p;
    }
    return ob_arch_pool(g, in, x);
}

const ob_arch ob_arch_bert = {
    .name = "bert",
    .load_hparams = bert_hparams,
    .bind = bert_bind,
    .build = bert_build,
    .free_priv = free,
};
