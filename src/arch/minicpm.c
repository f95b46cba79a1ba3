/* MiniCPM / MiniCPM4 dense (minicpm): Llama's blocks with the muP scalings MiniCPM trains
 * with, as llama.cpp's converter writes them: the token embedding times embedding_scale
 * (HF's scale_emb), each block's attention and feed-forward output times residual_scale
 * (scale_depth / sqrt(n_layer)) before its residual add, and the logits divided by
 * logit_scale (hidden_size / dim_model_base: HF divides the final states, the same product).
 * The converter permutes q/k as Llama's, so rope turns adjacent pairs; LongRoPE's short and
 * long tables when the file has them (MiniCPM4; arch/rope.c). */
#include "arch/arch_common.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct ob_minicpm_layer {
    ob_attn_weights attn;
    ob_ffn_weights ffn;                     /* its norm: ffn_norm */
} ob_minicpm_layer;

typedef struct ob_minicpm {
    const ob_weight *tok_embd;              /* [n_embd, n_vocab] */
    const ob_weight *out_norm;              /* [n_embd] */
    const ob_weight *output;                /* [n_embd, n_vocab] (tok_embd when tied) */
    ob_minicpm_layer layers[];
} ob_minicpm;

static ob_status minicpm_hparams(const ob_gguf *g, ob_hparams *hp, char *err, size_t err_len) {
    ob_status st = ob_hp_load_common(g, hp, err, err_len);
    if (st) return st;
    hp->rope_mode = 0;
    hp->rope_meta.longrope = true;
    struct { const char *suffix; float *dst; } keys[] = {
        {"embedding_scale", &hp->embd_scale},
        {"residual_scale", &hp->residual_scale},
        {"logit_scale", &hp->logit_scale},
    };
    for (size_t i = 0; i < OB_ARRAY_LEN(keys); i++) {
        if (!ob_hp_f32(g, hp->arch, keys[i].suffix, keys[i].dst))
            return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.%s missing", hp->arch, keys[i].suffix);
        if (!isfinite(*keys[i].dst) || *keys[i].dst <= 0)
            return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.%s = %g is implausible", hp->arch, keys[i].suffix,
                           *keys[i].dst);
    }
    return OB_OK;
}

static ob_status minicpm_bind(ob_model_view *mv, const ob_hparams *hp, void **priv, char *err, size_t err_len) {
    ob_minicpm *m = calloc(1, sizeof(ob_minicpm) + sizeof(ob_minicpm_layer) * (size_t)hp->n_layer);
    if (!m) return ob_fail(err, err_len, OB_ERR_NOMEM, "model: out of memory");
    *priv = m;
    ob_status io = ob_bind_io(mv, hp, "output_norm.weight", &m->tok_embd, &m->out_norm, &m->output, err, err_len);
    if (io) return io;
    for (int il = 0; il < hp->n_layer; il++) {
        ob_minicpm_layer *L = &m->layers[il];
        ob_status st = ob_bind_layer_attn(mv, hp, il, &L->attn, false, false, err, err_len);
        if (!st) st = ob_bind_ffn(mv, hp, il, "ffn_norm", &L->ffn, err, err_len);
        if (st) return st;
    }
    return OB_OK;
}

static ob_tensor *minicpm_build(ob_graph *g, const ob_hparams *hp, const void *priv, const ob_fwd_inputs *in) {
    const ob_minicpm *m = priv;
    ob_tensor *x = ob_get_rows(g, ob_weight_leaf(g, m->tok_embd), in->tokens);
    x = ob_scale(g, x, hp->embd_scale);
    ob_set_name(x, "token_embd");
    for (int il = 0; il < hp->n_layer; il++) {
        const ob_minicpm_layer *L = &m->layers[il];
        ob_tensor *h = ob_rms_norm(g, x, ob_weight_leaf(g, L->attn.norm), hp->norm_eps);
        ob_set_name(h, "blk.%d.attn_norm", il);
        ob_tensor *a = ob_build_attn(g, hp, in, il, &L->attn, h, &hp->rope, 0);
        x = ob_add(g, x, ob_scale(g, a, hp->residual_scale));
        h = ob_rms_norm(g, x, ob_weight_leaf(g, L->ffn.norm), hp->norm_eps);
        ob_set_name(h, "blk.%d.ffn_norm", il);
        ob_tensor *f = ob_build_ffn_glu(g, L->ffn.gate, L->ffn.up, L->ffn.down, h, OB_ACT_SILU, il);
        x = ob_add(g, x, ob_scale(g, f, hp->residual_scale));
    }
    ob_tensor *out = ob_build_head(g, hp, in, x, m->out_norm, m->output);
    return in->pooling ? out : ob_scale(g, out, 1.0f / hp->logit_scale);
}

const ob_arch ob_arch_minicpm = {
    .name = "minicpm",
    .load_hparams = minicpm_hparams,
    .bind = minicpm_bind,
    .build = minicpm_build,
    .free_priv = free,
};
