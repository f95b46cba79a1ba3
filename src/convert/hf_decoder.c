/* Hugging Face decoders -> GGUF: LlamaForCausalLM (q/k rows reordered for rope on adjacent
 * pairs, as llama.cpp's converter does), Qwen2ForCausalLM (qkv biases), Qwen3ForCausalLM
 * (per-head q/k norms), Qwen3Model (Qwen3-Embedding: no LM head, last-token pooling) and
 * Qwen3MoeForCausalLM (per-expert matrices stacked into 3-D tensors). */
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
};

static const struct { const char *hf, *gg; } g_layer[] = {
    {"input_layernorm", "attn_norm"}, {"self_attn.q_proj", "attn_q"}, {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"}, {"self_attn.o_proj", "attn_output"}, {"self_attn.q_norm", "attn_q_norm"},
    {"self_attn.k_norm", "attn_k_norm"}, {"post_attention_layernorm", "ffn_norm"}, {"mlp.gate_proj", "ffn_gate"},
    {"mlp.up_proj", "ffn_up"}, {"mlp.down_proj", "ffn_down"}, {"mlp.gate", "ffn_gate_inp"} /* the MoE router */,
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
    /* Qwen3-MoE: every layer a mixture, softmax top-k renormalised (what llama.cpp runs) */
    const bool moe = !strcmp(arch, "qwen3moe");
    const int n_exp = cfg_int(cfg, "num_experts", cfg_int(cfg, "num_local_experts", 0));
    const int n_used = cfg_int(cfg, "num_experts_per_tok", 0), F_exp = cfg_int(cfg, "moe_intermediate_size", 0);
    if (moe) {
        json_t *mlp_only = json_object_get(cfg, "mlp_only_layers");
        if (n_exp <= 0 || n_exp > 4096 || n_used <= 0 || n_used > n_exp || F_exp <= 0)
            return ob_fail(err, err_len, OB_ERR_FORMAT, "%s/config.json: implausible experts (%d, %d used, width %d)", dir,
                           n_exp, n_used, F_exp);
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
    if (!st && moe) {
        experts = calloc((size_t)L * 3 * (size_t)n_exp, sizeof(*experts));
        st = ob_conv_keep(&c, experts, err, err_len); /* the stacked tensors point into it */
    }
    for (int64_t i = 0; !st && i < c.src.n; i++) {
        const ob_src_tensor *s = &c.src.t[i];
        char name[96];
        long il, ex;
        int which;
        if (moe && expert_name(s->name, &il, &ex, &which)) {
            if (il < 0 || il >= L || ex < 0 || ex >= n_exp) {
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
    for (int il = 0; !st && moe && il < L; il++)
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
    ob_gguf_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)Hkv);
    ob_gguf_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)cfg_num(cfg, "rms_norm_eps", 1e-6));
    ob_gguf_set_f32(w, KEY("rope.freq_base"), (float)rc.theta);
    ob_gguf_set_u32(w, KEY("attention.key_length"), (uint32_t)hd);
    ob_gguf_set_u32(w, KEY("attention.value_length"), (uint32_t)hd);
    if (llama) ob_gguf_set_u32(w, KEY("rope.dimension_count"), (uint32_t)hd);
    rope_write_keys(w, arch, &rc);
    if (g_dec[di].embed) ob_gguf_set_u32(w, KEY("pooling_type"), OB_POOLING_LAST);
    if (moe) {
        ob_gguf_set_u32(w, KEY("expert_count"), (uint32_t)n_exp);
        ob_gguf_set_u32(w, KEY("expert_used_count"), (uint32_t)n_used);
        ob_gguf_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)F_exp);
    }
#undef KEY
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
