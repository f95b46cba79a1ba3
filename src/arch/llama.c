/* The llama family: Llama 3 (llama), Qwen2 (qkv biases), Qwen3 (per-head q/k RMSNorm),
 * SmolLM3 (smollm3: no rope in every fourth layer).
 * Pre-norm blocks: x += attn(norm(x)); x += ffn(norm(x)); SwiGLU feed-forward. */
#include "arch/arch_common.h"
#include <stdio.h>
#include <stdlib.h>

/* SmolLM3 leaves layer il unroped where (il + 1) % 4 == 0: llama.cpp's fixed step (no GGUF key
 * carries it; HF's no_rope_layer_interval defaults to it and the releases keep it). */
#define SMOLLM3_NO_ROPE_STEP 4

typedef struct ob_llama_layer {
    ob_attn_weights attn;
    const ob_weight *ffn_norm;              /* [n_embd] */
    const ob_weight *gate, *up, *down;      /* [n_embd, n_ff] x2, [n_ff, n_embd] */
} ob_llama_layer;

typedef struct ob_llama {
    const ob_weight *tok_embd;              /* [n_embd, n_vocab] */
    const ob_weight *out_norm;              /* [n_embd] */
    const ob_weight *output;                /* [n_embd, n_vocab] (tok_embd when tied) */
    int no_rope_step;                       /* 0, or SmolLM3's step of unroped layers */
    ob_llama_layer layers[];
} ob_llama;

static ob_status llama_hparams(const ob_gguf *g, ob_hparams *hp, char *err, size_t err_len) {
    ob_status st = ob_hp_load_common(g, hp, err, err_len);
    if (st) return st;
    /* llama.cpp's converter permutes Llama's q/k rows so rope rotates adjacent pairs;
     * (SmolLM3's converter is Llama's); the Qwen families keep HF's layout and rotate halves
     * (NeoX). */
    hp->rope_mode = strcmp(hp->arch, "llama") && strcmp(hp->arch, "smollm3") ? 2 : 0;
    uint32_t pt;
    if (ob_hp_u32(g, hp->arch, "pooling_type", &pt) && pt <= OB_POOLING_LAST) hp->pooling_type = (int)pt;
    return OB_OK;
}

static ob_status llama_bind(ob_model_view *mv, const ob_hparams *hp, void **priv, char *err, size_t err_len) {
    ob_llama *m = calloc(1, sizeof(ob_llama) + sizeof(ob_llama_layer) * (size_t)hp->n_layer);
    if (!m) return ob_fail(err, err_len, OB_ERR_NOMEM, "model: out of memory");
    *priv = m;
    int64_t E = hp->n_embd, F = hp->n_ff, ne_e[1] = {E};
    ob_status io = ob_bind_io(mv, hp, "output_norm.weight", &m->tok_embd, &m->out_norm, &m->output, err, err_len);
    if (io) return io;
    bool qk_norm = !strcmp(hp->arch, "qwen3"), bias = !strcmp(hp->arch, "qwen2");
    m->no_rope_step = !strcmp(hp->arch, "smollm3") ? SMOLLM3_NO_ROPE_STEP : 0;
    for (int il = 0; il < hp->n_layer; il++) {
        ob_llama_layer *L = &m->layers[il];
        ob_status st = ob_bind_layer_attn(mv, hp, il, &L->attn, qk_norm, bias, err, err_len);
        if (st) return st;
        char name[96];
        int64_t ne_ef[2] = {E, F}, ne_fe[2] = {F, E};
        snprintf(name, sizeof(name), "blk.%d.ffn_norm.weight", il);
        if (!(L->ffn_norm = ob_mv_weight(mv, name, 1, ne_e, true, err, err_len))) return OB_ERR_FORMAT;
        snprintf(name, sizeof(name), "blk.%d.ffn_gate.weight", il);
        if (!(L->gate = ob_mv_weight(mv, name, 2, ne_ef, true, err, err_len))) return OB_ERR_FORMAT;
        snprintf(name, sizeof(name), "blk.%d.ffn_up.weight", il);
        if (!(L->up = ob_mv_weight(mv, name, 2, ne_ef, true, err, err_len))) return OB_ERR_FORMAT;
        snprintf(name, sizeof(name), "blk.%d.ffn_down.weight", il);
        if (!(L->down = ob_mv_weight(mv, name, 2, ne_fe, true, err, err_len))) return OB_ERR_FORMAT;
    }
    return OB_OK;
}

static ob_tensor *llama_build(ob_graph *g, const ob_hparams *hp, const void *priv, const ob_fwd_inputs *in) {
    const ob_llama *m = priv;
    ob_tensor *x = ob_get_rows(g, ob_weight_leaf(g, m->tok_embd), in->tokens);
    ob_set_name(x, "token_embd");
    for (int il = 0; il < hp->n_layer; il++) {
        const ob_llama_layer *L = &m->layers[il];
        ob_tensor *h = ob_rms_norm(g, x, ob_weight_leaf(g, L->attn.norm), hp->norm_eps);
        ob_set_name(h, "blk.%d.attn_norm", il);
        bool rope = !m->no_rope_step || (il + 1) % m->no_rope_step != 0;
        ob_tensor *a = ob_build_attn(g, hp, in, il, &L->attn, h, rope ? &hp->rope : NULL, 0);
        x = ob_add(g, x, a);
        h = ob_rms_norm(g, x, ob_weight_leaf(g, L->ffn_norm), hp->norm_eps);
        ob_set_name(h, "blk.%d.ffn_norm", il);
        x = ob_add(g, x, ob_build_ffn_glu(g, L->gate, L->up, L->down, h, OB_ACT_SILU, il));
    }
    return ob_build_head(g, hp, in, x, m->out_norm, m->output);
}

const ob_arch ob_arch_llama = {
    .name = "llama",
    .load_hparams = llama_hparams,
    .bind = llama_bind,
    .build = llama_build,
    .free_priv = free,
};
