/* `1bit convert`: a Hugging Face folder (config.json, *.safetensors or pytorch_model.bin,
 * tokenizer.json / vocab.txt) -> GGUF with llama.cpp's metadata keys and tensor names.
 * Source tensors are read in place (mmap); nothing is written unless the whole
 * conversion succeeds (the GGUF writer renames a finished temporary file). */
#ifndef OB_CONVERT_CONVERT_H
#define OB_CONVERT_CONVERT_H

#include "format/gguf.h"

/* ---- source tensors (safetensors.c, pickle.c) -------------------------------------- */

/* One tensor of the source checkpoint. Shape is in PyTorch order (outermost first). */
typedef struct ob_src_tensor {
    char *name;
    ob_type type;            /* F32, F16 or BF16 (other dtypes: OB_TYPE_COUNT, never converted) */
    char dtype[8];           /* the source's dtype name, for messages */
    int n_dims;
    int64_t shape[4];
    const void *data;        /* into a mapping owned by the set */
    size_t size;
} ob_src_tensor;

typedef struct ob_src_set {
    ob_src_tensor *t;
    int64_t n, cap;
    void **maps; size_t *map_len; int n_maps;
} ob_src_set;

/* Adds every tensor of one .safetensors file (mmap; all offsets checked). */
ob_status ob_st_load(ob_src_set *s, const char *path, char *err, size_t err_len);
/* Adds every tensor of a PyTorch zip checkpoint; refuses pickles that would run code. */
ob_status ob_pt_load(ob_src_set *s, const char *path, char *err, size_t err_len);
const ob_src_tensor *ob_src_find(const ob_src_set *s, const char *name);
void ob_src_free(ob_src_set *s);
/* Appends a tensor record (name copied). For the readers. */
ob_status ob_src_add(ob_src_set *s, const char *name, size_t name_len, const char *dtype, int n_dims,
                     const int64_t *shape, const void *data, size_t size, char *err, size_t err_len);
/* Keeps a mapping to unmap at ob_src_free. */
ob_status ob_src_keep_map(ob_src_set *s, void *map, size_t len, char *err, size_t err_len);

/* ---- tokenizer -> tokenizer.ggml.* (hf_vocab.c) -------------------------------------- */

/* Writes the tokenizer of a HF folder (tokenizer.json, else vocab.txt) as GGUF metadata.
 * Returns the vocabulary size in *n_vocab. Refuses tokenizer models we cannot run. */
ob_status ob_convert_vocab(ob_gguf_writer *w, const char *dir, int type_vocab_size, int64_t *n_vocab,
                           char *err, size_t err_len);

/* Byte-level BPE (tokenizer.json) as a "gpt2" GGUF tokenizer, for the decoder families;
 * bos/eos ids come from config.json, the chat template from tokenizer_config.json. */
ob_status ob_convert_vocab_bpe(ob_gguf_writer *w, const char *dir, int64_t *n_vocab, char *err, size_t err_len);

/* ---- the conversion (hf_model.c: encoders and the shared machinery; hf_decoder.c) ---- */

typedef struct ob_convert_opts {
    ob_type type;            /* type of 2-D weights; 1-D tensors and norms stay F32 */
    const char *name;        /* general.name; NULL = folder name */
} ob_convert_opts;

ob_status ob_convert_hf(const char *dir, const char *out_path, const ob_convert_opts *o, char *err, size_t err_len);

/* One output tensor: a source tensor, renamed, possibly with leading rows dropped or the
 * rows of each head reordered. */
typedef struct ob_out_tensor {
    char name[96];
    const ob_src_tensor *src;
    int64_t skip_rows;       /* leading rows dropped (RoBERTa position padding) */
    int permute_heads;       /* > 0: llama.cpp's q/k row order for rope on adjacent pairs */
    const ob_src_tensor **parts; /* n_parts > 0: src unused; the parts' rows one after another
                                    (a mixture's per-expert matrices as one 3-D tensor) */
    int n_parts;
    /* head_rows > 0: a piece of every head (MLA's kv_b split into llama.cpp's attn_k_b and
     * attn_v_b): the source's rows are heads of head_rows each, and head h of this 3-D tensor
     * [ne0, ne1, n_head] is its rows [row0, row0 + ne1) (transposed: [row0, row0 + ne0)) */
    int64_t head_rows, row0;
    bool transpose;
    ob_type type;
    int n_dims;
    int64_t ne[4];           /* GGUF order */
} ob_out_tensor;

typedef struct ob_conv {
    ob_src_set src;
    ob_out_tensor *out;      /* [src.n] at most */
    int64_t n_out;
    float *buf;              /* one tensor as f32 during writing */
    size_t buf_len;
    void **keep;             /* [n_keep] freed with the conversion (stacked tensors' part lists) */
    int n_keep, cap_keep;
} ob_conv;

/* Frees p with c (NULL p: out of memory, reported). */
ob_status ob_conv_keep(ob_conv *c, void *p, char *err, size_t err_len);

/* Reads every *.safetensors of dir (name order), else pytorch_model.bin. */
ob_status ob_conv_load_sources(ob_conv *c, const char *dir, char *err, size_t err_len);
/* Adds source s as GGUF tensor name (shape reversed); checks for duplicates. */
ob_status ob_conv_add(ob_conv *c, const ob_src_tensor *s, const char *name, ob_type want, char *err, size_t err_len);
/* Adds n 2-D source tensors of one shape and dtype, stacked on a new outermost dimension, as
 * GGUF tensor name [cols, rows, n]; parts must live as long as c (ob_conv_keep). */
ob_status ob_conv_add_stack(ob_conv *c, const ob_src_tensor **parts, int n, const char *name, ob_type want, char *err,
                            size_t err_len);
/* Adds rows [row0, row0 + sub) of each of n_head heads of the 2-D source s (its rows are
 * n_head blocks of equal height) as GGUF tensor name, 3-D: [cols, sub, n_head], or with
 * transpose [sub, cols, n_head] (each head's block transposed). */
ob_status ob_conv_add_heads(ob_conv *c, const ob_src_tensor *s, const char *name, ob_type want, int64_t n_head,
                            int64_t row0, int64_t sub, bool transpose, char *err, size_t err_len);
/* Registers every output tensor with the writer (data produced at write time). */
ob_status ob_conv_write_tensors(ob_conv *c, ob_gguf_writer *w, char *err, size_t err_len);
void ob_conv_free(ob_conv *c);

/* rope.freq_base and the rope scaling keys of a decoder's config.json, read and written as
 * llama.cpp's converter does (hf_decoder.c; linear and yarn: llama3 is Llama's alone). */
ob_status ob_conv_rope_keys(ob_gguf_writer *w, void *config_json, const char *hf_arch, const char *arch, char *err,
                            size_t err_len);

/* GptOssForCausalLM (hf_gptoss.c): as ob_convert_decoder, for gpt-oss. */
ob_status ob_convert_gptoss(const char *dir, const char *hf_arch, void *config_json, const char *out_path,
                            const ob_convert_opts *o, bool *handled, char *err, size_t err_len);

/* Decoder families (hf_decoder.c): LlamaForCausalLM, Qwen2/Qwen3 ForCausalLM, Qwen3Model,
 * Qwen3MoeForCausalLM, and the deepseek2 family (DeepseekV2/V3ForCausalLM, Glm4MoeLiteForCausalLM).
 * Returns OB_ERR_UNSUPPORTED without writing when hf_arch is not one of them and
 * *handled is false. */
ob_status ob_convert_decoder(const char *dir, const char *hf_arch, void *config_json, const char *out_path,
                             const ob_convert_opts *o, bool *handled, char *err, size_t err_len);

#endif
