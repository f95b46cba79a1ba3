/* Pieces shared by the decoder families: metadata reading, the attention block, the routed
 * experts and the output head. */
#include "arch/arch_common.h"
#include <math.h>
#include <stdio.h>

ob_status ob_hp_load_base(const ob_gguf *g, ob_hparams *hp, char *err, size_t err_len) {
    const char *a = ob_gguf_get_str(g, "general.architecture");
    if (!a) return ob_fail(err, err_len, OB_ERR_FORMAT, "model: general.architecture missing");
    snprintf(hp->arch, sizeof(hp->arch), "%s", a);
    uint32_t v;
    /* a file whose every feed-forward is experts (qwen35moe) has no dense width */
    const bool moe_only = ob_hp_u32(g, a, "expert_feed_forward_length", &v) && !ob_hp_u32(g, a, "feed_forward_length", &v);
    struct { const char *suffix; int *dst; bool required; } ints[] = {
        {"embedding_length", &hp->n_embd, true},
        {"block_count", &hp->n_layer, true},
        {"attention.head_count", &hp->n_head, true},
        {"feed_forward_length", &hp->n_ff, !moe_only},
        {"context_length", &hp->n_ctx_train, false},
    };
    for (size_t i = 0; i < OB_ARRAY_LEN(ints); i++) {
        if (ob_hp_u32(g, a, ints[i].suffix, &v)) *ints[i].dst = (int)v;
        else if (ints[i].required)
            return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.%s missing", a, ints[i].suffix);
    }
    hp->n_head_kv = ob_hp_u32(g, a, "attention.head_count_kv", &v) ? (int)v : hp->n_head;
    if (hp->n_layer <= 0 || hp->n_layer > OB_MAX_LAYERS || hp->n_embd <= 0 || hp->n_head <= 0 ||
        hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv || (hp->n_ff <= 0 && !moe_only))
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: implausible hyperparameters (layers %d, embd %d, heads %d/%d)",
                       hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv);
    if (!ob_hp_f32(g, a, "attention.layer_norm_rms_epsilon", &hp->norm_eps)) hp->norm_eps = 1e-5f;
    if (!ob_hp_f32(g, a, "rope.freq_base", &hp->rope.base)) hp->rope.base = 10000.0f;
    hp->rope.freq_scale = hp->rope.mscale = 1.0f; /* set by ob_rope_resolve after bind */
    ob_status st = ob_rope_meta_load(g, a, &hp->rope_meta, err, err_len);
    if (st) return st;
    hp->rope_base_swa = hp->rope.base;
    hp->embd_scale = hp->residual_scale = hp->logit_scale = 1.0f;
    return OB_OK;
}

ob_status ob_hp_load_common(const ob_gguf *g, ob_hparams *hp, char *err, size_t err_len) {
    ob_status st = ob_hp_load_base(g, hp, err, err_len);
    if (st) return st;
    const char *a = hp->arch;
    uint32_t v;
    hp->head_dim = ob_hp_u32(g, a, "attention.key_length", &v) ? (int)v : hp->n_embd / hp->n_head;
    uint32_t vlen;
    if (ob_hp_u32(g, a, "attention.value_length", &vlen) && (int)vlen != hp->head_dim)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "model: key length %d != value length %u", hp->head_dim, vlen);
    if (hp->head_dim <= 0 || hp->head_dim > 1024 || hp->head_dim % 2)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: bad head dimension %d", hp->head_dim);
    hp->n_rot = ob_hp_u32(g, a, "rope.dimension_count", &v) ? (int)v : hp->head_dim;
    if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: bad rope dimension %d", hp->n_rot);
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    return OB_OK;
}

ob_status ob_hp_load_experts(const ob_gguf *g, ob_hparams *hp, int max_expert, char *err, size_t err_len) {
    uint32_t v;
    struct { const char *suffix; int *dst; } keys[] = {
        {"expert_count", &hp->n_expert},
        {"expert_used_count", &hp->n_expert_used},
        {"expert_feed_forward_length", &hp->n_ff_exp},
    };
    for (size_t i = 0; i < OB_ARRAY_LEN(keys); i++) {
        if (!ob_hp_u32(g, hp->arch, keys[i].suffix, &v))
            return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.%s missing", hp->arch, keys[i].suffix);
        if (v == 0 || v > (1u << 20))
            return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.%s = %u is implausible", hp->arch, keys[i].suffix, v);
        *keys[i].dst = (int)v;
    }
    if (hp->n_expert > max_expert)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.expert_count %d is more than %d", hp->arch, hp->n_expert,
                       max_expert);
    if (hp->n_expert_used > hp->n_expert)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.expert_used_count %d with %s.expert_count %d", hp->arch,
                       hp->n_expert_used, hp->arch, hp->n_expert);
    return OB_OK;
}

/* q_rows: attn_q's output rows (hd * n_head, or twice that with a gate per head). */
static ob_status bind_attn(ob_model_view *mv, const ob_hparams *hp, int il, ob_attn_weights *w, bool want_qk_norm,
                           bool want_bias, int64_t q_rows, char *err, size_t err_len) {
    char name[96];
    int64_t E = hp->n_embd, Dq = (int64_t)hp->head_dim * hp->n_head, Dkv = (int64_t)hp->head_dim * hp->n_head_kv;
#define OB_W(field, suffix, nd, req, ...) do { \
        int64_t ne_[4] = {__VA_ARGS__}; \
        snprintf(name, sizeof(name), "blk.%d.%s", il, suffix); \
        w->field = ob_mv_weight(mv, name, nd, ne_, req, err, err_len); \
        if (!w->field && ((req) || ob_mv_failed(mv))) return OB_ERR_FORMAT; } while (0)
    OB_W(norm, "attn_norm.weight", 1, true, E);
    OB_W(wq, "attn_q.weight", 2, true, E, q_rows);
    OB_W(wk, "attn_k.weight", 2, true, E, Dkv);
    OB_W(wv, "attn_v.weight", 2, true, E, Dkv);
    OB_W(wo, "attn_output.weight", 2, true, Dq, E);
    OB_W(bq, "attn_q.bias", 1, want_bias, Dq);
    OB_W(bk, "attn_k.bias", 1, want_bias, Dkv);
    OB_W(bv, "attn_v.bias", 1, want_bias, Dkv);
    OB_W(bo, "attn_output.bias", 1, false, E);
    OB_W(q_norm, "attn_q_norm.weight", 1, want_qk_norm, hp->head_dim);
    OB_W(k_norm, "attn_k_norm.weight", 1, want_qk_norm, hp->head_dim);
#undef OB_W
    return OB_OK;
}

ob_status ob_bind_layer_attn(ob_model_view *mv, const ob_hparams *hp, int il, ob_attn_weights *w,
                             bool want_qk_norm, bool want_bias, char *err, size_t err_len) {
    return bind_attn(mv, hp, il, w, want_qk_norm, want_bias, (int64_t)hp->head_dim * hp->n_head, err, err_len);
}

ob_status ob_bind_layer_attn_gated(ob_model_view *mv, const ob_hparams *hp, int il, ob_attn_weights *w, char *err,
                                   size_t err_len) {
    return bind_attn(mv, hp, il, w, true, false, 2 * (int64_t)hp->head_dim * hp->n_head, err, err_len);
}

ob_status ob_bind_list(ob_model_view *mv, int il, const ob_bind_spec *w, size_t n, char *err, size_t err_len) {
    char name[128];
    for (size_t i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "blk.%d.%s", il, w[i].suffix);
        if (!(*w[i].dst = ob_mv_weight(mv, name, w[i].nd, w[i].ne, true, err, err_len))) return OB_ERR_FORMAT;
        if (w[i].f32 && (*w[i].dst)->type != OB_TYPE_F32)
            return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "model: tensor '%s' is %s, not F32", name,
                           ob_type_name((*w[i].dst)->type) ? ob_type_name((*w[i].dst)->type) : "?");
    }
    return OB_OK;
}

ob_status ob_bind_unused(ob_model_view *mv, int il, const char *const *names, size_t n, char *err, size_t err_len) {
    const int64_t any[4] = {-1, -1, -1, -1};
    char name[128];
    for (size_t i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "blk.%d.%s", il, names[i]);
        if (!ob_mv_weight(mv, name, 4, any, false, err, err_len) && ob_mv_failed(mv)) return OB_ERR_FORMAT;
    }
    return OB_OK;
}

static ob_tensor *proj(ob_graph *g, const ob_weight *w, const ob_weight *b, ob_tensor *x, const char *nm, int il) {
    ob_tensor *y = ob_matmul(g, ob_weight_leaf(g, w), x);
    ob_set_name(y, "blk.%d.%s", il, nm);
    if (b) y = ob_add(g, y, ob_weight_leaf(g, b));
    return y;
}

ob_tensor *ob_build_attn(ob_graph *g, const ob_hparams *hp, const ob_fwd_inputs *in, int il,
                         const ob_attn_weights *w, ob_tensor *h, const ob_rope_cfg *rope, int window) {
    int64_t T = in->n_tokens;
    ob_tensor *q = proj(g, w->wq, w->bq, h, "attn_q", il);
    ob_tensor *k = proj(g, w->wk, w->bk, h, "attn_k", il);
    ob_tensor *v = proj(g, w->wv, w->bv, h, "attn_v", il);
    int64_t qs[3] = {hp->head_dim, hp->n_head, T}, ks[3] = {hp->head_dim, hp->n_head_kv, T};
    q = ob_view(g, q, 3, qs);
    k = ob_view(g, k, 3, ks);
    ob_tensor *a = ob_build_attn_qkv(g, hp, in, il, w, q, k, v, rope, window);
    return proj(g, w->wo, w->bo, a, "attn_output", il);
}

/* x [hd, heads, T] roped as rope says with the factors ff (or none), named blk.il.nm. */
static ob_tensor *rope_of(ob_graph *g, const ob_hparams *hp, const ob_fwd_inputs *in, const ob_rope_cfg *rope,
                          ob_tensor *ff, ob_tensor *x, const char *nm, int il) {
    x = ob_rope(g, x, in->pos, ff, hp->n_rot, hp->rope_mode, rope->base, rope->freq_scale, rope->mscale);
    ob_set_name(x, "blk.%d.%s", il, nm);
    return x;
}

ob_tensor *ob_build_attn_qkv(ob_graph *g, const ob_hparams *hp, const ob_fwd_inputs *in, int il,
                             const ob_attn_weights *w, ob_tensor *q, ob_tensor *k, ob_tensor *v, const ob_rope_cfg *rope,
                             int window) {
    /* norm then rope of q, then of k: each pair adjacent in the graph, so a GPU backend can
     * run it as one kernel */
    const ob_weight *fw = rope ? ob_rope_factors(rope, in->cells_per_seq) : NULL;
    ob_tensor *ff = fw ? ob_weight_leaf(g, fw) : NULL;
    if (w->q_norm) q = ob_rms_norm(g, q, ob_weight_leaf(g, w->q_norm), hp->norm_eps);
    if (rope) q = rope_of(g, hp, in, rope, ff, q, "q_rope", il);
    if (w->k_norm) k = ob_rms_norm(g, k, ob_weight_leaf(g, w->k_norm), hp->norm_eps);
    if (rope) k = rope_of(g, hp, in, rope, ff, k, "k_rope", il);
    ob_tensor *ks_ = ob_kv_store(g, k, in->k_cache[il], in->pos, in->seq, in->cells_per_seq);
    ob_set_name(ks_, "blk.%d.k_store", il);
    ob_tensor *vs_ = ob_kv_store(g, v, in->v_cache[il], in->pos, in->seq, in->cells_per_seq);
    ob_set_name(vs_, "blk.%d.v_store", il);
    /* The attention reads both caches; ordering is carried by the store tokens. The V store
     * is chained through the K store's token so one source slot suffices. */
    vs_->src[4] = ks_;
    ob_tensor *a = ob_attention(g, q, in->k_cache[il], in->v_cache[il], in->pos, in->seq, vs_,
                                in->cells_per_seq, hp->n_head_kv, window, true, hp->attn_scale,
                                hp->attn_softcap);
    if (w->sinks) a->src[6] = ob_weight_leaf(g, w->sinks); /* graph.h: ATTENTION's sinks */
    ob_set_name(a, "blk.%d.attn", il);
    return a;
}

ob_tensor *ob_build_ffn_glu(ob_graph *g, const ob_weight *gate, const ob_weight *up, const ob_weight *down, ob_tensor *h,
                            ob_act act, int il) {
    ob_tensor *gt = ob_matmul(g, ob_weight_leaf(g, gate), h);
    ob_set_name(gt, "blk.%d.ffn_gate", il);
    ob_tensor *u = ob_matmul(g, ob_weight_leaf(g, up), h);
    ob_set_name(u, "blk.%d.ffn_up", il);
    ob_tensor *f = ob_matmul(g, ob_weight_leaf(g, down), ob_glu(g, gt, u, act));
    ob_set_name(f, "blk.%d.ffn_down", il);
    return f;
}

ob_status ob_bind_io(ob_model_view *mv, const ob_hparams *hp, const char *norm, const ob_weight **tok_embd,
                     const ob_weight **out_norm, const ob_weight **output, char *err, size_t err_len) {
    const int64_t ne_tok[2] = {hp->n_embd, hp->n_vocab}, ne_e[1] = {hp->n_embd};
    if (!(*tok_embd = ob_mv_weight(mv, "token_embd.weight", 2, ne_tok, true, err, err_len))) return OB_ERR_FORMAT;
    if (!(*out_norm = ob_mv_weight(mv, norm, 1, ne_e, true, err, err_len))) return OB_ERR_FORMAT;
    *output = ob_mv_weight(mv, "output.weight", 2, ne_tok, false, err, err_len);
    if (!*output && ob_mv_failed(mv)) return OB_ERR_FORMAT;
    if (!*output) *output = *tok_embd;
    return OB_OK;
}

ob_status ob_bind_ffn(ob_model_view *mv, const ob_hparams *hp, int il, const char *norm, ob_ffn_weights *w, char *err,
                      size_t err_len) {
    char name[96];
    const int64_t E = hp->n_embd, F = hp->n_ff, ne_e[1] = {E}, ne_ef[2] = {E, F}, ne_fe[2] = {F, E};
    snprintf(name, sizeof(name), "blk.%d.%s.weight", il, norm);
    if (!(w->norm = ob_mv_weight(mv, name, 1, ne_e, true, err, err_len))) return OB_ERR_FORMAT;
    snprintf(name, sizeof(name), "blk.%d.ffn_gate.weight", il);
    if (!(w->gate = ob_mv_weight(mv, name, 2, ne_ef, true, err, err_len))) return OB_ERR_FORMAT;
    snprintf(name, sizeof(name), "blk.%d.ffn_up.weight", il);
    if (!(w->up = ob_mv_weight(mv, name, 2, ne_ef, true, err, err_len))) return OB_ERR_FORMAT;
    snprintf(name, sizeof(name), "blk.%d.ffn_down.weight", il);
    if (!(w->down = ob_mv_weight(mv, name, 2, ne_fe, true, err, err_len))) return OB_ERR_FORMAT;
    return OB_OK;
}

ob_tensor *ob_build_mm(ob_graph *g, const ob_weight *w, ob_tensor *x, const char *nm, int il) {
    ob_tensor *y = ob_matmul(g, ob_weight_leaf(g, w), x);
    ob_set_name(y, "blk.%d.%s", il, nm);
    return y;
}

ob_tensor *ob_build_head(ob_graph *g, const ob_hparams *hp, const ob_fwd_inputs *in, ob_tensor *x,
                         const ob_weight *out_norm, const ob_weight *output) {
    /* embeddings context (Qwen3-Embedding, EmbeddingGemma): pool the normed final states,
     * never logits as vectors */
    if (in->pooling) return ob_arch_pool(g, in, ob_rms_norm(g, x, ob_weight_leaf(g, out_norm), hp->norm_eps));
    if (in->n_out != in->n_tokens) x = ob_get_rows(g, x, in->out_ids);
    x = ob_rms_norm(g, x, ob_weight_leaf(g, out_norm), hp->norm_eps);
    ob_tensor *logits = ob_matmul(g, ob_weight_leaf(g, output), x);
    ob_set_name(logits, "output");
    return logits;
}

/* One expert projection of the chosen experts, plus its per-expert bias when there is one. */
static ob_tensor *expert_mm(ob_graph *g, const ob_weight *w, const ob_weight *b, ob_tensor *x, ob_tensor *gate,
                            const char *nm, int il) {
    ob_tensor *y = ob_matmul_id(g, ob_weight_leaf(g, w), x, gate);
    ob_set_name(y, "blk.%d.%s", il, nm);
    return b ? ob_add_id(g, y, ob_weight_leaf(g, b), gate) : y;
}

ob_tensor *ob_build_experts(ob_graph *g, const ob_expert_weights *w, ob_tensor *h, ob_tensor *gate, int il) {
    ob_tensor *gt = expert_mm(g, w->gate, w->gate_b, h, gate, "ffn_gate_exps", il);
    ob_tensor *up = expert_mm(g, w->up, w->up_b, h, gate, "ffn_up_exps", il);
    ob_tensor *a = w->oai_limit > 0 ? ob_glu_swiglu_oai(g, gt, up, w->oai_alpha, w->oai_limit)
                                    : ob_glu(g, gt, up, OB_ACT_SILU); /* [n_ff_exp, k, T] */
    ob_tensor *d = expert_mm(g, w->down, w->down_b, a, gate, "ffn_down_exps", il);
    ob_tensor *f = ob_moe_sum(g, d, gate);
    ob_set_name(f, "blk.%d.ffn_moe_out", il);
    return f;
}
