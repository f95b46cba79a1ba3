/* Hugging Face GptOssForCausalLM -> GGUF "gpt-oss", with the tensor names, types and keys
 * llama.cpp's converter writes, so its files and ours interchange.
 *
 * The experts come fused: gate and up interleaved (gate_up_proj: column 2i is gate row i,
 * 2i + 1 up row i), as one tensor per layer for all experts. OpenAI's release stores their
 * matrices as MXFP4 (`*_blocks` uint8 [E, rows, K/32, 16], two E2M1 codes a byte, element
 * 2j in byte j's low nibble; `*_scales` uint8 [E, rows, K/32], an E8M0 exponent): they are
 * repacked, not requantized, into ggml's MXFP4 blocks (the exponent byte, then byte j holding
 * element j low and j + 16 high), gate and up taking the even and odd rows. A float
 * checkpoint's experts (gate_up_proj [E, hidden, 2F] and down_proj [E, F, hidden], x @ W)
 * are transposed into [K, rows, E] at the requested type. The experts' biases, the router
 * and the sinks stay F32, as llama.cpp keeps them.
 *
 * What the GGUF cannot say is refused: a clamped SwiGLU other than alpha 1.702, limit 7
 * (the loader fixes them), layers other than sliding/full alternating from a sliding one,
 * YaRN whose correction range is truncated (the loader keeps gpt-oss's exact one). */
#include "convert/convert.h"
#include "format/quant.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A mixture tensor made from part of a fused source: rows (MXFP4) or columns (float
 * matrices, biases) sel, sel + stride, ... */
typedef enum { GX_MXFP4, GX_FLOAT, GX_BIAS } gx_kind;

typedef struct gx_tensor {
    gx_kind kind;
    const ob_src_tensor *src;    /* MXFP4: blocks [E, R, K/32, 16]; float [E, K, C]; bias [E, C] */
    const ob_src_tensor *scales; /* MXFP4: [E, R, K/32] */
    int64_t sel, stride;
    ob_type type;
    int n_dims;
    int64_t ne[4];               /* GGUF order: [K, N, E] (bias [N, E]) */
    char name[96];
} gx_tensor;

/* Per layer: the experts' sources by role. */
enum { GX_GU_BLOCKS, GX_GU_SCALES, GX_GU, GX_GU_BIAS, GX_D_BLOCKS, GX_D_SCALES, GX_D, GX_D_BIAS, GX_NROLE };
static const char *const g_roles[GX_NROLE] = {"gate_up_proj_blocks", "gate_up_proj_scales", "gate_up_proj",
                                              "gate_up_proj_bias", "down_proj_blocks", "down_proj_scales",
                                              "down_proj", "down_proj_bias"};

static const struct { const char *hf, *gg; } g_layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"}, {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.weight", "attn_k.weight"}, {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.weight", "attn_v.weight"}, {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"}, {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.sinks", "attn_sinks.weight"},
    {"mlp.router.weight", "ffn_gate_inp.weight"}, {"mlp.router.bias", "ffn_gate_inp.bias"},
};

static int cfg_int(json_t *c, const char *k, int def) {
    json_t *v = json_object_get(c, k);
    return json_is_integer(v) ? (int)json_integer_value(v) : def;
}

static double cfg_num(json_t *c, const char *k, double def) {
    json_t *v = json_object_get(c, k);
    return json_is_number(v) ? json_number_value(v) : def;
}

/* Layer of "model.layers.N.<rest>" (rest set), or -1. */
static long layer_of(const char *name, const char **rest) {
    if (strncmp(name, "model.layers.", 13)) return -1;
    char *end;
    long il = strtol(name + 13, &end, 10);
    if (end == name + 13 || *end != '.' || il < 0) return -1;
    *rest = end + 1;
    return il;
}

static float src_f(const ob_src_tensor *s, int64_t i) {
    if (s->type == OB_TYPE_F32) { float f; memcpy(&f, (const char *)s->data + 4 * i, 4); return f; }
    uint16_t h;
    memcpy(&h, (const char *)s->data + 2 * i, 2);
    return s->type == OB_TYPE_F16 ? ob_f16_to_f32(h) : ob_bf16_to_f32(h);
}

/* n floats as type t at dst (whole rows of it). */
static void put_row(ob_type t, const float *x, void *dst, int64_t n) {
    if (t == OB_TYPE_F32) memcpy(dst, x, sizeof(float) * (size_t)n);
    else if (t == OB_TYPE_F16 || t == OB_TYPE_BF16)
        for (int64_t i = 0; i < n; i++) {
            const uint16_t h = t == OB_TYPE_F16 ? ob_f32_to_f16(x[i]) : ob_f32_to_bf16(x[i]);
            memcpy((char *)dst + 2 * i, &h, 2);
        }
    else ob_type_traits_get(t)->from_float(x, dst, n);
}

/* Rows tiled so the strided reads of a float expert walk its memory in order. */
#define GX_TILE 32

static bool gx_fill(void *ctx, int64_t index, void *dst, size_t size) {
    (void)index;
    const gx_tensor *g = ctx;
    const int64_t K = g->ne[0], N = g->ne[1], E = g->ne[2];
    char *out = dst;
    if (g->kind == GX_MXFP4) {
        const int64_t nb = K / 32, R = g->src->shape[1];
        const uint8_t *blk = g->src->data, *sc = g->scales->data;
        if (size != (size_t)(E * N * nb) * sizeof(ob_block_mxfp4)) return false;
        for (int64_t e = 0; e < E; e++)
            for (int64_t n = 0; n < N; n++) {
                const int64_t r = (e * R + g->sel + g->stride * n) * nb;
                for (int64_t b = 0; b < nb; b++, out += sizeof(ob_block_mxfp4)) {
                    const uint8_t *q = blk + (r + b) * 16;
                    out[0] = (char)sc[r + b];
                    for (int j = 0; j < 16; j++) {
                        /* element m's code: byte m/2, low nibble for even m */
                        const unsigned lo = (q[j >> 1] >> (4 * (j & 1))) & 15, hi = (q[(j + 16) >> 1] >> (4 * (j & 1))) & 15;
                        out[1 + j] = (char)(lo | hi << 4);
                    }
                }
            }
        return true;
    }
    if (g->kind == GX_BIAS) { /* [K = rows, N = experts] from src [E, C] */
        const int64_t C = g->src->shape[1];
        if (size != sizeof(float) * (size_t)(K * N)) return false;
        for (int64_t e = 0; e < N; e++)
            for (int64_t i = 0; i < K; i++) {
                const float v = src_f(g->src, e * C + g->sel + g->stride * i);
                memcpy(out + sizeof(float) * (size_t)(e * K + i), &v, sizeof(float));
            }
        return true;
    }
    /* a float expert: output row n of expert e is column sel + stride n of src[e] [K, C] */
    const int64_t C = g->src->shape[2];
    const size_t rb = ob_row_size(g->type, K);
    if (size != rb * (size_t)(N * E)) return false;
    float *tile = malloc(sizeof(float) * (size_t)(GX_TILE * K));
    if (!tile) return false;
    for (int64_t e = 0; e < E; e++)
        for (int64_t n0 = 0; n0 < N; n0 += GX_TILE) {
            const int64_t nt = OB_MIN((int64_t)GX_TILE, N - n0);
            for (int64_t k = 0; k < K; k++)
                for (int64_t t = 0; t < nt; t++) tile[t * K + k] = src_f(g->src, (e * K + k) * C + g->sel + g->stride * (n0 + t));
            for (int64_t t = 0; t < nt; t++) put_row(g->type, tile + t * K, out + rb * (size_t)(e * N + n0 + t), K);
        }
    free(tile);
    return true;
}

static bool shape_is(const ob_src_tensor *s, int n_dims, int64_t a, int64_t b, int64_t c, int64_t d) {
    const int64_t want[4] = {a, b, c, d};
    if (s->n_dims != n_dims) return false;
    for (int i = 0; i < n_dims; i++)
        if (s->shape[i] != want[i]) return false;
    return true;
}

/* The experts of one layer (srcs by role) as gx[0..5]: gate, up, down matrices, then their
 * biases. E experts, H hidden, F expert width; want: the type of float matrices. */
static ob_status gx_layer(long il, const ob_src_tensor *const *s, int64_t E, int64_t H, int64_t F, ob_type want,
                          gx_tensor *gx, bool *mxfp4, char *err, size_t err_len) {
    static const char *const gg[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    for (int m = 0; m < 3; m++) {
        const bool down = m == 2;
        const int64_t K = down ? F : H, N = down ? H : F, R = down ? H : 2 * F;
        const ob_src_tensor *blocks = s[down ? GX_D_BLOCKS : GX_GU_BLOCKS], *scales = s[down ? GX_D_SCALES : GX_GU_SCALES];
        const ob_src_tensor *plain = s[down ? GX_D : GX_GU];
        gx_tensor *g = &gx[m];
        memset(g, 0, sizeof(*g));
        g->sel = down ? 0 : m;
        g->stride = down ? 1 : 2;
        g->n_dims = 3;
        g->ne[0] = K, g->ne[1] = N, g->ne[2] = E, g->ne[3] = 1;
        snprintf(g->name, sizeof(g->name), "blk.%ld.%s.weight", il, gg[m]);
        if (blocks && scales) {
            if (K % 32 || strcmp(blocks->dtype, "U8") || strcmp(scales->dtype, "U8") ||
                !shape_is(blocks, 4, E, R, K / 32, 16) || !shape_is(scales, 3, E, R, K / 32, 0))
                return ob_fail(err, err_len, OB_ERR_FORMAT, "convert: '%s' / '%s' are not MXFP4 blocks [%lld, %lld, %lld, 16]",
                               blocks->name, scales->name, (long long)E, (long long)R, (long long)(K / 32));
            g->kind = GX_MXFP4, g->src = blocks, g->scales = scales, g->type = OB_TYPE_MXFP4;
            *mxfp4 = true;
        } else if (plain) {
            if (plain->type == OB_TYPE_COUNT || !shape_is(plain, 3, E, K, R, 0))
                return ob_fail(err, err_len, OB_ERR_FORMAT, "convert: '%s' (%s) is not a float [%lld, %lld, %lld]", plain->name,
                               plain->dtype, (long long)E, (long long)K, (long long)R);
            g->kind = GX_FLOAT, g->src = plain;
            g->type = ob_row_size(want, K) ? want : OB_TYPE_F16; /* rows of whole blocks, else F16 */
        } else {
            return ob_fail(err, err_len, OB_ERR_FORMAT, "convert: layer %ld has no %s experts (neither %s nor its MXFP4 blocks)",
                           il, down ? "down" : "gate/up", g_roles[down ? GX_D : GX_GU]);
        }
        /* the bias: [E, R] float, the same columns */
        const ob_src_tensor *b = s[down ? GX_D_BIAS : GX_GU_BIAS];
        gx_tensor *gb = &gx[3 + m];
        if (!b || b->type == OB_TYPE_COUNT || !shape_is(b, 2, E, R, 0, 0))
            return ob_fail(err, err_len, OB_ERR_FORMAT, "convert: layer %ld: %s missing or not a float [%lld, %lld]", il,
                           g_roles[down ? GX_D_BIAS : GX_GU_BIAS], (long long)E, (long long)R);
        *gb = (gx_tensor){GX_BIAS, b, NULL, g->sel, g->stride, OB_TYPE_F32, 2, {N, E, 1, 1}, ""};
        snprintf(gb->name, sizeof(gb->name), "blk.%ld.%s.bias", il, gg[m]);
    }
    return OB_OK;
}

/* What the GGUF cannot carry, refused before anything is read. */
static ob_status check_config(json_t *cfg, const char *dir, int L, char *err, size_t err_len) {
    json_t *a = json_object_get(cfg, "swiglu_alpha"), *lim = json_object_get(cfg, "swiglu_limit");
    if ((a && cfg_num(cfg, "swiglu_alpha", 0) != 1.702) || (lim && cfg_num(cfg, "swiglu_limit", 0) != 7.0))
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "convert: gpt-oss with swiglu_alpha %g, swiglu_limit %g (only 1.702, 7)",
                       cfg_num(cfg, "swiglu_alpha", 1.702), cfg_num(cfg, "swiglu_limit", 7.0));
    if (json_is_false(json_object_get(cfg, "attention_bias")))
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "convert: gpt-oss without attention biases is not supported");
    json_t *lt = json_object_get(cfg, "layer_types");
    for (int il = 0; json_is_array(lt) && il < L; il++) {
        const char *t = json_string_value(json_array_get(lt, (size_t)il));
        if (!t || strcmp(t, il % 2 ? "full_attention" : "sliding_attention"))
            return ob_fail(err, err_len, OB_ERR_UNSUPPORTED,
                           "%s/config.json: layer %d is '%s'; gpt-oss alternates sliding_attention and full_attention", dir,
                           il, t ? t : "?");
    }
    if (json_is_array(lt) && json_array_size(lt) != (size_t)L)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "%s/config.json: %zu layer_types for %d layers", dir, json_array_size(lt), L);
    json_t *rp = json_object_get(cfg, "rope_parameters");
    if (!rp) rp = json_object_get(cfg, "rope_scaling");
    const char *rt = json_string_value(json_object_get(rp, "rope_type"));
    if (!rt) rt = json_string_value(json_object_get(rp, "type"));
    if (!rt || strcmp(rt, "yarn") || !json_is_false(json_object_get(rp, "truncate")))
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED,
                       "%s/config.json: gpt-oss's rope is YaRN with truncate false (the loader keeps the exact range)", dir);
    return OB_OK;
}

ob_status ob_convert_gptoss(const char *dir, const char *hf_arch, void *config_json, const char *out_path,
                            const ob_convert_opts *o, bool *handled, char *err, size_t err_len) {
    json_t *cfg = config_json;
    *handled = !strcmp(hf_arch, "GptOssForCausalLM");
    if (!*handled) return OB_ERR_UNSUPPORTED;
    const int D = cfg_int(cfg, "hidden_size", 0), L = cfg_int(cfg, "num_hidden_layers", 0);
    const int H = cfg_int(cfg, "num_attention_heads", 0), Hkv = cfg_int(cfg, "num_key_value_heads", H);
    const int F = cfg_int(cfg, "intermediate_size", 0), hd = cfg_int(cfg, "head_dim", H > 0 ? D / H : 0);
    const int E = cfg_int(cfg, "num_local_experts", 0), k = cfg_int(cfg, "num_experts_per_tok", 0);
    const int win = cfg_int(cfg, "sliding_window", 0);
    if (D <= 0 || L <= 0 || L > 1024 || H <= 0 || Hkv <= 0 || H % Hkv || F <= 0 || hd <= 0 || hd % 2 || E <= 0 ||
        E > 4096 || k <= 0 || k > E || win <= 0)
        return ob_fail(err, err_len, OB_ERR_FORMAT,
                       "%s/config.json: implausible sizes (hidden %d, layers %d, heads %d/%d, ff %d, experts %d/%d, window %d)",
                       dir, D, L, H, Hkv, F, k, E, win);
    ob_status st = check_config(cfg, dir, L, err, err_len);
    if (st) return st;
    const bool tied = json_is_true(json_object_get(cfg, "tie_word_embeddings"));

    ob_conv c = {0};
    ob_gguf_writer *w = NULL;
    const ob_src_tensor **roles = NULL; /* [L][GX_NROLE] */
    gx_tensor *gx = NULL;               /* [L][6] */
    bool mxfp4 = false;
    st = ob_conv_load_sources(&c, dir, err, err_len);
    if (!st) st = ob_conv_keep(&c, roles = calloc((size_t)L * GX_NROLE, sizeof(*roles)), err, err_len);
    if (!st) st = ob_conv_keep(&c, gx = calloc((size_t)L * 6, sizeof(*gx)), err, err_len);
    for (int64_t i = 0; !st && i < c.src.n; i++) {
        const ob_src_tensor *s = &c.src.t[i];
        const char *rest = NULL, *gname = NULL;
        const long il = layer_of(s->name, &rest);
        if (il >= L) { st = ob_fail(err, err_len, OB_ERR_FORMAT, "convert: '%s' is past %d layers", s->name, L); break; }
        if (il >= 0 && !strncmp(rest, "mlp.experts.", 12)) {
            int r = 0;
            while (r < GX_NROLE && strcmp(rest + 12, g_roles[r])) r++;
            if (r < GX_NROLE) {
                roles[il * GX_NROLE + r] = s;
                continue;
            }
        }
        char name[96];
        if (il >= 0 && !strncmp(rest, "mlp.experts.", 12)) {
            /* an expert tensor of no known role: refused below */
        } else if (il >= 0) {
            for (size_t m = 0; m < OB_ARRAY_LEN(g_layer) && !gname; m++)
                if (!strcmp(rest, g_layer[m].hf)) gname = g_layer[m].gg;
            if (gname) snprintf(name, sizeof(name), "blk.%ld.%s", il, gname);
        } else if (!strcmp(s->name, "model.embed_tokens.weight")) {
            snprintf(name, sizeof(name), "token_embd.weight"), gname = name;
        } else if (!strcmp(s->name, "model.norm.weight")) {
            snprintf(name, sizeof(name), "output_norm.weight"), gname = name;
        } else if (!strcmp(s->name, "lm_head.weight")) {
            if (tied) continue;
            snprintf(name, sizeof(name), "output.weight"), gname = name;
        }
        if (!gname) {
            st = ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "convert: tensor '%s' has no GGUF name for %s", s->name, hf_arch);
            break;
        }
        if ((st = ob_conv_add(&c, s, name, o->type, err, err_len))) break;
        /* the router and every bias stay F32, as llama.cpp keeps them */
        if (strstr(name, "ffn_gate_inp") || strstr(name, ".bias")) c.out[c.n_out - 1].type = OB_TYPE_F32;
    }
    for (int il = 0; !st && il < L; il++)
        st = gx_layer(il, roles + (size_t)il * GX_NROLE, E, D, F, o->type, gx + il * 6, &mxfp4, err, err_len);
    if (st) goto done;
    w = ob_gguf_writer_new(3, 32);
    if (!w) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory"); goto done; }
    char key[128];
    const char *arch = "gpt-oss";
#define KEY(s) (snprintf(key, sizeof(key), "%s.%s", arch, s), key)
    ob_gguf_set_str(w, "general.architecture", arch);
    const char *base = strrchr(dir, '/');
    ob_gguf_set_str(w, "general.name", o->name ? o->name : base && base[1] ? base + 1 : dir);
    /* llama.cpp's MOSTLY_MXFP4_MOE (38): MXFP4 experts beside float tensors */
    const bool plain = o->type == OB_TYPE_F32 || o->type == OB_TYPE_F16 || o->type == OB_TYPE_BF16;
    const uint32_t ftype = o->type == OB_TYPE_F32 ? 0 : o->type == OB_TYPE_F16 ? 1 : (uint32_t)o->type;
    ob_gguf_set_u32(w, "general.file_type", mxfp4 && plain ? 38u : ftype);
    ob_gguf_set_u32(w, KEY("block_count"), (uint32_t)L);
    ob_gguf_set_u32(w, KEY("context_length"), (uint32_t)cfg_int(cfg, "max_position_embeddings", 131072));
    ob_gguf_set_u32(w, KEY("embedding_length"), (uint32_t)D);
    ob_gguf_set_u32(w, KEY("feed_forward_length"), (uint32_t)F);
    ob_gguf_set_u32(w, KEY("attention.head_count"), (uint32_t)H);
    ob_gguf_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)Hkv);
    if ((st = ob_conv_rope_keys(w, cfg, hf_arch, arch, err, err_len))) goto done;
    ob_gguf_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)cfg_num(cfg, "rms_norm_eps", 1e-5));
    ob_gguf_set_u32(w, KEY("expert_count"), (uint32_t)E);
    ob_gguf_set_u32(w, KEY("expert_used_count"), (uint32_t)k);
    ob_gguf_set_u32(w, KEY("attention.key_length"), (uint32_t)hd);
    ob_gguf_set_u32(w, KEY("attention.value_length"), (uint32_t)hd);
    ob_gguf_set_u32(w, KEY("attention.sliding_window"), (uint32_t)win);
    ob_gguf_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)F);
#undef KEY
    int64_t n_vocab = 0;
    if ((st = ob_convert_vocab_bpe(w, dir, &n_vocab, err, err_len))) goto done;
    for (int64_t i = 0; i < c.n_out; i++)
        if (!strcmp(c.out[i].name, "token_embd.weight") && c.out[i].ne[1] < n_vocab) {
            st = ob_fail(err, err_len, OB_ERR_FORMAT, "convert: %lld embedding rows for %lld tokens", (long long)c.out[i].ne[1],
                         (long long)n_vocab);
            goto done;
        }
    /* the checkpoint's plain tensors first: their fill callback indexes the writer's tensors */
    if ((st = ob_conv_write_tensors(&c, w, err, err_len))) goto done;
    for (int64_t i = 0; i < (int64_t)L * 6 && !st; i++)
        st = ob_gguf_add_tensor_fn(w, gx[i].name, gx[i].type, gx[i].n_dims, gx[i].ne, gx_fill, &gx[i], err, err_len);
    if (!st) st = ob_gguf_writer_write(w, out_path, err, err_len);
done:
    ob_gguf_writer_free(w);
    ob_conv_free(&c);
    return st;
}
