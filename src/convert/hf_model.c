/* Hugging Face folder -> GGUF for the encoder families: BERT (BertModel, MiniLM, BGE),
 * XLM-RoBERTa / RoBERTa, nomic-bert, and their *ForSequenceClassification cross-encoders.
 * Tensor names and metadata keys follow llama.cpp's converter, so files interchange.
 * Every source tensor must be mapped or known-unused: an unmapped one is an error (a
 * silently dropped weight would give a model that loads and answers wrongly). */
#include "convert/convert.h"
#include "format/quant.h"
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

enum { FAM_BERT = 0, FAM_ROBERTA = 1, FAM_NOMIC = 2, FAM_JINA = 3 };

typedef struct hf_arch { const char *hf; int fam; bool rank; } hf_arch;

static const hf_arch g_hf_arches[] = {
    {"BertModel", FAM_BERT, false},
    {"BertForMaskedLM", FAM_BERT, false},
    {"BertForSequenceClassification", FAM_BERT, true},
    {"XLMRobertaModel", FAM_ROBERTA, false},
    {"XLMRobertaForMaskedLM", FAM_ROBERTA, false},
    {"XLMRobertaForSequenceClassification", FAM_ROBERTA, true},
    {"RobertaModel", FAM_ROBERTA, false},
    {"RobertaForSequenceClassification", FAM_ROBERTA, true},
    {"NomicBertModel", FAM_NOMIC, false},
    {"NomicBertForPreTraining", FAM_NOMIC, false},
    {"JinaBertModel", FAM_JINA, false},
    {"JinaBertForMaskedLM", FAM_JINA, false},
};

/* Per-layer names, after "encoder.layer.N." (BERT) or "encoder.layers.N." (nomic). */
static const struct { const char *hf, *gg; } g_layer_map[] = {
    {"attention.self.query", "attn_q"}, {"attention.self.key", "attn_k"}, {"attention.self.value", "attn_v"},
    {"attention.output.dense", "attn_output"}, {"attention.output.LayerNorm", "attn_output_norm"},
    {"intermediate.dense", "ffn_up"}, {"output.dense", "ffn_down"}, {"output.LayerNorm", "layer_output_norm"},
    {"attn.Wqkv", "attn_qkv"}, {"attn.out_proj", "attn_output"}, {"mlp.fc11", "ffn_up"}, {"mlp.fc12", "ffn_gate"},
    {"mlp.fc2", "ffn_down"}, {"norm1", "attn_output_norm"}, {"norm2", "layer_output_norm"},
    /* jina-bert-v2: gated_layers is [gate; up] fused, kept fused as llama.cpp does */
    {"mlp.gated_layers", "ffn_up"}, {"mlp.wo", "ffn_down"}, {"mlp.layernorm", "layer_output_norm"},
    {"attention.self.layer_norm_q", "attn_q_norm"}, {"attention.self.layer_norm_k", "attn_k_norm"},
};

static const struct { const char *hf, *gg; } g_global_map[] = {
    {"embeddings.word_embeddings", "token_embd"}, {"embeddings.position_embeddings", "position_embd"},
    {"embeddings.token_type_embeddings", "token_types"}, {"embeddings.LayerNorm", "token_embd_norm"},
    {"emb_ln", "token_embd_norm"},
    {"classifier.dense", "cls"}, {"classifier.out_proj", "cls.output"},
};

static bool starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

/* "<base>.weight" / ".bias" (or LayerNorm's old ".gamma" / ".beta"): splits off the suffix. */
static const char *split_suffix(const char *name, char *base, size_t cap) {
    static const struct { const char *hf, *gg; } sfx[] = {
        {".weight", "weight"}, {".bias", "bias"}, {".gamma", "weight"}, {".beta", "bias"}};
    size_t l = strlen(name);
    for (size_t i = 0; i < OB_ARRAY_LEN(sfx); i++) {
        size_t sl = strlen(sfx[i].hf);
        if (l > sl && !strcmp(name + l - sl, sfx[i].hf) && l - sl < cap) {
            memcpy(base, name, l - sl);
            base[l - sl] = 0;
            return sfx[i].gg;
        }
    }
    return NULL;
}

/* Maps one source name; returns 1 mapped, 0 known-unused (skip), -1 unknown. */
static int map_name(const char *name, int fam, bool rank, char *out, size_t cap) {
    static const char *const prefixes[] = {"bert.", "roberta.", "model."};
    for (size_t i = 0; i < OB_ARRAY_LEN(prefixes); i++)
        if (starts(name, prefixes[i])) { name += strlen(prefixes[i]); break; }
    if (!strcmp(name, "embeddings.position_ids") || starts(name, "cls.predictions.") || starts(name, "lm_head.") ||
        starts(name, "mlm.") || (!rank && starts(name, "pooler.")))
        return 0;
    char base[160];
    const char *sfx = split_suffix(name, base, sizeof(base));
    if (!sfx) return -1;
    if (rank && !strcmp(base, "pooler.dense")) { snprintf(out, cap, "cls.%s", sfx); return 1; }
    /* BertForSequenceClassification's classifier is the output projection after the pooler. */
    if (!strcmp(base, "classifier") && rank) { snprintf(out, cap, "cls.output.%s", sfx); return 1; }
    for (size_t i = 0; i < OB_ARRAY_LEN(g_global_map); i++)
        if (!strcmp(base, g_global_map[i].hf)) { snprintf(out, cap, "%s.%s", g_global_map[i].gg, sfx); return 1; }
    const char *p = NULL;
    if (starts(base, "encoder.layer.")) p = base + strlen("encoder.layer.");
    else if (starts(base, "encoder.layers.")) p = base + strlen("encoder.layers.");
    if (!p) return -1;
    char *end;
    long il = strtol(p, &end, 10);
    if (end == p || *end != '.' || il < 0 || il > 4096) return -1;
    for (size_t i = 0; i < OB_ARRAY_LEN(g_layer_map); i++)
        if (!strcmp(end + 1, g_layer_map[i].hf)) { snprintf(out, cap, "blk.%ld.%s.%s", il, g_layer_map[i].gg, sfx); return 1; }
    (void)fam;
    return -1;
}

ob_status ob_conv_load_sources(ob_conv *c, const char *dir, char *err, size_t err_len) {
    DIR *d = opendir(dir);
    if (!d) return ob_fail(err, err_len, OB_ERR_IO, "%s: cannot open folder", dir);
    char **files = NULL;
    int n = 0;
    struct dirent *e;
    ob_status st = OB_OK;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > 12 && !strcmp(e->d_name + l - 12, ".safetensors")) {
            char **f2 = realloc(files, sizeof(char *) * (size_t)(n + 1));
            if (!f2) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory"); break; }
            files = f2;
            if (!(files[n] = strdup(e->d_name))) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory"); break; }
            n++;
        }
    }
    closedir(d);
    /* With an index (model.safetensors.index.json), only the shards its weight_map names:
     * a folder may also hold a consolidated copy of the same tensors. */
    char path[4096];
    snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
    json_t *idx = st ? NULL : json_load_file(path, 0, NULL), *wm = json_object_get(idx, "weight_map");
    if (json_is_object(wm)) {
        int k = 0;
        for (int i = 0; i < n; i++) {
            bool used = false;
            const char *key;
            json_t *v;
            json_object_foreach(wm, key, v) if (json_is_string(v) && !strcmp(json_string_value(v), files[i])) { used = true; break; }
            if (used) files[k++] = files[i];
            else free(files[i]);
        }
        n = k;
        if (n == 0) st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: none of the shards it names is present", path);
    }
    json_decref(idx);
    /* Shards in name order, so tensor order (and the output file) is deterministic. */
    for (int i = 1; i < n && !st; i++)
        for (int j = i; j > 0 && strcmp(files[j - 1], files[j]) > 0; j--) { char *t = files[j]; files[j] = files[j - 1]; files[j - 1] = t; }
    for (int i = 0; i < n && !st; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        st = ob_st_load(&c->src, path, err, err_len);
    }
    for (int i = 0; i < n; i++) free(files[i]);
    free(files);
    if (st) return st;
    if (n == 0) {
        snprintf(path, sizeof(path), "%s/pytorch_model.bin", dir);
        if (access(path, R_OK) != 0)
            return ob_fail(err, err_len, OB_ERR_IO, "%s: no *.safetensors or pytorch_model.bin: not a model folder", dir);
        st = ob_pt_load(&c->src, path, err, err_len);
    }
    if (!st && c->src.n == 0) st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: the checkpoint holds no tensors", dir);
    return st;
}

static int cfg_int(json_t *cfg, const char *key, int def) {
    json_t *v = json_object_get(cfg, key);
    return json_is_integer(v) ? (int)json_integer_value(v) : def;
}

static double cfg_num(json_t *cfg, const char *key, double def) {
    json_t *v = json_object_get(cfg, key);
    return json_is_number(v) ? json_number_value(v) : def;
}

/* sentence-transformers' 1_Pooling/config.json, if any: the pooling the model was trained with. */
static int read_pooling(const char *dir, int def) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/1_Pooling/config.json", dir);
    json_t *j = json_load_file(path, 0, NULL);
    if (!j) return def;
    int p = def;
    if (json_is_true(json_object_get(j, "pooling_mode_mean_tokens"))) p = OB_POOLING_MEAN;
    else if (json_is_true(json_object_get(j, "pooling_mode_cls_token"))) p = OB_POOLING_CLS;
    else if (json_is_true(json_object_get(j, "pooling_mode_lasttoken"))) p = OB_POOLING_LAST;
    json_decref(j);
    return p;
}

/* Element i of a source tensor as float. */
static float src_elem(const ob_src_tensor *s, int64_t i) {
    if (s->type == OB_TYPE_F32) {
        float f;
        memcpy(&f, (const char *)s->data + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char *)s->data + 2 * i, 2);
    return s->type == OB_TYPE_F16 ? ob_f16_to_f32(h) : ob_bf16_to_f32(h);
}

/* The n floats of c->buf as output tensor o's type into dst (size bytes). */
static bool store_buf(ob_conv *c, const ob_out_tensor *o, int64_t n, void *dst, size_t size) {
    const int64_t row = o->ne[0];
    if (o->type == OB_TYPE_F32) { memcpy(dst, c->buf, sizeof(float) * (size_t)n); return size == sizeof(float) * (size_t)n; }
    if (o->type == OB_TYPE_F16) {
        for (int64_t i = 0; i < n; i++) { uint16_t h = ob_f32_to_f16(c->buf[i]); memcpy((char *)dst + 2 * i, &h, 2); }
        return size == (size_t)n * 2;
    }
    if (o->type == OB_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) { uint16_t h = ob_f32_to_bf16(c->buf[i]); memcpy((char *)dst + 2 * i, &h, 2); }
        return size == (size_t)n * 2;
    }
    const ob_type_traits *tr = ob_type_traits_get(o->type);
    size_t rb = ob_row_size(o->type, row);
    for (int64_t r = 0; r < n / row; r++) tr->from_float(c->buf + r * row, (char *)dst + (size_t)r * rb, row);
    return size == rb * (size_t)(n / row);
}

static bool fill_tensor(void *ctx, int64_t index, void *dst, size_t size) {
    ob_conv *c = ctx;
    const ob_out_tensor *o = &c->out[index];
    const ob_src_tensor *s = o->src;
    int64_t row = o->ne[0], n = row * o->ne[1] * o->ne[2] * o->ne[3];
    size_t need = sizeof(float) * (size_t)n;
    if (need > c->buf_len) {
        float *b = realloc(c->buf, need);
        if (!b) return false;
        c->buf = b;
        c->buf_len = need;
    }
    if (o->n_parts) s = o->parts[0]; /* every part has its dtype and shape */
    size_t es = s->type == OB_TYPE_F32 ? 4 : 2;
    if (o->head_rows) { /* a piece of each head, element by element (transposed or not) */
        const int64_t cols = s->shape[s->n_dims - 1], per = o->ne[1];
        for (int64_t r = 0; r < n / row; r++)
            for (int64_t i = 0; i < row; i++) {
                const int64_t h = r / per, j = r % per;
                const int64_t sr = h * o->head_rows + o->row0 + (o->transpose ? i : j), sc = o->transpose ? j : i;
                c->buf[r * row + i] = src_elem(s, sr * cols + sc);
            }
        return store_buf(c, o, n, dst, size);
    }
    const unsigned char *p = (const unsigned char *)s->data + (size_t)(o->skip_rows * row) * es;
    int64_t rows = n / row, hd = o->permute_heads > 0 ? rows / o->permute_heads : 0;
    const int64_t part_rows = o->n_parts ? rows / o->n_parts : rows;
    for (int64_t r = 0; r < rows; r++) {
        /* Output row (head h, pair i, half j) <- source row (h, half j, i): each head's two
         * rotary halves interleaved, as llama.cpp's converter stores Llama's q and k. */
        int64_t sr = r;
        if (hd) { int64_t h = r / hd, w = r % hd; sr = h * hd + (w % 2) * (hd / 2) + w / 2; }
        const unsigned char *sp = p + (size_t)(sr * row) * es;
        if (o->n_parts) sp = (const unsigned char *)o->parts[r / part_rows]->data + (size_t)((r % part_rows) * row) * es;
        float *d = c->buf + r * row;
        for (int64_t i = 0; i < row; i++) {
            if (s->type == OB_TYPE_F32) memcpy(&d[i], sp + 4 * i, 4);
            else {
                uint16_t h;
                memcpy(&h, sp + 2 * i, 2);
                d[i] = s->type == OB_TYPE_F16 ? ob_f16_to_f32(h) : ob_bf16_to_f32(h);
            }
        }
    }
    return store_buf(c, o, n, dst, size);
}

/* Output type of a tensor: 1-D tensors, norms, the token-type table and a mixture's router
 * (ffn_gate_inp, as llama.cpp's converter keeps it) stay F32; rows that do not fill whole
 * blocks of the wanted type fall back to F16. */
static ob_type pick_type(const ob_out_tensor *o, ob_type want) {
    if (o->n_dims < 2 || strstr(o->name, "token_types") || strstr(o->name, "norm") || strstr(o->name, "ffn_gate_inp"))
        return OB_TYPE_F32;
    if (ob_row_size(want, o->ne[0]) == 0) return OB_TYPE_F16;
    return want;
}

ob_status ob_conv_add(ob_conv *c, const ob_src_tensor *s, const char *name, ob_type want, char *err, size_t err_len) {
    if (s->type == OB_TYPE_COUNT || s->n_dims < 1 || s->n_dims > 2)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "convert: tensor '%s' is %s with %d dimensions (want 1-2-D F32/F16/BF16)",
                       s->name, s->dtype, s->n_dims);
    for (int64_t j = 0; j < c->n_out; j++)
        if (!strcmp(c->out[j].name, name)) return ob_fail(err, err_len, OB_ERR_FORMAT, "convert: two tensors map to '%s'", name);
    /* a source gives at most two outputs (MLA's kv_b: attn_k_b and attn_v_b) */
    if (!c->out) {
        c->out = calloc((size_t)(2 * c->src.n + 1), sizeof(ob_out_tensor));
        if (!c->out) return ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory");
    }
    if (c->n_out >= 2 * c->src.n + 1) return ob_fail(err, err_len, OB_ERR_FORMAT, "convert: more outputs than source tensors");
    ob_out_tensor *ot = &c->out[c->n_out];
    memset(ot, 0, sizeof(*ot));
    snprintf(ot->name, sizeof(ot->name), "%s", name);
    ot->src = s;
    ot->n_dims = s->n_dims;
    for (int d = 0; d < 4; d++) ot->ne[d] = d < s->n_dims ? s->shape[s->n_dims - 1 - d] : 1;
    ot->type = pick_type(ot, want);
    c->n_out++;
    return OB_OK;
}

ob_status ob_conv_keep(ob_conv *c, void *p, char *err, size_t err_len) {
    if (p && c->n_keep == c->cap_keep) {
        int nc = c->cap_keep ? 2 * c->cap_keep : 16;
        void **k = realloc(c->keep, sizeof(void *) * (size_t)nc);
        if (!k) { free(p); p = NULL; }
        else { c->keep = k; c->cap_keep = nc; }
    }
    if (!p) return ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory");
    c->keep[c->n_keep++] = p;
    return OB_OK;
}

ob_status ob_conv_add_stack(ob_conv *c, const ob_src_tensor **parts, int n, const char *name, ob_type want, char *err,
                            size_t err_len) {
    const ob_src_tensor *s0 = parts[0];
    for (int i = 0; i < n; i++) {
        const ob_src_tensor *s = parts[i];
        if (s->type == OB_TYPE_COUNT || s->n_dims != 2 || s->type != s0->type || s->shape[0] != s0->shape[0] ||
            s->shape[1] != s0->shape[1])
            return ob_fail(err, err_len, OB_ERR_FORMAT,
                           "convert: '%s' (%s [%lld, %lld]) does not stack with '%s' (%s [%lld, %lld]) into '%s'", s->name,
                           s->dtype, (long long)s->shape[0], (long long)(s->n_dims > 1 ? s->shape[1] : 1), s0->name,
                           s0->dtype, (long long)s0->shape[0], (long long)(s0->n_dims > 1 ? s0->shape[1] : 1), name);
    }
    ob_status st = ob_conv_add(c, s0, name, want, err, err_len);
    if (st) return st;
    ob_out_tensor *ot = &c->out[c->n_out - 1];
    ot->n_dims = 3;
    ot->ne[2] = n;
    ot->parts = parts;
    ot->n_parts = n;
    ot->type = pick_type(ot, want);
    return OB_OK;
}

ob_status ob_conv_add_heads(ob_conv *c, const ob_src_tensor *s, const char *name, ob_type want, int64_t n_head,
                            int64_t row0, int64_t sub, bool transpose, char *err, size_t err_len) {
    if (s->n_dims != 2 || n_head < 1 || s->shape[0] % n_head || row0 < 0 || sub < 1 || row0 + sub > s->shape[0] / n_head)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "convert: '%s' [%lld, %lld] does not split into %lld heads for '%s'",
                       s->name, (long long)s->shape[0], (long long)(s->n_dims > 1 ? s->shape[1] : 1), (long long)n_head,
                       name);
    ob_status st = ob_conv_add(c, s, name, want, err, err_len);
    if (st) return st;
    ob_out_tensor *ot = &c->out[c->n_out - 1];
    const int64_t cols = s->shape[1];
    ot->n_dims = 3;
    ot->ne[0] = transpose ? sub : cols;
    ot->ne[1] = transpose ? cols : sub;
    ot->ne[2] = n_head;
    ot->head_rows = s->shape[0] / n_head;
    ot->row0 = row0;
    ot->transpose = transpose;
    ot->type = pick_type(ot, want);
    return OB_OK;
}

ob_status ob_conv_write_tensors(ob_conv *c, ob_gguf_writer *w, char *err, size_t err_len) {
    for (int64_t i = 0; i < c->n_out; i++) {
        const ob_out_tensor *ot = &c->out[i];
        ob_status st = ob_gguf_add_tensor_fn(w, ot->name, ot->type, ot->n_dims, ot->ne, fill_tensor, c, err, err_len);
        if (st) return st;
    }
    return OB_OK;
}

void ob_conv_free(ob_conv *c) {
    for (int i = 0; i < c->n_keep; i++) free(c->keep[i]);
    free(c->keep);
    free(c->out);
    free(c->buf);
    ob_src_free(&c->src);
    memset(c, 0, sizeof(*c));
}

ob_status ob_convert_hf(const char *dir, const char *out_path, const ob_convert_opts *opts, char *err, size_t err_len) {
    ob_convert_opts o = opts ? *opts : (ob_convert_opts){OB_TYPE_F16, NULL};
    const ob_type_traits *tt = ob_type_traits_get(o.type);
    if (!tt || (o.type != OB_TYPE_F32 && o.type != OB_TYPE_F16 && o.type != OB_TYPE_BF16 && !tt->from_float))
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "convert: cannot write type %s", tt ? tt->name : "?");
    char path[4096];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    if (!cfg) return ob_fail(err, err_len, OB_ERR_IO, "%s: no readable config.json (%s): not a model folder", dir, je.text);
    ob_conv c = {0};
    ob_gguf_writer *w = NULL;
    ob_status st = OB_OK;
    const char *hfa = json_string_value(json_array_get(json_object_get(cfg, "architectures"), 0));
    const hf_arch *ha = NULL;
    for (size_t i = 0; hfa && i < OB_ARRAY_LEN(g_hf_arches); i++)
        if (!strcmp(hfa, g_hf_arches[i].hf)) ha = &g_hf_arches[i];
    if (!ha && hfa) {
        bool handled = false;
        st = ob_convert_decoder(dir, hfa, cfg, out_path, &o, &handled, err, err_len);
        if (!handled) st = ob_convert_gptoss(dir, hfa, cfg, out_path, &o, &handled, err, err_len);
        if (handled) goto done;
    }
    if (!ha) {
        st = ob_fail(err, err_len, OB_ERR_UNSUPPORTED,
                     "convert: architecture '%s' is not supported (supported: BertModel, XLMRobertaModel, RobertaModel, "
                     "NomicBertModel, JinaBertModel, their ForSequenceClassification rerankers, LlamaForCausalLM, "
                     "Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3Model, Qwen3MoeForCausalLM, DeepseekV2ForCausalLM, "
                     "DeepseekV3ForCausalLM, Glm4MoeLiteForCausalLM, GptOssForCausalLM)", hfa ? hfa : "(none in config.json)");
        goto done;
    }
    const char *pet = json_string_value(json_object_get(cfg, "position_embedding_type"));
    if (ha->fam != FAM_JINA && pet && strcmp(pet, "absolute")) {
        st = ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "convert: %s with position_embedding_type '%s' is not supported", hfa, pet);
        goto done;
    }
    int E = cfg_int(cfg, "hidden_size", cfg_int(cfg, "n_embd", 0));
    int L = cfg_int(cfg, "num_hidden_layers", cfg_int(cfg, "n_layer", 0));
    int H = cfg_int(cfg, "num_attention_heads", cfg_int(cfg, "n_head", 0));
    int F = cfg_int(cfg, "intermediate_size", cfg_int(cfg, "n_inner", 0));
    int n_ctx = cfg_int(cfg, "max_position_embeddings", cfg_int(cfg, "n_positions", 512));
    int n_types = cfg_int(cfg, "type_vocab_size", 2);
    double eps = cfg_num(cfg, "layer_norm_eps", cfg_num(cfg, "layer_norm_epsilon", 1e-12));
    if (E <= 0 || L <= 0 || H <= 0 || F <= 0 || E % H || L > 1024 || E > 65536)
        { st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: implausible sizes (hidden %d, layers %d, heads %d, ff %d)", path, E, L, H, F); goto done; }
    /* RoBERTa numbers positions from padding_idx + 1: those leading rows are never used. */
    int pos_skip = ha->fam == FAM_ROBERTA ? cfg_int(cfg, "pad_token_id", 1) + 1 : 0;
    if (pos_skip < 0 || pos_skip >= n_ctx) { st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: bad pad_token_id", path); goto done; }
    n_ctx -= pos_skip;

    if ((st = ob_conv_load_sources(&c, dir, err, err_len))) goto done;
    int n_cls = 0;
    for (int64_t i = 0; i < c.src.n; i++) {
        const ob_src_tensor *s = &c.src.t[i];
        char gname[96];
        int r = map_name(s->name, ha->fam, ha->rank, gname, sizeof(gname));
        if (r == 0) continue;
        if (r < 0) { st = ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "convert: tensor '%s' has no GGUF name for %s", s->name, hfa); goto done; }
        if ((st = ob_conv_add(&c, s, gname, o.type, err, err_len))) goto done;
        ob_out_tensor *ot = &c.out[c.n_out - 1];
        if (!strcmp(ot->name, "position_embd.weight") && pos_skip) {
            if (ot->ne[1] <= pos_skip) { st = ob_fail(err, err_len, OB_ERR_FORMAT, "convert: too few position embeddings"); goto done; }
            ot->skip_rows = pos_skip;
            ot->ne[1] -= pos_skip;
        }
        if (!strcmp(ot->name, "cls.output.weight")) n_cls = (int)ot->ne[1];
    }
    if (ha->rank && n_cls <= 0) { st = ob_fail(err, err_len, OB_ERR_FORMAT, "convert: %s has no classifier weights", hfa); goto done; }

    const char *arch = ha->fam == FAM_NOMIC ? "nomic-bert" : ha->fam == FAM_JINA ? "jina-bert-v2" : "bert";
    w = ob_gguf_writer_new(3, 32);
    if (!w) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory"); goto done; }
    char key[128];
#define KEY(s) (snprintf(key, sizeof(key), "%s.%s", arch, s), key)
    ob_gguf_set_str(w, "general.architecture", arch);
    const char *base = strrchr(dir, '/');
    base = base && base[1] ? base + 1 : dir;
    ob_gguf_set_str(w, "general.name", o.name ? o.name : base);
    ob_gguf_set_u32(w, "general.file_type", o.type == OB_TYPE_F32 ? 0 : o.type == OB_TYPE_F16 ? 1 : (uint32_t)o.type);
    ob_gguf_set_u32(w, KEY("context_length"), (uint32_t)n_ctx);
    ob_gguf_set_u32(w, KEY("embedding_length"), (uint32_t)E);
    ob_gguf_set_u32(w, KEY("feed_forward_length"), (uint32_t)F);
    ob_gguf_set_u32(w, KEY("block_count"), (uint32_t)L);
    ob_gguf_set_u32(w, KEY("attention.head_count"), (uint32_t)H);
    ob_gguf_set_f32(w, KEY("attention.layer_norm_epsilon"), (float)eps);
    ob_gguf_set_bool(w, KEY("attention.causal"), false);
    ob_gguf_set_u32(w, KEY("pooling_type"), (uint32_t)(ha->rank ? OB_POOLING_RANK : read_pooling(dir, ha->fam == FAM_NOMIC || ha->fam == FAM_JINA ? OB_POOLING_MEAN : OB_POOLING_CLS)));
    if (ha->fam == FAM_NOMIC) {
        json_t *rp = json_object_get(cfg, "rope_parameters");
        double theta = cfg_num(rp, "rope_theta", cfg_num(cfg, "rope_theta", cfg_num(cfg, "rotary_emb_base", 10000.0)));
        double frac = cfg_num(cfg, "rotary_emb_fraction", 1.0);
        if (frac != 1.0) { st = ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "convert: rotary_emb_fraction %g (only 1.0)", frac); goto done; }
        ob_gguf_set_f32(w, KEY("rope.freq_base"), (float)theta);
    }
    if (ha->fam == FAM_JINA) ob_gguf_set_f32(w, KEY("attention.max_alibi_bias"), 8.0f);
    if (ha->rank) {
        const char **labels = calloc((size_t)n_cls, sizeof(char *));
        char (*lb)[32] = calloc((size_t)n_cls, 32);
        if (!labels || !lb) { free(labels); free(lb); st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory"); goto done; }
        json_t *id2label = json_object_get(cfg, "id2label");
        for (int i = 0; i < n_cls; i++) {
            char k[16];
            snprintf(k, sizeof(k), "%d", i);
            const char *s = json_string_value(json_object_get(id2label, k));
            snprintf(lb[i], 32, "%s", s ? s : k);
            labels[i] = lb[i];
        }
        ob_gguf_set_arr_str(w, KEY("classifier.output_labels"), labels, NULL, (uint64_t)n_cls);
        free(labels);
        free(lb);
    }
#undef KEY
    int64_t n_vocab = 0;
    if ((st = ob_convert_vocab(w, dir, n_types, &n_vocab, err, err_len))) goto done;
    for (int64_t i = 0; i < c.n_out; i++) {
        const ob_out_tensor *ot = &c.out[i];
        if (!strcmp(ot->name, "token_embd.weight") && ot->ne[1] < n_vocab) {
            st = ob_fail(err, err_len, OB_ERR_FORMAT, "convert: %lld embedding rows for %lld tokens", (long long)ot->ne[1], (long long)n_vocab);
            goto done;
        }
    }
    if ((st = ob_conv_write_tensors(&c, w, err, err_len))) goto done;
    st = ob_gguf_writer_write(w, out_path, err, err_len);
done:
    ob_gguf_writer_free(w);
    ob_conv_free(&c);
    json_decref(cfg);
    return st;
}
