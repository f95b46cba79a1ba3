/* gpt-oss (GGUF "gpt-oss": OpenAI's gpt-oss-20b and gpt-oss-120b). A decoder whose layers
 * alternate sliding-window (attention.sliding_window, 128) and full attention, the first
 * of each attention.sliding_window_pattern (default 2) layers sliding; q/k/v/o with
 * biases; attention sinks (a learned logit per head that joins the softmax's denominator,
 * ATTENTION's src6); NeoX RoPE with YaRN, whose correction range gpt-oss keeps exact
 * (transformers' truncate = false, as OpenAI trained it; llama.cpp floors and ceils it).
 * Every layer's feed-forward is a mixture: a router with a bias picks expert_used_count of
 * expert_count experts by logit and weights them by the softmax of the chosen logits (the
 * whole softmax renormalised over the chosen, the same numbers); each expert is gpt-oss's
 * clamped SwiGLU (alpha 1.702, limit 7, up + 1) with biases on gate, up and down
 * (ADD_ID), its matrices usually MXFP4 as the release ships them. */
#include "arch/arch_common.h"
#include <stdio.h>
#include <stdlib.h>

typedef struct ob_gptoss_layer {
    ob_attn_weights attn;                    /* q/k/v/o with biases; sinks [n_head] */
    const ob_weight *ffn_norm;               /* post_attention_norm [n_embd]: the norm before the mixture */
    const ob_weight *router, *router_b;      /* ffn_gate_inp [n_embd, n_expert], its bias [n_expert] */
    const ob_weight *gate, *up;              /* ffn_gate_exps, ffn_up_exps [n_embd, n_ff_exp, n_expert] */
    const ob_weight *down;                   /* ffn_down_exps [n_ff_exp, n_embd, n_expert] */
    const ob_weight *gate_b, *up_b, *down_b; /* their biases [n_ff_exp, n_expert] x2, [n_embd, n_expert] */
} ob_gptoss_layer;

typedef struct ob_gptoss {
    const ob_weight *tok_embd;               /* [n_embd, n_vocab] */
    const ob_weight *out_norm;               /* [n_embd] */
    const ob_weight *output;                 /* [n_embd, n_vocab] (tok_embd when absent) */
    ob_gptoss_layer layers[];
} ob_gptoss;

/* The experts' activation: fixed by the model (the GGUF has no key for them). */
#define OB_GPTOSS_SWIGLU_ALPHA 1.702f
#define OB_GPTOSS_SWIGLU_LIMIT 7.0f
/* Experts a file may declare: past every released model (128), far below OB_MOE_MAX_EXPERTS. */
#define OB_GPTOSS_MAX_EXPERTS 4096

static ob_status gptoss_hparams(const ob_gguf *g, ob_hparams *hp, char *err, size_t err_len) {
    ob_status st = ob_hp_load_common(g, hp, err, err_len);
    if (st) return st;
    const char *a = hp->arch;
    hp->rope_mode = 2;                    /* NeoX halves, as HF's rotate_half */
    hp->rope_meta.yarn_exact_range = true; /* OpenAI's YaRN: truncate = false */
    uint32_t v;
    struct { const char *suffix; int *dst; uint32_t hi; } keys[] = {
        {"expert_count", &hp->n_expert, OB_GPTOSS_MAX_EXPERTS},
        {"expert_used_count", &hp->n_expert_used, OB_GPTOSS_MAX_EXPERTS},
        {"expert_feed_forward_length", &hp->n_ff_exp, 1u << 20},
        {"attention.sliding_window", &hp->sliding_window, 1u << 30},
    };
    for (size_t i = 0; i < OB_ARRAY_LEN(keys); i++) {
        if (!ob_hp_u32(g, a, keys[i].suffix, &v))
            return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.%s missing", a, keys[i].suffix);
        if (v == 0 || v > keys[i].hi)
            return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.%s = %u is implausible", a, keys[i].suffix, v);
        *keys[i].dst = (int)v;
    }
    if (hp->n_expert_used > hp->n_expert)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.expert_used_count %d with %s.expert_count %d", a,
                       hp->n_expert_used, a, hp->n_expert);
    /* the first period - 1 layers of each period slide (llama.cpp's set_swa_pattern) */
    uint32_t period = 2;
    char key[160];
    snprintf(key, sizeof(key), "%s.attention.sliding_window_pattern", a);
    if (ob_gguf_find_kv(g, key) && (!ob_gguf_get_u32(g, key, &period) || period == 0 || period > OB_MAX_LAYERS))
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "model: %s must be a layer period in 1..%d", key, OB_MAX_LAYERS);
    for (int il = 0; il < hp->n_layer; il++) hp->layer_swa[il] = (uint32_t)il % period < period - 1;
    /* one RoPE for both kinds of layer, unless the file says otherwise */
    float base_swa;
    if (ob_hp_f32(g, a, "rope.freq_base_swa", &base_swa) && base_swa != hp->rope.base)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "model: %s.rope.freq_base_swa %g differs from rope.freq_base %g",
                       a, base_swa, hp->rope.base);
    return OB_OK;
}

/* The F32 tensors the ops take as they are (graph.h: ADD, ADD_ID, ATTENTION's sinks). */
static bool f32_or_fail(const ob_weight *w, char *err, size_t err_len) {
    if (w->type == OB_TYPE_F32) return true;
    ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "model: tensor '%s' is %s; gpt-oss's biases and sinks must be F32", w->name,
            ob_type_name(w->type));
    return false;
}

static ob_status gptoss_bind(ob_model_view *mv, const ob_hparams *hp, void **priv, char *err, size_t err_len) {
    ob_gptoss *m = calloc(1, sizeof(ob_gptoss) + sizeof(ob_gptoss_layer) * (size_t)hp->n_layer);
    if (!m) return ob_fail(err, err_len, OB_ERR_NOMEM, "model: out of memory");
    *priv = m;
    const int64_t D = hp->n_embd, X = hp->n_expert, F = hp->n_ff_exp;
    const int64_t ne_d[1] = {D}, ne_h[1] = {hp->n_head}, ne_r[2] = {D, X}, ne_x[1] = {X};
    const int64_t ne_up[3] = {D, F, X}, ne_dn[3] = {F, D, X}, ne_fb[2] = {F, X}, ne_db[2] = {D, X};
    ob_status io = ob_bind_io(mv, hp, "output_norm.weight", &m->tok_embd, &m->out_norm, &m->output, err, err_len);
    if (io) return io;
    for (int il = 0; il < hp->n_layer; il++) {
        ob_gptoss_layer *L = &m->layers[il];
        ob_status st = ob_bind_layer_attn(mv, hp, il, &L->attn, false, true, err, err_len);
        if (st) return st;
        char name[96];
#define OB_W(field, suffix, nd, ne) do { \
        snprintf(name, sizeof(name), "blk.%d.%s", il, suffix); \
        if (!(L->field = ob_mv_weight(mv, name, nd, ne, true, err, err_len))) return OB_ERR_FORMAT; } while (0)
        OB_W(attn.bo, "attn_output.bias", 1, ne_d);
        OB_W(attn.sinks, "attn_sinks.weight", 1, ne_h);
        OB_W(ffn_norm, "post_attention_norm.weight", 1, ne_d);
        OB_W(router, "ffn_gate_inp.weight", 2, ne_r);
        OB_W(router_b, "ffn_gate_inp.bias", 1, ne_x);
        OB_W(gate, "ffn_gate_exps.weight", 3, ne_up);
        OB_W(up, "ffn_up_exps.weight", 3, ne_up);
        OB_W(down, "ffn_down_exps.weight", 3, ne_dn);
        OB_W(gate_b, "ffn_gate_exps.bias", 2, ne_fb);
        OB_W(up_b, "ffn_up_exps.bias", 2, ne_fb);
        OB_W(down_b, "ffn_down_exps.bias", 2, ne_db);
#undef OB_W
        const ob_weight *f32[] = {L->attn.bq, L->attn.bk, L->attn.bv, L->attn.bo, L->attn.sinks,
                                  L->router_b, L->gate_b, L->up_b, L->down_b};
        for (size_t i = 0; i < OB_ARRAY_LEN(f32); i++)
            if (!f32_or_fail(f32[i], err, err_len)) return OB_ERR_UNSUPPORTED;
    }
    return OB_OK;
}

/* The mixture of layer il on the normed h [n_embd, T] -> [n_embd, T]. */
static ob_tensor *moe_ffn(ob_graph *g, const ob_hparams *hp, const ob_gptoss_layer *L, ob_tensor *h, int il) {
    ob_tensor *logits = ob_add(g, ob_matmul(g, ob_weight_leaf(g, L->router), h), ob_weight_leaf(g, L->router_b));
    ob_set_name(logits, "blk.%d.ffn_gate_inp", il);
    /* the chosen experts' softmax: the whole softmax renormalised over them */
    ob_tensor *gate = ob_moe_gate(g, logits, NULL, hp->n_expert_used, OB_MOE_SOFTMAX, true, 1.0f);
    ob_set_name(gate, "blk.%d.ffn_moe_gate", il);
    const ob_expert_weights ew = {.gate = L->gate, .up = L->up, .down = L->down, .gate_b = L->gate_b,
                                  .up_b = L->up_b, .down_b = L->down_b,
                                  .oai_alpha = OB_GPTOSS_SWIGLU_ALPHA, .oai_limit = OB_GPTOSS_SWIGLU_LIMIT};
    return ob_build_experts(g, &ew, h, gate, il);
}

static ob_tensor *gptoss_build(ob_graph *g, const ob_hparams *hp, const void *priv, const ob_fwd_inputs *in) {
    const ob_gptoss *m = priv;
    ob_tensor *x = ob_get_rows(g, ob_weight_leaf(g, m->tok_embd), in->tokens);
    ob_set_name(x, "token_embd");
    for (int il = 0; il < hp->n_layer; il++) {
        const ob_gptoss_layer *L = &m->layers[il];
        ob_tensor *h = ob_rms_norm(g, x, ob_weight_leaf(g, L->attn.norm), hp->norm_eps);
        ob_set_name(h, "blk.%d.attn_norm", il);
        const int window = hp->layer_swa[il] ? hp->sliding_window : 0;
        x = ob_add(g, x, ob_build_attn(g, hp, in, il, &L->attn, h, &hp->rope, window));
        h = ob_rms_norm(g, x, ob_weight_leaf(g, L->ffn_norm), hp->norm_eps);
        ob_set_name(h, "blk.%d.post_attention_norm", il);
        x = ob_add(g, x, moe_ffn(g, hp, L, h, il));
    }
    return ob_build_head(g, hp, in, x, m->out_norm, m->output);
}

const ob_arch ob_arch_gptoss = {
    .name = "gpt-oss",
    .load_hparams = gptoss_hparams,
    .bind = gptoss_bind,
    .build = gptoss_build,
    .free_priv = free,
};
