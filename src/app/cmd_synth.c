/* 1bit synth: random-weight models of real shapes, for speed comparisons: Qwen3 (the shapes
 * of ../shared/bench/ANCHORS.md), the hybrids of issue #33, Qwen3.5-27B (qwen35),
 * Qwen3.5-35B-A3B (qwen35moe: 256 routed experts and a gated shared one) and LFM2-1.2B (lfm2), and the dense families of issue #35, Phi-4-mini (phi3: fused qkv and
 * gate/up, LongRoPE tables of ones), SmolLM3-3B (smollm3) and MiniCPM4-8B (minicpm), with
 * the Qwen3 tokenizer's vocabulary (padded, or cut to the first n_vocab tokens and the
 * merges among them) at each model's vocabulary size. Weights are
 * N(0, 0.02), norms 1 (a recurrent layer's decay -1, its bias 0, so its state stays
 * bounded); quantized with our reference quantizers and, for Q4_K_M, the same per-tensor type
 * mix llama.cpp's quantizer picks for the tensors a Qwen3 has (a router, ffn_gate_inp, stays F32
 * as llama.cpp keeps it). */
#include "app/commands.h"
#include "core/common.h"
#include "format/gguf.h"
#include "format/quant.h"
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef enum ob_synth_arch {
    OB_SYN_QWEN3 = 0, OB_SYN_QWEN35 = 1, OB_SYN_LFM2 = 2, OB_SYN_PHI3 = 3, OB_SYN_SMOLLM3 = 4, OB_SYN_MINICPM = 5,
    OB_SYN_QWEN35MOE = 6
} ob_synth_arch;
static const char *const g_arch_name[] = {"qwen3", "qwen35", "lfm2", "phi3", "smollm3", "minicpm", "qwen35moe"};

typedef struct ob_shape {
    const char *name;
    ob_synth_arch arch;
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    bool tied;
    /* hybrids: qwen35 attends every 4th layer, with rope over n_rot of a head; its Gated
     * DeltaNet has lin_k key heads and lin_v value heads of lin_dim, a conv of d_conv taps.
     * lfm2: attn_mask bit il marks an attention layer, the others are short convs of d_conv. */
    int n_rot, lin_k, lin_v, lin_dim, d_conv;
    uint64_t attn_mask;
    float rope_base, norm_eps;
    /* qwen35moe: n_expert experts of n_ff_exp, n_expert_used a token, a shared one of
     * n_ff_shexp (n_ff unused) */
    int n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
} ob_shape;

static const ob_shape g_shapes[] = {
    {"qwen3-0.6b", OB_SYN_QWEN3, 1024, 28, 16, 8, 128, 3072, 151936, true, 128, 0, 0, 0, 0, 0, 1e6f, 1e-6f, 0, 0, 0, 0},
    {"qwen3-4b", OB_SYN_QWEN3, 2560, 36, 32, 8, 128, 9728, 151936, true, 128, 0, 0, 0, 0, 0, 1e6f, 1e-6f, 0, 0, 0, 0},
    {"qwen3-8b", OB_SYN_QWEN3, 4096, 36, 32, 8, 128, 12288, 151936, false, 128, 0, 0, 0, 0, 0, 1e6f, 1e-6f, 0, 0, 0, 0},
    /* Qwen3.5-27B (the shape of Qwen3.6-27B and Qwen3.8-27B): 16 x (3 DeltaNet + 1 attention) */
    {"qwen3.5-27b", OB_SYN_QWEN35, 5120, 64, 24, 4, 256, 17408, 248320, false, 64, 16, 48, 128, 4, 0, 1e7f, 1e-6f, 0, 0, 0, 0},
    /* Qwen3.5-35B-A3B (the shape of Qwen3.6-35B-A3B; transformers' Qwen3_5MoeTextConfig
     * defaults): 10 x (3 DeltaNet + 1 attention), 256 experts of 512, 8 a token, a shared 512 */
    {"qwen3.5-35b-a3b", OB_SYN_QWEN35MOE, 2048, 40, 16, 2, 256, 0, 248320, false, 64, 16, 32, 128, 4, 0, 1e7f, 1e-6f,
     256, 8, 512, 512},
    /* LFM2-1.2B: attention at layers 2, 5, 8, 10, 12, 14; block_ff_dim 12288 adjusted to 8192 */
    {"lfm2-1.2b", OB_SYN_LFM2, 2048, 16, 32, 8, 64, 8192, 65536, true, 64, 0, 0, 0, 3,
     (1u << 2) | (1u << 5) | (1u << 8) | (1u << 10) | (1u << 12) | (1u << 14), 1e6f, 1e-5f, 0, 0, 0, 0},
    /* Phi-4-mini: rope over three quarters of a head */
    {"phi-4-mini", OB_SYN_PHI3, 3072, 32, 24, 8, 128, 8192, 200064, true, 96, 0, 0, 0, 0, 0, 1e4f, 1e-5f, 0, 0, 0, 0},
    {"smollm3-3b", OB_SYN_SMOLLM3, 2048, 36, 16, 4, 128, 11008, 128256, true, 128, 0, 0, 0, 0, 0, 5e6f, 1e-6f, 0, 0, 0, 0},
    {"minicpm4-8b", OB_SYN_MINICPM, 4096, 32, 32, 2, 128, 16384, 73448, false, 128, 0, 0, 0, 0, 0, 1e4f, 1e-6f, 0, 0, 0, 0},
};
#define OB_SYNTH_SHAPES "qwen3-0.6b, qwen3-4b, qwen3-8b, qwen3.5-27b, qwen3.5-35b-a3b, lfm2-1.2b, phi-4-mini, smollm3-3b, minicpm4-8b"

typedef struct ob_synth_tensor {
    char name[64];
    ob_type type;
    int n_dims;
    int64_t ne[3]; /* ne[2]: experts (3-D), else 1 */
    bool is_norm;
    float fill; /* is_norm: every value this (norms 1, a recurrent layer's decay -1, its bias 0) */
} ob_synth_tensor;

typedef struct ob_synth {
    ob_synth_tensor *t;
    int n;
    uint64_t seed;
    int n_threads;
    bool fast; /* --fast: rows repeat every OB_SYNTH_FAST_ROWS (bench files in seconds) */
} ob_synth;

#define OB_SYNTH_FAST_ROWS 64

/* llama.cpp's "use more bits" layer rule for Q4_K_M: first and last eighth, and every
 * third layer in between. */
static bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static ob_type pick_type(const char *ftype, const char *role, int il, int n_layer, bool is_output, ob_type base) {
    if (!strcasecmp(ftype, "Q4_K_M")) {
        if (is_output) return OB_TYPE_Q6_K;
        if (!strcmp(role, "attn_v") || !strcmp(role, "ffn_down")) return more_bits(il, n_layer) ? OB_TYPE_Q6_K : OB_TYPE_Q4_K;
        return OB_TYPE_Q4_K;
    }
    /* An untied token embedding of a ternary / 1.x-bit file keeps more bits, as in
     * llama.cpp's quantizer (a lookup table quantized this hard loses the tokens). */
    if (!strcmp(role, "token_embd") && !is_output) {
        if (base == OB_TYPE_TQ1_0 || base == OB_TYPE_TQ2_0) return OB_TYPE_Q4_K;
        if (base == OB_TYPE_IQ1_S || base == OB_TYPE_IQ1_M || base == OB_TYPE_IQ2_XXS || base == OB_TYPE_IQ2_XS) return OB_TYPE_Q2_K;
    }
    if (is_output && (base == OB_TYPE_TQ1_0 || base == OB_TYPE_TQ2_0 || base == OB_TYPE_Q1_0 ||
                      base == OB_TYPE_IQ1_S || base == OB_TYPE_IQ1_M))
        return OB_TYPE_Q6_K; /* the output matrix keeps precision in low-bit files */
    return base;
}

/* Fast deterministic normal samples per tensor (seeded by tensor index and row). */
static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct { ob_synth *s; int64_t idx; char *buf; int64_t row0, row1; size_t rsize; } ob_fill_job;

static void *fill_rows(void *arg) {
    ob_fill_job *j = arg;
    const ob_synth_tensor *t = &j->s->t[j->idx];
    int64_t n = t->ne[0];
    float *row = malloc(sizeof(float) * (size_t)n);
    if (!row) return (void *)1;
    for (int64_t r = j->row0; r < j->row1; r++) {
        uint64_t st = mix64(j->s->seed ^ mix64((uint64_t)j->idx * 0x100000001b3ull + (uint64_t)r));
        for (int64_t i = 0; i < n; i += 2) {
            st += 0x9E3779B97F4A7C15ull;
            uint64_t a = mix64(st);
            double u1 = ((a >> 11) + 1) * (1.0 / 9007199254740993.0), u2 = (a & 0x7ff) / 2048.0 + 1.0 / 4096;
            double rad = sqrt(-2.0 * log(u1));
            row[i] = (float)(0.02 * rad * cos(6.283185307179586 * u2));
            if (i + 1 < n) row[i + 1] = (float)(0.02 * rad * sin(6.283185307179586 * u2));
        }
        if (t->is_norm) for (int64_t i = 0; i < n; i++) row[i] = t->fill;
        char *dst = j->buf + (size_t)r * j->rsize;
        const ob_type_traits *tr = ob_type_traits_get(t->type);
        if (t->type == OB_TYPE_F32) memcpy(dst, row, sizeof(float) * (size_t)n);
        else tr->from_float(row, dst, n);
    }
    free(row);
    return NULL;
}

static bool fill(void *ctx, int64_t index, void *buf, size_t size) {
    ob_synth *s = ctx;
    const ob_synth_tensor *t = &s->t[index];
    int64_t rows = t->ne[1] * t->ne[2];
    size_t rsize = ob_row_size(t->type, t->ne[0]);
    if (rsize * (size_t)rows != size) return false;
    /* --fast: only the first rows are drawn and quantized; the rest repeat them. Every row
     * is still a valid block sequence at its own address, so a matvec reads as many
     * distinct bytes as with a full draw (rows this far apart never share a cache line). */
    const int64_t all_rows = rows;
    if (s->fast && rows > OB_SYNTH_FAST_ROWS) rows = OB_SYNTH_FAST_ROWS;
    int nt = s->n_threads;
    if (rows < nt * 4) nt = 1;
    pthread_t th[64];
    ob_fill_job jobs[64];
    for (int k = 0; k < nt; k++) {
        jobs[k] = (ob_fill_job){s, index, buf, rows * k / nt, rows * (k + 1) / nt, rsize};
        if (nt > 1) pthread_create(&th[k], NULL, fill_rows, &jobs[k]);
    }
    bool ok = true;
    if (nt == 1) ok = fill_rows(&jobs[0]) == NULL;
    else for (int k = 0; k < nt; k++) { void *r; pthread_join(th[k], &r); if (r) ok = false; }
    for (int64_t r = rows; ok && r < all_rows; r += rows) {
        const int64_t c = OB_MIN(rows, all_rows - r);
        memcpy((char *)buf + (size_t)r * rsize, buf, (size_t)c * rsize);
    }
    return ok;
}

/* Whether token text t of a tokenizer.json's vocab has an id below n. */
static bool in_vocab(json_t *vocab, const char *t, size_t len, int n) {
    char buf[256];
    if (len >= sizeof(buf)) return false;
    memcpy(buf, t, len);
    buf[len] = 0;
    json_t *id = json_object_get(vocab, buf);
    return id && json_integer_value(id) >= 0 && json_integer_value(id) < n;
}

/* Vocabulary, merges and special tokens from a Hugging Face tokenizer.json, padded to
 * n_vocab with [PAD<i>] tokens as llama.cpp's converter does, or cut to its first n_vocab
 * tokens and the merges among them. */
static int add_vocab(ob_gguf_writer *w, const char *path, int n_vocab) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) { fprintf(stderr, "1bit synth: %s: %s\n", path, je.text); return -1; }
    json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
    json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_object(vocab) || !json_is_array(merges)) {
        fprintf(stderr, "1bit synth: %s is not a BPE tokenizer.json\n", path);
        json_decref(root);
        return -1;
    }
    char **toks = calloc((size_t)n_vocab, sizeof(char *));
    int32_t *types = malloc(sizeof(int32_t) * (size_t)n_vocab);
    const char *k;
    json_t *v;
    json_object_foreach(vocab, k, v) {
        json_int_t id = json_integer_value(v);
        if (id >= 0 && id < n_vocab) { toks[id] = strdup(k); types[id] = 1; }
    }
    int eos = -1, bos = -1, pad = -1;
    size_t i;
    json_array_foreach(added, i, v) {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        const char *c = json_string_value(json_object_get(v, "content"));
        if (!c || id < 0 || id >= n_vocab) continue;
        free(toks[id]);
        toks[id] = strdup(c);
        types[id] = json_is_true(json_object_get(v, "special")) ? 3 : 4;
        if (!strcmp(c, "<|im_end|>")) eos = (int)id;
        if (!strcmp(c, "<|endoftext|>")) { pad = (int)id; bos = (int)id; }
    }
    for (int t = 0; t < n_vocab; t++) {
        if (toks[t]) continue;
        char b[32];
        snprintf(b, sizeof(b), "[PAD%d]", t);
        toks[t] = strdup(b);
        types[t] = 5; /* unused */
    }
    size_t nm = 0;
    char **ms = malloc(sizeof(char *) * (json_array_size(merges) ? json_array_size(merges) : 1));
    json_array_foreach(merges, i, v) {
        char *m;
        if (json_is_string(v)) m = strdup(json_string_value(v));
        else {
            const char *a = json_string_value(json_array_get(v, 0)), *b2 = json_string_value(json_array_get(v, 1));
            size_t la = a ? strlen(a) : 0, lb = b2 ? strlen(b2) : 0;
            m = malloc(la + lb + 2);
            snprintf(m, la + lb + 2, "%s %s", a ? a : "", b2 ? b2 : "");
        }
        /* a cut vocabulary keeps the merges of its own tokens into its own tokens */
        const char *sp = strchr(m, ' ');
        char joined[256];
        const size_t la = sp ? (size_t)(sp - m) : 0, lb = sp ? strlen(sp + 1) : 0;
        bool keep = sp && la + lb < sizeof(joined);
        if (keep) {
            memcpy(joined, m, la);
            memcpy(joined + la, sp + 1, lb);
            keep = in_vocab(vocab, m, la, n_vocab) && in_vocab(vocab, sp + 1, lb, n_vocab) &&
                   in_vocab(vocab, joined, la + lb, n_vocab);
        }
        if (keep) ms[nm++] = m;
        else free(m);
    }
    ob_gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    ob_gguf_set_str(w, "tokenizer.ggml.pre", "qwen2");
    ob_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, NULL, (uint64_t)n_vocab);
    ob_gguf_set_arr(w, "tokenizer.ggml.token_type", OB_GGUF_INT32, types, (uint64_t)n_vocab);
    ob_gguf_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)ms, NULL, nm);
    if (eos >= 0) ob_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    if (pad >= 0) ob_gguf_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)pad);
    if (bos >= 0) ob_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    ob_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    for (int t = 0; t < n_vocab; t++) free(toks[t]);
    for (size_t m = 0; m < nm; m++) free(ms[m]);
    free(toks);
    free(ms);
    free(types);
    json_decref(root);
    return 0;
}

static const char *default_tokenizer(void) {
    static char buf[4096];
    const char *sh = getenv("ONEBIT_SHARED");
    const char *cands[] = {"../shared/data/tokenizers/qwen3/tokenizer.json", "shared/data/tokenizers/qwen3/tokenizer.json"};
    if (sh) {
        snprintf(buf, sizeof(buf), "%s/data/tokenizers/qwen3/tokenizer.json", sh);
        if (access(buf, R_OK) == 0) return buf;
    }
    for (size_t i = 0; i < OB_ARRAY_LEN(cands); i++)
        if (access(cands[i], R_OK) == 0) return cands[i];
    return NULL;
}

int ob_cmd_synth(int argc, char **argv) {
    const char *shape_name = NULL, *type_name = "F16", *out = NULL, *tok_path = NULL;
    uint64_t seed = 42;
    bool dry = false, fast = false;
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--shape") && v) { shape_name = v; i++; }
        else if (!strcmp(a, "--type") && v) { type_name = v; i++; }
        else if (!strcmp(a, "-o") && v) { out = v; i++; }
        else if (!strcmp(a, "--tokenizer") && v) { tok_path = v; i++; }
        else if (!strcmp(a, "--seed") && v) { seed = strtoull(v, NULL, 10); i++; }
        else if (!strcmp(a, "-t") && v) { threads = atoi(v); i++; }
        else if (!strcmp(a, "--dry-run")) dry = true;
        else if (!strcmp(a, "--fast")) fast = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: 1bit synth --shape SHAPE --type T -o FILE [--tokenizer tokenizer.json]\n"
                   "       [--seed N] [-t N] [--dry-run] [--fast]\n"
                   "  --dry-run: print the tensor bytes of the file and write nothing\n"
                   "  --fast: draw and quantize 64 rows per tensor and repeat them (for speed benchmarks)\n"
                   "  T: F32, F16, BF16, Q4_K_M, or any single type (Q8_0, Q4_0, TQ2_0, Q1_0, IQ4_XS, ...)\n"
                   "  SHAPE: " OB_SYNTH_SHAPES "\n");
            return 0;
        } else { fprintf(stderr, "1bit synth: unknown option '%s'\n", a); return 2; }
    }
    if (!shape_name || (!out && !dry)) { fprintf(stderr, "1bit synth: --shape and -o are required\n"); return 2; }
    const ob_shape *sh = NULL;
    for (size_t i = 0; i < OB_ARRAY_LEN(g_shapes); i++) if (!strcmp(g_shapes[i].name, shape_name)) sh = &g_shapes[i];
    if (!sh) { fprintf(stderr, "1bit synth: unknown shape '%s' (" OB_SYNTH_SHAPES ")\n", shape_name); return 2; }
    ob_type base;
    bool mix = !strcasecmp(type_name, "Q4_K_M");
    if (mix) base = OB_TYPE_Q4_K;
    else if (!ob_type_from_name(type_name, &base)) { fprintf(stderr, "1bit synth: unknown type '%s'\n", type_name); return 2; }
    const ob_type_traits *tr = ob_type_traits_get(base);
    if (!tr || (!tr->from_float && base != OB_TYPE_F32)) { fprintf(stderr, "1bit synth: no quantizer for %s\n", type_name); return 2; }
    if (!tok_path) tok_path = default_tokenizer();
    if (!tok_path) { fprintf(stderr, "1bit synth: Qwen3 tokenizer.json not found (--tokenizer FILE)\n"); return 2; }
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;

    ob_gguf_writer *w = ob_gguf_writer_new(3, 32);
    const char *an = g_arch_name[sh->arch];
    char key[96];
#define KEY(k) (snprintf(key, sizeof(key), "%s." k, an), key)
    ob_gguf_set_str(w, "general.architecture", an);
    ob_gguf_set_str(w, "general.type", "model");
    char gname[96];
    snprintf(gname, sizeof(gname), "synthetic %s %s", sh->name, type_name);
    ob_gguf_set_str(w, "general.name", gname);
    ob_gguf_set_u32(w, KEY("context_length"), 40960);
    ob_gguf_set_u32(w, KEY("embedding_length"), (uint32_t)sh->n_embd);
    ob_gguf_set_u32(w, KEY("block_count"), (uint32_t)sh->n_layer);
    const bool q35 = sh->arch == OB_SYN_QWEN35 || sh->arch == OB_SYN_QWEN35MOE;
    if (sh->n_expert) { /* as llama.cpp's converter writes Qwen3.5-MoE's: no dense width */
        ob_gguf_set_u32(w, KEY("expert_count"), (uint32_t)sh->n_expert);
        ob_gguf_set_u32(w, KEY("expert_used_count"), (uint32_t)sh->n_expert_used);
        ob_gguf_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)sh->n_ff_exp);
        ob_gguf_set_u32(w, KEY("expert_shared_feed_forward_length"), (uint32_t)sh->n_ff_shexp);
    } else {
        ob_gguf_set_u32(w, KEY("feed_forward_length"), (uint32_t)sh->n_ff);
    }
    ob_gguf_set_u32(w, KEY("attention.head_count"), (uint32_t)sh->n_head);
    if (sh->arch == OB_SYN_LFM2) { /* 0 for a conv layer, as llama.cpp's converter writes it */
        int32_t kv[64];
        for (int il = 0; il < sh->n_layer; il++) kv[il] = sh->attn_mask >> il & 1 ? sh->n_head_kv : 0;
        ob_gguf_set_arr(w, KEY("attention.head_count_kv"), OB_GGUF_INT32, kv, (uint64_t)sh->n_layer);
        ob_gguf_set_u32(w, KEY("shortconv.l_cache"), (uint32_t)sh->d_conv);
    } else {
        ob_gguf_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)sh->n_head_kv);
        ob_gguf_set_u32(w, KEY("attention.key_length"), (uint32_t)sh->head_dim);
        ob_gguf_set_u32(w, KEY("attention.value_length"), (uint32_t)sh->head_dim);
    }
    if (q35) {
        ob_gguf_set_u32(w, KEY("rope.dimension_count"), (uint32_t)sh->n_rot);
        ob_gguf_set_u32(w, KEY("ssm.conv_kernel"), (uint32_t)sh->d_conv);
        ob_gguf_set_u32(w, KEY("ssm.state_size"), (uint32_t)sh->lin_dim);
        ob_gguf_set_u32(w, KEY("ssm.group_count"), (uint32_t)sh->lin_k);
        ob_gguf_set_u32(w, KEY("ssm.time_step_rank"), (uint32_t)sh->lin_v);
        ob_gguf_set_u32(w, KEY("ssm.inner_size"), (uint32_t)(sh->lin_v * sh->lin_dim));
        ob_gguf_set_u32(w, KEY("full_attention_interval"), 4);
    }
    if (sh->arch == OB_SYN_PHI3) { /* as llama.cpp's converter writes Phi-4-mini's */
        ob_gguf_set_u32(w, KEY("rope.dimension_count"), (uint32_t)sh->n_rot);
        ob_gguf_set_u32(w, KEY("rope.scaling.original_context_length"), 4096);
        ob_gguf_set_f32(w, KEY("rope.scaling.attn_factor"), sqrtf(1.0f + logf(32.0f) / logf(4096.0f)));
        ob_gguf_set_u32(w, KEY("attention.sliding_window"), 0);
    }
    if (sh->arch == OB_SYN_MINICPM) { /* MiniCPM4-8B's scale_emb, scale_depth, dim_model_base */
        ob_gguf_set_f32(w, KEY("embedding_scale"), 12.0f);
        ob_gguf_set_f32(w, KEY("residual_scale"), 1.4f / sqrtf((float)sh->n_layer));
        ob_gguf_set_f32(w, KEY("logit_scale"), (float)sh->n_embd / 256.0f);
        ob_gguf_set_str(w, KEY("rope.scaling.type"), "longrope");
    }
    ob_gguf_set_f32(w, KEY("rope.freq_base"), sh->rope_base);
    ob_gguf_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), sh->norm_eps);
#undef KEY
    if (add_vocab(w, tok_path, sh->n_vocab)) { ob_gguf_writer_free(w); return 1; }

    int cap = 8 + sh->n_layer * 24;
    ob_synth s = {calloc((size_t)cap, sizeof(ob_synth_tensor)), 0, seed, threads, fast};
    const int64_t E = sh->n_embd, hd = sh->head_dim, F = sh->n_ff, KV = (int64_t)sh->n_head_kv * hd;
    /* qwen35's attention projects each head's query and its output gate */
    const int64_t Q = (int64_t)sh->n_head * hd, QP = q35 ? 2 * Q : Q;
    const int64_t LI = (int64_t)sh->lin_v * sh->lin_dim, LC = 2 * (int64_t)sh->lin_k * sh->lin_dim + LI;
#define T2(nm, role, il, a, b, out_) do { ob_synth_tensor *t = &s.t[s.n++]; snprintf(t->name, sizeof(t->name), "%s", nm); \
        t->n_dims = 2; t->ne[0] = a; t->ne[1] = b; t->ne[2] = 1; \
        t->type = pick_type(type_name, role, il, sh->n_layer, out_, base); } while (0)
/* n_expert matrices [a, b] (an expert tensor), typed as role's 2-D one */
#define T3(nm, role, il, a, b) do { T2(nm, role, il, a, b, false); s.t[s.n - 1].n_dims = 3; \
        s.t[s.n - 1].ne[2] = sh->n_expert; } while (0)
#define T1V(nm, a, v) do { ob_synth_tensor *t = &s.t[s.n++]; snprintf(t->name, sizeof(t->name), "%s", nm); \
        t->n_dims = 1; t->ne[0] = a; t->ne[1] = t->ne[2] = 1; t->type = OB_TYPE_F32; t->is_norm = true; t->fill = v; } while (0)
#define T1(nm, a) T1V(nm, a, 1.0f)
/* a small random matrix kept in F32 (conv taps: llama.cpp's converter and quantizer keep them so) */
#define T2F(nm, a, b) do { ob_synth_tensor *t = &s.t[s.n++]; snprintf(t->name, sizeof(t->name), "%s", nm); \
        t->n_dims = 2; t->ne[0] = a; t->ne[1] = b; t->ne[2] = 1; t->type = OB_TYPE_F32; } while (0)
    const bool fused = sh->arch == OB_SYN_PHI3, qk_norm = sh->arch == OB_SYN_QWEN3 || q35;
    if (sh->arch == OB_SYN_PHI3 || sh->arch == OB_SYN_MINICPM) {
        T1("rope_factors_short.weight", sh->n_rot / 2);
        T1("rope_factors_long.weight", sh->n_rot / 2);
    }
    T2("token_embd.weight", "token_embd", 0, E, sh->n_vocab, sh->tied);
    T1(sh->arch == OB_SYN_LFM2 ? "token_embd_norm.weight" : "output_norm.weight", E);
    if (!sh->tied) T2("output.weight", "output", 0, E, sh->n_vocab, true);
    char nm[64];
    for (int il = 0; il < sh->n_layer; il++) {
#define NM(x) (snprintf(nm, sizeof(nm), "blk.%d." x, il), nm)
        const bool rec = (q35 && (il + 1) % 4 != 0) ||
                         (sh->arch == OB_SYN_LFM2 && !(sh->attn_mask >> il & 1));
        T1(NM("attn_norm.weight"), E);
        if (rec && q35) {
            T2(NM("attn_qkv.weight"), "attn_qkv", il, E, LC, false);
            T2(NM("attn_gate.weight"), "attn_gate", il, E, LI, false);
            T2F(NM("ssm_conv1d.weight"), sh->d_conv, LC);
            T1V(NM("ssm_dt.bias"), sh->lin_v, 0.0f);
            T1V(NM("ssm_a"), sh->lin_v, -1.0f);
            T2(NM("ssm_beta.weight"), "ssm_beta", il, E, sh->lin_v, false);
            T2(NM("ssm_alpha.weight"), "ssm_alpha", il, E, sh->lin_v, false);
            T1(NM("ssm_norm.weight"), sh->lin_dim);
            T2(NM("ssm_out.weight"), "ssm_out", il, LI, E, false);
        } else if (rec) {
            T2(NM("shortconv.in_proj.weight"), "shortconv_in", il, E, 3 * E, false);
            T2F(NM("shortconv.conv.weight"), sh->d_conv, E);
            T2(NM("shortconv.out_proj.weight"), "shortconv_out", il, E, E, false);
        } else if (fused) {
            T2(NM("attn_qkv.weight"), "attn_qkv", il, E, Q + 2 * KV, false);
            T2(NM("attn_output.weight"), "attn_output", il, Q, E, false);
        } else {
            T2(NM("attn_q.weight"), "attn_q", il, E, QP, false);
            T2(NM("attn_k.weight"), "attn_k", il, E, KV, false);
            T2(NM("attn_v.weight"), "attn_v", il, E, KV, false);
            T2(NM("attn_output.weight"), "attn_output", il, Q, E, false);
            if (qk_norm) T1(NM("attn_q_norm.weight"), hd);
            if (qk_norm) T1(NM("attn_k_norm.weight"), hd);
        }
        T1(q35 ? NM("post_attention_norm.weight") : NM("ffn_norm.weight"), E);
        if (sh->n_expert) {
            T2F(NM("ffn_gate_inp.weight"), E, sh->n_expert);
            T3(NM("ffn_gate_exps.weight"), "ffn_gate", il, E, sh->n_ff_exp);
            T3(NM("ffn_up_exps.weight"), "ffn_up", il, E, sh->n_ff_exp);
            T3(NM("ffn_down_exps.weight"), "ffn_down", il, sh->n_ff_exp, E);
            T2(NM("ffn_gate_inp_shexp.weight"), "ffn_gate_inp_shexp", il, E, 1, false);
            T2(NM("ffn_gate_shexp.weight"), "ffn_gate", il, E, sh->n_ff_shexp, false);
            T2(NM("ffn_up_shexp.weight"), "ffn_up", il, E, sh->n_ff_shexp, false);
            T2(NM("ffn_down_shexp.weight"), "ffn_down", il, sh->n_ff_shexp, E, false);
            continue;
        }
        if (!fused) T2(NM("ffn_gate.weight"), "ffn_gate", il, E, F, false);
        T2(NM("ffn_up.weight"), "ffn_up", il, E, fused ? 2 * F : F, false);
        T2(NM("ffn_down.weight"), "ffn_down", il, F, E, false);
#undef NM
    }
#undef T1
#undef T1V
#undef T2F
#undef T3
#undef T2
    char err[512];
    int rc = 0;
    if (dry) {
        uint64_t bytes = 0;
        for (int i = 0; i < s.n; i++)
            bytes += (ob_row_size(s.t[i].type, s.t[i].ne[0]) * (uint64_t)(s.t[i].ne[1] * s.t[i].ne[2]) + 31) & ~(uint64_t)31;
        printf("%s %s tensor bytes %llu\n", sh->name, type_name, (unsigned long long)bytes);
        ob_gguf_writer_free(w);
        free(s.t);
        return 0;
    }
    for (int i = 0; i < s.n && !rc; i++) {
        if (ob_gguf_add_tensor_fn(w, s.t[i].name, s.t[i].type, s.t[i].n_dims, s.t[i].ne, fill, &s, err, sizeof(err))) {
            fprintf(stderr, "1bit synth: %s\n", err);
            rc = 1;
        }
    }
    if (!rc && ob_gguf_writer_write(w, out, err, sizeof(err))) { fprintf(stderr, "1bit synth: %s\n", err); rc = 1; }
    if (!rc) fprintf(stderr, "1bit synth: wrote %s (%s, %s)\n", out, sh->name, type_name);
    ob_gguf_writer_free(w);
    free(s.t);
    return rc;
}
