/* Shared pieces of the decoder families (see common.c). */
#ifndef OB_ARCH_ARCH_COMMON_H
#define OB_ARCH_ARCH_COMMON_H
#include "arch/arch.h"

typedef struct ob_attn_weights {
    const ob_weight *norm;                 /* [n_embd] */
    const ob_weight *wq, *wk, *wv, *wo;    /* [n_embd, hd*n_head], [n_embd, hd*n_kv] x2, [hd*n_head, n_embd] */
    const ob_weight *bq, *bk, *bv, *bo;    /* optional biases (Qwen2) */
    const ob_weight *q_norm, *k_norm;      /* optional per-head RMSNorm [hd] (Qwen3, Gemma 3) */
    const ob_weight *sinks;                /* optional attention sinks F32 [n_head] (gpt-oss; bound by the family) */
} ob_attn_weights;

/* The keys every decoder has, and the head sizes (attention.key_length = value_length,
 * rope.dimension_count) with attn_scale 1/sqrt(head_dim). ob_hp_load_base reads the first
 * part alone, for families whose heads differ (deepseek2's MLA). */
ob_status ob_hp_load_common(const ob_gguf *g, ob_hparams *hp, char *err, size_t err_len);
ob_status ob_hp_load_base(const ob_gguf *g, ob_hparams *hp, char *err, size_t err_len);
/* A mixture's keys, all required: expert_count (at most max_expert), expert_used_count (at
 * most expert_count) and expert_feed_forward_length. */
ob_status ob_hp_load_experts(const ob_gguf *g, ob_hparams *hp, int max_expert, char *err, size_t err_len);
ob_status ob_bind_layer_attn(ob_model_view *mv, const ob_hparams *hp, int il, ob_attn_weights *w,
                             bool want_qk_norm, bool want_bias, char *err, size_t err_len);
/* Projections, per-head norms, rope, KV store and attention of layer il; h is the
 * normed input [n_embd, T]. Returns the output projection [n_embd, T]. rope NULL: a layer
 * without rope (SmolLM3's every fourth). */
ob_tensor *ob_build_attn(ob_graph *g, const ob_hparams *hp, const ob_fwd_inputs *in, int il,
                         const ob_attn_weights *w, ob_tensor *h, const ob_rope_cfg *rope, int window);
/* The same from projected q [hd, n_head, T], k [hd, n_kv, T], v [hd * n_kv, T]: per-head
 * norms, rope, KV store and attention; returns the attention output [hd * n_head, T] before
 * the output projection. */
ob_tensor *ob_build_attn_qkv(ob_graph *g, const ob_hparams *hp, const ob_fwd_inputs *in, int il,
                             const ob_attn_weights *w, ob_tensor *q, ob_tensor *k, ob_tensor *v, const ob_rope_cfg *rope,
                             int window);
/* Gated attention (Qwen3.5, Qwen3-Next): attn_q [n_embd, 2 hd n_head] gives each head's
 * query then its output gate; q/k norms required, no biases. */
ob_status ob_bind_layer_attn_gated(ob_model_view *mv, const ob_hparams *hp, int il, ob_attn_weights *w, char *err,
                                   size_t err_len);

/* A SwiGLU feed-forward and the norm before it. */
typedef struct ob_ffn_weights {
    const ob_weight *norm;                 /* [n_embd] */
    const ob_weight *gate, *up, *down;     /* [n_embd, n_ff] x2, [n_ff, n_embd] */
} ob_ffn_weights;
/* Binds blk.il.<norm>.weight and blk.il.ffn_{gate,up,down}.weight. */
/* The ends every decoder binds alike: token_embd [n_embd, n_vocab], the final norm [n_embd]
 * (norm: its tensor name; output_norm.weight, LFM2's token_embd_norm.weight) and output
 * [n_embd, n_vocab], which is token_embd where the file has none (tied). */
ob_status ob_bind_io(ob_model_view *mv, const ob_hparams *hp, const char *norm, const ob_weight **tok_embd,
                     const ob_weight **out_norm, const ob_weight **output, char *err, size_t err_len);
ob_status ob_bind_ffn(ob_model_view *mv, const ob_hparams *hp, int il, const char *norm, ob_ffn_weights *w, char *err,
                      size_t err_len);
/* down(act(gate h) * up h) of the normed h [n_embd, T], named blk.il.ffn_{gate,up,down}. */
ob_tensor *ob_build_ffn_glu(ob_graph *g, const ob_weight *gate, const ob_weight *up, const ob_weight *down, ob_tensor *h,
                            ob_act act, int il);
/* A required tensor blk.il.<suffix> of nd (at most 3) dimensions ne; f32: its type must be F32 (an op
 * reads it as floats: conv taps, norms, small vectors). */
typedef struct ob_bind_spec {
    const ob_weight **dst;
    const char *suffix;
    int nd;
    int64_t ne[3];
    bool f32;
} ob_bind_spec;
/* Binds each of w[0 .. n), refusing a missing, mis-shaped or (f32) non-F32 one by name. */
ob_status ob_bind_list(ob_model_view *mv, int il, const ob_bind_spec *w, size_t n, char *err, size_t err_len);
/* Reads blk.il.<name> for each name, of any shape, where the file has it: tensors a family
 * keeps and does not run (multi-token-prediction layers). */
ob_status ob_bind_unused(ob_model_view *mv, int il, const char *const *names, size_t n, char *err, size_t err_len);

/* w x, named blk.il.nm. */
ob_tensor *ob_build_mm(ob_graph *g, const ob_weight *w, ob_tensor *x, const char *nm, int il);

/* A decoder's end on the final states x [n_embd, T]: pooled, normed states for an
 * embeddings context; otherwise the rows asked for, the RMSNorm and the "output" logits. */
ob_tensor *ob_build_head(ob_graph *g, const ob_hparams *hp, const ob_fwd_inputs *in, ob_tensor *x,
                         const ob_weight *out_norm, const ob_weight *output);

/* The routed experts of a MoE layer: gate/up/down stacked [.., n_expert], optional per-expert
 * biases (gpt-oss), and the GLU between them: SiLU, or gpt-oss's clamped SwiGLU
 * (OB_GLU_SWIGLU_OAI) when oai_limit > 0. */
typedef struct ob_expert_weights {
    const ob_weight *gate, *up, *down;
    const ob_weight *gate_b, *up_b, *down_b;
    float oai_alpha, oai_limit;
} ob_expert_weights;
/* h [n_embd, T] through the experts chosen in gate (MOE_GATE's output) -> their weighted
 * sum [n_embd, T], named blk.il.ffn_{gate,up,down}_exps and ffn_moe_out. */
ob_tensor *ob_build_experts(ob_graph *g, const ob_expert_weights *w, ob_tensor *h, ob_tensor *gate, int il);
#endif
