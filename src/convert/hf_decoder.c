/* Hugging Face decoders -> GGUF: LlamaForCausalLM (q/k rows reordered for rope on adjacent
 * pairs, as llama.cpp's converter does), Qwen2ForCausalLM (qkv biases), Qwen3ForCausalLM
 * (per-head q/k norms), Qwen3Model (Qwen3-Embedding: no LM head, last-token pooling),
 * Qwen3MoeForCausalLM (per-expert matrices stacked into 3-D tensors) and the deepseek2 family
 * (DeepseekV2/V3ForCausalLM, Glm4MoeLiteForCausalLM: MLA's kv_b split per head into attn_k_b,
 * transposed, and attn_v_b; shared experts; leading dense layers; multi-token-prediction
 * layers left out, as llama.cpp's --no-mtp). */
#include "convert/convert.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct { const char *hf, *arch; bool embed; } g_dec[] = {
    {"LlamaForCausalLM", "llama", false},
    {"Qwen2ForCausalLM", "qwen2", false},
    {"Qwen3ForCausalLM", "qwen3", false},
    {"Qwen3Model", "qwen3", true},
    {"Qwen3MoeForCausalLM", "qwen3moe", false},
    {"DeepseekV2ForCausalLM", "deepseek2", false},
    {"DeepseekV3ForCausalLM", "deepseek2", false},
    {"Glm4MoeLiteForCausalLM", "deepseek2", false},
};

static const struct { const char *hf, *gg; } g_layer[] = {
    {"input_layernorm", "attn_norm"}, {"self_attn.q_proj", "attn_q"}, {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"}, {"self_attn.o_proj", "attn_output"}, {"self_attn.q_norm", "attn_q_norm"},
    {"self_attn.k_norm", "attn_k_norm"}, {"post_attention_layernorm", "ffn_norm"}, {"mlp.gate_proj", "ffn_gate"},
    {"mlp.up_proj", "ffn_up"}, {"mlp.down_proj", "ffn_down"}, {"mlp.gate", "ffn_gate_inp"} /* the MoE router */,
    /* deepseek2: MLA's projections (kv_b_proj is split, below), the shared experts, the
     * router's selection bias */
    {"self_attn.q_a_proj", "attn_q_a"}, {"self_attn.q_a_layernorm", "attn_q_a_norm"},
    {"self_attn.q_b_proj", "attn_q_b"}, {"self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa"},
    {"self_attn.kv_a_layernorm", "attn_kv_a_norm"}, {"mlp.shared_experts.gate_proj", "ffn_gate_shexp"},
    {"mlp.shared_experts.up_proj", "ffn_up_shexp"}, {"mlp.shared_experts.down_proj", "ffn_down_shexp"},
};

/* A mixture's experts: layers.L.mlp.experts.X.{gate,up,down}_proj.weight, stacked into
 * blk.L.ffn_{gate,up,down}_exps.weight [cols, rows, n_expert] as llama.cpp's converter does. */
static const char *const g_exp_hf[3] = {"gate_proj", "up_proj", "down_proj"};
static const char *const g_exp_gg[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};

/* 1 and (layer, expert, which) when name is an expert's matrix; 0 otherwise. */
static int expert_name(const char *name, long *il, long *ex, int *which) {
    if (!strncmp(name, "model.", 6)) name += 6;
    if (strncmp(name, "layers.", 7)) return 0;
    char *end;
    *il = strtol(name + 7, &end, 10);
    if (end == name + 7 || strncmp(end, ".mlp.experts.", 13)) return 0;
    const char *xs = end + 13;
    *ex = strtol(xs, &end, 10);
    if (end == xs || *end != '.') return 0;
    for (int w = 0; w < 3; w++) {
        const size_t n = strlen(g_exp_hf[w]);
        if (!strncmp(end + 1, g_exp_hf[w], n) && !strcmp(end + 1 + n, ".weight")) { *which = w; return 1; }
    }
    return 0;
}

/* The layer of "[model.]layers.N.<rest>" (-1 for other names), rest pointed at. */
static long layer_of(const char *name, const char **rest) {
    if (!strncmp(name, "model.", 6)) name += 6;
    if (strncmp(name, "layers.", 7)) return -1;
    char *end;
    long il = strtol(name + 7, &end, 10);
    if (end == name + 7 || *end != '.' || il < 0) return -1;
    *rest = end + 1;
    return il;
}

/* Returns 1 mapped, 0 skipped, -1 unknown. */
static int map_name(const char *name, bool tied, char *out, size_t cap) {
    if (!strncmp(name, "model.", 6)) name += 6;
    if (!strcmp(name, "lm_head.weight")) {
        if (tied) return 0;
        snprintf(out, cap, "output.weight");
        return 1;
    }
    if (!strcmp(name, "embed_tokens.weight")) { snprintf(out, cap, "token_embd.weight"); return 1; }
    if (!strcmp(name, "norm.weight")) { snprintf(out, cap, "output_norm.weight"); return 1; }
    if (strstr(name, "rotary_emb.inv_freq")) return 0;
    if (strncmp(name, "layers.", 7)) return -1;
    char *end;
    long il = strtol(name + 7, &end, 10);
    if (end == name + 7 || *end != '.' || il < 0 || il > 4096) return -1;
    const char *rest = end + 1;
    if (!strcmp(rest, "mlp.gate.e_score_correction_bias")) {
        snprintf(out, cap, "blk.%ld.exp_probs_b.bias", il);
        return 1;
    }
    const char *dot = strrchr(rest, '.');
    if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias"))) return -1;
    size_t bl = (size_t)(dot - rest);
    for (size_t i = 0; i < OB_ARRAY_LEN(g_layer); i++)
        if (strlen(g_layer[i].hf) == bl && !strncmp(rest, g_layer[i].hf, bl)) {
            snprintf(out, cap, "blk.%ld.%s%s", il, g_layer[i].gg, dot);
            return 1;
        }
    return -1;
}

static int cfg_int(json_t *c, const char *k, int def) {
    json_t *v = json_object_get(c, k);
    return json_is_integer(v) ? (int)json_integer_value(v) : def;
}

static double cfg_num(json_t *c, const char *k, double def) {
    json_t *v = json_object_get(c, k);
    return json_is_number(v) ? json_number_value(v) : def;
}

/* ---- rope scaling ----------------------------------------------------------------------
 * Hugging Face configs carry it as `rope_scaling` (transformers < 5) or `rope_parameters`
 * (transformers 5, where rope_theta lives too), the kind as `rope_type` or the older `type`,
 * and per-layer-type configs put it under a `full_attention` sub-dict. Read as llama.cpp's
 * converter reads them: `rope_parameters` wins whenever the key is there (even null), `type`
 * counts only without `rope_type` and outside the per-layer form, and a top-level
 * original_max_position_embeddings fills in for the flat form (a top-level rope_theta for
 * both; llama.cpp leaves freq_base unset when a full_attention dict lacks one). Written as it writes them:
 * linear and yarn as <arch>.rope.scaling.* keys; llama3 (Llama 3.1+) as no key at all but a
 * rope_freqs.weight tensor of per-pair frequency divisors. Anything else (dynamic, longrope /
 * su: phi3's, needing factor tensors Llama and Qwen lack, unknown names) is refused. */
typedef enum { ROPE_NONE, ROPE_LINEAR, ROPE_YARN, ROPE_LLAMA3 } rope_kind;

static const struct { const char *hf, *gg; } g_yarn_keys[] = {
    {"extrapolation_factor", "rope.scaling.yarn_ext_factor"},
    {"attention_factor", "rope.scaling.yarn_attn_factor"}, /* else attn_factor, below */
    {"beta_fast", "rope.scaling.yarn_beta_fast"},
    {"beta_slow", "rope.scaling.yarn_beta_slow"},
};

typedef struct rope_cfg {
    rope_kind kind;
    double theta;               /* rope.freq_base */
    double factor;              /* linear, yarn, llama3 */
    double orig_ctx;            /* yarn, llama3 */
    double low, high;           /* llama3: low_freq_factor, high_freq_factor */
    double yarn[4];             /* g_yarn_keys values ... */
    bool has_yarn[4];           /* ... when the config has them */
    double mscale_all;          /* yarn: DeepSeek's mscale_all_dim (0: none) */
} rope_cfg;

/* The type name for a message: at most 40 printable characters. */
static const char *rope_name(const char *s, char *buf, size_t cap) {
    size_t n = 0;
    for (; s[n] && n < 40 && n + 1 < cap; n++) buf[n] = s[n] >= 0x20 && s[n] < 0x7f ? s[n] : '?';
    buf[n] = 0;
    return buf;
}

static ob_status rope_read(json_t *cfg, const char *hf_arch, bool llama, rope_cfg *rc, char *err, size_t err_len) {
    memset(rc, 0, sizeof(*rc));
    json_t *rp = json_object_get(cfg, "rope_parameters");
    if (!rp) rp = json_object_get(cfg, "rope_scaling");
    if (!json_is_object(rp)) rp = NULL;            /* null: no scaling */
    json_t *full = json_object_get(rp, "full_attention");
    bool per_layer = full || json_object_get(rp, "sliding_attention");
    json_t *p = json_is_object(full) ? full : rp;  /* the dict the parameters come from */
    json_t *tv = json_object_get(p, "rope_type");
    if (!tv && !per_layer) tv = json_object_get(p, "type");
    rc->theta = cfg_num(p, "rope_theta", cfg_num(cfg, "rope_theta", 10000.0));
    if (!tv || json_is_null(tv)) return OB_OK;
    const char *t = json_string_value(tv);
    if (!t) return ob_fail(err, err_len, OB_ERR_FORMAT, "convert: config.json: rope scaling type is not a string");
    char nb[48];
    if (!strcmp(t, "default")) return OB_OK;
    if (!strcmp(t, "linear")) rc->kind = ROPE_LINEAR;
    else if (!strcmp(t, "yarn")) rc->kind = ROPE_YARN;
    else if (!strcasecmp(t, "llama3")) rc->kind = ROPE_LLAMA3;
    else
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED,
                       "convert: rope scaling '%s' is not supported (supported: default, linear, llama3, yarn)",
                       rope_name(t, nb, sizeof(nb)));
    if (rc->kind == ROPE_LLAMA3 && !llama)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED,
                       "convert: rope scaling 'llama3' is not supported for %s (only LlamaForCausalLM)", hf_arch);
    json_t *fv = json_object_get(p, "factor");
    rc->factor = json_is_number(fv) ? json_number_value(fv) : rc->kind == ROPE_LLAMA3 ? 8.0 : 0.0;
    if (!(rc->factor > 0 && rc->factor < 1e6))
        return ob_fail(err, err_len, OB_ERR_FORMAT, "convert: rope scaling '%s' needs a positive factor", t);
    json_t *ov = json_object_get(p, "original_max_position_embeddings");
    if (!ov && !per_layer) ov = json_object_get(cfg, "original_max_position_embeddings");
    rc->orig_ctx = json_is_number(ov) ? json_number_value(ov) : rc->kind == ROPE_LLAMA3 ? 8192.0 : 0.0;
    if (rc->kind != ROPE_LINEAR && !(rc->orig_ctx >= 1 && rc->orig_ctx <= UINT32_MAX && rc->orig_ctx == (double)(uint32_t)rc->orig_ctx))
        return ob_fail(err, err_len, OB_ERR_FORMAT, "convert: rope scaling '%s' needs original_max_position_embeddings (a positive integer)", t);
    if (rc->kind == ROPE_LLAMA3) {
        rc->low = cfg_num(p, "low_freq_factor", 1.0);
        rc->high = cfg_num(p, "high_freq_factor", 4.0);
        if (!(rc->low > 0 && rc->high > rc->low))
            return ob_fail(err, err_len, OB_ERR_FORMAT, "convert: rope scaling 'llama3': need 0 < low_freq_factor (%g) < high_freq_factor (%g)",
                           rc->low, rc->high);
    }
    if (rc->kind == ROPE_YARN)
        for (size_t i = 0; i < OB_ARRAY_LEN(g_yarn_keys); i++) {
            json_t *v = json_object_get(p, g_yarn_keys[i].hf);
            if (!v && i == 1) v = json_object_get(p, "attn_factor");
            if (!v || json_is_null(v)) continue;
            if (!json_is_number(v))
                return ob_fail(err, err_len, OB_ERR_FORMAT, "convert: rope scaling 'yarn': %s is not a number", g_yarn_keys[i].hf);
            rc->yarn[i] = json_number_value(v);
            rc->has_yarn[i] = true;
        }
    if (rc->kind == ROPE_YARN) rc->mscale_all = cfg_num(p, "mscale_all_dim", 0.0);
    return OB_OK;
}

static void rope_write_keys(ob_gguf_writer *w, const char *arch, const rope_cfg *rc) {
    if (rc->kind != ROPE_LINEAR && rc->kind != ROPE_YARN) return;
    char key[128];
#define KEY(s) (snprintf(key, sizeof(key), "%s.%s", arch, s), key)
    ob_gguf_set_str(w, KEY("rope.scaling.type"), rc->kind == ROPE_YARN ? "yarn" : "linear");
    ob_gguf_set_f32(w, KEY("rope.scaling.factor"), (float)rc->factor);
    if (rc->kind == ROPE_YARN) {
        ob_gguf_set_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)rc->orig_ctx);
        for (size_t i = 0; i < OB_ARRAY_LEN(g_yarn_keys); i++)
            if (rc->has_yarn[i]) ob_gguf_set_f32(w, KEY(g_yarn_keys[i].gg), (float)rc->yarn[i]);
    }
#undef KEY
}

/* llama3's rope_freqs.weight [hd/2]: what each pair's frequency is divided by (1 for short
 * wavelengths, factor for long ones, a smooth mix between). In float32 and in the order of
 * operations of llama.cpp's converter (torch: `a / t` on a tensor is reciprocal(t) * a), so
 * the values match its file; the constants are rounded to float first, as torch does. */
static void rope_llama3_factors(const rope_cfg *rc, int hd, float *out) {
    const float base = (float)rc->theta, two_pi = (float)6.283185307179586, factor = (float)rc->factor;
    const float old_ctx = (float)rc->orig_ctx, low = (float)rc->low;
    const float high_wavelen = (float)(rc->orig_ctx / rc->high), low_wavelen = (float)(rc->orig_ctx / rc->low);
    const float span = (float)(rc->high - rc->low);
    for (int i = 0; i < hd / 2; i++) {
        float freq = 1.0f / powf(base, (float)(2 * i) / (float)hd);
        float wavelen = (1.0f / freq) * two_pi;
        if (wavelen < high_wavelen) out[i] = 1.0f;
        else if (wavelen > low_wavelen) out[i] = factor;
        else {
            float smooth = ((1.0f / wavelen) * old_ctx - low) / span;
            out[i] = 1.0f / ((1.0f - smooth) / factor + smooth);
        }
    }
}

/* ---- deepseek2 (MLA + mixture) ------------------------------------------------------------
 * What llama.cpp's DeepseekV2Model (and Glm4MoeLiteModel) converter writes, from the config's
 * MLA sizes and router. The router's function is the model class's (transformers' V2 router
 * is softmax, V3's and GLM-4.7-Flash's sigmoid with a selection bias): always written, where
 * llama.cpp writes it only when the config names one (its loader then guesses GLM's from the
 * layer and token counts). */
typedef struct mla_cfg {
    int q_lora, kv_lora, nope, rope, vd;   /* ranks (q_lora 0: none) and head widths */
    int n_dense, n_shared, n_nextn;        /* leading dense layers, shared experts, MTP layers */
    int gating, n_group, topk_group;       /* 1 softmax / 2 sigmoid; groups (-1: absent) */
    bool norm;
    double scale;                          /* routed_scaling_factor; < 0: absent */
} mla_cfg;

static ob_status mla_read(json_t *cfg, const char *hf_arch, int L, mla_cfg *mc, char *err, size_t err_len) {
    memset(mc, 0, sizeof(*mc));
    json_t *ql = json_object_get(cfg, "q_lora_rank");
    mc->q_lora = json_is_integer(ql) ? (int)json_integer_value(ql) : 0;
    mc->kv_lora = cfg_int(cfg, "kv_lora_rank", 512);
    mc->nope = cfg_int(cfg, "qk_nope_head_dim", 0);
    mc->rope = cfg_int(cfg, "qk_rope_head_dim", 0);
    mc->vd = cfg_int(cfg, "v_head_dim", 0);
    if (mc->q_lora < 0 || mc->kv_lora <= 0 || mc->nope <= 0 || mc->rope <= 0 || mc->rope % 2 || mc->vd <= 0 ||
        mc->kv_lora > 65536 || mc->nope > 4096 || mc->rope > 1024 || mc->vd > 4096)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "convert: %s: implausible MLA sizes (q_lora %d, kv_lora %d, nope %d, "
                       "rope %d, v %d)", hf_arch, mc->q_lora, mc->kv_lora, mc->nope, mc->rope, mc->vd);
    if (json_is_true(json_object_get(cfg, "attention_bias")))
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "convert: %s with attention_bias is not supported", hf_arch);
    if (json_is_false(json_object_get(cfg, "rope_interleave")))
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED,
                       "convert: %s with rope_interleave off is not supported (deepseek2 turns adjacent pairs)", hf_arch);
    if (cfg_int(cfg, "moe_layer_freq", 1) != 1)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "convert: %s with moe_layer_freq %d is not supported", hf_arch,
                       cfg_int(cfg, "moe_layer_freq", 1));
    /* leading dense layers: transformers 5's mlp_layer_types (dense ones first), else
     * first_k_dense_replace */
    json_t *types = json_object_get(cfg, "mlp_layer_types");
    mc->n_dense = -1;
    if (json_is_array(types)) {
        size_t n = json_array_size(types), i = 0;
        for (; i < n; i++) {
            const char *t = json_string_value(json_array_get(types, i));
            if (!t || strcmp(t, "dense")) break;
        }
        mc->n_dense = (int)i;
        for (; i < n; i++) {
            const char *t = json_string_value(json_array_get(types, i));
            if (!t || strcmp(t, "sparse"))
                return ob_fail(err, err_len, OB_ERR_UNSUPPORTED,
                               "convert: %s: mlp_layer_types other than dense layers then sparse ones", hf_arch);
        }
    }
    json_t *fk = json_object_get(cfg, "first_k_dense_replace");
    if (json_is_integer(fk)) {
        if (mc->n_dense >= 0 && mc->n_dense != (int)json_integer_value(fk))
            return ob_fail(err, err_len, OB_ERR_FORMAT, "convert: %s: first_k_dense_replace %d against %d dense mlp_layer_types",
                           hf_arch, (int)json_integer_value(fk), mc->n_dense);
        mc->n_dense = (int)json_integer_value(fk);
    }
    if (mc->n_dense < 0)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "convert: %s: config.json has neither first_k_dense_replace nor "
                       "mlp_layer_types", hf_arch);
    if (mc->n_dense > L) mc->n_dense = L;
    mc->n_shared = cfg_int(cfg, "n_shared_experts", 0);
    mc->n_nextn = cfg_int(cfg, "num_nextn_predict_layers", 0);
    mc->n_group = cfg_int(cfg, "n_group", -1);
    mc->topk_group = cfg_int(cfg, "topk_group", -1);
    mc->norm = json_is_true(json_object_get(cfg, "norm_topk_prob"));
    mc->scale = cfg_num(cfg, "routed_scaling_factor", -1.0);
    mc->gating = !strcmp(hf_arch, "DeepseekV2ForCausalLM") ? 1 : 2;
    const char *sf = json_string_value(json_object_get(cfg, "scoring_func"));
    if (sf && strcmp(sf, mc->gating == 1 ? "softmax" : "sigmoid"))
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "convert: %s with scoring_func '%s' is not supported", hf_arch,
                       strlen(sf) < 32 ? sf : "?");
    if (mc->n_shared < 0 || mc->n_shared > 1024 || mc->n_nextn < 0 || mc->n_nextn > 16)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "convert: %s: implausible n_shared_experts %d or num_nextn_predict_layers %d",
                       hf_arch, mc->n_shared, mc->n_nextn);
    return OB_OK;
}

static void mla_write_keys(ob_gguf_writer *w, const char *arch, const mla_cfg *mc, const rope_cfg *rc, int n_vocab) {
    char key[128];
#define KEY(s) (snprintf(key, sizeof(key), "%s.%s", arch, s), key)
    ob_gguf_set_u32(w, KEY("leading_dense_block_count"), (uint32_t)mc->n_dense);
    ob_gguf_set_u32(w, KEY("vocab_size"), (uint32_t)n_vocab);
    if (mc->q_lora > 0) ob_gguf_set_u32(w, KEY("attention.q_lora_rank"), (uint32_t)mc->q_lora);
    ob_gguf_set_u32(w, KEY("attention.kv_lora_rank"), (uint32_t)mc->kv_lora);
    /* the cache's one kv head is the latent row; the heads as transformers has them */
    ob_gguf_set_u32(w, KEY("attention.key_length"), (uint32_t)(mc->kv_lora + mc->rope));
    ob_gguf_set_u32(w, KEY("attention.value_length"), (uint32_t)mc->kv_lora);
    ob_gguf_set_u32(w, KEY("attention.key_length_mla"), (uint32_t)(mc->nope + mc->rope));
    ob_gguf_set_u32(w, KEY("attention.value_length_mla"), (uint32_t)mc->vd);
    ob_gguf_set_u32(w, KEY("rope.dimension_count"), (uint32_t)mc->rope);
    ob_gguf_set_u32(w, KEY("expert_shared_count"), (uint32_t)mc->n_shared);
    if (mc->scale >= 0) ob_gguf_set_f32(w, KEY("expert_weights_scale"), (float)mc->scale);
    if (mc->norm) ob_gguf_set_bool(w, KEY("expert_weights_norm"), true);
    ob_gguf_set_u32(w, KEY("expert_gating_func"), (uint32_t)mc->gating);
    if (mc->n_group >= 0) ob_gguf_set_u32(w, KEY("expert_group_count"), (uint32_t)mc->n_group);
    if (mc->topk_group >= 0) ob_gguf_set_u32(w, KEY("expert_group_used_count"), (uint32_t)mc->topk_group);
    /* llama.cpp's deepseek2 convention: 0.1 * mscale_all_dim (its loader divides by 0.1) */
    if (rc->mscale_all != 0) ob_gguf_set_f32(w, KEY("rope.scaling.yarn_log_multiplier"), (float)(0.1 * rc->mscale_all));
#undef KEY
}

ob_status ob_convert_decoder(const char *dir, const char *hf_arch, void *config_json, const char *out_path,
                             const ob_convert_opts *o, bool *handled, char *err, size_t err_len) {
    json_t *cfg = config_json;
    int di = -1;
    for (size_t i = 0; i < OB_ARRAY_LEN(g_dec); i++) if (!strcmp(hf_arch, g_dec[i].hf)) di = (int)i;
    *handled = di >= 0;
    if (di < 0) return OB_ERR_UNSUPPORTED;
    const char *arch = g_dec[di].arch;
    bool llama = !strcmp(arch, "llama");
    int E = cfg_int(cfg, "hidden_size", 0), L = cfg_int(cfg, "num_hidden_layers", 0), H = cfg_int(cfg, "num_attention_heads", 0);
    int Hkv = cfg_int(cfg, "num_key_value_heads", H), F = cfg_int(cfg, "intermediate_size", 0);
    int hd = cfg_int(cfg, "head_dim", H > 0 ? E / H : 0);
    if (E <= 0 || L <= 0 || L > 1024 || H <= 0 || Hkv <= 0 || H % Hkv || F <= 0 || hd <= 0 || hd % 2)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "%s/config.json: implausible sizes (hidden %d, layers %d, heads %d/%d, ff %d)",
                       dir, E, L, H, Hkv, F);
    rope_cfg rc;
    ob_status st = rope_read(cfg, hf_arch, llama, &rc, err, err_len);
    if (st) return st;
    bool tied = json_is_true(json_object_get(cfg, "tie_word_embeddings")) || g_dec[di].embed;
    /* Qwen3-MoE: every layer a mixture, softmax top-k renormalised (what llama.cpp runs);
     * deepseek2: mixtures after n_dense dense layers */
    const bool mla = !strcmp(arch, "deepseek2"), moe = mla || !strcmp(arch, "qwen3moe");
    const int n_exp = cfg_int(cfg, "num_experts", cfg_int(cfg, "num_local_experts", cfg_int(cfg, "n_routed_experts", 0)));
    const int n_used = cfg_int(cfg, "num_experts_per_tok", 0), F_exp = cfg_int(cfg, "moe_intermediate_size", 0);
    mla_cfg mc = {0};
    if (mla && (st = mla_read(cfg, hf_arch, L, &mc, err, err_len))) return st;
    const int first_moe = mla ? mc.n_dense : 0;
    if (moe && first_moe < L) {
        if (n_exp <= 0 || n_exp > 4096 || n_used <= 0 || n_used > n_exp || F_exp <= 0)
            return ob_fail(err, err_len, OB_ERR_FORMAT, "%s/config.json: implausible experts (%d, %d used, width %d)", dir,
                           n_exp, n_used, F_exp);
    }
    if (moe && !mla) {
        json_t *mlp_only = json_object_get(cfg, "mlp_only_layers");
        if (!json_is_true(json_object_get(cfg, "norm_topk_prob")))
            return ob_fail(err, err_len, OB_ERR_UNSUPPORTED,
                           "convert: %s with norm_topk_prob off is not supported (llama.cpp's qwen3moe renormalises)", hf_arch);
        if (cfg_int(cfg, "decoder_sparse_step", 1) != 1 || json_array_size(mlp_only) > 0)
            return ob_fail(err, err_len, OB_ERR_UNSUPPORTED,
                           "convert: %s with dense layers (decoder_sparse_step, mlp_only_layers) is not supported", hf_arch);
    }
    const ob_src_tensor **experts = NULL; /* [L][3][n_exp] */

    ob_conv c = {0};
    ob_gguf_writer *w = NULL;
    float *rope_freqs = NULL;
    st = ob_conv_load_sources(&c, dir, err, err_len);
    if (!st && moe && first_moe < L) {
        experts = calloc((size_t)L * 3 * (size_t)n_exp, sizeof(*experts));
        st = ob_conv_keep(&c, experts, err, err_len); /* the stacked tensors point into it */
    }
    for (int64_t i = 0; !st && i < c.src.n; i++) {
        const ob_src_tensor *s = &c.src.t[i];
        char name[96];
        long il, ex;
        int which;
        const char *rest = NULL;
        const long lay = layer_of(s->name, &rest);
        if (mla && lay >= L) continue; /* multi-token prediction (nextn) layers */
        if (mla && !strcmp(rest ? rest : "", "self_attn.kv_b_proj.weight")) {
            /* [H * (nope + v), kv_lora] -> attn_k_b [nope, kv_lora, H] (each head's rows
             * transposed) and attn_v_b [kv_lora, v, H], as llama.cpp splits it for MLA */
            snprintf(name, sizeof(name), "blk.%ld.attn_k_b.weight", lay);
            st = ob_conv_add_heads(&c, s, name, o->type, H, 0, mc.nope, true, err, err_len);
            snprintf(name, sizeof(name), "blk.%ld.attn_v_b.weight", lay);
            if (!st) st = ob_conv_add_heads(&c, s, name, o->type, H, mc.nope, mc.vd, false, err, err_len);
            if (!st && s->shape[0] != (int64_t)H * (mc.nope + mc.vd))
                st = ob_fail(err, err_len, OB_ERR_FORMAT, "convert: '%s' has %lld rows, not %d heads of %d + %d", s->name,
                             (long long)s->shape[0], H, mc.nope, mc.vd);
            continue;
        }
        if (moe && expert_name(s->name, &il, &ex, &which)) {
            if (il < first_moe || il >= L || ex < 0 || ex >= n_exp) {
                st = ob_fail(err, err_len, OB_ERR_FORMAT, "convert: '%s' is past %d layers of %d experts", s->name, L, n_exp);
                break;
            }
            experts[((size_t)il * 3 + (size_t)which) * (size_t)n_exp + (size_t)ex] = s;
            continue;
        }
        int r = map_name(s->name, tied, name, sizeof(name));
        if (r == 0) continue;
        if (r < 0) { st = ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "convert: tensor '%s' has no GGUF name for %s", s->name, hf_arch); break; }
        if ((st = ob_conv_add(&c, s, name, o->type, err, err_len))) break;
        ob_out_tensor *ot = &c.out[c.n_out - 1];
        if (llama && strstr(name, ".attn_q.")) ot->permute_heads = H;
        if (llama && strstr(name, ".attn_k.")) ot->permute_heads = Hkv;
        if (ot->permute_heads && ot->ne[1] % (2 * ot->permute_heads)) {
            st = ob_fail(err, err_len, OB_ERR_FORMAT, "convert: %s has %lld rows for %d heads", name, (long long)ot->ne[1], ot->permute_heads);
            break;
        }
    }
    for (int il = first_moe; !st && moe && il < L; il++)
        for (int wh = 0; !st && wh < 3; wh++) {
            const ob_src_tensor **parts = experts + ((size_t)il * 3 + (size_t)wh) * (size_t)n_exp;
            for (int ex = 0; ex < n_exp && !st; ex++)
                if (!parts[ex])
                    st = ob_fail(err, err_len, OB_ERR_FORMAT, "convert: layer %d has no expert %d %s of %d", il, ex,
                                 g_exp_hf[wh], n_exp);
            char name[96];
            snprintf(name, sizeof(name), "blk.%d.%s.weight", il, g_exp_gg[wh]);
            if (!st) st = ob_conv_add_stack(&c, parts, n_exp, name, o->type, err, err_len);
        }
    if (st) goto done;
    w = ob_gguf_writer_new(3, 32);
    if (!w) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory"); goto done; }
    char key[128];
#define KEY(s) (snprintf(key, sizeof(key), "%s.%s", arch, s), key)
    ob_gguf_set_str(w, "general.architecture", arch);
    const char *base = strrchr(dir, '/');
    ob_gguf_set_str(w, "general.name", o->name ? o->name : base && base[1] ? base + 1 : dir);
    ob_gguf_set_u32(w, "general.file_type", o->type == OB_TYPE_F32 ? 0 : o->type == OB_TYPE_F16 ? 1 : (uint32_t)o->type);
    ob_gguf_set_u32(w, KEY("context_length"), (uint32_t)cfg_int(cfg, "max_position_embeddings", 4096));
    ob_gguf_set_u32(w, KEY("embedding_length"), (uint32_t)E);
    ob_gguf_set_u32(w, KEY("block_count"), (uint32_t)L);
    ob_gguf_set_u32(w, KEY("feed_forward_length"), (uint32_t)F);
    ob_gguf_set_u32(w, KEY("attention.head_count"), (uint32_t)H);
    ob_gguf_set_u32(w, KEY("attention.head_count_kv"), mla ? 1u : (uint32_t)Hkv); /* MLA: one latent kv head */
    ob_gguf_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)cfg_num(cfg, "rms_norm_eps", 1e-6));
    ob_gguf_set_f32(w, KEY("rope.freq_base"), (float)rc.theta);
    if (!mla) {
        ob_gguf_set_u32(w, KEY("attention.key_length"), (uint32_t)hd);
        ob_gguf_set_u32(w, KEY("attention.value_length"), (uint32_t)hd);
    }
    if (llama) ob_gguf_set_u32(w, KEY("rope.dimension_count"), (uint32_t)hd);
    rope_write_keys(w, arch, &rc);
    if (g_dec[di].embed) ob_gguf_set_u32(w, KEY("pooling_type"), OB_POOLING_LAST);
    if (moe) {
        ob_gguf_set_u32(w, KEY("expert_count"), (uint32_t)n_exp);
        ob_gguf_set_u32(w, KEY("expert_used_count"), (uint32_t)n_used);
        ob_gguf_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)F_exp);
    }
#undef KEY
    if (mla) mla_write_keys(w, arch, &mc, &rc, cfg_int(cfg, "vocab_size", 0));
    int64_t n_vocab = 0;
    if ((st = ob_convert_vocab_bpe(w, dir, &n_vocab, err, err_len))) goto done;
    for (int64_t i = 0; i < c.n_out; i++)
        if (!strcmp(c.out[i].name, "token_embd.weight") && c.out[i].ne[1] < n_vocab) {
            st = ob_fail(err, err_len, OB_ERR_FORMAT, "convert: %lld embedding rows for %lld tokens", (long long)c.out[i].ne[1], (long long)n_vocab);
            goto done;
        }
    if ((st = ob_conv_write_tensors(&c, w, err, err_len))) goto done;
    if (rc.kind == ROPE_LLAMA3) { /* after the checkpoint's: their fill callback indexes the writer's tensors */
        int64_t ne[4] = {hd / 2, 1, 1, 1};
        if (!(rope_freqs = malloc(sizeof(float) * (size_t)(hd / 2)))) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory"); goto done; }
        rope_llama3_factors(&rc, hd, rope_freqs);
        if ((st = ob_gguf_add_tensor(w, "rope_freqs.weight", OB_TYPE_F32, 1, ne, rope_freqs, err, err_len))) goto done;
    }
    st = ob_gguf_writer_write(w, out_path, err, err_len);
done:
    ob_gguf_writer_free(w);
    free(rope_freqs);
    ob_conv_free(&c);
    return st;
}

ob_status ob_conv_rope_keys(ob_gguf_writer *w, void *config_json, const char *hf_arch, const char *arch, char *err,
                            size_t err_len) {
    rope_cfg rc;
    ob_status st = rope_read(config_json, hf_arch, false, &rc, err, err_len);
    if (st) return st;
    char key[128];
    snprintf(key, sizeof(key), "%s.rope.freq_base", arch);
    ob_gguf_set_f32(w, key, (float)rc.theta);
    rope_write_keys(w, arch, &rc);
    return OB_OK;
}
