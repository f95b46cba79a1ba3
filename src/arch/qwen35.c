/* Qwen3.5 / Qwen3.6 dense (qwen35) and mixture-of-experts (qwen35moe: Qwen3.5-35B-A3B,
 * 122B-A10B, Qwen3.6-35B-A3B): Gated DeltaNet layers between gated full-attention layers
 * (three to one in the releases; the file's attention.recurrent_layers says which, else every
 * full_attention_interval-th layer attends), each followed, after a post-attention RMSNorm, by
 * a SwiGLU feed-forward (qwen35) or by routed experts plus a shared expert (qwen35moe): the
 * router picks expert_used_count of expert_count experts by softmax, weights renormalised to
 * sum 1 (transformers' Qwen3_5MoeTopKRouter always renormalises), each a SwiGLU of width
 * expert_feed_forward_length; the shared expert, a SwiGLU of width
 * expert_shared_feed_forward_length, is scaled by sigmoid(ffn_gate_inp_shexp h) and added. The file's RMSNorm weights are 1 + w already (llama.cpp's converter
 * adds the one of Qwen3.5's zero-centred norms), except the delta rule's gated norm.
 *
 * A Gated DeltaNet layer: attn_qkv projects the queries, keys (ssm.group_count heads of
 * ssm.state_size) and values (ssm.time_step_rank heads, ssm.inner_size wide), a causal conv of
 * ssm.conv_kernel taps and SiLU runs over all three (SSM_CONV), then the gated delta rule
 * (DELTA_NET: q and k L2-normalised, q scaled by 1/sqrt(state_size)) with
 * beta = sigmoid(ssm_beta h) and the log-decay g = ssm_a * softplus(ssm_alpha h + ssm_dt.bias)
 * (ssm_a = -exp(A_log), as the converter writes it); each value head's output goes through an
 * RMSNorm (ssm_norm) times silu(attn_gate h) and ssm_out. The converter writes the value heads
 * in tiled order (head h reads key head h % group_count), which is DELTA_NET's.
 *
 * A full-attention layer: attn_q gives each head's query and its output gate side by side;
 * q/k RMSNorm per head, NeoX rope over the first rope.dimension_count dims of a head (a
 * quarter: partial rope), GQA attention, the output times sigmoid(gate), attn_output. The
 * interleaved multimodal rope (rope.dimension_sections) turns every pair by the token's one
 * position for text, so it is the plain rope here.
 *
 * The file's multi-token-prediction block (nextn_predict_layers, past the trunk) is read and
 * not run. */
#include "arch/arch_common.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct ob_q35_layer {
    const ob_weight *attn_norm;             /* [n_embd] */
    ob_attn_weights attn;                   /* full-attention layers (attn_q [n_embd, 2 hd n_head]) */
    /* Gated DeltaNet layers; C = 2 n_group d_state + d_inner channels through the conv */
    const ob_weight *qkv;                   /* attn_qkv [n_embd, C] */
    const ob_weight *z;                     /* attn_gate [n_embd, d_inner] */
    const ob_weight *conv;                  /* ssm_conv1d [d_conv, C] */
    const ob_weight *dt_bias, *a;           /* ssm_dt.bias, ssm_a [dt_rank] */
    const ob_weight *beta, *alpha;          /* ssm_beta, ssm_alpha [n_embd, dt_rank] */
    const ob_weight *ssm_norm;              /* [d_inner / dt_rank] */
    const ob_weight *ssm_out;               /* [d_inner, n_embd] */
    ob_ffn_weights ffn;                     /* its norm: post_attention_norm; qwen35moe: the shared
                                               expert ffn_*_shexp [n_embd, n_ff_shexp] x2, [n_ff_shexp, n_embd] */
    /* qwen35moe */
    const ob_weight *router;                /* ffn_gate_inp [n_embd, n_expert] */
    const ob_weight *shexp_gate;            /* ffn_gate_inp_shexp [n_embd, 1] */
    ob_expert_weights exps;                 /* ffn_{gate,up}_exps [n_embd, n_ff_exp, n_expert], ffn_down_exps
                                               [n_ff_exp, n_embd, n_expert] */
} ob_q35_layer;

typedef struct ob_q35 {
    const ob_weight *tok_embd;              /* [n_embd, n_vocab] */
    const ob_weight *out_norm;              /* [n_embd] */
    const ob_weight *output;                /* [n_embd, n_vocab] (tok_embd when tied) */
    ob_q35_layer layers[];
} ob_q35;

static ob_status bad_key(char *err, size_t err_len, const char *arch, const char *key, long long v) {
    return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.%s = %lld is implausible", arch, key, v);
}

static ob_status q35_hparams(const ob_gguf *g, ob_hparams *hp, char *err, size_t err_len) {
    ob_status st = ob_hp_load_common(g, hp, err, err_len);
    if (st) return st;
    const char *a = hp->arch;
    hp->rope_mode = 2; /* HF's layout: NeoX halves over the rotated part */
    const int n_all = hp->n_layer;
    uint32_t v;
    if (ob_hp_u32(g, a, "nextn_predict_layers", &v)) { /* block_count counts them too */
        if (v >= (uint32_t)hp->n_layer) return bad_key(err, err_len, a, "nextn_predict_layers", v);
        hp->n_layer_nextn = (int)v;
        hp->n_layer -= (int)v;
    }
    struct { const char *suffix; int *dst; int lo, hi; } keys[] = {
        {"ssm.conv_kernel", &hp->ssm_d_conv, 2, 64},        {"ssm.state_size", &hp->ssm_d_state, 1, 1024},
        {"ssm.group_count", &hp->ssm_n_group, 1, 65536},    {"ssm.time_step_rank", &hp->ssm_dt_rank, 1, 65536},
        {"ssm.inner_size", &hp->ssm_d_inner, 1, 1 << 24},
    };
    for (size_t i = 0; i < OB_ARRAY_LEN(keys); i++) {
        if (!ob_hp_u32(g, a, keys[i].suffix, &v))
            return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.%s missing", a, keys[i].suffix);
        if ((int64_t)v < keys[i].lo || (int64_t)v > keys[i].hi) return bad_key(err, err_len, a, keys[i].suffix, v);
        *keys[i].dst = (int)v;
    }
    const int H = hp->ssm_dt_rank, Hk = hp->ssm_n_group;
    if (H % Hk || hp->ssm_d_inner % H || hp->ssm_d_inner / H > 1024)
        return ob_fail(err, err_len, OB_ERR_FORMAT,
                       "model: %s.ssm.time_step_rank %d value heads over %s.ssm.group_count %d key heads, "
                       "%s.ssm.inner_size %d: not whole heads",
                       a, H, a, Hk, a, hp->ssm_d_inner);
    /* which layers are recurrent: the file's list (trunk and nextn layers), else the interval */
    char key[96];
    snprintf(key, sizeof(key), "%s.attention.recurrent_layers", a);
    const ob_gguf_kv *kv = ob_gguf_find_kv(g, key);
    if (kv) {
        if (kv->type != OB_GGUF_ARRAY || kv->n != (uint64_t)n_all)
            return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s has %llu entries, not %d (%s.block_count)", key,
                           (unsigned long long)kv->n, n_all, a);
        for (int il = 0; il < hp->n_layer; il++) {
            int64_t r;
            if (!ob_gguf_arr_i64(kv, (uint64_t)il, &r))
                return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s is not a bool array", key);
            hp->layer_rec[il] = r != 0;
        }
    } else {
        uint32_t every = 4;
        if (ob_hp_u32(g, a, "full_attention_interval", &every) && (every < 1 || every > 1024))
            return bad_key(err, err_len, a, "full_attention_interval", every);
        for (int il = 0; il < hp->n_layer; il++) hp->layer_rec[il] = (il + 1) % (int)every != 0;
    }
    const int64_t dv = hp->ssm_d_inner / H, C = 2 * (int64_t)Hk * hp->ssm_d_state + hp->ssm_d_inner;
    hp->rec_conv = (hp->ssm_d_conv - 1) * C;
    hp->rec_ssm = (int64_t)hp->ssm_d_state * dv * H;
    return OB_OK;
}

/* Experts a file may declare: past every released model (256), far below OB_MOE_MAX_EXPERTS. */
#define OB_Q35_MAX_EXPERTS 4096

static ob_status q35moe_hparams(const ob_gguf *g, ob_hparams *hp, char *err, size_t err_len) {
    ob_status st = q35_hparams(g, hp, err, err_len);
    if (!st) st = ob_hp_load_experts(g, hp, OB_Q35_MAX_EXPERTS, err, err_len);
    if (st) return st;
    uint32_t v;
    if (!ob_hp_u32(g, hp->arch, "expert_shared_feed_forward_length", &v))
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.expert_shared_feed_forward_length missing", hp->arch);
    if (v == 0 || v > (1u << 20)) return bad_key(err, err_len, hp->arch, "expert_shared_feed_forward_length", v);
    hp->n_ff_shexp = (int)v;
    return OB_OK;
}

/* The nextn block's tensors (llama.cpp's qwen35 MTP layer: a full-attention block, eh_proj,
 * the norms, optionally its own embedding and head). */
static const char *const g_nextn[] = {
    "attn_norm.weight",    "post_attention_norm.weight", "attn_q.weight",         "attn_k.weight",
    "attn_v.weight",       "attn_output.weight",         "attn_q_norm.weight",    "attn_k_norm.weight",
    "ffn_gate.weight",     "ffn_up.weight",              "ffn_down.weight",       "nextn.eh_proj.weight",
    "nextn.enorm.weight",  "nextn.hnorm.weight",         "nextn.embed_tokens.weight", "nextn.shared_head_head.weight",
    "nextn.shared_head_norm.weight",
    /* qwen35moe's: its feed-forward is experts */
    "ffn_gate_inp.weight", "ffn_gate_exps.weight",       "ffn_up_exps.weight",    "ffn_down_exps.weight",
    "ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight",  "ffn_down_shexp.weight",
};

static ob_status bind_delta_layer(ob_model_view *mv, const ob_hparams *hp, int il, ob_q35_layer *L, char *err,
                                  size_t err_len) {
    const int64_t E = hp->n_embd, H = hp->ssm_dt_rank, I = hp->ssm_d_inner, dv = I / H;
    const int64_t C = 2 * (int64_t)hp->ssm_n_group * hp->ssm_d_state + I;
    const ob_bind_spec w[] = {
        {&L->attn_norm, "attn_norm.weight", 1, {E}, true},    {&L->qkv, "attn_qkv.weight", 2, {E, C}, false},
        {&L->z, "attn_gate.weight", 2, {E, I}, false},        {&L->conv, "ssm_conv1d.weight", 2, {hp->ssm_d_conv, C}, true},
        {&L->dt_bias, "ssm_dt.bias", 1, {H}, true},           {&L->a, "ssm_a", 1, {H}, true},
        {&L->beta, "ssm_beta.weight", 2, {E, H}, false},      {&L->alpha, "ssm_alpha.weight", 2, {E, H}, false},
        {&L->ssm_norm, "ssm_norm.weight", 1, {dv}, true},     {&L->ssm_out, "ssm_out.weight", 2, {I, E}, false},
    };
    return ob_bind_list(mv, il, w, OB_ARRAY_LEN(w), err, err_len);
}

/* qwen35moe's feed-forward: its norm, the router, the experts and the gated shared expert; the
 * expert count of every tensor is expert_count's. */
static ob_status bind_moe(ob_model_view *mv, const ob_hparams *hp, int il, ob_q35_layer *L, char *err, size_t err_len) {
    const int64_t E = hp->n_embd, X = hp->n_expert, F = hp->n_ff_exp, S = hp->n_ff_shexp;
    const ob_bind_spec w[] = {
        {&L->ffn.norm, "post_attention_norm.weight", 1, {E}, true},
        {&L->router, "ffn_gate_inp.weight", 2, {E, X}, false},
        {&L->exps.gate, "ffn_gate_exps.weight", 3, {E, F, X}, false},
        {&L->exps.up, "ffn_up_exps.weight", 3, {E, F, X}, false},
        {&L->exps.down, "ffn_down_exps.weight", 3, {F, E, X}, false},
        {&L->shexp_gate, "ffn_gate_inp_shexp.weight", 2, {E, 1}, false},
        {&L->ffn.gate, "ffn_gate_shexp.weight", 2, {E, S}, false},
        {&L->ffn.up, "ffn_up_shexp.weight", 2, {E, S}, false},
        {&L->ffn.down, "ffn_down_shexp.weight", 2, {S, E}, false},
    };
    return ob_bind_list(mv, il, w, OB_ARRAY_LEN(w), err, err_len);
}

static ob_status q35_bind(ob_model_view *mv, const ob_hparams *hp, void **priv, char *err, size_t err_len) {
    ob_q35 *m = calloc(1, sizeof(ob_q35) + sizeof(ob_q35_layer) * (size_t)hp->n_layer);
    if (!m) return ob_fail(err, err_len, OB_ERR_NOMEM, "model: out of memory");
    *priv = m;
    ob_status io = ob_bind_io(mv, hp, "output_norm.weight", &m->tok_embd, &m->out_norm, &m->output, err, err_len);
    if (io) return io;
    for (int il = 0; il < hp->n_layer; il++) {
        ob_q35_layer *L = &m->layers[il];
        ob_status st = hp->layer_rec[il] ? bind_delta_layer(mv, hp, il, L, err, err_len)
                                         : ob_bind_layer_attn_gated(mv, hp, il, &L->attn, err, err_len);
        if (!st && !hp->layer_rec[il]) L->attn_norm = L->attn.norm;
        if (!st) st = hp->n_expert ? bind_moe(mv, hp, il, L, err, err_len)
                                   : ob_bind_ffn(mv, hp, il, "post_attention_norm", &L->ffn, err, err_len);
        if (st) return st;
    }
    for (int il = hp->n_layer; il < hp->n_layer + hp->n_layer_nextn; il++) {
        ob_status st = ob_bind_unused(mv, il, g_nextn, OB_ARRAY_LEN(g_nextn), err, err_len);
        if (st) return st;
    }
    return OB_OK;
}

/* The Gated DeltaNet block on the normed h [n_embd, T] -> [n_embd, T]. */
static ob_tensor *delta_block(ob_graph *g, const ob_hparams *hp, const ob_fwd_inputs *in, const ob_q35_layer *L,
                              ob_tensor *h, int il) {
    const int64_t T = in->n_tokens, H = hp->ssm_dt_rank, dv = hp->ssm_d_inner / H, dk = hp->ssm_d_state;
    ob_tensor *qkv = ob_build_mm(g, L->qkv, h, "attn_qkv", il);
    ob_tensor *z = ob_build_mm(g, L->z, h, "attn_gate", il);
    ob_tensor *beta = ob_act_op(g, ob_build_mm(g, L->beta, h, "ssm_beta", il), OB_ACT_SIGMOID);
    ob_tensor *a = ob_add(g, ob_build_mm(g, L->alpha, h, "ssm_alpha", il), ob_weight_leaf(g, L->dt_bias));
    ob_tensor *decay = ob_mul(g, ob_act_op(g, a, OB_ACT_SOFTPLUS), ob_weight_leaf(g, L->a)); /* log decay, <= 0 */
    ob_tensor *cv = ob_ssm_conv(g, qkv, ob_weight_leaf(g, L->conv), in->conv_state[il], in->pos, in->seq, true);
    ob_set_name(cv, "blk.%d.ssm_conv", il);
    ob_tensor *o = ob_delta_net(g, cv, decay, beta, in->ssm_state[il], in->pos, in->seq, (int)dk, hp->ssm_n_group,
                                (int)dv, 1.0f / sqrtf((float)dk), true, 1e-6f);
    ob_set_name(o, "blk.%d.delta_net", il);
    /* the gated RMSNorm: each value head's output normed, times silu(z) */
    o = ob_rms_norm(g, o, ob_weight_leaf(g, L->ssm_norm), hp->norm_eps);
    const int64_t nz[3] = {dv, H, T}, no[2] = {dv * H, T};
    o = ob_glu(g, ob_view(g, z, 3, nz), o, OB_ACT_SILU);
    return ob_build_mm(g, L->ssm_out, ob_view(g, o, 2, no), "ssm_out", il);
}

/* The gated attention block on the normed h [n_embd, T] -> [n_embd, T]. */
static ob_tensor *attn_block(ob_graph *g, const ob_hparams *hp, const ob_fwd_inputs *in, const ob_q35_layer *L,
                             ob_tensor *h, int il) {
    const int64_t T = in->n_tokens, hd = hp->head_dim, Hq = hp->n_head;
    const int64_t nqg[3] = {2 * hd, Hq, T}, nk[3] = {hd, hp->n_head_kv, T}, na[2] = {hd * Hq, T};
    ob_tensor *qg = ob_view(g, ob_build_mm(g, L->attn.wq, h, "attn_q", il), 3, nqg);
    ob_tensor *q = ob_slice(g, qg, 0, hd), *gate = ob_slice(g, qg, hd, hd);
    ob_tensor *k = ob_view(g, ob_build_mm(g, L->attn.wk, h, "attn_k", il), 3, nk);
    ob_tensor *v = ob_build_mm(g, L->attn.wv, h, "attn_v", il);
    ob_tensor *a = ob_build_attn_qkv(g, hp, in, il, &L->attn, q, k, v, &hp->rope, 0);
    a = ob_glu(g, ob_view(g, gate, 2, na), a, OB_ACT_SIGMOID);
    return ob_build_mm(g, L->attn.wo, a, "attn_output", il);
}

/* qwen35moe's feed-forward on the normed h [n_embd, T] -> [n_embd, T]. */
static ob_tensor *moe_block(ob_graph *g, const ob_hparams *hp, const ob_q35_layer *L, ob_tensor *h, int il) {
    const int64_t T = h->ne[1], ns[3] = {hp->n_embd, 1, T};
    ob_tensor *gate = ob_moe_gate(g, ob_build_mm(g, L->router, h, "ffn_gate_inp", il), NULL, hp->n_expert_used,
                                  OB_MOE_SOFTMAX, true, 1.0f);
    ob_set_name(gate, "blk.%d.ffn_moe_gate", il);
    ob_tensor *f = ob_build_experts(g, &L->exps, h, gate, il);
    /* The shared expert times sigmoid(ffn_gate_inp_shexp h), a scalar a token: a router over
     * that one expert with sigmoid gating gives [sigmoid, id 0], and MOE_SUM scales by it. */
    ob_tensor *sh = ob_build_ffn_glu(g, L->ffn.gate, L->ffn.up, L->ffn.down, h, OB_ACT_SILU, il);
    ob_tensor *sg = ob_moe_gate(g, ob_build_mm(g, L->shexp_gate, h, "ffn_gate_inp_shexp", il), NULL, 1, OB_MOE_SIGMOID,
                                false, 1.0f);
    ob_set_name(sg, "blk.%d.ffn_shexp_gate", il);
    return ob_add(g, f, ob_moe_sum(g, ob_view(g, sh, 3, ns), sg));
}

static ob_tensor *q35_build(ob_graph *g, const ob_hparams *hp, const void *priv, const ob_fwd_inputs *in) {
    const ob_q35 *m = priv;
    ob_tensor *x = ob_get_rows(g, ob_weight_leaf(g, m->tok_embd), in->tokens);
    ob_set_name(x, "token_embd");
    for (int il = 0; il < hp->n_layer; il++) {
        const ob_q35_layer *L = &m->layers[il];
        ob_tensor *h = ob_rms_norm(g, x, ob_weight_leaf(g, L->attn_norm), hp->norm_eps);
        ob_set_name(h, "blk.%d.attn_norm", il);
        x = ob_add(g, x, hp->layer_rec[il] ? delta_block(g, hp, in, L, h, il) : attn_block(g, hp, in, L, h, il));
        h = ob_rms_norm(g, x, ob_weight_leaf(g, L->ffn.norm), hp->norm_eps);
        ob_set_name(h, "blk.%d.post_attention_norm", il);
        x = ob_add(g, x, hp->n_expert ? moe_block(g, hp, L, h, il)
                                      : ob_build_ffn_glu(g, L->ffn.gate, L->ffn.up, L->ffn.down, h, OB_ACT_SILU, il));
    }
    return ob_build_head(g, hp, in, x, m->out_norm, m->output);
}

const ob_arch ob_arch_qwen35 = {
    .name = "qwen35",
    .load_hparams = q35_hparams,
    .bind = q35_bind,
    .build = q35_build,
    .free_priv = free,
};

const ob_arch ob_arch_qwen35moe = {
    .name = "qwen35moe",
    .load_hparams = q35moe_hparams,
    .bind = q35_bind,
    .build = q35_build,
    .free_priv = free,
};
