/* Phi-3 / Phi-4-mini (phi3): a pre-norm decoder whose q, k and v come from one fused matrix
 * (attn_qkv, rows q | k | v) and whose feed-forward's gate and up come from another (ffn_up,
 * rows gate | up: HF's gate_up_proj), as llama.cpp's converter writes them. NeoX rope over the
 * first rope.dimension_count elements of a head (Phi-4-mini: three quarters), with LongRoPE's
 * short and long factor tables and rope.scaling.attn_factor when the file has them (arch/rope.c);
 * a sliding window on every layer where attention.sliding_window > 0 (Phi-3-mini; Phi-4-mini
 * writes 0). The output matrix is the embedding when the file has none (Phi-4-mini ties them). */
#include "arch/arch_common.h"
#include <stdio.h>
#include <stdlib.h>

typedef struct ob_phi3_layer {
    ob_attn_weights attn;                   /* norm and wo; no biases, no q/k norms */
    const ob_weight *wqkv;                  /* attn_qkv [n_embd, hd (n_head + 2 n_kv)] */
    const ob_weight *ffn_norm;              /* [n_embd] */
    const ob_weight *up;                    /* ffn_up [n_embd, 2 n_ff]: gate rows, then up rows */
    const ob_weight *down;                  /* [n_ff, n_embd] */
} ob_phi3_layer;

typedef struct ob_phi3 {
    const ob_weight *tok_embd;              /* [n_embd, n_vocab] */
    const ob_weight *out_norm;              /* [n_embd] */
    const ob_weight *output;                /* [n_embd, n_vocab] (tok_embd when tied) */
    ob_phi3_layer layers[];
} ob_phi3;

static ob_status phi3_hparams(const ob_gguf *g, ob_hparams *hp, char *err, size_t err_len) {
    ob_status st = ob_hp_load_common(g, hp, err, err_len);
    if (st) return st;
    hp->rope_mode = 2; /* the converter keeps HF's rotate_half layout */
    hp->rope_meta.longrope = true;
    uint32_t w = 0;
    hp->sliding_window = ob_hp_u32(g, hp->arch, "attention.sliding_window", &w) ? (int)w : 0;
    for (int il = 0; il < hp->n_layer; il++) hp->layer_swa[il] = hp->sliding_window > 0;
    return OB_OK;
}

static ob_status phi3_bind(ob_model_view *mv, const ob_hparams *hp, void **priv, char *err, size_t err_len) {
    ob_phi3 *m = calloc(1, sizeof(ob_phi3) + sizeof(ob_phi3_layer) * (size_t)hp->n_layer);
    if (!m) return ob_fail(err, err_len, OB_ERR_NOMEM, "model: out of memory");
    *priv = m;
    const int64_t E = hp->n_embd, F = hp->n_ff, hd = hp->head_dim;
    const int64_t Dq = hd * hp->n_head, Dkv = hd * hp->n_head_kv;
    ob_status io = ob_bind_io(mv, hp, "output_norm.weight", &m->tok_embd, &m->out_norm, &m->output, err, err_len);
    if (io) return io;
    for (int il = 0; il < hp->n_layer; il++) {
        ob_phi3_layer *L = &m->layers[il];
        const ob_bind_spec w[] = {
            {&L->attn.norm, "attn_norm.weight", 1, {E}, true},
            {&L->wqkv, "attn_qkv.weight", 2, {E, Dq + 2 * Dkv}, false},
            {&L->attn.wo, "attn_output.weight", 2, {Dq, E}, false},
            {&L->ffn_norm, "ffn_norm.weight", 1, {E}, true},
            {&L->up, "ffn_up.weight", 2, {E, 2 * F}, false},
            {&L->down, "ffn_down.weight", 2, {F, E}, false},
        };
        ob_status st = ob_bind_list(mv, il, w, OB_ARRAY_LEN(w), err, err_len);
        if (st) return st;
    }
    return OB_OK;
}

static ob_tensor *phi3_build(ob_graph *g, const ob_hparams *hp, const void *priv, const ob_fwd_inputs *in) {
    const ob_phi3 *m = priv;
    const int64_t T = in->n_tokens, F = hp->n_ff, hd = hp->head_dim;
    const int64_t Dq = hd * hp->n_head, Dkv = hd * hp->n_head_kv;
    const int64_t qs[3] = {hd, hp->n_head, T}, ks[3] = {hd, hp->n_head_kv, T};
    ob_tensor *x = ob_get_rows(g, ob_weight_leaf(g, m->tok_embd), in->tokens);
    ob_set_name(x, "token_embd");
    for (int il = 0; il < hp->n_layer; il++) {
        const ob_phi3_layer *L = &m->layers[il];
        ob_tensor *h = ob_rms_norm(g, x, ob_weight_leaf(g, L->attn.norm), hp->norm_eps);
        ob_set_name(h, "blk.%d.attn_norm", il);
        ob_tensor *qkv = ob_build_mm(g, L->wqkv, h, "attn_qkv", il);
        ob_tensor *q = ob_view(g, ob_slice(g, qkv, 0, Dq), 3, qs);
        ob_tensor *k = ob_view(g, ob_slice(g, qkv, Dq, Dkv), 3, ks);
        ob_tensor *v = ob_slice(g, qkv, Dq + Dkv, Dkv);
        ob_tensor *a = ob_build_attn_qkv(g, hp, in, il, &L->attn, q, k, v, &hp->rope,
                                         hp->layer_swa[il] ? hp->sliding_window : 0);
        x = ob_add(g, x, ob_build_mm(g, L->attn.wo, a, "attn_output", il));
        h = ob_rms_norm(g, x, ob_weight_leaf(g, L->ffn_norm), hp->norm_eps);
        ob_set_name(h, "blk.%d.ffn_norm", il);
        ob_tensor *gu = ob_build_mm(g, L->up, h, "ffn_up", il);
        ob_tensor *a2 = ob_glu(g, ob_slice(g, gu, 0, F), ob_slice(g, gu, F, F), OB_ACT_SILU);
        x = ob_add(g, x, ob_build_mm(g, L->down, a2, "ffn_down", il));
    }
    return ob_build_head(g, hp, in, x, m->out_norm, m->output);
}

const ob_arch ob_arch_phi3 = {
    .name = "phi3",
    .load_hparams = phi3_hparams,
    .bind = phi3_bind,
    .build = phi3_build,
    .free_priv = free,
};
