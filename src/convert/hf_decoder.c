/* Hugging Face decoders -> GGUF: LlamaForCausalLM (q/k rows reordered for rope on adjacent
 * pairs, as llama.cpp's converter does), Qwen2ForCausalLM (qkv biases), Qwen3ForCausalLM
 * (per-head q/k norms) and Qwen3Model (Qwen3-Embedding: no LM head, last-token pooling). */
#include "convert/convert.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

static const struct { const char *hf, *arch; bool embed; } g_dec[] = {
    {"LlamaForCausalLM", "llama", false},
    {"Qwen2ForCausalLM", "qwen2", false},
    {"Qwen3ForCausalLM", "qwen3", false},
    {"Qwen3Model", "qwen3", true},
};

static const struct { const char *hf, *gg; } g_layer[] = {
    {"input_layernorm", "attn_norm"}, {"self_attn.q_proj", "attn_q"}, {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"}, {"self_attn.o_proj", "attn_output"}, {"self_attn.q_norm", "attn_q_norm"},
    {"self_attn.k_norm", "attn_k_norm"}, {"post_attention_layernorm", "ffn_norm"}, {"mlp.gate_proj", "ffn_gate"},
    {"mlp.up_proj", "ffn_up"}, {"mlp.down_proj", "ffn_down"},
};

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
    json_t *rp = json_object_get(cfg, "rope_parameters");
    if (!rp) rp = json_object_get(cfg, "rope_scaling");
    const char *rtype = json_string_value(json_object_get(rp, "rope_type"));
    if (!rtype) rtype = json_string_value(json_object_get(rp, "type"));
    double factor = cfg_num(rp, "factor", 1.0);
    if (rtype && strcmp(rtype, "default") && strcmp(rtype, "linear"))
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "convert: rope scaling '%s' is not supported", rtype);
    double theta = cfg_num(rp, "rope_theta", cfg_num(cfg, "rope_theta", 10000.0));
    bool tied = json_is_true(json_object_get(cfg, "tie_word_embeddings")) || g_dec[di].embed;

    ob_conv c = {0};
    ob_gguf_writer *w = NULL;
    ob_status st = ob_conv_load_sources(&c, dir, err, err_len);
    for (int64_t i = 0; !st && i < c.src.n; i++) {
        const ob_src_tensor *s = &c.src.t[i];
        char name[96];
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
    ob_gguf_set_f32(w, KEY("rope.freq_base"), (float)theta);
    ob_gguf_set_u32(w, KEY("attention.key_length"), (uint32_t)hd);
    ob_gguf_set_u32(w, KEY("attention.value_length"), (uint32_t)hd);
    if (llama) ob_gguf_set_u32(w, KEY("rope.dimension_count"), (uint32_t)hd);
    if (rtype && !strcmp(rtype, "linear")) {
        ob_gguf_set_str(w, KEY("rope.scaling.type"), "linear");
        ob_gguf_set_f32(w, KEY("rope.scaling.factor"), (float)factor);
    }
    if (g_dec[di].embed) ob_gguf_set_u32(w, KEY("pooling_type"), OB_POOLING_LAST);
#undef KEY
    int64_t n_vocab = 0;
    if ((st = ob_convert_vocab_bpe(w, dir, &n_vocab, err, err_len))) goto done;
    for (int64_t i = 0; i < c.n_out; i++)
        if (!strcmp(c.out[i].name, "token_embd.weight") && c.out[i].ne[1] < n_vocab) {
            st = ob_fail(err, err_len, OB_ERR_FORMAT, "convert: %lld embedding rows for %lld tokens", (long long)c.out[i].ne[1], (long long)n_vocab);
            goto done;
        }
    if ((st = ob_conv_write_tensors(&c, w, err, err_len))) goto done;
    st = ob_gguf_writer_write(w, out_path, err, err_len);
done:
    ob_gguf_writer_free(w);
    ob_conv_free(&c);
    return st;
}
