/* Gemma 3: sandwich norms (pre and post around attention and feed-forward), per-head q/k
 * RMSNorm, GeGLU (tanh GELU), embeddings scaled by sqrt(n_embd), and five sliding-window
 * layers (local rope base 10,000) for every global one. llama.cpp's converter stores the
 * norm weights as (1 + w), so every norm here is a plain RMSNorm times the weight. */
#include "arch/arch_common.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define GEMMA3_SWA_PATTERN 6          /* layer il is global when (il + 1) % 6 == 0 */
#define GEMMA3_ROPE_BASE_LOCAL 10000.0f

typedef struct ob_gemma3_layer {
    ob_attn_weights attn;
    const ob_weight *post_attn_norm, *ffn_norm, *post_ffn_norm; /* [n_embd] */
    const ob_weight *gate, *up, *down;
} ob_gemma3_layer;

typedef struct ob_gemma3 {
    const ob_weight *tok_embd, *out_norm, *output;
    ob_gemma3_layer layers[];
} ob_gemma3;

static ob_status gemma3_hparams(const ob_gguf *g, ob_hparams *hp, char *err, size_t err_len) {
    ob_status st = ob_hp_load_common(g, hp, err, err_len);
    if (st) return st;
    hp->rope_mode = 2;
    hp->norm_eps = hp->norm_eps > 0 ? hp->norm_eps : 1e-6f;
    uint32_t w = 0;
    hp->sliding_window = ob_hp_u32(g, hp->arch, "attention.sliding_window", &w) ? (int)w : 0;
    for (int il = 0; il < hp->n_layer; il++)
        hp->layer_swa[il] = hp->sliding_window > 0 && (il + 1) % GEMMA3_SWA_PATTERN != 0;
    hp->rope_base_swa = GEMMA3_ROPE_BASE_LOCAL;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    if (!ob_hp_f32(g, hp->arch, "attn_logit_softcapping", &hp->attn_softcap)) hp->attn_softcap = 0;
    if (ob_hp_f32(g, hp->arch, "final_logit_softcapping", &hp->final_softcap) && hp->final_softcap > 0)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "model: final logit soft-capping is not supported");
    return OB_OK;
}

static ob_status gemma3_bind(ob_model_view *mv, const ob_hparams *hp, void **priv, char *err, size_t err_len) {
    ob_gemma3 *m = calloc(1, sizeof(ob_gemma3) + sizeof(ob_gemma3_layer) * (size_t)hp->n_layer);
    if (!m) return ob_fail(err, err_len, OB_ERR_NOMEM, "model: out of memory");
    *priv = m;
    int64_t E = hp->n_embd, F = hp->n_ff;
    int64_t ne_e[1] = {E}, ne_ef[2] = {E, F}, ne_fe[2] = {F, E};
    ob_status io = ob_bind_io(mv, hp, "output_norm.weight", &m->tok_embd, &m->out_norm, &m->output, err, err_len);
    if (io) return io;
    for (int il = 0; il < hp->n_layer; il++) {
        ob_gemma3_layer *L = &m->layers[il];
        ob_status st = ob_bind_layer_attn(mv, hp, il, &L->attn, true, false, err, err_len);
        if (st) return st;
        struct { const ob_weight **dst; const char *suffix; int nd; const int64_t *ne; } ws[] = {
            {&L->post_attn_norm, "post_attention_norm.weight", 1, ne_e},
            {&L->ffn_norm, "ffn_norm.weight", 1, ne_e},
            {&L->post_ffn_norm, "post_ffw_norm.weight", 1, ne_e},
            {&L->gate, "ffn_gate.weight", 2, ne_ef},
            {&L->up, "ffn_up.weight", 2, ne_ef},
            {&L->down, "ffn_down.weight", 2, ne_fe},
        };
        for (size_t i = 0; i < OB_ARRAY_LEN(ws); i++) {
            char name[96];
            snprintf(name, sizeof(name), "blk.%d.%s", il, ws[i].suffix);
            if (!(*ws[i].dst = ob_mv_weight(mv, name, ws[i].nd, ws[i].ne, true, err, err_len))) return OB_ERR_FORMAT;
        }
    }
    return OB_OK;
}

static ob_tensor *gemma3_build(ob_graph *g, const ob_hparams *hp, const void *priv, const ob_fwd_inputs *in) {
    const ob_gemma3 *m = priv;
    ob_tensor *x = ob_get_rows(g, ob_weight_leaf(g, m->tok_embd), in->tokens);
    x = ob_scale(g, x, hp->embd_scale);
    ob_set_name(x, "token_embd");
    for (int il = 0; il < hp->n_layer; il++) {
        const ob_gemma3_layer *L = &m->layers[il];
        bool swa = hp->layer_swa[il];
        ob_tensor *h = ob_rms_norm(g, x, ob_weight_leaf(g, L->attn.norm), hp->norm_eps);
        ob_set_name(h, "blk.%d.attn_norm", il);
        const ob_rope_cfg local = {hp->rope_base_swa, 1.0f, 1.0f, NULL, NULL, 0};
        ob_tensor *a = ob_build_attn(g, hp, in, il, &L->attn, h, swa ? &local : &hp->rope, swa ? hp->sliding_window : 0);
        a = ob_rms_norm(g, a, ob_weight_leaf(g, L->post_attn_norm), hp->norm_eps);
        x = ob_add(g, x, a);
        h = ob_rms_norm(g, x, ob_weight_leaf(g, L->ffn_norm), hp->norm_eps);
        ob_tensor *f = ob_build_ffn_glu(g, L->gate, L->up, L->down, h, OB_ACT_GELU, il);
        f = ob_rms_norm(g, f, ob_weight_leaf(g, L->post_ffn_norm), hp->norm_eps);
        x = ob_add(g, x, f);
    }
    return ob_build_head(g, hp, in, x, m->out_norm, m->output);
}

const ob_arch ob_arch_gemma3 = {
    .name = "gemma3",
    .load_hparams = gemma3_hparams,
    .bind = gemma3_bind,
    .build = gemma3_build,
    .free_priv = free,
};
