/* LFM2 / LFM2.5 dense (lfm2): short gated convolution layers and GQA attention layers, each
 * followed by a SwiGLU feed-forward. The file tells them apart by attention.head_count_kv, an
 * array with 0 for each convolution layer (llama.cpp's converter writes it so).
 *
 * A convolution layer: shortconv.in_proj gives B, C and x (n_embd each); B * x goes through a
 * depthwise causal conv of shortconv.l_cache taps (SSM_CONV, no activation), times C, then
 * shortconv.out_proj. An attention layer: per-head q/k RMSNorm, NeoX rope, attention,
 * attn_output. The final RMSNorm is the file's token_embd_norm (HF's embedding_norm, applied
 * after the last layer despite its name); the output matrix is the embedding when tied. */
#include "arch/arch_common.h"
#include <stdio.h>
#include <stdlib.h>

typedef struct ob_lfm2_layer {
    ob_attn_weights attn;                   /* attention layers; attn.norm is every layer's operator norm */
    const ob_weight *in_proj;               /* shortconv.in_proj [n_embd, 3 n_embd] */
    const ob_weight *conv;                  /* shortconv.conv [l_cache, n_embd] */
    const ob_weight *out_proj;              /* shortconv.out_proj [n_embd, n_embd] */
    ob_ffn_weights ffn;                     /* its norm: ffn_norm */
} ob_lfm2_layer;

typedef struct ob_lfm2 {
    const ob_weight *tok_embd;              /* [n_embd, n_vocab] */
    const ob_weight *out_norm;              /* token_embd_norm [n_embd] */
    const ob_weight *output;                /* [n_embd, n_vocab] (tok_embd when tied) */
    ob_lfm2_layer layers[];
} ob_lfm2;

static ob_status lfm2_hparams(const ob_gguf *g, ob_hparams *hp, char *err, size_t err_len) {
    ob_status st = ob_hp_load_common(g, hp, err, err_len);
    if (st) return st;
    const char *a = hp->arch;
    hp->rope_mode = 2; /* HF's rotate_half: NeoX halves */
    uint32_t v;
    if (!ob_hp_u32(g, a, "shortconv.l_cache", &v))
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.shortconv.l_cache missing", a);
    if (v < 2 || v > 64)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.shortconv.l_cache = %u is implausible", a, v);
    hp->ssm_d_conv = (int)v;
    /* a variant whose attention slides (llama.cpp builds LFM2 with an SWA cache when the file
     * says so) would run as full attention here: refused until its layers' windows are read */
    if (ob_hp_u32(g, a, "attention.sliding_window", &v) && v > 0)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "model: %s.attention.sliding_window = %u: sliding-window LFM2 is not "
                       "supported yet", a, v);
    /* head_count_kv per layer: 0 marks a convolution layer; the attention layers' must agree */
    char key[96];
    snprintf(key, sizeof(key), "%s.attention.head_count_kv", a);
    const ob_gguf_kv *kv = ob_gguf_find_kv(g, key);
    if (kv && kv->type == OB_GGUF_ARRAY) {
        if (kv->n != (uint64_t)hp->n_layer)
            return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s has %llu entries, not %d (%s.block_count)", key,
                           (unsigned long long)kv->n, hp->n_layer, a);
        int n_kv = 0;
        for (int il = 0; il < hp->n_layer; il++) {
            int64_t h;
            if (!ob_gguf_arr_i64(kv, (uint64_t)il, &h) || h < 0 || h > hp->n_head || (h && hp->n_head % h) ||
                (h && n_kv && h != n_kv))
                return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s[%d] = %lld does not fit %d heads%s", key, il,
                               (long long)h, hp->n_head, n_kv ? " and the other attention layers" : "");
            hp->layer_rec[il] = h == 0;
            if (h) n_kv = (int)h;
        }
        hp->n_head_kv = n_kv ? n_kv : hp->n_head;
    }
    hp->rec_conv = (int64_t)(hp->ssm_d_conv - 1) * hp->n_embd;
    hp->rec_ssm = 0;
    return OB_OK;
}

static ob_status bind_conv_layer(ob_model_view *mv, const ob_hparams *hp, int il, ob_lfm2_layer *L, char *err,
                                 size_t err_len) {
    const int64_t E = hp->n_embd;
    const ob_bind_spec w[] = {
        {&L->attn.norm, "attn_norm.weight", 1, {E}, true},
        {&L->in_proj, "shortconv.in_proj.weight", 2, {E, 3 * E}, false},
        {&L->conv, "shortconv.conv.weight", 2, {hp->ssm_d_conv, E}, true},
        {&L->out_proj, "shortconv.out_proj.weight", 2, {E, E}, false},
    };
    return ob_bind_list(mv, il, w, OB_ARRAY_LEN(w), err, err_len);
}

static ob_status lfm2_bind(ob_model_view *mv, const ob_hparams *hp, void **priv, char *err, size_t err_len) {
    ob_lfm2 *m = calloc(1, sizeof(ob_lfm2) + sizeof(ob_lfm2_layer) * (size_t)hp->n_layer);
    if (!m) return ob_fail(err, err_len, OB_ERR_NOMEM, "model: out of memory");
    *priv = m;
    ob_status io = ob_bind_io(mv, hp, "token_embd_norm.weight", &m->tok_embd, &m->out_norm, &m->output, err, err_len);
    if (io) return io;
    for (int il = 0; il < hp->n_layer; il++) {
        ob_lfm2_layer *L = &m->layers[il];
        ob_status st = hp->layer_rec[il] ? bind_conv_layer(mv, hp, il, L, err, err_len)
                                         : ob_bind_layer_attn(mv, hp, il, &L->attn, true, false, err, err_len);
        if (!st) st = ob_bind_ffn(mv, hp, il, "ffn_norm", &L->ffn, err, err_len);
        if (st) return st;
    }
    return OB_OK;
}

/* The short gated convolution on the normed h [n_embd, T] -> [n_embd, T]. */
static ob_tensor *conv_block(ob_graph *g, const ob_hparams *hp, const ob_fwd_inputs *in, const ob_lfm2_layer *L,
                             ob_tensor *h, int il) {
    const int64_t E = hp->n_embd;
    ob_tensor *bcx = ob_matmul(g, ob_weight_leaf(g, L->in_proj), h);
    ob_set_name(bcx, "blk.%d.shortconv.in_proj", il);
    ob_tensor *b = ob_slice(g, bcx, 0, E), *c = ob_slice(g, bcx, E, E), *x = ob_slice(g, bcx, 2 * E, E);
    ob_tensor *y = ob_ssm_conv(g, ob_mul(g, b, x), ob_weight_leaf(g, L->conv), in->conv_state[il], in->pos, in->seq, false);
    ob_set_name(y, "blk.%d.shortconv.conv", il);
    y = ob_matmul(g, ob_weight_leaf(g, L->out_proj), ob_mul(g, c, y));
    ob_set_name(y, "blk.%d.shortconv.out_proj", il);
    return y;
}

static ob_tensor *lfm2_build(ob_graph *g, const ob_hparams *hp, const void *priv, const ob_fwd_inputs *in) {
    const ob_lfm2 *m = priv;
    ob_tensor *x = ob_get_rows(g, ob_weight_leaf(g, m->tok_embd), in->tokens);
    ob_set_name(x, "token_embd");
    for (int il = 0; il < hp->n_layer; il++) {
        const ob_lfm2_layer *L = &m->layers[il];
        ob_tensor *h = ob_rms_norm(g, x, ob_weight_leaf(g, L->attn.norm), hp->norm_eps);
        ob_set_name(h, "blk.%d.attn_norm", il);
        x = ob_add(g, x, hp->layer_rec[il] ? conv_block(g, hp, in, L, h, il)
                                           : ob_build_attn(g, hp, in, il, &L->attn, h, &hp->rope, 0));
        h = ob_rms_norm(g, x, ob_weight_leaf(g, L->ffn.norm), hp->norm_eps);
        ob_set_name(h, "blk.%d.ffn_norm", il);
        x = ob_add(g, x, ob_build_ffn_glu(g, L->ffn.gate, L->ffn.up, L->ffn.down, h, OB_ACT_SILU, il));
    }
    return ob_build_head(g, hp, in, x, m->out_norm, m->output);
}

const ob_arch ob_arch_lfm2 = {
    .name = "lfm2",
    .load_hparams = lfm2_hparams,
    .bind = lfm2_bind,
    .build = lfm2_build,
    .free_priv = free,
};
