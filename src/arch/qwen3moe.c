/* Qwen3-MoE (qwen3moe: Qwen3-30B-A3B, Qwen3-Coder-30B-A3B): Qwen3's attention block (per-head
 * q/k RMSNorm, NeoX rope) with a mixture-of-experts feed-forward in every layer and no shared
 * expert. The router picks expert_used_count of expert_count experts by softmax, their
 * weights renormalised to sum 1 (llama.cpp runs qwen3moe that way whatever the HF config's
 * norm_topk_prob; `1bit convert` refuses a model with it off); each expert is a SwiGLU of
 * width expert_feed_forward_length. */
#include "arch/arch_common.h"
#include <stdio.h>
#include <stdlib.h>

typedef struct ob_qwen3moe_layer {
    ob_attn_weights attn;
    const ob_weight *ffn_norm;              /* [n_embd] */
    const ob_weight *router;                /* ffn_gate_inp [n_embd, n_expert] */
    const ob_weight *gate, *up;             /* ffn_gate_exps, ffn_up_exps [n_embd, n_ff_exp, n_expert] */
    const ob_weight *down;                  /* ffn_down_exps [n_ff_exp, n_embd, n_expert] */
} ob_qwen3moe_layer;

typedef struct ob_qwen3moe {
    const ob_weight *tok_embd;              /* [n_embd, n_vocab] */
    const ob_weight *out_norm;              /* [n_embd] */
    const ob_weight *output;                /* [n_embd, n_vocab] (tok_embd when tied) */
    ob_qwen3moe_layer layers[];
} ob_qwen3moe;

/* Experts a file may declare: past every released model, far below OB_MOE_MAX_EXPERTS. */
#define OB_QWEN3MOE_MAX_EXPERTS 4096

static ob_status qwen3moe_hparams(const ob_gguf *g, ob_hparams *hp, char *err, size_t err_len) {
    ob_status st = ob_hp_load_common(g, hp, err, err_len);
    if (st) return st;
    hp->rope_mode = 2; /* HF's layout: NeoX halves, as qwen3 */
    return ob_hp_load_experts(g, hp, OB_QWEN3MOE_MAX_EXPERTS, err, err_len);
}

static ob_status qwen3moe_bind(ob_model_view *mv, const ob_hparams *hp, void **priv, char *err, size_t err_len) {
    ob_qwen3moe *m = calloc(1, sizeof(ob_qwen3moe) + sizeof(ob_qwen3moe_layer) * (size_t)hp->n_layer);
    if (!m) return ob_fail(err, err_len, OB_ERR_NOMEM, "model: out of memory");
    *priv = m;
    const int64_t D = hp->n_embd, X = hp->n_expert, F = hp->n_ff_exp;
    const int64_t ne_d[1] = {D}, ne_r[2] = {D, X}, ne_up[3] = {D, F, X}, ne_dn[3] = {F, D, X};
    ob_status io = ob_bind_io(mv, hp, "output_norm.weight", &m->tok_embd, &m->out_norm, &m->output, err, err_len);
    if (io) return io;
    for (int il = 0; il < hp->n_layer; il++) {
        ob_qwen3moe_layer *L = &m->layers[il];
        ob_status st = ob_bind_layer_attn(mv, hp, il, &L->attn, true, false, err, err_len);
        if (st) return st;
        char name[96];
#define OB_W(field, suffix, nd, ne) do { \
        snprintf(name, sizeof(name), "blk.%d.%s", il, suffix); \
        if (!(L->field = ob_mv_weight(mv, name, nd, ne, true, err, err_len))) return OB_ERR_FORMAT; } while (0)
        OB_W(ffn_norm, "ffn_norm.weight", 1, ne_d);
        OB_W(router, "ffn_gate_inp.weight", 2, ne_r);
        OB_W(gate, "ffn_gate_exps.weight", 3, ne_up);
        OB_W(up, "ffn_up_exps.weight", 3, ne_up);
        OB_W(down, "ffn_down_exps.weight", 3, ne_dn);
#undef OB_W
    }
    return OB_OK;
}

/* The MoE feed-forward of layer il on the normed h [n_embd, T] -> [n_embd, T]. */
static ob_tensor *moe_ffn(ob_graph *g, const ob_hparams *hp, const ob_qwen3moe_layer *L, ob_tensor *h, int il) {
    ob_tensor *logits = ob_matmul(g, ob_weight_leaf(g, L->router), h);
    ob_set_name(logits, "blk.%d.ffn_gate_inp", il);
    ob_tensor *gate = ob_moe_gate(g, logits, NULL, hp->n_expert_used, OB_MOE_SOFTMAX, true, 1.0f);
    ob_set_name(gate, "blk.%d.ffn_moe_gate", il);
    const ob_expert_weights ew = {.gate = L->gate, .up = L->up, .down = L->down};
    return ob_build_experts(g, &ew, h, gate, il);
}

static ob_tensor *qwen3moe_build(ob_graph *g, const ob_hparams *hp, const void *priv, const ob_fwd_inputs *in) {
    const ob_qwen3moe *m = priv;
    ob_tensor *x = ob_get_rows(g, ob_weight_leaf(g, m->tok_embd), in->tokens);
    ob_set_name(x, "token_embd");
    for (int il = 0; il < hp->n_layer; il++) {
        const ob_qwen3moe_layer *L = &m->layers[il];
        ob_tensor *h = ob_rms_norm(g, x, ob_weight_leaf(g, L->attn.norm), hp->norm_eps);
        ob_set_name(h, "blk.%d.attn_norm", il);
        x = ob_add(g, x, ob_build_attn(g, hp, in, il, &L->attn, h, &hp->rope, 0));
        h = ob_rms_norm(g, x, ob_weight_leaf(g, L->ffn_norm), hp->norm_eps);
        ob_set_name(h, "blk.%d.ffn_norm", il);
        x = ob_add(g, x, moe_ffn(g, hp, L, h, il));
    }
    return ob_build_head(g, hp, in, x, m->out_norm, m->output);
}

const ob_arch ob_arch_qwen3moe = {
    .name = "qwen3moe",
    .load_hparams = qwen3moe_hparams,
    .bind = qwen3moe_bind,
    .build = qwen3moe_build,
    .free_priv = free,
};
