/* Architectures: each family file turns GGUF metadata into hyperparameters, binds its
 * weights by llama.cpp's tensor names, and builds the graph of one forward pass. */
#ifndef OB_ARCH_ARCH_H
#define OB_ARCH_ARCH_H

#include "graph/graph.h"
#include "format/gguf.h"

#define OB_MAX_LAYERS 256

typedef struct ob_weight ob_weight;

/* RoPE of a group of layers, as the ROPE op takes it (graph.h), resolved from the file and
 * the run-time overrides by ob_rope_resolve (arch/rope.c). */
typedef struct ob_rope_cfg {
    float base, freq_scale, mscale;
    const ob_weight *factors; /* NULL or F32 [n_rot/2]: pair i's angle is divided by it */
    /* LongRoPE (phi3, minicpm): factors is the short table, this the long one, taken where a
     * sequence's context passes n_ctx_orig (as llama.cpp chooses; ob_rope_factors) */
    const ob_weight *factors_long;
    int n_ctx_orig;
} ob_rope_cfg;

/* RoPE scaling as the file carries it (<arch>.rope.scaling.* keys). */
typedef struct ob_rope_meta {
    int type;                 /* ob_rope_scaling (linear when the key is absent, as llama.cpp) */
    float factor;             /* rope.scaling.factor; 0: none */
    int n_ctx_orig;           /* rope.scaling.original_context_length; 0: absent */
    float ext_factor, yarn_attn_factor, beta_fast, beta_slow; /* yarn_* keys; < 0: absent */
    float log_mul;            /* yarn_log_multiplier; 0: absent */
    float attn_factor;        /* rope.scaling.attn_factor; 1 when absent */
    bool yarn_exact_range;    /* YaRN's correction range kept fractional, as transformers' truncate
                                 = false (gpt-oss: set by the family, no key says it); else
                                 floored and ceiled, as llama.cpp always does */
    bool longrope;            /* the family reads rope_factors_long / _short (set by it) */
} ob_rope_meta;

typedef struct ob_hparams {
    char arch[32];           /* general.architecture */
    int n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx_train;
    int n_ctx_limit;                  /* trained context, or what run-time RoPE scaling reaches */
    float norm_eps;
    ob_rope_cfg rope;                 /* global layers */
    ob_rope_meta rope_meta;           /* the file's scaling keys, before overrides */
    float rope_base_swa;              /* sliding-window layers (Gemma 3: no scaling) */
    int rope_mode;                    /* 0 adjacent pairs (llama), 2 NeoX halves */
    int n_rot;
    int sliding_window;               /* 0: none */
    bool layer_swa[OB_MAX_LAYERS];    /* layer uses the sliding window */
    float attn_scale;                 /* multiplies q.k */
    float attn_softcap, final_softcap;/* 0: none */
    float embd_scale;                 /* multiplies the token embedding (Gemma: sqrt(n_embd)) */
    float residual_scale, logit_scale;/* minicpm: multiplies each block's output before its
                                         residual add; divides the logits (1: none) */
    bool tied_output;
    int pooling_type;                 /* <arch>.pooling_type (ob_pooling); 0: none */
    bool encoder;                     /* no LM head: only embeddings / rank scores */
    int n_cls_out;                    /* outputs of a rank (classification) head; 0: none */
    float alibi_max_bias;             /* ALiBi attention (jina-bert-v2); 0: none */
    /* Mixture of experts (<arch>.expert_count, expert_used_count, expert_feed_forward_length);
     * 0 for dense families. */
    int n_expert, n_expert_used, n_ff_exp;
    int n_ff_shexp;                   /* qwen35moe's gated shared expert (expert_shared_feed_forward_length) */
    /* deepseek2's mixture: leading dense layers, shared experts (a plain FFN of n_ff_exp *
     * n_expert_shared beside the routed ones), the router (expert_gating_func as the file
     * has it: 0 absent, 1 softmax, 2 sigmoid; weights renormalised, scaled), group-limited
     * routing (0: none) */
    int n_layer_dense, n_expert_shared, expert_gating, n_expert_group, n_expert_group_used;
    bool expert_norm;
    float expert_scale;
    /* Multi-head latent attention (deepseek2): the compressed q's rank (0: a plain attn_q)
     * and kv's, a head's key (nope + rope) and value widths, and layers past n_layer that the
     * file holds for multi-token prediction (read, not run). The cache keeps one latent row
     * (kv_lora_rank + n_rot) a token; v_in_k: no V cache, the values are the first
     * kv_lora_rank elements of the K rows. */
    int q_lora_rank, kv_lora_rank, head_dim_k_mla, head_dim_v_mla, n_layer_nextn;
    bool v_in_k;
    /* YaRN's stretch (1 / its frequency scale, after the run-time overrides; 1 without YaRN),
     * set by ob_rope_resolve: MLA scales its softmax by it (arch/deepseek2.c) */
    float yarn_factor;
    /* Recurrent layers (hybrid families, issue #33: qwen35, lfm2): layer_rec[il] keeps a state
     * per sequence instead of a KV cache: rec_conv floats of SSM_CONV state (d_conv - 1 inputs
     * of its channels) and rec_ssm floats of DELTA_NET state (0: none). The ssm_* sizes are
     * llama.cpp's keys: ssm_d_conv taps; for the delta rule ssm_d_state the key head size,
     * ssm_n_group the query/key heads, ssm_dt_rank the value heads, ssm_d_inner their width. */
    bool layer_rec[OB_MAX_LAYERS];
    int64_t rec_conv, rec_ssm;
    int ssm_d_conv, ssm_d_state, ssm_n_group, ssm_dt_rank, ssm_d_inner;
} ob_hparams;

/* One weight tensor of the model, in backend memory. */
struct ob_weight {
    const char *name;        /* borrowed from the GGUF reader */
    ob_type type;
    int n_dims;
    int64_t ne[4];
    void *data;
};

typedef struct ob_model_view ob_model_view;

/* Inputs of one forward pass, as graph leaves. */
typedef struct ob_fwd_inputs {
    ob_tensor *tokens;       /* I32 [T] */
    ob_tensor *pos;          /* I32 [T] */
    ob_tensor *seq;          /* I32 [T] */
    ob_tensor *out_ids;      /* I32 [n_out]: rows of the batch whose logits are wanted */
    ob_tensor *k_cache[OB_MAX_LAYERS], *v_cache[OB_MAX_LAYERS]; /* [hd*n_kv, cells]; NULL: a recurrent layer */
    /* recurrent layers' state: F32 [rec_conv, n_seq] and [rec_ssm, n_seq] (NULL elsewhere) */
    ob_tensor *conv_state[OB_MAX_LAYERS], *ssm_state[OB_MAX_LAYERS];
    int cells_per_seq;
    int n_tokens, n_out;
    /* Embeddings (pooling > 0, an ob_pooling value, or OB_ARCH_POOL_TOKENS): build returns
     * the pooled output F32 [n, n_seq] (n = n_embd, or n_cls_out for RANK), or the final
     * states F32 [n_embd, T] for OB_ARCH_POOL_TOKENS, instead of logits; out_ids unused. */
    int pooling;
    bool normalize;
    int n_seq;
} ob_fwd_inputs;

typedef struct ob_arch {
    const char *name;        /* family name, for messages */
    ob_status (*load_hparams)(const ob_gguf *g, ob_hparams *hp, char *err, size_t err_len);
    /* Looks up and shape-checks every weight; stores family-private pointers in *priv. */
    ob_status (*bind)(ob_model_view *mv, const ob_hparams *hp, void **priv, char *err, size_t err_len);
    /* Builds one forward pass; returns the logits node F32 [n_vocab, n_out] (or the pooled
     * node, see ob_fwd_inputs.pooling; NULL if the family cannot pool that way). */
    ob_tensor *(*build)(ob_graph *g, const ob_hparams *hp, const void *priv, const ob_fwd_inputs *in);
    void (*free_priv)(void *priv);
} ob_arch;

/* Maps general.architecture to a family; NULL if unknown. */
const ob_arch *ob_arch_find(const char *arch_name);
/* Comma-separated list of supported architecture names, for messages. */
const char *ob_arch_supported_list(void);

/* For family files: finds a weight by name and checks its shape (ne_expected entries of
 * -1 match anything). Returns NULL and writes err if missing (when required) or mis-shaped. */
const ob_weight *ob_mv_weight(ob_model_view *mv, const char *name, int n_dims, const int64_t *ne_expected,
                              bool required, char *err, size_t err_len);
/* A weight the file does not hold, made from host floats (F32 [n]) and uploaded; owned by
 * the model. NULL (err written) on failure. */
const ob_weight *ob_mv_new_weight(ob_model_view *mv, const char *name, const float *data, int64_t n, char *err,
                                  size_t err_len);
/* The same with n_dims dimensions ne (F32, their product floats). */
const ob_weight *ob_mv_new_weight_nd(ob_model_view *mv, const char *name, const float *data, int n_dims,
                                     const int64_t *ne, char *err, size_t err_len);
/* The file's bytes of a weight (host memory), for weights the host reads at load. */
const void *ob_mv_host_data(ob_model_view *mv, const ob_weight *w);
/* True once a weight lookup found a tensor with the wrong shape or type. */
bool ob_mv_failed(const ob_model_view *mv);
/* Leaf node for a weight. */
ob_tensor *ob_weight_leaf(ob_graph *g, const ob_weight *w);

/* Shared GGUF metadata helpers: "<arch>.<suffix>". */
bool ob_hp_u32(const ob_gguf *g, const char *arch, const char *suffix, uint32_t *out);
bool ob_hp_f32(const ob_gguf *g, const char *arch, const char *suffix, float *out);

/* Families. */
extern const ob_arch ob_arch_llama;  /* llama, qwen2, qwen3, smollm3 */
extern const ob_arch ob_arch_gemma3;
extern const ob_arch ob_arch_bert;   /* bert, nomic-bert, jina-bert-v2, xlm-roberta (encoders) */
extern const ob_arch ob_arch_qwen3moe;
extern const ob_arch ob_arch_gptoss;    /* gpt-oss: sliding/full attention with sinks, MoE with biases */
extern const ob_arch ob_arch_deepseek2; /* deepseek2: DeepSeek-V2/V3, GLM-4.7-Flash (MLA + MoE) */
extern const ob_arch ob_arch_qwen35;    /* qwen35: Qwen3.5 / 3.6 dense (Gated DeltaNet + gated attention) */
extern const ob_arch ob_arch_qwen35moe; /* qwen35moe: Qwen3.5 / 3.6 MoE (qwen35 with routed + gated shared experts) */
extern const ob_arch ob_arch_lfm2;      /* lfm2: LFM2 / LFM2.5 dense (short convolutions + attention) */
extern const ob_arch ob_arch_phi3;      /* phi3: Phi-3 / Phi-4-mini (fused qkv and gate/up, LongRoPE) */
extern const ob_arch ob_arch_minicpm;   /* minicpm: MiniCPM / MiniCPM4 dense (scaled embeddings, residuals, logits) */

/* RoPE (arch/rope.c). ob_rope_meta_load reads the file's scaling keys and refuses a type
 * it cannot run, naming it. ob_rope_resolve, after the family's bind, applies the
 * run-time overrides of p and sets hp->rope: base, freq_scale, the frequency factors
 * (rope_freqs.weight, and YaRN's per-pair ramp folded in) and mscale. */
ob_status ob_rope_meta_load(const ob_gguf *g, const char *arch, ob_rope_meta *m, char *err, size_t err_len);
ob_status ob_rope_resolve(ob_model_view *mv, ob_hparams *hp, const ob_model_params *p, char *err, size_t err_len);
/* The factor table a pass takes: LongRoPE's long one where a sequence holds more cells than
 * the original context, else r->factors (NULL: none). */
const ob_weight *ob_rope_factors(const ob_rope_cfg *r, int cells_per_seq);

/* ob_fwd_inputs.pooling asking for every token's final state (ob_pooling NONE asked of an
 * embeddings context; 0 there means logits). */
#define OB_ARCH_POOL_TOKENS 100

/* Pools the final hidden states x [n_embd, T] per in->pooling (MEAN/CLS/LAST, or x itself
 * for OB_ARCH_POOL_TOKENS): for every family's embedding mode. NULL for other types. */
ob_tensor *ob_arch_pool(ob_graph *g, const ob_fwd_inputs *in, ob_tensor *x);

#endif
