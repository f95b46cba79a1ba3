/* DeepSeek-V2/V3-style models (GGUF "deepseek2": DeepSeek-V2, V2-Lite, V3, GLM-4.7-Flash):
 * multi-head latent attention (MLA) and a mixture of experts with shared experts, after
 * leading dense layers.
 *
 * MLA compresses a token's keys and values into one latent row c (kv_lora_rank) and a
 * small key part k_pe (n_rot) that alone turns with the position and is shared by every
 * head. Head h's key is [k_b[h]^T c ; k_pe] and its value v_b[h] c. Run as written that
 * is attention over n_head full heads; run absorbed, as llama.cpp's converter lays the
 * file out for (k_b and v_b split per head, k_b transposed), q_nope is carried into the
 * latent space instead (q_abs = k_b[h] q_nope), so that q_abs . c + q_pe . k_pe equals the
 * head's dot product, and the attention is one kv head over the latent rows [c ; k_pe]:
 * the cache keeps kv_lora_rank + n_rot elements a token (576 for DeepSeek and GLM-4.7-Flash,
 * against 2 x 20 x 256 = 10,240 for GLM's heads written out), whose first kv_lora_rank are
 * the value; v_b[h] then maps each head's attention output back to its value width.
 *
 * The router is softmax (DeepSeek-V2) or sigmoid with a selection bias (V3, GLM), possibly
 * limited to the best groups of experts (V3), weights renormalised and scaled as the file
 * says. Files from llama.cpp's converter may also hold multi-token-prediction layers past
 * the trunk (GLM-4.7-Flash's nextn block): they are read and not run. */
#include "arch/arch_common.h"
#include "format/quant.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct ob_ds2_layer {
    const ob_weight *attn_norm;         /* [n_embd] */
    const ob_weight *wq_a, *q_a_norm;   /* attn_q_a [n_embd, q_lora], attn_q_a_norm [q_lora] (q_lora > 0) */
    const ob_weight *wq;                /* attn_q_b [q_lora, H*hk], or attn_q [n_embd, H*hk] */
    const ob_weight *wkv_a;             /* attn_kv_a_mqa [n_embd, kv_lora + n_rot] */
    const ob_weight *kv_a_norm;         /* attn_kv_a_norm [kv_lora] */
    const ob_weight *wk_b;              /* attn_k_b [nope, kv_lora, H] */
    const ob_weight *wv_b;              /* attn_v_b [kv_lora, vd, H] */
    const ob_weight *wo;                /* attn_output [H*vd, n_embd] */
    const ob_weight *ffn_norm;          /* [n_embd] */
    const ob_weight *gate, *up, *down;  /* dense layers: [n_embd, n_ff] x2, [n_ff, n_embd] */
    const ob_weight *router;            /* ffn_gate_inp [n_embd, E] */
    const ob_weight *probs_b;           /* exp_probs_b [E] (the selection bias) or NULL */
    const ob_weight *gate_exps, *up_exps, *down_exps; /* [n_embd, n_ff_exp, E] x2, [n_ff_exp, n_embd, E] */
    const ob_weight *gate_sh, *up_sh, *down_sh;       /* shared experts [n_embd, F_sh] x2, [F_sh, n_embd]; or NULL */
} ob_ds2_layer;

typedef struct ob_ds2 {
    const ob_weight *tok_embd;          /* [n_embd, n_vocab] */
    const ob_weight *out_norm;          /* [n_embd] */
    const ob_weight *output;            /* [n_embd, n_vocab] (tok_embd when tied) */
    ob_moe_gating gating;               /* the router, resolved from the file (see bind) */
    ob_ds2_layer layers[];
} ob_ds2;

/* Experts a file may declare: past every released model, far below OB_MOE_MAX_EXPERTS. */
#define OB_DS2_MAX_EXPERTS 4096

static ob_status bad_key(char *err, size_t err_len, const char *arch, const char *key, long long v) {
    return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.%s = %lld is implausible", arch, key, v);
}

static ob_status ds2_hparams(const ob_gguf *g, ob_hparams *hp, char *err, size_t err_len) {
    ob_status st = ob_hp_load_base(g, hp, err, err_len);
    if (st) return st;
    const char *a = hp->arch;
    uint32_t v;
    float f;
    /* the trunk: block_count counts the multi-token-prediction layers too */
    if (ob_hp_u32(g, a, "nextn_predict_layers", &v)) {
        if (v >= (uint32_t)hp->n_layer) return bad_key(err, err_len, a, "nextn_predict_layers", v);
        hp->n_layer_nextn = (int)v;
        hp->n_layer -= (int)v;
    }
    struct { const char *suffix; int *dst; bool required; int lo, hi; } ints[] = {
        {"attention.kv_lora_rank", &hp->kv_lora_rank, true, 1, 1 << 16},
        {"attention.q_lora_rank", &hp->q_lora_rank, false, 0, 1 << 16},
        {"rope.dimension_count", &hp->n_rot, true, 2, 1024},
        {"leading_dense_block_count", &hp->n_layer_dense, false, 0, hp->n_layer},
        {"expert_count", &hp->n_expert, false, 0, OB_DS2_MAX_EXPERTS},
        {"expert_used_count", &hp->n_expert_used, false, 0, OB_DS2_MAX_EXPERTS},
        {"expert_feed_forward_length", &hp->n_ff_exp, true, 1, 1 << 20},
        {"expert_shared_count", &hp->n_expert_shared, false, 0, 1024},
        {"expert_gating_func", &hp->expert_gating, false, 0, 1 << 20},
        {"expert_group_count", &hp->n_expert_group, false, 0, OB_DS2_MAX_EXPERTS},
        {"expert_group_used_count", &hp->n_expert_group_used, false, 0, OB_DS2_MAX_EXPERTS},
    };
    for (size_t i = 0; i < OB_ARRAY_LEN(ints); i++) {
        if (!ob_hp_u32(g, a, ints[i].suffix, &v)) {
            if (ints[i].required) return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.%s missing", a, ints[i].suffix);
            continue;
        }
        if (v < (uint32_t)ints[i].lo || v > (uint32_t)ints[i].hi) return bad_key(err, err_len, a, ints[i].suffix, v);
        *ints[i].dst = (int)v;
    }
    if (hp->n_rot % 2) return bad_key(err, err_len, a, "rope.dimension_count", hp->n_rot);
    /* A head's key and value widths: the *_mla keys of an MLA file (key_length is then the
     * latent row, value_length the latent), or key_length / value_length themselves in a
     * file from before llama.cpp split attn_kv_b (bind splits it) */
    const bool mla_keys = ob_hp_u32(g, a, "attention.key_length_mla", &v);
    const char *kk = mla_keys ? "attention.key_length_mla" : "attention.key_length";
    const char *vk = mla_keys ? "attention.value_length_mla" : "attention.value_length";
    if (!mla_keys && !ob_hp_u32(g, a, kk, &v)) return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.%s missing", a, kk);
    hp->head_dim_k_mla = (int)v;
    if (!ob_hp_u32(g, a, vk, &v)) return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.%s missing", a, vk);
    hp->head_dim_v_mla = (int)v;
    if (hp->head_dim_k_mla <= hp->n_rot || hp->head_dim_k_mla > 4096) return bad_key(err, err_len, a, kk, hp->head_dim_k_mla);
    if (hp->head_dim_v_mla < 1 || hp->head_dim_v_mla > 4096) return bad_key(err, err_len, a, vk, hp->head_dim_v_mla);
    /* the cache's one kv head: the latent row [c ; k_pe], the value its first kv_lora_rank */
    hp->n_head_kv = 1;
    hp->head_dim = hp->kv_lora_rank + hp->n_rot;
    hp->v_in_k = true;
    if (mla_keys && ob_hp_u32(g, a, "attention.key_length", &v) && (int)v != hp->head_dim)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.attention.key_length %u is not kv_lora_rank + rope (%d)", a,
                       v, hp->head_dim);
    if (mla_keys && ob_hp_u32(g, a, "attention.value_length", &v) && (int)v != hp->kv_lora_rank)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.attention.value_length %u is not kv_lora_rank (%d)", a, v,
                       hp->kv_lora_rank);
    if (hp->n_layer_dense < hp->n_layer) {
        if (hp->n_expert < 1 || hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert)
            return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.expert_used_count %d of expert_count %d", a,
                           hp->n_expert_used, hp->n_expert);
        if (hp->n_expert_group > 1 &&
            (hp->n_expert % hp->n_expert_group || hp->n_expert_group_used < 1 ||
             hp->n_expert_group_used > hp->n_expert_group ||
             hp->n_expert_used > hp->n_expert_group_used * (hp->n_expert / hp->n_expert_group)))
            return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s: %d expert groups, %d used, for %d of %d experts", a,
                           hp->n_expert_group, hp->n_expert_group_used, hp->n_expert_used, hp->n_expert);
    }
    if (hp->expert_gating > 2)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "model: %s.expert_gating_func %d is not supported (1 softmax, 2 sigmoid)",
                       a, hp->expert_gating);
    bool b;
    char key[160];
    snprintf(key, sizeof(key), "%s.expert_weights_norm", a);
    hp->expert_norm = ob_gguf_get_bool(g, key, &b) && b;
    hp->expert_scale = ob_hp_f32(g, a, "expert_weights_scale", &f) && f != 0.0f ? f : 1.0f;
    if (!isfinite(hp->expert_scale)) return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.expert_weights_scale", a);
    /* YaRN: llama.cpp's converter writes 0.1 * mscale_all_dim as yarn_log_multiplier (its
     * deepseek2 loader divides it out again). DeepSeek's rope then keeps its angles' scale
     * (transformers: attention_factor = mscale / mscale_all_dim's, 1 for every released
     * model, as llama.cpp assumes) and the softmax takes mscale_all_dim's factor squared
     * instead (build) */
    hp->rope_meta.log_mul /= 0.1f;
    if (hp->rope_meta.log_mul != 0.0f && hp->rope_meta.yarn_attn_factor < 0) hp->rope_meta.yarn_attn_factor = 1.0f;
    if (ob_hp_f32(g, a, "attention.temperature_scale", &f) && f != 0.0f)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "model: %s with attention temperature scaling is not supported", a);
    hp->rope_mode = 0; /* the rope pairs are adjacent in DeepSeek's and GLM's weights */
    return OB_OK;
}

/* attn_k_b [nope, kv_lora, H] (each head's rows transposed) and attn_v_b [kv_lora, vd, H]
 * from the unsplit kv_b [kv_lora, H * (nope + vd)] of a file from before llama.cpp wrote
 * them, as F32 weights of the model's own (llama.cpp's converter's split, done at load). */
static ob_status split_kv_b(ob_model_view *mv, const ob_hparams *hp, const ob_weight *kv_b, ob_ds2_layer *L, char *err,
                            size_t err_len) {
    const int64_t H = hp->n_head, kvr = hp->kv_lora_rank, vd = hp->head_dim_v_mla;
    const int64_t nope = hp->head_dim_k_mla - hp->n_rot, per = nope + vd;
    const ob_type_traits *tr = ob_type_traits_get(kv_b->type);
    const char *src = ob_mv_host_data(mv, kv_b);
    float *row = malloc(sizeof(float) * (size_t)kvr), *kb = malloc(sizeof(float) * (size_t)(nope * kvr * H));
    float *vb = malloc(sizeof(float) * (size_t)(kvr * vd * H));
    ob_status st = OB_OK;
    if (!row || !kb || !vb || !src || !tr || !tr->to_float) {
        st = ob_fail(err, err_len, OB_ERR_NOMEM, "model: cannot split %s", kv_b->name);
        goto done;
    }
    const size_t rb = ob_row_size(kv_b->type, kvr);
    for (int64_t h = 0; h < H; h++)
        for (int64_t r = 0; r < per; r++) {
            tr->to_float(src + (size_t)(h * per + r) * rb, row, kvr);
            for (int64_t j = 0; j < kvr; j++) {
                if (r < nope) kb[(h * kvr + j) * nope + r] = row[j];
                else vb[(h * vd + (r - nope)) * kvr + j] = row[j];
            }
        }
    L->wk_b = ob_mv_new_weight_nd(mv, "attn_k_b (split from attn_kv_b)", kb, 3, (const int64_t[]){nope, kvr, H}, err,
                                  err_len);
    L->wv_b = L->wk_b ? ob_mv_new_weight_nd(mv, "attn_v_b (split from attn_kv_b)", vb, 3, (const int64_t[]){kvr, vd, H},
                                            err, err_len)
                      : NULL;
    if (!L->wk_b || !L->wv_b) st = OB_ERR_NOMEM;
done:
    free(row);
    free(kb);
    free(vb);
    return st;
}

/* Binds layer il's tensors by llama.cpp's names. */
static ob_status bind_layer(ob_model_view *mv, const ob_hparams *hp, int il, ob_ds2_layer *L, char *err, size_t err_len) {
    const int64_t D = hp->n_embd, H = hp->n_head, hk = hp->head_dim_k_mla, vd = hp->head_dim_v_mla;
    const int64_t qr = hp->q_lora_rank, kvr = hp->kv_lora_rank, nope = hk - hp->n_rot;
    const int64_t E = hp->n_expert, F = hp->n_ff, Fe = hp->n_ff_exp, Fs = (int64_t)hp->n_ff_exp * hp->n_expert_shared;
    char name[96];
#define OB_W(field, suffix, req, nd, ...) do { \
        const int64_t ne_[4] = {__VA_ARGS__}; \
        snprintf(name, sizeof(name), "blk.%d.%s", il, suffix); \
        L->field = ob_mv_weight(mv, name, nd, ne_, req, err, err_len); \
        if (!L->field && ((req) || ob_mv_failed(mv))) return OB_ERR_FORMAT; } while (0)
    OB_W(attn_norm, "attn_norm.weight", true, 1, D);
    if (qr > 0) {
        OB_W(wq_a, "attn_q_a.weight", true, 2, D, qr);
        OB_W(q_a_norm, "attn_q_a_norm.weight", true, 1, qr);
        OB_W(wq, "attn_q_b.weight", true, 2, qr, H * hk);
    } else {
        OB_W(wq, "attn_q.weight", true, 2, D, H * hk);
    }
    OB_W(wkv_a, "attn_kv_a_mqa.weight", true, 2, D, kvr + hp->n_rot);
    OB_W(kv_a_norm, "attn_kv_a_norm.weight", true, 1, kvr);
    OB_W(wk_b, "attn_k_b.weight", false, 3, nope, kvr, H);
    OB_W(wv_b, "attn_v_b.weight", !!L->wk_b, 3, kvr, vd, H);
    OB_W(wo, "attn_output.weight", true, 2, H * vd, D);
    OB_W(ffn_norm, "ffn_norm.weight", true, 1, D);
    /* the unsplit kv_b: split here when the file has no k_b / v_b (older files), read and
     * not used when it has them too */
    snprintf(name, sizeof(name), "blk.%d.attn_kv_b.weight", il);
    const ob_weight *kv_b = ob_mv_weight(mv, name, 2, (const int64_t[]){kvr, H * (nope + vd)}, !L->wk_b, err, err_len);
    if (!kv_b && (ob_mv_failed(mv) || !L->wk_b)) return OB_ERR_FORMAT;
    if (!L->wk_b) {
        ob_status st = split_kv_b(mv, hp, kv_b, L, err, err_len);
        if (st) return st;
    }
    if (il < hp->n_layer_dense) {
        OB_W(gate, "ffn_gate.weight", true, 2, D, F);
        OB_W(up, "ffn_up.weight", true, 2, D, F);
        OB_W(down, "ffn_down.weight", true, 2, F, D);
        return OB_OK;
    }
    OB_W(router, "ffn_gate_inp.weight", true, 2, D, E);
    OB_W(probs_b, "exp_probs_b.bias", false, 1, E);
    OB_W(gate_exps, "ffn_gate_exps.weight", true, 3, D, Fe, E);
    OB_W(up_exps, "ffn_up_exps.weight", true, 3, D, Fe, E);
    OB_W(down_exps, "ffn_down_exps.weight", true, 3, Fe, D, E);
    if (Fs > 0) {
        OB_W(gate_sh, "ffn_gate_shexp.weight", true, 2, D, Fs);
        OB_W(up_sh, "ffn_up_shexp.weight", true, 2, D, Fs);
        OB_W(down_sh, "ffn_down_shexp.weight", true, 2, Fs, D);
    }
#undef OB_W
    if (L->probs_b && L->probs_b->type != OB_TYPE_F32)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: blk.%d.exp_probs_b.bias must be F32, not %s", il,
                       ob_type_name(L->probs_b->type));
    return OB_OK;
}

/* A multi-token-prediction layer (nextn) past the trunk: every tensor it may hold is read
 * and none is run (llama.cpp runs it only as a draft model). */
static ob_status skip_nextn_layer(ob_model_view *mv, int il, char *err, size_t err_len) {
    static const char *const names[] = {
        "attn_norm.weight", "attn_q_a.weight", "attn_q_a_norm.weight", "attn_q_b.weight", "attn_q.weight",
        "attn_kv_a_mqa.weight", "attn_kv_a_norm.weight", "attn_k_b.weight", "attn_v_b.weight", "attn_kv_b.weight",
        "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
        "ffn_gate_inp.weight", "exp_probs_b.bias", "ffn_gate_exps.weight", "ffn_up_exps.weight",
        "ffn_down_exps.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight",
        "nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight", "nextn.embed_tokens.weight",
        "nextn.shared_head_head.weight", "nextn.shared_head_norm.weight",
    };
    const int64_t any[4] = {-1, -1, -1, -1};
    char name[96];
    for (size_t i = 0; i < OB_ARRAY_LEN(names); i++) {
        snprintf(name, sizeof(name), "blk.%d.%s", il, names[i]);
        if (!ob_mv_weight(mv, name, 4, any, false, err, err_len) && ob_mv_failed(mv)) return OB_ERR_FORMAT;
    }
    return OB_OK;
}

static ob_status ds2_bind(ob_model_view *mv, const ob_hparams *hp, void **priv, char *err, size_t err_len) {
    ob_ds2 *m = calloc(1, sizeof(ob_ds2) + sizeof(ob_ds2_layer) * (size_t)hp->n_layer);
    if (!m) return ob_fail(err, err_len, OB_ERR_NOMEM, "model: out of memory");
    *priv = m;
    ob_status io = ob_bind_io(mv, hp, "output_norm.weight", &m->tok_embd, &m->out_norm, &m->output, err, err_len);
    if (io) return io;
    /* A file without expert_gating_func means softmax (DeepSeek-V2 and V2.5 were written
     * before the key), except GLM-4.7-Flash's early ones (47 layers, 48 with its nextn one,
     * and 154,880 tokens), which are sigmoid: llama.cpp's rule */
    const int blocks = hp->n_layer + hp->n_layer_nextn;
    const bool glm_lite = (blocks == 47 || blocks == 48) && hp->n_vocab == 154880;
    m->gating = hp->expert_gating == 2 || (hp->expert_gating == 0 && glm_lite) ? OB_MOE_SIGMOID : OB_MOE_SOFTMAX;
    for (int il = 0; il < hp->n_layer; il++) {
        ob_status st = bind_layer(mv, hp, il, &m->layers[il], err, err_len);
        if (st) return st;
    }
    for (int il = hp->n_layer; il < hp->n_layer + hp->n_layer_nextn; il++) {
        ob_status st = skip_nextn_layer(mv, il, err, err_len);
        if (st) return st;
    }
    return OB_OK;
}

/* The absorbed MLA attention of layer il on the normed h [n_embd, T] -> [n_embd, T]. */
static ob_tensor *mla_attn(ob_graph *g, const ob_hparams *hp, const ob_fwd_inputs *in, const ob_ds2_layer *L,
                           ob_tensor *h, int il) {
    const int64_t T = in->n_tokens, H = hp->n_head, hk = hp->head_dim_k_mla, vd = hp->head_dim_v_mla;
    const int64_t kvr = hp->kv_lora_rank, rope = hp->n_rot, nope = hk - rope;
    const ob_rope_cfg *rc = &hp->rope;
    ob_tensor *ff = rc->factors ? ob_weight_leaf(g, rc->factors) : NULL;
    /* q: [nope ; rope] per head */
    ob_tensor *q = h;
    if (L->wq_a) {
        q = ob_build_mm(g, L->wq_a, h, "attn_q_a", il);
        q = ob_rms_norm(g, q, ob_weight_leaf(g, L->q_a_norm), hp->norm_eps);
        q = ob_build_mm(g, L->wq, q, "attn_q_b", il);
    } else {
        q = ob_build_mm(g, L->wq, h, "attn_q", il);
    }
    q = ob_view(g, q, 3, (const int64_t[]){hk, H, T});
    ob_tensor *q_pe = ob_slice(g, q, nope, rope), *q_nope = ob_slice(g, q, 0, nope);
    ob_set_name(q_pe, "blk.%d.q_pe", il);
    ob_set_name(q_nope, "blk.%d.q_nope", il);
    q_pe = ob_rope(g, q_pe, in->pos, ff, (int)rope, hp->rope_mode, rc->base, rc->freq_scale, rc->mscale);
    /* q_nope carried into the latent space, head by head: q_abs[h] = k_b[h] q_nope[h] */
    ob_tensor *q_abs = ob_matmul_id(g, ob_weight_leaf(g, L->wk_b), q_nope, NULL);
    ob_set_name(q_abs, "blk.%d.q_absorbed", il);
    ob_tensor *Q = ob_concat(g, q_abs, q_pe); /* [kvr + rope, H, T] */
    ob_set_name(Q, "blk.%d.q_mla", il);
    /* the latent row: [norm(c) ; rope(k_pe)] */
    ob_tensor *kv = ob_build_mm(g, L->wkv_a, h, "attn_kv_a_mqa", il);
    ob_tensor *c = ob_slice(g, kv, 0, kvr), *k_pe = ob_slice(g, kv, kvr, rope);
    ob_set_name(c, "blk.%d.kv_cmpr", il);
    ob_set_name(k_pe, "blk.%d.k_pe", il);
    c = ob_rms_norm(g, c, ob_weight_leaf(g, L->kv_a_norm), hp->norm_eps);
    k_pe = ob_view(g, k_pe, 3, (const int64_t[]){rope, 1, T});
    k_pe = ob_rope(g, k_pe, in->pos, ff, (int)rope, hp->rope_mode, rc->base, rc->freq_scale, rc->mscale);
    ob_tensor *row = ob_concat(g, c, k_pe);
    ob_set_name(row, "blk.%d.kv_mla", il);
    ob_tensor *st = ob_kv_store(g, row, in->k_cache[il], in->pos, in->seq, in->cells_per_seq);
    ob_set_name(st, "blk.%d.kv_store", il);
    /* the softmax scale of the full head (nope + rope), times YaRN's mscale_all_dim factor
     * squared (the rope part's angles keep theirs: see ds2_hparams) */
    const double f = hp->yarn_factor, lm = hp->rope_meta.log_mul;
    const double ms = hp->rope_meta.attn_factor * (f > 1.0 && lm != 0.0 ? 0.1 * lm * log(f) + 1.0 : 1.0);
    ob_tensor *a = ob_attention_v(g, Q, in->k_cache[il], in->v_cache[il], in->pos, in->seq, st, in->cells_per_seq, 1,
                                  (int)kvr, (float)(ms * ms / sqrt((double)hk)));
    ob_set_name(a, "blk.%d.attn", il);
    /* each head's latent output to its value: v_b[h] a[h] */
    ob_tensor *v = ob_matmul_id(g, ob_weight_leaf(g, L->wv_b), ob_view(g, a, 3, (const int64_t[]){kvr, H, T}), NULL);
    ob_set_name(v, "blk.%d.attn_v_b", il);
    return ob_build_mm(g, L->wo, ob_view(g, v, 2, (const int64_t[]){vd * H, T}), "attn_output", il);
}

static ob_tensor *swiglu(ob_graph *g, const ob_weight *gate, const ob_weight *up, const ob_weight *down, ob_tensor *h,
                         const char *nm, int il) {
    ob_tensor *gt = ob_build_mm(g, gate, h, nm, il), *u = ob_matmul(g, ob_weight_leaf(g, up), h);
    return ob_matmul(g, ob_weight_leaf(g, down), ob_glu(g, gt, u, OB_ACT_SILU));
}

/* The routed experts plus the shared ones, on the normed h [n_embd, T] -> [n_embd, T]. */
static ob_tensor *moe_ffn(ob_graph *g, const ob_hparams *hp, const ob_ds2 *m, const ob_ds2_layer *L, ob_tensor *h,
                          int il) {
    ob_tensor *logits = ob_build_mm(g, L->router, h, "ffn_gate_inp", il);
    ob_tensor *gate = ob_moe_gate_grouped(g, logits, L->probs_b ? ob_weight_leaf(g, L->probs_b) : NULL,
                                          hp->n_expert_used, m->gating, hp->expert_norm, hp->expert_scale,
                                          hp->n_expert_group, hp->n_expert_group_used);
    ob_set_name(gate, "blk.%d.ffn_moe_gate", il);
    const ob_expert_weights ew = {.gate = L->gate_exps, .up = L->up_exps, .down = L->down_exps};
    ob_tensor *f = ob_build_experts(g, &ew, h, gate, il);
    if (L->gate_sh) f = ob_add(g, f, swiglu(g, L->gate_sh, L->up_sh, L->down_sh, h, "ffn_gate_shexp", il));
    return f;
}

static ob_tensor *ds2_build(ob_graph *g, const ob_hparams *hp, const void *priv, const ob_fwd_inputs *in) {
    const ob_ds2 *m = priv;
    ob_tensor *x = ob_get_rows(g, ob_weight_leaf(g, m->tok_embd), in->tokens);
    ob_set_name(x, "token_embd");
    for (int il = 0; il < hp->n_layer; il++) {
        const ob_ds2_layer *L = &m->layers[il];
        ob_tensor *h = ob_rms_norm(g, x, ob_weight_leaf(g, L->attn_norm), hp->norm_eps);
        ob_set_name(h, "blk.%d.attn_norm", il);
        x = ob_add(g, x, mla_attn(g, hp, in, L, h, il));
        h = ob_rms_norm(g, x, ob_weight_leaf(g, L->ffn_norm), hp->norm_eps);
        ob_set_name(h, "blk.%d.ffn_norm", il);
        x = ob_add(g, x, L->gate ? swiglu(g, L->gate, L->up, L->down, h, "ffn_gate", il) : moe_ffn(g, hp, m, L, h, il));
    }
    return ob_build_head(g, hp, in, x, m->out_norm, m->output);
}

const ob_arch ob_arch_deepseek2 = {
    .name = "deepseek2",
    .load_hparams = ds2_hparams,
    .bind = ds2_bind,
    .build = ds2_build,
    .free_priv = free,
};
